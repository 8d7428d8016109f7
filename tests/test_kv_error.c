/* Layerwise KV reconstruction error (wk_kv_layer_error) on a tiny random gemma3 model through a
 * Vulkan engine:
 *   (a) without quantization every transform is undone exactly (none: 0; Hadamard, WUSH: ~0);
 *   (b) the error falls with the bit width, 2 > 3 > 4, every layer, quantizer and transform;
 *   (c) f16 windows covering every position give exactly the reference; one position short, not;
 *   (d) one format recomputed here from the capture, the sidecar's dense matrices and the GGUF's
 *       W_o with straightforward loops, against the engine's numbers;
 * plus thread-count independence and the refusal of bad formats. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wush/wush_sidecar.h"
#include "model/gguf.h"
#include "kv/kv_quant.h"
#include "model/model.h"
#include "model/quant.h"
#include "test_engine_env.h"
#include "test_util.h"
#include "tiny_model.h"
#include "wushkv/research.h"

enum { N_TOK = 40, BLOCK = 32 }; /* 40 > the tiny model's window of 16: the window matters */

static wk_kv_error_format fmt(int bits, int quant, int transform, const char *wush, int sink, int recent) {
    return (wk_kv_error_format){.bits = bits, .quant = quant, .group = 32, .transform = transform,
                                .wush_path = wush, .sink = sink, .recent = recent};
}

/* Runs wk_kv_layer_error; out has n_fmt * n_layer entries. */
static int run(wk_engine *e, const int32_t *tok, const wk_kv_error_format *f, int n_fmt, int threads,
               wk_kv_error_layer *out) {
    char err[WK_ERRMSG_LEN] = "";
    int rc = wk_kv_layer_error(e, tok, N_TOK, f, n_fmt, threads, out, err, sizeof err);
    if (rc) fprintf(stderr, "wk_kv_layer_error: %s: %s\n", wk_strerror(rc), err);
    return rc;
}

/* ---- (d): the independent computation --------------------------------------------------------- */

/* The sidecar's compact blocks of one (layer, head, which) as a dense row-major D x D matrix. */
static void dense(const wk_gguf *sc, int il, int h, wk_wush_tensor which, int D, double *m) {
    char name[64];
    wk_wush_tensor_name(name, sizeof name, il, h, which);
    const wk_gguf_tensor *t = wk_gguf_find_tensor(sc, name);
    CHECK(t != NULL);
    memset(m, 0, sizeof(double) * D * D);
    if (!t) return;
    const float *b = (const float *)t->data;
    for (int k = 0; k < D / BLOCK; k++)
        for (int i = 0; i < BLOCK; i++)
            for (int j = 0; j < BLOCK; j++)
                m[(size_t)(k * BLOCK + i) * D + k * BLOCK + j] = b[((size_t)k * BLOCK + i) * BLOCK + j];
}

static void matvec(const double *m, const double *x, double *y, int D) {
    for (int i = 0; i < D; i++) {
        double s = 0;
        for (int j = 0; j < D; j++) s += m[(size_t)i * D + j] * x[j];
        y[i] = s;
    }
}

/* Quantize + dequantize a head vector through the group-layout entry points. */
static void qdq(int bits, int quant, float rho, const double *x, double *y, int D) {
    uint8_t buf[256];
    float xf[BLOCK], yf[BLOCK];
    for (int g0 = 0; g0 < D; g0 += BLOCK) {
        for (int i = 0; i < BLOCK; i++) xf[i] = (float)x[g0 + i];
        wk_kvq_encode((wk_kvq_kind)quant, bits, BLOCK, rho, xf, buf);
        wk_kvq_decode((wk_kvq_kind)quant, bits, BLOCK, buf, yf);
        for (int i = 0; i < BLOCK; i++) y[g0 + i] = yf[i];
    }
}

/* softmax(scale q.k_j) v_j over the keys query i sees, each row exact inside the windows. */
typedef struct rows {
    const double *k_exact, *v_exact, *k_q, *v_q; /* [n][Hk][D] */
    int sink, recent;
} rows;
static void attn(const wk_hparams *hp, int il, const double *q, const rows *r, int i, int g, double *o) {
    const int D = hp->head_dim, Hk = hp->n_head_kv;
    double s[N_TOK], mx = -INFINITY, sum = 0;
    for (int j = 0; j <= i; j++) {
        s[j] = -INFINITY;
        if (hp->is_swa[il] && i - j >= hp->sliding_window) continue;
        bool exact = j < r->sink || j + r->recent > i;
        const double *k = (exact ? r->k_exact : r->k_q) + ((size_t)j * Hk + g) * D;
        double d = 0;
        for (int x = 0; x < D; x++) d += q[x] * k[x];
        s[j] = hp->attn_scale * d;
        if (s[j] > mx) mx = s[j];
    }
    for (int j = 0; j <= i; j++) sum += s[j] = exp(s[j] - mx);
    for (int x = 0; x < D; x++) o[x] = 0;
    for (int j = 0; j <= i; j++) {
        bool exact = j < r->sink || j + r->recent > i;
        const double *v = (exact ? r->v_exact : r->v_q) + ((size_t)j * Hk + g) * D;
        for (int x = 0; x < D; x++) o[x] += s[j] / sum * v[x];
    }
}

/* Rel MSE after and before W_o of a WUSH format (the sidecar sc; bits, quantizer, windows) for
 * every layer, from the capture. */
static void independent(const wk_capture *cap, const wk_model_desc *d, const wk_gguf *sc, int bits, int quant,
                        int sink, int recent, double *rel_y, double *rel_o) {
    const wk_hparams *hp = &d->hp;
    const int n = cap->n_tokens, D = hp->head_dim, Hq = hp->n_head, Hk = hp->n_head_kv, E = hp->n_embd;
    const size_t nk = (size_t)n * Hk * D, nq = (size_t)n * Hq * D;
    double *tk = malloc(sizeof(double) * D * D), *tq = malloc(sizeof(double) * D * D),
           *tv = malloc(sizeof(double) * D * D), *tvi = malloc(sizeof(double) * D * D);
    double *kx = malloc(nk * sizeof(double)), *vx = malloc(nk * sizeof(double)), *kt = malloc(nk * sizeof(double)),
           *vt = malloc(nk * sizeof(double)), *kq = malloc(nk * sizeof(double)), *vq = malloc(nk * sizeof(double));
    double *o_ref = malloc(nq * sizeof(double)), *o_q = malloc(nq * sizeof(double)), x[TINY_HEAD_DIM],
           y[TINY_HEAD_DIM];
    float *wo = malloc(sizeof(float) * E * Hq * D);
    for (int il = 0; il < hp->n_layer; il++) {
        const wk_gguf_tensor *two = d->layers[il].wo;
        CHECK(wk_dequantize(two->type, two->data, wo, (size_t)E * Hq * D));
        const float *Q = cap->q + (size_t)il * nq, *K = cap->k + (size_t)il * nk, *V = cap->v + (size_t)il * nk;
        for (size_t i = 0; i < nk; i++) kx[i] = K[i], vx[i] = V[i];
        for (int g = 0; g < Hk; g++) {
            dense(sc, il, g, WK_WUSH_K_T, D, tk);
            dense(sc, il, g, WK_WUSH_V_T, D, tv);
            for (int t = 0; t < n; t++) {
                size_t at = ((size_t)t * Hk + g) * D;
                matvec(tk, kx + at, kt + at, D);
                matvec(tv, vx + at, vt + at, D);
                qdq(bits, quant, WK_KVQ_RHO_K, kt + at, kq + at, D);
                qdq(bits, quant, WK_KVQ_RHO_V, vt + at, vq + at, D);
            }
        }
        rows ref = {kx, vx, kx, vx, 0, 0}, fq = {kt, vt, kq, vq, sink, recent};
        for (int h = 0; h < Hq; h++) {
            const int g = h / (Hq / Hk);
            dense(sc, il, g, WK_WUSH_K_TINV_T, D, tq);
            dense(sc, il, g, WK_WUSH_V_TINV, D, tvi);
            for (int i = 0; i < n; i++) {
                for (int k = 0; k < D; k++) x[k] = Q[((size_t)i * Hq + h) * D + k];
                attn(hp, il, x, &ref, i, g, o_ref + ((size_t)i * Hq + h) * D);
                matvec(tq, x, y, D);
                attn(hp, il, y, &fq, i, g, x);
                matvec(tvi, x, o_q + ((size_t)i * Hq + h) * D, D);
            }
        }
        double ey = 0, ry = 0, eo = 0, ro = 0;
        for (int i = 0; i < n; i++) {
            const double *a = o_q + (size_t)i * Hq * D, *b = o_ref + (size_t)i * Hq * D;
            for (int k = 0; k < Hq * D; k++) eo += (a[k] - b[k]) * (a[k] - b[k]), ro += b[k] * b[k];
            for (int e = 0; e < E; e++) {
                double ya = 0, yb = 0;
                for (int k = 0; k < Hq * D; k++) {
                    ya += (double)wo[(size_t)e * Hq * D + k] * a[k];
                    yb += (double)wo[(size_t)e * Hq * D + k] * b[k];
                }
                ey += (ya - yb) * (ya - yb);
                ry += yb * yb;
            }
        }
        rel_y[il] = ey / ry;
        rel_o[il] = eo / ro;
    }
    free(tk), free(tq), free(tv), free(tvi), free(kx), free(vx), free(kt), free(vt), free(kq), free(vq);
    free(o_ref), free(o_q), free(wo);
}

int main(void) {
    char model[64], side[64];
    temp_path(model, sizeof model, "kv_error_model");
    temp_path(side, sizeof side, "kv_error_wush");
    tiny_model_opts mo = {.arch = "gemma3", .seed = 11};
    CHECK(tiny_model_write(&mo, model));

    char err[WK_ERRMSG_LEN] = "";
    wk_engine_params ep;
    tiny_engine_params(&ep, model);
    ep.skip_warmup = true;
    test_engine_params_from_env(&ep);
    wk_engine *e = NULL;
    int rc = wk_engine_open(&ep, &e, err, sizeof err);
    if (rc) {
        fprintf(stderr, "engine: %s\n", err);
        CHECK(0);
        TEST_MAIN_END();
    }
    wk_gguf *g = wk_gguf_open(model, err, sizeof err);
    wk_model_desc *d = malloc(sizeof *d);
    CHECK(g && d);
    CHECK_EQ_INT(wk_model_desc_load(g, d, err, sizeof err), 0);
    const wk_hparams *hp = &d->hp;
    const int L = hp->n_layer;
    CHECK(hp->is_swa[0] && !hp->is_swa[L - 1] && hp->sliding_window < N_TOK);

    /* A WUSH sidecar for this model from other tokens than the evaluated ones. */
    wk_calib_params cp;
    wk_calib_params_default(&cp);
    cp.block = BLOCK;
    wk_calib *c = NULL;
    int32_t tok[N_TOK];
    CHECK_EQ_INT(wk_calib_create(e, &cp, &c, err, sizeof err), 0);
    for (int k = 0; k < 3; k++) {
        tiny_model_tokens(tok, N_TOK, 500 + (uint64_t)k);
        CHECK_EQ_INT(wk_calib_add(c, tok, N_TOK, err, sizeof err), 0);
    }
    CHECK_EQ_INT(wk_calib_finish(c, side, NULL, err, sizeof err), 0);
    wk_calib_destroy(c);
    tiny_model_tokens(tok, N_TOK, 42);

    const int X[3] = {WK_KV_TRANSFORM_NONE, WK_KV_TRANSFORM_HADAMARD, WK_KV_TRANSFORM_WUSH};
    static const char *const xname[3] = {"none", "hadamard", "wush"};
    static const char *const qname[3] = {"quest", "percentile", "absmax"};
    wk_kv_error_layer *out = calloc((size_t)27 * L, sizeof *out), *out2 = calloc((size_t)27 * L, sizeof *out2);
    CHECK(out && out2);

    /* (a) the transform alone */
    wk_kv_error_format fa[3];
    for (int x = 0; x < 3; x++) fa[x] = fmt(16, 0, X[x], side, 0, 0);
    CHECK_EQ_INT(run(e, tok, fa, 3, 0, out), 0);
    for (int x = 0; x < 3; x++) {
        double worst = 0, worst_o = 0;
        for (int il = 0; il < L; il++) {
            const wk_kv_error_layer *r = &out[x * L + il];
            CHECK_EQ_INT(r->layer, il);
            CHECK_EQ_INT(r->swa, hp->is_swa[il]);
            worst = fmax(worst, r->rel_mse);
            worst_o = fmax(worst_o, r->rel_mse_attn);
        }
        printf("(a) no quantization, %-8s: max rel MSE %.2e after W_o, %.2e before\n", xname[x], worst, worst_o);
        if (x == 0) CHECK(worst == 0 && worst_o == 0); /* the very same arithmetic */
        CHECK(worst < 1e-10 && worst_o < 1e-10);
    }

    /* (b) 2 > 3 > 4 bits, per layer, for every quantizer and transform */
    wk_kv_error_format fb[27];
    for (int b = 0; b < 3; b++)
        for (int q = 0; q < 3; q++)
            for (int x = 0; x < 3; x++) fb[(b * 3 + q) * 3 + x] = fmt(2 + b, q, X[x], side, 0, 0);
    CHECK_EQ_INT(run(e, tok, fb, 27, 2, out), 0);
    printf("(b) mean rel MSE after W_o over %d layers (2 / 3 / 4 bits):\n", L);
    for (int q = 0; q < 3; q++)
        for (int x = 0; x < 3; x++) {
            double mean[3] = {0, 0, 0};
            for (int b = 0; b < 3; b++)
                for (int il = 0; il < L; il++) mean[b] += out[((b * 3 + q) * 3 + x) * L + il].rel_mse / L;
            printf("    %-10s %-8s %.4e %.4e %.4e\n", qname[q], xname[x], mean[0], mean[1], mean[2]);
            for (int il = 0; il < L; il++) {
                const double e2 = out[((0 * 3 + q) * 3 + x) * L + il].rel_mse,
                             e3 = out[((1 * 3 + q) * 3 + x) * L + il].rel_mse,
                             e4 = out[((2 * 3 + q) * 3 + x) * L + il].rel_mse;
                CHECK(e2 > e3 && e3 > e4 && e4 > 0 && isfinite(e2));
                if (!(e2 > e3 && e3 > e4 && e4 > 0))
                    fprintf(stderr, "    layer %d: %g %g %g\n", il, e2, e3, e4);
            }
        }
    /* the same numbers with one thread: the split of the work changes nothing */
    CHECK_EQ_INT(run(e, tok, fb, 27, 1, out2), 0);
    CHECK(memcmp(out, out2, sizeof *out * 27 * (size_t)L) == 0);

    /* (c) windows: sink + recent = N_TOK covers every position, N_TOK - 1 leaves key 3 of the last
     * query quantized; a window that covers part lies between. */
    wk_kv_error_format fc[6];
    for (int x = 0; x < 3; x++) {
        fc[2 * x] = fmt(2, 0, X[x], side, 3, N_TOK - 3);
        fc[2 * x + 1] = fmt(2, 0, X[x], side, 3, N_TOK - 4);
    }
    CHECK_EQ_INT(run(e, tok, fc, 6, 0, out2), 0);
    for (int x = 0; x < 3; x++) {
        double worst = 0, least = INFINITY;
        for (int il = 0; il < L; il++) {
            worst = fmax(worst, out2[2 * x * L + il].rel_mse);
            if (!hp->is_swa[il]) least = fmin(least, out2[(2 * x + 1) * L + il].rel_mse);
        }
        printf("(c) %-8s: f16 windows over all: max rel MSE %.2e; one key short: min over global layers %.2e\n",
               xname[x], worst, least);
        if (x == 0) CHECK(worst == 0);
        CHECK(worst < 1e-12);
        CHECK(least > 1e-12); /* key 3 is out of the sliding window of the last query: global layers only */
    }
    wk_kv_error_format fw[2] = {fmt(2, 0, WK_KV_TRANSFORM_WUSH, side, 0, 0),
                                fmt(2, 0, WK_KV_TRANSFORM_WUSH, side, 4, 8)};
    CHECK_EQ_INT(run(e, tok, fw, 2, 0, out2), 0);
    for (int il = 0; il < L; il++) CHECK(out2[L + il].rel_mse < out2[il].rel_mse);

    /* (e) per-layer-class formats: int2 with the sliding layers in int4 is, layer by layer, int4's
     * error on the sliding layers and int2's on the global ones (each layer is evaluated alone). */
    wk_kv_error_format fe[3] = {fmt(2, 0, WK_KV_TRANSFORM_WUSH, side, 0, 0), fmt(4, 0, WK_KV_TRANSFORM_WUSH, side, 0, 0),
                                fmt(2, 0, WK_KV_TRANSFORM_WUSH, side, 0, 0)};
    fe[2].swa_bits = 4;
    CHECK_EQ_INT(run(e, tok, fe, 3, 0, out2), 0);
    int same_class = 0;
    for (int il = 0; il < L; il++)
        same_class += out2[2 * L + il].rel_mse == out2[(hp->is_swa[il] ? 1 : 0) * L + il].rel_mse;
    CHECK_EQ_INT(same_class, L);

    /* (f) windows per layer class: global 2 / 5 with the sliding layers' own 0 / 3 is, layer by
     * layer, the 2 / 5 format's error on the global layers and the 0 / 3 one's on the sliding. */
    wk_kv_error_format ff[3] = {fmt(2, 0, WK_KV_TRANSFORM_WUSH, side, 2, 5), fmt(2, 0, WK_KV_TRANSFORM_WUSH, side, 0, 3),
                                fmt(2, 0, WK_KV_TRANSFORM_WUSH, side, 2, 5)};
    ff[2].swa_windows = true, ff[2].swa_sink = 0, ff[2].swa_recent = 3;
    CHECK_EQ_INT(run(e, tok, ff, 3, 0, out2), 0);
    same_class = 0;
    int n_swa = 0;
    for (int il = 0; il < L; il++) {
        same_class += out2[2 * L + il].rel_mse == out2[(hp->is_swa[il] ? 1 : 0) * L + il].rel_mse;
        n_swa += hp->is_swa[il];
    }
    CHECK_EQ_INT(same_class, L);
    CHECK(n_swa > 0 && n_swa < L); /* both classes are there to tell apart */

    /* (d) independent recomputation from the capture */
    wk_seq *seq = NULL;
    wk_capture cap;
    CHECK_EQ_INT(wk_seq_create(e, &seq), 0);
    CHECK_EQ_INT(wk_capture_run(e, seq, tok, N_TOK, &cap, err, sizeof err), 0);
    wk_seq_destroy(seq);
    wk_gguf *sc = wk_gguf_open(side, err, sizeof err);
    CHECK(sc != NULL);
    const struct { int bits, quant, sink, recent; } cases[2] = {{2, WK_KV_QUANT_QUEST, 2, 5},
                                                                {3, WK_KV_QUANT_PERCENTILE, 0, 0}};
    for (int k = 0; k < 2 && sc; k++) {
        wk_kv_error_format f = fmt(cases[k].bits, cases[k].quant, WK_KV_TRANSFORM_WUSH, side, cases[k].sink,
                                   cases[k].recent);
        CHECK_EQ_INT(run(e, tok, &f, 1, 0, out), 0);
        double ry[TINY_N_CTX], ro[TINY_N_CTX], worst = 0;
        independent(&cap, d, sc, cases[k].bits, cases[k].quant, cases[k].sink, cases[k].recent, ry, ro);
        for (int il = 0; il < L; il++) {
            worst = fmax(worst, fabs(out[il].rel_mse - ry[il]) / ry[il]);
            worst = fmax(worst, fabs(out[il].rel_mse_attn - ro[il]) / ro[il]);
        }
        printf("(d) int%d %s wush sink %d recent %d: layer 0 %.6e (test %.6e); max rel diff over layers %.2e\n",
               cases[k].bits, qname[cases[k].quant], cases[k].sink, cases[k].recent, out[0].rel_mse, ry[0], worst);
        CHECK(worst < 1e-9);
    }
    if (sc) wk_gguf_close(sc);
    wk_capture_free(&cap);

    /* bad formats are refused before any work */
    wk_kv_error_format bad[5] = {fmt(5, 0, 0, NULL, 0, 0), fmt(2, 0, WK_KV_TRANSFORM_WUSH, NULL, 0, 0),
                                 fmt(2, 0, 0, NULL, -1, 0), fmt(2, 0, 0, NULL, 0, 0), fmt(2, 0, 0, NULL, 0, 0)};
    bad[3].swa_bits = 5;
    bad[4].swa_windows = true, bad[4].swa_recent = -1;
    for (int k = 0; k < 5; k++)
        CHECK_EQ_INT(wk_kv_layer_error(e, tok, N_TOK, &bad[k], 1, 0, out, err, sizeof err), WK_ERR_INVALID);

    free(out);
    free(out2);
    free(d);
    wk_gguf_close(g);
    wk_engine_close(e);
    remove(model);
    remove(side);
    TEST_MAIN_END();
}
