/* f16 KV cache: one key and one value buffer per layer, each sized for every sequence slot at the
 * full context, so a token's cache row is slot*max_ctx + pos. */
#include "kv_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wushkv/wushkv.h"

int wk_kv_cache_create(wk_vk *vk, wk_kv_cache *kv, const wk_hparams *hp, int n_slots, int max_ctx, char *err,
                       size_t errlen) {
    memset(kv, 0, sizeof *kv);
    kv->format = WK_KV_F16;
    kv->n_layer = hp->n_layer;
    kv->n_slots = n_slots;
    kv->max_ctx = max_ctx;
    kv->n_head_kv = hp->n_head_kv;
    kv->head_dim = hp->head_dim;
    const uint64_t row = (uint64_t)hp->n_head_kv * hp->head_dim * 2;
    kv->bytes_per_token = row * 2 * (uint64_t)hp->n_layer;
    const uint64_t per_layer = row * (uint64_t)n_slots * (uint64_t)max_ctx;
    if (per_layer > vk->props.limits.maxStorageBufferRange) {
        snprintf(err, errlen, "KV cache of %d slots x %d tokens needs %llu bytes per layer, over the device's "
                 "%u-byte storage buffer limit: lower --ctx or the number of sequences", n_slots, max_ctx,
                 (unsigned long long)per_layer, vk->props.limits.maxStorageBufferRange);
        return WK_ERR_INVALID;
    }
    kv->k = calloc((size_t)kv->n_layer, sizeof *kv->k);
    kv->v = calloc((size_t)kv->n_layer, sizeof *kv->v);
    if (!kv->k || !kv->v) {
        wk_kv_cache_destroy(vk, kv);
        return snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM;
    }
    for (int il = 0; il < kv->n_layer; il++) {
        int rc = wk_vk_buffer_create(vk, &kv->k[il], per_layer, WK_MEM_DEVICE, VK_FORMAT_R32G32_UINT, err, errlen);
        if (!rc) rc = wk_vk_buffer_create(vk, &kv->v[il], per_layer, WK_MEM_DEVICE, VK_FORMAT_R32G32_UINT, err, errlen);
        if (rc) {
            wk_kv_cache_destroy(vk, kv);
            return rc;
        }
        kv->bytes += kv->k[il].bytes + kv->v[il].bytes;
    }
    return 0;
}

void wk_kv_cache_destroy(wk_vk *vk, wk_kv_cache *kv) {
    for (int il = 0; il < kv->n_layer; il++) {
        if (kv->k) wk_vk_buffer_destroy(vk, &kv->k[il]);
        if (kv->v) wk_vk_buffer_destroy(vk, &kv->v[il]);
    }
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}
