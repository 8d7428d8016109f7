#version 450
// Stores a step's keys (already RoPE'd and transformed) and values into the f16 cache; used when
// a key transform runs between RoPE and the store (otherwise qk_norm_rope writes the cache itself).
#extension GL_EXT_shader_16bit_storage : require
layout(local_size_x = 64) in;
struct RowInfo { uint pos; uint kv_base; };
layout(std430, binding = 0) readonly buffer K { float k[]; };     // [T][n_head_kv*D]
layout(std430, binding = 1) readonly buffer V { float v[]; };
layout(std430, binding = 2) readonly buffer Rows { RowInfo rows[]; };
layout(std430, binding = 3) writeonly buffer KC { float16_t kc[]; };
layout(std430, binding = 4) writeonly buffer VC { float16_t vc[]; };
layout(push_constant) uniform PC { uint row_elems; uint n_tokens; } pc;  // row_elems = n_head_kv*D
void main() {
    uint id = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
    if (id >= pc.row_elems * pc.n_tokens) return;
    uint t = id / pc.row_elems, e = id % pc.row_elems;
    RowInfo ri = rows[t];
    uint at = (ri.kv_base + ri.pos) * pc.row_elems + e;
    kc[at] = float16_t(k[id]);
    vc[at] = float16_t(v[id]);
}
