/* The forward pass: records one step (a batch of tokens from any sequences) as one command
 * buffer of shader dispatches, submits it once, and reads back the requested logits rows. With
 * the layers' products on the host (linear_host), a step is a submit a layer, the host's work
 * between them (forward_host.c; with kv_host also the cache writes, forward_host_kv.c), and a
 * decode step with attn_host one submit, its attention on the host too (forward_host_attn.c). */
#ifndef WK_FORWARD_H
#define WK_FORWARD_H

#include "kv/attention_plan.h"
#include "kv/attention_record.h"
#include "kv/kv_cache.h"
#include "kv/kv_transform.h"
#include "host/host_matmul.h"
#include "vulkan/shader_params.h"
#include "vulkan/vk_pipelines.h"
#include "weights.h"

typedef struct wk_acts {
    wk_buf tokens;        /* [T] int32, host-visible */
    wk_buf rows;          /* [T] wk_row_info, host-visible */
    wk_buf tables;        /* paged cache: the step's block tables, concatenated, host-visible */
    wk_buf tiles;         /* paged cache: the step's attention query tiles, host-visible */
    wk_buf attn_part;     /* paged cache: split-attention partials, WK_ATTN_PART_ROWS rows */
    wk_buf win_dest;      /* paged cache with f16 windows: [window class][T] window row (pool words) or ~0,
                           * host-visible */
    wk_buf h;             /* [T][n_embd] residual stream */
    wk_buf xn;            /* [T][n_embd] normed input of the next matmul; RGBA32F view */
    wk_buf q, k, v;       /* [T][heads*head_dim] */
    wk_buf k16, v16;      /* [T][n_head_kv*head_dim] f16: this step's k, v as attention_paged's windows read
                           * them (kv_store_quant writes them); RG32UI view */
    wk_buf attn;          /* [T][n_head*head_dim] attention output; RGBA32F view */
    wk_buf o;             /* [T][n_embd] attention projection */
    wk_buf gate, up;      /* [T][n_ff] */
    wk_buf act;           /* [T][n_ff] gated activation; RGBA32F view */
    wk_buf ffn;           /* [T][n_embd] FFN output */
    wk_buf head_in;       /* [logit_rows][n_embd] rows that want logits; RGBA32F view (host-visible with
                           * head_host) */
    wk_buf logits;        /* [logit_rows][n_vocab], host-visible; absent with head_host */
    wk_buf rope;          /* [2 bases][max_ctx][n_rot/2] (cos, sin); RG32F view */
    wk_buf debug;         /* [n_layer][T][n_embd] residual after each layer, host-visible (tests) */
    wk_buf cap_q;         /* [n_layer][T][n_head*head_dim] post-RoPE queries, host-visible (calibration) */
    wk_buf cap_k, cap_v;  /* [n_layer][T][n_head_kv*head_dim] f16, the cache rows as stored (calibration) */
} wk_acts;

typedef struct wk_fwd {
    wk_vk *vk;
    wk_pipelines *pipes;
    const wk_hparams *hp;
    const wk_weights *w;
    wk_kv_cache *kv;
    wk_acts a;
    int max_tokens;       /* tokens per step */
    int logit_rows;       /* logits rows computed per submit (every step row with head_host) */
    /* The host CPU's share (forward_host.c): the output head (wk_pipelines.head_host; the head
     * matrix read in place through its host mapping) and the layers' weight products with the row
     * work between them (linear_host), on host_pool's threads with instructions host_isa;
     * host_scratch holds a joined q/k/v or gate/up product before it is split. */
    bool head_host, linear_host;
    bool kv_host; /* with linear_host: q/k norm, RoPE, the transform and the stores too (forward_host_kv.c) */
    /* With kv_host: the attention too (forward_host_attn.c; attn_step: this step's is), each
     * (group of a chunk's rows, KV head, key split) a job, partials in attn_part (attn_host_rows
     * (row, KV head, split) triples), attn_rows the rows' keys, attn_groups (first row, rows) pairs. */
    bool attn_host, attn_step;
    float *attn_part;
    struct wk_host_attn_row *attn_rows;
    uint32_t *attn_groups;
    size_t attn_host_rows;
    const uint32_t *step_win_words; /* the step's window slots (wk_fwd_step's win_words) */
    wk_host_matrix head;
    wk_host_pool *host_pool;
    wk_host_isa host_isa;
    float *host_scratch;
    int max_ctx;
    bool debug_layers;
    bool capture;         /* copy post-RoPE q and the stored k, v of every layer (wk_fwd_enable_capture) */
    const wk_kv_xform *xform; /* key/query transform after RoPE; NULL: none */
    wk_buf xform_buf;     /* every layer's [n_head_kv][2][D/B][B][B] matrices (not with kv_host) */
    float *xform_cols;    /* with kv_host instead: the same, each block by panels (wk_host_block_columns) */
    /* With a transform on the device: qk_norm_rope's output, kv_transform's input ([T][n_head*D]
     * queries, then from xform_k_offset [T][n_head_kv*D] keys; RGBA32F view), out of place. */
    wk_buf xform_in;
    uint64_t xform_k_offset; /* bytes; a multiple of 256 (storage buffer offset alignment) */
    wk_attn_plan plan;    /* this step's attention tiles (paged cache) */
    uint64_t attn_part_rows; /* partials a.attn_part holds */
    const wk_row_info *step_rows; /* this step's rows while it is recorded */
    /* Per layer class (wk_kv_win): kv_store_quant writes this step's f16 window rows with the
     * codes, before the attention, instead of kv_store_window after it (windows_early in
     * forward.c: no row reads an older key a written row replaces; every decode step, and every
     * sequence's first chunk). */
    bool window_early[2];
} wk_fwd;

/* The matrices to store by panels (wk_weights_upload) for a forward pass with these pipelines:
 * those its host parts multiply (the layers' with linear_host, the head with head_host). */
static inline wk_weights_panels wk_fwd_weights_panels(const wk_pipelines *pipes) {
    return (wk_weights_panels){.layers = pipes->linear_host, .head = pipes->head_host};
}

int wk_fwd_init(wk_fwd *f, wk_vk *vk, wk_pipelines *pipes, const wk_hparams *hp, const wk_weights *w,
                wk_kv_cache *kv, int max_tokens, int max_ctx, bool debug_layers, char *err, size_t errlen);
void wk_fwd_free(wk_fwd *f);
/* Applies the key transform after RoPE from now on (x must outlive f); NONE/NULL: off. */
int wk_fwd_set_transform(wk_fwd *f, const wk_kv_xform *x, char *err, size_t errlen);
/* Compiles attention_reduce (lavapipe compiles at first dispatch) by one dispatch on scratch data. */
int wk_fwd_warm_reduce(wk_fwd *f, char *err, size_t errlen);
/* Allocates the calibration capture buffers (sized for max_tokens) and turns capture on. */
int wk_fwd_enable_capture(wk_fwd *f, char *err, size_t errlen);

/* Whether layer L's q/k norm and RoPE run inside the key transform in a step of T tokens (then
 * its q and k products go to the transform's input, xform_in). */
bool wk_fwd_rope_in_transform(const wk_fwd *f, const wk_dev_layer *L, uint32_t T);

/* forward_host.c. Init: the head's view, the scratch and the threads (when either host part is
 * on); refused when the device did not map what the host must read. */
int wk_fwd_host_init(wk_fwd *f, char *err, size_t errlen);
void wk_fwd_host_free(wk_fwd *f);
/* out (n rows of n_vocab) = head_in's first n rows times the output head. */
void wk_fwd_host_head(wk_fwd *f, float *out, int n);
/* The host's work between two layers' attentions (linear_host): layer `after`'s W_o, norms and FFN
 * (after >= 0; -1 at the first layer), then the next layer's q/k/v products (when there is one). */
void wk_fwd_host_layers(wk_fwd *f, int after, int T);
/* The host parts' profile (wall time): now in ms when profiling (else 0), and the time since t0
 * added to a slot of the profile (WK_PROF_*_HOST) as one call. */
double wk_fwd_prof_now(const wk_fwd *f);
void wk_fwd_prof_since(wk_fwd *f, int slot, double t0);

/* The push constants of layer il's store of T tokens, quantizing or f16 (kv_store_quant.comp's,
 * kv_store_f16.comp's; forward_host_kv.c's store reads the same geometry). */
void wk_fwd_store_quant_pc(const wk_fwd *f, int il, uint32_t T, wk_pc_kv_store_quant *pc);
void wk_fwd_store_f16_pc(const wk_fwd *f, int il, uint32_t T, wk_pc_kv_store_f16 *pc);

/* forward_host_kv.c (kv_host). Init: checks that the host maps what it reads and writes (the
 * pool, the rope table, the norms, the step's tables and window rows); off: nothing. */
int wk_fwd_host_kv_init(wk_fwd *f, char *err, size_t errlen);
/* With kv_host, x's matrices by columns for the host's transform (x NULL or NONE: frees them). */
int wk_fwd_host_kv_set_transform(wk_fwd *f, const wk_kv_xform *x, char *err, size_t errlen);
/* Layer il's queries and keys in a.q, a.k (as the products left them): per-head norm, RoPE and the
 * query scale in place, then the key transform; then its keys and values of the step's T tokens
 * into the cache (codes and parameters, or f16 rows; window rows; the f16 copies in a.k16, a.v16). */
void wk_fwd_host_kv(wk_fwd *f, int il, int T);

/* The push constants of layer il's paged attention, windows included (attention_paged.comp's;
 * forward_host_attn.c reads the same geometry). */
void wk_fwd_attention_pc(const wk_fwd *f, int il, wk_pc_attention_paged *pc);
/* The end of the chunk that starts at row t of a step's T rows: the rows after it of the same
 * sequence at the next positions (the window rows' plan, and the host's attention, read chunks so). */
int wk_fwd_chunk_end(const wk_row_info *rows, int T, int t);

/* forward_host_attn.c (attn_host). Init: the partials, the rows; refused when a layer's geometry is
 * one the host does not read (host/host_attention.h). Step: whether this step's attention runs on
 * the host (wk_fwd_step sets attn_step: not while capturing for calibration). Run: layer il's
 * attention of the step's T rows into a.attn, then the window rows not written with the codes. */
int wk_fwd_host_attn_init(wk_fwd *f, char *err, size_t errlen);
void wk_fwd_host_attn_free(wk_fwd *f);
bool wk_fwd_host_attn_step(const wk_fwd *f, int T);
void wk_fwd_host_attention(wk_fwd *f, int il, int T);

/* win_words (paged cache with f16 windows; else NULL): per token, its sequence's window slot as a
 * pool word offset (wk_kv_pool_window_offset / 4).
 * T tokens with their positions and cache rows (rows[t].kv_base: the offset of the token's
 * sequence's block table in tables[0..n_tables)).
 * Logits of the rows in logit_rows[0..n_logits)
 * go to out (n_logits x n_vocab). With debug_layers, layer_out (n_layer x T x n_embd) receives
 * the residual stream after each layer. */
int wk_fwd_step(wk_fwd *f, const int32_t *tokens, const wk_row_info *rows, int T, const uint32_t *tables,
                int n_tables, const uint32_t *win_words, const int *logit_rows,
                int n_logits, float *out, float *layer_out, char *err, size_t errlen);

#endif
