/* The Khronos validation layer with synchronization validation over real forward steps: a tiny
 * model opened through the public engine (weights upload, warm-up) in the f16 cache and in the
 * paged int2 cache with the Hadamard transform and f16 windows (every KV pipeline), then a step of
 * two sequences' prefill and a decode step, and in int2 prefix caching's device copies (a window
 * snapshot taken, one restored, a parked sequence cut back into a named block and copied on its
 * next write); the layer must report nothing. First a control: two
 * writes of one buffer without a barrier must be reported, so a layer that is silently absent or
 * not checking synchronization fails this test rather than passing it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_int.h"
#include "test_engine_env.h"
#include "test_util.h"
#include "tiny_model.h"
#include "vulkan/vk_device.h"
#include "wushkv/wushkv.h"

/* Two fills of one buffer, with or without a barrier between them: the messages reported. */
static int two_writes(bool barrier) {
    char err[WK_ERRMSG_LEN] = "";
    wk_vk vk;
    wk_buf b;
    int rc = wk_vk_init(&vk, test_engine_env_device(), WK_VK_VALIDATION_SYNC, false, err, sizeof err);
    if (!rc) rc = wk_vk_buffer_create(&vk, &b, 4096, WK_MEM_DEVICE, VK_FORMAT_UNDEFINED, err, sizeof err);
    if (!rc) rc = wk_vk_begin(&vk, err, sizeof err);
    if (!rc) {
        vkCmdFillBuffer(vk.cmd, b.buf, 0, VK_WHOLE_SIZE, 1);
        if (barrier) wk_vk_barrier(&vk);
        vkCmdFillBuffer(vk.cmd, b.buf, 0, VK_WHOLE_SIZE, 2);
        rc = wk_vk_submit_wait(&vk, err, sizeof err);
        wk_vk_buffer_destroy(&vk, &b);
    }
    if (rc) fprintf(stderr, "two_writes: %s\n", err);
    CHECK_EQ_INT(rc, 0);
    wk_vk_destroy(&vk);
    return vk.validation_messages;
}

static void forward_steps(const char *path, int kv_bits) {
    enum { N = 12 };
    wk_engine_params p;
    wk_engine_params_default(&p);
    p.model_path = path;
    p.max_ctx = 64;
    p.max_batch_tokens = 32;
    p.max_seqs = 2;
    p.validation = p.validation_sync = true;
    if (kv_bits == 2) {
        p.kv_bits = 2;
        p.kv_transform = WK_KV_TRANSFORM_HADAMARD;
        p.kv_sink = 2;
        p.kv_recent = 4;
        p.prefix_cache = true;
    }
    test_engine_params_from_env(&p);
    char err[WK_ERRMSG_LEN] = "";
    wk_engine *e = NULL;
    int rc = wk_engine_open(&p, &e, err, sizeof err);
    CHECK_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "forward_steps: %s\n", err);
        return;
    }
    const int V = wk_engine_info(e)->n_vocab;
    wk_seq *s[2];
    int32_t tok[2][N];
    for (int q = 0; q < 2; q++) {
        CHECK_EQ_INT(wk_seq_create(e, &s[q]), 0);
        for (int i = 0; i < N; i++) tok[q][i] = (int32_t)((7 * i + 3 * q + 1) % V);
    }
    float *logits = malloc(sizeof(float) * 2 * N * (size_t)V);
    wk_batch_item prefill[2] = {{s[0], tok[0], N - 1, false}, {s[1], tok[1], N - 1, true}};
    CHECK_EQ_INT(wk_forward(e, prefill, 2, logits, err, sizeof err), N);
    wk_batch_item decode[2] = {{s[0], tok[0] + N - 1, 1, false}, {s[1], tok[1] + N - 1, 1, false}};
    CHECK_EQ_INT(wk_forward(e, decode, 2, logits, err, sizeof err), 2);
    if (kv_bits == 2) {
        for (int q = 0; q < 2; q++) wk_seq_destroy(s[q]), s[q] = NULL;
        int32_t ta[48], tb[48];
        for (int i = 0; i < 48; i++) ta[i] = tb[i] = (int32_t)((5 * i + 2) % V);
        tb[40] ^= 1;
        wk_seq *a = NULL, *b = NULL;
        CHECK_EQ_INT(wk_seq_create_prefix(e, ta, 47, &a), 0); /* a snapshot point at 32 */
        wk_batch_item a1 = {a, ta, 32, false}, a2 = {a, ta + 32, 16, false};
        CHECK_EQ_INT(wk_forward(e, &a1, 1, NULL, err, sizeof err), 0);
        CHECK_EQ_INT(wk_forward(e, &a2, 1, NULL, err, sizeof err), 0);
        wk_seq_park(a);
        CHECK_EQ_INT(wk_seq_create_prefix(e, tb, 47, &b), 32); /* the snapshot restored */
        wk_batch_item b1 = {b, tb + 32, 16, false};
        CHECK_EQ_INT(wk_forward(e, &b1, 1, NULL, err, sizeof err), 0);
        wk_seq_destroy(b);
        CHECK_EQ_INT(wk_seq_create_prefix(e, ta, 47, &a), 47); /* A adopted, cut inside block 2 */
        wk_batch_item a3 = {a, ta + 47, 1, false};
        CHECK_EQ_INT(wk_forward(e, &a3, 1, NULL, err, sizeof err), 0);
        wk_seq_destroy(a);
    }
    printf("  %s cache: %d validation messages\n", kv_bits == 2 ? "int2 + hadamard + windows + prefix copies" : "f16",
           wk_engine_validation_messages(e));
    CHECK_EQ_INT(wk_engine_validation_messages(e), 0);
    free(logits);
    for (int q = 0; q < 2; q++) wk_seq_destroy(s[q]); /* NULL: a no-op */
    wk_engine_close(e);
}

int main(void) {
    const int hazard = two_writes(false);
    printf("  control: two unordered writes: %d validation messages\n", hazard);
    CHECK(hazard > 0);
    CHECK_EQ_INT(two_writes(true), 0);
    char path[] = "/tmp/wushkv_test_sync_validation_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    tiny_model_opts o = {.arch = "gemma3", .seed = 5, .mixed_quants = true, .sliding_window = 8};
    CHECK(tiny_model_write(&o, path));
    forward_steps(path, 16);
    forward_steps(path, 2);
    unlink(path);
    TEST_MAIN_END();
}
