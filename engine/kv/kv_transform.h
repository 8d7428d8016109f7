/* KV transforms applied by the engine: per layer and KV head, a block-diagonal T_K for keys after
 * RoPE (queries get T_K^-T, so scores are unchanged) and T_V folded into W_v / W_o at load. From a
 * WUSH sidecar (wushkv calibrate) or a seeded random-sign Hadamard. */
#ifndef WK_KV_TRANSFORM_H
#define WK_KV_TRANSFORM_H

#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "model/model.h"

/* Hadamard signs when wk_engine_params.kv_transform_seed is 0. */
#define WK_KV_TRANSFORM_SEED_DEFAULT 0x5eedull

typedef enum { WK_XFORM_NONE = 0, WK_XFORM_HADAMARD = 1, WK_XFORM_WUSH = 2 } wk_xform_kind;

typedef struct wk_kv_xform {
    wk_xform_kind kind;
    int block, n_layer, n_head_kv, head_dim;
    /* [layer][kv_head][2][D/B][B][B], f32: [..][0] = T_K (keys), [..][1] = T_K^-T (queries); the
     * layout the kv_transform shader reads, one layer's slice bound per dispatch */
    float *kq;
    /* [layer][kv_head][D/B][B][B], f64: T_V and T_V^-1 for the weight fold */
    double *v_t, *v_tinv;
    /* [layer][kv_head]: the sidecar's predicted key error (wk_calib_head.key_err); NULL when it has
     * none (a Hadamard transform, or a sidecar made before it existed) */
    float *key_err;
} wk_kv_xform;

/* kind WUSH reads `path` (checked against the model); HADAMARD builds signs from `seed` with
 * blocks of `block` (a power of two dividing head_dim). */
int wk_kv_xform_load(wk_kv_xform *x, wk_xform_kind kind, const char *path, const wk_gguf *model,
                     const wk_hparams *hp, int block, uint64_t seed, char *err, size_t errlen);
void wk_kv_xform_free(wk_kv_xform *x);
/* The default format's wide keys (wk_engine_params.kv_wide_keys_auto): sets wide[il] for one
 * full-attention layer in three, at least one, those with the largest key_err summed over their KV
 * heads. A transform that is not WUSH sets none; a WUSH sidecar without key_err is an error. */
int wk_kv_xform_wide_keys(const wk_kv_xform *x, const wk_hparams *hp, bool *wide, char *err, size_t errlen);
/* Bytes of one layer's slice of kq. */
size_t wk_kv_xform_layer_bytes(const wk_kv_xform *x);

#endif
