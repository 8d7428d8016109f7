/* Statistics for `wushkv bench` (see bench.h): mean, standard deviations, numpy-style percentiles,
 * vLLM-style summaries, and the seeded random arrival times of the open-loop load. */
#include <math.h>
#include <stdlib.h>

#include "bench/bench.h"

double bench_mean(const double *x, size_t n) {
    if (n == 0) return NAN;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i];
    return s / (double)n;
}

double bench_stddev(const double *x, size_t n) {
    if (n < 2) return 0.0;
    double m = bench_mean(x, n), s = 0.0;
    for (size_t i = 0; i < n; i++) s += (x[i] - m) * (x[i] - m);
    return sqrt(s / (double)(n - 1));
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(double *x, size_t n, double q) {
    if (n == 0) return NAN;
    qsort(x, n, sizeof *x, cmp_double);
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    if (lo + 1 >= n) return x[n - 1];
    return x[lo] + (pos - (double)lo) * (x[lo + 1] - x[lo]);
}

double bench_stddev_pop(const double *x, size_t n) {
    if (n == 0) return NAN;
    double m = bench_mean(x, n), s = 0.0;
    for (size_t i = 0; i < n; i++) s += (x[i] - m) * (x[i] - m);
    return sqrt(s / (double)n);
}

void bench_dist_of(double *x, size_t n, const double *p, int np, bench_dist *d) {
    d->n = n;
    d->mean = bench_mean(x, n);
    d->std = bench_stddev_pop(x, n);
    d->median = bench_percentile(x, n, 0.5);
    for (int i = 0; i < BENCH_MAX_PERCENTILES; i++) d->pct[i] = i < np ? bench_percentile(x, n, p[i] / 100.0) : NAN;
}

unsigned long long bench_rng_next(unsigned long long *state) {
    unsigned long long z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double bench_uniform(unsigned long long *state) {
    /* 53 random bits, shifted off 0 so that log() of it is finite */
    return ((double)(bench_rng_next(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* A standard normal draw (Box-Muller; the second value is dropped: draws are few). */
static double normal(unsigned long long *state) {
    double u = bench_uniform(state), v = bench_uniform(state);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

double bench_gamma(unsigned long long *state, double shape, double scale) {
    if (shape < 1.0) { /* gamma(a) = gamma(a + 1) * U^(1/a) */
        double u = bench_uniform(state);
        return bench_gamma(state, shape + 1.0, scale) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = normal(state), v = 1.0 + c * x;
        if (v <= 0.0) continue;
        v = v * v * v;
        double u = bench_uniform(state);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v * scale;
    }
}

void bench_arrivals(double *t, int n, double rate, double burstiness, unsigned long long seed) {
    if (n <= 0) return;
    if (isinf(rate)) {
        for (int i = 0; i < n; i++) t[i] = 0.0;
        return;
    }
    unsigned long long s = seed;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        sum += bench_gamma(&s, burstiness, 1.0 / (rate * burstiness));
        t[i] = sum;
    }
    /* vLLM's normalisation: the drawn sum misses n / rate by a few percent; scaling every arrival
     * makes the offered rate exactly `rate` whatever the seed. */
    double k = sum > 0 ? ((double)n / rate) / sum : 1.0;
    for (int i = 0; i < n; i++) t[i] *= k;
}
