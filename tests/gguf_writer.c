/* Test-side GGUF writer: serializes metadata and tensors into a GGUF file image, and generates
 * random well-formed quant blocks. Independent of engine/gguf.c except for the type layout table. */
#include "gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gw_buf { uint8_t *p; size_t n, cap; } gw_buf;

typedef struct gw_tensor {
    char *name;
    wk_ggml_type type;
    int n_dims;
    uint64_t ne[4];
    uint8_t *data;
    size_t nbytes;
} gw_tensor;

struct wk_gw {
    uint32_t version, alignment;
    uint64_t n_kv;
    gw_buf kv;               /* serialized key/value pairs, in call order */
    gw_tensor *t;
    size_t n_t, cap_t;
};

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) {
        fprintf(stderr, "gguf_writer: out of memory\n");
        abort(); /* test code: no recovery worth writing */
    }
    return p;
}

static void put(gw_buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = xrealloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

/* Little-endian regardless of host, so the files match the spec byte for byte. */
static void put_le(gw_buf *b, uint64_t v, int n) {
    uint8_t t[8];
    for (int i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, (size_t)n);
}

static void put_str(gw_buf *b, const char *s) {
    size_t n = strlen(s);
    put_le(b, n, 8);
    put(b, s, n);
}

static void put_key(wk_gw *w, const char *key, wk_gguf_type type) {
    put_str(&w->kv, key);
    put_le(&w->kv, (uint32_t)type, 4);
    w->n_kv++;
}

static int scalar_bytes(wk_gguf_type t) {
    switch (t) {
    case WK_GGUF_UINT8: case WK_GGUF_INT8: case WK_GGUF_BOOL: return 1;
    case WK_GGUF_UINT16: case WK_GGUF_INT16: return 2;
    case WK_GGUF_UINT32: case WK_GGUF_INT32: case WK_GGUF_FLOAT32: return 4;
    case WK_GGUF_UINT64: case WK_GGUF_INT64: case WK_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* One native scalar at p, serialized. */
static void put_scalar(gw_buf *b, wk_gguf_type t, const void *p) {
    uint64_t v = 0;
    switch (t) {
    case WK_GGUF_BOOL: v = *(const bool *)p ? 1 : 0; break;
    case WK_GGUF_UINT8: case WK_GGUF_INT8: v = *(const uint8_t *)p; break;
    case WK_GGUF_UINT16: case WK_GGUF_INT16: { uint16_t x; memcpy(&x, p, 2); v = x; break; }
    case WK_GGUF_UINT32: case WK_GGUF_INT32: case WK_GGUF_FLOAT32: { uint32_t x; memcpy(&x, p, 4); v = x; break; }
    default: memcpy(&v, p, 8); break;
    }
    put_le(b, v, scalar_bytes(t));
}

wk_gw *wk_gw_new(void) {
    wk_gw *w = xrealloc(NULL, sizeof *w);
    memset(w, 0, sizeof *w);
    w->version = 3;
    w->alignment = 32;
    return w;
}

void wk_gw_free(wk_gw *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    free(w->kv.p);
    free(w);
}

void wk_gw_set_version(wk_gw *w, uint32_t version) { w->version = version; }

void wk_gw_set_alignment(wk_gw *w, uint32_t alignment) {
    wk_gw_kv_u32(w, "general.alignment", alignment);
    w->alignment = alignment;
}

void wk_gw_kv_scalar(wk_gw *w, const char *key, wk_gguf_type type, const void *value) {
    put_key(w, key, type);
    put_scalar(&w->kv, type, value);
}

void wk_gw_kv_u32(wk_gw *w, const char *key, uint32_t v) { wk_gw_kv_scalar(w, key, WK_GGUF_UINT32, &v); }
void wk_gw_kv_i32(wk_gw *w, const char *key, int32_t v) { wk_gw_kv_scalar(w, key, WK_GGUF_INT32, &v); }
void wk_gw_kv_f32(wk_gw *w, const char *key, float v) { wk_gw_kv_scalar(w, key, WK_GGUF_FLOAT32, &v); }
void wk_gw_kv_bool(wk_gw *w, const char *key, bool v) { wk_gw_kv_scalar(w, key, WK_GGUF_BOOL, &v); }

void wk_gw_kv_str(wk_gw *w, const char *key, const char *v) {
    put_key(w, key, WK_GGUF_STRING);
    put_str(&w->kv, v);
}

void wk_gw_kv_arr(wk_gw *w, const char *key, wk_gguf_type elem_type, const void *elems, size_t n) {
    put_key(w, key, WK_GGUF_ARRAY);
    put_le(&w->kv, (uint32_t)elem_type, 4);
    put_le(&w->kv, n, 8);
    int sz = scalar_bytes(elem_type);
    /* Native element stride: bool is 1 byte on every ABI we build for, like the wire format. */
    for (size_t i = 0; i < n; i++) put_scalar(&w->kv, elem_type, (const uint8_t *)elems + i * (size_t)sz);
}

void wk_gw_kv_arr_str(wk_gw *w, const char *key, const char *const *v, size_t n) {
    put_key(w, key, WK_GGUF_ARRAY);
    put_le(&w->kv, WK_GGUF_STRING, 4);
    put_le(&w->kv, n, 8);
    for (size_t i = 0; i < n; i++) put_str(&w->kv, v[i]);
}

void wk_gw_kv_arr_f32(wk_gw *w, const char *key, const float *v, size_t n) {
    wk_gw_kv_arr(w, key, WK_GGUF_FLOAT32, v, n);
}

void wk_gw_kv_arr_i32(wk_gw *w, const char *key, const int32_t *v, size_t n) {
    wk_gw_kv_arr(w, key, WK_GGUF_INT32, v, n);
}

void wk_gw_kv_raw(wk_gw *w, const char *key, wk_gguf_type type, const void *bytes, size_t len) {
    put_key(w, key, type);
    put(&w->kv, bytes, len);
}

size_t wk_gw_type_bytes(wk_ggml_type type, size_t n_elems) {
    uint32_t be, bb;
    if (!wk_ggml_type_layout(type, &be, &bb)) return 0;
    return n_elems / be * bb;
}

void wk_gw_tensor(wk_gw *w, const char *name, wk_ggml_type type, int n_dims, const uint64_t *ne, const void *data) {
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t * 2 + 8;
        w->t = xrealloc(w->t, w->cap_t * sizeof *w->t);
    }
    gw_tensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    t->name = xrealloc(NULL, strlen(name) + 1);
    strcpy(t->name, name);
    t->type = type;
    t->n_dims = n_dims;
    uint64_t total = 1;
    for (int d = 0; d < 4; d++) {
        t->ne[d] = d < n_dims ? ne[d] : 1;
        total *= t->ne[d];
    }
    t->nbytes = wk_gw_type_bytes(type, (size_t)total);
    t->data = xrealloc(NULL, t->nbytes);
    if (data) memcpy(t->data, data, t->nbytes);
    else memset(t->data, 0, t->nbytes);
}

static size_t pad_to(size_t x, size_t a) { return (x + a - 1) / a * a; }

uint8_t *wk_gw_bytes(wk_gw *w, size_t *size) {
    gw_buf b = {0};
    size_t a = w->alignment ? w->alignment : 32;
    put(&b, "GGUF", 4);
    put_le(&b, w->version, 4);
    put_le(&b, w->n_t, 8);
    put_le(&b, w->n_kv, 8);
    put(&b, w->kv.p, w->kv.n);
    size_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const gw_tensor *t = &w->t[i];
        put_str(&b, t->name);
        put_le(&b, (uint32_t)t->n_dims, 4);
        for (int d = 0; d < t->n_dims; d++) put_le(&b, t->ne[d], 8);
        put_le(&b, (uint32_t)t->type, 4);
        put_le(&b, off, 8);
        off += pad_to(t->nbytes, a);
    }
    /* ggml pads the infos to the alignment and every tensor's data after it (the last too). */
    static const uint8_t zeros[256];
    while (b.n % a) put(&b, zeros, 1);
    for (size_t i = 0; i < w->n_t; i++) {
        put(&b, w->t[i].data, w->t[i].nbytes);
        while (b.n % a) put(&b, zeros, 1);
    }
    *size = b.n;
    return b.p ? b.p : xrealloc(NULL, 1);
}

bool wk_gw_write(wk_gw *w, const char *path) {
    size_t n;
    uint8_t *p = wk_gw_bytes(w, &n);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = false;
    free(p);
    return ok;
}

/* ---- random blocks ---- */

static uint64_t xs(uint64_t *s) {
    if (!*s) *s = 0x9E3779B97F4A7C15ull; /* xorshift is stuck at 0 */
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* A finite fp16 block scale: mostly normal in [2^-10, 2^4) with either sign, sometimes zero or
 * subnormal, because those are the edge cases of the float arithmetic under test. */
static uint16_t rand_scale_f16(uint64_t *s) {
    uint64_t r = xs(s);
    uint16_t sign = (uint16_t)((r & 1) << 15), man = (uint16_t)((r >> 8) & 0x3FF);
    unsigned pick = (unsigned)((r >> 20) & 31);
    if (pick == 0) return sign;                                       /* +-0 */
    if (pick <= 2) return (uint16_t)(sign | (man ? man : 1));          /* subnormal */
    uint16_t e = (uint16_t)(5 + (r >> 32) % 14);                       /* biased 5..18 */
    return (uint16_t)(sign | (e << 10) | man);
}

static void set16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

void wk_gw_random_blocks(wk_ggml_type type, size_t n_elems, uint64_t *rng, void *out) {
    uint8_t *o = out;
    size_t nb = wk_gw_type_bytes(type, n_elems);
    for (size_t i = 0; i < nb; i++) o[i] = (uint8_t)(xs(rng) >> 24);
    uint32_t be = 1, bb = 1;
    if (!wk_ggml_type_layout(type, &be, &bb)) return;
    for (size_t blk = 0; blk < n_elems / be; blk++) {
        uint8_t *b = o + blk * bb;
        switch (type) {
        case WK_GGML_F32: { /* modest finite floats */
            uint64_t r = xs(rng);
            uint32_t bits = (uint32_t)((r & 1) << 31) | (uint32_t)((100 + (r >> 8) % 56) << 23) |
                            (uint32_t)((r >> 24) & 0x7FFFFF);
            memcpy(b, &bits, 4);
            break;
        }
        case WK_GGML_F16: set16(b, rand_scale_f16(rng)); break;
        case WK_GGML_BF16: { /* finite: exponent below all-ones */
            uint64_t r = xs(rng);
            set16(b, (uint16_t)(((r & 1) << 15) | (((100 + (r >> 8) % 56)) << 7) | ((r >> 24) & 0x7F)));
            break;
        }
        case WK_GGML_Q4_0: case WK_GGML_Q5_0: case WK_GGML_Q8_0: set16(b, rand_scale_f16(rng)); break;
        case WK_GGML_Q4_1: case WK_GGML_Q5_1: case WK_GGML_Q8_1: case WK_GGML_Q4_K: case WK_GGML_Q5_K:
            set16(b, rand_scale_f16(rng));
            set16(b + 2, rand_scale_f16(rng));
            break;
        case WK_GGML_Q6_K: set16(b + 208, rand_scale_f16(rng)); break;
        case WK_GGML_Q2_K:
            set16(b + 80, rand_scale_f16(rng));
            set16(b + 82, rand_scale_f16(rng));
            break;
        case WK_GGML_Q3_K: set16(b + 108, rand_scale_f16(rng)); break;
        case WK_GGML_Q8_K: { float d = 0.01f; memcpy(b, &d, 4); break; }
        }
    }
}
