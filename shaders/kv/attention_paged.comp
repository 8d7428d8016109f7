#version 450
// Causal attention over the paged KV pool (issue 3 "Paged attention shaders"), quantized or f16.
// One subgroup-sized workgroup per (query tile, KV head [x head chunk], key split):
//   - a query tile is up to a few consecutive tokens of ONE sequence (engine/kv/attention_plan.c), and
//     its rows are every (token, query head) of the tile that shares this KV head (GQA). Each key
//     and value is dequantized once per tile and used by all its rows: decoding costs more than
//     the dot products, so sharing it is where the speed comes from (docs/lavapipe.md: registers, no
//     shared memory).
//   - keys are taken 16 at a time: scores first, then one online-softmax rescale per row, then
//     the values, so the rescale of the accumulators is paid per 16 keys, not per key.
//   - a long context with few tiles (decode) is split over gl_WorkGroupID.z; each split writes
//     its (max, sum, unnormalised output) per row and attention_reduce.comp combines them.
//   - a prefill step walks its keys in two dispatches of two pipelines (SC_PASS): the bulk, the keys
//     some row of a tile reads from the blocks, in a body without the f16 window path, and the
//     windows, the sinks and recent keys, in a body with only it (a key the tile's later rows read
//     in f16 and its earlier ones from the blocks is walked by both, each row masking the keys of
//     the other pass); each writes partials and
//     attention_reduce.comp combines them (engine/kv/attention_record.c), or, when the windows pass
//     is one split after at most two of the bulk (pc.chain), it starts from the bulk's partials of
//     its row, combined, and writes the output itself: one dispatch and a round trip of partials
//     fewer. llvmpipe runs both sides
//     of a branch, so one body with both paths pays for both on every key (about half of the
//     prefill attention's time), and two bodies in one pipeline cost ten times the compile.
// f16 windows (--kv-sink S, --kv-recent R): a row at position p reads key/value j in f16 when
// j < S or j > p - R, from its sequence's window slot (engine/kv/kv_pool.h: sinks in rows 0..S-1, a
// ring of the last R positions after them) or, for this step's own tokens, from the f16 copy of
// them that kv_store_quant.comp made before this pass (rounded as the window rows are stored). S and R
// are the layer's class's (wk_kv_win: full-attention and sliding layers each have their own), as
// is the region of the slot its rows live in (win_off, f16_row_words, win_layer); S = R = 0 reads
// every key, this step's included, from the blocks.
// Lanes own contiguous 4-dim chunks of the head vector, so a lane's chunks usually sit in one
// quantizer group (one parameter fetch per key). Decoding is kv_quant.glsl's, bit-identical to
// the C twin. Pool layout (engine/kv/kv_pool.h): block b holds, for every (layer, K|V, KV head), a
// slab of block_tokens tokens: their packed codes, then their f16 group parameters (kv_quant.h).
// The f16 cache (bits 16) is the same pool with f16 slabs (token t, element i at half t * D + i);
// the host then binds Pool as an RG32UI view, so one fetch brings a lane's chunk of four halves
// (word offsets, all even in an f16 pool, are halved into texel indices).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_samplerless_texture_functions : require
#define WK_KVQ_DECODE_ONLY
#include "kv_quant.glsl"
#include "shader_consts.h"
layout(local_size_x_id = 0) in;
// The KV format as specialisation constants (wk_pipelines_specialize_kv; the engine sets its
// pool's): the decode below then folds to straight-line code. SC_BITS 0 (the default) reads the
// format from the push constants instead, so one pipeline serves every format (the tests);
// bits 16 is the f16 cache.
layout(constant_id = 2) const int SC_KIND = 0;
layout(constant_id = 3) const int SC_BITS = 0;
layout(constant_id = 4) const int SC_G = 0;
// Wide keys (engine/kv/kv_pool.h "Wide keys"): the keys' bits when they differ from the values'
// (the pipelines of the layers whose keys take more bits); 0: the keys are SC_BITS wide too.
layout(constant_id = 8) const int SC_BITS_K = 0;
// A lane's 4-element chunks of a head vector, ceil(head_dim / 4 / subgroup size), set with the
// format (0: computed from the push constants). With it, which words and group parameters a lane
// reads for chunk c is known at compile time, and the decode below has no data-dependent branch
// around a fetch: llvmpipe runs a branch's body under a lane mask whether or not a lane takes it,
// so "fetch only when the word changes" would cost a fetch per chunk.
layout(constant_id = 6) const uint SC_NCL = 0;
// Rows per tile, a specialisation constant: 16 for steps with several tokens of a sequence (prefill),
// 4 for decode steps, whose tiles hold one token and so at most its query heads of one KV head
// (attention_plan.h's WK_ATTN_DECODE_ROWS). The state below is MAXR rows of registers, unrolled:
// a 16-row pipeline running 4-row tiles pays for the other 12 in every key, and llvmpipe's compile
// time grows with MAXR squared (docs/lavapipe.md).
layout(constant_id = 5) const uint SC_MAXR = 16;
// Which keys the pipeline walks: 0 all of them (the decode pipelines: the bulk and the windows in
// loops of their own, two bodies; with 4 rows that still compiles in seconds, with 16 it would
// take ten times a 16-row pass's minutes, so prefill pipelines are never pass 0), 1 the bulk only (keys
// some row reads from the blocks; every key when the layer has no window), 2 the windows only (keys
// some row reads in f16). A pass dispatched over z = n splits divides its keys among them; partials go to
// index z (all, bulk) or pc.n_split - n + z (windows: the last ones).
layout(constant_id = 7) const uint SC_PASS = 0;
// The GPU variant of the decode pipelines and of the prefill bulk pass (constant 9 = 1; kernel set
// "gpu", attention_record.c): their bulk keys go a key per lane (key_tile_lanes) instead of a key
// per subgroup. A GPU reads
// codes fastest when the lanes of a subgroup read different keys at once, and a key per subgroup
// costs a cross-lane sum per key and row; here a tile of subgroup-size keys costs one subgroupMax
// and one subgroupAdd per row. The queries sit in shared memory (every lane reads all of each
// row), and so do the tile's probabilities, read back by the lanes that own the value chunks.
// lavapipe runs it too (the tests), slower: shared memory and barriers are slow there.
layout(constant_id = 9) const uint SC_LANE_KEYS = 0;
const uint LK_D4 = WK_ATTN_LANES_D4;  // head_dim / 4 at most for the variant
const uint LK_SG = WK_ATTN_LANES_SG;  // subgroup size at most
const uint MAXC = WK_ATTN_MAXC;  // chunks per lane: head_dim <= 4 * MAXC * subgroup size (the host checks)
#define MAXR SC_MAXR
const uint KT = WK_ATTN_KT;  // keys per softmax tile
// llvmpipe stops EVERY loop of an invocation once 65535 loop iterations have run in total (its
// loop limiter is one counter per shader invocation, never reset), silently. So the loops over
// chunks and rows below have constant bounds and are unrolled, leaving ~33 counted iterations per
// 16 keys, and the host caps the keys one workgroup walks (attention_plan.h); see docs/engine.md.
struct RowInfo { uint pos; uint table_off; };
struct Tile { uint row0; uint n_tok; uint win_word; uint chunk_row0; };
// The queries as RGBA32F texels: each lane reads its chunks of 16 rows, and a storage-buffer load
// at a per-lane index is a loop over the lanes on lavapipe, a texel fetch one gather (the default's
// prefill attention 0.52 -> 0.48 ms a prompt token at pp128, f16's 0.44 -> 0.42: docs/engine.md).
layout(binding = 0) uniform textureBuffer Q;                         // [T][n_head][D/4]
layout(std430, binding = 1) readonly buffer Rows { RowInfo rows[]; };
layout(std430, binding = 2) readonly buffer Tables { uint tables[]; }; // block indices
layout(binding = 3) uniform utextureBuffer Pool;                      // R32UI words (f16: RG32UI pairs)
// This step's keys and values in f16 [T][n_head_kv][D/4] (windows only), as RG32UI texels of four
// halves: kv_store_quant rounds each element once a step, so the window pass, which reads each key
// in every tile within `recent` of it, only unpacks (rounding there, in integer code, cost about a
// quarter of that pass's time: docs/engine.md). A storage buffer read at a per-lane index is a loop
// over the lanes on lavapipe, a texel fetch one gather.
layout(binding = 7) uniform utextureBuffer KA;
layout(binding = 8) uniform utextureBuffer VA;
layout(std430, binding = 4) writeonly buffer O { vec4 o4[]; };        // [T][n_head][D/4]
layout(std430, binding = 5) readonly buffer Tiles { Tile tiles[]; };
layout(std430, binding = 6) writeonly buffer Part { vec4 part[]; };   // split partials (n_split > 1)
layout(binding = 9) uniform textureBuffer PartIn;                    // the same, RGBA32F (pc.chain)
layout(push_constant) uniform PC {
    uint head_dim; uint n_head; uint n_head_kv; uint window; uint n_tiles; uint win_layer;
    int kind; int bits; int group; uint block_tokens;
    uint slab_words;        // one (layer, K|V, head) slab
    uint block_words;       // one block
    uint params_words;      // offset of the parameters inside a slab
    uint code_words;        // codes of one token (D*bits/32; f16: D/2)
    uint head_rows;         // query heads per tile token
    uint n_split;           // key splits (gl_NumWorkGroups.z)
    uint sink, recent;      // f16 windows of the layer's class (0, 0: off)
    uint f16_row_words;     // one window row of the class: its layers' K and V heads, f16
    uint win_off;           // the class's rows: words into the window slot
    uint k_off;             // the layer's first key slab: words into a block (its KV heads' follow)
    uint table_stride;      // block-table entries per block of tokens (layer groups)
    uint table_col;         // the layer's group: its entry among them
    // The values are bits / slab_words / params_words / code_words above; the keys these (the
    // same unless the layer has wide keys), their first slab at k_off and the values' at v_off.
    uint v_off; int k_bits; uint k_slab_words; uint k_params_words; uint k_code_words;
    uint chain;             // windows pass: start from the bulk's partials (slots 0 and, n_split 3, 1), write the output
} pc;

// The variant's shared state; one element a row in the other pipelines, which never touch it.
shared vec4 q_sh[MAXR * (1u + (LK_D4 - 1u) * SC_LANE_KEYS)];   // [row][head_dim / 4]
shared float p_sh[MAXR * (1u + (LK_SG - 1u) * SC_LANE_KEYS)];  // [row][key of the tile]
vec4 kbuf[MAXC];          // one key or value: this lane's chunks
vec4 fbuf[MAXC];          // the same key or value in f16 (windows)
vec4 qv[MAXR * MAXC], acc[MAXR * MAXC];
float sc[MAXR * KT];      // scores, then probabilities, of the current key tile
float m_r[MAXR], l_r[MAXR];
uint pos_r[MAXR], first_r[MAXR];
// Set once by main for the loaders below.
uint g_kh, g_ch0, g_ncl, g_table_off, g_slab[2], g_chunk_pos0;
bool g_windows;
Tile g_tile;

uint word(uint at) { return texelFetch(Pool, int(at)).x; }

// This lane's chunks of token tt of the key (kv 0) or value (kv 1) slab at word `slab` into kbuf:
// ncl chunks from chunk ch0. kv and sn are constants at every call, so a specialised pipeline
// folds the format of each: sn is the chunk count the straight-line decode below may assume
// (SC_NCL for a lane's chunks; MAXC for key_tile_lanes' pieces of a whole key).
void decode_lane(uint kv, uint slab, uint tt, uint ch0, uint ncl, uint sn) {
    int kind = SC_BITS != 0 ? SC_KIND : pc.kind;
    int bits = SC_BITS == 0 ? (kv == 0u ? pc.k_bits : pc.bits) : kv == 0u && SC_BITS_K != 0 ? SC_BITS_K : SC_BITS;
    uint code_words = kv == 0u ? pc.k_code_words : pc.code_words;
    uint params_words = kv == 0u ? pc.k_params_words : pc.params_words;
    if (bits == 16) {  // f16 slab through the RG32UI view: chunk ch is texel (word + 2 ch) / 2
        uint at = (slab + tt * code_words) >> 1;
        [[unroll]] for (uint c = 0u; c < MAXC; ++c) {
            uint ch = ch0 + c;
            if (c < ncl && ch < pc.head_dim / 4u) {
                uvec2 h = texelFetch(Pool, int(at + ch)).xy;
                kbuf[c] = vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
            }
        }
        return;
    }
    uint GS = SC_BITS != 0 ? uint(SC_G) : uint(pc.group);
    uint C = pc.head_dim / 4u;
    uint P = uint(wk_kvq_params_per_group(kind));
    uint groups = pc.head_dim / GS;
    uint base = slab + tt * code_words;
    // Straight-line decode (SC_NCL set, 2 or 4 bits, or 3 with ncl a multiple of 8): a lane's
    // chunks start a word (ncl a multiple of the chunks per word) and either cover whole groups or sit in one, so chunk c's word and
    // group are the lane's first plus compile-time constants. Every condition here is constant.
    // (Plain variables, not spec-constant expressions: glslang 11 emits invalid SPIR-V for this
    // condition as one; the driver folds them all the same once the constants are set.)
    int sb = kv == 0u && SC_BITS_K != 0 ? SC_BITS_K : SC_BITS, sg = SC_G;
    uint CPW = sb == 2 ? 4u : 2u;  // chunks per 32-bit word
    // 3 bits (wide keys, int3): a chunk is 12 bits, so 8 chunks fill 3 words; a lane with a
    // multiple of 8 chunks starts on a word and every shift below is a constant too.
    bool s3 = sb == 3 && sn % 8u == 0u;
    if (sn != 0u && (((sb == 2 || sb == 4) && sn % CPW == 0u) || s3) && sg >= 4 &&
        ((4u * sn) % uint(sg) == 0u || uint(sg) % (4u * sn) == 0u)) {
        uint GPL = (4u * sn) / uint(sg);  // groups a lane covers (0: inside one)
        uint wbase = base + (ch0 * 4u * uint(sb) >> 5);
        uint g0 = (4u * ch0) / GS;
        vec2 ab = vec2(0);
        uint w = 0u;
        uint ws[MAXC * 3u / 8u + 1u];  // s3: the lane's code words
        [[unroll]] for (uint i = 0u; i < MAXC * 3u / 8u + 1u; ++i)
            if (s3 && i < (sn * 12u + 31u) / 32u) ws[i] = word(wbase + i);
        [[unroll]] for (uint c = 0u; c < MAXC; ++c) {
            if (c >= sn) continue;
            if ((c * 4u) % uint(sg) == 0u && (c == 0u || GPL > 0u)) {
                uint pi = (tt * groups + g0 + (c * 4u) / uint(sg)) * P;
                uint pw = word(slab + params_words + (pi >> 1));
                uint p0 = (pi & 1u) != 0u ? pw >> 16 : pw & 0xffffu, p1 = 0u;
                if (P == 2u) {
                    uint pw1 = (pi & 1u) != 0u ? word(slab + params_words + (pi >> 1) + 1u) : pw;
                    p1 = (pi & 1u) != 0u ? pw1 & 0xffffu : pw >> 16;
                }
                ab = wk_kvq_affine(kind, bits, p0, p1);
            }
            vec4 v;
            if (s3) {  // the four codes of bits [12c, 12c + 12), the generic path's arithmetic
                uint b0 = c * 12u, wi = b0 >> 5, o = b0 & 31u;
                uint x = ws[wi] >> o;
                if (o > 20u) x |= ws[wi + 1u] << (32u - o);
                v = fma(vec4((uvec4(x) >> uvec4(0u, 3u, 6u, 9u)) & uvec4(7u)), vec4(ab.x), vec4(ab.y));
            } else {
                if (c % CPW == 0u) w = word(wbase + c / CPW);
                v = wk_kvq_dequant4(w, (c % CPW) * 4u * uint(sb), bits, ab);
            }
            kbuf[c] = ch0 + c < C ? v : vec4(0);
        }
        return;
    }
    uint g_have = 0xffffffffu, w_at = 0xffffffffu, w = 0u;
    vec2 ab = vec2(0);
    [[unroll]] for (uint c = 0u; c < MAXC; ++c) {
        uint ch = ch0 + c;
        if (c >= ncl || ch >= C) continue;
        uint g = (4u * ch) / GS;
        if (g != g_have) {
            uint pi = (tt * groups + g) * P;  // u16 index of the group's first parameter
            uint pw = word(slab + params_words + (pi >> 1));
            uint p0 = (pi & 1u) != 0u ? pw >> 16 : pw & 0xffffu;
            uint p1 = 0u;
            if (P == 2u) {
                uint pw1 = (pi & 1u) != 0u ? word(slab + params_words + (pi >> 1) + 1u) : pw;
                p1 = (pi & 1u) != 0u ? pw1 & 0xffffu : pw >> 16;
            }
            ab = wk_kvq_affine(kind, bits, p0, p1);
            g_have = g;
        }
        uint bit0 = 4u * ch * uint(bits);
        if (bits != 3) {
            uint wi = bit0 >> 5;
            if (wi != w_at) { w = word(base + wi); w_at = wi; }
            kbuf[c] = wk_kvq_dequant4(w, bit0 & 31u, bits, ab);
        } else {
            vec4 r;
            [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                uint j = bit0 + 3u * e;
                uint w0 = word(base + (j >> 5)), w1 = (j & 31u) > 29u ? word(base + (j >> 5) + 1u) : 0u;
                r[e] = wk_kvq_dequant(wk_kvq_code_any(w0, w1, j & 31u, 3), ab);
            }
            kbuf[c] = r;
        }
    }
}

// This lane's chunks of key/value j (kv 0/1) of KV head kh in f16 into fbuf: from the window slot
// for positions stored by earlier steps, from this step's f16 copy (KA, VA) otherwise.
void load_f16(uint j, uint kv, uint kh, Tile tile, uint chunk_pos0, uint ch0, uint ncl) {
    uint C = pc.head_dim / 4u;
    if (j >= chunk_pos0) {
        uint at = ((tile.chunk_row0 + (j - chunk_pos0)) * pc.n_head_kv + kh) * C;
        [[unroll]] for (uint c = 0u; c < MAXC; ++c) {
            uint ch = ch0 + c;
            if (c < ncl && ch < C) {
                uvec2 h = kv == 0u ? texelFetch(KA, int(at + ch)).xy : texelFetch(VA, int(at + ch)).xy;
                fbuf[c] = vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
            }
        }
        return;
    }
    uint row = j < pc.sink ? j : pc.sink + (j - pc.sink) % max(pc.recent, 1u);
    uint base = tile.win_word + pc.win_off + row * pc.f16_row_words +
                ((pc.win_layer * 2u + kv) * pc.n_head_kv + kh) * (pc.head_dim / 2u);
    [[unroll]] for (uint c = 0u; c < MAXC; ++c) {
        uint ch = ch0 + c;
        if (c < ncl && ch < C)
            fbuf[c] = vec4(unpackHalf2x16(word(base + 2u * ch)), unpackHalf2x16(word(base + 2u * ch + 1u)));
    }
}

// Key (kv 0) or value (kv 1) j: from the blocks into kbuf, or in f16 (windows) into fbuf. Which
// one is a constant at every call: llvmpipe runs both sides of a branch under a lane mask, so a
// body with both paths would pay for both fetches on every key.
void load_kv(uint kv, uint j, bool f16) {
    if (f16) {
        load_f16(j, kv, g_kh, g_tile, g_chunk_pos0, g_ch0, g_ncl);
        return;
    }
    uint blk = tables[g_table_off + (j / pc.block_tokens) * pc.table_stride + pc.table_col];
    decode_lane(kv, blk * pc.block_words + g_slab[kv], j % pc.block_tokens, g_ch0, g_ncl, SC_NCL);
}

// Whether the row at position pos reads key j in f16 (a sink or one of its recent keys).
bool reads_f16(uint j, uint pos) { return g_windows && (j < pc.sink || j + pc.recent > pos); }

// One tile of up to KT keys from jt (to j1): scores, the online-softmax rescale, then the values.
// f16: the keys in f16, for the rows that read them so (windows); else from the blocks, for the
// rows that read them so. A key some rows of a tile read in f16 and others from the blocks (a
// recent key of its later rows only) is walked once each way, each row masking the other: every
// (row, key) pair counts once, and no body has both paths.
void key_tile(uint jt, uint j1, uint R, bool f16) {
    uint nk = min(KT, j1 - jt);
    for (uint kk = 0u; kk < nk; ++kk) {
        uint j = jt + kk;
        load_kv(0u, j, f16);
        [[unroll]] for (uint r = 0u; r < MAXR; ++r) {
            if (r >= R) continue;
            float s = 0.0;
            [[unroll]] for (uint c = 0u; c < MAXC; ++c)
                if (c < g_ncl) s += dot(qv[r * MAXC + c], f16 ? fbuf[c] : kbuf[c]);
            s = subgroupAdd(s);
            bool mine = reads_f16(j, pos_r[r]) == f16;
            sc[r * KT + kk] = (mine && j >= first_r[r] && j <= pos_r[r]) ? s : -1.0 / 0.0;
        }
    }
    [[unroll]] for (uint r = 0u; r < MAXR; ++r) {
        if (r >= R) continue;
        float mx = -1.0 / 0.0;
        [[unroll]] for (uint kk = 0u; kk < KT; ++kk)
            if (kk < nk) mx = max(mx, sc[r * KT + kk]);
        if (mx == -1.0 / 0.0) {  // no key of this tile is visible to the row
            [[unroll]] for (uint kk = 0u; kk < KT; ++kk) sc[r * KT + kk] = 0.0;
            continue;
        }
        float m_new = max(m_r[r], mx);
        if (m_new > m_r[r]) {
            float corr = exp(m_r[r] - m_new);
            l_r[r] *= corr;
            [[unroll]] for (uint c = 0u; c < MAXC; ++c) acc[r * MAXC + c] *= corr;
            m_r[r] = m_new;
        }
        float sum = 0.0;
        [[unroll]] for (uint kk = 0u; kk < KT; ++kk) {
            float p = kk < nk ? exp(sc[r * KT + kk] - m_new) : 0.0;
            sc[r * KT + kk] = p;
            sum += p;
        }
        l_r[r] += sum;
    }
    for (uint kk = 0u; kk < nk; ++kk) {
        uint j = jt + kk;
        load_kv(1u, j, f16);
        [[unroll]] for (uint r = 0u; r < MAXR; ++r) {
            float p = r < R ? sc[r * KT + kk] : 0.0;
            if (p == 0.0) continue;
            [[unroll]] for (uint c = 0u; c < MAXC; ++c) acc[r * MAXC + c] += p * (f16 ? fbuf[c] : kbuf[c]);
        }
    }
}

// The GPU variant's tile of bulk keys (no row reads them in f16): up to nl keys from jt (to j1).
// Lane i scores key jt + i against every row over the whole head vector, decoding it in pieces of
// MAXC chunks (queries from q_sh); then the online-softmax rescale per row, as key_tile's, with one
// subgroupMax and one subgroupAdd for the tile; then the values as key_tile's: lanes own chunks,
// each key's probabilities read from p_sh.
void key_tile_lanes(uint jt, uint j1, uint R) {
    uint lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x;
    uint nk = min(nl, j1 - jt), C = pc.head_dim / 4u;
    uint j = jt + min(lane, nk - 1u);  // lanes past the tile's keys score its last again (p 0 below)
    uint blk = tables[g_table_off + (j / pc.block_tokens) * pc.table_stride + pc.table_col];
    // Four sums a row (one per vector component), each over the pieces' own sums: no running sum
    // takes more than head_dim / 32 terms, as in the key-per-subgroup pipelines (a lane's chunks,
    // then across the lanes), so scores round about as finely.
    vec4 s4[MAXR];
    [[unroll]] for (uint r = 0u; r < MAXR; ++r) s4[r] = vec4(0.0);
    // Not unrolled: eight copies of the decode cost llvmpipe minutes of compile.
    [[dont_unroll]] for (uint pi = 0u; pi * MAXC < C; ++pi) {
        decode_lane(0u, blk * pc.block_words + g_slab[0], j % pc.block_tokens, pi * MAXC, MAXC, MAXC);
        [[unroll]] for (uint r = 0u; r < MAXR; ++r) {
            if (r >= R) continue;
            vec4 ps = vec4(0.0);  // the piece's own sums first: fewer terms in each running sum
            [[unroll]] for (uint c = 0u; c < MAXC; ++c)
                if (pi * MAXC + c < C) ps = fma(q_sh[r * LK_D4 + pi * MAXC + c], kbuf[c], ps);
            s4[r] += ps;
        }
    }
    [[unroll]] for (uint r = 0u; r < MAXR; ++r) {
        if (r >= R) continue;
        bool vis = lane < nk && !reads_f16(j, pos_r[r]) && j >= first_r[r] && j <= pos_r[r];
        float sr = vis ? (s4[r].x + s4[r].y) + (s4[r].z + s4[r].w) : -1.0 / 0.0;
        float mx = subgroupMax(sr), p = 0.0;
        if (mx != -1.0 / 0.0) {  // some key of the tile is visible to the row (uniform)
            float m_new = max(m_r[r], mx);
            if (m_new > m_r[r]) {
                float corr = exp(m_r[r] - m_new);
                l_r[r] *= corr;
                [[unroll]] for (uint c = 0u; c < MAXC; ++c) acc[r * MAXC + c] *= corr;
                m_r[r] = m_new;
            }
            p = vis ? exp(sr - m_new) : 0.0;
            l_r[r] += subgroupAdd(p);
        }
        p_sh[r * LK_SG + lane] = p;
    }
    barrier();
    for (uint kk = 0u; kk < nk; ++kk) {
        uint jj = jt + kk;
        uint b = tables[g_table_off + (jj / pc.block_tokens) * pc.table_stride + pc.table_col];
        decode_lane(1u, b * pc.block_words + g_slab[1], jj % pc.block_tokens, g_ch0, g_ncl, SC_NCL);
        [[unroll]] for (uint r = 0u; r < MAXR; ++r) {
            float p = r < R ? p_sh[r * LK_SG + kk] : 0.0;
            if (p == 0.0) continue;
            [[unroll]] for (uint c = 0u; c < MAXC; ++c) acc[r * MAXC + c] += p * kbuf[c];
        }
    }
    barrier();  // p_sh is read before the next tile writes it
}

// The keys read in f16: [a0, a1) (the sinks), then [b0, b1) (the recent keys), in one loop: one
// copy of key_tile's body (a second costs ten times the compile, docs/lavapipe.md "Compiling
// costs at first use").
void f16_keys(uint a0, uint a1, uint b0, uint b1, uint R) {
    bool in_a = a0 < a1;
    uint jt = in_a ? a0 : b0, end = in_a ? a1 : b1;
    while (jt < end) {
        key_tile(jt, end, R, true);
        jt = min(jt + KT, end);
        if (in_a && jt == end) { in_a = false; jt = b0; end = b1; }
    }
}

void main() {
    uint lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x;
    uint ti = gl_WorkGroupID.x, split = gl_WorkGroupID.z;
    if (ti >= pc.n_tiles) return;
    uint hpk = pc.n_head / pc.n_head_kv;              // query heads per KV head
    uint n_hc = (hpk + pc.head_rows - 1u) / pc.head_rows;
    uint kh = gl_WorkGroupID.y / n_hc, hc = gl_WorkGroupID.y % n_hc;
    Tile tile = tiles[ti];
    uint R = tile.n_tok * pc.head_rows;
    uint C = pc.head_dim / 4u;
    uint ncl = SC_NCL != 0u ? SC_NCL : (C + nl - 1u) / nl, ch0 = lane * ncl;
    uint table_off = rows[tile.row0].table_off;

    // Rows: (token of the tile, query head); an unused row has an empty key range.
    uint jlo = 0xffffffffu, jhi = 0u, pmin = 0xffffffffu;
    [[unroll]] for (uint r = 0u; r < MAXR; ++r) {
        uint t = tile.row0 + r / pc.head_rows, hh = hc * pc.head_rows + r % pc.head_rows;
        bool ok = r < R && hh < hpk;
        uint pos = ok ? rows[t].pos : 0u;
        pos_r[r] = pos;
        first_r[r] = !ok ? 1u : (pc.window != 0u && pos + 1u > pc.window) ? pos + 1u - pc.window : 0u;
        m_r[r] = -1.0 / 0.0;
        l_r[r] = 0.0;
        if (ok) { jlo = min(jlo, first_r[r]); jhi = max(jhi, pos); pmin = min(pmin, pos); }
        [[unroll]] for (uint c = 0u; c < MAXC; ++c) {
            uint ch = ch0 + c;
            qv[r * MAXC + c] = ok && c < ncl && ch < C ? texelFetch(Q, int((t * pc.n_head + kh * hpk + hh) * C + ch)) : vec4(0);
            acc[r * MAXC + c] = vec4(0);
        }
    }
    // Chained (a windows pass of one split after one or two bulk splits, the passes the whole key
    // range): each row's running max, sum and output where the bulk left them, the two splits'
    // partials combined as attention_reduce.comp combines them (a row without bulk keys: -inf, 0,
    // 0, as above), so the window keys continue its online softmax and no reduce pass runs. The
    // two slots are straight-line code, with no loop over splits: such a loop inside the rows' loop
    // kept llvmpipe compiling this 16-row body for over 20 minutes (docs/engine.md, "Chained"). With one bulk split its partial is taken as it is, to the bit.
    const bool chained = SC_PASS == 2u && pc.chain != 0u;
    if (chained) {
        bool two_bulk = pc.n_split > 2u;  // (slot 1 is then the second bulk split's, else this pass's own)
        [[unroll]] for (uint r = 0u; r < MAXR; ++r) {
            uint t = tile.row0 + r / pc.head_rows, hh = hc * pc.head_rows + r % pc.head_rows;
            if (r >= R || hh >= hpk) continue;
            uint at0 = ((t * pc.n_head + kh * hpk + hh) * pc.n_split) * (C + 1u), at1 = at0 + C + 1u;
            vec4 ml0 = texelFetch(PartIn, int(at0)), ml1 = texelFetch(PartIn, int(at1));
            // A split that saw no key of the row has l = 0 (and m = -inf): it adds nothing.
            bool both = two_bulk && ml0.y > 0.0 && ml1.y > 0.0, only1 = two_bulk && !(ml0.y > 0.0) && ml1.y > 0.0;
            float M = max(ml0.x, ml1.x), w0 = exp(ml0.x - M), w1 = exp(ml1.x - M);
            m_r[r] = both ? M : only1 ? ml1.x : ml0.x;
            l_r[r] = both ? ml0.y * w0 + ml1.y * w1 : only1 ? ml1.y : ml0.y;
            [[unroll]] for (uint c = 0u; c < MAXC; ++c) {
                if (!(c < ncl && ch0 + c < C)) continue;
                vec4 a0 = texelFetch(PartIn, int(at0 + 1u + ch0 + c)), a1 = texelFetch(PartIn, int(at1 + 1u + ch0 + c));
                acc[r * MAXC + c] = both ? a0 * w0 + a1 * w1 : only1 ? a1 : a0;
            }
        }
    }
    if (SC_LANE_KEYS != 0u) {  // the variant's queries, whole rows: each lane's chunks from qv
        [[unroll]] for (uint r = 0u; r < MAXR; ++r)
            [[unroll]] for (uint c = 0u; c < MAXC; ++c)
                if (c < ncl && ch0 + c < C) q_sh[r * LK_D4 + ch0 + c] = qv[r * MAXC + c];
        barrier();
    }
    g_windows = pc.sink + pc.recent > 0u;
    // The keys of this pass: [a0, a1) then [b0, b1). The bulk [ba, bb) holds every key some row
    // reads from the blocks: after the sinks, and older than the recent keys of the tile's latest
    // row. The windows hold every key some row reads in f16: the sinks [jlo, ba), and the recent
    // keys from the earliest row's, [bf, jhi]. The two overlap in the keys the tile's later rows
    // read in f16 and its earlier ones from the blocks (fewer than its tokens); key_tile masks.
    uint ba = jlo, bb = jhi + 1u, bf = jhi + 1u;
    if (g_windows && jlo <= jhi) {
        ba = clamp(pc.sink, jlo, jhi + 1u);
        bb = clamp(jhi + 1u > pc.recent ? jhi + 1u - pc.recent : 0u, ba, jhi + 1u);
        bf = clamp(pmin + 1u > pc.recent ? pmin + 1u - pc.recent : 0u, ba, jhi + 1u);
    }
    uint a0 = jlo, a1 = jhi + 1u, b0 = a1, b1 = a1;
    if (SC_PASS == 1u) a0 = ba, a1 = bb;
    if (SC_PASS == 2u) a1 = ba, b0 = bf;
    if (jlo > jhi) a0 = a1 = b0 = b1 = 0u;
    // This split's share of each range, in whole key tiles.
    uint nz = gl_NumWorkGroups.z;
    if (nz > 1u) {
        uint span_a = ((a1 - a0 + nz - 1u) / nz + KT - 1u) / KT * KT;
        uint span_b = ((b1 - b0 + nz - 1u) / nz + KT - 1u) / KT * KT;
        a0 = min(a0 + split * span_a, a1);
        a1 = min(a0 + span_a, a1);
        b0 = min(b0 + split * span_b, b1);
        b1 = min(b0 + span_b, b1);
    }
    uint j0 = a0, j1 = a1;  // the decode pipelines' range (pass 0: b is empty)
    g_chunk_pos0 = g_windows ? rows[tile.chunk_row0].pos : 0u;
    g_slab[0] = pc.k_off + kh * pc.k_slab_words;
    g_slab[1] = pc.v_off + kh * pc.slab_words;
    g_kh = kh, g_ch0 = ch0, g_ncl = ncl, g_table_off = table_off, g_tile = tile;

    if (SC_PASS == 1u) {
        // The bulk: no f16 path in the code at all; the GPU variant a key per lane.
        if (SC_LANE_KEYS != 0u)
            for (uint jt = a0; jt < a1; jt += nl) key_tile_lanes(jt, a1, R);
        else
            for (uint jt = a0; jt < a1; jt += KT) key_tile(jt, a1, R, false);
    } else if (SC_PASS == 2u) {
        f16_keys(a0, a1, b0, b1, R);  // the windows
    } else {
        // Decode: the keys some row reads from the blocks, [qa, qb) (all of them without windows),
        // in a loop without the f16 path; the sinks before them and the recent keys from qf in one
        // loop with only it. A loop runs only while a lane is active, so an empty one costs nothing.
        uint qa = clamp(ba, j0, j1), qb = clamp(bb, qa, j1), qf = clamp(bf, qa, j1);
        if (SC_LANE_KEYS != 0u)
            for (uint jt = qa; jt < qb; jt += nl) key_tile_lanes(jt, qb, R);
        else
            for (uint jt = qa; jt < qb; jt += KT) key_tile(jt, qb, R, false);
        f16_keys(j0, qa, qf, j1, R);
    }

    [[unroll]] for (uint r = 0u; r < MAXR; ++r) {
        uint t = tile.row0 + r / pc.head_rows, hh = hc * pc.head_rows + r % pc.head_rows;
        if (r >= R || hh >= hpk) continue;
        uint h = kh * hpk + hh;
        uint slot = SC_PASS == 2u ? pc.n_split - nz + split : split;  // its partial among the n_split
        if (pc.n_split == 1u || chained) {
            [[unroll]] for (uint c = 0u; c < MAXC; ++c) {
                uint ch = ch0 + c;
                if (c < ncl && ch < C) o4[(t * pc.n_head + h) * C + ch] = acc[r * MAXC + c] / l_r[r];
            }
        } else {
            // Partial of (token t, head h, split): [m, l, -, -] then C chunks.
            uint at = ((t * pc.n_head + h) * pc.n_split + slot) * (C + 1u);
            if (lane == 0u) part[at] = vec4(m_r[r], l_r[r], 0.0, 0.0);
            [[unroll]] for (uint c = 0u; c < MAXC; ++c) {
                uint ch = ch0 + c;
                if (c < ncl && ch < C) part[at + 1u + ch] = acc[r * MAXC + c];
            }
        }
    }
}
