/* A request's structured-output fields -> one GBNF grammar: OpenAI's response_format (json_object,
 * json_schema), vLLM's guided_json / guided_regex / guided_choice / guided_grammar and
 * structured_outputs, llama.cpp's grammar and json_schema. */
#ifndef WUSHKV_STRUCTURED_OUTPUT_H
#define WUSHKV_STRUCTURED_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "api/openai_request.h"

/* *gbnf: a malloc'd, NUL-terminated grammar of *len bytes that the output must be a sentence of,
 * compiled once here so a bad one is a 400 naming the field; NULL when the request asks for no
 * structure. At most one of the fields may ask for it. false with err (400, or 500 out of memory). */
bool structured_output_parse(const cJSON *root, char **gbnf, size_t *len, api_error *err);

#endif
