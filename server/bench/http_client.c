/* Blocking HTTP/1.1 client for `wushkv bench` (see http_client.h): POSIX sockets, llhttp for the
 * response. One connection per request keeps it simple and the measurement honest: no request
 * waits for a pooled connection, and a server that closes a keep-alive connection early cannot
 * turn into a retry. */
#include "bench/http_client.h"

#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "llhttp.h"

/* Request head: method, path, Host, Authorization (a key of any sensible length), the rest. */
#define HTTP_CLIENT_MAX_HEAD 4096
#define HTTP_CLIENT_READ_BUF 16384

bool http_target_parse(const char *url, http_target *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    if (strlen(url) >= sizeof t->url) return snprintf(err, errlen, "URL too long"), false;
    snprintf(t->url, sizeof t->url, "%s", url);
    if (strncmp(url, "https://", 8) == 0)
        return snprintf(err, errlen, "https is not supported (use http://HOST:PORT)"), false;
    if (strncmp(url, "http://", 7) != 0)
        return snprintf(err, errlen, "expected http://HOST[:PORT][/PATH], got '%s'", url), false;
    const char *a = url + 7;
    const char *slash = strchr(a, '/');
    size_t alen = slash ? (size_t)(slash - a) : strlen(a);
    const char *host = a, *port = NULL;
    size_t hlen;
    if (alen > 0 && a[0] == '[') { /* [IPv6]:port */
        const char *close = memchr(a, ']', alen);
        if (!close) return snprintf(err, errlen, "unterminated '[' in '%s'", url), false;
        host = a + 1;
        hlen = (size_t)(close - host);
        if (close + 1 < a + alen) {
            if (close[1] != ':') return snprintf(err, errlen, "expected ':' after ']' in '%s'", url), false;
            port = close + 2;
        }
    } else {
        const char *colon = memchr(a, ':', alen);
        hlen = colon ? (size_t)(colon - a) : alen;
        if (colon) port = colon + 1;
    }
    if (hlen == 0 || hlen >= sizeof t->host) return snprintf(err, errlen, "no host in '%s'", url), false;
    memcpy(t->host, host, hlen);
    if (port) {
        size_t plen = (size_t)(a + alen - port);
        long p = 0;
        for (size_t i = 0; i < plen; i++) {
            if (port[i] < '0' || port[i] > '9' || p > 65535) {
                p = -1;
                break;
            }
            p = p * 10 + (port[i] - '0');
        }
        if (plen == 0 || p < 1 || p > 65535) return snprintf(err, errlen, "bad port in '%s'", url), false;
        snprintf(t->port, sizeof t->port, "%ld", p);
    } else {
        snprintf(t->port, sizeof t->port, "80");
    }
    const char *path = slash ? slash : "";
    size_t plen = strlen(path);
    while (plen > 0 && path[plen - 1] == '/') plen--;
    if (plen >= 3 && memcmp(path + plen - 3, "/v1", 3) == 0) plen -= 3; /* OpenAI's base_url form */
    while (plen > 0 && path[plen - 1] == '/') plen--;
    if (plen >= sizeof t->prefix || memchr(path, '?', plen) || memchr(path, '#', plen))
        return snprintf(err, errlen, "unsupported path in '%s'", url), false;
    memcpy(t->prefix, path, plen);
    if (strchr(t->host, ':')) snprintf(t->host_header, sizeof t->host_header, "[%s]:%s", t->host, t->port);
    else snprintf(t->host_header, sizeof t->host_header, "%s:%s", t->host, t->port);
    return true;
}

bool http_target_resolve(http_target *t, char *err, size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(t->host, t->port, &hints, &res);
    if (rc != 0) return snprintf(err, errlen, "cannot resolve '%s': %s", t->host, gai_strerror(rc)), false;
    memcpy(&t->addr, res->ai_addr, res->ai_addrlen);
    t->addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    return true;
}

/* ---- response parsing (llhttp callbacks) -------------------------------------------------------- */

typedef struct response_ctx {
    http_body_cb on_body;
    void *ud;
    int status;
    bool complete;
} response_ctx;

static int on_headers_complete(llhttp_t *p) {
    ((response_ctx *)p->data)->status = (int)llhttp_get_status_code(p);
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
    response_ctx *r = p->data;
    if (r->on_body && !r->on_body(r->ud, r->status, at, len)) return -1; /* HPE_USER: stop */
    return 0;
}

static int on_message_complete(llhttp_t *p) {
    ((response_ctx *)p->data)->complete = true;
    return HPE_PAUSED; /* one response per connection: stop at its end */
}

/* ---- one request ---------------------------------------------------------------------------- */

static bool send_all(int fd, const char *p, size_t n, char *err, size_t errlen) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            snprintf(err, errlen, "send: %s", errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : strerror(errno));
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

bool http_request(const http_target *t, const char *method, const char *path, const char *api_key,
                  const char *body, size_t body_len, double timeout_s, http_body_cb on_body_cb, void *ud,
                  int *status, char *err, size_t errlen) {
    *status = 0;
    char head[HTTP_CLIENT_MAX_HEAD];
    int hn = snprintf(head, sizeof head,
                      "%s %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: wushkv-bench\r\nAccept: */*\r\n"
                      "Connection: close\r\n",
                      method, t->prefix, path, t->host_header);
    if (body && hn > 0 && (size_t)hn < sizeof head)
        hn += snprintf(head + hn, sizeof head - (size_t)hn, "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                       body_len);
    if (api_key && hn > 0 && (size_t)hn < sizeof head)
        hn += snprintf(head + hn, sizeof head - (size_t)hn, "Authorization: Bearer %s\r\n", api_key);
    if (hn > 0 && (size_t)hn < sizeof head) hn += snprintf(head + hn, sizeof head - (size_t)hn, "\r\n");
    if (hn <= 0 || (size_t)hn >= sizeof head) return snprintf(err, errlen, "request head too long"), false;

    int fd = socket(t->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return snprintf(err, errlen, "socket: %s", strerror(errno)), false;
    /* On Linux SO_SNDTIMEO also bounds connect(). */
    struct timeval tv = {.tv_sec = (time_t)timeout_s,
                         .tv_usec = (suseconds_t)((timeout_s - floor(timeout_s)) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);

    bool ok = false;
    if (connect(fd, (const struct sockaddr *)&t->addr, t->addr_len) != 0) {
        snprintf(err, errlen, "connect to %s: %s", t->host_header,
                 errno == EINPROGRESS || errno == EAGAIN ? "timed out" : strerror(errno));
        goto out;
    }
    if (!send_all(fd, head, (size_t)hn, err, errlen)) goto out;
    if (body && !send_all(fd, body, body_len, err, errlen)) goto out;

    llhttp_settings_t settings;
    llhttp_settings_init(&settings);
    settings.on_headers_complete = on_headers_complete;
    settings.on_body = on_body;
    settings.on_message_complete = on_message_complete;
    llhttp_t parser;
    llhttp_init(&parser, HTTP_RESPONSE, &settings);
    response_ctx rc = {.on_body = on_body_cb, .ud = ud};
    parser.data = &rc;

    char buf[HTTP_CLIENT_READ_BUF];
    while (!rc.complete) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            snprintf(err, errlen, "receive: %s",
                     errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : strerror(errno));
            goto out;
        }
        llhttp_errno_t e = n == 0 ? llhttp_finish(&parser) : llhttp_execute(&parser, buf, (size_t)n);
        if (e == HPE_PAUSED) break; /* the response is complete */
        if (e == HPE_USER) {
            snprintf(err, errlen, "aborted while reading the response");
            goto out;
        }
        if (e != HPE_OK) {
            snprintf(err, errlen, "bad HTTP response: %s (%s)", llhttp_errno_name(e), llhttp_get_error_reason(&parser));
            goto out;
        }
        if (n == 0 && !rc.complete) {
            snprintf(err, errlen, "connection closed before the response was complete");
            goto out;
        }
    }
    *status = rc.status;
    ok = true;
out:
    close(fd);
    return ok;
}
