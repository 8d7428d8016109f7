/* Test-side GGUF helpers: random well-formed quant blocks (the writer itself is the engine's,
 * engine/model/gguf_write.c). */
#include "gguf_writer.h"

#include <string.h>

#include "test_rng.h"

/* ---- random blocks ---- */

static uint64_t xs(uint64_t *s) {
    if (!*s) *s = 0x9E3779B97F4A7C15ull; /* xorshift is stuck at 0 */
    return rng_xorshift64(s);
}

/* A finite fp16 block scale: mostly normal in [2^-10, 2^4) with either sign, sometimes zero or
 * subnormal, because those are the edge cases of the float arithmetic under test. */
static uint16_t rand_scale_f16(uint64_t *s) {
    uint64_t r = xs(s);
    uint16_t sign = (uint16_t)((r & 1) << 15), man = (uint16_t)((r >> 8) & 0x3FF);
    unsigned pick = (unsigned)((r >> 20) & 31);
    if (pick == 0) return sign;                                       /* +-0 */
    if (pick <= 2) return (uint16_t)(sign | (man ? man : 1));          /* subnormal */
    uint16_t e = (uint16_t)(5 + (r >> 32) % 14);                       /* biased 5..18 */
    return (uint16_t)(sign | (e << 10) | man);
}

static void set16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

void wk_gw_random_blocks(wk_ggml_type type, size_t n_elems, uint64_t *rng, void *out) {
    uint8_t *o = out;
    size_t nb = wk_gw_type_bytes(type, n_elems);
    for (size_t i = 0; i < nb; i++) o[i] = (uint8_t)(xs(rng) >> 24);
    uint32_t be = 1, bb = 1;
    if (!wk_ggml_type_layout(type, &be, &bb)) return;
    for (size_t blk = 0; blk < n_elems / be; blk++) {
        uint8_t *b = o + blk * bb;
        switch (type) {
        case WK_GGML_F32: { /* modest finite floats */
            uint64_t r = xs(rng);
            uint32_t bits = (uint32_t)((r & 1) << 31) | (uint32_t)((100 + (r >> 8) % 56) << 23) |
                            (uint32_t)((r >> 24) & 0x7FFFFF);
            memcpy(b, &bits, 4);
            break;
        }
        case WK_GGML_F16: set16(b, rand_scale_f16(rng)); break;
        case WK_GGML_BF16: { /* finite: exponent below all-ones */
            uint64_t r = xs(rng);
            set16(b, (uint16_t)(((r & 1) << 15) | (((100 + (r >> 8) % 56)) << 7) | ((r >> 24) & 0x7F)));
            break;
        }
        case WK_GGML_Q4_0: case WK_GGML_Q5_0: case WK_GGML_Q8_0: set16(b, rand_scale_f16(rng)); break;
        case WK_GGML_Q4_1: case WK_GGML_Q5_1: case WK_GGML_Q8_1: case WK_GGML_Q4_K: case WK_GGML_Q5_K:
            set16(b, rand_scale_f16(rng));
            set16(b + 2, rand_scale_f16(rng));
            break;
        case WK_GGML_Q6_K: set16(b + 208, rand_scale_f16(rng)); break;
        case WK_GGML_Q2_K:
            set16(b + 80, rand_scale_f16(rng));
            set16(b + 82, rand_scale_f16(rng));
            break;
        case WK_GGML_Q3_K: set16(b + 108, rand_scale_f16(rng)); break;
        case WK_GGML_Q8_K: { float d = 0.01f; memcpy(b, &d, 4); break; }
        }
    }
}
