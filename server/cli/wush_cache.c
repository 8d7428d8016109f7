/* The WUSH-KV sidecar cache (see wush_cache.h): the directory from the environment, the file name
 * from the model's fingerprint and the calibration's parameters, the check of a cached file
 * without a device, and the calibration from the built-in text on a miss. */
#include "cli/wush_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/calib_run.h"
#include "cli/cli_common.h"
#include "metrics/mono_clock.h"
#include "wushkv/research.h"

/* The calibration text, embedded at build time from cli/calib_shakespeare.txt (embed_file.py):
 * public-domain Shakespeare, never the evaluation text. */
extern const char calib_text[];
extern const size_t calib_text_len;
#define CALIB_TEXT_NAME "built-in tinyshakespeare excerpt"

bool wush_cache_dir(char *buf, size_t cap, char *err, size_t errlen) {
    const char *dir = getenv("WUSHKV_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (dir && *dir)
        n = snprintf(buf, cap, "%s", dir);
    else if (xdg && *xdg)
        n = snprintf(buf, cap, "%s/wushkv", xdg);
    else if (home && *home)
        n = snprintf(buf, cap, "%s/.cache/wushkv", home);
    else {
        snprintf(err, errlen, "no cache directory: set WUSHKV_CACHE_DIR (or HOME), or pass --wush FILE");
        return false;
    }
    if (n < 0 || (size_t)n >= cap) {
        snprintf(err, errlen, "the cache directory's path is too long");
        return false;
    }
    return true;
}

/* mkdir -p: each missing component of path, mode 0755. */
static bool make_dirs(const char *path, char *err, size_t errlen) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create the cache directory %.300s: %s", buf, strerror(errno));
            return false;
        }
        if (!c) return true;
        *p = c;
    }
}

/* Opens an f16 engine of the model, calibrates into tmp, closes it. 0 or -1 (printed). */
static int calibrate(const char *cmd, const wk_engine_params *p, int tokens, const wush_cache_hooks *hooks,
                     const char *tmp) {
    wk_engine_params cp = *p;
    cp.kv_bits = 16; /* the calibrator captures the f16 cache's keys and values */
    cp.kv_transform = WK_KV_TRANSFORM_NONE;
    cp.wush_path = NULL;
    cp.kv_sink = cp.kv_recent = 0;
    cp.kv_swa_windows = false;
    cp.kv_swa_bits = 0; /* f16 has one format for every layer */
    cp.kv_clip = 0;     /* ... and no quantizer step */
    cp.kv_mem = 0;
    cp.max_ctx = cp.max_batch_tokens = WUSH_CACHE_CHUNK; /* a chunk is one capture step */
    cp.max_seqs = 1;
    cp.skip_warmup = true; /* the chunks run every pipeline the calibration needs */
    cp.release_model_file = false; /* the calibrator reads W_o from the file (serve releases its own engine's) */
    wk_engine *e = cli_engine_open(cmd, &cp);
    if (!e) return -1;
    calib_run_opts o;
    calib_run_opts_default(&o);
    o.tokens = tokens;
    o.chunk = WUSH_CACHE_CHUNK;
    o.group = p->kv_group ? p->kv_group : 32;
    o.text_name = CALIB_TEXT_NAME;
    if (hooks) {
        o.cancelled = hooks->cancelled;
        o.cancel_data = hooks->data;
    }
    int rc = calib_run(cmd, e, calib_text, calib_text_len, &o, tmp);
    wk_engine_close(e);
    return rc;
}

/* Calibration tokens: WUSHKV_CALIB_TOKENS (64 .. 2^24) or WUSH_CACHE_TOKENS. 0 after a message. */
static int calib_tokens(const char *cmd) {
    const char *v = getenv("WUSHKV_CALIB_TOKENS");
    if (!v || !*v) return WUSH_CACHE_TOKENS;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 64 || n > 1L << 24) {
        fprintf(stderr, "wushkv %s: WUSHKV_CALIB_TOKENS='%s' is not a token count in 64 .. 16777216\n", cmd, v);
        return 0;
    }
    return (int)n;
}

int wush_cache_prepare(const char *cmd, wk_engine_params *p, char *path_buf, size_t cap,
                       const wush_cache_hooks *hooks) {
    if (p->kv_transform != WK_KV_TRANSFORM_WUSH || p->wush_path) return 0;
    const int tokens = calib_tokens(cmd);
    if (!tokens) return -1;
    char err[WK_ERRMSG_LEN] = "", dir[4096], fp[WK_MODEL_FINGERPRINT_LEN];
    int st = wk_model_fingerprint_file(p->model_path, fp, err, sizeof err);
    if (st < 0) {
        fprintf(stderr, "wushkv %s: cannot open %s: %s\n", cmd, p->model_path, err);
        return -1;
    }
    if (!wush_cache_dir(dir, sizeof dir, err, sizeof err)) {
        fprintf(stderr, "wushkv %s: %s\n", cmd, err);
        return -1;
    }
    /* "fnv1a64:0123..." -> "fnv1a64-0123...": the name holds everything the file depends on. */
    for (char *c = fp; *c; c++)
        if (*c == ':') *c = '-';
    const int group = p->kv_group ? p->kv_group : 32;
    int n = snprintf(path_buf, cap, "%s/%s.g%d.t%d.wush", dir, fp, group, tokens);
    if (n < 0 || (size_t)n >= cap) {
        fprintf(stderr, "wushkv %s: the cache directory's path is too long\n", cmd);
        return -1;
    }

    int block = 0;
    if (access(path_buf, F_OK) == 0) {
        st = wk_wush_sidecar_check_file(p->model_path, path_buf, &block, err, sizeof err);
        /* The default's wide keys rank layers by the sidecar's predicted key error: one made
         * before it existed is remade. */
        const bool stale = st == WK_OK && block == group && p->kv_wide_keys_auto && !wk_wush_sidecar_has_key_err(path_buf);
        if (stale) snprintf(err, sizeof err, "it has no predicted key error per layer (made before wide keys)");
        if (st == WK_OK && block == group && !stale) {
            fprintf(stderr, "wushkv %s: WUSH-KV sidecar %s (cached)\n", cmd, path_buf);
            p->wush_path = path_buf;
            return 0;
        }
        if (st == WK_OK && !stale) snprintf(err, sizeof err, "its block size is %d, not %d", block, group);
        fprintf(stderr, "wushkv %s: refusing the cached WUSH-KV sidecar %s: %s; calibrating a new one\n", cmd,
                path_buf, err);
    } else {
        fprintf(stderr, "wushkv %s: no WUSH-KV sidecar for this model in %s: calibrating one from the built-in text "
                "(%d tokens; once per model, minutes on a CPU)\n", cmd, dir, tokens);
    }
    if (!make_dirs(dir, err, sizeof err)) {
        fprintf(stderr, "wushkv %s: %s (or pass --wush FILE, or --kv f16)\n", cmd, err);
        return -1;
    }
    if (hooks && hooks->calibrating) hooks->calibrating(hooks->data);
    /* A name of this process's own, renamed over the final one when whole: another process
     * calibrating the same model at once, or a crash, never leaves a half file under the name. */
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path_buf, (long)getpid());
    double t0 = mono_now_s();
    if (calibrate(cmd, p, tokens, hooks, tmp) < 0) {
        remove(tmp);
        return -1;
    }
    if (rename(tmp, path_buf) != 0) {
        fprintf(stderr, "wushkv %s: cannot rename %s to %s: %s\n", cmd, tmp, path_buf, strerror(errno));
        remove(tmp);
        return -1;
    }
    fprintf(stderr, "wushkv %s: calibrated in %.1f s; cached WUSH-KV sidecar %s\n", cmd, mono_now_s() - t0, path_buf);
    p->wush_path = path_buf;
    return 0;
}
