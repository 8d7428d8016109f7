/* Tool calling on chat completions (OpenAI's tools, tool_choice, parallel_tool_calls), for any
 * model: the tools are described to the model in a system text and the reply is held by a grammar
 * to one JSON object, {"tool_calls": [{"name", "arguments"}]} or {"response": text}, which the
 * response turns into OpenAI's tool_calls or content. This is llama.cpp's generic tool format; no
 * model's own tool-call syntax is parsed, so the calls are valid JSON for the tool's parameters
 * whatever the model, a small base model included. */
#ifndef WUSHKV_TOOL_CALLS_H
#define WUSHKV_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "api/openai_request.h"
#include "api/tool_reply_scan.h"
#include "http/text_buf.h"

typedef enum { TOOLS_OFF, TOOLS_AUTO, TOOLS_REQUIRED } tool_mode;

typedef struct tools_ask {
    tool_mode mode;    /* OFF: no tools, or tool_choice "none" */
    cJSON *schema;     /* the reply's JSON Schema (owned); NULL when OFF */
    char *system_text; /* the tools as the model reads them, NUL-terminated (owned); NULL when OFF */
    bool json_answer;  /* AUTO with a structured-output schema: the answer is a JSON value, not a string */
} tools_ask;

/* tools, tool_choice and parallel_tool_calls of a chat request. false with a 400 naming the field:
 * a tool that is not a function, a name that is not 1-64 of [A-Za-z0-9_-] or is given twice, a
 * parameters schema the grammar cannot enforce, tool_choice naming no given tool or asking for a
 * call with no tools. answer_schema (or NULL): what an answer must be, the request's structured-output
 * schema; the reply is then {"response": <a value valid for it>} and the content that value's JSON. */
bool tools_parse(const cJSON *root, const cJSON *answer_schema, tools_ask *t, api_error *e);
void tools_ask_free(tools_ask *t);

/* A past turn as the model saw it: an assistant's tool_calls (after its content) as the JSON
 * object it replied with, or a "tool" message's result as {"tool_response": ...}, rendered as the
 * user's turn. Appends to out; false with a 400 naming messages[index] when malformed. */
bool tools_render_calls(const cJSON *tool_calls, int index, text_buf *out, api_error *e);
bool tools_render_result(const cJSON *msg, const char *content, size_t len, int index, text_buf *out, api_error *e);

/* A finished reply -> the message's content or tool_calls, and the finish reason: "tool_calls"
 * when the text is a whole {"tool_calls": ...} object, else as it ended. A reply cut short (by
 * max_tokens) gives the calls it finished (finish "length"), or its answer's characters so far, or,
 * with neither, its raw text. Each call's arguments are the model's JSON text, compacted
 * (tool_reply_scan.h). json_answer (tools_ask's): an answer is its value's JSON text, compacted.
 * id_seed makes the calls' ids. For the stream, tool_calls entries carry index. */
void tools_reply(const char *text, size_t len, const char *finish, bool stream, bool json_answer, uint64_t id_seed,
                 cJSON *message, const char **finish_out);

/* The text a reply that is not calls stands for, into out: a JSON answer's value (json_answer), or
 * a string answer's characters (so far, when cut), or else the raw text. false only out of memory. */
bool tools_answer_text(const char *text, size_t len, bool json_answer, text_buf *out);

/* A streamed reply read as it grows, so that an answer ({"response": "..."}) streams as content
 * and each call goes out as soon as it is whole. */
typedef struct tools_stream {
    /* what the reply's first key says; TS_JSON_ANSWER: an answer that is a JSON value (json_answer),
     * held until whole */
    enum { TS_UNDECIDED, TS_ANSWER, TS_CALLS, TS_JSON_ANSWER } kind;
    bool json_answer;                                /* set by the caller: tools_ask's json_answer */
    size_t at;                                       /* TS_ANSWER: the next byte of the string to decode */
    bool closed;                                     /* TS_ANSWER: the string's closing quote was read */
    tool_reply_scan calls;                           /* TS_CALLS: how far the calls were read */
    int calls_sent;                                  /* TS_CALLS: calls sent so far */
} tools_stream;

/* Appends to out the answer's characters that text[0..len) (the reply so far) completes since the
 * last call: escapes decoded, a UTF-8 sequence or escape cut at the end left for the next call. */
bool tools_stream_answer(const char *text, size_t len, tools_stream *st, text_buf *out);

/* Adds to delta's tool_calls (made when a call comes) the calls that text[0..len) completes since
 * the last call, indexed after those sent before; returns how many (st->calls.ended: the array closed). */
int tools_stream_calls(const char *text, size_t len, tools_stream *st, uint64_t id_seed, cJSON *delta);

#endif
