/* The KV-cache format flags every model-running command shares (--kv, --kv-quant, --kv-group,
 * --kv-mem, --kv-transform, --wush): parsing into wk_engine_params and their help text. */
#ifndef WUSHKV_KV_FLAGS_H
#define WUSHKV_KV_FLAGS_H

#include <stdbool.h>

#include "cli_args.h"
#include "wushkv/wushkv.h"

#define KV_FLAGS_HELP                                                                                 \
    "  --kv FMT           KV cache format: f16 (default), int2, int3, int4 (paged pool of packed\n"    \
    "                     codes with per-group f16 scales)\n"                                         \
    "  --kv-quant Q       quantizer for int formats: quest (default), percentile, absmax\n"           \
    "  --kv-group G       elements per quantization group: 16, 32 (default), 64, 128, 256\n"          \
    "  --kv-mem BYTES     KV pool size, e.g. 256MiB (default: room for the whole context)\n"         \
    "  --kv-transform T   none (default), hadamard (random-sign, blocks of --kv-group) or wush\n"     \
    "  --wush FILE        WUSH-KV transforms from `wushkv calibrate` (implies --kv-transform wush)\n"

/* If the current option is one of the KV flags, parses it into p and sets *handled; returns false
 * (after printing the error) on a bad value. */
bool kv_flags_parse(cli *c, wk_engine_params *p, bool *handled);
/* "f16", "int2 quest g32" ... for logs. */
const char *kv_flags_describe(const wk_engine_params *p, char *buf, int cap);

#endif
