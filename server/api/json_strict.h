/* RFC 8259's grammar for request bodies, which cJSON alone does not hold a body to (json_strict.c
 * says where it is lenient), and objects that name a key twice. */
#ifndef WUSHKV_JSON_STRICT_H
#define WUSHKV_JSON_STRICT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* Whether body[0..len) is exactly one JSON value (whitespace around it allowed) nested at most
 * max_depth objects and arrays deep. When not: *bad_at is the byte where it stops being one and
 * *why says what is wrong there (a static string). */
bool json_strict_check(const char *body, size_t len, int max_depth, size_t *bad_at, const char **why);
/* The first key some object in the tree of item (and its siblings) names twice, or NULL. Keys
 * compare as cJSON keeps them, up to a \u0000 in them. */
const char *json_duplicate_key(const cJSON *item);

#endif
