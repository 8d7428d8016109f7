/* ggml quant blocks: dequantization to f32 and exact conversion into the engine's device weight format. */
#ifndef WK_QUANT_H
#define WK_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "model/gguf.h"

/* Dequantize n elements (n a multiple of the type's block size) of tensor data to f32.
 * Returns false for an unsupported type. */
bool wk_dequantize(wk_ggml_type type, const void *src, float *dst, size_t n);

/* Device weight format "q8a16": every 16 consecutive elements of a row share one f32 scale and
 * one f32 offset; element = code * scale + offset, code an int8. Every ggml block type we read
 * (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) is represented EXACTLY: their sub-blocks are
 * 16 or 32 elements with one scale (and min) each, and their codes fit in int8. Float tensors
 * (F32/F16/BF16) are not converted to this format (see wk_quant_is_exact_q8a16).
 * codes: n int8; scale_offset: n/16 pairs (scale, offset). */
bool wk_quant_is_exact_q8a16(wk_ggml_type type);
bool wk_quant_to_q8a16(wk_ggml_type type, const void *src, size_t n, int8_t *codes, float *scale_offset);

/* f32 values (n a multiple of 16) rounded into q8a16, for matrices the engine computes itself (the
 * WUSH-folded W_v / W_o): each 16 spans its [min, max] in 255 steps, codes -128..127 to nearest, so
 * an element is off by at most half a step, (max - min) / 510; equal values are exact. Not lossless
 * like the conversion above, but it keeps those matrices on the int8 kernels. Its pairs are f32:
 * rounding them to halves as well (the offset to the nearest half, the least half step covering the
 * 16) moved the default format's perplexity by +0.30% (docs/engine.md "Device weight formats"). */
void wk_quant_f32_to_q8a16(const float *src, size_t n, int8_t *codes, float *scale_offset);

/* The device's half-pair form of q8a16 (engine/weights.h, WK_WFMT_Q8H): n_pairs (scale, offset)
 * pairs as one u32 each, the scale's f16 in the low half, the offset's in the high half, when every
 * one of them is exactly an f16 (the same floats, so the same products on the device); returns
 * false, with `packed` unspecified, when one is not. Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 pairs always are
 * (their scales and mins are the block's own f16s); K-quant sub-scales usually are not. */
bool wk_quant_pairs_to_f16(const float *scale_offset, size_t n_pairs, uint32_t *packed);

/* IEEE half <-> float. */
float wk_f16_to_f32(uint16_t h);
uint16_t wk_f32_to_f16(float f); /* round to nearest even */
float wk_bf16_to_f32(uint16_t h);

#endif
