/* bench_onednn.c - oneDNN's matmul (Debian's libdnnl-dev, what PyTorch
 * uses for its onednn engine) on the Linear products of bench_gemm.c, in
 * fp32, in bf16 (bf16 input and weights, f32 output) and in int8 (u8
 * input, s8 weights; per-column output scales, f32 output), the weights in
 * the layout oneDNN chooses, reordered once, for setting
 * beside relattn's own products (relattn_bench_gemm, same shapes):
 *   relattn_bench_onednn [--reps R]     (threads: OMP_NUM_THREADS)
 * GFLOP/s or GOP/s (2 per multiply-add), the median of R calls after one
 * warm-up call. oneDNN's bf16 and int8 times do not include rounding or
 * quantising the input (it is given bf16 or u8), relattn's do. Built only where CMake finds oneDNN
 * (`apt-get install libdnnl-dev`; not a dependency of relattn). */
#define _POSIX_C_SOURCE 200809L
#include <oneapi/dnnl/dnnl.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "timing.h"

#define OK(call)                                                                   \
    do {                                                                           \
        const dnnl_status_t s_ = (call);                                           \
        if (s_ != dnnl_success) {                                                  \
            fprintf(stderr, "relattn_bench_onednn: %s: status %d\n", #call, (int)s_); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

enum { F32, BF16, I8, NKINDS };   /* the products' precisions */

/* n random values of type t into m. */
static void fill(dnnl_memory_t m, size_t n, dnnl_data_type_t t, uint64_t s) {
    void *p = NULL;
    OK(dnnl_memory_get_data_handle(m, &p));
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const uint32_t r = (uint32_t)(s >> 33);
        const float f = (float)(r % 2001) / 1000.0f - 1.0f;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        if (t == dnnl_f32) ((float *)p)[i] = f;
        else if (t == dnnl_bf16) ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
        else if (t == dnnl_u8) ((uint8_t *)p)[i] = (uint8_t)(r & 255);
        else ((int8_t *)p)[i] = (int8_t)((int)(r % 255) - 127);
    }
}

/* Seconds of one M x N x K product (median of reps) of that kind. */
static double product(dnnl_engine_t eng, dnnl_stream_t st, int64_t m, int64_t n, int64_t k,
                      int kind, int reps) {
    const int i8 = kind == I8;
    const dnnl_data_type_t ta = i8 ? dnnl_u8 : kind == BF16 ? dnnl_bf16 : dnnl_f32;
    const dnnl_data_type_t tw = i8 ? dnnl_s8 : ta;
    dnnl_dims_t ad = {m, k}, wd = {k, n}, cd = {m, n};
    dnnl_memory_desc_t a_md, w_md, w_any, c_md;
    OK(dnnl_memory_desc_init_by_tag(&a_md, 2, ad, ta, dnnl_ab));
    OK(dnnl_memory_desc_init_by_tag(&w_md, 2, wd, tw, dnnl_ba));   /* w (N, K) row-major */
    OK(dnnl_memory_desc_init_by_tag(&w_any, 2, wd, tw, dnnl_format_tag_any));
    OK(dnnl_memory_desc_init_by_tag(&c_md, 2, cd, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t d;
    OK(dnnl_matmul_desc_init(&d, &a_md, &w_any, NULL, &c_md));
    dnnl_primitive_attr_t attr;
    OK(dnnl_primitive_attr_create(&attr));
    float *scales = malloc((size_t)n * sizeof *scales);
    for (int64_t j = 0; j < n; j++) scales[j] = 1e-3f * (float)(1 + j % 7);
    if (i8) OK(dnnl_primitive_attr_set_output_scales(attr, n, 1 << 1, scales));
    dnnl_primitive_desc_t pd;
    OK(dnnl_primitive_desc_create(&pd, &d, attr, eng, NULL));
    const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t a, w, wr, c;
    OK(dnnl_memory_create(&a, &a_md, eng, DNNL_MEMORY_ALLOCATE));
    OK(dnnl_memory_create(&w, &w_md, eng, DNNL_MEMORY_ALLOCATE));
    OK(dnnl_memory_create(&wr, wq, eng, DNNL_MEMORY_ALLOCATE));
    OK(dnnl_memory_create(&c, &c_md, eng, DNNL_MEMORY_ALLOCATE));
    fill(a, (size_t)(m * k), ta, 1);
    fill(w, (size_t)(n * k), tw, 2);
    /* the weights into oneDNN's layout, once (as relattn packs its int8 once) */
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t r;
    OK(dnnl_reorder_primitive_desc_create(&rpd, &w_md, eng, wq, eng, NULL));
    OK(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, w}, {DNNL_ARG_TO, wr}};
    OK(dnnl_primitive_execute(r, st, 2, rargs));
    OK(dnnl_stream_wait(st));
    dnnl_primitive_t mm;
    OK(dnnl_primitive_create(&mm, pd));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, wr}, {DNNL_ARG_DST, c}};
    double t[99];
    for (int i = -1; i < reps; i++) {
        const double t0 = bench_now();
        OK(dnnl_primitive_execute(mm, st, 3, args));
        OK(dnnl_stream_wait(st));
        if (i >= 0) t[i] = bench_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
    dnnl_primitive_destroy(mm), dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(rpd), dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    dnnl_memory_destroy(a), dnnl_memory_destroy(w), dnnl_memory_destroy(wr), dnnl_memory_destroy(c);
    free(scales);
    return t[reps / 2];
}

int main(int argc, char **argv) {
    int reps = 7;
    for (int i = 1; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    if (reps < 1 || reps > 99) reps = 7;
    static const struct { const char *name; int64_t m, n, k; } L[] = {
        {"swin_t s1 qkv", 25088, 288, 96},   {"swin_t s1 fc1", 25088, 384, 96},
        {"swin_t s1 fc2", 25088, 96, 384},   {"swin_t s2 qkv", 6272, 576, 192},
        {"swin_t s3 qkv", 1568, 1152, 384},  {"swin_t s3 fc1", 1568, 1536, 384},
        {"swin_t s3 fc2", 1568, 384, 1536},  {"swin_t s4 fc1", 392, 3072, 768},
        {"vit_b_16 qkv", 1576, 2304, 768},   {"vit_b_16 proj", 1576, 768, 768},
        {"vit_b_16 fc1", 1576, 3072, 768},   {"vit_b_16 fc2", 1576, 768, 3072},
    };
    const dnnl_version_t *v = dnnl_version();
    dnnl_engine_t eng;
    dnnl_stream_t st;
    OK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    OK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    printf("oneDNN %d.%d.%d (cpu runtime %u, isa %s)\n", v->major, v->minor, v->patch, v->cpu_runtime,
           getenv("ONEDNN_MAX_CPU_ISA") ? getenv("ONEDNN_MAX_CPU_ISA") : "its best");
    printf("%-15s %6s %5s %5s | %12s %12s %12s\n", "product", "m", "n", "k", "fp32 GFLOP/s",
           "bf16 GFLOP/s", "int8 GOP/s");
    for (size_t l = 0; l < sizeof L / sizeof *L; l++) {
        const double ops = 2.0 * L[l].m * L[l].n * L[l].k;
        printf("%-15s %6lld %5lld %5lld |", L[l].name, (long long)L[l].m, (long long)L[l].n,
               (long long)L[l].k);
        for (int kind = 0; kind < NKINDS; kind++)
            printf(" %12.1f", ops / product(eng, st, L[l].m, L[l].n, L[l].k, kind, reps) * 1e-9);
        printf("\n");
        fflush(stdout);
    }
    dnnl_stream_destroy(st), dnnl_engine_destroy(eng);
    return 0;
}
