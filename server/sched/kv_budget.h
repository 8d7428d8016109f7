/* KV cache accounting for the scheduler: the blocks and bytes a sequence of n tokens holds, whether
 * a waiting sequence fits beside what the running ones claim, the usage a finished request reports
 * and the pool gauge of /metrics. Pure arithmetic over the engine's wk_model_info, so the numbers
 * that decide admission are unit-tested without an engine (tests/test_kv_budget.c). */
#ifndef WUSHKV_KV_BUDGET_H
#define WUSHKV_KV_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "metrics/metrics.h"
#include "wushkv/wushkv.h"

/* The engine's KV pools: 0 (every layer, or with per-layer-class formats the full-attention layers
 * and the windows) and 1 (the sliding-window layers' own format; empty without one). Admission
 * counts each against its own capacity. */
#define KV_POOLS 2

/* What one request's sequence held at its peak (usage.kv_cache in the response). */
typedef struct kv_usage {
    uint64_t bytes, fp16_bytes;
    int blocks;
    double bits_per_element;
} kv_usage;

typedef struct kv_budget {
    int block_tokens;      /* the pool's block (every format is paged) */
    uint64_t block_bytes;  /* bytes of one pool block (one layer group, K and V) */
    int chunk;             /* tokens one step writes into a sequence at most (the engine's batch) */
    wk_model_info info;    /* what wk_kv_peak_bytes reads */
    uint64_t window_bytes; /* each sequence's f16 window slot (0 without windows) */
    uint64_t pool_bytes, pool_blocks; /* both pools together; blocks: pool 0's */
    uint64_t pool_cap[KV_POOLS];      /* each pool's bytes (pool 1: 0 without per-layer-class formats) */
    uint64_t swa_block_bytes, swa_pool_blocks; /* pool 1's block and block count */
    uint64_t fp16_bytes_per_token; /* what an f16 cache would hold: the "vs f16" of usage */
    double bits_per_element;
    int max_ctx, max_seqs;
} kv_budget;

/* chunk: the most tokens one step writes into a sequence (the batch-token budget). */
void kv_budget_init(kv_budget *b, const wk_model_info *info, int max_seqs, int chunk);

/* Blocks of tokens covering `tokens` (rounded up): what usage.kv_cache.blocks reports. */
int kv_budget_blocks(const kv_budget *b, int tokens);
/* The most bytes a sequence growing to `tokens` holds in the paged pool (wk_kv_peak_bytes): whole
 * blocks of every layer group, a sliding group's only as far back as its window reaches, plus its
 * window slot. */
uint64_t kv_budget_seq_bytes(const kv_budget *b, int tokens);
/* The part of kv_budget_seq_bytes that pool `pool` holds (wk_kv_pool_peak_bytes). */
uint64_t kv_budget_pool_seq_bytes(const kv_budget *b, int pool, int tokens);
/* The pool blocks behind kv_budget_seq_bytes, both pools' (window slot not counted). */
uint64_t kv_budget_pool_blocks(const kv_budget *b, int tokens);
/* Whether a sequence of `tokens` fits beside claimed[p] bytes of pool p held or promised to
 * others, in every pool. */
bool kv_budget_fits(const kv_budget *b, const uint64_t claimed[KV_POOLS], int tokens);
/* Whether claimed[p] bytes fit pool p, in every pool. */
bool kv_budget_claims_fit(const kv_budget *b, const uint64_t claimed[KV_POOLS]);
/* The bytes of pool `pool` a sequence that holds `held` of them still takes on its way to
 * `tokens` (its prefill's end): what its blocks there will add, 0 when it holds that much already
 * (a prefix hit's blocks count as held). */
uint64_t kv_budget_to_come(const kv_budget *b, int pool, int tokens, uint64_t held);
/* Usage of a sequence that held at most peak_len tokens and peak_bytes device bytes. */
kv_usage kv_budget_usage(const kv_budget *b, int peak_len, uint64_t peak_bytes);
/* The pool gauge from the pools' own counts (wk_engine_kv_usage of each pool): bytes and blocks
 * in use each counted once however many sequences share them (the sequences' own sums count a
 * shared block for every holder), the ones the prefix cache keeps (cached blocks, and parked
 * sequences' blocks and window slots), and the capacity. Blocks count both pools' (of their own
 * sizes). */
void kv_budget_gauge(const kv_budget *b, const wk_kv_usage u[KV_POOLS], metrics_pool *p);

#endif
