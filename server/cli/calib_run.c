/* The WUSH-KV calibration loop shared by `wushkv calibrate` and the sidecar cache (see
 * calib_run.h): text prefix -> chunks with BOS first -> wk_calib_add each -> wk_calib_finish. */
#include "cli/calib_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_common.h"
#include "metrics/mono_clock.h"

void calib_run_opts_default(calib_run_opts *o) {
    memset(o, 0, sizeof *o);
    o->tokens = CALIB_DEFAULT_TOKENS;
    o->chunk = 512;
    o->group = 32;
    o->v_moments = WK_CALIB_V_MASS;
}

/* Tokens of the text (no BOS: each chunk gets its own) up to at least `want` of them. Only a
 * prefix of the text is tokenized, grown until it holds enough: the calibration needs a few
 * thousand tokens of a file that may hold millions. The last tokens of a prefix may be cut
 * differently from the whole text's, so the prefix is taken with room to spare. */
static int32_t *tokenize_prefix(const char *cmd, const wk_engine *e, const char *text, size_t len, int want,
                                int *n_out) {
    size_t take = (size_t)want * 8 + 4096;
    for (;;) {
        if (take > len) take = len;
        int n;
        int32_t *toks = cli_tokenize(cmd, e, text, take, false, false, &n);
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
    printf("layer head  kind    gain_K   gain_V |  V:plain    V:mass   V:mass2 | sink | key_err\n");
    double lk = 0, lv = 0, lvb[3] = {0};
    const int n = r->n_layer * r->n_head_kv;
    for (int i = 0; i < n; i++) {
        const wk_calib_head *h = &r->heads[i];
        printf("%5d %4d  %-6s %8.3f %8.3f | %8.3f  %8.3f  %8.3f | %4.2f | %10.4g\n", h->layer, h->kv_head,
               h->swa ? "swa" : "global", h->gain_k, h->gain_v, h->gain_v_by[0], h->gain_v_by[1], h->gain_v_by[2],
               h->sink_mass, h->key_err);
        lk += log(h->gain_k);
        lv += log(h->gain_v);
        for (int v = 0; v < 3; v++) lvb[v] += log(h->gain_v_by[v]);
    }
    printf("geomean           %8.3f %8.3f | %8.3f  %8.3f  %8.3f |\n", exp(lk / n), exp(lv / n), exp(lvb[0] / n),
           exp(lvb[1] / n), exp(lvb[2] / n));
    printf("sink: share of the attention mass on position 0 (BOS)\n");
    printf("key_err: predicted relative error of the attention output per unit relative noise on\n"
           "the transformed keys (larger: the layer's keys lose more to a coarse code; the default\n"
           "format's wide keys go to the full-attention layers where it is largest)\n");
    printf("model fingerprint %s\n", r->fingerprint);
}

int calib_run(const char *cmd, wk_engine *e, const char *text, size_t len, const calib_run_opts *o, const char *out) {
    const wk_model_info *info = wk_engine_info(e);
    char err[WK_ERRMSG_LEN] = "";
    int rc = -1;
    int32_t *chunk = malloc((size_t)o->chunk * sizeof *chunk);
    wk_calib *cal = NULL;
    const bool bos = info->add_bos && info->bos >= 0;
    const int per_chunk = o->chunk - (bos ? 1 : 0); /* text tokens in a chunk */
    int n_chunks = (o->tokens + o->chunk - 1) / o->chunk;
    int n_text = 0;
    int32_t *toks = chunk ? tokenize_prefix(cmd, e, text, len, n_chunks * per_chunk, &n_text) : NULL;
    if (!toks) goto out;
    if (n_text < n_chunks * per_chunk) {
        fprintf(stderr, "wushkv %s: %s holds %d tokens, fewer than --tokens asks; using them all\n", cmd,
                o->text_name, n_text);
        n_chunks = (n_text + per_chunk - 1) / per_chunk;
    }
    if (n_chunks == 0) {
        fprintf(stderr, "wushkv %s: %s holds no tokens\n", cmd, o->text_name);
        goto out;
    }
    /* Each transform is fitted to a block's second moments, a G x G matrix per KV head: from fewer
     * than a few G samples it is (nearly) singular, and the transforms would fit this text's few
     * keys, not the model's. */
    const int min_tokens = 4 * o->group, n_eval = n_text + (bos ? n_chunks : 0); /* as --tokens counts */
    if (n_eval < min_tokens) {
        fprintf(stderr,
                "wushkv %s: %s holds %d tokens, too few to fit transforms of blocks of %d (their moments need at "
                "least %d tokens; the default reads %d)\n",
                cmd, o->text_name, n_eval, o->group, min_tokens, CALIB_DEFAULT_TOKENS);
        goto out;
    }
    if (n_eval < 32 * o->group)
        fprintf(stderr, "wushkv %s: warning: %d tokens fit blocks of %d only roughly; give %d or more\n", cmd, n_eval,
                o->group, 32 * o->group);

    wk_calib_params cp;
    wk_calib_params_default(&cp);
    cp.block = o->group;
    cp.v_moments = o->v_moments;
    cp.n_threads = o->threads;
    cp.text_name = o->text_name;
    int st = wk_calib_create(e, &cp, &cal, err, sizeof err);
    if (st < 0) {
        fprintf(stderr, "wushkv %s: %s: %s\n", cmd, wk_strerror(st), err);
        goto out;
    }

    const bool tty = isatty(STDERR_FILENO);
    double t_run = mono_now_s();
    uint64_t done_tokens = 0;
    int left = o->tokens; /* tokens still to evaluate, BOS included */
    for (int k = 0, used = 0; k < n_chunks; k++) {
        int n = left < o->chunk ? left : o->chunk, m = 0;
        if (bos) chunk[m++] = info->bos;
        while (m < n && used < n_text) chunk[m++] = toks[used++];
        if (m < 2) break; /* BOS alone says nothing */
        if (o->cancelled && o->cancelled(o->cancel_data)) {
            fprintf(stderr, "%swushkv %s: calibration stopped after %d of %d chunks\n", tty ? "\n" : "", cmd, k,
                    n_chunks);
            goto out;
        }
        st = wk_calib_add(cal, chunk, m, err, sizeof err);
        if (st < 0) {
            fprintf(stderr, "%swushkv %s: chunk %d: %s: %s\n", tty ? "\n" : "", cmd, k + 1, wk_strerror(st), err);
            goto out;
        }
        left -= m;
        done_tokens += (uint64_t)m;
        progress(k + 1, n_chunks, done_tokens, mono_now_s() - t_run, tty);
    }
    double t_fin = mono_now_s();
    wk_calib_report rep;
    st = wk_calib_finish(cal, out, &rep, err, sizeof err);
    if (st < 0) {
        fprintf(stderr, "wushkv %s: %s: %s\n", cmd, wk_strerror(st), err);
        goto out;
    }
    if (o->print_report) print_report(&rep, info->name);
    fprintf(stderr, "wushkv %s: wrote %s; capture and moments %.1f s, transforms %.2f s\n", cmd, out, t_fin - t_run,
            mono_now_s() - t_fin);
    rc = 0;
out:
    wk_calib_destroy(cal);
    free(toks);
    free(chunk);
    return rc;
}
