/* The request side of an HTTP/1.x connection without the socket: bytes in, llhttp with our
 * callbacks (limits, headers, body), complete http_request values out. http.c feeds it what a
 * connection reads; the HTTP fuzz target (tests/fuzz/fuzz_http.c) feeds it arbitrary bytes. */
#ifndef WUSHKV_HTTP_READER_H
#define WUSHKV_HTTP_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <llhttp.h>

#include "http/http.h"
#include "http/text_buf.h"

typedef struct http_reader {
    llhttp_t parser;
    const http_limits *limits; /* not owned; must outlive the reader */
    /* the request being parsed */
    text_buf url, field, value, body;
    bool in_value; /* last header callback was a value: a new field starts a new header */
    bool value_at_read_end; /* the last piece of a header value ended where its read ended */
    size_t header_bytes;
    int error_status; /* a limit hit while parsing: 413, 414, 431, 505, 501 or 400 */
    const char *feed_start; /* the bytes the parser runs over now (http_reader_feed's data and len) */
    size_t feed_len;
    uint64_t chunk_left; /* a chunked body: the current chunk's data bytes still to come */
    int crlf_next;       /* 1 or 2: the byte of the CRLF after a chunk's data still to check; 0: none */
    /* The method bytes so far in this message (its first 32): what llhttp took, and how many of
     * them came in earlier reads, so a known method's prefix ("PO") that a later read turns into
     * an unknown one ("PO" then " / HTTP/1.1") is judged with them. Once llhttp has refused the
     * method (method_refused) they are the request line's bytes so far, kept until a read tells a
     * method token and its space (501) from garbage (400) as one read would. */
    char method_bytes[32];
    size_t method_len, method_before_feed;
    bool method_refused;
    const char *error_msg; /* what to say with it, when not the status's usual words (a static string) */
    bool message_done;
    bool answered; /* the owner answered the request from its head (on_continue); the stream is lost */
    bool nomem;    /* an allocation failed inside a parser callback */
    http_request req;
    /* set by a complete request */
    bool keep_alive, head;
    /* hooks (either may be NULL): a request's first byte; "Expect: 100-continue" in its headers,
     * called with req's method, path, query and headers filled in (its body not yet read):
     * true to have the body sent, false when the owner answered the request from its head. */
    void (*on_begin)(void *owner);
    bool (*on_continue)(void *owner);
    void *owner;
} http_reader;

typedef enum {
    HTTP_READ_MORE,    /* every byte used, no complete request yet */
    HTTP_READ_REQUEST, /* a complete request in r->req (answer it, then http_reader_next) */
    HTTP_READ_ERROR,   /* malformed or over a limit: *status and msg say what to answer; the stream is lost */
    HTTP_READ_ANSWERED, /* on_continue answered the request from its head: the body is unread, the stream lost */
    HTTP_READ_NOMEM,   /* out of memory */
} http_read_result;

void http_reader_init(http_reader *r, const http_limits *limits, void (*on_begin)(void *), bool (*on_continue)(void *),
                      void *owner);
/* Parses from data[0, len); *used gets the bytes consumed (the rest belongs to later requests). */
http_read_result http_reader_feed(http_reader *r, const char *data, size_t len, size_t *used, int *status, char *msg,
                                  size_t msgcap);
/* Forgets the current request (frees it) and lets the parser go on to the next one. */
void http_reader_next(http_reader *r);
/* Frees the current request's memory (the reader may be dropped afterwards). */
void http_reader_reset(http_reader *r);

#endif
