/* Tool replies read call by call (server/api/tool_reply_scan.c) and turned into OpenAI's tool_calls
 * (tool_calls.c, tools_reply and tools_stream_calls): a reply of calls with white space, escapes,
 * nesting and long numbers in its arguments is cut at every byte, and at each cut the calls read
 * must be exactly those whose object the cut has closed, the same whether read at once or as the
 * text grew; each call's arguments must be the model's text without white space between tokens
 * (checked against hand-written compact forms and against cJSON's parse of the original), numbers
 * kept digit for digit. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api/tool_calls.h"
#include "api/tool_reply_scan.h"
#include "test_util.h"

typedef struct {
    const char *text;      /* the call's object as the model wrote it */
    const char *name;      /* its name */
    const char *arguments; /* its arguments, compact, as the scan must give them */
    const char *raw_args;  /* its arguments as written (for cJSON's comparison) */
} call_case;

static const call_case CALLS[] = {
    {"{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa ris \\\"q\\\" \\\\ }]{[\", \"unit\":\"c\"}}", "get_weather",
     "{\"city\":\"Pa ris \\\"q\\\" \\\\ }]{[\",\"unit\":\"c\"}", "{\"city\": \"Pa ris \\\"q\\\" \\\\ }]{[\", \"unit\":\"c\"}"},
    {"{ \"arguments\" :\n { \"a\" : 1000000000000000 ,\t\"b\" : -0.50e+3 } , \"name\" : \"add\" }", "add",
     "{\"a\":1000000000000000,\"b\":-0.50e+3}", "{ \"a\" : 1000000000000000 ,\t\"b\" : -0.50e+3 }"},
    {"{\"name\":\"x-y_1\",\"arguments\":{\"list\":[1, 2, {\"k\": [ ]}], \"t\": true, \"n\": null, \"u\": \"\\u00e9 \\ud83d\\ude00 \xc3\xa9\"}}",
     "x-y_1", "{\"list\":[1,2,{\"k\":[]}],\"t\":true,\"n\":null,\"u\":\"\\u00e9 \\ud83d\\ude00 \xc3\xa9\"}",
     "{\"list\":[1, 2, {\"k\": [ ]}], \"t\": true, \"n\": null, \"u\": \"\\u00e9 \\ud83d\\ude00 \xc3\xa9\"}"},
    {"{\"name\": \"n\", \"arguments\": {\"v\": 12345678901234567890}}", "n", "{\"v\":12345678901234567890}",
     "{\"v\": 12345678901234567890}"},
    /* an odd number of escaped quotes, brackets after them, a string ending in an escaped backslash */
    {"{\"name\": \"q\", \"arguments\": {\"s\": \"one \\\" } ] { x\", \"t\": \"\\\\\", \"u\": \" } \"}}", "q",
     "{\"s\":\"one \\\" } ] { x\",\"t\":\"\\\\\",\"u\":\" } \"}",
     "{\"s\": \"one \\\" } ] { x\", \"t\": \"\\\\\", \"u\": \" } \"}"},
};
#define N_CALLS (sizeof CALLS / sizeof CALLS[0])

static char reply[4096];
static size_t call_end[N_CALLS], array_end; /* the byte after each call's '}', after the ']' */

static void build_reply(void) {
    size_t n = (size_t)snprintf(reply, sizeof reply, " \n{ \"tool_calls\" :\n [ ");
    for (size_t i = 0; i < N_CALLS; i++) {
        n += (size_t)snprintf(reply + n, sizeof reply - n, "%s%s", i ? " ,\n  " : "", CALLS[i].text);
        call_end[i] = n;
    }
    n += (size_t)snprintf(reply + n, sizeof reply - n, " ]");
    array_end = n;
    snprintf(reply + n, sizeof reply - n, "\n}");
}

static void check_call(const tool_call_text *got, size_t i) {
    CHECK(got->name.p && strcmp(got->name.p, CALLS[i].name) == 0);
    bool same = got->arguments.p && strcmp(got->arguments.p, CALLS[i].arguments) == 0;
    if (!same) fprintf(stderr, "call %zu: got %s, want %s\n", i, got->arguments.p, CALLS[i].arguments);
    CHECK(same);
    cJSON *a = cJSON_Parse(got->arguments.p ? got->arguments.p : ""), *b = cJSON_Parse(CALLS[i].raw_args);
    CHECK(a && b && cJSON_Compare(a, b, true));
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* Every cut: a fresh scan of the prefix gives the calls it closes, no more. */
static void check_every_cut(void) {
    size_t len = strlen(reply);
    for (size_t cut = 0; cut <= len; cut++) {
        tool_reply_scan s = {0};
        tool_call_text c = {0};
        size_t got = 0;
        while (tool_reply_next_call(reply, cut, &s, &c)) check_call(&c, got++);
        size_t want = 0;
        while (want < N_CALLS && call_end[want] <= cut) want++;
        if (got != want) fprintf(stderr, "cut %zu: %zu calls, want %zu\n", cut, got, want);
        CHECK(got == want);
        CHECK(!s.not_calls);
        CHECK(s.ended == (cut >= array_end));
        tool_call_text_free(&c);
    }
}

/* One scan fed the reply as it grows, `step` bytes at a time: each call once, in order. */
static void check_growing(size_t step) {
    size_t len = strlen(reply), got = 0;
    tool_reply_scan s = {0};
    tool_call_text c = {0};
    for (size_t upto = 0;; upto = upto + step < len ? upto + step : len) {
        while (tool_reply_next_call(reply, upto, &s, &c)) {
            CHECK(got < N_CALLS && call_end[got] <= upto);
            if (got < N_CALLS) check_call(&c, got);
            got++;
        }
        if (upto == len) break;
    }
    CHECK(got == N_CALLS && s.ended);
    tool_call_text_free(&c);
}

static void check_not_calls(const char *text, bool decided) {
    tool_reply_scan s = {0};
    tool_call_text c = {0};
    CHECK(!tool_reply_next_call(text, strlen(text), &s, &c));
    CHECK(s.not_calls == decided);
    tool_call_text_free(&c);
}

/* m as a client reads it: printed and parsed (strings the server makes may be raw items). */
static cJSON *as_read(cJSON *m) {
    char *text = cJSON_PrintUnformatted(m);
    cJSON *back = cJSON_Parse(text);
    cJSON_free(text);
    cJSON_Delete(m);
    return back;
}

/* tools_reply: a whole reply's calls and "tool_calls"; a cut one's finished calls and "length"; a
 * cut one without any, its raw text. */
static void check_reply_message(void) {
    const char *finish;
    cJSON *m = cJSON_CreateObject();
    tools_reply(reply, strlen(reply), "stop", false, false, 42, m, &finish);
    m = as_read(m);
    cJSON *calls = cJSON_GetObjectItem(m, "tool_calls");
    CHECK(strcmp(finish, "tool_calls") == 0 && cJSON_GetArraySize(calls) == (int)N_CALLS);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(m, "content")));
    for (size_t i = 0; i < N_CALLS && calls; i++) {
        const cJSON *f = cJSON_GetObjectItem(cJSON_GetArrayItem(calls, (int)i), "function");
        const char *args = cJSON_GetStringValue(cJSON_GetObjectItem(f, "arguments"));
        CHECK(args && strcmp(args, CALLS[i].arguments) == 0);
    }
    cJSON_Delete(m);

    m = cJSON_CreateObject();
    tools_reply(reply, call_end[1] + 3, "length", false, false, 42, m, &finish);
    CHECK(strcmp(finish, "length") == 0 && cJSON_GetArraySize(cJSON_GetObjectItem(m, "tool_calls")) == 2);
    cJSON_Delete(m);

    m = cJSON_CreateObject();
    tools_reply(reply, call_end[0] - 1, "length", false, false, 42, m, &finish);
    m = as_read(m);
    const char *content = cJSON_GetStringValue(cJSON_GetObjectItem(m, "content"));
    CHECK(strcmp(finish, "length") == 0 && !cJSON_GetObjectItem(m, "tool_calls"));
    CHECK(content && strlen(content) == call_end[0] - 1 && strncmp(content, reply, call_end[0] - 1) == 0);
    cJSON_Delete(m);

    /* streamed: indices follow on from the calls sent before, ids as the whole reply's */
    tools_stream st = {.kind = TS_CALLS};
    cJSON *d1 = cJSON_CreateObject(), *d2 = cJSON_CreateObject(), *whole = cJSON_CreateObject();
    CHECK(tools_stream_calls(reply, call_end[1], &st, 42, d1) == 2);
    CHECK(tools_stream_calls(reply, strlen(reply), &st, 42, d2) == (int)N_CALLS - 2 && st.calls.ended);
    tools_reply(reply, strlen(reply), "stop", true, false, 42, whole, &finish);
    const cJSON *third = cJSON_GetArrayItem(cJSON_GetObjectItem(d2, "tool_calls"), 0);
    const cJSON *third_whole = cJSON_GetArrayItem(cJSON_GetObjectItem(whole, "tool_calls"), 2);
    CHECK(cJSON_GetObjectItem(third, "index")->valueint == 2 && cJSON_Compare(third, third_whole, true));
    cJSON_Delete(d1);
    cJSON_Delete(d2);
    cJSON_Delete(whole);
}

int main(void) {
    build_reply();
    check_every_cut();
    for (size_t step = 1; step <= 9; step++) check_growing(step);
    check_not_calls("{\"response\": \"x\"}", true);
    check_not_calls("  {  \"tool_c", false); /* may still become calls */
    check_not_calls("{\"tool_calls\": {", true);
    check_not_calls("[1]", true);
    check_not_calls("", false);
    check_reply_message();
    TEST_MAIN_END();
}
