/* The host thread pool (host_pool.h): workers sleep on a condition variable between job lists;
 * each list is handed out through one atomic counter, the caller working beside them. */
#include "host/host_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "wushkv/wushkv.h"

struct wk_host_pool {
    pthread_mutex_t lock;
    pthread_cond_t work;   /* a new list (generation moved) or shutdown */
    pthread_cond_t done;   /* the last busy worker finished */
    int n_workers;
    pthread_t *workers;
    unsigned long generation;
    int busy;              /* workers still in the current list */
    bool stop;
    /* the current list */
    wk_host_job job;
    void *ctx;
    int n_jobs;
    atomic_int next;
};

static void take_jobs(wk_host_pool *p) {
    for (int j; (j = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < p->n_jobs;) p->job(p->ctx, j);
}

static void *worker(void *arg) {
    wk_host_pool *p = arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->work, &p->lock);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->lock);
        take_jobs(p);
        pthread_mutex_lock(&p->lock);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int wk_host_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return 1;
}

wk_host_pool *wk_host_pool_create(int threads, char *err, size_t errlen) {
    if (threads <= 0) threads = wk_host_cpus();
    if (threads > 256) threads = 256;
    wk_host_pool *p = calloc(1, sizeof *p);
    if (p) p->workers = calloc((size_t)threads, sizeof *p->workers);
    if (!p || !p->workers) {
        free(p);
        wk_fail(err, errlen, WK_ERR_NOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    for (int i = 0; i < threads - 1; i++) {
        int rc = pthread_create(&p->workers[i], NULL, worker, p);
        if (rc) {
            wk_fail(err, errlen, WK_ERR_NOMEM, "starting host thread %d of %d: %s", i + 2, threads, strerror(rc));
            wk_host_pool_destroy(p);
            return NULL;
        }
        p->n_workers++;
    }
    return p;
}

void wk_host_pool_run(wk_host_pool *p, int n_jobs, wk_host_job job, void *ctx) {
    if (n_jobs <= 0) return;
    pthread_mutex_lock(&p->lock);
    p->job = job;
    p->ctx = ctx;
    p->n_jobs = n_jobs;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    /* A single job, or no workers: no one to wake. */
    const bool wake = p->n_workers > 0 && n_jobs > 1;
    if (wake) {
        p->busy = p->n_workers;
        p->generation++;
        pthread_cond_broadcast(&p->work);
    }
    pthread_mutex_unlock(&p->lock);
    take_jobs(p);
    if (!wake) return;
    pthread_mutex_lock(&p->lock);
    while (p->busy > 0) pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

int wk_host_pool_threads(const wk_host_pool *p) { return p->n_workers + 1; }

void wk_host_pool_destroy(wk_host_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->workers[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    free(p->workers);
    free(p);
}
