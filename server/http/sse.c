/* SSE framing. One event per write so each reaches the client as its own chunk; JSON printed
 * unformatted, so the only newlines are the event terminators (an event's data must not hold a
 * raw newline; cJSON escapes those inside strings). */
#include "http/sse.h"

#include <stdlib.h>
#include <string.h>

void sse_begin(http_conn *c, const char *extra_headers) {
    http_stream_begin(c, 200, "text/event-stream; charset=utf-8", extra_headers);
}

bool sse_send_json(http_conn *c, const cJSON *obj) {
    char *json = cJSON_PrintUnformatted(obj);
    if (!json) return false;
    size_t n = strlen(json);
    char *ev = malloc(n + 9);
    bool ok = false;
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, json, n);
        memcpy(ev + 6 + n, "\n\n", 2);
        ok = http_stream_write(c, ev, n + 8);
        free(ev);
    }
    cJSON_free(json);
    return ok;
}

void sse_end(http_conn *c) {
    static const char done[] = "data: [DONE]\n\n";
    http_stream_write(c, done, sizeof done - 1);
    http_stream_end(c);
}
