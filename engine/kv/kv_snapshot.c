/* Window snapshots for prefix-cache hits of formats with f16 windows (kv_snapshot.h). */
#include "kv/kv_snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wushkv/wushkv.h"

int wk_kv_snaps_create(wk_vk *vk, wk_kv_snaps *s, uint32_t n, uint64_t slot_bytes, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (n == 0 || slot_bytes == 0) return 0;
    s->key = calloc(n, sizeof *s->key);
    s->tokens = calloc(n, sizeof *s->tokens);
    s->stamp = calloc(n, sizeof *s->stamp);
    if (!s->key || !s->tokens || !s->stamp) {
        wk_kv_snaps_destroy(vk, s);
        return snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM;
    }
    int rc = wk_vk_buffer_create(vk, &s->buf, (VkDeviceSize)n * slot_bytes, WK_MEM_DEVICE, VK_FORMAT_UNDEFINED, err,
                                 errlen);
    if (rc) {
        wk_kv_snaps_destroy(vk, s);
        return rc;
    }
    s->n = n;
    s->slot_bytes = slot_bytes;
    return 0;
}

void wk_kv_snaps_destroy(wk_vk *vk, wk_kv_snaps *s) {
    if (s->buf.buf) wk_vk_buffer_destroy(vk, &s->buf);
    free(s->key);
    free(s->tokens);
    free(s->stamp);
    memset(s, 0, sizeof *s);
}

int wk_kv_snaps_find(const wk_kv_snaps *s, uint64_t key) {
    /* A handful of slots (one per sequence slot by default): a scan is all it needs. */
    for (uint32_t i = 0; i < s->n; i++)
        if (s->tokens[i] && s->key[i] == key) return (int)i;
    return -1;
}

int wk_kv_snaps_save(wk_vk *vk, wk_kv_snaps *s, const wk_buf *src, uint64_t src_offset, uint64_t key, uint32_t tokens,
                     char *err, size_t errlen) {
    if (s->n == 0 || tokens == 0) return snprintf(err, errlen, "no snapshot store"), WK_ERR_INVALID;
    int slot = wk_kv_snaps_find(s, key);
    for (uint32_t i = 0; slot < 0 && i < s->n; i++)
        if (!s->tokens[i]) slot = (int)i;
    if (slot < 0) {
        slot = 0;
        for (uint32_t i = 1; i < s->n; i++)
            if (s->stamp[i] < s->stamp[slot]) slot = (int)i;
    }
    s->tokens[slot] = 0; /* free until the copy is done */
    const wk_vk_region r = {.src = src, .dst = &s->buf, .src_offset = src_offset,
                            .dst_offset = (uint64_t)slot * s->slot_bytes, .bytes = s->slot_bytes};
    int rc = wk_vk_copy(vk, &r, 1, err, errlen);
    if (rc) return rc;
    s->key[slot] = key;
    s->tokens[slot] = tokens;
    s->stamp[slot] = ++s->clock;
    return slot;
}

int wk_kv_snaps_restore(wk_vk *vk, wk_kv_snaps *s, int slot, const wk_buf *dst, uint64_t dst_offset, char *err,
                        size_t errlen) {
    if (slot < 0 || (uint32_t)slot >= s->n || !s->tokens[slot])
        return snprintf(err, errlen, "no snapshot in slot %d", slot), WK_ERR_INVALID;
    const wk_vk_region r = {.src = &s->buf, .dst = dst, .src_offset = (uint64_t)slot * s->slot_bytes,
                            .dst_offset = dst_offset, .bytes = s->slot_bytes};
    int rc = wk_vk_copy(vk, &r, 1, err, errlen);
    if (!rc) s->stamp[slot] = ++s->clock;
    return rc;
}

void wk_kv_snaps_drop(wk_kv_snaps *s, int slot) {
    if (slot >= 0 && (uint32_t)slot < s->n) s->tokens[slot] = 0;
}

uint32_t wk_kv_snaps_count(const wk_kv_snaps *s) {
    uint32_t c = 0;
    for (uint32_t i = 0; i < s->n; i++) c += s->tokens[i] != 0;
    return c;
}
