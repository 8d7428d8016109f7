/* A growable NUL-terminated byte buffer (see text_buf.h). */
#include "http/text_buf.h"

#include <stdlib.h>
#include <string.h>

bool text_buf_add(text_buf *b, const void *data, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

bool text_buf_add_limited(text_buf *b, const void *data, size_t n, size_t limit) {
    if (b->len + n + 1 > limit) return false;
    return text_buf_add(b, data, n);
}

void text_buf_free(text_buf *b) {
    free(b->p);
    *b = (text_buf){0};
}
