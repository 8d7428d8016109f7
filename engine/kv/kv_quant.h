/* KV-cache quantizers (QuEST, percentile, absmax): the scalar C twins that define, bit for bit,
 * what the GLSL encoders/decoders must produce, plus the packed layout of codes and scales.
 *
 * Bit-exactness contract (why the rules below look fussy): the GPU encoder must produce the same
 * bytes as this file on every Vulkan implementation. Vulkan guarantees correctly rounded f32
 * add/sub/mul and exact comparisons, but NOT division or sqrt (2.5 ULP / inherited), and
 * compilers may fuse a*b+c into fma unless the result is `precise`. So every rule here is built
 * from + - * (correctly rounded, never contracted), comparisons and integer ops only:
 *   - scales are stored as f16 and the encoder uses the ROUNDED f16 values, so encoder and decoder
 *     agree by construction; f32 -> f16 is round-to-nearest-even done in integer code
 *     (wk_f32_to_f16 in quant.c), saturating to +-65504 instead of producing inf;
 *   - the QuEST step is the f16 nearest to the exact real sqrt of a float (found with one sqrt
 *     guess and an exact check against squared f16 midpoints, which are exact in f32);
 *   - codes are floor() of a real quotient, found by comparing against k*step, a product that is
 *     exact in f32 (small integer k times an 11-bit f16 significand);
 *   - sums of squares use one fixed pairwise tree (below); max/min/selection are order-free.
 * Inputs must be finite (NaN/inf handling is unspecified). The GPU may flush f32 denormals, so a
 * group whose elements are all below ~1e-19 in magnitude is outside the contract.
 *
 * Formats (b = bits in {2,3,4}, L = 2^b levels, G = group size in {16,32,64,128,256}, a group is
 * G contiguous elements of one head vector):
 *
 * QuEST (symmetric, RMS clipping), one f16 per group: step_h.
 *   S      = pairwise tree sum of the G squares x_i*x_i: a_i = x_i*x_i, then for h = G/2, G/4, .., 1:
 *            a_i = a_i + a_(i+h) for i < h; S = a_0. (A subgroup xor-butterfly with offsets
 *            G/2..1 gives the same value in every lane, since IEEE addition commutes.)
 *   v2     = C2 * (S * (1/G))   (f32; C2 = WK_KVQ_QUEST_C2[b] = (2*alpha_b/(L-1))^2 rounded to f32,
 *            or wk_kvq_quest_c2(b, clip) for a clipped step: the format's clip factor)
 *   step_h = f16 nearest to sqrt(v2) (exact real sqrt, ties to even), saturated to 65504.
 *   q      = clamp(floor(x/step_h), -L/2, L/2-1) in exact arithmetic; stored u = q + L/2.
 *   decode   (u - L/2 + 0.5) * step_h  (exact in f32).  step_h == 0 => every u = L/2, decodes 0.
 *   This is s = alpha_b*rms, step = 2s/(L-1) of docs/design.md section 5.5, rounded once to f16.
 *
 * absmax (symmetric RTN, the baseline), one f16 per group: step_h.
 *   step_h = f16(max|x| * WK_KVQ_ABSMAX_C[b]) (f32 product, then RNE to f16; C = 2/(L-1) in f32);
 *   codes and decode exactly as QuEST: levels (q + 1/2)*step, so the outer level is +-max|x|
 *   and floor(x/step) is round-to-nearest onto the levels.
 *
 * percentile (clipped affine, OSCAR style), two f16 per group: scale_h, then min_h.
 *   r      = wk_kvq_percentile_rank(rho, G) = min(floor(rho*G), G-1) (as the numpy reference); t = the
 *            element of 0-based rank r of the ascending |x| of the GROUP (the reference takes it
 *            over the whole row; the two agree when G equals the head dim).
 *   xc     = clamp(x, -t, t); lo = min xc; hi = max xc;
 *   scale_h = f16((hi - lo) * WK_KVQ_PCT_C[b])   (C = 1/(L-1) in f32); min_h = f16(lo)
 *   d      = fl(xc - min_h) (one rounded f32 subtraction);
 *   u      = clamp(floor(d/scale_h + 1/2), 0, L-1) in exact arithmetic (= count of k in 1..L-1 with
 *            d >= (k - 1/2)*scale_h, an exact product); scale_h == 0 => every u = 0.
 *   decode   min_h + u*scale_h (u*scale_h is exact, so fma or not gives the same float).
 *   min_h is stored rather than a zero point in code units because it makes decode one fma.
 *
 * Packing. Codes are a little-endian bit stream: code i occupies stream bits [i*b, i*b+b), and
 * stream bit j is bit (j%32) of u32 word j/32 (= bit j%8 of byte j/8; the same thing on a
 * little-endian machine). For b = 2 and 4 no code crosses a word; for b = 3 a code at bit offset
 * 30 or 31 continues in the next word, so a shader reads code i as
 *   j = 3i; v = w[j>>5] >> (j&31); if ((j&31) > 29) v |= w[(j>>5)+1] << (32-(j&31)); v &= 7;
 * (a warp unpacking 32 consecutive codes reads 3 whole words). Chosen over bit-planes because it
 * is uniform across b and G (G = 16 at b = 3 is 1.5 words).
 *
 * Group layout (wk_kvq_encode/decode, a self-contained unit for tests and tools): G*b/8 bytes of
 * codes, then the f16 parameters (little-endian), wk_kvq_group_bytes() in all.
 *
 * Block layout (the paged pool): one (layer, head, K or V) slab of ntok tokens of a head
 * vector of dim D (D % G == 0, D*b % 32 == 0 so each token's codes start on a u32 word):
 *   [codes: token t, element i is code index t*D + i of the stream]          ntok*D*b/8 bytes
 *   [params: u16 index (t*(D/G) + g)*P + p, P = params per group (1, or 2: scale then min)]
 * The params region starts on a 4-byte boundary (ntok*D*b/8 is a multiple of 4). */
#ifndef WK_KV_QUANT_H
#define WK_KV_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { WK_KVQ_QUEST = 0, WK_KVQ_PERCENTILE = 1, WK_KVQ_ABSMAX = 2 } wk_kvq_kind;

#define WK_KVQ_RHO_K 0.96f /* default percentile clip for keys */
#define WK_KVQ_RHO_V 0.92f /* default percentile clip for values */
#define WK_KVQ_MAX_GROUP 256

/* Gaussian-MSE-optimal QuEST clip ratios alpha_b, indexed by bits (2..4). */
extern const double WK_KVQ_QUEST_ALPHA[5];
/* f32 constants the shaders must use as the same literals (indexed by bits 2..4):
 *   QUEST_C2: (2*alpha_b/(2^b-1))^2 = 0x1.fb9898p-1, 0x1.5fa92cp-2, 0x1.cc3286p-4
 *   ABSMAX_C: 2/(2^b-1)             = 0x1.555556p-1, 0x1.24924ap-2, 0x1.111112p-3
 *   PCT_C:    1/(2^b-1)             = 0x1.555556p-2, 0x1.24924ap-3, 0x1.111112p-4 */
extern const float WK_KVQ_QUEST_C2[5];
extern const float WK_KVQ_ABSMAX_C[5];
extern const float WK_KVQ_PCT_C[5];

/* True for bits in {2,3,4}, G in {16,32,64,128,256} and a known kind. */
bool wk_kvq_valid(wk_kvq_kind kind, int bits, int G);
const char *wk_kvq_kind_name(wk_kvq_kind kind); /* "quest", "percentile", "absmax" */
int wk_kvq_params_per_group(wk_kvq_kind kind);  /* f16 values per group: 1 or 2 */
size_t wk_kvq_code_bytes(int bits, int G);       /* G*bits/8 */
size_t wk_kvq_group_bytes(wk_kvq_kind kind, int bits, int G);
/* Storage bits per element, honestly counted: (G*b + 16*params) / G. */
double wk_kvq_bits_per_element(wk_kvq_kind kind, int bits, int G);
/* Rank (0-based, ascending |x|) of the percentile clip threshold: min(floor(rho*G), G-1), clamped
 * at 0. Computed once on the host and handed to shaders as an integer. */
int wk_kvq_percentile_rank(float rho, int G);

/* The QuEST constant for a clip factor c (the step is c times the Gaussian-MSE-optimal one):
 * fl(C2[b] * fl(c*c)), one f32 value computed here and handed to shaders as it is (a push
 * constant), so host and device use the same bits. c == 1 or c <= 0 gives C2[b] itself. */
float wk_kvq_quest_c2(int bits, float clip);
/* A format's clip (wk_engine_params.kv_clip, wk_kv_error_format.clip): 0 or 1 (none) for any
 * quantizer, else QuEST only, within [WK_KV_CLIP_MIN, WK_KV_CLIP_MAX]. */
bool wk_kvq_clip_valid(wk_kvq_kind kind, float clip);
/* The one class rule for a format's clip: the main width (bits) takes wk_kvq_quest_c2(bits,
 * clip), a sliding-window class of its own width (swa_own_width) the plain step; 0 means plain. */
void wk_kvq_clip_constants(int bits, bool swa_own_width, float clip, float *quest_c2, float *swa_quest_c2);

/* Quantize one group to unsigned codes (0..2^b-1, one per byte) and f16 parameters; `rho` is used
 * by WK_KVQ_PERCENTILE only. params receives wk_kvq_params_per_group() values. */
void wk_kvq_quantize_group(wk_kvq_kind kind, int bits, int G, float rho, const float *x, uint8_t *codes,
                           uint16_t *params);
/* The same with QuEST's constant given (wk_kvq_quest_c2); quest_c2 <= 0 means C2[b]. Why a clip
 * other than 1 exists: the MSE-optimal step is not the attention-optimal one (docs/wush-kv.md). */
void wk_kvq_quantize_group_c2(wk_kvq_kind kind, int bits, int G, float rho, float quest_c2, const float *x,
                              uint8_t *codes, uint16_t *params);
void wk_kvq_dequantize_group(wk_kvq_kind kind, int bits, int G, const uint8_t *codes, const uint16_t *params,
                             float *y);

/* Bit stream: write/read n codes starting at code index `first` (other bits untouched). */
void wk_kvq_pack(int bits, const uint8_t *codes, size_t n, uint8_t *stream, size_t first);
void wk_kvq_unpack(int bits, const uint8_t *stream, size_t first, size_t n, uint8_t *codes);

/* One group in the group layout: out/in hold wk_kvq_group_bytes() bytes. */
void wk_kvq_encode(wk_kvq_kind kind, int bits, int G, float rho, const float *x, uint8_t *out);
void wk_kvq_encode_c2(wk_kvq_kind kind, int bits, int G, float rho, float quest_c2, const float *x, uint8_t *out);
void wk_kvq_decode(wk_kvq_kind kind, int bits, int G, const uint8_t *in, float *y);

/* Block layout of ntok tokens of dimension D; false if the combination is not representable. */
typedef struct wk_kvq_block_layout {
    size_t code_bytes_per_token;  /* D*b/8 */
    size_t param_bytes_per_token; /* (D/G) * params * 2 */
    size_t params_offset;         /* ntok * code_bytes_per_token */
    size_t bytes;                 /* whole slab */
} wk_kvq_block_layout;
bool wk_kvq_block_layout_get(wk_kvq_kind kind, int bits, int G, int D, int ntok, wk_kvq_block_layout *out);
/* Encode/decode token `tok` (0 <= tok < ntok) of a slab laid out as above. */
void wk_kvq_encode_token(wk_kvq_kind kind, int bits, int G, float rho, int D, int ntok, int tok, const float *x,
                         uint8_t *slab);
void wk_kvq_decode_token(wk_kvq_kind kind, int bits, int G, int D, int ntok, int tok, const uint8_t *slab, float *y);

#endif
