/* The host thread pool (host_pool.h): between job lists workers spin a moment, then sleep on a
 * condition variable; each list is handed out through one atomic counter, the caller working
 * beside them. */
#include "host/host_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "wushkv/wushkv.h"

struct wk_host_pool {
    pthread_mutex_t lock;
    pthread_cond_t work;   /* a new list (generation moved) or shutdown */
    pthread_cond_t done;   /* the last busy worker finished */
    int n_workers;
    pthread_t *workers;
    atomic_ulong generation;
    atomic_int busy;       /* workers still in the current list */
    bool stop;
    int sleeping;          /* workers waiting on `work` (under lock) */
    bool caller_waits;     /* the caller waiting on `done` (under lock) */
    /* the current list */
    wk_host_job job;
    void *ctx;
    int n_jobs;
    atomic_int next;
};

/* How long a thread spins for the next list, or for the workers to finish, before it sleeps: a
 * decode step on the host runs about a hundred short lists (a layer's W_o is ~50 us of work), and
 * waking a sleeping thread costs tens of microseconds, while a short spin costs the device's
 * threads, which run between the lists, next to nothing. */
#define SPIN_NS 30000

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins until done(p, arg) or SPIN_NS pass; whether done. */
static bool spin_until(wk_host_pool *p, bool (*done)(wk_host_pool *, unsigned long), unsigned long arg) {
    const long long end = now_ns() + SPIN_NS;
    for (int i = 1;; i++) {
        if (done(p, arg)) return true;
        cpu_relax();
        if (i % 64 == 0 && now_ns() > end) return false;
    }
}

static bool moved(wk_host_pool *p, unsigned long seen) {
    return atomic_load_explicit(&p->generation, memory_order_acquire) != seen;
}

static bool finished(wk_host_pool *p, unsigned long unused) {
    (void)unused;
    return atomic_load_explicit(&p->busy, memory_order_acquire) == 0;
}

static void take_jobs(wk_host_pool *p) {
    for (int j; (j = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < p->n_jobs;) p->job(p->ctx, j);
}

static void *worker(void *arg) {
    wk_host_pool *p = arg;
    unsigned long seen = 0;
    for (;;) {
        if (!spin_until(p, moved, seen)) {
            pthread_mutex_lock(&p->lock);
            /* The caller moves the generation under the lock, so this check cannot miss it. */
            while (!p->stop && !moved(p, seen)) {
                p->sleeping++;
                pthread_cond_wait(&p->work, &p->lock);
                p->sleeping--;
            }
            const bool stop = p->stop;
            pthread_mutex_unlock(&p->lock);
            if (stop) break;
        }
        seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (seen == ~0UL) break; /* shutdown while spinning */
        take_jobs(p);
        if (atomic_fetch_sub_explicit(&p->busy, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->lock);
            if (p->caller_waits) pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
    }
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
    atomic_init(&p->generation, 0);
    atomic_init(&p->busy, 0);
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
    /* A single job, or no workers: no one to wake. */
    const bool wake = p->n_workers > 0 && n_jobs > 1;
    if (!wake) {
        for (int j = 0; j < n_jobs; j++) job(ctx, j);
        return;
    }
    /* Every worker finished the last list (busy 0) before it returned, so none reads these now. */
    p->job = job;
    p->ctx = ctx;
    p->n_jobs = n_jobs;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->busy, p->n_workers, memory_order_relaxed);
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    if (p->sleeping) pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    take_jobs(p);
    if (spin_until(p, finished, 0)) return;
    pthread_mutex_lock(&p->lock);
    p->caller_waits = true;
    while (!finished(p, 0)) pthread_cond_wait(&p->done, &p->lock);
    p->caller_waits = false;
    pthread_mutex_unlock(&p->lock);
}

int wk_host_pool_threads(const wk_host_pool *p) { return p->n_workers + 1; }

void wk_host_pool_destroy(wk_host_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    atomic_store_explicit(&p->generation, ~0UL, memory_order_release); /* a spinning worker sees it */
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->workers[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    free(p->workers);
    free(p);
}
