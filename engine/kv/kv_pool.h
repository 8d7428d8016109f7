/* Paged KV pool bookkeeping on the host: which fixed-size block of the one KV allocation belongs
 * to which sequence, and exactly how many bytes everyone holds. It never touches a device: it
 * hands out block indices and byte offsets, and tells the caller which device copies to make
 * (copy-on-write, fork of an f16 window). docs/design.md section 6; issue 3 "Paged KV pool".
 *
 * Device allocation this module describes (the caller makes ONE buffer of
 * wk_kv_pool_device_bytes() bytes):
 *   [block 0][block 1] ... [block n_blocks-1][window slot 0] ... [window slot max_seqs-1]
 *   block b at byte b * bytes_per_block; window slot w at n_blocks * bytes_per_block + w * window_bytes.
 *
 * Inside a block (wk_kv_layout): block_tokens tokens of every layer and KV head, as slabs
 *   slab index ((layer * 2 + kv) * n_head_kv + head), kv = 0 keys, 1 values, each slab_bytes long
 *   (wide keys, wk_kv_fmt: a wide layer's key slabs are key_slab_bytes, so the slabs after them
 *   move; each layer's first key and value slab are kv_cache.h's k_word / v_word);
 *   f16 slab:   token t, element i at byte (t * head_dim + i) * 2;
 *   quantized:  the kv_quant.h block layout of block_tokens tokens (codes, then f16 params).
 * Grouping by layer keeps one layer's K and V of a block contiguous, which is what one attention
 * dispatch (one layer) reads.
 *
 * f16 windows (--kv-sink S, --kv-recent R; quantized formats only). The simplest honest scheme:
 *   - EVERY token is also quantized into its block, as without windows. A token leaving the recent
 *     window then needs no re-quantization or move (its codes are already there), and blocks stay
 *     uniform, so one pool and one block table serve all formats. The quantized slots of window
 *     tokens are dead weight while they are in the window; we count them anyway.
 *   - each sequence holds one window slot of (S + R) f16 token rows (all layers, K and V, every KV
 *     head; row layout [layer][kv][head][head_dim] f16): position p < S in row p (sinks, written
 *     once), position p >= S in row S + (p - S) % R (a ring of the last R positions).
 *     Per layer class (--kv-swa-sink / --kv-swa-recent): the full-attention layers and the
 *     sliding-window layers each have their own S and R, and the slot is the two classes' regions
 *     one after the other, each as above over its own layers only (wk_kv_win); a class with no
 *     window has no region.
 *     The attention reads f16 for p < S and for p > n - 1 - R (the last R keys), codes otherwise.
 *   - window slots come from a fixed region after the blocks, one per possible sequence
 *     (max_seqs), so they are part of the same budget and the same allocation. A sequence's bytes
 *     are blocks * bytes_per_block + window_bytes; bits_per_element counts both.
 *   - ring caveat: the ring holds exactly R rows. A prefill chunk must attend to the ring as it was
 *     BEFORE the chunk (positions < chunk start) plus the chunk's own f16-rounded K/V, and store
 *     the chunk's rows into the ring after its attention; otherwise early queries of a chunk longer
 *     than 1 would find their recent keys overwritten. Truncating or forking back more than one
 *     token can also need ring rows that were overwritten: those calls return WK_ERR_UNSUPPORTED
 *     instead of silently attending to wrong keys (wk_kv_seq_truncate, wk_kv_seq_fork).
 *
 * Free list: LIFO (a stack), initialised so block 0 is handed out first. Why LIFO: a block just
 * freed is the one most likely still in a cache (GPU L2, or the host cache under lavapipe), and the
 * working set stays packed at low indices, so on lavapipe -- whose "device memory" is host memory
 * committed on first touch -- resident memory tracks peak use rather than the whole budget. Blocks
 * the prefix cache keeps are not on it (below), so their contents live as long as possible.
 *
 * Prefix caching (issue 13; vLLM's automatic prefix caching). A FULL block can be given a hash
 * (wk_kv_pool_cache_insert) that names its contents: the caller chains wk_kv_block_hash over the
 * block's token ids, its parent block's hash and a salt for everything else that changes the
 * stored values (model, KV format, quantizer, group, transform and sidecar, layer group), so equal
 * hashes mean equal contents. The pool keeps a map hash -> block and nothing about tokens, so it
 * works the same for every format. Every block is in exactly one of three states:
 *   - in use: refcount > 0 (table entries + external references), hashed or not;
 *   - cached: refcount 0 and hashed -- its contents are kept and it is on an LRU list (the order
 *     its last reference went), findable with wk_kv_pool_cache_lookup, and a hit takes it back
 *     with wk_kv_seq_append_shared;
 *   - free: refcount 0, not hashed, on the free list.
 * An allocation takes a free block first and, with none left, evicts the least recently used
 * cached block (its hash leaves the map). So cached blocks count as available everywhere
 * (reserve, prepare_write): caching never makes an allocation fail. A hashed block is never
 * written: a write into one (possible only after a truncate into it) goes to a private copy as for
 * a shared block, the old one staying cached. wk_kv_pool_cache_flush forgets every hash (cached
 * blocks become free). Hashes are 64-bit: two different contents meet with probability about
 * n^2 / 2^65 for n hashed blocks (1e-12 for 10^4 blocks).
 *
 * Sliding-window release (wk_kv_seq_drop_before). Gemma 3's sliding-window-attention layers only
 * ever read the last `window` keys (the query at position p reads keys p - window + 1 .. p), so
 * holding a long context's older blocks for them is waste; llama.cpp keeps only window + batch
 * cells for those layers. The engine gives each layer group its own sequence and, after every
 * step, calls drop_before(len - window + 1) on the SWA groups' sequences: each block whose tokens
 * all lie below that position loses this table's reference (back to the free list at refcount 0,
 * like any release), its entry becomes WK_KV_NO_BLOCK and first_live moves past it. The table
 * keeps its length, so table[i] still stands for tokens [i*bt, (i+1)*bt) and the shaders index it
 * unchanged; a sliding sequence then holds about window + bt tokens of blocks however long it
 * runs. Dropped keys cannot come back, so cutting a sliding sequence back (truncate to 0 < n <
 * n_tokens) or forking a shorter prefix of it is WK_ERR_UNSUPPORTED; release starts it over at 0.
 * first_live * bt <= n_tokens always holds (drop_before never passes n_tokens, and a sliding
 * sequence's n_tokens only ever falls to 0, which resets first_live), so the block position
 * n_tokens falls in -- the only block a write can touch besides fresh ones -- is never dropped.
 *
 * Per-layer-class formats (--kv-swa; engine/kv/kv_cache.h). A format per layer class would break
 * "blocks stay uniform" if both classes shared one pool, so each class gets its own: the first pool
 * holds the full-attention groups' blocks (and, as always, the window slots, whose rows span every
 * layer), a second pool of another block size the sliding groups'. A sequence's group g is created
 * in the pool of g's class; everything above (free list, refcounts, drop_before) is per pool and
 * unchanged. The layout describes both for accounting: swa_bytes_per_block is the sliding groups'
 * block and swa_pool says they live in the second pool, so seq_bytes / seq_peak_bytes /
 * bits_per_element count both classes exactly and wk_kv_layout_pool_peak_bytes splits a sequence's
 * peak between the pools (the engine splits --kv-mem in that proportion at full context, so both
 * run out together; admission checks each). The device side is still ONE buffer: the second pool
 * starts at a whole block of its own size after the first pool's blocks and windows, so the
 * shaders keep one binding and reach the windows from every layer; only the table entries they
 * read are offset by that base block (kv_cache.h).
 *
 * Reference counts: refcount(b) = (number of block-table entries naming b over all sequences)
 *   + (external references taken with wk_kv_pool_share). A block with refcount 0 is on the free
 *   list or (hashed) the prefix cache's LRU list, exactly once. A sequence may only write into a
 *   block whose refcount is 1 and that has no hash (wk_kv_seq_advance refuses otherwise);
 *   wk_kv_seq_cow / wk_kv_seq_prepare_write make that so.
 *
 * Not thread-safe: the scheduler thread owns the pool. */
#ifndef WK_KV_POOL_H
#define WK_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/kv_quant.h"

/* The pool has no free block (or, with windows, no free window slot) for the request. Distinct
 * from every wk_status (-64 is far from the shared table) so a scheduler can tell "preempt or wait"
 * from a real error; the lead may move it into WK_STATUS_MAP. wk_kv_pool_strerror knows it. */
#define WK_ERR_KV_EXHAUSTED (-64)
const char *wk_kv_pool_strerror(int status);

#define WK_KV_BLOCK_TOKENS_DEFAULT 16
#define WK_KV_NO_BLOCK UINT32_MAX

/* ---- formats and sizes ---- */

typedef struct wk_kv_geom {
    int n_layer, n_head_kv, head_dim;
    int block_tokens; /* 0: WK_KV_BLOCK_TOKENS_DEFAULT */
    /* Layer groups (wk_kv_layer_groups): a pool block holds block_tokens tokens of group_layers
     * layers, and a sequence holds one block per group for every block_tokens tokens. The last
     * swa_groups groups are sliding-window layers of swa_window tokens, which only ever need their
     * last blocks (wk_kv_layout_seq_peak_bytes). group_layers 0: one group of every layer. */
    int group_layers, swa_groups, swa_window;
    /* The sliding-window layers' count (window class 1, wk_kv_win below), whether or not they have
     * groups of their own; 0 on a model without them. */
    int swa_layers;
} wk_kv_geom;

typedef struct wk_kv_fmt {
    int bits;         /* 16: f16; 2, 3, 4: packed codes */
    wk_kvq_kind kind; /* quantizer (bits < 16 only) */
    int group;        /* G (bits < 16 only) */
    int sink, recent; /* f16 window tokens of the full-attention layers, 0 = off (bits < 16 only) */
    int swa_sink, swa_recent; /* the same for the sliding-window layers (geom swa_layers) */
    /* Wide keys: in some layers the keys take key_bits (> bits) while the values keep bits, the
     * quantizer and group staying the same. A block then holds, per KV head, key_wide_slots key
     * slabs of key_slab_bytes (the most wide layers any of the pool's groups has; a group with
     * fewer leaves the rest unused), and a layer's slabs lie at per-layer offsets (kv_cache.h
     * k_word/v_word): in slot order, each layer's key slabs then its value slabs. 0, 0: none. */
    int key_bits, key_wide_slots;
} wk_kv_fmt;

/* The f16 windows of one layer class (0: full-attention layers, 1: sliding-window layers). A
 * window slot is the classes' regions one after the other: class c's starts at byte `offset` of
 * the slot and holds sink + recent rows of row_bytes, a row being one token of each of the
 * class's `layers` layers, [layer in class][K|V][head][head_dim] f16 (row layout: kv_pool.h's
 * top comment). A class with sink + recent 0 has no region and reads every key from its blocks. */
typedef struct wk_kv_win {
    int sink, recent, layers;
    uint64_t row_bytes, offset;
} wk_kv_win;

typedef struct wk_kv_layout {
    int block_tokens;
    int n_groups, group_layers;   /* n_groups * group_layers = n_layer */
    int swa_groups, swa_window;   /* the last swa_groups groups slide (window in tokens); 0: none */
    uint64_t slab_bytes;          /* one (layer, K|V, head) slab of block_tokens tokens */
    uint64_t bytes_per_block;     /* one pool block: 2 * group_layers * n_head_kv * slab_bytes, plus
                                   * key_wide_slots * n_head_kv * (key_slab_bytes - slab_bytes) */
    uint64_t elements_per_token;  /* 2 * n_layer * n_head_kv * head_dim (K and V) */
    uint64_t f16_row_bytes;       /* one token of every layer, K and V, f16: elements_per_token * 2 */
    uint64_t window_bytes;        /* the window slot, per sequence: both classes' regions */
    wk_kv_win win[2];             /* per layer class (0 full-attention, 1 sliding), wk_kv_win */
    double block_bits_per_element; /* codes + scales + zeros, no windows: slab_bytes*8/(bt*D) */
    wk_kvq_block_layout q;        /* the kv_quant.h slab layout (quantized formats; zero for f16) */
    /* Wide keys (wk_kv_fmt key_bits): their slab layout and bytes; key_bits 0: none. */
    int key_bits, key_wide_slots;
    wk_kvq_block_layout qk;
    uint64_t key_slab_bytes;
    /* Per-layer-class formats (wk_kv_layout_set_swa): the sliding groups' blocks are
     * swa_bytes_per_block each and, when swa_pool, come from a second pool of their own. Uniform
     * format: swa_bytes_per_block == bytes_per_block, swa_pool false. Every size below counts
     * both classes. */
    uint64_t swa_bytes_per_block;
    bool swa_pool;
} wk_kv_layout;

/* Splits the layers into equal groups, each all full-attention or all sliding-window, so one
 * block size serves both: group_layers = gcd(#full, #sliding) (n_layer when either is 0, or when
 * the window cannot save anything: window >= max_ctx or window 0). Full-attention groups come
 * first, then sliding ones; layers keep their order inside each class. Fills group_of[il] and
 * slot_of[il] (index inside the group, which picks the layer's slabs in a block) and the geometry's
 * group_layers, swa_groups, swa_window. For Gemma 3 270M (3 full, 15 sliding layers): 6 groups of
 * 3 layers, 5 of them sliding. */
void wk_kv_layer_groups(const bool *is_swa, int n_layer, int window, int max_ctx, int *group_of, int *slot_of,
                        wk_kv_geom *g);
/* The window classes (wk_kv_win): class_of[il] is 1 for a sliding-window layer (is_swa, window
 * > 0), else 0; index_of[il] the layer's place among its class's layers. Returns the sliding
 * layers' count, the geometry's swa_layers. */
int wk_kv_win_layers(const bool *is_swa, int n_layer, int window, int *class_of, int *index_of);
/* WK_OK, or WK_ERR_INVALID for a geometry/format kv_quant.h cannot lay out (D % G, D*b % 32, a
 * slab that is not a whole number of u32 words), layer groups that do not divide n_layer, or
 * windows on an f16 cache. */
int wk_kv_layout_get(const wk_kv_geom *g, const wk_kv_fmt *f, wk_kv_layout *out);
/* Per-layer-class formats: l (the full-attention layers' format, which also holds the f16
 * windows) takes its sliding groups' blocks from swa, the same geometry in the sliding layers'
 * format without windows, kept in a pool of their own. WK_ERR_INVALID unless both layouts have the
 * same groups and block_tokens, l has sliding groups and swa no windows and no wide keys. */
int wk_kv_layout_set_swa(wk_kv_layout *l, const wk_kv_layout *swa);
/* What one sequence of n_tokens would hold if every layer kept every token: ceil(n/bt) blocks of
 * each group + its window slot. The format's cost, which bits_per_element and bytes_per_token
 * report; the sliding pool holds less (below). */
uint64_t wk_kv_layout_seq_bytes(const wk_kv_layout *l, uint64_t n_tokens);
/* The most the pool holds for one sequence that grows to n_tokens in steps of at most chunk
 * tokens: full-attention groups keep ceil(n/bt) blocks; a sliding group releases a block once no
 * later query can see it (every token < len - window + 1), so during a step that writes c tokens
 * from len it holds the blocks of [len - window + 1, len + c): at most
 * ceil((bt - 1 + window - 1 + c) / bt) blocks. Equals seq_bytes without sliding groups. */
uint64_t wk_kv_layout_seq_peak_bytes(const wk_kv_layout *l, uint64_t n_tokens, uint64_t chunk);
/* The part of wk_kv_layout_seq_peak_bytes that pool `pool` holds: 0, the first pool (full-attention
 * groups and the window slot, plus the sliding groups unless swa_pool), or 1, the sliding layers'
 * own pool (0 bytes without one). The two add up to seq_peak_bytes. */
uint64_t wk_kv_layout_pool_peak_bytes(const wk_kv_layout *l, int pool, uint64_t n_tokens, uint64_t chunk);
/* Everything counted (codes, scales, zeros, f16 windows, the unfilled tail of the last block),
 * for a sequence of n_tokens: seq_bytes * 8 / (n_tokens * elements_per_token). n_tokens == 0
 * gives block_bits_per_element. This is the "bits_per_element"; at --ctx 2048 and
 * 16-token blocks there is no tail, so it is block bits + window overhead. */
double wk_kv_layout_bits_per_element(const wk_kv_layout *l, uint64_t n_tokens);
/* The "kv_bytes_per_token": seq_bytes / n_tokens (n_tokens == 0: bytes_per_block / bt). */
double wk_kv_layout_bytes_per_token(const wk_kv_layout *l, uint64_t n_tokens);
/* How many sequences of n_tokens, written in steps of at most chunk tokens, fit in budget bytes at
 * their peak (blocks and window slots together). */
uint64_t wk_kv_layout_seqs_fit(const wk_kv_layout *l, uint64_t budget, uint64_t n_tokens, uint64_t chunk);

/* ---- the pool ---- */

typedef struct wk_kv_pool wk_kv_pool;

typedef struct wk_kv_pool_params {
    uint32_t block_tokens;    /* 0: 16 */
    uint64_t bytes_per_block; /* > 0, a multiple of 4 (shaders address u32 words) */
    uint64_t budget_bytes;    /* the whole allocation: blocks and window slots */
    uint64_t window_bytes;    /* per-sequence f16 window slot, multiple of 4; 0: none */
    uint32_t sink, recent;    /* window geometry (only for the ring-loss checks) */
    uint32_t max_seqs;        /* window slots = sequences with a window at once; required when
                               * window_bytes > 0; 0: no windows (sequences are unlimited either way
                               * when created without one, wk_kv_seq_create_ex) */
    uint32_t swa_sink, swa_recent; /* the sliding layers' window (ring checks: each class's ring) */
} wk_kv_pool_params;

/* Fills params from a layout (block size, window size and geometry). */
void wk_kv_pool_params_from_layout(const wk_kv_layout *l, uint64_t budget_bytes, uint32_t max_seqs,
                                   wk_kv_pool_params *p);

/* n_blocks = (budget - max_seqs * window_bytes) / bytes_per_block, at most UINT32_MAX - 1.
 * WK_ERR_INVALID if that is 0 or the parameters are inconsistent; WK_ERR_NOMEM. */
int wk_kv_pool_create(const wk_kv_pool_params *p, wk_kv_pool **out);
/* Also frees every sequence still attached to the pool. */
void wk_kv_pool_destroy(wk_kv_pool *pool);

uint32_t wk_kv_pool_n_blocks(const wk_kv_pool *pool);
uint32_t wk_kv_pool_block_tokens(const wk_kv_pool *pool);
uint64_t wk_kv_pool_bytes_per_block(const wk_kv_pool *pool);
uint64_t wk_kv_pool_device_bytes(const wk_kv_pool *pool); /* n_blocks*bpb + max_seqs*window_bytes */
uint64_t wk_kv_pool_block_offset(const wk_kv_pool *pool, uint32_t block);
uint64_t wk_kv_pool_window_offset(const wk_kv_pool *pool, uint32_t slot);
uint32_t wk_kv_pool_refcount(const wk_kv_pool *pool, uint32_t block); /* 0 for free / out of range */

/* An external reference (a holder outside every block table; the prefix cache does not need one,
 * it keeps released blocks by their hash): refcount++. The block must be in use (refcount > 0):
 * WK_ERR_INVALID otherwise. */
int wk_kv_pool_share(wk_kv_pool *pool, uint32_t block);
/* Drops an external reference taken with wk_kv_pool_share; the block returns to the free list
 * (or, named, the prefix cache) when its count reaches 0. WK_ERR_INVALID if the block has no external reference. */
int wk_kv_pool_unshare(wk_kv_pool *pool, uint32_t block);

/* ---- prefix cache (the "Prefix caching" comment above) ---- */

/* The hash of a full block of n token ids whose parent block (the previous bt tokens) hashed to
 * parent (0 for the first block), under salt. Any thread. */
uint64_t wk_kv_block_hash(uint64_t parent, uint64_t salt, const int32_t *tokens, uint32_t n);
/* Names block (in use, its bt tokens written and committed) by hash: 1 when it is now in the map,
 * 0 when another block already holds that hash (this one stays unnamed and is freed when
 * released) or this block already has it; WK_ERR_INVALID for a block not in use or already named
 * by another hash. */
int wk_kv_pool_cache_insert(wk_kv_pool *pool, uint32_t block, uint64_t hash);
/* The block named by hash (in use or cached), or WK_KV_NO_BLOCK. */
uint32_t wk_kv_pool_cache_lookup(const wk_kv_pool *pool, uint64_t hash);
/* Forgets every hash: cached blocks go to the free list, blocks in use stay in use unnamed.
 * Returns the number of blocks freed. */
uint32_t wk_kv_pool_cache_flush(wk_kv_pool *pool);

typedef struct wk_kv_pool_stats {
    /* n_blocks = used_blocks (in use) + free_blocks + cached_blocks (kept by the prefix cache,
     * evictable); hashed_blocks: named blocks, in use or cached. */
    uint32_t n_blocks, used_blocks, free_blocks, peak_used_blocks;
    uint32_t cached_blocks, hashed_blocks;
    uint64_t cached_bytes;       /* cached_blocks * bpb */
    uint64_t cache_evictions;    /* cached blocks taken by allocations since create */
    uint32_t shared_blocks;      /* refcount >= 2 */
    uint64_t external_refs;      /* references taken with wk_kv_pool_share */
    uint32_t n_seqs, max_seqs, used_windows;
    uint64_t bytes_per_block, window_bytes;
    uint64_t capacity_bytes;     /* wk_kv_pool_device_bytes */
    uint64_t used_bytes;         /* used_blocks * bpb + used_windows * window_bytes */
    uint64_t free_bytes;         /* capacity_bytes - used_bytes (cached blocks count as free) */
    uint64_t peak_used_bytes;    /* max of used_bytes since create / reset_peak */
} wk_kv_pool_stats;
void wk_kv_pool_get_stats(const wk_kv_pool *pool, wk_kv_pool_stats *s);
void wk_kv_pool_reset_peak(wk_kv_pool *pool);

/* Invariant checker (tests, debug builds): every block is either free exactly once or has
 * refcount == table references + external references; window slots are held at most once; each
 * sequence's tokens fit its blocks, its entries below first_live are WK_KV_NO_BLOCK and the others
 * blocks in use, first_live * bt <= n_tokens; used/free/peak figures match a recount. WK_OK or
 * WK_ERR_INVALID with the first violation in err. O(n_blocks + total table length). */
int wk_kv_pool_check(const wk_kv_pool *pool, char *err, size_t errlen);

/* ---- sequences ---- */

/* A device copy the caller must record before the next write (vkCmdCopyBuffer region within the
 * pool buffer). bytes == 0: nothing to copy. Block copies copy the whole block (tokens of a block
 * are interleaved across slabs, so one region is simplest); src_block/dst_block are
 * WK_KV_NO_BLOCK for window copies. */
typedef struct wk_kv_copy {
    uint64_t src_offset, dst_offset, bytes;
    uint32_t src_block, dst_block;
} wk_kv_copy;

/* Read-only to callers (the block table is what the attention shaders read). Entries
 * [0, first_live) are WK_KV_NO_BLOCK: blocks wk_kv_seq_drop_before released. They stay in the table
 * so that table[i] keeps standing for tokens [i*bt, (i+1)*bt); every entry from first_live on names
 * a block in use. first_live * bt <= n_tokens. */
typedef struct wk_kv_seq {
    wk_kv_pool *pool;
    uint32_t *table;      /* n_blocks block indices; table[i] holds tokens [i*bt, (i+1)*bt) */
    uint32_t n_blocks;    /* table length (>= ceil(n_tokens / bt); more after a reserve) */
    uint32_t max_blocks;  /* ceil(max_tokens / bt) */
    uint32_t n_tokens;    /* tokens written and committed (wk_kv_seq_advance) */
    uint32_t first_live;  /* first entry not released by wk_kv_seq_drop_before; 0 if none was */
    uint32_t window_slot; /* its slot (and f16 window); UINT32_MAX when max_seqs is 0 or the
                           * sequence was created without one (wk_kv_seq_create_ex) */
    /* private */
    uint32_t table_cap;
    struct wk_kv_seq *prev, *next;
} wk_kv_seq;

/* A new empty sequence that may grow to max_tokens, rounded up to whole blocks (the engine's
 * context limit is its own check; this one only bounds the table). Takes a slot when the pool
 * has max_seqs (WK_ERR_KV_EXHAUSTED when none is free). NULL with *status set on failure. */
wk_kv_seq *wk_kv_seq_create(wk_kv_pool *pool, uint32_t max_tokens, int *status);
/* wk_kv_seq_create, but with take_window false the sequence takes no window slot even when the
 * pool has them (window_slot UINT32_MAX, no window_bytes in its bytes, no ring to lose, so the
 * ring checks of truncate and fork do not apply to it). max_seqs bounds window slots only: a
 * window-less sequence never fails for want of one. create(p, mt, st) == create_ex(p, mt, true, st). */
wk_kv_seq *wk_kv_seq_create_ex(wk_kv_pool *pool, uint32_t max_tokens, bool take_window, int *status);
/* Releases every block and the window slot, and frees the sequence. NULL is a no-op. */
void wk_kv_seq_destroy(wk_kv_seq *s);

/* Capacity for n_more tokens past n_tokens, allocating blocks as needed. All-or-nothing: on any
 * failure nothing changes. WK_ERR_CONTEXT_FULL past max_tokens, WK_ERR_KV_EXHAUSTED when the pool
 * lacks blocks, WK_ERR_NOMEM. Does not make a shared write block private: see wk_kv_seq_cow /
 * wk_kv_seq_prepare_write. */
int wk_kv_seq_reserve(wk_kv_seq *s, uint32_t n_more);
/* Copy-on-write of the block the next token goes into (position n_tokens), if it is shared: takes
 * a fresh block, puts it in the table, drops one reference to the old one, and fills *copy with the
 * old -> new block copy the caller must do before writing when the old block holds tokens of this
 * sequence (copy->bytes = 0 otherwise). WK_ERR_KV_EXHAUSTED (nothing changed) when no block is
 * free. Same as wk_kv_seq_prepare_write(s, 0, copy). */
int wk_kv_seq_cow(wk_kv_seq *s, wk_kv_copy *copy);
/* What a scheduler calls before a step that writes n_more tokens: reserve capacity and make every
 * existing block of the write range private, all-or-nothing (both happen or nothing changes).
 * Only the block position n_tokens falls in can hold earlier tokens, so there is at most one copy
 * (*copy, required). */
int wk_kv_seq_prepare_write(wk_kv_seq *s, uint32_t n_more, wk_kv_copy *copy);
/* Commits n tokens written at positions [n_tokens, n_tokens + n). WK_ERR_INVALID (nothing changed)
 * if they exceed the reserved capacity or touch a block with refcount != 1 (a write into a shared
 * block would corrupt another holder: a missing cow is a bug, caught here). */
int wk_kv_seq_advance(wk_kv_seq *s, uint32_t n);
/* Keeps the first n_tokens tokens (n_tokens <= current), releasing every block past
 * ceil(n_tokens / bt), reserved ones included. WK_ERR_UNSUPPORTED (nothing changed) when the
 * recent ring no longer holds the f16 rows the shorter sequence needs, or when drop_before released
 * blocks (first_live > 0) and 0 < n_tokens < current: the dropped keys are gone. Truncating to the
 * current length (dropping reserved blocks) and to 0 always work. */
int wk_kv_seq_truncate(wk_kv_seq *s, uint32_t n_tokens);
/* Whether wk_kv_seq_truncate_window(s, n_tokens, window) would succeed: n_tokens <= n_tokens, the
 * recent ring still holds the f16 rows the next query (at n_tokens) reads, and, when drop_before
 * released blocks and 0 < n_tokens < current, window > 0 and every block holding a position the
 * query at n_tokens can see (>= n_tokens - window + 1) is still live. */
bool wk_kv_seq_can_truncate(const wk_kv_seq *s, uint32_t n_tokens, uint32_t window);
/* wk_kv_seq_truncate for a table that serves sliding-window layers of `window` tokens (0: full
 * attention, exactly wk_kv_seq_truncate): cutting back a sequence drop_before thinned is fine as
 * long as the blocks the next query sees are still there (wk_kv_seq_can_truncate). What a parked
 * sequence adopted by a prompt that diverges inside it needs (engine.c). WK_ERR_INVALID past the
 * end, WK_ERR_UNSUPPORTED otherwise (nothing changed). */
int wk_kv_seq_truncate_window(wk_kv_seq *s, uint32_t n_tokens, uint32_t window);
/* truncate(0): all blocks back to the pool, first_live = 0; the sequence (and its window slot)
 * stays usable from position 0. */
void wk_kv_seq_release(wk_kv_seq *s);
/* Sliding-window release: drops this table's reference to every block whose tokens all lie below
 * min(pos, n_tokens) -- entries i >= first_live with (i+1) * bt <= min(pos, n_tokens) -- sets them to
 * WK_KV_NO_BLOCK and advances first_live. A block another holder shares only loses one reference.
 * The block position n_tokens falls in is never dropped, so writes go on as before. Returns the
 * number of entries released (0 when there is nothing new: calling it again is harmless). Blocks
 * are released in table order, so the newest of them is the first the LIFO free list hands out. */
uint32_t wk_kv_seq_drop_before(wk_kv_seq *s, uint32_t pos);
/* A new sequence holding the first n_tokens tokens of src (n_tokens <= src->n_tokens) by sharing
 * the ceil(n_tokens / bt) blocks that hold them (refcount++ each; a partial last block is shared
 * too and copied on the first write by either holder). With windows, *window_copy receives the
 * src slot -> new slot copy the caller must do (else bytes = 0); WK_ERR_UNSUPPORTED when the ring
 * lost rows the prefix needs. A sliding src (first_live > 0) can only be forked whole (n_tokens ==
 * src->n_tokens, else WK_ERR_UNSUPPORTED): the fork shares its live entries and copies its
 * WK_KV_NO_BLOCK prefix and first_live. The fork takes a window slot iff src holds one. max_tokens
 * as for create (>= n_tokens). NULL + *status on failure. */
wk_kv_seq *wk_kv_seq_fork(wk_kv_seq *src, uint32_t n_tokens, uint32_t max_tokens, wk_kv_copy *window_copy,
                          int *status);
/* Appends a full block someone else holds or the prefix cache keeps (a prefix-cache hit):
 * refcount++ (a cached block leaves the LRU list), n_tokens += bt. Requires n_tokens == n_blocks *
 * bt (no partial or reserved block) and a block in use or cached: WK_ERR_INVALID otherwise;
 * WK_ERR_CONTEXT_FULL; WK_ERR_NOMEM. */
int wk_kv_seq_append_shared(wk_kv_seq *s, uint32_t block);
/* Appends an entry for bt tokens no later query of this sequence can see (a sliding-window layer
 * group's prefix-cache hit starts with the blocks below its window): WK_KV_NO_BLOCK, first_live++,
 * n_tokens += bt, as if drop_before had released it. Requires every entry so far to be dropped
 * (first_live == n_blocks) and n_tokens == n_blocks * bt: WK_ERR_INVALID otherwise;
 * WK_ERR_CONTEXT_FULL; WK_ERR_NOMEM. */
int wk_kv_seq_append_dropped(wk_kv_seq *s);

uint32_t wk_kv_seq_capacity_tokens(const wk_kv_seq *s); /* n_blocks * bt */
/* Bytes this sequence holds: live entries (n_blocks - first_live) * bpb, + window_bytes when it
 * holds a window slot. Shared blocks (a prefix-cache hit's included) count for every holder. */
uint64_t wk_kv_seq_bytes(const wk_kv_seq *s);
/* Bytes only this sequence holds, i.e. what releasing it would return to the pool: live blocks
 * with refcount 1 (no other table, no external reference) + its window slot, if any. */
uint64_t wk_kv_seq_unique_bytes(const wk_kv_seq *s);

#endif
