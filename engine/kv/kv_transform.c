/* KV transforms: builds or reads the per-head block-diagonal matrices. A Hadamard transform is
 * orthogonal (T^-T = T, T^-1 = T^T); WUSH matrices come from the sidecar that `wushkv calibrate`
 * wrote for this very model file (its fingerprint is checked). */
#include "kv/kv_transform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wush/wush_sidecar.h"
#include "wush/wush_transform.h"
#include "wushkv/wushkv.h"

size_t wk_kv_xform_layer_bytes(const wk_kv_xform *x) {
    return (size_t)x->n_head_kv * 2 * x->head_dim * x->block * sizeof(float);
}

void wk_kv_xform_free(wk_kv_xform *x) {
    free(x->kq);
    free(x->v_t);
    free(x->v_tinv);
    free(x->key_err);
    memset(x, 0, sizeof *x);
}

static int alloc(wk_kv_xform *x, char *err, size_t errlen) {
    const size_t per = (size_t)x->head_dim * x->block, heads = (size_t)x->n_layer * x->n_head_kv;
    x->kq = malloc(heads * 2 * per * sizeof(float));
    x->v_t = malloc(heads * per * sizeof(double));
    x->v_tinv = malloc(heads * per * sizeof(double));
    if (x->kq && x->v_t && x->v_tinv) return 0;
    wk_kv_xform_free(x);
    return snprintf(err, errlen, "out of memory for KV transforms"), WK_ERR_NOMEM;
}

int wk_kv_xform_load(wk_kv_xform *x, wk_xform_kind kind, const char *path, const wk_gguf *model,
                     const wk_hparams *hp, int block, uint64_t seed, char *err, size_t errlen) {
    memset(x, 0, sizeof *x);
    x->kind = kind;
    x->n_layer = hp->n_layer;
    x->n_head_kv = hp->n_head_kv;
    x->head_dim = hp->head_dim;
    if (kind == WK_XFORM_NONE) return 0;
    const int D = hp->head_dim;
    if (kind == WK_XFORM_HADAMARD) {
        if (block <= 0 || block > D || D % block || (block & (block - 1)))
            return snprintf(err, errlen, "Hadamard block %d must be a power of two dividing head_dim %d", block, D),
                   WK_ERR_INVALID;
        x->block = block;
        int rc = alloc(x, err, errlen);
        if (rc) return rc;
        const size_t per = (size_t)D * block;
        double *t = malloc(per * sizeof *t);
        if (!t) return wk_kv_xform_free(x), snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM;
        for (int il = 0; il < hp->n_layer; il++)
            for (int h = 0; h < hp->n_head_kv; h++) {
                size_t at = (size_t)il * hp->n_head_kv + h;
                /* Distinct signs per layer and head: splitmix64's stream differs for each seed. */
                wk_hadamard_signed(D, block, seed + 0x9e3779b97f4a7c15ull * (at + 1), t);
                for (size_t i = 0; i < per; i++) {
                    x->kq[(at * 2 + 0) * per + i] = (float)t[i];
                    x->kq[(at * 2 + 1) * per + i] = (float)t[i]; /* orthogonal: T^-T = T */
                    x->v_t[at * per + i] = t[i];
                }
                /* T^-1 = T^T, block by block */
                for (int b = 0; b < D / block; b++)
                    for (int i = 0; i < block; i++)
                        for (int j = 0; j < block; j++)
                            x->v_tinv[at * per + ((size_t)b * block + i) * block + j] = t[((size_t)b * block + j) * block + i];
            }
        free(t);
        return 0;
    }
    wk_gguf *sc = wk_gguf_open(path, err, errlen);
    if (!sc) return WK_ERR_FORMAT;
    int B = 0;
    int rc = wk_wush_sidecar_check_gguf(model, hp, sc, &B, err, errlen);
    if (!rc) {
        x->block = B;
        rc = alloc(x, err, errlen);
    }
    const size_t per = (size_t)D * B;
    for (int il = 0; !rc && il < hp->n_layer; il++)
        for (int h = 0; !rc && h < hp->n_head_kv; h++) {
            size_t at = (size_t)il * hp->n_head_kv + h;
            rc = wk_wush_sidecar_read(sc, il, h, WK_WUSH_K_T, per, x->kq + (at * 2 + 0) * per, NULL, err, errlen);
            if (!rc) rc = wk_wush_sidecar_read(sc, il, h, WK_WUSH_K_TINV_T, per, x->kq + (at * 2 + 1) * per, NULL, err, errlen);
            if (!rc) rc = wk_wush_sidecar_read(sc, il, h, WK_WUSH_V_T, per, NULL, x->v_t + at * per, err, errlen);
            if (!rc) rc = wk_wush_sidecar_read(sc, il, h, WK_WUSH_V_TINV, per, NULL, x->v_tinv + at * per, err, errlen);
        }
    /* Optional: sidecars made before 2026-12-04 lack it. */
    const wk_gguf_kv *ke = rc ? NULL : wk_gguf_find(sc, WK_WUSH_KEY_KEY_ERR);
    const size_t n_err = (size_t)hp->n_layer * hp->n_head_kv;
    if (ke && ke->type == WK_GGUF_ARRAY && ke->arr_type == WK_GGUF_FLOAT32 && ke->arr_count == n_err) {
        x->key_err = malloc(n_err * sizeof *x->key_err);
        if (!x->key_err) rc = WK_ERR_NOMEM, snprintf(err, errlen, "out of memory");
        else memcpy(x->key_err, ke->arr_data, n_err * sizeof *x->key_err);
    }
    wk_gguf_close(sc);
    if (rc) wk_kv_xform_free(x);
    return rc;
}

int wk_kv_xform_wide_keys(const wk_kv_xform *x, const wk_hparams *hp, bool *wide, char *err, size_t errlen) {
    if (x->kind != WK_XFORM_WUSH) return WK_OK; /* no sidecar to rank by: none */
    if (!x->key_err)
        return snprintf(err, errlen, "the WUSH sidecar has no predicted key error (made before 2026-12-04): make it "
                        "again with wushkv calibrate, or name the layers (--kv-wide-keys) or none"), WK_ERR_INVALID;
    int n_full = 0;
    for (int il = 0; il < hp->n_layer; il++) n_full += hp->is_swa[il] && hp->sliding_window > 0 ? 0 : 1;
    for (int k = 0; k < (n_full + 2) / 3; k++) {
        int best = -1;
        double best_err = -1;
        for (int il = 0; il < hp->n_layer; il++) {
            if (wide[il] || (hp->is_swa[il] && hp->sliding_window > 0)) continue;
            double e = 0;
            for (int h = 0; h < hp->n_head_kv; h++) e += x->key_err[il * hp->n_head_kv + h];
            if (e > best_err) best = il, best_err = e;
        }
        if (best >= 0) wide[best] = true;
    }
    return WK_OK;
}
