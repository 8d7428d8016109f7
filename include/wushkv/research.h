/* wushkv research API: the offline tools on top of the engine that `wushkv calibrate` and
 * `wushkv perplexity --layer-error` use, not the daemon: capturing a layer's queries, keys and
 * values, the layerwise reconstruction error of a KV format, WUSH-KV calibration and the sidecar
 * check. Conventions (errors, messages, "engine thread" and "any thread") as in wushkv.h. */
#ifndef WUSHKV_RESEARCH_H
#define WUSHKV_RESEARCH_H

#include "wushkv/wushkv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Calibration capture (for `wushkv calibrate`): evaluates n tokens (at most the engine's batch
 * size) as the sequence `seq` from position 0 (its length is set to 0 first) and returns, for
 * every layer, the post-RoPE queries with the attention scale divided out, and the keys
 * (post-RoPE) and values exactly as the f16 cache stores them. Layout [layer][token][head][head_dim]. */
typedef struct wk_capture {
    int n_tokens, n_layer, n_head, n_head_kv, head_dim;
    float *q;     /* n_layer * n_tokens * n_head * head_dim */
    float *k, *v; /* n_layer * n_tokens * n_head_kv * head_dim */
} wk_capture;
/* On success *out holds the capture (free it with wk_capture_free) and seq the n tokens. On error
 * *out is zeroed (nothing to free), err gets a message and seq's length is unspecified: reset it
 * before reuse. Engine thread. */
int wk_capture_run(wk_engine *e, wk_seq *seq, const int32_t *tokens, int n, wk_capture *out, char *err,
                   size_t errlen);
/* Frees the arrays and zeroes *c (a zeroed capture may be freed again). Touches no engine: any
 * thread that owns c. */
void wk_capture_free(wk_capture *c);
/* Layer il's attention output projection W_o as f32: n_embd rows of n_head*head_dim (row-major),
 * into out (that many floats). On error (no such layer, a weight type it cannot read) out is
 * untouched and err gets a message. Any thread. */
int wk_engine_wo(const wk_engine *e, int layer, float *out, char *err, size_t errlen);

/* Layerwise reconstruction error of a quantized KV cache (`wushkv perplexity --layer-error`).
 * The engine must have the f16 KV cache and no transform (the format is applied on the host, in
 * C, with the engine's quantizer twins and transform matrices). One wk_capture_run over the n
 * tokens (BOS first; n <= the engine's batch tokens) gives every layer's post-RoPE queries, keys
 * and values; then per layer and format:
 *   reference  y_ref = W_o attn(q, k, v): causal softmax attention per query head (GQA, the
 *              layer's sliding window), scaled by the model's attention scale, f16 k and v;
 *   quantized  k' = T_K k, q' = T_K^-T q, v' = T_V v, each group of k' and v' quantized and
 *              dequantized (keys and values j < sink or j > p - recent of a query at p stay
 *              exact; the sliding layers' own windows with swa_windows), o' = attn(q', k'^, v'^), o = T_V^-1 o', y_q = W_o o;
 *   rel_mse = sum_t ||y_q - y_ref||^2 / sum_t ||y_ref||^2 and the same on o before W_o.
 * Each layer's inputs are the f16 model's activations, so each layer's error is its own, not
 * accumulated from earlier layers' errors. Arithmetic in double (scores, softmax, outputs). */
typedef struct wk_kv_error_format {
    int bits;                /* 2, 3, 4; 0 or 16: no quantization (the transform alone: error ~0) */
    wk_kv_quant quant;
    int group;               /* elements per quantization group (Hadamard block); 0: 32 */
    float rho_k, rho_v;      /* percentile clip quantiles; 0: 0.96 and 0.92 */
    wk_kv_transform transform;
    const char *wush_path;   /* the WUSH sidecar (transform WK_KV_TRANSFORM_WUSH) */
    uint64_t transform_seed; /* Hadamard signs; 0: the engine's default (as wk_engine_params) */
    int sink, recent;        /* f16 windows, as wk_engine_params kv_sink / kv_recent; 0: off */
    bool swa_windows;        /* the sliding-window layers keep swa_sink / swa_recent instead, as */
    int swa_sink, swa_recent; /* wk_engine_params kv_swa_windows / kv_swa_sink / kv_swa_recent */
    int swa_bits;            /* the sliding-window layers' bits (2, 3, 4), as wk_engine_params
                              * kv_swa_bits; 0: bits (a quantized format only) */
    float clip;              /* QuEST's clip, as wk_engine_params kv_clip (0 or 1: none) */
    /* Wide keys, as wk_engine_params kv_key_bits / kv_wide_keys (their clip: clip); with
     * wide_keys_auto, the layers the engine chose for itself (wk_model_info kv_wide_keys). */
    int key_bits;
    uint64_t wide_keys[4];
    bool wide_keys_auto;
} wk_kv_error_format;

typedef struct wk_kv_error_layer {
    int layer;
    bool swa;              /* sliding-window layer */
    double rel_mse;        /* after W_o: sum ||y_q - y_ref||^2 / sum ||y_ref||^2 over tokens */
    double rel_mse_attn;   /* before W_o: the same on the attention output, query heads pooled */
} wk_kv_error_layer;

/* Evaluates n_fmt formats on one capture (the reference is computed once). out receives
 * n_fmt * n_layer entries, format-major. n_threads 0: online CPUs (results do not depend on it).
 * Takes one free sequence of the engine for the call. On error err gets a message and out's
 * n_fmt * n_layer entries are zeroed (out untouched when it is NULL or n_fmt <= 0). Engine thread
 * (its n_threads host threads are its own). */
int wk_kv_layer_error(wk_engine *e, const int32_t *tokens, int n, const wk_kv_error_format *fmts, int n_fmt,
                      int n_threads, wk_kv_error_layer *out, char *err, size_t errlen);

/* WUSH-KV calibration (`wushkv calibrate`, docs/design.md section 5). A calibrator runs chunks of
 * calibration text through the engine with capture on and accumulates, per layer and KV head, the
 * second moments of post-RoPE keys (G_k), of post-RoPE queries pooled over the GQA group (G_q) and
 * of values (G_v: plain, and weighted per token by the attention it receives); at the end it adds
 * the Gram of the head's W_o column block, builds T_K = WUSH(G_w = G_q, G_x = G_k) and
 * T_V = WUSH(G_w = Gram(W_o block), G_x = the chosen G_v) and writes the sidecar (a GGUF file;
 * layout in engine/wush/wush_sidecar.h). Same engine, tokens and params: a byte-identical file.
 *
 * Value weightings. With p_hij the attention of query head h at position i on key j, token j's
 * value is weighted by
 *   plain: 1;   mass: sum_{h in group, i} p_hij;   mass2: sum_{h in group, i} p_hij^2.
 * mass2 is what the output error sees when the quantization errors of different tokens are
 * independent (the error of o_hi = sum_j p_hij v_j has variance sum_j p_hij^2 var(e_j)). */
typedef struct wk_calib wk_calib;
typedef enum { WK_CALIB_V_PLAIN = 0, WK_CALIB_V_MASS = 1, WK_CALIB_V_MASS2 = 2 } wk_calib_v_moments;
typedef struct wk_calib_params {
    int block;                    /* transform block = quantizer group: a power of two dividing head_dim; 0: 32 */
    wk_calib_v_moments v_moments; /* which G_v builds T_V (default WK_CALIB_V_MASS) */
    int n_threads;                /* host threads for the moments; 0: online CPUs. The file does not depend on it */
    const char *text_name;        /* calibration text's name, recorded in the sidecar; NULL: "" */
} wk_calib_params;

typedef struct wk_calib_head {
    int layer, kv_head;
    bool swa;                     /* sliding-window layer */
    double gain_k;                /* predicted gain of T_K: tr(G_k) tr(G_q) / (sum s)^2 (>= 1) */
    double gain_v;                /* the same for the stored T_V */
    double gain_v_by[3];          /* the gain T_V would have with each wk_calib_v_moments */
    double sink_mass;             /* share of the attention mass on position 0 (BOS) */
    /* The attention output's predicted relative error per unit relative noise on the transformed
     * keys (a quantizer's step scales it): the variance of a score's error, sum_k (sum s_k)^2 / B
     * after WUSH (both transformed moments of block k have trace sum s_k) times the score scale
     * squared, times sum_j p_j^2 |v_j - o|^2 (what iid score noise does to o = sum_j p_j v_j,
     * linearised) over |o|^2, both summed over the calibration queries. Which layers' keys lose
     * most to a coarse code: the default's wide keys go to the largest (docs/wush-kv.md). */
    double key_err;
} wk_calib_head;

typedef struct wk_calib_report {
    int n_layer, n_head_kv, head_dim, block;
    wk_calib_v_moments v_moments;
    uint64_t n_tokens, n_chunks;  /* tokens evaluated (BOS included) and chunks */
    const wk_calib_head *heads;   /* n_layer * n_head_kv, layer-major; valid until wk_calib_destroy */
    char fingerprint[32];         /* the model's, as the sidecar records it */
} wk_calib_report;

/* Fills *p with the defaults: block 32, v_moments WK_CALIB_V_MASS, the rest 0 / NULL. Any thread. */
void wk_calib_params_default(wk_calib_params *p);
/* A calibrator on e: *out, or on error NULL and err gets a message. Takes one of the engine's
 * sequences until wk_calib_destroy. A calibrator is driven like its engine: engine thread (it
 * starts host threads of its own for the moments). */
int wk_calib_create(wk_engine *e, const wk_calib_params *p, wk_calib **out, char *err, size_t errlen);
/* Evaluates tokens (1..max_batch_tokens of them, a fresh sequence from position 0: put BOS first)
 * and accumulates their moments. On error err gets a message and nothing was accumulated (the
 * calibrator can go on). Engine thread. */
int wk_calib_add(wk_calib *c, const int32_t *tokens, int n, char *err, size_t errlen);
/* Builds the transforms and writes the sidecar to out_path (via a temporary file and rename, so a
 * failed run leaves no half-written sidecar). report may be NULL; on error it is untouched and
 * err gets a message. Engine thread. */
int wk_calib_finish(wk_calib *c, const char *out_path, wk_calib_report *report, char *err, size_t errlen);
/* Frees the calibrator and gives its sequence back; c may be NULL. Engine thread. */
void wk_calib_destroy(wk_calib *c);
/* Whether the sidecar at path belongs to the engine's model (fingerprint and shapes) and holds
 * every transform. WK_OK, WK_ERR_INVALID (another model's; the message names both),
 * WK_ERR_UNSUPPORTED (another sidecar version) or WK_ERR_FORMAT (unreadable, not a sidecar, or
 * incomplete). *block_size (may be NULL) gets the sidecar's block size; on error it is untouched
 * and err gets a message. Reads the file and what is fixed in the engine: any thread. */
int wk_wush_sidecar_check(const wk_engine *e, const char *path, int *block_size, char *err, size_t errlen);
/* The same check against the model file at model_path, without an engine or a device (reads the
 * GGUF's metadata and the first 4 KiB of each tensor): what a cache of sidecars checks before it
 * hands one to wk_engine_open. Errors as wk_wush_sidecar_check, plus WK_ERR_IO for a model that
 * cannot be read. Any thread. */
int wk_wush_sidecar_check_file(const char *model_path, const char *path, int *block_size, char *err, size_t errlen);
/* Whether the sidecar at path records the predicted key error per layer (wk_calib_head.key_err),
 * which the default format's wide keys rank layers by (wk_engine_params.kv_wide_keys_auto);
 * sidecars made before 2026-12-04 do not. False for a file that cannot be read as a GGUF. */
bool wk_wush_sidecar_has_key_err(const char *path);
/* Room for a model fingerprint ("fnv1a64:" + 16 hex digits + NUL). */
#define WK_MODEL_FINGERPRINT_LEN 32
/* The fingerprint a sidecar records for the model file at model_path (a hash of its architecture,
 * tensor names, types and shapes, and the first 4 KiB of each tensor's data), without a device:
 * the key of a sidecar cache. WK_OK, or WK_ERR_IO with a message when the file cannot be read as
 * GGUF. Any thread. */
int wk_model_fingerprint_file(const char *model_path, char out[WK_MODEL_FINGERPRINT_LEN], char *err, size_t errlen);
/* The head_dim (elements of one key or value head) of the model file at model_path, from its GGUF
 * metadata, without a device: what a KV format's group must divide, known before an engine opens.
 * WK_OK, or an error with a message (WK_ERR_IO: not readable as GGUF; others: wk_engine_open's for
 * the metadata). Any thread. */
int wk_model_head_dim_file(const char *model_path, int *head_dim, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
