/* Token bytes -> shown text: a UTF-8 gate (a character may be split over byte-fallback tokens;
 * invalid bytes become U+FFFD, since JSON needs valid UTF-8) followed by stop-string matching with
 * hold-back (a suffix that could begin a stop string waits until it can no longer). */
#include "sched/text_stream.h"

#include <stdlib.h>
#include <string.h>

static const char REPLACEMENT[] = "\xEF\xBF\xBD";

void text_stream_init(text_stream *t, char *const *stop, const size_t *stop_len, int n_stop) {
    memset(t, 0, sizeof *t);
    t->stop = stop;
    t->stop_len = stop_len;
    t->n_stop = n_stop;
    t->stop_hit = -1;
    t->armed = true;
}

void text_stream_free(text_stream *t) { text_buf_free(&t->held); }

static bool valid_cont(const text_stream *t, unsigned char b) {
    if (t->npend == 1) {
        /* The second byte's range excludes overlongs (E0, F0), surrogates (ED), > U+10FFFF (F4). */
        switch (t->pend[0]) {
        case 0xE0: return b >= 0xA0 && b <= 0xBF;
        case 0xED: return b >= 0x80 && b <= 0x9F;
        case 0xF0: return b >= 0x90 && b <= 0xBF;
        case 0xF4: return b >= 0x80 && b <= 0x8F;
        default: break;
        }
    }
    return b >= 0x80 && b <= 0xBF;
}

/* Bytes -> complete characters appended to held. */
static bool gate(text_stream *t, const char *data, size_t n) {
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)data[i];
        if (t->npend > 0) {
            if (valid_cont(t, b)) {
                t->pend[t->npend++] = b;
                if (t->npend == t->need) {
                    ok &= text_buf_add(&t->held, t->pend, (size_t)t->npend);
                    t->npend = 0;
                }
                continue;
            }
            ok &= text_buf_add(&t->held, REPLACEMENT, 3); /* truncated sequence; b starts afresh */
            t->npend = 0;
        }
        if (b < 0x80) {
            ok &= text_buf_add(&t->held, &b, 1);
        } else if (b >= 0xC2 && b <= 0xF4) {
            t->pend[0] = b;
            t->npend = 1;
            t->need = b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        } else {
            ok &= text_buf_add(&t->held, REPLACEMENT, 3); /* stray continuation, C0/C1, F5..FF */
        }
    }
    return ok;
}

/* Moves the first n held bytes to out. */
static bool release(text_stream *t, size_t n, text_buf *out) {
    if (n == 0) return true; /* held.p may still be NULL: memmove must not see it */
    bool ok = text_buf_add(out, t->held.p, n);
    memmove(t->held.p, t->held.p + n, t->held.len - n);
    t->held.len -= n;
    if (t->held.p) t->held.p[t->held.len] = 0;
    return ok;
}

/* Length of the longest suffix of s that is a proper prefix of some stop string. */
static size_t stop_prefix_suffix(const text_stream *t, const char *s, size_t len) {
    size_t best = 0;
    for (int i = 0; i < t->n_stop; i++) {
        size_t sl = t->stop_len[i];
        for (size_t k = sl - 1 < len ? sl - 1 : len; k > best; k--)
            if (memcmp(s + len - k, t->stop[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

bool text_stream_feed(text_stream *t, const char *bytes, size_t n, text_buf *out, bool *oom) {
    if (t->stopped) return true;
    if (!gate(t, bytes, n)) *oom = true;
    if (t->held.len == 0) return false;
    /* The earliest stop string wins; the text before it is the last shown. Text and stop strings
     * may hold NUL bytes (a generated 0x00, JSON's \u0000): compared by length, never as C strings. */
    const char *first = NULL;
    for (int i = 0; i < t->n_stop && t->armed; i++) {
        const char *hit = memmem(t->held.p, t->held.len, t->stop[i], t->stop_len[i]);
        if (hit && (!first || hit < first)) {
            first = hit;
            t->stop_hit = i;
        }
    }
    if (first) {
        size_t shown = (size_t)(first - t->held.p) + (t->include_stop ? t->stop_len[t->stop_hit] : 0);
        if (!release(t, shown, out)) *oom = true;
        t->held.len = 0;
        t->stopped = true;
        return true;
    }
    size_t keep = stop_prefix_suffix(t, t->held.p, t->held.len);
    if (!release(t, t->held.len - keep, out)) *oom = true;
    return false;
}

void text_stream_finish(text_stream *t, text_buf *out, bool *oom) {
    if (t->stopped) return;
    if (t->npend > 0) {
        t->npend = 0;
        if (!text_buf_add(&t->held, REPLACEMENT, 3)) *oom = true;
    }
    if (!release(t, t->held.len, out)) *oom = true;
}
