/* KV transforms through the public API: with the f16 cache, a Hadamard or WUSH transform (keys
 * after RoPE, values folded into W_v / W_o) must leave the logits unchanged up to rounding —
 * the proof that the fold and the key/query pair are exact; a sidecar for another model is
 * refused; and at 2 bits the transforms are actually applied (the logits move). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_rng.h"
#include "engine_int.h"
#include "test_engine_env.h"
#include "test_util.h"
#include "tiny_model.h"
#include "wushkv/research.h"

/* The validation layer is on (p.validation): it must have said nothing by the time an engine closes. */
static void close_checked(wk_engine *e) {
    if (e) CHECK_EQ_INT(wk_engine_validation_messages(e), 0);
    wk_engine_close(e);
}

enum { N = 40 };

static void tokens(int32_t *t, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(3 + rng_xorshift64(&seed) % 500);
    t[0] = 1;
}

static wk_engine *open_engine(const char *model, int bits, int transform, const char *wush, char *err, size_t errlen) {
    wk_engine_params p;
    tiny_engine_params(&p, model);
    p.validation = true;
    p.kv_bits = bits;
    p.kv_transform = transform;
    p.wush_path = wush;
    test_engine_params_from_env(&p);
    wk_engine *e = NULL;
    return wk_engine_open(&p, &e, err, errlen) == 0 ? e : NULL;
}

/* Logits of every position of one sequence: one step of all N tokens, or (tail > 0) the first
 * N - tail in one step and the rest in steps of tail_step (fewer than WK_XFORM_TOKENS: the
 * transform's decode twin). */
static float *run_steps(wk_engine *e, const int32_t *tok, int tail, int tail_step) {
    const int V = wk_engine_info(e)->n_vocab;
    float *out = malloc(sizeof(float) * N * V);
    wk_seq *s = NULL;
    char err[WK_ERRMSG_LEN];
    CHECK_EQ_INT(wk_seq_create(e, &s), 0);
    for (int p = 0; p < N;) {
        const int n = p < N - tail ? N - tail : tail_step;
        wk_batch_item it = {s, tok + p, n, true};
        int got = wk_forward(e, &it, 1, out + (size_t)p * V, err, sizeof err);
        CHECK_EQ_INT(got, n);
        if (got != n) fprintf(stderr, "forward: %s\n", err);
        p += n;
    }
    wk_seq_destroy(s);
    return out;
}

static float *run(wk_engine *e, const int32_t *tok) { return run_steps(e, tok, 0, 0); }

int main(void) {
    char model_a[64], model_b[64], side_a[64], side_b[64], err[WK_ERRMSG_LEN] = "";
    temp_path(model_a, sizeof model_a, "transform_a");
    temp_path(model_b, sizeof model_b, "transform_b");
    temp_path(side_a, sizeof side_a, "transform_sa");
    temp_path(side_b, sizeof side_b, "transform_sb");
    tiny_model_opts oa = {.arch = "gemma3", .seed = 21, .mixed_quants = true}, ob = {.arch = "gemma3", .seed = 22};
    CHECK(tiny_model_write(&oa, model_a));
    CHECK(tiny_model_write(&ob, model_b));

    /* Sidecars for both models from a few random-token chunks. */
    const char *models[2] = {model_a, model_b}, *sides[2] = {side_a, side_b};
    for (int m = 0; m < 2; m++) {
        wk_engine *e = open_engine(models[m], 16, 0, NULL, err, sizeof err);
        CHECK(e != NULL);
        if (!e) continue;
        wk_calib_params cp;
        wk_calib_params_default(&cp);
        wk_calib *c = NULL;
        int rc = wk_calib_create(e, &cp, &c, err, sizeof err);
        int32_t tok[N];
        for (int k = 0; !rc && k < 4; k++) tokens(tok, N, 77 + (uint64_t)k), rc = wk_calib_add(c, tok, N, err, sizeof err);
        wk_calib_report rep;
        if (!rc) rc = wk_calib_finish(c, sides[m], &rep, err, sizeof err);
        CHECK_EQ_INT(rc, 0);
        if (rc) fprintf(stderr, "calibrate: %s\n", err);
        wk_calib_destroy(c);
        close_checked(e);
    }

    int32_t tok[N];
    tokens(tok, N, 5);
    wk_engine *plain = open_engine(model_a, 16, WK_KV_TRANSFORM_NONE, NULL, err, sizeof err);
    wk_engine *had = open_engine(model_a, 16, WK_KV_TRANSFORM_HADAMARD, NULL, err, sizeof err);
    wk_engine *wush = open_engine(model_a, 16, WK_KV_TRANSFORM_WUSH, side_a, err, sizeof err);
    CHECK(plain && had && wush);
    if (plain && had && wush) {
        const int V = wk_engine_info(plain)->n_vocab;
        float *a = run(plain, tok), *b = run(had, tok), *c = run(wush, tok);
        double eh = rel_err(b, a, (size_t)N * V), ew = rel_err(c, a, (size_t)N * V);
        printf("f16 cache: hadamard vs none rel err %.2e, wush vs none %.2e\n", eh, ew);
        /* Not bit-exact because the folded W_v and W_o are rounded into q8a16 (their originals
         * convert exactly; half a step of 255 per 16 elements: 7.7e-3 here, 7e-4 when they were
         * f16) and the K transform sums in another order. A fold left out (W_o without T_V^-1)
         * gives ~1. */
        CHECK(eh < 2e-2);
        CHECK(ew < 2e-2);
        /* Blocks of 16, 32 and 64 (head_dim 64; 4 query heads on 2 KV heads, so a query tile mixes
         * tokens and heads, kv_transform.comp), each for a step of many tokens (not a whole number
         * of tiles: 35 and 40) and through the decode twin (steps of 1 and of 5 tokens); a row
         * computed into the wrong place or one unit's x mixed with another's moves the logits by
         * O(1). */
        const int groups[3] = {16, 32, 64};
        for (int gi = 0; gi < 3; gi++) {
            wk_engine_params p;
            tiny_engine_params(&p, model_a);
            p.validation = true;
            p.kv_bits = 16;
            p.kv_transform = WK_KV_TRANSFORM_HADAMARD;
            p.kv_group = groups[gi];
            test_engine_params_from_env(&p);
            wk_engine *hg = NULL;
            CHECK_EQ_INT(wk_engine_open(&p, &hg, err, sizeof err), 0);
            if (!hg) continue;
            float *g = run(hg, tok), *gd = run_steps(hg, tok, 4, 1), *g5 = run_steps(hg, tok, 5, 5);
            double eg = rel_err(g, a, (size_t)N * V), ed = rel_err(gd, a, (size_t)N * V);
            double e5 = rel_err(g5, a, (size_t)N * V);
            printf("f16 cache: hadamard blocks of %d vs none rel err %.2e, decoding the last 4 %.2e, a 5-token "
                   "step %.2e\n", groups[gi], eg, ed, e5);
            CHECK(eg < 2e-2);
            CHECK(ed < 2e-2);
            CHECK(e5 < 2e-2);
            free(g), free(gd), free(g5);
            close_checked(hg);
        }
        free(a), free(b), free(c);
    }
    close_checked(plain);
    close_checked(had);
    close_checked(wush);

    /* At 2 bits the transform changes what is quantized, so the logits must differ between none
     * and WUSH (a transform silently skipped would give identical logits). */
    wk_engine *q_none = open_engine(model_a, 2, WK_KV_TRANSFORM_NONE, NULL, err, sizeof err);
    wk_engine *q_wush = open_engine(model_a, 2, WK_KV_TRANSFORM_WUSH, side_a, err, sizeof err);
    CHECK(q_none && q_wush);
    if (q_none && q_wush) {
        const int V = wk_engine_info(q_none)->n_vocab;
        float *a = run(q_none, tok), *c = run(q_wush, tok);
        double d = rel_err(c, a, (size_t)N * V);
        printf("int2 cache: wush vs none differ by %.2e\n", d);
        CHECK(d > 1e-3);
        free(a), free(c);
    }
    close_checked(q_none);
    close_checked(q_wush);

    /* Another model's sidecar, and a WUSH request without one, are refused with a reason. */
    wk_engine *wrong = open_engine(model_a, 16, WK_KV_TRANSFORM_WUSH, side_b, err, sizeof err);
    CHECK(wrong == NULL);
    CHECK(strstr(err, "fingerprint") != NULL);
    printf("wrong sidecar: %s\n", err);
    close_checked(wrong);
    wk_engine *none = open_engine(model_a, 16, WK_KV_TRANSFORM_WUSH, NULL, err, sizeof err);
    CHECK(none == NULL);
    CHECK(strstr(err, "sidecar") != NULL);
    close_checked(none);

    unlink(model_a), unlink(model_b), unlink(side_a), unlink(side_b);
    TEST_MAIN_END();
}
