/* The engine thread and its two queues: jobs in (loop thread -> engine thread, a mutex and a
 * condition variable) and events out (engine thread -> loop thread, a mutex and a uv_async).
 * Only the engine thread touches the wk_engine; only the loop thread touches sockets. */
#ifndef WUSHKV_SCHEDULER_H
#define WUSHKV_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "sched/kv_budget.h"
#include "metrics/metrics.h"
#include "wushkv/grammar.h"
#include "wushkv/wushkv.h"

#define SCHED_MAX_STOP 8     /* stop strings per request (OpenAI allows 4) */
#define SCHED_MAX_STOP_IDS 64 /* vLLM's stop_token_ids per request */
#define SCHED_MAX_BAD_WORDS 64 /* vLLM's bad_words per request */
#define SCHED_MAX_ALLOWED_IDS (1 << 18) /* vLLM's allowed_token_ids per request */
#define SCHED_MAX_TOP_LOGPROBS 20
/* A request's scored prompt entries, counting each alternative: prompt tokens x (alternatives + 1)
 * x choices (docs/reliability.md, the limits table). */
#define SCHED_MAX_PROMPT_SCORES (1 << 19)

/* What one generation asks for, already validated (openai_request.c) except for what needs the
 * tokenizer: the prompt's length against the context. */
typedef struct gen_params {
    char *prompt_text;       /* tokenized on the front thread (sched_front.c), or NULL when prompt_tokens is given;
                              * NUL-terminated, but it may hold NUL bytes (JSON's \u0000): prompt_len counts */
    size_t prompt_len;
    char *from_text;         /* the front thread's: the text prompt_tokens came from (owned), from_len bytes */
    size_t from_len;
    wk_text_range *plain;    /* owned: ranges of prompt_text that are a user's words (chat), where
                              * control tokens are text; NULL: control tokens parsed everywhere */
    int n_plain;
    size_t system_end;       /* chat: where the leading system messages' words end in prompt_text; 0: none */
    int32_t *prompt_tokens;  /* owned */
    int n_prompt_tokens;
    int system_tokens;       /* chat: prompt tokens up to the system messages' end (from system_end); 0: none */
    int truncate_prompt;     /* vLLM's truncate_prompt_tokens: only the prompt's last N tokens run; 0: all */
    bool add_special;        /* the model's BOS before prompt_text */
    int max_tokens;          /* -1: until the context is full */
    bool max_tokens_given;   /* the client asked for max_tokens (else a default, cut to what the context holds) */
    wk_sampler_params sampling;
    float presence_penalty, frequency_penalty, repetition_penalty; /* 0, 0, 1: off */
    int repeat_last_n; /* repetition_penalty looks at the last N prompt + generated tokens; -1: all */
    int n_bias;
    int32_t *bias_tokens; /* owned */
    float *bias_values;   /* owned */
    char *stop[SCHED_MAX_STOP]; /* may hold NUL bytes: stop_len counts */
    size_t stop_len[SCHED_MAX_STOP];
    int n_stop;
    /* vLLM's stop_token_ids: generating one of these ends the request ("stop"), the token's text
     * left out (kept with include_stop); checked against the vocabulary on the front thread. */
    int32_t stop_ids[SCHED_MAX_STOP_IDS];
    int n_stop_ids;
    bool include_stop; /* vLLM's include_stop_str_in_output: the stop string or stop token's text stays */
    /* vLLM's bad_words (owned; may hold NUL bytes: bad_len counts), and the token sequences the
     * front thread makes of them (sched_front.c): sequence k is bad_ids[bad_end[k-1] .. bad_end[k])
     * (from 0 for k = 0); its last token is never drawn after the others. */
    char *bad[SCHED_MAX_BAD_WORDS];
    size_t bad_len[SCHED_MAX_BAD_WORDS];
    int n_bad;
    int32_t *bad_ids;
    int bad_end[2 * SCHED_MAX_BAD_WORDS];
    int n_bad_seqs;
    bool ignore_eos;   /* end-of-generation tokens are never drawn (masked, as llama.cpp does) */
    int min_tokens;    /* vLLM's: until this many tokens, end-of-generation and stop_ids are masked and
                        * stop strings not matched */
    /* vLLM's allowed_token_ids: only these tokens are ever drawn (owned; sorted ascending without
     * repeats on the engine thread, checked against the vocabulary there); NULL: any. */
    int32_t *allowed_ids;
    int n_allowed_ids;
    bool render_special; /* vLLM's skip_special_tokens false: control tokens' text is in the output */
    int logprobs; /* -1: none; else the number of alternatives per token (0..SCHED_MAX_TOP_LOGPROBS) */
    /* The prompt sent back once it is prefilled (an EV_PROMPT: its tokens, for OpenAI's echo), and
     * with prompt_logprobs each prompt token's log-probability under the tokens before it, with
     * prompt_top alternatives (0..SCHED_MAX_TOP_LOGPROBS): scoring a text, as vLLM's prompt
     * logprobs. Such a prompt is computed whole: the prefix cache gives it nothing it must score. */
    bool echo_prompt, prompt_logprobs;
    int prompt_top;
    wk_grammar *grammar; /* one reference: what the output must be a sentence of (structured output); NULL: none */
} gen_params;

void gen_params_free(gen_params *g);

typedef enum { JOB_GENERATE, JOB_CANCEL, JOB_TOKENIZE, JOB_DETOKENIZE, JOB_RESET_PREFIX_CACHE, JOB_QUIT } job_kind;

typedef struct sched_job {
    job_kind kind;
    uint64_t id;
    /* JOB_GENERATE: the request's first id, shared by its choices, which are admitted together or
     * refused together (a batch whose last prompt is too long queues none of the others). */
    uint64_t group;
    bool refused; /* JOB_GENERATE: the front thread refused it and posted its error (sched_front.c) */
    double t_arrival; /* monotonic seconds (mono_now_s) when the HTTP request was complete */
    gen_params gen;   /* JOB_GENERATE; JOB_TOKENIZE uses prompt_text + add_special, JOB_DETOKENIZE prompt_tokens */
    struct sched_job *next;
} sched_job;

typedef enum {
    EV_READY,       /* the engine is open and warmed up: info is valid */
    EV_FATAL,       /* the engine could not open; message says why */
    EV_STARTING,    /* before EV_READY: what the engine thread waits for now (message: "calibrating") */
    EV_ACCEPTED,    /* a generation passed the checks that need the tokenizer: prompt_tokens */
    EV_TEXT,        /* text produced by one request (may be empty when only token counts moved) */
    EV_DONE,        /* a generation ended: finish_reason and usage */
    EV_ERROR,       /* a request refused or failed: status, message, param, code */
    EV_TOKENS,      /* JOB_TOKENIZE's answer */
    EV_DETOKENIZED, /* JOB_DETOKENIZE's answer (text) */
    EV_RESET,       /* JOB_RESET_PREFIX_CACHE done: status 200 */
    EV_PROMPT,      /* gen_params.echo_prompt: the prompt's tokens (logprobs, one entry each), once prefilled */
} event_kind;

/* One token's log-probability with its best alternatives (for logprobs). */
typedef struct token_logprob {
    int32_t token;
    float logprob;
    int rank;      /* EV_PROMPT: 1 + the tokens more likely than this one (vLLM's rank) */
    bool unscored; /* EV_PROMPT: no logprob (the first token, or none asked for) */
    bool textless; /* EV_PROMPT: the BOS the server put before a text prompt: not in the prompt's text */
    char *piece; /* the token's bytes (owned; alone they may not be valid UTF-8: a byte token) */
    int piece_len;
    int n_top;
    int32_t top_token[SCHED_MAX_TOP_LOGPROBS];
    float top_logprob[SCHED_MAX_TOP_LOGPROBS];
    char *top_piece[SCHED_MAX_TOP_LOGPROBS]; /* owned */
    int top_piece_len[SCHED_MAX_TOP_LOGPROBS];
} token_logprob;

typedef struct sched_event {
    event_kind kind;
    uint64_t id;
    char *text; /* EV_TEXT, EV_DETOKENIZED; owned */
    size_t text_len;
    int32_t *tokens; /* EV_TOKENS; owned */
    int n_tokens;
    token_logprob *logprobs; /* EV_TEXT with logprobs; owned; n_logprobs entries */
    int n_logprobs;
    int status;              /* EV_ERROR: HTTP status */
    char message[512];       /* EV_ERROR, EV_FATAL */
    const char *param, *code; /* EV_ERROR: static strings or NULL */
    const char *finish_reason; /* EV_DONE: "stop", "length", "abort" */
    /* EV_DONE, vLLM's stop_reason: the stop string that ended a "stop" (owned, stop_str_len bytes,
     * else NULL), or the stop_ids token that did (else -1); neither for an end-of-generation token,
     * a grammar's end or any other finish. */
    char *stop_str;
    size_t stop_str_len;
    int32_t stop_token;
    int prompt_tokens, completion_tokens;
    int cached_tokens;       /* EV_DONE: prompt tokens taken from the prefix cache at admission */
    kv_usage kv;             /* EV_DONE: peak held by the sequence */
    double queue_s, ttft_s;  /* EV_DONE: waited for a slot; arrival -> first token (-1: none) */
    struct sched_event *next;
} sched_event;

void sched_event_free(sched_event *ev);
/* Frees n entries' pieces and the array (a may be NULL). */
void token_logprobs_free(token_logprob *a, int n);

/* What the loop thread needs to know about the model, copied once the engine is ready. */
typedef struct model_summary {
    char name[256], arch[64], device[256];
    int max_ctx, n_vocab;
    uint64_t kv_bytes_per_token; /* as stored (a 16-token block of the paged pool is 16 of these) */
    uint64_t kv_pool_bytes;      /* the whole KV cache */
    uint64_t kv_pool_blocks;     /* the paged pool's blocks (0 for f16) */
    int kv_layer_groups, kv_swa_groups, kv_swa_window; /* wk_model_info's */
    int kv_swa_bits;             /* the sliding layers' format (per-layer-class formats) */
    uint64_t kv_swa_pool_blocks; /* their own pool's blocks (0: one pool) */
    char kv_wide_layers[128];    /* wide keys: their layers, "11" or "5,11" ("" without) */
    double kv_bits_per_element;
    char wush_path[4096];        /* the WUSH sidecar the engine opened with ("" without) */
    bool prefix_cache;           /* automatic prefix caching is on (wk_model_info) */
    bool prefix_cache_park;      /* ... by parking ended sequences (f16 windows), not by blocks */
    int kv_snapshots;            /* ... and window snapshots kept at most (wk_model_info's) */
    uint64_t kv_context_bytes;   /* held by one sequence of max_ctx tokens (wk_kv_peak_bytes; f16: its slot) */
    int step_tokens;             /* the most tokens a step carries (wk_model_info.max_batch_tokens) */
    char *chat_template; /* owned copy, or NULL */
    char bos_token[64], eos_token[64]; /* the BOS and end-of-sequence tokens' text ("" without one) */
    bool add_bos;                      /* text prompts start with the BOS */
} model_summary;

/* Runs on the engine thread before the engine opens (serve: find or make the WUSH sidecar). It may
 * change *p; strings it points p at must outlive the scheduler. starting(sched, "calibrating")
 * tells the loop thread what it waits for (an EV_STARTING event); stopping(sched) turns true once
 * sched_stop was called (a long step should then give up). 0, or negative after printing why on
 * stderr (then EV_FATAL). */
typedef void (*sched_starting_fn)(void *sched, const char *state);
typedef bool (*sched_stopping_fn)(void *sched);
typedef int (*sched_prepare_fn)(wk_engine_params *p, void *data, sched_starting_fn starting,
                                sched_stopping_fn stopping, void *sched);

typedef struct sched_config {
    wk_engine_params engine;
    sched_prepare_fn prepare; /* NULL: none */
    void *prepare_data;
    int max_seqs;         /* sequences decoded together */
    int max_batch_tokens; /* tokens per forward step (decode tokens + a prefill chunk); the engine's
                           * resolved wk_model_info.max_batch_tokens replaces it once it is open
                           * (WK_BATCH_TOKENS_AUTO: by the device) */
} sched_config;

typedef struct scheduler scheduler;
typedef void (*sched_event_cb)(sched_event *ev, void *data); /* takes ownership of ev */

/* Starts the engine thread, which opens the engine, warms it up and sends EV_READY or EV_FATAL.
 * on_event runs on the loop thread. */
int sched_start(scheduler **out, uv_loop_t *loop, const sched_config *cfg, metrics *m, sched_event_cb on_event,
                void *data);
/* Queues a job, or a chain of jobs linked by next, at once (takes ownership); never blocks on
 * the engine. */
void sched_submit(scheduler *s, sched_job *job);
void sched_cancel(scheduler *s, uint64_t id);
/* Asks the engine thread to stop (cancelling whatever runs), joins it and frees everything. */
void sched_stop(scheduler *s);
const model_summary *sched_model(const scheduler *s); /* valid after EV_READY */


#endif
