/* attn_bf16_avx512.c - the bf16 attention core on VDPBF16PS (AVX512_BF16).
 *
 * What ref.c's oracle computes for a task with t->bf16, one (window, head)
 * at a time: scale q, k, v and p rounded to bfloat16 (nearest even) as they
 * are packed, q·k_j and p·v[:, d] each one chain of VDPBF16PS steps over pairs
 * of the sum's index in order (the oracle's chains: the same products and
 * the same sums), the softmax float32 on avx512.c's exp_ps. One
 * instruction does 32 multiply-adds where FMA does 16.
 *
 *   1. Per task, K is rounded and packed as pairs along hd, transposed:
 *      Kp[m][j] holds (k_j[2m], k_j[2m+1]) in one 32-bit lane, so that a
 *      vector of Kp is 16 keys' pair m; V as pairs along the keys:
 *      Vp[m][d] holds (v_2m[d], v_2m+1[d]). Missing keys, pairs and
 *      columns are zeros.
 *   2. Per block of RB query rows, scale q rounded into pairs; the logits
 *      block_dp(q pairs, Kp) with avx512.c's epilogue (bias, mask, labels,
 *      -inf past N2), the row maxima, exp, 1/sum; p = e/sum (attn when
 *      asked), rounded into pairs along the keys.
 *   3. out = block_dp(p pairs, Vp): the broadcast pair of p against 16
 *      columns of Vp.
 * No Shaw tables (core.c sends those to the float32 kernel on rounded
 * values); forward only. Compiled with -mavx512f -mavx512bw -mavx512vl
 * -mavx512dq -mavx512bf16; run only where rai_kernel_bf16 returns it. */
#include "kernels.h"
#include "attn_avx512.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define RB 8     /* query rows per block */
#define NVMAX 3  /* accumulator vectors per row: RB x NVMAX = 24 zmm */

static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* The sizes of a task's packed operands, in 32-bit words. */
typedef struct {
    size_t n2p;   /* keys rounded to 16 (logit columns) */
    size_t hq;    /* pairs of hd (q, Kp rows) */
    size_t hqp;   /* hq rounded to 16 (a q row's stride) */
    size_t hdp;   /* hd rounded to 16 (Vp's row stride) */
    size_t pp;    /* pairs of keys, n2p / 2, rounded to 16 (a p row's stride) */
} dims;

static dims dims_of(int n2, int hd) {
    dims g;
    g.n2p = round16((size_t)n2);
    g.hq = ((size_t)hd + 1) / 2;
    g.hqp = round16(g.hq);
    g.hdp = round16((size_t)hd);
    g.pp = round16(g.n2p / 2);
    return g;
}

/* Workspace: Kp (hq, N2p), Vp (N2p / 2, hdp), q pairs (RB, hqp), logits
 * (RB, N2p), p pairs (RB, pp); every part a multiple of 16 words. */
static size_t bf16_work_floats(int n1, int n2, int hd, int r) {
    (void)n1, (void)r;
    const dims g = dims_of(n2, hd);
    return g.hq * g.n2p + g.n2p / 2 * g.hdp + RB * g.hqp + RB * g.n2p + RB * g.pp;
}

/* 32 floats at p times s (the last ones through masks of n columns, zeros
 * past them) as 16 pairs of bfloat16: word m holds (s p[2m], s p[2m+1]). */
static inline __m512i pairs32(const float *p, int n, __m512 s) {
    const __m512 lo = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(n), p), s);
    const __m512 hi = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(n - 16), p + 16), s);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* Kp (hq, N2p) from K (N2, hd; row stride ldk): 16 keys x 16 pairs at a
 * time, rounded in rows and transposed as 32-bit words; the keys past N2
 * (the last block's missing rows) are zeros. */
static void pack_k(uint32_t *kp, const dims *g, const float *k, size_t ldk, int n2, int hd) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int j0 = 0; j0 < n2; j0 += 16) {
        const int nr = n2 - j0 < 16 ? n2 - j0 : 16;
        for (int c0 = 0; c0 < hd; c0 += 32) {
            __m512 a[16];
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++)
                a[r] = r < nr ? _mm512_castsi512_ps(pairs32(k + (size_t)(j0 + r) * ldk + c0, hd - c0, one))
                              : _mm512_setzero_ps();
            transpose16(a);
            const int m0 = c0 / 2, nm = (int)g->hq - m0 < 16 ? (int)g->hq - m0 : 16;
            for (int m = 0; m < nm; m++)
                _mm512_storeu_ps((float *)kp + (size_t)(m0 + m) * g->n2p + j0, a[m]);
        }
    }
}

/* 16 floats at p (n columns, zeros past them) rounded, each in the low
 * half of a 32-bit word. */
static inline __m512i low_halves(const float *p, int n) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lanes(n), p));
    return _mm512_cvtepu16_epi32((__m256i)h);
}

/* Vp (N2p / 2, hdp) from V (N2, hd; row stride ldv): rows 2m and 2m + 1
 * rounded and interleaved, zeros past N2 and hd. */
static void pack_v(uint32_t *vp, const dims *g, const float *v, size_t ldv, int n2, int hd) {
    for (size_t m = 0; m < g->n2p / 2; m++) {
        const int j = (int)(2 * m);
        for (size_t d0 = 0; d0 < g->hdp; d0 += 16) {
            const int n = hd - (int)d0;
            const __m512i e = j < n2 ? low_halves(v + (size_t)j * ldv + d0, n)
                                     : _mm512_setzero_si512();
            const __m512i o = j + 1 < n2 ? low_halves(v + (size_t)(j + 1) * ldv + d0, n)
                                         : _mm512_setzero_si512();
            _mm512_storeu_si512(vp + m * g->hdp + d0, _mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
        }
    }
}

/* acc[r][0..nv) += sum over pairs m < np of pair a[r * lda + m] times the
 * pairs b + m * ldb + 16 v: one load of b's vectors feeds RB instructions. */
ALWAYS_INLINE void block_dp(__m512 acc[RB][NVMAX], const int nv, const uint32_t *a, size_t lda,
                            const uint32_t *b, size_t ldb, size_t np) {
    for (size_t m = 0; m < np; m++) {
        __m512bh x[NVMAX];
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) x[v] = (__m512bh)_mm512_loadu_si512(b + m * ldb + 16 * v);
#pragma GCC unroll 8
        for (int r = 0; r < RB; r++) {
            const __m512bh p = (__m512bh)_mm512_set1_epi32((int)a[r * lda + m]);
#pragma GCC unroll 3
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], p, x[v]);
        }
    }
}

ALWAYS_INLINE void zero_acc(__m512 acc[RB][NVMAX]) {
#pragma GCC unroll 8
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 3
        for (int v = 0; v < NVMAX; v++) acc[r][v] = _mm512_setzero_ps();
}

/* What the logits of a block of rows add to q·k: its rows of the bias and
 * the mask (row r of the block: task row i0 + r, the last repeated past
 * nr) and its queries' region labels. */
typedef struct block_terms {
    const float *bias[RB], *mask[RB];   /* NULL: none */
    int32_t rq[RB];
} block_terms;

static void terms_of(block_terms *b, const rai_attn_task *t, int i0, int nr) {
    for (int r = 0; r < RB; r++) {
        const int i = i0 + (r < nr ? r : nr - 1);
        b->bias[r] = t->bias ? t->bias + (size_t)i * t->n2 : NULL;
        b->mask[r] = t->mask ? t->mask + (size_t)i * t->n2 : NULL;
        b->rq[r] = t->rq ? t->rq[i] : 0;
    }
}

/* Logit columns j0 .. j0 + 16 nv of the block's rows into s (row stride
 * N2p): q·k, then bias, mask and labels in ref.c's order (the scale is on
 * q), -inf past N2. (The row maxima are taken in softmax_pairs: RB
 * running maxima here would push the accumulators out of the registers.) */
ALWAYS_INLINE void logits_chunk(const rai_attn_task *t, const dims *g, const block_terms *bt,
                                const uint32_t *qp, const uint32_t *kp, float *s, int j0,
                                const int nv) {
    __m512 acc[RB][NVMAX];
    zero_acc(acc);
    block_dp(acc, nv, qp, g->hqp, kp + j0, g->n2p, g->hq);
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) {
        const int j = j0 + 16 * v;
        const __mmask16 m = lanes(t->n2 - j);
        const __m512i rk = t->rq ? _mm512_maskz_loadu_epi32(m, t->rk + j) : _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int r = 0; r < RB; r++) {
            __m512 l = acc[r][v];
            if (bt->bias[0]) l = _mm512_add_ps(l, _mm512_maskz_loadu_ps(m, bt->bias[r] + j));
            if (bt->mask[0]) l = _mm512_add_ps(l, _mm512_maskz_loadu_ps(m, bt->mask[r] + j));
            if (t->rq) {
                const __mmask16 off =
                    _mm512_mask_cmpneq_epi32_mask(m, rk, _mm512_set1_epi32(bt->rq[r]));
                l = _mm512_mask_add_ps(l, off, l, _mm512_set1_ps(RAI_REGION_OFF));
            }
            if (m != 0xFFFF) l = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), m, l);
            _mm512_storeu_ps(s + (size_t)r * g->n2p + j, l);
        }
    }
}

/* Output columns d0 .. d0 + 16 nv of the block's rows r < nr: p·Vp. */
ALWAYS_INLINE void pv_chunk(const rai_attn_task *t, const dims *g, int i0, int nr,
                            const uint32_t *pp, const uint32_t *vp, int d0, const int nv) {
    __m512 acc[RB][NVMAX];
    zero_acc(acc);
    block_dp(acc, nv, pp, g->pp, vp + d0, g->hdp, g->n2p / 2);
#pragma GCC unroll 8
    for (int r = 0; r < RB; r++) {
        if (r >= nr) break;
        float *o = t->out + (size_t)(i0 + r) * t->ldo + d0;
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++)
            _mm512_mask_storeu_ps(o + 16 * v, lanes(t->hd - d0 - 16 * v), acc[r][v]);
    }
}

/* The block's rows of s (e on return) through the softmax: p = e / sum
 * (attn when asked, rows r < nr), rounded into pairs along the keys. */
static void softmax_pairs(const rai_attn_task *t, const dims *g, int i0, int nr, float *s,
                          uint32_t *pp) {
    for (int r = 0; r < RB; r++) {
        float *e = s + (size_t)r * g->n2p;
        __m512 vmax = _mm512_set1_ps(-INFINITY);
        for (size_t j = 0; j < g->n2p; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(e + j));
        const float mx = _mm512_reduce_max_ps(vmax);
        const __m512 vmx = _mm512_set1_ps(mx == -INFINITY ? 0.0f : mx);
        __m512 vsum = _mm512_setzero_ps();
        for (size_t j = 0; j < g->n2p; j += 16) {
            const __m512 x = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(e + j), vmx));
            _mm512_storeu_ps(e + j, x);
            vsum = _mm512_add_ps(vsum, x);
        }
        /* a fully masked row (mx = -inf): every e is 0, p = 0, as rai_softmax_row */
        const __m512 inv = _mm512_set1_ps(mx == -INFINITY ? 0.0f : 1.0f / _mm512_reduce_add_ps(vsum));
        float *attn = t->attn && r < nr ? t->attn + (size_t)(i0 + r) * t->n2 : NULL;
        uint32_t *pr = pp + (size_t)r * g->pp;
        for (size_t j = 0; j < g->n2p; j += 32) {
            const __m512 lo = _mm512_mul_ps(_mm512_loadu_ps(e + j), inv);
            const int two = j + 16 < g->n2p;
            const __m512 hi = two ? _mm512_mul_ps(_mm512_loadu_ps(e + j + 16), inv)
                                  : _mm512_setzero_ps();
            if (attn) {
                _mm512_mask_storeu_ps(attn + j, lanes(t->n2 - (int)j), lo);
                if (two) _mm512_mask_storeu_ps(attn + j + 16, lanes(t->n2 - (int)j - 16), hi);
            }
            const __m512i w = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
            if (two) _mm512_storeu_si512(pr + j / 2, w);
            else _mm256_storeu_si256((__m256i *)(pr + j / 2), _mm512_castsi512_si256(w));
        }
    }
}

static void bf16_forward(const rai_attn_task *t) {
    const int n1 = t->n1, n2 = t->n2, hd = t->hd;
    const dims g = dims_of(n2, hd);
    uint32_t *kp = (uint32_t *)t->work;            /* (hq, N2p)      */
    uint32_t *vp = kp + g.hq * g.n2p;              /* (N2p / 2, hdp) */
    uint32_t *qp = vp + g.n2p / 2 * g.hdp;         /* (RB, hqp)      */
    float *s = (float *)(qp + RB * g.hqp);         /* (RB, N2p)      */
    uint32_t *pp = (uint32_t *)(s + RB * g.n2p);   /* (RB, pp)       */

    const __m512 scale = _mm512_set1_ps(t->scale);   /* on q before it is rounded */
    prefetch_rows(t->q, (size_t)t->ldq, 0, 2 * RB, n1, hd);
    pack_k(kp, &g, t->k, (size_t)t->ldk, n2, hd);
    pack_v(vp, &g, t->v, (size_t)t->ldv, n2, hd);
    for (int i0 = 0; i0 < n1; i0 += RB) {
        /* a last block with fewer rows repeats its last row: its copies'
         * logits land in unused rows, their outputs are never stored */
        const int nr = n1 - i0 < RB ? n1 - i0 : RB;
        prefetch_rows(t->q, (size_t)t->ldq, i0 + 2 * RB, i0 + 3 * RB, n1, hd);
        prefetch_next(t, i0, RB, n1, 1);   /* the next task's k, v and q */
        for (int r = 0; r < RB; r++) {
            const float *q = t->q + (size_t)(i0 + (r < nr ? r : nr - 1)) * t->ldq;
            for (int c0 = 0; c0 < hd; c0 += 32)
                _mm512_storeu_si512(qp + (size_t)r * g.hqp + c0 / 2, pairs32(q + c0, hd - c0, scale));
        }
        block_terms bt;
        terms_of(&bt, t, i0, nr);
        int j0 = 0;
        for (; j0 + 48 <= (int)g.n2p; j0 += 48) logits_chunk(t, &g, &bt, qp, kp, s, j0, 3);
        if ((int)g.n2p - j0 == 32) logits_chunk(t, &g, &bt, qp, kp, s, j0, 2);
        else if ((int)g.n2p - j0 == 16) logits_chunk(t, &g, &bt, qp, kp, s, j0, 1);
        softmax_pairs(t, &g, i0, nr, s, pp);
        int d0 = 0;
        for (; d0 + 32 <= (int)g.hdp; d0 += 32) pv_chunk(t, &g, i0, nr, pp, vp, d0, 2);
        if (d0 < (int)g.hdp) pv_chunk(t, &g, i0, nr, pp, vp, d0, 1);
    }
}

const rai_attn_kernel rai_kernel_avx512_bf16 = {"avx512_bf16", bf16_forward, bf16_work_floats,
                                                NULL, NULL, 0};
