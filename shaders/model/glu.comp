#version 450
// Gated FFN activation: y = act(gate) * up, act = SiLU (SwiGLU) or tanh-approximated GELU (GeGLU).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Gate { float gate[]; };
layout(std430, binding = 1) readonly buffer Up { float up[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC { uint n; uint act; } pc;
void main() {
    uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
    if (i >= pc.n) return;
    float g = gate[i], a;
    if (pc.act == 0) {
        a = g / (1.0 + exp(-g));
    } else {
        // tanh(u) = 1 - 2/(exp(2u)+1): stays finite for large |u| where a naive ratio overflows.
        float u = 0.7978845608 * (g + 0.044715 * g * g * g);
        a = 0.5 * g * (2.0 - 2.0 / (exp(2.0 * u) + 1.0));
    }
    y[i] = a * up[i];
}
