#version 450
// Key transform after RoPE: k' = T_K k for key heads, q' = T_K^-T q for query heads (so q'.k' =
// q.k), in place. T is block-diagonal (blocks of B), one matrix pair per KV head of this layer.
// Per docs/lavapipe.md the matrices are read through a texel buffer (RGBA32F: four entries of a row
// per fetch), and x is loaded once per block (storage buffer loads are per-lane loops on lavapipe).
// Two ways to cover a step, chosen by the host (pc.block_owners, engine/forward.c); both take TT
// tokens a workgroup (one subgroup-sized workgroup per (TT tokens, head)), so each matrix fetch
// serves TT tokens:
//   - block owners: a lane owns whole blocks (lane, lane + nl, ...), so it reads and overwrites
//     only its own part of x (no barrier). Used when there are enough blocks per head to keep the
//     lanes busy (most WUSH/Hadamard blocks: 8 blocks of 32 for head_dim 256).
//   - row owners: a lane owns output rows lane, lane + nl, ... of each block; the workgroup barrier
//     lets every lane finish reading x before any lane overwrites it. For blocks too large to
//     split among the lanes (128 on head_dim 256: 4x the fetches of 32, once per TT tokens; one
//     token a workgroup, as before, cost 15x the 32-block transform in prefill, docs/engine.md).
//     The loops walk blocks, then a block's rows: a load of x behind an `if` would run on every
//     row (lavapipe runs both sides of a branch).
// Both sum a row's products in the same order, so they agree to the bit.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_samplerless_texture_functions : require
layout(local_size_x_id = 0) in;
// The transform's block as a specialisation constant (wk_pipelines_specialize_transform; the
// engine sets its transform's): the inner loops then have constant bounds and x stays in
// registers. 0 (the default) reads it from the push constants, so one pipeline serves any block.
layout(constant_id = 2) const int SC_BLOCK = 0;
const uint MAXR = 64;    // rows per lane of the row owners: head_dim <= MAXR * workgroup size
const uint MAXB4 = 64;   // block / 4: blocks up to 256
const uint TT = 4;       // the most tokens per workgroup (register arrays are sized for it)
// Tokens per workgroup, as specialisation constant 3 (wk_pipelines_specialize_transform): 4 for
// steps of many tokens, 1 for the decode twin (kv_transform_decode), so a one-token step does not
// compute three copies of its token.
layout(constant_id = 3) const uint SC_TT = 4;
const uint OWN_MAXB4 = 16; // block / 4 of the block owners: blocks up to 64 (x of TT tokens in registers)
layout(std430, binding = 0) buffer Q { vec4 q4[]; };          // [T][n_head][D/4]
layout(std430, binding = 1) buffer K { vec4 k4[]; };          // [T][n_head_kv][D/4]
layout(binding = 2) uniform textureBuffer M;                  // [layer][n_head_kv][2][D/B][B][B/4]
layout(push_constant) uniform PC {
    uint head_dim; uint n_head; uint n_head_kv; uint n_tokens; uint block;
    uint mat_base;    // this layer's first texel in M
    uint block_owners;  // 1: block owners (block <= 64); 0: row owners
} pc;

// Block owners: tokens t0.. t0 + nt - 1 of one head, this lane's blocks.
void own_blocks(uint t0, uint nt, bool is_q, uint head, uint kh, uint mrow0, uint B, uint B4) {
    uint D = pc.head_dim, C = D / 4u, lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x;
    uint hs = is_q ? pc.n_head : pc.n_head_kv, hi = is_q ? head : kh;
    for (uint b = lane; b < D / B; b += nl) {
        vec4 xb[TT * OWN_MAXB4];
        [[unroll]] for (uint t = 0u; t < SC_TT; ++t)
            [[unroll]] for (uint j = 0u; j < OWN_MAXB4; ++j) {
                uint at = ((t0 + t) * hs + hi) * C + b * B4 + j;
                if (t < nt && j < B4) xb[t * OWN_MAXB4 + j] = is_q ? q4[at] : k4[at];
            }
        for (uint i4 = 0u; i4 < B4; ++i4) {  // rows b*B + 4*i4 .. +3: one vec4 of y per token
            vec4 y[TT];
            [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                uint row = mrow0 + (b * B + 4u * i4 + e) * B4;
                float s[TT];
                [[unroll]] for (uint t = 0u; t < SC_TT; ++t) s[t] = 0.0;
                [[unroll]] for (uint j = 0u; j < OWN_MAXB4; ++j) {
                    if (j >= B4) continue;
                    vec4 m = texelFetch(M, int(row + j));
                    [[unroll]] for (uint t = 0u; t < SC_TT; ++t) s[t] += dot(m, xb[t * OWN_MAXB4 + j]);
                }
                [[unroll]] for (uint t = 0u; t < SC_TT; ++t) y[t][e] = s[t];
            }
            [[unroll]] for (uint t = 0u; t < SC_TT; ++t) {
                if (t >= nt) continue;
                uint at = ((t0 + t) * hs + hi) * C + b * B4 + i4;
                if (is_q) q4[at] = y[t]; else k4[at] = y[t];
            }
        }
    }
}
// Row owners: tokens t0 .. t0 + nt - 1 of one head; this lane's rows of each block.
void own_rows(uint t0, uint nt, bool is_q, uint head, uint kh, uint mrow0, uint B, uint B4) {
    uint D = pc.head_dim, C = D / 4u, lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x;
    uint hs = is_q ? pc.n_head : pc.n_head_kv, hi = is_q ? head : kh;
    float y[TT * MAXR];
    uint r = 0u;
    for (uint b = 0u; b < D / B; ++b) {
        vec4 xb[TT * MAXB4];
        [[unroll]] for (uint t = 0u; t < SC_TT; ++t)  // tokens past nt read the last one, never written
            [[unroll]] for (uint j = 0u; j < MAXB4; ++j)
                if (j < B4) {
                    uint at = (min(t0 + t, t0 + nt - 1u) * hs + hi) * C + b * B4 + j;
                    xb[t * MAXB4 + j] = is_q ? q4[at] : k4[at];
                }
        for (uint i = lane; i < B; i += nl, ++r) {
            uint row = mrow0 + (b * B + i) * B4;  // row b*B + i of the block-diagonal matrix
            float s[TT];
            [[unroll]] for (uint t = 0u; t < SC_TT; ++t) s[t] = 0.0;
            [[unroll]] for (uint j = 0u; j < MAXB4; ++j) {
                if (j >= B4) continue;
                vec4 m = texelFetch(M, int(row + j));
                [[unroll]] for (uint t = 0u; t < SC_TT; ++t) s[t] += dot(m, xb[t * MAXB4 + j]);
            }
            [[unroll]] for (uint t = 0u; t < SC_TT; ++t) y[t * MAXR + r] = s[t];
        }
    }
    barrier();
    for (uint t = 0u; t < nt; ++t) {
        r = 0u;
        for (uint b = 0u; b < D / B; ++b)
            for (uint i = lane; i < B; i += nl, ++r) {
                uint c = ((t0 + t) * hs + hi) * C + (b * B + i) / 4u, e = i % 4u;
                if (is_q) q4[c][e] = y[t * MAXR + r]; else k4[c][e] = y[t * MAXR + r];
            }
    }
}

void main() {
    uint head = gl_WorkGroupID.y, D = pc.head_dim;
    uint B = SC_BLOCK != 0 ? uint(SC_BLOCK) : pc.block, B4 = B / 4u;
    bool is_q = head < pc.n_head;
    if (head >= pc.n_head + pc.n_head_kv) return; // uniform per workgroup
    uint kh = is_q ? head / (pc.n_head / pc.n_head_kv) : head - pc.n_head;
    uint mrow0 = pc.mat_base + (kh * 2u + (is_q ? 1u : 0u)) * D * B4;
    uint t0 = gl_WorkGroupID.x * SC_TT;  // workgroup x is a group of SC_TT tokens
    if (t0 >= pc.n_tokens) return;
    uint nt = min(SC_TT, pc.n_tokens - t0);
    if (pc.block_owners != 0u) own_blocks(t0, nt, is_q, head, kh, mrow0, B, B4);
    else own_rows(t0, nt, is_q, head, kh, mrow0, B, B4);
}
