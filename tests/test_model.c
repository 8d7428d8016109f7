/* Model description from metadata: hyperparameters of both architectures, the Gemma 3 layer
 * pattern, and clear refusals (unknown architecture, missing or misshapen tensors). */
#include <string.h>

#include "model/gguf.h"
#include "gguf_writer.h"
#include "model/model.h"
#include "test_util.h"
#include "tiny_model.h"
#include "wushkv/wushkv.h"

static int load(const uint8_t *bytes, size_t size, wk_model_desc *m, char *err, size_t errlen) {
    wk_gguf *g = wk_gguf_open_memory(bytes, size, err, errlen);
    if (!g) return -100;
    int rc = wk_model_desc_load(g, m, err, errlen);
    wk_gguf_close(g);
    return rc;
}

int main(void) {
    static wk_model_desc m;
    char err[WK_ERRMSG_LEN];

    /* An architecture we do not run is named in the error. */
    wk_gw *w = wk_gw_new();
    wk_gw_kv_str(w, "general.architecture", "mamba");
    size_t size;
    uint8_t *bytes = wk_gw_bytes(w, &size);
    CHECK_EQ_INT(load(bytes, size, &m, err, sizeof err), WK_ERR_UNSUPPORTED);
    CHECK(strstr(err, "unsupported architecture mamba") != NULL);
    free(bytes);
    wk_gw_free(w);

    /* No architecture at all. */
    w = wk_gw_new();
    wk_gw_kv_u32(w, "llama.block_count", 2);
    bytes = wk_gw_bytes(w, &size);
    CHECK(load(bytes, size, &m, err, sizeof err) != 0);
    CHECK(strstr(err, "general.architecture") != NULL);
    free(bytes);
    wk_gw_free(w);

    /* Tiny gemma3: hyperparameters and the every-6th-layer-global pattern with its RoPE bases. */
    tiny_model_opts o = {.arch = "gemma3", .seed = 3, .sliding_window = 16};
    bytes = tiny_model_bytes(&o, &size);
    CHECK_EQ_INT(load(bytes, size, &m, err, sizeof err), 0);
    CHECK_EQ_INT(m.hp.arch, WK_ARCH_GEMMA3);
    CHECK_EQ_INT(m.hp.n_layer, 6);
    CHECK_EQ_INT(m.hp.n_head_kv, 2);
    CHECK_EQ_INT(m.hp.head_dim, 64);
    CHECK_EQ_INT(m.hp.rope_type, WK_ROPE_NEOX);
    for (int il = 0; il < 6; il++) CHECK_EQ_INT(m.hp.is_swa[il], il != 5);
    CHECK_NEAR(m.hp.rope_base_swa, 10000.0, 0);
    CHECK_NEAR(m.hp.attn_scale, 0.125, 1e-9);
    CHECK_NEAR(m.hp.embd_scale, 16.0, 1e-6);
    CHECK(m.output == m.tok_embd); /* tied */
    free(bytes);

    /* Tiny llama: no sliding window, normal RoPE, SwiGLU, its own output matrix. */
    o = (tiny_model_opts){.arch = "llama", .seed = 4};
    bytes = tiny_model_bytes(&o, &size);
    CHECK_EQ_INT(load(bytes, size, &m, err, sizeof err), 0);
    CHECK_EQ_INT(m.hp.arch, WK_ARCH_LLAMA);
    CHECK_EQ_INT(m.hp.rope_type, WK_ROPE_NORMAL);
    CHECK_EQ_INT(m.hp.ffn_act, WK_FFN_SWIGLU);
    CHECK_EQ_INT(m.hp.sliding_window, 0);
    CHECK(!m.hp.qk_norm && !m.hp.post_norms);
    free(bytes);

    /* A file whose metadata promises more heads than its tensors have: shape error names the tensor. */
    w = wk_gw_new();
    wk_gw_kv_str(w, "general.architecture", "llama");
    wk_gw_kv_u32(w, "llama.embedding_length", 16);
    wk_gw_kv_u32(w, "llama.block_count", 1);
    wk_gw_kv_u32(w, "llama.attention.head_count", 2);
    wk_gw_kv_u32(w, "llama.feed_forward_length", 32);
    wk_gw_kv_u32(w, "llama.context_length", 64);
    float data[16 * 40] = {0};
    const uint64_t emb[2] = {16, 40}, vec[1] = {16}, bad_q[2] = {16, 8};
    wk_gw_tensor(w, "token_embd.weight", WK_GGML_F32, 2, emb, data);
    wk_gw_tensor(w, "output_norm.weight", WK_GGML_F32, 1, vec, data);
    wk_gw_tensor(w, "blk.0.attn_norm.weight", WK_GGML_F32, 1, vec, data);
    wk_gw_tensor(w, "blk.0.attn_q.weight", WK_GGML_F32, 2, bad_q, data);
    bytes = wk_gw_bytes(w, &size);
    CHECK_EQ_INT(load(bytes, size, &m, err, sizeof err), WK_ERR_FORMAT);
    CHECK(strstr(err, "blk.0.attn_q.weight") != NULL);
    printf("shape error: %s\n", err);
    free(bytes);
    wk_gw_free(w);
    TEST_MAIN_END();
}
