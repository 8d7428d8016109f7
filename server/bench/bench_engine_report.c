/* `wushkv bench` engine mode's report: llama-bench's markdown table with our columns (KV bytes a
 * decode step reads, the attention's bytes/s under the profile, the --vs-kv format's tok/s and
 * ratio, the peer's), or one JSON object with the same figures, every run's too. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bench/bench_engine.h"
#include "cli/cli_common.h"

static double round_to(double x, double unit) { return round(x / unit) * unit; }

static void add_num_or_null(cJSON *obj, const char *key, double v, double unit) {
    if (isnan(v) || isinf(v)) cJSON_AddNullToObject(obj, key);
    else cJSON_AddNumberToObject(obj, key, round_to(v, unit));
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

/* --vs-kv: ours / the other format's tok/s, run by run (run i of each ran back to back), into r[0..n-1];
 * returns false when a run measured nothing. */
static bool vs_ratios(const bench_row *a, const bench_row *b, size_t n, double *r) {
    for (size_t i = 0; i < n; i++) {
        if (!(b->ts[i] > 0.0)) return false;
        r[i] = a->ts[i] / b->ts[i];
    }
    return true;
}

static void add_runs(cJSON *obj, const char *key, const double *x, size_t n, double unit) {
    cJSON *a = cJSON_AddArrayToObject(obj, key);
    for (size_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(round_to(x[i], unit)));
}

static void add_kv_info(cJSON *obj, const bench_kv_info *kv) {
    cJSON_AddStringToObject(obj, "kv", kv->desc);
    cJSON_AddNumberToObject(obj, "bits_per_element", kv->bits_per_element);
    cJSON_AddNumberToObject(obj, "kv_bytes_per_token", (double)kv->bytes_per_token);
    cJSON_AddStringToObject(obj, "kernels_chosen", kv->kernels);
}

int bench_engine_print_json(const bench_engine_opts *o, const char *model, const engine_result *res,
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
    add_kv_info(obj, &res->kv);
    if (res->vs_rows) add_kv_info(cJSON_AddObjectToObject(obj, "vs"), &res->vs_kv);
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
        bench_row_name(w, name, sizeof name);
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
        if (res->vs_rows) {
            const bench_row *v = &res->vs_rows[k];
            double r[BENCH_MAX_REPS];
            bool ok = vs_ratios(w, v, n, r);
            add_num_or_null(t, "vs_tokens_per_s", bench_mean(v->ts, n), 0.01);
            add_num_or_null(t, "vs_tokens_per_s_stddev", bench_stddev(v->ts, n), 0.01);
            add_runs(t, "vs_runs_tokens_per_s", v->ts, n, 0.01);
            add_num_or_null(t, "vs_attention_ms_per_token", v->attn_ms / v->n, 0.0001);
            if (v->decode) cJSON_AddNumberToObject(t, "vs_kv_read_bytes_per_token", (double)v->kv_read);
            add_num_or_null(t, "vs_ratio", ok ? bench_mean(r, n) : NAN, 0.001);
            add_num_or_null(t, "vs_ratio_stddev", ok ? bench_stddev(r, n) : NAN, 0.001);
            if (ok) add_runs(t, "vs_ratio_runs", r, n, 0.001);
            else cJSON_AddNullToObject(t, "vs_ratio_runs");
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
        cJSON_AddStringToObject(p, "kv_why", bench_peer_kv_note(o));
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

void bench_engine_print_text(const bench_engine_opts *o, const char *model, const engine_result *res,
                             const peer_result *peer) {
    const size_t n = (size_t)o->reps;
    printf("model:  %s (%s)\n", res->model_name, model);
    printf("device: %s (%s; driver %s%s%s; subgroup %u, shared memory %u KiB; kernels %s: %s)\n", res->device,
           res->device_type, res->driver[0] ? res->driver : "?", res->driver_info[0] ? " " : "", res->driver_info,
           res->subgroup, res->shared_memory / 1024, res->kernels ? res->kernels : "?", res->kernel_variants);
    printf("KV:     %s, %.2f bits/element, %llu bytes/token; ctx %d, batch %d, %d run%s after 1 warm-up\n",
           res->kv.desc, res->kv.bits_per_element, res->kv.bytes_per_token, res->ctx, o->batch_tokens, o->reps,
           o->reps == 1 ? "" : "s");
    if (res->host_measured)
        printf("host:   %d threads: memory read %.1f GB/s, f32 FMA %.1f GFLOP/s (%s; C, this run)\n", res->host.threads,
               res->host.read_gbps, res->host.fma_gflops, res->host.fma_isa);
    if (res->vs_rows)
        printf("vs:     %s, %.2f bits/element, %llu bytes/token; kernels %s; its runs alternate with ours (ours "
               "first in odd runs, second in even); ratio: ours / its tok/s, mean +/- stddev over the run pairs\n",
               res->vs_kv.desc, res->vs_kv.bits_per_element, res->vs_kv.bytes_per_token, res->vs_kv.kernels);
    if (o->peer)
        printf("peer:   %s, KV cache %s (%s)\n", o->peer, peer->kv ? peer->kv : bench_peer_kv(o),
               bench_peer_kv_note(o));
    printf("\n| %-15s | wushkv tok/s             | KV read/token |", "test");
    if (res->profiled) printf(" attn GB/s |");
    if (res->vs_rows) printf(" vs tok/s                 | wushkv/vs         |");
    if (o->peer) printf(" peer tok/s               | wushkv/peer |");
    printf("\n|-----------------|--------------------------|---------------|");
    if (res->profiled) printf("-----------|");
    if (res->vs_rows) printf("--------------------------|-------------------|");
    if (o->peer) printf("--------------------------|-------------|");
    putchar('\n');
    for (int k = 0; k < res->n_rows; k++) {
        const bench_row *w = &res->rows[k];
        char name[48], rb[32] = "-";
        bench_row_name(w, name, sizeof name);
        double mean = bench_mean(w->ts, n);
        if (w->decode) human_bytes((double)w->kv_read, rb, sizeof rb);
        printf("| %-15s | %10.2f +/- %-9.2f | %13s |", name, mean, bench_stddev(w->ts, n), rb);
        if (res->profiled) {
            double bw = attn_bytes_per_s(w);
            if (isnan(bw)) printf(" %9s |", "-");
            else printf(" %9.2f |", bw / 1e9);
        }
        if (res->vs_rows) {
            const bench_row *v = &res->vs_rows[k];
            double r[BENCH_MAX_REPS];
            printf(" %10.2f +/- %-9.2f |", bench_mean(v->ts, n), bench_stddev(v->ts, n));
            if (vs_ratios(w, v, n, r)) printf(" %7.3f +/- %-5.3f |", bench_mean(r, n), bench_stddev(r, n));
            else printf(" %-17s |", "-");
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
