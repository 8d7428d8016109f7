/* A small blocking HTTP/1.1 client for `wushkv bench`: one request per connection
 * (Connection: close), the response parsed by llhttp, its body handed to a callback as it arrives,
 * so a server-sent event stream is seen chunk by chunk. Thread-safe: a target is read-only once
 * resolved, and every request has its own socket and parser. */
#ifndef WUSHKV_HTTP_CLIENT_H
#define WUSHKV_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* Where requests go: "http://HOST[:PORT][/PREFIX]". */
typedef struct http_target {
    char url[512];          /* as given, for messages */
    char host[256];         /* without the brackets of an IPv6 literal */
    char port[8];           /* "80" when the URL names none */
    char prefix[256];       /* path before /v1/..., no trailing '/' ("" for none) */
    char host_header[300];  /* "HOST:PORT" as sent in Host: */
    struct sockaddr_storage addr; /* filled by http_target_resolve */
    socklen_t addr_len;
} http_target;

/* Checks the URL's syntax (http only; a trailing "/" or "/v1" is dropped from the prefix, so both
 * the server's root and OpenAI's base_url work). False with a message on a malformed URL. */
bool http_target_parse(const char *url, http_target *t, char *err, size_t errlen);
/* Resolves the host (getaddrinfo; the first address is used). False with a message. */
bool http_target_resolve(http_target *t, char *err, size_t errlen);

/* Receives the body in pieces as it arrives (chunked encoding already undone), with the status of
 * the response; returns false to stop reading (the request then fails with "aborted"). */
typedef bool (*http_body_cb)(void *ud, int status, const char *data, size_t len);

/* Sends one request (body may be NULL for a GET; api_key NULL for none) and reads the whole
 * response. Each socket read or write waits at most timeout_s. Returns true when a complete
 * response arrived (whatever its status, stored in *status), false on a transport error (connect,
 * timeout, connection closed early, unparsable response) with a message in err. */
bool http_request(const http_target *t, const char *method, const char *path, const char *api_key,
                  const char *body, size_t body_len, double timeout_s, http_body_cb on_body, void *ud,
                  int *status, char *err, size_t errlen);

#endif
