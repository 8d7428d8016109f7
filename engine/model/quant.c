/* ggml block formats on the CPU: bit-exact dequantization (same float expressions as ggml) and
 * the lossless re-encoding into the device format q8a16 (int8 code, per-16 f32 scale/offset).
 *
 * Why q8a16 is exact: every block scale is an fp16 (11 significant bits), K-quant sub-scales are
 * 6-bit (Q6_K: int8, |sc| <= 128), so ggml's effective scale (d, d*sc) is an exact float with at
 * most 18 significant bits, and |code| <= 32 (Q8_0: 128 with an 11-bit d). Every product
 * code*scale therefore needs at most 23 significant bits and is exact in float; the single
 * rounding happens in the add of the offset, with or without fma. The offset of types without a
 * min is -0.0f, not +0.0f: x + (-0) == x for every x including -0, whereas -0 + (+0) is +0 and
 * would flip the sign of ggml's negative zeros. Matrices the engine computes (the folded W_v / W_o)
 * are rounded into the same format by wk_quant_f32_to_q8a16, the one lossy path into it. */
#include "model/quant.h"

#include <math.h>
#include <string.h>

/* ---- half / bfloat16 ---- */

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float wk_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0x1F) return u2f(sign | 0x7F800000u | (man << 13)); /* inf, nan (payload kept) */
    if (exp != 0) return u2f(sign | ((exp + 112) << 23) | (man << 13));
    if (man == 0) return u2f(sign);
    /* Subnormal half: normalize; every one of them is a normal float. */
    uint32_t e = 113;
    while (!(man & 0x400u)) {
        man <<= 1;
        e--;
    }
    return u2f(sign | (e << 23) | ((man & 0x3FFu) << 13));
}

uint16_t wk_f32_to_f16(float f) {
    uint32_t x = f2u(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x3FFu)); /* quiet nan */
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520 rounds to inf (65520 is a tie to even) */
    if (ax >= 0x38800000u) { /* normal half: round the 13 dropped bits to nearest even; a carry
                              * into the exponent is the correct result */
        uint32_t r = ax + 0xFFFu + ((ax >> 13) & 1u) - (112u << 23);
        return (uint16_t)(sign | (r >> 13));
    }
    if (ax <= 0x33000000u) return sign; /* <= 2^-25: zero (2^-25 itself ties to even 0) */
    /* Subnormal half: value in units of 2^-24 is m * 2^(e-126) with shift 14..24. */
    uint32_t e = ax >> 23, m = (ax & 0x7FFFFFu) | 0x800000u, shift = 126 - e;
    uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) h++; /* may become 0x400, the smallest normal */
    return (uint16_t)(sign | h);
}

float wk_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

/* ---- block helpers (src need not be aligned) ---- */

static float fp16_at(const uint8_t *p) { return wk_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

static uint32_t u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* ggml's get_scale_min_k4: eight 6-bit (scale, min) pairs packed into 12 bytes. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Low 5-bit-type code of element j (0..31) of a Q5_0/Q5_1 block, without the -16. */
static int q5_code(const uint8_t *qs, uint32_t h, int j) {
    if (j < 16) return (qs[j] & 0xF) | (int)(((h >> j) << 4) & 0x10);
    j -= 16;
    return (qs[j] >> 4) | (int)((h >> (j + 12)) & 0x10);
}

/* Q6_K code (0..63, without the -32) and scale index of element i (0..255). */
static int q6_code(const uint8_t *b, int i, int *sc_idx) {
    const uint8_t *ql = b, *qh = b + 128;
    int half = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
    const uint8_t *qlh = ql + 64 * half, *qhh = qh + 32 * half;
    int lo = quarter & 1 ? qlh[l + 32] : qlh[l];
    lo = quarter & 2 ? lo >> 4 : lo & 0xF;
    *sc_idx = 8 * half + l / 16 + 2 * quarter;
    return lo | (((qhh[l] >> (2 * quarter)) & 3) << 4);
}

/* ---- dequantization: written in ggml's loop form and float expression order ---- */

static void dq_q4_0(const uint8_t *b, float *y) {
    const float d = fp16_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        const int x0 = (qs[j] & 0x0F) - 8, x1 = (qs[j] >> 4) - 8;
        y[j] = x0 * d;
        y[j + 16] = x1 * d;
    }
}

static void dq_q4_1(const uint8_t *b, float *y) {
    const float d = fp16_at(b), m = fp16_at(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        const int x0 = qs[j] & 0x0F, x1 = qs[j] >> 4;
        y[j] = x0 * d + m;
        y[j + 16] = x1 * d + m;
    }
}

static void dq_q5_0(const uint8_t *b, float *y) {
    const float d = fp16_at(b);
    const uint32_t qh = u32_at(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        const uint8_t xh0 = (uint8_t)(((qh >> j) << 4) & 0x10), xh1 = (uint8_t)((qh >> (j + 12)) & 0x10);
        const int x0 = ((qs[j] & 0x0F) | xh0) - 16, x1 = ((qs[j] >> 4) | xh1) - 16;
        y[j] = x0 * d;
        y[j + 16] = x1 * d;
    }
}

static void dq_q5_1(const uint8_t *b, float *y) {
    const float d = fp16_at(b), m = fp16_at(b + 2);
    const uint32_t qh = u32_at(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        const uint8_t xh0 = (uint8_t)(((qh >> j) << 4) & 0x10), xh1 = (uint8_t)((qh >> (j + 12)) & 0x10);
        const int x0 = (qs[j] & 0x0F) | xh0, x1 = (qs[j] >> 4) | xh1;
        y[j] = x0 * d + m;
        y[j + 16] = x1 * d + m;
    }
}

static void dq_q8_0(const uint8_t *b, float *y) {
    const float d = fp16_at(b);
    for (int j = 0; j < 32; j++) y[j] = (int8_t)b[2 + j] * d;
}

static void dq_q4_k(const uint8_t *b, float *y) {
    const float d = fp16_at(b), min = fp16_at(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < 256; j += 64) {
        scale_min_k4(is + 0, scales, &sc, &m);
        const float d1 = d * sc, m1 = min * m;
        scale_min_k4(is + 1, scales, &sc, &m);
        const float d2 = d * sc, m2 = min * m;
        for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
        q += 32;
        is += 2;
    }
}

static void dq_q5_k(const uint8_t *b, float *y) {
    const float d = fp16_at(b), min = fp16_at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
    int is = 0;
    uint8_t sc, m, u1 = 1, u2 = 2;
    for (int j = 0; j < 256; j += 64) {
        scale_min_k4(is + 0, scales, &sc, &m);
        const float d1 = d * sc, m1 = min * m;
        scale_min_k4(is + 1, scales, &sc, &m);
        const float d2 = d * sc, m2 = min * m;
        for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        ql += 32;
        is += 2;
        u1 = (uint8_t)(u1 << 2);
        u2 = (uint8_t)(u2 << 2);
    }
}

static void dq_q6_k(const uint8_t *b, float *y) {
    const float d = fp16_at(b + 208);
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l + 0] = d * sc[is + 0] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

typedef void (*dq_fn)(const uint8_t *, float *);

static dq_fn block_fn(wk_ggml_type t) {
    switch (t) {
    case WK_GGML_Q4_0: return dq_q4_0;
    case WK_GGML_Q4_1: return dq_q4_1;
    case WK_GGML_Q5_0: return dq_q5_0;
    case WK_GGML_Q5_1: return dq_q5_1;
    case WK_GGML_Q8_0: return dq_q8_0;
    case WK_GGML_Q4_K: return dq_q4_k;
    case WK_GGML_Q5_K: return dq_q5_k;
    case WK_GGML_Q6_K: return dq_q6_k;
    default: return NULL;
    }
}

bool wk_dequantize(wk_ggml_type type, const void *src, float *dst, size_t n) {
    const uint8_t *s = src;
    switch (type) {
    case WK_GGML_F32: memcpy(dst, src, n * sizeof(float)); return true;
    case WK_GGML_F16:
        for (size_t i = 0; i < n; i++) dst[i] = fp16_at(s + 2 * i);
        return true;
    case WK_GGML_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = wk_bf16_to_f32((uint16_t)(s[2 * i] | (s[2 * i + 1] << 8)));
        return true;
    default: break;
    }
    dq_fn fn = block_fn(type);
    uint32_t be, bb;
    if (!fn || !wk_ggml_type_layout(type, &be, &bb) || n % be) return false;
    for (size_t i = 0; i < n / be; i++) fn(s + i * bb, dst + i * be);
    return true;
}

/* ---- q8a16 ---- */

bool wk_quant_is_exact_q8a16(wk_ggml_type type) { return block_fn(type) != NULL; }

/* One block into codes (block_elems int8) and so (block_elems/16 scale/offset pairs). Scales and
 * offsets are the very floats ggml's expressions use (d1 = d*sc, -m1 with m1 = min*m, ...). */
static void q8a16_block(wk_ggml_type t, const uint8_t *b, int8_t *code, float *so) {
    switch (t) {
    case WK_GGML_Q4_0: case WK_GGML_Q5_0: case WK_GGML_Q8_0: {
        const float d = fp16_at(b);
        for (int j = 0; j < 32; j++) {
            if (t == WK_GGML_Q4_0) code[j] = (int8_t)((j < 16 ? b[2 + j] & 0xF : b[2 + j - 16] >> 4) - 8);
            else if (t == WK_GGML_Q5_0) code[j] = (int8_t)(q5_code(b + 6, u32_at(b + 2), j) - 16);
            else code[j] = (int8_t)b[2 + j];
        }
        for (int g = 0; g < 2; g++) {
            so[2 * g] = d;
            so[2 * g + 1] = -0.0f;
        }
        return;
    }
    case WK_GGML_Q4_1: case WK_GGML_Q5_1: {
        const float d = fp16_at(b), m = fp16_at(b + 2);
        for (int j = 0; j < 32; j++)
            code[j] = (int8_t)(t == WK_GGML_Q4_1 ? (j < 16 ? b[4 + j] & 0xF : b[4 + j - 16] >> 4)
                                                 : q5_code(b + 8, u32_at(b + 4), j));
        for (int g = 0; g < 2; g++) {
            so[2 * g] = d;
            so[2 * g + 1] = m;
        }
        return;
    }
    case WK_GGML_Q4_K: case WK_GGML_Q5_K: {
        const float d = fp16_at(b), min = fp16_at(b + 2);
        const uint8_t *scales = b + 4;
        const uint8_t *qs = t == WK_GGML_Q4_K ? b + 16 : b + 48, *qh = b + 16;
        for (int s = 0; s < 8; s++) { /* sub-block s: 32 elements, nibble s&1 of qs[32*(s/2) + l] */
            uint8_t sc, m;
            scale_min_k4(s, scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            for (int l = 0; l < 32; l++) {
                int q = s & 1 ? qs[32 * (s / 2) + l] >> 4 : qs[32 * (s / 2) + l] & 0xF;
                if (t == WK_GGML_Q5_K && (qh[l] >> s) & 1) q += 16;
                code[32 * s + l] = (int8_t)q;
            }
            for (int g = 2 * s; g < 2 * s + 2; g++) {
                so[2 * g] = d1;
                so[2 * g + 1] = -m1;
            }
        }
        return;
    }
    case WK_GGML_Q6_K: {
        const float d = fp16_at(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192);
        int sc_idx = 0;
        for (int i = 0; i < 256; i++) {
            code[i] = (int8_t)(q6_code(b, i, &sc_idx) - 32);
            if (i % 16 == 0) { /* a 16-element group shares one scale index */
                so[2 * (i / 16)] = d * sc[sc_idx];
                so[2 * (i / 16) + 1] = -0.0f;
            }
        }
        return;
    }
    default: return;
    }
}

bool wk_quant_to_q8a16(wk_ggml_type type, const void *src, size_t n, int8_t *codes, float *scale_offset) {
    uint32_t be, bb;
    if (!wk_quant_is_exact_q8a16(type) || !wk_ggml_type_layout(type, &be, &bb) || n % be) return false;
    const uint8_t *s = src;
    for (size_t i = 0; i < n / be; i++) q8a16_block(type, s + i * bb, codes + i * be, scale_offset + i * (be / 16) * 2);
    return true;
}

/* x as the half *h, when that half is x to the bit (so -0 stays -0: see the top of this file). */
static bool f16_exact(float x, uint16_t *h) {
    *h = wk_f32_to_f16(x);
    const float back = wk_f16_to_f32(*h);
    uint32_t a, b;
    memcpy(&a, &x, sizeof a), memcpy(&b, &back, sizeof b);
    return a == b;
}

void wk_quant_f32_to_q8a16(const float *src, size_t n, int8_t *codes, float *scale_offset) {
    for (size_t g = 0; g < n / 16; g++) {
        const float *x = src + g * 16;
        float lo = x[0], hi = x[0];
        for (int i = 1; i < 16; i++) lo = x[i] < lo ? x[i] : lo, hi = x[i] > hi ? x[i] : hi;
        /* The step and offset are rounded to f32 first, then the codes chosen against those values:
         * the device computes code * scale + offset with exactly them. */
        const float scale = (float)(((double)hi - lo) / 255.0), offset = (float)(lo + 128.0 * scale);
        for (int i = 0; i < 16; i++) {
            double c = scale > 0 ? nearbyint(((double)x[i] - offset) / scale) : 0;
            codes[g * 16 + i] = (int8_t)(c < -128 ? -128 : c > 127 ? 127 : c);
        }
        scale_offset[2 * g] = scale;
        scale_offset[2 * g + 1] = offset;
    }
}

bool wk_quant_pairs_to_f16(const float *scale_offset, size_t n_pairs, uint32_t *packed) {
    for (size_t i = 0; i < n_pairs; i++) {
        uint16_t s, o;
        if (!f16_exact(scale_offset[2 * i], &s) || !f16_exact(scale_offset[2 * i + 1], &o)) return false;
        packed[i] = (uint32_t)s | (uint32_t)o << 16;
    }
    return true;
}
