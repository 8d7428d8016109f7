/* Regular expressions and choice lists -> GBNF (see regex_grammar.h). The expression is parsed
 * into a small tree (characters, code point sets, sequences, alternations, repetitions) and the
 * tree written out as GBNF: alternations and the bodies of compound repetitions become helper
 * rules, the rest stays inline. Only the language matters, so capture groups are plain groups
 * and lazy quantifiers are taken as greedy ones (they match the same set of whole strings). */
#include "api/regex_grammar.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json_text.h"

enum {
    MAX_REPEAT_COUNT = 1000,      /* beyond it a counted repeat makes grammars too big to match quickly */
    MAX_GROUP_DEPTH = 200,        /* keeps the recursive parser and writer off the end of the stack */
    MAX_GRAMMAR_BYTES = 1 << 20,  /* the engine's WK_GRAMMAR_MAX_TEXT: a longer grammar is refused there */
    MAX_CODE_POINT = 0x10FFFF,
    UNBOUNDED = -1,
};

typedef struct { uint32_t lo, hi; } cp_range;
typedef struct { cp_range *r; int n, cap; } cp_set; /* sorted, disjoint, non-adjacent once normalized */

/* NODE_ANCHOR_START (^, \A) and NODE_ANCHOR_END ($, \Z) match the empty string; check_anchors
 * accepts them only where that is all they do. */
typedef enum { NODE_EMPTY, NODE_ANCHOR_START, NODE_ANCHOR_END, NODE_CHAR, NODE_SET, NODE_SEQ, NODE_ALT, NODE_REPEAT } node_kind;

/* The forms a node is written in: its language, or its language without the empty string. The
 * second is what goes under * and + when the body could match nothing, since `(x?)*` written as
 * is would make the engine's repetition rule left-recursive (it may call itself consuming no
 * text); (x?)* matches what x* matches. */
enum { FORM_PLAIN, FORM_NONEMPTY };

typedef struct {
    node_kind kind;
    size_t offset;    /* where it starts in the expression, for messages */
    uint32_t cp;      /* NODE_CHAR */
    cp_set set;       /* NODE_SET, normalized */
    int first_child;  /* NODE_SEQ, NODE_ALT: the first of a chain; NODE_REPEAT: its body */
    int next_sibling; /* -1 ends the chain */
    int min, max;     /* NODE_REPEAT; max UNBOUNDED */
    bool nullable;    /* matches the empty string */
    bool only_empty;  /* matches the empty string and nothing else */
    int rule[2];      /* helper rule already written for each form, 0 none */
} node;

typedef struct {
    const char *re, *name;
    size_t len, pos;
    bool json_string;
    node *nodes;
    int n_nodes, cap_nodes, depth;
    text_buf *rules; /* rules[0] is the start rule, rules[k] name-k */
    int n_rules, cap_rules;
    size_t rule_bytes;
    bool failed;
    char *err;
    size_t errlen;
} converter;

static bool fail(converter *c, size_t offset, const char *fmt, ...) {
    if (c->failed) return false;
    c->failed = true;
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (c->errlen) snprintf(c->err, c->errlen, "regex byte %zu: %s", offset, what);
    return false;
}

static bool out_of_memory(converter *c) { return fail(c, c->pos, "out of memory"); }

/* One code point of strict UTF-8 (no overlong forms, surrogates or values past U+10FFFF): its
 * length in bytes, or 0 when s does not start with one. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    static const uint32_t k_min[4] = {0, 0x80, 0x800, 0x10000};
    if (n == 0) return 0;
    const unsigned b0 = s[0];
    const size_t more = b0 < 0x80 ? 0 : b0 < 0xC2 ? 4 : b0 < 0xE0 ? 1 : b0 < 0xF0 ? 2 : b0 < 0xF5 ? 3 : 4;
    if (more > 3 || n < more + 1) return 0;
    uint32_t v = more ? b0 & (0x3Fu >> more) : b0;
    for (size_t i = 1; i <= more; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    if (v < k_min[more] || v > MAX_CODE_POINT || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return more + 1;
}

/* ---- code point sets ---- */

static bool set_add(cp_set *s, uint32_t lo, uint32_t hi) {
    if (s->n == s->cap) {
        const int cap = s->cap ? s->cap * 2 : 8;
        cp_range *r = realloc(s->r, (size_t)cap * sizeof *r);
        if (!r) return false;
        s->r = r, s->cap = cap;
    }
    s->r[s->n++] = (cp_range){lo, hi};
    return true;
}

static int range_order(const void *a, const void *b) {
    const cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void set_normalize(cp_set *s) {
    if (s->n == 0) return;
    qsort(s->r, (size_t)s->n, sizeof *s->r, range_order);
    int kept = 0;
    for (int i = 1; i < s->n; i++) {
        if (s->r[i].lo > s->r[kept].hi + 1) s->r[++kept] = s->r[i];
        else if (s->r[i].hi > s->r[kept].hi) s->r[kept].hi = s->r[i].hi;
    }
    s->n = kept + 1;
}

/* The complement of a normalized set, in `out` (empty on entry). */
static bool set_complement(const cp_set *s, cp_set *out) {
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > next && !set_add(out, next, s->r[i].lo - 1)) return false;
        next = s->r[i].hi + 1;
    }
    return next > MAX_CODE_POINT || set_add(out, next, MAX_CODE_POINT);
}

/* The intersection of two normalized sets, in `out` (empty on entry). */
static bool set_intersect(const cp_set *a, const cp_set *b, cp_set *out) {
    for (int i = 0, j = 0; i < a->n && j < b->n;) {
        const uint32_t lo = a->r[i].lo > b->r[j].lo ? a->r[i].lo : b->r[j].lo;
        const uint32_t hi = a->r[i].hi < b->r[j].hi ? a->r[i].hi : b->r[j].hi;
        if (lo <= hi && !set_add(out, lo, hi)) return false;
        if (a->r[i].hi < b->r[j].hi) i++;
        else j++;
    }
    return true;
}

/* \d \w \s and their negations, with the ASCII meaning (Python's re.ASCII, ECMAScript's). */
static bool set_add_class_escape(cp_set *s, char letter) {
    cp_set base = {0}, negated = {0};
    bool ok;
    switch (letter | 0x20) {
    case 'd': ok = set_add(&base, '0', '9'); break;
    case 'w': ok = set_add(&base, '0', '9') && set_add(&base, 'A', 'Z') && set_add(&base, '_', '_') && set_add(&base, 'a', 'z'); break;
    default: ok = set_add(&base, '\t', '\r') && set_add(&base, ' ', ' '); break; /* \t \n \v \f \r and space */
    }
    const bool negate = letter >= 'A' && letter <= 'Z';
    if (ok && negate) ok = set_complement(&base, &negated);
    const cp_set *add = negate ? &negated : &base;
    for (int i = 0; ok && i < add->n; i++) ok = set_add(s, add->r[i].lo, add->r[i].hi);
    free(base.r), free(negated.r);
    return ok;
}

/* ---- the tree ---- */

static int new_node(converter *c, node_kind kind, size_t offset) {
    if (c->n_nodes == c->cap_nodes) {
        const int cap = c->cap_nodes ? c->cap_nodes * 2 : 32;
        node *nodes = realloc(c->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes) return out_of_memory(c), -1;
        c->nodes = nodes, c->cap_nodes = cap;
    }
    const bool empty = kind == NODE_EMPTY || kind == NODE_ANCHOR_START || kind == NODE_ANCHOR_END;
    c->nodes[c->n_nodes] = (node){.kind = kind, .offset = offset, .first_child = -1, .next_sibling = -1,
                                  .nullable = empty, .only_empty = empty};
    return c->n_nodes++;
}

/* A sequence or alternation over a chain of children (built before it, so they are final). */
static int new_parent(converter *c, node_kind kind, size_t offset, int first_child) {
    const int id = new_node(c, kind, offset);
    if (id < 0) return -1;
    bool all_nullable = true, any_nullable = false, all_only_empty = true;
    for (int k = first_child; k >= 0; k = c->nodes[k].next_sibling)
        all_nullable &= c->nodes[k].nullable, any_nullable |= c->nodes[k].nullable, all_only_empty &= c->nodes[k].only_empty;
    node *n = &c->nodes[id];
    n->first_child = first_child;
    n->nullable = kind == NODE_SEQ ? all_nullable : any_nullable;
    n->only_empty = all_only_empty;
    return id;
}

/* Takes over the ranges of *set (left empty). */
static int new_set_node(converter *c, size_t offset, cp_set *set) {
    set_normalize(set);
    if (set->n == 0) return fail(c, offset, "bad class: it matches no character"), -1;
    const int id = new_node(c, NODE_SET, offset);
    if (id < 0) return -1;
    c->nodes[id].set = *set;
    *set = (cp_set){0};
    return id;
}

/* ---- parsing (the Python re / ECMAScript common subset) ---- */

static bool at_end(const converter *c) { return c->pos >= c->len; }
static char peek(const converter *c) { return at_end(c) ? 0 : c->re[c->pos]; }

static bool next_code_point(converter *c, uint32_t *cp) {
    const size_t step = utf8_decode((const unsigned char *)c->re + c->pos, c->len - c->pos, cp);
    if (!step) return fail(c, c->pos, "invalid UTF-8");
    c->pos += step;
    return true;
}

/* Exactly `digits` hex digits at pos (Python requires all of them). */
static bool read_hex(converter *c, size_t start, int digits, uint32_t *value) {
    *value = 0;
    for (int i = 0; i < digits; i++, c->pos++) {
        const char ch = peek(c), lower = (char)(ch | 0x20);
        const int digit = ch >= '0' && ch <= '9' ? ch - '0' : lower >= 'a' && lower <= 'f' ? lower - 'a' + 10 : -1;
        if (digit < 0) return fail(c, start, "bad escape: expected %d hex digits", digits);
        *value = *value * 16 + (uint32_t)digit;
    }
    return true;
}

typedef enum { ESCAPE_FAILED, ESCAPE_CHAR, ESCAPE_SET } escape_kind;

/* One escape, c->pos just past its backslash: a code point in *cp, or a class escape added to
 * *set. Anchors and \B are the caller's, outside classes. */
static escape_kind parse_escape(converter *c, bool in_class, uint32_t *cp, cp_set *set) {
    const size_t start = c->pos - 1;
    if (at_end(c)) return fail(c, start, "bad escape: trailing backslash"), ESCAPE_FAILED;
    const char ch = c->re[c->pos++];
    switch (ch) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        return set_add_class_escape(set, ch) ? ESCAPE_SET : (out_of_memory(c), ESCAPE_FAILED);
    case 'n': case 't': case 'r': case 'f': case 'v': case 'a':
        *cp = (uint32_t)"\n\t\r\f\v\a"[strchr("ntrfva", ch) - "ntrfva"];
        return ESCAPE_CHAR;
    case 'b':
        if (in_class) return *cp = '\b', ESCAPE_CHAR;
        return fail(c, start, "word boundary \\b is not supported"), ESCAPE_FAILED;
    case '0': /* \0 and up to two more octal digits, as Python reads them */
        *cp = 0;
        for (int i = 0; i < 2 && peek(c) >= '0' && peek(c) <= '7'; i++) *cp = *cp * 8 + (uint32_t)(c->re[c->pos++] - '0');
        return ESCAPE_CHAR;
    case 'x': return read_hex(c, start, 2, cp) ? ESCAPE_CHAR : ESCAPE_FAILED;
    case 'U':
        if (!read_hex(c, start, 8, cp)) return ESCAPE_FAILED;
        if (*cp > MAX_CODE_POINT || (*cp >= 0xD800 && *cp <= 0xDFFF))
            return fail(c, start, "bad escape: \\U names no character"), ESCAPE_FAILED;
        return ESCAPE_CHAR;
    case 'u':
        if (!read_hex(c, start, 4, cp)) return ESCAPE_FAILED;
        if (*cp >= 0xD800 && *cp <= 0xDBFF && c->pos + 6 <= c->len && c->re[c->pos] == '\\' && c->re[c->pos + 1] == 'u') {
            /* A UTF-16 pair, as JSON Schema patterns (ECMAScript) spell characters past U+FFFF. */
            const size_t save = c->pos;
            uint32_t low;
            c->pos += 2;
            if (read_hex(c, start, 4, &low) && low >= 0xDC00 && low <= 0xDFFF) {
                *cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
                return ESCAPE_CHAR;
            }
            if (c->failed) return ESCAPE_FAILED;
            c->pos = save;
        }
        if (*cp >= 0xD800 && *cp <= 0xDFFF) return fail(c, start, "bad escape: \\u names a lone surrogate"), ESCAPE_FAILED;
        return ESCAPE_CHAR;
    case 'k': return fail(c, start, "backreference \\k is not supported"), ESCAPE_FAILED;
    case 'p': case 'P': return fail(c, start, "Unicode property escape \\%c is not supported", ch), ESCAPE_FAILED;
    default: break;
    }
    if (ch >= '1' && ch <= '9') return fail(c, start, "backreference \\%c is not supported", ch), ESCAPE_FAILED;
    if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z')) return fail(c, start, "bad escape \\%c", ch), ESCAPE_FAILED;
    c->pos--; /* an escaped metacharacter or any other character stands for itself */
    return next_code_point(c, cp) ? ESCAPE_CHAR : ESCAPE_FAILED;
}

/* One class member that is a single code point: a character or an escape. ESCAPE_SET when it was
 * a class escape (added to *set). */
static escape_kind parse_class_member(converter *c, uint32_t *cp, cp_set *set) {
    if (c->re[c->pos] != '\\') return next_code_point(c, cp) ? ESCAPE_CHAR : ESCAPE_FAILED;
    c->pos++;
    return parse_escape(c, true, cp, set);
}

/* [...] with c->pos just past the '['. */
static int parse_class(converter *c) {
    const size_t start = c->pos - 1;
    cp_set set = {0}, complement = {0};
    const bool negated = peek(c) == '^';
    if (negated) c->pos++;
    bool ok = true;
    /* A ] first in the class is a literal one (Python). */
    for (bool first = true; ok && (first || peek(c) != ']'); first = false) {
        if (at_end(c)) { ok = fail(c, start, "bad class: [ without ]"); break; }
        const size_t item = c->pos;
        uint32_t lo, hi;
        const escape_kind kind = parse_class_member(c, &lo, &set);
        if (kind != ESCAPE_CHAR) { ok = kind == ESCAPE_SET; continue; }
        hi = lo;
        if (peek(c) == '-' && c->pos + 1 < c->len && c->re[c->pos + 1] != ']') {
            c->pos++;
            cp_set none = {0};
            const escape_kind end_kind = parse_class_member(c, &hi, &none);
            free(none.r);
            if (end_kind == ESCAPE_SET) ok = fail(c, item, "bad class: a range ends at a class escape");
            else if (end_kind == ESCAPE_FAILED) ok = false;
            else if (hi < lo) ok = fail(c, item, "bad class: range out of order");
        }
        if (ok && !set_add(&set, lo, hi)) ok = out_of_memory(c);
    }
    if (ok) c->pos++; /* the ] */
    if (ok && negated) {
        set_normalize(&set);
        ok = set_complement(&set, &complement) || out_of_memory(c);
    }
    const int id = ok ? new_set_node(c, start, negated ? &complement : &set) : -1;
    free(set.r), free(complement.r);
    return id;
}

static int parse_alternation(converter *c);

/* ( ... ) and the (?...) forms, with c->pos just past the '('. */
static int parse_group(converter *c) {
    const size_t start = c->pos - 1;
    if (peek(c) == '?') {
        const char ch = ++c->pos < c->len ? c->re[c->pos] : 0;
        const char after = c->pos + 1 < c->len ? c->re[c->pos + 1] : 0;
        if (ch == ':') {
            c->pos++;
        } else if ((ch == 'P' && after == '<') || (ch == '<' && after != '=' && after != '!')) {
            c->pos += ch == 'P' ? 2 : 1; /* a named group: the name only labels a capture */
            while (!at_end(c) && c->re[c->pos] != '>') c->pos++;
            if (at_end(c)) return fail(c, start, "bad group name: missing >"), -1;
            c->pos++;
        } else if (ch == '=' || ch == '!' || ch == '<') {
            return fail(c, start, "lookaround (?%.*s is not supported", ch == '<' ? 2 : 1, c->re + c->pos), -1;
        } else if (ch == 'P' && after == '=') {
            return fail(c, start, "backreference (?P= is not supported"), -1;
        } else { /* (?i) and other flags, (?>...) atomic groups, (?(1)...) conditionals, (?#...) */
            return fail(c, start, "group (?%c is not supported (flags, atomic, conditional or comment)", ch ? ch : ' '), -1;
        }
    }
    if (++c->depth > MAX_GROUP_DEPTH) return fail(c, start, "groups nested deeper than %d", MAX_GROUP_DEPTH), -1;
    const int inner = parse_alternation(c);
    c->depth--;
    if (inner < 0) return -1;
    if (peek(c) != ')') return fail(c, start, "unbalanced parenthesis: ( without )"), -1;
    c->pos++;
    return inner;
}

/* Digits at *p, saturating past any limit so that a huge count is refused, not read as text. */
static long read_count(const converter *c, size_t *p) {
    long value = -1;
    for (; *p < c->len && c->re[*p] >= '0' && c->re[*p] <= '9'; (*p)++)
        if (value <= 100000) value = (value < 0 ? 0 : value * 10) + (c->re[*p] - '0');
    return value;
}

/* Whether a {m}, {m,}, {,n}, {m,n} or {,} quantifier starts at pos (Python reads any other `{` as
 * a literal): its bounds in *min / *max and its length in *n_bytes. */
static bool quantifier_braces(const converter *c, size_t pos, long *min, long *max, size_t *n_bytes) {
    size_t p = pos + 1;
    const long lo = read_count(c, &p);
    const bool comma = p < c->len && c->re[p] == ',';
    long hi = lo;
    if (comma) p++, hi = read_count(c, &p);
    if (p >= c->len || c->re[p] != '}' || (lo < 0 && !comma)) return false;
    *min = lo < 0 ? 0 : lo;
    *max = hi < 0 ? UNBOUNDED : hi;
    *n_bytes = p + 1 - pos;
    return true;
}

static bool quantifier_at(const converter *c, size_t pos) {
    long lo, hi;
    size_t n;
    const char ch = pos < c->len ? c->re[pos] : 0;
    return ch == '*' || ch == '+' || ch == '?' || (ch == '{' && quantifier_braces(c, pos, &lo, &hi, &n));
}

static int parse_atom(converter *c) {
    const size_t start = c->pos;
    const char ch = c->re[c->pos++];
    uint32_t cp;
    cp_set set = {0};
    int id = -1;
    switch (ch) {
    case '(': return parse_group(c);
    case '[': return parse_class(c);
    case '^': return new_node(c, NODE_ANCHOR_START, start);
    case '$': return new_node(c, NODE_ANCHOR_END, start);
    case '.': /* any character but a newline, as Python's re without DOTALL */
        if (set_add(&set, 0, '\n' - 1) && set_add(&set, '\n' + 1, MAX_CODE_POINT)) id = new_set_node(c, start, &set);
        else out_of_memory(c);
        free(set.r);
        return id;
    case '\\':
        if (peek(c) == 'A' || peek(c) == 'Z') return new_node(c, c->re[c->pos++] == 'A' ? NODE_ANCHOR_START : NODE_ANCHOR_END, start);
        if (peek(c) == 'B') return fail(c, start, "word boundary \\B is not supported"), -1;
        switch (parse_escape(c, false, &cp, &set)) {
        case ESCAPE_SET: id = new_set_node(c, start, &set); free(set.r); return id;
        case ESCAPE_FAILED: return -1;
        case ESCAPE_CHAR: break;
        }
        break;
    default:
        c->pos = start;
        if (quantifier_at(c, start)) return fail(c, start, "nothing to repeat before %c", ch), -1;
        if (!next_code_point(c, &cp)) return -1;
        break;
    }
    id = new_node(c, NODE_CHAR, start);
    if (id >= 0) c->nodes[id].cp = cp;
    return id;
}

/* An atom and the quantifier after it, if any. */
static int parse_piece(converter *c) {
    int body = parse_atom(c);
    if (body < 0 || !quantifier_at(c, c->pos)) return body;
    const size_t start = c->pos;
    const node_kind kind = c->nodes[body].kind;
    if (kind == NODE_ANCHOR_START || kind == NODE_ANCHOR_END) return fail(c, start, "nothing to repeat: quantifier after an anchor"), -1;
    long min = 0, max = UNBOUNDED;
    size_t n_bytes = 1;
    switch (c->re[c->pos]) {
    case '*': break;
    case '+': min = 1; break;
    case '?': max = 1; break;
    default: quantifier_braces(c, c->pos, &min, &max, &n_bytes); break;
    }
    c->pos += n_bytes;
    if (min > MAX_REPEAT_COUNT || max > MAX_REPEAT_COUNT) return fail(c, start, "repeat count over %d", MAX_REPEAT_COUNT), -1;
    if (max != UNBOUNDED && min > max) return fail(c, start, "bad repeat: minimum above maximum"), -1;
    if (peek(c) == '+') return fail(c, c->pos, "possessive quantifier is not supported"), -1;
    if (peek(c) == '?') c->pos++; /* lazy: the same whole-string language as greedy */
    if (quantifier_at(c, c->pos)) return fail(c, c->pos, "multiple repeat: a quantifier after a quantifier"), -1;
    const int id = new_node(c, NODE_REPEAT, start);
    if (id < 0) return -1;
    node *n = &c->nodes[id];
    n->first_child = body;
    n->min = (int)min;
    n->max = (int)max;
    n->only_empty = max == 0 || c->nodes[body].only_empty;
    n->nullable = min == 0 || c->nodes[body].nullable;
    return id;
}

/* Pieces up to | or ) or the end. */
static int parse_sequence(converter *c) {
    const size_t start = c->pos;
    int first = -1, last = -1;
    while (!at_end(c) && c->re[c->pos] != '|' && c->re[c->pos] != ')') {
        const int piece = parse_piece(c);
        if (piece < 0) return -1;
        if (last < 0) first = piece;
        else c->nodes[last].next_sibling = piece;
        last = piece;
    }
    if (first < 0) return new_node(c, NODE_EMPTY, start);
    return first == last ? first : new_parent(c, NODE_SEQ, start, first);
}

static int parse_alternation(converter *c) {
    const size_t start = c->pos;
    const int first = parse_sequence(c);
    int last = first;
    while (last >= 0 && peek(c) == '|') {
        c->pos++;
        const int branch = parse_sequence(c);
        if (branch >= 0) c->nodes[last].next_sibling = branch;
        last = branch;
    }
    if (last < 0) return -1;
    return first == last ? first : new_parent(c, NODE_ALT, start, first);
}

/* Anchors are accepted only where they change nothing for a whole-string match: ^ where nothing
 * but empty pieces can precede it in the whole expression, $ where nothing can follow it. Under a
 * repeat that may run twice neither holds. */
static bool check_anchors(converter *c, int id, bool may_start, bool may_end) {
    const node *n = &c->nodes[id];
    if (n->kind == NODE_ANCHOR_START && !may_start) return fail(c, n->offset, "anchor ^ is only supported at the start");
    if (n->kind == NODE_ANCHOR_END && !may_end) return fail(c, n->offset, "anchor $ is only supported at the end");
    if (n->kind == NODE_REPEAT) {
        const bool once = n->max != UNBOUNDED && n->max <= 1;
        return check_anchors(c, n->first_child, may_start && once, may_end && once);
    }
    for (int k = n->kind == NODE_ALT ? n->first_child : -1; k >= 0; k = c->nodes[k].next_sibling)
        if (!check_anchors(c, k, may_start, may_end)) return false;
    if (n->kind == NODE_SEQ) { /* the first and the last child that can match something bound them */
        int first_solid = -1, last_solid = -1;
        for (int k = n->first_child; k >= 0; k = c->nodes[k].next_sibling)
            if (!c->nodes[k].only_empty) last_solid = k, first_solid = first_solid < 0 ? k : first_solid;
        bool passed_first = false, reached_last = last_solid < 0;
        for (int k = n->first_child; k >= 0; k = c->nodes[k].next_sibling) {
            reached_last |= k == last_solid;
            if (!check_anchors(c, k, may_start && !passed_first, may_end && reached_last)) return false;
            passed_first |= k == first_solid;
        }
    }
    return true;
}

/* ---- writing GBNF ---- */

/* The byte cap bounds what a hostile expression can make us allocate: rewriting a nullable
 * sequence under * repeats its children, so output can grow faster than the input. */
static void put(converter *c, int rule, const char *s, size_t n) {
    if (c->failed) return;
    c->rule_bytes += n;
    if (c->rule_bytes > MAX_GRAMMAR_BYTES) fail(c, 0, "the grammar would exceed %d bytes", MAX_GRAMMAR_BYTES);
    else if (!text_buf_add(&c->rules[rule], s, n)) out_of_memory(c);
}
static void put_str(converter *c, int rule, const char *s) { put(c, rule, s, strlen(s)); }

static int new_rule(converter *c) {
    if (c->n_rules == c->cap_rules) {
        const int cap = c->cap_rules ? c->cap_rules * 2 : 8;
        text_buf *rules = realloc(c->rules, (size_t)cap * sizeof *rules);
        if (!rules) return out_of_memory(c), 0;
        c->rules = rules, c->cap_rules = cap;
    }
    c->rules[c->n_rules] = (text_buf){0};
    return c->n_rules++;
}

/* A code point inside a GBNF "literal" or [class]: escapes for what the notation reserves and for
 * control characters, everything else as its UTF-8 (\u only for the surrogate code points that set
 * arithmetic can put at a range's edge, which have no UTF-8). \x5E for ^: llama.cpp knows no \^. */
static size_t gbnf_char(uint32_t cp, bool in_class, char out[16]) {
    if (cp == '"' || cp == '\\' || (in_class && (cp == '[' || cp == ']' || cp == '-')))
        return (size_t)snprintf(out, 16, "\\%c", (char)cp);
    if (cp == '\n' || cp == '\r' || cp == '\t') return (size_t)snprintf(out, 16, "\\%c", cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't');
    if (cp < 0x20 || cp == 0x7F || (in_class && cp == '^')) return (size_t)snprintf(out, 16, "\\x%02X", (unsigned)cp);
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp >= 0xD800 && cp <= 0xDFFF) return (size_t)snprintf(out, 16, "\\u%04X", (unsigned)cp);
    const size_t n = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    for (size_t i = n - 1; i > 0; i--, cp >>= 6) out[i] = (char)(0x80 | (cp & 0x3F));
    out[0] = (char)(((0xFF00u >> n) & 0xFF) | cp);
    return n;
}

/* What JSON writers put in a string for a code point it must escape (`"`, `\`, U+0000..U+001F):
 * the short escape where JSON has one, else \u00xx. 0 for any other code point. */
static size_t json_escape(uint32_t cp, char out[8]) {
    static const char k_short[0x20] = {['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r'};
    if (cp == '"' || cp == '\\') return (size_t)snprintf(out, 8, "\\%c", (char)cp);
    if (cp >= 0x20) return 0;
    if (k_short[cp]) return (size_t)snprintf(out, 8, "\\%c", k_short[cp]);
    return (size_t)snprintf(out, 8, "\\u%04x", (unsigned)cp);
}

/* Inside a GBNF literal: the text a code point of the match is written as (in a JSON string's
 * content, its JSON text). */
static void put_text_char(converter *c, int rule, uint32_t cp) {
    char buf[16], json[8];
    const size_t n_json = c->json_string ? json_escape(cp, json) : 0;
    for (size_t i = 0; i < n_json; i++) put(c, rule, buf, gbnf_char((unsigned char)json[i], false, buf));
    if (!n_json) put(c, rule, buf, gbnf_char(cp, false, buf));
}

/* A [class] for a non-empty normalized set: negated when the set reaches the last code point (as
 * the sets of [^...] and . do), so it stays short. */
static void put_class(converter *c, int rule, const cp_set *s) {
    const bool negate = s->r[s->n - 1].hi == MAX_CODE_POINT;
    cp_set complement = {0};
    if (negate && !set_complement(s, &complement)) out_of_memory(c);
    const cp_set *shown = negate ? &complement : s;
    if (negate && complement.n == 0) put_str(c, rule, "."); /* GBNF's . is any code point at all */
    if (shown->n > 0) put_str(c, rule, negate ? "[^" : "[");
    for (int i = 0; i < shown->n; i++) {
        char buf[16];
        put(c, rule, buf, gbnf_char(shown->r[i].lo, true, buf));
        if (shown->r[i].hi > shown->r[i].lo + 1) put_str(c, rule, "-");
        if (shown->r[i].hi > shown->r[i].lo) put(c, rule, buf, gbnf_char(shown->r[i].hi, true, buf));
    }
    if (shown->n > 0) put_str(c, rule, "]");
    free(complement.r);
}

/* One GBNF element for a set. In a JSON string's content the characters JSON must escape come out
 * of the class and are written as alternatives of their escapes, so no raw `"`, `\` or control
 * character can be generated; the \u00xx ones share two alternatives, one per first hex digit. */
static void put_set(converter *c, int rule, const cp_set *s) {
    if (!c->json_string) { put_class(c, rule, s); return; }
    cp_set specials = {0}, not_specials = {0}, plain = {0};
    if (!set_add(&specials, 0, 0x1F) || !set_add(&specials, '"', '"') || !set_add(&specials, '\\', '\\') ||
        !set_complement(&specials, &not_specials) || !set_intersect(s, &not_specials, &plain))
        out_of_memory(c);
    char alternatives[10][40]; /* at most: " \ 5 short escapes, 2 \u00xx groups */
    int n = 0;
    unsigned long_escapes[2] = {0, 0}; /* per first hex digit, the second digits present */
    for (int i = 0; i < s->n && s->r[i].lo <= '\\'; i++) {
        for (uint32_t cp = s->r[i].lo; cp <= s->r[i].hi && cp <= '\\'; cp++) {
            char json[8];
            if (!json_escape(cp, json)) continue;
            if (json[1] == 'u') { long_escapes[cp >> 4] |= 1u << (cp & 15); continue; }
            size_t at = 0; /* a literal of the escape's JSON text */
            alternatives[n][at++] = '"';
            for (const char *p = json; *p; p++) at += gbnf_char((unsigned char)*p, false, alternatives[n] + at);
            snprintf(alternatives[n++] + at, 2, "\"");
        }
    }
    for (int high = 0; high < 2; high++) {
        if (!long_escapes[high]) continue;
        int at = snprintf(alternatives[n], sizeof alternatives[0], "\"\\\\u00%d\" [", high);
        for (int low = 0; low < 16; low++)
            if (long_escapes[high] >> low & 1) alternatives[n][at++] = "0123456789abcdef"[low];
        snprintf(alternatives[n++] + at, sizeof alternatives[0] - (size_t)at, "]");
    }
    const bool group = n + (plain.n > 0) > 1;
    if (group) put_str(c, rule, "(");
    if (plain.n) put_class(c, rule, &plain);
    for (int i = 0; i < n; i++) {
        if (i || plain.n) put_str(c, rule, " | ");
        put_str(c, rule, alternatives[i]);
    }
    if (group) put_str(c, rule, ")");
    free(specials.r), free(not_specials.r), free(plain.r);
}

static void put_item(converter *c, int rule, int id, int form);
static void put_rule_ref(converter *c, int rule, int id, int form);

/* The children of a sequence from `first` on, in plain form, consecutive characters as one literal. */
static void put_sequence(converter *c, int rule, int first) {
    bool wrote = false, in_literal = false;
    for (int k = first; k >= 0 && !c->failed; k = c->nodes[k].next_sibling) {
        const node *n = &c->nodes[k];
        if (n->only_empty) continue;
        if (n->kind == NODE_CHAR) {
            if (!in_literal) put_str(c, rule, wrote ? " \"" : "\"");
            in_literal = true;
            put_text_char(c, rule, n->cp);
        } else {
            put_str(c, rule, in_literal ? "\" " : wrote ? " " : "");
            in_literal = false;
            put_item(c, rule, k, FORM_PLAIN);
        }
        wrote = true;
    }
    if (in_literal) put_str(c, rule, "\"");
    if (!wrote) put_str(c, rule, "\"\"");
}

/* One GBNF element (a literal, a class or group, or a rule reference) for the body of a repeat. */
static void put_atom(converter *c, int rule, int id, int form) {
    const node *n = &c->nodes[id];
    char json[8];
    if (n->kind == NODE_CHAR) { /* a JSON escape is several characters: the repeat must take them all */
        const bool several = c->json_string && json_escape(n->cp, json);
        put_str(c, rule, several ? "(\"" : "\"");
        put_text_char(c, rule, n->cp);
        put_str(c, rule, several ? "\")" : "\"");
    } else if (n->kind == NODE_SET) {
        put_set(c, rule, &n->set);
    } else {
        put_rule_ref(c, rule, id, form);
    }
}

static void put_repeat(converter *c, int rule, int id, int form) {
    const node *n = &c->nodes[id];
    /* X{m,n} with a nullable X matches what X'{0,n} does, X' being X without the empty string. */
    const bool body_nullable = c->nodes[n->first_child].nullable;
    int min = body_nullable ? 0 : n->min;
    const int max = n->max;
    if (form == FORM_NONEMPTY && min == 0) min = 1;
    put_atom(c, rule, n->first_child, body_nullable ? FORM_NONEMPTY : FORM_PLAIN);
    char suffix[32] = "";
    if (max == UNBOUNDED) snprintf(suffix, sizeof suffix, min == 0 ? "*" : min == 1 ? "+" : "{%d,}", min);
    else if (min != 1 || max != 1) snprintf(suffix, sizeof suffix, min == max ? "{%d}" : min == 0 && max == 1 ? "?" : "{%d,%d}", min, max);
    put_str(c, rule, suffix);
}

/* Node id as GBNF elements. FORM_NONEMPTY is never asked of a node that only matches "". */
static void put_item(converter *c, int rule, int id, int form) {
    const node *n = &c->nodes[id];
    switch (n->only_empty ? NODE_EMPTY : n->kind) {
    case NODE_EMPTY: case NODE_ANCHOR_START: case NODE_ANCHOR_END: put_str(c, rule, "\"\""); break;
    case NODE_CHAR: put_atom(c, rule, id, form); break;
    case NODE_SET: put_set(c, rule, &n->set); break;
    case NODE_REPEAT: put_repeat(c, rule, id, form); break;
    case NODE_SEQ:
        if (form == FORM_NONEMPTY && n->nullable) put_rule_ref(c, rule, id, form);
        else put_sequence(c, rule, n->first_child);
        break;
    case NODE_ALT: put_rule_ref(c, rule, id, form); break;
    }
}

/* Node id as a rule body (alternatives). */
static void put_body(converter *c, int rule, int id, int form) {
    const node *n = &c->nodes[id];
    bool first = true;
    if (n->kind == NODE_ALT) {
        for (int k = n->first_child; k >= 0; k = c->nodes[k].next_sibling) {
            if (form == FORM_NONEMPTY && c->nodes[k].only_empty) continue;
            if (!first) put_str(c, rule, " | ");
            put_item(c, rule, k, form);
            first = false;
        }
    } else if (n->kind == NODE_SEQ && form == FORM_NONEMPTY && n->nullable) {
        /* Every child is nullable: a non-empty match starts with a non-empty match of some child,
         * the children before it matching "". */
        for (int k = n->first_child; k >= 0; k = c->nodes[k].next_sibling) {
            if (c->nodes[k].only_empty) continue;
            if (!first) put_str(c, rule, " | ");
            put_item(c, rule, k, FORM_NONEMPTY);
            bool rest_empty = true;
            for (int j = c->nodes[k].next_sibling; j >= 0 && rest_empty; j = c->nodes[j].next_sibling) rest_empty = c->nodes[j].only_empty;
            if (!rest_empty) put_str(c, rule, " "), put_sequence(c, rule, c->nodes[k].next_sibling);
            first = false;
        }
    } else {
        put_item(c, rule, id, form);
    }
}

/* A reference to the helper rule holding node id in the given form, written on first use. */
static void put_rule_ref(converter *c, int rule, int id, int form) {
    int helper = c->nodes[id].rule[form];
    if (!helper) {
        if (!(helper = new_rule(c))) return;
        c->nodes[id].rule[form] = helper;
        put_body(c, helper, id, form);
    }
    char suffix[24];
    snprintf(suffix, sizeof suffix, "-%d", helper);
    put_str(c, rule, c->name);
    put_str(c, rule, suffix);
}

bool regex_gbnf_rules(const char *re, size_t len, const char *name, bool json_string, text_buf *out, char *err, size_t errlen) {
    converter c = {.re = re, .name = name, .len = len, .json_string = json_string, .err = err, .errlen = errlen};
    if (errlen) err[0] = 0;
    static const char k_name_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
    if (!name || !*name || name[strspn(name, k_name_chars)]) return fail(&c, 0, "bad rule name");
    /* UTF-8 is checked first, so that a byte-level look (at a `{` or `)`) never splits a character. */
    const size_t bad_byte = json_utf8_valid_prefix((const unsigned char *)re, len);
    if (bad_byte < len) return fail(&c, bad_byte, "invalid UTF-8");
    int root = parse_alternation(&c);
    if (root >= 0 && !at_end(&c)) root = (fail(&c, c.pos, "unbalanced parenthesis: ) without ("), -1);
    if (root >= 0 && check_anchors(&c, root, true, true) && new_rule(&c) == 0) put_body(&c, 0, root, FORM_PLAIN);
    const size_t out_len = out->len;
    for (int k = 0; k < c.n_rules && !c.failed; k++) {
        char suffix[24] = "";
        if (k) snprintf(suffix, sizeof suffix, "-%d", k);
        if (!text_buf_add(out, name, strlen(name)) || !text_buf_add(out, suffix, strlen(suffix)) || !text_buf_add(out, " ::= ", 5) ||
            !text_buf_add(out, c.rules[k].p, c.rules[k].len) || !text_buf_add(out, "\n", 1))
            out_of_memory(&c);
    }
    if (c.failed && out->p) out->p[out->len = out_len] = 0; /* nothing half-written stays behind */
    for (int k = 0; k < c.n_rules; k++) text_buf_free(&c.rules[k]);
    for (int k = 0; k < c.n_nodes; k++) free(c.nodes[k].set.r);
    free(c.rules), free(c.nodes);
    return !c.failed;
}

bool choice_gbnf(const char *const *choices, const size_t *lens, int n, text_buf *out, char *err, size_t errlen) {
    if (errlen) snprintf(err, errlen, "%s", n <= 0 ? "no choices" : "");
    for (int i = 0; i < n; i++) {
        const size_t bad_byte = json_utf8_valid_prefix((const unsigned char *)choices[i], lens[i]);
        if (bad_byte < lens[i] && errlen) snprintf(err, errlen, "choice %d: invalid UTF-8 at byte %zu", i, bad_byte);
        if (bad_byte < lens[i]) return false;
    }
    const size_t out_len = out->len;
    bool ok = n > 0 && text_buf_add(out, "root ::= ", 9);
    for (int i = 0; ok && i < n; i++) {
        ok = text_buf_add(out, i ? " | \"" : "\"", i ? 4 : 1);
        uint32_t cp;
        char buf[16];
        for (size_t at = 0; ok && at < lens[i];) {
            at += utf8_decode((const unsigned char *)choices[i] + at, lens[i] - at, &cp);
            ok = text_buf_add(out, buf, gbnf_char(cp, false, buf));
        }
        ok = ok && text_buf_add(out, "\"", 1);
    }
    ok = ok && text_buf_add(out, "\n", 1);
    if (!ok && n > 0 && out->p) out->p[out->len = out_len] = 0;
    if (!ok && n > 0 && errlen) snprintf(err, errlen, "out of memory");
    return ok;
}
