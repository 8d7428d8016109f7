/* Internals shared by tokenizer.c (vocabulary, special tokens, SPM) and tokenizer_bpe.c (GPT-2 BPE). */
#ifndef WK_TOKENIZER_INT_H
#define WK_TOKENIZER_INT_H

#include "tokenizer/tokenizer.h"

/* Token attributes as llama.cpp's llama_token_attr bits, so that its tests
 * (attr & (CONTROL|UNKNOWN)) translate one to one. */
enum {
    WK_ATTR_UNKNOWN = 1 << 0, WK_ATTR_UNUSED = 1 << 1, WK_ATTR_NORMAL = 1 << 2,
    WK_ATTR_CONTROL = 1 << 3, WK_ATTR_USER_DEFINED = 1 << 4, WK_ATTR_BYTE = 1 << 5,
    WK_ATTR_LSTRIP = 1 << 7, WK_ATTR_RSTRIP = 1 << 8
};

/* The GPT-2 style pre-tokenizers we implement (llama.cpp's LLAMA_VOCAB_PRE_TYPE_*). */
typedef enum {
    WK_PRE_DEFAULT = 0, WK_PRE_GPT2, WK_PRE_LLAMA3, WK_PRE_QWEN2, WK_PRE_STARCODER
} wk_bpe_pre;

typedef struct {
    const char *text; /* into wk_tokenizer.blob */
    uint32_t len;
    uint32_t attr;
    float score;
} wk_tok_entry;

typedef struct {
    const char *text; /* "left right", into wk_tokenizer.blob */
    uint32_t len;
    uint32_t split;   /* index of the separating space */
} wk_merge;

struct wk_tokenizer {
    wk_tok_kind kind;
    int n_vocab;
    wk_tok_entry *tok;
    char *blob;             /* all token and merge texts, copied so we do not depend on the GGUF mapping */
    int32_t *map;           /* open addressing text -> id, -1 = empty */
    uint32_t map_mask;
    uint32_t max_token_len;

    int32_t bos, eos, eot, eom, unk;
    bool add_bos, add_eos, add_space_prefix;

    int32_t *special;       /* CONTROL / USER_DEFINED / UNKNOWN ids, longest text first */
    int n_special;
    int32_t *eog;           /* sorted */
    int n_eog;

    /* BPE only */
    wk_bpe_pre pre;
    bool ignore_merges;     /* llama3: a pre-token that is itself a token skips the merges */
    wk_merge *merges;       /* rank = index */
    char *merge_blob;
    int n_merges;
    int32_t *merge_map;     /* open addressing "left right" -> rank */
    uint32_t merge_mask;
};

/* Output sink: writes the first max ids, counts them all (the public contract). */
typedef struct {
    int32_t *out;
    int max;
    int n;
    bool failed;
} wk_tok_sink;

static inline void wk_sink_push(wk_tok_sink *s, int32_t id) {
    if (s->n < s->max) s->out[s->n] = id;
    s->n++;
}

uint64_t wk_tok_hash(const char *s, size_t n);
int32_t wk_tok_lookup(const wk_tokenizer *t, const char *s, size_t n);
/* Bytes in the UTF-8 sequence led by c, as llama.cpp's unicode_len_utf8 (stray bytes count 1). */
size_t wk_utf8_len(unsigned char c);

/* tokenizer_bpe.c */
bool wk_bpe_load(wk_tokenizer *t, const wk_gguf *g, char *err, size_t errlen);
void wk_bpe_encode(const wk_tokenizer *t, const char *text, size_t len, wk_tok_sink *sink);
/* Decodes a byte-level token text (GPT-2 byte-to-unicode) into raw bytes; returns its length. */
int wk_bpe_decode_text(const char *text, size_t len, char *buf, int cap);

#endif
