/* A few host threads that run one job list at a time with the calling thread: the host's own work
 * for a step (the weight products on a CPU Vulkan device, host_matmul.h) spread over the cores that
 * lavapipe leaves idle while its queue is empty. */
#ifndef WK_HOST_POOL_H
#define WK_HOST_POOL_H

#include <stddef.h>

typedef struct wk_host_pool wk_host_pool;

/* job(ctx, j) for one job index j; jobs run in any order on any thread, each exactly once. */
typedef void (*wk_host_job)(void *ctx, int j);

/* A pool of `threads` threads in all, the caller of wk_host_pool_run counted as one (threads - 1
 * are started; 1 starts none). 0: as many as the CPUs this process may run on. NULL when a thread
 * or the memory cannot be had (err says which). */
wk_host_pool *wk_host_pool_create(int threads, char *err, size_t errlen);
/* Runs job(ctx, 0..n_jobs-1) on the pool's threads and returns when all are done. Jobs are handed
 * out one at a time in index order, so uneven jobs balance. One caller at a time. */
void wk_host_pool_run(wk_host_pool *p, int n_jobs, wk_host_job job, void *ctx);
int wk_host_pool_threads(const wk_host_pool *p);
void wk_host_pool_destroy(wk_host_pool *p);

/* The CPUs this process may run on (its affinity mask; at least 1). */
int wk_host_cpus(void);

#endif
