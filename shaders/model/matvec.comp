#version 450
// y[t][r] = W[r] . x[t] for 1..4 tokens (decode): one subgroup per ROWS rows, lanes stride over
// 16-weight groups. With several tokens a group is dequantized once and reused for each of them;
// a single token takes its own loop, rows innermost, so it fetches each activation texel once.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_samplerless_texture_functions : require
#include "common.glsl"
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROWS = 4;
layout(binding = 2) uniform textureBuffer X;                 // [T][K/4] vec4
layout(std430, binding = 3) writeonly buffer Y { float y[]; }; // [T][N]
layout(push_constant) uniform PC { uint N; uint K; uint T; } pc;
void main() {
    uint lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x;
    uint G = pc.K / 16, K4 = pc.K / 4;
    uint row0 = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * ROWS;  // 2-D grid: vocab-sized N
    if (pc.T == 1) {
        // Rows inside the group loop: a lane fetches its activation texels once per group for all
        // ROWS rows instead of once per row. Texel fetches, not arithmetic, set this kernel's time
        // on lavapipe, and on Mesa 25 the RGBA32F activation fetches cost more than half of it
        // (docs/lavapipe.md, "Mesa 25"). Each row still sums its groups in the same order, so the
        // result is the same to the bit.
        if (row0 >= pc.N) return;
        uint nr = min(ROWS, pc.N - row0);
        vec4 a[ROWS];
        [[unroll]] for (uint rr = 0; rr < ROWS; ++rr) a[rr] = vec4(0);
        for (uint g = lane; g < G; g += nl) {
            int xi = int(g * 4);
            vec4 x0 = texelFetch(X, xi), x1 = texelFetch(X, xi + 1), x2 = texelFetch(X, xi + 2), x3 = texelFetch(X, xi + 3);
#if defined(WFMT_Q8A)
            float sx = dot(x0 + x1 + x2 + x3, vec4(1));
#endif
            [[unroll]] for (uint rr = 0; rr < ROWS; ++rr) {
                if (rr >= nr) continue;
                wgroup w = wgroup_load((row0 + rr) * G + g);
#if defined(WFMT_Q8A)
                // sum(c*s + o) x = s * (c . x) + o * sum(x): the scale and offset leave the inner loop.
                float cx = dot(i8x4(w.c.x), x0) + dot(i8x4(w.c.y), x1) + dot(i8x4(w.c.z), x2) + dot(i8x4(w.c.w), x3);
                a[rr].x = fma(w.so.x, cx, a[rr].x);
                a[rr].y = fma(w.so.y, sx, a[rr].y);
#else
                a[rr] = fma(wgroup_part(w, 0), x0, a[rr]);
                a[rr] = fma(wgroup_part(w, 1), x1, a[rr]);
                a[rr] = fma(wgroup_part(w, 2), x2, a[rr]);
                a[rr] = fma(wgroup_part(w, 3), x3, a[rr]);
#endif
            }
        }
        [[unroll]] for (uint rr = 0; rr < ROWS; ++rr) {
            if (rr >= nr) continue;
            float s = subgroupAdd(a[rr].x + a[rr].y + a[rr].z + a[rr].w);
            if (lane == 0) y[row0 + rr] = s;
        }
        return;
    }
    uint t1 = pc.T > 1 ? K4 : 0, t2 = pc.T > 2 ? 2 * K4 : 0, t3 = pc.T > 3 ? 3 * K4 : 0;
    for (uint rr = 0; rr < ROWS; ++rr) {
        uint r = row0 + rr;
        if (r >= pc.N) return;
        vec4 a0 = vec4(0), a1 = vec4(0), a2 = vec4(0), a3 = vec4(0);
        for (uint g = lane; g < G; g += nl) {
            wgroup w = wgroup_load(r * G + g);
            for (uint i = 0; i < 4; ++i) {
                vec4 wi = wgroup_part(w, i);
                int xi = int(g * 4 + i);
                a0 = fma(wi, texelFetch(X, xi), a0);
                a1 = fma(wi, texelFetch(X, int(t1) + xi), a1);
                a2 = fma(wi, texelFetch(X, int(t2) + xi), a2);
                a3 = fma(wi, texelFetch(X, int(t3) + xi), a3);
            }
        }
        float s0 = subgroupAdd(a0.x + a0.y + a0.z + a0.w);
        float s1 = subgroupAdd(a1.x + a1.y + a1.z + a1.w);
        float s2 = subgroupAdd(a2.x + a2.y + a2.z + a2.w);
        float s3 = subgroupAdd(a3.x + a3.y + a3.z + a3.w);
        if (lane == 0) {
            y[r] = s0;
            if (pc.T > 1) y[pc.N + r] = s1;
            if (pc.T > 2) y[2 * pc.N + r] = s2;
            if (pc.T > 3) y[3 * pc.N + r] = s3;
        }
    }
}
