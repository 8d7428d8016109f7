/* Quant tests: hand-built blocks with hand-computed values, an independent double-precision
 * reference for every block type, f16 edge cases, the q8a16 == dequantize exactness property, and
 * the rounding of f32 matrices into q8a16. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "model/quant.h"
#include "test_util.h"
#include "gguf_writer.h"

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void h16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Half value from the IEEE definition, independent of quant.c. */
static double half_val(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

/* ---- reference dequantization: spec formulas per element, in double ----
 * Every term is exact in double (fp16 lsb >= 2^-24, magnitudes < 2^27), so casting the result
 * to float rounds once, exactly like ggml's float code whose products are exact. */

static void k_scale_min(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static int nib32(const uint8_t *qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }

static double ref_value(wk_ggml_type t, const uint8_t *b, int e) {
    switch (t) {
    case WK_GGML_Q4_0: return (nib32(b + 2, e) - 8) * half_val((uint16_t)(b[0] | b[1] << 8));
    case WK_GGML_Q4_1:
        return nib32(b + 4, e) * half_val((uint16_t)(b[0] | b[1] << 8)) + half_val((uint16_t)(b[2] | b[3] << 8));
    case WK_GGML_Q5_0: {
        uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
        int q = nib32(b + 6, e) | (int)((qh >> e) & 1) << 4;
        return (q - 16) * half_val((uint16_t)(b[0] | b[1] << 8));
    }
    case WK_GGML_Q5_1: {
        uint32_t qh = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
        int q = nib32(b + 8, e) | (int)((qh >> e) & 1) << 4;
        return q * half_val((uint16_t)(b[0] | b[1] << 8)) + half_val((uint16_t)(b[2] | b[3] << 8));
    }
    case WK_GGML_Q8_0: return (int8_t)b[2 + e] * half_val((uint16_t)(b[0] | b[1] << 8));
    case WK_GGML_Q4_K: case WK_GGML_Q5_K: {
        int s = e / 32, l = e % 32, sc, m;
        k_scale_min(b + 4, s, &sc, &m);
        const uint8_t *qs = b + (t == WK_GGML_Q4_K ? 16 : 48);
        int q = s & 1 ? qs[32 * (s / 2) + l] >> 4 : qs[32 * (s / 2) + l] & 15;
        if (t == WK_GGML_Q5_K) q += ((b[16 + l] >> s) & 1) * 16;
        double d = half_val((uint16_t)(b[0] | b[1] << 8)), dmin = half_val((uint16_t)(b[2] | b[3] << 8));
        return d * sc * q - dmin * m;
    }
    case WK_GGML_Q6_K: {
        int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        int low = (k & 1 ? ql[l + 32] : ql[l]);
        low = k >= 2 ? low >> 4 : low & 15;
        int q = (low | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
        int sc = (int8_t)b[192 + 8 * h + l / 16 + 2 * k];
        return half_val((uint16_t)(b[208] | b[209] << 8)) * sc * q;
    }
    default: return NAN;
    }
}

static const wk_ggml_type qtypes[] = {WK_GGML_Q4_0, WK_GGML_Q4_1, WK_GGML_Q5_0, WK_GGML_Q5_1,
                                      WK_GGML_Q8_0, WK_GGML_Q4_K, WK_GGML_Q5_K, WK_GGML_Q6_K};
#define N_QTYPES (sizeof qtypes / sizeof qtypes[0])

/* Dequantizes one hand-built block and compares every element with the reference, bitwise. */
static void check_block_vs_ref(wk_ggml_type t, const uint8_t *b, int n, float *y) {
    CHECK(wk_dequantize(t, b, y, (size_t)n));
    int bad = 0;
    for (int e = 0; e < n; e++) bad += fbits(y[e]) != fbits((float)ref_value(t, b, e));
    CHECK_EQ_INT(bad, 0);
}

/* ---- hand-built blocks with literal expectations ---- */

static void test_q4_0(void) {
    uint8_t b[36];
    float y[64];
    int8_t codes[64];
    float so[8];
    h16(b, 0x3800); /* d = 0.5 */
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | (15 - j) << 4);
    h16(b + 18, 0xB800); /* second block: d = -0.5, all codes 8 -> value (8-8)*-0.5 = -0.0 */
    memset(b + 20, 0x88, 16);
    CHECK(wk_dequantize(WK_GGML_Q4_0, b, y, 64));
    for (int j = 0; j < 16; j++) {
        CHECK(y[j] == (j - 8) * 0.5f);
        CHECK(y[j + 16] == (7 - j) * 0.5f);
    }
    CHECK(y[0] == -4.0f && y[16] == 3.5f && y[31] == -4.0f);
    for (int j = 32; j < 64; j++) CHECK(y[j] == 0.0f && signbit(y[j]));
    check_block_vs_ref(WK_GGML_Q4_0, b, 32, y);
    CHECK(wk_quant_to_q8a16(WK_GGML_Q4_0, b, 64, codes, so));
    CHECK(codes[0] == -8 && codes[15] == 7 && codes[16] == 7 && codes[31] == -8 && codes[40] == 0);
    CHECK(so[0] == 0.5f && so[2] == 0.5f && so[4] == -0.5f);
    /* The no-offset offset is -0.0 so that -0.0 codes*scales stay -0.0. */
    CHECK(so[1] == 0.0f && signbit(so[1]));
    CHECK(signbit(codes[40] * so[4] + so[5]));
}

static void test_q4_1(void) {
    uint8_t b[20];
    float y[32];
    int8_t codes[32];
    float so[4];
    h16(b, 0x4000);     /* d = 2 */
    h16(b + 2, 0xBC00); /* m = -1 */
    for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)((15 - j) | j << 4);
    CHECK(wk_dequantize(WK_GGML_Q4_1, b, y, 32));
    for (int j = 0; j < 16; j++) {
        CHECK(y[j] == 2.0f * (15 - j) - 1.0f);
        CHECK(y[j + 16] == 2.0f * j - 1.0f);
    }
    CHECK(y[0] == 29.0f && y[16] == -1.0f);
    check_block_vs_ref(WK_GGML_Q4_1, b, 32, y);
    CHECK(wk_quant_to_q8a16(WK_GGML_Q4_1, b, 32, codes, so));
    CHECK(codes[0] == 15 && codes[16] == 0 && codes[31] == 15);
    CHECK(so[0] == 2.0f && so[1] == -1.0f && so[2] == 2.0f && so[3] == -1.0f);
}

static void test_q5_0(void) {
    uint8_t b[22];
    float y[32];
    int8_t codes[32];
    float so[4];
    h16(b, 0x3400); /* d = 0.25 */
    b[2] = 0x55, b[3] = 0x55, b[4] = 0xAA, b[5] = 0xAA; /* qh = 0xAAAA5555: even low, odd high elements get bit 4 */
    for (int j = 0; j < 16; j++) b[6 + j] = (uint8_t)(j | (15 - j) << 4);
    CHECK(wk_dequantize(WK_GGML_Q5_0, b, y, 32));
    for (int j = 0; j < 16; j++) {
        CHECK(y[j] == ((j + (j % 2 == 0 ? 16 : 0)) - 16) * 0.25f);
        CHECK(y[j + 16] == ((15 - j + (j % 2 == 1 ? 16 : 0)) - 16) * 0.25f);
    }
    CHECK(y[0] == 0.0f && y[1] == -3.75f && y[16] == -0.25f && y[17] == 3.5f);
    check_block_vs_ref(WK_GGML_Q5_0, b, 32, y);
    CHECK(wk_quant_to_q8a16(WK_GGML_Q5_0, b, 32, codes, so));
    CHECK(codes[0] == 0 && codes[1] == -15 && codes[16] == -1 && codes[17] == 14);
    CHECK(so[0] == 0.25f && so[1] == 0.0f && signbit(so[1]));
}

static void test_q5_1(void) {
    uint8_t b[24];
    float y[32];
    int8_t codes[32];
    float so[4];
    h16(b, 0x3800);     /* d = 0.5 */
    h16(b + 2, 0x3000); /* m = 0.125 */
    const uint32_t qh = 0x12345678u;
    for (int i = 0; i < 4; i++) b[4 + i] = (uint8_t)(qh >> (8 * i));
    for (int j = 0; j < 16; j++) b[8 + j] = (uint8_t)((j * 5 % 16) | (j * 3 % 16) << 4);
    CHECK(wk_dequantize(WK_GGML_Q5_1, b, y, 32));
    for (int e = 0; e < 32; e++) {
        int nib = e < 16 ? e * 5 % 16 : (e - 16) * 3 % 16;
        int q = nib + 16 * (int)((qh >> e) & 1); /* element e takes bit e of qh */
        CHECK(y[e] == q * 0.5f + 0.125f);
    }
    /* e=3: nib 15, bit 3 of 0x78 is 1 -> 31*0.5+0.125; e=19: nib 9, bit 19 (0x34: bit 3) is 0 */
    CHECK(y[3] == 15.625f && y[19] == 4.625f);
    check_block_vs_ref(WK_GGML_Q5_1, b, 32, y);
    CHECK(wk_quant_to_q8a16(WK_GGML_Q5_1, b, 32, codes, so));
    CHECK(codes[3] == 31 && codes[19] == 9);
    CHECK(so[0] == 0.5f && so[1] == 0.125f);
}

static void test_q8_0(void) {
    uint8_t b[34];
    float y[32];
    int8_t codes[32];
    float so[4];
    h16(b, 0x3000); /* d = 0.125 */
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)(j * 8 - 128);
    CHECK(wk_dequantize(WK_GGML_Q8_0, b, y, 32));
    for (int j = 0; j < 32; j++) CHECK(y[j] == (float)(j - 16));
    check_block_vs_ref(WK_GGML_Q8_0, b, 32, y);
    CHECK(wk_quant_to_q8a16(WK_GGML_Q8_0, b, 32, codes, so));
    CHECK(codes[0] == -128 && codes[31] == 120 && so[0] == 0.125f && so[2] == 0.125f);
}

/* K-quant scales: 8 (scale, min) pairs of 6 bits packed as ggml's get_scale_min_k4 reads them. */
static const int ksc[8] = {1, 2, 3, 63, 17, 33, 50, 63}, kmn[8] = {0, 5, 10, 62, 20, 36, 49, 1};

static void pack_k_scales(uint8_t *s) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(ksc[j] | (ksc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(kmn[j] | (kmn[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((ksc[j + 4] & 15) | (kmn[j + 4] & 15) << 4);
    }
}

/* Element e of the hand K-quant blocks: sub-block s = e/32 uses nibble (s&1) of qs[32*(s/2)+l]. */
static int k_nib(int e) {
    int c = e / 64, r = e % 64, l = r % 32;
    return r < 32 ? l & 15 : (l + 3 * c) & 15;
}

static void fill_k_qs(uint8_t *qs) {
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) qs[32 * c + l] = (uint8_t)((l & 15) | ((l + 3 * c) & 15) << 4);
}

static void test_q4_k(void) {
    uint8_t b[144];
    float y[256], so[32];
    int8_t codes[256];
    h16(b, 0x3E00);     /* d = 1.5 */
    h16(b + 2, 0x3400); /* dmin = 0.25 */
    pack_k_scales(b + 4);
    fill_k_qs(b + 16);
    CHECK(wk_dequantize(WK_GGML_Q4_K, b, y, 256));
    for (int e = 0; e < 256; e++) CHECK(y[e] == 1.5f * ksc[e / 32] * k_nib(e) - 0.25f * kmn[e / 32]);
    CHECK(y[0] == 0.0f && y[33] == 1.75f && y[140] == 301.0f && y[255] == 755.75f);
    check_block_vs_ref(WK_GGML_Q4_K, b, 256, y);
    CHECK(wk_quant_to_q8a16(WK_GGML_Q4_K, b, 256, codes, so));
    for (int e = 0; e < 256; e++) CHECK_EQ_INT(codes[e], k_nib(e));
    for (int g = 0; g < 16; g++) {
        CHECK(so[2 * g] == 1.5f * ksc[g / 2]);
        CHECK(so[2 * g + 1] == -0.25f * kmn[g / 2]);
    }
}

static void test_q5_k(void) {
    uint8_t b[176];
    float y[256], so[32];
    int8_t codes[256];
    h16(b, 0x3E00);
    h16(b + 2, 0x3400);
    pack_k_scales(b + 4);
    for (int l = 0; l < 32; l++) b[16 + l] = (uint8_t)(l * 37 + 11); /* qh: bit s of qh[l] for sub-block s */
    fill_k_qs(b + 48);
    CHECK(wk_dequantize(WK_GGML_Q5_K, b, y, 256));
    for (int e = 0; e < 256; e++) {
        int q = k_nib(e) + 16 * ((b[16 + e % 32] >> (e / 32)) & 1);
        CHECK(y[e] == 1.5f * ksc[e / 32] * q - 0.25f * kmn[e / 32]);
    }
    CHECK(y[33] == 1.75f && y[140] == 301.0f && y[255] == 2267.75f);
    check_block_vs_ref(WK_GGML_Q5_K, b, 256, y);
    CHECK(wk_quant_to_q8a16(WK_GGML_Q5_K, b, 256, codes, so));
    CHECK(codes[255] == 24 && codes[140] == 12 && so[30] == 94.5f && so[31] == -0.25f);
}

static void test_q6_k(void) {
    uint8_t b[210];
    float y[256], so[32];
    int8_t codes[256];
    static const int8_t sc[16] = {-128, -1, 1, 127, 2, -3, 4, -5, 6, -7, 8, -9, 10, -11, 12, -13};
    for (int i = 0; i < 128; i++) b[i] = (uint8_t)(i * 7 + 1);
    for (int i = 0; i < 64; i++) b[128 + i] = (uint8_t)(i * 13 + 5);
    memcpy(b + 192, sc, 16);
    h16(b + 208, 0x3800); /* d = 0.5 */
    CHECK(wk_dequantize(WK_GGML_Q6_K, b, y, 256));
    /* e=0: ql[0]=1, qh[0]=5 -> q = (1|1<<4)-32 = -15, scale -128: 0.5*-128*-15 = 960.
     * e=200: half 1, quarter 2, l 8: ql[72]=0xF9 -> 15, qh[40]=13 -> bits 4-5 = 0: q=-17, sc[12]=10 */
    CHECK(y[0] == 960.0f);
    CHECK(y[200] == -85.0f);
    check_block_vs_ref(WK_GGML_Q6_K, b, 256, y);
    CHECK(wk_quant_to_q8a16(WK_GGML_Q6_K, b, 256, codes, so));
    CHECK(codes[0] == -15 && codes[200] == -17);
    CHECK(so[0] == -64.0f && so[2] == -0.5f && so[24] == 5.0f && so[26] == -5.5f);
    CHECK(so[1] == 0.0f && signbit(so[1]));
}

static void test_float_types(void) {
    float in[4] = {1.5f, -0.0f, 1e-40f, 3.4e38f}, out[4];
    CHECK(wk_dequantize(WK_GGML_F32, in, out, 4) && memcmp(in, out, sizeof in) == 0);
    uint8_t h[8];
    h16(h, 0x3C00), h16(h + 2, 0xC000), h16(h + 4, 0x0001), h16(h + 6, 0x7BFF);
    CHECK(wk_dequantize(WK_GGML_F16, h, out, 4));
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == ldexpf(1, -24) && out[3] == 65504.0f);
    h16(h, 0x3F80), h16(h + 2, 0xC040), h16(h + 4, 0x0001), h16(h + 6, 0x7F80);
    CHECK(wk_dequantize(WK_GGML_BF16, h, out, 4));
    CHECK(out[0] == 1.0f && out[1] == -3.0f && fbits(out[2]) == 0x00010000u && isinf(out[3]));
    CHECK(wk_bf16_to_f32(0x4049) == 3.140625f);

    /* Unsupported types and sizes are refused. */
    CHECK(!wk_dequantize(WK_GGML_Q2_K, h, out, 256));
    CHECK(!wk_dequantize(WK_GGML_Q4_0, h, out, 16));
    CHECK(!wk_quant_is_exact_q8a16(WK_GGML_F32) && !wk_quant_is_exact_q8a16(WK_GGML_F16) &&
          !wk_quant_is_exact_q8a16(WK_GGML_BF16) && !wk_quant_is_exact_q8a16(WK_GGML_Q2_K));
    for (size_t i = 0; i < N_QTYPES; i++) CHECK(wk_quant_is_exact_q8a16(qtypes[i]));
    int8_t c[32];
    float so[4];
    CHECK(!wk_quant_to_q8a16(WK_GGML_F16, h, 4, c, so));
    CHECK(!wk_quant_to_q8a16(WK_GGML_Q8_0, h, 16, c, so));
}

/* ---- half conversions ---- */

static void test_f16(void) {
    /* Literal edge cases. */
    CHECK(wk_f16_to_f32(0x3C00) == 1.0f);
    CHECK(wk_f16_to_f32(0x3555) == 0.333251953125f);
    CHECK(wk_f16_to_f32(0x0001) == 5.9604644775390625e-8f);
    CHECK(wk_f16_to_f32(0x03FF) == 6.0975551605224609375e-5f); /* largest subnormal: 1023 * 2^-24 */
    CHECK(wk_f16_to_f32(0x0400) == 6.103515625e-5f);
    CHECK(wk_f16_to_f32(0x8001) == -5.9604644775390625e-8f);
    CHECK(wk_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(wk_f16_to_f32(0x7C00) == INFINITY && wk_f16_to_f32(0xFC00) == -INFINITY);
    CHECK(isnan(wk_f16_to_f32(0x7E00)) && isnan(wk_f16_to_f32(0x7C01)) && isnan(wk_f16_to_f32(0xFE00)));
    CHECK(fbits(wk_f16_to_f32(0x8000)) == 0x80000000u);

    CHECK_EQ_INT(wk_f32_to_f16(1.0f), 0x3C00);
    CHECK_EQ_INT(wk_f32_to_f16(-2.0f), 0xC000);
    CHECK_EQ_INT(wk_f32_to_f16(65504.0f), 0x7BFF);
    CHECK_EQ_INT(wk_f32_to_f16(65519.99f), 0x7BFF);
    CHECK_EQ_INT(wk_f32_to_f16(65520.0f), 0x7C00); /* tie between 65504 and 65536: even is inf */
    CHECK_EQ_INT(wk_f32_to_f16(1e10f), 0x7C00);
    CHECK_EQ_INT(wk_f32_to_f16(-INFINITY), 0xFC00);
    CHECK_EQ_INT(wk_f32_to_f16(-0.0f), 0x8000);
    CHECK_EQ_INT(wk_f32_to_f16(ldexpf(1, -24)), 0x0001);
    CHECK_EQ_INT(wk_f32_to_f16(ldexpf(1, -25)), 0x0000);             /* tie to even 0 */
    CHECK_EQ_INT(wk_f32_to_f16(-ldexpf(1, -25)), 0x8000);
    CHECK_EQ_INT(wk_f32_to_f16(nextafterf(ldexpf(1, -25), 1)), 0x0001);
    CHECK_EQ_INT(wk_f32_to_f16(ldexpf(3, -25)), 0x0002);             /* 1.5 units: tie to even 2 */
    CHECK_EQ_INT(wk_f32_to_f16(ldexpf(2047, -25)), 0x0400);          /* 1023.5 units: tie to 1024 */
    CHECK_EQ_INT(wk_f32_to_f16(ldexpf(2045, -25)), 0x03FE);          /* 1022.5 units: tie to 1022 */
    CHECK_EQ_INT(wk_f32_to_f16(1e-10f), 0x0000);
    CHECK_EQ_INT(wk_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3C00);     /* tie to even */
    CHECK_EQ_INT(wk_f32_to_f16(1.0f + ldexpf(3, -11)), 0x3C02);     /* tie to even upward */
    CHECK_EQ_INT(wk_f32_to_f16(0.1f), 0x2E66);
    CHECK_EQ_INT(wk_f32_to_f16(1e-45f), 0x0000);                    /* f32 subnormal */
    uint16_t hn = wk_f32_to_f16(NAN);
    CHECK((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF) != 0);
    hn = wk_f32_to_f16(-NAN);
    CHECK((hn & 0xFC00) == 0xFC00 && (hn & 0x3FF) != 0);
    /* A nan whose payload lives only in the low 13 bits must stay a nan. */
    uint32_t nb = 0x7F800001u;
    float fn;
    memcpy(&fn, &nb, 4);
    hn = wk_f32_to_f16(fn);
    CHECK((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF) != 0);

    /* Exhaustive: every half decodes to its IEEE value, and non-nan halves round-trip. */
    int bad_dec = 0, bad_rt = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = wk_f16_to_f32((uint16_t)h);
        bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF);
        if (is_nan) {
            bad_dec += !isnan(f);
            continue;
        }
        bool is_inf = (h & 0x7FFF) == 0x7C00;
        bad_dec += is_inf ? !(isinf(f) && (signbit(f) != 0) == ((h & 0x8000) != 0))
                          : (fbits(f) != fbits((float)half_val((uint16_t)h)));
        bad_rt += wk_f32_to_f16(f) != h;
    }
    CHECK_EQ_INT(bad_dec, 0);
    CHECK_EQ_INT(bad_rt, 0);

    /* Exhaustive rounding: the midpoint between neighbouring halves rounds to the even one, and
     * one float ulp either side of it rounds to the nearer one (above 65504 the next "half" is
     * 65536, which overflows to inf). */
    int bad_rne = 0;
    for (uint32_t h = 0; h < 0x7C00; h++) {
        for (int sgn = 0; sgn < 2; sgn++) {
            uint16_t s = sgn ? 0x8000 : 0, lo = (uint16_t)(h | s), hi = (uint16_t)((h + 1) | s);
            double vlo = half_val((uint16_t)h), vhi = h + 1 == 0x7C00 ? 65536.0 : half_val((uint16_t)(h + 1));
            float mid = (float)((vlo + vhi) / 2); /* exact: 12 significant bits */
            if (sgn) mid = -mid;
            float below = nextafterf(mid, 0), above = nextafterf(mid, sgn ? -INFINITY : INFINITY);
            bad_rne += wk_f32_to_f16(mid) != ((h & 1) ? hi : lo);
            bad_rne += wk_f32_to_f16(below) != lo;
            bad_rne += wk_f32_to_f16(above) != hi;
        }
    }
    CHECK_EQ_INT(bad_rne, 0);
}

/* ---- the q8a16 property on random blocks ---- */

static void test_q8a16_property(void) {
    enum { N = 256 * 128 };
    uint64_t rng = 0x5EED;
    float *y = malloc(N * sizeof *y), *so = malloc(N / 16 * 2 * sizeof *so);
    int8_t *codes = malloc(N);
    uint32_t *half = malloc(N / 16 * sizeof *half);
    uint8_t *blocks = malloc(wk_gw_type_bytes(WK_GGML_Q8_0, N) + 64);
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        wk_ggml_type t = qtypes[ti];
        uint32_t be = 0, bb = 0;
        wk_ggml_type_layout(t, &be, &bb);
        long ref_bad = 0, plain_bad = 0, fma_bad = 0, inexact = 0, code_range = 0, half_bad = 0, half_fit = 0;
        /* The half-pair form (engine/weights.h, q8h): the types whose scales and mins are the block's
         * own f16s must always fit, and what packs must unpack to the very same floats. */
        const bool must_fit = t == WK_GGML_Q4_0 || t == WK_GGML_Q4_1 || t == WK_GGML_Q5_0 || t == WK_GGML_Q5_1 ||
                              t == WK_GGML_Q8_0;
        /* Code ranges per type: what the GPU side may assume about the int8 codes. */
        int lo = 0, hi = 15;
        switch (t) {
        case WK_GGML_Q4_0: lo = -8, hi = 7; break;
        case WK_GGML_Q5_0: lo = -16, hi = 15; break;
        case WK_GGML_Q5_1: case WK_GGML_Q5_K: hi = 31; break;
        case WK_GGML_Q8_0: lo = -128, hi = 127; break;
        case WK_GGML_Q6_K: lo = -32, hi = 31; break;
        default: break;
        }
        for (int round = 0; round < 4; round++) {
            wk_gw_random_blocks(t, N, &rng, blocks);
            CHECK(wk_dequantize(t, blocks, y, N));
            CHECK(wk_quant_to_q8a16(t, blocks, N, codes, so));
            for (size_t i = 0; i < N; i++) {
                ref_bad += fbits(y[i]) != fbits((float)ref_value(t, blocks + i / be * bb, (int)(i % be)));
                float s = so[2 * (i / 16)], o = so[2 * (i / 16) + 1], c = (float)codes[i];
                volatile float prod = c * s; /* volatile: no contraction into an fma here */
                float plain = prod + o, fused = fmaf(c, s, o);
                plain_bad += fbits(plain) != fbits(y[i]);
                fma_bad += fbits(fused) != fbits(y[i]);
                inexact += (double)prod != (double)c * (double)s;
                code_range += codes[i] < lo || codes[i] > hi;
            }
            if (wk_quant_pairs_to_f16(so, N / 16, half)) {
                half_fit++;
                for (size_t g = 0; g < N / 16; g++)
                    half_bad += fbits(wk_f16_to_f32((uint16_t)(half[g] & 0xffff))) != fbits(so[2 * g]) ||
                                fbits(wk_f16_to_f32((uint16_t)(half[g] >> 16))) != fbits(so[2 * g + 1]);
            }
        }
        printf("  %-5s %d elems: ref mismatches %ld, q8a16 plain %ld, fma %ld, inexact products %ld, half pairs %ld of 4 rounds\n",
               wk_ggml_type_name(t), 4 * N, ref_bad, plain_bad, fma_bad, inexact, half_fit);
        CHECK_EQ_INT(half_bad, 0);
        if (must_fit) CHECK_EQ_INT(half_fit, 4);
        CHECK_EQ_INT(ref_bad, 0);
        CHECK_EQ_INT(plain_bad, 0);
        CHECK_EQ_INT(fma_bad, 0);
        CHECK_EQ_INT(inexact, 0);
        CHECK_EQ_INT(code_range, 0);
    }
    free(y);
    free(so);
    free(codes);
    free(half);
    free(blocks);
}

/* Extremes the random generator rarely hits: largest scales and codes, subnormal scales. */
static void test_q8a16_extremes(void) {
    static const uint16_t ds[] = {0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x03FF, 0x0000, 0x8000, 0x3C01};
    uint8_t b[210];
    float y[256], so[32];
    int8_t codes[256];
    int bad = 0;
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        wk_ggml_type t = qtypes[ti];
        for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
            for (int fill = 0; fill < 3; fill++) {
                uint32_t be, bb;
                wk_ggml_type_layout(t, &be, &bb);
                memset(b, fill == 0 ? 0xFF : fill == 1 ? 0x00 : 0xA5, sizeof b);
                if (t == WK_GGML_Q6_K) h16(b + 208, ds[i]);
                else {
                    h16(b, ds[i]);
                    if (t != WK_GGML_Q4_0 && t != WK_GGML_Q5_0 && t != WK_GGML_Q8_0) h16(b + 2, ds[(i + 3) % 8]);
                }
                wk_dequantize(t, b, y, be);
                wk_quant_to_q8a16(t, b, be, codes, so);
                for (uint32_t e = 0; e < be; e++) {
                    float s = so[2 * (e / 16)], o = so[2 * (e / 16) + 1], c = (float)codes[e];
                    volatile float prod = c * s;
                    bad += fbits(prod + o) != fbits(y[e]) || fbits(fmaf(c, s, o)) != fbits(y[e]) ||
                           fbits(y[e]) != fbits((float)ref_value(t, b, (int)e));
                }
            }
    }
    CHECK_EQ_INT(bad, 0);
}

/* f32 -> q8a16 rounding (the folded W_v / W_o): every element within half a step of its value (and
 * the step no more than its 16's span / 255), the ends of each 16 within half a step, every code of
 * -128..127 reachable, a constant 16 exact, and values already on a grid of 255 steps kept to f32
 * rounding. */
static void test_f32_to_q8a16(void) {
    enum { N = 16 * 64 };
    static float x[N], so[N / 8];
    static int8_t codes[N];
    uint64_t rng = 0xF01D;
    for (int i = 0; i < N; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        double u = (double)(rng >> 11) / 9007199254740992.0;
        int g = i / 16;
        /* groups of different magnitudes and signs; group 1 constant, group 2 on an exact grid */
        x[i] = g == 1 ? -0.75f : g == 2 ? (float)(0.5 + 0.25 * (i % 16) * 17) : (float)((u - 0.3) * ldexp(1.0, g % 20 - 10));
    }
    wk_quant_f32_to_q8a16(x, N, codes, so);
    int far = 0, wide = 0, seen_lo = 0, seen_hi = 0;
    for (int g = 0; g < N / 16; g++) {
        float lo = x[g * 16], hi = lo;
        for (int i = 0; i < 16; i++) lo = fminf(lo, x[g * 16 + i]), hi = fmaxf(hi, x[g * 16 + i]);
        const double s = so[2 * g], o = so[2 * g + 1];
        wide += s > ((double)hi - lo) / 255.0 * (1 + 1e-6);
        for (int i = 0; i < 16; i++) {
            double y = codes[g * 16 + i] * s + o;
            far += fabs(y - x[g * 16 + i]) > 0.5 * s * (1 + 1e-6) + 1e-30;
            seen_lo += codes[g * 16 + i] == -128, seen_hi += codes[g * 16 + i] == 127;
        }
    }
    CHECK_EQ_INT(far, 0);
    CHECK_EQ_INT(wide, 0);
    CHECK(seen_lo >= N / 16 - 1 && seen_hi >= N / 16 - 1); /* each non-constant 16 spans the codes */
    for (int i = 16; i < 32; i++) CHECK(codes[i] * so[2] + so[3] == -0.75f);
    for (int i = 32; i < 48; i++) CHECK(fabsf(codes[i] * so[4] + so[5] - x[i]) <= 1e-5f * fabsf(x[i]));
}

/* The half-pair form of the pairs (q8h): a pair that is no half is refused, -0 offsets pack as -0
 * (the types without a min use -0: quant.c), and what packs unpacks to the same floats
 * (test_q8a16_property, per ggml type). */
static void test_pairs_to_f16(void) {
    uint32_t packed[2] = {0, 0};
    const float third[4] = {0.5f, 0.0f, 1.0f / 3.0f, 0.0f}, neg0[2] = {0.5f, -0.0f}, big[2] = {65536.0f, 0.0f};
    CHECK(!wk_quant_pairs_to_f16(third, 2, packed)); /* the second pair's scale */
    CHECK(!wk_quant_pairs_to_f16(big, 1, packed));   /* past the largest half, 65504 */
    CHECK(wk_quant_pairs_to_f16(neg0, 1, packed));
    CHECK_EQ_INT(packed[0], 0x80003800u);
}

int main(void) {
    test_q4_0();
    test_q4_1();
    test_q5_0();
    test_q5_1();
    test_q8_0();
    test_q4_k();
    test_q5_k();
    test_q6_k();
    test_float_types();
    test_f16();
    test_q8a16_property();
    test_q8a16_extremes();
    test_f32_to_q8a16();
    test_pairs_to_f16();
    TEST_MAIN_END();
}
