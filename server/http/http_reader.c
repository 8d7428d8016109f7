/* The request side of an HTTP/1.x connection (see http_reader.h): llhttp's callbacks collect the
 * target, headers and body under the limits, and a complete message becomes an http_request. */
#include "http/http_reader.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static char *trim_dup(const char *s, size_t n, bool lower) {
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    char *d = malloc(n + 1);
    if (!d) return NULL;
    for (size_t i = 0; i < n; i++) d[i] = lower ? (char)tolower((unsigned char)s[i]) : s[i];
    d[n] = 0;
    return d;
}

static http_reader *reader_of(llhttp_t *p) { return p->data; }

/* Every byte of the request line and headers counts against the header limit. */
static int count_header_bytes(http_reader *r, size_t n) {
    r->header_bytes += n;
    if (r->header_bytes > r->limits->max_header_bytes) {
        r->error_status = 431;
        return -1;
    }
    return 0;
}

static int on_message_begin(llhttp_t *p) {
    http_reader *r = reader_of(p);
    r->method_len = r->method_before_feed = 0;
    if (r->on_begin) r->on_begin(r->owner);
    return 0;
}

static int on_method(llhttp_t *p, const char *at, size_t n) {
    http_reader *r = reader_of(p);
    for (size_t i = 0; i < n && r->method_len < sizeof r->method_bytes; i++) r->method_bytes[r->method_len++] = at[i];
    return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t n) {
    http_reader *r = reader_of(p);
    if (r->url.len + n > HTTP_MAX_TARGET) {
        r->error_status = 414;
        return -1;
    }
    if (count_header_bytes(r, n)) return -1;
    return text_buf_add(&r->url, at, n) ? 0 : -1;
}

/* RFC 9110 5.6.2's tchar: what a field name is made of (no space before its colon, RFC 9112 5.1). */
static bool is_tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A header name the framing rules refuse (400): empty or not a token (RFC 9112 5.1). Folded
 * values are refused as they arrive (on_header_value). */
static bool bad_header(const http_reader *r) {
    if (r->field.len == 0) return true;
    for (size_t i = 0; i < r->field.len; i++)
        if (!is_tchar((unsigned char)r->field.p[i])) return true;
    return false;
}

static int push_header(http_reader *r) {
    if (!r->in_value) return 0;
    r->in_value = false;
    if (bad_header(r)) {
        r->error_status = 400;
        r->error_msg = "malformed header field (a name that is not a token)";
        return -1;
    }
    if (r->req.n_headers == HTTP_MAX_HEADERS) {
        r->error_status = 431;
        return -1;
    }
    http_header *h = &r->req.headers[r->req.n_headers];
    h->name = trim_dup(r->field.p ? r->field.p : "", r->field.len, true);
    h->value = trim_dup(r->value.p ? r->value.p : "", r->value.len, false);
    if (!h->name || !h->value) {
        free(h->name);
        free(h->value);
        h->name = h->value = NULL;
        return -1;
    }
    r->req.n_headers++;
    r->field.len = r->value.len = 0;
    return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t n) {
    http_reader *r = reader_of(p);
    if (count_header_bytes(r, n) || push_header(r)) return -1;
    return text_buf_add(&r->field, at, n) ? 0 : -1;
}

static int on_header_value(llhttp_t *p, const char *at, size_t n) {
    http_reader *r = reader_of(p);
    if (count_header_bytes(r, n)) return -1;
    /* llhttp hands a folded value (obs-fold: a line starting with a space continues the last
     * value) over as a second piece of it; RFC 9112 5.2 lets a server refuse it, and a folded
     * Content-Length read two ways by two parsers smuggles a request past a proxy. A value also
     * comes in pieces when a read ends inside it, and only then: a second piece is a fold unless
     * it starts a read and the piece before it ended its read. */
    const bool continues_read_cut = at == r->feed_start && r->value_at_read_end;
    if (r->in_value && r->value.len > 0 && !continues_read_cut) {
        r->error_status = 400;
        r->error_msg = "a header value folded over lines (obs-fold)";
        return -1;
    }
    r->value_at_read_end = at + n == r->feed_start + r->feed_len;
    r->in_value = true;
    return text_buf_add(&r->value, at, n) ? 0 : -1;
}

/* The request target -> path and query. The absolute form (RFC 9112 3.2.2, "GET
 * http://host:port/path?q") MUST be accepted by a server: its route is what follows the authority
 * ("/" when nothing does). */
static bool split_target(const char *url, http_request *q) {
    const char *sep = url[0] != '/' ? strstr(url, "://") : NULL;
    size_t scheme = sep ? (size_t)(sep - url) : 0;
    if ((scheme == 4 && strncasecmp(url, "http", 4) == 0) || (scheme == 5 && strncasecmp(url, "https", 5) == 0))
        url = sep + 3 + strcspn(sep + 3, "/?");
    const char *qm = strchr(url, '?');
    size_t plen = qm ? (size_t)(qm - url) : strlen(url);
    q->path = plen ? trim_dup(url, plen, false) : strdup("/");
    q->query = strdup(qm ? qm + 1 : "");
    return q->path && q->query;
}

/* The request line's parts into req (once: at the head for a 100-continue check, else at the end). */
static bool fill_head(http_reader *r) {
    http_request *q = &r->req;
    if (q->path) return true; /* filled already (a failed fill leaves no path) */
    q->method = llhttp_method_name((llhttp_method_t)r->parser.method);
    q->http_minor = r->parser.http_minor;
    r->head = r->parser.method == HTTP_HEAD;
    if (split_target(r->url.p ? r->url.p : "/", q)) return true;
    free(q->path);
    free(q->query);
    q->path = q->query = NULL;
    return false;
}

static bool finish_request(http_reader *r) {
    http_request *q = &r->req;
    if (!fill_head(r)) return false;
    if (!r->body.p && !text_buf_add(&r->body, "", 0)) return false;
    q->body = r->body.p;
    q->body_len = r->body.len;
    r->keep_alive = llhttp_should_keep_alive(&r->parser);
    return true;
}

/* RFC 9112 3.2: Host = uri-host [ ":" port ] (RFC 3986: an IP literal in brackets or a reg-name of
 * unreserved, sub-delims and %XX; port = *DIGIT), or empty. */
static bool host_value_valid(const char *v) {
    const char *c = v;
    if (*c == '[') {
        for (c++; *c && *c != ']'; c++) /* ('%': RFC 6874's zone, %25eth0) */
            if (!isalnum((unsigned char)*c) && !strchr(":.-_~!$&'()*+,;=%", *c)) return false;
        if (*c++ != ']') return false;
    } else {
        for (; *c && *c != ':'; c++) {
            if (*c == '%') {
                if (!isxdigit((unsigned char)c[1]) || !isxdigit((unsigned char)c[2])) return false;
                c += 2;
            } else if (!isalnum((unsigned char)*c) && !strchr("-._~!$&'()*+,;=", *c)) {
                return false;
            }
        }
    }
    if (*c == ':')
        for (c++; *c; c++)
            if (!isdigit((unsigned char)*c)) return false;
    return *c == 0;
}

static int on_headers_complete(llhttp_t *p) {
    http_reader *r = reader_of(p);
    if (push_header(r)) return -1;
    /* HTTP/1.0 and 1.1 only: a 0.9-style line (no version) or another major version would be
     * answered in a framing the client does not speak (RFC 9112 2.3: 505 for a major we lack). */
    if (p->http_major != 1) {
        r->error_status = p->http_major >= 2 ? 505 : 400;
        return -1;
    }
    /* RFC 9112 3.2: an HTTP/1.1 request has exactly one Host field. */
    int hosts = 0;
    for (int i = 0; i < r->req.n_headers; i++) hosts += strcmp(r->req.headers[i].name, "host") == 0;
    if (p->http_minor >= 1 && hosts != 1) {
        r->error_status = 400;
        r->error_msg = hosts ? "more than one Host header" : "an HTTP/1.1 request needs a Host header";
        return -1;
    }
    const char *host = http_header_get(&r->req, "host");
    if (host && !host_value_valid(host)) {
        r->error_status = 400;
        r->error_msg = "the Host header is not a host[:port]";
        return -1;
    }
    /* The one transfer coding we decode is chunked (RFC 9112 6.1: 501 for one we do not know;
     * "gzip, chunked" read as plain chunked would hand the handler compressed bytes). */
    const char *te = http_header_get(&r->req, "transfer-encoding");
    if (te && strcasecmp(te, "chunked") != 0) {
        r->error_status = 501;
        r->error_msg = "transfer coding not implemented (only chunked)";
        return -1;
    }
    /* A declared length over the limit is refused before the body is read. */
    if ((p->flags & F_CONTENT_LENGTH) && p->content_length > r->limits->max_body_bytes) {
        r->error_status = 413;
        return -1;
    }
    /* 100 Continue only where a client may wait for it: an HTTP/1.1 request (a 1.0 client does
     * not know the status, RFC 9110 10.1.1) that still has a body to send. */
    const char *expect = http_header_get(&r->req, "expect");
    const bool body_to_come = (p->flags & F_CHUNKED) || ((p->flags & F_CONTENT_LENGTH) && p->content_length > 0);
    if (expect && strcasecmp(expect, "100-continue") == 0 && r->on_continue && p->http_minor >= 1 && body_to_come) {
        /* The owner sees the request line and headers first: one it refuses whatever the body
         * (no such route, no key) is answered before the client sends the body (RFC 9110 10.1.1). */
        if (!fill_head(r)) {
            r->nomem = true;
            return -1;
        }
        if (!r->on_continue(r->owner)) { /* curl waits a second for 100 Continue otherwise */
            r->answered = true;
            return -1;
        }
    }
    return 0;
}

/* RFC 9112 7.1: CRLF ends a chunk's data. llhttp 8.1 takes any two bytes there, so a proxy and
 * this server could frame the same bytes two ways; we check them ourselves. Where the data ends
 * in this read, the bytes after it are here (the parser runs over the read's buffer); the ones a
 * read cut off are checked at the start of the next (crlf_next). */
static int on_chunk_header(llhttp_t *p) {
    http_reader *r = reader_of(p);
    r->chunk_left = p->content_length;
    return 0;
}

static bool check_crlf(http_reader *r, const char *at, const char *end) {
    for (; r->crlf_next > 0 && r->crlf_next < 3 && at < end; at++, r->crlf_next++)
        if (*at != (r->crlf_next == 1 ? '\r' : '\n')) {
            r->error_status = 400;
            r->error_msg = "a chunk's data not followed by CRLF";
            return false;
        }
    if (r->crlf_next == 3) r->crlf_next = 0;
    return true;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
    http_reader *r = reader_of(p);
    if (p->flags & F_CHUNKED) {
        r->chunk_left = n < r->chunk_left ? r->chunk_left - n : 0;
        if (r->chunk_left == 0) {
            r->crlf_next = 1; /* the CR comes next */
            if (!check_crlf(r, at + n, r->feed_start + r->feed_len)) return -1;
        }
    }
    if (r->body.len + n > r->limits->max_body_bytes) {
        r->error_status = 413; /* chunked bodies have no declared length: counted as they come */
        return -1;
    }
    return text_buf_add(&r->body, at, n) ? 0 : -1;
}

static int on_message_complete(llhttp_t *p) {
    http_reader *r = reader_of(p);
    r->message_done = true;
    return HPE_PAUSED; /* one request at a time: later bytes wait for http_reader_next */
}

static const llhttp_settings_t *parser_settings(void) {
    static llhttp_settings_t s;
    static bool init;
    if (!init) {
        llhttp_settings_init(&s);
        s.on_message_begin = on_message_begin;
        s.on_method = on_method;
        s.on_url = on_url;
        s.on_header_field = on_header_field;
        s.on_header_value = on_header_value;
        s.on_headers_complete = on_headers_complete;
        s.on_body = on_body;
        s.on_chunk_header = on_chunk_header;
        s.on_message_complete = on_message_complete;
        init = true;
    }
    return &s;
}

void http_reader_init(http_reader *r, const http_limits *limits, void (*on_begin)(void *), bool (*on_continue)(void *),
                      void *owner) {
    memset(r, 0, sizeof *r);
    r->limits = limits;
    r->on_begin = on_begin;
    r->on_continue = on_continue;
    r->owner = owner;
    llhttp_init(&r->parser, HTTP_REQUEST, parser_settings());
    r->parser.data = r;
}

/* A request line llhttp refused as a method it does not know: 501 when it starts with a token and
 * a space (RFC 9110 9.1), 400 for garbage. A read that ends inside the token waits for the next
 * (method_bytes, method_refused), so a request line cut by a read is judged as the whole line
 * would be. */
static http_read_result judge_unknown_method(http_reader *r, const char *data, size_t len, size_t *used, int *status,
                                             char *msg, size_t msgcap) {
    char line[sizeof r->method_bytes + 1];
    size_t n = r->method_len;
    memcpy(line, r->method_bytes, n);
    for (size_t i = 0; i < len && n < sizeof line; i++) line[n++] = data[i];
    size_t token = 0;
    while (token < n && is_tchar((unsigned char)line[token])) token++;
    if (token == n && n < sizeof r->method_bytes) {
        memcpy(r->method_bytes, line, n);
        r->method_len = n;
        *used = len;
        return HTTP_READ_MORE;
    }
    *used = 0;
    if (token > 0 && token < n && line[token] == ' ') *status = 501, snprintf(msg, msgcap, "method not implemented");
    else *status = 400, snprintf(msg, msgcap, "malformed HTTP request (HPE_INVALID_METHOD)");
    return HTTP_READ_ERROR;
}

http_read_result http_reader_feed(http_reader *r, const char *data, size_t len, size_t *used, int *status, char *msg,
                                  size_t msgcap) {
    if (r->method_refused) return judge_unknown_method(r, data, len, used, status, msg, msgcap);
    r->feed_start = data;
    r->feed_len = len;
    r->method_before_feed = r->method_len;
    llhttp_errno_t e = check_crlf(r, data, data + len) ? llhttp_execute(&r->parser, data, len) : HPE_USER;
    *used = len;
    if (e == HPE_PAUSED_UPGRADE) {
        /* A request asking to switch protocols (Upgrade: h2c, websocket). We speak only
         * HTTP/1.1, which RFC 9110 7.8 lets a server do by ignoring the header: the bytes
         * after it are the next HTTP/1.1 request, so the parser goes on as usual. */
        llhttp_resume_after_upgrade(&r->parser);
        e = HPE_PAUSED;
    }
    if (e == HPE_PAUSED) *used = (size_t)(llhttp_get_error_pos(&r->parser) - data);
    if (e != HPE_OK && e != HPE_PAUSED) {
        *used = 0;
        if (r->answered) return HTTP_READ_ANSWERED;
        if (r->nomem) return HTTP_READ_NOMEM;
        if (r->error_status == 413) *status = 413, snprintf(msg, msgcap, "request body too large");
        else if (r->error_status == 431)
            *status = 431, snprintf(msg, msgcap, "request headers too large (at most %zu bytes and %d fields)",
                                    r->limits->max_header_bytes, HTTP_MAX_HEADERS);
        else if (r->error_status == 414)
            *status = 414, snprintf(msg, msgcap, "request target too long (at most %d bytes)", HTTP_MAX_TARGET);
        else if (e == HPE_INVALID_VERSION && r->parser.http_major == 1 && r->parser.http_minor <= 1)
            /* llhttp's code for a 1.0 or 1.1 line that does not end in CRLF: malformed, not a
             * version this server lacks. */
            *status = 400, snprintf(msg, msgcap, "malformed HTTP request line (its version must end it with CRLF)");
        else if (r->error_status == 505 || e == HPE_INVALID_VERSION)
            *status = 505, snprintf(msg, msgcap, "HTTP version not supported (use HTTP/1.1)");
        else if (r->error_msg) *status = r->error_status, snprintf(msg, msgcap, "%s", r->error_msg);
        else if (r->error_status == 400)
            *status = 400, snprintf(msg, msgcap, "malformed HTTP request line (no HTTP/1.x version)");
        else if (e == HPE_INVALID_METHOD) {
            /* The method's bytes from earlier reads first (a known method's prefix llhttp took),
             * then this read's. */
            r->method_len = r->method_before_feed < sizeof r->method_bytes ? r->method_before_feed : 0;
            r->method_refused = true;
            return judge_unknown_method(r, data, len, used, status, msg, msgcap);
        }
        else *status = 400, snprintf(msg, msgcap, "malformed HTTP request (%s)", llhttp_errno_name(e));
        return HTTP_READ_ERROR;
    }
    if (!r->message_done) return HTTP_READ_MORE;
    return finish_request(r) ? HTTP_READ_REQUEST : HTTP_READ_NOMEM;
}

void http_reader_reset(http_reader *r) {
    text_buf_free(&r->url);
    text_buf_free(&r->field);
    text_buf_free(&r->value);
    text_buf_free(&r->body);
    for (int i = 0; i < r->req.n_headers; i++) {
        free(r->req.headers[i].name);
        free(r->req.headers[i].value);
    }
    free(r->req.path);
    free(r->req.query);
    memset(&r->req, 0, sizeof r->req);
    r->in_value = false;
    r->header_bytes = 0;
    r->error_status = 0;
    r->error_msg = NULL;
    r->chunk_left = 0;
    r->crlf_next = 0;
    r->method_len = r->method_before_feed = 0;
    r->method_refused = false;
    r->message_done = false;
    r->answered = r->nomem = false;
    r->keep_alive = r->head = false;
}

void http_reader_next(http_reader *r) {
    http_reader_reset(r);
    llhttp_resume(&r->parser);
}
