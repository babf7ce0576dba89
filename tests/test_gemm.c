/* test_gemm.c - the portable product (src/kernels/gemm.c) against a double
 * reference, on every layout the Linear layers use (x w^T, dy w, dy^T x) and
 * on sizes around the tile and block edges; its AVX2 micro-kernel against
 * the scalar one; and the property the trainer relies on: a row of the
 * product has the same bits whatever the thread count and wherever the row
 * sits in the batch. */
#include "check.h"
#include "kernels/gemm_kernels.h"
#include "kernels/kernels.h"
#include "relattn.h"

#include <stdint.h>

static float *pattern(int64_t n, int seed) {
    float *p = malloc(sizeof *p * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)((i * 7919 + seed * 104729) % 2003 - 1001) / 997.0f;
    return p;
}

/* c = bias + a . b (or c + a . b) in double, a[i, l] = a[i*ars + l*acs],
 * b[l, j] = b[l*brs + j*bcs]. */
static void reference(double *c, const float *c0, const float *a, int64_t ars, int64_t acs,
                      const float *b, int64_t brs, int64_t bcs, int m, int n, int k,
                      const float *bias, int accumulate) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = accumulate ? c0[(int64_t)i * n + j] : bias ? bias[j] : 0.0;
            for (int l = 0; l < k; l++) s += (double)a[i * ars + l * acs] * b[l * brs + j * bcs];
            c[(int64_t)i * n + j] = s;
        }
}

static int isas[2], nisa;

/* One layout at (m, n, k): every micro-kernel against the reference (to a
 * bound of k ulps of the terms' scale), and the same bits at 1 and 3
 * threads and for the last rows computed on their own. */
static void run_case(int layout, int m, int n, int k, int accumulate, int use_bias) {
    float *a = pattern((int64_t)m * k, 1), *b = pattern((int64_t)k * n, 2);
    float *bias = use_bias ? pattern(n, 3) : NULL, *c0 = pattern((int64_t)m * n, 4);
    int64_t ars, acs, brs, bcs;
    switch (layout) {
    case 0: ars = k, acs = 1, brs = 1, bcs = k; break;   /* x (M, K) . w (N, K)^T */
    case 1: ars = k, acs = 1, brs = n, bcs = 1; break;   /* dy (M, K) . w (K, N) */
    default: ars = 1, acs = m, brs = n, bcs = 1; break;  /* dy^T: a stored (K, M) */
    }
    double *want = malloc(sizeof *want * (size_t)m * n);
    reference(want, c0, a, ars, acs, b, brs, bcs, m, n, k, bias, accumulate);
    double scale = 1.0;
    for (int64_t i = 0; i < (int64_t)m * n; i++) scale = fmax(scale, fabs(want[i]));
    float *first = NULL;
    for (int s = 0; s < nisa; s++) {
        float *c1 = malloc(sizeof *c1 * (size_t)m * n), *c3 = malloc(sizeof *c3 * (size_t)m * n);
        memcpy(c1, c0, sizeof *c1 * (size_t)m * n), memcpy(c3, c0, sizeof *c3 * (size_t)m * n);
        CHECK(rai_gemm(c1, n, a, ars, acs, b, brs, bcs, m, n, k, bias, accumulate, isas[s], 1) == 0,
              "gemm failed");
        CHECK(rai_gemm(c3, n, a, ars, acs, b, brs, bcs, m, n, k, bias, accumulate, isas[s], 3) == 0,
              "gemm failed");
        double err = 0;
        for (int64_t i = 0; i < (int64_t)m * n; i++) err = fmax(err, fabs(c1[i] - want[i]));
        const double tol = (k + 2) * 6e-8 * scale * 4;
        CHECK(err <= tol, "layout %d %dx%dx%d isa %d: error %.3g > %.3g", layout, m, n, k,
              isas[s], err, tol);
        CHECK(memcmp(c1, c3, sizeof *c1 * (size_t)m * n) == 0,
              "layout %d %dx%dx%d isa %d: 1 and 3 threads differ", layout, m, n, k, isas[s]);
        /* the last r rows alone (the batch cut elsewhere): the same bits */
        const int r0 = m / 3, rows = m - r0;
        float *part = malloc(sizeof *part * (size_t)rows * n + 1);
        memcpy(part, c0 + (int64_t)r0 * n, sizeof *part * (size_t)rows * n);
        CHECK(rai_gemm(part, n, a + (int64_t)r0 * ars, ars, acs, b, brs, bcs, rows, n, k, bias,
                       accumulate, isas[s], 2) == 0, "gemm failed");
        CHECK(memcmp(part, c1 + (int64_t)r0 * n, sizeof *part * (size_t)rows * n) == 0,
              "layout %d %dx%dx%d isa %d: rows from %d differ when cut there", layout, m, n, k,
              isas[s], r0);
        free(part), free(c3);
        if (!first) first = c1;
        else {   /* micro-kernels: the same sums up to rounding of each term */
            double d = 0;
            for (int64_t i = 0; i < (int64_t)m * n; i++) d = fmax(d, fabs(c1[i] - first[i]));
            CHECK(d <= tol, "layout %d %dx%dx%d: isa %d differs from ref by %.3g", layout, m, n,
                  k, isas[s], d);
            free(c1);
        }
    }
    free(first), free(a), free(b), free(bias), free(c0), free(want);
}

int main(void) {
    isas[nisa++] = RA_GEMM_REF;
    if (ra_kernel_supported(RA_KERNEL_AVX2)) isas[nisa++] = RA_GEMM_AVX2;
    printf("micro-kernels: ref%s\n", nisa > 1 ? ", avx2" : "");
    static const int sizes[][3] = {{1, 1, 1},   {5, 15, 7},   {6, 16, 256}, {7, 17, 257},
                                   {49, 96, 96}, {97, 33, 300}, {130, 48, 600}, {13, 200, 40}};
    for (int layout = 0; layout < 3; layout++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int acc = 0; acc < 2; acc++)
                run_case(layout, sizes[s][0], sizes[s][1], sizes[s][2], acc, !acc && layout == 0);
    /* K = 0: the bias (or zeros), or c unchanged */
    float c[6] = {9, 9, 9, 9, 9, 9}, bias[3] = {1, 2, 3};
    CHECK(rai_gemm(c, 3, NULL, 0, 0, NULL, 0, 0, 2, 3, 0, bias, 0, RA_GEMM_REF, 1) == 0, "k 0");
    CHECK(c[0] == 1 && c[4] == 2 && c[5] == 3, "k 0: the bias");
    CHECK(rai_gemm(c, 3, NULL, 0, 0, NULL, 0, 0, 2, 3, 0, NULL, 1, RA_GEMM_REF, 1) == 0 &&
          c[5] == 3, "k 0 accumulate: unchanged");
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}
