/* Tokenizer built from a GGUF vocabulary: SentencePiece (model "llama") and GPT-2 byte-level BPE ("gpt2"). */
#ifndef WK_TOKENIZER_H
#define WK_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "model/gguf.h"
#include "wushkv/wushkv.h"

typedef enum { WK_TOK_SPM = 1, WK_TOK_BPE = 2 } wk_tok_kind;
typedef enum {
    WK_TOKTYPE_NORMAL = 1, WK_TOKTYPE_UNKNOWN = 2, WK_TOKTYPE_CONTROL = 3,
    WK_TOKTYPE_USER_DEFINED = 4, WK_TOKTYPE_UNUSED = 5, WK_TOKTYPE_BYTE = 6
} wk_token_type;

typedef struct wk_tokenizer wk_tokenizer;

/* NULL with a message in err if the vocabulary is missing, malformed or of an unknown model. */
wk_tokenizer *wk_tokenizer_load(const wk_gguf *g, char *err, size_t errlen);
void wk_tokenizer_free(wk_tokenizer *t);

int wk_tokenizer_n_vocab(const wk_tokenizer *t);
wk_tok_kind wk_tokenizer_kind(const wk_tokenizer *t);
int32_t wk_tokenizer_bos(const wk_tokenizer *t);  /* -1 if none */
int32_t wk_tokenizer_eos(const wk_tokenizer *t);
int32_t wk_tokenizer_eot(const wk_tokenizer *t);  /* end-of-turn (e.g. <end_of_turn>, <|eot_id|>) or -1 */
bool wk_tokenizer_add_bos(const wk_tokenizer *t);
bool wk_tokenizer_is_eog(const wk_tokenizer *t, int32_t id); /* eos, eot and other end-of-generation ids */
/* Token id of an exact vocabulary string, or -1. */
int32_t wk_tokenizer_find(const wk_tokenizer *t, const char *text, size_t len);

/* As llama.cpp's tokenize(text, add_special, parse_special). Returns the number of tokens
 * (which may exceed max: the first max are written), or -1 on invalid input. */
int wk_tokenizer_encode(const wk_tokenizer *t, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t *out, int max);
/* The same, except that with parse_special a CONTROL (or UNKNOWN) token is not recognised where
 * its text would overlap one of the n_plain byte ranges [off, off+len) of text (sorted or not): a
 * user's words inside a prompt whose template supplies the control tokens. */
int wk_tokenizer_encode_plain(const wk_tokenizer *t, const char *text, size_t len, bool add_special,
                              bool parse_special, const wk_text_range *plain, int n_plain, int32_t *out, int max);
/* As llama.cpp's token_to_piece. Returns the piece length (may exceed cap), -1 for a bad id. */
int wk_tokenizer_piece(const wk_tokenizer *t, int32_t id, bool render_special, char *buf, int cap);

#endif
