/* A request's structured-output fields -> one GBNF grammar: OpenAI's response_format (json_object,
 * json_schema), vLLM's guided_json / guided_regex / guided_choice / guided_grammar and
 * structured_outputs, llama.cpp's grammar and json_schema. */
#ifndef WUSHKV_STRUCTURED_OUTPUT_H
#define WUSHKV_STRUCTURED_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "api/openai_request.h"
#include "wushkv/grammar.h"

/* *grammar: the compiled grammar the output must be a sentence of (one reference, the caller's),
 * so a bad one is a 400 naming the field; NULL when the request asks for no structure. At most
 * one of the fields may ask for it. false with err (400, or 500 out of memory), *grammar NULL. */
bool structured_output_parse(const cJSON *root, wk_grammar **grammar, api_error *err);
/* The same for one JSON Schema built by the server (tool calling's reply), field naming it. */
bool structured_output_schema(const cJSON *schema, const char *field, wk_grammar **grammar, api_error *err);
/* What a tool-calling answer is held to when the request also asks for structure: *schema a copy
 * (the caller's) of the asked JSON Schema, {"type": "object"} for json_object, NULL when nothing is
 * asked; *other the field when the ask is one that cannot hold a JSON value in a reply (a regular
 * expression, choices, a grammar). false with err only when the fields themselves are bad. */
bool structured_output_answer_schema(const cJSON *root, cJSON **schema, const char **other, api_error *err);

#endif
