/* precision.h - reduced precision (src/nn/precision.c).
 *
 * What a Linear computes in each precision; the reference path of bf16,
 * and the weights every precision holds:
 *   bf16  weights and each product's input rounded to bfloat16 (nearest
 *         even) as they enter the product (the float32 weights are left
 *         alone: a training run's master copy); the VDPBF16PS product of
 *         kernels/gemm_bf16.c, or where the CPU lacks it the float32
 *         product of the rounded values (rai_precision_input); float32
 *         sums, forward and backward (dX, dW) alike;
 *   int8  weights quantised once per output channel (symmetric: scale
 *         max|w| / 127, q = round-half-even(w / scale) in [-127, 127]),
 *         held as the values q x scale; the product is gemm_i8.c's
 *         (kernels/gemm_kernels.h): the input quantised per row at run
 *         time (7 bits with a zero point), integer sums, then the scales.
 * LayerNorm, softmax, GELU, the residual stream, the attention core and
 * the position tables stay float32. The precision of the products a
 * thread computes is thread-local: ra_model_forward sets it for the
 * model's. */
#ifndef RA_NN_PRECISION_H
#define RA_NN_PRECISION_H

#include "base/internal.h"

/* The thread's precision: rai_precision_get / _set / _failed (base/internal.h). */

/* x (m, k) as a bf16 product sees it: into a buffer of the calling thread
 * (one per which, 0 or 1: the two operands of a product; valid until its
 * next call); x itself for any other precision; NULL without memory. */
const float *rai_precision_input(const float *x, int64_t m, int k, ra_precision p, int which);

/* w (n, k) in place as precision p rounds it (per row: one output channel);
 * a model in int8 holds its weights so, one in bf16 does not. */
void rai_precision_weights(float *w, int64_t n, int64_t k, ra_precision p);

/* A model's Linear weights as precision int8 or bf16 packs them, once
 * (kernels/gemm_kernels.h rai_i8_weights, rai_bf16_weights; for bf16
 * where the kernel set has no VDPBF16PS product, the rounded float32
 * values of its reference path), found by the address of the float32
 * weights: the product then skips quantising or rounding and packing them
 * at every call. */
typedef struct rai_packed rai_packed;
/* count weights w[i] (n[i], k[i]) packed for p (int8 or bf16); NULL
 * without memory, for another precision or a K past
 * rai_precision_max_inputs. */
rai_packed *rai_packed_make(const float *const *w, const int64_t *n, const int64_t *k, int count,
                            ra_precision p);
void rai_packed_free(rai_packed *t);
/* The packed weights of w (n, k) in the calling thread's table, or NULL. */
const struct rai_i8_weights *rai_packed_find(const float *w, int n, int k);
const struct rai_bf16_weights *rai_packed_find_bf16(const float *w, int n, int k);
/* w rounded to bfloat16 (n x k float32 values), or NULL. */
const float *rai_packed_find_rounded(const float *w, int n, int k);
/* The calling thread's table (the model whose forward runs; NULL: none);
 * set returns the one before. */
const rai_packed *rai_packed_set(const rai_packed *t);
const rai_packed *rai_packed_get(void);

/* The inputs a Linear may have in precision p: int8's integer sums are
 * exact up to RA_GEMM_I8_KMAX (kernels/gemm_kernels.h); no bound
 * (INT64_MAX) for the others. */
int64_t rai_precision_max_inputs(ra_precision p);

/* A row of n (< 2^31) values as symmetric int8, the weights' format of
 * kernels/gemm_i8.c: q (n) and the scale returned (max|x| / 127; 0 for a
 * row of zeros, or with an infinity or NaN, q then all 0); the row is then
 * q x scale, as precision int8 holds it. */
float rai_int8_row(int8_t *q, const float *x, int64_t n);

#endif
