#version 450
// Causal attention over the f16 KV cache with online softmax, GQA and an optional sliding window.
// One subgroup-sized workgroup per (token, query head); lanes own 4-dim chunks of the head, so a
// score is one subgroupAdd. q arrives already RoPE'd and scaled.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0) in;
const uint MAXC = 16;  // chunks per lane: head_dim <= 4 * MAXC * subgroup size
// The chunk loops are unrolled: llvmpipe silently ends every loop of an invocation after 65535
// loop iterations in total (LAVAPIPE.md), so only the key loop may count (one per key).
struct RowInfo { uint pos; uint kv_base; };
layout(std430, binding = 0) readonly buffer Q { vec4 q4[]; };      // [T][n_head][D/4]
layout(std430, binding = 1) readonly buffer Rows { RowInfo rows[]; };
layout(binding = 2) uniform usamplerBuffer KC;                      // RG32UI: 4 halves per texel
layout(binding = 3) uniform usamplerBuffer VC;
layout(std430, binding = 4) writeonly buffer O { vec4 o4[]; };      // [T][n_head][D/4]
layout(push_constant) uniform PC { uint head_dim; uint n_head; uint n_head_kv; uint window; uint n_tokens; } pc;

vec4 h4(uvec2 p) { return vec4(unpackHalf2x16(p.x), unpackHalf2x16(p.y)); }

void main() {
    uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    uint lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x;
    if (t >= pc.n_tokens || h >= pc.n_head) return;
    uint C = pc.head_dim / 4;                       // chunks per head
    uint nc = (C + nl - 1) / nl;                    // chunks this lane may own
    uint kh = h / (pc.n_head / pc.n_head_kv);
    RowInfo ri = rows[t];
    vec4 qv[MAXC], acc[MAXC];
    [[unroll]] for (uint c = 0; c < MAXC; ++c) {
        uint ch = lane + c * nl;
        qv[c] = c < nc && ch < C ? q4[(t * pc.n_head + h) * C + ch] : vec4(0);
        acc[c] = vec4(0);
    }
    uint first = (pc.window != 0 && ri.pos + 1 > pc.window) ? ri.pos + 1 - pc.window : 0;
    float m = -1.0 / 0.0, l = 0.0;
    for (uint j = first; j <= ri.pos; ++j) {
        uint kv = ((ri.kv_base + j) * pc.n_head_kv + kh) * C;
        float s = 0.0;
        [[unroll]] for (uint c = 0; c < MAXC; ++c) {
            uint ch = lane + c * nl;
            if (c < nc && ch < C) s += dot(qv[c], h4(texelFetch(KC, int(kv + ch)).xy));
        }
        s = subgroupAdd(s);
        float m_new = max(m, s);
        float corr = exp(m - m_new), p = exp(s - m_new);
        l = l * corr + p;
        [[unroll]] for (uint c = 0; c < MAXC; ++c) {
            uint ch = lane + c * nl;
            if (c < nc && ch < C) acc[c] = acc[c] * corr + p * h4(texelFetch(VC, int(kv + ch)).xy);
        }
        m = m_new;
    }
    [[unroll]] for (uint c = 0; c < MAXC; ++c) {
        uint ch = lane + c * nl;
        if (c < nc && ch < C) o4[(t * pc.n_head + h) * C + ch] = acc[c] / l;
    }
}
