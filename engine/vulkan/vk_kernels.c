/* Which shader variants run: the kernel set a device gets ("cpu" for lavapipe, "gpu" for the rest)
 * and the per-variant overrides on top of it (WUSHKV_KERNELS=gpu,attention=subgroup), so any
 * variant can be forced alone on any device that can run it: to compare two on one GPU, or to
 * test a GPU variant on lavapipe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan/shader_params.h"
#include "vulkan/vk_pipelines.h"
#include "wushkv/wushkv.h"

/* matmul_tiled.comp: a 16 x 16 workgroup, two 64 x 16 f32 tiles in shared memory. */
static bool tiled_fits(const wk_vk *vk) {
    const VkPhysicalDeviceLimits *lim = &vk->props.limits;
    return lim->maxComputeWorkGroupInvocations >= 256 && lim->maxComputeWorkGroupSize[0] >= 16 &&
           lim->maxComputeWorkGroupSize[1] >= 16 && lim->maxComputeSharedMemorySize >= 8192;
}

/* The refusal when the tiled matmul cannot run on the device (`what`: the set or variant asked for). */
static int tiled_refused(const wk_vk *vk, const char *what, char *err, size_t errlen) {
    const VkPhysicalDeviceLimits *lim = &vk->props.limits;
    snprintf(err, errlen, "%s: device %s allows %u invocations and %u bytes of shared memory a workgroup, the tiled "
             "matmul needs 256 and 8192", what, vk->props.deviceName, lim->maxComputeWorkGroupInvocations,
             lim->maxComputeSharedMemorySize);
    return WK_ERR_UNSUPPORTED;
}

/* attention_paged's key-per-lane variant: a tile's probabilities a lane each (subgroup <= 64) and
 * the decode tiles' queries in shared memory. The prefill bulk pass needs more (16-row tiles) and
 * falls back to its plain pipeline where that does not fit (wk_attn_bulk_lanes). */
static bool lanes_fit(const wk_vk *vk) {
    return vk->subgroup_size <= WK_ATTN_LANES_SG &&
           vk->props.limits.maxComputeSharedMemorySize >= wk_attn_lanes_shared_bytes(WK_ATTN_DECODE_ROWS);
}

/* kv_store_quant's lanes module: subgroup shuffles and broadcasts (arithmetic is required at open). */
static bool store_lanes_fit(const wk_vk *vk) {
    const VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_SHUFFLE_BIT | VK_SUBGROUP_FEATURE_BALLOT_BIT;
    return (vk->subgroup_ops & need) == need;
}

int wk_pipelines_choose_kernels(wk_vk *vk, wk_pipelines *p, int kernels, char *err, size_t errlen) {
    const bool fits = tiled_fits(vk);
    if (kernels == WK_KERNELS_GPU && !fits) return tiled_refused(vk, "kernel set gpu", err, errlen);
    if (kernels != WK_KERNELS_AUTO && kernels != WK_KERNELS_CPU && kernels != WK_KERNELS_GPU) {
        snprintf(err, errlen, "kernel set %d: expected auto, cpu or gpu", kernels);
        return WK_ERR_INVALID;
    }
    p->gpu_kernels = kernels == WK_KERNELS_GPU ||
                     (kernels == WK_KERNELS_AUTO && fits && vk->props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU);
    p->matmul_tiled = p->gpu_kernels;
    p->attn_lanes = p->gpu_kernels && lanes_fit(vk); /* a subgroup wider than 64 keeps a key per subgroup */
    p->attn_gpu_splits = p->gpu_kernels;
    p->transform_rope = true; /* one dispatch fewer a layer on any device */
    /* On lavapipe an invocation a head is as fast in decode and faster in prefill (docs/engine.md). */
    p->store_lanes = p->gpu_kernels && store_lanes_fit(vk);
    /* The head on the host only where the host is the device: on a GPU the device is faster. */
    p->head_host = !p->gpu_kernels && vk->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && wk_vk_weights_mappable(vk);
    p->linear_host = p->head_host; /* the same reason for the layers' weight products */
    /* And for the work between the q/k/v products and the attention (q/k norm, RoPE, the key
     * transform, the cache stores): on lavapipe each is a dispatch of ~0.1 ms whatever its size. */
    p->kv_host = p->linear_host;
    /* And the paged attention, which then leaves the device only the embedding: lavapipe's
     * attention costs the instructions a key takes, more for codes than for halves, where the host
     * decodes eight codes in a few vector instructions (docs/benchmarks-host.md). */
    p->attn_host = p->kv_host;
    /* Four subgroups a matvec workgroup on a GPU, where the device allows it; one otherwise. */
    return wk_pipelines_set_matvec_subgroups(vk, p, p->gpu_kernels && wk_pipelines_matvec_fits(vk, 4) ? 4 : 1, err,
                                             errlen);
}

/* value as one of two words: 0 the first, 1 the second, -1 neither. */
static int pick(const char *value, const char *no, const char *yes) {
    return strcmp(value, no) == 0 ? 0 : strcmp(value, yes) == 0 ? 1 : -1;
}

/* One "name=value" item. */
static int apply_one(wk_vk *vk, wk_pipelines *p, const char *name, const char *value, char *err, size_t errlen) {
    static const struct {
        const char *name, *no, *yes;
    } binary[] = {{"matmul", "register", "tiled"},
                  {"matmul_shuffle", "off", "on"},
                  {"attention", "subgroup", "lanes"},
                  {"splits", "cpu", "gpu"},
                  {"transform_rope", "off", "on"},
                  {"store", "invocation", "lanes"},
                  {"head", "device", "host"},
                  {"linear", "device", "host"},
                  {"kv_write", "device", "host"},
                  {"paged_attention", "device", "host"}};
    if (strcmp(name, "matvec") == 0) {
        char *end;
        long n = strtol(value, &end, 10);
        if (*value < '0' || *value > '9' || *end || n < 1 || n > 64) {
            snprintf(err, errlen, "kernel variant matvec=%s: expected a count of subgroups, 1 to 64", value);
            return WK_ERR_INVALID;
        }
        return wk_pipelines_set_matvec_subgroups(vk, p, (uint32_t)n, err, errlen);
    }
    for (size_t i = 0; i < sizeof binary / sizeof binary[0]; i++) {
        if (strcmp(name, binary[i].name) != 0) continue;
        const int on = pick(value, binary[i].no, binary[i].yes);
        if (on < 0) {
            snprintf(err, errlen, "kernel variant %s=%s: expected %s or %s", name, value, binary[i].no, binary[i].yes);
            return WK_ERR_INVALID;
        }
        switch (i) {
        case 0:
            if (on && !tiled_fits(vk)) return tiled_refused(vk, "kernel variant matmul=tiled", err, errlen);
            p->matmul_tiled = on;
            return 0;
        case 1: return wk_pipelines_set_matmul_shuffle(vk, p, on, err, errlen);
        case 2:
            if (on && !lanes_fit(vk)) {
                snprintf(err, errlen, "kernel variant attention=lanes: device %s has subgroups of %u (at most %u) and "
                         "%u bytes of shared memory a workgroup (%u needed)", vk->props.deviceName, vk->subgroup_size,
                         WK_ATTN_LANES_SG, vk->props.limits.maxComputeSharedMemorySize,
                         wk_attn_lanes_shared_bytes(WK_ATTN_DECODE_ROWS));
                return WK_ERR_UNSUPPORTED;
            }
            p->attn_lanes = on;
            return 0;
        case 3: p->attn_gpu_splits = on; return 0;
        case 4: p->transform_rope = on; return 0;
        case 6:
        case 7:
            if (on && !wk_vk_weights_mappable(vk)) {
                snprintf(err, errlen, "kernel variant %s=host: device %s keeps the weights in memory the host cannot "
                         "map coherently", name, vk->props.deviceName);
                return WK_ERR_UNSUPPORTED;
            }
            *(i == 6 ? &p->head_host : &p->linear_host) = on;
            if (i == 7 && !on) p->kv_host = p->attn_host = false; /* its host part follows the q/k/v products' */
            return 0;
        case 8:
            if (on && !p->linear_host) {
                snprintf(err, errlen, "kernel variant kv_write=host: the host writes the cache after its q/k/v "
                         "products, so it needs linear=host");
                return WK_ERR_UNSUPPORTED;
            }
            p->kv_host = on;
            if (!on) p->attn_host = false; /* it reads what the host wrote, in the order it wrote it */
            return 0;
        case 9:
            if (on && !p->kv_host) {
                snprintf(err, errlen, "kernel variant paged_attention=host: the host's attention follows its cache "
                         "writes, so it needs kv_write=host");
                return WK_ERR_UNSUPPORTED;
            }
            p->attn_host = on;
            return 0;
        default:
            if (on && !store_lanes_fit(vk)) {
                snprintf(err, errlen, "kernel variant store=lanes: device %s lacks subgroup shuffles or broadcasts in "
                         "compute shaders", vk->props.deviceName);
                return WK_ERR_UNSUPPORTED;
            }
            p->store_lanes = on;
            return 0;
        }
    }
    snprintf(err, errlen, "kernel variant '%s': expected matmul, matmul_shuffle, matvec, attention, splits, "
             "transform_rope, store, head, linear, kv_write or paged_attention", name);
    return WK_ERR_INVALID;
}

int wk_pipelines_apply_variants(wk_vk *vk, wk_pipelines *p, const char *spec, char *err, size_t errlen) {
    if (!spec || !*spec) return 0;
    char buf[256];
    if (strlen(spec) >= sizeof buf) {
        snprintf(err, errlen, "kernel variants: %zu characters, at most %zu", strlen(spec), sizeof buf - 1);
        return WK_ERR_INVALID;
    }
    strcpy(buf, spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            snprintf(err, errlen, "kernel variant '%s': expected name=value (matmul, matmul_shuffle, matvec, attention, "
                     "splits, transform_rope, store, head, linear, kv_write, paged_attention)", item);
            return WK_ERR_INVALID;
        }
        *eq = '\0';
        int rc = apply_one(vk, p, item, eq + 1, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

void wk_pipelines_describe_variants(const wk_pipelines *p, char *buf, size_t cap) {
    snprintf(buf, cap,
             "matmul=%s,matmul_shuffle=%s,matvec=%u,attention=%s,splits=%s,transform_rope=%s,store=%s,head=%s,linear=%s,"
             "kv_write=%s,paged_attention=%s",
             p->matmul_tiled ? "tiled" : "register", p->matmul_shuffle ? "on" : "off", p->matvec_subgroups,
             p->attn_lanes ? "lanes" : "subgroup", p->attn_gpu_splits ? "gpu" : "cpu", p->transform_rope ? "on" : "off",
             p->store_lanes ? "lanes" : "invocation", p->head_host ? "host" : "device",
             p->linear_host ? "host" : "device", p->kv_host ? "host" : "device",
             p->attn_host ? "host" : "device");
}
