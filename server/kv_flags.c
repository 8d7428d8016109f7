/* KV-cache format flags: one parser for generate, perplexity and serve, so the names, values and
 * errors are the same everywhere. */
#include "kv_flags.h"

#include <stdio.h>
#include <string.h>

static const char *const quant_names[] = {"quest", "percentile", "absmax"};

bool kv_flags_parse(cli *c, wk_engine_params *p, bool *handled) {
    *handled = true;
    const char *v;
    if (cli_is(c, NULL, "--kv")) {
        if (!cli_str(c, &v)) return false;
        if (strcmp(v, "f16") == 0) p->kv_bits = 16;
        else if (strcmp(v, "int2") == 0) p->kv_bits = 2;
        else if (strcmp(v, "int3") == 0) p->kv_bits = 3;
        else if (strcmp(v, "int4") == 0) p->kv_bits = 4;
        else {
            cli_error(c, "--kv: expected f16, int2, int3 or int4, got '%s'", v);
            return false;
        }
        return true;
    }
    if (cli_is(c, NULL, "--kv-quant")) {
        if (!cli_str(c, &v)) return false;
        for (int i = 0; i < 3; i++)
            if (strcmp(v, quant_names[i]) == 0) {
                p->kv_quant = i;
                return true;
            }
        cli_error(c, "--kv-quant: expected quest, percentile or absmax, got '%s'", v);
        return false;
    }
    if (cli_is(c, NULL, "--kv-group")) {
        int g;
        if (!cli_int(c, 16, 256, &g)) return false;
        if (g & (g - 1)) {
            cli_error(c, "--kv-group: expected 16, 32, 64, 128 or 256, got '%d'", g);
            return false;
        }
        p->kv_group = g;
        return true;
    }
    if (cli_is(c, NULL, "--kv-mem")) return cli_size(c, &p->kv_mem);
    if (cli_is(c, NULL, "--kv-transform")) {
        if (!cli_str(c, &v)) return false;
        if (strcmp(v, "none") == 0) p->kv_transform = WK_KV_TRANSFORM_NONE;
        else if (strcmp(v, "hadamard") == 0) p->kv_transform = WK_KV_TRANSFORM_HADAMARD;
        else if (strcmp(v, "wush") == 0) p->kv_transform = WK_KV_TRANSFORM_WUSH;
        else {
            cli_error(c, "--kv-transform: expected none, hadamard or wush, got '%s'", v);
            return false;
        }
        return true;
    }
    if (cli_is(c, NULL, "--wush")) {
        if (!cli_str(c, &p->wush_path)) return false;
        p->kv_transform = WK_KV_TRANSFORM_WUSH; /* a later --kv-transform still overrides */
        return true;
    }
    *handled = false;
    return true;
}

const char *kv_flags_describe(const wk_engine_params *p, char *buf, int cap) {
    static const char *const xf[] = {"", " + hadamard", " + wush"};
    const char *t = xf[p->kv_transform < 0 || p->kv_transform > 2 ? 0 : p->kv_transform];
    if (p->kv_bits == 0 || p->kv_bits == 16) snprintf(buf, (size_t)cap, "f16%s", t);
    else
        snprintf(buf, (size_t)cap, "int%d %s g%d%s", p->kv_bits,
                 quant_names[p->kv_quant < 0 || p->kv_quant > 2 ? 0 : p->kv_quant], p->kv_group ? p->kv_group : 32, t);
    return buf;
}
