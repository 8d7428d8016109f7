/* `wushkv bench` engine mode: prefill and decode throughput of one sequence, measured the way
 * llama-bench measures them, so that the two tools' numbers can stand side by side (and, with
 * --peer, do so in one invocation):
 *   pp<P>: P tokens (BOS, then random ids) evaluated from an empty cache in steps of the batch
 *          size, logits for the last token only; tok/s = P / time.
 *   tg<N>: N tokens evaluated one at a time from an empty cache (BOS, then random ids), logits
 *          for each; tok/s = N / time.
 * One warm-up run of each, then -r timed runs; mean +/- sample standard deviation over the runs.
 * The engine is reached through include/wushkv/wushkv.h only. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench/bench.h"
#include "cli/cli_common.h"
#include "cli/kv_flags.h"
#include "cli/wush_cache.h"
#include "metrics/mono_clock.h"

extern char **environ;

/* Token ids come from this seed, so every run (and every invocation) evaluates the same ids. */
#define BENCH_TOKEN_SEED 0x5eedb5e7c0ffee11ull
/* The peer's stdout (llama-bench's JSON: a few KiB) is read whole; more means something is off. */
#define PEER_MAX_OUTPUT (16u << 20)

/* ---- token ids ------------------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* n ids: BOS first (when the model adds one), then uniform over the vocabulary. */
static void fill_tokens(int32_t *t, int n, const wk_model_info *info, uint64_t *rng) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(splitmix64(rng) % (uint64_t)info->n_vocab);
    if (n > 0 && info->add_bos && info->bos >= 0) t[0] = info->bos;
}

/* ---- the two tests --------------------------------------------------------------------------- */

typedef struct engine_run {
    wk_engine *e;
    wk_seq *seq;
    const int32_t *prompt, *gen; /* n_prompt and n_gen ids */
    float *logits;               /* one row */
    int batch;
} engine_run;

/* Evaluates the prompt from an empty cache; returns the tokens the sequence holds after it, or -1
 * (message printed). *secs: the time of the forward steps alone. */
static int run_prefill(engine_run *r, int n, double *secs) {
    char err[WK_ERRMSG_LEN] = "";
    wk_seq_reset(r->seq);
    double t0 = mono_now_s();
    for (int off = 0; off < n; off += r->batch) {
        int k = n - off < r->batch ? n - off : r->batch;
        bool last = off + k == n;
        wk_batch_item item = {.seq = r->seq, .tokens = r->prompt + off, .n_tokens = k, .all_logits = false};
        int got = wk_forward(r->e, &item, 1, last ? r->logits : NULL, err, sizeof err);
        if (got < 0) {
            fprintf(stderr, "wushkv bench: prefill, tokens %d..%d: %s%s%s\n", off, off + k - 1, wk_strerror(got),
                    err[0] ? ": " : "", err);
            return -1;
        }
    }
    *secs = mono_now_s() - t0;
    return wk_seq_len(r->seq);
}

/* Evaluates n tokens one step each from an empty cache, with logits every step. */
static int run_decode(engine_run *r, int n, double *secs) {
    char err[WK_ERRMSG_LEN] = "";
    wk_seq_reset(r->seq);
    double t0 = mono_now_s();
    for (int i = 0; i < n; i++) {
        wk_batch_item item = {.seq = r->seq, .tokens = r->gen + i, .n_tokens = 1, .all_logits = false};
        int got = wk_forward(r->e, &item, 1, r->logits, err, sizeof err);
        if (got < 0) {
            fprintf(stderr, "wushkv bench: decode, token %d: %s%s%s\n", i, wk_strerror(got), err[0] ? ": " : "", err);
            return -1;
        }
    }
    *secs = mono_now_s() - t0;
    return wk_seq_len(r->seq);
}

typedef struct engine_result {
    char model_name[256], device[256], kv_desc[64];
    double bits_per_element;
    unsigned long long kv_bytes_per_token;
    int ctx;
    int prefill_tokens, decode_tokens; /* evaluated per run, as the sequence counted them */
    double *pp_ts, *tg_ts;             /* tok/s of each timed run */
} engine_result;

/* Opens the engine, runs warm-up + reps of each test, closes it. 0 or 1 (message printed). */
static int measure_engine(const bench_engine_opts *o, const char *model, engine_result *res) {
    int need_ctx = o->n_prompt > o->n_gen ? o->n_prompt : o->n_gen;
    wk_engine_params ep;
    wk_engine_params_default(&ep);
    cli_common_apply(&o->common, &ep);
    ep.model_path = model;
    kv_flags_apply(&o->kv, &ep);
    ep.max_ctx = o->ctx ? o->ctx : need_ctx;
    ep.max_batch_tokens = o->batch_tokens;
    ep.max_seqs = 1;
    kv_flags_describe(&o->kv, res->kv_desc, sizeof res->kv_desc);

    char wush[4200];
    if (wush_cache_prepare("bench", &ep, wush, sizeof wush, NULL) < 0) return 1;
    wk_engine *e = cli_engine_open("bench", &ep);
    if (!e) return 1;
    const wk_model_info *info = wk_engine_info(e);
    snprintf(res->model_name, sizeof res->model_name, "%s", info->name);
    snprintf(res->device, sizeof res->device, "%s", info->device_name);
    res->bits_per_element = info->kv_bits_per_element;
    res->kv_bytes_per_token = (unsigned long long)info->kv_bytes_per_token;
    res->ctx = info->max_ctx;
    fprintf(stderr, "wushkv bench: %s on %s, KV %s; pp%d and tg%d, %d run%s after a warm-up\n", res->model_name,
            res->device, res->kv_desc, o->n_prompt, o->n_gen, o->reps, o->reps == 1 ? "" : "s");

    int rc = 1;
    engine_run r = {.e = e, .batch = o->batch_tokens};
    int32_t *prompt = malloc(((size_t)o->n_prompt + 1) * sizeof *prompt);
    int32_t *gen = malloc(((size_t)o->n_gen + 1) * sizeof *gen);
    r.logits = malloc((size_t)info->n_vocab * sizeof *r.logits);
    res->pp_ts = calloc((size_t)o->reps, sizeof *res->pp_ts);
    res->tg_ts = calloc((size_t)o->reps, sizeof *res->tg_ts);
    if (!prompt || !gen || !r.logits || !res->pp_ts || !res->tg_ts) {
        fprintf(stderr, "wushkv bench: out of memory\n");
        goto out;
    }
    uint64_t rng = BENCH_TOKEN_SEED;
    fill_tokens(prompt, o->n_prompt, info, &rng);
    fill_tokens(gen, o->n_gen, info, &rng);
    r.prompt = prompt;
    r.gen = gen;
    int st = wk_seq_create(e, &r.seq);
    if (st < 0) {
        fprintf(stderr, "wushkv bench: cannot create a sequence: %s\n", wk_strerror(st));
        goto out;
    }

    for (int i = -1; i < o->reps; i++) { /* i = -1: the warm-up, not counted */
        double tp = 0.0, tg = 0.0;
        if (o->n_prompt > 0) {
            int got = run_prefill(&r, o->n_prompt, &tp);
            if (got < 0) goto out;
            res->prefill_tokens = got;
        }
        if (o->n_gen > 0) {
            int got = run_decode(&r, o->n_gen, &tg);
            if (got < 0) goto out;
            res->decode_tokens = got;
        }
        if (i < 0) {
            if (o->common.verbose) fprintf(stderr, "warm-up: prefill %.3f s, decode %.3f s\n", tp, tg);
            continue;
        }
        res->pp_ts[i] = tp > 0.0 ? res->prefill_tokens / tp : 0.0;
        res->tg_ts[i] = tg > 0.0 ? res->decode_tokens / tg : 0.0;
        fprintf(stderr, "run %d/%d:", i + 1, o->reps);
        if (o->n_prompt > 0)
            fprintf(stderr, " prefill %d tokens in %.3f s (%.2f tok/s)", res->prefill_tokens, tp, res->pp_ts[i]);
        if (o->n_gen > 0)
            fprintf(stderr, "%s decode %d tokens in %.3f s (%.2f tok/s)", o->n_prompt > 0 ? ";" : "",
                    res->decode_tokens, tg, res->tg_ts[i]);
        fputc('\n', stderr);
    }
    rc = 0;
out:
    if (r.seq) wk_seq_destroy(r.seq);
    free(r.logits);
    free(gen);
    free(prompt);
    wk_engine_close(e);
    return rc;
}

/* ---- the peer: llama-bench ------------------------------------------------------------------- */

typedef struct peer_result {
    bool ok;
    double pp_ts, pp_sd, tg_ts, tg_sd; /* NAN where the test was not run */
    char error[768];
} peer_result;

/* The last non-empty line of what the peer wrote to stderr, for a failure message. */
static void last_line(int fd, char *out, size_t cap) {
    out[0] = '\0';
    off_t end = lseek(fd, 0, SEEK_END);
    if (end <= 0) return;
    char buf[1024];
    off_t start = end > (off_t)sizeof buf - 1 ? end - (off_t)sizeof buf + 1 : 0;
    ssize_t n = pread(fd, buf, (size_t)(end - start), start);
    if (n <= 0) return;
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = '\0';
    char *nl = strrchr(buf, '\n');
    snprintf(out, cap, "%.*s", (int)cap - 1, nl ? nl + 1 : buf);
}

/* Reads llama-bench's -o json: an array of tests, each with n_prompt, n_gen, avg_ts, stddev_ts. */
static bool parse_peer_json(const char *text, const bench_engine_opts *o, peer_result *r) {
    cJSON *root = cJSON_Parse(text);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        snprintf(r->error, sizeof r->error, "its output is not llama-bench's JSON array (-o json)");
        return false;
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, root) {
        const cJSON *np = cJSON_GetObjectItemCaseSensitive(t, "n_prompt");
        const cJSON *ng = cJSON_GetObjectItemCaseSensitive(t, "n_gen");
        const cJSON *avg = cJSON_GetObjectItemCaseSensitive(t, "avg_ts");
        const cJSON *sd = cJSON_GetObjectItemCaseSensitive(t, "stddev_ts");
        if (!cJSON_IsNumber(np) || !cJSON_IsNumber(ng) || !cJSON_IsNumber(avg)) continue;
        double s = cJSON_IsNumber(sd) ? sd->valuedouble : 0.0;
        if (np->valueint == o->n_prompt && np->valueint > 0 && ng->valueint == 0) {
            r->pp_ts = avg->valuedouble;
            r->pp_sd = s;
        } else if (ng->valueint == o->n_gen && ng->valueint > 0 && np->valueint == 0) {
            r->tg_ts = avg->valuedouble;
            r->tg_sd = s;
        }
    }
    cJSON_Delete(root);
    if ((o->n_prompt > 0 && isnan(r->pp_ts)) || (o->n_gen > 0 && isnan(r->tg_ts))) {
        snprintf(r->error, sizeof r->error, "its JSON has no pp%d / tg%d result", o->n_prompt, o->n_gen);
        return false;
    }
    return true;
}

/* Runs `peer -m MODEL -p P -n N -r R -o json -t CPUS`, its stderr kept aside for a failure message. */
static void run_peer(const bench_engine_opts *o, const char *model, peer_result *r) {
    r->pp_ts = r->pp_sd = r->tg_ts = r->tg_sd = NAN;
    if (access(o->peer, X_OK) != 0) {
        snprintf(r->error, sizeof r->error, "cannot run the peer %.400s: %s", o->peer, strerror(errno));
        return;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    char p[24], n[24], reps[24], threads[24];
    snprintf(p, sizeof p, "%d", o->n_prompt);
    snprintf(n, sizeof n, "%d", o->n_gen);
    snprintf(reps, sizeof reps, "%d", o->reps);
    snprintf(threads, sizeof threads, "%ld", cpus > 0 ? cpus : 1);
    char *argv[] = {(char *)o->peer, "-m", (char *)model, "-p", p, "-n", n, "-r", reps, "-o", "json", "-t", threads, NULL};
    fprintf(stderr, "wushkv bench: peer: %s -m %s -p %s -n %s -r %s -o json -t %s\n", o->peer, model, p, n, reps,
            threads);

    int out[2] = {-1, -1};
    char errpath[] = "/tmp/wushkv-bench-peer-XXXXXX";
    int errfd = mkstemp(errpath);
    if (errfd >= 0) unlink(errpath);
    char *text = NULL;
    size_t len = 0, cap = 0;
    pid_t pid = -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (errfd < 0 || pipe2(out, O_CLOEXEC) != 0) {
        snprintf(r->error, sizeof r->error, "cannot run the peer: %s", strerror(errno));
        goto out;
    }
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, errfd, STDERR_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    int st = posix_spawn(&pid, o->peer, &fa, NULL, argv, environ);
    close(out[1]);
    out[1] = -1;
    if (st != 0) {
        pid = -1;
        snprintf(r->error, sizeof r->error, "cannot run the peer %.400s: %s", o->peer, strerror(st));
        goto out;
    }
    for (;;) {
        if (cap - len < 4096) {
            if (cap >= PEER_MAX_OUTPUT) break;
            char *t = realloc(text, cap ? cap * 2 : 65536);
            if (!t) break;
            text = t;
            cap = cap ? cap * 2 : 65536;
        }
        ssize_t k = read(out[0], text + len, cap - len - 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        len += (size_t)k;
    }
    if (text) text[len] = '\0';
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    pid = -1;
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        char tail[256];
        last_line(errfd, tail, sizeof tail);
        if (WIFSIGNALED(ws))
            snprintf(r->error, sizeof r->error, "the peer %.400s was killed by signal %d%s%s", o->peer, WTERMSIG(ws),
                     tail[0] ? ": " : "", tail);
        else
            snprintf(r->error, sizeof r->error, "the peer %.400s exited with status %d%s%s", o->peer, WEXITSTATUS(ws),
                     tail[0] ? ": " : "", tail);
        goto out;
    }
    if (!text || !parse_peer_json(text, o, r)) {
        char why[256];
        snprintf(why, sizeof why, "%.255s", text ? r->error : "no output");
        snprintf(r->error, sizeof r->error, "the peer %.400s: %s", o->peer, why);
        goto out;
    }
    r->ok = true;
out:
    if (pid > 0) waitpid(pid, NULL, 0);
    posix_spawn_file_actions_destroy(&fa);
    if (out[0] >= 0) close(out[0]);
    if (out[1] >= 0) close(out[1]);
    if (errfd >= 0) close(errfd);
    free(text);
}

/* ---- report ---------------------------------------------------------------------------------- */

static double round_to(double x, double unit) { return round(x / unit) * unit; }

static void add_num_or_null(cJSON *obj, const char *key, double v, double unit) {
    if (isnan(v)) cJSON_AddNullToObject(obj, key);
    else cJSON_AddNumberToObject(obj, key, round_to(v, unit));
}

static int print_json(const bench_engine_opts *o, const char *model, const engine_result *res,
                      const peer_result *peer) {
    const size_t n = (size_t)o->reps;
    double pp = o->n_prompt > 0 ? bench_mean(res->pp_ts, n) : NAN, tg = o->n_gen > 0 ? bench_mean(res->tg_ts, n) : NAN;
    cJSON *obj = cJSON_CreateObject();
    if (!obj) return 1;
    cJSON_AddStringToObject(obj, "model", res->model_name);
    cJSON_AddStringToObject(obj, "model_path", model);
    cJSON_AddStringToObject(obj, "device", res->device);
    cJSON_AddStringToObject(obj, "kv", res->kv_desc);
    cJSON_AddNumberToObject(obj, "bits_per_element", res->bits_per_element);
    cJSON_AddNumberToObject(obj, "kv_bytes_per_token", (double)res->kv_bytes_per_token);
    cJSON_AddNumberToObject(obj, "ctx", res->ctx);
    cJSON_AddNumberToObject(obj, "batch_tokens", o->batch_tokens);
    cJSON_AddNumberToObject(obj, "repetitions", o->reps);
    cJSON_AddNumberToObject(obj, "n_prompt", res->prefill_tokens);
    cJSON_AddNumberToObject(obj, "n_gen", res->decode_tokens);
    add_num_or_null(obj, "prefill_tokens_per_s", pp, 0.01);
    add_num_or_null(obj, "prefill_tokens_per_s_stddev", o->n_prompt > 0 ? bench_stddev(res->pp_ts, n) : NAN, 0.01);
    add_num_or_null(obj, "decode_tokens_per_s", tg, 0.01);
    add_num_or_null(obj, "decode_tokens_per_s_stddev", o->n_gen > 0 ? bench_stddev(res->tg_ts, n) : NAN, 0.01);
    cJSON *s = cJSON_AddArrayToObject(obj, "prefill_runs_tokens_per_s");
    for (size_t i = 0; o->n_prompt > 0 && i < n; i++) cJSON_AddItemToArray(s, cJSON_CreateNumber(round_to(res->pp_ts[i], 0.01)));
    s = cJSON_AddArrayToObject(obj, "decode_runs_tokens_per_s");
    for (size_t i = 0; o->n_gen > 0 && i < n; i++) cJSON_AddItemToArray(s, cJSON_CreateNumber(round_to(res->tg_ts[i], 0.01)));
    if (o->peer) {
        cJSON *p = cJSON_AddObjectToObject(obj, "peer");
        cJSON_AddStringToObject(p, "path", o->peer);
        if (peer->ok) {
            add_num_or_null(p, "prefill_tokens_per_s", peer->pp_ts, 0.01);
            add_num_or_null(p, "prefill_tokens_per_s_stddev", peer->pp_sd, 0.01);
            add_num_or_null(p, "decode_tokens_per_s", peer->tg_ts, 0.01);
            add_num_or_null(p, "decode_tokens_per_s_stddev", peer->tg_sd, 0.01);
            cJSON_AddNullToObject(p, "error");
        } else {
            cJSON_AddStringToObject(p, "error", peer->error);
        }
        add_num_or_null(obj, "ratio_prefill", peer->ok && peer->pp_ts > 0 ? pp / peer->pp_ts : NAN, 0.001);
        add_num_or_null(obj, "ratio_decode", peer->ok && peer->tg_ts > 0 ? tg / peer->tg_ts : NAN, 0.001);
    }
    return cli_print_json(obj);
}

static void print_row(const char *test, double mean, double sd, const bench_engine_opts *o, const peer_result *peer,
                      double peer_mean, double peer_sd) {
    printf("| %-7s | %10.2f +/- %-9.2f |", test, mean, sd);
    if (o->peer) {
        if (peer->ok && !isnan(peer_mean))
            printf(" %10.2f +/- %-9.2f | %11.3f |", peer_mean, peer_sd, peer_mean > 0 ? mean / peer_mean : NAN);
        else
            printf(" %-24s | %-11s |", "failed", "-");
    }
    putchar('\n');
}

static void print_text(const bench_engine_opts *o, const char *model, const engine_result *res,
                       const peer_result *peer) {
    const size_t n = (size_t)o->reps;
    printf("model:  %s (%s)\n", res->model_name, model);
    printf("device: %s\n", res->device);
    printf("KV:     %s, %.2f bits/element, %llu bytes/token; ctx %d, batch %d, %d run%s after 1 warm-up\n",
           res->kv_desc, res->bits_per_element, res->kv_bytes_per_token, res->ctx, o->batch_tokens, o->reps,
           o->reps == 1 ? "" : "s");
    if (o->peer) printf("peer:   %s\n", o->peer);
    printf("\n| test    | wushkv tok/s             |");
    if (o->peer) printf(" peer tok/s               | wushkv/peer |");
    printf("\n|---------|--------------------------|");
    if (o->peer) printf("--------------------------|-------------|");
    putchar('\n');
    char name[32];
    if (o->n_prompt > 0) {
        snprintf(name, sizeof name, "pp%d", o->n_prompt);
        print_row(name, bench_mean(res->pp_ts, n), bench_stddev(res->pp_ts, n), o, peer, peer->pp_ts, peer->pp_sd);
    }
    if (o->n_gen > 0) {
        snprintf(name, sizeof name, "tg%d", o->n_gen);
        print_row(name, bench_mean(res->tg_ts, n), bench_stddev(res->tg_ts, n), o, peer, peer->tg_ts, peer->tg_sd);
    }
    fflush(stdout);
}

int bench_engine_run(const bench_engine_opts *o) {
    char model[4096];
    const char *path = cli_model_path("bench", o->common.model, model, sizeof model);
    if (!path) return 1;
    engine_result res = {0};
    int rc = measure_engine(o, path, &res);
    if (rc == 0) {
        peer_result peer = {.pp_ts = NAN, .pp_sd = NAN, .tg_ts = NAN, .tg_sd = NAN};
        /* After our engine is closed, so the two never share the CPU. */
        if (o->peer) run_peer(o, path, &peer);
        if (o->common.json) rc = print_json(o, path, &res, &peer);
        else print_text(o, path, &res, &peer);
        if (o->peer && !peer.ok) {
            fprintf(stderr, "wushkv bench: %s\n", peer.error);
            rc = 1;
        }
    }
    free(res.pp_ts);
    free(res.tg_ts);
    return rc;
}
