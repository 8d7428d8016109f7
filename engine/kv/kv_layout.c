/* KV layouts: the bytes of a block, a window slot and a sequence for each format and layer-group
 * split, and what a sequence of n tokens holds at its peak -- pure arithmetic on wk_kv_layout, no
 * pool state (the pool itself: kv_pool.c; both declared in kv_pool.h). */
#include "kv/kv_pool.h"

#include <string.h>

#include "wushkv/wushkv.h"

static int gcd_int(int a, int b) {
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

void wk_kv_layer_groups(const bool *is_swa, int n_layer, int window, int max_ctx, int *group_of, int *slot_of,
                        wk_kv_geom *g) {
    int n_swa = 0;
    for (int il = 0; il < n_layer; il++) n_swa += is_swa[il] ? 1 : 0;
    const int n_full = n_layer - n_swa;
    /* A window that covers the whole context releases nothing: one group, as without sliding. */
    const bool slide = n_swa > 0 && window > 0 && window < max_ctx;
    const int gl = slide && n_full > 0 ? gcd_int(n_full, n_swa) : n_layer;
    int full_seen = 0, swa_seen = 0;
    for (int il = 0; il < n_layer; il++) {
        /* Index of the layer among all layers ordered full-attention first. */
        const int k = !slide ? il : is_swa[il] ? n_full + swa_seen++ : full_seen++;
        group_of[il] = k / gl;
        slot_of[il] = k % gl;
    }
    g->group_layers = gl;
    g->swa_groups = slide ? n_swa / gl : 0;
    g->swa_window = slide ? window : 0;
}

int wk_kv_win_layers(const bool *is_swa, int n_layer, int window, int *class_of, int *index_of) {
    int n[2] = {0, 0};
    for (int il = 0; il < n_layer; il++) {
        class_of[il] = window > 0 && is_swa[il] ? 1 : 0;
        index_of[il] = n[class_of[il]]++;
    }
    return n[1];
}

int wk_kv_layout_get(const wk_kv_geom *g, const wk_kv_fmt *f, wk_kv_layout *out) {
    memset(out, 0, sizeof *out);
    int bt = g->block_tokens ? g->block_tokens : WK_KV_BLOCK_TOKENS_DEFAULT;
    const int gl = g->group_layers ? g->group_layers : g->n_layer;
    if (g->n_layer <= 0 || g->n_head_kv <= 0 || g->head_dim <= 0 || bt <= 0 || f->sink < 0 || f->recent < 0 ||
        f->swa_sink < 0 || f->swa_recent < 0 || gl <= 0 || g->n_layer % gl != 0 || g->swa_groups < 0 ||
        g->swa_groups > g->n_layer / gl || (g->swa_groups > 0 && g->swa_window <= 0) || g->swa_layers < 0 ||
        g->swa_layers > g->n_layer)
        return WK_ERR_INVALID;
    const uint64_t D = (uint64_t)g->head_dim;
    uint64_t slab;
    if (f->bits == 16) {
        /* An f16 window on an f16 cache would only store every token twice. */
        if (f->sink || f->recent || f->swa_sink || f->swa_recent) return WK_ERR_INVALID;
        slab = (uint64_t)bt * D * 2;
    } else {
        if (!wk_kvq_block_layout_get(f->kind, f->bits, f->group, g->head_dim, bt, &out->q)) return WK_ERR_INVALID;
        slab = out->q.bytes;
    }
    /* Shaders address the pool in u32 words, so every slab (hence block) must start on one. */
    if (slab % 4 != 0) {
        memset(out, 0, sizeof *out);
        return WK_ERR_INVALID;
    }
    const uint64_t heads = 2 * (uint64_t)g->n_layer * (uint64_t)g->n_head_kv; /* K and V */
    out->block_tokens = bt;
    out->n_groups = g->n_layer / gl;
    out->group_layers = gl;
    out->swa_groups = g->swa_groups;
    out->swa_window = g->swa_groups ? g->swa_window : 0;
    out->slab_bytes = slab;
    out->bytes_per_block = 2 * (uint64_t)gl * (uint64_t)g->n_head_kv * slab;
    out->elements_per_token = heads * D;
    out->f16_row_bytes = out->elements_per_token * 2;
    /* The window slot: each layer class's rows over its own layers, full-attention first. */
    const int layers[2] = {g->n_layer - g->swa_layers, g->swa_layers};
    const int sink[2] = {f->sink, f->swa_sink}, recent[2] = {f->recent, f->swa_recent};
    out->window_bytes = 0;
    for (int c = 0; c < 2; c++) {
        wk_kv_win *w = &out->win[c];
        /* A class without layers keeps no window: its flags change nothing. */
        w->sink = layers[c] ? sink[c] : 0;
        w->recent = layers[c] ? recent[c] : 0;
        w->layers = layers[c];
        w->row_bytes = out->f16_row_bytes / (uint64_t)g->n_layer * (uint64_t)layers[c];
        w->offset = out->window_bytes;
        out->window_bytes += (uint64_t)(w->sink + w->recent) * w->row_bytes;
    }
    if (f->key_bits) {
        /* Wide keys: quantized formats only, more bits than the values, in at most every slot. */
        if (f->bits == 16 || f->key_bits <= f->bits || f->key_wide_slots < 1 || f->key_wide_slots > gl ||
            !wk_kvq_block_layout_get(f->kind, f->key_bits, f->group, g->head_dim, bt, &out->qk) || out->qk.bytes % 4) {
            memset(out, 0, sizeof *out);
            return WK_ERR_INVALID;
        }
        out->key_bits = f->key_bits;
        out->key_wide_slots = f->key_wide_slots;
        out->key_slab_bytes = out->qk.bytes;
        out->bytes_per_block += (uint64_t)f->key_wide_slots * (uint64_t)g->n_head_kv * (out->qk.bytes - slab);
    }
    out->block_bits_per_element = (double)slab * 8.0 / ((double)bt * (double)D);
    out->swa_bytes_per_block = out->bytes_per_block;
    return WK_OK;
}

int wk_kv_layout_set_swa(wk_kv_layout *l, const wk_kv_layout *swa) {
    if (l->swa_groups <= 0 || swa->window_bytes != 0 || swa->block_tokens != l->block_tokens ||
        swa->n_groups != l->n_groups || swa->group_layers != l->group_layers || swa->swa_groups != l->swa_groups ||
        swa->swa_window != l->swa_window || swa->elements_per_token != l->elements_per_token || swa->key_bits)
        return WK_ERR_INVALID;
    l->swa_bytes_per_block = swa->bytes_per_block;
    l->swa_pool = true;
    return WK_OK;
}

uint64_t wk_kv_layout_seq_bytes(const wk_kv_layout *l, uint64_t n_tokens) {
    const uint64_t bt = (uint64_t)l->block_tokens, full = (uint64_t)(l->n_groups - l->swa_groups);
    return (n_tokens + bt - 1) / bt * (full * l->bytes_per_block + (uint64_t)l->swa_groups * l->swa_bytes_per_block) +
           l->window_bytes;
}

uint64_t wk_kv_layout_pool_peak_bytes(const wk_kv_layout *l, int pool, uint64_t n_tokens, uint64_t chunk) {
    const uint64_t bt = (uint64_t)l->block_tokens, blocks = (n_tokens + bt - 1) / bt;
    const uint64_t full = (uint64_t)(l->n_groups - l->swa_groups);
    uint64_t swa = blocks;
    if (l->swa_groups > 0) {
        if (chunk < 1) chunk = 1;
        /* The step's span [len - window + 1, len + c) is window - 1 + c tokens starting anywhere
         * in a block: at worst at its last token, ceil((bt - 1 + window - 1 + c) / bt) blocks. */
        const uint64_t live = ((uint64_t)l->swa_window + chunk + 2 * bt - 3) / bt;
        if (live < swa) swa = live;
    }
    const uint64_t sliding = (uint64_t)l->swa_groups * swa * l->swa_bytes_per_block;
    if (pool == 1) return l->swa_pool ? sliding : 0;
    return full * blocks * l->bytes_per_block + (l->swa_pool ? 0 : sliding) + l->window_bytes;
}

uint64_t wk_kv_layout_seq_peak_bytes(const wk_kv_layout *l, uint64_t n_tokens, uint64_t chunk) {
    return wk_kv_layout_pool_peak_bytes(l, 0, n_tokens, chunk) + wk_kv_layout_pool_peak_bytes(l, 1, n_tokens, chunk);
}

uint64_t wk_kv_pool_peak_bytes(const wk_model_info *info, int pool, uint64_t n_tokens, uint64_t chunk) {
    if (info->kv_block_tokens <= 0 || info->kv_block_bytes == 0 || pool < 0 || pool > 1) return 0;
    /* The fields the bound reads, as the engine filled them from this layout. */
    wk_kv_layout l = {.block_tokens = info->kv_block_tokens, .n_groups = info->kv_layer_groups > 0 ? info->kv_layer_groups : 1,
                      .swa_groups = info->kv_swa_groups, .swa_window = info->kv_swa_window,
                      .bytes_per_block = info->kv_block_bytes, .window_bytes = info->kv_window_bytes,
                      .swa_bytes_per_block = info->kv_swa_block_bytes ? info->kv_swa_block_bytes : info->kv_block_bytes,
                      .swa_pool = info->kv_swa_pool_bytes > 0};
    return wk_kv_layout_pool_peak_bytes(&l, pool, n_tokens, chunk);
}

uint64_t wk_kv_peak_bytes(const wk_model_info *info, uint64_t n_tokens, uint64_t chunk) {
    return wk_kv_pool_peak_bytes(info, 0, n_tokens, chunk) + wk_kv_pool_peak_bytes(info, 1, n_tokens, chunk);
}

double wk_kv_layout_bits_per_element(const wk_kv_layout *l, uint64_t n_tokens) {
    if (n_tokens == 0) return l->block_bits_per_element;
    return (double)wk_kv_layout_seq_bytes(l, n_tokens) * 8.0 / ((double)n_tokens * (double)l->elements_per_token);
}

double wk_kv_layout_bytes_per_token(const wk_kv_layout *l, uint64_t n_tokens) {
    if (n_tokens == 0) return (double)l->bytes_per_block / (double)l->block_tokens;
    return (double)wk_kv_layout_seq_bytes(l, n_tokens) / (double)n_tokens;
}

uint64_t wk_kv_layout_seqs_fit(const wk_kv_layout *l, uint64_t budget, uint64_t n_tokens, uint64_t chunk) {
    uint64_t per = wk_kv_layout_seq_peak_bytes(l, n_tokens, chunk);
    return per ? budget / per : 0;
}
