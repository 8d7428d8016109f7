/* kv_transform.comp against a C reference, element by element: for random dense block-diagonal
 * matrices (not orthogonal, so no pair of mistakes cancels, as they can in the logits of
 * test_transform where a permutation of rows applied to both keys and queries is invisible) and
 * random queries and keys, every output of q' = M_q q and k' = M_k k, for head shapes with 1, 2, 4
 * and 8 query heads per KV head, blocks of 4 .. 256 (4 output rows an invocation for blocks of 4,
 * WK_XFORM_ROWS for the rest; 16-unit tiles for blocks of 128 and 256), steps of 1 .. 35 tokens through both
 * pipelines (kv_transform for steps of WK_XFORM_TOKENS or more, the decode twin for fewer), and
 * the second layer's matrices (mat_base). Every output must be written (poisoned first).
 * Steps of 1 .. 4 tokens also run kv_transform_decode_rope, which takes q and k before
 * qk_norm_rope and applies its per-head RMSNorm, RoPE (NEOX and adjacent pairs, all or half of a
 * head rotated) and query scale itself: the reference does those first, in double. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_rng.h"
#include "test_util.h"
#include "test_vk_open.h"
#include "vulkan/shader_params.h"

typedef struct { int D, B, n_head, n_head_kv, T; } shape;
/* kv_transform_decode_rope's part: rotated dims, NEOX pairs (else adjacent), per-head norm. */
typedef struct { int n_rot; bool neox, norm; } rope_cfg;
/* positions in the cos/sin table; the layer's part starts TABLE_SKIP positions in (as a sliding
 * layer's follows the global one's) */
enum { MAX_POS = 50, TABLE_SKIP = 3 };

/* x as qk_norm_rope leaves it, in double, for head vector `in` of token position pos; *mag: what
 * bounds each rounding, |x_a c| + |x_b s| (times the scale). */
static void rope_ref(const rope_cfg *c, int D, const float *in, const float *w, const float *table, int pos, float eps,
                     double scale, double *out, double *mag) {
    double ss = 0;
    for (int d = 0; d < D; d++) ss += (double)in[d] * in[d];
    const double inv = c->norm ? 1.0 / sqrt(ss / D + eps) : 1.0;
    double xn[512];
    for (int d = 0; d < D; d++) xn[d] = in[d] * inv * (c->norm ? w[d] : 1.0);
    const int half = c->n_rot / 2;
    for (int d = 0; d < D; d++) {
        if (d >= c->n_rot) {
            out[d] = xn[d] * scale, mag[d] = fabs(out[d]);
            continue;
        }
        const int i = c->neox ? d % half : d / 2;
        const int a = c->neox ? i : 2 * i, b = c->neox ? i + half : 2 * i + 1;
        const double cs = table[2 * (pos * half + i)], sn = table[2 * (pos * half + i) + 1];
        out[d] = (d == a ? xn[a] * cs - xn[b] * sn : xn[a] * sn + xn[b] * cs) * scale;
        mag[d] = (fabs(xn[a]) * fabs(d == a ? cs : sn) + fabs(xn[b]) * fabs(d == a ? sn : cs)) * scale;
    }
}

static float frand(uint64_t *s) { return (float)((double)(rng_xorshift64(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* Runs one shape (through kv_transform_decode_rope when rc is given); returns the outputs that
 * differ from the reference by more than the bound. */
static long run_shape(wk_vk *vk, wk_pipelines *p, const shape *s, const rope_cfg *rc_, uint64_t seed) {
    char err[WK_ERRMSG_LEN] = "";
    const int D = s->D, B = s->B, Hq = s->n_head, Hk = s->n_head_kv, T = s->T, G = Hq / Hk, L = 2, layer = 1;
    const size_t per_layer = (size_t)Hk * 2 * D * B; /* floats: [n_head_kv][2][D/B][B][B] */
    const size_t nq = (size_t)T * Hq * D, nk = (size_t)T * Hk * D;
    const size_t k_off = (nq * 4 + 255) / 256 * 256; /* bytes, as forward.c aligns it */
    float *m = malloc(per_layer * L * 4), *x = calloc(k_off / 4 + nk, 4);
    /* the rope pipeline's: norm weights (q's, then k's), the cos/sin table, each token's position */
    const int half = rc_ ? rc_->n_rot / 2 : 1;
    float *nw = malloc(2 * (size_t)D * 4), *table = malloc((size_t)(MAX_POS + TABLE_SKIP) * half * 2 * 4);
    uint32_t rows[2 * 8] = {0};
    wk_buf bm = {0}, bx = {0}, bq = {0}, bk = {0}, bnq = {0}, bnk = {0}, brope = {0}, brows = {0};
    long bad = -1;
    for (size_t i = 0; i < per_layer * L; i++) m[i] = frand(&seed);
    for (size_t i = 0; i < nq; i++) x[i] = frand(&seed) * 3.0f;
    for (size_t i = 0; i < nk; i++) x[k_off / 4 + i] = frand(&seed) * 3.0f;
    for (int i = 0; i < 2 * D; i++) nw[i] = 1.0f + 0.5f * frand(&seed);
    for (int i = 0; i < (MAX_POS + TABLE_SKIP) * half; i++) {
        const double theta = 3.14159265358979 * frand(&seed);
        table[2 * i] = (float)cos(theta), table[2 * i + 1] = (float)sin(theta);
    }
    for (int t = 0; t < T && t < 8; t++) rows[2 * t] = (uint32_t)(rng_xorshift64(&seed) % MAX_POS);
    const float eps = 1e-6f, q_scale = 0.0625f;
    int rc = wk_vk_buffer_create(vk, &bm, per_layer * L * 4, WK_MEM_HOST, VK_FORMAT_R32G32B32A32_SFLOAT, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(vk, &bx, k_off + nk * 4, WK_MEM_HOST, VK_FORMAT_R32G32B32A32_SFLOAT, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(vk, &bq, nq * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(vk, &bk, nk * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(vk, &bnq, (size_t)D * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(vk, &bnk, (size_t)D * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    if (!rc)
        rc = wk_vk_buffer_create(vk, &brope, (size_t)(MAX_POS + TABLE_SKIP) * half * 8, WK_MEM_HOST,
                                 VK_FORMAT_R32G32_SFLOAT, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(vk, &brows, sizeof rows, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    if (!rc) {
        memcpy(bnq.map, nw, (size_t)D * 4), memcpy(bnk.map, nw + D, (size_t)D * 4);
        memcpy(brope.map, table, (size_t)(MAX_POS + TABLE_SKIP) * half * 8), memcpy(brows.map, rows, sizeof rows);
        memcpy(bm.map, m, per_layer * L * 4);
        memcpy(bx.map, x, k_off + nk * 4);
        memset(bq.map, 0xff, nq * 4); /* NaN: an output never written fails */
        memset(bk.map, 0xff, nk * 4);
        const bool twin = T < WK_XFORM_TOKENS;
        const uint32_t units = wk_xform_decode_units(Hq, Hk), tile = twin ? units : wk_xform_step_units(B);
        rc = wk_pipelines_specialize_transform(vk, p, B, (int)units, err, sizeof err);
        wk_pc_kv_transform pc = {.head_dim = (uint32_t)D, .n_head = (uint32_t)Hq, .n_head_kv = (uint32_t)Hk,
                                 .n_tokens = (uint32_t)T, .block = (uint32_t)B,
                                 .mat_base = (uint32_t)(per_layer * layer / 4), .k_in_base = (uint32_t)(k_off / 16),
                                 .n_rot = rc_ ? (uint32_t)rc_->n_rot : 0, .rope_neox = rc_ && rc_->neox,
                                 .has_norm = rc_ && rc_->norm, .rope_table_offset = (uint32_t)(TABLE_SKIP * half),
                                 .eps = eps, .q_scale = q_scale};
        wk_arg args[8] = {wk_arg_buf(bq.buf),    wk_arg_buf(bk.buf),     wk_arg_view(bm.view),
                          wk_arg_view(bx.view),  wk_arg_buf(bnq.buf),    wk_arg_buf(bnk.buf),
                          wk_arg_view(brope.view), wk_arg_buf(brows.buf)};
        const wk_pipe_id pipe = rc_ ? WK_PIPE_KV_TRANSFORM_DECODE_ROPE
                                : twin ? WK_PIPE_KV_TRANSFORM_DECODE : WK_PIPE_KV_TRANSFORM;
        const uint32_t sg = vk->subgroup_size;
        if (!rc) rc = wk_vk_begin(vk, err, sizeof err);
        if (!rc)
            rc = wk_dispatch(vk, p, pipe, args, &pc, sizeof pc,
                             wk_xform_groups_x((uint32_t)D, B, sg), wk_xform_tiles((uint32_t)T, Hq, Hk, tile), 1, err,
                             sizeof err);
        if (!rc) wk_vk_barrier(vk), rc = wk_vk_submit_wait(vk, err, sizeof err);
    }
    if (rc) fprintf(stderr, "D=%d B=%d: %s\n", D, B, err);
    if (!rc) {
        bad = 0;
        double worst = 0;
        /* Reference in double. The bound: a sum of B products in f32, in any order, is within
         * B u sum |terms| (u = 2^-24, the recursive-summation bound). With the norm and RoPE in
         * the shader, each x carries their error into its terms: the sum of D squares (D u), half
         * of it through the square root, inversesqrt's 2 ulp (4 u), and the products and the
         * difference after it (6 u), so (D / 2 + 10) u more of each term's size. */
        const double bound = (B + (rc_ ? D / 2 + 10 : 0)) * ldexp(1.0, -24);
        double y[512], ymag[512];
        for (int which = 0; which < 2; which++) {
            const int H = which == 0 ? Hq : Hk;
            const float *in = which == 0 ? x : x + k_off / 4, *out = which == 0 ? bq.map : bk.map;
            for (int t = 0; t < T; t++)
                for (int h = 0; h < H; h++) {
                    const int kh = which == 0 ? h / G : h;
                    /* q: M_q = matrix 1 of the pair, k: matrix 0 */
                    const float *mm = m + per_layer * layer + ((size_t)kh * 2 + (which == 0 ? 1 : 0)) * D * B;
                    const float *xv = in + ((size_t)t * H + h) * D;
                    for (int d = 0; d < D; d++) y[d] = xv[d], ymag[d] = fabs(xv[d]);
                    if (rc_)
                        rope_ref(rc_, D, xv, nw + (which == 0 ? 0 : D), table + 2 * TABLE_SKIP * half,
                                 (int)rows[2 * t], eps, which == 0 ? q_scale : 1.0, y, ymag);
                    for (int r = 0; r < D; r++) {
                        const int b = r / B;
                        double sum = 0, mag = 0;
                        for (int j = 0; j < B; j++) {
                            sum += (double)mm[(size_t)r * B + j] * y[b * B + j];
                            mag += fabs((double)mm[(size_t)r * B + j]) * ymag[b * B + j];
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
        char what[64];
        if (rc_)
            snprintf(what, sizeof what, "rope twin, n_rot %d %s%s", rc_->n_rot, rc_->neox ? "neox" : "pairs",
                     rc_->norm ? ", norm" : "");
        printf("D=%3d B=%3d heads %d/%d T=%2d (%s, %s): %ld of %zu outputs off, worst relative error %.1e\n", D, B,
               Hq, Hk, T, rc_ ? what : T < WK_XFORM_TOKENS ? "decode twin" : "kv_transform",
               p->matmul_shuffle ? "shuffles" : "no shuffles", bad, nq + nk, worst);
    }
    wk_vk_buffer_destroy(vk, &bm), wk_vk_buffer_destroy(vk, &bx);
    wk_vk_buffer_destroy(vk, &bq), wk_vk_buffer_destroy(vk, &bk);
    wk_vk_buffer_destroy(vk, &bnq), wk_vk_buffer_destroy(vk, &bnk);
    wk_vk_buffer_destroy(vk, &brope), wk_vk_buffer_destroy(vk, &brows);
    free(m), free(x), free(nw), free(table);
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
        {256, 256, 4, 1, 3},  {256, 256, 4, 1, 20},                      /* one block a head */
        {128, 128, 2, 2, 16},                                            /* 16-unit tiles, exactly one */
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
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            const shape *s = &shapes[i];
            CHECK_EQ_INT(run_shape(&vk, &p, s, NULL, seed + i), 0);
            if (s->T > 4) continue; /* the rope twin: decode steps (forward.c, rope_in_transform) */
            /* NEOX over the whole head with the norm (Gemma 3), half the head rotated, adjacent pairs */
            const rope_cfg cfgs[] = {{s->D, true, true}, {s->D / 2, true, false}, {s->D, false, true}};
            for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++)
                if (cfgs[c].n_rot % 8 == 0) CHECK_EQ_INT(run_shape(&vk, &p, s, &cfgs[c], seed + i + 100 * c), 0);
        }
    }
    CHECK_EQ_INT(test_vk_close(&vk, &p), 0);
    TEST_MAIN_END();
}
