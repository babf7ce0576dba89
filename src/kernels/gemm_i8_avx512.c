/* gemm_i8_avx512.c - the micro-kernel of gemm_i8.c on VPDPBUSD (AVX512_VNNI):
 * one instruction multiplies, per 32-bit lane, a row's 4 u7 inputs by a
 * column's 4 s8 weights and adds the four products into the lane's int32
 * sum, 64 multiply-adds where the AVX2 kernel's three instructions do 32.
 * A zmm of b is one group of one column panel ([kg][NR][4]: 16 columns x 4
 * bytes), a row's group is broadcast to all 16 lanes. A 6 x 16 tile is six
 * accumulators, too few to hide the instruction's latency, so the kernel
 * takes a block of up to RA_GEMM_I8_VNNI_RP row panels by
 * RA_GEMM_I8_VNNI_CP column panels, adjacent in memory, at once (smaller
 * blocks on the edges). Exact integer sums, then the epilogue of the
 * scalar kernel on 16 lanes: the same bits. The input quantiser on 16
 * lanes too. Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni;
 * called only on a CPU with them. */
#include "gemm_kernels.h"
#include "gelu_avx512.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define MR RA_GEMM_I8_MR
#define NR RA_GEMM_I8_NR

/* The 4 bytes of a row's group, in every 32-bit lane. */
static inline __m512i group(const uint8_t *p) { return _mm512_set1_epi32(rai_i8_group(p)); }

/* Row r's group (at p) times the column panels' b0 (and b1). */
#define ROW(r, p)                                                   \
    do {                                                            \
        const __m512i a = group(p);                                 \
        c##r##_0 = _mm512_dpbusd_epi32(c##r##_0, a, b0);            \
        if (cp > 1) c##r##_1 = _mm512_dpbusd_epi32(c##r##_1, a, b1); \
    } while (0)

/* The group of six rows, rows 0 .. 2 at p, 3 .. 5 at q (rows lda apart),
 * accumulators r0 .. r5. */
#define PANEL(p, q, r0, r1, r2, r3, r4, r5)                                           \
    do {                                                                              \
        ROW(r0, p);                                                                   \
        ROW(r1, (p) + lda);                                                           \
        ROW(r2, (p) + 2 * lda);                                                       \
        ROW(r3, q);                                                                   \
        ROW(r4, (q) + lda);                                                           \
        ROW(r5, (q) + 2 * lda);                                                       \
    } while (0)

/* rp x cp panels (1 or 2 each, constants once inlined: the unused
 * accumulators vanish); the rows of a lda apart (row panel 1 from row
 * MR), column panel 1 at bp + 4 NR kg. The accumulators are named, not
 * an array: GCC keeps an array's in registers but copies each around
 * every VPDPBUSD. */
static inline __attribute__((always_inline)) void block(int kg, const uint8_t *ap, int64_t lda,
                                                        const int8_t *bp, float *c, int64_t ldc,
                                                        const rai_i8_tile *e, const int rp,
                                                        const int cp) {
    const int64_t bstep = (int64_t)kg * 4 * NR;
    const uint8_t *a3 = ap + 3 * lda, *a6 = ap + 6 * lda, *a9 = ap + 9 * lda;
    const __m512i zero = _mm512_setzero_si512();
    __m512i c0_0 = zero, c1_0 = zero, c2_0 = zero, c3_0 = zero, c4_0 = zero, c5_0 = zero;
    __m512i c6_0 = zero, c7_0 = zero, c8_0 = zero, c9_0 = zero, c10_0 = zero, c11_0 = zero;
    __m512i c0_1 = zero, c1_1 = zero, c2_1 = zero, c3_1 = zero, c4_1 = zero, c5_1 = zero;
    __m512i c6_1 = zero, c7_1 = zero, c8_1 = zero, c9_1 = zero, c10_1 = zero, c11_1 = zero;
    for (int g = 0; g < kg; g++, ap += 4, a3 += 4, a6 += 4, a9 += 4, bp += 4 * NR) {
        const __m512i b0 = _mm512_loadu_si512(bp);
        const __m512i b1 = cp > 1 ? _mm512_loadu_si512(bp + bstep) : zero;
        PANEL(ap, a3, 0, 1, 2, 3, 4, 5);
        if (rp > 1) PANEL(a6, a9, 6, 7, 8, 9, 10, 11);
    }
    const __m512i acc[2 * MR][2] = {{c0_0, c0_1}, {c1_0, c1_1}, {c2_0, c2_1},   {c3_0, c3_1},
                                    {c4_0, c4_1}, {c5_0, c5_1}, {c6_0, c6_1},   {c7_0, c7_1},
                                    {c8_0, c8_1}, {c9_0, c9_1}, {c10_0, c10_1}, {c11_0, c11_1}};
    /* the columns' sums, scales and bias once, in registers (through e,
     * every store to c would read them again) */
    const float *bias = e->bias;
    __m512i ws[2];
    __m512 wt[2], bv[2];
    for (int j = 0; j < cp; j++) {
        ws[j] = _mm512_loadu_si512(e->wsum + NR * j), wt[j] = _mm512_loadu_ps(e->wscale + NR * j);
        bv[j] = bias ? _mm512_loadu_ps(bias + NR * j) : _mm512_setzero_ps();
    }
    for (int r = 0; r < rp * MR; r++, c += ldc) {
        const __m512i z = _mm512_set1_epi32(e->zero[r]);
        const __m512 s = _mm512_set1_ps(e->scale[r]);
        for (int j = 0; j < cp; j++) {
            const __m512 d = _mm512_mul_ps(s, wt[j]);
            __m512 v = _mm512_mul_ps(
                _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][j], _mm512_mullo_epi32(z, ws[j]))), d);
            if (bias) v = _mm512_add_ps(v, bv[j]);   /* not + 0: -0 stays -0 */
            if (e->gelu) v = gelu16(v);
            if (!e->res) {
                _mm512_storeu_ps(c + NR * j, v);
            } else if (e->res[r]) {   /* res + v, as rai_gemm_tile_put adds */
                float *o = e->res[r] + NR * j;
                _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), v));
            }
        }
    }
}
#undef PANEL
#undef ROW

void rai_gemm_i8_block_avx512_vnni(int kg, const uint8_t *ap, int64_t lda, const int8_t *bp,
                                   int rp, int cp, float *c, int64_t ldc, const rai_i8_tile *e) {
    if (rp > 1 && cp > 1) block(kg, ap, lda, bp, c, ldc, e, 2, 2);
    else if (rp > 1) block(kg, ap, lda, bp, c, ldc, e, 2, 1);
    else if (cp > 1) block(kg, ap, lda, bp, c, ldc, e, 1, 2);
    else block(kg, ap, lda, bp, c, ldc, e, 1, 1);
}

/* ---- the input quantiser of gemm_i8.c on 16 lanes (the same bits) --------- */

/* The lanes of [l, k) in a block of 16 from l. */
static inline __mmask16 lanes(int l, int k) {
    return k - l >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - l)) - 1);
}

/* round(v r) + z clamped to [0, 127], as int32 lanes (gemm_i8.c's input).
 * The scalar rounds v r through 1.5 x 2^23 and adds z and clamps in
 * float32; here the conversion rounds to nearest even itself and the rest
 * is integer: the same values, as |v r| <= 127 (r = 127 / the row's
 * range) and the sums are small integers. */
static inline __m512i quantize16(__m512 v, __m512 vr, __m512i vz) {
    const __m512i n = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v, vr),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(n, vz), _mm512_setzero_si512()),
                            _mm512_set1_epi32(127));
}

void rai_i8_quantize_row_avx512(uint8_t *q, int32_t *zero, float *scale, const float *x, int k) {
    /* four chains of extremes (one was bound by the latency of min and
     * max); v - v is +0 for a finite v and NaN for an infinity or NaN: its
     * bits ORed into bad */
    const __m512 z0 = _mm512_setzero_ps();
    __m512 lo[4] = {z0, z0, z0, z0}, hi[4] = {z0, z0, z0, z0};
    __m512i nf[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                     _mm512_setzero_si512()};
    int l = 0;
    for (; l + 64 <= k; l += 64)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            const __m512 v = _mm512_loadu_ps(x + l + 16 * u);
            nf[u] = _mm512_or_si512(nf[u], _mm512_castps_si512(_mm512_sub_ps(v, v)));
            lo[u] = _mm512_min_ps(lo[u], v), hi[u] = _mm512_max_ps(hi[u], v);
        }
    for (; l < k; l += 16) {   /* lanes past k read as 0, as lo and hi start */
        const __m512 v = _mm512_maskz_loadu_ps(lanes(l, k), x + l);
        nf[0] = _mm512_or_si512(nf[0], _mm512_castps_si512(_mm512_sub_ps(v, v)));
        lo[0] = _mm512_min_ps(lo[0], v), hi[0] = _mm512_max_ps(hi[0], v);
    }
    const __m512 vlo = _mm512_min_ps(_mm512_min_ps(lo[0], lo[1]), _mm512_min_ps(lo[2], lo[3]));
    const __m512 vhi = _mm512_max_ps(_mm512_max_ps(hi[0], hi[1]), _mm512_max_ps(hi[2], hi[3]));
    const __m512i bad =
        _mm512_or_si512(_mm512_or_si512(nf[0], nf[1]), _mm512_or_si512(nf[2], nf[3]));
    const int finite = _mm512_test_epi32_mask(bad, bad) == 0;
    float z, inv;
    if (!rai_i8_row_start(_mm512_reduce_min_ps(vlo), _mm512_reduce_max_ps(vhi), finite, q, k, zero,
                          scale, &z, &inv))
        return;
    const __m512 vr = _mm512_set1_ps(inv);
    const __m512i vz = _mm512_set1_epi32((int32_t)z);
    l = 0;
    /* 64 values a time into one store of 64 bytes: the four vectors' int32
     * packed to bytes (0..127: no saturation) in 128-bit lanes, then the
     * lanes' dwords put in order; the tail by masked byte stores */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (; l + 64 <= k; l += 64) {
        const __m512i a = quantize16(_mm512_loadu_ps(x + l), vr, vz);
        const __m512i b = quantize16(_mm512_loadu_ps(x + l + 16), vr, vz);
        const __m512i c = quantize16(_mm512_loadu_ps(x + l + 32), vr, vz);
        const __m512i d = quantize16(_mm512_loadu_ps(x + l + 48), vr, vz);
        const __m512i bytes = _mm512_packus_epi16(_mm512_packus_epi32(a, b), _mm512_packus_epi32(c, d));
        _mm512_storeu_si512(q + l, _mm512_permutexvar_epi32(order, bytes));
    }
    for (; l < k; l += 16) {
        const __mmask16 m = lanes(l, k);
        _mm512_mask_cvtepi32_storeu_epi8(q + l, m,
                                         quantize16(_mm512_maskz_loadu_ps(m, x + l), vr, vz));
    }
    *zero = (int32_t)z;
}
