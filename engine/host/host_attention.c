/* A group of a chunk's rows' paged attention on the host (host_attention.h): keys a tile of KT at
 * a time, each decoded once into floats (in each form some row reads it: codes or f16 windows) and
 * dotted with every row's query heads of its KV head (GQA), then one online-softmax rescale per
 * row, head and tile, then the values, as attention_paged.comp walks them.
 * The codes decode eight at a time from one 32-bit load (8 codes of b bits are 8b bits, so a
 * chunk starts on a byte: 2, 3 and 4 bits alike), in GCC's vector extensions: one body, built
 * three times, plain, for AVX2 + FMA + F16C and for AVX-512 (wk_host_isa). */
#include "host/host_attention.h"

#include <math.h>
#include <string.h>

#include "kv/kv_quant.h"
#include "model/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define WK_HOST_ATTN_X86 1
#endif

enum { KT = 32 }; /* keys a softmax tile, as the shader's WK_ATTN_KT */

/* Eight-float vectors: static helpers, always inlined, so no vector crosses a call (meson.build
 * builds this room with -Wno-psabi: GCC notes the AVX calling convention of functions that would
 * pass one). */
/* a * b + c as one fused multiply-add where the code has it (GCC's C11 mode turns contraction
 * off): the products here are sums of many terms, where fusing only rounds less. */
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
_Static_assert(WK_HOST_ATTN_MAX_ROWS <= 32 && KT <= 32, "rows and keys of a tile are bits of a uint32_t");

static int supported_bits(int bits) { return bits == 2 || bits == 3 || bits == 4 || bits == 16; }

int wk_host_attn_supports(const wk_pc_attention_paged *pc) {
    const uint32_t D = pc->head_dim;
    if (D == 0 || D % 8 || D > WK_HOST_ATTN_MAX_HEAD || pc->n_head_kv == 0 || pc->n_head % pc->n_head_kv) return 0;
    if (pc->n_head / pc->n_head_kv > WK_HOST_ATTN_MAX_GQA) return 0;
    if (!supported_bits(pc->bits) || !supported_bits(pc->k_bits) || (pc->bits == 16) != (pc->k_bits == 16)) return 0;
    return pc->bits == 16 || (pc->group > 0 && pc->group % 8 == 0 && D % (uint32_t)pc->group == 0);
}

#define WK_INLINE static inline __attribute__((always_inline))
WK_INLINE v8f load8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
WK_INLINE void store8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
#define SUM8(v) ((((v)[0] + (v)[4]) + ((v)[1] + (v)[5])) + (((v)[2] + (v)[6]) + ((v)[3] + (v)[7])))

/* n halves (a multiple of 8) to floats. */
static void halves_c(const uint16_t *h, float *y, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) y[i] = wk_f16_to_f32(h[i]);
}
#ifdef WK_HOST_ATTN_X86
__attribute__((target("avx2,fma,f16c"))) static void halves_f16c(const uint16_t *h, float *y, uint32_t n) {
    for (uint32_t i = 0; i < n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const void *)(h + i))));
}
#endif
/* One half to a float: F16C's conversion where the code has it (the same value: a half is exact
 * in f32), the C routine elsewhere; a group's parameters, 2-4 a key, 15-20 instructions each in C.
 * Not always_inline: GCC inlines it into the F16C builds, and the plain build's call is dead. */
#ifdef WK_HOST_ATTN_X86
__attribute__((target("f16c"))) static inline float half1_f16c(uint16_t h) { return _cvtsh_ss(h); }
#endif
WK_INLINE float half1(int f16c, uint16_t h) {
#ifdef WK_HOST_ATTN_X86
    if (f16c) return half1_f16c(h);
#endif
    (void)f16c;
    return wk_f16_to_f32(h);
}

WK_INLINE void halves(int f16c, const uint16_t *h, float *y, uint32_t n) {
#ifdef WK_HOST_ATTN_X86
    if (f16c) {
        halves_f16c(h, y, n);
        return;
    }
#endif
    (void)f16c;
    halves_c(h, y, n);
}

/* Token tt's codes of the slab at word `slab` (codes a token code_words apart, then its groups'
 * f16 parameters from params_words), decoded into y (D floats): u * a + b, a and b the group's
 * (kv_quant.glsl's wk_kvq_affine). */
WK_INLINE void decode_codes(const uint32_t *pool, uint32_t slab, uint32_t tt, int kind, int bits, uint32_t G,
                                uint32_t D, uint32_t code_words, uint32_t params_words, int f16c, float *y) {
    const uint8_t *codes = (const uint8_t *)(pool + slab + tt * code_words);
    const uint32_t groups = D / G, P = (uint32_t)wk_kvq_params_per_group((wk_kvq_kind)kind);
    const uint16_t *params = (const uint16_t *)(pool + slab + params_words) + (size_t)tt * groups * P;
    const v8u shift = {0, 1, 2, 3, 4, 5, 6, 7};
    const v8u sh = shift * (uint32_t)bits;
    const uint32_t mask = (1u << bits) - 1;
    for (uint32_t g = 0; g < groups; g++) {
        const float a = half1(f16c, params[g * P]);
        const float b = P == 2 ? half1(f16c, params[g * P + 1]) : (0.5f - (float)(1 << (bits - 1))) * a;
        const v8f av = {a, a, a, a, a, a, a, a}, bv = {b, b, b, b, b, b, b, b};
        for (uint32_t c = g * G / 8; c < (g + 1) * G / 8; c++) {
            /* Eight codes of `bits` bits from byte c * bits: four bytes hold them (with 2 or 3 bits
             * the rest belongs to the next codes or the parameters, inside the slab). */
            uint32_t w;
            memcpy(&w, codes + c * (uint32_t)bits, 4);
            const v8u wv = {w, w, w, w, w, w, w, w};
            const v8i u = (v8i)((wv >> sh) & mask);
            store8(y + 8 * c, __builtin_convertvector(u, v8f) * av + bv);
        }
    }
}

/* Whether a row at pos reads key j in f16: a sink or one of its recent keys (f16 windows). */
WK_INLINE int reads_f16(const wk_pc_attention_paged *pc, uint32_t j, uint32_t pos) {
    return pc->sink + pc->recent > 0 && (j < pc->sink || j + pc->recent > pos);
}

/* Key (kv 0) or value (kv 1) j of KV head kh into y, in f16 (f16 1: from the step's copy when j is
 * of the rows' chunk, else from the window slot) or from its block (f16 slab or codes). */
WK_INLINE void load_kv(const wk_host_attn_layer *L, const wk_host_attn_row *row, uint32_t kh, int kv, uint32_t j,
                       int f16, int f16c, float *y) {
    const wk_pc_attention_paged *pc = L->pc;
    const uint32_t D = pc->head_dim, HK = pc->n_head_kv;
    if (f16) {
        if (j >= row->chunk_pos0) {
            const uint16_t *copy = kv ? L->v16 : L->k16;
            halves(f16c, copy + ((size_t)(row->chunk_row0 + (j - row->chunk_pos0)) * HK + kh) * D, y, D);
            return;
        }
        const uint32_t wrow = j < pc->sink ? j : pc->sink + (j - pc->sink) % (pc->recent ? pc->recent : 1);
        const uint32_t at = row->win_word + pc->win_off + wrow * pc->f16_row_words + ((pc->win_layer * 2 + (uint32_t)kv) * HK + kh) * (D / 2);
        halves(f16c, (const uint16_t *)(L->pool + at), y, D);
        return;
    }
    const uint32_t blk = L->tables[row->table_off + (j / pc->block_tokens) * pc->table_stride + pc->table_col];
    const uint32_t tt = j % pc->block_tokens;
    const uint32_t slab = blk * pc->block_words + (kv ? pc->v_off + kh * pc->slab_words : pc->k_off + kh * pc->k_slab_words);
    if (pc->bits == 16) {
        halves(f16c, (const uint16_t *)(L->pool + slab) + (size_t)tt * D, y, D);
        return;
    }
    decode_codes(L->pool, slab, tt, pc->kind, kv ? pc->bits : pc->k_bits, (uint32_t)pc->group, D,
                 kv ? pc->code_words : pc->k_code_words, kv ? pc->params_words : pc->k_params_words, f16c, y);
}

/* Scores of query heads h0.. (4, the rows past hq repeating its last) against keys k0.. of the
 * tile (4, past nk repeating its last; key kk at kp[kk]) in 16 sums at once: a chunk of 8
 * dimensions is 8 loads for 16 products. Only the real (head, key) pairs are written. */
WK_INLINE void scores_4x4(const float *q, int hq, int h0, const float *const *kp, uint32_t nk, uint32_t k0,
                          uint32_t D, float sc[][KT]) {
    const float *qr[4], *kr[4];
    for (int x = 0; x < 4; x++) qr[x] = q + (size_t)(h0 + x < hq ? h0 + x : hq - 1) * D;
    for (uint32_t y = 0; y < 4; y++) kr[y] = kp[k0 + y < nk ? k0 + y : nk - 1];
    v8f acc[4][4] = {{{0}}};
    for (uint32_t i = 0; i < D; i += 8) {
        const v8f k_0 = load8(kr[0] + i), k_1 = load8(kr[1] + i), k_2 = load8(kr[2] + i), k_3 = load8(kr[3] + i);
        for (int x = 0; x < 4; x++) {
            const v8f qx = load8(qr[x] + i);
            acc[x][0] += qx * k_0, acc[x][1] += qx * k_1, acc[x][2] += qx * k_2, acc[x][3] += qx * k_3;
        }
    }
    for (int x = 0; x < 4 && h0 + x < hq; x++)
        for (uint32_t y = 0; y < 4 && k0 + y < nk; y++) sc[h0 + x][k0 + y] = SUM8(acc[x][y]);
}

/* The outputs of query heads h0.. (4, as above) += their probabilities times the tile's values
 * (key kk's at vp[kk]), a chunk of 8 dimensions at a time held in registers over all the keys. */
WK_INLINE void values_4(float *part, size_t stride, int hq, int h0, const float *const *vp, uint32_t nk, uint32_t D,
                        float sc[][KT]) {
    int hx[4];
    for (int x = 0; x < 4; x++) hx[x] = h0 + x < hq ? h0 + x : hq - 1;
    for (uint32_t i = 0; i < D; i += 8) {
        v8f acc[4];
        for (int x = 0; x < 4; x++) acc[x] = load8(part + hx[x] * stride + 2 + i);
        for (uint32_t kk = 0; kk < nk; kk++) {
            const v8f v = load8(vp[kk] + i);
            for (int x = 0; x < 4; x++) acc[x] += sc[hx[x]][kk] * v;
        }
        for (int x = 0; x < 4 && h0 + x < hq; x++) store8(part + hx[x] * stride + 2 + i, acc[x]);
    }
}

/* The tile's keys (kv 0) or values (kv 1) into blk / f16 (KT rows of D floats each): each in the
 * forms some row reads it in (need_blk, need_f16: a bit a key). */
WK_INLINE void load_tile(const wk_host_attn_layer *L, const wk_host_attn_row *row, uint32_t kh, int kv, uint32_t jt,
                         uint32_t nk, uint32_t need_blk, uint32_t need_f16, int f16c, float *blk, float *f16) {
    const uint32_t D = L->pc->head_dim;
    for (uint32_t kk = 0; kk < nk; kk++) {
        if (need_blk >> kk & 1) load_kv(L, row, kh, kv, jt + kk, 0, f16c, blk + (size_t)kk * D);
        if (need_f16 >> kk & 1) load_kv(L, row, kh, kv, jt + kk, 1, f16c, f16 + (size_t)kk * D);
    }
}

/* Where row's key (or value) j, the tile's kk-th, is: in the tile's f16 or block form, or zeros
 * when the row does not see it. */
WK_INLINE const float *key_at(const wk_pc_attention_paged *pc, const wk_host_attn_row *row, uint32_t j,
                              const float *blk, const float *f16, const float *zeros, uint32_t kk) {
    if (j < row->first || j > row->pos) return zeros;
    return (reads_f16(pc, j, row->pos) ? f16 : blk) + (size_t)kk * pc->head_dim;
}

/* wk_host_attn_part's body, built once a code (part_c, part_avx2, part_avx512): per tile of KT keys,
 * the keys decoded (once, in each form a row reads), each row's scores, one rescale a row and
 * head, the values decoded into the same buffers, each row's outputs. */
WK_INLINE void part_body(const wk_host_attn_layer *L, const wk_host_attn_row *rows, int n_rows, uint32_t kh,
                         const float *q, size_t q_stride, int hq, uint32_t j0, uint32_t j1, float *part, int f16c) {
    const wk_pc_attention_paged *pc = L->pc;
    const uint32_t D = pc->head_dim;
    const size_t stride = (size_t)D + 2;
    /* On the stack, sized by the call (72 KiB for Gemma 3: two tiles of 32 x 256 floats; 384 KiB at
     * most, head_dim 1024 and 64 query heads a KV head, within the default 2-8 MiB stacks of the
     * engine's and the pool's threads): static thread storage would grow every thread of the
     * process, small-stacked ones too (bench --url's clients could not start). A key a row does
     * not see reads `zeros` (its weight is 0, and 0 times a stale NaN would not be). */
    static const float zeros[WK_HOST_ATTN_MAX_HEAD];
    float tile_blk[KT * D] __attribute__((aligned(32))), tile_f16[KT * D] __attribute__((aligned(32)));
    float sc_rows[n_rows * hq][KT];
    for (int i = 0; i < n_rows * hq; i++) {
        float *p = part + i * stride;
        p[0] = -INFINITY, p[1] = 0;
        memset(p + 2, 0, D * sizeof(float));
    }
    const float *kp[KT];
    for (uint32_t jt = j0; jt < j1; jt += KT) {
        const uint32_t nk = j1 - jt < KT ? j1 - jt : KT;
        /* Which keys some row sees from the blocks, which in f16; which rows see any. */
        uint32_t need_blk = 0, need_f16 = 0, rows_in = 0;
        for (int r = 0; r < n_rows; r++)
            for (uint32_t kk = 0; kk < nk; kk++) {
                const uint32_t j = jt + kk;
                if (j < rows[r].first || j > rows[r].pos) continue;
                rows_in |= 1u << r;
                if (reads_f16(pc, j, rows[r].pos)) need_f16 |= 1u << kk;
                else need_blk |= 1u << kk;
            }
        if (!rows_in) continue;
        load_tile(L, rows, kh, 0, jt, nk, need_blk, need_f16, f16c, tile_blk, tile_f16);
        for (int r = 0; r < n_rows; r++) {
            if (!(rows_in >> r & 1)) continue;
            const wk_host_attn_row *row = &rows[r];
            float(*sc)[KT] = sc_rows + r * hq;
            for (uint32_t kk = 0; kk < nk; kk++)
                kp[kk] = key_at(pc, row, jt + kk, tile_blk, tile_f16, zeros, kk);
            for (int h0 = 0; h0 < hq; h0 += 4)
                for (uint32_t k0 = 0; k0 < nk; k0 += 4) scores_4x4(q + r * q_stride, hq, h0, kp, nk, k0, D, sc);
            /* One rescale a head and tile: the new max, the old sum and output scaled to it; the
             * keys the row does not see weigh nothing. */
            for (int h = 0; h < hq; h++) {
                float *p = part + ((size_t)r * hq + h) * stride;
                float mx = p[0];
                for (uint32_t kk = 0; kk < nk; kk++) {
                    const uint32_t j = jt + kk;
                    if (j < row->first || j > row->pos) sc[h][kk] = -INFINITY;
                    mx = sc[h][kk] > mx ? sc[h][kk] : mx;
                }
                if (mx > p[0]) {
                    const float corr = expf(p[0] - mx);
                    p[1] *= corr;
                    for (uint32_t i = 0; i < D; i++) p[2 + i] *= corr;
                    p[0] = mx;
                }
                for (uint32_t kk = 0; kk < nk; kk++) {
                    sc[h][kk] = expf(sc[h][kk] - mx);
                    p[1] += sc[h][kk];
                }
            }
        }
        load_tile(L, rows, kh, 1, jt, nk, need_blk, need_f16, f16c, tile_blk, tile_f16);
        for (int r = 0; r < n_rows; r++) {
            if (!(rows_in >> r & 1)) continue;
            for (uint32_t kk = 0; kk < nk; kk++)
                kp[kk] = key_at(pc, &rows[r], jt + kk, tile_blk, tile_f16, zeros, kk);
            for (int h0 = 0; h0 < hq; h0 += 4)
                values_4(part + (size_t)r * hq * stride, stride, hq, h0, kp, nk, D, sc_rows + r * hq);
        }
    }
}

#define PART_ARGS                                                                                           \
    const wk_host_attn_layer *L, const wk_host_attn_row *rows, int n_rows, uint32_t kh, const float *q, size_t q_stride, \
        int hq, uint32_t j0, uint32_t j1, float *part
static void part_c(PART_ARGS) { part_body(L, rows, n_rows, kh, q, q_stride, hq, j0, j1, part, 0); }
#ifdef WK_HOST_ATTN_X86
/* With AVX-512's 32 vector registers the 4 x 4 score block's 16 sums stay in registers. */
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl"))) static void part_avx512(PART_ARGS) {
    part_body(L, rows, n_rows, kh, q, q_stride, hq, j0, j1, part, 1);
}
__attribute__((target("avx2,fma,f16c"))) static void part_avx2(PART_ARGS) {
    part_body(L, rows, n_rows, kh, q, q_stride, hq, j0, j1, part, 1);
}
#endif

void wk_host_attn_part(wk_host_isa isa, PART_ARGS) {
#ifdef WK_HOST_ATTN_X86
    if (isa != WK_HOST_ISA_C) {
        (isa == WK_HOST_ISA_AVX512 ? part_avx512 : part_avx2)(L, rows, n_rows, kh, q, q_stride, hq, j0, j1, part);
        return;
    }
#endif
    (void)isa;
    part_c(L, rows, n_rows, kh, q, q_stride, hq, j0, j1, part);
}

void wk_host_attn_merge(int n, const float *part, size_t stride, int D, float *out) {
    float M = -INFINITY;
    for (int i = 0; i < n; i++)
        if (part[i * stride + 1] > 0) M = fmaxf(M, part[i * stride]);
    float l = 0;
    for (int d = 0; d < D; d++) out[d] = 0;
    for (int i = 0; i < n; i++) {
        const float *p = part + i * stride;
        if (!(p[1] > 0)) continue; /* a split that saw no key adds nothing */
        const float w = expf(p[0] - M);
        l += p[1] * w;
        for (int d = 0; d < D; d++) out[d] += p[2 + d] * w;
    }
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    for (int d = 0; d < D; d++) out[d] *= inv;
}
