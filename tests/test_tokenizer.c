/* Tokenizer tests: exact ids against llama.cpp's llama-tokenize on the real Gemma 3 vocabulary
 * (when WUSHKV_MODEL is set), small SPM and GPT-2 BPE vocabularies built here with ids worked out
 * by hand, round trips, and malformed vocabularies that must be refused with a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf.h"
#include "gguf_writer.h"
#include "test_rng.h"
#include "test_text.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

static char err[512];

#define CHECK_IDS(got, n, ...)                                                                  \
    do {                                                                                        \
        static const int32_t exp_[] = {__VA_ARGS__};                                            \
        check_ids(__FILE__, __LINE__, got, n, exp_, (int)(sizeof exp_ / sizeof exp_[0]));       \
    } while (0)

static void print_ids(const char *what, const int32_t *v, int n) {
    fprintf(stderr, "    %s (%d):", what, n);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", v[i]);
    fprintf(stderr, "\n");
}

static void check_ids(const char *file, int line, const int32_t *got, int n, const int32_t *exp, int ne) {
    bool same = n == ne && (n == 0 || memcmp(got, exp, (size_t)n * sizeof *got) == 0);
    wk_test_checks++;
    if (same) return;
    wk_test_failures++;
    fprintf(stderr, "%s:%d: token ids differ\n", file, line);
    print_ids("expected", exp, ne);
    print_ids("got     ", got, n);
}

static int32_t ids[1 << 16];

static int enc(const wk_tokenizer *t, const char *s, bool add_special, bool parse_special) {
    return wk_tokenizer_encode(t, s, strlen(s), add_special, parse_special, ids, (int)(sizeof ids / sizeof ids[0]));
}

/* Concatenated pieces; returns the length (bounded by cap). */
static size_t detok(const wk_tokenizer *t, const int32_t *v, int n, bool special, char *out, size_t cap) {
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        char buf[256];
        int k = wk_tokenizer_piece(t, v[i], special, buf, sizeof buf);
        if (k < 0 || k > (int)sizeof buf || len + (size_t)k > cap) return (size_t)-1;
        memcpy(out + len, buf, (size_t)k);
        len += (size_t)k;
    }
    return len;
}

static bool round_trip(const wk_tokenizer *t, const char *s, size_t len, const char *prefix) {
    static int32_t v[1 << 16];
    static char out[1 << 18];
    int n = wk_tokenizer_encode(t, s, len, false, false, v, 1 << 16);
    size_t pl = strlen(prefix);
    size_t m = n < 0 ? (size_t)-1 : detok(t, v, n, false, out, sizeof out);
    bool ok = m == len + pl && memcmp(out, prefix, pl) == 0 && memcmp(out + pl, s, len) == 0;
    if (!ok) fprintf(stderr, "  round trip failed for '%.*s' (%d tokens)\n", (int)len, s, n);
    return ok;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { return (uint32_t)(rng_xorshift64(&rng) >> 11); }


/* Random valid UTF-8 mixing ASCII, whitespace runs, Latin, CJK and emoji; never U+2581, which
 * SPM decodes to a space by design, and never NUL (C strings in the test). */
static size_t random_utf8(char *o, size_t max_cps) {
    size_t n = 0, k = 1 + rnd() % max_cps;
    for (size_t i = 0; i < k; i++) {
        uint32_t cp, r = rnd() % 10;
        if (r < 4) cp = 0x20 + rnd() % 0x5F;
        else if (r < 5) cp = " \t\n\r"[rnd() % 4];
        else if (r < 6) cp = 0xA0 + rnd() % 0x160;
        else if (r < 7) cp = 0x4E00 + rnd() % 0x5000;
        else if (r < 8) cp = 0x1F300 + rnd() % 0x300;
        else if (r < 9) cp = 0x2000 + rnd() % 0x70;
        else { do cp = 1 + rnd() % 0x10FFFF; while ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x2581); }
        n += test_put_utf8(cp, o + n);
    }
    o[n] = 0;
    return n;
}

/* Opens the serialized writer output; *buf must be freed after wk_gguf_close. */
static wk_gguf *open_gw(wk_gw *w, uint8_t **buf) {
    size_t size;
    *buf = wk_gw_bytes(w, &size);
    wk_gguf *g = wk_gguf_open_memory(*buf, size, err, sizeof err);
    if (!g) fprintf(stderr, "  gguf open failed: %s\n", err);
    /* WUSHKV_TOK_WRITE_DIR: keep the synthetic vocabularies, to re-check them with llama-tokenize */
    const char *dir = getenv("WUSHKV_TOK_WRITE_DIR");
    static int seq;
    if (dir) {
        char path[512];
        snprintf(path, sizeof path, "%s/synthetic-%d.gguf", dir, seq++);
        wk_gw_write(w, path);
    }
    wk_gw_free(w);
    return g;
}

/* ---- malformed vocabularies ---- */

static void expect_refused(wk_gw *w, const char *keyword, const char *what) {
    uint8_t *buf;
    wk_gguf *g = open_gw(w, &buf);
    CHECK(g != NULL);
    if (!g) { free(buf); return; }
    err[0] = 0;
    wk_tokenizer *t = wk_tokenizer_load(g, err, sizeof err);
    CHECK(t == NULL);
    CHECK(strstr(err, keyword) != NULL);
    if (t || !strstr(err, keyword)) fprintf(stderr, "  %s: got '%s', wanted a message with '%s'\n", what, err, keyword);
    wk_tokenizer_free(t);
    wk_gguf_close(g);
    free(buf);
}

static void test_malformed(void) {
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "a"};
    static const float scores[] = {0, 0, 0, -1};
    static const int32_t types[] = {2, 3, 3, 1};
    wk_gw *w;

    w = wk_gw_new(); /* no tokenizer at all */
    expect_refused(w, "tokenizer.ggml.model", "missing model");

    w = wk_gw_new();
    wk_gw_kv_str(w, "tokenizer.ggml.model", "llama");
    wk_gw_kv_arr_f32(w, "tokenizer.ggml.scores", scores, 4);
    expect_refused(w, "tokenizer.ggml.tokens", "missing tokens");

    w = wk_gw_new();
    wk_gw_kv_str(w, "tokenizer.ggml.model", "llama");
    wk_gw_kv_arr_i32(w, "tokenizer.ggml.tokens", types, 4);
    expect_refused(w, "tokenizer.ggml.tokens", "tokens of the wrong type");

    w = wk_gw_new();
    wk_gw_kv_str(w, "tokenizer.ggml.model", "llama");
    wk_gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    wk_gw_kv_arr_f32(w, "tokenizer.ggml.scores", scores, 3);
    expect_refused(w, "scores", "short scores");

    w = wk_gw_new();
    wk_gw_kv_str(w, "tokenizer.ggml.model", "llama");
    wk_gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    wk_gw_kv_arr_f32(w, "tokenizer.ggml.token_type", scores, 4);
    expect_refused(w, "token_type", "token_type of the wrong type");

    w = wk_gw_new();
    wk_gw_kv_str(w, "tokenizer.ggml.model", "foo");
    wk_gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    expect_refused(w, "'foo'", "unknown model");

    w = wk_gw_new();
    wk_gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
    wk_gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    expect_refused(w, "merges", "BPE without merges");

    w = wk_gw_new();
    wk_gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
    wk_gw_kv_str(w, "tokenizer.ggml.pre", "no-such-pre");
    wk_gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    wk_gw_kv_arr_str(w, "tokenizer.ggml.merges", toks, 0);
    expect_refused(w, "no-such-pre", "unknown pre-tokenizer");

    w = wk_gw_new(); /* valid apart from scores: accepted (sanity check of the cases above) */
    wk_gw_kv_str(w, "tokenizer.ggml.model", "llama");
    wk_gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    wk_gw_kv_arr_i32(w, "tokenizer.ggml.token_type", types, 4);
    uint8_t *buf;
    wk_gguf *g = open_gw(w, &buf);
    wk_tokenizer *t = g ? wk_tokenizer_load(g, err, sizeof err) : NULL;
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(wk_tokenizer_encode(t, NULL, 3, false, false, ids, 4), -1);
        CHECK_EQ_INT(wk_tokenizer_piece(t, 4, false, NULL, 0), -1);
        CHECK_EQ_INT(wk_tokenizer_piece(t, -1, false, NULL, 0), -1);
    }
    wk_tokenizer_free(t);
    wk_gguf_close(g);
    free(buf);
}

/* ---- a small SentencePiece vocabulary (add_space_prefix defaults to true) ---- */

static void test_spm_synthetic(void) {
    enum { T_UNK, T_BOS, T_EOS, T_BYTE0, T_SP = T_BYTE0 + 256, T_A, T_B, T_C, T_AB, T_SPA, T_SPAB, T_BC, T_TAG, T_CTL, N_TOK };
    static char bytes[256][8];
    const char *toks[N_TOK];
    float scores[N_TOK];
    int32_t types[N_TOK];
    toks[T_UNK] = "<unk>"; toks[T_BOS] = "<s>"; toks[T_EOS] = "</s>";
    types[T_UNK] = 2; types[T_BOS] = 3; types[T_EOS] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[T_BYTE0 + b] = bytes[b];
        types[T_BYTE0 + b] = 6;
    }
    static const struct { int id; const char *text; float score; int type; } rest[] = {
        {T_SP, "\xe2\x96\x81", -1.0f, 1},    {T_A, "a", -2.0f, 1},     {T_B, "b", -2.0f, 1},
        {T_C, "c", -2.0f, 1},                {T_AB, "ab", -3.0f, 1},   {T_SPA, "\xe2\x96\x81" "a", -1.5f, 1},
        {T_SPAB, "\xe2\x96\x81" "ab", -1.0f, 1}, {T_BC, "bc", -0.5f, 1}, {T_TAG, "<tag>", 0, 4},
        {T_CTL, "<ctl>", 0, 3},
    };
    for (int i = 0; i < T_SP; i++) scores[i] = 0;
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++) {
        toks[rest[i].id] = rest[i].text;
        scores[rest[i].id] = rest[i].score;
        types[rest[i].id] = rest[i].type;
    }
    wk_gw *w = wk_gw_new();
    wk_gw_kv_str(w, "general.architecture", "llama");
    wk_gw_kv_str(w, "tokenizer.ggml.model", "llama");
    wk_gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, N_TOK);
    wk_gw_kv_arr_f32(w, "tokenizer.ggml.scores", scores, N_TOK);
    wk_gw_kv_arr_i32(w, "tokenizer.ggml.token_type", types, N_TOK);
    uint8_t *buf;
    wk_gguf *g = open_gw(w, &buf);
    wk_tokenizer *t = g ? wk_tokenizer_load(g, err, sizeof err) : NULL;
    CHECK(t != NULL);
    if (!t) { fprintf(stderr, "  spm load: %s\n", err); wk_gguf_close(g); free(buf); return; }

    /* SPM defaults when the keys are absent: bos 1, eos 2, add_bos, space prefix. */
    CHECK_EQ_INT(wk_tokenizer_kind(t), WK_TOK_SPM);
    CHECK_EQ_INT(wk_tokenizer_bos(t), T_BOS);
    CHECK_EQ_INT(wk_tokenizer_eos(t), T_EOS);
    CHECK(wk_tokenizer_add_bos(t));
    CHECK(wk_tokenizer_is_eog(t, T_EOS));
    CHECK(!wk_tokenizer_is_eog(t, T_BOS));
    CHECK_EQ_INT(wk_tokenizer_find(t, "<tag>", 5), T_TAG);

    /* "▁ab": ▁a (-1.5) beats ab (-3), then ▁a+b = ▁ab (-1). */
    int n = enc(t, "ab", true, false);
    CHECK_IDS(ids, n, T_BOS, T_SPAB);
    /* "▁abc": bc (-0.5) first, then ▁a; ab is stale. */
    n = enc(t, "abc", false, false);
    CHECK_IDS(ids, n, T_SPA, T_BC);
    /* é is not a piece: byte fallback <0xC3><0xA9>. */
    n = enc(t, "\xc3\xa9", false, false);
    CHECK_IDS(ids, n, T_SP, T_BYTE0 + 0xC3, T_BYTE0 + 0xA9);
    /* USER_DEFINED splits even without parse_special; the next fragment gets a space prefix too. */
    n = enc(t, "a<tag>b", false, false);
    CHECK_IDS(ids, n, T_SPA, T_TAG, T_SP, T_B);
    /* CONTROL only with parse_special; otherwise its text is tokenized ('<' 't' 'l' '>' by bytes). */
    n = enc(t, "<ctl>", false, false);
    CHECK_IDS(ids, n, T_SP, T_BYTE0 + '<', T_C, T_BYTE0 + 't', T_BYTE0 + 'l', T_BYTE0 + '>');
    n = enc(t, "<ctl>", false, true);
    CHECK_IDS(ids, n, T_CTL);
    n = enc(t, "", true, true);
    CHECK_IDS(ids, n, T_BOS);
    /* Plain ranges (a user's words inside a template): a CONTROL token overlapping one is text;
     * the same token outside them is still parsed, and USER_DEFINED ones split either way. */
    {
        const char *s = "<ctl>a<ctl><tag>";
        wk_text_range plain = {5, 6}; /* "a<ctl>" */
        n = wk_tokenizer_encode_plain(t, s, strlen(s), false, true, &plain, 1, ids, (int)(sizeof ids / sizeof ids[0]));
        CHECK_IDS(ids, n, T_CTL, T_SPA, T_BYTE0 + '<', T_C, T_BYTE0 + 't', T_BYTE0 + 'l', T_BYTE0 + '>', T_TAG);
        wk_text_range partial = {3, 1}; /* one byte inside the first "<ctl>" is enough */
        n = wk_tokenizer_encode_plain(t, "<ctl>", 5, false, true, &partial, 1, ids, (int)(sizeof ids / sizeof ids[0]));
        CHECK_IDS(ids, n, T_SP, T_BYTE0 + '<', T_C, T_BYTE0 + 't', T_BYTE0 + 'l', T_BYTE0 + '>');
        n = wk_tokenizer_encode_plain(t, "<ctl>", 5, false, true, NULL, 0, ids, (int)(sizeof ids / sizeof ids[0]));
        CHECK_IDS(ids, n, T_CTL);
    }
    /* Truncated output still reports the full count and writes only max ids. */
    ids[1] = -7;
    CHECK_EQ_INT(wk_tokenizer_encode(t, "abc", 3, true, false, ids, 1), 3);
    CHECK_EQ_INT(ids[0], T_BOS);
    CHECK_EQ_INT(ids[1], -7);

    char p[16];
    CHECK_EQ_INT(wk_tokenizer_piece(t, T_SPAB, false, p, sizeof p), 3);
    CHECK(memcmp(p, " ab", 3) == 0);
    CHECK_EQ_INT(wk_tokenizer_piece(t, T_BYTE0 + 0xC3, false, p, sizeof p), 1);
    CHECK_EQ_INT((unsigned char)p[0], 0xC3);
    CHECK_EQ_INT(wk_tokenizer_piece(t, T_CTL, false, p, sizeof p), 0);
    CHECK_EQ_INT(wk_tokenizer_piece(t, T_CTL, true, p, sizeof p), 5);
    CHECK_EQ_INT(wk_tokenizer_piece(t, T_TAG, false, p, sizeof p), 5);
    CHECK_EQ_INT(wk_tokenizer_piece(t, T_SPAB, false, p, 1), 3); /* too small: full length */

    /* Round trip: the space prefix comes back as one leading space. */
    int bad = 0;
    char s[1024];
    for (int i = 0; i < 300; i++) {
        size_t len = random_utf8(s, 40);
        if (!round_trip(t, s, len, " ")) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    wk_tokenizer_free(t);
    wk_gguf_close(g);
    free(buf);
}

/* ---- a small GPT-2 byte-level BPE vocabulary ---- */

/* GPT-2 bytes_to_unicode, written out independently of the engine's version. */

/* Merges, in rank order; merge k creates token 256 + k. "Ġ" is the space byte, "Ċ" the newline. */
#define G "\xc4\xa0"
#define NL "\xc4\x8a"
static const char *const k_merges[] = {
    "h e", G " t", G "t he", "l l", "ll o", "e l", "1 2", "3 4", "n '", "' t", "o " G, G " " G, NL " " NL,
};
enum {
    B_HE = 256, B_GT, B_GTHE, B_LL, B_LLO, B_EL, B_12, B_34, B_NQ, B_QT, B_OG, B_GG, B_NLNL,
    B_XYZ, B_EOT_TEXT, B_IM_END, B_TAG, B_NTOK
};

static wk_tokenizer *bpe_vocab(const char *pre, bool set_add_bos, wk_gguf **g, uint8_t **buf) {
    static char bytes[256][5];
    static char merged[13][16];
    const char *toks[B_NTOK];
    int32_t types[B_NTOK];
    for (int b = 0; b < 256; b++) {
        bytes[b][test_put_utf8(test_gpt2_byte_cp(b), bytes[b])] = 0;
        toks[b] = bytes[b];
        types[b] = 1;
    }
    for (int k = 0; k < 13; k++) { /* "left right" -> "leftright" */
        const char *m = k_merges[k], *sp = strchr(m + 1, ' ');
        snprintf(merged[k], sizeof merged[k], "%.*s%s", (int)(sp - m), m, sp + 1);
        toks[256 + k] = merged[k];
        types[256 + k] = 1;
    }
    toks[B_XYZ] = "xyz"; types[B_XYZ] = 1; /* a token no merge reaches (llama3 ignore_merges) */
    toks[B_EOT_TEXT] = "<|endoftext|>"; types[B_EOT_TEXT] = 3;
    toks[B_IM_END] = "<|im_end|>"; types[B_IM_END] = 3;
    toks[B_TAG] = "<tag>"; types[B_TAG] = 4;
    wk_gw *w = wk_gw_new();
    wk_gw_kv_str(w, "general.architecture", "llama");
    wk_gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) wk_gw_kv_str(w, "tokenizer.ggml.pre", pre);
    wk_gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, B_NTOK);
    wk_gw_kv_arr_i32(w, "tokenizer.ggml.token_type", types, B_NTOK);
    wk_gw_kv_arr_str(w, "tokenizer.ggml.merges", k_merges, 13);
    wk_gw_kv_u32(w, "tokenizer.ggml.bos_token_id", B_EOT_TEXT);
    wk_gw_kv_u32(w, "tokenizer.ggml.eos_token_id", B_EOT_TEXT);
    if (set_add_bos) wk_gw_kv_bool(w, "tokenizer.ggml.add_bos_token", false);
    *g = open_gw(w, buf);
    wk_tokenizer *t = *g ? wk_tokenizer_load(*g, err, sizeof err) : NULL;
    if (!t) fprintf(stderr, "  bpe load (%s): %s\n", pre ? pre : "no pre", err);
    return t;
}

static void done_vocab(wk_tokenizer *t, wk_gguf *g, uint8_t *buf) {
    wk_tokenizer_free(t);
    wk_gguf_close(g);
    free(buf);
}

/* Cases whose ids are the same for every pre-tokenizer. */
static void bpe_common(const wk_tokenizer *t) {
    int n = enc(t, "hello", false, false); /* he(0), then ll(3), then ll+o(4); el(5) goes stale */
    CHECK_IDS(ids, n, B_HE, B_LLO);
    n = enc(t, " the", false, false); /* he, Ġt, Ġt+he */
    CHECK_IDS(ids, n, B_GTHE);
    n = enc(t, "go now", false, false); /* "o Ġ" must not merge across the word boundary */
    CHECK_IDS(ids, n, 'g', 'o', ' ', 'n', 'o', 'w');
    n = enc(t, "a  b", false, false); /* \s+(?!\S): "a", "Ġ", "Ġb": no ĠĠ */
    CHECK_IDS(ids, n, 'a', ' ', ' ', 'b');
    n = enc(t, "a   ", false, false); /* trailing run in one piece: ĠĠ (smaller left first), Ġ */
    CHECK_IDS(ids, n, 'a', B_GG, ' ');
    n = enc(t, "\xc3\xa9", false, false); /* é: bytes C3 A9, printable Latin-1 map to themselves */
    CHECK_IDS(ids, n, 0xC3, 0xA9);
    n = enc(t, "x<|endoftext|>y", false, true);
    CHECK_IDS(ids, n, 'x', B_EOT_TEXT, 'y');
    n = enc(t, "a<tag>b", false, false);
    CHECK_IDS(ids, n, 'a', B_TAG, 'b');
    CHECK_EQ_INT(wk_tokenizer_eot(t), B_IM_END);
    CHECK(wk_tokenizer_is_eog(t, B_IM_END));
    CHECK(wk_tokenizer_is_eog(t, B_EOT_TEXT));
    CHECK(!wk_tokenizer_is_eog(t, B_TAG));

    char p[64];
    CHECK_EQ_INT(wk_tokenizer_piece(t, B_GTHE, false, p, sizeof p), 4);
    CHECK(memcmp(p, " the", 4) == 0);
    CHECK_EQ_INT(wk_tokenizer_piece(t, '\n', false, p, sizeof p), 1);
    CHECK_EQ_INT(p[0], '\n');
    CHECK_EQ_INT(wk_tokenizer_piece(t, B_EOT_TEXT, false, p, sizeof p), 0);
    CHECK_EQ_INT(wk_tokenizer_piece(t, B_EOT_TEXT, true, p, sizeof p), 13);
    int bad = 0;
    char s[1024];
    for (int i = 0; i < 300; i++) {
        size_t len = random_utf8(s, 40);
        if (!round_trip(t, s, len, "")) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_bpe_synthetic(void) {
    wk_gguf *g;
    uint8_t *buf;
    wk_tokenizer *t;
    int n;

    /* gpt-2: digits stay one run; newlines one by one; case-sensitive contractions. */
    t = bpe_vocab("gpt-2", true, &g, &buf);
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(wk_tokenizer_kind(t), WK_TOK_BPE);
        bpe_common(t);
        n = enc(t, "1234", false, false);
        CHECK_IDS(ids, n, B_12, B_34);
        n = enc(t, "don't", false, false); /* the contraction splits first, so "' t" wins over "n '" */
        CHECK_IDS(ids, n, 'd', 'o', 'n', B_QT);
        n = enc(t, "a\n\nb", false, false);
        CHECK_IDS(ids, n, 'a', '\n', '\n', 'b');
        n = enc(t, "xyz", false, false);
        CHECK_IDS(ids, n, 'x', 'y', 'z');
        n = enc(t, "x", true, false); /* add_bos_token false */
        CHECK_IDS(ids, n, 'x');
    }
    done_vocab(t, g, buf);

    /* llama3: \p{N}{1,3}, \s*[\r\n]+, whole-word lookup first (ignore_merges), add_bos. */
    t = bpe_vocab("llama-bpe", false, &g, &buf);
    CHECK(t != NULL);
    if (t) {
        bpe_common(t);
        n = enc(t, "1234", false, false);
        CHECK_IDS(ids, n, B_12, '3', '4');
        n = enc(t, "DON'T", false, false); /* case-insensitive contraction: "'T" */
        CHECK_IDS(ids, n, 'D', 'O', 'N', '\'', 'T');
        n = enc(t, "a\n\nb", false, false);
        CHECK_IDS(ids, n, 'a', B_NLNL, 'b');
        n = enc(t, "xyz", false, false);
        CHECK_IDS(ids, n, B_XYZ);
        n = enc(t, "x", true, false);
        CHECK_IDS(ids, n, B_EOT_TEXT, 'x');
    }
    done_vocab(t, g, buf);

    /* qwen2: one digit per piece. */
    t = bpe_vocab("qwen2", true, &g, &buf);
    CHECK(t != NULL);
    if (t) {
        bpe_common(t);
        n = enc(t, "1234", false, false);
        CHECK_IDS(ids, n, '1', '2', '3', '4');
        n = enc(t, "don't", false, false);
        CHECK_IDS(ids, n, 'd', 'o', 'n', B_QT);
        n = enc(t, "a\n\nb", false, false);
        CHECK_IDS(ids, n, 'a', B_NLNL, 'b');
    }
    done_vocab(t, g, buf);

    /* default (no pre key): punctuation runs, gpt-2, \p{N}+, then [0-9]{3}. */
    t = bpe_vocab(NULL, true, &g, &buf);
    CHECK(t != NULL);
    if (t) {
        bpe_common(t);
        n = enc(t, "1234", false, false);
        CHECK_IDS(ids, n, B_12, '3', '4');
        n = enc(t, "don't", false, false); /* the punctuation pass isolates the apostrophe first */
        CHECK_IDS(ids, n, 'd', 'o', 'n', '\'', 't');
    }
    done_vocab(t, g, buf);
}
#undef G
#undef NL

/* ---- the real Gemma 3 vocabulary ---- */

/* Expected ids come from llama.cpp's own tokenizer, not from this code:
 *   llama-tokenize -m gemma-3-270m-q4_k_m.gguf -f <file holding exactly the string> --no-escape --ids --log-disable
 * (llama.cpp 0c1e57098, "version: 0.5.0-dev", the copy vendored in llama-cpp-python 0.3.36, built
 * for CPU). `special` is llama-tokenize's default (BOS added, parse_special true); `plain` adds
 * --no-bos --no-parse-special, i.e. encode(add_special=false, parse_special=false). */
typedef struct {
    const char *text;
    int32_t special[24];
    int32_t plain[24];
} gemma_case;

static const gemma_case k_gemma[] = {
    {"Hello world", {2, 9259, 1902, -1}, {9259, 1902, -1}},
    {"The capital of France is", {2, 818, 5279, 529, 7001, 563, -1}, {818, 5279, 529, 7001, 563, -1}},
    {"Gr\xc3\xbc\xc3\x9f" "e, Stra\xc3\x9f" "e \xe2\x80\x94 na\xc3\xafve caf\xc3\xa9",
     {2, 9322, 236959, 16756, 236764, 80176, 2192, 120362, 33443, -1},
     {9322, 236959, 16756, 236764, 80176, 2192, 120362, 33443, -1}},
    {"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88", /* 日本語のテキスト */
     {2, 94951, 236945, 95830, -1}, {94951, 236945, 95830, -1}},
    {"I \xe2\x9d\xa4\xef\xb8\x8f \xf0\x9f\xa6\x99 and \xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7",
     {2, 236777, 64813, 236743, 478, 397, 404, 391, 532, 236743, 243767, 237243, 243767, 237243, 244814, -1},
     {236777, 64813, 236743, 478, 397, 404, 391, 532, 236743, 243767, 237243, 243767, 237243, 244814, -1}},
    {"a  b   c\t\td\n\n\ne", {2, 236746, 138, 236763, 139, 236755, 255969, 236753, 109, 236744, -1},
     {236746, 138, 236763, 139, 236755, 255969, 236753, 109, 236744, -1}},
    {"3.14159 1234567890",
     {2, 236800, 236761, 236770, 236812, 236770, 236810, 236819, 236743, 236770, 236778, 236800, 236812, 236810, 236825,
      236832, 236828, 236819, 236771, -1},
     {236800, 236761, 236770, 236812, 236770, 236810, 236819, 236743, 236770, 236778, 236800, 236812, 236810, 236825,
      236832, 236828, 236819, 236771, -1}},
    {"int main() { return 0; }\n", {2, 720, 1689, 825, 642, 994, 236743, 236771, 236793, 682, 107, -1},
     {720, 1689, 825, 642, 994, 236743, 236771, 236793, 682, 107, -1}},
    {"<start_of_turn>user\nhi<end_of_turn>", {2, 105, 2364, 107, 2202, 106, -1},
     {236820, 3041, 236779, 1340, 236779, 887, 236813, 2364, 107, 2202, 236820, 643, 236779, 1340, 236779, 887, 236813, -1}},
    {" leading space and trailing  ", {2, 5830, 2557, 532, 45330, 138, -1}, {5830, 2557, 532, 45330, 138, -1}},
    {"", {2, -1}, {-1}},
};

static int count_ids(const int32_t *v) {
    int n = 0;
    while (v[n] >= 0) n++;
    return n;
}

static void test_gemma(const char *path) {
    wk_gguf *g = wk_gguf_open(path, err, sizeof err);
    CHECK(g != NULL);
    if (!g) { fprintf(stderr, "  %s: %s\n", path, err); return; }
    double t0 = now_s();
    wk_tokenizer *t = wk_tokenizer_load(g, err, sizeof err);
    double t1 = now_s();
    CHECK(t != NULL);
    if (!t) { fprintf(stderr, "  tokenizer: %s\n", err); wk_gguf_close(g); return; }
    printf("gemma tokenizer load: %.3f s (%d tokens)\n", t1 - t0, wk_tokenizer_n_vocab(t));

    CHECK_EQ_INT(wk_tokenizer_n_vocab(t), 262144);
    CHECK_EQ_INT(wk_tokenizer_kind(t), WK_TOK_SPM);
    CHECK_EQ_INT(wk_tokenizer_bos(t), 2);
    CHECK_EQ_INT(wk_tokenizer_eos(t), 1);
    CHECK_EQ_INT(wk_tokenizer_eot(t), 106);
    CHECK(wk_tokenizer_add_bos(t));
    CHECK(wk_tokenizer_is_eog(t, 1));
    CHECK(wk_tokenizer_is_eog(t, 106));
    CHECK(!wk_tokenizer_is_eog(t, 2));
    CHECK(!wk_tokenizer_is_eog(t, 105));
    CHECK_EQ_INT(wk_tokenizer_find(t, "<start_of_turn>", 15), 105);

    for (size_t i = 0; i < sizeof k_gemma / sizeof k_gemma[0]; i++) {
        const gemma_case *c = &k_gemma[i];
        int n = enc(t, c->text, true, true);
        check_ids(__FILE__, __LINE__, ids, n, c->special, count_ids(c->special));
        n = enc(t, c->text, false, false);
        check_ids(__FILE__, __LINE__, ids, n, c->plain, count_ids(c->plain));
        CHECK(round_trip(t, c->text, strlen(c->text), ""));
    }
    /* llama-tokenize ... --no-bos (parse_special on), and --no-bos --no-parse-special: a USER_DEFINED
     * token (<start_of_image>) is split out either way, a CONTROL one (<unused0>) only when parsing. */
    int n = enc(t, "<start_of_turn>user\nhi<end_of_turn>", false, true);
    CHECK_IDS(ids, n, 105, 2364, 107, 2202, 106);
    char back[64];
    size_t bl = detok(t, ids, n, true, back, sizeof back); /* control tokens render with special */
    CHECK(bl == 35 && memcmp(back, "<start_of_turn>user\nhi<end_of_turn>", 35) == 0);
    n = enc(t, "<start_of_image>x<unused0>", false, false);
    CHECK_IDS(ids, n, 255999, 236781, 236820, 63634, 236771, 236813);
    n = enc(t, "<start_of_image>x<unused0>", false, true);
    CHECK_IDS(ids, n, 255999, 236781, 6);

    char p[64];
    CHECK_EQ_INT(wk_tokenizer_piece(t, 106, false, p, sizeof p), 0);
    CHECK_EQ_INT(wk_tokenizer_piece(t, 106, true, p, sizeof p), 13);
    CHECK(memcmp(p, "<end_of_turn>", 13) == 0);
    CHECK_EQ_INT(wk_tokenizer_piece(t, 138, false, p, sizeof p), 2); /* USER_DEFINED "  " */
    int32_t byte_a = wk_tokenizer_find(t, "<0x41>", 6);
    CHECK(byte_a >= 0);
    CHECK_EQ_INT(wk_tokenizer_piece(t, byte_a, false, p, sizeof p), 1);
    CHECK_EQ_INT(p[0], 'A');

    int bad = 0;
    static char s[1 << 16];
    for (int i = 0; i < 500; i++) {
        size_t len = random_utf8(s, 80);
        if (!round_trip(t, s, len, "")) bad++;
    }
    CHECK_EQ_INT(bad, 0);

    /* Throughput on ~1 MB of mixed text (printed only). */
    size_t len = 0;
    while (len < sizeof s - 400) len += random_utf8(s + len, 60);
    static char big[1 << 20];
    bl = 0;
    while (bl + len < sizeof big) { memcpy(big + bl, s, len); bl += len; }
    static int32_t bigids[1 << 20];
    t0 = now_s();
    n = wk_tokenizer_encode(t, big, bl, true, true, bigids, 1 << 20);
    t1 = now_s();
    CHECK(n > 0);
    printf("gemma encode: %zu bytes -> %d tokens in %.3f s\n", bl, n, t1 - t0);

    wk_tokenizer_free(t);
    wk_gguf_close(g);
}

/* ---- llama.cpp's own tokenizer test data (optional) ----
 * WUSHKV_LLAMA_VOCABS=<llama.cpp>/models runs test-tokenizer-0's cases: ggml-vocab-X.gguf with
 * X.gguf.inp (inputs separated by "\n__ggml_vocab_test__\n") and X.gguf.out (expected ids per
 * line, from the original HF tokenizers), encode(add_special=false, parse_special=false). */

static void test_llama_vocab(const char *dir, const char *name) {
    char path[1024];
    size_t ni, no;
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", dir, name);
    wk_gguf *g = wk_gguf_open(path, err, sizeof err);
    if (!g) { printf("  %s: not found, skipped\n", path); return; }
    wk_tokenizer *t = wk_tokenizer_load(g, err, sizeof err);
    CHECK(t != NULL);
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.inp", dir, name);
    char *inp = slurp(path, &ni);
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.out", dir, name);
    char *out = slurp(path, &no);
    CHECK(inp && out);
    int cases = 0, bad = 0;
    if (t && inp && out) {
        static const char sep[] = "\n__ggml_vocab_test__\n";
        char *p = inp, *o = out;
        while (p < inp + ni) { /* as test-tokenizer-0: a trailing separator ends the list */
            char *q = strstr(p, sep), *eol = strchr(o, '\n');
            size_t len = q ? (size_t)(q - p) : ni - (size_t)(p - inp);
            if (eol) *eol = 0;
            int32_t exp[512];
            int ne = 0;
            for (char *c = o, *e; ne < 512; c = e) {
                long v = strtol(c, &e, 10);
                if (e == c) break;
                exp[ne++] = (int32_t)v;
            }
            int n = wk_tokenizer_encode(t, p, len, false, false, ids, (int)(sizeof ids / sizeof ids[0]));
            cases++;
            if (n != ne || memcmp(ids, exp, (size_t)ne * sizeof *exp) != 0) {
                bad++;
                fprintf(stderr, "  %s: '%.*s'\n", name, (int)len, p);
                print_ids("expected", exp, ne);
                print_ids("got     ", ids, n);
            }
            if (!q || !eol) break;
            p = q + sizeof sep - 1;
            o = eol + 1;
        }
    }
    CHECK_EQ_INT(bad, 0);
    printf("llama.cpp vocab %s: %d cases, %d differ\n", name, cases, bad);
    free(inp);
    free(out);
    wk_tokenizer_free(t);
    wk_gguf_close(g);
}

int main(void) {
    test_malformed();
    test_spm_synthetic();
    test_bpe_synthetic();
    const char *model = real_model_path("the Gemma 3 vocabulary checks");
    if (model) test_gemma(model);
    const char *vocabs = getenv("WUSHKV_LLAMA_VOCABS");
    static const char *const names[] = {"llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2", "starcoder",
                                        "refact", "command-r", "mpt"};
    for (size_t i = 0; vocabs && *vocabs && i < sizeof names / sizeof names[0]; i++) test_llama_vocab(vocabs, names[i]);
    TEST_MAIN_END();
}
