/* JSON strings as byte strings with a length, in both directions. cJSON hands strings out NUL-
 * terminated and takes them in the same way, so a "\u0000" inside a request's text would cut
 * everything after it, and a generated 0x00 byte would cut the answer. Reading: the decoded length
 * of every string in a parsed body is recovered from the body itself (json_measure_strings) and
 * read back with json_str_len. Writing: json_string_n makes a string item from any bytes, escaping
 * a 0x00 as \u0000. */
#ifndef WUSHKV_JSON_TEXT_H
#define WUSHKV_JSON_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* Records, in every string value of root (the tree cJSON parsed from body[0..len)), its decoded
 * byte length. body must be the exact text root came from (the strings are found in document
 * order). false when the body and the tree disagree (it cannot happen for a tree parsed from
 * body; the caller treats it as an internal error). */
bool json_measure_strings(cJSON *root, const char *body, size_t len);
/* A string value's byte length: measured by json_measure_strings, else strlen. */
size_t json_str_len(const cJSON *s);
/* A hex digit's value, or -1 for any other character. */
int json_hex_digit(char c);
/* The value of the four hex digits at p (json_hex_digit of each is >= 0). */
unsigned json_hex4(const char *p);
/* Length of the valid UTF-8 prefix of the n bytes at s (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF); n when all of it is valid. */
size_t json_utf8_valid_prefix(const unsigned char *s, size_t n);
/* Drops, in place, the bytes of the NUL-terminated s that are not part of valid UTF-8 (a message
 * quoting a request's text cut at a byte count may cut a character in two; JSON text is UTF-8). */
void json_utf8_scrub(char *s);
/* Characters (code points) the n bytes at p start: every byte but UTF-8's continuation bytes
 * (where a client's text_offset points, as Python indexes a string). */
size_t json_utf8_chars(const char *p, size_t n);
/* Whether v is a string of exactly the bytes of s (a "\u0000" inside it makes it another). */
bool json_str_is(const cJSON *v, const char *s);
/* A JSON string item holding exactly the n bytes at p (NULL p with n 0: ""); NULL when out of
 * memory. The bytes should be UTF-8 (text_stream.c makes generated text so). */
cJSON *json_string_n(const char *p, size_t n);
/* json_string_n added to object under key; false when out of memory. */
bool json_add_string_n(cJSON *object, const char *key, const char *p, size_t n);

#endif
