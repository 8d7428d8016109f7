/* How one attention_paged dispatch covers a step: query tiles (consecutive tokens of one sequence
 * that share every key and value decode), how many query heads each tile token brings, and how
 * many ways the keys are split -- when a step has too few tiles to fill the device (decode), and
 * always beyond WK_ATTN_MAX_KEYS keys per workgroup (llvmpipe's loop limiter: docs/engine.md). The
 * limits mirror the constants at the top of shaders/kv/attention_paged.comp; the sizes compiled
 * into it (WK_ATTN_MAXC, WK_ATTN_KT, WK_ATTN_LANES_*) are shader_consts.h's, which it includes. */
#ifndef WK_ATTENTION_PLAN_H
#define WK_ATTENTION_PLAN_H

#include <stdint.h>

#include "vulkan/shader_params.h"

enum {
    WK_ATTN_MAXR = 16,         /* rows (token, head) per tile */
    WK_ATTN_MAX_KEYS = 16384,  /* keys one workgroup walks at most */
    WK_ATTN_MAX_SPLIT = 32,    /* splits chosen for parallelism (more only for WK_ATTN_MAX_KEYS) */
    WK_ATTN_TARGET_WG = 64,    /* workgroups a split dispatch aims for */
    WK_ATTN_PART_ROWS = 1024,  /* (token, head, split) partials the split buffer holds at least */
    WK_ATTN_CHAIN_BULK = 2,    /* bulk splits a chained windows pass combines at most (its two slots) */
    /* The same with the "gpu" kernel set. lavapipe runs a few threads, so 64 workgroups fill it and
     * more splits only add to the reduce; a GPU reaches its memory bandwidth with thousands of
     * subgroups in flight, and a decode step of one sequence at depth 32768 is one tile of one KV
     * head (Gemma 3 270M). Starting points until a GPU measures them (scripts/gpu-check.sh). */
    WK_ATTN_MAX_SPLIT_GPU = 512,
    WK_ATTN_TARGET_WG_GPU = 1024,
    WK_ATTN_PART_ROWS_GPU = 8192
};

typedef struct wk_attn_plan {
    uint32_t n_tiles;
    uint32_t head_rows;  /* query heads per tile token */
    uint32_t groups_y;   /* n_head_kv * ceil(heads per KV head / head_rows) */
    uint32_t max_tile;   /* tokens per tile at most */
    uint32_t tile_rows;  /* rows of the fullest tile: <= WK_ATTN_DECODE_ROWS (shader_params.h) lets a
                          * step run the decode pipelines, whose register state is that many rows
                          * (one token per sequence, at most 4 query heads per KV head: Gemma 3,
                          * most Llamas) */
} wk_attn_plan;

/* Tiles for T rows (tiles has room for T); win_words[t] (NULL: no windows) is the f16 window slot
 * of row t's sequence as a pool word offset. A sequence's tokens in a step are consecutive rows
 * with consecutive positions. Returns 0, or -1 when head_dim needs more than WK_ATTN_MAXC chunks
 * per lane at this subgroup size. */
int wk_attn_plan_make(const wk_row_info *rows, const uint32_t *win_words, uint32_t T, uint32_t n_head,
                      uint32_t n_head_kv, uint32_t head_dim, uint32_t subgroup, wk_attn_tile *tiles, wk_attn_plan *out);
/* How one layer's keys are split among workgroups: `main` ways for the pass over all keys (decode
 * pipelines) or over the bulk (a prefill step), `win` ways for a prefill step's window pass (0: no
 * such pass: a decode-shaped step, or no f16 window in the layer's class). Each split writes a
 * partial per (token, head); main + win == 1 means the one split writes the output itself and no
 * reduce pass runs. main is 0 when a two-pass step's rows read every key in f16 (each a sink or
 * within its row's recent window): then only the window pass runs. */
typedef struct wk_attn_splits {
    uint32_t main, win;
} wk_attn_splits;

/* Whether a step of this plan takes the 4-row decode pipelines (one pass over all keys): its
 * fullest tile has at most WK_ATTN_DECODE_ROWS rows (one token per sequence). */
static inline int wk_attn_plan_decode(const wk_attn_plan *p) { return p->tile_rows <= WK_ATTN_DECODE_ROWS; }

/* Whether a decode step runs the decode pipelines' GPU variant (attention_paged.comp's constant 9:
 * bulk keys a key per lane): with the variant chosen (lanes: the "gpu" kernel set, or
 * attention=lanes), where its shared memory holds a whole query row (head_dim <= 4 *
 * WK_ATTN_LANES_D4) and a tile's probabilities (subgroup <= 64). */
static inline int wk_attn_decode_lanes(int lanes, uint32_t subgroup, uint32_t head_dim) {
    return lanes && subgroup <= WK_ATTN_LANES_SG && head_dim <= 4 * WK_ATTN_LANES_D4;
}
/* Whether a prefill step's bulk pass runs the same variant: as the decode steps', where the
 * device's shared memory (max_shared bytes a workgroup) holds its 16-row tiles (20 KiB; Vulkan
 * guarantees 16, GPUs have 32 or more). */
static inline int wk_attn_bulk_lanes(int lanes, uint32_t subgroup, uint32_t head_dim, uint32_t max_shared) {
    return wk_attn_decode_lanes(lanes, subgroup, head_dim) &&
           max_shared >= wk_attn_lanes_shared_bytes(WK_ATTN_MAXR);
}
/* Whether a prefill step with these splits chains its windows pass to the bulk (wk_attn_record):
 * the windows pass is one split after 1 to WK_ATTN_CHAIN_BULK bulk splits, so it combines their
 * partials, continues each row's softmax and writes the output, with no reduce pass. */
static inline int wk_attn_chains(const wk_attn_plan *p, wk_attn_splits s) {
    return !wk_attn_plan_decode(p) && s.main >= 1 && s.main <= WK_ATTN_CHAIN_BULK && s.win == 1;
}
/* Whether a step of this plan walks a layer with sink + recent f16 window rows in two passes. */
static inline int wk_attn_plan_two_pass(const wk_attn_plan *p, uint32_t sink, uint32_t recent) {
    return !wk_attn_plan_decode(p) && sink + recent > 0;
}
/* Key splits for one layer (window 0: the whole context; sink, recent: its class's f16 windows).
 * part_rows: the (token, head, split) partials the caller's buffer holds (wk_attn_part_rows).
 * gpu_splits: the "gpu" kernel set's parallelism targets (_GPU above) instead of lavapipe's
 * (wk_pipelines.attn_gpu_splits). */
wk_attn_splits wk_attn_plan_splits(const wk_attn_plan *p, const wk_row_info *rows, uint32_t T, uint32_t n_head,
                                   uint32_t window, uint32_t sink, uint32_t recent, uint64_t part_rows,
                                   int gpu_splits);
/* Partials a buffer needs for steps of up to max_tokens over contexts of up to max_ctx, with f16
 * windows of at most window_keys (sink + recent) rows in a layer class (0: none), for the kernel set. */
uint64_t wk_attn_part_rows(uint32_t max_tokens, uint32_t n_head, uint32_t max_ctx, uint32_t window_keys,
                           int gpu_splits);

#endif
