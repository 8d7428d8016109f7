/* Generated tokens' bytes -> text deltas that are always valid UTF-8 and never show a stop
 * string (nor the start of one that may still complete). One per generating request. */
#ifndef WUSHKV_TEXT_STREAM_H
#define WUSHKV_TEXT_STREAM_H

#include <stdbool.h>
#include <stddef.h>

#include "http/text_buf.h"


typedef struct text_stream {
    unsigned char pend[4]; /* an unfinished UTF-8 character */
    int npend, need;
    text_buf held;        /* complete text that may be the start of a stop string */
    char *const *stop;    /* borrowed; stop[i] is stop_len[i] bytes (NULs allowed), at least 1 */
    const size_t *stop_len;
    int n_stop;
    bool stopped;
    int stop_hit;      /* once stopped: the index of the stop string that matched */
    bool include_stop; /* the matched stop string is released too (vLLM's include_stop_str_in_output) */
    /* false: stop strings are not matched yet (vLLM's min_tokens), though the text that may begin
     * one is still held back, so a stop string that ends once armed is found whole. Set by the
     * caller before each feed; true from init. */
    bool armed;
} text_stream;

void text_stream_init(text_stream *t, char *const *stop, const size_t *stop_len, int n_stop);
void text_stream_free(text_stream *t);
/* Appends the text that can be shown to out. Returns true once a stop string appeared: the text
 * before it (and the stop string too, with include_stop) has been released, everything after it is
 * dropped, and stop_hit names it. false on out of memory is not
 * distinguished: the caller checks out's growth through text_buf_add's result in *oom. */
bool text_stream_feed(text_stream *t, const char *bytes, size_t n, text_buf *out, bool *oom);
/* End of generation: releases held text; an unfinished character becomes U+FFFD. */
void text_stream_finish(text_stream *t, text_buf *out, bool *oom);

#endif
