/* Norms, residual updates and the GLU activation on the host (host_layer.h), and a head's q/k norm
 * with RoPE and a cache row's halves for the cache writes. The norms are 640 floats a row for
 * Gemma 3 270M, nothing beside a weight product; the activation's exponentials are 2048 a token, so
 * a long step spreads them over the pool. */
#include "host/host_layer.h"

#include <math.h>
#include <string.h>

#include "model/quant.h"

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
__attribute__((target("avx,f16c"))) static size_t halves_f16c(const float *x, uint16_t *h, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    return i;
}
#endif

void wk_host_to_halves(wk_host_isa isa, const float *x, uint16_t *h, size_t n) {
    size_t i = 0;
#ifdef WK_HOST_LAYER_X86
    if (isa != WK_HOST_ISA_C) i = halves_f16c(x, h, n); /* wk_host_isa_best checks F16C for both */
#endif
    (void)isa;
    for (; i < n; i++) h[i] = wk_f32_to_f16(x[i]);
}
