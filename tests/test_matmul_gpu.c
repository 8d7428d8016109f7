/* The weight-product kernels against a C reference, output by output: matvec.comp (1 to 4 tokens),
 * matmul.comp (the "cpu" set's prefill) and matmul_tiled.comp (the "gpu" set's), for both device
 * weight formats (q8a: int8 codes with an f32 scale and offset per 16 weights; f16), on shapes
 * whose rows and tokens end inside a register tile, a workgroup and a 64 x 64 tile (N = 4, 12, 68,
 * 650: not a multiple of 8, nor of 4; T = 5 .. 67), with the grid forward.c dispatches
 * (wk_matmul_grid). The forward tests' models have every dimension a multiple of 64, so only
 * this test reaches the tails. Every output must be written (poisoned first). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"
#include "test_rng.h"
#include "test_util.h"
#include "test_vk_open.h"
#include "vulkan/shader_params.h"

typedef struct { int N, K, T; } shape;
typedef enum { KERNEL_MATVEC, KERNEL_MATMUL, KERNEL_TILED } kernel;
static const char *const kernel_name[] = {"matvec", "matmul", "matmul_tiled"};

static float frand(uint64_t *s) { return (float)((double)(rng_xorshift64(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* Runs one shape on one kernel and format; returns the outputs off the reference by more than the
 * bound, or -1 when the run failed. */
static long run_shape(wk_vk *vk, wk_pipelines *p, const shape *s, kernel kn, bool q8, uint64_t seed) {
    char err[WK_ERRMSG_LEN] = "";
    const int N = s->N, K = s->K, T = s->T, G = K / 16;
    const size_t nw = (size_t)N * K, nx = (size_t)T * K, ny = (size_t)T * N;
    double *w = malloc(nw * sizeof *w); /* the weights as the kernel dequantizes them, exactly */
    float *x = malloc(nx * sizeof *x);
    int8_t *codes = malloc(nw);
    float *so = malloc((size_t)N * G * 2 * sizeof *so);
    uint16_t *halves = malloc(nw * sizeof *halves);
    wk_buf bc = {0}, bs = {0}, bx = {0}, by = {0};
    long bad = -1;
    for (size_t g = 0; g < (size_t)N * G; g++) {
        so[2 * g] = 0.01f + 0.02f * (float)fabs(frand(&seed)), so[2 * g + 1] = 0.1f * frand(&seed);
        for (int j = 0; j < 16; j++) {
            const size_t i = g * 16 + (size_t)j;
            codes[i] = (int8_t)(rng_xorshift64(&seed) % 255 - 127);
            halves[i] = wk_f32_to_f16(frand(&seed));
            /* q8a: code * scale + offset; the kernel computes it in f32, the bound below allows that */
            w[i] = q8 ? (double)codes[i] * so[2 * g] + so[2 * g + 1] : (double)wk_f16_to_f32(halves[i]);
        }
    }
    for (size_t i = 0; i < nx; i++) x[i] = frand(&seed);
    const size_t code_bytes = q8 ? nw : nw * 2;
    int rc = wk_vk_buffer_create(vk, &bc, code_bytes, WK_MEM_HOST, VK_FORMAT_R32G32B32A32_UINT, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(vk, &bs, (size_t)N * G * 8, WK_MEM_HOST, VK_FORMAT_R32G32_SFLOAT, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(vk, &bx, nx * 4, WK_MEM_HOST, VK_FORMAT_R32G32B32A32_SFLOAT, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(vk, &by, ny * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    if (!rc) {
        memcpy(bc.map, q8 ? (void *)codes : (void *)halves, code_bytes);
        memcpy(bs.map, so, (size_t)N * G * 8);
        memcpy(bx.map, x, nx * 4);
        memset(by.map, 0xff, ny * 4); /* NaN: an output never written fails */
        wk_pc_matmul pc = {.N = (uint32_t)N, .K = (uint32_t)K, .T = (uint32_t)T};
        wk_arg args[4] = {wk_arg_view(bc.view), wk_arg_view(bs.view), wk_arg_view(bx.view), wk_arg_buf(by.buf)};
        wk_pipe_id id;
        uint32_t gx, gy;
        if (kn == KERNEL_MATVEC) {
            id = q8 ? WK_PIPE_MATVEC_Q8A : WK_PIPE_MATVEC_F16;
            gx = ((uint32_t)N + p->matvec_rows - 1) / p->matvec_rows, gy = 1;
        } else {
            id = kn == KERNEL_TILED ? (q8 ? WK_PIPE_MATMUL_TILED_Q8A : WK_PIPE_MATMUL_TILED_F16)
                                    : (q8 ? WK_PIPE_MATMUL_Q8A : WK_PIPE_MATMUL_F16);
            wk_matmul_grid(kn == KERNEL_TILED, (uint32_t)N, (uint32_t)T, &gx, &gy);
        }
        rc = wk_vk_begin(vk, err, sizeof err);
        if (!rc) rc = wk_dispatch(vk, p, id, args, &pc, sizeof pc, gx, gy, 1, err, sizeof err);
        if (!rc) wk_vk_barrier(vk), rc = wk_vk_submit_wait(vk, err, sizeof err);
    }
    if (rc) fprintf(stderr, "%s N=%d K=%d T=%d: %s\n", kernel_name[kn], N, K, T, err);
    if (!rc) {
        bad = 0;
        double worst = 0;
        /* Reference in double. The bound: K products summed in f32 in any order are within
         * K u sum |terms| (u = 2^-24), a few u more for the q8a weight's own f32 rounding. A q8a
         * term counts as |code scale| |x| + |offset| |x|: matvec sums scale * (codes . x) and
         * offset * sum(x) apart, which is exact algebra but rounds each part on its own. */
        const double bound = (K + 4) * ldexp(1.0, -24);
        const float *y = by.map;
        for (int t = 0; t < T; t++)
            for (int n = 0; n < N; n++) {
                double sum = 0, mag = 0;
                for (int k = 0; k < K; k++) {
                    const size_t i = (size_t)n * K + (size_t)k, g = i / 16;
                    const double xv = x[(size_t)t * K + k];
                    sum += w[i] * xv;
                    mag += q8 ? (fabs((double)codes[i] * so[2 * g]) + fabs((double)so[2 * g + 1])) * fabs(xv)
                              : fabs(w[i] * xv);
                }
                const float got = y[(size_t)t * N + n];
                const double e = fabs(got - sum) / (mag + 1e-30);
                if (!(e <= bound)) {
                    if (bad++ < 5)
                        fprintf(stderr, "  %s %s N=%d K=%d T=%d: token %d row %d: gpu %g, reference %g\n",
                                kernel_name[kn], q8 ? "q8a" : "f16", N, K, T, t, n, (double)got, sum);
                } else if (e > worst) {
                    worst = e;
                }
            }
        printf("%-12s %s N=%4d K=%4d T=%2d: %ld of %zu outputs off, worst relative error %.1e\n", kernel_name[kn],
               q8 ? "q8a" : "f16", N, K, T, bad, ny, worst);
    }
    wk_vk_buffer_destroy(vk, &bc), wk_vk_buffer_destroy(vk, &bs);
    wk_vk_buffer_destroy(vk, &bx), wk_vk_buffer_destroy(vk, &by);
    free(w), free(x), free(codes), free(so), free(halves);
    return bad;
}

int main(void) {
    char err[WK_ERRMSG_LEN] = "";
    wk_vk vk;
    wk_pipelines p;
    if (!test_vk_open(&vk, &p)) return 1;
    /* The tiled kernel needs 256 invocations and 8 KiB of shared memory a workgroup: lavapipe has
     * them; a device without them runs the "cpu" set only (wk_pipelines_choose_kernels). */
    const bool tiled_ok = wk_pipelines_choose_kernels(&vk, &p, WK_KERNELS_GPU, err, sizeof err) == 0;
    if (!tiled_ok) printf("matmul_tiled skipped: %s\n", err);
    const shape matvec_shapes[] = {{4, 16, 1}, {12, 48, 2}, {68, 32, 3}, {650, 640, 4}, {37, 64, 1}, {37, 64, 3}};
    const shape matmul_shapes[] = {
        {4, 16, 5},    /* one row tile, partly empty */
        {12, 48, 7},   /* rows end inside the second tile */
        {68, 32, 33},  /* rows past the first 64-row workgroup, tokens past the first 32 */
        {650, 640, 67}, /* N not a multiple of 4: a vocabulary's tail; Gemma 3 270M's K */
        {640, 256, 9}, /* whole tiles of the real model's rows */
        {37, 16, 6},   /* N odd */
    };
    uint64_t seed = 0x3a7b1e5d;
    for (int q8 = 1; q8 >= 0; q8--) {
        for (size_t i = 0; i < sizeof matvec_shapes / sizeof *matvec_shapes; i++)
            CHECK_EQ_INT(run_shape(&vk, &p, &matvec_shapes[i], KERNEL_MATVEC, q8, seed++), 0);
        for (size_t i = 0; i < sizeof matmul_shapes / sizeof *matmul_shapes; i++) {
            CHECK_EQ_INT(run_shape(&vk, &p, &matmul_shapes[i], KERNEL_MATMUL, q8, seed++), 0);
            if (tiled_ok) CHECK_EQ_INT(run_shape(&vk, &p, &matmul_shapes[i], KERNEL_TILED, q8, seed++), 0);
        }
    }
    CHECK_EQ_INT(test_vk_close(&vk, &p), 0);
    TEST_MAIN_END();
}
