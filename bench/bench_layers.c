/* bench_layers.c - GFLOP/s (or GB/s) of the pieces of a training step on
 * the shapes of the default `relattn train` model (swin 28x28, patch 4,
 * embed 64, depths 2,2, batch 128): each Linear layer's forward product,
 * its backward dX and dW (+ db) products, LayerNorm and GELU backward.
 *   relattn_bench_layers [--threads T] [--reps R] [--div D]
 * (--div D: M / D rows, e.g. to see a product run from cache)
 * Median of R timed calls after one warm-up call. */
#include "relattn.h"
#include "timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static float *rnd(int64_t n, uint64_t s) {
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((int32_t)(s >> 32)) * (1.0f / 2147483648.0f);
    }
    return p;
}

#define TIME(expr)                                              \
    do {                                                        \
        expr;                                                   \
        for (int r_ = 0; r_ < reps; r_++) {                     \
            const double t0_ = bench_now();                           \
            expr;                                               \
            ts[r_] = bench_now() - t0_;                               \
        }                                                       \
        qsort(ts, (size_t)reps, sizeof *ts, bench_cmp_double);             \
        med = ts[reps / 2];                                     \
    } while (0)

int main(int argc, char **argv) {
    int threads = 1, reps = 5, div = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--div")) div = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    }
    if (reps < 1 || reps > 100) reps = 5;
    ra_threads_set(threads);
    double ts[100], med;
    static const struct { const char *name; int64_t m; int n, k; } L[] = {
        {"s1 qkv", 6272, 192, 64}, {"s1 proj", 6272, 64, 64},  {"s1 fc1", 6272, 256, 64},
        {"s1 fc2", 6272, 64, 256}, {"merge", 2048, 128, 256},  {"s2 qkv", 2048, 384, 128},
        {"s2 proj", 2048, 128, 128}, {"s2 fc1", 2048, 512, 128}, {"s2 fc2", 2048, 128, 512},
        {"embed", 6272, 64, 16},
    };
    printf("threads %d; GFLOP/s: forward (y = x w^T + b), dx, dw + db\n", threads);
    double tot[3] = {0, 0, 0};
    for (size_t l = 0; l < sizeof L / sizeof *L; l++) {
        const int64_t m = L[l].m / (div > 0 ? div : 1);
        const int n = L[l].n, k = L[l].k;
        float *x = rnd(m * k, 1), *w = rnd((int64_t)n * k, 2), *b = rnd(n, 3);
        float *y = rnd(m * n, 4), *dx = rnd(m * k, 5), *dw = rnd((int64_t)n * k, 6);
        float *db = rnd(n, 7);
        const double fl = 2.0 * m * n * k * 1e-9;
        double g[4];
        TIME(ra_linear_forward(y, x, w, b, m, n, k));
        g[0] = fl / med, tot[0] += med;
        TIME(ra_linear_backward(dx, NULL, NULL, y, x, w, m, n, k));
        g[1] = fl / med, tot[1] += med;
        TIME(ra_linear_backward(NULL, dw, db, y, x, w, m, n, k));
        g[2] = fl / med, tot[2] += med;
        TIME(ra_linear_backward(NULL, dw, NULL, y, x, w, m, n, k));
        g[3] = fl / med;
        printf("  %-8s M %6lld N %3d K %3d: %6.1f %6.1f %6.1f (dw alone %6.1f)\n", L[l].name,
               (long long)m, n, k, g[0], g[1], g[2], g[3]);
        free(x), free(w), free(b), free(y), free(dx), free(dw), free(db);
    }
    printf("  total ms: forward %.2f, dx %.2f, dw %.2f\n", tot[0] * 1e3, tot[1] * 1e3,
           tot[2] * 1e3);
    {   /* element-wise backward layers: stage 1's MLP and norms */
        const int64_t m = 6272;
        const int c = 64, h = 256;
        float *x = rnd(m * h, 1), *dy = rnd(m * h, 2), *dx = rnd(m * h, 3);
        float *mean = rnd(m, 4), *rstd = rnd(m, 5), *gm = rnd(c, 6), *dg = rnd(c, 7),
              *dbb = rnd(c, 8);
        for (int64_t i = 0; i < m; i++) rstd[i] = 1.0f + rstd[i] * 0.1f;
        TIME(ra_gelu_backward(dx, dy, x, m * h));
        printf("  gelu backward (%lld): %.2f ms, %.1f GB/s\n", (long long)(m * h), med * 1e3,
               16.0 * m * h / med * 1e-9);
        TIME(ra_layernorm_backward(dx, dg, dbb, dy, x, mean, rstd, gm, m, c));
        printf("  layernorm backward (%lld x %d): %.2f ms, %.1f GB/s\n", (long long)m, c,
               med * 1e3, 16.0 * m * c / med * 1e-9);
        free(x), free(dy), free(dx), free(mean), free(rstd), free(gm), free(dg), free(dbb);
    }
    return 0;
}
