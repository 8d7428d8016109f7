/* KV quantizer tests: each format against an independent re-statement of its rule in double
 * precision, hand-made groups, packing of every bit width, group and slab round trips,
 * bits/element, and Gaussian MSE against the numpy reference (docs/design.md appendix A). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_quant.h"
#include "model/quant.h"
#include "test_rng.h"
#include "test_util.h"

static const int GROUPS[5] = {16, 32, 64, 128, 256};
static const wk_kvq_kind KINDS[3] = {WK_KVQ_QUEST, WK_KVQ_PERCENTILE, WK_KVQ_ABSMAX};

/* ---- the documented rules, restated in double (independent of kv_quant.c's tricks) ---- */

/* Nearest f16 to a positive real, by scanning neighbours of a guess (ties cannot occur here). */
static uint16_t nearest_f16(double v) {
    if (v <= 0) return 0;
    uint16_t g = wk_f32_to_f16((float)v), best = 0;
    double bd = INFINITY;
    for (int d = -2; d <= 2; d++) {
        int h = (int)g + d;
        if (h < 0 || h > 0x7BFF) continue;
        double e = fabs(wk_f16_to_f32((uint16_t)h) - v);
        if (e < bd) {
            bd = e;
            best = (uint16_t)h;
        }
    }
    return best;
}

static void model_group(wk_kvq_kind kind, int bits, int G, float rho, const float *x, uint8_t *codes,
                        uint16_t *params) {
    int L = 1 << bits;
    if (kind == WK_KVQ_PERCENTILE) {
        double a[256];
        for (int i = 0; i < G; i++) a[i] = fabs(x[i]);
        for (int i = 1; i < G; i++) /* insertion sort */
            for (int j = i; j > 0 && a[j - 1] > a[j]; j--) {
                double t = a[j];
                a[j] = a[j - 1];
                a[j - 1] = t;
            }
        int r = (int)floor((double)rho * G);
        float t = (float)a[r > G - 1 ? G - 1 : r], lo = INFINITY, hi = -INFINITY, xc[256];
        for (int i = 0; i < G; i++) {
            xc[i] = x[i] < -t ? -t : (x[i] > t ? t : x[i]);
            lo = xc[i] < lo ? xc[i] : lo;
            hi = xc[i] > hi ? xc[i] : hi;
        }
        params[0] = wk_f32_to_f16((hi - lo) * WK_KVQ_PCT_C[bits]);
        params[1] = wk_f32_to_f16(lo + 0.0f);
        double s = wk_f16_to_f32(params[0]);
        float mn = wk_f16_to_f32(params[1]);
        for (int i = 0; i < G; i++) {
            double u = s > 0 ? floor((double)(float)(xc[i] - mn) / s + 0.5) : 0;
            codes[i] = (uint8_t)(u < 0 ? 0 : (u > L - 1 ? L - 1 : u));
        }
        return;
    }
    if (kind == WK_KVQ_QUEST) {
        float a[256];
        for (int i = 0; i < G; i++) a[i] = x[i] * x[i];
        for (int h = G / 2; h >= 1; h /= 2)
            for (int i = 0; i < h; i++) a[i] += a[i + h];
        float v2 = WK_KVQ_QUEST_C2[bits] * (a[0] / (float)G);
        params[0] = nearest_f16(sqrt((double)v2));
    } else {
        float amax = 0;
        for (int i = 0; i < G; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        params[0] = wk_f32_to_f16(amax * WK_KVQ_ABSMAX_C[bits]);
    }
    double step = wk_f16_to_f32(params[0]);
    for (int i = 0; i < G; i++) {
        double q = step > 0 ? floor(x[i] / step) : 0;
        q = q < -L / 2 ? -L / 2 : (q > L / 2 - 1 ? L / 2 - 1 : q);
        codes[i] = (uint8_t)(q + L / 2);
    }
}

static void fill_group(int G, int mode, float *x) {
    for (int i = 0; i < G; i++) {
        double v = rng_gauss();
        if (mode == 1 && i % 7 == 3) v *= 40; /* outliers */
        if (mode == 2) v = (double)((int)(rng_u64() % 9) - 4); /* integers: many ties */
        if (mode == 3) v *= 1e-3;
        x[i] = (float)v;
    }
}

static void test_against_model(void) {
    rng_seed(11);
    int mismatches = 0, total = 0;
    for (int k = 0; k < 3; k++)
        for (int bits = 2; bits <= 4; bits++)
            for (int gi = 0; gi < 5; gi++)
                for (int trial = 0; trial < 40; trial++) {
                    int G = GROUPS[gi];
                    float x[256];
                    fill_group(G, trial % 4, x);
                    uint8_t c1[256], c2[256];
                    uint16_t p1[2] = {0, 0}, p2[2] = {0, 0};
                    wk_kvq_quantize_group(KINDS[k], bits, G, WK_KVQ_RHO_K, x, c1, p1);
                    model_group(KINDS[k], bits, G, WK_KVQ_RHO_K, x, c2, p2);
                    total++;
                    if (memcmp(c1, c2, (size_t)G) || p1[0] != p2[0] || p1[1] != p2[1]) {
                        if (mismatches++ < 5)
                            fprintf(stderr, "mismatch %s b=%d G=%d trial %d: params %04x/%04x vs %04x/%04x\n",
                                    wk_kvq_kind_name(KINDS[k]), bits, G, trial, p1[0], p1[1], p2[0], p2[1]);
                    }
                }
    CHECK_EQ_INT(mismatches, 0);
    printf("rule re-statement: %d groups, %d mismatches\n", total, mismatches);
}

/* Elements exactly on a code's threshold k * step and one float either side of it, for the
 * symmetric formats (QuEST, absmax) at every bit width and k across the codes' range and past it:
 * a group's other elements set its step, the probes are moved onto the thresholds of the step
 * they give until it stops changing, then the codes are the rule's (floor(x / step) in double). */
static void test_thresholds(void) {
    rng_seed(29);
    enum { G = 64, PROBES = 9 };
    int cases = 0, mismatches = 0;
    for (int k = 0; k < 3; k++) {
        if (KINDS[k] == WK_KVQ_PERCENTILE) continue;
        for (int bits = 2; bits <= 4; bits++)
            for (int t = -(1 << (bits - 1)) - 1; t <= (1 << (bits - 1)) + 1; t++)
                for (int trial = 0; trial < 4; trial++) {
                    float x[G];
                    fill_group(G, 0, x);
                    uint8_t c1[G], c2[G];
                    uint16_t p1[2] = {0, 0}, p2[2] = {0, 0};
                    float step = 0;
                    for (int it = 0; it < 8; it++) {
                        wk_kvq_quantize_group(KINDS[k], bits, G, WK_KVQ_RHO_K, x, c1, p1);
                        if (wk_f16_to_f32(p1[0]) == step) break;
                        step = wk_f16_to_f32(p1[0]);
                        /* thresholds t-1, t, t+1 (exact products), each with its two neighbours */
                        for (int p = 0; p < PROBES; p++) {
                            const float at = (float)(t - 1 + p / 3) * step;
                            x[p] = p % 3 == 0 ? at : nextafterf(at, p % 3 == 1 ? -INFINITY : INFINITY);
                        }
                    }
                    wk_kvq_quantize_group(KINDS[k], bits, G, WK_KVQ_RHO_K, x, c1, p1);
                    if (wk_f16_to_f32(p1[0]) != step) continue; /* never settled: not a threshold case */
                    model_group(KINDS[k], bits, G, WK_KVQ_RHO_K, x, c2, p2);
                    cases++;
                    mismatches += memcmp(c1, c2, G) != 0 || p1[0] != p2[0];
                }
    }
    printf("thresholds: %d groups with elements on and beside them, %d mismatches\n", cases, mismatches);
    CHECK(cases >= 100);
    CHECK_EQ_INT(mismatches, 0);
}

/* The QuEST step is the f16 nearest to the exact sqrt(v2), ties to even, even where sqrtf's f32
 * result would round to the other side of an f16 midpoint. A group of 16 equal values c has
 * S = 16*fl(c*c) exactly, so v2 = fl(C2 * fl(c*c)); choose c so that sqrt(v2) lands within a few
 * f32 ulps of f16 midpoints. */
static void test_quest_step_rounding(void) {
    int bad = 0, naive_wrong = 0, ties = 0, cases = 0;
    for (int h = 0x0400; h < 0x7BFE; h += 7) {
        double lo = wk_f16_to_f32((uint16_t)h), hi = wk_f16_to_f32((uint16_t)(h + 1)), mid = (lo + hi) / 2;
        float c0 = (float)sqrt(mid * mid / WK_KVQ_QUEST_C2[2]);
        for (int d = -6; d <= 6; d++) {
            float c = c0;
            for (int s = 0; s < abs(d); s++) c = nextafterf(c, d < 0 ? 0.0f : INFINITY);
            float x[16];
            for (int i = 0; i < 16; i++) x[i] = c;
            uint8_t codes[16];
            uint16_t p = 0;
            wk_kvq_quantize_group(WK_KVQ_QUEST, 2, 16, 0, x, codes, &p);
            float v2 = WK_KVQ_QUEST_C2[2] * (c * c);
            double r = sqrt((double)v2);
            uint16_t want;
            if ((double)v2 == mid * mid) {
                want = (uint16_t)(h & 1 ? h + 1 : h);
                ties++;
            } else {
                want = nearest_f16(r);
            }
            cases++;
            if (p != want) bad++;
            if (wk_f32_to_f16(sqrtf(v2)) != want) naive_wrong++;
        }
    }
    printf("quest step rounding: %d cases near f16 midpoints, %d exact ties, %d where f16(sqrtf) would be wrong, "
           "%d wrong\n", cases, ties, naive_wrong, bad);
    CHECK_EQ_INT(bad, 0);
}

static void test_hand_made(void) {
    /* 31 integers -15..15 and one outlier 1000, G = 32, 2 bits */
    float x[32], y[32];
    for (int i = 0; i < 31; i++) x[i] = (float)(i - 15);
    x[31] = 1000.0f;
    uint8_t buf[64];

    /* percentile: rank floor(0.96*32) = 30 of sorted |x| (0,1,1,..,15,15,1000) is 15: the outlier
     * is clipped to 15, lo = -15, hi = 15, scale = 10, levels -15 -5 5 15 */
    CHECK_EQ_INT(wk_kvq_percentile_rank(0.96f, 32), 30);
    CHECK_EQ_INT(wk_kvq_percentile_rank(0.92f, 32), 29);
    CHECK_EQ_INT(wk_kvq_percentile_rank(0.96f, 16), 15); /* no clipping at G = 16 */
    CHECK_EQ_INT(wk_kvq_percentile_rank(1.0f, 64), 63);
    CHECK_EQ_INT(wk_kvq_percentile_rank(0.0f, 64), 0);
    wk_kvq_encode(WK_KVQ_PERCENTILE, 2, 32, 0.96f, x, buf);
    CHECK_EQ_INT(buf[8] | buf[9] << 8, wk_f32_to_f16(10.0f));
    CHECK_EQ_INT(buf[10] | buf[11] << 8, wk_f32_to_f16(-15.0f));
    wk_kvq_decode(WK_KVQ_PERCENTILE, 2, 32, buf, y);
    CHECK_NEAR(y[0], -15, 0);   /* -15 */
    CHECK_NEAR(y[5], -5, 0);    /* -10: exactly between -15 and -5, rounds up */
    CHECK_NEAR(y[4], -15, 0);   /* -11 */
    CHECK_NEAR(y[15], 5, 0);    /* 0: between -5 and 5, d = 15 = 1.5*scale, rounds up */
    CHECK_NEAR(y[30], 15, 0);   /* 15 */
    CHECK_NEAR(y[31], 15, 0);   /* 1000 clipped */
    /* with rho = 1 nothing is clipped: range -15..1000, the small values all collapse */
    wk_kvq_encode(WK_KVQ_PERCENTILE, 2, 32, 1.0f, x, buf);
    wk_kvq_decode(WK_KVQ_PERCENTILE, 2, 32, buf, y);
    CHECK_NEAR(y[31], 1000, 1.0);
    CHECK_NEAR(y[0], -15, 0.01);
    CHECK_NEAR(y[30], -15, 0.01);

    /* absmax: step = f16(1000*2/3) = 666.5, levels +-333.25, +-999.75: the outlier survives, every
     * small value becomes +-333.25 (why it is the baseline) */
    wk_kvq_encode(WK_KVQ_ABSMAX, 2, 32, 0, x, buf);
    CHECK_NEAR(wk_f16_to_f32((uint16_t)(buf[8] | buf[9] << 8)), 666.5, 0);
    wk_kvq_decode(WK_KVQ_ABSMAX, 2, 32, buf, y);
    CHECK_NEAR(y[31], 999.75, 0);
    CHECK_NEAR(y[0], -333.25, 0);
    CHECK_NEAR(y[20], 333.25, 0);
    CHECK_NEAR(y[15], 333.25, 0); /* 0 -> floor(0) = 0 -> +half step (mid-rise grid has no 0) */

    /* absmax at 4 bits on +-7.5 ramp: step = f16(7.5*2/15) = 1, levels k + 1/2 reproduce the ramp */
    float r[16], ry[16];
    for (int i = 0; i < 16; i++) r[i] = (float)i - 7.5f;
    wk_kvq_encode(WK_KVQ_ABSMAX, 4, 16, 0, r, buf);
    wk_kvq_decode(WK_KVQ_ABSMAX, 4, 16, buf, ry);
    for (int i = 0; i < 16; i++) CHECK_NEAR(ry[i], r[i], 0);

    /* QuEST on all-ones: rms 1, step = f16(2*1.493535/3) = f16 nearest 0.995690, code floor(1/step) = 1 */
    float ones[16], oy[16];
    for (int i = 0; i < 16; i++) ones[i] = 1.0f;
    wk_kvq_encode(WK_KVQ_QUEST, 2, 16, 0, ones, buf);
    uint16_t sh = (uint16_t)(buf[4] | buf[5] << 8);
    CHECK_EQ_INT(sh, nearest_f16(2 * 1.493535 / 3));
    wk_kvq_decode(WK_KVQ_QUEST, 2, 16, buf, oy);
    CHECK_NEAR(oy[0], 1.5 * wk_f16_to_f32(sh), 0);
    CHECK_NEAR(oy[0], 1.493535, 1e-3);
    /* QuEST on the outlier group: rms = sqrt((2*1240 + 1e6)/32) = 176.995; the outlier is clipped
     * to the top level 1.5*step (RMS clipping), small values go to +-step/2 */
    wk_kvq_encode(WK_KVQ_QUEST, 2, 32, 0, x, buf);
    wk_kvq_decode(WK_KVQ_QUEST, 2, 32, buf, y);
    double step = 2 * 1.493535 / 3 * sqrt((2 * 1240.0 + 1e6) / 32);
    CHECK_NEAR(y[31], 1.5 * step, 0.1);
    CHECK_NEAR(y[16], 0.5 * step, 0.05);
    CHECK_NEAR(y[14], -0.5 * step, 0.05);

    /* all-zero groups decode to exactly 0 in every format; a -0/+0 mix gives the same bytes */
    float z[32] = {0}, zy[32], nz[32];
    for (int i = 0; i < 32; i++) nz[i] = i % 2 ? -0.0f : 0.0f;
    for (int k = 0; k < 3; k++)
        for (int bits = 2; bits <= 4; bits++) {
            uint8_t b1[64], b2[64];
            wk_kvq_encode(KINDS[k], bits, 32, 0.9f, z, b1);
            wk_kvq_encode(KINDS[k], bits, 32, 0.9f, nz, b2);
            CHECK(memcmp(b1, b2, wk_kvq_group_bytes(KINDS[k], bits, 32)) == 0);
            wk_kvq_decode(KINDS[k], bits, 32, b1, zy);
            for (int i = 0; i < 32; i++) CHECK(zy[i] == 0.0f);
        }
    /* huge values saturate the f16 scale instead of storing inf */
    float big[16];
    for (int i = 0; i < 16; i++) big[i] = i % 2 ? 1e6f : -1e6f;
    for (int k = 0; k < 3; k++) {
        float by[16];
        wk_kvq_encode(KINDS[k], 2, 16, 0.96f, big, buf);
        wk_kvq_decode(KINDS[k], 2, 16, buf, by);
        for (int i = 0; i < 16; i++) CHECK(isfinite(by[i]));
    }
}

static void test_packing(void) {
    /* known patterns */
    uint8_t s[64];
    const uint8_t c2[4] = {1, 2, 3, 0}, c4[2] = {0xA, 0x5};
    memset(s, 0, sizeof s);
    wk_kvq_pack(2, c2, 4, s, 0);
    CHECK_EQ_INT(s[0], 0x39);
    memset(s, 0, sizeof s);
    wk_kvq_pack(4, c4, 2, s, 0);
    CHECK_EQ_INT(s[0], 0x5A);
    /* b = 3: 32 codes i%8 fill exactly 3 u32 words; check with the shader's read formula */
    uint8_t c3[32];
    for (int i = 0; i < 32; i++) c3[i] = (uint8_t)((i * 5 + 3) % 8);
    memset(s, 0xFF, sizeof s);
    wk_kvq_pack(3, c3, 32, s, 0);
    uint32_t w[4];
    for (int k = 0; k < 4; k++) w[k] = (uint32_t)s[4 * k] | (uint32_t)s[4 * k + 1] << 8 |
                                       (uint32_t)s[4 * k + 2] << 16 | (uint32_t)s[4 * k + 3] << 24;
    CHECK_EQ_INT(w[3], 0xFFFFFFFFu); /* nothing written past 96 bits */
    for (int i = 0; i < 32; i++) {
        unsigned j = 3u * (unsigned)i, sh = j & 31, v = w[j >> 5] >> sh;
        if (sh > 29) v |= w[(j >> 5) + 1] << (32 - sh);
        CHECK_EQ_INT(v & 7u, c3[i]);
    }
    CHECK_EQ_INT(w[0] >> 30, c3[10] & 3); /* code 10 straddles words 0 and 1 */
    CHECK_EQ_INT(w[1] & 1u, c3[10] >> 2);

    /* random codes at random offsets over garbage: round trip, neighbours untouched */
    rng_seed(5);
    for (int bits = 2; bits <= 4; bits++)
        for (int trial = 0; trial < 200; trial++) {
            uint8_t st[200], orig[200], codes[300], out[300];
            for (int i = 0; i < 200; i++) st[i] = orig[i] = (uint8_t)rng_u64();
            size_t first = rng_u64() % 100, n = 1 + rng_u64() % 300;
            if ((first + n) * (size_t)bits > 200 * 8) n = 200 * 8 / (size_t)bits - first;
            for (size_t i = 0; i < n; i++) codes[i] = (uint8_t)(rng_u64() & ((1u << bits) - 1));
            wk_kvq_pack(bits, codes, n, st, first);
            wk_kvq_unpack(bits, st, first, n, out);
            CHECK(memcmp(codes, out, n) == 0);
            for (size_t j = 0; j < 200 * 8; j++) { /* bits outside [first*b, (first+n)*b) unchanged */
                if (j >= first * (size_t)bits && j < (first + n) * (size_t)bits) continue;
                if (((st[j / 8] ^ orig[j / 8]) >> (j % 8)) & 1) {
                    CHECK(!"pack touched a neighbouring bit");
                    break;
                }
            }
        }
}

static void test_sizes(void) {
    CHECK_NEAR(wk_kvq_bits_per_element(WK_KVQ_QUEST, 2, 32), 2.5, 0);
    CHECK_NEAR(wk_kvq_bits_per_element(WK_KVQ_ABSMAX, 2, 16), 3.0, 0);
    CHECK_NEAR(wk_kvq_bits_per_element(WK_KVQ_PERCENTILE, 2, 32), 3.0, 0);
    CHECK_NEAR(wk_kvq_bits_per_element(WK_KVQ_QUEST, 3, 64), 3.25, 0);
    CHECK_NEAR(wk_kvq_bits_per_element(WK_KVQ_PERCENTILE, 4, 128), 4.25, 0);
    CHECK_NEAR(wk_kvq_bits_per_element(WK_KVQ_QUEST, 4, 256), 4.0625, 0);
    CHECK_EQ_INT(wk_kvq_group_bytes(WK_KVQ_QUEST, 3, 16), 8);
    CHECK_EQ_INT(wk_kvq_group_bytes(WK_KVQ_PERCENTILE, 2, 32), 12);
    CHECK_EQ_INT(wk_kvq_group_bytes(WK_KVQ_ABSMAX, 4, 256), 130);
    for (int k = 0; k < 3; k++)
        for (int bits = 2; bits <= 4; bits++)
            for (int gi = 0; gi < 5; gi++)
                CHECK_NEAR(wk_kvq_bits_per_element(KINDS[k], bits, GROUPS[gi]) * GROUPS[gi],
                           8.0 * (double)wk_kvq_group_bytes(KINDS[k], bits, GROUPS[gi]), 0);
    CHECK(!wk_kvq_valid(WK_KVQ_QUEST, 1, 32));
    CHECK(!wk_kvq_valid(WK_KVQ_QUEST, 5, 32));
    CHECK(!wk_kvq_valid(WK_KVQ_QUEST, 2, 48));
    CHECK(!wk_kvq_valid((wk_kvq_kind)7, 2, 32));
    wk_kvq_block_layout l;
    CHECK(wk_kvq_block_layout_get(WK_KVQ_PERCENTILE, 3, 16, 128, 16, &l));
    CHECK_EQ_INT(l.code_bytes_per_token, 48);
    CHECK_EQ_INT(l.param_bytes_per_token, 32);
    CHECK_EQ_INT(l.params_offset, 768);
    CHECK_EQ_INT(l.bytes, 768 + 512);
    CHECK(!wk_kvq_block_layout_get(WK_KVQ_QUEST, 2, 64, 32, 16, &l));  /* G > D */
    CHECK(!wk_kvq_block_layout_get(WK_KVQ_QUEST, 3, 16, 16, 16, &l));  /* 48-bit tokens */
    CHECK(!wk_kvq_block_layout_get(WK_KVQ_QUEST, 2, 32, 96 + 16, 16, &l));
}

/* Group encode/decode == quantize/dequantize; slab tokens decode like their groups and land at
 * the documented offsets. */
static void test_round_trips(void) {
    rng_seed(7);
    for (int k = 0; k < 3; k++)
        for (int bits = 2; bits <= 4; bits++)
            for (int gi = 0; gi < 5; gi++) {
                int G = GROUPS[gi];
                float x[256], y1[256], y2[256];
                fill_group(G, 1, x);
                uint8_t buf[300], codes[256];
                uint16_t p[2] = {0, 0};
                wk_kvq_encode(KINDS[k], bits, G, WK_KVQ_RHO_V, x, buf);
                wk_kvq_decode(KINDS[k], bits, G, buf, y1);
                wk_kvq_quantize_group(KINDS[k], bits, G, WK_KVQ_RHO_V, x, codes, p);
                wk_kvq_dequantize_group(KINDS[k], bits, G, codes, p, y2);
                CHECK(memcmp(y1, y2, sizeof(float) * (size_t)G) == 0);
                /* decode(encode(decode(x))) is a fixed point for the symmetric formats */
                if (KINDS[k] != WK_KVQ_PERCENTILE) {
                    uint8_t buf2[300];
                    float y3[256];
                    wk_kvq_encode(KINDS[k], bits, G, 0, y1, buf2);
                    wk_kvq_decode(KINDS[k], bits, G, buf2, y3);
                    if (KINDS[k] == WK_KVQ_ABSMAX) CHECK(memcmp(y1, y3, sizeof(float) * (size_t)G) == 0);
                }

                const int D = 256, NT = 16;
                if (G > D) continue;
                wk_kvq_block_layout l;
                CHECK(wk_kvq_block_layout_get(KINDS[k], bits, G, D, NT, &l));
                uint8_t *slab = calloc(l.bytes, 1);
                float v[16][256], out[256], ref[256];
                for (int t = 0; t < NT; t++) {
                    fill_group(D, t % 3, v[t]);
                    wk_kvq_encode_token(KINDS[k], bits, G, WK_KVQ_RHO_K, D, NT, t, v[t], slab);
                }
                int P = wk_kvq_params_per_group(KINDS[k]);
                for (int t = 0; t < NT; t++) {
                    wk_kvq_decode_token(KINDS[k], bits, G, D, NT, t, slab, out);
                    for (int g = 0; g < D / G; g++) {
                        wk_kvq_quantize_group(KINDS[k], bits, G, WK_KVQ_RHO_K, v[t] + g * G, codes, p);
                        wk_kvq_dequantize_group(KINDS[k], bits, G, codes, p, ref + g * G);
                        /* codes at stream index t*D + g*G, params at (t*(D/G)+g)*P */
                        uint8_t got[256];
                        wk_kvq_unpack(bits, slab, (size_t)t * D + (size_t)g * G, (size_t)G, got);
                        CHECK(memcmp(got, codes, (size_t)G) == 0);
                        const uint8_t *pp = slab + l.params_offset + ((size_t)(t * (D / G) + g) * P) * 2;
                        CHECK_EQ_INT(pp[0] | pp[1] << 8, p[0]);
                    }
                    CHECK(memcmp(out, ref, sizeof(float) * D) == 0);
                }
                free(slab);
            }
}

/* Gaussian MSE per (bits, group, quantizer) against the reference. Literals from:
 *   python3 - <<'EOF'
 *   import numpy as np, wush_ref as r  # docs/design.md appendix A, saved as wush_ref.py
 *   rng = np.random.default_rng(1); z = rng.standard_normal(400000 * 32)
 *   for b in (2, 3, 4):
 *       for name, fn in (("quest", lambda x, g: r.quest(x, b, g)), ("absmax", lambda x, g: r.absmax(x, b, g)),
 *                        ("percentile", lambda x, g: r.percentile(x, b, g, 0.96))):
 *           print(b, name, [round(np.mean((fn(z.reshape(-1, g), g) - z.reshape(-1, g)) ** 2), 5)
 *                           for g in (16, 32, 64, 128, 256)])
 *   EOF
 * (the reference's percentile clips per row; with rows reshaped to one group it is per group,
 * as here). Known-sigma theory for QuEST (integral of the grid error against N(0,1), same
 * script with r._grid(x, alpha_b, b) on a fine grid): b=2 0.118846, b=3 0.037440, b=4 0.011543;
 * a group's own RMS adapts to the sample, so finite G is slightly below, approaching it as G grows. */
static const struct {
    int bits;
    wk_kvq_kind kind;
    double mse[5];
} REF_MSE[] = {
    {2, WK_KVQ_QUEST, {0.10687, 0.11274, 0.11578, 0.11734, 0.11812}},
    {2, WK_KVQ_ABSMAX, {0.15973, 0.20726, 0.25542, 0.30457, 0.35503}},
    {2, WK_KVQ_PERCENTILE, {0.10684, 0.13378, 0.15539, 0.15602, 0.15942}},
    {3, WK_KVQ_QUEST, {0.03233, 0.03465, 0.03598, 0.03672, 0.03709}},
    {3, WK_KVQ_ABSMAX, {0.02907, 0.03770, 0.04638, 0.05512, 0.06389}},
    {3, WK_KVQ_PERCENTILE, {0.01944, 0.03115, 0.03471, 0.03653, 0.03702}},
    {4, WK_KVQ_QUEST, {0.00977, 0.01046, 0.01095, 0.01124, 0.01140}},
    {4, WK_KVQ_ABSMAX, {0.00632, 0.00820, 0.01009, 0.01200, 0.01391}},
    {4, WK_KVQ_PERCENTILE, {0.00423, 0.01325, 0.01367, 0.01569, 0.01568}},
};
static const double QUEST_THEORY[5] = {0, 0, 0.118846, 0.037440, 0.011543};

static void test_gaussian_mse(void) {
    const size_t N = (size_t)1 << 19;
    float *z = malloc(N * sizeof *z), *y = malloc(N * sizeof *y);
    rng_seed(2024);
    for (size_t i = 0; i < N; i++) z[i] = (float)rng_gauss();
    uint8_t buf[300];
    printf("Gaussian MSE (sigma^2 = 1), C twin vs numpy reference, %zu samples:\n", N);
    for (size_t r = 0; r < sizeof REF_MSE / sizeof REF_MSE[0]; r++) {
        printf("  b=%d %-10s", REF_MSE[r].bits, wk_kvq_kind_name(REF_MSE[r].kind));
        for (int gi = 0; gi < 5; gi++) {
            int G = GROUPS[gi];
            double se = 0;
            for (size_t o = 0; o < N; o += (size_t)G) {
                wk_kvq_encode(REF_MSE[r].kind, REF_MSE[r].bits, G, 0.96f, z + o, buf);
                wk_kvq_decode(REF_MSE[r].kind, REF_MSE[r].bits, G, buf, y + o);
                for (int i = 0; i < G; i++) se += ((double)y[o + i] - z[o + i]) * ((double)y[o + i] - z[o + i]);
            }
            double mse = se / (double)N;
            printf("  G%d %.5f (ref %.5f)", G, mse, REF_MSE[r].mse[gi]);
            /* ~5 standard errors of two Monte Carlo estimates */
            CHECK_NEAR(mse, REF_MSE[r].mse[gi], 0.015 * REF_MSE[r].mse[gi]);
            if (REF_MSE[r].kind == WK_KVQ_QUEST && G == 256)
                CHECK_NEAR(mse, QUEST_THEORY[REF_MSE[r].bits], 0.02 * QUEST_THEORY[REF_MSE[r].bits]);
            if (REF_MSE[r].kind == WK_KVQ_QUEST && REF_MSE[r].bits == 2 && G == 32)
                CHECK_NEAR(mse, 0.1188, 0.01); /* the reference selftest's own assertion */
        }
        printf("\n");
    }
    free(z);
    free(y);
}

/* QuEST's clip: the constant is (clip * 2 * alpha_b / (L - 1))^2 (checked against that formula in
 * double, to a few f32 ulps: a constant scaled by clip instead of clip^2 fails by far), clip 1 and
 * 0 give the unclipped constant exactly, and a group's step under clip c is c times its plain step
 * to f16 rounding. The class rule keeps a sliding width of its own unclipped. */
static void test_quest_clip(void) {
    const float clips[] = {0.25f, 0.7f, 1.2f, 1.5f, 4.0f};
    for (int bits = 2; bits <= 4; bits++) {
        CHECK(wk_kvq_quest_c2(bits, 1.0f) == WK_KVQ_QUEST_C2[bits]);
        CHECK(wk_kvq_quest_c2(bits, 0.0f) == WK_KVQ_QUEST_C2[bits]);
        for (size_t k = 0; k < sizeof clips / sizeof clips[0]; k++) {
            const double c = clips[k], s = c * 2.0 * WK_KVQ_QUEST_ALPHA[bits] / ((1 << bits) - 1);
            CHECK_NEAR(wk_kvq_quest_c2(bits, clips[k]) / (s * s), 1.0, 1e-6);
            float x[32];
            for (int i = 0; i < 32; i++) x[i] = (float)sin(1.0 + 0.37 * i) * (1.0f + (float)(i % 5));
            uint8_t codes[32];
            uint16_t plain, clipped;
            wk_kvq_quantize_group_c2(WK_KVQ_QUEST, bits, 32, 0, 0.0f, x, codes, &plain);
            wk_kvq_quantize_group_c2(WK_KVQ_QUEST, bits, 32, 0, wk_kvq_quest_c2(bits, clips[k]), x, codes, &clipped);
            /* each step is the f16 nearest its real value: relative error <= 2^-11 each */
            CHECK_NEAR(wk_f16_to_f32(clipped) / (c * wk_f16_to_f32(plain)), 1.0, 2.0 / 2048);
        }
    }
    CHECK(wk_kvq_clip_valid(WK_KVQ_QUEST, 1.2f) && wk_kvq_clip_valid(WK_KVQ_ABSMAX, 0.0f) &&
          wk_kvq_clip_valid(WK_KVQ_PERCENTILE, 1.0f));
    CHECK(!wk_kvq_clip_valid(WK_KVQ_ABSMAX, 1.2f) && !wk_kvq_clip_valid(WK_KVQ_QUEST, 0.2f) &&
          !wk_kvq_clip_valid(WK_KVQ_QUEST, 4.5f));
    float c2, swa_c2;
    wk_kvq_clip_constants(2, false, 1.2f, &c2, &swa_c2);
    CHECK(c2 == wk_kvq_quest_c2(2, 1.2f) && swa_c2 == c2);
    wk_kvq_clip_constants(2, true, 1.2f, &c2, &swa_c2);
    CHECK(c2 == wk_kvq_quest_c2(2, 1.2f) && swa_c2 == 0.0f);
    wk_kvq_clip_constants(2, false, 1.0f, &c2, &swa_c2);
    CHECK(c2 == 0.0f && swa_c2 == 0.0f);
}

int main(void) {
    test_sizes();
    test_packing();
    test_hand_made();
    test_against_model();
    test_thresholds();
    test_quest_step_rounding();
    test_round_trips();
    test_gaussian_mse();
    test_quest_clip();
    TEST_MAIN_END();
}
