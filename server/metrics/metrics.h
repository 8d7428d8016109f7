/* Prometheus metrics of the daemon: counters, gauges and histograms updated from the engine and
 * loop threads, rendered as Prometheus text. Names follow vLLM's under the "wushkv:" prefix. */
#ifndef WUSHKV_METRICS_H
#define WUSHKV_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

typedef struct metrics metrics;

/* One live request as the dashboard lists it. */
typedef struct metrics_live {
    uint64_t id;
    char state;          /* 'w' waiting, 'p' prefilling, 'd' decoding */
    int prompt_tokens, generated_tokens;
    uint64_t kv_bytes;   /* device bytes its sequence holds now */
    uint64_t fp16_bytes; /* what an f16 cache would hold for its tokens */
    double age_s;        /* since it arrived */
} metrics_live;

#define METRICS_MAX_LIVE 64

typedef struct metrics_pool {
    int running, waiting;
    uint64_t kv_used_bytes, kv_capacity_bytes;
    uint64_t kv_fp16_bytes; /* what an f16 cache would hold for the same tokens */
    int kv_used_blocks, kv_capacity_blocks;
    /* Blocks only the prefix cache keeps (free for any allocation, which evicts them); used
     * counts each block sequences hold once, however many share it. */
    uint64_t kv_cached_bytes;
    int kv_cached_blocks;
    int n_live;             /* requests listed in live (the first METRICS_MAX_LIVE) */
    metrics_live live[METRICS_MAX_LIVE];
} metrics_pool;

/* A finished request's figures; a time < 0 was not measured (no token, or fewer than two). */
typedef struct metrics_request {
    const char *finish_reason; /* stop, length, abort, error */
    int prompt_tokens, generation_tokens;
    int max_tokens;       /* its max_tokens parameter (the context's room when it gave none) */
    double queue_s;       /* arrival -> first admitted */
    double ttft_s;        /* arrival -> first token */
    double prefill_s;     /* first admitted -> first token */
    double decode_s;      /* first token -> last token */
    double tpot_s;        /* decode_s / (generation_tokens - 1) */
    double e2e_s;         /* arrival -> end */
    uint64_t kv_bytes;    /* peak KV bytes its sequence held */
} metrics_request;

metrics *metrics_create(void);
void metrics_free(metrics *m);

/* Engine thread. */
void metrics_set_pool(metrics *m, const metrics_pool *p);
void metrics_tokens(metrics *m, int prompt_tokens, int generation_tokens);
/* A running sequence was preempted (its KV blocks freed; it is recomputed when readmitted). */
void metrics_preemption(metrics *m);
/* A new request looked up the prefix cache: queries prompt tokens, of which hits were cached (as
 * vLLM counts them: a preempted request's second lookup is not counted). */
void metrics_prefix_cache(metrics *m, int queries, int hits);
/* ttft / tpot < 0: not measured (no token produced / fewer than two). */
void metrics_request_done(metrics *m, const metrics_request *r);
/* One output token of a request came `seconds` after its previous one. */
void metrics_inter_token(metrics *m, double seconds);
void metrics_step(metrics *m, int batch_sequences, int batch_tokens, double seconds);

/* Loop thread. */
void metrics_http_response(metrics *m, int status);
/* The HTTP layer's connections: open now, refused beyond --max-connections, idle ones reaped. */
void metrics_connections(metrics *m, int open, uint64_t rejected, uint64_t reaped);
/* The whole exposition, malloc'd (caller frees), *len its length. */
char *metrics_render(metrics *m, const char *model_name, size_t *len);
/* The dashboard's state as JSON: the pool (bytes used, capacity, the f16 equivalent), running and
 * waiting, cumulative token and latency counters (the page turns them into rates and means per
 * interval) and the live requests. NULL when out of memory. Any thread. */
cJSON *metrics_state(metrics *m);

#endif
