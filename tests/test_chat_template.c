/* Chat formats (server/api/chat_template.c) against the models' own templates: which format a
 * template is recognised as, and the exact prompt each format renders for one conversation. The
 * expected prompts are the official templates' output, rendered by the Python jinja2 package as
 * Hugging Face transformers renders them (scripts/chat_peer_check.py --jinja; the templates of
 * Gemma 2, Llama 3.1 and 3.2, Qwen 3, Mistral Nemo, Mistral Small 3.2 and Mixtral from
 * llama.cpp's models/templates and Mistral's cookbook), minus the BOS text our tokenizer adds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/chat_template.h"
#include "test_util.h"

/* System, user, assistant (white space around its words), user (a trailing space). */
static const chat_msg k_conversation[] = {
    {"system", "Be brief.", 9},
    {"user", "Hi", 2},
    {"assistant", " Hello!\n", 8},
    {"user", "Name a colour. ", 15},
};

static void check_render(chat_format f, const chat_msg *msgs, int n, const char *want) {
    size_t len = 0;
    wk_text_range *plain = NULL;
    int n_plain = 0;
    char *got = chat_render(f, msgs, n, CHAT_OPEN_REPLY, &len, &plain, &n_plain);
    CHECK(got != NULL);
    if (!got) return;
    const bool same = len == strlen(want) && memcmp(got, want, len) == 0;
    CHECK(same);
    if (!same) fprintf(stderr, "  %s:\n    got  %s\n    want %s\n", chat_format_name(f), got, want);
    free(got);
    free(plain);
}

static void test_renderings(void) {
    const chat_msg *all = k_conversation, *no_system = k_conversation + 1;
    /* Gemma 2's template refuses a system message; Gemma 3's folds it into the first user turn. */
    check_render(CHAT_GEMMA, no_system, 3,
                 "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
                 "<start_of_turn>user\nName a colour.<end_of_turn>\n<start_of_turn>model\n");
    check_render(CHAT_LLAMA3_1, all, 4,
                 "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                 "Today Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user"
                 "<|end_header_id|>\n\nName a colour.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    /* Without a system message the dated system turn is still there, empty. */
    check_render(CHAT_LLAMA3_1, no_system, 1,
                 "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                 "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    /* Llama 3.2's date is the day's (strftime_now("%d %b %Y")). */
    char date[32], want[512];
    time_t now = time(NULL);
    struct tm tm;
    CHECK(localtime_r(&now, &tm) != NULL);
    strftime(date, sizeof date, "%d %b %Y", &tm);
    snprintf(want, sizeof want,
             "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: %s\n\n"
             "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
             "<|end_header_id|>\n\n",
             date);
    check_render(CHAT_LLAMA3_2, no_system, 1, want);
    check_render(CHAT_CHATML, all, 4,
                 "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                 " Hello!\n<|im_end|>\n<|im_start|>user\nName a colour. <|im_end|>\n<|im_start|>assistant\n");
    /* Mistral Nemo: the system text goes with the last user message. */
    check_render(CHAT_MISTRAL_V3_TEKKEN, all, 4, "[INST]Hi[/INST] Hello!\n</s>[INST]Be brief.\n\nName a colour. [/INST]");
    check_render(CHAT_MISTRAL_V7_TEKKEN, all, 4,
                 "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi[/INST] Hello!\n</s>[INST]Name a colour. [/INST]");
    /* Mixtral (v1): the system text goes with the first user message. */
    check_render(CHAT_MISTRAL_V1, all, 4, " [INST] Be brief.\n\nHi [/INST]  Hello!\n</s> [INST] Name a colour.  [/INST]");
    /* v3 and v7, from Mistral's cookbook (llama.cpp's renderings of them, but for v3's system text,
     * which the official templates put with the last user message): v3 trims the assistant's words. */
    check_render(CHAT_MISTRAL_V3, all, 4, "[INST] Hi[/INST] Hello!</s>[INST] Be brief.\n\nName a colour. [/INST]");
    check_render(CHAT_MISTRAL_V7, all, 4,
                 "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi[/INST]  Hello!\n</s>[INST] Name a colour. [/INST]");
}

/* Recognition from the strings each official template writes (short excerpts, quotes included). */
static void test_detection(void) {
    static const struct {
        const char *template_text, *arch;
        chat_format want;
    } cases[] = {
        {"{{ '<start_of_turn>' + role + '\\n' }}", "llama", CHAT_GEMMA},
        {NULL, "gemma3", CHAT_GEMMA},
        {NULL, "llama", CHAT_CHATML},
        {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}", "llama", CHAT_LLAMA3},
        {"{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: December 2023\\n\" }}"
         "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}",
         "llama", CHAT_LLAMA3_1},
        {"{%- set date_string = strftime_now(\"%d %b %Y\") %}{{- \"<|start_header_id|>system<|end_header_id|>\" }}"
         "{{- \"Cutting Knowledge Date: December 2023\\n\" }}{{- \"Today Date: \" + date_string }}",
         "llama", CHAT_LLAMA3_2},
        {"{{ '<|im_start|>' + message.role + '\\n' }}", "qwen2", CHAT_CHATML},
        {"{{ '[INST] ' + message['content'] + ' [/INST]' }}", "llama", CHAT_MISTRAL},
        {"{{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}", "llama", CHAT_MISTRAL_V1},
        {"{{- \"[AVAILABLE_TOOLS] [\" }}{{- \"[INST] \" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}",
         "llama", CHAT_MISTRAL_V3},
        {"{{- \"[AVAILABLE_TOOLS][\" }}{{- \"[INST]\" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}",
         "llama", CHAT_MISTRAL_V3_TEKKEN},
        {"{{- '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{{- '[INST] ' + message['content'] + '[/INST]' }}",
         "llama", CHAT_MISTRAL_V7},
        {"{{- '[SYSTEM_PROMPT]' + system_prompt + '[/SYSTEM_PROMPT]' }}{{- '[INST]' }}{{- '[/INST]' }}", "llama",
         CHAT_MISTRAL_V7_TEKKEN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        chat_format got = chat_format_detect(cases[i].template_text, cases[i].arch);
        CHECK_EQ_INT(got, cases[i].want);
        if (got != cases[i].want)
            fprintf(stderr, "  case %zu: %s, want %s\n", i, chat_format_name(got), chat_format_name(cases[i].want));
    }
}

/* A ChatML template's own system turn (Qwen 2.5's) for conversations without one. */
static void test_default_system(void) {
    static const char qwen25[] =
        "{%- if messages[0]['role'] == 'system' %}\n"
        "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
        "    {%- else %}\n"
        "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        "<|im_end|>\\n' }}\n"
        "    {%- endif %}";
    bool dated = true;
    char *d = chat_default_system(qwen25, &dated);
    CHECK(d && !strcmp(d, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.") && !dated);
    /* The template's rendering of a conversation without a system message (jinja2, as above). */
    size_t len = 0;
    wk_text_range *plain = NULL;
    int n_plain = 0;
    char *got = chat_render_with(CHAT_CHATML, &(chat_extras){.default_system = d}, k_conversation + 1, 1, CHAT_OPEN_REPLY, &len, &plain, &n_plain);
    CHECK(got && !strcmp(got, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                              "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    CHECK(n_plain == 1); /* the default is the template's text, not a user's words */
    free(got);
    free(plain);
    /* With a system message the default stays out. */
    got = chat_render_with(CHAT_CHATML, &(chat_extras){.default_system = d}, k_conversation, 2, CHAT_OPEN_REPLY, &len, &plain, &n_plain);
    CHECK(got && !strstr(got, "Qwen"));
    free(got);
    free(plain);
    free(d);
    /* Computed turns and unterminated literals are not defaults; escapes are undone. */
    CHECK(chat_default_system("{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}", NULL) == NULL);
    CHECK(chat_default_system("{{- '<|im_start|>system\\nYou are {{ name }}.<|im_end|>\\n' }}", NULL) == NULL);
    CHECK(chat_default_system("'<|im_start|>system\\nunterminated", NULL) == NULL);
    CHECK(chat_default_system(NULL, NULL) == NULL);
    d = chat_default_system("{{ \"<|im_start|>system\\nYou\\'re \\\"here\\\".\\tOk<|im_end|>\\n\" }}", NULL);
    CHECK(d && !strcmp(d, "You're \"here\".\tOk"));
    free(d);
    /* Mistral Small 3.2's form: literals joined with the date it sets from strftime_now. */
    char date[32], want[256];
    time_t now = time(NULL);
    struct tm tm;
    CHECK(localtime_r(&now, &tm) != NULL);
    strftime(date, sizeof date, "%Y-%m-%d", &tm);
    d = chat_default_system("{%- set today = strftime_now(\"%Y-%m-%d\") %}\n{%- set default_system_message = \"You are "
                            "M.\\nThe current date is \" + today + \".\" %}\n{{- bos_token }}", &dated);
    snprintf(want, sizeof want, "You are M.\nThe current date is %s.", date);
    CHECK(d && !strcmp(d, want) && dated); /* dated: the server computes it again for each prompt */
    if (d) {
        got = chat_render_with(CHAT_MISTRAL_V7_TEKKEN, &(chat_extras){.default_system = d}, k_conversation + 1, 1, CHAT_OPEN_REPLY, &len, &plain, &n_plain);
        snprintf(want, sizeof want, "[SYSTEM_PROMPT]You are M.\nThe current date is %s.[/SYSTEM_PROMPT][INST]Hi[/INST]", date);
        CHECK(got && !strcmp(got, want));
        free(got);
        free(plain);
    }
    free(d);
    /* Ministral 3's and Devstral's: one literal; a variable the template does not set: none. */
    d = chat_default_system("{%- set default_system_message = 'Think first.\\n\\nThen answer.' %}", NULL);
    CHECK(d && !strcmp(d, "Think first.\n\nThen answer."));
    free(d);
    CHECK(chat_default_system("{%- set default_system_message = 'a' + name %}", NULL) == NULL);
}

/* Qwen 3's enable_thinking false: an empty think block opens the reply (its template, jinja2). */
static void test_no_thinking(void) {
    static const char qwen3[] = "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n"
                                "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
                                "        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}\n{%- endif %}";
    CHECK(chat_template_thinks(qwen3));
    CHECK(!chat_template_thinks("{{- '<|im_start|>assistant\\n' }}") && !chat_template_thinks(NULL));
    size_t len = 0;
    wk_text_range *plain = NULL;
    int n_plain = 0;
    char *got = chat_render_with(CHAT_CHATML, &(chat_extras){.no_thinking = true}, k_conversation + 1, 1,
                                 CHAT_OPEN_REPLY, &len, &plain, &n_plain);
    CHECK(got && !strcmp(got, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    free(got);
    free(plain);
    /* Only an opened reply gets it. */
    got = chat_render_with(CHAT_CHATML, &(chat_extras){.no_thinking = true}, k_conversation + 1, 1, CHAT_NO_REPLY, &len,
                           &plain, &n_plain);
    CHECK(got && !strstr(got, "<think>"));
    free(got);
    free(plain);
}

int main(void) {
    test_renderings();
    test_no_thinking();
    test_default_system();
    test_detection();
    TEST_MAIN_END();
}
