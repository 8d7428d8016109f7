/* Chat formats rendered natively. Recognition looks for each family's control tokens in the
 * model's tokenizer.chat_template; the renderings follow those templates' output for plain text
 * messages (system folded into the first user turn where the family has no system role). */
#include "api/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/text_stream.h"

chat_format chat_format_detect(const char *t, const char *arch) {
    if (t) {
        if (strstr(t, "<start_of_turn>")) return CHAT_GEMMA;
        if (strstr(t, "<|start_header_id|>")) return CHAT_LLAMA3;
        if (strstr(t, "<|im_start|>")) return CHAT_CHATML;
        if (strstr(t, "[INST]")) return CHAT_MISTRAL;
    }
    /* Gemma GGUFs converted without a template (the default model is one) still expect Gemma's
     * turns: the vocabulary has <start_of_turn>. */
    if (arch && strncmp(arch, "gemma", 5) == 0) return CHAT_GEMMA;
    return CHAT_CHATML;
}

const char *chat_format_name(chat_format f) {
    switch (f) {
    case CHAT_GEMMA: return "gemma";
    case CHAT_LLAMA3: return "llama3";
    case CHAT_CHATML: return "chatml";
    case CHAT_MISTRAL: return "mistral";
    }
    return "?";
}

static bool is_system(const chat_msg *m) { return !strcmp(m->role, "system") || !strcmp(m->role, "developer"); }

static bool add(text_buf *b, const char *s) { return text_buf_add(b, s, strlen(s)); }

/* Gemma and Mistral have no system turn: their templates put the system text, then a blank
 * line, before the first user message. */
static bool render_folded(chat_format f, const chat_msg *msgs, int n, text_buf *b) {
    bool ok = true;
    const char *system = NULL;
    int i = 0;
    if (n > 0 && is_system(&msgs[0])) system = msgs[i++].content;
    for (; i < n; i++) {
        const chat_msg *m = &msgs[i];
        bool user = strcmp(m->role, "assistant") != 0;
        if (f == CHAT_GEMMA) {
            ok &= add(b, user ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
            if (system && user) {
                ok &= add(b, system) && add(b, "\n\n");
                system = NULL;
            }
            ok &= add(b, m->content) && add(b, "<end_of_turn>\n");
        } else if (user) {
            ok &= add(b, "[INST] ");
            if (system) {
                ok &= add(b, system) && add(b, "\n\n");
                system = NULL;
            }
            ok &= add(b, m->content) && add(b, " [/INST]");
        } else {
            ok &= add(b, m->content) && add(b, "</s>");
        }
    }
    if (f == CHAT_GEMMA) ok &= add(b, "<start_of_turn>model\n");
    return ok;
}

char *chat_render(chat_format f, const chat_msg *msgs, int n) {
    text_buf b = {0};
    bool ok = text_buf_add(&b, "", 0);
    switch (f) {
    case CHAT_GEMMA:
    case CHAT_MISTRAL: ok &= render_folded(f, msgs, n, &b); break;
    case CHAT_LLAMA3:
        for (int i = 0; i < n; i++)
            ok &= add(&b, "<|start_header_id|>") && add(&b, is_system(&msgs[i]) ? "system" : msgs[i].role) &&
                  add(&b, "<|end_header_id|>\n\n") && add(&b, msgs[i].content) && add(&b, "<|eot_id|>");
        ok &= add(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case CHAT_CHATML:
        for (int i = 0; i < n; i++)
            ok &= add(&b, "<|im_start|>") && add(&b, is_system(&msgs[i]) ? "system" : msgs[i].role) && add(&b, "\n") &&
                  add(&b, msgs[i].content) && add(&b, "<|im_end|>\n");
        ok &= add(&b, "<|im_start|>assistant\n");
        break;
    }
    if (!ok) {
        text_buf_free(&b);
        return NULL;
    }
    return b.p;
}
