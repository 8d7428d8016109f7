#version 450
// Quantize-on-store for the paged KV pool: one token's key or value head (post-RoPE keys; values
// as projected) to each invocation, or (WK_KVQ_LANES, the `store=lanes` kernel variant) to each
// workgroup of one subgroup, whose lanes share every group. It encodes the head's D/G groups with
// kv_quant.glsl (bit-identical to the C twin either way) and writes the token's code words and
// parameters into its block's slab. The lanes are for GPUs, where one invocation encoding a head
// element by element holds up the step; on lavapipe an invocation a head is as fast in decode
// and faster in prefill (docs/engine.md). A token's codes start on a word.
// Its parameters fill whole words unless the token has an odd number of them (one f16 step per
// token: QuEST or absmax with G = head_dim); then two tokens share each parameter word and each
// writes its own half with a pair of atomics.
// With pc.win_store (a step of one token per sequence: decode) it also writes the token's f16
// window row, as kv_store_window.comp would after the attention: one dispatch fewer per layer
// (a dispatch costs ~0.1 ms on lavapipe whatever its size). Before the attention is safe then:
// the ring row a token takes held the token `recent` positions back, which its own row no longer
// reads in f16, and a sequence has no other row in the step (engine/forward.c, window_early).
// With pc.copy_f16 (a layer with f16 windows) it also writes the token's key or value head rounded
// to f16 into K16 / V16, where attention_paged reads this step's own keys in f16: rounded once here
// instead of in every tile and lane that reads them (the rounding is integer code, ~40 operations
// an element).
#extension GL_GOOGLE_include_directive : require
#ifdef WK_KVQ_LANES
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_ballot : require
#endif
#include "kv_quant.glsl" // also wk_kvq_pack_f16x2: the one f32 -> f16 rounding, as kv_store_window's
layout(local_size_x_id = 0) in; // the host's subgroup size (wk_vk.subgroup_size)
struct RowInfo { uint pos; uint table_off; };
layout(std430, binding = 0) readonly buffer K { float k[]; };        // [T][n_head_kv][D]
layout(std430, binding = 1) readonly buffer V { float v[]; };
layout(std430, binding = 2) readonly buffer Rows { RowInfo rows[]; };
layout(std430, binding = 3) readonly buffer Tables { uint tables[]; };
layout(binding = 4, r32ui) uniform uimageBuffer Pool; // not writeonly: the atomics read (they need no coherent)
layout(std430, binding = 5) readonly buffer Dest { uint dest[]; };  // [class][T] window row (word offset) or ~0
layout(std430, binding = 6) writeonly buffer K16 { uint k16[]; };  // [T][n_head_kv][D/2] f16 pairs
layout(std430, binding = 7) writeonly buffer V16 { uint v16[]; };
layout(push_constant) uniform PC {
    uint head_dim; uint n_head_kv; uint n_tokens;
    uint k_off;        // the layer's first key slab: words into a block (its KV heads' follow)
    int kind; int bits; int group; int rank_k; int rank_v;
    uint block_tokens; uint slab_words; uint block_words; uint params_words; uint code_words;
    uint table_stride; // block-table entries per block of tokens (layer groups)
    uint table_col;    // the layer's group: its entry among them
    uint win_store;    // 1: also the f16 window row (below); win_layer, dest_base as kv_store_window's
    uint win_layer; uint dest_base;
    float quest_c2;    // QuEST's constant for this layer's clip (wk_kvq_quest_c2); 0: unclipped
    // The values are bits / slab_words / params_words / code_words / quest_c2; the keys these (the
    // same unless the layer has wide keys, engine/kv/kv_pool.h), the values' first slab at v_off.
    uint v_off; int k_bits; uint k_slab_words; uint k_params_words; uint k_code_words; float k_quest_c2;
    uint copy_f16;     // 1: also the f16 copy into K16 / V16 (above)
} pc;

const uint MAXW = 64u; // code words of one token head: D*b/32 <= 512*4/32
void main() {
#ifdef WK_KVQ_LANES
    // A driver that runs the workgroup as narrower subgroups than the host assumed: the first does it all.
    if (gl_SubgroupID != 0u) return;
    uint id = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
#else
    uint id = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
#endif
    uint per_token = pc.n_head_kv * 2u;
    if (id >= pc.n_tokens * per_token) return;
    uint t = id / per_token, kh = (id % per_token) >> 1, kv = id & 1u;
    RowInfo ri = rows[t];
    uint blk = tables[ri.table_off + (ri.pos / pc.block_tokens) * pc.table_stride + pc.table_col];
    uint tt = ri.pos % pc.block_tokens;
    int ibits = kv == 0u ? pc.k_bits : pc.bits;
    uint code_words = kv == 0u ? pc.k_code_words : pc.code_words;
    uint params_words = kv == 0u ? pc.k_params_words : pc.params_words;
    float quest_c2 = kv == 0u ? pc.k_quest_c2 : pc.quest_c2;
    uint slab = blk * pc.block_words + (kv == 0u ? pc.k_off + kh * pc.k_slab_words : pc.v_off + kh * pc.slab_words);
    uint D = pc.head_dim, G = uint(pc.group), ngroups = D / G, bits = uint(ibits);
    uint P = uint(wk_kvq_params_per_group(pc.kind)), cb = wk_kvq_code_bytes(ibits, pc.group);
    uint src = (t * pc.n_head_kv + kh) * D;
#ifdef WK_KVQ_LANES
    // The lanes that share a group: the subgroup's (or the workgroup's, if the driver's subgroup
    // is wider), at most G; all powers of two.
    uint lane = gl_SubgroupInvocationID, S = min(gl_SubgroupSize, gl_WorkGroupSize.x), L = min(S, G);
#else
    uint lane = 0u, S = 1u, L = 1u; // the invocation alone
#endif
    uint words[MAXW];
    for (uint w = 0u; w < code_words; ++w) words[w] = 0u;
    uint hbase = tt * ngroups * P; // u16 index of the token's first parameter in the slab
    bool shared_words = ((ngroups * P) & 1u) != 0u;
    uint pbase = slab + params_words + hbase / 2u;
    uint pword = 0u;
    for (uint g = 0u; g < ngroups; ++g) {
        if (lane < L)
            for (uint m = 0u; m < G / L; ++m) {
                uint i = src + g * G + lane + L * m;
                wk_kvq_x[m] = kv == 0u ? k[i] : v[i];
            }
        wk_kvq_encode_group(pc.kind, ibits, pc.group, kv == 0u ? pc.rank_k : pc.rank_v, quest_c2, lane, L);
        // The group's G*b code bits go to token bit g*G*b (a 3-bit group of 16 straddles words).
        uint gbits = G * bits, at = g * gbits;
        for (uint b = 0u; b < gbits; b += 32u) {
            uint chunk = wk_kvq_w[b >> 5];
            uint n = min(32u, gbits - b);
            if (n < 32u) chunk &= (1u << n) - 1u;
            uint pos = at + b, w = pos >> 5, o = pos & 31u;
            words[w] |= chunk << o;
            if (o != 0u && o + n > 32u) words[w + 1u] |= chunk >> (32u - o);
        }
        // The parameters, P f16 values after the codes in the group layout (byte cb, an even
        // offset): lane 0 writes them.
        if (lane == 0u) {
            for (uint p = 0u; p < P; ++p) {
                uint byte_at = cb + 2u * p;
                uint h = (wk_kvq_w[byte_at >> 2] >> ((byte_at & 3u) * 8u)) & 0xffffu;
                uint idx = g * P + p;   // u16 index within the token's parameters
                if (shared_words) {
                    // The neighbouring token may be written in this dispatch or another step: only
                    // this half of the word changes (stale bits of a reused block are cleared first).
                    uint hi = hbase + idx, at = slab + params_words + (hi >> 1), sh = (hi & 1u) * 16u;
                    imageAtomicAnd(Pool, int(at), ~(0xffffu << sh));
                    imageAtomicOr(Pool, int(at), h << sh);
                    continue;
                }
                pword |= h << ((idx & 1u) * 16u);
                if ((idx & 1u) == 1u) {
                    imageStore(Pool, int(pbase + (idx >> 1)), uvec4(pword));
                    pword = 0u;
                }
            }
        }
    }
    uint cbase = slab + tt * code_words;
    for (uint w = lane; w < code_words; w += S) imageStore(Pool, int(cbase + w), uvec4(words[w]));
    uint row = pc.win_store != 0u ? dest[pc.dest_base + t] : 0xffffffffu;
    if (pc.copy_f16 == 0u && row == 0xffffffffu) return;
    uint half_d = D / 2u, wbase = row + (pc.win_layer * 2u + kv) * pc.n_head_kv * half_d + kh * half_d;
    for (uint w = lane; w < half_d; w += S) {
        vec2 x = kv == 0u ? vec2(k[src + 2u * w], k[src + 2u * w + 1u]) : vec2(v[src + 2u * w], v[src + 2u * w + 1u]);
        uint h = wk_kvq_pack_f16x2(x);
        if (row != 0xffffffffu) imageStore(Pool, int(wbase + w), uvec4(h));
        if (pc.copy_f16 != 0u) {
            if (kv == 0u) k16[src / 2u + w] = h; else v16[src / 2u + w] = h;
        }
    }
}
