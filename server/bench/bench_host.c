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
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

typedef float v8f __attribute__((vector_size(32)));
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

/* Without FMA hardware (or off x86-64): a multiply and an add, which is what such a core does. */
#define FMA_BODY                                                                                  \
    v8f acc[CHAINS];                                                                              \
    for (int k = 0; k < CHAINS; k++) acc[k] = (v8f){0} + (float)k * 1e-3f;                        \
    const v8f m = (v8f){0} + 0.999999f, add = (v8f){0} + 1e-7f;                                   \
    for (int i = 0; i < FMA_ITERS; i++)                                                           \
        for (int k = 0; k < CHAINS; k++) acc[k] = acc[k] * m + add;                               \
    v8f s = (v8f){0};                                                                             \
    for (int k = 0; k < CHAINS; k++) s += acc[k];                                                 \
    j->sink = s[0] + s[7];                                                                        \
    j->flops = 2.0 * 8 * CHAINS * (double)FMA_ITERS;

#if defined(__x86_64__) && defined(__GNUC__)
/* With intrinsics: ISO C mode (-std=c11) does not contract a * b + c into an FMA. */
__attribute__((target("avx2,fma"))) static void fma_avx2(fma_job *j) {
    __m256 acc[CHAINS];
    for (int k = 0; k < CHAINS; k++) acc[k] = _mm256_set1_ps((float)k * 1e-3f);
    const __m256 m = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < FMA_ITERS; i++)
        for (int k = 0; k < CHAINS; k++) acc[k] = _mm256_fmadd_ps(acc[k], m, add);
    __m256 s = _mm256_setzero_ps();
    for (int k = 0; k < CHAINS; k++) s = _mm256_add_ps(s, acc[k]);
    float out[8];
    _mm256_storeu_ps(out, s);
    j->sink = out[0] + out[7];
    j->flops = 2.0 * 8 * CHAINS * (double)FMA_ITERS;
}

/* The same with AVX-512F, which the engine's host kernels use where the CPU has it
 * (engine/host/host_matmul.h): 16 lanes a chain, so its peak is the one they run against. */
__attribute__((target("avx512f"))) static void fma_avx512(fma_job *j) {
    __m512 acc[CHAINS];
    for (int k = 0; k < CHAINS; k++) acc[k] = _mm512_set1_ps((float)k * 1e-3f);
    const __m512 m = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < FMA_ITERS; i++)
        for (int k = 0; k < CHAINS; k++) acc[k] = _mm512_fmadd_ps(acc[k], m, add);
    __m512 s = _mm512_setzero_ps();
    for (int k = 0; k < CHAINS; k++) s = _mm512_add_ps(s, acc[k]);
    j->sink = _mm512_reduce_add_ps(s);
    j->flops = 2.0 * 16 * CHAINS * (double)FMA_ITERS;
}
#endif
static void fma_generic(fma_job *j) { FMA_BODY }

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
