/* The one clock of server/ (in metrics/, the room of measurements): CLOCK_MONOTONIC seconds, for
 * latencies, progress and timings that must not jump with the wall clock. */
#ifndef WUSHKV_MONO_CLOCK_H
#define WUSHKV_MONO_CLOCK_H

#include <time.h>

static inline double mono_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
