/* What api.c (routing, calls, engine events) and api_response.c (the JSON of responses) share:
 * the server's state, its calls and their choices, and the builders api.c sends. */
#ifndef WUSHKV_API_INT_H
#define WUSHKV_API_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <uv.h>

#include "api/api.h"
#include "http/http.h"
#include "metrics/metrics.h"
#include "api/openai_request.h"
#include "api/tool_calls.h"
#include "sched/scheduler.h"
#include "sched/text_stream.h"

typedef enum { CALL_COMPLETION, CALL_CHAT, CALL_RESPONSE, CALL_TOKENIZE, CALL_DETOKENIZE, CALL_RESET } call_kind;

/* One choice of a generation request: one engine sequence. */
typedef struct choice {
    bool accepted, done;
    bool role_sent; /* stream, chat: the opening delta (role) went out (with the first token);
                     * responses: the output item and its part */
    const char *finish_reason;
    int prompt_tokens, completion_tokens;
    int cached_tokens; /* prompt tokens its sequence took from the prefix cache */
    kv_usage kv;
    text_buf text;   /* non-streamed: the whole completion */
    cJSON *lp;       /* non-streamed logprobs being collected (chat: content array; completions: object) */
    int lp_sent;     /* chat stream with tools: entries of lp already sent (tools_stream_logprobs) */
    size_t text_off; /* completions logprobs text_offset */
    tools_stream tstream; /* chat stream with tools: how far the reply was read (an answer streams as it comes) */
    text_buf echo;   /* echo: the text before the reply's (a completion's text prompt; chat: the last reply's words) */
    cJSON *prompt_lp; /* non-streamed: vLLM's prompt_logprobs list, from the EV_PROMPT */
    text_buf stop_str;  /* vLLM's stop_reason: the stop string that ended it (empty: none) ... */
    int32_t stop_token; /* ... or the stop_token_ids token (-1: none) */
} choice;

/* One request waiting on the engine. A generation with k choices owns engine ids id..id+k-1. */
typedef struct call {
    uint64_t id;
    call_kind kind;
    api_server *api;
    http_conn *conn; /* NULL once the client is gone */
    bool stream, include_usage, logprobs_wanted, started, failed;
    bool tools; /* chat: the reply is tool calling's JSON (tool_calls.h): held, then sent as tool_calls or content */
    bool tools_json_answer; /* with tools: an answer is a JSON value (the request's structured output), not a string */
    bool prompt_echo;   /* the prompt's text before each choice's (openai_request.echo) */
    int echo_logprobs;  /* completions' echo with logprobs: alternatives per prompt entry; -1: none */
    bool tokens_as_ids; /* logprobs name tokens "token_id:N" (openai_request.tokens_as_ids) */
    int prompt_logprobs; /* vLLM's prompt_logprobs: alternatives per entry; -1: not asked */
    int n_choices, n_per_prompt, n_accepted, n_done;
    choice *choices; /* n_choices; NULL for tokenize calls */
    char resp_id[40];
    cJSON *echo; /* responses: the request's fields its response object repeats */
    cJSON *tool_items; /* responses with tools: the reply's function_call items once it is whole (NULL: a message) */
    bool tools_resolved; /* responses with tools: the reply was read (tool_items, or the text replaced by content) */
    int seq;     /* responses stream: the next event's sequence_number */
    long created;
    double t_start;
    char prompt_log[120];
    struct call *next;
} call;

struct api_server {
    uv_loop_t *loop;
    serve_config cfg;
    http_server *http;
    scheduler *sched;
    metrics *m;
    api_fatal_cb on_fatal;
    void *fatal_data;
    bool ready, draining, fatal;
    char starting[32]; /* before ready: what the engine thread waits for ("calibrating"); "": loading */
    api_model model;
    char model_id[256];
    long started_at;
    call *calls;
    int n_gen_calls; /* completions + chats in flight: the queue limit counts these */
    uint64_t next_id;
    char cors_headers[512];
};

/* ---- the JSON of responses (api_response.c) ---------------------------------------------------- */
/* The objects returned are the caller's to send and free. */

/* {"error": {message, type, param, code}}; a NULL type is derived from the status. */
cJSON *error_object(int status, const char *type, const char *message, const char *param, const char *code);
/* One streamed chunk of choice `index`: a text delta of text_len bytes (NULs allowed; text NULL: no
 * chat delta content) and/or a finish reason, with lp_ev's logprobs when it has any; role: the
 * chat opening delta. */
cJSON *stream_chunk(call *k, int index, const char *text, size_t text_len, const char *finish,
                    const sched_event *lp_ev, bool role);
/* The last chunk of a stream with include_usage: no choices, the usage over all of them. */
cJSON *usage_chunk(const call *k);
/* Chat logprobs entries for one event appended to content: [{token, logprob, bytes, top_logprobs}];
 * as_ids: tokens named "token_id:N" (vLLM's return_tokens_as_token_ids). */
void chat_logprobs_add(cJSON *content, const sched_event *ev, bool as_ids);
/* The usage object of chat and completions (prompt_tokens, ..., kv_cache). */
cJSON *usage_object(const call *k);
/* Adds ev's logprobs to choice `index`'s collection for its non-streamed response. */
void collect_logprobs(call *k, int index, const sched_event *ev);
/* The non-streamed response once every choice is done; takes the choices' collected logprobs. */
cJSON *whole_response(call *k);
/* Tool calling, streamed: as the reply grows, the chunk with its answer's new characters (NULL: none
 * yet, or the reply is calls); when it ends, the rest: the calls as one delta (tool_calls), the
 * answer's last characters, or a cut reply's raw text (NULL: nothing left), and in *finish the
 * finish reason its last chunk gives ("tool_calls" for calls). */
cJSON *tools_stream_text(call *k, int index);
/* A chat stream with tools sends its tokens' logprobs with the chunks it sends, not per token: the
 * entries collected since the last chunk go into chunk's logprobs.content (chunk may be NULL). */
void tools_stream_logprobs(call *k, int index, cJSON *chunk);
/* Tool call ids' seed (tools_reply): from the request's id, its start and the choice, distinct
 * across the server's life; chat and Responses alike. */
uint64_t tool_call_seed(const call *k, int index);
cJSON *tools_stream_chunk(call *k, int index, const char **finish);
/* One stderr line per request (no prompt text unless --log-prompts); ev: the last event (NULL
 * allowed when status is not 200). */
void log_request(call *k, const sched_event *ev, int status);

/* GET /tokenizer_info (vLLM's): the special tokens' text, whether prompts get the BOS, the context,
 * the vocabulary's size and the chat template, for clients that tokenize through the server
 * (lm-evaluation-harness's remote tokenizer). */
cJSON *tokenizer_info_object(api_server *a);
/* The line saying the server is ready: model, device, KV format and pool, prefix cache, sampling. */
void log_ready(api_server *a, const model_summary *ms);
/* Valid UTF-8 for JSON from raw token bytes (a byte-fallback token alone is not): a new string
 * (NUL after its *len bytes), NULL when out of memory. */
char *token_bytes_utf8(const char *bytes, size_t n, size_t *len);
/* The one log line's prompt: the first len bytes of p, quoted and escaped, cut to fit. */
void log_prompt_set(call *k, const char *p, size_t len);
/* A token's bytes as a JSON string item of valid UTF-8 (token_bytes_utf8's), NULL out of memory. */
cJSON *token_json_string(const char *piece, int len);
/* Completions' logprobs in their legacy shape: an object of empty arrays, and entries appended,
 * each with at most max_top alternatives: *text_off is where the next token's text starts, in
 * characters (code points) of the text. */
cJSON *completion_logprobs_new(void);
void completion_logprobs_add(cJSON *obj, const token_logprob *entries, int n, int max_top, bool as_ids, size_t *text_off);

/* ---- the prompt sent back (prompt_echo.c) ---- */
/* The EV_PROMPT of choice i: streamed, the chunk to send (the prompt's text and entries; NULL:
 * nothing to send), with the assistant's role in its delta when `role` (a chat choice's first
 * chunk: its prompt_logprobs open the choice); else kept for whole_response. */
cJSON *prompt_echo_event(call *k, int i, const sched_event *ev, bool role);
/* whole_response's prompt_logprobs: each completion choice's, or the chat response's (choice 0's). */
void prompt_echo_whole(call *k, cJSON *response);

/* ---- the Responses API (responses_response.c): one choice, text only ---- */
cJSON *responses_object(call *k); /* the finished response object */
/* Stream events, sent to k->conn: response.created + in_progress (at acceptance); a text piece
 * (the item and part open with the first); the done events and response.completed or
 * response.incomplete; an error event. The caller ends the stream (sse_close: no [DONE]). */
void responses_stream_created(call *k);
void responses_stream_text(call *k, const sched_event *ev);
/* With tools: the answer's new characters as text deltas, each newly whole call as its item's events. */
void responses_stream_tools(call *k);
void responses_stream_done(call *k);
void responses_stream_error(call *k, int status, const char *message, const char *param, const char *code);

/* The routes (api.c). */
typedef enum {
    R_HEALTH,
    R_MODELS,
    R_MODEL,
    R_METRICS,
    R_DASHBOARD,
    R_DASHBOARD_STATE,
    R_COMPLETIONS,
    R_CHAT,
    R_RESPONSES,
    R_RESPONSE_STORED, /* GET /v1/responses/{id}: nothing is stored, a 404 that says so */
    R_TOKENIZE,
    R_DETOKENIZE,
    R_RESET_PREFIX_CACHE,
    R_TOKENIZER_INFO
} route_id;

typedef struct route {
    const char *path; /* exact, or a prefix when it ends with '/' */
    const char *method;
    route_id id;
    bool auth;  /* needs the API key when one is set */
    bool model; /* needs the engine ready (else 503) */
} route;

/* The route for a method and path, or NULL; *allow gets the methods the path takes when it exists
 * but not with this method (a 405), else NULL. */
const route *api_route_match(const char *method, const char *path, const char **allow);

#endif
