/* The engine settings a test takes from the environment, as `wushkv` does for every command
 * (server/cli/cli_common.c cli_engine_env): the engine library reads no environment, so a test
 * that opens an engine or a device itself asks here. WUSHKV_DEVICE picks the device,
 * WUSHKV_VALIDATION=1 turns the validation layer on (=sync: with its synchronization validation),
 * WUSHKV_PROFILE=1 the per-pipeline profile, WUSHKV_KERNELS=cpu|gpu[,name=value...] the shader variants. */
#ifndef WK_TEST_ENGINE_ENV_H
#define WK_TEST_ENGINE_ENV_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wushkv/wushkv.h"

/* WUSHKV_DEVICE as a device index, or -1 (pick by type) when it is unset or empty. A value that
 * is not a number >= 0 ends the test (status 1) with a message. */
static inline int test_engine_env_device(void) {
    const char *s = getenv("WUSHKV_DEVICE");
    if (!s || !*s) return -1;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0) {
        fprintf(stderr, "WUSHKV_DEVICE='%s' is not a device index\n", s);
        exit(1);
    }
    return (int)v;
}

/* WUSHKV_KERNELS=SET[,name=value...]'s set as a wk_kernels value (unset, empty or starting with a
 * variant: WK_KERNELS_AUTO); another value ends the test (status 1) with a message. */
static inline int test_engine_env_kernels(void) {
    const char *s = getenv("WUSHKV_KERNELS");
    if (!s || !*s) return WK_KERNELS_AUTO;
    const size_t n = strcspn(s, ",");
    if (memchr(s, '=', n) || (n == 4 && strncmp(s, "auto", 4) == 0)) return WK_KERNELS_AUTO;
    if (n == 3 && strncmp(s, "cpu", 3) == 0) return WK_KERNELS_CPU;
    if (n == 3 && strncmp(s, "gpu", 3) == 0) return WK_KERNELS_GPU;
    fprintf(stderr, "WUSHKV_KERNELS='%s': expected cpu, gpu or auto, then name=value variants\n", s);
    exit(1);
}

/* ... and its variants (wk_engine_params.kernel_variants), or NULL. */
static inline const char *test_engine_env_variants(void) {
    const char *s = getenv("WUSHKV_KERNELS");
    if (!s || !*s) return NULL;
    const size_t n = strcspn(s, ",");
    return memchr(s, '=', n) ? s : s[n] ? s + n + 1 : NULL;
}

/* Applies the environment to params a test built: the device when p->device_index < 0,
 * validation and profile switched on (never off). */
static inline void test_engine_params_from_env(wk_engine_params *p) {
    if (p->device_index < 0) p->device_index = test_engine_env_device();
    const char *v = getenv("WUSHKV_VALIDATION");
    if (v && strcmp(v, "1") == 0) p->validation = true;
    if (v && strcmp(v, "sync") == 0) p->validation = p->validation_sync = true;
    const char *prof = getenv("WUSHKV_PROFILE");
    if (prof && strcmp(prof, "1") == 0) p->profile = true;
    if (p->kernels == WK_KERNELS_AUTO) p->kernels = test_engine_env_kernels();
    if (!p->kernel_variants) p->kernel_variants = test_engine_env_variants();
}

#endif
