/* `wushkv bench --url`: the report of a load run. The table (stdout) has vllm bench serve's rows
 * under their vLLM names, then the KV rows no peer reports, one column per server and their ratio;
 * the JSON object (stdout, or --json FILE) has vLLM's result keys, our KV keys, the per-request
 * lists and the load's settings. A figure a server does not give is "n/a" / null. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bench/bench_load.h"
#include "cli/cli_common.h"

static const char *const k_metric[4] = {"ttft", "tpot", "itl", "e2el"};
static const char *const k_metric_title[4] = {"Time to First Token", "Time per Output Token (excl. 1st token)",
                                              "Inter-token Latency", "End-to-end Latency"};

static const bench_dist *dist(const load_summary *s, int m) {
    return m == 0 ? &s->ttft : m == 1 ? &s->tpot : m == 2 ? &s->itl : &s->e2el;
}

/* "99", "99.9": vLLM's spelling of a percentile in its keys and rows. */
static void pct_name(double p, char *out, size_t cap) {
    if (p == floor(p)) snprintf(out, cap, "%.0f", p);
    else snprintf(out, cap, "%g", p);
}

static const char *endpoint(const bench_load_opts *o) {
    return o->chat ? "/v1/chat/completions" : "/v1/completions";
}

/* ---- text ------------------------------------------------------------------------------------ */

/* One row: each server's value ("n/a" where it has none) and, when ratio, server/peer. */
static void row(const char *name, const char *fmt, double a, const load_summary *pb, double b, bool ratio) {
    char va[32], vb[32], vr[32];
    if (isnan(a)) snprintf(va, sizeof va, "n/a");
    else snprintf(va, sizeof va, fmt, a);
    printf("| %-46s | %14s |", name, va);
    if (pb) {
        if (!pb->reached || isnan(b)) snprintf(vb, sizeof vb, "n/a");
        else snprintf(vb, sizeof vb, fmt, b);
        if (!ratio || !pb->reached || isnan(a) || isnan(b) || b == 0) snprintf(vr, sizeof vr, "-");
        else snprintf(vr, sizeof vr, "%.3f", a / b);
        printf(" %14s | %11s |", vb, vr);
    }
    putchar('\n');
}

static void section(const char *title, const load_summary *pb) {
    char t[64];
    snprintf(t, sizeof t, "-- %s --", title);
    printf("| %-46s | %14s |", t, "");
    if (pb) printf(" %14s | %11s |", "", "");
    putchar('\n');
}

void bench_report_text(const bench_load_opts *o, const load_summary *a, const load_summary *b) {
    printf("============ Serving Benchmark Result ============\n");
    printf("server: %s (model '%s')\n", a->url, a->model);
    if (b) {
        if (b->reached) printf("peer:   %s (model '%s')\n", b->url, b->model);
        else printf("peer:   %s (not measured: %s)\n", b->url, b->error);
    }
    printf("load:   %s, %s, ", endpoint(o), o->stream ? "stream" : "no stream");
    if (!o->open_loop) printf("%d clients", a->threads);
    else if (isinf(o->request_rate)) printf("request rate inf");
    else printf("request rate %g/s (burstiness %g, seed %llu)", o->request_rate, o->burstiness, o->seed);
    if (o->open_loop && o->max_concurrency) printf(", max concurrency %d", o->max_concurrency);
    printf(", %d requests, ~%d prompt tokens, max_tokens %d, temperature %g", o->requests, o->prompt_tokens, o->max_tokens,
           o->temperature);
    if (!isnan(o->top_p)) printf(", top_p %g", o->top_p);
    if (o->top_k != INT32_MIN) printf(", top_k %d", o->top_k);
    if (!isnan(o->min_p)) printf(", min_p %g", o->min_p);
    printf("%s\n", o->ignore_eos ? ", ignore_eos" : "");
    if (o->slo_ttft_ms > 0 || o->slo_tpot_ms > 0 || o->slo_e2el_ms > 0) {
        printf("goodput SLOs:");
        if (o->slo_ttft_ms > 0) printf(" ttft <= %g ms", o->slo_ttft_ms);
        if (o->slo_tpot_ms > 0) printf(" tpot <= %g ms", o->slo_tpot_ms);
        if (o->slo_e2el_ms > 0) printf(" e2el <= %g ms", o->slo_e2el_ms);
        putchar('\n');
    }
    putchar('\n');
    printf("| %-46s | %14s |", "metric", "server");
    if (b) printf(" %14s | %11s |", "peer", "server/peer");
    printf("\n|------------------------------------------------|----------------|");
    if (b) printf("----------------|-------------|");
    putchar('\n');
    const load_summary z = {0};
    const load_summary *pb = b ? b : &z;
    row("Successful requests", "%.0f", a->completed, b, pb->completed, false);
    row("Failed requests", "%.0f", a->failed, b, pb->failed, false);
    row("Benchmark duration (s)", "%.2f", a->duration_s, b, pb->duration_s, true);
    row("Total input tokens", "%.0f", (double)a->total_input, b, (double)pb->total_input, false);
    row("Total generated tokens", "%.0f", (double)a->total_output, b, (double)pb->total_output, false);
    row("Request throughput (req/s)", "%.3f", a->request_throughput, b, pb->request_throughput, true);
    if (o->slo_ttft_ms > 0 || o->slo_tpot_ms > 0 || o->slo_e2el_ms > 0)
        row("Request goodput (req/s)", "%.3f", a->request_goodput, b, pb->request_goodput, true);
    row("Output token throughput (tok/s)", "%.2f", a->output_throughput, b, pb->output_throughput, true);
    row("Peak output token throughput (tok/s)", "%.2f", a->max_output_tokens_per_s, b, pb->max_output_tokens_per_s,
        true);
    row("Peak concurrent requests", "%.0f", a->max_concurrent_requests, b, pb->max_concurrent_requests, false);
    row("Total token throughput (tok/s)", "%.2f", a->total_token_throughput, b, pb->total_token_throughput, true);
    static const char *const abbr[4] = {"TTFT", "TPOT", "ITL", "E2EL"};
    for (int m = 0; m < 4; m++) {
        const bench_dist *da = dist(a, m), *db = dist(pb, m);
        char name[64], pn[16];
        section(k_metric_title[m], b);
        snprintf(name, sizeof name, "Mean %s (ms)", abbr[m]);
        row(name, "%.2f", da->mean, b, db->mean, true);
        snprintf(name, sizeof name, "Median %s (ms)", abbr[m]);
        row(name, "%.2f", da->median, b, db->median, true);
        snprintf(name, sizeof name, "Std %s (ms)", abbr[m]);
        row(name, "%.2f", da->std, b, db->std, true);
        for (int i = 0; i < o->n_percentiles; i++) {
            pct_name(o->percentiles[i], pn, sizeof pn);
            snprintf(name, sizeof name, "P%s %s (ms)", pn, abbr[m]);
            row(name, "%.2f", da->pct[i], b, db->pct[i], true);
        }
    }
    section("KV cache (server side)", b);
    row("KV bytes per request, p50", "%.0f", a->kv.req_kv_p50, b, pb->kv.req_kv_p50, true);
    row("KV bytes per request, p99", "%.0f", a->kv.req_kv_p99, b, pb->kv.req_kv_p99, true);
    row("KV pool peak bytes", "%.0f", a->kv.pool_peak_bytes, b, pb->kv.pool_peak_bytes, true);
    row("KV pool peak, f16 equivalent bytes", "%.0f", a->kv.pool_peak_fp16_bytes, b, pb->kv.pool_peak_fp16_bytes,
        true);
    row("KV pool capacity bytes", "%.0f", a->kv.pool_capacity_bytes, b, pb->kv.pool_capacity_bytes, true);
    row("Preemptions", "%.0f", a->kv.preemptions, b, pb->kv.preemptions, false);
    if (a->failed) printf("\nfirst error (server): %s\n", a->error);
    if (b && b->reached && b->failed) printf("%sfirst error (peer): %s\n", a->failed ? "" : "\n", b->error);
    if (a->without_usage || (b && b->without_usage))
        printf("\nsome answers had no usage: their generated tokens are counted as chunks\n");
    fflush(stdout);
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static void add_num(cJSON *obj, const char *key, double v) {
    if (isnan(v) || isinf(v)) cJSON_AddNullToObject(obj, key);
    else cJSON_AddNumberToObject(obj, key, v);
}

static void add_summary(const bench_load_opts *o, cJSON *obj, const load_summary *s) {
    cJSON_AddStringToObject(obj, "url", s->url);
    if (!s->reached) {
        cJSON_AddNullToObject(obj, "model");
        cJSON_AddStringToObject(obj, "error", s->error);
        return;
    }
    cJSON_AddStringToObject(obj, "model", s->model);
    add_num(obj, "duration", s->duration_s);
    cJSON_AddNumberToObject(obj, "completed", s->completed);
    cJSON_AddNumberToObject(obj, "failed", s->failed);
    if (s->error[0]) cJSON_AddStringToObject(obj, "first_error", s->error);
    else cJSON_AddNullToObject(obj, "first_error");
    cJSON_AddNumberToObject(obj, "total_input_tokens", (double)s->total_input);
    cJSON_AddNumberToObject(obj, "total_output_tokens", (double)s->total_output);
    add_num(obj, "request_throughput", s->request_throughput);
    add_num(obj, "request_goodput", s->request_goodput);
    add_num(obj, "output_throughput", s->output_throughput);
    add_num(obj, "total_token_throughput", s->total_token_throughput);
    add_num(obj, "max_output_tokens_per_s", s->max_output_tokens_per_s);
    cJSON_AddNumberToObject(obj, "max_concurrent_requests", s->max_concurrent_requests);
    cJSON_AddNumberToObject(obj, "requests_without_usage", s->without_usage);
    for (int m = 0; m < 4; m++) {
        const bench_dist *d = dist(s, m);
        char key[48], pn[16];
        snprintf(key, sizeof key, "mean_%s_ms", k_metric[m]);
        add_num(obj, key, d->mean);
        snprintf(key, sizeof key, "median_%s_ms", k_metric[m]);
        add_num(obj, key, d->median);
        snprintf(key, sizeof key, "std_%s_ms", k_metric[m]);
        add_num(obj, key, d->std);
        for (int i = 0; i < o->n_percentiles; i++) {
            pct_name(o->percentiles[i], pn, sizeof pn);
            snprintf(key, sizeof key, "p%s_%s_ms", pn, k_metric[m]);
            add_num(obj, key, d->pct[i]);
        }
    }
    add_num(obj, "kv_cache_bytes_per_request_p50", s->kv.req_kv_p50);
    add_num(obj, "kv_cache_bytes_per_request_p99", s->kv.req_kv_p99);
    add_num(obj, "kv_cache_bytes_per_request_max", s->kv.req_kv_max);
    add_num(obj, "kv_pool_peak_bytes", s->kv.pool_peak_bytes);
    add_num(obj, "kv_pool_peak_fp16_equivalent_bytes", s->kv.pool_peak_fp16_bytes);
    add_num(obj, "kv_pool_capacity_bytes", s->kv.pool_capacity_bytes);
    add_num(obj, "num_preemptions", s->kv.preemptions);
    cJSON_AddNumberToObject(obj, "metrics_samples", s->kv.samples);

    /* per request, in request order, seconds (vLLM's lists); null where a request has no value */
    cJSON *in = cJSON_AddArrayToObject(obj, "input_lens"), *out = cJSON_AddArrayToObject(obj, "output_lens");
    cJSON *ttfts = cJSON_AddArrayToObject(obj, "ttfts"), *itls = cJSON_AddArrayToObject(obj, "itls");
    cJSON *lat = cJSON_AddArrayToObject(obj, "latencies"), *st = cJSON_AddArrayToObject(obj, "start_times");
    cJSON *arr = cJSON_AddArrayToObject(obj, "arrival_times"), *kv = cJSON_AddArrayToObject(obj, "kv_cache_bytes");
    cJSON *errs = cJSON_AddArrayToObject(obj, "errors");
    for (int i = 0; s->res && i < o->requests; i++) {
        const req_result *r = &s->res[i];
        bool chunks = r->ok && o->stream && r->n_chunk > 0;
        cJSON_AddItemToArray(in, cJSON_CreateNumber(r->ok ? r->prompt_tokens : 0));
        cJSON_AddItemToArray(out, cJSON_CreateNumber(r->ok ? r->completion_tokens : 0));
        cJSON_AddItemToArray(ttfts, chunks ? cJSON_CreateNumber(r->chunk_t[0] - r->t_start) : cJSON_CreateNull());
        cJSON *gaps = cJSON_CreateArray();
        for (int k = 1; chunks && k < r->n_chunk; k++)
            cJSON_AddItemToArray(gaps, cJSON_CreateNumber(r->chunk_t[k] - r->chunk_t[k - 1]));
        cJSON_AddItemToArray(itls, gaps);
        double l = !r->ok ? NAN : o->stream ? r->chunk_t[r->n_chunk - 1] - r->t_start : r->t_end - r->t_start;
        cJSON_AddItemToArray(lat, isnan(l) ? cJSON_CreateNull() : cJSON_CreateNumber(l));
        cJSON_AddItemToArray(st, cJSON_CreateNumber(r->t_start));
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(r->t_arrival));
        cJSON_AddItemToArray(kv, r->ok && r->kv_bytes >= 0 ? cJSON_CreateNumber((double)r->kv_bytes) : cJSON_CreateNull());
        cJSON_AddItemToArray(errs, cJSON_CreateString(r->ok ? "" : r->error));
    }
}

int bench_report_json(const bench_load_opts *o, const load_summary *a, const load_summary *b) {
    cJSON *obj = cJSON_CreateObject();
    if (!obj) return 1;
    cJSON_AddStringToObject(obj, "endpoint", endpoint(o));
    cJSON_AddBoolToObject(obj, "stream", o->stream);
    cJSON_AddStringToObject(obj, "mode", o->open_loop ? "open" : "closed");
    if (o->open_loop) cJSON_AddNullToObject(obj, "clients");
    else cJSON_AddNumberToObject(obj, "clients", o->clients < o->requests ? o->clients : o->requests);
    if (!o->open_loop) cJSON_AddNullToObject(obj, "request_rate");
    else if (isinf(o->request_rate)) cJSON_AddStringToObject(obj, "request_rate", "inf");
    else cJSON_AddNumberToObject(obj, "request_rate", o->request_rate);
    add_num(obj, "burstiness", o->open_loop ? o->burstiness : NAN);
    if (o->open_loop && o->max_concurrency) cJSON_AddNumberToObject(obj, "max_concurrency", o->max_concurrency);
    else cJSON_AddNullToObject(obj, "max_concurrency");
    cJSON_AddNumberToObject(obj, "seed", (double)o->seed);
    cJSON_AddNumberToObject(obj, "requests", o->requests);
    cJSON_AddNumberToObject(obj, "prompt_tokens_target", o->prompt_tokens);
    cJSON_AddNumberToObject(obj, "max_tokens", o->max_tokens);
    bench_sampling_add(cJSON_AddObjectToObject(obj, "sampling"), o); /* what every request sent */
    cJSON *pc = cJSON_AddArrayToObject(obj, "percentiles");
    for (int i = 0; i < o->n_percentiles; i++) cJSON_AddItemToArray(pc, cJSON_CreateNumber(o->percentiles[i]));
    cJSON *g = cJSON_AddObjectToObject(obj, "goodput_slo_ms");
    if (o->slo_ttft_ms > 0) cJSON_AddNumberToObject(g, "ttft", o->slo_ttft_ms);
    if (o->slo_tpot_ms > 0) cJSON_AddNumberToObject(g, "tpot", o->slo_tpot_ms);
    if (o->slo_e2el_ms > 0) cJSON_AddNumberToObject(g, "e2el", o->slo_e2el_ms);
    add_summary(o, obj, a);
    if (b) {
        add_summary(o, cJSON_AddObjectToObject(obj, "peer"), b);
        cJSON *r = cJSON_AddObjectToObject(obj, "ratio");
        bool both = a->reached && b->reached;
        add_num(r, "request_throughput", both ? a->request_throughput / b->request_throughput : NAN);
        add_num(r, "output_throughput", both ? a->output_throughput / b->output_throughput : NAN);
        add_num(r, "total_token_throughput", both ? a->total_token_throughput / b->total_token_throughput : NAN);
        for (int m = 0; m < 4; m++) {
            char key[32];
            snprintf(key, sizeof key, "median_%s_ms", k_metric[m]);
            add_num(r, key, both ? dist(a, m)->median / dist(b, m)->median : NAN);
        }
        add_num(r, "kv_pool_peak_bytes", both ? a->kv.pool_peak_bytes / b->kv.pool_peak_bytes : NAN);
    }
    if (!o->json_file) return cli_print_json(obj);
    char *s = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!s) return 1;
    FILE *f = fopen(o->json_file, "w");
    int rc = 0;
    bool ok = f && fprintf(f, "%s\n", s) >= 0;
    if (f && fclose(f) != 0) ok = false;
    if (!ok) {
        fprintf(stderr, "wushkv bench: cannot write %s: %s\n", o->json_file, strerror(errno));
        rc = 1;
    }
    cJSON_free(s);
    return rc;
}
