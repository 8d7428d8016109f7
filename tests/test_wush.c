/* WUSH transform tests: exactness (T^-T^T T = I, scores unchanged), balanced transformed second
 * moments, gain >= 1 and hand-computed gains, agreement with the reference's wush() on fixed Grams,
 * second-moment accumulator, Hadamard, and the reference selftest's synthetic 2-bit score-error
 * experiment reproduced in C (printed, with its ordering checked). */
#include <lapacke.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_quant.h"
#include "test_rng.h"
#include "test_util.h"
#include "wush/wush_transform.h"

/* d = 8 Grams and the reference's T, T^-T and predicted gain, from:
 *   python3 - <<'EOF'
 *   import numpy as np, wush_ref as r  # docs/design.md appendix A, saved as wush_ref.py
 *   rng = np.random.default_rng(8)
 *   d = 8
 *   a = rng.standard_normal((d, 64)) * np.array([3, 1, 1, 0.5, 2, 1, 0.2, 1])[:, None]
 *   b = rng.standard_normal((d, 64)) @ np.diag(np.linspace(0.5, 2, 64)) + 0.3
 *   gx, gw = a @ a.T / 64, b @ b.T / 64
 *   t, tit = r.wush(gw, gx)
 *   def lit(name, m): print(f"static const double {name}[64] = {{" + ", ".join(f"{v:.17g}" for v in m.ravel()) + "};")
 *   lit("REF_GW", gw); lit("REF_GX", gx); lit("REF_T", t); lit("REF_TINVT", tit)
 *   print(f"static const double REF_GAIN = {r.predicted_gain(gw, gx):.17g};")
 *   EOF
 */
static const double REF_GW[64] = {
    1.6304056774702658, 0.32868500005019496, 0.55760316734628512, -0.14437477616280622,
    0.3316655427687929, -0.092880489179987508, 0.39540923418930596, 0.071278384992515445,
    0.32868500005019496, 1.7332662075488696, 0.10849164366482217, -0.20079754922576754,
    0.21804373819129041, -0.012620812818604993, 0.031498900778410409, 0.37927407590539747,
    0.55760316734628512, 0.10849164366482217, 2.4027832843146704, 0.085864675096773396,
    0.1682830271050661, -0.30906116519947857, 0.61515749530618336, 0.17607393770410465,
    -0.14437477616280622, -0.20079754922576754, 0.085864675096773396, 2.1320973476269192,
    -0.24302141274969025, 0.3411468970485923, 0.38409537248182135, 0.17686869323873161,
    0.3316655427687929, 0.21804373819129041, 0.1682830271050661, -0.24302141274969025,
    1.9883552866895071, -0.47644869184742089, -0.10495001806297542, 0.10840188896405767,
    -0.092880489179987508, -0.012620812818604993, -0.30906116519947857, 0.3411468970485923,
    -0.47644869184742089, 1.2378014460371782, -0.02896669809947526, -0.12905535714297456,
    0.39540923418930596, 0.031498900778410409, 0.61515749530618336, 0.38409537248182135,
    -0.10495001806297542, -0.02896669809947526, 1.5127500977941284, 0.064715380557757274,
    0.071278384992515445, 0.37927407590539747, 0.17607393770410465, 0.17686869323873161,
    0.10840188896405767, -0.12905535714297456, 0.064715380557757274, 1.4036868857167273
};
static const double REF_GX[64] = {
    11.377927310786909, 0.28697739345780798, 0.37972836796771769, -0.09196014608197392,
    -1.2883765848590332, 0.06530265164315037, -0.10087510833304053, -0.36908983691568459,
    0.28697739345780798, 0.94717597644795415, 0.085742582979485699, 0.034519237946500629,
    -0.24703646700565673, -0.052774773067435624, -0.010573140777980902, 0.037634807272956226,
    0.37972836796771769, 0.085742582979485699, 1.0720564436816309, 0.033495551280056449,
    -0.24578833123020133, 0.087284218009520922, 0.040287903792653505, 0.17734455904884597,
    -0.09196014608197392, 0.034519237946500629, 0.033495551280056449, 0.30667445991269005,
    -0.13474694887870994, -0.16906516061788474, -0.0055422363217635679, -0.075756237340666083,
    -1.2883765848590332, -0.24703646700565673, -0.24578833123020133, -0.13474694887870994,
    3.565413482788915, -0.054858091942534631, -0.022332910743521707, 0.084446012991553229,
    0.06530265164315037, -0.052774773067435624, 0.087284218009520922, -0.16906516061788474,
    -0.054858091942534631, 1.0721396173604438, -0.012232692402138498, 0.20433213352804189,
    -0.10087510833304053, -0.010573140777980902, 0.040287903792653505, -0.0055422363217635679,
    -0.022332910743521707, -0.012232692402138498, 0.038052334059989888, 0.007134155035154968,
    -0.36908983691568459, 0.037634807272956226, 0.17734455904884597, -0.075756237340666083,
    0.084446012991553229, 0.20433213352804189, 0.007134155035154968, 0.76596524533647892
};
static const double REF_T[64] = {
    -0.23363278311938646, -0.49713104110670742, -0.17873177565160722, -0.52975424052936293,
    -0.32784360247818772, 0.45497472714689285, 0.60215020542155262, -0.59258553040121298,
    0.15629644209160651, 0.029311965418130397, 0.62512828278099963, 0.65096832395415904,
    -0.22368452105639758, -0.10413572001253099, 1.0867316720507321, -0.44527432250529958,
    0.28110613615015323, -0.41737048621992573, -0.23971108055765486, -0.58932934032623652,
    0.21859690146564476, -0.62567141502153267, 0.67486273404567865, -0.019836259227705797,
    -0.16365408046928476, -0.49415486256203439, 0.24485873633076563, 0.72103396874852121,
    0.34068762452468976, 0.077324722220002973, 0.87681540536072855, 0.44090934656943714,
    0.19814399970895172, 0.54145912208327296, 0.43420480929298061, -0.68335911465898558,
    0.37905178030506076, 0.27122119605319961, 0.72278329557872534, 0.039663265278555647,
    -0.17085789738975371, 0.4980511572502343, -0.6120215548857757, 0.35661365320494726,
    0.30603579179610674, -0.013492505304001461, 0.62263497639718146, -0.39434681241561653,
    -0.26042857324392271, 0.34166514153284883, 0.013342944188103953, -0.44993817799143032,
    -0.37312781939582051, -0.42578198910896975, 0.6910250533909712, 0.52419065872662551,
    0.25570989155275153, 0.096076667275748609, -0.6134908570689761, 0.56640554695704581,
    -0.26247764356678055, 0.48504284935766684, 0.75951379017995635, 0.46327189705014415
};
static const double REF_TINVT[64] = {
    -0.48020108763951319, -0.35510282583234409, -0.087911591752858509, -0.28006493471143307,
    -0.24050636894997021, 0.42536061143752057, 0.16826580865058441, -0.29278536441039499,
    0.41240944635080756, 0.11752071017489014, 0.38239621487100639, 0.29014767066639374,
    -0.43710514470010237, -0.25006643918953109, 0.18823834324283908, -0.39480022498427941,
    0.69192081922573223, -0.36036696199103391, -0.28563655847765917, -0.19187770720517999,
    0.20472119884267626, -0.51242506958732004, 0.15858409717588295, -0.058339207494093069,
    -0.65503858028483131, -0.41286174401578957, 0.17694694004866415, 0.17287565287846721,
    0.56928551180529519, 0.13045947663034588, 0.1785609741274512, 0.36335160440150827,
    0.27883199541543519, 0.31648236042010219, 0.29479550413822614, -0.33988865307605715,
    0.44738190374877257, 0.44975375668285705, 0.16255606027652492, 0.10248156699904798,
    -0.53887645957621, 0.3954732808686815, -0.44834155480228399, 0.17288642778276431,
    0.44360463495151015, -0.17926108019471815, 0.13972269907861426, -0.37971805258742097,
    -0.70292786692483078, 0.27494373831400098, 0.038316155291021822, -0.15957581357476158,
    -0.49208324829569805, -0.35046058035095945, 0.18233039396732698, 0.36601889084017197,
    0.74797866227578602, 0.034675947763068225, -0.37577722572609745, 0.10471325623856503,
    -0.36470980432344513, 0.36308570745538249, 0.13171941788723804, 0.31012853769912707
};
static const double REF_GAIN = 1.6378796364920492;

/* ---- RNG (xoshiro256**, Box-Muller) ---- */

/* ---- small dense helpers (row-major n x n) ---- */
static void matmul(int n, const double *a, const double *b, double *c) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < n; k++) s += a[i * n + k] * b[k * n + j];
            c[i * n + j] = s;
        }
}
static void transpose(int n, const double *a, double *t) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) t[j * n + i] = a[i * n + j];
}
static double max_abs(size_t n, const double *a) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}
static void damped(int n, const double *g, double *out) {
    double tr = 0;
    for (int i = 0; i < n; i++) tr += g[i * n + i];
    memcpy(out, g, sizeof(double) * (size_t)n * n);
    for (int i = 0; i < n; i++) out[i * n + i] += WK_WUSH_DAMP * tr / n;
}
/* Random anisotropic Gram A A^T / m with a few strong directions and a weak one. */
static void random_gram(int n, double *g) {
    const int m = 3 * n;
    double *a = malloc(sizeof(double) * (size_t)n * m);
    for (int i = 0; i < n; i++) {
        double sc = i % 5 == 1 ? 6.0 : (i % 7 == 3 ? 0.05 : 1.0);
        for (int j = 0; j < m; j++) a[i * m + j] = sc * rng_gauss() + (i % 3 == 0 ? 0.4 : 0);
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < m; k++) s += a[i * m + k] * a[j * m + k];
            g[i * n + j] = s / m;
        }
    free(a);
}

/* The WUSH properties of one block: exactness, balance, equal diagonals, gain >= 1. */
static void check_wush_properties(int n, const double *gw, const double *gx, const double *t, const double *tit,
                                  double gain) {
    size_t nn = (size_t)n * n;
    double *a = calloc(nn, sizeof *a), *b = calloc(nn, sizeof *b), *c = calloc(nn, sizeof *c),
           *d = calloc(nn, sizeof *d), *e = calloc(nn, sizeof *e);
    /* (T^-T)^T T = I */
    transpose(n, tit, a);
    matmul(n, a, t, b);
    for (int i = 0; i < n; i++) b[i * n + i] -= 1.0;
    CHECK(max_abs(nn, b) < 1e-10);
    /* scores unchanged: (T^-T w).(T x) == w.x for random w, x */
    double worst = 0;
    for (int trial = 0; trial < 20; trial++) {
        double w[256], x[256], s0 = 0, s1 = 0, sc = 0;
        for (int i = 0; i < n; i++) w[i] = rng_gauss(), x[i] = rng_gauss();
        for (int i = 0; i < n; i++) {
            double tw = 0, tx = 0;
            for (int j = 0; j < n; j++) tw += tit[i * n + j] * w[j], tx += t[i * n + j] * x[j];
            s1 += tw * tx;
            s0 += w[i] * x[i];
            sc += fabs(w[i] * x[i]);
        }
        worst = fabs(s1 - s0) / sc > worst ? fabs(s1 - s0) / sc : worst;
    }
    CHECK(worst < 1e-10);
    /* balanced: T G_x' T^T == T^-T G_w' T^-1 (damped Grams), with equal diagonal entries */
    damped(n, gx, a);
    matmul(n, t, a, b);
    transpose(n, t, c);
    matmul(n, b, c, d); /* d = T Gx T^T */
    damped(n, gw, a);
    matmul(n, tit, a, b);
    transpose(n, tit, c);
    matmul(n, b, c, e); /* e = T^-T Gw T^-1 */
    double scale = max_abs(nn, d), diff = 0, mean = 0;
    for (size_t i = 0; i < nn; i++) diff = fabs(d[i] - e[i]) > diff ? fabs(d[i] - e[i]) : diff;
    CHECK(diff < 1e-9 * scale);
    for (int i = 0; i < n; i++) mean += d[i * n + i] / n;
    for (int i = 0; i < n; i++) CHECK_NEAR(d[i * n + i], mean, 1e-9 * mean);
    CHECK(gain >= 1.0 - 1e-12);
    free(a), free(b), free(c), free(d), free(e);
}

static void test_reference_agreement(void) {
    double t[64], tit[64], h[64], pc[64], pr[64], qc[64], qr[64];
    wk_wush_block_info info;
    char err[WK_ERRMSG_LEN] = "";
    CHECK_EQ_INT(wk_wush_block(8, REF_GW, REF_GX, WK_WUSH_DAMP, t, tit, &info, err), WK_OK);
    CHECK_NEAR(info.gain, REF_GAIN, 1e-12 * REF_GAIN);
    /* eigenvector signs are a convention (ours canonical, numpy's whatever dsyevd gives): rows
     * of H T = L^(-1/4) U^T W'^T must agree up to one sign per row, shared with H T^-T */
    wk_hadamard(8, h);
    matmul(8, h, t, pc);
    matmul(8, h, REF_T, pr);
    matmul(8, h, tit, qc);
    matmul(8, h, REF_TINVT, qr);
    double worst = 0;
    int flipped = 0;
    for (int k = 0; k < 8; k++) {
        double dot = 0;
        for (int j = 0; j < 8; j++) dot += pc[k * 8 + j] * pr[k * 8 + j];
        double s = dot < 0 ? -1 : 1;
        flipped += dot < 0;
        for (int j = 0; j < 8; j++) {
            worst = fmax(worst, fabs(pc[k * 8 + j] - s * pr[k * 8 + j]));
            worst = fmax(worst, fabs(qc[k * 8 + j] - s * qr[k * 8 + j]));
        }
    }
    printf("reference agreement (d=8): max |diff| %.3g after %d eigenvector sign flips; gain %.6f (ref %.6f)\n",
           worst, flipped, info.gain, REF_GAIN);
    CHECK(worst < 1e-10);
    check_wush_properties(8, REF_GW, REF_GX, t, tit, info.gain);
}

static void test_random_blocks(void) {
    rng_seed(42);
    for (int n = 2; n <= 128; n *= 2) {
        size_t nn = (size_t)n * n;
        double *gw = malloc(nn * sizeof *gw), *gx = malloc(nn * sizeof *gx), *t = malloc(nn * sizeof *t),
               *tit = malloc(nn * sizeof *tit);
        random_gram(n, gw);
        random_gram(n, gx);
        wk_wush_block_info info;
        CHECK_EQ_INT(wk_wush_block(n, gw, gx, WK_WUSH_DAMP, t, tit, &info, NULL), WK_OK);
        check_wush_properties(n, gw, gx, t, tit, info.gain);
        /* swapping the roles gives the inverse-transpose pair the other way round only up to H
         * and signs, but the gain is symmetric in (G_w, G_x) */
        wk_wush_block_info sw;
        CHECK_EQ_INT(wk_wush_block(n, gx, gw, WK_WUSH_DAMP, NULL, NULL, &sw, NULL), WK_OK);
        CHECK_NEAR(sw.gain, info.gain, 1e-9 * info.gain);
        printf("random Grams n=%3d: predicted gain %.3f\n", n, info.gain);
        free(gw), free(gx), free(t), free(tit);
    }
}

static void test_gain_values(void) {
    /* identical isotropic Grams: nothing to gain */
    double i2[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, g;
    CHECK_EQ_INT(wk_wush_predicted_gain(4, 4, i2, i2, WK_WUSH_DAMP, &g, NULL), WK_OK);
    CHECK_NEAR(g, 1.0, 1e-12);
    /* n = 2, G_w = I, G_x = diag(4, 0): damped G_w = 1.01 I, G_x = diag(4.02, 0.02);
     * s = sqrt(1.01) (sqrt(4.02), sqrt(0.02)); gain = 4.04 * 2.02 / (1.01 (sqrt 4.02 + sqrt 0.02)^2) */
    double gw[4] = {1, 0, 0, 1}, gx[4] = {4, 0, 0, 0};
    double want = 4.04 * 2.02 / (1.01 * pow(sqrt(4.02) + sqrt(0.02), 2));
    CHECK_EQ_INT(wk_wush_predicted_gain(2, 2, gw, gx, WK_WUSH_DAMP, &g, NULL), WK_OK);
    CHECK_NEAR(g, want, 1e-12);
    printf("gain for G_w = I, G_x = diag(4, 0): %.6f (hand: %.6f)\n", g, want);
    /* refusals, with a message */
    char err[WK_ERRMSG_LEN] = "";
    double z[9] = {0}, t[9], tit[9];
    CHECK_EQ_INT(wk_wush_block(3, z, z, WK_WUSH_DAMP, t, tit, NULL, err), WK_ERR_INVALID);
    CHECK(strstr(err, "power of two") != NULL);
    double z4[4] = {0};
    CHECK_EQ_INT(wk_wush_block(2, z4, gx, WK_WUSH_DAMP, t, tit, NULL, err), WK_ERR_INVALID);
    CHECK(strstr(err, "trace") != NULL);
    double neg[4] = {1, 2, 2, 1}; /* eigenvalues 3, -1: indefinite even after damping */
    CHECK_EQ_INT(wk_wush_block(2, neg, gx, WK_WUSH_DAMP, t, tit, NULL, err), WK_ERR_INVALID);
    CHECK(strstr(err, "positive definite") != NULL);
    CHECK_EQ_INT(wk_wush_blockdiag(48, 32, gx, gx, WK_WUSH_DAMP, t, tit, NULL, NULL, err), WK_ERR_INVALID);
    CHECK_EQ_INT(wk_wush_blockdiag(48, 24, gx, gx, WK_WUSH_DAMP, t, tit, NULL, NULL, err), WK_ERR_INVALID);
}

/* Block-diagonal construction: each block equals WUSH on the diagonal blocks of the full Grams,
 * and the aggregate gain combines them as documented. */
static void test_blockdiag(void) {
    rng_seed(9);
    const int D = 64, B = 16, nb = D / B;
    double *fw = malloc(sizeof(double) * D * D), *fx = malloc(sizeof(double) * D * D);
    random_gram(D, fw);
    random_gram(D, fx);
    double bw[64 * 16], bx[64 * 16], t[64 * 16], tit[64 * 16], t1[256], tit1[256], gain;
    wk_blocks_from_full(D, B, fw, bw);
    wk_blocks_from_full(D, B, fx, bx);
    CHECK_NEAR(bw[1 * B * B + 2 * B + 3], fw[(B + 2) * D + B + 3], 0);
    wk_wush_block_info info[4];
    CHECK_EQ_INT(wk_wush_blockdiag(D, B, bw, bx, WK_WUSH_DAMP, t, tit, info, &gain, NULL), WK_OK);
    double num = 0, den = 0;
    for (int k = 0; k < nb; k++) {
        wk_wush_block_info one;
        CHECK_EQ_INT(wk_wush_block(B, bw + k * B * B, bx + k * B * B, WK_WUSH_DAMP, t1, tit1, &one, NULL), WK_OK);
        CHECK(memcmp(t1, t + k * B * B, sizeof t1) == 0);
        CHECK(memcmp(tit1, tit + k * B * B, sizeof tit1) == 0);
        CHECK_NEAR(one.gain, info[k].gain, 0);
        check_wush_properties(B, bw + k * B * B, bx + k * B * B, t1, tit1, one.gain);
        num += one.trace_x * one.trace_w;
        den += one.sum_s * one.sum_s;
    }
    CHECK_NEAR(gain, num / den, 1e-12 * gain);
    /* apply: block structure (block 2 of y depends only on block 2 of x) and exact scores */
    float x[64], w[64], tx[64], tw[64];
    for (int i = 0; i < D; i++) x[i] = (float)rng_gauss(), w[i] = (float)rng_gauss();
    wk_xform_apply(D, B, t, x, tx);
    wk_xform_apply(D, B, tit, w, tw);
    double s0 = 0, s1 = 0, sc = 0;
    for (int i = 0; i < D; i++) s0 += (double)x[i] * w[i], s1 += (double)tx[i] * tw[i], sc += fabs((double)x[i] * w[i]);
    CHECK(fabs(s1 - s0) < 1e-5 * sc);
    float x2[64], tx2[64];
    memcpy(x2, x, sizeof x);
    x2[5] += 1.0f; /* block 0 */
    wk_xform_apply(D, B, t, x2, tx2);
    CHECK(memcmp(tx + B, tx2 + B, sizeof(float) * (size_t)(D - B)) == 0);
    float tf[64 * 16], ty[64];
    for (int i = 0; i < 64 * 16; i++) tf[i] = (float)t[i];
    wk_xform_apply_f32(D, B, tf, x, ty);
    for (int i = 0; i < D; i++) CHECK_NEAR(ty[i], tx[i], 1e-4 * (1 + fabs(tx[i])));
    free(fw), free(fx);
}

static void test_moments(void) {
    rng_seed(3);
    const int D = 32, N = 500;
    float v[500][32];
    double w[500];
    for (int n = 0; n < N; n++) {
        w[n] = rng_unit() * 2;
        for (int i = 0; i < D; i++) v[n][i] = (float)(rng_gauss() * (1 + i % 4) + (i == 3 ? 2.0 : 0.0));
    }
    wk_moments full, blk, a, b;
    CHECK_EQ_INT(wk_moments_init(&full, D, D), WK_OK);
    CHECK_EQ_INT(wk_moments_init(&blk, D, 8), WK_OK);
    CHECK_EQ_INT(wk_moments_init(&a, D, 8), WK_OK);
    CHECK_EQ_INT(wk_moments_init(&b, D, 8), WK_OK);
    wk_moments bad;
    CHECK_EQ_INT(wk_moments_init(&bad, D, 7), WK_ERR_INVALID);
    double g[32 * 32], gb[32 * 8], expect[32 * 32] = {0};
    CHECK(!wk_moments_mean(&full, g)); /* nothing added yet */
    wk_moments_add_rows(&full, &v[0][0], N, D);
    for (int n = 0; n < N; n++) {
        wk_moments_add_weighted(&blk, v[n], w[n]);
        wk_moments_add_weighted(n % 2 ? &a : &b, v[n], w[n]);
    }
    CHECK_EQ_INT(wk_moments_merge(&a, &b), WK_OK);
    CHECK_EQ_INT(wk_moments_merge(&a, &full), WK_ERR_INVALID);
    CHECK_EQ_INT(full.count, N);
    CHECK(wk_moments_mean(&full, g));
    for (int n = 0; n < N; n++)
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++) expect[i * D + j] += (double)v[n][i] * v[n][j] / N;
    double worst = 0;
    for (int i = 0; i < D * D; i++) worst = fmax(worst, fabs(g[i] - expect[i]));
    CHECK(worst < 1e-12 * max_abs(D * D, expect));
    /* weighted, block-diagonal: block k entry (i, j) = sum w v_i v_j / sum w; merge of halves equal */
    double sw = 0, gm[32 * 8];
    for (int n = 0; n < N; n++) sw += w[n];
    CHECK(wk_moments_mean(&blk, gb));
    CHECK(wk_moments_mean(&a, gm));
    CHECK_NEAR(blk.weight, sw, 1e-9);
    worst = 0;
    double worst_merge = 0;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 8; j++) {
                double e = 0;
                for (int n = 0; n < N; n++) e += w[n] * (double)v[n][k * 8 + i] * v[n][k * 8 + j];
                worst = fmax(worst, fabs(gb[(k * 8 + i) * 8 + j] - e / sw));
                worst_merge = fmax(worst_merge, fabs(gm[(k * 8 + i) * 8 + j] - gb[(k * 8 + i) * 8 + j]));
            }
    CHECK(worst < 1e-12 * 20);
    CHECK(worst_merge < 1e-12 * 20);
    wk_moments_reset(&full);
    CHECK(!wk_moments_mean(&full, g));
    wk_moments_free(&full), wk_moments_free(&blk), wk_moments_free(&a), wk_moments_free(&b);
}

static void test_hadamard(void) {
    double h[64 * 64], c[64 * 64];
    CHECK_EQ_INT(wk_hadamard(64, h), WK_OK);
    CHECK_EQ_INT(wk_hadamard(48, h), WK_ERR_INVALID);
    matmul(64, h, h, c); /* symmetric and orthogonal: H H = I */
    for (int i = 0; i < 64; i++) c[i * 64 + i] -= 1;
    CHECK(max_abs(64 * 64, c) < 1e-14);
    CHECK_NEAR(h[0], 0.125, 0);
    CHECK_NEAR(h[1 * 64 + 1], -0.125, 0); /* Sylvester order: [[H, H], [H, -H]] */
    CHECK_NEAR(h[32 * 64 + 32], -0.125, 0);
    CHECK_NEAR(h[32 * 64 + 31], 0.125, 0);
    double t1[64 * 64], t2[64 * 64], t3[64 * 64];
    CHECK_EQ_INT(wk_hadamard_signed(64, 64, 7, t1), WK_OK);
    CHECK_EQ_INT(wk_hadamard_signed(64, 64, 7, t2), WK_OK);
    CHECK_EQ_INT(wk_hadamard_signed(64, 64, 8, t3), WK_OK);
    CHECK(memcmp(t1, t2, sizeof t1) == 0);
    CHECK(memcmp(t1, t3, sizeof t1) != 0);
    double tt[64 * 64];
    transpose(64, t1, tt);
    matmul(64, tt, t1, c); /* orthogonal, so T^-T = T */
    for (int i = 0; i < 64; i++) c[i * 64 + i] -= 1;
    CHECK(max_abs(64 * 64, c) < 1e-14);
    int neg = 0;
    for (int j = 0; j < 64; j++) { /* column j = H column j times one sign */
        double s = t1[j] / h[j];
        CHECK(s == 1.0 || s == -1.0);
        neg += s < 0;
        for (int i = 0; i < 64; i++) CHECK(t1[i * 64 + j] == s * h[i * 64 + j]);
    }
    CHECK(neg > 10 && neg < 54);
    /* block 32: two independent 32 x 32 blocks, signs continuing the same stream */
    double b[2 * 32 * 32], h32[32 * 32];
    CHECK_EQ_INT(wk_hadamard_signed(64, 32, 7, b), WK_OK);
    wk_hadamard(32, h32);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 32; j++) {
            double s = b[k * 1024 + j] / h32[j];
            CHECK(s == (t1[k * 32 + j] / h[k * 32 + j])); /* same sign sequence as the dense one */
        }
}

/* ---- the reference selftest's synthetic experiment, in C ---- */

typedef struct {
    const char *name;
    int block;
    double *t, *tit; /* compact blocks; NULL = identity */
} xform;

static void test_synthetic(void) {
    enum { d = 64, n = 20000 };
    rng_seed(0);
    double kscale[d], qm[d * d], tau[d];
    for (int i = 0; i < d; i++) kscale[i] = 1;
    kscale[3] = kscale[4] = 12, kscale[17] = 6, kscale[40] = 8;
    for (int i = 0; i < d * d; i++) qm[i] = rng_gauss();
    CHECK_EQ_INT(LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, d, d, qm, d, tau), 0);
    CHECK_EQ_INT(LAPACKE_dorgqr(LAPACK_ROW_MAJOR, d, d, d, qm, d, tau), 0); /* random orthogonal */
    float *k = malloc(sizeof(float) * n * d), *q = malloc(sizeof(float) * n * d);
    double *s0 = malloc(sizeof(double) * n), z[d];
    double ms0 = 0;
    for (int r = 0; r < n; r++) {
        /* k = z1 diag(kscale) Q * 0.3 + z2 * kscale; q = z3 diag(linspace(0.2, 3, d)) */
        for (int l = 0; l < d; l++) z[l] = rng_gauss() * kscale[l];
        for (int j = 0; j < d; j++) {
            double s = 0;
            for (int l = 0; l < d; l++) s += z[l] * qm[l * d + j];
            k[r * d + j] = (float)(0.3 * s + rng_gauss() * kscale[j]);
        }
        for (int j = 0; j < d; j++) q[r * d + j] = (float)(rng_gauss() * (0.2 + 2.8 * j / (d - 1)));
        double s = 0;
        for (int j = 0; j < d; j++) s += (double)q[r * d + j] * k[r * d + j];
        s0[r] = s;
        ms0 += s * s / n;
    }
    wk_moments mk, mq;
    wk_moments_init(&mk, d, d);
    wk_moments_init(&mq, d, d);
    wk_moments_add_rows(&mk, k, n, d);
    wk_moments_add_rows(&mq, q, n, d);
    double *gk = malloc(sizeof(double) * d * d), *gq = malloc(sizeof(double) * d * d);
    double gk32[2 * 32 * 32], gq32[2 * 32 * 32];
    wk_moments_mean(&mk, gk);
    wk_moments_mean(&mq, gq);
    wk_blocks_from_full(d, 32, gk, gk32);
    wk_blocks_from_full(d, 32, gq, gq32);

    static double h64[d * d], h32[d * 32], w64[d * d], wi64[d * d], w32[d * 32], wi32[d * 32];
    double gain64, gain32;
    wk_hadamard_signed(d, d, 1, h64);
    wk_hadamard_signed(d, 32, 1, h32);
    CHECK_EQ_INT(wk_wush_blockdiag(d, d, gq, gk, WK_WUSH_DAMP, w64, wi64, NULL, &gain64, NULL), WK_OK);
    CHECK_EQ_INT(wk_wush_blockdiag(d, 32, gq32, gk32, WK_WUSH_DAMP, w32, wi32, NULL, &gain32, NULL), WK_OK);
    printf("synthetic keys (d=64, n=20000): predicted gain of WUSH over orthogonal transforms: dense %.2fx "
           "(reference selftest: 4.49x), block 32: %.2fx\n", gain64, gain32);
    CHECK_NEAR(gain64, 4.49, 0.15 * 4.49);

    const xform xs[5] = {{"none", d, NULL, NULL},
                         {"hadamard", d, h64, h64},
                         {"wush", d, w64, wi64},
                         {"hadamard/32", 32, h32, h32},
                         {"wush/32", 32, w32, wi32}};
    const wk_kvq_kind kinds[3] = {WK_KVQ_QUEST, WK_KVQ_ABSMAX, WK_KVQ_PERCENTILE};
    const double ref[3][3] = {{0.3594, 0.2254, 0.0626}, {2.0224, 0.3925, 0.1056}, {0.3524, 0.2916, 0.0695}};
    double rel[5][3];
    float *kt = malloc(sizeof(float) * n * d), *qt = malloc(sizeof(float) * n * d);
    printf("relative score MSE, 2-bit, group 32 (C; reference selftest in brackets; the reference's\n"
           "percentile clips per 64-wide row, ours per 32-group; /32 = transform block 32):\n");
    for (int x = 0; x < 5; x++) {
        double exact_err = 0;
        for (int r = 0; r < n; r++) {
            if (xs[x].t) {
                wk_xform_apply(d, xs[x].block, xs[x].t, k + r * d, kt + r * d);
                wk_xform_apply(d, xs[x].block, xs[x].tit, q + r * d, qt + r * d);
            } else {
                memcpy(kt + r * d, k + r * d, sizeof(float) * d);
                memcpy(qt + r * d, q + r * d, sizeof(float) * d);
            }
            double s = 0;
            for (int j = 0; j < d; j++) s += (double)qt[r * d + j] * kt[r * d + j];
            exact_err += (s - s0[r]) * (s - s0[r]) / n;
        }
        CHECK(exact_err < 1e-9 * ms0); /* transform alone: scores unchanged up to float rounding */
        for (int c = 0; c < 3; c++) {
            double e2 = 0;
            float y[d];
            uint8_t buf[64];
            for (int r = 0; r < n; r++) {
                for (int g = 0; g < d; g += 32) {
                    wk_kvq_encode(kinds[c], 2, 32, WK_KVQ_RHO_K, kt + r * d + g, buf);
                    wk_kvq_decode(kinds[c], 2, 32, buf, y + g);
                }
                double s = 0;
                for (int j = 0; j < d; j++) s += (double)qt[r * d + j] * y[j];
                e2 += (s - s0[r]) * (s - s0[r]) / n;
            }
            rel[x][c] = e2 / ms0;
        }
    }
    for (int x = 0; x < 5; x++) {
        printf("  %-12s", xs[x].name);
        for (int c = 0; c < 3; c++) {
            printf(" %s %.4f", wk_kvq_kind_name(kinds[c]), rel[x][c]);
            if (x < 3) printf(" [%.4f]", ref[c][x]);
        }
        printf("\n");
    }
    /* the shape the design expects: WUSH < Hadamard < none for QuEST, within ~25% of the reference
     * (different random draws of the same distributions) */
    CHECK(rel[2][0] < rel[1][0] && rel[1][0] < rel[0][0]);
    CHECK(rel[4][0] < rel[3][0] && rel[3][0] < rel[0][0]);
    for (int x = 0; x < 3; x++) {
        CHECK_NEAR(rel[x][0], ref[0][x], 0.25 * ref[0][x]);
        CHECK_NEAR(rel[x][1], ref[1][x], 0.25 * ref[1][x]);
    }
    for (int c = 0; c < 3; c++) CHECK(rel[2][c] < rel[0][c] && rel[2][c] < rel[1][c]);
    wk_moments_free(&mk), wk_moments_free(&mq);
    free(k), free(q), free(s0), free(gk), free(gq), free(kt), free(qt);
}

int main(void) {
    test_hadamard();
    test_moments();
    test_gain_values();
    test_reference_agreement();
    test_random_blocks();
    test_blockdiag();
    test_synthetic();
    TEST_MAIN_END();
}
