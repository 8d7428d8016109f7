/* The WUSH-KV sidecar format (see wush_sidecar.h): tensor names, the model fingerprint, the check
 * that a sidecar belongs to a model, and reading a tensor. */
#include "wush/wush_sidecar.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "wushkv/wushkv.h"

void wk_wush_tensor_name(char *buf, size_t cap, int layer, int kv_head, wk_wush_tensor which) {
    static const char *const suffix[] = {"k.%d.T", "k.%d.Tinv_t", "v.%d.T", "v.%d.Tinv"};
    char tail[32];
    snprintf(tail, sizeof tail, suffix[which], kv_head);
    snprintf(buf, cap, "wush.blk.%d.%s", layer, tail);
}

typedef struct fnv { uint64_t h; } fnv;
static void fnv_add(fnv *f, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) f->h = (f->h ^ b[i]) * 0x100000001b3ull;
}
static void fnv_u64(fnv *f, uint64_t v) { /* little-endian, so the hash is the same on any host */
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    fnv_add(f, b, 8);
}

void wk_model_fingerprint(const wk_gguf *g, char out[WK_FINGERPRINT_LEN]) {
    fnv f = {0xcbf29ce484222325ull};
    const wk_gguf_kv *arch = wk_gguf_find(g, "general.architecture");
    if (arch && arch->type == WK_GGUF_STRING) fnv_add(&f, arch->str.ptr, arch->str.len);
    fnv_u64(&f, g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const wk_gguf_tensor *t = &g->tensors[i];
        fnv_add(&f, t->name, strlen(t->name) + 1);
        fnv_u64(&f, t->type);
        for (int d = 0; d < 4; d++) fnv_u64(&f, t->ne[d]);
        fnv_add(&f, t->data, t->nbytes < 4096 ? t->nbytes : 4096);
    }
    snprintf(out, WK_FINGERPRINT_LEN, "fnv1a64:%016llx", (unsigned long long)f.h);
}

static bool get_int(const wk_gguf *g, const char *key, int *out) {
    int64_t v;
    if (!wk_gguf_get_i64(g, key, &v) || v < 0 || v > (1 << 30)) return false;
    *out = (int)v;
    return true;
}

int wk_wush_sidecar_check_gguf(const wk_gguf *model, const wk_hparams *hp, const wk_gguf *sc, int *block,
                               char *err, size_t errlen) {
    char arch[32] = "", fp[WK_FINGERPRINT_LEN], want_fp[WK_FINGERPRINT_LEN], name[256] = "?";
    int version = 0;
    if (!wk_gguf_get_str(sc, "general.architecture", arch, sizeof arch) || strcmp(arch, WK_WUSH_ARCH) != 0)
        return wk_fail(err, errlen, WK_ERR_FORMAT, "not a WUSH-KV sidecar (general.architecture '%s', want '%s')", arch,
                    WK_WUSH_ARCH);
    if (!get_int(sc, WK_WUSH_KEY_VERSION, &version) || version != WK_WUSH_VERSION)
        return wk_fail(err, errlen, WK_ERR_UNSUPPORTED, "WUSH-KV sidecar version %d (this build reads %d)", version,
                    WK_WUSH_VERSION);
    wk_gguf_get_str(sc, WK_WUSH_KEY_MODEL_NAME, name, sizeof name);
    wk_model_fingerprint(model, want_fp);
    if (!wk_gguf_get_str(sc, WK_WUSH_KEY_FINGERPRINT, fp, sizeof fp))
        return wk_fail(err, errlen, WK_ERR_FORMAT, "WUSH-KV sidecar lacks %s", WK_WUSH_KEY_FINGERPRINT);
    if (strcmp(fp, want_fp) != 0)
        return wk_fail(err, errlen, WK_ERR_INVALID,
                    "WUSH-KV sidecar was calibrated for another model ('%s', fingerprint %s; this model's is %s)",
                    name, fp, want_fp);
    /* The fingerprint covers the shapes too; these checks name the mismatch if a hash ever collides
     * and protect the loops below from a file that lies about them. */
    const struct { const char *key; int want; } shapes[] = {
        {WK_WUSH_KEY_N_LAYER, hp->n_layer},     {WK_WUSH_KEY_N_HEAD, hp->n_head},
        {WK_WUSH_KEY_N_HEAD_KV, hp->n_head_kv}, {WK_WUSH_KEY_HEAD_DIM, hp->head_dim},
        {WK_WUSH_KEY_N_EMBD, hp->n_embd},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        int v = -1;
        if (!get_int(sc, shapes[i].key, &v) || v != shapes[i].want)
            return wk_fail(err, errlen, WK_ERR_INVALID, "WUSH-KV sidecar has %s = %d, the model %d", shapes[i].key, v,
                        shapes[i].want);
    }
    int B = 0;
    const int D = hp->head_dim;
    if (!get_int(sc, WK_WUSH_KEY_BLOCK, &B) || B <= 0 || (B & (B - 1)) || D % B)
        return wk_fail(err, errlen, WK_ERR_FORMAT, "WUSH-KV sidecar block size %d does not divide head_dim %d", B, D);
    for (int il = 0; il < hp->n_layer; il++)
        for (int h = 0; h < hp->n_head_kv; h++)
            for (int w = 0; w < 4; w++) {
                char tn[64];
                wk_wush_tensor_name(tn, sizeof tn, il, h, (wk_wush_tensor)w);
                const wk_gguf_tensor *t = wk_gguf_find_tensor(sc, tn);
                if (!t) return wk_fail(err, errlen, WK_ERR_FORMAT, "WUSH-KV sidecar lacks tensor %s", tn);
                if (t->type != WK_GGML_F32 || t->ne[0] != (uint64_t)B || t->ne[1] != (uint64_t)B ||
                    t->ne[2] != (uint64_t)(D / B) || t->ne[3] != 1)
                    return wk_fail(err, errlen, WK_ERR_FORMAT, "WUSH-KV sidecar tensor %s is not f32 [%d, %d, %d]", tn, B,
                                B, D / B);
            }
    if (block) *block = B;
    return WK_OK;
}

int wk_wush_sidecar_read(const wk_gguf *sc, int layer, int head, wk_wush_tensor which, size_t n, float *f, double *d,
                         char *err, size_t errlen) {
    char name[96];
    wk_wush_tensor_name(name, sizeof name, layer, head, which);
    const wk_gguf_tensor *t = wk_gguf_find_tensor(sc, name);
    if (!t || t->type != WK_GGML_F32 || t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] != n)
        return snprintf(err, errlen, "WUSH sidecar: tensor '%s' missing or misshapen", name), WK_ERR_FORMAT;
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, t->data + 4 * i, 4);
        if (f) f[i] = v;
        if (d) d[i] = v;
    }
    return 0;
}
