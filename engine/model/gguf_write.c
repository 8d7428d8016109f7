/* GGUF v3 writer (gguf_write.h): serializes metadata and tensors into a GGUF file image.
 * Independent of the reader (gguf.c) except for the type layout table, so tests that read back
 * what it wrote check two implementations against each other. */
#include "model/gguf_write.h"

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
    bool failed;             /* an allocation failed: the image would be incomplete */
};

static bool usable(const wk_gw *w) { return w && !w->failed; }

static bool put(wk_gw *w, gw_buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = (b->n + n) * 2 + 64;
        uint8_t *p = realloc(b->p, cap);
        if (!p) return w->failed = true, false;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
    return true;
}

/* Little-endian regardless of host, so the files match the spec byte for byte. */
static void put_le(wk_gw *w, gw_buf *b, uint64_t v, int n) {
    uint8_t t[8];
    for (int i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(w, b, t, (size_t)n);
}

static void put_str(wk_gw *w, gw_buf *b, const char *s) {
    size_t n = strlen(s);
    put_le(w, b, n, 8);
    put(w, b, s, n);
}

static void put_key(wk_gw *w, const char *key, wk_gguf_type type) {
    put_str(w, &w->kv, key);
    put_le(w, &w->kv, (uint32_t)type, 4);
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
static void put_scalar(wk_gw *w, gw_buf *b, wk_gguf_type t, const void *p) {
    uint64_t v = 0;
    switch (t) {
    case WK_GGUF_BOOL: v = *(const bool *)p ? 1 : 0; break;
    case WK_GGUF_UINT8: case WK_GGUF_INT8: v = *(const uint8_t *)p; break;
    case WK_GGUF_UINT16: case WK_GGUF_INT16: { uint16_t x; memcpy(&x, p, 2); v = x; break; }
    case WK_GGUF_UINT32: case WK_GGUF_INT32: case WK_GGUF_FLOAT32: { uint32_t x; memcpy(&x, p, 4); v = x; break; }
    default: memcpy(&v, p, 8); break;
    }
    put_le(w, b, v, scalar_bytes(t));
}

wk_gw *wk_gw_new(void) {
    wk_gw *w = calloc(1, sizeof *w);
    if (!w) return NULL;
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

bool wk_gw_ok(const wk_gw *w) { return usable(w); }

void wk_gw_set_version(wk_gw *w, uint32_t version) {
    if (usable(w)) w->version = version;
}

void wk_gw_set_alignment(wk_gw *w, uint32_t alignment) {
    if (!usable(w)) return;
    wk_gw_kv_u32(w, "general.alignment", alignment);
    w->alignment = alignment;
}

void wk_gw_kv_scalar(wk_gw *w, const char *key, wk_gguf_type type, const void *value) {
    if (!usable(w)) return;
    put_key(w, key, type);
    put_scalar(w, &w->kv, type, value);
}

void wk_gw_kv_u32(wk_gw *w, const char *key, uint32_t v) { wk_gw_kv_scalar(w, key, WK_GGUF_UINT32, &v); }
void wk_gw_kv_i32(wk_gw *w, const char *key, int32_t v) { wk_gw_kv_scalar(w, key, WK_GGUF_INT32, &v); }
void wk_gw_kv_f32(wk_gw *w, const char *key, float v) { wk_gw_kv_scalar(w, key, WK_GGUF_FLOAT32, &v); }
void wk_gw_kv_bool(wk_gw *w, const char *key, bool v) { wk_gw_kv_scalar(w, key, WK_GGUF_BOOL, &v); }

void wk_gw_kv_str(wk_gw *w, const char *key, const char *v) {
    if (!usable(w)) return;
    put_key(w, key, WK_GGUF_STRING);
    put_str(w, &w->kv, v);
}

void wk_gw_kv_arr(wk_gw *w, const char *key, wk_gguf_type elem_type, const void *elems, size_t n) {
    if (!usable(w)) return;
    put_key(w, key, WK_GGUF_ARRAY);
    put_le(w, &w->kv, (uint32_t)elem_type, 4);
    put_le(w, &w->kv, n, 8);
    int sz = scalar_bytes(elem_type);
    /* Native element stride: bool is 1 byte on every ABI we build for, like the wire format. */
    for (size_t i = 0; i < n; i++) put_scalar(w, &w->kv, elem_type, (const uint8_t *)elems + i * (size_t)sz);
}

void wk_gw_kv_arr_str(wk_gw *w, const char *key, const char *const *v, size_t n) {
    if (!usable(w)) return;
    put_key(w, key, WK_GGUF_ARRAY);
    put_le(w, &w->kv, WK_GGUF_STRING, 4);
    put_le(w, &w->kv, n, 8);
    for (size_t i = 0; i < n; i++) put_str(w, &w->kv, v[i]);
}

void wk_gw_kv_arr_f32(wk_gw *w, const char *key, const float *v, size_t n) {
    wk_gw_kv_arr(w, key, WK_GGUF_FLOAT32, v, n);
}

void wk_gw_kv_arr_i32(wk_gw *w, const char *key, const int32_t *v, size_t n) {
    wk_gw_kv_arr(w, key, WK_GGUF_INT32, v, n);
}

void wk_gw_kv_raw(wk_gw *w, const char *key, wk_gguf_type type, const void *bytes, size_t len) {
    if (!usable(w)) return;
    put_key(w, key, type);
    put(w, &w->kv, bytes, len);
}

size_t wk_gw_type_bytes(wk_ggml_type type, size_t n_elems) {
    uint32_t be, bb;
    if (!wk_ggml_type_layout(type, &be, &bb)) return 0;
    return n_elems / be * bb;
}

void wk_gw_tensor(wk_gw *w, const char *name, wk_ggml_type type, int n_dims, const uint64_t *ne, const void *data) {
    if (!usable(w)) return;
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t * 2 + 8;
        gw_tensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) {
            w->failed = true;
            return;
        }
        w->t = t;
        w->cap_t = cap;
    }
    gw_tensor t = {.type = type, .n_dims = n_dims};
    uint64_t total = 1;
    for (int d = 0; d < 4; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        total *= t.ne[d];
    }
    t.nbytes = wk_gw_type_bytes(type, (size_t)total);
    t.name = malloc(strlen(name) + 1);
    t.data = malloc(t.nbytes ? t.nbytes : 1);
    if (!t.name || !t.data) {
        free(t.name);
        free(t.data);
        w->failed = true;
        return;
    }
    strcpy(t.name, name);
    if (data) memcpy(t.data, data, t.nbytes);
    else memset(t.data, 0, t.nbytes);
    w->t[w->n_t++] = t;
}

static size_t pad_to(size_t x, size_t a) { return (x + a - 1) / a * a; }

uint8_t *wk_gw_bytes(wk_gw *w, size_t *size) {
    *size = 0;
    if (!usable(w)) return NULL;
    gw_buf b = {0};
    size_t a = w->alignment ? w->alignment : 32;
    put(w, &b, "GGUF", 4);
    put_le(w, &b, w->version, 4);
    put_le(w, &b, w->n_t, 8);
    put_le(w, &b, w->n_kv, 8);
    put(w, &b, w->kv.p, w->kv.n);
    size_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const gw_tensor *t = &w->t[i];
        put_str(w, &b, t->name);
        put_le(w, &b, (uint32_t)t->n_dims, 4);
        for (int d = 0; d < t->n_dims; d++) put_le(w, &b, t->ne[d], 8);
        put_le(w, &b, (uint32_t)t->type, 4);
        put_le(w, &b, off, 8);
        off += pad_to(t->nbytes, a);
    }
    /* ggml pads the infos to the alignment and every tensor's data after it (the last too). */
    static const uint8_t zeros[1];
    while (b.n % a && !w->failed) put(w, &b, zeros, 1);
    for (size_t i = 0; i < w->n_t; i++) {
        put(w, &b, w->t[i].data, w->t[i].nbytes);
        while (b.n % a && !w->failed) put(w, &b, zeros, 1);
    }
    if (w->failed) {
        free(b.p);
        return NULL;
    }
    *size = b.n;
    return b.p;
}

bool wk_gw_write(wk_gw *w, const char *path) {
    size_t n;
    uint8_t *p = wk_gw_bytes(w, &n);
    if (!p) return false;
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = false;
    free(p);
    return ok;
}
