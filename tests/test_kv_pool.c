/* Paged KV pool tests: block sizes and bits/element of each format against hand-computed numbers,
 * exact accounting, LIFO reuse, all-or-nothing exhaustion, sharing and copy-on-write, f16 window
 * slots, window-less sequences, sliding-window release (drop_before) and what it rules out, the
 * invariant checker catching corruption, the prefix cache (hash chain, LRU eviction, flush), and
 * seeded random walks of thousands of operations that replay every device copy and write on a
 * shadow of the pool memory, so a missing or wrong copy-on-write, or a cached block reused while
 * referenced or written while named, shows up as tokens changing under a sequence or a hit. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_pool.h"
#include "kv/kv_prefix.h"
#include "test_rng.h"
#include "test_util.h"
#include "wushkv/wushkv.h"

static uint32_t rng_below(uint32_t n) { return n ? (uint32_t)(rng_u64() % n) : 0; }

static int check_ok(const wk_kv_pool *pool) {
    char err[256];
    int rc = wk_kv_pool_check(pool, err, sizeof err);
    if (rc != WK_OK) fprintf(stderr, "pool check: %s\n", err);
    return rc;
}

/* Gemma 3 270M: 18 layers, 1 KV head, head_dim 256; flat (one group of every layer). */
static const wk_kv_geom GEMMA270 = {.n_layer = 18, .n_head_kv = 1, .head_dim = 256, .block_tokens = 16};

/* The most blocks a sliding group holds, by simulation: a sequence grows to n in steps of `chunk`
 * tokens after a first step of `first`; during a step from len it holds the blocks from the one
 * with position len - window + 1 (earlier ones were released after the previous step) to the one
 * with position len + c - 1. */
static uint64_t simulated_live(uint64_t n, uint64_t window, uint64_t chunk, uint64_t first, uint64_t bt) {
    uint64_t most = 0;
    for (uint64_t len = 0, c = first; len < n; len += c, c = chunk) {
        if (c > n - len) c = n - len;
        const uint64_t lo = len + 1 > window ? (len + 1 - window) / bt : 0, hi = (len + c - 1) / bt;
        if (hi - lo + 1 > most) most = hi - lo + 1;
    }
    return most;
}

static void test_layer_groups(void) {
    bool swa[26];
    int group_of[26], slot_of[26];
    /* Gemma 3 270M: layers 5, 11, 17 full attention, the other 15 sliding (window 512). */
    for (int il = 0; il < 18; il++) swa[il] = il % 6 < 5;
    wk_kv_geom g = GEMMA270;
    wk_kv_layer_groups(swa, 18, 512, 4096, group_of, slot_of, &g);
    CHECK_EQ_INT(g.group_layers, 3);
    CHECK_EQ_INT(g.swa_groups, 5);
    CHECK_EQ_INT(g.swa_window, 512);
    CHECK_EQ_INT(group_of[5], 0);
    CHECK_EQ_INT(slot_of[5], 0);
    CHECK_EQ_INT(group_of[17], 0);
    CHECK_EQ_INT(slot_of[17], 2);
    CHECK_EQ_INT(group_of[0], 1);
    CHECK_EQ_INT(slot_of[0], 0);
    CHECK_EQ_INT(group_of[6], 2); /* sliding layers 3, 4, 6 */
    CHECK_EQ_INT(slot_of[6], 2);
    CHECK_EQ_INT(group_of[16], 5);
    CHECK_EQ_INT(slot_of[16], 2);
    /* Every (group, slot) names exactly one layer. */
    int seen[6][3] = {{0}};
    for (int il = 0; il < 18; il++) seen[group_of[il]][slot_of[il]]++;
    int once = 0;
    for (int a = 0; a < 6; a++)
        for (int b = 0; b < 3; b++) once += seen[a][b] == 1;
    CHECK_EQ_INT(once, 18);

    /* 2-bit QuEST G32 with those groups: a pool block is a sixth of the flat one; the format's
     * figures are unchanged; the peak of a 2048-token sequence written in 512-token steps is
     * 128 blocks of the full group + 5 * 65 of the sliding ones = 453 * 7680 = 3479040 bytes
     * (flat: 5898240), so 256 MiB admits 77 sequences instead of 45. */
    wk_kv_fmt q2 = {2, WK_KVQ_QUEST, 32, 0, 0};
    wk_kv_layout l;
    CHECK_EQ_INT(wk_kv_layout_get(&g, &q2, &l), WK_OK);
    CHECK_EQ_INT(l.n_groups, 6);
    CHECK_EQ_INT(l.bytes_per_block, 7680);
    CHECK_EQ_INT(wk_kv_layout_seq_bytes(&l, 2048), 5898240);
    CHECK_NEAR(wk_kv_layout_bits_per_element(&l, 2048), 2.5, 0);
    CHECK_EQ_INT(wk_kv_layout_seq_peak_bytes(&l, 2048, 512), 3479040);
    CHECK_EQ_INT(wk_kv_layout_seqs_fit(&l, 256ull << 20, 2048, 512), 77);
    CHECK_EQ_INT(wk_kv_layout_seq_peak_bytes(&l, 100, 512), wk_kv_layout_seq_bytes(&l, 100));
    /* 32768 tokens: 2048 + 5 * 65 blocks in 512-token steps (18224640 bytes, flat 94371840);
     * decoding one token a step after a short prompt, 2048 + 5 * 33. */
    CHECK_EQ_INT(wk_kv_layout_seq_peak_bytes(&l, 32768, 512), 2373ull * 7680);
    CHECK_EQ_INT(wk_kv_layout_seq_peak_bytes(&l, 32768, 1), 2213ull * 7680);
    /* The bound is the simulated worst case over every alignment of the steps, and never below it. */
    const uint64_t chunks[4] = {1, 7, 100, 512};
    int tight = 0, below = 0;
    for (int k = 0; k < 4; k++) {
        uint64_t most = 0;
        for (uint64_t first = 1; first <= 16; first++) {
            uint64_t m = simulated_live(5000, 512, chunks[k], first, 16);
            if (m > most) most = m;
        }
        const uint64_t per_group = (wk_kv_layout_seq_peak_bytes(&l, 5000, chunks[k]) / l.bytes_per_block - 313) / 5;
        tight += most == per_group; /* 313 = ceil(5000 / 16) blocks of the full group */
        below += most <= per_group;
    }
    CHECK_EQ_INT(below, 4);
    CHECK_EQ_INT(tight, 4);

    /* A window as long as the context frees nothing: one group, as flat. So does a model without
     * sliding layers. Gemma 3 1B (26 layers, 4 full): groups of gcd(4, 22) = 2, 11 of them slide. */
    wk_kv_layer_groups(swa, 18, 4096, 4096, group_of, slot_of, &g);
    CHECK_EQ_INT(g.group_layers, 18);
    CHECK_EQ_INT(g.swa_groups, 0);
    CHECK_EQ_INT(slot_of[7], 7);
    bool none[18] = {false};
    wk_kv_layer_groups(none, 18, 512, 4096, group_of, slot_of, &g);
    CHECK_EQ_INT(g.group_layers, 18);
    CHECK_EQ_INT(g.swa_groups, 0);
    CHECK_EQ_INT(group_of[17], 0);
    for (int il = 0; il < 26; il++) swa[il] = il % 6 < 5;
    wk_kv_layer_groups(swa, 26, 512, 8192, group_of, slot_of, &g);
    CHECK_EQ_INT(g.group_layers, 2);
    CHECK_EQ_INT(g.swa_groups, 11);
    /* Groups that do not divide the layers are refused. */
    wk_kv_geom bad = {.n_layer = 18, .n_head_kv = 1, .head_dim = 256, .block_tokens = 16, .group_layers = 4};
    CHECK_EQ_INT(wk_kv_layout_get(&bad, &q2, &l), WK_ERR_INVALID);
}

static void test_layouts(void) {
    wk_kv_layout l;
    /* f16: 18 layers * (K,V) * 1 head * 16 tokens * 256 dims * 2 bytes. */
    wk_kv_fmt f16 = {16, WK_KVQ_QUEST, 0, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &f16, &l), WK_OK);
    CHECK_EQ_INT(l.bytes_per_block, 18 * 2 * 256 * 2 * 16);
    CHECK_EQ_INT(l.bytes_per_block, 294912);
    CHECK_EQ_INT(l.slab_bytes, 8192);
    CHECK_NEAR(wk_kv_layout_bits_per_element(&l, 0), 16.0, 0);
    CHECK_NEAR(wk_kv_layout_bits_per_element(&l, 2048), 16.0, 0);
    CHECK_NEAR(wk_kv_layout_bytes_per_token(&l, 2048), 18432.0, 0); /* 294912 / 16 */
    /* 256 MiB of 2048-token sequences: 128 blocks = 37748736 bytes each -> 7 (7.11). */
    CHECK_EQ_INT(wk_kv_layout_seqs_fit(&l, 256ull << 20, 2048, 512), 7);

    /* 2-bit QuEST, G = 32, by hand. Per token and head vector: 256 codes * 2 bits = 64 bytes of
     * codes, 256/32 = 8 groups * one f16 step = 16 bytes; 80 bytes. Slab = 16 tokens * 80 = 1280;
     * block = 18 layers * 2 (K,V) * 1 head * 1280 = 46080. Bits/element = 80*8/256 = 2.5. */
    wk_kv_fmt q2 = {2, WK_KVQ_QUEST, 32, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &q2, &l), WK_OK);
    CHECK_EQ_INT(l.slab_bytes, 1280);
    CHECK_EQ_INT(l.q.params_offset, 1024); /* 16 tokens * 64 code bytes */
    CHECK_EQ_INT(l.bytes_per_block, 46080);
    CHECK_NEAR(l.block_bits_per_element, 2.5, 0);
    CHECK_NEAR(wk_kv_layout_bits_per_element(&l, 2048), 2.5, 0);
    CHECK_NEAR(wk_kv_layout_bytes_per_token(&l, 2048), 2880.0, 0); /* 46080 / 16: 6.4x less than f16 */
    /* 128 blocks * 46080 = 5898240 per sequence: 268435456 / 5898240 = 45.5 -> 45. */
    CHECK_EQ_INT(wk_kv_layout_seq_bytes(&l, 2048), 5898240);
    CHECK_EQ_INT(wk_kv_layout_seqs_fit(&l, 256ull << 20, 2048, 512), 45);
    /* A partial last block is held whole and counted: 2040 tokens still take 128 blocks. */
    CHECK_EQ_INT(wk_kv_layout_seq_bytes(&l, 2040), 5898240);
    CHECK_NEAR(wk_kv_layout_bits_per_element(&l, 2040), 5898240.0 * 8 / (2040.0 * 9216), 1e-12);

    /* 2-bit percentile G32: two f16 per group (scale, min): 64 + 8*2*2 = 96 bytes/token/head;
     * slab 1536, block 55296, 3 bits/element. */
    wk_kv_fmt p2 = {2, WK_KVQ_PERCENTILE, 32, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &p2, &l), WK_OK);
    CHECK_EQ_INT(l.bytes_per_block, 55296);
    CHECK_NEAR(wk_kv_layout_bits_per_element(&l, 0), 3.0, 0);
    /* 3-bit absmax G64: 96 code bytes + 4 groups * 2 = 104 bytes; slab 1664; block 59904; 3.25. */
    wk_kv_fmt a3 = {3, WK_KVQ_ABSMAX, 64, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &a3, &l), WK_OK);
    CHECK_EQ_INT(l.bytes_per_block, 59904);
    CHECK_NEAR(wk_kv_layout_bits_per_element(&l, 0), 3.25, 0);

    /* f16 windows, 2-bit QuEST G32, sink 4, recent 64: each sequence also holds 68 f16 rows of
     * 18*2*256*2 = 18432 bytes = 1253376 bytes. At 2048 tokens: 5898240 + 1253376 = 7151616
     * bytes = 3492 bytes/token; bits/element = 2.5 + 68*16/2048 = 3.03125 exactly; 256 MiB holds
     * 268435456 / 7151616 = 37.5 -> 37 sequences. */
    wk_kv_fmt w2 = {2, WK_KVQ_QUEST, 32, 4, 64};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &w2, &l), WK_OK);
    CHECK_EQ_INT(l.f16_row_bytes, 18432);
    CHECK_EQ_INT(l.window_bytes, 1253376);
    CHECK_EQ_INT(wk_kv_layout_seq_bytes(&l, 2048), 7151616);
    CHECK_NEAR(wk_kv_layout_bits_per_element(&l, 2048), 3.03125, 0);
    CHECK_NEAR(wk_kv_layout_bytes_per_token(&l, 2048), 3492.0, 0);
    CHECK_EQ_INT(wk_kv_layout_seqs_fit(&l, 256ull << 20, 2048, 512), 37);
    CHECK_NEAR(l.block_bits_per_element, 2.5, 0); /* the windows are not hidden in the block figure */

    /* Block bits/element equals kv_quant.h's per-group figure for every format (they must agree). */
    const wk_kvq_kind kinds[3] = {WK_KVQ_QUEST, WK_KVQ_PERCENTILE, WK_KVQ_ABSMAX};
    for (int k = 0; k < 3; k++)
        for (int b = 2; b <= 4; b++)
            for (int G = 16; G <= 256; G *= 2) {
                wk_kv_fmt f = {b, kinds[k], G, 0, 0};
                CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &f, &l), WK_OK);
                CHECK_NEAR(l.block_bits_per_element, wk_kvq_bits_per_element(kinds[k], b, G), 1e-12);
                CHECK_EQ_INT(l.slab_bytes, 16 * 256 / G * wk_kvq_group_bytes(kinds[k], b, G));
            }

    /* Refusals. */
    wk_kv_fmt f16w = {16, WK_KVQ_QUEST, 0, 4, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &f16w, &l), WK_ERR_INVALID); /* windows on f16 */
    wk_kv_geom d48 = {.n_layer = 2, .n_head_kv = 1, .head_dim = 48, .block_tokens = 16};
    CHECK_EQ_INT(wk_kv_layout_get(&d48, &q2, &l), WK_ERR_INVALID); /* 48 % 32 */
    test_layer_groups();
    wk_kv_geom bt1 = {.n_layer = 2, .n_head_kv = 1, .head_dim = 256, .block_tokens = 1};
    wk_kv_fmt q2g256 = {2, WK_KVQ_QUEST, 256, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&bt1, &q2g256, &l), WK_ERR_INVALID); /* 64 + 2 bytes: not u32 words */
    wk_kv_fmt bad = {5, WK_KVQ_QUEST, 32, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &bad, &l), WK_ERR_INVALID);
    /* Default block size. */
    wk_kv_geom g0 = {.n_layer = 18, .n_head_kv = 1, .head_dim = 256, .block_tokens = 0};
    CHECK_EQ_INT(wk_kv_layout_get(&g0, &f16, &l), WK_OK);
    CHECK_EQ_INT(l.block_tokens, 16);
}

static wk_kv_pool *make_pool(uint32_t bt, uint64_t bpb, uint64_t n_blocks, uint64_t window, uint32_t max_seqs,
                             uint32_t sink, uint32_t recent) {
    wk_kv_pool_params p = {bt, bpb, n_blocks * bpb + (uint64_t)max_seqs * window, window, sink, recent, max_seqs};
    wk_kv_pool *pool = NULL;
    int rc = wk_kv_pool_create(&p, &pool);
    CHECK_EQ_INT(rc, WK_OK);
    return pool;
}

static void test_create(void) {
    wk_kv_pool *pool = NULL;
    wk_kv_pool_params p = {16, 46080, 10 * 46080 + 46079, 0, 0, 0, 0};
    CHECK_EQ_INT(wk_kv_pool_create(&p, &pool), WK_OK);
    CHECK_EQ_INT(wk_kv_pool_n_blocks(pool), 10); /* budget / bpb, rounded down */
    CHECK_EQ_INT(wk_kv_pool_device_bytes(pool), 10 * 46080);
    CHECK_EQ_INT(wk_kv_pool_block_offset(pool, 7), 7 * 46080);
    wk_kv_pool_destroy(pool);
    p.budget_bytes = 46079;
    CHECK_EQ_INT(wk_kv_pool_create(&p, &pool), WK_ERR_INVALID); /* 0 blocks */
    CHECK(pool == NULL);
    p.budget_bytes = 1 << 20;
    p.bytes_per_block = 46082;
    CHECK_EQ_INT(wk_kv_pool_create(&p, &pool), WK_ERR_INVALID); /* not u32 words */
    p.bytes_per_block = 46080;
    p.window_bytes = 1000;
    CHECK_EQ_INT(wk_kv_pool_create(&p, &pool), WK_ERR_INVALID); /* windows need max_seqs */
    p.max_seqs = 2000;
    CHECK_EQ_INT(wk_kv_pool_create(&p, &pool), WK_ERR_INVALID); /* windows alone exceed the budget */
    /* From a layout: windows come out of the budget first. */
    wk_kv_layout l;
    wk_kv_fmt w2 = {2, WK_KVQ_QUEST, 32, 4, 64};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &w2, &l), WK_OK);
    wk_kv_pool_params_from_layout(&l, 256ull << 20, 8, &p);
    CHECK_EQ_INT(wk_kv_pool_create(&p, &pool), WK_OK);
    CHECK_EQ_INT(wk_kv_pool_n_blocks(pool), ((256ull << 20) - 8 * 1253376ull) / 46080); /* 5607 */
    CHECK_EQ_INT(wk_kv_pool_window_offset(pool, 3), 5607ull * 46080 + 3 * 1253376ull);
    CHECK(wk_kv_pool_device_bytes(pool) <= 256ull << 20);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_pool_destroy(pool);
    CHECK(strcmp(wk_kv_pool_strerror(WK_ERR_KV_EXHAUSTED), "KV pool exhausted") == 0);
    CHECK(strcmp(wk_kv_pool_strerror(WK_ERR_CONTEXT_FULL), "context full") == 0);
}

static void snapshot(const wk_kv_seq *s, uint32_t *table, uint32_t *nb, uint32_t *nt) {
    *nb = s->n_blocks;
    *nt = s->n_tokens;
    if (s->n_blocks) memcpy(table, s->table, s->n_blocks * sizeof *table);
}
static int same(const wk_kv_seq *s, const uint32_t *table, uint32_t nb, uint32_t nt) {
    return s->n_blocks == nb && s->n_tokens == nt && (nb == 0 || memcmp(table, s->table, nb * sizeof *table) == 0);
}
static int same_stats(const wk_kv_pool_stats *a, const wk_kv_pool_stats *b) { return memcmp(a, b, sizeof *a) == 0; }

static void test_alloc_and_exhaustion(void) {
    const uint64_t BPB = 46080;
    wk_kv_pool *pool = make_pool(16, BPB, 10, 0, 0, 0, 0);
    int st;
    wk_kv_seq *a = wk_kv_seq_create(pool, 1000, &st);
    CHECK_EQ_INT(st, WK_OK);
    CHECK_EQ_INT(a->max_blocks, 63); /* ceil(1000/16) */
    CHECK_EQ_INT(wk_kv_seq_reserve(a, 1), WK_OK);
    CHECK_EQ_INT(a->n_blocks, 1);
    CHECK_EQ_INT(a->table[0], 0); /* LIFO stack starts at block 0 */
    CHECK_EQ_INT(wk_kv_seq_reserve(a, 16), WK_OK); /* relative to n_tokens (0): still 1 block */
    CHECK_EQ_INT(a->n_blocks, 1);
    CHECK_EQ_INT(wk_kv_seq_reserve(a, 17), WK_OK); /* 17 tokens -> 2 blocks */
    CHECK_EQ_INT(a->n_blocks, 2);
    CHECK_EQ_INT(wk_kv_seq_reserve(a, 0), WK_OK);
    CHECK_EQ_INT(a->n_blocks, 2);
    CHECK_EQ_INT(wk_kv_seq_advance(a, 33), WK_ERR_INVALID); /* beyond capacity 32 */
    CHECK_EQ_INT(wk_kv_seq_advance(a, 20), WK_OK);
    CHECK_EQ_INT(a->n_tokens, 20);
    CHECK_EQ_INT(wk_kv_seq_bytes(a), 2 * BPB);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(a), 2 * BPB);
    CHECK_EQ_INT(wk_kv_seq_reserve(a, 100), WK_OK); /* 120 tokens -> 8 blocks */
    CHECK_EQ_INT(a->n_blocks, 8);
    wk_kv_pool_stats s0, s1;
    wk_kv_pool_get_stats(pool, &s0);
    CHECK_EQ_INT(s0.used_blocks, 8);
    CHECK_EQ_INT(s0.free_blocks, 2);
    CHECK_EQ_INT(s0.used_bytes, 8 * BPB);
    CHECK_EQ_INT(s0.free_bytes, 2 * BPB);
    CHECK_EQ_INT(s0.peak_used_blocks, 8);

    /* Exhaustion is all-or-nothing: 3 blocks wanted, 2 free -> nothing taken. */
    wk_kv_seq *b = wk_kv_seq_create(pool, 1000, &st);
    uint32_t tb[64], nb, nt;
    CHECK_EQ_INT(wk_kv_seq_reserve(b, 16), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_advance(b, 16), WK_OK);
    wk_kv_pool_get_stats(pool, &s0);
    snapshot(b, tb, &nb, &nt);
    CHECK_EQ_INT(s0.free_blocks, 1);
    CHECK_EQ_INT(wk_kv_seq_reserve(b, 33), WK_ERR_KV_EXHAUSTED); /* 49 tokens: 4 blocks, 3 more */
    wk_kv_pool_get_stats(pool, &s1);
    CHECK(same(b, tb, nb, nt));
    CHECK(same_stats(&s0, &s1));
    CHECK_EQ_INT(wk_kv_seq_reserve(b, 17), WK_ERR_KV_EXHAUSTED); /* 2 more wanted, 1 free */
    wk_kv_pool_get_stats(pool, &s1);
    CHECK(same(b, tb, nb, nt));
    CHECK(same_stats(&s0, &s1));
    CHECK_EQ_INT(wk_kv_seq_reserve(b, 16), WK_OK); /* 32 tokens: exactly the last free block */
    wk_kv_pool_get_stats(pool, &s1);
    CHECK_EQ_INT(s1.free_blocks, 0);
    CHECK_EQ_INT(s1.free_bytes, 0);
    CHECK_EQ_INT(s1.used_bytes, 10 * BPB);
    CHECK_EQ_INT(wk_kv_seq_reserve(b, 16), WK_OK); /* within the reserved blocks: takes nothing */
    CHECK_EQ_INT(wk_kv_seq_reserve(b, 17), WK_ERR_KV_EXHAUSTED);
    /* Past max_tokens is a different failure. */
    wk_kv_seq *c = wk_kv_seq_create(pool, 20, &st);
    CHECK_EQ_INT(wk_kv_seq_reserve(c, 33), WK_ERR_CONTEXT_FULL);
    CHECK_EQ_INT(c->n_blocks, 0);
    CHECK(wk_kv_seq_create(pool, 0, &st) == NULL);
    CHECK_EQ_INT(st, WK_ERR_INVALID);
    CHECK_EQ_INT(check_ok(pool), WK_OK);

    /* Truncate returns reserved and surplus blocks; the freed blocks come back LIFO. */
    uint32_t last = a->table[7];
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 21), WK_ERR_INVALID); /* longer than it is */
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 17), WK_OK);
    CHECK_EQ_INT(a->n_blocks, 2);
    CHECK_EQ_INT(a->n_tokens, 17);
    wk_kv_pool_get_stats(pool, &s1);
    CHECK_EQ_INT(s1.free_blocks, 6);
    CHECK_EQ_INT(s1.peak_used_blocks, 10);
    CHECK_EQ_INT(s1.peak_used_bytes, 10 * BPB);
    CHECK_EQ_INT(last, 7);
    CHECK_EQ_INT(wk_kv_seq_reserve(c, 1), WK_OK);
    CHECK_EQ_INT(c->table[0], 2); /* LIFO: blocks 7..2 were freed last-first, 2 last */
    wk_kv_pool_reset_peak(pool);
    wk_kv_pool_get_stats(pool, &s1);
    CHECK_EQ_INT(s1.peak_used_blocks, s1.used_blocks);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_seq_release(a);
    CHECK_EQ_INT(a->n_blocks, 0);
    CHECK_EQ_INT(wk_kv_seq_bytes(a), 0);
    wk_kv_seq_destroy(b);
    wk_kv_seq_destroy(c);
    wk_kv_pool_get_stats(pool, &s1);
    CHECK_EQ_INT(s1.used_blocks, 0);
    CHECK_EQ_INT(s1.used_bytes, 0);
    CHECK_EQ_INT(s1.n_seqs, 1);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_pool_destroy(pool); /* frees `a` too (ASan's leak check would see otherwise) */
}

static void test_share_cow(void) {
    const uint64_t BPB = 294912;
    wk_kv_pool *pool = make_pool(16, BPB, 8, 0, 0, 0, 0);
    int st;
    wk_kv_seq *a = wk_kv_seq_create(pool, 256, &st);
    wk_kv_copy cp;
    CHECK_EQ_INT(wk_kv_seq_prepare_write(a, 40, &cp), WK_OK);
    CHECK_EQ_INT(cp.bytes, 0);
    CHECK_EQ_INT(wk_kv_seq_advance(a, 40), WK_OK); /* blocks 0,1 full, 2 holds 8 tokens */

    wk_kv_seq *b = wk_kv_seq_fork(a, 40, 256, &cp, &st);
    CHECK_EQ_INT(st, WK_OK);
    CHECK_EQ_INT(cp.bytes, 0); /* no windows */
    CHECK_EQ_INT(b->n_tokens, 40);
    CHECK_EQ_INT(b->n_blocks, 3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(b->table[i], a->table[i]);
        CHECK_EQ_INT(wk_kv_pool_refcount(pool, a->table[i]), 2);
    }
    wk_kv_pool_stats s;
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.used_blocks, 3); /* shared: held once by the pool */
    CHECK_EQ_INT(s.used_bytes, 3 * BPB);
    CHECK_EQ_INT(s.shared_blocks, 3);
    CHECK_EQ_INT(wk_kv_seq_bytes(a), 3 * BPB); /* each holder counts them */
    CHECK_EQ_INT(wk_kv_seq_bytes(b), 3 * BPB);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(a), 0);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(b), 0);
    CHECK_EQ_INT(check_ok(pool), WK_OK);

    /* Writing into the shared partial block without copy-on-write is refused. */
    CHECK_EQ_INT(wk_kv_seq_reserve(a, 1), WK_OK); /* fits in block 2: takes nothing */
    CHECK_EQ_INT(wk_kv_seq_advance(a, 1), WK_ERR_INVALID);
    CHECK_EQ_INT(a->n_tokens, 40);
    /* cow: a gets a fresh block for index 2 and must copy the old one into it. */
    uint32_t shared2 = a->table[2];
    CHECK_EQ_INT(wk_kv_seq_cow(a, &cp), WK_OK);
    CHECK_EQ_INT(cp.src_block, shared2);
    CHECK(cp.dst_block != shared2);
    CHECK_EQ_INT(cp.dst_block, a->table[2]);
    CHECK_EQ_INT(cp.src_offset, (uint64_t)shared2 * BPB);
    CHECK_EQ_INT(cp.dst_offset, (uint64_t)cp.dst_block * BPB);
    CHECK_EQ_INT(cp.bytes, BPB);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, shared2), 1); /* b alone now: b writes in place */
    CHECK_EQ_INT(wk_kv_seq_cow(a, &cp), WK_OK);
    CHECK_EQ_INT(cp.bytes, 0); /* already private */
    CHECK_EQ_INT(wk_kv_seq_advance(a, 1), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_cow(b, &cp), WK_OK);
    CHECK_EQ_INT(cp.bytes, 0);
    CHECK_EQ_INT(wk_kv_seq_prepare_write(b, 1, &cp), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_advance(b, 1), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(a), BPB);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(b), BPB);
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.used_blocks, 4);
    /* Exact: used = sum of unique + shared blocks once. */
    CHECK_EQ_INT(s.used_bytes, wk_kv_seq_unique_bytes(a) + wk_kv_seq_unique_bytes(b) + 2 * BPB);
    CHECK_EQ_INT(check_ok(pool), WK_OK);

    /* Truncating back into a shared full block makes it the write block: cow again. */
    CHECK_EQ_INT(wk_kv_seq_truncate(b, 20), WK_OK); /* b keeps blocks 0, 1 (1 shared, now partial) */
    CHECK_EQ_INT(b->n_blocks, 2);
    CHECK_EQ_INT(wk_kv_seq_reserve(b, 4), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_advance(b, 4), WK_ERR_INVALID);
    /* prepare_write = cow + reserve, all-or-nothing. Fill the pool so only one block is free. */
    wk_kv_seq *filler = wk_kv_seq_create(pool, 256, &st);
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(wk_kv_seq_reserve(filler, (s.free_blocks - 1) * 16), WK_OK);
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.free_blocks, 1);
    uint32_t tb[16], nb, nt;
    snapshot(b, tb, &nb, &nt);
    wk_kv_pool_stats s0, s1;
    wk_kv_pool_get_stats(pool, &s0);
    CHECK_EQ_INT(wk_kv_seq_prepare_write(b, 20, &cp), WK_ERR_KV_EXHAUSTED); /* cow 1 + 1 new block */
    CHECK_EQ_INT(cp.bytes, 0);
    wk_kv_pool_get_stats(pool, &s1);
    CHECK(same(b, tb, nb, nt));
    CHECK(same_stats(&s0, &s1));
    CHECK_EQ_INT(wk_kv_seq_prepare_write(b, 12, &cp), WK_OK); /* cow only: 20 + 12 fits block 1 */
    CHECK_EQ_INT(cp.bytes, BPB);
    CHECK_EQ_INT(wk_kv_seq_advance(b, 12), WK_OK);
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.free_blocks, 0);
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 20), WK_OK); /* a: blocks 0 (shared with b), 1 (a's alone now) */
    CHECK_EQ_INT(wk_kv_seq_cow(a, &cp), WK_OK);
    CHECK_EQ_INT(cp.bytes, 0); /* b copied away from it, so a writes in place */
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 10), WK_OK); /* now the write block is 0, shared with b */
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.free_blocks, 2); /* a's blocks 1 and its cow copy came back */
    CHECK_EQ_INT(wk_kv_seq_reserve(filler, 96), WK_OK); /* 6 blocks: takes the last 2 */
    wk_kv_pool_get_stats(pool, &s0);
    CHECK_EQ_INT(s0.free_blocks, 0);
    CHECK_EQ_INT(wk_kv_seq_cow(a, &cp), WK_ERR_KV_EXHAUSTED); /* needed, but no block free */
    wk_kv_pool_get_stats(pool, &s1);
    CHECK(same_stats(&s0, &s1));
    CHECK_EQ_INT(check_ok(pool), WK_OK);

    /* External references (a future prefix cache) and adopting a shared full block. */
    wk_kv_seq_destroy(filler);
    uint32_t blk0 = b->table[0];
    CHECK_EQ_INT(wk_kv_pool_share(pool, blk0), WK_OK);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, blk0), 3); /* a, b, external */
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.external_refs, 1);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_seq_destroy(a);
    wk_kv_seq_destroy(b);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, blk0), 1); /* the external holder keeps it alive */
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.used_blocks, 1);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_seq *c = wk_kv_seq_create(pool, 64, &st);
    CHECK_EQ_INT(wk_kv_seq_append_shared(c, blk0), WK_OK);
    CHECK_EQ_INT(c->n_tokens, 16);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, blk0), 2);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(c), 0);
    CHECK_EQ_INT(wk_kv_seq_prepare_write(c, 1, &cp), WK_OK); /* next block is fresh: no copy */
    CHECK_EQ_INT(cp.bytes, 0);
    CHECK_EQ_INT(wk_kv_seq_append_shared(c, blk0), WK_ERR_INVALID); /* reserved block in the way */
    CHECK_EQ_INT(wk_kv_pool_share(pool, 7777), WK_ERR_INVALID);
    wk_kv_pool_get_stats(pool, &s);
    uint32_t some_free = 0;
    while (wk_kv_pool_refcount(pool, some_free) != 0) some_free++;
    CHECK_EQ_INT(wk_kv_pool_share(pool, some_free), WK_ERR_INVALID); /* free blocks can't be shared */
    CHECK_EQ_INT(wk_kv_pool_unshare(pool, c->table[1]), WK_ERR_INVALID); /* no external ref */
    CHECK_EQ_INT(wk_kv_pool_unshare(pool, blk0), WK_OK);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, blk0), 1);
    CHECK_EQ_INT(wk_kv_pool_unshare(pool, blk0), WK_ERR_INVALID);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_seq_destroy(c);
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.used_blocks, 0);
    CHECK_EQ_INT(s.free_blocks, 8);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_pool_destroy(pool);
}

static void test_windows(void) {
    /* Tiny geometry, real layout: 1 layer, 1 head, D 32, 2-bit QuEST G32, sink 2, recent 4. */
    wk_kv_geom g = {.n_layer = 1, .n_head_kv = 1, .head_dim = 32, .block_tokens = 4};
    wk_kv_fmt f = {2, WK_KVQ_QUEST, 32, 2, 4};
    wk_kv_layout l;
    CHECK_EQ_INT(wk_kv_layout_get(&g, &f, &l), WK_OK);
    CHECK_EQ_INT(l.slab_bytes, 4 * (8 + 2)); /* 4 tokens * (32*2/8 code bytes + one f16) */
    CHECK_EQ_INT(l.bytes_per_block, 80);
    CHECK_EQ_INT(l.f16_row_bytes, 128);
    CHECK_EQ_INT(l.window_bytes, 6 * 128);
    wk_kv_pool_params p;
    wk_kv_pool_params_from_layout(&l, 2 * 768 + 10 * 80 + 79, 2, &p);
    wk_kv_pool *pool = NULL;
    CHECK_EQ_INT(wk_kv_pool_create(&p, &pool), WK_OK);
    CHECK_EQ_INT(wk_kv_pool_n_blocks(pool), 10);
    int st;
    wk_kv_seq *a = wk_kv_seq_create(pool, 100, &st);
    wk_kv_seq *b = wk_kv_seq_create(pool, 100, &st);
    CHECK(a && b);
    CHECK(wk_kv_seq_create(pool, 100, &st) == NULL);
    CHECK_EQ_INT(st, WK_ERR_KV_EXHAUSTED); /* no window slot left */
    CHECK_EQ_INT(wk_kv_seq_bytes(a), 768); /* an empty sequence already holds its window */
    wk_kv_pool_stats s;
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.used_windows, 2);
    CHECK_EQ_INT(s.used_bytes, 2 * 768);
    CHECK_EQ_INT(s.capacity_bytes, 10 * 80 + 2 * 768);
    CHECK(a->window_slot != b->window_slot);
    wk_kv_copy cp;
    CHECK_EQ_INT(wk_kv_seq_prepare_write(a, 20, &cp), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_advance(a, 20), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_bytes(a), 5 * 80 + 768);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(a), 5 * 80 + 768);
    wk_kv_seq_destroy(b);
    /* Fork at the end: the window slab must be copied. */
    b = wk_kv_seq_fork(a, 20, 100, &cp, &st);
    CHECK_EQ_INT(st, WK_OK);
    CHECK_EQ_INT(cp.bytes, 768);
    CHECK_EQ_INT(cp.src_offset, wk_kv_pool_window_offset(pool, a->window_slot));
    CHECK_EQ_INT(cp.dst_offset, wk_kv_pool_window_offset(pool, b->window_slot));
    CHECK_EQ_INT(cp.src_offset, 800 + 768 * (uint64_t)a->window_slot);
    CHECK_EQ_INT(cp.src_block, WK_KV_NO_BLOCK);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(a), 768); /* all 5 blocks shared; the window is its own */
    /* Ring (recent 4, sink 2): a holds positions 0..19; the ring rows hold 16..19. A 19-token
     * sequence's next query reads f16 keys 16..18: still there. An 18-token one needs 15..17, and
     * 15 was overwritten by 19: refused, nothing changed. */
    wk_kv_seq_destroy(b);
    b = wk_kv_seq_fork(a, 18, 100, &cp, &st);
    CHECK(b == NULL);
    CHECK_EQ_INT(st, WK_ERR_UNSUPPORTED);
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 18), WK_ERR_UNSUPPORTED);
    CHECK_EQ_INT(a->n_tokens, 20);
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 19), WK_OK);
    /* A 3-token sequence's next query reads position 2 from the ring, long overwritten (by 6, 10,
     * .., 18): refused. At 2 tokens everything it reads is in the sink rows. */
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 3), WK_ERR_UNSUPPORTED);
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 2), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 0), WK_OK);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_pool_destroy(pool);
}

/* Sliding-window release: exactly the blocks wholly below min(pos, n_tokens) go back, LIFO; the
 * write block and reserved blocks never do; a shared block only loses one reference; a sliding
 * sequence refuses to be cut back or forked short, and release makes it a fresh sequence. */
static void test_drop_before(void) {
    const uint64_t BPB = 64;
    wk_kv_pool *pool = make_pool(4, BPB, 8, 0, 0, 0, 0);
    int st;
    wk_kv_copy cp;
    wk_kv_pool_stats s, s0, s1;
    wk_kv_seq *a = wk_kv_seq_create(pool, 100, &st);
    CHECK_EQ_INT(wk_kv_seq_prepare_write(a, 18, &cp), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_advance(a, 18), WK_OK); /* blocks 0..4; block 4 holds tokens 16, 17 */
    for (uint32_t i = 0; i < 5; i++) CHECK_EQ_INT(a->table[i], i);
    CHECK_EQ_INT(a->first_live, 0);
    CHECK_EQ_INT(wk_kv_seq_drop_before(a, 0), 0);
    CHECK_EQ_INT(wk_kv_seq_drop_before(a, 3), 0); /* block 0 still holds position 3 */
    CHECK_EQ_INT(a->first_live, 0);
    CHECK_EQ_INT(wk_kv_seq_drop_before(a, 4), 1); /* tokens 0..3 are all below 4 */
    CHECK_EQ_INT(a->first_live, 1);
    CHECK_EQ_INT(a->table[0], WK_KV_NO_BLOCK);
    CHECK_EQ_INT(a->n_blocks, 5); /* the table keeps its length: table[i] still means tokens 4i.. */
    CHECK_EQ_INT(a->table[1], 1);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, 0), 0);
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.used_blocks, 4);
    CHECK_EQ_INT(s.free_blocks, 4);
    CHECK_EQ_INT(s.used_bytes, 4 * BPB);
    CHECK_EQ_INT(s.peak_used_blocks, 5);
    CHECK_EQ_INT(wk_kv_seq_bytes(a), 4 * BPB);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(a), 4 * BPB);
    CHECK_EQ_INT(wk_kv_seq_drop_before(a, 4), 0); /* idempotent */
    CHECK_EQ_INT(wk_kv_seq_drop_before(a, 2), 0); /* and a lower bound takes nothing back */
    CHECK_EQ_INT(a->first_live, 1);
    CHECK_EQ_INT(wk_kv_seq_drop_before(a, 11), 1); /* block 1 (4..7); block 2 still holds 11 */
    CHECK_EQ_INT(a->table[1], WK_KV_NO_BLOCK);
    CHECK_EQ_INT(a->table[2], 2);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    /* Past n_tokens (18) it clamps to n_tokens: blocks 2 and 3 go; block 4, holding 16, 17 and the
     * next write position 18, stays. */
    CHECK_EQ_INT(wk_kv_seq_drop_before(a, 1000), 2);
    CHECK_EQ_INT(a->first_live, 4);
    CHECK_EQ_INT(a->table[2], WK_KV_NO_BLOCK);
    CHECK_EQ_INT(a->table[3], WK_KV_NO_BLOCK);
    CHECK_EQ_INT(a->table[4], 4);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, 4), 1);
    CHECK_EQ_INT(wk_kv_seq_bytes(a), BPB);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(a), BPB);
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.used_blocks, 1);
    CHECK_EQ_INT(s.free_blocks, 7);
    CHECK_EQ_INT(s.used_bytes, BPB);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    /* Writing goes on in block 4, then a fresh block: LIFO hands out 3, the last one freed (they
     * went back in table order 0, 1, 2, 3). */
    CHECK_EQ_INT(wk_kv_seq_prepare_write(a, 6, &cp), WK_OK); /* 18..23 */
    CHECK_EQ_INT(cp.bytes, 0);
    CHECK_EQ_INT(a->n_blocks, 6);
    CHECK_EQ_INT(a->table[5], 3);
    CHECK_EQ_INT(wk_kv_seq_advance(a, 6), WK_OK);
    /* On a block boundary (24) every block is below n_tokens: all go; the write block (index 6) is
     * not in the table yet. */
    CHECK_EQ_INT(wk_kv_seq_drop_before(a, 24), 2);
    CHECK_EQ_INT(a->first_live, 6);
    CHECK_EQ_INT(a->n_blocks, 6);
    CHECK_EQ_INT(wk_kv_seq_bytes(a), 0);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_prepare_write(a, 1, &cp), WK_OK);
    CHECK_EQ_INT(a->table[6], 3); /* 4, then 3 were freed: 3 on top again */
    CHECK_EQ_INT(wk_kv_seq_advance(a, 1), WK_OK); /* 25 tokens */
    CHECK_EQ_INT(wk_kv_seq_reserve(a, 8), WK_OK);  /* 33 tokens: blocks 7, 8 reserved */
    CHECK_EQ_INT(a->n_blocks, 9);
    CHECK_EQ_INT(wk_kv_seq_drop_before(a, 1000), 0); /* reserved blocks are past n_tokens */
    CHECK_EQ_INT(wk_kv_seq_bytes(a), 3 * BPB);

    /* A sliding sequence cannot be cut back or forked short; nothing changes. */
    uint32_t tb[16], nb, nt;
    snapshot(a, tb, &nb, &nt);
    wk_kv_pool_get_stats(pool, &s0);
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 24), WK_ERR_UNSUPPORTED);
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 1), WK_ERR_UNSUPPORTED);
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 26), WK_ERR_INVALID);
    /* ... unless the caller's window says the next query sees no dropped block: the query at 24
     * in a window of 1 reads only position 24 (block 6, live); with 2 also 23 (block 5, dropped). */
    CHECK(wk_kv_seq_can_truncate(a, 24, 1));
    CHECK(!wk_kv_seq_can_truncate(a, 24, 2));
    CHECK(!wk_kv_seq_can_truncate(a, 24, 0));
    CHECK(wk_kv_seq_can_truncate(a, 25, 0) && wk_kv_seq_can_truncate(a, 0, 0));
    CHECK(!wk_kv_seq_can_truncate(a, 26, 1));
    CHECK_EQ_INT(wk_kv_seq_truncate_window(a, 24, 2), WK_ERR_UNSUPPORTED);
    CHECK_EQ_INT(wk_kv_seq_truncate_window(a, 26, 1), WK_ERR_INVALID);
    CHECK(wk_kv_seq_fork(a, 24, 100, &cp, &st) == NULL);
    CHECK_EQ_INT(st, WK_ERR_UNSUPPORTED);
    CHECK(wk_kv_seq_fork(a, 0, 100, &cp, &st) == NULL);
    CHECK_EQ_INT(st, WK_ERR_UNSUPPORTED);
    wk_kv_pool_get_stats(pool, &s1);
    CHECK(same(a, tb, nb, nt));
    CHECK_EQ_INT(a->first_live, 6);
    CHECK(same_stats(&s0, &s1));
    /* Truncating to its own length still gives the reserved blocks back. */
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 25), WK_OK);
    CHECK_EQ_INT(a->n_blocks, 7);
    CHECK_EQ_INT(a->first_live, 6);
    CHECK_EQ_INT(wk_kv_seq_bytes(a), BPB);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    /* Forked whole: the fork copies the dropped prefix and shares the live block. */
    wk_kv_seq *b = wk_kv_seq_fork(a, 25, 100, &cp, &st);
    CHECK_EQ_INT(st, WK_OK);
    CHECK(b != NULL);
    CHECK_EQ_INT(b->first_live, 6);
    CHECK_EQ_INT(b->n_blocks, 7);
    CHECK_EQ_INT(b->n_tokens, 25);
    for (uint32_t i = 0; i < 6; i++) CHECK_EQ_INT(b->table[i], WK_KV_NO_BLOCK);
    CHECK_EQ_INT(b->table[6], a->table[6]);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, a->table[6]), 2);
    CHECK_EQ_INT(wk_kv_seq_bytes(b), BPB);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(b), 0);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    /* Its first write copies the shared block, which stays a's. */
    CHECK_EQ_INT(wk_kv_seq_prepare_write(b, 1, &cp), WK_OK);
    CHECK_EQ_INT(cp.src_block, a->table[6]);
    CHECK_EQ_INT(cp.bytes, BPB);
    CHECK_EQ_INT(wk_kv_seq_advance(b, 1), WK_OK);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, a->table[6]), 1);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_seq_destroy(b);

    /* Dropping a shared block in one holder: refcount 2 -> 1, it stays in use for the other. */
    wk_kv_seq *c = wk_kv_seq_create(pool, 100, &st);
    CHECK_EQ_INT(wk_kv_seq_prepare_write(c, 10, &cp), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_advance(c, 10), WK_OK);
    wk_kv_seq *d = wk_kv_seq_fork(c, 10, 100, &cp, &st);
    CHECK(d != NULL);
    uint32_t c0 = c->table[0], c1 = c->table[1], c2 = c->table[2];
    wk_kv_pool_get_stats(pool, &s0);
    CHECK_EQ_INT(s0.shared_blocks, 3);
    CHECK_EQ_INT(wk_kv_seq_drop_before(d, 8), 2);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, c0), 1);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, c1), 1);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, c2), 2);
    wk_kv_pool_get_stats(pool, &s1);
    CHECK_EQ_INT(s1.used_blocks, s0.used_blocks);
    CHECK_EQ_INT(s1.free_blocks, s0.free_blocks);
    CHECK_EQ_INT(s1.shared_blocks, 1);
    CHECK_EQ_INT(wk_kv_seq_bytes(d), BPB);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(d), 0);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(c), 2 * BPB);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_drop_before(c, 9), 2); /* now the last holder: both go back */
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, c0), 0);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, c1), 0);
    wk_kv_pool_get_stats(pool, &s1);
    CHECK_EQ_INT(s1.used_blocks, s0.used_blocks - 2);
    CHECK_EQ_INT(check_ok(pool), WK_OK);

    /* release: everything back, first_live 0, usable (and cut back) from position 0. */
    uint32_t a_live = a->table[6];
    wk_kv_seq_release(a);
    CHECK_EQ_INT(a->first_live, 0);
    CHECK_EQ_INT(a->n_blocks, 0);
    CHECK_EQ_INT(a->n_tokens, 0);
    CHECK_EQ_INT(wk_kv_seq_bytes(a), 0);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_prepare_write(a, 5, &cp), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_advance(a, 5), WK_OK);
    CHECK_EQ_INT(a->table[0], a_live); /* LIFO: its own block was the last freed, c1 before it */
    CHECK_EQ_INT(a->table[1], c1);
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 2), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_bytes(a), BPB);
    /* truncate(0) is release for a sliding sequence too. */
    CHECK_EQ_INT(wk_kv_seq_truncate(d, 0), WK_OK);
    CHECK_EQ_INT(d->first_live, 0);
    CHECK_EQ_INT(d->n_blocks, 0);
    CHECK_EQ_INT(wk_kv_pool_refcount(pool, c2), 1);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_pool_destroy(pool); /* with c still sliding: its dropped entries are no references */
}

/* A window-less sequence in a windowed pool: no slot, no window bytes, no ring, and max_seqs does
 * not limit it. */
static void test_windowless(void) {
    const uint64_t BPB = 64, WIN = 128;
    wk_kv_pool *pool = make_pool(4, BPB, 8, WIN, 1, 1, 2); /* one window slot; sink 1, recent 2 */
    int st;
    wk_kv_copy cp;
    wk_kv_pool_stats s;
    wk_kv_seq *w = wk_kv_seq_create(pool, 100, &st);
    CHECK(w != NULL);
    CHECK_EQ_INT(w->window_slot, 0);
    CHECK(wk_kv_seq_create_ex(pool, 100, true, &st) == NULL);
    CHECK_EQ_INT(st, WK_ERR_KV_EXHAUSTED);
    wk_kv_seq *n = wk_kv_seq_create_ex(pool, 100, false, &st);
    CHECK_EQ_INT(st, WK_OK);
    CHECK(n != NULL);
    CHECK_EQ_INT(n->window_slot, UINT32_MAX);
    CHECK_EQ_INT(wk_kv_seq_bytes(n), 0);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(n), 0);
    CHECK_EQ_INT(wk_kv_seq_bytes(w), WIN);
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.n_seqs, 2);
    CHECK_EQ_INT(s.used_windows, 1);
    CHECK_EQ_INT(s.used_bytes, WIN);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_prepare_write(n, 10, &cp), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_advance(n, 10), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_prepare_write(w, 10, &cp), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_advance(w, 10), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_bytes(n), 3 * BPB);
    CHECK_EQ_INT(wk_kv_seq_unique_bytes(n), 3 * BPB);
    CHECK_EQ_INT(wk_kv_seq_bytes(w), 3 * BPB + WIN);
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.used_bytes, 6 * BPB + WIN);
    /* w's ring (rows of 8, 9) lost what a 5-token sequence reads (4); n has no ring to lose. */
    CHECK(wk_kv_seq_fork(w, 5, 100, &cp, &st) == NULL);
    CHECK_EQ_INT(st, WK_ERR_UNSUPPORTED);
    wk_kv_seq *f = wk_kv_seq_fork(n, 5, 100, &cp, &st); /* even with every slot taken */
    CHECK_EQ_INT(st, WK_OK);
    CHECK(f != NULL);
    CHECK_EQ_INT(f->window_slot, UINT32_MAX);
    CHECK_EQ_INT(cp.bytes, 0); /* no window to copy */
    CHECK_EQ_INT(wk_kv_seq_bytes(f), 2 * BPB);
    CHECK_EQ_INT(wk_kv_seq_truncate(w, 5), WK_ERR_UNSUPPORTED);
    CHECK_EQ_INT(wk_kv_seq_truncate(n, 5), WK_OK);
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.n_seqs, 3);
    CHECK_EQ_INT(s.used_windows, 1);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_seq_destroy(n);
    wk_kv_seq_destroy(f);
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.used_windows, 1); /* theirs was never taken, so none comes back */
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_seq_destroy(w);
    wk_kv_pool_get_stats(pool, &s);
    CHECK_EQ_INT(s.used_windows, 0);
    CHECK_EQ_INT(s.used_bytes, 0);
    w = wk_kv_seq_create_ex(pool, 100, true, &st);
    CHECK(w != NULL);
    CHECK_EQ_INT(w->window_slot, 0);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_pool_destroy(pool);
}

/* The checker must be able to fail: corrupt a table and a token count through the public struct. */
static void test_checker_catches(void) {
    wk_kv_pool *pool = make_pool(16, 64, 6, 0, 0, 0, 0);
    int st;
    char err[256];
    wk_kv_seq *a = wk_kv_seq_create(pool, 200, &st);
    CHECK_EQ_INT(wk_kv_seq_reserve(a, 40), WK_OK);
    CHECK_EQ_INT(wk_kv_pool_check(pool, err, sizeof err), WK_OK);
    uint32_t keep = a->table[1];
    a->table[1] = a->table[0]; /* block 0 referenced twice with refcount 1; block `keep` leaks */
    CHECK_EQ_INT(wk_kv_pool_check(pool, err, sizeof err), WK_ERR_INVALID);
    CHECK(strstr(err, "refcount") != NULL);
    a->table[1] = 5; /* a free block in a table */
    CHECK_EQ_INT(wk_kv_pool_check(pool, err, sizeof err), WK_ERR_INVALID);
    a->table[1] = keep;
    a->n_tokens = 49; /* more tokens than 3 blocks hold */
    CHECK_EQ_INT(wk_kv_pool_check(pool, err, sizeof err), WK_ERR_INVALID);
    a->n_tokens = 0;
    a->n_blocks = 2; /* drops an entry without unref: a leak */
    CHECK_EQ_INT(wk_kv_pool_check(pool, err, sizeof err), WK_ERR_INVALID);
    a->n_blocks = 3;
    CHECK_EQ_INT(wk_kv_pool_check(pool, err, sizeof err), WK_OK);
    /* first_live: below it no block, from it on only blocks, and never past the write block. */
    a->n_tokens = 16;
    a->first_live = 1; /* entry 0 still names its block */
    CHECK_EQ_INT(wk_kv_pool_check(pool, err, sizeof err), WK_ERR_INVALID);
    CHECK(strstr(err, "below first_live") != NULL);
    a->first_live = 0;
    CHECK_EQ_INT(wk_kv_seq_drop_before(a, 16), 1);
    CHECK_EQ_INT(wk_kv_pool_check(pool, err, sizeof err), WK_OK);
    a->first_live = 0; /* a NO_BLOCK entry among the live ones */
    CHECK_EQ_INT(wk_kv_pool_check(pool, err, sizeof err), WK_ERR_INVALID);
    CHECK(strstr(err, "out of range") != NULL);
    a->first_live = 1;
    a->n_tokens = 3; /* the write block (0) would be a dropped one */
    CHECK_EQ_INT(wk_kv_pool_check(pool, err, sizeof err), WK_ERR_INVALID);
    CHECK(strstr(err, "first_live") != NULL);
    a->n_tokens = 16;
    CHECK_EQ_INT(wk_kv_pool_check(pool, err, sizeof err), WK_OK);
    wk_kv_pool_destroy(pool);
}

/* ---- random walk against a shadow of the pool memory ---- */

#define MAXS 12
#define MAXSTASH 16

typedef struct {
    wk_kv_seq *s;
    uint64_t *expect; /* value each committed position must read back; max_blocks * bt entries,
                       * since max_tokens rounds up to whole blocks */
    uint32_t max_tokens;
    uint32_t first_live; /* what drop_before, release, truncate(0) and fork should have made it */
    uint64_t *hashes;    /* the chain hash of each full block (max_blocks entries), as the engine keeps */
    uint32_t n_hashed;   /* blocks [0, n_hashed) have one */
} shadow_seq;

/* A released sequence's hash chain and the contents each block held: what a later hit must find. */
#define MAXCHAINS 6
#define CHAIN_BLOCKS 32
typedef struct {
    uint32_t n;
    uint64_t hash[CHAIN_BLOCKS];
    uint64_t *content; /* n * bt values */
} chain;

typedef struct {
    wk_kv_pool *pool;
    uint32_t bt, n_blocks;
    uint64_t *mem; /* [block][token]: one value stands for a token's K/V in every slab */
    shadow_seq seq[MAXS];
    int n;
    uint32_t stash[MAXSTASH]; /* blocks held by external references */
    int n_stash;
    long ops, exhausted, cows, unsupported;
    long drops, dropped_entries, dropped_shared, slide_refusals; /* drop_before: calls that released,
                                                                   * entries, ones still held elsewhere */
    chain chains[MAXCHAINS];
    int n_chains;
    long inserts, hits, hit_dropped, hit_shared, flushes; /* prefix cache: blocks named, blocks taken by a hit
                                                          * (of them: entries appended as dropped, blocks
                                                          * another sequence held), flushes */
} walk;

/* The chain hash of block i of q from its committed values (tokens stand in as their low 32 bits). */
static uint64_t shadow_hash(const walk *w, const shadow_seq *q, uint32_t i) {
    int32_t tok[64];
    for (uint32_t t = 0; t < w->bt; t++) tok[t] = (int32_t)(uint32_t)q->expect[i * w->bt + t];
    return wk_kv_block_hash(i ? q->hashes[i - 1] : 0, 0x5eed, tok, w->bt);
}

/* What the engine does after every step: names each block that became full (a live one; a block
 * dropped before it filled cannot exist, since drop_before never drops the write block). */
static void hash_up(walk *w, shadow_seq *q) {
    wk_kv_seq *s = q->s;
    for (uint32_t i = q->n_hashed; i < s->n_tokens / w->bt; i++) {
        q->hashes[i] = shadow_hash(w, q, i);
        q->n_hashed = i + 1;
        if (i < s->first_live) continue;
        int rc = wk_kv_pool_cache_insert(w->pool, s->table[i], q->hashes[i]);
        if (rc == WK_ERR_INVALID) /* only a block already named by another chain (adopted from the stash) */
            CHECK(wk_kv_pool_cache_lookup(w->pool, q->hashes[i]) != s->table[i]);
        else CHECK(rc == 0 || rc == 1);
        w->inserts += rc == 1;
        if (rc >= 0) CHECK_EQ_INT(wk_kv_pool_cache_lookup(w->pool, q->hashes[i]) != WK_KV_NO_BLOCK, 1);
    }
}

/* Before a sequence lets go of its blocks: remember its chain (the newest MAXCHAINS). */
static void remember(walk *w, const shadow_seq *q) {
    uint32_t n = q->n_hashed < CHAIN_BLOCKS ? q->n_hashed : CHAIN_BLOCKS;
    if (n == 0) return;
    chain *c;
    if (w->n_chains < MAXCHAINS) c = &w->chains[w->n_chains++];
    else {
        c = &w->chains[rng_below(MAXCHAINS)];
        free(c->content);
    }
    c->n = n;
    memcpy(c->hash, q->hashes, n * sizeof *c->hash);
    c->content = malloc((size_t)n * w->bt * sizeof *c->content);
    memcpy(c->content, q->expect, (size_t)n * w->bt * sizeof *c->content);
}

static uint64_t *cell(walk *w, const wk_kv_seq *s, uint32_t pos) {
    return &w->mem[(uint64_t)s->table[pos / w->bt] * w->bt + pos % w->bt];
}

static void apply_copy(walk *w, const wk_kv_copy *cp) {
    if (!cp->bytes || cp->src_block == WK_KV_NO_BLOCK) return;
    CHECK_EQ_INT(cp->bytes, wk_kv_pool_bytes_per_block(w->pool));
    memcpy(&w->mem[(uint64_t)cp->dst_block * w->bt], &w->mem[(uint64_t)cp->src_block * w->bt],
           w->bt * sizeof *w->mem);
    w->cows++;
}

static int verify(walk *w) {
    int bad = 0;
    if (check_ok(w->pool) != WK_OK) bad++;
    uint8_t *mark = calloc(w->n_blocks, 1);
    uint64_t table_refs = 0, unique = 0;
    wk_kv_pool_stats st;
    wk_kv_pool_get_stats(w->pool, &st);
    for (int i = 0; i < w->n; i++) {
        wk_kv_seq *s = w->seq[i].s;
        if (s->first_live != w->seq[i].first_live) {
            bad++;
            continue;
        }
        /* Dropped tokens are gone; everything from the first live block on must read back. */
        for (uint32_t p = s->first_live * w->bt; p < s->n_tokens; p++)
            if (*cell(w, s, p) != w->seq[i].expect[p]) bad++;
        for (uint32_t b = 0; b < s->first_live; b++) bad += s->table[b] != WK_KV_NO_BLOCK;
        for (uint32_t b = s->first_live; b < s->n_blocks; b++) mark[s->table[b]] = 1;
        table_refs += s->n_blocks - s->first_live;
        unique += wk_kv_seq_unique_bytes(s);
        uint64_t win = s->window_slot != UINT32_MAX ? st.window_bytes : 0;
        if (wk_kv_seq_bytes(s) != (uint64_t)(s->n_blocks - s->first_live) * st.bytes_per_block + win) bad++;
    }
    for (int i = 0; i < w->n_stash; i++) mark[w->stash[i]] = 1;
    uint32_t distinct = 0;
    uint64_t refsum = 0;
    for (uint32_t b = 0; b < w->n_blocks; b++) {
        distinct += mark[b];
        refsum += wk_kv_pool_refcount(w->pool, b);
    }
    /* Leak-free: the blocks in use are exactly those some table or external holder names. */
    if (st.used_blocks != distinct) bad++;
    if (refsum != table_refs + st.external_refs) bad++;
    if (st.used_blocks + st.free_blocks + st.cached_blocks != st.n_blocks) bad++;
    if (st.cached_bytes != (uint64_t)st.cached_blocks * st.bytes_per_block) bad++;
    if (st.hashed_blocks < st.cached_blocks) bad++;
    if (st.used_bytes != (uint64_t)st.used_blocks * st.bytes_per_block + (uint64_t)st.used_windows * st.window_bytes)
        bad++;
    if (unique > st.used_bytes) bad++;
    if ((uint64_t)st.n_seqs != (uint64_t)w->n) bad++;
    free(mark);
    CHECK_EQ_INT(bad, 0);
    return bad;
}

static void remove_seq(walk *w, int i) {
    remember(w, &w->seq[i]);
    wk_kv_seq_destroy(w->seq[i].s);
    free(w->seq[i].expect);
    free(w->seq[i].hashes);
    w->seq[i] = w->seq[--w->n];
}

static void walk_once(uint64_t seed, uint32_t bt, uint32_t n_blocks, uint32_t window_rows, uint32_t max_seqs,
                      uint32_t sink, uint32_t recent, long n_ops) {
    walk w;
    memset(&w, 0, sizeof w);
    rng_seed(seed); /* the walk must not depend on libc rand */
    w.bt = bt;
    w.n_blocks = n_blocks;
    w.pool = make_pool(bt, 64, n_blocks, window_rows * 16, max_seqs, sink, recent);
    if (!w.pool) return;
    w.mem = calloc((size_t)n_blocks * bt, sizeof *w.mem);
    uint64_t next_value = 1;
    uint32_t *rc_before = calloc(n_blocks, sizeof *rc_before);
    for (long op = 0; op < n_ops; op++) {
        uint32_t r = rng_below(110);
        wk_kv_pool_stats s0, s1;
        wk_kv_pool_get_stats(w.pool, &s0);
        if (r < 8 || w.n == 0) { /* create */
            if (w.n == MAXS) continue;
            uint32_t mt = 1 + rng_below(12 * bt);
            bool take_window = max_seqs == 0 || rng_below(4) != 0;
            int st;
            wk_kv_seq *s = wk_kv_seq_create_ex(w.pool, mt, take_window, &st);
            if (!s) {
                CHECK_EQ_INT(st, WK_ERR_KV_EXHAUSTED);
                CHECK(take_window && max_seqs > 0);
                w.exhausted++;
            } else {
                CHECK(take_window == (s->window_slot != UINT32_MAX) || max_seqs == 0);
                w.seq[w.n].s = s;
                w.seq[w.n].max_tokens = mt;
                w.seq[w.n].first_live = 0;
                w.seq[w.n].expect = calloc((size_t)s->max_blocks * bt, sizeof(uint64_t));
                w.seq[w.n].hashes = calloc(s->max_blocks, sizeof(uint64_t));
                w.seq[w.n].n_hashed = 0;
                w.n++;
            }
        } else if (r < 14) { /* destroy */
            remove_seq(&w, (int)rng_below((uint32_t)w.n));
        } else if (r < 50) { /* write k tokens: prepare (cow + reserve), copy, write, commit */
            shadow_seq *q = &w.seq[rng_below((uint32_t)w.n)];
            wk_kv_seq *s = q->s;
            uint32_t k = 1 + rng_below(rng_below(4) == 0 ? 3 * bt : 3);
            uint32_t tb[256], nb, nt;
            snapshot(s, tb, &nb, &nt);
            wk_kv_copy cp;
            int rc = wk_kv_seq_prepare_write(s, k, &cp);
            if (rc != WK_OK) {
                CHECK(rc == WK_ERR_KV_EXHAUSTED || rc == WK_ERR_CONTEXT_FULL);
                CHECK(rc != WK_ERR_CONTEXT_FULL || (uint64_t)s->n_tokens + k > (uint64_t)s->max_blocks * bt);
                wk_kv_pool_get_stats(w.pool, &s1);
                CHECK(same(s, tb, nb, nt) && same_stats(&s0, &s1) && cp.bytes == 0);
                w.exhausted += rc == WK_ERR_KV_EXHAUSTED;
            } else {
                apply_copy(&w, &cp);
                for (uint32_t p = s->n_tokens; p < s->n_tokens + k; p++) {
                    *cell(&w, s, p) = next_value;
                    q->expect[p] = next_value++;
                }
                CHECK_EQ_INT(wk_kv_seq_advance(s, k), WK_OK);
            }
        } else if (r < 56) { /* reserve only */
            wk_kv_seq *s = w.seq[rng_below((uint32_t)w.n)].s;
            uint32_t tb[256], nb, nt;
            snapshot(s, tb, &nb, &nt);
            int rc = wk_kv_seq_reserve(s, rng_below(4 * bt));
            if (rc != WK_OK) {
                wk_kv_pool_get_stats(w.pool, &s1);
                CHECK(same(s, tb, nb, nt) && same_stats(&s0, &s1));
                CHECK(rc == WK_ERR_KV_EXHAUSTED || rc == WK_ERR_CONTEXT_FULL);
            }
        } else if (r < 60) { /* cow only */
            wk_kv_seq *s = w.seq[rng_below((uint32_t)w.n)].s;
            wk_kv_copy cp;
            int rc = wk_kv_seq_cow(s, &cp);
            if (rc == WK_OK) apply_copy(&w, &cp);
            else CHECK_EQ_INT(rc, WK_ERR_KV_EXHAUSTED);
        } else if (r < 70) { /* truncate */
            shadow_seq *q = &w.seq[rng_below((uint32_t)w.n)];
            wk_kv_seq *s = q->s;
            uint32_t n = rng_below(s->n_tokens + 1);
            if (rng_below(2)) n = s->n_tokens - rng_below(s->n_tokens < 3 ? s->n_tokens + 1 : 3);
            uint32_t tb[256], nb, nt, fl = q->first_live;
            snapshot(s, tb, &nb, &nt);
            bool sliding = fl > 0 && n > 0 && n < s->n_tokens; /* must be refused */
            int rc = wk_kv_seq_truncate(s, n);
            if (rc != WK_OK) {
                CHECK_EQ_INT(rc, WK_ERR_UNSUPPORTED);
                CHECK(sliding || (recent > 0 && s->window_slot != UINT32_MAX));
                wk_kv_pool_get_stats(w.pool, &s1);
                CHECK(same(s, tb, nb, nt) && same_stats(&s0, &s1) && s->first_live == fl);
                if (sliding) w.slide_refusals++;
                else w.unsupported++;
            } else {
                CHECK(!sliding);
                CHECK_EQ_INT(s->n_tokens, n);
                CHECK_EQ_INT(s->n_blocks, (n + bt - 1) / bt);
                if (n == 0) q->first_live = 0;
                if (q->n_hashed > n / bt) {
                    remember(&w, q);
                    q->n_hashed = n / bt;
                }
            }
        } else if (r < 72) { /* release */
            shadow_seq *q = &w.seq[rng_below((uint32_t)w.n)];
            remember(&w, q);
            wk_kv_seq_release(q->s);
            q->first_live = 0;
            q->n_hashed = 0;
        } else if (r < 82) { /* fork a prefix */
            if (w.n == MAXS) continue;
            shadow_seq *src = &w.seq[rng_below((uint32_t)w.n)];
            uint32_t n = rng_below(2) ? src->s->n_tokens : rng_below(src->s->n_tokens + 1);
            uint32_t mt = n + rng_below(6 * bt) + 1;
            int st;
            wk_kv_copy cp;
            bool windowed = src->s->window_slot != UINT32_MAX;
            bool sliding = src->first_live > 0 && n != src->s->n_tokens; /* must be refused */
            wk_kv_seq *s = wk_kv_seq_fork(src->s, n, mt, &cp, &st);
            if (!s) {
                CHECK(st == WK_ERR_KV_EXHAUSTED || st == WK_ERR_UNSUPPORTED);
                CHECK(st != WK_ERR_KV_EXHAUSTED || windowed);
                CHECK(st != WK_ERR_UNSUPPORTED || sliding || (recent > 0 && windowed));
                wk_kv_pool_get_stats(w.pool, &s1);
                CHECK(same_stats(&s0, &s1));
                if (st == WK_ERR_UNSUPPORTED && sliding) w.slide_refusals++;
                else w.unsupported += st == WK_ERR_UNSUPPORTED;
            } else {
                CHECK(!sliding);
                CHECK_EQ_INT(s->window_slot != UINT32_MAX, windowed);
                CHECK_EQ_INT(cp.bytes, windowed ? (uint64_t)window_rows * 16 : 0);
                CHECK_EQ_INT(s->n_blocks, (n + bt - 1) / bt);
                CHECK_EQ_INT(s->first_live, src->s->first_live);
                for (uint32_t b = 0; b < s->n_blocks; b++) CHECK_EQ_INT(s->table[b], src->s->table[b]);
                w.seq[w.n].s = s;
                w.seq[w.n].max_tokens = mt;
                w.seq[w.n].first_live = src->first_live;
                w.seq[w.n].expect = calloc((size_t)s->max_blocks * bt, sizeof(uint64_t));
                if (n) memcpy(w.seq[w.n].expect, src->expect, n * sizeof(uint64_t));
                w.seq[w.n].hashes = calloc(s->max_blocks, sizeof(uint64_t));
                w.seq[w.n].n_hashed = n / bt; /* src named every full block of it */
                if (n / bt) memcpy(w.seq[w.n].hashes, src->hashes, n / bt * sizeof(uint64_t));
                w.n++;
            }
        } else if (r < 88) { /* external reference to a block some sequence holds */
            wk_kv_seq *s = w.seq[rng_below((uint32_t)w.n)].s;
            if (w.n_stash == MAXSTASH || s->n_blocks == s->first_live) continue;
            uint32_t b = s->table[s->first_live + rng_below(s->n_blocks - s->first_live)];
            CHECK_EQ_INT(wk_kv_pool_share(w.pool, b), WK_OK);
            w.stash[w.n_stash++] = b;
        } else if (r < 94) { /* drop an external reference */
            if (w.n_stash == 0) continue;
            int i = (int)rng_below((uint32_t)w.n_stash);
            CHECK_EQ_INT(wk_kv_pool_unshare(w.pool, w.stash[i]), WK_OK);
            w.stash[i] = w.stash[--w.n_stash];
        } else if (r < 100) { /* adopt a stashed block (prefix-cache hit) */
            shadow_seq *q = &w.seq[rng_below((uint32_t)w.n)];
            wk_kv_seq *s = q->s;
            if (w.n_stash == 0) continue;
            uint32_t b = w.stash[rng_below((uint32_t)w.n_stash)];
            bool aligned = s->n_tokens == s->n_blocks * bt;
            int rc = wk_kv_seq_append_shared(s, b);
            if (rc == WK_OK) {
                /* The block is immutable while shared, so its current contents are what it holds. */
                for (uint32_t t = 0; t < bt; t++) q->expect[s->n_tokens - bt + t] = w.mem[(uint64_t)b * bt + t];
                if (q->n_hashed < s->n_blocks - 1) { /* the chain cannot go on past an unnamed block */
                    remember(&w, q);
                    q->n_hashed = 0;
                }
            } else {
                CHECK(rc == WK_ERR_CONTEXT_FULL || (rc == WK_ERR_INVALID && !aligned));
            }
        } else if (r < 108) { /* prefix-cache hit: a remembered chain's blocks, found by their hashes */
            if (w.n_chains == 0) continue;
            const chain *c = &w.chains[rng_below((uint32_t)w.n_chains)];
            int qi = -1;
            for (int i = 0; i < w.n; i++)
                if (w.seq[i].s->n_blocks == 0) qi = i;
            if (qi < 0) { /* a new sequence, as admission makes one */
                if (w.n == MAXS) continue;
                int st;
                uint32_t mt = c->n * bt + rng_below(4 * bt) + 1;
                wk_kv_seq *s = wk_kv_seq_create_ex(w.pool, mt, max_seqs == 0 || rng_below(4) != 0, &st);
                if (!s) continue;
                qi = w.n++;
                w.seq[qi] = (shadow_seq){.s = s, .max_tokens = mt,
                                         .expect = calloc((size_t)s->max_blocks * bt, sizeof(uint64_t)),
                                         .hashes = calloc(s->max_blocks, sizeof(uint64_t))};
            }
            shadow_seq *q = &w.seq[qi];
            wk_kv_seq *s = q->s;
            /* A sliding group starts with the entries below its window dropped. */
            uint32_t skip = rng_below(3) == 0 ? rng_below(c->n + 1) : 0, i = 0;
            for (; i < c->n && s->n_blocks < s->max_blocks; i++) {
                if (i < skip) {
                    CHECK_EQ_INT(wk_kv_seq_append_dropped(s), WK_OK);
                    q->first_live = i + 1;
                    w.hit_dropped++;
                } else {
                    uint32_t b = wk_kv_pool_cache_lookup(w.pool, c->hash[i]);
                    if (b == WK_KV_NO_BLOCK) break;
                    /* What it holds now is what it held when the chain named it. */
                    CHECK(memcmp(&w.mem[(uint64_t)b * bt], &c->content[(uint64_t)i * bt], bt * sizeof *w.mem) == 0);
                    w.hit_shared += wk_kv_pool_refcount(w.pool, b) > 0;
                    CHECK_EQ_INT(wk_kv_seq_append_shared(s, b), WK_OK);
                    CHECK(wk_kv_pool_refcount(w.pool, b) >= 1);
                    w.hits++;
                }
                memcpy(&q->expect[(uint64_t)i * bt], &c->content[(uint64_t)i * bt], bt * sizeof *q->expect);
                q->hashes[i] = c->hash[i];
                q->n_hashed = i + 1;
            }
            /* Appending a dropped entry onto a live one is refused. */
            if (s->first_live < s->n_blocks) {
                uint32_t tb[256], nb, nt;
                snapshot(s, tb, &nb, &nt);
                CHECK_EQ_INT(wk_kv_seq_append_dropped(s), WK_ERR_INVALID);
                CHECK(same(s, tb, nb, nt));
            }
        } else if (r < 109) { /* flush the prefix cache (now and then) */
            if (rng_below(4)) continue;
            uint32_t cached = s0.cached_blocks, freed = wk_kv_pool_cache_flush(w.pool);
            wk_kv_pool_get_stats(w.pool, &s1);
            CHECK_EQ_INT(freed, cached);
            CHECK_EQ_INT(s1.cached_blocks, 0);
            CHECK_EQ_INT(s1.hashed_blocks, 0);
            CHECK_EQ_INT(s1.free_blocks, s0.free_blocks + cached);
            CHECK_EQ_INT(s1.used_blocks, s0.used_blocks);
            for (int i = 0; i < w.n_chains; i++)
                for (uint32_t k = 0; k < w.chains[i].n; k++)
                    CHECK_EQ_INT(wk_kv_pool_cache_lookup(w.pool, w.chains[i].hash[k]), WK_KV_NO_BLOCK);
            w.flushes++;
        } else { /* sliding-window release, mostly as the engine calls it: drop_before(len - window + 1) */
            shadow_seq *q = &w.seq[rng_below((uint32_t)w.n)];
            wk_kv_seq *s = q->s;
            uint32_t window = 1 + rng_below(3 * bt);
            uint32_t pos = s->n_tokens + 1 > window ? s->n_tokens + 1 - window : 0;
            if (rng_below(4) == 0) pos = rng_below(s->n_tokens + 2 * bt + 1); /* past n_tokens too */
            uint32_t end = (pos < s->n_tokens ? pos : s->n_tokens) / bt, from = q->first_live;
            uint32_t tb[256], nb, nt;
            snapshot(s, tb, &nb, &nt);
            for (uint32_t b = 0; b < n_blocks; b++) rc_before[b] = wk_kv_pool_refcount(w.pool, b);
            uint32_t freed = 0; /* blocks whose last reference this drop is */
            for (uint32_t i = from; i < end; i++) {
                if (--rc_before[tb[i]] == 0) freed++;
                else w.dropped_shared++;
            }
            uint32_t got = wk_kv_seq_drop_before(s, pos);
            CHECK_EQ_INT(got, end > from ? end - from : 0);
            if (end > from) q->first_live = end;
            CHECK(s->n_blocks == nb && s->n_tokens == nt);
            for (uint32_t i = q->first_live; i < nb; i++) CHECK_EQ_INT(s->table[i], tb[i]);
            for (uint32_t b = 0; b < n_blocks; b++) CHECK_EQ_INT(wk_kv_pool_refcount(w.pool, b), rc_before[b]);
            wk_kv_pool_get_stats(w.pool, &s1);
            CHECK_EQ_INT(s1.free_blocks + s1.cached_blocks, s0.free_blocks + s0.cached_blocks + freed);
            w.drops += got > 0;
            w.dropped_entries += got;
        }
        for (int i = 0; i < w.n; i++) hash_up(&w, &w.seq[i]);
        w.ops++;
        if (verify(&w)) {
            fprintf(stderr, "walk seed %llu: failed after op %ld (r=%u)\n", (unsigned long long)seed, op, r);
            break;
        }
    }
    /* Tear down everything: no block or window slot may remain in use. */
    while (w.n) remove_seq(&w, w.n - 1);
    while (w.n_stash) CHECK_EQ_INT(wk_kv_pool_unshare(w.pool, w.stash[--w.n_stash]), WK_OK);
    wk_kv_pool_stats st;
    wk_kv_pool_get_stats(w.pool, &st);
    CHECK_EQ_INT(st.used_blocks, 0);
    CHECK(st.cached_blocks > 0); /* what the sequences named outlives them... */
    CHECK_EQ_INT(st.free_blocks + st.cached_blocks, n_blocks);
    CHECK_EQ_INT(check_ok(w.pool), WK_OK);
    CHECK_EQ_INT(wk_kv_pool_cache_flush(w.pool), st.cached_blocks); /* ...until a flush: then nothing leaks */
    wk_kv_pool_get_stats(w.pool, &st);
    CHECK_EQ_INT(st.cached_blocks, 0);
    CHECK_EQ_INT(st.hashed_blocks, 0);
    CHECK_EQ_INT(st.free_blocks, n_blocks);
    CHECK_EQ_INT(st.used_bytes, 0);
    CHECK_EQ_INT(st.external_refs, 0);
    CHECK(st.peak_used_blocks > n_blocks / 2); /* the walk did push the pool */
    CHECK(w.exhausted > 0 && w.cows > 0);     /* and hit both interesting paths */
    CHECK(recent == 0 || w.unsupported > 0);
    CHECK(w.drops > 0 && w.slide_refusals > 0); /* sliding sequences were made and refused a cut */
    CHECK(w.dropped_shared > 0);                 /* and some drops only took a shared block's reference */
    /* The prefix cache was used every way: hits on cached and on shared blocks, dropped entries,
     * evictions under pressure, flushes. */
    CHECK(w.inserts > 0 && w.hits > 0 && w.hit_shared > 0 && w.hit_shared < w.hits && w.hit_dropped > 0);
    CHECK(st.cache_evictions > 0 && w.flushes > 0);
    CHECK_EQ_INT(check_ok(w.pool), WK_OK);
    printf("walk seed %llu bt %u blocks %u windows %u: %ld ops, %ld exhausted, %ld copy-on-writes, "
           "%ld ring refusals, %ld drops (%ld entries, %ld shared), %ld sliding refusals, peak %u blocks; "
           "prefix cache: %ld named, %ld hits (%ld shared, %ld dropped entries), %llu evictions, %ld flushes\n",
           (unsigned long long)seed, bt, n_blocks, max_seqs, w.ops, w.exhausted, w.cows, w.unsupported, w.drops,
           w.dropped_entries, w.dropped_shared, w.slide_refusals, st.peak_used_blocks, w.inserts, w.hits,
           w.hit_shared, w.hit_dropped, (unsigned long long)st.cache_evictions, w.flushes);
    for (int i = 0; i < w.n_chains; i++) free(w.chains[i].content);
    free(rc_before);
    free(w.mem);
    wk_kv_pool_destroy(w.pool);
}

/* Per-layer-class formats: the full-attention groups in int2 with the windows, the sliding groups
 * in int4 in a pool of their own. The layout's sizes against hand-computed numbers, what
 * set_swa refuses, and a sequence grown to 2048 tokens in 512-token steps over the two pools as
 * the engine drives them: each pool's most bytes equal wk_kv_layout_pool_peak_bytes. */
static void test_two_classes(void) {
    const wk_kv_geom G6 = {.n_layer = 18, .n_head_kv = 1, .head_dim = 256, .block_tokens = 16, .group_layers = 3,
                           .swa_groups = 5, .swa_window = 512};
    const wk_kv_fmt w2 = {2, WK_KVQ_QUEST, 32, 4, 64}, q4 = {4, WK_KVQ_QUEST, 32, 0, 0}, w4 = {4, WK_KVQ_QUEST, 32, 4, 64};
    wk_kv_layout l, l4, bad;
    CHECK_EQ_INT(wk_kv_layout_get(&G6, &w2, &l), WK_OK);
    CHECK_EQ_INT(wk_kv_layout_get(&G6, &q4, &l4), WK_OK);
    CHECK_EQ_INT(l.bytes_per_block, 7680);   /* 3 layers x K,V x (1024 code + 256 param bytes) */
    CHECK_EQ_INT(l4.bytes_per_block, 13824); /* 3 layers x K,V x (2048 + 256) */
    CHECK_EQ_INT(l.swa_bytes_per_block, l.bytes_per_block); /* one format until set_swa */
    CHECK(!l.swa_pool);
    /* Refused: windows in the second layout, a layout without sliding groups, other groups. */
    CHECK_EQ_INT(wk_kv_layout_get(&G6, &w4, &bad), WK_OK);
    CHECK_EQ_INT(wk_kv_layout_set_swa(&l, &bad), WK_ERR_INVALID);
    wk_kv_layout flat;
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &w2, &flat), WK_OK);
    CHECK_EQ_INT(wk_kv_layout_set_swa(&flat, &l4), WK_ERR_INVALID);
    const wk_kv_geom G9 = {.n_layer = 18, .n_head_kv = 1, .head_dim = 256, .block_tokens = 16, .group_layers = 9,
                           .swa_groups = 1, .swa_window = 512};
    CHECK_EQ_INT(wk_kv_layout_get(&G9, &q4, &bad), WK_OK);
    CHECK_EQ_INT(wk_kv_layout_set_swa(&l, &bad), WK_ERR_INVALID);
    CHECK(!l.swa_pool);
    CHECK_EQ_INT(wk_kv_layout_set_swa(&l, &l4), WK_OK);
    CHECK(l.swa_pool);
    /* 2048 tokens: 128 blocks of the full group (int2) and of each sliding group (int4), a window
     * slot of 68 f16 rows of 18 x 2 x 256 elements. */
    const uint64_t window = 68ull * 18 * 2 * 256 * 2;
    CHECK_EQ_INT(l.window_bytes, window);
    CHECK_EQ_INT(wk_kv_layout_seq_bytes(&l, 2048), 128ull * (7680 + 5 * 13824) + window);
    CHECK_NEAR(wk_kv_layout_bits_per_element(&l, 2048), (128.0 * (7680 + 5 * 13824) + window) * 8 / (2048.0 * 9216), 1e-12);
    /* The peak with 512-token steps: a sliding group holds ceil((15 + 511 + 512) / 16) = 65 blocks. */
    CHECK_EQ_INT(wk_kv_layout_pool_peak_bytes(&l, 0, 2048, 512), 128ull * 7680 + window);
    CHECK_EQ_INT(wk_kv_layout_pool_peak_bytes(&l, 1, 2048, 512), 5ull * 65 * 13824);
    CHECK_EQ_INT(wk_kv_layout_seq_peak_bytes(&l, 2048, 512), 128ull * 7680 + window + 5ull * 65 * 13824);
    /* One format: pool 1 is empty and pool 0 holds everything, as before. */
    CHECK_EQ_INT(wk_kv_layout_pool_peak_bytes(&l4, 1, 2048, 512), 0);
    CHECK_EQ_INT(wk_kv_layout_pool_peak_bytes(&l4, 0, 2048, 512), wk_kv_layout_seq_peak_bytes(&l4, 2048, 512));

    /* The two pools driven as the engine drives them. */
    wk_kv_pool_params p0, p1;
    wk_kv_pool_params_from_layout(&l, 8 << 20, 2, &p0);
    wk_kv_pool_params_from_layout(&l4, 8 << 20, 0, &p1);
    wk_kv_pool *pool0 = NULL, *pool1 = NULL;
    CHECK_EQ_INT(wk_kv_pool_create(&p0, &pool0), WK_OK);
    CHECK_EQ_INT(wk_kv_pool_create(&p1, &pool1), WK_OK);
    if (!pool0 || !pool1) return;
    wk_kv_seq *g[6];
    int st;
    for (int k = 0; k < 6; k++) {
        g[k] = wk_kv_seq_create_ex(k == 0 ? pool0 : pool1, 2048, k == 0, &st);
        CHECK(g[k] != NULL);
        if (!g[k]) return;
    }
    uint64_t most[2] = {0, 0};
    for (uint32_t len = 0; len < 2048; len += 512) {
        wk_kv_copy cp;
        for (int k = 0; k < 6; k++) CHECK_EQ_INT(wk_kv_seq_prepare_write(g[k], 512, &cp), WK_OK);
        uint64_t held[2] = {wk_kv_seq_bytes(g[0]), 0};
        for (int k = 1; k < 6; k++) held[1] += wk_kv_seq_bytes(g[k]);
        for (int q = 0; q < 2; q++) most[q] = held[q] > most[q] ? held[q] : most[q];
        for (int k = 0; k < 6; k++) CHECK_EQ_INT(wk_kv_seq_advance(g[k], 512), WK_OK);
        /* As engine.c: a sliding group keeps from (len + 512) - window + 1 on. */
        for (int k = 1; k < 6; k++) wk_kv_seq_drop_before(g[k], len + 512 - 512 + 1);
    }
    CHECK_EQ_INT(most[0], wk_kv_layout_pool_peak_bytes(&l, 0, 2048, 512));
    /* A block-aligned start holds ceil((511 + 512) / 16) = 64 blocks, one fewer than the bound's
     * worst case (a step starting at a block's last token). */
    CHECK_EQ_INT(most[1], 5ull * 64 * 13824);
    CHECK(most[1] <= wk_kv_layout_pool_peak_bytes(&l, 1, 2048, 512));
    CHECK_EQ_INT(check_ok(pool0), WK_OK);
    CHECK_EQ_INT(check_ok(pool1), WK_OK);
    wk_kv_pool_stats s0, s1;
    wk_kv_pool_get_stats(pool0, &s0);
    wk_kv_pool_get_stats(pool1, &s1);
    CHECK_EQ_INT(s0.used_bytes, 128ull * 7680 + window);
    CHECK_EQ_INT(s1.used_bytes, 5ull * 32 * 13824); /* [1537, 2048): 32 blocks of each sliding group */
    for (int k = 0; k < 6; k++) wk_kv_seq_destroy(g[k]);
    wk_kv_pool_destroy(pool0);
    wk_kv_pool_destroy(pool1);
}

/* The prefix cache step by step: named blocks outlive their sequence (cached, not free), a hit
 * takes them back, allocation evicts the least recently released one only when no block is free,
 * a hashed block is never written (a truncate into one copies it), and a flush frees them all. */
static void test_prefix_cache(void) {
    wk_kv_pool *pool = make_pool(4, 64, 4, 0, 0, 0, 0);
    const int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const uint64_t h0 = wk_kv_block_hash(0, 9, toks, 4), h1 = wk_kv_block_hash(h0, 9, toks + 4, 4);
    CHECK(h0 != h1 && h0 != wk_kv_block_hash(0, 10, toks, 4) && h1 != wk_kv_block_hash(h0 + 1, 9, toks + 4, 4));
    int st;
    wk_kv_seq *a = wk_kv_seq_create(pool, 16, &st);
    wk_kv_copy cp;
    CHECK_EQ_INT(wk_kv_seq_prepare_write(a, 10, &cp), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_advance(a, 10), WK_OK);
    const uint32_t b0 = a->table[0], b1 = a->table[1], b2 = a->table[2];
    CHECK_EQ_INT(wk_kv_pool_cache_insert(pool, b2, 77), 1); /* the pool trusts the caller on fullness */
    CHECK_EQ_INT(wk_kv_pool_cache_flush(pool), 0);           /* in use: unnamed, not freed */
    CHECK_EQ_INT(wk_kv_pool_cache_lookup(pool, 77), WK_KV_NO_BLOCK);
    CHECK_EQ_INT(wk_kv_pool_cache_insert(pool, b0, h0), 1);
    CHECK_EQ_INT(wk_kv_pool_cache_insert(pool, b0, h0), 0);               /* already so named */
    CHECK_EQ_INT(wk_kv_pool_cache_insert(pool, b0, h1), WK_ERR_INVALID); /* named otherwise */
    CHECK_EQ_INT(wk_kv_pool_cache_insert(pool, b1, h1), 1);
    CHECK_EQ_INT(wk_kv_pool_cache_insert(pool, b2, h1), 0);   /* h1 is b1's: b2 stays unnamed */
    CHECK_EQ_INT(wk_kv_pool_cache_insert(pool, 3, 5), WK_ERR_INVALID); /* not in use */
    CHECK_EQ_INT(wk_kv_pool_cache_lookup(pool, h1), b1);
    wk_kv_pool_stats s;
    wk_kv_pool_get_stats(pool, &s);
    CHECK(s.used_blocks == 3 && s.free_blocks == 1 && s.cached_blocks == 0 && s.hashed_blocks == 2);
    /* A write into a hashed block goes to a copy: truncate into block 1, then write. */
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 6), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_advance(a, 1), WK_ERR_INVALID); /* the write block is named: refused */
    CHECK_EQ_INT(wk_kv_seq_prepare_write(a, 1, &cp), WK_OK);
    CHECK(a->table[1] != b1 && cp.bytes == 64 && cp.src_block == b1 && cp.dst_block == a->table[1]);
    CHECK_EQ_INT(wk_kv_seq_advance(a, 1), WK_OK);
    wk_kv_pool_get_stats(pool, &s);
    CHECK(s.used_blocks == 2 && s.cached_blocks == 1 && s.free_blocks == 1); /* b1 kept, not freed */
    CHECK_EQ_INT(wk_kv_seq_truncate(a, 4), WK_OK);
    wk_kv_seq_destroy(a);
    wk_kv_pool_get_stats(pool, &s);
    CHECK(s.used_blocks == 0 && s.cached_blocks == 2 && s.free_blocks == 2 && s.cached_bytes == 128);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    /* A hit: both blocks by hash, appended by reference, no longer evictable. */
    wk_kv_seq *b = wk_kv_seq_create(pool, 16, &st);
    CHECK_EQ_INT(wk_kv_seq_append_shared(b, wk_kv_pool_cache_lookup(pool, h0)), WK_OK);
    wk_kv_pool_get_stats(pool, &s);
    CHECK(s.used_blocks == 1 && s.cached_blocks == 1 && b->table[0] == b0 && b->n_tokens == 4);
    /* Three more blocks with two free: the cached b1 is evicted for the third, never b0 (held). */
    CHECK_EQ_INT(wk_kv_seq_prepare_write(b, 12, &cp), WK_OK);
    CHECK_EQ_INT(wk_kv_pool_cache_lookup(pool, h1), WK_KV_NO_BLOCK);
    CHECK_EQ_INT(wk_kv_pool_cache_lookup(pool, h0), b0);
    wk_kv_pool_get_stats(pool, &s);
    CHECK(s.used_blocks == 4 && s.cached_blocks == 0 && s.free_blocks == 0 && s.cache_evictions == 1);
    CHECK_EQ_INT(wk_kv_seq_prepare_write(b, 13, &cp), WK_ERR_CONTEXT_FULL);
    wk_kv_seq *c = wk_kv_seq_create(pool, 16, &st);
    CHECK_EQ_INT(wk_kv_seq_reserve(c, 1), WK_ERR_KV_EXHAUSTED); /* nothing free, nothing cached */
    /* LRU order: released oldest first is evicted first. */
    wk_kv_seq_destroy(b); /* b0 (named) cached; the three unnamed ones free */
    CHECK_EQ_INT(wk_kv_seq_reserve(c, 12), WK_OK); /* the free ones */
    CHECK_EQ_INT(wk_kv_pool_cache_lookup(pool, h0), b0);
    CHECK_EQ_INT(wk_kv_seq_reserve(c, 16), WK_OK); /* and then b0 */
    CHECK_EQ_INT(wk_kv_pool_cache_lookup(pool, h0), WK_KV_NO_BLOCK);
    CHECK_EQ_INT(wk_kv_seq_append_shared(c, b0), WK_ERR_INVALID); /* not aligned */
    wk_kv_seq_destroy(c);
    /* Sliding groups: dropped entries first, then live ones. */
    wk_kv_seq *d = wk_kv_seq_create(pool, 8, &st);
    CHECK_EQ_INT(wk_kv_seq_append_dropped(d), WK_OK);
    CHECK(d->first_live == 1 && d->n_tokens == 4 && d->table[0] == WK_KV_NO_BLOCK);
    CHECK_EQ_INT(wk_kv_seq_append_dropped(d), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_append_dropped(d), WK_ERR_CONTEXT_FULL);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_seq_release(d);
    CHECK_EQ_INT(wk_kv_seq_reserve(d, 1), WK_OK);
    CHECK_EQ_INT(wk_kv_seq_append_dropped(d), WK_ERR_INVALID); /* a partial block */
    wk_kv_seq_destroy(d);
    CHECK_EQ_INT(wk_kv_pool_cache_flush(pool), 0);
    wk_kv_pool_get_stats(pool, &s);
    CHECK(s.free_blocks == 4 && s.hashed_blocks == 0);
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    wk_kv_pool_destroy(pool);
}

/* Hits across layer groups (kv_prefix.h): one full-attention group and two sliding ones of window
 * 10 over 4-token blocks. A sequence of 24 tokens names its blocks, except the ones a case leaves
 * out (as if evicted), and ends; then the longest prefix of 5 blocks a new sequence can take. */
static uint32_t hybrid_match(const int missing[][2], int n_missing, uint32_t *first_live) {
    enum { G = 3, SWA = 2, W = 10, BT = 4, NB = 6 };
    wk_kv_pool *pool = make_pool(BT, 64, 40, 0, 0, 0, 0);
    uint64_t chain[NB];
    int32_t tok[NB * BT];
    for (int i = 0; i < NB * BT; i++) tok[i] = 100 + i;
    for (int i = 0; i < NB; i++) chain[i] = wk_kv_block_hash(i ? chain[i - 1] : 0, 1, tok + i * BT, BT);
    wk_kv_seq *a[G], *b[G];
    int st;
    wk_kv_copy cp;
    for (int g = 0; g < G; g++) {
        a[g] = wk_kv_seq_create(pool, 64, &st);
        CHECK_EQ_INT(wk_kv_seq_prepare_write(a[g], NB * BT, &cp), WK_OK);
        CHECK_EQ_INT(wk_kv_seq_advance(a[g], NB * BT), WK_OK);
        for (int i = 0; i < NB; i++) {
            bool skip = false;
            for (int m = 0; m < n_missing; m++) skip |= missing[m][0] == g && missing[m][1] == i;
            if (!skip) CHECK_EQ_INT(wk_kv_pool_cache_insert(pool, a[g]->table[i], wk_kv_prefix_key(chain[i], g)), 1);
        }
    }
    for (int g = 0; g < G; g++) wk_kv_seq_destroy(a[g]);
    for (int g = 0; g < G; g++) b[g] = wk_kv_seq_create(pool, 64, &st);
    const uint32_t k = wk_kv_prefix_match(b, G, SWA, W, chain, NB - 1);
    CHECK_EQ_INT(wk_kv_prefix_attach(b, G, SWA, W, chain, k), WK_OK);
    const uint32_t lo = wk_kv_prefix_first_needed(k, BT, W);
    for (int g = 0; g < G; g++) {
        CHECK_EQ_INT(b[g]->n_tokens, k * BT);
        CHECK_EQ_INT(b[g]->first_live, g == 0 ? 0 : lo);
        for (uint32_t i = 0; i < k; i++)
            CHECK_EQ_INT(b[g]->table[i], g > 0 && i < lo ? WK_KV_NO_BLOCK
                                                         : wk_kv_pool_cache_lookup(pool, wk_kv_prefix_key(chain[i], g)));
    }
    *first_live = b[1]->first_live;
    CHECK_EQ_INT(check_ok(pool), WK_OK);
    /* Taking it again into sequences that are not empty is refused and leaves them empty. */
    CHECK_EQ_INT(wk_kv_prefix_attach(b, G, SWA, W, chain, k), k ? WK_ERR_INVALID : WK_OK);
    for (int g = 0; g < G; g++) wk_kv_seq_destroy(b[g]);
    wk_kv_pool_destroy(pool);
    return k;
}

static void test_prefix_hybrid(void) {
    CHECK_EQ_INT(wk_kv_prefix_first_needed(5, 4, 10), 2); /* P 20: the query at 20 reads 11.. */
    CHECK_EQ_INT(wk_kv_prefix_first_needed(2, 4, 10), 0); /* P 8 < window */
    CHECK_EQ_INT(wk_kv_prefix_first_needed(3, 4, 12), 0); /* P 12: reads 1.., block 0 */
    CHECK_EQ_INT(wk_kv_prefix_first_needed(4, 4, 0), 0);
    CHECK(wk_kv_prefix_key(7, 0) != wk_kv_prefix_key(7, 1) && wk_kv_prefix_key(7, 0) != 7);
    uint32_t fl;
    /* Everything cached: the whole cap (5 of 6 blocks); the sliding groups start at block 2. */
    CHECK_EQ_INT(hybrid_match(NULL, 0, &fl), 5);
    CHECK_EQ_INT(fl, 2);
    /* A sliding group lost blocks below its window: no matter. */
    const int old[2][2] = {{1, 0}, {2, 1}};
    CHECK_EQ_INT(hybrid_match(old, 2, &fl), 5);
    /* A sliding group lost block 3: k 5 (needs 2..4) and 4 (needs 1..3) fail, 3 (needs 0..2) hits
     * although the full-attention group has all five. */
    const int mid[1][2] = {{2, 3}};
    CHECK_EQ_INT(hybrid_match(mid, 1, &fl), 3);
    CHECK_EQ_INT(fl, 0);
    /* The full-attention group lost block 4: at most 4 (sliding groups from block 1). */
    const int full[1][2] = {{0, 4}};
    CHECK_EQ_INT(hybrid_match(full, 1, &fl), 4);
    CHECK_EQ_INT(fl, 1);
    /* Block 0 of the full group: nothing. */
    const int none[1][2] = {{0, 0}};
    CHECK_EQ_INT(hybrid_match(none, 1, &fl), 0);
}

int main(void) {
    test_layouts();
    test_create();
    test_alloc_and_exhaustion();
    test_share_cow();
    test_windows();
    test_drop_before();
    test_windowless();
    test_checker_catches();
    test_two_classes();
    test_prefix_cache();
    test_prefix_hybrid();
    walk_once(1, 16, 40, 0, 0, 0, 0, 16000); /* drops ease the pressure: more ops to exhaust it */
    walk_once(2, 4, 24, 0, 0, 0, 0, 8000);
    walk_once(3, 16, 48, 0, 0, 0, 0, 16000); /* roomier pool: twice the ops to reach exhaustion (asserted) */
    walk_once(4, 8, 40, 6, 8, 2, 4, 8000); /* with window slots: sink 2, recent 4, 8 sequences */
    TEST_MAIN_END();
}
