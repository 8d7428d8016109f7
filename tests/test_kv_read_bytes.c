/* The KV bytes one decode step's attention reads (wk_kv_cache_step_read_bytes, which `wushkv bench`
 * reports per depth): against a key-by-key count that mirrors attention_paged.comp's load_kv (f16
 * window row, codes and parameters, or the step's own activations) for f16, int2/3/4 with and
 * without windows, per-layer-class formats and a GQA group wider than a tile, at every position
 * across the sliding window's and the windows' edges; and Gemma 3 270M's figures at depth 8192
 * computed by hand. No device: the cache structs are filled from the pool layout alone. */
#include <stdint.h>
#include <string.h>

#include "kv/attention_plan.h"
#include "kv/kv_cache.h"
#include "kv/kv_pool.h"
#include "test_util.h"
#include "wushkv/wushkv.h"

/* Gemma 3 270M's shape: 18 layers, every sixth full attention, the rest sliding over 512. */
static void gemma_hp(wk_hparams *hp, int n_head, int window) {
    memset(hp, 0, sizeof *hp);
    hp->n_layer = 18;
    hp->n_head = n_head;
    hp->n_head_kv = 1;
    hp->head_dim = 256;
    hp->sliding_window = window;
    for (int il = 0; il < hp->n_layer; il++) hp->is_swa[il] = il % 6 != 5;
}

/* A cache struct as wk_kv_cache_create_paged lays it out, without a device. swa_bits 0: one format.
 * *pool_out: the sliding pool (the struct names it; freed by the caller). */
static int paged_classes(wk_kv_cache *kv, const wk_hparams *hp, int bits, int swa_bits, int sink, int recent,
                         int swa_sink, int swa_recent, int max_ctx, wk_kv_pool **pool_out) {
    memset(kv, 0, sizeof *kv);
    *pool_out = NULL;
    kv->fmt = (wk_kv_fmt){.bits = bits, .kind = WK_KVQ_QUEST, .group = 32, .sink = sink, .recent = recent,
                          .swa_sink = swa_sink, .swa_recent = swa_recent};
    wk_kv_geom g = {.n_layer = hp->n_layer, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .block_tokens = 16};
    g.swa_layers = wk_kv_win_layers(hp->is_swa, hp->n_layer, hp->sliding_window, kv->win_class_of, kv->win_layer_of);
    wk_kv_layer_groups(hp->is_swa, hp->n_layer, hp->sliding_window, swa_bits ? INT32_MAX : max_ctx, kv->group_of,
                       kv->slot_of, &g);
    if (wk_kv_layout_get(&g, &kv->fmt, &kv->layout) != 0) return -1;
    if (swa_bits) {
        kv->swa_fmt = (wk_kv_fmt){.bits = swa_bits, .kind = WK_KVQ_QUEST, .group = 32};
        if (wk_kv_layout_get(&g, &kv->swa_fmt, &kv->swa_layout) != 0 ||
            wk_kv_layout_set_swa(&kv->layout, &kv->swa_layout) != 0)
            return -1;
        wk_kv_pool_params pp;
        wk_kv_pool_params_from_layout(&kv->swa_layout, 64 * kv->swa_layout.bytes_per_block, 0, &pp);
        if (wk_kv_pool_create(&pp, pool_out) != 0) return -1;
        kv->swa_pool = *pool_out;
    }
    return 0;
}

/* paged_classes with the same windows for every layer. */
static int paged(wk_kv_cache *kv, const wk_hparams *hp, int bits, int swa_bits, int sink, int recent, int max_ctx,
                 wk_kv_pool **pool_out) {
    return paged_classes(kv, hp, bits, swa_bits, sink, recent, sink, recent, max_ctx, pool_out);
}

/* attention_paged.comp for one query at pos (every format): every key j it can see, and for
 * each the bytes load_kv fetches from the cache, K and V, once per head chunk. */
static uint64_t by_key(const wk_kv_cache *kv, const wk_hparams *hp, uint64_t pos) {
    const uint64_t hpk = (uint64_t)(hp->n_head / hp->n_head_kv);
    const uint64_t rows = hpk < WK_ATTN_MAXR ? hpk : WK_ATTN_MAXR, chunks = (hpk + rows - 1) / rows;
    uint64_t total = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        uint64_t first = 0;
        if (hp->is_swa[il] && pos + 1 > (uint64_t)hp->sliding_window) first = pos + 1 - (uint64_t)hp->sliding_window;
        const bool own = kv->fmt.bits != 16 && wk_kv_cache_group_swa(kv, kv->group_of[il]);
        const wk_kvq_block_layout *q = own ? &kv->swa_layout.q : &kv->layout.q;
        const wk_kv_win *w = &kv->layout.win[kv->win_class_of[il]];
        const uint64_t sink = (uint64_t)w->sink, recent = (uint64_t)w->recent;
        const bool windows = sink + recent > 0;
        for (uint64_t j = first; j <= pos; j++) {
            uint64_t b;
            if (kv->fmt.bits == 16) b = (uint64_t)hp->head_dim * 2;
            else if (!windows || (j >= sink && j + recent <= pos)) b = q->code_bytes_per_token + q->param_bytes_per_token;
            else if (j == pos) b = 0; /* the step's own key: from the activations */
            else b = (uint64_t)hp->head_dim * 2;
            total += b * 2 * (uint64_t)hp->n_head_kv * chunks;
        }
    }
    return total;
}

static void sweep(const wk_kv_cache *kv, const wk_hparams *hp, const char *what) {
    int bad = 0;
    for (uint64_t pos = 0; pos < 1100 && bad < 3; pos++) {
        uint64_t got = wk_kv_cache_step_read_bytes(kv, hp, pos), want = by_key(kv, hp, pos);
        if (got != want) {
            fprintf(stderr, "%s at pos %llu: %llu bytes, key by key %llu\n", what, (unsigned long long)pos,
                    (unsigned long long)got, (unsigned long long)want);
            bad++;
        }
    }
    CHECK(bad == 0);
}

static void test_against_key_by_key(void) {
    wk_hparams hp;
    wk_kv_cache kv;
    wk_kv_pool *pool = NULL;
    gemma_hp(&hp, 4, 512);
    memset(&kv, 0, sizeof kv);
    kv.fmt.bits = 16; /* the f16 pool: every key an f16 row */
    sweep(&kv, &hp, "f16");
    static const int fmts[][4] = {{2, 0, 0, 0}, {2, 0, 4, 64}, {3, 0, 4, 64}, {4, 0, 0, 16},
                                  {2, 0, 0, 600}, {2, 3, 4, 64}, {4, 2, 0, 0}};
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "int%d swa int%d sink%d recent%d", fmts[i][0], fmts[i][1], fmts[i][2], fmts[i][3]);
        CHECK(paged(&kv, &hp, fmts[i][0], fmts[i][1], fmts[i][2], fmts[i][3], 4096, &pool) == 0);
        sweep(&kv, &hp, what);
        wk_kv_pool_destroy(pool);
    }
    /* A GQA group of 32 query heads per KV head: two head chunks read every key twice. */
    gemma_hp(&hp, 32, 512);
    CHECK(paged(&kv, &hp, 2, 0, 4, 64, 4096, &pool) == 0);
    sweep(&kv, &hp, "int2, 32 heads per KV head");
    const uint64_t wide = wk_kv_cache_step_read_bytes(&kv, &hp, 1000);
    hp.n_head = 4;
    CHECK(wide == 2 * wk_kv_cache_step_read_bytes(&kv, &hp, 1000));
    wk_kv_pool_destroy(pool);
}

/* Depth 8192 on Gemma 3 270M (3 full layers, 15 sliding over 512; one KV head of 256): the query
 * sees 8193 keys in a full layer, 512 in a sliding one. f16: 512 bytes per key or value.
 * int2 quest G32: 64 bytes of codes + 8 f16 scales = 80; with sink 4 and recent 64 a full layer
 * reads 4 + 63 earlier keys in f16 and 8192 - 67 as codes, a sliding one 63 in f16 and
 * 511 - 63 as codes (its sinks are out of the window), the step's own key from activations. */
static void test_gemma_by_hand(void) {
    wk_hparams hp;
    wk_kv_cache kv;
    wk_kv_pool *pool = NULL;
    gemma_hp(&hp, 4, 512);
    memset(&kv, 0, sizeof kv);
    kv.fmt.bits = 16; /* the f16 pool: every key an f16 row */
    CHECK(wk_kv_cache_step_read_bytes(&kv, &hp, 8192) == 3ull * 8193 * 2 * 512 + 15ull * 512 * 2 * 512);
    CHECK(paged(&kv, &hp, 2, 0, 0, 0, 8704, &pool) == 0);
    CHECK(wk_kv_cache_step_read_bytes(&kv, &hp, 8192) == 3ull * 8193 * 2 * 80 + 15ull * 512 * 2 * 80);
    CHECK(paged(&kv, &hp, 2, 0, 4, 64, 8704, &pool) == 0);
    CHECK(wk_kv_cache_step_read_bytes(&kv, &hp, 8192) ==
          3ull * 2 * (67 * 512 + 8125 * 80) + 15ull * 2 * (63 * 512 + 448 * 80));
    /* Windows per layer class: the full layers keep 4 / 64, the sliding ones none (every key of
     * their window as codes, their own too), then the other way round (sliding 0 / 32: 31 earlier
     * keys in f16, 480 as codes). */
    wk_kv_pool_destroy(pool);
    CHECK(paged_classes(&kv, &hp, 2, 0, 4, 64, 0, 0, 8704, &pool) == 0);
    CHECK(wk_kv_cache_step_read_bytes(&kv, &hp, 8192) == 3ull * 2 * (67 * 512 + 8125 * 80) + 15ull * 512 * 2 * 80);
    wk_kv_pool_destroy(pool);
    CHECK(paged_classes(&kv, &hp, 2, 0, 0, 0, 0, 32, 8704, &pool) == 0);
    CHECK(wk_kv_cache_step_read_bytes(&kv, &hp, 8192) == 3ull * 8193 * 2 * 80 + 15ull * 2 * (31 * 512 + 480 * 80));
    wk_kv_pool_destroy(pool);
    CHECK(paged(&kv, &hp, 2, 0, 4, 64, 8704, &pool) == 0);
    /* The figures docs/benchmarks.md quotes (the default format against f16, depths 2048, 8192, 32768). */
    static const uint64_t depth[3] = {2048, 8192, 32768};
    static const uint64_t f16_bytes[3] = {14158848, 33033216, 108530688}, int2_bytes[3] = {3199584, 6148704, 17945184};
    for (int i = 0; i < 3; i++) {
        CHECK(wk_kv_cache_step_read_bytes(&kv, &hp, depth[i]) == int2_bytes[i]);
        CHECK(3 * (depth[i] + 1) * 1024 + 15 * 512 * 1024 == f16_bytes[i]);
    }
    /* Depth 0: nothing cached yet; f16 and window-less codes read the new token's own row. */
    CHECK(wk_kv_cache_step_read_bytes(&kv, &hp, 0) == 0);
    kv.fmt.bits = 16; /* the f16 pool: every key an f16 row */
    CHECK(wk_kv_cache_step_read_bytes(&kv, &hp, 0) == 18ull * 2 * 512);
    for (int i = 0; i < 3; i++) CHECK(wk_kv_cache_step_read_bytes(&kv, &hp, depth[i]) == f16_bytes[i]);
}

int main(void) {
    test_against_key_by_key();
    test_gemma_by_hand();
    TEST_MAIN_END();
}
