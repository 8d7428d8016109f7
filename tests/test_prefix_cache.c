/* Automatic prefix caching through the public API, on the tiny gemma3 model (5 sliding-window
 * layers of window 16 and a global one) in int2 + WUSH: a sequence that takes a cached prefix of
 * 48 tokens -- blocks another sequence still holds, or blocks only the cache keeps -- gives logits
 * bit-identical to a cold sequence fed the same 48 tokens in one step and the rest in a second
 * (what "identical to cold" means: the same steps; kv_pool.h, docs/design.md); the sliding groups
 * take only the blocks their window still shows; shared blocks count once in the pool; a flush
 * forgets them; the same for the f16 cache (the same paged pool); formats with f16 windows have
 * caching off. */
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

static wk_engine *open_engine(const char *model, int bits, int sink, int recent, const char *wush, bool cache) {
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
    test_engine_params_from_env(&p);
    char err[WK_ERRMSG_LEN] = "";
    wk_engine *e = NULL;
    if (wk_engine_open(&p, &e, err, sizeof err)) fprintf(stderr, "open: %s\n", err);
    return e;
}

/* Feeds tok[from, to) in one step; all logits into out (may be NULL). */
static void feed(wk_engine *e, wk_seq *s, const int32_t *tok, int from, int to, float *out) {
    char err[WK_ERRMSG_LEN] = "";
    wk_batch_item it = {s, tok + from, to - from, out != NULL};
    int n = wk_forward(e, &it, 1, out, err, sizeof err);
    CHECK_EQ_INT(n, out ? to - from : 0);
    if (n < 0) fprintf(stderr, "forward: %s\n", err);
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
        CHECK_EQ_INT(wk_seq_create(e, &d), 0);
        feed(e, d, tok, 0, P, NULL);
        feed(e, d, tok, P, 80, NULL);
        feed(e, d, tok, 80, N, cold80);
        wk_seq_destroy(d);

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
    /* f16 windows: off (the ring rows are no block's); --no-prefix-cache: off. */
    wk_engine *w = open_engine(model, 2, 4, 16, NULL, true);
    wk_engine *off = open_engine(model, 2, 0, 0, NULL, false);
    CHECK(w && off);
    if (w && off) {
        CHECK(!wk_engine_info(w)->prefix_cache);
        CHECK(!wk_engine_info(off)->prefix_cache);
        wk_engine *es[2] = {w, off};
        for (int k = 0; k < 2; k++) {
            wk_seq *s = NULL;
            CHECK_EQ_INT(wk_seq_create(es[k], &s), 0);
            feed(es[k], s, tok, 0, P, NULL);
            wk_seq_reset(s);
            CHECK_EQ_INT(wk_seq_prefix_attach(s, tok, N - 1), 0);
            wk_kv_usage u;
            wk_engine_kv_usage(es[k], 0, &u);
            CHECK_EQ_INT(u.cached_blocks, 0);
            wk_seq_destroy(s);
        }
    }
    wk_engine_close(w);
    wk_engine_close(off);
    unlink(model);
    unlink(side);
    TEST_MAIN_END();
}
