/* Scalar C reference forward pass (Gemma 3 and Llama, as llama.cpp computes them): the yardstick
 * the Vulkan engine is tested against. Precision over speed: f32 activations, double sums. */
#ifndef WK_TEST_REF_FORWARD_H
#define WK_TEST_REF_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "model/model.h"

typedef struct ref_model ref_model;

/* wk_model_desc_load + every weight dequantized to f32 (the real 270M model takes ~1.1 GB).
 * The gguf may be closed afterwards. NULL with a message in err on failure. */
ref_model *ref_model_load(const wk_gguf *g, char *err, size_t errlen);
void ref_model_free(ref_model *m);
const wk_hparams *ref_model_hparams(const ref_model *m);
/* Attention reads K and V through the KV quantizer (engine/kv/kv_quant.h: bits 2..4, a wk_kvq_kind,
 * group G) instead of f16 rounding; bits 0 restores the f16 cache. */
void ref_model_set_kv_quant(ref_model *m, int bits, int kind, int group);
/* Per-layer-class formats: the sliding-window layers' K and V through `bits` instead (0: the same
 * as every layer). Call after ref_model_set_kv_quant, which resets it. */
void ref_model_set_kv_swa_bits(ref_model *m, int bits);
/* QuEST's constant (wk_kvq_quest_c2) of the other layers and of the sliding-window ones (0:
 * unclipped). Call after ref_model_set_kv_quant, which resets both. */
void ref_model_set_kv_clip(ref_model *m, float quest_c2, float swa_quest_c2);
/* Wide keys: layer `layer`'s keys through key_bits (and key_quest_c2) instead, its values as
 * before. Call after ref_model_set_kv_quant, which resets it. */
void ref_model_set_kv_wide_keys(ref_model *m, int layer, int key_bits, float key_quest_c2);

/* Evaluates tokens at positions 0..n-1 from an empty cache.
 * logits: NULL or n x n_vocab. layer_out: NULL or n_layer buffers of n x n_embd that receive the
 * residual stream after each layer. Returns 0, or -1 for a bad argument (token out of range). */
int ref_forward(ref_model *m, const int32_t *tokens, int n, float *logits, float **layer_out);

/* Same, but logits only for the last position (n_vocab floats): the output head dominates the
 * cost on a 262144-token vocabulary, and greedy decoding needs only the last row. */
int ref_forward_last(ref_model *m, const int32_t *tokens, int n, float *logits);

/* The building blocks, exported so tests can check each one against hand-computed values. */

/* y = x / sqrt(mean(x^2) + eps) * w (w may be NULL: no weight); as ggml, the sum is in double and
 * the scale in f32. y may alias x. */
void ref_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
/* Rotates one head of head_dim values in place at position pos: the first n_rot dims are rotated,
 * the rest pass through. NEOX pairs (i, i + n_rot/2), NORMAL pairs (2i, 2i+1); pair i turns by
 * pos * freq_scale * base^(-2i/n_rot). */
void ref_rope(float *x, int n_rot, int pos, float base, float freq_scale, wk_rope_type type);
/* tanh-approximated GELU (gelu_pytorch_tanh). */
float ref_gelu_tanh(float x);
/* x / (1 + e^-x). */
float ref_silu(float x);

#endif
