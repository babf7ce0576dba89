/* gemm_bf16_avx512.c - the 12 x 32 micro-kernel of gemm_bf16.c on
 * VDPBF16PS (AVX512_BF16): per pair of inputs, a row's two bfloat16
 * values broadcast against the panel's 32 columns x 2 in two registers,
 * 24 accumulators of 16 float32 sums; 32 multiply-adds per instruction
 * where FMA does 16. The instruction's arithmetic is the scalar oracle's
 * (the odd term first, one rounding per term, DAZ and FTZ): the same bits.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16; run only
 * where the CPU has them (rai_gemm_bf16_avx512_supported). */
#include "gemm_kernels.h"

#include <immintrin.h>
#include <string.h>

#define MR RA_GEMM_BF16_MR
#define NR RA_GEMM_BF16_NR

int rai_gemm_bf16_avx512_supported(void) {
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

/* A row's pair q: its two bfloat16 values in every 32-bit lane. */
static inline __m512bh pair(const uint16_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return (__m512bh)_mm512_set1_epi32(v);
}

/* The tile's sums + bias into c (row stride ldc), or, with res, added
 * into res[r] (rows with NULL skipped) instead: rai_gemm_tile_put's
 * residual add, the same bits; with gm (row stride ldc too), multiplied
 * by it before the store (the epilogue's gm, the same bits). */
static inline __attribute__((always_inline)) void micro(int kp, const uint16_t *a, int64_t lda,
                                                        int64_t aq, const uint16_t *bp, float *c,
                                                        int64_t ldc, const float *bias,
                                                        float *const *res, const float *gm) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int q = 0; q < kp; q++, a += aq, bp += 2 * NR) {
        _mm_prefetch((const char *)(bp + 16 * 2 * NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(bp + 16 * 2 * NR + 32), _MM_HINT_T0);
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + 32);
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            const __m512bh av = pair(a + r * lda);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
        }
    }
    const __m512 z = _mm512_setzero_ps();
    const __m512 bias0 = bias ? _mm512_loadu_ps(bias) : z;
    const __m512 bias1 = bias ? _mm512_loadu_ps(bias + 16) : z;
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++, c += ldc) {
        __m512 v0 = bias ? _mm512_add_ps(acc[r][0], bias0) : acc[r][0];
        __m512 v1 = bias ? _mm512_add_ps(acc[r][1], bias1) : acc[r][1];
        if (gm) {
            v0 = _mm512_mul_ps(v0, _mm512_loadu_ps(gm + r * ldc));
            v1 = _mm512_mul_ps(v1, _mm512_loadu_ps(gm + r * ldc + 16));
        }
        if (!res) {
            _mm512_storeu_ps(c, v0), _mm512_storeu_ps(c + 16, v1);
        } else if (res[r]) {
            _mm512_storeu_ps(res[r], _mm512_add_ps(_mm512_loadu_ps(res[r]), v0));
            _mm512_storeu_ps(res[r] + 16, _mm512_add_ps(_mm512_loadu_ps(res[r] + 16), v1));
        }
    }
}

void rai_gemm_bf16_micro_avx512(int kp, const uint16_t *a, int64_t lda, int64_t aq,
                                const uint16_t *bp, float *c, int64_t ldc, const float *bias) {
    micro(kp, a, lda, aq, bp, c, ldc, bias, NULL, NULL);
}

void rai_gemm_bf16_micro_mul_avx512(int kp, const uint16_t *a, int64_t lda, int64_t aq,
                                    const uint16_t *bp, float *c, int64_t ldc, const float *bias,
                                    const float *gm) {
    micro(kp, a, lda, aq, bp, c, ldc, bias, NULL, gm);
}

void rai_gemm_bf16_micro_res_avx512(int kp, const uint16_t *a, int64_t lda, int64_t aq,
                                    const uint16_t *bp, float *const *res, const float *bias) {
    micro(kp, a, lda, aq, bp, NULL, 0, bias, res, NULL);
}

/* rai_bf16_bits on 16 lanes: nearest even, a NaN kept quiet (the same
 * bits). */
static inline __m256i bf16_16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                  _mm512_set1_epi32(0x7F800000));
    const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, q));
}

void rai_bf16_round_rows_avx512(uint16_t *a, int64_t lda, const float *x, int64_t ldx, int rows,
                                int k) {
    const int kp = (k + 1) / 2 * 2;
    for (int r = 0; r < rows; r++, a += lda, x += ldx) {
        int l = 0;
        for (; l + 16 <= k; l += 16) {
            const __m512 v = _mm512_loadu_ps(x + l);
            /* VCVTNEPS2BF16 rounds as rai_bf16_bits but for subnormals
             * (taken as zero): those by bf16_16 */
            const __m256i h = _mm512_fpclass_ps_mask(v, 0x20) ? bf16_16(v)
                                                              : (__m256i)_mm512_cvtneps_pbh(v);
            _mm256_storeu_si256((__m256i *)(a + l), h);
        }
        if (l < k) {
            const __mmask16 m = (__mmask16)((1u << (k - l)) - 1);
            _mm256_mask_storeu_epi16(a + l, m, bf16_16(_mm512_maskz_loadu_ps(m, x + l)));
        }
        if (kp > k) a[k] = 0;
    }
}

/* The 16 pairs (r0[j], r1[j]) as the packed panel holds them, by
 * VCVTNE2PS2BF16, whose rounding is rai_bf16_bits's (nearest even, a NaN
 * kept quiet with its bit 6 set) except for subnormal inputs, which it
 * takes as zero: 0 (nothing stored) where a lane of v0 or v1 is
 * subnormal, the caller then rounds those by bf16_16. */
static inline int pairs_fast(uint16_t *dst, __mmask16 m, __m512 v0, __m512 v1) {
    if (_mm512_fpclass_ps_mask(v0, 0x20) | _mm512_fpclass_ps_mask(v1, 0x20)) return 0;
    /* words 2j and 2j + 1 of the result: bf16(v0[j]) (word j of the
     * conversion) and bf16(v1[j]) (word 16 + j) */
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                         24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                         16, 0);
    const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(v1, v0);
    _mm512_mask_storeu_epi32(dst, m, _mm512_permutexvar_epi16(idx, both));
    return 1;
}

void rai_bf16_pack_pairs_avx512(uint16_t *dst, const float *r0, const float *r1, int n, double *sum) {
    double pad[16] = {0};
    for (int j = 0; j < n; j += 16) {
        const __mmask16 m = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        const __m512 v0 = _mm512_maskz_loadu_ps(m, r0 + j);
        const __m512 v1 = r1 ? _mm512_maskz_loadu_ps(m, r1 + j) : _mm512_setzero_ps();
        if (!pairs_fast(dst + 2 * j, m, v0, v1)) {
            const __m512i lo = _mm512_cvtepu16_epi32(bf16_16(v0));
            const __m512i hi = r1 ? _mm512_cvtepu16_epi32(bf16_16(v1)) : _mm512_setzero_si512();
            _mm512_mask_storeu_epi32(dst + 2 * j, m, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
        if (!sum) continue;
        /* the sums as the scalar loop adds them: + r0, then + r1 */
        double *s = m == 0xFFFF ? sum + j : pad;
        if (s == pad) memcpy(pad, sum + j, (size_t)(n - j) * sizeof *pad);
        __m512d s0 = _mm512_loadu_pd(s), s1 = _mm512_loadu_pd(s + 8);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(v0)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(v0, 1)));
        if (r1) {
            s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(v1)));
            s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(v1, 1)));
        }
        _mm512_storeu_pd(s, s0), _mm512_storeu_pd(s + 8, s1);
        if (s == pad) memcpy(sum + j, pad, (size_t)(n - j) * sizeof *pad);
    }
}
