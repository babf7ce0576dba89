/* precision.h - reduced precision as rounding points (src/nn/precision.c).
 *
 * The reference path of every precision, and what runs where the CPU has
 * no instruction for it: the products keep their float32 kernels, and the
 * precision is where values are rounded, exactly as the fast kernels see
 * them:
 *   bf16  weights rounded once to bfloat16 (nearest even), each product's
 *         input rounded to bfloat16 as it enters; float32 sums;
 *   int8  weights quantised once per output channel (symmetric: scale
 *         max|w| / 127, q = round-half-even(w / scale) in [-127, 127]),
 *         each product's input per row the same way at run time; the
 *         values q x scale, float32 sums (exact below 2^24).
 * LayerNorm, softmax, GELU, the residual stream, the attention core and
 * the position tables stay float32. The precision of the products a
 * thread computes is thread-local: ra_model_forward sets it for the
 * model's. */
#ifndef RA_NN_PRECISION_H
#define RA_NN_PRECISION_H

#include "base/internal.h"

/* The thread's precision: rai_precision_get / _set / _failed (base/internal.h). */

/* x (m, k) as a product of precision p sees it: into a buffer of the
 * calling thread (valid until its next call), or x itself for float32;
 * NULL without memory. */
const float *rai_precision_input(const float *x, int64_t m, int k, ra_precision p);

/* w (n, k) in place as precision p holds it (per row: one output channel). */
void rai_precision_weights(float *w, int64_t n, int64_t k, ra_precision p);

/* A row of n values as symmetric int8: q (n) and the scale returned
 * (max|x| / 127; 0 for a row of zeros, or with an infinity or NaN, when q
 * is left alone); the row is then q x scale, as precision int8 holds it. */
float rai_int8_row(int8_t *q, const float *x, int64_t n);

/* v rounded to bfloat16 (rai_bf16_bits), as a float. */
float rai_round_bf16(float v);

#endif
