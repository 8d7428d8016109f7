/* One WUSH-KV calibration run on an open engine: tokenize a text's prefix, feed it in chunks with
 * a progress bar on stderr, write the sidecar. The loop both `wushkv calibrate` and the sidecar
 * cache (wush_cache.c) run, so a cached sidecar is made exactly as the command makes one. */
#ifndef WUSHKV_CALIB_RUN_H
#define WUSHKV_CALIB_RUN_H

#include <stdbool.h>
#include <stddef.h>

#include "wushkv/research.h"

typedef struct calib_run_opts {
    int tokens;                   /* tokens to evaluate, BOS included */
    int chunk;                    /* tokens per chunk (the engine's max_batch_tokens and max_ctx) */
    int group;                    /* transform block */
    wk_calib_v_moments v_moments;
    int threads;                  /* 0: all CPUs */
    const char *text_name;        /* recorded in the sidecar */
    bool print_report;            /* the per-head gains table on stdout */
    bool (*cancelled)(void *data); /* asked before each chunk; true stops the run (NULL: never) */
    void *cancel_data;
} calib_run_opts;

/* Tokens `wushkv calibrate` reads by default. */
#define CALIB_DEFAULT_TOKENS 8192

/* The defaults of `wushkv calibrate` (CALIB_DEFAULT_TOKENS tokens in chunks of 512, group 32, mass). */
void calib_run_opts_default(calib_run_opts *o);
/* Calibrates on e (opened with max_ctx = max_batch_tokens = o->chunk and the f16 cache) from
 * text[0..len) and writes the sidecar to out (via a temporary file and rename). 0, or -1 after
 * printing "wushkv CMD: ..." on stderr (also when o->cancelled stopped it: nothing written). */
int calib_run(const char *cmd, wk_engine *e, const char *text, size_t len, const calib_run_opts *o, const char *out);

#endif
