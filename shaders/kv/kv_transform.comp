#version 450
// Key transform after RoPE: k' = T_K k for key heads, q' = T_K^-T q for query heads (so q'.k' =
// q.k), in place. T is block-diagonal (blocks of B), one matrix pair per KV head of this layer.
// Per docs/lavapipe.md the matrices are read through a texel buffer (RGBA32F: four entries of a row
// per fetch), and x is loaded once per block (storage buffer loads are per-lane loops on lavapipe).
// Two ways to cover a step, chosen by the host (pc.tok_per_wg, engine/forward.c):
//   - block owners (tok_per_wg = TT): one subgroup-sized workgroup per (TT tokens, head); a lane
//     owns whole blocks (lane, lane + nl, ...), so it reads and overwrites only its own part of x
//     (no barrier), and each matrix fetch serves TT tokens. Used when there are enough blocks per
//     head to keep the lanes busy (most WUSH/Hadamard blocks: 8 blocks of 32 for head_dim 256).
//   - row owners (tok_per_wg = 1): one workgroup per (token, head); a lane owns output rows lane,
//     lane + nl, ...; the workgroup barrier lets every lane finish reading x before any lane
//     overwrites it. For blocks too large to split among the lanes.
// Both sum a row's products in the same order, so they agree to the bit.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_samplerless_texture_functions : require
layout(local_size_x_id = 0) in;
// The transform's block as a specialisation constant (wk_pipelines_specialize_transform; the
// engine sets its transform's): the inner loops then have constant bounds and x stays in
// registers. 0 (the default) reads it from the push constants, so one pipeline serves any block.
layout(constant_id = 2) const int SC_BLOCK = 0;
const uint MAXR = 64;    // outputs per lane: head_dim <= MAXR * workgroup size
const uint MAXB4 = 64;   // block / 4: blocks up to 256
const uint TT = 4;       // tokens per workgroup of the block owners
const uint OWN_MAXB4 = 16; // block / 4 of the block owners: blocks up to 64 (x of TT tokens in registers)
layout(std430, binding = 0) buffer Q { vec4 q4[]; };          // [T][n_head][D/4]
layout(std430, binding = 1) buffer K { vec4 k4[]; };          // [T][n_head_kv][D/4]
layout(binding = 2) uniform textureBuffer M;                  // [layer][n_head_kv][2][D/B][B][B/4]
layout(push_constant) uniform PC {
    uint head_dim; uint n_head; uint n_head_kv; uint n_tokens; uint block;
    uint mat_base;    // this layer's first texel in M
    uint tok_per_wg;  // TT: block owners (block <= 64); 1: row owners
} pc;

// Block owners: tokens t0.. t0 + nt - 1 of one head, this lane's blocks.
void own_blocks(uint t0, uint nt, bool is_q, uint head, uint kh, uint mrow0, uint B, uint B4) {
    uint D = pc.head_dim, C = D / 4u, lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x;
    uint hs = is_q ? pc.n_head : pc.n_head_kv, hi = is_q ? head : kh;
    for (uint b = lane; b < D / B; b += nl) {
        vec4 xb[TT * OWN_MAXB4];
        [[unroll]] for (uint t = 0u; t < TT; ++t)
            [[unroll]] for (uint j = 0u; j < OWN_MAXB4; ++j) {
                uint at = ((t0 + t) * hs + hi) * C + b * B4 + j;
                if (t < nt && j < B4) xb[t * OWN_MAXB4 + j] = is_q ? q4[at] : k4[at];
            }
        for (uint i4 = 0u; i4 < B4; ++i4) {  // rows b*B + 4*i4 .. +3: one vec4 of y per token
            vec4 y[TT];
            [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                uint row = mrow0 + (b * B + 4u * i4 + e) * B4;
                float s[TT];
                [[unroll]] for (uint t = 0u; t < TT; ++t) s[t] = 0.0;
                [[unroll]] for (uint j = 0u; j < OWN_MAXB4; ++j) {
                    if (j >= B4) continue;
                    vec4 m = texelFetch(M, int(row + j));
                    [[unroll]] for (uint t = 0u; t < TT; ++t) s[t] += dot(m, xb[t * OWN_MAXB4 + j]);
                }
                [[unroll]] for (uint t = 0u; t < TT; ++t) y[t][e] = s[t];
            }
            [[unroll]] for (uint t = 0u; t < TT; ++t) {
                if (t >= nt) continue;
                uint at = ((t0 + t) * hs + hi) * C + b * B4 + i4;
                if (is_q) q4[at] = y[t]; else k4[at] = y[t];
            }
        }
    }
}
void main() {
    uint t = gl_WorkGroupID.x, head = gl_WorkGroupID.y;
    uint lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x, D = pc.head_dim;
    uint B = SC_BLOCK != 0 ? uint(SC_BLOCK) : pc.block, B4 = B / 4u;
    bool is_q = head < pc.n_head;
    if (head >= pc.n_head + pc.n_head_kv) return; // uniform per workgroup
    uint kh = is_q ? head / (pc.n_head / pc.n_head_kv) : head - pc.n_head;
    uint mrow0 = pc.mat_base + (kh * 2u + (is_q ? 1u : 0u)) * D * B4;
    if (pc.tok_per_wg > 1u) {  // block owners: workgroup x is a group of TT tokens
        uint t0 = t * TT;
        if (t0 < pc.n_tokens) own_blocks(t0, min(TT, pc.n_tokens - t0), is_q, head, kh, mrow0, B, B4);
        return;
    }
    if (t >= pc.n_tokens) return;
    uint base4 = (is_q ? (t * pc.n_head + head) : (t * pc.n_head_kv + kh)) * (D / 4u);
    float y[MAXR];
    vec4 xb[MAXB4];
    uint have = 0xffffffffu, r = 0u;
    for (uint i = lane; i < D; i += nl, ++r) {
        uint b0 = i / B;
        if (b0 != have) {  // a new block of x for this lane's next rows
            for (uint j = 0u; j < B4; ++j) xb[j] = is_q ? q4[base4 + b0 * B4 + j] : k4[base4 + b0 * B4 + j];
            have = b0;
        }
        uint row = mrow0 + i * B4;  // row i of the block-diagonal matrix: (b0*B + i%B)*B/4 = i*B/4
        float s = 0.0;
        for (uint j = 0u; j < B4; ++j) s += dot(texelFetch(M, int(row + j)), xb[j]);
        y[r] = s;
    }
    barrier();
    r = 0u;
    for (uint i = lane; i < D; i += nl, ++r) {
        uint c = base4 + i / 4u, e = i % 4u;
        if (is_q) q4[c][e] = y[r]; else k4[c][e] = y[r];
    }
}
