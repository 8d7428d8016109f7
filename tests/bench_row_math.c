/* A benchmark, not a test (meson builds it; nothing runs it): the host's passes over one
 * 262144-entry logits row, the vector code (engine/base/row_math.c through wk_logsumexp,
 * logits_logprobs and wk_sampler_sample) against the scalar libm loops it replaced, timed in the
 * same invocation, runs alternating. The row is flat, as a base model's often is: a wide Gaussian
 * tail holding most of the mass, 20 tokens above it. Usage: build/tests/bench_row_math [ROUNDS].
 * Prints ms a row for each and the ratio scalar / vector. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sched/logits.h"
#include "test_rng.h"
#include "wushkv/wushkv.h"

enum { N = 262144 };

/* ---- the scalar loops before the vector passes (fe0f52d), kept here as the peer ---- */

static float scalar_logprob(const float *x, int n, int32_t chosen, int *rank) {
    float mx = -INFINITY;
    const float c = x[chosen];
    int above = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] > mx) mx = x[i];
        above += x[i] > c;
    }
    *rank = 1 + above;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)(x[i] - mx));
    return x[chosen] - (mx + (float)log(sum));
}

/* The plain temperature draw: the candidate list, argmax, a sum of expf, then a running sum of expf. */
typedef struct cand {
    float logit;
    int32_t id;
} cand;
static int32_t scalar_draw(const float *x, int n, float temp, double u01, cand *c) {
    int32_t best = 0;
    for (int i = 0; i < n; i++) c[i] = (cand){x[i], i};
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    const float lmax = x[best], inv_t = 1.0f / temp;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += expf((c[i].logit - lmax) * inv_t);
    double u = u01 * sum, cum = 0.0;
    for (int i = 0; i < n; i++) {
        cum += expf((c[i].logit - lmax) * inv_t);
        if (u < cum) return c[i].id;
    }
    return c[n - 1].id;
}

/* Top-p without top-k: widen a threshold until its mass reaches top_p, then sort every candidate
 * above it and cut (on a flat row, most of the vocabulary), then the temperature draw. */
static int cand_desc(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}
static int32_t scalar_top_p(const float *x, int n, float temp, float top_p, double u01, cand *c) {
    float lmax = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > lmax) lmax = x[i];
    double z = 0.0;
    for (int i = 0; i < n; i++) z += expf(x[i] - lmax);
    float t = -INFINITY;
    for (float width = 8.0f; !isinf(width); width *= 2.0f) {
        double mass = 0.0;
        for (int i = 0; i < n; i++)
            if (x[i] >= lmax - width) mass += expf(x[i] - lmax);
        if (mass >= (double)top_p * z) {
            t = lmax - width;
            break;
        }
    }
    int nc = 0;
    for (int i = 0; i < n; i++)
        if (x[i] >= t) c[nc++] = (cand){x[i], i};
    qsort(c, (size_t)nc, sizeof *c, cand_desc);
    double cum = 0.0;
    for (int i = 0; i < nc; i++)
        if ((cum += expf(c[i].logit - lmax)) >= (double)top_p * z) {
            nc = i + 1;
            break;
        }
    const float inv_t = 1.0f / temp;
    double sum = 0.0;
    for (int i = 0; i < nc; i++) sum += expf((c[i].logit - lmax) * inv_t);
    double u = u01 * sum;
    cum = 0.0;
    for (int i = 0; i < nc; i++)
        if (u < (cum += expf((c[i].logit - lmax) * inv_t))) return c[i].id;
    return c[nc - 1].id;
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    if (rounds < 1) rounds = 1;
    enum { REPS = 50 };
    rng_seed(7);
    float *x = malloc(N * sizeof *x);
    cand *c = malloc(N * sizeof *c);
    if (!x || !c) return 1;
    for (int i = 0; i < N; i++) x[i] = (float)(rng_gauss() * 2.5); /* a model's row: a wide, flat tail */
    for (int i = 0; i < 20; i++) x[(i * 7919) % N] = 12.0f + 0.1f * (float)i;
    int32_t top_tok[20];
    float top_lp[20];
    volatile double sink = 0;

    const wk_sampler_params ps[] = {
        {.temperature = 1.0f, .top_p = 1.0f},                    /* OpenAI's defaults */
        {.temperature = 0.7f, .top_p = 0.9f},                    /* a common chat setting */
        {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.05f},    /* min-p alone */
        {.temperature = 0.8f, .top_p = 0.95f, .min_p = 0.05f, .top_k = 40}, /* llama.cpp's */
    };
    const char *names[] = {"temperature 1", "temperature 0.7, top_p 0.9", "min_p 0.05", "top_k 40, top_p 0.95, min_p 0.05"};
    enum { NP = sizeof ps / sizeof *ps };
    wk_sampler *smp[NP];
    for (int k = 0; k < NP; k++) smp[k] = wk_sampler_create(&ps[k], N);

    double t_lp_vec = 0, t_lp_sc = 0, t_draw_vec = 0, t_draw_sc = 0, t_top_p_sc = 0, t_smp[NP] = {0};
    for (int r = 0; r < rounds; r++) {
        double t0 = seconds();
        for (int i = 0; i < REPS; i++) {
            int rank, top = 0;
            sink += logits_logprobs(x, N, (i * 31) % N, &top, top_tok, top_lp, &rank) + rank;
        }
        double t1 = seconds();
        for (int i = 0; i < REPS; i++) {
            int rank;
            sink += scalar_logprob(x, N, (i * 31) % N, &rank) + rank;
        }
        double t2 = seconds();
        for (int i = 0; i < REPS; i++) sink += wk_sampler_sample(smp[0], x);
        double t3 = seconds();
        for (int i = 0; i < REPS; i++) sink += scalar_draw(x, N, 1.0f, (i + 0.5) / REPS, c);
        double t4 = seconds();
        for (int i = 0; i < REPS; i++) sink += scalar_top_p(x, N, 0.7f, 0.9f, (i + 0.5) / REPS, c);
        t_top_p_sc += seconds() - t4;
        t_lp_vec += t1 - t0, t_lp_sc += t2 - t1, t_draw_vec += t3 - t2, t_draw_sc += t4 - t3;
        for (int k = 0; k < NP; k++) {
            double a = seconds();
            for (int i = 0; i < REPS; i++) sink += wk_sampler_sample(smp[k], x);
            t_smp[k] += seconds() - a;
        }
    }
    const double per = 1e3 / ((double)rounds * REPS);
    printf("one %d-entry row, %d rounds of %d, ms a row\n", N, rounds, REPS);
    printf("log-probability + rank: vector %.3f, scalar libm %.3f: %.2fx\n", t_lp_vec * per, t_lp_sc * per,
           t_lp_sc / t_lp_vec);
    printf("draw at temperature 1:  vector %.3f, scalar libm %.3f: %.2fx\n", t_draw_vec * per, t_draw_sc * per,
           t_draw_sc / t_draw_vec);
    printf("top_p 0.9 at temperature 0.7: vector %.3f, scalar sort %.3f: %.2fx\n", t_smp[1] * per,
           t_top_p_sc * per, t_top_p_sc / t_smp[1]);
    for (int k = 0; k < NP; k++) printf("wk_sampler_sample, %-34s %.3f\n", names[k], t_smp[k] * per);
    for (int k = 0; k < NP; k++) wk_sampler_destroy(smp[k]);
    free(x);
    free(c);
    return sink == 12345.678 ? 2 : 0;
}
