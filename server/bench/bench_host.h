/* The host CPU's memory read bandwidth and f32 FMA peak, measured in C (bench_host.c). */
#ifndef WK_BENCH_HOST_H
#define WK_BENCH_HOST_H

#include <stdbool.h>

typedef struct bench_host_limits {
    int threads;
    double read_gbps;    /* GB/s summing a 512 MiB buffer, all threads, best of 3 */
    double fma_gflops;   /* f32 GFLOP/s of independent FMA chains in registers, all threads */
    const char *fma_isa; /* "avx512f", "avx2+fma" or "generic vectors" */
} bench_host_limits;

/* Takes about a second; run it when nothing else of ours uses the CPU. */
void bench_host_measure(int threads, bench_host_limits *out);

#endif
