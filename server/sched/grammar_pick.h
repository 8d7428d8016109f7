/* Sampling under a grammar (structured output): one token from the model's distribution restricted
 * to what the grammar allows, by the cheapest exact route for the request's sampler. Engine thread
 * (the matcher and sampler are the request's). */
#ifndef WUSHKV_GRAMMAR_PICK_H
#define WUSHKV_GRAMMAR_PICK_H

#include <stdbool.h>
#include <stdint.h>

#include "wushkv/grammar.h"
#include "wushkv/wushkv.h"

/* How the token was found (for tests and profiles). */
typedef enum { PICK_BEST_K, PICK_DRAWS, PICK_MASK } grammar_pick_route;

/* The token, or a negative wk_status: WK_ERR_UNSUPPORTED when the grammar allows no token of the
 * vocabulary here or passes the matcher's limits (wushkv/grammar.h; *no_token tells which),
 * WK_ERR_NOMEM. row (n_vocab logits, already biased and penalised) is overwritten: the allowed
 * tokens keep their logits. sp: the sampler's parameters (those smp was made with). */
int32_t grammar_pick(wk_matcher *m, wk_sampler *smp, const wk_sampler_params *sp, float *row, int n_vocab,
                     grammar_pick_route *route, bool *no_token);

#endif
