/* bench.c - attention throughput: GFLOP/s of relattn's kernels, as a
 * fraction of this machine's FMA peak measured in the same run; and whole
 * networks (torchvision swin_t and vit_b_16 at 224x224) in images/s.
 *
 *   bench/bench [--threads N] [--reps R] [--what all|layers|nets]
 *               [--models DIR] [--batches 1,8]
 *
 * Networks: DIR (or $RELATTN_BENCH_MODELS) holds swin_t.safetensors and
 * vit_b_16.safetensors as tools/export.py writes them (bench/run.sh does);
 * a missing file is skipped with a note. Each forward of a batch of random
 * images is timed (one warm-up run, then the median of R); flops are the
 * Swin authors' multiply-add count (ra_model_flops) x 2 per image.
 *
 * For each shape it times the attention core (q·k^T, softmax, p·v, with the
 * relative position bias) and the whole layer (qkv and proj projections
 * too), forward and backward, under every kernel the CPU supports, and
 * prints the median of R runs. Flops counted: core 4*B_*nH*N1*N2*hd forward
 * and 8*B_*nH*N1*N2*hd backward (p recomputed, dp, dv, dq, dk); each linear
 * 2*M*N*K forward and twice that backward. bench/run.sh puts the numbers
 * beside PyTorch's for the same shapes. */
#define _POSIX_C_SOURCE 200809L
#include "relattn.h"
#include "peak.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* ---- shapes ------------------------------------------------------------- */

typedef struct {
    const char *name;
    ra_arch arch;
    int b_, n, c, nh, window;
    int mask;
} shape;

static const shape shapes[] = {
    /* Swin-T stage 1 at 224x224, batch 1: 8x8 windows of 7x7, C 96, 3 heads */
    {"swin-t stage1 (B_=64 N=49 C=96 nH=3)", RA_ARCH_WINDOW_ATTENTION, 64, 49, 96, 3, 7, 1},
    /* Swin-T stage 3: 2x2 windows (x4 batch), C 384, 12 heads */
    {"swin-t stage3 (B_=16 N=49 C=384 nH=12)", RA_ARCH_WINDOW_ATTENTION, 16, 49, 384, 12, 7, 0},
    /* ViT-B/16 at 224: 197 tokens, C 768, 12 heads, batch 4 */
    {"vit-b/16 (B=4 N=197 C=768 nH=12)", RA_ARCH_VIT_ATTENTION, 4, 197, 768, 12, 0, 0},
};

static float *randn(size_t n, float s, unsigned *seed) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = s * ((float)rand_r(seed) / RAND_MAX - 0.5f);
    return p;
}

typedef struct { double core_f, core_b, layer_f, layer_b; } result;

static result bench_shape(const shape *s, int reps) {
    unsigned seed = 7;
    const int C = s->c, n = s->n, hd = C / s->nh;
    const size_t rows = (size_t)s->b_ * n;
    int64_t trows = 0;
    int32_t *idx = NULL;
    if (s->window) {
        ra_relpos_index_2d(NULL, s->window, s->window, &trows);
        idx = malloc(sizeof *idx * n * n);
        ra_relpos_index_2d(idx, s->window, s->window, NULL);
    }
    float *wqkv = randn((size_t)3 * C * C, 0.1f, &seed), *bqkv = randn(3 * C, 0.1f, &seed);
    float *wp = randn((size_t)C * C, 0.1f, &seed), *bp = randn(C, 0.1f, &seed);
    float *table = trows ? randn((size_t)trows * s->nh, 1, &seed) : NULL;
    float *x = randn(rows * C, 1, &seed), *dy = randn(rows * C, 1, &seed);
    float *y = malloc(rows * C * 4), *dx = calloc(rows * C, 4);
    float *qkv = randn(rows * 3 * C, 1, &seed), *dqkv = calloc(rows * 3 * C, 4);
    float *out = malloc(rows * C * 4), *dtab = calloc((size_t)(trows ? trows : 1) * s->nh, 4);
    float *mask = NULL;
    int nw = 0;
    if (s->mask) {   /* the shifted-window mask of an 8x8-window map, shift 3 */
        ra_window_geom g = {1, 56, 56, 1, 7, 7, 0, 3, 3};
        nw = (int)ra_window_count(&g);
        mask = malloc(sizeof *mask * nw * n * n);
        ra_window_mask(mask, &g);
    }
    ra_attn_config cfg = ra_attn_config_default(s->arch);
    cfg.dim = C, cfg.num_heads = s->nh, cfg.window[0] = cfg.window[1] = s->window;
    ra_attn_params p = {.qkv_w = wqkv, .qkv_b = bqkv, .proj_w = wp, .proj_b = bp,
                        .table = table};
    ra_attn_layer *l;
    if (ra_attn_layer_create(&l, &cfg, &p)) {
        fprintf(stderr, "bench: %s\n", ra_last_error());
        exit(70);
    }
    ra_attn_desc d = {.b_ = s->b_, .nh = s->nh, .n1 = n, .n2 = n, .hd = hd,
                      .scale = 1.0f / sqrtf((float)hd), .table = table, .idx = idx,
                      .table_rows = trows, .mask = mask, .nw = nw};
    const int nt = ra_threads_get();
    size_t ws = ra_attention_workspace_size(&d, nt);
    if (ra_attention_backward_workspace_size(&d, nt) > ws)
        ws = ra_attention_backward_workspace_size(&d, nt);
    void *work = malloc(ws);
    ra_attn_grads g = {.qkv_w = calloc((size_t)3 * C * C, 4), .qkv_b = calloc(3 * C, 4),
                       .proj_w = calloc((size_t)C * C, 4), .proj_b = calloc(C, 4),
                       .table = dtab};

    const double core = 4.0 * s->b_ * s->nh * n * n * hd;
    const double lin = 2.0 * rows * C * 4 * C;   /* qkv (3C) + proj (C) */
    double t[4][64];
    if (reps > 64) reps = 64;
    for (int r = -1; r < reps; r++) {   /* r = -1: warm-up */
        double t0 = now();
        ra_attention_forward(out, C, NULL, qkv, 3 * C, qkv + C, 3 * C, qkv + 2 * C, 3 * C, &d,
                             work, ws);
        double t1 = now();
        ra_attention_backward(dqkv, 3 * C, dqkv + C, 3 * C, dqkv + 2 * C, 3 * C, dtab, NULL,
                              NULL, dy, C, qkv, 3 * C, qkv + C, 3 * C, qkv + 2 * C, 3 * C, &d,
                              work, ws);
        double t2 = now();
        ra_attn_layer_forward(l, y, NULL, x, NULL, s->b_, n, n, mask, nw);
        double t3 = now();
        ra_attn_layer_backward(l, dx, NULL, &g, NULL, dy, x, NULL, s->b_, n, n, mask, nw);
        double t4 = now();
        if (r < 0) continue;
        t[0][r] = t1 - t0, t[1][r] = t2 - t1, t[2][r] = t3 - t2, t[3][r] = t4 - t3;
    }
    result res = {core / median(t[0], reps) * 1e-9, 2 * core / median(t[1], reps) * 1e-9,
                  (core + lin) / median(t[2], reps) * 1e-9,
                  (3 * core + 2 * lin) / median(t[3], reps) * 1e-9};
    ra_attn_layer_free(l);
    free(wqkv), free(bqkv), free(wp), free(bp), free(table), free(x), free(dy), free(y);
    free(dx), free(qkv), free(dqkv), free(out), free(dtab), free(mask), free(work), free(idx);
    free(g.qkv_w), free(g.qkv_b), free(g.proj_w), free(g.proj_b);
    return res;
}

/* ---- networks ------------------------------------------------------------ */

static const char *const nets[] = {"swin_t", "vit_b_16"};

/* Forward of a batch of b random 224x224 images, R timed runs (median). */
static void bench_net(const char *dir, const char *name, const int *batches, int nb, int reps,
                      double peak) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    ra_model *m = NULL;
    if (ra_model_load(&m, path)) {
        printf("%-40s skipped: %s\n", name, ra_last_error());
        return;
    }
    const double flops1 = 2.0 * (double)ra_model_flops(m, 224, 224);
    for (int i = 0; i < nb; i++) {
        const int b = batches[i];
        const int64_t xs[4] = {b, 3, 224, 224};
        unsigned seed = 11;
        float *x = randn((size_t)b * 3 * 224 * 224, 2, &seed);
        double t[64];
        int ok = 1;
        for (int r = -1; r < reps && ok; r++) {
            float *y = NULL;
            int nd;
            int64_t ys[4];
            const double t0 = now();
            ok = ra_model_forward(m, &y, &nd, ys, x, 4, xs) == RA_OK;
            const double t1 = now();
            free(y);
            if (r >= 0) t[r] = t1 - t0;
        }
        free(x);
        char label[64];
        snprintf(label, sizeof label, "net %s (B=%d 224x224)", name, b);
        if (!ok) {
            printf("%-40s failed: %s\n", label, ra_last_error());
            continue;
        }
        const double s = median(t, reps), ips = b / s;
        printf("%-40s %-6s %10.2f %10.1f %10.2f %9.1f%%   images/s ms GFLOP/s peak\n", label,
               ra_kernel_name(ra_kernel_current()), ips, 1e3 * s, ips * flops1 * 1e-9,
               peak > 0 ? 100 * ips * flops1 * 1e-9 / peak : 0.0);
    }
    ra_model_free(m);
}

int main(int argc, char **argv) {
    int threads = 0, reps = 9, batches[8] = {1, 8}, nb = 2;
    const char *what = "all", *models = getenv("RELATTN_BENCH_MODELS");
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--what")) what = argv[i + 1];
        else if (!strcmp(argv[i], "--models")) models = argv[i + 1];
        else if (!strcmp(argv[i], "--batches")) {
            nb = 0;
            for (char *p = argv[i + 1]; *p && nb < 8;) {
                const long v = strtol(p, &p, 10);
                if (v > 0) batches[nb++] = (int)v;
                if (*p) p++;
            }
        } else {
            fprintf(stderr, "bench: unknown option %s\n", argv[i]);
            return 64;
        }
    }
    if (strcmp(what, "all") && strcmp(what, "layers") && strcmp(what, "nets")) {
        fprintf(stderr, "bench: --what all|layers|nets\n");
        return 64;
    }
    if (threads > 0) ra_threads_set(threads);
    threads = ra_threads_get();
    if (reps < 1) reps = 1;
    openblas_set_num_threads(threads);
    const char *isa;
    const double peak = fma_peak(threads, &isa);
    printf("relattn bench: %d threads, median of %d runs\n", threads, reps);
    printf("BLAS: %s\n", openblas_get_config());
    printf("BLAS kernel set: %s (OPENBLAS_CORETYPE=%s)\n", openblas_get_corename(),
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset");
    printf("FMA peak (%s, measured): %.1f GFLOP/s\n", isa, peak);
    FILE *la = fopen("/proc/loadavg", "r");   /* other work on the cores skews everything */
    char load[128] = "";
    if (la && fgets(load, sizeof load, la)) printf("load average: %s", load);
    if (la) fclose(la);
    printf("\n");
    if (reps > 64) reps = 64;
    if (strcmp(what, "layers")) {
        printf("%-40s %-6s %10s %10s %10s %10s\n", "network", "kernel", "images/s", "ms",
               "GFLOP/s", "of peak");
        if (!models) printf("(no --models DIR or RELATTN_BENCH_MODELS: networks skipped)\n");
        for (size_t i = 0; models && i < sizeof nets / sizeof nets[0]; i++)
            bench_net(models, nets[i], batches, nb, reps, peak);
        printf("\n");
    }
    if (!strcmp(what, "nets")) return 0;
    printf("%-40s %-6s %10s %10s %10s %10s\n", "shape", "kernel", "core fwd", "core bwd",
           "layer fwd", "layer bwd");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int k = 0; k < RA_KERNEL_COUNT; k++) {
            if (!ra_kernel_supported((ra_kernel_id)k)) continue;
            ra_kernel_select((ra_kernel_id)k);
            result r = bench_shape(&shapes[s], reps);
            printf("%-40s %-6s %10.2f %10.2f %10.2f %10.2f   GFLOP/s\n", shapes[s].name,
                   ra_kernel_name((ra_kernel_id)k), r.core_f, r.core_b, r.layer_f, r.layer_b);
            printf("%-40s %-6s %9.1f%% %9.1f%% %9.1f%% %9.1f%%   of FMA peak\n", "",
                   "", 100 * r.core_f / peak, 100 * r.core_b / peak, 100 * r.layer_f / peak,
                   100 * r.layer_b / peak);
        }
    return 0;
}
