/* Window snapshots: f16 window slots kept for prefix-cache hits of formats with f16 windows
 * (docs/design.md "Prefix caching", design 3). The query after a prefix of P tokens reads, besides
 * the blocks, the window rows of the sinks (positions < S) and of the ring (max(S, P-R+1) .. P-1),
 * which live in the sequence's window slot and are overwritten as it goes on. A snapshot is a copy
 * of the whole slot taken when a sequence's committed length is exactly P (then the slot holds those
 * rows, each in the row a sequence of P tokens keeps it in), keyed by the token chain's hash of the
 * block that ends at P. A hit copies it into the new sequence's slot. The store is a fixed number of
 * slots in one device buffer of its own, reused least recently used first; copies go device to
 * device (wk_vk_copy). It knows nothing of blocks: the engine drops a snapshot whose block left the
 * prefix cache (engine_prefix.c). */
#ifndef WK_KV_SNAPSHOT_H
#define WK_KV_SNAPSHOT_H

#include <stdint.h>

#include "vulkan/vk_device.h"

typedef struct wk_kv_snaps {
    uint32_t n;          /* slots; 0: no store */
    uint64_t slot_bytes; /* one window slot (kv_pool.h) */
    wk_buf buf;          /* n * slot_bytes */
    uint64_t *key;       /* [n] chain hash of the block ending at the snapshot's point */
    uint32_t *tokens;    /* [n] the point P (tokens covered); 0: the slot is free */
    uint64_t *stamp;     /* [n] last save or restore (LRU) */
    uint64_t clock;
} wk_kv_snaps;

/* A store of n slots of slot_bytes (n 0: none, nothing allocated). WK_ERR_NOMEM / the device's
 * error with err set. */
int wk_kv_snaps_create(wk_vk *vk, wk_kv_snaps *s, uint32_t n, uint64_t slot_bytes, char *err, size_t errlen);
void wk_kv_snaps_destroy(wk_vk *vk, wk_kv_snaps *s);
/* The slot holding key, or -1. */
int wk_kv_snaps_find(const wk_kv_snaps *s, uint64_t key);
/* Copies slot_bytes of src at src_offset (a window slot of the pool buffer) into the slot for key:
 * the one holding key already, else a free one, else the least recently used (whose snapshot is
 * lost). Returns the slot or a negative wk_status. */
int wk_kv_snaps_save(wk_vk *vk, wk_kv_snaps *s, const wk_buf *src, uint64_t src_offset, uint64_t key, uint32_t tokens,
                     char *err, size_t errlen);
/* Copies slot `slot` into dst at dst_offset (a sequence's window slot) and marks it used now. */
int wk_kv_snaps_restore(wk_vk *vk, wk_kv_snaps *s, int slot, const wk_buf *dst, uint64_t dst_offset, char *err,
                        size_t errlen);
void wk_kv_snaps_drop(wk_kv_snaps *s, int slot);
uint32_t wk_kv_snaps_count(const wk_kv_snaps *s); /* slots holding a snapshot */

#endif
