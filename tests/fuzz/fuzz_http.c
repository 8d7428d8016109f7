/* Fuzz target: the HTTP request path without a socket: bytes as a client sends them, pipelined
 * requests included, through llhttp with the daemon's callbacks and limits
 * (server/http/http_reader.c, the code http.c runs on each connection), then the router
 * (api_route_match, server/api/api.c) and, for the OpenAI endpoints, request validation into our
 * request struct (server/api/openai_request.c, fuzz_openai.h). Invariants: a request has a method,
 * a path and a NUL-terminated body of its stated length, at most HTTP_MAX_HEADERS headers with
 * lower-case names, sizes within the limits; a refusal is 400, 413, 414, 431, 501 or 505; every byte is
 * either consumed or refused; a request answered from its head (100-continue) has its head whole. */
#include <ctype.h>
#include <stdint.h>

#include "api/api_int.h"
#include "fuzz_openai.h"
#include "http/http_reader.h"

static int g_begins, g_continues;
static void on_begin(void *owner) { (void)owner; g_begins++; }
/* Every other 100-continue request is answered from its head, as the daemon answers one it refuses
 * whatever its body: the head must be whole then (method, path, query). */
static bool on_continue(void *owner) {
    http_reader *r = owner;
    FZ_CHECK(r->req.method && r->req.path && r->req.query);
    return (g_continues++ & 1) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    http_limits lim;
    http_limits_default(&lim);
    lim.max_header_bytes = 2048; /* small, so the limits are reached */
    lim.max_body_bytes = 4096;
    http_reader r;
    http_reader_init(&r, &lim, on_begin, on_continue, &r);
    const char *p = (const char *)data;
    size_t left = size;
    int requests = 0, stalled = 0;
    /* Two reads' worth: the first byte splits the input, as a socket may. */
    size_t first = size ? data[0] % (size + 1) : 0;
    size_t avail = first;
    while (left > 0) {
        if (avail == 0 || avail > left) avail = left;
        size_t used = 0;
        int status = 0;
        char msg[200];
        http_read_result rr = http_reader_feed(&r, p, avail, &used, &status, msg, sizeof msg);
        if (rr == HTTP_READ_ANSWERED) break; /* answered from its head: the stream ends there */
        if (rr == HTTP_READ_ERROR) {
            FZ_CHECK(status == 400 || status == 413 || status == 414 || status == 431 || status == 501 || status == 505);
            FZ_CHECK(msg[0] != 0);
            break;
        }
        FZ_CHECK(rr != HTTP_READ_NOMEM);
        FZ_CHECK(used <= avail);
        p += used;
        left -= used;
        avail -= used;
        if (rr == HTTP_READ_MORE) {
            /* Every byte, except after an Upgrade request (the parser stops once before going on,
             * as http.c's loop expects): no stalling. */
            stalled = used ? 0 : stalled + 1;
            FZ_CHECK(stalled < 3);
            if (avail == 0) avail = left; /* the next read: the rest */
            continue;
        }
        stalled = 0;
        http_request *q = &r.req;
        requests++;
        FZ_CHECK(q->method && q->path && q->query && q->body);
        FZ_CHECK(q->body[q->body_len] == 0 && q->body_len <= lim.max_body_bytes);
        FZ_CHECK(q->n_headers >= 0 && q->n_headers <= HTTP_MAX_HEADERS);
        FZ_CHECK(r.header_bytes <= lim.max_header_bytes);
        for (int i = 0; i < q->n_headers; i++) {
            FZ_CHECK(q->headers[i].name && q->headers[i].value);
            for (const char *c = q->headers[i].name; *c; c++) FZ_CHECK(!isupper((unsigned char)*c));
            FZ_CHECK(http_header_get(q, q->headers[i].name) != NULL);
        }
        const char *allow = NULL;
        const route *rt = api_route_match(q->method, q->path, &allow);
        FZ_CHECK(!(rt && allow) || rt != NULL);
        if (rt) {
            switch (rt->id) {
            case R_COMPLETIONS: fz_openai(FZ_EP_COMPLETIONS, CHAT_CHATML, q->body, q->body_len); break;
            case R_CHAT: fz_openai(FZ_EP_CHAT, CHAT_GEMMA, q->body, q->body_len); break;
            case R_RESPONSES: fz_openai(FZ_EP_RESPONSES, CHAT_GEMMA, q->body, q->body_len); break;
            case R_TOKENIZE: fz_openai(FZ_EP_TOKENIZE, CHAT_CHATML, q->body, q->body_len); break;
            case R_DETOKENIZE: fz_openai(FZ_EP_DETOKENIZE, CHAT_CHATML, q->body, q->body_len); break;
            default: break;
            }
        }
        http_reader_next(&r); /* the response went out: on to the pipelined rest */
    }
    http_reader_reset(&r);
    (void)requests;
    return 0;
}
