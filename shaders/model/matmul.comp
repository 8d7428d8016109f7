#version 450
// Y[t][n] = W[n] . X[t] for a batch (prefill), or act(gate) * up (the gate/up pipelines, constant 2
// below): each invocation computes a TT-token x TR-row register
// tile, reading weights and activations through texel buffers and no shared memory (docs/lavapipe.md).
// 8 x 8 tiles: each activation texel fetched serves eight rows and each weight group eight
// tokens (a weight kernel's time on lavapipe follows its fetches; 4 x 4 tiles took 1.3-1.4x as
// long, 4 x 8 about 1.1x; docs/benchmarks.md tuning log).
// Built twice (shaders/meson.build): with WK_MATMUL_SHUFFLE (devices with subgroup shuffles and a
// subgroup size a multiple of WG) the WG lanes that share a token tile fetch its TT tokens' texels
// once between them, a token each, and pass them round with subgroupShuffle, where every lane
// would fetch all TT; on lavapipe a shuffle from a constant lane is a register broadcast and a
// fetch is a gather, so a prompt token's matmuls take 5-26% less time on Mesa 22 and 22-30% less
// on Mesa 25 (docs/benchmarks.md tuning log). Without it (the module for any other device) every
// lane fetches its own.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_samplerless_texture_functions : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#ifdef WK_MATMUL_SHUFFLE
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#endif
#include "common.glsl"
#include "shader_consts.h"
#if WK_MATMUL_WG != WK_MATMUL_TOKENS
#error "a token tile's WG lanes fetch its TT tokens, one each"
#endif
// WG x WG tiles a workgroup: WG row tiles for each of WG token tiles (WK_MATMUL_WG in
// engine/vulkan/shader_params.h's grid), laid out one-dimensionally below.
layout(local_size_x = WK_MATMUL_WG * WK_MATMUL_WG) in;
layout(binding = 2) uniform textureBuffer X;                   // [T][K/4] vec4
layout(std430, binding = 3) writeonly buffer Y { float y[]; }; // [T][N]
// row0: the weights' first row in the bound matrix (a layer's q, k and v rows, or its gate and up
// rows, are one matrix: engine/weights.c); act: the gate/up pipelines' activation (common.glsl's
// glu_act); n0, n1: matvec.comp's, unused here.
layout(push_constant) uniform PC { uint N; uint K; uint T; uint row0; uint n0; uint n1; uint act; } pc;
// Specialisation constant 2: 1 for the gate/up pipelines (matmul_glu_*), which write
// act(gate) * up for N outputs: an invocation's tile is its TR / 2 outputs' gate rows (row0 + n)
// and their up rows (row0 + N + n: W_up's rows follow W_gate's in the joined matrix), so the
// activation needs no second dispatch and gate and up never go through memory. 0: y = x W^T.
layout(constant_id = 2) const uint SC_MODE = 0;
const bool SC_GLU = SC_MODE == 1u;
const uint TR = WK_MATMUL_ROWS, TT = WK_MATMUL_TOKENS;
const uint HR = TR / 2u;  // the gate/up pipelines' outputs per invocation
void main() {
    const uint WG = WK_MATMUL_WG;
#ifdef WK_MATMUL_SHUFFLE
    // The tile index from the subgroup ids, not the local id: whatever order a driver puts
    // invocations in subgroups, each aligned run of WG lanes is then one token tile's row tiles.
    uint p = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
#else
    uint p = gl_LocalInvocationIndex;
#endif
    uint n0 = (gl_WorkGroupID.x * WG + p % WG) * (SC_GLU ? HR : TR);
    uint t0 = (gl_WorkGroupID.y * WG + p / WG) * TT;
    bool live = n0 < pc.N && t0 < pc.T;
#ifdef WK_MATMUL_SHUFFLE
    // Every lane stays until the stores: a lane past the rows or tokens still fetches for the
    // others. A subgroup with nothing to compute leaves at once (on lavapipe a subgroup is one
    // token tile: a 16-token step's workgroup has 6 such of 8).
    if (subgroupAll(!live)) return;
    // The lane that fetched token t0 + t: the run's first lane + t (0 + t when the subgroup is one
    // run, which lets the compiler see a constant lane).
    uint run0 = gl_SubgroupSize == WG ? 0u : gl_SubgroupInvocationID & ~(WG - 1u);
#else
    if (!live) return;
#endif
    uint G = pc.K / 16, K4 = pc.K / 4;
    // Tokens past T read the last token again, rows past N the last row (never stored), so no fetch leaves the buffer.
    uint rb[TR];
#ifdef WK_MATMUL_SHUFFLE
    uint xl = min(t0 + gl_SubgroupInvocationID % WG, pc.T - 1) * K4;  // this lane's token
#else
    uint xb[TT];
    [[unroll]] for (uint t = 0; t < TT; ++t) xb[t] = min(t0 + t, pc.T - 1) * K4;
#endif
    [[unroll]] for (uint r = 0; r < TR; ++r) {
        uint n = SC_GLU ? min(n0 + r % HR, pc.N - 1) + (r < HR ? 0u : pc.N) : min(n0 + r, pc.N - 1);
        rb[r] = (pc.row0 + n) * G;
    }
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
#ifdef WK_MATMUL_SHUFFLE
            vec4 xl_k = texelFetch(X, int(xl) + k);
            [[unroll]] for (uint t = 0; t < TT; ++t) x[t] = subgroupShuffle(xl_k, run0 + t);
#else
            [[unroll]] for (uint t = 0; t < TT; ++t) x[t] = texelFetch(X, int(xb[t]) + k);
#endif
            [[unroll]] for (uint r = 0; r < TR; ++r) {
                vec4 wr = wgroup_part(w[r], i);
                [[unroll]] for (uint t = 0; t < TT; ++t) c[t][r] += dot(wr, x[t]);
            }
        }
    }
    // Scalar stores, so any N works (a vocabulary need not be a multiple of 4); one store an
    // output is nothing against its K products.
    if (!live) return;
    if (SC_GLU) {
        [[unroll]] for (uint t = 0; t < TT; ++t)
            [[unroll]] for (uint r = 0; r < HR; ++r)
                if (t0 + t < pc.T && n0 + r < pc.N) y[(t0 + t) * pc.N + n0 + r] = glu_act(c[t][r], pc.act) * c[t][r + HR];
        return;
    }
    [[unroll]] for (uint t = 0; t < TT; ++t)
        [[unroll]] for (uint r = 0; r < TR; ++r)
            if (t0 + t < pc.T && n0 + r < pc.N) y[(t0 + t) * pc.N + n0 + r] = c[t][r];
}
