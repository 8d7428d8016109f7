/* The Responses API's answers (POST /v1/responses) from a call's state: the response object (one
 * assistant message of output_text), and for a stream its typed events in OpenAI's order
 * (response.created, response.in_progress, then with the first token response.output_item.added
 * and response.content_part.added, a response.output_text.delta per piece of text, and at the
 * end the text's, part's and item's done events and response.completed, or response.incomplete
 * when max_output_tokens or the context ended it). With tools, an answer streams as text deltas as
 * it comes and each call, once whole, is a function_call item (added, its arguments' delta and done,
 * the item done); a reply cut before either is its raw text. Each event is "event: <type>" + its JSON with a
 * sequence_number; the stream ends without chat's "[DONE]". api.c decides when to send. */
#include "api/api_int.h"

#include <stdio.h>
#include <string.h>

#include "api/json_text.h"
#include "api/tool_calls.h"
#include "http/sse.h"

static bool incomplete(const call *k) {
    const char *f = k->choices[0].finish_reason;
    return f && !strcmp(f, "length");
}

static void item_id(const call *k, char *buf, size_t cap) {
    snprintf(buf, cap, "msg_%s", k->resp_id + 5); /* resp_<hex> -> msg_<hex> */
}

/* The output_text part: its text and its log-probabilities (chat's entries; [] unless asked for). */
static cJSON *text_part(const call *k) {
    const choice *ci = &k->choices[0];
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    json_add_string_n(p, "text", ci->text.p, ci->text.len);
    cJSON_AddArrayToObject(p, "annotations");
    cJSON_AddItemToObject(p, "logprobs", ci->lp ? cJSON_Duplicate(ci->lp, true) : cJSON_CreateArray());
    return p;
}

static cJSON *message_item(call *k, bool done) {
    char id[48];
    item_id(k, id, sizeof id);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "status", !done ? "in_progress" : incomplete(k) ? "incomplete" : "completed");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON *content = cJSON_AddArrayToObject(m, "content");
    if (done) cJSON_AddItemToArray(content, text_part(k));
    return m;
}

/* One of tools_reply's calls (chat's shape) as the response's j-th function_call item. */
static cJSON *function_call_item(const call *k, int j, const cJSON *c) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
    char id[64];
    snprintf(id, sizeof id, "fc_%s_%d", k->resp_id + 5, j);
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "type", "function_call");
    cJSON_AddStringToObject(it, "status", "completed");
    cJSON_AddItemToObject(it, "call_id", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(c, "id"), true));
    cJSON_AddItemToObject(it, "name", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(f, "name"), true));
    cJSON_AddItemToObject(it, "arguments", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(f, "arguments"), true));
    return it;
}

/* Tool calling's reply read once (tool_calls.h): its calls as function_call items in k->tool_items,
 * or its answer's text in place of the JSON it came in. A stream's calls were read as they came
 * (responses_stream_tools). */
static void resolve_tools(call *k) {
    if (!k->tools || k->tools_resolved) return;
    k->tools_resolved = true;
    choice *ci = &k->choices[0];
    cJSON *msg = cJSON_CreateObject();
    const char *finish = ci->finish_reason ? ci->finish_reason : "stop";
    tools_reply(ci->text.p ? ci->text.p : "", ci->text.len, finish, false, k->tools_json_answer, tool_call_seed(k, 0), msg,
                &finish);
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls"), *c;
    text_buf answer = {0};
    if (cJSON_IsArray(calls)) {
        k->tool_items = cJSON_CreateArray();
        int j = 0;
        cJSON_ArrayForEach(c, calls) cJSON_AddItemToArray(k->tool_items, function_call_item(k, j++, c));
    } else if (tools_answer_text(ci->text.p ? ci->text.p : "", ci->text.len, k->tools_json_answer, &answer)) {
        text_buf_free(&ci->text); /* the answer, or the raw text of a reply cut short */
        ci->text = answer;
        answer = (text_buf){0};
    }
    text_buf_free(&answer);
    cJSON_Delete(msg);
}

/* OpenAI's usage names, with this server's kv_cache object as in the other endpoints. */
static cJSON *usage(const call *k) {
    cJSON *chat = usage_object(k), *u = cJSON_CreateObject();
    const double in = cJSON_GetObjectItem(chat, "prompt_tokens")->valuedouble;
    const double outn = cJSON_GetObjectItem(chat, "completion_tokens")->valuedouble;
    cJSON_AddNumberToObject(u, "input_tokens", in);
    cJSON_AddItemToObject(u, "input_tokens_details",
                          cJSON_DetachItemFromObject(chat, "prompt_tokens_details"));
    cJSON_AddNumberToObject(u, "output_tokens", outn);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", 0);
    cJSON_AddNumberToObject(u, "total_tokens", in + outn);
    cJSON_AddItemToObject(u, "kv_cache", cJSON_DetachItemFromObject(chat, "kv_cache"));
    cJSON_Delete(chat);
    return u;
}

/* The response object; status "in_progress" (no output or usage yet) or the finished one. */
static cJSON *response(call *k, bool done) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", k->resp_id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)k->created);
    cJSON_AddStringToObject(o, "status", !done ? "in_progress" : incomplete(k) ? "incomplete" : "completed");
    cJSON_AddNullToObject(o, "error");
    if (done && incomplete(k))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", "max_output_tokens");
    else
        cJSON_AddNullToObject(o, "incomplete_details");
    cJSON_AddStringToObject(o, "model", k->api->model_id);
    if (done) resolve_tools(k);
    if (done && k->tool_items) cJSON_AddItemToObject(o, "output", cJSON_Duplicate(k->tool_items, true));
    else if (done) cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "output"), message_item(k, true));
    else cJSON_AddArrayToObject(o, "output");
    cJSON_AddNullToObject(o, "previous_response_id");
    cJSON_AddFalseToObject(o, "store"); /* nothing is kept here */
    cJSON_AddStringToObject(o, "truncation", "disabled"); /* tools and parallel_tool_calls come with the echo */
    const cJSON *field;
    cJSON_ArrayForEach(field, k->echo) cJSON_AddItemToObject(o, field->string, cJSON_Duplicate(field, true));
    if (done) cJSON_AddItemToObject(o, "usage", usage(k));
    else cJSON_AddNullToObject(o, "usage");
    return o;
}

cJSON *responses_object(call *k) { return response(k, true); }

/* A typed event with the call's next sequence number; sent and freed. */
static cJSON *event(call *k, const char *type) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNumberToObject(e, "sequence_number", k->seq++);
    return e;
}

static void send_event(call *k, cJSON *e) {
    if (k->conn) {
        const cJSON *type = cJSON_GetObjectItem(e, "type");
        sse_send_event(k->conn, type->valuestring, e);
    }
    cJSON_Delete(e);
}

static void add_place(call *k, cJSON *e, bool part) {
    char id[48];
    item_id(k, id, sizeof id);
    if (part) cJSON_AddStringToObject(e, "item_id", id);
    cJSON_AddNumberToObject(e, "output_index", 0);
    if (part) cJSON_AddNumberToObject(e, "content_index", 0);
}

void responses_stream_created(call *k) {
    cJSON *e = event(k, "response.created");
    cJSON_AddItemToObject(e, "response", response(k, false));
    send_event(k, e);
    e = event(k, "response.in_progress");
    cJSON_AddItemToObject(e, "response", response(k, false));
    send_event(k, e);
}

/* The item and its part open with the first token (as chat's role delta does), so a client's
 * time to first token is the prefill's. */
static void open_item(call *k) {
    if (k->choices[0].role_sent) return;
    k->choices[0].role_sent = true;
    cJSON *e = event(k, "response.output_item.added");
    add_place(k, e, false);
    cJSON_AddItemToObject(e, "item", message_item(k, false));
    send_event(k, e);
    e = event(k, "response.content_part.added");
    add_place(k, e, true);
    cJSON *p = cJSON_AddObjectToObject(e, "part");
    cJSON_AddStringToObject(p, "type", "output_text");
    cJSON_AddStringToObject(p, "text", "");
    cJSON_AddArrayToObject(p, "annotations");
    cJSON_AddArrayToObject(p, "logprobs");
    send_event(k, e);
}

void responses_stream_text(call *k, const sched_event *ev) {
    open_item(k);
    choice *ci = &k->choices[0];
    if (ev->text_len) text_buf_add(&ci->text, ev->text, ev->text_len); /* for the done events */
    if (ev->text_len == 0 && ev->n_logprobs == 0) return;              /* held back: a possible stop string */
    cJSON *e = event(k, "response.output_text.delta");
    add_place(k, e, true);
    json_add_string_n(e, "delta", ev->text ? ev->text : "", ev->text_len);
    cJSON *lp = cJSON_AddArrayToObject(e, "logprobs");
    if (ev->n_logprobs) {
        chat_logprobs_add(lp, ev, false);
        collect_logprobs(k, 0, ev); /* for the done events' text */
    }
    send_event(k, e);
}

/* A function_call item's events: added (in progress, no arguments yet), its arguments' delta and
 * done, then the item done. */
static void stream_call_item(call *k, const cJSON *it, int j) {
    cJSON *opening = cJSON_Duplicate(it, true), *e = event(k, "response.output_item.added");
    cJSON_ReplaceItemInObject(opening, "status", cJSON_CreateString("in_progress"));
    cJSON_ReplaceItemInObject(opening, "arguments", cJSON_CreateString(""));
    cJSON_AddNumberToObject(e, "output_index", j);
    cJSON_AddItemToObject(e, "item", opening);
    send_event(k, e);
    static const char *const steps[] = {"response.function_call_arguments.delta", "response.function_call_arguments.done"};
    for (int s = 0; s < 2; s++) {
        e = event(k, steps[s]);
        cJSON_AddItemToObject(e, "item_id", cJSON_Duplicate(cJSON_GetObjectItem(it, "id"), true));
        cJSON_AddNumberToObject(e, "output_index", j);
        cJSON_AddItemToObject(e, s ? "arguments" : "delta", cJSON_Duplicate(cJSON_GetObjectItem(it, "arguments"), true));
        send_event(k, e);
    }
    e = event(k, "response.output_item.done");
    cJSON_AddNumberToObject(e, "output_index", j);
    cJSON_AddItemToObject(e, "item", cJSON_Duplicate(it, true));
    send_event(k, e);
}

void responses_stream_tools(call *k) {
    choice *ci = &k->choices[0];
    const char *text = ci->text.p ? ci->text.p : "";
    text_buf part = {0};
    ci->tstream.json_answer = k->tools_json_answer;
    if (tools_stream_answer(text, ci->text.len, &ci->tstream, &part) && part.len) {
        open_item(k);
        cJSON *e = event(k, "response.output_text.delta");
        add_place(k, e, true);
        json_add_string_n(e, "delta", part.p, part.len);
        cJSON_AddArrayToObject(e, "logprobs");
        send_event(k, e);
    }
    text_buf_free(&part);
    if (ci->tstream.kind != TS_CALLS) return;
    cJSON *delta = cJSON_CreateObject(); /* chat's shape, as tools_reply gives calls */
    const cJSON *c;
    if (tools_stream_calls(text, ci->text.len, &ci->tstream, tool_call_seed(k, 0), delta) > 0) {
        if (!k->tool_items) k->tool_items = cJSON_CreateArray();
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(delta, "tool_calls")) {
            int j = cJSON_GetArraySize(k->tool_items);
            cJSON *it = function_call_item(k, j, c);
            cJSON_AddItemToArray(k->tool_items, it);
            stream_call_item(k, it, j);
        }
    }
    cJSON_Delete(delta);
}

void responses_stream_done(call *k) {
    choice *ci = &k->choices[0];
    if (k->tools) {
        responses_stream_tools(k); /* the last of the answer, or the last calls */
        if (ci->tstream.calls_sent > 0) { /* the calls went out as they came */
            k->tools_resolved = true;
            cJSON *e = event(k, incomplete(k) ? "response.incomplete" : "response.completed");
            cJSON_AddItemToObject(e, "response", response(k, true));
            send_event(k, e);
            return;
        }
        bool answer_streamed = ci->tstream.kind == TS_ANSWER;
        resolve_tools(k); /* the text becomes the answer, or stays the raw reply */
        if (!answer_streamed) {
            open_item(k);
            cJSON *e = event(k, "response.output_text.delta");
            add_place(k, e, true);
            json_add_string_n(e, "delta", ci->text.p ? ci->text.p : "", ci->text.len);
            cJSON_AddArrayToObject(e, "logprobs");
            send_event(k, e);
        }
    }
    open_item(k); /* no token at all: the item still opens before it closes */
    cJSON *e = event(k, "response.output_text.done");
    add_place(k, e, true);
    json_add_string_n(e, "text", ci->text.p, ci->text.len);
    cJSON_AddItemToObject(e, "logprobs", ci->lp ? cJSON_Duplicate(ci->lp, true) : cJSON_CreateArray());
    send_event(k, e);
    e = event(k, "response.content_part.done");
    add_place(k, e, true);
    cJSON_AddItemToObject(e, "part", text_part(k));
    send_event(k, e);
    e = event(k, "response.output_item.done");
    add_place(k, e, false);
    cJSON_AddItemToObject(e, "item", message_item(k, true));
    send_event(k, e);
    e = event(k, incomplete(k) ? "response.incomplete" : "response.completed");
    cJSON_AddItemToObject(e, "response", response(k, true));
    send_event(k, e);
}

void responses_stream_error(call *k, int status, const char *message, const char *param, const char *code) {
    cJSON *err = error_object(status, NULL, message, param, code);
    cJSON *body = cJSON_GetObjectItem(err, "error");
    cJSON *e = event(k, "error");
    const char *keys[] = {"code", "message", "param"};
    for (int i = 0; i < 3; i++) cJSON_AddItemToObject(e, keys[i], cJSON_Duplicate(cJSON_GetObjectItem(body, keys[i]), true));
    cJSON_Delete(err);
    send_event(k, e);
}
