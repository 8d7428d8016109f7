#version 450
// Second pass of a split attention_paged dispatch: combines the n_split partial softmaxes of each
// (token, query head) — per split the running max m, sum l and unnormalised output a — into
// sum_s a_s e^(m_s - M) / sum_s l_s e^(m_s - M), M = max_s m_s. One subgroup-sized workgroup per
// (token, head); lanes own 4-dim chunks. A split that saw no key of a row has m = -inf, l = 0.
// M and the denominator are taken with the splits spread over the lanes (subgroupMax,
// subgroupAdd): every lane needs both, and a GPU decode step may have hundreds of splits
// (attention_plan.h's _GPU targets), which one lane walking them all would read one by one.
// The partials are read as RGBA32F texels: a storage-buffer load at a per-lane index is a loop
// over the lanes on lavapipe, a texel fetch one gather (docs/lavapipe.md).
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_samplerless_texture_functions : require
layout(local_size_x_id = 0) in;
layout(binding = 0) uniform textureBuffer Part;                      // [T][n_head][n_split][1 + D/4]
layout(std430, binding = 1) writeonly buffer O { vec4 o4[]; };       // [T][n_head][D/4]
layout(push_constant) uniform PC { uint head_dim; uint n_head; uint n_tokens; uint n_split; } pc;

void main() {
    uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    if (t >= pc.n_tokens || h >= pc.n_head) return;
    uint C = pc.head_dim / 4u, lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x;
    uint base = (t * pc.n_head + h) * pc.n_split * (C + 1u);
    float M = -1.0 / 0.0;
    for (uint s = lane; s < pc.n_split; s += nl) M = max(M, texelFetch(Part, int(base + s * (C + 1u))).x);
    M = subgroupMax(M);
    float L = 0.0;
    for (uint s = lane; s < pc.n_split; s += nl) {
        vec4 ml = texelFetch(Part, int(base + s * (C + 1u)));
        if (ml.y > 0.0) L += ml.y * exp(ml.x - M);
    }
    L = subgroupAdd(L);
    for (uint ch = lane; ch < C; ch += nl) {
        vec4 o = vec4(0);
        for (uint s = 0u; s < pc.n_split; ++s) {
            vec4 ml = texelFetch(Part, int(base + s * (C + 1u)));
            if (ml.y > 0.0) o += texelFetch(Part, int(base + s * (C + 1u) + 1u + ch)) * exp(ml.x - M);
        }
        o4[(t * pc.n_head + h) * C + ch] = o / L;
    }
}
