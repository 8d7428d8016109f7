/* The engine thread and its queues: opens and warms the engine, takes jobs from the loop thread,
 * runs steps of continuous batching (sched_step.c) while sequences run or wait, and hands results
 * back to the loop thread as events (uv_async); the engine thread never touches a socket.
 *
 * Each step is one wk_forward carrying one decode token for every running sequence plus prefill
 * chunks (FCFS) under the per-step token budget; finished or cancelled sequences are freed at once
 * and waiting requests take their slots in the next step. With the paged KV pool (--kv int2/3/4)
 * blocks are shared by all sequences: a waiting request is admitted only while the pool can also
 * hold its prompt, and when a step finds no free block the most recently admitted sequence is
 * preempted by recompute (its blocks freed; readmitted later, it prefills prompt + generated tokens
 * again and goes on where it stopped). */
#include "sched/scheduler_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void gen_params_free(gen_params *g) {
    free(g->prompt_text);
    free(g->from_text);
    free(g->plain);
    free(g->prompt_tokens);
    free(g->bias_tokens);
    free(g->bias_values);
    free(g->allowed_ids);
    wk_grammar_free(g->grammar);
    for (int i = 0; i < g->n_stop; i++) free(g->stop[i]);
    for (int i = 0; i < g->n_bad; i++) free(g->bad[i]);
    free(g->bad_ids);
    memset(g, 0, sizeof *g);
}

void sched_event_free(sched_event *ev) {
    if (!ev) return;
    free(ev->text);
    free(ev->stop_str);
    free(ev->tokens);
    token_logprobs_free(ev->logprobs, ev->n_logprobs);
    free(ev);
}

void token_logprobs_free(token_logprob *a, int n) {
    for (int i = 0; i < n; i++) {
        free(a[i].piece);
        for (int j = 0; j < a[i].n_top; j++) free(a[i].top_piece[j]);
    }
    free(a);
}

const model_summary *sched_model(const scheduler *s) { return &s->model; }

/* ---- queues ------------------------------------------------------------------------------------ */

void sched_queue_push(scheduler *s, sched_job **head, sched_job **tail, pthread_cond_t *cv, sched_job *chain) {
    sched_job *last = chain;
    while (last->next) last = last->next;
    pthread_mutex_lock(&s->mu);
    if (*tail) (*tail)->next = chain;
    else *head = chain;
    *tail = last;
    pthread_cond_signal(cv);
    pthread_mutex_unlock(&s->mu);
}

void sched_submit(scheduler *s, sched_job *job) {
    sched_queue_push(s, &s->front_jobs, &s->front_tail, &s->front_cv, job);
}

void sched_cancel(scheduler *s, uint64_t id) {
    sched_job *j = calloc(1, sizeof *j);
    if (!j) return; /* the request then runs to its end; its output is dropped */
    j->kind = JOB_CANCEL;
    j->id = id;
    sched_submit(s, j);
}

sched_event *sched_ev_new(event_kind kind, uint64_t id) {
    sched_event *ev = calloc(1, sizeof *ev);
    if (ev) {
        ev->kind = kind;
        ev->id = id;
    }
    return ev;
}

/* Events are queued during a step and handed over together (one wake-up per step). */
void sched_ev_post(scheduler *s, sched_event *ev) {
    if (!ev) return;
    pthread_mutex_lock(&s->mu);
    if (s->events_tail) s->events_tail->next = ev;
    else s->events = ev;
    s->events_tail = ev;
    pthread_mutex_unlock(&s->mu);
}

void sched_ev_flush(scheduler *s) { uv_async_send(&s->async); }

void sched_post_error(scheduler *s, uint64_t id, int status, const char *param, const char *code, const char *fmt,
                       ...) {
    sched_event *ev = sched_ev_new(EV_ERROR, id);
    if (!ev) return;
    ev->status = status;
    ev->param = param;
    ev->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev->message, sizeof ev->message, fmt, ap);
    va_end(ap);
    sched_ev_post(s, ev);
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

/* ---- the thread -------------------------------------------------------------------------------- */

/* Runs the prefill (batched matmul) and decode (single-token) paths and a two-sequence batch,
 * so every pipeline is built and every buffer touched before /health says ready. */
static int warm_up(scheduler *s, char *err, size_t errlen) {
    wk_seq *a = NULL, *b = NULL;
    int32_t toks[4];
    int32_t t0 = s->info->bos >= 0 ? s->info->bos : 0;
    for (int i = 0; i < 4; i++) toks[i] = t0;
    /* Within the step's token budget (--batch-tokens may be as small as --max-batch, 1 included). */
    const int budget = s->cfg.max_batch_tokens;
    int rc = wk_seq_create(s->e, &a);
    if (!rc && s->cfg.max_seqs > 1) rc = wk_seq_create(s->e, &b);
    if (!rc) {
        wk_batch_item it = {.seq = a, .tokens = toks, .n_tokens = budget < 4 ? budget : 4};
        rc = wk_forward(s->e, &it, 1, s->logits, err, errlen);
    }
    if (rc >= 0) {
        wk_batch_item it = {.seq = a, .tokens = toks, .n_tokens = 1};
        rc = wk_forward(s->e, &it, 1, s->logits, err, errlen);
    }
    if (rc >= 0 && b) {
        wk_batch_item it[2] = {{.seq = a, .tokens = toks, .n_tokens = 1},
                               {.seq = b, .tokens = toks, .n_tokens = budget < 3 ? 1 : 2}};
        rc = wk_forward(s->e, it, 2, s->logits, err, errlen);
    }
    if (a) wk_seq_destroy(a);
    if (b) wk_seq_destroy(b);
    return rc < 0 ? rc : 0;
}

/* The prepare hook's way to say what the engine thread waits for (sched_starting_fn). */
static void post_starting(void *sched, const char *state) {
    scheduler *s = sched;
    sched_event *ev = sched_ev_new(EV_STARTING, 0);
    if (!ev) return;
    snprintf(ev->message, sizeof ev->message, "%s", state);
    sched_ev_post(s, ev);
    sched_ev_flush(s);
}

/* The prepare hook's way to learn that the daemon is stopping (sched_stopping_fn). */
static bool is_stopping(void *sched) {
    scheduler *s = sched;
    pthread_mutex_lock(&s->mu);
    bool quit = s->quit;
    pthread_mutex_unlock(&s->mu);
    return quit;
}

static void *engine_main(void *arg) {
    scheduler *s = arg;
    char err[WK_ERRMSG_LEN] = "";
    if (s->cfg.prepare && s->cfg.prepare(&s->cfg.engine, s->cfg.prepare_data, post_starting, is_stopping, s) < 0) {
        sched_event *ev = sched_ev_new(EV_FATAL, 0);
        if (ev) snprintf(ev->message, sizeof ev->message, "cannot prepare the KV cache format (see above)");
        sched_ev_post(s, ev);
        sched_ev_flush(s);
        return NULL;
    }
    if (s->cfg.prepare) post_starting(s, "loading"); /* whatever the hook announced is over */
    int rc = wk_engine_open(&s->cfg.engine, &s->e, err, sizeof err);
    if (rc < 0) {
        sched_event *ev = sched_ev_new(EV_FATAL, 0);
        if (ev) snprintf(ev->message, sizeof ev->message, "cannot open %.200s: %s%s%.250s", s->cfg.engine.model_path,
                         wk_strerror(rc), err[0] ? ": " : "", err);
        sched_ev_post(s, ev);
        sched_ev_flush(s);
        return NULL;
    }
    s->info = wk_engine_info(s->e);
    s->cfg.max_batch_tokens = s->info->max_batch_tokens;
    kv_budget_init(&s->kv, s->info, s->cfg.max_seqs, s->cfg.max_batch_tokens);
    model_summary *m = &s->model;
    snprintf(m->name, sizeof m->name, "%s", s->info->name);
    snprintf(m->arch, sizeof m->arch, "%s", s->info->arch);
    snprintf(m->device, sizeof m->device, "%s", s->info->device_name);
    m->max_ctx = s->info->max_ctx;
    m->n_vocab = s->info->n_vocab;
    m->kv_bytes_per_token = s->info->kv_bytes_per_token;
    m->kv_pool_bytes = s->info->kv_pool_bytes;
    m->kv_pool_blocks = s->info->kv_pool_blocks;
    m->kv_layer_groups = s->info->kv_layer_groups;
    m->kv_swa_groups = s->info->kv_swa_groups;
    m->kv_swa_window = s->info->kv_swa_window;
    m->kv_swa_bits = s->info->kv_swa_bits;
    m->kv_swa_pool_blocks = s->info->kv_swa_pool_blocks;
    wk_layer_set_format(s->info->kv_wide_keys, m->kv_wide_layers, sizeof m->kv_wide_layers);
    m->kv_bits_per_element = s->info->kv_bits_per_element;
    snprintf(m->wush_path, sizeof m->wush_path, "%s", s->cfg.engine.wush_path ? s->cfg.engine.wush_path : "");
    m->prefix_cache = s->info->prefix_cache;
    m->prefix_cache_park = s->info->prefix_cache_park;
    m->kv_snapshots = s->info->kv_snapshots;
    m->kv_context_bytes = s->info->kv_pool_blocks
                              ? wk_kv_peak_bytes(s->info, (uint64_t)s->info->max_ctx, (uint64_t)s->cfg.max_batch_tokens)
                              : (uint64_t)s->info->max_ctx * s->info->kv_bytes_per_token;
    m->step_tokens = s->cfg.max_batch_tokens;
    for (int t = 0; t < 2; t++) { /* a control token's text, cut to what fits (they are short) */
        char *dst = t ? m->eos_token : m->bos_token;
        const int32_t id = t ? s->info->eos : s->info->bos, cap = (int32_t)sizeof m->bos_token - 1;
        const int n = id >= 0 ? wk_token_to_piece(s->e, id, true, dst, cap) : 0;
        dst[n > 0 && n <= cap ? n : 0] = 0;
    }
    m->add_bos = s->info->add_bos;
    const char *tmpl = wk_engine_chat_template(s->e);
    m->chat_template = tmpl ? strdup(tmpl) : NULL;

    /* The end-of-generation tokens, for the requests that mask them (ignore_eos, min_tokens). */
    for (int32_t t = 0; t < s->info->n_vocab && s->n_eog < (int)(sizeof s->eog / sizeof *s->eog); t++)
        if (wk_token_is_eog(s->e, t)) s->eog[s->n_eog++] = t;
    size_t nv = (size_t)s->info->n_vocab;
    s->logits = malloc((size_t)s->cfg.max_seqs * nv * sizeof *s->logits);
    s->logit_rows = s->cfg.max_seqs;
    s->scratch = calloc(nv, sizeof *s->scratch);
    s->piece_cap = 256;
    s->piece = malloc((size_t)s->piece_cap);
    s->items = calloc((size_t)s->cfg.max_seqs, sizeof *s->items);
    s->item_req = calloc((size_t)s->cfg.max_seqs, sizeof *s->item_req);
    sched_event *ready = sched_ev_new(EV_READY, 0);
    if (!s->logits || !s->scratch || !s->piece || !s->items || !s->item_req || !ready) {
        rc = WK_ERR_NOMEM;
        snprintf(err, sizeof err, "out of memory");
    } else {
        rc = warm_up(s, err, sizeof err);
    }
    if (rc < 0) {
        free(ready);
        sched_event *ev = sched_ev_new(EV_FATAL, 0);
        if (ev) snprintf(ev->message, sizeof ev->message, "warm-up failed: %s%s%.400s", wk_strerror(rc),
                         err[0] ? ": " : "", err);
        sched_ev_post(s, ev);
        sched_ev_flush(s);
        goto out;
    }
    rc = sched_front_start(s);
    if (rc < 0) {
        free(ready);
        sched_event *ev = sched_ev_new(EV_FATAL, 0);
        if (ev) snprintf(ev->message, sizeof ev->message, "cannot start the front thread: %s", wk_strerror(rc));
        sched_ev_post(s, ev);
        sched_ev_flush(s);
        goto out;
    }
    sched_publish_pool(s);
    sched_ev_post(s, ready);
    sched_ev_flush(s);

    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->jobs && !s->quit && !s->running && !s->waiting) pthread_cond_wait(&s->cv, &s->mu);
        sched_job *jobs = s->jobs;
        s->jobs = s->jobs_tail = NULL;
        bool quit = s->quit;
        pthread_mutex_unlock(&s->mu);
        sched_handle_jobs(s, jobs);
        /* Refusals go out now, not after the step (a prefill step takes seconds on a CPU). */
        sched_ev_flush(s);
        if (quit) break;
        if (s->running || s->waiting) sched_step(s);
        sched_publish_pool(s);
        sched_ev_flush(s);
    }

out:
    sched_front_join(s); /* it tokenizes with the engine: gone before the engine is */
    while (s->running) req_finish(s, s->running, "abort");
    while (s->waiting) req_finish(s, s->waiting, "abort");
    free(s->logits);
    free(s->scratch);
    free(s->unmasked);
    wk_grammar_vocab_destroy(s->grammar_vocab);
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
    pthread_cond_init(&s->front_cv, NULL);
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
    for (sched_job **q = &s->jobs; q; q = q == &s->jobs ? &s->front_jobs : NULL)
        while (*q) {
            sched_job *next = (*q)->next;
            gen_params_free(&(*q)->gen);
            free(*q);
            *q = next;
        }
    free(s->model.chat_template);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->front_cv);
    free(s);
}

void sched_stop(scheduler *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_signal(&s->cv);
    pthread_cond_signal(&s->front_cv);
    pthread_mutex_unlock(&s->mu);
    /* The current step finishes first (a forward pass cannot be interrupted): well under a second
     * for decode steps. */
    if (s->thread_started) pthread_join(s->thread, NULL);
    uv_close((uv_handle_t *)&s->async, on_async_closed);
}
