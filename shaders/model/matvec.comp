#version 450
// y[t][r] = W[r] . x[t] for 1..4 tokens (decode): one subgroup per ROWS rows, lanes stride over
// 16-weight groups, rows innermost, so a lane fetches each activation texel of its groups once for
// all ROWS rows. With several tokens a group is dequantized once and reused for each of them.
// One dispatch can stand for several (a dispatch costs ~50 us on lavapipe whatever its size, and a
// GPU pays a launch and a barrier for each): the weights' rows start at pc.row0 of the bound matrix
// (a layer's q, k and v rows are one matrix, engine/weights.c), and
//   - the outputs are split by row (SC_MODE 2): rows [0, n0) to Y0, [n0, n0 + n1) to Y1, the rest to Y2, each
//     a [T][its rows] array (q, k and v in one dispatch; n0 = N: all to Y0);
//   - or, in the pipelines specialised with SC_GLU (SC_MODE 1), each output row r is the gated FFN's
//     act(gate r) * up r (common.glsl's glu_act), with gate row r and up row r at weight rows
//     row0 + r and row0 + N + r: the gate and up products and the activation in one dispatch.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_samplerless_texture_functions : require
#include "common.glsl"
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROWS = 4;
// The pipeline's outputs (engine/vulkan/vk_pipelines.c sets it): 0 all rows to Y0 (one store a row:
// a vocabulary-sized product has many small workgroups, and three masked stores a row cost it
// ~15%), 1 the gate/up pipelines (SC_GLU above), 2 the rows split over Y0, Y1, Y2.
layout(constant_id = 2) const uint SC_MODE = 0;
// Subgroups a workgroup, constant 3 (wk_pipelines_set_matvec_subgroups; workgroup size, constant 0,
// = subgroup size x this): 1 with the "cpu" kernel set, whose workgroup is one subgroup; 4 with
// "gpu", each subgroup its own ROWS rows, because a GPU keeps a bounded number of workgroups
// resident per core and one subgroup each leaves half its threads idle (NVIDIA: 32 workgroups, 2048
// threads). Subgroup ids, not invocation ids, then say which rows and lane are whose.
layout(constant_id = 3) const uint SC_SUBGROUPS = 1;
const bool SC_GLU = SC_MODE == 1u;
layout(binding = 2) uniform textureBuffer X;                   // [T][K/4] vec4
layout(std430, binding = 3) writeonly buffer Y0 { float y0[]; };
layout(std430, binding = 4) writeonly buffer Y1 { float y1[]; };
layout(std430, binding = 5) writeonly buffer Y2 { float y2[]; };
layout(push_constant) uniform PC { uint N; uint K; uint T; uint row0; uint n0; uint n1; uint act; } pc;

// Output row r of token t: into its segment's array, or (SC_GLU) gated with its up product u.
void store(uint t, uint r, float v, float u) {
    if (SC_GLU) {
        y0[t * pc.N + r] = glu_act(v, pc.act) * u;
    } else if (SC_MODE == 0u) {
        y0[t * pc.N + r] = v;
    } else if (r < pc.n0) {
        y0[t * pc.n0 + r] = v;
    } else if (r < pc.n0 + pc.n1) {
        y1[t * pc.n1 + r - pc.n0] = v;
    } else {
        uint n2 = pc.N - pc.n0 - pc.n1;
        y2[t * n2 + r - pc.n0 - pc.n1] = v;
    }
}

void main() {
    bool one = SC_SUBGROUPS == 1u;
    uint lane = one ? gl_LocalInvocationID.x : gl_SubgroupInvocationID, nl = one ? gl_WorkGroupSize.x : gl_SubgroupSize;
    uint G = pc.K / 16, K4 = pc.K / 4;
    // This subgroup's first output row (pc.row0 is the weights' first row, not this).
    uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;  // 2-D grid: vocab-sized N
    uint out0 = (one ? wg : wg * gl_NumSubgroups + gl_SubgroupID) * ROWS;
    if (out0 >= pc.N) return;
    uint nr = min(ROWS, pc.N - out0);
    // The weight rows: ROWS of them, and with SC_GLU their up twins after them (slots ROWS..2 ROWS-1).
    uint RR = SC_GLU ? 2u * ROWS : ROWS;
    uint wrow[2 * ROWS];
    [[unroll]] for (uint rr = 0; rr < 2 * ROWS; ++rr) {
        uint i = rr < ROWS ? rr : rr - ROWS;
        wrow[rr] = (pc.row0 + (rr < ROWS ? 0u : pc.N) + out0 + min(i, nr - 1u)) * G;  // clamped: a masked-off load still runs on llvmpipe
    }
    if (pc.T == 1) {
        // Rows inside the group loop: a lane fetches its activation texels once per group for all
        // ROWS rows instead of once per row. Texel fetches, not arithmetic, set this kernel's time
        // on lavapipe, and on Mesa 25 the RGBA32F activation fetches cost more than half of it
        // (docs/lavapipe.md, "Mesa 25"). Each row still sums its groups in the same order, so the
        // result is the same to the bit.
        vec4 a[2 * ROWS];
        [[unroll]] for (uint rr = 0; rr < 2 * ROWS; ++rr) a[rr] = vec4(0);
        for (uint g = lane; g < G; g += nl) {
            int xi = int(g * 4);
            vec4 x0 = texelFetch(X, xi), x1 = texelFetch(X, xi + 1), x2 = texelFetch(X, xi + 2), x3 = texelFetch(X, xi + 3);
#if defined(WFMT_Q8A) || defined(WFMT_Q8H)
            float sx = dot(x0 + x1 + x2 + x3, vec4(1));
#endif
            [[unroll]] for (uint rr = 0; rr < 2 * ROWS; ++rr) {
                if (rr >= RR || (rr < ROWS ? rr : rr - ROWS) >= nr) continue;
                wgroup w = wgroup_load(wrow[rr] + g);
#if defined(WFMT_Q8A) || defined(WFMT_Q8H)
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
        float s[2 * ROWS];
        [[unroll]] for (uint rr = 0; rr < 2 * ROWS; ++rr)
            s[rr] = rr < RR ? subgroupAdd(a[rr].x + a[rr].y + a[rr].z + a[rr].w) : 0.0;
        [[unroll]] for (uint rr = 0; rr < ROWS; ++rr)
            if (rr < nr && lane == 0) store(0u, out0 + rr, s[rr], s[rr + ROWS]);
        return;
    }
    // 2 to 4 tokens: rows inside the group loop as well, so a lane fetches each token's texels of
    // a group once for the ROWS rows, not once a row. Tokens past T repeat token 0 (never stored).
    int t1 = int(pc.T > 1 ? K4 : 0), t2 = int(pc.T > 2 ? 2 * K4 : 0), t3 = int(pc.T > 3 ? 3 * K4 : 0);
    float s0[2 * ROWS], s1[2 * ROWS], s2[2 * ROWS], s3[2 * ROWS];
    [[unroll]] for (uint rr = 0; rr < 2 * ROWS; ++rr) { s0[rr] = 0; s1[rr] = 0; s2[rr] = 0; s3[rr] = 0; }
    for (uint g = lane; g < G; g += nl) {
        int xi = int(g * 4);
        vec4 xa[4], xb[4], xc[4], xd[4];
        [[unroll]] for (int i = 0; i < 4; ++i) {
            xa[i] = texelFetch(X, xi + i);
            xb[i] = texelFetch(X, t1 + xi + i);
            xc[i] = texelFetch(X, t2 + xi + i);
            xd[i] = texelFetch(X, t3 + xi + i);
        }
        [[unroll]] for (uint rr = 0; rr < 2 * ROWS; ++rr) {
            if (rr >= RR || (rr < ROWS ? rr : rr - ROWS) >= nr) continue;
            wgroup w = wgroup_load(wrow[rr] + g);
            [[unroll]] for (uint i = 0; i < 4; ++i) {
                vec4 wi = wgroup_part(w, i);
                s0[rr] += dot(wi, xa[i]);
                s1[rr] += dot(wi, xb[i]);
                s2[rr] += dot(wi, xc[i]);
                s3[rr] += dot(wi, xd[i]);
            }
        }
    }
    float y[4][2 * ROWS];
    [[unroll]] for (uint rr = 0; rr < 2 * ROWS; ++rr) {
        bool on = rr < RR;
        y[0][rr] = on ? subgroupAdd(s0[rr]) : 0.0;
        y[1][rr] = on ? subgroupAdd(s1[rr]) : 0.0;
        y[2][rr] = on ? subgroupAdd(s2[rr]) : 0.0;
        y[3][rr] = on ? subgroupAdd(s3[rr]) : 0.0;
    }
    if (lane != 0) return;
    [[unroll]] for (uint rr = 0; rr < ROWS; ++rr) {
        if (rr >= nr) continue;
        [[unroll]] for (uint t = 0; t < 4; ++t)
            if (t < pc.T) store(t, out0 + rr, y[t][rr], y[t][rr + ROWS]);
    }
}
