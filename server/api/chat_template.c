/* Chat formats rendered natively. Recognition looks for each family's control tokens in the
 * model's tokenizer.chat_template; the renderings follow those templates' output for plain text
 * messages (system folded into a user turn where the family has no system role; content trimmed
 * where the template trims it). */
#include "api/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched/text_stream.h"

/* Which of Mistral's template generations an [INST] template is, by the strings its official
 * templates write (as llama.cpp tells them apart): v7 has [SYSTEM_PROMPT], v1 and v3 list
 * [AVAILABLE_TOOLS] or write v1's ' [INST] ' + system_message; spaces around the tags tell the
 * tekken tokenizer's templates from the others. llama.cpp calls every [SYSTEM_PROMPT] template v7;
 * Mistral Small 3.x's writes '[INST]' without the space, the tekken form, so we look. */
static chat_format mistral_variant(const char *t) {
    if (strstr(t, "[SYSTEM_PROMPT]"))
        return strstr(t, "[SYSTEM_PROMPT] ") || strstr(t, "[INST] ") ? CHAT_MISTRAL_V7 : CHAT_MISTRAL_V7_TEKKEN;
    if (strstr(t, "' [INST] ' + system_message") || strstr(t, "[AVAILABLE_TOOLS]")) {
        if (strstr(t, " [INST]")) return CHAT_MISTRAL_V1;
        if (strstr(t, "\"[INST]\"")) return CHAT_MISTRAL_V3_TEKKEN;
        return CHAT_MISTRAL_V3;
    }
    return CHAT_MISTRAL;
}

chat_format chat_format_detect(const char *t, const char *arch) {
    if (t) {
        if (strstr(t, "<start_of_turn>")) return CHAT_GEMMA;
        if (strstr(t, "<|start_header_id|>")) {
            if (!strstr(t, "Cutting Knowledge Date: December 2023") || !strstr(t, "Today Date: ")) return CHAT_LLAMA3;
            return strstr(t, "strftime_now") ? CHAT_LLAMA3_2 : CHAT_LLAMA3_1;
        }
        if (strstr(t, "<|im_start|>")) return CHAT_CHATML;
        if (strstr(t, "[INST]")) return mistral_variant(t);
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
    case CHAT_LLAMA3_1: return "llama3.1";
    case CHAT_LLAMA3_2: return "llama3.2";
    case CHAT_CHATML: return "chatml";
    case CHAT_MISTRAL: return "mistral";
    case CHAT_MISTRAL_V1: return "mistral-v1";
    case CHAT_MISTRAL_V3: return "mistral-v3";
    case CHAT_MISTRAL_V3_TEKKEN: return "mistral-v3-tekken";
    case CHAT_MISTRAL_V7: return "mistral-v7";
    case CHAT_MISTRAL_V7_TEKKEN: return "mistral-v7-tekken";
    case CHAT_FORMAT_COUNT: break;
    }
    return "?";
}

static bool is_system(const chat_msg *m) { return !strcmp(m->role, "system") || !strcmp(m->role, "developer"); }

static bool add(text_buf *b, const char *s) { return text_buf_add(b, s, strlen(s)); }

/* The rendering so far and where the messages' own words are in it. */
typedef struct render {
    text_buf b;
    wk_text_range *plain;
    int n_plain, cap_plain;
} render;

/* Template text: control tokens in it are meant. */
static bool tmpl(render *r, const char *s) { return add(&r->b, s); }

/* A message's words (n bytes, NULs included): recorded as a plain range. */
static bool words(render *r, const char *s, size_t n) {
    if (r->n_plain == r->cap_plain) {
        int cap = r->cap_plain ? 2 * r->cap_plain : 8;
        wk_text_range *p = realloc(r->plain, (size_t)cap * sizeof *p);
        if (!p) return false;
        r->plain = p;
        r->cap_plain = cap;
    }
    r->plain[r->n_plain++] = (wk_text_range){r->b.len, n};
    return text_buf_add(&r->b, s, n);
}

/* Gemma's and Llama 3's templates write a message's content trimmed (Jinja's `| trim`; llama.cpp's
 * own renderings trim the same ASCII white space): so must we, or a message ending in a newline
 * is another prompt here than there. */
static bool trims(chat_format f, const char *role) {
    return f == CHAT_GEMMA || f == CHAT_LLAMA3 || f == CHAT_LLAMA3_1 || f == CHAT_LLAMA3_2 ||
           (f == CHAT_MISTRAL_V3 && !strcmp(role, "assistant"));
}
static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static bool message_words(render *r, chat_format f, const chat_msg *m) {
    const char *s = m->content;
    size_t n = m->content_len;
    if (trims(f, m->role)) {
        while (n > 0 && is_blank(s[0])) s++, n--;
        while (n > 0 && is_blank(s[n - 1])) n--;
    }
    return words(r, s, n);
}

/* A message's turn closes unless it is the last, an assistant's, left open to be continued. */
static bool closes(const chat_msg *msgs, int n, int i, chat_ending ending) {
    return !(ending == CHAT_CONTINUE_LAST && i == n - 1 && !strcmp(msgs[i].role, "assistant"));
}

/* Gemma and Mistral have no system turn: their templates put the system text, then a blank
 * line, before the first user message. */
static bool render_folded(chat_format f, const chat_msg *msgs, int n, chat_ending ending, render *r) {
    bool ok = true;
    const chat_msg *system = NULL;
    int i = 0;
    if (n > 0 && is_system(&msgs[0])) system = &msgs[i++];
    for (; i < n; i++) {
        const chat_msg *m = &msgs[i];
        bool user = strcmp(m->role, "assistant") != 0;
        if (f == CHAT_GEMMA) {
            ok &= tmpl(r, user ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
            if (system && user) {
                ok &= message_words(r, f, system) && tmpl(r, "\n\n");
                system = NULL;
            }
            ok &= message_words(r, f, m);
            if (closes(msgs, n, i, ending)) ok &= tmpl(r, "<end_of_turn>\n");
        } else if (user) {
            ok &= tmpl(r, "[INST] ");
            if (system) {
                ok &= message_words(r, f, system) && tmpl(r, "\n\n");
                system = NULL;
            }
            ok &= message_words(r, f, m) && tmpl(r, " [/INST]");
        } else {
            ok &= message_words(r, f, m);
            if (closes(msgs, n, i, ending)) ok &= tmpl(r, "</s>");
        }
    }
    /* (Mistral's reply needs no opening: the model answers after [/INST].) */
    if (f == CHAT_GEMMA && ending == CHAT_OPEN_REPLY) ok &= tmpl(r, "<start_of_turn>model\n");
    return ok;
}

/* Mistral's v1 and v3 generations (its cookbook's templates): no system role; the system text,
 * then a blank line, goes inside a user turn: v1's first, v3's last (the official v3 templates
 * write it with the conversation's final message, later ones with the last user message even when
 * an assistant message follows, as here, so it is not lost). v7 has a system turn of its own. The
 * spaces: v1 " [INST] x [/INST] y</s>", v3 "[INST] x[/INST] y</s>" (y trimmed), v3-tekken
 * "[INST]x[/INST]y</s>", v7 "[SYSTEM_PROMPT] s[/SYSTEM_PROMPT][INST] x[/INST] y</s>", v7-tekken
 * the same without spaces. */
static bool render_mistral(chat_format f, const char *default_system, const chat_msg *msgs, int n, chat_ending ending,
                           render *r) {
    const bool v7 = f == CHAT_MISTRAL_V7 || f == CHAT_MISTRAL_V7_TEKKEN;
    const char *open = f == CHAT_MISTRAL_V1 ? " [INST] " : f == CHAT_MISTRAL_V3 || f == CHAT_MISTRAL_V7 ? "[INST] " : "[INST]";
    const char *close = f == CHAT_MISTRAL_V1 ? " [/INST]" : "[/INST]";
    const char *reply = f == CHAT_MISTRAL_V3_TEKKEN || f == CHAT_MISTRAL_V7_TEKKEN ? "" : " ";
    const chat_msg *system = NULL;
    int i = 0, system_at = -1;
    if (!v7 && n > 0 && is_system(&msgs[0])) system = &msgs[i++];
    for (int j = i; j < n; j++)
        if (strcmp(msgs[j].role, "assistant") != 0 && (system_at < 0 || f != CHAT_MISTRAL_V1)) system_at = j;
    bool ok = true;
    if (v7 && default_system && (n == 0 || !is_system(&msgs[0])))
        ok &= tmpl(r, f == CHAT_MISTRAL_V7 ? "[SYSTEM_PROMPT] " : "[SYSTEM_PROMPT]") && tmpl(r, default_system) &&
              tmpl(r, "[/SYSTEM_PROMPT]");
    for (; i < n; i++) {
        const chat_msg *m = &msgs[i];
        if (v7 && is_system(m)) {
            ok &= tmpl(r, f == CHAT_MISTRAL_V7 ? "[SYSTEM_PROMPT] " : "[SYSTEM_PROMPT]") && message_words(r, f, m) &&
                  tmpl(r, "[/SYSTEM_PROMPT]");
        } else if (strcmp(m->role, "assistant") != 0) {
            ok &= tmpl(r, open);
            if (system && i == system_at) ok &= message_words(r, f, system) && tmpl(r, "\n\n");
            ok &= message_words(r, f, m) && tmpl(r, close);
        } else {
            ok &= tmpl(r, reply) && message_words(r, f, m);
            if (closes(msgs, n, i, ending)) ok &= tmpl(r, "</s>");
        }
    }
    return ok; /* the model answers after [/INST]: no reply opening */
}

/* Undoes Jinja's (Python's) string escapes in the n bytes at s, appending to b. */
static bool unescape(text_buf *b, const char *s, size_t n) {
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        char c = s[i];
        if (c == '\\' && i + 1 < n) c = s[++i] == 'n' ? '\n' : s[i] == 't' ? '\t' : s[i];
        ok = text_buf_add(b, &c, 1);
    }
    return ok;
}

/* The quoted literal at *p (its quote first): its end after the closing quote, or NULL. */
static const char *literal_end(const char *p) {
    const char q = *p;
    if (q != '\'' && q != '"') return NULL;
    for (p++; *p && *p != q; p += *p == '\\' && p[1] ? 2 : 1) {}
    return *p == q ? p + 1 : NULL;
}

/* ChatML: a whole quoted literal '<|im_start|>system\n...<|im_end|>\n' (Qwen 2, 2.5). */
static bool chatml_default(const char *t, text_buf *out) {
    static const char open[] = "<|im_start|>system\\n", close[] = "<|im_end|>\\n";
    for (const char *p = strstr(t, open); p; p = strstr(p + 1, open)) {
        const char *end = p > t ? literal_end(p - 1) : NULL;
        /* the literal is the turn and nothing else: no {{ }} inside, its close right before the quote */
        if (!end || end - 1 - (p + sizeof open - 1) <= (ptrdiff_t)(sizeof close - 1) ||
            strncmp(end - sizeof close, close, sizeof close - 1) != 0)
            continue;
        const char *text = p + sizeof open - 1, *text_end = end - sizeof close;
        if (memchr(text, '{', (size_t)(text_end - text))) continue;
        return unescape(out, text, (size_t)(text_end - text));
    }
    return false;
}

static const char *skip_blanks(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* A date a template computes with {% set NAME = strftime_now("FMT") %}, as its rendering would now. */
static bool strftime_variable(const char *t, const char *name, size_t name_len, text_buf *out, bool *dated) {
    char pattern[80];
    snprintf(pattern, sizeof pattern, "set %.*s = strftime_now(", (int)name_len, name);
    const char *p = strstr(t, pattern);
    const char *fmt_end = p ? literal_end(p + strlen(pattern)) : NULL;
    if (!fmt_end) return false;
    char fmt[64], date[128];
    const char *f = p + strlen(pattern) + 1;
    snprintf(fmt, sizeof fmt, "%.*s", (int)(fmt_end - 1 - f), f);
    time_t now = time(NULL);
    struct tm tm;
    size_t n = localtime_r(&now, &tm) ? strftime(date, sizeof date, fmt, &tm) : 0;
    *dated = true;
    return n > 0 && text_buf_add(out, date, n);
}

/* Mistral's v7 templates: {% set default_system_message = 'a' + today + 'b' %}, literals joined
 * with variables the template sets from strftime_now (Small 3.2's date). */
static bool mistral_default(const char *t, text_buf *out, bool *dated) {
    static const char set[] = "set default_system_message =";
    const char *p = strstr(t, set);
    if (!p) return false;
    for (p = skip_blanks(p + sizeof set - 1);; p = skip_blanks(p + 1)) {
        const char *end = literal_end(p);
        if (end) {
            if (!unescape(out, p + 1, (size_t)(end - 1 - (p + 1)))) return false;
        } else {
            size_t n = 0;
            while (p[n] == '_' || (p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z')) n++;
            if (n == 0 || !strftime_variable(t, p, n, out, dated)) return false;
            end = p + n;
        }
        p = skip_blanks(end);
        if (*p != '+') return p[0] == '%' || p[0] == '-';
    }
}

char *chat_default_system(const char *t, bool *dated) {
    text_buf b = {0};
    bool has_date = false;
    bool ok = t && (chatml_default(t, &b) || (b.len = 0, mistral_default(t, &b, &has_date))) && b.len > 0 &&
              text_buf_add(&b, "", 0);
    if (dated) *dated = ok && has_date;
    if (!ok) text_buf_free(&b);
    return ok ? b.p : NULL;
}

char *chat_render(chat_format f, const chat_msg *msgs, int n, chat_ending ending, size_t *len, wk_text_range **plain,
                  int *n_plain) {
    return chat_render_with(f, NULL, msgs, n, ending, len, plain, n_plain);
}

bool chat_template_thinks(const char *t) {
    return t && strstr(t, "enable_thinking is false") && strstr(t, "<think>\\n\\n</think>\\n\\n");
}

char *chat_render_with(chat_format f, const chat_extras *x, const chat_msg *msgs, int n, chat_ending ending, size_t *len,
                       wk_text_range **plain, int *n_plain) {
    const char *default_system = x ? x->default_system : NULL;
    render r = {0};
    bool ok = text_buf_add(&r.b, "", 0);
    const bool open_reply = ending == CHAT_OPEN_REPLY;
    switch (f) {
    case CHAT_GEMMA:
    case CHAT_MISTRAL: ok &= render_folded(f, msgs, n, ending, &r); break;
    case CHAT_MISTRAL_V1:
    case CHAT_MISTRAL_V3:
    case CHAT_MISTRAL_V3_TEKKEN:
    case CHAT_MISTRAL_V7:
    case CHAT_MISTRAL_V7_TEKKEN: ok &= render_mistral(f, default_system, msgs, n, ending, &r); break;
    case CHAT_FORMAT_COUNT: ok = false; break;
    case CHAT_LLAMA3_1:
    case CHAT_LLAMA3_2:
    case CHAT_LLAMA3: {
        int i = 0;
        if (f != CHAT_LLAMA3) { /* the dated system turn, holding the system message when there is one */
            char date[32] = "26 Jul 2024";
            time_t now = time(NULL);
            struct tm tm;
            if (f == CHAT_LLAMA3_2 && localtime_r(&now, &tm)) strftime(date, sizeof date, "%d %b %Y", &tm);
            ok &= tmpl(&r, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                           "Today Date: ") &&
                  tmpl(&r, date) && tmpl(&r, "\n\n");
            if (n > 0 && is_system(&msgs[0])) ok &= message_words(&r, f, &msgs[i++]);
            ok &= tmpl(&r, "<|eot_id|>");
        }
        for (; i < n; i++) {
            ok &= tmpl(&r, "<|start_header_id|>") && tmpl(&r, is_system(&msgs[i]) ? "system" : msgs[i].role) &&
                  tmpl(&r, "<|end_header_id|>\n\n") && message_words(&r, f, &msgs[i]);
            if (closes(msgs, n, i, ending)) ok &= tmpl(&r, "<|eot_id|>");
        }
        if (open_reply) ok &= tmpl(&r, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    }
    case CHAT_CHATML:
        if (default_system && (n == 0 || !is_system(&msgs[0])))
            ok &= tmpl(&r, "<|im_start|>system\n") && tmpl(&r, default_system) && tmpl(&r, "<|im_end|>\n");
        for (int i = 0; i < n; i++) {
            ok &= tmpl(&r, "<|im_start|>") && tmpl(&r, is_system(&msgs[i]) ? "system" : msgs[i].role) &&
                  tmpl(&r, "\n") && message_words(&r, f, &msgs[i]);
            if (closes(msgs, n, i, ending)) ok &= tmpl(&r, "<|im_end|>\n");
        }
        if (open_reply) ok &= tmpl(&r, "<|im_start|>assistant\n");
        if (open_reply && x && x->no_thinking) ok &= tmpl(&r, "<think>\n\n</think>\n\n");
        break;
    }
    if (!ok) {
        text_buf_free(&r.b);
        free(r.plain);
        *plain = NULL;
        *n_plain = 0;
        *len = 0;
        return NULL;
    }
    *len = r.b.len;
    *plain = r.plain;
    *n_plain = r.n_plain;
    return r.b.p;
}
