/* wk_strerror: the text of every wk_status, from the one table in wushkv.h; wk_fail, the engine's
 * helper that writes an error message and returns its status. */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>

#include "wushkv/wushkv.h"

const char *wk_strerror(int status) {
    switch (status) {
#define WK_STATUS_CASE(name, value, text) \
    case value: return text;
        WK_STATUS_MAP(WK_STATUS_CASE)
#undef WK_STATUS_CASE
    default: return "unknown error";
    }
}

int wk_fail(char *err, size_t errlen, int status, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}
