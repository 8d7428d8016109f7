/* Prometheus metrics: one mutex-guarded struct written by the engine thread (pool gauges,
 * per-request histograms) and the loop thread (HTTP status counts), rendered as text format
 * 0.0.4. Updates are a few per step, so one lock costs nothing measurable. */
#include "metrics/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUCKETS 24

typedef struct histogram {
    const double *le; /* upper bounds, ascending; +Inf is implicit */
    int n;
    uint64_t count[MAX_BUCKETS + 1]; /* per bucket, not cumulative; [n] is +Inf */
    double sum;
    uint64_t total;
} histogram;

/* Bucket bounds as vLLM's where vLLM has the metric, so dashboards built for it read ours. */
static const double k_ttft[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double k_tpot[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                                1.0,  2.5,   5.0,  7.5,   10.0, 20.0, 40.0, 80.0};
static const double k_e2e[] = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                               30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const double k_tokens[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
static const double k_bytes[] = {4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
                                 268435456, 1073741824, 4294967296.0};
static const double k_step[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0};

enum { FIN_STOP, FIN_LENGTH, FIN_ABORT, FIN_ERROR, N_FIN };
static const char *const k_fin_names[N_FIN] = {"stop", "length", "abort", "error"};

/* HTTP statuses we count by exact code; anything else lands in "other". */
static const int k_statuses[] = {200, 400, 401, 404, 405, 408, 413, 415, 429, 431, 500, 503};
enum { N_STATUS = sizeof k_statuses / sizeof k_statuses[0] };

struct metrics {
    pthread_mutex_t mu;
    metrics_pool pool;
    uint64_t prompt_tokens, generation_tokens, preemptions;
    uint64_t prefix_queries, prefix_hits;
    uint64_t finished[N_FIN];
    uint64_t http[N_STATUS + 1];
    int conns_open;
    uint64_t conns_rejected, conns_reaped;
    histogram ttft, tpot, itl, e2e, queue, prefill, decode, prompt_len, gen_len, max_tokens, kv_bytes, step_time,
        step_tokens;
};

static void hist_init(histogram *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    h->le = le;
    h->n = n;
}

static void hist_add(histogram *h, double v) {
    int i = 0;
    while (i < h->n && v > h->le[i]) i++;
    h->count[i]++;
    h->sum += v;
    h->total++;
}

#define HIST_INIT(h, arr) hist_init(&(h), (arr), (int)(sizeof(arr) / sizeof((arr)[0])))

metrics *metrics_create(void) {
    metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    HIST_INIT(m->ttft, k_ttft);
    HIST_INIT(m->tpot, k_tpot);
    HIST_INIT(m->itl, k_tpot);
    HIST_INIT(m->prefill, k_e2e);
    HIST_INIT(m->decode, k_e2e);
    HIST_INIT(m->max_tokens, k_tokens);
    HIST_INIT(m->e2e, k_e2e);
    HIST_INIT(m->queue, k_e2e);
    HIST_INIT(m->prompt_len, k_tokens);
    HIST_INIT(m->gen_len, k_tokens);
    HIST_INIT(m->kv_bytes, k_bytes);
    HIST_INIT(m->step_time, k_step);
    HIST_INIT(m->step_tokens, k_tokens);
    return m;
}

void metrics_free(metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void metrics_set_pool(metrics *m, const metrics_pool *p) {
    pthread_mutex_lock(&m->mu);
    m->pool = *p;
    pthread_mutex_unlock(&m->mu);
}

void metrics_tokens(metrics *m, int prompt_tokens, int generation_tokens) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt_tokens;
    m->generation_tokens += (uint64_t)generation_tokens;
    pthread_mutex_unlock(&m->mu);
}

void metrics_preemption(metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->preemptions++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_prefix_cache(metrics *m, int queries, int hits) {
    pthread_mutex_lock(&m->mu);
    m->prefix_queries += (uint64_t)(queries > 0 ? queries : 0);
    m->prefix_hits += (uint64_t)(hits > 0 ? hits : 0);
    pthread_mutex_unlock(&m->mu);
}

void metrics_request_done(metrics *m, const metrics_request *r) {
    int f = FIN_ERROR;
    for (int i = 0; i < N_FIN; i++)
        if (r->finish_reason && strcmp(r->finish_reason, k_fin_names[i]) == 0) f = i;
    pthread_mutex_lock(&m->mu);
    m->finished[f]++;
    if (r->queue_s >= 0) hist_add(&m->queue, r->queue_s);
    if (r->ttft_s >= 0) hist_add(&m->ttft, r->ttft_s);
    if (r->prefill_s >= 0) hist_add(&m->prefill, r->prefill_s);
    if (r->decode_s >= 0) hist_add(&m->decode, r->decode_s);
    if (r->tpot_s >= 0) hist_add(&m->tpot, r->tpot_s);
    if (r->e2e_s >= 0) hist_add(&m->e2e, r->e2e_s);
    hist_add(&m->prompt_len, r->prompt_tokens);
    hist_add(&m->gen_len, r->generation_tokens);
    if (r->max_tokens > 0) hist_add(&m->max_tokens, r->max_tokens);
    hist_add(&m->kv_bytes, (double)r->kv_bytes);
    pthread_mutex_unlock(&m->mu);
}

void metrics_inter_token(metrics *m, double seconds) {
    pthread_mutex_lock(&m->mu);
    hist_add(&m->itl, seconds);
    pthread_mutex_unlock(&m->mu);
}

void metrics_step(metrics *m, int batch_sequences, int batch_tokens, double seconds) {
    (void)batch_sequences;
    pthread_mutex_lock(&m->mu);
    hist_add(&m->step_time, seconds);
    hist_add(&m->step_tokens, batch_tokens);
    pthread_mutex_unlock(&m->mu);
}

void metrics_http_response(metrics *m, int status) {
    int i = 0;
    while (i < N_STATUS && k_statuses[i] != status) i++;
    pthread_mutex_lock(&m->mu);
    m->http[i]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_connections(metrics *m, int open, uint64_t rejected, uint64_t reaped) {
    pthread_mutex_lock(&m->mu);
    m->conns_open = open;
    m->conns_rejected = rejected;
    m->conns_reaped = reaped;
    pthread_mutex_unlock(&m->mu);
}

/* ---- text exposition -------------------------------------------------------------------------- */

typedef struct out {
    char *p;
    size_t len, cap;
    bool oom;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = o->oom ? -1 : vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = true;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap * 2 + (size_t)n;
        char *p = realloc(o->p, cap);
        if (!p) {
            o->oom = true;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
}

static void header(out *o, const char *name, const char *type, const char *help) {
    put(o, "# HELP wushkv:%s %s\n# TYPE wushkv:%s %s\n", name, help, name, type);
}

static void gauge(out *o, const char *name, const char *labels, double v, const char *help) {
    header(o, name, "gauge", help);
    put(o, "wushkv:%s{%s} %.17g\n", name, labels, v);
}

static void counter(out *o, const char *name, const char *labels, double v, const char *help) {
    header(o, name, "counter", help);
    put(o, "wushkv:%s{%s} %.17g\n", name, labels, v);
}

static void hist(out *o, const char *name, const char *labels, const histogram *h, const char *help) {
    header(o, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->count[i];
        put(o, "wushkv:%s_bucket{%s,le=\"%.17g\"} %llu\n", name, labels, h->le[i], (unsigned long long)cum);
    }
    cum += h->count[h->n];
    put(o, "wushkv:%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
    put(o, "wushkv:%s_sum{%s} %.17g\n", name, labels, h->sum);
    put(o, "wushkv:%s_count{%s} %llu\n", name, labels, (unsigned long long)h->total);
}

char *metrics_render(metrics *m, const char *model_name, size_t *len) {
    out o = {.cap = 16384};
    o.p = malloc(o.cap);
    if (!o.p) return NULL;
    /* Label values escape backslash, quote and newline (the text format's rule). */
    char label[320], esc[280];
    size_t j = 0;
    for (const char *s = model_name ? model_name : ""; *s && j + 3 < sizeof esc; s++) {
        if (*s == '\\' || *s == '"') esc[j++] = '\\', esc[j++] = *s;
        else if (*s == '\n') esc[j++] = '\\', esc[j++] = 'n';
        else esc[j++] = *s;
    }
    esc[j] = 0;
    snprintf(label, sizeof label, "model_name=\"%s\"", esc);

    pthread_mutex_lock(&m->mu);
    metrics_pool p = m->pool;
    gauge(&o, "num_requests_running", label, p.running, "Requests whose sequence is in the running batch.");
    gauge(&o, "num_requests_waiting", label, p.waiting, "Requests waiting for a sequence slot.");
    gauge(&o, "kv_cache_usage_perc", label,
          p.kv_capacity_bytes ? (double)p.kv_used_bytes / (double)p.kv_capacity_bytes : 0.0,
          "KV cache usage, 1 = full.");
    gauge(&o, "kv_cache_used_bytes", label, (double)p.kv_used_bytes, "KV cache bytes held by sequences.");
    gauge(&o, "kv_cache_capacity_bytes", label, (double)p.kv_capacity_bytes, "KV cache bytes in the pool.");
    gauge(&o, "kv_cache_fp16_equivalent_bytes", label, (double)p.kv_fp16_bytes,
          "Bytes an f16 KV cache would hold for the tokens the running sequences hold.");
    gauge(&o, "kv_cache_used_blocks", label, p.kv_used_blocks,
          "KV cache blocks held by sequences (a block shared by several counted once).");
    gauge(&o, "kv_cache_cached_blocks", label, p.kv_cached_blocks,
          "KV cache blocks only the prefix cache keeps (evicted when an allocation needs them).");
    gauge(&o, "kv_cache_cached_bytes", label, (double)p.kv_cached_bytes,
          "Bytes the prefix cache keeps: those blocks, parked sequences' window slots, window snapshots.");
    gauge(&o, "kv_cache_total_blocks", label, p.kv_capacity_blocks, "KV cache blocks in the pool.");
    counter(&o, "prompt_tokens_total", label, (double)m->prompt_tokens, "Prompt tokens prefilled.");
    counter(&o, "generation_tokens_total", label, (double)m->generation_tokens, "Tokens generated.");
    counter(&o, "num_preemptions_total", label, (double)m->preemptions, "Sequences preempted (recomputed later).");
    counter(&o, "prefix_cache_queries_total", label, (double)m->prefix_queries,
            "Prefix cache queries, in prompt tokens of new requests looked up.");
    counter(&o, "prefix_cache_hits_total", label, (double)m->prefix_hits,
            "Prefix cache hits, in prompt tokens found cached.");
    header(&o, "request_success_total", "counter", "Requests finished, by reason.");
    for (int i = 0; i < N_FIN; i++)
        put(&o, "wushkv:request_success_total{%s,finished_reason=\"%s\"} %llu\n", label, k_fin_names[i],
            (unsigned long long)m->finished[i]);
    header(&o, "http_responses_total", "counter", "HTTP responses, by status.");
    for (int i = 0; i <= N_STATUS; i++) {
        char code[16];
        if (i < N_STATUS) snprintf(code, sizeof code, "%d", k_statuses[i]);
        else snprintf(code, sizeof code, "other");
        put(&o, "wushkv:http_responses_total{%s,status=\"%s\"} %llu\n", label, code, (unsigned long long)m->http[i]);
    }
    gauge(&o, "http_connections", label, m->conns_open, "HTTP connections open.");
    counter(&o, "http_connections_rejected_total", label, (double)m->conns_rejected,
            "Connections beyond --max-connections with no idle one to reap (503, or /health only, then closed).");
    counter(&o, "http_connections_reaped_total", label, (double)m->conns_reaped,
            "Idle keep-alive connections closed to make room for a new one (--max-connections).");
    hist(&o, "time_to_first_token_seconds", label, &m->ttft, "Time from request arrival to its first token.");
    hist(&o, "request_time_per_output_token_seconds", label, &m->tpot,
         "Mean time between output tokens, per request (decode time / (output tokens - 1)).");
    hist(&o, "inter_token_latency_seconds", label, &m->itl, "Time between two consecutive output tokens of a request.");
    hist(&o, "e2e_request_latency_seconds", label, &m->e2e, "Time from request arrival to its end.");
    hist(&o, "request_queue_time_seconds", label, &m->queue, "Time a request waited for a sequence slot.");
    hist(&o, "request_prefill_time_seconds", label, &m->prefill, "Time from a request's admission to its first token.");
    hist(&o, "request_decode_time_seconds", label, &m->decode, "Time from a request's first token to its last.");
    hist(&o, "request_prompt_tokens", label, &m->prompt_len, "Prompt length of finished requests.");
    hist(&o, "request_generation_tokens", label, &m->gen_len, "Tokens generated by finished requests.");
    hist(&o, "request_params_max_tokens", label, &m->max_tokens, "The max_tokens parameter of finished requests.");
    hist(&o, "request_kv_cache_bytes", label, &m->kv_bytes, "Peak KV cache bytes held by a finished request.");
    hist(&o, "iteration_tokens_total", label, &m->step_tokens, "Tokens carried by one engine step (all sequences).");
    hist(&o, "engine_step_seconds", label, &m->step_time, "Duration of one forward step (all sequences).");
    pthread_mutex_unlock(&m->mu);
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    *len = o.len;
    return o.p;
}

/* ---- the dashboard's JSON -------------------------------------------------------------------- */

static cJSON *hist_json(const histogram *h) {
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddNumberToObject(o, "sum", h->sum);
        cJSON_AddNumberToObject(o, "count", (double)h->total);
    }
    return o;
}

cJSON *metrics_state(metrics *m) {
    cJSON *o = cJSON_CreateObject(), *pool = cJSON_CreateObject(), *reqs = cJSON_CreateArray();
    cJSON *counters = cJSON_CreateObject();
    if (!o || !pool || !reqs || !counters) {
        cJSON_Delete(o);
        cJSON_Delete(pool);
        cJSON_Delete(reqs);
        cJSON_Delete(counters);
        return NULL;
    }
    pthread_mutex_lock(&m->mu);
    const metrics_pool *p = &m->pool;
    cJSON_AddNumberToObject(pool, "used_bytes", (double)p->kv_used_bytes);
    cJSON_AddNumberToObject(pool, "capacity_bytes", (double)p->kv_capacity_bytes);
    cJSON_AddNumberToObject(pool, "fp16_bytes", (double)p->kv_fp16_bytes);
    cJSON_AddNumberToObject(pool, "used_blocks", p->kv_used_blocks);
    cJSON_AddNumberToObject(pool, "cached_blocks", p->kv_cached_blocks);
    cJSON_AddNumberToObject(pool, "cached_bytes", (double)p->kv_cached_bytes);
    cJSON_AddNumberToObject(pool, "total_blocks", p->kv_capacity_blocks);
    cJSON_AddItemToObject(o, "pool", pool);
    cJSON_AddNumberToObject(o, "running", p->running);
    cJSON_AddNumberToObject(o, "waiting", p->waiting);
    uint64_t finished = 0;
    for (int i = 0; i < N_FIN; i++) finished += m->finished[i];
    cJSON_AddNumberToObject(counters, "prompt_tokens", (double)m->prompt_tokens);
    cJSON_AddNumberToObject(counters, "generation_tokens", (double)m->generation_tokens);
    cJSON_AddNumberToObject(counters, "requests_finished", (double)finished);
    cJSON_AddNumberToObject(counters, "preemptions", (double)m->preemptions);
    cJSON_AddNumberToObject(counters, "prefix_cache_queries", (double)m->prefix_queries);
    cJSON_AddNumberToObject(counters, "prefix_cache_hits", (double)m->prefix_hits);
    cJSON_AddItemToObject(o, "counters", counters);
    cJSON_AddItemToObject(o, "ttft", hist_json(&m->ttft));
    cJSON_AddItemToObject(o, "itl", hist_json(&m->itl));
    cJSON_AddItemToObject(o, "e2e", hist_json(&m->e2e));
    static const char *const k_state[] = {"waiting", "prefill", "decode"};
    for (int i = 0; i < p->n_live; i++) {
        const metrics_live *l = &p->live[i];
        cJSON *r = cJSON_CreateObject();
        if (!r) continue;
        cJSON_AddNumberToObject(r, "id", (double)l->id);
        cJSON_AddStringToObject(r, "state", k_state[l->state == 'p' ? 1 : l->state == 'd' ? 2 : 0]);
        cJSON_AddNumberToObject(r, "prompt_tokens", l->prompt_tokens);
        cJSON_AddNumberToObject(r, "generated_tokens", l->generated_tokens);
        cJSON_AddNumberToObject(r, "kv_bytes", (double)l->kv_bytes);
        cJSON_AddNumberToObject(r, "fp16_bytes", (double)l->fp16_bytes);
        cJSON_AddNumberToObject(r, "age_s", l->age_s);
        cJSON_AddItemToArray(reqs, r);
    }
    pthread_mutex_unlock(&m->mu);
    cJSON_AddItemToObject(o, "requests", reqs);
    return o;
}
