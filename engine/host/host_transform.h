/* The key transform's block-diagonal products on the host (kv_write=host, engine/forward_host_kv.c):
 * k' = T_K k for a head's keys and q' = T_K^-T q for its query heads, the work kv_transform.comp
 * does on a device. The matrices are read by columns, in panels of outputs (each block rearranged
 * once, at open), so that a batch of vectors shares each load of the matrix, as an sgemm kernel
 * shares its packed panels. */
#ifndef WK_HOST_TRANSFORM_H
#define WK_HOST_TRANSFORM_H

#include <stddef.h>

#include "host/host_matmul.h" /* wk_host_isa */

enum { WK_HOST_MAX_HEAD = 1024 };

/* M (D rows of B floats, block-diagonal: row i multiplies block i / B of a vector, D a multiple of
 * B; as wk_kv_xform.kq stores each matrix) into cols (D * B floats) by panels: block by block, its
 * outputs 32 at a time while 32 remain, then 16, then one at a time; a panel of w outputs from
 * output i0 is B rows of w floats at cols[(b * B + i0) * B], row j holding M[b * B + i][j] for its
 * outputs i. */
void wk_host_block_columns(const float *M, int D, int B, float *cols);

/* xs[v] = M xs[v] in place for the n vectors of D <= WK_HOST_MAX_HEAD floats, M given by its
 * panels (wk_host_block_columns), with the given code (at most wk_host_isa_best()). Each output is
 * one chain of fused multiply-adds (a multiply and an add in the plain code's panels) over its
 * block in column order, so a vector's result is bit for bit the same whatever else is in the
 * batch and wherever it sits in it: a prompt's tokens in eights, a KV head's query heads (they
 * share T_K^-T), a decode token alone, and a prefix cache's stored keys against a cold prompt's. */
void wk_host_block_transform_n(wk_host_isa isa, const float *cols, int D, int B, float *const *xs, int n);

#endif
