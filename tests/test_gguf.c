/* GGUF reader tests: writer round trips, v2, and a catalogue of malformed files that must each be
 * refused with a message (never a crash or an out-of-bounds read; run under ASan to see that). */
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/gguf.h"
#include "gguf_writer.h"
#include "model/quant.h"
#include "test_rng.h"
#include "test_util.h"

static char err[512];

/* Opens a private heap copy of exactly n bytes, so that ASan flags any read past the end. */
static wk_gguf *open_copy(const uint8_t *p, size_t n) {
    uint8_t *c = malloc(n ? n : 1);
    if (n) memcpy(c, p, n);
    wk_gguf *g = wk_gguf_open_memory(c, n, err, sizeof err);
    if (!g) free(c);
    return g;
}

static void close_copy(wk_gguf *g) {
    if (!g) return;
    void *base = (void *)g->base;
    wk_gguf_close(g);
    free(base);
}

/* The file must be refused and the message must contain keyword. */
static void expect_fail(const uint8_t *p, size_t n, const char *keyword, const char *what) {
    err[0] = 0;
    wk_gguf *g = open_copy(p, n);
    CHECK(g == NULL);
    if (g) {
        fprintf(stderr, "  %s: unexpectedly accepted\n", what);
        close_copy(g);
        return;
    }
    bool has = strstr(err, keyword) != NULL;
    CHECK(has);
    if (!has) fprintf(stderr, "  %s: message lacks '%s': %s\n", what, keyword, err);
    else printf("  refused %-28s %s\n", what, err);
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Offset just past the first occurrence of s (a key or tensor name) in the file image. */
static size_t after(const uint8_t *p, size_t n, const char *s) {
    const uint8_t *q = memmem(p, n, s, strlen(s));
    if (!q) {
        fprintf(stderr, "test bug: '%s' not in file\n", s);
        abort();
    }
    return (size_t)(q - p) + strlen(s);
}

static uint8_t *build(wk_gw *w, size_t *n) {
    uint8_t *p = wk_gw_bytes(w, n);
    wk_gw_free(w);
    return p;
}

/* ---- round trips ---- */

static void test_metadata_roundtrip(void) {
    wk_gw *w = wk_gw_new();
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    uint64_t u64 = (1ull << 63) + 5;
    int64_t i64 = -(1ll << 62) - 7;
    double f64 = 3.25e-300;
    bool bf = false;
    wk_gw_kv_scalar(w, "t.u8", WK_GGUF_UINT8, &u8);
    wk_gw_kv_scalar(w, "t.i8", WK_GGUF_INT8, &i8);
    wk_gw_kv_scalar(w, "t.u16", WK_GGUF_UINT16, &u16);
    wk_gw_kv_scalar(w, "t.i16", WK_GGUF_INT16, &i16);
    wk_gw_kv_u32(w, "t.u32", 4000000000u);
    wk_gw_kv_i32(w, "t.i32", -2000000000);
    wk_gw_kv_f32(w, "t.f32", 1.5f);
    wk_gw_kv_bool(w, "t.bool", true);
    wk_gw_kv_scalar(w, "t.boolf", WK_GGUF_BOOL, &bf);
    wk_gw_kv_str(w, "t.str", "h\xc3\xa9llo");
    wk_gw_kv_str(w, "t.empty", "");
    wk_gw_kv_scalar(w, "t.u64", WK_GGUF_UINT64, &u64);
    wk_gw_kv_scalar(w, "t.i64", WK_GGUF_INT64, &i64);
    wk_gw_kv_scalar(w, "t.f64", WK_GGUF_FLOAT64, &f64);
    const char *strs[] = {"<pad>", "", "\xe2\x96\x81the", "x"};
    wk_gw_kv_arr_str(w, "a.str", strs, 4);
    const float fa[] = {1.0f, -2.5f, 1e-40f};
    wk_gw_kv_arr_f32(w, "a.f32", fa, 3);
    const int32_t ia[] = {-1, 0, 2147483647};
    wk_gw_kv_arr_i32(w, "a.i32", ia, 3);
    const uint8_t ua[] = {1, 2, 255};
    wk_gw_kv_arr(w, "a.u8", WK_GGUF_UINT8, ua, 3);
    const uint64_t u64a[] = {1, 1ull << 60};
    wk_gw_kv_arr(w, "a.u64", WK_GGUF_UINT64, u64a, 2);
    const double da[] = {0.5, -1e300};
    wk_gw_kv_arr(w, "a.f64", WK_GGUF_FLOAT64, da, 2);
    const bool ba[] = {true, false, true};
    wk_gw_kv_arr(w, "a.bool", WK_GGUF_BOOL, ba, 3);
    wk_gw_kv_arr(w, "a.empty", WK_GGUF_INT16, NULL, 0);
    wk_gw_kv_arr_str(w, "a.strempty", NULL, 0);
    size_t n;
    uint8_t *p = build(w, &n);
    wk_gguf *g = open_copy(p, n);
    CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "  %s\n", err);
        free(p);
        return;
    }
    CHECK_EQ_INT(g->version, 3);
    CHECK_EQ_INT(g->n_kv, 23);
    CHECK_EQ_INT(g->n_tensors, 0);
    CHECK_EQ_INT(g->alignment, 32);

    const wk_gguf_kv *kv;
    CHECK((kv = wk_gguf_find(g, "t.u8")) && kv->type == WK_GGUF_UINT8 && kv->v.u == 200);
    CHECK((kv = wk_gguf_find(g, "t.i8")) && kv->type == WK_GGUF_INT8 && kv->v.i == -100);
    CHECK((kv = wk_gguf_find(g, "t.u16")) && kv->type == WK_GGUF_UINT16 && kv->v.u == 60000);
    CHECK((kv = wk_gguf_find(g, "t.i16")) && kv->type == WK_GGUF_INT16 && kv->v.i == -30000);
    CHECK((kv = wk_gguf_find(g, "t.u32")) && kv->type == WK_GGUF_UINT32 && kv->v.u == 4000000000u);
    CHECK((kv = wk_gguf_find(g, "t.i32")) && kv->type == WK_GGUF_INT32 && kv->v.i == -2000000000);
    CHECK((kv = wk_gguf_find(g, "t.f32")) && kv->type == WK_GGUF_FLOAT32 && kv->v.f == 1.5);
    CHECK((kv = wk_gguf_find(g, "t.bool")) && kv->type == WK_GGUF_BOOL && kv->v.b);
    CHECK((kv = wk_gguf_find(g, "t.u64")) && kv->type == WK_GGUF_UINT64 && kv->v.u == u64);
    CHECK((kv = wk_gguf_find(g, "t.i64")) && kv->type == WK_GGUF_INT64 && kv->v.i == i64);
    CHECK((kv = wk_gguf_find(g, "t.f64")) && kv->type == WK_GGUF_FLOAT64 && kv->v.f == f64);
    CHECK((kv = wk_gguf_find(g, "t.str")) && kv->type == WK_GGUF_STRING && kv->str.len == 6 &&
          memcmp(kv->str.ptr, "h\xc3\xa9llo", 6) == 0);
    CHECK(wk_gguf_find(g, "t.missing") == NULL);
    CHECK(wk_gguf_find(g, "t.u") == NULL);

    /* Typed getters: integers convert when the value fits, and only then. */
    uint32_t u32v = 0;
    int64_t i64v = 0;
    float fv = 0;
    bool bv = false;
    char buf[16];
    CHECK(wk_gguf_get_u32(g, "t.u8", &u32v) && u32v == 200);
    CHECK(wk_gguf_get_u32(g, "t.u32", &u32v) && u32v == 4000000000u);
    CHECK(!wk_gguf_get_u32(g, "t.i8", &u32v));
    CHECK(!wk_gguf_get_u32(g, "t.u64", &u32v));
    CHECK(!wk_gguf_get_u32(g, "t.f32", &u32v));
    CHECK(!wk_gguf_get_u32(g, "t.missing", &u32v));
    CHECK(wk_gguf_get_i64(g, "t.i32", &i64v) && i64v == -2000000000);
    CHECK(wk_gguf_get_i64(g, "t.i64", &i64v) && i64v == i64);
    CHECK(wk_gguf_get_i64(g, "t.u32", &i64v) && i64v == 4000000000ll);
    CHECK(!wk_gguf_get_i64(g, "t.u64", &i64v)); /* > INT64_MAX */
    CHECK(!wk_gguf_get_i64(g, "t.bool", &i64v));
    CHECK(wk_gguf_get_f32(g, "t.f32", &fv) && fv == 1.5f);
    CHECK(wk_gguf_get_f32(g, "t.f64", &fv) && fv == 0.0f); /* 3.25e-300 underflows to 0 in float */
    CHECK(!wk_gguf_get_f32(g, "t.u32", &fv));
    CHECK(wk_gguf_get_bool(g, "t.bool", &bv) && bv);
    CHECK(wk_gguf_get_bool(g, "t.boolf", &bv) && !bv);
    CHECK(!wk_gguf_get_bool(g, "t.u8", &bv));
    CHECK(wk_gguf_get_str(g, "t.str", buf, sizeof buf) && strcmp(buf, "h\xc3\xa9llo") == 0);
    CHECK(wk_gguf_get_str(g, "t.empty", buf, sizeof buf) && buf[0] == 0);
    CHECK(!wk_gguf_get_str(g, "t.str", buf, 6)); /* needs 7 with the NUL */
    CHECK(wk_gguf_get_str(g, "t.str", buf, 7));
    CHECK(!wk_gguf_get_str(g, "t.u32", buf, sizeof buf));

    /* Arrays. */
    kv = wk_gguf_find(g, "a.str");
    CHECK(kv && kv->type == WK_GGUF_ARRAY && kv->arr_type == WK_GGUF_STRING && kv->arr_count == 4 && kv->arr_strs);
    if (kv && kv->arr_strs && kv->arr_count == 4)
        for (int i = 0; i < 4; i++)
            CHECK(kv->arr_strs[i].len == strlen(strs[i]) && memcmp(kv->arr_strs[i].ptr, strs[i], strlen(strs[i])) == 0);
    kv = wk_gguf_find(g, "a.f32");
    CHECK(kv && kv->arr_type == WK_GGUF_FLOAT32 && kv->arr_count == 3);
    if (kv && kv->arr_count == 3)
        for (int i = 0; i < 3; i++) {
            float f;
            memcpy(&f, kv->arr_data + 4 * i, 4);
            CHECK(f == fa[i]);
        }
    kv = wk_gguf_find(g, "a.i32");
    CHECK(kv && kv->arr_type == WK_GGUF_INT32 && kv->arr_count == 3);
    if (kv && kv->arr_count == 3)
        for (int i = 0; i < 3; i++) CHECK_EQ_INT((int32_t)get_le(kv->arr_data + 4 * i, 4), ia[i]);
    kv = wk_gguf_find(g, "a.u8");
    CHECK(kv && kv->arr_type == WK_GGUF_UINT8 && kv->arr_count == 3 && memcmp(kv->arr_data, ua, 3) == 0);
    kv = wk_gguf_find(g, "a.u64");
    CHECK(kv && kv->arr_type == WK_GGUF_UINT64 && kv->arr_count == 2 && get_le(kv->arr_data + 8, 8) == (1ull << 60));
    kv = wk_gguf_find(g, "a.f64");
    CHECK(kv && kv->arr_type == WK_GGUF_FLOAT64 && kv->arr_count == 2);
    if (kv && kv->arr_count == 2) {
        double d;
        memcpy(&d, kv->arr_data + 8, 8);
        CHECK(d == -1e300);
    }
    kv = wk_gguf_find(g, "a.bool");
    CHECK(kv && kv->arr_type == WK_GGUF_BOOL && kv->arr_count == 3 && kv->arr_data[0] == 1 && kv->arr_data[1] == 0);
    kv = wk_gguf_find(g, "a.empty");
    CHECK(kv && kv->arr_type == WK_GGUF_INT16 && kv->arr_count == 0);
    kv = wk_gguf_find(g, "a.strempty");
    CHECK(kv && kv->arr_type == WK_GGUF_STRING && kv->arr_count == 0);
    close_copy(g);
    free(p);
}

/* Serialized array header + elements for kv_raw: elem type, count. */
static size_t raw_arr_hdr(uint8_t *p, uint32_t et, uint64_t n) {
    put_u32(p, et);
    put_u64(p + 4, n);
    return 12;
}

static void test_nested_arrays(void) {
    /* [[7, 8, 9] as u32, ["xy"]] followed by another key: the reader must skip it exactly. */
    uint8_t v[128];
    size_t o = raw_arr_hdr(v, WK_GGUF_ARRAY, 2);
    o += raw_arr_hdr(v + o, WK_GGUF_UINT32, 3);
    for (uint32_t i = 7; i <= 9; i++, o += 4) put_u32(v + o, i);
    o += raw_arr_hdr(v + o, WK_GGUF_STRING, 1);
    put_u64(v + o, 2);
    memcpy(v + o + 8, "xy", 2);
    o += 10;
    wk_gw *w = wk_gw_new();
    wk_gw_kv_raw(w, "nested", WK_GGUF_ARRAY, v, o);
    wk_gw_kv_u32(w, "after", 42);
    size_t n;
    uint8_t *p = build(w, &n);
    wk_gguf *g = open_copy(p, n);
    CHECK(g != NULL);
    if (g) {
        const wk_gguf_kv *kv = wk_gguf_find(g, "nested");
        CHECK(kv && kv->arr_type == WK_GGUF_ARRAY && kv->arr_count == 2 && !kv->arr_strs);
        uint32_t a = 0;
        CHECK(wk_gguf_get_u32(g, "after", &a) && a == 42);
        close_copy(g);
    } else {
        fprintf(stderr, "  %s\n", err);
    }
    /* Truncating inside the nested value must fail at every length. */
    size_t val_at = after(p, n, "nested") + 4;
    int bad = 0;
    for (size_t len = val_at; len < val_at + o; len++) {
        wk_gguf *t = open_copy(p, len);
        bad += t != NULL;
        close_copy(t);
    }
    CHECK_EQ_INT(bad, 0);
    free(p);

    /* 20 levels: refused with a depth message, not a stack overflow. */
    uint8_t deep[20 * 12];
    for (int i = 0; i < 20; i++) raw_arr_hdr(deep + 12 * i, i == 19 ? WK_GGUF_UINT8 : WK_GGUF_ARRAY, i == 19 ? 0 : 1);
    w = wk_gw_new();
    wk_gw_kv_raw(w, "deep", WK_GGUF_ARRAY, deep, sizeof deep);
    p = build(w, &n);
    expect_fail(p, n, "nested deeper", "nested array 20 deep");
    free(p);
}

static const wk_ggml_type tensor_types[] = {WK_GGML_F32,  WK_GGML_F16,  WK_GGML_BF16, WK_GGML_Q4_0,
                                            WK_GGML_Q4_1, WK_GGML_Q5_0, WK_GGML_Q5_1, WK_GGML_Q8_0,
                                            WK_GGML_Q4_K, WK_GGML_Q5_K, WK_GGML_Q6_K};
#define N_TYPES (sizeof tensor_types / sizeof tensor_types[0])

static void test_tensor_roundtrip(uint32_t alignment, bool via_file) {
    uint64_t rng = 12345 + alignment;
    uint8_t *data[N_TYPES];
    uint64_t ne[N_TYPES][4];
    char names[N_TYPES][32];
    wk_gw *w = wk_gw_new();
    wk_gw_kv_str(w, "general.architecture", "test");
    if (alignment != 32) wk_gw_set_alignment(w, alignment);
    for (size_t i = 0; i < N_TYPES; i++) {
        uint32_t be, bb;
        CHECK(wk_ggml_type_layout(tensor_types[i], &be, &bb));
        int nd = 1 + (int)(i % 3);
        ne[i][0] = be == 1 ? 8 + i : be * (1 + i % 2);
        ne[i][1] = nd > 1 ? 3 : 1;
        ne[i][2] = nd > 2 ? 2 : 1;
        ne[i][3] = 1;
        size_t elems = (size_t)(ne[i][0] * ne[i][1] * ne[i][2]);
        data[i] = malloc(wk_gw_type_bytes(tensor_types[i], elems));
        wk_gw_random_blocks(tensor_types[i], elems, &rng, data[i]);
        snprintf(names[i], sizeof names[i], "blk.%zu.%s.weight", i, wk_ggml_type_name(tensor_types[i]));
        wk_gw_tensor(w, names[i], tensor_types[i], nd, ne[i], data[i]);
    }
    wk_gguf *g;
    size_t n = 0;
    uint8_t *p = NULL;
    char path[] = "/tmp/wk_test_gguf_XXXXXX";
    if (via_file) {
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        if (fd >= 0) close(fd);
        CHECK(wk_gw_write(w, path));
        wk_gw_free(w);
        g = wk_gguf_open(path, err, sizeof err);
        CHECK(g && g->mapped);
    } else {
        p = build(w, &n);
        g = open_copy(p, n);
        CHECK(g && !g->mapped);
    }
    if (!g) fprintf(stderr, "  alignment %u: %s\n", alignment, err);
    if (g) {
        CHECK_EQ_INT(g->alignment, alignment);
        CHECK_EQ_INT(g->n_tensors, N_TYPES);
        CHECK_EQ_INT(g->data_offset % alignment, 0);
        for (size_t i = 0; i < N_TYPES; i++) {
            const wk_gguf_tensor *t = wk_gguf_find_tensor(g, names[i]);
            CHECK(t != NULL);
            if (!t) continue;
            CHECK(t == &g->tensors[i]);
            CHECK_EQ_INT(t->type, tensor_types[i]);
            CHECK_EQ_INT(t->n_dims, 1 + i % 3);
            for (int d = 0; d < 4; d++) CHECK_EQ_INT(t->ne[d], ne[i][d]);
            size_t nb = wk_gw_type_bytes(tensor_types[i], (size_t)(ne[i][0] * ne[i][1] * ne[i][2]));
            CHECK_EQ_INT(t->nbytes, nb);
            CHECK_EQ_INT(t->offset % alignment, 0);
            CHECK_EQ_INT((size_t)(t->data - g->base), g->data_offset + t->offset);
            CHECK(memcmp(t->data, data[i], nb) == 0);
            if (g->mapped) CHECK_EQ_INT((uintptr_t)t->data % alignment, 0); /* mmap is page aligned */
        }
        CHECK(wk_gguf_find_tensor(g, "blk.0") == NULL);
        char arch[16];
        CHECK(wk_gguf_get_str(g, "general.architecture", arch, sizeof arch) && strcmp(arch, "test") == 0);
    }
    if (via_file) {
        wk_gguf_close(g);
        unlink(path);
    } else {
        close_copy(g);
        free(p);
    }
    for (size_t i = 0; i < N_TYPES; i++) free(data[i]);
}

static void test_v2_and_types(void) {
    wk_gw *w = wk_gw_new();
    wk_gw_set_version(w, 2);
    wk_gw_kv_u32(w, "k", 1);
    uint64_t ne[2] = {32, 2};
    wk_gw_tensor(w, "t", WK_GGML_Q8_0, 2, ne, NULL);
    size_t n;
    uint8_t *p = build(w, &n);
    wk_gguf *g = open_copy(p, n);
    CHECK(g && g->version == 2 && g->n_tensors == 1 && g->tensors[0].nbytes == 68);
    close_copy(g);
    free(p);

    uint32_t be = 0, bb = 0;
    CHECK(wk_ggml_type_layout(WK_GGML_Q4_K, &be, &bb) && be == 256 && bb == 144);
    CHECK(wk_ggml_type_layout(WK_GGML_Q6_K, &be, &bb) && be == 256 && bb == 210);
    CHECK(wk_ggml_type_layout(WK_GGML_Q5_0, &be, &bb) && be == 32 && bb == 22);
    CHECK(wk_ggml_type_layout(WK_GGML_BF16, &be, &bb) && be == 1 && bb == 2);
    CHECK(!wk_ggml_type_layout((wk_ggml_type)4, &be, &bb)); /* Q4_2, removed from ggml */
    CHECK(!wk_ggml_type_layout((wk_ggml_type)99, &be, &bb));
    CHECK(strcmp(wk_ggml_type_name(WK_GGML_Q4_K), "q4_K") == 0);
    CHECK(strcmp(wk_ggml_type_name(WK_GGML_BF16), "bf16") == 0);
    CHECK(strcmp(wk_ggml_type_name((wk_ggml_type)99), "unknown") == 0);
}

/* ---- malformed files ---- */

/* A small valid file used as the base of the patched cases. The last tensor's data is a
 * multiple of 32 bytes so that every proper prefix lacks some required byte. */
static uint8_t *small_file(size_t *n) {
    wk_gw *w = wk_gw_new();
    wk_gw_kv_str(w, "general.architecture", "gemma3");
    wk_gw_kv_u32(w, "some.u32", 7);
    const char *toks[] = {"<pad>", "a", "bc"};
    wk_gw_kv_arr_str(w, "tok.list", toks, 3);
    const float fa[] = {1, 2};
    wk_gw_kv_arr_f32(w, "arr.f", fa, 2);
    wk_gw_kv_bool(w, "a.bool", true);
    uint64_t ne_q[1] = {64}, ne_f[2] = {4, 2};
    wk_gw_tensor(w, "tq", WK_GGML_Q8_0, 1, ne_q, NULL);
    wk_gw_tensor(w, "tf", WK_GGML_F32, 2, ne_f, NULL);
    return build(w, n);
}

/* Applies fn to a copy of the small file and expects a refusal. */
static void patched(const char *what, const char *keyword, void (*fn)(uint8_t *p, size_t n)) {
    size_t n;
    uint8_t *p = small_file(&n);
    fn(p, n);
    expect_fail(p, n, keyword, what);
    free(p);
}

static void p_magic(uint8_t *p, size_t n) { (void)n; p[0] = 'X'; }
static void p_ver0(uint8_t *p, size_t n) { (void)n; put_u32(p + 4, 0); }
static void p_ver1(uint8_t *p, size_t n) { (void)n; put_u32(p + 4, 1); }
static void p_ver4(uint8_t *p, size_t n) { (void)n; put_u32(p + 4, 4); }
static void p_ver_swapped(uint8_t *p, size_t n) { (void)n; put_u32(p + 4, 0x03000000u); }
static void p_ntensors(uint8_t *p, size_t n) { (void)n; put_u64(p + 8, 1ull << 40); }
static void p_nkv(uint8_t *p, size_t n) { (void)n; put_u64(p + 16, UINT64_MAX); }
/* String lengths: the 8 bytes before a key's text are its length. */
static void p_strlen_huge(uint8_t *p, size_t n) { put_u64(p + after(p, n, "some.u32") - 8 - 8, 1ull << 40); }
static void p_strlen_limit(uint8_t *p, size_t n) { put_u64(p + after(p, n, "some.u32") - 8 - 8, 1ull << 30); }
static void p_strlen_max(uint8_t *p, size_t n) { put_u64(p + after(p, n, "some.u32") - 8 - 8, UINT64_MAX); }
static void p_value_strlen(uint8_t *p, size_t n) { put_u64(p + after(p, n, "general.architecture") + 4, 1000); }
/* Arrays: key, u32 value type, u32 element type, u64 count. */
static void p_arr_count_huge(uint8_t *p, size_t n) { put_u64(p + after(p, n, "arr.f") + 8, 1ull << 31); }
static void p_arr_count_big(uint8_t *p, size_t n) { put_u64(p + after(p, n, "arr.f") + 8, 1ull << 29); }
static void p_strarr_count(uint8_t *p, size_t n) { put_u64(p + after(p, n, "tok.list") + 8, 1ull << 29); }
static void p_arr_elem_type(uint8_t *p, size_t n) { put_u32(p + after(p, n, "arr.f") + 4, 13); }
static void p_value_type(uint8_t *p, size_t n) { put_u32(p + after(p, n, "some.u32"), 13); }
static void p_bool_value(uint8_t *p, size_t n) { p[after(p, n, "a.bool") + 4] = 2; }
/* Length 0: the reader sees an empty key before it gets to the (now misplaced) rest. */
static void p_key_empty(uint8_t *p, size_t n) { put_u64(p + after(p, n, "some.u32") - 8 - 8, 0); }
static void p_key_nul(uint8_t *p, size_t n) { p[after(p, n, "some.u32") - 3] = 0; }
/* Tensor infos: name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset. "tf" has 2 dims. */
/* Offset just past a 2-byte tensor name, found with its length prefix so that no key matches. */
static size_t name2_info(uint8_t *p, size_t n, const char *name) {
    uint8_t pat[10] = {2, 0, 0, 0, 0, 0, 0, 0, (uint8_t)name[0], (uint8_t)name[1]};
    const uint8_t *q = memmem(p, n, pat, sizeof pat);
    if (!q) abort(); /* test bug */
    return (size_t)(q - p) + sizeof pat;
}
static size_t tf_info(uint8_t *p, size_t n) { return name2_info(p, n, "tf"); }
static void p_ndims5(uint8_t *p, size_t n) { put_u32(p + tf_info(p, n), 5); }
static void p_ne_zero(uint8_t *p, size_t n) { put_u64(p + tf_info(p, n) + 4 + 8, 0); }
static void p_ne_neg(uint8_t *p, size_t n) { put_u64(p + tf_info(p, n) + 4, 1ull << 63); }
static void p_ne_overflow(uint8_t *p, size_t n) {
    put_u64(p + tf_info(p, n) + 4, 1ull << 32);
    put_u64(p + tf_info(p, n) + 12, 1ull << 32);
}
static void p_nbytes_overflow(uint8_t *p, size_t n) { /* 2^62 elements of f32 = 2^64 bytes */
    put_u64(p + tf_info(p, n) + 4, 1ull << 31);
    put_u64(p + tf_info(p, n) + 12, 1ull << 31);
}
static void p_type_unknown(uint8_t *p, size_t n) { put_u32(p + tf_info(p, n) + 20, 99); }
static void p_type_removed(uint8_t *p, size_t n) { put_u32(p + tf_info(p, n) + 20, 4); }
static void p_type_block(uint8_t *p, size_t n) { put_u32(p + tf_info(p, n) + 20, WK_GGML_Q4_0); } /* ne0 = 4 */
static void p_ne0_block(uint8_t *p, size_t n) { put_u64(p + name2_info(p, n, "tq") + 4, 48); } /* Q8_0 */
static void p_offset_eof(uint8_t *p, size_t n) { put_u64(p + tf_info(p, n) + 24, 1024); }
static void p_offset_huge(uint8_t *p, size_t n) { put_u64(p + tf_info(p, n) + 24, UINT64_MAX - 31); }
static void p_size_eof(uint8_t *p, size_t n) { put_u64(p + tf_info(p, n) + 12, 3); } /* 4x3 f32 */
static void p_offset_misaligned(uint8_t *p, size_t n) { put_u64(p + tf_info(p, n) + 24, 8); }
static void p_name_long(uint8_t *p, size_t n) { /* claim the name runs on into the next fields */
    put_u64(p + tf_info(p, n) - 2 - 8, 64);
}

static void test_malformed(void) {
    patched("bad magic", "magic", p_magic);
    patched("version 0", "version 0", p_ver0);
    patched("version 1", "version 1", p_ver1);
    patched("version 4", "version 4", p_ver4);
    patched("byte-swapped version", "byte-swapped", p_ver_swapped);
    patched("huge tensor count", "tensor count", p_ntensors);
    patched("huge metadata count", "metadata count", p_nkv);
    patched("string length 2^40", "string length", p_strlen_huge);
    patched("string length 2^30", "truncated", p_strlen_limit);
    patched("string length 2^64-1", "string length", p_strlen_max);
    patched("string value past EOF", "truncated", p_value_strlen);
    patched("array count 2^31", "array count", p_arr_count_huge);
    patched("array count 2^29", "truncated", p_arr_count_big);
    patched("string array count 2^29", "cannot fit", p_strarr_count);
    patched("array element type 13", "unknown element type", p_arr_elem_type);
    patched("value type 13", "unknown value type", p_value_type);
    patched("bool value 2", "not 0 or 1", p_bool_value);
    patched("empty key", "empty", p_key_empty);
    patched("NUL in key", "NUL", p_key_nul);
    patched("n_dims 5", "n_dims", p_ndims5);
    patched("ne = 0", "out of range", p_ne_zero);
    patched("ne = 2^63", "out of range", p_ne_neg);
    patched("ne product overflow", "overflow", p_ne_overflow);
    patched("nbytes overflow", "overflow", p_nbytes_overflow);
    patched("unknown tensor type 99", "unknown tensor type", p_type_unknown);
    patched("removed tensor type 4", "unknown tensor type", p_type_removed);
    patched("ne0 4 for q4_0", "multiple", p_type_block);
    patched("ne0 48 for q8_0", "multiple", p_ne0_block);
    patched("tensor data past EOF", "runs past end of file", p_offset_eof);
    patched("tensor offset near 2^64", "runs past end of file", p_offset_huge);
    patched("tensor size past EOF", "runs past end of file", p_size_eof);
    patched("misaligned tensor offset", "alignment", p_offset_misaligned);
    patched("tensor name 64 bytes", "tensor name", p_name_long);

    /* Cases built with the writer. */
    size_t n;
    uint8_t *p;
    wk_gw *w = wk_gw_new();
    wk_gw_kv_u32(w, "dup", 1);
    wk_gw_kv_str(w, "other", "x");
    wk_gw_kv_u32(w, "dup", 2);
    p = build(w, &n);
    expect_fail(p, n, "duplicate metadata key 'dup'", "duplicate key");
    free(p);

    uint64_t ne[1] = {32};
    w = wk_gw_new();
    wk_gw_tensor(w, "same", WK_GGML_F32, 1, ne, NULL);
    wk_gw_tensor(w, "same", WK_GGML_F32, 1, ne, NULL);
    p = build(w, &n);
    expect_fail(p, n, "duplicate tensor name 'same'", "duplicate tensor");
    free(p);

    const uint32_t bad_align[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < sizeof bad_align / sizeof bad_align[0]; i++) {
        w = wk_gw_new();
        wk_gw_kv_u32(w, "general.alignment", bad_align[i]);
        wk_gw_tensor(w, "t", WK_GGML_F32, 1, ne, NULL);
        p = build(w, &n);
        char what[40];
        snprintf(what, sizeof what, "alignment %u", bad_align[i]);
        expect_fail(p, n, "power of two", what);
        free(p);
    }
    w = wk_gw_new();
    wk_gw_kv_i32(w, "general.alignment", 32);
    p = build(w, &n);
    expect_fail(p, n, "must be u32", "alignment as i32");
    free(p);

    /* Names at the limit: 63 bytes accepted. */
    char name63[64];
    memset(name63, 'n', 63);
    name63[63] = 0;
    w = wk_gw_new();
    wk_gw_tensor(w, name63, WK_GGML_F32, 1, ne, NULL);
    p = build(w, &n);
    wk_gguf *g = open_copy(p, n);
    CHECK(g && wk_gguf_find_tensor(g, name63));
    close_copy(g);
    free(p);
}

/* Every proper prefix of a valid file must be refused, never crash or read past the end. */
static void test_truncation(void) {
    size_t n;
    uint8_t *p = small_file(&n);
    wk_gguf *g = open_copy(p, n);
    CHECK(g != NULL);
    close_copy(g);
    int accepted = 0, silent = 0;
    for (size_t len = 0; len < n; len++) {
        err[0] = 0;
        g = open_copy(p, len);
        if (g) {
            accepted++;
            fprintf(stderr, "  prefix %zu of %zu accepted\n", len, n);
            close_copy(g);
        } else if (!err[0]) {
            silent++;
        }
    }
    CHECK_EQ_INT(accepted, 0);
    CHECK_EQ_INT(silent, 0);
    printf("  all %zu proper prefixes refused\n", n);
    free(p);
}

/* Random byte corruption: whatever the result, no crash, and an accepted file's tensors lie inside it. */
static void test_corruption(void) {
    size_t n;
    uint8_t *p = small_file(&n);
    uint8_t *q = malloc(n);
    uint64_t s = 777;
    int opened = 0, inside = 0;
    for (int it = 0; it < 5000; it++) {
        memcpy(q, p, n);
        int flips = 1 + it % 4;
        for (int f = 0; f < flips; f++) {
            rng_xorshift64(&s);
            q[(s >> 8) % n] = (uint8_t)(s >> 40);
        }
        wk_gguf *g = open_copy(q, n);
        if (!g) continue;
        opened++;
        bool ok = true;
        for (uint64_t t = 0; t < g->n_tensors; t++) {
            const wk_gguf_tensor *ts = &g->tensors[t];
            ok = ok && ts->data >= g->base && ts->data + ts->nbytes <= g->base + g->size;
            uint8_t sum = 0;
            for (uint64_t b = 0; b < ts->nbytes; b++) sum += ts->data[b]; /* ASan checks these */
            *(volatile uint8_t *)&sum = sum; /* kept: the reads must happen (clang: set but not used) */
        }
        inside += ok;
        close_copy(g);
    }
    CHECK_EQ_INT(inside, opened);
    printf("  corruption: %d of 5000 corrupted files still valid\n", opened);
    free(q);
    free(p);
}

/* ---- the real model, when available ---- */

static void test_model(const char *path) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    wk_gguf *g = wk_gguf_open(path, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("  model: GGUF v%u, %llu keys, %llu tensors, alignment %u, data at %llu, opened in %.1f ms\n",
           g->version, (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors, g->alignment,
           (unsigned long long)g->data_offset, ms);
    char arch[32];
    CHECK(wk_gguf_get_str(g, "general.architecture", arch, sizeof arch) && strcmp(arch, "gemma3") == 0);
    CHECK(g->n_tensors >= 200 && g->n_tensors <= 300);
    const wk_gguf_tensor *te = wk_gguf_find_tensor(g, "token_embd.weight");
    CHECK(te != NULL);
    if (te)
        printf("  token_embd.weight: %s [%llu, %llu]\n", wk_ggml_type_name(te->type), (unsigned long long)te->ne[0],
               (unsigned long long)te->ne[1]);
    const wk_gguf_kv *tok = wk_gguf_find(g, "tokenizer.ggml.tokens");
    CHECK(tok && tok->arr_type == WK_GGUF_STRING && tok->arr_strs);
    if (tok) printf("  tokenizer.ggml.tokens: %llu entries\n", (unsigned long long)tok->arr_count);
    int counts[32] = {0};
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((unsigned)g->tensors[i].type < 32) counts[g->tensors[i].type]++;
    printf("  tensor types:");
    for (int t = 0; t < 32; t++)
        if (counts[t]) printf(" %s=%d", wk_ggml_type_name((wk_ggml_type)t), counts[t]);
    printf("\n");

    /* The real weights through both decoders: q8a16 (plain and fma) must equal dequantize
     * bit for bit, on the first 64K elements of every quantized tensor. */
    enum { MAXN = 65536 };
    float *y = malloc(MAXN * sizeof *y), *so = malloc(MAXN / 8 * sizeof *so);
    int8_t *codes = malloc(MAXN);
    long checked = 0, bad = 0, nonfinite = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const wk_gguf_tensor *t = &g->tensors[i];
        if (!wk_quant_is_exact_q8a16(t->type)) continue;
        uint64_t total = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        size_t n = (size_t)(total < MAXN ? total : MAXN);
        CHECK(wk_dequantize(t->type, t->data, y, n) && wk_quant_to_q8a16(t->type, t->data, n, codes, so));
        for (size_t e = 0; e < n; e++) {
            float c = (float)codes[e], sc = so[2 * (e / 16)], of = so[2 * (e / 16) + 1];
            volatile float prod = c * sc;
            float plain = prod + of, fused = fmaf(c, sc, of);
            bad += memcmp(&plain, &y[e], 4) != 0 || memcmp(&fused, &y[e], 4) != 0;
            nonfinite += !isfinite(y[e]);
        }
        checked += (long)n;
    }
    printf("  q8a16 vs dequantize on the model: %ld elements, %ld mismatches, %ld non-finite\n", checked, bad,
           nonfinite);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(nonfinite, 0);
    free(y);
    free(so);
    free(codes);
    wk_gguf_close(g);
}

int main(void) {
    test_metadata_roundtrip();
    test_nested_arrays();
    test_tensor_roundtrip(32, false);
    test_tensor_roundtrip(1, false);
    test_tensor_roundtrip(64, false);
    test_tensor_roundtrip(256, true);
    test_tensor_roundtrip(32, true);
    test_v2_and_types();
    test_malformed();
    test_truncation();
    test_corruption();
    const char *model = real_model_path("the real-model check");
    if (model) test_model(model);
    TEST_MAIN_END();
}
