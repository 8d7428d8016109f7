/* Weight upload: converts each GGUF tensor into the device format the shaders read. Quantized
 * blocks become q8a16 without loss (quant.c proves it per type), with half pairs (q8h) where every
 * pair is an f16; F32/BF16 matrices are stored as f16, taken only for float models; the
 * WUSH-folded W_v / W_o are rounded into q8a16. A layer's W_q, W_k, W_v and its W_gate, W_up are
 * each stored as one joined matrix (weights.h). */
#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/host_panels.h"
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

/* A matrix in its device format on the host, before upload. */
typedef struct host_matrix {
    wk_wfmt fmt;
    uint32_t rows, cols;
    void *codes; /* q8a, q8h: int8, one per weight; f16: halves */
    float *so;   /* q8a, q8h: (scale, offset) per 16 weights as f32; f16: NULL */
    uint32_t *half_so; /* q8h: the same pairs as halves, one u32 each (what is uploaded) */
} host_matrix;

static size_t code_bytes(const host_matrix *h) {
    return (size_t)h->rows * h->cols * (h->fmt == WK_WFMT_F16 ? 2 : 1);
}
static size_t so_bytes(const host_matrix *h) {
    return (size_t)h->rows * h->cols / 16 * (h->fmt == WK_WFMT_Q8A ? 8 : h->fmt == WK_WFMT_Q8H ? 4 : 0);
}

/* q8a16 pairs that are all halves take the half-pair format (weights.h). */
static void choose_pairs(host_matrix *h) {
    const size_t pairs = (size_t)h->rows * h->cols / 16;
    h->half_so = malloc(pairs * sizeof *h->half_so);
    h->fmt = h->half_so && wk_quant_pairs_to_f16(h->so, pairs, h->half_so) ? WK_WFMT_Q8H : WK_WFMT_Q8A;
    if (h->fmt == WK_WFMT_Q8A) free(h->half_so), h->half_so = NULL; /* (out of memory: f32 pairs) */
}

static void host_free(host_matrix *h) {
    free(h->codes);
    free(h->so);
    free(h->half_so);
    memset(h, 0, sizeof *h);
}

/* A GGUF tensor into h: quantized types into q8a16 exactly, float types into f16. */
static int convert_tensor(const wk_gguf_tensor *t, host_matrix *h, char *err, size_t errlen) {
    memset(h, 0, sizeof *h);
    h->cols = (uint32_t)t->ne[0];
    h->rows = (uint32_t)t->ne[1];
    const size_t n = (size_t)h->cols * h->rows;
    if (h->cols % 16) {
        snprintf(err, errlen, "tensor '%s': row length %u is not a multiple of 16", t->name, h->cols);
        return WK_ERR_UNSUPPORTED;
    }
    int rc = 0;
    if (wk_quant_is_exact_q8a16(t->type)) {
        h->fmt = WK_WFMT_Q8A;
        h->codes = malloc(n);
        h->so = malloc(n / 16 * 2 * sizeof(float));
        if (!h->codes || !h->so) rc = WK_ERR_NOMEM, snprintf(err, errlen, "out of memory converting '%s'", t->name);
        if (!rc && !wk_quant_to_q8a16(t->type, t->data, n, h->codes, h->so))
            rc = WK_ERR_UNSUPPORTED, snprintf(err, errlen, "tensor '%s': cannot convert %s", t->name, wk_ggml_type_name(t->type));
        if (!rc) choose_pairs(h);
    } else {
        h->fmt = WK_WFMT_F16;
        uint16_t *half = h->codes = malloc(n * sizeof *half);
        float *row = malloc(h->cols * sizeof *row);
        if (!half || !row) rc = WK_ERR_NOMEM, snprintf(err, errlen, "out of memory converting '%s'", t->name);
        uint32_t blk_elems = 1, blk_bytes = 0;
        if (!rc && !wk_ggml_type_layout(t->type, &blk_elems, &blk_bytes))
            rc = WK_ERR_UNSUPPORTED, snprintf(err, errlen, "tensor '%s': unsupported type", t->name);
        const size_t row_bytes = (size_t)h->cols / blk_elems * blk_bytes;
        for (uint32_t r = 0; !rc && r < h->rows; r++) {
            if (t->type == WK_GGML_F16) {
                memcpy(half + (size_t)r * h->cols, t->data + r * row_bytes, row_bytes);
                continue;
            }
            if (!wk_dequantize(t->type, t->data + r * row_bytes, row, h->cols)) {
                rc = WK_ERR_UNSUPPORTED;
                snprintf(err, errlen, "tensor '%s' has type %s, which cannot be read", t->name, wk_ggml_type_name(t->type));
                break;
            }
            for (uint32_t c = 0; c < h->cols; c++) half[(size_t)r * h->cols + c] = wk_f32_to_f16(row[c]);
        }
        free(row);
    }
    if (rc) host_free(h);
    return rc;
}

/* An f32 matrix (rows x cols, row-major; cols a multiple of 16) rounded into q8a16: the folded W_v / W_o.
 * Not f16: the int8 kernels are the faster ones on every device we measured (a decode step's
 * matvec_f16 took 0.56 us per thousand elements against matvec_q8a's 0.43, docs/benchmarks.md), and
 * half a step of 255 per 16 elements is far below the 4-6-bit error of the GGUF's own weights. */
static int convert_f32(const float *a, uint32_t rows, uint32_t cols, host_matrix *h, char *err, size_t errlen) {
    *h = (host_matrix){.fmt = WK_WFMT_Q8A, .rows = rows, .cols = cols};
    const size_t n = (size_t)rows * cols;
    if (cols % 16) return snprintf(err, errlen, "folded matrix: row length %u is not a multiple of 16", cols), WK_ERR_UNSUPPORTED;
    h->codes = malloc(n);
    h->so = malloc(n / 16 * 2 * sizeof(float));
    if (!h->codes || !h->so) {
        host_free(h);
        return snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM;
    }
    wk_quant_f32_to_q8a16(a, n, h->codes, h->so);
    choose_pairs(h); /* f32 pairs in practice: halves only where the rounding happens to give them */
    return 0;
}

/* Device buffers for `rows` rows of h's format and width into m (its views: RGBA32UI codes, RG32F
 * scale/offset pairs for q8a, R32UI half pairs for q8h). */
static int create_matrix(wk_vk *vk, const host_matrix *h, uint32_t rows, wk_dev_matrix *m, uint64_t *bytes, char *err,
                         size_t errlen) {
    const host_matrix all = {.fmt = h->fmt, .rows = rows, .cols = h->cols};
    *m = (wk_dev_matrix){.fmt = h->fmt, .rows = rows, .cols = h->cols};
    int rc = wk_vk_buffer_create(vk, &m->codes, code_bytes(&all), WK_MEM_DEVICE, VK_FORMAT_R32G32B32A32_UINT, err, errlen);
    if (!rc && h->fmt != WK_WFMT_F16)
        rc = wk_vk_buffer_create(vk, &m->scales, so_bytes(&all), WK_MEM_DEVICE,
                                 h->fmt == WK_WFMT_Q8H ? VK_FORMAT_R32_UINT : VK_FORMAT_R32G32_SFLOAT, err, errlen);
    if (!rc) *bytes += m->codes.bytes + m->scales.bytes;
    return rc;
}

/* h's rows into m's buffers from row `row0` on. */
static int upload_rows(wk_vk *vk, const host_matrix *h, wk_dev_matrix *m, uint32_t row0, char *err, size_t errlen) {
    const host_matrix before = {.fmt = h->fmt, .rows = row0, .cols = h->cols};
    int rc = wk_vk_upload(vk, &m->codes, code_bytes(&before), h->codes, code_bytes(h), err, errlen);
    if (!rc && h->fmt == WK_WFMT_Q8A) rc = wk_vk_upload(vk, &m->scales, so_bytes(&before), h->so, so_bytes(h), err, errlen);
    if (!rc && h->fmt == WK_WFMT_Q8H)
        rc = wk_vk_upload(vk, &m->scales, so_bytes(&before), h->half_so, so_bytes(h), err, errlen);
    return rc;
}

/* h's codes and the pairs it uploads (f32 for q8a, halves for q8h) rearranged by panels
 * (host/host_panels.h), in place of the row-major ones. */
static int to_panels(host_matrix *h, char *err, size_t errlen) {
    void *pairs = h->fmt == WK_WFMT_Q8A ? (void *)h->so : h->fmt == WK_WFMT_Q8H ? (void *)h->half_so : NULL;
    void *codes = malloc(code_bytes(h)), *panel_pairs = pairs ? malloc(so_bytes(h)) : NULL;
    if (!codes || (pairs && !panel_pairs)) {
        free(codes), free(panel_pairs);
        return snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM;
    }
    wk_host_pack_panels(wk_wfmt_on_host(h->fmt), h->rows, h->cols, h->codes, pairs, codes, panel_pairs);
    free(h->codes);
    h->codes = codes;
    if (h->fmt == WK_WFMT_Q8A) free(h->so), h->so = panel_pairs;
    if (h->fmt == WK_WFMT_Q8H) free(h->half_so), h->half_so = panel_pairs;
    return 0;
}

/* Uploads n host matrices. n > 1, one width and one kind (f16, or q8a16 with either pair form): as
 * one matrix, `joined`, their rows one after another, each parts[i] a view of its rows; otherwise
 * each into its own parts[i] (joined, if given, keeps rows 0). panels: stored by panels for the
 * host's products (wk_weights_upload), each matrix whose rows fit them (a joined one if all its
 * parts' rows do, so that each part starts at a panel). */
static int upload_joined(wk_vk *vk, host_matrix *h, int n, wk_dev_matrix *joined, wk_dev_matrix *const *parts,
                         bool panels, uint64_t *bytes, char *err, size_t errlen) {
    bool one = n > 1 && joined, some_q8a = false;
    uint32_t rows = 0;
    for (int i = 0; i < n; i++) {
        one = one && h[i].cols == h[0].cols && (h[i].fmt == WK_WFMT_F16) == (h[0].fmt == WK_WFMT_F16);
        some_q8a = some_q8a || h[i].fmt == WK_WFMT_Q8A;
        rows += h[i].rows;
    }
    bool all_fit = true;
    for (int i = 0; i < n; i++) all_fit = all_fit && wk_host_panels_fit(h[i].rows, h[i].cols);
    /* Parts in q8a and q8h join as q8a: every pair has its f32 form, and one dispatch for the
     * parts (decode's q/k/v, gate/up) is worth more than the smaller pairs. The q8h parts keep
     * their halves as well (half_scales, weights.h) for the steps that take each part alone
     * (a shader's: not by panels, where the host takes the joined matrix). */
    bool was_half[3] = {false}, some_half = false; /* (q, k, v: the most parts a join has) */
    if (n > 3) return snprintf(err, errlen, "internal: a join of %d matrices", n), WK_ERR_INVALID;
    for (int i = 0; one && some_q8a && i < n; i++) {
        was_half[i] = h[i].fmt == WK_WFMT_Q8H;
        some_half = some_half || was_half[i];
        h[i].fmt = WK_WFMT_Q8A;
    }
    int rc = 0;
    if (!one) {
        for (int i = 0; !rc && i < n; i++) {
            const bool by_panels = panels && wk_host_panels_fit(h[i].rows, h[i].cols);
            if (by_panels) rc = to_panels(&h[i], err, errlen);
            if (!rc) rc = create_matrix(vk, &h[i], h[i].rows, parts[i], bytes, err, errlen);
            if (!rc) rc = upload_rows(vk, &h[i], parts[i], 0, err, errlen);
            parts[i]->host_panels = by_panels;
        }
        return rc;
    }
    panels = panels && all_fit;
    if (panels) some_half = false; /* (the host reads the joined matrix's f32 pairs) */
    for (int i = 0; panels && !rc && i < n; i++) rc = to_panels(&h[i], err, errlen);
    if (!rc) rc = create_matrix(vk, &h[0], rows, joined, bytes, err, errlen);
    joined->host_panels = panels;
    const host_matrix all_half = {.fmt = WK_WFMT_Q8H, .rows = rows, .cols = h[0].cols};
    if (!rc && some_half) {
        rc = wk_vk_buffer_create(vk, &joined->half_scales, so_bytes(&all_half), WK_MEM_DEVICE, VK_FORMAT_R32_UINT, err,
                                 errlen);
        if (!rc) *bytes += joined->half_scales.bytes;
    }
    for (uint32_t i = 0, row0 = 0; !rc && i < (uint32_t)n; row0 += h[i++].rows) {
        rc = upload_rows(vk, &h[i], joined, row0, err, errlen);
        *parts[i] = *joined;
        parts[i]->rows = h[i].rows;
        parts[i]->row0 = row0;
        parts[i]->part = true;
        if (!rc && was_half[i] && !panels) {
            const host_matrix before = {.fmt = WK_WFMT_Q8H, .rows = row0, .cols = h[i].cols};
            const host_matrix mine = {.fmt = WK_WFMT_Q8H, .rows = h[i].rows, .cols = h[i].cols};
            rc = wk_vk_upload(vk, &joined->half_scales, so_bytes(&before), h[i].half_so, so_bytes(&mine), err, errlen);
            parts[i]->fmt = WK_WFMT_Q8H;
            parts[i]->scales = joined->half_scales;
        }
    }
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
 * query head's column block, with the T_V^-1 of its KV head): o = W_o' (P T_V V) = W_o (P V).
 * Into hv and ho, rounded into q8a16. */
static int fold_v(const wk_hparams *hp, const wk_layer_weights *L, const wk_kv_xform *x, int il, host_matrix *hv,
                  host_matrix *ho, char *err, size_t errlen) {
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
    if (!rc) rc = convert_f32(wv2, (uint32_t)(Hk * Dh), (uint32_t)E, hv, err, errlen);
    if (!rc) rc = convert_f32(wo2, (uint32_t)E, (uint32_t)(Hq * Dh), ho, err, errlen);
    free(wv), free(wo), free(wv2), free(wo2), free(acc);
    return rc;
}

/* One tensor as its own matrix (the embedding, the output head); by panels if asked and it fits. */
static int upload_matrix(wk_vk *vk, const wk_gguf_tensor *t, bool panels, wk_dev_matrix *m, uint64_t *bytes,
                         char *err, size_t errlen) {
    host_matrix h;
    int rc = convert_tensor(t, &h, err, errlen);
    if (!rc) rc = upload_joined(vk, &h, 1, NULL, &m, panels, bytes, err, errlen);
    host_free(&h);
    return rc;
}

/* A layer's seven matrices: W_q, W_k, W_v joined, W_o, W_gate and W_up joined, W_down (with the
 * WUSH fold, W_v and W_o folded first). */
static int upload_layer_matrices(wk_vk *vk, const wk_hparams *hp, const wk_layer_weights *L, const wk_kv_xform *xform,
                                 int il, bool panels, wk_dev_layer *D, uint64_t *bytes, char *err, size_t errlen) {
    const bool fold = xform && xform->kind != WK_XFORM_NONE;
    enum { Q, K, V, O, GATE, UP, DOWN, N_MATS };
    const wk_gguf_tensor *src[N_MATS] = {L->wq, L->wk, L->wv, L->wo, L->ffn_gate, L->ffn_up, L->ffn_down};
    host_matrix h[N_MATS] = {0};
    int rc = 0;
    for (int i = 0; !rc && i < N_MATS; i++)
        if (!fold || (i != V && i != O)) rc = convert_tensor(src[i], &h[i], err, errlen);
    if (!rc && fold) rc = fold_v(hp, L, xform, il, &h[V], &h[O], err, errlen);
    wk_dev_matrix *qkv[] = {&D->wq, &D->wk, &D->wv}, *o[] = {&D->wo}, *gu[] = {&D->ffn_gate, &D->ffn_up},
                  *down[] = {&D->ffn_down};
    if (!rc) rc = upload_joined(vk, &h[Q], 3, &D->qkv, qkv, panels, bytes, err, errlen);
    if (!rc) rc = upload_joined(vk, &h[O], 1, NULL, o, panels, bytes, err, errlen);
    if (!rc) rc = upload_joined(vk, &h[GATE], 2, &D->gate_up, gu, panels, bytes, err, errlen);
    if (!rc) rc = upload_joined(vk, &h[DOWN], 1, NULL, down, panels, bytes, err, errlen);
    for (int i = 0; i < N_MATS; i++) host_free(&h[i]);
    if (rc && !strstr(err, "layer")) {
        char inner[WK_ERRMSG_LEN];
        snprintf(inner, sizeof inner, "%s", err);
        snprintf(err, errlen, "layer %d: %s", il, inner);
    }
    return rc;
}

static void free_matrix(wk_vk *vk, wk_dev_matrix *m) {
    if (!m->part) {
        wk_vk_buffer_destroy(vk, &m->codes);
        wk_vk_buffer_destroy(vk, &m->scales);
        wk_vk_buffer_destroy(vk, &m->half_scales);
    }
    memset(m, 0, sizeof *m);
}

/* The matrices' elements by pair format, each stored matrix once (a joined matrix, not its parts). */
static void count_matrix(wk_weights *w, const wk_dev_matrix *m) {
    if (m->part || !m->rows) return;
    w->weights += (uint64_t)m->rows * m->cols;
    if (m->fmt == WK_WFMT_Q8H) w->half_pair_weights += (uint64_t)m->rows * m->cols;
}

static void count_formats(wk_weights *w) {
    count_matrix(w, &w->tok_embd);
    if (!w->tied) count_matrix(w, &w->output);
    for (int il = 0; il < w->n_layer; il++) {
        const wk_dev_layer *D = &w->layers[il];
        const wk_dev_matrix *mats[] = {&D->qkv, &D->gate_up, &D->wq,     &D->wk,      &D->wv,
                                       &D->wo,  &D->ffn_gate, &D->ffn_up, &D->ffn_down};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) count_matrix(w, mats[i]);
    }
}

int wk_weights_upload(wk_vk *vk, const wk_model_desc *m, const wk_kv_xform *xform, wk_weights_panels panels,
                      wk_weights *w, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->n_layer = m->hp.n_layer;
    w->layers = calloc((size_t)w->n_layer, sizeof *w->layers);
    if (!w->layers) return snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM;
    int rc = wk_vk_buffer_create(vk, &w->dummy, 64, WK_MEM_DEVICE, VK_FORMAT_R32G32_SFLOAT, err, errlen);
    /* The embedding by panels only when it is the head too (tied): the embedding shader reads
     * either layout, and only the head's product gains from panels. */
    w->tied = m->output == m->tok_embd;
    if (!rc) rc = upload_matrix(vk, m->tok_embd, panels.head && w->tied, &w->tok_embd, &w->bytes, err, errlen);
    if (!rc && !w->tied) rc = upload_matrix(vk, m->output, panels.head, &w->output, &w->bytes, err, errlen);
    if (!rc) rc = upload_vector(vk, m->output_norm, &w->output_norm, &w->bytes, err, errlen);
    for (int il = 0; !rc && il < w->n_layer; il++) {
        const wk_layer_weights *L = &m->layers[il];
        wk_dev_layer *D = &w->layers[il];
        rc = upload_layer_matrices(vk, &m->hp, L, xform, il, panels.layers, D, &w->bytes, err, errlen);
        const struct { const wk_gguf_tensor *t; wk_buf *b; } vecs[] = {
            {L->attn_norm, &D->attn_norm}, {L->q_norm, &D->q_norm}, {L->k_norm, &D->k_norm},
            {L->post_attn_norm, &D->post_attn_norm}, {L->ffn_norm, &D->ffn_norm}, {L->post_ffn_norm, &D->post_ffn_norm}};
        for (size_t i = 0; !rc && i < sizeof vecs / sizeof *vecs; i++)
            if (vecs[i].t) rc = upload_vector(vk, vecs[i].t, vecs[i].b, &w->bytes, err, errlen);
    }
    if (!rc) count_formats(w);
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
        wk_dev_matrix *mats[] = {&D->wq, &D->wk, &D->wv, &D->wo, &D->ffn_gate, &D->ffn_up, &D->ffn_down, &D->qkv, &D->gate_up};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) free_matrix(vk, mats[i]);
        wk_buf *vecs[] = {&D->attn_norm, &D->q_norm, &D->k_norm, &D->post_attn_norm, &D->ffn_norm, &D->post_ffn_norm};
        for (size_t i = 0; i < sizeof vecs / sizeof *vecs; i++) wk_vk_buffer_destroy(vk, vecs[i]);
    }
    free(w->layers);
    memset(w, 0, sizeof *w);
}
