#version 450
// Y[t][n] = W[n] . X[t] for a batch (prefill): each invocation computes a TT-token x TR-row register
// tile, reading weights and activations through texel buffers and no shared memory (docs/lavapipe.md).
// 8 x 8 tiles: each activation texel fetched serves eight rows and each weight group eight
// tokens (a weight kernel's time on lavapipe follows its fetches; 4 x 4 tiles took 1.3-1.4x as
// long, 4 x 8 about 1.1x; docs/benchmarks.md tuning log).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_samplerless_texture_functions : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "shader_consts.h"
layout(local_size_x = WK_MATMUL_WG, local_size_y = WK_MATMUL_WG) in;
layout(binding = 2) uniform textureBuffer X;                   // [T][K/4] vec4
layout(std430, binding = 3) writeonly buffer Y { float y[]; }; // [T][N]
// row0: the weights' first row in the bound matrix (a layer's q, k and v rows, or its gate and up
// rows, are one matrix: engine/weights.c); n0, n1, act: matvec.comp's, unused here.
layout(push_constant) uniform PC { uint N; uint K; uint T; uint row0; uint n0; uint n1; uint act; } pc;
const uint TR = WK_MATMUL_ROWS, TT = WK_MATMUL_TOKENS;
void main() {
    uint n0 = gl_GlobalInvocationID.x * TR, t0 = gl_GlobalInvocationID.y * TT;
    if (n0 >= pc.N || t0 >= pc.T) return;
    uint G = pc.K / 16, K4 = pc.K / 4;
    // Tokens past T read the last token again, rows past N the last row (never stored), so no fetch leaves the buffer.
    uint xb[TT], rb[TR];
    [[unroll]] for (uint t = 0; t < TT; ++t) xb[t] = min(t0 + t, pc.T - 1) * K4;
    [[unroll]] for (uint r = 0; r < TR; ++r) rb[r] = (pc.row0 + min(n0 + r, pc.N - 1)) * G;
    float c[TT][TR];
    [[unroll]] for (uint t = 0; t < TT; ++t) [[unroll]] for (uint r = 0; r < TR; ++r) c[t][r] = 0;
    for (uint g = 0; g < G; ++g) {
        wgroup w[TR];
        [[unroll]] for (uint r = 0; r < TR; ++r) w[r] = wgroup_load(rb[r] + g);
        [[unroll]] for (uint i = 0; i < 4; ++i) {
            int k = int(g * 4 + i);
            // The tokens' texels first, then one dequantized row at a time: TT + 1 vectors live,
            // not TR + 1 (the other order took 1.4x as long on lavapipe).
            vec4 x[TT];
            [[unroll]] for (uint t = 0; t < TT; ++t) x[t] = texelFetch(X, int(xb[t]) + k);
            [[unroll]] for (uint r = 0; r < TR; ++r) {
                vec4 wr = wgroup_part(w[r], i);
                [[unroll]] for (uint t = 0; t < TT; ++t) c[t][r] += dot(wr, x[t]);
            }
        }
    }
    // Scalar stores, so any N works (a vocabulary need not be a multiple of 4); one store an
    // output is nothing against its K products.
    [[unroll]] for (uint t = 0; t < TT; ++t)
        [[unroll]] for (uint r = 0; r < TR; ++r)
            if (t0 + t < pc.T && n0 + r < pc.N) y[(t0 + t) * pc.N + n0 + r] = c[t][r];
}
