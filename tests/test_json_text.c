/* Text with NUL bytes through the daemon's JSON and text paths (server/api/json_text.c,
 * server/sched/text_stream.c): every string of a parsed body gets its decoded byte length in
 * document order (keys, nesting, escapes, surrogate pairs, \u0000), json_string_n writes any bytes
 * back as a JSON string that parses to the same bytes, and stop strings holding a NUL are found
 * after a NUL in the generated text. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api/json_text.h"
#include "sched/text_stream.h"
#include "test_util.h"

static cJSON *parse_measured(const char *body) {
    cJSON *root = cJSON_ParseWithLength(body, strlen(body));
    CHECK(root != NULL);
    CHECK(json_measure_strings(root, body, strlen(body)));
    return root;
}

static void test_measure(void) {
    /* Keys before values, an escaped quote in a key, nested arrays/objects, all escape kinds. */
    const char *body = "{\"a\\\"b\": \"x\\u0000y\", \"n\": [1, \"\\u00e9\\u0000\\u20ac\", {\"k\": \"\\ud83d\\ude00z\"}],"
                       " \"e\": \"\", \"t\": true, \"s\": \"\\n\\t\\\\\\/\\\"q\", \"z\": \"\\u0000\"}";
    cJSON *root = parse_measured(body);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, "a\"b");
    CHECK(x && json_str_len(x) == 3 && memcmp(x->valuestring, "x\0y", 3) == 0);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(root, "n");
    const cJSON *n1 = cJSON_GetArrayItem(n, 1);
    CHECK(json_str_len(n1) == 6 && memcmp(n1->valuestring, "\xC3\xA9\0\xE2\x82\xAC", 6) == 0);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(n, 2), "k");
    CHECK(json_str_len(k) == 5 && memcmp(k->valuestring, "\xF0\x9F\x98\x80z", 5) == 0);
    CHECK_EQ_INT((int)json_str_len(cJSON_GetObjectItemCaseSensitive(root, "e")), 0);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "s");
    CHECK(json_str_len(s) == 6 && memcmp(s->valuestring, "\n\t\\/\"q", 6) == 0);
    const cJSON *z = cJSON_GetObjectItemCaseSensitive(root, "z");
    CHECK(json_str_len(z) == 1 && z->valuestring[0] == 0);
    cJSON_Delete(root);

    /* A bare string as the whole document, and a body the tree does not come from. */
    root = parse_measured("\"ab\\u0000\\u0000\"");
    CHECK_EQ_INT((int)json_str_len(root), 4);
    CHECK(!json_measure_strings(root, "[]", 2));
    cJSON_Delete(root);

    /* Not measured: strlen, as before. */
    cJSON *plain = cJSON_CreateString("abc");
    CHECK_EQ_INT((int)json_str_len(plain), 3);
    cJSON_Delete(plain);
}

static void test_write(void) {
    /* Every byte value that needs care, a NUL in the middle and at both ends, and UTF-8. */
    const char bytes[] = "\0a\"b\\c\n\r\t\b\f\x01\x1f\x7f\xC3\xA9 end\0";
    const size_t n = sizeof bytes - 1; /* the literal's own terminator excluded; the last \0 kept */
    cJSON *o = cJSON_CreateObject();
    CHECK(json_add_string_n(o, "t", bytes, n));
    CHECK(json_add_string_n(o, "empty", NULL, 0));
    char *text = cJSON_PrintUnformatted(o);
    CHECK(text != NULL && memchr(text, 0, strlen(text) + 1) == text + strlen(text));
    CHECK(strstr(text, "\\u0000a") != NULL); /* the NUL escaped, the text after it kept */
    cJSON *back = parse_measured(text);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(back, "t");
    CHECK(t && json_str_len(t) == n && memcmp(t->valuestring, bytes, n) == 0);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(back, "empty");
    CHECK(cJSON_IsString(e) && json_str_len(e) == 0);
    cJSON_Delete(back);
    cJSON_free(text);
    cJSON_Delete(o);
}

static void test_stop_after_nul(void) {
    char stop0[] = "b\0c", stop1[] = "zz";
    char *const stops[] = {stop0, stop1};
    const size_t lens[] = {3, 2};
    text_stream ts;
    text_stream_init(&ts, stops, lens, 2);
    text_buf out = {0};
    bool oom = false;
    /* The NUL passes as text; "b\0c" is found after a NUL (a C-string search stops at the first
     * NUL of the text, and would take "b" alone for the stop string). */
    CHECK(!text_stream_feed(&ts, "q\0bd b", 6, &out, &oom));
    CHECK(out.len == 5 && memcmp(out.p, "q\0bd ", 5) == 0); /* "b" held: it may begin the stop string */
    /* "b\0x" is not the stop string (a C-string search would stop at "b"); "b\0c" later is. */
    CHECK(text_stream_feed(&ts, "\0x b\0c end", 10, &out, &oom));
    CHECK(out.len == 9 && memcmp(out.p, "q\0bd b\0x ", 9) == 0 && !oom);
    text_stream_free(&ts);
    text_buf_free(&out);
}

/* vLLM's min_tokens and include_stop_str_in_output: unarmed, a whole stop string is text while its
 * possible start is still held back, so a stop string that ends once armed is found whole; the hit
 * names the stop string, and with include_stop it is shown. */
static void test_stop_armed_and_included(void) {
    char stop0[] = "END", stop1[] = "xy";
    char *const stops[] = {stop0, stop1};
    const size_t lens[] = {3, 2};
    text_stream ts;
    text_stream_init(&ts, stops, lens, 2);
    ts.include_stop = true;
    text_buf out = {0};
    bool oom = false;
    ts.armed = false;
    CHECK(!text_stream_feed(&ts, "a xy b E", 8, &out, &oom)); /* "xy" not matched; "E" held */
    CHECK(out.len == 7 && memcmp(out.p, "a xy b ", 7) == 0);
    ts.armed = true;
    CHECK(text_stream_feed(&ts, "ND tail", 7, &out, &oom)); /* "END" straddles the arming */
    CHECK(ts.stop_hit == 0);
    CHECK(out.len == 10 && memcmp(out.p, "a xy b END", 10) == 0 && !oom);
    text_stream_free(&ts);
    text_buf_free(&out);
}

/* text_offset's unit: characters as a client's string has them, whatever bytes a token holds. */
static void test_utf8_chars(void) {
    CHECK(json_utf8_chars("", 0) == 0);
    CHECK(json_utf8_chars("ab\0c", 4) == 4);
    CHECK(json_utf8_chars("caf\xC3\xA9", 5) == 4);           /* "café" */
    CHECK(json_utf8_chars("\xF0\x9F\x98\x80!", 5) == 2);     /* an emoji and "!" */
    CHECK(json_utf8_chars("\xA9\x82", 2) == 0);              /* a character's tail bytes: it started before */
    CHECK(json_utf8_chars("\xE2", 1) == 1);                  /* a character's first byte: it starts here */
}

int main(void) {
    test_utf8_chars();
    test_measure();
    test_write();
    test_stop_after_nul();
    test_stop_armed_and_included();
    TEST_MAIN_END();
}
