/* peak.c - the machine's FMA peak (peak.h). */
#include "peak.h"

#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the machine's FMA peak: independent FMA chains on every thread --- */

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2,fma"))) static double fma_loop_avx2(long iters) {
    __m256 a[10], m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 10; i++) a[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 10; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    float s = 0, o[8];
    for (int i = 0; i < 10; i++) { _mm256_storeu_ps(o, a[i]); s += o[0]; }
    return s * 0 + iters * 10.0 * 16;   /* flops: 8 lanes x 2; s keeps the loop */
}
__attribute__((target("avx512f"))) static double fma_loop_avx512(long iters) {
    __m512 a[12], m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    float s = 0;
    for (int i = 0; i < 12; i++) s += _mm512_reduce_add_ps(a[i]);
    return s * 0 + iters * 12.0 * 32;
}
#endif

/* GFLOP/s of the widest FMA the CPU has, all threads; the best of 7 (a
 * peak: on a shared machine the other runs only lose cores). */
double fma_peak(int threads, const char **isa) {
    double (*loop)(long) = NULL;
    *isa = "none";
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) loop = fma_loop_avx512, *isa = "avx512 fma";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        loop = fma_loop_avx2, *isa = "avx2 fma";
#endif
    if (!loop) return 0;
    double best = 0;
    const long iters = 20000000;
    for (int r = 0; r < 7; r++) {
        double flops = 0, t0 = now();
        #pragma omp parallel num_threads(threads) reduction(+ : flops)
        flops += loop(iters);
        const double g = flops / (now() - t0) * 1e-9;
        if (g > best) best = g;
    }
    return best;
}

