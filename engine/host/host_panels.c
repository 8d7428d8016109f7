/* The host's weight products by panels (host_panels.h): the packing at upload and one kernel per
 * instruction set. With AVX-512 a pass takes 2 panels (32 rows) and 12 tokens: each column step
 * forms the panels' two columns of weights (2 loads of 16 codes) and adds each times a broadcast of
 * each token's input into 24 sums, 24 fused multiply-adds for 14 loads and 6 conversions; the
 * row-major kernel (host_matmul.c) this replaces for the layers loaded a token's 16 inputs for
 * every 16 fused multiply-adds and ended each (row, token) in a horizontal sum, and ran a 4096 x
 * 640 product at 56-82 GFLOP/s on this project's 2-core Xeon from 8 tokens on, where this runs it
 * at 210-250 (tests/bench_host_matmul; docs/benchmarks-host.md). Fewer tokens take more panels a
 * pass (4 for 1-3, 8 for one where a job has them), so a decode step still has enough independent
 * sums in flight. AVX2 (16 registers) takes half a panel and up to 12 tokens (1-3 tokens: a whole
 * panel); plain C, one panel and 4 tokens. */
#include "host/host_panels.h"

#include <string.h>

#include "model/quant.h" /* wk_f16_to_f32 */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define WK_HOST_X86 1
#endif

void wk_host_pack_panels(wk_host_wfmt fmt, uint32_t rows, uint32_t cols, const void *codes, const void *pairs,
                         void *codes_out, void *pairs_out) {
    const uint32_t G = cols / 16;
    const size_t width = fmt == WK_HOST_F16 ? 2 : 1; /* a code's bytes */
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t g = 0; g < G; g++) {
            const size_t k = (size_t)(r / 16) * G + g; /* the block */
            for (uint32_t c = 0; c < 16; c++)
                memcpy((char *)codes_out + ((k * 16 + c) * 16 + r % 16) * width,
                       (const char *)codes + ((size_t)r * cols + 16 * g + c) * width, width);
            const size_t pair = (size_t)r * G + g;
            if (fmt == WK_HOST_Q8A) {
                ((float *)pairs_out)[32 * k + r % 16] = ((const float *)pairs)[2 * pair];
                ((float *)pairs_out)[32 * k + 16 + r % 16] = ((const float *)pairs)[2 * pair + 1];
            } else if (fmt == WK_HOST_Q8H) {
                const uint32_t u = ((const uint32_t *)pairs)[pair];
                ((uint16_t *)pairs_out)[32 * k + r % 16] = (uint16_t)(u & 0xffffu);
                ((uint16_t *)pairs_out)[32 * k + 16 + r % 16] = (uint16_t)(u >> 16);
            }
        }
}

/* ---- plain C: one panel, 4 tokens a pass ------------------------------------------------------- */

#define WK_INLINE static inline __attribute__((always_inline))

/* Panel p for tokens 0 .. NT-1, its format and NT constants (the loops over a column's 16 rows
 * then vectorize in any build: SSE2, NEON). A multiply and an add, unfused (C11 contracts nothing
 * here with GCC; clang fuses each one alike), in one order in every tile. */
WK_INLINE void tile_c(const wk_host_matrix *m, wk_host_wfmt fmt, uint32_t p, const float *x, float *y, size_t ldy,
                      const int NT) {
    const uint32_t G = m->cols / 16;
    float acc[4][16] = {{0}};
    for (uint32_t g = 0; g < G; g++) {
        const size_t k = (size_t)p * G + g;
        float s[16] = {0}, o[16] = {0}, w[16];
        if (fmt == WK_HOST_Q8A) {
            memcpy(s, (const float *)m->pairs + 32 * k, sizeof s);
            memcpy(o, (const float *)m->pairs + 32 * k + 16, sizeof o);
        } else if (fmt == WK_HOST_Q8H) {
            for (int i = 0; i < 16; i++) {
                s[i] = wk_f16_to_f32(((const uint16_t *)m->pairs)[32 * k + (size_t)i]);
                o[i] = wk_f16_to_f32(((const uint16_t *)m->pairs)[32 * k + 16 + (size_t)i]);
            }
        }
        for (int c = 0; c < 16; c++) {
            const size_t j = (k * 16 + (size_t)c) * 16;
            if (fmt == WK_HOST_F16)
                for (int i = 0; i < 16; i++) w[i] = wk_f16_to_f32(((const uint16_t *)m->codes)[j + (size_t)i]);
            else
                for (int i = 0; i < 16; i++) w[i] = (float)((const int8_t *)m->codes)[j + (size_t)i] * s[i] + o[i];
            for (int t = 0; t < NT; t++) {
                const float xv = x[(size_t)t * m->cols + 16 * g + (size_t)c];
                for (int i = 0; i < 16; i++) acc[t][i] += w[i] * xv;
            }
        }
    }
    for (int t = 0; t < NT; t++) memcpy(y + (size_t)t * ldy + 16 * (size_t)p, acc[t], sizeof acc[t]);
}

WK_INLINE void panels_c_fmt(const wk_host_matrix *m, wk_host_wfmt fmt, const float *x, int n, float *y, size_t ldy,
                            uint32_t p0, uint32_t p1) {
    int t0 = 0;
    for (; t0 + 4 <= n; t0 += 4)
        for (uint32_t p = p0; p < p1; p++) tile_c(m, fmt, p, x + (size_t)t0 * m->cols, y + (size_t)t0 * ldy, ldy, 4);
    const float *xt = x + (size_t)t0 * m->cols;
    float *yt = y + (size_t)t0 * ldy;
    for (uint32_t p = p0; p < p1 && t0 < n; p++) switch (n - t0) { /* the last 1-3 tokens as one tile */
        case 1: tile_c(m, fmt, p, xt, yt, ldy, 1); break;
        case 2: tile_c(m, fmt, p, xt, yt, ldy, 2); break;
        default: tile_c(m, fmt, p, xt, yt, ldy, 3); break;
        }
}

/* kernel(..., FORMAT, ...) with the matrix's format a constant, so each always-inline kernel is
 * compiled once per format with the other formats' branches folded away. */
#define BY_FORMAT(kernel, m, ...)                                                                   \
    do {                                                                                            \
        if ((m)->fmt == WK_HOST_Q8A) kernel(m, WK_HOST_Q8A, __VA_ARGS__);                           \
        else if ((m)->fmt == WK_HOST_Q8H) kernel(m, WK_HOST_Q8H, __VA_ARGS__);                      \
        else kernel(m, WK_HOST_F16, __VA_ARGS__);                                                   \
    } while (0)

static void panels_c(const wk_host_matrix *m, const float *x, int n, float *y, size_t ldy, uint32_t p0, uint32_t p1) {
    BY_FORMAT(panels_c_fmt, m, x, n, y, ldy, p0, p1);
}

#ifdef WK_HOST_X86

/* ---- AVX-512: a panel's column in one register ------------------------------------------------- */

#define AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define INLINE_AVX512 static inline __attribute__((always_inline, target("avx512f,avx2,fma,f16c")))

/* Block k's 16 scales and 16 offsets (f16: unused). */
INLINE_AVX512 void pairs512(const wk_host_matrix *m, wk_host_wfmt fmt, size_t k, __m512 *s, __m512 *o) {
    if (fmt == WK_HOST_Q8A) {
        *s = _mm512_loadu_ps((const float *)m->pairs + 32 * k);
        *o = _mm512_loadu_ps((const float *)m->pairs + 32 * k + 16);
    } else if (fmt == WK_HOST_Q8H) {
        const uint16_t *h = (const uint16_t *)m->pairs + 32 * k;
        *s = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
        *o = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + 16)));
    } else {
        *s = *o = _mm512_setzero_ps();
    }
}

/* Column c of block k: the panel's 16 weights. */
INLINE_AVX512 __m512 column512(const wk_host_matrix *m, wk_host_wfmt fmt, size_t k, int c, __m512 s, __m512 o) {
    const size_t j = (k * 16 + (size_t)c) * 16;
    if (fmt == WK_HOST_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)m->codes + j)));
    const __m128i q = _mm_loadu_si128((const __m128i *)((const int8_t *)m->codes + j));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), s, o);
}

/* Panels p .. p+NP-1 for tokens 0 .. NT-1 of x: NP x NT sums of 16 rows (NP and NT constants at
 * every call, so the loops unroll and the sums stay in registers). */
INLINE_AVX512 void tile512(const wk_host_matrix *m, wk_host_wfmt fmt, uint32_t p, const float *x, float *y, size_t ldy,
                           const int NP, const int NT) {
    const uint32_t G = m->cols / 16;
    const size_t cols = m->cols;
    __m512 acc[8][12];
    for (int i = 0; i < NP; i++)
        for (int t = 0; t < NT; t++) acc[i][t] = _mm512_setzero_ps();
    for (uint32_t g = 0; g < G; g++) {
        __m512 s[8], o[8];
        for (int i = 0; i < NP; i++) pairs512(m, fmt, (size_t)(p + i) * G + g, &s[i], &o[i]);
        for (int c = 0; c < 16; c++) {
            __m512 w[8];
            for (int i = 0; i < NP; i++) w[i] = column512(m, fmt, (size_t)(p + i) * G + g, c, s[i], o[i]);
            for (int t = 0; t < NT; t++) {
                const __m512 xb = _mm512_set1_ps(x[(size_t)t * cols + 16 * g + (size_t)c]);
                for (int i = 0; i < NP; i++) acc[i][t] = _mm512_fmadd_ps(w[i], xb, acc[i][t]);
            }
        }
    }
    for (int t = 0; t < NT; t++)
        for (int i = 0; i < NP; i++) _mm512_storeu_ps(y + (size_t)t * ldy + 16 * (size_t)(p + i), acc[i][t]);
}

/* Tokens in passes of 12 (the last of 4 to 11 as one pass); 1-3 tokens (a decode step, the end of
 * a prompt) 4 panels a pass, one token 8 where the job has them (the output head's jobs of 256
 * rows): its pass is bound by the latency of each panel's chain, not by bytes, and 8 chains made
 * the head's one-token product 14% faster than 4 (tests/bench_host_matmul 300 262144 1: q8h 9.6
 * and 10.1 ms against 11.3 and 11.6). Whole passes of 2 panels first, one panel at the end of an
 * odd count. */
INLINE_AVX512 void panels512_fmt(const wk_host_matrix *m, wk_host_wfmt fmt, const float *x, int n, float *y, size_t ldy,
                                 uint32_t p0, uint32_t p1) {
#define T512(NP, NT) tile512(m, fmt, p, xt, yt, ldy, NP, NT)
    for (int t0 = 0; t0 < n;) {
        const int nt = n - t0 >= 12 ? 12 : n - t0;
        const float *xt = x + (size_t)t0 * m->cols;
        float *yt = y + (size_t)t0 * ldy;
        uint32_t p = p0;
        if (nt == 1)
            for (; p + 8 <= p1; p += 8) T512(8, 1);
        if (nt < 4)
            for (; p + 4 <= p1; p += 4) {
                if (nt == 1) T512(4, 1);
                else if (nt == 2) T512(4, 2);
                else T512(4, 3);
            }
        for (; p + 2 <= p1; p += 2) switch (nt) {
            case 1: T512(2, 1); break;
            case 2: T512(2, 2); break;
            case 3: T512(2, 3); break;
            case 4: T512(2, 4); break;
            case 5: T512(2, 5); break;
            case 6: T512(2, 6); break;
            case 7: T512(2, 7); break;
            case 8: T512(2, 8); break;
            case 9: T512(2, 9); break;
            case 10: T512(2, 10); break;
            case 11: T512(2, 11); break;
            default: T512(2, 12); break;
            }
        for (; p < p1; p++) { /* the odd panel: its tokens 4 and then 1 at a time */
            int t = 0;
            for (; t + 4 <= nt; t += 4) tile512(m, fmt, p, xt + (size_t)t * m->cols, yt + (size_t)t * ldy, ldy, 1, 4);
            for (; t < nt; t++) tile512(m, fmt, p, xt + (size_t)t * m->cols, yt + (size_t)t * ldy, ldy, 1, 1);
        }
        t0 += nt;
    }
#undef T512
}

AVX512 static void panels_avx512(const wk_host_matrix *m, const float *x, int n, float *y, size_t ldy, uint32_t p0,
                                 uint32_t p1) {
    BY_FORMAT(panels512_fmt, m, x, n, y, ldy, p0, p1);
}

/* ---- AVX2 + FMA + F16C: a panel's column as two 8-lane halves ---------------------------------- */

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE_AVX2 static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* Half h (rows 8h .. 8h+7) of block k's scales and offsets. */
INLINE_AVX2 void pairs256(const wk_host_matrix *m, wk_host_wfmt fmt, size_t k, int h, __m256 *s, __m256 *o) {
    if (fmt == WK_HOST_Q8A) {
        *s = _mm256_loadu_ps((const float *)m->pairs + 32 * k + 8 * h);
        *o = _mm256_loadu_ps((const float *)m->pairs + 32 * k + 16 + 8 * h);
    } else if (fmt == WK_HOST_Q8H) {
        const uint16_t *q = (const uint16_t *)m->pairs + 32 * k + 8 * h;
        *s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)q));
        *o = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(q + 16)));
    } else {
        *s = *o = _mm256_setzero_ps();
    }
}

INLINE_AVX2 __m256 column256(const wk_host_matrix *m, wk_host_wfmt fmt, size_t k, int c, int h, __m256 s, __m256 o) {
    const size_t j = (k * 16 + (size_t)c) * 16 + 8 * (size_t)h;
    if (fmt == WK_HOST_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)m->codes + j)));
    const __m128i q = _mm_loadl_epi64((const __m128i *)((const int8_t *)m->codes + j));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), s, o);
}

/* Panel p for tokens 0 .. NT-1 (NT <= 3): 2 x NT sums of 8 rows. */
INLINE_AVX2 void tile256(const wk_host_matrix *m, wk_host_wfmt fmt, uint32_t p, const float *x, float *y, size_t ldy,
                         const int NT) {
    const uint32_t G = m->cols / 16;
    const size_t cols = m->cols;
    __m256 acc[2][3];
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < NT; t++) acc[h][t] = _mm256_setzero_ps();
    for (uint32_t g = 0; g < G; g++) {
        const size_t k = (size_t)p * G + g;
        __m256 s[2], o[2];
        for (int h = 0; h < 2; h++) pairs256(m, fmt, k, h, &s[h], &o[h]);
        for (int c = 0; c < 16; c++) {
            const __m256 w0 = column256(m, fmt, k, c, 0, s[0], o[0]), w1 = column256(m, fmt, k, c, 1, s[1], o[1]);
            for (int t = 0; t < NT; t++) {
                const __m256 xb = _mm256_set1_ps(x[(size_t)t * cols + 16 * g + (size_t)c]);
                acc[0][t] = _mm256_fmadd_ps(w0, xb, acc[0][t]);
                acc[1][t] = _mm256_fmadd_ps(w1, xb, acc[1][t]);
            }
        }
    }
    for (int t = 0; t < NT; t++)
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(y + (size_t)t * ldy + 16 * (size_t)p + 8 * h, acc[h][t]);
}

/* Half h of panel p (8 rows) for tokens 0 .. NT-1 (NT <= 12): NT sums, so that a column's decode
 * (a conversion and a fused multiply-add) serves up to 12 tokens where a whole panel's two halves
 * serve 4 (16 registers: 12 sums, the half's scale and offset, its weights, a broadcast). */
INLINE_AVX2 void half256(const wk_host_matrix *m, wk_host_wfmt fmt, uint32_t p, int h, const float *x, float *y,
                         size_t ldy, const int NT) {
    const uint32_t G = m->cols / 16;
    const size_t cols = m->cols;
    __m256 acc[12];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (uint32_t g = 0; g < G; g++) {
        const size_t k = (size_t)p * G + g;
        __m256 s, o;
        pairs256(m, fmt, k, h, &s, &o);
        for (int c = 0; c < 16; c++) {
            const __m256 w = column256(m, fmt, k, c, h, s, o);
            for (int t = 0; t < NT; t++)
                acc[t] = _mm256_fmadd_ps(w, _mm256_set1_ps(x[(size_t)t * cols + 16 * g + (size_t)c]), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + (size_t)t * ldy + 16 * (size_t)p + 8 * h, acc[t]);
}

/* Tokens in passes of 12 (the last of 4 to 11 as one pass), each panel a half at a time; 1-3
 * tokens whole panels, so 2 to 6 sums are in flight. */
INLINE_AVX2 void panels256_fmt(const wk_host_matrix *m, wk_host_wfmt fmt, const float *x, int n, float *y, size_t ldy,
                               uint32_t p0, uint32_t p1) {
#define H256(NT) half256(m, fmt, p, h, xt, yt, ldy, NT)
    for (int t0 = 0; t0 < n;) {
        const int nt = n - t0 >= 12 ? 12 : n - t0;
        const float *xt = x + (size_t)t0 * m->cols;
        float *yt = y + (size_t)t0 * ldy;
        for (uint32_t p = p0; p < p1; p++) {
            if (nt < 4) {
                if (nt == 1) tile256(m, fmt, p, xt, yt, ldy, 1);
                else if (nt == 2) tile256(m, fmt, p, xt, yt, ldy, 2);
                else tile256(m, fmt, p, xt, yt, ldy, 3);
                continue;
            }
            for (int h = 0; h < 2; h++) switch (nt) {
                case 4: H256(4); break;
                case 5: H256(5); break;
                case 6: H256(6); break;
                case 7: H256(7); break;
                case 8: H256(8); break;
                case 9: H256(9); break;
                case 10: H256(10); break;
                case 11: H256(11); break;
                default: H256(12); break;
                }
        }
        t0 += nt;
    }
#undef H256
}

AVX2 static void panels_avx2(const wk_host_matrix *m, const float *x, int n, float *y, size_t ldy, uint32_t p0,
                             uint32_t p1) {
    BY_FORMAT(panels256_fmt, m, x, n, y, ldy, p0, p1);
}

#endif /* WK_HOST_X86 */

void wk_host_panels_product(const wk_host_matrix *m, wk_host_isa isa, const float *x, int n, float *y, size_t ldy,
                            uint32_t p0, uint32_t p1) {
    switch (isa) {
#ifdef WK_HOST_X86
    case WK_HOST_ISA_AVX512: panels_avx512(m, x, n, y, ldy, p0, p1); return;
    case WK_HOST_ISA_AVX2: panels_avx2(m, x, n, y, ldy, p0, p1); return;
#endif
    default: panels_c(m, x, n, y, ldy, p0, p1); return;
    }
}
