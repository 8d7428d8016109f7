/* KV layout arithmetic: block sizes and bits/element of each format against hand-computed numbers,
 * layer groups (full-attention and sliding) and the peak a sliding group holds against a
 * simulation, per-class windows, per-class formats in two pools driven as the engine drives them,
 * and prefix-cache hits across layer groups (kv_prefix.h). */
#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_pool.h"
#include "kv/kv_prefix.h"
#include "kv_pool_test_util.h"
#include "test_util.h"
#include "wushkv/wushkv.h"

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
    wk_kv_fmt q2 = {2, WK_KVQ_QUEST, 32, 0, 0, 0, 0, 0, 0};
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
    wk_kv_fmt f16 = {16, WK_KVQ_QUEST, 0, 0, 0, 0, 0, 0, 0};
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
    wk_kv_fmt q2 = {2, WK_KVQ_QUEST, 32, 0, 0, 0, 0, 0, 0};
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
    wk_kv_fmt p2 = {2, WK_KVQ_PERCENTILE, 32, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &p2, &l), WK_OK);
    CHECK_EQ_INT(l.bytes_per_block, 55296);
    CHECK_NEAR(wk_kv_layout_bits_per_element(&l, 0), 3.0, 0);
    /* 3-bit absmax G64: 96 code bytes + 4 groups * 2 = 104 bytes; slab 1664; block 59904; 3.25. */
    wk_kv_fmt a3 = {3, WK_KVQ_ABSMAX, 64, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &a3, &l), WK_OK);
    CHECK_EQ_INT(l.bytes_per_block, 59904);
    CHECK_NEAR(wk_kv_layout_bits_per_element(&l, 0), 3.25, 0);

    /* f16 windows, 2-bit QuEST G32, sink 4, recent 64: each sequence also holds 68 f16 rows of
     * 18*2*256*2 = 18432 bytes = 1253376 bytes. At 2048 tokens: 5898240 + 1253376 = 7151616
     * bytes = 3492 bytes/token; bits/element = 2.5 + 68*16/2048 = 3.03125 exactly; 256 MiB holds
     * 268435456 / 7151616 = 37.5 -> 37 sequences. */
    wk_kv_fmt w2 = {2, WK_KVQ_QUEST, 32, 4, 64, 0, 0, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &w2, &l), WK_OK);
    CHECK_EQ_INT(l.f16_row_bytes, 18432);
    CHECK_EQ_INT(l.window_bytes, 1253376);
    CHECK_EQ_INT(wk_kv_layout_seq_bytes(&l, 2048), 7151616);
    CHECK_NEAR(wk_kv_layout_bits_per_element(&l, 2048), 3.03125, 0);
    CHECK_NEAR(wk_kv_layout_bytes_per_token(&l, 2048), 3492.0, 0);
    CHECK_EQ_INT(wk_kv_layout_seqs_fit(&l, 256ull << 20, 2048, 512), 37);
    CHECK_NEAR(l.block_bits_per_element, 2.5, 0); /* the windows are not hidden in the block figure */

    /* Windows per layer class (wk_kv_win): Gemma 3 270M's 3 global layers keep sink 64 / recent
     * 256 (OSCAR's), its 15 sliding layers none. A global row is 3*2*256*2 = 3072 bytes, so the
     * slot is 320*3072 = 983040 bytes (0.94 MiB), the sliding class has no region. At 32768
     * tokens: 16 * 7680 * 2048 + 983040 bytes. */
    wk_kv_geom g270 = GEMMA270;
    bool swa18[18];
    int cls[18], idx[18];
    for (int il = 0; il < 18; il++) swa18[il] = il % 6 < 5;
    CHECK_EQ_INT(wk_kv_win_layers(swa18, 18, 512, cls, idx), 15);
    CHECK_EQ_INT(cls[5], 0);
    CHECK_EQ_INT(idx[5], 0);
    CHECK_EQ_INT(cls[17], 0);
    CHECK_EQ_INT(idx[17], 2);
    CHECK_EQ_INT(cls[6], 1);
    CHECK_EQ_INT(idx[6], 5); /* sliding layers 0-4, then 6 */
    CHECK_EQ_INT(wk_kv_win_layers(swa18, 18, 0, cls, idx), 0); /* no window: every layer global */
    CHECK_EQ_INT(idx[17], 17);
    g270.swa_layers = 15;
    wk_kv_fmt cw = {2, WK_KVQ_QUEST, 32, 64, 256, 0, 0, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&g270, &cw, &l), WK_OK);
    CHECK_EQ_INT(l.win[0].row_bytes, 3072);
    CHECK_EQ_INT(l.win[0].offset, 0);
    CHECK_EQ_INT(l.win[1].row_bytes, 15360);
    CHECK_EQ_INT(l.window_bytes, 983040);
    CHECK_EQ_INT(wk_kv_layout_seq_bytes(&l, 32768), 2048ull * 6 * 7680 + 983040);
    /* Both classes: global 4 / 64, sliding 2 / 30: the sliding rows after the 68 global ones. */
    cw = (wk_kv_fmt){2, WK_KVQ_QUEST, 32, 4, 64, 2, 30, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&g270, &cw, &l), WK_OK);
    CHECK_EQ_INT(l.win[1].sink, 2);
    CHECK_EQ_INT(l.win[1].recent, 30);
    CHECK_EQ_INT(l.win[1].offset, 68 * 3072);
    CHECK_EQ_INT(l.window_bytes, 68 * 3072 + 32 * 15360);
    /* The same windows in both classes cost what one window of every layer did. */
    cw = (wk_kv_fmt){2, WK_KVQ_QUEST, 32, 4, 64, 4, 64, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&g270, &cw, &l), WK_OK);
    CHECK_EQ_INT(l.window_bytes, 1253376);
    /* A model without sliding layers: their windows cost nothing and are not kept. */
    cw = (wk_kv_fmt){2, WK_KVQ_QUEST, 32, 4, 64, 8, 8, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &cw, &l), WK_OK);
    CHECK_EQ_INT(l.window_bytes, 1253376);
    CHECK_EQ_INT(l.win[1].sink + l.win[1].recent, 0);

    /* Block bits/element equals kv_quant.h's per-group figure for every format (they must agree). */
    const wk_kvq_kind kinds[3] = {WK_KVQ_QUEST, WK_KVQ_PERCENTILE, WK_KVQ_ABSMAX};
    for (int k = 0; k < 3; k++)
        for (int b = 2; b <= 4; b++)
            for (int G = 16; G <= 256; G *= 2) {
                wk_kv_fmt f = {b, kinds[k], G, 0, 0, 0, 0, 0, 0};
                CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &f, &l), WK_OK);
                CHECK_NEAR(l.block_bits_per_element, wk_kvq_bits_per_element(kinds[k], b, G), 1e-12);
                CHECK_EQ_INT(l.slab_bytes, 16 * 256 / G * wk_kvq_group_bytes(kinds[k], b, G));
            }

    /* Refusals. */
    wk_kv_fmt f16w = {16, WK_KVQ_QUEST, 0, 4, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &f16w, &l), WK_ERR_INVALID); /* windows on f16 */
    f16w = (wk_kv_fmt){16, WK_KVQ_QUEST, 0, 0, 0, 0, 2, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &f16w, &l), WK_ERR_INVALID); /* the sliding layers' too */
    wk_kv_geom d48 = {.n_layer = 2, .n_head_kv = 1, .head_dim = 48, .block_tokens = 16};
    CHECK_EQ_INT(wk_kv_layout_get(&d48, &q2, &l), WK_ERR_INVALID); /* 48 % 32 */
    test_layer_groups();
    wk_kv_geom bt1 = {.n_layer = 2, .n_head_kv = 1, .head_dim = 256, .block_tokens = 1};
    wk_kv_fmt q2g256 = {2, WK_KVQ_QUEST, 256, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&bt1, &q2g256, &l), WK_ERR_INVALID); /* 64 + 2 bytes: not u32 words */
    wk_kv_fmt bad = {5, WK_KVQ_QUEST, 32, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&GEMMA270, &bad, &l), WK_ERR_INVALID);
    /* Default block size. */
    wk_kv_geom g0 = {.n_layer = 18, .n_head_kv = 1, .head_dim = 256, .block_tokens = 0};
    CHECK_EQ_INT(wk_kv_layout_get(&g0, &f16, &l), WK_OK);
    CHECK_EQ_INT(l.block_tokens, 16);
}

/* Wide keys: the default's block on Gemma 3 270M (one global group of 3 layers, int2 G128, one of
 * them with int3 keys) against hand-computed bytes: a token's int2 head is 64 code bytes + 2 f16
 * steps, its int3 keys 96 + 2, so the block is 16 * (3 * 2 * 68 + 32) = 7040 bytes, 512 more
 * than without (6528), and a 32768-token sequence holds 2048 such blocks of the global group. The
 * layout refuses keys not wider than the values, more wide slots than a group has layers, f16,
 * and a sliding pool with wide keys. */
static void test_wide_keys(void) {
    const wk_kv_geom G6 = {.n_layer = 18, .n_head_kv = 1, .head_dim = 256, .block_tokens = 16, .group_layers = 3,
                           .swa_groups = 5, .swa_window = 512};
    wk_kv_fmt f = {2, WK_KVQ_QUEST, 128, 16, 104, 0, 32, 3, 1};
    wk_kv_layout l, plain;
    CHECK_EQ_INT(wk_kv_layout_get(&G6, &f, &l), WK_OK);
    wk_kv_fmt p = f;
    p.key_bits = p.key_wide_slots = 0;
    CHECK_EQ_INT(wk_kv_layout_get(&G6, &p, &plain), WK_OK);
    CHECK_EQ_INT(plain.bytes_per_block, 6528);
    CHECK_EQ_INT(l.bytes_per_block, 7040);
    CHECK_EQ_INT(l.slab_bytes, 16 * 68);
    CHECK_EQ_INT(l.key_slab_bytes, 16 * 100);
    CHECK_EQ_INT(l.key_bits, 3);
    wk_kv_layout swa4;
    const wk_kv_fmt q4 = {4, WK_KVQ_QUEST, 128, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&G6, &q4, &swa4), WK_OK);
    CHECK_EQ_INT(wk_kv_layout_set_swa(&l, &swa4), WK_OK);
    CHECK_EQ_INT(wk_kv_layout_pool_peak_bytes(&l, 0, 32768, 512) - l.window_bytes, 2048 * 7040);
    wk_kv_layout bad;
    const wk_kv_fmt refused[] = {
        {2, WK_KVQ_QUEST, 128, 0, 0, 0, 0, 2, 1},  /* not wider */
        {3, WK_KVQ_QUEST, 128, 0, 0, 0, 0, 2, 1},  /* narrower */
        {2, WK_KVQ_QUEST, 128, 0, 0, 0, 0, 3, 4},  /* 4 wide slots in groups of 3 */
        {2, WK_KVQ_QUEST, 128, 0, 0, 0, 0, 3, 0},  /* no slot */
        {2, WK_KVQ_QUEST, 128, 0, 0, 0, 0, 5, 1},  /* no 5-bit code */
        {16, WK_KVQ_QUEST, 0, 0, 0, 0, 0, 3, 1},   /* f16 */
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) CHECK_EQ_INT(wk_kv_layout_get(&G6, &refused[i], &bad), WK_ERR_INVALID);
    /* The sliding layers' own pool never has wide keys. */
    wk_kv_layout l2;
    const wk_kv_fmt f2 = {2, WK_KVQ_QUEST, 128, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(wk_kv_layout_get(&G6, &f2, &l2), WK_OK);
    wk_kv_layout wide4;
    const wk_kv_fmt w4 = {3, WK_KVQ_QUEST, 128, 0, 0, 0, 0, 4, 1};
    CHECK_EQ_INT(wk_kv_layout_get(&G6, &w4, &wide4), WK_OK);
    CHECK_EQ_INT(wk_kv_layout_set_swa(&l2, &wide4), WK_ERR_INVALID);
}

/* Per-layer-class formats: the full-attention groups in int2 with the windows, the sliding groups
 * in int4 in a pool of their own. The layout's sizes against hand-computed numbers, what
 * set_swa refuses, and a sequence grown to 2048 tokens in 512-token steps over the two pools as
 * the engine drives them: each pool's most bytes equal wk_kv_layout_pool_peak_bytes. */
static void test_two_classes(void) {
    const wk_kv_geom G6 = {.n_layer = 18, .n_head_kv = 1, .head_dim = 256, .block_tokens = 16, .group_layers = 3,
                           .swa_groups = 5, .swa_window = 512};
    const wk_kv_fmt w2 = {2, WK_KVQ_QUEST, 32, 4, 64, 0, 0, 0, 0}, q4 = {4, WK_KVQ_QUEST, 32, 0, 0, 0, 0, 0, 0}, w4 = {4, WK_KVQ_QUEST, 32, 4, 64, 0, 0, 0, 0};
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
    test_two_classes();
    test_wide_keys();
    test_prefix_hybrid();
    TEST_MAIN_END();
}
