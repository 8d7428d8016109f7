/* The host's weight products (engine/host/host_matmul.c) against a double-precision loop over the
 * same weights, for every instruction set this CPU runs (plain C, AVX2, AVX-512), every device
 * weight format (q8a16 with f32 and with half pairs, f16), each layout (row-major as the device
 * stores a matrix, and by panels, engine/host/host_panels.c), token counts around the kernels'
 * tiles and blocks, row counts around a job's rows and a panel's, and 1 to 3
 * threads, and each token alone giving its products bit for bit; the thread pool handing out
 * every job exactly once, list after list; the row work between a layer's products
 * (engine/host/host_layer.c: the residual with its norms, the GLU activations, a head's q/k norm
 * with RoPE, a row's halves) and the key transform's block-diagonal product
 * (engine/host/host_transform.c, each vector of a batch bit for bit alone) against double loops of
 * the shaders' formulas. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <math.h>

#include "host/host_layer.h"
#include "host/host_transform.h"
#include "host/host_matmul.h"
#include "host/host_panels.h"
#include "host/host_pool.h"
#include "model/quant.h"
#include "test_rng.h"
#include "test_util.h"

typedef struct test_matrix {
    wk_host_matrix m;
    int8_t *c8;
    uint16_t *c16;
    float *pf;     /* q8a pairs */
    uint32_t *ph;  /* q8h pairs */
    double *wd;    /* every weight as the shaders form it (weight()), row-major: the reference's */
} test_matrix;

static double weight(const test_matrix *t, size_t r, size_t c);

static void form_weights(test_matrix *t) {
    t->wd = malloc((size_t)t->m.rows * t->m.cols * sizeof *t->wd);
    for (size_t r = 0; r < t->m.rows; r++)
        for (size_t c = 0; c < t->m.cols; c++) t->wd[r * t->m.cols + c] = weight(t, r, c);
}

static void make_matrix(test_matrix *t, wk_host_wfmt fmt, uint32_t rows, uint32_t cols) {
    memset(t, 0, sizeof *t);
    const size_t n = (size_t)rows * cols, groups = n / 16;
    t->m = (wk_host_matrix){.fmt = fmt, .rows = rows, .cols = cols};
    if (fmt == WK_HOST_F16) {
        t->c16 = malloc(n * sizeof *t->c16);
        for (size_t i = 0; i < n; i++) t->c16[i] = wk_f32_to_f16((float)(rng_gauss() * 0.05));
        t->m.codes = t->c16;
        form_weights(t);
        return;
    }
    t->c8 = malloc(n);
    for (size_t i = 0; i < n; i++) t->c8[i] = (int8_t)(rng_u64() >> 56);
    t->m.codes = t->c8;
    if (fmt == WK_HOST_Q8A) {
        t->pf = malloc(groups * 2 * sizeof *t->pf);
        for (size_t g = 0; g < groups; g++) {
            t->pf[2 * g] = (float)(rng_gauss() * 1e-3);
            t->pf[2 * g + 1] = (float)(rng_gauss() * 1e-2);
        }
        t->m.pairs = t->pf;
    } else {
        t->ph = malloc(groups * sizeof *t->ph);
        for (size_t g = 0; g < groups; g++)
            t->ph[g] = wk_f32_to_f16((float)(rng_gauss() * 1e-3)) |
                       (uint32_t)wk_f32_to_f16((float)(rng_gauss() * 1e-2)) << 16;
        t->m.pairs = t->ph;
    }
    form_weights(t);
}

static void free_matrix(test_matrix *t) {
    free(t->c8);
    free(t->c16);
    free(t->pf);
    free(t->ph);
    free(t->wd);
}

/* The weight as the shaders form it: code * scale + offset in f32, or the half. */
static double weight(const test_matrix *t, size_t r, size_t c) {
    const size_t i = r * t->m.cols + c, g = i / 16;
    switch (t->m.fmt) {
    case WK_HOST_F16: return wk_f16_to_f32(t->c16[i]);
    case WK_HOST_Q8A: return (double)(float)((float)t->c8[i] * t->pf[2 * g] + t->pf[2 * g + 1]);
    default:
        return (double)(float)((float)t->c8[i] * wk_f16_to_f32((uint16_t)(t->ph[g] & 0xffff)) +
                               wk_f16_to_f32((uint16_t)(t->ph[g] >> 16)));
    }
}

static int compare(const test_matrix *t, const float *x, int n, const float *y, size_t ldy, const char *what) {
    int bad = 0;
    for (int k = 0; k < n; k++)
        for (uint32_t r = 0; r < t->m.rows; r++) {
            double ref = 0, mag = 0;
            for (uint32_t c = 0; c < t->m.cols; c++) {
                const double p = t->wd[(size_t)r * t->m.cols + c] * x[(size_t)k * t->m.cols + c];
                ref += p;
                mag += p < 0 ? -p : p;
            }
            /* f32 sums of cols products in another order, and an fma or not in each weight. */
            const double tol = 2e-6 * mag + 1e-9;
            const double got = y[(size_t)k * ldy + r];
            if (!(got - ref <= tol && ref - got <= tol) && bad++ < 3)
                fprintf(stderr, "%s: token %d row %u: %.9g vs %.9g (tol %.3g)\n", what, k, r, got, ref, tol);
        }
    /* The gaps between rows of y (ldy > rows) are left as they were. */
    for (int k = 0; k < n; k++)
        for (size_t r = t->m.rows; r < ldy; r++)
            if (y[(size_t)k * ldy + r] != -7.0f && bad++ < 3) fprintf(stderr, "%s: wrote past row %u\n", what, t->m.rows);
    return bad;
}

/* t's matrix rearranged by panels (host_panels.h) into p (its buffers p's own). */
static void pack_matrix(const test_matrix *t, test_matrix *p) {
    const size_t n = (size_t)t->m.rows * t->m.cols, groups = n / 16;
    memset(p, 0, sizeof *p);
    p->m = t->m;
    p->m.layout = WK_HOST_PANELS;
    if (t->m.fmt == WK_HOST_F16) p->c16 = malloc(n * sizeof *p->c16);
    else p->c8 = malloc(n);
    if (t->m.fmt == WK_HOST_Q8A) p->pf = malloc(groups * 2 * sizeof *p->pf);
    if (t->m.fmt == WK_HOST_Q8H) p->ph = malloc(groups * sizeof *p->ph);
    p->m.codes = t->m.fmt == WK_HOST_F16 ? (const void *)p->c16 : (const void *)p->c8;
    p->m.pairs = t->m.fmt == WK_HOST_Q8A ? (const void *)p->pf : (const void *)p->ph;
    wk_host_pack_panels(t->m.fmt, t->m.rows, t->m.cols, t->m.codes, t->m.pairs, (void *)p->m.codes,
                        (void *)p->m.pairs);
}

static void test_products(void) {
    static const char *fmt_names[] = {"q8a", "q8h", "f16"};
    /* Rows around a job's and, by panels (rows a multiple of 16), 1 to 3 panels (an odd one after
     * the pairs) and long sums (2048 columns, a layer's W_down). */
    static const uint32_t shapes[][2] = {{1, 16}, {3, 48}, {16, 32}, {48, 32}, {256, 80}, {257, 32}, {700, 640},
                                         {1100, 32}, {528, 64}, {32, 2048}};
    /* Row-major: tiles of 8 and 4, then single tokens; blocks of 8 tokens (13: a block, a tile of 4
     * and one; 37: four blocks, a tile of 4 and one). By panels: passes of 12 tokens, the last of
     * 4-11 tokens in one pass, 1-3 in passes of 4 panels, one token in passes of 8 where the job
     * has them (528 x 64 with no pool: jobs of 128 rows) (16: 12 + 4, 26: 24 + 2). */
    static const int counts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16, 26, 37};
    wk_host_pool *pools[3] = {NULL, NULL, NULL};
    char err[256] = "";
    for (int i = 0; i < 3; i++) {
        pools[i] = wk_host_pool_create(i + 1, err, sizeof err);
        CHECK(pools[i] != NULL);
        if (pools[i]) CHECK_EQ_INT(wk_host_pool_threads(pools[i]), i + 1);
    }
    const wk_host_isa best = wk_host_isa_best();
    printf("host products: best instruction set %s\n", wk_host_isa_name(best));
    for (int isa = WK_HOST_ISA_C; isa <= (int)best; isa++)
        for (int f = 0; f < 3; f++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                for (int layout = WK_HOST_ROWS; layout <= WK_HOST_PANELS; layout++) {
                if (layout == WK_HOST_PANELS && !wk_host_panels_fit(shapes[s][0], shapes[s][1])) continue;
                test_matrix t, packed;
                make_matrix(&t, (wk_host_wfmt)f, shapes[s][0], shapes[s][1]);
                if (layout == WK_HOST_PANELS) pack_matrix(&t, &packed);
                const wk_host_matrix *m = layout == WK_HOST_PANELS ? &packed.m : &t.m;
                for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                    const int n = counts[ci];
                    const size_t ldy = t.m.rows + 5;
                    float *x = malloc((size_t)n * t.m.cols * sizeof *x);
                    float *y = malloc((size_t)n * ldy * sizeof *y);
                    for (size_t i = 0; i < (size_t)n * t.m.cols; i++) x[i] = (float)rng_gauss();
                    /* No pool, then 1..3 threads (a thread count per case, cycling, keeps it quick). */
                    wk_host_pool *pool = ci % 4 == 0 ? NULL : pools[ci % 4 - 1];
                    for (size_t i = 0; i < (size_t)n * ldy; i++) y[i] = -7.0f;
                    wk_host_matmul(pool, (wk_host_isa)isa, m, x, n, y, ldy);
                    char what[128];
                    snprintf(what, sizeof what, "%s %s %s %ux%u n=%d threads=%d", wk_host_isa_name((wk_host_isa)isa),
                             layout == WK_HOST_PANELS ? "panels" : "rows", fmt_names[f], t.m.rows, t.m.cols, n,
                             pool ? wk_host_pool_threads(pool) : 0);
                    CHECK_EQ_INT(compare(&t, x, n, y, ldy, what), 0);
                    /* Each token alone gives its row of the step bit for bit: a token's products do not
                     * depend on its tile nor on the step's size (a prefix-cache hit gives the cold
                     * logits exactly, tests/test_prefix_cache.c). */
                    float *alone = malloc(t.m.rows * sizeof *alone);
                    int differ = 0;
                    for (int k = 0; k < n; k++) {
                        wk_host_matmul(pool, (wk_host_isa)isa, m, x + (size_t)k * t.m.cols, 1, alone, t.m.rows);
                        differ += memcmp(alone, y + (size_t)k * ldy, t.m.rows * sizeof *alone) != 0;
                    }
                    if (differ) fprintf(stderr, "%s: %d tokens differ alone\n", what, differ);
                    CHECK_EQ_INT(differ, 0);
                    free(alone);
                    free(x);
                    free(y);
                }
                free_matrix(&t);
                if (layout == WK_HOST_PANELS) free_matrix(&packed);
                }
    for (int i = 0; i < 3; i++) wk_host_pool_destroy(pools[i]);
}

typedef struct tally {
    atomic_int hits[1000];
} tally;

static void count_job(void *ctx, int j) { atomic_fetch_add(&((tally *)ctx)->hits[j], 1); }

static void test_pool(void) {
    char err[256] = "";
    wk_host_pool *p = wk_host_pool_create(3, err, sizeof err);
    CHECK(p != NULL);
    if (!p) return;
    static tally t;
    static const int sizes[] = {0, 1, 2, 3, 17, 1000};
    for (int round = 0; round < 60; round++) {
        const int n = sizes[round % 6];
        for (int j = 0; j < 1000; j++) atomic_init(&t.hits[j], 0);
        /* Every third list after a pause past the workers' 30 us spin: they are asleep and must be
         * woken (a lost wake-up hangs here); the others find them spinning. */
        if (round % 3 == 0) nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
        wk_host_pool_run(p, n, count_job, &t);
        int wrong = 0;
        for (int j = 0; j < 1000; j++) wrong += atomic_load(&t.hits[j]) != (j < n);
        CHECK_EQ_INT(wrong, 0);
    }
    wk_host_pool_destroy(p);
    p = wk_host_pool_create(0, err, sizeof err); /* as many as this process's CPUs */
    CHECK(p != NULL);
    if (p) CHECK_EQ_INT(wk_host_pool_threads(p), wk_host_cpus());
    wk_host_pool_destroy(p);
    wk_host_pool_destroy(NULL);
}

/* wk_host_add_norm (with and without the post-norm) and wk_host_glu (GELU and SiLU, with and
 * without threads) against double loops. */
static void test_row_work(void) {
    enum { N = 48, ROWS = 5, FF = 40 };
    const float eps = 1e-6f;
    float a[ROWS * N], h[ROWS * N], h0[ROWS * N], y[ROWS * N], wp[N], wn[N];
    for (int i = 0; i < ROWS * N; i++) a[i] = (float)rng_gauss(), h0[i] = (float)rng_gauss();
    for (int i = 0; i < N; i++) wp[i] = (float)rng_gauss(), wn[i] = (float)rng_gauss();
    for (int post = 0; post < 2; post++) {
        memcpy(h, h0, sizeof h);
        wk_host_add_norm(a, h, post ? wp : NULL, wn, y, N, ROWS, eps);
        int bad = 0;
        for (int t = 0; t < ROWS; t++) {
            double ssa = 0, ss = 0, hh[N];
            for (int i = 0; i < N; i++) ssa += (double)a[t * N + i] * a[t * N + i];
            for (int i = 0; i < N; i++) {
                const double add = post ? a[t * N + i] / sqrt(ssa / N + eps) * wp[i] : a[t * N + i];
                hh[i] = h0[t * N + i] + add;
                ss += hh[i] * hh[i];
            }
            for (int i = 0; i < N; i++) {
                const double want_y = hh[i] / sqrt(ss / N + eps) * wn[i];
                bad += fabs(h[t * N + i] - hh[i]) > 1e-5 * (1 + fabs(hh[i]));
                bad += fabs(y[t * N + i] - want_y) > 1e-5 * (1 + fabs(want_y));
            }
        }
        if (bad) fprintf(stderr, "add_norm post=%d: %d values off\n", post, bad);
        CHECK_EQ_INT(bad, 0);
    }
    char err[256] = "";
    wk_host_pool *pool = wk_host_pool_create(2, err, sizeof err);
    CHECK(pool != NULL);
    const size_t ld = 2 * FF + 3; /* gate and up in one row, as a joined gate/up product leaves them */
    float gu[ROWS * (2 * FF + 3)], act[ROWS * FF];
    for (size_t i = 0; i < sizeof gu / sizeof *gu; i++) gu[i] = 4.0f * (float)rng_gauss();
    gu[0] = 60.0f, gu[1] = -60.0f; /* where a naive tanh ratio overflows */
    for (int gelu = 0; gelu < 2; gelu++)
        for (int threads = 0; threads < 2; threads++) {
            wk_host_glu(threads ? pool : NULL, gu, gu + FF, ld, act, FF, ROWS, gelu);
            int bad = 0;
            for (int t = 0; t < ROWS; t++)
                for (int i = 0; i < FF; i++) {
                    const double g = gu[t * ld + i], u = gu[t * ld + FF + i];
                    const double f = gelu ? 0.5 * g * (1 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)))
                                          : g / (1 + exp(-g));
                    bad += !(fabs(act[t * FF + i] - f * u) <= 1e-5 * (1 + fabs(f * u)));
                }
            if (bad) fprintf(stderr, "glu gelu=%d threads=%d: %d values off\n", gelu, threads, bad);
            CHECK_EQ_INT(bad, 0);
        }
    wk_host_pool_destroy(pool);
}

/* wk_host_norm_rope (NEOX and adjacent pairs, with and without the norm, a partial rotation) and
 * wk_host_block_transform_n (every instruction set) against double loops. */
static void test_head_work(void) {
    enum { D = 40, DX = 48 };
    const float eps = 1e-6f;
    float x0[D], x[D], w[D], rope[D];
    for (int i = 0; i < D; i++) x0[i] = 3.0f * (float)rng_gauss(), w[i] = (float)rng_gauss();
    for (int i = 0; i < D / 2; i++) {
        const double th = 0.37 * (i + 1);
        rope[2 * i] = (float)cos(th), rope[2 * i + 1] = (float)sin(th);
    }
    for (int c = 0; c < 8; c++) {
        const bool neox = c & 1, norm = c & 2;
        const int n_rot = c & 4 ? 24 : D;
        const float scale = 0.125f;
        memcpy(x, x0, sizeof x);
        wk_host_norm_rope(x, D, norm ? w : NULL, eps, rope, n_rot, neox, scale);
        double ss = 0, n[D], want[D];
        for (int i = 0; i < D; i++) ss += (double)x0[i] * x0[i];
        for (int i = 0; i < D; i++) n[i] = norm ? x0[i] / sqrt(ss / D + eps) * w[i] : x0[i];
        for (int i = 0; i < D; i++) want[i] = n[i] * scale;
        for (int i = 0; i < n_rot / 2; i++) {
            const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
            want[a] = (n[a] * rope[2 * i] - n[b] * rope[2 * i + 1]) * scale;
            want[b] = (n[a] * rope[2 * i + 1] + n[b] * rope[2 * i]) * scale;
        }
        int bad = 0;
        for (int i = 0; i < D; i++) bad += !(fabs(x[i] - want[i]) <= 1e-5 * (1 + fabs(want[i])));
        if (bad) fprintf(stderr, "norm_rope neox=%d norm=%d n_rot=%d: %d values off\n", neox, norm, n_rot, bad);
        CHECK_EQ_INT(bad, 0);
    }
    /* Blocks of 4 (one output at a time), 24 (a tile of 16, then 8 alone) and a whole head of 48
     * (panels of 32 and 16); batches of 1 to 26 vectors (AVX-512 takes 12 a pass, AVX2 6, C 2). */
    const int blocks[] = {4, 24, DX};
    const wk_host_isa best = wk_host_isa_best();
    float M[DX * DX], cols[DX * DX], x1[DX];
    for (int i = 0; i < DX; i++) x1[i] = 3.0f * (float)rng_gauss();
    for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++)
        for (int isa = WK_HOST_ISA_C; isa <= (int)best; isa++) {
            const int B = blocks[b];
            for (int i = 0; i < DX * B; i++) M[i] = (float)rng_gauss();
            wk_host_block_columns(M, DX, B, cols);
            float xt[DX], *one = xt;
            memcpy(xt, x1, sizeof xt);
            wk_host_block_transform_n((wk_host_isa)isa, cols, DX, B, &one, 1);
            int bad = 0;
            for (int i = 0; i < DX; i++) {
                double want = 0;
                for (int j = 0; j < B; j++) want += (double)M[i * B + j] * x1[(i / B) * B + j];
                bad += !(fabs(xt[i] - want) <= 1e-5 * (1 + fabs(want)));
            }
            if (bad) fprintf(stderr, "block_transform %s B=%d: %d values off\n", wk_host_isa_name((wk_host_isa)isa), B, bad);
            CHECK_EQ_INT(bad, 0);
            /* Each vector of a batch bit for bit what it gives alone. */
            enum { NMAX = 26 };
            float xs_data[NMAX][DX], *xs[NMAX];
            for (int n = 1; n <= NMAX; n++) {
                for (int v = 0; v < n; v++) {
                    for (int i = 0; i < DX; i++) xs_data[v][i] = x1[(i + 7 * v) % DX] * (float)(v + 1);
                    xs[v] = xs_data[v];
                }
                wk_host_block_transform_n((wk_host_isa)isa, cols, DX, B, xs, n);
                int differ = 0;
                for (int v = 0; v < n; v++) {
                    for (int i = 0; i < DX; i++) xt[i] = x1[(i + 7 * v) % DX] * (float)(v + 1);
                    wk_host_block_transform_n((wk_host_isa)isa, cols, DX, B, &one, 1);
                    differ += memcmp(xt, xs_data[v], sizeof xt) != 0;
                }
                if (differ) fprintf(stderr, "block_transform_n %s B=%d n=%d: %d vectors differ\n",
                                    wk_host_isa_name((wk_host_isa)isa), B, n, differ);
                CHECK_EQ_INT(differ, 0);
            }
        }
}

/* wk_host_to_halves (each instruction set) gives wk_f32_to_f16's bits (tests/test_quant.c checks
 * those against IEEE's rounding) for every half's midpoint and its neighbours, then one float bit
 * pattern in 4099 (nans, infinities, subnormals), in rows of 1001 (eight at a time, then a tail). */
static void test_halves(void) {
    const wk_host_isa best = wk_host_isa_best();
    enum { ROW = 1001 };
    static float xs[ROW];
    uint16_t got[ROW];
    int bad_n = 0, filled = 0;
    uint32_t h = 0;
    uint64_t pattern = 0;
    for (;;) {
        const bool more = h < 0x7C00 || pattern <= 0xFFFFFFFFull;
        if (more && h < 0x7C00) {
            const double vlo = wk_f16_to_f32((uint16_t)h), vhi = h + 1 == 0x7C00 ? 65536.0 : wk_f16_to_f32((uint16_t)(h + 1));
            const float mid = (float)((vlo + vhi) / 2);
            xs[filled++] = mid, xs[filled++] = nextafterf(mid, 0), xs[filled++] = -nextafterf(mid, INFINITY);
            h++;
        } else if (more) {
            const uint32_t u = (uint32_t)pattern;
            memcpy(&xs[filled++], &u, 4);
            pattern += 4099;
        }
        if (filled > ROW - 3 || (!more && filled)) {
            for (int isa = WK_HOST_ISA_C; isa <= (int)best; isa++) {
                wk_host_to_halves((wk_host_isa)isa, xs, got, (size_t)filled);
                for (int i = 0; i < filled; i++) bad_n += got[i] != wk_f32_to_f16(xs[i]);
            }
            filled = 0;
        }
        if (!more) break;
    }
    CHECK_EQ_INT(bad_n, 0);
}

int main(void) {
    rng_seed(20261207);
    test_pool();
    test_row_work();
    test_head_work();
    test_halves();
    test_products();
    TEST_MAIN_END();
}
