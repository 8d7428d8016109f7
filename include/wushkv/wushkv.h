/* wushkv public API: the contract between the daemon (server/: the CLI and the HTTP server) and
 * engine/. The offline research API on top of it (capture, layer error, calibration) is in
 * wushkv/research.h.
 *
 * Errors are negative wk_status values; wk_strerror() names them. A function that takes err and
 * errlen writes a NUL-terminated message there when it fails; each function's comment says what
 * its other out parameters hold on error.
 *
 * Threads. An engine, with its sequences (and research.h's calibrators), is driven by one thread
 * at a time: calls marked "engine thread" must not overlap on the same engine (the daemon makes
 * them on its engine thread, a command-line tool on its main thread). Calls marked "any thread"
 * read only what is fixed from wk_engine_open to wk_engine_close, so they may run on any thread at
 * the same time as any other call on that engine except wk_engine_close. Engines share no state:
 * different engines can be driven from different threads at once. */
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
    X(WK_ERR_NOT_FOUND, -8, "not found")                              \
    X(WK_ERR_KV_FULL, -9, "KV cache pool exhausted")

typedef enum {
#define WK_STATUS_ENUM(name, value, text) name = value,
    WK_STATUS_MAP(WK_STATUS_ENUM)
#undef WK_STATUS_ENUM
} wk_status;

/* The text of a wk_status ("unknown error" for any other value): a static string. Any thread. */
const char *wk_strerror(int status);

/* Room for an error message that names the problem (file offset, tensor, limit). */
#define WK_ERRMSG_LEN 512

typedef struct wk_engine wk_engine; /* model weights on a device + tokenizer */
typedef struct wk_seq wk_seq;       /* one sequence's KV cache and position */

/* KV cache quantizers and transforms (wk_engine_params kv_quant and kv_transform). */
typedef enum { WK_KV_QUANT_QUEST = 0, WK_KV_QUANT_PERCENTILE = 1, WK_KV_QUANT_ABSMAX = 2 } wk_kv_quant;
#define WK_KV_CLIP_MIN 0.25f
#define WK_KV_CLIP_MAX 4.0f
typedef enum { WK_KV_TRANSFORM_NONE = 0, WK_KV_TRANSFORM_HADAMARD = 1, WK_KV_TRANSFORM_WUSH = 2 } wk_kv_transform;
/* Shader variants (wk_engine_params.kernels): "cpu", tuned for lavapipe (texel buffers, register
 * tiles, no shared memory), or "gpu" (shared-memory matmul tiles, decode attention a key per
 * lane, more key splits, four subgroups a matvec workgroup); AUTO picks by the device's type. */
typedef enum { WK_KERNELS_AUTO = 0, WK_KERNELS_CPU = 1, WK_KERNELS_GPU = 2 } wk_kernels;

/* Sets of layers (wk_engine_params.kv_wide_keys, wk_model_info.kv_wide_keys): layer il is bit
 * il % 64 of word il / 64, layers 0..255. */
static inline bool wk_layer_set_has(const uint64_t set[4], int il) {
    return il >= 0 && il < 256 && (set[il / 64] >> (il % 64) & 1);
}
static inline void wk_layer_set_add(uint64_t set[4], int il) {
    if (il >= 0 && il < 256) set[il / 64] |= 1ull << (il % 64);
}
/* The set's layers in order, comma-separated ("5,11"; "" when empty), into buf; returns buf. */
const char *wk_layer_set_format(const uint64_t set[4], char *buf, size_t cap);

#define WK_BATCH_TOKENS_AUTO (-1)
typedef struct wk_engine_params {
    const char *model_path;
    int device_index;      /* -1: pick by type (discrete > integrated > virtual > cpu) */
    int max_ctx;           /* tokens per sequence; 0: min(model's trained context, 4096) */
    int max_batch_tokens;  /* tokens one forward step may carry (prefill chunk); 0: 512; WK_BATCH_TOKENS_AUTO: by
                            * the device, 128 on a CPU device and 512 elsewhere, at least max_seqs
                            * (docs/benchmarks-serving.md: a CPU's long steps delay a burst's first tokens) */
    int max_seqs;          /* sequences that may exist at once; 0: 1 */
    bool validation;       /* enable the Khronos validation layer */
    bool validation_sync;  /* with validation: its synchronization validation too (hazards between dispatches; slow) */
    bool verbose;          /* device and model summary on stderr */
    bool skip_warmup;      /* don't run every shader once at open (lavapipe compiles on first use) */
    int kernels;           /* wk_kernels; the CLI sets it from WUSHKV_KERNELS=cpu|gpu */
    /* Single variants forced on top of the set, "name=value[,...]" (NULL or "": none): matmul=register|
     * tiled, matmul_shuffle=on|off, matvec=N (subgroups a workgroup), attention=subgroup|lanes,
     * splits=cpu|gpu, transform_rope=on|off (a decode step's q/k norm and RoPE inside the KV
     * transform), store=invocation|lanes (an invocation, or a subgroup, a stored key or value
     * head), head=device|host (the output head by a shader, or by the host CPU: the cpu set's on a
     * CPU device); the CLI takes them from WUSHKV_KERNELS after the set (gpu,attention=subgroup).
     * An unknown one, or one the device cannot run, fails the open. */
    const char *kernel_variants;
    /* Host threads for the host's output head (head=host): 0, as many as the CPUs the process may
     * run on; the CLI sets it from LP_NUM_THREADS, lavapipe's own thread count, when that is set. */
    int host_threads;
    /* GPU time per pipeline: a timestamp after every dispatch (where the device has compute
     * timestamps), the sums printed on stderr by wk_engine_close. The engine reads no environment:
     * the CLI sets this from WUSHKV_PROFILE=1, as it sets device_index from WUSHKV_DEVICE and
     * validation from WUSHKV_VALIDATION=1. */
    bool profile;
    /* KV cache format, always a paged pool of kv_mem bytes of blocks (0: every sequence's full
     * context at its peak). kv_bits 0 or 16: blocks of f16 keys and values. 2, 3, 4: packed codes
     * with per-group f16 parameters, quantized by kv_quant in groups of kv_group (0: 32) elements
     * of a head vector. */
    int kv_bits;
    /* Per-layer-class formats: 2, 3 or 4 bits for the sliding-window layers' cache (the quantizer,
     * group, transform and windows stay kv_bits' ones); 0 or kv_bits: the same format as every
     * other layer, one pool. A different format puts the sliding layers' blocks in a second pool
     * (kv_mem split between the two in proportion to what a full-context sequence holds in each);
     * without sliding layers it changes nothing. Needs a quantized kv_bits. */
    int kv_swa_bits;
    wk_kv_quant kv_quant;
    int kv_group;
    uint64_t kv_mem;
    /* Transform of keys (after RoPE) and values (folded into W_v/W_o). WUSH reads
     * wush_path (a `wushkv calibrate` sidecar for this model); Hadamard uses blocks of kv_group
     * (0: 32) and signs from kv_transform_seed. Works with every KV format. */
    wk_kv_transform kv_transform;
    const char *wush_path;
    uint64_t kv_transform_seed;
    /* f16 windows of a quantized cache: a query at position p reads keys and values j < kv_sink
     * and j > p - kv_recent in f16, the rest from the codes (0, 0: off). Per layer class: with
     * kv_swa_windows the sliding-window layers keep kv_swa_sink / kv_swa_recent instead (0, 0: none
     * for them; the full-attention layers keep kv_sink / kv_recent); without, every layer keeps
     * kv_sink / kv_recent. A window for a class the model lacks changes nothing. */
    int kv_sink, kv_recent;
    bool kv_swa_windows;
    int kv_swa_sink, kv_swa_recent;
    /* kv_swa_bits and the sliding layers' windows are a default nobody asked for (the CLI's
     * per-class default): on a model without sliding-window layers no stderr line says they have
     * no effect. */
    bool kv_swa_default;
    /* Percentile quantizer clip quantiles for keys and values (0: 0.96 and 0.92). */
    float kv_rho_k, kv_rho_v;
    /* QuEST's clip: the step of the main (kv_bits) format is kv_clip times the Gaussian-MSE-
     * optimal one (0 or 1: that one; else within [WK_KV_CLIP_MIN, WK_KV_CLIP_MAX], QuEST only).
     * A sliding-window pool of its own width (kv_swa_bits) keeps the unclipped step: a wider
     * step helps attention at 2 bits and hurts at 4 (docs/wush-kv-frontier.md, QuEST's clip). */
    float kv_clip;
    /* Wide keys: the keys of the layers in kv_wide_keys (bit il % 64 of word il / 64 for layer il)
     * take kv_key_bits (3 or 4, more than kv_bits) while their values keep kv_bits; the quantizer,
     * group, clip, transform and windows stay the format's. Long-context error sits in the keys
     * of a few full-attention layers (docs/wush-kv.md, "Wide keys"), so a bit there buys more than
     * anywhere else. kv_key_bits 0 or no layer set: none. The layers must be in the first pool:
     * with a sliding-window format of their own (kv_swa_bits), full-attention layers only. */
    int kv_key_bits;
    uint64_t kv_wide_keys[4];
    /* Wide keys chosen by the engine instead of kv_wide_keys: one full-attention layer in three (at
     * least one) gets kv_key_bits keys, those whose keys the WUSH sidecar predicts lose most to the
     * code (its key_err, wushkv calibrate; docs/wush-kv.md "Wide keys"). Needs the WUSH transform
     * and a sidecar that has key_err; without the transform, on an f16 cache or with kv_key_bits 0,
     * nothing is widened. */
    bool kv_wide_keys_auto;
    /* Unmap the model file once the engine is open. Serving never reads it again (the weights are on
     * the device, the vocabulary and chat template copied), so a model file truncated, replaced or
     * removed under a running server cannot fault the process (a read from a truncated mapping is
     * SIGBUS), and its pages leave the process. The research API (research.h: calibration, layer
     * error, wk_engine_wo) reads the file through the engine and refuses such an engine. */
    bool release_model_file;
    /* Automatic prefix caching (wk_seq_create_prefix): without f16 windows, full blocks stay
     * cached after their sequence ends and a new sequence takes a cached prefix by reference; with
     * f16 windows (--kv-sink/--kv-recent), an ended sequence is parked whole (wk_seq_park) and a
     * prompt that extends its tokens adopts it, and window snapshots (wk_seq_snapshot_at) let a
     * prompt take another's full blocks at a snapshot point. */
    bool prefix_cache;
    /* Window snapshots kept at once (f16 windows with prefix_cache; each kv_window_bytes of device
     * memory besides the pool): 0: 2 * max_seqs, negative: none, at most 65536. */
    int prefix_snapshots;
} wk_engine_params;

typedef struct wk_model_info {
    const char *arch;          /* "gemma3", "llama", "qwen3" */
    const char *name;          /* general.name or file name */
    const char *device_name;   /* Vulkan physical device */
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim;
    int n_ctx_train, max_ctx;
    int max_batch_tokens; /* the most tokens a step may carry (wk_engine_params' resolved) */
    int32_t bos, eos, eot;     /* -1 where absent; eot = end-of-turn token if the vocab has one */
    bool add_bos;
    uint64_t weight_bytes;     /* device bytes holding weights */
    /* Matrix elements on the device, and those whose scale/offset pairs are stored as halves (the
     * q8h format, docs/engine.md "Device weight formats"): the same values in half the bytes. */
    uint64_t weight_elements, weight_half_pair_elements;
    uint64_t kv_bytes_per_token;  /* all layers, keys and values, as stored */
    double kv_bits_per_element;   /* codes + scales + zeros per stored K/V element (16 for f16) */
    uint64_t kv_pool_bytes;       /* device bytes of the whole KV cache (with per-layer-class formats both
                                   * pools' bytes; their buffer adds less than one block between them) */
    /* The paged pool (every format): the layers are split into kv_layer_groups
     * equal groups; for every kv_block_tokens tokens a sequence holds one block (kv_block_bytes)
     * per group, except that the last kv_swa_groups groups (sliding-window layers, window
     * kv_swa_window tokens) give back blocks no later query can see; plus, with f16 windows, one
     * window slot of kv_window_bytes. The pool has kv_pool_blocks blocks and a slot for each of
     * max_seqs. */
    int kv_block_tokens, kv_layer_groups, kv_swa_groups, kv_swa_window;
    uint64_t kv_block_bytes, kv_window_bytes, kv_pool_blocks;
    /* Per-layer-class formats (wk_engine_params.kv_swa_bits): kv_swa_bits is the sliding layers'
     * format (kv_bits' when uniform), a sliding group's block is kv_swa_block_bytes
     * (kv_block_bytes when uniform). kv_swa_pool_bytes > 0: those blocks come from a second pool
     * of kv_swa_pool_blocks blocks and kv_swa_pool_bytes bytes, so the first pool (full-attention
     * layers and windows) has kv_pool_bytes - kv_swa_pool_bytes; 0: one pool for every layer. */
    int kv_bits, kv_swa_bits;
    uint64_t kv_swa_block_bytes, kv_swa_pool_bytes, kv_swa_pool_blocks;
    /* Wide keys (wk_engine_params): their bits (0: none) and the layers that have them. */
    int kv_key_bits;
    uint64_t kv_wide_keys[4];
    /* The f16 windows (wk_engine_params kv_sink, kv_recent; 0 for the f16 cache) of the
     * full-attention layers and kv_swa_sink, kv_swa_recent of the sliding-window layers (0 for a
     * class the model does not have). */
    int kv_sink, kv_recent, kv_swa_sink, kv_swa_recent;
    /* The device, for reports: its type ("discrete GPU", "integrated GPU", "virtual GPU", "CPU",
     * "other"), its driver's name and version string (empty below Vulkan 1.2), the subgroup size
     * the shaders run at, shared memory per workgroup, PCI vendor and device ids. */
    const char *device_type, *device_driver, *device_driver_info;
    const char *kernels; /* the shader variants the engine chose: "cpu" or "gpu" (wk_kernels) */
    const char *kernel_variants; /* ... each of them, as wk_engine_params.kernel_variants spells them */
    uint32_t device_subgroup_size, device_shared_memory_bytes, device_vendor_id, device_id;
    bool prefix_cache; /* automatic prefix caching is on (wk_engine_params.prefix_cache) */
    bool prefix_cache_park; /* ... in its parking form (the format has f16 windows) */
    /* Window snapshots (wk_seq_snapshot_at): how many can be kept at once, and their device bytes
     * (kv_snapshots * kv_window_bytes, outside kv_pool_bytes); 0 without. */
    int kv_snapshots;
    uint64_t kv_snapshot_bytes;
} wk_model_info;

/* Bytes the attention of one decode step reads from the KV cache of a sequence that already holds
 * depth tokens (the new token at position depth), all layers: every key and value the token can
 * see (a sliding-window layer only its window) as the format stores it -- f16 rows, or codes and
 * group parameters, or f16 window rows for the sinks and recent keys -- read once per group of
 * query heads sharing a KV head. With windows the token's own key and value come from the step's
 * activations and are not counted. Logical bytes the shaders request, before any cache. Any thread. */
uint64_t wk_kv_decode_read_bytes(const wk_engine *e, uint64_t depth);

/* GPU time per pipeline, summed since the engine opened (wk_engine_params.profile; the figures
 * wk_engine_close prints). out[i] for the pipelines that ran, at most max of them; returns how many
 * ran (0 without a profile: not asked for, or a device without compute timestamps; out may be NULL
 * when max is 0). A pipeline's time runs from the previous dispatch's timestamp to its own, so
 * barrier waits count. Take two readings and subtract to time a phase. Engine thread. */
typedef struct wk_profile_entry {
    const char *name;     /* "attention_bulk", "matvec_q8a", ...; "output_head": the head's matrix */
    double ms;
    uint64_t dispatches;
} wk_profile_entry;
int wk_engine_profile(const wk_engine *e, wk_profile_entry *out, int max);

/* The most bytes the paged pool of `info` holds for one sequence growing to n_tokens in steps of
 * at most chunk tokens (full-attention groups keep every block, sliding groups the window and
 * one step's blocks, plus the window slot): what admission must count.
 * A pure function of its arguments: any thread. */
uint64_t wk_kv_peak_bytes(const wk_model_info *info, uint64_t n_tokens, uint64_t chunk);
/* The part of wk_kv_peak_bytes held in pool `pool`: 0 the first pool (every layer with one format;
 * with per-layer-class formats the full-attention layers and the windows), 1 the sliding layers'
 * own pool (0 without one). Admission needs room in both. Any thread. */
uint64_t wk_kv_pool_peak_bytes(const wk_model_info *info, int pool, uint64_t n_tokens, uint64_t chunk);

/* Fills *p with the defaults: every field 0, false or NULL but device_index -1. Any thread. */
void wk_engine_params_default(wk_engine_params *p);
/* Loads the model of p onto a device (and, unless p->skip_warmup, runs every shader once). On
 * success *out is the engine; on error *out is NULL and err gets a message. Any thread (the
 * engine is then driven by one thread at a time, see Threads above). */
int wk_engine_open(const wk_engine_params *p, wk_engine **out, char *err, size_t errlen);
/* Frees the engine and its device (first printing the profile when it was opened with profile);
 * e may be NULL. Destroy its sequences (and calibrators) first.
 * Engine thread, with no other call on e running or to come. */
void wk_engine_close(wk_engine *e);
/* The model and cache description; valid until wk_engine_close. No error. Any thread. */
const wk_model_info *wk_engine_info(const wk_engine *e);
/* The model's tokenizer.chat_template (a Jinja source) or NULL when the file has none. Fixed for
 * the engine's lifetime. Any thread. */
const char *wk_engine_chat_template(const wk_engine *e);

/* Tokenizer. add_special: BOS (and EOS where the vocab asks); parse_special: turn control-token
 * text such as "<start_of_turn>" into its id. Returns the token count (may exceed max: then call
 * again with a bigger buffer; out may be NULL when max is 0), or a negative wk_status. On success
 * out[0 .. min(count, max)) holds the first tokens; on error out's contents are unspecified.
 * Any thread. */
int wk_tokenize(const wk_engine *e, const char *text, size_t len, bool add_special, bool parse_special,
                int32_t *out, int max);
/* The same into an array it allocates to fit: on success *out is a malloc'd array (even for 0
 * tokens; the caller frees it) and the token count is returned. On error a negative wk_status
 * (WK_ERR_NOMEM, or WK_ERR_INVALID for a text too long for INT32_MAX tokens) and *out untouched.
 * Any thread. */
int wk_tokenize_alloc(const wk_engine *e, const char *text, size_t len, bool add_special, bool parse_special,
                      int32_t **out);
/* A byte range [off, off + len) of a text. */
typedef struct wk_text_range {
    size_t off, len;
} wk_text_range;
/* wk_tokenize_alloc with parse_special, except that a control token's text is tokenized as text
 * where it overlaps one of the n_plain `plain` ranges: the words a user wrote, inside a prompt
 * whose chat template supplies the real control tokens (a user cannot forge a turn). Returns and
 * *out as wk_tokenize_alloc. Any thread. */
int wk_tokenize_alloc_plain(const wk_engine *e, const char *text, size_t len, bool add_special,
                            const wk_text_range *plain, int n_plain, int32_t **out);
/* Bytes of one token's text (not NUL-terminated); special tokens are empty unless render_special.
 * Returns the length (may exceed cap: buf gets the first cap bytes), or a negative wk_status (a
 * token outside the vocabulary, out of memory) with buf untouched. Any thread. */
int wk_token_to_piece(const wk_engine *e, int32_t token, bool render_special, char *buf, int cap);
/* Whether token ends a generation (EOS, end of turn, ...); false for an id outside the vocabulary.
 * No error. Any thread. */
bool wk_token_is_eog(const wk_engine *e, int32_t token);

/* Sequences. A sequence owns its KV cache slot; reset clears it for reuse. Every call below is
 * engine thread: a sequence's state changes with every wk_forward that carries it. */
/* A new empty sequence: *out, or on error NULL and WK_ERR_CONTEXT_FULL (every one of max_seqs is
 * in use), WK_ERR_KV_FULL (the paged pool has no room for it) or WK_ERR_NOMEM. Engine thread. */
int wk_seq_create(wk_engine *e, wk_seq **out);
/* Frees the sequence and gives its KV cache back; s may be NULL. No error. Engine thread. */
void wk_seq_destroy(wk_seq *s);
/* Empties the sequence (length 0, its paged blocks back to the pool, peak 0). No error. Engine
 * thread. */
void wk_seq_reset(wk_seq *s);
/* Tokens evaluated into the sequence. No error. Engine thread. */
int wk_seq_len(const wk_seq *s);
/* Device bytes of KV cache this sequence holds now (whole blocks, every format). No error.
 * Engine thread. */
uint64_t wk_seq_kv_bytes(const wk_seq *s);
/* The most it held since it was created or reset, during a step included (the paged cache's
 * sliding-window layers hold a step's blocks before they release the ones out of every window).
 * No error. Engine thread. */
uint64_t wk_seq_kv_peak_bytes(const wk_seq *s);
/* The part of wk_seq_kv_bytes held in pool `pool` (wk_kv_pool_peak_bytes' numbering; 0 for a pool
 * that does not exist, and for pool 1 of the f16 cache). No error. Engine thread. */
uint64_t wk_seq_kv_pool_bytes(const wk_seq *s, int pool);

/* Automatic prefix caching (info.prefix_cache), its block form (formats without f16 windows;
 * with them see wk_seq_park below, and this call takes only a prefix that ends at a window
 * snapshot, wk_seq_snapshot_at, and copies the snapshot into s's window slot). Every full block of kv_block_tokens tokens a
 * sequence computes is named by a hash chain over its tokens and all before them (and the model
 * and KV format), and stays in the pool after the sequence ends, until an allocation needs the
 * block (least recently released first). wk_seq_prefix_attach puts the longest cached prefix of
 * tokens[0 .. n_tokens) -- whole blocks only -- into the EMPTY sequence s by reference and sets its
 * length to it; the caller then feeds tokens from there. For sliding-window layers only the blocks
 * the next query can see must still be cached. Pass n_tokens = prompt length - 1 so the last
 * prompt token is computed (its logits are needed). What a hit gives is bit for bit what the
 * sequence that computed those blocks stored: the logits after it equal a cold run's that fed the
 * prefix in the same steps (at temperature 0 the same tokens whenever the steps match; a prefix
 * computed in other step sizes can differ by float rounding, as batch composition already makes
 * runs differ). Returns the tokens taken (a multiple of kv_block_tokens; 0: no hit, caching off,
 * or s not empty), or WK_ERR_NOMEM (s is then empty). Engine thread. */
int wk_seq_prefix_attach(wk_seq *s, const int32_t *tokens, int n_tokens);
/* Parking, prefix caching's form for formats with f16 windows (info.prefix_cache_park): a
 * cached block cannot serve them (the query after it also reads the sinks and the recent ring,
 * which live in the sequence's window slot), so an ended sequence is kept whole instead. wk_seq_park
 * hands s to the engine (the caller must not use it again): with parking on and s non-empty it
 * joins an LRU list of parked sequences with its blocks, window slot and the token ids in its
 * cache; otherwise it is destroyed. A parked sequence is destroyed, least recently parked first,
 * whenever a sequence slot (wk_seq_create) or a block (wk_forward) is wanted and none is free, so
 * it never stands in anyone's way; wk_engine_prefix_cache_flush destroys them all. Park only a
 * sequence whose cache is sound (a finished one; not one whose step failed). No error. Engine
 * thread. */
void wk_seq_park(wk_seq *s);
/* A new sequence for a prompt, with as much of tokens[0 .. n_tokens) as the cache holds already in
 * it (pass the prompt less its last token, as for wk_seq_prefix_attach). With parking: the parked
 * sequence sharing the longest start a with tokens is adopted -- taken off the list, cut back to a
 * tokens -- provided a is at least half its L tokens (a prompt that shares only its first tokens
 * does not take another conversation's sequence away) and its cache still holds everything the query at position a reads: the recent
 * ring's f16 rows of positions max(sink, a - recent + 1) .. a - 1, which a sequence of L tokens
 * has iff a >= L - 1, a <= sink or L <= sink + recent, and in every sliding-window layer the blocks of
 * positions >= a - window + 1 (wk_kv_seq_can_truncate). A prompt that extends all L tokens (a
 * chat's next turn) always qualifies. Without parking: wk_seq_create + wk_seq_prefix_attach.
 * Caching off: wk_seq_create. Returns the tokens *out already holds (>= 0; 0 for a cold start),
 * or wk_seq_create's error (*out NULL). Engine thread. */
int wk_seq_create_prefix(wk_engine *e, const int32_t *tokens, int n_tokens, wk_seq **out);
/* Window snapshots (info.kv_snapshots > 0; docs/design.md "Prefix caching", design 3): with f16
 * windows a cached block serves a hit at its end P only together with the window rows the query at
 * P reads, so when a step leaves a sequence at exactly a snapshot point P (a multiple of
 * kv_block_tokens) the engine copies its window slot into a snapshot kept with the block ending at
 * P (evicted with it, or least recently used first among info.kv_snapshots). wk_seq_create_prefix
 * (after parking, which goes first) and wk_seq_prefix_attach then take the longest cached prefix
 * that ends at a snapshot. Snapshot points: wk_seq_create_prefix sets one at the last block
 * boundary of tokens[0 .. n_tokens) (a prompt's end: retries, n > 1, few-shot prefixes); the
 * caller adds others (a chat's system prompt) with wk_seq_snapshot_at, which rounds n_tokens down
 * to a block boundary and returns it (0: none, no snapshots, or not past the sequence's length).
 * A snapshot is only taken when a step ends exactly at the point: a caller that prefills in
 * chunks ends a chunk at wk_seq_snapshot_next(s), the next point past s's length (0: none). No
 * error. Engine thread. */
int wk_seq_snapshot_at(wk_seq *s, int n_tokens);
int wk_seq_snapshot_next(const wk_seq *s);
/* Forgets every cached block (blocks sequences hold stay, unnamed) and destroys every parked
 * sequence. No error. Engine thread. */
void wk_engine_prefix_cache_flush(wk_engine *e);
/* Blocks of one KV pool now (wk_kv_pool_peak_bytes' numbering; all 0 for a pool that does not
 * exist and for the f16 cache): used_blocks are held by sequences, each counted once however many
 * share it; cached_blocks are kept only by the prefix cache (free for any allocation, which evicts
 * them); free_blocks are empty. used_blocks + cached_blocks + free_blocks = the pool's blocks.
 * used_bytes: used blocks + the f16 window slots sequences hold (used_windows). Engine thread. */
typedef struct wk_kv_usage {
    uint64_t used_blocks, cached_blocks, free_blocks, used_windows;
    uint64_t used_bytes, cached_bytes;
    /* Parked sequences (wk_seq_park) count as cached, not used: their blocks are in
     * cached_blocks, their window slots in cached_windows and cached_bytes (with their blocks');
     * parked_seqs how many (pool 0 only). */
    uint64_t cached_windows, parked_seqs;
    /* Window snapshots held (pool 0 only), and their bytes, which cached_bytes includes though they
     * live outside the pool (info.kv_snapshot_bytes). */
    uint64_t snapshots, snapshot_bytes;
} wk_kv_usage;
void wk_engine_kv_usage(const wk_engine *e, int pool, wk_kv_usage *out);

/* One forward step over a batch: item i appends n_tokens tokens to seq (at positions
 * seq_len..seq_len+n-1). logits may be NULL (prefill without logits). Logits rows (n_vocab floats
 * each) are written for every token when all_logits, else for the last token only, in item order,
 * into `logits`. Returns the number of logit rows written, or a negative wk_status: then err gets
 * a message, logits' contents are unspecified and no sequence's tokens changed (a paged sequence
 * may keep blocks it reserved for the step as spare capacity). Engine thread. */
typedef struct wk_batch_item {
    wk_seq *seq;
    const int32_t *tokens;
    int n_tokens;
    bool all_logits;
} wk_batch_item;
int wk_forward(wk_engine *e, const wk_batch_item *items, int n_items, float *logits, char *err, size_t errlen);

/* Sampling on one logits row. temp <= 0 is greedy; top_k <= 0 and top_p >= 1 disable those.
 * A sampler belongs to no engine: each one is used by one thread at a time, and different
 * samplers may run on different threads at once. */
typedef struct wk_sampler_params {
    float temperature, top_p, min_p;
    int top_k;
    uint64_t seed;
} wk_sampler_params;
typedef struct wk_sampler wk_sampler;
/* A sampler over n_vocab logits, or NULL on error (p NULL, n_vocab <= 0, out of memory). Any
 * thread. */
wk_sampler *wk_sampler_create(const wk_sampler_params *p, int n_vocab);
/* Frees it; s may be NULL. No error. The thread that uses s, once it is done. */
void wk_sampler_destroy(wk_sampler *s);
/* One token id from logits (n_vocab floats, not modified); a draw (temperature > 0) advances the
 * sampler's random state. No error. One thread at a time per sampler. */
int32_t wk_sampler_sample(wk_sampler *s, const float *logits);

/* log(sum over i of exp(x[i])) over n floats, the normaliser of a log-softmax, in vectors (about
 * 0.5 ms for 262144 floats where libm's exp takes 1.5 ms); NaN entries add nothing. -inf when every
 * entry is -inf or NaN, +inf when one is +inf. Relative error about 1e-7. No error. Any thread. */
float wk_logsumexp(const float *x, int n);

#ifdef __cplusplus
}
#endif
#endif
