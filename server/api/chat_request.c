/* Chat messages -> the prompt in the model's chat format: each message's text (string or text
 * parts), the roles OpenAI clients send (tool calls and results in tool_calls.c's format), how the
 * prompt ends (vLLM's add_generation_prompt / continue_final_message) and the template variables
 * vLLM's chat_template_kwargs may set. */
#include "api/chat_request.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "api/json_text.h"
#include "api/tool_calls.h"

/* Content: a string, or an array of {"type":"text","text":...} parts joined as they come. */
static bool message_text(const cJSON *content, int index, text_buf *out, api_error *e) {
    static char param[] = "messages";
    if (!content) return true; /* an assistant turn with only tool calls has none */
    if (cJSON_IsString(content)) return text_buf_add(out, content->valuestring, json_str_len(content));
    if (!cJSON_IsArray(content))
        return openai_fail(e, 400, param, "invalid_type", "messages[%d].content must be a string or an array of parts, not %s",
                    index, openai_type_name(content));
    if (cJSON_GetArraySize(content) == 0)
        return openai_fail(e, 400, param, "invalid_value", "messages[%d].content must not be an empty array", index);
    const cJSON *part;
    int j = 0;
    cJSON_ArrayForEach(part, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type))
            return openai_fail(e, 400, param, "invalid_type", "messages[%d].content[%d] must be an object with a type", index, j);
        if (!json_str_is(type, "text"))
            return openai_fail(e, 400, param, "unsupported_value",
                        "messages[%d].content[%d]: content parts of type '%s' are not supported (text only)", index, j,
                        type->valuestring);
        if (!cJSON_IsString(text))
            return openai_fail(e, 400, param, "invalid_type", "messages[%d].content[%d].text must be a string", index, j);
        if (!text_buf_add(out, text->valuestring, json_str_len(text)))
            return openai_fail(e, 500, NULL, NULL, "out of memory");
        j++;
    }
    return true;
}

/* vLLM's two switches for how a chat prompt ends: add_generation_prompt (default true: open the
 * assistant's reply) and continue_final_message (leave the last message, an assistant's, open so
 * the model continues it; vLLM refuses it with add_generation_prompt given true). */
static bool parse_chat_ending(const cJSON *root, const chat_msg *cm, int n, chat_ending *ending, api_error *e) {
    bool open_reply = true, continue_last = false;
    if (!openai_get_bool(root, "add_generation_prompt", &open_reply, e) ||
        !openai_get_bool(root, "continue_final_message", &continue_last, e))
        return false;
    if (continue_last && openai_field(root, "add_generation_prompt") && open_reply)
        return openai_fail(e, 400, "continue_final_message", "invalid_value",
                    "continue_final_message and add_generation_prompt cannot both be true");
    if (continue_last && strcmp(cm[n - 1].role, "assistant") != 0)
        return openai_fail(e, 400, "continue_final_message", "invalid_value",
                    "continue_final_message needs the last message to be the assistant's, not '%s'", cm[n - 1].role);
    *ending = continue_last ? CHAT_CONTINUE_LAST : open_reply ? CHAT_OPEN_REPLY : CHAT_NO_REPLY;
    return true;
}

/* Whether the template names `key` as a whole identifier (so a Jinja rendering would read it). */
static bool template_names(const char *t, const char *key) {
    const size_t n = strlen(key);
    for (const char *p = t && n ? strstr(t, key) : NULL; p; p = strstr(p + 1, key)) {
        const bool before = p > t && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
        const bool after = isalnum((unsigned char)p[n]) || p[n] == '_';
        if (!before && !after) return true;
    }
    return false;
}

/* vLLM's chat_template_kwargs: variables a Jinja template would read. Qwen 3's enable_thinking is
 * honoured; one the model's template reads otherwise cannot be (the template is not executed)
 * and is refused; one it does not name changes nothing in a Jinja rendering either, so none here. */
static bool parse_template_kwargs(const cJSON *root, const api_model *md, chat_extras *x, api_error *e) {
    const cJSON *kw = openai_field(root, "chat_template_kwargs"), *item;
    if (kw && !cJSON_IsObject(kw))
        return openai_fail(e, 400, "chat_template_kwargs", "invalid_type", "chat_template_kwargs must be an object, not %s",
                           openai_type_name(kw));
    cJSON_ArrayForEach(item, kw) {
        if (cJSON_IsNull(item)) continue;
        if (!strcmp(item->string, "enable_thinking") && md->chat_thinks) {
            if (!cJSON_IsBool(item))
                return openai_fail(e, 400, "chat_template_kwargs", "invalid_type",
                                   "chat_template_kwargs.enable_thinking must be a boolean, not %s", openai_type_name(item));
            x->no_thinking = cJSON_IsFalse(item);
        } else if (template_names(md->chat_template, item->string)) {
            return openai_fail(e, 400, "chat_template_kwargs", "unsupported_value",
                               "chat_template_kwargs.%.64s: the model's template reads it, but this server renders the "
                               "template's format natively and cannot apply it",
                               item->string);
        }
    }
    return true;
}

/* The conversation rendered in the model's format; tools_text (tool calling, NULL: none) goes after
 * the first system message's words, or is a system message of its own. */
bool chat_parse_messages(const cJSON *root, const api_model *md, const char *tools_text, gen_params *g, api_error *e) {
    const cJSON *msgs = openai_field(root, "messages");
    if (!msgs) return openai_fail(e, 400, "messages", "missing_required_parameter", "messages is required");
    if (!cJSON_IsArray(msgs)) return openai_fail(e, 400, "messages", "invalid_type", "messages must be an array, not %s", openai_type_name(msgs));
    int n = cJSON_GetArraySize(msgs);
    if (n == 0) return openai_fail(e, 400, "messages", "invalid_value", "messages must not be empty");
    const cJSON *first_role = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(msgs, 0), "role");
    const int shift = tools_text && !json_str_is(first_role, "system") && !json_str_is(first_role, "developer");
    n += shift;
    chat_msg *cm = calloc((size_t)n, sizeof *cm);
    text_buf *texts = calloc((size_t)n, sizeof *texts);
    bool ok = cm && texts;
    if (!ok) openai_fail(e, 500, NULL, NULL, "out of memory");
    if (ok && shift) cm[0] = (chat_msg){"system", tools_text, strlen(tools_text)};
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        if (!ok) break;
        text_buf *text = &texts[i + shift];
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m)) {
            ok = openai_fail(e, 400, "messages", "invalid_type", "messages[%d] must be an object, not %s", i, openai_type_name(m));
        } else if (!cJSON_IsString(role)) {
            ok = openai_fail(e, 400, "messages", "invalid_type", "messages[%d].role must be a string", i);
        } else if (!json_str_is(role, "system") && !json_str_is(role, "developer") && !json_str_is(role, "user") &&
                   !json_str_is(role, "assistant") && !json_str_is(role, "tool")) {
            ok = openai_fail(e, 400, "messages", "invalid_value",
                      "messages[%d].role '%.40s' is not supported (system, developer, user, assistant, tool)", i,
                      role->valuestring);
        } else if (!json_str_is(role, "assistant") && !openai_field(m, "content")) {
            /* An assistant turn may come without content (OpenAI's tool-call turns); the others say something. */
            ok = openai_fail(e, 400, "messages", "missing_required_parameter", "messages[%d].content is required for role '%s'", i,
                      role->valuestring);
        } else if (openai_field(m, "tool_calls") && !json_str_is(role, "assistant")) {
            ok = openai_fail(e, 400, "messages", "invalid_value", "messages[%d].tool_calls: only an assistant's turn makes calls", i);
        } else if (openai_field(m, "function_call")) {
            ok = openai_fail(e, 400, "messages", "unsupported_value",
                      "messages[%d].function_call: function calls are not supported", i);
        } else if (openai_field(m, "name") && !cJSON_IsString(openai_field(m, "name"))) {
            ok = openai_fail(e, 400, "messages", "invalid_type", "messages[%d].name must be a string, not %s", i,
                      openai_type_name(openai_field(m, "name")));
        } else if (json_str_is(role, "tool")) { /* a call's result, as the user's turn (tool_calls.c) */
            text_buf result = {0};
            ok = message_text(openai_field(m, "content"), i, &result, e) &&
                 tools_render_result(m, result.p ? result.p : "", result.len, i, text, e) && text_buf_add(text, "", 0);
            text_buf_free(&result);
            cm[i + shift] = (chat_msg){"user", text->p, text->len};
        } else {
            const cJSON *calls = openai_field(m, "tool_calls");
            ok = message_text(openai_field(m, "content"), i, text, e) &&
                 (!openai_asks_for_any(calls) || tools_render_calls(calls, i, text, e)) && text_buf_add(text, "", 0);
            cm[i + shift] = (chat_msg){role->valuestring, text->p, text->len}; /* text_buf: a NUL after, uncounted */
        }
        i++;
    }
    if (ok && tools_text && !shift) { /* after the first system message's own words */
        ok = (texts[0].len == 0 || text_buf_add(&texts[0], "\n\n", 2)) && text_buf_add(&texts[0], tools_text, strlen(tools_text)) &&
             text_buf_add(&texts[0], "", 0);
        if (!ok) openai_fail(e, 500, NULL, NULL, "out of memory");
        cm[0].content = texts[0].p;
        cm[0].content_len = texts[0].len;
    }
    chat_ending ending = CHAT_OPEN_REPLY;
    /* A default holding a date (Mistral Small 3.2's) is today's, not the day the server started. */
    char *dated_default = md->chat_default_dated ? chat_default_system(md->chat_template, NULL) : NULL;
    chat_extras extras = {.default_system = dated_default ? dated_default : md->chat_default_system};
    if (ok) ok = parse_chat_ending(root, cm, n, &ending, e) && parse_template_kwargs(root, md, &extras, e);
    if (ok) {
        g->prompt_text = chat_render_with(md->chat, &extras, cm, n, ending, &g->prompt_len, &g->plain, &g->n_plain);
        g->add_special = true;
        if (!g->prompt_text) ok = openai_fail(e, 500, NULL, NULL, "out of memory");
        /* Where the leading system messages' words end (every format renders messages' words in
         * their order, one plain range each): conversations that share the system prompt share
         * the prompt up to there, a prefix-cache snapshot point (sched_front.c). */
        int n_sys = 0;
        while (n_sys < n && (!strcmp(cm[n_sys].role, "system") || !strcmp(cm[n_sys].role, "developer"))) n_sys++;
        if (ok && n_sys > 0 && g->n_plain >= n_sys) g->system_end = g->plain[n_sys - 1].off + g->plain[n_sys - 1].len;
    }
    for (int k = 0; texts && k < n; k++) text_buf_free(&texts[k]);
    free(texts);
    free(cm);
    free(dated_default);
    return ok;
}

bool chat_last_reply_text(const cJSON *root, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    const cJSON *msgs = openai_field(root, "messages");
    const cJSON *last = cJSON_IsArray(msgs) ? cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1) : NULL;
    if (!last || !json_str_is(cJSON_GetObjectItemCaseSensitive(last, "role"), "assistant")) return true;
    text_buf t = {0};
    api_error unused;
    if (!message_text(openai_field(last, "content"), 0, &t, &unused) || !text_buf_add(&t, "", 0)) {
        text_buf_free(&t);
        return false; /* (the content was checked: only memory can fail) */
    }
    *out = t.p;
    *len = t.len;
    return true;
}
