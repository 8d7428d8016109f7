/* Records a layer's paged attention passes and their reduce (see attention_record.h). */
#include "kv/attention_record.h"

int wk_attn_record(wk_vk *vk, wk_pipelines *p, const wk_attn_plan *plan, wk_attn_splits splits, wk_attn_set set,
                   uint32_t T, wk_pc_attention_paged *pc, const wk_arg args[9], char *err, size_t errlen) {
    pc->n_tiles = plan->n_tiles;
    pc->head_rows = plan->head_rows;
    pc->n_split = splits.main + splits.win;
    /* Steps of one token per sequence take the 4-row decode pipelines: their registers hold just
     * their rows, and one body walks the bulk and the windows in loops of their own. */
    const bool decode = wk_attn_plan_decode(plan);
    const wk_attn_pipes pipes = wk_attn_pipes_of(set);
    const wk_pipe_id decode_pipe = wk_attn_decode_lanes(p->attn_lanes, vk->subgroup_size, pc->head_dim)
                                       ? pipes.decode_lanes
                                       : pipes.decode;
    const wk_pipe_id bulk_pipe =
        wk_attn_bulk_lanes(p->attn_lanes, vk->subgroup_size, pc->head_dim, vk->props.limits.maxComputeSharedMemorySize)
            ? pipes.bulk_lanes
            : pipes.bulk;
    /* Binding 9: the partials' texel view, which a chained windows pass reads. */
    wk_arg a[10];
    for (int i = 0; i < 9; i++) a[i] = args[i];
    a[9] = args[6];
    /* Every prefill step of up to a few hundred tokens chains (wk_attn_chains): no reduce (~0.5 ms
     * a layer on lavapipe at 128 tokens) and no windows partials. */
    const bool chain = wk_attn_chains(plan, splits);
    pc->chain = 0;
    /* (No bulk pass when no row reads a key from the blocks: wk_attn_plan_splits' main 0.) */
    int rc = splits.main ? wk_dispatch(vk, p, decode ? decode_pipe : bulk_pipe, a, pc, sizeof *pc, plan->n_tiles,
                                       plan->groups_y, splits.main, err, errlen)
                         : 0;
    if (!rc && splits.win) {
        if (chain) wk_vk_barrier(vk);
        pc->chain = chain;
        rc = wk_dispatch(vk, p, pipes.windows, a, pc, sizeof *pc, plan->n_tiles, plan->groups_y, splits.win, err,
                         errlen);
    }
    if (rc || pc->n_split == 1 || chain) return rc;
    wk_vk_barrier(vk);
    wk_pc_attention_reduce rp = {.head_dim = pc->head_dim, .n_head = pc->n_head, .n_tokens = T, .n_split = pc->n_split};
    const wk_arg rargs[2] = {args[6], args[4]};
    return wk_dispatch(vk, p, WK_PIPE_ATTENTION_REDUCE, rargs, &rp, sizeof rp, T, pc->n_head, 1, err, errlen);
}
