/* The HTTP API of `wushkv serve` on the loop thread: routing, auth, CORS, the OpenAI endpoints
 * (their responses and SSE streams built from engine events), /health, /metrics, /v1/models,
 * /tokenize, /detokenize. */
#ifndef WUSHKV_API_H
#define WUSHKV_API_H

#include <stdbool.h>

#include <uv.h>

#include "http/http.h"
#include "wushkv/wushkv.h"
#include "sched/scheduler.h"
#include "api/openai_request.h"

typedef struct serve_config {
    /* What the engine opens: model, device, context, max_seqs (sequences decoded together),
     * max_batch_tokens (tokens per forward step) and the KV cache format, as the CLI's flags set
     * them. model_path must be set (the CLI resolves the default model). */
    wk_engine_params engine;
    char kv_desc[128];    /* the KV format in words ("int2 quest G32 wush"), for the ready line */
    sched_prepare_fn prepare; /* run on the engine thread before it opens (the WUSH sidecar cache); NULL: none */
    void *prepare_data;
    /* Sampling for the request fields a client leaves out (serve --temp, --top-k, --top-p,
     * --min-p, --repeat-penalty, --repeat-last-n); a field the request gives wins. */
    api_sampling sampling;
    const char *host;
    int port;
    int max_queue;        /* requests waiting beyond engine.max_seqs; more: 429 */
    const char *api_key;  /* NULL: no auth */
    const char *cors_origin;
    const char *served_name; /* NULL: the GGUF's file name without .gguf */
    bool log_prompts, verbose;
    double drain_timeout_s;
    http_limits limits;
} serve_config;

typedef struct api_server api_server;

/* Starts listening at once (/health says 503 "loading" until the engine is warm) and starts the
 * engine thread. Returns NULL with a message on stderr. */
typedef void (*api_fatal_cb)(void *data); /* the engine could not start: the daemon should exit 1 */
api_server *api_start(uv_loop_t *loop, const serve_config *cfg, api_fatal_cb on_fatal, void *data);
/* Stops accepting work: new requests get 503, running ones go on. */
void api_begin_drain(api_server *a);
/* Generations still in flight (running or queued). */
int api_in_flight(const api_server *a);
/* Closes connections, stops the engine thread, frees everything (run the loop afterwards so
 * libuv finishes closing handles). */
void api_stop(api_server *a);
/* 0 unless the engine failed to start (then 1). */
int api_exit_status(const api_server *a);

#endif
