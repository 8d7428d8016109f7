/* Prefix-cache hits across full-attention and sliding-window layer groups (kv_prefix.h). */
#include "kv/kv_prefix.h"

#include "wushkv/wushkv.h"

uint64_t wk_kv_prefix_key(uint64_t chain, int group) {
    /* The chain hashed once more with the group as its salt: keys of different groups of one
     * pool never meet (up to 64-bit collisions), and group 0 is not the chain itself. */
    return wk_kv_block_hash(chain, (uint64_t)group + 1, NULL, 0);
}

uint32_t wk_kv_prefix_first_needed(uint32_t k, uint32_t bt, uint32_t window) {
    const uint64_t p = (uint64_t)k * bt;
    /* As engine.c's seq_slide: drop_before(p - window + 1) once p >= window, which releases the
     * entries wholly below that position. */
    return window == 0 || p < window ? 0 : (uint32_t)((p - window + 1) / bt);
}

static bool hits(const wk_kv_seq *s, int g, const uint64_t *chain, uint32_t lo, uint32_t hi) {
    for (uint32_t i = lo; i < hi; i++)
        if (wk_kv_pool_cache_lookup(s->pool, wk_kv_prefix_key(chain[i], g)) == WK_KV_NO_BLOCK) return false;
    return true;
}

uint32_t wk_kv_prefix_match(wk_kv_seq *const *kvs, int n_groups, int swa_groups, uint32_t window,
                            const uint64_t *chain, uint32_t n_chain) {
    const int n_full = n_groups - swa_groups;
    uint32_t k = n_chain;
    /* Full attention: the longest run from block 0 cached in every group. */
    for (int g = 0; g < n_full; g++)
        for (uint32_t i = 0; i < k; i++)
            if (wk_kv_pool_cache_lookup(kvs[g]->pool, wk_kv_prefix_key(chain[i], g)) == WK_KV_NO_BLOCK) {
                k = i;
                break;
            }
    /* Sliding groups: the longest k at most that whose window blocks are all there. Shorter
     * prefixes need earlier blocks, so each k is checked on its own. */
    for (; k > 0; k--) {
        const uint32_t bt = wk_kv_pool_block_tokens(kvs[0]->pool);
        const uint32_t lo = wk_kv_prefix_first_needed(k, bt, window);
        bool ok = true;
        for (int g = n_full; g < n_groups && ok; g++) ok = hits(kvs[g], g, chain, lo, k);
        if (ok) break;
    }
    return k;
}

int wk_kv_prefix_attach(wk_kv_seq **kvs, int n_groups, int swa_groups, uint32_t window, const uint64_t *chain,
                        uint32_t k) {
    for (int g = 0; g < n_groups; g++)
        if (kvs[g]->n_tokens != 0 || kvs[g]->n_blocks != 0) return WK_ERR_INVALID;
    const int n_full = n_groups - swa_groups;
    int rc = WK_OK;
    for (int g = 0; g < n_groups && rc == WK_OK; g++) {
        const uint32_t lo = g < n_full ? 0 : wk_kv_prefix_first_needed(k, wk_kv_pool_block_tokens(kvs[g]->pool), window);
        for (uint32_t i = 0; i < k && rc == WK_OK; i++) {
            if (i < lo) {
                rc = wk_kv_seq_append_dropped(kvs[g]);
                continue;
            }
            const uint32_t b = wk_kv_pool_cache_lookup(kvs[g]->pool, wk_kv_prefix_key(chain[i], g));
            rc = b == WK_KV_NO_BLOCK ? WK_ERR_INVALID : wk_kv_seq_append_shared(kvs[g], b);
        }
    }
    if (rc != WK_OK)
        for (int g = 0; g < n_groups; g++) wk_kv_seq_release(kvs[g]);
    return rc;
}
