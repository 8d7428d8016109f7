/* Tool calling in llama.cpp's generic format (tool_calls.h): the request's tools -> the system
 * text the model reads and the JSON Schema its reply is held to; past calls and results -> text in
 * that format; the reply -> OpenAI's tool_calls. */
#include "api/tool_calls.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json_strict.h"
#include "api/json_text.h"
#include "api/schema_grammar.h"
#include "api/tool_reply_scan.h"

#define MAX_TOOLS 128 /* OpenAI's limit */

void tools_ask_free(tools_ask *t) {
    cJSON_Delete(t->schema);
    free(t->system_text);
    memset(t, 0, sizeof *t);
}

static bool valid_name(const cJSON *name) {
    if (!cJSON_IsString(name)) return false;
    size_t n = json_str_len(name);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = name->valuestring[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
    }
    return true;
}

/* Where the reply's schema keeps tool i's parameters: its own $defs entry, so that the tool's local
 * references keep their meaning wherever the call's schema sits (rebase_refs). */
static void params_place(int i, char *buf, size_t cap) { snprintf(buf, cap, "#/$defs/tool_%d", i); }

/* Rewrites every local "$ref" ("#" or "#/...") under node to point under `place`: a tool's "#/$defs/X"
 * (pydantic's way) means its own $defs, not the reply's. Values that are data, not schemas (const,
 * enum, default, examples), are left alone. */
static void rebase_refs(cJSON *node, const char *place) {
    cJSON *c = node ? node->child : NULL;
    while (c) {
        cJSON *next = c->next;
        const char *key = cJSON_IsObject(node) ? c->string : NULL;
        if (key && !strcmp(key, "$ref") && cJSON_IsString(c) && c->valuestring[0] == '#') {
            size_t n = strlen(place) + strlen(c->valuestring);
            char *ref = malloc(n);
            if (ref) {
                snprintf(ref, n, "%s%s", place, c->valuestring + 1);
                cJSON *r = cJSON_CreateString(ref);
                if (r) cJSON_ReplaceItemInObjectCaseSensitive(node, "$ref", r); /* bodies name no key twice */
                free(ref);
            }
        } else if (!key || (strcmp(key, "const") && strcmp(key, "enum") && strcmp(key, "default") && strcmp(key, "examples"))) {
            rebase_refs(c, place);
        }
        c = next;
    }
}

/* {"name": {"const": NAME}, "arguments": tool i's parameters}, both required, nothing else; the
 * parameters themselves go into defs (the reply schema's $defs). A function without parameters takes
 * none: its arguments are {} (OpenAI: "an empty parameter list"). */
static cJSON *call_schema(const cJSON *name, const cJSON *params, int i, cJSON *defs) {
    cJSON *s = cJSON_CreateObject(), *props = cJSON_AddObjectToObject(s, "properties");
    cJSON_AddStringToObject(s, "type", "object");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "name"), "const", name->valuestring);
    char place[48], key[32];
    params_place(i, place, sizeof place);
    snprintf(key, sizeof key, "tool_%d", i);
    cJSON *args = params ? cJSON_Duplicate(params, true) : cJSON_CreateObject();
    if (params) {
        rebase_refs(args, place);
    } else if (args) {
        cJSON_AddStringToObject(args, "type", "object");
        cJSON_AddObjectToObject(args, "properties");
        cJSON_AddFalseToObject(args, "additionalProperties");
    }
    cJSON_AddItemToObject(defs, key, args);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "arguments"), "$ref", place);
    cJSON *req = cJSON_AddArrayToObject(s, "required");
    cJSON_AddItemToArray(req, cJSON_CreateString("name"));
    cJSON_AddItemToArray(req, cJSON_CreateString("arguments"));
    cJSON_AddFalseToObject(s, "additionalProperties");
    return s;
}

/* {"KEY": value} with KEY required and nothing else. */
static cJSON *one_key_object(const char *key, cJSON *value) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "type", "object");
    cJSON_AddItemToObject(cJSON_AddObjectToObject(s, "properties"), key, value);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(s, "required"), cJSON_CreateString(key));
    cJSON_AddFalseToObject(s, "additionalProperties");
    return s;
}

/* tool_choice: absent or "auto" (call or answer), "none", "required", or {"type": "function",
 * "function": {"name": NAME}}; *named the tool named (NULL: any). */
static bool parse_choice(const cJSON *root, bool have_tools, tool_mode *mode, const char **named, api_error *e) {
    const cJSON *c = openai_field(root, "tool_choice");
    *named = NULL;
    *mode = have_tools ? TOOLS_AUTO : TOOLS_OFF;
    if (!c || json_str_is(c, "auto")) return true;
    if (json_str_is(c, "none")) {
        *mode = TOOLS_OFF;
        return true;
    }
    if (json_str_is(c, "required")) *mode = TOOLS_REQUIRED;
    else if (cJSON_IsObject(c)) {
        const cJSON *f = openai_field(c, "function"), *name = f ? openai_field(f, "name") : NULL;
        if (!json_str_is(openai_field(c, "type"), "function") || !valid_name(name)) /* a NUL would cut the name */
            return openai_fail(e, 400, "tool_choice", "invalid_value",
                               "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                               "\"function\": {\"name\": ...}}");
        *mode = TOOLS_REQUIRED;
        *named = name->valuestring;
    } else {
        return openai_fail(e, 400, "tool_choice", "invalid_value",
                           "tool_choice must be \"none\", \"auto\", \"required\" or an object naming a function");
    }
    if (!have_tools) return openai_fail(e, 400, "tool_choice", "invalid_value", "tool_choice asks for a tool call, but no tools are given");
    return true;
}

/* The system text: each tool as one line of JSON, then how to reply. */
static bool describe(const cJSON *tools, tool_mode mode, const char *named, bool parallel, const cJSON *answer_schema,
                     text_buf *out) {
    static const char call_form[] = "{\"tool_calls\": [{\"name\": <tool name>, \"arguments\": <its arguments, a JSON object>}]}";
    bool ok = text_buf_add(out, "# Tools\n\nYou can call these tools, each given as JSON:\n", 55);
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = openai_field(t, "function");
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToObject(d, "name", cJSON_Duplicate(openai_field(f, "name"), true));
        if (openai_field(f, "description")) cJSON_AddItemToObject(d, "description", cJSON_Duplicate(openai_field(f, "description"), true));
        if (openai_field(f, "parameters")) cJSON_AddItemToObject(d, "parameters", cJSON_Duplicate(openai_field(f, "parameters"), true));
        char *line = cJSON_PrintUnformatted(d);
        cJSON_Delete(d);
        ok = ok && line && text_buf_add(out, line, strlen(line)) && text_buf_add(out, "\n", 1);
        free(line);
    }
    char how[512];
    if (named)
        snprintf(how, sizeof how, "\nCall the tool %s: reply with only this JSON object: %s", named, call_form);
    else if (mode == TOOLS_REQUIRED)
        snprintf(how, sizeof how, "\nCall %s: reply with only this JSON object: %s", parallel ? "one or more tools" : "one tool", call_form);
    else
        snprintf(how, sizeof how, "\nTo call %s, reply with only this JSON object: %s\nTo answer without a tool, reply with "
                 "only {\"response\": <your answer, %s>}%s", parallel ? "tools" : "a tool", call_form,
                 answer_schema ? "JSON valid for this schema" : "a JSON string", answer_schema ? ":\n" : ".");
    ok = ok && text_buf_add(out, how, strlen(how));
    if (ok && mode == TOOLS_AUTO && !named && answer_schema) {
        char *schema = cJSON_PrintUnformatted(answer_schema);
        ok = schema && text_buf_add(out, schema, strlen(schema));
        free(schema);
    }
    return ok && text_buf_add(out, "", 0);
}

bool tools_parse(const cJSON *root, const cJSON *answer_schema, tools_ask *t, api_error *e) {
    memset(t, 0, sizeof *t);
    const cJSON *tools = openai_field(root, "tools"), *tool;
    if (tools && !cJSON_IsArray(tools))
        return openai_fail(e, 400, "tools", "invalid_type", "tools must be an array, not %s", openai_type_name(tools));
    int n = tools ? cJSON_GetArraySize(tools) : 0;
    if (n > MAX_TOOLS) return openai_fail(e, 400, "tools", "invalid_value", "at most %d tools (got %d)", MAX_TOOLS, n);
    bool parallel = true;
    const cJSON *pv = openai_field(root, "parallel_tool_calls");
    if (pv && !cJSON_IsBool(pv))
        return openai_fail(e, 400, "parallel_tool_calls", "invalid_type", "parallel_tool_calls must be a boolean, not %s", openai_type_name(pv));
    if (pv) parallel = cJSON_IsTrue(pv);
    const char *named;
    if (!parse_choice(root, n > 0, &t->mode, &named, e)) return false;
    int i = 0;
    bool found = named == NULL;
    cJSON_ArrayForEach(tool, tools) { /* every tool is checked, offered or not */
        const cJSON *f = openai_field(tool, "function"), *params = f ? openai_field(f, "parameters") : NULL;
        if (!cJSON_IsObject(tool) || !json_str_is(openai_field(tool, "type"), "function"))
            return openai_fail(e, 400, "tools", "unsupported_value", "tools[%d] must be {\"type\": \"function\", \"function\": {...}} "
                               "(function tools only)", i);
        if (!cJSON_IsObject(f) || !valid_name(openai_field(f, "name")))
            return openai_fail(e, 400, "tools", "invalid_value", "tools[%d].function.name must be 1 to 64 of a-z, A-Z, 0-9, _ and -", i);
        const char *name = openai_field(f, "name")->valuestring;
        for (int j = 0; j < i; j++)
            if (!strcmp(openai_field(openai_field(cJSON_GetArrayItem(tools, j), "function"), "name")->valuestring, name))
                return openai_fail(e, 400, "tools", "invalid_value", "tools[%d].function.name '%s' is given twice", i, name);
        const cJSON *desc = openai_field(f, "description"), *strict = openai_field(f, "strict");
        if (desc && !cJSON_IsString(desc))
            return openai_fail(e, 400, "tools", "invalid_type", "tools[%d].function.description must be a string", i);
        if (strict && !cJSON_IsBool(strict))
            return openai_fail(e, 400, "tools", "invalid_type", "tools[%d].function.strict must be a boolean", i);
        if (params && !cJSON_IsObject(params))
            return openai_fail(e, 400, "tools", "invalid_type", "tools[%d].function.parameters must be a JSON Schema object", i);
        if (params) { /* refused here, naming the tool, rather than deep in the whole reply's schema */
            text_buf gb = {0};
            char msg[256] = "";
            bool ok = schema_to_gbnf(params, &gb, msg, sizeof msg);
            text_buf_free(&gb);
            if (!ok) return openai_fail(e, 400, "tools", "invalid_value", "tools[%d].function.parameters: %s", i, msg[0] ? msg : "out of memory");
        }
        found |= named && !strcmp(named, name);
        i++;
    }
    if (!found) return openai_fail(e, 400, "tool_choice", "invalid_value", "tool_choice names '%.64s', which is not among the tools", named);
    if (t->mode == TOOLS_OFF) return true;

    cJSON *items = named ? NULL : cJSON_CreateObject(), *any = items ? cJSON_AddArrayToObject(items, "anyOf") : NULL;
    cJSON *defs = cJSON_CreateObject();
    i = 0;
    cJSON_ArrayForEach(tool, tools) {
        const cJSON *f = openai_field(tool, "function"), *name = openai_field(f, "name");
        if (!named || !strcmp(name->valuestring, named)) {
            cJSON *one = call_schema(name, openai_field(f, "parameters"), i, defs);
            if (named) items = one;
            else cJSON_AddItemToArray(any, one);
        }
        i++;
    }
    cJSON *calls = cJSON_CreateObject();
    cJSON_AddStringToObject(calls, "type", "array");
    cJSON_AddItemToObject(calls, "items", items);
    cJSON_AddNumberToObject(calls, "minItems", 1);
    if (!parallel) cJSON_AddNumberToObject(calls, "maxItems", 1);
    cJSON *call_reply = one_key_object("tool_calls", calls);
    if (t->mode == TOOLS_REQUIRED) t->schema = call_reply;
    else {
        cJSON *string = cJSON_CreateObject();
        if (answer_schema) { /* the request's structured output, in $defs as a tool's parameters are */
            cJSON *answer = cJSON_Duplicate(answer_schema, true);
            rebase_refs(answer, "#/$defs/answer");
            cJSON_AddItemToObject(defs, "answer", answer);
            cJSON_AddStringToObject(string, "$ref", "#/$defs/answer");
            t->json_answer = true;
        } else {
            cJSON_AddStringToObject(string, "type", "string");
        }
        t->schema = cJSON_CreateObject();
        cJSON *alts = cJSON_AddArrayToObject(t->schema, "anyOf");
        cJSON_AddItemToArray(alts, call_reply);
        cJSON_AddItemToArray(alts, one_key_object("response", string));
    }
    cJSON_AddItemToObject(t->schema, "$defs", defs);
    text_buf sys = {0};
    if (!describe(tools, t->mode, named, parallel, answer_schema, &sys)) {
        text_buf_free(&sys);
        tools_ask_free(t);
        return openai_fail(e, 500, NULL, NULL, "out of memory");
    }
    t->system_text = sys.p;
    return true;
}

bool tools_render_calls(const cJSON *tool_calls, int index, text_buf *out, api_error *e) {
    if (!cJSON_IsArray(tool_calls))
        return openai_fail(e, 400, "messages", "invalid_type", "messages[%d].tool_calls must be an array", index);
    cJSON *reply = cJSON_CreateObject(), *calls = cJSON_AddArrayToObject(reply, "tool_calls");
    const cJSON *c;
    int j = 0;
    bool ok = true;
    cJSON_ArrayForEach(c, tool_calls) {
        const cJSON *f = openai_field(c, "function"), *name = f ? openai_field(f, "name") : NULL;
        const cJSON *args = f ? openai_field(f, "arguments") : NULL;
        if (!cJSON_IsObject(c) || !cJSON_IsString(name) || (args && !cJSON_IsString(args))) {
            ok = openai_fail(e, 400, "messages", "invalid_value",
                             "messages[%d].tool_calls[%d] must be {\"id\", \"type\": \"function\", \"function\": {\"name\", "
                             "\"arguments\": a string}}", index, j);
            break;
        }
        cJSON *one = cJSON_CreateObject();
        cJSON_AddItemToObject(one, "name", cJSON_Duplicate(name, true));
        /* the arguments as the JSON the model wrote, compacted (numbers keep their digits), when they
         * are JSON; else the string */
        size_t len = args ? json_str_len(args) : 0, bad_at;
        const char *why;
        text_buf compact = {0};
        bool json = args && !memchr(args->valuestring, 0, len) && json_strict_check(args->valuestring, len, 64, &bad_at, &why) &&
                    tool_json_compact(args->valuestring, len, &compact);
        cJSON_AddItemToObject(one, "arguments", !args ? cJSON_CreateObject() : json ? cJSON_CreateRaw(compact.p) : cJSON_Duplicate(args, true));
        text_buf_free(&compact);
        cJSON_AddItemToArray(calls, one);
        j++;
    }
    char *text = ok ? cJSON_PrintUnformatted(reply) : NULL;
    cJSON_Delete(reply);
    if (ok && !(text && (out->len == 0 || text_buf_add(out, "\n", 1)) && text_buf_add(out, text, strlen(text))))
        ok = openai_fail(e, 500, NULL, NULL, "out of memory");
    free(text);
    return ok;
}

bool tools_render_result(const cJSON *msg, const char *content, size_t len, int index, text_buf *out, api_error *e) {
    const cJSON *id = openai_field(msg, "tool_call_id");
    if (id && !cJSON_IsString(id))
        return openai_fail(e, 400, "messages", "invalid_type", "messages[%d].tool_call_id must be a string", index);
    cJSON *wrap = cJSON_CreateObject(), *r = cJSON_AddObjectToObject(wrap, "tool_response");
    if (id) cJSON_AddItemToObject(r, "tool_call_id", cJSON_Duplicate(id, true));
    json_add_string_n(r, "content", content, len);
    char *text = cJSON_PrintUnformatted(wrap);
    cJSON_Delete(wrap);
    bool ok = text && text_buf_add(out, text, strlen(text));
    free(text);
    return ok || openai_fail(e, 500, NULL, NULL, "out of memory");
}

/* The UTF-8 form of cp into out. */
static bool add_utf8(text_buf *out, uint32_t cp) {
    char b[4];
    int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const uint8_t lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    for (int i = n - 1; i > 0; i--, cp >>= 6) b[i] = (char)(0x80 | (cp & 0x3F));
    b[0] = (char)(lead[n] | cp);
    return text_buf_add(out, b, (size_t)n);
}

static bool is_space(char c, bool or_colon) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || (or_colon && c == ':'); }

/* The four hex digits at p as a number (json_text.h's), or -1 when one is not a hex digit. */
static int hex4(const char *p) {
    for (int i = 0; i < 4; i++)
        if (json_hex_digit(p[i]) < 0) return -1;
    return (int)json_hex4(p);
}

bool tools_stream_answer(const char *text, size_t len, tools_stream *st, text_buf *out) {
    if (st->kind == TS_UNDECIDED) { /* the grammar wrote: white space, '{', white space, the key */
        size_t i = 0;
        while (i < len && is_space(text[i], false)) i++;
        if (i < len && text[i] == '{') i++;
        while (i < len && is_space(text[i], false)) i++;
        static const char key[] = "\"response\"";
        size_t have = len - i < sizeof key - 1 ? len - i : sizeof key - 1;
        if (i >= len || have == 0) return true;
        if (memcmp(text + i, key, have) != 0) {
            st->kind = TS_CALLS;
            return true;
        }
        if (have < sizeof key - 1) return true;
        if (st->json_answer) {
            st->kind = TS_JSON_ANSWER;
            return true;
        }
        i += have;
        while (i < len && is_space(text[i], true)) i++;
        if (i >= len || text[i] != '"') return true;
        st->kind = TS_ANSWER;
        st->at = i + 1;
    }
    while (st->kind == TS_ANSWER && !st->closed && st->at < len) {
        const char *p = text + st->at;
        size_t left = len - st->at;
        unsigned char c = (unsigned char)p[0];
        if (c == '"') {
            st->closed = true;
            break;
        }
        if (c != '\\') { /* a character as it is, once its UTF-8 sequence is whole */
            size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
            if (left < n) break;
            if (!text_buf_add(out, p, n)) return false;
            st->at += n;
            continue;
        }
        if (left < 2) break;
        if (p[1] != 'u') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *k = p[1] ? strchr(from, p[1]) : NULL;
            if (!k) { /* not JSON (the grammar forbids it): the backslash dropped, what follows read as it is */
                st->at += 1;
                continue;
            }
            if (!text_buf_add(out, &to[k - from], 1)) return false;
            st->at += 2;
            continue;
        }
        if (left < 6) break;
        int cp = hex4(p + 2);
        size_t used = 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair: both halves; wait while "\\u.." may still come */
            bool escape_next = left == 6 || (p[6] == '\\' && (left == 7 || p[7] == 'u'));
            if (left < 12 && escape_next) break;
            int lo = left >= 12 && p[6] == '\\' && p[7] == 'u' ? hex4(p + 8) : -1;
            if (lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00), used = 12;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD; /* half a pair: the replacement character */
        if (cp < 0 || !add_utf8(out, (uint32_t)cp)) return cp < 0;
        st->at += used;
    }
    return true;
}

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* One call as OpenAI gives it: its id (24 hex digits mixed from the request's seed and the call's
 * place i), and, in a stream, its index. */
static cJSON *call_item(const tool_call_text *c, int i, bool stream, uint64_t id_seed) {
    cJSON *one = cJSON_CreateObject();
    if (stream) cJSON_AddNumberToObject(one, "index", i);
    uint64_t a = mix64(id_seed + (uint64_t)i), b = mix64(a);
    char id[48];
    snprintf(id, sizeof id, "call_%016" PRIx64 "%08" PRIx32, a, (uint32_t)(b >> 32));
    cJSON_AddStringToObject(one, "id", id);
    cJSON_AddStringToObject(one, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(one, "function");
    /* plain strings (no NUL: a name is [A-Za-z0-9_-], the arguments JSON text), which the Responses
     * API reads back */
    cJSON_AddStringToObject(f, "name", c->name.p ? c->name.p : "");
    cJSON_AddStringToObject(f, "arguments", c->arguments.p ? c->arguments.p : "{}");
    return one;
}

/* The whole calls of text[0..len) that *scan has not read yet, appended to array (made in
 * message when NULL and a call comes): how many. */
static int add_calls(const char *text, size_t len, tool_reply_scan *scan, int first, bool stream, uint64_t id_seed,
                     cJSON *message, cJSON **array) {
    tool_call_text one = {0};
    int n = 0;
    while (tool_reply_next_call(text, len, scan, &one)) {
        if (!*array) *array = cJSON_AddArrayToObject(message, "tool_calls");
        cJSON_AddItemToArray(*array, call_item(&one, first + n, stream, id_seed));
        n++;
    }
    tool_call_text_free(&one);
    return n;
}

void tools_reply(const char *text, size_t len, const char *finish, bool stream, bool json_answer, uint64_t id_seed,
                 cJSON *message, const char **finish_out) {
    *finish_out = finish;
    bool whole = finish && !strcmp(finish, "stop");
    tool_reply_scan scan = {0};
    cJSON *calls = NULL;
    if (!stream) cJSON_AddNullToObject(message, "content"); /* replaced below unless calls come */
    if (add_calls(text, len, &scan, 0, stream, id_seed, message, &calls) > 0) {
        if (whole && scan.ended) *finish_out = "tool_calls";
        return; /* a cut reply: the calls it finished */
    }
    cJSON_DeleteItemFromObjectCaseSensitive(message, "content");
    text_buf answer = {0};
    if (tools_answer_text(text, len, json_answer, &answer)) json_add_string_n(message, "content", answer.p, answer.len);
    text_buf_free(&answer);
}

bool tools_answer_text(const char *text, size_t len, bool json_answer, text_buf *out) {
    bool whole_value;
    if (json_answer && tool_reply_answer(text, len, out, &whole_value)) return text_buf_add(out, "", 0);
    out->len = 0; /* (a failed read may have left part of a value) */
    /* the string's characters, whole or cut, as the stream decodes them (tests/test_tool_stream.c
     * checks that decoder against cJSON's) */
    tools_stream st = {0};
    if (tools_stream_answer(text, len, &st, out) && st.kind == TS_ANSWER) return text_buf_add(out, "", 0);
    out->len = 0;
    return text_buf_add(out, text, len); /* neither: the raw text */
}

int tools_stream_calls(const char *text, size_t len, tools_stream *st, uint64_t id_seed, cJSON *delta) {
    cJSON *calls = NULL;
    int n = add_calls(text, len, &st->calls, st->calls_sent, true, id_seed, delta, &calls);
    st->calls_sent += n;
    return n;
}
