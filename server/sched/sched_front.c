/* The scheduler's front thread: every submitted job passes through it on its way to the engine
 * thread, so that the text work of a request never holds up a forward step of the others. A prompt
 * given as text is tokenized here once per request (the choices of one request share the tokens),
 * after a bound that needs no tokenizing: a prompt whose byte length alone proves it cannot fit the
 * context is refused at once (the tokenize endpoint's text too). The tokenize and detokenize
 * endpoints are answered here entirely.
 * Jobs (cancels included) reach the engine thread in the order they were submitted. */
#include "sched/scheduler_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most bytes of text any one token stands for: no prompt of B bytes has fewer than
 * ceil(B / this) tokens. Control tokens count with their text, which a prompt may spell out. */
static size_t max_piece_bytes(const wk_engine *e, int n_vocab) {
    char buf[512];
    size_t most = 1;
    for (int32_t t = 0; t < n_vocab; t++) {
        int n = wk_token_to_piece(e, t, true, buf, (int)sizeof buf);
        if (n > 0 && (size_t)n > most) most = (size_t)n;
    }
    return most;
}

/* Bytes before tokens: even if every token stood for max_piece_bytes bytes, a text of len bytes
 * would not leave room for one generated token. Refused (an error event) without the tokenizer's
 * cost, which grows faster than the text. */
static bool fits_by_bytes(scheduler *s, uint64_t id, size_t len) {
    const int max_ctx = s->info->max_ctx;
    const size_t at_least = (len + s->max_piece_bytes - 1) / s->max_piece_bytes;
    if (at_least < (size_t)max_ctx) return true;
    sched_post_error(s, id, 400, "prompt", "context_length_exceeded",
                     "This model's maximum context length is %d tokens. However, your prompt of %zu bytes is at "
                     "least %zu tokens (no token covers more than %zu bytes). Please reduce the prompt.",
                     max_ctx, len, at_least, s->max_piece_bytes);
    return false;
}

/* A chat's prompt tokens that its system messages' text alone tokenizes to as well (the text up to
 * system_end, its plain ranges cut there): the longest common start, which every conversation
 * with the same system messages shares, so the scheduler asks for a prefix-cache snapshot there.
 * 0 when the prefix cannot be tokenized (it is only a hint). */
static int system_tokens(scheduler *s, const gen_params *g, const int32_t *toks, int n) {
    wk_text_range *plain = malloc((size_t)g->n_plain * sizeof *plain);
    if (!plain) return 0;
    int n_plain = 0;
    for (int i = 0; i < g->n_plain && g->plain[i].off < g->system_end; i++) {
        wk_text_range r = g->plain[i];
        if (r.off + r.len > g->system_end) r.len = g->system_end - r.off;
        plain[n_plain++] = r;
    }
    int32_t *head = NULL;
    const int m = wk_tokenize_alloc_plain(s->e, g->prompt_text, g->system_end, g->add_special, plain, n_plain, &head);
    free(plain);
    int common = 0;
    while (common < m && common < n && head[common] == toks[common]) common++;
    free(head);
    return common;
}

/* vLLM's bad_words -> the token sequences a generation must not end in (gen_params.bad_ids): each
 * word with its leading spaces stripped, as tokenized alone, and with one space before it where that
 * gives as many tokens and another first token (the word inside a text); control-token text stays
 * text. false with an error event when a word cannot be tokenized. */
static bool tokenize_bad_words(scheduler *s, sched_job *j) {
    gen_params *g = &j->gen;
    for (int w = 0; w < g->n_bad; w++) {
        size_t skip = 0;
        while (skip < g->bad_len[w] && g->bad[w][skip] == ' ') skip++;
        const size_t len = g->bad_len[w] - skip;
        char *spaced = malloc(len + 2);
        if (!spaced) goto nomem;
        spaced[0] = ' ';
        memcpy(spaced + 1, g->bad[w] + skip, len);
        spaced[len + 1] = 0;
        int first_len = 0;
        int32_t first_tok = -1;
        for (int with_space = 0; with_space < 2 && len > 0; with_space++) {
            int32_t *toks = NULL;
            const int n = wk_tokenize_alloc(s->e, spaced + !with_space, len + (size_t)with_space, false, false, &toks);
            if (n < 0) {
                free(spaced);
                sched_post_error(s, j->id, n == WK_ERR_NOMEM ? 500 : 400, "bad_words", NULL,
                                 "bad word %d cannot be tokenized: %s", w, wk_strerror(n));
                return false;
            }
            const bool keep = n > 0 && (!with_space || (n == first_len && toks[0] != first_tok));
            const int at = g->n_bad_seqs ? g->bad_end[g->n_bad_seqs - 1] : 0; /* ids so far */
            int32_t *grown = keep ? realloc(g->bad_ids, ((size_t)at + (size_t)n) * sizeof *grown) : NULL;
            if (keep && !grown) {
                free(toks);
                free(spaced);
                goto nomem;
            }
            if (keep) {
                g->bad_ids = grown;
                memcpy(g->bad_ids + at, toks, (size_t)n * sizeof *toks);
                g->bad_end[g->n_bad_seqs++] = at + n;
            }
            if (!with_space) first_len = n, first_tok = n > 0 ? toks[0] : -1;
            free(toks);
        }
        free(spaced);
    }
    return true;
nomem:
    sched_post_error(s, j->id, 500, NULL, NULL, "out of memory");
    return false;
}

/* A generation prompt given as text -> its tokens, or an error event. `prev` is the job before it
 * in the same batch: the choices of one request carry the same text, tokenized once. */
static bool tokenize_prompt(scheduler *s, sched_job *j, const sched_job *prev) {
    gen_params *g = &j->gen;
    const size_t len = g->prompt_len;
    if (!fits_by_bytes(s, j->id, len)) return false;
    int n;
    int32_t *toks = NULL;
    bool copied = false;
    if (prev && prev->kind == JOB_GENERATE && prev->gen.prompt_tokens && prev->gen.add_special == g->add_special &&
        prev->gen.from_text && prev->gen.from_len == len && memcmp(prev->gen.from_text, g->prompt_text, len) == 0 &&
        prev->gen.n_plain == g->n_plain &&
        (!g->n_plain || memcmp(prev->gen.plain, g->plain, (size_t)g->n_plain * sizeof *g->plain) == 0)) {
        n = prev->gen.n_prompt_tokens;
        toks = malloc((size_t)(n > 0 ? n : 1) * sizeof *toks);
        if (!toks) n = WK_ERR_NOMEM;
        else memcpy(toks, prev->gen.prompt_tokens, (size_t)n * sizeof *toks), copied = true;
    } else if (g->plain) {
        /* A chat: the template's control tokens become their ids, the messages' words stay text. */
        n = wk_tokenize_alloc_plain(s->e, g->prompt_text, len, g->add_special, g->plain, g->n_plain, &toks);
    } else {
        /* A completions prompt: control tokens such as <start_of_turn> in it become their ids, as
         * llama.cpp's server and Hugging Face tokenizers do for plain prompts. */
        n = wk_tokenize_alloc(s->e, g->prompt_text, len, g->add_special, true, &toks);
    }
    if (n < 0) {
        sched_post_error(s, j->id, n == WK_ERR_NOMEM ? 500 : 400, "prompt", NULL, "the prompt cannot be tokenized: %s",
                         wk_strerror(n));
        return false;
    }
    /* The snapshot hint matters only to an engine that keeps window snapshots; a choice whose
     * tokens were copied from prev has prev's. */
    if (copied) g->system_tokens = prev->gen.system_tokens;
    else if (s->info->prefix_cache && s->info->kv_snapshots > 0 && g->plain && g->system_end > 0 && g->system_end < len)
        g->system_tokens = system_tokens(s, g, toks, n);
    else g->system_tokens = 0;
    g->prompt_tokens = toks;
    g->n_prompt_tokens = n;
    g->from_text = g->prompt_text; /* kept for the next choice's comparison; freed with the job */
    g->from_len = g->prompt_len;
    g->prompt_text = NULL;
    return true;
}

static void job_tokenize(scheduler *s, sched_job *j) {
    int32_t *toks = NULL;
    const char *text = j->gen.prompt_text ? j->gen.prompt_text : "";
    const size_t len = j->gen.prompt_text ? j->gen.prompt_len : 0;
    /* The same bound as a prompt's: no text longer than a context could hold is tokenized. */
    if (!fits_by_bytes(s, j->id, len)) return;
    /* A chat's rendering (messages) as a chat request's prompt is tokenized, else as a prompt. */
    int n = j->gen.plain ? wk_tokenize_alloc_plain(s->e, text, len, j->gen.add_special, j->gen.plain, j->gen.n_plain, &toks)
                         : wk_tokenize_alloc(s->e, text, len, j->gen.add_special, true, &toks);
    if (n < 0) {
        sched_post_error(s, j->id, 400, "prompt", NULL, "the text cannot be tokenized: %s", wk_strerror(n));
        return;
    }
    sched_event *ev = sched_ev_new(EV_TOKENS, j->id);
    if (!ev) {
        free(toks);
        return;
    }
    ev->tokens = toks;
    ev->n_tokens = n;
    sched_ev_post(s, ev);
}

static void job_detokenize(scheduler *s, sched_job *j) {
    text_stream ts;
    text_stream_init(&ts, NULL, NULL, 0);
    text_buf out = {0};
    bool oom = false;
    for (int i = 0; i < j->gen.n_prompt_tokens; i++) {
        int32_t t = j->gen.prompt_tokens[i];
        /* Control tokens as their text, as vLLM's and llama.cpp's /detokenize give them: what
         * /tokenize made of "<start_of_turn>" comes back as it went in (generated text drops them). */
        int n = t >= 0 && t < s->info->n_vocab ? token_piece(s->e, t, true, &s->front_piece, &s->front_piece_cap)
                                               : WK_ERR_INVALID;
        if (n < 0) {
            sched_post_error(s, j->id, 400, "tokens", NULL, "token id %d at position %d is outside the vocabulary (0..%d)",
                             (int)t, i, s->info->n_vocab - 1);
            text_stream_free(&ts);
            text_buf_free(&out);
            return;
        }
        text_stream_feed(&ts, s->front_piece, (size_t)n, &out, &oom);
    }
    text_stream_finish(&ts, &out, &oom);
    text_stream_free(&ts);
    sched_event *ev = sched_ev_new(EV_DETOKENIZED, j->id);
    if (!ev || oom || !text_buf_add(&out, "", 0)) {
        text_buf_free(&out);
        free(ev);
        sched_post_error(s, j->id, 500, NULL, NULL, "out of memory");
        return;
    }
    ev->text = out.p;
    ev->text_len = out.len;
    sched_ev_post(s, ev);
}

static void drop(sched_job *j) {
    gen_params_free(&j->gen);
    free(j);
}

static void *front_main(void *arg) {
    scheduler *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->front_jobs && !s->quit) pthread_cond_wait(&s->front_cv, &s->mu);
        sched_job *jobs = s->front_jobs;
        s->front_jobs = s->front_tail = NULL;
        bool quit = s->quit;
        pthread_mutex_unlock(&s->mu);
        if (quit) {
            while (jobs) {
                sched_job *next = jobs->next;
                drop(jobs);
                jobs = next;
            }
            break;
        }
        /* Look at the batch in order; what goes on to the engine keeps that order. A prompt that
         * cannot be tokenized gets its error here and goes on marked refused, and so does its
         * request's every later choice, untokenized: the engine thread refuses a request's choices
         * together (sched_handle_jobs). */
        sched_job *pass = NULL, **tail = &pass, *prev = NULL, *refused = NULL;
        while (jobs) {
            sched_job *j = jobs;
            jobs = j->next;
            j->next = NULL;
            if (j->kind == JOB_TOKENIZE || j->kind == JOB_DETOKENIZE) {
                if (j->kind == JOB_TOKENIZE) job_tokenize(s, j);
                else job_detokenize(s, j);
                drop(j);
                continue;
            }
            if (j->kind == JOB_GENERATE && refused && j->group == refused->group) {
                /* (left untokenized: the engine never admits it) */
            } else if (j->kind == JOB_GENERATE &&
                       ((j->gen.prompt_text && !tokenize_prompt(s, j, prev)) || !tokenize_bad_words(s, j))) {
                j->refused = true;
                refused = j;
            } else if (j->kind == JOB_GENERATE) {
                prev = j;
            }
            *tail = j;
            tail = &j->next;
        }
        sched_ev_flush(s); /* errors and tokenize answers */
        for (sched_job *j = pass; j; j = j->next) { /* compared; the engine needs only the tokens */
            free(j->gen.from_text);
            j->gen.from_text = NULL;
        }
        if (pass) sched_queue_push(s, &s->jobs, &s->jobs_tail, &s->cv, pass);
    }
    return NULL;
}

int sched_front_start(scheduler *s) {
    s->max_piece_bytes = max_piece_bytes(s->e, s->info->n_vocab);
    if (pthread_create(&s->front, NULL, front_main, s) != 0) return WK_ERR_NOMEM;
    s->front_started = true;
    return 0;
}

void sched_front_join(scheduler *s) {
    if (!s->front_started) return;
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_signal(&s->front_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->front, NULL);
    s->front_started = false;
    free(s->front_piece);
    s->front_piece = NULL;
}
