#version 450
// Store for the f16 KV cache: writes a step's keys (post-RoPE, and transformed when a transform is
// on) and values, rounded to f16, into their blocks of the paged pool (engine/kv/kv_pool.h: an f16
// slab holds token t's element i at half t * head_dim + i). One invocation per word, i.e. per pair
// of elements of one token's key or value head, so a step's stores spread over every lane.
#extension GL_GOOGLE_include_directive : require
#define WK_KVQ_DECODE_ONLY
#include "kv_quant.glsl" // wk_kvq_pack_f16x2: the one f32 -> f16 rounding
layout(local_size_x = 64) in;
struct RowInfo { uint pos; uint table_off; };
layout(std430, binding = 0) readonly buffer K { vec2 k2[]; };          // [T][n_head_kv][D/2]
layout(std430, binding = 1) readonly buffer V { vec2 v2[]; };
layout(std430, binding = 2) readonly buffer Rows { RowInfo rows[]; };
layout(std430, binding = 3) readonly buffer Tables { uint tables[]; };
layout(binding = 4, r32ui) uniform writeonly uimageBuffer Pool;
layout(push_constant) uniform PC {
    uint head_dim; uint n_head_kv; uint n_tokens;
    uint slab_layer;   // the layer's place in its layer group: its slabs in a block
    uint block_tokens; uint slab_words; uint block_words;
    uint table_stride; // block-table entries per block of tokens (layer groups)
    uint table_col;    // the layer's group: its entry among them
} pc;

void main() {
    uint id = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
    uint half_d = pc.head_dim / 2u, per_kv = pc.n_head_kv * half_d;
    if (id >= pc.n_tokens * 2u * per_kv) return;
    uint t = id / (2u * per_kv), rest = id % (2u * per_kv), kv = rest / per_kv, w = rest % per_kv;
    uint kh = w / half_d, i = w % half_d;
    RowInfo ri = rows[t];
    uint blk = tables[ri.table_off + (ri.pos / pc.block_tokens) * pc.table_stride + pc.table_col];
    uint slab = blk * pc.block_words + ((pc.slab_layer * 2u + kv) * pc.n_head_kv + kh) * pc.slab_words;
    vec2 x = kv == 0u ? k2[t * per_kv + w] : v2[t * per_kv + w];
    imageStore(Pool, int(slab + (ri.pos % pc.block_tokens) * half_d + i), uvec4(wk_kvq_pack_f16x2(x)));
}
