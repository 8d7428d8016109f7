/* Fuzz target: the tokenizer (engine/tokenizer/), SentencePiece and GPT-2 byte-level BPE with
 * each pre-tokenizer family, encode (plain, with special tokens parsed, with "plain" user ranges)
 * and decode (token pieces). Input: one flags byte, then the text. Invariants: ids in the
 * vocabulary; a short output buffer gets the same count and a prefix of the ids; a piece's length is the same whatever the buffer; and, for valid UTF-8 encoded
 * without special tokens, decode(encode(x)) == x (SPM: " " + x, the space prefix; text with
 * U+2581 excluded, which SPM decodes to a space by design; Gemma's SPM has no space prefix). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tiny_model.h"
#include "fuzz_fixtures.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

#define FUZZ_CHECK(c)                                                                         \
    do {                                                                                      \
        if (!(c)) {                                                                           \
            fprintf(stderr, "fuzz_tokenizer: invariant failed: %s (line %d)\n", #c, __LINE__); \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

#define MAX_TEXT 4096
#define MAX_IDS (MAX_TEXT + 8)

/* Vocabulary 0: the tiny gemma3 model's SPM vocabulary (add_space_prefix false, as Gemma's);
 * 1..6: BPE with these pre-tokenizers; 7: the tiny llama model's SPM vocabulary (add_space_prefix
 * true by default: the text comes back after one space). */
static const char *const k_pre[] = {NULL, "gpt-2", "llama3", "qwen2", "starcoder", "default"};
enum { N_BPE = sizeof k_pre / sizeof k_pre[0], N_VOCAB = 2 + N_BPE };
static wk_tokenizer *g_tok[N_VOCAB];
static const char *g_prefix[N_VOCAB];

static wk_gguf *g_files[N_VOCAB]; /* open for the process's life (reachable: no leak report) */
static int g_n_files;

static wk_tokenizer *load(uint8_t *bytes, size_t size) {
    char err[256] = "no memory";
    wk_gguf *g = bytes ? wk_gguf_open_memory(bytes, size, err, sizeof err) : NULL;
    g_files[g_n_files++] = g;
    wk_tokenizer *t = g ? wk_tokenizer_load(g, err, sizeof err) : NULL;
    if (!t) {
        fprintf(stderr, "fuzz_tokenizer: cannot load a vocabulary: %s\n", err);
        abort();
    }
    return t; /* the file stays open and mapped for the process's life */
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    size_t size;
    tiny_model_opts o = {.arch = "gemma3", .seed = 1, .n_layer = 1};
    g_tok[0] = load(tiny_model_bytes(&o, &size), size);
    g_prefix[0] = "";
    for (int i = 1; i <= N_BPE; i++) {
        g_tok[i] = load(fz_bpe_vocab(k_pre[i - 1], &size), size);
        g_prefix[i] = "";
    }
    o.arch = "llama";
    g_tok[N_BPE + 1] = load(tiny_model_bytes(&o, &size), size);
    g_prefix[N_BPE + 1] = " ";
    return 0;
}

/* Valid UTF-8 (no overlongs, surrogates or values past U+10FFFF); *has_2581: contains U+2581. */
static bool valid_utf8(const uint8_t *s, size_t n, bool *has_2581) {
    *has_2581 = false;
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        uint32_t cp;
        size_t k;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) k = 2, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) k = 3, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) k = 4, cp = c & 0x07;
        else return false;
        if (i + k > n) return false;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        if (cp == 0x2581) *has_2581 = true;
        i += k;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > MAX_TEXT + 1) return 0;
    const uint8_t flags = data[0];
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    const int vocab = (flags & 7) % N_VOCAB;
    const wk_tokenizer *t = g_tok[vocab];
    const bool add_special = flags & 0x08, parse_special = flags & 0x10, use_plain = flags & 0x20;
    const int n_vocab = wk_tokenizer_n_vocab(t);

    static int32_t ids[MAX_IDS];
    int n;
    if (use_plain) {
        /* Up to 4 ranges from the text's own bytes, some reaching past its end: the ranges are
         * the caller's (chat_render's), only ever inside the text; clamp as that caller does. */
        wk_text_range plain[4];
        int np = 0;
        for (size_t i = 0; i + 1 < len && np < 4; i += 2) {
            size_t off = (uint8_t)text[i] % (len + 1), l = (uint8_t)text[i + 1] % (len + 1 - off);
            plain[np].off = off;
            plain[np].len = l;
            np++;
        }
        n = wk_tokenizer_encode_plain(t, text, len, add_special, parse_special, plain, np, ids, MAX_IDS);
    } else {
        n = wk_tokenizer_encode(t, text, len, add_special, parse_special, ids, MAX_IDS);
    }
    if (n < 0) return 0;
    FUZZ_CHECK(n <= MAX_IDS);
    /* A short output buffer: the same count, its first ids written (wk_tokenizer_encode's contract). */
    if (!use_plain && n > 0) {
        int32_t few[3] = {-5, -5, -5};
        int cap = n > 2 ? 2 : n - 1;
        int n2 = wk_tokenizer_encode(t, text, len, add_special, parse_special, few, cap);
        FUZZ_CHECK(n2 == n);
        FUZZ_CHECK(memcmp(few, ids, (size_t)cap * sizeof *few) == 0 && few[cap] == -5);
    }

    /* Decode: every id a vocabulary id, every piece the same length whatever the buffer. */
    static char out[MAX_IDS * 64];
    size_t olen = 0;
    bool fits = true;
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < n_vocab);
        char small[4], big[256];
        int k = wk_tokenizer_piece(t, ids[i], false, big, sizeof big);
        int k2 = wk_tokenizer_piece(t, ids[i], false, small, sizeof small);
        FUZZ_CHECK(k >= 0 && k == k2);
        FUZZ_CHECK(k <= (int)sizeof big);
        if (k <= (int)sizeof small) FUZZ_CHECK(memcmp(small, big, (size_t)k) == 0);
        if (olen + (size_t)k > sizeof out) fits = false;
        else memcpy(out + olen, big, (size_t)k), olen += (size_t)k;
        int ks = wk_tokenizer_piece(t, ids[i], true, big, sizeof big);
        FUZZ_CHECK(ks >= k);
    }
    /* Some ids from the input itself, in range or not: a bad id is -1, never a crash. */
    for (size_t i = 0; i + 1 < len && i < 16; i += 2) {
        int32_t id = (int32_t)((uint8_t)text[i] << 8 | (uint8_t)text[i + 1]) - 64;
        char p[32];
        int k = wk_tokenizer_piece(t, id, (id & 1) != 0, p, sizeof p);
        FUZZ_CHECK(id >= 0 && id < n_vocab ? k >= 0 : k == -1);
        wk_tokenizer_is_eog(t, id);
    }

    /* Round trip. */
    bool has_2581;
    if (!add_special && !parse_special && !use_plain && fits && valid_utf8((const uint8_t *)text, len, &has_2581)) {
        const bool spm = wk_tokenizer_kind(t) == WK_TOK_SPM;
        if (len > 0 && !(spm && has_2581)) {
            const size_t pl = strlen(g_prefix[vocab]);
            bool ok = olen == len + pl && memcmp(out, g_prefix[vocab], pl) == 0 && memcmp(out + pl, text, len) == 0;
            if (!ok) {
                fprintf(stderr, "fuzz_tokenizer: round trip failed (vocab %d, %zu bytes in, %zu out, %d ids)\n",
                        vocab, len, olen, n);
                abort();
            }
        }
    }
    return 0;
}
