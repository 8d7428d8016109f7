/* Minimal test harness: CHECK macros that print both values, a per-binary pass/fail tally; and
 * the small helpers more than one test needs (errors, files, time, the real model). */
#ifndef WK_TEST_UTIL_H
#define WK_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int wk_test_failures, wk_test_checks;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        wk_test_checks++;                                                            \
        if (!(cond)) {                                                               \
            wk_test_failures++;                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        wk_test_checks++;                                                                          \
        if (va_ != vb_) {                                                                          \
            wk_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld vs %lld\n", __FILE__, __LINE__, #a, #b, \
                    va_, vb_);                                                                     \
        }                                                                                          \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double va_ = (double)(a), vb_ = (double)(b);                                               \
        wk_test_checks++;                                                                          \
        if (!(fabs(va_ - vb_) <= (tol))) {                                                         \
            wk_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: |%s - %s| <= %g failed: %.9g vs %.9g\n", __FILE__, __LINE__, \
                    #a, #b, (double)(tol), va_, vb_);                                              \
        }                                                                                          \
    } while (0)

/* Ends main(): prints a summary and returns the exit status meson test reads. */
#define TEST_MAIN_END()                                                                   \
    do {                                                                                  \
        printf("%d checks, %d failed\n", wk_test_checks, wk_test_failures);               \
        return wk_test_failures ? 1 : 0;                                                  \
    } while (0)

/* ---- helpers ---- */

/* Max |a - b| over max |b|: the error relative to the tensor's scale (a NaN makes it infinite). */
static inline double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

/* The worst rel_err over `rows` rows of `cols` values (logits of several positions). */
static inline double rel_err_rows(const float *a, const float *b, size_t rows, size_t cols) {
    double worst = 0;
    for (size_t r = 0; r < rows; r++) worst = fmax(worst, rel_err(a + r * cols, b + r * cols, cols));
    return worst;
}

/* A new empty file /tmp/wk_test_<name>_XXXXXX; its path into buf (cap bytes). */
static inline void temp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "/tmp/wk_test_%s_XXXXXX", name);
    int fd = mkstemp(buf);
    if (fd >= 0) close(fd);
}

/* A whole file in a new buffer (free()) with a NUL after its *n bytes; NULL if it cannot be read. */
static inline void *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = len >= 0 ? malloc((size_t)len + 1) : NULL;
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    if (b) b[*n] = 0;
    fclose(f);
    return b;
}

/* Seconds on the monotonic clock. */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The real Gemma 3 270M for the checks that need it: WUSHKV_MODEL (scripts/test.sh sets it), or
 * NULL after printing that `what` is skipped. */
static inline const char *real_model_path(const char *what) {
    const char *path = getenv("WUSHKV_MODEL");
    if (path && *path) return path;
    printf("WUSHKV_MODEL not set: %s skipped\n", what);
    return NULL;
}

#endif
