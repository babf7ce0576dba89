/* peak.h - the machine's FMA peak, measured in the same run as a benchmark
 * (bench.c, bench_train.c): independent FMA chains on every thread. */
#ifndef RA_BENCH_PEAK_H
#define RA_BENCH_PEAK_H

/* GFLOP/s of the widest FMA the CPU has on `threads` threads, the best of
 * 7 runs; *isa names it ("avx512 fma", "avx2 fma", or "none": 0). */
double fma_peak(int threads, const char **isa);

/* GOP/s (2 per multiply-add) of the fastest int8 multiply-add sequence the
 * CPU has on `threads` threads, the best of 7 runs, as the int8 product
 * uses it; *isa names it ("avx2 vpmaddubsw+vpmaddwd+vpaddd", or "none": 0). */
double i8_peak(int threads, const char **isa);

#endif
