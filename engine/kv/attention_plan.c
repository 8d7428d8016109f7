/* Tiles and key splits for attention_paged (see attention_plan.h). */
#include "kv/attention_plan.h"

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }
static uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

int wk_attn_plan_make(const wk_row_info *rows, const uint32_t *win_words, uint32_t T, uint32_t n_head,
                      uint32_t n_head_kv, uint32_t head_dim, uint32_t subgroup, wk_attn_tile *tiles, wk_attn_plan *out) {
    const uint32_t ncl = wk_attn_lane_chunks(head_dim, subgroup);
    if (ncl > WK_ATTN_MAXC || ncl == 0) return -1;
    const uint32_t hpk = n_head / n_head_kv;
    /* A GQA group larger than a tile is cut into head chunks (more workgroups along y). */
    const uint32_t head_rows = min_u32(hpk, WK_ATTN_MAXR);
    const uint32_t per_tile = max_u32(1, WK_ATTN_MAXR / head_rows);
    uint32_t n = 0, chunk_row0 = 0, most = 0;
    for (uint32_t t = 0; t < T;) {
        if (t == 0 || rows[t].kv_base != rows[t - 1].kv_base || rows[t].pos != rows[t - 1].pos + 1) chunk_row0 = t;
        uint32_t len = 1;
        while (len < per_tile && t + len < T && rows[t + len].kv_base == rows[t].kv_base &&
               rows[t + len].pos == rows[t].pos + len)
            len++;
        tiles[n++] = (wk_attn_tile){.row0 = t, .n_tok = len, .win_word = win_words ? win_words[t] : 0,
                                    .chunk_row0 = chunk_row0};
        t += len;
        most = max_u32(most, len);
    }
    *out = (wk_attn_plan){.n_tiles = n, .head_rows = head_rows,
                          .groups_y = n_head_kv * ((hpk + head_rows - 1) / head_rows), .max_tile = per_tile,
                          .tile_rows = most * head_rows};
    return 0;
}

/* Splits of a window pass: a tile's window keys are its sinks and the keys from its earliest row's
 * recent window to its last row, at most sink + recent + max_tile. */
static uint32_t window_splits(uint32_t window_keys, uint32_t max_tile) {
    return window_keys ? (window_keys + max_tile + WK_ATTN_MAX_KEYS - 1) / WK_ATTN_MAX_KEYS : 0;
}

wk_attn_splits wk_attn_plan_splits(const wk_attn_plan *p, const wk_row_info *rows, uint32_t T, uint32_t n_head,
                                   uint32_t window, uint32_t sink, uint32_t recent, uint64_t part_rows,
                                   int gpu_splits) {
    const uint32_t target = gpu_splits ? WK_ATTN_TARGET_WG_GPU : WK_ATTN_TARGET_WG;
    const uint32_t max_split = gpu_splits ? WK_ATTN_MAX_SPLIT_GPU : WK_ATTN_MAX_SPLIT;
    const uint32_t win = wk_attn_plan_two_pass(p, sink, recent) ? window_splits(sink + recent, p->max_tile) : 0;
    uint32_t keys = 0, last = 0;
    for (uint32_t t = 0; t < T; t++) {
        uint32_t k = rows[t].pos + 1;
        if (k > last) last = k;
        if (window && k > window) k = window;
        if (k > keys) keys = k;
    }
    /* Every key of every row a sink or a recent one (a prompt shorter than the windows): the bulk
     * pass would walk nothing, and its dispatch and the reduce after it cost ~1 ms on lavapipe. */
    if (win && last <= sink + recent) return (wk_attn_splits){.main = 0, .win = win};
    /* A tile's keys span its first row's window start to its last row's position. */
    keys += p->max_tile;
    const uint32_t need = (keys + WK_ATTN_MAX_KEYS - 1) / WK_ATTN_MAX_KEYS;
    const uint32_t wgs = p->n_tiles * p->groups_y;
    const uint64_t all = part_rows / ((uint64_t)T * n_head), room = all > win ? all - win : 0;
    uint32_t n = 1;
    if (wgs < target) {
        /* Each split keeps at least 4 key tiles, or the reduce pass costs more than it saves. */
        n = (target + wgs - 1) / wgs;
        n = min_u32(n, (keys + 4 * WK_ATTN_KT - 1) / (4 * WK_ATTN_KT));
        n = min_u32(n, max_split);
        if (n > room) n = (uint32_t)room;
    }
    return (wk_attn_splits){.main = max_u32(max_u32(n, need), 1), .win = win};
}

uint64_t wk_attn_part_rows(uint32_t max_tokens, uint32_t n_head, uint32_t max_ctx, uint32_t window_keys,
                           int gpu_splits) {
    const uint64_t least = gpu_splits ? WK_ATTN_PART_ROWS_GPU : WK_ATTN_PART_ROWS;
    const uint64_t need = ((uint64_t)max_ctx + 16 + WK_ATTN_MAX_KEYS - 1) / WK_ATTN_MAX_KEYS;
    /* A window pass only runs in steps with tiles of several tokens (at most WK_ATTN_MAXR). */
    const uint64_t splits = need + window_splits(window_keys, WK_ATTN_MAXR);
    const uint64_t rows = splits > 1 ? (uint64_t)max_tokens * n_head * splits : 0;
    return rows > least ? rows : least;
}
