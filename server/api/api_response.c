/* The JSON of generation responses, from a call's state and the engine's events: OpenAI's
 * completion and chat objects, their stream chunks, logprobs and usage, error objects; and the
 * log lines (ready, one per request). api.c decides when to send them and owns the calls. */
#include "api/api_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json_text.h"
#include "api/tool_calls.h"
#include "metrics/mono_clock.h"
#include "sched/text_stream.h"

cJSON *error_object(int status, const char *type, const char *message, const char *param, const char *code) {
    if (!type)
        type = status == 401   ? "authentication_error"
               : status == 404 ? "not_found_error"
               : status == 429 ? "rate_limit_error"
               : status >= 500 ? "server_error"
                               : "invalid_request_error";
    cJSON *root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    /* Messages quote what a client sent (a model name, a path), cut at byte counts: valid UTF-8 only. */
    char text[1024];
    snprintf(text, sizeof text, "%s", message ? message : "");
    json_utf8_scrub(text);
    cJSON_AddStringToObject(e, "message", text);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    return root;
}

char *token_bytes_utf8(const char *bytes, size_t n, size_t *len) {
    text_stream ts;
    text_stream_init(&ts, NULL, NULL, 0);
    text_buf out = {0};
    bool oom = false;
    text_stream_feed(&ts, bytes, n, &out, &oom);
    text_stream_finish(&ts, &out, &oom);
    text_stream_free(&ts);
    if (oom || !text_buf_add(&out, "", 0)) {
        text_buf_free(&out);
        *len = 0;
        return NULL;
    }
    *len = out.len; /* text_buf keeps a NUL after its bytes, uncounted */
    return out.p;
}

cJSON *token_json_string(const char *piece, int len) {
    size_t n;
    char *t = token_bytes_utf8(piece, (size_t)len, &n);
    cJSON *s = json_string_n(t, n);
    free(t);
    return s;
}

static cJSON *bytes_array(const char *p, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)p[i]));
    return a;
}

/* Each prompt counted once (as OpenAI does for n > 1), with the cached tokens of the choice it is
 * counted from; completions summed, KV bytes and blocks summed over the choices' peaks (their
 * sequences run side by side; blocks shared through the prefix cache count for each, docs/api.md). */
cJSON *usage_object(const call *k) {
    int prompt = 0, cached = 0, completion = 0, blocks = 0;
    uint64_t bytes = 0, fp16 = 0;
    double bits = 16.0;
    for (int i = 0; i < k->n_choices; i++) {
        const choice *c = &k->choices[i];
        if (i % k->n_per_prompt == 0) prompt += c->prompt_tokens, cached += c->cached_tokens;
        completion += c->completion_tokens;
        bytes += c->kv.bytes;
        fp16 += c->kv.fp16_bytes;
        blocks += c->kv.blocks;
        if (c->kv.bits_per_element > 0) bits = c->kv.bits_per_element;
    }
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", completion);
    cJSON_AddNumberToObject(u, "total_tokens", prompt + completion);
    cJSON *details = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(details, "cached_tokens", cached);
    cJSON *kv = cJSON_AddObjectToObject(u, "kv_cache");
    cJSON_AddNumberToObject(kv, "bytes", (double)bytes);
    cJSON_AddNumberToObject(kv, "fp16_bytes", (double)fp16);
    cJSON_AddNumberToObject(kv, "blocks", blocks);
    cJSON_AddNumberToObject(kv, "bits_per_element", bits);
    return u;
}

static cJSON *envelope(const call *k, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", k->resp_id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)k->created);
    cJSON_AddStringToObject(o, "model", k->api->model_id);
    return o;
}

/* A chat logprobs entry's token, logprob and bytes into e: the token's own text and bytes, or with
 * as_ids vLLM's return_tokens_as_token_ids spelling "token_id:N" (and that text's bytes), which
 * names a token whose bytes alone are not text. */
static void chat_entry(cJSON *e, bool as_ids, int32_t tok, const char *piece, int len, float logprob) {
    char id[24];
    if (as_ids) len = snprintf(id, sizeof id, "token_id:%d", (int)tok), piece = id;
    cJSON_AddItemToObject(e, "token", token_json_string(piece, len));
    cJSON_AddNumberToObject(e, "logprob", logprob);
    cJSON_AddItemToObject(e, "bytes", bytes_array(piece, len));
}

/* Chat logprobs entries for one event: [{token, logprob, bytes, top_logprobs: [...]}]. */
void chat_logprobs_add(cJSON *content, const sched_event *ev, bool as_ids) {
    for (int i = 0; i < ev->n_logprobs; i++) {
        const token_logprob *lp = &ev->logprobs[i];
        cJSON *e = cJSON_CreateObject();
        chat_entry(e, as_ids, lp->token, lp->piece, lp->piece_len, lp->logprob);
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int j = 0; j < lp->n_top; j++) {
            cJSON *a = cJSON_CreateObject();
            chat_entry(a, as_ids, lp->top_token[j], lp->top_piece[j], lp->top_piece_len[j], lp->top_logprob[j]);
            cJSON_AddItemToArray(top, a);
        }
        cJSON_AddItemToArray(content, e);
    }
}

/* Completions logprobs (the legacy shape): parallel arrays tokens / token_logprobs /
 * top_logprobs (token -> logprob maps) / text_offset; an unscored entry (a prompt's first token)
 * has null in the middle two, as OpenAI's echo gives it. */
void completion_logprobs_add(cJSON *obj, const token_logprob *entries, int n, int max_top, bool as_ids, size_t *text_off) {
    cJSON *tokens = cJSON_GetObjectItem(obj, "tokens"), *lps = cJSON_GetObjectItem(obj, "token_logprobs");
    cJSON *tops = cJSON_GetObjectItem(obj, "top_logprobs"), *offs = cJSON_GetObjectItem(obj, "text_offset");
    char id[24];
    for (int i = 0; i < n; i++) {
        const token_logprob *lp = &entries[i];
        if (as_ids) snprintf(id, sizeof id, "token_id:%d", (int)lp->token);
        cJSON_AddItemToArray(tokens, as_ids ? cJSON_CreateString(id) : token_json_string(lp->piece, lp->piece_len));
        cJSON_AddItemToArray(lps, lp->unscored ? cJSON_CreateNull() : cJSON_CreateNumber(lp->logprob));
        cJSON *m = lp->unscored ? cJSON_CreateNull() : cJSON_CreateObject();
        for (int j = 0; j < lp->n_top && j < max_top && !lp->unscored; j++) {
            if (as_ids) { /* distinct ids, distinct keys */
                snprintf(id, sizeof id, "token_id:%d", (int)lp->top_token[j]);
                if (!cJSON_GetObjectItemCaseSensitive(m, id)) cJSON_AddNumberToObject(m, id, lp->top_logprob[j]);
                continue;
            }
            size_t ttn;
            char *tt = token_bytes_utf8(lp->top_piece[j], (size_t)lp->top_piece_len[j], &ttn);
            /* A map key is a C string in cJSON: a piece with a NUL byte is keyed by its text before
             * the NUL (the arrays beside it, tokens and bytes, carry every byte). */
            if (tt && !cJSON_GetObjectItemCaseSensitive(m, tt)) cJSON_AddNumberToObject(m, tt, lp->top_logprob[j]);
            free(tt);
        }
        cJSON_AddItemToArray(tops, m);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)*text_off));
        if (!lp->textless) *text_off += json_utf8_chars(lp->piece, (size_t)lp->piece_len);
    }
}

cJSON *completion_logprobs_new(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddArrayToObject(o, "tokens");
    cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON_AddArrayToObject(o, "text_offset");
    return o;
}

void collect_logprobs(call *k, int index, const sched_event *ev) {
    bool chat = k->kind != CALL_COMPLETION; /* chat's entries for responses too */
    choice *ci = &k->choices[index];
    if (!ci->lp) ci->lp = chat ? cJSON_CreateArray() : completion_logprobs_new();
    if (chat) chat_logprobs_add(ci->lp, ev, k->tokens_as_ids);
    else completion_logprobs_add(ci->lp, ev->logprobs, ev->n_logprobs, SCHED_MAX_TOP_LOGPROBS, k->tokens_as_ids, &ci->text_off);
}

/* vLLM's stop_reason beside a finish_reason: the stop string or stop token id that ended a "stop",
 * else null (an end-of-generation token, the length, a tool call). */
static void stop_reason_add(cJSON *ch, const choice *ci, const char *finish) {
    const bool stop = finish && strcmp(finish, "stop") == 0;
    if (stop && ci->stop_str.len) json_add_string_n(ch, "stop_reason", ci->stop_str.p, ci->stop_str.len);
    else if (stop && ci->stop_token >= 0) cJSON_AddNumberToObject(ch, "stop_reason", ci->stop_token);
    else cJSON_AddNullToObject(ch, "stop_reason");
}

cJSON *stream_chunk(call *k, int index, const char *text, size_t text_len, const char *finish,
                    const sched_event *lp_ev, bool role) {
    bool chat = k->kind == CALL_CHAT;
    cJSON *o = envelope(k, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", index);
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (text) json_add_string_n(d, "content", text, text_len);
    } else {
        json_add_string_n(ch, "text", text, text ? text_len : 0);
    }
    if (lp_ev && lp_ev->n_logprobs) {
        if (chat) {
            cJSON *l = cJSON_AddObjectToObject(ch, "logprobs");
            chat_logprobs_add(cJSON_AddArrayToObject(l, "content"), lp_ev, k->tokens_as_ids);
        } else {
            cJSON *l = completion_logprobs_new();
            completion_logprobs_add(l, lp_ev->logprobs, lp_ev->n_logprobs, SCHED_MAX_TOP_LOGPROBS, k->tokens_as_ids,
                                    &k->choices[index].text_off);
            cJSON_AddItemToObject(ch, "logprobs", l);
        }
    } else {
        cJSON_AddNullToObject(ch, "logprobs");
    }
    if (finish) {
        cJSON_AddStringToObject(ch, "finish_reason", finish);
        stop_reason_add(ch, &k->choices[index], finish);
    } else {
        cJSON_AddNullToObject(ch, "finish_reason");
    }
    cJSON_AddItemToArray(choices, ch);
    if (k->include_usage) cJSON_AddNullToObject(o, "usage"); /* as OpenAI: null until the usage chunk */
    return o;
}

cJSON *usage_chunk(const call *k) {
    cJSON *o = envelope(k, k->kind == CALL_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToObject(o, "usage", usage_object(k));
    return o;
}

uint64_t tool_call_seed(const call *k, int index) {
    return (k->id * 0x100000001B3ull ^ (uint64_t)(k->t_start * 1e6)) + (uint64_t)index * 0x9E3779B97F4A7C15ull;
}

cJSON *whole_response(call *k) {
    bool chat = k->kind == CALL_CHAT;
    cJSON *o = envelope(k, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < k->n_choices; i++) {
        choice *ci = &k->choices[i];
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", i);
        const char *finish = ci->finish_reason ? ci->finish_reason : "stop";
        if (chat) {
            cJSON *msg = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            if (k->tools) tools_reply(ci->text.p ? ci->text.p : "", ci->text.len, finish, false, k->tools_json_answer,
                                        tool_call_seed(k, i), msg, &finish);
            else json_add_string_n(msg, "content", ci->text.p, ci->text.len);
        } else {
            json_add_string_n(ch, "text", ci->text.p, ci->text.len);
        }
        if (ci->lp) {
            if (chat) cJSON_AddItemToObject(cJSON_AddObjectToObject(ch, "logprobs"), "content", ci->lp);
            else cJSON_AddItemToObject(ch, "logprobs", ci->lp);
            ci->lp = NULL;
        } else if (k->logprobs_wanted) { /* asked for and no token came: empty, not null */
            if (chat) cJSON_AddArrayToObject(cJSON_AddObjectToObject(ch, "logprobs"), "content");
            else cJSON_AddItemToObject(ch, "logprobs", completion_logprobs_new());
        } else {
            cJSON_AddNullToObject(ch, "logprobs");
        }
        cJSON_AddStringToObject(ch, "finish_reason", finish);
        stop_reason_add(ch, ci, finish);
        cJSON_AddItemToArray(choices, ch);
    }
    cJSON_AddItemToObject(o, "usage", usage_object(k));
    prompt_echo_whole(k, o);
    return o;
}

void log_prompt_set(call *k, const char *p, size_t len) {
    /* One line per request: newlines and quotes escaped, long prompts cut. */
    size_t j = 0;
    k->prompt_log[j++] = '"';
    for (const char *s = p, *end = p + len; s < end && j + 8 < sizeof k->prompt_log; s++) {
        if (*s == '\n') k->prompt_log[j++] = '\\', k->prompt_log[j++] = 'n';
        else if (*s == 0) memcpy(k->prompt_log + j, "\\u0000", 6), j += 6;
        else if (*s == '"' || *s == '\\') k->prompt_log[j++] = '\\', k->prompt_log[j++] = *s;
        else k->prompt_log[j++] = *s;
    }
    k->prompt_log[j++] = '"';
    k->prompt_log[j] = 0;
}

static cJSON *chunk_delta(cJSON *chunk) {
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(chunk, "choices"), 0), "delta");
}

/* The calls the reply completed since the last chunk, in a chunk of their own; NULL when none. */
static cJSON *tools_stream_new_calls(call *k, int index) {
    choice *ci = &k->choices[index];
    cJSON *o = stream_chunk(k, index, NULL, 0, NULL, NULL, false);
    if (tools_stream_calls(ci->text.p ? ci->text.p : "", ci->text.len, &ci->tstream, tool_call_seed(k, index),
                           chunk_delta(o)) > 0)
        return o;
    cJSON_Delete(o);
    return NULL;
}

void tools_stream_logprobs(call *k, int index, cJSON *chunk) {
    choice *ci = &k->choices[index];
    int n = ci->lp ? cJSON_GetArraySize(ci->lp) : 0;
    if (!chunk || n <= ci->lp_sent) return;
    cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(chunk, "choices"), 0);
    cJSON *lp = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(lp, "content");
    for (int j = ci->lp_sent; j < n; j++) cJSON_AddItemToArray(content, cJSON_Duplicate(cJSON_GetArrayItem(ci->lp, j), true));
    cJSON_ReplaceItemInObjectCaseSensitive(ch, "logprobs", lp);
    ci->lp_sent = n;
}

cJSON *tools_stream_text(call *k, int index) {
    choice *ci = &k->choices[index];
    text_buf part = {0};
    ci->tstream.json_answer = k->tools_json_answer;
    bool ok = tools_stream_answer(ci->text.p ? ci->text.p : "", ci->text.len, &ci->tstream, &part);
    cJSON *o = ok && part.len ? stream_chunk(k, index, part.p, part.len, NULL, NULL, false) : NULL;
    text_buf_free(&part);
    if (ok && ci->tstream.kind == TS_CALLS) o = tools_stream_new_calls(k, index); /* each call once whole */
    tools_stream_logprobs(k, index, o);
    return o;
}

cJSON *tools_stream_chunk(call *k, int index, const char **finish) {
    choice *ci = &k->choices[index];
    cJSON *o = tools_stream_text(k, index); /* an answer's last characters, or the last calls */
    if (ci->tstream.kind == TS_ANSWER) return o;
    if (ci->tstream.calls_sent > 0) { /* the calls went out as they came */
        if (*finish && !strcmp(*finish, "stop") && ci->tstream.calls.ended) *finish = "tool_calls";
        return o;
    }
    cJSON_Delete(o);
    o = stream_chunk(k, index, NULL, 0, NULL, NULL, false); /* no whole call: the raw text */
    tools_stream_logprobs(k, index, o);
    tools_reply(ci->text.p ? ci->text.p : "", ci->text.len, *finish, true, k->tools_json_answer, tool_call_seed(k, index),
                chunk_delta(o), finish);
    return o;
}

void log_request(call *k, const sched_event *ev, int status) {
    api_server *a = k->api;
    double dt = mono_now_s() - k->t_start;
    const char *kind = k->kind == CALL_CHAT ? "chat" : k->kind == CALL_RESPONSE ? "response" : "completion";
    if (status == 200) {
        int prompt = 0, cached = 0, completion = 0;
        uint64_t bytes = 0;
        for (int i = 0; i < k->n_choices; i++) {
            if (i % k->n_per_prompt == 0) prompt += k->choices[i].prompt_tokens, cached += k->choices[i].cached_tokens;
            completion += k->choices[i].completion_tokens;
            bytes += k->choices[i].kv.bytes;
        }
        fprintf(stderr,
                "wushkv: %s %s status=200 choices=%d prompt=%d cached=%d completion=%d finish=%s kv_bytes=%" PRIu64
                " queue=%.3fs ttft=%.3fs time=%.3fs%s%s\n",
                k->resp_id, kind, k->n_choices, prompt, cached, completion, ev->finish_reason, bytes, ev->queue_s,
                ev->ttft_s < 0 ? 0.0 : ev->ttft_s, dt, a->cfg.log_prompts ? " prompt=" : "",
                a->cfg.log_prompts ? k->prompt_log : "");
    } else {
        fprintf(stderr, "wushkv: %s %s status=%d error=\"%s\" time=%.3fs\n", k->resp_id, kind, status,
                ev ? ev->message : "", dt);
    }
}

void log_ready(api_server *a, const model_summary *ms) {
    char kv[512], groups[128] = "", swa[128] = "";
    /* The default's wide keys were named "@auto" before the engine chose their layers. */
    char *auto_at = strstr(a->cfg.kv_desc, "@auto");
    if (auto_at) {
        char tail[128];
        snprintf(tail, sizeof tail, "%s", auto_at + 5);
        snprintf(auto_at, sizeof a->cfg.kv_desc - (size_t)(auto_at - a->cfg.kv_desc), "@%s%s",
                 ms->kv_wide_layers[0] ? ms->kv_wide_layers : "none", tail);
    }
    const char *fmt = a->cfg.kv_desc;
    double mib = (double)ms->kv_pool_bytes / 1048576.0;
    if (ms->kv_layer_groups > 1)
        snprintf(groups, sizeof groups, " of one of %d layer groups; %d groups slide over %d tokens",
                 ms->kv_layer_groups, ms->kv_swa_groups, ms->kv_swa_window);
    const double ctx_mib = (double)ms->kv_context_bytes / 1048576.0;
    if (ms->kv_swa_pool_blocks)
        snprintf(swa, sizeof swa, " + %llu blocks of the sliding layers in int%d", (unsigned long long)ms->kv_swa_pool_blocks,
                 ms->kv_swa_bits);
    snprintf(kv, sizeof kv, "KV %s (%.4g bits/element, %.2f MiB per full context; %.1f MiB pool = %llu blocks "
             "of 16 tokens%s%s)", fmt, ms->kv_bits_per_element, ctx_mib, mib,
             (unsigned long long)ms->kv_pool_blocks, groups, swa);
    const api_sampling *sp = &a->cfg.sampling;
    char pc[64];
    if (!ms->prefix_cache) snprintf(pc, sizeof pc, "off");
    else if (!ms->prefix_cache_park) snprintf(pc, sizeof pc, "on (blocks)");
    else snprintf(pc, sizeof pc, "on (parking, %d window snapshots)", ms->kv_snapshots);
    fprintf(stderr, "wushkv: ready: model '%s' (%s, %s) on %s, context %d, chat format %s%s, %d sequences, steps of at most %d tokens, %s, "
            "prefix cache %s, sampling defaults temp %g top_k %d top_p %g min_p %g repeat_penalty %g (last %d), "
            "http://%s:%d\n",
            a->model_id, ms->name, ms->arch, ms->device, ms->max_ctx, chat_format_name(a->model.chat),
            ms->chat_template ? "" : " (no template in the model: its architecture's default)", a->cfg.engine.max_seqs,
            ms->step_tokens, kv, pc, (double)sp->temperature, sp->top_k, (double)sp->top_p, (double)sp->min_p, (double)sp->repeat_penalty,
            sp->repeat_last_n, a->cfg.host, http_server_port(a->http));
}

cJSON *tokenizer_info_object(api_server *a) {
    const model_summary *ms = sched_model(a->sched);
    cJSON *o = cJSON_CreateObject();
    const char *names[] = {"bos_token", "eos_token"}, *texts[] = {ms->bos_token, ms->eos_token};
    for (int i = 0; i < 2; i++)
        if (texts[i][0]) cJSON_AddStringToObject(o, names[i], texts[i]);
        else cJSON_AddNullToObject(o, names[i]);
    cJSON_AddNullToObject(o, "pad_token"); /* (GGUF names none the server uses) */
    cJSON_AddBoolToObject(o, "add_bos_token", ms->add_bos);
    cJSON_AddNumberToObject(o, "model_max_length", ms->max_ctx);
    cJSON_AddNumberToObject(o, "vocab_size", ms->n_vocab);
    if (ms->chat_template) cJSON_AddStringToObject(o, "chat_template", ms->chat_template);
    else cJSON_AddNullToObject(o, "chat_template");
    return o;
}
