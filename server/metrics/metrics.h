/* Prometheus metrics of the daemon: counters, gauges and histograms updated from the engine and
 * loop threads, rendered as Prometheus text. Names follow vLLM's under the "wushkv:" prefix. */
#ifndef WUSHKV_METRICS_H
#define WUSHKV_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct metrics metrics;

typedef struct metrics_pool {
    int running, waiting;
    uint64_t kv_used_bytes, kv_capacity_bytes;
    int kv_used_blocks, kv_capacity_blocks;
} metrics_pool;

metrics *metrics_create(void);
void metrics_free(metrics *m);

/* Engine thread. */
void metrics_set_pool(metrics *m, const metrics_pool *p);
void metrics_tokens(metrics *m, int prompt_tokens, int generation_tokens);
/* A running sequence was preempted (its KV blocks freed; it is recomputed when readmitted). */
void metrics_preemption(metrics *m);
/* ttft / tpot < 0: not measured (no token produced / fewer than two). */
void metrics_request_done(metrics *m, const char *finish_reason, int prompt_tokens, int generation_tokens,
                          double queue_s, double ttft_s, double tpot_s, double e2e_s, uint64_t kv_bytes);
void metrics_step(metrics *m, int batch_sequences, int batch_tokens, double seconds);

/* Loop thread. */
void metrics_http_response(metrics *m, int status);
/* The whole exposition, malloc'd (caller frees), *len its length. */
char *metrics_render(metrics *m, const char *model_name, size_t *len);

#endif
