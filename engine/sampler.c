/* Token sampler: picks the next token from one logits row (greedy, or top-k -> top-p -> min-p ->
 * temperature -> seeded random draw, the order llama.cpp's default chain uses). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/row_math.h"
#include "wushkv/wushkv.h"

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct wk_sampler {
    wk_sampler_params p;
    int n_vocab;
    uint64_t rng[4]; /* xoshiro256** state */
    cand *c;         /* (n_vocab) candidate scratch, reused every call */
    float *terms;    /* (n_vocab) exp terms of the whole row, when no top-k cut comes first */
    int32_t *idx;    /* (n_vocab) indices of the logits above a cut */
};

/* ---- RNG: splitmix64 expands the 64-bit seed into xoshiro256**'s 256-bit state ---------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

/* ---- candidate ordering ------------------------------------------------------------------- */

/* Total order: higher logit first, then lower id, so ties (and NaN-free equal logits) resolve the
 * same way on every run and every libc. */
static int cand_better(const cand *a, const cand *b) {
    if (a->logit != b->logit) return a->logit > b->logit;
    return a->id < b->id;
}

static int cand_cmp_desc(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (cand_better(a, b)) return -1;
    if (cand_better(b, a)) return 1;
    return 0;
}

/* Min-heap on "better": the root is the worst of the k kept so far. */
static void heap_sift_down(cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_better(&h[w], &h[l])) w = l;
        if (r < n && cand_better(&h[w], &h[r])) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* The k best of all logits, sorted best first, into c[0..k). O(n log k), and for the usual small
 * k almost every logit is rejected by one compare against the heap root. */
static void select_top_k(const float *logits, int n, int k, cand *c) {
    for (int i = 0; i < k; i++) c[i] = (cand){logits[i], i};
    for (int i = k / 2 - 1; i >= 0; i--) heap_sift_down(c, k, i);
    for (int i = k; i < n; i++) {
        cand x = {logits[i], i};
        if (cand_better(&x, &c[0])) {
            c[0] = x;
            heap_sift_down(c, k, 0);
        }
    }
    qsort(c, (size_t)k, sizeof *c, cand_cmp_desc);
}

/* ---- public API ----------------------------------------------------------------------------- */

wk_sampler *wk_sampler_create(const wk_sampler_params *p, int n_vocab) {
    if (!p || n_vocab <= 0) return NULL;
    wk_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->terms = malloc((size_t)n_vocab * sizeof *s->terms);
    s->idx = malloc((size_t)n_vocab * sizeof *s->idx);
    if (!s->c || !s->terms || !s->idx) {
        wk_sampler_destroy(s);
        return NULL;
    }
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    return s;
}

void wk_sampler_destroy(wk_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->terms);
    free(s->idx);
    free(s);
}

/* The highest logit's id, the lowest id on a tie; NaN logits are passed over. */
static int32_t argmax(const float *logits, int n) {
    int at;
    wk_row_max(logits, n, &at);
    return at;
}

/* One draw from the softmax of the whole row at temperature 1/inv_t, no cut. terms[i] = exp((l_i -
 * lmax) * inv_t) from one vector pass; the draw's running sum then goes a block at a time and
 * opens only the block it lands in. */
static int32_t draw_whole_row(wk_sampler *s, const float *logits, float lmax, float inv_t) {
    enum { SPAN = 256 };
    const int n = s->n_vocab;
    const double sum = wk_row_exp_sum(logits, n, lmax, inv_t, s->terms);
    const double u = rng_uniform(s->rng) * sum;
    double cum = 0.0;
    int last_block = -1; /* the last block with mass, for u in the sum's rounding gap */
    for (int b = 0; b < n; b += SPAN) {
        const int end = b + SPAN < n ? b + SPAN : n;
        float part = 0.0f;
        for (int i = b; i < end; i++) part += s->terms[i];
        if (part > 0.0f) last_block = b;
        if (cum + part <= u) {
            cum += part;
            continue;
        }
        for (int i = b; i < end; i++)
            if (u < (cum += s->terms[i])) return i;
    }
    for (int i = n - 1; last_block >= 0 && i >= last_block; i--)
        if (s->terms[i] > 0.0f) return i;
    return argmax(logits, n);
}

/* Cuts a best-first candidate list to the top-p prefix: the shortest prefix whose probability
 * (normalised by z over the whole top-p universe, at temperature 1) reaches top_p. The token
 * that crosses the threshold is kept, as in llama.cpp. */
static int cut_top_p(const cand *c, int n, float lmax, double z, float top_p) {
    double cum = 0.0, target = (double)top_p * z;
    for (int i = 0; i < n; i++) {
        cum += expf(c[i].logit - lmax);
        if (cum >= target) return i + 1;
    }
    return n; /* rounding left the sum a hair short: keep them all */
}

/* Above this many candidates a top-p cut is found by threshold, not by sorting them: a flat row,
 * whose mass is spread over thousands of tokens, would otherwise sort most of the vocabulary (a
 * draw took 23.1 ms that way against 2.6 by threshold, build/tests/bench_row_math 5). */
enum { TOP_P_SORT_MAX = 4096 };

/* Top-p's kept set without sorting, into s->c in id order; returns its size. The sorted cut keeps
 * every token above the crossing token's logit v and, of the tokens at v, the lower ids until the
 * mass reaches target. v is the largest logit whose tokens and those above hold target, found by
 * bisection on the threshold (mass(l >= x) only grows as x falls) down to adjacent floats; the
 * masses come from s->terms (exp(l - lmax), filled by the caller). floor: min-p's cut, applied
 * after. */
static int top_p_by_threshold(wk_sampler *s, const float *logits, float lmax, double target, float floor) {
    const int n = s->n_vocab;
    /* mass(l >= lo) >= target always (below lmax - 87 every term is 0); mass(l >= hi) < target. */
    float lo = lmax - 128.0f, hi = nextafterf(lmax, INFINITY);
    if (wk_row_sum_at_least(s->terms, logits, n, lmax) >= target) lo = lmax;
    while (nextafterf(lo, INFINITY) < hi) {
        float mid = lo + (hi - lo) * 0.5f;
        if (!(mid > lo && mid < hi)) mid = nextafterf(lo, INFINITY);
        if (wk_row_sum_at_least(s->terms, logits, n, mid) >= target) lo = mid;
        else hi = mid;
    }
    const float v = lo, above = nextafterf(v, INFINITY);
    int nc = wk_row_indices_at_least(logits, n, above > floor ? above : floor, s->idx);
    for (int i = 0; i < nc; i++) s->c[i] = (cand){logits[s->idx[i]], s->idx[i]};
    if (v >= floor) {
        double cum = wk_row_sum_at_least(s->terms, logits, n, above);
        for (int i = 0; i < n && cum < target; i++)
            if (logits[i] == v) {
                s->c[nc++] = (cand){v, i};
                cum += s->terms[i];
            }
    }
    return nc;
}

int32_t wk_sampler_sample(wk_sampler *s, const float *logits) {
    const wk_sampler_params *p = &s->p;
    const int n = s->n_vocab;
    if (p->temperature <= 0.0f) return argmax(logits, n);

    const bool use_top_k = p->top_k > 0 && p->top_k < n;
    const bool use_top_p = p->top_p < 1.0f;
    const bool use_min_p = p->min_p > 0.0f;
    cand *c = s->c;
    int nc;
    float lmax;

    if (use_top_k) {
        /* Top-k first: the rest of the chain then works on k sorted candidates. */
        nc = p->top_k;
        select_top_k(logits, n, nc, c);
        lmax = c[0].logit;
        if (use_top_p) {
            double z = 0.0;
            for (int i = 0; i < nc; i++) z += expf(c[i].logit - lmax);
            nc = cut_top_p(c, nc, lmax, z, p->top_p);
        }
    } else if (use_top_p || use_min_p) {
        /* No top-k: top-p and min-p both keep a best-first prefix, so only the tokens that can be
         * in the shorter of the two prefixes need sorting. Min-p's prefix is l >= lmax + log(min_p);
         * top-p's lies inside {l >= t} for any t whose mass reaches top_p, found by widening t. */
        lmax = wk_row_max(logits, n, NULL);
        if (isinf(lmax)) return argmax(logits, n); /* every logit NaN or -inf (or one +inf) */
        float t = -INFINITY;
        if (use_min_p) t = lmax + logf(p->min_p);
        double z = 0.0;
        if (use_top_p) {
            z = wk_row_exp_sum(logits, n, lmax, 1.0f, s->terms);
            for (float width = 8.0f;; width *= 2.0f) {
                float tp = lmax - width;
                if (tp <= t || isinf(width)) break; /* min-p's cut is already the tighter one */
                if (wk_row_sum_at_least(s->terms, logits, n, tp) >= (double)p->top_p * z) {
                    t = tp;
                    break;
                }
            }
        }
        /* t = -inf keeps every logit but NaN ones, as the filters below would. */
        nc = wk_row_indices_at_least(logits, n, t, s->idx);
        if (use_top_p && nc > TOP_P_SORT_MAX) {
            nc = top_p_by_threshold(s, logits, lmax, (double)p->top_p * z, use_min_p ? t : -INFINITY);
        } else {
            for (int i = 0; i < nc; i++) c[i] = (cand){logits[s->idx[i]], s->idx[i]};
            if (use_top_p) {
                qsort(c, (size_t)nc, sizeof *c, cand_cmp_desc);
                nc = cut_top_p(c, nc, lmax, z, p->top_p);
            }
        }
    } else {
        /* Plain temperature sampling over the whole vocabulary: no order needed. */
        lmax = wk_row_max(logits, n, NULL);
        if (isinf(lmax)) return argmax(logits, n); /* every logit NaN or -inf (or one +inf) */
        return draw_whole_row(s, logits, lmax, 1.0f / p->temperature);
    }

    if (use_min_p) {
        /* Keeps l >= lmax + log(min_p), i.e. p >= min_p * p_max; lmax itself always survives. The
         * list may be unsorted here (no top-k, no top-p), so filter rather than cut. */
        float t = lmax + logf(p->min_p);
        int k = 0;
        for (int i = 0; i < nc; i++)
            if (c[i].logit >= t) c[k++] = c[i];
        nc = k;
    }
    if (nc <= 0) return argmax(logits, n); /* only when every logit is NaN or -inf */

    /* Temperature, then one draw from the softmax of what is left. */
    const float inv_t = 1.0f / p->temperature;
    double sum = 0.0;
    for (int i = 0; i < nc; i++) sum += expf((c[i].logit - lmax) * inv_t);
    double u = rng_uniform(s->rng) * sum, cum = 0.0;
    for (int i = 0; i < nc; i++) {
        cum += expf((c[i].logit - lmax) * inv_t);
        if (u < cum) return c[i].id;
    }
    return c[nc - 1].id; /* u landed in the rounding gap at the very end */
}
