/* Layerwise reconstruction error of a quantized KV cache (research.h's wk_kv_layer_error): from one
 * capture of the f16 model, each layer's attention output with its keys and values transformed and
 * quantized on the host exactly as a KV format would store them, against the f16 output, before
 * and after W_o. The quantizers are the engine's C twins (kv_quant.c, bit-identical to the GLSL
 * encoders) and the transforms are the matrices the engine would load (kv_transform.c).
 *
 * What it does not model: the engine transforms f32 keys before they are ever rounded to f16 and
 * computes v' = (T_V W_v) x with the folded matrix rounded to 8 bits (q8a16); here the f16 keys and
 * values of the capture are transformed in double. Both differences are far below any 2..4-bit
 * error. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_int.h"
#include "kv/kv_quant.h"
#include "kv/kv_transform.h"
#include "base/status.h"
#include "wushkv/research.h"

/* One format, ready to apply: kind NONE of x is the identity. */
typedef struct fmt_state {
    bool quantize;
    wk_kvq_kind kind;
    int bits, G, sink, recent;
    int swa_sink, swa_recent; /* the sliding-window layers' f16 windows (sink, recent unless their own) */
    int swa_bits; /* the sliding-window layers' bits (per-layer-class formats) */
    float rho_k, rho_v;
    /* QuEST's constant (wk_kvq_quest_c2) of the bits layers and of sliding layers of their own
     * swa_bits: as the engine's kv cache, the clip is the main width's */
    float quest_c2, swa_quest_c2;
    /* Wide keys: layer il's keys in key_bits (key_quest_c2) when wide[il] */
    int key_bits;
    float key_quest_c2;
    bool wide[256];
    wk_kv_xform x;
} fmt_state;

/* One layer's working set; rows of D doubles laid out [token][head][D] as the capture. */
typedef struct layer_ctx {
    int il, n, Hq, Hk, D, E, per_kv, window;
    double scale;
    /* reference: the capture in double, W_o, the f16 attention output and its norms */
    double *qr, *kr, *vr; /* [n][Hq][D], [n][Hk][D], [n][Hk][D] */
    double *wot;          /* W_o transposed: [Hq*D][E] */
    double *o_ref;        /* [n][Hq*D] */
    double *ref_o, *ref_y; /* [n]: ||o_ref||^2, ||W_o o_ref||^2 */
    /* the format under evaluation; without a transform qt/kt/vt alias qr/kr/vr, without
     * quantization kq/vq alias kt/vt */
    const fmt_state *fs;
    double *qt, *kt, *vt, *kq, *vq;
    /* keys transposed per KV head, [Hk][D][n], for the score kernel: the reference's f16 keys and
     * the format's stored (dequantized) keys */
    double *ktr, *ktq;
    double *o_q;           /* [n][Hq*D], back in the untransformed value basis */
    double *err_o, *err_y; /* [n]: ||o_q - o_ref||^2, ||W_o (o_q - o_ref)||^2 */
} layer_ctx;

enum { QBLOCK = 16 }; /* queries per attention work item */

/* Scratch doubles per thread: attention: a block's scores [QBLOCK][n], then o' [D]; projection: a
 * tile's W_o x [QBLOCK][E], then its o_q - o_ref [QBLOCK][Hq*D]. */
static size_t scratch_doubles(const layer_ctx *c) {
    const size_t att = (size_t)QBLOCK * c->n + c->D, proj = (size_t)QBLOCK * (c->E + (size_t)c->Hq * c->D);
    return att > proj ? att : proj;
}

/* ---- small kernels ------------------------------------------------------------------------- */

/* Dot product in double with 4 partial sums (fixed order: the result does not depend on the thread). */
static double dot(const double *a, const double *b, int n) {
    double s[4] = {0, 0, 0, 0};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) s[k] += a[i + k] * b[i + k];
    for (; i < n; i++) s[0] += a[i] * b[i];
    return (s[0] + s[2]) + (s[1] + s[3]);
}

/* y = M x for a block-diagonal D x D matrix in compact blocks of B (kv_transform.h: element (i, j)
 * of the block holding row i is M[i*B + j - b0]); y and x distinct. */
static void apply_f(const float *M, int D, int B, const double *x, double *y) {
    for (int i = 0; i < D; i++) {
        const int b0 = i / B * B;
        double s = 0;
        for (int j = 0; j < B; j++) s += (double)M[(size_t)i * B + j] * x[b0 + j];
        y[i] = s;
    }
}
static void apply_d(const double *M, int D, int B, const double *x, double *y) {
    for (int i = 0; i < D; i++) {
        const int b0 = i / B * B;
        double s = 0;
        for (int j = 0; j < B; j++) s += M[(size_t)i * B + j] * x[b0 + j];
        y[i] = s;
    }
}

/* Quantizes and dequantizes one head vector group by group with the engine's C twin. */
static void quant_row(const fmt_state *fs, int bits, float rho, float quest_c2, int D, const double *x, double *y) {
    float xf[WK_KVQ_MAX_GROUP], yf[WK_KVQ_MAX_GROUP];
    uint8_t codes[WK_KVQ_MAX_GROUP];
    uint16_t params[2];
    for (int g0 = 0; g0 < D; g0 += fs->G) {
        for (int i = 0; i < fs->G; i++) xf[i] = (float)x[g0 + i];
        wk_kvq_quantize_group_c2(fs->kind, bits, fs->G, rho, quest_c2, xf, codes, params);
        wk_kvq_dequantize_group(fs->kind, bits, fs->G, codes, params, yf);
        for (int i = 0; i < fs->G; i++) y[g0 + i] = yf[i];
    }
}

/* ---- a dynamic parallel for ------------------------------------------------------------------ */

typedef void (*item_fn)(layer_ctx *c, int item, double *scratch);
typedef struct pool {
    layer_ctx *c;
    item_fn fn;
    int n_items;
    atomic_int next;
} pool;
typedef struct worker {
    pool *p;
    double *scratch;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    for (;;) {
        int i = atomic_fetch_add(&w->p->next, 1);
        if (i >= w->p->n_items) return NULL;
        w->p->fn(w->p->c, i, w->scratch);
    }
}

/* Items write disjoint outputs, so the order they run in changes nothing. A thread that cannot be
 * started leaves its share to the others. */
static void parallel_for(layer_ctx *c, item_fn fn, int n_items, int T, double *scratch) {
    pool p = {.c = c, .fn = fn, .n_items = n_items};
    atomic_init(&p.next, 0);
    worker w[T];
    pthread_t tid[T];
    bool started[T];
    const size_t per = scratch_doubles(c);
    for (int t = 0; t < T; t++) {
        w[t] = (worker){&p, scratch + (size_t)t * per};
        started[t] = t > 0 && pthread_create(&tid[t], NULL, work, &w[t]) == 0;
    }
    work(&w[0]);
    for (int t = 1; t < T; t++)
        if (started[t]) pthread_join(tid[t], NULL);
}

/* ---- attention ------------------------------------------------------------------------------- */

/* Key or value row j of KV head g as query i reads it: the reference reads the f16 rows; the
 * format reads the exact (transformed) row inside the f16 windows, the dequantized one elsewhere. */
static int layer_sink(const layer_ctx *c) { return c->window ? c->fs->swa_sink : c->fs->sink; } /* window: sliding */
static int layer_recent(const layer_ctx *c) { return c->window ? c->fs->swa_recent : c->fs->recent; }
static bool exact_row(const layer_ctx *c, int j, int i) { return j < layer_sink(c) || j > i - layer_recent(c); }
static const double *kv_row(const layer_ctx *c, bool quant, bool value, int j, int i, int g) {
    const size_t at = ((size_t)j * c->Hk + g) * c->D;
    if (!quant) return (value ? c->vr : c->kr) + at;
    const bool exact = exact_row(c, j, i);
    if (value) return (exact ? c->vt : c->vq) + at;
    return (exact ? c->kt : c->kq) + at;
}

/* q . k summed exactly as the transposed kernel in attend_block sums it (4 dims at a time, in
 * order): a window row scored here gets the value the kernel would give the same row. */
static double dot_ordered(const double *q, const double *k, int D) {
    double s = 0;
    int d = 0;
    for (; d + 4 <= D; d += 4)
        s = s + ((q[d] * k[d] + q[d + 1] * k[d + 1]) + (q[d + 2] * k[d + 2] + q[d + 3] * k[d + 3]));
    for (; d < D; d++) s = s + q[d] * k[d];
    return s;
}

/* First key query i sees: causal with the layer's window (j <= i and i - j < window). */
static int first_key(const layer_ctx *c, int i) { return c->window > 0 && i + 1 > c->window ? i + 1 - c->window : 0; }

/* out_i[D] = softmax_j(scale * q_i . k_j) v_j for the queries i0..i1-1 of head h, out_i at
 * out + i * Hq * D. Scores come from the transposed keys (an axpy over j per dimension, which
 * vectorizes without reassociating anything); rows in the f16 windows are rescored from their exact
 * row in the same order. Reference and format take the same arithmetic path, so a format whose rows
 * equal the reference's gives exactly the reference's output. */
static void attend_block(const layer_ctx *c, bool quant, int h, int i0, int i1, double *s, double *out,
                         size_t out_stride) {
    const int D = c->D, n = c->n, g = h / (c->Hq / c->Hk);
    const double *Q = quant ? c->qt : c->qr, *KT = (quant ? c->ktq : c->ktr) + (size_t)g * D * n;
    const int jlo = first_key(c, i0), m = i1 - jlo; /* block rectangle: keys jlo .. i1-1 */
    for (int i = i0; i < i1; i++) {
        double *si = s + (size_t)(i - i0) * m - jlo; /* si[j], j in [first_key(i), i] */
        for (int j = first_key(c, i); j <= i; j++) si[j] = 0;
    }
    int d = 0;
    for (; d + 4 <= D; d += 4) {
        const double *k0 = KT + (size_t)d * n, *k1 = k0 + n, *k2 = k1 + n, *k3 = k2 + n;
        for (int i = i0; i < i1; i++) {
            const double *q = Q + ((size_t)i * c->Hq + h) * D + d, a0 = q[0], a1 = q[1], a2 = q[2], a3 = q[3];
            double *si = s + (size_t)(i - i0) * m - jlo;
            for (int j = first_key(c, i); j <= i; j++)
                si[j] = si[j] + ((a0 * k0[j] + a1 * k1[j]) + (a2 * k2[j] + a3 * k3[j]));
        }
    }
    for (; d < D; d++)
        for (int i = i0; i < i1; i++) {
            const double a = Q[((size_t)i * c->Hq + h) * D + d], *k = KT + (size_t)d * n;
            double *si = s + (size_t)(i - i0) * m - jlo;
            for (int j = first_key(c, i); j <= i; j++) si[j] = si[j] + a * k[j];
        }
    for (int i = i0; i < i1; i++) {
        const double *q = Q + ((size_t)i * c->Hq + h) * D;
        double *si = s + (size_t)(i - i0) * m - jlo, *o = out + (size_t)(i - i0) * out_stride;
        const int j0 = first_key(c, i);
        if (quant && (layer_sink(c) || layer_recent(c)))
            for (int j = j0; j <= i; j++)
                if (exact_row(c, j, i)) si[j] = dot_ordered(q, kv_row(c, true, false, j, i, g), D);
        double mx = -INFINITY, sum = 0;
        for (int j = j0; j <= i; j++) {
            si[j] *= c->scale;
            if (si[j] > mx) mx = si[j];
        }
        for (int j = j0; j <= i; j++) sum += si[j] = exp(si[j] - mx);
        for (int j = j0; j <= i; j++) si[j] /= sum;
        for (int x = 0; x < D; x++) o[x] = 0;
        int j = j0;
        for (; j + 4 <= i + 1; j += 4) {
            const double p0 = si[j], p1 = si[j + 1], p2 = si[j + 2], p3 = si[j + 3];
            const double *v0 = kv_row(c, quant, true, j, i, g), *v1 = kv_row(c, quant, true, j + 1, i, g),
                         *v2 = kv_row(c, quant, true, j + 2, i, g), *v3 = kv_row(c, quant, true, j + 3, i, g);
            for (int x = 0; x < D; x++) o[x] = o[x] + ((p0 * v0[x] + p1 * v1[x]) + (p2 * v2[x] + p3 * v3[x]));
        }
        for (; j <= i; j++) {
            const double p = si[j], *v = kv_row(c, quant, true, j, i, g);
            for (int x = 0; x < D; x++) o[x] = o[x] + p * v[x];
        }
    }
}

/* Item = (head, block of QBLOCK queries), the latest (longest) queries first. */
static void item_query_block(const layer_ctx *c, int item, int *h, int *i0, int *i1) {
    const int nb = (c->n + QBLOCK - 1) / QBLOCK;
    *h = item % c->Hq;
    const int b = nb - 1 - item / c->Hq;
    *i0 = b * QBLOCK;
    *i1 = *i0 + QBLOCK < c->n ? *i0 + QBLOCK : c->n;
}

static void attend_ref_item(layer_ctx *c, int item, double *scratch) {
    int h, i0, i1;
    item_query_block(c, item, &h, &i0, &i1);
    const size_t HD = (size_t)c->Hq * c->D;
    attend_block(c, false, h, i0, i1, scratch, c->o_ref + (size_t)i0 * HD + (size_t)h * c->D, HD);
}

static void attend_q_item(layer_ctx *c, int item, double *scratch) {
    int h, i0, i1;
    item_query_block(c, item, &h, &i0, &i1);
    const fmt_state *fs = c->fs;
    const int D = c->D, g = h / (c->Hq / c->Hk);
    const size_t HD = (size_t)c->Hq * D;
    double *o = c->o_q + (size_t)i0 * HD + (size_t)h * D;
    attend_block(c, true, h, i0, i1, scratch, o, HD);
    if (fs->x.kind == WK_XFORM_NONE) return;
    /* o = T_V^-1 o': what the folded W_o T_V^-1 does to the head's output */
    double *o1 = scratch + (size_t)QBLOCK * c->n;
    const double *tinv = fs->x.v_tinv + ((size_t)c->il * c->Hk + g) * c->per_kv;
    for (int i = i0; i < i1; i++, o += HD) {
        memcpy(o1, o, (size_t)D * sizeof *o1);
        apply_d(tinv, D, fs->x.block, o1, o);
    }
}

/* Keys [n][Hk][D] -> [Hk][D][n] for token t. */
static void transpose_token(const layer_ctx *c, const double *k, double *kt, int t) {
    for (int g = 0; g < c->Hk; g++)
        for (int d = 0; d < c->D; d++) kt[((size_t)g * c->D + d) * c->n + t] = k[((size_t)t * c->Hk + g) * c->D + d];
}

/* ---- per-token steps ------------------------------------------------------------------------- */

/* For tokens t0..t1-1 with attention outputs x_t (rows of Hq*D at x + t * stride): sq_o[t] = ||x_t||^2
 * and sq_y[t] = ||W_o x_t||^2. W_o x for a tile of tokens is an axpy over the n_embd outputs per
 * input (W_o transposed), which vectorizes; every sum has a fixed order. */
static void project_norms(const layer_ctx *c, const double *x, size_t stride, int t0, int t1, double *y,
                          double *sq_o, double *sq_y) {
    const int HD = c->Hq * c->D, E = c->E, nt = t1 - t0;
    memset(y, 0, (size_t)nt * E * sizeof *y);
    int k = 0;
    for (; k + 4 <= HD; k += 4) {
        const double *w0 = c->wot + (size_t)k * E, *w1 = w0 + E, *w2 = w1 + E, *w3 = w2 + E;
        for (int t = 0; t < nt; t++) {
            const double *xt = x + (size_t)t * stride + k, a0 = xt[0], a1 = xt[1], a2 = xt[2], a3 = xt[3];
            double *yt = y + (size_t)t * E;
            for (int e = 0; e < E; e++) yt[e] = yt[e] + ((a0 * w0[e] + a1 * w1[e]) + (a2 * w2[e] + a3 * w3[e]));
        }
    }
    for (; k < HD; k++)
        for (int t = 0; t < nt; t++) {
            const double a = x[(size_t)t * stride + k], *w = c->wot + (size_t)k * E;
            double *yt = y + (size_t)t * E;
            for (int e = 0; e < E; e++) yt[e] = yt[e] + a * w[e];
        }
    for (int t = 0; t < nt; t++) {
        sq_o[t0 + t] = dot(x + (size_t)t * stride, x + (size_t)t * stride, HD);
        sq_y[t0 + t] = dot(y + (size_t)t * E, y + (size_t)t * E, E);
    }
}

/* Item = a tile of QBLOCK tokens. */
static void norms_ref_item(layer_ctx *c, int item, double *scratch) {
    const size_t HD = (size_t)c->Hq * c->D;
    const int t0 = item * QBLOCK, t1 = t0 + QBLOCK < c->n ? t0 + QBLOCK : c->n;
    project_norms(c, c->o_ref + (size_t)t0 * HD, HD, t0, t1, scratch, c->ref_o, c->ref_y);
}

static void norms_q_item(layer_ctx *c, int item, double *scratch) {
    const size_t HD = (size_t)c->Hq * c->D;
    const int t0 = item * QBLOCK, t1 = t0 + QBLOCK < c->n ? t0 + QBLOCK : c->n;
    double *d = scratch + (size_t)QBLOCK * c->E; /* o_q - o_ref of the tile */
    for (size_t k = 0; k < (size_t)(t1 - t0) * HD; k++) d[k] = c->o_q[t0 * HD + k] - c->o_ref[t0 * HD + k];
    project_norms(c, d, HD, t0, t1, scratch, c->err_o, c->err_y);
}

/* Token t's rows as the format stores them: q' = T_K^-T q, k' = T_K k, v' = T_V v, then k' and v'
 * quantized and dequantized. */
static void prep_q_item(layer_ctx *c, int t, double *scratch) {
    (void)scratch;
    const fmt_state *fs = c->fs;
    const int D = c->D, Hq = c->Hq, Hk = c->Hk, B = fs->x.block;
    if (fs->x.kind != WK_XFORM_NONE) {
        for (int g = 0; g < Hk; g++) {
            const size_t at = (size_t)c->il * Hk + g, row = ((size_t)t * Hk + g) * D;
            const float *tk = fs->x.kq + (at * 2 + 0) * c->per_kv;
            apply_f(tk, D, B, c->kr + row, c->kt + row);
            apply_d(fs->x.v_t + at * c->per_kv, D, B, c->vr + row, c->vt + row);
        }
        for (int h = 0; h < Hq; h++) {
            const size_t at = (size_t)c->il * Hk + h / (Hq / Hk), row = ((size_t)t * Hq + h) * D;
            apply_f(fs->x.kq + (at * 2 + 1) * c->per_kv, D, B, c->qr + row, c->qt + row);
        }
    }
    const int bits = c->window && fs->swa_bits ? fs->swa_bits : fs->bits; /* window > 0: a sliding layer */
    const float c2 = c->window ? fs->swa_quest_c2 : fs->quest_c2;
    if (fs->quantize)
        for (int g = 0; g < Hk; g++) {
            const size_t row = ((size_t)t * Hk + g) * D;
            const bool wide = fs->key_bits && fs->wide[c->il];
            quant_row(fs, wide ? fs->key_bits : bits, fs->rho_k, wide ? fs->key_quest_c2 : c2, D, c->kt + row, c->kq + row);
            quant_row(fs, bits, fs->rho_v, c2, D, c->vt + row, c->vq + row);
        }
    if (c->ktq != c->ktr) transpose_token(c, c->kq, c->ktq, t);
}

/* ---- the whole computation ------------------------------------------------------------------- */

static int check_format(const wk_kv_error_format *f, int D, int idx, char *err, size_t errlen) {
    const int G = f->group ? f->group : 32;
    if ((unsigned)f->transform > WK_KV_TRANSFORM_WUSH)
        return wk_fail(err, errlen, WK_ERR_INVALID, "format %d: unknown KV transform %d", idx, (int)f->transform);
    if (f->transform == WK_KV_TRANSFORM_WUSH && !f->wush_path)
        return wk_fail(err, errlen, WK_ERR_INVALID, "format %d: the WUSH transform needs a sidecar file", idx);
    if (f->sink < 0 || f->recent < 0 || (f->swa_windows && (f->swa_sink < 0 || f->swa_recent < 0)))
        return wk_fail(err, errlen, WK_ERR_INVALID, "format %d: f16 windows must be >= 0", idx);
    if (!(f->rho_k >= 0 && f->rho_k <= 1 && f->rho_v >= 0 && f->rho_v <= 1))
        return wk_fail(err, errlen, WK_ERR_INVALID, "format %d: percentile quantiles must be in (0, 1]", idx);
    if (f->bits == 0 || f->bits == 16) return WK_OK;
    if (!wk_kvq_clip_valid((wk_kvq_kind)f->quant, f->clip))
        return wk_fail(err, errlen, WK_ERR_INVALID, "format %d: the clip (%g) applies to QuEST only and must be in [%g, %g]",
                       idx, (double)f->clip, (double)WK_KV_CLIP_MIN, (double)WK_KV_CLIP_MAX);
    if (f->swa_bits && !wk_kvq_valid((wk_kvq_kind)f->quant, f->swa_bits, G))
        return wk_fail(err, errlen, WK_ERR_INVALID, "format %d: the sliding-window layers' %d bits are not 2/3/4", idx,
                       f->swa_bits);
    if (!wk_kvq_valid((wk_kvq_kind)f->quant, f->bits, G) || D % G)
        return wk_fail(err, errlen, WK_ERR_INVALID,
                    "format %d: %d bits, quantizer %d, group %d is not one of 2/3/4 bits, quest/percentile/absmax, "
                    "a group 16..256 dividing head_dim %d", idx, f->bits, (int)f->quant, G, D);
    return WK_OK;
}

static int load_format(const wk_engine *e, const wk_kv_error_format *f, fmt_state *fs, char *err, size_t errlen) {
    memset(fs, 0, sizeof *fs);
    fs->quantize = f->bits != 0 && f->bits != 16;
    fs->kind = (wk_kvq_kind)f->quant;
    fs->bits = f->bits;
    fs->swa_bits = f->swa_bits;
    fs->G = f->group ? f->group : 32;
    fs->sink = f->sink;
    fs->recent = f->recent;
    fs->swa_sink = f->swa_windows ? f->swa_sink : f->sink;
    fs->swa_recent = f->swa_windows ? f->swa_recent : f->recent;
    fs->rho_k = f->rho_k > 0 ? f->rho_k : WK_KVQ_RHO_K;
    fs->rho_v = f->rho_v > 0 ? f->rho_v : WK_KVQ_RHO_V;
    if (fs->quantize)
        wk_kvq_clip_constants(f->bits, f->swa_bits && f->swa_bits != f->bits, f->clip, &fs->quest_c2, &fs->swa_quest_c2);
    int rc = wk_kv_xform_load(&fs->x, (wk_xform_kind)f->transform, f->wush_path, wk_engine_gguf(e),
                              &wk_engine_desc(e)->hp, fs->G, f->transform_seed ? f->transform_seed : WK_KV_TRANSFORM_SEED_DEFAULT,
                              err, errlen);
    if (rc) return rc;
    /* Wide keys, as the engine's cache: the layers named, or those it would choose itself; the
     * format's clip at their own width. */
    const int key_bits = f->key_bits;
    for (int il = 0; fs->quantize && key_bits && !f->wide_keys_auto && il < 256; il++)
        fs->wide[il] = wk_layer_set_has(f->wide_keys, il);
    if (fs->quantize && key_bits && f->wide_keys_auto) rc = wk_kv_xform_wide_keys(&fs->x, &wk_engine_desc(e)->hp, fs->wide, err, errlen);
    if (rc) return rc;
    if (fs->quantize && key_bits) {
        if (!wk_kvq_valid(fs->kind, key_bits, fs->G) || key_bits <= f->bits)
            return wk_fail(err, errlen, WK_ERR_INVALID, "wide keys of %d bits for a cache of %d bits", key_bits, f->bits);
        fs->key_bits = key_bits;
        fs->key_quest_c2 = fs->quest_c2 > 0 ? wk_kvq_quest_c2(key_bits, f->clip) : 0;
    }
    return WK_OK;
}

static double ratio(const double *num, const double *den, int n) {
    double a = 0, b = 0;
    for (int t = 0; t < n; t++) a += num[t], b += den[t]; /* token order: deterministic */
    return b > 0 ? a / b : a > 0 ? INFINITY : 0;
}

static int layer_error(wk_engine *e, const int32_t *tokens, int n, const wk_kv_error_format *fmts, int n_fmt,
                       int n_threads, wk_kv_error_layer *out, char *err, size_t errlen) {
    const wk_hparams *hp = &wk_engine_desc(e)->hp;
    const wk_model_info *info = wk_engine_info(e);
    const int L = hp->n_layer, Hq = hp->n_head, Hk = hp->n_head_kv, D = hp->head_dim, E = hp->n_embd;
    if (n_fmt <= 0 || !fmts || !out || !tokens || n <= 0)
        return wk_fail(err, errlen, WK_ERR_INVALID, "no formats or no tokens");
    if (info->kv_bits_per_element != 16)
        return wk_fail(err, errlen, WK_ERR_INVALID,
                    "the layer error needs an engine with the f16 KV cache and no transform (it applies the format "
                    "itself)");
    if (hp->head_dim_v != D)
        return wk_fail(err, errlen, WK_ERR_UNSUPPORTED, "key length %d != value length %d", D, hp->head_dim_v);
    for (int f = 0; f < n_fmt; f++) {
        int rc = check_format(&fmts[f], D, f, err, errlen);
        if (rc) return rc;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const int T = n_threads > 0 ? n_threads : cpus > 0 ? (int)cpus : 1;

    fmt_state *fs = calloc((size_t)n_fmt, sizeof *fs);
    if (!fs) return wk_fail(err, errlen, WK_ERR_NOMEM, "out of memory");
    int rc = WK_OK, loaded = 0;
    for (; loaded < n_fmt && !rc; loaded++) rc = load_format(e, &fmts[loaded], &fs[loaded], err, errlen);
    wk_capture cap = {0};
    wk_seq *seq = NULL;
    if (!rc && (rc = wk_seq_create(e, &seq)) != 0) wk_fail(err, errlen, rc, "no free sequence for the capture");
    if (!rc) rc = wk_capture_run(e, seq, tokens, n, &cap, err, errlen);
    wk_seq_destroy(seq);

    const size_t nq = (size_t)n * Hq * D, nk = (size_t)n * Hk * D, HD = (size_t)Hq * D;
    layer_ctx c = {.n = n, .Hq = Hq, .Hk = Hk, .D = D, .E = E, .scale = hp->attn_scale};
    double *scratch = NULL;
    float *wof = NULL;
    if (!rc) {
        c.qr = malloc(nq * sizeof(double));
        c.kr = malloc(nk * sizeof(double));
        c.vr = malloc(nk * sizeof(double));
        c.qt = malloc(nq * sizeof(double));
        c.kt = malloc(nk * sizeof(double));
        c.vt = malloc(nk * sizeof(double));
        c.kq = malloc(nk * sizeof(double));
        c.vq = malloc(nk * sizeof(double));
        c.ktr = malloc(nk * sizeof(double));
        c.ktq = malloc(nk * sizeof(double));
        c.wot = malloc((size_t)E * HD * sizeof(double));
        c.o_ref = malloc(nq * sizeof(double));
        c.o_q = malloc(nq * sizeof(double));
        c.ref_o = malloc(4 * (size_t)n * sizeof(double));
        wof = malloc((size_t)E * HD * sizeof *wof);
        scratch = malloc((size_t)T * scratch_doubles(&c) * sizeof *scratch);
        if (!c.qr || !c.kr || !c.vr || !c.qt || !c.kt || !c.vt || !c.kq || !c.vq || !c.ktr || !c.ktq || !c.wot ||
            !c.o_ref || !c.o_q || !c.ref_o || !wof || !scratch)
            rc = wk_fail(err, errlen, WK_ERR_NOMEM, "out of memory for %d tokens", n);
    }
    double *const own_qt = c.qt, *const own_kt = c.kt, *const own_vt = c.vt, *const own_kq = c.kq,
                 *const own_vq = c.vq, *const own_ktq = c.ktq;
    if (!rc) {
        c.ref_y = c.ref_o + n;
        c.err_o = c.ref_o + 2 * (size_t)n;
        c.err_y = c.ref_o + 3 * (size_t)n;
    }
    const int n_tiles = (n + QBLOCK - 1) / QBLOCK, n_att = Hq * n_tiles;
    for (int il = 0; il < L && !rc; il++) {
        c.il = il;
        c.window = hp->is_swa[il] ? hp->sliding_window : 0;
        c.per_kv = 0;
        for (size_t i = 0; i < nq; i++) c.qr[i] = cap.q[(size_t)il * nq + i];
        for (size_t i = 0; i < nk; i++) {
            c.kr[i] = cap.k[(size_t)il * nk + i];
            c.vr[i] = cap.v[(size_t)il * nk + i];
        }
        for (int t = 0; t < n; t++) transpose_token(&c, c.kr, c.ktr, t);
        if ((rc = wk_engine_wo(e, il, wof, err, errlen)) != 0) break;
        for (size_t o = 0; o < (size_t)E; o++) /* wof: n_embd rows of Hq*D */
            for (size_t i = 0; i < HD; i++) c.wot[i * E + o] = wof[o * HD + i];
        parallel_for(&c, attend_ref_item, n_att, T, scratch);
        parallel_for(&c, norms_ref_item, n_tiles, T, scratch);
        for (int f = 0; f < n_fmt; f++) {
            const fmt_state *s = &fs[f];
            const bool xf = s->x.kind != WK_XFORM_NONE;
            c.fs = s;
            c.per_kv = xf ? D * s->x.block : 0;
            c.qt = xf ? own_qt : c.qr;
            c.kt = xf ? own_kt : c.kr;
            c.vt = xf ? own_vt : c.vr;
            c.kq = s->quantize ? own_kq : c.kt;
            c.vq = s->quantize ? own_vq : c.vt;
            c.ktq = xf || s->quantize ? own_ktq : c.ktr;
            if (xf || s->quantize) parallel_for(&c, prep_q_item, n, T, scratch);
            parallel_for(&c, attend_q_item, n_att, T, scratch);
            parallel_for(&c, norms_q_item, n_tiles, T, scratch);
            out[(size_t)f * L + il] = (wk_kv_error_layer){.layer = il,
                                                          .swa = hp->is_swa[il],
                                                          .rel_mse = ratio(c.err_y, c.ref_y, n),
                                                          .rel_mse_attn = ratio(c.err_o, c.ref_o, n)};
        }
    }
    free(own_qt), free(own_kt), free(own_vt), free(own_kq), free(own_vq), free(own_ktq);
    free(c.ktr);
    free(c.qr), free(c.kr), free(c.vr), free(c.wot), free(c.o_ref), free(c.o_q), free(c.ref_o);
    free(wof);
    free(scratch);
    wk_capture_free(&cap);
    for (int f = 0; f < loaded; f++) wk_kv_xform_free(&fs[f].x);
    free(fs);
    return rc;
}

/* As layer_error, with no partial results on error: out is all zeros then. */
int wk_kv_layer_error(wk_engine *e, const int32_t *tokens, int n, const wk_kv_error_format *fmts, int n_fmt,
                      int n_threads, wk_kv_error_layer *out, char *err, size_t errlen) {
    int rc = wk_engine_gguf(e) ? layer_error(e, tokens, n, fmts, n_fmt, n_threads, out, err, errlen)
                               : wk_fail(err, errlen, WK_ERR_INVALID, "the engine released its model file (release_model_file)");
    if (rc && out && n_fmt > 0) memset(out, 0, (size_t)n_fmt * (size_t)wk_engine_desc(e)->hp.n_layer * sizeof *out);
    return rc;
}
