/* WUSH-KV calibration (research.h's wk_calib_*): accumulates per layer and KV head the second
 * moments of captured queries, keys and values, builds T_K and T_V by the WUSH construction and
 * writes the sidecar (format: wush/wush_sidecar.h); and wk_wush_sidecar_check, which checks a file
 * against an open engine (or a model file), and the model file's fingerprint. */

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "engine_int.h"
#include "wush/wush_sidecar.h"
#include "model/gguf_write.h"
#include "wush/wush_transform.h"
#include "wushkv/research.h"

int wk_wush_sidecar_check(const wk_engine *e, const char *path, int *block_size, char *err, size_t errlen) {
    char gerr[WK_ERRMSG_LEN];
    if (!wk_engine_gguf(e))
        return wk_fail(err, errlen, WK_ERR_INVALID, "the engine released its model file (release_model_file)");
    wk_gguf *sc = wk_gguf_open(path, gerr, sizeof gerr);
    if (!sc) return wk_fail(err, errlen, WK_ERR_FORMAT, "WUSH-KV sidecar %s: %s", path, gerr);
    int rc = wk_wush_sidecar_check_gguf(wk_engine_gguf(e), &wk_engine_desc(e)->hp, sc, block_size, err, errlen);
    wk_gguf_close(sc);
    return rc;
}

int wk_wush_sidecar_check_file(const char *model_path, const char *path, int *block_size, char *err,
                               size_t errlen) {
    char gerr[WK_ERRMSG_LEN];
    wk_gguf *model = wk_gguf_open(model_path, gerr, sizeof gerr);
    if (!model) return wk_fail(err, errlen, WK_ERR_IO, "model %s: %s", model_path, gerr);
    /* The description is only needed for the hyperparameters the check compares. */
    wk_model_desc *desc = malloc(sizeof *desc);
    int rc = desc ? wk_model_desc_load(model, desc, err, errlen) : wk_fail(err, errlen, WK_ERR_NOMEM, "out of memory");
    wk_gguf *sc = NULL;
    if (rc == WK_OK) {
        sc = wk_gguf_open(path, gerr, sizeof gerr);
        if (!sc) rc = wk_fail(err, errlen, WK_ERR_FORMAT, "WUSH-KV sidecar %s: %s", path, gerr);
    }
    if (rc == WK_OK) rc = wk_wush_sidecar_check_gguf(model, &desc->hp, sc, block_size, err, errlen);
    if (sc) wk_gguf_close(sc);
    free(desc);
    wk_gguf_close(model);
    return rc;
}

bool wk_wush_sidecar_has_key_err(const char *path) {
    char gerr[WK_ERRMSG_LEN];
    wk_gguf *sc = wk_gguf_open(path, gerr, sizeof gerr);
    const wk_gguf_kv *kv = sc ? wk_gguf_find(sc, WK_WUSH_KEY_KEY_ERR) : NULL;
    const bool has = kv && kv->type == WK_GGUF_ARRAY && kv->arr_type == WK_GGUF_FLOAT32;
    wk_gguf_close(sc);
    return has;
}

_Static_assert(WK_FINGERPRINT_LEN == WK_MODEL_FINGERPRINT_LEN, "one fingerprint size");

int wk_model_fingerprint_file(const char *model_path, char out[WK_FINGERPRINT_LEN], char *err, size_t errlen) {
    char gerr[WK_ERRMSG_LEN];
    wk_gguf *model = wk_gguf_open(model_path, gerr, sizeof gerr);
    if (!model) return wk_fail(err, errlen, WK_ERR_IO, "model %s: %s", model_path, gerr);
    wk_model_fingerprint(model, out);
    wk_gguf_close(model);
    return WK_OK;
}

int wk_model_head_dim_file(const char *model_path, int *head_dim, char *err, size_t errlen) {
    char gerr[WK_ERRMSG_LEN];
    wk_gguf *model = wk_gguf_open(model_path, gerr, sizeof gerr);
    if (!model) return wk_fail(err, errlen, WK_ERR_IO, "model %s: %s", model_path, gerr);
    wk_model_desc *desc = malloc(sizeof *desc);
    int rc = desc ? wk_model_desc_load(model, desc, err, errlen) : wk_fail(err, errlen, WK_ERR_NOMEM, "out of memory");
    if (rc == WK_OK) *head_dim = desc->hp.head_dim;
    free(desc);
    wk_gguf_close(model);
    return rc;
}

/* ---- the calibrator -------------------------------------------------------------------------- */

enum { N_VM = 3 }; /* value weightings: plain, mass, mass2 */
static const char *const v_moments_name[N_VM] = {"plain", "mass", "mass2"};

/* Accumulators of one (layer, KV head). */
typedef struct head_acc {
    wk_moments gk, gq, gv[N_VM];
    double sink_mass, total_mass;
    /* sum over queries of sum_j p_j^2 |v_j - o|^2 (the output's sensitivity to iid score noise)
     * and of |o|^2, and the queries counted */
    double out_sens, out_energy;
    uint64_t n_queries;
} head_acc;

struct wk_calib {
    wk_engine *e;
    wk_seq *seq;
    const wk_hparams *hp;
    int L, Hq, Hk, D, B, group, n_threads;
    wk_calib_v_moments v_moments;
    char text_name[256];
    head_acc *acc;            /* [L][Hk] */
    wk_calib_head *heads;     /* [L][Hk], filled by finish */
    uint64_t n_tokens, n_chunks;
};

void wk_calib_params_default(wk_calib_params *p) {
    memset(p, 0, sizeof *p);
    p->block = 32;
    p->v_moments = WK_CALIB_V_MASS;
}

void wk_calib_destroy(wk_calib *c) {
    if (!c) return;
    if (c->acc)
        for (int i = 0; i < c->L * c->Hk; i++) {
            wk_moments_free(&c->acc[i].gk);
            wk_moments_free(&c->acc[i].gq);
            for (int v = 0; v < N_VM; v++) wk_moments_free(&c->acc[i].gv[v]);
        }
    free(c->acc);
    free(c->heads);
    wk_seq_destroy(c->seq);
    free(c);
}

int wk_calib_create(wk_engine *e, const wk_calib_params *p, wk_calib **out, char *err, size_t errlen) {
    *out = NULL;
    if (!wk_engine_gguf(e))
        return wk_fail(err, errlen, WK_ERR_INVALID, "the engine released its model file (release_model_file)");
    const wk_hparams *hp = &wk_engine_desc(e)->hp;
    const int D = hp->head_dim, B = p->block ? p->block : 32;
    if (B <= 0 || (B & (B - 1)) || D % B)
        return wk_fail(err, errlen, WK_ERR_INVALID, "block size %d: must be a power of two dividing head_dim %d", B, D);
    if ((unsigned)p->v_moments >= N_VM)
        return wk_fail(err, errlen, WK_ERR_INVALID, "unknown value weighting %d", (int)p->v_moments);
    /* The capture gives values in head_dim slots and T_V is one D x D matrix per head. */
    if (hp->head_dim_v != D)
        return wk_fail(err, errlen, WK_ERR_UNSUPPORTED, "key length %d != value length %d", D, hp->head_dim_v);
    wk_calib *c = calloc(1, sizeof *c);
    if (!c) return wk_fail(err, errlen, WK_ERR_NOMEM, "out of memory");
    c->e = e;
    c->hp = hp;
    c->L = hp->n_layer;
    c->Hq = hp->n_head;
    c->Hk = hp->n_head_kv;
    c->D = D;
    c->B = B;
    c->group = hp->n_head / hp->n_head_kv;
    c->v_moments = p->v_moments;
    snprintf(c->text_name, sizeof c->text_name, "%s", p->text_name ? p->text_name : "");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    c->n_threads = p->n_threads > 0 ? p->n_threads : cpus > 0 ? (int)cpus : 1;
    if (c->n_threads > c->L) c->n_threads = c->L; /* work is split by layer */
    int rc = wk_seq_create(e, &c->seq);
    if (rc) {
        free(c);
        return wk_fail(err, errlen, rc, "no free sequence for calibration");
    }
    c->acc = calloc((size_t)c->L * c->Hk, sizeof *c->acc);
    c->heads = calloc((size_t)c->L * c->Hk, sizeof *c->heads);
    rc = c->acc && c->heads ? 0 : WK_ERR_NOMEM;
    for (int i = 0; !rc && i < c->L * c->Hk; i++) {
        head_acc *a = &c->acc[i];
        rc = wk_moments_init(&a->gk, D, B);
        if (!rc) rc = wk_moments_init(&a->gq, D, B);
        for (int v = 0; !rc && v < N_VM; v++) rc = wk_moments_init(&a->gv[v], D, B);
    }
    if (rc) {
        wk_calib_destroy(c);
        return wk_fail(err, errlen, rc, "out of memory for the moment accumulators");
    }
    *out = c;
    return WK_OK;
}

/* Dot product in float with 8 independent partial sums: vectorizable without -ffast-math, and
 * the order is fixed, so the result does not depend on the thread that computes it. */
static float dot8(const float *a, const float *b, int n) {
    float s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += a[i + k] * b[i + k];
    for (; i < n; i++) s[0] += a[i] * b[i];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

enum { OUT_MAX_D = 1024 }; /* head sizes the output sensitivity is measured for */

typedef struct job {
    wk_calib *c;
    const wk_capture *cap;
    int first, stride; /* layers first, first + stride, ... */
    double *scratch;   /* 3 * n_tokens doubles: scores, mass, mass2 */
} job;

/* One layer of one chunk. Each (layer, KV head) is touched by one thread only, in token order, so
 * the sums are bit-identical whatever the thread count. */
static void accumulate_layer(wk_calib *c, const wk_capture *cap, int il, double *scratch) {
    const int n = cap->n_tokens, D = c->D, Hq = c->Hq, Hk = c->Hk, G = c->group;
    const float *Q = cap->q + (size_t)il * n * Hq * D;
    const float *K = cap->k + (size_t)il * n * Hk * D;
    const float *V = cap->v + (size_t)il * n * Hk * D;
    const int window = c->hp->is_swa[il] ? c->hp->sliding_window : 0;
    const double scale = c->hp->attn_scale; /* the capture divided it out of q */
    double *score = scratch, *mass = scratch + n, *mass2 = scratch + 2 * (size_t)n;
    for (int g = 0; g < Hk; g++) {
        head_acc *a = &c->acc[il * Hk + g];
        wk_moments_add_rows(&a->gk, K + (size_t)g * D, (size_t)n, (size_t)Hk * D);
        wk_moments_add_rows(&a->gv[WK_CALIB_V_PLAIN], V + (size_t)g * D, (size_t)n, (size_t)Hk * D);
        for (int h = g * G; h < (g + 1) * G; h++) /* GQA: query heads g*G .. g*G+G-1 read KV head g */
            wk_moments_add_rows(&a->gq, Q + (size_t)h * D, (size_t)n, (size_t)Hq * D);
        /* Attention as the engine computes it (causal, the layer's sliding window: key j visible
         * to query i iff j <= i and i - j < window), to weigh each value by what it receives. */
        memset(mass, 0, (size_t)n * sizeof *mass);
        memset(mass2, 0, (size_t)n * sizeof *mass2);
        for (int h = g * G; h < (g + 1) * G; h++)
            for (int i = 0; i < n; i++) {
                const float *q = Q + ((size_t)i * Hq + h) * D;
                const int j0 = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
                double max = -INFINITY, sum = 0;
                for (int j = j0; j <= i; j++) {
                    score[j] = scale * dot8(q, K + ((size_t)j * Hk + g) * D, D);
                    if (score[j] > max) max = score[j];
                }
                for (int j = j0; j <= i; j++) sum += score[j] = exp(score[j] - max);
                for (int j = j0; j <= i; j++) {
                    double pr = score[j] / sum;
                    mass[j] += pr;
                    mass2[j] += pr * pr;
                }
                /* Linearised, iid noise e_j of variance s^2 on the scores moves the output by
                 * sum_j p_j e_j (v_j - o): E|do|^2 = s^2 sum_j p_j^2 |v_j - o|^2. */
                if (D <= OUT_MAX_D) {
                    double o[OUT_MAX_D] = {0}, oo = 0, sens = 0;
                    for (int j = j0; j <= i; j++) {
                        const float *v = V + ((size_t)j * Hk + g) * D;
                        const double pr = score[j] / sum;
                        for (int d = 0; d < D; d++) o[d] += pr * v[d];
                    }
                    for (int d = 0; d < D; d++) oo += o[d] * o[d];
                    for (int j = j0; j <= i; j++) {
                        const float *v = V + ((size_t)j * Hk + g) * D;
                        const double pr = score[j] / sum;
                        double e = 0;
                        for (int d = 0; d < D; d++) e += (v[d] - o[d]) * (v[d] - o[d]);
                        sens += pr * pr * e;
                    }
                    a->out_sens += sens;
                    a->out_energy += oo;
                    a->n_queries++;
                }
            }
        for (int j = 0; j < n; j++) {
            const float *v = V + ((size_t)j * Hk + g) * D;
            wk_moments_add_weighted(&a->gv[WK_CALIB_V_MASS], v, mass[j]);
            wk_moments_add_weighted(&a->gv[WK_CALIB_V_MASS2], v, mass2[j]);
            a->total_mass += mass[j];
        }
        a->sink_mass += mass[0];
    }
}

static void *run_job(void *arg) {
    job *j = arg;
    for (int il = j->first; il < j->c->L; il += j->stride) accumulate_layer(j->c, j->cap, il, j->scratch);
    return NULL;
}

int wk_calib_add(wk_calib *c, const int32_t *tokens, int n, char *err, size_t errlen) {
    wk_capture cap;
    int rc = wk_capture_run(c->e, c->seq, tokens, n, &cap, err, errlen);
    if (rc) return rc;
    const int T = c->n_threads;
    job jobs[T];
    pthread_t tids[T];
    bool started[T];
    double *scratch = malloc((size_t)T * 3 * n * sizeof *scratch);
    if (!scratch) {
        wk_capture_free(&cap);
        return wk_fail(err, errlen, WK_ERR_NOMEM, "out of memory");
    }
    for (int t = 0; t < T; t++) {
        jobs[t] = (job){c, &cap, t, T, scratch + (size_t)t * 3 * n};
        /* Thread 0's share runs on this thread; a thread that cannot start has its share run here too. */
        started[t] = t > 0 && pthread_create(&tids[t], NULL, run_job, &jobs[t]) == 0;
    }
    run_job(&jobs[0]);
    for (int t = 1; t < T; t++) {
        if (started[t]) pthread_join(tids[t], NULL);
        else run_job(&jobs[t]);
    }
    free(scratch);
    wk_capture_free(&cap);
    c->n_tokens += (uint64_t)n;
    c->n_chunks++;
    return WK_OK;
}

/* Compact blocks, double -> f32; transpose: each block transposed (T^-T -> T^-1). */
static void blocks_to_f32(int D, int B, const double *src, bool transpose, float *dst) {
    for (int k = 0; k < D / B; k++)
        for (int i = 0; i < B; i++)
            for (int j = 0; j < B; j++) {
                size_t o = (size_t)k * B * B;
                dst[o + (size_t)i * B + j] = (float)(transpose ? src[o + (size_t)j * B + i] : src[o + (size_t)i * B + j]);
            }
}

/* Basename, so the sidecar does not depend on where the text was read from. */
static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Writes the file image to path via path.tmp and rename: readers never see half a sidecar. */
static int write_atomic(const char *path, const uint8_t *bytes, size_t n, char *err, size_t errlen) {
    size_t len = strlen(path) + 8;
    char *tmp = malloc(len);
    if (!tmp) return wk_fail(err, errlen, WK_ERR_NOMEM, "out of memory");
    snprintf(tmp, len, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(bytes, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = false;
    if (ok && rename(tmp, path) != 0) ok = false;
    int rc = ok ? WK_OK : wk_fail(err, errlen, WK_ERR_IO, "cannot write %s", path);
    if (!ok) remove(tmp);
    free(tmp);
    return rc;
}

int wk_calib_finish(wk_calib *c, const char *out_path, wk_calib_report *report, char *err, size_t errlen) {
    if (!c->n_tokens) return wk_fail(err, errlen, WK_ERR_INVALID, "no calibration tokens were added");
    const wk_model_info *info = wk_engine_info(c->e);
    const int L = c->L, Hk = c->Hk, Hq = c->Hq, D = c->D, B = c->B, G = c->group, E = info->n_embd;
    const size_t nb = (size_t)D * B; /* doubles in one compact block-diagonal matrix */
    int rc = WK_OK;
    char fp[WK_FINGERPRINT_LEN];
    wk_model_fingerprint(wk_engine_gguf(c->e), fp);

    wk_gw *w = wk_gw_new();
    float *wo = malloc((size_t)E * Hq * D * sizeof *wo);
    double *m = malloc(10 * nb * sizeof *m);
    float *f32 = malloc(nb * sizeof *f32);
    float *gain_k = malloc((size_t)L * Hk * sizeof *gain_k), *gain_v = malloc((size_t)L * Hk * sizeof *gain_v);
    float *err_k = malloc((size_t)L * Hk * sizeof *err_k);
    wk_wush_block_info *binfo = malloc((size_t)(D / B) * sizeof *binfo);
    wk_moments gwo = {0};
    if (!w || !wo || !m || !f32 || !gain_k || !gain_v || !err_k || !binfo || wk_moments_init(&gwo, D, B)) {
        rc = wk_fail(err, errlen, WK_ERR_NOMEM, "out of memory");
        goto out;
    }
    double *gq = m, *gk = m + nb, *gw = m + 2 * nb, *gv[N_VM] = {m + 3 * nb, m + 4 * nb, m + 5 * nb};
    double *tk = m + 6 * nb, *tk_inv_t = m + 7 * nb, *tv = m + 8 * nb, *tv_inv_t = m + 9 * nb;

    char name[512];
    wk_gw_kv_str(w, "general.architecture", WK_WUSH_ARCH);
    snprintf(name, sizeof name, "WUSH-KV transforms for %s", info->name);
    wk_gw_kv_str(w, "general.name", name);
    wk_gw_kv_u32(w, WK_WUSH_KEY_VERSION, WK_WUSH_VERSION);
    wk_gw_kv_u32(w, WK_WUSH_KEY_BLOCK, (uint32_t)B);
    wk_gw_kv_f32(w, WK_WUSH_KEY_DAMP, (float)WK_WUSH_DAMP);
    wk_gw_kv_str(w, WK_WUSH_KEY_MODEL_NAME, info->name);
    wk_gw_kv_str(w, WK_WUSH_KEY_MODEL_ARCH, info->arch);
    wk_gw_kv_u32(w, WK_WUSH_KEY_N_LAYER, (uint32_t)L);
    wk_gw_kv_u32(w, WK_WUSH_KEY_N_HEAD, (uint32_t)Hq);
    wk_gw_kv_u32(w, WK_WUSH_KEY_N_HEAD_KV, (uint32_t)Hk);
    wk_gw_kv_u32(w, WK_WUSH_KEY_HEAD_DIM, (uint32_t)D);
    wk_gw_kv_u32(w, WK_WUSH_KEY_N_EMBD, (uint32_t)E);
    wk_gw_kv_str(w, WK_WUSH_KEY_FINGERPRINT, fp);
    wk_gw_kv_str(w, WK_WUSH_KEY_TEXT, base_name(c->text_name));
    wk_gw_kv_scalar(w, WK_WUSH_KEY_TOKENS, WK_GGUF_UINT64, &c->n_tokens);
    wk_gw_kv_scalar(w, WK_WUSH_KEY_CHUNKS, WK_GGUF_UINT64, &c->n_chunks);
    wk_gw_kv_str(w, WK_WUSH_KEY_V_MOMENTS, v_moments_name[c->v_moments]);

    const uint64_t ne[3] = {(uint64_t)B, (uint64_t)B, (uint64_t)(D / B)};
    for (int il = 0; il < L && !rc; il++) {
        rc = wk_engine_wo(c->e, il, wo, err, errlen);
        for (int g = 0; g < Hk && !rc; g++) {
            head_acc *a = &c->acc[il * Hk + g];
            wk_calib_head *hd = &c->heads[il * Hk + g];
            char werr[WK_ERRMSG_LEN] = "";
            /* Gram of the W_o columns that read this KV head's values: W_o is n_embd rows of
             * n_head*D, query head h owns columns h*D .. h*D+D-1; pooled over the group. */
            wk_moments_reset(&gwo);
            for (int h = g * G; h < (g + 1) * G; h++) wk_moments_add_rows(&gwo, wo + (size_t)h * D, (size_t)E, (size_t)Hq * D);
            bool ok = wk_moments_mean(&a->gq, gq) && wk_moments_mean(&a->gk, gk) && wk_moments_mean(&gwo, gw);
            for (int v = 0; v < N_VM; v++) ok = ok && wk_moments_mean(&a->gv[v], gv[v]);
            if (!ok) {
                rc = wk_fail(err, errlen, WK_ERR_INVALID, "layer %d head %d: no moments", il, g);
                break;
            }
            *hd = (wk_calib_head){.layer = il, .kv_head = g, .swa = c->hp->is_swa[il],
                                  .sink_mass = a->total_mass > 0 ? a->sink_mass / a->total_mass : 0};
            rc = wk_wush_blockdiag(D, B, gq, gk, WK_WUSH_DAMP, tk, tk_inv_t, binfo, &hd->gain_k, werr);
            /* The key code's predicted harm (wk_calib_head.key_err): the variance of a score's error
             * per unit relative key noise after T_K (both transformed moments of block k have trace
             * sum s_k: sum_k (sum s_k)^2 / B, times the score scale squared), times the output's
             * sensitivity to iid score noise, over the output's energy. */
            double score_var = 0;
            for (int k = 0; !rc && k < D / B; k++) score_var += binfo[k].sum_s * binfo[k].sum_s / B;
            const double scale = c->hp->attn_scale;
            hd->key_err = a->out_energy > 0 ? score_var * scale * scale * a->out_sens / a->out_energy : 0;
            if (!rc) rc = wk_wush_blockdiag(D, B, gw, gv[c->v_moments], WK_WUSH_DAMP, tv, tv_inv_t, NULL, &hd->gain_v, werr);
            for (int v = 0; v < N_VM && !rc; v++)
                rc = wk_wush_predicted_gain(D, B, gw, gv[v], WK_WUSH_DAMP, &hd->gain_v_by[v], werr);
            if (rc) {
                rc = wk_fail(err, errlen, rc, "layer %d head %d: %s", il, g, werr);
                break;
            }
            gain_k[il * Hk + g] = (float)hd->gain_k;
            gain_v[il * Hk + g] = (float)hd->gain_v;
            err_k[il * Hk + g] = (float)hd->key_err;
            const struct { wk_wush_tensor which; const double *src; bool transpose; } out[] = {
                {WK_WUSH_K_T, tk, false}, {WK_WUSH_K_TINV_T, tk_inv_t, false},
                {WK_WUSH_V_T, tv, false}, {WK_WUSH_V_TINV, tv_inv_t, true}, /* (T^-T)^T = T^-1 */
            };
            for (int o = 0; o < 4; o++) {
                char tn[64];
                wk_wush_tensor_name(tn, sizeof tn, il, g, out[o].which);
                blocks_to_f32(D, B, out[o].src, out[o].transpose, f32);
                wk_gw_tensor(w, tn, WK_GGML_F32, 3, ne, f32);
            }
        }
    }
    if (rc) goto out;
    wk_gw_kv_arr_f32(w, WK_WUSH_KEY_GAIN_K, gain_k, (size_t)L * Hk);
    wk_gw_kv_arr_f32(w, WK_WUSH_KEY_GAIN_V, gain_v, (size_t)L * Hk);
    wk_gw_kv_arr_f32(w, WK_WUSH_KEY_KEY_ERR, err_k, (size_t)L * Hk);
    size_t size;
    uint8_t *bytes = wk_gw_bytes(w, &size);
    if (!bytes) {
        rc = wk_fail(err, errlen, WK_ERR_NOMEM, "out of memory building the sidecar");
        goto out;
    }
    rc = write_atomic(out_path, bytes, size, err, errlen);
    free(bytes);
    if (!rc && report) {
        *report = (wk_calib_report){.n_layer = L, .n_head_kv = Hk, .head_dim = D, .block = B,
                                    .v_moments = c->v_moments, .n_tokens = c->n_tokens, .n_chunks = c->n_chunks,
                                    .heads = c->heads};
        snprintf(report->fingerprint, sizeof report->fingerprint, "%s", fp);
    }
out:
    wk_moments_free(&gwo);
    wk_gw_free(w);
    free(wo);
    free(m);
    free(f32);
    free(gain_k);
    free(gain_v);
    free(err_k);
    free(binfo);
    return rc;
}
