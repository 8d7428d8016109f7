/* Paged KV pool tests: block sizes and bits/element of each format against hand-computed numbers,
 * exact accounting, LIFO reuse, all-or-nothing exhaustion, sharing and copy-on-write, f16 window
 * slots, the invariant checker catching corruption, and seeded random walks of thousands of
 * operations that replay every device copy and write on a shadow of the pool memory, so a missing
 * or wrong copy-on-write shows up as another sequence's tokens changing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv_pool.h"
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

/* Gemma 3 270M: 18 layers, 1 KV head, head_dim 256. */
static const wk_kv_geom GEMMA270 = {18, 1, 256, 16};

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
    CHECK_EQ_INT(wk_kv_layout_seqs_fit(&l, 256ull << 20, 2048), 7);

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
    CHECK_EQ_INT(wk_kv_layout_seqs_fit(&l, 256ull << 20, 2048), 45);
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
    CHECK_EQ_INT(wk_kv_layout_seqs_fit(&l, 256ull << 20, 2048), 37);
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
    wk_kv_geom d48 = {2, 1, 48, 16};
    CHECK_EQ_INT(wk_kv_layout_get(&d48, &q2, &l), WK_ERR_INVALID); /* 48 % 32 */
    wk_kv_geom bt1 = {2, 1, 256, 1};
    wk_kv_fmt q2g256 = {2, WK_KVQ_QUEST, 256, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&bt1, &q2g256, &l), WK_ERR_INVALID); /* 64 + 2 bytes: not u32 words */
    wk_kv_fmt bad = {5, WK_KVQ_QUEST, 32, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &bad, &l), WK_ERR_INVALID);
    /* Default block size. */
    wk_kv_geom g0 = {18, 1, 256, 0};
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
    wk_kv_geom g = {1, 1, 32, 4};
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
} shadow_seq;

typedef struct {
    wk_kv_pool *pool;
    uint32_t bt, n_blocks;
    uint64_t *mem; /* [block][token]: one value stands for a token's K/V in every slab */
    shadow_seq seq[MAXS];
    int n;
    uint32_t stash[MAXSTASH]; /* blocks held by external references */
    int n_stash;
    long ops, exhausted, cows, unsupported;
} walk;

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
        for (uint32_t p = 0; p < s->n_tokens; p++)
            if (*cell(w, s, p) != w->seq[i].expect[p]) bad++;
        for (uint32_t b = 0; b < s->n_blocks; b++) mark[s->table[b]] = 1;
        table_refs += s->n_blocks;
        unique += wk_kv_seq_unique_bytes(s);
        if (wk_kv_seq_bytes(s) != (uint64_t)s->n_blocks * st.bytes_per_block + st.window_bytes) bad++;
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
    if (st.used_blocks + st.free_blocks != st.n_blocks) bad++;
    if (st.used_bytes != (uint64_t)st.used_blocks * st.bytes_per_block + (uint64_t)st.used_windows * st.window_bytes)
        bad++;
    if (unique > st.used_bytes) bad++;
    if ((uint64_t)st.n_seqs != (uint64_t)w->n) bad++;
    free(mark);
    CHECK_EQ_INT(bad, 0);
    return bad;
}

static void remove_seq(walk *w, int i) {
    wk_kv_seq_destroy(w->seq[i].s);
    free(w->seq[i].expect);
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
    for (long op = 0; op < n_ops; op++) {
        uint32_t r = rng_below(100);
        wk_kv_pool_stats s0, s1;
        wk_kv_pool_get_stats(w.pool, &s0);
        if (r < 8 || w.n == 0) { /* create */
            if (w.n == MAXS) continue;
            uint32_t mt = 1 + rng_below(12 * bt);
            int st;
            wk_kv_seq *s = wk_kv_seq_create(w.pool, mt, &st);
            if (!s) {
                CHECK_EQ_INT(st, WK_ERR_KV_EXHAUSTED);
                w.exhausted++;
            } else {
                w.seq[w.n].s = s;
                w.seq[w.n].max_tokens = mt;
                w.seq[w.n].expect = calloc((size_t)s->max_blocks * bt, sizeof(uint64_t));
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
            wk_kv_seq *s = w.seq[rng_below((uint32_t)w.n)].s;
            uint32_t n = rng_below(s->n_tokens + 1);
            if (rng_below(2)) n = s->n_tokens - rng_below(s->n_tokens < 3 ? s->n_tokens + 1 : 3);
            uint32_t tb[256], nb, nt;
            snapshot(s, tb, &nb, &nt);
            int rc = wk_kv_seq_truncate(s, n);
            if (rc != WK_OK) {
                CHECK_EQ_INT(rc, WK_ERR_UNSUPPORTED);
                CHECK(recent > 0);
                wk_kv_pool_get_stats(w.pool, &s1);
                CHECK(same(s, tb, nb, nt) && same_stats(&s0, &s1));
                w.unsupported++;
            } else {
                CHECK_EQ_INT(s->n_tokens, n);
                CHECK_EQ_INT(s->n_blocks, (n + bt - 1) / bt);
            }
        } else if (r < 72) { /* release */
            wk_kv_seq_release(w.seq[rng_below((uint32_t)w.n)].s);
        } else if (r < 82) { /* fork a prefix */
            if (w.n == MAXS) continue;
            shadow_seq *src = &w.seq[rng_below((uint32_t)w.n)];
            uint32_t n = rng_below(2) ? src->s->n_tokens : rng_below(src->s->n_tokens + 1);
            uint32_t mt = n + rng_below(6 * bt) + 1;
            int st;
            wk_kv_copy cp;
            wk_kv_seq *s = wk_kv_seq_fork(src->s, n, mt, &cp, &st);
            if (!s) {
                CHECK(st == WK_ERR_KV_EXHAUSTED || st == WK_ERR_UNSUPPORTED);
                wk_kv_pool_get_stats(w.pool, &s1);
                CHECK(same_stats(&s0, &s1));
                w.unsupported += st == WK_ERR_UNSUPPORTED;
            } else {
                CHECK_EQ_INT(cp.bytes, (uint64_t)window_rows * 16);
                CHECK_EQ_INT(s->n_blocks, (n + bt - 1) / bt);
                for (uint32_t b = 0; b < s->n_blocks; b++) CHECK_EQ_INT(s->table[b], src->s->table[b]);
                w.seq[w.n].s = s;
                w.seq[w.n].max_tokens = mt;
                w.seq[w.n].expect = calloc((size_t)s->max_blocks * bt, sizeof(uint64_t));
                if (n) memcpy(w.seq[w.n].expect, src->expect, n * sizeof(uint64_t));
                w.n++;
            }
        } else if (r < 88) { /* external reference to a block some sequence holds */
            wk_kv_seq *s = w.seq[rng_below((uint32_t)w.n)].s;
            if (w.n_stash == MAXSTASH || s->n_blocks == 0) continue;
            uint32_t b = s->table[rng_below(s->n_blocks)];
            CHECK_EQ_INT(wk_kv_pool_share(w.pool, b), WK_OK);
            w.stash[w.n_stash++] = b;
        } else if (r < 94) { /* drop an external reference */
            if (w.n_stash == 0) continue;
            int i = (int)rng_below((uint32_t)w.n_stash);
            CHECK_EQ_INT(wk_kv_pool_unshare(w.pool, w.stash[i]), WK_OK);
            w.stash[i] = w.stash[--w.n_stash];
        } else { /* adopt a stashed block (prefix-cache hit) */
            shadow_seq *q = &w.seq[rng_below((uint32_t)w.n)];
            wk_kv_seq *s = q->s;
            if (w.n_stash == 0) continue;
            uint32_t b = w.stash[rng_below((uint32_t)w.n_stash)];
            bool aligned = s->n_tokens == s->n_blocks * bt;
            int rc = wk_kv_seq_append_shared(s, b);
            if (rc == WK_OK) {
                /* The block is immutable while shared, so its current contents are what it holds. */
                for (uint32_t t = 0; t < bt; t++) q->expect[s->n_tokens - bt + t] = w.mem[(uint64_t)b * bt + t];
            } else {
                CHECK(rc == WK_ERR_CONTEXT_FULL || (rc == WK_ERR_INVALID && !aligned));
            }
        }
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
    CHECK_EQ_INT(st.free_blocks, n_blocks);
    CHECK_EQ_INT(st.used_bytes, 0);
    CHECK_EQ_INT(st.external_refs, 0);
    CHECK(st.peak_used_blocks > n_blocks / 2); /* the walk did push the pool */
    CHECK(w.exhausted > 0 && w.cows > 0);     /* and hit both interesting paths */
    CHECK(recent == 0 || w.unsupported > 0);
    CHECK_EQ_INT(check_ok(w.pool), WK_OK);
    printf("walk seed %llu bt %u blocks %u windows %u: %ld ops, %ld exhausted, %ld copy-on-writes, "
           "%ld ring refusals, peak %u blocks\n",
           (unsigned long long)seed, bt, n_blocks, max_seqs, w.ops, w.exhausted, w.cows, w.unsupported,
           st.peak_used_blocks);
    free(w.mem);
    wk_kv_pool_destroy(w.pool);
}

int main(void) {
    test_layouts();
    test_create();
    test_alloc_and_exhaustion();
    test_share_cow();
    test_windows();
    test_checker_catches();
    walk_once(1, 16, 40, 0, 0, 0, 0, 8000);
    walk_once(2, 4, 24, 0, 0, 0, 0, 8000);
    walk_once(3, 16, 48, 0, 0, 0, 0, 16000); /* roomier pool: twice the ops to reach exhaustion (asserted) */
    walk_once(4, 8, 40, 6, 8, 2, 4, 8000); /* with window slots: sink 2, recent 4, 8 sequences */
    TEST_MAIN_END();
}
