/* KV cache storage: the block pool of engine/kv/kv_pool.h in one device buffer, for every format
 * (f16 slabs or packed codes), read and written through R32UI texel views (f16 is also read
 * through an RG32UI one). */
#include "kv/kv_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/attention_plan.h"
#include "wushkv/wushkv.h"

/* Bytes of budget the second pool gets: its share of one full-context sequence's peak. */
static uint64_t split_budget(uint64_t budget, uint64_t peak0, uint64_t peak1) {
    const uint64_t sum = peak0 + peak1;
    /* budget * peak1 / sum without overflow: the remainder term is below sum * peak1. */
    return budget / sum * peak1 + budget % sum * peak1 / sum;
}

/* Each layer's first key and value slab in its blocks (kv_pool.h "Wide keys"): in slot order,
 * a layer's key slabs (wide or not) then its value slabs, in the layout of the layer's pool. */
static void slab_offsets(wk_kv_cache *kv) {
    const uint64_t hkv = (uint64_t)kv->n_head_kv;
    for (int il = 0; il < kv->n_layer; il++) {
        const bool own = wk_kv_cache_group_swa(kv, kv->group_of[il]);
        const wk_kv_layout *l = own ? &kv->swa_layout : &kv->layout;
        uint64_t at = 0;
        for (int jl = 0; jl < kv->n_layer; jl++)
            if (kv->group_of[jl] == kv->group_of[il] && kv->slot_of[jl] < kv->slot_of[il])
                at += hkv * ((kv->key_wide[jl] ? l->key_slab_bytes : l->slab_bytes) + l->slab_bytes);
        kv->k_word[il] = (uint32_t)(at / 4);
        kv->v_word[il] = (uint32_t)((at + hkv * (kv->key_wide[il] ? l->key_slab_bytes : l->slab_bytes)) / 4);
    }
}

int wk_kv_cache_create_paged(wk_vk *vk, wk_kv_cache *kv, const wk_hparams *hp, const wk_kv_fmt *fmt,
                             const bool *wide_keys, int swa_bits, float rho_k, float rho_v, uint64_t budget, int n_slots, int max_ctx, int max_batch,
                             char *err, size_t errlen) {
    memset(kv, 0, sizeof *kv);
    kv->fmt = *fmt;
    kv->n_layer = hp->n_layer;
    kv->n_slots = n_slots;
    kv->max_ctx = max_ctx;
    kv->n_head_kv = hp->n_head_kv;
    kv->head_dim = hp->head_dim;
    int n_swa = 0;
    for (int il = 0; il < hp->n_layer; il++) n_swa += hp->is_swa[il] ? 1 : 0;
    const bool has_swa = n_swa > 0 && hp->sliding_window > 0;
    /* Every layer sliding: one class, in the sliding layers' format. */
    if (has_swa && n_swa == hp->n_layer && swa_bits) kv->fmt.bits = swa_bits;
    fmt = &kv->fmt;
    const bool mixed = swa_bits && swa_bits != fmt->bits && has_swa;
    wk_kv_geom geom = {.n_layer = hp->n_layer, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .block_tokens = 16};
    /* Window classes (wk_kv_win): a layer's class, and its place among that class's layers. */
    geom.swa_layers = wk_kv_win_layers(hp->is_swa, hp->n_layer, hp->sliding_window, kv->win_class_of, kv->win_layer_of);
    /* Sliding-window layers get their own groups, so their old blocks can go back to the pool; with
     * a format of their own they get them even when the window spans the whole context (then they
     * release nothing, as before, but their blocks have their format). */
    wk_kv_layer_groups(hp->is_swa, hp->n_layer, hp->sliding_window, mixed ? INT32_MAX : max_ctx, kv->group_of,
                       kv->slot_of, &geom);
    /* Wide keys: which layers, and the most any first-pool group has (its blocks' wide slabs). */
    int wide_in_group[WK_MAX_LAYERS] = {0};
    kv->fmt.key_wide_slots = 0;
    const int swa_group0 = geom.swa_groups && mixed ? hp->n_layer / geom.group_layers - geom.swa_groups : INT32_MAX;
    for (int il = 0; il < hp->n_layer && wide_keys && fmt->key_bits; il++) {
        if (!wide_keys[il]) continue;
        if (kv->group_of[il] >= swa_group0)
            return snprintf(err, errlen, "wide keys in layer %d: the sliding-window layers have a KV format of their "
                            "own (--kv-swa); wide keys are for the full-attention layers", il), WK_ERR_INVALID;
        kv->key_wide[il] = true;
        if (++wide_in_group[kv->group_of[il]] > kv->fmt.key_wide_slots) kv->fmt.key_wide_slots = wide_in_group[kv->group_of[il]];
    }
    if (!kv->fmt.key_wide_slots) kv->fmt.key_bits = 0;
    if (fmt->key_bits && (fmt->bits == 16 || fmt->key_bits <= fmt->bits || !wk_kvq_valid(fmt->kind, fmt->key_bits, fmt->group)))
        return snprintf(err, errlen, "wide keys of %d bits need a quantized cache of fewer bits (int%d) and a width of 3 or 4",
                        fmt->key_bits, fmt->bits), WK_ERR_INVALID;
    if (fmt->bits == 16 && (swa_bits || hp->head_dim % 4))
        return snprintf(err, errlen, "the f16 KV cache has one format for every layer and needs head_dim %% 4 == 0 "
                        "(head_dim %d)", hp->head_dim), WK_ERR_INVALID;
    if (wk_kv_layout_get(&geom, fmt, &kv->layout) != 0) {
        if (fmt->bits == 16) return snprintf(err, errlen, "KV format f16 does not fit head_dim %d", hp->head_dim), WK_ERR_INVALID;
        return snprintf(err, errlen, "KV format int%d %s group %d does not fit head_dim %d", fmt->bits,
                        wk_kvq_kind_name(fmt->kind), fmt->group, hp->head_dim), WK_ERR_INVALID;
    }
    if (mixed) {
        kv->swa_fmt = (wk_kv_fmt){.bits = swa_bits, .kind = fmt->kind, .group = fmt->group};
        if (!wk_kvq_valid(kv->swa_fmt.kind, swa_bits, fmt->group) ||
            wk_kv_layout_get(&geom, &kv->swa_fmt, &kv->swa_layout) != 0 ||
            wk_kv_layout_set_swa(&kv->layout, &kv->swa_layout) != 0)
            return snprintf(err, errlen, "KV format of the sliding-window layers int%d %s group %d does not fit "
                            "head_dim %d", swa_bits, wk_kvq_kind_name(fmt->kind), fmt->group, hp->head_dim),
                   WK_ERR_INVALID;
    }
    const bool windows = kv->layout.window_bytes > 0;
    const uint64_t peak0 = wk_kv_layout_pool_peak_bytes(&kv->layout, 0, (uint64_t)max_ctx, (uint64_t)max_batch);
    const uint64_t peak1 = wk_kv_layout_pool_peak_bytes(&kv->layout, 1, (uint64_t)max_ctx, (uint64_t)max_batch);
    uint64_t budget1 = 0;
    if (budget == 0) { /* room for every slot's whole context at its peak */
        budget = peak0 * (uint64_t)n_slots;
        budget1 = peak1 * (uint64_t)n_slots;
    } else if (mixed) {
        /* The first pool holds every slot's f16 window whatever the load: those come off the top,
         * and the blocks share the rest in proportion to a full-context sequence's blocks in each
         * pool, so a server of full-context requests runs both out together. (Split with the
         * windows inside the proportion, a small --kv-mem left the first pool short of its
         * windows while the second had blocks to spare.) */
        const uint64_t win = (uint64_t)n_slots * kv->layout.window_bytes;
        const uint64_t blocks0 = peak0 > kv->layout.window_bytes ? peak0 - kv->layout.window_bytes : 0;
        budget1 = budget > win && blocks0 + peak1 > 0 ? split_budget(budget - win, blocks0, peak1)
                                                      : split_budget(budget, peak0, peak1);
        budget -= budget1;
    }
    /* The pool is one buffer read through one R32 texel view: both bound it. Said before any
     * allocation (the pools' host tables alone grow with the block count: a 1 TiB --kv-mem would
     * take gigabytes of them), in the terms of the flag that sets it. The device bytes are the
     * budgets rounded down to whole blocks, so a budget more than a block per pool beyond the room
     * cannot fit; the exact size is checked again once the pools are made. */
    uint64_t room = (uint64_t)vk->props.limits.maxTexelBufferElements * 4;
    if (wk_vk_max_buffer_bytes(vk) && wk_vk_max_buffer_bytes(vk) < room) room = wk_vk_max_buffer_bytes(vk);
    const uint64_t slack = kv->layout.bytes_per_block + (mixed ? 2 * kv->swa_layout.bytes_per_block : 0);
    if (budget + budget1 > room + slack)
        return snprintf(err, errlen, "KV pool of %llu bytes (--kv-mem) is larger than device %s can hold in one buffer "
                        "(%llu bytes): lower --kv-mem", (unsigned long long)(budget + budget1), vk->props.deviceName,
                        (unsigned long long)room), WK_ERR_NOMEM;
    wk_kv_pool_params pp;
    wk_kv_pool_params_from_layout(&kv->layout, budget, (uint32_t)n_slots, &pp);
    /* With windows every sequence takes one of n_slots window slots; without, the engine's slots
     * bound the sequences. */
    pp.max_seqs = windows ? (uint32_t)n_slots : 0;
    /* The window slots and a block of each layer group this pool holds (the full-attention ones
     * alone when the sliding layers have a pool of their own). */
    const uint64_t groups0 = (uint64_t)(mixed ? kv->layout.n_groups - kv->layout.swa_groups : kv->layout.n_groups);
    if (windows && budget < pp.max_seqs * kv->layout.window_bytes + groups0 * kv->layout.bytes_per_block)
        return snprintf(err, errlen, "KV pool of %llu bytes cannot hold %u f16 window slots of %llu bytes (one per "
                        "sequence) and a block: raise --kv-mem or lower --kv-sink/--kv-recent/--kv-swa-sink/--kv-swa-recent",
                        (unsigned long long)budget, pp.max_seqs, (unsigned long long)kv->layout.window_bytes),
               WK_ERR_INVALID;
    int st = wk_kv_pool_create(&pp, &kv->pool);
    if (st) return snprintf(err, errlen, "KV pool of %llu bytes: %s", (unsigned long long)budget, wk_kv_pool_strerror(st)), WK_ERR_INVALID;
    uint64_t device = wk_kv_pool_device_bytes(kv->pool);
    if (mixed) {
        wk_kv_pool_params sp;
        wk_kv_pool_params_from_layout(&kv->swa_layout, budget1, 0, &sp);
        st = wk_kv_pool_create(&sp, &kv->swa_pool);
        const uint64_t bpb1 = kv->swa_layout.bytes_per_block;
        /* The second pool starts on a whole block of its own size after the first pool's bytes. */
        const uint64_t base = (device + bpb1 - 1) / bpb1;
        if (!st && base + wk_kv_pool_n_blocks(kv->swa_pool) >= UINT32_MAX) st = WK_ERR_INVALID;
        if (st) {
            wk_kv_cache_destroy(vk, kv);
            return snprintf(err, errlen, "KV pool of the sliding-window layers (%llu bytes of --kv-mem): %s",
                            (unsigned long long)budget1, wk_kv_pool_strerror(st)), WK_ERR_INVALID;
        }
        kv->swa_block_base = (uint32_t)base;
        device = base * bpb1 + wk_kv_pool_device_bytes(kv->swa_pool);
        kv->swa_rank_k = wk_kvq_percentile_rank(rho_k, fmt->group);
        kv->swa_rank_v = wk_kvq_percentile_rank(rho_v, fmt->group);
    }
    if (device > room) {
        wk_kv_cache_destroy(vk, kv);
        return snprintf(err, errlen, "KV pool of %llu bytes (--kv-mem) is larger than device %s can hold in one buffer "
                        "(%llu bytes): lower --kv-mem", (unsigned long long)device, vk->props.deviceName,
                        (unsigned long long)room), WK_ERR_NOMEM;
    }
    int rc = wk_vk_buffer_create(vk, &kv->pool_buf, device, WK_MEM_DEVICE, VK_FORMAT_R32_UINT, err, errlen);
    /* f16: the attention reads four halves a fetch (attention_paged.comp). */
    if (!rc && fmt->bits == 16)
        rc = wk_vk_view_create(vk, &kv->pool_buf, VK_FORMAT_R32G32_UINT, 0, VK_WHOLE_SIZE, &kv->pool_view2, err, errlen);
    if (rc) {
        wk_kv_cache_destroy(vk, kv);
        return rc;
    }
    kv->bytes = kv->pool_buf.bytes;
    const uint64_t bt = (uint64_t)kv->layout.block_tokens;
    kv->bytes_per_token = ((uint64_t)(kv->layout.n_groups - kv->layout.swa_groups) * kv->layout.bytes_per_block +
                           (uint64_t)kv->layout.swa_groups * kv->layout.swa_bytes_per_block) / bt;
    kv->rank_k = wk_kvq_percentile_rank(rho_k, fmt->group);
    kv->rank_v = wk_kvq_percentile_rank(rho_v, fmt->group);
    slab_offsets(kv);
    return 0;
}

void wk_kv_cache_destroy(wk_vk *vk, wk_kv_cache *kv) {
    if (kv->pool_view2 && vk->dev) vkDestroyBufferView(vk->dev, kv->pool_view2, NULL);
    wk_vk_buffer_destroy(vk, &kv->pool_buf);
    wk_kv_pool_destroy(kv->pool);
    wk_kv_pool_destroy(kv->swa_pool);
    memset(kv, 0, sizeof *kv);
}

uint64_t wk_kv_cache_step_read_bytes(const wk_kv_cache *kv, const wk_hparams *hp, uint64_t pos) {
    const uint64_t D = (uint64_t)hp->head_dim, hkv = (uint64_t)hp->n_head_kv;
    const uint64_t hpk = (uint64_t)(hp->n_head / hp->n_head_kv);
    const uint64_t rows = hpk < WK_ATTN_MAXR ? hpk : WK_ATTN_MAXR;
    const uint64_t reads = (hpk + rows - 1) / rows; /* head chunks per KV head */
    const uint64_t f16_key = D * 2;                 /* one head's key (or value) in f16 */
    uint64_t total = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const uint64_t window = hp->is_swa[il] && hp->sliding_window > 0 ? (uint64_t)hp->sliding_window : 0;
        const uint64_t first = window && pos + 1 > window ? pos + 1 - window : 0;
        uint64_t bytes = 0; /* one KV head's keys and values, as read */
        if (kv->fmt.bits == 16) {
            bytes = (pos + 1 - first) * f16_key * 2;
        } else {
            const bool own = wk_kv_cache_group_swa(kv, kv->group_of[il]);
            const wk_kvq_block_layout *q = own ? &kv->swa_layout.q : &kv->layout.q;
            const wk_kvq_block_layout *qk = kv->key_wide[il] ? &kv->layout.qk : q;
            /* a key's codes and parameters plus a value's */
            const uint64_t code = qk->code_bytes_per_token + qk->param_bytes_per_token + q->code_bytes_per_token +
                                  q->param_bytes_per_token;
            const wk_kv_win *w = &kv->layout.win[kv->win_class_of[il]];
            const uint64_t sink = (uint64_t)w->sink, recent = (uint64_t)w->recent;
            if (sink + recent == 0) {
                bytes = (pos + 1 - first) * code;
            } else {
                /* attention_paged.comp's load_kv for a row at pos: j < sink or j + recent > pos in
                 * f16 (j == pos from the activations), the rest from the codes. */
                const uint64_t n = pos - first;
                const uint64_t sinks = sink > first ? (sink < pos ? sink : pos) - first : 0;
                uint64_t lo = pos + 1 > recent ? pos + 1 - recent : 0;
                if (lo < first) lo = first;
                if (lo < sink) lo = sink;
                const uint64_t f16 = sinks + (lo < pos ? pos - lo : 0);
                bytes = f16 * f16_key * 2 + (n - f16) * code;
            }
        }
        total += bytes * hkv * reads;
    }
    return total;
}
