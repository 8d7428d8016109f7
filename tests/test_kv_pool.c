/* Paged KV pool operations: creation and exact accounting, LIFO reuse, all-or-nothing exhaustion,
 * sharing and copy-on-write, f16 window slots, window-less sequences, sliding-window release
 * (drop_before) and what it rules out, the invariant checker catching corruption, and the prefix
 * cache step by step (hash chain, LRU eviction, flush). */
#include <stdint.h>
#include <string.h>

#include "kv/kv_pool.h"
#include "kv_pool_test_util.h"
#include "test_util.h"
#include "wushkv/wushkv.h"

static void test_create(void) {
    wk_kv_pool *pool = NULL;
    wk_kv_pool_params p = {16, 46080, 10 * 46080 + 46079, 0, 0, 0, 0, 0, 0};
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
    wk_kv_fmt w2 = {2, WK_KVQ_QUEST, 32, 4, 64, 0, 0, 0, 0};
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
    wk_kv_fmt f = {2, WK_KVQ_QUEST, 32, 2, 4, 0, 0, 0, 0};
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
    /* Windows per layer class: each class's ring is checked. The full-attention layers keep a
     * long ring (recent 16) or none, the sliding ones recent 4 (sink 2): after 20 tokens an
     * 18-token sequence needs sliding position 15, overwritten by 19, whatever the other ring. */
    for (uint32_t other = 0; other <= 16; other += 16) {
        wk_kv_pool_params pw = {4, 80, 10 * 80 + 2 * 768, 768, 0, other, 2, 2, 4};
        CHECK_EQ_INT(wk_kv_pool_create(&pw, &pool), WK_OK);
        a = wk_kv_seq_create(pool, 100, &st);
        CHECK(a != NULL);
        CHECK_EQ_INT(wk_kv_seq_prepare_write(a, 20, &cp), WK_OK);
        CHECK_EQ_INT(wk_kv_seq_advance(a, 20), WK_OK);
        CHECK_EQ_INT(wk_kv_seq_truncate(a, 18), WK_ERR_UNSUPPORTED);
        CHECK_EQ_INT(wk_kv_seq_truncate(a, 19), WK_OK);
        wk_kv_pool_destroy(pool);
    }
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

int main(void) {
    test_create();
    test_alloc_and_exhaustion();
    test_share_cow();
    test_windows();
    test_drop_before();
    test_windowless();
    test_checker_catches();
    test_prefix_cache();
    TEST_MAIN_END();
}
