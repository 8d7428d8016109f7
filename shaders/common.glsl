// Shared GLSL (weight bindings 0 and 1 when a WFMT_* is defined): weight-group loads for the three device weight formats, and small math helpers.
// A "group" is 16 consecutive weights of one row: the unit every matrix kernel walks K in.
//   WFMT_Q8A: WC texel (RGBA32UI) = 16 int8 codes; WS texel (RG32F) = (scale, offset).
//   WFMT_Q8H: the same codes; WS texel (R32UI) = (scale, offset) as two halves, for matrices whose
//     every pair is exactly an f16 (engine/weights.h): the same floats in half the bytes, and on
//     lavapipe a weight kernel's time follows the bytes its texel fetches gather (docs/lavapipe.md).
//   WFMT_F16: WC texels 2g, 2g+1 (RGBA32UI) = 16 packed halves; WS unused.
// Texel buffers are read as textureBuffer with samplerless texelFetch (a sampled image of Dim Buffer
// is invalid SPIR-V for Vulkan): the including shader enables GL_EXT_samplerless_texture_functions.

// The gated FFN's activation of the gate: act 0 SiLU (SwiGLU), 1 tanh-approximated GELU (GeGLU).
// glu.comp and matvec.comp's fused gate/up pipelines both call it, so the two give the same bits.
float glu_act(float g, uint act) {
    if (act == 0u) return g / (1.0 + exp(-g));
    // tanh(u) = 1 - 2/(exp(2u)+1): stays finite for large |u| where a naive ratio overflows.
    float u = 0.7978845608 * (g + 0.044715 * g * g * g);
    return 0.5 * g * (2.0 - 2.0 / (exp(2.0 * u) + 1.0));
}

// RoPE of the pairs (a, b) (a the pair's first element: x[i] of (x[i], x[i + n_rot/2]) for NEOX,
// x[2i] of (x[2i], x[2i+1]) otherwise) by the angles' (c, s), times scale: the first element's and
// the second's results. qk_norm_rope (a pair a lane) and kv_transform's decode twin (four pairs a
// texel) both call them, so the two rotate with the same operations.
float rope_first(float a, float b, float c, float s, float scale) { return (a * c - b * s) * scale; }
float rope_second(float a, float b, float c, float s, float scale) { return (a * s + b * c) * scale; }
vec4 rope_first(vec4 a, vec4 b, vec4 c, vec4 s, float scale) { return (a * c - b * s) * scale; }
vec4 rope_second(vec4 a, vec4 b, vec4 c, vec4 s, float scale) { return (a * s + b * c) * scale; }

vec4 i8x4(uint v) {
    return vec4(ivec4(bitfieldExtract(int(v), 0, 8), bitfieldExtract(int(v), 8, 8),
                      bitfieldExtract(int(v), 16, 8), bitfieldExtract(int(v), 24, 8)));
}

#if defined(WFMT_Q8A) || defined(WFMT_Q8H)
layout(binding = 0) uniform utextureBuffer WC;
#if defined(WFMT_Q8H)
layout(binding = 1) uniform utextureBuffer WS;
#define WS_PAIR(i) unpackHalf2x16(texelFetch(WS, int(i)).x)
#else
layout(binding = 1) uniform textureBuffer WS;
#define WS_PAIR(i) texelFetch(WS, int(i)).xy
#endif
// Raw group: codes + (scale, offset); dequantize component i with wgroup_part.
struct wgroup { uvec4 c; vec2 so; };
wgroup wgroup_load(uint group_index) {
    wgroup g;
    g.c = texelFetch(WC, int(group_index));
    g.so = WS_PAIR(group_index);
    return g;
}
vec4 wgroup_part(wgroup g, uint i) { return i8x4(g.c[i]) * g.so.x + g.so.y; }
#elif defined(WFMT_F16)
layout(binding = 0) uniform utextureBuffer WC;
layout(binding = 1) uniform textureBuffer WS;
struct wgroup { uvec4 a; uvec4 b; };
wgroup wgroup_load(uint group_index) {
    wgroup g;
    g.a = texelFetch(WC, int(2 * group_index));
    g.b = texelFetch(WC, int(2 * group_index + 1));
    return g;
}
vec4 wgroup_part(wgroup g, uint i) {
    uvec2 p = i == 0 ? g.a.xy : i == 1 ? g.a.zw : i == 2 ? g.b.xy : g.b.zw;
    return vec4(unpackHalf2x16(p.x), unpackHalf2x16(p.y));
}
#endif
