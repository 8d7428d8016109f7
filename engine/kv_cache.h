/* KV cache storage: per layer, per sequence slot, per position, the keys and values of every KV
 * head. This format is f16 in fixed per-sequence slots; the paged 2-bit WUSH-KV pool
 * replaces it behind the same two bindings the attention and store shaders use. */
#ifndef WK_KV_CACHE_H
#define WK_KV_CACHE_H

#include "model.h"
#include "vk_device.h"

typedef enum { WK_KV_F16 = 0 } wk_kv_format;

typedef struct wk_kv_cache {
    wk_kv_format format;
    int n_layer, n_slots, max_ctx, n_head_kv, head_dim;
    wk_buf *k, *v;             /* per layer: [slot*max_ctx + pos][n_head_kv][head_dim] f16, RG32UI view */
    uint64_t bytes;            /* device bytes held */
    uint64_t bytes_per_token;  /* all layers, keys and values */
} wk_kv_cache;

int wk_kv_cache_create(wk_vk *vk, wk_kv_cache *kv, const wk_hparams *hp, int n_slots, int max_ctx, char *err,
                       size_t errlen);
void wk_kv_cache_destroy(wk_vk *vk, wk_kv_cache *kv);

#endif
