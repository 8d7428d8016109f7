/* Engine internals for engine-side modules that work on an open engine (calibration): the parsed
 * model and its GGUF file; and the engine and sequence structs with the calls engine.c and
 * engine_prefix.c (prefix caching) share. server/ never sees this header; it has include/wushkv/ only. */
#ifndef WK_ENGINE_INT_H
#define WK_ENGINE_INT_H

#include "forward.h"
#include "kv/kv_cache.h"
#include "kv/kv_snapshot.h"
#include "kv/kv_transform.h"
#include "model/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "vulkan/vk_device.h"
#include "vulkan/vk_pipelines.h"
#include "weights.h"
#include "wushkv/wushkv.h"

/* Both live as long as the engine. */
const wk_model_desc *wk_engine_desc(const wk_engine *e);
const wk_gguf *wk_engine_gguf(const wk_engine *e); /* NULL once released (release_model_file) */
/* Warnings and errors the validation layer reported so far (tests require 0). */
int wk_engine_validation_messages(const wk_engine *e);

/* ---- shared by engine.c and engine_prefix.c ---- */

struct wk_engine {
    wk_gguf *gguf;        /* NULL once released (wk_engine_params.release_model_file) */
    uint64_t model_bytes; /* the model file's size, kept for prefix_salt after a release */
    wk_model_desc desc;
    wk_tokenizer *tok;
    wk_vk vk;
    wk_pipelines pipes;
    wk_weights weights;
    wk_kv_cache kv;
    wk_kv_xform xform;
    wk_fwd fwd;
    wk_model_info info;
    char name[256];
    char kernel_variants[256]; /* wk_model_info.kernel_variants */
    char *chat_template; /* tokenizer.chat_template (NUL-terminated copy), or NULL */
    bool *slot_used;     /* [max_seqs] */
    int max_seqs;
    /* per-step scratch, sized for max_batch_tokens */
    int32_t *step_tokens;
    wk_row_info *step_rows;
    uint32_t *step_win;         /* per row: its sequence's f16 window slot (pool words), paged + windows */
    int *step_logit_rows;
    uint32_t *step_tables;  /* paged cache: the step's block tables, concatenated */
    /* Automatic prefix caching (wk_seq_prefix_attach): on when asked for and the format allows;
     * prefix_salt enters every block hash (everything besides the tokens that changes what a
     * block stores). */
    bool prefix_cache;
    uint64_t prefix_salt;
    /* Parking (formats with f16 windows; docs/design.md "Prefix caching", design 1): an ended
     * sequence is kept whole (tables, partial block, window slot, token ids) on an LRU list,
     * parked_head the least recently parked, until a prompt that extends its tokens adopts it
     * (wk_seq_create_prefix) or a slot or a block is needed (evict_parked). */
    bool park;
    wk_seq *parked_head, *parked_tail;
    int n_parked;
    /* Window snapshots (design 3; kv_snapshot.h): n 0 without. */
    wk_kv_snaps snaps;
};

/* Snapshot points a sequence may wait for at once (its prompt's end and a caller's hint). */
#define WK_SNAP_POINTS 4

struct wk_seq {
    wk_engine *e;
    int slot;
    int len;
    /* Paged cache: one block table per layer group (kv.layout.n_groups; group 0 holds the f16
     * window slot); n_kvs 0 with the f16 cache. */
    int n_kvs;
    wk_kv_seq *kvs[WK_MAX_LAYERS];
    uint64_t peak_bytes; /* wk_seq_kv_peak_bytes */
    /* Prefix caching: the token chain's hash of every full block so far (hashes[0 .. n_hashed))
     * and the tokens of the block being filled (pending[len % bt] is the next). */
    uint64_t *hashes;
    int n_hashed;
    int32_t *pending;
    /* Parking (e->park): the token ids in the cache, toks[0 .. len); the parked list's links. */
    int32_t *toks;
    int toks_cap;
    bool toks_lost; /* out of memory once: toks incomplete, never parked */
    bool parked;
    wk_seq *park_prev, *park_next;
    /* Window snapshots: the points past len at which a step's end takes one (wk_seq_snapshot_at). */
    int snap_pts[WK_SNAP_POINTS];
    int n_snap_pts;
};

/* engine.c: frees a sequence (its blocks and window slot back to the pool, its engine slot free);
 * raises its peak bytes to what it holds now. */
void wk_eng_seq_free(wk_seq *s);
void wk_eng_seq_note_peak(wk_seq *s);

/* engine_prefix.c (docs/design.md "Prefix caching"). */
/* Everything besides the tokens that decides what a block stores: enters every block hash. */
uint64_t wk_eng_prefix_salt(const wk_engine *e, const wk_engine_params *p);
/* After a step committed n tokens (s->len already past them): names the blocks they filled
 * (before the sliding groups release theirs); with parking, records their token ids. */
void wk_eng_seq_name_blocks(wk_seq *s, const int32_t *tokens, int n);
void wk_eng_seq_keep_tokens(wk_seq *s, const int32_t *tokens, int n);
/* Takes a parked sequence off the parked list; destroys the least recently parked one (false when
 * none is parked). */
void wk_eng_park_unlink(wk_seq *s);
bool wk_eng_evict_parked(wk_engine *e);
/* After a step: a snapshot of s's window slot when its length is one of its snapshot points (the
 * points it passed are forgotten). A failed copy only loses the snapshot. */
void wk_eng_seq_snapshot(wk_seq *s);
/* Drops every snapshot whose block left the prefix cache (allocations evict cached blocks). */
void wk_eng_snaps_purge(wk_engine *e);

#endif
