#version 450
// Causal attention over the paged, quantized KV pool: each query row walks its sequence's block
// table, dequantizes keys and values in registers (kv_quant.glsl's decode, bit-identical to the C
// twin), and keeps an online softmax; GQA and an optional sliding window as attention_f16.comp.
// One subgroup-sized workgroup per (token, query head); lanes own 4-dim chunks of the head.
// Pool layout (engine/kv_pool.h): block b holds, for every (layer, K|V, KV head), a slab of
// block_tokens tokens: their packed codes, then their f16 group parameters (kv_quant.h).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define WK_KVQ_DECODE_ONLY
#include "kv_quant.glsl"
layout(local_size_x_id = 0) in;
const uint MAXC = 16;  // chunks per lane: head_dim <= 4 * MAXC * subgroup size
struct RowInfo { uint pos; uint table_off; };
layout(std430, binding = 0) readonly buffer Q { vec4 q4[]; };        // [T][n_head][D/4]
layout(std430, binding = 1) readonly buffer Rows { RowInfo rows[]; };
layout(std430, binding = 2) readonly buffer Tables { uint tables[]; }; // block indices
layout(binding = 3) uniform usamplerBuffer Pool;                      // R32UI words
layout(std430, binding = 4) writeonly buffer O { vec4 o4[]; };        // [T][n_head][D/4]
layout(push_constant) uniform PC {
    uint head_dim; uint n_head; uint n_head_kv; uint window; uint n_tokens; uint layer;
    int kind; int bits; int G; uint block_tokens;
    uint slab_words;        // one (layer, K|V, head) slab
    uint block_words;       // one block
    uint params_words;      // offset of the parameters inside a slab
    uint code_words;        // codes of one token (D*bits/32)
} pc;

uint word(uint at) { return texelFetch(Pool, int(at)).x; }

// Dims 4c..4c+3 of token tt of the slab at `slab` (a word index).
vec4 load4(uint slab, uint tt, uint c) {
    uint g = (4u * c) / uint(pc.G);
    uint P = uint(wk_kvq_params_per_group(pc.kind));
    uint pi = (tt * (pc.head_dim / uint(pc.G)) + g) * P;             // u16 index of the first parameter
    uint pw = word(slab + pc.params_words + (pi >> 1));
    uint p0 = (pi & 1u) != 0u ? pw >> 16 : pw & 0xffffu;
    uint p1 = 0u;
    if (P == 2u) {
        uint pw1 = (pi & 1u) != 0u ? word(slab + pc.params_words + (pi >> 1) + 1u) : pw;
        p1 = (pi & 1u) != 0u ? pw1 & 0xffffu : pw >> 16;
    }
    vec2 ab = wk_kvq_affine(pc.kind, pc.bits, p0, p1);
    uint bit0 = 4u * c * uint(pc.bits);                                 // within the token's codes
    uint base = slab + tt * pc.code_words;
    if (pc.bits != 3) return wk_kvq_dequant4(word(base + (bit0 >> 5)), bit0 & 31u, pc.bits, ab);
    vec4 r;
    for (uint e = 0u; e < 4u; ++e) {
        uint j = bit0 + 3u * e;
        uint w0 = word(base + (j >> 5)), w1 = (j & 31u) > 29u ? word(base + (j >> 5) + 1u) : 0u;
        r[e] = wk_kvq_dequant(wk_kvq_code_any(w0, w1, j & 31u, 3), ab);
    }
    return r;
}

void main() {
    uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    uint lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x;
    if (t >= pc.n_tokens || h >= pc.n_head) return;
    uint C = pc.head_dim / 4u;
    uint nc = (C + nl - 1u) / nl;
    uint kh = h / (pc.n_head / pc.n_head_kv);
    RowInfo ri = rows[t];
    uint k_slab = ((pc.layer * 2u + 0u) * pc.n_head_kv + kh) * pc.slab_words;
    uint v_slab = ((pc.layer * 2u + 1u) * pc.n_head_kv + kh) * pc.slab_words;
    vec4 qv[MAXC], acc[MAXC];
    for (uint c = 0u; c < nc; ++c) {
        uint ch = lane + c * nl;
        qv[c] = ch < C ? q4[(t * pc.n_head + h) * C + ch] : vec4(0);
        acc[c] = vec4(0);
    }
    uint first = (pc.window != 0u && ri.pos + 1u > pc.window) ? ri.pos + 1u - pc.window : 0u;
    float m = -1.0 / 0.0, l = 0.0;
    for (uint j = first; j <= ri.pos; ++j) {
        uint blk = tables[ri.table_off + j / pc.block_tokens], tt = j % pc.block_tokens;
        uint kb = blk * pc.block_words + k_slab, vb = blk * pc.block_words + v_slab;
        float s = 0.0;
        for (uint c = 0u; c < nc; ++c) {
            uint ch = lane + c * nl;
            if (ch < C) s += dot(qv[c], load4(kb, tt, ch));
        }
        s = subgroupAdd(s);
        float m_new = max(m, s);
        float corr = exp(m - m_new), p = exp(s - m_new);
        l = l * corr + p;
        for (uint c = 0u; c < nc; ++c) {
            uint ch = lane + c * nl;
            if (ch < C) acc[c] = acc[c] * corr + p * load4(vb, tt, ch);
        }
        m = m_new;
    }
    for (uint c = 0u; c < nc; ++c) {
        uint ch = lane + c * nl;
        if (ch < C) o4[(t * pc.n_head + h) * C + ch] = acc[c] / l;
    }
}
