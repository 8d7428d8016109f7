/* HTTP/1.1 server on a libuv loop (llhttp parser): keep-alive, pipelining, chunked request
 * bodies, header/body limits, idle and slow-request timeouts, and streamed (chunked) responses.
 * Knows nothing of JSON or of the engine; everything here runs on the loop thread. */
#ifndef WUSHKV_HTTP_H
#define WUSHKV_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#define HTTP_MAX_HEADERS 64
/* The longest request target (path and query) read; longer: 414 (RFC 9112 3: at least 8000 octets). */
#define HTTP_MAX_TARGET 8192

typedef struct http_server http_server;
typedef struct http_conn http_conn;

typedef struct http_header {
    char *name;  /* lower-cased */
    char *value; /* as sent, surrounding blanks trimmed */
} http_header;

/* One parsed request; owned by its connection and valid until the response ends (or the
 * connection closes, whichever is first). */
typedef struct http_request {
    const char *method; /* "GET", "POST", ... */
    char *path;         /* the target without its query */
    char *query;        /* after '?', or "" */
    http_header headers[HTTP_MAX_HEADERS];
    int n_headers;
    char *body; /* NUL-terminated (so JSON parsers can take it as is) */
    size_t body_len;
    int http_minor; /* 1 for HTTP/1.1, 0 for HTTP/1.0 */
    /* The connection came beyond max_conns with no idle one to reap: the handler should answer
     * only what must stay reachable (/health) and refuse the rest with 503; it is closed after. */
    bool over_limit;
} http_request;

typedef struct http_limits {
    size_t max_header_bytes;     /* request line + headers; beyond: 431 */
    size_t max_body_bytes;       /* beyond: 413 */
    uint64_t idle_timeout_ms;    /* an idle keep-alive connection is closed after this */
    uint64_t request_timeout_ms; /* a request must arrive whole within this of its first byte */
    size_t max_write_queue;      /* bytes queued to a client that does not read; beyond: closed */
    int max_conns;               /* open connections served; beyond: the oldest idle one is closed to
                                  * make room, else the new one gets over_limit (0: no cap) */
} http_limits;

/* Connections beyond max_conns that are still read (a request each, answered, then closed) so that
 * /health stays reachable and the others learn why (503); more than this at once are sent a 503 and
 * closed unread. The caller keeps this many file descriptors (and a few more) beyond max_conns. */
#define HTTP_OVERFLOW_CONNS 16
/* How long an over-limit connection may take to send its request. */
#define HTTP_OVERFLOW_TIMEOUT_MS 2000
/* A connection the server closes after its response first reads and drops what the client still
 * sends, until the client closes or HTTP_LINGER_MS pass (RFC 9112 9.6), at most this many at once
 * (beyond: closed at once). Closing a socket with bytes unread sends a reset, and a reset can
 * destroy the response before the client reads it: a 413 while the body is still arriving, a 400
 * for a request whose rest is in flight. Each is a file descriptor beyond max_conns too. */
#define HTTP_LINGERING_CONNS 16
#define HTTP_LINGER_MS 2000

typedef struct http_conn_stats {
    int open;          /* connections open now (over-limit ones included) */
    uint64_t rejected; /* connections that came beyond max_conns and were not served normally */
    uint64_t reaped;   /* idle keep-alive connections closed to make room for a new one */
} http_conn_stats;

void http_limits_default(http_limits *l);

/* Called once per complete request. The handler answers (now or later) with exactly one of
 * http_respond or http_stream_begin ... http_stream_end. */
typedef void (*http_handler)(http_conn *c, http_request *req, void *server_data);
/* Called when a request asks for "100 Continue" (RFC 9110 10.1.1), before its body is read: req
 * holds the method, path, query and headers, body empty. A handler that refuses the request
 * whatever its body answers now with http_respond and returns true: the body is never read and
 * the connection closes after the answer. False: the client is told to send the body, and the
 * whole request comes to the handler as usual. */
typedef bool (*http_head_handler)(http_conn *c, http_request *head, void *server_data);
/* Called when a connection closes before its current response ended (client gone, timeout,
 * write error, shutdown): the handler's request state must forget the connection. */
typedef void (*http_abort_cb)(http_conn *c, void *request_data);

/* Binds host:port (port 0: any free port) and starts accepting. Returns 0 or a negative libuv
 * error with a message in err. */
int http_server_start(http_server **out, uv_loop_t *loop, const char *host, int port, const http_limits *limits,
                      http_handler handler, void *server_data, char *err, size_t errlen);
int http_server_port(const http_server *s);
/* Sets (or, with NULL, clears) the handler of 100-continue heads; without one every such request
 * gets 100 Continue. */
void http_server_set_head_handler(http_server *s, http_head_handler on_head);
/* Stops accepting new connections (drain); existing ones go on. */
void http_server_stop_accepting(http_server *s);
/* Connections open now. */
int http_server_n_conns(const http_server *s);
void http_server_conn_stats(const http_server *s, http_conn_stats *out);
/* Closes every connection and the listener; the server is freed once libuv has closed them all
 * (run the loop afterwards). Requests in progress get their abort callback. */
void http_server_close(http_server *s);

const char *http_header_get(const http_request *r, const char *lower_name);

/* Attaches the handler's state to the request in progress, for the abort callback. */
void http_conn_set_request_data(http_conn *c, void *data, http_abort_cb on_abort);

/* A whole response. extra_headers: "Name: value\r\n" lines or NULL. */
void http_respond(http_conn *c, int status, const char *content_type, const char *body, size_t len,
                  const char *extra_headers);
/* A streamed response: chunked transfer coding on HTTP/1.1, close-delimited on HTTP/1.0. */
void http_stream_begin(http_conn *c, int status, const char *content_type, const char *extra_headers);
/* False when the connection is gone or the client reads too slowly (then it is being closed
 * and the abort callback has run). */
bool http_stream_write(http_conn *c, const char *data, size_t len);
void http_stream_end(http_conn *c);

const char *http_status_text(int status);

#endif
