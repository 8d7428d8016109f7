// KV-cache quantizers in GLSL: the bit-exact twins of engine/kv/kv_quant.c (the contract is in
// engine/kv/kv_quant.h): f16 parameters, codes, the packed group layout, and the cheap per-element
// decode used inside attention loops. 32-bit types only; with WK_KVQ_LANES the encoder shares a
// group between the lanes of a subgroup (subgroup arithmetic, shuffle and ballot).
//
// How exactness is kept on any Vulkan implementation (why the code looks the way it does):
//   - Only + - * are used on values that reach the output; they are correctly rounded in Vulkan
//     and every one that feeds a comparison or a stored value is `precise` (no a*b+c -> fma).
//     Division is never used (1/G is built from bits); sqrt() only makes a guess that an exact
//     test then corrects, as in the C twin.
//   - f32 <-> f16 are integer code. GLSL leaves packHalf2x16's rounding and overflow to the
//     implementation, and we do not want to depend on every driver keeping f16 subnormals (the
//     steps of tiny groups) through unpackHalf2x16; both run once per group, so this is cheap.
//     (Mesa 22's lavapipe gives the same bits from the builtins; Mesa 25's did not in attention_paged.)
//   - Comparisons, min, max, clamp and |x| of data values are done on integer order keys of the
//     float bits (wk_kvq_key). Vulkan lets an implementation flush f32 denormals in any float op,
//     comparisons included, so `x >= 0.0` on a tiny negative x could differ from C; keys cannot.
//     What is left to float arithmetic (squares, hi - lo, xc - min) can only change under flushing
//     when a denormal-sized term decides a rounding of a normal sum: constructible, never met by
//     data (see the header's note on denormals). lavapipe does not flush.
//   - Selection (the percentile threshold) is a radix select on keys: order-free, like the C sort.
//
// Usage: set WK_KVQ_GMAX (default 256) to the largest G the including shader needs, then
// #include "kv_quant.glsl". Encode (L lanes of a subgroup a group): lane l < L fills wk_kvq_x[m]
// with element l + L m (m < G/L), every lane calls wk_kvq_encode_group(..., l, L); the group
// (wk_kvq_encode's byte layout) is then in wk_kvq_w[0 .. wk_kvq_group_words()). Decode: per group
// wk_kvq_affine(); per element wk_kvq_code_*() then wk_kvq_dequant() (bitfield extract, one
// int->float conversion, one fma), or wk_kvq_dequant4() for four codes at once (b = 2, 4).
// Define WK_KVQ_DECODE_ONLY to leave out the encoder and its private arrays.

#ifndef WK_KVQ_GLSL
#define WK_KVQ_GLSL

#ifndef WK_KVQ_GMAX
#define WK_KVQ_GMAX 256
#endif

#define WK_KVQ_QUEST 0
#define WK_KVQ_PERCENTILE 1
#define WK_KVQ_ABSMAX 2

// ---- constants: the same f32 values as kv_quant.c, given as bit patterns because GLSL has no hex
// float literals and a decimal literal would depend on the compiler's (double) rounding ----
float wk_kvq_quest_c2(int bits) { // (2*alpha_b/(2^b-1))^2
    return uintBitsToFloat(bits == 2 ? 0x3F7DCC4Cu : bits == 3 ? 0x3EAFD496u : 0x3DE61943u);
}
float wk_kvq_absmax_c(int bits) { // 2/(2^b-1)
    return uintBitsToFloat(bits == 2 ? 0x3F2AAAABu : bits == 3 ? 0x3E924925u : 0x3E088889u);
}
float wk_kvq_pct_c(int bits) { // 1/(2^b-1)
    return uintBitsToFloat(bits == 2 ? 0x3EAAAAABu : bits == 3 ? 0x3E124925u : 0x3D888889u);
}

int wk_kvq_params_per_group(int kind) { return kind == WK_KVQ_PERCENTILE ? 2 : 1; }
uint wk_kvq_code_bytes(int bits, int G) { return uint(G * bits) >> 3; }
uint wk_kvq_group_bytes(int kind, int bits, int G) {
    return wk_kvq_code_bytes(bits, G) + 2u * uint(wk_kvq_params_per_group(kind));
}
// u32 words holding one group in wk_kvq_encode's layout (the tail of the last word is zero).
uint wk_kvq_group_words(int kind, int bits, int G) { return (wk_kvq_group_bytes(kind, bits, G) + 3u) >> 2; }

// ---- f16 <-> f32 in integer code ----

// Round to nearest even, the bit-for-bit port of wk_f32_to_f16 (quant.c): overflow gives inf.
uint wk_kvq_f32_to_f16(float f) {
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return sign | 0x7E00u | ((ax >> 13) & 0x3FFu); // quiet NaN
    if (ax >= 0x477FF000u) return sign | 0x7C00u;                         // >= 65520: inf
    if (ax >= 0x38800000u) // normal half: add the rounding bias; a carry into the exponent is right
        return sign | ((ax + 0xFFFu + ((ax >> 13) & 1u) - (112u << 23)) >> 13);
    if (ax <= 0x33000000u) return sign; // <= 2^-25 (a tie at 2^-25 goes to even 0)
    uint e = ax >> 23, m = (ax & 0x7FFFFFu) | 0x800000u, shift = 126u - e;
    uint h = m >> shift, rem = m & ((1u << shift) - 1u), half_ = 1u << (shift - 1u);
    if (rem > half_ || (rem == half_ && (h & 1u) != 0u)) h++;
    return sign | h;
}

// Two f32 to f16 in one word (x low), rounded by the rule above: every shader that stores or
// rounds an f16 cache value uses this, never packHalf2x16, whose rounding GLSL leaves to the
// driver (Mesa 25's lavapipe gave other bits than Mesa 22's inside attention_paged; docs/lavapipe.md).
uint wk_kvq_pack_f16x2(vec2 v) { return wk_kvq_f32_to_f16(v.x) | (wk_kvq_f32_to_f16(v.y) << 16); }

// kv_quant.c's f16_sat: the cache never holds inf (NaN, outside the contract, saturates too).
uint wk_kvq_f16_sat(float f) {
    uint h = wk_kvq_f32_to_f16(f);
    return (h & 0x8000u) | min(h & 0x7FFFu, 0x7BFFu);
}

// Exact: normal halves by rebiasing the exponent, subnormals as (integer < 1024) * 2^-24, which is
// an exact product with a normal f32 result, so no float op ever sees a denormal.
float wk_kvq_f16_to_f32(uint h) {
    uint a = h & 0x7FFFu, bits;
    if (a >= 0x7C00u) bits = 0x7F800000u | ((a & 0x3FFu) << 13);
    else if (a >= 0x0400u) bits = (a << 13) + 0x38000000u;
    else bits = floatBitsToUint(float(a) * uintBitsToFloat(0x33800000u)); // 2^-24
    return uintBitsToFloat(bits | ((h & 0x8000u) << 16));
}

// ---- order keys: signed integers ordered as the floats they come from, with -0 == +0 ----
int wk_kvq_key(float x) {
    int i = floatBitsToInt(x);
    return i >= 0 ? i : -(i & 0x7FFFFFFF);
}
float wk_kvq_unkey(int k) { // zero comes back as +0, which is what C's `v + 0.0f` makes of -0
    return k >= 0 ? intBitsToFloat(k) : intBitsToFloat((-k) | int(0x80000000u));
}

// ---- parameters ----

// The f16 nearest to the exact real sqrt(v2), ties to even, saturated (kv_quant.c f16_sqrt_rne):
// sqrt() is only a guess within a step of the answer; the exact test compares v2 with the square
// of an f16 midpoint (<= 12 significant bits, so the square is exact in f32).
uint wk_kvq_f16_sqrt_rne(float v2) {
    if (!(v2 > 0.0)) return 0u;
    uint h = min(wk_kvq_f32_to_f16(sqrt(v2)), 0x7BFFu);
    for (int iter = 0; iter < 4; iter++) {
        if (h < 0x7BFFu) {
            precise float up = (wk_kvq_f16_to_f32(h) + wk_kvq_f16_to_f32(h + 1u)) * 0.5;
            precise float u2 = up * up;
            if (v2 > u2 || (v2 == u2 && (h & 1u) != 0u)) {
                h++;
                continue;
            }
        }
        if (h > 0u) {
            precise float dn = (wk_kvq_f16_to_f32(h - 1u) + wk_kvq_f16_to_f32(h)) * 0.5;
            precise float d2 = dn * dn;
            if (v2 < d2 || (v2 == d2 && (h & 1u) != 0u)) {
                h--;
                continue;
            }
        }
        break;
    }
    return h;
}

// QuEST step from S, the fixed-tree sum of squares: f16 nearest sqrt(C2 * (S * (1/G))). c2 is
// the format's constant from the host (wk_kvq_quest_c2(bits, clip) in kv_quant.c, the same f32
// bits); c2 <= 0 means the unclipped C2[b].
uint wk_kvq_quest_step(float S, int bits, int G, float c2) {
    float inv_g = uintBitsToFloat(uint(127 - findLSB(G)) << 23); // exactly 1/G, G a power of two
    precise float v2 = (c2 > 0.0 ? c2 : wk_kvq_quest_c2(bits)) * (S * inv_g);
    return wk_kvq_f16_sqrt_rne(v2);
}

// absmax step from max|x| given as its bits (|x| bits order like the values).
uint wk_kvq_absmax_step(uint amax_bits, int bits) {
    precise float s = uintBitsToFloat(amax_bits) * wk_kvq_absmax_c(bits);
    return wk_kvq_f16_sat(s);
}

// percentile (scale_h, min_h) from the keys of the clipped extremes.
uvec2 wk_kvq_pct_params(int lo_key, int hi_key, int bits) {
    precise float s = (wk_kvq_unkey(hi_key) - wk_kvq_unkey(lo_key)) * wk_kvq_pct_c(bits);
    return uvec2(wk_kvq_f16_sat(s), wk_kvq_f16_sat(wk_kvq_unkey(lo_key)));
}

// ---- codes ----

// Symmetric code u = clamp(floor(x/step), -L/2, L/2-1) + L/2 exactly: the number of thresholds
// T_j = (j - L/2)*step (j = 1..L-1; exact products) that x reaches, found by a b-step binary search
// instead of C's L-1 comparisons (same count: the thresholds increase with j).
uint wk_kvq_sym_code(float x, float step, int bits) {
    int half_ = 1 << (bits - 1);
    if (!(step > 0.0)) return uint(half_); // step is an f16 value: never an f32 denormal
    int kx = wk_kvq_key(x), u = 0;
    for (int s = half_; s >= 1; s >>= 1) {
        precise float thr = float(u + s - half_) * step;
        if (kx >= wk_kvq_key(thr)) u += s;
    }
    return uint(u);
}

// Percentile code of the clipped value xc: the number of k in 1..L-1 with d >= (k - 1/2)*scale,
// d = fl(xc - min) one rounded subtraction, as in C.
uint wk_kvq_pct_code(float xc, float scale, float mn, int bits) {
    if (!(scale > 0.0)) return 0u;
    precise float d = xc - mn;
    int kd = wk_kvq_key(d), u = 0;
    for (int s = 1 << (bits - 1); s >= 1; s >>= 1) {
        precise float thr = (float(u + s) - 0.5) * scale;
        if (kd >= wk_kvq_key(thr)) u += s;
    }
    return uint(u);
}

// ---- whole group, the lanes of one subgroup (left out with WK_KVQ_DECODE_ONLY: attention kernels) ----
// Lane l < L of a subgroup holds elements l, l + L, l + 2L, ... of the group (G/L of them, in
// wk_kvq_x[0 .. G/L)); L is a power of two <= G. Lanes >= L hold none and take part all the
// same (uniform control flow). Every step that combines elements is one C does in an order-free
// way (max, min, integer counts) or is C's own pairwise tree split between the lanes (below), so
// the bytes are wk_kvq_encode's for every L: a subgroup of any width, or L = 1, gives the same.
// Lanes need WK_KVQ_LANES defined and GL_KHR_shader_subgroup_arithmetic, _shuffle and _ballot
// enabled; without it every invocation encodes a group of its own (L = 1, lane 0), and the module
// needs no subgroup feature.
#ifndef WK_KVQ_DECODE_ONLY
#ifdef WK_KVQ_LANES
#define WK_KVQ_ACROSS(op, x, L) ((L) > 1u ? op(x) : (x))
#else
#define WK_KVQ_ACROSS(op, x, L) (x)
#endif

float wk_kvq_x[WK_KVQ_GMAX];                  // this lane's elements of the group (caller fills)
float wk_kvq_a[WK_KVQ_GMAX / 2];              // tree-sum scratch
uint wk_kvq_w[(WK_KVQ_GMAX * 4) / 32 + 1];    // output: codes bit stream + f16 params

// The fixed pairwise tree of kv_quant.h: a_i = x_i^2; a_i += a_(i+h) for h = G/2 .. 1. With
// lane l holding x_(l + L m), the levels h >= L pair elements of one lane (x_(l+Lm) with
// x_(l+L(m+E/2)), E = G/L), so each lane first runs the same tree over its own E elements; the
// levels h < L pair lane l with lane l + h: an exchange of partial sums (shuffle xor h), in which
// lane l < h adds a_(l+h) to its a_l as C does. Lane 0's sum is then C's, bit for bit.
float wk_kvq_tree_sum_squares(int G, uint lane, uint L) {
    int E = lane < L ? G / int(L) : 0;
    float s = 0.0;
    if (E == 1) {
        precise float sq = wk_kvq_x[0] * wk_kvq_x[0];
        s = sq;
    } else if (E > 1) {
        int h = E >> 1;
        for (int i = 0; i < h; i++) {
            precise float t = wk_kvq_x[i] * wk_kvq_x[i] + wk_kvq_x[i + h] * wk_kvq_x[i + h];
            wk_kvq_a[i] = t;
        }
        for (h >>= 1; h >= 1; h >>= 1)
            for (int i = 0; i < h; i++) {
                precise float t = wk_kvq_a[i] + wk_kvq_a[i + h];
                wk_kvq_a[i] = t;
            }
        s = wk_kvq_a[0];
    }
#ifdef WK_KVQ_LANES
    if (L > 1u) {
        for (uint h = L >> 1; h >= 1u; h >>= 1) {
            precise float t = s + subgroupShuffleXor(s, h);
            s = t;
        }
        s = subgroupBroadcast(s, 0u);
    }
#endif
    return s;
}

// The element of 0-based rank r of the ascending |x| (as bits): the largest t with
// #{i : |x_i| < t} <= r, built from the top bit down (31 counting passes, order-free).
uint wk_kvq_abs_select(int G, int r, uint lane, uint L) {
    int E = lane < L ? G / int(L) : 0;
    uint t = 0u;
    for (int bit = 30; bit >= 0; bit--) {
        uint tr = t | (1u << uint(bit));
        int cnt = 0;
        for (int i = 0; i < E; i++) cnt += (floatBitsToUint(wk_kvq_x[i]) & 0x7FFFFFFFu) < tr ? 1 : 0;
        if (WK_KVQ_ACROSS(subgroupAdd, cnt, L) <= r) t = tr;
    }
    return t;
}

// Stream bit j = i*b of code i is bit j%32 of word j/32; a 3-bit code may continue in the next word.
void wk_kvq_put_code(uint i, uint u, int bits) {
    uint j = i * uint(bits), w = j >> 5, o = j & 31u;
    wk_kvq_w[w] |= u << o;
    if (o + uint(bits) > 32u) wk_kvq_w[w + 1u] |= u >> (32u - o);
}

// u16 parameter p at byte offset cb + 2p (cb even, so it never straddles a word).
void wk_kvq_put_param(uint cb, int p, uint h) {
    uint byte_ = cb + 2u * uint(p);
    wk_kvq_w[byte_ >> 2] |= (h & 0xFFFFu) << ((byte_ & 2u) * 8u);
}

// wk_kvq_encode for the group the lanes hold: rank = wk_kvq_percentile_rank(rho, G), computed on
// the host (WK_KVQ_PERCENTILE only); quest_c2 as wk_kvq_quest_step's c2 (QuEST only). Each lane
// puts its own elements' codes, then the words are OR-ed across the subgroup: every lane ends
// with the whole group in wk_kvq_w[0 .. wk_kvq_group_words()).
void wk_kvq_encode_group(int kind, int bits, int G, int rank, float quest_c2, uint lane, uint L) {
    uint nw = wk_kvq_group_words(kind, bits, G), cb = wk_kvq_code_bytes(bits, G);
    int E = lane < L ? G / int(L) : 0;
    for (uint w = 0u; w < nw; w++) wk_kvq_w[w] = 0u;
    uvec2 p = uvec2(0u);
    if (kind == WK_KVQ_PERCENTILE) {
        int kt = int(wk_kvq_abs_select(G, rank, lane, L));
        int lo = 0x7FFFFFFF, hi = -0x7FFFFFFF;
        for (int i = 0; i < E; i++) {
            int c = clamp(wk_kvq_key(wk_kvq_x[i]), -kt, kt);
            lo = min(lo, c);
            hi = max(hi, c);
        }
        p = wk_kvq_pct_params(WK_KVQ_ACROSS(subgroupMin, lo, L), WK_KVQ_ACROSS(subgroupMax, hi, L), bits);
        float scale = wk_kvq_f16_to_f32(p.x), mn = wk_kvq_f16_to_f32(p.y);
        for (int i = 0; i < E; i++) {
            float xc = wk_kvq_unkey(clamp(wk_kvq_key(wk_kvq_x[i]), -kt, kt));
            wk_kvq_put_code(lane + L * uint(i), wk_kvq_pct_code(xc, scale, mn, bits), bits);
        }
    } else {
        if (kind == WK_KVQ_QUEST) {
            p.x = wk_kvq_quest_step(wk_kvq_tree_sum_squares(G, lane, L), bits, G, quest_c2);
        } else {
            uint amax = 0u;
            for (int i = 0; i < E; i++) amax = max(amax, floatBitsToUint(wk_kvq_x[i]) & 0x7FFFFFFFu);
            p.x = wk_kvq_absmax_step(WK_KVQ_ACROSS(subgroupMax, amax, L), bits);
        }
        float step = wk_kvq_f16_to_f32(p.x);
        for (int i = 0; i < E; i++) wk_kvq_put_code(lane + L * uint(i), wk_kvq_sym_code(wk_kvq_x[i], step, bits), bits);
    }
    for (uint w = 0u; w < nw; w++) wk_kvq_w[w] = WK_KVQ_ACROSS(subgroupOr, wk_kvq_w[w], L);
    wk_kvq_put_param(cb, 0, p.x);
    if (kind == WK_KVQ_PERCENTILE) wk_kvq_put_param(cb, 1, p.y);
}
#endif

// ---- decode (the attention's inner loop) ----

// Per group: (A, B) with y = fma(float(u), A, B), equal bit for bit to wk_kvq_dequantize_group:
//   symmetric: A = step, B = (1/2 - L/2)*step; C computes ((u - L/2) + 1/2)*step. Both u*step and
//     B are exact (<= 4 + 11 significant bits), and so is their sum (a half-integer of <= 4 bits
//     times step, >= 2^-25), so fused or not, every implementation returns that exact value.
//     A zero step is the one exception: fma gives +0 where C gives (u - L/2 + 1/2) * (+-0), which
//     is -0 for some codes. The encoder only writes +0 steps with every code L/2 (both give +0), so
//     this costs nothing real and saves the add that (float(u) + 1/2 - L/2) * step would need.
//   percentile: A = scale, B = min; C computes min + u*scale, and u*scale is exact.
vec2 wk_kvq_affine(int kind, int bits, uint p0, uint p1) {
    float a = wk_kvq_f16_to_f32(p0);
    if (kind == WK_KVQ_PERCENTILE) return vec2(a, wk_kvq_f16_to_f32(p1));
    precise float b = (0.5 - float(1 << (bits - 1))) * a;
    return vec2(a, b);
}
float wk_kvq_dequant(uint u, vec2 ab) { return fma(float(u), ab.x, ab.y); }
// Four consecutive codes from one word, b = 2 or 4, o a multiple of 4*b (never crosses a word):
// vector shifts, one conversion and one fma per lane, ready for a vec4 dot product.
vec4 wk_kvq_dequant4(uint w, uint o, int bits, vec2 ab) {
    uvec4 u = (uvec4(w) >> (uvec4(0u, 1u, 2u, 3u) * uint(bits) + o)) & uvec4((1u << uint(bits)) - 1u);
    return fma(vec4(u), vec4(ab.x), vec4(ab.y));
}

// Code at stream bit o (< 32) of word w0, for b = 2 or 4 (codes never cross a word).
uint wk_kvq_code_24(uint w0, uint o, int bits) { return bitfieldExtract(w0, int(o), bits); }
// Any b: w1 is the next word, read only when the code crosses (b = 3 at o = 30, 31).
uint wk_kvq_code_any(uint w0, uint w1, uint o, int bits) {
    uint v = w0 >> o;
    if (o + uint(bits) > 32u) v |= w1 << (32u - o);
    return v & ((1u << uint(bits)) - 1u);
}

#endif
