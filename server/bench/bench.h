/* `wushkv bench`: the two modes' options and entry points (cmd_bench.c parses the flags and
 * dispatches), and the small statistics both modes report. */
#ifndef WUSHKV_BENCH_H
#define WUSHKV_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#include "cli/cli_common.h"
#include "cli/kv_flags.h"
#include "wushkv/wushkv.h"

/* -d takes at most this many depths, -r this many runs. */
enum { BENCH_MAX_DEPTHS = 64, BENCH_MAX_REPS = 1000 };

/* Engine throughput, as llama-bench measures it (bench_engine.c). */
typedef struct bench_engine_opts {
    cli_common common;     /* -m, --device, --json, --validation, -v (server/cli/cli_common.h) */
    int n_prompt;          /* -p: tokens per prefill run; 0 skips the prefill test */
    int n_gen;             /* -n: tokens decoded one at a time per run; 0 skips the decode test */
    int reps;              /* -r: timed runs after the warm-up */
    int depths[BENCH_MAX_DEPTHS]; /* -d: tokens in the cache before each test (llama-bench's -d) */
    int n_depths;          /* >= 1 (default: one depth, 0) */
    int ctx;               /* 0: max(depths) + max(n_prompt, n_gen) */
    int batch_tokens;      /* tokens per prefill forward step (the engine's batch size) */
    kv_flags kv;           /* --kv and friends (server/cli/kv_flags.h) */
    /* --vs-kv FMT: a second engine with that format (as --kv FMT alone gives it) runs the same
     * tests, run for run alternating with ours, and the report prints ours / its tok/s. */
    bool vs;
    kv_flags vs_kv;
    /* --vs-kernels SPEC: the second engine's shader variants, spelt as WUSHKV_KERNELS (which it then
     * ignores); its KV format is ours unless --vs-kv names another. NULL: as ours. */
    const char *vs_kernels;
    const char *peer;      /* path of llama-bench, or NULL */
    const char *peer_kv;   /* --peer-kv: llama.cpp's cache type (f16, q8_0, q4_0); NULL: the nearest
                            * to --kv (bench_peer_kv) */
} bench_engine_opts;

/* Load on running servers (bench_load.c). */
/* --metric-percentiles takes at most this many; an open loop without --max-concurrency runs this
 * many client threads at most. */
enum { BENCH_MAX_PERCENTILES = 8, BENCH_MAX_THREADS = 1024 };
typedef struct bench_load_opts {
    const char *url, *peer_url;
    const char *api_key;   /* NULL: no Authorization header */
    int clients, requests, prompt_tokens, max_tokens;
    double timeout_s;      /* per socket read or write */
    /* Open loop (--request-rate): requests arrive at times drawn from a gamma process (Poisson when
     * burstiness is 1), whatever the server's pace; INFINITY sends them all at once. Closed loop
     * (open_loop false): --clients threads each send the next request when their last one ends. */
    bool open_loop;
    double request_rate, burstiness;
    int max_concurrency;   /* open loop: requests in flight at most; 0: no limit (1024 threads) */
    unsigned long long seed;
    /* --goodput: a completed request is good when it meets every SLO given (ms; 0: not given). */
    double slo_ttft_ms, slo_tpot_ms, slo_e2el_ms;
    double percentiles[BENCH_MAX_PERCENTILES]; /* --metric-percentiles, 0 < p < 100 */
    int n_percentiles;
    double scrape_interval_s;  /* how often /metrics is read during the run; 0: only before/after */
    const char *json_file;     /* --json FILE; NULL: --json prints to stdout (json) or not at all */
    bool stream, chat, json, verbose;
    /* Sampling, as vllm bench serve's flags: temperature always sent (default 0); top_p, top_k,
     * min_p only when given (NAN, INT32_MIN, NAN: not); ignore_eos (vLLM's and llama-server's
     * field) sent when set, so that every request generates max_tokens. */
    float temperature, top_p, min_p;
    int top_k;
    bool ignore_eos;
} bench_load_opts;

/* The llama.cpp KV cache type --peer compares with when --peer-kv is not given: f16 for f16, q4_0
 * (4-bit codes, an f16 scale per 32) for int4; llama.cpp has no 2- or 3-bit cache type, so f16
 * for int2 and int3. */
const char *bench_peer_kv(const bench_engine_opts *o);

/* Return the command's exit status: 0, or 1 on a runtime failure (the report is still printed
 * for whatever was measured). */
int bench_engine_run(const bench_engine_opts *o);
int bench_load_run(const bench_load_opts *o);

/* ---- statistics (bench_stats.c) -------------------------------------------------------------- */

double bench_mean(const double *x, size_t n);
/* Sample standard deviation (n - 1), as llama-bench reports; 0 when n < 2. */
double bench_stddev(const double *x, size_t n);
/* Population standard deviation (n), numpy's np.std as vLLM reports; NAN when n == 0. */
double bench_stddev_pop(const double *x, size_t n);
/* The q-quantile (0..1) of x, linearly interpolated between order statistics (numpy's default);
 * sorts x in place. NAN when n == 0. */
double bench_percentile(double *x, size_t n, double q);

/* A sample's summary as vLLM prints it: mean, median, population std and the percentiles p[i]
 * (0..100) of x (sorted in place). Every field is NAN when n == 0. */
typedef struct bench_dist {
    size_t n;
    double mean, median, std;
    double pct[BENCH_MAX_PERCENTILES];
} bench_dist;
void bench_dist_of(double *x, size_t n, const double *p, int np, bench_dist *d);

/* splitmix64: a small, seedable generator; bench_uniform is in (0, 1). */
unsigned long long bench_rng_next(unsigned long long *state);
double bench_uniform(unsigned long long *state);
/* A gamma(shape, scale) draw (Marsaglia and Tsang; shape < 1 by boosting): shape 1 is the
 * exponential distribution. */
double bench_gamma(unsigned long long *state, double shape, double scale);
/* Arrival times t[0..n-1] (seconds from the start, non-decreasing) of n requests at `rate` per
 * second, as vllm bench serve draws them: gaps from gamma(burstiness, 1 / (rate * burstiness)),
 * summed, then scaled so that the last arrival is at n / rate; rate INFINITY: all 0. */
void bench_arrivals(double *t, int n, double rate, double burstiness, unsigned long long seed);

#endif
