/* Reads the calls of a tool reply ({"tool_calls": [{"name": ..., "arguments": {...}}, ...]}, the
 * generic format of tool_calls.h) from its text as the model wrote it, one whole call at a time,
 * so that:
 *   - a call's arguments are the model's own JSON text, with only the white space between tokens
 *     dropped: a number keeps its digits (a parse and print through doubles turned
 *     1000000000000000 into 1e+15 and would round integers past 2^53) and a string its escapes;
 *   - a reply cut by max_tokens still gives the calls it finished;
 *   - a stream can send each call as soon as its object closes. */
#ifndef WUSHKV_TOOL_REPLY_SCAN_H
#define WUSHKV_TOOL_REPLY_SCAN_H

#include <stdbool.h>
#include <stddef.h>

#include "http/text_buf.h"

/* One whole call: its name, decoded (NUL-terminated), and its arguments' compact JSON text. */
typedef struct tool_call_text {
    text_buf name;
    text_buf arguments;
} tool_call_text;

/* Where a reply's scan stands; zero it before the first call. */
typedef struct tool_reply_scan {
    size_t at;      /* the next byte to read: 0 before the calls array was found */
    bool not_calls; /* the text does not start as a calls reply (an answer, or anything else) */
    bool ended;     /* the calls array closed: no call follows */
} tool_reply_scan;

/* The next whole call of text[0..len) (the reply so far) after the ones already read: true with
 * *call filled (call's buffers are reset first; free them with tool_call_text_free) and the scan
 * moved past it; false when no whole call follows yet, when the array has ended, or when the text
 * is not a calls reply (then s->not_calls), or out of memory. Reading again after more text came
 * goes on where it stopped. */
bool tool_reply_next_call(const char *text, size_t len, tool_reply_scan *s, tool_call_text *call);
void tool_call_text_free(tool_call_text *call);

/* JSON text t[0..n) without the white space between its tokens (strings copied as written),
 * appended to out; false only out of memory. */
bool tool_json_compact(const char *t, size_t n, text_buf *out);

/* An answer reply's value ({"response": VALUE}) so far, compacted as a call's arguments are, appended
 * to out: true when text[0..len) is an answer whose value has begun; *whole: the value has ended. */
bool tool_reply_answer(const char *text, size_t len, text_buf *out, bool *whole);

#endif
