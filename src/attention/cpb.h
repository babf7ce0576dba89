/* cpb.h - the pieces of SwinV2 attention around the attention core
 * (src/attention/cpb.c), private to the library.
 *
 * SwinV2's window attention (Liu et al. 2022) differs from Swin's in three
 * places, all outside the core, which runs unchanged with scale 1:
 *   - q and k are each normalised per head (F.normalize, eps 1e-12) and q is
 *     multiplied by exp(min(logit_scale[h], log 100)): cosine attention with
 *     a learned temperature (the official code multiplies the logits; the
 *     product is the same up to rounding);
 *   - the bias table (T, nH) is 16 sigmoid(cpb_mlp(coords)), a 2 -> 512 -> nH
 *     MLP (ReLU, second Linear without bias) over log-spaced relative
 *     coordinates, computed per call and gathered by the Swin index;
 *   - the qkv projection has no bias of its own: q_bias and v_bias, a zero
 *     key bias. */
#ifndef RA_SWINV2_H
#define RA_SWINV2_H

#include "base/internal.h"

#define RA_CPB_HIDDEN 512

/* coords (T, 2), T = (2wh-1)(2ww-1), row (dh + wh-1)*(2ww-1) + dw + ww-1:
 * (f(dh / (ph-1)), f(dw / (pw-1))) with (ph, pw) the pretrained window when
 * both are > 0, else the window, f(u) = sign(u) log2(8|u| + 1) / 3.
 * RA_ERR_ARG when a divisor is 0 (a window or pretrained window of 1: the
 * PyTorch code divides 0 by 0 there). */
ra_status rai_swinv2_coords(float *coords, int wh, int ww, const int pretrained[2]);

/* table (T, nH) = 16 sigmoid(relu(coords w1^T + b1) w2^T); hid (T, 512)
 * scratch. */
void rai_cpb_forward(float *table, float *hid, const float *coords, int64_t t, int nh,
                     const float *w1, const float *b1, const float *w2);

/* Gradients of rai_cpb_forward, ACCUMULATED into dw1 (512, 2), db1 (512),
 * dw2 (nH, 512) (any may be NULL), from dtable (T, nH, overwritten) and the
 * forward's table; hid (2 * T * 512) scratch. */
void rai_cpb_backward(float *dw1, float *db1, float *dw2, float *dtable, const float *table,
                      float *hid, const float *coords, int64_t t, int nh, const float *w1,
                      const float *b1, const float *w2);

/* In place on qkv (rows, 3C), the projection without bias: q += q_bias,
 * v += v_bias (NULL: none); per head, yq = q / max(|q|, eps) (kept in yq
 * (rows, C)), q = exp(min(logit_scale, log 100)) yq, k = k / max(|k|, eps);
 * norms (rows, 2 nH) = |q|, then |k| per head. */
void rai_swinv2_qk_forward(float *qkv, int64_t rows, int c, int nh, const float *logit_scale,
                           const float *q_bias, const float *v_bias, float *yq, float *norms);

/* Back through rai_swinv2_qk_forward, in place on dqkv (rows, 3C): the
 * gradients of the projection's outputs in; dlogit_scale (nH), dq_bias and
 * dv_bias (C) ACCUMULATED (NULL: skipped); qkv is the forward's result. */
void rai_swinv2_qk_backward(float *dqkv, const float *qkv, const float *yq, const float *norms,
                            int64_t rows, int c, int nh, const float *logit_scale,
                            float *dlogit_scale, float *dq_bias, float *dv_bias);

/* A saved relative_coords_table (1, 2Wh-1, 2Ww-1, 2) must be the one the
 * configuration gives (to 1e-5: log2 differs in the last bit between
 * libraries). */
ra_status rai_swinv2_check_coords(const ra_st_file *f, const ra_st_tensor *t,
                                  const ra_attn_config *c);

#endif
