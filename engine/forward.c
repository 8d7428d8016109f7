/* The forward pass, one step = one command buffer = one submit (plus one per extra chunk of
 * logits rows; with the layers' products on the host, linear_host, one a layer, forward_host.c
 * doing its part between them, and with kv_host forward_host_kv.c the q/k norm, RoPE, transform and
 * KV store too; with attn_host a step runs all its layers there, forward_host_attn.c). Per layer it reads like the math:
 *   norm -> q,k,v -> q/k norm + RoPE + KV store -> attention -> Wo -> residual(+post-norm) + norm
 *   -> gate,up -> GLU -> down -> residual(+post-norm) + next norm
 * and ends with the output head over the rows that want logits. */
#include "forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wushkv/wushkv.h"

#define TRY(expr)              \
    do {                       \
        int rc_ = (expr);      \
        if (rc_) return rc_;   \
    } while (0)

static int make(wk_fwd *f, wk_buf *b, uint64_t bytes, wk_mem_kind kind, VkFormat view, char *err, size_t errlen) {
    return wk_vk_buffer_create(f->vk, b, bytes, kind, view, err, errlen);
}

/* cos/sin of pos * freq_scale * base^(-2i/n_rot), in double on the host: GPU sin/cos of large
 * angles are not trusted, and a table costs one fetch. Table 0 = global layers, 1 = SWA layers. */
static int build_rope_table(wk_fwd *f, char *err, size_t errlen) {
    const wk_hparams *hp = f->hp;
    const int half = hp->n_rot / 2;
    const size_t n = (size_t)2 * f->max_ctx * half;
    float *tab = malloc(n * 2 * sizeof *tab);
    if (!tab) return snprintf(err, errlen, "out of memory"), WK_ERR_NOMEM;
    for (int which = 0; which < 2; which++) {
        double base = which == 0 ? hp->rope_base : hp->rope_base_swa;
        /* Gemma's local layers use scale 1 regardless of the model's rope scaling (as llama.cpp). */
        double scale = which == 0 ? hp->rope_freq_scale : (hp->arch == WK_ARCH_GEMMA3 ? 1.0 : hp->rope_freq_scale);
        for (int pos = 0; pos < f->max_ctx; pos++)
            for (int i = 0; i < half; i++) {
                double theta = pos * scale * pow(base, -2.0 * i / hp->n_rot);
                size_t at = (((size_t)which * f->max_ctx + pos) * half + i) * 2;
                tab[at] = (float)cos(theta);
                tab[at + 1] = (float)sin(theta);
            }
    }
    int rc = make(f, &f->a.rope, n * 2 * sizeof *tab, WK_MEM_DEVICE, VK_FORMAT_R32G32_SFLOAT, err, errlen);
    if (!rc) rc = wk_vk_upload(f->vk, &f->a.rope, 0, tab, n * 2 * sizeof *tab, err, errlen);
    free(tab);
    return rc;
}

/* Block-table entries one step may carry: every slot's whole context, one entry per layer group. */
static uint64_t wk_fwd_max_tables(const wk_fwd *f) {
    const wk_kv_layout *l = &f->kv->layout;
    return (uint64_t)f->kv->n_slots * (((uint64_t)f->max_ctx + l->block_tokens - 1) / l->block_tokens + 1) *
           (uint64_t)l->n_groups;
}

int wk_fwd_init(wk_fwd *f, wk_vk *vk, wk_pipelines *pipes, const wk_hparams *hp, const wk_weights *w,
                wk_kv_cache *kv, int max_tokens, int max_ctx, bool debug_layers, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    f->vk = vk;
    f->pipes = pipes;
    f->hp = hp;
    f->w = w;
    f->kv = kv;
    f->max_tokens = max_tokens;
    f->max_ctx = max_ctx;
    f->debug_layers = debug_layers;
    /* Logit rows per submit: bounded by the storage-buffer range (a vocab row is ~1 MiB for Gemma). */
    uint64_t row_bytes = (uint64_t)hp->n_vocab * 4;
    uint64_t cap = vk->props.limits.maxStorageBufferRange / row_bytes;
    if (cap > 64) cap = 64;
    if (cap < 1) return snprintf(err, errlen, "vocabulary of %d is too large for one logits row", hp->n_vocab), WK_ERR_UNSUPPORTED;
    f->logit_rows = (int)cap < max_tokens ? (int)cap : max_tokens;
    /* On the host the head takes every row of a step at once: its weights stream from memory once. */
    f->head_host = pipes->head_host;
    f->linear_host = pipes->linear_host;
    f->kv_host = pipes->kv_host && pipes->linear_host && kv;
    f->attn_host = f->kv_host && pipes->attn_host;
    if (f->head_host) f->logit_rows = max_tokens;

    const uint64_t T = (uint64_t)max_tokens, E = (uint64_t)hp->n_embd, F = (uint64_t)hp->n_ff;
    const uint64_t QD = (uint64_t)hp->n_head * hp->head_dim, KD = (uint64_t)hp->n_head_kv * hp->head_dim;
    const VkFormat V4 = VK_FORMAT_R32G32B32A32_SFLOAT, NONE = VK_FORMAT_UNDEFINED;
    wk_acts *a = &f->a;
    int rc = 0;
    if (!rc) rc = make(f, &a->tokens, T * 4, WK_MEM_HOST, NONE, err, errlen);
    if (!rc) rc = make(f, &a->rows, T * sizeof(wk_row_info), WK_MEM_HOST, NONE, err, errlen);
    if (!rc) rc = make(f, &a->tables, wk_fwd_max_tables(f) * 4, WK_MEM_HOST, NONE, err, errlen);
    if (!rc && wk_attn_lane_chunks((uint32_t)hp->head_dim, vk->subgroup_size) > WK_ATTN_MAXC)
        rc = WK_ERR_UNSUPPORTED, snprintf(err, errlen, "head_dim %d is too large for the attention at subgroup size %u",
                                          hp->head_dim, vk->subgroup_size);
    if (!rc) {
        rc = make(f, &a->tiles, T * sizeof(wk_attn_tile), WK_MEM_HOST, NONE, err, errlen);
        if (!rc) rc = make(f, &a->win_dest, 2 * T * 4, WK_MEM_HOST, NONE, err, errlen); /* per window class */
        uint32_t window_keys = 0; /* the larger class window: a prefill step's window pass splits by it */
        for (int c = 0; kv && c < 2; c++) {
            const uint32_t k = (uint32_t)(kv->layout.win[c].sink + kv->layout.win[c].recent);
            if (k > window_keys) window_keys = k;
        }
        f->attn_part_rows = wk_attn_part_rows((uint32_t)max_tokens, (uint32_t)hp->n_head, (uint32_t)max_ctx, window_keys,
                                              f->pipes->attn_gpu_splits);
        /* Written as a storage buffer by the passes, read as RGBA32F texels by attention_reduce. */
        if (!rc) rc = make(f, &a->attn_part, f->attn_part_rows * (hp->head_dim / 4 + 1) * 16, WK_MEM_DEVICE, V4, err, errlen);
    }
    if (!rc) rc = make(f, &a->h, T * E * 4, WK_MEM_DEVICE, NONE, err, errlen);
    if (!rc) rc = make(f, &a->xn, T * E * 4, WK_MEM_DEVICE, V4, err, errlen);
    if (!rc) rc = make(f, &a->q, T * QD * 4, WK_MEM_DEVICE, V4, err, errlen);
    if (!rc) rc = make(f, &a->k, T * KD * 4, WK_MEM_DEVICE, NONE, err, errlen);
    if (!rc) rc = make(f, &a->v, T * KD * 4, WK_MEM_DEVICE, NONE, err, errlen);
    /* k16, v16: RG32UI texels of four halves, how attention_paged reads this step's window keys. */
    if (!rc) rc = make(f, &a->k16, T * KD * 2, WK_MEM_DEVICE, VK_FORMAT_R32G32_UINT, err, errlen);
    if (!rc) rc = make(f, &a->v16, T * KD * 2, WK_MEM_DEVICE, VK_FORMAT_R32G32_UINT, err, errlen);
    if (!rc) rc = make(f, &a->attn, T * QD * 4, WK_MEM_DEVICE, V4, err, errlen);
    if (!rc) rc = make(f, &a->o, T * E * 4, WK_MEM_DEVICE, NONE, err, errlen);
    if (!rc) rc = make(f, &a->gate, T * F * 4, WK_MEM_DEVICE, NONE, err, errlen);
    if (!rc) rc = make(f, &a->up, T * F * 4, WK_MEM_DEVICE, NONE, err, errlen);
    if (!rc) rc = make(f, &a->act, T * F * 4, WK_MEM_DEVICE, V4, err, errlen);
    if (!rc) rc = make(f, &a->ffn, T * E * 4, WK_MEM_DEVICE, NONE, err, errlen);
    if (!rc)
        rc = make(f, &a->head_in, (uint64_t)f->logit_rows * E * 4, f->head_host ? WK_MEM_HOST : WK_MEM_DEVICE, V4, err,
                  errlen);
    if (!rc && !f->head_host) rc = make(f, &a->logits, (uint64_t)f->logit_rows * row_bytes, WK_MEM_HOST, NONE, err, errlen);
    if (!rc) rc = wk_fwd_host_init(f, err, errlen);
    if (!rc && debug_layers) rc = make(f, &a->debug, (uint64_t)hp->n_layer * T * E * 4, WK_MEM_HOST, NONE, err, errlen);
    if (!rc) rc = build_rope_table(f, err, errlen);
    if (!rc) rc = wk_fwd_host_kv_init(f, err, errlen);
    if (!rc) rc = wk_fwd_host_attn_init(f, err, errlen);
    if (rc) wk_fwd_free(f);
    return rc;
}

void wk_fwd_free(wk_fwd *f) {
    if (!f->vk) return;
    wk_buf *all[] = {&f->a.tokens, &f->a.rows, &f->a.tables, &f->a.tiles, &f->a.attn_part, &f->a.win_dest, &f->a.h, &f->a.xn, &f->a.q, &f->a.k, &f->a.v, &f->a.k16, &f->a.v16, &f->a.attn,
                     &f->a.o, &f->a.gate, &f->a.up, &f->a.act, &f->a.ffn, &f->a.head_in, &f->a.logits,
                     &f->a.rope, &f->a.debug, &f->a.cap_q, &f->a.cap_k, &f->a.cap_v, &f->xform_buf, &f->xform_in};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) wk_vk_buffer_destroy(f->vk, all[i]);
    wk_fwd_host_free(f);
    wk_fwd_host_attn_free(f);
    memset(f, 0, sizeof *f);
}

int wk_fwd_set_transform(wk_fwd *f, const wk_kv_xform *x, char *err, size_t errlen) {
    wk_vk_buffer_destroy(f->vk, &f->xform_buf);
    wk_vk_buffer_destroy(f->vk, &f->xform_in);
    f->xform = NULL;
    int rc = wk_fwd_host_kv_set_transform(f, x, err, errlen); /* the host's copy by panels, or none */
    if (rc || !x || x->kind == WK_XFORM_NONE) return rc;
    if (f->kv_host) return f->xform = x, 0; /* no device copy: with kv_host no shader reads one */
    const size_t bytes = wk_kv_xform_layer_bytes(x) * (size_t)x->n_layer;
    if (x->block % 4)
        return snprintf(err, errlen, "KV transform block %d: the shader takes multiples of 4", x->block),
               WK_ERR_UNSUPPORTED;
    rc = make(f, &f->xform_buf, bytes, WK_MEM_DEVICE, VK_FORMAT_R32G32B32A32_SFLOAT, err, errlen);
    if (!rc) rc = wk_vk_upload(f->vk, &f->xform_buf, 0, x->kq, bytes, err, errlen);
    const uint64_t T = (uint64_t)f->max_tokens, D = (uint64_t)f->hp->head_dim;
    f->xform_k_offset = (T * f->hp->n_head * D * 4 + 255) / 256 * 256;
    if (!rc) rc = make(f, &f->xform_in, f->xform_k_offset + T * f->hp->n_head_kv * D * 4, WK_MEM_DEVICE,
                       VK_FORMAT_R32G32B32A32_SFLOAT, err, errlen);
    if (!rc && f->linear_host && !f->xform_in.map)
        rc = WK_ERR_UNSUPPORTED, snprintf(err, errlen, "the layers' products on the host need the transform's input mapped");
    if (!rc) f->xform = x;
    return rc;
}

int wk_fwd_enable_capture(wk_fwd *f, char *err, size_t errlen) {
    if (f->capture) return 0;
    if (f->kv->fmt.bits != 16 || f->xform)
        return snprintf(err, errlen, "calibration capture needs the f16 KV cache without transforms"), WK_ERR_UNSUPPORTED;
    const uint64_t per = (uint64_t)f->hp->n_layer * f->max_tokens * f->hp->head_dim;
    int rc = make(f, &f->a.cap_q, per * f->hp->n_head * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, errlen);
    if (!rc) rc = make(f, &f->a.cap_k, per * f->hp->n_head_kv * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, errlen);
    if (!rc) rc = make(f, &f->a.cap_v, per * f->hp->n_head_kv * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, errlen);
    f->capture = rc == 0;
    return rc;
}

/* Copies this layer's post-RoPE queries, keys and values (f32; the keys and values are what the
 * store rounds to f16 next, wk_capture_run rounds them the same way) into the capture buffers. */
static void record_capture(wk_fwd *f, int il, uint32_t T) {
    wk_vk *vk = f->vk;
    const wk_hparams *hp = f->hp;
    const VkDeviceSize q_row = (VkDeviceSize)hp->n_head * hp->head_dim * 4;
    const VkDeviceSize kv_row = (VkDeviceSize)hp->n_head_kv * hp->head_dim * 4;
    VkBufferCopy q = {.srcOffset = 0, .dstOffset = (VkDeviceSize)il * f->max_tokens * q_row, .size = T * q_row};
    VkBufferCopy kv = {.srcOffset = 0, .dstOffset = (VkDeviceSize)il * f->max_tokens * kv_row, .size = T * kv_row};
    vkCmdCopyBuffer(vk->cmd, f->a.q.buf, f->a.cap_q.buf, 1, &q);
    vkCmdCopyBuffer(vk->cmd, f->a.k.buf, f->a.cap_k.buf, 1, &kv);
    vkCmdCopyBuffer(vk->cmd, f->a.v.buf, f->a.cap_v.buf, 1, &kv);
}

/* ---- ops: each records one dispatch ---- */

typedef struct { wk_fwd *f; char *err; size_t errlen; } rec;

static wk_arg S(const wk_buf *b) { return wk_arg_buf(b->buf); }
static wk_arg TV(const wk_buf *b) { return wk_arg_view(b->view); }

/* Splits a large 1-D grid into 2-D: vocab-sized dispatches exceed the 65535 workgroups per axis. */
static void grid_1d(uint32_t groups, uint32_t *gx, uint32_t *gy) {
    *gx = groups < 32768 ? (groups ? groups : 1) : 32768;
    *gy = (groups + *gx - 1) / *gx;
}

/* matvec's pipeline for W's format: plain, the q/k/v split or the fused gate/up (matvec.comp's SC_MODE). */
typedef enum { MATVEC_PLAIN, MATVEC_QKV, MATVEC_GLU } matvec_mode;
static wk_pipe_id matvec_pipe(const wk_dev_matrix *W, matvec_mode m) {
    return wk_pipe_for_format(m == MATVEC_QKV   ? WK_PIPE_MATVEC_QKV_Q8A
                              : m == MATVEC_GLU ? WK_PIPE_MATVEC_GLU_Q8A
                                                : WK_PIPE_MATVEC_Q8A,
                              W->fmt);
}

/* W's scale/offset pairs for binding 1 of a weight kernel; the f16 format has none (a dummy). */
static wk_arg scales_arg(const wk_fwd *f, const wk_dev_matrix *W) {
    return W->fmt == WK_WFMT_F16 ? TV(&f->w->dummy) : TV(&W->scales);
}

/* A matvec dispatch (1 to 4 tokens): W's rows from pc->row0, outputs split over ys by pc->n0 /
 * pc->n1, or, for the gate/up pipelines, act(gate) * up into ys[0] (matvec.comp). */
static int op_matvec(rec *r, const wk_dev_matrix *W, const wk_buf *x, const wk_arg ys[3], const wk_pc_matmul *pc,
                     matvec_mode mode) {
    wk_fwd *f = r->f;
    wk_arg args[6] = {TV(&W->codes), scales_arg(f, W), TV(x), ys[0], ys[1], ys[2]};
    uint32_t gx, gy;
    grid_1d(wk_matvec_groups(f->pipes, pc->N), &gx, &gy);
    return wk_dispatch(f->vk, f->pipes, matvec_pipe(W, mode), args, pc, sizeof *pc, gx, gy, 1, r->err, r->errlen);
}

/* y = x W^T over W's rows (W may be a part of a joined matrix, from its row0); or, for a longer
 * step with the "cpu" kernels and W a layer's W_gate (glu), y = act(x W_gate^T) * (x W_up^T) in
 * one matmul_glu dispatch: up row n sits at row0 + N + n, W_up's rows following W_gate's in the
 * joined matrix. */
static int op_matmul_mode(rec *r, const wk_dev_matrix *W, const wk_buf *x, const wk_buf *y, uint32_t T, bool glu) {
    wk_fwd *f = r->f;
    wk_pc_matmul pc = {.N = W->rows, .K = W->cols, .T = T, .row0 = W->row0, .n0 = W->rows,
                       .act = f->hp->ffn_act == WK_FFN_GEGLU};
    if (T <= 4 && !glu) {
        const wk_arg ys[3] = {S(y), S(y), S(y)};
        return op_matvec(r, W, x, ys, &pc, MATVEC_PLAIN);
    }
    wk_arg args[4] = {TV(&W->codes), scales_arg(f, W), TV(x), S(y)};
    /* "gpu" kernels (variant matmul=tiled): 64 x 64 tiles through shared memory (matmul_tiled.comp) */
    const bool tiled = f->pipes->matmul_tiled;
    const wk_pipe_id pipe = wk_pipe_for_format(tiled ? WK_PIPE_MATMUL_TILED_Q8A
                                               : glu ? WK_PIPE_MATMUL_GLU_Q8A
                                                     : WK_PIPE_MATMUL_Q8A,
                                               W->fmt);
    uint32_t gx, gy;
    /* a gate/up invocation's tile: half its rows are outputs */
    wk_matmul_grid(tiled, glu ? 2 * W->rows : W->rows, T, &gx, &gy);
    return wk_dispatch(f->vk, f->pipes, pipe, args, &pc, sizeof pc, gx, gy, 1, r->err, r->errlen);
}
static int op_matmul(rec *r, const wk_dev_matrix *W, const wk_buf *x, const wk_buf *y, uint32_t T) {
    return op_matmul_mode(r, W, x, y, T, false);
}

/* The scratch kv_transform reads: the queries (from 0), the keys (from xform_k_offset) of T tokens. */
static wk_arg xform_in_q(const wk_fwd *f) {
    return (wk_arg){.buf = f->xform_in.buf, .offset = 0, .range = f->xform_k_offset};
}
static wk_arg xform_in_k(const wk_fwd *f, uint32_t T) {
    return (wk_arg){.buf = f->xform_in.buf, .offset = f->xform_k_offset,
                    .range = (VkDeviceSize)T * f->hp->n_head_kv * f->hp->head_dim * 4};
}

/* Whether the decode-shaped step (T tokens) of layer L runs q/k norm and RoPE inside the key
 * transform (kv_transform_decode_rope): a transform, a q/k/v matvec (which writes q and k straight
 * into the transform's input), the variant on, and RoPE in whole texels (n_rot a multiple of 8). */
bool wk_fwd_rope_in_transform(const wk_fwd *f, const wk_dev_layer *L, uint32_t T) {
    return f->xform && !f->kv_host && T <= 4 && L->qkv.rows && f->pipes->transform_rope && f->hp->n_rot % 8 == 0 &&
           f->hp->n_rot <= f->hp->head_dim;
}

/* q, k, v = xn W_q, xn W_k, xn W_v: one matvec over the joined matrix for a decode-sized step (a
 * dispatch, not three), else one product each. With RoPE in the transform (rope, the layer's
 * rope_in_transform), q and k go to its input. */
static int op_qkv(rec *r, const wk_dev_layer *L, uint32_t T, bool rope) {
    wk_acts *a = &r->f->a;
    if (T <= 4 && L->qkv.rows) {
        wk_pc_matmul pc = {.N = L->qkv.rows, .K = L->qkv.cols, .T = T, .n0 = L->wq.rows, .n1 = L->wk.rows};
        const wk_arg ys[3] = {rope ? xform_in_q(r->f) : S(&a->q), rope ? xform_in_k(r->f, T) : S(&a->k), S(&a->v)};
        return op_matvec(r, &L->qkv, &a->xn, ys, &pc, MATVEC_QKV);
    }
    TRY(op_matmul(r, &L->wq, &a->xn, &a->q, T));
    TRY(op_matmul(r, &L->wk, &a->xn, &a->k, T));
    return op_matmul(r, &L->wv, &a->xn, &a->v, T);
}

static int op_glu(rec *r, uint32_t T) {
    wk_fwd *f = r->f;
    wk_arg args[3] = {S(&f->a.gate), S(&f->a.up), S(&f->a.act)};
    wk_pc_glu pc = {.n = T * (uint32_t)f->hp->n_ff, .act = f->hp->ffn_act == WK_FFN_GEGLU};
    uint32_t gx, gy;
    grid_1d((pc.n + 63) / 64, &gx, &gy);
    return wk_dispatch(f->vk, f->pipes, WK_PIPE_GLU, args, &pc, sizeof pc, gx, gy, 1, r->err, r->errlen);
}

/* act = act(xn W_gate) * (xn W_up): one product over the joined matrix that applies the activation
 * itself (a matvec for a decode-sized step, matmul_glu_* for a longer one with the "cpu" kernels),
 * else the two products and op_glu. */
static int op_gated_ffn_in(rec *r, const wk_dev_layer *L, uint32_t T) {
    wk_fwd *f = r->f;
    wk_acts *a = &f->a;
    if (T <= 4 && L->gate_up.rows) {
        /* the shader reads up row r at row0 + N + r: W_up's rows follow W_gate's in the joined matrix */
        wk_pc_matmul pc = {.N = L->ffn_gate.rows, .K = L->gate_up.cols, .T = T, .row0 = L->ffn_gate.row0,
                           .n0 = L->ffn_gate.rows, .act = f->hp->ffn_act == WK_FFN_GEGLU};
        const wk_arg ys[3] = {S(&a->act), S(&a->act), S(&a->act)};
        return op_matvec(r, &L->gate_up, &a->xn, ys, &pc, MATVEC_GLU);
    }
    /* W_gate's rows as a view of the joined matrix in its own format (W_gate alone may be a q8h view
     * of a q8a join whose W_up has no halves, weights.h), so the gate/up matmul reads W_up too. The
     * tiled kernel has no such mode. */
    if (L->gate_up.rows && !f->pipes->matmul_tiled) {
        wk_dev_matrix gate_in_join = L->gate_up;
        gate_in_join.rows = L->ffn_gate.rows;
        gate_in_join.row0 = L->ffn_gate.row0;
        return op_matmul_mode(r, &gate_in_join, &a->xn, &a->act, T, true);
    }
    TRY(op_matmul(r, &L->ffn_gate, &a->xn, &a->gate, T));
    TRY(op_matmul(r, &L->ffn_up, &a->xn, &a->up, T));
    wk_vk_barrier(f->vk);
    return op_glu(r, T);
}

static int op_embed(rec *r, uint32_t T) {
    wk_fwd *f = r->f;
    const wk_dev_matrix *W = &f->w->tok_embd;
    wk_arg args[4] = {TV(&W->codes), scales_arg(f, W), S(&f->a.tokens), S(&f->a.h)};
    wk_pc_embed pc = {.n_embd = W->cols, .n_tokens = T, .scale = f->hp->embd_scale, .panels = W->host_panels};
    uint32_t gx, gy;
    grid_1d((T * (W->cols / 16) + 63) / 64, &gx, &gy);
    return wk_dispatch(f->vk, f->pipes, wk_pipe_for_format(WK_PIPE_EMBED_Q8A, W->fmt), args, &pc, sizeof pc, gx, gy, 1,
                       r->err, r->errlen);
}

static int op_rmsnorm(rec *r, const wk_buf *x, const wk_buf *w, const wk_buf *y, uint32_t T) {
    wk_arg args[3] = {S(x), S(w), S(y)};
    wk_pc_rmsnorm pc = {.n = (uint32_t)r->f->hp->n_embd, .n_rows = T, .eps = r->f->hp->eps};
    return wk_dispatch(r->f->vk, r->f->pipes, WK_PIPE_RMSNORM, args, &pc, sizeof pc, T, 1, 1, r->err, r->errlen);
}

/* h += post ? norm(a)*post : a; xn = norm(h)*next */
static int op_add_norm(rec *r, const wk_buf *a, const wk_buf *post, const wk_buf *next, uint32_t T) {
    wk_fwd *f = r->f;
    const bool has_post = post->buf != VK_NULL_HANDLE;
    wk_arg args[5] = {S(a), S(&f->a.h), has_post ? S(post) : S(next), S(next), S(&f->a.xn)};
    wk_pc_add_norm pc = {.n = (uint32_t)f->hp->n_embd, .n_rows = T, .eps = f->hp->eps, .has_post = has_post};
    return wk_dispatch(f->vk, f->pipes, WK_PIPE_ADD_NORM, args, &pc, sizeof pc, T, 1, 1, r->err, r->errlen);
}

/* Layer il's first row in the cos/sin table: the sliding-window layers' own table follows the global one. */
static uint32_t rope_table_offset(const wk_fwd *f, int il) {
    return f->hp->is_swa[il] ? (uint32_t)(f->max_ctx * (f->hp->n_rot / 2)) : 0;
}

static int op_qk_norm_rope(rec *r, int il, uint32_t T) {
    wk_fwd *f = r->f;
    const wk_hparams *hp = f->hp;
    const wk_dev_layer *L = &f->w->layers[il];
    const bool has_norm = hp->qk_norm;
    /* In place, or into kv_transform's input when a transform follows. */
    const bool out_of_place = f->xform != NULL;
    const wk_arg qo = out_of_place ? xform_in_q(f) : S(&f->a.q);
    const wk_arg ko = out_of_place ? xform_in_k(f, T) : S(&f->a.k);
    wk_arg args[8] = {S(&f->a.q), S(&f->a.k),
                      has_norm ? S(&L->q_norm) : S(&f->w->output_norm), has_norm ? S(&L->k_norm) : S(&f->w->output_norm),
                      TV(&f->a.rope), S(&f->a.rows), qo, ko};
    wk_pc_qk_norm_rope pc = {
        .head_dim = (uint32_t)hp->head_dim, .n_head = (uint32_t)hp->n_head, .n_head_kv = (uint32_t)hp->n_head_kv,
        .n_rot = (uint32_t)hp->n_rot, .rope_neox = hp->rope_type == WK_ROPE_NEOX, .has_norm = has_norm,
        .n_tokens = T, .rope_table_offset = rope_table_offset(f, il),
        .eps = hp->eps, .q_scale = hp->attn_scale};
    return wk_dispatch(f->vk, f->pipes, WK_PIPE_QK_NORM_ROPE, args, &pc, sizeof pc, T,
                       (uint32_t)(hp->n_head + hp->n_head_kv), 1, r->err, r->errlen);
}

/* Fills the paged-cache push constants shared by the store and the attention, in the format of
 * the layer's class (kv_cache.h: with per-layer-class formats a sliding layer's blocks are the
 * second pool's, which table entries already name by their block in pool_buf). */
static void paged_geometry(const wk_fwd *f, int il, wk_pc_attention_paged *pc) {
    const wk_kv_cache *kv = f->kv;
    const wk_hparams *hp = f->hp;
    const bool own = wk_kv_cache_group_swa(kv, kv->group_of[il]);
    const wk_kv_fmt *fmt = own ? &kv->swa_fmt : &kv->fmt;
    const wk_kv_layout *l = own ? &kv->swa_layout : &kv->layout;
    /* Wide keys (kv_pool.h): the keys' own width and slab layout; otherwise the values'. */
    const bool wide = kv->key_wide[il];
    const wk_kvq_block_layout *qk = wide ? &l->qk : &l->q;
    const uint32_t half_dim = (uint32_t)hp->head_dim / 2;
    *pc = (wk_pc_attention_paged){
        .head_dim = (uint32_t)hp->head_dim, .n_head = (uint32_t)hp->n_head, .n_head_kv = (uint32_t)hp->n_head_kv,
        .window = hp->is_swa[il] ? (uint32_t)hp->sliding_window : 0, .win_layer = (uint32_t)kv->win_layer_of[il],
        .kind = (int32_t)fmt->kind, .bits = fmt->bits, .group = fmt->group,
        .block_tokens = (uint32_t)l->block_tokens, .slab_words = (uint32_t)(l->slab_bytes / 4),
        .block_words = (uint32_t)(l->bytes_per_block / 4), .params_words = (uint32_t)(l->q.params_offset / 4),
        .code_words = fmt->bits == 16 ? half_dim : (uint32_t)(l->q.code_bytes_per_token / 4),
        .k_off = kv->k_word[il], .table_stride = (uint32_t)l->n_groups, .table_col = (uint32_t)kv->group_of[il],
        .v_off = kv->v_word[il], .k_bits = wide ? l->key_bits : fmt->bits,
        .k_slab_words = (uint32_t)((wide ? l->key_slab_bytes : l->slab_bytes) / 4),
        .k_params_words = (uint32_t)(qk->params_offset / 4),
        .k_code_words = fmt->bits == 16 ? half_dim : (uint32_t)(qk->code_bytes_per_token / 4)};
}

/* Whether layer il's f16 window rows go in with its codes (kv_store_quant's win_store) rather than
 * through kv_store_window after the attention: a decode-shaped step (window_early), a quantized
 * cache, a window for the layer's class. The one rule both places read. */
static bool window_with_codes(const wk_fwd *f, int il) {
    const wk_kv_win *win = &f->kv->layout.win[f->kv->win_class_of[il]];
    return f->window_early[f->kv->win_class_of[il]] && f->kv->fmt.bits != 16 && win->sink + win->recent > 0;
}

void wk_fwd_store_quant_pc(const wk_fwd *f, int il, uint32_t T, wk_pc_kv_store_quant *pc) {
    wk_pc_attention_paged g;
    paged_geometry(f, il, &g);
    const bool own = wk_kv_cache_group_swa(f->kv, f->kv->group_of[il]);
    *pc = (wk_pc_kv_store_quant){.head_dim = g.head_dim, .n_head_kv = g.n_head_kv, .n_tokens = T,
                               .k_off = g.k_off, .kind = g.kind, .bits = g.bits, .group = g.group,
                               .rank_k = own ? f->kv->swa_rank_k : f->kv->rank_k,
                               .rank_v = own ? f->kv->swa_rank_v : f->kv->rank_v, .block_tokens = g.block_tokens,
                               .slab_words = g.slab_words, .block_words = g.block_words,
                               .params_words = g.params_words, .code_words = g.code_words,
                               .table_stride = g.table_stride, .table_col = g.table_col,
                               .quest_c2 = own ? f->kv->swa_quest_c2 : f->kv->quest_c2, .v_off = g.v_off,
                               .k_bits = g.k_bits, .k_slab_words = g.k_slab_words, .k_params_words = g.k_params_words,
                               .k_code_words = g.k_code_words,
                               .k_quest_c2 = f->kv->key_wide[il] ? f->kv->key_quest_c2
                                             : own             ? f->kv->swa_quest_c2
                                                               : f->kv->quest_c2};
    const int c = f->kv->win_class_of[il];
    pc->win_store = window_with_codes(f, il);
    pc->win_layer = (uint32_t)f->kv->win_layer_of[il];
    pc->dest_base = (uint32_t)c * T;
    const wk_kv_win *win = &f->kv->layout.win[c];
    pc->copy_f16 = win->sink + win->recent > 0;
}

/* Quantizes this step's keys (post-RoPE, in a.k) and values into their blocks. */
static int op_kv_store_quant(rec *r, int il, uint32_t T) {
    wk_fwd *f = r->f;
    wk_pc_kv_store_quant pc;
    wk_fwd_store_quant_pc(f, il, T, &pc);
    wk_arg args[8] = {S(&f->a.k),           S(&f->a.v),         S(&f->a.rows),   S(&f->a.tables),
                      TV(&f->kv->pool_buf), S(&f->a.win_dest), S(&f->a.k16), S(&f->a.v16)};
    uint32_t gx, gy;
    /* Each token's key and value heads: an invocation each, or a subgroup each (store_lanes). */
    const bool lanes = f->pipes->store_lanes;
    const uint32_t heads = T * pc.n_head_kv * 2, sg = f->vk->subgroup_size;
    grid_1d(lanes ? heads : (heads + sg - 1) / sg, &gx, &gy);
    const wk_pipe_id pipe = lanes ? WK_PIPE_KV_STORE_QUANT_LANES : WK_PIPE_KV_STORE_QUANT;
    return wk_dispatch(f->vk, f->pipes, pipe, args, &pc, sizeof pc, gx, gy, 1, r->err, r->errlen);
}

void wk_fwd_attention_pc(const wk_fwd *f, int il, wk_pc_attention_paged *pc) {
    paged_geometry(f, il, pc);
    const wk_kv_win *w = &f->kv->layout.win[f->kv->win_class_of[il]];
    pc->sink = (uint32_t)w->sink, pc->recent = (uint32_t)w->recent;
    pc->f16_row_words = (uint32_t)(w->row_bytes / 4), pc->win_off = (uint32_t)(w->offset / 4);
}

static int op_attention_paged(rec *r, int il, uint32_t T) {
    wk_fwd *f = r->f;
    wk_pc_attention_paged pc;
    wk_fwd_attention_pc(f, il, &pc);
    /* f16 reads its slabs through the RG32UI view, four halves a fetch. */
    const wk_arg pool = pc.bits == 16 ? wk_arg_view(f->kv->pool_view2) : TV(&f->kv->pool_buf);
    wk_arg args[9] = {TV(&f->a.q), S(&f->a.rows), S(&f->a.tables), pool, S(&f->a.attn), S(&f->a.tiles),
                      wk_arg_buf_view(f->a.attn_part.buf, f->a.attn_part.view), TV(&f->a.k16), TV(&f->a.v16)};
    const wk_attn_splits splits = wk_attn_plan_splits(&f->plan, f->step_rows, T, pc.n_head, pc.window, pc.sink,
                                                      pc.recent, f->attn_part_rows, f->pipes->attn_gpu_splits);
    const wk_attn_set set = f->kv->key_wide[il]                                   ? WK_ATTN_SET_WIDE
                            : wk_kv_cache_group_swa(f->kv, f->kv->group_of[il]) ? WK_ATTN_SET_SWA
                                                                                : WK_ATTN_SET_MAIN;
    return wk_attn_record(f->vk, f->pipes, &f->plan, splits, set, T, &pc, args, r->err, r->errlen);
}

/* This step's keys and values (f16) into the window rows wk_fwd_step chose, after the attention:
 * copied from k16 / v16, which kv_store_quant rounded (a layer with windows always has them). */
static int op_kv_store_window(rec *r, int il, uint32_t T) {
    wk_fwd *f = r->f;
    const int c = f->kv->win_class_of[il];
    wk_pc_kv_store_window pc = {.head_dim = (uint32_t)f->hp->head_dim, .n_head_kv = (uint32_t)f->hp->n_head_kv,
                                .n_tokens = T, .win_layer = (uint32_t)f->kv->win_layer_of[il],
                                .dest_base = (uint32_t)c * T};
    wk_arg args[4] = {S(&f->a.k16), S(&f->a.v16), S(&f->a.win_dest), TV(&f->kv->pool_buf)};
    uint32_t gx, gy;
    grid_1d((T * 2 * pc.n_head_kv * (pc.head_dim / 2) + 63) / 64, &gx, &gy);
    return wk_dispatch(f->vk, f->pipes, WK_PIPE_KV_STORE_WINDOW, args, &pc, sizeof pc, gx, gy, 1, r->err, r->errlen);
}

/* q' = T^-T q, k' = T k after RoPE, with this layer's matrices: from xform_in (qk_norm_rope's
 * output, or with rope_in_transform the matvec's, normed and rotated as they are read) into q and k. */
static int op_kv_transform(rec *r, int il, uint32_t T, bool rope) {
    wk_fwd *f = r->f;
    const wk_hparams *hp = f->hp;
    const wk_dev_layer *L = &f->w->layers[il];
    const bool has_norm = hp->qk_norm;
    wk_arg args[8] = {S(&f->a.q), S(&f->a.k), TV(&f->xform_buf), TV(&f->xform_in),
                      has_norm ? S(&L->q_norm) : S(&f->w->output_norm), has_norm ? S(&L->k_norm) : S(&f->w->output_norm),
                      TV(&f->a.rope), S(&f->a.rows)};
    /* Tiles of wk_xform_step_units units (a token's query heads of one KV head, or its key), so
     * each matrix fetch serves that many; a step of fewer than WK_XFORM_TOKENS tokens (decode)
     * takes the twin whose tile is one token's query heads (wk_pipelines_specialize_transform). */
    const bool twin = T < WK_XFORM_TOKENS;
    const uint32_t sg = f->vk->subgroup_size;
    const uint32_t tile = twin ? wk_xform_decode_units(hp->n_head, hp->n_head_kv) : wk_xform_step_units(f->xform->block);
    wk_pc_kv_transform pc = {.head_dim = (uint32_t)hp->head_dim, .n_head = (uint32_t)hp->n_head,
                             .n_head_kv = (uint32_t)hp->n_head_kv, .n_tokens = T, .block = (uint32_t)f->xform->block,
                             .mat_base = (uint32_t)(wk_kv_xform_layer_bytes(f->xform) * (size_t)il / 16),
                             .k_in_base = (uint32_t)(f->xform_k_offset / 16),
                             /* qk_norm_rope's, for the rope pipeline */
                             .n_rot = (uint32_t)hp->n_rot, .rope_neox = hp->rope_type == WK_ROPE_NEOX,
                             .has_norm = has_norm, .rope_table_offset = rope_table_offset(f, il), .eps = hp->eps,
                             .q_scale = hp->attn_scale};
    const wk_pipe_id pipe = rope ? WK_PIPE_KV_TRANSFORM_DECODE_ROPE : twin ? WK_PIPE_KV_TRANSFORM_DECODE : WK_PIPE_KV_TRANSFORM;
    /* x: a head's row tiles in subgroup-sized workgroups; y: the unit tiles. */
    return wk_dispatch(f->vk, f->pipes, pipe, args, &pc, sizeof pc, wk_xform_groups_x(pc.head_dim, f->xform->block, sg),
                       wk_xform_tiles(T, hp->n_head, hp->n_head_kv, tile),
                       1, r->err, r->errlen);
}

void wk_fwd_store_f16_pc(const wk_fwd *f, int il, uint32_t T, wk_pc_kv_store_f16 *pc) {
    wk_pc_attention_paged g;
    paged_geometry(f, il, &g);
    *pc = (wk_pc_kv_store_f16){.head_dim = g.head_dim, .n_head_kv = g.n_head_kv, .n_tokens = T,
                               .slab_layer = (uint32_t)f->kv->slot_of[il], .block_tokens = g.block_tokens,
                               .slab_words = g.slab_words, .block_words = g.block_words,
                               .table_stride = g.table_stride, .table_col = g.table_col};
}

/* The f16 cache: this step's keys and values, rounded to f16, into their blocks. */
static int op_kv_store_f16(rec *r, int il, uint32_t T) {
    wk_fwd *f = r->f;
    wk_pc_kv_store_f16 pc;
    wk_fwd_store_f16_pc(f, il, T, &pc);
    wk_arg args[5] = {S(&f->a.k), S(&f->a.v), S(&f->a.rows), S(&f->a.tables), TV(&f->kv->pool_buf)};
    uint32_t gx, gy;
    grid_1d((T * pc.n_head_kv * pc.head_dim + 63) / 64, &gx, &gy); /* one word (two halves) of K or V each */
    return wk_dispatch(f->vk, f->pipes, WK_PIPE_KV_STORE_F16, args, &pc, sizeof pc, gx, gy, 1, r->err, r->errlen);
}

/* attention_reduce only runs for split steps (decode over many keys), which a warm-up of a few
 * tokens never makes: one dispatch over scratch partials compiles it (lavapipe compiles on first
 * use). Overwrites a.attn row 0, which the next step rewrites. */
int wk_fwd_warm_reduce(wk_fwd *f, char *err, size_t errlen) {
    rec r = {f, err, errlen};
    TRY(wk_vk_begin(f->vk, err, errlen));
    wk_pc_attention_reduce rp = {.head_dim = (uint32_t)f->hp->head_dim, .n_head = 1, .n_tokens = 1, .n_split = 2};
    wk_arg rargs[2] = {TV(&f->a.attn_part), S(&f->a.attn)};
    vkCmdFillBuffer(f->vk->cmd, f->a.attn_part.buf, 0, VK_WHOLE_SIZE, 0);
    wk_vk_barrier(f->vk);
    int rc = wk_dispatch(f->vk, f->pipes, WK_PIPE_ATTENTION_REDUCE, rargs, &rp, sizeof rp, 1, 1, 1, r.err, r.errlen);
    int rc2 = wk_vk_submit_wait(f->vk, err, errlen);
    return rc ? rc : rc2;
}

/* ---- the step ---- */

/* The end of the chunk that starts at row t: the rows after it of the same sequence at the next
 * positions. plan_window_rows and windows_early read a step's chunks alike. */
int wk_fwd_chunk_end(const wk_row_info *rows, int T, int t) {
    int end = t + 1;
    while (end < T && rows[end].kv_base == rows[t].kv_base && rows[end].pos == rows[end - 1].pos + 1) end++;
    return end;
}

/* Window rows this step writes, for each layer class (wk_kv_win) with a window, at win_dest[c * T]:
 * sinks (pos < S) at row pos; the last `recent` tokens of each sequence's chunk at ring row
 * S + (pos - S) % R, in the class's region of the slot. Earlier tokens of a long chunk get none:
 * the attention read them from the activations, and writing them would race with the later ones. */
static void plan_window_rows(wk_fwd *f, const wk_row_info *rows, const uint32_t *win_words, int T, int c) {
    const wk_kv_win *w = &f->kv->layout.win[c];
    const uint32_t S = (uint32_t)w->sink, R = (uint32_t)w->recent;
    const uint32_t row_words = (uint32_t)(w->row_bytes / 4), off = (uint32_t)(w->offset / 4);
    uint32_t *dest = (uint32_t *)f->a.win_dest.map + (size_t)c * T;
    for (int t = 0; t < T;) {
        const int end = wk_fwd_chunk_end(rows, T, t);
        const uint32_t last = rows[end - 1].pos;
        for (int i = t; i < end; i++) {
            const uint32_t p = rows[i].pos;
            dest[i] = p < S                     ? win_words[i] + off + p * row_words
                      : R > 0 && p + R > last ? win_words[i] + off + (S + (p - S) % R) * row_words
                                              : UINT32_MAX;
        }
        t = end;
    }
}

/* Whether class c's window rows of this step (plan_window_rows) can be written before the
 * attention. A row at p reads, from its sequence's slot, the ring keys j with p - R < j < p0 (p0 its
 * chunk's first position; the chunk's own keys from the step's f16 copy). The ring row a position
 * q > p0 of the chunk takes holds, at the step's start, the last older key of its ring index, some
 * j in (p0 - R, p0) that row p0 reads, unless q = p0 + kR or the ring holds nothing yet. So a chunk
 * is safe when it is one row (decode: its ring row holds p0 - R, which it no longer reads) or
 * starts at p0 <= S (every older key a sink: a sequence's first chunk). A sequence in two chunks
 * of the step, or more than 64 chunks (a pairwise check), takes the late store. */
static bool windows_early(const wk_fwd *f, const wk_row_info *rows, int T, int c) {
    const uint32_t S = (uint32_t)f->kv->layout.win[c].sink;
    int starts[64], n = 0;
    for (int t = 0; t < T;) {
        const int end = wk_fwd_chunk_end(rows, T, t);
        if (n == 64) return false;
        for (int i = 0; i < n; i++)
            if (rows[starts[i]].kv_base == rows[t].kv_base) return false;
        starts[n++] = t;
        if (end - t > 1 && rows[t].pos > S) return false;
        t = end;
    }
    return true;
}

/* With linear_host: submits what is recorded, runs the host's part after layer `after`'s attention
 * (wk_fwd_host_layers) and opens the next command buffer (also after a failed submit, so the step
 * always ends one open buffer). */
static int host_part(rec *r, int after, uint32_t T) {
    wk_fwd *f = r->f;
    int rc = wk_vk_submit_wait(f->vk, r->err, r->errlen);
    if (!rc) {
        wk_prof_collect(f->vk, f->pipes);
        wk_fwd_host_layers(f, after, (int)T);
    }
    const int rc2 = wk_vk_begin(f->vk, r->err, r->errlen);
    if (!rc2) wk_prof_begin(f->vk, f->pipes);
    return rc ? rc : rc2;
}

static int record_layers(rec *r, uint32_t T) {
    wk_fwd *f = r->f;
    wk_vk *vk = f->vk;
    const wk_hparams *hp = f->hp;
    const wk_weights *w = f->w;
    wk_acts *a = &f->a;

    TRY(op_embed(r, T));                                        /* h = embed(tokens) * scale */
    wk_vk_barrier(vk);
    TRY(op_rmsnorm(r, &a->h, &w->layers[0].attn_norm, &a->xn, T)); /* xn = norm(h) */
    wk_vk_barrier(vk);
    for (int il = 0; il < hp->n_layer; il++) {
        const wk_dev_layer *L = &w->layers[il];
        const bool rope = wk_fwd_rope_in_transform(f, L, T);   /* q/k norm and RoPE inside the transform */
        if (f->attn_step) {                                     /* all of the layer on the host */
            if (il == 0) TRY(host_part(r, -1, T));              /* (the embedding and first norm) */
            wk_fwd_host_attention(f, il, (int)T), wk_fwd_host_layers(f, il, (int)T);
            continue;
        }
        if (!f->linear_host) TRY(op_qkv(r, L, T, rope));        /* q, k, v = xn W */
        else if (il == 0) TRY(host_part(r, -1, T));             /* (on the host: after each layer's attention) */
        wk_vk_barrier(vk);
        if (!rope && !f->kv_host) {                             /* (else the transform applies them) */
            TRY(op_qk_norm_rope(r, il, T));                     /* q,k: norm, RoPE; k,v -> cache */
            wk_vk_barrier(vk);
        }
        if (f->xform && !f->kv_host) {
            TRY(op_kv_transform(r, il, T, rope));               /* k = T k, q = T^-T q */
            wk_vk_barrier(vk);
        }
        if (f->capture) {
            record_capture(f, il, T);
            wk_vk_barrier(vk);
        }
        if (!f->kv_host) {                                      /* (else the host wrote them) */
            if (f->kv->fmt.bits == 16) TRY(op_kv_store_f16(r, il, T)); /* k, v -> f16 rows in blocks */
            else TRY(op_kv_store_quant(r, il, T));              /* k, v -> packed codes in blocks */
        }
        wk_vk_barrier(vk);
        TRY(op_attention_paged(r, il, T));                      /* attn = softmax(q K^T) V over the blocks */
        const wk_kv_win *win = &f->kv->layout.win[f->kv->win_class_of[il]];
        if (win->sink + win->recent > 0 && !window_with_codes(f, il)) {
            wk_vk_barrier(vk);
            TRY(op_kv_store_window(r, il, T));                  /* k, v (f16) -> window rows */
        }
        wk_vk_barrier(vk);
        if (f->linear_host) {                                   /* the rest, and the next q, k, v: host */
            TRY(host_part(r, il, T));
            continue;
        }
        TRY(op_matmul(r, &L->wo, &a->attn, &a->o, T));          /* o = attn Wo */
        wk_vk_barrier(vk);
        TRY(op_add_norm(r, &a->o, &L->post_attn_norm, &L->ffn_norm, T)); /* h += o; xn = norm(h) */
        wk_vk_barrier(vk);
        TRY(op_gated_ffn_in(r, L, T));                          /* act = act(xn Wgate) * (xn Wup) */
        wk_vk_barrier(vk);
        TRY(op_matmul(r, &L->ffn_down, &a->act, &a->ffn, T));   /* ffn = act Wdown */
        wk_vk_barrier(vk);
        const wk_buf *next = il + 1 < hp->n_layer ? &w->layers[il + 1].attn_norm : &w->output_norm;
        TRY(op_add_norm(r, &a->ffn, &L->post_ffn_norm, next, T)); /* h += ffn; xn = norm(h) */
        wk_vk_barrier(vk);
        if (f->debug_layers) {
            VkDeviceSize bytes = (VkDeviceSize)T * hp->n_embd * 4;
            VkBufferCopy c = {.srcOffset = 0, .dstOffset = (VkDeviceSize)il * bytes, .size = bytes};
            vkCmdCopyBuffer(vk->cmd, a->h.buf, a->debug.buf, 1, &c);
            wk_vk_barrier(vk);
        }
    }
    return 0;
}

/* Gathers rows of xn into head_in and records logits = head_in Wout (on the device; with
 * head_host only the gather, the host multiplying after the submit: read_logits). */
static int record_head(rec *r, const int *rows, int n) {
    wk_fwd *f = r->f;
    const VkDeviceSize rb = (VkDeviceSize)f->hp->n_embd * 4;
    VkBufferCopy regions[64];
    for (int done = 0; done < n; done += 64) {
        const int k = n - done < 64 ? n - done : 64;
        for (int i = 0; i < k; i++)
            regions[i] = (VkBufferCopy){.srcOffset = rows[done + i] * rb, .dstOffset = (VkDeviceSize)(done + i) * rb, .size = rb};
        vkCmdCopyBuffer(f->vk->cmd, f->a.xn.buf, f->a.head_in.buf, (uint32_t)k, regions);
    }
    wk_vk_barrier(f->vk);
    if (f->head_host) return 0;
    wk_prof_label(f->pipes, WK_PROF_HEAD);
    int rc = op_matmul(r, wk_weights_output(f->w), &f->a.head_in, &f->a.logits, (uint32_t)n);
    wk_prof_label(f->pipes, 0);
    TRY(rc);
    wk_vk_barrier(f->vk);
    return 0;
}

/* The submitted step's n logits rows into out: copied from the device's product, or with head_host
 * multiplied here from head_in (timed into the profile's output_head_host). */
static void read_logits(wk_fwd *f, float *out, int n) {
    const size_t V = (size_t)f->hp->n_vocab;
    if (f->head_host) {
        wk_fwd_host_head(f, out, n);
    } else {
        memcpy(out, f->a.logits.map, (size_t)n * V * sizeof(float));
    }
    if (f->hp->final_softcap > 0) {
        const float c = f->hp->final_softcap;
        for (size_t i = 0; i < (size_t)n * V; i++) out[i] = tanhf(out[i] / c) * c;
    }
}

int wk_fwd_step(wk_fwd *f, const int32_t *tokens, const wk_row_info *rows, int T, const uint32_t *tables,
                int n_tables, const uint32_t *win_words, const int *logit_rows,
                int n_logits, float *out, float *layer_out, char *err, size_t errlen) {
    if (T < 1 || T > f->max_tokens) {
        snprintf(err, errlen, "step of %d tokens (1..%d allowed)", T, f->max_tokens);
        return WK_ERR_INVALID;
    }
    for (int i = 0; i < T; i++)
        if (tokens[i] < 0 || tokens[i] >= f->hp->n_vocab) {
            snprintf(err, errlen, "token id %d out of range (vocabulary %d)", tokens[i], f->hp->n_vocab);
            return WK_ERR_INVALID;
        }
    memcpy(f->a.tokens.map, tokens, (size_t)T * sizeof *tokens);
    memcpy(f->a.rows.map, rows, (size_t)T * sizeof *rows);
    if (!tables || n_tables < 1 || (uint64_t)n_tables > wk_fwd_max_tables(f))
        return snprintf(err, errlen, "a step needs 1..%llu block-table entries, got %d",
                        (unsigned long long)wk_fwd_max_tables(f), n_tables), WK_ERR_INVALID;
    memcpy(f->a.tables.map, tables, (size_t)n_tables * sizeof *tables);
    if (f->kv->layout.window_bytes > 0) {
        if (!win_words) return snprintf(err, errlen, "internal: f16 windows need the steps' window slots"), WK_ERR_INVALID;
        for (int c = 0; c < 2; c++)
            if (f->kv->layout.win[c].sink + f->kv->layout.win[c].recent > 0) plan_window_rows(f, rows, win_words, T, c);
    }
    {
        const bool windows = f->kv->layout.window_bytes > 0;
        if (wk_attn_plan_make(rows, windows ? win_words : NULL, (uint32_t)T, (uint32_t)f->hp->n_head, (uint32_t)f->hp->n_head_kv,
                              (uint32_t)f->hp->head_dim, f->vk->subgroup_size, f->a.tiles.map, &f->plan))
            return snprintf(err, errlen, "head_dim %d is too large for the paged attention at subgroup size %u",
                            f->hp->head_dim, f->vk->subgroup_size), WK_ERR_UNSUPPORTED;
    }
    f->step_rows = rows;
    for (int c = 0; c < 2; c++) f->window_early[c] = windows_early(f, rows, T, c);
    f->step_win_words = win_words;
    f->attn_step = wk_fwd_host_attn_step(f, T);
    rec r = {f, err, errlen};
    TRY(wk_vk_begin(f->vk, err, errlen));
    wk_prof_begin(f->vk, f->pipes);
    int rc = record_layers(&r, (uint32_t)T);
    int first = n_logits < f->logit_rows ? n_logits : f->logit_rows;
    if (!rc && first > 0) rc = record_head(&r, logit_rows, first);
    /* The command buffer is always ended and submitted, so a recording error leaves no open state. */
    int rc2 = wk_vk_submit_wait(f->vk, err, errlen);
    if (rc) return rc;
    if (rc2) return rc2;
    wk_prof_collect(f->vk, f->pipes);
    if (first > 0) read_logits(f, out, first);
    for (int done = first; done < n_logits;) {
        int n = n_logits - done < f->logit_rows ? n_logits - done : f->logit_rows;
        TRY(wk_vk_begin(f->vk, err, errlen));
        wk_prof_begin(f->vk, f->pipes);
        rc = record_head(&r, logit_rows + done, n);
        rc2 = wk_vk_submit_wait(f->vk, err, errlen);
        if (rc) return rc;
        if (rc2) return rc2;
        wk_prof_collect(f->vk, f->pipes);
        read_logits(f, out + (size_t)done * f->hp->n_vocab, n);
        done += n;
    }
    if (layer_out && f->debug_layers)
        memcpy(layer_out, f->a.debug.map, (size_t)f->hp->n_layer * T * f->hp->n_embd * sizeof(float));
    return 0;
}
