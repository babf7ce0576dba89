/* nn.c - the neural-network layers around attention (Linear on BLAS, ...). */
#include "internal.h"

#include <cblas.h>
#include <string.h>

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
    if (db)
        for (int64_t i = 0; i < m; i++)
            for (int j = 0; j < n; j++) db[j] += dy[i * n + j];
}
