/* JSON text: strings with their byte lengths through cJSON (json_text.h says why), and UTF-8 checks. */
#include "api/json_text.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cJSON leaves valueint at 0 for strings and never reads it for them; a measured string keeps
 * its length + 1 there (0 = not measured), and the flag bit below marks it. */
#define MEASURED_FLAG 0x40000000

int json_hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

unsigned json_hex4(const char *p) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) v = v * 16 + (unsigned)json_hex_digit(p[i]);
    return v;
}

/* The string token starting at body[*at] (the opening quote): its decoded length, as cJSON
 * decodes it (a surrogate pair is one 4-byte character). *at moves past the closing quote.
 * SIZE_MAX when the token is malformed (not what cJSON accepted). */
static size_t string_token(const char *body, size_t len, size_t *at) {
    size_t i = *at + 1, n = 0;
    while (i < len && body[i] != '"') {
        if (body[i] != '\\') {
            n++, i++;
            continue;
        }
        if (i + 1 >= len) return SIZE_MAX;
        if (body[i + 1] != 'u') {
            n++, i += 2;
            continue;
        }
        if (i + 6 > len) return SIZE_MAX;
        for (int k = 2; k < 6; k++)
            if (json_hex_digit(body[i + k]) < 0) return SIZE_MAX;
        unsigned cp = json_hex4(body + i + 2);
        i += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate: cJSON requires its low half next */
            if (i + 6 > len || body[i] != '\\' || body[i + 1] != 'u') return SIZE_MAX;
            i += 6;
            n += 4;
        } else {
            n += cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
        }
    }
    if (i >= len) return SIZE_MAX;
    *at = i + 1;
    return n;
}

/* The next string token of the body at or after *at, outside strings (the caller's position is
 * always between tokens). */
static size_t next_string(const char *body, size_t len, size_t *at) {
    while (*at < len && body[*at] != '"') (*at)++;
    return *at < len ? string_token(body, len, at) : SIZE_MAX;
}

static bool measure(cJSON *item, const char *body, size_t len, size_t *at) {
    for (; item; item = item->next) {
        if (item->string && next_string(body, len, at) == SIZE_MAX) return false; /* the member's name */
        if (cJSON_IsString(item)) {
            size_t n = next_string(body, len, at);
            if (n == SIZE_MAX || n >= MEASURED_FLAG) return false;
            item->valueint = (int)(MEASURED_FLAG | n);
        } else if (item->child && !measure(item->child, body, len, at)) {
            return false;
        }
    }
    return true;
}

bool json_measure_strings(cJSON *root, const char *body, size_t len) {
    size_t at = 0;
    if (!root) return false;
    /* The root alone (its siblings, if any, are not part of this document). */
    cJSON *next = root->next;
    root->next = NULL;
    bool ok = measure(root, body, len, &at);
    root->next = next;
    return ok;
}

size_t json_str_len(const cJSON *s) {
    if (!s || !s->valuestring) return 0;
    if (s->valueint & MEASURED_FLAG) return (size_t)(s->valueint & ~MEASURED_FLAG);
    return strlen(s->valuestring);
}

cJSON *json_string_n(const char *p, size_t n) {
    /* Worst case: every byte a 6-character \u00XX escape, plus the quotes and the NUL. */
    if (n > (SIZE_MAX - 3) / 6) return NULL;
    char *out = malloc(n * 6 + 3), *o = out;
    if (!out) return NULL;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        switch (c) {
        case '"': *o++ = '\\', *o++ = '"'; break;
        case '\\': *o++ = '\\', *o++ = '\\'; break;
        case '\b': *o++ = '\\', *o++ = 'b'; break;
        case '\f': *o++ = '\\', *o++ = 'f'; break;
        case '\n': *o++ = '\\', *o++ = 'n'; break;
        case '\r': *o++ = '\\', *o++ = 'r'; break;
        case '\t': *o++ = '\\', *o++ = 't'; break;
        default:
            if (c < 0x20) o += snprintf(o, 7, "\\u%04x", c);
            else *o++ = (char)c;
        }
    }
    *o++ = '"';
    *o = 0;
    /* A raw item is printed verbatim: the escaped text above, quotes included. */
    cJSON *item = cJSON_CreateRaw(out);
    free(out);
    return item;
}

bool json_add_string_n(cJSON *object, const char *key, const char *p, size_t n) {
    cJSON *item = json_string_n(p, n);
    if (!item) return false;
    if (!cJSON_AddItemToObject(object, key, item)) {
        cJSON_Delete(item);
        return false;
    }
    return true;
}

bool json_str_is(const cJSON *v, const char *s) {
    if (!cJSON_IsString(v) || !v->valuestring) return false;
    const size_t n = strlen(s);
    return json_str_len(v) == n && memcmp(v->valuestring, s, n) == 0;
}

/* Length of the valid UTF-8 prefix of s (RFC 3629: no overlong forms, no surrogates, nothing
 * above U+10FFFF); n when all of it is valid. */
size_t json_utf8_valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        size_t len;
        unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
        if (b < 0x80) len = 1;
        else if (b >= 0xC2 && b <= 0xDF) len = 2;
        else if (b >= 0xE0 && b <= 0xEF) len = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
        else if (b >= 0xF0 && b <= 0xF4) len = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
        else return i;
        if (i + len > n) return i;
        for (size_t k = 1; k < len; k++) {
            unsigned c = s[i + k];
            if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return i;
        }
        i += len;
    }
    return n;
}

/* Drops, in place, the bytes of s that are not part of valid UTF-8: a message quoting a request's
 * text with a "%.40s" may cut a character in two, and the error's JSON must stay valid UTF-8. */
void json_utf8_scrub(char *s) {
    size_t n = strlen(s), in = 0, out = 0;
    while (in < n) {
        size_t ok = json_utf8_valid_prefix((const unsigned char *)s + in, n - in);
        memmove(s + out, s + in, ok);
        out += ok, in += ok;
        if (in < n) in++; /* the byte that starts no valid character */
    }
    s[out] = 0;
}

size_t json_utf8_chars(const char *p, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}
