/* A growable byte buffer that keeps a NUL after its bytes, so it can be read as a C string: HTTP
 * fields and bodies (http.c, bench_load.c) and the text of generations (text_stream.c). */
#ifndef WUSHKV_TEXT_BUF_H
#define WUSHKV_TEXT_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct text_buf {
    char *p; /* NULL until the first add */
    size_t len, cap;
} text_buf;

/* Appends n bytes (n = 0 still allocates, so p becomes ""); false when out of memory, b intact. */
bool text_buf_add(text_buf *b, const void *data, size_t n);
/* The same, but false also when the buffer would grow beyond `limit` bytes (NUL included). */
bool text_buf_add_limited(text_buf *b, const void *data, size_t n, size_t limit);
void text_buf_free(text_buf *b);

#endif
