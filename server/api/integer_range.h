/* Integer ranges as GBNF: the numerals from lo to hi without leading zeros, as nested alternatives
 * over their digits (JSON Schema's minimum / maximum on integers, schema_grammar.c). */
#ifndef WUSHKV_INTEGER_RANGE_H
#define WUSHKV_INTEGER_RANGE_H

#include <stdbool.h>

#include "http/text_buf.h"

/* Appends one parenthesised GBNF group matching the decimal numerals of lo..hi (0 <= lo, lo <= hi
 * < 10^18); hi < 0: no upper bound, numerals of at most unbounded_digits digits (or lo's length,
 * if longer). false when out of memory. */
bool integer_range_gbnf(text_buf *b, long long lo, long long hi, int unbounded_digits);

#endif
