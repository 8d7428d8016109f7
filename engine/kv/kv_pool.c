/* Paged KV pool bookkeeping: block free list, reference counts, per-sequence block tables, window
 * slots and exact byte accounting, the prefix cache's hashed blocks (map and LRU). The per-format
 * sizes are kv_layout.c's. No device calls (kv_pool.h). */
#include "kv/kv_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wushkv/wushkv.h"

struct wk_kv_pool {
    uint32_t block_tokens;
    uint64_t bpb, window_bytes;
    uint32_t sink, recent;
    uint32_t n_blocks;
    uint32_t *refcount;   /* per block: table references + external references */
    uint32_t *ext;        /* per block: external references (wk_kv_pool_share) */
    uint32_t *free_stack; /* LIFO; free_stack[0 .. n_free) */
    uint32_t n_free;
    uint32_t peak_used;
    uint64_t peak_bytes;
    uint32_t max_seqs;    /* sequence (= window) slots; 0: unlimited, no windows */
    uint32_t *slot_stack; /* free window slots, LIFO */
    uint32_t n_free_slots;
    uint32_t n_seqs;
    wk_kv_seq *seqs; /* registry, so the checker can count table references */
    /* Prefix cache (kv_pool.h "Prefix caching"): hash[b] is valid while hashed[b]; every hashed
     * block is in the map; a hashed block with refcount 0 is on the LRU list (lru_head the
     * oldest), never on the free stack. */
    uint64_t *hash;
    uint8_t *hashed;
    uint32_t *map;      /* open addressing, linear probing: block index or WK_KV_NO_BLOCK */
    uint32_t map_mask;  /* map has map_mask + 1 entries, a power of two >= 2 * n_blocks */
    uint32_t n_hashed;
    uint32_t *lru_prev, *lru_next; /* WK_KV_NO_BLOCK ends the list */
    uint32_t lru_head, lru_tail, n_cached;
    uint64_t evictions;
};

const char *wk_kv_pool_strerror(int status) {
    if (status == WK_ERR_KV_EXHAUSTED) return "KV pool exhausted";
    return wk_strerror(status);
}

/* ---------------------------------------------------------------- pool */

void wk_kv_pool_params_from_layout(const wk_kv_layout *l, uint64_t budget_bytes, uint32_t max_seqs,
                                   wk_kv_pool_params *p) {
    memset(p, 0, sizeof *p);
    p->block_tokens = (uint32_t)l->block_tokens;
    p->bytes_per_block = l->bytes_per_block;
    p->budget_bytes = budget_bytes;
    p->window_bytes = l->window_bytes;
    p->sink = (uint32_t)l->sink;
    p->recent = (uint32_t)l->recent;
    p->max_seqs = max_seqs;
}

int wk_kv_pool_create(const wk_kv_pool_params *p, wk_kv_pool **out) {
    *out = NULL;
    uint32_t bt = p->block_tokens ? p->block_tokens : WK_KV_BLOCK_TOKENS_DEFAULT;
    if (p->bytes_per_block == 0 || p->bytes_per_block % 4 != 0 || p->window_bytes % 4 != 0) return WK_ERR_INVALID;
    if (p->window_bytes && p->max_seqs == 0) return WK_ERR_INVALID;
    uint64_t windows = 0;
    if (p->window_bytes) {
        if (p->max_seqs > p->budget_bytes / p->window_bytes) return WK_ERR_INVALID; /* windows alone exceed it */
        windows = (uint64_t)p->max_seqs * p->window_bytes;
    }
    uint64_t nb = (p->budget_bytes - windows) / p->bytes_per_block;
    if (nb == 0) return WK_ERR_INVALID;
    if (nb > UINT32_MAX - 1) nb = UINT32_MAX - 1; /* indices are u32 in the shaders; UINT32_MAX = none */

    wk_kv_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return WK_ERR_NOMEM;
    pool->block_tokens = bt;
    pool->bpb = p->bytes_per_block;
    pool->window_bytes = p->window_bytes;
    pool->sink = p->sink;
    pool->recent = p->recent;
    pool->n_blocks = (uint32_t)nb;
    pool->refcount = calloc(nb, sizeof *pool->refcount);
    pool->ext = calloc(nb, sizeof *pool->ext);
    pool->free_stack = malloc(nb * sizeof *pool->free_stack);
    pool->max_seqs = p->max_seqs;
    if (p->max_seqs) pool->slot_stack = malloc((size_t)p->max_seqs * sizeof *pool->slot_stack);
    uint64_t map_n = 16;
    while (map_n < 2 * nb) map_n *= 2;
    pool->map_mask = (uint32_t)(map_n - 1);
    pool->hash = malloc(nb * sizeof *pool->hash);
    pool->hashed = calloc(nb, 1);
    pool->map = malloc(map_n * sizeof *pool->map);
    pool->lru_prev = malloc(nb * sizeof *pool->lru_prev);
    pool->lru_next = malloc(nb * sizeof *pool->lru_next);
    pool->lru_head = pool->lru_tail = WK_KV_NO_BLOCK;
    if (!pool->refcount || !pool->ext || !pool->free_stack || (p->max_seqs && !pool->slot_stack) || !pool->hash ||
        !pool->hashed || !pool->map || !pool->lru_prev || !pool->lru_next) {
        wk_kv_pool_destroy(pool);
        return WK_ERR_NOMEM;
    }
    /* Top of the stack is the last entry: push in reverse so block 0 (slot 0) comes out first. */
    for (uint32_t i = 0; i < pool->n_blocks; i++) pool->free_stack[i] = pool->n_blocks - 1 - i;
    pool->n_free = pool->n_blocks;
    for (uint32_t i = 0; i < pool->max_seqs; i++) pool->slot_stack[i] = pool->max_seqs - 1 - i;
    pool->n_free_slots = pool->max_seqs;
    for (uint64_t i = 0; i < map_n; i++) pool->map[i] = WK_KV_NO_BLOCK;
    *out = pool;
    return WK_OK;
}

void wk_kv_pool_destroy(wk_kv_pool *pool) {
    if (!pool) return;
    while (pool->seqs) wk_kv_seq_destroy(pool->seqs);
    free(pool->refcount);
    free(pool->ext);
    free(pool->free_stack);
    free(pool->slot_stack);
    free(pool->hash);
    free(pool->hashed);
    free(pool->map);
    free(pool->lru_prev);
    free(pool->lru_next);
    free(pool);
}

uint32_t wk_kv_pool_n_blocks(const wk_kv_pool *pool) { return pool->n_blocks; }
uint32_t wk_kv_pool_block_tokens(const wk_kv_pool *pool) { return pool->block_tokens; }
uint64_t wk_kv_pool_bytes_per_block(const wk_kv_pool *pool) { return pool->bpb; }
uint64_t wk_kv_pool_device_bytes(const wk_kv_pool *pool) {
    return (uint64_t)pool->n_blocks * pool->bpb + (uint64_t)pool->max_seqs * pool->window_bytes;
}
uint64_t wk_kv_pool_block_offset(const wk_kv_pool *pool, uint32_t block) { return (uint64_t)block * pool->bpb; }
uint64_t wk_kv_pool_window_offset(const wk_kv_pool *pool, uint32_t slot) {
    return (uint64_t)pool->n_blocks * pool->bpb + (uint64_t)slot * pool->window_bytes;
}
uint32_t wk_kv_pool_refcount(const wk_kv_pool *pool, uint32_t block) {
    return block < pool->n_blocks ? pool->refcount[block] : 0;
}

/* Blocks some table or external reference holds: neither free nor cached. */
static uint32_t used_blocks(const wk_kv_pool *pool) { return pool->n_blocks - pool->n_free - pool->n_cached; }

/* Blocks an allocation can take: free ones, then cached ones (evicting the least recently used). */
static uint64_t avail_blocks(const wk_kv_pool *pool) { return (uint64_t)pool->n_free + pool->n_cached; }

static uint64_t used_bytes(const wk_kv_pool *pool) {
    return (uint64_t)used_blocks(pool) * pool->bpb +
           (uint64_t)(pool->max_seqs - pool->n_free_slots) * pool->window_bytes;
}

/* Called after every allocation (blocks or window slot); frees cannot raise a peak. */
static void note_peak(wk_kv_pool *pool) {
    uint32_t used = used_blocks(pool);
    if (used > pool->peak_used) pool->peak_used = used;
    uint64_t b = used_bytes(pool);
    if (b > pool->peak_bytes) pool->peak_bytes = b;
}

/* ---- the prefix cache's map (hash -> block) and LRU list */

/* The home slot of a hash: a final mix, so that hashes a caller made up (tests) spread too. */
static uint32_t map_home(const wk_kv_pool *pool, uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (uint32_t)h & pool->map_mask;
}

static uint32_t map_find_slot(const wk_kv_pool *pool, uint64_t h) {
    for (uint32_t i = map_home(pool, h);; i = (i + 1) & pool->map_mask) {
        uint32_t b = pool->map[i];
        if (b == WK_KV_NO_BLOCK || pool->hash[b] == h) return i;
    }
}

/* Takes b out of the map and forgets its hash. Backward-shift deletion keeps every later entry of
 * the probe run reachable without tombstones. */
static void unhash(wk_kv_pool *pool, uint32_t b) {
    uint32_t i = map_find_slot(pool, pool->hash[b]);
    pool->map[i] = WK_KV_NO_BLOCK;
    for (uint32_t j = (i + 1) & pool->map_mask; pool->map[j] != WK_KV_NO_BLOCK; j = (j + 1) & pool->map_mask) {
        uint32_t k = map_home(pool, pool->hash[pool->map[j]]);
        /* Entry j may move to the hole at i unless its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays) continue;
        pool->map[i] = pool->map[j];
        pool->map[j] = WK_KV_NO_BLOCK;
        i = j;
    }
    pool->hashed[b] = 0;
    pool->n_hashed--;
}

static void lru_push(wk_kv_pool *pool, uint32_t b) {
    pool->lru_prev[b] = pool->lru_tail;
    pool->lru_next[b] = WK_KV_NO_BLOCK;
    if (pool->lru_tail != WK_KV_NO_BLOCK) pool->lru_next[pool->lru_tail] = b;
    else pool->lru_head = b;
    pool->lru_tail = b;
    pool->n_cached++;
}

static void lru_remove(wk_kv_pool *pool, uint32_t b) {
    uint32_t p = pool->lru_prev[b], n = pool->lru_next[b];
    if (p != WK_KV_NO_BLOCK) pool->lru_next[p] = n;
    else pool->lru_head = n;
    if (n != WK_KV_NO_BLOCK) pool->lru_prev[n] = p;
    else pool->lru_tail = p;
    pool->n_cached--;
}

/* Callers check avail_blocks first, so this cannot fail. A free block first (LIFO, kv_pool.h);
 * with none, the least recently used cached block is evicted: it leaves the map for good. */
static uint32_t block_pop(wk_kv_pool *pool) {
    uint32_t b;
    if (pool->n_free) {
        b = pool->free_stack[--pool->n_free];
    } else {
        b = pool->lru_head;
        lru_remove(pool, b);
        unhash(pool, b);
        pool->evictions++;
    }
    pool->refcount[b] = 1;
    return b;
}

/* The last reference gone: a hashed block stays cached (newest in the LRU), any other is free. */
static void block_unref(wk_kv_pool *pool, uint32_t b) {
    if (--pool->refcount[b] != 0) return;
    if (pool->hashed[b]) lru_push(pool, b);
    else pool->free_stack[pool->n_free++] = b;
}

/* A cached block taken back into use by a prefix hit. */
static void block_ref(wk_kv_pool *pool, uint32_t b) {
    if (pool->refcount[b]++ == 0) {
        lru_remove(pool, b);
        note_peak(pool);
    }
}

uint64_t wk_kv_block_hash(uint64_t parent, uint64_t salt, const int32_t *tokens, uint32_t n) {
    /* FNV-1a over (salt, parent, tokens) in 64 bits, then a murmur3 finalizer so every input bit
     * reaches every output bit. The salt goes first, so chains of different formats never meet. */
    uint64_t h = 0xcbf29ce484222325ull;
    const uint64_t words[2] = {salt, parent};
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 8; i++) h = (h ^ ((words[w] >> (8 * i)) & 0xff)) * 0x100000001b3ull;
    for (uint32_t t = 0; t < n; t++)
        for (int i = 0; i < 4; i++) h = (h ^ (((uint32_t)tokens[t] >> (8 * i)) & 0xff)) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

int wk_kv_pool_cache_insert(wk_kv_pool *pool, uint32_t block, uint64_t hash) {
    if (block >= pool->n_blocks || pool->refcount[block] == 0) return WK_ERR_INVALID;
    if (pool->hashed[block]) return pool->hash[block] == hash ? 0 : WK_ERR_INVALID;
    uint32_t i = map_find_slot(pool, hash);
    if (pool->map[i] != WK_KV_NO_BLOCK) return 0; /* another block already holds these contents */
    pool->hash[block] = hash;
    pool->hashed[block] = 1;
    pool->map[i] = block;
    pool->n_hashed++;
    return 1;
}

uint32_t wk_kv_pool_cache_lookup(const wk_kv_pool *pool, uint64_t hash) {
    return pool->map[map_find_slot(pool, hash)];
}

uint32_t wk_kv_pool_cache_flush(wk_kv_pool *pool) {
    uint32_t freed = 0;
    while (pool->lru_head != WK_KV_NO_BLOCK) {
        uint32_t b = pool->lru_head;
        lru_remove(pool, b);
        unhash(pool, b);
        pool->free_stack[pool->n_free++] = b;
        freed++;
    }
    /* Blocks in use keep their contents but are no longer found; they go to the free list when
     * released. */
    for (uint32_t b = 0; b < pool->n_blocks && pool->n_hashed; b++)
        if (pool->hashed[b]) unhash(pool, b);
    return freed;
}

int wk_kv_pool_share(wk_kv_pool *pool, uint32_t block) {
    if (block >= pool->n_blocks || pool->refcount[block] == 0 || pool->refcount[block] == UINT32_MAX)
        return WK_ERR_INVALID;
    pool->refcount[block]++;
    pool->ext[block]++;
    return WK_OK;
}

int wk_kv_pool_unshare(wk_kv_pool *pool, uint32_t block) {
    if (block >= pool->n_blocks || pool->ext[block] == 0) return WK_ERR_INVALID;
    pool->ext[block]--;
    block_unref(pool, block);
    return WK_OK;
}

void wk_kv_pool_get_stats(const wk_kv_pool *pool, wk_kv_pool_stats *s) {
    memset(s, 0, sizeof *s);
    s->n_blocks = pool->n_blocks;
    s->free_blocks = pool->n_free;
    s->cached_blocks = pool->n_cached;
    s->used_blocks = used_blocks(pool);
    s->hashed_blocks = pool->n_hashed;
    s->cache_evictions = pool->evictions;
    s->peak_used_blocks = pool->peak_used;
    for (uint32_t b = 0; b < pool->n_blocks; b++) {
        if (pool->refcount[b] >= 2) s->shared_blocks++;
        s->external_refs += pool->ext[b];
    }
    s->n_seqs = pool->n_seqs;
    s->max_seqs = pool->max_seqs;
    s->used_windows = pool->max_seqs - pool->n_free_slots;
    s->bytes_per_block = pool->bpb;
    s->window_bytes = pool->window_bytes;
    s->capacity_bytes = wk_kv_pool_device_bytes(pool);
    s->used_bytes = used_bytes(pool);
    s->cached_bytes = (uint64_t)pool->n_cached * pool->bpb;
    s->free_bytes = s->capacity_bytes - s->used_bytes;
    s->peak_used_bytes = pool->peak_bytes;
}

void wk_kv_pool_reset_peak(wk_kv_pool *pool) {
    pool->peak_used = used_blocks(pool);
    pool->peak_bytes = used_bytes(pool);
}

#define FAIL(...)                                          \
    do {                                                   \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
        rc = WK_ERR_INVALID;                               \
        goto done;                                         \
    } while (0)

int wk_kv_pool_check(const wk_kv_pool *pool, char *err, size_t errlen) {
    int rc = WK_OK;
    uint32_t *refs = calloc(pool->n_blocks, sizeof *refs);      /* table refs, recounted */
    uint8_t *on_free = calloc(pool->n_blocks, 1);
    uint8_t *slot_seen = calloc(pool->max_seqs ? pool->max_seqs : 1, 1);
    if (!refs || !on_free || !slot_seen) FAIL("check: out of memory");
    if (err && errlen) err[0] = 0;

    if (pool->n_free > pool->n_blocks) FAIL("n_free %u > n_blocks %u", pool->n_free, pool->n_blocks);
    for (uint32_t i = 0; i < pool->n_free; i++) {
        uint32_t b = pool->free_stack[i];
        if (b >= pool->n_blocks) FAIL("free list entry %u: block %u out of range", i, b);
        if (on_free[b]) FAIL("block %u on the free list twice", b);
        on_free[b] = 1;
        if (pool->refcount[b] != 0) FAIL("free block %u has refcount %u", b, pool->refcount[b]);
        if (pool->hashed[b]) FAIL("free block %u is hashed", b);
    }
    /* The LRU list: cached blocks only (hashed, refcount 0), each once and never also free. */
    uint32_t n_lru = 0;
    for (uint32_t b = pool->lru_head, prev = WK_KV_NO_BLOCK; b != WK_KV_NO_BLOCK; prev = b, b = pool->lru_next[b]) {
        if (b >= pool->n_blocks) FAIL("LRU entry %u: block %u out of range", n_lru, b);
        if (on_free[b]) FAIL("block %u is free and cached, or cached twice", b);
        on_free[b] = 2;
        if (pool->lru_prev[b] != prev) FAIL("LRU list broken at block %u", b);
        if (pool->refcount[b] != 0) FAIL("cached block %u has refcount %u (referenced blocks are never evictable)", b,
                                         pool->refcount[b]);
        if (!pool->hashed[b]) FAIL("cached block %u has no hash", b);
        if (++n_lru > pool->n_blocks) FAIL("LRU list loops");
        if (pool->lru_next[b] == WK_KV_NO_BLOCK && pool->lru_tail != b) FAIL("LRU tail is not block %u", b);
    }
    if (n_lru != pool->n_cached) FAIL("%u blocks on the LRU list, %u counted", n_lru, pool->n_cached);
    /* The map: exactly the hashed blocks, each found from its own hash. */
    uint32_t n_map = 0, n_hashed = 0;
    for (uint32_t i = 0; i <= pool->map_mask; i++) {
        uint32_t b = pool->map[i];
        if (b == WK_KV_NO_BLOCK) continue;
        if (b >= pool->n_blocks || !pool->hashed[b]) FAIL("map entry %u: block %u is not hashed", i, b);
        n_map++;
    }
    for (uint32_t b = 0; b < pool->n_blocks; b++) {
        if (!pool->hashed[b]) continue;
        n_hashed++;
        if (wk_kv_pool_cache_lookup(pool, pool->hash[b]) != b) FAIL("hashed block %u not found by its hash", b);
    }
    if (n_map != n_hashed || n_hashed != pool->n_hashed)
        FAIL("%u map entries, %u hashed blocks, %u counted", n_map, n_hashed, pool->n_hashed);
    uint32_t n_seqs = 0, n_windowed = 0;
    for (const wk_kv_seq *s = pool->seqs; s; s = s->next) {
        n_seqs++;
        if (s->pool != pool) FAIL("sequence %u belongs to another pool", n_seqs);
        if (s->n_blocks > s->table_cap || s->n_blocks > s->max_blocks)
            FAIL("sequence %u: %u blocks, table room %u, max %u", n_seqs, s->n_blocks, s->table_cap, s->max_blocks);
        if ((uint64_t)s->n_tokens > (uint64_t)s->n_blocks * pool->block_tokens)
            FAIL("sequence %u: %u tokens in %u blocks", n_seqs, s->n_tokens, s->n_blocks);
        if (s->next && s->next->prev != s) FAIL("sequence list broken after %u", n_seqs);
        /* The write block (n_tokens / bt) must be live, or a write would land in a dropped entry. */
        if (s->first_live > s->n_blocks || (uint64_t)s->first_live * pool->block_tokens > s->n_tokens)
            FAIL("sequence %u: first_live %u with %u blocks, %u tokens", n_seqs, s->first_live, s->n_blocks,
                 s->n_tokens);
        for (uint32_t i = 0; i < s->n_blocks; i++) {
            uint32_t b = s->table[i];
            if (i < s->first_live) {
                if (b != WK_KV_NO_BLOCK)
                    FAIL("sequence %u entry %u: block %u below first_live %u", n_seqs, i, b, s->first_live);
                continue;
            }
            if (b >= pool->n_blocks) FAIL("sequence %u entry %u: block %u out of range", n_seqs, i, b);
            refs[b]++;
        }
        if (s->window_slot != UINT32_MAX) {
            if (!pool->max_seqs)
                FAIL("sequence %u holds window slot %u in a pool without windows", n_seqs, s->window_slot);
            if (s->window_slot >= pool->max_seqs) FAIL("sequence %u: window slot %u", n_seqs, s->window_slot);
            if (slot_seen[s->window_slot]) FAIL("window slot %u held twice", s->window_slot);
            slot_seen[s->window_slot] = 1;
            n_windowed++;
        }
    }
    if (n_seqs != pool->n_seqs) FAIL("%u sequences listed, %u counted", n_seqs, pool->n_seqs);
    uint32_t used = 0;
    for (uint32_t b = 0; b < pool->n_blocks; b++) {
        uint64_t want = (uint64_t)refs[b] + pool->ext[b];
        if (pool->refcount[b] != want)
            FAIL("block %u: refcount %u, table refs %u + external %u", b, pool->refcount[b], refs[b], pool->ext[b]);
        if (pool->refcount[b] == 0 && !on_free[b]) FAIL("block %u: refcount 0 but neither free nor cached (leak)", b);
        if (pool->refcount[b]) used++;
    }
    if (used + pool->n_free + pool->n_cached != pool->n_blocks)
        FAIL("used %u + free %u + cached %u != %u blocks", used, pool->n_free, pool->n_cached, pool->n_blocks);
    if (pool->peak_used < used) FAIL("peak %u < used %u", pool->peak_used, used);
    if (pool->max_seqs) {
        if (pool->n_free_slots > pool->max_seqs) FAIL("%u free window slots of %u", pool->n_free_slots, pool->max_seqs);
        for (uint32_t i = 0; i < pool->n_free_slots; i++) {
            uint32_t w = pool->slot_stack[i];
            if (w >= pool->max_seqs || slot_seen[w]) FAIL("window slot %u free and held, or free twice", w);
            slot_seen[w] = 1;
        }
        if (pool->n_free_slots + n_windowed != pool->max_seqs)
            FAIL("%u free window slots + %u windowed sequences != %u", pool->n_free_slots, n_windowed,
                 pool->max_seqs);
    }
    uint64_t ub = (uint64_t)used * pool->bpb + (uint64_t)(pool->max_seqs - pool->n_free_slots) * pool->window_bytes;
    if (ub != used_bytes(pool)) FAIL("used bytes %llu != recount %llu", (unsigned long long)used_bytes(pool),
                                     (unsigned long long)ub);
    if (pool->peak_bytes < ub) FAIL("peak bytes below used bytes");
done:
    free(refs);
    free(on_free);
    free(slot_seen);
    return rc;
}
#undef FAIL

/* ---------------------------------------------------------------- sequences */

static uint32_t blocks_for(const wk_kv_pool *pool, uint64_t tokens) {
    return (uint32_t)((tokens + pool->block_tokens - 1) / pool->block_tokens);
}

/* Room in the table for want entries (want <= max_blocks). Growing the array is not observable
 * state, so doing it before a failing allocation keeps the all-or-nothing promise. */
static int table_room(wk_kv_seq *s, uint32_t want) {
    if (want <= s->table_cap) return WK_OK;
    uint64_t cap = s->table_cap ? s->table_cap : 8;
    while (cap < want) cap *= 2;
    if (cap > s->max_blocks) cap = s->max_blocks;
    uint32_t *t = realloc(s->table, (size_t)cap * sizeof *t);
    if (!t) return WK_ERR_NOMEM;
    s->table = t;
    s->table_cap = (uint32_t)cap;
    return WK_OK;
}

static wk_kv_seq *seq_new(wk_kv_pool *pool, uint32_t max_tokens, bool take_window, int *status) {
    take_window = take_window && pool->max_seqs;
    if (max_tokens == 0) {
        *status = WK_ERR_INVALID;
        return NULL;
    }
    if (take_window && pool->n_free_slots == 0) {
        *status = WK_ERR_KV_EXHAUSTED;
        return NULL;
    }
    wk_kv_seq *s = calloc(1, sizeof *s);
    if (!s) {
        *status = WK_ERR_NOMEM;
        return NULL;
    }
    s->pool = pool;
    s->max_blocks = blocks_for(pool, max_tokens);
    s->window_slot = UINT32_MAX;
    if (take_window) {
        s->window_slot = pool->slot_stack[--pool->n_free_slots];
        note_peak(pool);
    }
    s->next = pool->seqs;
    if (pool->seqs) pool->seqs->prev = s;
    pool->seqs = s;
    pool->n_seqs++;
    *status = WK_OK;
    return s;
}

wk_kv_seq *wk_kv_seq_create_ex(wk_kv_pool *pool, uint32_t max_tokens, bool take_window, int *status) {
    int st;
    wk_kv_seq *s = seq_new(pool, max_tokens, take_window, &st);
    if (status) *status = st;
    return s;
}

wk_kv_seq *wk_kv_seq_create(wk_kv_pool *pool, uint32_t max_tokens, int *status) {
    return wk_kv_seq_create_ex(pool, max_tokens, true, status);
}

/* Drops table entries [keep, n_blocks). Those below first_live hold no reference any more. */
static void drop_blocks(wk_kv_seq *s, uint32_t keep) {
    while (s->n_blocks > keep) {
        uint32_t i = --s->n_blocks;
        if (i >= s->first_live) block_unref(s->pool, s->table[i]);
    }
    if (s->first_live > keep) s->first_live = keep;
}

void wk_kv_seq_destroy(wk_kv_seq *s) {
    if (!s) return;
    wk_kv_pool *pool = s->pool;
    drop_blocks(s, 0);
    if (s->window_slot != UINT32_MAX) pool->slot_stack[pool->n_free_slots++] = s->window_slot;
    if (s->prev) s->prev->next = s->next;
    else pool->seqs = s->next;
    if (s->next) s->next->prev = s->prev;
    pool->n_seqs--;
    free(s->table);
    free(s);
}

/* The blocks positions [n_tokens, n_tokens + n_more) will be written into that already exist in
 * the table: indices [*lo, *hi). With n_more == 0 it is the block position n_tokens falls in, if
 * any (what a plain cow makes private). *lo = n_tokens / bt >= first_live because first_live * bt
 * <= n_tokens (drop_before stops at n_tokens / bt, and truncate lowers a sliding sequence's n_tokens
 * only to 0, resetting first_live with it), so the range -- like advance's, which starts at the
 * same block, and reserve's and append_shared's, which start at n_blocks -- never holds a dropped
 * entry. */
static void write_range(const wk_kv_seq *s, uint32_t n_more, uint32_t *lo, uint32_t *hi) {
    uint32_t bt = s->pool->block_tokens;
    uint64_t last = ((uint64_t)s->n_tokens + (n_more ? n_more : 1) - 1) / bt;
    *lo = s->n_tokens / bt;
    *hi = last + 1 < s->n_blocks ? (uint32_t)(last + 1) : s->n_blocks;
    if (*hi < *lo) *hi = *lo;
}

/* Whether a write into block b must go to a private copy: another holder reads it, or the prefix
 * cache names it by its contents (a hashed block never changes; kv_pool.h). */
static bool must_copy(const wk_kv_pool *pool, uint32_t b) { return pool->refcount[b] > 1 || pool->hashed[b]; }

/* Shared or hashed blocks (must_copy) in [lo, hi): each needs a fresh private block before the write.
 * Normally only the block holding position n_tokens can be shared (fork and append_shared share
 * blocks that hold tokens; reserve hands out private blocks), but an external wk_kv_pool_share of a
 * reserved block is handled the same way instead of being a trap. */
static uint32_t count_shared(const wk_kv_seq *s, uint32_t lo, uint32_t hi) {
    uint32_t n = 0;
    for (uint32_t i = lo; i < hi; i++) n += must_copy(s->pool, s->table[i]);
    return n;
}

/* Blocks reserve(n_more) would add to the table, or an error status (negative). */
static int64_t reserve_need(const wk_kv_seq *s, uint32_t n_more) {
    uint64_t want = blocks_for(s->pool, (uint64_t)s->n_tokens + n_more);
    if (want > s->max_blocks) return WK_ERR_CONTEXT_FULL;
    return want > s->n_blocks ? (int64_t)(want - s->n_blocks) : 0;
}

static void do_reserve(wk_kv_seq *s, uint32_t need) {
    for (uint32_t i = 0; i < need; i++) s->table[s->n_blocks++] = block_pop(s->pool);
    if (need) note_peak(s->pool);
}

static void no_copy(wk_kv_copy *copy) {
    memset(copy, 0, sizeof *copy);
    copy->src_block = copy->dst_block = WK_KV_NO_BLOCK;
}

/* Replaces every shared block in [lo, hi) by a fresh one (the caller checked there are enough).
 * Only a block that already holds committed tokens -- the one position n_tokens falls in, when
 * n_tokens is not a block boundary -- has contents to carry over; that is the one copy. */
static void privatize(wk_kv_seq *s, uint32_t lo, uint32_t hi, wk_kv_copy *copy) {
    wk_kv_pool *pool = s->pool;
    uint32_t bt = pool->block_tokens;
    bool any = false;
    for (uint32_t i = lo; i < hi; i++) {
        uint32_t old = s->table[i];
        if (!must_copy(pool, old)) continue;
        uint32_t fresh = block_pop(pool); /* old is held, so this cannot evict it */
        block_unref(pool, old); /* its other holders keep it, or (hashed) the cache does */
        s->table[i] = fresh;
        any = true;
        if ((uint64_t)i * bt < s->n_tokens) {
            copy->src_block = old;
            copy->dst_block = fresh;
            copy->src_offset = wk_kv_pool_block_offset(pool, old);
            copy->dst_offset = wk_kv_pool_block_offset(pool, fresh);
            copy->bytes = pool->bpb;
        }
    }
    if (any) note_peak(pool);
}

int wk_kv_seq_reserve(wk_kv_seq *s, uint32_t n_more) {
    int64_t need = reserve_need(s, n_more);
    if (need < 0) return (int)need;
    if ((uint64_t)need > avail_blocks(s->pool)) return WK_ERR_KV_EXHAUSTED;
    int rc = table_room(s, s->n_blocks + (uint32_t)need);
    if (rc) return rc;
    do_reserve(s, (uint32_t)need);
    return WK_OK;
}

int wk_kv_seq_prepare_write(wk_kv_seq *s, uint32_t n_more, wk_kv_copy *copy) {
    if (!copy) return WK_ERR_INVALID; /* a copy it may need must not be lost */
    no_copy(copy);
    int64_t need = reserve_need(s, n_more);
    if (need < 0) return (int)need;
    uint32_t lo, hi;
    write_range(s, n_more, &lo, &hi);
    uint64_t shared = count_shared(s, lo, hi);
    if ((uint64_t)need + shared > avail_blocks(s->pool)) return WK_ERR_KV_EXHAUSTED;
    int rc = table_room(s, s->n_blocks + (uint32_t)need);
    if (rc) return rc;
    privatize(s, lo, hi, copy);
    do_reserve(s, (uint32_t)need);
    return WK_OK;
}

int wk_kv_seq_cow(wk_kv_seq *s, wk_kv_copy *copy) { return wk_kv_seq_prepare_write(s, 0, copy); }

int wk_kv_seq_advance(wk_kv_seq *s, uint32_t n) {
    uint32_t bt = s->pool->block_tokens;
    uint64_t end = (uint64_t)s->n_tokens + n;
    if (end > (uint64_t)s->n_blocks * bt) return WK_ERR_INVALID;
    if (n == 0) return WK_OK;
    for (uint64_t i = s->n_tokens / bt; i <= (end - 1) / bt; i++)
        if (must_copy(s->pool, s->table[i])) return WK_ERR_INVALID;
    s->n_tokens = (uint32_t)end;
    return WK_OK;
}

/* Whether a sequence whose ring was last written up to position written-1 still holds the f16
 * rows a sequence of n tokens needs. Position p >= sink lives in ring row (p - sink) % recent; the
 * next query (at n) reads f16 keys max(sink, n-recent+1) .. n-1 from the ring, and row of p was
 * overwritten iff p + recent <= written - 1. The smallest needed p decides. */
static bool ring_holds(const wk_kv_pool *pool, uint64_t written, uint64_t n) {
    if (pool->recent == 0 || n == 0) return true;
    uint64_t lo = n + 1 > pool->recent ? n + 1 - pool->recent : 0;
    if (lo < pool->sink) lo = pool->sink;
    if (lo > n - 1) return true; /* nothing needed from the ring */
    return lo + pool->recent > written - 1;
}

/* A sequence without a window slot has no ring to lose. */
static bool seq_ring_holds(const wk_kv_seq *s, uint64_t n) {
    return s->window_slot == UINT32_MAX || ring_holds(s->pool, s->n_tokens, n);
}

int wk_kv_seq_truncate(wk_kv_seq *s, uint32_t n_tokens) {
    if (n_tokens > s->n_tokens) return WK_ERR_INVALID;
    /* A shorter sliding sequence would attend to keys drop_before already gave away. */
    if (s->first_live && n_tokens && n_tokens < s->n_tokens) return WK_ERR_UNSUPPORTED;
    if (!seq_ring_holds(s, n_tokens)) return WK_ERR_UNSUPPORTED;
    s->n_tokens = n_tokens;
    drop_blocks(s, blocks_for(s->pool, n_tokens));
    return WK_OK;
}

bool wk_kv_seq_can_truncate(const wk_kv_seq *s, uint32_t n_tokens, uint32_t window) {
    if (n_tokens > s->n_tokens || !seq_ring_holds(s, n_tokens)) return false;
    if (!s->first_live || !n_tokens || n_tokens == s->n_tokens) return true;
    /* The query at n_tokens reads keys n_tokens - window + 1 .. n_tokens (wk_kv_prefix_first_needed). */
    const uint32_t bt = s->pool->block_tokens;
    const uint32_t needed = n_tokens < window ? 0 : (n_tokens - window + 1) / bt;
    return window > 0 && s->first_live <= needed;
}

int wk_kv_seq_truncate_window(wk_kv_seq *s, uint32_t n_tokens, uint32_t window) {
    if (n_tokens > s->n_tokens) return WK_ERR_INVALID;
    if (!wk_kv_seq_can_truncate(s, n_tokens, window)) return WK_ERR_UNSUPPORTED;
    s->n_tokens = n_tokens;
    /* first_live <= needed <= blocks_for(n_tokens): drop_blocks leaves it. */
    drop_blocks(s, n_tokens ? blocks_for(s->pool, n_tokens) : 0);
    return WK_OK;
}

void wk_kv_seq_release(wk_kv_seq *s) {
    s->n_tokens = 0;
    drop_blocks(s, 0); /* first_live back to 0 with it */
}

uint32_t wk_kv_seq_drop_before(wk_kv_seq *s, uint32_t pos) {
    /* end * bt <= min(pos, n_tokens) <= n_blocks * bt: within the table, and never past the block
     * position n_tokens falls in, so the next write's block stays. */
    uint32_t end = (pos < s->n_tokens ? pos : s->n_tokens) / s->pool->block_tokens;
    uint32_t n = 0;
    for (; s->first_live < end; s->first_live++, n++) {
        block_unref(s->pool, s->table[s->first_live]);
        s->table[s->first_live] = WK_KV_NO_BLOCK;
    }
    return n;
}

wk_kv_seq *wk_kv_seq_fork(wk_kv_seq *src, uint32_t n_tokens, uint32_t max_tokens, wk_kv_copy *window_copy,
                          int *status) {
    int st = WK_OK;
    wk_kv_pool *pool = src->pool;
    wk_kv_seq *s = NULL;
    if (window_copy) no_copy(window_copy);
    uint32_t nb = blocks_for(pool, n_tokens);
    if (n_tokens > src->n_tokens || max_tokens < n_tokens) {
        st = WK_ERR_INVALID;
        goto out;
    }
    if (!seq_ring_holds(src, n_tokens) || (src->first_live && n_tokens != src->n_tokens)) {
        st = WK_ERR_UNSUPPORTED; /* a shorter prefix of a sliding sequence needs keys it dropped */
        goto out;
    }
    s = seq_new(pool, max_tokens, src->window_slot != UINT32_MAX, &st);
    if (!s) goto out;
    if ((st = table_room(s, nb)) != WK_OK) {
        wk_kv_seq_destroy(s);
        s = NULL;
        goto out;
    }
    /* first_live <= n_tokens / bt <= nb: the NO_BLOCK prefix is copied as it is, without refs. */
    for (uint32_t i = 0; i < nb; i++) {
        s->table[i] = src->table[i];
        if (i >= src->first_live) pool->refcount[src->table[i]]++;
    }
    s->n_blocks = nb;
    s->n_tokens = n_tokens;
    s->first_live = src->first_live;
    if (s->window_slot != UINT32_MAX && pool->window_bytes && window_copy) {
        window_copy->src_offset = wk_kv_pool_window_offset(pool, src->window_slot);
        window_copy->dst_offset = wk_kv_pool_window_offset(pool, s->window_slot);
        window_copy->bytes = pool->window_bytes;
    }
out:
    if (status) *status = st;
    return s;
}

int wk_kv_seq_append_shared(wk_kv_seq *s, uint32_t block) {
    wk_kv_pool *pool = s->pool;
    uint32_t bt = pool->block_tokens;
    if (block >= pool->n_blocks || (pool->refcount[block] == 0 && !pool->hashed[block]) ||
        pool->refcount[block] == UINT32_MAX || (uint64_t)s->n_tokens != (uint64_t)s->n_blocks * bt)
        return WK_ERR_INVALID;
    if (s->n_blocks + 1 > s->max_blocks) return WK_ERR_CONTEXT_FULL;
    int rc = table_room(s, s->n_blocks + 1);
    if (rc) return rc;
    s->table[s->n_blocks++] = block;
    block_ref(pool, block);
    s->n_tokens += bt;
    return WK_OK;
}

int wk_kv_seq_append_dropped(wk_kv_seq *s) {
    uint32_t bt = s->pool->block_tokens;
    if (s->first_live != s->n_blocks || (uint64_t)s->n_tokens != (uint64_t)s->n_blocks * bt) return WK_ERR_INVALID;
    if (s->n_blocks + 1 > s->max_blocks) return WK_ERR_CONTEXT_FULL;
    int rc = table_room(s, s->n_blocks + 1);
    if (rc) return rc;
    s->table[s->n_blocks++] = WK_KV_NO_BLOCK;
    s->first_live++;
    s->n_tokens += bt;
    return WK_OK;
}

uint32_t wk_kv_seq_capacity_tokens(const wk_kv_seq *s) { return s->n_blocks * s->pool->block_tokens; }

static uint64_t seq_window_bytes(const wk_kv_seq *s) {
    return s->window_slot != UINT32_MAX ? s->pool->window_bytes : 0;
}

uint64_t wk_kv_seq_bytes(const wk_kv_seq *s) {
    return (uint64_t)(s->n_blocks - s->first_live) * s->pool->bpb + seq_window_bytes(s);
}

uint64_t wk_kv_seq_unique_bytes(const wk_kv_seq *s) {
    uint64_t n = 0;
    for (uint32_t i = s->first_live; i < s->n_blocks; i++) n += s->pool->refcount[s->table[i]] == 1;
    return n * s->pool->bpb + seq_window_bytes(s);
}
