/* GBNF text -> the compiled grammar (grammar_int.h): a recursive-descent parser of llama.cpp's
 * grammar notation; groups and repetitions become rules of their own, and a grammar a stack
 * machine cannot run (an undefined rule, no root, left recursion) is refused here, with the line
 * and column, rather than found looping at generation time. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

#define MAX_REPEAT 10000
#define MAX_NESTING 256

typedef struct elem_vec {
    gram_elem *e;
    size_t n, cap;
} elem_vec;

typedef struct prule {
    const char *name; /* points into the text; NULL for a rule made from a group or repetition */
    size_t name_len;
    elem_vec body; /* alternatives, each ended by GE_END */
    bool defined;
    size_t first_use; /* text offset of the first reference, for "undefined rule" */
} prule;

typedef struct parser {
    const char *text, *p, *end;
    prule *rules;
    size_t n_rules, cap_rules;
    uint32_t *by_name; /* open-addressing table of named rules' indices + 1 (0: empty) */
    size_t cap_by_name, n_named;
    gram_range *ranges;
    size_t n_ranges, cap_ranges;
    size_t n_elems; /* over all rules, against WK_GRAMMAR_MAX_ELEMENTS */
    int depth;
    wk_status st;
    char *err;
    size_t errlen;
} parser;

/* ---- errors --------------------------------------------------------------------------------- */

static bool fail_at(parser *ps, const char *at, const char *fmt, ...) {
    if (ps->st != WK_OK) return false; /* the first error is the one reported */
    ps->st = WK_ERR_INVALID;
    int line = 1, col = 1;
    for (const char *q = ps->text; q < at && q < ps->end; q++) {
        if (*q == '\n') line++, col = 1;
        else if (((unsigned char)*q & 0xC0) != 0x80) col++;
    }
    if (ps->err && ps->errlen) {
        int k = snprintf(ps->err, ps->errlen, "grammar line %d column %d: ", line, col);
        if (k >= 0 && (size_t)k < ps->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ps->err + k, ps->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return false;
}

static bool oom(parser *ps) {
    if (ps->st == WK_OK) {
        ps->st = WK_ERR_NOMEM;
        if (ps->err && ps->errlen) snprintf(ps->err, ps->errlen, "out of memory compiling the grammar");
    }
    return false;
}

/* ---- building blocks ------------------------------------------------------------------------ */

static bool vec_push(parser *ps, elem_vec *v, gram_elem e) {
    if (++ps->n_elems > WK_GRAMMAR_MAX_ELEMENTS)
        return fail_at(ps, ps->p, "more than %d elements (repetitions are expanded)", WK_GRAMMAR_MAX_ELEMENTS);
    if (!gram_grow((void **)&v->e, &v->cap, v->n + 1, sizeof *v->e)) return oom(ps);
    v->e[v->n++] = e;
    return true;
}

static int new_rule(parser *ps, const char *name, size_t name_len) {
    if (!gram_grow((void **)&ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof *ps->rules)) return oom(ps), -1;
    ps->rules[ps->n_rules] = (prule){.name = name, .name_len = name_len};
    return (int)ps->n_rules++;
}

static size_t name_hash(const char *name, size_t len) {
    size_t h = 14695981039346656037u;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)name[i]) * 1099511628211u;
    return h;
}

/* The slot of `name` in by_name: its rule's, or the empty one where it would go. */
static size_t name_slot(const parser *ps, const char *name, size_t len) {
    size_t mask = ps->cap_by_name - 1, i = name_hash(name, len) & mask;
    for (; ps->by_name[i]; i = (i + 1) & mask) {
        const prule *r = &ps->rules[ps->by_name[i] - 1];
        if (r->name_len == len && memcmp(r->name, name, len) == 0) break;
    }
    return i;
}

/* A named rule's index, made (undefined yet) on first sight; a hash table, since a grammar a
 * schema converter writes can have tens of thousands of rules. */
static int rule_named(parser *ps, const char *name, size_t len) {
    if (2 * (ps->n_named + 1) > ps->cap_by_name) {
        size_t cap = ps->cap_by_name ? ps->cap_by_name * 2 : 256;
        uint32_t *old = ps->by_name, *t = calloc(cap, sizeof *t);
        if (!t) return oom(ps), -1;
        size_t old_cap = ps->cap_by_name;
        ps->by_name = t;
        ps->cap_by_name = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i]) ps->by_name[name_slot(ps, ps->rules[old[i] - 1].name, ps->rules[old[i] - 1].name_len)] = old[i];
        free(old);
    }
    size_t slot = name_slot(ps, name, len);
    if (ps->by_name[slot]) return (int)ps->by_name[slot] - 1;
    int r = new_rule(ps, name, len);
    if (r < 0) return -1;
    ps->rules[r].first_use = (size_t)(name - ps->text);
    ps->by_name[slot] = (uint32_t)r + 1;
    ps->n_named++;
    return r;
}

static int range_cmp(const void *a, const void *b) {
    const gram_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Appends a class (ranges r[0..n), any order, overlapping allowed) as a GE_CHARS element: sorted,
 * merged, complemented when negated. */
static bool push_class(parser *ps, elem_vec *v, gram_range *r, size_t n, bool negated) {
    if (n) qsort(r, n, sizeof *r, range_cmp); /* [] has none, and r may be NULL */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else r[m++] = r[i];
    }
    size_t first = ps->n_ranges;
    /* room for the complement (m + 1) with one range split by the surrogates (+1) */
    if (!gram_grow((void **)&ps->ranges, &ps->cap_ranges, ps->n_ranges + m + 2, sizeof *ps->ranges)) return oom(ps);
    gram_range *out = ps->ranges + ps->n_ranges;
    size_t k = 0;
    if (negated) {
        uint32_t next = 0;
        for (size_t i = 0; i < m; i++) {
            if (r[i].lo > next) out[k++] = (gram_range){next, r[i].lo - 1};
            next = r[i].hi + 1;
        }
        if (next <= GRAMMAR_MAX_CODE_POINT) out[k++] = (gram_range){next, GRAMMAR_MAX_CODE_POINT};
    } else {
        if (m) memcpy(out, r, m * sizeof *r); /* [] has no ranges, and r may be NULL */
        k = m;
    }
    /* Surrogates (U+D800..U+DFFF) are no text: taken out, so that a token cut inside a UTF-8
     * sequence is never allowed on the strength of a code point no continuation can spell. */
    size_t j = 0;
    for (size_t i = 0; i < k; i++) {
        gram_range x = out[i];
        if (x.hi < 0xD800 || x.lo > 0xDFFF) out[j++] = x;
        else {
            gram_range below = {x.lo, 0xD7FF}, above = {0xE000, x.hi};
            if (x.lo < 0xD800 && x.hi > 0xDFFF) { /* split in two: shift the rest up by one */
                memmove(out + i + 2, out + i + 1, (k - i - 1) * sizeof *out);
                out[j++] = below;
                out[j++] = above;
                k++, i++;
                continue;
            }
            if (x.lo < 0xD800) out[j++] = below;
            if (x.hi > 0xDFFF) out[j++] = above;
        }
    }
    ps->n_ranges += j;
    return vec_push(ps, v, (gram_elem){.kind = GE_CHARS, .a = (uint32_t)first, .n = (uint32_t)(ps->n_ranges - first)});
}

/* ---- lexing --------------------------------------------------------------------------------- */

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments; newlines too when newline_ok (inside parentheses, after | or ::=). */
static void skip_space(parser *ps, bool newline_ok) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t') ps->p++;
        else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r') ps->p++;
        } else if (newline_ok && (c == '\n' || c == '\r')) ps->p++;
        else break;
    }
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class: an escape or one UTF-8 code point. */
static bool read_char(parser *ps, uint32_t *cp) {
    const char *at = ps->p;
    if (ps->p >= ps->end) return fail_at(ps, at, "unexpected end of grammar");
    if (*ps->p == '\\') {
        ps->p++;
        if (ps->p >= ps->end) return fail_at(ps, at, "unexpected end of grammar after \\");
        char c = *ps->p++;
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                int h = ps->p < ps->end ? hex_value(*ps->p) : -1;
                if (h < 0) return fail_at(ps, at, "\\%c needs %d hex digits", c, digits);
                v = v * 16 + (uint32_t)h;
                ps->p++;
            }
            if (v > GRAMMAR_MAX_CODE_POINT) return fail_at(ps, at, "\\%c escape above U+10FFFF", c);
            *cp = v;
            return true;
        }
        switch (c) {
        case 'n': *cp = '\n'; return true;
        case 'r': *cp = '\r'; return true;
        case 't': *cp = '\t'; return true;
        case 'f': *cp = '\f'; return true;
        case 'v': *cp = '\v'; return true;
        case '0': *cp = 0; return true;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
            *cp = (uint32_t)(unsigned char)c;
            return true;
        default: return fail_at(ps, at, "unknown escape \\%c", c);
        }
    }
    utf8_pending end;
    uint32_t tmp[5];
    size_t n = 1;
    unsigned char b = (unsigned char)*ps->p;
    if (b >= 0xF0) n = 4;
    else if (b >= 0xE0) n = 3;
    else if (b >= 0xC0) n = 2;
    if ((size_t)(ps->end - ps->p) < n) return fail_at(ps, at, "invalid UTF-8");
    if (utf8_decode_pending((const uint8_t *)ps->p, n, (utf8_pending){0, 0, 0}, tmp, &end) != 1 || end.n_more)
        return fail_at(ps, at, "invalid UTF-8");
    ps->p += n;
    *cp = tmp[0];
    return true;
}

static bool read_count(parser *ps, long *v) {
    const char *at = ps->p;
    long x = 0;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail_at(ps, at, "expected a number");
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        x = x * 10 + (*ps->p++ - '0');
        if (x > MAX_REPEAT) return fail_at(ps, at, "repetition count above %d", MAX_REPEAT);
    }
    *v = x;
    return true;
}

/* ---- grammar -------------------------------------------------------------------------------- */

static bool parse_alternates(parser *ps, int rule, bool nested);

/* The last symbol (elements sym[0..n)) repeated min..max times (max < 0: unbounded), as llama.cpp
 * expands it: min copies, then a right-recursive rule for the rest (x* -> R ::= x R | ""), so
 * the stack machine never meets left recursion. */
static bool repeat_symbol(parser *ps, elem_vec *v, size_t sym_start, long min, long max) {
    size_t n = v->n - sym_start;
    if (n == 0) return true; /* an empty literal repeated is still the empty string */
    gram_elem *sym = malloc(n * sizeof *sym);
    if (!sym) return oom(ps);
    memcpy(sym, v->e + sym_start, n * sizeof *sym);
    v->n = sym_start;
    ps->n_elems -= n;
    bool ok = true;
    for (long i = 0; ok && i < min; i++)
        for (size_t j = 0; ok && j < n; j++) ok = vec_push(ps, v, sym[j]);
    if (ok && max != min) {
        long optional = max < 0 ? 1 : max - min;
        int prev = -1;
        for (long k = 0; ok && k < optional; k++) {
            /* R_k ::= sym R_{k-1} | ""  (R_0 absent); unbounded: R ::= sym R | "" */
            int r = new_rule(ps, NULL, 0);
            if (r < 0) {
                ok = false;
                break;
            }
            elem_vec *b = &ps->rules[r].body;
            for (size_t j = 0; ok && j < n; j++) ok = vec_push(ps, b, sym[j]);
            if (ok && max < 0) ok = vec_push(ps, b, (gram_elem){.kind = GE_REF, .a = (uint32_t)r, .n = 0});
            else if (ok && prev >= 0) ok = vec_push(ps, b, (gram_elem){.kind = GE_REF, .a = (uint32_t)prev, .n = 0});
            /* END closes "sym R", a lone END is the empty alternative, the last END the rule */
            for (int e = 0; ok && e < 3; e++) ok = vec_push(ps, b, (gram_elem){.kind = GE_END, .a = 0, .n = 0});
            ps->rules[r].defined = true;
            prev = r;
        }
        if (ok) ok = vec_push(ps, v, (gram_elem){.kind = GE_REF, .a = (uint32_t)prev, .n = 0});
    }
    free(sym);
    return ok;
}

/* One alternative into v (ended by GE_END by the caller). */
static bool parse_sequence(parser *ps, elem_vec *v, bool nested) {
    size_t sym_start = SIZE_MAX; /* where the last symbol began, for a postfix operator */
    while (ps->p < ps->end && ps->st == WK_OK) {
        const char *at = ps->p;
        char c = *ps->p;
        if (c == '"') {
            ps->p++;
            sym_start = v->n;
            while (ps->p < ps->end && *ps->p != '"') {
                if (*ps->p == '\n' || *ps->p == '\r') return fail_at(ps, at, "unterminated literal");
                uint32_t cp;
                if (!read_char(ps, &cp)) return false;
                gram_range r = {cp, cp};
                if (!push_class(ps, v, &r, 1, false)) return false;
            }
            if (ps->p >= ps->end) return fail_at(ps, at, "unterminated literal");
            ps->p++;
        } else if (c == '[') {
            ps->p++;
            bool negated = ps->p < ps->end && *ps->p == '^';
            if (negated) ps->p++;
            gram_range *r = NULL;
            size_t n = 0, cap = 0;
            while (ps->p < ps->end && *ps->p != ']') {
                uint32_t lo, hi;
                if (!read_char(ps, &lo)) break;
                hi = lo;
                if (ps->p + 1 < ps->end && ps->p[0] == '-' && ps->p[1] != ']') {
                    ps->p++;
                    if (!read_char(ps, &hi)) break;
                    if (hi < lo) {
                        fail_at(ps, at, "character range with its end below its start");
                        break;
                    }
                }
                if (!gram_grow((void **)&r, &cap, n + 1, sizeof *r)) {
                    oom(ps);
                    break;
                }
                r[n++] = (gram_range){lo, hi};
            }
            if (ps->st == WK_OK && ps->p >= ps->end) fail_at(ps, at, "unterminated character class");
            sym_start = v->n;
            bool ok = ps->st == WK_OK && (ps->p++, push_class(ps, v, r, n, negated));
            free(r);
            if (!ok) return false;
        } else if (c == '.') {
            ps->p++;
            sym_start = v->n;
            gram_range r = {0, GRAMMAR_MAX_CODE_POINT};
            if (!push_class(ps, v, &r, 1, false)) return false;
        } else if (is_name_char(c)) {
            const char *name = ps->p;
            while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
            int r = rule_named(ps, name, (size_t)(ps->p - name));
            if (r < 0) return false;
            sym_start = v->n;
            if (!vec_push(ps, v, (gram_elem){.kind = GE_REF, .a = (uint32_t)r, .n = 0})) return false;
        } else if (c == '(') {
            if (++ps->depth > MAX_NESTING) return fail_at(ps, at, "parentheses nested deeper than %d", MAX_NESTING);
            ps->p++;
            skip_space(ps, true);
            int r = new_rule(ps, NULL, 0);
            if (r < 0 || !parse_alternates(ps, r, true)) return false;
            if (ps->p >= ps->end || *ps->p != ')') return fail_at(ps, ps->p, "expected ')' to close the '(' at offset %zu", (size_t)(at - ps->text));
            ps->p++;
            ps->depth--;
            sym_start = v->n;
            if (!vec_push(ps, v, (gram_elem){.kind = GE_REF, .a = (uint32_t)r, .n = 0})) return false;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (sym_start == SIZE_MAX) return fail_at(ps, at, "'%c' without a symbol before it", c);
            long min = 0, max = -1;
            ps->p++;
            if (c == '+') min = 1;
            else if (c == '?') max = 1;
            else if (c == '{') {
                skip_space(ps, false);
                if (ps->p < ps->end && *ps->p == ',') min = 0;
                else if (!read_count(ps, &min)) return false;
                skip_space(ps, false);
                if (ps->p < ps->end && *ps->p == ',') {
                    ps->p++;
                    skip_space(ps, false);
                    if (ps->p < ps->end && *ps->p != '}' && !read_count(ps, &max)) return false;
                } else max = min;
                skip_space(ps, false);
                if (ps->p >= ps->end || *ps->p != '}') return fail_at(ps, ps->p, "expected '}'");
                ps->p++;
                if (max >= 0 && max < min) return fail_at(ps, at, "repetition {%ld,%ld} with its maximum below its minimum", min, max);
            }
            if (!repeat_symbol(ps, v, sym_start, min, max)) return false;
            sym_start = SIZE_MAX; /* x** is refused, as in llama.cpp */
        } else break;
        skip_space(ps, nested);
    }
    return ps->st == WK_OK;
}

static bool parse_alternates(parser *ps, int rule, bool nested) {
    for (;;) {
        elem_vec v = ps->rules[rule].body;
        ps->rules[rule].body = (elem_vec){0};
        bool ok = parse_sequence(ps, &v, nested) && vec_push(ps, &v, (gram_elem){.kind = GE_END, .a = 0, .n = 0});
        ps->rules[rule].body = v; /* rules[] may have moved while the sequence made rules */
        if (!ok) return false;
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            skip_space(ps, true);
            continue;
        }
        break;
    }
    ps->rules[rule].defined = true;
    return vec_push(ps, &ps->rules[rule].body, (gram_elem){.kind = GE_END, .a = 0, .n = 0}); /* a second END ends the rule */
}

static bool parse_rule(parser *ps) {
    const char *name = ps->p;
    while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
    if (ps->p == name) return fail_at(ps, name, "expected a rule name");
    size_t len = (size_t)(ps->p - name);
    int r = rule_named(ps, name, len);
    if (r < 0) return false;
    if (ps->rules[r].defined) return fail_at(ps, name, "rule '%.*s' defined twice", (int)len, name);
    skip_space(ps, false);
    if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3) != 0) return fail_at(ps, ps->p, "expected '::='");
    ps->p += 3;
    skip_space(ps, true);
    if (!parse_alternates(ps, r, false)) return false;
    if (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r')
        return fail_at(ps, ps->p, *ps->p == ')' ? "')' without a matching '('" : "unexpected character '%c'", *ps->p);
    return true;
}

/* ---- checks and flattening ------------------------------------------------------------------ */

/* Which rules can match the empty string: a worklist over the alternatives, each waiting for the
 * rules it references to turn nullable (linear in the grammar's size). */
static bool *nullable_rules(const wk_grammar *g) {
    uint32_t nr = g->n_rules, na = g->rule_first_alt[nr - 1] + g->rule_n_alts[nr - 1];
    bool *nullable = calloc(nr, 1);
    uint32_t *need = calloc(na, sizeof *need), *alt_rule = malloc(na * sizeof *alt_rule);
    uint32_t *first_use = calloc((size_t)nr + 1, sizeof *first_use), *uses = NULL, *queue = malloc(nr * sizeof *queue);
    size_t n_uses = 0, qn = 0;
    bool ok = nullable && need && alt_rule && first_use && queue;
    for (uint32_t r = 0; ok && r < nr; r++) /* count each rule's references, CSR style */
        for (uint32_t a = g->rule_first_alt[r]; a < g->rule_first_alt[r] + g->rule_n_alts[r]; a++) {
            alt_rule[a] = r;
            for (const gram_elem *e = g->elems + g->alts[a]; e->kind != GE_END; e++) {
                if (e->kind == GE_CHARS) need[a] = UINT32_MAX; /* never empty */
                else if (need[a] != UINT32_MAX) need[a]++;
                if (e->kind == GE_REF) first_use[e->a + 1]++, n_uses++;
            }
        }
    for (uint32_t r = 0; ok && r < nr; r++) first_use[r + 1] += first_use[r];
    ok = ok && (uses = malloc((n_uses + 1) * sizeof *uses)) != NULL;
    for (uint32_t a = 0; ok && a < na; a++)
        for (const gram_elem *e = g->elems + g->alts[a]; e->kind != GE_END; e++)
            if (e->kind == GE_REF) uses[first_use[e->a]++] = a; /* first_use becomes each rule's end */
    for (uint32_t a = 0; ok && a < na; a++)
        if (need[a] == 0 && !nullable[alt_rule[a]]) nullable[alt_rule[a]] = true, queue[qn++] = alt_rule[a];
    while (ok && qn) {
        uint32_t r = queue[--qn];
        for (uint32_t i = r ? first_use[r - 1] : 0; i < first_use[r]; i++) {
            uint32_t a = uses[i];
            if (need[a] != UINT32_MAX && --need[a] == 0 && !nullable[alt_rule[a]])
                nullable[alt_rule[a]] = true, queue[qn++] = alt_rule[a];
        }
    }
    free(need), free(alt_rule), free(first_use), free(uses), free(queue);
    if (!ok) free(nullable);
    return ok ? nullable : NULL;
}

/* Refuses left recursion (a rule reachable from itself before any character is matched): the
 * stack machine would expand it forever. A depth-first search over "can start with" edges, each
 * rule's edges walked once, with an explicit stack (grammars may have thousands of rules). */
static bool check_left_recursion(parser *ps, const wk_grammar *g) {
    typedef struct frame {
        uint32_t rule, alt, off; /* the next edge: element off of the rule's alternative alt */
    } frame;
    uint32_t nr = g->n_rules;
    bool *nullable = nr ? nullable_rules(g) : NULL;
    uint8_t *color = calloc(nr, 1); /* 1: on the path, 2: done */
    frame *stack = malloc((size_t)nr * sizeof *stack);
    if (!nullable || !color || !stack) {
        free(nullable), free(color), free(stack);
        return oom(ps);
    }
    bool ok = true;
    for (uint32_t root = 0; root < nr && ok; root++) {
        if (color[root]) continue;
        size_t sp = 0;
        stack[sp++] = (frame){root, 0, 0};
        color[root] = 1;
        while (sp && ok) {
            frame *f = &stack[sp - 1];
            uint32_t next = UINT32_MAX;
            while (next == UINT32_MAX && f->alt < g->rule_n_alts[f->rule]) {
                const gram_elem *e = g->elems + g->alts[g->rule_first_alt[f->rule] + f->alt] + f->off;
                if (e->kind == GE_REF) next = e->a;
                /* past a nullable reference the next element can come first too; else the alternative is done */
                if (e->kind == GE_REF && nullable[e->a]) f->off++;
                else f->alt++, f->off = 0;
            }
            if (next == UINT32_MAX) {
                color[f->rule] = 2;
                sp--;
            } else if (color[next] == 1) {
                uint32_t named = next;
                for (size_t i = sp; i > 0 && !ps->rules[named].name; i--) named = stack[i - 1].rule;
                const prule *pr = &ps->rules[named];
                ok = fail_at(ps, pr->name ? pr->name : ps->text, "rule '%.*s' is left-recursive (it can reach itself before matching a character)",
                             pr->name ? (int)pr->name_len : 1, pr->name ? pr->name : "?");
            } else if (color[next] == 0) {
                color[next] = 1;
                stack[sp++] = (frame){next, 0, 0};
            }
        }
    }
    free(nullable), free(color), free(stack);
    return ok;
}

/* Every matcher starts from the same parse stacks; a grammar whose start alone passes the stack
 * limit could never be used, so it is refused here, where the client gets a 400, and a matcher can
 * then fail to start only for want of memory. */
static bool check_start(parser *ps, const wk_grammar *g, const char *root_at) {
    stack_set start = {0};
    size_t budget = WK_GRAMMAR_MAX_STEP_WORK;
    wk_status st = stack_set_start(g, &start, &budget);
    stack_set_free(&start);
    if (st == WK_ERR_NOMEM) return oom(ps);
    if (st != WK_OK)
        return fail_at(ps, root_at, "the grammar is too ambiguous where it starts (past the matcher's limits: %d parse stacks of %u positions in all)",
                       WK_GRAMMAR_MAX_STACKS, WK_GRAMMAR_MAX_STACK_POSITIONS);
    return true;
}

static void parser_free(parser *ps) {
    for (size_t i = 0; i < ps->n_rules; i++) free(ps->rules[i].body.e);
    free(ps->rules);
    free(ps->by_name);
    free(ps->ranges);
}

wk_grammar *wk_grammar_retain(wk_grammar *g) {
    if (g) atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    return g;
}

void wk_grammar_free(wk_grammar *g) {
    /* acq_rel: the last holder sees every other holder's reads done before it frees */
    if (!g || atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1) return;
    free(g->elems), free(g->ranges), free(g->alts), free(g->rule_first_alt), free(g->rule_n_alts);
    free(g);
}

static wk_grammar *flatten(parser *ps) {
    wk_grammar *g = calloc(1, sizeof *g);
    if (g) atomic_init(&g->refs, 1);
    size_t n_alts = 0, n_elems = 0;
    for (size_t r = 0; r < ps->n_rules; r++) {
        const elem_vec *b = &ps->rules[r].body;
        n_elems += b->n;
        for (size_t i = 0; i + 1 < b->n; i++)
            if (b->e[i].kind == GE_END) n_alts++;
    }
    if (!g || !(g->elems = malloc(n_elems * sizeof *g->elems)) || !(g->alts = malloc((n_alts + 1) * sizeof *g->alts)) ||
        !(g->rule_first_alt = malloc(ps->n_rules * sizeof(uint32_t))) || !(g->rule_n_alts = malloc(ps->n_rules * sizeof(uint32_t))) ||
        !(g->ranges = malloc((ps->n_ranges + 1) * sizeof *g->ranges))) {
        wk_grammar_free(g);
        oom(ps);
        return NULL;
    }
    if (ps->n_ranges) memcpy(g->ranges, ps->ranges, ps->n_ranges * sizeof *g->ranges);
    g->n_ranges = (uint32_t)ps->n_ranges;
    g->n_rules = (uint32_t)ps->n_rules;
    uint32_t ne = 0, na = 0;
    for (size_t r = 0; r < ps->n_rules; r++) {
        const elem_vec *b = &ps->rules[r].body;
        g->rule_first_alt[r] = na;
        size_t i = 0;
        while (i + 1 < b->n) { /* the body's last element is the rule's closing END */
            g->alts[na++] = ne;
            while (b->e[i].kind != GE_END) {
                gram_elem x = b->e[i++];
                if (x.kind == GE_CHARS)
                    for (uint32_t k = 0; k < x.n; k++)
                        for (uint32_t c = g->ranges[x.a + k].lo; c <= g->ranges[x.a + k].hi && c < 128; c++)
                            x.ascii[c / 64] |= 1ull << (c % 64);
                g->elems[ne++] = x;
            }
            g->elems[ne++] = b->e[i++];
        }
        g->rule_n_alts[r] = na - g->rule_first_alt[r];
    }
    g->n_elems = ne;
    return g;
}

wk_status wk_grammar_parse(const char *text, size_t len, wk_grammar **out, char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = 0;
    parser ps = {.text = text, .p = text, .end = text + len, .err = err, .errlen = errlen};
    if (len > WK_GRAMMAR_MAX_TEXT) {
        fail_at(&ps, text, "grammar longer than %u bytes", WK_GRAMMAR_MAX_TEXT);
        return ps.st;
    }
    if (memchr(text, 0, len)) {
        fail_at(&ps, (const char *)memchr(text, 0, len), "NUL byte in the grammar (write \\x00)");
        return ps.st;
    }
    for (;;) {
        skip_space(&ps, true);
        if (ps.p >= ps.end || !parse_rule(&ps)) break;
    }
    wk_grammar *g = NULL;
    if (ps.st == WK_OK) {
        int root = -1;
        for (size_t i = 0; i < ps.n_rules && ps.st == WK_OK; i++) {
            const prule *r = &ps.rules[i];
            if (!r->defined) fail_at(&ps, ps.text + r->first_use, "rule '%.*s' is used but never defined", (int)r->name_len, r->name);
            else if (r->name && r->name_len == 4 && memcmp(r->name, "root", 4) == 0) root = (int)i;
        }
        if (ps.st == WK_OK && root < 0) fail_at(&ps, ps.end, "no rule named 'root' (where the text starts)");
        if (ps.st == WK_OK && (g = flatten(&ps))) {
            g->root = (uint32_t)root;
            if (!check_left_recursion(&ps, g) || !check_start(&ps, g, ps.rules[root].name)) {
                wk_grammar_free(g);
                g = NULL;
            }
        }
    }
    parser_free(&ps);
    if (ps.st == WK_OK) *out = g;
    return ps.st;
}
