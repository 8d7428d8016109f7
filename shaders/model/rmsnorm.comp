#version 450
// RMSNorm of each row: y = x / sqrt(mean(x^2) + eps) * w. One subgroup-sized workgroup per row.
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC { uint n; uint n_rows; float eps; } pc;
void main() {
    uint row = gl_WorkGroupID.x, lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x;
    if (row >= pc.n_rows) return;
    uint base = row * pc.n;
    float ss = 0.0;
    for (uint i = lane; i < pc.n; i += nl) ss += x[base + i] * x[base + i];
    float inv = inversesqrt(subgroupAdd(ss) / float(pc.n) + pc.eps);
    for (uint i = lane; i < pc.n; i += nl) y[base + i] = x[base + i] * inv * w[i];
}
