/* peak.c - the machine's FMA, int8 and bf16 peaks (peak.h). */
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

/* Twelve independent chains of one zmm instruction (op, AT&T operands
 * zmm13, zmm12, accumulator), enough to cover its latency at one a cycle;
 * written out as the step above. Returns the instructions run. */
#define ZMM_CHAIN(op, r) op " %%zmm13, %%zmm12, %%zmm" #r "\n\t"
#define ZMM_CHAINS(op)                                                                  \
    ZMM_CHAIN(op, 0) ZMM_CHAIN(op, 1) ZMM_CHAIN(op, 2) ZMM_CHAIN(op, 3) ZMM_CHAIN(op, 4) \
    ZMM_CHAIN(op, 5) ZMM_CHAIN(op, 6) ZMM_CHAIN(op, 7) ZMM_CHAIN(op, 8) ZMM_CHAIN(op, 9) \
    ZMM_CHAIN(op, 10) ZMM_CHAIN(op, 11)
#define ZMM_LOOP(op, n)                                                                       \
    __asm__ volatile("vpxord %%zmm12, %%zmm12, %%zmm12\n\t"                                   \
                     "vpxord %%zmm13, %%zmm13, %%zmm13\n\t"                                   \
                     "1:\n\t" ZMM_CHAINS(op) "dec %0\n\t"                                     \
                     "jnz 1b\n\t"                                                             \
                     : "+r"(n)                                                                \
                     :                                                                        \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", \
                       "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "cc")

/* VPDPBUSD zmm: 64 u8 x s8 multiply-adds into 16 int32 lanes (the int8
 * product's kernel on AVX512_VNNI). */
static double i8_loop_vnni(long iters) {
    long n = iters;
    if (n > 0) ZMM_LOOP("vpdpbusd", n);
    __asm__ volatile("vzeroupper" ::: "memory");
    return iters * 12.0 * 128;   /* ops: 64 multiply-adds x 2 per instruction */
}

/* VDPBF16PS zmm: 32 bf16 x bf16 multiply-adds into 16 float lanes. */
static double bf16_loop(long iters) {
    long n = iters;
    if (n > 0) ZMM_LOOP("vdpbf16ps", n);
    __asm__ volatile("vzeroupper" ::: "memory");
    return iters * 12.0 * 64;   /* flops: 32 multiply-adds x 2 per instruction */
}
#undef ZMM_LOOP
#undef ZMM_CHAINS
#undef ZMM_CHAIN
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
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl")) {   /* what the int8 product's kernel asks */
        *isa = "avx512_vnni vpdpbusd";
        return best_rate(i8_loop_vnni, threads);
    }
    if (__builtin_cpu_supports("avx2")) {
        *isa = "avx2 vpmaddubsw+vpmaddwd+vpaddd";
        return best_rate(i8_loop_avx2, threads);
    }
#endif
    (void)threads;
    return 0;
}

double bf16_peak(int threads, const char **isa) {
    *isa = "none";
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512bf16")) {
        *isa = "avx512_bf16 vdpbf16ps";
        return best_rate(bf16_loop, threads);
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
