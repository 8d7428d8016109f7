/* The engine thread: opens and warms the engine, then runs continuous batching at iteration
 * level. Each step is one wk_forward carrying one decode token for every running sequence plus
 * prefill chunks (FCFS) under the per-step token budget; finished or cancelled sequences are freed
 * at once and waiting requests take their slots in the next step. Results go back to the loop
 * thread as events (uv_async); the engine thread never touches a socket.
 *
 * With the paged KV pool (--kv int2/3/4) blocks are shared by all sequences: a waiting request is
 * admitted (FCFS) only while the pool can also hold its prompt, and when a step finds no free
 * block (WK_ERR_KV_FULL) the most recently admitted running sequence is preempted by recompute:
 * its blocks are freed, it goes back to the front of the queue with the tokens it generated, and
 * when readmitted it prefills prompt + generated tokens again and goes on where it stopped. */
#include "scheduler.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "logits.h"
#include "text_stream.h"

typedef enum { R_WAITING, R_PREFILL, R_DECODE } req_state;

/* One generation as the engine thread sees it. */
typedef struct req {
    uint64_t id;
    gen_params g;
    int32_t *prompt; /* owned (g.prompt_tokens moved here) */
    int n_prompt;
    int32_t *gen; /* tokens generated so far */
    int n_gen, cap_gen;
    int max_tokens;
    req_state state;
    wk_seq *seq;
    wk_sampler *sampler;
    /* Prefill source: the prompt, or after a preemption prompt + generated tokens (replay,
     * owned). n_fill tokens of it; n_prefilled already in the KV cache; chunk in this step's item. */
    int32_t *replay;
    int n_fill, n_prefilled, chunk;
    int n_prompt_counted;   /* prompt tokens counted in prompt_tokens_total (recompute is not) */
    int32_t last;           /* the token the next decode step feeds */
    text_stream ts;
    int peak_len;           /* most tokens the sequence held (its KV cache) */
    uint64_t peak_bytes;    /* most KV bytes it held (wk_seq_kv_bytes: whole blocks when paged) */
    double t_arrival, t_admit, t_first, t_last;
    struct req *next;
} req;

struct scheduler {
    uv_loop_t *loop;
    uv_async_t async;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sched_job *jobs, *jobs_tail; /* guarded by mu */
    sched_event *events, *events_tail;
    bool quit;
    sched_config cfg;
    metrics *m;
    sched_event_cb on_event;
    void *data;
    model_summary model; /* written before EV_READY, read-only afterwards */

    /* engine thread only */
    wk_engine *e;
    const wk_model_info *info;
    req *waiting, *waiting_tail, *running;
    int n_waiting, n_running;
    float *logits; /* max_seqs rows of n_vocab */
    int *scratch;  /* n_vocab zeros for logits_penalize */
    char *piece;
    int piece_cap;
    wk_batch_item *items;
    req **item_req;
};

double sched_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void gen_params_free(gen_params *g) {
    free(g->prompt_text);
    free(g->prompt_tokens);
    free(g->bias_tokens);
    free(g->bias_values);
    for (int i = 0; i < g->n_stop; i++) free(g->stop[i]);
    memset(g, 0, sizeof *g);
}

void sched_event_free(sched_event *ev) {
    if (!ev) return;
    free(ev->text);
    free(ev->tokens);
    for (int i = 0; i < ev->n_logprobs; i++) {
        free(ev->logprobs[i].piece);
        for (int j = 0; j < ev->logprobs[i].n_top; j++) free(ev->logprobs[i].top_piece[j]);
    }
    free(ev->logprobs);
    free(ev);
}

const model_summary *sched_model(const scheduler *s) { return &s->model; }

/* ---- queues ------------------------------------------------------------------------------------ */

void sched_submit(scheduler *s, sched_job *job) {
    sched_job *last = job;
    while (last->next) last = last->next;
    pthread_mutex_lock(&s->mu);
    if (s->jobs_tail) s->jobs_tail->next = job;
    else s->jobs = job;
    s->jobs_tail = last;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sched_cancel(scheduler *s, uint64_t id) {
    sched_job *j = calloc(1, sizeof *j);
    if (!j) return; /* the request then runs to its end; its output is dropped */
    j->kind = JOB_CANCEL;
    j->id = id;
    sched_submit(s, j);
}

static sched_event *ev_new(event_kind kind, uint64_t id) {
    sched_event *ev = calloc(1, sizeof *ev);
    if (ev) {
        ev->kind = kind;
        ev->id = id;
    }
    return ev;
}

/* Events are queued during a step and handed over together (one wake-up per step). */
static void ev_post(scheduler *s, sched_event *ev) {
    if (!ev) return;
    pthread_mutex_lock(&s->mu);
    if (s->events_tail) s->events_tail->next = ev;
    else s->events = ev;
    s->events_tail = ev;
    pthread_mutex_unlock(&s->mu);
}

static void ev_flush(scheduler *s) { uv_async_send(&s->async); }

static void post_error(scheduler *s, uint64_t id, int status, const char *param, const char *code, const char *fmt,
                       ...) __attribute__((format(printf, 6, 7)));
static void post_error(scheduler *s, uint64_t id, int status, const char *param, const char *code, const char *fmt,
                       ...) {
    sched_event *ev = ev_new(EV_ERROR, id);
    if (!ev) return;
    ev->status = status;
    ev->param = param;
    ev->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev->message, sizeof ev->message, fmt, ap);
    va_end(ap);
    ev_post(s, ev);
}

/* Loop thread: deliver the events in order. */
static void on_async(uv_async_t *a) {
    scheduler *s = a->data;
    pthread_mutex_lock(&s->mu);
    sched_event *ev = s->events;
    s->events = s->events_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (ev) {
        sched_event *next = ev->next;
        ev->next = NULL;
        s->on_event(ev, s->data);
        ev = next;
    }
}

/* ---- engine-thread helpers --------------------------------------------------------------------- */

/* Tokenizes, growing the buffer when the first guess is short. Returns the count or a wk_status. */
static int tokenize_all(const wk_engine *e, const char *text, bool add_special, int32_t **out) {
    size_t len = strlen(text);
    int cap = (int)(len < (size_t)(1 << 28) ? len : (size_t)(1 << 28)) + 8;
    for (;;) {
        int32_t *t = malloc((size_t)cap * sizeof *t);
        if (!t) return WK_ERR_NOMEM;
        /* parse_special: control tokens such as <start_of_turn> in the text become their ids, as
         * the chat template needs (llama.cpp's server does the same for plain prompts). */
        int n = wk_tokenize(e, text, len, add_special, true, t, cap);
        if (n < 0 || n <= cap) {
            if (n < 0) free(t);
            else *out = t;
            return n;
        }
        free(t);
        cap = n;
    }
}

/* One token's bytes into s->piece; returns the length or a negative wk_status. */
static int piece_of(scheduler *s, int32_t tok) {
    int n = wk_token_to_piece(s->e, tok, false, s->piece, s->piece_cap);
    if (n > s->piece_cap) {
        char *p = realloc(s->piece, (size_t)n);
        if (!p) return WK_ERR_NOMEM;
        s->piece = p;
        s->piece_cap = n;
        n = wk_token_to_piece(s->e, tok, false, s->piece, s->piece_cap);
    }
    return n;
}

static char *dup_piece(scheduler *s, int32_t tok, int *len) {
    int n = piece_of(s, tok);
    if (n < 0) n = 0;
    char *p = malloc((size_t)n + 1);
    if (p) {
        memcpy(p, s->piece, (size_t)n);
        p[n] = 0;
    }
    *len = n;
    return p;
}

static int kv_blocks(const scheduler *s, int tokens) {
    int b = s->cfg.kv_block_tokens;
    return (tokens + b - 1) / b;
}

static bool kv_paged(const scheduler *s) { return s->cfg.engine.kv_bits != 0 && s->cfg.engine.kv_bits != 16; }

/* Bytes of one block of the paged pool. */
static uint64_t kv_block_bytes(const scheduler *s) { return s->info->kv_block_bytes; }

/* Bytes a sequence of `tokens` holds in the paged pool: whole blocks, plus its f16 window slot. */
static uint64_t kv_seq_need(const scheduler *s, int tokens) {
    return (uint64_t)kv_blocks(s, tokens) * kv_block_bytes(s) + s->info->kv_window_bytes;
}

/* What an f16 cache holds per token: K and V, 2 bytes each, every layer and KV head. */
static uint64_t kv_fp16_bytes_per_token(const scheduler *s) {
    const wk_model_info *i = s->info;
    return 2ull * (uint64_t)i->n_layer * (uint64_t)i->n_head_kv * (uint64_t)i->head_dim * 2ull;
}

static kv_usage kv_of(const scheduler *s, const req *r) {
    kv_usage u;
    u.bytes = r->peak_bytes;
    u.fp16_bytes = (uint64_t)r->peak_len * kv_fp16_bytes_per_token(s);
    u.blocks = kv_blocks(s, r->peak_len);
    u.bits_per_element = s->info->kv_bits_per_element;
    return u;
}

/* KV bytes the running sequences hold now (a preempted, waiting one holds none). */
static uint64_t kv_used(const scheduler *s) {
    uint64_t used = 0;
    for (const req *r = s->running; r; r = r->next) used += wk_seq_kv_bytes(r->seq);
    return used;
}

static void publish_pool(scheduler *s) {
    metrics_pool p = {.running = s->n_running, .waiting = s->n_waiting};
    p.kv_used_bytes = kv_used(s);
    p.kv_capacity_bytes = s->info->kv_pool_bytes;
    if (kv_paged(s)) {
        /* Every running sequence holds a window slot when windows are on; the rest is blocks. */
        uint64_t windows = (uint64_t)s->n_running * s->info->kv_window_bytes;
        p.kv_used_blocks = (int)((p.kv_used_bytes > windows ? p.kv_used_bytes - windows : 0) / kv_block_bytes(s));
        p.kv_capacity_blocks = (int)s->info->kv_pool_blocks;
    } else {
        for (req *r = s->running; r; r = r->next) p.kv_used_blocks += kv_blocks(s, wk_seq_len(r->seq));
        p.kv_capacity_blocks = s->cfg.max_seqs * kv_blocks(s, s->info->max_ctx);
    }
    metrics_set_pool(s->m, &p);
}

static void req_free(req *r) {
    if (r->seq) wk_seq_destroy(r->seq);
    wk_sampler_destroy(r->sampler);
    text_stream_free(&r->ts);
    gen_params_free(&r->g);
    free(r->prompt);
    free(r->replay);
    free(r->gen);
    free(r);
}

static void unlink_req(req **head, req *r) {
    for (req **p = head; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            return;
        }
}

static void remove_req(scheduler *s, req *r) {
    if (r->state == R_WAITING) {
        unlink_req(&s->waiting, r);
        s->waiting_tail = NULL;
        for (req *q = s->waiting; q; q = q->next) s->waiting_tail = q;
        s->n_waiting--;
    } else {
        unlink_req(&s->running, r);
        s->n_running--;
    }
}

/* Ends a request: last text, usage, metrics; frees its sequence at once. */
static void finish(scheduler *s, req *r, const char *reason) {
    bool oom = false;
    if (strcmp(reason, "abort") != 0) {
        text_buf tail = {0};
        text_stream_finish(&r->ts, &tail, &oom);
        if (tail.len) {
            sched_event *ev = ev_new(EV_TEXT, r->id);
            if (ev) {
                ev->text = tail.p;
                ev->text_len = tail.len;
                tail.p = NULL;
            }
            ev_post(s, ev);
        }
        text_buf_free(&tail);
    }
    double now = sched_now();
    double queue = (r->t_admit > 0 ? r->t_admit : now) - r->t_arrival;
    double ttft = r->t_first > 0 ? r->t_first - r->t_arrival : -1;
    sched_event *ev = ev_new(EV_DONE, r->id);
    if (ev) {
        ev->finish_reason = reason;
        ev->prompt_tokens = r->n_prompt;
        ev->completion_tokens = r->n_gen;
        ev->kv = kv_of(s, r);
        ev->queue_s = queue;
        ev->ttft_s = ttft;
        ev_post(s, ev);
    }
    double tpot = r->n_gen > 1 ? (r->t_last - r->t_first) / (r->n_gen - 1) : -1;
    metrics_request_done(s->m, reason, r->n_prompt, r->n_gen, queue, ttft, tpot, now - r->t_arrival,
                         r->peak_bytes);
    remove_req(s, r);
    req_free(r);
}

static void fail(scheduler *s, req *r, const char *what, int rc, const char *err) {
    post_error(s, r->id, 500, NULL, "engine_error", "%s: %s%s%.400s", what, wk_strerror(rc), err && err[0] ? ": " : "",
               err ? err : "");
    metrics_request_done(s->m, "error", r->n_prompt, r->n_gen, 0, -1, -1, sched_now() - r->t_arrival, 0);
    remove_req(s, r);
    req_free(r);
}

/* ---- jobs -------------------------------------------------------------------------------------- */

static void job_generate(scheduler *s, sched_job *j) {
    const wk_model_info *info = s->info;
    req *r = calloc(1, sizeof *r);
    if (!r) {
        post_error(s, j->id, 500, NULL, NULL, "out of memory");
        gen_params_free(&j->gen);
        return;
    }
    r->id = j->id;
    r->g = j->gen;
    memset(&j->gen, 0, sizeof j->gen);
    r->t_arrival = j->t_arrival;
    r->state = R_WAITING;
    if (r->g.prompt_text) {
        int n = tokenize_all(s->e, r->g.prompt_text, r->g.add_special, &r->prompt);
        if (n < 0) {
            post_error(s, r->id, 400, "prompt", NULL, "the prompt cannot be tokenized: %s", wk_strerror(n));
            req_free(r);
            return;
        }
        r->n_prompt = n;
    } else {
        r->prompt = r->g.prompt_tokens;
        r->n_prompt = r->g.n_prompt_tokens;
        r->g.prompt_tokens = NULL;
        for (int i = 0; i < r->n_prompt; i++)
            if (r->prompt[i] < 0 || r->prompt[i] >= info->n_vocab) {
                post_error(s, r->id, 400, "prompt", NULL, "token id %d at position %d is outside the vocabulary (0..%d)",
                           (int)r->prompt[i], i, info->n_vocab - 1);
                req_free(r);
                return;
            }
    }
    if (r->n_prompt == 0) {
        post_error(s, r->id, 400, "prompt", NULL, "the prompt is empty (0 tokens)");
        req_free(r);
        return;
    }
    /* The whole request must fit the context: a prompt that leaves no room, or room for fewer
     * tokens than max_tokens asks, is refused now rather than cut short later. */
    int room = info->max_ctx - r->n_prompt;
    if (room <= 0 || (r->g.max_tokens > 0 && r->g.max_tokens > room)) {
        post_error(s, r->id, 400, r->g.max_tokens > 0 && room > 0 ? "max_tokens" : "prompt", "context_length_exceeded",
                   "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the "
                   "prompt, %d for the completion). Please reduce the prompt or max_tokens.",
                   info->max_ctx, r->n_prompt + (r->g.max_tokens > 0 ? r->g.max_tokens : 1), r->n_prompt,
                   r->g.max_tokens > 0 ? r->g.max_tokens : 1);
        req_free(r);
        return;
    }
    /* The paged pool is shared: a prompt that needs more blocks than the whole pool could never be
     * admitted, whatever else runs. (One that fits is admitted once enough blocks are free.) */
    if (kv_paged(s)) {
        uint64_t need = kv_seq_need(s, r->n_prompt);
        if (need > info->kv_pool_bytes) {
            post_error(s, r->id, 400, "prompt", "kv_cache_exceeded",
                       "The prompt of %d tokens needs %d KV cache blocks (%llu bytes) but the server's whole KV "
                       "pool holds %llu blocks (%llu bytes, --kv-mem). Please shorten the prompt.",
                       r->n_prompt, kv_blocks(s, r->n_prompt), (unsigned long long)need,
                       (unsigned long long)info->kv_pool_blocks, (unsigned long long)info->kv_pool_bytes);
            req_free(r);
            return;
        }
    }
    r->n_fill = r->n_prompt;
    r->max_tokens = r->g.max_tokens > 0 ? r->g.max_tokens : room;
    for (int i = 0; i < r->g.n_bias; i++)
        if (r->g.bias_tokens[i] < 0 || r->g.bias_tokens[i] >= info->n_vocab) {
            post_error(s, r->id, 400, "logit_bias", NULL, "logit_bias token id %d is outside the vocabulary (0..%d)",
                       (int)r->g.bias_tokens[i], info->n_vocab - 1);
            req_free(r);
            return;
        }
    r->sampler = wk_sampler_create(&r->g.sampling, info->n_vocab);
    if (!r->sampler) {
        post_error(s, r->id, 500, NULL, NULL, "out of memory");
        req_free(r);
        return;
    }
    text_stream_init(&r->ts, r->g.stop, r->g.n_stop);
    sched_event *ev = ev_new(EV_ACCEPTED, r->id);
    if (ev) ev->prompt_tokens = r->n_prompt;
    ev_post(s, ev);
    if (s->waiting_tail) s->waiting_tail->next = r;
    else s->waiting = r;
    s->waiting_tail = r;
    s->n_waiting++;
}

static req *find_req(scheduler *s, uint64_t id) {
    for (req *r = s->running; r; r = r->next)
        if (r->id == id) return r;
    for (req *r = s->waiting; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

static void job_tokenize(scheduler *s, sched_job *j) {
    int32_t *toks = NULL;
    int n = tokenize_all(s->e, j->gen.prompt_text ? j->gen.prompt_text : "", j->gen.add_special, &toks);
    if (n < 0) {
        post_error(s, j->id, 400, "prompt", NULL, "the text cannot be tokenized: %s", wk_strerror(n));
        return;
    }
    sched_event *ev = ev_new(EV_TOKENS, j->id);
    if (!ev) {
        free(toks);
        return;
    }
    ev->tokens = toks;
    ev->n_tokens = n;
    ev_post(s, ev);
}

static void job_detokenize(scheduler *s, sched_job *j) {
    text_stream ts;
    text_stream_init(&ts, NULL, 0);
    text_buf out = {0};
    bool oom = false;
    for (int i = 0; i < j->gen.n_prompt_tokens; i++) {
        int32_t t = j->gen.prompt_tokens[i];
        int n = t >= 0 && t < s->info->n_vocab ? piece_of(s, t) : WK_ERR_INVALID;
        if (n < 0) {
            post_error(s, j->id, 400, "tokens", NULL, "token id %d at position %d is outside the vocabulary (0..%d)",
                       (int)t, i, s->info->n_vocab - 1);
            text_stream_free(&ts);
            text_buf_free(&out);
            return;
        }
        text_stream_feed(&ts, s->piece, (size_t)n, &out, &oom);
    }
    text_stream_finish(&ts, &out, &oom);
    text_stream_free(&ts);
    sched_event *ev = ev_new(EV_DETOKENIZED, j->id);
    if (!ev || oom || !text_buf_add(&out, "", 0)) {
        text_buf_free(&out);
        free(ev);
        post_error(s, j->id, 500, NULL, NULL, "out of memory");
        return;
    }
    ev->text = out.p;
    ev->text_len = out.len;
    ev_post(s, ev);
}

static void handle_job(scheduler *s, sched_job *j) {
    switch (j->kind) {
    case JOB_GENERATE: job_generate(s, j); break;
    case JOB_CANCEL: {
        req *r = find_req(s, j->id);
        if (r) finish(s, r, "abort");
        break;
    }
    case JOB_TOKENIZE: job_tokenize(s, j); break;
    case JOB_DETOKENIZE: job_detokenize(s, j); break;
    case JOB_QUIT: break;
    }
    gen_params_free(&j->gen);
    free(j);
}

/* ---- one step ---------------------------------------------------------------------------------- */

/* A sampled token: record, show its text, decide whether the request ends. */
static void take_token(scheduler *s, req *r, const float *row) {
    int32_t tok = wk_sampler_sample(r->sampler, row);
    double now = sched_now();
    if (r->t_first == 0) r->t_first = now;
    r->t_last = now;
    if (wk_token_is_eog(s->e, tok)) {
        finish(s, r, "stop");
        return;
    }
    if (r->n_gen == r->cap_gen) {
        int cap = r->cap_gen ? r->cap_gen * 2 : 64;
        int32_t *g = realloc(r->gen, (size_t)cap * sizeof *g);
        if (!g) {
            fail(s, r, "out of memory", WK_ERR_NOMEM, NULL);
            return;
        }
        r->gen = g;
        r->cap_gen = cap;
    }
    r->gen[r->n_gen++] = tok;
    metrics_tokens(s->m, 0, 1);

    sched_event *ev = ev_new(EV_TEXT, r->id);
    if (!ev) {
        fail(s, r, "out of memory", WK_ERR_NOMEM, NULL);
        return;
    }
    if (r->g.logprobs >= 0 && (ev->logprobs = calloc(1, sizeof *ev->logprobs))) {
        token_logprob *lp = ev->logprobs;
        ev->n_logprobs = 1;
        lp->token = tok;
        lp->n_top = r->g.logprobs;
        lp->logprob = logits_logprobs(row, s->info->n_vocab, tok, lp->n_top, lp->top_token, lp->top_logprob);
        lp->piece = dup_piece(s, tok, &lp->piece_len);
        for (int i = 0; i < lp->n_top; i++) lp->top_piece[i] = dup_piece(s, lp->top_token[i], &lp->top_piece_len[i]);
    }
    int n = piece_of(s, tok);
    text_buf delta = {0};
    bool oom = false, stopped = false;
    if (n > 0) stopped = text_stream_feed(&r->ts, s->piece, (size_t)n, &delta, &oom);
    ev->text = delta.p;
    ev->text_len = delta.len;
    ev_post(s, ev);
    if (oom) fail(s, r, "out of memory", WK_ERR_NOMEM, NULL);
    else if (stopped) finish(s, r, "stop");
    else if (r->n_gen >= r->max_tokens || wk_seq_len(r->seq) >= s->info->max_ctx) finish(s, r, "length");
    else {
        r->last = tok;
        r->state = R_DECODE;
    }
}

/* KV bytes a running sequence holds or is about to: a sequence still prefilling will hold the
 * blocks of its whole prefill (prompt, or prompt + generated tokens after a preemption). */
static uint64_t kv_claim(const scheduler *s, const req *r) {
    uint64_t held = wk_seq_kv_bytes(r->seq);
    if (r->state != R_PREFILL) return held;
    uint64_t fill = kv_seq_need(s, r->n_fill);
    return fill > held ? fill : held;
}

/* FCFS admission into a sequence slot. With the paged pool the head of the queue also waits until
 * the blocks its prefill needs are free beside what the running sequences hold or are about to
 * (nobody overtakes it). With nothing running it is admitted regardless: its prompt fits the
 * pool (job_generate checked), and a replay that cannot fit alone ends in step(). */
static void admit(scheduler *s) {
    while (s->waiting && s->n_running < s->cfg.max_seqs) {
        req *r = s->waiting;
        if (kv_paged(s) && s->running) {
            uint64_t claimed = 0;
            for (req *q = s->running; q; q = q->next) claimed += kv_claim(s, q);
            uint64_t need = kv_seq_need(s, r->n_fill);
            if (claimed + need > s->info->kv_pool_bytes) break;
        }
        if (!r->seq) { /* a preempted request keeps its (reset) sequence */
            wk_seq *seq;
            if (wk_seq_create(s->e, &seq) < 0) break;
            r->seq = seq;
        }
        s->waiting = r->next;
        if (!s->waiting) s->waiting_tail = NULL;
        s->n_waiting--;
        r->state = R_PREFILL;
        r->n_prefilled = 0;
        if (r->t_admit == 0) r->t_admit = sched_now(); /* queue time: the first wait only */
        r->next = NULL;
        req **tail = &s->running;
        while (*tail) tail = &(*tail)->next;
        *tail = r; /* admission order: older requests get prefill budget first */
        s->n_running++;
    }
}

/* Preemption by recompute: frees r's KV blocks and puts it at the front of the queue. When it is
 * readmitted it prefills its prompt and the tokens it generated (the last of which it had not fed
 * yet), so its next logits are those its next decode step would have given. Returns false when
 * out of memory (r is then failed). */
static bool preempt(scheduler *s, req *r, uint64_t used_before) {
    int32_t *replay = NULL;
    if (r->n_gen > 0) {
        replay = malloc((size_t)(r->n_prompt + r->n_gen) * sizeof *replay);
        if (!replay) {
            fail(s, r, "out of memory", WK_ERR_NOMEM, NULL);
            return false;
        }
        memcpy(replay, r->prompt, (size_t)r->n_prompt * sizeof *replay);
        memcpy(replay + r->n_prompt, r->gen, (size_t)r->n_gen * sizeof *replay);
    }
    fprintf(stderr,
            "wushkv: KV pool full (%llu of %llu bytes held): preempting sequence %llu (%d tokens; %d prompt + %d "
            "generated are recomputed when blocks are free)\n",
            (unsigned long long)used_before, (unsigned long long)s->info->kv_pool_bytes, (unsigned long long)r->id,
            wk_seq_len(r->seq), r->n_prompt, r->n_gen);
    wk_seq_reset(r->seq);
    free(r->replay);
    r->replay = replay;
    r->n_fill = r->n_prompt + r->n_gen;
    r->n_prefilled = r->chunk = 0;
    unlink_req(&s->running, r);
    s->n_running--;
    r->state = R_WAITING;
    r->next = s->waiting;
    s->waiting = r;
    if (!s->waiting_tail) s->waiting_tail = r;
    s->n_waiting++;
    metrics_preemption(s->m);
    return true;
}

/* Decode tokens first (one each: they keep streaming), then prefill chunks in FCFS order with
 * what is left of the budget. Returns the item count; *tokens gets the tokens carried. */
static int build_batch(scheduler *s, int *tokens) {
    int n = 0, budget = s->cfg.max_batch_tokens;
    for (req *r = s->running; r; r = r->next) {
        r->chunk = 0;
        if (r->state == R_DECODE) {
            s->items[n] = (wk_batch_item){.seq = r->seq, .tokens = &r->last, .n_tokens = 1};
            s->item_req[n++] = r;
            budget--;
        }
    }
    for (req *r = s->running; r && budget > 0; r = r->next)
        if (r->state == R_PREFILL) {
            const int32_t *src = r->replay ? r->replay : r->prompt;
            int k = r->n_fill - r->n_prefilled;
            if (k > budget) k = budget;
            r->chunk = k;
            s->items[n] = (wk_batch_item){.seq = r->seq, .tokens = src + r->n_prefilled, .n_tokens = k};
            s->item_req[n++] = r;
            budget -= k;
        }
    *tokens = s->cfg.max_batch_tokens - budget;
    return n;
}

static void step(scheduler *s) {
    admit(s);

    int n, tokens, rc;
    char err[WK_ERRMSG_LEN];
    for (;;) {
        n = build_batch(s, &tokens);
        if (n == 0) return;
        err[0] = 0;
        double t0 = sched_now();
        rc = wk_forward(s->e, s->items, n, s->logits, err, sizeof err);
        if (rc != WK_ERR_KV_FULL) {
            metrics_step(s->m, n, tokens, sched_now() - t0);
            break;
        }
        /* No free block (nothing was computed; sequences earlier in the batch may keep blocks they
         * reserved, which they use on the retry). Free the newest sequence's blocks and retry. */
        req *victim = s->running;
        while (victim && victim->next) victim = victim->next;
        if (s->n_running > 1) {
            preempt(s, victim, kv_used(s));
            continue;
        }
        /* Alone and still no room: the pool cannot hold this sequence any longer. */
        if (victim->n_gen > 0) {
            fprintf(stderr, "wushkv: KV pool full with sequence %llu alone (%d tokens): it ends with 'length'\n",
                    (unsigned long long)victim->id, wk_seq_len(victim->seq));
            finish(s, victim, "length");
        } else {
            post_error(s, victim->id, 400, "prompt", "kv_cache_exceeded",
                       "The prompt of %d tokens does not fit the server's KV pool (%llu bytes, --kv-mem)",
                       victim->n_prompt, (unsigned long long)s->info->kv_pool_bytes);
            metrics_request_done(s->m, "error", victim->n_prompt, 0, 0, -1, -1, sched_now() - victim->t_arrival, 0);
            remove_req(s, victim);
            req_free(victim);
        }
        return;
    }
    if (rc < 0) {
        /* No sequence changed; the requests of this batch cannot go on. */
        for (int i = 0; i < n; i++) fail(s, s->item_req[i], "forward step failed", rc, err);
        return;
    }
    int prefilled = 0;
    for (int i = 0; i < n; i++) {
        req *r = s->item_req[i];
        int len = wk_seq_len(r->seq);
        uint64_t bytes = wk_seq_kv_bytes(r->seq);
        if (len > r->peak_len) r->peak_len = len;
        if (bytes > r->peak_bytes) r->peak_bytes = bytes;
        if (r->state == R_PREFILL) {
            r->n_prefilled += r->chunk;
            int counted = r->n_prefilled < r->n_prompt ? r->n_prefilled : r->n_prompt;
            if (counted > r->n_prompt_counted) {
                prefilled += counted - r->n_prompt_counted;
                r->n_prompt_counted = counted;
            }
            if (r->n_prefilled < r->n_fill) continue; /* this row's logits are not needed */
            free(r->replay); /* prefilled: decode goes on from r->gen */
            r->replay = NULL;
        }
        float *row = s->logits + (size_t)i * (size_t)s->info->n_vocab;
        if (r->g.n_bias) logits_bias(row, s->info->n_vocab, r->g.bias_tokens, r->g.bias_values, r->g.n_bias);
        logits_penalize(row, r->prompt, r->n_prompt, r->gen, r->n_gen, r->g.presence_penalty, r->g.frequency_penalty,
                        r->g.repetition_penalty, s->scratch);
        take_token(s, r, row); /* may finish (and free) r */
    }
    if (prefilled) metrics_tokens(s->m, prefilled, 0);
}

/* ---- the thread -------------------------------------------------------------------------------- */

/* Runs the prefill (batched matmul) and decode (single-token) paths and a two-sequence batch,
 * so every pipeline is built and every buffer touched before /health says ready. */
static int warm_up(scheduler *s, char *err, size_t errlen) {
    wk_seq *a = NULL, *b = NULL;
    int32_t toks[4];
    int32_t t0 = s->info->bos >= 0 ? s->info->bos : 0;
    for (int i = 0; i < 4; i++) toks[i] = t0;
    int rc = wk_seq_create(s->e, &a);
    if (!rc && s->cfg.max_seqs > 1) rc = wk_seq_create(s->e, &b);
    if (!rc) {
        wk_batch_item it = {.seq = a, .tokens = toks, .n_tokens = 4};
        rc = wk_forward(s->e, &it, 1, s->logits, err, errlen);
    }
    if (rc >= 0) {
        wk_batch_item it = {.seq = a, .tokens = toks, .n_tokens = 1};
        rc = wk_forward(s->e, &it, 1, s->logits, err, errlen);
    }
    if (rc >= 0 && b) {
        wk_batch_item it[2] = {{.seq = a, .tokens = toks, .n_tokens = 1}, {.seq = b, .tokens = toks, .n_tokens = 2}};
        rc = wk_forward(s->e, it, 2, s->logits, err, errlen);
    }
    if (a) wk_seq_destroy(a);
    if (b) wk_seq_destroy(b);
    return rc < 0 ? rc : 0;
}

static void *engine_main(void *arg) {
    scheduler *s = arg;
    char err[WK_ERRMSG_LEN] = "";
    int rc = wk_engine_open(&s->cfg.engine, &s->e, err, sizeof err);
    if (rc < 0) {
        sched_event *ev = ev_new(EV_FATAL, 0);
        if (ev) snprintf(ev->message, sizeof ev->message, "cannot open %.200s: %s%s%.250s", s->cfg.engine.model_path,
                         wk_strerror(rc), err[0] ? ": " : "", err);
        ev_post(s, ev);
        ev_flush(s);
        return NULL;
    }
    s->info = wk_engine_info(s->e);
    model_summary *m = &s->model;
    snprintf(m->name, sizeof m->name, "%s", s->info->name);
    snprintf(m->arch, sizeof m->arch, "%s", s->info->arch);
    snprintf(m->device, sizeof m->device, "%s", s->info->device_name);
    m->max_ctx = s->info->max_ctx;
    m->n_vocab = s->info->n_vocab;
    m->kv_bytes_per_token = s->info->kv_bytes_per_token;
    m->kv_pool_bytes = s->info->kv_pool_bytes;
    m->kv_pool_blocks = s->info->kv_pool_blocks;
    m->kv_bits_per_element = s->info->kv_bits_per_element;
    const char *tmpl = wk_engine_chat_template(s->e);
    m->chat_template = tmpl ? strdup(tmpl) : NULL;

    size_t nv = (size_t)s->info->n_vocab;
    s->logits = malloc((size_t)s->cfg.max_seqs * nv * sizeof *s->logits);
    s->scratch = calloc(nv, sizeof *s->scratch);
    s->piece_cap = 256;
    s->piece = malloc((size_t)s->piece_cap);
    s->items = calloc((size_t)s->cfg.max_seqs, sizeof *s->items);
    s->item_req = calloc((size_t)s->cfg.max_seqs, sizeof *s->item_req);
    sched_event *ready = ev_new(EV_READY, 0);
    if (!s->logits || !s->scratch || !s->piece || !s->items || !s->item_req || !ready) {
        rc = WK_ERR_NOMEM;
        snprintf(err, sizeof err, "out of memory");
    } else {
        rc = warm_up(s, err, sizeof err);
    }
    if (rc < 0) {
        free(ready);
        sched_event *ev = ev_new(EV_FATAL, 0);
        if (ev) snprintf(ev->message, sizeof ev->message, "warm-up failed: %s%s%.400s", wk_strerror(rc),
                         err[0] ? ": " : "", err);
        ev_post(s, ev);
        ev_flush(s);
        goto out;
    }
    publish_pool(s);
    ev_post(s, ready);
    ev_flush(s);

    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->jobs && !s->quit && !s->running && !s->waiting) pthread_cond_wait(&s->cv, &s->mu);
        sched_job *jobs = s->jobs;
        s->jobs = s->jobs_tail = NULL;
        bool quit = s->quit;
        pthread_mutex_unlock(&s->mu);
        while (jobs) {
            sched_job *next = jobs->next;
            handle_job(s, jobs);
            jobs = next;
        }
        if (quit) break;
        if (s->running || s->waiting) step(s);
        publish_pool(s);
        ev_flush(s);
    }

out:
    while (s->running) finish(s, s->running, "abort");
    while (s->waiting) finish(s, s->waiting, "abort");
    free(s->logits);
    free(s->scratch);
    free(s->piece);
    free(s->items);
    free(s->item_req);
    wk_engine_close(s->e);
    s->e = NULL;
    return NULL;
}

int sched_start(scheduler **out, uv_loop_t *loop, const sched_config *cfg, metrics *m, sched_event_cb on_event,
                void *data) {
    *out = NULL;
    scheduler *s = calloc(1, sizeof *s);
    if (!s) return WK_ERR_NOMEM;
    s->loop = loop;
    s->cfg = *cfg;
    s->m = m;
    s->on_event = on_event;
    s->data = data;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    uv_async_init(loop, &s->async, on_async);
    s->async.data = s;
    if (pthread_create(&s->thread, NULL, engine_main, s) != 0) {
        uv_close((uv_handle_t *)&s->async, NULL);
        return WK_ERR_NOMEM; /* s leaks with the process exiting; the async must close first */
    }
    s->thread_started = true;
    *out = s;
    return 0;
}

static void on_async_closed(uv_handle_t *h) {
    scheduler *s = h->data;
    pthread_mutex_lock(&s->mu);
    sched_event *ev = s->events;
    s->events = NULL;
    pthread_mutex_unlock(&s->mu);
    while (ev) {
        sched_event *next = ev->next;
        sched_event_free(ev);
        ev = next;
    }
    while (s->jobs) {
        sched_job *next = s->jobs->next;
        gen_params_free(&s->jobs->gen);
        free(s->jobs);
        s->jobs = next;
    }
    free(s->model.chat_template);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

void sched_stop(scheduler *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    /* The current step finishes first (a forward pass cannot be interrupted): well under a second
     * for decode steps. */
    if (s->thread_started) pthread_join(s->thread, NULL);
    uv_close((uv_handle_t *)&s->async, on_async_closed);
}
