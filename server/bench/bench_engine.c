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
 * --vs-kv FMT opens a second engine with that cache format beside ours and runs every test on both,
 * run for run (ours first in odd runs, second in even, so that a drifting machine favours neither),
 * so the report's ratio of the two formats comes from one invocation on one machine state.
 * The engine is reached through include/wushkv/wushkv.h only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_engine.h"
#include "cli/cli_common.h"
#include "cli/kv_flags.h"
#include "cli/wush_cache.h"
#include "metrics/mono_clock.h"

/* Token ids come from this seed, so every run (and every invocation) evaluates the same ids. */
#define BENCH_TOKEN_SEED 0x5eedb5e7c0ffee11ull

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

void bench_row_name(const bench_row *w, char *buf, size_t cap) {
    int k = snprintf(buf, cap, "%s%d", w->decode ? "tg" : "pp", w->n);
    if (w->depth > 0 && k > 0 && (size_t)k < cap) snprintf(buf + k, cap - (size_t)k, " @ d%d", w->depth);
}

/* The rows in llama-bench's order: for each depth, pp then tg. */
static int make_rows(const bench_engine_opts *o, bench_row **rows, int *n_rows) {
    *n_rows = 0;
    if (!(*rows = calloc((size_t)o->n_depths * 2, sizeof **rows))) return -1;
    for (int d = 0; d < o->n_depths; d++)
        for (int k = 0; k < 2; k++) {
            int n = k ? o->n_gen : o->n_prompt;
            if (n == 0) continue;
            bench_row *w = &(*rows)[(*n_rows)++];
            *w = (bench_row){.depth = o->depths[d], .decode = k == 1, .n = n, .attn_ms = NAN, .peer_ts = NAN,
                             .peer_sd = NAN};
            if (!(w->ts = calloc((size_t)o->reps, sizeof *w->ts))) return -1;
        }
    return 0;
}

/* One engine of the invocation, ours (the --kv flags) or the --vs-kv one: its sequence, and the
 * rows it fills. */
typedef struct bench_side {
    char label[96]; /* "" for ours; " [f16]" (--vs-kv) or " [cpu,head=device]" (--vs-kernels) for the other,
                     * after the test's name in stderr lines */
    wk_engine *e;
    engine_run r;
    bench_row *rows;
} bench_side;

/* Opens an engine with the KV flags `flags` (and the kernel spec `kernels`, NULL: the environment's)
 * for the tests of o and describes its cache and kernels into *kvi; NULL (message printed). */
static wk_engine *open_side(const bench_engine_opts *o, const char *model, const kv_flags *flags, const char *kernels,
                            int ctx, bench_kv_info *kvi) {
    wk_engine_params ep;
    wk_engine_params_default(&ep);
    cli_common_apply(&o->common, &ep);
    if (kernels) cli_kernels_parse(kernels, &ep); /* checked when parsed */
    ep.model_path = model;
    kv_flags kv = *flags;
    kv_flags_fit_model(&kv, model);
    kv_flags_apply(&kv, &ep);
    ep.max_ctx = ctx;
    ep.max_batch_tokens = o->batch_tokens;
    ep.max_seqs = 1;
    char wush[4200];
    if (wush_cache_prepare("bench", &ep, wush, sizeof wush, NULL) < 0) return NULL;
    wk_engine *e = cli_engine_open("bench", &ep);
    if (!e) return NULL;
    const wk_model_info *info = wk_engine_info(e);
    kv_flags_describe(&kv, info, kvi->desc, sizeof kvi->desc); /* with the wide keys' layers */
    kvi->bits_per_element = info->kv_bits_per_element;
    kvi->bytes_per_token = (unsigned long long)info->kv_bytes_per_token;
    snprintf(kvi->kernels, sizeof kvi->kernels, "%s: %s", info->kernels, info->kernel_variants ? info->kernel_variants : "");
    if (o->common.verbose) fprintf(stderr, "wushkv bench: opened an engine with KV %s\n", kvi->desc);
    return e;
}

/* The side's sequence and logits row, then its warm-up (pp and tg from an empty cache, not
 * counted). 0 or -1 (message printed). */
static int prepare_side(const bench_engine_opts *o, bench_side *s, int n_vocab) {
    int st = wk_seq_create(s->e, &s->r.seq);
    if (st < 0) {
        fprintf(stderr, "wushkv bench: cannot create a sequence: %s\n", wk_strerror(st));
        return -1;
    }
    if (!(s->r.logits = malloc((size_t)n_vocab * sizeof *s->r.logits))) {
        fprintf(stderr, "wushkv bench: out of memory\n");
        return -1;
    }
    double tp = 0.0, tg = 0.0;
    if (o->n_prompt > 0 && (fill_depth(&s->r, 0) < 0 || run_prefill(&s->r, o->n_prompt, &tp) < 0)) return -1;
    if (o->n_gen > 0 && (fill_depth(&s->r, 0) < 0 || run_decode(&s->r, o->n_gen, &tg) < 0)) return -1;
    if (o->common.verbose) fprintf(stderr, "warm-up%s: prefill %.3f s, decode %.3f s\n", s->label, tp, tg);
    return 0;
}

/* Timed run i of the side's row k: its depth run, then the test. 0 or -1 (message printed). */
static int timed_run(const bench_engine_opts *o, bench_side *s, int k, int i) {
    bench_row *w = &s->rows[k];
    char name[48];
    bench_row_name(w, name, sizeof name);
    double t_fill = mono_now_s(), t = 0.0;
    w->depth_held = fill_depth(&s->r, w->depth);
    if (w->depth_held < 0) return -1;
    t_fill = mono_now_s() - t_fill;
    prof_snap before, after;
    prof_take(s->e, &before);
    int got = w->decode ? run_decode(&s->r, w->n, &t) : run_prefill(&s->r, w->n, &t);
    if (got < 0) return -1;
    prof_take(s->e, &after);
    row_profile_add(w, &before, &after);
    w->tokens = got;
    w->ts[i] = t > 0.0 ? got / t : 0.0;
    fprintf(stderr, "%s%s run %d/%d:", name, s->label, i + 1, o->reps);
    if (w->depth > 0) fprintf(stderr, " depth %d tokens in %.3f s (not timed);", w->depth_held, t_fill);
    fprintf(stderr, " %s %d tokens in %.3f s (%.2f tok/s)\n", w->decode ? "decode" : "prefill", got, t, w->ts[i]);
    return 0;
}

/* After a row's runs: the attention's mean GPU time (NAN without a profile) and the profile's
 * lines on stderr. */
static void finish_row(const bench_engine_opts *o, bench_side *s, int k) {
    bench_row *w = &s->rows[k];
    if (w->n_prof > 0) {
        double attn = 0.0;
        for (int j = 0; j < w->n_prof; j++)
            if (reads_kv(w->prof[j].name)) attn += w->prof[j].ms;
        w->attn_ms = attn / o->reps;
    }
    char name[64];
    bench_row_name(w, name, sizeof name);
    strncat(name, s->label, sizeof name - strlen(name) - 1);
    row_profile_print(w, name, o->reps);
}

/* The model and device the report names, from our engine (copied: it is closed before the report). */
static void take_model_info(engine_result *res, const wk_model_info *info) {
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
    res->ctx = info->max_ctx;
}

/* Closes the side's engine (and its sequence): between the halves of a --vs-kv measurement. */
static void close_side(bench_side *s) {
    if (s->r.seq) wk_seq_destroy(s->r.seq);
    free(s->r.logits);
    if (s->e) wk_engine_close(s->e);
    s->r.seq = NULL, s->r.logits = NULL, s->e = NULL;
}

/* Opens the engine (and the --vs-kv one beside it), warms each up (pp and tg from an empty cache),
 * then for each row -r runs of: depth run, timed test, on each engine in turn. With --vs-kv the
 * runs come in two halves: the first with ours opened first, the second with both engines closed
 * and opened again the other way round. On lavapipe the engine opened first ran about 2% slower
 * than the other, whichever format it had (tg64, six run pairs each way, 2026-12-05), so a ratio
 * from one open order is biased by that much; the halves cancel it. Closes them. 0 or 1 (message
 * printed). */
static int measure_engine(const bench_engine_opts *o, const char *model, engine_result *res) {
    int max_depth = 0;
    for (int i = 0; i < o->n_depths; i++)
        if (o->depths[i] > max_depth) max_depth = o->depths[i];
    const int ctx = o->ctx ? o->ctx : max_depth + (o->n_prompt > o->n_gen ? o->n_prompt : o->n_gen);
    const int n_sides = o->vs ? 2 : 1, halves = o->vs && o->reps > 1 ? 2 : 1;
    int rc = 1, n_vs = 0, n_vocab = 0;
    bench_side sides[2] = {{.label = ""}, {.label = ""}};
    int32_t *depth = NULL, *prompt = NULL, *gen = NULL;
    if (make_rows(o, &res->rows, &res->n_rows) < 0 || (o->vs && make_rows(o, &res->vs_rows, &n_vs) < 0)) {
        fprintf(stderr, "wushkv bench: out of memory\n");
        return 1;
    }
    sides[0].rows = res->rows;
    sides[1].rows = res->vs_rows;
    if (o->vs)
        snprintf(sides[1].label, sizeof sides[1].label, " [%s]",
                 o->vs_kernels ? o->vs_kernels : kv_flags_format_name(&o->vs_kv));
    const kv_flags *flags[2] = {&o->kv, &o->vs_kv};
    const char *kernels[2] = {NULL, o->vs_kernels};
    bench_kv_info *kvi[2] = {&res->kv, &res->vs_kv};
    for (int h = 0; h < halves; h++) {
        const int i0 = h == 0 ? 0 : (o->reps + 1) / 2, i1 = halves == 2 && h == 0 ? (o->reps + 1) / 2 : o->reps;
        for (int n = 0; n < n_sides; n++) { /* ours first, then (second half) the other first */
            const int s = h == 0 ? n : n_sides - 1 - n;
            if (!(sides[s].e = open_side(o, model, flags[s], kernels[s], ctx, kvi[s]))) goto out;
        }
        if (h == 0) {
            const wk_model_info *info = wk_engine_info(sides[0].e);
            take_model_info(res, info);
            n_vocab = info->n_vocab;
            fprintf(stderr, "wushkv bench: %s on %s, KV %s; pp%d and tg%d at %d depth%s, %d run%s after a warm-up\n",
                    res->model_name, res->device, res->kv.desc, o->n_prompt, o->n_gen, o->n_depths,
                    o->n_depths == 1 ? "" : "s", o->reps, o->reps == 1 ? "" : "s");
            if (o->vs)
                fprintf(stderr, "wushkv bench: vs KV %s, kernels %s, run for run beside it; from run %d on, both opened "
                                "again, the other first\n", res->vs_kv.desc, res->vs_kv.kernels,
                        halves == 2 ? i1 + 1 : o->reps + 1);
            depth = malloc(((size_t)max_depth + 1) * sizeof *depth);
            prompt = malloc(((size_t)o->n_prompt + 1) * sizeof *prompt);
            gen = malloc(((size_t)o->n_gen + 1) * sizeof *gen);
            if (!depth || !prompt || !gen) {
                fprintf(stderr, "wushkv bench: out of memory\n");
                goto out;
            }
            /* llama-bench's ids: every pp and tg run starts with BOS, at depth too (test_prompt and
             * test_gen begin with it), and the depth run does. Both engines evaluate the same ids. */
            uint64_t rng = BENCH_TOKEN_SEED;
            fill_tokens(prompt, o->n_prompt, info, &rng);
            fill_tokens(gen, o->n_gen, info, &rng);
            fill_tokens(depth, max_depth, info, &rng);
            for (int k = 0; k < res->n_rows; k++)
                for (int s = 0; s < n_sides; s++) {
                    bench_row *w = &sides[s].rows[k];
                    if (!w->decode) continue;
                    w->kv_read = wk_kv_decode_read_bytes(sides[s].e, (uint64_t)w->depth);
                    for (int i = 0; i < w->n; i++)
                        w->kv_read_run += wk_kv_decode_read_bytes(sides[s].e, (uint64_t)(w->depth + i));
                }
        }
        for (int s = 0; s < n_sides; s++) {
            sides[s].r = (engine_run){
                .e = sides[s].e, .depth = depth, .prompt = prompt, .gen = gen, .batch = o->batch_tokens};
            if (prepare_side(o, &sides[s], n_vocab) < 0) goto out;
        }
        for (int k = 0; k < res->n_rows; k++)
            for (int i = i0; i < i1; i++)
                for (int j = 0; j < n_sides; j++) /* ours first in odd runs (i even), second in even ones */
                    if (timed_run(o, &sides[(i + j) % n_sides], k, i) < 0) goto out;
        if (h == halves - 1) res->profiled = wk_engine_profile(sides[0].e, NULL, 0) > 0;
        for (int s = 0; s < n_sides; s++) close_side(&sides[s]);
    }
    for (int k = 0; k < res->n_rows; k++)
        for (int s = 0; s < n_sides; s++) finish_row(o, &sides[s], k);
    rc = 0;
out:
    for (int s = 0; s < 2; s++) close_side(&sides[s]);
    free(gen);
    free(prompt);
    free(depth);
    return rc;
}

static void free_result(engine_result *res) {
    for (int k = 0; k < res->n_rows; k++) {
        if (res->rows) free(res->rows[k].ts);
        if (res->vs_rows) free(res->vs_rows[k].ts);
    }
    free(res->rows);
    free(res->vs_rows);
}

int bench_engine_run(const bench_engine_opts *o) {
    char model[4096];
    const char *path = cli_model_path("bench", o->common.model, model, sizeof model);
    if (!path) return 1;
    engine_result res = {0};
    int rc = measure_engine(o, path, &res);
    if (rc == 0 && res.profiled && strcmp(res.device_type, "CPU") == 0) {
        /* The CPU's memory bandwidth and FMA peak with as many threads as lavapipe runs, after our
         * engines are closed: the bound beside the profile's attention GB/s. */
        const char *lp = getenv("LP_NUM_THREADS");
        long threads = lp && atoi(lp) > 0 ? atoi(lp) : sysconf(_SC_NPROCESSORS_ONLN);
        bench_host_measure(threads > 0 ? (int)threads : 1, &res.host);
        res.host_measured = true;
    }
    if (rc == 0) {
        peer_result peer = {.kv = NULL};
        /* After our engine is closed, so the two never share the CPU. */
        if (o->peer) bench_run_peer(o, path, &res, &peer);
        if (o->common.json) rc = bench_engine_print_json(o, path, &res, &peer);
        else bench_engine_print_text(o, path, &res, &peer);
        if (o->peer && !peer.ok) {
            fprintf(stderr, "wushkv bench: %s\n", peer.error);
            rc = 1;
        }
    }
    free_result(&res);
    return rc;
}
