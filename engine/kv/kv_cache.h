/* KV cache storage: one paged pool (engine/kv/kv_pool.h) of blocks holding the keys and values of
 * every layer group and KV head, in any format: f16 slabs or packed 2/3/4-bit codes. No format
 * keeps a per-sequence slot for a full context; sequences take blocks as they grow. */
#ifndef WK_KV_CACHE_H
#define WK_KV_CACHE_H

#include "kv/kv_pool.h"
#include "model/model.h"
#include "vulkan/vk_device.h"

typedef struct wk_kv_cache {
    int n_layer, n_slots, max_ctx, n_head_kv, head_dim;
    uint64_t bytes;            /* device bytes held */
    uint64_t bytes_per_token;  /* all layers, keys and values, whole blocks */
    /* The format (bits 16: f16 slabs; 2/3/4: packed codes) and its blocks in one pool allocation */
    wk_kv_fmt fmt;
    wk_kv_layout layout;
    wk_kv_pool *pool;
    wk_buf pool_buf;           /* R32UI view, read by attention_paged and written by kv_store_quant/f16 */
    VkBufferView pool_view2;   /* f16 (fmt.bits 16) only: an RG32UI view of pool_buf, read by attention_paged */
    /* Layer groups (wk_kv_layer_groups): layer il's blocks are its sequence's group_of[il] table
     * entries, its slabs slot_of[il] in each; the last layout.swa_groups groups slide. */
    int group_of[WK_MAX_LAYERS], slot_of[WK_MAX_LAYERS];
    /* Window classes (layout.win): layer il's f16 window rows are class win_class_of[il]'s
     * (1: a sliding-window layer), its K and V the win_layer_of[il]-th layer's in each of that class's rows. */
    int win_class_of[WK_MAX_LAYERS], win_layer_of[WK_MAX_LAYERS];
    /* Layer il's first key slab and first value slab in each of its blocks, in u32 words (its KV
     * heads' slabs follow each); key_wide[il]: its keys are fmt.key_bits wide (layout.qk). */
    uint32_t k_word[WK_MAX_LAYERS], v_word[WK_MAX_LAYERS];
    bool key_wide[WK_MAX_LAYERS];
    int rank_k, rank_v;        /* percentile clip ranks (wk_kvq_percentile_rank) */
    /* QuEST's constant (wk_kvq_quest_c2) for fmt's layers and for swa_pool's; 0: unclipped. */
    float quest_c2, swa_quest_c2;
    float key_quest_c2; /* the same for the wide keys (their own width, the same clip) */
    /* Per-layer-class formats (swa_pool non-NULL): the sliding groups' blocks are swa_fmt's
     * (swa_layout: the same groups, no windows) and come from swa_pool. Its blocks live in pool_buf
     * too, after the first pool's blocks and window slots, so one binding still reaches every
     * layer's codes and the windows: swa_pool block b is block swa_block_base + b of pool_buf
     * counted in swa_layout.bytes_per_block (the tables the shaders read hold that index).
     * layout.swa_pool / swa_bytes_per_block make every size count both classes. */
    wk_kv_fmt swa_fmt;
    wk_kv_layout swa_layout;
    wk_kv_pool *swa_pool;
    uint32_t swa_block_base;
    int swa_rank_k, swa_rank_v;
} wk_kv_cache;

/* Whether layer group g's blocks come from swa_pool (and are swa_fmt's). */
static inline bool wk_kv_cache_group_swa(const wk_kv_cache *kv, int g) {
    return kv->swa_pool && g >= kv->layout.n_groups - kv->layout.swa_groups;
}

/* The cache: budget bytes of blocks (0: room for n_slots full contexts written in steps of up to
 * max_batch tokens). fmt->bits 16 is f16 (swa_bits 0, no windows, rho unused); 2/3/4 quantized,
 * rho_k, rho_v: percentile clip quantiles (that quantizer only). Wide keys: fmt->key_bits for
 * the layers with wide_keys[il] (NULL: none); they must be layers of the first pool (with a
 * sliding-window format of their own, full-attention layers); fmt->key_wide_slots is computed.
 * swa_bits: the sliding-window layers' bits (0 or fmt->bits: one format, one pool); a different
 * value on a model with sliding layers makes the second pool, the budget split between the two in
 * proportion to a full-context sequence's peak in each, so they run out together. */
int wk_kv_cache_create_paged(wk_vk *vk, wk_kv_cache *kv, const wk_hparams *hp, const wk_kv_fmt *fmt,
                             const bool *wide_keys, int swa_bits, float rho_k, float rho_v, uint64_t budget, int n_slots, int max_ctx, int max_batch,
                             char *err, size_t errlen);
void wk_kv_cache_destroy(wk_vk *vk, wk_kv_cache *kv);
/* Bytes the attention of a one-token step at position pos (pos tokens already cached) reads from
 * the cache, every layer: for each key and value it can see (a sliding layer's last
 * hp->sliding_window), the f16 row or the codes and group parameters of the layer's format, or
 * the f16 window row; the step's own key and value come from its activations when the cache has
 * windows (not counted) and from the cache otherwise. Each KV head's keys are read once per
 * workgroup of query heads that share it (attention_plan.c's head chunks: once unless a GQA group
 * has more than WK_ATTN_MAXR heads). Logical bytes: what the shader asks for, before any cache. */
uint64_t wk_kv_cache_step_read_bytes(const wk_kv_cache *kv, const wk_hparams *hp, uint64_t pos);

#endif
