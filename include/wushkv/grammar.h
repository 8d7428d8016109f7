/* wushkv grammar API: output constrained by a context-free grammar (structured output). A grammar
 * is written in GBNF, llama.cpp's grammar notation, so a grammar that works with llama-server works
 * here; the daemon turns JSON Schema, regular expressions and choice lists into GBNF (server/api/)
 * and the engine only ever sees GBNF.
 *
 * GBNF: rules `name ::= alternatives`, one per line (a rule goes on past a newline inside
 * parentheses or after `|`); `root` is where the text starts. Elements: "literal" strings,
 * [character classes] with ranges and ^ negation, `.` (any character), rule names, ( groups ),
 * and the postfix operators * + ? {m} {m,} {m,n}. Escapes in literals and classes: \n \r \t \\
 * \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH. # starts a comment. Grammars match Unicode code points;
 * a token that ends in the middle of a UTF-8 sequence is allowed when some completion of the
 * sequence could be.
 *
 * Threads: a wk_grammar is read-only after wk_grammar_parse (any thread; its references are
 * counted atomically); a wk_grammar_vocab is read-only after creation; a wk_matcher is used by one
 * thread at a time. */
#ifndef WUSHKV_GRAMMAR_H
#define WUSHKV_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wushkv/wushkv.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wk_grammar wk_grammar;

/* Limits that keep a hostile grammar from taking the daemon's memory or time: its text and
 * elements; the parse stacks a matcher keeps alive at once, by count and by their total length;
 * and the work one token's step may spend (stack positions written plus candidate tokens checked,
 * counted from one accepted token to the next; accepting it has an allotment of its own), so that
 * no request's grammar holds up the engine thread, which every running request waits on, for more
 * than about a tenth of a second a token: the widest masks of the structured-output tests spend
 * at most 4.9M (docs/api.md says how that was measured). Past a matcher limit the generation
 * ends with WK_ERR_UNSUPPORTED. */
#define WK_GRAMMAR_MAX_TEXT (1u << 20)
#define WK_GRAMMAR_MAX_ELEMENTS 200000
#define WK_GRAMMAR_MAX_STACKS 4096
#define WK_GRAMMAR_MAX_STACK_POSITIONS (1u << 16)
#define WK_GRAMMAR_MAX_STEP_WORK ((size_t)1 << 25)

/* Compiles GBNF text (len bytes, not NUL-terminated; NUL bytes are an error). WK_OK and *out, or
 * WK_ERR_INVALID with a message in err naming the line and column and what is wrong there
 * (syntax, an undefined rule, no `root`, left recursion, a repetition count over 10000, a limit
 * above, a start that passes a matcher limit), or WK_ERR_NOMEM; *out is
 * NULL on error. Any thread. *out holds one reference. */
wk_status wk_grammar_parse(const char *text, size_t len, wk_grammar **out, char *err, size_t errlen);
/* One more reference to g (a request's choices share the grammar its request compiled); returns
 * g. wk_grammar_free drops one and frees g with the last. Both any thread, NULL allowed. */
wk_grammar *wk_grammar_retain(wk_grammar *g);
void wk_grammar_free(wk_grammar *g);

/* Whether the whole of text (len bytes of UTF-8) is a sentence of the grammar; false for invalid
 * UTF-8. For tests and checks; generation uses a matcher. Any thread. */
bool wk_grammar_accepts(const wk_grammar *g, const char *text, size_t len);

/* Every token's text decoded to code points once (a few MB for a 262144-token vocabulary), shared
 * by all matchers of one engine. NULL when out of memory. Any thread. */
typedef struct wk_grammar_vocab wk_grammar_vocab;
wk_grammar_vocab *wk_grammar_vocab_create(const wk_engine *e);
void wk_grammar_vocab_destroy(wk_grammar_vocab *v);

/* Where one generation stands in a grammar, at its start. The grammar and the vocabulary must
 * outlive it. NULL only when out of memory (wk_grammar_parse refuses a start it could not hold). */
typedef struct wk_matcher wk_matcher;
wk_matcher *wk_matcher_create(const wk_grammar *g, const wk_grammar_vocab *v);
void wk_matcher_destroy(wk_matcher *m);

/* Sets to -INFINITY the logits (n_vocab floats) of every token the grammar does not allow next.
 * An end-of-generation token is allowed exactly when the text so far is a whole sentence; a token
 * with no text (a control token) never is. Returns how many tokens are still allowed (0: the
 * grammar wants a character no token spells), or WK_ERR_NOMEM / WK_ERR_UNSUPPORTED (a matcher limit
 * above passed: an ambiguous or too costly grammar), logits then untouched. */
int wk_matcher_mask(wk_matcher *m, float *logits);

/* Whether the grammar allows token next (the same rule as wk_matcher_mask, for one token: a
 * cheap check of the best tokens before masking the whole vocabulary). It follows all parse
 * stacks at once where the mask follows each on its own, so only it can pass
 * WK_GRAMMAR_MAX_STACKS: then it says no to a token the mask allows, and accepting that token
 * fails with WK_ERR_UNSUPPORTED. It says no, too, once the step's work is spent. */
bool wk_matcher_allows(wk_matcher *m, int32_t token);

/* Moves past token. WK_OK, or WK_ERR_INVALID when the grammar does not allow it (m unchanged),
 * or WK_ERR_NOMEM / WK_ERR_UNSUPPORTED as wk_matcher_mask. An end-of-generation token is taken
 * only when the text is complete, and changes nothing. */
wk_status wk_matcher_accept(wk_matcher *m, int32_t token);

/* Whether the text so far is a whole sentence, and whether nothing may follow it (then only an
 * end-of-generation token is allowed). */
bool wk_matcher_complete(const wk_matcher *m);
bool wk_matcher_finished(const wk_matcher *m);

#ifdef __cplusplus
}
#endif

#endif
