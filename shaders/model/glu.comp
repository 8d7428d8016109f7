#version 450
// Gated FFN activation: y = act(gate) * up, act = SiLU (SwiGLU) or tanh-approximated GELU (GeGLU)
// (common.glsl's glu_act). Steps of more than 4 tokens; fewer take matvec.comp's fused gate/up.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Gate { float gate[]; };
layout(std430, binding = 1) readonly buffer Up { float up[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC { uint n; uint act; } pc;
void main() {
    uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
    if (i >= pc.n) return;
    y[i] = glu_act(gate[i], pc.act) * up[i];
}
