/* `wushkv bench --url`: a load generator for OpenAI-compatible servers, measuring what
 * `vllm bench serve` measures, by its definitions. Closed loop (--clients): N client threads take
 * request numbers from one counter until --requests are sent. Open loop (--request-rate): each
 * request is due at a time drawn beforehand (bench_arrivals), and a pool of threads (at most
 * --max-concurrency) sends each one when it is due. Each request is a fresh connection
 * (http_client.c) carrying a /v1/completions (or, --chat, /v1/chat/completions) call at
 * temperature 0 (or the sampling flags) with a prompt of repeated common words. Streamed answers
 * are read event by event: every event with a non-empty choices array is a chunk (vLLM's rule), giving time to first token,
 * inter-token latency and the request's end; token counts come from the server's `usage`. A
 * monitor thread draws the progress bar (on a terminal) and samples the server's /metrics for the
 * KV pool's peak (bench_scrape.c). With --peer-url the same load then runs against a second
 * server, and the report (bench_report.c) sets the two side by side. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench/bench_load.h"
#include "metrics/mono_clock.h"
#include "http/text_buf.h"

/* An error body beyond this is cut: only its message is reported. */
#define LOAD_MAX_ERROR_BODY 4096
/* A /metrics read that takes longer is given up (the run's end waits for the monitor's last one). */
#define SCRAPE_TIMEOUT_S 10.0
/* A non-streamed answer or one SSE line larger than this is refused (the bench asks for few tokens). */
#define LOAD_MAX_BODY (64u << 20)

/* ---- prompts --------------------------------------------------------------------------------- */

/* Common English words, each one token in the usual BPE / SentencePiece vocabularies (with the
 * space before it), so N words make a prompt of about N tokens. */
static const char *const k_words[] = {
    "the",   "of",    "and",   "to",    "in",    "is",    "that",  "for",  "it",    "as",   "with",
    "was",   "on",    "be",    "at",    "by",    "this",  "had",   "not",  "are",   "but",  "from",
    "or",    "have",  "an",    "they",  "which", "one",   "you",   "were", "her",   "all",  "she",
    "there", "would", "their", "we",    "him",   "been",  "has",   "when", "who",   "will", "more",
    "no",    "if",    "out",   "so",    "said",  "what",  "up",    "its",  "about", "into", "than",
    "them",  "can",   "only",  "other", "new",   "some",  "could", "time", "these",
};
enum { N_WORDS = sizeof k_words / sizeof k_words[0] };

/* Request idx's prompt: n words starting at a different word for each request (7 is coprime to
 * 64), so no two of the first 64 prompts share a prefix that a server could cache. */
static char *make_prompt(int idx, int n) {
    size_t cap = (size_t)n * 7 + 1, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    for (int i = 0; i < n; i++) {
        const char *w = k_words[((size_t)idx * 7 + (size_t)i) % N_WORDS];
        len += (size_t)snprintf(s + len, cap - len, "%s%s", i ? " " : "", w);
    }
    s[len] = '\0';
    return s;
}

/* ---- one request ----------------------------------------------------------------------------- */

typedef struct load_run {
    const bench_load_opts *o;
    const http_target *t;
    const char *model;   /* the id /v1/models lists first */
    const char *path;    /* "/v1/completions" or "/v1/chat/completions" */
    double t0;
    const double *arrival; /* open loop: when each request is due (seconds after t0); else NULL */
    atomic_int next;     /* the next request number to send */
    atomic_int finished; /* requests answered or failed (the progress bar) */
    atomic_bool done;    /* every client thread has returned (the monitor stops) */
    req_result *results; /* o->requests */
} load_run;

typedef struct req_ctx {
    const load_run *run;
    req_result *r;
    text_buf body;       /* the whole body (non-stream, errors) or the unfinished SSE line */
    bool done_seen;      /* "data: [DONE]" */
} req_ctx;

static void fail(req_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(req_result *r, const char *fmt, ...) {
    r->ok = false;
    if (r->error[0]) return; /* the first cause is the one worth reading */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
}

static void read_usage(req_result *r, const cJSON *usage) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
    if (!cJSON_IsNumber(p) || !cJSON_IsNumber(c)) return;
    r->prompt_tokens = p->valueint;
    r->completion_tokens = c->valueint;
    r->usage_seen = true;
    /* wushkv's own: the KV bytes the request held at its peak (docs/api.md, usage.kv_cache) */
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(usage, "kv_cache"), "bytes");
    if (cJSON_IsNumber(kv)) r->kv_bytes = (long long)kv->valuedouble;
}

/* The text a choice carries: completions' "text", chat's "message.content" / "delta.content". */
static const char *choice_text(const cJSON *root, bool chat, bool stream) {
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
    const cJSON *c0 = cJSON_GetArrayItem(choices, 0);
    if (!c0) return NULL;
    const cJSON *t = chat ? cJSON_GetObjectItemCaseSensitive(
                                cJSON_GetObjectItemCaseSensitive(c0, stream ? "delta" : "message"), "content")
                          : cJSON_GetObjectItemCaseSensitive(c0, "text");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* One SSE line ("data: {...}", "data: [DONE]"; comments and other fields are skipped). */
static void sse_line(req_ctx *c, char *line) {
    size_t n = strlen(line);
    if (n && line[n - 1] == '\r') line[--n] = '\0';
    if (strncmp(line, "data:", 5) != 0) return;
    const char *data = line + 5;
    if (*data == ' ') data++;
    if (strcmp(data, "[DONE]") == 0) {
        c->done_seen = true;
        return;
    }
    double now = mono_now_s() - c->run->t0;
    cJSON *root = cJSON_Parse(data);
    if (!root) {
        fail(c->r, "unparsable event: %.200s", data);
        return;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    if (e) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        fail(c->r, "error event: %.250s", cJSON_IsString(m) ? m->valuestring : "(no message)");
    }
    /* vLLM's rule: every event whose choices array is not empty is a chunk, even with empty text
     * (a chat stream's role delta, the finish_reason event); the usage event (choices []) is not. */
    if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "choices")) > 0) {
        req_result *r = c->r;
        if (r->n_chunk == r->cap_chunk) {
            int cap = r->cap_chunk ? r->cap_chunk * 2 : 64;
            double *t = realloc(r->chunk_t, (size_t)cap * sizeof *t);
            if (!t) {
                fail(r, "out of memory");
                cJSON_Delete(root);
                return;
            }
            r->chunk_t = t;
            r->cap_chunk = cap;
        }
        r->chunk_t[r->n_chunk++] = now;
    }
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(root, "usage");
    if (cJSON_IsObject(usage)) read_usage(c->r, usage);
    cJSON_Delete(root);
}

static bool on_body(void *ud, int status, const char *data, size_t len) {
    req_ctx *c = ud;
    if (status != 200 || !c->run->o->stream) {
        size_t limit = status == 200 ? LOAD_MAX_BODY : LOAD_MAX_ERROR_BODY;
        if (!text_buf_add_limited(&c->body, data, len, limit) && status == 200) {
            fail(c->r, "response body over %u bytes", LOAD_MAX_BODY);
            return false;
        }
        return true;
    }
    /* SSE: split into lines as they complete; the unfinished tail waits for the next piece. */
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        size_t k = nl ? (size_t)(nl - data) : len;
        if (!text_buf_add_limited(&c->body, data, k, LOAD_MAX_BODY)) {
            fail(c->r, "an event line over %u bytes", LOAD_MAX_BODY);
            return false;
        }
        if (!nl) break;
        sse_line(c, c->body.p);
        c->body.len = 0;
        c->body.p[0] = '\0';
        data = nl + 1;
        len -= k + 1;
    }
    return true;
}

void bench_sampling_add(cJSON *obj, const bench_load_opts *o) {
    cJSON_AddNumberToObject(obj, "temperature", o->temperature);
    if (!isnan(o->top_p)) cJSON_AddNumberToObject(obj, "top_p", o->top_p);
    if (o->top_k != INT32_MIN) cJSON_AddNumberToObject(obj, "top_k", o->top_k);
    if (!isnan(o->min_p)) cJSON_AddNumberToObject(obj, "min_p", o->min_p);
    if (o->ignore_eos) cJSON_AddTrueToObject(obj, "ignore_eos");
}

static char *request_body(const bench_load_opts *o, const char *model, const char *prompt) {
    cJSON *b = cJSON_CreateObject();
    if (!b) return NULL;
    if (model) cJSON_AddStringToObject(b, "model", model);
    if (o->chat) {
        cJSON *msgs = cJSON_AddArrayToObject(b, "messages");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", prompt);
    } else {
        cJSON_AddStringToObject(b, "prompt", prompt);
    }
    cJSON_AddNumberToObject(b, "max_tokens", o->max_tokens);
    bench_sampling_add(b, o);
    if (o->stream) {
        cJSON_AddTrueToObject(b, "stream");
        cJSON_AddTrueToObject(cJSON_AddObjectToObject(b, "stream_options"), "include_usage");
    }
    char *s = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    return s;
}

/* The "error.message" of an error body, else its start. */
static void error_message(const text_buf *body, char *out, size_t cap) {
    cJSON *root = body->p ? cJSON_Parse(body->p) : NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "error"), "message");
    if (cJSON_IsString(m)) snprintf(out, cap, "%s", m->valuestring);
    else snprintf(out, cap, "%.200s", body->p ? body->p : "");
    cJSON_Delete(root);
}

static void run_one(load_run *run, int idx, double t_arrival) {
    const bench_load_opts *o = run->o;
    req_result *r = &run->results[idx];
    memset(r, 0, sizeof *r);
    r->ok = true;
    r->kv_bytes = -1;
    r->t_arrival = t_arrival;
    /* BOS (or the chat template) adds a token or more: one word fewer than asked. */
    char *prompt = make_prompt(idx, o->prompt_tokens > 1 ? o->prompt_tokens - 1 : 1);
    char *body = prompt ? request_body(o, run->model, prompt) : NULL;
    free(prompt);
    if (!body) {
        fail(r, "out of memory");
        return;
    }
    req_ctx c = {.run = run, .r = r};
    char err[256] = "";
    int status = 0;
    r->t_start = mono_now_s() - run->t0;
    bool done = http_request(run->t, "POST", run->path, o->api_key, body, strlen(body), o->timeout_s, on_body, &c,
                             &status, err, sizeof err);
    r->t_end = mono_now_s() - run->t0;
    free(body);
    if (!done) {
        fail(r, "%s", err);
    } else if (status != 200) {
        char msg[256];
        error_message(&c.body, msg, sizeof msg);
        fail(r, "HTTP %d: %s", status, msg);
    } else if (o->stream) {
        if (c.body.len) sse_line(&c, c.body.p); /* a last line without its newline */
        if (!c.done_seen) fail(r, "the stream ended without data: [DONE]");
        if (r->n_chunk == 0) fail(r, "the stream carried no chunk with choices (no time to first token)");
        if (!r->usage_seen) r->completion_tokens = r->n_chunk; /* a server that ignores include_usage */
    } else {
        cJSON *root = c.body.p ? cJSON_Parse(c.body.p) : NULL;
        const cJSON *usage = cJSON_GetObjectItemCaseSensitive(root, "usage");
        if (!root) fail(r, "unparsable response: %.200s", c.body.p ? c.body.p : "(empty)");
        else if (!choice_text(root, o->chat, false)) fail(r, "a response without choices[0] text");
        else if (!cJSON_IsObject(usage)) fail(r, "a response without usage");
        else read_usage(r, usage);
        cJSON_Delete(root);
    }
    free(c.body.p);
}

static void sleep_until(double t_mono) {
    double d = t_mono - mono_now_s();
    if (d <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)d, .tv_nsec = (long)((d - floor(d)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void *client_main(void *arg) {
    load_run *run = arg;
    for (;;) {
        int idx = atomic_fetch_add(&run->next, 1);
        if (idx >= run->o->requests) return NULL;
        double due;
        if (run->arrival) { /* open loop: wait for the request's arrival time (a late pool sends it at once) */
            sleep_until(run->t0 + run->arrival[idx]);
            due = run->arrival[idx];
        } else {
            due = mono_now_s() - run->t0;
        }
        run_one(run, idx, due);
        atomic_fetch_add(&run->finished, 1);
    }
}

/* ---- the monitor: progress bar and /metrics samples ------------------------------------------- */

typedef struct monitor {
    load_run *run;
    bool bar;                /* stderr is a terminal */
    bool scrape;             /* the server has wushkv's KV gauges */
    bench_kv_stats *kv;
} monitor;

static void kv_sample(bench_kv_stats *kv, const bench_scrape *s) {
    kv->samples++;
    if (isnan(kv->pool_peak_bytes) || s->used_bytes > kv->pool_peak_bytes) kv->pool_peak_bytes = s->used_bytes;
    if (!isnan(s->fp16_bytes) && (isnan(kv->pool_peak_fp16_bytes) || s->fp16_bytes > kv->pool_peak_fp16_bytes))
        kv->pool_peak_fp16_bytes = s->fp16_bytes;
    if (!isnan(s->capacity_bytes)) kv->pool_capacity_bytes = s->capacity_bytes;
}

static void draw_bar(const load_run *run, bool last) {
    int n = run->o->requests, k = atomic_load(&run->finished);
    enum { W = 30 };
    char bar[W + 1];
    int fill = n ? (int)((long long)k * W / n) : W;
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '#' : '.';
    bar[W] = '\0';
    fprintf(stderr, "\r[%s] %d/%d requests, %.1f s%s", bar, k, n, mono_now_s() - run->t0, last ? "\n" : "");
    fflush(stderr);
}

static void *monitor_main(void *arg) {
    monitor *m = arg;
    const bench_load_opts *o = m->run->o;
    double next_scrape = mono_now_s(), next_draw = 0;
    int drawn = -1;
    while (!atomic_load(&m->run->done)) {
        double now = mono_now_s();
        if (m->scrape && o->scrape_interval_s > 0 && now >= next_scrape) {
            bench_scrape s;
            if (bench_scrape_metrics(m->run->t, o->api_key, SCRAPE_TIMEOUT_S, &s)) kv_sample(m->kv, &s);
            next_scrape = now + o->scrape_interval_s;
        }
        /* redraw when a request ends, else twice a second for the clock */
        int k = atomic_load(&m->run->finished);
        if (m->bar && (k != drawn || now >= next_draw)) {
            draw_bar(m->run, false);
            drawn = k;
            next_draw = now + 0.5;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (m->bar) draw_bar(m->run, true);
    return NULL;
}

/* ---- one server: discovery, load, summary ----------------------------------------------------- */

static bool on_models_body(void *ud, int status, const char *data, size_t len) {
    (void)status;
    return text_buf_add_limited(ud, data, len, LOAD_MAX_BODY);
}

/* GET /v1/models: the server answers and names its model (what the requests then ask for). */
static bool discover(const bench_load_opts *o, http_target *t, load_summary *s) {
    char err[256];
    if (!http_target_resolve(t, err, sizeof err)) {
        snprintf(s->error, sizeof s->error, "%s: %s", t->url, err);
        return false;
    }
    text_buf body = {0};
    int status = 0;
    bool ok = http_request(t, "GET", "/v1/models", o->api_key, NULL, 0, o->timeout_s, on_models_body, &body,
                           &status, err, sizeof err);
    if (!ok) {
        snprintf(s->error, sizeof s->error, "cannot reach %s: %s", t->url, err);
    } else if (status != 200) {
        char msg[256];
        error_message(&body, msg, sizeof msg);
        snprintf(s->error, sizeof s->error, "%s/v1/models: HTTP %d: %s", t->url, status, msg);
        ok = false;
    } else {
        cJSON *root = body.p ? cJSON_Parse(body.p) : NULL;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "data"), 0), "id");
        if (cJSON_IsString(id)) {
            snprintf(s->model, sizeof s->model, "%s", id->valuestring);
        } else {
            snprintf(s->error, sizeof s->error, "%s/v1/models lists no model", t->url);
            ok = false;
        }
        cJSON_Delete(root);
    }
    free(body.p);
    s->reached = ok;
    return ok;
}

static int cmp_event(const void *a, const void *b) {
    const double *x = a, *y = b; /* (time, +1 start / -1 end): an end before a start at one time */
    if (x[0] != y[0]) return (x[0] > y[0]) - (x[0] < y[0]);
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* A request's end-to-end latency, vLLM's way: streamed, to its last chunk (the [DONE] and usage
 * events are not tokens); otherwise to the end of the response. */
static double latency_s(const bench_load_opts *o, const req_result *r) {
    return o->stream ? r->chunk_t[r->n_chunk - 1] - r->t_start : r->t_end - r->t_start;
}

/* vllm bench serve's calculate_metrics, on our results: see docs/benchmarks.md for each field. */
static void summarize(const bench_load_opts *o, req_result *res, double dur, load_summary *s) {
    size_t n = (size_t)o->requests, n_itl = 0;
    for (size_t i = 0; i < n; i++)
        if (res[i].ok && res[i].n_chunk > 1) n_itl += (size_t)res[i].n_chunk - 1;
    double *ttft = malloc((n + 1) * sizeof *ttft), *e2e = malloc((n + 1) * sizeof *e2e);
    double *tpot = malloc((n + 1) * sizeof *tpot), *kvb = malloc((n + 1) * sizeof *kvb);
    double *itl = malloc((n_itl + 1) * sizeof *itl), *ev = malloc((2 * n + 1) * 2 * sizeof *ev);
    if (!ttft || !e2e || !tpot || !kvb || !itl || !ev) {
        snprintf(s->error, sizeof s->error, "out of memory summarizing %zu requests", n);
        s->failed = (int)n;
        goto out;
    }
    size_t n_ttft = 0, n_e2e = 0, n_tpot = 0, n_kv = 0, n_ev = 0;
    n_itl = 0;
    double first_start = INFINITY, last_end = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        const req_result *r = &res[i];
        if (!r->ok) {
            s->failed++;
            if (!s->error[0]) snprintf(s->error, sizeof s->error, "request %zu: %s", i, r->error);
            continue;
        }
        s->completed++;
        s->without_usage += !r->usage_seen;
        s->total_input += r->prompt_tokens;
        s->total_output += r->completion_tokens;
        double lat = latency_s(o, r), t1 = o->stream ? r->chunk_t[0] - r->t_start : NAN;
        e2e[n_e2e++] = lat * 1e3;
        /* TPOT excludes the first token: (latency - TTFT) / (output tokens - 1); 0 for goodput
         * when there is one token only, and then left out of the TPOT statistics. */
        double tp = 0.0;
        if (o->stream) {
            ttft[n_ttft++] = t1 * 1e3;
            if (r->completion_tokens > 1) {
                tp = (lat - t1) / (r->completion_tokens - 1);
                tpot[n_tpot++] = tp * 1e3;
            }
            for (int k = 1; k < r->n_chunk; k++) itl[n_itl++] = (r->chunk_t[k] - r->chunk_t[k - 1]) * 1e3;
        }
        bool good = (o->slo_ttft_ms <= 0 || (o->stream && t1 * 1e3 <= o->slo_ttft_ms)) &&
                    (o->slo_tpot_ms <= 0 || (o->stream && tp * 1e3 <= o->slo_tpot_ms)) &&
                    (o->slo_e2el_ms <= 0 || lat * 1e3 <= o->slo_e2el_ms);
        s->good += good;
        if (r->kv_bytes >= 0) kvb[n_kv++] = (double)r->kv_bytes;
        /* peak concurrency: a sweep over the half-open intervals [start, start + latency) */
        ev[2 * n_ev] = r->t_start, ev[2 * n_ev + 1] = +1, n_ev++;
        ev[2 * n_ev] = r->t_start + lat, ev[2 * n_ev + 1] = -1, n_ev++;
        if (r->t_start < first_start) first_start = r->t_start;
        if (r->t_start + lat > last_end) last_end = r->t_start + lat;
    }
    s->duration_s = dur;
    s->request_throughput = dur > 0 ? s->completed / dur : NAN;
    s->request_goodput = dur > 0 && (o->slo_ttft_ms > 0 || o->slo_tpot_ms > 0 || o->slo_e2el_ms > 0)
                             ? s->good / dur
                             : NAN;
    s->output_throughput = dur > 0 ? (double)s->total_output / dur : NAN;
    s->total_token_throughput = dur > 0 ? (double)(s->total_input + s->total_output) / dur : NAN;
    bench_dist_of(ttft, n_ttft, o->percentiles, o->n_percentiles, &s->ttft);
    bench_dist_of(tpot, n_tpot, o->percentiles, o->n_percentiles, &s->tpot);
    bench_dist_of(itl, n_itl, o->percentiles, o->n_percentiles, &s->itl);
    bench_dist_of(e2e, n_e2e, o->percentiles, o->n_percentiles, &s->e2el);

    qsort(ev, n_ev, 2 * sizeof *ev, cmp_event);
    int cur = 0;
    for (size_t i = 0; i < n_ev; i++) {
        cur += (int)ev[2 * i + 1];
        if (cur > s->max_concurrent_requests) s->max_concurrent_requests = cur;
    }
    /* peak output tokens/s: chunks (vLLM counts its token timestamps, one per chunk) in one-second
     * buckets from the first request's start */
    if (o->stream && s->completed > 0) {
        size_t nb = (size_t)ceil(last_end - first_start) + 1;
        int *bucket = calloc(nb, sizeof *bucket);
        if (bucket) {
            for (size_t i = 0; i < n; i++)
                for (int k = 0; res[i].ok && k < res[i].n_chunk; k++) {
                    size_t b = (size_t)(res[i].chunk_t[k] - first_start);
                    if (b < nb) bucket[b]++;
                }
            for (size_t b = 0; b < nb; b++)
                if (bucket[b] > s->max_output_tokens_per_s) s->max_output_tokens_per_s = bucket[b];
            free(bucket);
        }
    } else {
        s->max_output_tokens_per_s = NAN;
    }

    s->kv.n_req_kv = (int)n_kv;
    s->kv.req_kv_p50 = bench_percentile(kvb, n_kv, 0.50);
    s->kv.req_kv_p99 = bench_percentile(kvb, n_kv, 0.99);
    s->kv.req_kv_max = n_kv ? kvb[n_kv - 1] : NAN; /* sorted by the percentiles */
out:
    free(ttft);
    free(e2e);
    free(tpot);
    free(kvb);
    free(itl);
    free(ev);
}

static bool start_thread(pthread_t *th, void *(*fn)(void *), void *arg) {
    pthread_attr_t a;
    if (pthread_attr_init(&a) != 0) return false;
    /* up to 1024 clients: their stacks need little (a request's buffers are on the heap) */
    pthread_attr_setstacksize(&a, 256u << 10);
    bool ok = pthread_create(th, &a, fn, arg) == 0;
    pthread_attr_destroy(&a);
    return ok;
}

/* Runs the whole load against url. False when the server could not be reached at all. */
static bool run_load(const bench_load_opts *o, const char *url, load_summary *s) {
    memset(s, 0, sizeof *s);
    s->kv = (bench_kv_stats){.pool_peak_bytes = NAN, .pool_capacity_bytes = NAN, .pool_peak_fp16_bytes = NAN,
                             .preemptions = NAN};
    snprintf(s->url, sizeof s->url, "%s", url);
    http_target t;
    char err[256];
    if (!http_target_parse(url, &t, err, sizeof err)) { /* cmd_bench.c checked the syntax already */
        snprintf(s->error, sizeof s->error, "%s", err);
        return false;
    }
    if (!discover(o, &t, s)) return false;
    int threads = o->open_loop ? (o->max_concurrency ? o->max_concurrency : BENCH_MAX_THREADS) : o->clients;
    if (threads > o->requests) threads = o->requests;
    if (o->open_loop)
        fprintf(stderr, "wushkv bench: %s (model '%s'): %d requests at %g/s (burstiness %g, seed %llu), %s...\n", url,
                s->model, o->requests, o->request_rate, o->burstiness, o->seed,
                o->max_concurrency ? "at most --max-concurrency in flight" : "no concurrency limit");
    else
        fprintf(stderr, "wushkv bench: %s (model '%s'): %d requests from %d clients...\n", url, s->model,
                o->requests, threads);

    load_run run = {.o = o, .t = &t, .model = s->model,
                    .path = o->chat ? "/v1/chat/completions" : "/v1/completions"};
    atomic_init(&run.next, 0);
    atomic_init(&run.finished, 0);
    atomic_init(&run.done, false);
    run.results = calloc((size_t)o->requests, sizeof *run.results);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    double *arrival = o->open_loop ? malloc((size_t)o->requests * sizeof *arrival) : NULL;
    if (!run.results || !th || (o->open_loop && !arrival)) {
        free(run.results);
        free(th);
        free(arrival);
        snprintf(s->error, sizeof s->error, "out of memory for %d requests", o->requests);
        return false;
    }
    if (arrival) bench_arrivals(arrival, o->requests, o->request_rate, o->burstiness, o->seed);
    run.arrival = arrival;

    /* the server's KV figures before the run: whether it has them at all, and the counters' start */
    bench_scrape before, after;
    bool scrape = bench_scrape_metrics(&t, o->api_key, SCRAPE_TIMEOUT_S, &before);
    s->kv.metrics = scrape;
    if (scrape) kv_sample(&s->kv, &before);

    monitor mon = {.run = &run, .bar = isatty(STDERR_FILENO), .scrape = scrape, .kv = &s->kv};
    run.t0 = mono_now_s();
    pthread_t mon_th;
    bool mon_started = (mon.bar || scrape) && start_thread(&mon_th, monitor_main, &mon);
    int started = 0;
    for (; started < threads; started++)
        if (!start_thread(&th[started], client_main, &run)) break;
    if (started == 0) client_main(&run); /* no thread at all: still measure, from this one */
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    double dur = mono_now_s() - run.t0;
    atomic_store(&run.done, true);
    if (mon_started) pthread_join(mon_th, NULL);
    if (started < threads)
        fprintf(stderr, "wushkv bench: only %d of %d client threads could start\n", started, threads);
    s->threads = started ? started : 1;
    if (scrape && bench_scrape_metrics(&t, o->api_key, SCRAPE_TIMEOUT_S, &after)) {
        kv_sample(&s->kv, &after);
        if (!isnan(before.preemptions) && !isnan(after.preemptions))
            s->kv.preemptions = after.preemptions - before.preemptions;
    }

    summarize(o, run.results, dur, s);
    s->res = run.results;
    free(th);
    free(arrival);
    fprintf(stderr, "wushkv bench: %s: %d ok, %d failed in %.2f s\n", url, s->completed, s->failed, dur);
    return true;
}

static void free_summary(const bench_load_opts *o, load_summary *s) {
    for (int i = 0; s->res && i < o->requests; i++) free(s->res[i].chunk_t);
    free(s->res);
    s->res = NULL;
}

int bench_load_run(const bench_load_opts *o) {
    load_summary a, b;
    if (!run_load(o, o->url, &a)) {
        if (o->json || o->json_file) bench_report_json(o, &a, NULL); /* {"url": ..., "error": ...} */
        fprintf(stderr, "wushkv bench: %s\n", a.error);
        return 1;
    }
    bool peer_ok = true;
    if (o->peer_url) peer_ok = run_load(o, o->peer_url, &b);
    const load_summary *pb = o->peer_url ? &b : NULL;
    int rc = 0;
    if (!o->json || o->json_file) bench_report_text(o, &a, pb);
    if (o->json || o->json_file) rc = bench_report_json(o, &a, pb);
    if (a.failed) {
        fprintf(stderr, "wushkv bench: %d of %d requests to %s failed; first: %s\n", a.failed, o->requests, a.url,
                a.error);
        rc = 1;
    }
    if (o->peer_url && (!peer_ok || b.failed)) {
        if (!peer_ok) fprintf(stderr, "wushkv bench: peer: %s\n", b.error);
        else
            fprintf(stderr, "wushkv bench: %d of %d requests to %s failed; first: %s\n", b.failed, o->requests, b.url,
                    b.error);
        rc = 1;
    }
    free_summary(o, &a);
    if (o->peer_url) free_summary(o, &b);
    return rc;
}
