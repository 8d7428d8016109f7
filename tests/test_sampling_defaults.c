/* The server's sampling defaults without a model: openai_parse_generation fills the fields a request
 * leaves out from serve's defaults (llama-server's values) and keeps the ones it gives (temperature
 * 0 included); logits_penalize's repetition window (llama.cpp's repeat_last_n) against logits
 * worked out by hand. */
#include <string.h>

#include "api/openai_request.h"
#include "sched/logits.h"
#include "test_util.h"

static bool parse(const char *body, const api_sampling *d, gen_params *out) {
    api_model m = {.id = "m", .max_ctx = 4096, .chat = CHAT_CHATML, .sampling = d};
    openai_request r;
    api_error e;
    if (!openai_parse_generation(body, strlen(body), false, &m, &r, &e)) {
        fprintf(stderr, "  refused: %s\n", e.message);
        return false;
    }
    *out = r.gens[0];
    out->sampling = r.gens[0].sampling;
    openai_request_free(&r); /* the numbers copied above own nothing */
    return true;
}

static void test_defaults(void) {
    api_sampling d;
    api_sampling_default(&d);
    /* llama.cpp common/common.h (common_params_sampling): 0.8, 40, 0.95, 0.05, 1.0 over 64. */
    CHECK_NEAR(d.temperature, 0.8, 1e-7);
    CHECK_EQ_INT(d.top_k, 40);
    CHECK_NEAR(d.top_p, 0.95, 1e-7);
    CHECK_NEAR(d.min_p, 0.05, 1e-7);
    CHECK_NEAR(d.repeat_penalty, 1.0, 0);
    CHECK_EQ_INT(d.repeat_last_n, 64);

    gen_params g;
    /* Omitted: the server's. */
    d.repeat_penalty = 1.3f;
    CHECK(parse("{\"prompt\": \"x\"}", &d, &g));
    CHECK_NEAR(g.sampling.temperature, 0.8, 1e-7);
    CHECK_EQ_INT(g.sampling.top_k, 40);
    CHECK_NEAR(g.sampling.top_p, 0.95, 1e-7);
    CHECK_NEAR(g.sampling.min_p, 0.05, 1e-7);
    CHECK_NEAR(g.repetition_penalty, 1.3, 1e-7);
    CHECK_EQ_INT(g.repeat_last_n, 64);
    /* Given: the request's, 0 included; its repetition_penalty is vLLM's (every token). */
    CHECK(parse("{\"prompt\": \"x\", \"temperature\": 0, \"top_k\": 0, \"top_p\": 1, \"min_p\": 0, "
                "\"repetition_penalty\": 1.1}",
                &d, &g));
    CHECK_NEAR(g.sampling.temperature, 0.0, 0);
    CHECK_EQ_INT(g.sampling.top_k, 0);
    CHECK_NEAR(g.sampling.top_p, 1.0, 0);
    CHECK_NEAR(g.sampling.min_p, 0.0, 0);
    CHECK_NEAR(g.repetition_penalty, 1.1, 1e-7);
    CHECK_EQ_INT(g.repeat_last_n, -1);
    CHECK(parse("{\"prompt\": \"x\", \"top_k\": -1}", &d, &g)); /* vLLM's "off" */
    CHECK_EQ_INT(g.sampling.top_k, 0);
    CHECK_NEAR(g.sampling.temperature, 0.8, 1e-7);
    /* No server defaults: OpenAI's. */
    CHECK(parse("{\"prompt\": \"x\"}", NULL, &g));
    CHECK_NEAR(g.sampling.temperature, 1.0, 0);
    CHECK_EQ_INT(g.sampling.top_k, 0);
    CHECK_NEAR(g.sampling.top_p, 1.0, 0);
    CHECK_NEAR(g.sampling.min_p, 0.0, 0);
    CHECK_NEAR(g.repetition_penalty, 1.0, 0);
}

/* Vocabulary of 8; logits 2 (positive: divided) or -2 (negative: multiplied), penalty 2. */
static void test_repeat_window(void) {
    const int32_t prompt[] = {1, 2, 3, 1};
    const int32_t gen[] = {4, 5};
    int scratch[8] = {0};
    float l[8];
    /* The last 3 of 1 2 3 1 4 5 are 1 4 5: tokens 1, 4, 5 penalised once each; 2 and 3 not. */
    for (int i = 0; i < 8; i++) l[i] = i % 2 ? 2.0f : -2.0f;
    logits_penalize(l, prompt, 4, gen, 2, 0, 0, 2.0f, 3, scratch);
    const float want3[8] = {-2, 1, -2, 2, -4, 1, -2, 2};
    for (int i = 0; i < 8; i++) CHECK_NEAR(l[i], want3[i], 0);
    /* The last 1: token 5 only. */
    for (int i = 0; i < 8; i++) l[i] = i % 2 ? 2.0f : -2.0f;
    logits_penalize(l, prompt, 4, gen, 2, 0, 0, 2.0f, 1, scratch);
    const float want1[8] = {-2, 2, -2, 2, -2, 1, -2, 2};
    for (int i = 0; i < 8; i++) CHECK_NEAR(l[i], want1[i], 0);
    /* -1, or a window longer than the tokens: all of them (1, 2, 3, 4, 5), each once. */
    const float want_all[8] = {-2, 1, -4, 1, -4, 1, -2, 2};
    for (int last_n = -1; last_n <= 100; last_n += 101) {
        for (int i = 0; i < 8; i++) l[i] = i % 2 ? 2.0f : -2.0f;
        logits_penalize(l, prompt, 4, gen, 2, 0, 0, 2.0f, last_n, scratch);
        for (int i = 0; i < 8; i++) CHECK_NEAR(l[i], want_all[i], 0);
    }
    /* 0: none. */
    for (int i = 0; i < 8; i++) l[i] = 2.0f;
    logits_penalize(l, prompt, 4, gen, 2, 0, 0, 2.0f, 0, scratch);
    for (int i = 0; i < 8; i++) CHECK_NEAR(l[i], 2.0, 0);
    /* scratch is left all zero. */
    for (int i = 0; i < 8; i++) CHECK_EQ_INT(scratch[i], 0);
}

int main(void) {
    test_defaults();
    test_repeat_window();
    TEST_MAIN_END();
}
