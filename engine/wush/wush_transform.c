/* WUSH-KV transform construction on the host (math in wush_transform.h): second moments, WUSH per
 * block with LAPACKE in double precision, seeded randomized-sign Hadamard, block-diagonal apply. */
#include "wush/wush_transform.h"

#include <lapacke.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

static int fail(char *err, int status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, WK_ERRMSG_LEN, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* ---- second moments ---- */

int wk_moments_init(wk_moments *m, int dim, int block) {
    memset(m, 0, sizeof *m);
    if (dim <= 0 || block <= 0 || dim % block != 0) return WK_ERR_INVALID;
    m->dim = dim;
    m->block = block;
    m->sum = calloc((size_t)dim * (size_t)block, sizeof *m->sum);
    return m->sum ? WK_OK : WK_ERR_NOMEM;
}

void wk_moments_free(wk_moments *m) {
    free(m->sum);
    memset(m, 0, sizeof *m);
}

void wk_moments_reset(wk_moments *m) {
    if (m->sum) memset(m->sum, 0, (size_t)m->dim * (size_t)m->block * sizeof *m->sum);
    m->weight = 0;
    m->count = 0;
}

void wk_moments_add_weighted(wk_moments *m, const float *v, double w) {
    const int B = m->block;
    double d[B]; /* B <= dim; a VLA keeps the product loop in double without a heap buffer */
    for (int k = 0; k < m->dim / B; k++) {
        for (int i = 0; i < B; i++) d[i] = (double)v[k * B + i];
        double *s = m->sum + (size_t)k * B * B;
        for (int i = 0; i < B; i++) {
            double wi = w * d[i];
            double *row = s + (size_t)i * B;
            for (int j = i; j < B; j++) row[j] += wi * d[j]; /* upper triangle; mirrored in _mean */
        }
    }
    m->weight += w;
    m->count++;
}

void wk_moments_add(wk_moments *m, const float *v) { wk_moments_add_weighted(m, v, 1.0); }

void wk_moments_add_rows(wk_moments *m, const float *v, size_t n, size_t stride) {
    for (size_t i = 0; i < n; i++) wk_moments_add_weighted(m, v + i * stride, 1.0);
}

int wk_moments_merge(wk_moments *dst, const wk_moments *src) {
    if (dst->dim != src->dim || dst->block != src->block || !dst->sum || !src->sum) return WK_ERR_INVALID;
    size_t n = (size_t)dst->dim * (size_t)dst->block;
    for (size_t i = 0; i < n; i++) dst->sum[i] += src->sum[i];
    dst->weight += src->weight;
    dst->count += src->count;
    return WK_OK;
}

bool wk_moments_mean(const wk_moments *m, double *g) {
    if (!m->sum || !(m->weight > 0)) return false;
    const int B = m->block;
    for (int k = 0; k < m->dim / B; k++) {
        const double *s = m->sum + (size_t)k * B * B;
        double *o = g + (size_t)k * B * B;
        for (int i = 0; i < B; i++)
            for (int j = i; j < B; j++) o[(size_t)i * B + j] = o[(size_t)j * B + i] = s[(size_t)i * B + j] / m->weight;
    }
    return true;
}

void wk_blocks_from_full(int D, int B, const double *full, double *blocks) {
    for (int k = 0; k < D / B; k++)
        for (int i = 0; i < B; i++)
            memcpy(blocks + ((size_t)k * B + i) * B, full + ((size_t)k * B + i) * D + (size_t)k * B,
                   (size_t)B * sizeof *blocks);
}

/* ---- Hadamard ---- */

int wk_hadamard(int n, double *h) {
    if (!pow2(n)) return WK_ERR_INVALID;
    double s = 1.0 / sqrt((double)n);
    /* Sylvester: H[i][j] = (-1)^popcount(i & j), the same ordering as [[H, H], [H, -H]] */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) h[(size_t)i * n + j] = __builtin_parity((unsigned)(i & j)) ? -s : s;
    return WK_OK;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int wk_hadamard_signed(int dim, int block, uint64_t seed, double *t) {
    if (!pow2(block) || dim <= 0 || dim % block != 0) return WK_ERR_INVALID;
    double *h = malloc((size_t)block * block * sizeof *h);
    if (!h) return WK_ERR_NOMEM;
    wk_hadamard(block, h);
    uint64_t st = seed;
    for (int k = 0; k < dim / block; k++) {
        double *o = t + (size_t)k * block * block;
        for (int j = 0; j < block; j++) {
            double sign = (splitmix64(&st) >> 63) ? -1.0 : 1.0; /* sign of coordinate k*block + j */
            for (int i = 0; i < block; i++) o[(size_t)i * block + j] = h[(size_t)i * block + j] * sign;
        }
    }
    free(h);
    return WK_OK;
}

/* ---- WUSH ---- */

/* Damped copy: g + damp * mean(diag g) * I. */
static void damp_copy(int n, const double *g, double damp, double *out) {
    double tr = 0;
    for (int i = 0; i < n; i++) tr += g[(size_t)i * n + i];
    memcpy(out, g, (size_t)n * n * sizeof *out);
    for (int i = 0; i < n; i++) out[(size_t)i * n + i] += damp * tr / n;
}

static double trace(int n, const double *g) {
    double tr = 0;
    for (int i = 0; i < n; i++) tr += g[(size_t)i * n + i];
    return tr;
}

/* Shared by the transform and the gain: damped Grams, W' (lower, upper zeroed), eigen-pairs of
 * M = W'^T G_x W' (ascending; U's columns with canonical signs). work: 3 n*n doubles. */
static int wush_core(int n, const double *g_w, const double *g_x, double damp, double *w1, double *u, double *lam,
                     double *work, wk_wush_block_info *info, char *err) {
    double *gw = work, *gx = work + (size_t)n * n, *a = work + 2 * (size_t)n * n;
    for (size_t i = 0; i < (size_t)n * n; i++)
        if (!isfinite(g_w[i]) || !isfinite(g_x[i])) return fail(err, WK_ERR_INVALID, "Gram has a non-finite entry");
    damp_copy(n, g_w, damp, gw);
    damp_copy(n, g_x, damp, gx);
    double trw = trace(n, gw), trx = trace(n, gx);
    if (!(trw > 0) || !(trx > 0))
        return fail(err, WK_ERR_INVALID, "Gram has no positive trace (tr G_w %g, tr G_x %g)", trw, trx);

    memcpy(w1, gw, (size_t)n * n * sizeof *w1);
    lapack_int rc = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', n, w1, n);
    if (rc != 0) return fail(err, WK_ERR_INVALID, "G_w is not positive definite after damping (dpotrf %d)", (int)rc);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) w1[(size_t)i * n + j] = 0; /* dpotrf leaves the upper part */

    /* a = G_x W'; M = W'^T a, symmetrized so dsyevd sees exactly a symmetric matrix */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = j; l < n; l++) s += gx[(size_t)i * n + l] * w1[(size_t)l * n + j];
            a[(size_t)i * n + j] = s;
        }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = i; l < n; l++) s += w1[(size_t)l * n + i] * a[(size_t)l * n + j];
            u[(size_t)i * n + j] = s;
        }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            double s = 0.5 * (u[(size_t)i * n + j] + u[(size_t)j * n + i]);
            u[(size_t)i * n + j] = u[(size_t)j * n + i] = s;
        }
    rc = LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'L', n, u, n, lam);
    if (rc != 0) return fail(err, WK_ERR_INVALID, "eigendecomposition failed (dsyevd %d)", (int)rc);
    for (int k = 0; k < n; k++) { /* canonical sign: largest |entry| of each eigenvector positive */
        int im = 0;
        for (int i = 1; i < n; i++)
            if (fabs(u[(size_t)i * n + k]) > fabs(u[(size_t)im * n + k])) im = i;
        if (u[(size_t)im * n + k] < 0)
            for (int i = 0; i < n; i++) u[(size_t)i * n + k] = -u[(size_t)i * n + k];
    }
    if (info) {
        double ss = 0;
        for (int k = 0; k < n; k++) ss += sqrt(lam[k] > 0 ? lam[k] : 0);
        info->trace_x = trx;
        info->trace_w = trw;
        info->sum_s = ss;
        info->gain = trx * trw / (ss * ss);
        info->lambda_min = lam[0];
        info->lambda_max = lam[n - 1];
    }
    return WK_OK;
}

static int wush_one(int n, const double *g_w, const double *g_x, double damp, double *t, double *t_inv_t,
                    wk_wush_block_info *info, char *err) {
    if (!pow2(n) || n > 4096)
        return fail(err, WK_ERR_INVALID, "WUSH block size %d is not a power of two in 1..4096", n);
    size_t nn = (size_t)n * n;
    double *mem = malloc((8 * nn + (size_t)n) * sizeof *mem);
    if (!mem) return fail(err, WK_ERR_NOMEM, "out of memory for a %d x %d WUSH block", n, n);
    double *w1 = mem, *u = mem + nn, *h = mem + 2 * nn, *p = mem + 3 * nn, *work = mem + 4 * nn, *lam = mem + 8 * nn;
    wk_wush_block_info inf;
    int st = wush_core(n, g_w, g_x, damp, w1, u, lam, work, &inf, err);
    if (st == WK_OK && info) *info = inf;
    if (st != WK_OK || (!t && !t_inv_t)) {
        free(mem);
        return st;
    }
    wk_hadamard(n, h);
    double *q = work; /* n*n scratch, work is free again */
    if (t) {
        /* p = L^(-1/4) U^T W'^T: p[k][j] = lam_k^(-1/4) sum_{l<=j} U[l][k] W'[j][l]; t = H p */
        for (int k = 0; k < n; k++) {
            double f = pow(lam[k] > 1e-30 ? lam[k] : 1e-30, -0.25);
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int l = 0; l <= j; l++) s += u[(size_t)l * n + k] * w1[(size_t)j * n + l];
                p[(size_t)k * n + j] = f * s;
            }
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int k = 0; k < n; k++) s += h[(size_t)i * n + k] * p[(size_t)k * n + j];
                t[(size_t)i * n + j] = s;
            }
    }
    if (t_inv_t) {
        memcpy(q, w1, nn * sizeof *q);
        lapack_int rc = LAPACKE_dtrtri(LAPACK_ROW_MAJOR, 'L', 'N', n, q, n);
        if (rc != 0) {
            free(mem);
            return fail(err, WK_ERR_INVALID, "Cholesky factor is singular (dtrtri %d)", (int)rc);
        }
        /* p = L^(1/4) U^T W'^-1: p[k][j] = lam_k^(1/4) sum_{l>=j} U[l][k] Winv[l][j]; t_inv_t = H p */
        for (int k = 0; k < n; k++) {
            double f = pow(lam[k] > 1e-30 ? lam[k] : 1e-30, 0.25);
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int l = j; l < n; l++) s += u[(size_t)l * n + k] * q[(size_t)l * n + j];
                p[(size_t)k * n + j] = f * s;
            }
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int k = 0; k < n; k++) s += h[(size_t)i * n + k] * p[(size_t)k * n + j];
                t_inv_t[(size_t)i * n + j] = s;
            }
    }
    free(mem);
    return WK_OK;
}

int wk_wush_block(int n, const double *g_w, const double *g_x, double damp, double *t, double *t_inv_t,
                  wk_wush_block_info *info, char *err) {
    return wush_one(n, g_w, g_x, damp, t, t_inv_t, info, err);
}

int wk_wush_blockdiag(int D, int B, const double *g_w, const double *g_x, double damp, double *t, double *t_inv_t,
                      wk_wush_block_info *info, double *gain, char *err) {
    if (D <= 0 || !pow2(B) || D % B != 0)
        return fail(err, WK_ERR_INVALID, "head dim %d is not a multiple of the power-of-two block %d", D, B);
    double num = 0, den = 0;
    size_t bb = (size_t)B * B;
    for (int k = 0; k < D / B; k++) {
        wk_wush_block_info inf;
        int st = wush_one(B, g_w + k * bb, g_x + k * bb, damp, t ? t + k * bb : NULL,
                          t_inv_t ? t_inv_t + k * bb : NULL, &inf, err);
        if (st != WK_OK) {
            if (err) {
                char tmp[WK_ERRMSG_LEN];
                snprintf(tmp, sizeof tmp, "block %d: %s", k, err);
                memcpy(err, tmp, sizeof tmp);
            }
            return st;
        }
        if (info) info[k] = inf;
        num += inf.trace_x * inf.trace_w;
        den += inf.sum_s * inf.sum_s;
    }
    if (gain) *gain = num / den;
    return WK_OK;
}

int wk_wush_predicted_gain(int D, int B, const double *g_w, const double *g_x, double damp, double *gain,
                           char *err) {
    return wk_wush_blockdiag(D, B, g_w, g_x, damp, NULL, NULL, NULL, gain, err);
}

/* ---- apply ---- */

void wk_xform_apply(int D, int B, const double *t, const float *x, float *y) {
    for (int k = 0; k < D / B; k++) {
        const double *m = t + (size_t)k * B * B;
        for (int i = 0; i < B; i++) {
            double s = 0;
            for (int j = 0; j < B; j++) s += m[(size_t)i * B + j] * x[k * B + j];
            y[k * B + i] = (float)s;
        }
    }
}

void wk_xform_apply_f32(int D, int B, const float *t, const float *x, float *y) {
    for (int k = 0; k < D / B; k++) {
        const float *m = t + (size_t)k * B * B;
        for (int i = 0; i < B; i++) {
            float s = 0;
            for (int j = 0; j < B; j++) s += m[(size_t)i * B + j] * x[k * B + j];
            y[k * B + i] = s;
        }
    }
}
