/* Paged attention shader (shaders/kv/attention_paged.comp, + attention_reduce.comp when the keys are
 * split) against a C reference: keys and values are encoded into a block pool with the C
 * quantizers (kv_quant.c), block tables are scattered, and every query row's output must equal
 * softmax attention (in double) over the values the C decoder reads back — for every quantizer,
 * bit width, two group sizes, GQA 4:1 / 2:1 / 32:1 (head chunks), sliding window, decode rows and
 * prefill rows of different sequences in one dispatch (query tiles from engine/kv/attention_plan.c),
 * unsplit and split three ways; every case again as a decode step (one row per sequence), which runs
 * the 4-row decode pipelines (attention_decode[_swa]) where the GQA group fits. The block tables are those of a pool with three layer groups (the
 * layer reads every third entry; the others name decoy blocks), and with a sliding window the
 * entries of blocks no query can see are WK_KV_NO_BLOCK, as the engine leaves them once released.
 * Per-layer-class formats (engine/kv/kv_cache.h): the layer's blocks in a second pool of their own
 * format, placed after a first pool of another format and its f16 windows in the same buffer, the
 * table naming them from that pool's base block on, read by the _swa pipelines specialised for
 * the layer's format while the windows stay in the first pool. The f16 cache (bits 16): f16 slabs
 * (token t, element i at half t * D + i) read through an RG32UI view of the pool, from the
 * pipeline of push-constant formats and from the one specialised to bits 16 as the engine runs it.
 * Windows per layer class: the slot's two class regions, the layer's own window (or none) in its
 * class's region while the other class keeps another, every byte it must not read random.
 * With WUSHKV_KERNELS=gpu every case runs the GPU variant instead (bulk keys a key per lane): the
 * decode pipelines' for the decode cases, the bulk pass's for the others (but the specialised
 * sets' prefill cases: lanes_prefill_generic_only below). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/attention_plan.h"
#include "kv/attention_record.h"
#include "host/host_attention.h"
#include "kv/kv_quant.h"
#include "model/quant.h"
#include "vulkan/shader_params.h"
#include "test_rng.h"
#include "test_util.h"
#include "test_vk_open.h"
#include "vulkan/vk_pipelines.h"
#include "wushkv/wushkv.h"

static uint64_t rng = 88172645463325252ull;
static double uniform(void) { return (double)(rng_xorshift64(&rng) >> 11) / 9007199254740992.0; }
static float gauss(void) {
    double u = uniform() + 1e-12, v = uniform();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

enum { BT = 16, NL = 2, LAYER = 1, NSEQ = 2, MAXROWS = 1100, MAXPOS = 1040, NGROUPS = 3, GROUP = 1 };

/* Sequence 0 decodes its last position (len0 keys); sequence 1 runs a prefill chunk of positions
 * from1 .. len1-1 over its earlier keys. S, R: f16 sink and recent windows. */
/* other_bits: 0, one pool; else the layer's blocks sit in a second pool after a first one of
 * other_bits blocks (decoys) and the windows, read through the specialised sliding pipeline. */
/* Window classes (engine/kv/kv_pool.h wk_kv_win): the slot holds class 0's rows (WIN_LAYERS[0]
 * layers each) then class 1's (WIN_LAYERS[1]); the layer is the LAYER-th of class cls, whose window
 * is S / R, while the other class keeps S2 / R2 (its region is random bytes the layer must not
 * read, as is every other layer's part of a row). */
static const int WIN_LAYERS[2] = {3, 2};
typedef struct { int D, Hq, Hk, window; wk_kvq_kind kind; int bits, G; int len0, len1, from1, S, R, other_bits; bool spec;
                 int cls, S2, R2; bool decode; int kbits, kbits0; bool short_chunk; } cfg;
/* short_chunk: sequence 1's chunk is short enough (tiles of at most WK_ATTN_DECODE_ROWS rows) for
 * the decode pipelines, which then walk tiles of several tokens. */
/* kbits: wide keys (engine/kv/kv_pool.h): the layer's keys in kbits while its values keep bits
 * (0: bits); kbits0 the same for the block's other layer, which comes first and so moves the
 * layer's slabs. spec with kbits: through the _wide pipelines specialised as the engine does. */

/* The same case as a decode step: sequence 1 brings only its last position too. */
static cfg as_decode(cfg c) {
    c.len1 = c.len1 ? c.len1 : 21;
    c.from1 = c.len1 - 1;
    c.decode = true;
    return c;
}

/* With the GPU variant (paged_attention_gpu_kernels on lavapipe) the prefill cases of the
 * specialised sets (_swa per format, _wide, f16) are skipped: a 16-row key-per-lane pipeline costs
 * llvmpipe minutes of compile per specialisation with a cold shader cache, and what it adds to the
 * generic pipeline's cases is the straight-line decode of each format, which the same cases' decode
 * steps run through the 4-row pipelines (same decode_lane code). */
static bool lanes_prefill_generic_only;
static int skipped;
static int chained_cases; /* prefill cases whose window pass continued the bulk's partials */
static int chained_multi; /* ... of several bulk splits, combined by the window pass */
/* cases whose decode pipelines walked a tile of several tokens with f16 windows: a key its later
 * rows read in f16 and its earlier ones from the blocks goes through both of the pipeline's loops */
static int decode_shared_keys;

static int host_cases;
static double host_worst;

/* host/host_attention.c over the case's pool, as forward_host_attn.c calls it: sequence 0's decode
 * row alone, sequence 1's chunk (the rows from 1) in groups of up to WK_HOST_ATTN_MAX_ROWS, each
 * group's keys in two splits merged. */
static void host_attention(wk_host_isa isa, const cfg *c, const wk_pc_attention_paged *pc, const uint8_t *pool,
                           const uint32_t *tables, const uint16_t *k16, const uint16_t *v16, const wk_row_info *rows,
                           const int *row_seq, const uint32_t *win_words, int T, const float *Qv, float *out) {
    const wk_host_attn_layer L = {.pool = (const uint32_t *)pool, .tables = tables, .k16 = k16, .v16 = v16, .pc = pc};
    const int D = c->D, hq = c->Hq / c->Hk;
    const size_t pf = (size_t)hq * (D + 2);
    float *part = malloc(sizeof(float) * 2 * WK_HOST_ATTN_MAX_ROWS * pf);
    static wk_host_attn_row hrows[MAXROWS];
    for (int t = 0; t < T; t++) {
        const uint32_t pos = rows[t].pos, first = c->window && pos + 1 > (uint32_t)c->window ? pos + 1 - (uint32_t)c->window : 0;
        const int r0 = row_seq[t] == 0 ? 0 : 1;
        hrows[t] = (wk_host_attn_row){.pos = pos, .first = first, .table_off = rows[t].kv_base, .win_word = win_words[t],
                                      .chunk_pos0 = rows[r0].pos, .chunk_row0 = (uint32_t)r0};
    }
    for (int g0 = 0; g0 < T;) {
        const int end = g0 == 0 ? 1 : T, n = end - g0 < WK_HOST_ATTN_MAX_ROWS ? end - g0 : WK_HOST_ATTN_MAX_ROWS;
        const uint32_t lo = hrows[g0].first, hi = hrows[g0 + n - 1].pos + 1, mid = lo + (hi - lo) / 2;
        for (int kh = 0; kh < c->Hk; kh++) {
            const float *q = Qv + ((size_t)g0 * c->Hq + (size_t)kh * hq) * D;
            wk_host_attn_part(isa, &L, hrows + g0, n, (uint32_t)kh, q, (size_t)c->Hq * D, hq, lo, mid, part);
            wk_host_attn_part(isa, &L, hrows + g0, n, (uint32_t)kh, q, (size_t)c->Hq * D, hq, mid, hi, part + n * pf);
            for (int i = 0; i < n; i++)
                for (int h = 0; h < hq; h++)
                    wk_host_attn_merge(2, part + i * pf + (size_t)h * (D + 2), n * pf, D,
                                       out + ((size_t)(g0 + i) * c->Hq + kh * hq + h) * D);
        }
        g0 += n;
    }
    free(part);
}

static double run_case(wk_vk *vk, wk_pipelines *p, const cfg *c, uint32_t force_split) {
    const bool host_check = force_split <= 1;
    char err[WK_ERRMSG_LEN] = "";
    const bool specialised_set = (c->kbits && c->spec) || (!c->kbits && (c->other_bits || c->spec));
    if (lanes_prefill_generic_only && specialised_set && !(c->decode && c->Hq / c->Hk <= WK_ATTN_DECODE_ROWS)) {
        skipped++;
        return 0;
    }
    wk_kvq_block_layout lay = {.bytes = (size_t)BT * c->D * 2, .code_bytes_per_token = (size_t)c->D * 2};
    if (c->bits != 16 && !wk_kvq_block_layout_get(c->kind, c->bits, c->G, c->D, BT, &lay)) return -1;
    /* The block: layer 0's key slabs (kbits0 wide or not), its value slabs, then the layer's. */
    wk_kvq_block_layout klay = lay, k0lay = lay;
    if (c->kbits && !wk_kvq_block_layout_get(c->kind, c->kbits, c->G, c->D, BT, &klay)) return -1;
    if (c->kbits0 && !wk_kvq_block_layout_get(c->kind, c->kbits0, c->G, c->D, BT, &k0lay)) return -1;
    const size_t slab = lay.bytes, k_off = (size_t)c->Hk * (k0lay.bytes + slab), v_off = k_off + (size_t)c->Hk * klay.bytes;
    const size_t block = v_off + (size_t)c->Hk * slab;
    wk_kvq_block_layout other_lay = lay;
    if (c->other_bits && !wk_kvq_block_layout_get(c->kind, c->other_bits, c->G, c->D, BT, &other_lay)) return -1;
    const size_t other_block = 2 * NL * (size_t)c->Hk * other_lay.bytes;
    const int lens[NSEQ] = {c->len0 ? c->len0 : 37, c->len1 ? c->len1 : 21};
    enum { n_blocks = 80 };
    /* f16 window slots after the (first pool's) blocks, one per sequence: each class's rows
     * [layer in class][K|V][head][D] f16, class 0's region first. With a second pool the layer's
     * blocks start at block `base` of their own size, past the first pool and its windows. */
    size_t class_row[2], class_off[2], window_bytes = 0;
    for (int k = 0; k < 2; k++) {
        class_row[k] = (size_t)2 * WIN_LAYERS[k] * c->Hk * c->D * 2;
        class_off[k] = window_bytes;
        window_bytes += (size_t)(k == c->cls ? c->S + c->R : c->S2 + c->R2) * class_row[k];
    }
    const size_t row_bytes = class_row[c->cls], win_off = class_off[c->cls];
    const bool step_windows = c->S + c->R + c->S2 + c->R2 > 0;
    const size_t window_at = n_blocks * (c->other_bits ? other_block : block);
    const uint32_t base = c->other_bits ? (uint32_t)((window_at + NSEQ * window_bytes + block - 1) / block) : 0;
    const size_t pool_bytes = c->other_bits ? (base + n_blocks) * block : window_at + NSEQ * window_bytes;
    /* Blocks handed out in a scattered order, so a table's neighbours are not neighbours in memory. */
    uint32_t order[n_blocks], tables[n_blocks * NGROUPS];
    for (int i = 0; i < n_blocks; i++) order[i] = (uint32_t)(i * 7 + 3) % n_blocks; /* 7 is prime to n_blocks: a permutation */
    int table_off[NSEQ], used = 0;
    for (int s = 0; s < NSEQ; s++) {
        table_off[s] = used * NGROUPS;
        for (int b = 0; b < (lens[s] + BT - 1) / BT; b++, used++)
            for (int g = 0; g < NGROUPS; g++) /* another group's entry names a block holding other keys */
                tables[used * NGROUPS + g] = g == GROUP ? base + order[used] : order[(used + 11 * g) % n_blocks];
    }
    const int D = c->D, Hk = c->Hk, Hq = c->Hq;
    uint8_t *pool = calloc(1, pool_bytes);
    /* The first pool's blocks hold another format's codes: random bytes, never to be read. */
    for (size_t i = 0; c->other_bits && i < window_at; i++) pool[i] = (uint8_t)rng_xorshift64(&rng);
    /* The window slots: random bytes (other layers, the other class) but for the rows set below. */
    for (size_t i = window_at; i < window_at + NSEQ * window_bytes; i++) pool[i] = (uint8_t)rng_xorshift64(&rng);
    /* K and V of every (seq, pos, kv head) for layer LAYER, with two outlier channels per head. */
    float *K = malloc(sizeof(float) * NSEQ * MAXPOS * Hk * D), *V = malloc(sizeof(float) * NSEQ * MAXPOS * Hk * D);
    float *Kd = malloc(sizeof(float) * NSEQ * MAXPOS * Hk * D), *Vd = malloc(sizeof(float) * NSEQ * MAXPOS * Hk * D);
    for (int s = 0; s < NSEQ; s++)
        for (int pos = 0; pos < lens[s]; pos++)
            for (int kh = 0; kh < Hk; kh++) {
                size_t at = (((size_t)s * MAXPOS + pos) * Hk + kh) * D;
                for (int i = 0; i < D; i++) {
                    K[at + i] = gauss() * (i == 3 || i == D / 2 + 1 ? 8.0f : 1.0f);
                    V[at + i] = gauss();
                }
                uint32_t blk = tables[table_off[s] + (pos / BT) * NGROUPS + GROUP];
                uint8_t *kslab = pool + blk * block + k_off + kh * klay.bytes;
                uint8_t *vslab = pool + blk * block + v_off + kh * slab;
                if (c->bits == 16) { /* the f16 slab: token pos % BT's D halves */
                    uint16_t *kh16 = (uint16_t *)kslab + (size_t)(pos % BT) * D, *vh16 = (uint16_t *)vslab + (size_t)(pos % BT) * D;
                    for (int i = 0; i < D; i++) {
                        kh16[i] = wk_f32_to_f16(K[at + i]), vh16[i] = wk_f32_to_f16(V[at + i]);
                        Kd[at + i] = wk_f16_to_f32(kh16[i]), Vd[at + i] = wk_f16_to_f32(vh16[i]);
                    }
                    continue;
                }
                const int kb = c->kbits ? c->kbits : c->bits;
                wk_kvq_encode_token(c->kind, kb, c->G, WK_KVQ_RHO_K, D, BT, pos % BT, K + at, kslab);
                wk_kvq_encode_token(c->kind, c->bits, c->G, WK_KVQ_RHO_V, D, BT, pos % BT, V + at, vslab);
                wk_kvq_decode_token(c->kind, kb, c->G, D, BT, pos % BT, kslab, Kd + at);
                wk_kvq_decode_token(c->kind, c->bits, c->G, D, BT, pos % BT, vslab, Vd + at);
            }
    /* The windows as earlier steps left them: sinks, and the ring of the R positions before each
     * sequence's chunk (seq 0's chunk is its decode token). */
    for (int s = 0; s < NSEQ; s++) {
        const int chunk = s == 0 ? lens[0] - 1 : c->from1;
        uint16_t *slot = (uint16_t *)(pool + window_at + s * window_bytes);
        for (int j = 0; j < chunk; j++) {
            int row = j < c->S ? j : c->R > 0 && j >= chunk - c->R ? c->S + (j - c->S) % c->R : -1;
            if (row < 0) continue;
            for (int kv = 0; kv < 2; kv++)
                for (int kh = 0; kh < Hk; kh++) {
                    const float *src = (kv ? V : K) + (((size_t)s * MAXPOS + j) * Hk + kh) * D;
                    uint16_t *dst = slot + win_off / 2 + (size_t)row * (row_bytes / 2) + (((size_t)LAYER * 2 + kv) * Hk + kh) * D;
                    for (int i = 0; i < D; i++) dst[i] = wk_f32_to_f16(src[i]);
                }
        }
    }
    /* Sliding window: the blocks whose every key is older than every row's window are released. */
    if (c->window)
        for (int s = 0; s < NSEQ; s++) {
            const int first_pos = s == 0 ? lens[0] - 1 : c->from1, first_key = first_pos + 1 - c->window;
            for (int b = 0; (b + 1) * BT <= first_key; b++) tables[table_off[s] + b * NGROUPS + GROUP] = UINT32_MAX;
        }
    /* Rows: seq 0 decoding its last position; seq 1 every position (a prefill chunk). */
    static wk_row_info rows[MAXROWS];
    int row_seq[MAXROWS], T = 0;
    rows[T] = (wk_row_info){.pos = (uint32_t)(lens[0] - 1), .kv_base = (uint32_t)table_off[0]};
    row_seq[T++] = 0;
    for (int pos = c->from1; pos < lens[1]; pos++) {
        rows[T] = (wk_row_info){.pos = (uint32_t)pos, .kv_base = (uint32_t)table_off[1]};
        row_seq[T++] = 1;
    }
    static wk_attn_tile tiles[MAXROWS];
    static uint32_t win_words[MAXROWS];
    static float Ka[MAXROWS * 256 * 2], Va[MAXROWS * 256 * 2]; /* the step's own K and V: [T][Hk][D] */
    for (int t = 0; t < T; t++) {
        win_words[t] = (uint32_t)((window_at + row_seq[t] * window_bytes) / 4);
        memcpy(Ka + (size_t)t * Hk * D, K + ((size_t)row_seq[t] * MAXPOS + rows[t].pos) * Hk * D, sizeof(float) * Hk * D);
        memcpy(Va + (size_t)t * Hk * D, V + ((size_t)row_seq[t] * MAXPOS + rows[t].pos) * Hk * D, sizeof(float) * Hk * D);
    }
    wk_attn_plan plan;
    CHECK_EQ_INT(wk_attn_plan_make(rows, step_windows ? win_words : NULL, (uint32_t)T, (uint32_t)Hq, (uint32_t)Hk, (uint32_t)D, vk->subgroup_size, tiles,
                                   &plan), 0);
    /* The engine's splits (force_split: that many for the bulk or decode pass instead), and its
     * window pass when the step has one (wk_attn_plan_splits). */
    wk_attn_splits splits = wk_attn_plan_splits(&plan, rows, (uint32_t)T, (uint32_t)Hq, (uint32_t)c->window,
                                                (uint32_t)c->S, (uint32_t)c->R,
                                                (uint64_t)T * Hq * (p->attn_gpu_splits ? 64 : 4), p->attn_gpu_splits);
    if (force_split) splits.main = force_split;
    const bool chained = wk_attn_chains(&plan, splits);
    chained_cases += chained;
    chained_multi += chained && splits.main > 1;
    decode_shared_keys += wk_attn_plan_decode(&plan) && plan.tile_rows > plan.head_rows && c->S + c->R > 0;
    const uint32_t n_split = splits.main + splits.win;
    float *Qv = malloc(sizeof(float) * T * Hq * D);
    for (int i = 0; i < T * Hq * D; i++) Qv[i] = gauss() * (c->window == 20 ? 1.0f : 0.1f);

    wk_buf bq, brows, btab, bpool, bout, btiles, bpart, bka, bva;
    /* The queries are read as RGBA32F texels (as forward.c's a.q). */
    int rc = wk_vk_buffer_create(vk, &bq, sizeof(float) * T * Hq * D, WK_MEM_HOST, VK_FORMAT_R32G32B32A32_SFLOAT, err, sizeof err);
    rc = rc ? rc : wk_vk_buffer_create(vk, &brows, sizeof rows, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    rc = rc ? rc : wk_vk_buffer_create(vk, &btab, sizeof tables, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    /* f16 is read four halves a fetch, through an RG32UI view (as kv_cache.c's pool_view2). */
    rc = rc ? rc : wk_vk_buffer_create(vk, &bpool, pool_bytes, WK_MEM_HOST,
                                       c->bits == 16 ? VK_FORMAT_R32G32_UINT : VK_FORMAT_R32_UINT, err, sizeof err);
    /* The step's keys and values are RGBA32F texels (as forward.c's a.k, a.v). */
    /* The step's own K and V in f16, as kv_store_quant copies them for the windows (RG32UI texels). */
    rc = rc ? rc : wk_vk_buffer_create(vk, &bka, sizeof(uint16_t) * T * Hk * D, WK_MEM_HOST, VK_FORMAT_R32G32_UINT, err, sizeof err);
    rc = rc ? rc : wk_vk_buffer_create(vk, &bva, sizeof(uint16_t) * T * Hk * D, WK_MEM_HOST, VK_FORMAT_R32G32_UINT, err, sizeof err);
    rc = rc ? rc : wk_vk_buffer_create(vk, &bout, sizeof(float) * T * Hq * D, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    rc = rc ? rc : wk_vk_buffer_create(vk, &btiles, sizeof tiles, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    rc = rc ? rc : wk_vk_buffer_create(vk, &bpart, (size_t)16 * T * Hq * (n_split > 4 ? n_split : 4) * (D / 4 + 1), WK_MEM_DEVICE,
                                       VK_FORMAT_R32G32B32A32_SFLOAT, err, sizeof err);
    CHECK_EQ_INT(rc, 0);
    double worst = INFINITY;
    if (!rc) {
        memcpy(bq.map, Qv, sizeof(float) * T * Hq * D);
        memcpy(brows.map, rows, sizeof rows);
        memcpy(btab.map, tables, sizeof tables);
        memcpy(bpool.map, pool, pool_bytes);
        memcpy(btiles.map, tiles, sizeof tiles);
        for (size_t i = 0; i < (size_t)T * Hk * D; i++) {
            ((uint16_t *)bka.map)[i] = wk_f32_to_f16(Ka[i]);
            ((uint16_t *)bva.map)[i] = wk_f32_to_f16(Va[i]);
        }
        wk_arg args[9] = {wk_arg_view(bq.view), wk_arg_buf(brows.buf), wk_arg_buf(btab.buf), wk_arg_view(bpool.view),
                          wk_arg_buf(bout.buf), wk_arg_buf(btiles.buf), wk_arg_buf_view(bpart.buf, bpart.view), wk_arg_view(bka.view),
                          wk_arg_view(bva.view)};
        wk_pc_attention_paged pc = {
            .head_dim = (uint32_t)D, .n_head = (uint32_t)Hq, .n_head_kv = (uint32_t)Hk, .window = (uint32_t)c->window,
            .win_layer = LAYER, .kind = c->kind, .bits = c->bits, .group = c->G,
            .block_tokens = BT, .slab_words = (uint32_t)(slab / 4), .block_words = (uint32_t)(block / 4),
            .params_words = (uint32_t)(lay.params_offset / 4), .code_words = (uint32_t)(lay.code_bytes_per_token / 4),
            .sink = (uint32_t)c->S, .recent = (uint32_t)c->R,
            .f16_row_words = (uint32_t)(row_bytes / 4), .win_off = (uint32_t)(win_off / 4),
            .k_off = (uint32_t)(k_off / 4), .table_stride = NGROUPS, .table_col = GROUP, .v_off = (uint32_t)(v_off / 4),
            .k_bits = c->kbits ? c->kbits : c->bits, .k_slab_words = (uint32_t)(klay.bytes / 4),
            .k_params_words = (uint32_t)(klay.params_offset / 4),
            .k_code_words = (uint32_t)(klay.code_bytes_per_token / 4)};
        rc = wk_vk_begin(vk, err, sizeof err);
        /* As forward.c records it (wk_attn_record): a step whose tiles hold at most
         * WK_ATTN_DECODE_ROWS rows (every sequence one token, at most 4 query heads per KV head)
         * runs the 4-row decode pipeline over all keys; others the bulk pass, and the window pass
         * when the layer has windows; then the reduce when there is more than one split. */
        const bool decode = plan.tile_rows <= WK_ATTN_DECODE_ROWS;
        const wk_attn_set set = c->kbits && c->spec            ? WK_ATTN_SET_WIDE
                                : c->kbits                     ? WK_ATTN_SET_MAIN
                                : c->other_bits || c->spec     ? WK_ATTN_SET_SWA
                                                               : WK_ATTN_SET_MAIN;
        if (c->decode) CHECK_EQ_INT(decode, c->Hq / c->Hk <= WK_ATTN_DECODE_ROWS);
        else CHECK_EQ_INT(decode, c->short_chunk);
        CHECK_EQ_INT(splits.win, !decode && c->S + c->R > 0);
        rc = rc ? rc : wk_attn_record(vk, p, &plan, splits, set, (uint32_t)T, &pc, args, err, sizeof err);
        int rc2 = wk_vk_submit_wait(vk, err, sizeof err);
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(rc2, 0);
        if (rc || rc2) fprintf(stderr, "%s\n", err);
        /* The host's attention (paged_attention=host) over the same pool, every row, its keys in
         * two splits merged (one when the row has a single key), with each code this CPU runs:
         * plain C, AVX2 (8 lanes), AVX-512 (16 lanes where head and groups allow, else 8). */
        const int n_isa = host_check ? (int)wk_host_isa_best() + 1 : 0;
        float *hout = host_check ? malloc(sizeof(float) * n_isa * T * Hq * D) : NULL;
        for (int i = 0; i < n_isa; i++)
            host_attention((wk_host_isa)i, c, &pc, pool, tables, bka.map, bva.map, rows, row_seq, win_words, T, Qv,
                           hout + (size_t)i * T * Hq * D);
        /* Reference: softmax in double over the C-decoded keys and values. */
        const float *out = bout.map;
        double num = 0, den = 0, hnum[3] = {0, 0, 0};
        for (int r = 0; r < T; r++)
            for (int h = 0; h < Hq; h++) {
                int s = row_seq[r], kh = h / (Hq / Hk), pos = (int)rows[r].pos;
                int first = c->window && pos + 1 > c->window ? pos + 1 - c->window : 0;
                static double sc[MAXPOS];
                double mx = -INFINITY, sum = 0;
                const float *q = Qv + ((size_t)r * Hq + h) * D;
                /* Key/value j in f16 for the windows (j < S or j > pos - R), else as decoded. */
#define KV_AT(src, dec, j, i)                                                                              \
    ((j) < c->S || (j) + c->R > pos ? wk_f16_to_f32(wk_f32_to_f16((src)[(((size_t)s * MAXPOS + (j)) * Hk + kh) * D + (i)])) \
                                    : (dec)[(((size_t)s * MAXPOS + (j)) * Hk + kh) * D + (i)])
                for (int j = first; j <= pos; j++) {
                    double d = 0;
                    for (int i = 0; i < D; i++) d += (double)q[i] * KV_AT(K, Kd, j, i);
                    sc[j] = d;
                    if (d > mx) mx = d;
                }
                for (int j = first; j <= pos; j++) sum += sc[j] = exp(sc[j] - mx);
                for (int i = 0; i < D; i++) {
                    double o = 0;
                    for (int j = first; j <= pos; j++) o += sc[j] / sum * KV_AT(V, Vd, j, i);
                    double e = fabs(o - out[((size_t)r * Hq + h) * D + i]);
                    if (e > num || isnan(e)) num = isnan(e) ? INFINITY : e;
                    for (int k = 0; k < n_isa; k++) {
                        const double he = fabs(o - hout[(((size_t)k * T + r) * Hq + h) * D + i]);
                        if (he > hnum[k] || isnan(he)) hnum[k] = isnan(he) ? INFINITY : he;
                    }
                    if (fabs(o) > den) den = fabs(o);
                }
            }
        worst = num / den;
        for (int k = 0; k < n_isa; k++) {
            const double he = hnum[k] / den;
            host_cases++;
            if (he > host_worst || isnan(he)) host_worst = isnan(he) ? INFINITY : he;
            if (!(he < 1e-5))
                fprintf(stderr, "host attention (%s): D=%d Hq=%d Hk=%d window=%d kind=%d bits=%d kbits=%d G=%d S=%d "
                        "R=%d decode=%d: %.3g\n", wk_host_isa_name((wk_host_isa)k), c->D, Hq, Hk, c->window, c->kind,
                        c->bits, c->kbits, c->G, c->S, c->R, c->decode, he);
            CHECK(he < 1e-5);
        }
        free(hout);
    }
#undef KV_AT
    wk_buf *all[] = {&bq, &brows, &btab, &bpool, &bout, &btiles, &bpart, &bka, &bva};
    for (int i = 0; i < 9; i++) wk_vk_buffer_destroy(vk, all[i]);
    free(pool), free(K), free(V), free(Kd), free(Vd), free(Qv);
    return worst;
}

int main(void) {
    wk_vk vk;
    wk_pipelines p;
    char err[WK_ERRMSG_LEN] = "";
    if (!test_vk_open(&vk, &p)) {
        CHECK(false);
        TEST_MAIN_END();
    }
    /* WUSHKV_KERNELS=gpu: every case below through the GPU variant (bulk keys a key per lane), decode
     * steps in the decode pipelines', the others' bulk in the bulk pass's (meson test
     * paged_attention_gpu_kernels). lavapipe's shared memory (32 KiB) holds the bulk pass's tiles. */
    CHECK_EQ_INT(wk_pipelines_choose_kernels(&vk, &p, test_engine_env_kernels(), err, sizeof err), 0);
    CHECK_EQ_INT(wk_pipelines_apply_variants(&vk, &p, test_engine_env_variants(), err, sizeof err), 0);
    const bool bulk_lanes = wk_attn_bulk_lanes(p.attn_lanes, vk.subgroup_size, 256,
                                               vk.props.limits.maxComputeSharedMemorySize);
    CHECK_EQ_INT(bulk_lanes, p.attn_lanes);
    lanes_prefill_generic_only = bulk_lanes;
    char variants[256];
    wk_pipelines_describe_variants(&p, variants, sizeof variants);
    printf("kernel set: %s (%s)\n", p.gpu_kernels ? "gpu" : "cpu", variants);
    const wk_kvq_kind kinds[3] = {WK_KVQ_QUEST, WK_KVQ_PERCENTILE, WK_KVQ_ABSMAX};
    int cases = 0;
    double worst = 0;
    for (int k = 0; k < 3; k++)
        for (int bits = 2; bits <= 4; bits++)
            for (int gi = 0; gi < 2; gi++) {
                /* Gemma 3's shape (D 256, one KV head for four query heads) and a GQA-2 D 64 shape. */
                cfg c1 = {.D = 256, .Hq = 4, .Hk = 1, .window = 0, .kind = kinds[k], .bits = bits, .G = gi ? 64 : 32};
                cfg c2 = {.D = 64, .Hq = 4, .Hk = 2, .window = 7, .kind = kinds[k], .bits = bits, .G = gi ? 64 : 16};
                cfg c3 = {.D = 64, .Hq = 32, .Hk = 1, .window = 40, .kind = kinds[k], .bits = bits, .G = gi ? 32 : 16};
                cfg c4 = {.D = 256, .Hq = 4, .Hk = 1, .window = 20, .kind = kinds[k], .bits = bits, .G = gi ? 64 : 32};
                /* The end of a 1024-token prefill on a sliding-window and on a global layer: the latter
                 * walks 1024 keys per tile, past llvmpipe's loop limit for a kernel whose inner loops
                 * were not unrolled (caught a real bug). */
                cfg c5 = {.D = 256, .Hq = 4, .Hk = 1, .window = 512, .kind = kinds[k], .bits = bits, .G = 32,
                          .len0 = 20, .len1 = 1024, .from1 = 896};
                cfg c6 = c5;
                c6.window = 0;
                /* f16 sink and recent windows: prefill chunks that start after the ring, GQA 4:1 and
                 * 2:1, with a sliding window; the decode row reads its ring too. */
                cfg c7 = {.D = 256, .Hq = 4, .Hk = 1, .window = 0, .kind = kinds[k], .bits = bits, .G = 32, .from1 = 10,
                          .S = 4, .R = 8};
                cfg c8 = {.D = 64, .Hq = 4, .Hk = 2, .window = 7, .kind = kinds[k], .bits = bits, .G = 16, .from1 = 5,
                          .S = 2, .R = 3};
                cfg c9 = {.D = 64, .Hq = 4, .Hk = 2, .window = 0, .kind = kinds[k], .bits = bits, .G = 16, .from1 = 12,
                          .S = 0, .R = 5};
                const cfg *cs[9] = {&c1, &c2, &c3, &c4, &c7, &c8, &c9, &c5, &c6};
                int n_cfg = gi ? 4 : k == 0 && bits == 2 ? 9 : 7;
                for (int i = 0; i < n_cfg; i++)
                    for (int dec = 0; dec < 2; dec++)
                        for (uint32_t split = 0; split <= (i < 7 ? 3u : 0u); split += 3) {
                            const cfg c = dec ? as_decode(*cs[i]) : *cs[i];
                            double e = run_case(&vk, &p, &c, split);
                            cases++;
                            if (e > worst) worst = e;
                            if (!(e >= 0 && e < 1e-5))
                                fprintf(stderr, "%s b%d G%d D%d Hq%d%s split %u: rel err %.3g\n",
                                        wk_kvq_kind_name(c.kind), bits, c.G, c.D, c.Hq, dec ? " decode" : "", split, e);
                            CHECK(e >= 0 && e < 1e-5);
                        }
            }
    /* Per-layer-class formats: the sliding layers' own pool behind the first one (another bit
     * width) and its windows, through the _swa pipelines specialised for their format as the
     * engine builds it; windowed and not, with a sliding window, split and not. */
    for (int bits = 2; bits <= 4; bits++) {
        const int other = bits == 2 ? 4 : 2;
        CHECK_EQ_INT(wk_pipelines_specialize_kv(&vk, &p, WK_ATTN_SET_SWA, WK_KVQ_QUEST, bits, 0, 32, 256, err, sizeof err), 0);
        cfg w = {.D = 256, .Hq = 4, .Hk = 1, .window = 20, .kind = WK_KVQ_QUEST, .bits = bits, .G = 32, .from1 = 10,
                 .S = 4, .R = 8, .other_bits = other};
        cfg n = {.D = 256, .Hq = 4, .Hk = 1, .window = 0, .kind = WK_KVQ_QUEST, .bits = bits, .G = 32, .other_bits = other};
        const cfg dw = as_decode(w), dn = as_decode(n);
        const cfg *cs[4] = {&w, &n, &dw, &dn};
        for (int i = 0; i < 4; i++)
            for (uint32_t split = 0; split <= 3; split += 3) {
                double e = run_case(&vk, &p, cs[i], split);
                cases++;
                if (e > worst) worst = e;
                if (!(e >= 0 && e < 1e-5))
                    fprintf(stderr, "second pool int%d after int%d, S%d R%d split %u: rel err %.3g\n", bits, other,
                            cs[i]->S, cs[i]->R, split, e);
                CHECK(e >= 0 && e < 1e-5);
            }
    }
    /* Windows per layer class: the layer's class keeps its own sink / recent (or none) in its own
     * region of the slot while the other class keeps another, or none; a sliding window and not. */
    {
        const int wins[][5] = {
            /* cls, S, R, S2, R2 */
            {1, 4, 8, 2, 16}, {0, 4, 8, 3, 5}, {0, 4, 8, 0, 0}, {1, 2, 3, 0, 0}, {1, 0, 0, 4, 64}, {0, 0, 0, 4, 8},
        };
        /* A window pass of one split continues the bulk's partials instead of a reduce
         * (wk_attn_record's chain): split 1 one bulk partial, split 2 two it combines, split 3
         * three, which it leaves to the reduce. */
        for (size_t i = 0; i < sizeof wins / sizeof wins[0]; i++)
            for (int window = 0; window <= 20; window += 20)
                for (uint32_t split = 0; split <= 3; split++) {
                    const int bits = i % 2 ? 4 : 2;
                    cfg c = {.D = 256, .Hq = 4, .Hk = 1, .window = window, .kind = WK_KVQ_QUEST, .bits = bits,
                             .G = 32, .from1 = 10, .cls = wins[i][0], .S = wins[i][1], .R = wins[i][2],
                             .S2 = wins[i][3], .R2 = wins[i][4]};
                    double e = run_case(&vk, &p, &c, split);
                    cases++;
                    if (e > worst) worst = e;
                    if (!(e >= 0 && e < 1e-5))
                        fprintf(stderr, "window class %d S%d R%d (other S%d R%d) int%d window %d split %u: rel err "
                                "%.3g\n", c.cls, c.S, c.R, c.S2, c.R2, bits, window, split, e);
                    CHECK(e >= 0 && e < 1e-5);
                }
    }
    /* Short chunks through the decode pipelines: tiles of 2 tokens x 2 query heads and of 4 tokens x
     * 1, with f16 windows, so a tile's later rows read some of its keys in f16 and its earlier ones
     * the same keys from the blocks; sliding window and not, split and not. */
    for (int i = 0; i < 8; i++)
        for (uint32_t split = 0; split <= 3; split += 3) {
            const int hq = i % 2 ? 2 : 4, toks = i % 2 ? 4 : 2;
            cfg c = {.D = 64, .Hq = hq, .Hk = 2, .window = i % 4 < 2 ? 0 : 9, .kind = WK_KVQ_QUEST, .bits = i < 4 ? 2 : 4,
                     .G = 16, .len1 = 23, .from1 = 23 - toks, .S = 2, .R = 3 + i / 4, .short_chunk = true};
            double e = run_case(&vk, &p, &c, split);
            cases++;
            if (e > worst) worst = e;
            if (!(e >= 0 && e < 1e-5))
                fprintf(stderr, "decode pipelines, %d-token chunk Hq%d S%d R%d window %d split %u: rel err %.3g\n",
                        toks, c.Hq, c.S, c.R, c.window, split, e);
            CHECK(e >= 0 && e < 1e-5);
        }
    CHECK(decode_shared_keys > 0);
    /* Wide keys: the layer's keys wider than its values (and than the block's other layer's, or as
     * wide), with and without windows and a sliding window, prefill and decode, split and not;
     * through the pipeline that reads the formats from the push constants and through the _wide
     * pipelines specialised to them (SC_BITS_K), as the engine runs them. */
    for (int bits = 2; bits <= 3; bits++)
        for (int kbits = bits + 1; kbits <= 4; kbits++)
            for (int spec = 0; spec < 2; spec++) {
                if (spec)
                    CHECK_EQ_INT(wk_pipelines_specialize_kv(&vk, &p, WK_ATTN_SET_WIDE, WK_KVQ_QUEST, bits, kbits, 32, 256,
                                                            err, sizeof err), 0);
                for (int i = 0; i < 4; i++)
                    for (uint32_t split = 0; split <= 3; split += 3) {
                        cfg c = {.D = 256, .Hq = 4, .Hk = 1, .window = i % 2 ? 20 : 0, .kind = WK_KVQ_QUEST,
                                 .bits = bits, .G = 32, .from1 = 10, .S = i < 2 ? 4 : 0, .R = i < 2 ? 8 : 0,
                                 .spec = spec, .kbits = kbits, .kbits0 = split ? kbits : 0};
                        if (i == 3) c = as_decode(c);
                        double e = run_case(&vk, &p, &c, split);
                        cases++;
                        if (e > worst) worst = e;
                        if (!(e >= 0 && e < 1e-5))
                            fprintf(stderr, "wide keys int%d values int%d%s S%d R%d window %d split %u: rel err %.3g\n",
                                    kbits, bits, spec ? " specialised" : "", c.S, c.R, c.window, split, e);
                        CHECK(e >= 0 && e < 1e-5);
                    }
            }
    /* The f16 cache: every shape above without windows, unsplit and split, through the pipeline
     * that reads the format from the push constants and through one specialised to bits 16; and
     * heads whose chunks do not fill the host's value passes (48: 3 chunks of 16 lanes, 40: 5 of
     * 8) for 3 query heads a KV head, through the first pipeline only (another specialised head size
     * would compile two more pipelines, a minute and a half of llvmpipe's time when its cache is cold). */
    for (int spec = 0; spec < 2; spec++) {
        enum { NF = 8 };
        const cfg cs[NF] = {
            {.D = 256, .Hq = 4, .Hk = 1, .window = 0},   {.D = 64, .Hq = 4, .Hk = 2, .window = 7},
            {.D = 64, .Hq = 32, .Hk = 1, .window = 40},  {.D = 256, .Hq = 4, .Hk = 1, .window = 20},
            {.D = 48, .Hq = 3, .Hk = 1, .window = 0},    {.D = 40, .Hq = 6, .Hk = 2, .window = 9},
            {.D = 256, .Hq = 4, .Hk = 1, .window = 512, .len0 = 20, .len1 = 1024, .from1 = 896},
            {.D = 256, .Hq = 4, .Hk = 1, .window = 0, .len0 = 20, .len1 = 1024, .from1 = 896}};
        for (int i = 0; i < 2 * NF; i++)
            for (uint32_t split = 0; split <= (i % NF < NF - 2 ? 3u : 0u); split += 3) {
                cfg c = i < NF ? cs[i] : as_decode(cs[i - NF]);
                if (spec && (c.D == 48 || c.D == 40)) continue;
                c.bits = 16, c.spec = spec;
                /* The specialised pipeline is made for one head size (a lane's chunks, constant 6). */
                if (spec) CHECK_EQ_INT(wk_pipelines_specialize_kv(&vk, &p, WK_ATTN_SET_SWA, 0, 16, 0, 0, c.D, err, sizeof err), 0);
                double e = run_case(&vk, &p, &c, split);
                cases++;
                if (e > worst) worst = e;
                if (!(e >= 0 && e < 1e-5))
                    fprintf(stderr, "f16%s D%d Hq%d window %d split %u: rel err %.3g\n", spec ? " specialised" : "", c.D,
                            c.Hq, c.window, split, e);
                CHECK(e >= 0 && e < 1e-5);
            }
    }
    /* Splits: beyond WK_ATTN_MAX_KEYS keys a workgroup must not walk them all, however many tiles. */
    {
        enum { TT = 256 };
        static wk_row_info rr[TT];
        static wk_attn_tile tt[TT];
        for (int t = 0; t < TT; t++) rr[t] = (wk_row_info){.pos = (uint32_t)(40000 + t), .kv_base = 0};
        wk_attn_plan pl;
        CHECK_EQ_INT(wk_attn_plan_make(rr, NULL, TT, 4, 1, 256, vk.subgroup_size, tt, &pl), 0);
        wk_attn_splits n = wk_attn_plan_splits(&pl, rr, TT, 4, 0, 0, 0, wk_attn_part_rows(TT, 4, 40256 + 16, 0, 0), 0);
        CHECK(n.main >= (40256 + WK_ATTN_MAX_KEYS - 1) / WK_ATTN_MAX_KEYS);
        CHECK_EQ_INT(n.win, 0);
        n = wk_attn_plan_splits(&pl, rr, TT, 4, 512, 0, 0, wk_attn_part_rows(TT, 4, 40256 + 16, 0, 0), 0);
        CHECK_EQ_INT(n.main, 1);
        CHECK_EQ_INT(n.win, 0);
        CHECK_EQ_INT(pl.tile_rows, WK_ATTN_MAXR); /* 4 tokens x 4 heads a tile: the 16-row pipelines */
        /* f16 windows: a window pass of its own, and room for its partials beside the bulk's. */
        const uint64_t room = wk_attn_part_rows(TT, 4, 40256 + 16, 16 + 128, 0);
        n = wk_attn_plan_splits(&pl, rr, TT, 4, 0, 16, 128, room, 0);
        CHECK_EQ_INT(n.win, 1);
        CHECK(n.main >= (40256 + WK_ATTN_MAX_KEYS - 1) / WK_ATTN_MAX_KEYS);
        CHECK((uint64_t)(n.main + n.win) * TT * 4 <= room);
        n = wk_attn_plan_splits(&pl, rr, TT, 4, 0, 0, 20000, wk_attn_part_rows(TT, 4, 40256 + 16, 20000, 0), 0);
        CHECK_EQ_INT(n.win, 2); /* a window longer than one workgroup walks */
        /* A prompt within the windows (every key a sink or recent): no bulk pass; a key more: one. */
        for (int t = 0; t < TT; t++) rr[t].pos = (uint32_t)t;
        CHECK_EQ_INT(wk_attn_plan_make(rr, NULL, 144, 4, 1, 256, vk.subgroup_size, tt, &pl), 0);
        n = wk_attn_plan_splits(&pl, rr, 144, 4, 0, 16, 128, room, 0);
        CHECK_EQ_INT(n.main, 0);
        CHECK_EQ_INT(n.win, 1);
        CHECK_EQ_INT(wk_attn_plan_make(rr, NULL, 145, 4, 1, 256, vk.subgroup_size, tt, &pl), 0);
        n = wk_attn_plan_splits(&pl, rr, 145, 4, 0, 16, 128, room, 0);
        CHECK(n.main >= 1);
        CHECK_EQ_INT(n.win, 1);
        rr[0].pos = 1000; /* decode-sized step: one row, split for parallelism, no window pass */
        CHECK_EQ_INT(wk_attn_plan_make(rr, NULL, 1, 4, 1, 256, vk.subgroup_size, tt, &pl), 0);
        n = wk_attn_plan_splits(&pl, rr, 1, 4, 0, 16, 128, WK_ATTN_PART_ROWS, 0);
        CHECK(n.main > 1);
        CHECK_EQ_INT(n.win, 0);
        CHECK_EQ_INT(pl.tile_rows, 4); /* one token x 4 heads: the decode pipelines */
        /* Decode at depth 32768, one sequence (one tile of one KV head): lavapipe's set splits it
         * WK_ATTN_MAX_SPLIT ways, the "gpu" set as many as its target allows while each split
         * keeps 4 key tiles, within the buffer the engine sizes for it. */
        rr[0].pos = 32767;
        n = wk_attn_plan_splits(&pl, rr, 1, 4, 0, 0, 0, wk_attn_part_rows(16, 4, 32768, 0, 0), 0);
        CHECK_EQ_INT(n.main, WK_ATTN_MAX_SPLIT);
        const uint64_t gpu_rows = wk_attn_part_rows(16, 4, 32768, 0, 1);
        n = wk_attn_plan_splits(&pl, rr, 1, 4, 0, 0, 0, gpu_rows, 1);
        CHECK_EQ_INT(n.main, WK_ATTN_MAX_SPLIT_GPU);
        CHECK((uint64_t)n.main * 4 <= gpu_rows);
        rr[0].pos = 1000; /* 1001 keys: 16 splits of 4 key tiles */
        CHECK_EQ_INT(wk_attn_plan_splits(&pl, rr, 1, 4, 0, 0, 0, gpu_rows, 1).main, (1001 + 16 + 63) / 64);
    }
    /* The cases ran the kernel set's decode and bulk pipelines and not the other set's (each is
     * created on its first dispatch; the main set is never re-specialised above). */
    CHECK_EQ_INT(p.pipe[WK_PIPE_ATTENTION_DECODE_LANES] != VK_NULL_HANDLE, p.attn_lanes);
    CHECK_EQ_INT(p.pipe[WK_PIPE_ATTENTION_DECODE] != VK_NULL_HANDLE, !p.attn_lanes);
    CHECK_EQ_INT(p.pipe[WK_PIPE_ATTENTION_BULK_LANES] != VK_NULL_HANDLE, bulk_lanes);
    CHECK_EQ_INT(p.pipe[WK_PIPE_ATTENTION_BULK] != VK_NULL_HANDLE, !bulk_lanes);
    printf("paged attention: %d configurations (%d specialised prefill cases skipped: the GPU variant on lavapipe; "
           "%d prefill cases chained their window pass to the bulk's (%d to several bulk splits); %d walked keys of shared windows in the "
           "decode pipelines), worst max-abs error relative to output scale %.3g\n",
           cases - skipped, skipped, chained_cases, chained_multi, decode_shared_keys, worst);
    printf("host attention (paged_attention=host's keys, every row of %d case-and-code pairs): worst %.3g\n", host_cases,
           host_worst);
    CHECK(host_cases > 0);
    CHECK(chained_cases > 0);
    CHECK(chained_multi > 0);
    CHECK_EQ_INT(test_vk_close(&vk, &p), 0);
    TEST_MAIN_END();
}
