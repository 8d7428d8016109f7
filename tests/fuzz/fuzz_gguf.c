/* Fuzz target: the GGUF reader (engine/model/gguf.c) on arbitrary bytes, then everything that
 * reads an opened file: every metadata getter, string arrays, the model description
 * (model/model.c), the tokenizer's vocabulary load and the dequantizers and q8a16 converter
 * (model/quant.c) on every tensor. Invariants: every tensor's data lies inside the file, after
 * the data section's start, its byte size matches its type and shape. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/model.h"
#include "model/quant.h"
#include "tokenizer/tokenizer.h"

#define FUZZ_CHECK(c)                                                                    \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            fprintf(stderr, "fuzz_gguf: invariant failed: %s (line %d)\n", #c, __LINE__); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

/* Dequantize at most this many elements per tensor (bigger tensors: their first rows). */
#define MAX_ELEMS (1u << 16)

static void check_tensor(const wk_gguf *g, const wk_gguf_tensor *t) {
    uint32_t be, bb;
    FUZZ_CHECK(t->name != NULL);
    FUZZ_CHECK(wk_ggml_type_layout(t->type, &be, &bb));
    FUZZ_CHECK(be > 0 && bb > 0);
    FUZZ_CHECK(t->n_dims <= 4);
    uint64_t n = 1;
    for (int d = 0; d < 4; d++) {
        FUZZ_CHECK(t->ne[d] > 0);
        FUZZ_CHECK(n <= UINT64_MAX / t->ne[d]);
        n *= t->ne[d];
    }
    FUZZ_CHECK(t->ne[0] % be == 0);
    FUZZ_CHECK(t->nbytes == n / be * bb);
    /* offset + size inside the file, after the data section's start */
    FUZZ_CHECK(g->data_offset <= g->size);
    FUZZ_CHECK(t->offset <= g->size - g->data_offset);
    FUZZ_CHECK(t->nbytes <= g->size - g->data_offset - t->offset);
    FUZZ_CHECK(t->data == g->base + g->data_offset + t->offset);

    /* Dequantize (whole blocks of whole rows, at most MAX_ELEMS). */
    uint64_t rows = n / t->ne[0];
    uint64_t use_rows = t->ne[0] > MAX_ELEMS ? 0 : MAX_ELEMS / t->ne[0];
    if (use_rows > rows) use_rows = rows;
    size_t m = (size_t)(use_rows * t->ne[0]);
    if (m == 0) {
        m = (size_t)(MAX_ELEMS / be * be); /* one huge row: its first blocks */
        if (m > n) m = (size_t)n;
    }
    float *f = malloc(m * sizeof *f);
    if (!f) return;
    if (wk_dequantize(t->type, t->data, f, m)) {
        volatile float sink = 0;
        for (size_t i = 0; i < m; i++) sink += f[i];
        (void)sink;
    }
    if (wk_quant_is_exact_q8a16(t->type) && m % 16 == 0) {
        int8_t *codes = malloc(m);
        float *so = malloc(m / 16 * 2 * sizeof *so);
        if (codes && so) wk_quant_to_q8a16(t->type, t->data, m, codes, so);
        free(codes);
        free(so);
    }
    free(f);
}

static void check_kv(const wk_gguf *g, const wk_gguf_kv *kv) {
    FUZZ_CHECK(kv->key != NULL);
    FUZZ_CHECK(wk_gguf_find(g, kv->key) != NULL);
    uint32_t u;
    int64_t i;
    float f;
    bool b;
    char s[256];
    wk_gguf_get_u32(g, kv->key, &u);
    wk_gguf_get_i64(g, kv->key, &i);
    wk_gguf_get_f32(g, kv->key, &f);
    wk_gguf_get_bool(g, kv->key, &b);
    wk_gguf_get_str(g, kv->key, s, sizeof s);
    if (kv->type == WK_GGUF_STRING) {
        FUZZ_CHECK(kv->str.ptr >= (const char *)g->base && kv->str.len <= g->size &&
                   kv->str.ptr + kv->str.len <= (const char *)g->base + g->size);
    }
    if (kv->type == WK_GGUF_ARRAY && kv->arr_type == WK_GGUF_STRING && kv->arr_count) {
        FUZZ_CHECK(kv->arr_strs != NULL);
        volatile unsigned sink = 0;
        for (uint64_t k = 0; k < kv->arr_count; k++) {
            const wk_gguf_str *e = &kv->arr_strs[k];
            FUZZ_CHECK(e->ptr >= (const char *)g->base && e->len <= g->size &&
                       e->ptr + e->len <= (const char *)g->base + g->size);
            if (e->len) sink += (unsigned char)e->ptr[0] + (unsigned char)e->ptr[e->len - 1];
        }
        (void)sink;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    wk_gguf *g = wk_gguf_open_memory(data, size, err, sizeof err);
    if (!g) {
        FUZZ_CHECK(err[0] != 0); /* a refusal names its reason */
        return 0;
    }
    FUZZ_CHECK(g->base == data && g->size == size);
    for (uint64_t k = 0; k < g->n_kv; k++) check_kv(g, &g->kv[k]);
    for (uint64_t k = 0; k < g->n_tensors; k++) {
        check_tensor(g, &g->tensors[k]);
        FUZZ_CHECK(wk_gguf_find_tensor(g, g->tensors[k].name) != NULL);
    }
    wk_model_desc *m = malloc(sizeof *m);
    if (m) wk_model_desc_load(g, m, err, sizeof err);
    free(m);
    wk_tokenizer *t = wk_tokenizer_load(g, err, sizeof err);
    if (t) {
        int32_t ids[64];
        static const char text[] = "Hello, world! <s> 12 34 \xc3\xa9\xe2\x96\x81x";
        int n = wk_tokenizer_encode(t, text, sizeof text - 1, true, true, ids, 64);
        for (int k = 0; k < n && k < 64; k++) {
            char p[64];
            FUZZ_CHECK(ids[k] >= 0 && ids[k] < wk_tokenizer_n_vocab(t));
            wk_tokenizer_piece(t, ids[k], true, p, sizeof p);
        }
        wk_tokenizer_free(t);
    }
    wk_gguf_close(g);
    return 0;
}
