#version 450
// Key transform after RoPE: k' = T_K k for key heads, q' = T_K^-T q for query heads (so q'.k' =
// q.k), in place. T is block-diagonal (blocks of B), one matrix pair per KV head of this layer.
// One subgroup-sized workgroup per (token, head); a lane owns output rows lane, lane + nl, ...
// Per docs/lavapipe.md the matrices are read through a texel buffer (RGBA32F: four entries of a row
// per fetch) and each lane loads a block of x once for all its rows in that block (storage
// buffer loads are per-lane loops on lavapipe). The workgroup barrier lets every lane finish
// reading x before any lane overwrites it.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_samplerless_texture_functions : require
layout(local_size_x_id = 0) in;
// The transform's block as a specialisation constant (wk_pipelines_specialize_transform; the
// engine sets its transform's): the inner loops then have constant bounds and x stays in
// registers. 0 (the default) reads it from the push constants, so one pipeline serves any block.
layout(constant_id = 2) const int SC_BLOCK = 0;
const uint MAXR = 64;    // outputs per lane: head_dim <= MAXR * workgroup size
const uint MAXB4 = 64;   // block / 4: blocks up to 256
layout(std430, binding = 0) buffer Q { vec4 q4[]; };          // [T][n_head][D/4]
layout(std430, binding = 1) buffer K { vec4 k4[]; };          // [T][n_head_kv][D/4]
layout(binding = 2) uniform textureBuffer M;                  // [layer][n_head_kv][2][D/B][B][B/4]
layout(push_constant) uniform PC {
    uint head_dim; uint n_head; uint n_head_kv; uint n_tokens; uint block;
    uint mat_base;  // this layer's first texel in M
} pc;
void main() {
    uint t = gl_WorkGroupID.x, head = gl_WorkGroupID.y;
    uint lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x, D = pc.head_dim;
    uint B = SC_BLOCK != 0 ? uint(SC_BLOCK) : pc.block, B4 = B / 4u;
    bool is_q = head < pc.n_head;
    if (t >= pc.n_tokens || head >= pc.n_head + pc.n_head_kv) return; // uniform per workgroup
    uint kh = is_q ? head / (pc.n_head / pc.n_head_kv) : head - pc.n_head;
    uint base4 = (is_q ? (t * pc.n_head + head) : (t * pc.n_head_kv + kh)) * (D / 4u);
    uint mrow0 = pc.mat_base + (kh * 2u + (is_q ? 1u : 0u)) * D * B4;
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
