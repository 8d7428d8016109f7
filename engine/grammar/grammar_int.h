/* The compiled form of a GBNF grammar and the parse-stack machinery the matcher and the whole-text
 * check share (grammar_parse.c builds it, grammar_stacks.c runs it, grammar_vocab.c masks tokens
 * with it). */
#ifndef WUSHKV_GRAMMAR_INT_H
#define WUSHKV_GRAMMAR_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wushkv/grammar.h"

#define GRAMMAR_MAX_CODE_POINT 0x10FFFFu

/* One element of an alternative. A character class is kept positive: sorted, disjoint, merged
 * ranges (a negated class is complemented when parsed), so matching is one search. */
typedef enum { GE_END = 0, GE_CHARS = 1, GE_REF = 2 } gram_kind;
typedef struct gram_elem {
    uint32_t kind;
    uint32_t a;        /* GE_CHARS: first range in ranges[]; GE_REF: rule index */
    uint32_t n;        /* GE_CHARS: number of ranges */
    uint64_t ascii[2]; /* GE_CHARS: the class's ASCII members as bits, the mask walk's common case */
} gram_elem;
typedef struct gram_range {
    uint32_t lo, hi; /* inclusive */
} gram_range;

struct wk_grammar {
    gram_elem *elems; /* every alternative's elements, each alternative ended by GE_END */
    uint32_t n_elems;
    gram_range *ranges;
    uint32_t n_ranges;
    uint32_t *alts; /* first element of each alternative, grouped by rule */
    uint32_t *rule_first_alt, *rule_n_alts;
    uint32_t n_rules, root;
    /* References (wk_grammar_retain / wk_grammar_free): a request's choices and the threads that
     * parse and generate share one compiled grammar. */
    atomic_uint refs;
};

/* Room for need elements of size bytes in *p (capacity *cap, doubled as it grows); false when out
 * of memory, *p intact. */
bool gram_grow(void **p, size_t *cap, size_t need, size_t size);

bool gram_chars_match(const wk_grammar *g, const gram_elem *e, uint32_t cp);
struct utf8_pending;
/* Whether some code point whose UTF-8 form starts with the pending bytes lies in the class: the
 * values those bytes leave possible, above the sequence length's overlong forms (a lone 0xE0 is
 * U+0800..U+0FFF, never an ASCII letter). */
bool gram_chars_match_partial(const wk_grammar *g, const gram_elem *e, const struct utf8_pending *p);

/* A set of parse stacks. A stack is the list of element positions still to match, its top (the
 * next element) last; after expansion every top is a GE_CHARS element, and an empty stack means
 * the text so far is a whole sentence. Stacks live end to end in pos[]. */
typedef struct stack_set {
    uint32_t *pos;
    size_t n_pos, cap_pos;
    struct stack_ref {
        uint32_t off, len;
    } *st;
    size_t n, cap;
    uint32_t *seen; /* hash table of stack indices + 1 for de-duplication, 0 = empty slot */
    size_t seen_cap;
    uint32_t *work, *tmp; /* scratch for expansion */
    size_t cap_work, cap_tmp;
} stack_set;

void stack_set_free(stack_set *s);
void stack_set_clear(stack_set *s);
/* Takes n units of work from *budget (the step's, WK_GRAMMAR_MAX_STEP_WORK); false when it has
 * not that many left. */
static inline bool gram_spend(size_t *budget, size_t n) {
    if (*budget < n) return false;
    *budget -= n;
    return true;
}

/* dst = the expansion of the single stack `base` (len positions) with `top` pushed on it
 * (UINT32_MAX: nothing pushed): added to dst, duplicates skipped; the positions it writes are
 * taken from *budget. WK_OK, WK_ERR_NOMEM, or WK_ERR_UNSUPPORTED past WK_GRAMMAR_MAX_STACKS,
 * WK_GRAMMAR_MAX_STACK_POSITIONS or the budget. */
wk_status stack_set_expand(const wk_grammar *g, stack_set *dst, const uint32_t *base, uint32_t len, uint32_t top, size_t *budget);
/* dst (cleared first) = the stacks of src whose top takes cp, moved past it. */
wk_status stack_set_advance(const wk_grammar *g, const stack_set *src, uint32_t cp, stack_set *dst, size_t *budget);
/* The stacks a grammar starts with. */
wk_status stack_set_start(const wk_grammar *g, stack_set *dst, size_t *budget);
bool stack_set_has_empty(const stack_set *s);
wk_status stack_set_copy(stack_set *dst, const stack_set *src);
/* A hash of the set that does not depend on the stacks' order, and equality as sets. */
uint32_t stack_set_hash(const stack_set *s);
bool stack_set_equal(const stack_set *a, const stack_set *b);

/* UTF-8 decoding that carries a sequence cut between tokens. */
typedef struct utf8_pending {
    uint32_t value; /* the bits seen so far */
    int n_more;     /* continuation bytes still to come; 0: none pending */
    int total;      /* the whole sequence's length in bytes, for the overlong-form check */
} utf8_pending;
/* Decodes bytes after `start`'s pending sequence into cps (room for len + 1), returns the count,
 * and *end the sequence left pending; -1 for invalid UTF-8 (a stray continuation byte, a bad
 * lead byte, an overlong form, a surrogate, a value above U+10FFFF). */
int utf8_decode_pending(const uint8_t *bytes, size_t len, utf8_pending start, uint32_t *cps, utf8_pending *end);

/* A vocabulary from token texts, for the engine's (wk_grammar_vocab_create) and for tests. eog:
 * n bools (NULL: none). */
wk_grammar_vocab *grammar_vocab_from_pieces(const char *const *pieces, const size_t *lens, const bool *eog, int n);

#endif
