/* Model weights on the device: every matrix in one of three texel formats (q8a16 for quantized
 * tensors, converted exactly, its pairs as halves where every one is an f16; f16 for float
 * tensors), norm vectors as f32 storage buffers. */
#ifndef WK_WEIGHTS_H
#define WK_WEIGHTS_H

#include "host/host_matmul.h"
#include "kv/kv_transform.h"
#include "model/model.h"
#include "vulkan/vk_device.h"

/* The order is the weight kernels' (vk_pipelines.h, wk_pipe_for_format). WK_WFMT_Q8H is q8a16 whose
 * (scale, offset) pairs are each exactly a pair of halves (wk_quant_pairs_to_f16): the same values
 * in 4 bytes a group instead of 8, and a weight kernel's time on lavapipe follows the bytes its
 * fetches gather (docs/lavapipe.md "What bounds a decode step"). Which matrices get it: every
 * Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 tensor; a K-quant tensor or a WUSH-folded W_v / W_o only if all its
 * pairs happen to be halves; parts joined with a matrix of f32 pairs take f32 pairs. */
typedef enum { WK_WFMT_Q8A = 0, WK_WFMT_F16 = 1, WK_WFMT_Q8H = 2 } wk_wfmt;

/* The same format as the host's kernels name it (host/host_matmul.h, another order). */
static inline wk_host_wfmt wk_wfmt_on_host(wk_wfmt f) {
    return f == WK_WFMT_F16 ? WK_HOST_F16 : f == WK_WFMT_Q8H ? WK_HOST_Q8H : WK_HOST_Q8A;
}

typedef struct wk_dev_matrix {
    wk_wfmt fmt;
    uint32_t rows, cols;   /* rows outputs of cols inputs (ggml ne1 x ne0) */
    uint32_t row0;         /* its first row in codes / scales (a part of a joined matrix; else 0) */
    bool part;             /* codes / scales are the joined matrix's: not this one's to free */
    wk_buf codes;          /* q8a: int8 codes, RGBA32UI view (16 per texel); f16: halves (8 per texel) */
    wk_buf scales;         /* q8a: (scale, offset) f32 pairs per 16, RG32F view; q8h: the pairs as two
                            * halves in a u32, R32UI view; f16: unused */
    /* A joined q8a matrix some of whose parts have only half pairs (the default format's q and k,
     * joined with its WUSH-folded W_v): those parts' pairs again as halves, at their rows (R32UI
     * view; the other rows unused), and the parts q8h views of it, so a prefill step's q and k
     * products read 4 bytes a group where the joined decode product reads 8. Else empty. */
    wk_buf half_scales;
    /* codes and scales by panels of 16 rows (host/host_panels.h), for the host's products
     * (wk_weights_upload's panels): no shader but the embedding's reads such a matrix; a part's
     * row0 is then a panel's first row. */
    bool host_panels;
} wk_dev_matrix;

typedef struct wk_dev_layer {
    wk_buf attn_norm, q_norm, k_norm, post_attn_norm, ffn_norm, post_ffn_norm; /* f32; absent = dummy */
    wk_dev_matrix wq, wk, wv, wo, ffn_gate, ffn_up, ffn_down;
    /* W_q, W_k, W_v as one matrix (their rows one after another), and W_gate, W_up as another, when
     * the parts share a format (rows 0: not joined). The parts above are then views into it (part),
     * so a decode step computes q, k and v in one dispatch and the gated FFN input in another
     * (engine/forward.c), while a prefill step still takes each part alone. */
    wk_dev_matrix qkv, gate_up;
} wk_dev_layer;

typedef struct wk_weights {
    wk_dev_matrix tok_embd;
    wk_dev_matrix output;  /* unused when tied */
    bool tied;
    wk_buf output_norm;
    wk_buf dummy;          /* bound where a shader has a binding the model does not use; RG32F view */
    int n_layer;
    wk_dev_layer *layers;
    uint64_t bytes;        /* device bytes of all weights */
    uint64_t half_pair_weights, weights; /* matrix elements in q8h, and in all (the matrices as stored) */
} wk_weights;

/* Which matrices the host's kernels take, and so are stored by panels (host_panels on each that
 * fits) where no shader but the embedding's may read them: layers, the layers' products
 * (wk_pipelines.linear_host); head, the output head's (wk_pipelines.head_host; the embedding too
 * when it is the head, which the embedding shader reads in either layout). */
typedef struct wk_weights_panels {
    bool layers, head;
} wk_weights_panels;

/* xform (may be NULL or kind NONE): T_V is folded into each KV head's rows of W_v and T_V^-1 into
 * the matching columns of W_o (every query head of the group); those two matrices are then stored
 * in q8a16 (rounded from the f32 products), the rest as usual. panels: which matrices lie by
 * panels. The GGUF file is never written. */
int wk_weights_upload(wk_vk *vk, const wk_model_desc *m, const wk_kv_xform *xform, wk_weights_panels panels,
                      wk_weights *w, char *err, size_t errlen);
void wk_weights_free(wk_vk *vk, wk_weights *w);

static inline const wk_dev_matrix *wk_weights_output(const wk_weights *w) { return w->tied ? &w->tok_embd : &w->output; }

#endif
