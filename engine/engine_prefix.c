/* Automatic prefix caching of the engine (wushkv.h: wk_seq_prefix_attach, wk_seq_park,
 * wk_seq_create_prefix, wk_engine_prefix_cache_flush, wk_engine_kv_usage): naming full blocks by
 * their token hash chain, parking ended sequences of windowed formats and adopting them.
 * docs/design.md "Prefix caching". */
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "kv/kv_prefix.h"

/* Parking: appends the n tokens a step just committed to the sequence's token ids (its len is
 * already past them). Out of memory loses them for good (toks_lost): such a sequence is never
 * parked, which costs only the reuse. */
void wk_eng_seq_keep_tokens(wk_seq *s, const int32_t *tokens, int n) {
    if (s->toks_lost) return;
    if (s->len > s->toks_cap) {
        int cap = s->toks_cap ? s->toks_cap : 64;
        while (cap < s->len) cap *= 2;
        if (cap > s->e->fwd.max_ctx) cap = s->e->fwd.max_ctx;
        int32_t *t = realloc(s->toks, (size_t)cap * sizeof *t);
        if (!t) {
            s->toks_lost = true;
            return;
        }
        s->toks = t;
        s->toks_cap = cap;
    }
    memcpy(s->toks + (s->len - n), tokens, (size_t)n * sizeof *tokens);
}

/* Everything besides the tokens that decides what a block stores: the model (its file's path and
 * size, its shapes), the KV format of each layer class with its quantizer, group, windows and
 * clip quantiles and QuEST clip, the transform with its seed and sidecar. The cache lives inside one engine,
 * which has one of each, so today this only guards against a mistake; it is what a cache shared
 * between engines (or kept on disk) would need. */
uint64_t wk_eng_prefix_salt(const wk_engine *e, const wk_engine_params *p) {
    const wk_hparams *hp = &e->desc.hp;
    union { float f; int32_t i; } rk = {.f = p->kv_rho_k}, rv = {.f = p->kv_rho_v}, c2 = {.f = e->kv.quest_c2},
        swa_c2 = {.f = e->kv.swa_quest_c2};
    const int32_t w[] = {e->kv.fmt.bits, e->kv.swa_pool ? e->kv.swa_fmt.bits : e->kv.fmt.bits, (int32_t)e->kv.fmt.kind,
                         e->kv.fmt.group, e->kv.layout.win[0].sink, e->kv.layout.win[0].recent,
                         e->kv.layout.win[1].sink, e->kv.layout.win[1].recent, rk.i, rv.i, c2.i, swa_c2.i,
                         (int32_t)p->kv_transform,
                         (int32_t)p->kv_transform_seed, (int32_t)(p->kv_transform_seed >> 32), hp->n_layer, hp->n_embd,
                         hp->n_vocab, hp->n_head_kv, hp->head_dim, e->kv.layout.block_tokens,
                         (int32_t)e->model_bytes, (int32_t)(e->model_bytes >> 32)};
    uint64_t h = wk_kv_block_hash(0, 0x77757368ull, w, (uint32_t)(sizeof w / sizeof w[0]));
    const char *names[2] = {p->model_path, p->kv_transform == WK_KV_TRANSFORM_WUSH ? p->wush_path : NULL};
    for (int k = 0; k < 2; k++)
        for (const char *c = names[k]; c && *c; c++) h = wk_kv_block_hash(h, (uint64_t)k, &(int32_t){(uint8_t)*c}, 1);
    return h;
}

/* After a step committed n tokens: every block they filled gets its chain hash, and each layer
 * group's block for it is named in its pool (before seq_slide, which may release it at once: a
 * released named block stays cached). */
void wk_eng_seq_name_blocks(wk_seq *s, const int32_t *tokens, int n) {
    if (!s->hashes) return;
    const uint32_t bt = (uint32_t)s->e->kv.layout.block_tokens;
    for (int j = 0; j < n; j++) {
        const uint32_t pos = (uint32_t)(s->len - n + j);
        s->pending[pos % bt] = tokens[j];
        if ((pos + 1) % bt) continue;
        const uint32_t k = pos / bt;
        s->hashes[k] = wk_kv_block_hash(k ? s->hashes[k - 1] : 0, s->e->prefix_salt, s->pending, bt);
        s->n_hashed = (int)k + 1;
        for (int g = 0; g < s->n_kvs; g++)
            if (s->kvs[g]->table[k] != WK_KV_NO_BLOCK)
                wk_kv_pool_cache_insert(s->kvs[g]->pool, s->kvs[g]->table[k], wk_kv_prefix_key(s->hashes[k], g));
    }
}

void wk_eng_park_unlink(wk_seq *s) {
    wk_engine *e = s->e;
    if (s->park_prev) s->park_prev->park_next = s->park_next;
    else e->parked_head = s->park_next;
    if (s->park_next) s->park_next->park_prev = s->park_prev;
    else e->parked_tail = s->park_prev;
    s->park_prev = s->park_next = NULL;
    s->parked = false;
    e->n_parked--;
}

/* Destroys the least recently parked sequence (its blocks and window slot back to the pool):
 * false when none is parked. What every allocation that finds no room does first, so parked
 * sequences cost nothing to anyone who needs the memory. */
bool wk_eng_evict_parked(wk_engine *e) {
    wk_seq *s = e->parked_head;
    if (!s) return false;
    wk_eng_park_unlink(s);
    wk_eng_seq_free(s);
    return true;
}

void wk_seq_park(wk_seq *s) {
    if (!s) return;
    wk_engine *e = s->e;
    if (!e->park || s->parked || s->len == 0 || !s->toks || s->toks_lost) {
        wk_seq_destroy(s);
        return;
    }
    s->parked = true;
    s->park_prev = e->parked_tail;
    s->park_next = NULL;
    if (e->parked_tail) e->parked_tail->park_next = s;
    else e->parked_head = s;
    e->parked_tail = s;
    e->n_parked++;
}

/* The snapshot slot holding the window rows for a hit of k blocks on s's chain, or -1. */
static int snap_for(const wk_seq *s, uint32_t k) {
    return k ? wk_kv_snaps_find(&s->e->snaps, s->hashes[k - 1]) : -1;
}

int wk_seq_prefix_attach(wk_seq *s, const int32_t *tokens, int n_tokens) {
    wk_engine *e = s->e;
    /* Windowed formats hit only where a snapshot holds the window rows (design 3). */
    const bool windowed = e->park;
    if (!e->prefix_cache || (windowed && !e->snaps.n) || s->len != 0 || n_tokens <= 0 || !tokens) return 0;
    const wk_kv_layout *l = &e->kv.layout;
    const int bt = l->block_tokens;
    int n_chain = n_tokens / bt;
    if (n_chain > e->fwd.max_ctx / bt) n_chain = e->fwd.max_ctx / bt;
    for (int k = 0; k < n_chain; k++)
        s->hashes[k] = wk_kv_block_hash(k ? s->hashes[k - 1] : 0, e->prefix_salt, tokens + (size_t)k * bt, (uint32_t)bt);
    uint32_t k = wk_kv_prefix_match(s->kvs, s->n_kvs, l->swa_groups, (uint32_t)l->swa_window, s->hashes,
                                    (uint32_t)n_chain);
    int snap = -1;
    if (windowed) {
        /* The longest k <= the block match that ends at a snapshot and whose blocks are all there
         * (a shorter k needs other sliding-window blocks, so each is matched again). */
        wk_eng_snaps_purge(e);
        for (; k > 0; k--)
            if ((snap = snap_for(s, k)) >= 0 &&
                wk_kv_prefix_match(s->kvs, s->n_kvs, l->swa_groups, (uint32_t)l->swa_window, s->hashes, k) == k)
                break;
    }
    if (k == 0) return 0;
    int rc = wk_kv_prefix_attach(s->kvs, s->n_kvs, l->swa_groups, (uint32_t)l->swa_window, s->hashes, k);
    if (rc) return rc == WK_ERR_NOMEM ? WK_ERR_NOMEM : WK_ERR_INVALID;
    if (windowed) {
        char err[WK_ERRMSG_LEN];
        const uint64_t win = wk_kv_pool_window_offset(e->kv.pool, s->kvs[0]->window_slot);
        if (wk_kv_snaps_restore(&e->vk, &e->snaps, snap, &e->kv.pool_buf, win, err, sizeof err)) {
            for (int g = 0; g < s->n_kvs; g++) wk_kv_seq_release(s->kvs[g]); /* a cold start */
            return 0;
        }
    }
    s->len = (int)k * bt;
    s->n_hashed = (int)k;
    wk_eng_seq_note_peak(s);
    return s->len;
}

/* Whether parked sequence p cut back to n tokens still holds everything the query at n reads:
 * every layer group's table (wk_kv_seq_can_truncate: the recent ring's f16 rows, and a sliding
 * group's blocks inside its window). */
static bool park_can_take(const wk_seq *p, int n) {
    const wk_kv_layout *l = &p->e->kv.layout;
    for (int g = 0; g < p->n_kvs; g++) {
        const uint32_t window = g >= l->n_groups - l->swa_groups ? (uint32_t)l->swa_window : 0;
        if (!wk_kv_seq_can_truncate(p->kvs[g], (uint32_t)n, window)) return false;
    }
    return true;
}

/* Design 1 (docs/design.md "Prefix caching"): the parked sequence whose tokens share the longest
 * usable start with tokens[0 .. n_tokens), cut back to that start and taken off the list; NULL when
 * none shares a usable one. Usable: a = the common start's length, at least half the parked
 * tokens (llama-server's slot similarity 0.5: a prompt that shares only a BOS or a template's
 * first line would otherwise take over another conversation's parked sequence and cut it away),
 * and park_can_take(a). Ties go to the most recently parked. */
static wk_seq *park_adopt(wk_engine *e, const int32_t *tokens, int n_tokens, int *taken) {
    wk_seq *best = NULL;
    int best_a = 0;
    for (wk_seq *p = e->parked_tail; p; p = p->park_prev) {
        const int lim = p->len < n_tokens ? p->len : n_tokens;
        int a = 0;
        while (a < lim && p->toks[a] == tokens[a]) a++;
        if (a > best_a && 2 * a >= p->len && park_can_take(p, a)) best = p, best_a = a;
    }
    if (!best) return NULL;
    const wk_kv_layout *l = &e->kv.layout;
    for (int g = 0; g < best->n_kvs; g++) {
        const uint32_t window = g >= l->n_groups - l->swa_groups ? (uint32_t)l->swa_window : 0;
        wk_kv_seq_truncate_window(best->kvs[g], (uint32_t)best_a, window); /* cannot fail: park_can_take */
    }
    wk_eng_park_unlink(best);
    /* The chain goes on from the block best_a falls in: its tokens so far are pending again. */
    if (best->hashes) {
        const int bt = l->block_tokens;
        best->n_hashed = best_a / bt;
        memcpy(best->pending, best->toks + (best_a - best_a % bt), (size_t)(best_a % bt) * sizeof *best->pending);
    }
    best->n_snap_pts = 0;
    best->len = best_a;
    best->peak_bytes = 0;
    wk_eng_seq_note_peak(best);
    *taken = best_a;
    return best;
}

int wk_seq_create_prefix(wk_engine *e, const int32_t *tokens, int n_tokens, wk_seq **out) {
    *out = NULL;
    if (e->park && tokens && n_tokens > 0) {
        int taken = 0;
        if ((*out = park_adopt(e, tokens, n_tokens, &taken))) return taken;
    }
    int rc = wk_seq_create(e, out);
    if (rc < 0) return rc;
    if (!e->prefix_cache || !tokens || n_tokens <= 0) return 0;
    rc = wk_seq_prefix_attach(*out, tokens, n_tokens);
    rc = rc > 0 ? rc : 0; /* out of memory for the lookup leaves *out empty: a cold start */
    wk_seq_snapshot_at(*out, n_tokens);
    return rc;
}

int wk_seq_snapshot_at(wk_seq *s, int n_tokens) {
    const wk_engine *e = s->e;
    const int bt = e->kv.layout.block_tokens;
    const int p = n_tokens > 0 && n_tokens <= e->fwd.max_ctx ? n_tokens / bt * bt : 0;
    if (!e->snaps.n || !s->hashes || p <= s->len) return 0;
    for (int i = 0; i < s->n_snap_pts; i++)
        if (s->snap_pts[i] == p) return p;
    if (s->n_snap_pts == WK_SNAP_POINTS) return 0;
    s->snap_pts[s->n_snap_pts++] = p;
    return p;
}

int wk_seq_snapshot_next(const wk_seq *s) {
    int next = 0;
    for (int i = 0; i < s->n_snap_pts; i++)
        if (s->snap_pts[i] > s->len && (!next || s->snap_pts[i] < next)) next = s->snap_pts[i];
    return next;
}

void wk_eng_seq_snapshot(wk_seq *s) {
    wk_engine *e = s->e;
    bool at = false;
    int n = 0;
    for (int i = 0; i < s->n_snap_pts; i++) {
        if (s->snap_pts[i] == s->len) at = true;
        else if (s->snap_pts[i] > s->len) s->snap_pts[n++] = s->snap_pts[i];
    }
    s->n_snap_pts = n;
    const int k = s->len / e->kv.layout.block_tokens;
    /* The window slot holds the rows a hit at len reads only now, at the end of the step that
     * reached it: the next step's ring writes overwrite them. */
    if (!at || k == 0 || s->n_hashed < k || s->kvs[0]->window_slot == UINT32_MAX || snap_for(s, (uint32_t)k) >= 0)
        return;
    char err[WK_ERRMSG_LEN];
    const uint64_t win = wk_kv_pool_window_offset(e->kv.pool, s->kvs[0]->window_slot);
    (void)wk_kv_snaps_save(&e->vk, &e->snaps, &e->kv.pool_buf, win, s->hashes[k - 1], (uint32_t)s->len, err,
                           sizeof err);
}

/* Whether the block a snapshot belongs to (group 0's, ending at its point) is still cached or in use. */
static bool snap_live(const wk_engine *e, int slot) {
    const wk_kv_pool *p0 = wk_kv_cache_group_swa(&e->kv, 0) ? e->kv.swa_pool : e->kv.pool;
    return wk_kv_pool_cache_lookup(p0, wk_kv_prefix_key(e->snaps.key[slot], 0)) != WK_KV_NO_BLOCK;
}

void wk_eng_snaps_purge(wk_engine *e) {
    for (uint32_t i = 0; i < e->snaps.n; i++)
        if (e->snaps.tokens[i] && !snap_live(e, (int)i)) wk_kv_snaps_drop(&e->snaps, (int)i);
}

void wk_engine_prefix_cache_flush(wk_engine *e) {
    while (wk_eng_evict_parked(e)) {
    }
    if (e->kv.pool) wk_kv_pool_cache_flush(e->kv.pool);
    if (e->kv.swa_pool) wk_kv_pool_cache_flush(e->kv.swa_pool);
    for (uint32_t i = 0; i < e->snaps.n; i++) wk_kv_snaps_drop(&e->snaps, (int)i);
}

void wk_engine_kv_usage(const wk_engine *e, int pool, wk_kv_usage *u) {
    memset(u, 0, sizeof *u);
    const wk_kv_pool *kp = pool == 0 ? e->kv.pool : pool == 1 ? e->kv.swa_pool : NULL;
    if (!kp) return;
    wk_kv_pool_stats st;
    wk_kv_pool_get_stats(kp, &st);
    u->used_blocks = st.used_blocks;
    u->cached_blocks = st.cached_blocks;
    u->free_blocks = st.free_blocks;
    u->used_bytes = st.used_bytes;
    u->cached_bytes = st.cached_bytes;
    u->used_windows = st.used_windows;
    /* Parked sequences' blocks and window slots are the cache's, evictable like cached blocks:
     * a block whose every reference is a parked sequence's (a snapshot hit may share one with a
     * running sequence, which keeps it in use, or with another parked one). */
    const uint32_t nb = wk_kv_pool_n_blocks(kp);
    uint32_t *refs = e->parked_head ? calloc(nb, sizeof *refs) : NULL;
    for (const wk_seq *s = e->parked_head; s && refs; s = s->park_next) {
        for (int g = 0; g < s->n_kvs; g++) {
            const wk_kv_seq *k = s->kvs[g];
            if (k->pool != kp) continue;
            for (uint32_t i = k->first_live; i < k->n_blocks; i++)
                if (k->table[i] != WK_KV_NO_BLOCK) refs[k->table[i]]++;
            if (k->window_slot != UINT32_MAX) {
                u->used_windows--, u->cached_windows++;
                u->used_bytes -= e->kv.layout.window_bytes;
                u->cached_bytes += e->kv.layout.window_bytes;
            }
        }
        u->parked_seqs += pool == 0;
    }
    const uint64_t bpb = wk_kv_pool_bytes_per_block(kp);
    for (uint32_t b = 0; refs && b < nb; b++)
        if (refs[b] && refs[b] == wk_kv_pool_refcount(kp, b)) {
            u->used_blocks--, u->cached_blocks++;
            u->used_bytes -= bpb;
            u->cached_bytes += bpb;
        }
    free(refs); /* out of memory: the pool's own counts, parked sequences as used */
    /* Snapshots live outside the pool but are the cache's too (evicted with their blocks). */
    if (pool == 0) {
        for (uint32_t i = 0; i < e->snaps.n; i++)
            if (e->snaps.tokens[i] && snap_live(e, (int)i)) u->snapshots++;
        u->snapshot_bytes = u->snapshots * e->snaps.slot_bytes;
        u->cached_bytes += u->snapshot_bytes;
    }
}
