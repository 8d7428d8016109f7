/* `wushkv bench --url`: a load generator for OpenAI-compatible servers. N client threads take
 * request numbers from one counter until --requests are sent; each request is a fresh connection
 * (http_client.c) carrying a /v1/completions (or, --chat, /v1/chat/completions) call at
 * temperature 0 with a prompt of repeated common words. Streamed answers are read event by event:
 * the arrival of each chunk with text gives time to first token and the gaps between tokens; the
 * token counts come from the server's `usage` (stream_options.include_usage when streaming).
 * With --peer-url the same load then runs against a second server, and the report sets the two
 * side by side. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bench/bench.h"
#include "bench/http_client.h"
#include "metrics/mono_clock.h"
#include "http/text_buf.h"

/* An error body beyond this is cut: only its message is reported. */
#define LOAD_MAX_ERROR_BODY 4096
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

typedef struct req_result {
    bool ok;
    double t_start, t_end;          /* seconds since the run started */
    double *chunk_t;                /* arrival of each chunk with text (stream) */
    int n_chunk, cap_chunk;
    int prompt_tokens, completion_tokens;
    bool usage_seen;
    char error[320];
} req_result;

typedef struct load_run {
    const bench_load_opts *o;
    const http_target *t;
    const char *model;   /* the id /v1/models lists first */
    const char *path;    /* "/v1/completions" or "/v1/chat/completions" */
    double t0;
    atomic_int next;     /* the next request number to send */
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
    const char *text = choice_text(root, c->run->o->chat, true);
    if (text && text[0]) {
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
        r->chunk_t[r->n_chunk++] = mono_now_s() - c->run->t0;
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
    cJSON_AddNumberToObject(b, "temperature", 0);
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

static void run_one(load_run *run, int idx) {
    const bench_load_opts *o = run->o;
    req_result *r = &run->results[idx];
    memset(r, 0, sizeof *r);
    r->ok = true;
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

static void *client_main(void *arg) {
    load_run *run = arg;
    for (;;) {
        int idx = atomic_fetch_add(&run->next, 1);
        if (idx >= run->o->requests) return NULL;
        run_one(run, idx);
    }
}

/* ---- one server: discovery, load, summary ----------------------------------------------------- */

typedef struct load_summary {
    char url[512], model[256];
    bool reached;                 /* /v1/models answered */
    char error[1024];             /* why not, or the first failed request's error */
    int ok, failed, without_usage;
    double wall_s, rps, out_tps, total_tps;
    long long prompt_tokens, completion_tokens;
    double ttft_ms[3], itl_ms[2], e2e_ms[3]; /* p50 p95 p99 / p50 p95; NAN when none */
} load_summary;

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

static void summarize(const bench_load_opts *o, const req_result *res, double wall, load_summary *s) {
    size_t n = (size_t)o->requests, n_itl = 0;
    for (size_t i = 0; i < n; i++)
        if (res[i].ok && res[i].n_chunk > 1) n_itl += (size_t)res[i].n_chunk - 1;
    double *ttft = malloc((n + 1) * sizeof *ttft), *e2e = malloc((n + 1) * sizeof *e2e);
    double *itl = malloc((n_itl + 1) * sizeof *itl);
    size_t n_ttft = 0, n_e2e = 0;
    n_itl = 0;
    for (size_t i = 0; i < n; i++) {
        const req_result *r = &res[i];
        if (!r->ok) {
            s->failed++;
            if (!s->error[0]) snprintf(s->error, sizeof s->error, "request %zu: %s", i, r->error);
            continue;
        }
        s->ok++;
        s->without_usage += !r->usage_seen;
        s->prompt_tokens += r->prompt_tokens;
        s->completion_tokens += r->completion_tokens;
        if (e2e) e2e[n_e2e++] = (r->t_end - r->t_start) * 1e3;
        if (ttft && r->n_chunk > 0) ttft[n_ttft++] = (r->chunk_t[0] - r->t_start) * 1e3;
        for (int k = 1; itl && k < r->n_chunk; k++) itl[n_itl++] = (r->chunk_t[k] - r->chunk_t[k - 1]) * 1e3;
    }
    s->wall_s = wall;
    s->rps = wall > 0 ? s->ok / wall : 0;
    s->out_tps = wall > 0 ? (double)s->completion_tokens / wall : 0;
    s->total_tps = wall > 0 ? (double)(s->prompt_tokens + s->completion_tokens) / wall : 0;
    const double q3[3] = {0.50, 0.95, 0.99};
    for (int k = 0; k < 3; k++) {
        s->ttft_ms[k] = ttft && o->stream ? bench_percentile(ttft, n_ttft, q3[k]) : NAN;
        s->e2e_ms[k] = e2e ? bench_percentile(e2e, n_e2e, q3[k]) : NAN;
        if (k < 2) s->itl_ms[k] = itl && o->stream ? bench_percentile(itl, n_itl, q3[k]) : NAN;
    }
    free(ttft);
    free(e2e);
    free(itl);
}

/* Runs the whole load against t. False when the server could not be reached at all. */
static bool run_load(const bench_load_opts *o, const char *url, load_summary *s) {
    memset(s, 0, sizeof *s);
    snprintf(s->url, sizeof s->url, "%s", url);
    http_target t;
    char err[256];
    if (!http_target_parse(url, &t, err, sizeof err)) { /* cmd_bench.c checked the syntax already */
        snprintf(s->error, sizeof s->error, "%s", err);
        return false;
    }
    if (!discover(o, &t, s)) return false;
    int clients = o->clients < o->requests ? o->clients : o->requests;
    fprintf(stderr, "wushkv bench: %s (model '%s'): %d requests from %d clients...\n", url, s->model, o->requests,
            clients);

    load_run run = {.o = o, .t = &t, .model = s->model,
                    .path = o->chat ? "/v1/chat/completions" : "/v1/completions"};
    atomic_init(&run.next, 0);
    run.results = calloc((size_t)o->requests, sizeof *run.results);
    pthread_t *th = calloc((size_t)clients, sizeof *th);
    if (!run.results || !th) {
        free(run.results);
        free(th);
        snprintf(s->error, sizeof s->error, "out of memory for %d requests", o->requests);
        return false;
    }
    run.t0 = mono_now_s();
    int started = 0;
    for (; started < clients; started++)
        if (pthread_create(&th[started], NULL, client_main, &run) != 0) break;
    if (started == 0) client_main(&run); /* no thread at all: still measure, from this one */
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    double wall = mono_now_s() - run.t0;
    if (started < clients)
        fprintf(stderr, "wushkv bench: only %d of %d client threads could start\n", started, clients);

    summarize(o, run.results, wall, s);
    for (int i = 0; i < o->requests; i++) free(run.results[i].chunk_t);
    free(run.results);
    free(th);
    fprintf(stderr, "wushkv bench: %s: %d ok, %d failed in %.2f s\n", url, s->ok, s->failed, wall);
    return true;
}

/* ---- report ---------------------------------------------------------------------------------- */

static double round_to(double x, double unit) { return round(x / unit) * unit; }

static void add_num(cJSON *obj, const char *key, double v, double unit) {
    if (isnan(v) || isinf(v)) cJSON_AddNullToObject(obj, key);
    else cJSON_AddNumberToObject(obj, key, round_to(v, unit));
}

static void add_percentiles(cJSON *obj, const char *key, const double *v, int n) {
    static const char *const names[3] = {"p50", "p95", "p99"};
    if (isnan(v[0])) {
        cJSON_AddNullToObject(obj, key);
        return;
    }
    cJSON *p = cJSON_AddObjectToObject(obj, key);
    for (int i = 0; i < n; i++) add_num(p, names[i], v[i], 0.01);
}

static void add_summary(cJSON *obj, const load_summary *s) {
    cJSON_AddStringToObject(obj, "url", s->url);
    if (!s->reached) {
        cJSON_AddNullToObject(obj, "model");
        cJSON_AddStringToObject(obj, "error", s->error);
        return;
    }
    cJSON_AddStringToObject(obj, "model", s->model);
    cJSON_AddNumberToObject(obj, "requests_ok", s->ok);
    cJSON_AddNumberToObject(obj, "requests_failed", s->failed);
    if (s->error[0]) cJSON_AddStringToObject(obj, "first_error", s->error);
    else cJSON_AddNullToObject(obj, "first_error");
    add_num(obj, "wall_s", s->wall_s, 0.001);
    add_num(obj, "requests_per_s", s->rps, 0.001);
    add_num(obj, "output_tokens_per_s", s->out_tps, 0.01);
    add_num(obj, "total_tokens_per_s", s->total_tps, 0.01);
    cJSON_AddNumberToObject(obj, "prompt_tokens", (double)s->prompt_tokens);
    cJSON_AddNumberToObject(obj, "completion_tokens", (double)s->completion_tokens);
    cJSON_AddNumberToObject(obj, "requests_without_usage", s->without_usage);
    add_percentiles(obj, "ttft_ms", s->ttft_ms, 3);
    add_percentiles(obj, "itl_ms", s->itl_ms, 2);
    add_percentiles(obj, "e2e_ms", s->e2e_ms, 3);
}

static int print_json(const bench_load_opts *o, const load_summary *a, const load_summary *b) {
    cJSON *obj = cJSON_CreateObject();
    if (!obj) return 1;
    cJSON_AddStringToObject(obj, "endpoint", o->chat ? "/v1/chat/completions" : "/v1/completions");
    cJSON_AddBoolToObject(obj, "stream", o->stream);
    cJSON_AddNumberToObject(obj, "clients", o->clients < o->requests ? o->clients : o->requests);
    cJSON_AddNumberToObject(obj, "requests", o->requests);
    cJSON_AddNumberToObject(obj, "prompt_tokens_target", o->prompt_tokens);
    cJSON_AddNumberToObject(obj, "max_tokens", o->max_tokens);
    add_summary(obj, a);
    if (b) {
        add_summary(cJSON_AddObjectToObject(obj, "peer"), b);
        cJSON *r = cJSON_AddObjectToObject(obj, "ratio");
        bool both = a->reached && b->reached;
        add_num(r, "requests_per_s", both ? a->rps / b->rps : NAN, 0.001);
        add_num(r, "output_tokens_per_s", both ? a->out_tps / b->out_tps : NAN, 0.001);
        add_num(r, "total_tokens_per_s", both ? a->total_tps / b->total_tps : NAN, 0.001);
        add_num(r, "ttft_p50", both ? a->ttft_ms[0] / b->ttft_ms[0] : NAN, 0.001);
        add_num(r, "itl_p50", both ? a->itl_ms[0] / b->itl_ms[0] : NAN, 0.001);
        add_num(r, "e2e_p50", both ? a->e2e_ms[0] / b->e2e_ms[0] : NAN, 0.001);
    }
    return cli_print_json(obj);
}

/* One table row: the value for each server, and their ratio when both have one. */
static void row(const char *name, const char *fmt, double a, const load_summary *pb, double b) {
    char va[32], vb[32], vr[32];
    if (isnan(a)) snprintf(va, sizeof va, "-");
    else snprintf(va, sizeof va, fmt, a);
    printf("| %-21s | %12s |", name, va);
    if (pb) {
        if (!pb->reached || isnan(b)) snprintf(vb, sizeof vb, "-");
        else snprintf(vb, sizeof vb, fmt, b);
        if (!pb->reached || isnan(a) || isnan(b) || b == 0) snprintf(vr, sizeof vr, "-");
        else snprintf(vr, sizeof vr, "%.3f", a / b);
        printf(" %12s | %11s |", vb, vr);
    }
    putchar('\n');
}

static void print_text(const bench_load_opts *o, const load_summary *a, const load_summary *b) {
    printf("server: %s (model '%s')\n", a->url, a->model);
    if (b) {
        if (b->reached) printf("peer:   %s (model '%s')\n", b->url, b->model);
        else printf("peer:   %s (not measured: %s)\n", b->url, b->error);
    }
    printf("load:   %s, %s, %d clients, %d requests, ~%d prompt tokens, max_tokens %d, temperature 0\n\n",
           o->chat ? "/v1/chat/completions" : "/v1/completions", o->stream ? "stream" : "no stream",
           o->clients < o->requests ? o->clients : o->requests, o->requests, o->prompt_tokens, o->max_tokens);
    printf("| %-21s | %12s |", "metric", "server");
    if (b) printf(" %12s | %11s |", "peer", "server/peer");
    printf("\n|-----------------------|--------------|");
    if (b) printf("--------------|-------------|");
    putchar('\n');
    const load_summary z = {0};
    const load_summary *pb = b ? b : &z;
    row("requests ok", "%.0f", a->ok, b, pb->ok);
    row("requests failed", "%.0f", a->failed, b, pb->failed);
    row("wall time (s)", "%.2f", a->wall_s, b, pb->wall_s);
    row("requests/s", "%.3f", a->rps, b, pb->rps);
    row("output tok/s", "%.2f", a->out_tps, b, pb->out_tps);
    row("total tok/s", "%.2f", a->total_tps, b, pb->total_tps);
    row("prompt tokens", "%.0f", (double)a->prompt_tokens, b, (double)pb->prompt_tokens);
    row("completion tokens", "%.0f", (double)a->completion_tokens, b, (double)pb->completion_tokens);
    static const char *const tn[3] = {"TTFT p50 (ms)", "TTFT p95 (ms)", "TTFT p99 (ms)"};
    static const char *const in[2] = {"ITL p50 (ms)", "ITL p95 (ms)"};
    static const char *const en[3] = {"E2E p50 (ms)", "E2E p95 (ms)", "E2E p99 (ms)"};
    for (int k = 0; k < 3; k++) row(tn[k], "%.1f", a->ttft_ms[k], b, b ? pb->ttft_ms[k] : NAN);
    for (int k = 0; k < 2; k++) row(in[k], "%.1f", a->itl_ms[k], b, b ? pb->itl_ms[k] : NAN);
    for (int k = 0; k < 3; k++) row(en[k], "%.1f", a->e2e_ms[k], b, b ? pb->e2e_ms[k] : NAN);
    if (a->failed) printf("\nfirst error (server): %s\n", a->error);
    if (b && b->reached && b->failed) printf("%sfirst error (peer): %s\n", a->failed ? "" : "\n", b->error);
    if (a->without_usage || (b && b->without_usage))
        printf("\nsome answers had no usage: their completion tokens are counted as text chunks\n");
    fflush(stdout);
}

int bench_load_run(const bench_load_opts *o) {
    load_summary a, b;
    if (!run_load(o, o->url, &a)) {
        if (o->json) print_json(o, &a, NULL); /* {"url": ..., "error": ...} */
        fprintf(stderr, "wushkv bench: %s\n", a.error);
        return 1;
    }
    bool peer_ok = true;
    if (o->peer_url) peer_ok = run_load(o, o->peer_url, &b);
    const load_summary *pb = o->peer_url ? &b : NULL;
    int rc = o->json ? print_json(o, &a, pb) : (print_text(o, &a, pb), 0);
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
    return rc;
}
