/* Sizes compiled into the shaders that the host also plans with: one definition each, read by the
 * GLSL (#include, glslang's preprocessor) and by the C host (engine/vulkan/shader_params.h,
 * engine/kv/attention_plan.h), so the two cannot drift apart. Integer literals and comments only:
 * both languages parse this file. */
#ifndef WK_SHADER_CONSTS_H
#define WK_SHADER_CONSTS_H

/* matmul.comp: an invocation's register tile (tokens x rows), and the side of its square
 * workgroup. */
#define WK_MATMUL_ROWS 8
#define WK_MATMUL_TOKENS 8
#define WK_MATMUL_WG 8
/* matmul_tiled.comp ("gpu" kernel set): the rows and the tokens of a workgroup's tile. */
#define WK_MATMUL_TILED 64
/* kv_transform.comp: the units (tokens, or a token's query heads) an invocation holds in a step of
 * many tokens (steps of fewer take the decode twin), twice that where the block lets a run of
 * lanes share their fetches (wk_xform_step_units), and the output rows it computes for each (a
 * multiple of 4 dividing every transform block). */
#define WK_XFORM_TOKENS 8
#define WK_XFORM_TOKENS_MAX 16
#define WK_XFORM_ROWS 8
/* attention_paged.comp: a lane's 4-dim chunks of a head vector at most, and the keys of a softmax
 * tile. */
#define WK_ATTN_MAXC 8
#define WK_ATTN_KT 16
/* attention_paged.comp's decode GPU variant: its shared memory holds a query row of head_dim / 4
 * vec4s and a tile of subgroup-size probabilities, at most these. */
#define WK_ATTN_LANES_D4 64
#define WK_ATTN_LANES_SG 64

#endif
