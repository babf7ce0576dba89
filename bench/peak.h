/* peak.h - the machine's FMA, int8 and bf16 peaks, measured in the same run as a benchmark
 * (bench.c, bench_train.c, bench_gemm.c): independent chains of the
 * instruction on every thread. */
#ifndef RA_BENCH_PEAK_H
#define RA_BENCH_PEAK_H

/* GFLOP/s of the widest FMA the CPU has on `threads` threads, the best of
 * 7 runs; *isa names it ("avx512 fma", "avx2 fma", or "none": 0). */
double fma_peak(int threads, const char **isa);

/* GOP/s (2 per multiply-add) of the fastest int8 multiply-add sequence the
 * CPU has on `threads` threads, the best of 7 runs, as the int8 product
 * uses it; *isa names it ("avx512_vnni vpdpbusd" where the CPU has
 * AVX512_VNNI with BW and VL, else "avx2 vpmaddubsw+vpmaddwd+vpaddd", or
 * "none": 0). */
double i8_peak(int threads, const char **isa);

/* GFLOP/s (2 per multiply-add) of VDPBF16PS zmm on `threads` threads, the
 * best of 7 runs, where the CPU has AVX512_BF16 (*isa "avx512_bf16
 * vdpbf16ps"), else 0 (*isa "none"). */
double bf16_peak(int threads, const char **isa);

#endif
