/* Statistics for `wushkv bench` (see bench.h). */
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
