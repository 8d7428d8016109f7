/* Automatic prefix caching through the public API, on the tiny gemma3 model (5 sliding-window
 * layers of window 16 and a global one) in int2 + WUSH: a sequence that takes a cached prefix of
 * 48 tokens -- blocks another sequence still holds, or blocks only the cache keeps -- gives logits
 * bit-identical to a cold sequence fed the same 48 tokens in one step and the rest in a second
 * (what "identical to cold" means: the same steps; kv_pool.h, docs/design.md); the sliding groups
 * take only the blocks their window still shows; shared blocks count once in the pool; a flush
 * forgets them; the same for the f16 cache (the same paged pool). Formats with f16 windows park
 * ended sequences whole (design 1): a next turn that extends a parked sequence's tokens adopts it
 * and gives the cold run's logits bit for bit, a prompt that diverges inside it adopts only what
 * the ring still serves exactly, and parked sequences give way to new sequences and to blocks a
 * step needs, leaking nothing after a flush. Window snapshots (design 3): a prompt sharing another's
 * first 64 tokens (a system prompt) takes its blocks and the snapshot of its window at 64 and gives
 * the cold run's logits bit for bit (int2 + WUSH sink 4 recent 16, and int2 sink 4 recent 64,
 * where 64 - 64 + 1 < 4); hits happen only at snapshot points; a snapshot goes when its block is
 * evicted, and a flush leaves no block and no snapshot behind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_engine_env.h"
#include "test_rng.h"
#include "test_util.h"
#include "tiny_model.h"
#include "wushkv/research.h"

enum { N = 90, P = 48, CTX = 128 };

static wk_engine *open_engine_mem(const char *model, int bits, int sink, int recent, const char *wush, bool cache,
                                  uint64_t kv_mem) {
    wk_engine_params p;
    tiny_engine_params(&p, model);
    p.max_ctx = CTX;
    p.max_seqs = 4;
    p.kv_bits = bits;
    p.kv_quant = WK_KV_QUANT_QUEST;
    p.kv_group = 32;
    p.kv_sink = sink;
    p.kv_recent = recent;
    p.kv_transform = wush ? WK_KV_TRANSFORM_WUSH : WK_KV_TRANSFORM_NONE;
    p.wush_path = wush;
    p.prefix_cache = cache;
    p.kv_mem = kv_mem;
    test_engine_params_from_env(&p);
    char err[WK_ERRMSG_LEN] = "";
    wk_engine *e = NULL;
    if (wk_engine_open(&p, &e, err, sizeof err)) fprintf(stderr, "open: %s\n", err);
    return e;
}

static wk_engine *open_engine(const char *model, int bits, int sink, int recent, const char *wush, bool cache) {
    return open_engine_mem(model, bits, sink, recent, wush, cache, 0);
}

/* Feeds tok[from, to) in one step; all logits into out (may be NULL). */
static void feed(wk_engine *e, wk_seq *s, const int32_t *tok, int from, int to, float *out) {
    char err[WK_ERRMSG_LEN] = "";
    wk_batch_item it = {s, tok + from, to - from, out != NULL};
    int n = wk_forward(e, &it, 1, out, err, sizeof err);
    CHECK_EQ_INT(n, out ? to - from : 0);
    if (n < 0) fprintf(stderr, "forward: %s\n", err);
}

/* A cold run: a new sequence fed tok[0..c] in the steps 0..c, c..d, d..n (so that its logits are
 * comparable, bit for bit, with a hit computed in the same steps), the logits of d..n into out. */
static void cold_run(wk_engine *e, const int32_t *tok, int c, int d, int n, float *out) {
    wk_seq *s = NULL;
    CHECK_EQ_INT(wk_seq_create(e, &s), 0);
    if (!s) return;
    feed(e, s, tok, 0, c, NULL);
    feed(e, s, tok, c, d, NULL);
    feed(e, s, tok, d, n, out);
    wk_seq_destroy(s);
}

static void calibrate(const char *model, const char *side) {
    wk_engine *e = open_engine(model, 16, 0, 0, NULL, false);
    CHECK(e != NULL);
    if (!e) return;
    char err[WK_ERRMSG_LEN] = "";
    wk_calib_params cp;
    wk_calib_params_default(&cp);
    wk_calib *c = NULL;
    int rc = wk_calib_create(e, &cp, &c, err, sizeof err);
    int32_t tok[64];
    for (int k = 0; !rc && k < 4; k++) tiny_model_tokens(tok, 64, 300 + (uint64_t)k), rc = wk_calib_add(c, tok, 64, err, sizeof err);
    wk_calib_report rep;
    if (!rc) rc = wk_calib_finish(c, side, &rep, err, sizeof err);
    CHECK_EQ_INT(rc, 0);
    if (rc) fprintf(stderr, "calibrate: %s\n", err);
    wk_calib_destroy(c);
    wk_engine_close(e);
}

static uint64_t used_blocks(const wk_engine *e) {
    wk_kv_usage u;
    wk_engine_kv_usage(e, 0, &u);
    return u.used_blocks;
}

/* The hits of one format against its cold runs (the file's first comment). */
static void hits_match_cold(const char *model, int bits, const char *wush, const char *label) {
    int32_t tok[N], alt[N];
    tiny_model_tokens(tok, N, 5);
    memcpy(alt, tok, sizeof alt);
    for (int i = P; i < N; i++) alt[i] = tok[(i * 7) % P] ^ 1; /* the same 48 tokens, then others */

    wk_engine *e = open_engine(model, bits, 0, 0, wush, true);
    CHECK(e != NULL);
    if (e) {
        const wk_model_info *info = wk_engine_info(e);
        const int V = info->n_vocab, R = N - P;
        CHECK(info->prefix_cache);
        CHECK_EQ_INT(info->kv_block_tokens, 16);
        CHECK_EQ_INT(info->kv_swa_groups, 5); /* the hybrid case: 1 full-attention group, 5 sliding */
        CHECK_EQ_INT(info->kv_swa_window, 16);
        float *shared = malloc(sizeof(float) * R * V), *cached = malloc(sizeof(float) * R * V);
        float *cold = malloc(sizeof(float) * R * V), *longer = malloc(sizeof(float) * (N - 80) * V);
        float *cold80 = malloc(sizeof(float) * (N - 80) * V);
        wk_seq *a = NULL, *b = NULL, *c = NULL, *d = NULL;

        /* A: the 48 tokens in one step, then 22 others: its blocks 0..2 are B's prefix. */
        CHECK_EQ_INT(wk_seq_create(e, &a), 0);
        feed(e, a, alt, 0, P, NULL);
        feed(e, a, alt, P, 70, NULL);
        const uint64_t a_blocks = used_blocks(e);
        /* B while A lives: 48 tokens by reference (not 64: block 3 differs), the rest computed. */
        CHECK_EQ_INT(wk_seq_create(e, &b), 0);
        CHECK_EQ_INT(wk_seq_prefix_attach(b, tok, N - 1), P);
        CHECK_EQ_INT(wk_seq_len(b), P);
        CHECK_EQ_INT(wk_seq_prefix_attach(b, tok, N - 1), 0); /* not empty */
        /* The full group shares A's blocks 0..2 (held once, not twice); each sliding group takes
         * the one block its window shows (block 2, positions 32..47; the query at 48 reads
         * 33..48), which A at 70 tokens had already let go: cached, now back in use. */
        CHECK_EQ_INT(used_blocks(e), a_blocks + 5);
        CHECK_EQ_INT(wk_seq_kv_bytes(b), (uint64_t)(3 + 5) * info->kv_block_bytes);
        feed(e, b, tok, P, N, shared);
        wk_seq_destroy(a);
        wk_seq_destroy(b);
        wk_kv_usage u;
        wk_engine_kv_usage(e, 0, &u);
        CHECK(u.used_blocks == 0 && u.cached_blocks > 0 && u.cached_bytes == u.cached_blocks * info->kv_block_bytes);
        CHECK_EQ_INT(u.used_blocks + u.cached_blocks + u.free_blocks, info->kv_pool_blocks);

        /* C: the same 48 tokens from blocks only the cache keeps (capped at 60 tokens: 3 blocks). */
        CHECK_EQ_INT(wk_seq_create(e, &c), 0);
        CHECK_EQ_INT(wk_seq_prefix_attach(c, tok, 60), P);
        feed(e, c, tok, P, N, cached);
        wk_seq_destroy(c);

        /* Longer: B's blocks 3 and 4 (its tokens 48..79) are cached now too. */
        CHECK_EQ_INT(wk_seq_create(e, &c), 0);
        CHECK_EQ_INT(wk_seq_prefix_attach(c, tok, N - 1), 80);
        feed(e, c, tok, 80, N, longer);
        wk_seq_destroy(c);

        /* Cold: after a flush nothing is found; fed in the same two steps as B. */
        wk_engine_prefix_cache_flush(e);
        wk_engine_kv_usage(e, 0, &u);
        CHECK_EQ_INT(u.cached_blocks, 0);
        CHECK_EQ_INT(u.free_blocks, info->kv_pool_blocks);
        CHECK_EQ_INT(wk_seq_create(e, &d), 0);
        CHECK_EQ_INT(wk_seq_prefix_attach(d, tok, N - 1), 0);
        feed(e, d, tok, 0, P, NULL);
        feed(e, d, tok, P, N, cold);
        wk_seq_destroy(d);
        /* A cold run in three steps (0..48, 48..80, 80..90), against the hit at 80. */
        wk_engine_prefix_cache_flush(e);
        cold_run(e, tok, P, 80, N, cold80);

        CHECK(memcmp(shared, cold, sizeof(float) * R * V) == 0);
        CHECK(memcmp(cached, cold, sizeof(float) * R * V) == 0);
        CHECK(memcmp(longer, cold80, sizeof(float) * (N - 80) * V) == 0);
        /* The hit is not a no-op: feeding 48..90 from nothing gives other logits. */
        CHECK_EQ_INT(wk_seq_create(e, &d), 0);
        feed(e, d, tok, P, N, cached);
        wk_seq_destroy(d);
        CHECK(memcmp(cached, cold, sizeof(float) * R * V) != 0);
        printf("%s, 5 sliding groups: a hit of %d tokens (shared or cached) and of 80 gives the cold "
               "logits bit for bit\n", label, P);
        free(shared), free(cached), free(cold), free(longer), free(cold80);
        wk_engine_close(e);
    }

}

static wk_kv_usage usage(const wk_engine *e, int pool) {
    wk_kv_usage u;
    wk_engine_kv_usage(e, pool, &u);
    return u;
}

/* A turn as a server runs it: the prompt tok[0, p) in one step, then `decode` single-token steps
 * (the answer). */
static void turn(wk_engine *e, wk_seq *s, const int32_t *tok, int from, int p, int decode) {
    feed(e, s, tok, from, p, NULL);
    for (int i = p; i < p + decode; i++) feed(e, s, tok, i, i + 1, NULL);
}

enum { T1 = 30, A1 = 10, L1 = T1 + A1, T2 = 70 };

/* Parking (design 1) on a windowed format, sink 4 + recent 16 and the tiny model's sliding window
 * of 16 (the file's first comment). */
static void park_matches_cold(const char *model, const char *wush, const char *label) {
    wk_engine *e = open_engine(model, 2, 4, 16, wush, true);
    CHECK(e != NULL);
    if (!e) return;
    const wk_model_info *info = wk_engine_info(e);
    const int V = info->n_vocab, R = T2 - L1;
    CHECK(info->prefix_cache && info->prefix_cache_park);
    int32_t tok[T2], div[T2];
    tiny_model_tokens(tok, T2, 77);
    float *warm = malloc(sizeof(float) * T2 * V), *cold = malloc(sizeof(float) * T2 * V);
    wk_seq *a = NULL, *b = NULL;

    /* Turn 1 (30 prompt tokens, 10 answered), parked: its blocks and window slot count as cached,
     * beside the named blocks its sliding groups let go (cached already). */
    CHECK_EQ_INT(wk_seq_create(e, &a), 0);
    turn(e, a, tok, 0, T1, A1);
    const uint64_t a_bytes = wk_seq_kv_bytes(a);
    const uint64_t a_blocks = usage(e, 0).used_blocks;
    const wk_kv_usage u0 = usage(e, 0);
    wk_seq_park(a);
    wk_kv_usage u = usage(e, 0);
    CHECK_EQ_INT(u.used_blocks, 0);
    CHECK_EQ_INT(u.used_windows, 0);
    CHECK_EQ_INT(u.used_bytes, 0);
    CHECK_EQ_INT(u.cached_blocks, u0.cached_blocks + a_blocks);
    CHECK_EQ_INT(u.cached_windows, 1);
    CHECK_EQ_INT(u.parked_seqs, 1);
    CHECK_EQ_INT(u.cached_bytes, u0.cached_bytes + a_bytes);
    /* The block form is off: nothing named, nothing found. */
    CHECK_EQ_INT(wk_seq_create(e, &b), 0);
    CHECK_EQ_INT(wk_seq_prefix_attach(b, tok, T2 - 1), 0);
    wk_seq_destroy(b);

    /* Turn 2 extends all 40 tokens: it adopts the parked sequence itself, and the 30 new tokens
     * in one step give the logits of a sequence that ran both turns cold. */
    CHECK_EQ_INT(wk_seq_create_prefix(e, tok, T2 - 1, &b), L1);
    CHECK(b == a);
    CHECK_EQ_INT(wk_seq_len(b), L1);
    CHECK_EQ_INT(usage(e, 0).parked_seqs, 0);
    CHECK_EQ_INT(usage(e, 0).used_blocks, a_blocks);
    CHECK_EQ_INT(wk_seq_kv_bytes(b), a_bytes);
    feed(e, b, tok, L1, T2, warm);
    wk_seq_park(b);
    /* A flush drops parked sequences: every block free, no window slot held. */
    wk_engine_prefix_cache_flush(e);
    u = usage(e, 0);
    CHECK_EQ_INT(u.parked_seqs, 0);
    CHECK_EQ_INT(u.cached_blocks, 0);
    CHECK_EQ_INT(u.used_windows + u.cached_windows, 0);
    CHECK_EQ_INT(u.free_blocks, info->kv_pool_blocks);
    CHECK_EQ_INT(wk_seq_create_prefix(e, tok, T2 - 1, &b), 0);
    turn(e, b, tok, 0, T1, A1);
    feed(e, b, tok, L1, T2, cold);
    CHECK(memcmp(warm, cold, sizeof(float) * R * V) == 0);
    /* ... and the adoption is not a no-op: the same 30 tokens from nothing differ. */
    wk_seq_reset(b);
    feed(e, b, tok, L1, T2, warm);
    CHECK(memcmp(warm, cold, sizeof(float) * R * V) != 0);
    wk_seq_destroy(b);

    /* A prompt that diverges inside the parked 40 tokens, below what the ring still holds (rows
     * of positions 24..39): at 33 (the query at 33 needs rows 18..32; its sliding window's blocks,
     * positions >= 18, are still there) and at 25 (nor is block 0 of the sliding groups): no
     * adoption, the parked one stays. */
    CHECK_EQ_INT(wk_seq_create(e, &a), 0);
    turn(e, a, tok, 0, T1, A1);
    wk_seq_park(a);
    for (int at = 33; at >= 25; at -= 8) {
        memcpy(div, tok, sizeof div);
        div[at] ^= 1;
        CHECK_EQ_INT(wk_seq_create_prefix(e, div, T2 - 1, &b), 0);
        CHECK(b != a);
        CHECK_EQ_INT(usage(e, 0).parked_seqs, 1);
        wk_seq_destroy(b);
    }
    /* Diverging at 39 (the answer's last token differs): the query at 39 reads ring rows 24..38,
     * all there, and its sliding window's blocks (positions >= 24): it adopts 39 tokens, exact. */
    memcpy(div, tok, sizeof div);
    div[39] ^= 1;
    CHECK_EQ_INT(wk_seq_create_prefix(e, div, T2 - 1, &b), L1 - 1);
    CHECK(b == a);
    feed(e, b, div, L1 - 1, T2, warm);
    wk_seq_destroy(b);
    CHECK_EQ_INT(wk_seq_create(e, &b), 0);
    feed(e, b, div, 0, T1, NULL);
    for (int i = T1; i < L1 - 1; i++) feed(e, b, div, i, i + 1, NULL);
    feed(e, b, div, L1 - 1, T2, cold);
    wk_seq_destroy(b);
    CHECK(memcmp(warm, cold, sizeof(float) * (R + 1) * V) == 0);
    /* A short parked sequence (18 <= sink + recent tokens: the ring never wrapped) serves any start,
     * but only a start of at least half its tokens is worth taking it away from its conversation:
     * a prompt diverging at 8 adopts nothing, one diverging at 10 adopts 10 tokens. */
    CHECK_EQ_INT(wk_seq_create(e, &a), 0);
    feed(e, a, tok, 0, 18, NULL);
    wk_seq_park(a);
    memcpy(div, tok, sizeof div);
    div[8] ^= 1;
    CHECK_EQ_INT(wk_seq_create_prefix(e, div, T2 - 1, &b), 0);
    CHECK(b != a);
    wk_seq_destroy(b);
    wk_engine_prefix_cache_flush(e);
    CHECK_EQ_INT(wk_seq_create(e, &a), 0);
    feed(e, a, tok, 0, 18, NULL);
    wk_seq_park(a);
    memcpy(div, tok, sizeof div);
    div[10] ^= 1;
    CHECK_EQ_INT(wk_seq_create_prefix(e, div, T2 - 1, &b), 10);
    CHECK(b == a);
    feed(e, b, div, 10, T2, warm);
    wk_seq_destroy(b);
    CHECK_EQ_INT(wk_seq_create(e, &b), 0);
    feed(e, b, div, 0, 10, NULL);
    feed(e, b, div, 10, T2, cold);
    wk_seq_destroy(b);
    CHECK(memcmp(warm, cold, sizeof(float) * (T2 - 10) * V) == 0);
    wk_engine_prefix_cache_flush(e);
    CHECK_EQ_INT(usage(e, 0).free_blocks, info->kv_pool_blocks);

    /* Parked sequences give way: 4 of them park, 4 new sequences still get a slot each. */
    wk_seq *s4[4] = {0};
    for (int k = 0; k < 4; k++) {
        CHECK_EQ_INT(wk_seq_create(e, &s4[k]), 0);
        if (s4[k]) feed(e, s4[k], tok, 0, 20 + k, NULL);
    }
    for (int k = 0; k < 4; k++) wk_seq_park(s4[k]);
    CHECK_EQ_INT(usage(e, 0).parked_seqs, 4);
    for (int k = 0; k < 4; k++) CHECK_EQ_INT(wk_seq_create(e, &s4[k]), 0);
    CHECK_EQ_INT(usage(e, 0).parked_seqs, 0);
    for (int k = 0; k < 4; k++) wk_seq_destroy(s4[k]);
    printf("%s, sink 4 + recent 16: a parked 40-token turn adopted by the next turn, and one cut back to "
           "39 and to 10 tokens, give the cold logits bit for bit; divergences at 33 and 25 adopt nothing\n", label);
    free(warm), free(cold);
    const uint64_t block = info->kv_block_bytes, window = info->kv_window_bytes;
    wk_engine_close(e);

    /* Pool pressure: a pool of 4 window slots and 32 blocks. A parked sequence of 100 tokens
     * holds 17 (7 of the global group, 2 of each sliding one); a new one of 120 written 8 at a time
     * needs 23 at its peak (8 + 3 per sliding group): only if the parked one gives its blocks up. */
    e = open_engine_mem(model, 2, 4, 16, wush, true, 4 * window + 32 * block);
    CHECK(e != NULL);
    if (!e) return;
    int32_t big[120];
    tiny_model_tokens(big, 120, 99);
    CHECK_EQ_INT(wk_engine_info(e)->kv_pool_blocks, 32);
    CHECK_EQ_INT(wk_seq_create(e, &a), 0);
    for (int i = 0; i < 100; i += 20) feed(e, a, big, i, i + 20, NULL);
    const uint64_t named = usage(e, 0).cached_blocks; /* what its sliding groups let go */
    wk_seq_park(a);
    CHECK_EQ_INT(usage(e, 0).parked_seqs, 1);
    CHECK_EQ_INT(usage(e, 0).cached_blocks, named + 17);
    CHECK_EQ_INT(wk_seq_create_prefix(e, tok, T2 - 1, &b), 0); /* tok does not extend big */
    CHECK_EQ_INT(usage(e, 0).parked_seqs, 1);
    for (int i = 0; i < 120; i += 8) feed(e, b, big, i, i + 8, NULL);
    CHECK_EQ_INT(wk_seq_len(b), 120);
    CHECK_EQ_INT(usage(e, 0).parked_seqs, 0);
    wk_seq_park(b);
    wk_engine_prefix_cache_flush(e);
    u = usage(e, 0);
    CHECK_EQ_INT(u.free_blocks, 32);
    CHECK_EQ_INT(u.used_windows + u.cached_windows, 0);
    wk_engine_close(e);
}

/* Feeds tok[from, to) the way the scheduler does: a step ends at every snapshot point of s
 * (wk_seq_snapshot_next) and at most `chunk` tokens long. The last step's logits into out. */
static void feed_snap(wk_engine *e, wk_seq *s, const int32_t *tok, int from, int to, int chunk, float *out) {
    while (from < to) {
        int end = from + chunk < to ? from + chunk : to;
        const int stop = wk_seq_snapshot_next(s);
        if (stop > from && stop < end) end = stop;
        feed(e, s, tok, from, end, end == to ? out : NULL);
        from = end;
    }
}

enum { SN = 90, SYS = 64 };

/* Design 3 on a windowed format (the file's first comment). */
static void snap_matches_cold(const char *model, const char *wush, int sink, int recent, const char *label) {
    wk_engine *e = open_engine(model, 2, sink, recent, wush, true);
    CHECK(e != NULL);
    if (!e) return;
    const wk_model_info *info = wk_engine_info(e);
    const int V = info->n_vocab;
    CHECK_EQ_INT(info->kv_snapshots, 8); /* two per sequence slot */
    CHECK_EQ_INT(info->kv_snapshot_bytes, 8 * info->kv_window_bytes);
    int32_t ta[SN], tb[SN], tc[SN];
    tiny_model_tokens(ta, SN, 11);
    tiny_model_tokens(tb, SN, 12);
    memcpy(tb, ta, SYS * sizeof *tb); /* a 64-token system prompt, then another conversation */
    memcpy(tc, ta, sizeof tc);
    tc[85] ^= 1; /* A's prompt, but for its last 5 tokens */
    const int last = SN - 80; /* logits compared: the last step's, 80..90 */
    float *warm = malloc(sizeof(float) * last * V), *cold = malloc(sizeof(float) * last * V);
    wk_seq *a = NULL, *b = NULL, *c = NULL;

    /* A, cold, with its system prompt's end as a snapshot point (what the server hints) and its
     * prompt's last block boundary (80, set by create_prefix): snapshots at 64 and 80. */
    CHECK_EQ_INT(wk_seq_create_prefix(e, ta, SN - 1, &a), 0);
    CHECK_EQ_INT(wk_seq_snapshot_at(a, SYS + 3), SYS); /* rounded down to a block */
    CHECK_EQ_INT(wk_seq_snapshot_next(a), SYS);
    feed_snap(e, a, ta, 0, SN, 64, NULL);
    CHECK_EQ_INT(wk_seq_snapshot_next(a), 0);
    CHECK_EQ_INT(usage(e, 0).snapshots, 2);
    CHECK_EQ_INT(usage(e, 0).snapshot_bytes, 2 * info->kv_window_bytes);
    CHECK_EQ_INT(wk_seq_snapshot_at(a, 40), 0); /* behind it */

    /* B while A lives: its blocks 0..3 by reference and the window at 64; then cold logits. */
    CHECK_EQ_INT(wk_seq_create_prefix(e, tb, SN - 1, &b), SYS);
    CHECK_EQ_INT(wk_seq_snapshot_next(b), 80);
    feed_snap(e, b, tb, SYS, SN, 64, warm);
    wk_seq_destroy(b);
    /* C: A's prompt but for its last 5 tokens, A parked. Parking cannot serve it (A's ring lost
     * the rows of 70..73), its blocks 0..4 are there and 80 has a snapshot: a hit of 80. */
    wk_seq_park(a);
    CHECK_EQ_INT(wk_seq_create_prefix(e, tc, SN - 1, &c), 80);
    CHECK(usage(e, 0).used_blocks > 0); /* blocks of A's that C holds are in use */
    feed_snap(e, c, tc, 80, SN, 64, NULL);
    /* C parked too: blocks only parked sequences hold, shared or not, are cached, not used. */
    wk_seq_park(c);
    CHECK_EQ_INT(usage(e, 0).used_blocks, 0);
    CHECK_EQ_INT(usage(e, 0).used_bytes, 0);
    CHECK_EQ_INT(usage(e, 0).parked_seqs, 2);
    /* Y: the system prompt and 26 tokens of its own, fed with no snapshot point: its blocks 0..4
     * are cached, but a prompt of its first 85 tokens hits only at 64, its chain's last snapshot. */
    int32_t ty[SN];
    tiny_model_tokens(ty, SN, 14);
    memcpy(ty, ta, SYS * sizeof *ty);
    CHECK_EQ_INT(wk_seq_create(e, &c), 0);
    feed(e, c, ty, 0, 48, NULL);
    feed(e, c, ty, 48, SN, NULL);
    wk_seq_destroy(c);
    ty[85] ^= 1;
    CHECK_EQ_INT(wk_seq_create_prefix(e, ty, SN - 1, &c), SYS);
    wk_seq_destroy(c);

    /* Cold: after a flush no block, no snapshot; B fed in the same steps (0..64, 64..80, 80..90). */
    wk_engine_prefix_cache_flush(e);
    wk_kv_usage u = usage(e, 0);
    CHECK_EQ_INT(u.snapshots, 0);
    CHECK_EQ_INT(u.snapshot_bytes, 0);
    CHECK_EQ_INT(u.cached_blocks, 0);
    CHECK_EQ_INT(u.free_blocks, info->kv_pool_blocks);
    cold_run(e, tb, SYS, 80, SN, cold);
    CHECK(memcmp(warm, cold, sizeof(float) * last * V) == 0);
    /* No snapshot, no hit, however many blocks are cached. */
    wk_engine_prefix_cache_flush(e);
    CHECK_EQ_INT(wk_seq_create(e, &a), 0);
    feed(e, a, ta, 0, SYS, NULL);
    feed(e, a, ta, SYS, SN, NULL);
    CHECK_EQ_INT(wk_seq_create(e, &b), 0);
    CHECK_EQ_INT(wk_seq_prefix_attach(b, tb, SN - 1), 0); /* no snapshot: no hit */
    wk_seq_destroy(b);
    wk_seq_destroy(a);
    wk_engine_prefix_cache_flush(e);
    printf("%s, sink %d + recent %d: a shared 64-token start taken at its snapshot gives the cold logits bit for "
           "bit; hits only at snapshot points (64, 80)\n", label, sink, recent);
    const uint64_t block = info->kv_block_bytes, window = info->kv_window_bytes;
    wk_engine_close(e);

    /* Eviction: a pool of 4 window slots and 20 blocks. A's 64 tokens, fed 16 at a time, leave
     * their blocks cached with a snapshot at 64; X, 96 other tokens fed 16 at a time, allocates 36
     * blocks (6 global, 6 in each sliding group, holding at most 16 at once), so every block A
     * left goes, least recently released first, and the snapshot with the global group's block 3. */
    e = open_engine_mem(model, 2, sink, recent, wush, true, 4 * window + 20 * block);
    CHECK(e != NULL);
    if (!e) return;
    CHECK_EQ_INT(wk_engine_info(e)->kv_pool_blocks, 20);
    CHECK_EQ_INT(wk_seq_create_prefix(e, ta, SYS + 1, &a), 0); /* its prompt's end: 64 */
    feed_snap(e, a, ta, 0, SYS, 16, NULL);
    wk_seq_destroy(a);
    CHECK_EQ_INT(usage(e, 0).snapshots, 1);
    int32_t tx[96];
    tiny_model_tokens(tx, 96, 13);
    wk_seq *x = NULL;
    CHECK_EQ_INT(wk_seq_create(e, &x), 0);
    feed_snap(e, x, tx, 0, 96, 16, NULL);
    CHECK_EQ_INT(usage(e, 0).snapshots, 0);
    CHECK_EQ_INT(wk_seq_create_prefix(e, tb, SN - 1, &b), 0);
    wk_seq_destroy(b);
    wk_seq_destroy(x);
    wk_engine_prefix_cache_flush(e);
    u = usage(e, 0);
    CHECK_EQ_INT(u.free_blocks, 20);
    CHECK_EQ_INT(u.snapshots + u.cached_windows + u.used_windows, 0);
    wk_engine_close(e);
    free(warm), free(cold);
}

int main(void) {
    char model[64], side[64];
    temp_path(model, sizeof model, "prefix_model");
    temp_path(side, sizeof side, "prefix_side");
    tiny_model_opts o = {.arch = "gemma3", .seed = 41, .mixed_quants = true, .sliding_window = 16};
    CHECK(tiny_model_write(&o, model));
    calibrate(model, side);

    hits_match_cold(model, 2, side, "int2 + WUSH");
    hits_match_cold(model, 16, NULL, "f16");

    int32_t tok[N];
    tiny_model_tokens(tok, N, 5);
    park_matches_cold(model, side, "int2 + WUSH");
    park_matches_cold(model, NULL, "int2");
    snap_matches_cold(model, side, 4, 16, "int2 + WUSH");
    snap_matches_cold(model, NULL, 4, 64, "int2");

    /* f16 windows: blocks are named, but without a snapshot no block hits (the ring rows are no
     * block's); --no-prefix-cache
     * (windows or not): off, nothing parked. */
    wk_engine *w = open_engine(model, 2, 4, 16, NULL, true);
    wk_engine *off = open_engine(model, 2, 0, 0, NULL, false);
    wk_engine *woff = open_engine(model, 2, 4, 16, NULL, false);
    CHECK(w && off && woff);
    if (w && off && woff) {
        CHECK(wk_engine_info(w)->prefix_cache && wk_engine_info(w)->prefix_cache_park);
        CHECK(!wk_engine_info(off)->prefix_cache);
        CHECK(!wk_engine_info(woff)->prefix_cache && !wk_engine_info(woff)->prefix_cache_park);
        wk_seq *s = NULL;
        CHECK_EQ_INT(wk_seq_create(woff, &s), 0);
        feed(woff, s, tok, 0, P, NULL);
        wk_seq_park(s);
        CHECK_EQ_INT(usage(woff, 0).parked_seqs, 0);
        CHECK_EQ_INT(usage(woff, 0).free_blocks, wk_engine_info(woff)->kv_pool_blocks);
        CHECK_EQ_INT(wk_seq_create_prefix(woff, tok, N - 1, &s), 0);
        wk_seq_destroy(s);
        wk_engine *es[2] = {w, off};
        for (int k = 0; k < 2; k++) {
            wk_seq *s = NULL;
            CHECK_EQ_INT(wk_seq_create(es[k], &s), 0);
            feed(es[k], s, tok, 0, P, NULL);
            wk_seq_reset(s);
            CHECK_EQ_INT(wk_seq_prefix_attach(s, tok, N - 1), 0);
            wk_kv_usage u;
            wk_engine_kv_usage(es[k], 0, &u);
            CHECK(k == 0 ? u.cached_blocks > 0 : u.cached_blocks == 0);
            wk_seq_destroy(s);
        }
    }
    wk_engine_close(w);
    wk_engine_close(off);
    wk_engine_close(woff);
    unlink(model);
    unlink(side);
    TEST_MAIN_END();
}
