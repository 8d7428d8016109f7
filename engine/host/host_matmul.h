/* Products of a weight matrix in the device's formats (engine/weights.h: q8a16 codes with f32 or
 * half pairs; f16) with rows of activations, computed by the host CPU, for a Vulkan device that
 * is the host CPU itself (lavapipe): the output head (262144 x 640 for Gemma 3) and every layer's
 * matrices, nearly all of a decode step there. A shader reads their bytes at a quarter of what C
 * reads (docs/lavapipe.md "What bounds a decode step"), while the host's own vector units (AVX-512
 * or AVX2 chosen at run time, plain C elsewhere) run at the memory's speed. Each weight is formed
 * as the shaders form it (code * scale + offset, in f32), so only the order of the sums differs
 * from the device's, and each (row, token) is summed in one order whatever step it is in. */
#ifndef WK_HOST_MATMUL_H
#define WK_HOST_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "host/host_pool.h"

typedef enum { WK_HOST_Q8A = 0, WK_HOST_Q8H = 1, WK_HOST_F16 = 2 } wk_host_wfmt;

/* How a matrix's weights lie: row-major, as the device stores them, or by panels of 16 rows
 * (host_panels.h), as the layers' matrices are stored when only the host reads them. */
typedef enum { WK_HOST_ROWS = 0, WK_HOST_PANELS = 1 } wk_host_layout;

/* A matrix of rows x cols (cols a multiple of 16) as the device stores it, read in place through
 * the device memory's host mapping. */
typedef struct wk_host_matrix {
    wk_host_wfmt fmt;
    uint32_t rows, cols;
    const void *codes; /* row 0's first code: q8a, q8h int8 codes; f16 halves; row-major */
    const void *pairs; /* row 0's first pair, one per 16 weights: q8a (scale, offset) f32; q8h u32, the
                        * scale's half low, the offset's high; f16 unused */
    wk_host_layout layout; /* WK_HOST_PANELS: codes and pairs as host_panels.h lays them out */
} wk_host_matrix;

/* The vector code in use: "avx512", "avx2" or "c". */
typedef enum { WK_HOST_ISA_C = 0, WK_HOST_ISA_AVX2 = 1, WK_HOST_ISA_AVX512 = 2 } wk_host_isa;
wk_host_isa wk_host_isa_best(void); /* the best this CPU runs */
const char *wk_host_isa_name(wk_host_isa isa);

/* y[t * ldy + r] = sum_c W[r][c] * x[t * cols + c] for t < n, r < rows: on the pool's threads
 * (pool NULL: the caller alone), with the given code, at most wk_host_isa_best() (asked once, at
 * open: CPUID is slow in some virtual machines, and the answer does not change). */
void wk_host_matmul(wk_host_pool *pool, wk_host_isa isa, const wk_host_matrix *m, const float *x, int n, float *y,
                    size_t ldy);

#endif
