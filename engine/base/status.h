/* Engine-internal error helper: fill the caller's message buffer and return a wk_status. */
#ifndef WK_STATUS_H
#define WK_STATUS_H

#include <stddef.h>

/* vsnprintf(err, errlen, fmt, ...) when err is non-NULL, then returns status. */
int wk_fail(char *err, size_t errlen, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
