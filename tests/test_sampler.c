/* Sampler tests: greedy, top-k=1, determinism per seed, empirical frequencies against softmax,
 * top-p / min-p tails, and a full-size (262144) vocabulary. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_rng.h"
#include "test_util.h"
#include "wushkv/wushkv.h"

static wk_sampler_params params(float temp, int top_k, float top_p, float min_p, uint64_t seed) {
    wk_sampler_params p = {.temperature = temp, .top_p = top_p, .min_p = min_p, .top_k = top_k, .seed = seed};
    return p;
}

/* Draws `draws` tokens and counts them per id into counts[n]. */
static void histogram(const wk_sampler_params *p, const float *logits, int n, int draws, int *counts) {
    wk_sampler *s = wk_sampler_create(p, n);
    CHECK(s != NULL);
    if (!s) return;
    memset(counts, 0, (size_t)n * sizeof *counts);
    for (int i = 0; i < draws; i++) {
        int32_t t = wk_sampler_sample(s, logits);
        CHECK(t >= 0 && t < n);
        if (t >= 0 && t < n) counts[t]++;
    }
    wk_sampler_destroy(s);
}

static void test_greedy(void) {
    const float logits[6] = {0.5f, -1.0f, 3.25f, 3.0f, -INFINITY, 2.0f};
    wk_sampler_params p = params(0.0f, 0, 1.0f, 0.0f, 1);
    wk_sampler *s = wk_sampler_create(&p, 6);
    CHECK_EQ_INT(wk_sampler_sample(s, logits), 2);
    wk_sampler_destroy(s);

    /* Negative temperature is greedy too; a tie goes to the lowest id. */
    const float tie[4] = {1.0f, 7.0f, 7.0f, 0.0f};
    p.temperature = -1.0f;
    s = wk_sampler_create(&p, 4);
    CHECK_EQ_INT(wk_sampler_sample(s, tie), 1);
    wk_sampler_destroy(s);
}

static void test_top_k_1_is_greedy(void) {
    enum { N = 1000 };
    static float logits[N];
    uint64_t x = 12345;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < N; i++) {
            logits[i] = (float)((rng_lcg64(&x) >> 40) % 10000) / 1000.0f;
        }
        wk_sampler_params g = params(0.0f, 0, 1.0f, 0.0f, 0);
        wk_sampler_params k1 = params(1.5f, 1, 0.9f, 0.0f, (uint64_t)round);
        wk_sampler *sg = wk_sampler_create(&g, N), *sk = wk_sampler_create(&k1, N);
        CHECK_EQ_INT(wk_sampler_sample(sk, logits), wk_sampler_sample(sg, logits));
        wk_sampler_destroy(sg);
        wk_sampler_destroy(sk);
    }
}

static void test_same_seed_same_sequence(void) {
    enum { N = 50, STEPS = 200 };
    float logits[N];
    for (int i = 0; i < N; i++) logits[i] = sinf((float)i) * 2.0f;
    wk_sampler_params p = params(1.0f, 0, 1.0f, 0.0f, 42);
    wk_sampler *a = wk_sampler_create(&p, N), *b = wk_sampler_create(&p, N);
    p.seed = 43;
    wk_sampler *c = wk_sampler_create(&p, N);
    int same_ab = 1, same_ac = 1;
    for (int i = 0; i < STEPS; i++) {
        int32_t ta = wk_sampler_sample(a, logits), tb = wk_sampler_sample(b, logits),
                tc = wk_sampler_sample(c, logits);
        same_ab &= ta == tb;
        same_ac &= ta == tc;
    }
    CHECK(same_ab);
    CHECK(!same_ac); /* 200 draws over 50 tokens: another seed must diverge somewhere */
    wk_sampler_destroy(a);
    wk_sampler_destroy(b);
    wk_sampler_destroy(c);
}

static void test_distribution(void) {
    enum { DRAWS = 20000 };
    const float logits[3] = {1.0f, 2.0f, 0.5f};
    double e[3], z = 0.0;
    for (int i = 0; i < 3; i++) z += e[i] = exp(logits[i]);
    int counts[3];
    /* Same answer whether no filter is on, or a filter that keeps everything is on (those take
     * the other code paths: sorted prefix, top-k heap). */
    const wk_sampler_params ps[3] = {params(1.0f, 0, 1.0f, 0.0f, 7), params(1.0f, 0, 0.9999f, 0.0f, 8),
                                     params(1.0f, 3, 1.0f, 0.01f, 9)};
    for (int k = 0; k < 3; k++) {
        histogram(&ps[k], logits, 3, DRAWS, counts);
        for (int i = 0; i < 3; i++) {
            double f = (double)counts[i] / DRAWS, want = e[i] / z;
            printf("path %d token %d: freq %.4f softmax %.4f\n", k, i, f, want);
            CHECK_NEAR(f, want, 0.02);
        }
    }

    /* Temperature 2 flattens: softmax of logits / 2. */
    wk_sampler_params p = params(2.0f, 0, 1.0f, 0.0f, 11);
    histogram(&p, logits, 3, DRAWS, counts);
    z = 0.0;
    for (int i = 0; i < 3; i++) z += e[i] = exp(logits[i] / 2.0);
    for (int i = 0; i < 3; i++) CHECK_NEAR((double)counts[i] / DRAWS, e[i] / z, 0.02);
}

static void test_top_p_cuts_tail(void) {
    /* Probabilities 0.5, 0.3, 0.15, 0.05 (ids shuffled): top-p 0.7 keeps the 0.5 and the 0.3
     * (0.5 < 0.7, 0.8 >= 0.7) and renormalises them to 0.625 / 0.375. */
    const float logits[4] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f)};
    int counts[4];
    enum { DRAWS = 20000 };
    wk_sampler_params p = params(1.0f, 0, 0.7f, 0.0f, 3);
    histogram(&p, logits, 4, DRAWS, counts);
    CHECK_EQ_INT(counts[0], 0);
    CHECK_EQ_INT(counts[2], 0);
    CHECK_NEAR((double)counts[1] / DRAWS, 0.625, 0.02);
    CHECK_NEAR((double)counts[3] / DRAWS, 0.375, 0.02);

    /* Same through the top-k path (k = 3 drops the 0.05, top-p then works on 0.5/0.3/0.15
     * renormalised: 0.526, 0.842 -> keeps two). */
    p = params(1.0f, 3, 0.7f, 0.0f, 4);
    histogram(&p, logits, 4, DRAWS, counts);
    CHECK_EQ_INT(counts[0] + counts[2], 0);

    /* Min-p 0.35 keeps p >= 0.175: only the 0.5 and the 0.3. */
    p = params(1.0f, 0, 1.0f, 0.35f, 5);
    histogram(&p, logits, 4, DRAWS, counts);
    CHECK_EQ_INT(counts[0] + counts[2], 0);
    CHECK_NEAR((double)counts[1] / DRAWS, 0.625, 0.02);

    /* Top-p tiny: only the best token is left. */
    p = params(1.0f, 0, 0.01f, 0.0f, 6);
    histogram(&p, logits, 4, 1000, counts);
    CHECK_EQ_INT(counts[1], 1000);
}

/* The plain temperature path over a row longer than a draw's 256-token blocks: frequencies against
 * the softmax at temperature 1 and 0.5 for tokens in the first block, on both sides of a block
 * edge and in the last, partial block; -inf (masked) and NaN tokens are never drawn; a row with
 * nothing drawable gives token 0, as greedy does. */
static void test_whole_row_blocks(void) {
    enum { N = 1003, DRAWS = 20000 };
    static float logits[N];
    static int counts[N];
    const int32_t ids[5] = {0, 255, 256, 700, 1002};
    const float vals[5] = {1.0f, 2.0f, 0.5f, 1.5f, 2.5f};
    for (int i = 0; i < N; i++) logits[i] = i % 2 ? -INFINITY : NAN;
    for (int k = 0; k < 5; k++) logits[ids[k]] = vals[k];
    for (int t = 0; t < 2; t++) {
        float temp = t ? 0.5f : 1.0f;
        double e[5], z = 0.0;
        for (int k = 0; k < 5; k++) z += e[k] = exp(vals[k] / temp);
        wk_sampler_params p = params(temp, 0, 1.0f, 0.0f, 11 + (uint64_t)t);
        histogram(&p, logits, N, DRAWS, counts);
        int drawn = 0;
        for (int k = 0; k < 5; k++) {
            drawn += counts[ids[k]];
            printf("whole row, temperature %.1f, token %d: freq %.4f softmax %.4f\n", temp, ids[k],
                   (double)counts[ids[k]] / DRAWS, e[k] / z);
            CHECK_NEAR((double)counts[ids[k]] / DRAWS, e[k] / z, 0.02);
        }
        CHECK_EQ_INT(drawn, DRAWS);
    }
    for (int i = 0; i < N; i++) logits[i] = -INFINITY;
    const wk_sampler_params none[3] = {params(1.0f, 0, 1.0f, 0.0f, 5), params(1.0f, 0, 0.9f, 0.0f, 5),
                                       params(1.0f, 0, 1.0f, 0.1f, 5)}; /* plain, top-p, min-p */
    for (int k = 0; k < 3; k++) {
        histogram(&none[k], logits, N, 10, counts);
        CHECK_EQ_INT(counts[0], 10);
    }
}

/* Top-p on flat rows, where more than 4096 tokens share the mass and the cut is found by threshold
 * instead of a sort: the draws stay inside the sorted prefix the reference computes in double, and
 * reach its end. Two rows: distinct logits falling slowly, and two tied levels with the cut inside
 * a tie (kept: the lower ids). */
static void test_top_p_flat(void) {
    enum { N = 20000, DRAWS = 3000 };
    static float logits[N];
    static int counts[N];
    for (int row = 0; row < 2; row++) {
        int last_kept; /* the reference: the highest id the sorted cut keeps */
        if (row == 0) {
            double z = 0.0, cum = 0.0;
            for (int i = 0; i < N; i++) z += exp((double)(logits[i] = -1e-4f * (float)i));
            for (last_kept = 0; last_kept < N; last_kept++)
                if ((cum += exp((double)logits[last_kept])) >= 0.5 * z) break;
        } else {
            for (int i = 0; i < N; i++) logits[i] = i % 2 ? -1.0f : 0.0f;
            double z = N / 2 * (1.0 + exp(-1.0)), cum = 0.0;
            for (last_kept = 0; last_kept < N; last_kept += 2)
                if ((cum += 1.0) >= 0.5 * z) break;
        }
        wk_sampler_params p = params(0.7f, 0, 0.5f, 0.0f, 21 + (uint64_t)row);
        histogram(&p, logits, N, DRAWS, counts);
        int highest = -1, outside = 0;
        for (int i = 0; i < N; i++) {
            if (!counts[i]) continue;
            highest = i;
            outside += i > last_kept + 1 || (row == 1 && i % 2);
        }
        printf("flat row %d: cut keeps ids <= %d, highest drawn %d, drawn outside %d\n", row, last_kept, highest,
               outside);
        CHECK_EQ_INT(outside, 0);
        CHECK(highest >= last_kept - last_kept / 50);
    }
}

static void test_large_vocab(void) {
    /* Gemma's 262144-token vocabulary with a peaked head and a long flat tail: every path must
     * return an in-range token and respect its cut. */
    enum { N = 262144 };
    float *logits = malloc(N * sizeof *logits);
    CHECK(logits != NULL);
    if (!logits) return;
    uint64_t x = 99;
    for (int i = 0; i < N; i++) {
        logits[i] = (float)((rng_lcg64(&x) >> 40) % 1000) / 250.0f - 10.0f; /* tail in [-10, -6) */
    }
    logits[777] = 8.0f;
    logits[123456] = 7.0f;
    logits[5] = 6.5f;
    const wk_sampler_params ps[] = {
        params(0.8f, 40, 0.95f, 0.05f, 1), /* llama.cpp's defaults */
        params(0.8f, 0, 0.95f, 0.0f, 2),   /* top-p alone: prefilter by mass */
        params(0.8f, 0, 1.0f, 0.05f, 3),   /* min-p alone */
        params(1.0f, 0, 1.0f, 0.0f, 4),    /* plain temperature */
    };
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        wk_sampler *s = wk_sampler_create(&ps[k], N);
        CHECK(s != NULL);
        int head = 0;
        for (int i = 0; i < 200; i++) {
            int32_t t = wk_sampler_sample(s, logits);
            CHECK(t >= 0 && t < N);
            head += t == 777 || t == 123456 || t == 5;
        }
        printf("large vocab path %zu: %d/200 draws in the 3-token head\n", k, head);
        /* The head holds ~97% of the mass (tail: 262141 tokens averaging e^-7.4 against e^8,
         * e^7, e^6.5) and the tail is >= 14 nats below the max, so top-k 40, top-p 0.95 and
         * min-p 0.05 (cut at max - 3.0) each leave only the head. */
        if (k < 3) CHECK_EQ_INT(head, 200);
        wk_sampler_destroy(s);
    }
    free(logits);
}

int main(void) {
    CHECK(wk_sampler_create(NULL, 10) == NULL);
    wk_sampler_params p = params(1.0f, 0, 1.0f, 0.0f, 0);
    CHECK(wk_sampler_create(&p, 0) == NULL);
    wk_sampler_destroy(NULL);
    test_greedy();
    test_top_k_1_is_greedy();
    test_same_seed_same_sequence();
    test_distribution();
    test_top_p_cuts_tail();
    test_whole_row_blocks();
    test_top_p_flat();
    test_large_vocab();
    TEST_MAIN_END();
}
