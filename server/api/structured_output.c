/* A request's structured-output fields -> one GBNF grammar (structured_output.h). Each client
 * family names the same few asks differently: OpenAI's response_format, vLLM's guided_* fields and
 * their newer structured_outputs object, llama.cpp's grammar and json_schema. They are gathered
 * here into one ask (two asks in one request are refused: which would win is not obvious), turned
 * into GBNF by the converters (schema_grammar.c, regex_grammar.c), and compiled once, here on the
 * loop thread: a bad grammar is the client's 400 now, not a failure at generation time, and the
 * engine thread, which every running request waits on, never compiles one. */
#include "api/structured_output.h"

#include <stdlib.h>
#include <string.h>

#include "api/json_text.h"
#include "api/regex_grammar.h"
#include "api/schema_grammar.h"
#include "wushkv/grammar.h"

typedef enum { ASK_GBNF, ASK_SCHEMA, ASK_JSON_OBJECT, ASK_REGEX, ASK_CHOICE } ask_kind;

typedef struct ask {
    ask_kind kind;
    const cJSON *value; /* the grammar / regex string, the schema, the choice array */
    const char *field;  /* what a message names: "response_format", "guided_json", ... */
} ask;

typedef struct asks {
    ask a[4];
    int n;
    cJSON *owned[2]; /* schemas given as JSON text (guided_json / structured_outputs.json strings), parsed */
    int n_owned;
} asks;

static bool add_ask(asks *s, ask_kind kind, const cJSON *value, const char *field, api_error *e) {
    if (s->n > 0)
        return openai_fail(e, 400, field, "invalid_value", "%s and %s both constrain the output; give one", s->a[0].field, field);
    s->a[s->n++] = (ask){kind, value, field};
    return true;
}

static const cJSON *given(const cJSON *obj, const char *name) {
    const cJSON *v = openai_field(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool want_string(const cJSON *v, const char *field, api_error *e) {
    if (cJSON_IsString(v)) return true;
    return openai_fail(e, 400, field, "invalid_type", "%s must be a string, not %s", field, openai_type_name(v));
}

/* A schema: an object, or (vLLM's guided_json, structured_outputs.json) JSON text holding one. */
static bool schema_ask(asks *s, const cJSON *v, const char *field, api_error *e) {
    if (cJSON_IsString(v)) {
        if (s->n_owned == 2) return add_ask(s, ASK_SCHEMA, v, field, e); /* a third ask: refused there */
        cJSON *parsed = cJSON_ParseWithLength(v->valuestring, json_str_len(v));
        if (!parsed || !cJSON_IsObject(parsed)) {
            cJSON_Delete(parsed);
            return openai_fail(e, 400, field, "invalid_value", "%s must be a JSON Schema: an object, or a string of JSON holding one", field);
        }
        s->owned[s->n_owned++] = parsed;
        v = parsed;
    }
    if (!cJSON_IsObject(v))
        return openai_fail(e, 400, field, "invalid_type", "%s must be a JSON Schema object, not %s", field, openai_type_name(v));
    return add_ask(s, ASK_SCHEMA, v, field, e);
}

static bool choice_ask(asks *s, const cJSON *v, const char *field, api_error *e) {
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return openai_fail(e, 400, field, "invalid_value", "%s must be a non-empty array of strings", field);
    const cJSON *c;
    cJSON_ArrayForEach(c, v) if (!cJSON_IsString(c))
        return openai_fail(e, 400, field, "invalid_type", "%s must hold strings only, not %s", field, openai_type_name(c));
    return add_ask(s, ASK_CHOICE, v, field, e);
}

/* OpenAI's response_format, with llama.cpp's extension of a schema beside json_object. */
static bool response_format_ask(asks *s, const cJSON *rf, api_error *e) {
    if (!cJSON_IsObject(rf))
        return openai_fail(e, 400, "response_format", "invalid_type", "response_format must be an object, not %s", openai_type_name(rf));
    const cJSON *type = openai_field(rf, "type");
    if (json_str_is(type, "text")) return true;
    if (json_str_is(type, "json_object")) {
        const cJSON *schema = given(rf, "schema");
        return schema ? schema_ask(s, schema, "response_format", e) : add_ask(s, ASK_JSON_OBJECT, NULL, "response_format", e);
    }
    if (json_str_is(type, "json_schema")) {
        const cJSON *js = given(rf, "json_schema");
        if (!js) return openai_fail(e, 400, "response_format", "invalid_value", "response_format json_schema needs a json_schema object");
        if (!cJSON_IsObject(js))
            return openai_fail(e, 400, "response_format", "invalid_type", "response_format.json_schema must be an object, not %s", openai_type_name(js));
        const cJSON *schema = given(js, "schema");
        /* OpenAI's name and strict are taken and change nothing: the output always follows the schema */
        return schema ? schema_ask(s, schema, "response_format", e) : add_ask(s, ASK_JSON_OBJECT, NULL, "response_format", e);
    }
    return openai_fail(e, 400, "response_format", "unsupported_value",
                       "response_format.type must be \"text\", \"json_object\" or \"json_schema\"");
}

/* vLLM's structured_outputs object (its successor to the guided_* fields). */
static bool structured_outputs_ask(asks *s, const cJSON *so, api_error *e) {
    const char *f = "structured_outputs";
    if (!cJSON_IsObject(so)) return openai_fail(e, 400, f, "invalid_type", "structured_outputs must be an object, not %s", openai_type_name(so));
    const cJSON *v;
    if ((v = given(so, "json")) && !schema_ask(s, v, f, e)) return false;
    if ((v = given(so, "regex")) && !(want_string(v, f, e) && add_ask(s, ASK_REGEX, v, f, e))) return false;
    if ((v = given(so, "choice")) && !choice_ask(s, v, f, e)) return false;
    if ((v = given(so, "grammar")) && !(want_string(v, f, e) && add_ask(s, ASK_GBNF, v, f, e))) return false;
    if ((v = given(so, "json_object")) && cJSON_IsTrue(v) && !add_ask(s, ASK_JSON_OBJECT, NULL, f, e)) return false;
    /* What changes the language in ways the converters do not offer is refused, not ignored. */
    static const char *const refused[] = {"structural_tag", "whitespace_pattern"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (given(so, refused[i]))
            return openai_fail(e, 400, f, "unsupported_value", "structured_outputs.%s is not supported", refused[i]);
    if ((v = given(so, "disable_additional_properties")) && cJSON_IsTrue(v))
        return openai_fail(e, 400, f, "unsupported_value",
                           "structured_outputs.disable_additional_properties is not supported: say additionalProperties: false in the schema");
    return true;
}

static bool gather(const cJSON *root, asks *s, api_error *e) {
    const cJSON *v;
    if ((v = given(root, "response_format")) && !response_format_ask(s, v, e)) return false;
    if ((v = given(root, "guided_json")) && !schema_ask(s, v, "guided_json", e)) return false;
    if ((v = given(root, "json_schema")) && !schema_ask(s, v, "json_schema", e)) return false;
    if ((v = given(root, "guided_regex")) && !(want_string(v, "guided_regex", e) && add_ask(s, ASK_REGEX, v, "guided_regex", e)))
        return false;
    if ((v = given(root, "guided_choice")) && !choice_ask(s, v, "guided_choice", e)) return false;
    static const char *const gbnf_fields[] = {"guided_grammar", "grammar"};
    for (size_t i = 0; i < 2; i++)
        if ((v = given(root, gbnf_fields[i])) &&
            !(want_string(v, gbnf_fields[i], e) && add_ask(s, ASK_GBNF, v, gbnf_fields[i], e)))
            return false;
    if ((v = given(root, "structured_outputs")) && !structured_outputs_ask(s, v, e)) return false;
    if ((v = given(root, "guided_whitespace_pattern")))
        return openai_fail(e, 400, "guided_whitespace_pattern", "unsupported_value", "guided_whitespace_pattern is not supported");
    /* guided_decoding_backend picks vLLM's library; there is one engine here, so it changes nothing. */
    return true;
}

/* The ask as GBNF text. */
static bool to_gbnf(const ask *a, text_buf *out, api_error *e) {
    char msg[WK_ERRMSG_LEN] = "";
    bool ok = true;
    switch (a->kind) {
    case ASK_GBNF: ok = text_buf_add(out, a->value->valuestring, json_str_len(a->value)); break;
    case ASK_JSON_OBJECT: ok = json_object_gbnf(out); break;
    case ASK_SCHEMA:
        if (!schema_to_gbnf(a->value, out, msg, sizeof msg))
            return openai_fail(e, 400, a->field, "invalid_value", "%s: %s", a->field, msg[0] ? msg : "out of memory");
        break;
    case ASK_REGEX:
        if (!text_buf_add(out, "root ::= re\n", 12)) break;
        if (!regex_gbnf_rules(a->value->valuestring, json_str_len(a->value), "re", false, out, msg, sizeof msg))
            return openai_fail(e, 400, a->field, "invalid_value", "%s: %s", a->field, msg[0] ? msg : "out of memory");
        break;
    case ASK_CHOICE: {
        int n = cJSON_GetArraySize(a->value), i = 0;
        const char **strs = calloc((size_t)n, sizeof *strs);
        size_t *lens = calloc((size_t)n, sizeof *lens);
        const cJSON *c;
        if (strs && lens) cJSON_ArrayForEach(c, a->value) strs[i] = c->valuestring, lens[i++] = json_str_len(c);
        ok = strs && lens && choice_gbnf((const char *const *)strs, lens, n, out, msg, sizeof msg);
        free(strs), free(lens);
        if (!ok && msg[0]) return openai_fail(e, 400, a->field, "invalid_value", "%s: %s", a->field, msg);
        break;
    }
    }
    if (!ok || !out->p) return openai_fail(e, 500, NULL, NULL, "out of memory");
    return true;
}

bool structured_output_schema(const cJSON *schema, const char *field, wk_grammar **grammar, api_error *e) {
    *grammar = NULL;
    text_buf out = {0};
    char msg[WK_ERRMSG_LEN] = "";
    bool ok = to_gbnf(&(ask){ASK_SCHEMA, schema, field}, &out, e);
    wk_status st = ok ? wk_grammar_parse(out.p, out.len, grammar, msg, sizeof msg) : WK_OK;
    if (ok && st != WK_OK) ok = openai_fail(e, st == WK_ERR_NOMEM ? 500 : 400, field, "invalid_value", "%s: %s", field, msg);
    text_buf_free(&out);
    return ok;
}

bool structured_output_parse(const cJSON *root, wk_grammar **grammar, api_error *e) {
    *grammar = NULL;
    asks s = {0};
    text_buf out = {0};
    bool ok = gather(root, &s, e) && (s.n == 0 || to_gbnf(&s.a[0], &out, e));
    if (ok && s.n) {
        char msg[WK_ERRMSG_LEN] = "";
        wk_status st = wk_grammar_parse(out.p, out.len, grammar, msg, sizeof msg);
        if (st == WK_ERR_NOMEM) ok = openai_fail(e, 500, NULL, NULL, "out of memory");
        else if (st != WK_OK)
            /* the converters write valid GBNF; a client's own grammar is where this is expected */
            ok = openai_fail(e, 400, s.a[0].field, "invalid_value", "%s: %s", s.a[0].field, msg);
    }
    for (int i = 0; i < s.n_owned; i++) cJSON_Delete(s.owned[i]);
    text_buf_free(&out);
    return ok;
}

bool structured_output_answer_schema(const cJSON *root, cJSON **schema, const char **other, api_error *e) {
    *schema = NULL;
    *other = NULL;
    asks s = {0};
    bool ok = gather(root, &s, e);
    if (ok && s.n && s.a[0].kind == ASK_SCHEMA) {
        *schema = cJSON_Duplicate(s.a[0].value, true);
    } else if (ok && s.n && s.a[0].kind == ASK_JSON_OBJECT) {
        *schema = cJSON_CreateObject();
        if (*schema && !cJSON_AddStringToObject(*schema, "type", "object")) cJSON_Delete(*schema), *schema = NULL;
    } else if (ok && s.n) {
        *other = s.a[0].field;
    }
    if (ok && s.n && !*schema && !*other) ok = openai_fail(e, 500, NULL, NULL, "out of memory");
    for (int i = 0; i < s.n_owned; i++) cJSON_Delete(s.owned[i]);
    return ok;
}
