/* timing.h - the benchmarks' clock, the comparison their medians sort
 * by (bench.c, bench_gemm.c, bench_layers.c, bench_onednn.c, bench_train.c,
 * peak.c) and the products' random operands (bench_gemm.c, bench_onednn.c);
 * the process's memory (bench.c, bench_video.c). */
#ifndef RA_BENCH_TIMING_H
#define RA_BENCH_TIMING_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* n floats in [-scale, scale) from seed s (an LCG), malloc'ed; NULL
 * without memory. */
static inline float *bench_random_floats(int64_t n, uint64_t s, float scale) {
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; p && i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = scale * (float)((int32_t)(s >> 32)) * (1.0f / 2147483648.0f);
    }
    return p;
}

/* kB of a /proc/self/status line ("VmRSS", "VmHWM"), -1 if unknown
 * (bench.c, bench_video.c). */
static inline long long bench_status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = -1;
    const size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') kb = atoll(line + n + 1);
    if (f) fclose(f);
    return kb;
}

#endif
