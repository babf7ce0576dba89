/* peak.c - the machine's FMA peak (peak.h). */
#include "peak.h"
#include "timing.h"

#include <time.h>

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
/* gemm_i8_avx2.c's step (vpmaddubsw: 32 u8 x s8 products, pairs added;
 * vpmaddwd by ones: pairs again, into 32 bits; vpaddd) in six independent
 * chains, written out: a compiler would compute the same products once. */
static double i8_loop_avx2(long iters) {
    /* ymm0-5 accumulate, ymm6-11 carry the products, ymm12 ones, ymm13 and
     * ymm14 the operands: six independent chains of the three */
#define I8_STEP(acc, tmp)                                \
    "vpmaddubsw %%ymm14, %%ymm13, %%ymm" #tmp "\n\t"     \
    "vpmaddwd %%ymm12, %%ymm" #tmp ", %%ymm" #tmp "\n\t" \
    "vpaddd %%ymm" #tmp ", %%ymm" #acc ", %%ymm" #acc "\n\t"
    long n = iters;
    if (n > 0)
        __asm__ volatile("vpcmpeqw %%ymm12, %%ymm12, %%ymm12\n\t"
                         "vpsrlw $15, %%ymm12, %%ymm12\n\t"   /* ones */
                         "1:\n\t"
                         I8_STEP(0, 6) I8_STEP(1, 7) I8_STEP(2, 8) I8_STEP(3, 9) I8_STEP(4, 10)
                         I8_STEP(5, 11)
                         "dec %0\n\t"
                         "jnz 1b\n\t"
                         : "+r"(n)
                         :
                         : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                           "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "cc");
#undef I8_STEP
    __asm__ volatile("vzeroupper" ::: "memory");
    return iters * 6.0 * 64;   /* ops: 32 multiply-adds x 2 per step */
}
#endif

/* The best of 7 runs of loop on every thread, in G per second. */
static double best_rate(double (*loop)(long), int threads) {
    double best = 0;
    const long iters = 20000000;
    for (int r = 0; r < 7; r++) {
        double ops = 0, t0 = bench_now();
        #pragma omp parallel num_threads(threads) reduction(+ : ops)
        ops += loop(iters);
        const double g = ops / (bench_now() - t0) * 1e-9;
        if (g > best) best = g;
    }
    return best;
}

double i8_peak(int threads, const char **isa) {
    *isa = "none";
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        *isa = "avx2 vpmaddubsw+vpmaddwd+vpaddd";
        return best_rate(i8_loop_avx2, threads);
    }
#endif
    (void)threads;
    return 0;
}

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
    return loop ? best_rate(loop, threads) : 0;
}
