/* A benchmark, not a test (meson builds it; nothing runs it): one thread's host attention
 * (engine/host/host_attention.c) for one decode row over a pool of 8192 keys of each cache format
 * (2-bit, 3-bit and 4-bit QuEST codes in groups of 128, and f16), Gemma 3 270M's geometry (head_dim
 * 256, 4 query heads a KV head), with the best instruction set this CPU runs and with each lower
 * one; with ROWS > 1, that many rows of a prompt's chunk at the last positions (up to 16, as a
 * prefill job takes them). Prints ms a pass, ns a key (for all the rows) and the pool bytes' rate.
 * Usage: build/tests/bench_host_attention [REPEATS [ROWS]]. The codes are random words and every
 * group's step one f16 value: the work a key takes does not depend on them. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "host/host_attention.h"
#include "kv/kv_quant.h"
#include "test_rng.h"

enum { D = 256, HQ = 4, BT = 16, KEYS = 8192, G = 128 };

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 20, n_rows = argc > 2 ? atoi(argv[2]) : 1;
    if (reps < 1 || n_rows < 1 || n_rows > WK_HOST_ATTN_MAX_ROWS) {
        fprintf(stderr, "usage: bench_host_attention [REPEATS >= 1 [ROWS 1..%d]]\n", WK_HOST_ATTN_MAX_ROWS);
        return 2;
    }
    rng_seed(7);
    static float q[WK_HOST_ATTN_MAX_ROWS * HQ * D], part[WK_HOST_ATTN_MAX_ROWS * HQ * (D + 2)];
    for (int i = 0; i < n_rows * HQ * D; i++) q[i] = (float)rng_gauss() * 0.06f;
    const int widths[4] = {2, 3, 4, 16};
    for (int w = 0; w < 4; w++) {
        const int bits = widths[w];
        wk_kvq_block_layout lay = {.bytes = (size_t)BT * D * 2, .code_bytes_per_token = (size_t)D * 2};
        if (bits != 16 && !wk_kvq_block_layout_get(WK_KVQ_QUEST, bits, G, D, BT, &lay)) return 1;
        const size_t slab_words = lay.bytes / 4, block_words = 2 * slab_words, blocks = KEYS / BT;
        uint32_t *pool = malloc(blocks * block_words * 4 + 64), *tables = malloc(blocks * 4);
        for (size_t i = 0; i < blocks * block_words; i++)
            pool[i] = bits == 16 ? 0x2c002c00u ^ ((uint32_t)rng_u64() & 0x03ff03ffu) : (uint32_t)rng_u64();
        for (size_t b = 0; bits != 16 && b < blocks; b++)
            for (int kv = 0; kv < 2; kv++) {
                uint16_t *params = (uint16_t *)(pool + b * block_words + kv * slab_words + lay.params_offset / 4);
                for (int i = 0; i < BT * (D / G); i++) params[i] = 0x2000; /* 2^-7 */
            }
        for (size_t b = 0; b < blocks; b++) tables[b] = (uint32_t)b;
        const uint32_t code_words = (uint32_t)(lay.code_bytes_per_token / 4), params_words = (uint32_t)(lay.params_offset / 4);
        const wk_pc_attention_paged pc = {
            .head_dim = D, .n_head = HQ, .n_head_kv = 1, .kind = WK_KVQ_QUEST, .bits = bits, .group = G,
            .block_tokens = BT, .slab_words = (uint32_t)slab_words, .block_words = (uint32_t)block_words,
            .params_words = params_words, .code_words = code_words, .table_stride = 1, .v_off = (uint32_t)slab_words,
            .k_bits = bits, .k_slab_words = (uint32_t)slab_words, .k_params_words = params_words, .k_code_words = code_words};
        const wk_host_attn_layer L = {.pool = pool, .tables = tables, .pc = &pc};
        wk_host_attn_row rows[WK_HOST_ATTN_MAX_ROWS];
        for (int r = 0; r < n_rows; r++)
            rows[r] = (wk_host_attn_row){.pos = (uint32_t)(KEYS - n_rows + r), .chunk_pos0 = (uint32_t)(KEYS - n_rows)};
        for (int isa = (int)wk_host_isa_best(); isa >= 0; isa--) {
            wk_host_attn_part((wk_host_isa)isa, &L, rows, n_rows, 0, q, (size_t)HQ * D, HQ, 0, KEYS, part); /* warm */
            const double t0 = now_ms();
            for (int r = 0; r < reps; r++)
                wk_host_attn_part((wk_host_isa)isa, &L, rows, n_rows, 0, q, (size_t)HQ * D, HQ, 0, KEYS, part);
            const double ms = (now_ms() - t0) / reps;
            const double bytes = (double)KEYS * 2 * (bits == 16 ? D * 2.0 : (double)wk_kvq_group_bytes(WK_KVQ_QUEST, bits, G) * (D / G));
            printf("%-2d bits %-6s %7.3f ms for %d keys: %6.1f ns a key, %5.2f GB/s of cache\n", bits,
                   wk_host_isa_name((wk_host_isa)isa), ms, KEYS, ms * 1e6 / KEYS, bytes / ms * 1e-6);
        }
        free(pool);
        free(tables);
    }
    return 0;
}
