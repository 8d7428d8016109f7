/* Minimal test harness: CHECK macros that print both values, a per-binary pass/fail tally. */
#ifndef WK_TEST_UTIL_H
#define WK_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif
