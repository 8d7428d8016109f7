#version 450
// Residual update fused with the next pre-norm, one subgroup-sized workgroup per row:
//   h += has_post ? rmsnorm(a) * w_post : a      (Gemma's post-norm, or a plain residual)
//   y  = rmsnorm(h) * w_next                     (input of the next matmul)
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) buffer H { float h[]; };
layout(std430, binding = 2) readonly buffer WPost { float w_post[]; };
layout(std430, binding = 3) readonly buffer WNext { float w_next[]; };
layout(std430, binding = 4) writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC { uint n; uint n_rows; float eps; uint has_post; } pc;
void main() {
    uint row = gl_WorkGroupID.x, lane = gl_LocalInvocationID.x, nl = gl_WorkGroupSize.x;
    if (row >= pc.n_rows) return;
    uint base = row * pc.n;
    float inv_a = 1.0;
    if (pc.has_post != 0) {
        float ss = 0.0;
        for (uint i = lane; i < pc.n; i += nl) ss += a[base + i] * a[base + i];
        inv_a = inversesqrt(subgroupAdd(ss) / float(pc.n) + pc.eps);
    }
    float ss = 0.0;
    for (uint i = lane; i < pc.n; i += nl) {
        float add = pc.has_post != 0 ? a[base + i] * inv_a * w_post[i] : a[base + i];
        float v = h[base + i] + add;
        h[base + i] = v;
        ss += v * v;
    }
    float inv = inversesqrt(subgroupAdd(ss) / float(pc.n) + pc.eps);
    for (uint i = lane; i < pc.n; i += nl) y[base + i] = h[base + i] * inv * w_next[i];
}
