/* bench_gemm.c - the Linear products of the networks, y = x . w^T + b, in
 * every precision, beside OpenBLAS and the peaks of the instructions they
 * use, measured in the same run:
 *   relattn_bench_gemm [--threads T] [--reps R] [--csv FILE] [--clock cpu]
 *   relattn_bench_gemm --kernel i8
 * --kernel i8: the int8 VPDPBUSD block kernel alone, one thread, its data
 * in L1 (a block of 12 rows by 32 columns over K = 96, 384, 1536, an
 * epilogue storing float32), against the int8 peak: what the kernel can
 * do when nothing has to come in or go out.
 * Rows: the products of torchvision swin_t and vit_b_16 at batch 8 (224 x
 * 224). Columns: relattn fp32 (its portable product, or the fused one of
 * the kernel set), OpenBLAS sgemm, relattn bf16 (gemm_bf16.c's bfloat16
 * dot products where the CPU has AVX512_BF16, else the reference path:
 * rounded inputs, float32 product), relattn int8 (gemm_i8.c), the weights
 * of both packed once beforehand as a model packs them, each in
 * GFLOP/s or GOP/s (2 per multiply-add) and its share of its precision's
 * peak (FMA for fp32 and bf16, the int8 sequence for int8). The median of
 * R calls after one warm-up call, the four taken in turn each round. */
#define _POSIX_C_SOURCE 200809L
#include "base/internal.h"
#include "kernels/gemm_kernels.h"
#include "kernels/nn_kernels.h"
#include "nn/precision.h"
#include "peak.h"
#include "relattn.h"
#include "timing.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --clock cpu: the process's CPU time instead of the wall clock (on a
 * shared core, what the product itself took; the peaks stay wall-clock). */
static clockid_t clock_id = CLOCK_MONOTONIC;

enum { FP32, BLAS, BF16, INT8, NWAYS };
static const char *way_name[NWAYS] = {"relattn_fp32", "openblas_fp32", "relattn_bf16", "relattn_int8"};

/* The weights packed once, as a model in precision bf16 or int8 holds them. */
static rai_packed *tables[NWAYS];

static void run(int way, float *y, const float *x, const float *w, const float *b, int64_t m,
                int n, int k) {
    if (way == BLAS) {
        for (int64_t i = 0; i < m; i++) memcpy(y + i * n, b, (size_t)n * sizeof *y);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, n, k, 1.0f, x, k, w, k, 1.0f, y, n);
        return;
    }
    const ra_precision was = rai_precision_set(way == BF16 ? RA_PRECISION_BF16
                                               : way == INT8 ? RA_PRECISION_INT8
                                               : RA_PRECISION_FP32);
    const rai_packed *before = rai_packed_set(tables[way]);
    ra_linear_forward(y, x, w, b, m, n, k);
    rai_packed_set(before);
    rai_precision_set(was);
}

/* --kernel i8 (above): 0, or 1 where the CPU lacks AVX512_VNNI. */
static int i8_kernel_alone(void) {
#ifdef RA_HAVE_X86_KERNELS
    if (!rai_cpu_has_vnni()) {
        printf("the CPU has no AVX512_VNNI: no block kernel to time\n");
        return 1;
    }
    enum { KGMAX = 384, RP = RA_GEMM_I8_VNNI_RP, CP = RA_GEMM_I8_VNNI_CP };
    enum { ROWS = RP * RA_GEMM_I8_MR, COLS = CP * RA_GEMM_I8_NR };
    static uint8_t a[ROWS * 4 * KGMAX];
    static int8_t b[COLS * 4 * KGMAX];
    static float c[ROWS * COLS];
    static int32_t zero[ROWS], wsum[COLS];
    static float scale[ROWS], wscale[COLS];
    for (size_t i = 0; i < sizeof a; i++) a[i] = (uint8_t)(i % 128);
    for (size_t i = 0; i < sizeof b; i++) b[i] = (int8_t)(i % 255 - 127);
    for (int i = 0; i < ROWS; i++) scale[i] = 1.0f;
    for (int j = 0; j < COLS; j++) wscale[j] = 1.0f;
    const rai_i8_tile e = {.zero = zero, .scale = scale, .wsum = wsum, .wscale = wscale};
    const char *isa;
    const double peak = i8_peak(1, &isa);
    printf("the int8 block kernel alone, 1 thread, data in L1; peak %s %.1f GOP/s\n", isa, peak);
    static const int kgs[] = {24, 96, 384};
    for (int q = 0; q < 3; q++) {
        const int kg = kgs[q], calls = 20000000 / kg;
        double best = 0;
        for (int run = 0; run < 5; run++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int r = 0; r < calls; r++)
                rai_gemm_i8_block_avx512_vnni(kg, a, 4 * (int64_t)kg, b, RP, CP, c, COLS, &e);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            const double gops = 2.0 * calls * kg * 4 * ROWS * COLS / s / 1e9;
            best = gops > best ? gops : best;
        }
        printf("K %5d: %6.1f GOP/s, %5.1f %% of the peak (best of 5)\n", 4 * kg, best,
               100 * best / peak);
    }
    volatile float keep = c[0];   /* the calls' output is used */
    (void)keep;
    return 0;
#else
    printf("no x86 kernels in this build\n");
    return 1;
#endif
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--kernel") && !strcmp(argv[2], "i8")) return i8_kernel_alone() != 0;
    int threads = 1, reps = 7;
    const char *csv = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--csv")) csv = argv[i + 1];
        else if (!strcmp(argv[i], "--clock") && !strcmp(argv[i + 1], "cpu"))
            clock_id = CLOCK_PROCESS_CPUTIME_ID;
    }
    if (reps < 1 || reps > 99) reps = 7;
    if (threads < 1 || threads > 256) threads = 1;
    ra_threads_set(threads);
    static const struct { const char *name; int64_t m; int n, k; } L[] = {
        {"swin_t s1 qkv", 25088, 288, 96},   {"swin_t s1 fc1", 25088, 384, 96},
        {"swin_t s1 fc2", 25088, 96, 384},   {"swin_t s2 qkv", 6272, 576, 192},
        {"swin_t s3 qkv", 1568, 1152, 384},  {"swin_t s3 fc1", 1568, 1536, 384},
        {"swin_t s3 fc2", 1568, 384, 1536},  {"swin_t s4 fc1", 392, 3072, 768},
        {"vit_b_16 qkv", 1576, 2304, 768},   {"vit_b_16 proj", 1576, 768, 768},
        {"vit_b_16 fc1", 1576, 3072, 768},   {"vit_b_16 fc2", 1576, 768, 3072},
    };
    const char *fisa, *iisa, *bisa;
    const double fpeak = fma_peak(threads, &fisa), ipeak = i8_peak(threads, &iisa);
    const double bpeak = bf16_peak(threads, &bisa);
    FILE *out = csv ? fopen(csv, "w") : NULL;
    printf("threads %d, kernel %s; peaks: %s %.1f GFLOP/s, %s %.1f GOP/s (%.2fx), %s %.1f GFLOP/s\n",
           threads, ra_kernel_name(ra_kernel_current()), fisa, fpeak, iisa, ipeak,
           fpeak > 0 ? ipeak / fpeak : 0, bisa, bpeak);
    if (out)
        fprintf(out, "# threads %d kernel %s fma_peak_gflops %.1f (%s) int8_peak_gops %.1f (%s) "
                     "bf16_peak_gflops %.1f (%s)\n"
                     "product,m,n,k,threads,way,gops,share_of_peak\n",
                threads, ra_kernel_name(ra_kernel_current()), fpeak, fisa, ipeak, iisa, bpeak, bisa);
    printf("%-15s %6s %5s %5s |", "product", "m", "n", "k");
    for (int v = 0; v < NWAYS; v++) printf(" %20s", way_name[v]);
    printf(" | bf16/fp32 int8/fp32\n");
    for (size_t l = 0; l < sizeof L / sizeof *L; l++) {
        const int64_t m = L[l].m;
        const int n = L[l].n, k = L[l].k;
        float *x = bench_random_floats(m * k, 1 + l, 1.0f);
        float *w = bench_random_floats((int64_t)n * k, 100 + l, 0.05f);
        float *b = bench_random_floats(n, 200 + l, 0.1f), *y = malloc((size_t)(m * n) * sizeof *y);
        if (!x || !w || !b || !y) return fprintf(stderr, "out of memory\n"), 1;
        const float *ws[1] = {w};
        const int64_t ns[1] = {n}, ks[1] = {k};
        tables[INT8] = rai_packed_make(ws, ns, ks, 1, RA_PRECISION_INT8);
        tables[BF16] = rai_bf16_micro() >= 0 ? rai_packed_make(ws, ns, ks, 1, RA_PRECISION_BF16) : NULL;
        double t[NWAYS][99], med[NWAYS];
        for (int v = 0; v < NWAYS; v++) run(v, y, x, w, b, m, n, k);
        for (int r = 0; r < reps; r++)
            for (int v = 0; v < NWAYS; v++) {
                const double t0 = bench_clock(clock_id);
                run(v, y, x, w, b, m, n, k);
                t[v][r] = bench_clock(clock_id) - t0;
            }
        printf("%-15s %6lld %5d %5d |", L[l].name, (long long)m, n, k);
        for (int v = 0; v < NWAYS; v++) {
            qsort(t[v], (size_t)reps, sizeof **t, bench_cmp_double);
            med[v] = t[v][reps / 2];
            const double g = 2.0 * m * n * k / med[v] * 1e-9;
            const double pk = v == INT8 ? ipeak : v == BF16 && tables[BF16] ? bpeak : fpeak;
            printf(" %8.1f (%5.1f %%)   ", g, pk > 0 ? 100 * g / pk : 0);
            if (out)
                fprintf(out, "%s,%lld,%d,%d,%d,%s,%.1f,%.3f\n", L[l].name, (long long)m, n, k,
                        threads, way_name[v], g, pk > 0 ? g / pk : 0);
        }
        printf(" | %.2fx %.2fx\n", med[FP32] / med[BF16], med[FP32] / med[INT8]);
        rai_packed_free(tables[INT8]), rai_packed_free(tables[BF16]);
        tables[INT8] = tables[BF16] = NULL;
        free(x), free(w), free(b), free(y);
    }
    if (out) fclose(out);
    return 0;
}
