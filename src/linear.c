/* linear.c - torch.nn.Linear on BLAS: y = x @ w^T + b. */
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
