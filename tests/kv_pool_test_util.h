/* What the paged KV pool tests share (test_kv_layout.c, test_kv_pool.c, test_kv_pool_walk.c): the
 * pool's invariant checker as a check, Gemma 3 270M's geometry, a pool of a given number of blocks,
 * and a snapshot of a sequence's table and the pool's stats to show that a refused operation
 * changed neither. */
#ifndef WK_KV_POOL_TEST_UTIL_H
#define WK_KV_POOL_TEST_UTIL_H

#include <stdint.h>
#include <string.h>

#include "kv/kv_pool.h"
#include "test_util.h"
#include "wushkv/wushkv.h"

static inline int check_ok(const wk_kv_pool *pool) {
    char err[256];
    int rc = wk_kv_pool_check(pool, err, sizeof err);
    if (rc != WK_OK) fprintf(stderr, "pool check: %s\n", err);
    return rc;
}

/* Gemma 3 270M: 18 layers, 1 KV head, head_dim 256; flat (one group of every layer). */
static const wk_kv_geom GEMMA270 = {.n_layer = 18, .n_head_kv = 1, .head_dim = 256, .block_tokens = 16};

static inline wk_kv_pool *make_pool(uint32_t bt, uint64_t bpb, uint64_t n_blocks, uint64_t window, uint32_t max_seqs,
                                    uint32_t sink, uint32_t recent) {
    wk_kv_pool_params p = {bt, bpb, n_blocks * bpb + (uint64_t)max_seqs * window, window, sink, recent, max_seqs, 0, 0};
    wk_kv_pool *pool = NULL;
    int rc = wk_kv_pool_create(&p, &pool);
    CHECK_EQ_INT(rc, WK_OK);
    return pool;
}

static inline void snapshot(const wk_kv_seq *s, uint32_t *table, uint32_t *nb, uint32_t *nt) {
    *nb = s->n_blocks;
    *nt = s->n_tokens;
    if (s->n_blocks) memcpy(table, s->table, s->n_blocks * sizeof *table);
}
static inline int same(const wk_kv_seq *s, const uint32_t *table, uint32_t nb, uint32_t nt) {
    return s->n_blocks == nb && s->n_tokens == nt && (nb == 0 || memcmp(table, s->table, nb * sizeof *table) == 0);
}
static inline int same_stats(const wk_kv_pool_stats *a, const wk_kv_pool_stats *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

#endif
