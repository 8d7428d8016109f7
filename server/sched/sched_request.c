/* The life of one request on the engine thread: the checks that need the model (prompt length
 * against the context and the KV pool, token ids, logit_bias), cancellation, and the end of a
 * request (last text, usage, metrics, its sequence freed at once). Text work (tokenizing prompts,
 * the tokenize and detokenize jobs) happens before, on the front thread (sched_front.c). */
#include "sched/scheduler_int.h"
#include "metrics/mono_clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One token's text (control tokens' only with render_special), growing the buffer when the first
 * guess is short. Returns the count or a wk_status. */
int token_piece(const wk_engine *e, int32_t tok, bool render_special, char **buf, int *cap) {
    int n = wk_token_to_piece(e, tok, render_special, *buf, *cap);
    if (n > *cap) {
        char *p = realloc(*buf, (size_t)n);
        if (!p) return WK_ERR_NOMEM;
        *buf = p;
        *cap = n;
        n = wk_token_to_piece(e, tok, render_special, *buf, *cap);
    }
    return n;
}

int sched_piece(scheduler *s, int32_t tok) { return token_piece(s->e, tok, false, &s->piece, &s->piece_cap); }

char *sched_dup_piece(scheduler *s, int32_t tok, bool render_special, int *len) {
    int n = token_piece(s->e, tok, render_special, &s->piece, &s->piece_cap);
    if (n < 0) n = 0;
    char *p = malloc((size_t)n + 1);
    if (p) {
        memcpy(p, s->piece, (size_t)n);
        p[n] = 0;
    }
    *len = n;
    return p;
}

void req_free(req *r) {
    if (r->seq) wk_seq_destroy(r->seq);
    wk_sampler_destroy(r->sampler);
    wk_matcher_destroy(r->matcher); /* before g, whose grammar it reads */
    text_stream_free(&r->ts);
    gen_params_free(&r->g);
    free(r->prompt);
    free(r->replay);
    free(r->gen);
    token_logprobs_free(r->scored, r->scored ? r->n_prompt : 0);
    free(r);
}

void req_unlink(req **head, req *r) {
    for (req **p = head; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            return;
        }
}

void req_remove(scheduler *s, req *r) {
    if (r->state == R_WAITING) {
        req_unlink(&s->waiting, r);
        s->waiting_tail = NULL;
        for (req *q = s->waiting; q; q = q->next) s->waiting_tail = q;
        s->n_waiting--;
    } else {
        req_unlink(&s->running, r);
        s->n_running--;
    }
}

/* Ends a request: last text, usage, metrics; parks or frees its sequence at once. */
static void finish(scheduler *s, req *r, const char *reason, int stop_index, int32_t stop_token) {
    bool oom = false;
    if (strcmp(reason, "abort") != 0) {
        text_buf tail = {0};
        text_stream_finish(&r->ts, &tail, &oom);
        if (tail.len) {
            sched_event *ev = sched_ev_new(EV_TEXT, r->id);
            if (ev) {
                ev->text = tail.p;
                ev->text_len = tail.len;
                tail.p = NULL;
            }
            sched_ev_post(s, ev);
        }
        text_buf_free(&tail);
    }
    double now = mono_now_s();
    double queue = (r->t_admit > 0 ? r->t_admit : now) - r->t_arrival;
    double ttft = r->t_first > 0 ? r->t_first - r->t_arrival : -1;
    sched_event *ev = sched_ev_new(EV_DONE, r->id);
    if (ev) {
        ev->finish_reason = reason;
        ev->stop_token = stop_token;
        if (stop_index >= 0 && (ev->stop_str = malloc(r->g.stop_len[stop_index])) != NULL) {
            memcpy(ev->stop_str, r->g.stop[stop_index], r->g.stop_len[stop_index]);
            ev->stop_str_len = r->g.stop_len[stop_index];
        }
        ev->prompt_tokens = r->n_prompt;
        ev->completion_tokens = r->n_gen;
        ev->cached_tokens = r->n_cached;
        ev->kv = kv_budget_usage(&s->kv, r->peak_len, r->peak_bytes);
        ev->queue_s = queue;
        ev->ttft_s = ttft;
        sched_ev_post(s, ev);
    }
    metrics_request m = {
        .finish_reason = reason,
        .prompt_tokens = r->n_prompt,
        .generation_tokens = r->n_gen,
        .max_tokens = r->max_tokens,
        .queue_s = queue,
        .ttft_s = ttft,
        .prefill_s = r->t_first > 0 && r->t_admit > 0 ? r->t_first - r->t_admit : -1,
        .decode_s = r->t_first > 0 ? r->t_last - r->t_first : -1,
        .tpot_s = r->n_gen > 1 ? (r->t_last - r->t_first) / (r->n_gen - 1) : -1,
        .e2e_s = now - r->t_arrival,
        .kv_bytes = r->peak_bytes,
    };
    metrics_request_done(s->m, &m);
    /* A finished sequence's cache is sound: parked, a later prompt that extends its tokens adopts
     * it (wk_seq_park destroys it where the format does not park). An aborted one goes. */
    if (strcmp(reason, "abort") != 0) {
        wk_seq_park(r->seq);
        r->seq = NULL;
    }
    req_remove(s, r);
    req_free(r);
}

void req_finish(scheduler *s, req *r, const char *reason) { finish(s, r, reason, -1, -1); }

void req_finish_stop(scheduler *s, req *r, int stop_index, int32_t stop_token) {
    finish(s, r, "stop", stop_index, stop_token);
}

void req_fail(scheduler *s, req *r, const char *what, int rc, const char *err) {
    sched_post_error(s, r->id, 500, NULL, "engine_error", "%s: %s%s%.400s", what, wk_strerror(rc), err && err[0] ? ": " : "",
               err ? err : "");
    metrics_request m = {.finish_reason = "error", .prompt_tokens = r->n_prompt, .generation_tokens = r->n_gen,
                         .max_tokens = r->max_tokens, .queue_s = -1, .ttft_s = -1, .prefill_s = -1, .decode_s = -1,
                         .tpot_s = -1, .e2e_s = mono_now_s() - r->t_arrival};
    metrics_request_done(s->m, &m);
    req_remove(s, r);
    req_free(r);
}

/* ---- jobs -------------------------------------------------------------------------------------- */

/* Structured output: a matcher at the start of the request's grammar (compiled when the request
 * was parsed, shared by its choices); the vocabulary's decoded texts are made once, by the first
 * request that needs them. false with an error event posted. */
static bool start_grammar(scheduler *s, req *r) {
    if (!s->grammar_vocab && !(s->grammar_vocab = wk_grammar_vocab_create(s->e))) {
        sched_post_error(s, r->id, 500, NULL, NULL, "out of memory");
        return false;
    }
    if (!(r->matcher = wk_matcher_create(r->g.grammar, s->grammar_vocab))) {
        sched_post_error(s, r->id, 500, NULL, NULL, "out of memory");
        return false;
    }
    return true;
}

static int cmp_token(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* vLLM's allowed_token_ids, sorted without repeats (the step's mask keeps them in one sweep) and
 * checked: in the vocabulary, and something left to draw beside the masks. false: refused (an
 * error event posted). */
static bool allowed_ids_check(scheduler *s, req *r) {
    const wk_model_info *info = s->info;
    qsort(r->g.allowed_ids, (size_t)r->g.n_allowed_ids, sizeof *r->g.allowed_ids, cmp_token);
    int k = 0;
    for (int i = 0; i < r->g.n_allowed_ids; i++)
        if (k == 0 || r->g.allowed_ids[i] != r->g.allowed_ids[k - 1]) r->g.allowed_ids[k++] = r->g.allowed_ids[i];
    r->g.n_allowed_ids = k;
    if (r->g.allowed_ids[k - 1] >= info->n_vocab) {
        sched_post_error(s, r->id, 400, "allowed_token_ids", NULL,
                         "allowed_token_ids id %d is outside the vocabulary (0..%d)", (int)r->g.allowed_ids[k - 1],
                         info->n_vocab - 1);
        return false;
    }
    /* With ignore_eos (always) or min_tokens (at first) the end-of-generation tokens are masked,
     * and with min_tokens the stop ids: an allowed set of nothing else would leave no token. */
    bool drawable = !r->g.ignore_eos && r->g.min_tokens == 0;
    for (int i = 0; i < k && !drawable; i++) {
        bool stop = false;
        for (int j = 0; j < r->g.n_stop_ids && r->g.min_tokens > 0; j++) stop |= r->g.stop_ids[j] == r->g.allowed_ids[i];
        drawable = !stop && !wk_token_is_eog(s->e, r->g.allowed_ids[i]);
    }
    if (!drawable) {
        sched_post_error(s, r->id, 400, "allowed_token_ids", NULL,
                         "allowed_token_ids holds only end-of-generation or stop tokens, which ignore_eos or "
                         "min_tokens keep from being drawn: no token is left");
        return false;
    }
    return true;
}

/* A generation job -> its request, checked against the model, the context and the pool; NULL
 * (an error event posted) when refused. Not queued yet: a request's choices are queued together
 * or not at all (sched_handle_jobs). */
static req *admit_generate(scheduler *s, sched_job *j, int n_choices) {
    if (j->refused) return NULL; /* its error is out already */
    const wk_model_info *info = s->info;
    req *r = calloc(1, sizeof *r);
    if (!r) {
        sched_post_error(s, j->id, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    r->id = j->id;
    r->g = j->gen;
    memset(&j->gen, 0, sizeof j->gen);
    r->t_arrival = j->t_arrival;
    r->state = R_WAITING;
    /* The front thread (sched_front.c) turned a text prompt into tokens already. */
    r->prompt = r->g.prompt_tokens;
    r->n_prompt = r->g.n_prompt_tokens;
    r->g.prompt_tokens = NULL;
    if (r->g.truncate_prompt > 0 && r->n_prompt > r->g.truncate_prompt) { /* vLLM's: the last N tokens */
        const int cut = r->n_prompt - r->g.truncate_prompt;
        memmove(r->prompt, r->prompt + cut, (size_t)r->g.truncate_prompt * sizeof *r->prompt);
        r->n_prompt = r->g.truncate_prompt;
        r->g.system_tokens = 0; /* the system messages' tokens no longer lead the prompt */
    }
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= info->n_vocab) {
            sched_post_error(s, r->id, 400, "prompt", NULL, "token id %d at position %d is outside the vocabulary (0..%d)",
                       (int)r->prompt[i], i, info->n_vocab - 1);
            req_free(r);
            return NULL;
        }
    if (r->n_prompt == 0) {
        sched_post_error(s, r->id, 400, "prompt", NULL, "the prompt is empty (0 tokens)");
        req_free(r);
        return NULL;
    }
    /* The whole request must fit the context: a prompt that leaves no room, or room for fewer
     * tokens than max_tokens asks, is refused now rather than cut short later. */
    int room = info->max_ctx - r->n_prompt;
    /* A default max_tokens (completions' 16) the client never asked for ends where the context
     * does, rather than refusing a prompt that fits. */
    if (!r->g.max_tokens_given && room > 0 && r->g.max_tokens > room) r->g.max_tokens = room;
    /* max_tokens 0 (echo's scoring of a text) computes the prompt alone, which may fill the context. */
    if (room < (r->g.max_tokens == 0 ? 0 : 1) || (r->g.max_tokens > 0 && r->g.max_tokens > room)) {
        sched_post_error(s, r->id, 400, r->g.max_tokens > 0 && room > 0 ? "max_tokens" : "prompt", "context_length_exceeded",
                   "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the "
                   "prompt, %d for the completion). Please reduce the prompt or max_tokens.",
                   info->max_ctx, r->n_prompt + (r->g.max_tokens > 0 ? r->g.max_tokens : 1), r->n_prompt,
                   r->g.max_tokens > 0 ? r->g.max_tokens : 1);
        req_free(r);
        return NULL;
    }
    /* The paged pool is shared: a prompt that needs more blocks than the whole pool could never be
     * admitted, whatever else runs. (One that fits is admitted once enough blocks are free.) */
    {
        static const uint64_t none[KV_POOLS] = {0};
        if (!kv_budget_fits(&s->kv, none, r->n_prompt)) {
            uint64_t need = kv_budget_seq_bytes(&s->kv, r->n_prompt);
            sched_post_error(s, r->id, 400, "prompt", "kv_cache_exceeded",
                       "The prompt of %d tokens needs %d KV cache blocks (%llu bytes) but the server's whole KV "
                       "pool holds %llu blocks (%llu bytes, --kv-mem). Please shorten the prompt.",
                       r->n_prompt, (int)kv_budget_pool_blocks(&s->kv, r->n_prompt), (unsigned long long)need,
                       (unsigned long long)(info->kv_pool_blocks + info->kv_swa_pool_blocks),
                       (unsigned long long)info->kv_pool_bytes);
            req_free(r);
            return NULL;
        }
    }
    /* A scored prompt's entries reach the client at once (one event, one JSON object built on the
     * loop thread): their count is bounded so that one request cannot hold the others up. */
    if (r->g.prompt_logprobs &&
        (uint64_t)r->n_prompt * (uint64_t)(r->g.prompt_top + 1) * (uint64_t)n_choices > SCHED_MAX_PROMPT_SCORES) {
        sched_post_error(s, r->id, 400, NULL, "invalid_value",
                         "scoring %d prompt tokens (echo with logprobs, or prompt_logprobs) with %d alternatives each "
                         "for %d choices exceeds %d entries a request (prompt tokens x (alternatives + 1) x choices): "
                         "ask for fewer alternatives or choices, or score a shorter text",
                         r->n_prompt, r->g.prompt_top, n_choices, SCHED_MAX_PROMPT_SCORES);
        req_free(r);
        return NULL;
    }
    r->n_fill = r->n_prompt;
    r->max_tokens = r->g.max_tokens >= 0 ? r->g.max_tokens : room;
    for (int i = 0; i < r->g.n_bias; i++)
        if (r->g.bias_tokens[i] < 0 || r->g.bias_tokens[i] >= info->n_vocab) {
            sched_post_error(s, r->id, 400, "logit_bias", NULL, "logit_bias token id %d is outside the vocabulary (0..%d)",
                       (int)r->g.bias_tokens[i], info->n_vocab - 1);
            req_free(r);
            return NULL;
        }
    if (r->g.n_allowed_ids && !allowed_ids_check(s, r)) {
        req_free(r);
        return NULL;
    }
    for (int i = 0; i < r->g.n_stop_ids; i++)
        if (r->g.stop_ids[i] >= info->n_vocab) {
            sched_post_error(s, r->id, 400, "stop_token_ids", NULL, "stop_token_ids id %d is outside the vocabulary (0..%d)",
                             (int)r->g.stop_ids[i], info->n_vocab - 1);
            req_free(r);
            return NULL;
        }
    r->sampler = wk_sampler_create(&r->g.sampling, info->n_vocab);
    if (!r->sampler) {
        sched_post_error(s, r->id, 500, NULL, NULL, "out of memory");
        req_free(r);
        return NULL;
    }
    if (r->g.grammar && !start_grammar(s, r)) {
        req_free(r);
        return NULL;
    }
    text_stream_init(&r->ts, r->g.stop, r->g.stop_len, r->g.n_stop);
    r->ts.include_stop = r->g.include_stop;
    return r;
}

/* An admitted request joins the queue. */
static void enqueue(scheduler *s, req *r) {
    sched_event *ev = sched_ev_new(EV_ACCEPTED, r->id);
    if (ev) ev->prompt_tokens = r->n_prompt;
    sched_ev_post(s, ev);
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

/* The error event of a request's choice that was fine itself but whose request another choice got
 * refused (after that one's own error event, which the client sees): every choice ends, none runs. */
static void refuse_choice(scheduler *s, uint64_t id) {
    sched_post_error(s, id, 400, NULL, "request_refused", "another choice of this request was refused");
}

/* Every job but generation (sched_handle_jobs admits a request's choices together). */
static void handle_job(scheduler *s, sched_job *j) {
    switch (j->kind) {
    case JOB_CANCEL: {
        req *r = find_req(s, j->id);
        if (r) req_finish(s, r, "abort");
        break;
    }
    case JOB_RESET_PREFIX_CACHE: {
        /* Cached blocks only: what running sequences hold stays theirs (unnamed from now on). */
        wk_engine_prefix_cache_flush(s->e);
        sched_event *ev = sched_ev_new(EV_RESET, j->id);
        if (ev) ev->status = 200;
        sched_ev_post(s, ev);
        break;
    }
    case JOB_GENERATE: /* (not here) */
    case JOB_TOKENIZE: /* answered by the front thread; never forwarded */
    case JOB_DETOKENIZE:
    case JOB_QUIT: break;
    }
}

void sched_handle_jobs(scheduler *s, sched_job *jobs) {
    while (jobs) {
        sched_job *j = jobs;
        if (j->kind != JOB_GENERATE) {
            jobs = j->next;
            handle_job(s, j);
            gen_params_free(&j->gen);
            free(j);
            continue;
        }
        /* One request's choices: all admitted, then all queued; or, when one is refused, none (the
         * earlier ones would otherwise have been queued, prefilled a step and aborted). */
        sched_job *end = j->next;
        int n = 1;
        while (end && end->kind == JOB_GENERATE && end->group == j->group) end = end->next, n++;
        req **rs = calloc((size_t)n, sizeof *rs);
        int failed = rs ? -1 : 0; /* the refused choice's place in the run */
        if (!rs) sched_post_error(s, j->id, 500, NULL, NULL, "out of memory");
        int i = 0;
        for (sched_job *k = j; k != end && failed < 0; k = k->next, i++)
            if (!(rs[i] = admit_generate(s, k, n))) failed = i;
        i = 0;
        for (sched_job *k = j; k != end; k = k->next, i++) {
            if (failed < 0) {
                enqueue(s, rs[i]);
            } else if (i != failed) {
                if (rs && rs[i]) req_free(rs[i]);
                if (!k->refused) refuse_choice(s, k->id);
            }
        }
        free(rs);
        while (jobs != end) {
            sched_job *next = jobs->next;
            gen_params_free(&jobs->gen);
            free(jobs);
            jobs = next;
        }
    }
}
