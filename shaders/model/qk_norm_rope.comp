#version 450
// Per token and head: optional per-head RMSNorm (Gemma's q/k norm), RoPE from a host-computed
// cos/sin table, q scaled, into QO / KO: the same buffers as Q / K (in place) without a KV
// transform, else the scratch that kv_transform reads (it writes the transformed q and k back into
// Q and K, where the KV store and the attention read them).
// One subgroup-sized workgroup per (token, head); heads 0..n_head-1 are queries, the rest keys.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_samplerless_texture_functions : require
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"  // rope_first, rope_second
layout(local_size_x_id = 0) in;
struct RowInfo { uint pos; uint kv_base; };
layout(std430, binding = 0) readonly buffer Q { float q[]; };      // [T][n_head*D]
layout(std430, binding = 1) readonly buffer K { float k[]; };      // [T][n_head_kv*D]
layout(std430, binding = 2) readonly buffer QN { float q_norm[]; };
layout(std430, binding = 3) readonly buffer KN { float k_norm[]; };
layout(binding = 4) uniform textureBuffer Rope;                     // (cos, sin) per [pos][n_rot/2]
layout(std430, binding = 5) readonly buffer Rows { RowInfo rows[]; };
layout(std430, binding = 6) writeonly buffer QO { float qo[]; };   // [T][n_head*D]
layout(std430, binding = 7) writeonly buffer KO { float ko[]; };   // [T][n_head_kv*D]
layout(push_constant) uniform PC {
    uint head_dim; uint n_head; uint n_head_kv; uint n_rot;
    uint rope_neox; uint has_norm; uint n_tokens; uint rope_table_offset;
    float eps; float q_scale;
} pc;

float load_x(bool is_q, uint base, uint d) { return is_q ? q[base + d] : k[base + d]; }

void main() {
    uint t = gl_WorkGroupID.x, head = gl_WorkGroupID.y;
    uint lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x, D = pc.head_dim;
    if (t >= pc.n_tokens || head >= pc.n_head + pc.n_head_kv) return;
    bool is_q = head < pc.n_head;
    uint kh = head - pc.n_head;
    uint base = is_q ? (t * pc.n_head + head) * D : (t * pc.n_head_kv + kh) * D;
    RowInfo ri = rows[t];

    float inv = 1.0;
    if (pc.has_norm != 0) {
        float ss = 0.0;
        for (uint d = lane; d < D; d += nl) { float x = load_x(is_q, base, d); ss += x * x; }
        inv = inversesqrt(subgroupAdd(ss) / float(D) + pc.eps);
    }
    float scale = is_q ? pc.q_scale : 1.0;
    uint half_rot = pc.n_rot / 2;
    uint rope_row = pc.rope_table_offset + ri.pos * half_rot;
    // Every lane reads both elements of its own pairs before writing them, so in place is safe.
    for (uint i = lane; i < half_rot; i += nl) {
        uint da = pc.rope_neox != 0 ? i : 2 * i;
        uint db = pc.rope_neox != 0 ? i + half_rot : 2 * i + 1;
        float xa = load_x(is_q, base, da) * inv, xb = load_x(is_q, base, db) * inv;
        if (pc.has_norm != 0) {
            float wa = is_q ? q_norm[da] : k_norm[da], wb = is_q ? q_norm[db] : k_norm[db];
            xa *= wa;
            xb *= wb;
        }
        vec2 cs = texelFetch(Rope, int(rope_row + i)).xy;
        float ya = rope_first(xa, xb, cs.x, cs.y, scale), yb = rope_second(xa, xb, cs.x, cs.y, scale);
        if (is_q) { qo[base + da] = ya; qo[base + db] = yb; }
        else { ko[base + da] = ya; ko[base + db] = yb; }
    }
    for (uint d = pc.n_rot + lane; d < D; d += nl) {  // dimensions RoPE leaves alone
        float x = load_x(is_q, base, d) * inv;
        if (pc.has_norm != 0) x *= is_q ? q_norm[d] : k_norm[d];
        if (is_q) qo[base + d] = x * scale;
        else ko[base + d] = x;
    }
}
