/* GGUF v2/v3 reader: header, metadata, tensor infos, bounds-checked against the file size. */
#ifndef WK_GGUF_H
#define WK_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    WK_GGUF_UINT8 = 0, WK_GGUF_INT8 = 1, WK_GGUF_UINT16 = 2, WK_GGUF_INT16 = 3,
    WK_GGUF_UINT32 = 4, WK_GGUF_INT32 = 5, WK_GGUF_FLOAT32 = 6, WK_GGUF_BOOL = 7,
    WK_GGUF_STRING = 8, WK_GGUF_ARRAY = 9, WK_GGUF_UINT64 = 10, WK_GGUF_INT64 = 11,
    WK_GGUF_FLOAT64 = 12, WK_GGUF_TYPE_COUNT
} wk_gguf_type;

/* ggml tensor type ids (the published numbering). */
typedef enum {
    WK_GGML_F32 = 0, WK_GGML_F16 = 1, WK_GGML_Q4_0 = 2, WK_GGML_Q4_1 = 3,
    WK_GGML_Q5_0 = 6, WK_GGML_Q5_1 = 7, WK_GGML_Q8_0 = 8, WK_GGML_Q8_1 = 9,
    WK_GGML_Q2_K = 10, WK_GGML_Q3_K = 11, WK_GGML_Q4_K = 12, WK_GGML_Q5_K = 13,
    WK_GGML_Q6_K = 14, WK_GGML_Q8_K = 15, WK_GGML_BF16 = 30
} wk_ggml_type;

typedef struct wk_gguf_str { const char *ptr; uint64_t len; } wk_gguf_str; /* points into the file; not NUL-terminated */

typedef struct wk_gguf_kv {
    char *key;                /* NUL-terminated copy */
    wk_gguf_type type;
    /* scalars */
    union { uint64_t u; int64_t i; double f; bool b; } v;
    wk_gguf_str str;          /* WK_GGUF_STRING */
    /* arrays: element type, count, and where the packed elements start in the file. Nested
     * arrays (arr_type ARRAY, up to 8 levels) are validated and skipped: arr_data points at the
     * first inner array's header and nothing else is indexed. */
    wk_gguf_type arr_type;
    uint64_t arr_count;
    const uint8_t *arr_data;
    const wk_gguf_str *arr_strs; /* string arrays: one entry per element (owned) */
} wk_gguf_kv;

typedef struct wk_gguf_tensor {
    char *name;               /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[4];           /* ne[0] innermost; missing dims are 1 */
    wk_ggml_type type;
    uint64_t offset;          /* relative to the data section */
    uint64_t nbytes;
    const uint8_t *data;      /* into the mapping */
} wk_gguf_tensor;

typedef struct wk_gguf {
    uint32_t version;
    uint64_t n_kv, n_tensors;
    wk_gguf_kv *kv;
    wk_gguf_tensor *tensors;
    uint32_t alignment;
    const uint8_t *base;      /* whole file */
    size_t size;
    uint64_t data_offset;
    bool mapped;              /* base is an mmap we own */
} wk_gguf;

/* Open and validate. On failure returns NULL and writes a message naming the problem
 * (what, at which byte offset) into err. */
wk_gguf *wk_gguf_open(const char *path, char *err, size_t errlen);
/* Same over a caller-owned buffer that must outlive the result (tests, fuzzing). */
wk_gguf *wk_gguf_open_memory(const void *data, size_t size, char *err, size_t errlen);
void wk_gguf_close(wk_gguf *g);

const wk_gguf_kv *wk_gguf_find(const wk_gguf *g, const char *key);
/* Typed getters: false if absent or of an incompatible type / out of range. Integer getters
 * accept any integer type whose value fits; float getter accepts f32/f64. */
bool wk_gguf_get_u32(const wk_gguf *g, const char *key, uint32_t *out);
bool wk_gguf_get_i64(const wk_gguf *g, const char *key, int64_t *out);
bool wk_gguf_get_f32(const wk_gguf *g, const char *key, float *out);
bool wk_gguf_get_bool(const wk_gguf *g, const char *key, bool *out);
/* NUL-terminated copy of a string value into buf (false if absent or too long). */
bool wk_gguf_get_str(const wk_gguf *g, const char *key, char *buf, size_t cap);
const wk_gguf_tensor *wk_gguf_find_tensor(const wk_gguf *g, const char *name);

const char *wk_ggml_type_name(wk_ggml_type t);
/* Elements per block and bytes per block; false for types we cannot read. Known: every type in
 * wk_ggml_type (so files with e.g. Q2_K tensors open); which of them can be dequantized is
 * quant.h's business (wk_dequantize returns false for the others). */
bool wk_ggml_type_layout(wk_ggml_type t, uint32_t *block_elems, uint32_t *block_bytes);

#endif
