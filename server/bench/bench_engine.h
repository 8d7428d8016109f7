/* `wushkv bench` engine mode's results, shared by its measurement (bench_engine.c), the peer
 * llama-bench (bench_peer.c) and the report (bench_engine_report.c). */
#ifndef WUSHKV_BENCH_ENGINE_H
#define WUSHKV_BENCH_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/bench.h"
#include "bench/bench_host.h"
#include "wushkv/wushkv.h"

enum { WK_BENCH_PROF_MAX = 32 };

/* One row of the report for one engine: a test (pp or tg) at one depth, as llama-bench names it
 * ("tg128 @ d2048"). */
typedef struct bench_row {
    int depth;                /* -d */
    bool decode;              /* tg, else pp */
    int n;                    /* -p or -n */
    int depth_held;           /* the sequence's length after the depth run (the last run's) */
    int tokens;               /* what the test added to it */
    double *ts;               /* tok/s of each timed run */
    uint64_t kv_read;         /* tg: KV bytes the first decode step reads (wk_kv_decode_read_bytes) */
    uint64_t kv_read_run;     /* tg: the same summed over the run's steps */
    double attn_ms;           /* WUSHKV_PROFILE=1: the attention's GPU ms per run (mean); NAN without */
    wk_profile_entry prof[WK_BENCH_PROF_MAX]; /* WUSHKV_PROFILE=1: GPU ms per pipeline, the timed runs' sum */
    int n_prof;
    double peer_ts, peer_sd;  /* NAN when not measured */
} bench_row;

/* What one engine's KV cache is, for the report. */
typedef struct bench_kv_info {
    char desc[128];           /* kv_flags_describe */
    char kernels[288];        /* the engine's kernel set and variants, "cpu: matmul=...,head=host" */
    double bits_per_element;
    unsigned long long bytes_per_token;
} bench_kv_info;

typedef struct engine_result {
    char model_name[256], device[256];
    char device_type[32], driver[256], driver_info[256];
    unsigned subgroup, shared_memory, vendor_id, device_id;
    const char *kernels; /* the shader variants: "cpu" or "gpu" */
    char kernel_variants[256]; /* each of them (wk_model_info.kernel_variants; copied: the engine closes first) */
    bench_kv_info kv;
    int ctx;
    bool profiled;
    bool host_measured;      /* CPU device with the profile on: the host's own limits beside it */
    bench_host_limits host;
    bench_row *rows;
    int n_rows;
    /* --vs-kv: the second format's cache and rows (the same tests, run for run beside ours);
     * vs_rows NULL without it. */
    bench_kv_info vs_kv;
    bench_row *vs_rows;
} engine_result;

typedef struct peer_result {
    bool ok;
    const char *kv;  /* its cache type (-ctk/-ctv) */
    char error[768];
} peer_result;

/* "tg128", "pp512 @ d2048". */
void bench_row_name(const bench_row *w, char *buf, size_t cap);

/* Runs the peer llama-bench (o->peer) on the same tests and fills each row's peer_ts / peer_sd;
 * r->ok, else r->error (bench_peer.c). */
void bench_run_peer(const bench_engine_opts *o, const char *model, engine_result *res, peer_result *r);
/* Why the peer's cache type is the one compared, for the report. */
const char *bench_peer_kv_note(const bench_engine_opts *o);

/* The report on stdout: llama-bench's table with our columns, or the JSON object (--json); the
 * latter returns the command's exit status (bench_engine_report.c). */
void bench_engine_print_text(const bench_engine_opts *o, const char *model, const engine_result *res,
                             const peer_result *peer);
int bench_engine_print_json(const bench_engine_opts *o, const char *model, const engine_result *res,
                            const peer_result *peer);

#endif
