/* OpenAI request validation as the HTTP and OpenAI-request fuzz targets drive it: a body for one
 * endpoint through server/api/openai_request.c (responses_request.c for the Responses API; the
 * structured-output fields through structured_output.c and the JSON Schema, regex and choice
 * converters), with the invariants of what it returns. Header-only
 * (static functions): each target includes it once. */
#ifndef WK_FUZZ_OPENAI_H
#define WK_FUZZ_OPENAI_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/openai_request.h"
#include "wushkv/grammar.h"

#define FZ_CHECK(c)                                                                       \
    do {                                                                                  \
        if (!(c)) {                                                                       \
            fprintf(stderr, "fuzz: invariant failed: %s (%s:%d)\n", #c, __FILE__, __LINE__); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

typedef enum { FZ_EP_COMPLETIONS, FZ_EP_CHAT, FZ_EP_TOKENIZE, FZ_EP_DETOKENIZE, FZ_EP_RESPONSES, FZ_EP_COUNT } fz_endpoint;

static inline void fz_check_error(const api_error *e) {
    FZ_CHECK(e->status >= 400 && e->status <= 599);
    FZ_CHECK(e->type != NULL);
    FZ_CHECK(memchr(e->message, 0, sizeof e->message) != NULL && e->message[0] != 0);
}

static inline void fz_check_gen(const gen_params *g, bool chat) {
    FZ_CHECK(g->prompt_text != NULL || g->prompt_tokens != NULL);
    FZ_CHECK(g->n_prompt_tokens >= 0);
    if (g->prompt_tokens == NULL) FZ_CHECK(g->n_prompt_tokens == 0);
    if (chat) FZ_CHECK(g->prompt_text != NULL);
    if (g->prompt_text) {
        /* The text may hold NUL bytes (JSON's \u0000): its length is prompt_len, not strlen. */
        size_t len = g->prompt_len;
        FZ_CHECK(g->prompt_text[len] == 0 && strlen(g->prompt_text) <= len);
        FZ_CHECK(g->n_plain >= 0 && (g->n_plain == 0 || g->plain != NULL));
        for (int i = 0; i < g->n_plain; i++)
            FZ_CHECK(g->plain[i].off <= len && g->plain[i].len <= len - g->plain[i].off);
    }
    FZ_CHECK(g->max_tokens >= -1);
    FZ_CHECK(g->n_stop >= 0 && g->n_stop <= SCHED_MAX_STOP);
    for (int i = 0; i < g->n_stop; i++) FZ_CHECK(g->stop[i] != NULL);
    FZ_CHECK(g->n_bias >= 0 && (g->n_bias == 0 || (g->bias_tokens && g->bias_values)));
    FZ_CHECK(g->logprobs >= -1 && g->logprobs <= SCHED_MAX_TOP_LOGPROBS);
    /* where a generation ends: min_tokens within max_tokens, stop token ids in range */
    FZ_CHECK(g->min_tokens >= 0 && (g->max_tokens < 0 || g->min_tokens <= g->max_tokens));
    FZ_CHECK(g->n_stop_ids >= 0 && g->n_stop_ids <= SCHED_MAX_STOP_IDS);
    for (int i = 0; i < g->n_stop_ids; i++) FZ_CHECK(g->stop_ids[i] >= 0);
    FZ_CHECK(g->n_allowed_ids >= 0 && g->n_allowed_ids <= SCHED_MAX_ALLOWED_IDS && (!g->n_allowed_ids || g->allowed_ids));
    for (int i = 0; i < g->n_allowed_ids; i++) FZ_CHECK(g->allowed_ids[i] >= 0);
    /* an accepted constraint comes compiled (the choices share it): its whole-text check runs */
    if (g->grammar) (void)wk_grammar_accepts(g->grammar, "{}", 2);
}

/* Validates body as a request to endpoint ep of a server with model "m" (alias "alias"),
 * context 2048 and chat format `fmt`. */
static inline void fz_openai(fz_endpoint ep, chat_format fmt, const char *body, size_t len) {
    /* ChatML as Qwen 3's: a default system text, enable_thinking honoured, another variable its
     * template reads (refused when a request sets it). */
    api_model m = {.id = "m", .alias = "alias", .max_ctx = 2048, .chat = fmt,
                   .chat_default_system = fmt == CHAT_CHATML ? "You are a helpful assistant." : NULL,
                   .chat_thinks = fmt == CHAT_CHATML,
                   .chat_template = fmt == CHAT_CHATML ? "{%- if enable_thinking is defined and enable_thinking is false %}"
                                                         "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{{ tone }}"
                                                       : NULL};
    api_error err;
    memset(&err, 0, sizeof err);
    if (ep == FZ_EP_COMPLETIONS || ep == FZ_EP_CHAT) {
        openai_request r;
        bool chat = ep == FZ_EP_CHAT;
        if (openai_parse_generation(body, len, chat, &m, &r, &err)) {
            FZ_CHECK(r.chat == chat);
            FZ_CHECK(r.n >= 1 && r.n_prompts >= 1);
            FZ_CHECK(r.n_gens == r.n * r.n_prompts && r.n_gens <= OPENAI_MAX_CHOICES && r.gens != NULL);
            if (chat) FZ_CHECK(r.n_prompts == 1);
            for (int i = 0; i < r.n_gens; i++) {
                const gen_params *g = &r.gens[i];
                fz_check_gen(g, chat);
                /* a prompt scored has its alternatives in range and comes back; max_tokens 0 only echoed */
                FZ_CHECK(g->prompt_top >= 0 && g->prompt_top <= SCHED_MAX_TOP_LOGPROBS);
                FZ_CHECK((!g->prompt_logprobs || g->echo_prompt) && (g->max_tokens != 0 || g->echo_prompt));
                FZ_CHECK(!r.chat_echo || (r.echo && chat));
            }
            openai_request_free(&r);
        } else {
            fz_check_error(&err);
        }
        return;
    }
    if (ep == FZ_EP_RESPONSES) { /* a chat request once translated: one choice, the fields it echoes */
        openai_request r;
        cJSON *echo = NULL;
        if (openai_parse_responses(body, len, &m, &r, &echo, &err)) {
            FZ_CHECK(r.chat && r.n == 1 && r.n_gens == 1 && r.gens != NULL);
            fz_check_gen(&r.gens[0], true);
            FZ_CHECK(cJSON_IsObject(echo) && cJSON_GetObjectItem(echo, "instructions") != NULL);
            openai_request_free(&r);
        } else {
            fz_check_error(&err);
            FZ_CHECK(echo == NULL);
        }
        cJSON_Delete(echo);
        return;
    }
    gen_params g;
    memset(&g, 0, sizeof g);
    bool ok = ep == FZ_EP_TOKENIZE ? openai_parse_tokenize(body, len, &m, &g, &err)
                                   : openai_parse_detokenize(body, len, &g, &err);
    if (ok) {
        if (ep == FZ_EP_TOKENIZE) {
            FZ_CHECK(g.prompt_text != NULL);
            fz_check_gen(&g, g.plain != NULL); /* a text, or messages rendered as a chat's prompt */
        } else {
            FZ_CHECK(g.n_prompt_tokens >= 0 && (g.n_prompt_tokens == 0 || g.prompt_tokens != NULL));
        }
        gen_params_free(&g);
    } else {
        fz_check_error(&err);
    }
}

#endif
