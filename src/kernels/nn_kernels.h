/* nn_kernels.h - vectorised element-wise layers (private): the AVX2 + FMA
 * versions of the scalar loops of src/nn/nn.c, which chooses between them
 * (ra_nn_simd) and keeps the scalar loops as fallback and oracle. */
#ifndef RA_NN_KERNELS_H
#define RA_NN_KERNELS_H

#include <stdint.h>

#ifdef RA_HAVE_X86_KERNELS
/* y = erf(x), n elements (y may be x) */
void ra_nn_erf_avx2(float *y, const float *x, int64_t n);
/* y = x * 0.5 * (1 + erf(x / sqrt 2)), n elements (y may be x) */
void ra_nn_gelu_avx2(float *y, const float *x, int64_t n);
/* dx += dy * GELU'(x), n elements (dx may be dy) */
void ra_nn_gelu_backward_avx2(float *dx, const float *dy, const float *x, int64_t n);
/* y = GELU'(x), n elements (y may be x) */
void ra_nn_gelu_deriv_avx2(float *y, const float *x, int64_t n);
/* One LayerNorm row of c elements (y may be x); mean, rstd may be NULL,
 * gamma, beta too. */
void ra_nn_layernorm_row_avx2(float *y, float *mean, float *rstd, const float *x,
                              const float *gamma, const float *beta, int c, float eps);
#endif

#endif
