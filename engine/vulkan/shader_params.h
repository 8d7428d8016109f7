/* Push-constant blocks of every shader, mirrored field for field by the `PC` blocks in shaders/.
 * All fields are 32-bit so std430 push-constant layout equals the C layout. */
#ifndef WK_SHADER_PARAMS_H
#define WK_SHADER_PARAMS_H

#include <stdint.h>

typedef struct { uint32_t n_embd, n_tokens; float scale; } wk_pc_embed;
typedef struct { uint32_t n, n_rows; float eps; } wk_pc_rmsnorm;
/* add_norm: h += has_post ? rmsnorm(a)*w_post : a; y = rmsnorm(h)*w_next */
typedef struct { uint32_t n, n_rows; float eps; uint32_t has_post; } wk_pc_add_norm;
/* y[t][n] = sum_k W[n][k] x[t][k]; x rows of K floats, y rows of N floats */
typedef struct { uint32_t N, K, T; } wk_pc_matmul;
typedef struct {
    uint32_t head_dim, n_head, n_head_kv, n_rot;
    uint32_t rope_neox, has_norm, n_tokens, rope_table_offset; /* rope table offset in (cos,sin) pairs */
    float eps, q_scale;
    uint32_t kv_inplace; /* 1: keys back into the k buffer (paged cache), 0: k, v into the f16 cache */
} wk_pc_qk_norm_rope;
typedef struct { uint32_t n, act; } wk_pc_glu; /* act: 0 SiLU (SwiGLU), 1 tanh-GELU (GeGLU) */
typedef struct {
    uint32_t head_dim, n_head, n_head_kv, window, n_tokens, layer;
    int32_t kind, bits, group;
    uint32_t block_tokens, slab_words, block_words, params_words, code_words;
    uint32_t head_rows, n_split; /* engine/kv/attention_plan.h (attention_f16 uses this block too) */
    uint32_t sink, recent, f16_row_words; /* f16 windows */
    /* Layer groups (engine/kv/kv_pool.h): the layer's slabs are slab_layer's in its blocks, and block
     * i of a sequence is table entry i * table_stride + table_col. */
    uint32_t slab_layer, table_stride, table_col;
} wk_pc_attention_paged;
typedef struct { uint32_t head_dim, n_head_kv, n_tokens, layer; } wk_pc_kv_store_window;
typedef struct { uint32_t head_dim, n_head, n_tokens, n_split; } wk_pc_attention_reduce;
/* A query tile of attention_paged: n_tok consecutive tokens of one sequence from batch row row0;
 * chunk_row0 is the batch row of that sequence's first token in the step, win_word the word
 * offset of its f16 window slot in the pool (windows only). */
typedef struct { uint32_t row0, n_tok, win_word, chunk_row0; } wk_attn_tile;
typedef struct {
    uint32_t head_dim, n_head_kv, n_tokens, slab_layer;
    int32_t kind, bits, group, rank_k, rank_v;
    uint32_t block_tokens, slab_words, block_words, params_words, code_words;
    uint32_t table_stride, table_col; /* as in wk_pc_attention_paged */
} wk_pc_kv_store_quant;
typedef struct { uint32_t head_dim, n_head, n_head_kv, n_tokens, block, mat_base; } wk_pc_kv_transform;
typedef struct { uint32_t row_elems, n_tokens; } wk_pc_kv_store_f16;

_Static_assert(sizeof(wk_pc_qk_norm_rope) <= 128, "push constants must fit 128 bytes");

/* Per token of a step: where it sits. Mirrored by `RowInfo` in the shaders. */
/* kv_base: f16 cache, the first cache row of its sequence; paged cache, where its sequence's block
 * table starts in the step's tables. */
typedef struct { uint32_t pos, kv_base; } wk_row_info;

#endif
