/* Logits edits before sampling and log-probabilities after: loops over one row of n_vocab floats
 * (262k for Gemma 3); the log-sum-exp is the engine's vector pass (wk_logsumexp), the rest plain
 * loops. */
#include "sched/logits.h"

#include <math.h>
#include <stdbool.h>

#include "wushkv/wushkv.h"

void logits_penalize(float *logits, const int32_t *prompt, int n_prompt, const int32_t *gen, int n_gen,
                     float presence, float frequency, float repetition, int last_n, int *scratch) {
    if (repetition != 1.0f && last_n != 0) {
        /* The window's start in prompt ++ gen: skip the tokens before the last last_n. */
        long skip = last_n < 0 ? 0 : (long)n_prompt + n_gen - last_n;
        if (skip < 0) skip = 0;
        /* scratch marks each token once so a token seen twice is penalised once. */
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *t = pass ? gen : prompt;
            int n = pass ? n_gen : n_prompt;
            int first = pass ? (skip > n_prompt ? (int)(skip - n_prompt) : 0) : (skip < n_prompt ? (int)skip : n_prompt);
            for (int i = first; i < n; i++) {
                if (scratch[t[i]]) continue;
                scratch[t[i]] = 1;
                float *l = &logits[t[i]];
                *l = *l > 0 ? *l / repetition : *l * repetition;
            }
        }
        for (int i = 0; i < n_prompt; i++) scratch[prompt[i]] = 0;
        for (int i = 0; i < n_gen; i++) scratch[gen[i]] = 0;
    }
    if (presence != 0.0f || frequency != 0.0f) {
        for (int i = 0; i < n_gen; i++) scratch[gen[i]]++;
        for (int i = 0; i < n_gen; i++) {
            int c = scratch[gen[i]];
            if (!c) continue; /* already applied for this token */
            logits[gen[i]] -= (float)c * frequency + presence;
            scratch[gen[i]] = 0;
        }
    }
}

void logits_bias(float *logits, int n_vocab, const int32_t *tokens, const float *values, int n) {
    for (int i = 0; i < n; i++)
        if (tokens[i] >= 0 && tokens[i] < n_vocab) logits[tokens[i]] += values[i];
}

void logits_mask(float *logits, int n_vocab, const int32_t *tokens, int n) {
    for (int i = 0; i < n; i++)
        if (tokens[i] >= 0 && tokens[i] < n_vocab) logits[tokens[i]] = -INFINITY;
}

void logits_ban_endings(float *logits, int n_vocab, const int32_t *ids, const int *end, int n_seqs, const int32_t *gen,
                        int n_gen) {
    for (int k = 0, at = 0; k < n_seqs; at = end[k++]) {
        const int len = end[k] - at;
        const int32_t last = ids[end[k] - 1];
        if (len - 1 > n_gen || last < 0 || last >= n_vocab) continue;
        bool match = true; /* the generated tokens end in the sequence's first len - 1 */
        for (int i = 0; i < len - 1 && match; i++) match = gen[n_gen - (len - 1) + i] == ids[at + i];
        if (match) logits[last] = -INFINITY;
    }
}

void logits_keep_only(float *logits, int n_vocab, const int32_t *sorted, int n) {
    int k = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (k < n && sorted[k] == i) k++;
        else logits[i] = -INFINITY;
    }
}

float logits_logprobs(const float *logits, int n_vocab, int32_t chosen, int *n_top, int32_t *top_tokens,
                      float *top_logprobs, int *rank) {
    if (rank) {
        const float c = logits[chosen];
        int above = 0;
        for (int i = 0; i < n_vocab; i++) above += logits[i] > c;
        *rank = 1 + above;
    }
    const float lse = wk_logsumexp(logits, n_vocab);
    /* Top n by insertion into a short sorted list: n <= 20, so this is one pass. Ties keep the
     * lower id first, as the sampler orders them. A masked token (-inf: allowed_token_ids, the
     * end-of-generation masks) is no alternative: it has no log-probability JSON can hold. */
    int have = 0, want = *n_top;
    for (int i = 0; i < n_vocab && want > 0; i++) {
        float v = logits[i];
        if (!(v > -INFINITY) || (have == want && v <= top_logprobs[have - 1])) continue;
        int j = have < want ? have++ : have - 1;
        while (j > 0 && top_logprobs[j - 1] < v) {
            top_logprobs[j] = top_logprobs[j - 1];
            top_tokens[j] = top_tokens[j - 1];
            j--;
        }
        top_logprobs[j] = v;
        top_tokens[j] = i;
    }
    for (int i = 0; i < have; i++) top_logprobs[i] -= lse;
    *n_top = have;
    return logits[chosen] - lse;
}

/* (logit, id) before another in the sampler's order. */
static bool ranks_before(const float *l, int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); }

/* Restores the min-heap (the worst of the kept at the root) below i. */
static void sift_down(const float *l, int32_t *h, int n, int i) {
    for (;;) {
        int a = 2 * i + 1, b = a + 1, w = i;
        if (a < n && ranks_before(l, h[w], h[a])) w = a;
        if (b < n && ranks_before(l, h[w], h[b])) w = b;
        if (w == i) return;
        int32_t t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

int logits_best(const float *logits, int n_vocab, int m, int32_t *ids) {
    int n = 0;
    for (int32_t i = 0; i < n_vocab && m > 0; i++) {
        if (!(logits[i] > -INFINITY)) continue;
        if (n < m) {
            ids[n++] = i;
            if (n == m)
                for (int j = m / 2 - 1; j >= 0; j--) sift_down(logits, ids, n, j);
        } else if (ranks_before(logits, i, ids[0])) {
            ids[0] = i;
            sift_down(logits, ids, n, 0);
        }
    }
    if (n < m) /* never became a heap: any order so far */
        for (int j = n / 2 - 1; j >= 0; j--) sift_down(logits, ids, n, j);
    /* heap sort: the worst goes to the end each time, leaving the best first */
    for (int end = n - 1; end > 0; end--) {
        int32_t t = ids[0];
        ids[0] = ids[end];
        ids[end] = t;
        sift_down(logits, ids, end, 0);
    }
    return n;
}
