/* attn_avx512.h - what the AVX-512 attention kernels share: the lane
 * masks of ragged edges, the softmax's exp, the 16 x 16 transpose in
 * registers and the prefetches of the rows a task reads. avx512.c
 * (float32) and attn_bf16_avx512.c (the bf16 core) compute their softmax
 * with the same exp_ps; include only from files compiled with -mavx512f. */
#ifndef RA_ATTN_AVX512_H
#define RA_ATTN_AVX512_H

#include "kernels.h"

#include <immintrin.h>
#include <stddef.h>

#ifndef ALWAYS_INLINE
#define ALWAYS_INLINE static inline __attribute__((always_inline))
#endif

/* Lanes 0..n-1 set: all 16 when n >= 16, none when n <= 0. */
static inline __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* e^x for x <= 0 (softmax inputs; larger x up to 88 also work), the
 * algorithm of avx2.c's exp_ps: x = n ln2 + r, |r| <= ln2/2, ln2 split in
 * two so n*ln2 loses no bits; e^r = 1 + r + r^2 P(r), P of degree 4; 2^n
 * applied with scalef. Below ln(FLT_MIN) = -87.34 and for -inf the result
 * is exactly 0; NaN stays NaN. */
static inline __m512 exp_ps(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.33654f);
    /* max returns its second operand for NaN: this order keeps NaN */
    __m512 xc = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(lo, x));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269502f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e43p-1f), xc);    /* ln2 hi */
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-0x1.05c61p-29f), r);          /* ln2 lo */
    __m512 p = _mm512_set1_ps(0x1.6d10fcp-10f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.120b62p-7f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.55551ap-5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.5554dep-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    /* lanes below lo become 0; NaN compares unordered and is kept */
    return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), p, n);
}

/* a[0..15] (16 rows of 16) transposed in place: unpack pairs, then quads
 * within 128-bit lanes, then two rounds of 128-bit lane shuffles. */
ALWAYS_INLINE void transpose16(__m512 a[16]) {
    __m512 b[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {
        b[i] = _mm512_unpacklo_ps(a[i], a[i + 1]);
        b[i + 1] = _mm512_unpackhi_ps(a[i], a[i + 1]);
    }
    /* a[4g+k], 128-bit lane L: column 4L+k of rows 4g .. 4g+3 */
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 4) {
        a[i] = _mm512_shuffle_ps(b[i], b[i + 2], 0x44);
        a[i + 1] = _mm512_shuffle_ps(b[i], b[i + 2], 0xEE);
        a[i + 2] = _mm512_shuffle_ps(b[i + 1], b[i + 3], 0x44);
        a[i + 3] = _mm512_shuffle_ps(b[i + 1], b[i + 3], 0xEE);
    }
    /* b[k] = lanes 0, 2 of a[k] and a[k+4]; b[k+4] lanes 1, 3; likewise
     * b[k+8], b[k+12] from a[k+8], a[k+12] */
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        b[k] = _mm512_shuffle_f32x4(a[k], a[k + 4], 0x88);
        b[k + 4] = _mm512_shuffle_f32x4(a[k], a[k + 4], 0xDD);
        b[k + 8] = _mm512_shuffle_f32x4(a[k + 8], a[k + 12], 0x88);
        b[k + 12] = _mm512_shuffle_f32x4(a[k + 8], a[k + 12], 0xDD);
    }
    /* row 4L+k of the result: lane L of the old a[k], a[k+4], a[k+8], a[k+12] */
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        a[k] = _mm512_shuffle_f32x4(b[k], b[k + 8], 0x88);
        a[k + 8] = _mm512_shuffle_f32x4(b[k], b[k + 8], 0xDD);
        a[k + 4] = _mm512_shuffle_f32x4(b[k + 4], b[k + 12], 0x88);
        a[k + 12] = _mm512_shuffle_f32x4(b[k + 4], b[k + 12], 0xDD);
    }
}

/* Asks for rows i0 .. i1-1 (clipped to n) of p (row stride ld, hd floats
 * each) to be brought into L1. */
static inline void prefetch_rows(const float *p, size_t ld, int i0, int i1, int n, int hd) {
    const size_t bytes = (size_t)hd * sizeof *p;
    for (int r = i0; r < i1 && r < n; r++) {
        const char *row = (const char *)(p + (size_t)r * ld);
        for (size_t c = 0; c < bytes; c += 64) __builtin_prefetch(row + c, 0, 3);
        __builtin_prefetch(row + bytes - 1, 0, 3);
    }
}

/* The next task's k and v (and with q, dout, the backward's q and dout)
 * rows of a block: the share of block i0 .. i0+rb of n1 rows, so the
 * next task's rows have all been asked for when this one ends. */
static inline void prefetch_next(const rai_attn_task *t, int i0, int rb, int n1, int qdo) {
    if (!t->next_k) return;
    const int j0 = (int)((int64_t)i0 * t->n2 / n1), j1 = (int)((int64_t)(i0 + rb) * t->n2 / n1);
    prefetch_rows(t->next_k, (size_t)t->ldk, j0, j1, t->n2, t->hd);
    prefetch_rows(t->next_v, (size_t)t->ldv, j0, j1, t->n2, t->hd);
    if (qdo && t->next_q) prefetch_rows(t->next_q, (size_t)t->ldq, i0, i0 + rb, n1, t->hd);
    if (qdo && t->next_do) prefetch_rows(t->next_do, (size_t)t->lddo, i0, i0 + rb, n1, t->hd);
}

#endif
