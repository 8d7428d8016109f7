/* `wushkv perplexity --layer-error`: the layerwise reconstruction error of quantized KV formats
 * (wk_kv_layer_error) on the first window of the text, instead of perplexity: the format list, the
 * run and the table / JSON it prints. */
#ifndef WUSHKV_LAYER_ERROR_H
#define WUSHKV_LAYER_ERROR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wushkv/research.h"

#define LAYER_ERROR_MAX_FORMATS 64

#define LAYER_ERROR_HELP                                                                              \
    "  --layer-error      instead of perplexity: per layer, the relative MSE of the attention\n"      \
    "                     output (after and before W_o) when K and V are stored in the KV format\n"   \
    "                     of the flags above, against f16, on the first --ctx tokens of FILE (the\n"  \
    "                     format is applied on the host to an f16 capture; each layer gets the f16\n" \
    "                     model's inputs, so its error is its own)\n"                                 \
    "  --layer-error-formats LIST\n"                                                                  \
    "                     --layer-error for several formats from one capture: comma-separated\n"      \
    "                     FMT[:QUANT[:TRANSFORM[:SINK[:RECENT]]]], e.g. int2:quest:wush:4:64;\n"       \
    "                     FMT f16/int2/int3/int4, a field left out or empty comes from the flags\n"   \
    "                     With --json: one line per format, {\"format\", \"layers\": [{\"layer\",\n"  \
    "                     \"swa\", \"rel_mse\", \"rel_mse_attn\"}], \"mean_rel_mse\", ...}\n"          \
    "  --threads N        host threads for --layer-error (default: all CPUs)\n"

/* The format the KV flags describe (sink, recent and the percentile quantiles included). */
void layer_error_format_from_flags(const wk_engine_params *kv, wk_kv_error_format *f);
/* Parses a --layer-error-formats list; fields left out come from kv. Returns the count, or -1 with
 * a message in err. */
int layer_error_parse_formats(const char *list, const wk_engine_params *kv, wk_kv_error_format *out, int cap,
                              char *err, size_t errlen);

typedef struct layer_error_opts {
    const wk_kv_error_format *formats;
    int n_formats;
    const char *file; /* for the heading */
    int ctx, threads;
    bool json;
} layer_error_opts;

/* Runs the formats on tokens[0..ctx) (tokens[0] evaluated as BOS where the model wants one) and
 * prints the result on stdout. The engine must have the f16 cache, no transform and batch tokens
 * >= ctx. Returns the exit status (0, or 1 after printing the error). */
int layer_error_run(wk_engine *e, const layer_error_opts *o, const int32_t *tokens, int n_tokens);

#endif
