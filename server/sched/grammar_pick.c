/* Sampling under a grammar (grammar_pick.h). Masking all 262144 tokens of a vocabulary costs
 * 10-40 ms a step on a CPU, so two exact shortcuts come first. A sampler that keeps its top k
 * (greedy: k = 1) only ever sees the k best allowed tokens, which checking the best tokens one by
 * one finds; a sampler that truncates nothing (temperature alone) gives, from a draw kept only when
 * allowed, exactly the restricted distribution (rejection sampling; the mask after a few refusals
 * is an independent draw from it). Top-p and min-p depend on the whole allowed mass: masked. */
#include "sched/grammar_pick.h"

#include <math.h>

#include "sched/logits.h"

#define SCAN 256       /* best tokens checked for the top-k route */
#define SCAN_MAX_K 64  /* larger top_k: masked */
#define DRAWS 3        /* each a pass over the row (a few ms); in a wide-open state the first is nearly always kept */

int32_t grammar_pick(wk_matcher *m, wk_sampler *smp, const wk_sampler_params *sp, float *row, int n_vocab,
                     grammar_pick_route *route, bool *no_token) {
    *no_token = false;
    int k = sp->temperature <= 0.0f ? 1 : sp->top_k > 0 && sp->top_k <= SCAN_MAX_K ? sp->top_k : 0;
    if (k > 0) {
        int32_t best[SCAN], keep[SCAN_MAX_K];
        float keep_logit[SCAN_MAX_K];
        int n = logits_best(row, n_vocab, SCAN, best), found = 0;
        for (int i = 0; i < n && found < k; i++)
            if (wk_matcher_allows(m, best[i])) keep[found++] = best[i];
        if (found == k || (n < SCAN && found > 0)) { /* the k best allowed, or every allowed finite token */
            for (int i = 0; i < found; i++) keep_logit[i] = row[keep[i]];
            for (int i = 0; i < n_vocab; i++) row[i] = -INFINITY;
            for (int i = 0; i < found; i++) row[keep[i]] = keep_logit[i];
            *route = PICK_BEST_K;
            return wk_sampler_sample(smp, row);
        }
    }
    if (k == 0 && sp->temperature > 0.0f && sp->top_p >= 1.0f && sp->min_p <= 0.0f)
        for (int attempt = 0; attempt < DRAWS; attempt++) {
            int32_t t = wk_sampler_sample(smp, row);
            if (wk_matcher_allows(m, t)) {
                *route = PICK_DRAWS;
                return t;
            }
        }
    *route = PICK_MASK;
    int allowed = wk_matcher_mask(m, row);
    if (allowed < 0) return allowed;
    if (allowed == 0) {
        *no_token = true;
        return WK_ERR_UNSUPPORTED;
    }
    return wk_sampler_sample(smp, row);
}
