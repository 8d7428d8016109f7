/* Records one layer's paged attention into the open command buffer: the attention_paged pipelines
 * a step's shape calls for (decode: one pass; prefill: the bulk pass and, with f16 windows, the
 * window pass), each over its key splits, then the reduce that merges their partials (none when
 * the bulk and the windows are one split each: the windows pass continues the bulk's). The one
 * sequence forward.c runs and tests/test_paged_attention.c checks against the C reference. */
#ifndef WK_ATTENTION_RECORD_H
#define WK_ATTENTION_RECORD_H

#include <stdbool.h>

#include "kv/attention_plan.h"
#include "vulkan/vk_pipelines.h"

/* args: attention_paged's nine bindings (q, rows, tables, pool, out, tiles, partials, k, v; the
 * partials with their RGBA32F texel view too, wk_arg_buf_view: attention_reduce reads it); pc:
 * its push constants, geometry and windows filled, n_tiles / head_rows / n_split set here from
 * plan and splits (wk_attn_plan_splits). set: the pipelines specialised for the layer's format
 * (the sliding layers' own format, or wide keys). */
int wk_attn_record(wk_vk *vk, wk_pipelines *p, const wk_attn_plan *plan, wk_attn_splits splits, wk_attn_set set,
                   uint32_t T, wk_pc_attention_paged *pc, const wk_arg args[9], char *err, size_t errlen);

#endif
