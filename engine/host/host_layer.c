/* Norms, residual updates and the GLU activation on the host (host_layer.h). The norms are 640
 * floats a row for Gemma 3 270M, nothing beside a weight product; the activation's exponentials are
 * 2048 a token, so a long step spreads them over the pool. */
#include "host/host_layer.h"

#include <math.h>
#include <string.h>

#include "wush/wush_transform.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define WK_HOST_LAYER_X86 1
#endif

static float inv_rms(const float *x, int n, float eps) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    return 1.0f / sqrtf(ss / (float)n + eps);
}

void wk_host_add_norm(const float *a, float *h, const float *w_post, const float *w_next, float *y, int n, int rows,
                      float eps) {
    for (int t = 0; t < rows; t++) {
        const float *at = a + (size_t)t * n;
        float *ht = h + (size_t)t * n, *yt = y + (size_t)t * n;
        if (w_post) {
            const float inv_a = inv_rms(at, n, eps);
            for (int i = 0; i < n; i++) ht[i] += at[i] * inv_a * w_post[i];
        } else {
            for (int i = 0; i < n; i++) ht[i] += at[i];
        }
        const float inv = inv_rms(ht, n, eps);
        for (int i = 0; i < n; i++) yt[i] = ht[i] * inv * w_next[i];
    }
}

/* common.glsl's glu_act: SiLU, or GELU with tanh(u) = 1 - 2/(exp(2u)+1), finite for large |u|. */
static inline float glu_act(float g, bool gelu) {
    if (!gelu) return g / (1.0f + expf(-g));
    const float u = 0.7978845608f * (g + 0.044715f * g * g * g);
    return 0.5f * g * (2.0f - 2.0f / (expf(2.0f * u) + 1.0f));
}

typedef struct glu_job {
    const float *gate, *up;
    size_t ld;
    float *act;
    int n_ff;
    bool gelu;
} glu_job;

static void glu_row(void *ctx, int t) {
    const glu_job *j = ctx;
    const float *g = j->gate + (size_t)t * j->ld, *u = j->up + (size_t)t * j->ld;
    float *y = j->act + (size_t)t * j->n_ff;
    for (int i = 0; i < j->n_ff; i++) y[i] = glu_act(g[i], j->gelu) * u[i];
}

void wk_host_glu(wk_host_pool *pool, const float *gate, const float *up, size_t ld, float *act, int n_ff, int rows,
                 bool gelu) {
    glu_job j = {gate, up, ld, act, n_ff, gelu};
    /* A row is ~10 us of exponentials: below a few rows waking the threads costs more than it saves. */
    if (pool && rows >= 4) {
        wk_host_pool_run(pool, rows, glu_row, &j);
        return;
    }
    for (int t = 0; t < rows; t++) glu_row(&j, t);
}

void wk_host_norm_rope(float *x, int D, const float *w, float eps, const float *rope, int n_rot, bool neox, float scale) {
    const int half = n_rot / 2;
    const float inv = w ? inv_rms(x, D, eps) : 1.0f;
    for (int i = 0; i < half; i++) { /* both of a pair read before either is written */
        const int da = neox ? i : 2 * i, db = neox ? i + half : 2 * i + 1;
        float xa = x[da] * inv, xb = x[db] * inv;
        if (w) xa *= w[da], xb *= w[db];
        const float c = rope[2 * i], s = rope[2 * i + 1];
        x[da] = (xa * c - xb * s) * scale;
        x[db] = (xa * s + xb * c) * scale;
    }
    for (int d = n_rot; d < D; d++) {
        float v = x[d] * inv;
        if (w) v *= w[d];
        x[d] = v * scale;
    }
}

#ifdef WK_HOST_LAYER_X86
/* Rows [i0, i0 + 4) of M x into y (one block: B is a multiple of 4), with AVX2 and FMA: four rows
 * share each load of x, eight partial sums a row; B's tail past a multiple of 8 in C. */
__attribute__((target("avx2,fma"))) static void transform_rows_avx2(const float *M, int B, const float *xb, int i0,
                                                                   float *y) {
    const float *m0 = M + (size_t)i0 * B;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int j = 0;
    for (; j + 8 <= B; j += 8) {
        const __m256 x = _mm256_loadu_ps(xb + j);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(m0 + j), x, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(m0 + B + j), x, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(m0 + 2 * (size_t)B + j), x, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(m0 + 3 * (size_t)B + j), x, a3);
    }
    float acc[4][8];
    _mm256_storeu_ps(acc[0], a0), _mm256_storeu_ps(acc[1], a1), _mm256_storeu_ps(acc[2], a2), _mm256_storeu_ps(acc[3], a3);
    for (int r = 0; r < 4; r++) {
        for (int jj = j; jj < B; jj++) acc[r][jj & 7] += m0[(size_t)r * B + jj] * xb[jj];
        y[i0 + r] = ((acc[r][0] + acc[r][1]) + (acc[r][2] + acc[r][3])) + ((acc[r][4] + acc[r][5]) + (acc[r][6] + acc[r][7]));
    }
}

/* The same rows for two vectors at once, each load of M serving both: every (row, vector) takes
 * exactly transform_rows_avx2's operations in its order, so each result is the one-vector one. */
__attribute__((target("avx2,fma"))) static void transform_rows2_avx2(const float *M, int B, const float *xa,
                                                                    const float *xb, int i0, float *ya, float *yb) {
    const float *m0 = M + (size_t)i0 * B;
    __m256 a[4], b[4];
    for (int r = 0; r < 4; r++) a[r] = b[r] = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= B; j += 8) {
        const __m256 x0 = _mm256_loadu_ps(xa + j), x1 = _mm256_loadu_ps(xb + j);
        for (int r = 0; r < 4; r++) {
            const __m256 m = _mm256_loadu_ps(m0 + (size_t)r * B + j);
            a[r] = _mm256_fmadd_ps(m, x0, a[r]);
            b[r] = _mm256_fmadd_ps(m, x1, b[r]);
        }
    }
    for (int v = 0; v < 2; v++) {
        const float *x = v ? xb : xa;
        float acc[4][8];
        for (int r = 0; r < 4; r++) _mm256_storeu_ps(acc[r], v ? b[r] : a[r]);
        for (int r = 0; r < 4; r++) {
            for (int jj = j; jj < B; jj++) acc[r][jj & 7] += m0[(size_t)r * B + jj] * x[jj];
            (v ? yb : ya)[i0 + r] =
                ((acc[r][0] + acc[r][1]) + (acc[r][2] + acc[r][3])) + ((acc[r][4] + acc[r][5]) + (acc[r][6] + acc[r][7]));
        }
    }
}
#endif

void wk_host_block_transform(wk_host_isa isa, const float *M, int D, int B, float *x) {
    float y[WK_HOST_MAX_HEAD];
#ifdef WK_HOST_LAYER_X86
    if (isa >= WK_HOST_ISA_AVX2) {
        for (int i = 0; i < D; i += 4) transform_rows_avx2(M, B, x + (size_t)(i / B) * B, i, y);
        memcpy(x, y, (size_t)D * sizeof *x);
        return;
    }
#endif
    (void)isa;
    wk_xform_apply_f32(D, B, M, x, y); /* the calibration's own product (wush/wush_transform.c) */
    memcpy(x, y, (size_t)D * sizeof *x);
}

void wk_host_block_transform_n(wk_host_isa isa, const float *M, int D, int B, float *const *xs, int n) {
    int v = 0;
#ifdef WK_HOST_LAYER_X86
    if (isa >= WK_HOST_ISA_AVX2) {
        float ya[WK_HOST_MAX_HEAD], yb[WK_HOST_MAX_HEAD];
        for (; v + 2 <= n; v += 2) {
            for (int i = 0; i < D; i += 4) {
                const size_t blk = (size_t)(i / B) * B;
                transform_rows2_avx2(M, B, xs[v] + blk, xs[v + 1] + blk, i, ya, yb);
            }
            memcpy(xs[v], ya, (size_t)D * sizeof *ya);
            memcpy(xs[v + 1], yb, (size_t)D * sizeof *yb);
        }
    }
#endif
    for (; v < n; v++) wk_host_block_transform(isa, M, D, B, xs[v]);
}
