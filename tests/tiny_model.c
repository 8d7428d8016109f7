/* Writes small random-weight GGUF models (gemma3 / llama / qwen3) whose tensors cover every weight type
 * the engine reads, with an SPM vocabulary, so forward passes can be tested without real weights.
 * Weights are drawn as f32 and quantized by the simple (round-to-nearest, not error-minimizing)
 * quantizers below: the values are whatever the blocks decode to, but their magnitudes are
 * controlled (std ~ 1/sqrt(fan_in)), so activations stay O(1). */
#include "tiny_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "gguf_writer.h"
#include "model/quant.h"
#include "test_rng.h"

/* ------------------------------------------------------------------------------------------
 * Random numbers: splitmix64, so a seed fully determines the file. */

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [lo, hi) */
static float rng_uniform(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)((rng_next(s) >> 40) * (1.0 / 16777216.0));
}

/* ------------------------------------------------------------------------------------------
 * Quantizers: f32 -> ggml blocks, n a multiple of the block size. Each one is the inverse of the
 * dequantization loop in docs/gemma3-gguf.md section 2. */

static void put_f16(uint8_t *p, float f) {
    uint16_t h = wk_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Value of largest magnitude (keeping its sign) and the min/max of a block. */
static void block_stats(const float *x, int n, float *absmax_signed, float *mn, float *mx) {
    float am = 0, lo = x[0], hi = x[0];
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > fabsf(am)) am = x[i];
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    if (absmax_signed) *absmax_signed = am;
    if (mn) *mn = lo;
    if (mx) *mx = hi;
}

/* Q4_0 / Q5_0: symmetric, d = max / -2^(bits-1) as ggml does; Q4_1 / Q5_1: d = (max-min)/levels,
 * m = min. The fifth bit of element j (j+16) goes to bit j (j+16) of qh. */
static void quant_q4q5_01(const float *x, size_t n, uint8_t *out, int bits, bool with_min) {
    const int levels = (1 << bits) - 1;
    for (size_t b = 0; b < n / 32; b++, x += 32) {
        float am, mn, mx, d, m = 0;
        block_stats(x, 32, &am, &mn, &mx);
        if (with_min) {
            d = (mx - mn) / levels;
            m = mn;
        } else {
            d = am / -(float)(1 << (bits - 1));
        }
        const float id = d != 0 ? 1.0f / d : 0.0f;
        int q[32];
        for (int j = 0; j < 32; j++) {
            float v = with_min ? (x[j] - m) * id + 0.5f : x[j] * id + (float)(1 << (bits - 1)) + 0.5f;
            q[j] = clampi((int)floorf(v), 0, levels);
        }
        uint8_t *p = out;
        put_f16(p, d), p += 2;
        if (with_min) put_f16(p, m), p += 2;
        if (bits == 5) {
            uint32_t qh = 0;
            for (int j = 0; j < 32; j++) qh |= (uint32_t)((q[j] >> 4) & 1) << j;
            for (int i = 0; i < 4; i++) *p++ = (uint8_t)(qh >> (8 * i));
        }
        for (int j = 0; j < 16; j++) *p++ = (uint8_t)((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
        out = p;
    }
}

static void quant_q8_0(const float *x, size_t n, uint8_t *out) {
    for (size_t b = 0; b < n / 32; b++, x += 32, out += 34) {
        float am;
        block_stats(x, 32, &am, NULL, NULL);
        const float d = fabsf(am) / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        put_f16(out, d);
        for (int j = 0; j < 32; j++) out[2 + j] = (uint8_t)(int8_t)clampi((int)lroundf(x[j] * id), -127, 127);
    }
}

/* Q4_K / Q5_K: 8 sub-blocks of 32 with a 6-bit scale and min each (relative to the super-block
 * d and dmin), element = d*sc*q - dmin*m. */
static void quant_q45_k(const float *x, size_t n, uint8_t *out, int bits) {
    const int levels = (1 << bits) - 1;
    for (size_t b = 0; b < n / 256; b++, x += 256) {
        float sc[8], mn[8], maxsc = 0, maxmn = 0;
        for (int j = 0; j < 8; j++) {
            float lo, hi;
            block_stats(x + 32 * j, 32, NULL, &lo, &hi);
            if (lo > 0) lo = 0; /* mins are stored as non-negative offsets */
            sc[j] = (hi - lo) / levels;
            mn[j] = -lo;
            if (sc[j] > maxsc) maxsc = sc[j];
            if (mn[j] > maxmn) maxmn = mn[j];
        }
        uint8_t *p = out;
        put_f16(p, maxsc / 63.0f);
        put_f16(p + 2, maxmn / 63.0f);
        /* quantize against the scales as they will be decoded */
        const float D = wk_f16_to_f32(wk_f32_to_f16(maxsc / 63.0f));
        const float M = wk_f16_to_f32(wk_f32_to_f16(maxmn / 63.0f));
        uint8_t ls[8], lm[8];
        for (int j = 0; j < 8; j++) {
            ls[j] = (uint8_t)(D > 0 ? clampi((int)lroundf(sc[j] / D), 0, 63) : 0);
            lm[j] = (uint8_t)(M > 0 ? clampi((int)lroundf(mn[j] / M), 0, 63) : 0);
        }
        uint8_t *s = p + 4;
        memset(s, 0, 12);
        for (int j = 0; j < 4; j++) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        }
        for (int j = 4; j < 8; j++) { /* inverse of get_scale_min_k4 for j >= 4 */
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
        int q[256];
        for (int i = 0; i < 256; i++) {
            const float dd = D * ls[i / 32], mm = M * lm[i / 32];
            q[i] = dd > 0 ? clampi((int)lroundf((x[i] + mm) / dd), 0, levels) : 0;
        }
        uint8_t *qh = p + 16, *qs = p + 16 + (bits == 5 ? 32 : 0);
        if (bits == 5) memset(qh, 0, 32);
        for (int c = 0; c < 4; c++) /* 64-element chunk c: sub-block 2c in low nibbles, 2c+1 high */
            for (int l = 0; l < 32; l++) {
                const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
                qs[32 * c + l] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
                if (bits == 5) qh[l] |= (uint8_t)(((lo >> 4) & 1) << (2 * c) | ((hi >> 4) & 1) << (2 * c + 1));
            }
        out += bits == 5 ? 176 : 144;
    }
}

/* Q6_K: 16 sub-blocks of 16 with an int8 scale each; codes -32..31 stored as 6 bits. */
static void quant_q6_k(const float *x, size_t n, uint8_t *out) {
    for (size_t b = 0; b < n / 256; b++, x += 256, out += 210) {
        float sc[16], maxsc = 0;
        for (int j = 0; j < 16; j++) {
            float am;
            block_stats(x + 16 * j, 16, &am, NULL, NULL);
            sc[j] = fabsf(am) / 31.0f;
            if (sc[j] > maxsc) maxsc = sc[j];
        }
        uint8_t *ql = out, *qh = out + 128;
        int8_t *scales = (int8_t *)(out + 192);
        put_f16(out + 208, maxsc / 127.0f);
        const float D = wk_f16_to_f32(wk_f32_to_f16(maxsc / 127.0f));
        int u[256];
        for (int j = 0; j < 16; j++) scales[j] = (int8_t)(D > 0 ? clampi((int)lroundf(sc[j] / D), 0, 127) : 0);
        for (int i = 0; i < 256; i++) {
            const float dd = D * scales[i / 16];
            u[i] = (dd > 0 ? clampi((int)lroundf(x[i] / dd), -32, 31) : 0) + 32;
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int *v = u + 128 * h + l;
                ql[64 * h + l] = (uint8_t)((v[0] & 0xF) | (v[64] & 0xF) << 4);
                ql[64 * h + l + 32] = (uint8_t)((v[32] & 0xF) | (v[96] & 0xF) << 4);
                qh[32 * h + l] = (uint8_t)((v[0] >> 4) | (v[32] >> 4) << 2 | (v[64] >> 4) << 4 | (v[96] >> 4) << 6);
            }
    }
}

uint8_t *tiny_encode(wk_ggml_type type, const float *x, size_t n) {
    uint8_t *out = calloc(1, wk_gw_type_bytes(type, n));
    if (!out) return NULL;
    switch (type) {
    case WK_GGML_F32: memcpy(out, x, n * sizeof(float)); break;
    case WK_GGML_F16:
        for (size_t i = 0; i < n; i++) put_f16(out + 2 * i, x[i]);
        break;
    case WK_GGML_BF16:
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            u += 0x7FFF + ((u >> 16) & 1); /* round to nearest even (values are finite) */
            out[2 * i] = (uint8_t)(u >> 16);
            out[2 * i + 1] = (uint8_t)(u >> 24);
        }
        break;
    case WK_GGML_Q4_0: quant_q4q5_01(x, n, out, 4, false); break;
    case WK_GGML_Q4_1: quant_q4q5_01(x, n, out, 4, true); break;
    case WK_GGML_Q5_0: quant_q4q5_01(x, n, out, 5, false); break;
    case WK_GGML_Q5_1: quant_q4q5_01(x, n, out, 5, true); break;
    case WK_GGML_Q8_0: quant_q8_0(x, n, out); break;
    case WK_GGML_Q4_K: quant_q45_k(x, n, out, 4); break;
    case WK_GGML_Q5_K: quant_q45_k(x, n, out, 5); break;
    case WK_GGML_Q6_K: quant_q6_k(x, n, out); break;
    default: free(out); return NULL;
    }
    return out;
}

/* Adds a tensor of uniform random values in [lo, hi), encoded as `type`. */
static bool add_random(wk_gw *w, uint64_t *rng, const char *name, wk_ggml_type type, uint64_t ne0, uint64_t ne1,
                       float lo, float hi) {
    const size_t n = (size_t)(ne0 * ne1);
    float *x = malloc(n * sizeof *x);
    if (!x) return false;
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(rng, lo, hi);
    uint8_t *data = tiny_encode(type, x, n);
    free(x);
    if (!data) return false;
    const uint64_t ne[2] = {ne0, ne1};
    wk_gw_tensor(w, name, type, ne1 == 1 ? 1 : 2, ne, data);
    free(data);
    return true;
}

/* A matrix of `out` rows of `in` values with std 1/sqrt(in): uniform in +-sqrt(3/in). */
static bool add_matrix(wk_gw *w, uint64_t *rng, const char *name, wk_ggml_type type, int in, int out) {
    const float a = sqrtf(3.0f / (float)in);
    return add_random(w, rng, name, type, (uint64_t)in, (uint64_t)out, -a, a);
}

/* Norm weights around 1, as Gemma's converter leaves them after adding 1. */
static bool add_norm(wk_gw *w, uint64_t *rng, const char *name, int n) {
    return add_random(w, rng, name, WK_GGML_F32, (uint64_t)n, 1, 0.5f, 1.5f);
}

/* ------------------------------------------------------------------------------------------
 * Vocabulary. */

#define SPM_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's space */

/* Merges in an order where each piece can be formed from two earlier pieces, so the SPM merge
 * loop can actually reach them ("▁Paris" = "▁Par" + "is", "▁Par" = "▁P" + "ar"). */
static const char *const k_merges[] = {
    "he", "in", "er", "an", "on", "at", "is", "it", "en", "or", "es", "ar", "re", "ti", "al", "ce", "nd",
    "ap", "ou", "ng", "st", "ed", "te", "le",
    SPM_SPACE "t", SPM_SPACE "a", SPM_SPACE "s", SPM_SPACE "w", SPM_SPACE "c", SPM_SPACE "o", SPM_SPACE "b",
    SPM_SPACE "f", SPM_SPACE "m", SPM_SPACE "p", SPM_SPACE "d", SPM_SPACE "h", SPM_SPACE "i", SPM_SPACE "T",
    SPM_SPACE "I", SPM_SPACE "P", SPM_SPACE "F", SPM_SPACE "A", SPM_SPACE "W", SPM_SPACE "H",
    SPM_SPACE "the", SPM_SPACE "of", SPM_SPACE "and", SPM_SPACE "is", SPM_SPACE "in", SPM_SPACE "it",
    SPM_SPACE "cap", "ital", SPM_SPACE "capital", SPM_SPACE "Fr", "ance", SPM_SPACE "France",
    SPM_SPACE "Par", SPM_SPACE "Paris", SPM_SPACE "The", "ing", SPM_SPACE "to", SPM_SPACE "on",
};

typedef struct vocab {
    char *text[TINY_N_VOCAB];
    float score[TINY_N_VOCAB];
    int32_t type[TINY_N_VOCAB];
    int n;
} vocab;

static bool vocab_has(const vocab *v, const char *s) {
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->text[i], s) == 0) return true;
    return false;
}

/* Appends unless present or full; token types: 1 normal, 2 unknown, 3 control, 6 byte. */
static void vocab_add(vocab *v, const char *s, float score, int32_t type) {
    if (v->n >= TINY_N_VOCAB || vocab_has(v, s)) return;
    v->text[v->n] = strdup(s);
    v->score[v->n] = score;
    v->type[v->n] = type;
    v->n++;
}

static bool vocab_build(vocab *v, bool gemma) {
    memset(v, 0, sizeof *v);
    vocab_add(v, "<unk>", 0, 2);
    vocab_add(v, "<s>", 0, 3);
    vocab_add(v, "</s>", 0, 3);
    char buf[32];
    for (int b = 0; b < 256; b++) {
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        vocab_add(v, buf, 0, 6);
    }
    if (gemma) {
        vocab_add(v, "<start_of_turn>", 0, 3);
        vocab_add(v, "<end_of_turn>", 0, 3);
    }
    /* single characters: present so text never needs byte fallback, scored below every merge */
    vocab_add(v, SPM_SPACE, -1000.0f, 1);
    for (int c = 0x21; c < 0x7F; c++) {
        snprintf(buf, sizeof buf, "%c", c);
        vocab_add(v, buf, -1000.0f - (float)c, 1);
    }
    /* merges: a higher score merges first in SPM */
    int k = 0;
    for (size_t i = 0; i < sizeof k_merges / sizeof k_merges[0]; i++) vocab_add(v, k_merges[i], -(float)k++, 1);
    /* fill up with letter pairs, most frequent letters first */
    static const char letters[] = "etaoinshrdlucmfwypvbgkjqxz";
    for (int s = 1; s < 2 * 26 && v->n < TINY_N_VOCAB; s++)
        for (int i = 0; i < 26 && v->n < TINY_N_VOCAB; i++) {
            int j = s - i;
            if (j < 0 || j >= 26) continue;
            snprintf(buf, sizeof buf, "%c%c", letters[i], letters[j]);
            vocab_add(v, buf, -(float)k++, 1);
        }
    for (int i = 0; i < v->n; i++)
        if (!v->text[i]) return false;
    return v->n == TINY_N_VOCAB;
}

static void vocab_free(vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->text[i]);
}

/* ------------------------------------------------------------------------------------------
 * The model file. */

/* The matrix types cycled through with mixed_quants; the first seven are layer 0's
 * wq wk wv wo gate up down. 7 roles and 11 types are coprime, so 2 layers cover every type. */
static const wk_ggml_type k_mixed[] = {
    WK_GGML_Q4_K, WK_GGML_Q5_0, WK_GGML_Q8_0, WK_GGML_Q4_0, WK_GGML_Q5_K, WK_GGML_Q4_1,
    WK_GGML_Q6_K, WK_GGML_Q5_1, WK_GGML_F16, WK_GGML_BF16, WK_GGML_F32,
};

/* A string array as GGUF lays it out (element type, count, then length + bytes each), for
 * wk_gw_kv_raw. NULL when out of memory. */
static uint8_t *string_array_bytes(const wk_gguf_kv *kv, size_t *len) {
    size_t n = 12;
    for (uint64_t i = 0; i < kv->arr_count; i++) n += 8 + kv->arr_strs[i].len;
    uint8_t *b = malloc(n), *p = b;
    if (!b) return NULL;
    const uint32_t type = WK_GGUF_STRING;
    memcpy(p, &type, 4), p += 4;
    memcpy(p, &kv->arr_count, 8), p += 8;
    for (uint64_t i = 0; i < kv->arr_count; i++) {
        memcpy(p, &kv->arr_strs[i].len, 8), p += 8;
        memcpy(p, kv->arr_strs[i].ptr, kv->arr_strs[i].len), p += kv->arr_strs[i].len;
    }
    *len = n;
    return b;
}

/* Copies one metadata pair as it is (the types tokenizer metadata uses). */
static bool copy_kv(wk_gw *w, const wk_gguf_kv *kv) {
    switch (kv->type) {
    case WK_GGUF_STRING: {
        uint8_t *b = malloc(8 + kv->str.len);
        if (!b) return false;
        memcpy(b, &kv->str.len, 8);
        memcpy(b + 8, kv->str.ptr, kv->str.len);
        wk_gw_kv_raw(w, kv->key, WK_GGUF_STRING, b, 8 + kv->str.len);
        free(b);
        return true;
    }
    case WK_GGUF_UINT32: wk_gw_kv_u32(w, kv->key, (uint32_t)kv->v.u); return true;
    case WK_GGUF_INT32: wk_gw_kv_i32(w, kv->key, (int32_t)kv->v.i); return true;
    case WK_GGUF_FLOAT32: wk_gw_kv_f32(w, kv->key, (float)kv->v.f); return true;
    case WK_GGUF_BOOL: wk_gw_kv_bool(w, kv->key, kv->v.b); return true;
    case WK_GGUF_ARRAY:
        if (kv->arr_type == WK_GGUF_STRING) {
            size_t len;
            uint8_t *b = string_array_bytes(kv, &len);
            if (!b) return false;
            wk_gw_kv_raw(w, kv->key, WK_GGUF_ARRAY, b, len);
            free(b);
            return true;
        }
        if (kv->arr_type == WK_GGUF_INT32 || kv->arr_type == WK_GGUF_FLOAT32 || kv->arr_type == WK_GGUF_UINT32) {
            wk_gw_kv_arr(w, kv->key, kv->arr_type, kv->arr_data, (size_t)kv->arr_count); /* little-endian as here */
            return true;
        }
        return false;
    default: return false;
    }
}

/* vocab_from's tokenizer.* metadata into w (without its chat template when one is given);
 * *n_vocab gets its token count. */
static bool copy_vocab(wk_gw *w, const tiny_model_opts *o, uint64_t *n_vocab) {
    char err[256];
    wk_gguf *g = wk_gguf_open(o->vocab_from, err, sizeof err);
    if (!g) {
        fprintf(stderr, "tiny_model: %s: %s\n", o->vocab_from, err);
        return false;
    }
    const wk_gguf_kv *tokens = wk_gguf_find(g, "tokenizer.ggml.tokens");
    bool ok = tokens && tokens->type == WK_GGUF_ARRAY && tokens->arr_count > 0;
    if (ok) *n_vocab = tokens->arr_count;
    for (uint64_t i = 0; i < g->n_kv && ok; i++) {
        const wk_gguf_kv *kv = &g->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10) != 0) continue;
        if (o->chat_template && !strcmp(kv->key, "tokenizer.chat_template")) continue;
        ok = copy_kv(w, kv);
        if (!ok) fprintf(stderr, "tiny_model: cannot copy %s (type %d)\n", kv->key, (int)kv->type);
    }
    wk_gguf_close(g);
    return ok;
}

static wk_gw *build(const tiny_model_opts *o) {
    const bool gemma = strcmp(o->arch, "gemma3") == 0, qwen3 = strcmp(o->arch, "qwen3") == 0;
    if (!gemma && !qwen3 && strcmp(o->arch, "llama") != 0) return NULL;
    const int n_layer = o->n_layer > 0 ? o->n_layer : gemma ? 6 : 3;
    const int swa = !gemma ? 0 : o->sliding_window == 0 ? 16 : o->sliding_window;
    const int E = TINY_N_EMBD, F = TINY_N_FF, D = TINY_HEAD_DIM, Hq = TINY_N_HEAD, Hk = TINY_N_HEAD_KV;
    uint64_t rng = o->seed * 0x2545F4914F6CDD1Dull + 1;
    vocab voc;
    wk_gw *w = wk_gw_new();
    bool ok = vocab_build(&voc, gemma) && w;
    if (!ok) goto done;

    /* metadata as convert_hf_to_gguf.py writes it */
    char key[96];
    const char *a = o->arch;
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    wk_gw_kv_str(w, "general.architecture", a);
    wk_gw_kv_str(w, "general.name", gemma ? "tiny-gemma3" : qwen3 ? "tiny-qwen3" : "tiny-llama");
    wk_gw_kv_u32(w, KEY("context_length"), TINY_N_CTX);
    wk_gw_kv_u32(w, KEY("embedding_length"), (uint32_t)E);
    wk_gw_kv_u32(w, KEY("block_count"), (uint32_t)n_layer);
    wk_gw_kv_u32(w, KEY("feed_forward_length"), (uint32_t)F);
    wk_gw_kv_u32(w, KEY("attention.head_count"), (uint32_t)Hq);
    wk_gw_kv_u32(w, KEY("attention.head_count_kv"), (uint32_t)Hk);
    wk_gw_kv_u32(w, KEY("attention.key_length"), (uint32_t)D);
    wk_gw_kv_u32(w, KEY("attention.value_length"), (uint32_t)D);
    wk_gw_kv_f32(w, KEY("attention.layer_norm_rms_epsilon"), gemma ? 1e-6f : 1e-5f);
    wk_gw_kv_f32(w, KEY("rope.freq_base"), gemma ? 1e6f : 10000.0f);
    if (gemma && swa > 0) wk_gw_kv_u32(w, KEY("attention.sliding_window"), (uint32_t)swa);
    if (!gemma && !qwen3) wk_gw_kv_u32(w, KEY("rope.dimension_count"), (uint32_t)D); /* qwen3: head_dim, unwritten */
#undef KEY
    uint64_t n_vocab = TINY_N_VOCAB;
    if (o->vocab_from) {
        ok = copy_vocab(w, o, &n_vocab);
        if (!ok) goto done;
    } else {
        wk_gw_kv_str(w, "tokenizer.ggml.model", "llama");
        wk_gw_kv_str(w, "tokenizer.ggml.pre", "default");
        wk_gw_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)voc.text, (size_t)voc.n);
        wk_gw_kv_arr_f32(w, "tokenizer.ggml.scores", voc.score, (size_t)voc.n);
        wk_gw_kv_arr_i32(w, "tokenizer.ggml.token_type", voc.type, (size_t)voc.n);
        wk_gw_kv_u32(w, "tokenizer.ggml.bos_token_id", TINY_TOKEN_BOS);
        wk_gw_kv_u32(w, "tokenizer.ggml.eos_token_id", TINY_TOKEN_EOS);
        wk_gw_kv_u32(w, "tokenizer.ggml.unknown_token_id", TINY_TOKEN_UNK);
        wk_gw_kv_bool(w, "tokenizer.ggml.add_bos_token", true);
        wk_gw_kv_bool(w, "tokenizer.ggml.add_eos_token", false);
        if (gemma) wk_gw_kv_bool(w, "tokenizer.ggml.add_space_prefix", false);
    }
    if (o->chat_template) wk_gw_kv_str(w, "tokenizer.chat_template", o->chat_template);

    /* Embeddings: Gemma multiplies them by sqrt(n_embd) = 16, so std 1/16 gives an O(1) residual
     * stream and, through the tied output head, O(1) logits. Llama uses them as they are. Qwen 3
     * ties its head too but scales nothing: std 1/16 keeps its logits O(1), and the first norm
     * lifts the small residual stream. */
    const float ea = gemma || qwen3 ? sqrtf(3.0f / (float)E) : sqrtf(3.0f);
    const wk_ggml_type embd_type = !o->mixed_quants ? WK_GGML_F32
                                   : o->embd_type != WK_GGML_F32 ? o->embd_type
                                   : gemma ? WK_GGML_Q8_0 : WK_GGML_F16;
    ok = add_random(w, &rng, "token_embd.weight", embd_type, (uint64_t)E, n_vocab, -ea, ea);
    ok = ok && add_norm(w, &rng, "output_norm.weight", E);
    if (!gemma && !qwen3) /* untied output head on llama, Q6_K as llama-quantize makes it; Qwen 3's small models tie it */
        ok = ok && add_matrix(w, &rng, "output.weight", o->mixed_quants ? WK_GGML_Q6_K : WK_GGML_F32, E, (int)n_vocab);

    for (int il = 0; il < n_layer && ok; il++) {
        char name[96];
        const char *roles[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
        const int in[7] = {E, E, E, Hq * D, E, E, F}, out[7] = {Hq * D, Hk * D, Hk * D, E, F, F, E};
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", il);
        ok = ok && add_norm(w, &rng, name, E);
        for (int r = 0; r < 7 && ok; r++) {
            const size_t nt = sizeof k_mixed / sizeof k_mixed[0];
            const wk_ggml_type t = o->mixed_quants ? k_mixed[((size_t)il * 7 + (size_t)r) % nt] : WK_GGML_F32;
            snprintf(name, sizeof name, "blk.%d.%s.weight", il, roles[r]);
            ok = add_matrix(w, &rng, name, t, in[r], out[r]);
        }
        const char *norms[] = {"ffn_norm", "attn_q_norm", "attn_k_norm", "post_attention_norm", "post_ffw_norm"};
        for (int i = 0; i < (gemma ? 5 : qwen3 ? 3 : 1) && ok; i++) { /* qwen3: no post norms */
            snprintf(name, sizeof name, "blk.%d.%s.weight", il, norms[i]);
            ok = add_norm(w, &rng, name, i == 1 || i == 2 ? D : E);
        }
    }
done:
    vocab_free(&voc);
    if (!ok) {
        if (w) wk_gw_free(w);
        return NULL;
    }
    return w;
}

bool tiny_model_write(const tiny_model_opts *o, const char *path) {
    wk_gw *w = build(o);
    if (!w) return false;
    bool ok = wk_gw_write(w, path);
    wk_gw_free(w);
    return ok;
}

uint8_t *tiny_model_bytes(const tiny_model_opts *o, size_t *size) {
    wk_gw *w = build(o);
    if (!w) return NULL;
    uint8_t *bytes = wk_gw_bytes(w, size);
    wk_gw_free(w);
    return bytes;
}

/* ------------------------------------------------------------------------------------------
 * For the tests that run an engine on these files. */

void tiny_model_tokens(int32_t *tok, int n, uint64_t seed) {
    tok[0] = TINY_TOKEN_BOS;
    for (int i = 1; i < n; i++)
        tok[i] = TINY_TOKEN_BYTE0 + (int32_t)((rng_lcg64(&seed) >> 33) % (TINY_N_VOCAB - TINY_TOKEN_BYTE0));
}

void tiny_engine_params(wk_engine_params *p, const char *path) {
    wk_engine_params_default(p);
    p->model_path = path;
    p->max_ctx = 64;
    p->max_batch_tokens = 64;
}
