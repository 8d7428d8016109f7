#version 450
// Key transform after RoPE: k' = T_K k for key heads, q' = T_K^-T q for query heads (so q'.k' =
// q.k). T is block-diagonal (blocks of B), one matrix pair per KV head of this layer.
// Out of place: qk_norm_rope leaves the rotated queries and keys in one scratch buffer (X: the
// queries, then the keys from texel pc.k_in_base), and this shader writes q' and k' into Q and K.
// So no invocation overwrites what another still reads, and there is no barrier and no workgroup
// shape to keep: an invocation owns RV vec4s of one head's output (rows R c .. R c + R - 1,
// R = SC_ROWS, which lie in one block as B is a multiple of R) for SC_TT tokens, like
// matmul.comp's register tile: each step fetches R matrix texels and one x texel per unit (below)
// and does R x SC_TT dot products (the matrices and x through texel buffers: storage loads are
// per-lane loops on lavapipe, docs/lavapipe.md). 8 rows, not 4: each x texel then serves eight
// rows, and on lavapipe a kernel's time follows its texel fetches. Workgroups: x covers a head's
// D/R row tiles (wk_xform_groups_x), y the tiles of SC_TT units (below), so a workgroup never
// mixes queries and keys.
// Built twice (shaders/meson.build), as matmul.comp is: with WK_XFORM_SHUFFLE (devices with
// subgroup shuffles, wk_pipelines.matmul_shuffle) the lanes that share a unit tile and a block
// fetch its SC_TT units' x texels once between them, a unit each, and pass them round with
// subgroupShuffle, where every lane would fetch all SC_TT (on lavapipe a shuffle from a constant
// lane is a register broadcast, a fetch a gather: docs/lavapipe.md); the module without it (any
// other device) fetches per lane.
// Built with WK_XFORM_ROPE as well (kv_transform_decode_rope, decode steps): then X holds q and k
// as the q/k/v matvec left them, and this shader applies qk_norm_rope's per-head RMSNorm, RoPE and
// query scale to each x texel as it fetches it, so a decode step needs no qk_norm_rope dispatch (on
// lavapipe a small dispatch costs ~0.1 ms whatever it does, docs/lavapipe.md). The norm needs a
// unit's whole head: every subgroup sums its tile's units' squares first (a lane each a part of the
// head), and every lane then scales what it fetches.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#ifdef WK_XFORM_SHUFFLE
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#ifdef WK_XFORM_ROPE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#extension GL_GOOGLE_include_directive : require
#include "shader_consts.h"
#include "common.glsl"  // rope_first, rope_second
#extension GL_EXT_samplerless_texture_functions : require
layout(local_size_x_id = 0) in;
// The transform's block as a specialisation constant (wk_pipelines_specialize_transform; the
// engine sets its transform's): the inner loop then has a constant bound. 0 (the default) reads
// it from the push constants, so one pipeline serves any block.
layout(constant_id = 2) const int SC_BLOCK = 0;
// Units per invocation, specialisation constant 3: for steps of many tokens WK_XFORM_TOKENS, or
// WK_XFORM_TOKENS_MAX where the block's runs of lanes can share the fetches (wk_xform_step_units);
// for the decode twin (kv_transform_decode) the query heads per KV head (at most WK_XFORM_TOKENS),
// so a one-token step computes no copies of its queries.
layout(constant_id = 3) const uint SC_TT = 8;
const uint TT = WK_XFORM_TOKENS_MAX;  // the most units per invocation (the accumulators are sized for it)
// Output rows per invocation, specialisation constant 4: WK_XFORM_ROWS when it divides the block,
// else 4 (wk_xform_rows; every block is a multiple of 4).
layout(constant_id = 4) const uint SC_ROWS = 4;
const uint RV = SC_ROWS / 4u, RMAX = WK_XFORM_ROWS / 4u;  // output vec4s per invocation, and at most
#ifdef WK_XFORM_SHUFFLE
// A block's row tiles: the lanes of one (a run of them, aligned as workgroups and blocks are) read
// the same x texels. The first FL lanes of a run fetch the tile's units, FL at a time (NS of them
// each: a 16-unit tile takes two), so the run needs at least FL lanes and a power of two (aligned
// runs); the host takes this module only with subgroups of 8 or more
// (wk_pipelines_set_matmul_shuffle), so a run is at least min(8, RUN_MAX) lanes. A generic
// pipeline (SC_BLOCK 0) and smaller blocks fetch per lane.
const uint FL = SC_TT < 8u ? SC_TT : 8u, NS = (SC_TT + FL - 1u) / FL;
const uint RUN_MAX = SC_BLOCK > 0 ? uint(SC_BLOCK) / SC_ROWS : 0u;
// (Products, not &&: glslang turns a && of specialisation constants into code, not a constant.)
const uint SHUFFLE_N = uint(RUN_MAX >= FL) * uint(NS <= 2u) * uint((RUN_MAX & (RUN_MAX - 1u)) == 0u);
const bool SHUFFLE = SHUFFLE_N != 0u, SHUFFLE_SLOT1 = SHUFFLE_N * uint(NS > 1u) != 0u;
#else
const bool SHUFFLE = false;
#endif
layout(std430, binding = 0) writeonly buffer Q { vec4 q4[]; };   // [T][n_head][D/4]
layout(std430, binding = 1) writeonly buffer K { vec4 k4[]; };   // [T][n_head_kv][D/4]
layout(binding = 2) uniform textureBuffer M;                     // [layer][n_head_kv][2][D/B][B][B/4]
layout(binding = 3) uniform textureBuffer X;                     // q as Q, then k as K from k_in_base
layout(push_constant) uniform PC {
    uint head_dim; uint n_head; uint n_head_kv; uint n_tokens; uint block;
    uint mat_base;   // this layer's first texel in M
    uint k_in_base;  // the first key texel in X
    // WK_XFORM_ROPE only, as qk_norm_rope's (its module ignores them):
    uint n_rot; uint rope_neox; uint has_norm; uint rope_table_offset; float eps; float q_scale;
} pc;
#ifdef WK_XFORM_ROPE
struct RowInfo { uint pos; uint kv_base; };
layout(std430, binding = 4) readonly buffer QN { vec4 q_norm4[]; };
layout(std430, binding = 5) readonly buffer KN { vec4 k_norm4[]; };
layout(binding = 6) uniform textureBuffer Rope;                   // (cos, sin) per [pos][n_rot/2]
layout(std430, binding = 7) readonly buffer Rows { RowInfo rows[]; };

// 1 / rms of the head whose first texel in X is `at`, the same in every lane of the subgroup: each
// lane sums the squares of a part. Called in uniform control flow (subgroupAdd).
float inv_rms(uint at) {
    if (pc.has_norm == 0u) return 1.0;
    float ss = 0.0;
    for (uint c = gl_SubgroupInvocationID; c < pc.head_dim / 4u; c += gl_SubgroupSize) {
        vec4 x = texelFetch(X, int(at + c));
        ss += dot(x, x);
    }
    return inversesqrt(subgroupAdd(ss) / float(pc.head_dim) + pc.eps);
}

vec4 norm_weight(bool is_q, uint c) { return pc.has_norm != 0u ? (is_q ? q_norm4[c] : k_norm4[c]) : vec4(1.0); }

// Texel c of the head at `at`: normed (inv, the weights), rotated (its token's row of the cos/sin
// table, `rope_row`) and scaled, with qk_norm_rope's operations in its order. The host takes this
// module only when n_rot is a multiple of 8, so a texel is all rotated or all not, and NEOX pairs
// (d, d + n_rot/2) are whole texels apart.
vec4 normed_rotated(bool is_q, uint at, uint c, uint rope_row, float inv) {
    float scale = is_q ? pc.q_scale : 1.0;
    vec4 xa = texelFetch(X, int(at + c)) * inv * norm_weight(is_q, c);
    uint d = 4u * c, half_rot = pc.n_rot / 2u;
    if (d >= pc.n_rot) return xa * scale;
    if (pc.rope_neox != 0u) {
        // d and its partner d +- n_rot/2, xa this texel's, xb the partner's.
        bool first = d < half_rot;
        uint cb = first ? c + half_rot / 4u : c - half_rot / 4u, i = first ? d : d - half_rot;
        vec4 xb = texelFetch(X, int(at + cb)) * inv * norm_weight(is_q, cb);
        vec2 r0 = texelFetch(Rope, int(rope_row + i)).xy, r1 = texelFetch(Rope, int(rope_row + i + 1u)).xy;
        vec2 r2 = texelFetch(Rope, int(rope_row + i + 2u)).xy, r3 = texelFetch(Rope, int(rope_row + i + 3u)).xy;
        vec4 cs = vec4(r0.x, r1.x, r2.x, r3.x), sn = vec4(r0.y, r1.y, r2.y, r3.y);
        return first ? rope_first(xa, xb, cs, sn, scale) : rope_second(xb, xa, cs, sn, scale);
    }
    // Adjacent pairs (2i, 2i + 1), two in the texel.
    vec2 r0 = texelFetch(Rope, int(rope_row + d / 2u)).xy, r1 = texelFetch(Rope, int(rope_row + d / 2u + 1u)).xy;
    return vec4(rope_first(xa.x, xa.y, r0.x, r0.y, scale), rope_second(xa.x, xa.y, r0.x, r0.y, scale),
                rope_first(xa.z, xa.w, r1.x, r1.y, scale), rope_second(xa.z, xa.w, r1.x, r1.y, scale));
}
#endif

void main() {
#ifdef WK_XFORM_SHUFFLE
    // The row tile from the subgroup ids, not the local id: whatever order a driver puts
    // invocations in subgroups, each aligned run of lanes is then consecutive row tiles.
    uint lane = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
#else
    uint lane = gl_LocalInvocationID.x;  // (no subgroup operation here)
#endif
    uint D = pc.head_dim, C = D / 4u, c0 = (gl_WorkGroupID.x * gl_WorkGroupSize.x + lane) * RV;  // first vec4
    // The queries of one KV head share a matrix, so a query tile's units are (token, query head of
    // the group) pairs: a decode step's query heads share each matrix fetch as a prefill step's
    // tokens do. Workgroup y: each KV head's query tiles, then each one's key tiles (exactly as
    // many as there are: a workgroup with nothing to do still costs a few microseconds here).
    uint GQ = pc.n_head / pc.n_head_kv, q_tiles = (pc.n_tokens * GQ + SC_TT - 1u) / SC_TT;
    uint k_tiles = (pc.n_tokens + SC_TT - 1u) / SC_TT, y = gl_WorkGroupID.y;
    bool is_q = y < pc.n_head_kv * q_tiles;
    uint yk = y - pc.n_head_kv * q_tiles;  // (keys only)
    uint kh = is_q ? y / q_tiles : yk / k_tiles, G = is_q ? GQ : 1u;
    uint hs = is_q ? pc.n_head : pc.n_head_kv, units = pc.n_tokens * G;
    uint u0 = (is_q ? y % q_tiles : yk % k_tiles) * SC_TT;
    uint nu = min(SC_TT, units - u0);
#ifdef WK_XFORM_ROPE
    // Before any lane leaves: the norm's sums take the whole subgroup (uniform: one unit tile).
    float inv[TT];
    uint rope_row[TT];
    [[unroll]] for (uint i = 0u; i < SC_TT; ++i) {
        uint u = min(u0 + i, u0 + nu - 1u);
        inv[i] = inv_rms((is_q ? 0u : pc.k_in_base) + ((u / G) * hs + kh * G + u % G) * C);
        rope_row[i] = pc.rope_table_offset + rows[u / G].pos * (pc.n_rot / 2u);
    }
#endif
    // A whole run leaves or none of it: a run's row tiles lie in one block, and a head's row tiles
    // are whole blocks.
    if (c0 >= C || kh >= pc.n_head_kv) return;
    uint B = SC_BLOCK != 0 ? uint(SC_BLOCK) : pc.block, B4 = B / 4u;
    uint b = (4u * c0) / B;
    // Row 4 c0 of the block-diagonal matrix: row 4 c0 - bB of block b, B/4 texels a row.
    uint m0 = pc.mat_base + (kh * 2u + (is_q ? 1u : 0u)) * D * B4 + 4u * c0 * B4;
    // Unit u is token u / G, head kh G + u % G (keys: head kh): its vec4s start at
    // ((u / G) hs + kh G + u % G) C. Units past nu read the last one again (never stored).
    uint xin = is_q ? 0u : pc.k_in_base, at[TT];
    [[unroll]] for (uint i = 0u; i < SC_TT; ++i) {
        uint u = min(u0 + i, u0 + nu - 1u);
        at[i] = ((u / G) * hs + kh * G + u % G) * C;
    }
#ifdef WK_XFORM_SHUFFLE
    // The lane that fetched unit i: the run's first lane + i % FL (0 + i % FL when the subgroup is
    // one run, which lets the compiler see a constant lane), in its slot i / FL. This lane fetches
    // units s FL + (its place in the run) mod FL, s < NS.
    uint run = min(gl_SubgroupSize, RUN_MAX), run0 = gl_SubgroupSize <= RUN_MAX ? 0u : gl_SubgroupInvocationID & ~(run - 1u);
    uint lr = (gl_SubgroupInvocationID - run0) % FL;
    uint um0 = min(u0 + lr, u0 + nu - 1u), um1 = min(u0 + FL + lr, u0 + nu - 1u);  // slots 0 and 1
    uint mine0 = ((um0 / G) * hs + kh * G + um0 % G) * C, mine1 = ((um1 / G) * hs + kh * G + um1 % G) * C;
#ifdef WK_XFORM_ROPE
    float mine_inv0 = inv[0], mine_inv1 = inv[0];  // (of units lr and FL + lr, without indexing by them)
    uint mine_row0 = rope_row[0], mine_row1 = rope_row[0];
    [[unroll]] for (uint i = 1u; i < SC_TT; ++i) {
        if (lr == i) { mine_inv0 = inv[i]; mine_row0 = rope_row[i]; }
        if (FL + lr == i) { mine_inv1 = inv[i]; mine_row1 = rope_row[i]; }
    }
#endif
#endif
    vec4 acc[TT * RMAX];
    [[unroll]] for (uint i = 0u; i < SC_TT * RV; ++i) acc[i] = vec4(0.0);
    for (uint j = 0u; j < B4; ++j) {
        vec4 r[4u * RMAX];
        [[unroll]] for (uint e = 0u; e < 4u * RV; ++e) r[e] = texelFetch(M, int(m0 + e * B4 + j));
#ifdef WK_XFORM_SHUFFLE
#ifdef WK_XFORM_ROPE
        vec4 xl0 = SHUFFLE ? normed_rotated(is_q, xin + mine0, b * B4 + j, mine_row0, mine_inv0) : vec4(0.0);
        vec4 xl1 = SHUFFLE_SLOT1 ? normed_rotated(is_q, xin + mine1, b * B4 + j, mine_row1, mine_inv1) : vec4(0.0);
#else
        vec4 xl0 = SHUFFLE ? texelFetch(X, int(xin + mine0 + b * B4 + j)) : vec4(0.0);
        vec4 xl1 = SHUFFLE_SLOT1 ? texelFetch(X, int(xin + mine1 + b * B4 + j)) : vec4(0.0);
#endif
#endif
        [[unroll]] for (uint i = 0u; i < SC_TT; ++i) {
#ifdef WK_XFORM_ROPE
            vec4 xi = normed_rotated(is_q, xin + at[i], b * B4 + j, rope_row[i], inv[i]);
#else
            vec4 xi = texelFetch(X, int(xin + at[i] + b * B4 + j));
#endif
#ifdef WK_XFORM_SHUFFLE
            vec4 x = SHUFFLE ? subgroupShuffle(i < FL ? xl0 : xl1, run0 + i % FL) : xi;
#else
            vec4 x = xi;
#endif
            [[unroll]] for (uint v = 0u; v < RV; ++v)
                acc[i * RV + v] += vec4(dot(r[4u * v], x), dot(r[4u * v + 1u], x), dot(r[4u * v + 2u], x),
                                        dot(r[4u * v + 3u], x));
        }
    }
    [[unroll]] for (uint i = 0u; i < SC_TT; ++i) {
        if (i >= nu) continue;
        [[unroll]] for (uint v = 0u; v < RV; ++v) {
            if (is_q) q4[at[i] + c0 + v] = acc[i * RV + v]; else k4[at[i] + c0 + v] = acc[i * RV + v];
        }
    }
}
