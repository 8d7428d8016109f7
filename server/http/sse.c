/* SSE framing. One event per write so each reaches the client as its own chunk; JSON printed
 * unformatted, so the only newlines are the event terminators (an event's data must not hold a
 * raw newline; cJSON escapes those inside strings). */
#include "http/sse.h"

#include <stdlib.h>
#include <string.h>

void sse_begin(http_conn *c, const char *extra_headers) {
    http_stream_begin(c, 200, "text/event-stream; charset=utf-8", extra_headers);
}

/* "[event: <type>\n]data: <json>\n\n" in one write. type: a fixed name without newlines. */
static bool send_event(http_conn *c, const char *type, const cJSON *obj) {
    char *json = cJSON_PrintUnformatted(obj);
    if (!json) return false;
    size_t n = strlen(json), head = type ? strlen(type) + 8 : 0;
    char *ev = malloc(head + n + 9);
    bool ok = false;
    if (ev) {
        if (type) {
            memcpy(ev, "event: ", 7);
            memcpy(ev + 7, type, head - 8);
            ev[head - 1] = '\n';
        }
        memcpy(ev + head, "data: ", 6);
        memcpy(ev + head + 6, json, n);
        memcpy(ev + head + 6 + n, "\n\n", 2);
        ok = http_stream_write(c, ev, head + n + 8);
        free(ev);
    }
    cJSON_free(json);
    return ok;
}

bool sse_send_json(http_conn *c, const cJSON *obj) { return send_event(c, NULL, obj); }

bool sse_send_event(http_conn *c, const char *type, const cJSON *obj) { return send_event(c, type, obj); }

void sse_close(http_conn *c) { http_stream_end(c); }

void sse_end(http_conn *c) {
    static const char done[] = "data: [DONE]\n\n";
    http_stream_write(c, done, sizeof done - 1);
    http_stream_end(c);
}
