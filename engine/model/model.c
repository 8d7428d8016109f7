/* Model description: reads architecture and hyperparameters from GGUF metadata and binds and
 * shape-checks every weight tensor. Knows the per-architecture conventions (Gemma 3 vs Llama). */
#include "model/model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "wushkv/wushkv.h"

static bool get_u32(const wk_gguf *g, const char *arch, const char *suffix, uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return wk_gguf_get_u32(g, key, out);
}

static bool get_f32(const wk_gguf *g, const char *arch, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return wk_gguf_get_f32(g, key, out);
}

/* Binds tensor `name` and checks its shape: ne0 x ne1 (ne1 = 1 for vectors). */
static int bind(const wk_gguf *g, const wk_gguf_tensor **slot, const char *name, uint64_t ne0, uint64_t ne1,
                bool required, char *err, size_t errlen) {
    const wk_gguf_tensor *t = wk_gguf_find_tensor(g, name);
    *slot = t;
    if (!t) {
        if (!required) return 0;
        return wk_fail(err, errlen, WK_ERR_FORMAT, "model is missing tensor '%s'", name);
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return wk_fail(err, errlen, WK_ERR_FORMAT,
                    "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]", name,
                    (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                    (unsigned long long)t->ne[3], (unsigned long long)ne0, (unsigned long long)ne1);
    return 0;
}

static int read_hparams(const wk_gguf *g, wk_hparams *hp, char *err, size_t errlen) {
    const char *a = hp->arch_name;
    uint32_t v;
#define REQ_U32(field, key)                                                                            \
    do {                                                                                               \
        if (!get_u32(g, a, key, &v) || v == 0 || v > (1u << 24))                                       \
            return wk_fail(err, errlen, WK_ERR_FORMAT, "metadata %s.%s is missing or out of range", a, key); \
        hp->field = (int)v;                                                                            \
    } while (0)
    REQ_U32(n_embd, "embedding_length");
    REQ_U32(n_layer, "block_count");
    REQ_U32(n_head, "attention.head_count");
    REQ_U32(n_ff, "feed_forward_length");
    REQ_U32(n_ctx_train, "context_length");
#undef REQ_U32
    if (hp->n_layer > WK_MAX_LAYERS)
        return wk_fail(err, errlen, WK_ERR_UNSUPPORTED, "%d layers (at most %d supported)", hp->n_layer, WK_MAX_LAYERS);
    hp->n_head_kv = get_u32(g, a, "attention.head_count_kv", &v) ? (int)v : hp->n_head;
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0)
        return wk_fail(err, errlen, WK_ERR_FORMAT, "head_count %d is not a multiple of head_count_kv %d", hp->n_head,
                    hp->n_head_kv);
    hp->head_dim = get_u32(g, a, "attention.key_length", &v) ? (int)v : hp->n_embd / hp->n_head;
    hp->head_dim_v = get_u32(g, a, "attention.value_length", &v) ? (int)v : hp->head_dim;
    if (hp->head_dim_v != hp->head_dim)
        return wk_fail(err, errlen, WK_ERR_UNSUPPORTED, "key_length %d != value_length %d", hp->head_dim, hp->head_dim_v);
    /* The shaders work on whole vec4s and split heads over subgroup lanes. */
    if (hp->head_dim % 8 != 0 || hp->head_dim > 512)
        return wk_fail(err, errlen, WK_ERR_UNSUPPORTED, "head_dim %d (must be a multiple of 8, at most 512)", hp->head_dim);
    if (hp->n_embd % 16 != 0 || hp->n_ff % 16 != 0)
        return wk_fail(err, errlen, WK_ERR_UNSUPPORTED, "embedding_length %d / feed_forward_length %d must be multiples of 16",
                    hp->n_embd, hp->n_ff);
    hp->n_rot = get_u32(g, a, "rope.dimension_count", &v) ? (int)v : hp->head_dim;
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return wk_fail(err, errlen, WK_ERR_FORMAT, "rope.dimension_count %d does not fit head_dim %d", hp->n_rot, hp->head_dim);
    if (!get_f32(g, a, "attention.layer_norm_rms_epsilon", &hp->eps))
        hp->eps = strcmp(a, "gemma3") == 0 ? 1e-6f : 1e-5f; /* the converters' defaults */
    if (!get_f32(g, a, "rope.freq_base", &hp->rope_base)) hp->rope_base = 10000.0f;
    hp->rope_freq_scale = 1.0f;
    float factor;
    char type[32];
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    bool has_type = wk_gguf_get_str(g, key, type, sizeof type);
    if (get_f32(g, a, "rope.scaling.factor", &factor) && factor > 0) {
        if (has_type && strcmp(type, "linear") != 0 && strcmp(type, "none") != 0)
            return wk_fail(err, errlen, WK_ERR_UNSUPPORTED, "rope scaling type '%s'", type);
        if (!has_type || strcmp(type, "linear") == 0) hp->rope_freq_scale = 1.0f / factor;
    }
    hp->rope_base_swa = hp->rope_base;
    hp->final_softcap = 0.0f;
    get_f32(g, a, "final_logit_softcapping", &hp->final_softcap);
    hp->sliding_window = get_u32(g, a, "attention.sliding_window", &v) ? (int)v : 0;
    return 0;
}

int wk_model_desc_load(const wk_gguf *g, wk_model_desc *m, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    wk_hparams *hp = &m->hp;
    if (!wk_gguf_get_str(g, "general.architecture", hp->arch_name, sizeof hp->arch_name))
        return wk_fail(err, errlen, WK_ERR_FORMAT, "metadata general.architecture is missing");
    if (strcmp(hp->arch_name, "gemma3") == 0) hp->arch = WK_ARCH_GEMMA3;
    else if (strcmp(hp->arch_name, "llama") == 0) hp->arch = WK_ARCH_LLAMA;
    else if (strcmp(hp->arch_name, "qwen3") == 0) hp->arch = WK_ARCH_QWEN3;
    else return wk_fail(err, errlen, WK_ERR_UNSUPPORTED, "unsupported architecture %s", hp->arch_name);

    int rc = read_hparams(g, hp, err, errlen);
    if (rc) return rc;

    if (hp->arch == WK_ARCH_GEMMA3) {
        /* As llama.cpp: every 6th layer is global; the others use a sliding window and RoPE base 10k. */
        const char *a = hp->arch_name;
        hp->rope_type = WK_ROPE_NEOX;
        if (!get_f32(g, a, "rope.freq_base_swa", &hp->rope_base_swa)) hp->rope_base_swa = 10000.0f;
        uint32_t pattern = 6;
        if (get_u32(g, a, "attention.sliding_window_pattern", &pattern) && pattern == 0)
            return wk_fail(err, errlen, WK_ERR_FORMAT, "%s.attention.sliding_window_pattern is 0", a);
        for (int il = 0; il < hp->n_layer; il++)
            hp->is_swa[il] = hp->sliding_window > 0 && (uint32_t)il % pattern < pattern - 1;
        hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
        hp->embd_scale = sqrtf((float)hp->n_embd);
        hp->qk_norm = true;
        hp->post_norms = true;
        hp->ffn_act = WK_FFN_GEGLU;
    } else {
        /* Llama, and Qwen 3 as llama.cpp's qwen3 graph: the same blocks with an RMS norm of each
         * query and key head before RoPE, and RoPE on the halves of a head (NEOX), not its pairs. */
        const bool qwen3 = hp->arch == WK_ARCH_QWEN3;
        hp->rope_type = qwen3 ? WK_ROPE_NEOX : WK_ROPE_NORMAL;
        hp->sliding_window = 0;
        hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
        hp->embd_scale = 1.0f;
        hp->qk_norm = qwen3;
        hp->ffn_act = WK_FFN_SWIGLU;
    }

    const wk_gguf_tensor *te = wk_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return wk_fail(err, errlen, WK_ERR_FORMAT, "model is missing tensor 'token_embd.weight'");
    if (te->ne[1] == 0 || te->ne[1] > (1u << 24))
        return wk_fail(err, errlen, WK_ERR_FORMAT, "token_embd.weight has %llu rows", (unsigned long long)te->ne[1]);
    hp->n_vocab = (int)te->ne[1];

    const uint64_t E = (uint64_t)hp->n_embd, V = (uint64_t)hp->n_vocab, F = (uint64_t)hp->n_ff;
    const uint64_t D = (uint64_t)hp->head_dim, Hq = (uint64_t)hp->n_head, Hk = (uint64_t)hp->n_head_kv;
    if ((rc = bind(g, &m->tok_embd, "token_embd.weight", E, V, true, err, errlen))) return rc;
    if ((rc = bind(g, &m->output_norm, "output_norm.weight", E, 1, true, err, errlen))) return rc;
    if ((rc = bind(g, &m->output, "output.weight", E, V, false, err, errlen))) return rc;
    if (!m->output) m->output = m->tok_embd; /* tied */

    for (int il = 0; il < hp->n_layer; il++) {
        wk_layer_weights *L = &m->layers[il];
        char name[96];
#define BIND(slot, suffix, ne0, ne1, req)                                            \
    do {                                                                             \
        snprintf(name, sizeof name, "blk.%d.%s.weight", il, suffix);                 \
        if ((rc = bind(g, &L->slot, name, ne0, ne1, req, err, errlen))) return rc;   \
    } while (0)
        BIND(attn_norm, "attn_norm", E, 1, true);
        BIND(wq, "attn_q", E, Hq * D, true);
        BIND(wk, "attn_k", E, Hk * D, true);
        BIND(wv, "attn_v", E, Hk * D, true);
        BIND(wo, "attn_output", Hq * D, E, true);
        BIND(ffn_norm, "ffn_norm", E, 1, true);
        BIND(ffn_gate, "ffn_gate", E, F, true);
        BIND(ffn_up, "ffn_up", E, F, true);
        BIND(ffn_down, "ffn_down", F, E, true);
        BIND(q_norm, "attn_q_norm", D, 1, hp->qk_norm);
        BIND(k_norm, "attn_k_norm", D, 1, hp->qk_norm);
        BIND(post_attn_norm, "post_attention_norm", E, 1, hp->post_norms);
        BIND(post_ffn_norm, "post_ffw_norm", E, 1, hp->post_norms);
#undef BIND
        snprintf(name, sizeof name, "blk.%d.attn_q.bias", il);
        if (wk_gguf_find_tensor(g, name))
            return wk_fail(err, errlen, WK_ERR_UNSUPPORTED, "attention biases (%s) are not supported", name);
    }
    return 0;
}
