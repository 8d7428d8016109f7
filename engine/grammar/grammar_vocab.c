/* Grammar-constrained sampling: the vocabulary's texts decoded once, and a matcher that follows one
 * generation through its grammar, masks the logits of every token the grammar does not allow
 * next, and moves past the sampled token. The mask walks all candidate tokens together, one code
 * point at a time, partitioning them by the character class at the top of each group of stacks
 * that want the same next character, so the work follows the grammar's branching and the
 * vocabulary's total length, not tokens x stacks x steps; every step's work is counted against
 * WK_GRAMMAR_MAX_STEP_WORK. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

#define CP_END UINT32_MAX /* ends each token's code points (U+0000 is a character a grammar may want) */

enum { TOK_TEXT = 0, TOK_EMPTY = 1, TOK_EOG = 2, TOK_RAW = 3 /* not UTF-8 on its own: only after a cut sequence */ };

struct wk_grammar_vocab {
    int n;
    uint32_t max_len; /* the longest token's bytes: bounds the mask walk's depth */
    uint8_t *kind;
    uint32_t *cp, *cp_off; /* TOK_TEXT: the code points from cp + cp_off[t], ended by CP_END */
    utf8_pending *tail;    /* TOK_TEXT: the sequence its text leaves cut at its end */
    char *raw;             /* every token's bytes, for decoding after a cut sequence */
    uint32_t *raw_off, *raw_len;
    int32_t *by_first; /* the TOK_TEXT tokens by their first code point (none: last), n_text of them */
    int n_text;
};

/* A token in the mask walk: at depth d its next code point is cps[at + d] (cps: the vocabulary's
 * decoded texts, or this step's decoding after a cut sequence), so stepping costs nothing. */
typedef struct cand {
    int32_t tok;
    uint32_t at;
} cand;

/* Masks made before, by the state they were made in: a grammar comes back to the same stacks
 * often (every character of an unbounded JSON string, every key of an object), and a hit costs a
 * pass over a bitmap instead of the walk. */
#define MASK_CACHE 4
typedef struct mask_entry {
    stack_set state; /* the stacks it was made for (no cut UTF-8 sequence pending) */
    uint32_t hash;
    uint64_t *allowed; /* a bit per token of the vocabulary: allowed text tokens */
    uint64_t last_use; /* 0: empty */
} mask_entry;

struct wk_matcher {
    const wk_grammar *g;
    const wk_grammar_vocab *v;
    stack_set cur, a, b;   /* where the text stands; scratch for one token's advance */
    utf8_pending pending;  /* a UTF-8 sequence the text so far ends inside */
    stack_set *levels;     /* the mask walk's stack set at each depth */
    int n_levels;
    cand *cands;
    uint8_t *ok;
    uint32_t *dec;           /* the vocabulary decoded after the pending sequence (rare) */
    utf8_pending *dec_tail;
    size_t cap_dec;
    const uint32_t *walk_cps; /* the mask walk's texts and end states: the vocabulary's, or dec's */
    const utf8_pending *walk_tails;
    bool walk_sorted;         /* the walk's candidates come sorted by their first code point */
    cand *picked;             /* the depth-0 group's candidates, copied out of the sorted ones */
    struct top_key **keys;    /* per depth, the walk's stacks keyed by their top class */
    size_t *cap_keys;
    mask_entry cache[MASK_CACHE];
    uint64_t clock;
    size_t budget; /* what this step may still spend (WK_GRAMMAR_MAX_STEP_WORK after each token) */
};

/* ---- vocabulary ----------------------------------------------------------------------------- */

void wk_grammar_vocab_destroy(wk_grammar_vocab *v) {
    if (!v) return;
    free(v->kind), free(v->cp), free(v->cp_off), free(v->tail), free(v->raw), free(v->raw_off), free(v->raw_len);
    free(v->by_first);
    free(v);
}

static int by_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

wk_grammar_vocab *grammar_vocab_from_pieces(const char *const *pieces, const size_t *lens, const bool *eog, int n) {
    wk_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    size_t total = 0;
    for (int t = 0; t < n; t++) total += lens[t];
    v->n = n;
    v->kind = calloc((size_t)n, 1);
    v->cp = malloc((total + (size_t)n) * sizeof *v->cp);
    v->cp_off = malloc((size_t)n * sizeof *v->cp_off);
    v->tail = calloc((size_t)n, sizeof *v->tail);
    v->raw = malloc(total + 1);
    v->raw_off = malloc((size_t)n * sizeof *v->raw_off);
    v->raw_len = malloc((size_t)n * sizeof *v->raw_len);
    if (!v->kind || !v->cp || !v->cp_off || !v->tail || !v->raw || !v->raw_off || !v->raw_len) {
        wk_grammar_vocab_destroy(v);
        return NULL;
    }
    size_t at = 0, raw_at = 0;
    for (int t = 0; t < n; t++) {
        memcpy(v->raw + raw_at, pieces[t], lens[t]);
        v->raw_off[t] = (uint32_t)raw_at;
        v->raw_len[t] = (uint32_t)lens[t];
        if (lens[t] > v->max_len) v->max_len = (uint32_t)lens[t];
        raw_at += lens[t];
        v->cp_off[t] = (uint32_t)at;
        if (eog && eog[t]) v->kind[t] = TOK_EOG;
        else if (lens[t] == 0) v->kind[t] = TOK_EMPTY;
        else {
            int k = utf8_decode_pending((const uint8_t *)pieces[t], lens[t], (utf8_pending){0, 0, 0}, v->cp + at, &v->tail[t]);
            if (k < 0) {
                v->kind[t] = TOK_RAW;
                k = 0;
            }
            at += (size_t)k;
        }
        v->cp[at++] = CP_END;
    }
    /* the mask's first level finds a class's tokens by binary search in this order */
    uint64_t *keyed = malloc((size_t)n * sizeof *keyed);
    if (!keyed || !(v->by_first = malloc((size_t)n * sizeof *v->by_first))) {
        free(keyed);
        wk_grammar_vocab_destroy(v);
        return NULL;
    }
    for (int t = 0; t < n; t++)
        if (v->kind[t] == TOK_TEXT) keyed[v->n_text++] = (uint64_t)v->cp[v->cp_off[t]] << 32 | (uint32_t)t;
    qsort(keyed, (size_t)v->n_text, sizeof *keyed, by_u64);
    for (int i = 0; i < v->n_text; i++) v->by_first[i] = (int32_t)(uint32_t)keyed[i];
    free(keyed);
    return v;
}

wk_grammar_vocab *wk_grammar_vocab_create(const wk_engine *e) {
    int n = wk_engine_info(e)->n_vocab;
    char **pieces = calloc((size_t)n, sizeof *pieces);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    bool *eog = calloc((size_t)n, sizeof *eog);
    wk_grammar_vocab *v = NULL;
    bool ok = pieces && lens && eog;
    char buf[256];
    for (int t = 0; ok && t < n; t++) {
        eog[t] = wk_token_is_eog(e, t);
        int k = wk_token_to_piece(e, t, false, buf, sizeof buf);
        if (k < 0) k = 0; /* no text to match */
        ok = (pieces[t] = malloc((size_t)k + 1)) != NULL;
        if (ok && k > (int)sizeof buf) ok = wk_token_to_piece(e, t, false, pieces[t], k) == k;
        else if (ok) memcpy(pieces[t], buf, (size_t)k);
        lens[t] = (size_t)k;
    }
    if (ok) v = grammar_vocab_from_pieces((const char *const *)pieces, lens, eog, n);
    for (int t = 0; pieces && t < n; t++) free(pieces[t]);
    free(pieces), free(lens), free(eog);
    return v;
}

/* ---- matcher ------------------------------------------------------------------------------- */

void wk_matcher_destroy(wk_matcher *m) {
    if (!m) return;
    stack_set_free(&m->cur), stack_set_free(&m->a), stack_set_free(&m->b);
    for (int i = 0; m->levels && i < m->n_levels; i++) stack_set_free(&m->levels[i]);
    free(m->levels), free(m->cands), free(m->ok), free(m->dec), free(m->dec_tail), free(m->picked);
    for (int i = 0; m->keys && i < m->n_levels; i++) free(m->keys[i]);
    free(m->keys), free(m->cap_keys);
    for (int i = 0; i < MASK_CACHE; i++) stack_set_free(&m->cache[i].state), free(m->cache[i].allowed);
    free(m);
}

wk_matcher *wk_matcher_create(const wk_grammar *g, const wk_grammar_vocab *v) {
    wk_matcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g = g;
    m->v = v;
    m->cands = malloc((size_t)v->n * sizeof *m->cands);
    m->ok = malloc((size_t)v->n);
    /* one stack set per code point of the longest token (a token has no more code points than
     * bytes), made now: the walk holds pointers into them while it recurses */
    m->n_levels = (int)v->max_len + 2;
    m->levels = calloc((size_t)m->n_levels, sizeof *m->levels);
    m->keys = calloc((size_t)m->n_levels, sizeof *m->keys);
    m->cap_keys = calloc((size_t)m->n_levels, sizeof *m->cap_keys);
    m->picked = malloc((size_t)v->n * sizeof *m->picked);
    m->budget = WK_GRAMMAR_MAX_STEP_WORK;
    if (!m->cands || !m->ok || !m->levels || !m->keys || !m->cap_keys || !m->picked || stack_set_start(g, &m->cur, &m->budget) != WK_OK) {
        wk_matcher_destroy(m);
        return NULL;
    }
    m->budget = WK_GRAMMAR_MAX_STEP_WORK;
    return m;
}

bool wk_matcher_complete(const wk_matcher *m) { return m->pending.n_more == 0 && stack_set_has_empty(&m->cur); }

bool wk_matcher_finished(const wk_matcher *m) {
    if (m->pending.n_more) return false;
    for (size_t i = 0; i < m->cur.n; i++)
        if (m->cur.st[i].len) return false;
    return true;
}

/* A token's code points and end state after the text's pending sequence; false when its bytes do
 * not continue it as UTF-8, or it has no text. out: room for the token's byte count + 1. */
static bool decode_after_pending(const wk_matcher *m, int32_t t, uint32_t *out, utf8_pending *tail) {
    const wk_grammar_vocab *v = m->v;
    if (v->kind[t] == TOK_EMPTY || v->kind[t] == TOK_EOG || v->raw_len[t] == 0) return false;
    int k = utf8_decode_pending((const uint8_t *)v->raw + v->raw_off[t], v->raw_len[t], m->pending, out, tail);
    if (k < 0) return false;
    out[k] = CP_END;
    return true;
}

/* Whether the stacks can take a token that ends with its code points used up and `tail` pending. */
static bool ends_ok(const wk_grammar *g, const stack_set *s, utf8_pending tail) {
    if (!tail.n_more) return true;
    for (size_t i = 0; i < s->n; i++)
        if (s->st[i].len && gram_chars_match_partial(g, &g->elems[s->pos[s->st[i].off + s->st[i].len - 1]], &tail))
            return true;
    return false;
}

/* Advances the current stacks over cps, leaving them as they are; the result in m->a. */
static wk_status run_token(wk_matcher *m, const uint32_t *cps, utf8_pending tail, bool *allowed) {
    wk_status st = WK_OK;
    if (*cps == CP_END) /* only a cut UTF-8 sequence's first bytes: the stacks stay */
        st = gram_spend(&m->budget, m->cur.n_pos + m->cur.n) ? stack_set_copy(&m->a, &m->cur) : WK_ERR_UNSUPPORTED;
    for (const uint32_t *c = cps; st == WK_OK && *c != CP_END; c++) {
        st = stack_set_advance(m->g, c == cps ? &m->cur : &m->a, *c, &m->b, &m->budget);
        stack_set t = m->a;
        m->a = m->b;
        m->b = t;
        if (!m->a.n) break;
    }
    *allowed = st == WK_OK && m->a.n > 0 && ends_ok(m->g, &m->a, tail);
    return st;
}

static wk_status check_token(wk_matcher *m, int32_t t, bool commit, bool *allowed) {
    const wk_grammar_vocab *v = m->v;
    *allowed = false;
    if (t < 0 || t >= v->n) return WK_OK;
    if (v->kind[t] == TOK_EOG) {
        *allowed = wk_matcher_complete(m);
        return WK_OK;
    }
    const uint32_t *cps;
    utf8_pending tail;
    uint32_t *buf = NULL;
    if (!m->pending.n_more) {
        if (v->kind[t] != TOK_TEXT) return WK_OK;
        cps = v->cp + v->cp_off[t];
        tail = v->tail[t];
    } else {
        if (!(buf = malloc(((size_t)v->raw_len[t] + 1) * sizeof *buf))) return WK_ERR_NOMEM;
        if (!decode_after_pending(m, t, buf, &tail)) {
            free(buf);
            return WK_OK;
        }
        cps = buf;
    }
    wk_status st = run_token(m, cps, tail, allowed);
    free(buf);
    if (st == WK_OK && *allowed && commit) {
        stack_set t2 = m->cur;
        m->cur = m->a;
        m->a = t2;
        m->pending = tail;
        m->budget = WK_GRAMMAR_MAX_STEP_WORK; /* the next token's step */
    }
    return st;
}

bool wk_matcher_allows(wk_matcher *m, int32_t token) {
    bool allowed;
    return check_token(m, token, false, &allowed) == WK_OK && allowed;
}

wk_status wk_matcher_accept(wk_matcher *m, int32_t token) {
    bool allowed;
    m->budget = WK_GRAMMAR_MAX_STEP_WORK; /* its own allotment: a step's mask may have spent the last */
    wk_status st = check_token(m, token, true, &allowed);
    if (st != WK_OK) return st;
    return allowed ? WK_OK : WK_ERR_INVALID;
}

/* The stacks of a set are grouped by their top's character class, compared by its ranges wherever
 * in the grammar it comes from: a group partitions the candidates once and its stacks' continuations
 * are walked together, so a choice list's 3000 words cost what their 50 first letters do. */
typedef struct top_key {
    uint64_t hash;  /* of the class's ranges */
    uint32_t stack; /* its index in the set; GROUPED set once it is in a group */
} top_key;
#define GROUPED 0x80000000u

static uint64_t class_hash(const wk_grammar *g, const gram_elem *e) {
    uint64_t h = 1469598103934665603ull ^ e->n;
    const gram_range *r = g->ranges + e->a;
    for (uint32_t i = 0; i < e->n; i++) h = ((h ^ r[i].lo) * 1099511628211ull ^ r[i].hi) * 1099511628211ull;
    return h;
}

static bool same_class(const wk_grammar *g, const gram_elem *a, const gram_elem *b) {
    return a->n == b->n && (a->a == b->a || memcmp(g->ranges + a->a, g->ranges + b->a, a->n * sizeof *g->ranges) == 0);
}

static int by_hash(const void *x, const void *y) {
    const top_key *a = x, *b = y;
    return a->hash < b->hash ? -1 : a->hash > b->hash ? 1 : a->stack < b->stack ? -1 : a->stack > b->stack;
}

static const gram_elem *top_of(const wk_grammar *g, const stack_set *set, uint32_t s) {
    return &g->elems[set->pos[set->st[s].off + set->st[s].len - 1]];
}

/* First of c[lo..hi) (sorted by the code point at this depth) whose code point is >= cp. */
static size_t lower_bound(const cand *c, size_t lo, size_t hi, const uint32_t *cps, uint32_t cp) {
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cps[c[mid].at] < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The candidates of c[0..n) that top's class takes, not yet allowed, at the front of out (c itself
 * when out == c: partitioned in place) or copied into out (c sorted by code point: each of the
 * class's ranges is one span, found by binary search); their count. A candidate whose text ends
 * here is allowed now when no cut UTF-8 sequence is left or the class could complete it. */
static size_t take_class(wk_matcher *m, const gram_elem *top, cand *c, size_t n, const uint32_t *cps, cand *out, bool *ok_status) {
    const wk_grammar *g = m->g;
    const utf8_pending *tails = m->walk_tails;
    uint8_t *ok = m->ok;
    size_t k = 0;
    *ok_status = true;
    if (out == c) {
        if (!(*ok_status = gram_spend(&m->budget, n))) return 0;
        for (size_t i = 0; i < n; i++) {
            cand x = c[i];
            if (ok[x.tok]) continue;
            uint32_t cp = cps[x.at];
            if (cp == CP_END) {
                if (!tails[x.tok].n_more || gram_chars_match_partial(g, top, &tails[x.tok])) ok[x.tok] = 1;
            } else if (gram_chars_match(g, top, cp)) {
                c[i] = c[k];
                c[k++] = x;
            }
        }
        return k;
    }
    size_t end = lower_bound(c, 0, n, cps, CP_END); /* texts that end here sort last */
    if (!(*ok_status = gram_spend(&m->budget, (size_t)top->n * 64 + (n - end)))) return 0;
    for (size_t i = end; i < n; i++)
        if (!tails[c[i].tok].n_more || gram_chars_match_partial(g, top, &tails[c[i].tok])) ok[c[i].tok] = 1;
    const gram_range *r = g->ranges + top->a;
    for (uint32_t j = 0; j < top->n; j++) {
        size_t lo = lower_bound(c, 0, end, cps, r[j].lo);
        size_t hi = lower_bound(c, lo, end, cps, r[j].hi + 1); /* hi <= U+10FFFF */
        if (!(*ok_status = gram_spend(&m->budget, hi - lo))) return 0;
        for (size_t i = lo; i < hi; i++)
            if (!ok[c[i].tok]) out[k++] = c[i];
    }
    return k;
}

/* Marks in m->ok every candidate of c[0..n) (each with `depth` code points matched) that some
 * stack of `set` takes to its end. For each group of stacks with the same top class, the
 * candidates it takes are followed into the stacks that class leads to, which are the same
 * whichever character matched. At depth 0 the candidates come sorted by their first code point
 * (the vocabulary's order) and stay so: a group's candidates are copied out by span into m->picked;
 * deeper, they are moved to the front of c. */
static wk_status walk(wk_matcher *m, const stack_set *set, cand *c, size_t n, int depth) {
    const wk_grammar *g = m->g;
    const uint32_t *cps = m->walk_cps + depth;
    const utf8_pending *tails = m->walk_tails;
    uint8_t *ok = m->ok;
    if (depth + 1 >= m->n_levels) return WK_ERR_UNSUPPORTED; /* cannot happen: a level per code point */
    if (stack_set_has_empty(set)) /* a whole sentence here: a token that ends here fits */
        for (size_t i = 0; i < n; i++)
            if (cps[c[i].at] == CP_END && !tails[c[i].tok].n_more) ok[c[i].tok] = 1;
    if (!gram_grow((void **)&m->keys[depth], &m->cap_keys[depth], set->n + 1, sizeof **m->keys)) return WK_ERR_NOMEM;
    top_key *keys = m->keys[depth];
    size_t nk = 0;
    for (size_t s = 0; s < set->n; s++)
        if (set->st[s].len) keys[nk++] = (top_key){class_hash(g, top_of(g, set, (uint32_t)s)), (uint32_t)s};
    if (!gram_spend(&m->budget, nk * 16)) return WK_ERR_UNSUPPORTED;
    qsort(keys, nk, sizeof *keys, by_hash);
    const bool sorted = depth == 0 && m->walk_sorted;
    for (size_t i = 0; i < nk; i++) {
        if (keys[i].stack & GROUPED) continue;
        const gram_elem *top = top_of(g, set, keys[i].stack);
        bool fine;
        cand *sub = sorted ? m->picked : c;
        size_t k = take_class(m, top, c, n, cps, sub, &fine);
        if (!fine) return WK_ERR_UNSUPPORTED;
        stack_set *next = &m->levels[depth + 1];
        stack_set_clear(next);
        /* the group: this stack and every later one of equal hash with the same class */
        for (size_t j = i; j < nk && keys[j].hash == keys[i].hash; j++) {
            if ((keys[j].stack & GROUPED) || !same_class(g, top, top_of(g, set, keys[j].stack))) continue;
            uint32_t s = keys[j].stack;
            keys[j].stack |= GROUPED;
            if (!k) continue;
            const uint32_t *p = set->pos + set->st[s].off;
            uint32_t len = set->st[s].len, after = p[len - 1] + 1;
            wk_status st = stack_set_expand(g, next, p, len - 1, g->elems[after].kind == GE_END ? UINT32_MAX : after, &m->budget);
            if (st != WK_OK) return st;
        }
        if (k && next->n) {
            wk_status st = walk(m, next, sub, k, depth + 1);
            if (st != WK_OK) return st;
        }
    }
    return WK_OK;
}

/* m->ok for the current state by the walk: over every text token when the result is to be cached
 * (all_tokens), else only those whose logit is finite. */
static wk_status walk_mask(wk_matcher *m, const float *logits, bool all_tokens) {
    const wk_grammar_vocab *v = m->v;
    size_t n = 0;
    m->walk_cps = v->cp;
    m->walk_tails = v->tail;
    if (m->pending.n_more) { /* decode every token after the cut sequence; rare (byte tokens) */
        size_t need = 0;
        for (int t = 0; t < v->n; t++) need += v->raw_len[t] + 1;
        if (need > m->cap_dec) {
            uint32_t *d = realloc(m->dec, need * sizeof *d);
            if (!d) return WK_ERR_NOMEM;
            m->dec = d;
            m->cap_dec = need;
        }
        if (!m->dec_tail && !(m->dec_tail = malloc((size_t)v->n * sizeof *m->dec_tail))) return WK_ERR_NOMEM;
        m->walk_cps = m->dec;
        m->walk_tails = m->dec_tail;
    }
    memset(m->ok, 0, (size_t)v->n);
    m->walk_sorted = !m->pending.n_more;
    if (m->walk_sorted) { /* the text tokens, in the vocabulary's first-code-point order */
        for (int i = 0; i < v->n_text; i++) {
            int32_t t = v->by_first[i];
            if (all_tokens || logits[t] != -INFINITY) m->cands[n++] = (cand){t, v->cp_off[t]};
        }
        return walk(m, &m->cur, m->cands, n, 0);
    }
    uint32_t dec_at = 0;
    for (int t = 0; t < v->n; t++) {
        if ((!all_tokens && logits[t] == -INFINITY) || v->kind[t] == TOK_EOG || v->kind[t] == TOK_EMPTY) continue;
        if (!decode_after_pending(m, t, m->dec + dec_at, &m->dec_tail[t])) continue;
        m->cands[n++] = (cand){t, dec_at};
        while (m->dec[dec_at] != CP_END) dec_at++;
        dec_at++;
    }
    return walk(m, &m->cur, m->cands, n, 0);
}

/* The cached mask of the current state, made now if there is none: its bitmap, or NULL with *st
 * set when the walk failed. States inside a cut UTF-8 sequence are not cached (rare). */
static const uint64_t *cached_mask(wk_matcher *m, const float *logits, wk_status *st) {
    const int nv = m->v->n;
    uint32_t h = stack_set_hash(&m->cur);
    mask_entry *victim = &m->cache[0];
    for (int i = 0; i < MASK_CACHE; i++) {
        mask_entry *e = &m->cache[i];
        if (e->last_use && e->hash == h && stack_set_equal(&e->state, &m->cur)) {
            e->last_use = ++m->clock;
            return e->allowed;
        }
        if (e->last_use < victim->last_use) victim = e;
    }
    if ((*st = walk_mask(m, logits, true)) != WK_OK) return NULL;
    size_t words = ((size_t)nv + 63) / 64;
    if (!victim->allowed && !(victim->allowed = malloc(words * sizeof *victim->allowed))) return *st = WK_ERR_NOMEM, NULL;
    victim->last_use = 0; /* until it is whole */
    if ((*st = stack_set_copy(&victim->state, &m->cur)) != WK_OK) return NULL;
    memset(victim->allowed, 0, words * sizeof *victim->allowed);
    for (int t = 0; t < nv; t++) victim->allowed[t / 64] |= (uint64_t)m->ok[t] << (t % 64);
    victim->hash = h;
    victim->last_use = ++m->clock;
    return victim->allowed;
}

int wk_matcher_mask(wk_matcher *m, float *logits) {
    const wk_grammar_vocab *v = m->v;
    const bool complete = wk_matcher_complete(m);
    wk_status st = WK_OK;
    const uint64_t *bits = m->pending.n_more ? NULL : cached_mask(m, logits, &st);
    if (!bits && st == WK_OK) st = walk_mask(m, logits, false);
    if (st != WK_OK) return st;
    int allowed = 0;
    for (int t = 0; t < v->n; t++) {
        if (logits[t] == -INFINITY) continue;
        bool keep = v->kind[t] == TOK_EOG ? complete : bits ? (bool)(bits[t / 64] >> (t % 64) & 1) : m->ok[t];
        if (keep) allowed++;
        else logits[t] = -INFINITY;
    }
    return allowed;
}
