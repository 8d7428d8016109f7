#version 450
// Writes this step's keys and values in f16 into their sequences' f16 window rows
// (--kv-sink / --kv-recent; layout in engine/kv/kv_pool.h), after the attention of the layer has read
// the window as it was before the step. The host gives each token its destination row (a word
// offset into the pool), or ~0 for tokens that no window keeps (a ring row written twice in one
// step would race, so only the last `recent` tokens of a chunk get one). Each layer class has its
// own window (wk_kv_win): the host plans each class's rows, dest_base picks the layer's class, and
// a row holds the class's layers only, this one the win_layer-th. The halves come already rounded:
// kv_store_quant's f16 copy of the step's keys and values (copy_f16), which the attention read
// too, so a value is rounded once a step (kv_quant.glsl's rule, as everywhere).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer K16 { uint k16[]; };      // [T][n_head_kv][D/2] f16 pairs
layout(std430, binding = 1) readonly buffer V16 { uint v16[]; };
layout(std430, binding = 2) readonly buffer Dest { uint dest[]; };    // [class][T] window row, word offset
layout(binding = 3, r32ui) uniform writeonly uimageBuffer Pool;
layout(push_constant) uniform PC { uint head_dim; uint n_head_kv; uint n_tokens; uint win_layer; uint dest_base; } pc;

void main() {
    uint id = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
    uint half_d = pc.head_dim / 2u, per_kv = pc.n_head_kv * half_d;
    if (id >= pc.n_tokens * 2u * per_kv) return;
    uint t = id / (2u * per_kv), rest = id % (2u * per_kv), kv = rest / per_kv, w = rest % per_kv;
    uint row = dest[pc.dest_base + t];
    if (row == 0xffffffffu) return;
    uint h = kv == 0u ? k16[t * per_kv + w] : v16[t * per_kv + w];
    imageStore(Pool, int(row + (pc.win_layer * 2u + kv) * per_kv + w), uvec4(h));
}
