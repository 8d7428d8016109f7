/* Passes over one logits row in 4-wide vectors (GCC vector extensions: an SSE register on a
 * baseline x86-64 build, NEON on arm64; 32-byte vectors would change the ABI without AVX and
 * compile to memory shuffles); the exponential also in AVX-512's 16 lanes for the host attention's
 * softmax weights (wk_row_exp_terms), in a function of that target. Why not libm: a scalar exp
 * over 262144 logits took 1.5 ms a row, and the sampler and the log-probabilities pay it for every
 * token; a polynomial exp in vectors does the same work in a fraction of it. */
#include "base/row_math.h"

#include <math.h>
#include <string.h>

#include "wushkv/wushkv.h"

/* No fused multiply-adds (C11's default in GCC; clang's would fuse): wk_row_exp_terms' 16 lanes
 * must give the 4 lanes' floats, and a baseline x86-64 build has no fused instruction. */
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

#if defined(__x86_64__) || defined(__i386__)
#define WK_ROW_X86 1
#endif

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
 * writing the exponent bits. One body for a vector type VF (its lanes' integers VI, SPLAT one
 * float to all lanes), so every width forms the same floats lane by lane. */
#define DEFINE_EXP_LANES(NAME, ATTR, VF, VI, SPLAT)                                  \
    ATTR VF NAME(VF t) {                                                             \
        const VI keep = t >= SPLAT(-87.0f);                                          \
        t = (VF)(((VI)t & keep) | ((VI)SPLAT(-87.0f) & ~keep));                      \
        const VI high = t > SPLAT(88.0f);                                            \
        t = (VF)(((VI)SPLAT(88.0f) & high) | ((VI)t & ~high));                       \
        const VF magic = SPLAT(12582912.0f);                                         \
        VF k = (t * SPLAT(1.44269504088896341f) + magic) - magic;                    \
        VF r = t - k * SPLAT(0.693359375f) - k * SPLAT(-2.12194440e-4f);             \
        VF p = SPLAT(1.9875691500e-4f);                                              \
        p = p * r + SPLAT(1.3981999507e-3f);                                         \
        p = p * r + SPLAT(8.3334519073e-3f);                                         \
        p = p * r + SPLAT(4.1665795894e-2f);                                         \
        p = p * r + SPLAT(1.6666665459e-1f);                                         \
        p = p * r + SPLAT(5.0000001201e-1f);                                         \
        VF y = p * r * r + r + SPLAT(1.0f);                                          \
        VI bits = (__builtin_convertvector(k, VI) + 127) << 23;                      \
        return (VF)((VI)(y * (VF)bits) & keep);                                      \
    }
DEFINE_EXP_LANES(exp_lanes, static inline, v4f, v4i, splat)

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

#ifdef WK_ROW_X86
/* The same in AVX-512's 16 lanes (static and always inlined into a function of that target, so
 * no vector crosses a call). */
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
#define SPLAT16(v) ((v16f){v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v})
DEFINE_EXP_LANES(exp_lanes16, static inline __attribute__((always_inline, target("avx512f"))), v16f, v16i, SPLAT16)

__attribute__((target("avx512f"))) static void exp_terms16(const float *x, int n, float shift, float *terms) {
    const v16f vs = SPLAT16(shift);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f v;
        memcpy(&v, x + i, sizeof v);
        v = exp_lanes16(v - vs);
        memcpy(terms + i, &v, sizeof v);
    }
    if (i < n) {
        float buf[16];
        for (int k = 0; k < 16; k++) buf[k] = i + k < n ? x[i + k] : NAN;
        v16f v;
        memcpy(&v, buf, sizeof v);
        v = exp_lanes16(v - vs);
        for (int k = 0; i + k < n; k++) terms[i + k] = v[k];
    }
}
#endif

void wk_row_exp_terms(const float *x, int n, float shift, float *terms, int avx512) {
#ifdef WK_ROW_X86
    if (avx512) {
        exp_terms16(x, n, shift, terms);
        return;
    }
#endif
    (void)avx512;
    const v4f vs = splat(shift);
    for (int i = 0; i < n; i += LANES) {
        const v4f e = exp_lanes((i + LANES <= n ? load(x + i) : load_tail(x, i, n)) - vs);
        for (int k = 0; k < LANES && i + k < n; k++) terms[i + k] = e[k];
    }
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
