/* A group of a chunk's rows' paged attention on the host (host_attention.h): keys a tile of KT at
 * a time, each decoded once into floats (in each form some row reads it: codes or f16 windows) and
 * dotted with every row's query heads of its KV head (GQA), then one online-softmax rescale per
 * row, head and tile, then the values, as attention_paged.comp walks them. The walk is
 * host_attention_kernel.h, in GCC's vector extensions, built for two vector widths and three codes
 * (wk_host_isa): 8 floats plain and for AVX2 + FMA + F16C, 16 for AVX-512; this file holds what
 * the widths share (the halves, the windows, the softmax) and picks the code. */
#include "host/host_attention.h"

#include <math.h>
#include <string.h>

#include "base/row_math.h"
#include "kv/kv_quant.h"
#include "model/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define WK_HOST_ATTN_X86 1
#endif

enum { KT = 32 }; /* keys a softmax tile, as the shader's WK_ATTN_KT */

/* Vectors only in static helpers, always inlined, so no vector crosses a call (meson.build builds
 * this room with -Wno-psabi: GCC notes the AVX calling convention of functions that would pass one). */
/* a * b + c as one fused multiply-add where the code has it (GCC's C11 mode turns contraction
 * off): the products here are sums of many terms, where fusing only rounds less. */
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif
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

/* Bits lo .. hi-1 of a tile's key mask (hi <= KT). */
WK_INLINE uint32_t key_bits(uint32_t lo, uint32_t hi) {
    if (hi <= lo) return 0;
    return (hi >= 32 ? ~0u : (1u << hi) - 1) & ~((1u << lo) - 1);
}

/* The keys a row sees of the tile of nk keys from jt, first .. pos, as a mask. */
WK_INLINE uint32_t row_sees(const wk_host_attn_row *row, uint32_t jt, uint32_t nk) {
    if (row->pos < jt) return 0;
    const uint32_t lo = row->first > jt ? row->first - jt : 0, last = row->pos - jt;
    return key_bits(lo, last + 1 < nk ? last + 1 : nk);
}

/* Of the keys a row at pos sees (`seen`), those it reads in f16 (f16 windows), as a mask: the
 * sinks, j < sink, and its recent keys, j + recent > pos. */
WK_INLINE uint32_t row_f16_keys(const wk_pc_attention_paged *pc, uint32_t pos, uint32_t jt, uint32_t nk, uint32_t seen) {
    if (pc->sink + pc->recent == 0) return 0;
    const uint32_t sinks = pc->sink > jt ? key_bits(0, pc->sink - jt < nk ? pc->sink - jt : nk) : 0;
    const uint32_t from = pos + 1 > pc->recent ? pos + 1 - pc->recent : 0; /* the first recent key */
    const uint32_t recent = pc->recent == 0 ? 0 : key_bits(from > jt ? (from - jt < nk ? from - jt : nk) : 0, nk);
    return (sinks | recent) & seen;
}

/* Where a row's key (or value) kk of the tile is, from the row's masks: in the tile's f16 or block
 * form, or zeros when the row does not see it. */
WK_INLINE const float *key_at(uint32_t seen, uint32_t f16_keys, uint32_t kk, uint32_t D, const float *blk,
                              const float *f16, const float *zeros) {
    if (!(seen >> kk & 1)) return zeros;
    return (f16_keys >> kk & 1 ? f16 : blk) + (size_t)kk * D;
}

/* One rescale a head of a row for a tile of scores sc (nk keys, `seen` those the row sees, a bit
 * a key): the new max, the old sum and output (part, a head stride floats apart) scaled to it, the
 * scores turned into weights (avx512: the exponential in 16 lanes); the keys the row does not see
 * weigh nothing. */
WK_INLINE void softmax_tile(float *part, size_t stride, int hq, uint32_t seen, uint32_t nk, uint32_t D,
                            float sc[][KT], int avx512) {
    float l[WK_HOST_ATTN_MAX_GQA];
    for (int h = 0; h < hq; h++) {
        float *p = part + (size_t)h * stride;
        /* The max in 8 running maxima, each a chain of compares 8 keys apart, where one chain of
         * nk waited on every compare: the same value (a NaN score is skipped by every one). */
        float m8[8];
        for (int i = 0; i < 8; i++) m8[i] = p[0];
        for (uint32_t kk = 0; kk < nk; kk++) {
            if (!(seen >> kk & 1)) sc[h][kk] = -INFINITY;
            m8[kk % 8] = sc[h][kk] > m8[kk % 8] ? sc[h][kk] : m8[kk % 8];
        }
        float mx = m8[0];
        for (int i = 1; i < 8; i++) mx = m8[i] > mx ? m8[i] : mx;
        if (mx > p[0]) {
            const float corr = expf(p[0] - mx);
            p[1] *= corr;
            for (uint32_t i = 0; i < D; i++) p[2 + i] *= corr;
            p[0] = mx;
        }
        /* The weights in vectors (row_math's exponential, 0 for the keys not seen; in 16 lanes
         * with AVX-512): 32 calls of libm's expf a head and tile were ~8% of a 2-bit key's time,
         * and the 4-lane exponential ~15% of AVX-512's. */
        wk_row_exp_terms(sc[h], (int)nk, mx, sc[h], avx512);
        l[h] = p[1];
    }
    /* Each head's sum stays one chain over the keys in order, whatever the tiles' bounds: a prefix
     * cache's warm rows match cold ones bit for bit (test_prefix_cache), which a sum a tile would
     * not. The heads' chains side by side, so their adds overlap. */
    for (uint32_t kk = 0; kk < nk; kk++)
        for (int h = 0; h < hq; h++) l[h] += sc[h][kk];
    for (int h = 0; h < hq; h++) part[(size_t)h * stride + 1] = l[h];
}

/* The key walk, once a vector width (host_attention_kernel.h): part_body_8 for every code,
 * part_body_16 for AVX-512. */
#define VN 8
#include "host/host_attention_kernel.h"
#undef VN
#ifdef WK_HOST_ATTN_X86
#define VN 16
#include "host/host_attention_kernel.h"
#undef VN
#endif

#define PART_ARGS                                                                                           \
    const wk_host_attn_layer *L, const wk_host_attn_row *rows, int n_rows, uint32_t kh, const float *q, size_t q_stride, \
        int hq, uint32_t j0, uint32_t j1, float *part
static void part_c(PART_ARGS) { part_body_8(L, rows, n_rows, kh, q, q_stride, hq, j0, j1, part, 0); }
#ifdef WK_HOST_ATTN_X86
/* AVX-512 in 16 lanes where a head and a group are whole chunks of 16 (every code format: groups
 * are 16-256; an f16 head of 8 * odd dimensions takes the 8-lane walk). */
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl"))) static void part_avx512(PART_ARGS) {
    if (L->pc->head_dim % 16 == 0 && (L->pc->bits == 16 || L->pc->group % 16 == 0))
        part_body_16(L, rows, n_rows, kh, q, q_stride, hq, j0, j1, part, 1);
    else
        part_body_8(L, rows, n_rows, kh, q, q_stride, hq, j0, j1, part, 1);
}
__attribute__((target("avx2,fma,f16c"))) static void part_avx2(PART_ARGS) {
    part_body_8(L, rows, n_rows, kh, q, q_stride, hq, j0, j1, part, 1);
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
