/* The KV-cache flags every model-running command shares (serve, generate, perplexity, bench): --kv,
 * --kv-quant, --kv-group, --kv-mem, --kv-transform, --wush, --kv-sink, --kv-recent, --kv-rho-k,
 * --kv-rho-v, --kv-clip, --kv-swa, --kv-swa-sink, --kv-swa-recent, --kv-wide-keys. One parser, one set of defaults and messages, one help text. */
#ifndef WUSHKV_KV_FLAGS_H
#define WUSHKV_KV_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/cli_args.h"
#include "wushkv/wushkv.h"

typedef struct kv_flags {
    /* The values, as wk_engine_params takes them (kv_flags_apply copies them there). */
    int bits;              /* 16: f16, 2, 3, 4: packed codes; every format in the paged pool */
    wk_kv_quant quant;
    int group;             /* elements per quantization group (and Hadamard block) */
    uint64_t mem;          /* pool bytes; 0: the engine's default */
    wk_kv_transform transform;
    const char *wush_path; /* the `wushkv calibrate` sidecar; NULL: none */
    int sink, recent;      /* f16 windows of a quantized cache, in tokens (0: off) */
    float rho_k, rho_v;    /* percentile clip quantiles; 0: the engine's (0.96, 0.92) */
    float clip;            /* QuEST's clip of the main width; 0: none (1) */
    int swa_bits;          /* --kv-swa: 2, 3, 4 for the sliding-window layers; 0: as bits */
    /* --kv-swa-sink / --kv-swa-recent: the sliding-window layers' own f16 windows (swa_windows;
     * the one not given is as --kv-sink / --kv-recent); without either they keep sink / recent. */
    bool swa_windows;
    int swa_sink, swa_recent;
    /* --kv-wide-keys: the layers whose keys take key_bits (bit il % 64 of word il / 64), as
     * wk_engine_params; key_bits 0 until kv_flags_finish (then --kv's width + 1 unless named). */
    uint64_t wide_keys[4];
    int key_bits;
    bool wide_keys_given;
    /* The default's wide keys: the engine chooses the layers (wk_engine_params.kv_wide_keys_auto). */
    bool wide_keys_auto;
    /* What kv_flags_finish's defaults and checks depend on. */
    bool bits_given, group_given, quant_given, clip_given, transform_given, sink_given, recent_given, swa_bits_given, swa_sink_given,
        swa_recent_given;
    /* No per-class flag was given: the sliding layers' width and windows are the default's (the
     * engine says nothing when the model has no sliding layers). */
    bool swa_default;
    const char *quantized_only;  /* the last flag given that only an int2/3/4 cache takes */
    const char *percentile_only; /* the last of --kv-rho-k / --kv-rho-v given */
    const char *quest_only;      /* --kv-clip, when given */
} kv_flags;

/* The defaults (one place: kv_flags.c's KV_DEFAULT_*): int2, quest, the WUSH transform with no
 * sidecar path (wush_cache.c finds or makes it), sink 16, recent 128; the group (128, or 32 for a
 * format named by --kv or --wush), the clip (1.2 while none of --kv, --wush, --kv-quant, --kv-clip
 * is given) and the sliding-window layers' part (KV_DEFAULT_SWA_*: int4,
 * sink 0, recent 32) are applied by kv_flags_finish, where they depend on the flags, and the group
 * fitted to the model by kv_flags_fit_model. */
void kv_flags_init(kv_flags *f);
/* The current option's value as --kv's (f16, int2, int3, int4) into f: what `--kv FMT` sets (bench's
 * --vs-kv parses its value so). False after printing the error. */
bool kv_flags_parse_format(cli *c, kv_flags *f);
/* --kv's name of f->bits: "f16", "int2", "int3", "int4". */
const char *kv_flags_format_name(const kv_flags *f);
/* Whether the current option is one of the KV flags. */
bool kv_flags_is(const cli *c);
/* Parses the current option (one kv_flags_is accepts) into f; false after printing the error. */
bool kv_flags_parse(cli *c, kv_flags *f);
/* After the last option: applies the defaults that depend on other flags (--kv f16 drops the
 * default transform and windows; --wush without --kv-transform means wush) and refuses flags the
 * chosen format does not take. Transform wush without --wush leaves wush_path NULL: the caller
 * finds or makes the sidecar (wush_cache_prepare). False after printing the error (a
 * command-line mistake: exit CLI_EXIT_USAGE). */
bool kv_flags_finish(const cli *c, kv_flags *f);
/* After kv_flags_finish, once the model file is known: the default's group (128 while no --kv,
 * --kv-group or --wush is given) halved until it divides the model's head_dim (Phi-3's 96 takes 32,
 * a head_dim of 64 takes 64). A model file that cannot be read is left to wk_engine_open. */
void kv_flags_fit_model(kv_flags *f, const char *model_path);
/* Copies the KV fields into engine params (the others are left alone). */
void kv_flags_apply(const kv_flags *f, wk_engine_params *p);
/* "f16", "f16 wush", "int2 quest G128 clip1.2 wush sink16 recent104 swa:int4 keys:int3@11 swa:sink0:recent32",
 * "int3 percentile G32 rho_k0.9" ... for logs and --json. info: the open engine's, which names the
 * wide keys' layers when the engine chose them (NULL before it opens: "keys:int3@auto"). Returns buf. */
const char *kv_flags_describe(const kv_flags *f, const wk_model_info *info, char *buf, size_t cap);
/* The flags' help lines, descriptions starting at column `col` as the command's other flags. */
void kv_flags_usage(FILE *out, int col);

#endif
