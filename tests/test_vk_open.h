/* How each shader test opens and closes the device: the one the environment names
 * (WUSHKV_DEVICE), with the Khronos validation layer on, and every pipeline layout. */
#ifndef WK_TEST_VK_OPEN_H
#define WK_TEST_VK_OPEN_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_engine_env.h"
#include "vulkan/vk_device.h"
#include "vulkan/vk_pipelines.h"

/* false (the reason on stderr) when the device or the pipelines cannot be made. */
static inline bool test_vk_open(wk_vk *vk, wk_pipelines *p) {
    char err[WK_ERRMSG_LEN] = "";
    if (wk_vk_init(vk, test_engine_env_device(), true, false, err, sizeof err)) {
        fprintf(stderr, "vulkan: %s\n", err);
        return false;
    }
    if (wk_pipelines_create(vk, p, err, sizeof err)) {
        fprintf(stderr, "vulkan: %s\n", err);
        wk_vk_destroy(vk);
        return false;
    }
    return true;
}

/* Whether the device is lavapipe with 16-lane subgroups (LP_NATIVE_VECTOR_WIDTH=512, the
 * *_subgroup16 tests) on Mesa 25 or later, whose subgroup operations are wrong there (subgroupAdd,
 * shuffles, the subgroup ids: docs/lavapipe.md "Mesa 25"). That width is no supported setting, so
 * those tests skip there (meson's 77) rather than test the driver; Mesa 22 runs them. */
static inline bool test_vk_wide_subgroups_broken(const wk_vk *vk) {
    const char *width = getenv("LP_NATIVE_VECTOR_WIDTH");
    const char *mesa = strstr(vk->driver_info, "Mesa ");
    return width && strcmp(width, "512") == 0 && mesa && atoi(mesa + 5) >= 25;
}

/* Destroys both; returns the validation layer's message count, teardown's included (a leaked
 * object is reported when the device goes), which a test requires to be 0. */
static inline int test_vk_close(wk_vk *vk, wk_pipelines *p) {
    wk_pipelines_destroy(vk, p);
    wk_vk_destroy(vk);
    return vk->validation_messages;
}

#endif
