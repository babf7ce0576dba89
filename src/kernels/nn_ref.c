/* nn_ref.c - the layers' scalar reference kernels: GELU and its derivative
 * in PyTorch's float expressions, LayerNorm forward and backward in double.
 * Never optimised: they are the oracle the vector kernels (nn_avx2.c,
 * gemm_avx512.c) are tested against, and what RELATTN_KERNEL=ref runs. */
#include "nn_kernels.h"

#include <math.h>

#define RA_SQRT1_2 0.70710678118654752440      /* 1 / sqrt(2) */
#define RA_INV_SQRT_2PI 0.39894228040143267794 /* 1 / sqrt(2 pi) */

/* The same float expressions as PyTorch's CPU GeluKernel (approximate =
 * 'none'); erff and expf of glibc are correctly rounded to within an ulp. */
void rai_nn_gelu_ref(float *y, const float *x, int64_t n) {
    const float r2 = (float)RA_SQRT1_2;
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        y[i] = v * 0.5f * (1.0f + erff(v * r2));
    }
}

/* GELU'(v) = Phi(v) + v * phi(v), in PyTorch's float expressions (its CPU
 * GeluBackwardKernel). */
static inline float gelu_deriv(float v) {
    const float cdf = 0.5f * (1.0f + erff(v * (float)RA_SQRT1_2));
    const float pdf = (float)RA_INV_SQRT_2PI * expf(v * v * -0.5f);
    return cdf + v * pdf;
}

void rai_nn_gelu_backward_ref(float *dx, const float *dy, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * gelu_deriv(x[i]);
}

void rai_nn_gelu_deriv_ref(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = gelu_deriv(x[i]);
}

/* Statistics in double, two passes (no cancellation for inputs far from 0),
 * saved as float: the backward pass recomputes xhat from them. */
void rai_nn_layernorm_row_ref(float *yr, float *mean, float *rstd, const float *xr,
                              const float *gamma, const float *beta, int c, float eps) {
    double s = 0, ss = 0;
    for (int j = 0; j < c; j++) s += xr[j];
    const double mu = s / c;
    for (int j = 0; j < c; j++) {
        const double d = xr[j] - mu;
        ss += d * d;
    }
    const double rs = 1.0 / sqrt(ss / c + (double)eps);
    if (mean) *mean = (float)mu;
    if (rstd) *rstd = (float)rs;
    for (int j = 0; j < c; j++) {
        double v = (xr[j] - mu) * rs;
        if (gamma) v *= gamma[j];
        if (beta) v += beta[j];
        yr[j] = (float)v;
    }
}

void rai_nn_layernorm_row_f32_ref(float *y, const float *x, const float *gamma, const float *beta,
                                  int c, float eps) {
    float s[16] = {0}, q[16] = {0};
    for (int j = 0; j < c; j++) s[j % 16] += x[j];
    const float mu = rai_ln_f32_fold(s) / (float)c;
    for (int j = 0; j < c; j++) {
        const float d = x[j] - mu;
        q[j % 16] = fmaf(d, d, q[j % 16]);
    }
    const float rs = 1.0f / sqrtf(rai_ln_f32_fold(q) / (float)c + eps);
    for (int j = 0; j < c; j++) {
        float v = (x[j] - mu) * rs;
        if (gamma) v = v * gamma[j];
        if (beta) v = v + beta[j];
        y[j] = v;
    }
}

/* Per row: g = dy gamma, xhat = (x - mu) rstd, the row means of g and of
 * g xhat, dx += rstd (g - mean(g) - xhat mean(g xhat)), all in double. */
void rai_nn_layernorm_backward_dx_ref(float *dx, const float *dy, const float *x,
                                      const float *mean, const float *rstd, const float *gamma,
                                      int64_t rows, int c) {
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * c, *gr = dy + i * c;
        const double mu = mean[i], rs = rstd[i];
        double sg = 0, sgx = 0;   /* mean of g and of g * xhat */
        for (int j = 0; j < c; j++) {
            const double g = gamma ? (double)gr[j] * gamma[j] : gr[j];
            sg += g;
            sgx += g * ((xr[j] - mu) * rs);
        }
        sg /= c;
        sgx /= c;
        float *dr = dx + i * c;
        for (int j = 0; j < c; j++) {
            const double g = gamma ? (double)gr[j] * gamma[j] : gr[j];
            const double xh = (xr[j] - mu) * rs;
            dr[j] = (float)((double)dr[j] + rs * (g - sg - xh * sgx));
        }
    }
}

void rai_nn_layernorm_backward_sums_ref(double *ag, double *ab, const float *dy, const float *x,
                                        const float *mean, const float *rstd, int64_t rows,
                                        int c, int j0, int jn) {
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * c + j0, *gr = dy + i * c + j0;
        const double mu = mean[i], rs = rstd[i];
        for (int j = 0; j < jn; j++) {
            ag[j] += gr[j] * ((xr[j] - mu) * rs);
            ab[j] += gr[j];
        }
    }
}

void rai_nn_adamw_ref(float *param, float *m, float *v, const float *grad, int64_t n,
                      const rai_adamw_factors *a) {
    for (int64_t i = 0; i < n; i++) {
        const float g = grad[i];
        const float p = param[i] * a->keep;
        const float mi = m[i] * a->b1 + a->a1 * g;
        const float vi = v[i] * a->b2 + a->a2 * g * g;
        const float den = sqrtf(vi) / a->bc2_sqrt + a->eps;
        m[i] = mi;
        v[i] = vi;
        param[i] = p + a->neg_step * mi / den;
    }
}

const rai_nn_kernel rai_nn_kernel_ref = {
    .name = "ref",
    .gelu = rai_nn_gelu_ref,
    .gelu_backward = rai_nn_gelu_backward_ref,
    .gelu_deriv = rai_nn_gelu_deriv_ref,
    .layernorm_row = rai_nn_layernorm_row_ref,
    .layernorm_rows4 = NULL,
    .layernorm_row_f32 = rai_nn_layernorm_row_f32_ref,
    .layernorm_backward_rows = NULL,
    .adamw = rai_nn_adamw_ref,
    .gemm_micro = RA_GEMM_REF,
    .gemm_i8_micro = RA_GEMM_REF,
    .gemm = NULL,
    .gemm_tn = NULL,
};
