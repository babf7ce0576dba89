/* gemm_i8_avx2.c - the 6 x 16 micro-kernel of gemm_i8.c on AVX2: per
 * group of 4 inputs, vpmaddubsw multiplies a row's 4 u7 values by a
 * column's 4 s8 weights and adds pairs into 16 bits (at most 2 x 127 x 127
 * = 32258: never saturates), vpmaddwd by ones adds the pairs into 32 bits,
 * vpaddd into the twelve accumulators: 32 multiply-adds per three
 * instructions where FMA does 8 per one. Exact integer sums, then the
 * epilogue of the scalar kernel on 8 lanes (the same bits). */
#include "avx2_reduce.h"
#include "gemm_kernels.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define MR RA_GEMM_I8_MR
#define NR RA_GEMM_I8_NR

/* The 4 bytes of a row's group, in every 32-bit lane. */
static inline __m256i group(const uint8_t *p) { return _mm256_set1_epi32(rai_i8_group(p)); }

/* The twelve accumulators, two operands of b, a row's group and a product
 * fill the sixteen registers: the ones of vpmaddwd come from memory. */
static const int16_t ONES[16] __attribute__((aligned(32))) = {1, 1, 1, 1, 1, 1, 1, 1,
                                                               1, 1, 1, 1, 1, 1, 1, 1};

static inline __m256i pairs(__m256i p) {
    __m256i r;
    __asm__("vpmaddwd %1, %2, %0" : "=x"(r) : "m"(ONES), "x"(p));
    return r;
}

#define STEP(a, lo, hi)                                                              \
    do {                                                                             \
        lo = _mm256_add_epi32(lo, pairs(_mm256_maddubs_epi16(a, b0)));               \
        hi = _mm256_add_epi32(hi, pairs(_mm256_maddubs_epi16(a, b1)));               \
    } while (0)

void rai_gemm_i8_micro_avx2(int kg, const uint8_t *ap, int64_t lda, const int8_t *bp, float *c,
                            int64_t ldc, const rai_i8_tile *e) {
    const uint8_t *a3 = ap + 3 * lda;   /* rows 0 .. 2 from ap, 3 .. 5 from a3 */
    __m256i c0a = _mm256_setzero_si256(), c0b = _mm256_setzero_si256();
    __m256i c1a = _mm256_setzero_si256(), c1b = _mm256_setzero_si256();
    __m256i c2a = _mm256_setzero_si256(), c2b = _mm256_setzero_si256();
    __m256i c3a = _mm256_setzero_si256(), c3b = _mm256_setzero_si256();
    __m256i c4a = _mm256_setzero_si256(), c4b = _mm256_setzero_si256();
    __m256i c5a = _mm256_setzero_si256(), c5b = _mm256_setzero_si256();
    for (int g = 0; g < kg; g++, ap += 4, a3 += 4, bp += 4 * NR) {
        _mm_prefetch((const char *)(bp + 8 * 4 * NR), _MM_HINT_T0);
        const __m256i b0 = _mm256_loadu_si256((const __m256i *)bp);
        const __m256i b1 = _mm256_loadu_si256((const __m256i *)(bp + 32));
        STEP(group(ap), c0a, c0b);
        STEP(group(ap + lda), c1a, c1b);
        STEP(group(ap + 2 * lda), c2a, c2b);
        STEP(group(a3), c3a, c3b);
        STEP(group(a3 + lda), c4a, c4b);
        STEP(group(a3 + 2 * lda), c5a, c5b);
    }
    const __m256i acc[2 * MR] = {c0a, c0b, c1a, c1b, c2a, c2b, c3a, c3b, c4a, c4b, c5a, c5b};
    const __m256i s0 = _mm256_loadu_si256((const __m256i *)e->wsum);
    const __m256i s1 = _mm256_loadu_si256((const __m256i *)(e->wsum + 8));
    const __m256 t0 = _mm256_loadu_ps(e->wscale), t1 = _mm256_loadu_ps(e->wscale + 8);
    for (int r = 0; r < MR; r++, c += ldc) {
        const __m256i z = _mm256_set1_epi32(e->zero[r]);
        const __m256 s = _mm256_set1_ps(e->scale[r]);
        __m256 lo = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[2 * r], _mm256_mullo_epi32(z, s0))),
                                  _mm256_mul_ps(s, t0));
        __m256 hi = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[2 * r + 1], _mm256_mullo_epi32(z, s1))),
                                  _mm256_mul_ps(s, t1));
        if (e->bias) {
            lo = _mm256_add_ps(lo, _mm256_loadu_ps(e->bias));
            hi = _mm256_add_ps(hi, _mm256_loadu_ps(e->bias + 8));
        }
        _mm256_storeu_ps(c, lo), _mm256_storeu_ps(c + 8, hi);
    }
}

/* ---- the quantisers of gemm_i8.c on 8 lanes (the same bits) -------------- */

/* 8 rounded values (integers in [-127, 127]) as 8 bytes at q. */
static inline void store8(void *q, __m256 v) {
    const __m256i w = _mm256_packs_epi32(_mm256_cvtps_epi32(v), _mm256_setzero_si256());
    const __m256i b = _mm256_packs_epi16(w, _mm256_setzero_si256());
    const int32_t lo = _mm256_cvtsi256_si32(b), hi = _mm256_extract_epi32(b, 4);
    memcpy(q, &lo, 4), memcpy((char *)q + 4, &hi, 4);
}

/* 1 in every lane where v is an infinity or NaN. */
static inline __m256 not_finite(__m256 v) {
    const __m256 abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    return _mm256_cmp_ps(abs, _mm256_set1_ps(INFINITY), _CMP_NLT_UQ);
}

void rai_i8_quantize_row_avx2(uint8_t *q, int32_t *zero, float *scale, const float *x, int k) {
    __m256 vlo = _mm256_setzero_ps(), vhi = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    int l = 0;
    for (; l + 8 <= k; l += 8) {
        const __m256 v = _mm256_loadu_ps(x + l);
        bad = _mm256_or_ps(bad, not_finite(v));
        vlo = _mm256_min_ps(vlo, v), vhi = _mm256_max_ps(vhi, v);
    }
    float lo = hmin(vlo), hi = hmax(vhi);
    int finite = _mm256_movemask_ps(bad) == 0;
    for (; l < k; l++) {
        finite &= isfinite(x[l]) != 0;
        lo = x[l] < lo ? x[l] : lo, hi = x[l] > hi ? x[l] : hi;
    }
    float z, inv;
    if (!rai_i8_row_start(lo, hi, finite, q, k, zero, scale, &z, &inv)) return;
    const __m256 vr = _mm256_set1_ps(inv), vz = _mm256_set1_ps(z), big = _mm256_set1_ps(RA_I8_BIG);
    const __m256 top = _mm256_set1_ps(127.0f), nil = _mm256_setzero_ps();
    for (l = 0; l + 8 <= k; l += 8) {
        __m256 v = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + l), vr), big), big);
        v = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(v, vz), nil), top);
        store8(q + l, v);
    }
    for (; l < k; l++) q[l] = rai_i8_input(x[l], inv, z);
    *zero = (int32_t)z;
}

void rai_i8_quantize_weights_avx2(int8_t *v, int32_t *sum, float *scale, const float *w, int k) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 vmax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    int l = 0;
    for (; l + 8 <= k; l += 8) {
        const __m256 x = _mm256_loadu_ps(w + l);
        bad = _mm256_or_ps(bad, not_finite(x));
        vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, x));
    }
    float amax = hmax(vmax);
    int finite = _mm256_movemask_ps(bad) == 0;
    for (; l < k; l++) {
        finite &= isfinite(w[l]) != 0;
        amax = fabsf(w[l]) > amax ? fabsf(w[l]) : amax;
    }
    const float t = amax / 127.0f;
    int32_t acc = 0;
    if (!finite || t == 0.0f) {
        memset(v, 0, (size_t)(k > 0 ? k : 0));
    } else {
        const __m256 vt = _mm256_set1_ps(t), big = _mm256_set1_ps(RA_I8_BIG);
        const __m256 top = _mm256_set1_ps(127.0f), bottom = _mm256_set1_ps(-127.0f);
        __m256i vsum = _mm256_setzero_si256();
        for (l = 0; l + 8 <= k; l += 8) {
            __m256 r = _mm256_sub_ps(_mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(w + l), vt), big), big);
            r = _mm256_min_ps(_mm256_max_ps(r, bottom), top);
            vsum = _mm256_add_epi32(vsum, _mm256_cvtps_epi32(r));
            store8(v + l, r);
        }
        int32_t part[8];
        _mm256_storeu_si256((__m256i *)part, vsum);
        for (int i = 0; i < 8; i++) acc += part[i];
        for (; l < k; l++) acc += v[l] = rai_i8_weight(w[l], t);
    }
    *sum = acc, *scale = finite ? t : NAN;
}
