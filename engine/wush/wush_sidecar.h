/* The WUSH-KV sidecar format, one file for both sides: the calibrator that writes it
 * (research/calibrate.c) and the KV transform loader that reads it (kv/kv_transform.c, --wush):
 * tensor names, metadata keys, the model fingerprint, the check that a sidecar belongs to a model,
 * and reading one head's tensor.
 *
 * A sidecar is a GGUF v3 file, general.architecture "wush". Per layer L and KV head H, four f32
 * tensors, each block-diagonal D x D with block B stored as its D/B diagonal blocks
 * (ne = [B, B, D/B]: block k's element (i, j) at [(k*B + i)*B + j], wush_transform.h's "compact
 * blocks"):
 *   wush.blk.L.k.H.T       T_K, applied to each key after RoPE (before quantization)
 *   wush.blk.L.k.H.Tinv_t  T_K^-T, applied to each query after RoPE
 *   wush.blk.L.v.H.T       T_V, folded into the head's rows of W_v (v' = T_V v)
 *   wush.blk.L.v.H.Tinv    T_V^-1, folded into the columns of W_o of every query head sharing H
 * Metadata (WK_WUSH_KEY_*): version, block size, damping, the model's name, architecture, shapes
 * and fingerprint, and the calibration's provenance (text name, tokens, chunks, value weighting)
 * and per-head predicted gains (f32 arrays, layer-major). */
#ifndef WK_WUSH_SIDECAR_H
#define WK_WUSH_SIDECAR_H

#include <stddef.h>

#include "model/gguf.h"
#include "model/model.h"

#define WK_WUSH_VERSION 1
#define WK_WUSH_ARCH "wush"
#define WK_WUSH_KEY_VERSION "wush.version"
#define WK_WUSH_KEY_BLOCK "wush.block_size"
#define WK_WUSH_KEY_DAMP "wush.damp"
#define WK_WUSH_KEY_MODEL_NAME "wush.model.name"
#define WK_WUSH_KEY_MODEL_ARCH "wush.model.arch"
#define WK_WUSH_KEY_N_LAYER "wush.model.n_layer"
#define WK_WUSH_KEY_N_HEAD "wush.model.n_head"
#define WK_WUSH_KEY_N_HEAD_KV "wush.model.n_head_kv"
#define WK_WUSH_KEY_HEAD_DIM "wush.model.head_dim"
#define WK_WUSH_KEY_N_EMBD "wush.model.n_embd"
#define WK_WUSH_KEY_FINGERPRINT "wush.model.fingerprint"
#define WK_WUSH_KEY_TEXT "wush.calib.text"
#define WK_WUSH_KEY_TOKENS "wush.calib.n_tokens"
#define WK_WUSH_KEY_CHUNKS "wush.calib.n_chunks"
#define WK_WUSH_KEY_V_MOMENTS "wush.calib.v_moments"
#define WK_WUSH_KEY_GAIN_K "wush.gain.k"
#define WK_WUSH_KEY_GAIN_V "wush.gain.v"
/* Per (layer, KV head), layer-major, f32: wk_calib_head.key_err. Sidecars made before
 * 2026-12-04 lack it; the default's wide keys need it (wush_cache.c remakes such a cached one). */
#define WK_WUSH_KEY_KEY_ERR "wush.key_err"

/* Which of a head's four tensors. */
typedef enum { WK_WUSH_K_T = 0, WK_WUSH_K_TINV_T = 1, WK_WUSH_V_T = 2, WK_WUSH_V_TINV = 3 } wk_wush_tensor;

/* "wush.blk.L.k.H.T" etc. into buf (64 bytes is always enough). */
void wk_wush_tensor_name(char *buf, size_t cap, int layer, int kv_head, wk_wush_tensor which);

/* Room for a fingerprint: "fnv1a64:" + 16 hex digits + NUL. */
#define WK_FINGERPRINT_LEN 32
/* A hash of the model file's identity: the architecture, every tensor's name, type and shape in
 * file order, and the first 4 KiB of every tensor's data (weights differ there between two
 * fine-tunes of one architecture; hashing only a prefix keeps it cheap on a multi-GB model). */
void wk_model_fingerprint(const wk_gguf *model, char out[WK_FINGERPRINT_LEN]);

/* Whether `sidecar` is a WUSH-KV sidecar for `model` (hyperparameters hp): version, fingerprint,
 * shapes and every tensor present as f32 with the right dims. *block (may be NULL) gets the block
 * size. Errors as wk_wush_sidecar_check (wushkv/research.h). */
int wk_wush_sidecar_check_gguf(const wk_gguf *model, const wk_hparams *hp, const wk_gguf *sidecar, int *block,
                               char *err, size_t errlen);

/* Copies sidecar tensor `which` of (layer, kv_head), n f32 values, into f (f32) and/or d (f64),
 * either may be NULL. WK_ERR_FORMAT if it is missing, not f32 or not n values. */
int wk_wush_sidecar_read(const wk_gguf *sidecar, int layer, int kv_head, wk_wush_tensor which, size_t n, float *f,
                         double *d, char *err, size_t errlen);

#endif
