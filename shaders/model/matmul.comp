#version 450
// Y[t][n] = W[n] . X[t] for a batch (prefill): each invocation computes a 4-token x 4-row register
// tile, reading weights and activations through texel buffers and no shared memory (docs/lavapipe.md).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_samplerless_texture_functions : require
#include "common.glsl"
layout(local_size_x = 8, local_size_y = 8) in;
layout(binding = 2) uniform textureBuffer X;                   // [T][K/4] vec4
layout(std430, binding = 3) writeonly buffer Y { vec4 y4[]; }; // [T][N/4]
layout(push_constant) uniform PC { uint N; uint K; uint T; } pc;
void main() {
    uint n0 = gl_GlobalInvocationID.x * 4, t0 = gl_GlobalInvocationID.y * 4;
    if (n0 >= pc.N || t0 >= pc.T) return;
    uint G = pc.K / 16, K4 = pc.K / 4;
    // Rows past T read the last token again (never stored), so no fetch leaves the buffer.
    uint x0 = t0 * K4, x1 = min(t0 + 1, pc.T - 1) * K4, x2 = min(t0 + 2, pc.T - 1) * K4, x3 = min(t0 + 3, pc.T - 1) * K4;
    // c[token][row]: 16 scalars, so the tile fits the registers of a CPU SIMD lane.
    float c00 = 0, c01 = 0, c02 = 0, c03 = 0, c10 = 0, c11 = 0, c12 = 0, c13 = 0;
    float c20 = 0, c21 = 0, c22 = 0, c23 = 0, c30 = 0, c31 = 0, c32 = 0, c33 = 0;
    for (uint g = 0; g < G; ++g) {
        wgroup w0 = wgroup_load(n0 * G + g), w1 = wgroup_load((n0 + 1) * G + g);
        wgroup w2 = wgroup_load((n0 + 2) * G + g), w3 = wgroup_load((n0 + 3) * G + g);
        for (uint i = 0; i < 4; ++i) {
            vec4 r0 = wgroup_part(w0, i), r1 = wgroup_part(w1, i), r2 = wgroup_part(w2, i), r3 = wgroup_part(w3, i);
            int k = int(g * 4 + i);
            vec4 x;
            x = texelFetch(X, int(x0) + k); c00 += dot(r0, x); c01 += dot(r1, x); c02 += dot(r2, x); c03 += dot(r3, x);
            x = texelFetch(X, int(x1) + k); c10 += dot(r0, x); c11 += dot(r1, x); c12 += dot(r2, x); c13 += dot(r3, x);
            x = texelFetch(X, int(x2) + k); c20 += dot(r0, x); c21 += dot(r1, x); c22 += dot(r2, x); c23 += dot(r3, x);
            x = texelFetch(X, int(x3) + k); c30 += dot(r0, x); c31 += dot(r1, x); c32 += dot(r2, x); c33 += dot(r3, x);
        }
    }
    uint N4 = pc.N / 4, o = n0 / 4;
    y4[t0 * N4 + o] = vec4(c00, c01, c02, c03);
    if (t0 + 1 < pc.T) y4[(t0 + 1) * N4 + o] = vec4(c10, c11, c12, c13);
    if (t0 + 2 < pc.T) y4[(t0 + 2) * N4 + o] = vec4(c20, c21, c22, c23);
    if (t0 + 3 < pc.T) y4[(t0 + 3) * N4 + o] = vec4(c30, c31, c32, c33);
}
