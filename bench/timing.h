/* timing.h - the benchmarks' clock and the comparison their medians sort
 * by (bench.c, bench_gemm.c, bench_layers.c, bench_onednn.c, bench_train.c,
 * peak.c). */
#ifndef RA_BENCH_TIMING_H
#define RA_BENCH_TIMING_H

#include <time.h>

/* Seconds on clock id (CLOCK_MONOTONIC: the wall; CLOCK_PROCESS_CPUTIME_ID:
 * the process's CPU time). */
static inline double bench_clock(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static inline double bench_now(void) { return bench_clock(CLOCK_MONOTONIC); }

/* qsort's comparison of doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
