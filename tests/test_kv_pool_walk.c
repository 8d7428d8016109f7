/* Seeded random walks of thousands of paged KV pool operations (create, write, reserve, cow,
 * truncate, release, fork, external references, adopted blocks, prefix-cache hits and flushes,
 * sliding-window release) that replay every device copy and write on a shadow of the pool memory,
 * so a missing or wrong copy-on-write, or a cached block reused while referenced or written while
 * named, shows up as tokens changing under a sequence or a hit; after every operation the
 * accounting is checked to be exact and leak-free. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_pool.h"
#include "kv_pool_test_util.h"
#include "test_rng.h"
#include "test_util.h"
#include "wushkv/wushkv.h"

static uint32_t rng_below(uint32_t n) { return n ? (uint32_t)(rng_u64() % n) : 0; }

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

int main(void) {
    walk_once(1, 16, 40, 0, 0, 0, 0, 16000); /* drops ease the pressure: more ops to exhaust it */
    walk_once(2, 4, 24, 0, 0, 0, 0, 8000);
    walk_once(3, 16, 48, 0, 0, 0, 0, 16000); /* roomier pool: twice the ops to reach exhaustion (asserted) */
    walk_once(4, 8, 40, 6, 8, 2, 4, 8000); /* with window slots: sink 2, recent 4, 8 sequences */
    TEST_MAIN_END();
}
