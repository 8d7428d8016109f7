/* GGUF v3 writer: builds a file (metadata + tensors) in memory and serializes it byte for byte as
 * the spec lays it out. The engine writes WUSH-KV sidecars with it; tests build model files.
 *
 * Errors are sticky instead of checked per call: adding metadata cannot fail except for memory,
 * so every call after an allocation failure is a no-op and wk_gw_bytes / wk_gw_write report it
 * (NULL / false). Calls on a NULL writer (wk_gw_new out of memory) are no-ops too. */
#ifndef WK_GGUF_WRITE_H
#define WK_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "model/gguf.h"

typedef struct wk_gw wk_gw;

wk_gw *wk_gw_new(void); /* NULL when out of memory */
void wk_gw_free(wk_gw *w);
void wk_gw_kv_u32(wk_gw *w, const char *key, uint32_t v);
void wk_gw_kv_i32(wk_gw *w, const char *key, int32_t v);
void wk_gw_kv_f32(wk_gw *w, const char *key, float v);
void wk_gw_kv_bool(wk_gw *w, const char *key, bool v);
void wk_gw_kv_str(wk_gw *w, const char *key, const char *v);
void wk_gw_kv_arr_str(wk_gw *w, const char *key, const char *const *v, size_t n);
void wk_gw_kv_arr_f32(wk_gw *w, const char *key, const float *v, size_t n);
void wk_gw_kv_arr_i32(wk_gw *w, const char *key, const int32_t *v, size_t n);
/* data holds the tensor already encoded in `type` (nbytes as GGUF computes them); copied. NULL
 * data: zeros. */
void wk_gw_tensor(wk_gw *w, const char *name, wk_ggml_type type, int n_dims, const uint64_t *ne, const void *data);
/* Serialized file (alignment 32 unless set). Caller frees the buffer. NULL after an allocation
 * failure anywhere in the writer's life. */
uint8_t *wk_gw_bytes(wk_gw *w, size_t *size);
bool wk_gw_write(wk_gw *w, const char *path);
/* Whether every call so far succeeded. */
bool wk_gw_ok(const wk_gw *w);

/* Bytes that n_elems of `type` occupy (0 for a type without a known layout). */
size_t wk_gw_type_bytes(wk_ggml_type type, size_t n_elems);

/* For files that need every value type, other versions and other alignments (reader tests). */
void wk_gw_set_version(wk_gw *w, uint32_t version); /* written as is (default 3); counts stay u64 */
/* Appends general.alignment (u32) at this point of the metadata and lays the data out with it. */
void wk_gw_set_alignment(wk_gw *w, uint32_t alignment);
/* A scalar of any scalar value type; value points to the native C value (uint8_t, int16_t,
 * uint64_t, double, bool, ...). */
void wk_gw_kv_scalar(wk_gw *w, const char *key, wk_gguf_type type, const void *value);
/* An array of any scalar element type, from a native C array. */
void wk_gw_kv_arr(wk_gw *w, const char *key, wk_gguf_type elem_type, const void *elems, size_t n);
/* Key and value type followed by already serialized value bytes (nested arrays, malformed values). */
void wk_gw_kv_raw(wk_gw *w, const char *key, wk_gguf_type type, const void *bytes, size_t len);

#endif
