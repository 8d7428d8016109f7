/* Scalar C twins of the KV-cache quantizers and their packed layout (the contract is in kv_quant.h).
 * Arithmetic is kept to correctly rounded + - * and comparisons so that a shader can match it bit for
 * bit; the build uses -std=c11, under which GCC does not contract a*b+c into fma. */
#include "kv/kv_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"
#include "wushkv/wushkv.h" /* WK_KV_CLIP_MIN, WK_KV_CLIP_MAX */

const double WK_KVQ_QUEST_ALPHA[5] = {0, 0, 1.493535, 2.051068, 2.513931};
const float WK_KVQ_QUEST_C2[5] = {0, 0, 0x1.fb9898p-1f, 0x1.5fa92cp-2f, 0x1.cc3286p-4f};
const float WK_KVQ_ABSMAX_C[5] = {0, 0, 0x1.555556p-1f, 0x1.24924ap-2f, 0x1.111112p-3f};
const float WK_KVQ_PCT_C[5] = {0, 0, 0x1.555556p-2f, 0x1.24924ap-3f, 0x1.111112p-4f};

#define F16_MAX_BITS 0x7BFFu /* 65504 */

bool wk_kvq_valid(wk_kvq_kind kind, int bits, int G) {
    if (kind != WK_KVQ_QUEST && kind != WK_KVQ_PERCENTILE && kind != WK_KVQ_ABSMAX) return false;
    if (bits < 2 || bits > 4) return false;
    return G == 16 || G == 32 || G == 64 || G == 128 || G == 256;
}

const char *wk_kvq_kind_name(wk_kvq_kind kind) {
    switch (kind) {
    case WK_KVQ_QUEST: return "quest";
    case WK_KVQ_PERCENTILE: return "percentile";
    case WK_KVQ_ABSMAX: return "absmax";
    }
    return "?";
}

int wk_kvq_params_per_group(wk_kvq_kind kind) { return kind == WK_KVQ_PERCENTILE ? 2 : 1; }

size_t wk_kvq_code_bytes(int bits, int G) { return (size_t)G * (size_t)bits / 8; }

size_t wk_kvq_group_bytes(wk_kvq_kind kind, int bits, int G) {
    return wk_kvq_code_bytes(bits, G) + 2 * (size_t)wk_kvq_params_per_group(kind);
}

double wk_kvq_bits_per_element(wk_kvq_kind kind, int bits, int G) {
    return ((double)G * bits + 16.0 * wk_kvq_params_per_group(kind)) / G;
}

int wk_kvq_percentile_rank(float rho, int G) {
    /* rho*G is exact in f32 for G a power of two, so floorf gives the same integer everywhere. */
    float p = rho * (float)G;
    if (!(p > 0.0f)) return 0; /* also NaN */
    if (p >= (float)(G - 1)) return G - 1;
    return (int)floorf(p);
}

/* f16 with saturation: the cache must never hold inf, which would decode to inf/NaN. */
static uint16_t f16_sat(float f) {
    uint16_t h = wk_f32_to_f16(f);
    if ((h & 0x7FFFu) > F16_MAX_BITS) h = (uint16_t)((h & 0x8000u) | F16_MAX_BITS);
    return h;
}

/* The f16 nearest to sqrt(v2) in exact arithmetic (ties to even), for v2 >= 0, saturated.
 * sqrtf gives a guess that is at most one f16 step off on any implementation; the exact test is
 * v2 against mid^2, where mid (a midpoint of adjacent positive f16 values, <= 12 significant bits)
 * squares exactly in f32. */
static uint16_t f16_sqrt_rne(float v2) {
    if (!(v2 > 0.0f)) return 0;
    uint16_t h = wk_f32_to_f16(sqrtf(v2));
    if (h > F16_MAX_BITS) h = F16_MAX_BITS;
    for (int iter = 0; iter < 4; iter++) {
        if (h < F16_MAX_BITS) {
            float up = (wk_f16_to_f32(h) + wk_f16_to_f32((uint16_t)(h + 1))) * 0.5f;
            float u2 = up * up;
            if (v2 > u2 || (v2 == u2 && (h & 1u))) {
                h++;
                continue;
            }
        }
        if (h > 0) {
            float dn = (wk_f16_to_f32((uint16_t)(h - 1)) + wk_f16_to_f32(h)) * 0.5f;
            float d2 = dn * dn;
            if (v2 < d2 || (v2 == d2 && (h & 1u))) {
                h--;
                continue;
            }
        }
        break;
    }
    return h;
}

/* The fixed pairwise tree of kv_quant.h: each square is its own rounded product. */
static float tree_sum_squares(int G, const float *x) {
    float a[WK_KVQ_MAX_GROUP];
    if (G < 1 || G > WK_KVQ_MAX_GROUP) return 0.0f;
    for (int i = 0; i < G; i++) a[i] = x[i] * x[i];
    for (int h = G / 2; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) a[i] = a[i] + a[i + h];
    return a[0];
}

/* u = clamp(floor(x/step), -L/2, L/2-1) + L/2 exactly: the number of thresholds k*step
 * (k = -(L/2-1) .. L/2-1) that x reaches, as the shader counts them. Found as the largest integer
 * c with c*step <= x: a guess from x * (1/step) (clamped to the codes' range and one past it, off
 * by at most one), moved by the exact comparisons with c*step and (c+1)*step (|c| <= L/2 + 2 and
 * step an f16, so both products are exact in f32); then c + L/2 clamped to the codes. A nan
 * reaches no threshold (0), as in the count; +-inf all or none. Counting all L-1 thresholds cost
 * 15 comparisons an element at 4 bits, most of a cache write's encoding on the host. */
static uint8_t sym_code(float x, float step, float inv_step, int L) {
    const float lim = (float)(L / 2 + 1);
    float t = x * inv_step;
    if (!(t >= -lim)) t = -lim; /* and a nan */
    if (t > lim) t = lim;
    int c = (int)t; /* toward zero, then down: floor (no floorf: SSE2 has no rounding instruction) */
    c -= t < (float)c;
    c -= x < (float)c * step;
    c += x >= (float)(c + 1) * step;
    const int u = c + L / 2;
    return (uint8_t)(u < 0 ? 0 : u > L - 1 ? L - 1 : u);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

float wk_kvq_quest_c2(int bits, float clip) {
    if (bits < 2 || bits > 4) return 0.0f;
    if (!(clip > 0.0f) || clip == 1.0f) return WK_KVQ_QUEST_C2[bits];
    return WK_KVQ_QUEST_C2[bits] * (clip * clip);
}

bool wk_kvq_clip_valid(wk_kvq_kind kind, float clip) {
    return clip == 0.0f || clip == 1.0f || (kind == WK_KVQ_QUEST && clip >= WK_KV_CLIP_MIN && clip <= WK_KV_CLIP_MAX);
}

void wk_kvq_clip_constants(int bits, bool swa_own_width, float clip, float *quest_c2, float *swa_quest_c2) {
    const bool plain = clip == 0.0f || clip == 1.0f;
    *quest_c2 = plain ? 0.0f : wk_kvq_quest_c2(bits, clip);
    *swa_quest_c2 = swa_own_width ? 0.0f : *quest_c2;
}

void wk_kvq_quantize_group(wk_kvq_kind kind, int bits, int G, float rho, const float *x, uint8_t *codes,
                           uint16_t *params) {
    wk_kvq_quantize_group_c2(kind, bits, G, rho, 0.0f, x, codes, params);
}

void wk_kvq_quantize_group_c2(wk_kvq_kind kind, int bits, int G, float rho, float quest_c2, const float *x,
                              uint8_t *codes, uint16_t *params) {
    const int L = 1 << bits;
    if (kind == WK_KVQ_PERCENTILE) {
        float a[WK_KVQ_MAX_GROUP];
        for (int i = 0; i < G; i++) a[i] = fabsf(x[i]);
        qsort(a, (size_t)G, sizeof a[0], cmp_float); /* the order statistic is unique as a value */
        float t = a[wk_kvq_percentile_rank(rho, G)];
        float lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < G; i++) {
            float c = fminf(fmaxf(x[i], -t), t);
            lo = fminf(lo, c);
            hi = fmaxf(hi, c);
        }
        /* +0.0f turns a -0 extreme into +0: min/max of signed zeros is order dependent, and the
         * stored bytes must not be */
        lo = lo + 0.0f;
        hi = hi + 0.0f;
        uint16_t sh = f16_sat((hi - lo) * WK_KVQ_PCT_C[bits]), mh = f16_sat(lo);
        float scale = wk_f16_to_f32(sh), mn = wk_f16_to_f32(mh);
        for (int i = 0; i < G; i++) {
            int u = 0;
            if (scale > 0.0f) {
                float d = fminf(fmaxf(x[i], -t), t) - mn;
                for (int k = 1; k <= L - 1; k++) u += d >= ((float)k - 0.5f) * scale;
            }
            codes[i] = (uint8_t)u;
        }
        params[0] = sh;
        params[1] = mh;
        return;
    }
    uint16_t sh;
    if (kind == WK_KVQ_QUEST) {
        float m = tree_sum_squares(G, x) * (1.0f / (float)G); /* exact: G is a power of two */
        sh = f16_sqrt_rne((quest_c2 > 0.0f ? quest_c2 : WK_KVQ_QUEST_C2[bits]) * m);
    } else {
        float amax = 0.0f;
        for (int i = 0; i < G; i++) amax = fmaxf(amax, fabsf(x[i]));
        sh = f16_sat(amax * WK_KVQ_ABSMAX_C[bits]);
    }
    const float step = wk_f16_to_f32(sh), inv_step = step > 0.0f ? 1.0f / step : 0.0f;
    for (int i = 0; i < G; i++) codes[i] = step > 0.0f ? sym_code(x[i], step, inv_step, L) : (uint8_t)(L / 2);
    params[0] = sh;
}

void wk_kvq_dequantize_group(wk_kvq_kind kind, int bits, int G, const uint8_t *codes, const uint16_t *params,
                             float *y) {
    const int L = 1 << bits;
    if (kind == WK_KVQ_PERCENTILE) {
        float scale = wk_f16_to_f32(params[0]), mn = wk_f16_to_f32(params[1]);
        for (int i = 0; i < G; i++) y[i] = mn + (float)codes[i] * scale;
        return;
    }
    float step = wk_f16_to_f32(params[0]);
    for (int i = 0; i < G; i++) y[i] = ((float)(codes[i] - L / 2) + 0.5f) * step;
}

void wk_kvq_pack(int bits, const uint8_t *codes, size_t n, uint8_t *stream, size_t first) {
    const unsigned mask = (1u << bits) - 1;
    for (size_t i = 0; i < n; i++) {
        size_t j = (first + i) * (size_t)bits; /* stream bit of the code's LSB */
        unsigned v = (codes[i] & mask) << (j % 8), m = mask << (j % 8);
        /* a code spans at most two bytes (b <= 4 < 8) */
        stream[j / 8] = (uint8_t)((stream[j / 8] & ~m) | v);
        if ((j % 8) + (size_t)bits > 8)
            stream[j / 8 + 1] = (uint8_t)((stream[j / 8 + 1] & ~(m >> 8)) | (v >> 8));
    }
}

void wk_kvq_unpack(int bits, const uint8_t *stream, size_t first, size_t n, uint8_t *codes) {
    const unsigned mask = (1u << bits) - 1;
    for (size_t i = 0; i < n; i++) {
        size_t j = (first + i) * (size_t)bits;
        unsigned v = stream[j / 8];
        if ((j % 8) + (size_t)bits > 8) v |= (unsigned)stream[j / 8 + 1] << 8;
        codes[i] = (uint8_t)((v >> (j % 8)) & mask);
    }
}

static void put_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xFF);
    p[1] = (uint8_t)(v >> 8);
}

static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

void wk_kvq_encode(wk_kvq_kind kind, int bits, int G, float rho, const float *x, uint8_t *out) {
    wk_kvq_encode_c2(kind, bits, G, rho, 0.0f, x, out);
}

void wk_kvq_encode_c2(wk_kvq_kind kind, int bits, int G, float rho, float quest_c2, const float *x, uint8_t *out) {
    uint8_t codes[WK_KVQ_MAX_GROUP];
    uint16_t params[2];
    size_t cb = wk_kvq_code_bytes(bits, G);
    wk_kvq_quantize_group_c2(kind, bits, G, rho, quest_c2, x, codes, params);
    memset(out, 0, cb);
    wk_kvq_pack(bits, codes, (size_t)G, out, 0);
    for (int p = 0; p < wk_kvq_params_per_group(kind); p++) put_u16(out + cb + 2 * (size_t)p, params[p]);
}

void wk_kvq_decode(wk_kvq_kind kind, int bits, int G, const uint8_t *in, float *y) {
    uint8_t codes[WK_KVQ_MAX_GROUP];
    uint16_t params[2] = {0, 0};
    size_t cb = wk_kvq_code_bytes(bits, G);
    wk_kvq_unpack(bits, in, 0, (size_t)G, codes);
    for (int p = 0; p < wk_kvq_params_per_group(kind); p++) params[p] = get_u16(in + cb + 2 * (size_t)p);
    wk_kvq_dequantize_group(kind, bits, G, codes, params, y);
}

bool wk_kvq_block_layout_get(wk_kvq_kind kind, int bits, int G, int D, int ntok, wk_kvq_block_layout *out) {
    if (!wk_kvq_valid(kind, bits, G) || D <= 0 || ntok <= 0 || D % G != 0 || ((size_t)D * bits) % 32 != 0)
        return false;
    out->code_bytes_per_token = (size_t)D * (size_t)bits / 8;
    out->param_bytes_per_token = (size_t)(D / G) * (size_t)wk_kvq_params_per_group(kind) * 2;
    out->params_offset = (size_t)ntok * out->code_bytes_per_token;
    out->bytes = out->params_offset + (size_t)ntok * out->param_bytes_per_token;
    return true;
}

void wk_kvq_encode_token(wk_kvq_kind kind, int bits, int G, float rho, int D, int ntok, int tok, const float *x,
                         uint8_t *slab) {
    wk_kvq_block_layout l;
    if (!wk_kvq_block_layout_get(kind, bits, G, D, ntok, &l) || tok < 0 || tok >= ntok) return;
    const int P = wk_kvq_params_per_group(kind);
    uint8_t codes[WK_KVQ_MAX_GROUP];
    uint16_t params[2];
    for (int g = 0; g < D / G; g++) {
        wk_kvq_quantize_group(kind, bits, G, rho, x + (size_t)g * G, codes, params);
        wk_kvq_pack(bits, codes, (size_t)G, slab, (size_t)tok * D + (size_t)g * G);
        uint8_t *pp = slab + l.params_offset + (((size_t)tok * (D / G) + g) * P) * 2;
        for (int p = 0; p < P; p++) put_u16(pp + 2 * (size_t)p, params[p]);
    }
}

void wk_kvq_decode_token(wk_kvq_kind kind, int bits, int G, int D, int ntok, int tok, const uint8_t *slab, float *y) {
    wk_kvq_block_layout l;
    if (!wk_kvq_block_layout_get(kind, bits, G, D, ntok, &l) || tok < 0 || tok >= ntok) return;
    const int P = wk_kvq_params_per_group(kind);
    uint8_t codes[WK_KVQ_MAX_GROUP];
    uint16_t params[2] = {0, 0};
    for (int g = 0; g < D / G; g++) {
        wk_kvq_unpack(bits, slab, (size_t)tok * D + (size_t)g * G, (size_t)G, codes);
        const uint8_t *pp = slab + l.params_offset + (((size_t)tok * (D / G) + g) * P) * 2;
        for (int p = 0; p < P; p++) params[p] = get_u16(pp + 2 * (size_t)p);
        wk_kvq_dequantize_group(kind, bits, G, codes, params, y + (size_t)g * G);
    }
}
