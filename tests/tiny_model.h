/* Writes small random-weight GGUF models (gemma3, llama or qwen3) with the test-side writer, so
 * forward passes can be tested without the real model. */
#ifndef WK_TEST_TINY_MODEL_H
#define WK_TEST_TINY_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "wushkv/wushkv.h"

/* Fixed sizes: n_embd 256, n_head 4, n_head_kv 2, head_dim 64, n_ff 512, vocab 512, ctx 2048. */
#define TINY_N_EMBD 256
#define TINY_N_HEAD 4
#define TINY_N_HEAD_KV 2
#define TINY_HEAD_DIM 64
#define TINY_N_FF 512
#define TINY_N_VOCAB 512
#define TINY_N_CTX 2048

typedef struct tiny_model_opts {
    const char *arch;   /* "llama", "gemma3" or "qwen3" (llama's blocks with q/k norms, NEOX RoPE, a tied head) */
    uint64_t seed;      /* same seed, same file */
    int n_layer;        /* 0: 6 for gemma3 (layer 5 global), 3 for llama and qwen3 */
    bool mixed_quants;  /* false: every matrix F32; true: the matrices cycle through F32, F16, BF16
                         * and every block type (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K) */
    int sliding_window; /* gemma3: 0 -> 16; < 0 -> no sliding window key (every layer global) */
    /* With mixed_quants, the embedding's type (the head's too where tied): WK_GGML_F32 (0) takes
     * the default, Q8_0 on gemma3 as in the real model, F16 elsewhere. */
    wk_ggml_type embd_type;
    /* Another GGUF (a model, or a vocabulary-only file as llama.cpp's models/ggml-vocab-*.gguf)
     * whose tokenizer.* metadata replaces the tiny vocabulary; the embeddings and output head take
     * its size. NULL: the tiny vocabulary below. */
    const char *vocab_from;
    const char *chat_template; /* written as tokenizer.chat_template (over vocab_from's); NULL: none */
} tiny_model_opts;

/* Vocabulary (SPM, "llama" tokenizer model): 0 <unk>, 1 <s>, 2 </s>, 3..258 byte tokens
 * <0x00>..<0xFF>, gemma3 only: 259 <start_of_turn>, 260 <end_of_turn>; then "▁", the printable
 * ASCII characters and merges up to 512. add_bos true. */
#define TINY_TOKEN_UNK 0
#define TINY_TOKEN_BOS 1
#define TINY_TOKEN_EOS 2
#define TINY_TOKEN_BYTE0 3

bool tiny_model_write(const tiny_model_opts *o, const char *path);

/* The same file in memory (for wk_gguf_open_memory); caller frees. NULL on failure. */
uint8_t *tiny_model_bytes(const tiny_model_opts *o, size_t *size);

/* The quantizer the files are made with: n f32 values (n a multiple of the block size) encoded as
 * `type` in a new buffer (free()); simple round-to-nearest, not ggml's error-minimizing search.
 * NULL for types it cannot write. */
uint8_t *tiny_encode(wk_ggml_type type, const float *x, size_t n);

/* n tokens of the tiny vocabulary drawn from seed: BOS, then byte and piece tokens. */
void tiny_model_tokens(int32_t *tok, int n, uint64_t seed);

/* Engine parameters for a tiny model file: the defaults with a 64-token context and batch. */
void tiny_engine_params(wk_engine_params *p, const char *path);

#endif
