/* OpenAI request bodies (completions, chat completions, tokenize, detokenize) -> validated
 * parameters, or an OpenAI-shaped error naming the offending field. Pure: no I/O, no engine. */
#ifndef WUSHKV_OPENAI_REQUEST_H
#define WUSHKV_OPENAI_REQUEST_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "api/chat_template.h"
#include "sched/scheduler.h"

typedef struct api_error {
    int status;
    const char *type;  /* "invalid_request_error", "not_found_error", ... */
    const char *param; /* the field, or NULL */
    const char *code;  /* a machine-readable code, or NULL */
    char message[512];
} api_error;

/* The server's sampling for the fields a request leaves out (serve --temp ...). */
typedef struct api_sampling {
    float temperature, top_p, min_p; /* as wk_sampler_params: temperature 0 greedy, top_p 1 and min_p 0 off */
    int top_k;                       /* 0: off */
    float repeat_penalty;            /* 1: off */
    int repeat_last_n;               /* the tokens it looks at: the last N of prompt + output; -1: all */
} api_sampling;
/* llama-server's defaults (llama.cpp common/common.h, common_params_sampling): temperature 0.8,
 * top_k 40, top_p 0.95, min_p 0.05, repeat penalty 1.0 over the last 64 tokens. */
void api_sampling_default(api_sampling *s);

/* What validation needs to know about the server. */
typedef struct api_model {
    const char *id;    /* the served model name */
    const char *alias; /* also accepted (the GGUF's general.name), or NULL */
    int max_ctx;
    chat_format chat;
    const char *chat_default_system; /* the template's own system text for chats without one, or NULL */
    bool chat_default_dated;         /* it holds a date: computed again from chat_template for each prompt */
    bool chat_thinks;                /* the template takes Qwen 3's enable_thinking (chat_template_thinks) */
    const char *chat_template;       /* the model's Jinja template (what chat_template_kwargs may name), or NULL */
    const api_sampling *sampling; /* defaults of omitted fields; NULL: OpenAI's (temperature 1, the rest off) */
} api_model;

#define OPENAI_MAX_CHOICES 16 /* prompts x n in one request */

typedef struct openai_request {
    bool chat, stream, include_usage;
    bool chat_logprobs; /* chat: logprobs requested (top_logprobs in gens[i].logprobs) */
    bool tokens_as_ids; /* vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:N" */
    bool tools;         /* chat: the reply is tool calling's JSON, turned into tool_calls (tool_calls.h) */
    bool tools_json_answer; /* with tools: an answer is a JSON value held to the structured-output schema */
    /* The prompt sent back (prompt_echo.c): completions' echo (the prompt's text before each
     * choice's, its tokens' logprobs first in the legacy arrays); chat's echo (vLLM: the last
     * message's words before the reply's, when it is the assistant's: chat_echo); vLLM's
     * prompt_logprobs (-1: not asked; else the alternatives each entry lists). */
    bool echo;
    int prompt_logprobs;
    char *chat_echo;
    size_t chat_echo_len;
    int n;              /* choices per prompt */
    int n_prompts;      /* completions: a batch of prompts; chat: 1 */
    gen_params *gens;   /* n_prompts * n generations; choice index = prompt * n + j */
    int n_gens;
} openai_request;

/* Fills e (status, the type it implies, param, code, a printf message) and returns false. */
bool openai_fail(api_error *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* "a string", "a number", ... for messages naming what a field held. */
const char *openai_type_name(const cJSON *v);
/* obj's member `name`, or NULL when absent or null (OpenAI's clients send null for "not given"). */
const cJSON *openai_field(const cJSON *obj, const char *name);
/* Whether a list-valued field (tools, functions, tool_calls) asks for something: given and not an
 * empty array. */
bool openai_asks_for_any(const cJSON *v);
/* obj's boolean `name` into *out when given; false with a 400 naming it when not a boolean. */
bool openai_get_bool(const cJSON *obj, const char *name, bool *out, api_error *e);

/* A request body as a JSON tree (free with cJSON_Delete), its strings measured (json_text.h), or
 * NULL and err: NUL bytes, invalid UTF-8, JSON that is not strictly valid, a key twice in one
 * object, anything after the value. */
cJSON *openai_parse_body(const char *body, size_t len, api_error *err);

/* Returns true and fills out (free it with openai_request_free), or false and fills err. */
bool openai_parse_generation(const char *body, size_t body_len, bool chat, const api_model *m, openai_request *out, api_error *err);
void openai_request_free(openai_request *r);

/* POST /v1/responses (responses_request.c): the chat request its instructions and input items
 * mean, validated as one; *echo gets the fields the response object repeats (instructions,
 * max_output_tokens, metadata, tool_choice, temperature, top_p, top_logprobs; the caller frees it). */
bool openai_parse_responses(const char *body, size_t len, const api_model *m, openai_request *out, cJSON **echo,
                            api_error *err);

/* POST /tokenize: {"prompt"|"content"|"text": string, "add_special"|"add_special_tokens": bool}
 * -> prompt_text + add_special; or {"messages": [...]} -> the chat prompt of m's format, with its
 * plain ranges, as a chat request's. */
bool openai_parse_tokenize(const char *body, size_t len, const api_model *m, gen_params *out, api_error *err);
/* POST /detokenize: {"tokens": [ints]} -> prompt_tokens. */
bool openai_parse_detokenize(const char *body, size_t len, gen_params *out, api_error *err);

#endif
