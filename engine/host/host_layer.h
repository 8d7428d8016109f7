/* The row-wise work between a layer's weight products when the host CPU runs them (the forward
 * pass's linear=host, engine/forward_host.c): RMS norms, the residual update fused with the next
 * norm, and the gated FFN's activation, each as its shader computes it (add_norm.comp,
 * rmsnorm.comp, glu.comp with common.glsl's glu_act) so the two paths differ only in the order of
 * their sums; and with kv_write=host (engine/forward_host_kv.c) a head's q/k norm with RoPE
 * (qk_norm_rope.comp; the key transform after it is host_transform.h's) and a row's halves. */
#ifndef WK_HOST_LAYER_H
#define WK_HOST_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "host/host_matmul.h" /* wk_host_isa */
#include "host/host_pool.h"

/* h[t] += w_post ? rmsnorm(a[t]) * w_post : a[t]; y[t] = rmsnorm(h[t]) * w_next, for rows t < rows of
 * n floats (a, h, y row-major; w_post NULL: a plain residual). */
void wk_host_add_norm(const float *a, float *h, const float *w_post, const float *w_next, float *y, int n, int rows,
                      float eps);

/* act[t][i] = glu_act(gate[t][i]) * up[t][i] for i < n_ff, t < rows, with gate and up rows ld floats
 * apart and act's n_ff apart; gelu: the tanh-approximated GELU (GeGLU), else SiLU (SwiGLU). On the
 * pool's threads when pool is not NULL. */
void wk_host_glu(wk_host_pool *pool, const float *gate, const float *up, size_t ld, float *act, int n_ff, int rows,
                 bool gelu);

/* One head x of D floats, in place: RMSNorm with weights w (NULL: none), RoPE over its first n_rot
 * dimensions (rope: n_rot / 2 (cos, sin) pairs; neox: pairs (i, i + n_rot/2), else (2i, 2i + 1)),
 * everything times scale. */
void wk_host_norm_rope(float *x, int D, const float *w, float eps, const float *rope, int n_rot, bool neox, float scale);

/* h[i] = wk_f32_to_f16(x[i]) for i < n (model/quant.h's rounding to nearest even, NaNs quieted
 * alike), with F16C's conversion under the AVX2 and AVX-512 codes: a cache row's halves, many a
 * step. */
void wk_host_to_halves(wk_host_isa isa, const float *x, uint16_t *h, size_t n);

#endif
