/* avx2.c - the AVX2 + FMA attention kernel.
 *
 * Computes what ref.c computes, one (window, head) task at a time, in blocks
 * of RB query rows so every value loaded from memory feeds RB FMAs:
 *
 *   1. K (N2, hd) is transposed once per task into Kt (hd, N2p), N2p = N2
 *      rounded up to 8, zero padded. The logits of RB rows are then
 *      sum_d broadcast(q_i[d]) * Kt[d][j..j+7]: no horizontal sums.
 *      The Shaw key term q_i·rel_k^T (R numbers per row) is the same product
 *      with a transposed rel_k, and is gathered by rel in the epilogue.
 *   2. Epilogue + softmax per row, 8 columns at a time: scale, bias, mask,
 *      padding lanes set to -inf, row max, a vectorised exp, row sum, 1/sum.
 *   3. out_i = sum_j p_ij v_j with broadcast(p_ij) * v_j[d..d+15] FMAs,
 *      accumulated in registers (RB rows x 16 columns = 8 ymm) over all j;
 *      the Shaw value term continues the same accumulators with p summed
 *      into R buckets by rel and rel_v as the "values".
 * Nothing of size (N1, N2, hd) ever exists. Only the last chunk of a row of
 * hd (hd % 8 columns) or N2 uses masked loads and stores; q, k, v, out are
 * never assumed aligned. The backward (below avx2_forward) reuses these
 * pieces: it recomputes p for all rows of the task, keeps p and ds in the
 * workspace (N1 x N2 each), and forms dq, dk, dv with the same blocking. */
#include "avx2_reduce.h"
#include "kernels.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define RB 4   /* query rows per block: 4 rows x 2 vectors = 8 accumulators,
                  enough independent FMAs to hide their latency */

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static inline size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

/* Lanes 0..n-1 set (all of them when n >= 8). */
static inline __m256i lanes(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Load / store the first min(n, 8) floats; the rest read as 0. */
static inline __m256 load_n(const float *p, int n) {
    return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes(n));
}
static inline void store_n(float *p, __m256 x, int n) {
    if (n >= 8) _mm256_storeu_ps(p, x);
    else _mm256_maskstore_ps(p, lanes(n), x);
}


/* b (R) += p summed by rel (one row), as avx512.c's bucket_add: 8 columns
 * that share a bucket go in as one vector sum (a clip index sends most of
 * a long row to its two end buckets; a scalar add per column was a chain of
 * dependent adds on one bucket). */
static void bucket_add(float *b, const float *p, const int32_t *rel, int n2) {
    int j = 0;
    for (; j + 8 <= n2; j += 8) {
        const __m256i r = _mm256_loadu_si256((const __m256i *)(rel + j));
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(r, _mm256_set1_epi32(rel[j]))) == -1)
            b[rel[j]] += hsum(_mm256_loadu_ps(p + j));
        else
            for (int e = j; e < j + 8; e++) b[rel[e]] += p[e];
    }
    for (; j < n2; j++) b[rel[j]] += p[j];
}

/* b (R) = p summed by rel (one row). */
static void bucket_row(float *b, const float *p, const int32_t *rel, int n2, int nrel) {
    memset(b, 0, (size_t)nrel * sizeof *b);
    bucket_add(b, p, rel, n2);
}

/* e^x for x <= 0 (softmax inputs; larger x up to 88 also work).
 * x = n ln2 + r, |r| <= ln2/2, with ln2 split in two so n*ln2 loses no bits;
 * e^r = 1 + r + r^2 P(r), P of degree 4 interpolating (e^r - 1 - r)/r^2 at
 * Chebyshev nodes (polynomial error < 0.1 ulp, about 1 ulp after rounding);
 * 2^n is built in the exponent field. Below ln(FLT_MIN) = -87.34 (where
 * expf would give a subnormal) and for -inf the result is exactly 0;
 * NaN stays NaN. */
static inline __m256 exp_ps(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.33654f);
    /* min/max return their second operand for NaN: this order keeps NaN */
    __m256 xc = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(lo, x));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269502f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e43p-1f), xc);    /* ln2 hi */
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-0x1.05c61p-29f), r);          /* ln2 lo */
    __m256 p = _mm256_set1_ps(0x1.6d10fcp-10f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.120b62p-7f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.55551ap-5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.5554dep-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), y);
}

/* dst (cols, ldd) = src (rows, cols; row stride lds) transposed, with
 * columns rows..round8(rows)-1 of dst zeroed. 8x8 blocks go through
 * registers (unpack pairs, then quads, then swap 128-bit halves); the
 * ragged edges are copied one by one. */
static void transpose(float *dst, size_t ldd, const float *src, size_t lds, int rows, int cols) {
    int r0 = 0;
    for (; r0 + 8 <= rows; r0 += 8) {
        int c0 = 0;
        for (; c0 + 8 <= cols; c0 += 8) {
            __m256 a[8], b[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) a[i] = _mm256_loadu_ps(src + (size_t)(r0 + i) * lds + c0);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i += 2) {
                b[i] = _mm256_unpacklo_ps(a[i], a[i + 1]);
                b[i + 1] = _mm256_unpackhi_ps(a[i], a[i + 1]);
            }
#pragma GCC unroll 8
            for (int i = 0; i < 8; i += 4) {
                a[i] = _mm256_shuffle_ps(b[i], b[i + 2], 0x44);
                a[i + 1] = _mm256_shuffle_ps(b[i], b[i + 2], 0xEE);
                a[i + 2] = _mm256_shuffle_ps(b[i + 1], b[i + 3], 0x44);
                a[i + 3] = _mm256_shuffle_ps(b[i + 1], b[i + 3], 0xEE);
            }
#pragma GCC unroll 8
            for (int i = 0; i < 4; i++) {
                _mm256_storeu_ps(dst + (size_t)(c0 + i) * ldd + r0,
                                 _mm256_permute2f128_ps(a[i], a[i + 4], 0x20));
                _mm256_storeu_ps(dst + (size_t)(c0 + i + 4) * ldd + r0,
                                 _mm256_permute2f128_ps(a[i], a[i + 4], 0x31));
            }
        }
        for (; c0 < cols; c0++)
            for (int i = 0; i < 8; i++) dst[(size_t)c0 * ldd + r0 + i] = src[(size_t)(r0 + i) * lds + c0];
    }
    for (int c = 0; c < cols; c++) {
        for (int r = r0; r < rows; r++) dst[(size_t)c * ldd + r] = src[(size_t)r * lds + c];
        for (int r = rows; r < (int)round8((size_t)rows); r++) dst[(size_t)c * ldd + r] = 0;
    }
}

/* c[r][j] = sum_d a[r][d] * bt[d][j] for RB rows and ncols (a multiple of
 * 8) columns: 16 columns at a time (8 accumulators), then 8. */
static void rows_times_bt(float *c, size_t ldc, const float *const a[RB], int hd,
                          const float *bt, size_t ldb, int ncols) {
    int j = 0;
    for (; j + 16 <= ncols; j += 16) {
        __m256 acc[RB][2];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d++) {
            const float *b = bt + (size_t)d * ldb + j;
            __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) {
                __m256 x = _mm256_broadcast_ss(a[r] + d);
                acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            _mm256_storeu_ps(c + r * ldc + j, acc[r][0]);
            _mm256_storeu_ps(c + r * ldc + j + 8, acc[r][1]);
        }
    }
    if (j < ncols) {   /* 8 columns: even and odd d in separate accumulators,
                          so 8 FMA chains are in flight here too */
        __m256 acc[RB][2];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        int d = 0;
        for (; d + 2 <= hd; d += 2) {
            const float *b = bt + (size_t)d * ldb + j;
            __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + ldb);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) {
                acc[r][0] = _mm256_fmadd_ps(_mm256_broadcast_ss(a[r] + d), b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(_mm256_broadcast_ss(a[r] + d + 1), b1, acc[r][1]);
            }
        }
        if (d < hd) {
            __m256 b0 = _mm256_loadu_ps(bt + (size_t)d * ldb + j);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++)
                acc[r][0] = _mm256_fmadd_ps(_mm256_broadcast_ss(a[r] + d), b0, acc[r][0]);
        }
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++)
            _mm256_storeu_ps(c + r * ldc + j, _mm256_add_ps(acc[r][0], acc[r][1]));
    }
}

/* Row i's logits s (N2p floats, raw q·k on entry) become probabilities:
 * s_j = scale * (q·k_j + qr[rel_ij]) + bias_ij + mask_ij in ref.c's order,
 * softmax, padding lanes 0. Writes the attn row if asked. */
static void softmax_row(const rai_attn_task *t, int i, float *s, const float *qr) {
    const int n2 = t->n2, n2p = (int)round8((size_t)n2);
    const size_t row = (size_t)i * n2;
    const __m256 scale = _mm256_set1_ps(t->scale), ninf = _mm256_set1_ps(-INFINITY);
    __m256 vmax = ninf;
    for (int j = 0; j < n2p; j += 8) {
        const int n = n2 - j;
        __m256 l = _mm256_loadu_ps(s + j);
        if (qr) {   /* masked lanes read rel 0, always a valid bucket */
            __m256i m = n >= 8 ? _mm256_loadu_si256((const __m256i *)(rai_rel_row(t, i) + j))
                               : _mm256_maskload_epi32((const int *)(rai_rel_row(t, i) + j), lanes(n));
            l = _mm256_add_ps(l, _mm256_i32gather_ps(qr, m, 4));
            if (t->rel2) {
                m = n >= 8 ? _mm256_loadu_si256((const __m256i *)(rai_rel2_row(t, i) + j))
                           : _mm256_maskload_epi32((const int *)(rai_rel2_row(t, i) + j), lanes(n));
                l = _mm256_add_ps(l, _mm256_i32gather_ps(qr, m, 4));
            }
        }
        l = _mm256_mul_ps(scale, l);
        if (t->bias) l = _mm256_add_ps(l, load_n(t->bias + row + j, n));
        if (t->mask) l = _mm256_add_ps(l, load_n(t->mask + row + j, n));
        if (t->rq) {   /* -100 where the key's region is not the query's */
            const __m256i rk = n >= 8 ? _mm256_loadu_si256((const __m256i *)(t->rk + j))
                                      : _mm256_maskload_epi32((const int *)(t->rk + j), lanes(n));
            const __m256 same = _mm256_castsi256_ps(_mm256_cmpeq_epi32(rk, _mm256_set1_epi32(t->rq[i])));
            l = _mm256_add_ps(l, _mm256_andnot_ps(same, _mm256_set1_ps(RAI_REGION_OFF)));
        }
        if (n < 8) l = _mm256_blendv_ps(ninf, l, _mm256_castsi256_ps(lanes(n)));
        _mm256_storeu_ps(s + j, l);
        vmax = _mm256_max_ps(vmax, l);
    }
    float *attn = t->attn ? t->attn + row : NULL;
    const float mx = hmax(vmax);
    if (mx == -INFINITY) {   /* fully masked row: zeros, as rai_softmax_row */
        memset(s, 0, (size_t)n2p * sizeof *s);
        if (attn) memset(attn, 0, (size_t)n2 * sizeof *attn);
        return;
    }
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256 vsum = _mm256_setzero_ps();
    for (int j = 0; j < n2p; j += 8) {
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmx));
        _mm256_storeu_ps(s + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    const __m256 inv = _mm256_set1_ps(1.0f / hsum(vsum));
    for (int j = 0; j < n2p; j += 8) {
        __m256 p = _mm256_mul_ps(_mm256_loadu_ps(s + j), inv);
        _mm256_storeu_ps(s + j, p);
        if (attn) store_n(attn + j, p, n2 - j);
    }
}

/* p (n floats, n a multiple of 8) rounded to bfloat16 in place (nearest
 * even; rai_bf16_bits's, NaN kept): p as the bf16 core multiplies it. */
static void round_row_bf16(float *p, size_t n) {
    for (size_t j = 0; j < n; j += 8) {
        const __m256 x = _mm256_loadu_ps(p + j);
        const __m256i u = _mm256_castps_si256(x);
        const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), odd);
        r = _mm256_and_si256(r, _mm256_set1_epi32((int)0xFFFF0000u));
        const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
        _mm256_storeu_ps(p + j, _mm256_blendv_ps(_mm256_castsi256_ps(r), x, nan));
    }
}

/* acc[r] += sum_{j<n} p[r][j*ps] * v_j[d0 .. d0 + 8*nv) for RB rows: one
 * load of each v row chunk feeds RB FMAs. nv == 1 loads min(8, w) columns.
 * ps is 1 for rows of p; the backward also walks columns of a matrix. */
ALWAYS_INLINE void pv_accumulate_s(__m256 acc[RB][2], const int nv, const float *const p[RB],
                                   size_t ps, const float *v, size_t ldv, int n, int d0,
                                   int w) {
    const __m256i m = lanes(w);
    for (int j = 0; j < n; j++) {
        const float *vj = v + (size_t)j * ldv + d0;
        __m256 v0 = nv == 2 ? _mm256_loadu_ps(vj) : _mm256_maskload_ps(vj, m);
        __m256 v1 = nv == 2 ? _mm256_loadu_ps(vj + 8) : v0;
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            __m256 x = _mm256_broadcast_ss(p[r] + (size_t)j * ps);
            acc[r][0] = _mm256_fmadd_ps(x, v0, acc[r][0]);
            if (nv == 2) acc[r][1] = _mm256_fmadd_ps(x, v1, acc[r][1]);
        }
    }
}
ALWAYS_INLINE void pv_accumulate(__m256 acc[RB][2], const int nv, const float *const p[RB],
                                 const float *v, size_t ldv, int n, int d0, int w) {
    pv_accumulate_s(acc, nv, p, 1, v, ldv, n, d0, w);
}

/* Output columns d0 .. d0 + 8*nv (or up to hd) of rows i0 .. i0+nr-1:
 * values, then the Shaw value term on the same accumulators, then store. */
ALWAYS_INLINE void pv_chunk(const rai_attn_task *t, int i0, int nr, const float *const p[RB],
                            const float *const pb[RB], const int nv, int d0) {
    const int w = t->hd - d0;
    __m256 acc[RB][2];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    pv_accumulate(acc, nv, p, t->v, (size_t)t->ldv, t->n2, d0, w);
    if (t->rel_v) pv_accumulate(acc, nv, pb, t->rel_v, (size_t)t->hd, t->r, d0, w);
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        if (r >= nr) break;
        float *o = t->out + (size_t)(i0 + r) * t->ldo + d0;
        if (nv == 2) {
            _mm256_storeu_ps(o, acc[r][0]);
            _mm256_storeu_ps(o + 8, acc[r][1]);
        } else {
            store_n(o, acc[r][0], w);
        }
    }
}

/* Workspace: Kt (hd, N2p), logits (RB, N2p), and with Shaw tables
 * rel_k^T (hd, Rp), q·rel_k^T (RB, Rp), p buckets (RB, Rp). Every part is a
 * multiple of 8 floats, so all stay 32-byte aligned. */
static size_t avx2_work_floats(int n1, int n2, int hd, int r) {
    (void)n1;
    const size_t n2p = round8((size_t)n2), rp = round8((size_t)r);
    return ((size_t)hd + RB) * n2p + ((size_t)hd + 2 * RB) * rp;
}

static void avx2_forward(const rai_attn_task *t) {
    const int n1 = t->n1, n2 = t->n2, hd = t->hd, nrel = t->r;
    const size_t n2p = round8((size_t)n2), rp = round8((size_t)(t->rel_k || t->rel_v ? nrel : 0));
    float *kt = t->work;                     /* (hd, N2p) */
    float *s = kt + (size_t)hd * n2p;        /* (RB, N2p) */
    float *rkt = s + RB * n2p;               /* (hd, Rp)  */
    float *qr = rkt + (size_t)hd * rp;       /* (RB, Rp)  */
    float *pb = qr + RB * rp;                /* (RB, Rp)  */

    transpose(kt, n2p, t->k, (size_t)t->ldk, n2, hd);
    if (t->rel_k) transpose(rkt, rp, t->rel_k, (size_t)hd, nrel, hd);

    for (int i0 = 0; i0 < n1; i0 += RB) {
        /* A last block with fewer rows repeats its last row: the copies'
         * logits land in unused rows of s, their outputs are never stored. */
        const int nr = n1 - i0 < RB ? n1 - i0 : RB;
        const float *qrow[RB], *prow[RB], *pbrow[RB];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            const int rr = r < nr ? r : nr - 1;
            qrow[r] = t->q + (size_t)(i0 + rr) * t->ldq;
            prow[r] = s + rr * n2p;
            pbrow[r] = pb + rr * rp;
        }
        rows_times_bt(s, n2p, qrow, hd, kt, n2p, (int)n2p);
        if (t->rel_k) rows_times_bt(qr, rp, qrow, hd, rkt, rp, (int)rp);
        for (int r = 0; r < nr; r++) {
            softmax_row(t, i0 + r, s + r * n2p, t->rel_k ? qr + r * rp : NULL);
            if (t->bf16) round_row_bf16(s + r * n2p, n2p);   /* q, k, v came rounded */

            if (t->rel_v)   /* bucket p by rel */
                bucket_row(pb + r * rp, s + r * n2p, rai_rel_row(t, i0 + r), n2, nrel);
        }
        int d0 = 0;
        for (; d0 + 16 <= hd; d0 += 16) pv_chunk(t, i0, nr, prow, pbrow, 2, d0);
        for (; d0 < hd; d0 += 8) pv_chunk(t, i0, nr, prow, pbrow, 1, d0);
    }
}

/* ---- backward ------------------------------------------------------------
 * What ref_backward computes, for all N1 rows of a task at once:
 *   1. K and V are transposed into Kt, Vt (hd, N2p), the Shaw tables into
 *      (hd, Rp), as in the forward.
 *   2. Per block of RB rows: the logits (q Kt) and dp (do Vt) with the same
 *      rows_times_bt, softmax_row for p, then per row (8 columns at a time)
 *      dp += (do·rel_v^T)[rel], D = sum_j p dp, ds = p (dp - D); dbias += ds;
 *      P (N1, N2p) keeps p and DS (N1, N2p) keeps scale * ds for step 3.
 *      The rows' buckets (p and scale*ds summed by rel) give drel_v and
 *      drel_k as RB-row outer products, and dq += (scale ds) K plus
 *      (scale ds buckets) rel_k, with pv_accumulate's register blocking.
 *   3. Per block of RB columns j: dv_j += sum_i p_ij do_i and
 *      dk_j += sum_i (scale ds_ij) q_i, the same register blocking with the
 *      broadcasts walking a column of P or DS.
 * Padding columns of P and DS are 0 (p is 0 there), so blocks of columns
 * may read past N2 up to N2p. Every gradient is loaded, added to and stored
 * back; only the caller's columns are touched. */

static inline size_t round_rb(size_t n) { return (n + RB - 1) / RB * RB; }

/* Workspace: Kt, Vt (hd, N2p), P, DS (N1 rounded to RB, N2p), and with Shaw
 * tables rel_k^T, rel_v^T (hd, Rp), q·rel_k^T, do·rel_v^T, p buckets and ds
 * buckets (RB, Rp) each. All parts are multiples of 8 floats. */
static size_t avx2_backward_work_floats(int n1, int n2, int hd, int r) {
    const size_t n2p = round8((size_t)n2), rp = round8((size_t)r);
    return (2 * (size_t)hd + 2 * round_rb((size_t)n1)) * n2p + (2 * (size_t)hd + 4 * RB) * rp;
}

/* Row i of dp (N2p floats, raw do·v_j on entry; p the probabilities) becomes
 * scale * ds; dbias row i += ds. dor: do·rel_v^T of the row, or NULL. */
static void ds_row(const rai_attn_task *t, int i, const float *p, float *dp, const float *dor) {
    const int n2 = t->n2, n2p = (int)round8((size_t)n2);
    const size_t row = (size_t)i * n2;
    __m256 vdot0 = _mm256_setzero_ps(), vdot1 = _mm256_setzero_ps();
    if (dor) {   /* masked lanes read rel 0, always a valid bucket */
        for (int j = 0; j < n2p; j += 8) {
            const int n = n2 - j;
            __m256i m = n >= 8 ? _mm256_loadu_si256((const __m256i *)(rai_rel_row(t, i) + j))
                               : _mm256_maskload_epi32((const int *)(rai_rel_row(t, i) + j), lanes(n));
            __m256 x = _mm256_add_ps(_mm256_loadu_ps(dp + j), _mm256_i32gather_ps(dor, m, 4));
            _mm256_storeu_ps(dp + j, x);
        }
    }
    int j = 0;
    for (; j + 16 <= n2p; j += 16) {
        vdot0 = _mm256_fmadd_ps(_mm256_loadu_ps(p + j), _mm256_loadu_ps(dp + j), vdot0);
        vdot1 = _mm256_fmadd_ps(_mm256_loadu_ps(p + j + 8), _mm256_loadu_ps(dp + j + 8), vdot1);
    }
    if (j < n2p) vdot0 = _mm256_fmadd_ps(_mm256_loadu_ps(p + j), _mm256_loadu_ps(dp + j), vdot0);
    const __m256 dot = _mm256_set1_ps(hsum(_mm256_add_ps(vdot0, vdot1)));
    const __m256 scale = _mm256_set1_ps(t->scale);
    float *dbias = t->dbias ? t->dbias + row : NULL;
    for (j = 0; j < n2p; j += 8) {
        __m256 ds = _mm256_mul_ps(_mm256_loadu_ps(p + j), _mm256_sub_ps(_mm256_loadu_ps(dp + j), dot));
        if (dbias) {
            const int n = n2 - j;
            store_n(dbias + j, _mm256_add_ps(load_n(dbias + j, n), ds), n);
        }
        _mm256_storeu_ps(dp + j, _mm256_mul_ps(scale, ds));
    }
}

/* dst (R, hd) += sum_r b[r][m] * x[r] for every bucket m: RB outer products
 * with the x chunks held in registers, each dst chunk loaded and stored
 * once per block. */
static void outer_accumulate(float *dst, const float *const b[RB], const float *const x[RB],
                             int nrel, int hd) {
    int d0 = 0;
    for (; d0 + 16 <= hd; d0 += 16) {
        __m256 x0[RB], x1[RB];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            x0[r] = _mm256_loadu_ps(x[r] + d0);
            x1[r] = _mm256_loadu_ps(x[r] + d0 + 8);
        }
        for (int m = 0; m < nrel; m++) {
            float *y = dst + (size_t)m * hd + d0;
            __m256 y0 = _mm256_loadu_ps(y), y1 = _mm256_loadu_ps(y + 8);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) {
                __m256 s = _mm256_broadcast_ss(b[r] + m);
                y0 = _mm256_fmadd_ps(s, x0[r], y0);
                y1 = _mm256_fmadd_ps(s, x1[r], y1);
            }
            _mm256_storeu_ps(y, y0);
            _mm256_storeu_ps(y + 8, y1);
        }
    }
    for (; d0 < hd; d0 += 8) {
        const int w = hd - d0;
        __m256 x0[RB];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) x0[r] = load_n(x[r] + d0, w);
        for (int m = 0; m < nrel; m++) {
            float *y = dst + (size_t)m * hd + d0;
            __m256 y0 = load_n(y, w);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) y0 = _mm256_fmadd_ps(_mm256_broadcast_ss(b[r] + m), x0[r], y0);
            store_n(y, y0, w);
        }
    }
}

/* rows[r] (r < nr, row stride ld) columns d0 .. d0 + 8*nv (or up to the
 * width w) += acc[r]. */
ALWAYS_INLINE void add_rows(float *rows, size_t ld, int nr, __m256 acc[RB][2], const int nv,
                            int w) {
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        if (r >= nr) break;
        float *o = rows + (size_t)r * ld;
        if (nv == 2) {
            _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), acc[r][0]));
            _mm256_storeu_ps(o + 8, _mm256_add_ps(_mm256_loadu_ps(o + 8), acc[r][1]));
        } else {
            store_n(o, _mm256_add_ps(load_n(o, w), acc[r][0]), w);
        }
    }
}

/* dq columns d0 .. d0 + 8*nv of rows i0 .. i0+nr-1 += the rows' scale*ds
 * times K, plus their scale*ds buckets times rel_k. */
ALWAYS_INLINE void dq_chunk(const rai_attn_task *t, int i0, int nr, const float *const ds[RB],
                            const float *const dsb[RB], const int nv, int d0) {
    const int w = t->hd - d0;
    __m256 acc[RB][2];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    pv_accumulate(acc, nv, ds, t->k, (size_t)t->ldk, t->n2, d0, w);
    if (t->rel_k) pv_accumulate(acc, nv, dsb, t->rel_k, (size_t)t->hd, t->r, d0, w);
    add_rows(t->dq + (size_t)i0 * t->lddq + d0, (size_t)t->lddq, nr, acc, nv, w);
}

/* dst rows j0 .. j0+nj-1, columns d0 .. d0 + 8*nv, += sum_i a[i][j0 + r] x_i
 * over the task's N1 rows: a is P or DS (row stride lda), x is do or q. */
ALWAYS_INLINE void kv_chunk(float *dst, size_t ldd, int j0, int nj, const float *a, size_t lda,
                            const float *x, size_t ldx, int n1, const int nv, int d0, int w) {
    const float *col[RB];
    __m256 acc[RB][2];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        col[r] = a + j0 + r;
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    }
    pv_accumulate_s(acc, nv, col, lda, x, ldx, n1, d0, w);
    add_rows(dst + (size_t)j0 * ldd + d0, ldd, nj, acc, nv, w);
}

static void avx2_backward(const rai_attn_task *t) {
    const int n1 = t->n1, n2 = t->n2, hd = t->hd, nrel = t->r;
    const size_t n2p = round8((size_t)n2), rp = round8((size_t)(t->rel_k || t->rel_v ? nrel : 0));
    const size_t n1r = round_rb((size_t)n1);
    float *kt = t->work;                     /* (hd, N2p) */
    float *vt = kt + (size_t)hd * n2p;       /* (hd, N2p) */
    float *pm = vt + (size_t)hd * n2p;       /* (N1r, N2p) p            */
    float *dsm = pm + n1r * n2p;             /* (N1r, N2p) scale * ds   */
    float *rkt = dsm + n1r * n2p;            /* (hd, Rp)  */
    float *rvt = rkt + (size_t)hd * rp;      /* (hd, Rp)  */
    float *qr = rvt + (size_t)hd * rp;       /* (RB, Rp) q·rel_k^T      */
    float *dor = qr + RB * rp;               /* (RB, Rp) do·rel_v^T     */
    float *pb = dor + RB * rp;               /* (RB, Rp) p buckets      */
    float *dsb = pb + RB * rp;               /* (RB, Rp) scale*ds buckets */

    transpose(kt, n2p, t->k, (size_t)t->ldk, n2, hd);
    transpose(vt, n2p, t->v, (size_t)t->ldv, n2, hd);
    if (t->rel_k) transpose(rkt, rp, t->rel_k, (size_t)hd, nrel, hd);
    if (t->rel_v) transpose(rvt, rp, t->rel_v, (size_t)hd, nrel, hd);

    for (int i0 = 0; i0 < n1; i0 += RB) {
        /* A last block with fewer rows repeats its last row, as in the
         * forward: the copies land in rows of P and DS past N1 (never read)
         * and their buckets are zeroed, so they add nothing. */
        const int nr = n1 - i0 < RB ? n1 - i0 : RB;
        const float *qrow[RB], *dorow[RB], *dsrow[RB], *pbrow[RB], *dsbrow[RB];
        float *p = pm + (size_t)i0 * n2p, *ds = dsm + (size_t)i0 * n2p;
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            const int rr = r < nr ? r : nr - 1;
            qrow[r] = t->q + (size_t)(i0 + rr) * t->ldq;
            dorow[r] = t->dout + (size_t)(i0 + rr) * t->lddo;
            dsrow[r] = ds + rr * n2p;
            pbrow[r] = pb + r * rp;
            dsbrow[r] = dsb + r * rp;
        }
        rows_times_bt(p, n2p, qrow, hd, kt, n2p, (int)n2p);
        if (t->rel_k) rows_times_bt(qr, rp, qrow, hd, rkt, rp, (int)rp);
        rows_times_bt(ds, n2p, dorow, hd, vt, n2p, (int)n2p);
        if (t->rel_v) rows_times_bt(dor, rp, dorow, hd, rvt, rp, (int)rp);
        for (int r = 0; r < nr; r++) {
            float *pr = p + r * n2p, *dsr = ds + r * n2p;
            softmax_row(t, i0 + r, pr, t->rel_k ? qr + r * rp : NULL);
            ds_row(t, i0 + r, pr, dsr, t->rel_v ? dor + r * rp : NULL);
            const int32_t *rel = t->rel ? rai_rel_row(t, i0 + r) : NULL;
            if (t->drel_v) bucket_row(pb + r * rp, pr, rel, n2, nrel);   /* p by rel */
            if (t->rel_k) {
                bucket_row(dsb + r * rp, dsr, rel, n2, nrel);
                if (t->rel2) bucket_add(dsb + r * rp, dsr, rai_rel2_row(t, i0 + r), n2);
            }
        }
        for (int r = nr; r < RB; r++) {
            if (t->drel_v) memset(pb + r * rp, 0, (size_t)nrel * sizeof *pb);
            if (t->rel_k) memset(dsb + r * rp, 0, (size_t)nrel * sizeof *dsb);
        }
        if (t->drel_v) outer_accumulate(t->drel_v, pbrow, dorow, nrel, hd);
        if (t->drel_k) outer_accumulate(t->drel_k, dsbrow, qrow, nrel, hd);
        int d0 = 0;
        for (; d0 + 16 <= hd; d0 += 16) dq_chunk(t, i0, nr, dsrow, dsbrow, 2, d0);
        for (; d0 < hd; d0 += 8) dq_chunk(t, i0, nr, dsrow, dsbrow, 1, d0);
    }

    /* dv and dk, RB rows j at a time over all N1 rows i */
    for (int j0 = 0; j0 < n2; j0 += RB) {
        const int nj = n2 - j0 < RB ? n2 - j0 : RB;
        int d0 = 0;
        for (; d0 + 16 <= hd; d0 += 16) {
            kv_chunk(t->dv, (size_t)t->lddv, j0, nj, pm, n2p, t->dout, (size_t)t->lddo, n1, 2, d0,
                     hd - d0);
            kv_chunk(t->dk, (size_t)t->lddk, j0, nj, dsm, n2p, t->q, (size_t)t->ldq, n1, 2, d0,
                     hd - d0);
        }
        for (; d0 < hd; d0 += 8) {
            kv_chunk(t->dv, (size_t)t->lddv, j0, nj, pm, n2p, t->dout, (size_t)t->lddo, n1, 1, d0,
                     hd - d0);
            kv_chunk(t->dk, (size_t)t->lddk, j0, nj, dsm, n2p, t->q, (size_t)t->ldq, n1, 1, d0,
                     hd - d0);
        }
    }
}

const rai_attn_kernel rai_kernel_avx2 = {
    .name = "avx2", .forward = avx2_forward, .work_floats = avx2_work_floats,
    .backward = avx2_backward, .backward_work_floats = avx2_backward_work_floats,
};
