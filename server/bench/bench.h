/* `wushkv bench`: the two modes' options and entry points (cmd_bench.c parses the flags and
 * dispatches), and the small statistics both modes report. */
#ifndef WUSHKV_BENCH_H
#define WUSHKV_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#include "cli/cli_common.h"
#include "cli/kv_flags.h"
#include "wushkv/wushkv.h"

/* Engine throughput, as llama-bench measures it (bench_engine.c). */
typedef struct bench_engine_opts {
    cli_common common;     /* -m, --device, --json, --validation, -v (server/cli/cli_common.h) */
    int n_prompt;          /* -p: tokens per prefill run; 0 skips the prefill test */
    int n_gen;             /* -n: tokens decoded one at a time per run; 0 skips the decode test */
    int reps;              /* -r: timed runs after the warm-up */
    int ctx;               /* 0: max(n_prompt, n_gen) */
    int batch_tokens;      /* tokens per prefill forward step (the engine's batch size) */
    kv_flags kv;           /* --kv and friends (server/cli/kv_flags.h) */
    const char *peer;      /* path of llama-bench, or NULL */
} bench_engine_opts;

/* Load on running servers (bench_load.c). */
typedef struct bench_load_opts {
    const char *url, *peer_url;
    const char *api_key;   /* NULL: no Authorization header */
    int clients, requests, prompt_tokens, max_tokens;
    double timeout_s;      /* per socket read or write */
    bool stream, chat, json, verbose;
} bench_load_opts;

/* Return the command's exit status: 0, or 1 on a runtime failure (the report is still printed
 * for whatever was measured). */
int bench_engine_run(const bench_engine_opts *o);
int bench_load_run(const bench_load_opts *o);

/* ---- statistics (bench_stats.c) -------------------------------------------------------------- */

double bench_mean(const double *x, size_t n);
/* Sample standard deviation (n - 1), as llama-bench reports; 0 when n < 2. */
double bench_stddev(const double *x, size_t n);
/* The q-quantile (0..1) of x, linearly interpolated between order statistics (numpy's default);
 * sorts x in place. NAN when n == 0. */
double bench_percentile(double *x, size_t n, double q);

#endif
