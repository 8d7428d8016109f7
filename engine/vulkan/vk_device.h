/* Vulkan device: instance and physical-device selection, queue, memory, buffers and texel views,
 * one-shot submissions. Everything above it (pipelines, weights, forward pass) uses these helpers. */
#ifndef WK_VK_DEVICE_H
#define WK_VK_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

typedef struct wk_vk {
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t queue_family;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem_props;
    uint32_t subgroup_size;
    VkSubgroupFeatureFlags subgroup_ops;  /* the subgroup operations compute shaders may use */
    /* Pipelines pin subgroup_size and the subgroup-sized ones require full subgroups
     * (VK_EXT_subgroup_size_control, enabled where the device has it: vk_device.c). */
    bool pin_subgroup;
    uint32_t max_workgroup_subgroups;     /* with pin_subgroup: subgroups a pinned workgroup may hold */
    /* VkPhysicalDeviceDriverProperties (empty on a device below Vulkan 1.2): for reports only. */
    char driver_name[VK_MAX_DRIVER_NAME_SIZE], driver_info[VK_MAX_DRIVER_INFO_SIZE];
    VkDeviceSize max_allocation;  /* the largest single allocation (maintenance3), 0: not reported */
    bool validation;
    bool validation_sync;         /* the layer's synchronization validation too */
    int validation_messages;      /* warnings and errors the layer reported (tests require 0) */
    VkCommandPool cmd_pool;
    VkCommandBuffer cmd;          /* the step command buffer */
    VkFence fence;
    uint64_t bytes_allocated;     /* device memory held through wk_vk_buffer_create */
} wk_vk;

/* A buffer with its own memory, optionally persistently mapped and with one texel view. */
typedef struct wk_buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    VkDeviceSize size;
    VkDeviceSize bytes;           /* device memory held (counted in wk_vk.bytes_allocated) */
    void *map;                    /* non-NULL when host-visible */
    VkBufferView view;            /* VK_NULL_HANDLE unless a texel format was given */
} wk_buf;

typedef enum {
    WK_MEM_DEVICE = 0,   /* device-local; written by upload or shaders */
    WK_MEM_HOST = 1,     /* host-visible, coherent (uploads of small per-step data, readback) */
} wk_mem_kind;

/* device_index < 0: discrete > integrated > virtual > cpu. validation: WK_VK_VALIDATION_* (a bool's
 * true is the layer without synchronization validation). */
enum { WK_VK_VALIDATION_OFF = 0, WK_VK_VALIDATION_ON = 1, WK_VK_VALIDATION_SYNC = 2 };
int wk_vk_init(wk_vk *vk, int device_index, int validation, bool verbose, char *err, size_t errlen);
void wk_vk_destroy(wk_vk *vk);

/* The largest buffer the device can hold in one allocation: the smaller of maxMemoryAllocationSize
 * and its largest device-local memory heap (0: unknown). */
VkDeviceSize wk_vk_max_buffer_bytes(const wk_vk *vk);
/* Whether device buffers (WK_MEM_DEVICE: the weights) land in memory the host maps and sees
 * coherently, so the host can read the weights in place (lavapipe: one memory type with every flag). */
bool wk_vk_weights_mappable(const wk_vk *vk);
/* size bytes; texel_format != VK_FORMAT_UNDEFINED adds a uniform texel view over the whole buffer.
 * A size over wk_vk_max_buffer_bytes is refused (WK_ERR_NOMEM) before the driver is asked. */
int wk_vk_buffer_create(wk_vk *vk, wk_buf *b, VkDeviceSize size, wk_mem_kind kind, VkFormat texel_format,
                        char *err, size_t errlen);
void wk_vk_buffer_destroy(wk_vk *vk, wk_buf *b);
/* Copies host data into a buffer at offset (staging through a host buffer when not mappable). */
int wk_vk_upload(wk_vk *vk, wk_buf *b, VkDeviceSize offset, const void *data, VkDeviceSize size, char *err,
                 size_t errlen);
/* Device-side copies (no host round trip), recorded and submitted at once, waiting for them:
 * region i copies bytes from src at src_offset to dst at dst_offset (the same buffer is fine when
 * the ranges do not overlap). WK_ERR_INVALID for a range outside its buffer. Engine thread, between
 * steps. */
typedef struct wk_vk_region {
    const wk_buf *src, *dst;
    VkDeviceSize src_offset, dst_offset, bytes;
} wk_vk_region;
int wk_vk_copy(wk_vk *vk, const wk_vk_region *r, int n, char *err, size_t errlen);
/* A texel view of a sub-range (offset must satisfy minTexelBufferOffsetAlignment). */
int wk_vk_view_create(wk_vk *vk, const wk_buf *b, VkFormat fmt, VkDeviceSize offset, VkDeviceSize range,
                      VkBufferView *out, char *err, size_t errlen);

/* Begin / end-submit-wait of the step command buffer. */
int wk_vk_begin(wk_vk *vk, char *err, size_t errlen);
int wk_vk_submit_wait(wk_vk *vk, char *err, size_t errlen);
/* Full compute->compute (and transfer) memory barrier inside the step command buffer. */
void wk_vk_barrier(wk_vk *vk);

const char *wk_vk_result_name(VkResult r);
#define WK_VK_CHECK_MSG(r, what, err, errlen) \
    snprintf(err, errlen, "%s failed: %s", what, wk_vk_result_name(r))

#endif
