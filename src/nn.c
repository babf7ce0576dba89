/* nn.c - the neural-network layers around attention, forward and backward:
 * Linear (BLAS), LayerNorm, GELU, residual add, token mean, softmax
 * cross-entropy, dropout and drop-path, patch embedding and patch merging.
 * Every backward function accumulates (+=) into its gradients. */
#include "internal.h"

#include <cblas.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Column sums: the reductions over rows of the backward passes               */
/* ------------------------------------------------------------------------ */

/* Below this many elements a loop runs on one thread: starting a team costs
 * more than it saves. */
#define RA_NN_PAR_MIN ((int64_t)1 << 15)
/* Columns per task of a column reduction: one cache line of floats, summed
 * in doubles on the stack, so reductions need no workspace and give the same
 * bits whatever the number of threads. */
#define RA_NN_COLS 16

/* out (N) += sum over rows of a (M, N), in double. */
static void colsum_add(float *out, const float *a, int64_t m, int n) {
    const int chunks = (n + RA_NN_COLS - 1) / RA_NN_COLS;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (m * n >= RA_NN_PAR_MIN && chunks > 1)
#endif
    for (int t = 0; t < chunks; t++) {
        const int j0 = t * RA_NN_COLS, jn = n - j0 < RA_NN_COLS ? n - j0 : RA_NN_COLS;
        double acc[RA_NN_COLS] = {0};
        for (int64_t i = 0; i < m; i++) {
            const float *r = a + i * n + j0;
            for (int j = 0; j < jn; j++) acc[j] += r[j];
        }
        for (int j = 0; j < jn; j++) out[j0 + j] = (float)((double)out[j0 + j] + acc[j]);
    }
}

void ra_linear_forward(float *y, const float *x, const float *w, const float *b,
                       int64_t m, int n, int k) {
    if (m <= 0 || n <= 0) return;
    if (b)
        for (int64_t i = 0; i < m; i++) memcpy(y + i * n, b, (size_t)n * sizeof *y);
    /* row-major y (M, N) += x (M, K) . w (N, K)^T; BLAS takes int sizes, and
     * the callers bound M*N and M*K, so split M only if it is huge. */
    const int64_t chunk = INT32_MAX / 2;
    for (int64_t i0 = 0; i0 < m; i0 += chunk) {
        int mm = (int)(m - i0 < chunk ? m - i0 : chunk);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mm, n, k, 1.0f,
                    x + i0 * k, k, w, k, b ? 1.0f : 0.0f, y + i0 * n, n);
    }
}

void ra_linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                        const float *w, int64_t m, int n, int k) {
    if (m <= 0 || n <= 0 || k <= 0) return;
    const int64_t chunk = INT32_MAX / 2;
    for (int64_t i0 = 0; i0 < m; i0 += chunk) {
        int mm = (int)(m - i0 < chunk ? m - i0 : chunk);
        if (dx)   /* dx (M, K) += dy (M, N) . w (N, K) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mm, k, n, 1.0f,
                        dy + i0 * n, n, w, k, 1.0f, dx + i0 * k, k);
        if (dw)   /* dw (N, K) += dy^T (N, M) . x (M, K) */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, mm, 1.0f,
                        dy + i0 * n, n, x + i0 * k, k, 1.0f, dw, k);
    }
    if (db) colsum_add(db, dy, m, n);   /* db (N) += sum_rows dy, in double */
}
