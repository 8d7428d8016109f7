/* Prefix-cache hits across layer groups: how long a cached prefix a new sequence can take, and
 * taking it. A sequence of the paged cache has one wk_kv_seq per layer group (kv_pool.h), each
 * with its own blocks, so every group names its blocks under its own key (wk_kv_prefix_key) of
 * the one token hash chain. Full-attention groups need every block of the prefix; a
 * sliding-window group of window W needs only the blocks the first query after the prefix can
 * see: for a prefix of P tokens, those holding positions >= P - W + 1 (the query at P reads keys
 * P - W + 1 .. P). The earlier entries start out dropped, exactly as drop_before would have left
 * them after a step to length P. So a prefix whose old sliding blocks were evicted can still hit,
 * and one whose full-attention blocks are all cached cannot when a sliding group lost a block its
 * window needs. This is vLLM's hybrid KV cache manager's rule. Pure bookkeeping: no device, no
 * tokens (the caller hashes them, kv_pool.h wk_kv_block_hash). */
#ifndef WK_KV_PREFIX_H
#define WK_KV_PREFIX_H

#include <stdint.h>

#include "kv/kv_pool.h"

/* What layer group g names block i under, given the token chain's hash of that block. */
uint64_t wk_kv_prefix_key(uint64_t chain, int group);

/* The first block a sliding group of `window` tokens needs for a prefix of k blocks of bt tokens:
 * the one holding position k*bt - window + 1 (0 while the prefix is shorter than the window). */
uint32_t wk_kv_prefix_first_needed(uint32_t k, uint32_t bt, uint32_t window);

/* The most blocks k <= n_chain such that every full-attention group (the first n_groups -
 * swa_groups of kvs) has blocks [0, k) cached or in use under their keys, and every sliding group
 * has [wk_kv_prefix_first_needed(k), k). kvs[g]->pool is where group g's blocks live. */
uint32_t wk_kv_prefix_match(wk_kv_seq *const *kvs, int n_groups, int swa_groups, uint32_t window,
                            const uint64_t *chain, uint32_t n_chain);

/* Takes those k blocks into the empty sequences kvs (n_tokens 0 and no blocks each, else
 * WK_ERR_INVALID): by reference (wk_kv_seq_append_shared), a sliding group's entries below what it
 * needs as dropped (wk_kv_seq_append_dropped). Every group then holds k * bt tokens. k must come
 * from wk_kv_prefix_match with no allocation since (a block it found could have been evicted):
 * WK_ERR_INVALID if one is missing. On any error every group is released again (empty). */
int wk_kv_prefix_attach(wk_kv_seq **kvs, int n_groups, int swa_groups, uint32_t window, const uint64_t *chain,
                        uint32_t k);

#endif
