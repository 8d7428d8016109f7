/* Chat messages -> one prompt string in the model's chat format. The model's Jinja template is
 * not executed: it is recognised (Gemma, Llama 3, ChatML/Qwen, Mistral) and the format rendered
 * natively; a model without a recognisable template gets the default of its architecture
 * (Gemma for gemma*), else ChatML. */
#ifndef WUSHKV_CHAT_TEMPLATE_H
#define WUSHKV_CHAT_TEMPLATE_H

#include <stdbool.h>

#include "wushkv/wushkv.h"

typedef enum { CHAT_GEMMA, CHAT_LLAMA3, CHAT_CHATML, CHAT_MISTRAL } chat_format;

typedef struct chat_msg {
    const char *role; /* "system", "developer", "user", "assistant" (validated by the caller) */
    const char *content;
    size_t content_len; /* content's bytes (it may hold NUL bytes) */
} chat_msg;

chat_format chat_format_detect(const char *jinja_template, const char *arch);
const char *chat_format_name(chat_format f);
/* The prompt (malloc'd, NUL-terminated; its length in *len, since a message may hold NUL bytes),
 * ending with the assistant turn's opening so the model answers. The BOS token is not included:
 * the tokenizer adds it. *plain gets the byte ranges of the messages'
 * content (malloc'd, *n_plain of them): text the tokenizer must not read control tokens from, so
 * a user typing "<start_of_turn>" cannot forge a turn. NULL (and *plain NULL) when out of memory. */
char *chat_render(chat_format f, const chat_msg *msgs, int n, size_t *len, wk_text_range **plain, int *n_plain);

#endif
