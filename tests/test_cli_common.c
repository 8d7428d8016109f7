/* server/cli/cli_common.c without a model: each command takes only the common flags it names (another
 * stays unknown to it, as before the flags were shared), the values land where the engine params
 * read them, so do the environment's (WUSHKV_DEVICE, _VALIDATION, _PROFILE), and a given model
 * path is used as is. Messages and exit codes are test_cli.sh's. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "test_util.h"

/* Parses args (NULL-terminated, after the command name) into f with the flags `takes`; false at
 * the first flag that is not a common one f takes, or that is refused. */
static bool parse(unsigned takes, const char *const *args, cli_common *f) {
    char *argv[32] = {"test"};
    int argc = 1;
    for (; args[argc - 1] && argc < 32; argc++) argv[argc] = (char *)args[argc - 1];
    cli c;
    cli_init(&c, "test", argc, argv);
    cli_common_init(f, takes);
    while (cli_next(&c))
        if (!cli_common_is(&c, f) || !cli_common_parse(&c, f)) return false;
    return true;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

enum { ALL = CLI_MODEL | CLI_FILE | CLI_DEVICE | CLI_THREADS | CLI_JSON | CLI_VALIDATION | CLI_VERBOSE };

static void test_values(void) {
    cli_common f;
    CHECK(parse(ALL, ARGS(NULL), &f));
    CHECK(f.model == NULL && f.file == NULL);
    CHECK_EQ_INT(f.device, -1);
    CHECK_EQ_INT(f.threads, 0);
    CHECK(!f.json && !f.validation && !f.verbose);

    CHECK(parse(ALL, ARGS("-m", "a.gguf", "--file=t.txt", "--device", "2", "--threads", "3", "--json", "--validation",
                          "-v"),
                &f));
    CHECK(strcmp(f.model, "a.gguf") == 0);
    CHECK(strcmp(f.file, "t.txt") == 0);
    CHECK_EQ_INT(f.device, 2);
    CHECK_EQ_INT(f.threads, 3);
    CHECK(f.json && f.validation && f.verbose);
    CHECK(parse(ALL, ARGS("--model", "a", "--model", "b", "-f", "-", "--verbose"), &f)); /* the last one counts */
    CHECK(strcmp(f.model, "b") == 0 && strcmp(f.file, "-") == 0 && f.verbose);

    /* Refused values (the message goes to stderr). */
    CHECK(!parse(ALL, ARGS("--device", "-1"), &f));
    CHECK(!parse(ALL, ARGS("--device", "1025"), &f));
    CHECK(!parse(ALL, ARGS("--threads", "0"), &f));
    CHECK(!parse(ALL, ARGS("--json=yes"), &f));
    CHECK(!parse(ALL, ARGS("-m"), &f));
}

static void test_takes(void) {
    cli_common f;
    /* generate's set: no -f, no --threads. */
    const unsigned gen = CLI_MODEL | CLI_DEVICE | CLI_JSON | CLI_VALIDATION | CLI_VERBOSE;
    CHECK(parse(gen, ARGS("-m", "x", "--device", "0", "--json", "--validation", "-v"), &f));
    CHECK(!parse(gen, ARGS("-f", "x"), &f));
    CHECK(!parse(gen, ARGS("--threads", "2"), &f));
    /* serve's: no --json, no --validation. */
    const unsigned serve = CLI_MODEL | CLI_DEVICE | CLI_VERBOSE;
    CHECK(!parse(serve, ARGS("--json"), &f));
    CHECK(!parse(serve, ARGS("--validation"), &f));
    /* Each flag reports its own bit, so bench can tell its two-mode flags from the engine's. */
    char *argv[] = {"test", "--json", "--device", "--bogus"};
    cli c;
    cli_init(&c, "test", 4, argv);
    cli_common_init(&f, ALL);
    CHECK(cli_next(&c));
    CHECK_EQ_INT(cli_common_is(&c, &f), CLI_JSON);
    CHECK(cli_next(&c));
    CHECK_EQ_INT(cli_common_is(&c, &f), CLI_DEVICE);
    CHECK(cli_next(&c));
    CHECK_EQ_INT(cli_common_is(&c, &f), 0);
}

static void test_apply(void) {
    cli_common f;
    CHECK(parse(ALL, ARGS("-m", "a.gguf", "--device", "1", "--validation", "-v", "--json"), &f));
    wk_engine_params p;
    wk_engine_params_default(&p);
    p.max_ctx = 77;
    cli_common_apply(&f, &p);
    CHECK(strcmp(p.model_path, "a.gguf") == 0);
    CHECK_EQ_INT(p.device_index, 1);
    CHECK(p.validation && p.verbose);
    CHECK_EQ_INT(p.max_ctx, 77); /* the others are left alone */

    char buf[16] = "unchanged";
    CHECK(cli_model_path("test", "given.gguf", buf, sizeof buf) != NULL);
    CHECK(strcmp(cli_model_path("test", "given.gguf", buf, sizeof buf), "given.gguf") == 0);
    CHECK(strcmp(buf, "unchanged") == 0); /* a given path never looks for the default */
}

/* The environment's engine settings, read by the CLI (the engine reads none), as `wushkv --help`
 * documents them. */
static void test_env(void) {
    char err[WK_ERRMSG_LEN] = "";
    wk_engine_params p;
    unsetenv("WUSHKV_DEVICE"), unsetenv("WUSHKV_VALIDATION"), unsetenv("WUSHKV_PROFILE");
    wk_engine_params_default(&p);
    CHECK_EQ_INT(cli_engine_env(&p, err, sizeof err), WK_OK);
    CHECK(p.device_index == -1 && !p.validation && !p.profile);

    setenv("WUSHKV_DEVICE", "2", 1), setenv("WUSHKV_VALIDATION", "1", 1), setenv("WUSHKV_PROFILE", "1", 1);
    CHECK_EQ_INT(cli_engine_env(&p, err, sizeof err), WK_OK);
    CHECK(p.device_index == 2 && p.validation && p.profile);
    p.device_index = 0; /* --device given: the variable does not count */
    CHECK_EQ_INT(cli_engine_env(&p, err, sizeof err), WK_OK);
    CHECK_EQ_INT(p.device_index, 0);

    setenv("WUSHKV_DEVICE", "", 1), setenv("WUSHKV_VALIDATION", "0", 1), setenv("WUSHKV_PROFILE", "yes", 1);
    wk_engine_params_default(&p);
    p.validation = true; /* a variable never turns a given switch off */
    CHECK_EQ_INT(cli_engine_env(&p, err, sizeof err), WK_OK);
    CHECK(p.device_index == -1 && p.validation && !p.profile);

    setenv("WUSHKV_DEVICE", "gpu", 1);
    wk_engine_params_default(&p);
    CHECK_EQ_INT(cli_engine_env(&p, err, sizeof err), WK_ERR_INVALID);
    CHECK(strcmp(err, "WUSHKV_DEVICE='gpu' is not a device index") == 0);
    setenv("WUSHKV_DEVICE", "-1", 1);
    CHECK_EQ_INT(cli_engine_env(&p, err, sizeof err), WK_ERR_INVALID);
    unsetenv("WUSHKV_DEVICE"), unsetenv("WUSHKV_VALIDATION"), unsetenv("WUSHKV_PROFILE");

    /* LP_NUM_THREADS sizes the host head's threads as it sizes lavapipe's; what lavapipe would not
     * take leaves every CPU (0), and a count the caller gave stays. */
    static const struct {
        const char *value;
        int threads;
    } lp[] = {{"3", 3}, {"1", 1}, {"256", 256}, {"0", 0}, {"257", 0}, {"-2", 0}, {"two", 0}, {"4x", 0}, {"", 0}};
    for (size_t i = 0; i < sizeof lp / sizeof lp[0]; i++) {
        setenv("LP_NUM_THREADS", lp[i].value, 1);
        wk_engine_params_default(&p);
        CHECK_EQ_INT(cli_engine_env(&p, err, sizeof err), WK_OK);
        CHECK_EQ_INT(p.host_threads, lp[i].threads);
    }
    setenv("LP_NUM_THREADS", "3", 1);
    wk_engine_params_default(&p);
    p.host_threads = 5;
    CHECK_EQ_INT(cli_engine_env(&p, err, sizeof err), WK_OK);
    CHECK_EQ_INT(p.host_threads, 5);
    unsetenv("LP_NUM_THREADS");
    wk_engine_params_default(&p);
    CHECK_EQ_INT(cli_engine_env(&p, err, sizeof err), WK_OK);
    CHECK_EQ_INT(p.host_threads, 0);
}

/* A kernel spec (WUSHKV_KERNELS, bench --vs-kernels): the set, then the variants the engine checks;
 * once a caller parsed its own, the environment's does not replace it. */
static void test_kernels(void) {
    static const struct {
        const char *spec;
        int rc, kernels;
        const char *variants;
    } cases[] = {{"cpu", WK_OK, WK_KERNELS_CPU, ""},
                 {"gpu,head=device", WK_OK, WK_KERNELS_GPU, "head=device"},
                 {"auto", WK_OK, WK_KERNELS_AUTO, ""},
                 {"head=host,matvec=2", WK_OK, WK_KERNELS_AUTO, "head=host,matvec=2"},
                 {"cpu,", WK_OK, WK_KERNELS_CPU, ""},
                 {"fast", WK_ERR_INVALID, 0, NULL},
                 {"cpus,head=host", WK_ERR_INVALID, 0, NULL},
                 {"", WK_ERR_INVALID, 0, NULL}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wk_engine_params p;
        wk_engine_params_default(&p);
        CHECK_EQ_INT(cli_kernels_parse(cases[i].spec, &p), cases[i].rc);
        if (cases[i].rc != WK_OK) {
            CHECK(p.kernels == WK_KERNELS_AUTO && p.kernel_variants == NULL); /* unchanged */
            continue;
        }
        CHECK_EQ_INT(p.kernels, cases[i].kernels);
        CHECK(p.kernel_variants && strcmp(p.kernel_variants, cases[i].variants) == 0);
    }
    char err[WK_ERRMSG_LEN] = "";
    wk_engine_params p;
    setenv("WUSHKV_KERNELS", "gpu,matvec=4", 1);
    wk_engine_params_default(&p);
    CHECK_EQ_INT(cli_engine_env(&p, err, sizeof err), WK_OK);
    CHECK(p.kernels == WK_KERNELS_GPU && strcmp(p.kernel_variants, "matvec=4") == 0);
    wk_engine_params_default(&p);
    CHECK_EQ_INT(cli_kernels_parse("auto", &p), WK_OK);
    CHECK_EQ_INT(cli_engine_env(&p, err, sizeof err), WK_OK);
    CHECK(p.kernels == WK_KERNELS_AUTO && strcmp(p.kernel_variants, "") == 0);
    setenv("WUSHKV_KERNELS", "fast", 1);
    wk_engine_params_default(&p);
    CHECK_EQ_INT(cli_engine_env(&p, err, sizeof err), WK_ERR_INVALID);
    CHECK(strstr(err, "WUSHKV_KERNELS='fast': expected cpu, gpu or auto") != NULL);
    unsetenv("WUSHKV_KERNELS");
}

int main(void) {
    test_values();
    test_takes();
    test_apply();
    test_env();
    test_kernels();
    TEST_MAIN_END();
}
