/* The weight-product kernels against a C reference, output by output: matvec.comp (1 to 4 tokens;
 * also its outputs split three ways and its fused gate/up with the activation),
 * with one subgroup a workgroup and with four (the "cpu" and "gpu" sets), matmul.comp (the "cpu"
 * set's prefill; also its fused gate/up) and matmul_tiled.comp (the "gpu" set's), for the three device
 * weight formats (q8a: int8 codes with an f32 scale and offset per 16 weights; q8h: the same with
 * the pair as two halves in one R32UI texel; f16), on shapes
 * whose rows and tokens end inside a register tile, a workgroup and a 64 x 64 tile (N = 4, 12, 68,
 * 650: not a multiple of 8, nor of 4; T = 5 .. 67), with the grid forward.c dispatches
 * (wk_matmul_grid). The forward tests' models have every dimension a multiple of 64, so only
 * this test reaches the tails. Every output must be written (poisoned first). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"
#include "weights.h"
#include "test_rng.h"
#include "test_util.h"
#include "test_vk_open.h"
#include "vulkan/shader_params.h"

/* mode: PLAIN one output; SPLIT (matvec only) rows [0, n0) / [n0, n0 + n1) / the rest into three
 * outputs (a layer's q, k, v); GLU (matvec and matmul) act(gate) * up, gate row n and up row N + n. Every
 * case reads its weights from row `row0` of a matrix with rows before and after them (a part of a
 * joined matrix, engine/weights.c). */
typedef enum { PLAIN, SPLIT, GLU } mode;
typedef struct { int N, K, T, row0; mode m; int n0, n1, act; } shape;
typedef enum { KERNEL_MATVEC, KERNEL_MATMUL, KERNEL_TILED } kernel;
static const char *const kernel_name[] = {"matvec", "matmul", "matmul_tiled"};
static const char *const mode_name[] = {"", " split", " glu"};
static const char *const fmt_name[] = {[WK_WFMT_Q8A] = "q8a", [WK_WFMT_F16] = "f16", [WK_WFMT_Q8H] = "q8h"};

static float frand(uint64_t *s) { return (float)((double)(rng_xorshift64(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* common.glsl's glu_act in double */
static double glu_act(double g, int act) {
    return act == 0 ? g / (1.0 + exp(-g)) : 0.5 * g * (1.0 + tanh(0.7978845608 * (g + 0.044715 * g * g * g)));
}

/* Weight row `row` . token t's activations in double, and the bound on the kernel's f32 error. The
 * bound: K products summed in f32 in any order are within K u sum |terms| (u = 2^-24), a few u
 * more for the q8a weight's own f32 rounding. A q8a term counts as |code scale| |x| + |offset| |x|:
 * matvec sums scale * (codes . x) and offset * sum(x) apart, which is exact algebra but rounds each
 * part on its own. */
static double ref_dot(const double *w, const int8_t *codes, const float *so, const float *x, bool q8, int K, int row,
                      int t, double *err_bound) {
    double sum = 0, mag = 0;
    for (int k = 0; k < K; k++) {
        const size_t i = (size_t)row * K + (size_t)k, g = i / 16;
        const double xv = x[(size_t)t * K + k];
        sum += w[i] * xv;
        mag += q8 ? (fabs((double)codes[i] * so[2 * g]) + fabs((double)so[2 * g + 1])) * fabs(xv) : fabs(w[i] * xv);
    }
    *err_bound = (K + 4) * ldexp(1.0, -24) * (mag + 1e-30);
    return sum;
}

/* Runs one shape on one kernel and format; returns the outputs off the reference by more than the
 * bound, or -1 when the run failed. */
static long run_shape(wk_vk *vk, wk_pipelines *p, const shape *s, kernel kn, wk_wfmt fmt, uint64_t seed) {
    const bool q8 = fmt != WK_WFMT_F16;
    char err[WK_ERRMSG_LEN] = "";
    const int N = s->N, K = s->K, T = s->T, G = K / 16;
    const int R = s->row0 + (s->m == GLU ? 2 : 1) * N + 3; /* the matrix: 3 rows past the case's */
    const size_t nw = (size_t)R * K, nx = (size_t)T * K, ny = (size_t)T * N;
    double *w = malloc(nw * sizeof *w); /* the weights as the kernel dequantizes them, exactly */
    float *x = malloc(nx * sizeof *x);
    int8_t *codes = malloc(nw);
    float *so = malloc((size_t)R * G * 2 * sizeof *so);
    uint16_t *halves = malloc(nw * sizeof *halves);
    uint32_t *half_so = malloc((size_t)R * G * sizeof *half_so);
    wk_buf bc = {0}, bs = {0}, bx = {0}, by[3] = {{0}};
    /* output o holds rows [first[o], first[o] + rows[o]) as [T][rows[o]] */
    const int n0 = s->m == SPLIT ? s->n0 : N, n1 = s->m == SPLIT ? s->n1 : 0, n_out = s->m == SPLIT ? 3 : 1;
    const int first[3] = {0, n0, n0 + n1}, rows[3] = {n0, n1, N - n0 - n1};
    long bad = -1;
    for (size_t g = 0; g < (size_t)R * G; g++) {
        so[2 * g] = 0.01f + 0.02f * (float)fabs(frand(&seed)), so[2 * g + 1] = 0.1f * frand(&seed);
        if (fmt == WK_WFMT_Q8H) /* pairs that are halves, as the engine stores only those in q8h */
            for (int j = 0; j < 2; j++) so[2 * g + j] = wk_f16_to_f32(wk_f32_to_f16(so[2 * g + j]));
        for (int j = 0; j < 16; j++) {
            const size_t i = g * 16 + (size_t)j;
            codes[i] = (int8_t)(rng_xorshift64(&seed) % 255 - 127);
            halves[i] = wk_f32_to_f16(frand(&seed));
            /* q8a: code * scale + offset; the kernel computes it in f32, the bound allows that */
            w[i] = q8 ? (double)codes[i] * so[2 * g] + so[2 * g + 1] : (double)wk_f16_to_f32(halves[i]);
        }
    }
    for (size_t i = 0; i < nx; i++) x[i] = frand(&seed);
    const size_t code_bytes = q8 ? nw : nw * 2;
    int rc = wk_vk_buffer_create(vk, &bc, code_bytes, WK_MEM_HOST, VK_FORMAT_R32G32B32A32_UINT, err, sizeof err);
    const bool packed = fmt == WK_WFMT_Q8H && wk_quant_pairs_to_f16(so, (size_t)R * G, half_so);
    if (fmt == WK_WFMT_Q8H && !packed) rc = WK_ERR_INVALID, snprintf(err, sizeof err, "pairs are not halves");
    if (!rc)
        rc = wk_vk_buffer_create(vk, &bs, (size_t)R * G * (packed ? 4 : 8), WK_MEM_HOST,
                                 packed ? VK_FORMAT_R32_UINT : VK_FORMAT_R32G32_SFLOAT, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(vk, &bx, nx * 4, WK_MEM_HOST, VK_FORMAT_R32G32B32A32_SFLOAT, err, sizeof err);
    for (int o = 0; !rc && o < n_out; o++) {
        rc = wk_vk_buffer_create(vk, &by[o], (size_t)T * (rows[o] ? rows[o] : 1) * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED,
                                 err, sizeof err);
        if (!rc) memset(by[o].map, 0xff, by[o].size); /* NaN: an output never written fails */
    }
    if (!rc) {
        memcpy(bc.map, q8 ? (void *)codes : (void *)halves, code_bytes);
        memcpy(bs.map, packed ? (void *)half_so : (void *)so, (size_t)R * G * (packed ? 4 : 8));
        memcpy(bx.map, x, nx * 4);
        wk_pc_matmul pc = {.N = (uint32_t)N, .K = (uint32_t)K, .T = (uint32_t)T, .row0 = (uint32_t)s->row0,
                           .n0 = (uint32_t)n0, .n1 = (uint32_t)n1, .act = (uint32_t)s->act};
        const wk_buf *out[3] = {&by[0], n_out == 3 ? &by[1] : &by[0], n_out == 3 ? &by[2] : &by[0]};
        wk_arg args[6] = {wk_arg_view(bc.view), wk_arg_view(bs.view), wk_arg_view(bx.view),
                          wk_arg_buf(out[0]->buf), wk_arg_buf(out[1]->buf), wk_arg_buf(out[2]->buf)};
        wk_pipe_id id;
        uint32_t gx, gy;
        if (kn == KERNEL_MATVEC) {
            id = wk_pipe_for_format(s->m == GLU     ? WK_PIPE_MATVEC_GLU_Q8A
                                    : s->m == SPLIT ? WK_PIPE_MATVEC_QKV_Q8A
                                                    : WK_PIPE_MATVEC_Q8A,
                                    fmt);
            gx = wk_matvec_groups(p, (uint32_t)N), gy = 1;
        } else {
            id = wk_pipe_for_format(kn == KERNEL_TILED ? WK_PIPE_MATMUL_TILED_Q8A
                                    : s->m == GLU      ? WK_PIPE_MATMUL_GLU_Q8A
                                                       : WK_PIPE_MATMUL_Q8A,
                                    fmt);
            /* as forward.c: a gate/up invocation's tile is half outputs' gate rows, half their up rows */
            wk_matmul_grid(kn == KERNEL_TILED, (uint32_t)(s->m == GLU ? 2 * N : N), (uint32_t)T, &gx, &gy);
        }
        rc = wk_vk_begin(vk, err, sizeof err);
        if (!rc) rc = wk_dispatch(vk, p, id, args, &pc, sizeof pc, gx, gy, 1, err, sizeof err);
        if (!rc) wk_vk_barrier(vk), rc = wk_vk_submit_wait(vk, err, sizeof err);
    }
    if (rc) fprintf(stderr, "%s%s N=%d K=%d T=%d: %s\n", kernel_name[kn], mode_name[s->m], N, K, T, err);
    if (!rc) {
        bad = 0;
        double worst = 0;
        for (int t = 0; t < T; t++)
            for (int n = 0; n < N; n++) {
                double eg, ref = ref_dot(w, codes, so, x, q8, K, s->row0 + n, t, &eg), bound = eg;
                if (s->m == GLU) {
                    /* act(g) u: the gate's error through act' (|act'| < 1.2 for both), the up's
                     * through act(g), and the activation's own f32 evaluation (exp, a few ulp). */
                    double eu, up = ref_dot(w, codes, so, x, q8, K, s->row0 + N + n, t, &eu);
                    const double a = glu_act(ref, s->act);
                    bound = 1.2 * eg * fabs(up) + fabs(a) * eu + 1e-6 * fabs(a * up) + 1e-30;
                    ref = a * up;
                }
                int o = n < first[1] || n_out == 1 ? 0 : n < first[2] ? 1 : 2;
                const float got = ((const float *)by[o].map)[(size_t)t * rows[o] + (n - first[o])];
                const double e = fabs(got - ref);
                if (!(e <= bound)) {
                    if (bad++ < 5)
                        fprintf(stderr, "  %s%s %s N=%d K=%d T=%d: token %d row %d: gpu %g, reference %g\n",
                                kernel_name[kn], mode_name[s->m], fmt_name[fmt], N, K, T, t, n, (double)got, ref);
                } else if (e / (bound + 1e-300) * (K + 4) * ldexp(1.0, -24) > worst) {
                    worst = e / (bound + 1e-300) * (K + 4) * ldexp(1.0, -24);
                }
            }
        printf("%-12s %s%s%s N=%4d K=%4d T=%2d row0 %d: %ld of %zu outputs off, worst error %.1e of a relative bound %.1e\n",
               kernel_name[kn], fmt_name[fmt], mode_name[s->m],
               kn == KERNEL_MATMUL ? (p->matmul_shuffle ? " shuffle" : " noshuffle") : "", N, K, T, s->row0, bad, ny, worst,
               (K + 4) * ldexp(1.0, -24));
    }
    wk_vk_buffer_destroy(vk, &bc), wk_vk_buffer_destroy(vk, &bs), wk_vk_buffer_destroy(vk, &bx);
    for (int o = 0; o < 3; o++) wk_vk_buffer_destroy(vk, &by[o]);
    free(w), free(x), free(codes), free(so), free(halves), free(half_so);
    return bad;
}

int main(void) {
    char err[WK_ERRMSG_LEN] = "";
    wk_vk vk;
    wk_pipelines p;
    if (!test_vk_open(&vk, &p)) return 1;
    if (test_vk_wide_subgroups_broken(&vk)) {
        printf("skipped: 16-lane subgroups on %s are wrong in the driver (docs/lavapipe.md \"Mesa 25\")\n", vk.driver_info);
        test_vk_close(&vk, &p);
        return 77;
    }
    /* The tiled kernel needs 256 invocations and 8 KiB of shared memory a workgroup: lavapipe has
     * them; a device without them runs the "cpu" set only (wk_pipelines_choose_kernels). */
    const bool tiled_ok = wk_pipelines_choose_kernels(&vk, &p, WK_KERNELS_GPU, err, sizeof err) == 0;
    if (!tiled_ok) printf("matmul_tiled skipped: %s\n", err);
    /* lavapipe at its default width allows the shuffle module; a device without shuffles or with
     * 4-lane subgroups checks the shuffle-free module only */
    const bool shuffle_ok = p.matmul_shuffle;
    if (!shuffle_ok) printf("matmul's shuffle module skipped: the device does not allow it\n");
#define P(n, k, t, r) {.N = n, .K = k, .T = t, .row0 = r, .m = PLAIN}
#define SPLIT3(n, k, t, r, a, b) {.N = n, .K = k, .T = t, .row0 = r, .m = SPLIT, .n0 = a, .n1 = b}
#define GATED(n, k, t, r, act_) {.N = n, .K = k, .T = t, .row0 = r, .m = GLU, .act = act_}
    const shape matvec_shapes[] = {
        P(4, 16, 1, 0), P(12, 48, 2, 5), P(68, 32, 3, 0), P(650, 640, 4, 17), P(37, 64, 1, 3), P(37, 64, 3, 0),
        /* q, k, v in one dispatch: segments ending inside a workgroup of rows and on its edge, one empty */
        SPLIT3(1536, 640, 1, 0, 1024, 256), SPLIT3(40, 32, 2, 7, 20, 11), SPLIT3(45, 64, 4, 0, 16, 16),
        SPLIT3(24, 48, 3, 2, 8, 0),
        /* gate and up with the activation: GeGLU and SwiGLU, a partial last workgroup, 1 to 4 tokens */
        GATED(2048, 640, 1, 0, 1), GATED(37, 64, 1, 4, 0), GATED(40, 32, 2, 0, 1), GATED(21, 48, 4, 9, 0)};
    const shape matmul_shapes[] = {
        P(4, 16, 5, 0),      /* one row tile, partly empty */
        P(12, 48, 7, 3),     /* rows end inside the second tile; a part of a joined matrix */
        P(68, 32, 33, 0),    /* rows past the first 64-row workgroup, tokens past the first 32 */
        P(650, 640, 67, 0),  /* N not a multiple of 4: a vocabulary's tail; Gemma 3 270M's K */
        P(640, 256, 9, 0),   /* whole tiles of the real model's rows */
        P(37, 16, 6, 0),     /* N odd */
        P(256, 640, 9, 1024), /* W_k's rows of a joined q, k, v matrix */
        /* gate and up with the activation ("cpu" kernels only): Gemma 3 270M's, rows ending inside
         * an invocation's 4 outputs, tokens inside and past a tile, both activations */
        GATED(2048, 640, 9, 0, 1), GATED(37, 64, 5, 4, 0), GATED(42, 32, 33, 0, 1), GATED(21, 48, 67, 9, 0),
    };
#undef P
#undef SPLIT3
#undef GATED
    uint64_t seed = 0x3a7b1e5d;
    const wk_wfmt formats[] = {WK_WFMT_Q8A, WK_WFMT_Q8H, WK_WFMT_F16};
    for (size_t fi = 0; fi < sizeof formats / sizeof *formats; fi++) {
        const wk_wfmt fmt = formats[fi];
        /* The matvec with one subgroup a workgroup ("cpu" kernels) and with four ("gpu"): each
         * subgroup its own rows, the grid's last workgroup partly or wholly past N. */
        for (uint32_t subgroups = 1; subgroups <= 4; subgroups += 3) {
            char err[WK_ERRMSG_LEN] = "";
            CHECK_EQ_INT(wk_pipelines_set_matvec_subgroups(&vk, &p, subgroups, err, sizeof err), 0);
            for (size_t i = 0; i < sizeof matvec_shapes / sizeof *matvec_shapes; i++)
                CHECK_EQ_INT(run_shape(&vk, &p, &matvec_shapes[i], KERNEL_MATVEC, fmt, seed++), 0);
        }
        /* matmul.comp's two modules: the lanes of a token tile sharing its activations' fetches
         * through subgroup shuffles (where the device allows it), and every lane fetching its own. */
        for (int shuffle = shuffle_ok; shuffle >= 0; shuffle--) {
            CHECK_EQ_INT(wk_pipelines_set_matmul_shuffle(&vk, &p, shuffle, err, sizeof err), 0);
            for (size_t i = 0; i < sizeof matmul_shapes / sizeof *matmul_shapes; i++)
                CHECK_EQ_INT(run_shape(&vk, &p, &matmul_shapes[i], KERNEL_MATMUL, fmt, seed++), 0);
        }
        for (size_t i = 0; i < sizeof matmul_shapes / sizeof *matmul_shapes; i++)
            if (tiled_ok && matmul_shapes[i].m != GLU) CHECK_EQ_INT(run_shape(&vk, &p, &matmul_shapes[i], KERNEL_TILED, fmt, seed++), 0);
    }
    CHECK_EQ_INT(test_vk_close(&vk, &p), 0);
    TEST_MAIN_END();
}
