/* KV-cache format flags: one parser for serve, generate, perplexity and bench, so the names, values,
 * defaults and errors are the same everywhere (see kv_flags.h). */
#include "cli/kv_flags.h"

#include "wushkv/research.h"

#include <limits.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>

static const char *const bits_names[] = {"f16", "int2", "int3", "int4"};
static const int bits_values[] = {16, 2, 3, 4};
static const char *const quant_names[] = {"quest", "percentile", "absmax"}; /* wk_kv_quant order */
static const char *const group_names[] = {"16", "32", "64", "128", "256"};  /* 16 << index */
static const char *const transform_names[] = {"none", "hadamard", "wush"};  /* wk_kv_transform order */

/* Every flag with its help: the value's name, then lines that kv_flags_usage indents. */
static const struct {
    const char *flag, *value, *help;
} flags[] = {
    {"--kv", "FMT",
     "KV cache format: f16 (blocks of f16 keys and values; drops the\n"
     "default transform and windows) or int2, int3, int4 (blocks of\n"
     "packed codes with per-group f16 parameters), in one paged pool\n"
     "(default int2)"},
    {"--kv-quant", "Q", "quantizer of int2/3/4: quest (default), percentile, absmax"},
    {"--kv-group", "G",
     "elements of a head vector per quantization group (and Hadamard\n"
     "block): 16, 32, 64, 128, 256 (default: 128, or the largest\n"
     "that divides the model's head_dim; 32 with --kv or --wush)"},
    {"--kv-mem", "BYTES",
     "KV pool size, e.g. 256MiB (default: room for every sequence's\n"
     "full context)"},
    {"--kv-transform", "T",
     "none, hadamard (random signs, blocks of --kv-group) or wush\n"
     "(default wush; none with --kv f16)"},
    {"--wush", "FILE",
     "WUSH-KV transforms from `wushkv calibrate` for this model\n"
     "(default: the model's sidecar in the cache directory,\n"
     "$WUSHKV_CACHE_DIR, else $XDG_CACHE_HOME/wushkv, else\n"
     "~/.cache/wushkv; made from the built-in text when missing)"},
    {"--kv-sink", "S", "int2/3/4: keep the first S tokens' keys and values in f16\n(default 16; 0 with --kv f16)"},
    {"--kv-recent", "R", "int2/3/4: keep the last R tokens' keys and values in f16\n(default 128; 0 with --kv f16)"},
    {"--kv-clip", "X",
     "quest quantizer: step of the main width's groups as X times the\n"
     "Gaussian-MSE-optimal one, in [0.25, 4] (default 1.2 with the\n"
     "default format, else 1; a sliding-window width of its own keeps 1)"},
    {"--kv-rho-k", "X", "percentile quantizer: clip quantile of keys, in (0, 1]\n(default 0.96)"},
    {"--kv-rho-v", "X", "percentile quantizer: clip quantile of values, in (0, 1]\n(default 0.92)"},
    {"--kv-swa", "FMT",
     "int2/3/4: format of the sliding-window layers' cache: int2, int3,\n"
     "int4 (default: as --kv; no effect on a model without them)"},
    {"--kv-swa-sink", "S",
     "int2/3/4: f16 sink tokens of the sliding-window layers (default 0\n"
     "with no window flag, else as --kv-sink; --kv-sink then counts for\n"
     "the other layers only)"},
    {"--kv-wide-keys", "LAYERS",
     "int2/3: the keys of these layers (comma-separated indices, or\n"
     "none) one bit wider than --kv, or FMT with LAYERS:FMT; values\n"
     "keep --kv; with --kv-swa, full-attention layers only (default:\n"
     "one full-attention layer in three, by the sidecar's predicted\n"
     "key error, while no --kv or --wush is given; else none)"},
    {"--kv-swa-recent", "R",
     "int2/3/4: f16 recent tokens of the sliding-window layers (default\n"
     "32 with no window flag, else as --kv-recent; --kv-recent then\n"
     "counts for the other layers only)"},
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };

/* THE default KV format of every command (serve, generate, perplexity, bench): the best 2-bit
 * format measured inside issue 11's byte bounds (docs/wush-kv-frontier.md): int2 QuEST in
 * groups of 128 after the WUSH transform (its sidecar found or made by wush_cache.c when no --wush
 * is given), with the first 16 and the last 128 tokens of the full-attention layers kept in f16;
 * the sliding-window layers at int4 with their last 32 tokens in f16 (a sliding layer holds at
 * most its window, so its bits are cheap at long context; its f16 row costs 5x a global one's on
 * Gemma 3, and it cannot see the first tokens past its window anyway). Change it here and nowhere
 * else. */
#define KV_DEFAULT_BITS 2
#define KV_DEFAULT_QUANT WK_KV_QUANT_QUEST
#define KV_DEFAULT_TRANSFORM WK_KV_TRANSFORM_WUSH
#define KV_DEFAULT_SINK 16
#define KV_DEFAULT_RECENT 104
/* The default's group, made to divide the model's head_dim (kv_flags_fit_model halves it), and
 * the group of a format named on the command line (--kv, or a --wush sidecar: `wushkv calibrate`
 * makes them for groups of 32 unless told otherwise). The default's group stands only while none
 * of --kv, --kv-group, --wush is given (kv_flags_finish), so every explicit command line means what
 * it meant before the default's group was 128. */
#define KV_DEFAULT_GROUP 128
#define KV_NAMED_GROUP 32
/* Its per-layer-class part, for models with sliding-window layers (no effect on the others): the
 * sliding layers' width and their own f16 windows. The width stands only while none of --kv,
 * --wush, --kv-swa is given, the windows while no window flag is (kv_flags_finish), for the same
 * reason. */
#define KV_DEFAULT_SWA_BITS 4
#define KV_DEFAULT_SWA_SINK 0
#define KV_DEFAULT_SWA_RECENT 32
/* QuEST's clip of the main width: a step 1.2x the Gaussian-MSE-optimal one, which costs some MSE
 * and buys attention quality at 2 bits (docs/wush-kv-frontier.md, QuEST's clip). It stands only while none
 * of --kv, --wush, --kv-quant, --kv-clip is given, for the same reason as the group. */
#define KV_DEFAULT_CLIP 1.2f

bool kv_flags_parse_format(cli *c, kv_flags *f) {
    int i = 0;
    if (!cli_choice(c, bits_names, 4, &i)) return false;
    f->bits = bits_values[i];
    f->bits_given = true;
    return true;
}

const char *kv_flags_format_name(const kv_flags *f) {
    for (int i = 0; i < 4; i++)
        if (bits_values[i] == f->bits) return bits_names[i];
    return "?";
}

void kv_flags_init(kv_flags *f) {
    memset(f, 0, sizeof *f);
    f->bits = KV_DEFAULT_BITS;
    f->quant = KV_DEFAULT_QUANT;
    f->group = KV_DEFAULT_GROUP; /* kv_flags_finish settles it */
    f->transform = KV_DEFAULT_TRANSFORM;
    f->sink = KV_DEFAULT_SINK;
    f->recent = KV_DEFAULT_RECENT;
}

bool kv_flags_is(const cli *c) {
    for (int i = 0; i < N_FLAGS; i++)
        if (cli_is(c, NULL, flags[i].flag)) return true;
    return false;
}

/* QuEST's clip factor: a number in [WK_KV_CLIP_MIN, WK_KV_CLIP_MAX]. */
static bool clip_factor(cli *c, float *out) {
    const char *s;
    if (!cli_str(c, &s)) return false;
    double v;
    if (!cli_parse_double(s, &v) || !(v >= WK_KV_CLIP_MIN && v <= WK_KV_CLIP_MAX)) {
        cli_error(c, "%s: expected a number in [%g, %g], got '%s'", c->name, (double)WK_KV_CLIP_MIN,
                  (double)WK_KV_CLIP_MAX, s);
        return false;
    }
    *out = (float)v;
    return true;
}

/* --kv-wide-keys: "none", or layer indices "5,11" with an optional ":int3" / ":int4". */
static bool wide_keys(cli *c, kv_flags *f) {
    const char *s;
    if (!cli_str(c, &s)) return false;
    memset(f->wide_keys, 0, sizeof f->wide_keys);
    f->key_bits = 0;
    if (strcmp(s, "none") == 0) return true;
    const char *p = s;
    int n = 0;
    bool after_comma = false;
    for (;;) {
        char *end = (char *)p;
        long il = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : -1;
        if (il < 0 || il >= 256 || end == p) break;
        wk_layer_set_add(f->wide_keys, (int)il);
        n++;
        after_comma = false;
        p = end;
        if (*p != ',') break;
        p++;
        after_comma = true;
    }
    if (after_comma) n = 0; /* "3," */
    if (n > 0 && *p == ':' && (strcmp(p + 1, "int3") == 0 || strcmp(p + 1, "int4") == 0)) {
        f->key_bits = p[4] - '0';
        p += strlen(p);
    }
    if (n == 0 || *p) {
        cli_error(c, "%s: expected none or layer indices 0..255 separated by commas, optionally :int3 or :int4 "
                  "(e.g. 11 or 5,11:int4), got '%s'", c->name, s);
        return false;
    }
    return true;
}

/* A clip quantile: a number in (0, 1]. 0 would mean the engine's default, so it is refused, as
 * is anything that rounds to 0 as a float. */
static bool quantile(cli *c, float *out) {
    const char *s;
    if (!cli_str(c, &s)) return false;
    double v;
    if (!cli_parse_double(s, &v) || !(v > 0.0 && v <= 1.0) || !((float)v > 0.0f)) {
        cli_error(c, "%s: expected a number in (0, 1], got '%s'", c->name, s);
        return false;
    }
    *out = (float)v;
    return true;
}

bool kv_flags_parse(cli *c, kv_flags *f) {
    int i;
    if (cli_is(c, NULL, "--kv")) return kv_flags_parse_format(c, f);
    if (cli_is(c, NULL, "--kv-group")) {
        if (!cli_choice(c, group_names, 5, &i)) return false;
        f->group = 16 << i;
        f->group_given = true;
        return true;
    }
    if (cli_is(c, NULL, "--kv-transform")) {
        f->transform_given = true;
        if (!cli_choice(c, transform_names, 3, &i)) return false;
        f->transform = (wk_kv_transform)i; /* cli_choice gave 0..2 */
        return true;
    }
    if (cli_is(c, NULL, "--wush")) return cli_str(c, &f->wush_path);
    if (cli_is(c, NULL, "--kv-mem")) return cli_size(c, &f->mem); /* every format's pool */
    /* The rest apply to a quantized cache only; kv_flags_finish checks that. */
    const char *name = NULL;
    bool ok = false;
    if (cli_is(c, NULL, "--kv-quant")) {
        name = "--kv-quant";
        ok = cli_choice(c, quant_names, 3, &i);
        if (ok) f->quant = (wk_kv_quant)i; /* cli_choice gave 0..2 */
        f->quant_given = true;
    } else if (cli_is(c, NULL, "--kv-clip")) {
        name = f->quest_only = "--kv-clip";
        ok = clip_factor(c, &f->clip);
        f->clip_given = true;
    } else if (cli_is(c, NULL, "--kv-sink")) {
        name = "--kv-sink";
        ok = cli_int(c, 0, INT_MAX, &f->sink);
        f->sink_given = true;
    } else if (cli_is(c, NULL, "--kv-recent")) {
        name = "--kv-recent";
        ok = cli_int(c, 0, INT_MAX, &f->recent);
        f->recent_given = true;
    } else if (cli_is(c, NULL, "--kv-rho-k")) {
        name = f->percentile_only = "--kv-rho-k";
        ok = quantile(c, &f->rho_k);
    } else if (cli_is(c, NULL, "--kv-rho-v")) {
        name = f->percentile_only = "--kv-rho-v";
        ok = quantile(c, &f->rho_v);
    } else if (cli_is(c, NULL, "--kv-swa-sink")) {
        name = "--kv-swa-sink";
        ok = cli_int(c, 0, INT_MAX, &f->swa_sink);
        f->swa_sink_given = true;
    } else if (cli_is(c, NULL, "--kv-swa-recent")) {
        name = "--kv-swa-recent";
        ok = cli_int(c, 0, INT_MAX, &f->swa_recent);
        f->swa_recent_given = true;
    } else if (cli_is(c, NULL, "--kv-wide-keys")) {
        name = "--kv-wide-keys";
        ok = wide_keys(c, f);
        f->wide_keys_given = true;
    } else if (cli_is(c, NULL, "--kv-swa")) {
        name = "--kv-swa";
        ok = cli_choice(c, bits_names + 1, 3, &i); /* int2, int3, int4 */
        if (ok) f->swa_bits = bits_values[i + 1];
        f->swa_bits_given = true;
    } else {
        cli_unknown(c); /* a caller that skipped kv_flags_is */
        return false;
    }
    f->quantized_only = name;
    return ok;
}

bool kv_flags_finish(const cli *c, kv_flags *f) {
    /* A sidecar makes WUSH the transform unless one was named. */
    if (f->wush_path && !f->transform_given) f->transform = WK_KV_TRANSFORM_WUSH;
    /* --kv f16 opts out of the quantized default: its transform and windows go too, unless they
     * were named (then the checks below judge them). */
    if (f->bits == 16 && f->bits_given) {
        if (!f->transform_given && !f->wush_path) f->transform = WK_KV_TRANSFORM_NONE;
        if (!f->sink_given) f->sink = 0;
        if (!f->recent_given) f->recent = 0;
    }
    /* The sliding layers' windows: the one of the pair not given follows the other layers'. */
    f->swa_windows = f->swa_sink_given || f->swa_recent_given;
    if (!f->swa_sink_given) f->swa_sink = f->sink;
    if (!f->swa_recent_given) f->swa_recent = f->recent;
    /* The default's per-class part: its windows while no window flag is given (one given keeps the
     * rule above: the sliding layers follow --kv-sink / --kv-recent unless given their own), its
     * sliding width while --kv is the default's width and --kv-swa is not given. */
    f->swa_default = f->bits != 16 && !f->swa_bits_given && !f->swa_sink_given && !f->swa_recent_given;
    if (f->bits != 16 && !f->sink_given && !f->recent_given && !f->swa_sink_given && !f->swa_recent_given) {
        f->swa_windows = true;
        f->swa_sink = KV_DEFAULT_SWA_SINK;
        f->swa_recent = KV_DEFAULT_SWA_RECENT;
    }
    /* A format named by --kv or a --wush sidecar is the plain one: groups of 32, one width. */
    const bool named = f->bits_given || f->wush_path;
    if (!named && !f->swa_bits_given) f->swa_bits = KV_DEFAULT_SWA_BITS;
    if (!f->group_given) f->group = named ? KV_NAMED_GROUP : KV_DEFAULT_GROUP;
    if (!named && !f->quant_given && !f->clip_given) f->clip = KV_DEFAULT_CLIP;
    /* The default's wide keys: one bit more in the full-attention layers the sidecar ranks first
     * (the engine chooses them), while no --kv, --wush or --kv-wide-keys is given. */
    f->wide_keys_auto = !named && !f->wide_keys_given && f->bits < 4 && f->transform == WK_KV_TRANSFORM_WUSH;
    if (f->wide_keys_auto) f->key_bits = f->bits + 1;
    if (f->bits == 16 && f->quantized_only) {
        cli_error(c, "%s applies to a quantized KV cache (--kv int2, int3 or int4), not to f16", f->quantized_only);
        return false;
    }
    if (f->bits == 16 && f->group_given && f->transform != WK_KV_TRANSFORM_HADAMARD) {
        cli_error(c, "--kv-group applies to a quantized KV cache (--kv int2, int3 or int4) or to --kv-transform "
                  "hadamard, not to f16 alone");
        return false;
    }
    /* Wide keys: one bit more than the values unless named, and more than them. */
    const bool any_wide = (f->wide_keys[0] | f->wide_keys[1] | f->wide_keys[2] | f->wide_keys[3]) != 0;
    if (any_wide && !f->key_bits) f->key_bits = f->bits + 1;
    if (any_wide && f->bits != 16 && f->key_bits <= f->bits) {
        cli_error(c, "--kv-wide-keys: int%d keys are not wider than the int%d cache (--kv)", f->key_bits, f->bits);
        return false;
    }
    if (any_wide && f->key_bits > 4) {
        cli_error(c, "--kv-wide-keys: an int4 cache has no wider key format");
        return false;
    }
    if (f->quest_only && f->quant != WK_KV_QUANT_QUEST) {
        cli_error(c, "%s applies to the quest quantizer, not to %s", f->quest_only, quant_names[f->quant]);
        return false;
    }
    if (f->percentile_only && f->quant != WK_KV_QUANT_PERCENTILE) {
        cli_error(c, "%s applies to the percentile quantizer (--kv-quant percentile), not to %s", f->percentile_only,
                  quant_names[f->quant]);
        return false;
    }
    return true;
}

void kv_flags_apply(const kv_flags *f, wk_engine_params *p) {
    p->kv_bits = f->bits;
    p->kv_quant = f->quant;
    p->kv_group = f->group;
    p->kv_mem = f->mem;
    p->kv_transform = f->transform;
    p->wush_path = f->wush_path;
    p->kv_sink = f->sink;
    p->kv_recent = f->recent;
    p->kv_rho_k = f->rho_k;
    p->kv_rho_v = f->rho_v;
    p->kv_clip = f->bits == 16 ? 0.0f : f->clip;
    p->kv_swa_bits = f->swa_bits;
    p->kv_swa_windows = f->swa_windows;
    p->kv_swa_sink = f->swa_sink;
    p->kv_swa_recent = f->swa_recent;
    p->kv_swa_default = f->swa_default;
    p->kv_key_bits = f->bits == 16 ? 0 : f->key_bits;
    memcpy(p->kv_wide_keys, f->wide_keys, sizeof p->kv_wide_keys);
    p->kv_wide_keys_auto = f->wide_keys_auto;
}

/* Appends to buf at *len, keeping it NUL-terminated when it runs out. */
static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    if (*len >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (w > 0) *len = *len + (size_t)w < cap ? *len + (size_t)w : cap;
}

void kv_flags_fit_model(kv_flags *f, const char *model_path) {
    if (f->group_given || f->group != KV_DEFAULT_GROUP || !model_path) return;
    int head_dim = 0;
    char err[WK_ERRMSG_LEN];
    /* Unreadable: leave it, wk_engine_open reports the model's problem in its own words. */
    if (wk_model_head_dim_file(model_path, &head_dim, err, sizeof err) != WK_OK || head_dim <= 0) return;
    while (f->group > 16 && head_dim % f->group) f->group /= 2;
}

const char *kv_flags_describe(const kv_flags *f, const wk_model_info *info, char *buf, size_t cap) {
    size_t len = 0;
    if (cap == 0) return buf;
    buf[0] = '\0';
    const bool quantized = f->bits != 16;
    if (quantized)
        append(buf, cap, &len, "int%d %s G%d", f->bits, quant_names[f->quant], f->group);
    else
        append(buf, cap, &len, "f16");
    if (quantized && f->rho_k > 0) append(buf, cap, &len, " rho_k%g", (double)f->rho_k);
    if (quantized && f->rho_v > 0) append(buf, cap, &len, " rho_v%g", (double)f->rho_v);
    if (quantized && f->clip > 0 && f->clip != 1.0f) append(buf, cap, &len, " clip%g", (double)f->clip);
    if (f->transform != WK_KV_TRANSFORM_NONE) append(buf, cap, &len, " %s", transform_names[f->transform]);
    if (!quantized && f->transform == WK_KV_TRANSFORM_HADAMARD) append(buf, cap, &len, " G%d", f->group);
    if (f->sink) append(buf, cap, &len, " sink%d", f->sink);
    if (f->recent) append(buf, cap, &len, " recent%d", f->recent);
    if (quantized && f->swa_bits && f->swa_bits != f->bits) append(buf, cap, &len, " swa:int%d", f->swa_bits);
    /* Wide keys: "keys:int3@11" (layers in order, comma-separated). */
    const uint64_t *layers = info ? info->kv_wide_keys : f->wide_keys;
    const int key_bits = info ? info->kv_key_bits : f->key_bits;
    char list[128];
    if (quantized && key_bits)
        append(buf, cap, &len, " keys:int%d@%s", key_bits,
               f->wide_keys_auto && !info ? "auto" : wk_layer_set_format(layers, list, sizeof list));
    /* The sliding layers' windows, when they are their own. */
    if (quantized && f->swa_windows && (f->swa_sink != f->sink || f->swa_recent != f->recent))
        append(buf, cap, &len, " swa:sink%d:recent%d", f->swa_sink, f->swa_recent);
    return buf;
}

void kv_flags_usage(FILE *out, int col) {
    for (int i = 0; i < N_FLAGS; i++) {
        char head[64];
        snprintf(head, sizeof head, "%s %s", flags[i].flag, flags[i].value);
        /* The flag from column 2, its help from col (on a line of its own if the flag reaches
         * col), continuation lines indented to col. */
        if ((int)strlen(head) + 3 > col)
            fprintf(out, "  %s\n%*s", head, col, "");
        else
            fprintf(out, "  %-*s", col - 2, head);
        for (const char *line = flags[i].help;;) {
            const char *nl = strchr(line, '\n');
            int n = nl ? (int)(nl - line) : (int)strlen(line);
            fprintf(out, "%.*s\n", n, line);
            if (!nl) break;
            line = nl + 1;
            fprintf(out, "%*s", col, "");
        }
    }
}
