#version 450
// Token embedding lookup: x[t] = W[token[t]] * scale, one invocation per 16-weight group.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_samplerless_texture_functions : require
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 2) readonly buffer Tokens { int tokens[]; };
layout(std430, binding = 3) writeonly buffer X { vec4 x4[]; };
layout(push_constant) uniform PC { uint n_embd; uint n_tokens; float scale; } pc;
void main() {
    uint groups = pc.n_embd / 16;
    uint id = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
    if (id >= groups * pc.n_tokens) return;
    uint t = id / groups, g = id % groups;
    wgroup w = wgroup_load(uint(tokens[t]) * groups + g);
    for (uint i = 0; i < 4; ++i) x4[t * (pc.n_embd / 4) + g * 4 + i] = wgroup_part(w, i) * pc.scale;
}
