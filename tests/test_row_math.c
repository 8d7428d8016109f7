/* The vector passes over a logits row (engine/base/row_math.c, wk_logsumexp) and the log-probabilities
 * built on them (server/sched/logits.c) against plain double-precision loops over libm's exp: every
 * row length's tail, NaN and -inf entries, the exp's whole range, and a 262144-entry row. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/row_math.h"
#include "sched/logits.h"
#include "test_rng.h"
#include "test_util.h"
#include "wushkv/wushkv.h"

/* The reference: max over non-NaN entries, first index; sum of exp((x - shift) * scale) in double,
 * terms below float's normal range (exponent < -87) left out as the vector pass leaves them. */
static float ref_max(const float *x, int n, int *at) {
    float m = -INFINITY;
    *at = 0;
    for (int i = 0; i < n; i++)
        if (x[i] > m) {
            m = x[i];
            *at = i;
        }
    return m;
}

static double ref_exp_sum(const float *x, int n, float shift, float scale) {
    double s = 0.0;
    for (int i = 0; i < n; i++) {
        float t = (x[i] - shift) * scale;
        if (t >= -87.0f) s += exp((double)t);
    }
    return s;
}

static void fill(float *x, int n, double spread) {
    for (int i = 0; i < n; i++) x[i] = (float)(rng_gauss() * spread);
}

/* exp over [-87, 0] against libm in double: the polynomial's error, lane by lane. */
static void test_exp_range(void) {
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof *x), *terms = malloc(N * sizeof *terms);
    for (int i = 0; i < N; i++) x[i] = -87.0f * (float)i / (N - 1);
    wk_row_exp_sum(x, N, 0.0f, 1.0f, terms);
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double want = exp((double)x[i]);
        worst = fmax(worst, fabs(terms[i] - want) / want);
    }
    printf("exp on [-87, 0]: worst relative error %.3g\n", worst);
    CHECK(worst < 2e-7);
    /* Out of range: below -87 is 0, above 88 is capped (finite), -inf and NaN are 0. */
    float edge[6] = {-87.5f, -1000.0f, -INFINITY, NAN, 90.0f, 0.0f};
    float out[6];
    double sum = wk_row_exp_sum(edge, 6, 0.0f, 1.0f, out);
    for (int i = 0; i < 4; i++) CHECK(out[i] == 0.0f);
    CHECK(isfinite(out[4]) && out[4] > 1e38f);
    CHECK(out[5] == 1.0f);
    CHECK_NEAR(sum, (double)out[4] + 1.0, 1e32);
    free(x);
    free(terms);
}

/* wk_row_exp_terms: each term the float wk_row_exp_sum writes (scale 1), bit for bit, in 4 lanes
 * and (where the CPU runs them) in AVX-512's 16: every length 1..70 (each tail after whole
 * vectors of both widths), in place and not, over the exp's range and past it (below -87, above
 * 88, -inf, NaN), with a shift. */
static void test_exp_terms(void) {
    enum { N = 70 };
    int widths = 1;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    widths = __builtin_cpu_supports("avx512f") ? 2 : 1;
#endif
    printf("exp terms: %s\n", widths == 2 ? "4 and 16 lanes" : "4 lanes (no AVX-512 here)");
    float x[N], want[N], got[N];
    int checked = 0, differ = 0;
    for (int n = 1; n <= N; n++)
        for (int w = 0; w < widths; w++)
            for (int in_place = 0; in_place < 2; in_place++) {
                for (int i = 0; i < n; i++) x[i] = (float)(rng_unit() * 200.0 - 120.0);
                if (n > 3) x[n / 3] = -INFINITY, x[n / 2] = NAN, x[n - 1] = 95.0f;
                const float shift = (float)(rng_unit() * 10.0 - 5.0);
                wk_row_exp_sum(x, n, shift, 1.0f, want);
                float *out = in_place ? x : got;
                wk_row_exp_terms(x, n, shift, out, w);
                for (int i = 0; i < n; i++, checked++)
                    if (memcmp(&out[i], &want[i], sizeof want[i]) != 0) differ++;
            }
    printf("exp terms: %d terms, %d differ from wk_row_exp_sum's\n", checked, differ);
    CHECK_EQ_INT(differ, 0);
}

/* Every length 1..40 (tails of each size after whole vectors) and two long ones. */
static void test_lengths(void) {
    static const int longs[] = {1000, 262144, 262147};
    for (int k = 0; k < 43; k++) {
        int n = k < 40 ? k + 1 : longs[k - 40];
        float *x = malloc((size_t)n * sizeof *x), *terms = malloc((size_t)n * sizeof *terms);
        int32_t *idx = malloc((size_t)n * sizeof *idx);
        fill(x, n, 4.0);
        if (n >= 8) {
            x[n - 1] = NAN;                  /* the last lane of the tail */
            x[n / 2] = -INFINITY;            /* a masked token */
            x[n / 4] = x[3 * n / 4] = 20.0f; /* a tie for the maximum: the lower index wins */
            if (k % 2) x[0] = 20.0f;         /* ... also when it is the first */
        }
        int at, want_at;
        float m = wk_row_max(x, n, &at), want_m = ref_max(x, n, &want_at);
        CHECK(m == want_m);
        CHECK_EQ_INT(at, want_at);

        for (int s = 0; s < 2; s++) {
            float scale = s ? 1.0f / 0.7f : 1.0f; /* temperature 1 and 0.7 */
            double got = wk_row_exp_sum(x, n, m, scale, terms), want = ref_exp_sum(x, n, m, scale);
            CHECK(fabs(got - want) <= 3e-7 * want);
            double by_terms = 0.0;
            for (int i = 0; i < n; i++) by_terms += terms[i];
            CHECK(fabs(by_terms - got) <= 1e-6 * got); /* the pass sums lanes in float */
            if (n >= 8) CHECK(terms[n - 1] == 0.0f && terms[n / 2] == 0.0f);

            float t = m - 1.5f;
            double part = wk_row_sum_at_least(terms, x, n, t), want_part = 0.0;
            int want_count = 0;
            for (int i = 0; i < n; i++)
                if (x[i] >= t) want_part += terms[i], want_count++;
            CHECK(fabs(part - want_part) <= 1e-6 * want_part);
            int count = wk_row_indices_at_least(x, n, t, idx);
            CHECK_EQ_INT(count, want_count);
            for (int i = 0, j = 0; i < n && j < count; i++)
                if (x[i] >= t) CHECK_EQ_INT(idx[j++], i);
        }

        double lse_want = (double)m + log(ref_exp_sum(x, n, m, 1.0f));
        CHECK(fabs(wk_logsumexp(x, n) - lse_want) <= 1e-6 * fmax(1.0, fabs(lse_want)));
        free(x);
        free(terms);
        free(idx);
    }
    /* Rows with nothing in them, and an infinite logit. */
    float empty[5] = {NAN, -INFINITY, NAN, -INFINITY, -INFINITY};
    int at = -1;
    CHECK(wk_row_max(empty, 5, &at) == -INFINITY);
    CHECK_EQ_INT(at, 0);
    CHECK(wk_logsumexp(empty, 5) == -INFINITY);
    float inf[5] = {1.0f, INFINITY, 2.0f, NAN, 0.0f};
    CHECK(wk_logsumexp(inf, 5) == INFINITY);
}

/* logits_logprobs against the double reference: the chosen token's log-probability, its rank, and
 * the top n in order with the lower id first on a tie. */
static void test_logprobs(void) {
    enum { N = 262144, TOP = 20 };
    float *x = malloc(N * sizeof *x);
    fill(x, N, 1.5); /* the row's own largest is then near 7.4 */
    x[1000] = x[2000] = 12.0f; /* tied leaders */
    x[7] = 11.0f;
    int at;
    float m = ref_max(x, N, &at);
    double lse = (double)m + log(ref_exp_sum(x, N, m, 1.0f));
    int32_t tok[TOP];
    float lp[TOP];
    const int32_t chosen[] = {2000, 7, 12345, N - 1};
    for (size_t c = 0; c < sizeof chosen / sizeof *chosen; c++) {
        int rank = 0, above = 0, top = TOP;
        float got = logits_logprobs(x, N, chosen[c], &top, tok, lp, &rank);
        CHECK_EQ_INT(top, TOP);
        for (int i = 0; i < N; i++) above += x[i] > x[chosen[c]];
        CHECK_NEAR(got, (double)x[chosen[c]] - lse, 2e-6);
        CHECK_EQ_INT(rank, 1 + above);
        CHECK_EQ_INT(tok[0], 1000);
        CHECK_EQ_INT(tok[1], 2000);
        CHECK_EQ_INT(tok[2], 7);
        for (int k = 0; k < TOP; k++) {
            CHECK_NEAR(lp[k], (double)x[tok[k]] - lse, 2e-6);
            if (k) CHECK(lp[k] <= lp[k - 1]);
        }
    }
    /* A masked row (allowed_token_ids): only finite logits are alternatives, however many are asked. */
    for (int i = 0; i < N; i++) x[i] = -INFINITY;
    x[5] = 1.0f, x[9] = 2.0f, x[N - 1] = 2.0f;
    int rank = 0, top = TOP;
    float got = logits_logprobs(x, N, 9, &top, tok, lp, &rank);
    CHECK_EQ_INT(top, 3);
    CHECK_EQ_INT(tok[0], 9);
    CHECK_EQ_INT(tok[1], N - 1);
    CHECK_EQ_INT(tok[2], 5);
    CHECK_EQ_INT(rank, 1);
    CHECK_NEAR(got, 2.0 - log(2 * exp(2.0) + exp(1.0)), 1e-6);
    CHECK_NEAR(lp[2], 1.0 - log(2 * exp(2.0) + exp(1.0)), 1e-6);
    free(x);
}

int main(void) {
    rng_seed(20261206);
    test_exp_range();
    test_exp_terms();
    test_lengths();
    test_logprobs();
    TEST_MAIN_END();
}
