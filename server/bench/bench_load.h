/* `wushkv bench --url` inside: what one request and one server's run yield (bench_load.c measures,
 * bench_report.c prints), and the server-side figures read from /metrics (bench_scrape.c). */
#ifndef WUSHKV_BENCH_LOAD_H
#define WUSHKV_BENCH_LOAD_H

#include <stdbool.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "bench/bench.h"
#include "bench/http_client.h"

/* One request as the client saw it; times in seconds since the run started. */
typedef struct req_result {
    bool ok;
    double t_arrival;               /* when it was due (open loop), else when a client took it */
    double t_start, t_end;          /* sent / response complete */
    double *chunk_t;                /* arrival of each stream event with a non-empty choices array */
    int n_chunk, cap_chunk;
    int prompt_tokens, completion_tokens;
    bool usage_seen;
    long long kv_bytes;             /* usage.kv_cache.bytes (wushkv's own), -1 when absent */
    char error[320];
} req_result;

/* The server's KV figures over a run, from its /metrics and its responses; NAN where the server
 * does not report them (a peer such as llama-server). */
typedef struct bench_kv_stats {
    bool metrics;                   /* /metrics had wushkv:kv_cache_used_bytes */
    int samples;                    /* /metrics reads during the run (before and after included) */
    double pool_peak_bytes, pool_capacity_bytes, pool_peak_fp16_bytes, preemptions;
    int n_req_kv;                   /* completed requests whose usage carried kv_cache */
    double req_kv_p50, req_kv_p99, req_kv_max;
} bench_kv_stats;

typedef struct load_summary {
    char url[512], model[256];
    bool reached;                   /* /v1/models answered */
    char error[1024];               /* why not, or the first failed request's error */
    int threads;                    /* client threads that ran */
    /* vllm bench serve's figures, by its definitions (bench_load.c: summarize) */
    int completed, failed, good, without_usage;
    double duration_s;
    long long total_input, total_output;
    double request_throughput, request_goodput, output_throughput, total_token_throughput;
    double max_output_tokens_per_s;
    int max_concurrent_requests;
    bench_dist ttft, tpot, itl, e2el; /* ms */
    bench_kv_stats kv;
    req_result *res;                /* o->requests of them, for the per-request lists of --json */
} load_summary;

/* The sampling fields every request sends (bench_load_opts' flags), also the JSON report's
 * "sampling" object: temperature; top_p, top_k, min_p and ignore_eos only when given. */
void bench_sampling_add(cJSON *obj, const bench_load_opts *o);

/* bench_report.c: the table (stdout) and the JSON object (stdout, or --json FILE). b: the peer. */
void bench_report_text(const bench_load_opts *o, const load_summary *a, const load_summary *b);
/* Returns 0, or 1 when the JSON could not be made or written (with a message). */
int bench_report_json(const bench_load_opts *o, const load_summary *a, const load_summary *b);

/* bench_scrape.c: one read of GET /metrics. False when it has no wushkv KV gauges (another
 * server, or no /metrics at all): then the figures stay NAN. */
typedef struct bench_scrape {
    double used_bytes, capacity_bytes, fp16_bytes, preemptions;
} bench_scrape;
bool bench_scrape_metrics(const http_target *t, const char *api_key, double timeout_s, bench_scrape *out);
/* The value of the metric `name` in Prometheus text, summed over its label sets; NAN if absent. */
double bench_prom_value(const char *text, const char *name);

#endif
