/* Converts a JSON Schema into GBNF (see schema_grammar.h). Each schema part becomes one rule; what a
 * grammar cannot enforce is refused with the JSON pointer and keyword, never silently dropped. Where
 * the schema leaves a choice open the grammar takes the narrower one, as llama.cpp's converter does:
 * object keys come in a fixed order (required ones first, then optional ones, each in the schema's
 * order), numbers have bounded digit counts, and whitespace between tokens is bounded, so that a
 * model cannot loop forever inside a valid prefix. */
#include "api/schema_grammar.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/integer_range.h"
#include "api/regex_grammar.h"

#define MAX_DEPTH 64
#define MAX_GRAMMAR_BYTES (1u << 20) /* the engine's WK_GRAMMAR_MAX_TEXT */
#define MAX_REPEAT 10000             /* the engine's largest {m,n} count */
#define UNBOUNDED_INT_DIGITS 16      /* as llama.cpp's integral-part: [1-9] [0-9]{0,15} */
#define MAX_INT_BOUND 1000000000000000000LL /* 10^18: 18-digit bounds keep 10^len inside int64 */
#define NAME_HINT_MAX 48
#define HINT_BUF 160 /* room for two 64-byte hint parts and a suffix */
#define MAX_OPEN_GROUPS 96 /* nested ( ) per construct, well inside the engine's 256 */
#define MAX_KEYS 2048      /* properties + required of one object */

/* Fixed rules, emitted only when used. Whitespace is one space or a newline and an indent of at most
 * 20 (llama.cpp's bound), so it cannot go on forever. */
enum { P_SPACE, P_CHAR, P_STRING, P_NUMBER, P_INTEGER, P_BOOLEAN, P_NULL, P_VALUE, P_OBJECT, P_ARRAY,
       P_DATE, P_TIME, P_DATE_TIME, P_UUID, P_COUNT };
#define BIT(p) (1u << (p))
static const struct primitive { const char *name, *body; unsigned deps; } primitives[P_COUNT] = {
    [P_SPACE] = {"space", "( \" \" | \"\\n\" [ \\t]{0,20} )?", 0},
    /* one character of a JSON string; \u escapes of UTF-16 surrogates are left out, so that each char is
     * one code point (minLength and maxLength count code points) and no string holds half a character */
    [P_CHAR] = {"char", "[^\\\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\\\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )", 0},
    [P_STRING] = {"string", "\"\\\"\" char* \"\\\"\"", BIT(P_CHAR)},
    [P_NUMBER] = {"number", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] ( \"+\" | \"-\" )? [0-9]{1,16} )?", 0},
    [P_INTEGER] = {"integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} )", 0},
    [P_BOOLEAN] = {"boolean", "\"true\" | \"false\"", 0},
    [P_NULL] = {"null", "\"null\"", 0},
    [P_VALUE] = {"value", "object | array | string | number | boolean | null",
                 BIT(P_OBJECT) | BIT(P_ARRAY) | BIT(P_STRING) | BIT(P_NUMBER) | BIT(P_BOOLEAN) | BIT(P_NULL)},
    [P_OBJECT] = {"object", "\"{\" space ( string space \":\" space value space "
                            "( \",\" space string space \":\" space value space )* )? \"}\"",
                  BIT(P_SPACE) | BIT(P_STRING) | BIT(P_VALUE)},
    [P_ARRAY] = {"array", "\"[\" space ( value space ( \",\" space value space )* )? \"]\"", BIT(P_SPACE) | BIT(P_VALUE)},
    /* Dates as Python's date.fromisoformat takes them, narrowed where that is simpler: years from
     * 1000, each month's days, 29 February left out (leap years are not worth a grammar). */
    [P_DATE] = {"date", "[1-9] [0-9]{3} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | "
                        "\"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
                        "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )", 0},
    /* RFC 3339 partial-time with its offset; no leap second. */
    [P_TIME] = {"time", "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? "
                        "( \"Z\" | ( \"+\" | \"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )", 0},
    [P_DATE_TIME] = {"date-time", "date \"T\" time", BIT(P_DATE) | BIT(P_TIME)},
    [P_UUID] = {"uuid", "[0-9a-fA-F]{8} ( \"-\" [0-9a-fA-F]{4} ){3} \"-\" [0-9a-fA-F]{12}", 0},
};

/* JSON types a schema allows. */
enum { T_NULL = 1, T_BOOLEAN = 2, T_OBJECT = 4, T_ARRAY = 8, T_STRING = 16, T_NUMBER = 32, T_INTEGER = 64, T_ANY = 127 };
static const struct { const char *name; unsigned bit; } type_names[] = {{"null", T_NULL}, {"boolean", T_BOOLEAN},
    {"object", T_OBJECT}, {"array", T_ARRAY}, {"string", T_STRING}, {"number", T_NUMBER}, {"integer", T_INTEGER}};

/* Keywords that only describe (ignored), and those this converter enforces; any other is refused. */
static const char *const annotation_keywords[] = {"$schema", "$id", "id", "$comment", "title", "description",
    "default", "examples", "deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL};
static const char *const handled_keywords[] = {"type", "enum", "const", "properties", "required",
    "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "format",
    "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref",
    "uniqueItems", NULL};
static const char *const numeric_bound_keywords[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

typedef struct converter {
    const cJSON *root;
    text_buf rules; /* finished rules, one a line */
    char **names;   /* every rule name handed out, primitives' included, so none is given twice */
    struct ref_rule { const cJSON *target; const char *name; } *refs; /* one rule per $ref target */
    size_t n_names, cap_names, n_refs, cap_refs;
    unsigned primitives_used;
    text_buf pointer; /* JSON pointer of the schema part being converted, for errors */
    char *err; /* the first error, errlen bytes */
    size_t errlen;
    bool failed;
} converter;

static bool in_list(const char *const *list, const char *s) {
    for (; *list; list++)
        if (!strcmp(*list, s)) return true;
    return false;
}

/* Records the first error as "<pointer>/<keyword>: <message>"; always false, for `return fail(...)`. */
static bool fail(converter *c, const char *keyword, const char *fmt, ...) {
    if (c->failed) return false;
    c->failed = true;
    if (!c->errlen) return false;
    const char *at = c->pointer.p ? c->pointer.p : "";
    int n = keyword ? snprintf(c->err, c->errlen, "%s/%s: \"%s\" ", at, keyword, keyword)
                    : snprintf(c->err, c->errlen, "%s: ", *at ? at : "(root)");
    if (n >= 0 && (size_t)n < c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return false;
}

static bool addn(converter *c, text_buf *b, const char *s, size_t n) {
    if (c->failed) return false;
    if (!text_buf_add_limited(b, s, n, MAX_GRAMMAR_BYTES))
        return fail(c, NULL, "the grammar would exceed %u bytes (or memory ran out)", MAX_GRAMMAR_BYTES);
    return true;
}
static bool add(converter *c, text_buf *b, const char *s) { return addn(c, b, s, strlen(s)); }
/* Appends each string up to the NULL that ends the list. */
static bool cat(converter *c, text_buf *b, ...) {
    va_list ap;
    va_start(ap, b);
    for (const char *s; (s = va_arg(ap, const char *));) add(c, b, s);
    va_end(ap);
    return !c->failed;
}
/* Room for one more of n elements of `size` bytes in *array (capacity *cap). */
static bool grow(converter *c, void *array, size_t *cap, size_t n, size_t size) {
    if (n < *cap) return true;
    void *bigger = realloc(*(void **)array, (*cap = *cap ? *cap * 2 : 64) * size);
    if (!bigger) return fail(c, NULL, "out of memory");
    *(void **)array = bigger;
    return true;
}
static bool addf(converter *c, text_buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < sizeof tmp ? addn(c, b, tmp, (size_t)n) : fail(c, NULL, "internal: long format");
}

/* The JSON pointer grows by one segment (~ and / escaped as ~0 and ~1); returns the length to cut back to. */
static size_t pointer_push(converter *c, const char *segment) {
    size_t old = c->pointer.len;
    add(c, &c->pointer, "/");
    for (const char *s = segment; *s; s++)
        add(c, &c->pointer, *s == '~' ? "~0" : *s == '/' ? "~1" : (char[2]){*s, 0});
    return old;
}
static void pointer_pop(converter *c, size_t len) {
    if (c->pointer.p) c->pointer.p[c->pointer.len = len] = 0;
}
/* Makes `pointer` the current one (a $ref target's, an allOf member's) until pointer_restore. */
static text_buf pointer_replace(converter *c, const char *pointer) {
    text_buf saved = c->pointer;
    c->pointer = (text_buf){0};
    add(c, &c->pointer, pointer);
    return saved;
}
static void pointer_restore(converter *c, text_buf saved) {
    text_buf_free(&c->pointer);
    c->pointer = saved;
}

static const char *use_primitive(converter *c, int p) {
    c->primitives_used |= BIT(p);
    for (unsigned before = 0; before != c->primitives_used;) /* dependencies' dependencies: array -> value -> string -> char */
        for (int d = (before = c->primitives_used, 0); d < P_COUNT; d++)
            if (c->primitives_used & BIT(d)) c->primitives_used |= primitives[d].deps;
    return primitives[p].name;
}

/* A rule name from a hint: [A-Za-z0-9-] only, at most NAME_HINT_MAX bytes, then "-N" with N the
 * count of names so far, which makes it unique without a search (its last '-' part is N, and no two
 * calls share one); the primitives and root, named first, keep theirs. */
static const char *new_name(converter *c, const char *hint) {
    char base[NAME_HINT_MAX + 1], name[NAME_HINT_MAX + 24];
    size_t n = 0;
    for (const char *s = hint; *s && n < NAME_HINT_MAX; s++) { /* a run of other bytes becomes one '-' */
        bool ok = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9');
        if (ok || (n && base[n - 1] != '-')) base[n++] = ok ? *s : '-';
    }
    while (n && base[n - 1] == '-') n--;
    if (!n) base[n++] = 'r';
    base[n] = 0;
    if (c->n_names <= P_COUNT) snprintf(name, sizeof name, "%s", base);
    else snprintf(name, sizeof name, "%s-%zu", base, c->n_names);
    char *copy = grow(c, &c->names, &c->cap_names, c->n_names, sizeof *c->names) ? strdup(name) : NULL;
    if (!copy) return fail(c, NULL, "out of memory"), NULL;
    return c->names[c->n_names++] = copy;
}

static bool define_rule(converter *c, const char *name, const text_buf *body) {
    return cat(c, &c->rules, name, " ::= ", body->p ? body->p : "", "\n", NULL);
}

/* A GBNF "literal" holding bytes as they are: quotes and backslashes escaped, control bytes as \xHH. */
static bool add_literal(converter *c, text_buf *b, const char *s, size_t n) {
    add(c, b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        bool control = ch < 0x20 || ch == 0x7f;
        if (control || ch == '"' || ch == '\\') addf(c, b, control ? "\\x%02X" : "\\%c", ch);
        else addn(c, b, (const char *)&ch, 1);
    }
    return add(c, b, "\"");
}

static const char *visit(converter *c, const cJSON *schema, const char *hint, const char *fixed_name, int depth);

/* A child's name hint: the parent's and the child's, joined by "-" (root's children go by their own). */
static char *join_hint(char out[HINT_BUF], const char *parent, const char *child) {
    if (!strcmp(parent, "root")) snprintf(out, HINT_BUF, "%.64s", child);
    else snprintf(out, HINT_BUF, "%.64s-%.64s", parent, child);
    return out;
}

/* Converts the child schema at <pointer>/kw[/seg] (seg NULL: index, if >= 0), the pointer following
 * along for errors; its rule is named from the parent's hint and child_hint (NULL: seg or index). */
static const char *visit_child(converter *c, const cJSON *schema, const char *kw, const char *seg, long index,
                               const char *hint, const char *child_hint, int depth) {
    char number[24], sub[HINT_BUF];
    snprintf(number, sizeof number, "%ld", index);
    size_t mark = pointer_push(c, kw);
    if (seg || index >= 0) pointer_push(c, seg ? seg : number);
    const char *name = visit(c, schema, join_hint(sub, hint, child_hint ? child_hint : seg ? seg : number), NULL, depth + 1);
    pointer_pop(c, mark);
    return name;
}

/* Whether the schema object has a keyword that constrains values, other than those in `allowed`. */
static const char *other_constraint(const cJSON *schema, const char *const *allowed) {
    for (const cJSON *k = schema->child; k; k = k->next)
        if (!in_list(annotation_keywords, k->string) && !in_list(allowed, k->string)) return k->string;
    return NULL;
}

/* Resolves a local $ref: "#" or a JSON pointer under "#/". */
static const cJSON *resolve_ref(converter *c, const char *ref) {
    if (ref[0] != '#' || (ref[1] && ref[1] != '/'))
        return fail(c, "$ref", "must point inside the schema (\"#\", \"#/$defs/NAME\"), not \"%s\"", ref), NULL;
    const cJSON *node = c->root;
    const char *s = ref + 1;
    while (*s == '/') {
        char seg[256];
        size_t n = 0;
        for (s++; *s && *s != '/'; s++) /* ~0 and ~1 stand for ~ and / */
            if (n + 1 < sizeof seg) seg[n++] = *s == '~' && (s[1] == '0' || s[1] == '1') ? (*++s == '0' ? '~' : '/') : *s;
        seg[n] = 0;
        node = cJSON_IsArray(node) ? cJSON_GetArrayItem(node, atoi(seg)) : cJSON_GetObjectItemCaseSensitive(node, seg);
        if (!node) return fail(c, "$ref", "\"%s\" points at nothing in the schema", ref), NULL;
    }
    return node;
}

/* Rule for a $ref: the target's own rule, made once, so recursive schemas become recursive rules. */
static const char *visit_ref(converter *c, const char *ref, int depth) {
    const cJSON *target = resolve_ref(c, ref);
    if (!target) return NULL; /* refused (c->err says why); ref may not even start with '#' */
    text_buf saved = pointer_replace(c, ref + 1);
    const char *name = NULL, *last = strrchr(ref, '/');
    for (size_t i = 0; i < c->n_refs && !name; i++)
        if (c->refs[i].target == target) name = c->refs[i].name;
    if (!name && (name = new_name(c, last && last[1] ? last + 1 : "root")) &&
        grow(c, &c->refs, &c->cap_refs, c->n_refs, sizeof *c->refs)) {
        c->refs[c->n_refs++] = (struct ref_rule){target, name}; /* before the body, which may refer to it */
        visit(c, target, name, name, depth + 1);
    }
    pointer_restore(c, saved);
    return c->failed ? NULL : name;
}

static bool json_type_matches(const cJSON *v, unsigned types) {
    unsigned type = cJSON_IsNull(v) ? T_NULL : cJSON_IsBool(v) ? T_BOOLEAN : cJSON_IsObject(v) ? T_OBJECT
                  : cJSON_IsArray(v) ? T_ARRAY : cJSON_IsString(v) ? T_STRING : T_NUMBER;
    return (types & type) || (type == T_NUMBER && (types & T_INTEGER) && v->valuedouble == floor(v->valuedouble));
}

/* The types "type" names; T_ANY without "type". */
static bool parse_types(converter *c, const cJSON *schema, unsigned *types) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    *types = type ? 0 : T_ANY;
    const cJSON *list = cJSON_IsArray(type) ? type->child : type;
    for (const cJSON *t = list; t; t = cJSON_IsArray(type) ? t->next : NULL) {
        unsigned bit = 0;
        for (size_t i = 0; cJSON_IsString(t) && i < sizeof type_names / sizeof *type_names; i++)
            if (!strcmp(t->valuestring, type_names[i].name)) bit = type_names[i].bit;
        if (!bit) return fail(c, "type", "must be one of null, boolean, object, array, string, number, integer");
        *types |= bit;
    }
    if (!*types) return fail(c, "type", "is an empty list: it accepts nothing");
    return true;
}

/* enum and const: the values' exact compact JSON text, those of the wrong type (with "type") left out. */
static bool enum_body(converter *c, const cJSON *schema, text_buf *body) {
    static const char *const allowed[] = {"enum", "const", "type", NULL};
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(schema, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(schema, "const");
    const char *kw = en ? "enum" : "const", *other = other_constraint(schema, allowed);
    if (other || (en && cn)) return fail(c, other ? other : "const", "cannot be combined with %s here", kw);
    if (en && (!cJSON_IsArray(en) || !en->child)) return fail(c, "enum", "must be a non-empty array");
    unsigned types;
    if (!parse_types(c, schema, &types)) return false;
    int n = 0;
    for (const cJSON *v = en ? en->child : cn; v; v = en ? v->next : NULL) {
        if (!json_type_matches(v, types)) continue;
        char *text = cJSON_PrintUnformatted(v);
        if (!text) return fail(c, kw, "out of memory");
        add(c, body, n++ ? " | " : ""), add_literal(c, body, text, strlen(text));
        free(text);
    }
    return n ? !c->failed : fail(c, kw, "no value has the schema's type");
}

/* anyOf and oneOf: one alternative per branch. oneOf's "exactly one" is not enforced: the branches of
 * the schemas it is used for (tagged unions, X-or-null) exclude each other already. */
static bool alternatives_body(converter *c, const cJSON *list, const char *kw, const char *hint, int depth, text_buf *body) {
    if (!cJSON_IsArray(list) || !list->child) return fail(c, kw, "must be a non-empty array of schemas");
    int i = 0;
    for (const cJSON *branch = list->child; branch; branch = branch->next, i++) {
        const char *name = visit_child(c, branch, kw, NULL, i, hint, NULL, depth);
        if (!name || !cat(c, body, i ? " | " : "", name, NULL)) return false;
    }
    return !c->failed;
}

static bool read_count(converter *c, const cJSON *schema, const char *kw, long *value) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(schema, kw);
    if (!v) return true;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return fail(c, kw, "must be a non-negative integer");
    if (v->valuedouble > MAX_REPEAT) return fail(c, kw, "above %d cannot be enforced", MAX_REPEAT);
    *value = (long)v->valuedouble;
    return true;
}

/* {m,n} in its shortest spelling; max < 0 is unbounded. */
static bool add_repeat(converter *c, text_buf *b, long min, long max) {
    if (max < 0) return min <= 1 ? add(c, b, min ? "+" : "*") : addf(c, b, "{%ld,}", min);
    if (min == 0 && max == 1) return add(c, b, "?");
    return min == max ? addf(c, b, "{%ld}", min) : addf(c, b, "{%ld,%ld}", min, max);
}

/* Where a pattern's top-level alternatives part ('|' outside groups and classes): ECMA-262 anchors
 * each alternative on its own (`^a|b`: starts with a, or holds b). The count, or -1 past max. */
static int top_level_bars(const char *re, size_t n, size_t *bars, int max) {
    int depth = 0, k = 0;
    for (size_t i = 0; i < n && k >= 0; i++) {
        if (re[i] == '\\') i++;
        else if (re[i] == '[') { /* to the class's end: a ']' first (after a '^') is a member */
            i += 1 + (i + 1 < n && re[i + 1] == '^');
            for (i += i < n && re[i] == ']'; i < n && re[i] != ']'; i++) i += re[i] == '\\';
        } else if (re[i] == '(' || re[i] == ')') depth += re[i] == '(' ? 1 : -1;
        else if (re[i] == '|' && depth == 0) k = k == max ? -1 : (bars[k] = i, k + 1);
    }
    return k;
}

/* A pattern (JSON Schema lets it match anywhere in the string unless anchored) via regex_grammar.c,
 * one rule set per top-level alternative, named pattern_N..., which new_name never gives ('_'). */
static bool pattern_to_gbnf(converter *c, const char *re, text_buf *body) {
    size_t n = strlen(re), bars[64];
    int n_bars = top_level_bars(re, n, bars, 64);
    if (n_bars < 0) return fail(c, "pattern", "has more than 64 alternatives");
    const char *any = use_primitive(c, P_CHAR);
    add(c, body, "\"\\\"\" ( ");
    for (int i = 0; i <= n_bars; i++) {
        size_t from = i ? bars[i - 1] + 1 : 0, to = i < n_bars ? bars[i] : n, escapes = 0;
        while (to - from >= escapes + 2 && re[to - 2 - escapes] == '\\') escapes++;
        bool head = to > from && re[from] == '^', tail = to > from + head && re[to - 1] == '$' && escapes % 2 == 0;
        char name[32], msg[256];
        snprintf(name, sizeof name, "pattern_%zu", c->rules.len); /* grows with every rule: unique */
        if (!regex_gbnf_rules(re + from, to - from, name, true, &c->rules, msg, sizeof msg))
            return fail(c, "pattern", "%s", msg);
        cat(c, body, i ? " | " : "", head ? "" : any, head ? "" : "* ", name, tail ? "" : " ", tail ? "" : any,
            tail ? "" : "*", NULL);
    }
    return add(c, body, " ) \"\\\"\"");
}

static bool string_body(converter *c, const cJSON *schema, text_buf *body) {
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(schema, "format");
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(schema, "pattern");
    long min = 0, max = -1;
    if (!read_count(c, schema, "minLength", &min) || !read_count(c, schema, "maxLength", &max)) return false;
    if (max >= 0 && min > max) return fail(c, "minLength", "is above maxLength: no string satisfies both");
    if (format) {
        static const struct { const char *format; int rule; } formats[] = {
            {"date", P_DATE}, {"time", P_TIME}, {"date-time", P_DATE_TIME}, {"uuid", P_UUID}};
        if (!cJSON_IsString(format)) return fail(c, "format", "must be a string");
        if (pattern || min || max >= 0) return fail(c, "format", "cannot be combined with pattern, minLength or maxLength");
        for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
            if (!strcmp(format->valuestring, formats[i].format))
                return cat(c, body, "\"\\\"\" ", use_primitive(c, formats[i].rule), " \"\\\"\"", NULL);
        return fail(c, "format", "is \"%s\", which is not supported (date, time, date-time and uuid are)", format->valuestring);
    }
    if (pattern) {
        if (!cJSON_IsString(pattern)) return fail(c, "pattern", "must be a string");
        if (min || max >= 0) return fail(c, "pattern", "cannot be combined with minLength or maxLength");
        return pattern_to_gbnf(c, pattern->valuestring, body);
    }
    if (!min && max < 0) return add(c, body, use_primitive(c, P_STRING));
    cat(c, body, "\"\\\"\" ", use_primitive(c, P_CHAR), NULL), add_repeat(c, body, min, max);
    return add(c, body, " \"\\\"\"");
}

/* One integer bound from minimum/maximum and their exclusive forms; *set false when absent. */
static bool read_bound(converter *c, const cJSON *schema, const char *kw, bool lower, bool *set, long long *bound) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(schema, kw);
    if (!v) return true;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return fail(c, kw, "must be a number");
    if (fabs(v->valuedouble) >= (double)MAX_INT_BOUND) return fail(c, kw, "bounds of 10^18 or beyond cannot be enforced");
    double x = v->valuedouble;
    bool exclusive = kw[0] == 'e'; /* exclusiveMinimum, exclusiveMaximum */
    long long b = lower ? (long long)(exclusive ? floor(x) + 1 : ceil(x)) : (long long)(exclusive ? ceil(x) - 1 : floor(x));
    if (!*set || (lower ? b > *bound : b < *bound)) *bound = b;
    *set = true;
    return true;
}

/* Natural numbers lo..hi (hi < 0: unbounded) from integer_range.c, within the grammar's byte limit. */
static bool natural_gbnf(converter *c, text_buf *b, long long lo, long long hi) {
    text_buf range = {0};
    bool ok = integer_range_gbnf(&range, lo, hi, UNBOUNDED_INT_DIGITS) ? addn(c, b, range.p, range.len) : fail(c, NULL, "out of memory");
    text_buf_free(&range);
    return ok;
}

static bool integer_body(converter *c, const cJSON *schema, text_buf *body) {
    bool set[2] = {false, false}; /* the lowest and the highest integer allowed */
    long long bound[2] = {0, 0};
    for (int i = 0; numeric_bound_keywords[i]; i++) /* minimum, maximum, exclusiveMinimum, exclusiveMaximum */
        if (!read_bound(c, schema, numeric_bound_keywords[i], !(i & 1), &set[i & 1], &bound[i & 1])) return false;
    bool has_lo = set[0], has_hi = set[1];
    long long lo = bound[0], hi = bound[1];
    if (!has_lo && !has_hi) return add(c, body, use_primitive(c, P_INTEGER));
    if (has_lo && has_hi && lo > hi) return fail(c, has_lo ? "minimum" : "exclusiveMinimum", "leaves no integer between the bounds");
    bool negatives = !has_lo || lo < 0;
    add(c, body, "( ");
    if (negatives) /* "-" and a magnitude from -hi (or 1) to -lo (or unbounded) */
        add(c, body, "\"-\" "), natural_gbnf(c, body, has_hi && hi < 0 ? -hi : 1, has_lo ? -lo : -1);
    if (!has_hi || hi >= 0) add(c, body, negatives ? " | " : ""), natural_gbnf(c, body, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    return add(c, body, " )");
}

/* Arrays: prefixItems (or a draft-7 items list) for the first elements, items for the rest (none after a
 * prefix when items is absent: the narrower reading, as llama.cpp's), minItems..maxItems elements. */
static bool array_body(converter *c, const cJSON *schema, const char *hint, int depth, text_buf *body) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(schema, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(schema, "prefixItems");
    const char *prefix_kw = "prefixItems";
    if (cJSON_IsArray(items) && !prefix) prefix = items, items = NULL, prefix_kw = "items";
    if (prefix && !cJSON_IsArray(prefix)) return fail(c, "prefixItems", "must be an array of schemas");
    const cJSON *unique = cJSON_GetObjectItemCaseSensitive(schema, "uniqueItems");
    if (unique && !cJSON_IsFalse(unique)) return fail(c, "uniqueItems", "cannot be enforced by the grammar");
    long min = 0, max = -1, n_prefix = prefix ? cJSON_GetArraySize(prefix) : 0;
    if (!read_count(c, schema, "minItems", &min) || !read_count(c, schema, "maxItems", &max)) return false;
    const char *item_rule = NULL;
    if (items && !cJSON_IsFalse(items) && !(item_rule = visit_child(c, items, "items", NULL, -1, hint, "item", depth)))
        return false;
    if (!items && !prefix) item_rule = use_primitive(c, P_VALUE);
    if (!item_rule && (max < 0 || max > n_prefix)) max = n_prefix;
    if (n_prefix - min > MAX_OPEN_GROUPS) return fail(c, prefix_kw, "has over %d optional elements", MAX_OPEN_GROUPS);
    if (max >= 0 && min > max) return fail(c, "minItems", "asks for more elements than the schema allows");
    cat(c, body, "\"[\" ", use_primitive(c, P_SPACE), " ", NULL);
    int open = 0; /* optional groups still open: element i is optional once i >= minItems */
    long i = 0;
    for (const cJSON *p = prefix ? prefix->child : NULL; p && (max < 0 || i < max); p = p->next, i++) {
        const char *rule = visit_child(c, p, prefix_kw, NULL, i, hint, NULL, depth);
        if (!rule) return false;
        if (i >= min) add(c, body, "( "), open++;
        cat(c, body, i ? "\",\" space " : "", rule, " space ", NULL);
    }
    if (item_rule && (max < 0 || max > i)) {
        if (i == 0) { /* the first element has no comma before it */
            if (!min) add(c, body, "( "), open++;
            cat(c, body, item_rule, " space ", NULL), i++;
        }
        long rest_min = min > i ? min - i : 0, rest_max = max < 0 ? -1 : max - i;
        if (rest_max) cat(c, body, "( \",\" space ", item_rule, " space )", NULL), add_repeat(c, body, rest_min, rest_max), add(c, body, " ");
    }
    for (; open; open--) add(c, body, ")? ");
    return add(c, body, "\"]\"");
}

/* The parts an object schema is made of: itself, or the members of an allOf merged. */
typedef struct object_part { const cJSON *schema; const char *pointer; } object_part;

/* Any JSON string except the given keys' (JSON text, quotes stripped), so that additional properties
 * never repeat a declared one: a trie walk over the keys' characters; at each step either one of the
 * keys' next characters, or any other plain character and then anything. Escapes are taken only after
 * the text has parted from every key (narrower: an escape could spell a declared key's character). */
static bool add_not_keys(converter *c, text_buf *b, const char **keys, size_t n, const char *char_rule) {
    bool ends_a_key = false, any_child = false;
    for (size_t i = 0; i < n; i++) ends_a_key |= !*keys[i], any_child |= *keys[i] != 0;
    if (!any_child) return add(c, b, char_rule) && add(c, b, "+");
    const char **group = malloc(n * sizeof *group);
    if (!group) return fail(c, NULL, "out of memory");
    text_buf others = {0}; /* the plain characters that continue some key, excluded from the "other" branch */
    add(c, b, "( ");
    bool first = true;
    for (size_t i = 0; i < n && !c->failed; i++) {
        if (!*keys[i]) continue;
        /* one unit: an escape (\uXXXX or \c) or one UTF-8 character */
        size_t unit = keys[i][0] == '\\' ? (keys[i][1] == 'u' ? 6 : 2) : 1;
        if (keys[i][0] != '\\') while ((keys[i][unit] & 0xC0) == 0x80) unit++;
        size_t m = 0; /* the keys that go on with this unit, unless an earlier one did (then done already) */
        for (size_t j = 0; j < n && (j >= i || !m); j++)
            if (!strncmp(keys[j], keys[i], unit)) group[m++] = keys[j] + unit;
        if (group[0] != keys[i] + unit) continue;
        add(c, b, first ? "" : " | "), add_literal(c, b, keys[i], unit), add(c, b, " ");
        add_not_keys(c, b, group, m, char_rule);
        first = false;
        if ((unsigned char)keys[i][0] >= 0x80) addn(c, &others, keys[i], unit);
        else if (keys[i][0] != '\\') addf(c, &others, "\\x%02X", (unsigned)keys[i][0]);
    }
    free(group);
    cat(c, b, " | [^\\\"\\\\\\x00-\\x1F", others.p ? others.p : "", "] ", char_rule, "* )", ends_a_key ? "" : "?", NULL);
    text_buf_free(&others);
    return !c->failed;
}

static bool key_is_required(const object_part *parts, size_t n_parts, const char *key) {
    for (size_t p = 0; p < n_parts; p++) {
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(parts[p].schema, "required");
        for (const cJSON *r = cJSON_IsArray(req) ? req->child : NULL; r; r = r->next)
            if (cJSON_IsString(r) && !strcmp(r->valuestring, key)) return true;
    }
    return false;
}

/* Objects: required keys first, then optional ones, then additional ones, each in schema order; each
 * optional key may be left out. additionalProperties absent means none (where properties are declared)
 * or any (where not), as llama.cpp's converter reads it; JSON Schema would allow any extra key. */
static bool object_body(converter *c, object_part *parts, size_t n_parts, const cJSON *additional, bool declared,
                        const char *hint, int depth, text_buf *body) {
    size_t cap = 2, n_required = 0, n_optional = 0, n_keys = 0;
    for (size_t p = 0; p < n_parts; p++)
        cap += (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(parts[p].schema, "properties")) +
               (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(parts[p].schema, "required"));
    if (cap > MAX_KEYS + 2) return fail(c, "properties", "and required name more than %d keys", MAX_KEYS); /* keys are compared pairwise */
    /* the kv rules of required and of optional keys, the rules for what may follow each optional one */
    const char **required = calloc(3 * cap, sizeof(char *)), **optional = required + cap, **rest = optional + cap;
    char **key_texts = calloc(cap, sizeof(char *)); /* each key's JSON text */
    if (!required || !key_texts) fail(c, NULL, "out of memory");
    use_primitive(c, P_SPACE);
    /* pass 0: declared properties; pass 1: required keys that no property declares (any value) */
    for (int pass = 0; pass < 2 && !c->failed; pass++)
        for (size_t p = 0; p < n_parts && !c->failed; p++) {
            text_buf saved = pointer_replace(c, parts[p].pointer);
            const char *kw = pass ? "required" : "properties";
            const cJSON *list = cJSON_GetObjectItemCaseSensitive(parts[p].schema, kw);
            if (list && !(pass ? cJSON_IsArray(list) : cJSON_IsObject(list))) fail(c, kw, "must be an %s", pass ? "array of strings" : "object");
            for (const cJSON *prop = list ? list->child : NULL; prop && !c->failed; prop = prop->next) {
                if (pass && !cJSON_IsString(prop)) { fail(c, kw, "must be an array of strings"); break; }
                const char *key = pass ? prop->valuestring : prop->string;
                cJSON *key_string = cJSON_CreateString(key); /* the key's JSON text, spelt as enum values are */
                char *key_text = key_string ? cJSON_PrintUnformatted(key_string) : NULL;
                cJSON_Delete(key_string);
                bool dup = !key_text;
                for (size_t k = 0; k < n_keys && !dup; k++) dup = !strcmp(key_texts[k], key_text);
                if (!key_text || (dup && !pass)) { fail(c, kw, key_text ? "declares \"%s\" twice (allOf members must not share one)" : "out of memory", key); free(key_text); break; }
                if (dup) { free(key_text); continue; }
                key_texts[n_keys++] = key_text; /* a property with schema false is kept from additional keys too */
                bool is_required = pass || key_is_required(parts, n_parts, key);
                if (!pass && cJSON_IsFalse(prop)) {
                    if (is_required) fail(c, "required", "names \"%s\", whose schema is false", key);
                    continue;
                }
                char sub[HINT_BUF];
                join_hint(sub, hint, key);
                /* a required key no property declares takes additionalProperties' schema */
                bool extra_schema = pass && additional && !cJSON_IsBool(additional);
                if (pass && cJSON_IsFalse(additional)) fail(c, kw, "names \"%s\", which additionalProperties false forbids", key);
                const char *value = !pass ? visit_child(c, prop, kw, key, -1, hint, NULL, depth) : extra_schema
                    ? visit_child(c, additional, "additionalProperties", NULL, -1, hint, key, depth) : use_primitive(c, P_VALUE);
                const char *kv = value ? new_name(c, strcat(sub, "-kv")) : NULL;
                text_buf kv_body = {0};
                if (kv && add_literal(c, &kv_body, key_text, strlen(key_text)) && cat(c, &kv_body, " space \":\" space ", value, " space", NULL))
                    define_rule(c, kv, &kv_body);
                text_buf_free(&kv_body);
                if (kv) *(is_required ? &required[n_required++] : &optional[n_optional++]) = kv;
            }
            pointer_restore(c, saved);
        }
    size_t n_opt = n_optional; /* optional kv rules, and last the one for any number of additional keys */
    if ((additional ? !cJSON_IsFalse(additional) : !declared) && !c->failed) {
        char sub[HINT_BUF];
        const char *value = additional && !cJSON_IsTrue(additional)
            ? visit_child(c, additional, "additionalProperties", NULL, -1, hint, "additional-value", depth)
            : use_primitive(c, P_VALUE);
        text_buf kv_body = {0};
        const char **texts = malloc((n_keys + 1) * sizeof *texts);
        if (!texts) fail(c, NULL, "out of memory");
        for (size_t k = 0; texts && k < n_keys; k++) /* the text between the quotes; one ( ) per byte at most */
            if (strlen(texts[k] = key_texts[k] + 1) > MAX_OPEN_GROUPS) fail(c, "additionalProperties", "cannot exclude a property name over %d bytes", MAX_OPEN_GROUPS);
            else key_texts[k][strlen(key_texts[k]) - 1] = 0;
        if (!n_keys) add(c, &kv_body, use_primitive(c, P_STRING));
        else if (texts && add(c, &kv_body, "\"\\\"\" ") && add_not_keys(c, &kv_body, texts, n_keys, use_primitive(c, P_CHAR)))
            add(c, &kv_body, " \"\\\"\"");
        free(texts);
        cat(c, &kv_body, " space \":\" space ", value ? value : "", " space", NULL);
        if ((optional[n_opt] = new_name(c, join_hint(sub, hint, "additional-kv")))) define_rule(c, optional[n_opt++], &kv_body);
        text_buf_free(&kv_body);
    }
    add(c, body, "\"{\" space ");
    for (size_t i = 0; i < n_required; i++) cat(c, body, i ? " \",\" space " : "", required[i], NULL);
    if (n_opt && !c->failed) {
        char sub[HINT_BUF];
        join_hint(sub, hint, "rest");
        /* rest[i]: what may follow the i-th optional key: any later ones, in order, each after a comma */
        for (size_t i = n_opt; i-- > 1 && !c->failed;) {
            text_buf r = {0};
            /* (a NULL rest[i + 1] ends the list there) */
            cat(c, &r, "( \",\" space ", optional[i], i == n_optional ? " )*" : " )?", rest[i + 1] ? " " : "", rest[i + 1], NULL);
            if ((rest[i] = new_name(c, sub))) define_rule(c, rest[i], &r);
            text_buf_free(&r);
        }
        add(c, body, n_required ? " ( \",\" space ( " : "( ");
        for (size_t i = 0; i < n_opt; i++) {
            cat(c, body, i ? " | " : "", optional[i], NULL);
            if (i == n_optional) cat(c, body, " ( \",\" space ", optional[i], " )*", NULL);
            cat(c, body, rest[i + 1] ? " " : "", rest[i + 1], NULL);
        }
        add(c, body, n_required ? " ) )? " : " )? ");
    } else if (n_required) {
        add(c, body, " ");
    }
    add(c, body, "\"}\"");
    for (size_t k = 0; k < n_keys; k++) free(key_texts[k]);
    free(required), free(key_texts);
    return !c->failed;
}

/* Collects object parts for allOf: each member (after $ref) must be an object schema, whose properties
 * and required lists are merged; nested allOf members are flattened. */
static bool collect_parts(converter *c, const cJSON *schema, object_part *parts, size_t *n, size_t cap, int depth,
                          bool *declared, bool *all_open) {
    static const char *const object_keywords[] = {"type", "properties", "required", "additionalProperties", "allOf", NULL};
    if (depth > MAX_DEPTH) return fail(c, NULL, "schema nested deeper than %d levels", MAX_DEPTH);
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(schema, "$ref");
    if (cJSON_IsString(ref)) {
        if (other_constraint(schema, (const char *const[]){"$ref", NULL})) return fail(c, "$ref", "cannot be combined with other keywords");
        if (!(schema = resolve_ref(c, ref->valuestring))) return false;
        text_buf saved = pointer_replace(c, ref->valuestring + 1);
        collect_parts(c, schema, parts, n, cap, depth + 1, declared, all_open);
        pointer_restore(c, saved);
        return !c->failed;
    }
    const char *other = cJSON_IsObject(schema) ? other_constraint(schema, object_keywords) : "allOf";
    unsigned types;
    if (other || !parse_types(c, schema, &types) || !(types & T_OBJECT))
        return fail(c, other ? other : "type", "cannot be merged: allOf takes object schemas only");
    const cJSON *additional = cJSON_GetObjectItemCaseSensitive(schema, "additionalProperties");
    if (additional && !cJSON_IsTrue(additional))
        return fail(c, "additionalProperties", "must be true or absent to be merged by allOf");
    if (additional || cJSON_GetObjectItemCaseSensitive(schema, "properties") || cJSON_GetObjectItemCaseSensitive(schema, "required"))
        *all_open &= additional != NULL; /* a member that only wraps others leaves openness to them */
    *declared |= cJSON_GetObjectItemCaseSensitive(schema, "properties") != NULL;
    if (*n == cap) return fail(c, "allOf", "has more than %zu members", cap);
    parts[*n].schema = schema;
    if (!(parts[(*n)++].pointer = strdup(c->pointer.p ? c->pointer.p : ""))) return fail(c, NULL, "out of memory");
    const cJSON *members = cJSON_GetObjectItemCaseSensitive(schema, "allOf");
    if (members && (!cJSON_IsArray(members) || !members->child)) return fail(c, "allOf", "must be a non-empty array of schemas");
    int i = 0;
    for (const cJSON *m = members ? members->child : NULL; m && !c->failed; m = m->next, i++) {
        char index[16];
        snprintf(index, sizeof index, "%d", i);
        size_t mark = pointer_push(c, "allOf");
        pointer_push(c, index);
        collect_parts(c, m, parts, n, cap, depth + 1, declared, all_open);
        pointer_pop(c, mark);
    }
    return !c->failed;
}

static bool all_of_body(converter *c, const cJSON *schema, const char *hint, int depth, text_buf *body) {
    const cJSON *members = cJSON_GetObjectItemCaseSensitive(schema, "allOf");
    if (cJSON_GetArraySize(members) == 1 && !other_constraint(schema, (const char *const[]){"allOf", NULL})) {
        const char *name = visit_child(c, members->child, "allOf", NULL, 0, hint, NULL, depth);
        return name && add(c, body, name);
    }
    object_part parts[64];
    size_t n = 0;
    bool declared = false, all_open = true;
    collect_parts(c, schema, parts, &n, sizeof parts / sizeof *parts, depth, &declared, &all_open);
    static const cJSON true_schema = {.type = cJSON_True};
    if (!c->failed) object_body(c, parts, n, all_open ? &true_schema : NULL, declared, hint, depth, body);
    for (size_t i = 0; i < n; i++) free((char *)parts[i].pointer);
    return !c->failed;
}

/* The schema by its type(s): one alternative per type; without "type", the keywords present say which
 * type is meant (an object's, an array's, a string's) and otherwise any JSON value is. */
static bool typed_body(converter *c, const cJSON *schema, const char *hint, int depth, text_buf *body) {
    static const char *const object_kw[] = {"properties", "required", "additionalProperties", NULL},
        *const array_kw[] = {"items", "prefixItems", "minItems", "maxItems", "uniqueItems", NULL},
        *const string_kw[] = {"minLength", "maxLength", "format", "pattern", NULL};
    unsigned types;
    if (!parse_types(c, schema, &types)) return false;
    const char *bound_kw = NULL;
    unsigned inferred = 0;
    for (const cJSON *k = schema->child; k; k = k->next) {
        if (in_list(numeric_bound_keywords, k->string) && !bound_kw) bound_kw = k->string;
        inferred |= in_list(object_kw, k->string) ? T_OBJECT : in_list(array_kw, k->string) ? T_ARRAY : in_list(string_kw, k->string) ? T_STRING : 0;
    }
    if (types == T_ANY) types = inferred & T_OBJECT ? T_OBJECT : inferred & T_ARRAY ? T_ARRAY : inferred ? T_STRING : T_ANY;
    if (types == T_ANY && bound_kw) return fail(c, bound_kw, "needs \"type\": \"integer\" to be enforced");
    if (types == T_ANY) return add(c, body, use_primitive(c, P_VALUE));
    if ((types & T_NUMBER) && bound_kw) return fail(c, bound_kw, "is enforced on integers only, not numbers");
    if (types & T_NUMBER) types &= ~(unsigned)T_INTEGER; /* every integer is a number */
    bool first = true;
    for (unsigned t = 1; t <= T_INTEGER && !c->failed; t <<= 1) {
        if (!(types & t)) continue;
        add(c, body, first ? "" : " | "), first = false;
        if (t == T_NULL || t == T_BOOLEAN || t == T_NUMBER)
            add(c, body, use_primitive(c, t == T_NULL ? P_NULL : t == T_BOOLEAN ? P_BOOLEAN : P_NUMBER));
        else if (t == T_STRING) string_body(c, schema, body);
        else if (t == T_INTEGER) integer_body(c, schema, body);
        else if (t == T_ARRAY) array_body(c, schema, hint, depth, body);
        else {
            const cJSON *additional = cJSON_GetObjectItemCaseSensitive(schema, "additionalProperties");
            if (additional && !cJSON_IsBool(additional) && !cJSON_IsObject(additional))
                return fail(c, "additionalProperties", "must be a boolean or a schema");
            bool declared = cJSON_GetObjectItemCaseSensitive(schema, "properties") != NULL;
            object_part part = {schema, c->pointer.p ? c->pointer.p : ""};
            if (!declared && !cJSON_GetObjectItemCaseSensitive(schema, "required") && (!additional || cJSON_IsTrue(additional)))
                add(c, body, use_primitive(c, P_OBJECT));
            else object_body(c, &part, 1, additional, declared, hint, depth, body);
        }
    }
    return !c->failed;
}

/* Defines a rule (named fixed_name, or a new name from hint) matching `schema`; returns its name. */
static const char *visit(converter *c, const cJSON *schema, const char *hint, const char *fixed_name, int depth) {
    if (c->failed) return NULL;
    if (depth > MAX_DEPTH) return fail(c, NULL, "schema nested deeper than %d levels", MAX_DEPTH), NULL;
    if (cJSON_IsFalse(schema)) return fail(c, NULL, "the schema false accepts nothing"), NULL;
    if (!cJSON_IsTrue(schema) && !cJSON_IsObject(schema)) return fail(c, NULL, "a schema must be an object or a boolean"), NULL;
    for (const cJSON *k = cJSON_IsObject(schema) ? schema->child : NULL; k; k = k->next)
        if (!in_list(annotation_keywords, k->string) && !in_list(handled_keywords, k->string))
            return fail(c, k->string, "this keyword cannot be enforced by the grammar"), NULL;
    const char *name = fixed_name ? fixed_name : new_name(c, hint), *other = NULL;
    text_buf body = {0};
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(schema, "$ref");
    const cJSON *any_of = cJSON_GetObjectItemCaseSensitive(schema, "anyOf"), *one_of = cJSON_GetObjectItemCaseSensitive(schema, "oneOf");
    hint = name; /* children are named after this rule */
    if (!name) {
    } else if (cJSON_IsTrue(schema)) {
        add(c, &body, use_primitive(c, P_VALUE));
    } else if (ref) {
        const char *target = NULL;
        if (!cJSON_IsString(ref)) fail(c, "$ref", "must be a string");
        else if ((other = other_constraint(schema, (const char *const[]){"$ref", NULL}))) fail(c, other, "cannot be combined with $ref");
        else if ((target = visit_ref(c, ref->valuestring, depth))) add(c, &body, target);
    } else if (any_of || one_of) {
        const char *kw = any_of ? "anyOf" : "oneOf";
        if ((other = other_constraint(schema, (const char *const[]){kw, NULL}))) fail(c, other, "cannot be combined with %s", kw);
        else alternatives_body(c, any_of ? any_of : one_of, kw, hint, depth, &body);
    } else if (cJSON_GetObjectItemCaseSensitive(schema, "allOf")) {
        all_of_body(c, schema, hint, depth, &body);
    } else if (cJSON_GetObjectItemCaseSensitive(schema, "enum") || cJSON_GetObjectItemCaseSensitive(schema, "const")) {
        enum_body(c, schema, &body);
    } else {
        typed_body(c, schema, hint, depth, &body);
    }
    if (!c->failed) define_rule(c, name, &body);
    text_buf_free(&body);
    return c->failed ? NULL : name;
}

/* Appends the primitive rules used, hands the grammar to out (freed on failure), frees the converter. */
static bool finish(converter *c, text_buf *out) {
    for (int p = 0; p < P_COUNT; p++)
        if (c->primitives_used & BIT(p)) cat(c, &c->rules, primitives[p].name, " ::= ", primitives[p].body, "\n", NULL);
    bool ok = !c->failed && text_buf_add(out, c->rules.p, c->rules.len);
    if (!ok) text_buf_free(out);
    for (size_t i = 0; i < c->n_names; i++) free(c->names[i]);
    free(c->names), free(c->refs), text_buf_free(&c->rules), text_buf_free(&c->pointer);
    return ok;
}

bool schema_to_gbnf(const cJSON *schema, text_buf *out, char *err, size_t errlen) {
    converter c = {.root = schema, .err = err, .errlen = errlen};
    if (errlen) err[0] = 0;
    for (int p = 0; p < P_COUNT; p++) new_name(&c, primitives[p].name);
    const char *root = new_name(&c, "root");
    if (grow(&c, &c.refs, &c.cap_refs, 0, sizeof *c.refs)) c.refs[c.n_refs++] = (struct ref_rule){schema, root}; /* "#" */
    if (add(&c, &c.pointer, "")) visit(&c, schema, "root", root, 0);
    return finish(&c, out);
}

bool json_object_gbnf(text_buf *out) {
    converter c = {0};
    cat(&c, &c.rules, "root ::= ", use_primitive(&c, P_OBJECT), "\n", NULL);
    return finish(&c, out);
}
