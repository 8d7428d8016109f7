/* Regular expressions and choice lists -> GBNF: vLLM's guided_regex and guided_choice, and JSON
 * Schema's pattern, become grammar rules the engine (include/wushkv/grammar.h) can constrain
 * generation with. */
#ifndef WUSHKV_REGEX_GRAMMAR_H
#define WUSHKV_REGEX_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>

#include "http/text_buf.h"

/* Appends GBNF rules for the regular expression re (len bytes of UTF-8): the start rule is named `name`,
 * helper rules `name-1`, `name-2`, ... The whole output must match the expression (anchors ^ at the start
 * and $ at the end are accepted and change nothing). json_string: the text is the content of a JSON string
 * (a schema's pattern), so a matched `"` or `\` or control character is written as its JSON escape and
 * `.` / negated classes never produce a raw `"`, `\` or U+0000..U+001F. false with a message in err (naming
 * the byte offset and the construct: backreferences, lookaround, possessive quantifiers, unbalanced
 * parentheses, a bad class, a count over 1000, invalid UTF-8) on what cannot be converted. */
bool regex_gbnf_rules(const char *re, size_t len, const char *name, bool json_string, text_buf *out, char *err, size_t errlen);
/* GBNF (rule root) for "exactly one of the n strings" (each lens[i] bytes, may hold any bytes of valid UTF-8). false with err when n == 0 or a string is not valid UTF-8. */
bool choice_gbnf(const char *const *choices, const size_t *lens, int n, text_buf *out, char *err, size_t errlen);

#endif
