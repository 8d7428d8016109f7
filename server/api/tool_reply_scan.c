/* Reads whole calls out of a tool reply's text (tool_reply_scan.h). The reply was held by a grammar
 * to valid JSON, so this is a scanner of spans, not a validator: it finds where each value ends
 * (strings with their escapes, nested objects and arrays) and stops at text that is not there yet. */
#include "api/tool_reply_scan.h"

#include <string.h>

#include <cjson/cJSON.h>

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const char *t, size_t n, size_t i) {
    while (i < n && is_ws(t[i])) i++;
    return i;
}

/* The byte after the closing quote of the string opening at t[i], or 0 when the text ends first. */
static size_t string_end(const char *t, size_t n, size_t i) {
    for (i++; i < n; i++) {
        if (t[i] == '\\') i++;
        else if (t[i] == '"') return i + 1;
    }
    return 0;
}

/* The byte after the value starting at t[i], or 0 when the text ends before the value surely does
 * (a number or literal that reaches the end may still go on). */
static size_t value_end(const char *t, size_t n, size_t i) {
    if (i >= n) return 0;
    if (t[i] == '"') return string_end(t, n, i);
    if (t[i] == '{' || t[i] == '[') {
        size_t depth = 0;
        while (i < n) {
            char c = t[i];
            if (c == '"') {
                i = string_end(t, n, i);
                if (!i) return 0;
                continue;
            }
            if (c == '{' || c == '[') depth++;
            else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
            i++;
        }
        return 0;
    }
    while (i < n && !is_ws(t[i]) && t[i] != ',' && t[i] != '}' && t[i] != ']') i++;
    return i < n ? i : 0;
}

/* t[from..to) without the white space between its tokens (strings are copied as written). */
static bool add_compact(text_buf *out, const char *t, size_t from, size_t to) {
    size_t run = from;
    bool in_string = false;
    for (size_t i = from; i < to; i++) {
        char c = t[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (is_ws(c)) {
            if (!text_buf_add(out, t + run, i - run)) return false;
            run = i + 1;
        }
    }
    return text_buf_add(out, t + run, to - run);
}

/* Past '{' "tool_calls" ':' '[' (white space between): s->at at the first call; false while the text
 * may still become that, with s->not_calls when it cannot. */
static bool find_array(const char *t, size_t n, tool_reply_scan *s) {
    static const char key[] = "\"tool_calls\"";
    size_t i = skip_ws(t, n, 0);
    if (i >= n) return false;
    if (t[i] != '{') return s->not_calls = true, false;
    i = skip_ws(t, n, i + 1);
    size_t have = n - i < sizeof key - 1 ? n - i : sizeof key - 1;
    if (memcmp(t + i, key, have) != 0) return s->not_calls = true, false;
    if (have < sizeof key - 1) return false;
    i = skip_ws(t, n, i + have);
    if (i >= n) return false;
    if (t[i] != ':') return s->not_calls = true, false;
    i = skip_ws(t, n, i + 1);
    if (i >= n) return false;
    if (t[i] != '[') return s->not_calls = true, false;
    s->at = i + 1;
    return true;
}

/* The members of the whole object t[from..to): name and arguments into *call. */
static bool read_call(const char *t, size_t from, size_t to, tool_call_text *call) {
    bool named = false, has_arguments = false;
    size_t j = skip_ws(t, to, from + 1);
    while (j < to && t[j] == '"') {
        size_t key_end = string_end(t, to, j);
        size_t v = key_end ? skip_ws(t, to, key_end) : to;
        if (v >= to || t[v] != ':') return false;
        v = skip_ws(t, to, v + 1);
        size_t v_end = value_end(t, to, v);
        if (!v_end) return false;
        if (key_end - j == 6 && !memcmp(t + j, "\"name\"", 6) && t[v] == '"') {
            cJSON *s = cJSON_ParseWithLength(t + v, v_end - v);
            named = cJSON_IsString(s) && text_buf_add(&call->name, s->valuestring, strlen(s->valuestring));
            cJSON_Delete(s);
        } else if (key_end - j == 11 && !memcmp(t + j, "\"arguments\"", 11)) {
            if (!add_compact(&call->arguments, t, v, v_end)) return false;
            has_arguments = true;
        }
        j = skip_ws(t, to, v_end);
        if (j < to && t[j] == ',') j = skip_ws(t, to, j + 1);
    }
    return named && has_arguments;
}

void tool_call_text_free(tool_call_text *call) {
    text_buf_free(&call->name);
    text_buf_free(&call->arguments);
}

bool tool_reply_next_call(const char *text, size_t len, tool_reply_scan *s, tool_call_text *call) {
    if (s->not_calls || s->ended) return false;
    if (s->at == 0 && !find_array(text, len, s)) return false;
    size_t i = skip_ws(text, len, s->at);
    if (i < len && text[i] == ',') i = skip_ws(text, len, i + 1);
    if (i < len && text[i] == ']') return s->ended = true, false;
    if (i >= len || text[i] != '{') return false;
    size_t end = value_end(text, len, i);
    if (!end) return false;
    tool_call_text_free(call);
    if (!read_call(text, i, end, call)) { /* not a call (the grammar forbids it), or out of memory */
        s->not_calls = true;
        return false;
    }
    s->at = end;
    return true;
}

bool tool_reply_answer(const char *text, size_t len, text_buf *out, bool *whole) {
    static const char key[] = "\"response\"";
    *whole = false;
    size_t i = skip_ws(text, len, 0);
    if (i >= len || text[i] != '{') return false;
    i = skip_ws(text, len, i + 1);
    if (len - i < sizeof key - 1 || memcmp(text + i, key, sizeof key - 1) != 0) return false;
    i = skip_ws(text, len, i + sizeof key - 1);
    if (i >= len || text[i] != ':') return false;
    i = skip_ws(text, len, i + 1);
    if (i >= len) return false;
    size_t end = value_end(text, len, i);
    *whole = end != 0;
    return add_compact(out, text, i, end ? end : len);
}

bool tool_json_compact(const char *t, size_t n, text_buf *out) { return add_compact(out, t, 0, n); }
