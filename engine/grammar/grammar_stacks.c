/* The grammar's stack machine: sets of parse stacks expanded until every top is a character
 * class, advanced one code point at a time, de-duplicated and capped so an ambiguous grammar
 * cannot take unbounded memory; UTF-8 decoding that carries a sequence cut between tokens; and
 * the whole-text check (wk_grammar_accepts). */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

/* ---- character classes ---------------------------------------------------------------------- */

bool gram_chars_match(const wk_grammar *g, const gram_elem *e, uint32_t cp) {
    if (cp < 128) return e->ascii[cp / 64] >> (cp % 64) & 1;
    const gram_range *r = g->ranges + e->a;
    uint32_t lo = 0, hi = e->n; /* first range with r.hi >= cp */
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (r[mid].hi < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < e->n && r[lo].lo <= cp;
}

static const uint32_t shortest_of_len[5] = {0, 0, 0x80, 0x800, 0x10000}; /* below this: an overlong form */

bool gram_chars_match_partial(const wk_grammar *g, const gram_elem *e, const utf8_pending *p) {
    uint32_t lo = p->value << (6 * p->n_more), hi = lo | ((1u << (6 * p->n_more)) - 1);
    if (lo < shortest_of_len[p->total]) lo = shortest_of_len[p->total];
    if (hi > GRAMMAR_MAX_CODE_POINT) hi = GRAMMAR_MAX_CODE_POINT;
    if (lo > hi) return false;
    const gram_range *r = g->ranges + e->a;
    for (uint32_t i = 0; i < e->n; i++)
        if (r[i].lo <= hi && r[i].hi >= lo) return true;
    return false;
}

/* ---- UTF-8 ------------------------------------------------------------------------------------ */

int utf8_decode_pending(const uint8_t *b, size_t len, utf8_pending start, uint32_t *cps, utf8_pending *end) {
    uint32_t v = start.value;
    int more = start.n_more, total = start.total, n = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = b[i];
        if (more) {
            if ((c & 0xC0) != 0x80) return -1;
            v = v << 6 | (c & 0x3F);
            if (--more) continue;
            if (v < shortest_of_len[total] || v > GRAMMAR_MAX_CODE_POINT || (v >= 0xD800 && v <= 0xDFFF)) return -1;
            cps[n++] = v;
            continue;
        }
        if (c < 0x80) {
            cps[n++] = c;
            continue;
        }
        if (c < 0xC2 || c > 0xF4) return -1; /* a stray continuation, an overlong 2-byte lead, or past U+10FFFF */
        more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
        total = more + 1;
        v = c & (0x3Fu >> more);
    }
    *end = more ? (utf8_pending){v, more, total} : (utf8_pending){0, 0, 0};
    return n;
}

/* ---- stack sets ------------------------------------------------------------------------------- */

void stack_set_free(stack_set *s) {
    free(s->pos), free(s->st), free(s->seen), free(s->work), free(s->tmp);
    *s = (stack_set){0};
}

void stack_set_clear(stack_set *s) {
    s->n_pos = 0;
    s->n = 0;
    if (s->seen) memset(s->seen, 0, s->seen_cap * sizeof *s->seen);
}

bool gram_grow(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * size);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* Stack i's positions; NULL for an empty one (pos itself is NULL while every stack is empty). */
static const uint32_t *stack_at(const stack_set *s, size_t i) { return s->st[i].len ? s->pos + s->st[i].off : NULL; }

static uint32_t hash_stack(const uint32_t *p, uint32_t n) {
    uint32_t h = 2166136261u ^ n;
    for (uint32_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

static wk_status rehash(stack_set *s, size_t cap) {
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t) return WK_ERR_NOMEM;
    for (size_t i = 0; i < s->n; i++) {
        size_t h = hash_stack(stack_at(s, i), s->st[i].len) & (cap - 1);
        while (t[h]) h = (h + 1) & (cap - 1);
        t[h] = (uint32_t)i + 1;
    }
    free(s->seen);
    s->seen = t;
    s->seen_cap = cap;
    return WK_OK;
}

/* The slot of the stack p[0..n) in s's table: its own, or the empty one where it would go. */
static size_t find_stack(const stack_set *s, const uint32_t *p, uint32_t n) {
    size_t h = hash_stack(p, n) & (s->seen_cap - 1);
    for (; s->seen[h]; h = (h + 1) & (s->seen_cap - 1)) {
        const struct stack_ref *j = &s->st[s->seen[h] - 1];
        if (j->len == n && (n == 0 || memcmp(s->pos + j->off, p, n * sizeof *p) == 0)) break;
    }
    return h;
}

/* Adds one stack unless an equal one is there. */
static wk_status add_stack(stack_set *s, const uint32_t *p, uint32_t n) {
    if (s->seen_cap < 2 * (s->n + 1) + 16) {
        wk_status st = rehash(s, s->seen_cap ? s->seen_cap * 4 : 64);
        if (st != WK_OK) return st;
    }
    size_t h = find_stack(s, p, n);
    if (s->seen[h]) return WK_OK;
    if (s->n >= WK_GRAMMAR_MAX_STACKS || s->n_pos + n > WK_GRAMMAR_MAX_STACK_POSITIONS) return WK_ERR_UNSUPPORTED;
    if (!gram_grow((void **)&s->pos, &s->cap_pos, s->n_pos + n, sizeof *s->pos) || !gram_grow((void **)&s->st, &s->cap, s->n + 1, sizeof *s->st))
        return WK_ERR_NOMEM;
    if (n) memcpy(s->pos + s->n_pos, p, n * sizeof *p); /* an empty stack may have p NULL */
    s->st[s->n] = (struct stack_ref){(uint32_t)s->n_pos, n};
    s->n_pos += n;
    s->seen[h] = (uint32_t)++s->n;
    return WK_OK;
}

/* Expansion with a work list in dst->work, each item stored as [positions..., length] so the last
 * one pops from the end. Without left recursion (refused when parsed) every path ends at a
 * character class or an empty stack; the budget bounds a grammar that multiplies stacks at each
 * step, and EXPAND_MAX_WORK the list itself (alternatives x the stack below them). */
#define EXPAND_MAX_WORK ((size_t)1 << 20)
wk_status stack_set_expand(const wk_grammar *g, stack_set *dst, const uint32_t *base, uint32_t len, uint32_t top, size_t *budget) {
    uint32_t n0 = len + (top != UINT32_MAX);
    if (n0 > WK_GRAMMAR_MAX_STACK_POSITIONS || !gram_spend(budget, (size_t)n0 + 1)) return WK_ERR_UNSUPPORTED;
    if (!gram_grow((void **)&dst->work, &dst->cap_work, (size_t)n0 + 1, sizeof *dst->work)) return WK_ERR_NOMEM;
    if (len) memcpy(dst->work, base, len * sizeof *base);
    if (top != UINT32_MAX) dst->work[len] = top;
    dst->work[n0] = n0;
    size_t wn = (size_t)n0 + 1;
    while (wn) {
        uint32_t n = dst->work[wn - 1];
        wn -= (size_t)n + 1;
        const uint32_t *item = dst->work + wn;
        if (n == 0 || g->elems[item[n - 1]].kind == GE_CHARS) {
            wk_status st = gram_spend(budget, (size_t)n + 1) ? add_stack(dst, item, n) : WK_ERR_UNSUPPORTED;
            if (st != WK_OK) return st;
            continue;
        }
        /* The top is a rule reference: the rest of its alternative stays (unless it is done), and
         * each of the rule's alternatives goes on top of that, one new item each. */
        uint32_t at = item[n - 1], rule = g->elems[at].a;
        uint32_t keep = n - 1;
        if (!gram_grow((void **)&dst->tmp, &dst->cap_tmp, (size_t)n, sizeof *dst->tmp)) return WK_ERR_NOMEM;
        memcpy(dst->tmp, item, keep * sizeof *item);
        if (g->elems[at + 1].kind != GE_END) dst->tmp[keep++] = at + 1;
        uint32_t alts = g->rule_n_alts[rule];
        size_t more = (size_t)alts * (keep + 2);
        if (wn + more > EXPAND_MAX_WORK || !gram_spend(budget, more)) return WK_ERR_UNSUPPORTED;
        if (!gram_grow((void **)&dst->work, &dst->cap_work, wn + more, sizeof *dst->work)) return WK_ERR_NOMEM;
        for (uint32_t a = 0; a < alts; a++) {
            uint32_t start = g->alts[g->rule_first_alt[rule] + a];
            uint32_t *w = dst->work + wn, m = keep;
            memcpy(w, dst->tmp, keep * sizeof *w);
            if (g->elems[start].kind != GE_END) w[m++] = start;
            w[m] = m;
            wn += (size_t)m + 1;
        }
    }
    return WK_OK;
}

wk_status stack_set_start(const wk_grammar *g, stack_set *dst, size_t *budget) {
    stack_set_clear(dst);
    uint32_t rule = g->root;
    for (uint32_t a = 0; a < g->rule_n_alts[rule]; a++) {
        uint32_t start = g->alts[g->rule_first_alt[rule] + a];
        wk_status st = stack_set_expand(g, dst, NULL, 0, g->elems[start].kind == GE_END ? UINT32_MAX : start, budget);
        if (st != WK_OK) return st;
    }
    return WK_OK;
}

wk_status stack_set_advance(const wk_grammar *g, const stack_set *src, uint32_t cp, stack_set *dst, size_t *budget) {
    stack_set_clear(dst);
    if (!gram_spend(budget, src->n)) return WK_ERR_UNSUPPORTED;
    for (size_t i = 0; i < src->n; i++) {
        uint32_t n = src->st[i].len;
        if (n == 0) continue; /* a finished parse takes no more characters (and pos may be NULL) */
        const uint32_t *p = src->pos + src->st[i].off;
        if (!gram_chars_match(g, &g->elems[p[n - 1]], cp)) continue;
        uint32_t next = p[n - 1] + 1;
        wk_status st = stack_set_expand(g, dst, p, n - 1, g->elems[next].kind == GE_END ? UINT32_MAX : next, budget);
        if (st != WK_OK) return st;
    }
    return WK_OK;
}

bool stack_set_has_empty(const stack_set *s) {
    for (size_t i = 0; i < s->n; i++)
        if (s->st[i].len == 0) return true;
    return false;
}

wk_status stack_set_copy(stack_set *dst, const stack_set *src) {
    stack_set_clear(dst);
    for (size_t i = 0; i < src->n; i++) {
        wk_status st = add_stack(dst, stack_at(src, i), src->st[i].len);
        if (st != WK_OK) return st;
    }
    return WK_OK;
}

/* ---- whole texts ------------------------------------------------------------------------------ */

bool wk_grammar_accepts(const wk_grammar *g, const char *text, size_t len) {
    uint32_t *cps = malloc((len + 1) * sizeof *cps);
    utf8_pending end;
    stack_set a = {0}, b = {0};
    bool ok = false;
    int n = cps ? utf8_decode_pending((const uint8_t *)text, len, (utf8_pending){0, 0, 0}, cps, &end) : -1;
    size_t budget = WK_GRAMMAR_MAX_STEP_WORK;
    if (n >= 0 && end.n_more == 0 && stack_set_start(g, &a, &budget) == WK_OK) {
        ok = true;
        for (int i = 0; i < n && ok; i++) {
            budget = WK_GRAMMAR_MAX_STEP_WORK; /* a code point's step, as the matcher's token */
            ok = stack_set_advance(g, &a, cps[i], &b, &budget) == WK_OK && b.n > 0;
            stack_set t = a;
            a = b;
            b = t;
        }
        ok = ok && stack_set_has_empty(&a);
    }
    stack_set_free(&a), stack_set_free(&b);
    free(cps);
    return ok;
}

uint32_t stack_set_hash(const stack_set *s) {
    uint32_t h = (uint32_t)s->n * 2654435761u;
    for (size_t i = 0; i < s->n; i++) h += hash_stack(stack_at(s, i), s->st[i].len); /* any order */
    return h;
}

bool stack_set_equal(const stack_set *a, const stack_set *b) {
    if (a->n != b->n) return false;
    for (size_t i = 0; i < a->n; i++) /* sets without duplicates, of one size: a inside b is enough */
        if (!b->seen || !b->seen[find_stack(b, stack_at(a, i), a->st[i].len)]) return false;
    return true;
}
