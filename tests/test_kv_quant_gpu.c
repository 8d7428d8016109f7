/* GPU twin test of the KV quantizers: shaders/kv/kv_quant.glsl (through kv_quant_test.comp) must give
 * the same bytes as wk_kvq_encode and the same float bits as wk_kvq_decode, for every kind x bits x
 * G, the encode with a group shared by every width of lanes the subgroup allows (1, 2, 4, ...),
 * over groups built to hit the hard cases (outliers, zeros, constants, denormals, f16 overflow,
 * values exactly on code thresholds, f16 rounding ties, duplicates). Needs a Vulkan device and the
 * validation layer; the pipeline is built here from the embedded SPIR-V (not the engine's table). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_quant.h"
#include "model/quant.h"
#include "spv_kv_quant_test.h"
#include "test_rng.h"
#include "test_engine_env.h"
#include "test_util.h"
#include "vulkan/shader_params.h"
#include "vulkan/vk_device.h"
#include "wushkv/wushkv.h"

#define NGROUPS 4096 /* encoded groups per (kind, bits, G, rho) */
#define NRAND 1024   /* extra decode-only groups of random bytes */
#define SLOT_WORDS 34 /* >= the largest group (256 x 4 bits + 2 f16 = 132 bytes) */
#define MAX_PRINT 8

static const int GROUPS[5] = {16, 32, 64, 128, 256};
static const wk_kvq_kind KINDS[3] = {WK_KVQ_QUEST, WK_KVQ_PERCENTILE, WK_KVQ_ABSMAX};
/* percentile clip levels: the key and value defaults, no clipping, and a strong clip */
static const float RHOS[4] = {WK_KVQ_RHO_K, WK_KVQ_RHO_V, 1.0f, 0.5f};
static const float CLIPS[3] = {1.0f, 1.2f, 0.7f}; /* QuEST: the plain step, the default's, a narrower one */

/* ---- more draws on test_rng.h ---- */
static int rng_int(int n) { return (int)(rng_u64() % (uint64_t)n); }
static double rng_uniform(double a, double b) { return a + (b - a) * rng_unit(); }
static double rng_sign(void) { return (rng_u64() & 1) ? -1.0 : 1.0; }
static float f_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t bits_f(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
/* a random finite f16 value (as float) of magnitude about 10^e, e uniform in [lo, hi] */
static float rng_f16_value(double lo, double hi) {
    return wk_f16_to_f32(wk_f32_to_f16((float)(rng_sign() * pow(10.0, rng_uniform(lo, hi)))));
}

/* ---- test groups ---- */
enum {
    CAT_GAUSS, CAT_HEAVY, CAT_ZERO, CAT_CONST, CAT_TINY, CAT_DENORM_MIX, CAT_HUGE, CAT_TIES, CAT_DUPS,
    CAT_F16_SUB, CAT_F16_MID, CAT_PARAM_TIES, NCAT
};
static const char *CAT_NAME[NCAT] = {"gauss", "heavy", "zero", "const", "tiny", "denorm-mix", "huge", "ties",
                                     "dups", "f16-subnormal", "f16-midpoints", "param-ties"};

/* QuEST ties: elements k*s on the thresholds, with two free elements that bring the sum of squares
 * to G*s^2/C2 so that the group's own step is s (checked afterwards by counting ties). */
/* QuEST's constant of the configuration under test: wk_kvq_quest_c2(bits, its clip). The tie
 * generators aim at the encoder's v2 = C2 * S/G, so they must use the same constant. */
static float quest_c2_now[5];

static void ties_quest(int bits, int G, float *x) {
    const int half = 1 << (bits - 1);
    float s = fabsf(rng_f16_value(-3, 3));
    double budget = G / (double)quest_c2_now[bits];
    for (int i = 2; i < G; i++) {
        int k = rng_int(2 * half - 1) - (half - 1);
        if ((double)k * k > budget - 0.5) k = 0;
        budget -= (double)k * k;
        x[i] = (float)k * s;
    }
    float y = (float)(sqrt(budget / 2.0) * s);
    x[0] = (float)rng_sign() * y;
    x[1] = (float)rng_sign() * y;
}

/* absmax ties: the max element fixes the step; the rest sit on thresholds k*step, |k| < L/2. */
static void ties_absmax(int bits, int G, float *x) {
    const int half = 1 << (bits - 1);
    x[0] = rng_f16_value(-3, 3);
    for (int i = 1; i < G; i++) x[i] = 0.0f;
    uint8_t codes[WK_KVQ_MAX_GROUP];
    uint16_t p[2];
    wk_kvq_quantize_group(WK_KVQ_ABSMAX, bits, G, 0.0f, x, codes, p);
    float step = wk_f16_to_f32(p[0]);
    for (int i = 1; i < G; i++) x[i] = (float)(rng_int(2 * half - 1) - (half - 1)) * step;
}

/* percentile ties: lo = min_h, hi = lo + (L-1)*scale; the middle on d = (k - 1/2)*scale; at least
 * G - rank elements at the larger extreme, so the clip threshold equals it and clips nothing. */
static void ties_pct(int bits, int G, int rank, float *x) {
    const int L = 1 << bits;
    float s = fabsf(rng_f16_value(-3, 2)), mn = rng_f16_value(-2, 2);
    float lo = mn, hi = mn + (float)(L - 1) * s;
    float far = fabsf(hi) >= fabsf(lo) ? hi : lo;
    int nfar = G - rank;
    x[0] = lo;
    x[1] = hi;
    for (int i = 2; i < G; i++) x[i] = i < 2 + nfar ? far : mn + ((float)(1 + rng_int(L - 1)) - 0.5f) * s;
    for (int i = G - 1; i > 0; i--) { /* shuffle: position must not matter */
        int j = rng_int(i + 1);
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

/* A float a near a0 with fl(a * c) == want (the f32 product the quantizer rounds), or 0. */
static float solve_product(float c, float want, double a0) {
    float a = (float)a0;
    for (int d = 0; d < 6; d++, a = nextafterf(a, 0.0f)) {} /* start 6 ulps below */
    for (int d = 0; d < 13; d++, a = nextafterf(a, INFINITY))
        if (a * c == want) return a;
    return 0.0f;
}

/* want = the midpoint between f16 h and h+1 (a tie of the f16 rounding), or one f32 ulp off it */
static float f16_midpoint_target(uint16_t h) {
    float mid = (wk_f16_to_f32(h) + wk_f16_to_f32((uint16_t)(h + 1))) * 0.5f;
    int dir = rng_int(3);
    return dir == 0 ? mid : nextafterf(mid, dir == 1 ? INFINITY : 0.0f);
}

/* The mean square m (S = m*G) whose QuEST v2 = fl(C2*m) is the square of the midpoint between f16
 * h and h+1 (a tie of the step's rounding) or one f32 ulp beside it; 0 if there is none. */
static float quest_tie_mean(int bits, uint16_t h) {
    float mid = (wk_f16_to_f32(h) + wk_f16_to_f32((uint16_t)(h + 1))) * 0.5f, v2 = mid * mid;
    int dir = rng_int(3);
    if (dir) v2 = nextafterf(v2, dir == 1 ? INFINITY : 0.0f);
    return solve_product(quest_c2_now[bits], v2, (double)v2 / quest_c2_now[bits]);
}

/* kv_quant.h's summation tree (restated: the test must know S exactly). */
static float tree_sum_squares(int G, const float *x) {
    float a[WK_KVQ_MAX_GROUP];
    for (int i = 0; i < G; i++) a[i] = x[i] * x[i];
    for (int h = G / 2; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) a[i] = a[i] + a[i + h];
    return a[0];
}

/* A QuEST step tie whose S depends on every rounding of the tree: Gaussian even-index elements
 * (their pairwise sums of squares change if an implementation fuses x*x + y*y or reorders), odd
 * ones zero except x[1], solved so that the root fl(A + fl(x1^2)) is the tie's S exactly. */
static bool quest_tie_tree(int bits, int G, float *x) {
    double sigma = pow(10.0, rng_uniform(-3, 3));
    for (int i = 0; i < G; i++) x[i] = (i & 1) ? 0.0f : (float)(sigma * rng_gauss());
    float A = tree_sum_squares(G, x);
    /* h: the f16 step for S about 2A, so that x1^2 carries about half of S */
    uint16_t h = wk_f32_to_f16(sqrtf(quest_c2_now[bits] * (2.0f * A / (float)G)));
    if (h == 0 || h >= 0x7BFE) return false;
    float m = quest_tie_mean(bits, h);
    if (m == 0.0f) return false;
    float S = m * (float)G, a = sqrtf(S - A);
    for (int d = 0; d < 8; d++) a = nextafterf(a, 0.0f);
    for (int d = 0; d < 17; d++, a = nextafterf(a, INFINITY)) {
        float q = a * a;
        if (A + q == S) {
            x[1] = (float)rng_sign() * a;
            return tree_sum_squares(G, x) == S;
        }
    }
    return false;
}

/* Parameters on (or one f32 ulp beside) an f16 rounding tie, where the exact-arithmetic rules of
 * kv_quant.h decide: QuEST v2 = C2*S/G at an f16 midpoint squared (sqrt guess + correction, ties to
 * even; S = 2^j copies of x0^2, plus optional tiny elements whose squares make S depend on the
 * summation tree); absmax max|x|*C and percentile (hi-lo)*C at an f16 midpoint. false: no solution
 * was found for this draw. */
static bool param_ties(wk_kvq_kind kind, int bits, int G, int rank, float *x) {
    uint16_t h = (uint16_t)rng_int(0x7BFE);
    for (int i = 0; i < G; i++) x[i] = 0.0f;
    if (kind == WK_KVQ_QUEST) {
        if (rng_u64() & 1) return quest_tie_tree(bits, G, x);
        float m = quest_tie_mean(bits, h);
        if (m == 0.0f) return false;
        int n = 1 << rng_int(1 + (int)log2((double)G));
        float sq = m * (float)G / (float)n; /* exact: powers of two */
        float x0 = 0.0f, a = sqrtf(sq); /* an x0 with fl(x0*x0) == sq: about half the floats are one */
        for (int d = 0; d < 3; d++) a = nextafterf(a, 0.0f);
        for (int d = 0; d < 7 && x0 == 0.0f; d++, a = nextafterf(a, INFINITY))
            if (a * a == sq) x0 = a;
        if (x0 == 0.0f) return false;
        for (int i = 0; i < n; i++) x[i] = (float)rng_sign() * x0;
        if (rng_u64() & 1) /* tiny elements: squares of 2^-30..2^-22 of S, summed order-dependently */
            for (int i = n; i < G; i++) x[i] = (float)(rng_sign() * x0 * sqrt(n * ldexp(1.0, -(22 + rng_int(9)))));
    } else if (kind == WK_KVQ_ABSMAX) {
        float want = f16_midpoint_target(h), a = solve_product(WK_KVQ_ABSMAX_C[bits], want, want / (double)WK_KVQ_ABSMAX_C[bits]);
        if (a == 0.0f) return false;
        x[0] = (float)rng_sign() * a;
        for (int i = 1; i < G; i++) x[i] = (float)(rng_uniform(-1, 1) * a);
    } else {
        float want = f16_midpoint_target(h), diff = solve_product(WK_KVQ_PCT_C[bits], want, want / (double)WK_KVQ_PCT_C[bits]);
        if (diff == 0.0f) return false;
        int where = rng_int(3); /* hi - lo == diff exactly in each case */
        float lo = where == 0 ? 0.0f : where == 1 ? -diff : -diff * 0.5f, hi = where == 0 ? diff : where == 1 ? 0.0f : diff * 0.5f;
        float far = fabsf(hi) >= fabsf(lo) ? hi : lo;
        x[0] = lo;
        x[1] = hi;
        for (int i = 2; i < G; i++) x[i] = i < 2 + (G - rank) ? far : (float)rng_uniform(lo, hi);
    }
    for (int i = G - 1; i > 0; i--) {
        int j = rng_int(i + 1);
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
    return true;
}

static void gen_group(int cat, wk_kvq_kind kind, int bits, int G, int rank, float *x) {
    double sigma = pow(10.0, rng_uniform(-4, 4));
    switch (cat) {
    case CAT_GAUSS: {
        double mean = (rng_u64() & 1) ? rng_gauss() * sigma : 0.0; /* off-centre groups for the affine kind */
        for (int i = 0; i < G; i++) x[i] = (float)(mean + sigma * rng_gauss());
        break;
    }
    case CAT_HEAVY: { /* Student t with 1..3 degrees of freedom, plus a few planted outliers */
        int nu = 1 + rng_int(3);
        for (int i = 0; i < G; i++) {
            double c = 0;
            for (int k = 0; k < nu; k++) {
                double g = rng_gauss();
                c += g * g;
            }
            x[i] = (float)(sigma * rng_gauss() / sqrt(c / nu));
        }
        for (int k = 1 + rng_int(3); k > 0; k--) x[rng_int(G)] = (float)(rng_sign() * sigma * pow(10, rng_uniform(1, 3)));
        break;
    }
    case CAT_ZERO:
        for (int i = 0; i < G; i++) x[i] = (rng_u64() & 1) ? -0.0f : 0.0f;
        break;
    case CAT_CONST: {
        float c = (rng_u64() & 3) == 0 ? rng_f16_value(-6, 4.5) : (float)(rng_sign() * pow(10, rng_uniform(-6, 4.5)));
        for (int i = 0; i < G; i++) x[i] = c;
        if (rng_u64() & 1) x[rng_int(G)] = 0.0f;
        break;
    }
    case CAT_TINY: { /* scales from just below f16's range down through f32 denormals */
        double sc = ldexp(1.0, -(20 + rng_int(130)));
        for (int i = 0; i < G; i++) x[i] = (float)(sc * rng_gauss());
        break;
    }
    case CAT_DENORM_MIX: /* normal data with some elements denormal, +-min normal or +-0 */
        for (int i = 0; i < G; i++) x[i] = (float)(sigma * 1e-3 * rng_gauss());
        for (int k = 1 + rng_int(G / 4); k > 0; k--) {
            int r = rng_int(4);
            uint32_t sgn = (rng_u64() & 1) ? 0x80000000u : 0;
            uint32_t b = r == 0 ? (uint32_t)(1 + rng_int(0x7FFFFF)) : r == 1 ? 1u : r == 2 ? 0x800000u : 0u;
            x[rng_int(G)] = f_bits(sgn | b);
        }
        break;
    case CAT_HUGE: { /* around the f16 limit (65504, 65520 rounds to inf) and past it: saturation */
        double top = (rng_u64() & 1) ? 7e4 : 1e6;
        for (int i = 0; i < G; i++) {
            int r = rng_int(6);
            x[i] = r == 0   ? (float)(rng_sign() * 65504.0)
                   : r == 1 ? (float)(rng_sign() * 65520.0)
                   : r == 2 ? (float)(1e4 * rng_gauss())
                            : (float)(rng_sign() * rng_uniform(6e4, top));
        }
        break;
    }
    case CAT_TIES:
        if (kind == WK_KVQ_QUEST) ties_quest(bits, G, x);
        else if (kind == WK_KVQ_ABSMAX) ties_absmax(bits, G, x);
        else ties_pct(bits, G, rank, x);
        break;
    case CAT_DUPS: { /* few distinct values: duplicate order statistics, exact multiples */
        float s = fabsf(rng_f16_value(-3, 3));
        for (int i = 0; i < G; i++) x[i] = (float)(rng_int(7) - 3) * s;
        break;
    }
    case CAT_F16_SUB: { /* steps and scales in f16's subnormal range (2^-24 .. 2^-14) */
        double sc = pow(10.0, rng_uniform(-8, -4));
        for (int i = 0; i < G; i++) x[i] = (float)(sc * rng_gauss());
        break;
    }
    case CAT_PARAM_TIES:
        while (!param_ties(kind, bits, G, rank, x)) {}
        break;
    case CAT_F16_MID: /* values halfway between f16 neighbours: round-to-even of min_h and friends */
        for (int i = 0; i < G; i++) {
            uint16_t h = (uint16_t)(rng_u64() % 0x7BFF);
            float a = wk_f16_to_f32(h), b = wk_f16_to_f32((uint16_t)(h + 1));
            x[i] = (float)rng_sign() * (a + (b - a) * 0.5f);
        }
        break;
    }
}

/* ---- minimal pipeline over the embedded SPIR-V (push constants: wk_pc_kv_quant_test) ---- */
typedef struct {
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkPipeline pipe;
    VkDescriptorPool pool;
    VkDescriptorSet set;
} kernel;

#define VK_TRY(call, what)                                                    \
    do {                                                                      \
        VkResult r_ = (call);                                                 \
        if (r_ != VK_SUCCESS) {                                               \
            fprintf(stderr, "%s failed: %s\n", what, wk_vk_result_name(r_)); \
            return -1;                                                        \
        }                                                                     \
    } while (0)

static int kernel_create(wk_vk *vk, kernel *k, wk_buf *bufs[4]) {
    VkDescriptorSetLayoutBinding b[4];
    for (uint32_t i = 0; i < 4; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = i, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                           .bindingCount = 4, .pBindings = b};
    VK_TRY(vkCreateDescriptorSetLayout(vk->dev, &dci, NULL, &k->dsl), "vkCreateDescriptorSetLayout");
    VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = sizeof(wk_pc_kv_quant_test)};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                      .pSetLayouts = &k->dsl, .pushConstantRangeCount = 1, .pPushConstantRanges = &pcr};
    VK_TRY(vkCreatePipelineLayout(vk->dev, &lci, NULL, &k->layout), "vkCreatePipelineLayout");
    VkShaderModuleCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                    .codeSize = sizeof wk_spv_kv_quant_test, .pCode = wk_spv_kv_quant_test};
    VkShaderModule mod;
    VK_TRY(vkCreateShaderModule(vk->dev, &sci, NULL, &mod), "vkCreateShaderModule");
    /* The subgroup size the host counts groups and lanes with (vk->subgroup_size), pinned as the
     * engine pins it (vk_pipelines.c) where the device lets us: a driver may otherwise pick another
     * width (lavapipe with 512-bit vectors ran this kernel in 8-lane subgroups while reporting 16). */
    const VkPipelineShaderStageRequiredSubgroupSizeCreateInfoEXT req = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO_EXT,
        .requiredSubgroupSize = vk->subgroup_size};
    const bool pin = vk->pin_subgroup && 64 <= (uint64_t)vk->max_workgroup_subgroups * vk->subgroup_size;
    VkComputePipelineCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .pNext = pin ? &req : NULL,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = mod, .pName = "main"},
        .layout = k->layout};
    VkResult r = vkCreateComputePipelines(vk->dev, VK_NULL_HANDLE, 1, &pci, NULL, &k->pipe);
    vkDestroyShaderModule(vk->dev, mod, NULL);
    VK_TRY(r, "vkCreateComputePipelines");
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 4};
    VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 1,
                                      .poolSizeCount = 1, .pPoolSizes = &ps};
    VK_TRY(vkCreateDescriptorPool(vk->dev, &dpi, NULL, &k->pool), "vkCreateDescriptorPool");
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = k->pool, .descriptorSetCount = 1, .pSetLayouts = &k->dsl};
    VK_TRY(vkAllocateDescriptorSets(vk->dev, &ai, &k->set), "vkAllocateDescriptorSets");
    VkDescriptorBufferInfo bi[4];
    VkWriteDescriptorSet w[4];
    for (int i = 0; i < 4; i++) {
        bi[i] = (VkDescriptorBufferInfo){bufs[i]->buf, 0, VK_WHOLE_SIZE};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = k->set,
                                      .dstBinding = (uint32_t)i, .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &bi[i]};
    }
    vkUpdateDescriptorSets(vk->dev, 4, w, 0, NULL);
    return 0;
}

static void kernel_destroy(wk_vk *vk, kernel *k) {
    if (k->pool) vkDestroyDescriptorPool(vk->dev, k->pool, NULL);
    if (k->pipe) vkDestroyPipeline(vk->dev, k->pipe, NULL);
    if (k->layout) vkDestroyPipelineLayout(vk->dev, k->layout, NULL);
    if (k->dsl) vkDestroyDescriptorSetLayout(vk->dev, k->dsl, NULL);
}

static void dispatch(wk_vk *vk, kernel *k, const wk_pc_kv_quant_test *pc, uint32_t n) {
    vkCmdPushConstants(vk->cmd, k->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof *pc, pc);
    vkCmdDispatch(vk->cmd, (n + 63) / 64, 1, 1);
}

/* ---- the comparison ---- */
typedef struct {
    long groups, group_bytes_ok, decoded, decoded_ok, rand_groups, lane_widths;
    long tie_elems, param_ties, denorm_elems, zero_step, sat_param, sub_param, neg_zero_min;
    long cat_groups[NCAT];
} tally;

/* The element of rank r of the ascending |x| (by counting, independent of the sort in kv_quant.c). */
static float abs_rank_value(int G, int r, const float *x) {
    for (int i = 0; i < G; i++) {
        int less = 0, le = 0;
        for (int j = 0; j < G; j++) less += fabsf(x[j]) < fabsf(x[i]), le += fabsf(x[j]) <= fabsf(x[i]);
        if (less <= r && r < le) return fabsf(x[i]);
    }
    return 0.0f;
}

/* Elements exactly on a code threshold of their group (proves the tie cases were reached). */
static long count_ties(wk_kvq_kind kind, int bits, int G, int rank, const float *x, const uint16_t *p) {
    const int L = 1 << bits;
    long n = 0;
    if (kind == WK_KVQ_PERCENTILE) {
        float scale = wk_f16_to_f32(p[0]), mn = wk_f16_to_f32(p[1]), t = abs_rank_value(G, rank, x);
        if (!(scale > 0)) return 0;
        for (int i = 0; i < G; i++) {
            float d = fminf(fmaxf(x[i], -t), t) - mn;
            for (int k = 1; k < L; k++) n += d == ((float)k - 0.5f) * scale;
        }
        return n;
    }
    float step = wk_f16_to_f32(p[0]);
    if (!(step > 0)) return 0;
    for (int i = 0; i < G; i++)
        for (int k = -(L / 2 - 1); k <= L / 2 - 1; k++) n += x[i] == (float)k * step;
    return n;
}

/* v is halfway between two adjacent f16 values (or its square is, for QuEST's v2 = step^2). */
static bool at_f16_tie(float v, bool squared) {
    float a = fabsf(v);
    uint16_t h = (uint16_t)(wk_f32_to_f16(squared ? sqrtf(a) : a) & 0x7FFF);
    for (int d = -1; d <= 0; d++) {
        int lo = (int)h + d;
        if (lo < 0 || lo >= 0x7BFF) continue;
        float mid = (wk_f16_to_f32((uint16_t)lo) + wk_f16_to_f32((uint16_t)(lo + 1))) * 0.5f;
        if (a == (squared ? mid * mid : mid)) return true;
    }
    return false;
}

/* 1 if a parameter of the group was decided by a round-half-to-even tie (the pre-rounding value,
 * recomputed by the documented rule, sits exactly on an f16 midpoint). */
static int param_at_tie(wk_kvq_kind kind, int bits, int G, int rank, const float *x) {
    if (kind == WK_KVQ_QUEST)
        return at_f16_tie(quest_c2_now[bits] * (tree_sum_squares(G, x) * (1.0f / (float)G)), true);
    if (kind == WK_KVQ_ABSMAX) {
        float amax = 0.0f;
        for (int i = 0; i < G; i++) amax = fmaxf(amax, fabsf(x[i]));
        return at_f16_tie(amax * WK_KVQ_ABSMAX_C[bits], false);
    }
    float t = abs_rank_value(G, rank, x), lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < G; i++) {
        float c = fminf(fmaxf(x[i], -t), t);
        lo = fminf(lo, c);
        hi = fmaxf(hi, c);
    }
    return at_f16_tie((hi - lo) * WK_KVQ_PCT_C[bits], false) || at_f16_tie(lo, false);
}

static void hex(const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) fprintf(stderr, "%02x", b[i]);
}

/* One (kind, bits, G, rho) run: NGROUPS generated groups encoded and decoded, NRAND random-byte
 * groups decoded. Returns the mismatches (also counted in the CHECK tally). */
static long run_config(wk_vk *vk, kernel *k, wk_buf *bx, wk_buf *benc, wk_buf *bdec, wk_buf *by,
                       wk_kvq_kind kind, int bits, int G, float rho, float clip, tally *t) {
    const float c2 = kind == WK_KVQ_QUEST ? wk_kvq_quest_c2(bits, clip) : 0.0f;
    quest_c2_now[bits] = wk_kvq_quest_c2(bits, kind == WK_KVQ_QUEST ? clip : 1.0f);
    const int rank = wk_kvq_percentile_rank(rho, G), L = 1 << bits, P = wk_kvq_params_per_group(kind);
    const size_t gb = wk_kvq_group_bytes(kind, bits, G), cb = wk_kvq_code_bytes(bits, G);
    const uint32_t slot = (uint32_t)((gb + 3) / 4);
    float *x = bx->map, *y = by->map;
    uint8_t *enc = benc->map, *dec = bdec->map;
    static uint8_t ref[(NGROUPS + NRAND) * SLOT_WORDS * 4];
    static float yref[WK_KVQ_MAX_GROUP];
    const uint32_t ndec = NGROUPS + NRAND;
    int cats[NGROUPS];

    memset(ref, 0, (size_t)ndec * slot * 4);
    for (int g = 0; g < NGROUPS; g++) {
        float *xg = x + (size_t)g * G;
        cats[g] = g % NCAT;
        gen_group(cats[g], kind, bits, G, rank, xg);
        wk_kvq_encode_c2(kind, bits, G, rho, c2, xg, ref + (size_t)g * slot * 4);
        uint8_t codes[WK_KVQ_MAX_GROUP];
        uint16_t p[2];
        wk_kvq_quantize_group_c2(kind, bits, G, rho, c2, xg, codes, p);
        t->cat_groups[cats[g]]++;
        t->tie_elems += count_ties(kind, bits, G, rank, xg, p);
        t->param_ties += param_at_tie(kind, bits, G, rank, xg);
        for (int i = 0; i < G; i++) t->denorm_elems += fpclassify(xg[i]) == FP_SUBNORMAL;
        t->zero_step += (p[0] & 0x7FFF) == 0;
        for (int q = 0; q < P; q++) {
            t->sat_param += (p[q] & 0x7FFF) == 0x7BFF;
            t->sub_param += (p[q] & 0x7FFF) != 0 && (p[q] & 0x7C00) == 0;
        }
        t->neg_zero_min += P == 2 && p[1] == 0x8000;
    }
    /* Random bytes for the decoder: any codes, any finite f16 params of either sign, except that a
     * symmetric group with a zero step is made what the encoder writes (+0, every code L/2): there
     * the fma decode returns +0 where C's ((u - L/2) + 1/2) * step may return -0 (kv_quant.glsl,
     * wk_kvq_affine). */
    for (uint32_t g = NGROUPS; g < ndec; g++) {
        uint8_t *r = ref + (size_t)g * slot * 4;
        for (size_t i = 0; i < cb; i++) r[i] = (uint8_t)rng_u64();
        for (int q = 0; q < P; q++) {
            uint16_t h = (uint16_t)((rng_u64() % 0x7C00) | ((rng_u64() & 1) ? 0x8000 : 0));
            r[cb + 2 * q] = (uint8_t)h;
            r[cb + 2 * q + 1] = (uint8_t)(h >> 8);
        }
        if (kind != WK_KVQ_PERCENTILE && (r[cb] | (r[cb + 1] & 0x7F)) == 0) {
            uint8_t codes[WK_KVQ_MAX_GROUP];
            r[cb + 1] = 0;
            memset(codes, L / 2, sizeof codes);
            wk_kvq_pack(bits, codes, (size_t)G, r, 0);
        }
    }
    t->rand_groups += NRAND;
    memcpy(dec, ref, (size_t)ndec * slot * 4);

    /* The encode with every width of lanes a group the subgroup allows: 1 (one invocation does
     * it all), 2, 4, ... up to min(G, subgroup, 64); the decode once, with the first. */
    char err[256];
    const uint32_t sg = vk->subgroup_size, per_wg = sg <= 64 ? 64 / sg : 1; /* groups a 64-lane workgroup encodes */
    long bad = 0;
    for (uint32_t lanes = 1; lanes <= (uint32_t)G && lanes <= sg && lanes <= 64; lanes *= 2) {
        memset(enc, 0xA5, (size_t)NGROUPS * slot * 4); /* poison: every byte must be written */
        wk_pc_kv_quant_test pe = {.mode = 0, .kind = (int32_t)kind, .bits = bits, .group = G, .rank = rank,
                                  .ngroups = NGROUPS, .slot = slot, .quest_c2 = c2, .lanes = lanes};
        wk_pc_kv_quant_test pd = pe;
        pd.mode = 1;
        pd.ngroups = ndec;
        if (wk_vk_begin(vk, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
        vkCmdBindPipeline(vk->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipe);
        vkCmdBindDescriptorSets(vk->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, k->layout, 0, 1, &k->set, 0, NULL);
        dispatch(vk, k, &pe, (NGROUPS + per_wg - 1) / per_wg * 64);
        if (lanes == 1) dispatch(vk, k, &pd, ndec); /* independent of the encode: it reads the C bytes */
        wk_vk_barrier(vk);                          /* shader writes -> host reads */
        if (wk_vk_submit_wait(vk, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
        for (int g = 0; g < NGROUPS; g++) {
            const uint8_t *a = enc + (size_t)g * slot * 4, *b = ref + (size_t)g * slot * 4;
            t->groups++;
            /* the whole slot: the group bytes and the zero tail of its last word */
            if (memcmp(a, b, (size_t)slot * 4) == 0) {
                t->group_bytes_ok++;
            } else if (bad++ < MAX_PRINT) {
                fprintf(stderr, "encode mismatch %s b=%d G=%d rho=%g clip=%g lanes %u group %d (%s):\n  gpu ",
                        wk_kvq_kind_name(kind), bits, G, (double)rho, (double)clip, lanes, g, CAT_NAME[cats[g]]);
                hex(a, gb);
                fprintf(stderr, "\n  c   ");
                hex(b, gb);
                fprintf(stderr, "\n  x[0..3] = %a %a %a %a\n", (double)x[(size_t)g * G], (double)x[(size_t)g * G + 1],
                        (double)x[(size_t)g * G + 2], (double)x[(size_t)g * G + 3]);
            }
        }
        t->lane_widths++;
    }
    for (uint32_t g = 0; g < ndec; g++) {
        wk_kvq_decode(kind, bits, G, ref + (size_t)g * slot * 4, yref);
        const float *yg = y + (size_t)g * G;
        for (int i = 0; i < G; i++) {
            t->decoded++;
            if (bits_f(yg[i]) == bits_f(yref[i])) {
                t->decoded_ok++;
            } else if (bad++ < MAX_PRINT) {
                fprintf(stderr, "decode mismatch %s b=%d G=%d group %u elem %d: gpu %a c %a\n", wk_kvq_kind_name(kind),
                        bits, G, g, i, (double)yg[i], (double)yref[i]);
            }
        }
    }
    return bad;
}

int main(void) {
    char err[WK_ERRMSG_LEN] = "";
    wk_vk vk;
    if (wk_vk_init(&vk, test_engine_env_device(), true, false, err, sizeof err)) {
        fprintf(stderr, "vulkan: %s\n", err);
        return 1;
    }
    printf("device: %s\n", vk.props.deviceName);
    const size_t nf = (size_t)(NGROUPS + NRAND) * WK_KVQ_MAX_GROUP, nw = (size_t)(NGROUPS + NRAND) * SLOT_WORDS;
    wk_buf bx, benc, bdec, by;
    memset(&bx, 0, sizeof bx), memset(&benc, 0, sizeof benc), memset(&bdec, 0, sizeof bdec), memset(&by, 0, sizeof by);
    kernel k;
    memset(&k, 0, sizeof k);
    int rc = wk_vk_buffer_create(&vk, &bx, nf * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(&vk, &benc, nw * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(&vk, &bdec, nw * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(&vk, &by, nf * 4, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, sizeof err);
    if (rc) fprintf(stderr, "buffers: %s\n", err);
    wk_buf *bufs[4] = {&bx, &benc, &bdec, &by};
    if (!rc) rc = kernel_create(&vk, &k, bufs);
    CHECK(rc == 0);

    tally all;
    memset(&all, 0, sizeof all);
    rng_seed(20250419);
    for (int ki = 0; ki < 3 && rc == 0; ki++) {
        const wk_kvq_kind kind = KINDS[ki];
        for (int bits = 2; bits <= 4; bits++) {
            for (int gi = 0; gi < 5; gi++) {
                const int G = GROUPS[gi];
                /* percentile: each clip quantile; QuEST: each clip factor (its constant comes
                 * from the host as a push constant) */
                const int nvar = kind == WK_KVQ_PERCENTILE ? 4 : kind == WK_KVQ_QUEST ? 3 : 1;
                for (int ri = 0; ri < nvar; ri++) {
                    tally t;
                    memset(&t, 0, sizeof t);
                    const float rho = kind == WK_KVQ_PERCENTILE ? RHOS[ri] : 0.0f;
                    const float clip = kind == WK_KVQ_QUEST ? CLIPS[ri] : 1.0f;
                    long bad = run_config(&vk, &k, &bx, &benc, &bdec, &by, kind, bits, G, rho, clip, &t);
                    CHECK_EQ_INT(bad, 0);
                    CHECK_EQ_INT(t.group_bytes_ok, t.groups);
                    CHECK_EQ_INT(t.decoded_ok, t.decoded);
                    /* every configuration must reach the f16 rounding ties of its parameters */
                    CHECK(t.param_ties >= 20);
                    /* every lane width from 1 to min(G, subgroup, 64) encoded */
                    long widths = 0;
                    for (uint32_t w = 1; w <= (uint32_t)G && w <= vk.subgroup_size && w <= 64; w *= 2) widths++;
                    CHECK_EQ_INT(t.lane_widths, widths);
                    printf("%-10s b=%d G=%3d rho=%.2f clip=%.1f  encode %ld/%ld groups (%ld lane widths)  decode %ld/%ld elems  "
                           "threshold-ties %ld  param-ties %ld  denormals %ld  zero-step %ld  saturated %ld  "
                           "f16-subnormal %ld\n",
                           wk_kvq_kind_name(kind), bits, G, (double)rho, (double)clip,
                           t.group_bytes_ok, t.groups, t.lane_widths, t.decoded_ok, t.decoded, t.tie_elems, t.param_ties,
                           t.denorm_elems, t.zero_step, t.sat_param, t.sub_param);
                    all.groups += t.groups, all.group_bytes_ok += t.group_bytes_ok, all.decoded += t.decoded;
                    all.decoded_ok += t.decoded_ok, all.rand_groups += t.rand_groups, all.tie_elems += t.tie_elems;
                    all.denorm_elems += t.denorm_elems, all.zero_step += t.zero_step, all.sat_param += t.sat_param;
                    all.sub_param += t.sub_param, all.neg_zero_min += t.neg_zero_min, all.param_ties += t.param_ties;
                    for (int c = 0; c < NCAT; c++) all.cat_groups[c] += t.cat_groups[c];
                }
            }
        }
    }
    printf("total: encode %ld/%ld groups byte-identical; decode %ld/%ld floats bit-identical (%ld random-byte "
           "groups)\n",
           all.group_bytes_ok, all.groups, all.decoded_ok, all.decoded, all.rand_groups);
    printf("coverage: %ld elements on code thresholds, %ld groups with a parameter on an f16 rounding tie, "
           "%ld denormal inputs, %ld zero steps, %ld saturated params, %ld f16-subnormal params, %ld min_h = -0\n",
           all.tie_elems, all.param_ties, all.denorm_elems, all.zero_step, all.sat_param, all.sub_param,
           all.neg_zero_min);
    printf("groups per category:");
    for (int c = 0; c < NCAT; c++) printf(" %s %ld", CAT_NAME[c], all.cat_groups[c]);
    printf("\n");
    /* the generators must actually reach the hard cases, or the test proves less than it claims */
    CHECK(all.tie_elems > 10000);
    CHECK(all.denorm_elems > 1000);
    CHECK(all.zero_step > 100 && all.sat_param > 100 && all.sub_param > 100 && all.neg_zero_min > 0);

    kernel_destroy(&vk, &k);
    for (int i = 0; i < 4; i++) wk_vk_buffer_destroy(&vk, bufs[i]);
    wk_vk_destroy(&vk);
    printf("validation messages: %d\n", vk.validation_messages);
    CHECK_EQ_INT(vk.validation_messages, 0);
    TEST_MAIN_END();
}
