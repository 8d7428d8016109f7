/* Fuzz target: reading a tool-calling reply (server/api/tool_reply_scan.c, tool_calls.c's
 * tools_reply, tools_stream_answer and tools_stream_calls) from any bytes, as a model held by a
 * grammar should never write but a bug could. Input: byte 0 sets the stream's piece size (1-16),
 * the rest is the reply. Invariants: the calls read from the whole text equal, in order and byte
 * for byte, those read as the text grew piece by piece; a whole JSON reply's calls have arguments
 * that are JSON; an answer read as it grew is whole UTF-8 when the reply is; every reply turns
 * into a message (stop and length, whole and streamed, string and JSON answers) that prints;
 * a JSON answer read whole from valid JSON is JSON. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api/json_strict.h"
#include "api/json_text.h"
#include "api/tool_calls.h"
#include "api/tool_reply_scan.h"

#define FUZZ_CHECK(c)                                                                          \
    do {                                                                                       \
        if (!(c)) {                                                                            \
            fprintf(stderr, "fuzz_tool_reply: invariant failed: %s (line %d)\n", #c, __LINE__); \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#define MAX_CALLS 256

static bool same_buf(const text_buf *a, const text_buf *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 1 << 14) return 0;
    size_t step = 1 + data[0] % 16;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    /* the calls of the whole text */
    static tool_call_text whole[MAX_CALLS];
    size_t n_whole = 0;
    tool_reply_scan s = {0};
    tool_call_text c = {0};
    while (n_whole < MAX_CALLS && tool_reply_next_call(text, len, &s, &c)) {
        whole[n_whole] = c;
        memset(&c, 0, sizeof c);
        n_whole++;
    }
    /* the same read as the text grew */
    tool_reply_scan g = {0};
    size_t n_grown = 0;
    for (size_t upto = step < len ? step : len;; upto = upto + step < len ? upto + step : len) {
        while (n_grown < n_whole && tool_reply_next_call(text, upto, &g, &c)) {
            FUZZ_CHECK(same_buf(&c.name, &whole[n_grown].name) && same_buf(&c.arguments, &whole[n_grown].arguments));
            n_grown++;
        }
        if (upto == len) break;
    }
    FUZZ_CHECK(n_grown == n_whole);

    size_t bad_at;
    const char *why;
    bool valid_json = json_utf8_valid_prefix((const unsigned char *)text, len) == len && !memchr(text, 0, len) &&
                      json_strict_check(text, len, 64, &bad_at, &why);
    for (size_t i = 0; i < n_whole; i++) {
        if (valid_json) {
            cJSON *a = cJSON_ParseWithLength(whole[i].arguments.p, whole[i].arguments.len);
            FUZZ_CHECK(a != NULL);
            cJSON_Delete(a);
        }
        tool_call_text_free(&whole[i]);
    }
    tool_call_text_free(&c);
    text_buf value = {0};
    bool value_whole;
    if (tool_reply_answer(text, len, &value, &value_whole) && valid_json && value_whole) {
        cJSON *v = cJSON_ParseWithLength(value.p, value.len);
        FUZZ_CHECK(v != NULL);
        cJSON_Delete(v);
    }
    text_buf_free(&value);

    /* the answer as it grew: whole UTF-8 pieces when the reply is UTF-8 */
    bool utf8 = json_utf8_valid_prefix((const unsigned char *)text, len) == len;
    tools_stream st = {0};
    text_buf out = {0};
    for (size_t upto = step < len ? step : len;; upto = upto + step < len ? upto + step : len) {
        size_t before = out.len;
        if (!tools_stream_answer(text, upto, &st, &out)) break;
        if (utf8 && out.len > before)
            FUZZ_CHECK(json_utf8_valid_prefix((const unsigned char *)out.p + before, out.len - before) == out.len - before);
        if (upto == len) break;
    }
    text_buf_free(&out);

    /* every reply becomes a message that prints */
    static const char *const finishes[] = {"stop", "length"};
    for (int f = 0; f < 2; f++)
        for (int mode = 0; mode < 4; mode++) { /* streamed or not, string or JSON answers */
            cJSON *m = cJSON_CreateObject();
            const char *finish;
            tools_reply(text, len, finishes[f], mode & 1, mode & 2, 7, m, &finish);
            FUZZ_CHECK(finish != NULL);
            char *printed = cJSON_PrintUnformatted(m);
            FUZZ_CHECK(printed != NULL);
            cJSON_free(printed);
            cJSON_Delete(m);
        }
    return 0;
}
