/* HTTP/1.1 connections on libuv: read -> llhttp -> one request at a time to the handler ->
 * response writes; keep-alive, pipelining (later requests wait, parsed, in a buffer), limits and
 * timeouts. The handler may answer later (after the engine works): until it does, the
 * connection keeps reading so that a client that goes away is noticed at once. */
#include "http/http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_reader.h"
#include "http/text_buf.h"

/* Bytes a client may send ahead (pipelined requests) while its current request is answered. */
#define PIPELINE_BUFFER_MAX (64 * 1024)

typedef enum { C_IDLE, C_READING, C_BUSY, C_CLOSING } conn_state;

struct http_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    http_server *srv;
    http_conn *prev, *next; /* the server's list */
    int open_handles;       /* freed when both handles are closed */
    conn_state state;
    http_reader rd; /* the request being parsed (and, while busy, answered) */

    text_buf pending; /* received but not parsed (pipelined requests) */
    bool processing; /* inside conn_process: re-entry only sets more work */

    /* the response */
    bool keep_alive, streaming, chunked;
    bool head; /* a HEAD request: the headers GET would get, never a body (RFC 9110 9.3.2) */
    void *req_data;
    http_abort_cb on_abort;

    bool overflow;      /* came beyond max_conns: one request, a short deadline, then closed */
    bool released;      /* its place in n_served / n_overflow is given back (or was never taken) */
    bool handles_closing; /* uv_close called: state C_CLOSING alone may still await a shutdown */
    bool lingering;     /* its write side shut, it drops what the client still sends (on_shutdown) */
    uint64_t idle_since; /* loop time (ms) it last became idle: the oldest idle one is reaped first */
};

struct http_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    bool listening;
    http_limits limits;
    http_handler handler;
    http_head_handler on_head; /* NULL: every 100-continue request gets 100 Continue */
    void *data;
    http_conn *conns;
    int n_conns;    /* every connection whose handles are open */
    int n_served;   /* of those, the ones within max_conns and not closing */
    int n_overflow; /* the over-limit ones being read or answered */
    int n_lingering; /* closing ones still reading (HTTP_LINGERING_CONNS) */
    uint64_t n_rejected, n_reaped;
    bool closing;
    int port;
};

typedef struct write_req {
    uv_write_t req;
    http_conn *c;
    char data[];
} write_req;

static void conn_process(http_conn *c);
static void conn_close(http_conn *c);

void http_limits_default(http_limits *l) {
    l->max_header_bytes = 16 * 1024;
    l->max_body_bytes = 8 * 1024 * 1024;
    l->idle_timeout_ms = 60 * 1000;
    l->request_timeout_ms = 30 * 1000;
    l->max_write_queue = 8 * 1024 * 1024;
    l->max_conns = 1024;
}

const char *http_status_text(int status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

/* ---- timers ------------------------------------------------------------------------------------ */

static void on_timeout(uv_timer_t *t) {
    http_conn *c = t->data;
    if (c->state == C_READING) {
        /* A slow (or stalled) request: tell the client why before closing. */
        static const char msg[] = "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        uv_buf_t b = uv_buf_init((char *)msg, sizeof msg - 1);
        uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    }
    conn_close(c);
}

/* Idle: the keep-alive timeout; reading: the whole-request deadline, armed at the request's first
 * byte and never extended (a client trickling one byte at a time gains nothing); busy: none,
 * since generation may take long and the client's disconnect is seen anyway. */
static void set_state(http_conn *c, conn_state s) {
    conn_state old = c->state;
    const http_limits *l = &c->srv->limits;
    c->state = s;
    if (s == C_IDLE) {
        /* An over-limit connection has one short deadline from its accept to its whole request. */
        c->idle_since = uv_now(c->srv->loop);
        if (!c->overflow) uv_timer_start(&c->timer, on_timeout, l->idle_timeout_ms, 0);
        else if (!uv_is_active((uv_handle_t *)&c->timer)) uv_timer_start(&c->timer, on_timeout, HTTP_OVERFLOW_TIMEOUT_MS, 0);
    } else if (s == C_READING && old != C_READING && !c->overflow) {
        uv_timer_start(&c->timer, on_timeout, l->request_timeout_ms, 0);
    } else if (s == C_BUSY) {
        uv_timer_stop(&c->timer);
    }
}

/* ---- closing ----------------------------------------------------------------------------------- */

static void request_free(http_conn *c) {
    http_reader_reset(&c->rd);
    c->head = false;
    c->streaming = c->chunked = false;
    c->req_data = NULL;
    c->on_abort = NULL;
}

static void on_handle_closed(uv_handle_t *h) {
    http_conn *c = h->data;
    if (--c->open_handles > 0) return;
    http_server *s = c->srv;
    request_free(c);
    text_buf_free(&c->pending);
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    s->n_conns--;
    free(c);
    if (s->closing && s->n_conns == 0 && !s->listening) free(s);
}

/* A closing connection leaves the count at once, so a new one may take its place before libuv has
 * finished closing the old handles. */
static void release_slot(http_conn *c) {
    if (c->released) return;
    c->released = true;
    if (c->overflow) c->srv->n_overflow--;
    else c->srv->n_served--;
}

/* Closes the socket now. Also the end of a close after writes (on_shutdown), whose state is
 * C_CLOSING already: testing the state here instead of handles_closing leaked every connection the
 * server closed after its response (Connection: close, HTTP/1.0, a refused request), one file
 * descriptor each, for good. */
static void conn_close(http_conn *c) {
    if (c->handles_closing) return;
    c->handles_closing = true;
    release_slot(c);
    if (c->lingering) c->srv->n_lingering--;
    c->state = C_CLOSING;
    if (c->on_abort) {
        http_abort_cb cb = c->on_abort;
        c->on_abort = NULL;
        cb(c, c->req_data);
    }
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

static void on_linger_end(uv_timer_t *t) { conn_close(t->data); }
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b);
static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b);

/* The response is sent and the write side shut: linger (HTTP_LINGER_MS), reading and dropping what
 * the client still sends (on_read drops it in C_CLOSING), until it closes too. */
static void on_shutdown(uv_shutdown_t *req, int status) {
    http_conn *c = req->data;
    free(req);
    http_server *s = c->srv;
    if (status < 0 || c->handles_closing || s->closing || s->n_lingering >= HTTP_LINGERING_CONNS ||
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        conn_close(c);
        return;
    }
    c->lingering = true;
    s->n_lingering++;
    uv_timer_start(&c->timer, on_linger_end, HTTP_LINGER_MS, 0);
}

/* Closes after the queued writes are sent (uv_close alone would cancel them). */
static void conn_close_after_writes(http_conn *c) {
    if (c->state == C_CLOSING) return;
    uv_shutdown_t *req = malloc(sizeof *req);
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_timer_stop(&c->timer);
    if (!req || (req->data = c, uv_shutdown(req, (uv_stream_t *)&c->tcp, on_shutdown) != 0)) {
        free(req);
        conn_close(c);
        return;
    }
    /* Nothing more may be written or dispatched; on_abort is not due (the response ended). */
    release_slot(c);
    c->state = C_CLOSING;
    c->on_abort = NULL;
}

/* ---- writing ----------------------------------------------------------------------------------- */

static void on_written(uv_write_t *req, int status) {
    write_req *w = (write_req *)req;
    if (status < 0 && status != UV_ECANCELED) conn_close(w->c);
    free(w);
}

static bool conn_write(http_conn *c, const char *data, size_t len) {
    if (c->state == C_CLOSING) return false;
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > c->srv->limits.max_write_queue) {
        conn_close(c); /* the client stopped reading: do not buffer without bound */
        return false;
    }
    write_req *w = malloc(sizeof *w + len);
    if (!w) {
        conn_close(c);
        return false;
    }
    w->c = c;
    memcpy(w->data, data, len);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
        free(w);
        conn_close(c);
        return false;
    }
    return true;
}

static bool conn_printf(http_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool conn_printf(http_conn *c, const char *fmt, ...) {
    char small[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    if ((size_t)n < sizeof small) return conn_write(c, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return false;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bool ok = conn_write(c, big, (size_t)n);
    free(big);
    return ok;
}

/* The response ended: the next pipelined request (if any) is parsed, else the connection idles. */
static void response_done(http_conn *c) {
    if (c->state == C_CLOSING) return;
    request_free(c);
    if (!c->keep_alive || c->srv->closing) {
        conn_close_after_writes(c);
        return;
    }
    set_state(c, C_IDLE);
    http_reader_next(&c->rd);
    conn_process(c);
}

void http_respond(http_conn *c, int status, const char *content_type, const char *body, size_t len,
                  const char *extra_headers) {
    if (c->state != C_BUSY) return;
    conn_printf(c, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: %s\r\n%s\r\n", status,
                http_status_text(status), content_type, len, c->keep_alive ? "keep-alive" : "close",
                extra_headers ? extra_headers : "");
    if (len && !c->head) conn_write(c, body, len);
    response_done(c);
}

void http_stream_begin(http_conn *c, int status, const char *content_type, const char *extra_headers) {
    if (c->state != C_BUSY) return;
    c->streaming = true;
    c->chunked = c->rd.req.http_minor >= 1;
    if (!c->chunked) c->keep_alive = false; /* HTTP/1.0: the end of the body is the close */
    conn_printf(c, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nCache-Control: no-cache\r\n%sConnection: %s\r\n%s\r\n",
                status, http_status_text(status), content_type, c->chunked ? "Transfer-Encoding: chunked\r\n" : "",
                c->keep_alive ? "keep-alive" : "close", extra_headers ? extra_headers : "");
}

bool http_stream_write(http_conn *c, const char *data, size_t len) {
    if (c->state != C_BUSY || !c->streaming) return false;
    if (len == 0 || c->head) return true; /* an empty chunk would end the body; HEAD has none */
    if (!c->chunked) return conn_write(c, data, len);
    return conn_printf(c, "%zx\r\n", len) && conn_write(c, data, len) && conn_write(c, "\r\n", 2);
}

void http_stream_end(http_conn *c) {
    if (c->state != C_BUSY || !c->streaming) return;
    if (c->chunked && !c->head) conn_write(c, "0\r\n\r\n", 5);
    response_done(c);
}

void http_conn_set_request_data(http_conn *c, void *data, http_abort_cb on_abort) {
    c->req_data = data;
    c->on_abort = on_abort;
}

const char *http_header_get(const http_request *r, const char *lower_name) {
    for (int i = 0; i < r->n_headers; i++)
        if (strcmp(r->headers[i].name, lower_name) == 0) return r->headers[i].value;
    return NULL;
}

/* ---- parsing (http_reader.c) ------------------------------------------------------------------ */

static void on_request_begin(void *owner) { set_state(owner, C_READING); }

/* "Expect: 100-continue": the server's head handler may refuse the request now, before the client
 * sends a body that would change nothing (a wrong route, a missing key); else 100 Continue. */
static bool on_expect_continue(void *owner) {
    http_conn *c = owner;
    if (c->srv->on_head) {
        const bool keep_alive = c->keep_alive;
        c->keep_alive = false; /* an answer now leaves the body unread: the connection ends with it */
        c->head = c->rd.head;
        c->rd.req.over_limit = c->overflow;
        /* Busy for http_respond, without set_state: the request's deadline stays as armed. */
        c->state = C_BUSY;
        if (c->srv->on_head(c, &c->rd.req, c->srv->data)) return false;
        c->keep_alive = keep_alive;
        c->head = false;
        c->state = C_READING;
    }
    conn_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    return true;
}

/* A request the parser refused: answer with a small JSON error and close (the stream position is
 * lost, so the connection cannot be reused). */
static void reject(http_conn *c, int status, const char *message) {
    char body[512];
    int n = snprintf(body, sizeof body,
                     "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}",
                     message);
    c->keep_alive = false;
    set_state(c, C_BUSY);
    http_respond(c, status, "application/json", body, (size_t)n, NULL);
}

/* Parses pending bytes and dispatches complete requests, one at a time. */
static void conn_process(http_conn *c) {
    if (c->processing) return; /* called from inside a handler: the loop below goes on */
    c->processing = true;
    while ((c->state == C_IDLE || c->state == C_READING) && c->pending.len > 0) {
        size_t used;
        int status;
        char msg[200];
        http_read_result rr = http_reader_feed(&c->rd, c->pending.p, c->pending.len, &used, &status, msg, sizeof msg);
        if (rr == HTTP_READ_ERROR) {
            reject(c, status, msg);
            break;
        }
        if (rr == HTTP_READ_ANSWERED) { /* the answer went out; what the client sends now is dropped */
            c->pending.len = 0;
            break;
        }
        memmove(c->pending.p, c->pending.p + used, c->pending.len - used);
        c->pending.len -= used;
        if (rr == HTTP_READ_MORE) continue;
        if (rr == HTTP_READ_NOMEM) {
            conn_close(c);
            break;
        }
        c->head = c->rd.head;
        c->keep_alive = c->rd.keep_alive && !c->overflow;
        c->rd.req.over_limit = c->overflow;
        set_state(c, C_BUSY);
        c->srv->handler(c, &c->rd.req, c->srv->data); /* may answer at once: then state is IDLE again */
    }
    c->processing = false;
}

/* ---- reading and accepting --------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
    (void)h;
    (void)suggested;
    static char slab[64 * 1024]; /* the loop thread reads one buffer at a time; copied out at once */
    *b = uv_buf_init(slab, sizeof slab);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
    http_conn *c = s->data;
    if (n == 0) return;
    if (n < 0) {
        /* EOF or error: idle -> a normal close; reading -> a request cut off; busy -> the client
         * went away mid-response, which the abort callback turns into a cancellation. */
        conn_close(c);
        return;
    }
    if (c->state == C_CLOSING) return;
    if (c->state == C_BUSY && c->pending.len + (size_t)n > PIPELINE_BUFFER_MAX) {
        conn_close(c); /* a client pushing data while its request is served is not pipelining */
        return;
    }
    if (!text_buf_add(&c->pending, b->base, (size_t)n)) {
        conn_close(c);
        return;
    }
    if (c->state == C_IDLE && c->pending.len) set_state(c, C_READING);
    conn_process(c);
}

/* The keep-alive connection idle the longest (waiting for its next request, nothing buffered). */
static http_conn *oldest_idle(http_server *s) {
    http_conn *best = NULL;
    for (http_conn *c = s->conns; c; c = c->next)
        if (c->state == C_IDLE && !c->overflow && !c->released && c->pending.len == 0 &&
            (!best || c->idle_since < best->idle_since)) /* released: the new one, not yet counted */
            best = c;
    return best;
}

/* Beyond max_conns: reap the oldest idle connection (as nginx does) and serve the new one; with none
 * idle, read the new one's request as an over-limit connection (the handler answers /health and
 * refuses the rest); with too many of those too, answer 503 unread and close. Returns false when
 * the connection was closed here. */
static bool admit(http_server *s, http_conn *c) {
    bool over = s->limits.max_conns > 0 && s->n_served >= s->limits.max_conns;
    if (over) {
        http_conn *idle = oldest_idle(s);
        if (idle) {
            conn_close(idle);
            s->n_reaped++;
            over = false;
        }
    }
    c->released = false;
    c->overflow = over;
    if (!over) {
        s->n_served++;
        return true;
    }
    s->n_rejected++;
    if (s->n_overflow < HTTP_OVERFLOW_CONNS) {
        s->n_overflow++;
        return true;
    }
    static const char msg[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                              "Content-Length: 129\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
                              "{\"error\":{\"message\":\"too many open connections; retry shortly\",\"type\":"
                              "\"server_error\",\"param\":null,\"code\":\"too_many_connections\"}}";
    uv_buf_t b = uv_buf_init((char *)msg, sizeof msg - 1);
    uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    c->released = true;
    conn_close(c);
    return false;
}

static void on_connection(uv_stream_t *l, int status) {
    http_server *s = l->data;
    if (status < 0) return;
    http_conn *c = calloc(1, sizeof *c);
    if (!c) return;
    c->released = true; /* counted by admit() once accepted */
    c->srv = s;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->open_handles = 2;
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    if (!admit(s, c)) return;
    uv_tcp_nodelay(&c->tcp, 1); /* SSE chunks are small and latency matters */
    http_reader_init(&c->rd, &s->limits, on_request_begin, on_expect_continue, c);
    set_state(c, C_IDLE);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

int http_server_start(http_server **out, uv_loop_t *loop, const char *host, int port, const http_limits *limits,
                      http_handler handler, void *server_data, char *err, size_t errlen) {
    *out = NULL;
    http_server *s = calloc(1, sizeof *s);
    if (!s) return snprintf(err, errlen, "out of memory"), UV_ENOMEM;
    s->loop = loop;
    s->limits = *limits;
    s->handler = handler;
    s->data = server_data;
    struct sockaddr_storage addr;
    int rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
    if (rc) rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr);
    if (rc) {
        snprintf(err, errlen, "'%s' is not an IPv4 or IPv6 address", host);
        free(s);
        return rc;
    }
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    s->listening = true;
    rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
    if (!rc) rc = uv_listen((uv_stream_t *)&s->listener, 512, on_connection);
    if (rc) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", host, port, uv_strerror(rc));
        s->closing = true;
        http_server_stop_accepting(s);
        return rc;
    }
    struct sockaddr_storage bound;
    int len = sizeof bound;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &len);
    s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                : ((struct sockaddr_in *)&bound)->sin_port);
    *out = s;
    return 0;
}

void http_server_set_head_handler(http_server *s, http_head_handler on_head) { s->on_head = on_head; }

int http_server_port(const http_server *s) { return s->port; }
int http_server_n_conns(const http_server *s) { return s->n_conns; }

void http_server_conn_stats(const http_server *s, http_conn_stats *out) {
    out->open = s->n_conns;
    out->rejected = s->n_rejected;
    out->reaped = s->n_reaped;
}

static void on_listener_closed(uv_handle_t *h) {
    http_server *s = h->data;
    s->listening = false;
    if (s->closing && s->n_conns == 0) free(s);
}

void http_server_stop_accepting(http_server *s) {
    if (!s->listening || uv_is_closing((uv_handle_t *)&s->listener)) return;
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}

void http_server_close(http_server *s) {
    s->closing = true;
    for (http_conn *c = s->conns; c; c = c->next) conn_close(c);
    if (s->listening) http_server_stop_accepting(s);
    else if (s->n_conns == 0) free(s);
}
