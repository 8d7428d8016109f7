#version 450
// Test kernel for kv_quant.glsl (tests/test_kv_quant_gpu.c): mode 0 encodes float groups into
// wk_kvq_encode's byte layout, a group to each subgroup, pc.lanes of its lanes sharing it (as
// kv_store_quant.comp does, which takes the subgroup's width); mode 1 decodes such groups to
// floats, one invocation a group. kind/bits/G are push constants so one pipeline covers every
// format under test.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_ballot : require
layout(local_size_x = 64) in;

#define WK_KVQ_LANES
#include "kv_quant.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };       // ngroups * G floats
layout(std430, binding = 1) writeonly buffer E { uint enc[]; };     // ngroups * slot words (encode out)
layout(std430, binding = 2) readonly buffer D { uint dec_in[]; };   // ngroups * slot words (decode in)
layout(std430, binding = 3) writeonly buffer Y { float y[]; };      // ngroups * G floats (decode out)
// slot: words per group in both byte buffers (>= wk_kvq_group_words); rank: percentile rank;
// quest_c2: QuEST's constant (wk_kvq_quest_c2), 0 for the unclipped one; lanes: the lanes that
// share a group (a power of two, <= G and <= the subgroup's width and 64).
layout(push_constant) uniform PC {
    int mode; int kind; int bits; int group; int rank; uint ngroups; uint slot; float quest_c2; uint lanes;
} pc;

void main() {
    int G = pc.group, bits = pc.bits;
    if (pc.mode == 0) {
        uint g = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; // the same in the whole subgroup
        // More lanes than the subgroup has (a driver that picked a narrower one): nothing written,
        // so the host's poison fails the comparison.
        if (g >= pc.ngroups || pc.lanes > gl_SubgroupSize) return;
        uint lane = gl_SubgroupInvocationID, L = pc.lanes;
        if (lane < L)
            for (uint m = 0u; m < uint(G) / L; m++) wk_kvq_x[m] = x[g * uint(G) + lane + L * m];
        wk_kvq_encode_group(pc.kind, bits, G, pc.rank, pc.quest_c2, lane, L);
        uint nw = wk_kvq_group_words(pc.kind, bits, G);
        if (lane == 0u)
            for (uint w = 0u; w < pc.slot; w++) enc[g * pc.slot + w] = w < nw ? wk_kvq_w[w] : 0u;
        return;
    }
    uint g = gl_GlobalInvocationID.x;
    if (g >= pc.ngroups) return;
    uint base = g * pc.slot, cb = wk_kvq_code_bytes(bits, G);
    // params: u16 at byte cb (+2), little-endian inside the u32 words
    uint p0 = (dec_in[base + (cb >> 2)] >> ((cb & 2u) * 8u)) & 0xFFFFu;
    uint p1 = (dec_in[base + ((cb + 2u) >> 2)] >> (((cb + 2u) & 2u) * 8u)) & 0xFFFFu;
    vec2 ab = wk_kvq_affine(pc.kind, bits, p0, p1);
    uint out0 = g * uint(G);
    if (bits == 3) { // codes one by one; two in every 32 continue in the next word
        for (int i = 0; i < G; i++) {
            uint j = uint(i * bits), w = j >> 5, o = j & 31u;
            uint w1 = o > 29u ? dec_in[base + w + 1u] : 0u;
            y[out0 + uint(i)] = wk_kvq_dequant(wk_kvq_code_any(dec_in[base + w], w1, o, bits), ab);
        }
    } else { // the attention's shape: scalar extract for the first code of each four, then vec4
        for (int i = 0; i < G; i += 4) {
            uint j = uint(i * bits), w = dec_in[base + (j >> 5)], o = j & 31u;
            y[out0 + uint(i)] = wk_kvq_dequant(wk_kvq_code_24(w, o, bits), ab);
            vec4 v = wk_kvq_dequant4(w, o, bits, ab);
            y[out0 + uint(i) + 1u] = v.y;
            y[out0 + uint(i) + 2u] = v.z;
            y[out0 + uint(i) + 3u] = v.w;
        }
    }
}
