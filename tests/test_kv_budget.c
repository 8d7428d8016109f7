/* The scheduler's KV accounting (server/sched/kv_budget.c) against the engine's own pool layout
 * (engine/kv/kv_pool.c): a sequence's bytes for every length, how many 2048-token sequences the
 * admission arithmetic lets into 256 MiB (the figure docs/wush-kv.md gives), the exact boundary of
 * "fits", what a prefilling sequence still takes, usage against f16, and the /metrics pool gauge
 * from the pools' counts. */
#include <stdint.h>
#include <string.h>

#include "sched/kv_budget.h"
#include "kv/kv_pool.h"
#include "test_util.h"

/* Gemma 3 270M: 18 layers, 1 KV head, head_dim 256, 16-token blocks; as the engine groups its
 * layers (wk_kv_layer_groups): 6 groups of 3, the last 5 sliding-window layers of 512 tokens. The
 * flat geometry (one group, nothing slides) is a Llama-like model of the same size. */
static const wk_kv_geom GEMMA270 = {.n_layer = 18, .n_head_kv = 1, .head_dim = 256, .block_tokens = 16,
                                   .group_layers = 3, .swa_groups = 5, .swa_window = 512};
static const wk_kv_geom FLAT270 = {.n_layer = 18, .n_head_kv = 1, .head_dim = 256, .block_tokens = 16};
#define POOL_256MIB (256ull << 20)
#define CHUNK 512 /* the server's default batch-token budget off a CPU device (128 on one) */

/* What the engine reports for a paged cache of this format (engine.c fills the same fields). */
static wk_model_info paged_info(const wk_kv_layout *l, uint64_t pool_bytes, int max_ctx) {
    wk_model_info i;
    memset(&i, 0, sizeof i);
    i.n_layer = GEMMA270.n_layer;
    i.n_head_kv = GEMMA270.n_head_kv;
    i.head_dim = GEMMA270.head_dim;
    i.max_ctx = max_ctx;
    i.kv_bits_per_element = wk_kv_layout_bits_per_element(l, (uint64_t)max_ctx);
    i.kv_pool_bytes = pool_bytes;
    i.kv_block_tokens = l->block_tokens;
    i.kv_block_bytes = l->bytes_per_block;
    i.kv_layer_groups = l->n_groups;
    i.kv_swa_groups = l->swa_groups;
    i.kv_swa_window = l->swa_window;
    i.kv_window_bytes = l->window_bytes;
    i.kv_pool_blocks = pool_bytes / l->bytes_per_block;
    return i;
}

/* How many sequences of n tokens FCFS admission lets in, one after another. */
static int admitted(const kv_budget *b, int n) {
    uint64_t claimed[KV_POOLS] = {0};
    int k = 0;
    while (kv_budget_fits(b, claimed, n)) {
        for (int p = 0; p < KV_POOLS; p++) claimed[p] += kv_budget_pool_seq_bytes(b, p, n);
        k++;
    }
    return k;
}

/* kv_budget_fits with claimed bytes in pool 0 only (one pool). */
static bool fits0(const kv_budget *b, uint64_t claimed, int n) {
    const uint64_t c[KV_POOLS] = {claimed, 0};
    return kv_budget_fits(b, c, n);
}

static void test_paged(const wk_kv_geom *geom, int sink, int recent, int expect_fit) {
    wk_kv_fmt fmt = {2, WK_KVQ_QUEST, 32, sink, recent, 0, 0, 0, 0};
    wk_kv_layout l;
    CHECK_EQ_INT(wk_kv_layout_get(geom, &fmt, &l), WK_OK);
    wk_model_info info = paged_info(&l, POOL_256MIB, 2048);
    kv_budget b;
    kv_budget_init(&b, &info, 8, CHUNK);
    CHECK_EQ_INT(b.block_tokens, 16);
    CHECK_EQ_INT(b.fp16_bytes_per_token, 18 * 2 * 256 * 2);

    CHECK_EQ_INT(kv_budget_blocks(&b, 0), 0);
    CHECK_EQ_INT(kv_budget_blocks(&b, 1), 1);
    CHECK_EQ_INT(kv_budget_blocks(&b, 16), 1);
    CHECK_EQ_INT(kv_budget_blocks(&b, 17), 2);
    CHECK_EQ_INT(kv_budget_blocks(&b, 2048), 128);
    int mismatches = 0;
    for (int n = 1; n <= 5000; n++)
        if (kv_budget_seq_bytes(&b, n) != wk_kv_layout_seq_peak_bytes(&l, (uint64_t)n, CHUNK)) mismatches++;
    CHECK_EQ_INT(mismatches, 0);
    /* Up to the window every layer keeps every token: the sliding pool holds what the flat one does. */
    CHECK_EQ_INT(kv_budget_seq_bytes(&b, 100), wk_kv_layout_seq_bytes(&l, 100));
    CHECK_EQ_INT(kv_budget_pool_blocks(&b, 100) * l.bytes_per_block + l.window_bytes, kv_budget_seq_bytes(&b, 100));

    /* Admission agrees with the pool's own count, and the count the docs print. */
    CHECK_EQ_INT(admitted(&b, 2048), (long long)wk_kv_layout_seqs_fit(&l, POOL_256MIB, 2048, CHUNK));
    CHECK_EQ_INT(admitted(&b, 2048), expect_fit);

    /* The boundary: exactly full fits, one byte short does not, over-claimed never wraps around. */
    uint64_t need = kv_budget_seq_bytes(&b, 100);
    CHECK(fits0(&b, POOL_256MIB - need, 100));
    CHECK(!fits0(&b, POOL_256MIB - need + 1, 100));
    CHECK(!fits0(&b, POOL_256MIB + 1, 1));
    CHECK(!fits0(&b, UINT64_MAX, 1));
    CHECK_EQ_INT(kv_budget_pool_seq_bytes(&b, 1, 100), 0); /* one pool: nothing in the second */

    kv_usage u = kv_budget_usage(&b, 100, need);
    CHECK_EQ_INT(u.bytes, need);
    CHECK_EQ_INT(u.fp16_bytes, 100ull * 18432);
    CHECK_EQ_INT(u.blocks, 7);
    CHECK_NEAR(u.bits_per_element, info.kv_bits_per_element, 0);

    /* What a prefilling sequence still takes: nothing once it holds its prefill's bytes (a
     * prefix hit's included), the rest otherwise. */
    CHECK_EQ_INT(kv_budget_to_come(&b, 0, 100, 0), kv_budget_pool_seq_bytes(&b, 0, 100));
    CHECK_EQ_INT(kv_budget_to_come(&b, 0, 100, need), 0);
    CHECK_EQ_INT(kv_budget_to_come(&b, 0, 100, need - 5), 5);
    CHECK(kv_budget_claims_fit(&b, (const uint64_t[KV_POOLS]){POOL_256MIB, 0}));
    CHECK(!kv_budget_claims_fit(&b, (const uint64_t[KV_POOLS]){POOL_256MIB + 1, 0}));
    CHECK(!kv_budget_claims_fit(&b, (const uint64_t[KV_POOLS]){0, 1}));

    /* Gauge: the pools' own counts (a block two sequences share counted once): 3 sequences
     * holding their window slots and 7 blocks, 5 kept by the prefix cache. */
    metrics_pool p = {0};
    wk_kv_usage pu[KV_POOLS] = {{.used_blocks = 7, .cached_blocks = 5, .used_windows = 3,
                                 .used_bytes = 3 * l.window_bytes + 7 * l.bytes_per_block,
                                 .cached_bytes = 5 * l.bytes_per_block}};
    kv_budget_gauge(&b, pu, &p);
    CHECK_EQ_INT(p.kv_used_bytes, 3 * l.window_bytes + 7 * l.bytes_per_block);
    CHECK_EQ_INT(p.kv_used_blocks, 7);
    CHECK_EQ_INT(p.kv_cached_blocks, 5);
    CHECK_EQ_INT(p.kv_cached_bytes, 5 * l.bytes_per_block);
    CHECK_EQ_INT(p.kv_capacity_bytes, POOL_256MIB);
    CHECK_EQ_INT(p.kv_capacity_blocks, (long long)(POOL_256MIB / l.bytes_per_block));
}

/* Per-layer-class formats: full-attention layers int2, sliding layers int4 in a
 * pool of their own, 256 MiB split as the engine splits it (in proportion to a 2048-token
 * sequence's peak in each pool). Admission must respect each pool: short sequences keep every
 * sliding block, so the sliding pool runs out first, which a check of the sum alone would miss. */
static void test_two_pools(void) {
    const wk_kv_fmt f2 = {2, WK_KVQ_QUEST, 32, 0, 0, 0, 0, 0, 0}, f4 = {4, WK_KVQ_QUEST, 32, 0, 0, 0, 0, 0, 0};
    wk_kv_layout l, l4;
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &f2, &l), WK_OK);
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &f4, &l4), WK_OK);
    CHECK_EQ_INT(wk_kv_layout_set_swa(&l, &l4), WK_OK);
    const uint64_t peak0 = wk_kv_layout_pool_peak_bytes(&l, 0, 2048, CHUNK);
    const uint64_t peak1 = wk_kv_layout_pool_peak_bytes(&l, 1, 2048, CHUNK);
    const uint64_t cap1 = POOL_256MIB / (peak0 + peak1) * peak1, cap0 = POOL_256MIB - cap1;
    wk_model_info info = paged_info(&l, POOL_256MIB, 2048);
    info.kv_swa_block_bytes = l4.bytes_per_block;
    info.kv_swa_pool_bytes = cap1 / l4.bytes_per_block * l4.bytes_per_block;
    info.kv_swa_pool_blocks = cap1 / l4.bytes_per_block;
    info.kv_pool_bytes = cap0 + info.kv_swa_pool_bytes;
    info.kv_pool_blocks = cap0 / l.bytes_per_block;
    kv_budget b;
    kv_budget_init(&b, &info, 8, CHUNK);
    CHECK_EQ_INT(b.pool_cap[0], cap0);
    CHECK_EQ_INT(b.pool_cap[1], info.kv_swa_pool_bytes);
    int mismatches = 0;
    for (int n = 1; n <= 5000; n++)
        if (kv_budget_seq_bytes(&b, n) != wk_kv_layout_seq_peak_bytes(&l, (uint64_t)n, CHUNK) ||
            kv_budget_pool_seq_bytes(&b, 1, n) != wk_kv_layout_pool_peak_bytes(&l, 1, (uint64_t)n, CHUNK))
            mismatches++;
    CHECK_EQ_INT(mismatches, 0);
    /* 100 tokens: 7 blocks in each of 1 full group (int2) and 5 sliding ones (int4). */
    CHECK_EQ_INT(kv_budget_pool_seq_bytes(&b, 0, 100), 7 * l.bytes_per_block);
    CHECK_EQ_INT(kv_budget_pool_seq_bytes(&b, 1, 100), 5 * 7 * l4.bytes_per_block);
    CHECK_EQ_INT(kv_budget_pool_blocks(&b, 100), 7 + 5 * 7);
    /* Full-context sequences: the split makes both pools run out at once. */
    const int n2048 = admitted(&b, 2048);
    CHECK_EQ_INT(n2048, (int)(cap0 / peak0 < info.kv_swa_pool_bytes / peak1 ? cap0 / peak0 : info.kv_swa_pool_bytes / peak1));
    CHECK(n2048 >= (int)(POOL_256MIB / (peak0 + peak1)) - 1);
    /* Short ones: the sliding pool decides, and the sum alone would admit more. */
    const uint64_t need0 = kv_budget_pool_seq_bytes(&b, 0, 100), need1 = kv_budget_pool_seq_bytes(&b, 1, 100);
    const int n100 = admitted(&b, 100);
    CHECK_EQ_INT(n100, (int)(info.kv_swa_pool_bytes / need1));
    CHECK(n100 < (int)(cap0 / need0));
    CHECK(n100 < (int)(info.kv_pool_bytes / (need0 + need1)));
    /* Each pool's boundary. */
    CHECK(kv_budget_fits(&b, (const uint64_t[KV_POOLS]){cap0 - need0, info.kv_swa_pool_bytes - need1}, 100));
    CHECK(!kv_budget_fits(&b, (const uint64_t[KV_POOLS]){cap0 - need0 + 1, 0}, 100));
    CHECK(!kv_budget_fits(&b, (const uint64_t[KV_POOLS]){0, info.kv_swa_pool_bytes - need1 + 1}, 100));
    /* Gauge: 2 sequences, 4 int2 blocks in pool 0, 9 int4 blocks in pool 1. */
    metrics_pool p = {0};
    const wk_kv_usage pu[KV_POOLS] = {{.used_blocks = 4, .used_bytes = 4 * l.bytes_per_block},
                                      {.used_blocks = 9, .used_bytes = 9 * l4.bytes_per_block}};
    kv_budget_gauge(&b, pu, &p);
    CHECK_EQ_INT(p.kv_used_bytes, 4 * l.bytes_per_block + 9 * l4.bytes_per_block);
    CHECK_EQ_INT(p.kv_used_blocks, 13);
    CHECK_EQ_INT(p.kv_capacity_blocks, (long long)(info.kv_pool_blocks + info.kv_swa_pool_blocks));
    CHECK_EQ_INT(p.kv_capacity_bytes, info.kv_pool_bytes);
}

int main(void) {
    test_paged(&FLAT270, 0, 0, 45);  /* every layer keeps every token: 45 sequences of 2048 in 256 MiB */
    test_paged(&FLAT270, 4, 64, 37); /* with sink 4 / recent 64: 37 */
    test_paged(&GEMMA270, 0, 0, 77); /* Gemma 3: the sliding layers give blocks back (docs/wush-kv.md) */
    test_paged(&GEMMA270, 4, 64, 56);
    test_two_pools();
    TEST_MAIN_END();
}
