#version 450
// Y[t][n] = W[n] . X[t] for a batch (prefill): each invocation computes a 4-token x 4-row register
// tile, reading weights and activations through texel buffers and no shared memory (LAVAPIPE.md).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x = 8, local_size_y = 8) in;
layout(binding = 2) uniform samplerBuffer X;                   // [T][K/4] vec4
layout(std430, binding = 3) writeonly buffer Y { vec4 y4[]; }; // [T][N/4]
layout(push_constant) uniform PC { uint N; uint K; uint T; } pc;
void main() {
    uint n0 = gl_GlobalInvocationID.x * 4, t0 = gl_GlobalInvocationID.y * 4;
    if (n0 >= pc.N || t0 >= pc.T) return;
    uint G = pc.K / 16, K4 = pc.K / 4;
    // Rows past T read the last token again (never stored), so no fetch leaves the buffer.
    uint x0 = t0 * K4, x1 = min(t0 + 1, pc.T - 1) * K4, x2 = min(t0 + 2, pc.T - 1) * K4, x3 = min(t0 + 3, pc.T - 1) * K4;
    vec4 c00 = vec4(0), c01 = vec4(0), c02 = vec4(0), c03 = vec4(0);  // c[token][row], 4 lanes = partial sums
    vec4 c10 = vec4(0), c11 = vec4(0), c12 = vec4(0), c13 = vec4(0);
    vec4 c20 = vec4(0), c21 = vec4(0), c22 = vec4(0), c23 = vec4(0);
    vec4 c30 = vec4(0), c31 = vec4(0), c32 = vec4(0), c33 = vec4(0);
    for (uint g = 0; g < G; ++g) {
        wgroup w0 = wgroup_load(n0 * G + g), w1 = wgroup_load((n0 + 1) * G + g);
        wgroup w2 = wgroup_load((n0 + 2) * G + g), w3 = wgroup_load((n0 + 3) * G + g);
        for (uint i = 0; i < 4; ++i) {
            vec4 r0 = wgroup_part(w0, i), r1 = wgroup_part(w1, i), r2 = wgroup_part(w2, i), r3 = wgroup_part(w3, i);
            int k = int(g * 4 + i);
            vec4 x;
            x = texelFetch(X, int(x0) + k); c00 = fma(r0, x, c00); c01 = fma(r1, x, c01); c02 = fma(r2, x, c02); c03 = fma(r3, x, c03);
            x = texelFetch(X, int(x1) + k); c10 = fma(r0, x, c10); c11 = fma(r1, x, c11); c12 = fma(r2, x, c12); c13 = fma(r3, x, c13);
            x = texelFetch(X, int(x2) + k); c20 = fma(r0, x, c20); c21 = fma(r1, x, c21); c22 = fma(r2, x, c22); c23 = fma(r3, x, c23);
            x = texelFetch(X, int(x3) + k); c30 = fma(r0, x, c30); c31 = fma(r1, x, c31); c32 = fma(r2, x, c32); c33 = fma(r3, x, c33);
        }
    }
    const vec4 one = vec4(1);
    uint N4 = pc.N / 4, o = n0 / 4;
    y4[t0 * N4 + o] = vec4(dot(c00, one), dot(c01, one), dot(c02, one), dot(c03, one));
    if (t0 + 1 < pc.T) y4[(t0 + 1) * N4 + o] = vec4(dot(c10, one), dot(c11, one), dot(c12, one), dot(c13, one));
    if (t0 + 2 < pc.T) y4[(t0 + 2) * N4 + o] = vec4(dot(c20, one), dot(c21, one), dot(c22, one), dot(c23, one));
    if (t0 + 3 < pc.T) y4[(t0 + 3) * N4 + o] = vec4(dot(c30, one), dot(c31, one), dot(c32, one), dot(c33, one));
}
