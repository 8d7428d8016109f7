/* Engine faults end in an error, never a crash or a half-changed engine: a pipeline whose creation
 * fails (an invalid specialisation: a workgroup larger than the device allows) fails its first
 * dispatch with a clear error and leaves nothing half-made; a KV pool larger than the device can hold is refused
 * at open, naming --kv-mem; an engine that released its model file (release_model_file, as serve
 * opens it) still generates, with the file truncated under it, and the research calls that need the
 * file refuse it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_engine_env.h"
#include "test_util.h"
#include "tiny_model.h"
#include "vulkan/vk_device.h"
#include "vulkan/shader_params.h"
#include "vulkan/vk_pipelines.h"
#include "wushkv/research.h"
#include "wushkv/wushkv.h"

/* Pipelines are created at their first dispatch (vk_pipelines.c), so that is where a creation
 * fails: the dispatch returns the error before anything is recorded, no half-made pipeline stays
 * (the validation layer would report a leaked object at device destruction), and a later dispatch
 * with a valid specialisation creates it. */
static int dispatch_transform(wk_vk *vk, wk_pipelines *p, char *err, size_t errlen) {
    wk_arg args[WK_MAX_BINDINGS] = {{0}};
    wk_pc_kv_transform pc = {0};
    return wk_dispatch(vk, p, WK_PIPE_KV_TRANSFORM, args, &pc, sizeof pc, 1, 1, 1, err, errlen);
}

static void pipeline_failure(void) {
    char err[WK_ERRMSG_LEN] = "";
    wk_vk vk;
    wk_pipelines p;
    /* Validation on: a pipeline, layout or set layout left behind by a failure is reported when the
     * device is destroyed. */
    int rc = wk_vk_init(&vk, test_engine_env_device(), true, false, err, sizeof err);
    CHECK_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "pipeline_failure: %s\n", err);
        return;
    }
    rc = wk_pipelines_create(&vk, &p, err, sizeof err);
    CHECK_EQ_INT(rc, 0);
    if (!rc) {
        /* Specialisation constant 0 is the workgroup size: far beyond maxComputeWorkGroupSize. */
        const uint32_t sg = vk.subgroup_size;
        vk.subgroup_size = vk.props.limits.maxComputeWorkGroupSize[0] * 64u;
        CHECK_EQ_INT(wk_pipelines_specialize_transform(&vk, &p, 32, 4, err, sizeof err), 0);
        rc = dispatch_transform(&vk, &p, err, sizeof err);
        printf("  invalid specialisation, first dispatch: rc %d: %s\n", rc, err);
        CHECK(rc == WK_ERR_UNSUPPORTED && strstr(err, "kv_transform") != NULL);
        CHECK(p.pipe[WK_PIPE_KV_TRANSFORM] == VK_NULL_HANDLE); /* nothing half-made stays */
        vk.subgroup_size = 0; /* no workgroup size at all: refused the same way */
        rc = dispatch_transform(&vk, &p, err, sizeof err);
        CHECK(rc == WK_ERR_UNSUPPORTED);
        vk.subgroup_size = sg; /* (with it, the forward suites create and run this pipeline) */
        wk_pipelines_destroy(&vk, &p);
    }
    wk_vk_destroy(&vk);
    CHECK_EQ_INT(vk.validation_messages, 0);
}

static wk_engine *open_tiny(const char *path, int kv_bits, uint64_t kv_mem, bool release, int *rc, char *err,
                            size_t errlen) {
    wk_engine_params p;
    wk_engine_params_default(&p);
    p.model_path = path;
    p.max_ctx = 64;
    p.max_batch_tokens = 16;
    p.kv_bits = kv_bits;
    p.kv_mem = kv_mem;
    p.release_model_file = release;
    test_engine_params_from_env(&p);
    wk_engine *e = NULL;
    *rc = wk_engine_open(&p, &e, err, errlen);
    return e;
}

static void kv_pool_too_large(const char *path) {
    char err[WK_ERRMSG_LEN] = "";
    int rc;
    wk_engine *e = open_tiny(path, 2, 1ull << 40, false, &rc, err, sizeof err);
    printf("  --kv-mem 1 TiB: rc %d: %s\n", rc, err);
    CHECK(e == NULL && rc == WK_ERR_NOMEM);
    CHECK(strstr(err, "--kv-mem") != NULL);
    wk_engine_close(e);
}

/* Greedy tokens of a short prompt, or -1 on an error. */
static int generate(wk_engine *e, int32_t *out, int n) {
    char err[WK_ERRMSG_LEN] = "";
    const wk_model_info *info = wk_engine_info(e);
    int32_t toks[16];
    int nt = wk_tokenize(e, "hello world", 11, true, false, toks, 16);
    wk_seq *s = NULL;
    if (nt <= 0 || nt > 16 || wk_seq_create(e, &s)) return -1;
    float *logits = malloc(sizeof(float) * (size_t)info->n_vocab);
    int rc = 0;
    for (int i = 0; i < n && rc >= 0; i++) {
        wk_batch_item it = {s, i == 0 ? toks : &out[i - 1], i == 0 ? nt : 1, false};
        rc = wk_forward(e, &it, 1, logits, err, sizeof err);
        int best = 0;
        for (int v = 1; v < info->n_vocab; v++)
            if (logits[v] > logits[best]) best = v;
        out[i] = best;
    }
    if (rc < 0) fprintf(stderr, "generate: %s\n", err);
    free(logits);
    wk_seq_destroy(s);
    return rc < 0 ? -1 : 0;
}

static void released_model_file(const char *path) {
    char err[WK_ERRMSG_LEN] = "";
    int rc;
    int32_t want[4], got[4];
    wk_engine *e = open_tiny(path, 16, 0, false, &rc, err, sizeof err);
    CHECK(e && generate(e, want, 4) == 0);
    wk_engine_close(e);
    e = open_tiny(path, 16, 0, true, &rc, err, sizeof err);
    CHECK(e != NULL);
    if (!e) return;
    /* The file cut to nothing under the engine: a read of its mapping would be SIGBUS. */
    CHECK(truncate(path, 0) == 0);
    CHECK(generate(e, got, 4) == 0);
    CHECK(memcmp(want, got, sizeof want) == 0);
    float wo[1];
    CHECK_EQ_INT(wk_engine_wo(e, 0, wo, err, sizeof err), WK_ERR_INVALID);
    wk_calib_params cp;
    wk_calib_params_default(&cp);
    wk_calib *cal = NULL;
    CHECK_EQ_INT(wk_calib_create(e, &cp, &cal, err, sizeof err), WK_ERR_INVALID);
    CHECK(strstr(err, "released") != NULL);
    wk_engine_close(e);
}

int main(void) {
    pipeline_failure();
    char path[] = "/tmp/wushkv_test_engine_faults_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    tiny_model_opts o = {.arch = "gemma3", .seed = 3};
    CHECK(tiny_model_write(&o, path));
    kv_pool_too_large(path);
    released_model_file(path); /* truncates the file */
    unlink(path);
    TEST_MAIN_END();
}
