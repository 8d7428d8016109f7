/* Passes over one logits row in 4-wide vectors (GCC vector extensions: an SSE register on a
 * baseline x86-64 build, NEON on arm64; 32-byte vectors would change the ABI without AVX and
 * compile to memory shuffles). Why not libm: a scalar exp
 * over 262144 logits took 1.5 ms a row, and the sampler and the log-probabilities pay it for every
 * token; a polynomial exp in vectors does the same work in a fraction of it. */
#include "base/row_math.h"

#include <math.h>
#include <string.h>

#include "wushkv/wushkv.h"

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

enum { LANES = 4 };
/* Vectors summed per lane in float before the lanes go into the double total: 128 terms of at most
 * 1 keep a lane's rounding near 128 x 2^-24 of its sum. */
enum { BLOCK = 128 };

static inline v4f splat(float v) { return (v4f){v, v, v, v}; }

static inline v4f load(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The vector at x[i..i+4), lanes past n NaN (absent for every pass here). */
static inline v4f load_tail(const float *x, int i, int n) {
    float buf[LANES];
    for (int k = 0; k < LANES; k++) buf[k] = i + k < n ? x[i + k] : NAN;
    return load(buf);
}

static inline v4f select_f(v4i mask, v4f a, v4f b) { return (v4f)(((v4i)a & mask) | ((v4i)b & ~mask)); }

static inline double lanes_sum(v4f v) {
    double s = 0.0;
    for (int k = 0; k < LANES; k++) s += v[k];
    return s;
}

/* exp(t) per lane, 0 where t < -87 or NaN. Cephes' expf: t = k ln2 + r with |r| <= ln2 / 2 (k by
 * round-to-nearest through the 1.5 x 2^23 constant), exp(r) by a degree-5 polynomial, 2^k by
 * writing the exponent bits. */
static inline v4f exp_lanes(v4f t) {
    const v4i keep = t >= splat(-87.0f);
    t = select_f(keep, t, splat(-87.0f));
    t = select_f(t > splat(88.0f), splat(88.0f), t);
    const v4f magic = splat(12582912.0f);
    v4f k = (t * splat(1.44269504088896341f) + magic) - magic;
    v4f r = t - k * splat(0.693359375f) - k * splat(-2.12194440e-4f);
    v4f p = splat(1.9875691500e-4f);
    p = p * r + splat(1.3981999507e-3f);
    p = p * r + splat(8.3334519073e-3f);
    p = p * r + splat(4.1665795894e-2f);
    p = p * r + splat(1.6666665459e-1f);
    p = p * r + splat(5.0000001201e-1f);
    v4f y = p * r * r + r + splat(1.0f);
    v4i bits = (__builtin_convertvector(k, v4i) + 127) << 23;
    return (v4f)((v4i)(y * (v4f)bits) & keep);
}

float wk_row_max(const float *x, int n, int *at) {
    /* Two running maxima: a select chain is four dependent operations a vector. */
    v4f m0 = splat(-INFINITY), m1 = m0;
    int i = 0;
    for (; i + 2 * LANES <= n; i += 2 * LANES) {
        v4f a = load(x + i), b = load(x + i + LANES);
        m0 = select_f(a > m0, a, m0); /* a NaN lane compares false and leaves the maximum */
        m1 = select_f(b > m1, b, m1);
    }
    m0 = select_f(m1 > m0, m1, m0);
    for (; i < n; i += LANES) {
        v4f v = i + LANES <= n ? load(x + i) : load_tail(x, i, n);
        m0 = select_f(v > m0, v, m0);
    }
    v4f m = m0;
    float best = -INFINITY;
    for (int k = 0; k < LANES; k++)
        if (m[k] > best) best = m[k];
    if (at) {
        *at = 0;
        for (int j = 0; j < n && best > -INFINITY; j++)
            if (x[j] == best) {
                *at = j;
                break;
            }
    }
    return best;
}

double wk_row_exp_sum(const float *x, int n, float shift, float scale, float *terms) {
    const v4f vs = splat(shift), vk = splat(scale);
    double total = 0.0;
    int i = 0;
    while (i + 2 * LANES <= n) {
        v4f acc0 = splat(0.0f), acc1 = acc0; /* two, so the adds overlap */
        for (int b = 0; b < BLOCK && i + 2 * LANES <= n; b += 2, i += 2 * LANES) {
            v4f e0 = exp_lanes((load(x + i) - vs) * vk);
            v4f e1 = exp_lanes((load(x + i + LANES) - vs) * vk);
            if (terms) {
                memcpy(terms + i, &e0, sizeof e0);
                memcpy(terms + i + LANES, &e1, sizeof e1);
            }
            acc0 += e0;
            acc1 += e1;
        }
        total += lanes_sum(acc0) + lanes_sum(acc1);
    }
    for (; i < n; i += LANES) {
        v4f e = exp_lanes((load_tail(x, i, n) - vs) * vk);
        for (int k = 0; k < LANES && i + k < n; k++) {
            if (terms) terms[i + k] = e[k];
            total += e[k];
        }
    }
    return total;
}

double wk_row_sum_at_least(const float *terms, const float *x, int n, float t) {
    const v4f vt = splat(t);
    double total = 0.0;
    int i = 0;
    while (i + LANES <= n) {
        v4f acc = splat(0.0f);
        for (int b = 0; b < BLOCK && i + LANES <= n; b++, i += LANES)
            acc += (v4f)((v4i)load(terms + i) & (load(x + i) >= vt));
        total += lanes_sum(acc);
    }
    for (; i < n; i++)
        if (x[i] >= t) total += terms[i];
    return total;
}

int wk_row_indices_at_least(const float *x, int n, float t, int32_t *idx) {
    const v4f vt = splat(t);
    int count = 0, i = 0;
    for (; i + LANES <= n; i += LANES) {
        v4i hit = load(x + i) >= vt;
        int any = 0;
        for (int k = 0; k < LANES; k++) any |= hit[k];
        if (!any) continue; /* the usual case for a high threshold: 4 entries for one test */
        for (int k = 0; k < LANES; k++)
            if (hit[k]) idx[count++] = i + k;
    }
    for (; i < n; i++)
        if (x[i] >= t) idx[count++] = i;
    return count;
}

float wk_logsumexp(const float *x, int n) {
    float m = wk_row_max(x, n, NULL);
    if (isinf(m)) return m; /* nothing but NaN and -inf: -inf; a +inf entry: +inf */
    return m + (float)log(wk_row_exp_sum(x, n, m, 1.0f, NULL));
}
