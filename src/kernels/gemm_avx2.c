/* gemm_avx2.c - the 6 x 16 micro-kernel of gemm.c on AVX2 + FMA: twelve
 * accumulators, one lane per element of the tile, each a chain of fused
 * multiply-adds over kc in order. */
#include "gemm_kernels.h"

#include <immintrin.h>

void rai_gemm_micro_avx2(int kc, const float *ap, const float *bp, float *c, int64_t ldc,
                         const float *bias, int accumulate) {
    __m256 c0a = _mm256_setzero_ps(), c0b = _mm256_setzero_ps();
    __m256 c1a = _mm256_setzero_ps(), c1b = _mm256_setzero_ps();
    __m256 c2a = _mm256_setzero_ps(), c2b = _mm256_setzero_ps();
    __m256 c3a = _mm256_setzero_ps(), c3b = _mm256_setzero_ps();
    __m256 c4a = _mm256_setzero_ps(), c4b = _mm256_setzero_ps();
    __m256 c5a = _mm256_setzero_ps(), c5b = _mm256_setzero_ps();
    for (int r = 0; r < RA_GEMM_MR; r++) {   /* the tile's rows of c, for the end */
        _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + r * ldc + 15), _MM_HINT_T0);
    }
    for (int kk = 0; kk < kc; kk++, ap += RA_GEMM_MR, bp += RA_GEMM_NR) {
        _mm_prefetch((const char *)(ap + 16 * RA_GEMM_MR), _MM_HINT_T0);   /* a, 16 steps on */
        const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
        __m256 a = _mm256_broadcast_ss(ap + 0);
        c0a = _mm256_fmadd_ps(a, b0, c0a), c0b = _mm256_fmadd_ps(a, b1, c0b);
        a = _mm256_broadcast_ss(ap + 1);
        c1a = _mm256_fmadd_ps(a, b0, c1a), c1b = _mm256_fmadd_ps(a, b1, c1b);
        a = _mm256_broadcast_ss(ap + 2);
        c2a = _mm256_fmadd_ps(a, b0, c2a), c2b = _mm256_fmadd_ps(a, b1, c2b);
        a = _mm256_broadcast_ss(ap + 3);
        c3a = _mm256_fmadd_ps(a, b0, c3a), c3b = _mm256_fmadd_ps(a, b1, c3b);
        a = _mm256_broadcast_ss(ap + 4);
        c4a = _mm256_fmadd_ps(a, b0, c4a), c4b = _mm256_fmadd_ps(a, b1, c4b);
        a = _mm256_broadcast_ss(ap + 5);
        c5a = _mm256_fmadd_ps(a, b0, c5a), c5b = _mm256_fmadd_ps(a, b1, c5b);
    }
    __m256 acc[12] = {c0a, c0b, c1a, c1b, c2a, c2b, c3a, c3b, c4a, c4b, c5a, c5b};
    const __m256 b0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    const __m256 b1 = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
    for (int r = 0; r < RA_GEMM_MR; r++, c += ldc) {
        __m256 lo = acc[2 * r], hi = acc[2 * r + 1];
        if (accumulate) {
            lo = _mm256_add_ps(_mm256_loadu_ps(c), lo);
            hi = _mm256_add_ps(_mm256_loadu_ps(c + 8), hi);
        } else if (bias) {
            lo = _mm256_add_ps(b0, lo);
            hi = _mm256_add_ps(b1, hi);
        }
        _mm256_storeu_ps(c, lo), _mm256_storeu_ps(c + 8, hi);
    }
}
