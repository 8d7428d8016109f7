/* Whole-file reading for `perplexity` and `calibrate`: grows one buffer, so stdin works too. */
#include "cli/text_file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *read_text_file(const char *cmd, const char *path, size_t *len_out) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "wushkv %s: cannot open %s: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (len + 1 >= cap) {
            char *p = realloc(buf, cap * 2);
            if (!p) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = p;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - 1 - len, f);
        len += n;
        if (n == 0) break;
    }
    bool bad = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf || bad) {
        fprintf(stderr, "wushkv %s: cannot read %s: %s\n", cmd, path, buf ? strerror(errno) : "out of memory");
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    *len_out = len;
    return buf;
}
