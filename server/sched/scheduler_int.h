/* The scheduler's internals shared by its three files: the request and scheduler structs and the
 * functions each file offers the others. scheduler.c owns the thread, the queues and the events;
 * sched_request.c the life of a request (checks, jobs, finishing); sched_step.c one forward step
 * (admission, preemption, batching, sampling). Not for use outside the scheduler. */
#ifndef WUSHKV_SCHEDULER_INT_H
#define WUSHKV_SCHEDULER_INT_H

#include <pthread.h>

#include "sched/kv_budget.h"
#include "sched/scheduler.h"
#include "sched/text_stream.h"
#include "wushkv/grammar.h"

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
    wk_matcher *matcher; /* structured output: where the output stands in g.grammar; NULL: none */
    /* Prefill source: the prompt, or after a preemption prompt + generated tokens (replay,
     * owned). n_fill tokens of it; n_prefilled already in the KV cache; chunk in this step's item. */
    int32_t *replay;
    int n_fill, n_prefilled, chunk;
    /* Steps in a row this request was prefilling and got no chunk (sched_step.c's build_batch:
     * after PREFILL_PATIENCE of them it goes before shorter prompts). */
    int prefill_waits;
    int n_prompt_counted;   /* prompt tokens counted in prompt_tokens_total (recompute is not) */
    int n_cached;           /* prompt tokens its first admission took from the prefix cache */
    bool looked_up;         /* the prefix cache was queried for it (its first admission) */
    int32_t last;           /* the token the next decode step feeds */
    /* Prompt logprobs (g.prompt_logprobs): entry i (1..n_prompt-1) scores prompt[i], from the
     * logits of position i-1; scored_rows: the leading positions whose logits were read. The
     * entries go out in the EV_PROMPT (prompt_sent) once the prompt is prefilled. */
    token_logprob *scored;
    int scored_rows;
    bool prompt_sent;
    bool chunk_rows; /* this step's chunk returns every row's logits (a prompt being scored) */
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
    sched_job *jobs, *jobs_tail; /* guarded by mu: jobs the front thread passed on */
    /* The front thread (sched_front.c): every submitted job goes through it first. */
    pthread_t front;
    bool front_started;
    pthread_cond_t front_cv;
    sched_job *front_jobs, *front_tail; /* guarded by mu: submitted, not yet looked at */
    size_t max_piece_bytes; /* the most text bytes one token stands for (written before the front starts) */
    char *front_piece;      /* the front thread's piece buffer */
    int front_piece_cap;
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
    kv_budget kv; /* the KV accounting admission uses, from info */
    req *waiting, *waiting_tail, *running;
    int n_waiting, n_running;
    float *logits;  /* logit_rows rows of n_vocab: one per item, and more for scored prompts (sched_step.c) */
    int logit_rows;
    int *scratch;  /* n_vocab zeros for logits_penalize */
    int32_t eog[16]; /* the vocabulary's end-of-generation tokens (ignore_eos, min_tokens mask them) */
    int n_eog;
    wk_grammar_vocab *grammar_vocab; /* the vocabulary decoded for grammars: made by the first request with one */
    float *unmasked;                 /* n_vocab: a row before its grammar mask, for its logprobs */
    char *piece;
    int piece_cap;
    wk_batch_item *items;
    req **item_req;
};

/* scheduler.c: events to the loop thread (queued during a step, handed over by sched_ev_flush). */
sched_event *sched_ev_new(event_kind kind, uint64_t id);
void sched_ev_post(scheduler *s, sched_event *ev);
void sched_ev_flush(scheduler *s);
void sched_post_error(scheduler *s, uint64_t id, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* sched_request.c */
/* Appends a chain of jobs (linked by next) to the queue head/tail under s->mu and wakes the
 * thread waiting on cv: the front queue's (sched_submit) or the engine's (the front thread). */
void sched_queue_push(scheduler *s, sched_job **head, sched_job **tail, pthread_cond_t *cv, sched_job *chain);
/* The engine thread's handling of a chain of jobs (sched_request.c), which it frees: a request's
 * generation jobs (one group) are queued together or refused together. */
void sched_handle_jobs(scheduler *s, sched_job *jobs);
/* The front thread: started by the engine thread once the engine is open (the bound it needs is
 * computed then); joined by it before the engine closes. */
int sched_front_start(scheduler *s);
void sched_front_join(scheduler *s);
/* A token's text into *buf (grown as needed, *cap its size). Returns its length or a wk_status. */
int token_piece(const wk_engine *e, int32_t tok, bool render_special, char **buf, int *cap);
/* One token's bytes into s->piece; returns the length or a negative wk_status. */
int sched_piece(scheduler *s, int32_t tok);
/* One token's bytes as a new string (empty when it has none; control tokens' only with
 * render_special); *len gets the length. */
char *sched_dup_piece(scheduler *s, int32_t tok, bool render_special, int *len);
void req_unlink(req **head, req *r);
/* Takes r out of the waiting or running list. */
void req_remove(scheduler *s, req *r);
void req_free(req *r);
void req_finish(scheduler *s, req *r, const char *reason);
/* req_finish for a "stop" that a stop string (index, else -1) or a stop_ids token (else -1) caused. */
void req_finish_stop(scheduler *s, req *r, int stop_index, int32_t stop_token);
void req_fail(scheduler *s, req *r, const char *what, int rc, const char *err);

/* prompt_score.c: the prompt sent back (EV_PROMPT) and scored (prompt logprobs). */
/* Whether r's next prefill chunk must return the logits of each of its rows. */
bool prompt_needs_rows(const req *r);
/* The most of r's prompt the prefix cache may give it: what r scored already, or `most`. */
int prompt_reuse_limit(const req *r, int most);
/* Rows beyond one per batch item that s->logits holds for scored chunks this step (growing it
 * when a request scores its prompt; 0 when it cannot grow: such chunks then go a token a step). */
int prompt_spare_rows(scheduler *s);
/* A scored prompt's chunk cut to the rows left (*spare, beyond its first) and to the step's
 * token budget (*left) at what a scored token costs; both are charged for the chunk returned
 * except its plain cost, which the caller takes from *left as for any chunk. At least 1. */
int prompt_chunk_bound(int chunk, int *left, int *spare);
/* Reads n rows of logits, those of r's positions first..first+n-1, into its prompt's entries.
 * false: r failed (out of memory) and is freed. */
bool prompt_score_rows(scheduler *s, req *r, const float *rows, int first, int n);
/* The EV_PROMPT of a prefilled prompt (once). false: r failed and is freed. */
bool prompt_post(scheduler *s, req *r);

/* sched_step.c */
/* Admits what fits, runs one forward step, hands out its tokens. */
void sched_step(scheduler *s);
void sched_publish_pool(scheduler *s);

#endif
