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

#include <cjson/cJSON.h>

#include "api/openai_request.h"
#include "http/text_buf.h"

typedef enum { TOOLS_OFF, TOOLS_AUTO, TOOLS_REQUIRED } tool_mode;

typedef struct tools_ask {
    tool_mode mode;    /* OFF: no tools, or tool_choice "none" */
    cJSON *schema;     /* the reply's JSON Schema (owned); NULL when OFF */
    char *system_text; /* the tools as the model reads them, NUL-terminated (owned); NULL when OFF */
} tools_ask;

/* tools, tool_choice and parallel_tool_calls of a chat request. false with a 400 naming the field:
 * a tool that is not a function, a name that is not 1-64 of [A-Za-z0-9_-] or is given twice, a
 * parameters schema the grammar cannot enforce, tool_choice naming no given tool or asking for a
 * call with no tools. */
bool tools_parse(const cJSON *root, tools_ask *t, api_error *e);
void tools_ask_free(tools_ask *t);

/* A past turn as the model saw it: an assistant's tool_calls (after its content) as the JSON
 * object it replied with, or a "tool" message's result as {"tool_response": ...}, rendered as the
 * user's turn. Appends to out; false with a 400 naming messages[index] when malformed. */
bool tools_render_calls(const cJSON *tool_calls, int index, text_buf *out, api_error *e);
bool tools_render_result(const cJSON *msg, const char *content, size_t len, int index, text_buf *out, api_error *e);

/* A finished reply -> the message's content or tool_calls, and the finish reason: "tool_calls"
 * when the text is a whole {"tool_calls": ...} object, else as it ended (a reply cut by max_tokens
 * is its raw text). id_seed makes the calls' ids. For the stream, tool_calls entries carry index. */
void tools_reply(const char *text, size_t len, const char *finish, bool stream, uint64_t id_seed, cJSON *message,
                 const char **finish_out);

#endif
