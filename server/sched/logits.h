/* Per-request edits of one logits row before sampling (logit_bias, presence / frequency /
 * repetition penalties) and log-probabilities for the logprobs option. Engine thread only. */
#ifndef WUSHKV_LOGITS_H
#define WUSHKV_LOGITS_H

#include <stdint.h>

/* presence/frequency (OpenAI's definition) count the generated tokens; repetition (the CTRL /
 * Hugging Face rule: divide a positive logit, multiply a negative one, once per distinct token)
 * looks at the last `last_n` tokens of prompt followed by generated tokens (llama.cpp's
 * repeat_last_n), or at all of them when last_n < 0 (vLLM's rule); last_n 0: none. scratch:
 * n_vocab ints, all zero, left all zero. */
void logits_penalize(float *logits, const int32_t *prompt, int n_prompt, const int32_t *gen, int n_gen,
                     float presence, float frequency, float repetition, int last_n, int *scratch);
void logits_bias(float *logits, int n_vocab, const int32_t *tokens, const float *values, int n);
/* Sets the logits of the n tokens (those in the vocabulary) to -inf: never drawn. */
void logits_mask(float *logits, int n_vocab, const int32_t *tokens, int n);
/* vLLM's bad_words: for each of n_seqs token sequences (sequence k is ids[end[k-1] .. end[k]), from 0
 * for k = 0), its last token -inf when the generated tokens gen (n_gen) end in the ones before it
 * (always, for a sequence of one token). */
void logits_ban_endings(float *logits, int n_vocab, const int32_t *ids, const int *end, int n_seqs, const int32_t *gen,
                        int n_gen);
/* Sets every logit to -inf but those of the n tokens, given sorted ascending without repeats. */
void logits_keep_only(float *logits, int n_vocab, const int32_t *sorted, int n);

/* The (at most) m tokens with the highest finite logits into ids, best first, equal logits lower id
 * first (the sampler's order); returns how many. */
int logits_best(const float *logits, int n_vocab, int m, int32_t *ids);

/* log softmax of `chosen`, and the *n_top most likely tokens with theirs (best first): *n_top is
 * then how many have a finite logit (fewer than asked only where a mask left fewer); *rank (when
 * rank is not NULL) gets 1 + the tokens with a higher logit than chosen's (vLLM's rank). */
float logits_logprobs(const float *logits, int n_vocab, int32_t chosen, int *n_top, int32_t *top_tokens,
                      float *top_logprobs, int *rank);

#endif
