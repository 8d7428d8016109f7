/* Sampling under a grammar (server/sched/grammar_pick.c) against its definition: the model's
 * distribution restricted to the allowed tokens, i.e. the whole row masked, then the sampler. For
 * each sampler (greedy, top-k, temperature alone, top-p, min-p) and random logits, the shortcut's
 * tokens over many seeds are compared with the masked row's: greedy must be the same token, the
 * others the same distribution (total variation within sampling noise), and every token allowed.
 * Which route each case takes is checked too, so a shortcut cannot silently fall back to the mask
 * and pass. No device needed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"
#include "sched/grammar_pick.h"
#include "test_rng.h"
#include "test_util.h"

enum { N = 40, DRAWS = 20000 };

/* Tokens "a".."t" and "aa".."tt"-like pairs: the grammar below allows about a third of them. */
static const char *pieces[N];
static char piece_text[N][3];

static wk_grammar_vocab *make_vocab(void) {
    size_t lens[N];
    for (int i = 0; i < N; i++) {
        piece_text[i][0] = (char)('a' + i % 20);
        piece_text[i][1] = i < 20 ? 0 : (char)('a' + (i * 7) % 20);
        pieces[i] = piece_text[i];
        lens[i] = strlen(piece_text[i]);
    }
    return grammar_vocab_from_pieces(pieces, lens, NULL, N);
}

/* Histogram of DRAWS tokens, each from a fresh sampler seeded with its index (as requests are). */
static void histogram(const wk_grammar *g, const wk_grammar_vocab *v, const wk_sampler_params *base, const float *logits,
                      bool shortcut, int counts[N], int *routes) {
    memset(counts, 0, N * sizeof *counts);
    for (int d = 0; d < DRAWS; d++) {
        wk_sampler_params p = *base;
        p.seed = (uint64_t)d * 2654435761u + (shortcut ? 0 : 1u << 31); /* independent streams */
        wk_sampler *s = wk_sampler_create(&p, N);
        wk_matcher *m = wk_matcher_create(g, v);
        float row[N];
        memcpy(row, logits, sizeof row);
        int32_t t;
        if (shortcut) {
            grammar_pick_route route;
            bool no_token;
            t = grammar_pick(m, s, &p, row, N, &route, &no_token);
            routes[route]++;
        } else {
            CHECK(wk_matcher_mask(m, row) > 0);
            t = wk_sampler_sample(s, row);
        }
        CHECK(t >= 0 && t < N && wk_matcher_allows(m, t));
        if (t >= 0 && t < N) counts[t]++;
        wk_matcher_destroy(m);
        wk_sampler_destroy(s);
    }
}

static void test_routes_match_the_mask(void) {
    wk_grammar *g = NULL;
    char err[WK_ERRMSG_LEN];
    /* allowed first characters: a, c, f, h..k, s, t (some single, some pairs) */
    const char *text = "root ::= [acfh-kst] [a-t]?";
    CHECK_EQ_INT(wk_grammar_parse(text, strlen(text), &g, err, sizeof err), WK_OK);
    wk_grammar_vocab *v = make_vocab();
    if (!g || !v) return;
    static const struct {
        const char *name;
        wk_sampler_params p;
        grammar_pick_route route;
    } cases[] = {
        {"greedy", {.temperature = 0.0f, .top_p = 1.0f}, PICK_BEST_K},
        {"top_k 4", {.temperature = 0.9f, .top_k = 4, .top_p = 1.0f}, PICK_BEST_K},
        {"top_k 4, top_p 0.8, min_p 0.1", {.temperature = 1.2f, .top_k = 4, .top_p = 0.8f, .min_p = 0.1f}, PICK_BEST_K},
        {"temperature alone", {.temperature = 1.0f, .top_p = 1.0f}, PICK_DRAWS},
        {"top_p 0.9", {.temperature = 1.0f, .top_p = 0.9f}, PICK_MASK},
        {"min_p 0.05", {.temperature = 0.7f, .top_p = 1.0f, .min_p = 0.05f}, PICK_MASK},
    };
    rng_seed(3);
    for (int trial = 0; trial < 3; trial++) {
        float logits[N];
        for (int i = 0; i < N; i++) logits[i] = (float)(rng_u64() % 4000) / 1000.0f; /* 0..4: no token dominates */
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            int a[N], b[N], routes[3] = {0}, unused[3] = {0};
            histogram(g, v, &cases[c].p, logits, true, a, routes);
            histogram(g, v, &cases[c].p, logits, false, b, unused);
            double tv = 0;
            for (int i = 0; i < N; i++) tv += abs(a[i] - b[i]) / (2.0 * DRAWS);
            /* two samples of 20000 from one distribution over <= 40 tokens: TV ~ 0.01-0.02 */
            if (tv > 0.035) fprintf(stderr, "%s, trial %d: total variation %.4f\n", cases[c].name, trial, tv);
            CHECK(tv <= 0.035);
            if (cases[c].p.temperature <= 0.0f) CHECK(memcmp(a, b, sizeof a) == 0); /* greedy: one token */
            /* the route the case is meant to take: always, or for draws mostly (three refusals in a
             * row, about a third allowed here, fall back to the mask) */
            int want = cases[c].route == PICK_DRAWS ? DRAWS / 2 : DRAWS;
            if (routes[cases[c].route] < want) fprintf(stderr, "%s: route %d taken %d times\n", cases[c].name, cases[c].route, routes[cases[c].route]);
            CHECK(routes[cases[c].route] >= want);
        }
    }
    wk_grammar_vocab_destroy(v);
    wk_grammar_free(g);
}

int main(void) {
    test_routes_match_the_mask();
    TEST_MAIN_END();
}
