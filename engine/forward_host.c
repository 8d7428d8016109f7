/* The forward pass's share on the host CPU when the Vulkan device is the CPU itself (lavapipe):
 * the output head (head_host) and the layers' weight products with the row work between them
 * (linear_host). A shader reads weights at about a quarter of what the host's vector code reads
 * (docs/lavapipe.md "What bounds a decode step"), and on such a device the weights, the
 * activations and the cache are all host memory the host maps coherently, so the only price is a
 * submit a layer: forward.c ends the command buffer before each host part and opens the next after
 * it. The matrices are read in place, in the device's formats (host/host_matmul.h), stored by
 * panels where they fit (host/host_panels.h; weights.c does it at upload for these two parts). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "forward.h"
#include "host/host_layer.h"
#include "wushkv/wushkv.h"

/* m (a matrix or a joined matrix, from its first row) as the host reads it; codes NULL when the
 * device did not map it. */
static wk_host_matrix host_view(const wk_dev_matrix *m) {
    const size_t first = (size_t)m->row0 * m->cols;
    wk_host_matrix h = {.fmt = wk_wfmt_on_host(m->fmt), .rows = m->rows, .cols = m->cols,
                        .layout = m->host_panels ? WK_HOST_PANELS : WK_HOST_ROWS};
    if (!m->codes.map || (m->fmt != WK_WFMT_F16 && !m->scales.map)) return h;
    switch (m->fmt) {
    case WK_WFMT_F16: h.codes = (const uint16_t *)m->codes.map + first; break;
    case WK_WFMT_Q8H:
        h.codes = (const int8_t *)m->codes.map + first;
        h.pairs = (const uint32_t *)m->scales.map + first / 16;
        break;
    default:
        h.codes = (const int8_t *)m->codes.map + first;
        h.pairs = (const float *)m->scales.map + first / 16 * 2;
    }
    return h;
}

static bool mapped(const wk_dev_matrix *m) { return host_view(m).codes != NULL; }

/* Every matrix, norm vector and activation the host parts read or write, mapped. */
static bool layers_mapped(const wk_fwd *f) {
    const wk_acts *a = &f->a;
    const wk_buf *acts[] = {&a->h, &a->xn, &a->q, &a->k, &a->v, &a->attn, &a->o, &a->gate, &a->up, &a->act, &a->ffn};
    for (size_t i = 0; i < sizeof acts / sizeof *acts; i++)
        if (!acts[i]->map) return false;
    if (!f->w->output_norm.map) return false;
    for (int il = 0; il < f->w->n_layer; il++) {
        const wk_dev_layer *L = &f->w->layers[il];
        const wk_buf *norms[] = {&L->attn_norm, &L->post_attn_norm, &L->ffn_norm, &L->post_ffn_norm};
        for (size_t i = 0; i < sizeof norms / sizeof *norms; i++)
            if (norms[i]->buf && !norms[i]->map) return false;
        if (!mapped(&L->wo) || !mapped(&L->ffn_down)) return false;
        if (L->qkv.rows ? !mapped(&L->qkv) : !mapped(&L->wq) || !mapped(&L->wk) || !mapped(&L->wv)) return false;
        if (L->gate_up.rows ? !mapped(&L->gate_up) : !mapped(&L->ffn_gate) || !mapped(&L->ffn_up)) return false;
    }
    return true;
}

/* Whether any matrix a shader multiplies (the layers' without linear_host, the head without
 * head_host) lies by panels, a layout only the host's kernels read (weights.h). */
static bool shader_reads_panels(const wk_fwd *f) {
    if (!f->head_host && wk_weights_output(f->w)->host_panels) return true;
    for (int il = 0; !f->linear_host && il < f->w->n_layer; il++) {
        const wk_dev_layer *L = &f->w->layers[il];
        const wk_dev_matrix *m[] = {&L->qkv, &L->gate_up, &L->wq,       &L->wk,    &L->wv,
                                    &L->wo,  &L->ffn_gate, &L->ffn_up, &L->ffn_down};
        for (size_t i = 0; i < sizeof m / sizeof *m; i++)
            if (m[i]->host_panels) return true;
    }
    return false;
}

int wk_fwd_host_init(wk_fwd *f, char *err, size_t errlen) {
    /* Checked once here rather than at each dispatch: the weights were uploaded for other
     * pipelines than these (wk_fwd_weights_panels). */
    if (shader_reads_panels(f))
        return snprintf(err, errlen, "internal: weights stored by panels for the host, but a shader would multiply "
                        "them (upload them with wk_fwd_weights_panels of these pipelines)"), WK_ERR_INVALID;
    if (!f->head_host && !f->linear_host) return 0;
    if (f->head_host) {
        f->head = host_view(wk_weights_output(f->w));
        if (!f->head.codes)
            return snprintf(err, errlen, "the output head on the host needs its weights in host-mapped memory, and "
                            "device %s did not map them", f->vk->props.deviceName), WK_ERR_UNSUPPORTED;
    }
    if (f->linear_host) {
        if (!layers_mapped(f))
            return snprintf(err, errlen, "the layers' products on the host need the weights and activations in "
                            "host-mapped memory, and device %s did not map them all", f->vk->props.deviceName),
                   WK_ERR_UNSUPPORTED;
        /* A joined q/k/v or gate/up product's rows before they are split. */
        size_t widest = 0;
        for (int il = 0; il < f->w->n_layer; il++) {
            const wk_dev_layer *L = &f->w->layers[il];
            if (L->qkv.rows > widest) widest = L->qkv.rows;
            if (L->gate_up.rows > widest) widest = L->gate_up.rows;
        }
        f->host_scratch = malloc((size_t)f->max_tokens * (widest ? widest : 1) * sizeof(float));
        if (!f->host_scratch) return snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM;
    }
    f->host_isa = wk_host_isa_best();
    f->host_pool = wk_host_pool_create(f->pipes->head_threads, err, errlen);
    return f->host_pool ? 0 : WK_ERR_NOMEM;
}

void wk_fwd_host_free(wk_fwd *f) {
    wk_host_pool_destroy(f->host_pool);
    free(f->host_scratch);
    free(f->xform_cols);
    f->host_pool = NULL;
    f->host_scratch = NULL;
    f->xform_cols = NULL;
}

double wk_fwd_prof_now(const wk_fwd *f) {
    if (!f->pipes->profile) return 0;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

void wk_fwd_prof_since(wk_fwd *f, int slot, double t0) {
    if (!f->pipes->profile) return;
    f->pipes->prof_ms[slot] += wk_fwd_prof_now(f) - t0;
    f->pipes->prof_calls[slot]++;
}

void wk_fwd_host_head(wk_fwd *f, float *out, int n) {
    const double t0 = wk_fwd_prof_now(f);
    wk_host_matmul(f->host_pool, f->host_isa, &f->head, f->a.head_in.map, n, out, (size_t)f->hp->n_vocab);
    wk_fwd_prof_since(f, WK_PROF_HEAD_HOST, t0);
}

static void product(wk_fwd *f, const wk_dev_matrix *W, const void *x, int T, float *y, size_t ldy) {
    const wk_host_matrix m = host_view(W);
    wk_host_matmul(f->host_pool, f->host_isa, &m, x, T, y, ldy);
}

/* Rows [first, first + n) of each of T rows of `ld` floats, to dst (rows of n floats). */
static void split_rows(const float *src, size_t ld, uint32_t first, uint32_t n, int T, float *dst) {
    for (int t = 0; t < T; t++) memcpy(dst + (size_t)t * n, src + (size_t)t * ld + first, n * sizeof(float));
}

/* q, k, v = xn W_q, xn W_k, xn W_v of layer il; q and k into the transform's input when it applies
 * q/k norm and RoPE itself (as op_qkv writes them). */
static void host_qkv(wk_fwd *f, int il, int T) {
    const wk_dev_layer *L = &f->w->layers[il];
    wk_acts *a = &f->a;
    const bool rope = wk_fwd_rope_in_transform(f, L, (uint32_t)T);
    float *q = rope ? f->xform_in.map : a->q.map;
    float *k = rope ? (float *)((char *)f->xform_in.map + f->xform_k_offset) : a->k.map;
    if (L->qkv.rows) {
        product(f, &L->qkv, a->xn.map, T, f->host_scratch, L->qkv.rows);
        split_rows(f->host_scratch, L->qkv.rows, L->wq.row0, L->wq.rows, T, q);
        split_rows(f->host_scratch, L->qkv.rows, L->wk.row0, L->wk.rows, T, k);
        split_rows(f->host_scratch, L->qkv.rows, L->wv.row0, L->wv.rows, T, a->v.map);
        return;
    }
    product(f, &L->wq, a->xn.map, T, q, L->wq.rows);
    product(f, &L->wk, a->xn.map, T, k, L->wk.rows);
    product(f, &L->wv, a->xn.map, T, a->v.map, L->wv.rows);
}

static const float *norm_or_null(const wk_buf *b) { return b->buf ? b->map : NULL; }

/* Layer il after its attention: o = attn W_o, the residual and the FFN's norm, the gated FFN, the
 * residual and the next norm (as record_layers' device ops). */
static void host_after_attention(wk_fwd *f, int il, int T) {
    const wk_hparams *hp = f->hp;
    const wk_dev_layer *L = &f->w->layers[il];
    wk_acts *a = &f->a;
    const int E = hp->n_embd, F = hp->n_ff;
    const bool gelu = hp->ffn_act == WK_FFN_GEGLU;
    product(f, &L->wo, a->attn.map, T, a->o.map, (size_t)E);
    wk_host_add_norm(a->o.map, a->h.map, norm_or_null(&L->post_attn_norm), L->ffn_norm.map, a->xn.map, E, T, hp->eps);
    if (L->gate_up.rows) {
        float *s = f->host_scratch;
        product(f, &L->gate_up, a->xn.map, T, s, L->gate_up.rows);
        wk_host_glu(f->host_pool, s + L->ffn_gate.row0, s + L->ffn_up.row0, L->gate_up.rows, a->act.map, F, T, gelu);
    } else {
        product(f, &L->ffn_gate, a->xn.map, T, a->gate.map, (size_t)F);
        product(f, &L->ffn_up, a->xn.map, T, a->up.map, (size_t)F);
        wk_host_glu(f->host_pool, a->gate.map, a->up.map, (size_t)F, a->act.map, F, T, gelu);
    }
    product(f, &L->ffn_down, a->act.map, T, a->ffn.map, (size_t)E);
    const wk_buf *next = il + 1 < hp->n_layer ? &f->w->layers[il + 1].attn_norm : &f->w->output_norm;
    wk_host_add_norm(a->ffn.map, a->h.map, norm_or_null(&L->post_ffn_norm), next->map, a->xn.map, E, T, hp->eps);
    if (f->debug_layers)
        memcpy((char *)a->debug.map + (size_t)il * T * E * sizeof(float), a->h.map, (size_t)T * E * sizeof(float));
}

void wk_fwd_host_layers(wk_fwd *f, int after, int T) {
    const double t0 = wk_fwd_prof_now(f);
    if (after >= 0) host_after_attention(f, after, T);
    if (after + 1 < f->hp->n_layer) host_qkv(f, after + 1, T);
    wk_fwd_prof_since(f, WK_PROF_LAYERS_HOST, t0);
    if (f->kv_host && after + 1 < f->hp->n_layer) {
        const double t1 = wk_fwd_prof_now(f);
        wk_fwd_host_kv(f, after + 1, T);
        wk_fwd_prof_since(f, WK_PROF_KV_HOST, t1);
    }
}
