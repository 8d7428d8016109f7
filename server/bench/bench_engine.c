/* `wushkv bench` engine mode: prefill and decode throughput of one sequence, measured the way
 * llama-bench measures them, so that the two tools' numbers can stand side by side (and, with
 * --peer, do so in one invocation):
 *   pp<P> @ d<D>: D tokens evaluated into an empty cache (the depth run, not timed), then P tokens
 *          (BOS, then random ids) in steps of the batch size, logits for the last token only;
 *          tok/s = P / time.
 *   tg<N> @ d<D>: the depth run, then N tokens evaluated one at a time (BOS, then random ids),
 *          logits for each; tok/s = N / time.
 * One warm-up of each from an empty cache, then -r timed runs of each row, each after its own
 * depth run (llama-bench restores a saved state instead; the timed part is the same); mean +/-
 * sample standard deviation over the runs. Each tg row also gets the KV bytes a decode step reads
 * at its depth (from the format's layout: wk_kv_decode_read_bytes) and, with the profile on, the
 * attention's GPU time and so its achieved bytes/s.
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
#include "bench/bench_host.h"
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

/* ---- the tests ------------------------------------------------------------------------------- */

typedef struct engine_run {
    wk_engine *e;
    wk_seq *seq;
    const int32_t *depth, *prompt, *gen; /* max depth, n_prompt and n_gen ids */
    float *logits;                       /* one row */
    int batch;
} engine_run;

static void step_error(const char *what, int from, int to, int got, const char *err) {
    fprintf(stderr, "wushkv bench: %s, tokens %d..%d: %s%s%s\n", what, from, to, wk_strerror(got), err[0] ? ": " : "",
            err);
}

/* Appends n tokens in steps of the batch size; logits (when given) for the last token only. */
static int eval_chunks(engine_run *r, const char *what, const int32_t *tokens, int n, float *logits) {
    char err[WK_ERRMSG_LEN] = "";
    for (int off = 0; off < n; off += r->batch) {
        int k = n - off < r->batch ? n - off : r->batch;
        bool last = off + k == n;
        wk_batch_item item = {.seq = r->seq, .tokens = tokens + off, .n_tokens = k, .all_logits = false};
        int got = wk_forward(r->e, &item, 1, last ? logits : NULL, err, sizeof err);
        if (got < 0) return step_error(what, off, off + k - 1, got, err), -1;
    }
    return 0;
}

/* Empties the sequence and evaluates `depth` tokens into it (not timed: llama-bench's depth run);
 * returns the sequence's length after it, or -1 (message printed). */
static int fill_depth(engine_run *r, int depth) {
    wk_seq_reset(r->seq);
    if (depth > 0 && eval_chunks(r, "depth", r->depth, depth, NULL) < 0) return -1;
    return wk_seq_len(r->seq);
}

/* pp: the prompt on top of the depth in steps of the batch size; returns the tokens it added, or
 * -1. *secs: the time of the forward steps alone. */
static int run_prefill(engine_run *r, int n, double *secs) {
    int before = wk_seq_len(r->seq);
    double t0 = mono_now_s();
    if (eval_chunks(r, "prefill", r->prompt, n, r->logits) < 0) return -1;
    *secs = mono_now_s() - t0;
    return wk_seq_len(r->seq) - before;
}

/* tg: n tokens one step each on top of the depth, with logits every step. */
static int run_decode(engine_run *r, int n, double *secs) {
    char err[WK_ERRMSG_LEN] = "";
    int before = wk_seq_len(r->seq);
    double t0 = mono_now_s();
    for (int i = 0; i < n; i++) {
        wk_batch_item item = {.seq = r->seq, .tokens = r->gen + i, .n_tokens = 1, .all_logits = false};
        int got = wk_forward(r->e, &item, 1, r->logits, err, sizeof err);
        if (got < 0) return step_error("decode", i, i, got, err), -1;
    }
    *secs = mono_now_s() - t0;
    return wk_seq_len(r->seq) - before;
}

enum { WK_BENCH_PROF_MAX = 32 };

/* The engine's profile so far (wk_engine_profile): per pipeline, GPU ms and dispatches. */
typedef struct prof_snap {
    wk_profile_entry e[WK_BENCH_PROF_MAX];
    int n;
} prof_snap;

static void prof_take(const wk_engine *e, prof_snap *s) {
    s->n = wk_engine_profile(e, s->e, WK_BENCH_PROF_MAX);
    if (s->n > WK_BENCH_PROF_MAX) s->n = WK_BENCH_PROF_MAX;
    if (s->n < 0) s->n = 0;
}

/* Whether a pipeline reads the KV cache: the attention itself, not its reduce pass. */
static bool reads_kv(const char *pipe) {
    return strncmp(pipe, "attention_", 10) == 0 && strcmp(pipe, "attention_reduce") != 0;
}

/* One row of the report: a test (pp or tg) at one depth, as llama-bench names it ("tg128 @ d2048"). */
typedef struct bench_row {
    int depth;                /* -d */
    bool decode;              /* tg, else pp */
    int n;                    /* -p or -n */
    int depth_held;           /* the sequence's length after the depth run (the last run's) */
    int tokens;               /* what the test added to it */
    double *ts;               /* tok/s of each timed run */
    uint64_t kv_read;         /* tg: KV bytes the first decode step reads (wk_kv_decode_read_bytes) */
    uint64_t kv_read_run;     /* tg: the same summed over the run's steps */
    double attn_ms;           /* WUSHKV_PROFILE=1: the attention's GPU ms per run (mean); NAN without */
    wk_profile_entry prof[WK_BENCH_PROF_MAX]; /* WUSHKV_PROFILE=1: GPU ms per pipeline, the timed runs' sum */
    int n_prof;
    double peer_ts, peer_sd;  /* NAN when not measured */
} bench_row;

/* Adds what one timed run cost (the profile after it less the one before: the depth run and the
 * warm-up left out) to the row's, per pipeline: the "where time goes" of docs/benchmarks.md. A
 * pipeline's first dispatch may come during the run, so one missing before counts from zero. */
static void row_profile_add(bench_row *w, const prof_snap *before, const prof_snap *after) {
    for (int i = 0; i < after->n; i++) {
        const wk_profile_entry *a = &after->e[i];
        wk_profile_entry b = {.name = a->name};
        for (int j = 0; j < before->n; j++)
            if (strcmp(before->e[j].name, a->name) == 0) b = before->e[j];
        int k = 0;
        while (k < w->n_prof && strcmp(w->prof[k].name, a->name) != 0) k++;
        if (k == w->n_prof) {
            if (k == WK_BENCH_PROF_MAX) continue;
            w->prof[w->n_prof++] = (wk_profile_entry){.name = a->name};
        }
        w->prof[k].ms += a->ms - b.ms;
        w->prof[k].dispatches += a->dispatches - b.dispatches;
    }
}

/* The row's profile on stderr: per token, the pipelines by GPU time, largest first. */
static void row_profile_print(const bench_row *w, const char *name, int reps) {
    int order[WK_BENCH_PROF_MAX], n = 0;
    double total = 0.0;
    for (int k = 0; k < w->n_prof; k++)
        if (w->prof[k].dispatches > 0 && w->prof[k].ms > 0.0) order[n++] = k, total += w->prof[k].ms;
    if (n == 0 || w->tokens <= 0) return;
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && w->prof[order[b]].ms > w->prof[order[b - 1]].ms; b--) {
            int t = order[b];
            order[b] = order[b - 1], order[b - 1] = t;
        }
    const double per = 1.0 / ((double)w->tokens * reps);
    fprintf(stderr, "%s where GPU time goes, per token: %.3f ms in all\n", name, total * per);
    for (int i = 0; i < n; i++) {
        const wk_profile_entry *p = &w->prof[order[i]];
        fprintf(stderr, "  %-18s %9.3f ms  %5.1f%%  %8.2f dispatches\n", p->name, p->ms * per, 100.0 * p->ms / total,
                (double)p->dispatches * per);
    }
}

static void row_name(const bench_row *w, char *buf, size_t cap) {
    int k = snprintf(buf, cap, "%s%d", w->decode ? "tg" : "pp", w->n);
    if (w->depth > 0 && k > 0 && (size_t)k < cap) snprintf(buf + k, cap - (size_t)k, " @ d%d", w->depth);
}

typedef struct engine_result {
    char model_name[256], device[256], kv_desc[128];
    char device_type[32], driver[256], driver_info[256];
    unsigned subgroup, shared_memory, vendor_id, device_id;
    const char *kernels; /* the shader variants: "cpu" or "gpu" */
    char kernel_variants[128]; /* each of them (wk_model_info.kernel_variants; copied: the engine closes first) */
    double bits_per_element;
    unsigned long long kv_bytes_per_token;
    int ctx;
    bool profiled;
    bool host_measured;      /* CPU device with the profile on: the host's own limits beside it */
    bench_host_limits host;
    bench_row *rows;
    int n_rows;
} engine_result;

/* The rows in llama-bench's order: for each depth, pp then tg. */
static int make_rows(const bench_engine_opts *o, engine_result *res) {
    res->rows = calloc((size_t)o->n_depths * 2, sizeof *res->rows);
    if (!res->rows) return -1;
    for (int d = 0; d < o->n_depths; d++)
        for (int k = 0; k < 2; k++) {
            int n = k ? o->n_gen : o->n_prompt;
            if (n == 0) continue;
            bench_row *w = &res->rows[res->n_rows++];
            *w = (bench_row){.depth = o->depths[d], .decode = k == 1, .n = n, .attn_ms = NAN, .peer_ts = NAN,
                             .peer_sd = NAN};
            if (!(w->ts = calloc((size_t)o->reps, sizeof *w->ts))) return -1;
        }
    return 0;
}

/* Opens the engine, runs one warm-up (pp and tg from an empty cache), then for each row -r runs
 * of: depth run, timed test. Closes it. 0 or 1 (message printed). */
static int measure_engine(const bench_engine_opts *o, const char *model, engine_result *res) {
    int max_depth = 0;
    for (int i = 0; i < o->n_depths; i++)
        if (o->depths[i] > max_depth) max_depth = o->depths[i];
    int need_ctx = max_depth + (o->n_prompt > o->n_gen ? o->n_prompt : o->n_gen);
    wk_engine_params ep;
    wk_engine_params_default(&ep);
    cli_common_apply(&o->common, &ep);
    ep.model_path = model;
    kv_flags kv = o->kv;
    kv_flags_fit_model(&kv, model);
    kv_flags_apply(&kv, &ep);
    ep.max_ctx = o->ctx ? o->ctx : need_ctx;
    ep.max_batch_tokens = o->batch_tokens;
    ep.max_seqs = 1;
    kv_flags_describe(&kv, NULL, res->kv_desc, sizeof res->kv_desc);
    if (make_rows(o, res) < 0) {
        fprintf(stderr, "wushkv bench: out of memory\n");
        return 1;
    }

    char wush[4200];
    if (wush_cache_prepare("bench", &ep, wush, sizeof wush, NULL) < 0) return 1;
    wk_engine *e = cli_engine_open("bench", &ep);
    if (!e) return 1;
    const wk_model_info *info = wk_engine_info(e);
    kv_flags_describe(&kv, info, res->kv_desc, sizeof res->kv_desc); /* with the wide keys' layers */
    snprintf(res->model_name, sizeof res->model_name, "%s", info->name);
    snprintf(res->device, sizeof res->device, "%s", info->device_name);
    snprintf(res->device_type, sizeof res->device_type, "%s", info->device_type);
    snprintf(res->driver, sizeof res->driver, "%s", info->device_driver);
    snprintf(res->driver_info, sizeof res->driver_info, "%s", info->device_driver_info);
    res->subgroup = info->device_subgroup_size;
    res->shared_memory = info->device_shared_memory_bytes;
    res->kernels = info->kernels;
    snprintf(res->kernel_variants, sizeof res->kernel_variants, "%s", info->kernel_variants ? info->kernel_variants : "");
    res->vendor_id = info->device_vendor_id;
    res->device_id = info->device_id;
    res->bits_per_element = info->kv_bits_per_element;
    res->kv_bytes_per_token = (unsigned long long)info->kv_bytes_per_token;
    res->ctx = info->max_ctx;
    fprintf(stderr, "wushkv bench: %s on %s, KV %s; pp%d and tg%d at %d depth%s, %d run%s after a warm-up\n",
            res->model_name, res->device, res->kv_desc, o->n_prompt, o->n_gen, o->n_depths,
            o->n_depths == 1 ? "" : "s", o->reps, o->reps == 1 ? "" : "s");

    int rc = 1;
    engine_run r = {.e = e, .batch = o->batch_tokens};
    int32_t *depth = malloc(((size_t)max_depth + 1) * sizeof *depth);
    int32_t *prompt = malloc(((size_t)o->n_prompt + 1) * sizeof *prompt);
    int32_t *gen = malloc(((size_t)o->n_gen + 1) * sizeof *gen);
    r.logits = malloc((size_t)info->n_vocab * sizeof *r.logits);
    if (!depth || !prompt || !gen || !r.logits) {
        fprintf(stderr, "wushkv bench: out of memory\n");
        goto out;
    }
    /* llama-bench's ids: every pp and tg run starts with BOS, at depth too (test_prompt and
     * test_gen begin with it), and the depth run does. */
    uint64_t rng = BENCH_TOKEN_SEED;
    fill_tokens(prompt, o->n_prompt, info, &rng);
    fill_tokens(gen, o->n_gen, info, &rng);
    fill_tokens(depth, max_depth, info, &rng);
    r.depth = depth;
    r.prompt = prompt;
    r.gen = gen;
    int st = wk_seq_create(e, &r.seq);
    if (st < 0) {
        fprintf(stderr, "wushkv bench: cannot create a sequence: %s\n", wk_strerror(st));
        goto out;
    }

    { /* the warm-up, not counted */
        double tp = 0.0, tg = 0.0;
        if (o->n_prompt > 0 && (fill_depth(&r, 0) < 0 || run_prefill(&r, o->n_prompt, &tp) < 0)) goto out;
        if (o->n_gen > 0 && (fill_depth(&r, 0) < 0 || run_decode(&r, o->n_gen, &tg) < 0)) goto out;
        if (o->common.verbose) fprintf(stderr, "warm-up: prefill %.3f s, decode %.3f s\n", tp, tg);
    }
    for (int k = 0; k < res->n_rows; k++) {
        bench_row *w = &res->rows[k];
        char name[48];
        row_name(w, name, sizeof name);
        if (w->decode) {
            w->kv_read = wk_kv_decode_read_bytes(e, (uint64_t)w->depth);
            for (int i = 0; i < w->n; i++) w->kv_read_run += wk_kv_decode_read_bytes(e, (uint64_t)(w->depth + i));
        }
        for (int i = 0; i < o->reps; i++) {
            double t_fill = mono_now_s(), t = 0.0;
            w->depth_held = fill_depth(&r, w->depth);
            if (w->depth_held < 0) goto out;
            t_fill = mono_now_s() - t_fill;
            prof_snap before, after;
            prof_take(e, &before);
            int got = w->decode ? run_decode(&r, w->n, &t) : run_prefill(&r, w->n, &t);
            if (got < 0) goto out;
            prof_take(e, &after);
            row_profile_add(w, &before, &after);
            w->tokens = got;
            w->ts[i] = t > 0.0 ? got / t : 0.0;
            fprintf(stderr, "%s run %d/%d:", name, i + 1, o->reps);
            if (w->depth > 0) fprintf(stderr, " depth %d tokens in %.3f s (not timed);", w->depth_held, t_fill);
            fprintf(stderr, " %s %d tokens in %.3f s (%.2f tok/s)\n", w->decode ? "decode" : "prefill", got, t,
                    w->ts[i]);
        }
        if (w->n_prof > 0) { /* NAN without a profile */
            double attn = 0.0;
            for (int k = 0; k < w->n_prof; k++)
                if (reads_kv(w->prof[k].name)) attn += w->prof[k].ms;
            w->attn_ms = attn / o->reps;
        }
        row_profile_print(w, name, o->reps);
    }
    res->profiled = wk_engine_profile(e, NULL, 0) > 0;
    rc = 0;
out:
    if (r.seq) wk_seq_destroy(r.seq);
    free(r.logits);
    free(gen);
    free(prompt);
    free(depth);
    wk_engine_close(e);
    return rc;
}

/* ---- the peer: llama-bench ------------------------------------------------------------------- */

typedef struct peer_result {
    bool ok;
    const char *kv;  /* its cache type (-ctk/-ctv) */
    char error[768];
} peer_result;

const char *bench_peer_kv(const bench_engine_opts *o) {
    if (o->peer_kv) return o->peer_kv;
    return o->kv.bits == 4 ? "q4_0" : "f16";
}

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

/* Reads llama-bench's -o json: an array of tests, each with n_prompt, n_gen, n_depth, avg_ts,
 * stddev_ts; each row takes the test of its (n_prompt, n_gen, n_depth). */
static bool parse_peer_json(const char *text, engine_result *res, peer_result *r) {
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
        const cJSON *nd = cJSON_GetObjectItemCaseSensitive(t, "n_depth");
        const cJSON *avg = cJSON_GetObjectItemCaseSensitive(t, "avg_ts");
        const cJSON *sd = cJSON_GetObjectItemCaseSensitive(t, "stddev_ts");
        if (!cJSON_IsNumber(np) || !cJSON_IsNumber(ng) || !cJSON_IsNumber(avg)) continue;
        int depth = cJSON_IsNumber(nd) ? nd->valueint : 0; /* before llama-bench had -d */
        for (int k = 0; k < res->n_rows; k++) {
            bench_row *w = &res->rows[k];
            if (w->depth == depth && np->valueint == (w->decode ? 0 : w->n) && ng->valueint == (w->decode ? w->n : 0)) {
                w->peer_ts = avg->valuedouble;
                w->peer_sd = cJSON_IsNumber(sd) ? sd->valuedouble : 0.0;
            }
        }
    }
    cJSON_Delete(root);
    for (int k = 0; k < res->n_rows; k++)
        if (isnan(res->rows[k].peer_ts)) {
            char name[48];
            row_name(&res->rows[k], name, sizeof name);
            snprintf(r->error, sizeof r->error, "its JSON has no %s result", name);
            return false;
        }
    return true;
}

/* Runs `peer -m MODEL -p P -n N -d LIST -r R -o json -t CPUS -ctk T -ctv T [-fa 1]`, its stderr
 * kept aside for a failure message. */
static void run_peer(const bench_engine_opts *o, const char *model, engine_result *res, peer_result *r) {
    r->kv = bench_peer_kv(o);
    if (access(o->peer, X_OK) != 0) {
        snprintf(r->error, sizeof r->error, "cannot run the peer %.400s: %s", o->peer, strerror(errno));
        return;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    char p[24], n[24], reps[24], threads[24], depths[BENCH_MAX_DEPTHS * 9];
    snprintf(p, sizeof p, "%d", o->n_prompt);
    snprintf(n, sizeof n, "%d", o->n_gen);
    snprintf(reps, sizeof reps, "%d", o->reps);
    snprintf(threads, sizeof threads, "%ld", cpus > 0 ? cpus : 1);
    size_t at = 0;
    for (int i = 0; i < o->n_depths; i++)
        at += (size_t)snprintf(depths + at, sizeof depths - at, "%s%d", i ? "," : "", o->depths[i]);
    /* llama.cpp stores a quantized V cache only with flash attention. */
    bool flash = strcmp(r->kv, "f16") != 0;
    char *argv[] = {(char *)o->peer, "-m", (char *)model, "-p", p, "-n", n, "-d", depths, "-r", reps, "-o", "json",
                    "-t", threads, "-ctk", (char *)r->kv, "-ctv", (char *)r->kv, flash ? "-fa" : NULL, "1", NULL};
    fprintf(stderr, "wushkv bench: peer:");
    for (char **a = argv; *a; a++) fprintf(stderr, " %s", *a);
    fputc('\n', stderr);

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
    if (!text || !parse_peer_json(text, res, r)) {
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
    if (isnan(v) || isinf(v)) cJSON_AddNullToObject(obj, key);
    else cJSON_AddNumberToObject(obj, key, round_to(v, unit));
}

/* Why the peer's cache type is the one compared, for the report. */
static const char *peer_kv_note(const bench_engine_opts *o) {
    if (o->peer_kv) return "--peer-kv";
    if (o->kv.bits == 16) return "the same type";
    if (o->kv.bits == 4) return "llama.cpp's nearest: 4-bit codes, an f16 scale per 32";
    return "llama.cpp has no 2- or 3-bit cache type";
}

/* Attention bytes/s of a tg row from the profile: the KV bytes its steps read over their GPU time. */
static double attn_bytes_per_s(const bench_row *w) {
    return w->decode && w->attn_ms > 0 ? (double)w->kv_read_run / (w->attn_ms * 1e-3) : NAN;
}

/* The first depth's pp / tg row, for the flat keys the JSON had before -d; NULL when not run. */
static const bench_row *first_row(const engine_result *res, bool decode) {
    for (int k = 0; k < res->n_rows; k++)
        if (res->rows[k].decode == decode) return res->rows[k].depth == res->rows[0].depth ? &res->rows[k] : NULL;
    return NULL;
}

static int print_json(const bench_engine_opts *o, const char *model, const engine_result *res,
                      const peer_result *peer) {
    const size_t n = (size_t)o->reps;
    cJSON *obj = cJSON_CreateObject();
    if (!obj) return 1;
    cJSON_AddStringToObject(obj, "model", res->model_name);
    cJSON_AddStringToObject(obj, "model_path", model);
    cJSON_AddStringToObject(obj, "device", res->device);
    cJSON_AddStringToObject(obj, "device_type", res->device_type);
    cJSON_AddStringToObject(obj, "device_driver", res->driver);
    cJSON_AddStringToObject(obj, "device_driver_info", res->driver_info);
    cJSON_AddNumberToObject(obj, "subgroup_size", res->subgroup);
    cJSON_AddNumberToObject(obj, "shared_memory_bytes", res->shared_memory);
    cJSON_AddStringToObject(obj, "kernels", res->kernels ? res->kernels : "");
    cJSON_AddStringToObject(obj, "kernel_variants", res->kernel_variants);
    cJSON_AddNumberToObject(obj, "vendor_id", res->vendor_id);
    cJSON_AddNumberToObject(obj, "device_id", res->device_id);
    cJSON_AddStringToObject(obj, "kv", res->kv_desc);
    cJSON_AddNumberToObject(obj, "bits_per_element", res->bits_per_element);
    cJSON_AddNumberToObject(obj, "kv_bytes_per_token", (double)res->kv_bytes_per_token);
    cJSON_AddNumberToObject(obj, "ctx", res->ctx);
    cJSON_AddNumberToObject(obj, "batch_tokens", o->batch_tokens);
    cJSON_AddNumberToObject(obj, "repetitions", o->reps);
    cJSON_AddBoolToObject(obj, "profile", res->profiled);
    if (res->host_measured) {
        cJSON *h = cJSON_AddObjectToObject(obj, "host");
        cJSON_AddNumberToObject(h, "threads", res->host.threads);
        cJSON_AddNumberToObject(h, "memory_read_bytes_per_s", res->host.read_gbps * 1e9);
        cJSON_AddNumberToObject(h, "f32_fma_flops_per_s", res->host.fma_gflops * 1e9);
        cJSON_AddStringToObject(h, "fma_isa", res->host.fma_isa);
    }
    cJSON *ds = cJSON_AddArrayToObject(obj, "depths");
    for (int i = 0; i < o->n_depths; i++) cJSON_AddItemToArray(ds, cJSON_CreateNumber(o->depths[i]));

    /* The first depth's figures under the keys the report had before -d. */
    const bench_row *pp = first_row(res, false), *tg = first_row(res, true);
    double pp_mean = pp ? bench_mean(pp->ts, n) : NAN, tg_mean = tg ? bench_mean(tg->ts, n) : NAN;
    cJSON_AddNumberToObject(obj, "n_prompt", pp ? pp->tokens : 0);
    cJSON_AddNumberToObject(obj, "n_gen", tg ? tg->tokens : 0);
    add_num_or_null(obj, "prefill_tokens_per_s", pp_mean, 0.01);
    add_num_or_null(obj, "prefill_tokens_per_s_stddev", pp ? bench_stddev(pp->ts, n) : NAN, 0.01);
    add_num_or_null(obj, "decode_tokens_per_s", tg_mean, 0.01);
    add_num_or_null(obj, "decode_tokens_per_s_stddev", tg ? bench_stddev(tg->ts, n) : NAN, 0.01);
    cJSON *a = cJSON_AddArrayToObject(obj, "prefill_runs_tokens_per_s");
    for (size_t i = 0; pp && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(round_to(pp->ts[i], 0.01)));
    a = cJSON_AddArrayToObject(obj, "decode_runs_tokens_per_s");
    for (size_t i = 0; tg && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(round_to(tg->ts[i], 0.01)));

    cJSON *tests = cJSON_AddArrayToObject(obj, "tests");
    for (int k = 0; k < res->n_rows; k++) {
        const bench_row *w = &res->rows[k];
        char name[48];
        row_name(w, name, sizeof name);
        cJSON *t = cJSON_CreateObject();
        cJSON_AddItemToArray(tests, t);
        cJSON_AddStringToObject(t, "test", name);
        cJSON_AddNumberToObject(t, "n_prompt", w->decode ? 0 : w->n);
        cJSON_AddNumberToObject(t, "n_gen", w->decode ? w->n : 0);
        cJSON_AddNumberToObject(t, "n_depth", w->depth);
        cJSON_AddNumberToObject(t, "depth_tokens", w->depth_held);
        cJSON_AddNumberToObject(t, "tokens", w->tokens);
        double mean = bench_mean(w->ts, n);
        add_num_or_null(t, "tokens_per_s", mean, 0.01);
        add_num_or_null(t, "tokens_per_s_stddev", bench_stddev(w->ts, n), 0.01);
        a = cJSON_AddArrayToObject(t, "runs_tokens_per_s");
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(round_to(w->ts[i], 0.01)));
        /* pp rows too: a GPU's prefill attention per kernel set (scripts/gpu-check.sh). */
        add_num_or_null(t, "attention_ms_per_token", w->attn_ms / w->n, 0.0001);
        if (w->decode) {
            cJSON_AddNumberToObject(t, "kv_read_bytes_per_token", (double)w->kv_read);
            add_num_or_null(t, "attention_bytes_per_s", attn_bytes_per_s(w), 1.0);
        }
        if (o->peer) {
            add_num_or_null(t, "peer_tokens_per_s", peer->ok ? w->peer_ts : NAN, 0.01);
            add_num_or_null(t, "peer_tokens_per_s_stddev", peer->ok ? w->peer_sd : NAN, 0.01);
            add_num_or_null(t, "ratio", peer->ok && w->peer_ts > 0 ? mean / w->peer_ts : NAN, 0.001);
        }
    }
    if (o->peer) {
        cJSON *p = cJSON_AddObjectToObject(obj, "peer");
        cJSON_AddStringToObject(p, "path", o->peer);
        cJSON_AddStringToObject(p, "kv", peer->kv ? peer->kv : bench_peer_kv(o));
        cJSON_AddStringToObject(p, "kv_why", peer_kv_note(o));
        if (peer->ok) {
            add_num_or_null(p, "prefill_tokens_per_s", pp ? pp->peer_ts : NAN, 0.01);
            add_num_or_null(p, "prefill_tokens_per_s_stddev", pp ? pp->peer_sd : NAN, 0.01);
            add_num_or_null(p, "decode_tokens_per_s", tg ? tg->peer_ts : NAN, 0.01);
            add_num_or_null(p, "decode_tokens_per_s_stddev", tg ? tg->peer_sd : NAN, 0.01);
            cJSON_AddNullToObject(p, "error");
        } else {
            cJSON_AddStringToObject(p, "error", peer->error);
        }
        add_num_or_null(obj, "ratio_prefill", peer->ok && pp && pp->peer_ts > 0 ? pp_mean / pp->peer_ts : NAN, 0.001);
        add_num_or_null(obj, "ratio_decode", peer->ok && tg && tg->peer_ts > 0 ? tg_mean / tg->peer_ts : NAN, 0.001);
    }
    return cli_print_json(obj);
}

/* "12.3 MiB", "456.0 KiB", "789 B". */
static void human_bytes(double b, char *buf, size_t cap) {
    if (b >= 1048576.0) snprintf(buf, cap, "%.2f MiB", b / 1048576.0);
    else if (b >= 1024.0) snprintf(buf, cap, "%.1f KiB", b / 1024.0);
    else snprintf(buf, cap, "%.0f B", b);
}

static void print_text(const bench_engine_opts *o, const char *model, const engine_result *res,
                       const peer_result *peer) {
    const size_t n = (size_t)o->reps;
    printf("model:  %s (%s)\n", res->model_name, model);
    printf("device: %s (%s; driver %s%s%s; subgroup %u, shared memory %u KiB; kernels %s: %s)\n", res->device,
           res->device_type, res->driver[0] ? res->driver : "?", res->driver_info[0] ? " " : "", res->driver_info,
           res->subgroup, res->shared_memory / 1024, res->kernels ? res->kernels : "?", res->kernel_variants);
    printf("KV:     %s, %.2f bits/element, %llu bytes/token; ctx %d, batch %d, %d run%s after 1 warm-up\n",
           res->kv_desc, res->bits_per_element, res->kv_bytes_per_token, res->ctx, o->batch_tokens, o->reps,
           o->reps == 1 ? "" : "s");
    if (res->host_measured)
        printf("host:   %d threads: memory read %.1f GB/s, f32 FMA %.1f GFLOP/s (%s; C, this run)\n", res->host.threads,
               res->host.read_gbps, res->host.fma_gflops, res->host.fma_isa);
    if (o->peer)
        printf("peer:   %s, KV cache %s (%s)\n", o->peer, peer->kv ? peer->kv : bench_peer_kv(o), peer_kv_note(o));
    printf("\n| %-15s | wushkv tok/s             | KV read/token |", "test");
    if (res->profiled) printf(" attn GB/s |");
    if (o->peer) printf(" peer tok/s               | wushkv/peer |");
    printf("\n|-----------------|--------------------------|---------------|");
    if (res->profiled) printf("-----------|");
    if (o->peer) printf("--------------------------|-------------|");
    putchar('\n');
    for (int k = 0; k < res->n_rows; k++) {
        const bench_row *w = &res->rows[k];
        char name[48], rb[32] = "-";
        row_name(w, name, sizeof name);
        double mean = bench_mean(w->ts, n);
        if (w->decode) human_bytes((double)w->kv_read, rb, sizeof rb);
        printf("| %-15s | %10.2f +/- %-9.2f | %13s |", name, mean, bench_stddev(w->ts, n), rb);
        if (res->profiled) {
            double bw = attn_bytes_per_s(w);
            if (isnan(bw)) printf(" %9s |", "-");
            else printf(" %9.2f |", bw / 1e9);
        }
        if (o->peer) {
            if (peer->ok && !isnan(w->peer_ts))
                printf(" %10.2f +/- %-9.2f | %11.3f |", w->peer_ts, w->peer_sd, w->peer_ts > 0 ? mean / w->peer_ts : NAN);
            else
                printf(" %-24s | %-11s |", "failed", "-");
        }
        putchar('\n');
    }
    fflush(stdout);
}

static void free_result(engine_result *res) {
    for (int k = 0; res->rows && k < res->n_rows; k++) free(res->rows[k].ts);
    free(res->rows);
}

int bench_engine_run(const bench_engine_opts *o) {
    char model[4096];
    const char *path = cli_model_path("bench", o->common.model, model, sizeof model);
    if (!path) return 1;
    engine_result res = {0};
    int rc = measure_engine(o, path, &res);
    if (rc == 0 && res.profiled && strcmp(res.device_type, "CPU") == 0) {
        /* The CPU's memory bandwidth and FMA peak with as many threads as lavapipe runs, after our
         * engine is closed: the bound beside the profile's attention GB/s. */
        const char *lp = getenv("LP_NUM_THREADS");
        long threads = lp && atoi(lp) > 0 ? atoi(lp) : sysconf(_SC_NPROCESSORS_ONLN);
        bench_host_measure(threads > 0 ? (int)threads : 1, &res.host);
        res.host_measured = true;
    }
    if (rc == 0) {
        peer_result peer = {.kv = NULL};
        /* After our engine is closed, so the two never share the CPU. */
        if (o->peer) run_peer(o, path, &res, &peer);
        if (o->common.json) rc = print_json(o, path, &res, &peer);
        else print_text(o, path, &res, &peer);
        if (o->peer && !peer.ok) {
            fprintf(stderr, "wushkv bench: %s\n", peer.error);
            rc = 1;
        }
    }
    free_result(&res);
    return rc;
}
