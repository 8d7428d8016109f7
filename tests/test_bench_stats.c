/* server/bench/bench_stats.c against hand-computed values: numpy's mean, np.std (population) and
 * np.percentile (linear interpolation) as vllm bench serve reports them, llama-bench's sample
 * standard deviation, and the open-loop arrival times (vLLM's gamma process, scaled so the last
 * arrival is at n / rate). */
#include <math.h>
#include <string.h>

#include "bench/bench.h"
#include "test_util.h"

static void test_moments(void) {
    const double x[5] = {1, 2, 3, 4, 10};
    CHECK_NEAR(bench_mean(x, 5), 4.0, 1e-12);
    /* squares of the deviations: 9 + 4 + 1 + 0 + 36 = 50 */
    CHECK_NEAR(bench_stddev_pop(x, 5), sqrt(50.0 / 5), 1e-12);
    CHECK_NEAR(bench_stddev(x, 5), sqrt(50.0 / 4), 1e-12);
    CHECK(isnan(bench_stddev_pop(x, 0)));
    CHECK_NEAR(bench_stddev_pop(x, 1), 0.0, 0);
    CHECK(isnan(bench_mean(x, 0)));
}

static void test_percentiles(void) {
    double x[5] = {10, 3, 1, 4, 2}; /* unsorted: the function sorts */
    /* numpy: position q * (n - 1) between order statistics 1 2 3 4 10 */
    CHECK_NEAR(bench_percentile(x, 5, 0.99), 4 + 0.96 * 6, 1e-12); /* 9.76 */
    CHECK_NEAR(bench_percentile(x, 5, 0.90), 4 + 0.6 * 6, 1e-12);  /* 7.6 */
    CHECK_NEAR(bench_percentile(x, 5, 0.50), 3, 1e-12);
    CHECK_NEAR(bench_percentile(x, 5, 0.25), 2, 1e-12);
    CHECK_NEAR(bench_percentile(x, 5, 0.0), 1, 0);
    CHECK_NEAR(bench_percentile(x, 5, 1.0), 10, 0);
    double even[4] = {4, 1, 3, 2};
    CHECK_NEAR(bench_percentile(even, 4, 0.5), 2.5, 1e-12);
    double one[1] = {7};
    CHECK_NEAR(bench_percentile(one, 1, 0.99), 7, 0);
    CHECK(isnan(bench_percentile(one, 0, 0.5)));

    double y[5] = {10, 3, 1, 4, 2};
    const double p[3] = {50, 90, 99.9};
    bench_dist d;
    bench_dist_of(y, 5, p, 3, &d);
    CHECK_EQ_INT(d.n, 5);
    CHECK_NEAR(d.mean, 4, 1e-12);
    CHECK_NEAR(d.median, 3, 1e-12);
    CHECK_NEAR(d.std, sqrt(10.0), 1e-12);
    CHECK_NEAR(d.pct[0], 3, 1e-12);
    CHECK_NEAR(d.pct[1], 7.6, 1e-12);
    CHECK_NEAR(d.pct[2], 4 + 0.996 * 6, 1e-12);
    CHECK(isnan(d.pct[3]));
    bench_dist_of(y, 0, p, 3, &d);
    CHECK(isnan(d.mean) && isnan(d.median) && isnan(d.std) && isnan(d.pct[0]));
}

static double mean_of(const double *x, int n) { return bench_mean(x, (size_t)n); }

static void test_gamma(void) {
    enum { N = 200000 };
    static double g[N];
    const double shapes[3] = {0.5, 1.0, 3.0};
    for (int s = 0; s < 3; s++) {
        unsigned long long st = 42;
        for (int i = 0; i < N; i++) g[i] = bench_gamma(&st, shapes[s], 2.0);
        /* gamma(k, theta): mean k theta, variance k theta^2 */
        CHECK_NEAR(mean_of(g, N) / (shapes[s] * 2.0), 1.0, 0.02);
        double sd = bench_stddev_pop(g, N);
        CHECK_NEAR(sd * sd / (shapes[s] * 4.0), 1.0, 0.05);
    }
}

static void test_arrivals(void) {
    enum { N = 20000 };
    static double t[N], u[N], gaps[N];
    bench_arrivals(t, N, 10.0, 1.0, 7);
    CHECK_NEAR(t[N - 1], N / 10.0, 1e-9); /* scaled: the offered rate is exact */
    int sorted = 1;
    for (int i = 1; i < N; i++) sorted &= t[i] >= t[i - 1];
    CHECK(sorted && t[0] > 0);
    /* Poisson: exponential gaps, coefficient of variation 1; gamma shape b: 1 / sqrt(b) */
    const double bs[3] = {1.0, 4.0, 0.25};
    for (int k = 0; k < 3; k++) {
        bench_arrivals(t, N, 10.0, bs[k], 7);
        for (int i = 0; i < N; i++) gaps[i] = t[i] - (i ? t[i - 1] : 0);
        double cv = bench_stddev_pop(gaps, N) / bench_mean(gaps, N);
        CHECK_NEAR(cv * sqrt(bs[k]), 1.0, 0.05);
    }
    /* the seed decides the times */
    bench_arrivals(t, N, 10.0, 1.0, 7);
    bench_arrivals(u, N, 10.0, 1.0, 7);
    CHECK(memcmp(t, u, sizeof t) == 0);
    bench_arrivals(u, N, 10.0, 1.0, 8);
    CHECK(memcmp(t, u, sizeof t) != 0);
    /* inf: all at once */
    bench_arrivals(t, 5, INFINITY, 1.0, 7);
    CHECK(t[0] == 0 && t[4] == 0);
}

int main(void) {
    test_moments();
    test_percentiles();
    test_gamma();
    test_arrivals();
    TEST_MAIN_END();
}
