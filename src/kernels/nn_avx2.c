/* nn_avx2.c - the layers' AVX2 + FMA kernels: erf / exact GELU, its
 * derivative, LayerNorm rows; the entry rai_nn_kernel_avx2 (nn_kernels.h).
 * Compiled with -mavx2 -mfma and chosen only when the CPU has both
 * (dispatch.c); the scalar kernels of nn_ref.c are the oracle.
 *
 * erf (float, max error about 1 ulp against the correctly rounded value;
 * tests/test_nn.c compares it with glibc's erff over a dense range):
 *   |x| <= 0.921875  erf(x) = x + x P(x^2), P of degree 5
 *   |x| >  0.921875  erf(x) = sign(x) (1 - exp(Q(t))), t = min(|x|, 4),
 *                    Q of degree 6 ~ log(erfc(t)); erf(4) rounds to 1
 * Both fitted here as weighted minimax polynomials (Lawson iterations on
 * the relative error of erf; 1.6e-8 and 1.5e-9 before rounding the
 * coefficients to float). NaN propagates.
 * GELU is then the scalar path's float expression, x * 0.5 * (1 + erf(x /
 * sqrt 2)), evaluated in the same order (no contraction).
 *
 * LayerNorm: the scalar path's arithmetic in double (statistics in two
 * passes, the affine map per element), four lanes at a time; only the
 * order of the two sums differs. */
#include "nn_kernels.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* ---- exp on [-88, 0]: Cody-Waite reduction, degree-6 polynomial ---------- */

static inline __m256 exp8_neg(__m256 x) {
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 c1 = _mm256_set1_ps(0.693359375f), c2 = _mm256_set1_ps(-2.12194440e-4f);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, c1, x);
    r = _mm256_fnmadd_ps(n, c2, r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    const __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* times 2^n: n in [-126, 0] here, so the exponent field stays normal */
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                                         _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* ---- erf ----------------------------------------------------------------- */

#define ERF_SPLIT 0.921875f

static inline __m256 erf8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 ax = _mm256_andnot_ps(sign, x);
    /* near zero: x + x P(x^2) */
    const __m256 s = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-5.990993519e-04f);
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(4.993213109e-03f));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-2.676664437e-02f));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(1.128181722e-01f));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-3.761249385e-01f));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(1.283791496e-01f));
    const __m256 small = _mm256_fmadd_ps(x, p, x);
    /* away from zero: 1 - exp(Q(t)) with the sign of x */
    const __m256 t = _mm256_min_ps(ax, _mm256_set1_ps(4.0f));
    __m256 q = _mm256_set1_ps(1.947346228e-04f);
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-3.031601753e-03f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(2.218140199e-02f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-1.038389124e-01f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-6.372857526e-01f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-1.127615461e+00f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-2.099135167e-04f));
    const __m256 big = _mm256_or_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), exp8_neg(q)),
                                    _mm256_and_ps(sign, x));
    const __m256 use_big = _mm256_cmp_ps(ax, _mm256_set1_ps(ERF_SPLIT), _CMP_GT_OQ);
    const __m256 r = _mm256_blendv_ps(small, big, use_big);
    /* NaN in, NaN out (the big branch's min would drop it) */
    return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

static inline __m256 gelu8(__m256 v) {
    const __m256 e = erf8(_mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752440f)));
    return _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(0.5f)),
                         _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* lanes [0, n) of 8 as a maskload / maskstore mask */
static inline __m256i tail_mask(int64_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx);
}

void rai_nn_erf_avx2(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, erf8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, m, erf8(_mm256_maskload_ps(x + i, m)));
    }
}

void rai_nn_gelu_avx2(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, gelu8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, m, gelu8(_mm256_maskload_ps(x + i, m)));
    }
}

/* GELU'(v) = 0.5 (1 + erf(v / sqrt 2)) + v (1 / sqrt(2 pi)) exp(-v^2 / 2),
 * the scalar backward's expression in its order; exp of an argument below
 * -87 is 0 (so +-inf gives NaN, as inf * 0 in the scalar loop). */
static inline __m256 gelu_grad8(__m256 v) {
    const __m256 cdf = _mm256_mul_ps(
        _mm256_set1_ps(0.5f),
        _mm256_add_ps(_mm256_set1_ps(1.0f),
                      erf8(_mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752440f)))));
    const __m256 arg = _mm256_mul_ps(_mm256_mul_ps(v, v), _mm256_set1_ps(-0.5f));
    const __m256 e = _mm256_and_ps(_mm256_cmp_ps(arg, _mm256_set1_ps(-87.0f), _CMP_GE_OQ),
                                   exp8_neg(arg));
    const __m256 pdf = _mm256_mul_ps(_mm256_set1_ps(0.39894228040143267794f), e);
    return _mm256_add_ps(cdf, _mm256_mul_ps(v, pdf));
}

void rai_nn_gelu_backward_avx2(float *dx, const float *dy, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 d = _mm256_mul_ps(_mm256_loadu_ps(dy + i), gelu_grad8(_mm256_loadu_ps(x + i)));
        _mm256_storeu_ps(dx + i, _mm256_add_ps(_mm256_loadu_ps(dx + i), d));
    }
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        const __m256 d = _mm256_mul_ps(_mm256_maskload_ps(dy + i, m),
                                       gelu_grad8(_mm256_maskload_ps(x + i, m)));
        _mm256_maskstore_ps(dx + i, m, _mm256_add_ps(_mm256_maskload_ps(dx + i, m), d));
    }
}

void rai_nn_gelu_deriv_avx2(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, gelu_grad8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, m, gelu_grad8(_mm256_maskload_ps(x + i, m)));
    }
}

/* ---- LayerNorm of one row ------------------------------------------------ */

static inline double hsum_pd(__m256d v) {
    const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

void rai_nn_layernorm_row_avx2(float *y, float *mean, float *rstd, const float *x,
                               const float *gamma, const float *beta, int c, float eps) {
    int j;
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    double tail = 0;
    for (j = 0; j + 8 <= c; j += 8) {
        const __m256 v = _mm256_loadu_ps(x + j);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
    for (; j < c; j++) tail += x[j];
    const double mu = (hsum_pd(_mm256_add_pd(a0, a1)) + tail) / c;
    const __m256d vmu = _mm256_set1_pd(mu);
    a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd(), tail = 0;
    for (j = 0; j + 8 <= c; j += 8) {
        const __m256 v = _mm256_loadu_ps(x + j);
        const __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), vmu);
        const __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), vmu);
        a0 = _mm256_fmadd_pd(d0, d0, a0);
        a1 = _mm256_fmadd_pd(d1, d1, a1);
    }
    for (; j < c; j++) {
        const double d = x[j] - mu;
        tail += d * d;
    }
    const double ss = hsum_pd(_mm256_add_pd(a0, a1)) + tail;
    const double rs = 1.0 / sqrt(ss / c + (double)eps);
    if (mean) *mean = (float)mu;
    if (rstd) *rstd = (float)rs;
    const __m256d vrs = _mm256_set1_pd(rs);
    for (j = 0; j + 4 <= c; j += 4) {   /* as the scalar loop: ((x - mu) rs) g + b */
        __m256d v = _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + j)), vmu), vrs);
        if (gamma) v = _mm256_mul_pd(v, _mm256_cvtps_pd(_mm_loadu_ps(gamma + j)));
        if (beta) v = _mm256_add_pd(v, _mm256_cvtps_pd(_mm_loadu_ps(beta + j)));
        _mm_storeu_ps(y + j, _mm256_cvtpd_ps(v));
    }
    for (; j < c; j++) {
        double v = (x[j] - mu) * rs;
        if (gamma) v *= gamma[j];
        if (beta) v += beta[j];
        y[j] = (float)v;
    }
}

/* rai_nn_layernorm_row_f32_ref on 8 lanes: the 16 lanes as two vectors
 * (elements 16q .. 16q + 7 and 16q + 8 .. 16q + 15), the last partial
 * block's lanes in scalars; the same bits. */
void rai_nn_layernorm_row_f32_avx2(float *y, const float *x, const float *gamma,
                                   const float *beta, int c, float eps) {
    float s[16], q[16];
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int j = 0;
    for (; j + 16 <= c; j += 16) {
        lo = _mm256_add_ps(lo, _mm256_loadu_ps(x + j));
        hi = _mm256_add_ps(hi, _mm256_loadu_ps(x + j + 8));
    }
    _mm256_storeu_ps(s, lo), _mm256_storeu_ps(s + 8, hi);
    for (int t = j; t < c; t++) s[t - j] += x[t];
    const float mu = rai_ln_f32_fold(s) / (float)c;
    const __m256 vm = _mm256_set1_ps(mu);
    lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (j = 0; j + 16 <= c; j += 16) {
        const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + j), vm);
        const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + j + 8), vm);
        lo = _mm256_fmadd_ps(d0, d0, lo), hi = _mm256_fmadd_ps(d1, d1, hi);
    }
    _mm256_storeu_ps(q, lo), _mm256_storeu_ps(q + 8, hi);
    for (int t = j; t < c; t++) {
        const float d = x[t] - mu;
        q[t - j] = fmaf(d, d, q[t - j]);
    }
    const float rs = 1.0f / sqrtf(rai_ln_f32_fold(q) / (float)c + eps);
    const __m256 vr = _mm256_set1_ps(rs);
    for (j = 0; j + 8 <= c; j += 8) {
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm), vr);
        if (gamma) v = _mm256_mul_ps(v, _mm256_loadu_ps(gamma + j));
        if (beta) v = _mm256_add_ps(v, _mm256_loadu_ps(beta + j));
        _mm256_storeu_ps(y + j, v);
    }
    for (; j < c; j++) {
        float v = (x[j] - mu) * rs;
        if (gamma) v = v * gamma[j];
        if (beta) v = v + beta[j];
        y[j] = v;
    }
}

/* ---- AdamW: rai_nn_adamw_ref on 8 lanes (IEEE's sqrt and division: the
 * same bits) -------------------------------------------------------------- */

void rai_nn_adamw_avx2(float *param, float *m, float *v, const float *grad, int64_t n,
                       const rai_adamw_factors *a) {
    const __m256 keep = _mm256_set1_ps(a->keep), b1 = _mm256_set1_ps(a->b1);
    const __m256 a1 = _mm256_set1_ps(a->a1), b2 = _mm256_set1_ps(a->b2);
    const __m256 a2 = _mm256_set1_ps(a->a2), ns = _mm256_set1_ps(a->neg_step);
    const __m256 bc = _mm256_set1_ps(a->bc2_sqrt), eps = _mm256_set1_ps(a->eps);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(grad + i);
        const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(param + i), keep);
        const __m256 mi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), b1), _mm256_mul_ps(a1, g));
        const __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2),
                                        _mm256_mul_ps(_mm256_mul_ps(a2, g), g));
        const __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc), eps);
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(param + i, _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(ns, mi), den)));
    }
    rai_nn_adamw_ref(param + i, m + i, v + i, grad + i, n - i, a);
}

const rai_nn_kernel rai_nn_kernel_avx2 = {
    .name = "avx2",
    .gelu = rai_nn_gelu_avx2,
    .gelu_backward = rai_nn_gelu_backward_avx2,
    .gelu_deriv = rai_nn_gelu_deriv_avx2,
    .layernorm_row = rai_nn_layernorm_row_avx2,
    .layernorm_rows4 = NULL,
    .layernorm_row_f32 = rai_nn_layernorm_row_f32_avx2,
    .layernorm_backward_rows = NULL,
    .adamw = rai_nn_adamw_avx2,
    .gemm_micro = RA_GEMM_AVX2,
    .gemm_i8_micro = RA_GEMM_AVX2,
    .gemm = NULL,   /* the portable product with the AVX2 micro-kernel */
    .gemm_tn = NULL,
};
