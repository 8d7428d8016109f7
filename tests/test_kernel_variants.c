/* Kernel sets and single-variant overrides (engine/vulkan/vk_kernels.c) on the test device: what
 * each set picks, that every override sets exactly its own variant and reads back in
 * wk_pipelines_describe_variants' syntax, that the setters drop pipelines made for the other
 * choice, and that unknown names, bad values and malformed items are refused with a message
 * naming them; and that lavapipe's pipelines are made with the subgroup size pinned. Runs no shader: the shaders of every variant are checked against the C reference
 * by the matmul, attention and forward tests. */
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "test_vk_open.h"
#include "vulkan/shader_params.h"
#include "vulkan/vk_pipelines.h"
#include "wushkv/wushkv.h"

static char err[WK_ERRMSG_LEN];

static const char *describe(const wk_pipelines *p) {
    static char buf[256];
    wk_pipelines_describe_variants(p, buf, sizeof buf);
    return buf;
}

/* spec is refused with `code` and a message containing `needle`. */
static void refused(wk_vk *vk, wk_pipelines *p, const char *spec, int code, const char *needle) {
    char before[256];
    snprintf(before, sizeof before, "%s", describe(p));
    err[0] = '\0';
    const int rc = wk_pipelines_apply_variants(vk, p, spec, err, sizeof err);
    CHECK_EQ_INT(rc, code);
    if (!strstr(err, needle)) fprintf(stderr, "spec '%s': message '%s' lacks '%s'\n", spec, err, needle);
    CHECK(strstr(err, needle) != NULL);
    /* An item before the bad one may have applied; a spec that is bad as a whole changes nothing. */
    if (!strchr(spec, ',')) CHECK(strcmp(describe(p), before) == 0);
}

int main(void) {
    wk_vk vk;
    wk_pipelines p;
    if (!test_vk_open(&vk, &p)) {
        CHECK(false);
        TEST_MAIN_END();
    }
    /* lavapipe offers VK_EXT_subgroup_size_control with compute in its required-size stages, so
     * every pipeline of every vulkan test here is created with the size pinned (and full
     * subgroups where the workgroup is made of them), under the validation layer. */
    if (strstr(vk.props.deviceName, "llvmpipe")) CHECK(vk.pin_subgroup);
    const bool shuffle = p.matmul_shuffle; /* the device's default module (wk_pipelines_create) */
    const char *sh = shuffle ? "on" : "off";
    /* The cpu set's head: the host's where the device is the CPU and maps its weights (lavapipe). */
    const bool host_head = vk.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && wk_vk_weights_mappable(&vk);
    if (strstr(vk.props.deviceName, "llvmpipe")) CHECK(host_head);
    const char *hd = host_head ? "host" : "device";
    char want[256];

    /* The "cpu" set: every lavapipe variant; nothing forced changes it. */
    CHECK_EQ_INT(wk_pipelines_choose_kernels(&vk, &p, WK_KERNELS_CPU, err, sizeof err), 0);
    snprintf(want, sizeof want,
             "matmul=register,matmul_shuffle=%s,matvec=1,attention=subgroup,splits=cpu,transform_rope=on,store=invocation,"
             "head=%s,linear=%s,kv_write=%s,paged_attention=%s", sh, hd, hd, hd, hd);
    CHECK(strcmp(describe(&p), want) == 0);
    CHECK_EQ_INT(wk_pipelines_apply_variants(&vk, &p, NULL, err, sizeof err), 0);
    CHECK_EQ_INT(wk_pipelines_apply_variants(&vk, &p, "", err, sizeof err), 0);
    CHECK(strcmp(describe(&p), want) == 0);

    /* Each override alone sets its own variant and no other. */
    /* (linear=device takes kv_write=device with it: the host's cache writes follow its products; and
     * kv_write=device takes paged_attention=device: the host's attention follows its writes.) */
    const char *attn_dev = host_head ? "paged_attention=device" : NULL;
    const struct {
        const char *spec, *field, *field2, *field3;
    } one[] = {{"matmul=tiled", "matmul=tiled", NULL, NULL},
               {"attention=lanes", "attention=lanes", NULL, NULL},
               {"splits=gpu", "splits=gpu", NULL, NULL},
               {"matvec=4", "matvec=4", NULL, NULL},
               {"transform_rope=off", "transform_rope=off", NULL, NULL},
               {"store=lanes", "store=lanes", NULL, NULL},
               {host_head ? "head=device" : "head=host", host_head ? "head=device" : "head=host", NULL, NULL},
               {host_head ? "linear=device" : "linear=host", host_head ? "linear=device" : "linear=host",
                host_head ? "kv_write=device" : NULL, attn_dev},
               {"kv_write=device", "kv_write=device", attn_dev, NULL},
               {"paged_attention=device", "paged_attention=device", NULL, NULL},
               {"matmul_shuffle=off", "matmul_shuffle=off", NULL, NULL}};
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
        CHECK_EQ_INT(wk_pipelines_choose_kernels(&vk, &p, WK_KERNELS_CPU, err, sizeof err), 0);
        CHECK_EQ_INT(wk_pipelines_set_matmul_shuffle(&vk, &p, shuffle, err, sizeof err), 0);
        CHECK_EQ_INT(wk_pipelines_apply_variants(&vk, &p, one[i].spec, err, sizeof err), 0);
        /* The description is the cpu set's with this one field replaced. */
        char expect[256] = "";
        const char *cpu_fields[11] = {"matmul=register", shuffle ? "matmul_shuffle=on" : "matmul_shuffle=off",
                                     "matvec=1", "attention=subgroup", "splits=cpu", "transform_rope=on",
                                     "store=invocation", host_head ? "head=host" : "head=device",
                                     host_head ? "linear=host" : "linear=device",
                                     host_head ? "kv_write=host" : "kv_write=device",
                                     host_head ? "paged_attention=host" : "paged_attention=device"};
        for (int f = 0; f < 11; f++) {
            const size_t name_len = strcspn(cpu_fields[f], "=");
            const char *set = cpu_fields[f];
            if (strncmp(cpu_fields[f], one[i].field, name_len) == 0 && one[i].field[name_len] == '=') set = one[i].field;
            if (one[i].field2 && strncmp(cpu_fields[f], one[i].field2, name_len) == 0 && one[i].field2[name_len] == '=')
                set = one[i].field2;
            if (one[i].field3 && strncmp(cpu_fields[f], one[i].field3, name_len) == 0 && one[i].field3[name_len] == '=')
                set = one[i].field3;
            if (f) strcat(expect, ",");
            strcat(expect, set);
        }
        if (strcmp(describe(&p), expect) != 0) fprintf(stderr, "%s: '%s', expected '%s'\n", one[i].spec, describe(&p), expect);
        CHECK(strcmp(describe(&p), expect) == 0);
    }
    CHECK_EQ_INT(p.matvec_subgroups, 1); /* the later cases reset it */
    CHECK(p.matmul_shuffle == false);     /* ... and left this one off: a set does not choose it */
    CHECK_EQ_INT(wk_pipelines_set_matmul_shuffle(&vk, &p, shuffle, err, sizeof err), 0);

    /* The "gpu" set on this device (lavapipe allows its workgroups), then each of its variants back. */
    CHECK_EQ_INT(wk_pipelines_choose_kernels(&vk, &p, WK_KERNELS_GPU, err, sizeof err), 0);
    snprintf(want, sizeof want,
             "matmul=tiled,matmul_shuffle=%s,matvec=4,attention=lanes,splits=gpu,transform_rope=on,store=lanes,head=device,"
             "linear=device,kv_write=device,paged_attention=device", sh);
    CHECK(strcmp(describe(&p), want) == 0);
    CHECK(p.gpu_kernels && p.matmul_tiled && p.attn_lanes && p.attn_gpu_splits && p.store_lanes && !p.head_host &&
          !p.linear_host && !p.kv_host && !p.attn_host);
    CHECK_EQ_INT(wk_pipelines_apply_variants(&vk, &p, "matmul=register,matvec=1,attention=subgroup,splits=cpu,store=invocation",
                                             err, sizeof err), 0);
    snprintf(want, sizeof want,
             "matmul=register,matmul_shuffle=%s,matvec=1,attention=subgroup,splits=cpu,transform_rope=on,store=invocation,"
             "head=device,linear=device,kv_write=device,paged_attention=device", sh);
    CHECK(strcmp(describe(&p), want) == 0);
    CHECK(p.gpu_kernels); /* the set's name stays; the engine reads the fields */
    /* A description is a spec: applying it reproduces it. */
    CHECK_EQ_INT(wk_pipelines_choose_kernels(&vk, &p, WK_KERNELS_GPU, err, sizeof err), 0);
    snprintf(want, sizeof want, "%s", describe(&p));
    CHECK_EQ_INT(wk_pipelines_choose_kernels(&vk, &p, WK_KERNELS_CPU, err, sizeof err), 0);
    CHECK_EQ_INT(wk_pipelines_apply_variants(&vk, &p, want, err, sizeof err), 0);
    CHECK(strcmp(describe(&p), want) == 0);

    /* Refused: unknown names, bad values, items without a value, too long a spec. */
    CHECK_EQ_INT(wk_pipelines_choose_kernels(&vk, &p, WK_KERNELS_CPU, err, sizeof err), 0);
    static const struct {
        const char *spec, *needle;
    } bad[] = {{"matmul=fast", "matmul=fast: expected register or tiled"},
               {"attention=gpu", "attention=gpu: expected subgroup or lanes"},
               {"splits=", "splits=: expected cpu or gpu"},
               {"matmul_shuffle=yes", "expected off or on"},
               {"transform_rope=fused", "transform_rope=fused: expected off or on"},
               {"store=subgroup", "store=subgroup: expected invocation or lanes"},
               {"head=cpu", "head=cpu: expected device or host"},
               {"linear=gpu", "linear=gpu: expected device or host"},
               {"kv_write=on", "kv_write=on: expected device or host"},
               {"paged_attention=on", "paged_attention=on: expected device or host"},
               {"matvec=0", "matvec=0: expected a count"},
               {"matvec=65", "matvec=65"},
               {"matvec=-4", "matvec=-4"},
               {"matvec=4x", "matvec=4x"},
               {"tiles=on", "kernel variant 'tiles'"},
               {"attention", "'attention': expected name=value"},
               {"gpu", "'gpu': expected name=value"},
               {"attention=lanes,bogus=1", "'bogus'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) refused(&vk, &p, bad[i].spec, WK_ERR_INVALID, bad[i].needle);
    char big[300];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    refused(&vk, &p, big, WK_ERR_INVALID, "at most 255");

    /* A device whose subgroups are wider than the variant's tiles cannot take attention=lanes. */
    const uint32_t real_sg = vk.subgroup_size;
    vk.subgroup_size = WK_ATTN_LANES_SG * 2;
    refused(&vk, &p, "attention=lanes", WK_ERR_UNSUPPORTED, "attention=lanes: device");
    vk.subgroup_size = real_sg;
    /* ... and one without subgroup shuffles, store=lanes. */
    const VkSubgroupFeatureFlags real_ops = vk.subgroup_ops;
    vk.subgroup_ops &= ~(VkSubgroupFeatureFlags)VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
    refused(&vk, &p, "store=lanes", WK_ERR_UNSUPPORTED, "store=lanes: device");
    vk.subgroup_ops = real_ops;
    /* ... and one whose weights the host cannot map, head=host; its cpu set keeps the head on it. */
    const VkPhysicalDeviceMemoryProperties real_mem = vk.mem_props;
    for (uint32_t i = 0; i < vk.mem_props.memoryTypeCount; i++)
        vk.mem_props.memoryTypes[i].propertyFlags &= ~(VkMemoryPropertyFlags)VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    CHECK(!wk_vk_weights_mappable(&vk));
    CHECK_EQ_INT(wk_pipelines_choose_kernels(&vk, &p, WK_KERNELS_CPU, err, sizeof err), 0);
    CHECK(!p.head_host && !p.linear_host && !p.kv_host && !p.attn_host);
    refused(&vk, &p, "head=host", WK_ERR_UNSUPPORTED, "head=host: device");
    refused(&vk, &p, "paged_attention=host", WK_ERR_UNSUPPORTED, "paged_attention=host: the host's attention follows");
    refused(&vk, &p, "kv_write=host", WK_ERR_UNSUPPORTED, "kv_write=host: the host writes the cache after its q/k/v");
    refused(&vk, &p, "linear=host", WK_ERR_UNSUPPORTED, "linear=host: device");
    vk.mem_props = real_mem;
    CHECK_EQ_INT(wk_pipelines_choose_kernels(&vk, &p, WK_KERNELS_CPU, err, sizeof err), 0);
    CHECK(p.head_host == host_head && p.linear_host == host_head && p.kv_host == host_head && p.attn_host == host_head);
    /* The cache writes need the host's products: refused after linear=device, and turned off by it. */
    if (host_head) {
        CHECK_EQ_INT(wk_pipelines_apply_variants(&vk, &p, "linear=device,kv_write=host", err, sizeof err),
                     WK_ERR_UNSUPPORTED);
        CHECK(strstr(err, "needs linear=host") != NULL);
        CHECK_EQ_INT(wk_pipelines_choose_kernels(&vk, &p, WK_KERNELS_CPU, err, sizeof err), 0);
        CHECK_EQ_INT(wk_pipelines_apply_variants(&vk, &p, "kv_write=host,linear=device", err, sizeof err), 0);
        CHECK(!p.linear_host && !p.kv_host);
        CHECK_EQ_INT(wk_pipelines_apply_variants(&vk, &p, "linear=host,kv_write=host", err, sizeof err), 0);
        CHECK(p.linear_host && p.kv_host && !p.attn_host);
        /* The host's attention needs its cache writes: refused after kv_write=device, turned
         * off by it and by linear=device. */
        CHECK_EQ_INT(wk_pipelines_apply_variants(&vk, &p, "kv_write=device,paged_attention=host", err, sizeof err),
                     WK_ERR_UNSUPPORTED);
        CHECK(strstr(err, "needs kv_write=host") != NULL);
        CHECK_EQ_INT(wk_pipelines_apply_variants(&vk, &p, "kv_write=host,paged_attention=host", err, sizeof err), 0);
        CHECK(p.kv_host && p.attn_host);
        CHECK_EQ_INT(wk_pipelines_apply_variants(&vk, &p, "kv_write=device", err, sizeof err), 0);
        CHECK(!p.kv_host && !p.attn_host);
        CHECK_EQ_INT(wk_pipelines_apply_variants(&vk, &p, "kv_write=host,paged_attention=host,linear=device", err,
                                                 sizeof err), 0);
        CHECK(!p.linear_host && !p.kv_host && !p.attn_host);
    }

    printf("kernel variants: %s (cpu set), overrides and refusals checked\n", describe(&p));
    CHECK_EQ_INT(test_vk_close(&vk, &p), 0);
    TEST_MAIN_END();
}
