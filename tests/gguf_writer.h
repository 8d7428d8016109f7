/* Test-side GGUF v3 writer: builds small model files (metadata + tensors) in memory or on disk. */
#ifndef WK_TEST_GGUF_WRITER_H
#define WK_TEST_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "gguf.h"

typedef struct wk_gw wk_gw;

wk_gw *wk_gw_new(void);
void wk_gw_free(wk_gw *w);
void wk_gw_kv_u32(wk_gw *w, const char *key, uint32_t v);
void wk_gw_kv_i32(wk_gw *w, const char *key, int32_t v);
void wk_gw_kv_f32(wk_gw *w, const char *key, float v);
void wk_gw_kv_bool(wk_gw *w, const char *key, bool v);
void wk_gw_kv_str(wk_gw *w, const char *key, const char *v);
void wk_gw_kv_arr_str(wk_gw *w, const char *key, const char *const *v, size_t n);
void wk_gw_kv_arr_f32(wk_gw *w, const char *key, const float *v, size_t n);
void wk_gw_kv_arr_i32(wk_gw *w, const char *key, const int32_t *v, size_t n);
/* data holds the tensor already encoded in `type` (nbytes as GGUF computes them); copied. */
void wk_gw_tensor(wk_gw *w, const char *name, wk_ggml_type type, int n_dims, const uint64_t *ne, const void *data);
/* Serialized file (alignment 32). Caller frees the buffer. */
uint8_t *wk_gw_bytes(wk_gw *w, size_t *size);
bool wk_gw_write(wk_gw *w, const char *path);

/* n_elems elements of random but well-formed blocks of `type` (finite, modest f16 scales),
 * for tests that exercise every block format. rng: xorshift state, advanced. */
void wk_gw_random_blocks(wk_ggml_type type, size_t n_elems, uint64_t *rng, void *out);
/* Bytes that n_elems of `type` occupy. */
size_t wk_gw_type_bytes(wk_ggml_type type, size_t n_elems);

/* Additions for tests that need every value type, other versions and other alignments. */
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
