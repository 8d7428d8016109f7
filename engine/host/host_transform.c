/* The key transform's block-diagonal products on the host (host_transform.h), laid out as an
 * sgemm kernel: a pass packs up to 12 vectors' inputs of a block side by side, then for each panel
 * of 32 outputs (M's columns, stored panel by panel) every step loads the panel's row once (2
 * registers) and adds it, times each vector's element (a broadcast), into 12 x 2 sums: 24 fused
 * multiply-adds for 14 loads. The products of rows with a vector this replaces needed 6 loads for
 * 8 and a horizontal sum for each output, and were most of a prompt token's cache writes.
 * One body in GCC's vector extensions, built plain, for AVX2 + FMA and for AVX-512. */
#include "host/host_transform.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define WK_HOST_XFORM_X86 1
#endif

/* Contraction on (GCC's C11 mode turns it off), so that each a + b * c is one fused multiply-add
 * wherever the code has them. clang's "on", not its "fast": "fast" fuses where the back end sees
 * fit, and in clang 14 left some of a 12-vector pass's sums unfused (test_host_matmul's batch
 * check failed); "on" makes each one llvm.fmuladd, which a target with FMA always fuses. */
#if defined(__clang__)
#pragma clang fp contract(on)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

/* The outputs' panels of a block: 32 at a time while they last, then 16, then one at a time. */
static int panel_width(int B, int i0) { return i0 + 32 <= B ? 32 : i0 + 16 <= B ? 16 : 1; }

void wk_host_block_columns(const float *M, int D, int B, float *cols) {
    for (int b = 0; b < D / B; b++)
        for (int i0 = 0, w; i0 < B; i0 += w) {
            w = panel_width(B, i0);
            float *panel = cols + (size_t)b * B * B + (size_t)i0 * B;
            for (int j = 0; j < B; j++)
                for (int i = i0; i < i0 + w; i++) panel[(size_t)j * w + (i - i0)] = M[((size_t)b * B + i) * B + j];
        }
}

/* Vectors of 16 floats (AVX-512's registers) and of 8 (AVX2's, and the plain build's), only in
 * static always-inlined helpers (meson.build: -Wno-psabi). A vector twice a register's width
 * would be split by GCC through memory. */
typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
#define WK_INLINE static inline __attribute__((always_inline))
WK_INLINE v16f load16(const float *p) {
    v16f v;
    memcpy(&v, p, sizeof v);
    return v;
}
WK_INLINE v8f load8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Vectors a pass: AVX-512's 32 registers hold 12 x 2 sums of 16 and a panel row's 2 loads (the
 * layout of an sgemm kernel: 14 loads for 24 fused multiply-adds, so the loads are not what
 * bounds it); AVX2's 16 hold 6 x 2 sums of 8 and 2 loads. */
enum { NV_WIDE = 12, NV_AVX2 = 6, NV_C = 2 };

/* nv vectors' sums over one panel's outputs, its rows w floats apart from p: all 32 or 16 of them
 * with 16-float vectors (tw 2 or 1), 16 with 8-float ones (the caller steps p through a 32-wide
 * panel); xt[j * NV_WIDE + v] the vectors' inputs. nv and tw are constants at every call, so the sums stay in registers.
 * Every output is one chain, j = 0 .. B-1, of acc = fma(M[i][j], x[j], acc) from 0 (in the plain
 * build a multiply and an add: it has no fused one; the outputs past the last panel take fmaf),
 * whatever the batch, so a vector's result is the same bits in any batch. */
WK_INLINE void panel16(const float *p, int w, int B, const float *xt, float *const *y, int nv, int tw) {
    v16f acc[NV_WIDE][2], m[2];
    for (int v = 0; v < nv; v++)
        for (int t = 0; t < tw; t++) acc[v][t] = (v16f){0};
    for (int j = 0; j < B; j++, p += w, xt += NV_WIDE) {
        for (int t = 0; t < tw; t++) m[t] = load16(p + 16 * t);
        for (int v = 0; v < nv; v++)
            for (int t = 0; t < tw; t++) acc[v][t] += m[t] * xt[v];
    }
    for (int v = 0; v < nv; v++)
        for (int t = 0; t < tw; t++) memcpy(y[v] + 16 * t, &acc[v][t], sizeof acc[v][t]);
}
WK_INLINE void panel8(const float *p, int w, int B, const float *xt, float *const *y, int nv) {
    v8f acc[NV_WIDE][2], m[2]; /* nv <= NV_AVX2 runs; the larger counts are only compiled */
    for (int v = 0; v < nv; v++) acc[v][0] = acc[v][1] = (v8f){0};
    for (int j = 0; j < B; j++, p += w, xt += NV_WIDE) {
        m[0] = load8(p), m[1] = load8(p + 8);
        for (int v = 0; v < nv; v++) acc[v][0] += m[0] * xt[v], acc[v][1] += m[1] * xt[v];
    }
    for (int v = 0; v < nv; v++) memcpy(y[v], &acc[v][0], sizeof acc[v][0]), memcpy(y[v] + 8, &acc[v][1], sizeof acc[v][1]);
}

/* One block (its columns cb) for nv vectors whose inputs xt holds; y[v]: vector v's block. */
WK_INLINE void block(const float *cb, int B, const float *xt, float *const *y, int nv, bool wide) {
    float *yo[NV_WIDE];
    for (int i0 = 0, w; i0 < B; i0 += w) {
        w = panel_width(B, i0);
        const float *p = cb + (size_t)i0 * B;
        if (w == 1) {
            for (int v = 0; v < nv; v++) {
                float a = 0;
                for (int j = 0; j < B; j++) a = fmaf(p[j], xt[(size_t)j * NV_WIDE + v], a);
                y[v][i0] = a;
            }
            continue;
        }
        for (int r0 = 0; r0 < w; r0 += wide ? w : 16) { /* constant widths: the loops unroll */
            for (int v = 0; v < nv; v++) yo[v] = y[v] + i0 + r0;
            if (wide && w == 32) panel16(p, 32, B, xt, yo, nv, 2);
            else if (wide) panel16(p, 16, B, xt, yo, nv, 1);
            else if (w == 32) panel8(p + r0, 32, B, xt, yo, nv);
            else panel8(p + r0, 16, B, xt, yo, nv);
        }
    }
}

/* Passes of nv_max vectors: each block's inputs packed first (so the outputs go in place), then
 * its panels. */
WK_INLINE void transform_body(const float *cols, int D, int B, float *const *xs, int n, int nv_max) {
    float xt[WK_HOST_MAX_HEAD * NV_WIDE]; /* 48 KiB */
    const bool wide = nv_max == NV_WIDE;
    for (int v0 = 0; v0 < n; v0 += nv_max) {
        const int nv = n - v0 < nv_max ? n - v0 : nv_max;
        for (int b = 0; b < D / B; b++) {
            float *y[NV_WIDE];
            for (int v = 0; v < nv; v++) y[v] = xs[v0 + v] + (size_t)b * B;
            for (int j = 0; j < B; j++)
                for (int v = 0; v < nv; v++) xt[(size_t)j * NV_WIDE + v] = y[v][j];
            const float *cb = cols + (size_t)b * B * B;
            switch (nv) { /* each count its own code, the sums in registers */
            case 1: block(cb, B, xt, y, 1, wide); break;
            case 2: block(cb, B, xt, y, 2, wide); break;
            case 3: block(cb, B, xt, y, 3, wide); break;
            case 4: block(cb, B, xt, y, 4, wide); break;
            case 5: block(cb, B, xt, y, 5, wide); break;
            case 6: block(cb, B, xt, y, 6, wide); break;
            case 7: block(cb, B, xt, y, 7, wide); break;
            case 8: block(cb, B, xt, y, 8, wide); break;
            case 9: block(cb, B, xt, y, 9, wide); break;
            case 10: block(cb, B, xt, y, 10, wide); break;
            case 11: block(cb, B, xt, y, 11, wide); break;
            default: block(cb, B, xt, y, NV_WIDE, wide); break;
            }
        }
    }
}

#define XFORM_ARGS const float *cols, int D, int B, float *const *xs, int n
static void transform_c(XFORM_ARGS) { transform_body(cols, D, B, xs, n, NV_C); }
#ifdef WK_HOST_XFORM_X86
__attribute__((target("avx2,fma,avx512f"))) static void transform_avx512(XFORM_ARGS) {
    transform_body(cols, D, B, xs, n, NV_WIDE);
}
__attribute__((target("avx2,fma"))) static void transform_avx2(XFORM_ARGS) { transform_body(cols, D, B, xs, n, NV_AVX2); }
#endif

void wk_host_block_transform_n(wk_host_isa isa, XFORM_ARGS) {
#ifdef WK_HOST_XFORM_X86
    if (isa != WK_HOST_ISA_C) {
        (isa == WK_HOST_ISA_AVX512 ? transform_avx512 : transform_avx2)(cols, D, B, xs, n);
        return;
    }
#endif
    (void)isa;
    transform_c(cols, D, B, xs, n);
}
