/* Integer ranges as GBNF (integer_range.h): a range of equal-length numerals splits at the first
 * digit where its ends part into the low end's branch, a middle of free digits and the high end's
 * branch; a range over several lengths is one such range per length. */
#include "api/integer_range.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The text so far and whether every append went in (one failed append fails the whole range). */
typedef struct out {
    text_buf *b;
    bool ok;
} out;

static bool add(out *o, const char *s) { return o->ok = o->ok && text_buf_add(o->b, s, strlen(s)); }

static bool addf(out *o, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return o->ok = o->ok && n >= 0 && (size_t)n < sizeof tmp && text_buf_add(o->b, tmp, (size_t)n);
}

/* Numerals with `len` digits from lo to hi (same length, lo <= hi), as a group of alternatives: the first
 * digit where they part splits the range into lo's branch, a middle of free digits and hi's branch. */
static bool same_length_range(out *b, const char *lo, const char *hi, size_t len) {
    if (lo[0] == hi[0]) { /* a shared digit, then the range of the rest */
        addf(b, "\"%c\"", lo[0]);
        if (len > 1) add(b, " ( "), same_length_range(b, lo + 1, hi + 1, len - 1), add(b, " )");
        return b->ok;
    }
    char zeros[24] = "000000000000000000000", nines[24] = "999999999999999999999";
    zeros[len - 1] = nines[len - 1] = 0;
    /* lo's own branch unless the rest of lo is all zeros, hi's unless the rest of hi is all nines */
    bool lo_branch = strcmp(lo + 1, zeros) != 0, hi_branch = strcmp(hi + 1, nines) != 0;
    char mid_lo = (char)(lo[0] + lo_branch), mid_hi = (char)(hi[0] - hi_branch);
    add(b, "( ");
    if (lo_branch) addf(b, "\"%c\" ( ", lo[0]), same_length_range(b, lo + 1, nines, len - 1), add(b, " )");
    if (mid_lo <= mid_hi) addf(b, lo_branch ? " | [%c-%c]" : "[%c-%c]", mid_lo, mid_hi);
    if (mid_lo <= mid_hi && len > 1) addf(b, " [0-9]{%zu}", len - 1);
    if (hi_branch) addf(b, " | \"%c\" ( ", hi[0]), same_length_range(b, zeros, hi + 1, len - 1), add(b, " )");
    return add(b, " )");
}

bool integer_range_gbnf(text_buf *text, long long lo, long long hi, int unbounded_digits) {
    out o = {text, true}, *b = &o;
    char los[24], his[24];
    size_t lo_len = (size_t)snprintf(los, sizeof los, "%lld", lo);
    size_t hi_len = hi >= 0 ? (size_t)snprintf(his, sizeof his, "%lld", hi) : lo_len;
    long long power = 1; /* 10^(len-1) */
    for (size_t i = 1; i < lo_len; i++) power *= 10;
    add(b, "( ");
    for (size_t len = lo_len; len <= hi_len; len++, power *= 10) {
        long long from = len == lo_len ? lo : power;
        long long to = hi >= 0 && (len == hi_len) ? hi : power * 10 - 1;
        snprintf(los, sizeof los, "%lld", from), snprintf(his, sizeof his, "%lld", to);
        if (len > lo_len) add(b, " | ");
        same_length_range(b, los, his, len);
    }
    if (hi < 0 && (long)lo_len < unbounded_digits) addf(b, " | [1-9] [0-9]{%zu,%d}", lo_len, unbounded_digits - 1);
    return add(b, " )");
}

