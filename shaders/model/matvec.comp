#version 450
// y[t][r] = W[r] . x[t] for 1..4 tokens (decode): one subgroup per ROWS rows, lanes stride over
// 16-weight groups, rows innermost, so a lane fetches each activation texel of its groups once for
// all ROWS rows. With several tokens a group is dequantized once and reused for each of them.
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
    // 2 to 4 tokens: rows inside the group loop as well, so a lane fetches each token's texels of
    // a group once for the ROWS rows, not once a row. Tokens past T repeat token 0 (never stored).
    if (row0 >= pc.N) return;
    uint nr = min(ROWS, pc.N - row0);
    int t1 = int(pc.T > 1 ? K4 : 0), t2 = int(pc.T > 2 ? 2 * K4 : 0), t3 = int(pc.T > 3 ? 3 * K4 : 0);
    float s0[ROWS], s1[ROWS], s2[ROWS], s3[ROWS];
    [[unroll]] for (uint rr = 0; rr < ROWS; ++rr) { s0[rr] = 0; s1[rr] = 0; s2[rr] = 0; s3[rr] = 0; }
    for (uint g = lane; g < G; g += nl) {
        int xi = int(g * 4);
        vec4 xa[4], xb[4], xc[4], xd[4];
        [[unroll]] for (int i = 0; i < 4; ++i) {
            xa[i] = texelFetch(X, xi + i);
            xb[i] = texelFetch(X, t1 + xi + i);
            xc[i] = texelFetch(X, t2 + xi + i);
            xd[i] = texelFetch(X, t3 + xi + i);
        }
        [[unroll]] for (uint rr = 0; rr < ROWS; ++rr) {
            if (rr >= nr) continue;
            wgroup w = wgroup_load((row0 + rr) * G + g);
            [[unroll]] for (uint i = 0; i < 4; ++i) {
                vec4 wi = wgroup_part(w, i);
                s0[rr] += dot(wi, xa[i]);
                s1[rr] += dot(wi, xb[i]);
                s2[rr] += dot(wi, xc[i]);
                s3[rr] += dot(wi, xd[i]);
            }
        }
    }
    [[unroll]] for (uint rr = 0; rr < ROWS; ++rr) {
        if (rr >= nr) continue;
        uint r = row0 + rr;
        float y0 = subgroupAdd(s0[rr]), y1 = subgroupAdd(s1[rr]), y2 = subgroupAdd(s2[rr]), y3 = subgroupAdd(s3[rr]);
        if (lane == 0) {
            y[r] = y0;
            if (pc.T > 1) y[pc.N + r] = y1;
            if (pc.T > 2) y[2 * pc.N + r] = y2;
            if (pc.T > 3) y[3 * pc.N + r] = y3;
        }
    }
}
