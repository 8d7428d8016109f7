/* Vulkan device: picks a physical device (discrete > integrated > virtual > CPU, or an explicit
 * index), creates one compute queue, and provides buffers, texel views and step submission.
 * Nothing here assumes a GPU or its absence: memory is chosen by property flags, and buffers
 * that cannot be mapped are filled through a staging copy. */
#include "vulkan/vk_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>
#include <link.h>
#endif

#include "wushkv/wushkv.h"

const char *wk_vk_result_name(VkResult r) {
    switch (r) {
#define C(x) case x: return #x;
        C(VK_SUCCESS) C(VK_NOT_READY) C(VK_TIMEOUT) C(VK_INCOMPLETE) C(VK_ERROR_OUT_OF_HOST_MEMORY)
        C(VK_ERROR_OUT_OF_DEVICE_MEMORY) C(VK_ERROR_INITIALIZATION_FAILED) C(VK_ERROR_DEVICE_LOST)
        C(VK_ERROR_MEMORY_MAP_FAILED) C(VK_ERROR_LAYER_NOT_PRESENT) C(VK_ERROR_EXTENSION_NOT_PRESENT)
        C(VK_ERROR_FEATURE_NOT_PRESENT) C(VK_ERROR_INCOMPATIBLE_DRIVER) C(VK_ERROR_TOO_MANY_OBJECTS)
        C(VK_ERROR_FORMAT_NOT_SUPPORTED) C(VK_ERROR_FRAGMENTED_POOL) C(VK_ERROR_OUT_OF_POOL_MEMORY)
#undef C
    default: return "VK_ERROR_UNKNOWN";
    }
}

#define VKCALL(expr, what)                                   \
    do {                                                     \
        VkResult r_ = (expr);                                \
        if (r_ != VK_SUCCESS) {                              \
            WK_VK_CHECK_MSG(r_, what, err, errlen);          \
            return WK_ERR_VULKAN;                            \
        }                                                    \
    } while (0)

static VKAPI_ATTR VkBool32 VKAPI_CALL on_validation(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                    VkDebugUtilsMessageTypeFlagsEXT type,
                                                    const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    (void)type;
    wk_vk *vk = user;
    if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        vk->validation_messages++;
        fprintf(stderr, "wushkv: vulkan validation: %s\n", data->pMessage);
    }
    return VK_FALSE;
}

static bool layer_available(const char *name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return false;
    VkLayerProperties *props = calloc(n, sizeof *props);
    if (!props) return false;
    bool found = false;
    if (vkEnumerateInstanceLayerProperties(&n, props) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(props[i].layerName, name) == 0;
    free(props);
    return found;
}

static int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 1;
    default: return 0;
    }
}

static int create_instance(wk_vk *vk, char *err, size_t errlen) {
    const char *layer = "VK_LAYER_KHRONOS_validation";
    if (vk->validation && !layer_available(layer)) {
        snprintf(err, errlen, "validation requested but %s is not installed (Debian: vulkan-validationlayers)", layer);
        return WK_ERR_VULKAN;
    }
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "wushkv",
                             .pEngineName = "wushkv", .apiVersion = VK_API_VERSION_1_2};
    const char *exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    /* Synchronization validation: the layer tracks every access of every dispatch and copy and
     * reports a hazard (a read or write not ordered after a conflicting write by a barrier). The
     * layer provides VK_EXT_validation_features itself. */
    const VkValidationFeatureEnableEXT sync[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
    VkValidationFeaturesEXT features = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                                        .enabledValidationFeatureCount = 1, .pEnabledValidationFeatures = sync};
    if (vk->validation) {
        ici.enabledLayerCount = 1;
        ici.ppEnabledLayerNames = &layer;
        ici.enabledExtensionCount = vk->validation_sync ? 2 : 1;
        ici.ppEnabledExtensionNames = exts;
        if (vk->validation_sync) ici.pNext = &features;
    }
    VKCALL(vkCreateInstance(&ici, NULL, &vk->instance), "vkCreateInstance");
    if (vk->validation) {
        PFN_vkCreateDebugUtilsMessengerEXT create =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(vk->instance, "vkCreateDebugUtilsMessengerEXT");
        if (!create) {
            snprintf(err, errlen, "vkCreateDebugUtilsMessengerEXT is unavailable");
            return WK_ERR_VULKAN;
        }
        VkDebugUtilsMessengerCreateInfoEXT mci = {
            .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
            .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
            .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
            .pfnUserCallback = on_validation,
            .pUserData = vk};
        VKCALL(create(vk->instance, &mci, NULL, &vk->messenger), "vkCreateDebugUtilsMessengerEXT");
    }
    return 0;
}

static int pick_device(wk_vk *vk, int device_index, char *err, size_t errlen) {
    uint32_t n = 0;
    VKCALL(vkEnumeratePhysicalDevices(vk->instance, &n, NULL), "vkEnumeratePhysicalDevices");
    if (n == 0) {
        snprintf(err, errlen, "no Vulkan device found (install mesa-vulkan-drivers for the CPU driver lavapipe)");
        return WK_ERR_VULKAN;
    }
    VkPhysicalDevice devs[16];
    if (n > 16) n = 16;
    VkResult r = vkEnumeratePhysicalDevices(vk->instance, &n, devs);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        WK_VK_CHECK_MSG(r, "vkEnumeratePhysicalDevices", err, errlen);
        return WK_ERR_VULKAN;
    }
    if (device_index >= (int)n) {
        snprintf(err, errlen, "device %d requested but only %u Vulkan device(s) exist", device_index, n);
        return WK_ERR_INVALID;
    }
    int best = device_index;
    if (best < 0) {
        int best_rank = -1;
        for (uint32_t i = 0; i < n; i++) {
            VkPhysicalDeviceProperties p;
            vkGetPhysicalDeviceProperties(devs[i], &p);
            if (type_rank(p.deviceType) > best_rank) best_rank = type_rank(p.deviceType), best = (int)i;
        }
    }
    vk->phys = devs[best];
    vkGetPhysicalDeviceProperties(vk->phys, &vk->props);
    vkGetPhysicalDeviceMemoryProperties(vk->phys, &vk->mem_props);
    return 0;
}

/* Whether the device offers the extension `name`. */
static bool has_device_extension(VkPhysicalDevice phys, const char *name) {
    uint32_t n = 0;
    if (vkEnumerateDeviceExtensionProperties(phys, NULL, &n, NULL) != VK_SUCCESS || n == 0) return false;
    VkExtensionProperties *ext = calloc(n, sizeof *ext);
    bool found = false;
    if (ext && vkEnumerateDeviceExtensionProperties(phys, NULL, &n, ext) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(ext[i].extensionName, name) == 0;
    free(ext);
    return found;
}

static int create_device(wk_vk *vk, char *err, size_t errlen) {
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(vk->phys, &nq, NULL);
    VkQueueFamilyProperties qf[16];
    if (nq > 16) nq = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(vk->phys, &nq, qf);
    vk->queue_family = UINT32_MAX;
    for (uint32_t i = 0; i < nq; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
            vk->queue_family = i;
            break;
        }
    if (vk->queue_family == UINT32_MAX) {
        snprintf(err, errlen, "device %s has no compute queue", vk->props.deviceName);
        return WK_ERR_VULKAN;
    }
    /* The driver's name and version string only exist from Vulkan 1.2 on (chaining the struct to an
     * older device is invalid usage). */
    VkPhysicalDeviceDriverProperties drv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
                                                 .pNext = vk->props.apiVersion >= VK_API_VERSION_1_2 ? &drv : NULL};
    /* Subgroup size control (VK_EXT_subgroup_size_control, core in 1.3): the shaders size their
     * workgroups and reductions by the reported subgroup size, but a driver may compile a compute
     * shader for another width (Intel: 8, 16 or 32; AMD RDNA: 32 or 64) and split a workgroup into
     * partial subgroups. Where the extension allows it, every pipeline pins the reported size and
     * the subgroup-sized ones require full subgroups (vk_pipelines.c). Its structs may only be
     * chained when the device has it. */
    const bool ssc_ext = has_device_extension(vk->phys, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    VkPhysicalDeviceSubgroupSizeControlPropertiesEXT ssc_props = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT, .pNext = &m3};
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
                                             .pNext = ssc_ext ? (void *)&ssc_props : (void *)&m3};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    vkGetPhysicalDeviceProperties2(vk->phys, &p2);
    snprintf(vk->driver_name, sizeof vk->driver_name, "%s", drv.driverName);
    snprintf(vk->driver_info, sizeof vk->driver_info, "%s", drv.driverInfo);
    vk->max_allocation = m3.maxMemoryAllocationSize;
    const VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    if (!(sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) || (sg.supportedOperations & need) != need) {
        snprintf(err, errlen, "device %s lacks subgroup arithmetic in compute shaders", vk->props.deviceName);
        return WK_ERR_UNSUPPORTED;
    }
    vk->subgroup_size = sg.subgroupSize;
    vk->subgroup_ops = sg.supportedOperations;
    if (vk->subgroup_size < 4 || vk->subgroup_size > 128) {
        snprintf(err, errlen, "unusual subgroup size %u", vk->subgroup_size);
        return WK_ERR_UNSUPPORTED;
    }
    /* The KV cache is written as f16 from shaders. */
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT ssc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
                                                .pNext = ssc_ext ? &ssc : NULL};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &s16};
    vkGetPhysicalDeviceFeatures2(vk->phys, &f2);
    if (!s16.storageBuffer16BitAccess) {
        snprintf(err, errlen, "device %s lacks storageBuffer16BitAccess", vk->props.deviceName);
        return WK_ERR_UNSUPPORTED;
    }
    vk->pin_subgroup = ssc_ext && ssc.subgroupSizeControl && ssc.computeFullSubgroups &&
                       (ssc_props.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                       ssc_props.minSubgroupSize <= vk->subgroup_size && vk->subgroup_size <= ssc_props.maxSubgroupSize;
    vk->max_workgroup_subgroups = vk->pin_subgroup ? ssc_props.maxComputeWorkgroupSubgroups : 0;
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT ssc_on = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT,
        .subgroupSizeControl = VK_TRUE, .computeFullSubgroups = VK_TRUE};
    VkPhysicalDevice16BitStorageFeatures s16_on = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
                                                   .pNext = vk->pin_subgroup ? &ssc_on : NULL,
                                                   .storageBuffer16BitAccess = VK_TRUE};
    const char *dev_exts[1] = {VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME};
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = vk->queue_family, .queueCount = 1, .pQueuePriorities = &prio};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &s16_on, .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci, .enabledExtensionCount = vk->pin_subgroup ? 1 : 0,
                              .ppEnabledExtensionNames = vk->pin_subgroup ? dev_exts : NULL};
    VKCALL(vkCreateDevice(vk->phys, &dci, NULL, &vk->dev), "vkCreateDevice");
    vkGetDeviceQueue(vk->dev, vk->queue_family, 0, &vk->queue);
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = vk->queue_family};
    VKCALL(vkCreateCommandPool(vk->dev, &pci, NULL, &vk->cmd_pool), "vkCreateCommandPool");
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .commandPool = vk->cmd_pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
    VKCALL(vkAllocateCommandBuffers(vk->dev, &cai, &vk->cmd), "vkAllocateCommandBuffers");
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VKCALL(vkCreateFence(vk->dev, &fci, NULL, &vk->fence), "vkCreateFence");
    return 0;
}

#if defined(__SANITIZE_ADDRESS__)
static int pin_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size, (void)data;
    if (info->dlpi_name && info->dlpi_name[0]) dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    return 0;
}
#endif

/* Sanitizer builds only: the Vulkan loader unloads the driver at vkDestroyInstance, and a block
 * the driver still points to from its own globals (Mesa's lavapipe keeps one of 128 bytes) then
 * becomes unreachable: LeakSanitizer reports it at exit as a leak in "<unknown module>", which no
 * suppression can name, and the clean exit turns into status 1. Pinning every loaded library
 * (RTLD_NODELETE) keeps the driver mapped until the process ends, so its globals stay roots and
 * the block is reachable, as it is in the driver's own design; our own leaks are still reported
 * (docs/reliability.md, "Running the daemon under the sanitizers"). */
static void keep_driver_loaded(void) {
#if defined(__SANITIZE_ADDRESS__)
    dl_iterate_phdr(pin_object, NULL);
#endif
}

int wk_vk_init(wk_vk *vk, int device_index, int validation, bool verbose, char *err, size_t errlen) {
    memset(vk, 0, sizeof *vk);
    vk->validation = validation != WK_VK_VALIDATION_OFF;
    vk->validation_sync = validation == WK_VK_VALIDATION_SYNC;
    int rc;
    if ((rc = create_instance(vk, err, errlen)) || (rc = pick_device(vk, device_index, err, errlen)) ||
        (rc = create_device(vk, err, errlen))) {
        wk_vk_destroy(vk);
        return rc;
    }
    keep_driver_loaded();
    if (verbose)
        fprintf(stderr, "wushkv: device %s (Vulkan %u.%u, subgroup %u%s)%s\n", vk->props.deviceName,
                VK_API_VERSION_MAJOR(vk->props.apiVersion), VK_API_VERSION_MINOR(vk->props.apiVersion),
                vk->subgroup_size, vk->pin_subgroup ? ", pinned" : "", vk->validation_sync ? ", validation on (with synchronization)"
                                   : vk->validation ? ", validation on" : "");
    return 0;
}

void wk_vk_destroy(wk_vk *vk) {
    if (vk->dev) {
        vkDeviceWaitIdle(vk->dev);
        if (vk->fence) vkDestroyFence(vk->dev, vk->fence, NULL);
        if (vk->cmd_pool) vkDestroyCommandPool(vk->dev, vk->cmd_pool, NULL);
        vkDestroyDevice(vk->dev, NULL);
    }
    if (vk->messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT destroy =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(vk->instance, "vkDestroyDebugUtilsMessengerEXT");
        if (destroy) destroy(vk->instance, vk->messenger, NULL);
    }
    if (vk->instance) vkDestroyInstance(vk->instance, NULL);
    int msgs = vk->validation_messages;
    memset(vk, 0, sizeof *vk);
    vk->validation_messages = msgs; /* tests read it after teardown */
}

static int find_memory_type(const wk_vk *vk, uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid) {
    for (uint32_t i = 0; i < vk->mem_props.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = vk->mem_props.memoryTypes[i].propertyFlags;
        if ((bits & (1u << i)) && (f & want) == want && !(f & avoid)) return (int)i;
    }
    return -1;
}

VkDeviceSize wk_vk_max_buffer_bytes(const wk_vk *vk) {
    VkDeviceSize heap = 0; /* the largest device-local heap (any heap when none is device-local) */
    for (int pass = 0; pass < 2 && !heap; pass++)
        for (uint32_t i = 0; i < vk->mem_props.memoryHeapCount; i++)
            if ((pass || (vk->mem_props.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)) &&
                vk->mem_props.memoryHeaps[i].size > heap)
                heap = vk->mem_props.memoryHeaps[i].size;
    if (vk->max_allocation && (!heap || vk->max_allocation < heap)) return vk->max_allocation;
    return heap;
}

bool wk_vk_weights_mappable(const wk_vk *vk) {
    /* The type wk_vk_buffer_create takes for WK_MEM_DEVICE (a buffer's type bits allow every type on
     * the drivers that matter here; a buffer that still lands elsewhere is unmapped, and its user
     * checks wk_buf.map). */
    int type = find_memory_type(vk, ~0u, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    if (type < 0) type = find_memory_type(vk, ~0u, 0, 0);
    const VkMemoryPropertyFlags need = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    return type >= 0 && (vk->mem_props.memoryTypes[type].propertyFlags & need) == need;
}

int wk_vk_buffer_create(wk_vk *vk, wk_buf *b, VkDeviceSize size, wk_mem_kind kind, VkFormat texel_format, char *err,
                        size_t errlen) {
    memset(b, 0, sizeof *b);
    if (size == 0) size = 16;
    size = (size + 15) & ~(VkDeviceSize)15;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
                                       VK_BUFFER_USAGE_STORAGE_TEXEL_BUFFER_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    /* Beyond what one allocation or the heap can hold, the driver's own refusal (or, on some, an
     * overcommitted allocation that faults later) would say less than this. */
    const VkDeviceSize room = wk_vk_max_buffer_bytes(vk);
    if (room && size > room) {
        snprintf(err, errlen, "a buffer of %llu bytes is larger than device %s can allocate at once (%llu bytes)",
                 (unsigned long long)size, vk->props.deviceName, (unsigned long long)room);
        return WK_ERR_NOMEM;
    }
    VKCALL(vkCreateBuffer(vk->dev, &bci, NULL, &b->buf), "vkCreateBuffer");
    b->size = size;
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(vk->dev, b->buf, &req);
    int type = -1;
    if (kind == WK_MEM_HOST) {
        /* Readback wants cached memory; uploads are fine either way. */
        type = find_memory_type(vk, req.memoryTypeBits,
                                VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                                    VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0);
        if (type < 0)
            type = find_memory_type(vk, req.memoryTypeBits,
                                    VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, 0);
    } else {
        type = find_memory_type(vk, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
        if (type < 0) type = find_memory_type(vk, req.memoryTypeBits, 0, 0);
    }
    if (type < 0) {
        wk_vk_buffer_destroy(vk, b);
        snprintf(err, errlen, "no suitable memory type for a %llu-byte buffer", (unsigned long long)size);
        return WK_ERR_VULKAN;
    }
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size,
                                .memoryTypeIndex = (uint32_t)type};
    VkResult r = vkAllocateMemory(vk->dev, &mai, NULL, &b->mem);
    if (r != VK_SUCCESS) {
        wk_vk_buffer_destroy(vk, b);
        snprintf(err, errlen, "allocating %llu bytes of device memory failed: %s", (unsigned long long)req.size,
                 wk_vk_result_name(r));
        return r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ? WK_ERR_NOMEM : WK_ERR_VULKAN;
    }
    vk->bytes_allocated += req.size;
    b->bytes = req.size;
    r = vkBindBufferMemory(vk->dev, b->buf, b->mem, 0);
    if (r == VK_SUCCESS && (vk->mem_props.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
        r = vkMapMemory(vk->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map);
    if (r != VK_SUCCESS) {
        wk_vk_buffer_destroy(vk, b);
        WK_VK_CHECK_MSG(r, "binding/mapping buffer memory", err, errlen);
        return WK_ERR_VULKAN;
    }
    if (texel_format != VK_FORMAT_UNDEFINED) {
        int rc = wk_vk_view_create(vk, b, texel_format, 0, VK_WHOLE_SIZE, &b->view, err, errlen);
        if (rc) {
            wk_vk_buffer_destroy(vk, b);
            return rc;
        }
    }
    return 0;
}

void wk_vk_buffer_destroy(wk_vk *vk, wk_buf *b) {
    if (!vk->dev) return;
    if (b->view) vkDestroyBufferView(vk->dev, b->view, NULL);
    if (b->buf) vkDestroyBuffer(vk->dev, b->buf, NULL);
    if (b->mem) vkFreeMemory(vk->dev, b->mem, NULL);
    vk->bytes_allocated -= b->bytes;
    memset(b, 0, sizeof *b);
}

static uint32_t texel_bytes(VkFormat f) {
    switch (f) {
    case VK_FORMAT_R32G32B32A32_UINT:
    case VK_FORMAT_R32G32B32A32_SFLOAT: return 16;
    case VK_FORMAT_R32G32_UINT:
    case VK_FORMAT_R32G32_SFLOAT: return 8;
    case VK_FORMAT_R32_UINT:
    case VK_FORMAT_R32_SFLOAT: return 4;
    default: return 0;
    }
}

int wk_vk_view_create(wk_vk *vk, const wk_buf *b, VkFormat fmt, VkDeviceSize offset, VkDeviceSize range,
                      VkBufferView *out, char *err, size_t errlen) {
    uint32_t tb = texel_bytes(fmt);
    VkDeviceSize bytes = range == VK_WHOLE_SIZE ? b->size - offset : range;
    bytes -= bytes % (tb ? tb : 1);
    if (!tb || bytes == 0 || bytes / tb > vk->props.limits.maxTexelBufferElements) {
        snprintf(err, errlen, "texel view of %llu bytes exceeds the device limit of %u elements",
                 (unsigned long long)bytes, vk->props.limits.maxTexelBufferElements);
        return WK_ERR_UNSUPPORTED;
    }
    VkBufferViewCreateInfo vci = {.sType = VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO, .buffer = b->buf,
                                  .format = fmt, .offset = offset, .range = bytes};
    VKCALL(vkCreateBufferView(vk->dev, &vci, NULL, out), "vkCreateBufferView");
    return 0;
}

int wk_vk_begin(wk_vk *vk, char *err, size_t errlen) {
    VKCALL(vkResetCommandBuffer(vk->cmd, 0), "vkResetCommandBuffer");
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VKCALL(vkBeginCommandBuffer(vk->cmd, &bi), "vkBeginCommandBuffer");
    return 0;
}

int wk_vk_submit_wait(wk_vk *vk, char *err, size_t errlen) {
    VKCALL(vkEndCommandBuffer(vk->cmd), "vkEndCommandBuffer");
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &vk->cmd};
    VKCALL(vkResetFences(vk->dev, 1, &vk->fence), "vkResetFences");
    VKCALL(vkQueueSubmit(vk->queue, 1, &si, vk->fence), "vkQueueSubmit");
    VKCALL(vkWaitForFences(vk->dev, 1, &vk->fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    return 0;
}

/* Every later access in the destination scope, writes included: a transfer write after a write is a
 * write-after-write hazard unless TRANSFER_WRITE is in dstAccessMask (synchronization validation
 * reported it; tests/test_sync_validation.c). */
void wk_vk_barrier(wk_vk *vk) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                           VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                                           VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(vk->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
                             VK_PIPELINE_STAGE_HOST_BIT,
                         0, 1, &mb, 0, NULL, 0, NULL);
}

int wk_vk_copy(wk_vk *vk, const wk_vk_region *r, int n, char *err, size_t errlen) {
    for (int i = 0; i < n; i++)
        if (r[i].src_offset + r[i].bytes > r[i].src->size || r[i].dst_offset + r[i].bytes > r[i].dst->size)
            return snprintf(err, errlen, "device copy of %llu bytes out of its buffers", (unsigned long long)r[i].bytes),
                   WK_ERR_INVALID;
    int rc = wk_vk_begin(vk, err, errlen);
    if (rc) return rc;
    /* The barriers order the copy after every earlier step's writes and before every later read
     * (their scopes reach across submissions to the one queue). */
    wk_vk_barrier(vk);
    for (int i = 0; i < n; i++) {
        if (!r[i].bytes) continue;
        VkBufferCopy c = {.srcOffset = r[i].src_offset, .dstOffset = r[i].dst_offset, .size = r[i].bytes};
        vkCmdCopyBuffer(vk->cmd, r[i].src->buf, r[i].dst->buf, 1, &c);
    }
    wk_vk_barrier(vk);
    return wk_vk_submit_wait(vk, err, errlen);
}

int wk_vk_upload(wk_vk *vk, wk_buf *b, VkDeviceSize offset, const void *data, VkDeviceSize size, char *err,
                 size_t errlen) {
    if (offset + size > b->size) {
        snprintf(err, errlen, "upload of %llu bytes at %llu overflows a %llu-byte buffer", (unsigned long long)size,
                 (unsigned long long)offset, (unsigned long long)b->size);
        return WK_ERR_INVALID;
    }
    if (b->map) {
        memcpy((char *)b->map + offset, data, size);
        return 0;
    }
    /* Not mappable (a discrete GPU's VRAM): copy through a host buffer in pieces. */
    const VkDeviceSize piece = 64u << 20;
    wk_buf staging;
    int rc = wk_vk_buffer_create(vk, &staging, size < piece ? size : piece, WK_MEM_HOST, VK_FORMAT_UNDEFINED, err, errlen);
    if (rc) return rc;
    for (VkDeviceSize done = 0; done < size && !rc; done += piece) {
        VkDeviceSize n = size - done < piece ? size - done : piece;
        memcpy(staging.map, (const char *)data + done, n);
        if ((rc = wk_vk_begin(vk, err, errlen))) break;
        VkBufferCopy region = {.srcOffset = 0, .dstOffset = offset + done, .size = n};
        vkCmdCopyBuffer(vk->cmd, staging.buf, b->buf, 1, &region);
        rc = wk_vk_submit_wait(vk, err, errlen);
    }
    wk_vk_buffer_destroy(vk, &staging);
    return rc;
}
