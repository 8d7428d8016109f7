/* A benchmark, not a test (meson builds it; nothing runs it): the host's weight products
 * (engine/host/host_matmul.c) on a 4096 x 640 matrix of each device format (a Gemma 3 270M layer's
 * joined gate/up product) at step sizes from one token to 512, on a pool of every CPU this process
 * may use, with the best instruction set this CPU runs and with each lower one, stored row-major
 * (as the output head is) and by panels (as the layers' matrices are, host_panels.h). Prints ms a
 * product, GFLOP/s (2 x rows x cols x tokens) and the weight bytes' rate. Usage:
 * build/tests/bench_host_matmul [MS_PER_CASE [ROWS [MAX_TOKENS]]]. With the default 4096 rows the
 * weights are 13-16 MB of one matrix, which a large L3 may hold, so the one-token rate can exceed a
 * decode step's, whose ~300 MB of weights come from memory; ROWS 262144 is the output head's shape,
 * 200-330 MB, read from memory as a decode step reads it (MAX_TOKENS 1-16 keeps that case short). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "host/host_matmul.h"
#include "host/host_panels.h"
#include "host/host_pool.h"
#include "test_rng.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const double budget = (argc > 1 ? atof(argv[1]) : 300.0) * 1e-3;
    enum { C = 640, TMAX = 512 };
    const int R = argc > 2 ? atoi(argv[2]) : 4096, max_tokens = argc > 3 ? atoi(argv[3]) : TMAX;
    if (R < 16 || R % 16 || max_tokens < 1 || max_tokens > TMAX)
        return fprintf(stderr, "usage: bench_host_matmul [MS_PER_CASE [ROWS (a multiple of 16) [MAX_TOKENS (1-%d)]]]\n", TMAX), 2;
    rng_seed(7);
    int8_t *codes = malloc((size_t)R * C);
    uint16_t *halves = malloc((size_t)R * C * 2);
    float *pf = malloc((size_t)R * C / 16 * 2 * sizeof *pf);
    uint32_t *ph = malloc((size_t)R * C / 16 * sizeof *ph);
    float *x = malloc((size_t)max_tokens * C * sizeof *x), *y = malloc((size_t)max_tokens * R * sizeof *y);
    if (!codes || !halves || !pf || !ph || !x || !y) return 1;
    for (size_t i = 0; i < (size_t)R * C; i++) codes[i] = (int8_t)(rng_u64() & 0xff), halves[i] = 0x3c00;
    for (size_t g = 0; g < (size_t)R * C / 16; g++) pf[2 * g] = 0.01f, pf[2 * g + 1] = 0.0f, ph[g] = 0x00002000u;
    for (size_t i = 0; i < (size_t)max_tokens * C; i++) x[i] = (float)rng_gauss();
    char err[256] = "";
    wk_host_pool *pool = wk_host_pool_create(0, err, sizeof err);
    if (!pool) return fprintf(stderr, "%s\n", err), 1;
    int8_t *pcodes = malloc((size_t)R * C);
    uint16_t *phalves = malloc((size_t)R * C * 2);
    float *ppf = malloc((size_t)R * C / 16 * 2 * sizeof *ppf);
    uint32_t *pph = malloc((size_t)R * C / 16 * sizeof *pph);
    if (!pcodes || !phalves || !ppf || !pph) return 1;
    wk_host_pack_panels(WK_HOST_Q8A, R, C, codes, pf, pcodes, ppf);
    wk_host_pack_panels(WK_HOST_Q8H, R, C, codes, ph, pcodes, pph);
    wk_host_pack_panels(WK_HOST_F16, R, C, halves, NULL, phalves, NULL);
    const wk_host_matrix mats[6] = {{WK_HOST_Q8A, R, C, codes, pf, WK_HOST_ROWS},
                                    {WK_HOST_Q8H, R, C, codes, ph, WK_HOST_ROWS},
                                    {WK_HOST_F16, R, C, halves, NULL, WK_HOST_ROWS},
                                    {WK_HOST_Q8A, R, C, pcodes, ppf, WK_HOST_PANELS},
                                    {WK_HOST_Q8H, R, C, pcodes, pph, WK_HOST_PANELS},
                                    {WK_HOST_F16, R, C, phalves, NULL, WK_HOST_PANELS}};
    static const char *names[3] = {"q8a", "q8h", "f16"};
    static const double bytes_per_weight[3] = {1.5, 1.25, 2.0};
    static const int steps[] = {1, 2, 4, 8, 16, 64, 512};
    printf("host products, %d x %d, %d threads; best instruction set %s\n", R, C, wk_host_pool_threads(pool),
           wk_host_isa_name(wk_host_isa_best()));
    printf("| isa | layout | format | tokens | ms a product | GFLOP/s | weights GB/s |\n|---|---|---|---|---|---|---|\n");
    for (int isa = (int)wk_host_isa_best(); isa >= WK_HOST_ISA_C; isa--)
        for (int f = 0; f < 6; f++)
            for (size_t s = 0; s < sizeof steps / sizeof *steps; s++) {
                const int n = steps[s];
                if (n > max_tokens) continue;
                wk_host_matmul(pool, (wk_host_isa)isa, &mats[f], x, n, y, R); /* warm */
                int reps = 0;
                const double t0 = now_s();
                double dt;
                do {
                    wk_host_matmul(pool, (wk_host_isa)isa, &mats[f], x, n, y, R);
                    reps++;
                } while ((dt = now_s() - t0) < budget);
                dt /= reps;
                printf("| %s | %s | %s | %d | %.3f | %.1f | %.2f |\n", wk_host_isa_name((wk_host_isa)isa), f < 3 ? "rows" : "panels",
                       names[f % 3], n, dt * 1e3,
                       2.0 * R * C * n / dt * 1e-9, R * C * bytes_per_weight[f % 3] / dt * 1e-9);
            }
    wk_host_pool_destroy(pool);
    free(pcodes), free(phalves), free(ppf), free(pph);
    return 0;
}
