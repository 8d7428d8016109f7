/* GGUF v2/v3 reader: parses and validates a whole file (over mmap or a caller buffer) so that
 * everything downstream can trust every offset, size and pointer it hands out. */
#include "model/gguf.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Limits from ggml's reader (GGUF_MAX_STRING_LENGTH, GGUF_MAX_ARRAY_ELEMENTS, GGML_MAX_NAME,
 * GGML_MAX_DIMS); nested arrays are not in ggml at all, so their depth is our own bound. */
#define GG_MAX_STRING (1ull << 30)
#define GG_MAX_ARRAY (1ull << 30)
#define GG_MAX_NAME 64
#define GG_MAX_DIMS 4
#define GG_MAX_NEST 8
#define GG_DEFAULT_ALIGNMENT 32u

/* The public struct plus private lookup tables; handed out as its first member. */
typedef struct gg_impl {
    wk_gguf pub;
    uint32_t *kv_hash;  /* open addressing, index+1 (0 = empty), capacity kv_cap (power of 2) */
    uint32_t kv_cap;
    uint32_t *t_hash;
    uint32_t t_cap;
} gg_impl;

/* Parse cursor: every read goes through need(), which is the single bounds check. */
typedef struct gg_cur {
    const uint8_t *base;
    uint64_t size, pos;
    char *err;
    size_t errlen;
} gg_cur;

static void gg_err(gg_cur *c, const char *fmt, ...) {
    if (!c->err || !c->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
}

static bool need(gg_cur *c, uint64_t n, const char *what) {
    if (n > c->size - c->pos) { /* pos <= size is an invariant, so no underflow */
        gg_err(c, "truncated file: %s at offset %llu needs %llu bytes, only %llu left (size %llu)", what,
               (unsigned long long)c->pos, (unsigned long long)n, (unsigned long long)(c->size - c->pos),
               (unsigned long long)c->size);
        return false;
    }
    return true;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static bool rd_u32(gg_cur *c, uint32_t *out, const char *what) {
    if (!need(c, 4, what)) return false;
    *out = (uint32_t)le(c->base + c->pos, 4);
    c->pos += 4;
    return true;
}

static bool rd_u64(gg_cur *c, uint64_t *out, const char *what) {
    if (!need(c, 8, what)) return false;
    *out = le(c->base + c->pos, 8);
    c->pos += 8;
    return true;
}

static bool rd_str(gg_cur *c, wk_gguf_str *s, const char *what) {
    uint64_t at = c->pos, len;
    if (!rd_u64(c, &len, what)) return false;
    if (len > GG_MAX_STRING) {
        gg_err(c, "%s at offset %llu: string length %llu exceeds limit %llu", what, (unsigned long long)at,
               (unsigned long long)len, (unsigned long long)GG_MAX_STRING);
        return false;
    }
    if (!need(c, len, what)) return false;
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return true;
}

/* Byte size of a scalar value type; 0 for STRING/ARRAY/unknown. */
static uint32_t scalar_size(uint32_t t) {
    switch (t) {
    case WK_GGUF_UINT8: case WK_GGUF_INT8: case WK_GGUF_BOOL: return 1;
    case WK_GGUF_UINT16: case WK_GGUF_INT16: return 2;
    case WK_GGUF_UINT32: case WK_GGUF_INT32: case WK_GGUF_FLOAT32: return 4;
    case WK_GGUF_UINT64: case WK_GGUF_INT64: case WK_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Bools must be 0 or 1: anything else means we are not reading what the writer wrote. */
static bool check_bools(gg_cur *c, const uint8_t *p, uint64_t n, uint64_t at) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1) {
            gg_err(c, "bool value %u at offset %llu is not 0 or 1", p[i], (unsigned long long)(at + i));
            return false;
        }
    return true;
}

/* Skips (validating) an array body of element type t at the cursor. Used for nested arrays,
 * whose elements we do not expose; depth bounds the recursion a crafted file can cause. */
static bool skip_array_body(gg_cur *c, int depth) {
    uint64_t at = c->pos;
    if (depth > GG_MAX_NEST) {
        gg_err(c, "array at offset %llu: arrays nested deeper than %d levels", (unsigned long long)at,
               GG_MAX_NEST);
        return false;
    }
    uint32_t et;
    uint64_t n;
    if (!rd_u32(c, &et, "array element type") || !rd_u64(c, &n, "array count")) return false;
    if (et >= WK_GGUF_TYPE_COUNT) {
        gg_err(c, "array at offset %llu: unknown element type %u", (unsigned long long)at, et);
        return false;
    }
    if (n > GG_MAX_ARRAY) {
        gg_err(c, "array at offset %llu: count %llu exceeds limit %llu", (unsigned long long)at,
               (unsigned long long)n, (unsigned long long)GG_MAX_ARRAY);
        return false;
    }
    uint32_t es = scalar_size(et);
    if (es) {
        if (!need(c, n * es, "array elements")) return false; /* n <= 2^30, es <= 8: no overflow */
        if (et == WK_GGUF_BOOL && !check_bools(c, c->base + c->pos, n, c->pos)) return false;
        c->pos += n * es;
        return true;
    }
    for (uint64_t i = 0; i < n; i++) {
        wk_gguf_str s;
        if (et == WK_GGUF_STRING ? !rd_str(c, &s, "array string element") : !skip_array_body(c, depth + 1))
            return false;
    }
    return true;
}

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static uint32_t table_cap(uint64_t n) {
    uint32_t cap = 16;
    while (cap < 2 * n) cap *= 2; /* load <= 1/2; n is bounded by the file size checks */
    return cap;
}

/* Finds name in an index table whose entries name themselves through get_name(i). Returns the
 * slot: either the one holding name or the empty slot where it would go. */
typedef const char *(*name_fn)(const wk_gguf *g, uint32_t i);
static const char *kv_name(const wk_gguf *g, uint32_t i) { return g->kv[i].key; }
static const char *t_name(const wk_gguf *g, uint32_t i) { return g->tensors[i].name; }

static uint32_t table_slot(const wk_gguf *g, const uint32_t *tab, uint32_t cap, name_fn get, const char *name) {
    uint32_t mask = cap - 1, s = hash_bytes(name, strlen(name)) & mask;
    while (tab[s] && strcmp(get(g, tab[s] - 1), name) != 0) s = (s + 1) & mask;
    return s;
}

/* NUL-terminated copy of a name, refusing empty names and embedded NULs (lookups by C string
 * could never find them, and they mean the file is not what it claims). */
static char *copy_name(gg_cur *c, const wk_gguf_str *s, uint64_t at, const char *what) {
    if (s->len == 0) {
        gg_err(c, "%s at offset %llu is empty", what, (unsigned long long)at);
        return NULL;
    }
    if (memchr(s->ptr, 0, s->len)) {
        gg_err(c, "%s at offset %llu contains a NUL byte", what, (unsigned long long)at);
        return NULL;
    }
    char *p = malloc(s->len + 1);
    if (!p) {
        gg_err(c, "out of memory copying %s at offset %llu", what, (unsigned long long)at);
        return NULL;
    }
    memcpy(p, s->ptr, s->len);
    p[s->len] = 0;
    return p;
}

static bool parse_kv(gg_cur *c, gg_impl *im, uint64_t idx) {
    wk_gguf *g = &im->pub;
    wk_gguf_kv *kv = &g->kv[idx];
    uint64_t at = c->pos;
    wk_gguf_str key;
    if (!rd_str(c, &key, "metadata key")) return false;
    if (!(kv->key = copy_name(c, &key, at, "metadata key"))) return false;
    uint32_t slot = table_slot(g, im->kv_hash, im->kv_cap, kv_name, kv->key);
    if (im->kv_hash[slot]) {
        gg_err(c, "duplicate metadata key '%s' at offset %llu", kv->key, (unsigned long long)at);
        return false;
    }
    im->kv_hash[slot] = (uint32_t)idx + 1;

    uint64_t tat = c->pos;
    uint32_t t;
    if (!rd_u32(c, &t, "metadata value type")) return false;
    if (t >= WK_GGUF_TYPE_COUNT) {
        gg_err(c, "metadata key '%s': unknown value type %u at offset %llu", kv->key, t, (unsigned long long)tat);
        return false;
    }
    kv->type = (wk_gguf_type)t;
    uint32_t sz = scalar_size(t);
    if (sz) {
        if (!need(c, sz, "metadata value")) return false;
        const uint8_t *p = c->base + c->pos;
        uint64_t raw = le(p, (int)sz);
        switch (kv->type) {
        case WK_GGUF_INT8: kv->v.i = (int8_t)raw; break;
        case WK_GGUF_INT16: kv->v.i = (int16_t)raw; break;
        case WK_GGUF_INT32: kv->v.i = (int32_t)raw; break;
        case WK_GGUF_INT64: kv->v.i = (int64_t)raw; break;
        case WK_GGUF_FLOAT32: { uint32_t b = (uint32_t)raw; float f; memcpy(&f, &b, 4); kv->v.f = f; break; }
        case WK_GGUF_FLOAT64: { double d; memcpy(&d, &raw, 8); kv->v.f = d; break; }
        case WK_GGUF_BOOL:
            if (!check_bools(c, p, 1, c->pos)) return false;
            kv->v.b = raw != 0;
            break;
        default: kv->v.u = raw; break;
        }
        c->pos += sz;
        return true;
    }
    if (kv->type == WK_GGUF_STRING) return rd_str(c, &kv->str, "metadata string value");

    /* Array: scalars stay packed in the file; strings get an index built once here, so that a
     * 262144-entry vocabulary is one linear pass; nested arrays are validated and skipped. */
    uint64_t aat = c->pos;
    uint32_t et;
    uint64_t n;
    if (!rd_u32(c, &et, "array element type") || !rd_u64(c, &n, "array count")) return false;
    if (et >= WK_GGUF_TYPE_COUNT) {
        gg_err(c, "metadata key '%s': array at offset %llu has unknown element type %u", kv->key,
               (unsigned long long)aat, et);
        return false;
    }
    if (n > GG_MAX_ARRAY) {
        gg_err(c, "metadata key '%s': array count %llu at offset %llu exceeds limit %llu", kv->key,
               (unsigned long long)n, (unsigned long long)(aat + 4), (unsigned long long)GG_MAX_ARRAY);
        return false;
    }
    kv->arr_type = (wk_gguf_type)et;
    kv->arr_count = n;
    kv->arr_data = c->base + c->pos;
    uint32_t es = scalar_size(et);
    if (es) {
        if (!need(c, n * es, "array elements")) return false;
        if (et == WK_GGUF_BOOL && !check_bools(c, c->base + c->pos, n, c->pos)) return false;
        c->pos += n * es;
        return true;
    }
    if (et == WK_GGUF_STRING) {
        /* Each element takes at least its 8-byte length, so this bounds the allocation by the file. */
        if (n > (c->size - c->pos) / 8) {
            gg_err(c, "metadata key '%s': string array of %llu elements at offset %llu cannot fit in the %llu bytes left",
                   kv->key, (unsigned long long)n, (unsigned long long)aat,
                   (unsigned long long)(c->size - c->pos));
            return false;
        }
        wk_gguf_str *strs = malloc((n ? n : 1) * sizeof *strs);
        if (!strs) {
            gg_err(c, "out of memory for string array '%s'", kv->key);
            return false;
        }
        kv->arr_strs = strs;
        for (uint64_t i = 0; i < n; i++)
            if (!rd_str(c, &strs[i], "array string element")) return false;
        return true;
    }
    for (uint64_t i = 0; i < n; i++)
        if (!skip_array_body(c, 2)) return false;
    return true;
}

bool wk_ggml_type_layout(wk_ggml_type t, uint32_t *block_elems, uint32_t *block_bytes) {
    uint32_t be, bb;
    switch (t) {
    case WK_GGML_F32: be = 1; bb = 4; break;
    case WK_GGML_F16: be = 1; bb = 2; break;
    case WK_GGML_BF16: be = 1; bb = 2; break;
    case WK_GGML_Q4_0: be = 32; bb = 18; break;
    case WK_GGML_Q4_1: be = 32; bb = 20; break;
    case WK_GGML_Q5_0: be = 32; bb = 22; break;
    case WK_GGML_Q5_1: be = 32; bb = 24; break;
    case WK_GGML_Q8_0: be = 32; bb = 34; break;
    case WK_GGML_Q8_1: be = 32; bb = 36; break;
    case WK_GGML_Q2_K: be = 256; bb = 84; break;
    case WK_GGML_Q3_K: be = 256; bb = 110; break;
    case WK_GGML_Q4_K: be = 256; bb = 144; break;
    case WK_GGML_Q5_K: be = 256; bb = 176; break;
    case WK_GGML_Q6_K: be = 256; bb = 210; break;
    case WK_GGML_Q8_K: be = 256; bb = 292; break;
    default: return false;
    }
    if (block_elems) *block_elems = be;
    if (block_bytes) *block_bytes = bb;
    return true;
}

const char *wk_ggml_type_name(wk_ggml_type t) {
    switch (t) {
    case WK_GGML_F32: return "f32";
    case WK_GGML_F16: return "f16";
    case WK_GGML_BF16: return "bf16";
    case WK_GGML_Q4_0: return "q4_0";
    case WK_GGML_Q4_1: return "q4_1";
    case WK_GGML_Q5_0: return "q5_0";
    case WK_GGML_Q5_1: return "q5_1";
    case WK_GGML_Q8_0: return "q8_0";
    case WK_GGML_Q8_1: return "q8_1";
    case WK_GGML_Q2_K: return "q2_K";
    case WK_GGML_Q3_K: return "q3_K";
    case WK_GGML_Q4_K: return "q4_K";
    case WK_GGML_Q5_K: return "q5_K";
    case WK_GGML_Q6_K: return "q6_K";
    case WK_GGML_Q8_K: return "q8_K";
    }
    return "unknown";
}

static bool parse_tensor_info(gg_cur *c, gg_impl *im, uint64_t idx) {
    wk_gguf *g = &im->pub;
    wk_gguf_tensor *t = &g->tensors[idx];
    uint64_t at = c->pos;
    wk_gguf_str name;
    if (!rd_str(c, &name, "tensor name")) return false;
    if (name.len >= GG_MAX_NAME) {
        gg_err(c, "tensor name at offset %llu is %llu bytes, limit is %d", (unsigned long long)at,
               (unsigned long long)name.len, GG_MAX_NAME - 1);
        return false;
    }
    if (!(t->name = copy_name(c, &name, at, "tensor name"))) return false;
    uint32_t slot = table_slot(g, im->t_hash, im->t_cap, t_name, t->name);
    if (im->t_hash[slot]) {
        gg_err(c, "duplicate tensor name '%s' at offset %llu", t->name, (unsigned long long)at);
        return false;
    }
    im->t_hash[slot] = (uint32_t)idx + 1;

    uint64_t dat = c->pos;
    if (!rd_u32(c, &t->n_dims, "tensor n_dims")) return false;
    if (t->n_dims > GG_MAX_DIMS) {
        gg_err(c, "tensor '%s': n_dims %u at offset %llu exceeds %d", t->name, t->n_dims,
               (unsigned long long)dat, GG_MAX_DIMS);
        return false;
    }
    uint64_t total = 1;
    for (int d = 0; d < GG_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t nat = c->pos;
        if (!rd_u64(c, &t->ne[d], "tensor dimension")) return false;
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX) {
            gg_err(c, "tensor '%s': dimension %u = %llu at offset %llu is out of range", t->name, d,
                   (unsigned long long)t->ne[d], (unsigned long long)nat);
            return false;
        }
        /* ggml counts elements in int64; keep the product representable there. */
        if (total > (uint64_t)INT64_MAX / t->ne[d]) {
            gg_err(c, "tensor '%s': element count overflows at dimension %u (offset %llu)", t->name, d,
                   (unsigned long long)nat);
            return false;
        }
        total *= t->ne[d];
    }
    uint64_t tyat = c->pos;
    uint32_t ty;
    if (!rd_u32(c, &ty, "tensor type")) return false;
    uint32_t be, bb;
    if (!wk_ggml_type_layout((wk_ggml_type)ty, &be, &bb)) {
        gg_err(c, "tensor '%s': unknown tensor type %u at offset %llu", t->name, ty, (unsigned long long)tyat);
        return false;
    }
    t->type = (wk_ggml_type)ty;
    if (t->ne[0] % be) {
        gg_err(c, "tensor '%s': ne[0] = %llu is not a multiple of the %s block size %u (offset %llu)", t->name,
               (unsigned long long)t->ne[0], wk_ggml_type_name(t->type), be, (unsigned long long)dat);
        return false;
    }
    /* nbytes = blocks * bb with blocks = total / be <= 2^63: check the multiply. */
    uint64_t blocks = total / be;
    if (blocks > UINT64_MAX / bb) {
        gg_err(c, "tensor '%s': byte size overflows (offset %llu)", t->name, (unsigned long long)dat);
        return false;
    }
    t->nbytes = blocks * bb;
    if (!rd_u64(c, &t->offset, "tensor data offset")) return false;
    return true;
}

static void free_contents(gg_impl *im) {
    wk_gguf *g = &im->pub;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            free((void *)g->kv[i].arr_strs);
        }
    if (g->tensors)
        for (uint64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(im->kv_hash);
    free(im->t_hash);
}

static bool parse(gg_cur *c, gg_impl *im) {
    wk_gguf *g = &im->pub;
    if (!need(c, 4, "magic")) return false;
    if (memcmp(c->base, "GGUF", 4) != 0) {
        gg_err(c, "bad magic at offset 0: expected \"GGUF\", got %02x %02x %02x %02x", c->base[0], c->base[1],
               c->base[2], c->base[3]);
        return false;
    }
    c->pos = 4;
    if (!rd_u32(c, &g->version, "version")) return false;
    if (g->version == 1) {
        gg_err(c, "GGUF version 1 (32-bit counts) at offset 4 is not supported; convert the file to v3");
        return false;
    }
    if (g->version != 0 && (g->version & 0xFFFF) == 0) {
        gg_err(c, "GGUF version 0x%08x at offset 4 looks byte-swapped (big-endian file?)", g->version);
        return false;
    }
    if (g->version != 2 && g->version != 3) {
        gg_err(c, "unsupported GGUF version %u at offset 4 (supported: 2, 3)", g->version);
        return false;
    }
    uint64_t n_t, n_kv;
    if (!rd_u64(c, &n_t, "tensor count") || !rd_u64(c, &n_kv, "metadata count")) return false;
    /* Each tensor info takes >= 24 bytes (name len, n_dims, type, offset) and each kv >= 13
     * (key len, type, 1-byte value), so counts beyond that cannot be honest; checking first
     * keeps a crafted count from driving a huge allocation. */
    uint64_t left = c->size - c->pos;
    if (n_kv >= (1u << 31) || n_t >= (1u << 31)) { /* hash tables hold 32-bit indices */
        gg_err(c, "tensor count %llu or metadata count %llu (offsets 8, 16) is too large", (unsigned long long)n_t,
               (unsigned long long)n_kv);
        return false;
    }
    if (n_kv > left / 13) {
        gg_err(c, "metadata count %llu at offset 16 cannot fit in the %llu bytes left", (unsigned long long)n_kv,
               (unsigned long long)left);
        return false;
    }
    if (n_t > left / 24) {
        gg_err(c, "tensor count %llu at offset 8 cannot fit in the %llu bytes left", (unsigned long long)n_t,
               (unsigned long long)left);
        return false;
    }
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_t ? n_t : 1, sizeof *g->tensors);
    im->kv_cap = table_cap(n_kv);
    im->t_cap = table_cap(n_t);
    im->kv_hash = calloc(im->kv_cap, sizeof *im->kv_hash);
    im->t_hash = calloc(im->t_cap, sizeof *im->t_hash);
    if (!g->kv || !g->tensors || !im->kv_hash || !im->t_hash) {
        gg_err(c, "out of memory for %llu keys and %llu tensors", (unsigned long long)n_kv, (unsigned long long)n_t);
        return false;
    }
    /* Counts are set before parsing so that free_contents releases partially built entries. */
    g->n_kv = n_kv;
    g->n_tensors = n_t;
    for (uint64_t i = 0; i < n_kv; i++)
        if (!parse_kv(c, im, i)) return false;

    g->alignment = GG_DEFAULT_ALIGNMENT;
    const wk_gguf_kv *al = wk_gguf_find(g, "general.alignment");
    if (al) {
        if (al->type != WK_GGUF_UINT32) {
            gg_err(c, "general.alignment must be u32, got value type %d", (int)al->type);
            return false;
        }
        if (al->v.u == 0 || (al->v.u & (al->v.u - 1)) != 0) {
            gg_err(c, "general.alignment = %llu is not a power of two", (unsigned long long)al->v.u);
            return false;
        }
        g->alignment = (uint32_t)al->v.u;
    }

    for (uint64_t i = 0; i < n_t; i++)
        if (!parse_tensor_info(c, im, i)) return false;

    /* Data section at PAD(end of infos); pos <= size < 2^64 - alignment in practice, but check. */
    uint64_t a = g->alignment, end = c->pos;
    if (end > UINT64_MAX - (a - 1)) {
        gg_err(c, "data section offset overflows");
        return false;
    }
    g->data_offset = (end + a - 1) & ~(a - 1);
    if (n_t && g->data_offset > c->size) {
        gg_err(c, "data section at offset %llu starts past end of file (size %llu)",
               (unsigned long long)g->data_offset, (unsigned long long)c->size);
        return false;
    }
    for (uint64_t i = 0; i < n_t; i++) {
        wk_gguf_tensor *t = &g->tensors[i];
        if (t->offset % a) {
            gg_err(c, "tensor '%s': data offset %llu is not a multiple of the alignment %llu", t->name,
                   (unsigned long long)t->offset, (unsigned long long)a);
            return false;
        }
        uint64_t room = c->size - g->data_offset; /* data_offset <= size checked above */
        if (t->offset > room || t->nbytes > room - t->offset) {
            if (t->offset > room) /* the absolute offset could overflow: report the relative one */
                gg_err(c, "tensor '%s': data [offset %llu in the data section at %llu, %llu bytes] runs past end of file (size %llu)",
                       t->name, (unsigned long long)t->offset, (unsigned long long)g->data_offset,
                       (unsigned long long)t->nbytes, (unsigned long long)c->size);
            else
                gg_err(c, "tensor '%s': data [offset %llu, %llu bytes] runs past end of file (size %llu)", t->name,
                       (unsigned long long)(g->data_offset + t->offset), (unsigned long long)t->nbytes,
                       (unsigned long long)c->size);
            return false;
        }
        t->data = c->base + g->data_offset + t->offset;
    }
    return true;
}

wk_gguf *wk_gguf_open_memory(const void *data, size_t size, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    gg_cur c = {.base = data, .size = size, .pos = 0, .err = err, .errlen = errlen};
    if (!data && size) {
        gg_err(&c, "null buffer");
        return NULL;
    }
    gg_impl *im = calloc(1, sizeof *im);
    if (!im) {
        gg_err(&c, "out of memory");
        return NULL;
    }
    im->pub.base = data;
    im->pub.size = size;
    if (!parse(&c, im)) {
        free_contents(im);
        free(im);
        return NULL;
    }
    return &im->pub;
}

wk_gguf *wk_gguf_open(const char *path, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (err && errlen) snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (err && errlen) snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size == 0) {
        if (err && errlen) snprintf(err, errlen, "%s: empty file (truncated file: no GGUF header)", path);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) {
        if (err && errlen) snprintf(err, errlen, "%s: mmap of %zu bytes failed: %s", path, size, strerror(errno));
        return NULL;
    }
    char msg[512];
    wk_gguf *g = wk_gguf_open_memory(map, size, msg, sizeof msg);
    if (!g) {
        if (err && errlen) snprintf(err, errlen, "%s: %s", path, msg);
        munmap(map, size);
        return NULL;
    }
    g->mapped = true;
    return g;
}

void wk_gguf_close(wk_gguf *g) {
    if (!g) return;
    gg_impl *im = (gg_impl *)g;
    if (g->mapped) munmap((void *)g->base, g->size);
    free_contents(im);
    free(im);
}

const wk_gguf_kv *wk_gguf_find(const wk_gguf *g, const char *key) {
    if (!g || !key) return NULL;
    const gg_impl *im = (const gg_impl *)g;
    if (!im->kv_hash) return NULL;
    uint32_t s = table_slot(g, im->kv_hash, im->kv_cap, kv_name, key);
    return im->kv_hash[s] ? &g->kv[im->kv_hash[s] - 1] : NULL;
}

const wk_gguf_tensor *wk_gguf_find_tensor(const wk_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    const gg_impl *im = (const gg_impl *)g;
    if (!im->t_hash) return NULL;
    uint32_t s = table_slot(g, im->t_hash, im->t_cap, t_name, name);
    return im->t_hash[s] ? &g->tensors[im->t_hash[s] - 1] : NULL;
}

/* Integer value of a kv as (negative?, magnitude) so that range checks need no casts that
 * could wrap. */
static bool kv_int(const wk_gguf_kv *kv, bool *neg, uint64_t *mag) {
    switch (kv->type) {
    case WK_GGUF_UINT8: case WK_GGUF_UINT16: case WK_GGUF_UINT32: case WK_GGUF_UINT64:
        *neg = false;
        *mag = kv->v.u;
        return true;
    case WK_GGUF_INT8: case WK_GGUF_INT16: case WK_GGUF_INT32: case WK_GGUF_INT64:
        *neg = kv->v.i < 0;
        *mag = *neg ? (uint64_t)0 - (uint64_t)kv->v.i : (uint64_t)kv->v.i;
        return true;
    default: return false;
    }
}

bool wk_gguf_get_u32(const wk_gguf *g, const char *key, uint32_t *out) {
    const wk_gguf_kv *kv = wk_gguf_find(g, key);
    bool neg;
    uint64_t mag;
    if (!kv || !kv_int(kv, &neg, &mag) || neg || mag > UINT32_MAX) return false;
    *out = (uint32_t)mag;
    return true;
}

bool wk_gguf_get_i64(const wk_gguf *g, const char *key, int64_t *out) {
    const wk_gguf_kv *kv = wk_gguf_find(g, key);
    bool neg;
    uint64_t mag;
    if (!kv || !kv_int(kv, &neg, &mag)) return false;
    if (neg) {
        *out = kv->v.i; /* only signed types are negative, and they fit */
        return true;
    }
    if (mag > (uint64_t)INT64_MAX) return false;
    *out = (int64_t)mag;
    return true;
}

bool wk_gguf_get_f32(const wk_gguf *g, const char *key, float *out) {
    const wk_gguf_kv *kv = wk_gguf_find(g, key);
    if (!kv || (kv->type != WK_GGUF_FLOAT32 && kv->type != WK_GGUF_FLOAT64)) return false;
    double d = kv->v.f;
    if (isfinite(d) && fabs(d) > FLT_MAX) return false; /* would become inf */
    *out = (float)d;
    return true;
}

bool wk_gguf_get_bool(const wk_gguf *g, const char *key, bool *out) {
    const wk_gguf_kv *kv = wk_gguf_find(g, key);
    if (!kv || kv->type != WK_GGUF_BOOL) return false;
    *out = kv->v.b;
    return true;
}

bool wk_gguf_get_str(const wk_gguf *g, const char *key, char *buf, size_t cap) {
    const wk_gguf_kv *kv = wk_gguf_find(g, key);
    if (!kv || kv->type != WK_GGUF_STRING || !buf || kv->str.len >= cap) return false;
    memcpy(buf, kv->str.ptr, kv->str.len);
    buf[kv->str.len] = 0;
    return true;
}
