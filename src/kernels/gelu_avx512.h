/* gelu_avx512.h - GELU and its derivative on 16 float lanes (AVX-512F):
 * the erf of nn_avx2.c widened, the same operations, so the same bits.
 * Shared by the AVX-512 products (gemm_avx512.c) and the int8 VNNI kernel
 * (gemm_i8_avx512.c), whose epilogues apply it to tiles in registers;
 * include only from files compiled with -mavx512f. */
#ifndef RA_GELU_AVX512_H
#define RA_GELU_AVX512_H

#include <immintrin.h>

static inline __m512 exp16_neg(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 c1 = _mm512_set1_ps(0.693359375f), c2 = _mm512_set1_ps(-2.12194440e-4f);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, c1, x);
    r = _mm512_fnmadd_ps(n, c2, r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    /* p * 2^n in one instruction, the bits of nn_avx2.c's multiply by the
     * power built from n's exponent field (n >= -126: 2^n is normal) */
    return _mm512_scalef_ps(p, n);
}

/* erf's two branches, as erf16 below puts them together: for |x| <= 0.921875
 * x + x p(x^2); beyond, sign(x) (1 - exp(q(min(|x|, 4)))) */
static inline __m512 erf_small16(__m512 x) {
    const __m512 s = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(-5.990993519e-04f);
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(4.993213109e-03f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-2.676664437e-02f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.128181722e-01f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-3.761249385e-01f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.283791496e-01f));
    return _mm512_fmadd_ps(x, p, x);
}

/* 1 - exp(q(min(ax, 4))): erf(ax) for ax = |x| > 0.921875, its sign not set */
static inline __m512 erf_big_abs16(__m512 ax) {
    const __m512 t = _mm512_min_ps(ax, _mm512_set1_ps(4.0f));
    __m512 q = _mm512_set1_ps(1.947346228e-04f);
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-3.031601753e-03f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(2.218140199e-02f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-1.038389124e-01f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-6.372857526e-01f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-1.127615461e+00f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-2.099135167e-04f));
    return _mm512_sub_ps(_mm512_set1_ps(1.0f), exp16_neg(q));
}

static inline __m512 abs16(__m512 x) {
    return _mm512_castsi512_ps(_mm512_andnot_si512(_mm512_castps_si512(_mm512_set1_ps(-0.0f)),
                                                   _mm512_castps_si512(x)));
}

/* which lanes take the big branch */
static inline __mmask16 erf_big_lanes(__m512 ax) {
    return _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.921875f), _CMP_GT_OQ);
}

/* erf from its branches: big_abs given the sign of x, the small branch
 * where not use_big, x itself where x is NaN */
static inline __m512 erf_join16(__m512 x, __m512 small, __m512 big_abs, __mmask16 use_big) {
    const __m512 big = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(big_abs),
        _mm512_and_si512(_mm512_castps_si512(_mm512_set1_ps(-0.0f)), _mm512_castps_si512(x))));
    const __m512 r = _mm512_mask_blend_ps(use_big, small, big);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, x);
}

static inline __m512 erf16(__m512 x) {
    const __m512 ax = abs16(x);
    return erf_join16(x, erf_small16(x), erf_big_abs16(ax), erf_big_lanes(ax));
}

/* e = erf(v / sqrt 2), what GELU and GELU' of v share */
static inline __m512 erf_of16(__m512 v) {
    return erf16(_mm512_mul_ps(v, _mm512_set1_ps(0.70710678118654752440f)));
}

/* GELU(v) = v 0.5 (1 + e), given e = erf(v / sqrt 2) */
static inline __m512 gelu_erf16(__m512 v, __m512 e) {
    return _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.5f)),
                         _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

static inline __m512 gelu16(__m512 v) { return gelu_erf16(v, erf_of16(v)); }

/* GELU'(v) = Phi(v) + v phi(v), as the scalar backward: 0.5 (1 + erf(v /
 * sqrt 2)) + v (1 / sqrt(2 pi)) exp(-v^2 / 2), in that order, given e =
 * erf(v / sqrt 2); exp's argument below -87 gives 0 (expf is below 2^-125
 * there: so v = +-inf gives NaN as inf * 0 does in the scalar loop). */
static inline __m512 gelu_grad_erf16(__m512 v, __m512 e) {
    const __m512 cdf = _mm512_mul_ps(_mm512_set1_ps(0.5f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    const __m512 arg = _mm512_mul_ps(_mm512_mul_ps(v, v), _mm512_set1_ps(-0.5f));
    const __m512 g = _mm512_maskz_mov_ps(
        _mm512_cmp_ps_mask(arg, _mm512_set1_ps(-87.0f), _CMP_GE_OQ), exp16_neg(arg));
    const __m512 pdf = _mm512_mul_ps(_mm512_set1_ps(0.39894228040143267794f), g);
    return _mm512_add_ps(cdf, _mm512_mul_ps(v, pdf));
}

static inline __m512 gelu_grad16(__m512 v) { return gelu_grad_erf16(v, erf_of16(v)); }

#endif
