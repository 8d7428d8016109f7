#version 450
// Token embedding lookup: x[t] = W[token[t]] * scale, one invocation per 16-weight group, from W
// row-major (the device's layout) or, when the output head it doubles as is stored for the host's
// products (pc.panels), by panels of 16 rows (engine/host/host_panels.h).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_samplerless_texture_functions : require
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 2) readonly buffer Tokens { int tokens[]; };
layout(std430, binding = 3) writeonly buffer X { vec4 x4[]; };
layout(push_constant) uniform PC { uint n_embd; uint n_tokens; float scale; uint panels; } pc;

// Weights 4i .. 4i+3 of row r's group g by panels: block k = (r / 16) * groups + g holds its 16
// columns one after another, each column the panel's 16 rows (lane l = r % 16), and its pairs as 16
// scales then 16 offsets, each a half (q8h) or f32 (q8a), so pair texel k*16 + l/2 (q8h: two
// halves a u32; q8a: two floats a texel) holds lane l's scale in component l % 2 and texel
// k*16 + 8 + l/2 its offset. A weight is formed as the row-major path forms it.
vec4 panel_part(uint k, uint l, uint i) {
    vec4 w;
    for (uint c = 0; c < 4; ++c) {
        uint col = 4 * i + c;
#if defined(WFMT_F16)
        // halves at 256k + 16 col + l, eight a texel
        uint word = texelFetch(WC, int(k * 32 + col * 2 + l / 8))[(l % 8) / 2];
        w[c] = unpackHalf2x16(word)[l % 2];
#else
        // codes at 256k + 16 col + l, sixteen a texel
        uint word = texelFetch(WC, int(k * 16 + col))[l / 4];
        w[c] = float(bitfieldExtract(int(word), int(8 * (l % 4)), 8));
#endif
    }
#if defined(WFMT_F16)
    return w;
#else
    float s = WS_PAIR(k * 16 + l / 2)[l % 2], o = WS_PAIR(k * 16 + 8 + l / 2)[l % 2];
    return w * s + o;
#endif
}

void main() {
    uint groups = pc.n_embd / 16;
    uint id = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
    if (id >= groups * pc.n_tokens) return;
    uint t = id / groups, g = id % groups, r = uint(tokens[t]);
    if (pc.panels != 0) {
        uint k = (r / 16) * groups + g;
        for (uint i = 0; i < 4; ++i) x4[t * (pc.n_embd / 4) + g * 4 + i] = panel_part(k, r % 16, i) * pc.scale;
        return;
    }
    wgroup w = wgroup_load(r * groups + g);
    for (uint i = 0; i < 4; ++i) x4[t * (pc.n_embd / 4) + g * 4 + i] = wgroup_part(w, i) * pc.scale;
}
