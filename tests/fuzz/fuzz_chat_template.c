/* Fuzz target: chat-template rendering (server/api/chat_template.c): format detection from an
 * arbitrary template text and architecture name, and chat_render of arbitrary messages in every
 * format. Input: byte 0 picks the format, then messages separated by 0x1E, each a role byte and
 * its content (a C string: NUL ends it); the input as a template also gives the default system
 * text ChatML and Mistral v7 render with. Invariants: the plain ranges lie inside the prompt, in
 * order, without overlap, one per message holding its content exactly, in message order (Gemma
 * and Mistral (v1 too): a leading system message folded into the first user turn; Mistral v3 into
 * the last). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/chat_template.h"

#define FUZZ_CHECK(c)                                                                             \
    do {                                                                                          \
        if (!(c)) {                                                                               \
            fprintf(stderr, "fuzz_chat_template: invariant failed: %s (line %d)\n", #c, __LINE__); \
            abort();                                                                              \
        }                                                                                         \
    } while (0)

#define MAX_MSGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 1 << 16) return 0;
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;

    /* Detection: the whole input as a template, its tail as an architecture name. */
    chat_format d = chat_format_detect(s + 1, s + size / 2);
    FUZZ_CHECK(d >= CHAT_GEMMA && d < CHAT_FORMAT_COUNT);
    FUZZ_CHECK(strcmp(chat_format_name(d), "?") != 0);
    /* A default system text found in the input is a non-empty string (not bounded by the input:
     * a date the template computes may be longer than its format); it is the system turn of the
     * ChatML and Mistral v7 renderings below. */
    char *default_system = chat_default_system(s + 1, NULL);
    if (default_system) FUZZ_CHECK(default_system[0] != 0);

    static const char *const roles[] = {"system", "developer", "user", "assistant"};
    chat_format f = (chat_format)(data[0] % CHAT_FORMAT_COUNT);
    chat_msg msgs[MAX_MSGS];
    int n = 0;
    for (char *p = s + 1, *end = s + size; p < end && n < MAX_MSGS;) {
        char *sep = memchr(p, 0x1e, (size_t)(end - p));
        if (!sep) sep = end;
        *sep = 0;
        msgs[n].role = roles[(uint8_t)p[0] % 4];
        msgs[n].content = p + (p < sep ? 1 : 0);
        msgs[n].content_len = (size_t)(sep - msgs[n].content); /* NUL bytes included: they are text */
        n++;
        p = sep + 1;
    }

    wk_text_range *plain = NULL;
    int n_plain = -1;
    size_t len = 0;
    const chat_ending ending = (chat_ending)(data[0] / CHAT_FORMAT_COUNT % 3);
    char *out = chat_render_with(f, &(chat_extras){.default_system = default_system, .no_thinking = data[0] & 0x80}, msgs, n, ending, &len, &plain, &n_plain);
    if (out) {
        FUZZ_CHECK(out[len] == 0);
        FUZZ_CHECK(n_plain >= 0 && n_plain <= n);
        FUZZ_CHECK(n_plain == 0 || plain != NULL);
        /* The contents the ranges must hold, in order. Gemma and Mistral have no system turn: a
         * leading system message goes before the first user-side message's words (not at all
         * when none follows, as Gemma's own template drops it); Mistral v3 before the last's;
         * later messages in order. */
        const chat_msg *want[MAX_MSGS];
        int n_want = 0, i0 = 0, fold_at = -1;
        const chat_msg *sys = NULL;
        const bool to_last = f == CHAT_MISTRAL_V3 || f == CHAT_MISTRAL_V3_TEKKEN;
        bool folded = f == CHAT_GEMMA || f == CHAT_MISTRAL || f == CHAT_MISTRAL_V1 || to_last;
        if (folded && n > 0 && (!strcmp(msgs[0].role, "system") || !strcmp(msgs[0].role, "developer")))
            sys = &msgs[i0++];
        for (int i = i0; i < n; i++)
            if (strcmp(msgs[i].role, "assistant") != 0 && (fold_at < 0 || to_last)) fold_at = i;
        for (int i = i0; i < n; i++) {
            if (sys && i == fold_at) want[n_want++] = sys;
            want[n_want++] = &msgs[i];
        }
        FUZZ_CHECK(n_plain == n_want);
        size_t prev_end = 0;
        for (int i = 0; i < n_plain; i++) {
            FUZZ_CHECK(plain[i].off >= prev_end);
            FUZZ_CHECK(plain[i].off <= len && plain[i].len <= len - plain[i].off);
            prev_end = plain[i].off + plain[i].len;
            /* Gemma and Llama 3 (3.1, 3.2) trim each content's ASCII white space, as their templates do;
             * Mistral v3 an assistant's. */
            const char *w = want[i]->content;
            size_t wn = want[i]->content_len;
            if (f == CHAT_GEMMA || f == CHAT_LLAMA3 || f == CHAT_LLAMA3_1 || f == CHAT_LLAMA3_2 ||
                (f == CHAT_MISTRAL_V3 && !strcmp(want[i]->role, "assistant"))) {
                while (wn > 0 && strchr(" \t\n\r\v\f", w[0]) && w[0]) w++, wn--;
                while (wn > 0 && strchr(" \t\n\r\v\f", w[wn - 1]) && w[wn - 1]) wn--;
            }
            FUZZ_CHECK(wn == plain[i].len && memcmp(out + plain[i].off, w, plain[i].len) == 0);
        }
        /* A continued last assistant message ends the prompt: nothing after its words. */
        if (ending == CHAT_CONTINUE_LAST && n > 0 && !strcmp(msgs[n - 1].role, "assistant"))
            FUZZ_CHECK(n_plain > 0 && plain[n_plain - 1].off + plain[n_plain - 1].len == len);
        /* Only an opened reply ends with the assistant's opening (Mistral has none). */
        static const char *const opening[CHAT_FORMAT_COUNT] = {
            "<start_of_turn>model\n", "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|im_start|>assistant\n",
            "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|start_header_id|>assistant<|end_header_id|>\n\n",
            "", "", "", "", "", ""};
        const char *open = f == CHAT_CHATML && (data[0] & 0x80) ? "<|im_start|>assistant\n<think>\n\n</think>\n\n" : opening[f];
        const size_t ol = strlen(open);
        if (ol > 0 && len >= ol) {
            const bool opened = memcmp(out + len - ol, open, ol) == 0;
            if (ending == CHAT_OPEN_REPLY) FUZZ_CHECK(opened);
            else if (n_plain == 0 || plain[n_plain - 1].off + plain[n_plain - 1].len < len - ol) FUZZ_CHECK(!opened);
        }
        /* The default system turn opens a ChatML or Mistral v7 prompt whose first message is not a
         * system one. */
        const char *turn = f == CHAT_CHATML             ? "<|im_start|>system\n"
                           : f == CHAT_MISTRAL_V7        ? "[SYSTEM_PROMPT] "
                           : f == CHAT_MISTRAL_V7_TEKKEN ? "[SYSTEM_PROMPT]"
                                                         : NULL;
        if (turn && default_system &&
            (n == 0 || (strcmp(msgs[0].role, "system") != 0 && strcmp(msgs[0].role, "developer") != 0))) {
            const size_t dl = strlen(default_system), tl = strlen(turn);
            FUZZ_CHECK(len >= tl + dl && memcmp(out, turn, tl) == 0 && memcmp(out + tl, default_system, dl) == 0);
        }
    } else {
        FUZZ_CHECK(plain == NULL && n_plain == 0);
    }
    free(default_system);
    free(out);
    free(plain);
    free(s);
    return 0;
}
