/* The paged attention of a chunk's query rows on the host CPU, for a step on a CPU Vulkan device
 * (the forward pass's paged_attention=host, engine/forward_host_attn.c): the same
 * keys, formats and windows as shaders/kv/attention_paged.comp reads (its push constants give the
 * geometry), so the two differ only in the order of their sums. On lavapipe a key's cost follows
 * the instructions the shader spends on it, and decoding 2-bit codes takes more than reading
 * halves, so there the 2-bit cache's five times fewer bytes never paid (docs/lavapipe.md); the
 * host's vector code decodes eight codes in a few instructions and reads the cache at memory speed. */
#ifndef WK_HOST_ATTENTION_H
#define WK_HOST_ATTENTION_H

#include <stdint.h>

#include "host/host_matmul.h" /* wk_host_isa */
#include "vulkan/shader_params.h"

/* Where one query row's keys are: its position (it reads keys first..pos), its sequence's block
 * table (tables + table_off, entry i * table_stride + table_col the block of keys i * block_tokens
 * on), and with f16 windows its sequence's window slot (pool words) and the first position and row
 * of its chunk in the step: keys of this step are read from the step's f16 copies (k16, v16, [row]
 * [n_head_kv][head_dim] halves), older window keys from the slot. */
typedef struct wk_host_attn_row {
    uint32_t pos, first, table_off, win_word, chunk_pos0, chunk_row0;
} wk_host_attn_row;

/* What a layer's attention reads: the pool's words, the step's block tables and f16 copies, and
 * the layer's geometry in the shader's push constants (sink, recent, window and format set). */
typedef struct wk_host_attn_layer {
    const uint32_t *pool, *tables;
    const uint16_t *k16, *v16;
    const wk_pc_attention_paged *pc;
} wk_host_attn_layer;

/* Whether the host reads this geometry: head_dim a multiple of 8 up to WK_HOST_ATTN_MAX_HEAD, and
 * for codes a group a multiple of 8 of 2, 3 or 4 bits. */
enum { WK_HOST_ATTN_MAX_HEAD = 1024, WK_HOST_ATTN_MAX_GQA = 64, WK_HOST_ATTN_MAX_ROWS = 16 };
int wk_host_attn_supports(const wk_pc_attention_paged *pc);

/* The partial softmax attention of n_rows (<= WK_HOST_ATTN_MAX_ROWS) rows of one sequence at
 * consecutive positions (a prefill chunk's, or a decode row alone), for KV head kh's query heads
 * (hq of them; row r's at q + r * q_stride, hq rows of head_dim floats, already scaled), over the
 * keys j0 <= j < j1 each row sees (first..pos): a key is decoded once for all the rows, in the
 * forms they read it in. Per row and head, at part + (r * hq + h) * (head_dim + 2): its running
 * max m, sum l, then its unnormalised output (head_dim floats); a row that sees none of the keys
 * leaves m = -inf, l = 0 and zeros. With the given code (at most wk_host_isa_best()). */
void wk_host_attn_part(wk_host_isa isa, const wk_host_attn_layer *L, const wk_host_attn_row *rows, int n_rows,
                       uint32_t kh, const float *q, size_t q_stride, int hq, uint32_t j0, uint32_t j1, float *part);

/* out (D floats) = the normalised combination of n partials of one head (part + i * stride: m, l,
 * then D floats), as attention_reduce.comp combines split partials. */
void wk_host_attn_merge(int n, const float *part, size_t stride, int D, float *out);

#endif
