/* `wushkv perplexity --layer-error`: runs wk_kv_layer_error for one or more KV formats on the first
 * window of the text and prints, per format, a table (layer, swa?, rel MSE after and before W_o,
 * the mean over layers) or one JSON object per line. */
#include "cli/layer_error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/cli_common.h"
#include "metrics/mono_clock.h"

static const char *const quant_names[] = {"quest", "percentile", "absmax"}; /* wk_kv_quant order */
static const char *const transform_names[] = {"none", "hadamard", "wush"};  /* wk_kv_transform order */

/* The names of a format's quantizer and transform; the first name for a value out of range. */
static const char *quant_name(wk_kv_quant q) { return quant_names[(unsigned)q <= WK_KV_QUANT_ABSMAX ? q : 0]; }
static const char *transform_name(wk_kv_transform t) {
    return transform_names[(unsigned)t <= WK_KV_TRANSFORM_WUSH ? t : 0];
}

void layer_error_format_from_flags(const wk_engine_params *kv, wk_kv_error_format *f) {
    *f = (wk_kv_error_format){.bits = kv->kv_bits == 0 ? 16 : kv->kv_bits,
                              .quant = kv->kv_quant,
                              .group = kv->kv_group,
                              .rho_k = kv->kv_rho_k,
                              .rho_v = kv->kv_rho_v,
                              .transform = kv->kv_transform,
                              .wush_path = kv->wush_path,
                              .transform_seed = kv->kv_transform_seed,
                              .sink = kv->kv_sink,
                              .recent = kv->kv_recent,
                              .swa_windows = kv->kv_swa_windows,
                              .swa_sink = kv->kv_swa_sink,
                              .swa_recent = kv->kv_swa_recent,
                              .swa_bits = kv->kv_swa_bits,
                              .clip = kv->kv_clip,
                              .key_bits = kv->kv_key_bits,
                              .wide_keys = {kv->kv_wide_keys[0], kv->kv_wide_keys[1], kv->kv_wide_keys[2],
                                            kv->kv_wide_keys[3]},
                              .wide_keys_auto = kv->kv_wide_keys_auto};
}

static int lookup(const char *s, size_t len, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && strncmp(s, names[i], len) == 0) return i;
    return -1;
}

/* A window size: digits only, 0 .. 2^20. */
static bool parse_window(const char *s, size_t len, int *out) {
    if (len == 0 || len > 7) return false;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v > 1 << 20) return false;
    *out = (int)v;
    return true;
}

int layer_error_parse_formats(const char *list, const wk_engine_params *kv, wk_kv_error_format *out, int cap,
                              char *err, size_t errlen) {
    static const char *const bits_names[] = {"f16", "int2", "int3", "int4"};
    static const int bits_of[] = {16, 2, 3, 4};
    int n = 0;
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        if (n == cap) return snprintf(err, errlen, "more than %d formats", cap), -1;
        wk_kv_error_format f;
        layer_error_format_from_flags(kv, &f);
        const char *field = p;
        for (int k = 0; field <= end; k++) {
            const char *colon = memchr(field, ':', (size_t)(end - field));
            const char *fe = colon ? colon : end;
            const size_t len = (size_t)(fe - field);
            int v = 0;
            bool ok = true;
            if (k == 0) ok = (v = lookup(field, len, bits_names, 4)) >= 0 && (f.bits = bits_of[v], true);
            else if (len == 0 && k < 7) ok = true; /* empty: from the flags */
            else if (k == 1) ok = (v = lookup(field, len, quant_names, 3)) >= 0 && (f.quant = (wk_kv_quant)v, true);
            else if (k == 2) ok = (v = lookup(field, len, transform_names, 3)) >= 0 &&
                                  (f.transform = (wk_kv_transform)v, true);
            else if (k == 3) ok = parse_window(field, len, &f.sink);
            else if (k == 4) ok = parse_window(field, len, &f.recent);
            /* The sliding layers' own windows; the other of the pair stays as it was. */
            else if (k == 5) ok = parse_window(field, len, &f.swa_sink) && (f.swa_windows = true);
            else if (k == 6) ok = parse_window(field, len, &f.swa_recent) && (f.swa_windows = true);
            else ok = false;
            if (!ok)
                return snprintf(err, errlen, "format '%.*s': expected FMT[:QUANT[:TRANSFORM[:SINK[:RECENT[:SWA_SINK"
                                "[:SWA_RECENT]]]]]] with FMT f16/int2/int3/int4, QUANT quest/percentile/absmax, "
                                "TRANSFORM none/hadamard/wush, windows 0..1048576", (int)(end - p), p), -1;
            if (!colon) break;
            field = colon + 1;
        }
        /* The flags' QuEST clip (the default's 1.2, or --kv-clip) goes with QuEST: an entry that
         * names another quantizer takes that quantizer's own rule rather than a refusal. */
        if (f.quant != WK_KV_QUANT_QUEST) f.clip = 0;
        out[n++] = f;
        if (!*end) return n;
        p = end + 1;
    }
}

/* "int2 quest g32 wush", "f16 hadamard", then " sink S recent R" when a window is on. */
static void describe(const wk_kv_error_format *f, char *buf, size_t cap) {
    const char *t = transform_name(f->transform);
    int len;
    if (f->bits == 16 || f->bits == 0) len = snprintf(buf, cap, "f16 %s", t);
    else
        len = snprintf(buf, cap, "int%d %s g%d %s", f->bits, quant_name(f->quant), f->group ? f->group : 32, t);
    if ((f->sink || f->recent) && len > 0 && (size_t)len < cap)
        len += snprintf(buf + len, cap - (size_t)len, " sink %d recent %d", f->sink, f->recent);
    if (f->swa_windows && (f->swa_sink != f->sink || f->swa_recent != f->recent) && len > 0 && (size_t)len < cap)
        len += snprintf(buf + len, cap - (size_t)len, " swa sink %d recent %d", f->swa_sink, f->swa_recent);
    if (f->bits != 16 && f->bits != 0 && f->swa_bits && f->swa_bits != f->bits && len > 0 && (size_t)len < cap)
        len += snprintf(buf + len, cap - (size_t)len, " swa int%d", f->swa_bits);
    if (f->bits != 16 && f->bits != 0 && f->key_bits && len > 0 && (size_t)len < cap)
        len += snprintf(buf + len, cap - (size_t)len, " keys int%d%s", f->key_bits, f->wide_keys_auto ? " (the engine's layers)" : "");
    if (f->bits != 16 && f->bits != 0 && f->clip != 0.0f && f->clip != 1.0f && len > 0 && (size_t)len < cap)
        snprintf(buf + len, cap - (size_t)len, " clip %g", (double)f->clip);
}

static void print_json(const wk_kv_error_format *f, const wk_kv_error_layer *r, int L, int ctx, double mean,
                       double mean_attn) {
    char name[128];
    describe(f, name, sizeof name);
    cJSON *obj = cJSON_CreateObject(), *layers = cJSON_CreateArray();
    if (!obj || !layers) return;
    cJSON_AddStringToObject(obj, "format", name);
    cJSON_AddNumberToObject(obj, "bits", f->bits == 0 ? 16 : f->bits);
    cJSON_AddStringToObject(obj, "quant", quant_name(f->quant));
    cJSON_AddStringToObject(obj, "transform", transform_name(f->transform));
    cJSON_AddNumberToObject(obj, "group", f->group ? f->group : 32);
    cJSON_AddNumberToObject(obj, "sink", f->sink);
    cJSON_AddNumberToObject(obj, "recent", f->recent);
    cJSON_AddNumberToObject(obj, "swa_sink", f->swa_windows ? f->swa_sink : f->sink);
    cJSON_AddNumberToObject(obj, "swa_recent", f->swa_windows ? f->swa_recent : f->recent);
    cJSON_AddNumberToObject(obj, "swa_bits", f->swa_bits && f->bits != 16 && f->bits != 0 ? f->swa_bits : f->bits == 0 ? 16 : f->bits);
    cJSON_AddNumberToObject(obj, "clip", f->clip == 0.0f || f->bits == 16 || f->bits == 0 ? 1.0 : (double)f->clip);
    cJSON_AddNumberToObject(obj, "ctx", ctx);
    for (int il = 0; il < L; il++) {
        cJSON *l = cJSON_CreateObject();
        if (!l) break;
        cJSON_AddNumberToObject(l, "layer", r[il].layer);
        cJSON_AddBoolToObject(l, "swa", r[il].swa);
        cJSON_AddNumberToObject(l, "rel_mse", r[il].rel_mse);
        cJSON_AddNumberToObject(l, "rel_mse_attn", r[il].rel_mse_attn);
        cJSON_AddItemToArray(layers, l);
    }
    cJSON_AddItemToObject(obj, "layers", layers);
    cJSON_AddNumberToObject(obj, "mean_rel_mse", mean);
    cJSON_AddNumberToObject(obj, "mean_rel_mse_attn", mean_attn);
    cli_print_json(obj);
}

int layer_error_run(wk_engine *e, const layer_error_opts *o, const int32_t *tokens, int n_tokens) {
    const wk_model_info *info = wk_engine_info(e);
    const int L = info->n_layer, n = o->ctx;
    if (n_tokens < n) {
        fprintf(stderr, "wushkv perplexity: %s has %d tokens; --layer-error needs --ctx = %d\n", o->file, n_tokens, n);
        return 1;
    }
    int32_t *window = malloc((size_t)n * sizeof *window);
    wk_kv_error_layer *r = malloc((size_t)o->n_formats * L * sizeof *r);
    if (!window || !r) {
        free(window), free(r);
        fprintf(stderr, "wushkv perplexity: out of memory\n");
        return 1;
    }
    memcpy(window, tokens, (size_t)n * sizeof *window);
    if (info->add_bos && info->bos >= 0) window[0] = info->bos; /* as perplexity evaluates a window */
    fprintf(stderr, "layer error: %d format%s on the first %d tokens\n", o->n_formats, o->n_formats == 1 ? "" : "s", n);
    char err[WK_ERRMSG_LEN] = "";
    const double t0 = mono_now_s();
    int rc = wk_kv_layer_error(e, window, n, o->formats, o->n_formats, o->threads, r, err, sizeof err);
    free(window);
    if (rc) {
        fprintf(stderr, "wushkv perplexity: layer error: %s%s%s\n", wk_strerror(rc), err[0] ? ": " : "", err);
        free(r);
        return 1;
    }
    fprintf(stderr, "layer error: %.1f s\n", mono_now_s() - t0);
    for (int k = 0; k < o->n_formats; k++) {
        const wk_kv_error_layer *rl = r + (size_t)k * L;
        double mean = 0, mean_attn = 0;
        for (int il = 0; il < L; il++) mean += rl[il].rel_mse / L, mean_attn += rl[il].rel_mse_attn / L;
        if (o->json) {
            print_json(&o->formats[k], rl, L, n, mean, mean_attn);
            continue;
        }
        char name[128];
        describe(&o->formats[k], name, sizeof name);
        printf("%s%s: relative MSE of each layer's attention output vs f16 KV, first %d tokens of %s\n",
               k ? "\n" : "", name, n, o->file);
        printf("layer  type     after W_o   before W_o\n");
        for (int il = 0; il < L; il++)
            printf("%5d  %-6s  %.4e   %.4e\n", rl[il].layer, rl[il].swa ? "swa" : "global", rl[il].rel_mse,
                   rl[il].rel_mse_attn);
        printf("mean           %.4e   %.4e\n", mean, mean_attn);
    }
    fflush(stdout);
    free(r);
    return 0;
}
