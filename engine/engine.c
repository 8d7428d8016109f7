/* The public engine API (wushkv.h): opens a GGUF model onto a Vulkan device, owns the tokenizer,
 * the KV cache slots and the forward pass, and turns batches of sequence items into steps. Also
 * the two calls of research.h that need the engine's insides: wk_capture_run and wk_engine_wo. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "forward.h"
#include "model/gguf.h"
#include "kv/kv_cache.h"
#include "kv/kv_prefix.h"
#include "model/model.h"
#include "model/quant.h"
#include "tokenizer/tokenizer.h"
#include "vulkan/vk_device.h"
#include "vulkan/vk_pipelines.h"
#include "weights.h"
#include "wushkv/research.h"

struct wk_engine {
    wk_gguf *gguf;        /* NULL once released (wk_engine_params.release_model_file) */
    uint64_t model_bytes; /* the model file's size, kept for prefix_salt after a release */
    wk_model_desc desc;
    wk_tokenizer *tok;
    wk_vk vk;
    wk_pipelines pipes;
    wk_weights weights;
    wk_kv_cache kv;
    wk_kv_xform xform;
    wk_fwd fwd;
    wk_model_info info;
    char name[256];
    char *chat_template; /* tokenizer.chat_template (NUL-terminated copy), or NULL */
    bool *slot_used;     /* [max_seqs] */
    int max_seqs;
    /* per-step scratch, sized for max_batch_tokens */
    int32_t *step_tokens;
    wk_row_info *step_rows;
    uint32_t *step_win;         /* per row: its sequence's f16 window slot (pool words), paged + windows */
    int *step_logit_rows;
    uint32_t *step_tables;  /* paged cache: the step's block tables, concatenated */
    /* Automatic prefix caching (wk_seq_prefix_attach): on when asked for and the format allows;
     * prefix_salt enters every block hash (everything besides the tokens that changes what a
     * block stores). */
    bool prefix_cache;
    uint64_t prefix_salt;
    /* Parking (formats with f16 windows; docs/design.md "Prefix caching", design 1): an ended
     * sequence is kept whole (tables, partial block, window slot, token ids) on an LRU list,
     * parked_head the least recently parked, until a prompt that extends its tokens adopts it
     * (wk_seq_create_prefix) or a slot or a block is needed (evict_parked). */
    bool park;
    wk_seq *parked_head, *parked_tail;
    int n_parked;
};

struct wk_seq {
    wk_engine *e;
    int slot;
    int len;
    /* Paged cache: one block table per layer group (kv.layout.n_groups; group 0 holds the f16
     * window slot); n_kvs 0 with the f16 cache. */
    int n_kvs;
    wk_kv_seq *kvs[WK_MAX_LAYERS];
    uint64_t peak_bytes; /* wk_seq_kv_peak_bytes */
    /* Prefix caching: the token chain's hash of every full block so far (hashes[0 .. n_hashed))
     * and the tokens of the block being filled (pending[len % bt] is the next). */
    uint64_t *hashes;
    int n_hashed;
    int32_t *pending;
    /* Parking (e->park): the token ids in the cache, toks[0 .. len); the parked list's links. */
    int32_t *toks;
    int toks_cap;
    bool toks_lost; /* out of memory once: toks incomplete, never parked */
    bool parked;
    wk_seq *park_prev, *park_next;
};

/* Releases what a sliding group's layers can no longer see: a query at position p >= len reads
 * keys >= p - window + 1, so every token below len - window + 1 is dead for good. */
static void seq_slide(wk_seq *s) {
    const wk_kv_layout *l = &s->e->kv.layout;
    if (l->swa_groups == 0 || s->len < l->swa_window) return;
    for (int g = l->n_groups - l->swa_groups; g < s->n_kvs; g++)
        wk_kv_seq_drop_before(s->kvs[g], (uint32_t)(s->len - l->swa_window + 1));
}

/* Parking: appends the n tokens a step just committed to the sequence's token ids (its len is
 * already past them). Out of memory loses them for good (toks_lost): such a sequence is never
 * parked, which costs only the reuse. */
static void seq_keep_tokens(wk_seq *s, const int32_t *tokens, int n) {
    if (s->toks_lost) return;
    if (s->len > s->toks_cap) {
        int cap = s->toks_cap ? s->toks_cap : 64;
        while (cap < s->len) cap *= 2;
        if (cap > s->e->fwd.max_ctx) cap = s->e->fwd.max_ctx;
        int32_t *t = realloc(s->toks, (size_t)cap * sizeof *t);
        if (!t) {
            s->toks_lost = true;
            return;
        }
        s->toks = t;
        s->toks_cap = cap;
    }
    memcpy(s->toks + (s->len - n), tokens, (size_t)n * sizeof *tokens);
}

/* Everything besides the tokens that decides what a block stores: the model (its file's path and
 * size, its shapes), the KV format of each layer class with its quantizer, group, windows and
 * clip quantiles, the transform with its seed and sidecar. The cache lives inside one engine,
 * which has one of each, so today this only guards against a mistake; it is what a cache shared
 * between engines (or kept on disk) would need. */
static uint64_t prefix_salt(const wk_engine *e, const wk_engine_params *p) {
    const wk_hparams *hp = &e->desc.hp;
    union { float f; int32_t i; } rk = {.f = p->kv_rho_k}, rv = {.f = p->kv_rho_v};
    const int32_t w[] = {e->kv.fmt.bits, e->kv.swa_pool ? e->kv.swa_fmt.bits : e->kv.fmt.bits, (int32_t)e->kv.fmt.kind,
                         e->kv.fmt.group, e->kv.layout.win[0].sink, e->kv.layout.win[0].recent,
                         e->kv.layout.win[1].sink, e->kv.layout.win[1].recent, rk.i, rv.i, (int32_t)p->kv_transform,
                         (int32_t)p->kv_transform_seed, (int32_t)(p->kv_transform_seed >> 32), hp->n_layer, hp->n_embd,
                         hp->n_vocab, hp->n_head_kv, hp->head_dim, e->kv.layout.block_tokens,
                         (int32_t)e->model_bytes, (int32_t)(e->model_bytes >> 32)};
    uint64_t h = wk_kv_block_hash(0, 0x77757368ull, w, (uint32_t)(sizeof w / sizeof w[0]));
    const char *names[2] = {p->model_path, p->kv_transform == WK_KV_TRANSFORM_WUSH ? p->wush_path : NULL};
    for (int k = 0; k < 2; k++)
        for (const char *c = names[k]; c && *c; c++) h = wk_kv_block_hash(h, (uint64_t)k, &(int32_t){(uint8_t)*c}, 1);
    return h;
}

/* After a step committed n tokens: every block they filled gets its chain hash, and each layer
 * group's block for it is named in its pool (before seq_slide, which may release it at once: a
 * released named block stays cached). */
static void seq_name_blocks(wk_seq *s, const int32_t *tokens, int n) {
    if (!s->hashes) return;
    const uint32_t bt = (uint32_t)s->e->kv.layout.block_tokens;
    for (int j = 0; j < n; j++) {
        const uint32_t pos = (uint32_t)(s->len - n + j);
        s->pending[pos % bt] = tokens[j];
        if ((pos + 1) % bt) continue;
        const uint32_t k = pos / bt;
        s->hashes[k] = wk_kv_block_hash(k ? s->hashes[k - 1] : 0, s->e->prefix_salt, s->pending, bt);
        s->n_hashed = (int)k + 1;
        for (int g = 0; g < s->n_kvs; g++)
            if (s->kvs[g]->table[k] != WK_KV_NO_BLOCK)
                wk_kv_pool_cache_insert(s->kvs[g]->pool, s->kvs[g]->table[k], wk_kv_prefix_key(s->hashes[k], g));
    }
}

void wk_engine_params_default(wk_engine_params *p) {
    memset(p, 0, sizeof *p);
    p->device_index = -1;
}

const wk_model_info *wk_engine_info(const wk_engine *e) { return &e->info; }
const char *wk_engine_chat_template(const wk_engine *e) { return e->chat_template; }
const wk_model_desc *wk_engine_desc(const wk_engine *e) { return &e->desc; }
const wk_gguf *wk_engine_gguf(const wk_engine *e) { return e->gguf; }
int wk_engine_validation_messages(const wk_engine *e) { return e->vk.validation_messages; }

uint64_t wk_kv_decode_read_bytes(const wk_engine *e, uint64_t depth) {
    return wk_kv_cache_step_read_bytes(&e->kv, &e->desc.hp, depth);
}

int wk_engine_profile(const wk_engine *e, wk_profile_entry *out, int max) {
    if (!e->pipes.profile) return 0;
    int n = 0;
    for (int id = 0; id < WK_PROF_SLOTS; id++) {
        if (!e->pipes.prof_calls[id]) continue;
        if (n < max)
            out[n] = (wk_profile_entry){.name = wk_prof_name(id), .ms = e->pipes.prof_ms[id],
                                        .dispatches = e->pipes.prof_calls[id]};
        n++;
    }
    return n;
}

static void seq_free(wk_seq *s) {
    for (int g = 0; g < s->n_kvs; g++) wk_kv_seq_destroy(s->kvs[g]);
    s->e->slot_used[s->slot] = false;
    free(s->hashes);
    free(s->pending);
    free(s->toks);
    free(s);
}

static void park_unlink(wk_seq *s) {
    wk_engine *e = s->e;
    if (s->park_prev) s->park_prev->park_next = s->park_next;
    else e->parked_head = s->park_next;
    if (s->park_next) s->park_next->park_prev = s->park_prev;
    else e->parked_tail = s->park_prev;
    s->park_prev = s->park_next = NULL;
    s->parked = false;
    e->n_parked--;
}

/* Destroys the least recently parked sequence (its blocks and window slot back to the pool):
 * false when none is parked. What every allocation that finds no room does first, so parked
 * sequences cost nothing to anyone who needs the memory. */
static bool evict_parked(wk_engine *e) {
    wk_seq *s = e->parked_head;
    if (!s) return false;
    park_unlink(s);
    seq_free(s);
    return true;
}

static const char *device_type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
    }
}

void wk_engine_close(wk_engine *e) {
    if (!e) return;
    while (evict_parked(e)) {
    }
    wk_prof_print(&e->pipes);
    wk_fwd_free(&e->fwd);
    wk_kv_cache_destroy(&e->vk, &e->kv);
    wk_kv_xform_free(&e->xform);
    wk_weights_free(&e->vk, &e->weights);
    wk_pipelines_destroy(&e->vk, &e->pipes);
    wk_vk_destroy(&e->vk);
    wk_tokenizer_free(e->tok);
    wk_gguf_close(e->gguf);
    free(e->chat_template);
    free(e->slot_used);
    free(e->step_tokens);
    free(e->step_rows);
    free(e->step_win);
    free(e->step_logit_rows);
    free(e->step_tables);
    free(e);
}

int wk_engine_open(const wk_engine_params *p, wk_engine **out, char *err, size_t errlen) {
    *out = NULL;
    if (!p->model_path) return snprintf(err, errlen, "no model path given"), WK_ERR_INVALID;
    if (p->max_ctx < 0 || p->max_batch_tokens < 0 || p->max_seqs < 0)
        return snprintf(err, errlen, "negative context, batch or sequence count"), WK_ERR_INVALID;
    wk_engine *e = calloc(1, sizeof *e);
    if (!e) return snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM;
    int rc = 0;
    e->gguf = wk_gguf_open(p->model_path, err, errlen);
    if (!e->gguf) rc = WK_ERR_FORMAT;
    else e->model_bytes = e->gguf->size;
    if (!rc) rc = wk_model_desc_load(e->gguf, &e->desc, err, errlen);
    if (!rc && !(e->tok = wk_tokenizer_load(e->gguf, err, errlen))) rc = WK_ERR_FORMAT;
    const wk_hparams *hp = &e->desc.hp;
    if (!rc && wk_tokenizer_n_vocab(e->tok) < hp->n_vocab) {
        snprintf(err, errlen, "tokenizer has %d tokens but the embedding has %d rows", wk_tokenizer_n_vocab(e->tok),
                 hp->n_vocab);
        rc = WK_ERR_FORMAT;
    }
    int max_ctx = p->max_ctx ? p->max_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    int max_batch = p->max_batch_tokens ? p->max_batch_tokens : 512;
    e->max_seqs = p->max_seqs ? p->max_seqs : 1;
    if (!rc && (max_ctx > 1 << 20 || max_batch > 1 << 16 || e->max_seqs > 4096)) {
        snprintf(err, errlen, "context %d, batch %d or %d sequences out of range", max_ctx, max_batch, e->max_seqs);
        rc = WK_ERR_INVALID;
    }
    const int validation = !p->validation ? WK_VK_VALIDATION_OFF : p->validation_sync ? WK_VK_VALIDATION_SYNC
                                                                                    : WK_VK_VALIDATION_ON;
    if (!rc) rc = wk_vk_init(&e->vk, p->device_index, validation, p->verbose, err, errlen);
    if (!rc) rc = wk_pipelines_create(&e->vk, &e->pipes, err, errlen);
    if (!rc && p->profile) wk_pipelines_enable_profile(&e->vk, &e->pipes);
    if (!rc && p->kv_transform == WK_KV_TRANSFORM_WUSH && !p->wush_path) {
        snprintf(err, errlen, "the WUSH transform needs a sidecar file (wushkv calibrate -o FILE, then --wush FILE)");
        rc = WK_ERR_INVALID;
    }
    if (!rc && (unsigned)p->kv_transform > WK_KV_TRANSFORM_WUSH)
        rc = WK_ERR_INVALID, snprintf(err, errlen, "unknown KV transform %d", (int)p->kv_transform);
    if (!rc)
        rc = wk_kv_xform_load(&e->xform, (wk_xform_kind)p->kv_transform, p->wush_path, e->gguf, hp,
                              p->kv_group ? p->kv_group : 32, p->kv_transform_seed ? p->kv_transform_seed : WK_KV_TRANSFORM_SEED_DEFAULT,
                              err, errlen);
    if (!rc) rc = wk_weights_upload(&e->vk, &e->desc, &e->xform, &e->weights, err, errlen);
    /* Every format is paged: f16 (kv_bits 0 or 16) is the same pool of blocks with f16 slabs. */
    const bool f16 = p->kv_bits == 0 || p->kv_bits == 16;
    if (!rc && f16 && p->kv_swa_bits && p->kv_swa_bits != 16) {
        snprintf(err, errlen, "a KV format for the sliding-window layers (--kv-swa) needs a quantized cache (--kv int2, "
                 "int3 or int4)");
        rc = WK_ERR_INVALID;
    } else if (!rc && f16 && (p->kv_sink || p->kv_recent || (p->kv_swa_windows && (p->kv_swa_sink || p->kv_swa_recent)))) {
        snprintf(err, errlen, "--kv-sink/--kv-recent/--kv-swa-sink/--kv-swa-recent keep f16 windows of a quantized cache "
                 "(--kv int2, int3 or int4)");
        rc = WK_ERR_INVALID;
    } else if (!rc && f16) {
        const wk_kv_fmt fmt = {.bits = 16};
        rc = wk_kv_cache_create_paged(&e->vk, &e->kv, hp, &fmt, 0, 0, 0, p->kv_mem, e->max_seqs, max_ctx, max_batch,
                                      err, errlen);
        if (!rc) rc = wk_pipelines_specialize_kv(&e->vk, &e->pipes, false, 0, 16, 0, err, errlen);
    } else if (!rc) {
        wk_kv_fmt fmt = {.bits = p->kv_bits, .kind = (wk_kvq_kind)p->kv_quant, .group = p->kv_group ? p->kv_group : 32,
                         .sink = p->kv_sink, .recent = p->kv_recent,
                         .swa_sink = p->kv_swa_windows ? p->kv_swa_sink : p->kv_sink,
                         .swa_recent = p->kv_swa_windows ? p->kv_swa_recent : p->kv_recent};
        const float rho_k = p->kv_rho_k > 0 ? p->kv_rho_k : WK_KVQ_RHO_K, rho_v = p->kv_rho_v > 0 ? p->kv_rho_v : WK_KVQ_RHO_V;
        if (!(rho_k > 0 && rho_k <= 1 && rho_v > 0 && rho_v <= 1) || fmt.sink < 0 || fmt.recent < 0 ||
            fmt.swa_sink < 0 || fmt.swa_recent < 0) {
            snprintf(err, errlen, "KV format: percentile quantiles must be in (0, 1] and windows >= 0");
            rc = WK_ERR_INVALID;
        }
        if (!rc && p->kv_swa_bits && !wk_kvq_valid(fmt.kind, p->kv_swa_bits, fmt.group)) {
            snprintf(err, errlen, "KV format of the sliding-window layers: %d bits is not one of 2/3/4", p->kv_swa_bits);
            rc = WK_ERR_INVALID;
        }
        if (!rc && !wk_kvq_valid(fmt.kind, fmt.bits, fmt.group)) {
            snprintf(err, errlen, "KV format: %d bits, quantizer %d, group %d is not one of 2/3/4 bits, "
                     "quest/percentile/absmax, group 16..256", fmt.bits, (int)p->kv_quant, fmt.group);
            rc = WK_ERR_INVALID;
        }
        if (!rc)
            rc = wk_kv_cache_create_paged(&e->vk, &e->kv, hp, &fmt, p->kv_swa_bits, rho_k, rho_v, p->kv_mem,
                                          e->max_seqs, max_ctx, max_batch, err, errlen);
        if (!rc) rc = wk_pipelines_specialize_kv(&e->vk, &e->pipes, false, (int)fmt.kind, e->kv.fmt.bits, fmt.group, err, errlen);
        if (!rc && e->kv.swa_pool)
            rc = wk_pipelines_specialize_kv(&e->vk, &e->pipes, true, (int)fmt.kind, e->kv.swa_fmt.bits, fmt.group, err,
                                            errlen);
        /* One command line serves every model: a format for layers the model lacks is no error. */
        if (!rc && !p->kv_swa_default && p->kv_swa_bits && p->kv_swa_bits != e->kv.fmt.bits && !e->kv.swa_pool)
            fprintf(stderr, "wushkv: the model has no sliding-window layers: their KV format (int%d) has no effect, "
                    "every layer uses int%d\n", p->kv_swa_bits, fmt.bits);
        if (!rc && !p->kv_swa_default && p->kv_swa_windows && (fmt.swa_sink != fmt.sink || fmt.swa_recent != fmt.recent) &&
            e->kv.layout.win[1].layers == 0)
            fprintf(stderr, "wushkv: the model has no sliding-window layers: their f16 windows (sink %d recent %d) have "
                    "no effect\n", fmt.swa_sink, fmt.swa_recent);
    }
    if (!rc) rc = wk_fwd_init(&e->fwd, &e->vk, &e->pipes, hp, &e->weights, &e->kv, max_batch, max_ctx, false, err, errlen);
    if (!rc) rc = wk_fwd_set_transform(&e->fwd, &e->xform, err, errlen);
    if (!rc && e->xform.kind != WK_XFORM_NONE)
        rc = wk_pipelines_specialize_transform(&e->vk, &e->pipes, e->xform.block, err, errlen);
    if (!rc) {
        e->slot_used = calloc((size_t)e->max_seqs, sizeof *e->slot_used);
        e->step_tokens = malloc((size_t)max_batch * sizeof *e->step_tokens);
        e->step_rows = malloc((size_t)max_batch * sizeof *e->step_rows);
        e->step_win = malloc((size_t)max_batch * sizeof *e->step_win);
        e->step_logit_rows = malloc((size_t)max_batch * sizeof *e->step_logit_rows);
        /* Every sequence's whole table, one entry per layer group and block (as wk_fwd_max_tables). */
        const size_t groups = (size_t)e->kv.layout.n_groups;
        e->step_tables = malloc(((size_t)e->max_seqs * ((size_t)max_ctx / 16 + 2) * groups + 1) * sizeof *e->step_tables);
        if (!e->slot_used || !e->step_tokens || !e->step_rows || !e->step_logit_rows || !e->step_tables)
            rc = WK_ERR_NOMEM, snprintf(err, errlen, "out of memory");
    }
    if (rc) {
        wk_engine_close(e);
        return rc;
    }
    if (!wk_gguf_get_str(e->gguf, "general.name", e->name, sizeof e->name)) {
        const char *slash = strrchr(p->model_path, '/');
        snprintf(e->name, sizeof e->name, "%s", slash ? slash + 1 : p->model_path);
    }
    /* Copied out of the mapping so the string is NUL-terminated; absent or not a string: NULL. */
    const wk_gguf_kv *tmpl = wk_gguf_find(e->gguf, "tokenizer.chat_template");
    if (tmpl && tmpl->type == WK_GGUF_STRING && tmpl->str.len < (1u << 20) &&
        (e->chat_template = malloc(tmpl->str.len + 1))) {
        memcpy(e->chat_template, tmpl->str.ptr, tmpl->str.len);
        e->chat_template[tmpl->str.len] = 0;
    }
    /* Nothing below reads the file: weights are on the device, the rest copied (the model
     * description's tensor pointers dangle from here on; only wk_engine_wo and research.h use them,
     * and they check e->gguf). */
    if (p->release_model_file) {
        wk_gguf_close(e->gguf);
        e->gguf = NULL;
    }
    /* Pipelines are created at their first dispatch (vk_pipelines.c; a GPU driver compiles then),
     * and lavapipe compiles a shader at its first dispatch too (up to ~0.4 s for a matmul): run
     * every pipeline the model uses once now, so the first request and every benchmark see warm
     * pipelines. Slot 0's
     * rows 0..4 get scratch values that the next prefill overwrites before anything reads them
     * (as do window slot 0's rows: a window row is always written before it is read). */
    if (!p->skip_warmup) {
        float *scratch = malloc((size_t)5 * hp->n_vocab * sizeof(float));
        const int32_t toks[5] = {0, 0, 0, 0, 0};
        const int rows_all[5] = {0, 1, 2, 3, 4};
        wk_row_info rows[5];
        for (int k = 0; k < 5; k++) rows[k] = (wk_row_info){.pos = (uint32_t)k, .kv_base = 0};
        int n = max_batch < 5 ? max_batch : 5;
        if (!scratch) rc = WK_ERR_NOMEM, snprintf(err, errlen, "out of memory");
        /* scratch keys and values of every layer group into block 0, rewritten before any read */
        uint32_t block0[WK_MAX_LAYERS] = {0};
        for (int g = 0; g < e->kv.layout.n_groups; g++)
            if (wk_kv_cache_group_swa(&e->kv, g)) block0[g] = e->kv.swa_block_base;
        uint32_t win[5] = {0};
        if (e->kv.layout.window_bytes)
            for (int k = 0; k < 5; k++) win[k] = (uint32_t)(wk_kv_pool_window_offset(e->kv.pool, 0) / 4);
        const uint32_t *w = e->kv.layout.window_bytes ? win : NULL;
        const int n_block0 = e->kv.layout.n_groups;
        if (!rc) rc = wk_fwd_step(&e->fwd, toks, rows, n, block0, n_block0, w, rows_all, n, scratch, NULL, err, errlen);
        if (!rc) rc = wk_fwd_step(&e->fwd, toks, rows, 1, block0, n_block0, w, rows_all, 1, scratch, NULL, err, errlen);
        if (!rc) rc = wk_fwd_warm_reduce(&e->fwd, err, errlen);
        free(scratch);
        if (rc) {
            wk_engine_close(e);
            return rc;
        }
    }
    wk_model_info *i = &e->info;
    i->arch = hp->arch_name;
    i->name = e->name;
    i->device_name = e->vk.props.deviceName;
    i->device_type = device_type_name(e->vk.props.deviceType);
    i->device_driver = e->vk.driver_name;
    i->device_driver_info = e->vk.driver_info;
    i->device_subgroup_size = e->vk.subgroup_size;
    i->device_shared_memory_bytes = e->vk.props.limits.maxComputeSharedMemorySize;
    i->device_vendor_id = e->vk.props.vendorID;
    i->device_id = e->vk.props.deviceID;
    i->n_vocab = hp->n_vocab;
    i->n_embd = hp->n_embd;
    i->n_layer = hp->n_layer;
    i->n_head = hp->n_head;
    i->n_head_kv = hp->n_head_kv;
    i->head_dim = hp->head_dim;
    i->n_ctx_train = hp->n_ctx_train;
    i->max_ctx = max_ctx;
    i->bos = wk_tokenizer_bos(e->tok);
    i->eos = wk_tokenizer_eos(e->tok);
    i->eot = wk_tokenizer_eot(e->tok);
    i->add_bos = wk_tokenizer_add_bos(e->tok);
    i->weight_bytes = e->weights.bytes;
    /* Everything counted, f16 windows included, for a sequence of the whole context. */
    i->kv_bytes_per_token = (uint64_t)(wk_kv_layout_bytes_per_token(&e->kv.layout, (uint64_t)max_ctx) + 0.5);
    i->kv_bits_per_element = wk_kv_layout_bits_per_element(&e->kv.layout, (uint64_t)max_ctx);
    i->kv_pool_bytes = e->kv.bytes;
    {
        i->kv_block_tokens = e->kv.layout.block_tokens;
        i->kv_block_bytes = e->kv.layout.bytes_per_block;
        i->kv_layer_groups = e->kv.layout.n_groups;
        i->kv_swa_groups = e->kv.layout.swa_groups;
        i->kv_swa_window = e->kv.layout.swa_window;
        i->kv_window_bytes = e->kv.layout.window_bytes;
        i->kv_pool_blocks = wk_kv_pool_n_blocks(e->kv.pool);
        i->kv_bits = e->kv.fmt.bits;
        i->kv_swa_bits = e->kv.swa_pool ? e->kv.swa_fmt.bits : e->kv.fmt.bits;
        i->kv_swa_block_bytes = e->kv.layout.swa_bytes_per_block;
        i->kv_sink = e->kv.layout.win[0].sink;
        i->kv_recent = e->kv.layout.win[0].recent;
        i->kv_swa_sink = e->kv.layout.win[1].sink;
        i->kv_swa_recent = e->kv.layout.win[1].recent;
        if (e->kv.swa_pool) {
            i->kv_swa_pool_blocks = wk_kv_pool_n_blocks(e->kv.swa_pool);
            i->kv_swa_pool_bytes = wk_kv_pool_device_bytes(e->kv.swa_pool);
            /* The pools' own bytes, without the alignment gap before the second one. */
            i->kv_pool_bytes = wk_kv_pool_device_bytes(e->kv.pool) + i->kv_swa_pool_bytes;
        }
    }
    /* The f16 window rows live in a per-sequence slot, not in blocks, so a cached block alone
     * cannot serve a windowed format (the query after it also reads the sinks and the recent ring
     * as of the prefix's end). Those formats park ended sequences whole instead (design 1 of
     * docs/design.md, "Prefix caching"), and name no blocks: nothing could find them. */
    if (p->prefix_cache) {
        e->prefix_cache = true;
        e->park = e->kv.layout.window_bytes > 0;
        e->prefix_salt = prefix_salt(e, p);
    }
    i->prefix_cache = e->prefix_cache;
    i->prefix_cache_park = e->park;
    if (p->verbose)
        fprintf(stderr, "wushkv: model %s (%s, %d layers, vocab %d), %.1f MiB weights, KV %.1f KiB/token, ctx %d\n",
                i->name, i->arch, i->n_layer, i->n_vocab, i->weight_bytes / 1048576.0, i->kv_bytes_per_token / 1024.0,
                max_ctx);
    *out = e;
    return 0;
}

int wk_tokenize(const wk_engine *e, const char *text, size_t len, bool add_special, bool parse_special, int32_t *out,
                int max) {
    if (!text && len) return WK_ERR_INVALID;
    int n = wk_tokenizer_encode(e->tok, text ? text : "", len, add_special, parse_special, out, max);
    return n < 0 ? WK_ERR_INVALID : n;
}

/* Tokenizes into an array grown to fit (see wk_tokenize_alloc). */
static int tokenize_alloc(const wk_engine *e, const char *text, size_t len, bool add_special, bool parse_special,
                          const wk_text_range *plain, int n_plain, int32_t **out) {
    /* A token takes at least a byte, plus the few specials add_special may put around the text;
     * wk_tokenize says how many it needed when that guess is short. */
    size_t cap = len + 16;
    for (;;) {
        if (cap > (size_t)INT32_MAX) return WK_ERR_INVALID;
        int32_t *toks = malloc(cap * sizeof *toks);
        if (!toks) return WK_ERR_NOMEM;
        int n = text || !len ? wk_tokenizer_encode_plain(e->tok, text ? text : "", len, add_special, parse_special,
                                                         plain, n_plain, toks, (int)cap)
                             : -1;
        if (n < 0) n = WK_ERR_INVALID;
        if (n >= 0 && (size_t)n <= cap) {
            *out = toks;
            return n;
        }
        free(toks);
        if (n < 0) return n;
        cap = (size_t)n;
    }
}

int wk_tokenize_alloc(const wk_engine *e, const char *text, size_t len, bool add_special, bool parse_special,
                      int32_t **out) {
    return tokenize_alloc(e, text, len, add_special, parse_special, NULL, 0, out);
}

int wk_tokenize_alloc_plain(const wk_engine *e, const char *text, size_t len, bool add_special,
                            const wk_text_range *plain, int n_plain, int32_t **out) {
    return tokenize_alloc(e, text, len, add_special, true, plain, n_plain, out);
}

int wk_token_to_piece(const wk_engine *e, int32_t token, bool render_special, char *buf, int cap) {
    int n = wk_tokenizer_piece(e->tok, token, render_special, buf, cap);
    return n < 0 ? WK_ERR_INVALID : n;
}

bool wk_token_is_eog(const wk_engine *e, int32_t token) { return wk_tokenizer_is_eog(e->tok, token); }

static int seq_create(wk_engine *e, wk_seq **out) {
    *out = NULL;
    for (int s = 0; s < e->max_seqs; s++)
        if (!e->slot_used[s]) {
            wk_seq *q = calloc(1, sizeof *q);
            if (!q) return WK_ERR_NOMEM;
            q->e = e;
            q->slot = s;
            {
                int st = 0;
                for (int g = 0; g < e->kv.layout.n_groups; g++) {
                    wk_kv_pool *pool = wk_kv_cache_group_swa(&e->kv, g) ? e->kv.swa_pool : e->kv.pool;
                    q->kvs[g] = wk_kv_seq_create_ex(pool, (uint32_t)e->fwd.max_ctx, g == 0, &st);
                    if (!q->kvs[g]) {
                        for (int k = 0; k < g; k++) wk_kv_seq_destroy(q->kvs[k]);
                        free(q);
                        return st == WK_ERR_NOMEM ? WK_ERR_NOMEM : WK_ERR_KV_FULL;
                    }
                    q->n_kvs = g + 1;
                }
            }
            if (e->prefix_cache && !e->park) {
                const size_t bt = (size_t)e->kv.layout.block_tokens;
                q->hashes = malloc(((size_t)e->fwd.max_ctx / bt + 1) * sizeof *q->hashes);
                q->pending = malloc(bt * sizeof *q->pending);
                if (!q->hashes || !q->pending) {
                    for (int g = 0; g < q->n_kvs; g++) wk_kv_seq_destroy(q->kvs[g]);
                    free(q->hashes), free(q->pending), free(q);
                    return WK_ERR_NOMEM;
                }
            }
            e->slot_used[s] = true;
            *out = q;
            return 0;
        }
    return WK_ERR_CONTEXT_FULL;
}

int wk_seq_create(wk_engine *e, wk_seq **out) {
    *out = NULL;
    int rc;
    /* A parked sequence gives way to a new one: its slot (and window slot) is free to anyone. */
    while ((rc = seq_create(e, out)) == WK_ERR_CONTEXT_FULL || rc == WK_ERR_KV_FULL)
        if (!evict_parked(e)) break;
    return rc;
}

void wk_seq_destroy(wk_seq *s) {
    if (!s) return;
    if (s->parked) park_unlink(s);
    seq_free(s);
}

void wk_seq_park(wk_seq *s) {
    if (!s) return;
    wk_engine *e = s->e;
    if (!e->park || s->parked || s->len == 0 || !s->toks || s->toks_lost) {
        wk_seq_destroy(s);
        return;
    }
    s->parked = true;
    s->park_prev = e->parked_tail;
    s->park_next = NULL;
    if (e->parked_tail) e->parked_tail->park_next = s;
    else e->parked_head = s;
    e->parked_tail = s;
    e->n_parked++;
}

void wk_seq_reset(wk_seq *s) {
    s->len = 0;
    s->toks_lost = false; /* recorded afresh from position 0 */
    s->n_hashed = 0;
    for (int g = 0; g < s->n_kvs; g++) wk_kv_seq_release(s->kvs[g]);
    s->peak_bytes = 0;
}

uint64_t wk_seq_kv_bytes(const wk_seq *s) {
    uint64_t bytes = 0;
    for (int g = 0; g < s->n_kvs; g++) bytes += wk_kv_seq_bytes(s->kvs[g]);
    return bytes;
}

uint64_t wk_seq_kv_peak_bytes(const wk_seq *s) { return s->peak_bytes; }

uint64_t wk_seq_kv_pool_bytes(const wk_seq *s, int pool) {
    uint64_t bytes = 0;
    for (int g = 0; g < s->n_kvs; g++)
        if ((wk_kv_cache_group_swa(&s->e->kv, g) ? 1 : 0) == pool) bytes += wk_kv_seq_bytes(s->kvs[g]);
    return bytes;
}

static void seq_note_peak(wk_seq *s) {
    const uint64_t now = wk_seq_kv_bytes(s);
    if (now > s->peak_bytes) s->peak_bytes = now;
}
int wk_seq_len(const wk_seq *s) { return s->len; }

int wk_seq_prefix_attach(wk_seq *s, const int32_t *tokens, int n_tokens) {
    wk_engine *e = s->e;
    if (!e->prefix_cache || e->park || s->len != 0 || n_tokens <= 0 || !tokens) return 0;
    const wk_kv_layout *l = &e->kv.layout;
    const int bt = l->block_tokens;
    int n_chain = n_tokens / bt;
    if (n_chain > e->fwd.max_ctx / bt) n_chain = e->fwd.max_ctx / bt;
    for (int k = 0; k < n_chain; k++)
        s->hashes[k] = wk_kv_block_hash(k ? s->hashes[k - 1] : 0, e->prefix_salt, tokens + (size_t)k * bt, (uint32_t)bt);
    const uint32_t k = wk_kv_prefix_match(s->kvs, s->n_kvs, l->swa_groups, (uint32_t)l->swa_window, s->hashes,
                                          (uint32_t)n_chain);
    if (k == 0) return 0;
    int rc = wk_kv_prefix_attach(s->kvs, s->n_kvs, l->swa_groups, (uint32_t)l->swa_window, s->hashes, k);
    if (rc) return rc == WK_ERR_NOMEM ? WK_ERR_NOMEM : WK_ERR_INVALID;
    s->len = (int)k * bt;
    s->n_hashed = (int)k;
    seq_note_peak(s);
    return s->len;
}

/* Whether parked sequence p cut back to n tokens still holds everything the query at n reads:
 * every layer group's table (wk_kv_seq_can_truncate: the recent ring's f16 rows, and a sliding
 * group's blocks inside its window). */
static bool park_can_take(const wk_seq *p, int n) {
    const wk_kv_layout *l = &p->e->kv.layout;
    for (int g = 0; g < p->n_kvs; g++) {
        const uint32_t window = g >= l->n_groups - l->swa_groups ? (uint32_t)l->swa_window : 0;
        if (!wk_kv_seq_can_truncate(p->kvs[g], (uint32_t)n, window)) return false;
    }
    return true;
}

/* Design 1 (docs/design.md "Prefix caching"): the parked sequence whose tokens share the longest
 * usable start with tokens[0 .. n_tokens), cut back to that start and taken off the list; NULL when
 * none shares a usable one. Usable: a = the common start's length, at least half the parked
 * tokens (llama-server's slot similarity 0.5: a prompt that shares only a BOS or a template's
 * first line would otherwise take over another conversation's parked sequence and cut it away),
 * and park_can_take(a). Ties go to the most recently parked. */
static wk_seq *park_adopt(wk_engine *e, const int32_t *tokens, int n_tokens, int *taken) {
    wk_seq *best = NULL;
    int best_a = 0;
    for (wk_seq *p = e->parked_tail; p; p = p->park_prev) {
        const int lim = p->len < n_tokens ? p->len : n_tokens;
        int a = 0;
        while (a < lim && p->toks[a] == tokens[a]) a++;
        if (a > best_a && 2 * a >= p->len && park_can_take(p, a)) best = p, best_a = a;
    }
    if (!best) return NULL;
    const wk_kv_layout *l = &e->kv.layout;
    for (int g = 0; g < best->n_kvs; g++) {
        const uint32_t window = g >= l->n_groups - l->swa_groups ? (uint32_t)l->swa_window : 0;
        wk_kv_seq_truncate_window(best->kvs[g], (uint32_t)best_a, window); /* cannot fail: park_can_take */
    }
    park_unlink(best);
    best->len = best_a;
    best->peak_bytes = 0;
    seq_note_peak(best);
    *taken = best_a;
    return best;
}

int wk_seq_create_prefix(wk_engine *e, const int32_t *tokens, int n_tokens, wk_seq **out) {
    *out = NULL;
    if (e->park && tokens && n_tokens > 0) {
        int taken = 0;
        if ((*out = park_adopt(e, tokens, n_tokens, &taken))) return taken;
    }
    int rc = wk_seq_create(e, out);
    if (rc < 0) return rc;
    if (!e->prefix_cache || e->park || !tokens || n_tokens <= 0) return 0;
    rc = wk_seq_prefix_attach(*out, tokens, n_tokens);
    return rc > 0 ? rc : 0; /* out of memory for the lookup leaves *out empty: a cold start */
}

void wk_engine_prefix_cache_flush(wk_engine *e) {
    while (evict_parked(e)) {
    }
    if (e->kv.pool) wk_kv_pool_cache_flush(e->kv.pool);
    if (e->kv.swa_pool) wk_kv_pool_cache_flush(e->kv.swa_pool);
}

void wk_engine_kv_usage(const wk_engine *e, int pool, wk_kv_usage *u) {
    memset(u, 0, sizeof *u);
    const wk_kv_pool *kp = pool == 0 ? e->kv.pool : pool == 1 ? e->kv.swa_pool : NULL;
    if (!kp) return;
    wk_kv_pool_stats st;
    wk_kv_pool_get_stats(kp, &st);
    u->used_blocks = st.used_blocks;
    u->cached_blocks = st.cached_blocks;
    u->free_blocks = st.free_blocks;
    u->used_bytes = st.used_bytes;
    u->cached_bytes = st.cached_bytes;
    u->used_windows = st.used_windows;
    /* Parked sequences' blocks and window slots are the cache's, evictable like cached blocks
     * (no one else holds them: a windowed format shares no block). */
    for (const wk_seq *s = e->parked_head; s; s = s->park_next) {
        for (int g = 0; g < s->n_kvs; g++) {
            const wk_kv_seq *k = s->kvs[g];
            if (k->pool != kp) continue;
            const uint64_t blocks = k->n_blocks - k->first_live;
            const uint64_t bytes = wk_kv_seq_bytes(k);
            u->used_blocks -= blocks;
            u->cached_blocks += blocks;
            u->used_bytes -= bytes;
            u->cached_bytes += bytes;
            if (k->window_slot != UINT32_MAX) u->used_windows--, u->cached_windows++;
        }
        u->parked_seqs += pool == 0;
    }
}

int wk_forward(wk_engine *e, const wk_batch_item *items, int n_items, float *logits, char *err, size_t errlen) {
    if (n_items <= 0) return snprintf(err, errlen, "empty batch"), WK_ERR_INVALID;
    int T = 0, n_logits = 0, n_tables = 0;
    for (int i = 0; i < n_items; i++) {
        const wk_batch_item *it = &items[i];
        if (!it->seq || it->seq->e != e || it->n_tokens <= 0 || !it->tokens)
            return snprintf(err, errlen, "batch item %d is empty or has no sequence", i), WK_ERR_INVALID;
        if (it->seq->parked)
            return snprintf(err, errlen, "batch item %d: the sequence was parked (wk_seq_park)", i), WK_ERR_INVALID;
        for (int j = 0; j < i; j++)
            if (items[j].seq == it->seq)
                return snprintf(err, errlen, "a sequence appears twice in one batch"), WK_ERR_INVALID;
        if (it->seq->len + it->n_tokens > e->fwd.max_ctx)
            return snprintf(err, errlen, "sequence of %d tokens plus %d new exceeds the context of %d", it->seq->len,
                            it->n_tokens, e->fwd.max_ctx), WK_ERR_CONTEXT_FULL;
        if (T + it->n_tokens > e->fwd.max_tokens)
            return snprintf(err, errlen, "batch of more than %d tokens (raise the batch size or split)",
                            e->fwd.max_tokens), WK_ERR_INVALID;
        uint32_t base = 0, win = 0;
        {
            /* Blocks for the new tokens, in every layer group. A reservation left by a step that
             * fails later (or by a group that did not fail) is only capacity the sequence keeps;
             * its tokens are not committed until the step succeeds. */
            const int G = it->seq->n_kvs;
            for (int g = 0; g < G; g++) {
                wk_kv_copy copy;
                int st;
                /* Parked sequences give their blocks up first (least recently parked first). */
                while ((st = wk_kv_seq_prepare_write(it->seq->kvs[g], (uint32_t)it->n_tokens, &copy)) ==
                           WK_ERR_KV_EXHAUSTED &&
                       evict_parked(e)) {
                }
                if (st == WK_ERR_KV_EXHAUSTED)
                    return snprintf(err, errlen, "KV pool%s exhausted (%u blocks)",
                                    wk_kv_cache_group_swa(&e->kv, g) ? " of the sliding-window layers" : "",
                                    wk_kv_pool_n_blocks(it->seq->kvs[g]->pool)),
                           WK_ERR_KV_FULL;
                if (st) return snprintf(err, errlen, "KV pool: %s", wk_kv_pool_strerror(st)), st;
                /* Prefix hits share whole blocks and leave len on a block boundary, so no step ever
                 * writes into a block that holds earlier tokens of someone else. */
                if (copy.bytes)
                    return snprintf(err, errlen, "internal: copy-on-write of a partly filled shared block"), WK_ERR_INVALID;
            }
            seq_note_peak(it->seq); /* the step's blocks are held until the sliding groups let go */
            base = (uint32_t)n_tables;
            if (it->seq->kvs[0]->window_slot != UINT32_MAX)
                win = (uint32_t)(wk_kv_pool_window_offset(e->kv.pool, it->seq->kvs[0]->window_slot) / 4);
            /* Interleaved, as the shaders index them: block b of group g at b * G + g. A sliding
             * group's released blocks are WK_KV_NO_BLOCK, outside every query's window. A second
             * pool's blocks are named by their place in pool_buf (kv_cache.h). */
            const uint32_t bt = (uint32_t)e->kv.layout.block_tokens;
            const uint32_t nb = ((uint32_t)(it->seq->len + it->n_tokens) + bt - 1) / bt;
            for (uint32_t b = 0; b < nb; b++)
                for (int g = 0; g < G; g++) {
                    const uint32_t blk = it->seq->kvs[g]->table[b];
                    e->step_tables[n_tables++] =
                        blk != WK_KV_NO_BLOCK && wk_kv_cache_group_swa(&e->kv, g) ? blk + e->kv.swa_block_base : blk;
                }
        }
        for (int j = 0; j < it->n_tokens; j++) {
            e->step_tokens[T] = it->tokens[j];
            e->step_rows[T] = (wk_row_info){.pos = (uint32_t)(it->seq->len + j), .kv_base = base};
            e->step_win[T] = win;
            if (logits && (it->all_logits || j == it->n_tokens - 1)) e->step_logit_rows[n_logits++] = T;
            T++;
        }
    }
    int rc = wk_fwd_step(&e->fwd, e->step_tokens, e->step_rows, T, e->step_tables, n_tables, e->step_win, e->step_logit_rows,
                         n_logits, logits, NULL, err, errlen);
    if (rc) return rc;
    for (int i = 0; i < n_items; i++) {
        items[i].seq->len += items[i].n_tokens;
        for (int g = 0; g < items[i].seq->n_kvs; g++)
            if (wk_kv_seq_advance(items[i].seq->kvs[g], (uint32_t)items[i].n_tokens))
                return snprintf(err, errlen, "internal: KV pool refused to commit written tokens"), WK_ERR_INVALID;
        seq_name_blocks(items[i].seq, items[i].tokens, items[i].n_tokens);
        if (e->park) seq_keep_tokens(items[i].seq, items[i].tokens, items[i].n_tokens);
        seq_slide(items[i].seq);
        seq_note_peak(items[i].seq);
    }
    return n_logits;
}

int wk_capture_run(wk_engine *e, wk_seq *seq, const int32_t *tokens, int n, wk_capture *out, char *err,
                   size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!seq || seq->e != e || n <= 0 || n > e->fwd.max_tokens || n > e->fwd.max_ctx)
        return snprintf(err, errlen, "capture of %d tokens (1..%d allowed)", n, e->fwd.max_tokens), WK_ERR_INVALID;
    int rc = wk_fwd_enable_capture(&e->fwd, err, errlen);
    if (rc) return rc;
    /* From position 0 through the pool, as any prefill; the capture buffers keep this step's rows. */
    wk_seq_reset(seq);
    const wk_batch_item item = {seq, tokens, n, false};
    rc = wk_forward(e, &item, 1, NULL, err, errlen);
    if (rc < 0) return rc;
    const wk_hparams *hp = &e->desc.hp;
    const size_t L = (size_t)hp->n_layer, D = (size_t)hp->head_dim, M = (size_t)e->fwd.max_tokens;
    const size_t qw = (size_t)hp->n_head * D, kw = (size_t)hp->n_head_kv * D;
    out->n_tokens = n;
    out->n_layer = hp->n_layer;
    out->n_head = hp->n_head;
    out->n_head_kv = hp->n_head_kv;
    out->head_dim = hp->head_dim;
    out->q = malloc(L * n * qw * sizeof(float));
    out->k = malloc(L * n * kw * sizeof(float));
    out->v = malloc(L * n * kw * sizeof(float));
    if (!out->q || !out->k || !out->v) {
        wk_capture_free(out);
        return snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM;
    }
    const float *cq = e->fwd.a.cap_q.map;
    const float *ck = e->fwd.a.cap_k.map, *cv = e->fwd.a.cap_v.map;
    const float unscale = 1.0f / hp->attn_scale;
    for (size_t il = 0; il < L; il++)
        for (size_t t = 0; t < (size_t)n; t++) {
            for (size_t i = 0; i < qw; i++) out->q[(il * n + t) * qw + i] = cq[(il * M + t) * qw + i] * unscale;
            for (size_t i = 0; i < kw; i++) {
                /* What the cache holds: the store's f16 rounding (round to nearest even, as the GPU's). */
                out->k[(il * n + t) * kw + i] = wk_f16_to_f32(wk_f32_to_f16(ck[(il * M + t) * kw + i]));
                out->v[(il * n + t) * kw + i] = wk_f16_to_f32(wk_f32_to_f16(cv[(il * M + t) * kw + i]));
            }
        }
    return 0;
}

void wk_capture_free(wk_capture *c) {
    free(c->q);
    free(c->k);
    free(c->v);
    memset(c, 0, sizeof *c);
}

int wk_engine_wo(const wk_engine *e, int layer, float *out, char *err, size_t errlen) {
    const wk_hparams *hp = &e->desc.hp;
    if (layer < 0 || layer >= hp->n_layer) return snprintf(err, errlen, "no layer %d", layer), WK_ERR_INVALID;
    if (!e->gguf) return snprintf(err, errlen, "the engine released its model file (release_model_file)"), WK_ERR_INVALID;
    const wk_gguf_tensor *t = e->desc.layers[layer].wo;
    if (!wk_dequantize(t->type, t->data, out, (size_t)t->ne[0] * t->ne[1]))
        return snprintf(err, errlen, "tensor '%s': cannot read %s", t->name, wk_ggml_type_name(t->type)), WK_ERR_UNSUPPORTED;
    return 0;
}
