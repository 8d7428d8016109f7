/* Push-constant blocks of every shader, mirrored field for field (same names, same order, same
 * types) by the `layout(push_constant) uniform PC` blocks in shaders/.
 *
 * Each block is written once, as a field list X(s, type, name) in the shader's order; the struct
 * is that list expanded. All fields are 32-bit, so the std430 push-constant layout is the C
 * layout; the _Static_asserts below hold every field at 4 * its place and every block at 4 bytes
 * a field (and within the 128 bytes Vulkan guarantees). tests/test_shader_params.c reads the
 * shaders' PC blocks and compares them with these lists: a field renamed, reordered, retyped,
 * added or removed on one side only fails it. A new block goes into WK_PC_BLOCKS with its
 * shader sources. */
#ifndef WK_SHADER_PARAMS_H
#define WK_SHADER_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "shader_consts.h" /* sizes the shaders are compiled with (shaders/shader_consts.h) */

#define WK_PC_MEMBER(s, type, name) type name;

/* attention_paged's rows per query tile in the decode pipelines (its specialisation constant 5;
 * engine/kv/attention_plan.h says when a step may use them). */
enum { WK_ATTN_DECODE_ROWS = 4 };

/* Shared memory attention_paged's key-per-lane variant (constant 9) declares for tiles of `rows`
 * rows: every row's query (vec4 by WK_ATTN_LANES_D4) and its probabilities for a tile of keys
 * (float by WK_ATTN_LANES_SG). */
static inline uint32_t wk_attn_lanes_shared_bytes(uint32_t rows) {
    return rows * (WK_ATTN_LANES_D4 * 16u + WK_ATTN_LANES_SG * 4u);
}

/* attention_paged's 4-element chunks of a head vector per lane (its specialisation constant 6):
 * the head's D/4 chunks spread over a subgroup. */
static inline uint32_t wk_attn_lane_chunks(uint32_t head_dim, uint32_t subgroup) {
    return subgroup ? (head_dim / 4 + subgroup - 1) / subgroup : 0;
}

/* The weight products of more than 4 tokens. matmul.comp ("cpu" kernels): an invocation computes
 * a register tile of WK_MATMUL_TOKENS tokens x WK_MATMUL_ROWS rows (its TT and TR), a workgroup
 * WK_MATMUL_WG x WK_MATMUL_WG of them (its local size); matmul_tiled.comp ("gpu"): a workgroup a
 * 64-row x 64-token tile. Rows run along x, tokens along y. An 8 x 8 tile fetches each activation
 * texel once for eight rows and each weight group once for eight tokens: on lavapipe a weight
 * kernel's time follows its texel fetches (docs/lavapipe.md). The sizes are shader_consts.h's, which
 * the shaders include too. */
static inline void wk_matmul_grid(int tiled, uint32_t rows, uint32_t T, uint32_t *gx, uint32_t *gy) {
    const uint32_t r = tiled ? WK_MATMUL_TILED : WK_MATMUL_WG * WK_MATMUL_ROWS;
    const uint32_t t = tiled ? WK_MATMUL_TILED : WK_MATMUL_WG * WK_MATMUL_TOKENS;
    *gx = (rows + r - 1) / r;
    *gy = (T + t - 1) / t;
}

/* kv_transform's units are a token's query heads of one KV head, or its key. Steps of at least
 * WK_XFORM_TOKENS tokens take wk_xform_step_units of them an invocation (below);
 * kv_transform_decode, for fewer, takes one token's query heads per KV head (at most
 * WK_XFORM_TOKENS), its specialisation constant 3. */
static inline uint32_t wk_xform_decode_units(int n_head, int n_head_kv) {
    const int g = n_head_kv > 0 ? n_head / n_head_kv : 1;
    return g < 1 ? 1u : g > WK_XFORM_TOKENS ? (uint32_t)WK_XFORM_TOKENS : (uint32_t)g;
}
/* kv_transform's output rows per invocation (its specialisation constant 4): WK_XFORM_ROWS when
 * that divides the block, else 4 (a block is a multiple of 4); and its workgroups along x, a
 * head's row tiles in subgroup-sized workgroups. */
static inline uint32_t wk_xform_rows(int block) { return block % WK_XFORM_ROWS == 0 ? WK_XFORM_ROWS : 4u; }
static inline uint32_t wk_xform_groups_x(uint32_t head_dim, int block, uint32_t subgroup) {
    return (head_dim / wk_xform_rows(block) + subgroup - 1) / subgroup;
}
/* kv_transform's units per invocation in a step of WK_XFORM_TOKENS or more tokens (its
 * specialisation constant 3): WK_XFORM_TOKENS_MAX where a block's row tiles are at least that many
 * lanes (blocks of 128 and more), else WK_XFORM_TOKENS. Each matrix fetch then serves 16 units,
 * and the lanes sharing a block fetch the x texels two units each (kv_transform.comp's shuffles). */
static inline uint32_t wk_xform_step_units(int block) {
    return (uint32_t)block / wk_xform_rows(block) >= WK_XFORM_TOKENS_MAX ? WK_XFORM_TOKENS_MAX : WK_XFORM_TOKENS;
}
/* kv_transform's workgroups along y for T tokens in tiles of `tile` units: each KV head's query
 * tiles (T x query heads per KV head units), then each one's key tiles (T units). */
static inline uint32_t wk_xform_tiles(uint32_t T, int n_head, int n_head_kv, uint32_t tile) {
    const uint32_t G = (uint32_t)(n_head / n_head_kv);
    return (uint32_t)n_head_kv * ((T * G + tile - 1) / tile + (T + tile - 1) / tile);
}

/* embed: x[t] = W[tokens[t]] * scale; panels: W stored by panels (engine/host/host_panels.h) */
#define WK_PC_EMBED(X, s) X(s, uint32_t, n_embd) X(s, uint32_t, n_tokens) X(s, float, scale) X(s, uint32_t, panels)
typedef struct { WK_PC_EMBED(WK_PC_MEMBER, ) } wk_pc_embed;

#define WK_PC_RMSNORM(X, s) X(s, uint32_t, n) X(s, uint32_t, n_rows) X(s, float, eps)
typedef struct { WK_PC_RMSNORM(WK_PC_MEMBER, ) } wk_pc_rmsnorm;

/* add_norm: h += has_post ? rmsnorm(a)*w_post : a; y = rmsnorm(h)*w_next */
#define WK_PC_ADD_NORM(X, s) X(s, uint32_t, n) X(s, uint32_t, n_rows) X(s, float, eps) X(s, uint32_t, has_post)
typedef struct { WK_PC_ADD_NORM(WK_PC_MEMBER, ) } wk_pc_add_norm;

/* matmul, matvec: y[t][n] = sum_k W[row0 + n][k] x[t][k]; x rows of K floats, y rows of N floats.
 * matvec only: rows [0, n0) go to its output 0, [n0, n0 + n1) to output 1, the rest to output 2,
 * each [T][its rows] (n0 = N: one output); its gate/up pipelines (WK_PIPE_MATVEC_GLU_*) write
 * glu_act(gate, act) * up instead, act as wk_pc_glu's. */
#define WK_PC_MATMUL(X, s)                                                                         \
    X(s, uint32_t, N) X(s, uint32_t, K) X(s, uint32_t, T) X(s, uint32_t, row0) X(s, uint32_t, n0) \
    X(s, uint32_t, n1) X(s, uint32_t, act)
typedef struct { WK_PC_MATMUL(WK_PC_MEMBER, ) } wk_pc_matmul;

#define WK_PC_QK_NORM_ROPE(X, s)                                                                    \
    X(s, uint32_t, head_dim) X(s, uint32_t, n_head) X(s, uint32_t, n_head_kv) X(s, uint32_t, n_rot) \
    X(s, uint32_t, rope_neox) X(s, uint32_t, has_norm) X(s, uint32_t, n_tokens)                     \
    X(s, uint32_t, rope_table_offset) /* rope table offset in (cos,sin) pairs */                   \
    X(s, float, eps) X(s, float, q_scale)
typedef struct { WK_PC_QK_NORM_ROPE(WK_PC_MEMBER, ) } wk_pc_qk_norm_rope;

/* act: 0 SiLU (SwiGLU), 1 tanh-GELU (GeGLU) */
#define WK_PC_GLU(X, s) X(s, uint32_t, n) X(s, uint32_t, act)
typedef struct { WK_PC_GLU(WK_PC_MEMBER, ) } wk_pc_glu;

/* attention_paged.comp (its pipelines: vk_pipelines.h). n_tiles: query tiles (wk_attn_tile), one
 * workgroup each; n_split: the partials per (token, head) of all its passes (wk_attn_record). */
#define WK_PC_ATTENTION_PAGED(X, s)                                                                   \
    X(s, uint32_t, head_dim) X(s, uint32_t, n_head) X(s, uint32_t, n_head_kv) X(s, uint32_t, window) \
    X(s, uint32_t, n_tiles) X(s, uint32_t, win_layer)                                                 \
    X(s, int32_t, kind) X(s, int32_t, bits) X(s, int32_t, group)                                      \
    X(s, uint32_t, block_tokens) X(s, uint32_t, slab_words) X(s, uint32_t, block_words)               \
    X(s, uint32_t, params_words) X(s, uint32_t, code_words)                                           \
    X(s, uint32_t, head_rows) X(s, uint32_t, n_split) /* engine/kv/attention_plan.h */                \
    /* f16 windows of the layer's class (engine/kv/kv_pool.h wk_kv_win): its region starts          \
     * win_off words into the slot, a row is f16_row_words, the layer the win_layer-th of the class */ \
    X(s, uint32_t, sink) X(s, uint32_t, recent) X(s, uint32_t, f16_row_words) X(s, uint32_t, win_off) \
    /* Layer groups (engine/kv/kv_pool.h): the layer's first key slab is k_off words into its blocks, \
     * and block i of a sequence is table entry i * table_stride + table_col. */                      \
    X(s, uint32_t, k_off) X(s, uint32_t, table_stride) X(s, uint32_t, table_col)                     \
    /* bits, slab_words, params_words, code_words are the values'; the keys' (wide keys, kv_pool.h:  \
     * more bits than the values in some layers) are these, their first value slab at v_off. */      \
    X(s, uint32_t, v_off) X(s, int32_t, k_bits) X(s, uint32_t, k_slab_words) X(s, uint32_t, k_params_words) \
    X(s, uint32_t, k_code_words)                                                                        \
    X(s, uint32_t, chain) /* set by wk_attn_record: the windows pass continues the bulk's partials */
typedef struct { WK_PC_ATTENTION_PAGED(WK_PC_MEMBER, ) } wk_pc_attention_paged;

/* kv_store_window: token t's row is dest[dest_base + t] (the step's rows of the layer's window
 * class); the layer is the win_layer-th of its class. */
#define WK_PC_KV_STORE_WINDOW(X, s)                                                                  \
    X(s, uint32_t, head_dim) X(s, uint32_t, n_head_kv) X(s, uint32_t, n_tokens) X(s, uint32_t, win_layer) \
    X(s, uint32_t, dest_base)
typedef struct { WK_PC_KV_STORE_WINDOW(WK_PC_MEMBER, ) } wk_pc_kv_store_window;

#define WK_PC_ATTENTION_REDUCE(X, s) X(s, uint32_t, head_dim) X(s, uint32_t, n_head) X(s, uint32_t, n_tokens) X(s, uint32_t, n_split)
typedef struct { WK_PC_ATTENTION_REDUCE(WK_PC_MEMBER, ) } wk_pc_attention_reduce;

#define WK_PC_KV_STORE_QUANT(X, s)                                                                      \
    X(s, uint32_t, head_dim) X(s, uint32_t, n_head_kv) X(s, uint32_t, n_tokens) X(s, uint32_t, k_off)   \
    X(s, int32_t, kind) X(s, int32_t, bits) X(s, int32_t, group) X(s, int32_t, rank_k) X(s, int32_t, rank_v) \
    X(s, uint32_t, block_tokens) X(s, uint32_t, slab_words) X(s, uint32_t, block_words)                 \
    X(s, uint32_t, params_words) X(s, uint32_t, code_words)                                             \
    X(s, uint32_t, table_stride) X(s, uint32_t, table_col) /* as in wk_pc_attention_paged */          \
    X(s, uint32_t, win_store) X(s, uint32_t, win_layer) X(s, uint32_t, dest_base) /* as kv_store_window's */ \
    X(s, float, quest_c2) /* wk_kvq_quest_c2(bits, the layer class's clip); 0: unclipped */         \
    /* the keys' format and first value slab, as in wk_pc_attention_paged; k_quest_c2 the keys' */    \
    X(s, uint32_t, v_off) X(s, int32_t, k_bits) X(s, uint32_t, k_slab_words) X(s, uint32_t, k_params_words) \
    X(s, uint32_t, k_code_words) X(s, float, k_quest_c2)                                                \
    X(s, uint32_t, copy_f16) /* 1: the step's K / V also in f16 for attention_paged's windows */
typedef struct { WK_PC_KV_STORE_QUANT(WK_PC_MEMBER, ) } wk_pc_kv_store_quant;

#define WK_PC_KV_TRANSFORM(X, s)                                                                    \
    X(s, uint32_t, head_dim) X(s, uint32_t, n_head) X(s, uint32_t, n_head_kv) X(s, uint32_t, n_tokens) \
    X(s, uint32_t, block) X(s, uint32_t, mat_base) X(s, uint32_t, k_in_base)                        \
    X(s, uint32_t, n_rot) X(s, uint32_t, rope_neox) X(s, uint32_t, has_norm)                          \
    X(s, uint32_t, rope_table_offset) X(s, float, eps) X(s, float, q_scale)
typedef struct { WK_PC_KV_TRANSFORM(WK_PC_MEMBER, ) } wk_pc_kv_transform;

#define WK_PC_KV_STORE_F16(X, s)                                                                     \
    X(s, uint32_t, head_dim) X(s, uint32_t, n_head_kv) X(s, uint32_t, n_tokens) X(s, uint32_t, slab_layer)    \
    X(s, uint32_t, block_tokens) X(s, uint32_t, slab_words) X(s, uint32_t, block_words)                       \
    X(s, uint32_t, table_stride) X(s, uint32_t, table_col)
typedef struct { WK_PC_KV_STORE_F16(WK_PC_MEMBER, ) } wk_pc_kv_store_f16;

/* kv_quant_test (tests/test_kv_quant_gpu.c only): mode 0 encodes (lanes of a subgroup a group),
 * 1 decodes ngroups groups of slot words each. */
#define WK_PC_KV_QUANT_TEST(X, s)                                                                  \
    X(s, int32_t, mode) X(s, int32_t, kind) X(s, int32_t, bits) X(s, int32_t, group) X(s, int32_t, rank) \
    X(s, uint32_t, ngroups) X(s, uint32_t, slot) X(s, float, quest_c2) X(s, uint32_t, lanes)
typedef struct { WK_PC_KV_QUANT_TEST(WK_PC_MEMBER, ) } wk_pc_kv_quant_test;

/* Every block: B(struct, field list, shader sources under shaders/ that declare it). */
#define WK_PC_BLOCKS(B)                                                               \
    B(wk_pc_embed, WK_PC_EMBED, "model/embed.comp")                                   \
    B(wk_pc_rmsnorm, WK_PC_RMSNORM, "model/rmsnorm.comp")                             \
    B(wk_pc_add_norm, WK_PC_ADD_NORM, "model/add_norm.comp")                          \
    B(wk_pc_matmul, WK_PC_MATMUL, "model/matmul.comp", "model/matvec.comp", "model/matmul_tiled.comp") \
    B(wk_pc_qk_norm_rope, WK_PC_QK_NORM_ROPE, "model/qk_norm_rope.comp")              \
    B(wk_pc_glu, WK_PC_GLU, "model/glu.comp")                                         \
    B(wk_pc_attention_paged, WK_PC_ATTENTION_PAGED, "kv/attention_paged.comp")        \
    B(wk_pc_kv_store_window, WK_PC_KV_STORE_WINDOW, "kv/kv_store_window.comp")        \
    B(wk_pc_attention_reduce, WK_PC_ATTENTION_REDUCE, "kv/attention_reduce.comp")     \
    B(wk_pc_kv_store_quant, WK_PC_KV_STORE_QUANT, "kv/kv_store_quant.comp")           \
    B(wk_pc_kv_transform, WK_PC_KV_TRANSFORM, "kv/kv_transform.comp")                 \
    B(wk_pc_kv_store_f16, WK_PC_KV_STORE_F16, "kv/kv_store_f16.comp")                 \
    B(wk_pc_kv_quant_test, WK_PC_KV_QUANT_TEST, "kv/kv_quant_test.comp")

/* The static checks: field k of a block (its place, from a struct of one char a field) sits at
 * byte 4k and is 4 bytes; the block is 4 bytes a field and fits 128 bytes. */
#define WK_PC_PLACE(s, type, name) char name;
#define WK_PC_CHECK_FIELD(s, type, name)                                                     \
    _Static_assert(sizeof(((s *)0)->name) == 4 && offsetof(s, name) == 4 * offsetof(struct s##_places, name), \
                   #s "." #name ": not at its std430 offset");
#define WK_PC_CHECK_BLOCK(s, LIST, ...)                                                        \
    struct s##_places { LIST(WK_PC_PLACE, s) };                                              \
    LIST(WK_PC_CHECK_FIELD, s)                                                                 \
    _Static_assert(sizeof(s) == 4 * sizeof(struct s##_places) && sizeof(s) <= 128, #s ": not the shader's size");
WK_PC_BLOCKS(WK_PC_CHECK_BLOCK)

/* A query tile of attention_paged: n_tok consecutive tokens of one sequence from batch row row0;
 * chunk_row0 is the batch row of that sequence's first token in the step, win_word the word
 * offset of its f16 window slot in the pool (windows only). Mirrored by `Tile` in the shader. */
typedef struct { uint32_t row0, n_tok, win_word, chunk_row0; } wk_attn_tile;

/* Per token of a step: where it sits. Mirrored by `RowInfo` in the shaders. */
/* kv_base: where its sequence's block table starts in the step's tables. */
typedef struct { uint32_t pos, kv_base; } wk_row_info;

#endif
