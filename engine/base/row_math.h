/* Passes over one logits row (262144 floats for Gemma 3) in 4-wide vectors: its maximum, the sum
 * of its exponentials, masked sums and the entries above a threshold. The sampler runs them for
 * every token it draws, and wk_logsumexp (the server's log-probabilities, `wushkv perplexity`) for
 * every row it scores; as scalar loops with libm's exp they cost 1.5-2 ms a row, as much as a
 * tenth of a decode step. NaN entries count as absent everywhere. */
#ifndef WK_ROW_MATH_H
#define WK_ROW_MATH_H

#include <stdint.h>

/* The largest entry of x[0..n) that is not NaN, and (when at is not NULL) the lowest index holding
 * it; -inf and index 0 when no entry is above -inf (or n <= 0). */
float wk_row_max(const float *x, int n, int *at);

/* sum over i of exp((x[i] - shift) * scale), in double. scale > 0 and shift >= every entry keep
 * each term in [0, 1]; an exponent above 88 is taken as 88. Terms whose exponent is below -87
 * (under float's normal range), -inf or NaN add nothing and are written as 0. When terms is not
 * NULL, terms[i] gets each term. Accurate to about 1e-7 relative (a degree-5 polynomial on the
 * reduced argument, Cephes' expf; per-lane float sums of 128 terms added in double). */
double wk_row_exp_sum(const float *x, int n, float shift, float scale, float *terms);

/* terms[i] = exp(x[i] - shift) for i < n, each the float wk_row_exp_sum(x, n, shift, 1, terms)
 * writes, without the sum (the host attention's softmax weights, whose sums it keeps in its own
 * order). avx512: in AVX-512's 16 lanes, on a CPU the caller knows runs them (the same floats). */
void wk_row_exp_terms(const float *x, int n, float shift, float *terms, int avx512);

/* sum of terms[i] over the i whose x[i] >= t, in double (terms from wk_row_exp_sum). */
double wk_row_sum_at_least(const float *terms, const float *x, int n, float t);

/* The indices i with x[i] >= t into idx (room for n), ascending; returns how many. */
int wk_row_indices_at_least(const float *x, int n, float t, int32_t *idx);

#endif
