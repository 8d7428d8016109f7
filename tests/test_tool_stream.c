/* Tool calling's streamed answer (server/api/tool_calls.c, tools_stream_answer): a reply
 * {"response": "..."} fed a byte at a time, as tokens may cut it anywhere, must give the string's
 * characters exactly once and in order, the same as one read of the whole, which is checked
 * against cJSON's decoding of the same JSON; a cut escape, surrogate pair or UTF-8 sequence waits
 * for its end; half a surrogate pair becomes U+FFFD; a reply of calls is told apart by its key. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api/json_text.h"
#include "api/tool_calls.h"
#include "test_util.h"

/* The answer's characters from reading reply[0..len) in pieces of `step` bytes; each piece's
 * output is whole UTF-8 on its own, as a stream's delta must be. */
static void read_in_steps(const char *reply, size_t len, size_t step, text_buf *out, tools_stream *st) {
    for (size_t upto = step < len ? step : len;; upto = upto + step < len ? upto + step : len) {
        size_t before = out->len;
        CHECK(tools_stream_answer(reply, upto, st, out));
        size_t added = out->len - before;
        if (added) CHECK(json_utf8_valid_prefix((const unsigned char *)out->p + before, added) == added);
        if (upto == len) break;
    }
}

static void check_reply(const char *reply) {
    cJSON *parsed = cJSON_Parse(reply);
    const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(parsed, "response"));
    CHECK(want != NULL);
    for (size_t step = 1; want && step <= 7; step++) {
        tools_stream st = {0};
        text_buf out = {0};
        read_in_steps(reply, strlen(reply), step, &out, &st);
        CHECK_EQ_INT(st.kind, TS_ANSWER);
        CHECK(st.closed);
        bool same = out.len == strlen(want) && (out.len == 0 || memcmp(out.p, want, out.len) == 0);
        if (!same) fprintf(stderr, "step %zu: got '%.*s', want '%s'\n", step, (int)out.len, out.p ? out.p : "", want);
        CHECK(same);
        text_buf_free(&out);
    }
    cJSON_Delete(parsed);
}

int main(void) {
    check_reply("{\"response\": \"plain text\"}");
    check_reply("\n {\n  \"response\" :  \"a \\\"quote\\\", a \\\\ and \\/ \\b\\f\\n\\r\\t end\"}");
    check_reply("{\"response\": \"\\u00e9t\\u00C9 \\u20ac \\ud83d\\ude00 x\"}");
    check_reply("{\"response\": \"raw \xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 y\"}");
    check_reply("{\"response\": \"\"}");

    /* half a pair: U+FFFD (EF BF BD), then the rest */
    tools_stream st = {0};
    text_buf out = {0};
    const char *lone = "{\"response\": \"a\\udc00b\\ud800c\"}";
    read_in_steps(lone, strlen(lone), 1, &out, &st);
    CHECK(out.len == 9 && memcmp(out.p, "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c", 9) == 0);
    text_buf_free(&out);

    /* calls: nothing streams; an unfinished key waits */
    const char *calls = "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}]}";
    st = (tools_stream){0};
    read_in_steps(calls, strlen(calls), 1, &out, &st);
    CHECK_EQ_INT(st.kind, TS_CALLS);
    CHECK_EQ_INT((int)out.len, 0);
    st = (tools_stream){0};
    CHECK(tools_stream_answer("{\"resp", 6, &st, &out));
    CHECK_EQ_INT(st.kind, TS_UNDECIDED);
    /* a cut answer gives what it has, and nothing of a cut escape */
    CHECK(tools_stream_answer("{\"response\": \"ab\\u00", 20, &st, &out));
    CHECK(st.kind == TS_ANSWER && !st.closed && out.len == 2 && memcmp(out.p, "ab", 2) == 0);
    text_buf_free(&out);
    TEST_MAIN_END();
}
