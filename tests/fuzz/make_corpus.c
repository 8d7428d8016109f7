/* Writes the binary seed corpora of the fuzz targets with the project's own GGUF writer:
 * corpus/gguf (every metadata value type, every tensor type, a nested array, a BPE vocabulary,
 * another alignment and version) and corpus/sidecar (valid WUSH-KV sidecars, block sizes 1..8,
 * for fuzz_fixtures.h's model). Usage: fuzz_make_corpus CORPUS_DIR (subfolders must exist).
 * The text seeds (HTTP, JSON, chats, tokenizer text) are plain files kept in git. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gguf_writer.h"
#include "fuzz_fixtures.h"
#include "wush/wush_sidecar.h"

static const char *g_dir;

static bool put(const char *sub, const char *name, const uint8_t *b, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/%s", g_dir, sub, name);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(b, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = false;
    if (!ok) fprintf(stderr, "make_corpus: cannot write %s\n", path);
    return ok;
}

static bool put_gw(const char *sub, const char *name, wk_gw *w) {
    size_t n;
    uint8_t *b = wk_gw_bytes(w, &n);
    bool ok = b && put(sub, name, b, n);
    free(b);
    wk_gw_free(w);
    return ok;
}

/* Every scalar and array value type. */
static bool gguf_values(void) {
    wk_gw *w = wk_gw_new();
    uint8_t u8 = 7; int8_t i8 = -7; uint16_t u16 = 700; int16_t i16 = -700; uint64_t u64 = 1ull << 40;
    int64_t i64 = -(1ll << 40); double f64 = 2.5;
    wk_gw_kv_str(w, "general.architecture", "llama");
    wk_gw_kv_scalar(w, "v.u8", WK_GGUF_UINT8, &u8);
    wk_gw_kv_scalar(w, "v.i8", WK_GGUF_INT8, &i8);
    wk_gw_kv_scalar(w, "v.u16", WK_GGUF_UINT16, &u16);
    wk_gw_kv_scalar(w, "v.i16", WK_GGUF_INT16, &i16);
    wk_gw_kv_u32(w, "v.u32", 70000);
    wk_gw_kv_i32(w, "v.i32", -70000);
    wk_gw_kv_f32(w, "v.f32", 0.5f);
    wk_gw_kv_bool(w, "v.bool", true);
    wk_gw_kv_scalar(w, "v.u64", WK_GGUF_UINT64, &u64);
    wk_gw_kv_scalar(w, "v.i64", WK_GGUF_INT64, &i64);
    wk_gw_kv_scalar(w, "v.f64", WK_GGUF_FLOAT64, &f64);
    const char *strs[] = {"a", "", ("\xe2\x96\x81" "b")};
    wk_gw_kv_arr_str(w, "v.arr_str", strs, 3);
    float fs[3] = {1, -2, 3};
    wk_gw_kv_arr_f32(w, "v.arr_f32", fs, 3);
    int32_t is[3] = {1, -2, 3};
    wk_gw_kv_arr_i32(w, "v.arr_i32", is, 3);
    /* a nested array: ARRAY of 2 x (ARRAY of 2 u8) */
    uint8_t nested[4 + 8 + 2 * (4 + 8 + 2)];
    size_t k = 0;
    uint32_t t_arr = WK_GGUF_ARRAY, t_u8 = WK_GGUF_UINT8;
    uint64_t two = 2;
    memcpy(nested + k, &t_arr, 4), k += 4;
    memcpy(nested + k, &two, 8), k += 8;
    for (int i = 0; i < 2; i++) {
        memcpy(nested + k, &t_u8, 4), k += 4;
        memcpy(nested + k, &two, 8), k += 8;
        nested[k++] = 1, nested[k++] = 2;
    }
    wk_gw_kv_raw(w, "v.nested", WK_GGUF_ARRAY, nested, k);
    uint64_t ne[2] = {4, 2};
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    wk_gw_tensor(w, "t.f32", WK_GGML_F32, 2, ne, x);
    return put_gw("gguf", "values.gguf", w);
}

/* One tensor of every type (256 elements: one K-quant block, eight 32-blocks). */
static bool gguf_types(uint32_t version, uint32_t alignment, const char *name) {
    static const wk_ggml_type types[] = {WK_GGML_F32,  WK_GGML_F16,  WK_GGML_BF16, WK_GGML_Q4_0, WK_GGML_Q4_1,
                                         WK_GGML_Q5_0, WK_GGML_Q5_1, WK_GGML_Q8_0, WK_GGML_Q8_1, WK_GGML_Q2_K,
                                         WK_GGML_Q3_K, WK_GGML_Q4_K, WK_GGML_Q5_K, WK_GGML_Q6_K, WK_GGML_Q8_K};
    wk_gw *w = wk_gw_new();
    if (version != 3) wk_gw_set_version(w, version);
    if (alignment) wk_gw_set_alignment(w, alignment);
    wk_gw_kv_str(w, "general.architecture", "llama");
    uint64_t rng = 0x1234567;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        size_t nb = wk_gw_type_bytes(types[i], 256);
        uint8_t *b = calloc(1, nb);
        if (!b) return false;
        wk_gw_random_blocks(types[i], 256, &rng, b);
        char tn[32];
        snprintf(tn, sizeof tn, "t.%s", wk_ggml_type_name(types[i]));
        uint64_t ne[1] = {256};
        wk_gw_tensor(w, tn, types[i], 1, ne, b);
        free(b);
    }
    return put_gw("gguf", name, w);
}

static bool sidecar(int B) {
    size_t msize;
    uint8_t *mb = fz_sidecar_model(&msize);
    char err[256], fp[WK_FINGERPRINT_LEN];
    wk_gguf *model = mb ? wk_gguf_open_memory(mb, msize, err, sizeof err) : NULL;
    if (!model) return false;
    wk_model_fingerprint(model, fp);
    wk_gguf_close(model);
    free(mb);
    const int D = FZ_SC_HEAD_DIM;
    wk_gw *w = wk_gw_new();
    wk_gw_kv_str(w, "general.architecture", WK_WUSH_ARCH);
    wk_gw_kv_u32(w, WK_WUSH_KEY_VERSION, WK_WUSH_VERSION);
    wk_gw_kv_u32(w, WK_WUSH_KEY_BLOCK, (uint32_t)B);
    wk_gw_kv_f32(w, WK_WUSH_KEY_DAMP, 0.01f);
    wk_gw_kv_str(w, WK_WUSH_KEY_MODEL_NAME, "fuzz");
    wk_gw_kv_str(w, WK_WUSH_KEY_MODEL_ARCH, "llama");
    wk_gw_kv_u32(w, WK_WUSH_KEY_N_LAYER, FZ_SC_LAYERS);
    wk_gw_kv_u32(w, WK_WUSH_KEY_N_HEAD, FZ_SC_HEADS);
    wk_gw_kv_u32(w, WK_WUSH_KEY_N_HEAD_KV, FZ_SC_HEADS_KV);
    wk_gw_kv_u32(w, WK_WUSH_KEY_HEAD_DIM, FZ_SC_HEAD_DIM);
    wk_gw_kv_u32(w, WK_WUSH_KEY_N_EMBD, FZ_SC_EMBD);
    wk_gw_kv_str(w, WK_WUSH_KEY_FINGERPRINT, fp);
    wk_gw_kv_str(w, WK_WUSH_KEY_TEXT, "seed");
    float gain[FZ_SC_LAYERS * FZ_SC_HEADS_KV];
    for (int i = 0; i < FZ_SC_LAYERS * FZ_SC_HEADS_KV; i++) gain[i] = 1.0f + (float)i;
    wk_gw_kv_arr_f32(w, WK_WUSH_KEY_GAIN_K, gain, FZ_SC_LAYERS * FZ_SC_HEADS_KV);
    wk_gw_kv_arr_f32(w, WK_WUSH_KEY_GAIN_V, gain, FZ_SC_LAYERS * FZ_SC_HEADS_KV);
    float *blk = calloc((size_t)B * (size_t)D, sizeof *blk); /* D/B identity blocks */
    if (!blk) return false;
    for (int k = 0; k < D / B; k++)
        for (int i = 0; i < B; i++) blk[(k * B + i) * B + i] = 1.0f;
    for (int l = 0; l < FZ_SC_LAYERS; l++)
        for (int h = 0; h < FZ_SC_HEADS_KV; h++)
            for (int t = 0; t < 4; t++) {
                char tn[64];
                wk_wush_tensor_name(tn, sizeof tn, l, h, (wk_wush_tensor)t);
                uint64_t ne[3] = {(uint64_t)B, (uint64_t)B, (uint64_t)(D / B)};
                wk_gw_tensor(w, tn, WK_GGML_F32, 3, ne, blk);
            }
    free(blk);
    char name[32];
    snprintf(name, sizeof name, "sidecar-b%d.gguf", B);
    return put_gw("sidecar", name, w);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    bool ok = gguf_values() && gguf_types(3, 0, "types-v3.gguf") && gguf_types(2, 64, "types-v2-align64.gguf");
    size_t n;
    uint8_t *b = fz_bpe_vocab("llama3", &n);
    ok = ok && b && put("gguf", "bpe-vocab.gguf", b, n);
    free(b);
    for (int B = 1; B <= 8; B *= 2) ok = ok && sidecar(B);
    return ok ? 0 : 1;
}
