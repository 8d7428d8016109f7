/* The flags and steps every model-running command shares (see cli_common.h), in one place so that
 * a range, a default or a message cannot drift apart between generate, perplexity, calibrate,
 * bench and serve. */
#include "cli/cli_common.h"
#include "cli/default_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

void cli_common_init(cli_common *f, unsigned takes) {
    memset(f, 0, sizeof *f);
    f->takes = takes;
    f->device = -1;
}

unsigned cli_common_is(const cli *c, const cli_common *f) {
    static const struct {
        unsigned bit;
        const char *short_name, *long_name;
    } names[] = {
        {CLI_MODEL, "-m", "--model"},
        {CLI_FILE, "-f", "--file"},
        {CLI_DEVICE, NULL, "--device"},
        {CLI_THREADS, NULL, "--threads"},
        {CLI_JSON, NULL, "--json"},
        {CLI_VALIDATION, NULL, "--validation"},
        {CLI_VERBOSE, "-v", "--verbose"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((f->takes & names[i].bit) && cli_is(c, names[i].short_name, names[i].long_name)) return names[i].bit;
    return 0;
}

bool cli_common_parse(cli *c, cli_common *f) {
    bool *on = NULL; /* the switch the option sets */
    switch (cli_common_is(c, f)) {
    case CLI_MODEL:
        return cli_str(c, &f->model);
    case CLI_FILE:
        return cli_str(c, &f->file);
    case CLI_DEVICE:
        return cli_int(c, 0, 1024, &f->device);
    case CLI_THREADS:
        return cli_int(c, 1, 1024, &f->threads);
    case CLI_JSON:
        on = &f->json;
        break;
    case CLI_VALIDATION:
        on = &f->validation;
        break;
    case CLI_VERBOSE:
        on = &f->verbose;
        break;
    default:
        cli_unknown(c);
        return false;
    }
    *on = true;
    return cli_switch(c);
}

void cli_common_apply(const cli_common *f, wk_engine_params *p) {
    p->model_path = f->model;
    p->device_index = f->device;
    p->validation = f->validation;
    p->verbose = f->verbose;
}

int cli_kernels_parse(const char *spec, wk_engine_params *p) {
    /* The set, then name=value variants; a leading name=value keeps auto. */
    const size_t set_len = strcspn(spec, ",");
    const bool no_set = memchr(spec, '=', set_len) != NULL;
    if (no_set) p->kernels = WK_KERNELS_AUTO;
    else if (set_len == 3 && strncmp(spec, "cpu", 3) == 0) p->kernels = WK_KERNELS_CPU;
    else if (set_len == 3 && strncmp(spec, "gpu", 3) == 0) p->kernels = WK_KERNELS_GPU;
    else if (set_len == 4 && strncmp(spec, "auto", 4) == 0) p->kernels = WK_KERNELS_AUTO;
    else return WK_ERR_INVALID;
    /* Never NULL once parsed ("" for none), so the environment's spec cannot replace this one. */
    p->kernel_variants = no_set ? spec : spec + set_len + (spec[set_len] ? 1 : 0);
    return WK_OK;
}

int cli_engine_env(wk_engine_params *p, char *err, size_t errlen) {
    const char *device = getenv("WUSHKV_DEVICE");
    if (p->device_index < 0 && device && *device) {
        char *end;
        long v = strtol(device, &end, 10);
        if (*end || v < 0) {
            snprintf(err, errlen, "WUSHKV_DEVICE='%s' is not a device index", device);
            return WK_ERR_INVALID;
        }
        p->device_index = (int)v;
    }
    const char *validation = getenv("WUSHKV_VALIDATION");
    if (validation && strcmp(validation, "1") == 0) p->validation = true;
    if (validation && strcmp(validation, "sync") == 0) p->validation = p->validation_sync = true; /* + hazards */
    /* The host's output head takes as many threads as lavapipe's own when LP_NUM_THREADS says how
     * many (a value lavapipe ignores leaves the default: every CPU allowed). */
    const char *lp = getenv("LP_NUM_THREADS");
    if (lp && p->host_threads == 0) {
        char *end;
        long n = strtol(lp, &end, 10);
        if (*lp && !*end && n >= 1 && n <= 256) p->host_threads = (int)n;
    }
    const char *profile = getenv("WUSHKV_PROFILE");
    if (profile && strcmp(profile, "1") == 0) p->profile = true;
    /* WUSHKV_KERNELS=SET[,name=value...]: the set, then single variants forced on top of it (the
     * engine checks those: wk_engine_params.kernel_variants). Not where the caller chose its own
     * (wushkv bench --vs-kernels). */
    const char *kernels = getenv("WUSHKV_KERNELS");
    if (kernels && *kernels && p->kernels == WK_KERNELS_AUTO && !p->kernel_variants) {
        int st = cli_kernels_parse(kernels, p);
        if (st) return snprintf(err, errlen, "WUSHKV_KERNELS='%s': expected cpu, gpu or auto, then any name=value "
                                "variants (docs/engine.md \"Kernel sets\")", kernels), st;
    }
    return WK_OK;
}

const char *cli_model_path(const char *cmd, const char *model, char *buf, size_t cap) {
    if (model) return model;
    char err[WK_ERRMSG_LEN] = "";
    if (!cli_default_model_path(buf, cap, err, sizeof err)) {
        fprintf(stderr, "wushkv %s: %s\n", cmd, err);
        return NULL;
    }
    return buf;
}

wk_engine *cli_engine_open(const char *cmd, const wk_engine_params *p) {
    char err[WK_ERRMSG_LEN] = "";
    wk_engine *e = NULL;
    wk_engine_params with_env = *p;
    int st = cli_engine_env(&with_env, err, sizeof err);
    if (st == WK_OK) st = wk_engine_open(&with_env, &e, err, sizeof err);
    if (st < 0) {
        fprintf(stderr, "wushkv %s: cannot open %s: %s%s%s\n", cmd, p->model_path, wk_strerror(st), err[0] ? ": " : "",
                err);
        return NULL;
    }
    return e;
}

int32_t *cli_tokenize(const char *cmd, const wk_engine *e, const char *text, size_t len, bool add_special,
                      bool parse_special, int *n_out) {
    int32_t *toks = NULL;
    int n = wk_tokenize_alloc(e, text, len, add_special, parse_special, &toks);
    if (n < 0) {
        fprintf(stderr, "wushkv %s: tokenization failed: %s\n", cmd,
                len > (size_t)INT32_MAX - 16 ? "the text is too long to tokenize at once" : wk_strerror(n));
        return NULL;
    }
    *n_out = n;
    return toks;
}

int cli_print_json(cJSON *obj) {
    char *s = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!s) return 1;
    printf("%s\n", s);
    fflush(stdout); /* a script reading the pipe gets the line now, not at exit */
    cJSON_free(s);
    return 0;
}
