/* Validation of OpenAI request bodies with cJSON. Every refusal names its field (param) and
 * says what was expected, as OpenAI's own 400s do; unknown fields are ignored, as OpenAI's
 * clients send fields that servers may not know. */
#include "api/openai_request.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "api/json_strict.h"
#include "api/chat_request.h"
#include "api/json_text.h"
#include "api/structured_output.h"
#include "api/tool_calls.h"
#include "sched/text_stream.h"

/* Completions' max_tokens default (OpenAI's legacy endpoint uses 16). */
#define COMPLETIONS_DEFAULT_MAX_TOKENS 16

bool openai_fail(api_error *e, int status, const char *param, const char *code, const char *fmt, ...) {
    e->status = status;
    e->type = status == 404 ? "not_found_error" : status >= 500 ? "server_error" : "invalid_request_error";
    e->param = param;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

const char *openai_type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    if (cJSON_IsNull(v)) return "null";
    return "an invalid value";
}

const cJSON *openai_field(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* Whether a list-valued field (tools, functions, tool_calls) asks for something: given and not an
 * empty array (a non-array is refused with it, as a request we cannot read as "none"). */
bool openai_asks_for_any(const cJSON *v) { return v && (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > 0); }

static bool get_number(const cJSON *obj, const char *name, double lo, double hi, float *out, api_error *e) {
    const cJSON *v = openai_field(obj, name);
    if (!v) return true;
    if (!cJSON_IsNumber(v)) return openai_fail(e, 400, name, "invalid_type", "%s must be a number, not %s", name, openai_type_name(v));
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return openai_fail(e, 400, name, "invalid_value", "%s must be between %g and %g, got %g", name, lo, hi, v->valuedouble);
    *out = (float)v->valuedouble;
    return true;
}

static bool is_integer(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 9.007199254740992e15;
}

/* Why v is no integer: "a string", "a fraction (2.5)", "too large (1e+400)"; NULL when it is one.
 * *code: invalid_type for what is no whole number, invalid_value for one too large to hold. */
static const char *not_integer(const cJSON *v, char *buf, size_t cap, const char **code) {
    *code = "invalid_type";
    if (!cJSON_IsNumber(v)) return openai_type_name(v);
    if (is_integer(v)) return NULL;
    const double d = v->valuedouble;
    const bool whole = !isfinite(d) || d == floor(d);
    if (whole) *code = "invalid_value";
    snprintf(buf, cap, whole ? "too large (%g)" : "a fraction (%g)", d);
    return buf;
}

static bool get_int(const cJSON *obj, const char *name, long lo, long hi, int *out, bool *given, api_error *e) {
    const cJSON *v = openai_field(obj, name);
    if (!v) return true;
    char buf[64];
    const char *code, *why = not_integer(v, buf, sizeof buf, &code);
    if (why) return openai_fail(e, 400, name, code, "%s must be an integer from %ld to %ld, not %s", name, lo, hi, why);
    if (v->valuedouble < (double)lo || v->valuedouble > (double)hi)
        return openai_fail(e, 400, name, "invalid_value", "%s must be between %ld and %ld, got %.0f", name, lo, hi,
                    v->valuedouble);
    *out = (int)v->valuedouble;
    if (given) *given = true;
    return true;
}

bool openai_get_bool(const cJSON *obj, const char *name, bool *out, api_error *e) {
    const cJSON *v = openai_field(obj, name);
    if (!v) return true;
    if (!cJSON_IsBool(v)) return openai_fail(e, 400, name, "invalid_type", "%s must be a boolean, not %s", name, openai_type_name(v));
    *out = cJSON_IsTrue(v);
    return true;
}

/* An array of token ids (range-checked against the vocabulary on the engine thread). */
static bool token_array(const cJSON *arr, const char *param, int32_t **out, int *n, api_error *e) {
    int count = cJSON_GetArraySize(arr);
    int32_t *t = malloc(((size_t)count + 1) * sizeof *t);
    if (!t) return openai_fail(e, 500, NULL, NULL, "out of memory");
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
        if (!is_integer(v) || v->valuedouble < 0 || v->valuedouble > INT32_MAX) {
            free(t);
            return openai_fail(e, 400, param, "invalid_type", "%s must hold token ids (integers >= 0); element %d is not", param,
                        i);
        }
        t[i++] = (int32_t)v->valuedouble;
    }
    *out = t;
    *n = count;
    return true;
}

/* One prompt of a completions request: text, or token ids used as given. */
typedef struct prompt_in {
    char *text;           /* NUL-terminated, but may hold NUL bytes: text_len counts them */
    size_t text_len;
    wk_text_range *plain; /* chat: the messages' words in text (see chat_render) */
    int n_plain;
    int32_t *tokens;
    int n_tokens;
} prompt_in;

/* A copy of n bytes with a NUL after them (the bytes may hold NULs too); NULL when out of memory. */
static char *memdup_text(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static bool add_text_prompt(prompt_in *p, const cJSON *text, api_error *e) {
    p->text_len = json_str_len(text);
    p->text = memdup_text(text->valuestring, p->text_len);
    return p->text ? true : openai_fail(e, 500, NULL, NULL, "out of memory");
}

/* prompt: a string, an array of strings, an array of token ids, or an array of such arrays. */
static bool parse_prompts(const cJSON *root, prompt_in *out, int *n_out, api_error *e) {
    const cJSON *p = openai_field(root, "prompt");
    if (!p) return openai_fail(e, 400, "prompt", "missing_required_parameter", "prompt is required");
    if (cJSON_IsString(p)) {
        *n_out = 1;
        return add_text_prompt(&out[0], p, e);
    }
    if (!cJSON_IsArray(p))
        return openai_fail(e, 400, "prompt", "invalid_type",
                    "prompt must be a string, an array of strings or an array of token ids, not %s", openai_type_name(p));
    int n = cJSON_GetArraySize(p);
    if (n == 0) return openai_fail(e, 400, "prompt", "invalid_value", "prompt must not be an empty array");
    if (cJSON_IsNumber(cJSON_GetArrayItem(p, 0))) {
        *n_out = 1;
        return token_array(p, "prompt", &out[0].tokens, &out[0].n_tokens, e);
    }
    if (n > OPENAI_MAX_CHOICES)
        return openai_fail(e, 400, "prompt", "invalid_value", "at most %d prompts per request (got %d)", OPENAI_MAX_CHOICES, n);
    int i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, p) {
        *n_out = i + 1; /* what is filled so far is freed by the caller on failure */
        if (cJSON_IsString(item)) {
            if (!add_text_prompt(&out[i], item, e)) return false;
        } else if (cJSON_IsArray(item)) {
            if (cJSON_GetArraySize(item) == 0)
                return openai_fail(e, 400, "prompt", "invalid_value", "prompt[%d] must not be empty", i);
            if (!token_array(item, "prompt", &out[i].tokens, &out[i].n_tokens, e)) return false;
        } else {
            return openai_fail(e, 400, "prompt", "invalid_type",
                        "prompt must be a string, an array of strings or an array of token ids; element %d is %s", i,
                        openai_type_name(item));
        }
        i++;
    }
    return true;
}

static bool parse_stop(const cJSON *root, gen_params *g, api_error *e) {
    const cJSON *stop = openai_field(root, "stop");
    if (!stop) return true;
    const cJSON *one = cJSON_IsString(stop) ? stop : NULL;
    if (!one && !cJSON_IsArray(stop))
        return openai_fail(e, 400, "stop", "invalid_type", "stop must be a string or an array of strings, not %s", openai_type_name(stop));
    if (!one && cJSON_GetArraySize(stop) > SCHED_MAX_STOP)
        return openai_fail(e, 400, "stop", "invalid_value", "at most %d stop strings are supported", SCHED_MAX_STOP);
    const cJSON *s;
    cJSON *wrap = NULL;
    if (one) {
        wrap = cJSON_CreateArray();
        if (!wrap) return openai_fail(e, 500, NULL, NULL, "out of memory");
        cJSON_AddItemReferenceToArray(wrap, (cJSON *)one);
    }
    bool ok = true;
    const cJSON *list = one ? wrap : stop;
    cJSON_ArrayForEach(s, list) {
        if (!cJSON_IsString(s)) {
            ok = openai_fail(e, 400, "stop", "invalid_type", "stop must hold strings only");
            break;
        }
        const size_t sl = json_str_len(s);
        if (!sl) continue; /* an empty stop string would match at once: ignored */
        if (sl > 256) {
            ok = openai_fail(e, 400, "stop", "invalid_value", "stop strings are limited to 256 bytes");
            break;
        }
        g->stop_len[g->n_stop] = sl;
        if (!(g->stop[g->n_stop] = memdup_text(s->valuestring, sl))) {
            ok = openai_fail(e, 500, NULL, NULL, "out of memory");
            break;
        }
        g->n_stop++;
    }
    cJSON_Delete(wrap);
    return ok;
}

/* vLLM's bad_words: an array of up to SCHED_MAX_BAD_WORDS strings of 1-256 bytes (empty ones
 * ignored), tokenized on the front thread. */
static bool parse_bad_words(const cJSON *root, gen_params *g, api_error *e) {
    const cJSON *list = openai_field(root, "bad_words"), *w;
    if (!list) return true;
    if (!cJSON_IsArray(list))
        return openai_fail(e, 400, "bad_words", "invalid_type", "bad_words must be an array of strings, not %s",
                           openai_type_name(list));
    if (cJSON_GetArraySize(list) > SCHED_MAX_BAD_WORDS)
        return openai_fail(e, 400, "bad_words", "invalid_value", "at most %d bad_words are supported", SCHED_MAX_BAD_WORDS);
    cJSON_ArrayForEach(w, list) {
        if (!cJSON_IsString(w)) return openai_fail(e, 400, "bad_words", "invalid_type", "bad_words must hold strings only");
        const size_t len = json_str_len(w);
        if (!len) continue;
        if (len > 256) return openai_fail(e, 400, "bad_words", "invalid_value", "bad_words are limited to 256 bytes each");
        if (!(g->bad[g->n_bad] = memdup_text(w->valuestring, len))) return openai_fail(e, 500, NULL, NULL, "out of memory");
        g->bad_len[g->n_bad++] = len;
    }
    return true;
}

/* vLLM's (and llama.cpp's ignore_eos) controls of where a generation ends and what it may say:
 * ignore_eos, min_tokens, stop_token_ids, include_stop_str_in_output, skip_special_tokens,
 * allowed_token_ids. After max_tokens. */
static bool parse_stop_controls(const cJSON *root, gen_params *g, api_error *e) {
    if (!openai_get_bool(root, "ignore_eos", &g->ignore_eos, e) ||
        !openai_get_bool(root, "include_stop_str_in_output", &g->include_stop, e) ||
        !get_int(root, "min_tokens", 0, 1L << 30, &g->min_tokens, NULL, e))
        return false;
    if (g->max_tokens >= 0 && g->min_tokens > g->max_tokens)
        return openai_fail(e, 400, "min_tokens", "invalid_value", "min_tokens (%d) must be at most max_tokens (%d)",
                           g->min_tokens, g->max_tokens);
    bool skip_special = true;
    if (!openai_get_bool(root, "skip_special_tokens", &skip_special, e)) return false;
    g->render_special = !skip_special;
    /* Both lists through the prompt's own reader of token ids (range-checked on the engine thread). */
    const cJSON *allowed = openai_field(root, "allowed_token_ids"), *ids = openai_field(root, "stop_token_ids");
    if (allowed) {
        int n = cJSON_IsArray(allowed) ? cJSON_GetArraySize(allowed) : 0;
        if (n == 0)
            return openai_fail(e, 400, "allowed_token_ids", cJSON_IsArray(allowed) ? "invalid_value" : "invalid_type",
                               "allowed_token_ids must be a non-empty array of token ids");
        if (n > SCHED_MAX_ALLOWED_IDS)
            return openai_fail(e, 400, "allowed_token_ids", "invalid_value", "at most %d allowed_token_ids are supported",
                               SCHED_MAX_ALLOWED_IDS);
        if (!token_array(allowed, "allowed_token_ids", &g->allowed_ids, &g->n_allowed_ids, e)) return false;
    }
    if (!ids) return true;
    if (!cJSON_IsArray(ids))
        return openai_fail(e, 400, "stop_token_ids", "invalid_type", "stop_token_ids must be an array of token ids, not %s",
                           openai_type_name(ids));
    if (cJSON_GetArraySize(ids) > SCHED_MAX_STOP_IDS)
        return openai_fail(e, 400, "stop_token_ids", "invalid_value", "at most %d stop_token_ids are supported",
                           SCHED_MAX_STOP_IDS);
    int32_t *stop_ids = NULL;
    if (!token_array(ids, "stop_token_ids", &stop_ids, &g->n_stop_ids, e)) return false;
    memcpy(g->stop_ids, stop_ids, (size_t)g->n_stop_ids * sizeof *stop_ids);
    free(stop_ids);
    return true;
}

static bool parse_logit_bias(const cJSON *root, gen_params *g, api_error *e) {
    const cJSON *b = openai_field(root, "logit_bias");
    if (!b) return true;
    if (!cJSON_IsObject(b)) return openai_fail(e, 400, "logit_bias", "invalid_type", "logit_bias must be an object, not %s", openai_type_name(b));
    int n = cJSON_GetArraySize(b);
    if (n > 1024) return openai_fail(e, 400, "logit_bias", "invalid_value", "logit_bias is limited to 1024 tokens");
    g->bias_tokens = malloc(((size_t)n + 1) * sizeof *g->bias_tokens);
    g->bias_values = malloc(((size_t)n + 1) * sizeof *g->bias_values);
    if (!g->bias_tokens || !g->bias_values) return openai_fail(e, 500, NULL, NULL, "out of memory");
    const cJSON *v;
    cJSON_ArrayForEach(v, b) {
        /* A token id in decimal digits, as OpenAI writes them: no sign, space or leading zero. */
        const char *k = v->string;
        size_t digits = strspn(k, "0123456789");
        char *end;
        long id = digits > 0 && digits <= 10 && !k[digits] && (k[0] != '0' || digits == 1) ? strtol(k, &end, 10) : -1;
        if (id < 0 || id > INT32_MAX)
            return openai_fail(e, 400, "logit_bias", "invalid_value", "logit_bias keys must be token ids, got '%.40s'", v->string);
        if (!cJSON_IsNumber(v) || v->valuedouble < -100 || v->valuedouble > 100)
            return openai_fail(e, 400, "logit_bias", "invalid_value", "logit_bias values must be numbers from -100 to 100");
        g->bias_tokens[g->n_bias] = (int32_t)id;
        g->bias_values[g->n_bias++] = (float)v->valuedouble;
    }
    return true;
}

/* Features with no implementation yet are refused plainly rather than silently ignored. */
static bool refuse_unsupported(const cJSON *root, bool chat, api_error *e) {
    /* vLLM's that would change the output here: beam search. Its "off" value (false) passes. */
    if (cJSON_IsTrue(openai_field(root, "use_beam_search")))
        return openai_fail(e, 400, "use_beam_search", "unsupported_value", "beam search is not supported");
    if (!chat) {
        int best_of = 1;
        if (!get_int(root, "best_of", 1, 128, &best_of, NULL, e)) return false;
        if (best_of != 1) return openai_fail(e, 400, "best_of", "unsupported_value", "only best_of=1 is supported");
        if (openai_field(root, "suffix")) return openai_fail(e, 400, "suffix", "unsupported_value", "suffix is not supported");
    } else {
        /* The deprecated functions list and function_call (tools and tool_choice are tool_calls.c's):
         * "none" and "auto" mean no call; anything that asks for one cannot be met. */
        if (openai_asks_for_any(openai_field(root, "functions")))
            return openai_fail(e, 400, "functions", "unsupported_value", "functions are not supported: give them as tools");
        const cJSON *c = openai_field(root, "function_call");
        if (c && !json_str_is(c, "none") && !json_str_is(c, "auto"))
            return openai_fail(e, 400, "function_call", "unsupported_value",
                               "function_call must be \"none\" or \"auto\": ask for a call with tool_choice and tools");
        /* Output other than text, and searches, cannot be given: refused, not answered with text alone. */
        const cJSON *mods = openai_field(root, "modalities"), *mod;
        if (mods && !cJSON_IsArray(mods))
            return openai_fail(e, 400, "modalities", "invalid_type", "modalities must be an array, not %s", openai_type_name(mods));
        cJSON_ArrayForEach(mod, mods) if (!json_str_is(mod, "text"))
            return openai_fail(e, 400, "modalities", "unsupported_value", "only the \"text\" modality is supported");
        if (openai_field(root, "audio")) return openai_fail(e, 400, "audio", "unsupported_value", "audio output is not supported");
        if (openai_field(root, "web_search_options"))
            return openai_fail(e, 400, "web_search_options", "unsupported_value", "web search is not supported");
    }
    return true;
}

/* echo (completions: OpenAI's; chat: vLLM's) and vLLM's prompt_logprobs, before max_tokens, which
 * may be 0 with echo on completions (the prompt scored alone). */
static bool parse_echo(const cJSON *root, bool chat, openai_request *out, gen_params *g, api_error *e) {
    out->prompt_logprobs = -1;
    if (!openai_get_bool(root, "echo", &out->echo, e) ||
        !get_int(root, "prompt_logprobs", 0, SCHED_MAX_TOP_LOGPROBS, &out->prompt_logprobs, NULL, e))
        return false;
    if (chat && out->echo && openai_asks_for_any(openai_field(root, "tools")))
        return openai_fail(e, 400, "echo", "invalid_value", "echo cannot go with tools: a tool call's reply is JSON");
    g->echo_prompt = (out->echo && !chat) || out->prompt_logprobs >= 0;
    return true;
}

/* A deep copy of base with its own prompt. */
static bool copy_params(gen_params *d, const gen_params *base, const prompt_in *p) {
    *d = *base;
    d->prompt_text = NULL;
    d->plain = NULL;
    d->n_plain = 0;
    d->prompt_tokens = NULL;
    d->bias_tokens = NULL;
    d->bias_values = NULL;
    d->allowed_ids = NULL;
    d->n_stop = 0;
    d->n_bad = 0;
    d->bad_ids = NULL;
    bool ok = true;
    if (p->text) {
        ok &= (d->prompt_text = memdup_text(p->text, p->text_len)) != NULL;
        d->prompt_len = p->text_len;
        d->add_special = true; /* the model's BOS before text prompts */
        if (p->n_plain) {
            ok &= (d->plain = malloc((size_t)p->n_plain * sizeof *d->plain)) != NULL;
            if (d->plain) {
                memcpy(d->plain, p->plain, (size_t)p->n_plain * sizeof *d->plain);
                d->n_plain = p->n_plain;
            }
        }
    } else {
        ok &= (d->prompt_tokens = malloc(((size_t)p->n_tokens + 1) * sizeof *d->prompt_tokens)) != NULL;
        if (ok) memcpy(d->prompt_tokens, p->tokens, (size_t)p->n_tokens * sizeof *d->prompt_tokens);
        d->n_prompt_tokens = p->n_tokens;
        d->add_special = false; /* token prompts are used as given */
    }
    if (base->n_bias) {
        ok &= (d->bias_tokens = malloc((size_t)base->n_bias * sizeof *d->bias_tokens)) != NULL;
        ok &= (d->bias_values = malloc((size_t)base->n_bias * sizeof *d->bias_values)) != NULL;
        if (ok) {
            memcpy(d->bias_tokens, base->bias_tokens, (size_t)base->n_bias * sizeof *d->bias_tokens);
            memcpy(d->bias_values, base->bias_values, (size_t)base->n_bias * sizeof *d->bias_values);
        }
    }
    if (base->n_allowed_ids) {
        ok &= (d->allowed_ids = malloc((size_t)base->n_allowed_ids * sizeof *d->allowed_ids)) != NULL;
        if (d->allowed_ids) memcpy(d->allowed_ids, base->allowed_ids, (size_t)base->n_allowed_ids * sizeof *d->allowed_ids);
    }
    d->grammar = wk_grammar_retain(base->grammar); /* compiled once, shared by every choice */
    for (int i = 0; i < base->n_stop; i++) {
        d->stop[i] = memdup_text(base->stop[i], base->stop_len[i]);
        if (!d->stop[i]) {
            ok = false;
            break;
        }
        d->n_stop++;
    }
    for (int i = 0; ok && i < base->n_bad; i++) {
        if (!(d->bad[i] = memdup_text(base->bad[i], base->bad_len[i]))) ok = false;
        else d->n_bad++;
    }
    return ok;
}

/* prompts x n generations. With a seed, choice j of every prompt samples with seed + j: each
 * prompt's first choice equals the same request with n=1, and its n choices differ. */
static bool expand(openai_request *out, const gen_params *base, const prompt_in *prompts, int n_prompts, bool seed_given,
                   api_error *err) {
    out->n_prompts = n_prompts;
    out->gens = calloc((size_t)(n_prompts * out->n), sizeof *out->gens);
    if (!out->gens) return openai_fail(err, 500, NULL, NULL, "out of memory");
    for (int p = 0; p < n_prompts; p++)
        for (int j = 0; j < out->n; j++) {
            gen_params *g = &out->gens[out->n_gens++];
            if (!copy_params(g, base, &prompts[p])) return openai_fail(err, 500, NULL, NULL, "out of memory");
            if (seed_given) g->sampling.seed = base->sampling.seed + (uint64_t)j;
            else g->sampling.seed = base->sampling.seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(p * out->n + j + 1));
        }
    return true;
}

/* The whole body as one JSON value, strictly: JSON text is UTF-8 (RFC 8259 8.1) with no raw NUL,
 * and nothing but white space may follow the value. A body that breaks any of these is refused
 * rather than read up to where it stops making sense. NULL after filling err. */
cJSON *openai_parse_body(const char *body, size_t len, api_error *err) {
    const char *nul = memchr(body, 0, len);
    if (nul) {
        openai_fail(err, 400, NULL, "invalid_json", "the body has a NUL byte at byte %zu (JSON text cannot; write \\u0000 "
             "inside a string)", (size_t)(nul - body));
        return NULL;
    }
    size_t valid = json_utf8_valid_prefix((const unsigned char *)body, len);
    if (valid < len) {
        openai_fail(err, 400, NULL, "invalid_json", "the body is not valid UTF-8 (at byte %zu)", valid);
        return NULL;
    }
    size_t bad_at = 0;
    const char *why = NULL;
    if (!json_strict_check(body, len, CJSON_NESTING_LIMIT, &bad_at, &why)) {
        openai_fail(err, 400, NULL, "invalid_json", "the body is not valid JSON: %s (at byte %zu)", why, bad_at);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (root && !json_measure_strings(root, body, (size_t)(end - body))) { /* cannot happen: see json_text.h */
        openai_fail(err, 500, NULL, NULL, "internal: the body's strings could not be measured");
        cJSON_Delete(root);
        return NULL;
    }
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        openai_fail(err, 400, NULL, "invalid_json", "the body is not valid JSON (near byte %zu)",
             at && at >= body && at <= body + len ? (size_t)(at - body) : (size_t)0);
        return NULL;
    }
    const char *dup = root ? json_duplicate_key(root) : NULL;
    if (dup) {
        openai_fail(err, 400, NULL, "invalid_json", "the body names the key \"%.100s\" twice in one object", dup);
        cJSON_Delete(root);
        return NULL;
    }
    while (end < body + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    if (end < body + len) {
        openai_fail(err, 400, NULL, "invalid_json", "the body has more after its JSON value (at byte %zu)",
             (size_t)(end - body));
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

void api_sampling_default(api_sampling *s) {
    *s = (api_sampling){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1.0f,
                        .repeat_last_n = 64};
}

bool openai_parse_generation(const char *body, size_t body_len, bool chat, const api_model *m, openai_request *out, api_error *err) {
    memset(out, 0, sizeof *out);
    out->chat = chat;
    gen_params base = {0}, *g = &base;
    prompt_in prompts[OPENAI_MAX_CHOICES] = {{0}};
    int n_prompts = 0;
    g->max_tokens = chat ? -1 : COMPLETIONS_DEFAULT_MAX_TOKENS;
    /* The server's defaults for omitted fields, else OpenAI's: temperature 1, top_p 1; top_k and
     * min_p off. */
    const api_sampling *d = m->sampling;
    g->sampling = d ? (wk_sampler_params){.temperature = d->temperature, .top_p = d->top_p, .top_k = d->top_k,
                                          .min_p = d->min_p}
                    : (wk_sampler_params){.temperature = 1.0f, .top_p = 1.0f, .top_k = 0, .min_p = 0.0f};
    g->repetition_penalty = d ? d->repeat_penalty : 1.0f;
    g->repeat_last_n = d ? d->repeat_last_n : -1;
    g->logprobs = -1;

    cJSON *root = openai_parse_body(body, body_len, err);
    if (!root) return false;
    bool ok = true;
    if (!cJSON_IsObject(root)) {
        ok = openai_fail(err, 400, NULL, "invalid_type", "the body must be a JSON object, not %s", openai_type_name(root));
        goto out;
    }
    const cJSON *model = openai_field(root, "model");
    if (model && !cJSON_IsString(model)) {
        ok = openai_fail(err, 400, "model", "invalid_type", "model must be a string, not %s", openai_type_name(model));
        goto out;
    }
    if (model && !json_str_is(model, m->id) && !(m->alias && json_str_is(model, m->alias))) {
        ok = openai_fail(err, 404, "model", "model_not_found", "The model '%.200s' does not exist; this server serves '%s'",
                  model->valuestring, m->id);
        goto out;
    }
    if (!refuse_unsupported(root, chat, err)) {
        ok = false;
        goto out;
    }
    out->n = 1;
    if (!get_int(root, "n", 1, OPENAI_MAX_CHOICES, &out->n, NULL, err)) {
        ok = false;
        goto out;
    }
    if (!parse_echo(root, chat, out, g, err)) {
        ok = false;
        goto out;
    }
    if (!openai_get_bool(root, "return_tokens_as_token_ids", &out->tokens_as_ids, err)) {
        ok = false;
        goto out;
    }
    /* vLLM's truncate_prompt_tokens: only the prompt's last N tokens (after its template and BOS)
     * run, -1 as many as the context holds; cut where the request is admitted (sched_request.c). */
    int cut = 0;
    if (!get_int(root, "truncate_prompt_tokens", -1, INT32_MAX, &cut, NULL, err)) {
        ok = false;
        goto out;
    }
    if (openai_field(root, "truncate_prompt_tokens") && cut == 0) {
        ok = openai_fail(err, 400, "truncate_prompt_tokens", "invalid_value",
                         "truncate_prompt_tokens must be -1 (as many as the context holds) or at least 1, got 0");
        goto out;
    }
    g->truncate_prompt = cut == -1 ? m->max_ctx : cut;
    bool given = false;
    int max_tokens = 0;
    ok = get_int(root, "max_tokens", out->echo && !chat ? 0 : 1, 1L << 30, &max_tokens, &given, err) &&
         (!chat || get_int(root, "max_completion_tokens", 1, 1L << 30, &max_tokens, &given, err));
    if (ok && given) {
        if (max_tokens >= m->max_ctx) {
            ok = openai_fail(err, 400, "max_tokens", "context_length_exceeded",
                      "max_tokens is %d but the context holds %d tokens (prompt + completion)", max_tokens, m->max_ctx);
            goto out;
        }
        g->max_tokens = max_tokens;
        g->max_tokens_given = true;
    }
    int top_k = g->sampling.top_k;
    int64_t seed = 0;
    bool seed_given = false;
    ok = ok && get_number(root, "temperature", 0.0, 2.0, &g->sampling.temperature, err) &&
         get_number(root, "top_p", 0.0, 1.0, &g->sampling.top_p, err) &&
         get_number(root, "min_p", 0.0, 1.0, &g->sampling.min_p, err) &&
         get_int(root, "top_k", -1, INT32_MAX, &top_k, NULL, err) &&
         get_number(root, "presence_penalty", -2.0, 2.0, &g->presence_penalty, err) &&
         get_number(root, "frequency_penalty", -2.0, 2.0, &g->frequency_penalty, err) &&
         get_number(root, "repetition_penalty", 0.01, 100.0, &g->repetition_penalty, err) &&
         openai_get_bool(root, "stream", &out->stream, err);
    if (!ok) goto out;
    if (g->sampling.top_p <= 0.0f) {
        ok = openai_fail(err, 400, "top_p", "invalid_value", "top_p must be greater than 0");
        goto out;
    }
    g->sampling.top_k = top_k < 0 ? 0 : top_k; /* -1 (vLLM's "off") and 0 both disable */
    if (openai_field(root, "repetition_penalty")) g->repeat_last_n = -1; /* the request's own repetition_penalty: vLLM's rule, every token */
    const cJSON *sv = openai_field(root, "seed");
    if (sv) {
        char buf[64];
        const char *code, *why = not_integer(sv, buf, sizeof buf, &code);
        if (why) {
            ok = openai_fail(err, 400, "seed", code, "seed must be an integer of at most 2^53 in magnitude, not %s", why);
            goto out;
        }
        seed = (int64_t)sv->valuedouble;
        seed_given = true;
    }
    if (seed_given) g->sampling.seed = (uint64_t)seed;
    else {
        /* No seed: a fresh one per request from the clock and an address (no shared RNG state
         * across threads). */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        g->sampling.seed = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)out;
    }
    const cJSON *so = openai_field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) {
            ok = openai_fail(err, 400, "stream_options", "invalid_type", "stream_options must be an object, not %s", openai_type_name(so));
            goto out;
        }
        if (!openai_get_bool(so, "include_usage", &out->include_usage, err)) {
            err->param = "stream_options.include_usage";
            ok = false;
            goto out;
        }
    }
    /* logprobs: an integer (0..20 alternatives) on completions; a boolean plus top_logprobs on chat. */
    if (chat) {
        int top = 0;
        bool top_given = false;
        ok = openai_get_bool(root, "logprobs", &out->chat_logprobs, err) &&
             get_int(root, "top_logprobs", 0, SCHED_MAX_TOP_LOGPROBS, &top, &top_given, err);
        if (ok && top_given && !out->chat_logprobs)
            ok = openai_fail(err, 400, "top_logprobs", "invalid_value", "top_logprobs needs logprobs set to true");
        if (ok && out->chat_logprobs) g->logprobs = top;
    } else {
        int lp = -1;
        ok = get_int(root, "logprobs", 0, SCHED_MAX_TOP_LOGPROBS, &lp, NULL, err);
        g->logprobs = lp;
    }
    /* The prompt is scored with the alternatives prompt_logprobs or, when the prompt is echoed on
     * completions, logprobs ask for (the most of the two). */
    int scored_top = out->echo && !chat ? g->logprobs : -1;
    if (out->prompt_logprobs > scored_top) scored_top = out->prompt_logprobs;
    g->prompt_logprobs = scored_top >= 0;
    g->prompt_top = scored_top >= 0 ? scored_top : 0;
    const cJSON *user = openai_field(root, "user");
    if (ok && user && !cJSON_IsString(user))
        ok = openai_fail(err, 400, "user", "invalid_type", "user must be a string, not %s", openai_type_name(user));
    /* Structured output, on either endpoint (vLLM takes response_format on completions too). With
     * tools, the reply is held to tool calling's schema instead, and a structured-output schema is
     * what an answer without a call must be (OpenAI's tools with response_format). */
    tools_ask tools = {0};
    cJSON *answer = NULL;
    const char *answer_other = NULL;
    ok = ok && parse_stop(root, g, err) && parse_bad_words(root, g, err) && parse_stop_controls(root, g, err) &&
         parse_logit_bias(root, g, err) && structured_output_parse(root, &g->grammar, err) &&
         (!chat || (structured_output_answer_schema(root, &answer, &answer_other, err) && tools_parse(root, answer, &tools, err)));
    cJSON_Delete(answer);
    if (ok && tools.mode != TOOLS_OFF && answer_other)
        ok = openai_fail(err, 400, answer_other, "invalid_value", "with tools, an answer can be held to a JSON Schema or "
                         "json_object, not by %s", answer_other);
    if (ok && tools.mode != TOOLS_OFF) {
        wk_grammar_free(g->grammar);
        ok = structured_output_schema(tools.schema, "tools", &g->grammar, err);
    }
    out->tools = ok && tools.mode != TOOLS_OFF;
    out->tools_json_answer = out->tools && tools.json_answer;
    ok = ok && (chat ? chat_parse_messages(root, m, tools.system_text, g, err) : parse_prompts(root, prompts, &n_prompts, err));
    if (ok && chat && out->echo && !chat_last_reply_text(root, &out->chat_echo, &out->chat_echo_len))
        ok = openai_fail(err, 500, NULL, NULL, "out of memory");
    tools_ask_free(&tools);
    if (ok && chat) {
        /* The rendered conversation is the one prompt. */
        prompts[0].text = g->prompt_text;
        prompts[0].text_len = g->prompt_len;
        prompts[0].plain = g->plain;
        prompts[0].n_plain = g->n_plain;
        g->prompt_text = NULL;
        g->plain = NULL;
        g->n_plain = 0;
        n_prompts = 1;
    }
    if (ok && n_prompts * out->n > OPENAI_MAX_CHOICES)
        ok = openai_fail(err, 400, "n", "invalid_value", "%d prompts x n=%d is more than %d choices per request", n_prompts,
                  out->n, OPENAI_MAX_CHOICES);
    if (ok) ok = expand(out, g, prompts, n_prompts, seed_given, err);

out:
    cJSON_Delete(root);
    gen_params_free(g);
    for (int i = 0; i < OPENAI_MAX_CHOICES; i++) {
        free(prompts[i].text);
        free(prompts[i].plain);
        free(prompts[i].tokens);
    }
    if (!ok) openai_request_free(out);
    return ok;
}

void openai_request_free(openai_request *r) {
    free(r->chat_echo);
    r->chat_echo = NULL;
    for (int i = 0; i < r->n_gens; i++) gen_params_free(&r->gens[i]);
    free(r->gens);
    r->gens = NULL;
    r->n_gens = 0;
}

static cJSON *parse_object(const char *body, size_t len, api_error *err) {
    cJSON *root = openai_parse_body(body, len, err);
    if (root && !cJSON_IsObject(root)) {
        openai_fail(err, 400, NULL, "invalid_type", "the body must be a JSON object, not %s", openai_type_name(root));
        cJSON_Delete(root);
        root = NULL;
    }
    return root;
}

bool openai_parse_tokenize(const char *body, size_t len, const api_model *m, gen_params *out, api_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = parse_object(body, len, err);
    if (!root) return false;
    /* The text under its name in vLLM ("prompt"), llama.cpp ("content") or ours ("text"); or,
     * as vLLM's chat form, "messages" rendered as a chat request's prompt. */
    static const char *const names[] = {"prompt", "content", "text", "messages"};
    const char *name = NULL;
    bool ok = true;
    for (size_t i = 0; ok && i < sizeof names / sizeof *names; i++) {
        if (!openai_field(root, names[i])) continue;
        if (name) ok = openai_fail(err, 400, names[i], "invalid_value", "give one of %s and %s, not both", name, names[i]);
        name = names[i];
    }
    const cJSON *p = name ? openai_field(root, name) : NULL;
    out->add_special = true;
    if (ok && !p) {
        ok = openai_fail(err, 400, "prompt", "missing_required_parameter",
                  "prompt (the text to tokenize; or content, text, messages) is required");
    } else if (ok && !strcmp(name, "messages")) {
        tools_ask tools = {0};
        cJSON *answer = NULL;
        const char *answer_other;
        ok = refuse_unsupported(root, true, err) && structured_output_answer_schema(root, &answer, &answer_other, err) &&
             tools_parse(root, answer, &tools, err) && chat_parse_messages(root, m, tools.system_text, out, err);
        cJSON_Delete(answer);
        tools_ask_free(&tools);
    } else if (ok && !cJSON_IsString(p)) {
        ok = openai_fail(err, 400, name, "invalid_type", "%s must be a string, not %s", name, openai_type_name(p));
    } else if (ok) {
        /* add_special (ours, llama.cpp's name) or add_special_tokens (vLLM's): the BOS token. */
        const char *special = openai_field(root, "add_special_tokens") ? "add_special_tokens" : "add_special";
        if (openai_field(root, "add_special_tokens") && openai_field(root, "add_special"))
            ok = openai_fail(err, 400, "add_special", "invalid_value", "give add_special or add_special_tokens, not both");
        ok = ok && openai_get_bool(root, special, &out->add_special, err);
        if (ok) out->prompt_len = json_str_len(p);
        if (ok && !(out->prompt_text = memdup_text(p->valuestring, out->prompt_len)))
            ok = openai_fail(err, 500, NULL, NULL, "out of memory");
    }
    cJSON_Delete(root);
    if (!ok) gen_params_free(out);
    return ok;
}

bool openai_parse_detokenize(const char *body, size_t len, gen_params *out, api_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = parse_object(body, len, err);
    if (!root) return false;
    const cJSON *t = openai_field(root, "tokens");
    bool ok;
    if (!t) ok = openai_fail(err, 400, "tokens", "missing_required_parameter", "tokens is required");
    else if (!cJSON_IsArray(t)) ok = openai_fail(err, 400, "tokens", "invalid_type", "tokens must be an array, not %s", openai_type_name(t));
    else ok = token_array(t, "tokens", &out->prompt_tokens, &out->n_prompt_tokens, err);
    cJSON_Delete(root);
    return ok;
}
