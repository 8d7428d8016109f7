/* What the fuzz targets and the seed-corpus writer (make_corpus.c) share: the fixed model a
 * sidecar is checked against, and the BPE vocabularies of the tokenizer target, built in memory
 * with the engine's GGUF writer. Header-only (static functions): each program includes it once. */
#ifndef WK_FUZZ_FIXTURES_H
#define WK_FUZZ_FIXTURES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/gguf_write.h"
#include "model/model.h"
#include "test_text.h"

/* ---- the sidecar target's model: 2 layers, 2 query heads, 1 KV head, head_dim 8 ---- */

#define FZ_SC_LAYERS 2
#define FZ_SC_HEADS 2
#define FZ_SC_HEADS_KV 1
#define FZ_SC_HEAD_DIM 8
#define FZ_SC_EMBD 16

static inline void fz_sidecar_hparams(wk_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    hp->arch = WK_ARCH_LLAMA;
    snprintf(hp->arch_name, sizeof hp->arch_name, "llama");
    hp->n_layer = FZ_SC_LAYERS;
    hp->n_head = FZ_SC_HEADS;
    hp->n_head_kv = FZ_SC_HEADS_KV;
    hp->head_dim = hp->head_dim_v = FZ_SC_HEAD_DIM;
    hp->n_embd = FZ_SC_EMBD;
}

/* A small "model" file (its fingerprint is what a sidecar must name). Caller frees. */
static inline uint8_t *fz_sidecar_model(size_t *size) {
    wk_gw *w = wk_gw_new();
    wk_gw_kv_str(w, "general.architecture", "llama");
    float x[FZ_SC_EMBD * 4];
    for (int i = 0; i < FZ_SC_EMBD * 4; i++) x[i] = (float)i * 0.25f - 3.0f;
    uint64_t ne[2] = {FZ_SC_EMBD, 4};
    wk_gw_tensor(w, "token_embd.weight", WK_GGML_F32, 2, ne, x);
    uint8_t *b = wk_gw_bytes(w, size);
    wk_gw_free(w);
    return b;
}

/* ---- the tokenizer target's GPT-2 byte-level BPE vocabulary (as tests/test_tokenizer.c's) ---- */



#define FZ_G "\xc4\xa0"
#define FZ_NL "\xc4\x8a"

/* A BPE vocabulary (256 byte tokens, 13 merges, control and user-defined tokens) with the given
 * tokenizer.ggml.pre (NULL: none). Caller frees. */
static inline uint8_t *fz_bpe_vocab(const char *pre, size_t *size) {
    static const char *const merges[] = {
        "h e", FZ_G " t", FZ_G "t he", "l l", "ll o", "e l", "1 2", "3 4", "n '", "' t", "o " FZ_G, FZ_G " " FZ_G,
        FZ_NL " " FZ_NL,
    };
    enum { N_MERGE = 13, XYZ = 256 + N_MERGE, EOT, IM_END, TAG, NTOK };
    static char bytes[256][5];
    static char merged[N_MERGE][16];
    const char *toks[NTOK];
    int32_t types[NTOK];
    for (int b = 0; b < 256; b++) {
        bytes[b][test_put_utf8(test_gpt2_byte_cp(b), bytes[b])] = 0;
        toks[b] = bytes[b];
        types[b] = 1;
    }
    for (int k = 0; k < N_MERGE; k++) {
        const char *m = merges[k], *sp = strchr(m + 1, ' ');
        snprintf(merged[k], sizeof merged[k], "%.*s%s", (int)(sp - m), m, sp + 1);
        toks[256 + k] = merged[k];
        types[256 + k] = 1;
    }
    toks[XYZ] = "xyz"; types[XYZ] = 1;
    toks[EOT] = "<|endoftext|>"; types[EOT] = 3;
    toks[IM_END] = "<|im_end|>"; types[IM_END] = 3;
    toks[TAG] = "<tag>"; types[TAG] = 4;
    wk_gw *w = wk_gw_new();
    wk_gw_kv_str(w, "general.architecture", "llama");
    wk_gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) wk_gw_kv_str(w, "tokenizer.ggml.pre", pre);
    wk_gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, NTOK);
    wk_gw_kv_arr_i32(w, "tokenizer.ggml.token_type", types, NTOK);
    wk_gw_kv_arr_str(w, "tokenizer.ggml.merges", merges, N_MERGE);
    wk_gw_kv_u32(w, "tokenizer.ggml.bos_token_id", EOT);
    wk_gw_kv_u32(w, "tokenizer.ggml.eos_token_id", EOT);
    uint8_t *b = wk_gw_bytes(w, size);
    wk_gw_free(w);
    return b;
}

#endif
