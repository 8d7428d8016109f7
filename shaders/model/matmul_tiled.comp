#version 450
// Y[t][n] = W[n] . X[t] for a batch (prefill), the GPU variant of matmul.comp (kernel set "gpu",
// engine/vulkan/vk_pipelines.c chooses by device type): a 16 x 16 workgroup computes a 64-row x
// 64-token tile, each invocation a 4 x 4 register tile, with both operands staged in shared memory
// one weight group (16 of K) at a time, so every weight and activation fetched from memory serves
// 64 products instead of 4. lavapipe runs shared memory and barriers slowly (docs/lavapipe.md), so
// the "cpu" set keeps matmul.comp; tests run both on lavapipe against the C reference.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_samplerless_texture_functions : require
#include "common.glsl"
#include "shader_consts.h"
layout(local_size_x = 16, local_size_y = 16) in;
layout(binding = 2) uniform textureBuffer X;                   // [T][K/4] vec4
layout(std430, binding = 3) writeonly buffer Y { float y[]; }; // [T][N]
// row0: the weights' first row in the bound matrix (a layer's q, k and v rows, or its gate and up
// rows, are one matrix: engine/weights.c); n0, n1, act: matvec.comp's, unused here.
layout(push_constant) uniform PC { uint N; uint K; uint T; uint row0; uint n0; uint n1; uint act; } pc;
const uint TILE = WK_MATMUL_TILED;
shared vec4 w_sh[TILE][4];  // the tile's 64 rows x this group's 16 weights, dequantized
shared vec4 x_sh[TILE][4];  // the tile's 64 tokens x the same 16 of K
void main() {
    uint lid = gl_LocalInvocationIndex;
    uint n_tile = gl_WorkGroupID.x * TILE, t_tile = gl_WorkGroupID.y * TILE;
    uint n0 = n_tile + gl_LocalInvocationID.x * 4u, t0 = t_tile + gl_LocalInvocationID.y * 4u;
    uint G = pc.K / 16u, K4 = pc.K / 4u;
    // The staging: invocation lid loads part lid % 4 of row / token lid / 4 (past N or T: the last
    // one again, never stored, so no fetch leaves the buffers).
    uint s_row = lid / 4u, s_part = lid % 4u;
    uint w_row = pc.row0 + min(n_tile + s_row, pc.N - 1u), x_tok = min(t_tile + s_row, pc.T - 1u);
    float c[4][4];
    for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j) c[i][j] = 0.0;
    for (uint g = 0u; g < G; ++g) {
        w_sh[s_row][s_part] = wgroup_part(wgroup_load(w_row * G + g), s_part);
        x_sh[s_row][s_part] = texelFetch(X, int(x_tok * K4 + g * 4u + s_part));
        barrier();
        uint lr = gl_LocalInvocationID.x * 4u, lt = gl_LocalInvocationID.y * 4u;
        for (uint p = 0u; p < 4u; ++p) {
            vec4 w0 = w_sh[lr][p], w1 = w_sh[lr + 1u][p], w2 = w_sh[lr + 2u][p], w3 = w_sh[lr + 3u][p];
            for (uint j = 0u; j < 4u; ++j) {
                vec4 x = x_sh[lt + j][p];
                c[j][0] += dot(w0, x); c[j][1] += dot(w1, x); c[j][2] += dot(w2, x); c[j][3] += dot(w3, x);
            }
        }
        barrier();
    }
    // Scalar stores: any N (a vocabulary need not be a multiple of 4).
    for (uint j = 0u; j < 4u; ++j)
        for (uint i = 0u; i < 4u; ++i)
            if (t0 + j < pc.T && n0 + i < pc.N) y[(t0 + j) * pc.N + n0 + i] = c[j][i];
}
