/* Scalar C reference forward pass for Gemma 3 and Llama, written to match llama.cpp's graph
 * (src/models/gemma3.cpp, llama.cpp) step for step, independent of the Vulkan engine.
 * Activations are f32 like ggml's; every dot product and reduction is summed in double so the
 * reference is at least as precise as anything it is compared with. */
#include "ref_forward.h"
#include "kv/kv_quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"

/* ------------------------------------------------------------------------------------------
 * Model: hyperparameters and f32 copies of every weight. Matrices are row-major with one row
 * per output, exactly ggml's layout (ne = [in, out] is `out` rows of `in` values). */

typedef struct ref_layer {
    float *attn_norm;      /* (n_embd) */
    float *wq;             /* (n_head*head_dim, n_embd) */
    float *wk;             /* (n_head_kv*head_dim, n_embd) */
    float *wv;             /* (n_head_kv*head_dim, n_embd) */
    float *wo;             /* (n_embd, n_head*head_dim) */
    float *q_norm, *k_norm;/* (head_dim), gemma3 only */
    float *post_attn_norm; /* (n_embd), gemma3 only */
    float *ffn_norm;       /* (n_embd) */
    float *ffn_gate;       /* (n_ff, n_embd) */
    float *ffn_up;         /* (n_ff, n_embd) */
    float *ffn_down;       /* (n_embd, n_ff) */
    float *post_ffn_norm;  /* (n_embd), gemma3 only */
} ref_layer;

struct ref_model {
    wk_hparams hp;
    float *tok_embd;    /* (n_vocab, n_embd) */
    float *output_norm; /* (n_embd) */
    float *output;      /* (n_vocab, n_embd); == tok_embd when tied */
    ref_layer *layers;  /* (n_layer) */
    int kv_bits;        /* 0: f16 cache; 2..4: the quantized cache (kv_quant.c round trip) */
    int kv_kind, kv_group;
    int kv_swa_bits;    /* the sliding-window layers' bits (per-layer-class formats); 0: kv_bits */
    float kv_quest_c2, kv_swa_quest_c2; /* QuEST's constant per class (wk_kvq_quest_c2); 0: unclipped */
    int kv_wide_layer, kv_key_bits;     /* wide keys: that layer's keys in kv_key_bits (-1, 0: none) */
    float kv_key_quest_c2;
};

/* Dequantizes a whole tensor (NULL tensor -> NULL, not an error: optional weights). */
static bool load_tensor(const wk_gguf_tensor *t, float **out, char *err, size_t errlen) {
    *out = NULL;
    if (!t) return true;
    size_t n = (size_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    float *f = malloc(n * sizeof *f);
    if (!f) {
        snprintf(err, errlen, "out of memory for tensor '%s' (%zu floats)", t->name, n);
        return false;
    }
    bool ok = true;
    const uint8_t *src = t->data;
    switch (t->type) {
    /* Float types are read here so the reference depends on quant.c only for the block formats. */
    case WK_GGML_F32: memcpy(f, src, n * sizeof *f); break;
    case WK_GGML_F16:
        for (size_t i = 0; i < n; i++) f[i] = wk_f16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
        break;
    case WK_GGML_BF16:
        for (size_t i = 0; i < n; i++) f[i] = wk_bf16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
        break;
    default: ok = wk_dequantize(t->type, src, f, n); break;
    }
    if (!ok) {
        snprintf(err, errlen, "tensor '%s': cannot dequantize type %s", t->name, wk_ggml_type_name(t->type));
        free(f);
        return false;
    }
    *out = f;
    return true;
}

ref_model *ref_model_load(const wk_gguf *g, char *err, size_t errlen) {
    wk_model_desc *d = malloc(sizeof *d); /* ~30 KB: keep it off the stack */
    ref_model *m = calloc(1, sizeof *m);
    if (!d || !m) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    if (wk_model_desc_load(g, d, err, errlen) != 0) goto err;
    m->hp = d->hp;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    if (!load_tensor(d->tok_embd, &m->tok_embd, err, errlen)) goto err;
    if (!load_tensor(d->output_norm, &m->output_norm, err, errlen)) goto err;
    if (d->output == d->tok_embd) m->output = m->tok_embd; /* tied: share, do not copy 670 MB twice */
    else if (!load_tensor(d->output, &m->output, err, errlen)) goto err;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const wk_layer_weights *s = &d->layers[il];
        ref_layer *L = &m->layers[il];
        if (!load_tensor(s->attn_norm, &L->attn_norm, err, errlen) || !load_tensor(s->wq, &L->wq, err, errlen) ||
            !load_tensor(s->wk, &L->wk, err, errlen) || !load_tensor(s->wv, &L->wv, err, errlen) ||
            !load_tensor(s->wo, &L->wo, err, errlen) || !load_tensor(s->q_norm, &L->q_norm, err, errlen) ||
            !load_tensor(s->k_norm, &L->k_norm, err, errlen) ||
            !load_tensor(s->post_attn_norm, &L->post_attn_norm, err, errlen) ||
            !load_tensor(s->ffn_norm, &L->ffn_norm, err, errlen) ||
            !load_tensor(s->ffn_gate, &L->ffn_gate, err, errlen) || !load_tensor(s->ffn_up, &L->ffn_up, err, errlen) ||
            !load_tensor(s->ffn_down, &L->ffn_down, err, errlen) ||
            !load_tensor(s->post_ffn_norm, &L->post_ffn_norm, err, errlen))
            goto err;
        /* model.c binds these only as optional; the forward pass below needs them whenever the
         * architecture says so. */
        if ((m->hp.qk_norm && (!L->q_norm || !L->k_norm)) ||
            (m->hp.post_norms && (!L->post_attn_norm || !L->post_ffn_norm))) {
            snprintf(err, errlen, "layer %d lacks a q/k or post norm that %s requires", il, m->hp.arch_name);
            goto err;
        }
    }
    free(d);
    return m;
err:
    free(d);
    ref_model_free(m);
    return NULL;
}

void ref_model_free(ref_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int il = 0; il < m->hp.n_layer; il++) {
            ref_layer *L = &m->layers[il];
            float *all[] = {L->attn_norm, L->wq, L->wk, L->wv, L->wo, L->q_norm, L->k_norm,
                            L->post_attn_norm, L->ffn_norm, L->ffn_gate, L->ffn_up, L->ffn_down, L->post_ffn_norm};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
        }
        free(m->layers);
    }
    if (m->output != m->tok_embd) free(m->output);
    free(m->tok_embd);
    free(m->output_norm);
    free(m);
}

const wk_hparams *ref_model_hparams(const ref_model *m) { return &m->hp; }

/* ------------------------------------------------------------------------------------------
 * Kernels. */

/* Dot product in double. Four partial sums break the add-latency chain: the 262144-row output
 * head of the real model is otherwise ~4x slower, and the result is no less precise. */
static double dot(const float *a, const float *b, int n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)a[i] * b[i];
        s1 += (double)a[i + 1] * b[i + 1];
        s2 += (double)a[i + 2] * b[i + 2];
        s3 += (double)a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += (double)a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

/* y(d) = W(d, n) x(n) */
static void matmul(float *y, const float *w, const float *x, int n, int d) {
    for (int r = 0; r < d; r++) y[r] = (float)dot(w + (size_t)r * n, x, n);
}

void ref_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    /* ggml_compute_forward_rms_norm: mean rounded to f32, scale = 1/sqrtf(mean + eps) in f32;
     * the weight is a separate f32 multiply. */
    const float mean = (float)(ss / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int i = 0; i < n; i++) y[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

void ref_rope(float *x, int n_rot, int pos, float base, float freq_scale, wk_rope_type type) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const double theta = (double)pos * freq_scale * pow((double)base, -2.0 * i / n_rot);
        const double c = cos(theta), s = sin(theta);
        /* NEOX rotates the two halves of the rotated dims against each other; NORMAL rotates
         * adjacent pairs (the Llama converter permutes Wq/Wk to match). */
        const int a = type == WK_ROPE_NEOX ? i : 2 * i;
        const int b = type == WK_ROPE_NEOX ? i + half : 2 * i + 1;
        const double x0 = x[a], x1 = x[b];
        x[a] = (float)(x0 * c - x1 * s);
        x[b] = (float)(x0 * s + x1 * c);
    }
}

float ref_gelu_tanh(float x) {
    const double sqrt_2_over_pi = 0.79788456080286535587989211986876;
    const double xd = x;
    return (float)(0.5 * xd * (1.0 + tanh(sqrt_2_over_pi * (xd + 0.044715 * xd * xd * xd))));
}

float ref_silu(float x) { return (float)((double)x / (1.0 + exp(-(double)x))); }

/* The quantized cache: every group of G elements of a head vector through the C quantizer. */
static void kv_quant_round(const ref_model *m, int bits, float *x, int n_heads, int D, float rho, float quest_c2) {
    uint8_t buf[1024];
    for (int h = 0; h < n_heads; h++)
        for (int g = 0; g < D; g += m->kv_group) {
            wk_kvq_encode_c2((wk_kvq_kind)m->kv_kind, bits, m->kv_group, rho, quest_c2, x + (size_t)h * D + g, buf);
            wk_kvq_decode((wk_kvq_kind)m->kv_kind, bits, m->kv_group, buf, x + (size_t)h * D + g);
        }
}

void ref_model_set_kv_quant(ref_model *m, int bits, int kind, int group) {
    m->kv_bits = bits;
    m->kv_kind = kind;
    m->kv_group = group;
    m->kv_swa_bits = 0;
    m->kv_quest_c2 = m->kv_swa_quest_c2 = 0;
    m->kv_wide_layer = -1;
    m->kv_key_bits = 0;
    m->kv_key_quest_c2 = 0;
}

void ref_model_set_kv_wide_keys(ref_model *m, int layer, int key_bits, float key_quest_c2) {
    m->kv_wide_layer = layer;
    m->kv_key_bits = key_bits;
    m->kv_key_quest_c2 = key_quest_c2;
}

void ref_model_set_kv_clip(ref_model *m, float quest_c2, float swa_quest_c2) {
    m->kv_quest_c2 = quest_c2;
    m->kv_swa_quest_c2 = swa_quest_c2;
}

void ref_model_set_kv_swa_bits(ref_model *m, int bits) { m->kv_swa_bits = bits; }

/* llama.cpp keeps K and V in an f16 cache: attention sees them rounded to half precision. */
static void round_f16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = wk_f16_to_f32(wk_f32_to_f16(x[i]));
}

/* ------------------------------------------------------------------------------------------
 * Forward pass: the whole prompt as one batch, layer by layer, as llama.cpp's prefill does. */

typedef struct ref_state {
    float *x;      /* (n, n_embd) residual stream */
    float *xb;     /* (n, n_embd) normed input of a block */
    float *q;      /* (n, n_head*head_dim) */
    float *k, *v;  /* (n, n_head_kv*head_dim): the "KV cache" of this layer */
    float *att;    /* (n, n_head*head_dim) attention output, heads concatenated */
    float *o;      /* (n, n_embd) block output before the residual add */
    float *gate;   /* (n, n_ff) */
    float *up;     /* (n, n_ff) */
    double *p;     /* (n) attention probabilities of one query head */
} ref_state;

static void state_free(ref_state *s) {
    free(s->x); free(s->xb); free(s->q); free(s->k); free(s->v);
    free(s->att); free(s->o); free(s->gate); free(s->up); free(s->p);
}

static bool state_alloc(ref_state *s, const wk_hparams *hp, int n) {
    const size_t N = (size_t)n, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff;
    const size_t QD = (size_t)hp->n_head * hp->head_dim, KD = (size_t)hp->n_head_kv * hp->head_dim;
    s->x = malloc(N * E * sizeof(float));
    s->xb = malloc(N * E * sizeof(float));
    s->q = malloc(N * QD * sizeof(float));
    s->k = malloc(N * KD * sizeof(float));
    s->v = malloc(N * KD * sizeof(float));
    s->att = malloc(N * QD * sizeof(float));
    s->o = malloc(N * E * sizeof(float));
    s->gate = malloc(N * F * sizeof(float));
    s->up = malloc(N * F * sizeof(float));
    s->p = malloc(N * sizeof(double));
    if (s->x && s->xb && s->q && s->k && s->v && s->att && s->o && s->gate && s->up && s->p) return true;
    state_free(s);
    return false;
}

/* Causal softmax attention of every query head at every position, with the sliding window on
 * SWA layers: key j is visible to query t iff j <= t and (not swa or t - j < window). */
static void attention(const wk_hparams *hp, ref_state *s, int n, bool swa) {
    const int D = hp->head_dim, Hq = hp->n_head, Hk = hp->n_head_kv, group = Hq / Hk;
    for (int t = 0; t < n; t++) {
        const int j0 = swa && t - hp->sliding_window + 1 > 0 ? t - hp->sliding_window + 1 : 0;
        for (int h = 0; h < Hq; h++) {
            const int kvh = h / group; /* GQA: consecutive query heads share a kv head */
            const float *q = s->q + ((size_t)t * Hq + h) * D;
            double max = -INFINITY, sum = 0;
            for (int j = j0; j <= t; j++) {
                s->p[j] = dot(q, s->k + ((size_t)j * Hk + kvh) * D, D); /* scale already in q */
                if (s->p[j] > max) max = s->p[j];
            }
            for (int j = j0; j <= t; j++) sum += s->p[j] = exp(s->p[j] - max);
            float *out = s->att + ((size_t)t * Hq + h) * D;
            for (int d = 0; d < D; d++) {
                double acc = 0;
                for (int j = j0; j <= t; j++) acc += s->p[j] * s->v[((size_t)j * Hk + kvh) * D + d];
                out[d] = (float)(acc / sum);
            }
        }
    }
}

static void layer_forward(const ref_model *m, int il, ref_state *s, int n) {
    const wk_hparams *hp = &m->hp;
    const ref_layer *L = &m->layers[il];
    const int E = hp->n_embd, F = hp->n_ff, D = hp->head_dim, Hq = hp->n_head, Hk = hp->n_head_kv;
    const bool swa = hp->is_swa[il];
    /* llama.cpp: SWA layers use the SWA base with freq_scale 1; the others the context's. */
    const float base = swa ? hp->rope_base_swa : hp->rope_base;
    const float freq_scale = swa ? 1.0f : hp->rope_freq_scale;

    for (int t = 0; t < n; t++) {
        float *xb = s->xb + (size_t)t * E;
        float *q = s->q + (size_t)t * Hq * D, *k = s->k + (size_t)t * Hk * D, *v = s->v + (size_t)t * Hk * D;
        /* attention input norm, then the q/k/v projections */
        ref_rmsnorm(xb, s->x + (size_t)t * E, L->attn_norm, E, hp->eps);
        matmul(q, L->wq, xb, E, Hq * D);
        matmul(k, L->wk, xb, E, Hk * D);
        matmul(v, L->wv, xb, E, Hk * D);
        /* per-head q/k norm (gemma3), RoPE at position t, then q *= attn_scale */
        for (int h = 0; h < Hq; h++) {
            if (hp->qk_norm) ref_rmsnorm(q + h * D, q + h * D, L->q_norm, D, hp->eps);
            ref_rope(q + h * D, hp->n_rot, t, base, freq_scale, hp->rope_type);
        }
        for (int i = 0; i < Hq * D; i++) q[i] *= hp->attn_scale;
        for (int h = 0; h < Hk; h++) {
            if (hp->qk_norm) ref_rmsnorm(k + h * D, k + h * D, L->k_norm, D, hp->eps);
            ref_rope(k + h * D, hp->n_rot, t, base, freq_scale, hp->rope_type);
        }
        /* kv store: what the cache gives back, f16 or the quantizer's round trip per group */
        if (m->kv_bits) {
            const int bits = swa && m->kv_swa_bits ? m->kv_swa_bits : m->kv_bits;
            const float c2 = swa ? m->kv_swa_quest_c2 : m->kv_quest_c2;
            const bool wide = il == m->kv_wide_layer && m->kv_key_bits;
            kv_quant_round(m, wide ? m->kv_key_bits : bits, k, Hk, D, WK_KVQ_RHO_K, wide ? m->kv_key_quest_c2 : c2);
            kv_quant_round(m, bits, v, Hk, D, WK_KVQ_RHO_V, c2);
        } else {
            round_f16(k, (size_t)Hk * D);
            round_f16(v, (size_t)Hk * D);
        }
    }

    attention(hp, s, n, swa);

    for (int t = 0; t < n; t++) {
        float *x = s->x + (size_t)t * E, *xb = s->xb + (size_t)t * E, *o = s->o + (size_t)t * E;
        float *gate = s->gate + (size_t)t * F, *up = s->up + (size_t)t * F;
        /* output projection, (post-attention norm), residual */
        matmul(o, L->wo, s->att + (size_t)t * Hq * D, Hq * D, E);
        if (hp->post_norms) ref_rmsnorm(o, o, L->post_attn_norm, E, hp->eps);
        for (int i = 0; i < E; i++) x[i] += o[i];
        /* FFN: norm, gated activation (GeGLU: gelu(gate)*up, SwiGLU: silu(gate)*up), down */
        ref_rmsnorm(xb, x, L->ffn_norm, E, hp->eps);
        matmul(gate, L->ffn_gate, xb, E, F);
        matmul(up, L->ffn_up, xb, E, F);
        for (int i = 0; i < F; i++)
            gate[i] = (hp->ffn_act == WK_FFN_GEGLU ? ref_gelu_tanh(gate[i]) : ref_silu(gate[i])) * up[i];
        matmul(o, L->ffn_down, gate, F, E);
        /* (post-FFN norm), residual */
        if (hp->post_norms) ref_rmsnorm(o, o, L->post_ffn_norm, E, hp->eps);
        for (int i = 0; i < E; i++) x[i] += o[i];
    }
}

/* Logits of positions [t0, n): final norm, output head, optional soft-cap. */
static void output_head(const ref_model *m, ref_state *s, int t0, int n, float *logits) {
    const wk_hparams *hp = &m->hp;
    const int E = hp->n_embd, V = hp->n_vocab;
    for (int t = t0; t < n; t++) {
        float *xb = s->xb + (size_t)t * E;
        float *row = logits + (size_t)(t - t0) * V;
        ref_rmsnorm(xb, s->x + (size_t)t * E, m->output_norm, E, hp->eps);
        matmul(row, m->output, xb, E, V);
        if (hp->final_softcap > 0)
            for (int i = 0; i < V; i++)
                row[i] = (float)(tanh((double)row[i] / hp->final_softcap) * hp->final_softcap);
    }
}

static int forward(ref_model *m, const int32_t *tokens, int n, float *logits, bool last_only, float **layer_out) {
    const wk_hparams *hp = &m->hp;
    const int E = hp->n_embd;
    if (n <= 0) return -1;
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= hp->n_vocab) return -1;
    ref_state s;
    if (!state_alloc(&s, hp, n)) return -1;

    /* token embedding, scaled by sqrtf(n_embd) in f32 on gemma3 (embd_scale 1 on llama) */
    for (int t = 0; t < n; t++)
        for (int i = 0; i < E; i++) s.x[(size_t)t * E + i] = m->tok_embd[(size_t)tokens[t] * E + i] * hp->embd_scale;

    for (int il = 0; il < hp->n_layer; il++) {
        layer_forward(m, il, &s, n);
        if (layer_out && layer_out[il]) memcpy(layer_out[il], s.x, (size_t)n * E * sizeof(float));
    }

    if (logits) output_head(m, &s, last_only ? n - 1 : 0, n, logits);
    state_free(&s);
    return 0;
}

int ref_forward(ref_model *m, const int32_t *tokens, int n, float *logits, float **layer_out) {
    return forward(m, tokens, n, logits, false, layer_out);
}

int ref_forward_last(ref_model *m, const int32_t *tokens, int n, float *logits) {
    return forward(m, tokens, n, logits, true, NULL);
}
