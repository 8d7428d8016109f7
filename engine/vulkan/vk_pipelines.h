/* Compute pipelines built from the embedded SPIR-V, and dispatch with cached descriptor sets.
 * The table in vk_pipelines.c names each shader's bindings and push-constant size. */
#ifndef WK_VK_PIPELINES_H
#define WK_VK_PIPELINES_H

#include "vulkan/vk_device.h"

typedef enum {
    /* The weight kernels, one per device weight format in wk_wfmt's order (Q8A, F16, Q8H), so a
     * matrix's pipeline is the Q8A one + its format (wk_pipe_for_format). */
    WK_PIPE_EMBED_Q8A,
    WK_PIPE_EMBED_F16,
    WK_PIPE_EMBED_Q8H,
    WK_PIPE_MATMUL_Q8A,
    WK_PIPE_MATMUL_F16,
    WK_PIPE_MATMUL_Q8H,
    WK_PIPE_MATMUL_GLU_Q8A,      /* matmul's gate/up pipelines: act(gate) * up in one dispatch (constant 2 = 1) */
    WK_PIPE_MATMUL_GLU_F16,
    WK_PIPE_MATMUL_GLU_Q8H,
    WK_PIPE_MATMUL_TILED_Q8A,    /* the "gpu" kernel set's matmul (shared-memory tiles) */
    WK_PIPE_MATMUL_TILED_F16,
    WK_PIPE_MATMUL_TILED_Q8H,
    WK_PIPE_MATVEC_Q8A,
    WK_PIPE_MATVEC_F16,
    WK_PIPE_MATVEC_Q8H,
    WK_PIPE_MATVEC_GLU_Q8A,      /* matvec's gate/up pipelines: act(gate) * up in one dispatch (constant 2 = 1) */
    WK_PIPE_MATVEC_GLU_F16,
    WK_PIPE_MATVEC_GLU_Q8H,
    WK_PIPE_MATVEC_QKV_Q8A,      /* matvec's rows split over three outputs: q, k, v in one dispatch (constant 2 = 2) */
    WK_PIPE_MATVEC_QKV_F16,
    WK_PIPE_MATVEC_QKV_Q8H,
    WK_PIPE_RMSNORM,
    WK_PIPE_ADD_NORM,
    WK_PIPE_QK_NORM_ROPE,
    /* attention_paged.comp: a prefill step's two passes (16-row tiles) -- the bulk of the keys
     * without the f16 window path, and the window keys with it -- and the decode pipelines (4-row
     * tiles, all keys in one pass) for steps of one token per sequence; each also as _SWA,
     * specialised for the sliding layers' own KV format, and as _WIDE, for the layers whose keys
     * are wider than their values (kv_pool.h "Wide keys"). engine/kv/attention_record.c. */
    WK_PIPE_ATTENTION_BULK,
    WK_PIPE_ATTENTION_BULK_SWA,
    WK_PIPE_ATTENTION_WINDOWS,
    WK_PIPE_ATTENTION_WINDOWS_SWA,
    WK_PIPE_ATTENTION_DECODE,
    WK_PIPE_ATTENTION_DECODE_SWA,
    WK_PIPE_ATTENTION_BULK_WIDE,
    WK_PIPE_ATTENTION_WINDOWS_WIDE,
    WK_PIPE_ATTENTION_DECODE_WIDE,
    /* The GPU variant (kernel set "gpu"; constant 9) of the decode pipelines and of the prefill bulk
     * pass: bulk keys a key per lane. */
    WK_PIPE_ATTENTION_DECODE_LANES,
    WK_PIPE_ATTENTION_DECODE_LANES_SWA,
    WK_PIPE_ATTENTION_DECODE_LANES_WIDE,
    WK_PIPE_ATTENTION_BULK_LANES,
    WK_PIPE_ATTENTION_BULK_LANES_SWA,
    WK_PIPE_ATTENTION_BULK_LANES_WIDE,
    WK_PIPE_ATTENTION_REDUCE,
    WK_PIPE_KV_STORE_WINDOW,
    WK_PIPE_KV_STORE_QUANT,
    WK_PIPE_KV_STORE_QUANT_LANES, /* the same with a subgroup a head, its lanes sharing each group (store=lanes) */
    WK_PIPE_KV_TRANSFORM,
    WK_PIPE_KV_TRANSFORM_DECODE, /* the same with a token's query heads a tile, for steps of few tokens */
    WK_PIPE_KV_TRANSFORM_DECODE_ROPE, /* the decode twin applying qk_norm_rope itself (kv_transform.comp) */
    WK_PIPE_KV_STORE_F16,
    WK_PIPE_GLU,
    WK_PIPE_COUNT
} wk_pipe_id;

/* A weight kernel's pipeline for a matrix of device weight format `fmt` (weights.h's wk_wfmt:
 * 0 q8a16, 1 f16, 2 q8a16 with half pairs): `q8a` is the kernel's Q8A pipeline. */
static inline wk_pipe_id wk_pipe_for_format(wk_pipe_id q8a, int fmt) { return (wk_pipe_id)(q8a + fmt); }

/* attention_paged's pipeline sets, one per format a layer may have: the main format, the sliding
 * layers' own (_SWA), wide keys (_WIDE). */
typedef enum { WK_ATTN_SET_MAIN, WK_ATTN_SET_SWA, WK_ATTN_SET_WIDE, WK_ATTN_SETS } wk_attn_set;
typedef struct { wk_pipe_id bulk, windows, decode, decode_lanes, bulk_lanes; } wk_attn_pipes;
static inline wk_attn_pipes wk_attn_pipes_of(wk_attn_set set) {
    return set == WK_ATTN_SET_SWA    ? (wk_attn_pipes){WK_PIPE_ATTENTION_BULK_SWA, WK_PIPE_ATTENTION_WINDOWS_SWA,
                                                       WK_PIPE_ATTENTION_DECODE_SWA, WK_PIPE_ATTENTION_DECODE_LANES_SWA,
                                                       WK_PIPE_ATTENTION_BULK_LANES_SWA}
           : set == WK_ATTN_SET_WIDE ? (wk_attn_pipes){WK_PIPE_ATTENTION_BULK_WIDE, WK_PIPE_ATTENTION_WINDOWS_WIDE,
                                                       WK_PIPE_ATTENTION_DECODE_WIDE,
                                                       WK_PIPE_ATTENTION_DECODE_LANES_WIDE,
                                                       WK_PIPE_ATTENTION_BULK_LANES_WIDE}
                                     : (wk_attn_pipes){WK_PIPE_ATTENTION_BULK, WK_PIPE_ATTENTION_WINDOWS,
                                                       WK_PIPE_ATTENTION_DECODE, WK_PIPE_ATTENTION_DECODE_LANES,
                                                       WK_PIPE_ATTENTION_BULK_LANES};
}

/* Profile buckets: one per pipeline, then the start mark, then buckets that time a role rather than
 * a pipeline (wk_prof_label): the output head runs matvec/matmul like the layers' matrices, but its
 * share of a step is what bounds decode (issue 15). */
enum { WK_PROF_START = WK_PIPE_COUNT, WK_PROF_HEAD, WK_PROF_HEAD_HOST, WK_PROF_LAYERS_HOST, WK_PROF_KV_HOST, WK_PROF_ATTN_HOST, WK_PROF_SLOTS };

#define WK_MAX_BINDINGS 10

/* One binding argument: a texel view, or a storage-buffer range (range 0 = whole buffer). */
typedef struct wk_arg {
    VkBufferView view;
    VkBuffer buf;
    VkDeviceSize offset, range;
} wk_arg;

typedef struct wk_desc_entry {
    uint64_t hash;
    int pipe;
    wk_arg args[WK_MAX_BINDINGS];
    VkDescriptorSet set;
} wk_desc_entry;

typedef struct wk_pipelines {
    VkDescriptorSetLayout dsl[WK_PIPE_COUNT];
    VkPipelineLayout layout[WK_PIPE_COUNT];
    /* Created on a pipeline's first dispatch, with the specialisation set by then (a GPU driver
     * compiles at creation: a pipeline a model never runs costs nothing, and one specialised to the
     * KV format is compiled once, not generic and again specialised). */
    VkPipeline pipe[WK_PIPE_COUNT];
    int32_t spec[WK_PIPE_COUNT][5];   /* constants 2..4, 6 and 8 (wk_pipelines_specialize_*) */
    bool specialized[WK_PIPE_COUNT];  /* false: the shader's defaults (format from push constants) */
    VkDescriptorPool pool;
    wk_desc_entry *cache; /* open addressing; sets are created once per distinct binding tuple */
    uint32_t cache_cap, cache_used;
    uint32_t matvec_rows;       /* rows per matvec subgroup (matvec.comp's constant 1) */
    uint32_t matvec_subgroups;  /* subgroups per matvec workgroup (its constant 3; the kernel set's) */
    /* The kernel set (wk_pipelines_choose_kernels): false "cpu", the shaders tuned for lavapipe
     * (texel buffers, register tiles, no shared memory); true "gpu", which swaps in the variants
     * written for GPUs: the matmul's shared-memory tiles, the attention's key per lane
     * (attention_record.c), more key splits (attention_plan.h), four subgroups a matvec workgroup.
     * The fields below it are what the engine reads; the set picks them and
     * wk_pipelines_apply_variants overrides any one. */
    bool gpu_kernels;
    bool matmul_tiled;    /* prefill matmuls in matmul_tiled.comp (else matmul.comp, gate and up joined) */
    bool attn_lanes;      /* attention_paged's key-per-lane variant for decode steps and prefill bulk keys */
    bool attn_gpu_splits; /* the attention's key-split targets for a GPU (WK_ATTN_*_GPU) */
    /* A decode step's q/k norm and RoPE applied by the key transform as it reads q and k
     * (kv_transform_decode_rope), not by a qk_norm_rope dispatch before it: on in both sets. */
    bool transform_rope;
    /* kv_store_quant's lanes module: a subgroup encodes each token's key or value head, its lanes
     * sharing every group (kv_store_quant_lanes), not an invocation each head: the "gpu" set's. */
    bool store_lanes;
    /* matmul.comp's and kv_transform.comp's modules (wk_pipelines_set_matmul_shuffle): true the
     * ones whose lanes share the activations' fetches through subgroup shuffles, where the device
     * allows it; false the ones without shuffles. */
    bool matmul_shuffle;
    /* The output head computed by the host CPU (engine/host/host_matmul.h) from the weights' host
     * mapping, not by a matvec/matmul dispatch: the "cpu" set's on a CPU device (lavapipe), where the
     * host's vector code reads the head's bytes ~4x faster than a shader; needs the weights' memory
     * host-visible and coherent (wk_vk_weights_mappable). */
    bool head_host;
    /* The layers' weight products (q/k/v, W_o, gate/up, down) and the norms and activation between
     * them on the host CPU too (engine/forward_host.c), the device keeping the embedding, the key
     * transform, the cache stores and the attention: on lavapipe a decode step's matvecs read their
     * weights ~4x slower than the host; the same condition as head_host. */
    bool linear_host;
    /* With linear_host: the host also prepares the queries and writes the cache after each q/k/v
     * product (q/k norm, RoPE, the key transform, the quantizing or f16 store, the window rows:
     * engine/forward_host_kv.c), leaving the device the embedding and the attention (attn_host:
     * that too); on lavapipe these are four dispatches a layer at ~0.1 ms each whatever their size. */
    bool kv_host;
    /* With kv_host: the paged attention on the host too (engine/forward_host_attn.c), so a step
     * leaves the device only the embedding: on lavapipe the attention's cost follows the
     * instructions a key takes, and decoding codes took more than reading halves. */
    bool attn_host;
    int head_threads; /* the host parts' threads (wk_engine_params.host_threads; 0: every CPU allowed) */
    /* Optional GPU-time profile per pipeline (wk_pipelines_enable_profile): a timestamp after each
     * dispatch. */
    bool profile;
    VkQueryPool queries;
    uint32_t n_queries;
    uint8_t query_pipe[4096];      /* the bucket of each timestamp */
    uint8_t prof_as;               /* 0, or the bucket the next dispatches count in (wk_prof_label) */
    double prof_ms[WK_PROF_SLOTS];
    uint64_t prof_calls[WK_PROF_SLOTS];
} wk_pipelines;

/* The layouts and the descriptor pool; each pipeline itself is created by its first wk_dispatch. */
int wk_pipelines_create(wk_vk *vk, wk_pipelines *p, char *err, size_t errlen);
/* Turns the profile on (wk_engine_params.profile): a GPU timestamp after every dispatch, summed
 * per pipeline and printed by wk_prof_print. Stays off, silently, on a device without compute
 * timestamps or when the query pool cannot be made. */
void wk_pipelines_enable_profile(wk_vk *vk, wk_pipelines *p);
/* Specialises attention_paged's pipelines of one set (bulk, windows, decode; WK_ATTN_SET_SWA: the
 * sliding-window layers' when they have a KV format of their own; WK_ATTN_SET_WIDE: the layers with
 * wide keys, key_bits wide, 0 elsewhere) to one KV format (kind, bits, group, key_bits as specialisation
 * constants 2, 3, 4, 8) and the model's head size (a lane's chunks of a head vector, constant 6), so its decode
 * compiles to straight-line code for that format: ~1.5x faster on lavapipe than reading the format
 * from push constants. Dispatches must then pass the same format and head_dim.
 * Sets what the pipeline's creation (its next dispatch) uses; one already created is destroyed, so
 * call it before recording a step that uses it, never while one is in flight. */
int wk_pipelines_specialize_kv(wk_vk *vk, wk_pipelines *p, wk_attn_set set, int kind, int bits, int key_bits, int group,
                               int head_dim, char *err, size_t errlen);
/* Workgroups a matvec over N rows dispatches: each computes matvec_rows rows per subgroup. */
static inline uint32_t wk_matvec_groups(const wk_pipelines *p, uint32_t N) {
    const uint32_t rows = p->matvec_rows * p->matvec_subgroups;
    return (N + rows - 1) / rows;
}
/* Sets the subgroups per matvec workgroup (1: "cpu" kernels, 4: "gpu"), dropping matvec pipelines
 * made with another count; as wk_pipelines_specialize_kv, never while a step is in flight. Fails
 * when the workgroup would exceed the device's limits. */
int wk_pipelines_set_matvec_subgroups(wk_vk *vk, wk_pipelines *p, uint32_t subgroups, char *err, size_t errlen);
/* Whether a matvec workgroup of `subgroups` subgroups fits the device's workgroup limits. */
bool wk_pipelines_matvec_fits(const wk_vk *vk, uint32_t subgroups);
/* Chooses matmul.comp's module: on (the default where the device allows it: subgroup shuffles in
 * compute shaders and a subgroup size that is a multiple of WK_MATMUL_WG) the lanes of a token
 * tile fetch its activations once between them; off every lane fetches its own. Drops matmul
 * pipelines made with the other; as wk_pipelines_set_matvec_subgroups, never while a step is in
 * flight. Turning it on fails on a device without those. */
int wk_pipelines_set_matmul_shuffle(wk_vk *vk, wk_pipelines *p, bool on, char *err, size_t errlen);
/* Chooses the kernel set: kernels WK_KERNELS_CPU / WK_KERNELS_GPU force one, WK_KERNELS_AUTO takes
 * "cpu" on a CPU device and "gpu" on any other that allows the GPU variants' workgroups (256
 * invocations, 8 KiB of shared memory). Forcing "gpu" on a device that does not allow them fails. */
int wk_pipelines_choose_kernels(wk_vk *vk, wk_pipelines *p, int kernels, char *err, size_t errlen);
/* Overrides single variants of the chosen set (engine/vulkan/vk_kernels.c): spec is NULL, empty,
 * or "name=value[,name=value...]" with names and values
 *   matmul=register|tiled        prefill matmuls: matmul.comp's register tiles or matmul_tiled.comp
 *   matmul_shuffle=on|off        matmul.comp's and kv_transform.comp's modules (wk_pipelines_set_matmul_shuffle)
 *   head=device|host             the output head by a dispatch, or by the host CPU (head_host)
 *   linear=device|host           the layers' weight products by dispatches, or by the host CPU (linear_host;
 *                                device also sets kv_write=device)
 *   kv_write=device|host         q/k norm, RoPE, key transform and cache stores by dispatches, or by the
 *                                host CPU (kv_host; host needs linear=host; device also sets
 *                                paged_attention=device)
 *   paged_attention=device|host  the attention over the paged cache by dispatches, or by the host CPU
 *                                (attn_host; host needs kv_write=host)
 *   matvec=N                     subgroups a matvec workgroup (wk_pipelines_set_matvec_subgroups)
 *   attention=subgroup|lanes     attention_paged: a key per subgroup, or the key-per-lane variant
 *   splits=cpu|gpu               the attention's key-split targets
 *   transform_rope=on|off        a decode step's q/k norm and RoPE inside the key transform, or apart
 *   store=invocation|lanes       kv_store_quant: an invocation a head, or a subgroup sharing it
 * (the set's own values are what wk_pipelines_describe_variants prints). An unknown name or value
 * fails (WK_ERR_INVALID), and so does a variant the device cannot run (WK_ERR_UNSUPPORTED), with the
 * reason in err; as the setters above, never while a step is in flight. */
int wk_pipelines_apply_variants(wk_vk *vk, wk_pipelines *p, const char *spec, char *err, size_t errlen);
/* The variants in force, in wk_pipelines_apply_variants' syntax (every name, in its order). */
void wk_pipelines_describe_variants(const wk_pipelines *p, char *buf, size_t cap);
/* The same for kv_transform and the transform's block; decode_units: the decode twin's tile
 * (wk_xform_decode_units). */
int wk_pipelines_specialize_transform(wk_vk *vk, wk_pipelines *p, int block, int decode_units, char *err,
                                      size_t errlen);
void wk_pipelines_destroy(wk_vk *vk, wk_pipelines *p);
/* Records bind + push + dispatch into vk->cmd (creating the pipeline on its first use). args has one
 * entry per binding of the pipeline. */
int wk_dispatch(wk_vk *vk, wk_pipelines *p, wk_pipe_id id, const wk_arg *args, const void *push, uint32_t push_size,
                uint32_t gx, uint32_t gy, uint32_t gz, char *err, size_t errlen);
const char *wk_pipe_name(wk_pipe_id id);
/* Profiling: call begin right after wk_vk_begin and collect after the submit completed. */
void wk_prof_begin(wk_vk *vk, wk_pipelines *p);
void wk_prof_collect(wk_vk *vk, wk_pipelines *p);
void wk_prof_print(const wk_pipelines *p);
/* Counts the following dispatches in bucket `slot` (WK_PROF_HEAD, ...) instead of their pipeline's;
 * 0 goes back to the pipelines'. */
static inline void wk_prof_label(wk_pipelines *p, int slot) { p->prof_as = (uint8_t)slot; }
/* A bucket's name: the pipeline's, or the role's ("output_head"); NULL for the start mark. */
const char *wk_prof_name(int slot);

static inline wk_arg wk_arg_view(VkBufferView v) { return (wk_arg){.view = v}; }
static inline wk_arg wk_arg_buf(VkBuffer b) { return (wk_arg){.buf = b}; }
/* A buffer that one pipeline writes as a storage buffer and the next reads through its texel view
 * (the attention's partials): each binding takes the field of its kind. */
static inline wk_arg wk_arg_buf_view(VkBuffer b, VkBufferView v) { return (wk_arg){.view = v, .buf = b}; }
static inline wk_arg wk_arg_range(VkBuffer b, VkDeviceSize off, VkDeviceSize range) {
    return (wk_arg){.buf = b, .offset = off, .range = range};
}

#endif
