/* The layers' weight products on the host in the layout of an sgemm kernel: a matrix rearranged
 * once, at upload, into panels of 16 rows whose weights lie column by column, so that one load
 * brings a column of a panel (16 rows' weights, formed as the shaders form them) and each token's
 * input multiplies it as a broadcast. Every output is then a sum in one vector lane: no horizontal
 * sums, and a token's input is read as one float per 16 fused multiply-adds, where the row-major
 * kernels (host_matmul.c) read 16 floats for 16. The matrices the host multiplies take it
 * (weights.c): the layers' when it computes their products, and the output head when it computes
 * the head's, 2.4-2.7x faster than by rows from memory (tests/bench_host_matmul 300 262144 2,
 * docs/benchmarks-host.md); no shader but the embedding's (which reads a row of the tied head by
 * either layout) reads a matrix stored so. */
#ifndef WK_HOST_PANELS_H
#define WK_HOST_PANELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "host/host_matmul.h"

/* Whether a matrix of rows x cols can be stored by panels: whole panels of 16 rows (its columns
 * are in groups of 16 in every device format). */
static inline bool wk_host_panels_fit(uint32_t rows, uint32_t cols) { return rows % 16 == 0 && cols % 16 == 0; }

/* A matrix of format fmt, rows x cols (wk_host_panels_fit), from the device's row-major codes and
 * pairs (host_matmul.h; q8h pairs as u32, the scale's half low) into codes_out and pairs_out of the
 * same sizes, by panels: panel p (rows 16p .. 16p+15) and group g (columns 16g .. 16g+15) form
 * block k = p * (cols / 16) + g, whose codes (int8, or f16 halves) are at 256 k, column by column,
 * each column the panel's 16 rows in order, and whose pairs are 32 values at 32 k: the 16 rows'
 * scales, then their 16 offsets (f32 for q8a, halves for q8h; f16 has none). */
void wk_host_pack_panels(wk_host_wfmt fmt, uint32_t rows, uint32_t cols, const void *codes, const void *pairs,
                         void *codes_out, void *pairs_out);

/* y[t * ldy + r] for rows r of panels [p0, p1) and tokens t < n, of a matrix stored by panels
 * (m->layout WK_HOST_PANELS), x rows of m->cols floats, with the given code (at most
 * wk_host_isa_best()). Each output is one chain over the columns in order of acc = acc + w * x, w
 * formed as code * scale + offset (fused where the code has fused multiply-adds), so a token's
 * outputs are the same bits in any batch and any tile of it: what the prefix cache's warm-equals-
 * cold logits rely on. */
void wk_host_panels_product(const wk_host_matrix *m, wk_host_isa isa, const float *x, int n, float *y, size_t ldy,
                            uint32_t p0, uint32_t p1);

#endif
