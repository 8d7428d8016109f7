/* Pipeline table: for every embedded shader its bindings (texel view or storage buffer), its
 * push-constant size and its workgroup-size specialisation; each pipeline is created on its first
 * dispatch, with whatever specialisation was set by then; plus a descriptor-set cache, since a
 * model's steps bind the same few hundred (pipeline, buffers) tuples over and over. */
#include "vulkan/vk_pipelines.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan/shader_params.h"
#include "spv_add_norm.h"
#include "spv_attention_paged.h"
#include "spv_attention_reduce.h"
#include "spv_kv_store_window.h"
#include "spv_kv_store_f16.h"
#include "spv_kv_store_quant.h"
#include "spv_kv_store_quant_lanes.h"
#include "spv_kv_transform.h"
#include "spv_kv_transform_noshuffle.h"
#include "spv_kv_transform_rope.h"
#include "spv_kv_transform_rope_noshuffle.h"
#include "spv_embed_f16.h"
#include "spv_embed_q8a.h"
#include "spv_embed_q8h.h"
#include "spv_glu.h"
#include "spv_matmul_f16.h"
#include "spv_matmul_noshuffle_f16.h"
#include "spv_matmul_noshuffle_q8a.h"
#include "spv_matmul_noshuffle_q8h.h"
#include "spv_matmul_q8a.h"
#include "spv_matmul_q8h.h"
#include "spv_matmul_tiled_f16.h"
#include "spv_matmul_tiled_q8a.h"
#include "spv_matmul_tiled_q8h.h"
#include "spv_matvec_f16.h"
#include "spv_matvec_q8a.h"
#include "spv_matvec_q8h.h"
#include "spv_qk_norm_rope.h"
#include "spv_rmsnorm.h"
#include "wushkv/wushkv.h"

#define T 'T' /* uniform texel buffer */
#define S 'S' /* storage buffer */
#define I 'I' /* storage texel buffer (the KV pool: past the storage-buffer range limit) */

typedef struct {
    const char *name;
    const uint32_t *spirv;
    size_t spirv_bytes;
    const char *bindings; /* one letter per binding */
    uint32_t push_size;
    bool subgroup_wg;     /* local_size_x (constant 0) = subgroup size */
} pipe_spec;

#define SPV(x) x, sizeof(x)
static const pipe_spec specs[WK_PIPE_COUNT] = {
    [WK_PIPE_EMBED_Q8A] = {"embed_q8a", SPV(wk_spv_embed_q8a), "TTSS", sizeof(wk_pc_embed), false},
    [WK_PIPE_EMBED_F16] = {"embed_f16", SPV(wk_spv_embed_f16), "TTSS", sizeof(wk_pc_embed), false},
    [WK_PIPE_EMBED_Q8H] = {"embed_q8h", SPV(wk_spv_embed_q8h), "TTSS", sizeof(wk_pc_embed), false},
    [WK_PIPE_RMSNORM] = {"rmsnorm", SPV(wk_spv_rmsnorm), "SSS", sizeof(wk_pc_rmsnorm), true},
    [WK_PIPE_ADD_NORM] = {"add_norm", SPV(wk_spv_add_norm), "SSSSS", sizeof(wk_pc_add_norm), true},
    [WK_PIPE_MATMUL_Q8A] = {"matmul_q8a", SPV(wk_spv_matmul_q8a), "TTTS", sizeof(wk_pc_matmul), false},
    [WK_PIPE_MATMUL_F16] = {"matmul_f16", SPV(wk_spv_matmul_f16), "TTTS", sizeof(wk_pc_matmul), false},
    [WK_PIPE_MATMUL_Q8H] = {"matmul_q8h", SPV(wk_spv_matmul_q8h), "TTTS", sizeof(wk_pc_matmul), false},
    [WK_PIPE_MATMUL_GLU_Q8A] = {"matmul_glu_q8a", SPV(wk_spv_matmul_q8a), "TTTS", sizeof(wk_pc_matmul), false},
    [WK_PIPE_MATMUL_GLU_F16] = {"matmul_glu_f16", SPV(wk_spv_matmul_f16), "TTTS", sizeof(wk_pc_matmul), false},
    [WK_PIPE_MATMUL_GLU_Q8H] = {"matmul_glu_q8h", SPV(wk_spv_matmul_q8h), "TTTS", sizeof(wk_pc_matmul), false},
    [WK_PIPE_MATMUL_TILED_Q8A] = {"matmul_tiled_q8a", SPV(wk_spv_matmul_tiled_q8a), "TTTS", sizeof(wk_pc_matmul), false},
    [WK_PIPE_MATMUL_TILED_F16] = {"matmul_tiled_f16", SPV(wk_spv_matmul_tiled_f16), "TTTS", sizeof(wk_pc_matmul), false},
    [WK_PIPE_MATMUL_TILED_Q8H] = {"matmul_tiled_q8h", SPV(wk_spv_matmul_tiled_q8h), "TTTS", sizeof(wk_pc_matmul), false},
    [WK_PIPE_MATVEC_Q8A] = {"matvec_q8a", SPV(wk_spv_matvec_q8a), "TTTSSS", sizeof(wk_pc_matmul), true},
    [WK_PIPE_MATVEC_F16] = {"matvec_f16", SPV(wk_spv_matvec_f16), "TTTSSS", sizeof(wk_pc_matmul), true},
    [WK_PIPE_MATVEC_Q8H] = {"matvec_q8h", SPV(wk_spv_matvec_q8h), "TTTSSS", sizeof(wk_pc_matmul), true},
    [WK_PIPE_MATVEC_GLU_Q8A] = {"matvec_glu_q8a", SPV(wk_spv_matvec_q8a), "TTTSSS", sizeof(wk_pc_matmul), true},
    [WK_PIPE_MATVEC_GLU_F16] = {"matvec_glu_f16", SPV(wk_spv_matvec_f16), "TTTSSS", sizeof(wk_pc_matmul), true},
    [WK_PIPE_MATVEC_GLU_Q8H] = {"matvec_glu_q8h", SPV(wk_spv_matvec_q8h), "TTTSSS", sizeof(wk_pc_matmul), true},
    [WK_PIPE_MATVEC_QKV_Q8A] = {"matvec_qkv_q8a", SPV(wk_spv_matvec_q8a), "TTTSSS", sizeof(wk_pc_matmul), true},
    [WK_PIPE_MATVEC_QKV_F16] = {"matvec_qkv_f16", SPV(wk_spv_matvec_f16), "TTTSSS", sizeof(wk_pc_matmul), true},
    [WK_PIPE_MATVEC_QKV_Q8H] = {"matvec_qkv_q8h", SPV(wk_spv_matvec_q8h), "TTTSSS", sizeof(wk_pc_matmul), true},
    [WK_PIPE_QK_NORM_ROPE] = {"qk_norm_rope", SPV(wk_spv_qk_norm_rope), "SSSSTSSS", sizeof(wk_pc_qk_norm_rope), true},
    [WK_PIPE_ATTENTION_BULK] = {"attention_bulk", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_BULK_SWA] = {"attention_bulk_swa", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_WINDOWS] = {"attention_windows", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_WINDOWS_SWA] = {"attention_windows_swa", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_DECODE] = {"attention_decode", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_DECODE_SWA] = {"attention_decode_swa", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_BULK_WIDE] = {"attention_bulk_wide", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_WINDOWS_WIDE] = {"attention_windows_wide", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_DECODE_WIDE] = {"attention_decode_wide", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_DECODE_LANES] = {"attention_decode_lanes", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_DECODE_LANES_SWA] = {"attention_decode_lanes_swa", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_DECODE_LANES_WIDE] = {"attention_decode_lanes_wide", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_BULK_LANES] = {"attention_bulk_lanes", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_BULK_LANES_SWA] = {"attention_bulk_lanes_swa", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_ATTENTION_BULK_LANES_WIDE] = {"attention_bulk_lanes_wide", SPV(wk_spv_attention_paged), "TSSTSSSTTT", sizeof(wk_pc_attention_paged), true},
    [WK_PIPE_KV_STORE_WINDOW] = {"kv_store_window", SPV(wk_spv_kv_store_window), "SSSI", sizeof(wk_pc_kv_store_window), false},
    [WK_PIPE_ATTENTION_REDUCE] = {"attention_reduce", SPV(wk_spv_attention_reduce), "TS", sizeof(wk_pc_attention_reduce), true},
    [WK_PIPE_KV_STORE_QUANT] = {"kv_store_quant", SPV(wk_spv_kv_store_quant), "SSSSISSS", sizeof(wk_pc_kv_store_quant), true},
    [WK_PIPE_KV_STORE_QUANT_LANES] = {"kv_store_quant_lanes", SPV(wk_spv_kv_store_quant_lanes), "SSSSISSS",
                                      sizeof(wk_pc_kv_store_quant), true},
    [WK_PIPE_KV_TRANSFORM] = {"kv_transform", SPV(wk_spv_kv_transform), "SSTT", sizeof(wk_pc_kv_transform), true},
    [WK_PIPE_KV_TRANSFORM_DECODE] = {"kv_transform_decode", SPV(wk_spv_kv_transform), "SSTT", sizeof(wk_pc_kv_transform), true},
    [WK_PIPE_KV_TRANSFORM_DECODE_ROPE] = {"kv_transform_decode_rope", SPV(wk_spv_kv_transform_rope), "SSTTSSTS",
                                          sizeof(wk_pc_kv_transform), true},
    [WK_PIPE_KV_STORE_F16] = {"kv_store_f16", SPV(wk_spv_kv_store_f16), "SSSSI", sizeof(wk_pc_kv_store_f16), false},
    [WK_PIPE_GLU] = {"glu", SPV(wk_spv_glu), "SSS", sizeof(wk_pc_glu), false},
};

/* matmul.comp's and kv_transform.comp's modules without subgroup shuffles, for a device that
 * cannot run the ones in specs (wk_pipelines.matmul_shuffle); empty for every other pipeline. */
static const struct {
    const uint32_t *spirv;
    size_t spirv_bytes;
} noshuffle_spv[WK_PIPE_COUNT] = {
    [WK_PIPE_MATMUL_Q8A] = {SPV(wk_spv_matmul_noshuffle_q8a)},
    [WK_PIPE_MATMUL_F16] = {SPV(wk_spv_matmul_noshuffle_f16)},
    [WK_PIPE_MATMUL_Q8H] = {SPV(wk_spv_matmul_noshuffle_q8h)},
    [WK_PIPE_MATMUL_GLU_Q8A] = {SPV(wk_spv_matmul_noshuffle_q8a)},
    [WK_PIPE_MATMUL_GLU_F16] = {SPV(wk_spv_matmul_noshuffle_f16)},
    [WK_PIPE_MATMUL_GLU_Q8H] = {SPV(wk_spv_matmul_noshuffle_q8h)},
    [WK_PIPE_KV_TRANSFORM] = {SPV(wk_spv_kv_transform_noshuffle)},
    [WK_PIPE_KV_TRANSFORM_DECODE] = {SPV(wk_spv_kv_transform_noshuffle)},
    [WK_PIPE_KV_TRANSFORM_DECODE_ROPE] = {SPV(wk_spv_kv_transform_rope_noshuffle)},
};
#undef SPV

/* The attention's GPU variant of the prefill bulk pass (constant 9 with pass 1). */
static bool attn_bulk_lanes_of(wk_pipe_id id) {
    return id == WK_PIPE_ATTENTION_BULK_LANES || id == WK_PIPE_ATTENTION_BULK_LANES_SWA ||
           id == WK_PIPE_ATTENTION_BULK_LANES_WIDE;
}

/* The attention's GPU variants (constant 9: bulk keys a key per lane). */
static bool attn_lanes_of(wk_pipe_id id) {
    return id == WK_PIPE_ATTENTION_DECODE_LANES || id == WK_PIPE_ATTENTION_DECODE_LANES_SWA ||
           id == WK_PIPE_ATTENTION_DECODE_LANES_WIDE || attn_bulk_lanes_of(id);
}

/* The attention's rows per query tile (constant 5) for the decode pipelines; 0 leaves the shader's. */
static uint32_t tile_rows_of(wk_pipe_id id) {
    return id == WK_PIPE_ATTENTION_DECODE || id == WK_PIPE_ATTENTION_DECODE_SWA || id == WK_PIPE_ATTENTION_DECODE_WIDE ||
                   (attn_lanes_of(id) && !attn_bulk_lanes_of(id))
               ? WK_ATTN_DECODE_ROWS
               : 0;
}

/* The attention's pass (constant 7): 1 the bulk, 2 the windows; 0 (all keys) for the decode pipelines. */
static uint32_t attn_pass_of(wk_pipe_id id) {
    return id == WK_PIPE_ATTENTION_BULK || id == WK_PIPE_ATTENTION_BULK_SWA || id == WK_PIPE_ATTENTION_BULK_WIDE ||
                   attn_bulk_lanes_of(id)
               ? 1
           : id == WK_PIPE_ATTENTION_WINDOWS || id == WK_PIPE_ATTENTION_WINDOWS_SWA ||
                   id == WK_PIPE_ATTENTION_WINDOWS_WIDE
               ? 2
               : 0;
}

/* The pipelines built from matmul.comp and kv_transform.comp: the ones with a second module, without shuffles. */
static bool has_noshuffle_module(wk_pipe_id id) { return noshuffle_spv[id].spirv != NULL; }

static bool is_matvec(wk_pipe_id id) {
    return id >= WK_PIPE_MATVEC_Q8A && id <= WK_PIPE_MATVEC_QKV_Q8H;
}

/* A subgroup-sized pipeline's workgroup: one subgroup, or the matvec's several. */
static uint32_t wg_size_of(const wk_vk *vk, const wk_pipelines *p, wk_pipe_id id) {
    return vk->subgroup_size * (is_matvec(id) ? p->matvec_subgroups : 1);
}

/* matvec's and matmul's outputs (their constant 2, SC_MODE): 1 the gate/up pipelines, 2 the
 * matvec's q/k/v split; 0 plain. */
static uint32_t matvec_mode_of(wk_pipe_id id) {
    return (id >= WK_PIPE_MATVEC_GLU_Q8A && id <= WK_PIPE_MATVEC_GLU_Q8H) ||
                   (id >= WK_PIPE_MATMUL_GLU_Q8A && id <= WK_PIPE_MATMUL_GLU_Q8H)
               ? 1
           : id >= WK_PIPE_MATVEC_QKV_Q8A && id <= WK_PIPE_MATVEC_QKV_Q8H ? 2
                                                                          : 0;
}

const char *wk_pipe_name(wk_pipe_id id) { return id < WK_PIPE_COUNT ? specs[id].name : "?"; }

#define VKCALL(expr, what)                                   \
    do {                                                     \
        VkResult r_ = (expr);                                \
        if (r_ != VK_SUCCESS) {                              \
            snprintf(err, errlen, "%s (%s) failed: %s", what, spec->name, wk_vk_result_name(r_)); \
            return WK_ERR_VULKAN;                            \
        }                                                    \
    } while (0)

/* The pipeline of `id` on its existing layout. Specialisation constants: 0 the workgroup size
 * (subgroup_wg; the matvec's: that times its subgroups), 1 matvec rows, 2 matvec's and matmul's outputs (matvec_mode_of), 3 its subgroups, 5 the attention tile rows (tile_rows_of), 7 its pass (attn_pass_of), 9 its GPU variant (attn_lanes_of), 2..4, 6 and 8 `extra`,
 * what a shader specialises on (attention_paged: the KV format's kind, bits, group, a lane's
 * chunks of a head and the wide keys' bits; kv_transform: its block and tokens a workgroup); NULL leaves the shader's defaults,
 * which read those from the push constants. Constants a shader does not declare are ignored. */
static int create_pipeline(wk_vk *vk, wk_pipelines *p, wk_pipe_id id, const int32_t extra[5], char *err,
                           size_t errlen) {
    const pipe_spec *spec = &specs[id];
    /* A workgroup the device cannot run is refused here: drivers need not refuse it themselves
     * (lavapipe builds the pipeline), and the first dispatch would then fail or hang. Any failure
     * leaves p->pipe[id] as it was. */
    const VkPhysicalDeviceLimits *lim = &vk->props.limits;
    const uint32_t wg = wg_size_of(vk, p, id);
    if (spec->subgroup_wg && (wg == 0 || wg > lim->maxComputeWorkGroupSize[0] || wg > lim->maxComputeWorkGroupInvocations)) {
        snprintf(err, errlen, "pipeline %s: a workgroup of %u invocations exceeds device %s's limit (%u)", spec->name,
                 wg, vk->props.deviceName, lim->maxComputeWorkGroupSize[0]);
        return WK_ERR_UNSUPPORTED;
    }
    const bool noshuffle = noshuffle_spv[id].spirv && !p->matmul_shuffle;
    VkShaderModuleCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                    .codeSize = noshuffle ? noshuffle_spv[id].spirv_bytes : spec->spirv_bytes,
                                    .pCode = noshuffle ? noshuffle_spv[id].spirv : spec->spirv};
    VkShaderModule mod;
    VKCALL(vkCreateShaderModule(vk->dev, &sci, NULL, &mod), "vkCreateShaderModule");
    /* One 32-bit value per constant set, in the order added. */
    uint32_t spec_data[12];
    VkSpecializationMapEntry entries[12];
    uint32_t n = 0;
#define SPEC(constant_id, value) \
    (entries[n] = (VkSpecializationMapEntry){(constant_id), n * 4, 4}, spec_data[n++] = (uint32_t)(value))
    SPEC(0, wg);
    SPEC(1, p->matvec_rows);
    if (extra) SPEC(2, extra[0]), SPEC(3, extra[1]), SPEC(4, extra[2]), SPEC(6, extra[3]), SPEC(8, extra[4]);
    else if (matvec_mode_of(id)) SPEC(2, matvec_mode_of(id));
    if (is_matvec(id)) SPEC(3, p->matvec_subgroups);
    const uint32_t tile_rows = tile_rows_of(id);
    if (tile_rows) SPEC(5, tile_rows);
    const uint32_t pass = attn_pass_of(id);
    if (pass) SPEC(7, pass);
    if (attn_lanes_of(id)) SPEC(9, 1);
#undef SPEC
    VkSpecializationInfo si = {.mapEntryCount = n, .pMapEntries = entries, .dataSize = n * 4, .pData = spec_data};
    /* The subgroup size every shader assumes (wk_vk.subgroup_size): pinned where the device lets
     * us, with full subgroups for the workgroups made of whole subgroups, so a driver that would
     * pick another width cannot split a workgroup's reductions and shuffles. A pinned size must
     * leave room for the workgroup (the largest fixed one: matmul_tiled's 256). matmul.comp's 64
     * lanes are whole subgroups where the size divides them (its shuffles work in aligned runs of
     * WK_MATMUL_WG lanes of one subgroup). */
    const bool pin = vk->pin_subgroup &&
                     (spec->subgroup_wg ? wg : 256u) <= (uint64_t)vk->max_workgroup_subgroups * vk->subgroup_size;
    const bool matmul_full = has_noshuffle_module(id) && (WK_MATMUL_WG * WK_MATMUL_WG) % vk->subgroup_size == 0;
    const VkPipelineShaderStageRequiredSubgroupSizeCreateInfoEXT req = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO_EXT,
        .requiredSubgroupSize = vk->subgroup_size};
    VkComputePipelineCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .pNext = pin ? &req : NULL,
                  .flags = pin && (spec->subgroup_wg || matmul_full)
                               ? VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT_EXT
                               : 0,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = mod, .pName = "main",
                  .pSpecializationInfo = spec->subgroup_wg || extra || tile_rows || pass || matvec_mode_of(id) ? &si : NULL},
        .layout = p->layout[id]};
    VkPipeline pipe = VK_NULL_HANDLE;
    VkResult r = vkCreateComputePipelines(vk->dev, VK_NULL_HANDLE, 1, &pci, NULL, &pipe);
    vkDestroyShaderModule(vk->dev, mod, NULL);
    VKCALL(r, "vkCreateComputePipelines");
    p->pipe[id] = pipe;
    return 0;
}

/* Sets the specialisation of `id` for its next creation, dropping a pipeline made without it. */
static void set_spec(wk_vk *vk, wk_pipelines *p, wk_pipe_id id, const int32_t c[5]) {
    memcpy(p->spec[id], c, sizeof p->spec[id]);
    p->specialized[id] = true;
    if (p->pipe[id]) vkDestroyPipeline(vk->dev, p->pipe[id], NULL);
    p->pipe[id] = VK_NULL_HANDLE;
}

static int create_one(wk_vk *vk, wk_pipelines *p, wk_pipe_id id, char *err, size_t errlen) {
    const pipe_spec *spec = &specs[id];
    VkDescriptorSetLayoutBinding b[WK_MAX_BINDINGS];
    uint32_t n = (uint32_t)strlen(spec->bindings);
    for (uint32_t i = 0; i < n; i++)
        b[i] = (VkDescriptorSetLayoutBinding){
            .binding = i,
            .descriptorType = spec->bindings[i] == T   ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
                              : spec->bindings[i] == I ? VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER
                                                       : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            .descriptorCount = 1,
            .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                           .bindingCount = n, .pBindings = b};
    VKCALL(vkCreateDescriptorSetLayout(vk->dev, &dci, NULL, &p->dsl[id]), "vkCreateDescriptorSetLayout");
    VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = spec->push_size};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                      .pSetLayouts = &p->dsl[id], .pushConstantRangeCount = 1,
                                      .pPushConstantRanges = &pcr};
    VKCALL(vkCreatePipelineLayout(vk->dev, &lci, NULL, &p->layout[id]), "vkCreatePipelineLayout");
    return 0;
}

/* Whether matmul.comp's shuffle module runs on the device: it shuffles within aligned runs of
 * WK_MATMUL_WG lanes, so the subgroup must hold whole runs. */
static bool matmul_shuffle_fits(const wk_vk *vk) {
    return (vk->subgroup_ops & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) && (vk->subgroup_ops & VK_SUBGROUP_FEATURE_VOTE_BIT) &&
           vk->subgroup_size % WK_MATMUL_WG == 0;
}

int wk_pipelines_create(wk_vk *vk, wk_pipelines *p, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    p->matvec_rows = 16;
    p->matvec_subgroups = 1;
    p->matmul_shuffle = matmul_shuffle_fits(vk);
    for (int id = 0; id < WK_PIPE_COUNT; id++) {
        int rc = create_one(vk, p, (wk_pipe_id)id, err, errlen);
        if (rc) {
            wk_pipelines_destroy(vk, p);
            return rc;
        }
    }
    p->cache_cap = 8192;
    p->cache = calloc(p->cache_cap, sizeof *p->cache);
    VkDescriptorPoolSize sizes[3] = {{VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, p->cache_cap * 4},
                                     {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, p->cache_cap * 6},
                                     {VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER, p->cache_cap}};
    VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .maxSets = p->cache_cap, .poolSizeCount = 3, .pPoolSizes = sizes};
    VkResult r = p->cache ? vkCreateDescriptorPool(vk->dev, &dpi, NULL, &p->pool) : VK_ERROR_OUT_OF_HOST_MEMORY;
    if (r != VK_SUCCESS) {
        snprintf(err, errlen, "vkCreateDescriptorPool failed: %s", wk_vk_result_name(r));
        wk_pipelines_destroy(vk, p);
        return WK_ERR_VULKAN;
    }
    return 0;
}

void wk_pipelines_enable_profile(wk_vk *vk, wk_pipelines *p) {
    if (p->queries || !vk->props.limits.timestampComputeAndGraphics) return;
    VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                 .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = 4096};
    p->profile = vkCreateQueryPool(vk->dev, &qci, NULL, &p->queries) == VK_SUCCESS;
}

int wk_pipelines_specialize_kv(wk_vk *vk, wk_pipelines *p, wk_attn_set set, int kind, int bits, int key_bits, int group,
                               int head_dim, char *err, size_t errlen) {
    (void)err, (void)errlen; /* creation, and its errors, come with the first dispatch */
    const uint32_t sg = vk->subgroup_size ? vk->subgroup_size : 1;
    const int32_t kv[5] = {kind, bits, group, (int32_t)wk_attn_lane_chunks((uint32_t)head_dim, sg), key_bits};
    const wk_attn_pipes pipes = wk_attn_pipes_of(set);
    set_spec(vk, p, pipes.bulk, kv);
    set_spec(vk, p, pipes.windows, kv);
    set_spec(vk, p, pipes.decode, kv);
    set_spec(vk, p, pipes.decode_lanes, kv);
    set_spec(vk, p, pipes.bulk_lanes, kv);
    return 0;
}

/* (vk_pipelines.h) */
bool wk_pipelines_matvec_fits(const wk_vk *vk, uint32_t subgroups) {
    const VkPhysicalDeviceLimits *lim = &vk->props.limits;
    const uint64_t wg = (uint64_t)vk->subgroup_size * subgroups;
    return subgroups > 0 && wg <= lim->maxComputeWorkGroupSize[0] && wg <= lim->maxComputeWorkGroupInvocations;
}

/* Destroys the created pipelines `which` picks; their next dispatch creates them anew. */
static void drop_pipelines(wk_vk *vk, wk_pipelines *p, bool (*which)(wk_pipe_id)) {
    for (int id = 0; id < WK_PIPE_COUNT; id++)
        if (which((wk_pipe_id)id) && p->pipe[id]) {
            vkDestroyPipeline(vk->dev, p->pipe[id], NULL);
            p->pipe[id] = VK_NULL_HANDLE;
        }
}


int wk_pipelines_set_matmul_shuffle(wk_vk *vk, wk_pipelines *p, bool on, char *err, size_t errlen) {
    if (on && !matmul_shuffle_fits(vk)) {
        snprintf(err, errlen, "matmul: device %s lacks subgroup shuffles and votes in compute shaders, or its "
                 "subgroup size %u is not a multiple of %u", vk->props.deviceName, vk->subgroup_size, WK_MATMUL_WG);
        return WK_ERR_UNSUPPORTED;
    }
    if (on == p->matmul_shuffle) return 0;
    p->matmul_shuffle = on;
    drop_pipelines(vk, p, has_noshuffle_module);
    return 0;
}

int wk_pipelines_set_matvec_subgroups(wk_vk *vk, wk_pipelines *p, uint32_t subgroups, char *err, size_t errlen) {
    const VkPhysicalDeviceLimits *lim = &vk->props.limits;
    if (!wk_pipelines_matvec_fits(vk, subgroups)) {
        snprintf(err, errlen, "matvec: %u subgroups of %u invocations exceed device %s's workgroup limit (%u)",
                 subgroups, vk->subgroup_size, vk->props.deviceName, lim->maxComputeWorkGroupInvocations);
        return WK_ERR_UNSUPPORTED;
    }
    if (subgroups == p->matvec_subgroups) return 0;
    p->matvec_subgroups = subgroups;
    drop_pipelines(vk, p, is_matvec);
    return 0;
}

int wk_pipelines_specialize_transform(wk_vk *vk, wk_pipelines *p, int block, int decode_units, char *err,
                                      size_t errlen) {
    (void)err, (void)errlen;
    /* Constant 3: units an invocation (wk_xform_step_units for steps, a token's query heads per KV
     * head for the decode twins); 4: its output rows (wk_xform_rows). */
    const int32_t rows = (int32_t)wk_xform_rows(block);
    const int32_t steps[5] = {block, (int32_t)wk_xform_step_units(block), rows, 0, 0},
                  decode[5] = {block, decode_units, rows, 0, 0};
    set_spec(vk, p, WK_PIPE_KV_TRANSFORM, steps);
    set_spec(vk, p, WK_PIPE_KV_TRANSFORM_DECODE, decode);
    set_spec(vk, p, WK_PIPE_KV_TRANSFORM_DECODE_ROPE, decode);
    return 0;
}

void wk_pipelines_destroy(wk_vk *vk, wk_pipelines *p) {
    if (!vk->dev) return;
    if (p->pool) vkDestroyDescriptorPool(vk->dev, p->pool, NULL);
    if (p->queries) vkDestroyQueryPool(vk->dev, p->queries, NULL);
    for (int id = 0; id < WK_PIPE_COUNT; id++) {
        if (p->pipe[id]) vkDestroyPipeline(vk->dev, p->pipe[id], NULL);
        if (p->layout[id]) vkDestroyPipelineLayout(vk->dev, p->layout[id], NULL);
        if (p->dsl[id]) vkDestroyDescriptorSetLayout(vk->dev, p->dsl[id], NULL);
    }
    free(p->cache);
    memset(p, 0, sizeof *p);
}

static uint64_t hash_args(int pipe, const wk_arg *a, uint32_t n) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)pipe;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v[4] = {(uint64_t)(uintptr_t)a[i].view, (uint64_t)(uintptr_t)a[i].buf, a[i].offset, a[i].range};
        for (int j = 0; j < 4; j++) h = (h ^ v[j]) * 1099511628211ull, h ^= h >> 29;
    }
    return h;
}

static int get_set(wk_vk *vk, wk_pipelines *p, wk_pipe_id id, const wk_arg *args, VkDescriptorSet *out, char *err,
                   size_t errlen) {
    const pipe_spec *spec = &specs[id];
    uint32_t n = (uint32_t)strlen(spec->bindings);
    uint64_t h = hash_args((int)id, args, n);
    uint32_t mask = p->cache_cap - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        wk_desc_entry *e = &p->cache[i];
        if (e->set == VK_NULL_HANDLE) {
            if (p->cache_used + 1 >= p->cache_cap / 2) {
                snprintf(err, errlen, "descriptor cache full (%u sets)", p->cache_used);
                return WK_ERR_NOMEM;
            }
            VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                              .descriptorPool = p->pool, .descriptorSetCount = 1,
                                              .pSetLayouts = &p->dsl[id]};
            VkResult r = vkAllocateDescriptorSets(vk->dev, &ai, &e->set);
            if (r != VK_SUCCESS) {
                e->set = VK_NULL_HANDLE;
                snprintf(err, errlen, "vkAllocateDescriptorSets (%s) failed: %s", spec->name, wk_vk_result_name(r));
                return WK_ERR_VULKAN;
            }
            VkWriteDescriptorSet w[WK_MAX_BINDINGS];
            VkDescriptorBufferInfo bi[WK_MAX_BINDINGS];
            for (uint32_t b = 0; b < n; b++) {
                w[b] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = e->set,
                                              .dstBinding = b, .descriptorCount = 1};
                if (spec->bindings[b] == T || spec->bindings[b] == I) {
                    w[b].descriptorType = spec->bindings[b] == T ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
                                                                 : VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER;
                    w[b].pTexelBufferView = &args[b].view;
                } else {
                    bi[b] = (VkDescriptorBufferInfo){.buffer = args[b].buf, .offset = args[b].offset,
                                                     .range = args[b].range ? args[b].range : VK_WHOLE_SIZE};
                    w[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
                    w[b].pBufferInfo = &bi[b];
                }
            }
            vkUpdateDescriptorSets(vk->dev, n, w, 0, NULL);
            e->hash = h;
            e->pipe = (int)id;
            memcpy(e->args, args, n * sizeof *args);
            p->cache_used++;
            *out = e->set;
            return 0;
        }
        if (e->hash == h && e->pipe == (int)id && memcmp(e->args, args, n * sizeof *args) == 0) {
            *out = e->set;
            return 0;
        }
    }
}

int wk_dispatch(wk_vk *vk, wk_pipelines *p, wk_pipe_id id, const wk_arg *args, const void *push, uint32_t push_size,
                uint32_t gx, uint32_t gy, uint32_t gz, char *err, size_t errlen) {
    if (push_size != specs[id].push_size) {
        snprintf(err, errlen, "internal: push constants for %s are %u bytes, expected %u", specs[id].name, push_size,
                 specs[id].push_size);
        return WK_ERR_INVALID;
    }
    if (!p->pipe[id]) {
        int rc = create_pipeline(vk, p, id, p->specialized[id] ? p->spec[id] : NULL, err, errlen);
        if (rc) return rc;
    }
    VkDescriptorSet set;
    int rc = get_set(vk, p, id, args, &set, err, errlen);
    if (rc) return rc;
    vkCmdBindPipeline(vk->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipe[id]);
    vkCmdBindDescriptorSets(vk->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout[id], 0, 1, &set, 0, NULL);
    vkCmdPushConstants(vk->cmd, p->layout[id], VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size, push);
    vkCmdDispatch(vk->cmd, gx, gy, gz);
    if (p->profile && p->n_queries < 4096) {
        p->query_pipe[p->n_queries] = p->prof_as ? p->prof_as : (uint8_t)id;
        vkCmdWriteTimestamp(vk->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, p->queries, p->n_queries++);
    }
    return 0;
}

void wk_prof_begin(wk_vk *vk, wk_pipelines *p) {
    if (!p->profile) return;
    vkCmdResetQueryPool(vk->cmd, p->queries, 0, 4096);
    p->n_queries = 0;
    p->query_pipe[p->n_queries] = WK_PROF_START;
    vkCmdWriteTimestamp(vk->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, p->queries, p->n_queries++);
}

void wk_prof_collect(wk_vk *vk, wk_pipelines *p) {
    if (!p->profile || p->n_queries < 2) return;
    uint64_t ts[4096];
    if (vkGetQueryPoolResults(vk->dev, p->queries, 0, p->n_queries, sizeof ts, ts, sizeof(uint64_t),
                              VK_QUERY_RESULT_64_BIT) != VK_SUCCESS)
        return;
    const double ns = vk->props.limits.timestampPeriod;
    for (uint32_t i = 1; i < p->n_queries; i++) {
        p->prof_ms[p->query_pipe[i]] += (double)(ts[i] - ts[i - 1]) * ns * 1e-6;
        p->prof_calls[p->query_pipe[i]]++;
    }
    p->n_queries = 0;
}

const char *wk_prof_name(int slot) {
    return slot < WK_PIPE_COUNT   ? specs[slot].name
           : slot == WK_PROF_HEAD ? "output_head"
           : slot == WK_PROF_HEAD_HOST ? "output_head_host"
           : slot == WK_PROF_LAYERS_HOST ? "layers_host"
           : slot == WK_PROF_KV_HOST ? "kv_write_host"
           : slot == WK_PROF_ATTN_HOST ? "attention_host"
                                  : NULL;
}

void wk_prof_print(const wk_pipelines *p) {
    if (!p->profile) return;
    fprintf(stderr, "wushkv profile (GPU time per pipeline; output_head: the head's matvec/matmul; output_head_host, "
            "layers_host, kv_write_host, attention_host: the host CPU's head, layer products, cache writes and "
            "attention, wall time):\n");
    for (int id = 0; id < WK_PROF_SLOTS; id++)
        if (p->prof_calls[id])
            fprintf(stderr, "  %-16s %9.1f ms  %7llu dispatches  %8.3f ms each\n", wk_prof_name(id), p->prof_ms[id],
                    (unsigned long long)p->prof_calls[id], p->prof_ms[id] / (double)p->prof_calls[id]);
}
