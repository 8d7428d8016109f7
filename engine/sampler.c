/* Token sampler: picks the next token from one logits row (greedy, or top-k -> top-p -> min-p ->
 * temperature -> seeded random draw, the order llama.cpp's default chain uses). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    if (!s->c) {
        free(s);
        return NULL;
    }
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    return s;
}

void wk_sampler_destroy(wk_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s);
}

static int32_t argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i; /* strict: the lowest id wins a tie */
    return best;
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
        lmax = logits[argmax(logits, n)];
        float t = -INFINITY;
        if (use_min_p) t = lmax + logf(p->min_p);
        if (use_top_p) {
            double z = 0.0;
            for (int i = 0; i < n; i++) z += expf(logits[i] - lmax);
            for (float width = 8.0f;; width *= 2.0f) {
                float tp = lmax - width;
                if (tp <= t || isinf(width)) break; /* min-p's cut is already the tighter one */
                double mass = 0.0;
                for (int i = 0; i < n; i++)
                    if (logits[i] >= tp) mass += expf(logits[i] - lmax);
                if (mass >= (double)p->top_p * z) {
                    t = tp;
                    break;
                }
            }
            nc = 0;
            for (int i = 0; i < n; i++)
                if (logits[i] >= t) c[nc++] = (cand){logits[i], i};
            qsort(c, (size_t)nc, sizeof *c, cand_cmp_desc);
            nc = cut_top_p(c, nc, lmax, z, p->top_p);
        } else {
            nc = 0;
            for (int i = 0; i < n; i++)
                if (logits[i] >= t) c[nc++] = (cand){logits[i], i};
        }
    } else {
        /* Plain temperature sampling over the whole vocabulary: no order needed. */
        nc = n;
        for (int i = 0; i < n; i++) c[i] = (cand){logits[i], i};
        lmax = logits[argmax(logits, n)];
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
