/* nn.h - the layers' building blocks beyond the public ones of relattn.h
 * (src/nn/nn.c): rows gathered and scattered through a window row map (the
 * window partition / reverse fused into the layers around attention), and
 * the Linear layer with its neighbours fused. Private to the library. */
#ifndef RA_NN_H
#define RA_NN_H

#include "base/internal.h"

/* 1 when the layers' kernel set in use is not the scalar reference. */
int rai_nn_simd(void);

/* y row r = LayerNorm(x row src[r]) (src NULL: row r), a row of zeros where
 * src[r] < 0; rows in parallel. No statistics are saved (inference). */
void rai_layernorm_rows(float *y, const float *x, const int32_t *src, int64_t rows, int c,
                        const float *gamma, const float *beta, float eps);

/* y row r = x row map[r], or zeros where map[r] < 0 (map NULL: row r). */
void rai_rows_gather(float *y, const float *x, const int32_t *map, int64_t rows, int c);
/* x row dst[r] += a row r for dst[r] >= 0 (distinct rows: no races). */
void rai_rows_scatter_add(float *x, const float *a, const int32_t *dst, int64_t rows, int c);

/* A Linear layer with its neighbours fused: r = x (M, K) . w (N, K)^T + b
 * (b may be NULL), then r = GELU(r) if gelu; then either y = r or, with
 * res, res row map[i] += r row i (map NULL: row i; negative: skipped;
 * rows of N floats). y (M, N) is always given: the fallback path (OpenBLAS
 * and the separate loops, with the same results) works in it. */
void rai_linear_fused(float *y, const float *x, const float *w, const float *b, int64_t m, int n,
                      int k, int gelu, float *res, const int32_t *map);

/* A LayerNorm's parameters: gamma, beta (C, either may be NULL), eps. */
typedef struct rai_ln {
    const float *gamma, *beta;
    float eps;
} rai_ln;

/* An MLP's inference forward, y (M, C) = fc2(GELU(fc1(h))) (fc1 w1 (hidden,
 * C), fc2 w2 (C, hidden), biases or NULL) with h = x, or LayerNorm(x)
 * with ln; or res (M, C) += it (res may be x). The LayerNorm into y
 * (rai_layernorm_rows), then the two rai_linear_fused through hid (M,
 * hidden); or, in precision bf16 or int8 with both weights packed, both
 * layers a block of rows at a time (int8: the LayerNorm too) with the
 * same bits (hid unused; y too for int8 with res). */
void rai_mlp_fused(float *y, const float *x, const rai_ln *ln, const float *w1, const float *b1,
                   const float *w2, const float *b2, int64_t m, int c, int hidden, float *hid,
                   float *res);

/* ra_linear_backward with dx overwritten instead of accumulated if set,
 * and, with gd (M, K), dx = (dy . w) * gd (set implied): with GELU' of
 * rai_gelu_keep, the GELU before the layer back-propagated in the same
 * product. */
/* The patch embedding with a kernel of kp >= p pixels (kp - p even) at
 * stride p, padded by (kp - p) / 2 on every side: Conv2d(Cin, E, kp,
 * stride=p, padding=(kp-p)/2), an overlapping patch embedding; kp = p is
 * ra_patch_embed_forward / _backward (relattn.h), which call these. */
#define RAI_PATCH_KERNEL_MAX 64
ra_status rai_patch_embed_forward_k(float *y, float *cols, const float *x, const float *weight,
                                    const float *bias, int b, int cin, int h, int w, int p,
                                    int kp, int e, int pad);
ra_status rai_patch_embed_backward_k(float *dx, float *dweight, float *dbias, float *work,
                                     const float *dy, const float *cols, const float *weight,
                                     int b, int cin, int h, int w, int p, int kp, int e, int pad);

void rai_linear_backward_fused(float *dx, float *dw, float *db, const float *dy, const float *x,
                               const float *w, int64_t m, int n, int k, int set, const float *gd);
/* g (n) = GELU(h) and, with gd, gd = GELU'(h), from one erf per element
 * where the kernel set has it (gelu_keep), with the bits of ra_gelu_forward
 * and of the fused product's epilogue: a training forward keeps h (fc1's
 * output) alone, and its backward remakes both from it. */
void rai_gelu_keep(float *g, float *gd, const float *h, int64_t n);

#endif
