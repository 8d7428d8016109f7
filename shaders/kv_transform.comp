#version 450
// Key transform after RoPE: k' = T_K k for key heads, q' = T_K^-T q for query heads (so q'.k' =
// q.k), in place. T is block-diagonal (blocks of B), one matrix pair per KV head of this layer.
// One subgroup-sized workgroup per (token, head); a lane computes its outputs into registers,
// then the workgroup barrier lets every lane finish reading x before any lane overwrites it.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
const uint MAXR = 64;  // outputs per lane: head_dim <= MAXR * workgroup size
layout(std430, binding = 0) buffer Q { float q[]; };          // [T][n_head][D]
layout(std430, binding = 1) buffer K { float k[]; };          // [T][n_head_kv][D]
layout(std430, binding = 2) readonly buffer M { float m[]; }; // [n_head_kv][2][D/B][B][B]
layout(push_constant) uniform PC { uint head_dim; uint n_head; uint n_head_kv; uint n_tokens; uint block; } pc;
void main() {
    uint t = gl_WorkGroupID.x, head = gl_WorkGroupID.y;
    uint lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x, D = pc.head_dim, B = pc.block;
    bool is_q = head < pc.n_head;
    if (t >= pc.n_tokens || head >= pc.n_head + pc.n_head_kv) return; // uniform per workgroup
    uint kh = is_q ? head / (pc.n_head / pc.n_head_kv) : head - pc.n_head;
    uint base = is_q ? (t * pc.n_head + head) * D : (t * pc.n_head_kv + kh) * D;
    uint mat = (kh * 2u + (is_q ? 1u : 0u)) * D * B;
    float y[MAXR];
    uint r = 0u;
    for (uint i = lane; i < D; i += nl, ++r) {
        uint b0 = (i / B) * B, row = mat + i * B;  // block b0/B, row i%B: (b*B + i%B)*B = i*B
        float s = 0.0;
        for (uint j = 0u; j < B; ++j) s += m[row + j] * (is_q ? q[base + b0 + j] : k[base + b0 + j]);
        y[r] = s;
    }
    barrier();
    r = 0u;
    for (uint i = lane; i < D; i += nl, ++r) {
        if (is_q) q[base + i] = y[r]; else k[base + i] = y[r];
    }
}
