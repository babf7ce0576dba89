/* nn_kernels.h - the layers' kernels (private), in the manner of the
 * attention kernels of kernels.h: one table entry per kernel set (ref, avx2,
 * avx512), chosen by the same dispatch (ra_kernel_current(): the CPU,
 * RELATTN_KERNEL or ra_kernel_select). src/nn/nn.c is the framework
 * (threads, blocks of rows and elements, row maps, the OpenBLAS fallback)
 * and calls only what the active entry gives. The scalar kernels of
 * nn_ref.c are never optimised and stay the oracle of the others. */
#ifndef RA_NN_KERNELS_H
#define RA_NN_KERNELS_H

#include "gemm_kernels.h"

#include <stddef.h>
#include <stdint.h>

/* The float32 factors of one AdamW step (src/nn/optim.c computes them
 * as torch.optim.AdamW does): per element, in this order and each step
 * rounded (no contraction),
 *   p = param keep;  m' = m b1 + a1 g;  v' = v b2 + (a2 g) g
 *   param' = p + (neg_step m') / (sqrt(v') / bc2_sqrt + eps)            */
typedef struct rai_adamw_factors {
    float keep, b1, a1, b2, a2, neg_step, bc2_sqrt, eps;
} rai_adamw_factors;

typedef struct rai_nn_kernel {
    const char *name;
    /* y = x * 0.5 * (1 + erf(x / sqrt 2)), n elements (y may be x) */
    void (*gelu)(float *y, const float *x, int64_t n);
    /* dx += dy * GELU'(x), n elements (dx may be dy) */
    void (*gelu_backward)(float *dx, const float *dy, const float *x, int64_t n);
    /* y = GELU'(x), n elements (y may be x) */
    void (*gelu_deriv)(float *y, const float *x, int64_t n);
    /* y = GELU(x) and d = GELU'(x) from one erf, with gelu's and
     * gelu_deriv's bits (y may be x); NULL: those two in turn */
    void (*gelu_keep)(float *y, float *d, const float *x, int64_t n);
    /* One LayerNorm row of c elements (y may be x): statistics in double,
     * mean and rstd saved as float if not NULL; gamma, beta may be NULL. */
    void (*layernorm_row)(float *y, float *mean, float *rstd, const float *x,
                          const float *gamma, const float *beta, int c, float eps);
    /* Four rows at once, each with the bits of layernorm_row; or NULL. */
    void (*layernorm_rows4)(float *const y[4], float *const mean[4], float *const rstd[4],
                            const float *const x[4], const float *gamma, const float *beta,
                            int c, float eps);
    /* One LayerNorm row in float32, the inference of bf16 and int8: the
     * arithmetic of rai_nn_layernorm_row_f32_ref, the same bits in every
     * set. */
    void (*layernorm_row_f32)(float *y, const float *x, const float *gamma, const float *beta,
                              int c, float eps);
    /* LayerNorm backward of a block of rows: dx += (dx may be NULL) and the
     * block's column sums of dy xhat and dy ADDED to pg, pb (c doubles
     * each, either may be NULL), rows in order; the framework adds the
     * blocks' sums in block order. NULL: the framework runs the reference
     * (rai_nn_layernorm_backward_dx_ref and _sums_ref), rows for dx and
     * strips of columns for the sums. */
    void (*layernorm_backward_rows)(float *dx, double *pg, double *pb, const float *dy,
                                    const float *x, const float *mean, const float *rstd,
                                    const float *gamma, int64_t rows, int c);
    /* One AdamW step of n elements with the factors of a (rai_adamw_ref's
     * arithmetic, element by element: the same bits in every set). */
    void (*adamw)(float *param, float *m, float *v, const float *grad, int64_t n,
                  const struct rai_adamw_factors *a);
    /* The micro-kernel of the portable product rai_gemm (RA_GEMM_REF or
     * RA_GEMM_AVX2), used where there are no fused products. */
    int gemm_micro;
    /* The micro-kernel of precision int8's product rai_gemm_i8 and of the
     * packing of its weights (RA_GEMM_REF, RA_GEMM_AVX2 or
     * RA_GEMM_AVX512_VNNI). */
    int gemm_i8_micro;
    /* The fused products (gemm_kernels.h: rai_gemm_avx512_ext and
     * rai_gemm_tn_avx512), or NULL: the framework then runs the portable
     * product and the separate element-wise kernels. */
    int (*gemm)(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                int64_t ldw, int wt, int64_t m, int n, int k, const float *bias, int gelu,
                const float *gm, float *res, int64_t ldres, const int32_t *map, int nthreads);
    int (*gemm_tn)(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
                   int64_t ldb, int64_t m, int n, int k, float *db, int nthreads);
} rai_nn_kernel;

extern const rai_nn_kernel rai_nn_kernel_ref;
#ifdef RA_HAVE_X86_KERNELS
extern const rai_nn_kernel rai_nn_kernel_avx2;
extern const rai_nn_kernel rai_nn_kernel_avx512;
#endif

/* The entry of the kernel set chosen now (ra_kernel_current(); never
 * NULL). */
const rai_nn_kernel *rai_nn_kernel_active(void);
/* The micro-kernel of precision bf16's product (gemm_bf16.c) in the kernel
 * set chosen now: RA_GEMM_BF16_AVX512 for the avx512 set on a CPU with
 * AVX512_BF16, else -1: bf16 then runs its reference path (rounded values
 * through the float32 product). */
int rai_bf16_micro(void);
/* 1 if the CPU has AVX512_VNNI with AVX-512F, BW and VL (what
 * RA_GEMM_AVX512_VNNI needs) and they are not hidden, else 0. */
int rai_cpu_has_vnni(void);
/* Hide them (hide 1: the avx512 set as on a CPU without VNNI, its int8
 * product on AVX2; the tests compare the two) or not (0); returns the
 * previous setting. */
int rai_cpu_hide_vnni(int hide);

/* ---- the scalar reference (nn_ref.c) -------------------------------------- */

void rai_nn_gelu_ref(float *y, const float *x, int64_t n);
void rai_nn_gelu_backward_ref(float *dx, const float *dy, const float *x, int64_t n);
void rai_nn_gelu_deriv_ref(float *y, const float *x, int64_t n);
/* The float32 LayerNorm (layernorm_row_f32): the row's sum and its sum of
 * squared deviations each on 16 lanes, lane l taking elements l, l + 16,
 * ... in order (the squares by one fused multiply-add each), the lanes
 * then folded by rai_ln_f32_fold; mean = sum / c, rstd = 1 / sqrt(ssd / c
 * + eps), y = ((x - mean) rstd) gamma + beta, each step rounded. */
void rai_nn_layernorm_row_f32_ref(float *y, const float *x, const float *gamma, const float *beta,
                                  int c, float eps);
/* The sum of 16 lanes: lanes l and l + 8, then l + 4, l + 2, l + 1. */
static inline float rai_ln_f32_fold(const float s[16]) {
    float t[8];
    for (int l = 0; l < 8; l++) t[l] = s[l] + s[l + 8];
    for (int l = 0; l < 4; l++) t[l] = t[l] + t[l + 4];
    for (int l = 0; l < 2; l++) t[l] = t[l] + t[l + 2];
    return t[0] + t[1];
}
void rai_nn_layernorm_row_ref(float *y, float *mean, float *rstd, const float *x,
                              const float *gamma, const float *beta, int c, float eps);
/* dx (rows, C) += the LayerNorm backward of rows [0, rows), each row on
 * its own. */
void rai_nn_layernorm_backward_dx_ref(float *dx, const float *dy, const float *x,
                                      const float *mean, const float *rstd, const float *gamma,
                                      int64_t rows, int c);
/* ag[j] += sum over the rows of dy xhat, ab[j] += sum of dy, for the jn
 * columns j0 .. j0+jn-1 of rows [0, rows) (row stride c), rows in order. */
void rai_nn_layernorm_backward_sums_ref(double *ag, double *ab, const float *dy, const float *x,
                                        const float *mean, const float *rstd, int64_t rows,
                                        int c, int j0, int jn);

/* The AdamW step of rai_adamw_factors, one element at a time: the oracle. */
void rai_nn_adamw_ref(float *param, float *m, float *v, const float *grad, int64_t n,
                      const rai_adamw_factors *a);

/* ---- AVX2 + FMA (nn_avx2.c) ----------------------------------------------- */

#ifdef RA_HAVE_X86_KERNELS
/* y = erf(x), n elements (y may be x) */
void rai_nn_erf_avx2(float *y, const float *x, int64_t n);
void rai_nn_gelu_avx2(float *y, const float *x, int64_t n);
void rai_nn_gelu_backward_avx2(float *dx, const float *dy, const float *x, int64_t n);
void rai_nn_gelu_deriv_avx2(float *y, const float *x, int64_t n);
void rai_nn_layernorm_row_avx2(float *y, float *mean, float *rstd, const float *x,
                               const float *gamma, const float *beta, int c, float eps);
void rai_nn_layernorm_row_f32_avx2(float *y, const float *x, const float *gamma,
                                   const float *beta, int c, float eps);
void rai_nn_adamw_avx2(float *param, float *m, float *v, const float *grad, int64_t n,
                       const rai_adamw_factors *a);
/* The same on 16 lanes (gemm_avx512.c, with the avx512 set's other layers). */
void rai_nn_adamw_avx512(float *param, float *m, float *v, const float *grad, int64_t n,
                         const rai_adamw_factors *a);
#endif

#endif
