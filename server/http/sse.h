/* Server-sent events framing for OpenAI streams: "data: <json>\n\n" events (named ones for the
 * Responses API) and the final "data: [DONE]" over an http_stream. */
#ifndef WUSHKV_SSE_H
#define WUSHKV_SSE_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "http/http.h"

/* Starts a text/event-stream response (status 200). */
void sse_begin(http_conn *c, const char *extra_headers);
/* Sends one event with obj serialised on one line; false when the client is gone. */
bool sse_send_json(http_conn *c, const cJSON *obj);
/* Sends one event named `type` ("event: <type>" before its data), as OpenAI's Responses API does. */
bool sse_send_event(http_conn *c, const char *type, const cJSON *obj);
/* Sends "data: [DONE]" and ends the response. */
void sse_end(http_conn *c);
/* Ends the response without "[DONE]" (the Responses API's streams end with their last event). */
void sse_close(http_conn *c);

#endif
