/* The prompt sent back with its completion: each prompt token in an EV_PROMPT once the prompt is
 * prefilled (OpenAI's echo), scored with its log-probability under the tokens before it when asked
 * (echo with logprobs, vLLM's prompt_logprobs: what evaluation harnesses read to score a text).
 * A scored prompt's chunks return every row's logits, so the prefix cache may give it only what it
 * scored already, and its chunks are bounded by the logits rows the scheduler holds. */
#include "sched/scheduler_int.h"

#include <stdlib.h>
#include <string.h>

#include "sched/logits.h"

/* Logits rows (beyond one per item) a step may return for scored prompts: one submit of the
 * engine's output head (forward.c computes at most 64 rows a submit), 64 MiB for Gemma 3's
 * 262144-token vocabulary, allocated by the first request that scores a prompt. */
enum { PROMPT_ROWS = 64 };

/* What a scored prompt token costs a step, in plain prompt tokens: its logits row (the output
 * head, 262144 x 640 multiply-adds for Gemma 3 270M, more than the layers' own products) and its
 * log-softmax on the host. Measured: a 590-token WikiText prompt took 2.6-2.9x as long scored as
 * plain (docs/api.md, "Echo and prompt logprobs"). A step's scored chunk is cut to match, so a
 * step carrying one costs the requests decoding beside it about what a plain chunk's step does. */
enum { SCORED_TOKEN_COST = 3 };

/* Positions 0..n_prompt-2 have logits that score a prompt token. */
static bool scoring(const req *r) { return r->g.prompt_logprobs && r->scored_rows < r->n_prompt - 1; }

bool prompt_needs_rows(const req *r) { return scoring(r) && r->n_prefilled < r->n_prompt - 1; }

int prompt_reuse_limit(const req *r, int most) { return scoring(r) && most > r->scored_rows ? r->scored_rows : most; }

int prompt_spare_rows(scheduler *s) {
    const int want = s->cfg.max_seqs + PROMPT_ROWS;
    if (s->logit_rows >= want) return s->logit_rows - s->cfg.max_seqs;
    bool needed = false;
    for (const req *r = s->running; r && !needed; r = r->next) needed = r->state == R_PREFILL && prompt_needs_rows(r);
    if (!needed) return s->logit_rows - s->cfg.max_seqs;
    float *grown = realloc(s->logits, (size_t)want * (size_t)s->info->n_vocab * sizeof *grown);
    if (!grown) return s->logit_rows - s->cfg.max_seqs; /* a row a step: slow, not wrong */
    s->logits = grown;
    s->logit_rows = want;
    return PROMPT_ROWS;
}

int prompt_chunk_bound(int chunk, int *left, int *spare) {
    int most = *left / SCORED_TOKEN_COST;
    if (most > *spare + 1) most = *spare + 1;
    if (chunk > most) chunk = most;
    if (chunk < 1) chunk = 1;
    *spare -= chunk - 1;
    if (*spare < 0) *spare = 0;
    *left -= chunk * (SCORED_TOKEN_COST - 1);
    return chunk;
}

/* r's entries, each unscored until its row is read; NULL when out of memory. */
static token_logprob *entries(req *r) {
    if (!r->scored && (r->scored = calloc((size_t)r->n_prompt, sizeof *r->scored)))
        for (int i = 0; i < r->n_prompt; i++) r->scored[i] = (token_logprob){.token = r->prompt[i], .unscored = true};
    return r->scored;
}

bool prompt_score_rows(scheduler *s, req *r, const float *rows, int first, int n) {
    const int nv = s->info->n_vocab;
    token_logprob *e = entries(r);
    if (!e) {
        req_fail(s, r, "out of memory", WK_ERR_NOMEM, NULL);
        return false;
    }
    for (int t = 0; t < n && first + t + 1 < r->n_prompt; t++) {
        token_logprob *lp = &e[first + t + 1];
        const float *row = rows + (size_t)t * (size_t)nv;
        for (int j = 0; j < lp->n_top; j++) free(lp->top_piece[j]); /* scored before a preemption */
        lp->n_top = r->g.prompt_top;
        lp->logprob = logits_logprobs(row, nv, lp->token, &lp->n_top, lp->top_token, lp->top_logprob, &lp->rank);
        lp->unscored = false;
        for (int j = 0; j < lp->n_top; j++)
            lp->top_piece[j] = sched_dup_piece(s, lp->top_token[j], true, &lp->top_piece_len[j]);
    }
    if (first + n > r->scored_rows) r->scored_rows = first + n;
    return true;
}

bool prompt_post(scheduler *s, req *r) {
    token_logprob *e = entries(r);
    sched_event *ev = e ? sched_ev_new(EV_PROMPT, r->id) : NULL;
    if (!ev) {
        req_fail(s, r, "out of memory", WK_ERR_NOMEM, NULL);
        return false;
    }
    for (int i = 0; i < r->n_prompt; i++) {
        /* The prompt's text has control tokens' text (a token prompt's <bos>, a typed
         * <start_of_turn>), but not the BOS the server put before a text prompt. */
        e[i].piece = sched_dup_piece(s, e[i].token, true, &e[i].piece_len);
        e[i].textless = i == 0 && r->g.add_special && e[i].token == s->info->bos;
    }
    ev->logprobs = e;
    ev->n_logprobs = r->n_prompt;
    ev->prompt_tokens = r->n_prompt;
    r->scored = NULL;
    r->prompt_sent = true;
    sched_ev_post(s, ev);
    return true;
}
