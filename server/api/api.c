/* The API on the loop thread: a route table in front of the handlers; generation requests
 * become engine jobs and their events become OpenAI JSON or SSE chunks (api_response.c builds
 * them). A request's state (a "call") lives until the engine's last event for it, even when its
 * client has gone, so the in-flight count behind 429 is exact. */
#include "api/api.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "api/api_int.h"
#include "api/chat_template.h"
#include "api/json_text.h"
#include "metrics/metrics.h"
#include "metrics/mono_clock.h"
#include "api/openai_request.h"
#include "http/sse.h"
#include "sched/text_stream.h"

/* ---- replies ----------------------------------------------------------------------------------- */

static const char *extra_headers(api_server *a) { return a->cors_headers[0] ? a->cors_headers : NULL; }

static void reply(api_server *a, http_conn *c, int status, const char *type, const char *body, size_t len,
                  const char *more_headers) {
    char headers[1024];
    snprintf(headers, sizeof headers, "%s%s", a->cors_headers, more_headers ? more_headers : "");
    metrics_http_response(a->m, status);
    http_respond(c, status, type, body, len, headers);
}

static void reply_json(api_server *a, http_conn *c, int status, cJSON *obj, const char *more_headers) {
    char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                                  "\"code\":null}}";
        reply(a, c, 500, "application/json", oom, sizeof oom - 1, NULL);
    } else {
        reply(a, c, status, "application/json", s, strlen(s), more_headers);
        cJSON_free(s);
    }
    cJSON_Delete(obj);
}

static void reply_error(api_server *a, http_conn *c, int status, const char *message, const char *param,
                        const char *code, const char *more_headers) {
    reply_json(a, c, status, error_object(status, NULL, message, param, code), more_headers);
}

static void reply_api_error(api_server *a, http_conn *c, const api_error *e) {
    reply_json(a, c, e->status, error_object(e->status, e->type, e->message, e->param, e->code), NULL);
}

/* ---- calls ------------------------------------------------------------------------------------- */

static call *call_find(api_server *a, uint64_t id) {
    for (call *c = a->calls; c; c = c->next)
        if (id >= c->id && id < c->id + (uint64_t)(c->n_choices > 0 ? c->n_choices : 1)) return c;
    return NULL;
}

static void call_free(api_server *a, call *k) {
    for (call **p = &a->calls; *p; p = &(*p)->next)
        if (*p == k) {
            *p = k->next;
            break;
        }
    a->n_gen_calls -= k->n_choices;
    if (k->conn) http_conn_set_request_data(k->conn, NULL, NULL);
    for (int i = 0; i < k->n_choices; i++) {
        text_buf_free(&k->choices[i].text);
        text_buf_free(&k->choices[i].echo);
        text_buf_free(&k->choices[i].stop_str);
        cJSON_Delete(k->choices[i].lp);
        cJSON_Delete(k->choices[i].prompt_lp);
    }
    free(k->choices);
    cJSON_Delete(k->echo);
    cJSON_Delete(k->tool_items);
    free(k);
}

/* Before the last answer: ending the response may start the connection's next (pipelined)
 * request at once, whose own state must not be cleared by call_free. */
static void detach(call *k) {
    if (k->conn) http_conn_set_request_data(k->conn, NULL, NULL);
    k->conn = NULL;
}

/* The client went away: the engine drops the sequence now; the call waits for its last event. */
static void cancel_choices(call *k) {
    if (k->n_choices == 0) return; /* tokenize calls finish on their own */
    for (int i = 0; i < k->n_choices; i++)
        if (!k->choices[i].done) sched_cancel(k->api->sched, k->id + (uint64_t)i);
}

static void on_abort(http_conn *c, void *data) {
    (void)c;
    call *k = data;
    k->conn = NULL;
    cancel_choices(k);
}

static call *call_new(api_server *a, http_conn *c, call_kind kind, int n_choices) {
    call *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    if (n_choices > 0 && !(k->choices = calloc((size_t)n_choices, sizeof *k->choices))) {
        free(k);
        return NULL;
    }
    k->n_choices = n_choices;
    for (int i = 0; i < n_choices; i++) k->choices[i].stop_token = -1;
    k->id = a->next_id + 1;
    a->next_id += (uint64_t)(n_choices > 0 ? n_choices : 1);
    k->kind = kind;
    k->api = a;
    k->conn = c;
    k->t_start = mono_now_s();
    k->created = (long)time(NULL);
    snprintf(k->resp_id, sizeof k->resp_id, "%s%08lx%06" PRIx64,
             kind == CALL_CHAT ? "chatcmpl-" : kind == CALL_RESPONSE ? "resp_" : "cmpl-", (unsigned long)a->started_at, k->id);
    k->next = a->calls;
    a->calls = k;
    a->n_gen_calls += n_choices;
    http_conn_set_request_data(c, k, on_abort);
    return k;
}

/* ---- engine events ----------------------------------------------------------------------------- */

static void on_ready(api_server *a) {
    const model_summary *ms = sched_model(a->sched);
    if (a->cfg.served_name) {
        snprintf(a->model_id, sizeof a->model_id, "%s", a->cfg.served_name);
    } else {
        const char *base = strrchr(a->cfg.engine.model_path, '/');
        base = base ? base + 1 : a->cfg.engine.model_path;
        snprintf(a->model_id, sizeof a->model_id, "%s", base);
        size_t n = strlen(a->model_id);
        if (n > 5 && strcmp(a->model_id + n - 5, ".gguf") == 0) a->model_id[n - 5] = 0;
    }
    a->model.id = a->model_id;
    a->model.alias = ms->name;
    a->model.max_ctx = ms->max_ctx;
    a->model.chat = chat_format_detect(ms->chat_template, ms->arch);
    /* What the template adds, read once (used by ChatML and Mistral v7; a dated one again per prompt). */
    a->model.chat_default_system = chat_default_system(ms->chat_template, &a->model.chat_default_dated);
    a->model.chat_thinks = a->model.chat == CHAT_CHATML && chat_template_thinks(ms->chat_template);
    a->model.chat_template = ms->chat_template;
    a->model.sampling = &a->cfg.sampling;
    a->ready = true;
    log_ready(a, ms);
}

static void send_chunk(call *k, cJSON *o) {
    if (k->conn && o) sse_send_json(k->conn, o);
    cJSON_Delete(o);
}

/* A streamed chat choice opens with its role, then (vLLM's echo) the words it continues. */
/* After a chat choice's role went out: its echo (vLLM's chat echo), if any. */
static void chat_choice_opened(call *k, int i) {
    choice *ci = &k->choices[i];
    ci->role_sent = true;
    if (ci->echo.len) send_chunk(k, stream_chunk(k, i, ci->echo.p, ci->echo.len, NULL, NULL, false));
}

static void open_chat_choice(call *k, int i) {
    send_chunk(k, stream_chunk(k, i, "", 0, NULL, NULL, true));
    chat_choice_opened(k, i);
}

/* Every choice ended: the usage chunk and [DONE], or the whole JSON response. */
static void finish_call(api_server *a, call *k, const sched_event *last) {
    log_request(k, last, 200);
    http_conn *c = k->conn;
    detach(k);
    if (c && k->stream && k->kind == CALL_RESPONSE) {
        sse_close(c); /* its last event (response.completed) went out with the choice's end */
    } else if (c && k->stream) {
        if (k->include_usage) {
            cJSON *o = usage_chunk(k);
            sse_send_json(c, o);
            cJSON_Delete(o);
        }
        sse_end(c); /* a no-op when the writes above found the client gone */
    } else if (c) {
        reply_json(a, c, 200, k->kind == CALL_RESPONSE ? responses_object(k) : whole_response(k), NULL);
    }
    call_free(a, k);
}

/* Events of one choice (index i) of a generation. Choices are submitted together, so each one's
 * EV_ACCEPTED or EV_ERROR arrives before any of them produces text. */
static void on_gen_event(api_server *a, call *k, int i, sched_event *ev) {
    bool chat = k->kind == CALL_CHAT, responses = k->kind == CALL_RESPONSE;
    choice *ci = &k->choices[i];
    switch (ev->kind) {
    case EV_ACCEPTED:
        ci->accepted = true;
        ci->prompt_tokens = ev->prompt_tokens;
        if (++k->n_accepted == k->n_choices && k->conn && k->stream && !k->failed) {
            k->started = true;
            metrics_http_response(a->m, 200);
            sse_begin(k->conn, extra_headers(a));
            if (responses) responses_stream_created(k);
        }
        break;
    case EV_TEXT:
        if (!k->conn || k->failed) break;
        if (k->stream && responses && !k->tools) {
            responses_stream_text(k, ev);
        } else if (k->stream && !k->tools && !responses) { /* a tool-calling reply is read as JSON below */
            /* A chat choice's opening delta (its role) goes out with its first token, as OpenAI's
             * and vLLM's do, not at acceptance: a client's time to first token is the prefill's,
             * not the queue's (docs/benchmarks.md: vLLM's TTFT is the first chunk's time). */
            if (chat && !ci->role_sent) open_chat_choice(k, i);
            if (ev->text_len == 0 && ev->n_logprobs == 0) break; /* held back (a possible stop string) */
            send_chunk(k, stream_chunk(k, i, ev->text ? ev->text : "", ev->text_len, NULL, ev, false));
        } else {
            if (ev->text_len) text_buf_add(&ci->text, ev->text, ev->text_len);
            if (ev->n_logprobs) collect_logprobs(k, i, ev);
            if (k->stream && k->tools && responses) responses_stream_tools(k);
            cJSON *d = k->stream && k->tools && chat ? tools_stream_text(k, i) : NULL; /* an answer streams */
            if (d && !ci->role_sent) open_chat_choice(k, i);
            send_chunk(k, d);
        }
        break;
    case EV_PROMPT: {
        if (!k->conn || k->failed) break;
        const bool opens = chat && k->stream && !ci->role_sent; /* prompt_logprobs ride the role's chunk */
        cJSON *chunk = prompt_echo_event(k, i, ev, opens);
        send_chunk(k, chunk);
        if (opens && chunk) chat_choice_opened(k, i);
        break;
    }
    case EV_DONE:
        ci->done = true;
        ci->finish_reason = ev->finish_reason;
        ci->stop_token = ev->stop_token;
        if (ev->stop_str && !text_buf_add(&ci->stop_str, ev->stop_str, ev->stop_str_len)) ci->stop_str.len = 0;
        ci->completion_tokens = ev->completion_tokens;
        ci->cached_tokens = ev->cached_tokens;
        ci->kv = ev->kv;
        if (k->stream && k->started && !k->failed && responses) {
            responses_stream_done(k);
        } else if (k->stream && k->started && !k->failed) {
            if (chat && !ci->role_sent) open_chat_choice(k, i); /* no token at all (cancelled): it still opens */
            const char *finish = ev->finish_reason;
            if (k->tools) send_chunk(k, tools_stream_chunk(k, i, &finish));
            cJSON *last = stream_chunk(k, i, chat ? NULL : "", 0, finish, NULL, false);
            if (k->tools) tools_stream_logprobs(k, i, last); /* what no chunk of text or calls took */
            send_chunk(k, last);
        }
        if (++k->n_done < k->n_choices) break;
        if (k->failed) call_free(a, k); /* the error went out already */
        else finish_call(a, k, ev);
        break;
    case EV_ERROR: {
        ci->done = true;
        bool first = !k->failed;
        k->failed = true;
        if (first) {
            /* One choice failed: the request fails, and its other choices stop now. */
            log_request(k, ev, ev->status);
            http_conn *c = k->conn;
            detach(k);
            cancel_choices(k);
            /* A Responses request's prompt is its input. */
            const char *param = ev->param;
            if (responses && param && (!strcmp(param, "messages") || !strcmp(param, "prompt"))) param = "input";
            if (c && k->started && responses) {
                k->conn = c; /* detached above; the error event is the stream's last */
                responses_stream_error(k, ev->status, ev->message, param, ev->code);
                k->conn = NULL;
                sse_close(c);
            } else if (c && k->started) {
                /* The stream's status line is gone already: the error travels as an event. */
                cJSON *o = error_object(ev->status, NULL, ev->message, param, ev->code);
                sse_send_json(c, o);
                cJSON_Delete(o);
                sse_end(c);
            } else if (c) {
                reply_error(a, c, ev->status, ev->message, param, ev->code, NULL);
            }
        }
        if (++k->n_done == k->n_choices) call_free(a, k);
        break;
    }
    default: break;
    }
}

static void on_event(sched_event *ev, void *data) {
    api_server *a = data;
    if (ev->kind == EV_READY) {
        on_ready(a);
    } else if (ev->kind == EV_STARTING) {
        snprintf(a->starting, sizeof a->starting, "%.31s", ev->message);
    } else if (ev->kind == EV_FATAL) {
        fprintf(stderr, "wushkv serve: %s\n", ev->message);
        a->fatal = true;
        if (a->on_fatal) a->on_fatal(a->fatal_data);
    } else {
        call *k = call_find(a, ev->id);
        if (k && (k->kind == CALL_COMPLETION || k->kind == CALL_CHAT || k->kind == CALL_RESPONSE)) {
            on_gen_event(a, k, (int)(ev->id - k->id), ev);
        } else if (k) {
            http_conn *c = k->conn;
            detach(k);
            if (c && ev->kind == EV_ERROR) {
                reply_error(a, c, ev->status, ev->message, ev->param, ev->code, NULL);
            } else if (c && ev->kind == EV_TOKENS) {
                cJSON *o = cJSON_CreateObject();
                cJSON *t = cJSON_AddArrayToObject(o, "tokens");
                for (int i = 0; i < ev->n_tokens; i++) cJSON_AddItemToArray(t, cJSON_CreateNumber(ev->tokens[i]));
                cJSON_AddNumberToObject(o, "count", ev->n_tokens);
                cJSON_AddNumberToObject(o, "max_model_len", a->model.max_ctx);
                reply_json(a, c, 200, o, NULL);
            } else if (c && ev->kind == EV_RESET) {
                reply_json(a, c, 200, cJSON_CreateObject(), NULL);
            } else if (c && ev->kind == EV_DETOKENIZED) {
                cJSON *o = cJSON_CreateObject();
                /* The text under vLLM's name and llama.cpp's. */
                json_add_string_n(o, "prompt", ev->text, ev->text ? ev->text_len : 0);
                json_add_string_n(o, "content", ev->text, ev->text ? ev->text_len : 0);
                reply_json(a, c, 200, o, NULL);
            }
            call_free(a, k);
        }
    }
    sched_event_free(ev);
}

/* ---- handlers ---------------------------------------------------------------------------------- */

static void handle_generation(api_server *a, http_conn *c, http_request *r, call_kind kind) {
    openai_request req;
    api_error err = {0};
    cJSON *echo = NULL;
    if (kind == CALL_RESPONSE ? !openai_parse_responses(r->body, r->body_len, &a->model, &req, &echo, &err)
                              : !openai_parse_generation(r->body, r->body_len, kind == CALL_CHAT, &a->model, &req, &err)) {
        reply_api_error(a, c, &err);
        return;
    }
    /* Each choice is a sequence: the limit counts choices. */
    int limit = a->cfg.engine.max_seqs + a->cfg.max_queue;
    if (req.n_gens > limit) {
        char msg[200];
        snprintf(msg, sizeof msg, "%d choices exceed what this server holds at once (%d)", req.n_gens, limit);
        reply_error(a, c, 400, msg, "n", "invalid_value", NULL);
        openai_request_free(&req);
        cJSON_Delete(echo);
        return;
    }
    if (a->n_gen_calls + req.n_gens > limit) {
        reply_error(a, c, 429, "the server is at its queue limit; retry shortly", NULL, "queue_full",
                    "Retry-After: 1\r\n");
        openai_request_free(&req);
        cJSON_Delete(echo);
        return;
    }
    /* The jobs go to the engine as one chain, so it sees every choice before its next step. */
    sched_job *head = NULL, **tail = &head;
    bool oom = false;
    for (int i = 0; i < req.n_gens && !oom; i++) {
        *tail = calloc(1, sizeof **tail);
        if (*tail) tail = &(*tail)->next;
        else oom = true;
    }
    call *k = oom ? NULL : call_new(a, c, kind, req.n_gens);
    if (!k) {
        while (head) {
            sched_job *next = head->next;
            free(head);
            head = next;
        }
        openai_request_free(&req);
        cJSON_Delete(echo);
        reply_error(a, c, 500, "out of memory", NULL, NULL, NULL);
        return;
    }
    k->echo = echo;
    k->n_per_prompt = req.n;
    k->stream = req.stream;
    k->include_usage = req.stream && req.include_usage;
    k->logprobs_wanted = req.chat_logprobs || (!req.chat && req.gens[0].logprobs >= 0);
    k->tools = req.tools;
    k->tools_json_answer = req.tools_json_answer;
    if (a->cfg.log_prompts && req.gens[0].prompt_text) log_prompt_set(k, req.gens[0].prompt_text, req.gens[0].prompt_len);
    k->prompt_echo = req.echo;
    k->echo_logprobs = req.echo && !req.chat ? req.gens[0].logprobs : -1;
    k->tokens_as_ids = req.tokens_as_ids;
    k->prompt_logprobs = req.prompt_logprobs;
    for (int c = 0; c < req.n_gens && req.echo; c++) { /* a text prompt's own text; a token prompt's comes with EV_PROMPT */
        const char *t = req.chat ? req.chat_echo : req.gens[c].prompt_text;
        size_t len = req.chat ? req.chat_echo_len : req.gens[c].prompt_len;
        if (t) text_buf_add(&k->choices[c].echo, t, len);
        if (t && req.chat && !k->stream) text_buf_add(&k->choices[c].text, t, len); /* the reply's text follows */
    }
    int i = 0;
    for (sched_job *j = head; j; j = j->next, i++) {
        j->kind = JOB_GENERATE;
        j->id = k->id + (uint64_t)i;
        j->group = k->id;
        j->t_arrival = k->t_start;
        j->gen = req.gens[i]; /* moved */
    }
    free(req.gens);
    free(req.chat_echo);
    sched_submit(a->sched, head);
}

static void handle_tokenize(api_server *a, http_conn *c, http_request *r, bool detokenize) {
    gen_params g;
    api_error err = {0};
    if (!(detokenize ? openai_parse_detokenize(r->body, r->body_len, &g, &err) : openai_parse_tokenize(r->body, r->body_len, &a->model, &g, &err))) {
        reply_api_error(a, c, &err);
        return;
    }
    sched_job *job = calloc(1, sizeof *job);
    call *k = job ? call_new(a, c, detokenize ? CALL_DETOKENIZE : CALL_TOKENIZE, 0) : NULL;
    if (!k) {
        free(job);
        gen_params_free(&g);
        reply_error(a, c, 500, "out of memory", NULL, NULL, NULL);
        return;
    }
    job->kind = detokenize ? JOB_DETOKENIZE : JOB_TOKENIZE;
    job->id = k->id;
    job->gen = g;
    sched_submit(a->sched, job);
}

/* vLLM's POST /reset_prefix_cache: the engine thread forgets every cached block (those running
 * sequences hold stay theirs); 200 {} once it has. */
static void handle_reset_prefix_cache(api_server *a, http_conn *c) {
    sched_job *job = calloc(1, sizeof *job);
    call *k = job ? call_new(a, c, CALL_RESET, 0) : NULL;
    if (!k) {
        free(job);
        reply_error(a, c, 500, "out of memory", NULL, NULL, NULL);
        return;
    }
    job->kind = JOB_RESET_PREFIX_CACHE;
    job->id = k->id;
    sched_submit(a->sched, job);
}

static void handle_health(api_server *a, http_conn *c) {
    const char *state = a->draining ? "draining" : a->ready ? "ok" : a->starting[0] ? a->starting : "loading";
    char body[64];
    int n = snprintf(body, sizeof body, "{\"status\":\"%s\"}", state);
    reply(a, c, a->ready && !a->draining ? 200 : 503, "application/json", body, (size_t)n, NULL);
}

/* A float setting as JSON shows it: 0.8f is 0.800000011920929 as a double; its shortest %g form is
 * what the user typed. */
static double as_typed(float x) {
    char b[32];
    snprintf(b, sizeof b, "%g", (double)x);
    return strtod(b, NULL);
}

static cJSON *model_object(api_server *a) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", a->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)a->started_at);
    cJSON_AddStringToObject(m, "owned_by", "wushkv");
    cJSON_AddNumberToObject(m, "max_model_len", a->model.max_ctx);
    /* What the server runs (extensions to OpenAI's object): the KV cache format and what it costs,
     * and the sampling a request gets for the fields it leaves out. */
    const model_summary *ms = sched_model(a->sched);
    cJSON *kv = cJSON_AddObjectToObject(m, "kv_cache");
    cJSON_AddStringToObject(kv, "format", a->cfg.kv_desc);
    cJSON_AddNumberToObject(kv, "bits_per_element", ms->kv_bits_per_element);
    cJSON_AddNumberToObject(kv, "bytes_per_context", (double)ms->kv_context_bytes);
    cJSON_AddNumberToObject(kv, "pool_bytes", (double)ms->kv_pool_bytes);
    cJSON_AddStringToObject(kv, "wush_sidecar", a->cfg.engine.kv_transform == WK_KV_TRANSFORM_WUSH && ms->wush_path[0]
                                                    ? ms->wush_path : "");
    const api_sampling *sp = &a->cfg.sampling;
    cJSON *sd = cJSON_AddObjectToObject(m, "sampling_defaults");
    cJSON_AddNumberToObject(sd, "temperature", as_typed(sp->temperature));
    cJSON_AddNumberToObject(sd, "top_k", sp->top_k);
    cJSON_AddNumberToObject(sd, "top_p", as_typed(sp->top_p));
    cJSON_AddNumberToObject(sd, "min_p", as_typed(sp->min_p));
    cJSON_AddNumberToObject(sd, "repeat_penalty", as_typed(sp->repeat_penalty));
    cJSON_AddNumberToObject(sd, "repeat_last_n", sp->repeat_last_n);
    return m;
}

/* %XX escapes of in -> out (NUL-terminated); false when one is malformed, decodes to a NUL or
 * the result does not fit. */
static bool percent_decode(const char *in, char *out, size_t cap) {
    size_t n = 0;
    for (const char *p = in; *p; p++) {
        int c = (unsigned char)*p;
        if (c == '%') {
            int hi = json_hex_digit(p[1]), lo = hi < 0 ? -1 : json_hex_digit(p[2]);
            if (lo < 0 || (hi | lo) == 0) return false;
            c = hi * 16 + lo;
            p += 2;
        }
        if (n + 1 >= cap) return false;
        out[n++] = (char)c;
    }
    out[n] = 0;
    return true;
}

static void handle_models(api_server *a, http_conn *c, const char *path) {
    if (strcmp(path, "/v1/models") == 0) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_object(a));
        reply_json(a, c, 200, o, NULL);
    } else {
        /* The id is a path segment: percent-encoded where it must be (RFC 3986 2.1), as the OpenAI
         * client sends a name with a space ("Gemma 3 270m", the GGUF's general.name, which requests
         * may name too). */
        char id[256];
        const bool decoded = percent_decode(path + strlen("/v1/models/"), id, sizeof id);
        if (decoded && (strcmp(id, a->model_id) == 0 || (a->model.alias && strcmp(id, a->model.alias) == 0))) {
            reply_json(a, c, 200, model_object(a), NULL);
            return;
        }
        char msg[400];
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist", decoded ? id : path + strlen("/v1/models/"));
        reply_error(a, c, 404, msg, "model", "model_not_found", NULL);
    }
}

/* The HTTP layer's connection counts, copied into the metrics before they are read. */
static void publish_connections(api_server *a) {
    http_conn_stats st;
    http_server_conn_stats(a->http, &st);
    metrics_connections(a->m, st.open, st.rejected, st.reaped);
}

static void handle_metrics(api_server *a, http_conn *c) {
    size_t len = 0;
    metrics_http_response(a->m, 200);
    publish_connections(a);
    char *text = metrics_render(a->m, a->ready ? a->model_id : "", &len);
    if (!text) {
        reply_error(a, c, 500, "out of memory", NULL, NULL, NULL);
        return;
    }
    http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, extra_headers(a));
    free(text);
}

/* The dashboard page, embedded at build time from api/dashboard.html (embed_file.py). */
extern const char dashboard_html[];
extern const size_t dashboard_html_len;

/* What the dashboard polls: the metrics' live state plus what the page shows of the model. */
static void handle_dashboard_state(api_server *a, http_conn *c) {
    cJSON *o = metrics_state(a->m);
    char *text = NULL;
    if (o) {
        const model_summary *ms = a->ready ? sched_model(a->sched) : NULL;
        cJSON_AddNumberToObject(o, "time", mono_now_s());
        cJSON_AddStringToObject(o, "model", a->ready ? a->model_id : "");
        cJSON_AddStringToObject(o, "kv_format", a->cfg.kv_desc);
        cJSON_AddNumberToObject(o, "bits_per_element", ms ? ms->kv_bits_per_element : 0);
        cJSON_AddBoolToObject(o, "ready", a->ready);
        text = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
    }
    if (!text) {
        reply_error(a, c, 500, "out of memory", NULL, NULL, NULL);
        return;
    }
    reply(a, c, 200, "application/json", text, strlen(text), "Cache-Control: no-store\r\n");
    free(text);
}

static const route k_routes[] = {
    {"/health", "GET", R_HEALTH, false, false},
    {"/metrics", "GET", R_METRICS, false, false},
    {"/dashboard", "GET", R_DASHBOARD, false, false},
    {"/dashboard/state", "GET", R_DASHBOARD_STATE, false, false},
    {"/v1/models", "GET", R_MODELS, true, true},
    {"/v1/models/", "GET", R_MODEL, true, true},
    {"/v1/completions", "POST", R_COMPLETIONS, true, true},
    {"/v1/chat/completions", "POST", R_CHAT, true, true},
    {"/v1/responses", "POST", R_RESPONSES, true, true},
    {"/v1/responses/", "GET", R_RESPONSE_STORED, true, false},
    {"/tokenize", "POST", R_TOKENIZE, true, true},
    {"/detokenize", "POST", R_DETOKENIZE, true, true},
    {"/reset_prefix_cache", "POST", R_RESET_PREFIX_CACHE, true, true},
    {"/tokenizer_info", "GET", R_TOKENIZER_INFO, true, true},
};
enum { N_ROUTES = sizeof k_routes / sizeof k_routes[0] };

static bool path_matches(const route *rt, const char *path) {
    size_t n = strlen(rt->path);
    if (rt->path[n - 1] == '/') return strncmp(path, rt->path, n) == 0 && path[n] != 0;
    return strcmp(path, rt->path) == 0;
}

/* HEAD is GET without the body (RFC 9110 9.3.2): a GET route answers it, and the HTTP layer
 * leaves the body out. */
static bool method_matches(const route *rt, const char *method) {
    return strcmp(method, rt->method) == 0 || (strcmp(rt->method, "GET") == 0 && strcmp(method, "HEAD") == 0);
}

const route *api_route_match(const char *method, const char *path, const char **allow) {
    const route *rt = NULL;
    *allow = NULL;
    for (int i = 0; i < N_ROUTES; i++)
        if (path_matches(&k_routes[i], path)) {
            if (method_matches(&k_routes[i], method)) rt = &k_routes[i];
            else *allow = strcmp(k_routes[i].method, "GET") == 0 ? "GET, HEAD" : k_routes[i].method;
        }
    return rt;
}

static bool authorized(api_server *a, http_request *r) {
    if (!a->cfg.api_key) return true;
    const char *h = http_header_get(r, "authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    /* Constant-time comparison: the key's bytes must not leak through timing. */
    const char *given = h + 7, *key = a->cfg.api_key;
    size_t gl = strlen(given), kl = strlen(key);
    unsigned diff = (unsigned)(gl != kl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

/* A connection beyond --max-connections (none idle to reap): liveness probes still get their answer,
 * everything else a 503 that says why, and the connection is closed after it. */
static bool refuse_over_limit(api_server *a, http_conn *c, http_request *r) {
    const char *allow;
    const route *rt = api_route_match(r->method, r->path, &allow);
    if (!r->over_limit || (rt && rt->id == R_HEALTH)) return false;
    char msg[160];
    snprintf(msg, sizeof msg, "too many open connections (--max-connections %d); retry shortly", a->cfg.limits.max_conns);
    reply_error(a, c, 503, msg, NULL, "too_many_connections", "Retry-After: 1\r\n");
    return true;
}

/* What the request's head alone decides, whatever its body: a connection over the limit, a CORS
 * preflight, no such route or method, no key, the model not serving (answered here: true); else
 * false with *out its route. Every request passes here, and a 100-continue head before its body is
 * sent (on_request_head); the whole request passes again, as the server may have changed meanwhile. */
static bool answer_from_head(api_server *a, http_conn *c, http_request *r, const route **out) {
    if (refuse_over_limit(a, c, r)) return true;
    if (strcmp(r->method, "OPTIONS") == 0 && a->cfg.cors_origin) {
        /* CORS preflight: browsers ask before a POST with a JSON body or an Authorization header. */
        reply(a, c, 204, "text/plain", "", 0,
              "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n"
              "Access-Control-Allow-Headers: Authorization, Content-Type\r\n"
              "Access-Control-Max-Age: 600\r\n");
        return true;
    }
    const char *allow = NULL;
    const route *rt = api_route_match(r->method, r->path, &allow);
    if (!rt && allow) {
        char hdr[64], msg[160];
        snprintf(hdr, sizeof hdr, "Allow: %s\r\n", allow);
        snprintf(msg, sizeof msg, "method %s is not allowed on %.80s (use %s)", r->method, r->path, allow);
        reply_error(a, c, 405, msg, NULL, "method_not_allowed", hdr);
        return true;
    }
    if (!rt) {
        char msg[160];
        snprintf(msg, sizeof msg, "no such endpoint: %.100s", r->path);
        reply_error(a, c, 404, msg, NULL, "not_found", NULL);
        return true;
    }
    if (rt->auth && !authorized(a, r)) {
        reply_error(a, c, 401, "invalid or missing API key (Authorization: Bearer KEY)", NULL, "invalid_api_key",
                    "WWW-Authenticate: Bearer\r\n");
        return true;
    }
    if (rt->model && (a->draining || !a->ready)) {
        if (a->draining)
            reply_error(a, c, 503, "the server is shutting down", NULL, "draining", "Retry-After: 1\r\n");
        else if (strcmp(a->starting, "calibrating") == 0) /* minutes, once per model: no point retrying every second */
            reply_error(a, c, 503, "the server is calibrating the WUSH-KV transforms for this model (once per model); "
                        "retry later", NULL, "calibrating", "Retry-After: 10\r\n");
        else
            reply_error(a, c, 503, "the model is loading; retry shortly", NULL, "loading", "Retry-After: 1\r\n");
        return true;
    }
    *out = rt;
    return false;
}

static void on_request(http_conn *c, http_request *r, void *data) {
    api_server *a = data;
    const route *rt;
    if (answer_from_head(a, c, r, &rt)) return;
    switch (rt->id) {
    case R_HEALTH: handle_health(a, c); break;
    case R_METRICS: handle_metrics(a, c); break;
    case R_DASHBOARD: reply(a, c, 200, "text/html; charset=utf-8", dashboard_html, dashboard_html_len, NULL); break;
    case R_DASHBOARD_STATE: handle_dashboard_state(a, c); break;
    case R_MODELS:
    case R_MODEL: handle_models(a, c, r->path); break;
    case R_COMPLETIONS: handle_generation(a, c, r, CALL_COMPLETION); break;
    case R_CHAT: handle_generation(a, c, r, CALL_CHAT); break;
    case R_RESPONSES: handle_generation(a, c, r, CALL_RESPONSE); break;
    case R_RESPONSE_STORED:
        reply_error(a, c, 404, "responses are not stored here (each answer is returned once; store is ignored)",
                    "response_id", "not_found", NULL);
        break;
    case R_TOKENIZE: handle_tokenize(a, c, r, false); break;
    case R_DETOKENIZE: handle_tokenize(a, c, r, true); break;
    case R_RESET_PREFIX_CACHE: handle_reset_prefix_cache(a, c); break;
    case R_TOKENIZER_INFO: reply_json(a, c, 200, tokenizer_info_object(a), NULL); break;
    }
}

/* A head asking for 100 Continue: what would be refused anyway is refused before the client sends
 * its body (an unauthenticated 1 MiB prompt costs it one round trip, not the upload). */
static bool on_request_head(http_conn *c, http_request *r, void *data) {
    const route *rt;
    return answer_from_head(data, c, r, &rt);
}

/* ---- lifecycle --------------------------------------------------------------------------------- */

api_server *api_start(uv_loop_t *loop, const serve_config *cfg, api_fatal_cb on_fatal, void *data) {
    api_server *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->loop = loop;
    a->cfg = *cfg;
    a->on_fatal = on_fatal;
    a->fatal_data = data;
    a->started_at = (long)time(NULL);
    a->model.max_ctx = 1;
    if (cfg->cors_origin)
        snprintf(a->cors_headers, sizeof a->cors_headers, "Access-Control-Allow-Origin: %.400s\r\nVary: Origin\r\n",
                 cfg->cors_origin);
    a->m = metrics_create();
    if (!a->m) {
        free(a);
        return NULL;
    }
    char err[256] = "";
    int rc = http_server_start(&a->http, loop, cfg->host, cfg->port, &cfg->limits, on_request, a, err, sizeof err);
    if (rc) {
        fprintf(stderr, "wushkv serve: %s\n", err);
        metrics_free(a->m);
        free(a);
        return NULL;
    }
    http_server_set_head_handler(a->http, on_request_head);
    fprintf(stderr, "wushkv: listening on http://%s:%d (at most %d connections; loading the model)\n", cfg->host,
            http_server_port(a->http), cfg->limits.max_conns);
    sched_config sc = {.max_seqs = cfg->engine.max_seqs, .max_batch_tokens = cfg->engine.max_batch_tokens,
                       .engine = cfg->engine, .prepare = cfg->prepare,
                       .prepare_data = cfg->prepare_data};
    if (sched_start(&a->sched, loop, &sc, a->m, on_event, a) != 0) {
        fprintf(stderr, "wushkv serve: cannot start the engine thread\n");
        http_server_close(a->http);
        metrics_free(a->m);
        free(a);
        return NULL;
    }
    return a;
}

void api_begin_drain(api_server *a) {
    a->draining = true;
    http_server_stop_accepting(a->http);
}

int api_in_flight(const api_server *a) { return a->n_gen_calls; }
int api_exit_status(const api_server *a) { return a->fatal ? 1 : 0; }

void api_stop(api_server *a) {
    /* Connections first: their abort callbacks cancel into the scheduler, which still exists. */
    http_server_close(a->http);
    sched_stop(a->sched);
    while (a->calls) call_free(a, a->calls);
    free((char *)a->model.chat_default_system);
    metrics_free(a->m);
    free(a);
}
