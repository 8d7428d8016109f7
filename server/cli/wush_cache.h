/* The WUSH-KV sidecar cache: when a command runs the WUSH transform without --wush FILE (the
 * default format), the model's sidecar is looked up in the user's cache directory by the model's
 * fingerprint and the calibration's parameters, and made there from the calibration text built
 * into the binary when it is missing, corrupt or another model's. Used by serve (on its engine
 * thread, while /health says "calibrating"), generate, perplexity and bench. */
#ifndef WUSHKV_WUSH_CACHE_H
#define WUSHKV_WUSH_CACHE_H

#include <stdbool.h>
#include <stddef.h>

#include "wushkv/wushkv.h"

/* The calibration a cached sidecar is made with: WUSH_CACHE_TOKENS tokens of the built-in text
 * ($WUSHKV_CALIB_TOKENS overrides; the count is part of the file name) in chunks of WUSH_CACHE_CHUNK, block = the format's --kv-group, value weighting "mass" (as
 * docs/wush-kv.md's measured sidecar). */
#define WUSH_CACHE_TOKENS 4096
#define WUSH_CACHE_CHUNK 512

/* The cache directory: $WUSHKV_CACHE_DIR, else $XDG_CACHE_HOME/wushkv, else $HOME/.cache/wushkv
 * (not created). False with a message in err when none can be named or it does not fit. */
bool wush_cache_dir(char *buf, size_t cap, char *err, size_t errlen);

/* What a caller hears of a calibration (any may be NULL): calibrating(data) once before it starts
 * (serve: /health turns to "calibrating"); cancelled(data) before each chunk, true to stop it
 * (serve: SIGINT/SIGTERM). */
typedef struct wush_cache_hooks {
    void (*calibrating)(void *data);
    bool (*cancelled)(void *data);
    void *data;
} wush_cache_hooks;

/* When p asks for the WUSH transform without a sidecar (kv_transform WUSH, wush_path NULL), finds
 * this model's sidecar in the cache or makes it (progress on stderr; written via a temporary file
 * and rename) and points p->wush_path at path_buf (which must outlive p's use). A cached file that
 * is unreadable or another model's is reported on stderr, made again and replaced. Otherwise p is
 * left alone. p->model_path must be set. 0, or -1 after printing "wushkv CMD: ..." on stderr. */
int wush_cache_prepare(const char *cmd, wk_engine_params *p, char *path_buf, size_t cap,
                       const wush_cache_hooks *hooks);

#endif
