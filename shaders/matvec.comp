#version 450
// y[t][r] = W[r] . x[t] for a few tokens (decode): one subgroup per ROWS rows, lanes stride over
// 16-weight groups; the weights of a group are dequantized once and reused for up to 4 tokens.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROWS = 4;
layout(binding = 2) uniform samplerBuffer X;                 // [T][K/4] vec4
layout(std430, binding = 3) writeonly buffer Y { float y[]; }; // [T][N]
layout(push_constant) uniform PC { uint N; uint K; uint T; } pc;
void main() {
    uint lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x;
    uint G = pc.K / 16, K4 = pc.K / 4;
    uint t1 = min(pc.T, 4u) > 1 ? 1 : 0, t2 = min(pc.T, 4u) > 2 ? 2 : 0, t3 = min(pc.T, 4u) > 3 ? 3 : 0;
    for (uint rr = 0; rr < ROWS; ++rr) {
        uint r = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * ROWS + rr;  // 2-D grid: vocab-sized N
        if (r >= pc.N) return;
        vec4 a0 = vec4(0), a1 = vec4(0), a2 = vec4(0), a3 = vec4(0);
        for (uint g = lane; g < G; g += nl) {
            wgroup w = wgroup_load(r * G + g);
            for (uint i = 0; i < 4; ++i) {
                vec4 wi = wgroup_part(w, i);
                int xi = int(g * 4 + i);
                a0 = fma(wi, texelFetch(X, xi), a0);
                a1 = fma(wi, texelFetch(X, int(t1 * K4) + xi), a1);
                a2 = fma(wi, texelFetch(X, int(t2 * K4) + xi), a2);
                a3 = fma(wi, texelFetch(X, int(t3 * K4) + xi), a3);
            }
        }
        float s0 = subgroupAdd(a0.x + a0.y + a0.z + a0.w);
        float s1 = subgroupAdd(a1.x + a1.y + a1.z + a1.w);
        float s2 = subgroupAdd(a2.x + a2.y + a2.z + a2.w);
        float s3 = subgroupAdd(a3.x + a3.y + a3.z + a3.w);
        if (lane == 0) {
            y[r] = s0;
            if (t1 != 0) y[pc.N + r] = s1;
            if (t2 != 0) y[2 * pc.N + r] = s2;
            if (t3 != 0) y[3 * pc.N + r] = s3;
        }
    }
}
