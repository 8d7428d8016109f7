/* OpenAI's Responses API request (POST /v1/responses) -> the chat request it means. The
 * instructions and input items become chat messages and the Responses names become chat names
 * (max_output_tokens -> max_tokens, include + top_logprobs -> logprobs), and the chat request is
 * validated by openai_parse_generation like any other, so both endpoints take the same values.
 * Function tools, their calls and their outputs become chat's tools, an assistant's tool_calls and
 * "tool" messages (tool_calls.c). This server stores nothing: what needs a stored response or
 * conversation is refused, as is any other item than a text message, a function call or its
 * output, rather than dropped unseen. Pure: no I/O, no engine. */
#include "api/openai_request.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json_text.h"
#include "http/text_buf.h"

static cJSON *copy_value(const cJSON *v);

/* Fields a stateless server cannot honour: each needs a response or conversation stored here. */
static bool refuse_stateful(const cJSON *root, api_error *e) {
    static const char *const stored[] = {"previous_response_id", "conversation", "prompt"};
    for (size_t i = 0; i < sizeof stored / sizeof stored[0]; i++)
        if (openai_field(root, stored[i]))
            return openai_fail(e, 400, stored[i], "unsupported_value",
                        "%s is not supported: this server stores no responses, conversations or prompts; send the "
                        "conversation's items in input",
                        stored[i]);
    const cJSON *bg = openai_field(root, "background");
    if (bg && !cJSON_IsFalse(bg))
        return openai_fail(e, 400, "background", "unsupported_value", "background responses are not supported (nothing is stored)");
    const cJSON *tr = openai_field(root, "truncation");
    if (tr && !json_str_is(tr, "disabled"))
        return openai_fail(e, 400, "truncation", cJSON_IsString(tr) ? "unsupported_value" : "invalid_type",
                    "truncation must be \"disabled\": input that does not fit the context is refused, not cut");
    const cJSON *fmt = openai_field(root, "text");
    if (fmt && !cJSON_IsObject(fmt))
        return openai_fail(e, 400, "text", "invalid_type", "text must be an object, not %s", openai_type_name(fmt));
    return true;
}

/* One content part's text: input_text, output_text (an assistant's earlier answer) or text. */
static bool part_text(const cJSON *part, int i, int j, text_buf *out, api_error *e) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
    if (!cJSON_IsObject(part) || !cJSON_IsString(type))
        return openai_fail(e, 400, "input", "invalid_type", "input[%d].content[%d] must be an object with a type", i, j);
    if (!json_str_is(type, "input_text") && !json_str_is(type, "output_text") && !json_str_is(type, "text"))
        return openai_fail(e, 400, "input", "unsupported_value",
                    "input[%d].content[%d]: content of type '%.64s' is not supported (text only)", i, j,
                    type->valuestring);
    if (!cJSON_IsString(text))
        return openai_fail(e, 400, "input", "invalid_type", "input[%d].content[%d].text must be a string", i, j);
    return text_buf_add(out, text->valuestring, json_str_len(text)) || openai_fail(e, 500, NULL, NULL, "out of memory");
}

/* A function_call item -> a call in the assistant's turn (the previous message, when it is the
 * turn made of the calls just before); a function_call_output item -> a "tool" message. */
static bool call_item(const cJSON *item, int i, cJSON *messages, api_error *e) {
    const cJSON *id = openai_field(item, "call_id"), *name = openai_field(item, "name");
    const cJSON *args = openai_field(item, "arguments"), *out = openai_field(item, "output");
    if (json_str_is(openai_field(item, "type"), "function_call_output")) {
        if (!cJSON_IsString(id) || !cJSON_IsString(out))
            return openai_fail(e, 400, "input", "invalid_value", "input[%d]: a function_call_output needs call_id and output, strings", i);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(messages, m);
        cJSON_AddStringToObject(m, "role", "tool");
        cJSON_AddItemToObject(m, "tool_call_id", copy_value(id));
        return json_add_string_n(m, "content", out->valuestring, json_str_len(out)) || openai_fail(e, 500, NULL, NULL, "out of memory");
    }
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
        return openai_fail(e, 400, "input", "invalid_value", "input[%d]: a function_call needs call_id, name and arguments, strings", i);
    cJSON *last = cJSON_GetArrayItem(messages, cJSON_GetArraySize(messages) - 1);
    cJSON *calls = last && json_str_is(openai_field(last, "role"), "assistant") && !openai_field(last, "content")
                       ? cJSON_GetObjectItemCaseSensitive(last, "tool_calls") : NULL;
    if (!calls) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(messages, m);
        cJSON_AddStringToObject(m, "role", "assistant");
        calls = cJSON_AddArrayToObject(m, "tool_calls");
    }
    cJSON *c = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(c, "function");
    cJSON_AddItemToArray(calls, c);
    cJSON_AddItemToObject(c, "id", copy_value(id));
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddItemToObject(f, "name", copy_value(name));
    cJSON_AddItemToObject(f, "arguments", copy_value(args));
    return true;
}

/* A chat message {role, content} from one input item (a message, with or without its type). */
static bool input_message(const cJSON *item, int i, cJSON *messages, api_error *e) {
    if (!cJSON_IsObject(item))
        return openai_fail(e, 400, "input", "invalid_type", "input[%d] must be an object, not %s", i, openai_type_name(item));
    const cJSON *type = openai_field(item, "type");
    if (json_str_is(type, "function_call") || json_str_is(type, "function_call_output")) return call_item(item, i, messages, e);
    if (type && !json_str_is(type, "message"))
        return openai_fail(e, 400, "input", "unsupported_value",
                    "input[%d]: items of type '%.64s' are not supported (messages of text only)", i,
                    cJSON_IsString(type) ? type->valuestring : openai_type_name(type));
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(item, "role");
    if (!json_str_is(role, "user") && !json_str_is(role, "system") && !json_str_is(role, "developer") &&
        !json_str_is(role, "assistant"))
        return openai_fail(e, 400, "input", "invalid_value",
                    "input[%d].role must be \"user\", \"system\", \"developer\" or \"assistant\"", i);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(item, "content");
    text_buf text = {0};
    bool ok = true;
    if (cJSON_IsString(content)) {
        ok = text_buf_add(&text, content->valuestring, json_str_len(content)) || openai_fail(e, 500, NULL, NULL, "out of memory");
    } else if (cJSON_IsArray(content) && cJSON_GetArraySize(content) > 0) {
        const cJSON *part;
        int j = 0;
        cJSON_ArrayForEach(part, content) {
            if (!(ok = part_text(part, i, j++, &text, e))) break;
        }
    } else {
        ok = openai_fail(e, 400, "input", "invalid_type", "input[%d].content must be a string or a non-empty array of parts", i);
    }
    cJSON *m = ok ? cJSON_CreateObject() : NULL;
    if (m) {
        cJSON_AddItemToArray(messages, m);
        cJSON_AddStringToObject(m, "role", role->valuestring);
        ok = json_add_string_n(m, "content", text.p, text.len);
    }
    if (ok && !m) ok = openai_fail(e, 500, NULL, NULL, "out of memory");
    text_buf_free(&text);
    return ok;
}

/* instructions, then input (a string: one user message; an array of message items). */
static bool build_messages(const cJSON *root, cJSON *chat, api_error *e) {
    cJSON *messages = cJSON_AddArrayToObject(chat, "messages");
    const cJSON *ins = openai_field(root, "instructions");
    if (ins && !cJSON_IsString(ins))
        return openai_fail(e, 400, "instructions", "invalid_type", "instructions must be a string, not %s", openai_type_name(ins));
    if (ins) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(messages, m);
        cJSON_AddStringToObject(m, "role", "system");
        json_add_string_n(m, "content", ins->valuestring, json_str_len(ins));
    }
    const cJSON *input = openai_field(root, "input");
    if (!input) return openai_fail(e, 400, "input", "missing_required_parameter", "input is required");
    if (cJSON_IsString(input)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(messages, m);
        cJSON_AddStringToObject(m, "role", "user");
        return json_add_string_n(m, "content", input->valuestring, json_str_len(input)) ||
               openai_fail(e, 500, NULL, NULL, "out of memory");
    }
    if (!cJSON_IsArray(input) || cJSON_GetArraySize(input) == 0)
        return openai_fail(e, 400, "input", cJSON_IsArray(input) ? "invalid_value" : "invalid_type",
                    "input must be a string or a non-empty array of message items, not %s",
                    cJSON_IsArray(input) ? "an empty array" : openai_type_name(input));
    const cJSON *item;
    int i = 0;
    cJSON_ArrayForEach(item, input) {
        if (!input_message(item, i++, messages, e)) return false;
    }
    return true;
}

/* A deep copy that keeps every string's bytes (cJSON_Duplicate stops at a "\u0000"). */
static cJSON *copy_value(const cJSON *v) {
    if (cJSON_IsString(v)) return json_string_n(v->valuestring, json_str_len(v));
    if (!cJSON_IsArray(v) && !cJSON_IsObject(v)) return cJSON_Duplicate(v, false);
    cJSON *c = cJSON_IsArray(v) ? cJSON_CreateArray() : cJSON_CreateObject();
    const cJSON *item;
    cJSON_ArrayForEach(item, v) {
        if (!c) break;
        if (cJSON_IsArray(v)) cJSON_AddItemToArray(c, copy_value(item));
        else cJSON_AddItemToObject(c, item->string, copy_value(item));
    }
    return c;
}

/* Function tools, flat here ({type, name, description, parameters, strict}), nested in chat's
 * {type, function: {...}}; tool_choice's {type: "function", name} likewise. Chat's tool calling
 * (tool_calls.c) then checks them. Other tool types (web search, files, ...) are refused. */
static bool map_tools(const cJSON *root, cJSON *chat, api_error *e) {
    const cJSON *tools = openai_field(root, "tools"), *t, *tc = openai_field(root, "tool_choice");
    if (tools && !cJSON_IsArray(tools))
        return openai_fail(e, 400, "tools", "invalid_type", "tools must be an array, not %s", openai_type_name(tools));
    cJSON *out = tools ? cJSON_AddArrayToObject(chat, "tools") : NULL;
    int i = 0;
    cJSON_ArrayForEach(t, tools) {
        if (!cJSON_IsObject(t) || !json_str_is(openai_field(t, "type"), "function"))
            return openai_fail(e, 400, "tools", "unsupported_value", "tools[%d]: only function tools (type \"function\") are supported", i);
        cJSON *c = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(c, "function");
        cJSON_AddItemToArray(out, c);
        cJSON_AddStringToObject(c, "type", "function");
        static const char *const keys[] = {"name", "description", "parameters", "strict"};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            if (openai_field(t, keys[k])) cJSON_AddItemToObject(f, keys[k], copy_value(openai_field(t, keys[k])));
        i++;
    }
    if (tc && cJSON_IsObject(tc) && json_str_is(openai_field(tc, "type"), "function")) {
        cJSON *c = cJSON_AddObjectToObject(chat, "tool_choice");
        cJSON_AddStringToObject(c, "type", "function");
        if (openai_field(tc, "name")) cJSON_AddItemToObject(cJSON_AddObjectToObject(c, "function"), "name", copy_value(openai_field(tc, "name")));
    } else if (tc && !json_str_is(tc, "none") && !json_str_is(tc, "auto") && !json_str_is(tc, "required")) {
        return openai_fail(e, 400, "tool_choice", "invalid_value",
                           "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}");
    } else if (tc) {
        cJSON_AddItemToObject(chat, "tool_choice", copy_value(tc));
    }
    return true;
}

/* The Responses names that differ from chat's, and the fields both take as they are. */
static bool map_fields(const cJSON *root, const api_model *m, cJSON *chat, api_error *e) {
    if (!map_tools(root, chat, e)) return false;
    static const char *const same[] = {"model", "temperature", "top_p", "stream", "user", "parallel_tool_calls",
                                       "presence_penalty", "frequency_penalty",
                                       /* extensions, as on chat: vLLM's and llama.cpp's sampling fields */
                                       "top_k", "min_p", "seed", "repetition_penalty", "stop", "logit_bias"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, same[i]);
        if (v) cJSON_AddItemToObject(chat, same[i], copy_value(v));
    }
    const cJSON *mot = openai_field(root, "max_output_tokens");
    if (mot) {
        const double v = cJSON_IsNumber(mot) ? mot->valuedouble : 0;
        if (!(v >= 1 && v <= 1073741824.0) || v != (double)(int64_t)v)
            return openai_fail(e, 400, "max_output_tokens", "invalid_value", "max_output_tokens must be an integer >= 1");
        if (mot->valuedouble >= m->max_ctx)
            return openai_fail(e, 400, "max_output_tokens", "context_length_exceeded",
                        "max_output_tokens is %.0f but the context holds %d tokens (input + output)", mot->valuedouble,
                        m->max_ctx);
        cJSON_AddNumberToObject(chat, "max_tokens", mot->valuedouble);
    }
    /* Structured output: text.format names the schema flat ({type, name, schema, strict}) where
     * chat nests it in response_format.json_schema. */
    const cJSON *text = openai_field(root, "text"), *fmt = text ? openai_field(text, "format") : NULL;
    if (fmt) {
        const cJSON *type = openai_field(fmt, "type"), *schema = openai_field(fmt, "schema");
        if (!cJSON_IsObject(fmt))
            return openai_fail(e, 400, "text.format", "invalid_type", "text.format must be an object, not %s", openai_type_name(fmt));
        cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
        if (!rf) return openai_fail(e, 500, NULL, NULL, "out of memory");
        if (json_str_is(type, "json_schema")) {
            if (!schema) return openai_fail(e, 400, "text.format", "invalid_value", "text.format json_schema needs a schema");
            cJSON_AddStringToObject(rf, "type", "json_schema");
            cJSON_AddItemToObject(cJSON_AddObjectToObject(rf, "json_schema"), "schema", copy_value(schema));
        } else if (json_str_is(type, "json_object") || json_str_is(type, "text"))
            cJSON_AddItemToObject(rf, "type", copy_value(type));
        else
            return openai_fail(e, 400, "text.format", "unsupported_value",
                               "text.format.type must be \"text\", \"json_object\" or \"json_schema\"");
    }
    /* Log-probabilities: asked for with include's "message.output_text.logprobs" (top_logprobs
     * alternatives each, 0 when not given) or by top_logprobs alone. */
    const cJSON *inc = openai_field(root, "include");
    bool logprobs = false;
    if (inc && !cJSON_IsArray(inc))
        return openai_fail(e, 400, "include", "invalid_type", "include must be an array, not %s", openai_type_name(inc));
    const cJSON *what;
    cJSON_ArrayForEach(what, inc) {
        if (!json_str_is(what, "message.output_text.logprobs"))
            return openai_fail(e, 400, "include", "unsupported_value",
                        "include may list only \"message.output_text.logprobs\" here (no tools, images or reasoning)");
        logprobs = true;
    }
    const cJSON *top = openai_field(root, "top_logprobs");
    if (top && !(cJSON_IsNumber(top) && top->valuedouble == 0)) logprobs = true; /* a bad value: chat's message */
    if (logprobs) {
        cJSON_AddTrueToObject(chat, "logprobs");
        if (top) cJSON_AddItemToObject(chat, "top_logprobs", copy_value(top));
    }
    return true;
}

/* A float as the shortest decimal that reads back as it (0.95f, not 0.949999988079071). */
static double as_decimal(float f) {
    char buf[32];
    for (int digits = 1; digits <= 9; digits++) { /* 9 significant digits always read back as f */
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        if (strtof(buf, NULL) == f) break;
    }
    return strtod(buf, NULL);
}

bool openai_parse_responses(const char *body, size_t len, const api_model *m, openai_request *out, cJSON **echo,
                            api_error *err) {
    memset(out, 0, sizeof *out);
    *echo = NULL;
    cJSON *root = openai_parse_body(body, len, err);
    if (!root) return false;
    cJSON *chat = cJSON_CreateObject();
    bool ok = chat != NULL || openai_fail(err, 500, NULL, NULL, "out of memory");
    if (ok && !cJSON_IsObject(root))
        ok = openai_fail(err, 400, NULL, "invalid_type", "the body must be a JSON object, not %s", openai_type_name(root));
    ok = ok && refuse_stateful(root, err) && build_messages(root, chat, err) && map_fields(root, m, chat, err);
    char *text = ok ? cJSON_PrintUnformatted(chat) : NULL;
    if (ok && !text) ok = openai_fail(err, 500, NULL, NULL, "out of memory");
    if (ok && !openai_parse_generation(text, strlen(text), true, m, out, err)) {
        ok = false;
        if (err->param && (!strcmp(err->param, "messages") || !strcmp(err->param, "prompt"))) err->param = "input";
        if (err->param && !strcmp(err->param, "response_format")) err->param = "text.format";
    }
    if (ok) {
        /* What the response object repeats of the request (as OpenAI's does). */
        cJSON *o = *echo = cJSON_CreateObject();
        if (!o) {
            ok = openai_fail(err, 500, NULL, NULL, "out of memory");
            goto out;
        }
        const cJSON *ins = openai_field(root, "instructions"), *meta = openai_field(root, "metadata");
        const cJSON *tc = openai_field(root, "tool_choice"), *mot = openai_field(root, "max_output_tokens");
        if (ins) json_add_string_n(o, "instructions", ins->valuestring, json_str_len(ins));
        else cJSON_AddNullToObject(o, "instructions");
        if (mot) cJSON_AddNumberToObject(o, "max_output_tokens", mot->valuedouble);
        else cJSON_AddNullToObject(o, "max_output_tokens");
        cJSON_AddItemToObject(o, "metadata", cJSON_IsObject(meta) ? copy_value(meta) : cJSON_CreateObject());
        cJSON_AddItemToObject(o, "tool_choice", tc ? copy_value(tc) : cJSON_CreateString("auto"));
        const cJSON *tools = openai_field(root, "tools"), *ptc = openai_field(root, "parallel_tool_calls");
        cJSON_AddItemToObject(o, "tools", tools ? copy_value(tools) : cJSON_CreateArray());
        cJSON_AddBoolToObject(o, "parallel_tool_calls", !ptc || cJSON_IsTrue(ptc));
        const cJSON *tobj = openai_field(root, "text"), *fmt = tobj ? openai_field(tobj, "format") : NULL;
        cJSON *format = fmt ? copy_value(fmt) : cJSON_CreateObject();
        if (!fmt && format) cJSON_AddStringToObject(format, "type", "text");
        cJSON_AddItemToObject(cJSON_AddObjectToObject(o, "text"), "format", format);
        cJSON_AddNumberToObject(o, "temperature", as_decimal(out->gens[0].sampling.temperature));
        cJSON_AddNumberToObject(o, "top_p", as_decimal(out->gens[0].sampling.top_p));
        cJSON_AddNumberToObject(o, "top_logprobs", out->chat_logprobs ? out->gens[0].logprobs : 0);
    }
out:
    if (!ok) openai_request_free(out);
    cJSON_free(text);
    cJSON_Delete(chat);
    cJSON_Delete(root);
    return ok;
}
