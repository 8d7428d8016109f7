/* What the model-running command front-ends share (generate, perplexity, calibrate, bench, serve):
 * the common flags -m/--model, -f/--file, --device, --threads, --json, --validation, -v/--verbose
 * with one set of ranges and messages; finding the model; opening the engine; tokenizing a whole
 * text; the clock they time with; printing their --json object. */
#ifndef WUSHKV_CLI_COMMON_H
#define WUSHKV_CLI_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli/cli_args.h"
#include "wushkv/wushkv.h"

/* The common flags, one bit each: a command names those it takes, so any other stays an unknown
 * option for it. */
enum {
    CLI_MODEL = 1u << 0,      /* -m, --model FILE */
    CLI_FILE = 1u << 1,       /* -f, --file TEXT ('-': stdin) */
    CLI_DEVICE = 1u << 2,     /* --device N */
    CLI_THREADS = 1u << 3,    /* --threads N */
    CLI_JSON = 1u << 4,       /* --json */
    CLI_VALIDATION = 1u << 5, /* --validation */
    CLI_VERBOSE = 1u << 6,    /* -v, --verbose */
};

typedef struct cli_common {
    unsigned takes;     /* the CLI_* flags the command accepts */
    const char *model;  /* NULL: cli_default_model_path (see cli_model_path) */
    const char *file;   /* NULL: not given */
    int device;         /* -1: automatic / $WUSHKV_DEVICE (cli_engine_env) */
    int threads;        /* 0: all CPUs */
    bool json, validation, verbose;
} cli_common;

/* Nothing given: no model or file, device -1, threads 0, switches off. */
void cli_common_init(cli_common *f, unsigned takes);
/* The CLI_* bit of the current option when it is a common flag the command takes, else 0. */
unsigned cli_common_is(const cli *c, const cli_common *f);
/* Parses the current option (one cli_common_is accepts) into f; false after printing the error. */
bool cli_common_parse(cli *c, cli_common *f);
/* Copies the model, device, validation and verbose into engine params (the others are left alone). */
void cli_common_apply(const cli_common *f, wk_engine_params *p);
/* The engine settings the environment gives every model-running command (the engine library
 * reads no environment): WUSHKV_DEVICE (a device index, used when p->device_index < 0, i.e. no
 * --device), WUSHKV_VALIDATION=1 (validation on), WUSHKV_PROFILE=1 (profile on), WUSHKV_KERNELS
 * (cli_kernels_parse) and LP_NUM_THREADS (host_threads, when p's is 0 and it is 1..256). WK_OK, or
 * WK_ERR_INVALID with a message in err for a WUSHKV_DEVICE that is not a number >= 0 or an unknown
 * WUSHKV_KERNELS set (p may then hold the others). */
int cli_engine_env(wk_engine_params *p, char *err, size_t errlen);
/* A kernel spec as WUSHKV_KERNELS spells it ("cpu|gpu|auto[,name=value...]" or "name=value[,...]")
 * into p->kernels and p->kernel_variants (a pointer into spec, "" for none; the engine checks them):
 * WK_OK, or WK_ERR_INVALID for an unknown set (p unchanged). WUSHKV_KERNELS applies (in
 * cli_engine_env) only where p->kernels is auto and p->kernel_variants NULL. */
int cli_kernels_parse(const char *spec, wk_engine_params *p);

/* model, or when it is NULL the default (cli_default_model_path) written to buf. NULL after
 * printing "wushkv CMD: reason". */
const char *cli_model_path(const char *cmd, const char *model, char *buf, size_t cap);
/* wk_engine_open of p with cli_engine_env applied, or NULL after printing "wushkv CMD: cannot open
 * MODEL: reason". */
wk_engine *cli_engine_open(const char *cmd, const wk_engine_params *p);
/* All the tokens of text[0..len) (wk_tokenize's add_special and parse_special), their count in
 * *n_out. NULL after printing "wushkv CMD: ...". The caller frees. */
int32_t *cli_tokenize(const char *cmd, const wk_engine *e, const char *text, size_t len, bool add_special,
                      bool parse_special, int *n_out);

/* Prints obj on one line of stdout, flushed, and deletes it. 1 when it cannot be printed (obj NULL
 * included), else 0. */
struct cJSON;
int cli_print_json(struct cJSON *obj);

#endif
