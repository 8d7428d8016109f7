/* WUSH-KV transforms on the host: streaming second moments, the WUSH construction from two Grams
 * (LAPACKE, double precision), the randomized-sign Hadamard transform, and helpers to apply them.
 *
 * Transforms are block-diagonal: a head of dim D with quantizer group G gets D/G blocks of G x G
 * (docs/design.md 5.2: the block follows the quantizer's group), so a quantizer group never mixes
 * with another and a block is a power of two that Sylvester's Hadamard exists for. block = D gives
 * one dense transform per head (what the reference selftest of docs/design.md appendix A uses).
 *
 * Storage ("compact blocks"): a block-diagonal D x D matrix with block B is nb = D/B row-major
 * B x B matrices, one after another: element (i, j) of block k is m[(k*B + i)*B + j] and stands for
 * entry (k*B + i, k*B + j) of the full matrix. Grams from wk_moments use the same layout.
 *
 * WUSH (docs/design.md section 5.1), per block, for the product w.x with x quantized:
 *   damp both Grams by ratio * mean(diag) * I; W' = chol_lower(G_w); M = W'^T G_x W' = U L U^T;
 *   T = H L^(-1/4) U^T W'^T (applied to x), T^-T = H L^(1/4) U^T W'^-1 (applied to w),
 * so (T^-T w).(T x) = w.x, and both transformed second moments equal H L^(1/2) H^T (equal
 * diagonals). Eigenvector signs are made canonical (largest-magnitude entry positive) so the
 * sidecar does not depend on which LAPACK build made it; eigenvalues are ascending (dsyevd). */
#ifndef WK_WUSH_TRANSFORM_H
#define WK_WUSH_TRANSFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wushkv/wushkv.h"

#define WK_WUSH_DAMP 0.01 /* damping ratio of docs/design.md 5.1: 1% of the mean diagonal */

/* ---- streaming second moments: vectors in float, sums in double ---- */
typedef struct wk_moments {
    int dim, block;  /* block divides dim; only the diagonal blocks are accumulated */
    double weight;   /* sum of the weights added */
    uint64_t count;  /* vectors added */
    double *sum;     /* compact blocks, upper triangle of each block filled while accumulating */
} wk_moments;

int wk_moments_init(wk_moments *m, int dim, int block); /* WK_OK, WK_ERR_INVALID, WK_ERR_NOMEM */
void wk_moments_free(wk_moments *m);
void wk_moments_reset(wk_moments *m);
void wk_moments_add(wk_moments *m, const float *v);                      /* weight 1 */
void wk_moments_add_weighted(wk_moments *m, const float *v, double w);   /* e.g. attention mass */
/* Adds n vectors v + i*stride (stride in floats), weight 1 each. */
void wk_moments_add_rows(wk_moments *m, const float *v, size_t n, size_t stride);
int wk_moments_merge(wk_moments *dst, const wk_moments *src); /* per-thread partials; same shape */
/* Second moment sum / weight as full symmetric compact blocks; false if nothing was added. */
bool wk_moments_mean(const wk_moments *m, double *g);

/* Copies the diagonal B x B blocks of a full row-major D x D matrix into compact blocks. */
void wk_blocks_from_full(int D, int B, const double *full, double *blocks);

/* ---- transforms ---- */

/* Normalized Sylvester Hadamard (n a power of two), row-major n x n; symmetric and orthogonal. */
int wk_hadamard(int n, double *h);

/* T = block-diagonal of H_B diag(s), s = +-1 from a splitmix64 stream seeded by `seed` (one sign per
 * coordinate, in coordinate order). Orthogonal, so T^-T = T: the same matrix goes on both factors. */
int wk_hadamard_signed(int dim, int block, uint64_t seed, double *t);

typedef struct wk_wush_block_info {
    double gain;           /* tr(G_x) tr(G_w) / (sum s)^2 over the damped Grams, >= 1 */
    double trace_x, trace_w, sum_s;
    double lambda_min, lambda_max; /* eigenvalues of M */
} wk_wush_block_info;

/* One n x n block (n a power of two, 1..4096): writes T and T^-T (row-major n x n). g_w / g_x are
 * read only. info may be NULL. Returns WK_ERR_INVALID (with a message in err, if given, of
 * WK_ERRMSG_LEN) for a bad size or a Gram that is not positive definite after damping. */
int wk_wush_block(int n, const double *g_w, const double *g_x, double damp, double *t, double *t_inv_t,
                  wk_wush_block_info *info, char *err);

/* Block-diagonal WUSH for a head of dim D with block B (D % B == 0, B a power of two): g_w, g_x,
 * t, t_inv_t in compact blocks. info (NULL or D/B entries) gets each block's diagnostics; *gain
 * (may be NULL) the head's aggregate predicted gain sum_k tr_x,k tr_w,k / sum_k (sum s_k)^2. */
int wk_wush_blockdiag(int D, int B, const double *g_w, const double *g_x, double damp, double *t, double *t_inv_t,
                      wk_wush_block_info *info, double *gain, char *err);

/* Predicted gain alone (no transform), same conventions as wk_wush_blockdiag. */
int wk_wush_predicted_gain(int D, int B, const double *g_w, const double *g_x, double damp, double *gain,
                           char *err);

/* y = T x for a compact block-diagonal T (y and x must not overlap). */
void wk_xform_apply(int D, int B, const double *t, const float *x, float *y);
/* The same with f32 matrix entries, as a shader would hold them. */
void wk_xform_apply_f32(int D, int B, const float *t, const float *x, float *y);

#endif
