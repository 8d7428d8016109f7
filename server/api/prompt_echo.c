/* The prompt sent back with a completion, from its EV_PROMPT (sched/prompt_score.c): OpenAI's echo
 * on completions (the prompt's text before the choice's, its tokens first in the legacy logprobs
 * arrays, the first with null: what evaluation harnesses read to score a text), and vLLM's
 * prompt_logprobs (per completion choice; on chat, the response's). Chat's echo (vLLM's: the last
 * reply's words) needs no event: api.c sends it when the choice opens. */
#include "api/api_int.h"

#include <stdlib.h>
#include <string.h>

#include "api/json_text.h"

/* vLLM's prompt_logprobs: null for the first token, then for each one {"<id>": {logprob, rank,
 * decoded_token}}, the prompt's token first, then the `top` most likely (once each). */
static cJSON *prompt_logprobs_list(const sched_event *ev, int top) {
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; i < ev->n_logprobs; i++) {
        const token_logprob *lp = &ev->logprobs[i];
        if (lp->unscored) {
            cJSON_AddItemToArray(list, cJSON_CreateNull());
            continue;
        }
        cJSON *entry = cJSON_CreateObject();
        for (int j = -1; j < top && j < lp->n_top; j++) {
            const int32_t tok = j < 0 ? lp->token : lp->top_token[j];
            char key[16];
            snprintf(key, sizeof key, "%d", (int)tok);
            if (cJSON_GetObjectItemCaseSensitive(entry, key)) continue; /* the prompt's token among the best */
            cJSON *o = cJSON_AddObjectToObject(entry, key);
            /* -9999 stands for a probability of 0, as vLLM writes it (JSON has no -Infinity). */
            const float v = j < 0 ? lp->logprob : lp->top_logprob[j];
            cJSON_AddNumberToObject(o, "logprob", v > -9999.0f ? v : -9999.0f);
            cJSON_AddNumberToObject(o, "rank", j < 0 ? lp->rank : j + 1);
            cJSON_AddItemToObject(o, "decoded_token",
                                  j < 0 ? token_json_string(lp->piece, lp->piece_len)
                                        : token_json_string(lp->top_piece[j], lp->top_piece_len[j]));
        }
        cJSON_AddItemToArray(list, entry);
    }
    return list;
}

/* The prompt's text: a text prompt's own (kept at the request), else its tokens' (a token
 * prompt's, control tokens as their text, as /detokenize gives them). */
static void prompt_text(const choice *ci, const sched_event *ev, text_buf *out) {
    if (ci->echo.len) {
        text_buf_add(out, ci->echo.p, ci->echo.len);
        return;
    }
    text_buf bytes = {0};
    for (int i = 0; i < ev->n_logprobs; i++)
        if (!ev->logprobs[i].textless) text_buf_add(&bytes, ev->logprobs[i].piece, (size_t)ev->logprobs[i].piece_len);
    size_t n = 0;
    char *t = token_bytes_utf8(bytes.p ? bytes.p : "", bytes.len, &n); /* pieces joined first: a character split between byte tokens */
    if (t) text_buf_add(out, t, n);
    free(t);
    text_buf_free(&bytes);
}

cJSON *prompt_echo_event(call *k, int i, const sched_event *ev, bool role) {
    choice *ci = &k->choices[i];
    const bool chat = k->kind != CALL_COMPLETION;
    cJSON *plp = k->prompt_logprobs >= 0 ? prompt_logprobs_list(ev, k->prompt_logprobs) : NULL;
    text_buf text = {0};
    cJSON *lp = NULL;
    if (!chat && k->prompt_echo) {
        prompt_text(ci, ev, &text);
        if (k->echo_logprobs >= 0) { /* the legacy arrays, the prompt's entries first */
            size_t off = 0;
            lp = completion_logprobs_new();
            completion_logprobs_add(lp, ev->logprobs, ev->n_logprobs, k->echo_logprobs, k->tokens_as_ids, &off);
        }
        /* The completion's own tokens' offsets follow the prompt's text. */
        ci->text_off = json_utf8_chars(text.p ? text.p : "", text.len);
    }
    cJSON *chunk = NULL;
    if (!k->stream) { /* the choice's first event (a chat's text began with its echo already) */
        if (text.len) text_buf_add(&ci->text, text.p, text.len);
        if (lp) cJSON_Delete(ci->lp), ci->lp = lp;
        if (plp) cJSON_Delete(ci->prompt_lp), ci->prompt_lp = plp;
    } else if (k->started && (text.len || lp || plp)) {
        chunk = role ? stream_chunk(k, i, "", 0, NULL, NULL, true)
                     : stream_chunk(k, i, chat ? NULL : text.p ? text.p : "", text.len, NULL, NULL, false);
        cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(chunk, "choices"), 0);
        if (lp) cJSON_ReplaceItemInObjectCaseSensitive(ch, "logprobs", lp);
        /* A completion's prompt_logprobs in its choice (vLLM's stream); a chat's on the chunk, as on its response. */
        if (plp) cJSON_AddItemToObject(chat ? chunk : ch, "prompt_logprobs", plp);
    } else {
        cJSON_Delete(lp);
        cJSON_Delete(plp);
    }
    text_buf_free(&text);
    return chunk;
}

void prompt_echo_whole(call *k, cJSON *response) {
    if (k->prompt_logprobs < 0) return;
    cJSON *choices = cJSON_GetObjectItemCaseSensitive(response, "choices");
    for (int i = 0; i < k->n_choices; i++) {
        cJSON *plp = k->choices[i].prompt_lp ? k->choices[i].prompt_lp : cJSON_CreateNull();
        k->choices[i].prompt_lp = NULL;
        if (k->kind == CALL_COMPLETION) cJSON_AddItemToObject(cJSON_GetArrayItem(choices, i), "prompt_logprobs", plp);
        else if (i == 0) cJSON_AddItemToObject(response, "prompt_logprobs", plp);
        else cJSON_Delete(plp);
    }
}
