/* The public engine API (wushkv.h): opens a GGUF model onto a Vulkan device, owns the tokenizer,
 * the KV cache slots and the forward pass, and turns batches of sequence items into steps (prefix
 * caching: engine_prefix.c). Also
 * the two calls of research.h that need the engine's insides: wk_capture_run and wk_engine_wo. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "model/quant.h"
#include "wushkv/research.h"

/* Releases what a sliding group's layers can no longer see: a query at position p >= len reads
 * keys >= p - window + 1, so every token below len - window + 1 is dead for good. */
static void seq_slide(wk_seq *s) {
    const wk_kv_layout *l = &s->e->kv.layout;
    if (l->swa_groups == 0 || s->len < l->swa_window) return;
    for (int g = l->n_groups - l->swa_groups; g < s->n_kvs; g++)
        wk_kv_seq_drop_before(s->kvs[g], (uint32_t)(s->len - l->swa_window + 1));
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

void wk_eng_seq_free(wk_seq *s) {
    for (int g = 0; g < s->n_kvs; g++) wk_kv_seq_destroy(s->kvs[g]);
    s->e->slot_used[s->slot] = false;
    free(s->hashes);
    free(s->pending);
    free(s->toks);
    free(s);
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
    while (wk_eng_evict_parked(e)) {
    }
    wk_prof_print(&e->pipes);
    wk_fwd_free(&e->fwd);
    wk_kv_cache_destroy(&e->vk, &e->kv);
    wk_kv_snaps_destroy(&e->vk, &e->snaps);
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

const char *wk_layer_set_format(const uint64_t set[4], char *buf, size_t cap) {
    size_t at = 0;
    if (cap) buf[0] = '\0';
    for (int il = 0; il < 256 && at < cap; il++) {
        if (!wk_layer_set_has(set, il)) continue;
        const int w = snprintf(buf + at, cap - at, at ? ",%d" : "%d", il);
        if (w < 0) break;
        at += (size_t)w;
    }
    return buf;
}

int wk_engine_open(const wk_engine_params *p, wk_engine **out, char *err, size_t errlen) {
    *out = NULL;
    if (!p->model_path) return snprintf(err, errlen, "no model path given"), WK_ERR_INVALID;
    if (p->max_ctx < 0 || (p->max_batch_tokens < 0 && p->max_batch_tokens != WK_BATCH_TOKENS_AUTO) || p->max_seqs < 0)
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
    int max_batch = p->max_batch_tokens > 0 ? p->max_batch_tokens : 512; /* AUTO: set once the device is known */
    e->max_seqs = p->max_seqs ? p->max_seqs : 1;
    if (!rc && (max_ctx > 1 << 20 || max_batch > 1 << 16 || e->max_seqs > 4096)) {
        snprintf(err, errlen, "context %d, batch %d or %d sequences out of range", max_ctx, max_batch, e->max_seqs);
        rc = WK_ERR_INVALID;
    }
    const int validation = !p->validation ? WK_VK_VALIDATION_OFF : p->validation_sync ? WK_VK_VALIDATION_SYNC
                                                                                    : WK_VK_VALIDATION_ON;
    if (!rc) rc = wk_vk_init(&e->vk, p->device_index, validation, p->verbose, err, errlen);
    if (!rc && p->max_batch_tokens == WK_BATCH_TOKENS_AUTO) {
        max_batch = e->vk.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? 128 : 512;
        if (max_batch < e->max_seqs) max_batch = e->max_seqs;
    }
    if (!rc) rc = wk_pipelines_create(&e->vk, &e->pipes, err, errlen);
    if (!rc) rc = wk_pipelines_choose_kernels(&e->vk, &e->pipes, p->kernels, err, errlen);
    if (!rc) rc = wk_pipelines_apply_variants(&e->vk, &e->pipes, p->kernel_variants, err, errlen);
    if (!rc && (p->host_threads < 0 || p->host_threads > 256))
        rc = WK_ERR_INVALID, snprintf(err, errlen, "%d host threads (0..256 allowed)", p->host_threads);
    e->pipes.head_threads = p->host_threads;
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
    if (!rc) rc = wk_weights_upload(&e->vk, &e->desc, &e->xform, wk_fwd_weights_panels(&e->pipes), &e->weights, err, errlen);
    /* Every format is paged: f16 (kv_bits 0 or 16) is the same pool of blocks with f16 slabs. */
    const bool f16 = p->kv_bits == 0 || p->kv_bits == 16;
    if (!rc && f16 && p->kv_clip != 0.0f && p->kv_clip != 1.0f) {
        snprintf(err, errlen, "a KV clip (--kv-clip) needs a quantized cache (--kv int2, int3 or int4)");
        rc = WK_ERR_INVALID;
    } else if (!rc && f16 && p->kv_key_bits &&
               (p->kv_wide_keys[0] | p->kv_wide_keys[1] | p->kv_wide_keys[2] | p->kv_wide_keys[3])) {
        snprintf(err, errlen, "wide keys (--kv-wide-keys) need a quantized cache (--kv int2 or int3)");
        rc = WK_ERR_INVALID;
    } else if (!rc && f16 && p->kv_swa_bits && p->kv_swa_bits != 16) {
        snprintf(err, errlen, "a KV format for the sliding-window layers (--kv-swa) needs a quantized cache (--kv int2, "
                 "int3 or int4)");
        rc = WK_ERR_INVALID;
    } else if (!rc && f16 && (p->kv_sink || p->kv_recent || (p->kv_swa_windows && (p->kv_swa_sink || p->kv_swa_recent)))) {
        snprintf(err, errlen, "--kv-sink/--kv-recent/--kv-swa-sink/--kv-swa-recent keep f16 windows of a quantized cache "
                 "(--kv int2, int3 or int4)");
        rc = WK_ERR_INVALID;
    } else if (!rc && f16) {
        const wk_kv_fmt fmt = {.bits = 16};
        rc = wk_kv_cache_create_paged(&e->vk, &e->kv, hp, &fmt, NULL, 0, 0, 0, p->kv_mem, e->max_seqs, max_ctx, max_batch,
                                      err, errlen);
        if (!rc) rc = wk_pipelines_specialize_kv(&e->vk, &e->pipes, WK_ATTN_SET_MAIN, 0, 16, 0, 0, hp->head_dim, err, errlen);
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
        if (!rc && !wk_kvq_clip_valid(fmt.kind, p->kv_clip)) {
            snprintf(err, errlen, "KV format: the clip (%g) applies to the QuEST quantizer only and must be in [%g, %g]",
                     (double)p->kv_clip, (double)WK_KV_CLIP_MIN, (double)WK_KV_CLIP_MAX);
            rc = WK_ERR_INVALID;
        }
        if (!rc && !wk_kvq_valid(fmt.kind, fmt.bits, fmt.group)) {
            snprintf(err, errlen, "KV format: %d bits, quantizer %d, group %d is not one of 2/3/4 bits, "
                     "quest/percentile/absmax, group 16..256", fmt.bits, (int)p->kv_quant, fmt.group);
            rc = WK_ERR_INVALID;
        }
        /* Wide keys: the layers the bitset names (a layer the model lacks is refused), or chosen. */
        bool wide[WK_MAX_LAYERS] = {false};
        if (!rc && p->kv_wide_keys_auto && p->kv_key_bits) {
            rc = wk_kv_xform_wide_keys(&e->xform, hp, wide, err, errlen);
            fmt.key_bits = p->kv_key_bits;
        }
        for (int il = 0; !rc && il < 256; il++) {
            if (!wk_layer_set_has(p->kv_wide_keys, il)) continue;
            if (il >= hp->n_layer) {
                snprintf(err, errlen, "wide keys in layer %d: the model has %d layers (0..%d)", il, hp->n_layer,
                         hp->n_layer - 1);
                rc = WK_ERR_INVALID;
            } else {
                wide[il] = true;
                fmt.key_bits = p->kv_key_bits;
            }
        }
        if (!rc)
            rc = wk_kv_cache_create_paged(&e->vk, &e->kv, hp, &fmt, wide, p->kv_swa_bits, rho_k, rho_v, p->kv_mem,
                                          e->max_seqs, max_ctx, max_batch, err, errlen);
        if (!rc) wk_kvq_clip_constants(e->kv.fmt.bits, e->kv.swa_pool != NULL, p->kv_clip, &e->kv.quest_c2, &e->kv.swa_quest_c2);
        /* The wide keys keep the format's clip at their own width (the measured format). */
        if (!rc && e->kv.fmt.key_bits)
            e->kv.key_quest_c2 = e->kv.quest_c2 > 0.0f ? wk_kvq_quest_c2(e->kv.fmt.key_bits, p->kv_clip) : 0.0f;
        if (!rc) rc = wk_pipelines_specialize_kv(&e->vk, &e->pipes, WK_ATTN_SET_MAIN, (int)fmt.kind, e->kv.fmt.bits, 0, fmt.group,
                                                 hp->head_dim, err, errlen);
        if (!rc && e->kv.swa_pool)
            rc = wk_pipelines_specialize_kv(&e->vk, &e->pipes, WK_ATTN_SET_SWA, (int)fmt.kind, e->kv.swa_fmt.bits, 0, fmt.group,
                                            hp->head_dim, err, errlen);
        if (!rc && e->kv.fmt.key_bits)
            rc = wk_pipelines_specialize_kv(&e->vk, &e->pipes, WK_ATTN_SET_WIDE, (int)fmt.kind, e->kv.fmt.bits,
                                            e->kv.fmt.key_bits, fmt.group, hp->head_dim, err, errlen);
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
        rc = wk_pipelines_specialize_transform(&e->vk, &e->pipes, e->xform.block,
                                               (int)wk_xform_decode_units(hp->n_head, hp->n_head_kv), err, errlen);
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
    i->kernels = e->pipes.gpu_kernels ? "gpu" : "cpu";
    wk_pipelines_describe_variants(&e->pipes, e->kernel_variants, sizeof e->kernel_variants);
    i->kernel_variants = e->kernel_variants;
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
    i->max_batch_tokens = max_batch;
    i->bos = wk_tokenizer_bos(e->tok);
    i->eos = wk_tokenizer_eos(e->tok);
    i->eot = wk_tokenizer_eot(e->tok);
    i->add_bos = wk_tokenizer_add_bos(e->tok);
    i->weight_bytes = e->weights.bytes;
    i->weight_elements = e->weights.weights;
    i->weight_half_pair_elements = e->weights.half_pair_weights;
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
        i->kv_key_bits = e->kv.fmt.key_bits;
        for (int il = 0; il < e->kv.n_layer && i->kv_key_bits; il++)
            if (e->kv.key_wide[il]) wk_layer_set_add(i->kv_wide_keys, il);
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
     * as of the prefix's end). Those formats park ended sequences whole (design 1 of
     * docs/design.md, "Prefix caching"), and a block serves them only with a window snapshot
     * taken at its end (design 3). */
    if (p->prefix_cache) {
        e->prefix_cache = true;
        e->park = e->kv.layout.window_bytes > 0;
        e->prefix_salt = wk_eng_prefix_salt(e, p);
        /* Window snapshots (design 3): two per sequence slot unless asked otherwise (a sequence
         * takes at most two: its prompt's end and the caller's hint, a chat's system prompt), so
         * their device memory is twice the window slots'. */
        if (p->prefix_snapshots > 65536) {
            snprintf(err, errlen, "%d window snapshots (more than 65536)", p->prefix_snapshots);
            wk_engine_close(e);
            return WK_ERR_INVALID;
        }
        const int n_snap = !e->park || p->prefix_snapshots < 0 ? 0 : p->prefix_snapshots ? p->prefix_snapshots : 2 * e->max_seqs;
        rc = wk_kv_snaps_create(&e->vk, &e->snaps, (uint32_t)n_snap, e->kv.layout.window_bytes, err, errlen);
        if (rc) {
            wk_engine_close(e);
            return rc;
        }
    }
    i->kv_snapshots = (int)e->snaps.n;
    i->kv_snapshot_bytes = (uint64_t)e->snaps.n * e->snaps.slot_bytes;
    i->prefix_cache = e->prefix_cache;
    i->prefix_cache_park = e->park;
    if (p->verbose)
        fprintf(stderr,
                "wushkv: model %s (%s, %d layers, vocab %d), %.1f MiB weights (%.1f%% with half pairs), KV %.1f "
                "KiB/token, ctx %d\n",
                i->name, i->arch, i->n_layer, i->n_vocab, i->weight_bytes / 1048576.0,
                i->weight_elements ? 100.0 * (double)i->weight_half_pair_elements / (double)i->weight_elements : 0.0,
                i->kv_bytes_per_token / 1024.0, max_ctx);
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
            if (e->prefix_cache) {
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
        if (!wk_eng_evict_parked(e)) break;
    return rc;
}

void wk_seq_destroy(wk_seq *s) {
    if (!s) return;
    if (s->parked) wk_eng_park_unlink(s);
    wk_eng_seq_free(s);
}

void wk_seq_reset(wk_seq *s) {
    s->len = 0;
    s->toks_lost = false; /* recorded afresh from position 0 */
    s->n_hashed = 0;
    s->n_snap_pts = 0;
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

void wk_eng_seq_note_peak(wk_seq *s) {
    const uint64_t now = wk_seq_kv_bytes(s);
    if (now > s->peak_bytes) s->peak_bytes = now;
}
int wk_seq_len(const wk_seq *s) { return s->len; }

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
                       wk_eng_evict_parked(e)) {
                }
                if (st == WK_ERR_KV_EXHAUSTED)
                    return snprintf(err, errlen, "KV pool%s exhausted (%u blocks)",
                                    wk_kv_cache_group_swa(&e->kv, g) ? " of the sliding-window layers" : "",
                                    wk_kv_pool_n_blocks(it->seq->kvs[g]->pool)),
                           WK_ERR_KV_FULL;
                if (st) return snprintf(err, errlen, "KV pool: %s", wk_kv_pool_strerror(st)), st;
                /* Prefix hits share whole blocks and leave len on a block boundary; only an adopted
                 * parked sequence cut back into a named block writes into a copy of it. */
                if (copy.bytes) {
                    const uint64_t base = wk_kv_cache_group_swa(&e->kv, g)
                                              ? (uint64_t)e->kv.swa_block_base * e->kv.layout.swa_bytes_per_block : 0;
                    const wk_vk_region r = {.src = &e->kv.pool_buf, .dst = &e->kv.pool_buf,
                                            .src_offset = base + copy.src_offset, .dst_offset = base + copy.dst_offset,
                                            .bytes = copy.bytes};
                    if ((st = wk_vk_copy(&e->vk, &r, 1, err, errlen))) return st;
                }
            }
            wk_eng_seq_note_peak(it->seq); /* the step's blocks are held until the sliding groups let go */
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
        wk_eng_seq_name_blocks(items[i].seq, items[i].tokens, items[i].n_tokens);
        if (e->park) wk_eng_seq_keep_tokens(items[i].seq, items[i].tokens, items[i].n_tokens);
        wk_eng_seq_snapshot(items[i].seq);
        seq_slide(items[i].seq);
        wk_eng_seq_note_peak(items[i].seq);
    }
    wk_eng_snaps_purge(e); /* the step's allocations may have evicted snapshotted blocks */
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
