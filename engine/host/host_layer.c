/* Norms, residual updates and the GLU activation on the host (host_layer.h). The norms are 640
 * floats a row for Gemma 3 270M, nothing beside a weight product; the activation's exponentials are
 * 2048 a token, so a long step spreads them over the pool. */
#include "host/host_layer.h"

#include <math.h>

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
