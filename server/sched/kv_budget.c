/* KV cache accounting for the scheduler (see kv_budget.h): admission arithmetic, per-request usage
 * and the pool gauge, from the engine's wk_model_info alone. */
#include "sched/kv_budget.h"

#include <string.h>

void kv_budget_init(kv_budget *b, const wk_model_info *info, int max_seqs, int chunk) {
    memset(b, 0, sizeof *b);
    b->block_tokens = info->kv_block_tokens > 0 ? info->kv_block_tokens : 16;
    b->block_bytes = info->kv_block_bytes;
    b->chunk = chunk > 0 ? chunk : 1;
    b->info = *info;
    b->window_bytes = info->kv_window_bytes;
    b->pool_bytes = info->kv_pool_bytes;
    b->pool_blocks = info->kv_pool_blocks;
    b->pool_cap[1] = info->kv_swa_pool_bytes;
    b->pool_cap[0] = info->kv_pool_bytes - info->kv_swa_pool_bytes;
    b->swa_block_bytes = info->kv_swa_block_bytes;
    b->swa_pool_blocks = info->kv_swa_pool_blocks;
    /* K and V, 2 bytes each, every layer and KV head. */
    b->fp16_bytes_per_token = 2ull * (uint64_t)info->n_layer * (uint64_t)info->n_head_kv * (uint64_t)info->head_dim * 2ull;
    b->bits_per_element = info->kv_bits_per_element;
    b->max_ctx = info->max_ctx;
    b->max_seqs = max_seqs;
}

int kv_budget_blocks(const kv_budget *b, int tokens) {
    if (tokens <= 0) return 0;
    return (int)(((int64_t)tokens + b->block_tokens - 1) / b->block_tokens);
}

uint64_t kv_budget_seq_bytes(const kv_budget *b, int tokens) {
    return wk_kv_peak_bytes(&b->info, tokens > 0 ? (uint64_t)tokens : 0, (uint64_t)b->chunk);
}

uint64_t kv_budget_pool_seq_bytes(const kv_budget *b, int pool, int tokens) {
    return wk_kv_pool_peak_bytes(&b->info, pool, tokens > 0 ? (uint64_t)tokens : 0, (uint64_t)b->chunk);
}

uint64_t kv_budget_pool_blocks(const kv_budget *b, int tokens) {
    uint64_t blocks = (kv_budget_pool_seq_bytes(b, 0, tokens) - b->window_bytes) / b->block_bytes;
    if (b->pool_cap[1]) blocks += kv_budget_pool_seq_bytes(b, 1, tokens) / b->swa_block_bytes;
    return blocks;
}

bool kv_budget_fits(const kv_budget *b, const uint64_t claimed[KV_POOLS], int tokens) {
    for (int p = 0; p < KV_POOLS; p++) {
        const uint64_t need = kv_budget_pool_seq_bytes(b, p, tokens);
        if (claimed[p] > b->pool_cap[p] || need > b->pool_cap[p] - claimed[p]) return false;
    }
    return true;
}

bool kv_budget_claims_fit(const kv_budget *b, const uint64_t claimed[KV_POOLS]) {
    for (int p = 0; p < KV_POOLS; p++)
        if (claimed[p] > b->pool_cap[p]) return false;
    return true;
}

uint64_t kv_budget_to_come(const kv_budget *b, int pool, int tokens, uint64_t held) {
    const uint64_t fill = kv_budget_pool_seq_bytes(b, pool, tokens);
    return fill > held ? fill - held : 0;
}

kv_usage kv_budget_usage(const kv_budget *b, int peak_len, uint64_t peak_bytes) {
    kv_usage u = {
        .bytes = peak_bytes,
        .fp16_bytes = (uint64_t)(peak_len > 0 ? peak_len : 0) * b->fp16_bytes_per_token,
        .blocks = kv_budget_blocks(b, peak_len),
        .bits_per_element = b->bits_per_element,
    };
    return u;
}

void kv_budget_gauge(const kv_budget *b, const wk_kv_usage u[KV_POOLS], metrics_pool *p) {
    p->kv_capacity_bytes = b->pool_bytes;
    p->kv_capacity_blocks = (int)(b->pool_blocks + b->swa_pool_blocks);
    p->kv_used_bytes = u[0].used_bytes + u[1].used_bytes;
    p->kv_used_blocks = (int)(u[0].used_blocks + u[1].used_blocks);
    p->kv_cached_bytes = u[0].cached_bytes + u[1].cached_bytes;
    p->kv_cached_blocks = (int)(u[0].cached_blocks + u[1].cached_blocks);
}
