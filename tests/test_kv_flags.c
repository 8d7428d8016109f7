/* server/cli/kv_flags.c without a model: argv -> parse -> finish -> the engine params and the format
 * name that --json and the serve log print (sink and recent windows included, which the engine
 * cannot open yet). Messages and exit codes are test_cli.sh's. */
#include <string.h>

#include "cli/kv_flags.h"
#include "test_util.h"

/* Parses args (NULL-terminated, after the command name) into f; the result of finish, or false at
 * the first flag kv_flags does not take or refuses. */
static bool parse(const char *const *args, kv_flags *f) {
    char *argv[32] = {"test"};
    int argc = 1;
    for (; args[argc - 1] && argc < 32; argc++) argv[argc] = (char *)args[argc - 1];
    cli c;
    cli_init(&c, "test", argc, argv);
    kv_flags_init(f);
    while (cli_next(&c))
        if (!kv_flags_is(&c) || !kv_flags_parse(&c, f)) return false;
    return kv_flags_finish(&c, f);
}

/* The format name of args, "" when they are refused. */
static const char *describe(const char *const *args, char *buf, size_t cap) {
    kv_flags f;
    if (!parse(args, &f)) return "";
    return kv_flags_describe(&f, NULL, buf, cap);
}

#define CHECK_DESCRIBE(want, ...)                                                         \
    do {                                                                                  \
        char buf_[128];                                                                   \
        const char *got_ = describe((const char *const[]){__VA_ARGS__, NULL}, buf_, sizeof buf_); \
        CHECK(strcmp(got_, want) == 0);                                                   \
        if (strcmp(got_, want) != 0) fprintf(stderr, "  want '%s', got '%s'\n", want, got_); \
    } while (0)

static void test_describe(void) {
    /* No flags: THE default, int2 QuEST G128 after WUSH with f16 windows 16 / 128 in the
     * full-attention layers, int4 with windows 0 / 32 in the sliding-window ones. */
    CHECK_DESCRIBE("int2 quest G128 clip1.2 wush sink16 recent104 swa:int4 keys:int3@auto swa:sink0:recent32", NULL);
    /* --kv f16 opts out: the default transform and windows go with it. */
    CHECK_DESCRIBE("f16", "--kv", "f16");
    CHECK_DESCRIBE("f16", "--kv=int2", "--kv", "f16");                    /* the last one counts */
    /* Each explicit flag overrides its own part of the default only; naming the format (--kv, or
     * a --wush sidecar) takes the plain one: groups of 32, one width in every layer. */
    CHECK_DESCRIBE("int4 quest G32 wush sink16 recent104 swa:sink0:recent32", "--kv", "int4");
    CHECK_DESCRIBE("int2 quest G32 wush sink16 recent104 swa:sink0:recent32", "--kv", "int2");
    CHECK_DESCRIBE("int2 quest G128 clip1.2 sink16 recent104 swa:int4 swa:sink0:recent32", "--kv-transform", "none");
    /* A window flag replaces the default's windows, both classes: the sliding layers follow
     * --kv-sink / --kv-recent as they did before the default had a per-class part. */
    CHECK_DESCRIBE("int2 quest G128 clip1.2 wush recent104 swa:int4 keys:int3@auto", "--kv-sink", "0");
    CHECK_DESCRIBE("int2 quest G128 clip1.2 wush sink4 recent64 swa:int4 keys:int3@auto", "--kv-sink", "4", "--kv-recent", "64");
    CHECK_DESCRIBE("int2 quest G64 clip1.2 wush sink16 recent8 swa:int4 keys:int3@auto", "--kv-group", "64", "--kv-recent", "8");
    CHECK_DESCRIBE("int2 absmax G128 wush sink16 recent104 swa:int4 keys:int3@auto swa:sink0:recent32", "--kv-quant", "absmax");
    CHECK_DESCRIBE("int2 quest G32", "--kv", "int2", "--kv-transform", "none", "--kv-sink", "0", "--kv-recent", "0");
    CHECK_DESCRIBE("int2 quest G32 wush sink16 recent104 swa:sink0:recent32", "--wush", "s.wush");
    CHECK_DESCRIBE("f16 wush", "--wush", "s.wush", "--kv", "f16");        /* a sidecar keeps wush on f16 */
    CHECK_DESCRIBE("f16 wush", "--kv", "f16", "--kv-transform", "wush");  /* ... and so does naming it */
    CHECK_DESCRIBE("int4 quest G32 hadamard sink16 recent104 swa:sink0:recent32", "--kv-transform", "hadamard", "--wush",
                   "s", "--kv=int4");
    CHECK_DESCRIBE("f16 hadamard G64", "--kv", "f16", "--kv-transform", "hadamard", "--kv-group", "64");
    CHECK_DESCRIBE("int3 absmax G16 wush sink16 recent8", "--kv", "int3", "--kv-quant", "absmax", "--kv-group", "16",
                   "--kv-recent", "8");
    CHECK_DESCRIBE("int2 percentile G32 rho_k0.9 rho_v0.5 wush sink16 recent104 swa:sink0:recent32", "--kv", "int2", "--kv-quant",
                   "percentile", "--kv-rho-k", "0.9", "--kv-rho-v=0.5");
    /* Refused: "" (the message goes to stderr). A flag only a quantized cache takes, given with
     * --kv f16, is refused even though the default would have taken it. */
    CHECK_DESCRIBE("", "--kv", "f16", "--kv-sink", "4");
    CHECK_DESCRIBE("", "--kv-recent", "64", "--kv", "f16");
    CHECK_DESCRIBE("f16", "--kv", "f16", "--kv-mem", "1MiB"); /* every format has a pool */
    CHECK_DESCRIBE("", "--kv", "f16", "--kv-group", "64");
    CHECK_DESCRIBE("int2 quest G32 wush sink16 recent104 swa:sink0:recent32", "--kv", "int4", "--kv", "int2"); /* the last one counts */
    /* Per-layer-class formats: named only when they differ from --kv. */
    CHECK_DESCRIBE("int2 quest G128 clip1.2 wush sink16 recent104 swa:int3 keys:int3@auto swa:sink0:recent32", "--kv-swa", "int3");
    CHECK_DESCRIBE("int2 quest G128 clip1.2 wush sink16 recent104 keys:int3@auto swa:sink0:recent32", "--kv-swa", "int2");
    CHECK_DESCRIBE("int2 quest G32 wush sink16 recent104 swa:int4 swa:sink0:recent32", "--kv", "int2", "--kv-swa", "int4");
    CHECK_DESCRIBE("int3 quest G32 wush sink16 recent104 swa:sink0:recent32", "--kv", "int3", "--kv-swa", "int3");
    CHECK_DESCRIBE("", "--kv", "f16", "--kv-swa", "int4");                  /* f16 has no sliding format */
    CHECK_DESCRIBE("", "--kv", "int2", "--kv-swa", "f16");                  /* int2, int3, int4 only */
    CHECK_DESCRIBE("", "--kv", "int2", "--kv-swa", "int5");
    /* Windows per layer class: the sliding layers' own, named when they differ; the one of the
     * pair not given follows --kv-sink / --kv-recent. */
    CHECK_DESCRIBE("int2 quest G128 clip1.2 wush sink16 recent104 swa:int4 keys:int3@auto swa:sink0:recent0", "--kv-swa-sink", "0", "--kv-swa-recent", "0");
    CHECK_DESCRIBE("int2 quest G128 clip1.2 wush sink64 recent256 swa:int4 keys:int3@auto swa:sink0:recent0", "--kv-sink", "64", "--kv-recent", "256",
                   "--kv-swa-sink=0", "--kv-swa-recent=0");
    CHECK_DESCRIBE("int2 quest G128 clip1.2 wush sink16 recent104 swa:int4 keys:int3@auto swa:sink16:recent16", "--kv-swa-recent", "16");
    CHECK_DESCRIBE("int2 quest G128 clip1.2 wush sink8 recent104 swa:int4 keys:int3@auto swa:sink0:recent104", "--kv-swa-sink", "0", "--kv-sink", "8");
    CHECK_DESCRIBE("int2 quest G128 clip1.2 wush sink16 recent104 swa:int4 keys:int3@auto", "--kv-swa-sink", "16", "--kv-swa-recent", "104");
    CHECK_DESCRIBE("", "--kv", "f16", "--kv-swa-sink", "0");               /* a quantized cache's */
    CHECK_DESCRIBE("", "--kv-swa-recent", "-1");
    CHECK_DESCRIBE("", "--kv", "int2", "--kv-rho-k", "0.9");
    CHECK_DESCRIBE("", "--kv", "int2", "--kv-quant", "percentile", "--kv-rho-v", "0");
    /* QuEST's clip: 1.2 by default; given, it replaces the default's only, and --kv, --wush or
     * --kv-quant take the plain format's step (clip 1, named by nothing). */
    CHECK_DESCRIBE("int2 quest G128 clip1.5 wush sink16 recent104 swa:int4 keys:int3@auto swa:sink0:recent32", "--kv-clip", "1.5");
    CHECK_DESCRIBE("int2 quest G128 wush sink16 recent104 swa:int4 keys:int3@auto swa:sink0:recent32", "--kv-clip", "1");
    CHECK_DESCRIBE("int2 quest G32 clip0.8 wush sink16 recent104 swa:sink0:recent32", "--kv", "int2", "--kv-clip=0.8");
    CHECK_DESCRIBE("int2 quest G128 wush sink16 recent104 swa:int4 keys:int3@auto swa:sink0:recent32", "--kv-quant", "quest");
    CHECK_DESCRIBE("int2 quest G32 wush sink16 recent104 swa:sink0:recent32", "--wush", "s.wush");
    CHECK_DESCRIBE("int2 quest G128 clip0.25 wush sink16 recent104 swa:int4 keys:int3@auto swa:sink0:recent32", "--kv-clip", "0.25");
    CHECK_DESCRIBE("int2 quest G128 clip4 wush sink16 recent104 swa:int4 keys:int3@auto swa:sink0:recent32", "--kv-clip", "4");
    CHECK_DESCRIBE("", "--kv-clip", "0.2");                                  /* [0.25, 4] */
    CHECK_DESCRIBE("", "--kv-clip", "4.5");
    CHECK_DESCRIBE("", "--kv-clip", "nan");
    CHECK_DESCRIBE("", "--kv-clip", "1.2x");
    CHECK_DESCRIBE("", "--kv-clip", "1.2", "--kv-quant", "absmax");          /* QuEST's */
    CHECK_DESCRIBE("", "--kv-quant", "percentile", "--kv-clip", "1.2");
    CHECK_DESCRIBE("", "--kv", "f16", "--kv-clip", "1.2");                   /* a quantized cache's */
    /* Wide keys: the default's are the engine's choice (@auto); named layers replace it, one bit
     * wider than --kv unless given; none turns them off; only a quantized cache narrower than int4. */
    CHECK_DESCRIBE("int2 quest G128 clip1.2 wush sink16 recent104 swa:int4 keys:int3@11 swa:sink0:recent32",
                   "--kv-wide-keys", "11");
    CHECK_DESCRIBE("int2 quest G128 clip1.2 wush sink16 recent104 swa:int4 keys:int4@5,11 swa:sink0:recent32",
                   "--kv-wide-keys", "11,5:int4");
    CHECK_DESCRIBE("int2 quest G128 clip1.2 wush sink16 recent104 swa:int4 swa:sink0:recent32", "--kv-wide-keys", "none");
    CHECK_DESCRIBE("int3 quest G32 wush sink16 recent104 keys:int4@0 swa:sink0:recent32", "--kv", "int3", "--kv-wide-keys", "0");
    CHECK_DESCRIBE("int2 quest G32 wush sink16 recent104 swa:sink0:recent32", "--kv", "int2"); /* named: none */
    CHECK_DESCRIBE("", "--kv", "int4", "--kv-wide-keys", "3");
    CHECK_DESCRIBE("", "--kv-wide-keys", "3:int2");
    CHECK_DESCRIBE("", "--kv", "int3", "--kv-wide-keys", "3:int3");
    CHECK_DESCRIBE("", "--kv", "f16", "--kv-wide-keys", "3");
    CHECK_DESCRIBE("", "--kv-wide-keys", "");
    CHECK_DESCRIBE("", "--kv-wide-keys", "3,");
    CHECK_DESCRIBE("", "--kv-wide-keys", "256");
    CHECK_DESCRIBE("", "--kv-wide-keys", "-1");
    CHECK_DESCRIBE("", "--kv-wide-keys", "3:int5");
    /* A short buffer is cut, never overrun. */
    kv_flags f;
    CHECK(parse((const char *const[]){"--wush", "s", "--kv-sink", "4", NULL}, &f));
    char small[9];
    memset(small, 'x', sizeof small);
    kv_flags_describe(&f, NULL, small, 8);
    CHECK(strcmp(small, "int2 qu") == 0);
    CHECK(small[8] == 'x');
}

static void test_apply(void) {
    kv_flags f;
    CHECK(parse((const char *const[]){"--wush", "s.wush", "--kv-quant", "percentile", "--kv-group", "64", "--kv-mem",
                                      "1MiB", "--kv-sink", "4", "--kv-recent", "64", "--kv-rho-k", "0.9",
                                      "--kv-rho-v", "0.8", "--kv-swa", "int3", NULL},
                &f));
    wk_engine_params p;
    wk_engine_params_default(&p);
    p.max_ctx = 77;
    kv_flags_apply(&f, &p);
    CHECK_EQ_INT(p.kv_bits, 2);
    CHECK_EQ_INT(p.kv_quant, WK_KV_QUANT_PERCENTILE);
    CHECK_EQ_INT(p.kv_group, 64);
    CHECK_EQ_INT(p.kv_mem, 1 << 20);
    CHECK_EQ_INT(p.kv_transform, WK_KV_TRANSFORM_WUSH);
    CHECK(p.wush_path && strcmp(p.wush_path, "s.wush") == 0);
    CHECK_EQ_INT(p.kv_sink, 4);
    CHECK_EQ_INT(p.kv_recent, 64);
    CHECK_NEAR(p.kv_rho_k, 0.9, 1e-7);
    CHECK_NEAR(p.kv_rho_v, 0.8, 1e-7);
    CHECK_EQ_INT(p.kv_swa_bits, 3);
    CHECK(!p.kv_swa_windows); /* the sliding layers keep --kv-sink / --kv-recent */
    CHECK_EQ_INT(p.max_ctx, 77); /* the rest is left alone */
    CHECK(parse((const char *const[]){"--kv-recent", "256", "--kv-swa-sink", "0", NULL}, &f));
    kv_flags_apply(&f, &p);
    CHECK(p.kv_swa_windows);
    CHECK_EQ_INT(p.kv_swa_sink, 0);
    CHECK_EQ_INT(p.kv_swa_recent, 256);
    CHECK_EQ_INT(p.kv_sink, 16); /* the default's */

    /* No flags: the default format, WUSH with no sidecar path (the cache finds or makes it), and
     * the engine's quantile defaults (0). */
    CHECK(parse((const char *const[]){NULL}, &f));
    wk_engine_params_default(&p);
    kv_flags_apply(&f, &p);
    CHECK_EQ_INT(p.kv_bits, 2);
    CHECK_EQ_INT(p.kv_quant, WK_KV_QUANT_QUEST);
    CHECK_EQ_INT(p.kv_group, 128);
    CHECK_EQ_INT(p.kv_transform, WK_KV_TRANSFORM_WUSH);
    CHECK(p.wush_path == NULL);
    CHECK_EQ_INT(p.kv_sink, 16);
    CHECK_EQ_INT(p.kv_recent, 104);
    CHECK_EQ_INT(p.kv_mem, 0);
    CHECK(p.kv_rho_k == 0.0f && p.kv_rho_v == 0.0f);
    CHECK_EQ_INT(p.kv_swa_bits, 4); /* the sliding layers at int4 */
    CHECK(p.kv_swa_windows);        /* the sliding layers' own windows: the last 32 tokens */
    CHECK_EQ_INT(p.kv_swa_sink, 0);
    CHECK_EQ_INT(p.kv_swa_recent, 32);
    CHECK(p.kv_swa_default); /* nobody asked: no "no effect" line on a model without sliding layers */
    CHECK_NEAR(p.kv_clip, 1.2, 1e-7); /* QuEST's step 1.2x the MSE-optimal one */
    CHECK(p.kv_wide_keys_auto && p.kv_key_bits == 3); /* int3 keys where the engine ranks them */
    CHECK(parse((const char *const[]){"--kv-wide-keys", "5,70", NULL}, &f));
    kv_flags_apply(&f, &p);
    CHECK(!p.kv_wide_keys_auto && p.kv_key_bits == 3 && p.kv_wide_keys[0] == 1ull << 5 && p.kv_wide_keys[1] == 1ull << 6);
    CHECK(parse((const char *const[]){"--kv-wide-keys", "none", NULL}, &f));
    kv_flags_apply(&f, &p);
    CHECK(!p.kv_wide_keys_auto && p.kv_key_bits == 0 && p.kv_wide_keys[0] == 0 && p.kv_wide_keys[1] == 0);
    CHECK(parse((const char *const[]){"--kv-clip", "1.25", NULL}, &f));
    kv_flags_apply(&f, &p);
    CHECK(p.kv_clip == 1.25f);
    CHECK(parse((const char *const[]){"--kv", "int3", NULL}, &f));
    kv_flags_apply(&f, &p);
    CHECK(p.kv_clip == 0.0f); /* a named format: the unclipped step */

    /* A window flag: the sliding layers follow it (and the other default), still quietly; a
     * per-class flag: the engine may say it has no effect. */
    CHECK(parse((const char *const[]){"--kv-recent", "8", NULL}, &f));
    wk_engine_params_default(&p);
    kv_flags_apply(&f, &p);
    CHECK(!p.kv_swa_windows && p.kv_sink == 16 && p.kv_recent == 8 && p.kv_swa_default);
    CHECK(parse((const char *const[]){"--kv-swa-recent", "8", NULL}, &f));
    wk_engine_params_default(&p);
    kv_flags_apply(&f, &p);
    CHECK(p.kv_swa_windows && p.kv_swa_sink == 16 && p.kv_swa_recent == 8 && !p.kv_swa_default);
    CHECK(parse((const char *const[]){"--kv-swa", "int3", NULL}, &f));
    wk_engine_params_default(&p);
    kv_flags_apply(&f, &p);
    CHECK(p.kv_swa_bits == 3 && p.kv_swa_windows && p.kv_swa_recent == 32 && !p.kv_swa_default);

    /* --kv f16: the plain f16 cache, nothing of the default left. */
    CHECK(parse((const char *const[]){"--kv", "f16", NULL}, &f));
    wk_engine_params_default(&p);
    kv_flags_apply(&f, &p);
    CHECK_EQ_INT(p.kv_bits, 16);
    CHECK_EQ_INT(p.kv_transform, WK_KV_TRANSFORM_NONE);
    CHECK(p.wush_path == NULL);
    CHECK_EQ_INT(p.kv_sink, 0);
    CHECK_EQ_INT(p.kv_recent, 0);
    CHECK_EQ_INT(p.kv_swa_bits, 0); /* no sliding format of its own */
    CHECK(p.kv_clip == 0.0f);
    CHECK(!p.kv_swa_windows);       /* ... nor windows */
}

int main(void) {
    test_describe();
    test_apply();
    TEST_MAIN_END();
}
