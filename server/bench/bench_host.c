/* The host CPU's own limits, measured by `wushkv bench` in the same run as the engine when the
 * device is a CPU (lavapipe): memory read bandwidth and f32 fused multiply-add peak, each with all
 * the threads the engine's driver uses. Issue 15 asks every speed figure that stays short of its
 * target to state its bound with a measurement; the decode attention's achieved GB/s (the
 * `attn GB/s` column) means something only beside what this machine's memory can deliver, and a
 * kernel's GFLOP/s only beside what its cores can. Plain C with GCC vector extensions (and AVX2+FMA
 * and AVX-512F paths chosen at run time on x86-64, the widest the CPU has, as the host kernels
 * choose), so the figures are the hardware's, not the shader compiler's. */
#include "bench/bench_host.h"
#include "metrics/mono_clock.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* a * b + c as one fused multiply-add where the code has it (the FMA peak below). */
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

typedef float v8f __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));
typedef uint64_t v4u __attribute__((vector_size(32)));

/* ---- memory read bandwidth: each thread sums its slice of a buffer far larger than any cache ---- */

typedef struct read_job {
    const v4u *p;
    size_t n;       /* vectors */
    uint64_t sink;  /* the sum, so the reads cannot be dropped */
} read_job;

static void *read_slice(void *arg) {
    read_job *j = arg;
    v4u a = {0}, b = {0}, c = {0}, d = {0};
    for (size_t i = 0; i + 4 <= j->n; i += 4) a += j->p[i], b += j->p[i + 1], c += j->p[i + 2], d += j->p[i + 3];
    v4u s = a + b + c + d;
    j->sink = s[0] + s[1] + s[2] + s[3];
    return NULL;
}

/* ---- f32 FMA peak: independent multiply-add chains in registers, no memory traffic ---- */

enum { CHAINS = 10, FMA_ITERS = 20 * 1000 * 1000 };

typedef struct fma_job {
    double flops;
    float sink;
} fma_job;

/* One body for every width: V a vector type of LANES floats. The file contracts a * b + c into
 * one fused multiply-add where the code has it (the pragma above; ISO C mode, -std=c11, does not
 * by itself), so the AVX2+FMA and AVX-512F builds below measure fused multiply-adds, and the
 * generic one, without FMA hardware or off x86-64, a multiply and an add, which is what such a
 * core does. */
#define FMA_BODY(V, LANES)                                                                        \
    V acc[CHAINS];                                                                                \
    for (int k = 0; k < CHAINS; k++) acc[k] = (V){0} + (float)k * 1e-3f;                          \
    const V m = (V){0} + 0.999999f, add = (V){0} + 1e-7f;                                         \
    for (int i = 0; i < FMA_ITERS; i++)                                                           \
        for (int k = 0; k < CHAINS; k++) acc[k] = acc[k] * m + add;                               \
    V s = (V){0};                                                                                 \
    for (int k = 0; k < CHAINS; k++) s += acc[k];                                                 \
    j->sink = s[0] + s[LANES - 1];                                                                \
    j->flops = 2.0 * LANES * CHAINS * (double)FMA_ITERS;

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) static void fma_avx2(fma_job *j) { FMA_BODY(v8f, 8) }
/* AVX-512F, which the engine's host kernels use where the CPU has it (engine/host/host_matmul.h):
 * 16 lanes a chain, so its peak is the one they run against. */
__attribute__((target("avx512f"))) static void fma_avx512(fma_job *j) { FMA_BODY(v16f, 16) }
#endif
static void fma_generic(fma_job *j) { FMA_BODY(v8f, 8) }

typedef enum { FMA_GENERIC, FMA_AVX2, FMA_AVX512 } fma_kind;

static fma_kind fma_best(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return FMA_GENERIC;
    return __builtin_cpu_supports("avx512f") ? FMA_AVX512 : FMA_AVX2;
#else
    return FMA_GENERIC;
#endif
}

static void *fma_thread(void *arg) {
    switch (fma_best()) {
#if defined(__x86_64__) && defined(__GNUC__)
    case FMA_AVX512: fma_avx512(arg); break;
    case FMA_AVX2: fma_avx2(arg); break;
#endif
    default: fma_generic(arg); break;
    }
    return NULL;
}

/* Runs fn on n threads at once (n <= 64) and returns the wall time. */
static double run_threads(int n, void *(*fn)(void *), void *jobs, size_t job_size) {
    pthread_t t[64];
    double t0 = mono_now_s();
    int started = 0;
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, fn, (char *)jobs + (size_t)i * job_size) == 0) started++;
        else fn((char *)jobs + (size_t)i * job_size); /* no thread: run it here, slower but right */
    for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
    return mono_now_s() - t0;
}

void bench_host_measure(int threads, bench_host_limits *out) {
    memset(out, 0, sizeof *out);
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    out->threads = threads;
    static const char *const isa_names[] = {[FMA_GENERIC] = "generic vectors", [FMA_AVX2] = "avx2+fma",
                                            [FMA_AVX512] = "avx512f"};
    out->fma_isa = isa_names[fma_best()];

    /* 512 MiB, touched once first (page faults are not bandwidth); best of 3 passes. */
    const size_t bytes = (size_t)512 << 20, vecs = bytes / sizeof(v4u);
    v4u *buf = NULL;
    if (posix_memalign((void **)&buf, 64, bytes) == 0) {
        memset(buf, 1, bytes);
        read_job jobs[64];
        double best = 0.0;
        for (int pass = 0; pass < 3; pass++) {
            for (int i = 0; i < threads; i++)
                jobs[i] = (read_job){.p = buf + vecs / (size_t)threads * (size_t)i, .n = vecs / (size_t)threads};
            double t = run_threads(threads, read_slice, jobs, sizeof jobs[0]);
            double gbps = t > 0 ? (double)(vecs / (size_t)threads * (size_t)threads * sizeof(v4u)) / t / 1e9 : 0.0;
            if (gbps > best) best = gbps;
        }
        out->read_gbps = best;
        free(buf);
    }
    fma_job fj[64];
    memset(fj, 0, sizeof fj);
    double t = run_threads(threads, fma_thread, fj, sizeof fj[0]);
    double flops = 0.0;
    for (int i = 0; i < threads; i++) flops += fj[i].flops;
    out->fma_gflops = t > 0 ? flops / t / 1e9 : 0.0;
}
