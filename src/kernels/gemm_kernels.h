/* gemm_kernels.h - the inference product of the Linear layers on AVX-512
 * (private; src/kernels/gemm_avx512.c, dispatched by src/nn.c). */
#ifndef RA_GEMM_KERNELS_H
#define RA_GEMM_KERNELS_H

#include <stdint.h>

#ifdef RA_HAVE_X86_KERNELS
/* y (M, N; row stride ldy) = epilogue(x (M, K; ldx) . w (N, K; ldw)^T):
 * + bias (N) if given, then GELU if gelu, then either stored into y or,
 * with res, added into res row map[i] (skipped if negative; map NULL: row
 * i; row stride ldres), y unused. nthreads OpenMP threads. Returns 0, or
 * -1 (nothing done) for K < 1 or no memory for the packed panels. */
int ra_gemm_avx512(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                   int64_t ldw, int64_t m, int n, int k, const float *bias, int gelu,
                   float *res, int64_t ldres, const int32_t *map, int nthreads);
/* ra_gemm_avx512 with more: w given transposed if wt ((K, N; ldw), as a
 * backward's dX = dY W takes it: no transposed copy); gd (ldy), if given
 * with gelu, receives GELU' of the sums (+ bias) from the same erf as the
 * GELU (what the backward multiplies by); gm (ldy), if given, multiplies
 * the sums by gm (that GELU's backward fused into the product before it). */
int ra_gemm_avx512_ext(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                       int64_t ldw, int wt, int64_t m, int n, int k, const float *bias, int gelu,
                       float *gd, const float *gm, float *res, int64_t ldres,
                       const int32_t *map, int nthreads);
/* c (N, K; ldc) += a (M, N; lda)^T . b (M, K; ldb), the weight gradient of
 * a Linear layer, and db (N) += the column sums of a (in double, rows in
 * order: nn.c's colsum_add) if db is not NULL; each element of c one
 * ordered chain over the M rows from 0, the same bits for any nthreads.
 * Returns 0, or -1 (nothing done) without memory for the per-thread
 * scratch (kept between calls: nothing is allocated once it has grown). */
int ra_gemm_tn_avx512(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
                      int64_t ldb, int64_t m, int n, int k, float *db, int nthreads);
/* y = GELU(x) on 16 lanes, as the epilogue computes it (y may be x). */
void ra_gemm_gelu_avx512(float *y, const float *x, int64_t n);
/* dx += dy * GELU'(x) on 16 lanes (dx may be dy). */
void ra_gemm_gelu_backward_avx512(float *dx, const float *dy, const float *x, int64_t n);
/* ra_nn_layernorm_row_avx2 (nn_kernels.h) on 8 double lanes. */
void ra_nn_layernorm_row_avx512(float *y, float *mean, float *rstd, const float *x,
                                const float *gamma, const float *beta, int c, float eps);
/* The same for four rows at once (each its own y, mean, rstd, x; mean and
 * rstd may be NULL), each with the bits of the one-row kernel. */
void ra_nn_layernorm_rows4_avx512(float *const y[4], float *const mean[4], float *const rstd[4],
                                  const float *const x[4], const float *gamma, const float *beta,
                                  int c, float eps);
/* LayerNorm backward of rows [0, rows) (src/nn.c's scalar loop on 8 double
 * lanes): dx += (may be NULL), and the column sums of dy xhat and dy
 * ADDED to pg and pb (c doubles each; either may be NULL), rows in order. */
void ra_nn_layernorm_backward_rows_avx512(float *dx, double *pg, double *pb, const float *dy,
                                          const float *x, const float *mean, const float *rstd,
                                          const float *gamma, int64_t rows, int c);
#endif

#endif
