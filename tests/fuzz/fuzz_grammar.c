/* Fuzz target: the grammar engine (engine/grammar/) on arbitrary GBNF. Input: the grammar text, then
 * after a 0x1E byte the choices of a walk. Invariants: a refused grammar has a "grammar line L
 * column C: ..." message; for an accepted one, over a small vocabulary with multi-byte, cut UTF-8,
 * empty and end tokens, at every step of a walk the mask agrees with the one-token check for
 * every token (or the check ran past the matcher's limits, and then only refuses more), the end
 * token is allowed exactly when the text is complete, an allowed token is accepted, and a complete
 * text is a sentence by the whole-text check. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

#define FUZZ_CHECK(c)                                                                       \
    do {                                                                                    \
        if (!(c)) {                                                                         \
            fprintf(stderr, "fuzz_grammar: invariant failed: %s (line %d)\n", #c, __LINE__); \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

static const char *const pieces[] = {"a", "b", "c", "x", "0", "1", "9", " ", "\n", "\"", "\\", "{", "}", "[", "]", ",",
                                     ":", "-", ".", "ab", "abc", "true", "{\"", "\":", "\xC3\xA9", "\xC3", "\xA9",
                                     "\xE2\x82\xAC", "\xE2", "\x82\xAC", "\xE0", "\xF0\x9F\x98\x80", "\xF0\x9F", "\xFF",
                                     "", "<end>", "\x00", "a\x00b"};
enum { N = sizeof pieces / sizeof *pieces, EOG = 35 };
static size_t lens[N];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 14) return 0;
    const uint8_t *sep = memchr(data, 0x1E, size);
    size_t glen = sep ? (size_t)(sep - data) : size;
    const uint8_t *walk = sep ? sep + 1 : data + size;
    size_t wlen = sep ? size - glen - 1 : 0;
    wk_grammar *g = NULL;
    char err[WK_ERRMSG_LEN];
    wk_status st = wk_grammar_parse((const char *)data, glen, &g, err, sizeof err);
    if (st != WK_OK) {
        FUZZ_CHECK(g == NULL && (st == WK_ERR_NOMEM || (st == WK_ERR_INVALID && strncmp(err, "grammar line ", 13) == 0)));
        return 0;
    }
    (void)wk_grammar_accepts(g, (const char *)walk, wlen); /* terminates, whatever the text */
    bool eog[N] = {0};
    eog[EOG] = true;
    for (int i = 0; i < N; i++) lens[i] = i >= 36 ? (i == 36 ? 1 : 3) : strlen(pieces[i]);
    wk_grammar_vocab *v = grammar_vocab_from_pieces(pieces, lens, eog, N);
    wk_matcher *m = v ? wk_matcher_create(g, v) : NULL;
    char text[1024];
    size_t tlen = 0;
    for (size_t step = 0; m && step < 24; step++) {
        float logits[N];
        for (int t = 0; t < N; t++) logits[t] = 0.0f;
        int n = wk_matcher_mask(m, logits);
        if (n == WK_ERR_UNSUPPORTED || n == WK_ERR_NOMEM) break;
        FUZZ_CHECK(n >= 0);
        int count = 0;
        bool past_limits = false;
        for (int t = 0; t < N; t++) {
            bool allowed = logits[t] == 0.0f;
            count += allowed;
            /* The mask follows stacks by groups, the one-token check all of them at once, so only
             * the check can pass WK_GRAMMAR_MAX_STACKS, and it says no once the step's work is
             * spent: it may refuse a token the mask allows, never allow one the mask refuses. */
            if (wk_matcher_allows(m, t) != allowed) {
                FUZZ_CHECK(allowed);
                past_limits = true;
            }
        }
        FUZZ_CHECK(count == n);
        if (past_limits) break; /* where taking a token may fail by the limits: the walk ends */
        FUZZ_CHECK((logits[EOG] == 0.0f) == wk_matcher_complete(m));
        if (wk_matcher_complete(m)) FUZZ_CHECK(wk_grammar_accepts(g, text, tlen));
        if (n == 0 || step >= wlen) break;
        int pick = walk[step] % n, t = 0;
        for (; t < N; t++)
            if (logits[t] == 0.0f && pick-- == 0) break;
        if (t == EOG) break;
        st = wk_matcher_accept(m, t);
        if (st == WK_ERR_UNSUPPORTED || st == WK_ERR_NOMEM) break;
        FUZZ_CHECK(st == WK_OK);
        memcpy(text + tlen, pieces[t], lens[t]);
        tlen += lens[t];
    }
    wk_matcher_destroy(m);
    wk_grammar_vocab_destroy(v);
    wk_grammar_free(g);
    return 0;
}
