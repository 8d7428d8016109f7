/* Chat completions' messages -> the prompt text in the model's chat format (chat_request.c). */
#ifndef WUSHKV_CHAT_REQUEST_H
#define WUSHKV_CHAT_REQUEST_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "api/openai_request.h"

/* root's messages (and add_generation_prompt, continue_final_message, chat_template_kwargs) ->
 * g's prompt_text, plain ranges and system_end; tools_text (tool calling's description, NULL:
 * none) goes after the first system message's words, or is a system message of its own. false
 * with err naming the field. */
bool chat_parse_messages(const cJSON *root, const api_model *md, const char *tools_text, gen_params *g, api_error *err);

/* vLLM's chat echo: the words of root's last message when it is the assistant's (a reply the
 * model continues), as the prompt has them, into a new string (*out NULL and *len 0 otherwise).
 * Messages already checked by chat_parse_messages. false: out of memory. */
bool chat_last_reply_text(const cJSON *root, char **out, size_t *len);

#endif
