/* Grammar engine tests (engine/grammar/): GBNF compile errors, whole-text acceptance against
 * independent oracles (Python's json module for a JSON grammar; hand-checked small languages),
 * and the token mask: on random walks through a grammar over a vocabulary with multi-byte
 * characters, cut UTF-8 sequences, empty and end-of-generation tokens, the mask (one walk over all
 * tokens) must equal the one-token check, and for a finite language both must equal "text + token
 * is a prefix of some sentence", computed by brute force over the sentences. No device needed. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"
#include "test_rng.h"
#include "test_util.h"

static wk_grammar *compile(const char *text) {
    wk_grammar *g = NULL;
    char err[WK_ERRMSG_LEN];
    wk_status st = wk_grammar_parse(text, strlen(text), &g, err, sizeof err);
    if (st != WK_OK) fprintf(stderr, "unexpected grammar error: %s\n", err);
    CHECK_EQ_INT(st, WK_OK);
    return g;
}

/* ---- compile errors ------------------------------------------------------------------------- */

static void test_errors(void) {
    static const struct {
        const char *grammar, *message;
    } bad[] = {
        {"root ::= foo", "'foo' is used but never defined"},
        {"start ::= \"a\"", "no rule named 'root'"},
        {"root ::= root \"a\" | \"b\"", "left-recursive"},
        {"root ::= a\na ::= b? a \"x\"\nb ::= \"y\"", "left-recursive"},
        {"root ::= (\"x\"*)* \"y\"", "left-recursive"}, /* a repeated empty-able group loops */
        {"root ::= \"abc", "unterminated literal"},
        {"root ::= [a-", "unterminated character class"},
        {"root ::= [z-a]", "end below its start"},
        {"root ::= \"\\q\"", "unknown escape"},
        {"root ::= \"\\x4\"", "hex digits"},
        {"root ::= * \"a\"", "without a symbol"},
        {"root ::= \"a\"{3,2}", "maximum below its minimum"},
        {"root ::= \"a\"{20000}", "above 10000"},
        {"root ::= (\"a\"", "expected ')'"},
        {"root ::= \"a\")", "')' without a matching '('"},
        {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
        {"root ::= \"a\"\n::= \"b\"", "expected a rule name"},
        {"root = \"a\"", "expected '::='"},
        {"root ::= \"\xC3\"", "invalid UTF-8"},
        {"root ::= \"abcdefghijklmnopqrstu\"{10000}", "more than"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        wk_grammar *g = (wk_grammar *)1;
        char err[WK_ERRMSG_LEN] = "";
        wk_status st = wk_grammar_parse(bad[i].grammar, strlen(bad[i].grammar), &g, err, sizeof err);
        CHECK_EQ_INT(st, WK_ERR_INVALID);
        CHECK(g == NULL);
        if (!strstr(err, bad[i].message)) fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, err, bad[i].message);
        CHECK(strstr(err, bad[i].message) != NULL);
        CHECK(strncmp(err, "grammar line ", 13) == 0);
    }
    /* A NUL byte inside the text (not a C string's end). */
    wk_grammar *g = NULL;
    char err[WK_ERRMSG_LEN];
    CHECK_EQ_INT(wk_grammar_parse("root ::= \"a\0\"", 13, &g, err, sizeof err), WK_ERR_INVALID);
    CHECK(strstr(err, "NUL byte") != NULL);
    /* The position names the line and the column. */
    const char *at11 = "root ::= a\n\na ::= \"x\" @";
    wk_grammar_parse(at11, strlen(at11), &g, err, sizeof err);
    CHECK(strstr(err, "line 3 column 11") != NULL);
}

/* ---- whole texts ---------------------------------------------------------------------------- */

static const char json_gbnf[] =
    "# JSON (RFC 8259) as GBNF, with any amount of white space\n"
    "root   ::= ws value ws\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( member ( ws \",\" ws member )* ws )? \"}\"\n"
    "member ::= string ws \":\" ws value\n"
    "array  ::= \"[\" ws ( value ( ws \",\" ws value )* ws )? \"]\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws     ::= [ \\t\\n\\r]*\n";

static void test_json_acceptance(void) {
    /* Labels from Python 3's json.loads (strict: no raw control characters in strings). */
    static const struct {
        const char *text;
        bool valid;
    } cases[] = {
        {"{}", true}, {"[]", true}, {"{\"a\":1}", true}, {"{\"a\": [1, 2.5e-3, -0, true, false, null]}", true},
        {"{\"a\":01}", false}, {"[1,]", false}, {"{\"a\" 1}", false}, {"\"x\\u00e9\\n\"", true}, {"\"\\x\"", false},
        {"-", false}, {"-0.5E+10", true}, {"1.", false}, {".5", false}, {"[[[[]]]]", true},
        {"{\"k\":{\"k\":{\"k\":\"v\"}}}", true}, {" [ 1 , 2 ] ", true}, {"\"tab\there\"", false},
        {"\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"", true}, {"[1 2]", false}, {"{\"a\":1,\"b\":2,}", false},
        {"nul", false}, {"true", true}, {"\"unterminated", false}, {"123abc", false},
        {"\"\\ud83d\\ude00\"", true}, {"0", true}, {"00", false},
    };
    wk_grammar *g = compile(json_gbnf);
    if (!g) return;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bool got = wk_grammar_accepts(g, cases[i].text, strlen(cases[i].text));
        if (got != cases[i].valid) fprintf(stderr, "json case %zu (%s): got %d\n", i, cases[i].text, got);
        CHECK(got == cases[i].valid);
    }
    /* Invalid UTF-8 is never a sentence, even inside a string that takes any character. */
    CHECK(!wk_grammar_accepts(g, "\"\xC3\"", 3));
    CHECK(!wk_grammar_accepts(g, "\"\xED\xA0\x80\"", 5)); /* a surrogate */
    CHECK(!wk_grammar_accepts(g, "\"\xE0\x80\xAF\"", 5)); /* an overlong '/' */
    wk_grammar_free(g);
}

static void test_operators(void) {
    static const struct {
        const char *grammar, *text;
        bool valid;
    } cases[] = {
        {"root ::= \"ab\"{2,3}", "abab", true}, {"root ::= \"ab\"{2,3}", "ababab", true},
        {"root ::= \"ab\"{2,3}", "ab", false}, {"root ::= \"ab\"{2,3}", "abababab", false},
        {"root ::= \"a\"{2,}", "aaaaaaa", true}, {"root ::= \"a\"{2,}", "a", false},
        {"root ::= \"a\"{,2}", "", true}, {"root ::= \"a\"{,2}", "aaa", false}, {"root ::= \"a\"{3}", "aaa", true},
        {"root ::= [^a-c]+", "xyz", true}, {"root ::= [^a-c]+", "xbz", false},
        {"root ::= . \"!\"", "\xE2\x82\xAC!", true}, {"root ::= . \"!\"", "\n!", true},
        {"root ::= \"\\u20AC\" \"\\U0001F600\"", "\xE2\x82\xAC\xF0\x9F\x98\x80", true},
        {"root ::= (\"x\" | \"y\")+ \"z\"?", "xyxyz", true}, {"root ::= (\"x\" | \"y\")+ \"z\"?", "z", false},
        {"root ::= a b\na ::= \"p\" | \"\"\nb ::= \"q\"  # empty alternative", "q", true},
        {"root ::= (\n  \"a\"\n  | \"b\"\n)", "b", true}, {"root ::= \"a\" |\n  \"b\"", "b", true},
        {"root ::= [\\]\\-\\^]*", "]-^", true}, {"root ::= \"\\x00\"", "", false},
        {"root ::= list\nlist ::= \"(\" (list | \"x\")* \")\"", "((x)x(()))", true},
        {"root ::= list\nlist ::= \"(\" (list | \"x\")* \")\"", "((x)", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        wk_grammar *g = compile(cases[i].grammar);
        if (!g) continue;
        bool got = wk_grammar_accepts(g, cases[i].text, strlen(cases[i].text));
        if (got != cases[i].valid) fprintf(stderr, "operator case %zu: got %d\n", i, got);
        CHECK(got == cases[i].valid);
        wk_grammar_free(g);
    }
    /* Surrogates are no characters, even in a class that names them or a negated one. */
    wk_grammar *gs = compile("root ::= [\\uD000-\\uDFFF] | [^a]");
    if (gs) {
        CHECK(wk_grammar_accepts(gs, "\xED\x9F\xBF", 3));  /* U+D7FF */
        CHECK(!wk_grammar_accepts(gs, "\xED\xA0\x80", 3)); /* U+D800 */
        wk_grammar_free(gs);
    }
    /* U+0000 is a character like any other. */
    wk_grammar *g = compile("root ::= \"a\\x00b\"");
    if (g) {
        CHECK(wk_grammar_accepts(g, "a\0b", 3));
        wk_grammar_free(g);
    }
}

/* ---- token masks ---------------------------------------------------------------------------- */

/* A vocabulary built to hit the hard cases: single characters, multi-character pieces, two- to
 * four-byte characters whole and cut between tokens, a token that is only continuation bytes, an
 * invalid byte, an empty (control) token and an end-of-generation token. */
static const char *const pieces[] = {
    "{", "}", "[", "]", ",", ":", " ", "\n", "\"", "\\", "a", "b", "c", "s", "t", "r", "d", "o", "g", "x", "u", "e",
    "1", "0", "-", ".", "true", "null", "{\"", "\":", "\",", "ca", "car", "cat", "do", "og", "\xC3\xB6", "\xC3", "\xB6",
    "\xE2\x82\xAC", "\xE2", "\x82", "\xAC", "\xE2\x82", "\xACx", "\xF0\x9F\x98\x80", "\xF0\x9F", "\x98\x80", "\xFF",
    "",   /* a control token */
    "<eos>",
    "xx", "d\xC3", "\xB6g",
    "\xE0", "\xF0", "\xED", "\x9F\xBF", /* lone leads whose whole range starts above ASCII (overlong forms) */
};
enum { N_PIECES = sizeof pieces / sizeof *pieces, EOG_TOKEN = 50 };

static wk_grammar_vocab *test_vocab(void) {
    size_t lens[N_PIECES];
    bool eog[N_PIECES] = {0};
    for (int i = 0; i < N_PIECES; i++) lens[i] = strlen(pieces[i]);
    eog[EOG_TOKEN] = true;
    return grammar_vocab_from_pieces(pieces, lens, eog, N_PIECES);
}

/* Every token's mask verdict equals the one-token check; returns the allowed count. */
static int check_mask_matches_allows(wk_matcher *m, bool *allowed) {
    float logits[N_PIECES];
    for (int t = 0; t < N_PIECES; t++) logits[t] = 0.0f;
    int n = wk_matcher_mask(m, logits);
    CHECK(n >= 0);
    int count = 0;
    for (int t = 0; t < N_PIECES; t++) {
        allowed[t] = logits[t] == 0.0f;
        count += allowed[t];
        bool one = wk_matcher_allows(m, t);
        if (one != allowed[t]) fprintf(stderr, "token %d ('%s'): mask %d, one-token check %d\n", t, pieces[t], allowed[t], one);
        CHECK(one == allowed[t]);
    }
    CHECK_EQ_INT(n, count);
    return count;
}

static void test_mask_json_walks(void) {
    wk_grammar *g = compile(json_gbnf);
    wk_grammar_vocab *v = test_vocab();
    CHECK(v != NULL);
    if (!g || !v) goto out;
    rng_seed(7);
    for (int walk = 0; walk < 60; walk++) {
        wk_matcher *m = wk_matcher_create(g, v);
        CHECK(m != NULL);
        if (!m) break;
        char text[512];
        size_t len = 0;
        for (int step = 0; step < 40; step++) {
            bool allowed[N_PIECES];
            int n = check_mask_matches_allows(m, allowed);
            CHECK(n > 0);
            CHECK(!allowed[49]); /* the control token, never */
            CHECK(!allowed[48]); /* 0xFF: never UTF-8 */
            CHECK(allowed[EOG_TOKEN] == wk_matcher_complete(m));
            if (n == 0) break;
            int pick = (int)(rng_u64() % (uint64_t)n), t = 0;
            for (; t < N_PIECES; t++)
                if (allowed[t] && pick-- == 0) break;
            if (t == EOG_TOKEN) break;
            size_t l = strlen(pieces[t]);
            if (len + l >= sizeof text) break;
            memcpy(text + len, pieces[t], l);
            len += l;
            CHECK_EQ_INT(wk_matcher_accept(m, t), WK_OK);
        }
        /* what was accepted is a prefix of JSON: complete exactly when the text parses */
        CHECK(wk_matcher_complete(m) == wk_grammar_accepts(g, text, len));
        /* a token the mask refuses is refused by accept too, and changes nothing */
        if (!wk_matcher_allows(m, 48)) CHECK_EQ_INT(wk_matcher_accept(m, 48), WK_ERR_INVALID);
        wk_matcher_destroy(m);
    }
out:
    wk_grammar_vocab_destroy(v);
    wk_grammar_free(g);
}

/* For a finite language, a token is allowed exactly when text + token is a byte prefix of some
 * sentence, and the end token exactly when text is a sentence. */
static void test_mask_finite_language(void) {
    static const char *const sentences[] = {"cat", "car", "cars", "dog", "d\xC3\xB6g", "\xE2\x82\xAC" "xx", "\xE2\x82\xAC" "xxx",
                                            "\xF0\x9F\x98\x80"};
    const size_t n_sent = sizeof sentences / sizeof *sentences;
    wk_grammar *g = compile("root ::= \"ca\" [tr] | \"cars\" | \"d\" [o\\u00F6] \"g\" | \"\\u20AC\" \"x\"{2,3} | [\\U0001F600]");
    wk_grammar_vocab *v = test_vocab();
    if (!g || !v) goto out;
    rng_seed(11);
    for (int walk = 0; walk < 200; walk++) {
        wk_matcher *m = wk_matcher_create(g, v);
        if (!m) break;
        char text[64];
        size_t len = 0;
        for (int step = 0; step < 8; step++) {
            bool allowed[N_PIECES];
            int n = check_mask_matches_allows(m, allowed);
            bool is_sentence = false;
            for (size_t s = 0; s < n_sent; s++) is_sentence |= strlen(sentences[s]) == len && memcmp(sentences[s], text, len) == 0;
            CHECK(allowed[EOG_TOKEN] == is_sentence);
            for (int t = 0; t < N_PIECES; t++) {
                if (t == EOG_TOKEN) continue;
                size_t l = strlen(pieces[t]);
                bool prefix = false;
                for (size_t s = 0; s < n_sent && l; s++)
                    prefix |= strlen(sentences[s]) >= len + l && memcmp(sentences[s], text, len) == 0 &&
                              memcmp(sentences[s] + len, pieces[t], l) == 0;
                if (prefix != allowed[t]) fprintf(stderr, "text '%.*s' + token %d: mask %d, brute force %d\n", (int)len, text, t, allowed[t], prefix);
                CHECK(prefix == allowed[t]);
            }
            if (n == 0) break;
            int pick = (int)(rng_u64() % (uint64_t)n), t = 0;
            for (; t < N_PIECES; t++)
                if (allowed[t] && pick-- == 0) break;
            if (t == EOG_TOKEN) break;
            CHECK_EQ_INT(wk_matcher_accept(m, t), WK_OK);
            memcpy(text + len, pieces[t], strlen(pieces[t]));
            len += strlen(pieces[t]);
        }
        wk_matcher_destroy(m);
    }
    /* finished: once "cars" is written nothing may follow but the end */
    wk_matcher *m = wk_matcher_create(g, v);
    if (m) {
        CHECK_EQ_INT(wk_matcher_accept(m, 32), WK_OK); /* "car" */
        CHECK(wk_matcher_complete(m) && !wk_matcher_finished(m));
        CHECK_EQ_INT(wk_matcher_accept(m, 13), WK_OK); /* "s" */
        CHECK(wk_matcher_finished(m));
        CHECK_EQ_INT(wk_matcher_accept(m, EOG_TOKEN), WK_OK);
        wk_matcher_destroy(m);
    }
out:
    wk_grammar_vocab_destroy(v);
    wk_grammar_free(g);
}

/* A grammar whose live stacks double with each character (one per string of pending "b"s and
 * "c"s, each with 3 tops) is stopped at WK_GRAMMAR_MAX_STACKS (3 x 2^11 > 4096 at the 11th "a")
 * with an error, not run out of memory. */
static void test_stack_limit(void) {
    wk_grammar *g = compile("root ::= s\ns ::= \"a\" s \"b\" | \"a\" s \"c\" | \"\"");
    wk_grammar_vocab *v = test_vocab();
    if (!g || !v) goto out;
    CHECK(wk_grammar_accepts(g, "aaacbb", 6));
    CHECK(!wk_grammar_accepts(g, "aaacb", 5));
    CHECK(!wk_grammar_accepts(g, "aaaaaaaaaaaabbbbbbbbbbbb", 24)); /* a sentence, but past the limit */
    wk_matcher *m = wk_matcher_create(g, v);
    wk_status st = WK_OK;
    int steps = 0;
    for (; m && steps < 20 && st == WK_OK; steps++) st = wk_matcher_accept(m, 10);
    CHECK_EQ_INT(st, WK_ERR_UNSUPPORTED);
    CHECK_EQ_INT(steps, 11);
    wk_matcher_destroy(m);
out:
    wk_grammar_vocab_destroy(v);
    wk_grammar_free(g);
}

/* Grammars the size a schema converter writes: 30000 chained rules compile and run, and left
 * recursion is found through a chain of 3000 optional (nullable) references. */
static void test_large_grammars(void) {
    enum { N = 30000 };
    char *text = malloc((size_t)N * 40 + 64), *at = text;
    if (!text) return;
    at += sprintf(at, "root ::= r0\n");
    for (int i = 0; i < N; i++) at += sprintf(at, "r%d ::= \"a\" r%d | \"b\"\n", i, i + 1);
    at += sprintf(at, "r%d ::= \"c\"\n", N);
    wk_grammar *g = compile(text);
    if (g) {
        CHECK(wk_grammar_accepts(g, "aaab", 4));
        CHECK(!wk_grammar_accepts(g, "aaa", 3));
        wk_grammar_free(g);
    }
    at = text;
    at += sprintf(at, "root ::= r0\n");
    for (int i = 0; i < 3000; i++) at += sprintf(at, "r%d ::= r%d? \"x\"\n", i, i + 1);
    at += sprintf(at, "r3000 ::= r0 | \"\"\n");
    char err[WK_ERRMSG_LEN] = "";
    g = NULL;
    CHECK_EQ_INT(wk_grammar_parse(text, strlen(text), &g, err, sizeof err), WK_ERR_INVALID);
    CHECK(strstr(err, "left-recursive") != NULL);
    free(text);
}

/* The cost limits (wushkv/grammar.h), each met by a grammar built to pass it:
 * - a start whose stacks together pass WK_GRAMMAR_MAX_STACK_POSITIONS (3000 chained choices, the
 *   i-th stack i deep: 4.5M positions) is refused when compiled, where the client gets a 400;
 * - nesting that grows two stacks by 100 positions a "(" ends with WK_ERR_UNSUPPORTED when the
 *   328th "(" would pass 65536 in all, not before;
 * - a mask that would partition 65536 tokens for each of 4000 different second characters (262M
 *   checks, past WK_GRAMMAR_MAX_STEP_WORK) stops with WK_ERR_UNSUPPORTED, logits untouched, and
 *   accepting a token still works (its own allotment). */
static void test_cost_limits(void) {
    enum { CHAIN = 3000, WIDE = 4000, NV = 65536 };
    char *text = malloc((size_t)WIDE * 64 + 4096), *at = text;
    static char piece_text[NV][5];
    static const char *piece_ptr[NV];
    static size_t piece_len[NV];
    float *logits = malloc((size_t)NV * sizeof *logits);
    if (!text || !logits) goto out;
    at += sprintf(at, "root ::= r0\n");
    for (int i = 0; i < CHAIN; i++) at += sprintf(at, "r%d ::= \"x\" | r%d \"z\"\n", i, i + 1);
    at += sprintf(at, "r%d ::= \"y\"\n", CHAIN);
    wk_grammar *g = NULL;
    char err[WK_ERRMSG_LEN] = "";
    CHECK_EQ_INT(wk_grammar_parse(text, strlen(text), &g, err, sizeof err), WK_ERR_INVALID);
    CHECK(strstr(err, "too ambiguous where it starts") != NULL);
    CHECK(g == NULL);

    at = text;
    at += sprintf(at, "root ::= \"(\" n1 | \"x\"\n");
    for (int i = 1; i < 100; i++) at += sprintf(at, "n%d ::= n%d \")\"\n", i, i + 1);
    at += sprintf(at, "n100 ::= root \")\"\n");
    g = compile(text);
    const char *const nest_pieces[] = {"(", "x", ")"};
    const size_t nest_lens[] = {1, 1, 1};
    wk_grammar_vocab *v = grammar_vocab_from_pieces(nest_pieces, nest_lens, NULL, 3);
    wk_matcher *m = g && v ? wk_matcher_create(g, v) : NULL;
    CHECK(m != NULL);
    wk_status st = WK_OK;
    int opened = 0;
    while (m && st == WK_OK && opened < 1000)
        if ((st = wk_matcher_accept(m, 0)) == WK_OK) opened++;
    CHECK_EQ_INT(st, WK_ERR_UNSUPPORTED);
    /* two stacks (the tops "(" and "x"), each 100 positions a "(" and its top: 327 fit */
    CHECK_EQ_INT(opened, (int)(WK_GRAMMAR_MAX_STACK_POSITIONS - 2) / 200);
    wk_matcher_destroy(m);
    wk_grammar_vocab_destroy(v);
    wk_grammar_free(g);

    /* 4000 alternatives, each its own rule: a letter, then a character of its own */
    at = text;
    at += sprintf(at, "root ::= w0");
    for (int i = 1; i < WIDE; i++) at += sprintf(at, " | w%d", i);
    at += sprintf(at, "\n");
    for (int i = 0; i < WIDE; i++) at += sprintf(at, "w%d ::= [a-z] [\\u%04X]\n", i, 0x100 + i);
    g = compile(text);
    /* 65536 tokens "a" + one character from U+0100 on (two bytes of UTF-8 up to U+07FF, then three) */
    for (int t = 0; t < NV; t++) {
        char *p = piece_text[t];
        uint32_t cp = 0x100u + (uint32_t)t;
        *p++ = 'a';
        if (cp < 0x800) *p++ = (char)(0xC0 | cp >> 6);
        else *p++ = (char)(0xE0 | cp >> 12), *p++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *p++ = (char)(0x80 | (cp & 0x3F));
        piece_ptr[t] = piece_text[t];
        piece_len[t] = (size_t)(p - piece_text[t]);
    }
    v = grammar_vocab_from_pieces(piece_ptr, piece_len, NULL, NV);
    m = g && v ? wk_matcher_create(g, v) : NULL;
    CHECK(m != NULL);
    if (m) {
        CHECK(wk_matcher_allows(m, 5));
        CHECK(!wk_matcher_allows(m, WIDE));
        for (int t = 0; t < NV; t++) logits[t] = 1.0f;
        CHECK_EQ_INT(wk_matcher_mask(m, logits), WK_ERR_UNSUPPORTED);
        int touched = 0;
        for (int t = 0; t < NV; t++) touched += logits[t] != 1.0f;
        CHECK_EQ_INT(touched, 0);
        CHECK_EQ_INT(wk_matcher_accept(m, 5), WK_OK); /* "a" U+0105: w5 */
        CHECK(wk_matcher_finished(m));
    }
    wk_matcher_destroy(m);
    wk_grammar_free(g);
    wk_grammar_vocab_destroy(v);

    /* The same 4000 stacks behind one class at the first character ([a-z] then a digit string):
     * grouped, the mask is cheap (within the budget) and equals brute force on every token and the
     * one-token check on a sample. */
    at = text;
    at += sprintf(at, "root ::= w0");
    for (int i = 1; i < WIDE; i++) at += sprintf(at, " | w%d", i);
    at += sprintf(at, "\n");
    for (int i = 0; i < WIDE; i++) at += sprintf(at, "w%d ::= [a-z] \"%d\"\n", i, i);
    g = compile(text);
    for (int t = 0; t < NV; t++) { /* letters then up to three digits: "a", "b7", "c12", "d409" */
        int len = t < 26 ? 0 : t < 26 + 260 ? 1 : t < 26 + 260 + 2600 ? 2 : 3;
        int rest = t < 26 ? 0 : t - 26 - (len > 1 ? 260 : 0) - (len > 2 ? 2600 : 0);
        piece_len[t] = (size_t)snprintf(piece_text[t], sizeof piece_text[t], "%c%.*d", 'a' + t % 26, len, rest % (len == 1 ? 10 : len == 2 ? 100 : 1000));
        if (len == 0) piece_len[t] = 1;
        piece_ptr[t] = piece_text[t];
    }
    v = grammar_vocab_from_pieces(piece_ptr, piece_len, NULL, NV);
    m = g && v ? wk_matcher_create(g, v) : NULL;
    CHECK(m != NULL);
    if (m) {
        for (int t = 0; t < NV; t++) logits[t] = 0.0f;
        int n = wk_matcher_mask(m, logits), same = 0, count = 0, checked = 0;
        CHECK(n > 26);
        /* by brute force: the digits are a prefix of some number 0..3999, each prefix marked by
         * its length and value (a real prefix of two or more digits has no leading zero) */
        static bool is_prefix[5][10000];
        for (int i = 0; i < WIDE; i++) {
            char num[8];
            int len = snprintf(num, sizeof num, "%d", i);
            for (int l = 0; l <= len; l++) {
                char head[8] = {0};
                memcpy(head, num, (size_t)l);
                is_prefix[l][atoi(head)] = true; /* atoi("") is 0 */
            }
        }
        int expected = 0;
        for (int t = 0; t < NV; t++) {
            count += logits[t] == 0.0f;
            int digits = (int)piece_len[t] - 1;
            bool prefix = is_prefix[digits][digits ? atoi(piece_text[t] + 1) : 0];
            expected += prefix;
            if (prefix != (logits[t] == 0.0f)) CHECK(prefix == (logits[t] == 0.0f));
        }
        CHECK_EQ_INT(count, n);
        CHECK_EQ_INT(count, expected);
        /* a sample (one-token checks share the step's work: some thousands fit), which includes
         * the letters and tokens of every length */
        for (int t = 0; t < NV; t += 67, checked++) {
            bool one = wk_matcher_allows(m, t);
            if ((logits[t] == 0.0f) != one) fprintf(stderr, "token %d '%s': mask %d, one-token check %d\n", t, piece_text[t], logits[t] == 0.0f, one);
            same += (logits[t] == 0.0f) == one;
        }
        CHECK_EQ_INT(same, checked);
    }
    wk_matcher_destroy(m);
    wk_grammar_free(g);
    wk_grammar_vocab_destroy(v);
out:
    free(text), free(logits);
}

/* A compiled grammar is shared: every reference but the last leaves it usable (a request's choices
 * each hold one; ASan would see a use after the first free). */
static void test_shared_grammar(void) {
    wk_grammar *g = compile("root ::= \"ab\" | \"ac\"");
    wk_grammar_vocab *v = test_vocab();
    if (!g || !v) goto out;
    CHECK(wk_grammar_retain(g) == g);
    wk_grammar_retain(g);
    wk_grammar_free(g);
    wk_grammar_free(g);
    CHECK(wk_grammar_accepts(g, "ac", 2));
    wk_matcher *m = wk_matcher_create(g, v);
    CHECK(m != NULL);
    wk_matcher_destroy(m);
    CHECK(wk_grammar_retain(NULL) == NULL);
out:
    wk_grammar_vocab_destroy(v);
    wk_grammar_free(g);
}

int main(void) {
    test_errors();
    test_json_acceptance();
    test_operators();
    test_mask_json_walks();
    test_mask_finite_language();
    test_stack_limit();
    test_large_grammars();
    test_cost_limits();
    test_shared_grammar();
    TEST_MAIN_END();
}
