/* kv_transform.comp against a C reference, element by element: for random dense block-diagonal
 * matrices (not orthogonal, so no pair of mistakes cancels, as they can in the logits of
 * test_transform where a permutation of rows applied to both keys and queries is invisible) and
 * random queries and keys, every output of q' = M_q q and k' = M_k k, for head shapes with 1, 2, 4
 * and 8 query heads per KV head, blocks of 4 .. 256 (4 output rows an invocation for blocks of 4,
 * WK_XFORM_ROWS for the rest), steps of 1 .. 35 tokens through both
 * pipelines (kv_transform for steps of WK_XFORM_TOKENS or more, the decode twin for fewer), and
 * the second layer's matrices (mat_base). Every output must be written (poisoned first). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_rng.h"
#include "test_util.h"
#include "test_vk_open.h"
#include "vulkan/shader_params.h"

typedef struct { int D, B, n_head, n_head_kv, T; } shape;

static float frand(uint64_t *s) { return (float)((double)(rng_xorshift64(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* Runs one shape; returns the outputs that differ from the reference by more than the bound. */
static long run_shape(wk_vk *vk, wk_pipelines *p, const shape *s, uint64_t seed) {
    char err[WK_ERRMSG_LEN] = "";
    const int D = s->D, B = s->B, Hq = s->n_head, Hk = s->n_head_kv, T = s->T, G = Hq / Hk, L = 2, layer = 1;
    const size_t per_layer = (size_t)Hk * 2 * D * B; /* floats: [n_head_kv][2][D/B][B][B] */
    const size_t nq = (size_t)T * Hq * D, nk = (size_t)T * Hk * D;
    const size_t k_off = (nq * 4 + 255) / 256 * 256; /* bytes, as forward.c aligns it */
    float *m = malloc(per_layer * L * 4), *x = calloc(k_off / 4 + nk, 4);
    wk_buf bm = {0}, bx = {0}, bq = {0}, bk = {0};
    long bad = -1;
    for (size_t i = 0; i < per_layer * L; i++) m[i] = frand(&seed);
    for (size_t i = 0; i < nq; i++) x[i] = frand(&seed);
    for (size_t i = 0; i < nk; i++) x[k_off / 4 + i] = frand(&seed);
    int rc = wk_vk_buffer_create(vk, &bm, per_layer * L * 4, WK_MEM_HOST, VK_FORMAT_R32G32B32A32_SFLOAT, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(vk, &bx, k_off + nk * 4, WK_MEM_HOST, VK_FORMAT_R32G32B32A32_SFLOAT, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(vk, &bq, nq * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(vk, &bk, nk * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    if (!rc) {
        memcpy(bm.map, m, per_layer * L * 4);
        memcpy(bx.map, x, k_off + nk * 4);
        memset(bq.map, 0xff, nq * 4); /* NaN: an output never written fails */
        memset(bk.map, 0xff, nk * 4);
        const bool twin = T < WK_XFORM_TOKENS;
        const uint32_t units = wk_xform_decode_units(Hq, Hk), tile = twin ? units : WK_XFORM_TOKENS;
        rc = wk_pipelines_specialize_transform(vk, p, B, (int)units, err, sizeof err);
        wk_pc_kv_transform pc = {.head_dim = (uint32_t)D, .n_head = (uint32_t)Hq, .n_head_kv = (uint32_t)Hk,
                                 .n_tokens = (uint32_t)T, .block = (uint32_t)B,
                                 .mat_base = (uint32_t)(per_layer * layer / 4), .k_in_base = (uint32_t)(k_off / 16)};
        wk_arg args[4] = {wk_arg_buf(bq.buf), wk_arg_buf(bk.buf), wk_arg_view(bm.view), wk_arg_view(bx.view)};
        const uint32_t sg = vk->subgroup_size;
        if (!rc) rc = wk_vk_begin(vk, err, sizeof err);
        if (!rc)
            rc = wk_dispatch(vk, p, twin ? WK_PIPE_KV_TRANSFORM_DECODE : WK_PIPE_KV_TRANSFORM, args, &pc, sizeof pc,
                             wk_xform_groups_x((uint32_t)D, B, sg), wk_xform_tiles((uint32_t)T, Hq, Hk, tile), 1, err,
                             sizeof err);
        if (!rc) wk_vk_barrier(vk), rc = wk_vk_submit_wait(vk, err, sizeof err);
    }
    if (rc) fprintf(stderr, "D=%d B=%d: %s\n", D, B, err);
    if (!rc) {
        bad = 0;
        double worst = 0;
        /* Reference in double. The bound: a sum of B products in f32, in any order, is within
         * B u sum |terms| (u = 2^-24, the recursive-summation bound). */
        const double bound = B * ldexp(1.0, -24);
        for (int which = 0; which < 2; which++) {
            const int H = which == 0 ? Hq : Hk;
            const float *in = which == 0 ? x : x + k_off / 4, *out = which == 0 ? bq.map : bk.map;
            for (int t = 0; t < T; t++)
                for (int h = 0; h < H; h++) {
                    const int kh = which == 0 ? h / G : h;
                    /* q: M_q = matrix 1 of the pair, k: matrix 0 */
                    const float *mm = m + per_layer * layer + ((size_t)kh * 2 + (which == 0 ? 1 : 0)) * D * B;
                    const float *xv = in + ((size_t)t * H + h) * D;
                    for (int r = 0; r < D; r++) {
                        const int b = r / B;
                        double sum = 0, mag = 0;
                        for (int j = 0; j < B; j++) {
                            const double term = (double)mm[(size_t)r * B + j] * xv[b * B + j];
                            sum += term, mag += fabs(term);
                        }
                        const float got = out[((size_t)t * H + h) * D + r];
                        const double e = fabs(got - sum) / (mag + 1e-30);
                        if (!(e <= bound)) {
                            if (bad++ < 5)
                                fprintf(stderr, "  %s t=%d head=%d row=%d: gpu %g, reference %g\n", which ? "k" : "q", t,
                                        h, r, (double)got, sum);
                        } else if (e > worst) {
                            worst = e;
                        }
                    }
                }
        }
        printf("D=%3d B=%3d heads %d/%d T=%2d (%s, %s): %ld of %zu outputs off, worst relative error %.1e\n", D, B,
               Hq, Hk, T, T < WK_XFORM_TOKENS ? "decode twin" : "kv_transform",
               p->matmul_shuffle ? "shuffles" : "no shuffles", bad, nq + nk, worst);
    }
    wk_vk_buffer_destroy(vk, &bm), wk_vk_buffer_destroy(vk, &bx);
    wk_vk_buffer_destroy(vk, &bq), wk_vk_buffer_destroy(vk, &bk);
    free(m), free(x);
    return bad;
}

int main(void) {
    wk_vk vk;
    wk_pipelines p;
    if (!test_vk_open(&vk, &p)) return 1;
    if (test_vk_wide_subgroups_broken(&vk)) {
        printf("skipped: 16-lane subgroups on %s are wrong in the driver (docs/lavapipe.md \"Mesa 25\")\n", vk.driver_info);
        test_vk_close(&vk, &p);
        return 77;
    }
    const shape shapes[] = {
        {64, 16, 4, 2, 35},  {64, 64, 4, 2, 5},   {64, 32, 4, 2, 1},    /* the tiny test model's heads */
        {256, 128, 4, 1, 35}, {256, 128, 4, 1, 1}, {256, 32, 4, 1, 8},  /* Gemma 3 270M, default and G32 */
        {256, 256, 4, 1, 3},                                             /* one block a head */
        {128, 32, 8, 1, 9},  {128, 32, 8, 1, 2},                         /* 8 query heads a KV head */
        {128, 64, 2, 2, 12}, {128, 64, 2, 2, 7},                         /* no sharing */
        {96, 32, 6, 2, 17},                                              /* head_dim 96 (Phi-3) */
        {64, 4, 4, 2, 9},    {64, 4, 4, 2, 1},                           /* blocks of 4: 4 rows an invocation */
    };
    uint64_t seed = 0x5eed7a11;
    /* Both modules where the device runs the shuffles (the one whose lanes share the x fetches of
     * a block; it falls back to per-lane fetches itself where blocks are small), else the other. */
    const bool shuffles = p.matmul_shuffle;
    for (int module = shuffles ? 0 : 1; module < 2; module++) {
        char err[WK_ERRMSG_LEN] = "";
        CHECK_EQ_INT(wk_pipelines_set_matmul_shuffle(&vk, &p, module == 0, err, sizeof err), 0);
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
            CHECK_EQ_INT(run_shape(&vk, &p, &shapes[i], seed + i), 0);
    }
    CHECK_EQ_INT(test_vk_close(&vk, &p), 0);
    TEST_MAIN_END();
}
