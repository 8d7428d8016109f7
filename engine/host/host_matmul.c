/* The host's weight products (host_matmul.h): the jobs on the pool's threads (rows in jobs of at
 * most MAX_ROWS_PER_JOB) and the row-major kernels, one per instruction set (plain C, AVX2 + FMA +
 * F16C, AVX-512F), chosen at run time, so the build stays baseline x86-64 (or any other CPU, which
 * takes the C); a matrix stored by panels (the layers', the output head's: whatever fits 16-row
 * panels) takes host_panels.c's kernels instead. Each row-major kernel, for a matrix whose rows do
 * not fit panels, forms a group of 16 weights as the shaders do (code * scale + offset; a half)
 * and multiplies it with several rows of activations at once (8 with AVX-512, else 4), so a row's
 * codes are decoded once per tile of tokens and fetched from memory once per call. */
#include "host/host_matmul.h"
#include "host/host_panels.h"

#include <stdbool.h>
#include <string.h>

#include "model/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define WK_HOST_X86 1
#endif

/* Rows a job, at most: 256 rows of 640 weights are ~200 KB of codes and pairs, big enough that
 * handing a job out costs nothing, small enough that 1024 jobs balance the threads of a
 * 262144-row head. A smaller matrix (a layer's W_o: 640 rows) is cut into at least 4 jobs a thread
 * (wk_host_matmul), so no thread waits long on the last. */
#define MAX_ROWS_PER_JOB 256

/* Tokens a block: one AVX-512 tile (two AVX2 tiles). A job's rows then pass over 8 tokens'
 * activations (20-64 KB, in a core's L1 or L2) before the next 8; with blocks of 32 a 4096 x 640
 * product of 64 or 512 tokens ran at 54-72 GFLOP/s, with 8 at 81-84 (build/tests/bench_host_matmul,
 * 2026-12-07 05:00 UTC). */
#define TOKENS_PER_BLOCK 8

typedef struct job {
    const wk_host_matrix *m;
    const float *x;
    int n;
    float *y;
    size_t ldy;
    wk_host_isa isa;
    uint32_t rows_per_job;
} job;

static inline size_t group_at(const wk_host_matrix *m, uint32_t r, uint32_t g) {
    return (size_t)r * (m->cols / 16) + g;
}

/* ---- plain C ----------------------------------------------------------------------------------- */

static void group_c(const wk_host_matrix *m, uint32_t r, uint32_t g, float w[16]) {
    const size_t k = group_at(m, r, g);
    if (m->fmt == WK_HOST_F16) {
        const uint16_t *h = (const uint16_t *)m->codes + k * 16;
        for (int i = 0; i < 16; i++) w[i] = wk_f16_to_f32(h[i]);
        return;
    }
    float s, o;
    if (m->fmt == WK_HOST_Q8A) {
        s = ((const float *)m->pairs)[2 * k];
        o = ((const float *)m->pairs)[2 * k + 1];
    } else {
        const uint32_t u = ((const uint32_t *)m->pairs)[k];
        s = wk_f16_to_f32((uint16_t)(u & 0xffffu));
        o = wk_f16_to_f32((uint16_t)(u >> 16));
    }
    const int8_t *c = (const int8_t *)m->codes + k * 16;
    for (int i = 0; i < 16; i++) w[i] = (float)c[i] * s + o;
}

static void rows_c(const job *jb, uint32_t r0, uint32_t r1) {
    const wk_host_matrix *m = jb->m;
    const uint32_t G = m->cols / 16;
    for (uint32_t r = r0; r < r1; r++)
        for (int t0 = 0; t0 < jb->n; t0 += 4) {
            const int nt = jb->n - t0 < 4 ? jb->n - t0 : 4;
            float acc[4][16] = {{0}}, w[16];
            for (uint32_t g = 0; g < G; g++) {
                group_c(m, r, g, w);
                for (int t = 0; t < nt; t++) {
                    const float *xg = jb->x + (size_t)(t0 + t) * m->cols + 16 * g;
                    for (int i = 0; i < 16; i++) acc[t][i] += w[i] * xg[i];
                }
            }
            for (int t = 0; t < nt; t++) {
                float s = 0;
                for (int i = 0; i < 16; i++) s += acc[t][i];
                jb->y[(size_t)(t0 + t) * jb->ldy + r] = s;
            }
        }
}

#ifdef WK_HOST_X86

/* ---- AVX2 + FMA + F16C: a group as two 8-lane halves ------------------------------------------- */

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE_AVX2 static inline __attribute__((always_inline, target("avx2,fma,f16c")))

INLINE_AVX2 void pair_avx2(const wk_host_matrix *m, wk_host_wfmt fmt, size_t k, __m256 *s, __m256 *o) {
    if (fmt == WK_HOST_Q8A) {
        const float *p = (const float *)m->pairs + 2 * k;
        *s = _mm256_broadcast_ss(p);
        *o = _mm256_broadcast_ss(p + 1);
    } else {
        const __m128 so = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((const uint32_t *)m->pairs)[k]));
        *s = _mm256_broadcastss_ps(so);
        *o = _mm256_broadcastss_ps(_mm_movehdup_ps(so));
    }
}

INLINE_AVX2 void group_avx2(const wk_host_matrix *m, wk_host_wfmt fmt, size_t k, __m256 *lo, __m256 *hi) {
    if (fmt == WK_HOST_F16) {
        const __m128i *h = (const __m128i *)((const uint16_t *)m->codes + k * 16);
        *lo = _mm256_cvtph_ps(_mm_loadu_si128(h));
        *hi = _mm256_cvtph_ps(_mm_loadu_si128(h + 1));
        return;
    }
    __m256 s, o;
    pair_avx2(m, fmt, k, &s, &o);
    const __m128i c = _mm_loadu_si128((const __m128i *)((const int8_t *)m->codes + k * 16));
    *lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)), s, o);
    *hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c, 8))), s, o);
}

INLINE_AVX2 float hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Rows r .. r+NR-1 of one token x into y: two 8-lane sums a row, added at the end. */
#define SINGLE_AVX2(NR)                                                                                              \
    do {                                                                                                             \
        __m256 a[NR][2];                                                                                             \
        for (int i = 0; i < NR; i++) a[i][0] = a[i][1] = _mm256_setzero_ps();                                        \
        for (uint32_t g = 0; g < G; g++) {                                                                           \
            const __m256 xl = _mm256_loadu_ps(x + 16 * g), xh = _mm256_loadu_ps(x + 16 * g + 8);                     \
            for (int i = 0; i < NR; i++) {                                                                           \
                __m256 lo, hi;                                                                                       \
                group_avx2(m, fmt, group_at(m, r + i, g), &lo, &hi);                                                 \
                a[i][0] = _mm256_fmadd_ps(lo, xl, a[i][0]);                                                          \
                a[i][1] = _mm256_fmadd_ps(hi, xh, a[i][1]);                                                          \
            }                                                                                                        \
        }                                                                                                            \
        for (int i = 0; i < NR; i++) y[r + i] = hsum_avx2(_mm256_add_ps(a[i][0], a[i][1]));                          \
    } while (0)

/* Row r of token tile t0 .. t0+3 as two 8-lane sums a token (a group's halves), over the groups in
 * order; every path below sums a (row, token) in this order, so a token's products do not depend on
 * the tile it lands in, nor on how many tokens share its step. */
INLINE_AVX2 void rows_avx2_fmt(const job *jb, wk_host_wfmt fmt, uint32_t r0, uint32_t r1) {
    const wk_host_matrix *m = jb->m;
    const uint32_t G = m->cols / 16;
    const size_t cols = m->cols;
    const int tiled = jb->n / 4 * 4;
    for (uint32_t r = r0; r < r1; r++) {
        const size_t k0 = group_at(m, r, 0);
        for (int t0 = 0; t0 < tiled; t0 += 4) {
            const float *x = jb->x + (size_t)t0 * cols;
            __m256 a[4][2];
            for (int t = 0; t < 4; t++) a[t][0] = a[t][1] = _mm256_setzero_ps();
            for (uint32_t g = 0; g < G; g++) {
                __m256 lo, hi;
                group_avx2(m, fmt, k0 + g, &lo, &hi);
                for (int t = 0; t < 4; t++) {
                    a[t][0] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(x + t * cols + 16 * g), a[t][0]);
                    a[t][1] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(x + t * cols + 16 * g + 8), a[t][1]);
                }
            }
            for (int t = 0; t < 4; t++) jb->y[(size_t)(t0 + t) * jb->ldy + r] = hsum_avx2(_mm256_add_ps(a[t][0], a[t][1]));
        }
    }
    /* The tokens after the tiles one at a time, four rows at once: eight independent sums in flight. */
    for (int t = tiled; t < jb->n; t++) {
        const float *x = jb->x + (size_t)t * cols;
        float *y = jb->y + (size_t)t * jb->ldy;
        uint32_t r = r0;
        for (; r + 4 <= r1; r += 4) SINGLE_AVX2(4);
        for (; r < r1; r++) SINGLE_AVX2(1);
    }
}

/* kernel(jb, FORMAT, r0, r1) with the matrix's format as a constant, so each always-inline kernel
 * is compiled once per format with the other formats' branches folded away. */
#define BY_FORMAT(kernel, jb, r0, r1)                                                         \
    do {                                                                                      \
        if ((jb)->m->fmt == WK_HOST_Q8A) kernel(jb, WK_HOST_Q8A, r0, r1);                     \
        else if ((jb)->m->fmt == WK_HOST_Q8H) kernel(jb, WK_HOST_Q8H, r0, r1);                \
        else kernel(jb, WK_HOST_F16, r0, r1);                                                 \
    } while (0)

AVX2 static void rows_avx2(const job *jb, uint32_t r0, uint32_t r1) { BY_FORMAT(rows_avx2_fmt, jb, r0, r1); }

/* ---- AVX-512F: a group in one 16-lane vector --------------------------------------------------- */

#define AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define INLINE_AVX512 static inline __attribute__((always_inline, target("avx512f,avx2,fma,f16c")))

INLINE_AVX512 __m512 group_avx512(const wk_host_matrix *m, wk_host_wfmt fmt, size_t k) {
    if (fmt == WK_HOST_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)m->codes + k * 16)));
    __m512 s, o;
    if (fmt == WK_HOST_Q8A) {
        const float *p = (const float *)m->pairs + 2 * k;
        s = _mm512_set1_ps(p[0]);
        o = _mm512_set1_ps(p[1]);
    } else {
        const __m128 so = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((const uint32_t *)m->pairs)[k]));
        s = _mm512_broadcastss_ps(so);
        o = _mm512_broadcastss_ps(_mm_movehdup_ps(so));
    }
    const __m128i c = _mm_loadu_si128((const __m128i *)((const int8_t *)m->codes + k * 16));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c)), s, o);
}

/* Tokens t0 .. t0+NT-1 of row r: a decoded group serves NT products (32 registers hold 8 sums). */
#define TILE_AVX512(NT)                                                                                              \
    do {                                                                                                             \
        const float *x = jb->x + (size_t)t0 * cols;                                                                  \
        __m512 a[NT];                                                                                                \
        for (int t = 0; t < NT; t++) a[t] = _mm512_setzero_ps();                                                     \
        for (uint32_t g = 0; g < G; g++) {                                                                           \
            const __m512 w = group_avx512(m, fmt, k0 + g);                                                           \
            for (int t = 0; t < NT; t++) a[t] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + t * cols + 16 * g), a[t]);    \
        }                                                                                                            \
        for (int t = 0; t < NT; t++) jb->y[(size_t)(t0 + t) * jb->ldy + r] = _mm512_reduce_add_ps(a[t]);             \
    } while (0)

/* Rows r .. r+NR-1 of one token x into y: a sum a row. */
#define SINGLE_AVX512(NR)                                                                                            \
    do {                                                                                                             \
        __m512 a[NR];                                                                                                \
        for (int i = 0; i < NR; i++) a[i] = _mm512_setzero_ps();                                                     \
        for (uint32_t g = 0; g < G; g++) {                                                                           \
            const __m512 xg = _mm512_loadu_ps(x + 16 * g);                                                           \
            for (int i = 0; i < NR; i++) a[i] = _mm512_fmadd_ps(group_avx512(m, fmt, group_at(m, r + i, g)), xg, a[i]); \
        }                                                                                                            \
        for (int i = 0; i < NR; i++) y[r + i] = _mm512_reduce_add_ps(a[i]);                                          \
    } while (0)

/* As the AVX2 kernel: one sum a (row, token) over the groups in order, in every path. */
INLINE_AVX512 void rows_avx512_fmt(const job *jb, wk_host_wfmt fmt, uint32_t r0, uint32_t r1) {
    const wk_host_matrix *m = jb->m;
    const uint32_t G = m->cols / 16;
    const size_t cols = m->cols;
    const int tiled8 = jb->n / 8 * 8, tiled = jb->n / 4 * 4;
    for (uint32_t r = r0; r < r1; r++) {
        const size_t k0 = group_at(m, r, 0);
        int t0 = 0;
        for (; t0 < tiled8; t0 += 8) TILE_AVX512(8);
        for (; t0 < tiled; t0 += 4) TILE_AVX512(4);
    }
    /* The tokens after the tiles one at a time, four rows at once: four independent sums in flight. */
    for (int t = tiled; t < jb->n; t++) {
        const float *x = jb->x + (size_t)t * cols;
        float *y = jb->y + (size_t)t * jb->ldy;
        uint32_t r = r0;
        for (; r + 4 <= r1; r += 4) SINGLE_AVX512(4);
        for (; r < r1; r++) SINGLE_AVX512(1);
    }
}

AVX512 static void rows_avx512(const job *jb, uint32_t r0, uint32_t r1) { BY_FORMAT(rows_avx512_fmt, jb, r0, r1); }

#endif /* WK_HOST_X86 */

wk_host_isa wk_host_isa_best(void) {
#ifdef WK_HOST_X86
    /* __builtin_cpu_supports checks that the OS saves the AVX and AVX-512 registers; F16C (which
     * clang's builtin cannot name) is CPUID leaf 1, ECX bit 29, and needs only what AVX2 needs. */
    unsigned a, b, c, d;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    __builtin_cpu_init();
    if (!f16c || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return WK_HOST_ISA_C;
    return __builtin_cpu_supports("avx512f") ? WK_HOST_ISA_AVX512 : WK_HOST_ISA_AVX2;
#else
    return WK_HOST_ISA_C;
#endif
}

const char *wk_host_isa_name(wk_host_isa isa) {
    return isa == WK_HOST_ISA_AVX512 ? "avx512" : isa == WK_HOST_ISA_AVX2 ? "avx2" : "c";
}

static void run_job(void *ctx, int j) {
    const job *all = ctx;
    const uint32_t r0 = (uint32_t)j * all->rows_per_job;
    const uint32_t r1 = r0 + all->rows_per_job < all->m->rows ? r0 + all->rows_per_job : all->m->rows;
    if (all->m->layout == WK_HOST_PANELS) { /* its own passes over the tokens (host_panels.c) */
        wk_host_panels_product(all->m, all->isa, all->x, all->n, all->y, all->ldy, r0 / 16, r1 / 16);
        return;
    }
    /* Tokens in blocks, so a block's activations stay in the core's cache while every row of the
     * job passes over them: a 512-token step's input to W_down is 4 MB (2048 columns), and read
     * whole for each row it made a prefill's host products twice as slow. A token's sums are the
     * same in any block. */
    for (int t0 = 0; t0 < all->n; t0 += TOKENS_PER_BLOCK) {
        job jb = *all;
        jb.x = all->x + (size_t)t0 * all->m->cols;
        jb.y = all->y + (size_t)t0 * all->ldy;
        jb.n = all->n - t0 < TOKENS_PER_BLOCK ? all->n - t0 : TOKENS_PER_BLOCK;
        switch (jb.isa) {
#ifdef WK_HOST_X86
        case WK_HOST_ISA_AVX512: rows_avx512(&jb, r0, r1); break;
        case WK_HOST_ISA_AVX2: rows_avx2(&jb, r0, r1); break;
#endif
        default: rows_c(&jb, r0, r1); break;
        }
    }
}

void wk_host_matmul(wk_host_pool *pool, wk_host_isa isa, const wk_host_matrix *m, const float *x, int n, float *y,
                    size_t ldy) {
    const uint32_t threads = pool ? (uint32_t)wk_host_pool_threads(pool) : 1;
    /* Jobs of whole units (16 rows; by panels a pass of the kernel: 4 panels for 1-3 tokens, else
     * 2), at least four a thread: the units divided by 4 x threads, rounded down, so that a layer's
     * 640 rows make 10 jobs of 64 on 2 threads, not 5 of 128 (3 jobs on one thread, 2 on the other). */
    const uint32_t unit = m->layout != WK_HOST_PANELS ? 16 : n < 4 ? 64 : 32;
    const uint32_t units = (m->rows + unit - 1) / unit, per_units = units / (4 * threads);
    uint32_t per = (per_units ? per_units : 1) * unit;
    if (per > MAX_ROWS_PER_JOB) per = MAX_ROWS_PER_JOB;
    job jb = {m, x, n, y, ldy, isa, per};
    const int n_jobs = (int)((m->rows + per - 1) / per);
    if (n <= 0 || n_jobs <= 0) return;
    if (pool) wk_host_pool_run(pool, n_jobs, run_job, &jb);
    else
        for (int j = 0; j < n_jobs; j++) run_job(&jb, j);
}
