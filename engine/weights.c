/* Weight upload: converts each GGUF tensor into the device format the shaders read. Quantized
 * blocks become q8a16 without loss (quant.c proves it per type); F32/BF16 matrices are stored as
 * f16, taken only for float models; the WUSH-folded W_v / W_o are rounded into q8a16. */
#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"
#include "wushkv/wushkv.h"

static int upload_vector(wk_vk *vk, const wk_gguf_tensor *t, wk_buf *b, uint64_t *bytes, char *err, size_t errlen) {
    uint64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    float *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM;
    int rc = 0;
    if (!wk_dequantize(t->type, t->data, tmp, n)) {
        snprintf(err, errlen, "tensor '%s' has type %s, which cannot be read", t->name, wk_ggml_type_name(t->type));
        rc = WK_ERR_UNSUPPORTED;
    }
    if (!rc) rc = wk_vk_buffer_create(vk, b, n * sizeof(float), WK_MEM_DEVICE, VK_FORMAT_UNDEFINED, err, errlen);
    if (!rc) rc = wk_vk_upload(vk, b, 0, tmp, n * sizeof(float), err, errlen);
    if (!rc) *bytes += b->bytes;
    free(tmp);
    return rc;
}

/* codes (n int8) and their scale/offset pairs (n / 16) into m's device buffers. */
static int upload_q8a(wk_vk *vk, const int8_t *codes, const float *so, size_t n, wk_dev_matrix *m, char *err,
                      size_t errlen) {
    m->fmt = WK_WFMT_Q8A;
    int rc = wk_vk_buffer_create(vk, &m->codes, n, WK_MEM_DEVICE, VK_FORMAT_R32G32B32A32_UINT, err, errlen);
    if (!rc) rc = wk_vk_buffer_create(vk, &m->scales, n / 16 * 8, WK_MEM_DEVICE, VK_FORMAT_R32G32_SFLOAT, err, errlen);
    if (!rc) rc = wk_vk_upload(vk, &m->codes, 0, codes, n, err, errlen);
    if (!rc) rc = wk_vk_upload(vk, &m->scales, 0, so, n / 16 * 8, err, errlen);
    return rc;
}

static int upload_matrix(wk_vk *vk, const wk_gguf_tensor *t, wk_dev_matrix *m, uint64_t *bytes, char *err,
                         size_t errlen) {
    memset(m, 0, sizeof *m);
    m->cols = (uint32_t)t->ne[0];
    m->rows = (uint32_t)t->ne[1];
    const size_t n = (size_t)m->cols * m->rows;
    if (m->cols % 16) {
        snprintf(err, errlen, "tensor '%s': row length %u is not a multiple of 16", t->name, m->cols);
        return WK_ERR_UNSUPPORTED;
    }
    int rc = 0;
    if (wk_quant_is_exact_q8a16(t->type)) {
        int8_t *codes = malloc(n);
        float *so = malloc(n / 16 * 2 * sizeof(float));
        if (!codes || !so) rc = WK_ERR_NOMEM, snprintf(err, errlen, "out of memory converting '%s'", t->name);
        if (!rc && !wk_quant_to_q8a16(t->type, t->data, n, codes, so))
            rc = WK_ERR_UNSUPPORTED, snprintf(err, errlen, "tensor '%s': cannot convert %s", t->name, wk_ggml_type_name(t->type));
        if (!rc) rc = upload_q8a(vk, codes, so, n, m, err, errlen);
        free(codes);
        free(so);
    } else {
        m->fmt = WK_WFMT_F16;
        uint16_t *h = malloc(n * sizeof *h);
        float *row = malloc(m->cols * sizeof *row);
        if (!h || !row) rc = WK_ERR_NOMEM, snprintf(err, errlen, "out of memory converting '%s'", t->name);
        uint32_t blk_elems = 1, blk_bytes = 0;
        if (!rc && !wk_ggml_type_layout(t->type, &blk_elems, &blk_bytes))
            rc = WK_ERR_UNSUPPORTED, snprintf(err, errlen, "tensor '%s': unsupported type", t->name);
        const size_t row_bytes = (size_t)m->cols / blk_elems * blk_bytes;
        for (uint32_t r = 0; !rc && r < m->rows; r++) {
            if (t->type == WK_GGML_F16) {
                memcpy(h + (size_t)r * m->cols, t->data + r * row_bytes, row_bytes);
                continue;
            }
            if (!wk_dequantize(t->type, t->data + r * row_bytes, row, m->cols)) {
                rc = WK_ERR_UNSUPPORTED;
                snprintf(err, errlen, "tensor '%s' has type %s, which cannot be read", t->name, wk_ggml_type_name(t->type));
                break;
            }
            for (uint32_t c = 0; c < m->cols; c++) h[(size_t)r * m->cols + c] = wk_f32_to_f16(row[c]);
        }
        if (!rc) rc = wk_vk_buffer_create(vk, &m->codes, n * 2, WK_MEM_DEVICE, VK_FORMAT_R32G32B32A32_UINT, err, errlen);
        if (!rc) rc = wk_vk_upload(vk, &m->codes, 0, h, n * 2, err, errlen);
        free(h);
        free(row);
    }
    if (rc) {
        if (!strstr(err, t->name)) {
            char inner[WK_ERRMSG_LEN];
            snprintf(inner, sizeof inner, "%s", err);
            snprintf(err, errlen, "tensor '%s': %s", t->name, inner);
        }
        return rc;
    }
    *bytes += m->codes.bytes + m->scales.bytes;
    return 0;
}

/* An f32 matrix (rows x cols, row-major; cols a multiple of 16) rounded into q8a16: the folded W_v / W_o.
 * Not f16: the int8 kernels are the faster ones on every device we measured (a decode step's
 * matvec_f16 took 0.56 us per thousand elements against matvec_q8a's 0.43, docs/benchmarks.md), and
 * half a step of 255 per 16 elements is far below the 4-6-bit error of the GGUF's own weights. */
static int upload_f32_as_q8a(wk_vk *vk, const float *a, uint32_t rows, uint32_t cols, wk_dev_matrix *m, uint64_t *bytes,
                             char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    m->rows = rows;
    m->cols = cols;
    const size_t n = (size_t)rows * cols;
    if (cols % 16) return snprintf(err, errlen, "folded matrix: row length %u is not a multiple of 16", cols), WK_ERR_UNSUPPORTED;
    int8_t *codes = malloc(n);
    float *so = malloc(n / 16 * 2 * sizeof(float));
    int rc = codes && so ? 0 : (snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM);
    if (!rc) wk_quant_f32_to_q8a16(a, n, codes, so);
    if (!rc) rc = upload_q8a(vk, codes, so, n, m, err, errlen);
    free(codes);
    free(so);
    if (!rc) *bytes += m->codes.bytes + m->scales.bytes;
    return rc;
}

static float *dequantize_all(const wk_gguf_tensor *t) {
    size_t n = (size_t)t->ne[0] * t->ne[1];
    float *a = malloc(n * sizeof *a);
    if (a && !wk_dequantize(t->type, t->data, a, n)) {
        free(a);
        return NULL;
    }
    return a;
}

/* W_v' = T_V W_v (per KV head, block-diagonal over its head_dim rows) and W_o' = W_o T_V^-1 (per
 * query head's column block, with the T_V^-1 of its KV head): o = W_o' (P T_V V) = W_o (P V). */
static int upload_folded_v(wk_vk *vk, const wk_hparams *hp, const wk_layer_weights *L, const wk_kv_xform *x, int il,
                           wk_dev_layer *D, uint64_t *bytes, char *err, size_t errlen) {
    const int Dh = hp->head_dim, B = x->block, E = hp->n_embd, Hq = hp->n_head, Hk = hp->n_head_kv;
    const size_t per = (size_t)Dh * B;
    float *wv = dequantize_all(L->wv), *wo = dequantize_all(L->wo);
    float *wv2 = malloc(sizeof(float) * (size_t)Hk * Dh * E), *wo2 = malloc(sizeof(float) * (size_t)E * Hq * Dh);
    double *acc = malloc(sizeof(double) * (size_t)(E > Dh ? E : Dh));
    int rc = 0;
    if (!wv || !wo || !wv2 || !wo2 || !acc) rc = WK_ERR_NOMEM, snprintf(err, errlen, "out of memory folding layer %d", il);
    for (int kh = 0; !rc && kh < Hk; kh++) {
        const double *T = x->v_t + ((size_t)il * Hk + kh) * per;
        for (int i = 0; i < Dh; i++) {
            int b0 = i / B * B;
            for (int e = 0; e < E; e++) acc[e] = 0;
            for (int j = 0; j < B; j++) {
                double tij = T[(size_t)i * B + j];
                const float *src = wv + ((size_t)kh * Dh + b0 + j) * E;
                for (int e = 0; e < E; e++) acc[e] += tij * src[e];
            }
            for (int e = 0; e < E; e++) wv2[((size_t)kh * Dh + i) * E + e] = (float)acc[e];
        }
    }
    for (int h = 0; !rc && h < Hq; h++) {
        const double *Ti = x->v_tinv + ((size_t)il * Hk + h / (Hq / Hk)) * per;
        for (int e = 0; e < E; e++) {
            const float *row = wo + (size_t)e * Hq * Dh + (size_t)h * Dh;
            float *out = wo2 + (size_t)e * Hq * Dh + (size_t)h * Dh;
            for (int j = 0; j < Dh; j++) {
                int b0 = j / B * B;
                double s = 0;
                for (int i = 0; i < B; i++) s += (double)row[b0 + i] * Ti[(size_t)(b0 + i) * B + (j - b0)];
                out[j] = (float)s;
            }
        }
    }
    if (!rc) rc = upload_f32_as_q8a(vk, wv2, (uint32_t)(Hk * Dh), (uint32_t)E, &D->wv, bytes, err, errlen);
    if (!rc) rc = upload_f32_as_q8a(vk, wo2, (uint32_t)E, (uint32_t)(Hq * Dh), &D->wo, bytes, err, errlen);
    free(wv), free(wo), free(wv2), free(wo2), free(acc);
    return rc;
}

static void free_matrix(wk_vk *vk, wk_dev_matrix *m) {
    wk_vk_buffer_destroy(vk, &m->codes);
    wk_vk_buffer_destroy(vk, &m->scales);
}

int wk_weights_upload(wk_vk *vk, const wk_model_desc *m, const wk_kv_xform *xform, wk_weights *w, char *err,
                      size_t errlen) {
    const bool fold = xform && xform->kind != WK_XFORM_NONE;
    memset(w, 0, sizeof *w);
    w->n_layer = m->hp.n_layer;
    w->layers = calloc((size_t)w->n_layer, sizeof *w->layers);
    if (!w->layers) return snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM;
    int rc = wk_vk_buffer_create(vk, &w->dummy, 64, WK_MEM_DEVICE, VK_FORMAT_R32G32_SFLOAT, err, errlen);
    if (!rc) rc = upload_matrix(vk, m->tok_embd, &w->tok_embd, &w->bytes, err, errlen);
    w->tied = m->output == m->tok_embd;
    if (!rc && !w->tied) rc = upload_matrix(vk, m->output, &w->output, &w->bytes, err, errlen);
    if (!rc) rc = upload_vector(vk, m->output_norm, &w->output_norm, &w->bytes, err, errlen);
    for (int il = 0; !rc && il < w->n_layer; il++) {
        const wk_layer_weights *L = &m->layers[il];
        wk_dev_layer *D = &w->layers[il];
        const struct { const wk_gguf_tensor *t; wk_dev_matrix *m; } mats[] = {
            {L->wq, &D->wq}, {L->wk, &D->wk}, {L->wv, &D->wv}, {L->wo, &D->wo},
            {L->ffn_gate, &D->ffn_gate}, {L->ffn_up, &D->ffn_up}, {L->ffn_down, &D->ffn_down}};
        for (size_t i = 0; !rc && i < sizeof mats / sizeof *mats; i++) {
            if (fold && (mats[i].m == &D->wv || mats[i].m == &D->wo)) continue;
            rc = upload_matrix(vk, mats[i].t, mats[i].m, &w->bytes, err, errlen);
        }
        if (!rc && fold) rc = upload_folded_v(vk, &m->hp, L, xform, il, D, &w->bytes, err, errlen);
        const struct { const wk_gguf_tensor *t; wk_buf *b; } vecs[] = {
            {L->attn_norm, &D->attn_norm}, {L->q_norm, &D->q_norm}, {L->k_norm, &D->k_norm},
            {L->post_attn_norm, &D->post_attn_norm}, {L->ffn_norm, &D->ffn_norm}, {L->post_ffn_norm, &D->post_ffn_norm}};
        for (size_t i = 0; !rc && i < sizeof vecs / sizeof *vecs; i++)
            if (vecs[i].t) rc = upload_vector(vk, vecs[i].t, vecs[i].b, &w->bytes, err, errlen);
    }
    if (rc) wk_weights_free(vk, w);
    return rc;
}

void wk_weights_free(wk_vk *vk, wk_weights *w) {
    free_matrix(vk, &w->tok_embd);
    free_matrix(vk, &w->output);
    wk_vk_buffer_destroy(vk, &w->output_norm);
    wk_vk_buffer_destroy(vk, &w->dummy);
    for (int il = 0; w->layers && il < w->n_layer; il++) {
        wk_dev_layer *D = &w->layers[il];
        wk_dev_matrix *mats[] = {&D->wq, &D->wk, &D->wv, &D->wo, &D->ffn_gate, &D->ffn_up, &D->ffn_down};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) free_matrix(vk, mats[i]);
        wk_buf *vecs[] = {&D->attn_norm, &D->q_norm, &D->k_norm, &D->post_attn_norm, &D->ffn_norm, &D->post_ffn_norm};
        for (size_t i = 0; i < sizeof vecs / sizeof *vecs; i++) wk_vk_buffer_destroy(vk, vecs[i]);
    }
    free(w->layers);
    memset(w, 0, sizeof *w);
}
