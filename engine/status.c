/* wk_strerror: the text of every wk_status, from the one table in wushkv.h. */
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
