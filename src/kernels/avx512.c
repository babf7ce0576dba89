/* avx512.c - the AVX-512 attention kernel (AVX-512F: 16 floats a vector).
 *
 * Computes what ref.c computes, one (window, head) task at a time, with
 * avx2.c's plan at twice the width; every ragged edge (the last columns of
 * hd or N2) goes through a mask register instead of scalar code. Blocks of
 * RB query rows, so every vector loaded feeds RB FMAs:
 *
 *   1. K (N2, hd) is transposed once per task into Kt (hd, N2p), N2p = N2
 *      rounded up to 16, zero padded, in 16x16 register blocks. V is copied
 *      into a packed (N2, hd) block: rows of one head in the caller's
 *      (tokens, C) layout are C floats apart and fall into a few L1 sets,
 *      packed they stream. The caller's rows are prefetched ahead of use.
 *   2. One register-blocked product, block_fma, does all the arithmetic:
 *      acc[r][0..nv) += a_r[k] * b_k[d .. d + 16 nv) over k, RB rows x up to
 *      4 vectors (64 columns) of accumulators. The logits are
 *      q_i[d] * Kt[d][j..] (k = d); out is p_ij * v_j[d..] (k = j).
 *   3. The logits epilogue runs on the accumulators before they are stored:
 *      the Shaw key term (q_i·rel_k^T, R numbers per row from the same
 *      product with a transposed rel_k, gathered by rel), scale, bias, mask,
 *      padding lanes -inf, and the row maximum.
 *   4. e = exp(s - max) with a vectorised exp, the row sums; the p·v
 *      accumulators (and the Shaw value term: e summed into R buckets by
 *      rel, times rel_v, on the same accumulators) are multiplied by 1/sum
 *      when stored. attn, when asked, is e/sum.
 * Nothing of size (N1, N2, hd) ever exists; q, k, v, out are never assumed
 * aligned. The backward (below avx512_forward) recomputes p for all rows of
 * the task, keeps p and scale*ds in the workspace (N1 x N2p each) and forms
 * dq, dk, dv with the same block_fma. */
#include "kernels.h"
#include "attn_avx512.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define RB 4    /* query rows per block */
#define NVMAX 4 /* accumulator vectors per row: RB x NVMAX = 16 zmm */
_Static_assert(NVMAX == 4, "the nv switches below have cases 1 .. 4");

static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }
static inline size_t round_rb(size_t n) { return (n + RB - 1) / RB * RB; }

/* ---- data movement ------------------------------------------------------ */

/* dst (cols, ldd) = src (rows, cols; row stride lds) transposed, with
 * columns rows..round16(rows)-1 of dst zeroed (ldd >= round16(rows)).
 * Every 16x16 block goes through registers; an edge block loads its
 * columns through a mask and takes zeros for its missing rows. */
static void transpose(float *dst, size_t ldd, const float *src, size_t lds, int rows, int cols) {
    for (int r0 = 0; r0 < rows; r0 += 16) {
        const int nr = rows - r0;
        for (int c0 = 0; c0 < cols; c0 += 16) {
            const int nc = cols - c0;
            const __mmask16 m = lanes(nc);
            __m512 a[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                a[i] = i < nr ? _mm512_maskz_loadu_ps(m, src + (size_t)(r0 + i) * lds + c0)
                              : _mm512_setzero_ps();
            transpose16(a);
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                if (i < nc) _mm512_storeu_ps(dst + (size_t)(c0 + i) * ldd + r0, a[i]);
        }
    }
}

/* Asks for rows i .. i+RB-1 (of n; none when i >= n) of p (row stride ld,
 * hd floats each) to be brought into the cache. The rows of one head are
 * far apart in the caller's (tokens, C) layout, and the caches are cold
 * when the attention follows a projection: fetched only when first used,
 * every block of rows would wait for memory (Swin's small windows ran at
 * ~60% of their warm speed). So what a task transposes or copies at once
 * (K and V; q and do too in the backward) is prefetched whole at its start,
 * q and out (dq, dk, dv in the backward) PF blocks ahead of their use.
 * And the next task's K and V (q and do too) are asked for a share per
 * block while this one runs (prefetch_next), so that a task whose inputs
 * are in memory does not start with a wait (the AVX2 kernel gained nothing
 * from it and has none; figures: bench/results/2026-11-23_amd-epyc-zen4.md). */
#define PF 2
static void prefetch_block(const float *p, size_t ld, int i, int n, int hd) {
    prefetch_rows(p, ld, i, i + RB, n, hd);
}

/* dst (rows, cols) packed, row stride cols = src (row stride lds). */
static void pack(float *dst, const float *src, size_t lds, int rows, int cols) {
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < cols; c += 16) {
            const __mmask16 m = lanes(cols - c);
            _mm512_mask_storeu_ps(dst + (size_t)i * cols + c, m,
                                  _mm512_maskz_loadu_ps(m, src + (size_t)i * lds + c));
        }
}

/* Vector v of a row chunk of nv vectors at p: the last one through the
 * mask last, the others whole. */
ALWAYS_INLINE __m512 load_vec(const float *p, int v, const int nv, __mmask16 last) {
    return v < nv - 1 ? _mm512_loadu_ps(p + 16 * v) : _mm512_maskz_loadu_ps(last, p + 16 * v);
}

/* ---- the register-blocked product ----------------------------------------
 * acc[r][0..nv) += sum_{k<n} a[r][k*as] * b_k[0 .. 16 nv) for RB rows,
 * b_k = b + k*ldb, the last of its nv vectors loaded through the mask last:
 * one load of each b row feeds RB FMAs. With nv <= 2, even and odd k go to
 * separate accumulators (acc[r][nv..2nv), folded in at the end) so that at
 * least 8 FMA chains are in flight. nv is a constant wherever this is
 * inlined: the loops unroll and acc stays in registers. */
ALWAYS_INLINE void block_fma(__m512 acc[RB][NVMAX], const int nv, const float *const a[RB],
                             size_t as, const float *b, size_t ldb, int n, __mmask16 last) {
    const int split = nv <= 2;
    int k = 0;
    if (split)
        for (; k + 2 <= n; k += 2) {
            const float *b0 = b + (size_t)k * ldb, *b1 = b0 + ldb;
            __m512 x0[2], x1[2];
#pragma GCC unroll 2
            for (int v = 0; v < nv; v++) {
                x0[v] = load_vec(b0, v, nv, last);
                x1[v] = load_vec(b1, v, nv, last);
            }
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) {
                const __m512 p0 = _mm512_set1_ps(a[r][k * as]);
                const __m512 p1 = _mm512_set1_ps(a[r][(k + 1) * as]);
#pragma GCC unroll 2
                for (int v = 0; v < nv; v++) {
                    acc[r][v] = _mm512_fmadd_ps(p0, x0[v], acc[r][v]);
                    acc[r][nv + v] = _mm512_fmadd_ps(p1, x1[v], acc[r][nv + v]);
                }
            }
        }
    for (; k < n; k++) {
        const float *bk = b + (size_t)k * ldb;
        __m512 x[NVMAX];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) x[v] = load_vec(bk, v, nv, last);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            const __m512 p = _mm512_set1_ps(a[r][k * as]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(p, x[v], acc[r][v]);
        }
    }
    if (split)
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++)
#pragma GCC unroll 2
            for (int v = 0; v < nv; v++) {
                acc[r][v] = _mm512_add_ps(acc[r][v], acc[r][nv + v]);
                acc[r][nv + v] = _mm512_setzero_ps();
            }
}

ALWAYS_INLINE void zero_acc(__m512 acc[RB][NVMAX]) {
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NVMAX; v++) acc[r][v] = _mm512_setzero_ps();
}

/* rows[r] (r < nr, row stride ld), 16 nv columns (the last vector through
 * the mask last) = acc[r] (add 0), or += acc[r] (add 1), or = 0 + acc[r]
 * (add 2: the bits of += into zeros, -0 included, without reading them). */
ALWAYS_INLINE void put_rows(float *rows, size_t ld, int nr, __m512 acc[RB][NVMAX], const int nv,
                            __mmask16 last, const int add) {
    const __m512 z = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        if (r >= nr) break;
        float *o = rows + (size_t)r * ld;
#pragma GCC unroll 4
        for (int v = 0; v < nv - 1; v++)
            _mm512_storeu_ps(o + 16 * v, add == 1 ? _mm512_add_ps(_mm512_loadu_ps(o + 16 * v), acc[r][v])
                                       : add == 2 ? _mm512_add_ps(z, acc[r][v]) : acc[r][v]);
        float *e = o + 16 * (nv - 1);
        _mm512_mask_storeu_ps(e, last, add == 1 ? _mm512_add_ps(_mm512_maskz_loadu_ps(last, e),
                                                                acc[r][nv - 1])
                                       : add == 2 ? _mm512_add_ps(z, acc[r][nv - 1])
                                                  : acc[r][nv - 1]);
    }
}

/* Calls body(nv, d0, last) for hd in chunks of up to 16 NVMAX columns, with
 * a constant nv in each case. */
#define FOR_CHUNKS(hd, body)                                            \
    for (int d0_ = 0; d0_ < (hd); d0_ += 16 * NVMAX) {                  \
        const int w_ = (hd) - d0_;                                      \
        switch (w_ >= 16 * NVMAX ? NVMAX : (w_ + 15) / 16) {            \
        case 4: body(4, d0_, lanes(w_ - 48)); break;                    \
        case 3: body(3, d0_, lanes(w_ - 32)); break;                    \
        case 2: body(2, d0_, lanes(w_ - 16)); break;                    \
        default: body(1, d0_, lanes(w_)); break;                        \
        }                                                               \
    }

/* ---- logits and softmax -------------------------------------------------- */

/* What the logits of a block of rows need for their epilogue. */
typedef struct logits_rows {
    const rai_attn_task *t;
    int i0, nr;          /* task rows i0 .. i0+nr-1; rows past nr repeat the last */
    const float *qr;     /* (RB, Rp) q·rel_k^T of the rows, or NULL */
    size_t rp;
    __m512 vmax[RB];     /* running row maxima */
} logits_rows;

/* Columns j .. j+15 of logit row r: l = raw q·k on entry; returns
 * scale * (q·k + qr[rel]) + bias + mask in ref.c's order, -inf in the
 * padding lanes past N2 (m: the lanes before N2). */
ALWAYS_INLINE __m512 logit_epilogue(const logits_rows *lr, int r, int j, __mmask16 m,
                                    __m512 l) {
    const rai_attn_task *t = lr->t;
    const size_t row = (size_t)(lr->i0 + (r < lr->nr ? r : lr->nr - 1)) * t->n2 + j;
    if (lr->qr) {   /* masked lanes read rel 0, always a valid bucket */
        const int i = lr->i0 + (r < lr->nr ? r : lr->nr - 1);
        __m512i rel = _mm512_maskz_loadu_epi32(m, rai_rel_row(t, i) + j);
        l = _mm512_add_ps(l, _mm512_i32gather_ps(rel, lr->qr + (size_t)r * lr->rp, 4));
        if (t->rel2) {
            rel = _mm512_maskz_loadu_epi32(m, rai_rel2_row(t, i) + j);
            l = _mm512_add_ps(l, _mm512_i32gather_ps(rel, lr->qr + (size_t)r * lr->rp, 4));
        }
    }
    l = _mm512_mul_ps(_mm512_set1_ps(t->scale), l);
    if (t->bias) l = _mm512_add_ps(l, _mm512_maskz_loadu_ps(m, t->bias + row));
    if (t->mask) l = _mm512_add_ps(l, _mm512_maskz_loadu_ps(m, t->mask + row));
    if (t->rq) {
        const int i = lr->i0 + (r < lr->nr ? r : lr->nr - 1);
        const __mmask16 off = _mm512_mask_cmpneq_epi32_mask(
            m, _mm512_maskz_loadu_epi32(m, t->rk + j), _mm512_set1_epi32(t->rq[i]));
        l = _mm512_mask_add_ps(l, off, l, _mm512_set1_ps(RAI_REGION_OFF));
    }
    return m == 0xFFFF ? l : _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), m, l);
}

/* c[r][j] = sum_d a[r][d] * bt[d][j] for RB rows and ncols (a multiple of
 * 16) columns, 16 NVMAX at a time. With lr, the sums are logits: they get their
 * epilogue before the store and lr->vmax their maximum. */
ALWAYS_INLINE void times_bt(float *c, size_t ldc, const float *const a[RB], int hd,
                            const float *bt, size_t ldb, int ncols, logits_rows *lr) {
    for (int j = 0; j < ncols; j += 16 * NVMAX) {
        __m512 acc[RB][NVMAX];
        zero_acc(acc);
#define CHUNK(nv)                                                                    \
    do {                                                                             \
        block_fma(acc, nv, a, 1, bt + j, ldb, hd, 0xFFFF);                           \
        __mmask16 mv[NVMAX];                                                         \
        _Pragma("GCC unroll 4") for (int v = 0; v < nv; v++)                         \
            mv[v] = lr ? lanes(lr->t->n2 - j - 16 * v) : 0xFFFF;                     \
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)                         \
            _Pragma("GCC unroll 4") for (int v = 0; v < nv; v++) {                   \
                __m512 x = acc[r][v];                                                \
                if (lr) {                                                            \
                    x = logit_epilogue(lr, r, j + 16 * v, mv[v], x);                 \
                    lr->vmax[r] = _mm512_max_ps(lr->vmax[r], x);                     \
                }                                                                    \
                _mm512_storeu_ps(c + r * ldc + j + 16 * v, x);                       \
            }                                                                        \
    } while (0)
        switch (ncols - j >= 16 * NVMAX ? NVMAX : (ncols - j) / 16) {
        case 4: CHUNK(4); break;
        case 3: CHUNK(3); break;
        case 2: CHUNK(2); break;
        default: CHUNK(1); break;
        }
#undef CHUNK
    }
}

static void rows_times_bt(float *c, size_t ldc, const float *const a[RB], int hd,
                          const float *bt, size_t ldb, int ncols) {
    times_bt(c, ldc, a, hd, bt, ldb, ncols, NULL);
}

/* The RB rows of logits s (row stride N2p) of the block (i0, nr) from the
 * rows q[r] and Kt; mx[r] receives the row maxima. qr: the rows' q·rel_k^T
 * (row stride Rp) when there is a key table, else NULL. */
static void logits(const rai_attn_task *t, int i0, int nr, float *s, const float *const q[RB],
                   const float *kt, const float *qr, float mx[RB]) {
    const size_t n2p = round16((size_t)t->n2);
    logits_rows lr = {.t = t, .i0 = i0, .nr = nr, .qr = qr, .rp = round16((size_t)t->r)};
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) lr.vmax[r] = _mm512_set1_ps(-INFINITY);
    times_bt(s, n2p, q, t->hd, kt, n2p, (int)n2p, &lr);
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) mx[r] = _mm512_reduce_max_ps(lr.vmax[r]);
}

/* The RB rows of s (row stride N2p) become e = exp(s - mx[r]); inv[r] is
 * 1 / sum e, and 0 for a fully masked row (mx = -inf: every e is 0, the row
 * gives zeros, as rai_softmax_row). The rows go through together, so their
 * exps overlap. */
static void exp_rows(float *s, size_t n2p, const float mx[RB], float inv[RB]) {
    __m512 vmx[RB], vsum[RB];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        vmx[r] = _mm512_set1_ps(mx[r] == -INFINITY ? 0.0f : mx[r]);
        vsum[r] = _mm512_setzero_ps();
    }
    for (size_t j = 0; j < n2p; j += 16)
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            float *x = s + r * n2p + j;
            const __m512 e = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x), vmx[r]));
            _mm512_storeu_ps(x, e);
            vsum[r] = _mm512_add_ps(vsum[r], e);
        }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
        inv[r] = mx[r] == -INFINITY ? 0.0f : 1.0f / _mm512_reduce_add_ps(vsum[r]);
}

/* dst (n floats, masked tail) = src * inv; dst may be src. */
static void scale_row(float *dst, const float *src, int n, float inv) {
    const __m512 v = _mm512_set1_ps(inv);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 m = lanes(n - j);
        _mm512_mask_storeu_ps(dst + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, src + j), v));
    }
}

/* e (n floats, n a multiple of 16) = e * inv rounded to bfloat16 (nearest
 * even; rai_bf16_bits's, NaN kept): p as the bf16 core multiplies it. */
static void round_row_bf16(float *e, size_t n, float inv) {
    const __m512 v = _mm512_set1_ps(inv);
    for (size_t j = 0; j < n; j += 16) {
        const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(e + j), v);
        const __m512i u = _mm512_castps_si512(p);
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd);
        r = _mm512_and_si512(r, _mm512_set1_epi32((int)0xFFFF0000u));
        const __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
        _mm512_storeu_ps(e + j, _mm512_mask_mov_ps(_mm512_castsi512_ps(r), nan, p));
    }
}

/* b (R) += p summed by rel (one row). 16 columns that share a bucket (a
 * clip index sends most of a long row to its two end buckets) go in as one
 * vector sum; one scalar add per column made a chain of dependent adds on
 * the same bucket, which bounded Shaw's long rows. */
static void bucket_add(float *b, const float *p, const int32_t *rel, int n2) {
    int j = 0;
    for (; j + 16 <= n2; j += 16) {
        const __m512i r = _mm512_loadu_si512(rel + j);
        if (!_mm512_cmpneq_epi32_mask(r, _mm512_set1_epi32(rel[j])))
            b[rel[j]] += _mm512_reduce_add_ps(_mm512_loadu_ps(p + j));
        else
            for (int e = j; e < j + 16; e++) b[rel[e]] += p[e];
    }
    for (; j < n2; j++) b[rel[j]] += p[j];
}

/* b (R) = p summed by rel (one row). */
static void bucket_row(float *b, const float *p, const int32_t *rel, int n2, int nrel) {
    memset(b, 0, (size_t)nrel * sizeof *b);
    bucket_add(b, p, rel, n2);
}

/* ---- forward -------------------------------------------------------------- */

/* Output columns d0 .. d0 + 16 nv of rows i0 .. i0+nr-1: e times the packed
 * V, then the e buckets times rel_v on the same accumulators, times 1/sum. */
ALWAYS_INLINE void pv_chunk(const rai_attn_task *t, int i0, int nr, const float *const e[RB],
                            const float *const eb[RB], const float inv[RB], const float *vp,
                            const int nv, int d0, __mmask16 last) {
    __m512 acc[RB][NVMAX];
    zero_acc(acc);
    block_fma(acc, nv, e, 1, vp + d0, (size_t)t->hd, t->n2, last);
    if (t->rel_v) block_fma(acc, nv, eb, 1, t->rel_v + d0, (size_t)t->hd, t->r, last);
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_mul_ps(acc[r][v], _mm512_set1_ps(inv[r]));
    put_rows(t->out + (size_t)i0 * t->ldo + d0, (size_t)t->ldo, nr, acc, nv, last, 0);
}

/* Workspace: Kt (hd, N2p), logits (RB, N2p), packed V (N2, hd), and with
 * Shaw tables rel_k^T (hd, Rp), q·rel_k^T (RB, Rp), e buckets (RB, Rp).
 * Every part is a multiple of 16 floats, so all stay 64-byte aligned. */
static size_t avx512_work_floats(int n1, int n2, int hd, int r) {
    (void)n1;
    const size_t n2p = round16((size_t)n2), rp = round16((size_t)r);
    return ((size_t)hd + RB) * n2p + round16((size_t)n2 * hd) + ((size_t)hd + 2 * RB) * rp;
}

static void avx512_forward(const rai_attn_task *t) {
    const int n1 = t->n1, n2 = t->n2, hd = t->hd, nrel = t->r;
    const size_t n2p = round16((size_t)n2);
    const size_t rp = round16((size_t)(t->rel_k || t->rel_v ? nrel : 0));
    float *kt = t->work;                     /* (hd, N2p) */
    float *s = kt + (size_t)hd * n2p;        /* (RB, N2p) */
    float *vp = s + RB * n2p;                /* (N2, hd)  */
    float *rkt = vp + round16((size_t)n2 * hd); /* (hd, Rp) */
    float *qr = rkt + (size_t)hd * rp;       /* (RB, Rp)  */
    float *eb = qr + RB * rp;                /* (RB, Rp)  */

    for (int j = 0; j < n2; j += RB) {
        prefetch_block(t->k, (size_t)t->ldk, j, n2, hd);
        prefetch_block(t->v, (size_t)t->ldv, j, n2, hd);
    }
    for (int i = 0; i < PF * RB; i += RB) {
        prefetch_block(t->q, (size_t)t->ldq, i, n1, hd);
        prefetch_block(t->out, (size_t)t->ldo, i, n1, hd);
    }
    transpose(kt, n2p, t->k, (size_t)t->ldk, n2, hd);
    pack(vp, t->v, (size_t)t->ldv, n2, hd);
    if (t->rel_k) transpose(rkt, rp, t->rel_k, (size_t)hd, nrel, hd);

    for (int i0 = 0; i0 < n1; i0 += RB) {
        /* A last block with fewer rows repeats its last row: the copies'
         * logits land in unused rows of s, their outputs are never stored. */
        const int nr = n1 - i0 < RB ? n1 - i0 : RB;
        const float *qrow[RB], *erow[RB], *ebrow[RB];
        float mx[RB], inv[RB];
        prefetch_block(t->q, (size_t)t->ldq, i0 + PF * RB, n1, hd);
        prefetch_block(t->out, (size_t)t->ldo, i0 + PF * RB, n1, hd);
        prefetch_next(t, i0, RB, n1, 0);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            const int rr = r < nr ? r : nr - 1;
            qrow[r] = t->q + (size_t)(i0 + rr) * t->ldq;
            erow[r] = s + rr * n2p;
            ebrow[r] = eb + rr * rp;
        }
        if (t->rel_k) rows_times_bt(qr, rp, qrow, hd, rkt, rp, (int)rp);
        logits(t, i0, nr, s, qrow, kt, t->rel_k ? qr : NULL, mx);
        exp_rows(s, n2p, mx, inv);
        for (int r = 0; r < nr; r++) {
            if (t->attn) scale_row(t->attn + (size_t)(i0 + r) * n2, s + r * n2p, n2, inv[r]);
            if (t->bf16) {   /* q, k, v came rounded (core.c); p is rounded here */
                round_row_bf16(s + r * n2p, n2p, inv[r]);
                inv[r] = 1.0f;
            }
            if (t->rel_v)
                bucket_row(eb + r * rp, s + r * n2p, rai_rel_row(t, i0 + r), n2, nrel);
        }
#define PV(nv, d0, last) pv_chunk(t, i0, nr, erow, ebrow, inv, vp, nv, d0, last)
        FOR_CHUNKS(hd, PV)
#undef PV
    }
}

/* ---- backward ------------------------------------------------------------
 * What ref_backward computes, for the rows of a task a chunk at a time
 * (bwd_chunk: all N1 rows when P and DS of them fit in 512 KB):
 *   1. K and V are transposed into Kt, Vt (hd, N2p), the Shaw tables into
 *      (hd, Rp); q, do and K are packed (rows of hd floats), as V in the
 *      forward, for the products that walk all their rows.
 *   2. Per block of RB rows: the logits (q Kt, with their epilogue) and dp
 *      (do Vt), exp and 1/sum for p, then per row (16 columns at a time)
 *      dp += (do·rel_v^T)[rel], D = sum_j p dp, ds = p (dp - D); dbias += ds;
 *      P and DS (the chunk's rows, N2p) keep p and scale * ds for step 3.
 *      The rows' buckets (p and scale*ds summed by rel) give drel_v and
 *      drel_k as RB-row outer products, and dq += (scale ds) K plus
 *      (scale ds buckets) rel_k.
 *   3. After each chunk, per block of RB columns j: dv_j += sum_i p_ij
 *      do_i and dk_j += sum_i (scale ds_ij) q_i over the chunk's rows i,
 *      block_fma with its a walking a column of P or DS.
 * Padding columns of P and DS are 0 (p is 0 there), so blocks of columns
 * may read past N2 up to N2p. Every gradient is loaded, added to and stored
 * back (with task.set stored as 0 + the sum, unread: each element of dq, dk,
 * dv is written once when one chunk takes all rows, and the later chunks
 * add); only the caller's columns are touched (masked loads and stores). */

/* Query rows per chunk: P and DS of a chunk take at most 512 KB (they stay
 * in L2 while the chunk's dk and dv are formed), all N1 rows when they fit
 * (Shaw's N = 512: 2 MB for the whole task, read back from L3 column by
 * column). A multiple of RB. */
static int bwd_chunk(int n1, int n2) {
    int ch = (int)(65536 / round16((size_t)n2));
    ch -= ch % RB;
    if (ch < RB) ch = RB;
    return ch >= n1 ? (int)round_rb((size_t)n1) : ch;
}

/* Workspace: Kt, Vt (hd, N2p), P, DS (bwd_chunk rows, N2p), packed q, do
 * (N1, hd) and K (N2, hd), and with Shaw tables rel_k^T, rel_v^T (hd, Rp),
 * q·rel_k^T, do·rel_v^T, p buckets and ds buckets (RB, Rp) each. All parts
 * are multiples of 16 floats. */

static size_t avx512_backward_work_floats(int n1, int n2, int hd, int r) {
    const size_t n2p = round16((size_t)n2), rp = round16((size_t)r);
    return (2 * (size_t)hd + 2 * (size_t)bwd_chunk(n1, n2)) * n2p + 2 * round16((size_t)n1 * hd) +
           round16((size_t)n2 * hd) + (2 * (size_t)hd + 4 * RB) * rp;
}

/* Row i of dp (N2p floats, raw do·v_j on entry; p the probabilities) becomes
 * scale * ds; dbias row i += ds. dor: do·rel_v^T of the row, or NULL. */
static void ds_row(const rai_attn_task *t, int i, const float *p, float *dp, const float *dor) {
    const int n2 = t->n2, n2p = (int)round16((size_t)n2);
    const size_t row = (size_t)i * n2;
    if (dor)   /* masked lanes read rel 0, always a valid bucket */
        for (int j = 0; j < n2p; j += 16) {
            __m512i rel = _mm512_maskz_loadu_epi32(lanes(n2 - j), rai_rel_row(t, i) + j);
            _mm512_storeu_ps(dp + j, _mm512_add_ps(_mm512_loadu_ps(dp + j),
                                                   _mm512_i32gather_ps(rel, dor, 4)));
        }
    __m512 vdot0 = _mm512_setzero_ps(), vdot1 = _mm512_setzero_ps();
    int j = 0;
    for (; j + 32 <= n2p; j += 32) {
        vdot0 = _mm512_fmadd_ps(_mm512_loadu_ps(p + j), _mm512_loadu_ps(dp + j), vdot0);
        vdot1 = _mm512_fmadd_ps(_mm512_loadu_ps(p + j + 16), _mm512_loadu_ps(dp + j + 16), vdot1);
    }
    if (j < n2p) vdot0 = _mm512_fmadd_ps(_mm512_loadu_ps(p + j), _mm512_loadu_ps(dp + j), vdot0);
    const __m512 dot = _mm512_set1_ps(_mm512_reduce_add_ps(_mm512_add_ps(vdot0, vdot1)));
    const __m512 scale = _mm512_set1_ps(t->scale);
    float *dbias = t->dbias ? t->dbias + row : NULL;
    for (j = 0; j < n2p; j += 16) {
        __m512 ds = _mm512_mul_ps(_mm512_loadu_ps(p + j),
                                  _mm512_sub_ps(_mm512_loadu_ps(dp + j), dot));
        if (dbias) {
            const __mmask16 m = lanes(n2 - j);
            _mm512_mask_storeu_ps(dbias + j, m,
                                  _mm512_add_ps(_mm512_maskz_loadu_ps(m, dbias + j), ds));
        }
        _mm512_storeu_ps(dp + j, _mm512_mul_ps(scale, ds));
    }
}

/* dst (R, hd) += sum_r b[r][m] * x[r] for every bucket m: RB outer products
 * with a 16-column chunk of the x rows held in registers, each dst chunk
 * loaded and stored once per block. */
static void outer_accumulate(float *dst, const float *const b[RB], const float *const x[RB],
                             int nrel, int hd) {
    for (int d0 = 0; d0 < hd; d0 += 16) {
        const __mmask16 m = lanes(hd - d0);
        __m512 xr[RB];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) xr[r] = _mm512_maskz_loadu_ps(m, x[r] + d0);
        for (int k = 0; k < nrel; k++) {
            float *y = dst + (size_t)k * hd + d0;
            __m512 acc = _mm512_maskz_loadu_ps(m, y);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) acc = _mm512_fmadd_ps(_mm512_set1_ps(b[r][k]), xr[r], acc);
            _mm512_mask_storeu_ps(y, m, acc);
        }
    }
}

/* dq columns d0 .. d0 + 16 nv of rows i0 .. i0+nr-1 += the rows' scale*ds
 * times the packed K, plus their scale*ds buckets times rel_k. */
ALWAYS_INLINE void dq_chunk(const rai_attn_task *t, int i0, int nr, const float *const ds[RB],
                            const float *const dsb[RB], const float *kp, const int nv, int d0,
                            __mmask16 last) {
    __m512 acc[RB][NVMAX];
    zero_acc(acc);
    block_fma(acc, nv, ds, 1, kp + d0, (size_t)t->hd, t->n2, last);
    if (t->rel_k) block_fma(acc, nv, dsb, 1, t->rel_k + d0, (size_t)t->hd, t->r, last);
    if (t->set) put_rows(t->dq + (size_t)i0 * t->lddq + d0, (size_t)t->lddq, nr, acc, nv, last, 2);
    else put_rows(t->dq + (size_t)i0 * t->lddq + d0, (size_t)t->lddq, nr, acc, nv, last, 1);
}

/* dst rows j0 .. j0+nj-1, columns d0 .. d0 + 16 nv, += sum_i a[i][j0 + r] x_i
 * over the task's N1 rows (set: = 0 + it): a is P or DS (row stride lda),
 * x is the packed do or q. */
ALWAYS_INLINE void kv_chunk(float *dst, size_t ldd, int j0, int nj, const float *a, size_t lda,
                            const float *x, int hd, int n1, const int nv, int d0,
                            __mmask16 last, int set) {
    const float *col[RB];
    __m512 acc[RB][NVMAX];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) col[r] = a + j0 + r;
    zero_acc(acc);
    block_fma(acc, nv, col, lda, x + d0, (size_t)hd, n1, last);
    if (set) put_rows(dst + (size_t)j0 * ldd + d0, ldd, nj, acc, nv, last, 2);
    else put_rows(dst + (size_t)j0 * ldd + d0, ldd, nj, acc, nv, last, 1);
}

static void avx512_backward(const rai_attn_task *t) {
    const int n1 = t->n1, n2 = t->n2, hd = t->hd, nrel = t->r;
    const size_t n2p = round16((size_t)n2);
    const size_t rp = round16((size_t)(t->rel_k || t->rel_v ? nrel : 0));
    const int ch = bwd_chunk(n1, n2);
    float *kt = t->work;                     /* (hd, N2p) */
    float *vt = kt + (size_t)hd * n2p;       /* (hd, N2p) */
    float *pm = vt + (size_t)hd * n2p;       /* (ch, N2p) p of a chunk's rows */
    float *dsm = pm + (size_t)ch * n2p;      /* (ch, N2p) scale * ds    */
    float *qp = dsm + (size_t)ch * n2p;      /* (N1, hd) packed q       */
    float *dop = qp + round16((size_t)n1 * hd);  /* (N1, hd) packed do  */
    float *kp = dop + round16((size_t)n1 * hd);  /* (N2, hd) packed K   */
    float *rkt = kp + round16((size_t)n2 * hd);  /* (hd, Rp)  */
    float *rvt = rkt + (size_t)hd * rp;      /* (hd, Rp)  */
    float *qr = rvt + (size_t)hd * rp;       /* (RB, Rp) q·rel_k^T      */
    float *dor = qr + RB * rp;               /* (RB, Rp) do·rel_v^T     */
    float *pb = dor + RB * rp;               /* (RB, Rp) p buckets      */
    float *dsb = pb + RB * rp;               /* (RB, Rp) scale*ds buckets */

    for (int j = 0; j < n2; j += RB) {
        prefetch_block(t->k, (size_t)t->ldk, j, n2, hd);
        prefetch_block(t->v, (size_t)t->ldv, j, n2, hd);
    }
    for (int i = 0; i < n1; i += RB) {
        prefetch_block(t->q, (size_t)t->ldq, i, n1, hd);
        prefetch_block(t->dout, (size_t)t->lddo, i, n1, hd);
    }
    for (int i = 0; i < PF * RB; i += RB) prefetch_block(t->dq, (size_t)t->lddq, i, n1, hd);
    transpose(kt, n2p, t->k, (size_t)t->ldk, n2, hd);
    transpose(vt, n2p, t->v, (size_t)t->ldv, n2, hd);
    pack(qp, t->q, (size_t)t->ldq, n1, hd);
    pack(dop, t->dout, (size_t)t->lddo, n1, hd);
    pack(kp, t->k, (size_t)t->ldk, n2, hd);
    if (t->rel_k) transpose(rkt, rp, t->rel_k, (size_t)hd, nrel, hd);
    if (t->rel_v) transpose(rvt, rp, t->rel_v, (size_t)hd, nrel, hd);

    for (int c0 = 0; c0 < n1; c0 += ch) {   /* chunks of query rows */
        const int c1 = n1 - c0 < ch ? n1 : c0 + ch;
        for (int i0 = c0; i0 < c1; i0 += RB) {
            /* A last block with fewer rows repeats its last row, as in the
             * forward: the copies land in rows of P and DS past N1 (never read)
             * and their buckets are zeroed, so they add nothing. */
            const int nr = n1 - i0 < RB ? n1 - i0 : RB;
            const float *qrow[RB], *dorow[RB], *dsrow[RB], *pbrow[RB], *dsbrow[RB];
            float *p = pm + (size_t)(i0 - c0) * n2p, *ds = dsm + (size_t)(i0 - c0) * n2p;
            float mx[RB], inv[RB];
            prefetch_block(t->dq, (size_t)t->lddq, i0 + PF * RB, n1, hd);
            if (c0 == 0) prefetch_next(t, i0, RB, c1, 1);   /* over the first chunk */
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) {
                const int rr = r < nr ? r : nr - 1;
                qrow[r] = qp + (size_t)(i0 + rr) * hd;
                dorow[r] = dop + (size_t)(i0 + rr) * hd;
                dsrow[r] = ds + rr * n2p;
                pbrow[r] = pb + r * rp;
                dsbrow[r] = dsb + r * rp;
            }
            if (t->rel_k) rows_times_bt(qr, rp, qrow, hd, rkt, rp, (int)rp);
            logits(t, i0, nr, p, qrow, kt, t->rel_k ? qr : NULL, mx);
            exp_rows(p, n2p, mx, inv);
            rows_times_bt(ds, n2p, dorow, hd, vt, n2p, (int)n2p);
            if (t->rel_v) rows_times_bt(dor, rp, dorow, hd, rvt, rp, (int)rp);
            for (int r = 0; r < nr; r++) {
                float *pr = p + r * n2p, *dsr = ds + r * n2p;
                scale_row(pr, pr, (int)n2p, inv[r]);
                ds_row(t, i0 + r, pr, dsr, t->rel_v ? dor + r * rp : NULL);
                const int32_t *rel = t->rel ? rai_rel_row(t, i0 + r) : NULL;
                if (t->drel_v) bucket_row(pb + r * rp, pr, rel, n2, nrel);
                if (t->rel_k) bucket_row(dsb + r * rp, dsr, rel, n2, nrel);
                if (t->rel2)   /* the second index adds into the same buckets */
                    bucket_add(dsb + r * rp, dsr, rai_rel2_row(t, i0 + r), n2);
            }
            for (int r = nr; r < RB; r++) {
                if (t->drel_v) memset(pb + r * rp, 0, (size_t)nrel * sizeof *pb);
                if (t->rel_k) memset(dsb + r * rp, 0, (size_t)nrel * sizeof *dsb);
            }
            if (t->drel_v) outer_accumulate(t->drel_v, pbrow, dorow, nrel, hd);
            if (t->drel_k) outer_accumulate(t->drel_k, dsbrow, qrow, nrel, hd);
#define DQ(nv, d0, last) dq_chunk(t, i0, nr, dsrow, dsbrow, kp, nv, d0, last)
            FOR_CHUNKS(hd, DQ)
#undef DQ
        }

        /* dv and dk, RB rows j at a time, over the chunk's rows i */
        for (int j = 0; j < PF * RB; j += RB) {
            prefetch_block(t->dk, (size_t)t->lddk, j, n2, hd);
            prefetch_block(t->dv, (size_t)t->lddv, j, n2, hd);
        }
        const float *dopc = dop + (size_t)c0 * hd, *qpc = qp + (size_t)c0 * hd;
        for (int j0 = 0; j0 < n2; j0 += RB) {
            const int nj = n2 - j0 < RB ? n2 - j0 : RB;
            prefetch_block(t->dk, (size_t)t->lddk, j0 + PF * RB, n2, hd);
            prefetch_block(t->dv, (size_t)t->lddv, j0 + PF * RB, n2, hd);
#define KV(nv, d0, last)                                                                   \
    do {                                                                                   \
        kv_chunk(t->dv, (size_t)t->lddv, j0, nj, pm, n2p, dopc, hd, c1 - c0, nv, d0, last, \
                 t->set && c0 == 0);                                                        \
        kv_chunk(t->dk, (size_t)t->lddk, j0, nj, dsm, n2p, qpc, hd, c1 - c0, nv, d0, last, \
                 t->set && c0 == 0);                                                        \
    } while (0)
            FOR_CHUNKS(hd, KV)
#undef KV
        }
    }
}

const rai_attn_kernel rai_kernel_avx512 = {
    .name = "avx512", .forward = avx512_forward, .work_floats = avx512_work_floats,
    .backward = avx512_backward, .backward_work_floats = avx512_backward_work_floats,
    .sets_grads = 1,
};
