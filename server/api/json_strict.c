/* The JSON grammar of RFC 8259, checked before cJSON parses a body. cJSON is lenient where a
 * request must not be: it takes raw control characters inside strings, numbers with leading zeros
 * ("01") or a bare "-", and lets an object name a key twice (keeping the first value, where most
 * parsers keep the last, so a validating proxy in front and this server would read two different
 * requests). A body is one value, its strings valid escapes, its numbers the grammar's, and no
 * object names a key twice; UTF-8 and raw NUL bytes are checked before (openai_request.c). */
#include "api/json_strict.h"
#include "api/json_text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p;
    size_t len, at;
    const char *why;
} scan;

static bool fail_at(scan *s, const char *why) {
    s->why = why;
    return false;
}

static void skip_ws(scan *s) {
    while (s->at < s->len && (s->p[s->at] == ' ' || s->p[s->at] == '\t' || s->p[s->at] == '\n' || s->p[s->at] == '\r'))
        s->at++;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* A string token at s->at (its opening quote); s->at moves past the closing quote. */
static bool string_token(scan *s) {
    s->at++;
    while (s->at < s->len) {
        unsigned char c = (unsigned char)s->p[s->at];
        if (c == '"') {
            s->at++;
            return true;
        }
        if (c < 0x20) return fail_at(s, "a control character inside a string (write it as an escape)");
        if (c == '\\') {
            if (s->at + 1 >= s->len) break;
            char e = s->p[s->at + 1];
            if (e == 'u') {
                bool hex4 = s->at + 6 <= s->len;
                for (size_t k = 2; hex4 && k < 6; k++) hex4 = json_hex_digit(s->p[s->at + k]) >= 0;
                if (!hex4)
                    return fail_at(s, "a \\u escape without four hex digits");
                /* RFC 8259 8.2: an escaped surrogate names no character unless a high one
                 * (D800-DBFF) is followed at once by an escaped low one (DC00-DFFF). */
                const unsigned cp = json_hex4(s->p + s->at + 2);
                s->at += 6;
                if (cp >= 0xDC00 && cp <= 0xDFFF)
                    return fail_at(s, "a \\u escape of a low surrogate without the high one before it");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    bool low = s->at + 6 <= s->len && s->p[s->at] == '\\' && s->p[s->at + 1] == 'u';
                    for (size_t k = 2; low && k < 6; k++) low = json_hex_digit(s->p[s->at + k]) >= 0;
                    const unsigned lo = low ? json_hex4(s->p + s->at + 2) : 0;
                    if (!low || lo < 0xDC00 || lo > 0xDFFF)
                        return fail_at(s, "a \\u escape of a high surrogate without a low one after it");
                    s->at += 6;
                }
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0) return fail_at(s, "an unknown escape in a string");
            s->at += 2;
            continue;
        }
        s->at++;
    }
    return fail_at(s, "a string without its closing quote");
}

/* number = [ "-" ] int [ frac ] [ exp ]; int = "0" / 1-9 *DIGIT */
static bool number_token(scan *s) {
    size_t i = s->at;
    if (i < s->len && s->p[i] == '-') i++;
    if (i >= s->len || !is_digit(s->p[i])) return fail_at(s, "a number without digits");
    if (s->p[i] == '0') {
        i++;
        if (i < s->len && is_digit(s->p[i])) return fail_at(s, "a number with a leading zero");
    } else {
        while (i < s->len && is_digit(s->p[i])) i++;
    }
    if (i < s->len && s->p[i] == '.') {
        i++;
        if (i >= s->len || !is_digit(s->p[i])) return fail_at(s, "a number without digits after its point");
        while (i < s->len && is_digit(s->p[i])) i++;
    }
    if (i < s->len && (s->p[i] == 'e' || s->p[i] == 'E')) {
        i++;
        if (i < s->len && (s->p[i] == '+' || s->p[i] == '-')) i++;
        if (i >= s->len || !is_digit(s->p[i])) return fail_at(s, "a number without digits in its exponent");
        while (i < s->len && is_digit(s->p[i])) i++;
    }
    s->at = i;
    return true;
}

static bool literal(scan *s, const char *word) {
    size_t n = strlen(word);
    if (s->len - s->at < n || memcmp(s->p + s->at, word, n) != 0) return fail_at(s, "not a JSON value");
    s->at += n;
    return true;
}

/* One value and what it holds, without recursion: a stack of the open containers ('{' or '['). */
static bool value(scan *s, char *stack, int max_depth) {
    int depth = 0;
    for (;;) {
        /* A value. */
        skip_ws(s);
        if (s->at >= s->len) return fail_at(s, "the body ends where a value should be");
        char c = s->p[s->at];
        bool opened = false;
        if (c == '{' || c == '[') {
            if (depth == max_depth) return fail_at(s, "nested too deeply");
            stack[depth++] = c;
            s->at++;
            skip_ws(s);
            char close = c == '{' ? '}' : ']';
            if (s->at < s->len && s->p[s->at] == close) {
                s->at++;
                depth--;
            } else {
                opened = true;
            }
        } else if (c == '"') {
            if (!string_token(s)) return false;
        } else if (c == '-' || is_digit(c)) {
            if (!number_token(s)) return false;
        } else if (!literal(s, c == 't' ? "true" : c == 'f' ? "false" : "null")) {
            return false;
        }
        if (opened && stack[depth - 1] == '{') {
            /* The first member's name. */
            if (s->at >= s->len || s->p[s->at] != '"') return fail_at(s, "an object member without a string name");
            if (!string_token(s)) return false;
            skip_ws(s);
            if (s->at >= s->len || s->p[s->at] != ':') return fail_at(s, "a name without ':' after it");
            s->at++;
            continue;
        }
        if (opened) continue;
        /* After a value: a separator, or the end of containers. */
        for (;;) {
            if (depth == 0) return true;
            skip_ws(s);
            if (s->at >= s->len) return fail_at(s, "the body ends inside an object or array");
            char open = stack[depth - 1], d = s->p[s->at];
            if (d == ',') {
                s->at++;
                if (open == '{') {
                    skip_ws(s);
                    if (s->at >= s->len || s->p[s->at] != '"') return fail_at(s, "an object member without a string name");
                    if (!string_token(s)) return false;
                    skip_ws(s);
                    if (s->at >= s->len || s->p[s->at] != ':') return fail_at(s, "a name without ':' after it");
                    s->at++;
                }
                break; /* the next value */
            }
            if (d == (open == '{' ? '}' : ']')) {
                s->at++;
                depth--;
                continue;
            }
            return fail_at(s, open == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
}

bool json_strict_check(const char *body, size_t len, int max_depth, size_t *bad_at, const char **why) {
    char *stack = malloc(max_depth > 0 ? (size_t)max_depth : 1);
    if (!stack) {
        *bad_at = 0;
        *why = "out of memory";
        return false;
    }
    scan s = {.p = body, .len = len};
    bool ok = value(&s, stack, max_depth);
    free(stack);
    if (ok) {
        skip_ws(&s);
        if (s.at < len) ok = fail_at(&s, "more after the JSON value");
    }
    if (!ok) {
        *bad_at = s.at;
        *why = s.why;
    }
    return ok;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* Sorting each object's names: a million keys take n log n, not n^2. */
const char *json_duplicate_key(const cJSON *item) {
    for (; item; item = item->next) {
        if (cJSON_IsObject(item) && item->child && item->child->next) {
            size_t n = 0;
            for (const cJSON *c = item->child; c; c = c->next) n++;
            const cJSON **names = malloc(n * sizeof *names);
            if (!names) return NULL; /* (out of memory: the parse goes on; a later allocation fails too) */
            n = 0;
            for (const cJSON *c = item->child; c; c = c->next) names[n++] = c;
            qsort(names, n, sizeof *names, by_name);
            const char *dup = NULL;
            for (size_t i = 1; i < n && !dup; i++)
                if (strcmp(names[i - 1]->string, names[i]->string) == 0) dup = names[i]->string;
            free(names);
            if (dup) return dup;
        }
        if (item->child) {
            const char *dup = json_duplicate_key(item->child);
            if (dup) return dup;
        }
    }
    return NULL;
}
