/* WUSH-KV calibration on a tiny random gemma3 model through a Vulkan engine: the capture's layer-0
 * queries, keys and values against a host computation from the GGUF weights; the attention-mass
 * weighting against a host recomputation; the sidecar's contents (shapes, T^-1 T = I), its
 * determinism (byte-identical with another thread count) and its refusal for another model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wush/wush_sidecar.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/quant.h"
#include "ref_forward.h"
#include "engine_int.h"
#include "test_engine_env.h"
#include "test_util.h"
#include "tiny_model.h"
#include "wush/wush_transform.h"
#include "wushkv/research.h"

/* The validation layer is on (p.validation): it must have said nothing by the time an engine closes. */
static void close_checked(wk_engine *e) {
    if (e) CHECK_EQ_INT(wk_engine_validation_messages(e), 0);
    wk_engine_close(e);
}

enum { N_TOK = 24, BLOCK = 32 }; /* 24 > the tiny model's window of 16: the window matters */

/* A tensor as f32; matrices (2-D) of a float type rounded to f16, because that is how weights.c
 * stores them on the device (the tiny model's matrices are F32). */
static float *dequant(const wk_gguf_tensor *t) {
    size_t n = (size_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    float *f = malloc(n * sizeof *f);
    if (f && !wk_dequantize(t->type, t->data, f, n)) {
        free(f);
        return NULL;
    }
    if (f && t->ne[1] > 1 && (t->type == WK_GGML_F32 || t->type == WK_GGML_BF16))
        for (size_t i = 0; i < n; i++) f[i] = wk_f16_to_f32(wk_f32_to_f16(f[i]));
    return f;
}

/* Max over elements of |got - want| / (2^-11 |want| + 1e-6 max|want|): <= 1 when got is want
 * rounded to f16 (half an f16 ulp is at most 2^-11 of the value; the second term covers f16
 * subnormals and the device's f32 sums differing from ours in the last bits). */
static double f16_err(const float *got, const float *want, size_t n) {
    double mx = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(want[i]) > mx) mx = fabs(want[i]);
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (ldexp(fabs(want[i]), -11) + 1e-6 * mx);
        if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

/* (a) Layer 0 from the weights on the host: embedding * scale -> RMSNorm * attn_norm -> W_q/W_k/W_v
 * -> per-head q/k norm -> RoPE (the layer's base); keys and values rounded to f16 as the cache
 * stores them; queries without the attention scale, as the capture promises. */
static void check_capture_layer0(const wk_capture *cap, const wk_model_desc *d, const int32_t *tok, int n) {
    const wk_hparams *hp = &d->hp;
    const wk_layer_weights *L = &d->layers[0];
    const int E = hp->n_embd, D = hp->head_dim, Hq = hp->n_head, Hk = hp->n_head_kv;
    float *emb = dequant(d->tok_embd), *norm = dequant(L->attn_norm), *wq = dequant(L->wq), *wk = dequant(L->wk),
          *wv = dequant(L->wv), *qn = dequant(L->q_norm), *kn = dequant(L->k_norm);
    CHECK(emb && norm && wq && wk && wv && qn && kn);
    if (!(emb && norm && wq && wk && wv && qn && kn)) return;
    float *q = malloc((size_t)n * Hq * D * sizeof *q), *k = malloc((size_t)n * Hk * D * sizeof *k),
          *v = malloc((size_t)n * Hk * D * sizeof *v), x[TINY_N_EMBD];
    const float base = hp->is_swa[0] ? hp->rope_base_swa : hp->rope_base;
    const float fs = hp->is_swa[0] ? 1.0f : hp->rope_freq_scale;
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < E; i++) x[i] = emb[(size_t)tok[t] * E + i] * hp->embd_scale;
        ref_rmsnorm(x, x, norm, E, hp->eps);
        /* ggml layout: one row of E inputs per output */
        for (int o = 0; o < Hq * D; o++) {
            double s = 0;
            for (int i = 0; i < E; i++) s += (double)wq[(size_t)o * E + i] * x[i];
            q[(size_t)t * Hq * D + o] = (float)s;
        }
        for (int o = 0; o < Hk * D; o++) {
            double sk = 0, sv = 0;
            for (int i = 0; i < E; i++) {
                sk += (double)wk[(size_t)o * E + i] * x[i];
                sv += (double)wv[(size_t)o * E + i] * x[i];
            }
            k[(size_t)t * Hk * D + o] = (float)sk;
            v[(size_t)t * Hk * D + o] = (float)sv;
        }
        for (int h = 0; h < Hq; h++) {
            float *qh = q + ((size_t)t * Hq + h) * D;
            ref_rmsnorm(qh, qh, qn, D, hp->eps);
            ref_rope(qh, hp->n_rot, t, base, fs, hp->rope_type);
        }
        for (int h = 0; h < Hk; h++) {
            float *kh = k + ((size_t)t * Hk + h) * D;
            ref_rmsnorm(kh, kh, kn, D, hp->eps);
            ref_rope(kh, hp->n_rot, t, base, fs, hp->rope_type);
        }
    }
    /* Keys and values: the host's f32 values rounded once to f16 (in units of that rounding).
     * Queries stay f32: only summation order and the RoPE table's rounding differ. */
    double ek = f16_err(cap->k, k, (size_t)n * Hk * D), ev = f16_err(cap->v, v, (size_t)n * Hk * D);
    double eq = rel_err(cap->q, q, (size_t)n * Hq * D);
    printf("capture layer 0 vs host: keys %.3f, values %.3f of f16 rounding; queries %.2e max rel err\n", ek, ev, eq);
    CHECK(ek <= 1.0);
    CHECK(ev <= 1.0);
    CHECK(eq < 1e-5);
    free(q);
    free(k);
    free(v);
    free(emb);
    free(norm);
    free(wq);
    free(wk);
    free(wv);
    free(qn);
    free(kn);
}

/* Host recomputation of one chunk's value moments (plain, mass, mass2) for every (layer, KV head),
 * turned into the predicted gain against the W_o Gram: must equal what the calibrator reports for
 * a calibrator fed this one chunk. */
static void check_mass_weighting(wk_engine *e, const wk_hparams *hp, const wk_capture *cap,
                                 const wk_calib_report *rep) {
    const int n = cap->n_tokens, D = hp->head_dim, Hq = hp->n_head, Hk = hp->n_head_kv, G = Hq / Hk, E = hp->n_embd;
    float *wo = malloc((size_t)E * Hq * D * sizeof *wo);
    double *gw = malloc((size_t)D * BLOCK * sizeof *gw), *gv = malloc((size_t)D * BLOCK * sizeof *gv);
    double w[3][N_TOK], p[N_TOK];
    char err[WK_ERRMSG_LEN] = "";
    double worst = 0;
    int windowed = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        CHECK_EQ_INT(wk_engine_wo(e, il, wo, err, sizeof err), 0);
        for (int g = 0; g < Hk; g++) {
            memset(w, 0, sizeof w);
            for (int j = 0; j < n; j++) w[0][j] = 1;
            for (int h = g * G; h < (g + 1) * G; h++)
                for (int i = 0; i < n; i++) {
                    /* key j visible iff j <= i and, on SWA layers, i - j < window */
                    int j0 = hp->is_swa[il] && i - hp->sliding_window + 1 > 0 ? i - hp->sliding_window + 1 : 0;
                    windowed += j0 > 0;
                    double mx = -INFINITY, s = 0;
                    for (int j = j0; j <= i; j++) {
                        double dot = 0;
                        for (int d = 0; d < D; d++)
                            dot += (double)cap->q[(((size_t)il * n + i) * Hq + h) * D + d] *
                                   cap->k[(((size_t)il * n + j) * Hk + g) * D + d];
                        p[j] = hp->attn_scale * dot;
                        if (p[j] > mx) mx = p[j];
                    }
                    for (int j = j0; j <= i; j++) s += p[j] = exp(p[j] - mx);
                    for (int j = j0; j <= i; j++) {
                        w[1][j] += p[j] / s;
                        w[2][j] += (p[j] / s) * (p[j] / s);
                    }
                }
            wk_moments mw, mv;
            wk_moments_init(&mw, D, BLOCK);
            for (int h = g * G; h < (g + 1) * G; h++) wk_moments_add_rows(&mw, wo + (size_t)h * D, E, (size_t)Hq * D);
            wk_moments_mean(&mw, gw);
            for (int vm = 0; vm < 3; vm++) {
                wk_moments_init(&mv, D, BLOCK);
                for (int j = 0; j < n; j++)
                    wk_moments_add_weighted(&mv, cap->v + (((size_t)il * n + j) * Hk + g) * D, w[vm][j]);
                wk_moments_mean(&mv, gv);
                double gain = 0;
                CHECK_EQ_INT(wk_wush_predicted_gain(D, BLOCK, gw, gv, WK_WUSH_DAMP, &gain, NULL), 0);
                double got = rep->heads[il * Hk + g].gain_v_by[vm];
                double rel = fabs(got - gain) / gain;
                if (rel > worst) worst = rel;
                wk_moments_free(&mv);
            }
            wk_moments_free(&mw);
        }
    }
    printf("value-moment gains vs host recomputation: max rel diff %.2e\n", worst);
    CHECK(windowed > 0);  /* the sliding window cut some keys */
    CHECK(worst < 1e-5);  /* float vs double dot products in the softmax only */
    free(wo);
    free(gw);
    free(gv);
}

/* (b) The sidecar as a reader sees it. */
static void check_sidecar(const char *path, const wk_gguf *model, const wk_hparams *hp, const wk_calib_report *rep) {
    char err[WK_ERRMSG_LEN] = "";
    wk_gguf *g = wk_gguf_open(path, err, sizeof err);
    CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    const int D = hp->head_dim, nb = D / BLOCK;
    uint32_t u = 0;
    char s[256] = "";
    CHECK(wk_gguf_get_str(g, "general.architecture", s, sizeof s) && strcmp(s, "wush") == 0);
    CHECK(wk_gguf_get_u32(g, WK_WUSH_KEY_VERSION, &u) && u == WK_WUSH_VERSION);
    CHECK(wk_gguf_get_u32(g, WK_WUSH_KEY_BLOCK, &u) && u == BLOCK);
    CHECK(wk_gguf_get_u32(g, WK_WUSH_KEY_N_LAYER, &u) && u == (uint32_t)hp->n_layer);
    CHECK(wk_gguf_get_u32(g, WK_WUSH_KEY_N_HEAD_KV, &u) && u == (uint32_t)hp->n_head_kv);
    CHECK(wk_gguf_get_u32(g, WK_WUSH_KEY_HEAD_DIM, &u) && u == (uint32_t)D);
    CHECK(wk_gguf_get_u32(g, WK_WUSH_KEY_N_EMBD, &u) && u == (uint32_t)hp->n_embd);
    CHECK(wk_gguf_get_str(g, WK_WUSH_KEY_TEXT, s, sizeof s) && strcmp(s, "chunks.txt") == 0);
    int64_t nt = 0;
    CHECK(wk_gguf_get_i64(g, WK_WUSH_KEY_TOKENS, &nt) && nt == (int64_t)rep->n_tokens);
    char fp[WK_FINGERPRINT_LEN];
    wk_model_fingerprint(model, fp);
    CHECK(wk_gguf_get_str(g, WK_WUSH_KEY_FINGERPRINT, s, sizeof s) && strcmp(s, fp) == 0);
    CHECK(strcmp(rep->fingerprint, fp) == 0);
    const wk_gguf_kv *gk = wk_gguf_find(g, WK_WUSH_KEY_GAIN_K);
    CHECK(gk && gk->type == WK_GGUF_ARRAY && gk->arr_type == WK_GGUF_FLOAT32 &&
          gk->arr_count == (uint64_t)hp->n_layer * hp->n_head_kv);

    double worst_k = 0, worst_v = 0;
    for (int il = 0; il < hp->n_layer; il++)
        for (int h = 0; h < hp->n_head_kv; h++) {
            const wk_gguf_tensor *t[4];
            for (int w = 0; w < 4; w++) {
                char tn[64];
                wk_wush_tensor_name(tn, sizeof tn, il, h, (wk_wush_tensor)w);
                t[w] = wk_gguf_find_tensor(g, tn);
                CHECK(t[w] && t[w]->type == WK_GGML_F32 && t[w]->n_dims == 3 && t[w]->ne[0] == BLOCK &&
                      t[w]->ne[1] == BLOCK && t[w]->ne[2] == (uint64_t)nb);
                if (!t[w]) return;
            }
            if (il == 0 && h == 0) CHECK(strcmp(t[WK_WUSH_K_T]->name, "wush.blk.0.k.0.T") == 0);
            const float *kt = (const float *)t[WK_WUSH_K_T]->data, *kit = (const float *)t[WK_WUSH_K_TINV_T]->data;
            const float *vt = (const float *)t[WK_WUSH_V_T]->data, *vi = (const float *)t[WK_WUSH_V_TINV]->data;
            /* Keys: (T^-T)^T T = I; values: T^-1 T = I, block by block, in double. */
            for (int b = 0; b < nb; b++) {
                const size_t o = (size_t)b * BLOCK * BLOCK;
                for (int i = 0; i < BLOCK; i++)
                    for (int j = 0; j < BLOCK; j++) {
                        double sk = 0, sv = 0;
                        for (int r = 0; r < BLOCK; r++) {
                            sk += (double)kit[o + (size_t)r * BLOCK + i] * kt[o + (size_t)r * BLOCK + j];
                            sv += (double)vi[o + (size_t)i * BLOCK + r] * vt[o + (size_t)r * BLOCK + j];
                        }
                        double id = i == j ? 1.0 : 0.0;
                        if (fabs(sk - id) > worst_k) worst_k = fabs(sk - id);
                        if (fabs(sv - id) > worst_v) worst_v = fabs(sv - id);
                    }
            }
        }
    printf("sidecar: max |T_K^-T^T T_K - I| %.2e, max |T_V^-1 T_V - I| %.2e\n", worst_k, worst_v);
    CHECK(worst_k < 1e-4);
    CHECK(worst_v < 1e-4);

    int block = 0;
    CHECK_EQ_INT(wk_wush_sidecar_check_gguf(model, hp, g, &block, err, sizeof err), WK_OK);
    CHECK_EQ_INT(block, BLOCK);
    /* The model file itself is not a sidecar. */
    CHECK_EQ_INT(wk_wush_sidecar_check_gguf(model, hp, model, NULL, err, sizeof err), WK_ERR_FORMAT);
    wk_gguf_close(g);
}

/* Runs a calibrator over `chunks` chunks of N_TOK tokens and writes path. */
static int calibrate(wk_engine *e, int threads, wk_calib_v_moments vm, int chunks, const char *path,
                     wk_calib **out_c, wk_calib_report *rep) {
    char err[WK_ERRMSG_LEN] = "";
    wk_calib_params p;
    wk_calib_params_default(&p);
    p.block = BLOCK;
    p.n_threads = threads;
    p.v_moments = vm;
    p.text_name = "/some/dir/chunks.txt"; /* recorded as its base name */
    wk_calib *c = NULL;
    int rc = wk_calib_create(e, &p, &c, err, sizeof err);
    int32_t tok[N_TOK];
    for (int k = 0; !rc && k < chunks; k++) {
        tiny_model_tokens(tok, N_TOK, 1000 + (uint64_t)k);
        rc = wk_calib_add(c, tok, N_TOK, err, sizeof err);
    }
    if (!rc) rc = wk_calib_finish(c, path, rep, err, sizeof err);
    if (rc) fprintf(stderr, "calibrate: %s\n", err);
    if (out_c) *out_c = c;
    else wk_calib_destroy(c);
    return rc;
}

int main(void) {
    char model_a[64], model_b[64], side1[64], side2[64], side3[64];
    temp_path(model_a, sizeof model_a, "calibrate_a");
    temp_path(model_b, sizeof model_b, "calibrate_b");
    temp_path(side1, sizeof side1, "calibrate_s1");
    temp_path(side2, sizeof side2, "calibrate_s2");
    temp_path(side3, sizeof side3, "calibrate_s3");
    tiny_model_opts oa = {.arch = "gemma3", .seed = 7}, ob = {.arch = "gemma3", .seed = 8};
    CHECK(tiny_model_write(&oa, model_a));
    CHECK(tiny_model_write(&ob, model_b));

    char err[WK_ERRMSG_LEN] = "";
    wk_engine_params ep;
    tiny_engine_params(&ep, model_a);
    ep.validation = true;
    test_engine_params_from_env(&ep);
    wk_engine *e = NULL;
    int rc = wk_engine_open(&ep, &e, err, sizeof err);
    if (rc) {
        fprintf(stderr, "engine: %s\n", err);
        CHECK(0);
        TEST_MAIN_END();
    }
    wk_gguf *ga = wk_gguf_open(model_a, err, sizeof err), *gb = wk_gguf_open(model_b, err, sizeof err);
    wk_model_desc *da = malloc(sizeof *da), *db = malloc(sizeof *db);
    CHECK(ga && gb && da && db);
    CHECK_EQ_INT(wk_model_desc_load(ga, da, err, sizeof err), 0);
    CHECK_EQ_INT(wk_model_desc_load(gb, db, err, sizeof err), 0);
    const wk_hparams *hp = &da->hp;
    CHECK(hp->qk_norm && hp->is_swa[0] && hp->sliding_window < N_TOK);

    /* (a) capture */
    wk_seq *seq = NULL;
    CHECK_EQ_INT(wk_seq_create(e, &seq), 0);
    int32_t tok[N_TOK];
    tiny_model_tokens(tok, N_TOK, 1000);
    wk_capture cap;
    CHECK_EQ_INT(wk_capture_run(e, seq, tok, N_TOK, &cap, err, sizeof err), 0);
    CHECK_EQ_INT(cap.n_tokens, N_TOK);
    check_capture_layer0(&cap, da, tok, N_TOK);
    wk_seq_destroy(seq); /* the calibrator needs the engine's only sequence */

    /* mass weighting: a calibrator fed exactly this chunk (tiny_model_tokens seed 1000) */
    wk_calib_report rep1;
    wk_calib *c0 = NULL; /* the report's heads live as long as the calibrator */
    CHECK_EQ_INT(calibrate(e, 2, WK_CALIB_V_MASS, 1, side3, &c0, &rep1), 0);
    CHECK_EQ_INT(rep1.n_tokens, N_TOK);
    check_mass_weighting(e, hp, &cap, &rep1);
    wk_calib_destroy(c0);
    wk_capture_free(&cap);

    /* (b) sidecar: written twice with different thread counts, byte-identical */
    wk_calib *c1 = NULL;
    wk_calib_report rep;
    CHECK_EQ_INT(calibrate(e, 1, WK_CALIB_V_MASS, 3, side1, &c1, &rep), 0);
    CHECK_EQ_INT(rep.n_tokens, 3 * N_TOK);
    CHECK_EQ_INT(rep.n_chunks, 3);
    CHECK_EQ_INT(rep.n_layer * rep.n_head_kv, hp->n_layer * hp->n_head_kv);
    for (int i = 0; i < rep.n_layer * rep.n_head_kv; i++) {
        const wk_calib_head *h = &rep.heads[i];
        CHECK(h->gain_k >= 1.0 - 1e-9 && h->gain_v >= 1.0 - 1e-9 && isfinite(h->gain_k) && isfinite(h->gain_v));
        CHECK(h->gain_v == h->gain_v_by[WK_CALIB_V_MASS]);
        CHECK(h->sink_mass > 0 && h->sink_mass < 1);
        CHECK_EQ_INT(h->swa, hp->is_swa[h->layer]);
    }
    check_sidecar(side1, ga, hp, &rep);
    wk_calib_destroy(c1);
    CHECK_EQ_INT(calibrate(e, 3, WK_CALIB_V_MASS, 3, side2, NULL, &rep), 0);
    size_t n1 = 0, n2 = 0;
    uint8_t *b1 = slurp(side1, &n1), *b2 = slurp(side2, &n2);
    CHECK(b1 && b2 && n1 > 0 && n1 == n2 && memcmp(b1, b2, n1) == 0);
    free(b1);
    free(b2);
    /* another weighting changes T_V, so the file; not the keys */
    CHECK_EQ_INT(calibrate(e, 2, WK_CALIB_V_PLAIN, 3, side2, NULL, &rep), 0);
    b1 = slurp(side1, &n1);
    b2 = slurp(side2, &n2);
    CHECK(b1 && b2 && !(n1 == n2 && memcmp(b1, b2, n1) == 0));
    free(b1);
    free(b2);

    /* the sidecar belongs to model A: accepted there, refused for model B (same shapes, other weights) */
    int block = 0;
    CHECK_EQ_INT(wk_wush_sidecar_check(e, side1, &block, err, sizeof err), WK_OK);
    CHECK_EQ_INT(block, BLOCK);
    wk_gguf *s1 = wk_gguf_open(side1, err, sizeof err);
    CHECK(s1 != NULL);
    if (s1) {
        rc = wk_wush_sidecar_check_gguf(gb, &db->hp, s1, NULL, err, sizeof err);
        CHECK_EQ_INT(rc, WK_ERR_INVALID);
        printf("model B refuses A's sidecar: %s\n", err);
        CHECK(strstr(err, "another model") != NULL);
        wk_gguf_close(s1);
    }
    CHECK_EQ_INT(wk_wush_sidecar_check(e, "/nonexistent/x.wush", NULL, err, sizeof err), WK_ERR_FORMAT);
    /* bad parameters are refused before anything runs */
    wk_calib_params bad;
    wk_calib_params_default(&bad);
    bad.block = 48;
    wk_calib *cb = NULL;
    CHECK_EQ_INT(wk_calib_create(e, &bad, &cb, err, sizeof err), WK_ERR_INVALID);
    CHECK(cb == NULL);

    close_checked(e);
    wk_gguf_close(ga);
    wk_gguf_close(gb);
    free(da);
    free(db);
    remove(model_a);
    remove(model_b);
    remove(side1);
    remove(side2);
    remove(side3);
    TEST_MAIN_END();
}
