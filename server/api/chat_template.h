/* Chat messages -> one prompt string in the model's chat format. The model's Jinja template is
 * not executed: it is recognised (Gemma, Llama 3, ChatML/Qwen, the Mistral family) and the format
 * rendered natively; a model without a recognisable template gets the default of its architecture
 * (Gemma for gemma*), else ChatML. */
#ifndef WUSHKV_CHAT_TEMPLATE_H
#define WUSHKV_CHAT_TEMPLATE_H

#include <stdbool.h>

#include "wushkv/wushkv.h"

/* The Mistral family's variants are Mistral's own template generations (its cookbook's names, as
 * llama.cpp names them): where the spaces around [INST] go, whether [SYSTEM_PROMPT] exists.
 * CHAT_MISTRAL is an [INST] template of none of them (Mistral 7B v0.1/v0.2's Hugging Face one). */
typedef enum {
    CHAT_GEMMA,
    CHAT_LLAMA3,
    CHAT_CHATML,
    /* Llama 3.1's template (3.3's the same) opens every prompt with a system turn stating the
     * knowledge cut-off and a date: "26 Jul 2024" in 3.1's, today's in 3.2's (strftime_now). */
    CHAT_LLAMA3_1,
    CHAT_LLAMA3_2,
    CHAT_MISTRAL,
    CHAT_MISTRAL_V1,
    CHAT_MISTRAL_V3,
    CHAT_MISTRAL_V3_TEKKEN,
    CHAT_MISTRAL_V7,
    CHAT_MISTRAL_V7_TEKKEN,
    CHAT_FORMAT_COUNT
} chat_format;

typedef struct chat_msg {
    const char *role; /* "system", "developer", "user", "assistant" (validated by the caller) */
    const char *content;
    size_t content_len; /* content's bytes (it may hold NUL bytes) */
} chat_msg;

/* How the prompt ends: opening the assistant's reply (the default), after the last message's turn
 * (vLLM's add_generation_prompt=false), or inside the last message, an assistant's, left open so
 * the model continues it (vLLM's continue_final_message; the caller checks the role). */
typedef enum { CHAT_OPEN_REPLY, CHAT_NO_REPLY, CHAT_CONTINUE_LAST } chat_ending;

chat_format chat_format_detect(const char *jinja_template, const char *arch);
/* The system text a template writes when the conversation has none: a ChatML template's literal
 * system turn (Qwen 2 and 2.5: "You are Qwen, created by Alibaba Cloud. You are a helpful
 * assistant."), or a Mistral v7 template's default_system_message (Small 3.x, Devstral, Ministral
 * 3: literals joined with dates it takes from strftime_now, computed now). Its text (malloc'd, the
 * template's string escapes undone), or NULL when the template has none we can read. *dated (when
 * not NULL) says whether it holds a date, so that the caller computes it again for each prompt. */
char *chat_default_system(const char *jinja_template, bool *dated);
const char *chat_format_name(chat_format f);
/* The prompt (malloc'd, NUL-terminated; its length in *len, since a message may hold NUL bytes),
 * ending as `ending` says (CHAT_OPEN_REPLY: the assistant turn's opening, so the model answers;
 * CHAT_CONTINUE_LAST applies when the last message is the assistant's). The BOS token is not included:
 * the tokenizer adds it. *plain gets the byte ranges of the messages'
 * content (malloc'd, *n_plain of them): text the tokenizer must not read control tokens from, so
 * a user typing "<start_of_turn>" cannot forge a turn. NULL (and *plain NULL) when out of memory. */
char *chat_render(chat_format f, const chat_msg *msgs, int n, chat_ending ending, size_t *len, wk_text_range **plain,
                  int *n_plain);
/* What a model's template adds beyond its format's turns. */
typedef struct chat_extras {
    const char *default_system; /* chat_default_system's text, or NULL */
    bool no_thinking;           /* Qwen 3's enable_thinking false: an empty think block opens the reply */
} chat_extras;
/* chat_render with x (NULL: none): the default system text written as the template writes it when
 * the first message is not a system message (ChatML, Mistral v7); the empty think block after
 * ChatML's reply opening. */
char *chat_render_with(chat_format f, const chat_extras *x, const chat_msg *msgs, int n, chat_ending ending, size_t *len,
                       wk_text_range **plain, int *n_plain);
/* Whether a ChatML template turns enable_thinking false into an empty think block (Qwen 3's). */
bool chat_template_thinks(const char *jinja_template);

#endif
