/* Model description from GGUF metadata: architecture, hyperparameters and the tensor of every weight. */
#ifndef WK_MODEL_H
#define WK_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include "model/gguf.h"

#define WK_MAX_LAYERS 256

typedef enum { WK_ARCH_LLAMA = 1, WK_ARCH_GEMMA3 = 2, WK_ARCH_QWEN3 = 3 } wk_arch;
typedef enum { WK_ROPE_NORMAL = 0, WK_ROPE_NEOX = 2 } wk_rope_type; /* ggml's numbering */
typedef enum { WK_FFN_SWIGLU = 0, WK_FFN_GEGLU = 1 } wk_ffn_act;

typedef struct wk_hparams {
    wk_arch arch;
    char arch_name[32];
    int n_vocab, n_embd, n_layer, n_head, n_head_kv;
    int head_dim;        /* key_length */
    int head_dim_v;      /* value_length */
    int n_ff, n_ctx_train;
    int n_rot;           /* rotated dims per head */
    wk_rope_type rope_type;
    float rope_base;     /* global layers */
    float rope_base_swa; /* sliding-window layers */
    float rope_freq_scale;
    float eps;
    int sliding_window;  /* 0: none */
    bool is_swa[WK_MAX_LAYERS];
    float attn_scale;    /* applied to q after RoPE */
    float embd_scale;    /* applied to token embeddings */
    float final_softcap; /* 0: none */
    bool qk_norm;        /* per-head RMSNorm of q and k */
    bool post_norms;     /* Gemma: norm after attention and after FFN */
    wk_ffn_act ffn_act;
} wk_hparams;

typedef struct wk_layer_weights {
    const wk_gguf_tensor *attn_norm;        /* [n_embd] */
    const wk_gguf_tensor *wq;               /* [n_embd, n_head*head_dim] */
    const wk_gguf_tensor *wk;               /* [n_embd, n_head_kv*head_dim] */
    const wk_gguf_tensor *wv;               /* [n_embd, n_head_kv*head_dim_v] */
    const wk_gguf_tensor *wo;               /* [n_head*head_dim_v, n_embd] */
    const wk_gguf_tensor *q_norm, *k_norm;  /* [head_dim], gemma3 only */
    const wk_gguf_tensor *post_attn_norm;   /* [n_embd], gemma3 only */
    const wk_gguf_tensor *ffn_norm;         /* [n_embd] */
    const wk_gguf_tensor *ffn_gate, *ffn_up;/* [n_embd, n_ff] */
    const wk_gguf_tensor *ffn_down;         /* [n_ff, n_embd] */
    const wk_gguf_tensor *post_ffn_norm;    /* [n_embd], gemma3 only */
} wk_layer_weights;

typedef struct wk_model_desc {
    wk_hparams hp;
    const wk_gguf_tensor *tok_embd;    /* [n_embd, n_vocab] */
    const wk_gguf_tensor *output_norm; /* [n_embd] */
    const wk_gguf_tensor *output;      /* [n_embd, n_vocab]; == tok_embd when tied */
    wk_layer_weights layers[WK_MAX_LAYERS];
} wk_model_desc;

/* Reads hyperparameters and binds every tensor, checking each shape against them.
 * Unknown architectures fail with "unsupported architecture X". Returns 0 or a negative wk_status. */
int wk_model_desc_load(const wk_gguf *g, wk_model_desc *m, char *err, size_t errlen);

#endif
