/* JSON Schema to GBNF: the grammars that hold a generation to a JSON Schema (OpenAI's response_format
 * json_schema, vLLM's guided_json, llama.cpp's json_schema) or to any JSON object (json_object). */
#ifndef WUSHKV_SCHEMA_GRAMMAR_H
#define WUSHKV_SCHEMA_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <cJSON.h>
#include "http/text_buf.h"

/* GBNF for JSON text that validates against `schema`; rule `root` is the whole output. false with a message
 * in err (naming the JSON pointer of the offending schema part, e.g. "/properties/age/minimum", and the
 * keyword) when the schema uses what cannot be enforced, or is malformed; out is then freed/empty. */
bool schema_to_gbnf(const cJSON *schema, text_buf *out, char *err, size_t errlen);
/* GBNF for any JSON object (response_format json_object). */
bool json_object_gbnf(text_buf *out);

#endif
