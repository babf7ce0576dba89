/* gemm_avx512.c - the Linear layers' product for inference on AVX-512
 * CPUs: y (M, N) = x (M, K) . w (N, K)^T, with the bias, GELU and residual
 * add applied to each output tile while it is still in registers.
 * Compiled with -mavx512f -mfma; src/nn.c calls it only when the CPU has
 * AVX-512F (OpenBLAS, whose kernels the environment may pin to AVX2, stays
 * the fallback and does every backward product).
 *
 * Blocking: w is packed per call, NR = 32 of its rows at a time, into
 * k-major panels (each k: 32 consecutive outputs), a block of panels of
 * about 256 KB at a time per thread, while the next block's rows of w are
 * prefetched into L2. x is not packed: the microkernel broadcasts x[i][k]
 * from its rows directly. A tile is up to MR = 12 rows by NR = 32 columns,
 * 24 accumulators over the whole of K (no K blocking: the epilogue sees
 * finished sums), so every output is one sequential chain of FMAs over k,
 * then + bias. The summation order differs from OpenBLAS's, so results
 * differ from it within rounding (tests/test_nn.c holds both to the same
 * worst-case bound against a double-precision product). Each output is
 * computed the same way whatever the number of threads.
 *
 * Threads split either the panels or the row tiles (by a cost model), each
 * thread packing its own panels: no thread waits for another.
 *
 * Epilogue, per output element r = acc (+ bias[j]):
 *   gelu    r = r * 0.5 * (1 + erf(r / sqrt 2)), the erf of nn_avx2.c on
 *           16 lanes (same polynomial, same operations: same bits)
 *   res     res[row'][j] = res[row'][j] + r instead of storing r into y,
 *           row' = map[i] (skipped when negative) or i: the window reverse
 *           and the residual add of a Swin block fused into its proj. */
#include "gemm_kernels.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MR 12
#define NR 32
#define BLOCK_FLOATS ((int64_t)1 << 16)   /* packed w per block: 256 KB */

/* ---- GELU on 16 lanes (nn_avx2.c's erf8, widened) -------------------------- */

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
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n),
                                                         _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

static inline __m512 erf16(__m512 x) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512 ax = _mm512_castsi512_ps(_mm512_andnot_si512(_mm512_castps_si512(sign),
                                                              _mm512_castps_si512(x)));
    const __m512 s = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(-5.990993519e-04f);
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(4.993213109e-03f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-2.676664437e-02f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.128181722e-01f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-3.761249385e-01f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.283791496e-01f));
    const __m512 small = _mm512_fmadd_ps(x, p, x);
    const __m512 t = _mm512_min_ps(ax, _mm512_set1_ps(4.0f));
    __m512 q = _mm512_set1_ps(1.947346228e-04f);
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-3.031601753e-03f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(2.218140199e-02f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-1.038389124e-01f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-6.372857526e-01f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-1.127615461e+00f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-2.099135167e-04f));
    const __m512 one_m = _mm512_sub_ps(_mm512_set1_ps(1.0f), exp16_neg(q));
    const __m512 big = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(one_m),
        _mm512_and_si512(_mm512_castps_si512(sign), _mm512_castps_si512(x))));
    const __mmask16 use_big = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.921875f), _CMP_GT_OQ);
    const __m512 r = _mm512_mask_blend_ps(use_big, small, big);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, x);
}

static inline __m512 gelu16(__m512 v) {
    const __m512 e = erf16(_mm512_mul_ps(v, _mm512_set1_ps(0.70710678118654752440f)));
    return _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.5f)),
                         _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

/* GELU'(v) = Phi(v) + v phi(v), as the scalar backward: 0.5 (1 + erf(v /
 * sqrt 2)) + v (1 / sqrt(2 pi)) exp(-v^2 / 2), in that order; exp's
 * argument below -87 gives 0 (expf is below 2^-125 there: so v = +-inf
 * gives NaN as inf * 0 does in the scalar loop). */
static inline __m512 gelu_grad16(__m512 v) {
    const __m512 cdf = _mm512_mul_ps(
        _mm512_set1_ps(0.5f),
        _mm512_add_ps(_mm512_set1_ps(1.0f),
                      erf16(_mm512_mul_ps(v, _mm512_set1_ps(0.70710678118654752440f)))));
    const __m512 arg = _mm512_mul_ps(_mm512_mul_ps(v, v), _mm512_set1_ps(-0.5f));
    const __m512 e = _mm512_maskz_mov_ps(
        _mm512_cmp_ps_mask(arg, _mm512_set1_ps(-87.0f), _CMP_GE_OQ), exp16_neg(arg));
    const __m512 pdf = _mm512_mul_ps(_mm512_set1_ps(0.39894228040143267794f), e);
    return _mm512_add_ps(cdf, _mm512_mul_ps(v, pdf));
}

void ra_gemm_gelu_backward_avx512(float *dx, const float *dy, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 d = _mm512_mul_ps(_mm512_loadu_ps(dy + i), gelu_grad16(_mm512_loadu_ps(x + i)));
        _mm512_storeu_ps(dx + i, _mm512_add_ps(_mm512_loadu_ps(dx + i), d));
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 d = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i),
                                       gelu_grad16(_mm512_maskz_loadu_ps(m, x + i)));
        _mm512_mask_storeu_ps(dx + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dx + i), d));
    }
}

void ra_gemm_gelu_avx512(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* ---- packing ------------------------------------------------------------------
 * panel (K, 32): panel[k][jj] = w[jj][k] for the jn <= 32 rows of w given,
 * zeros beyond; 8 x 8 blocks transposed in registers. */
static inline void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

static void pack_panel(float *panel, const float *w, int64_t ldw, int jn, int k) {
    int j = 0;
    for (; j + 8 <= jn; j += 8) {
        const float *w0 = w + j * ldw;
        int p = 0;
        for (; p + 8 <= k; p += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(w0 + i * ldw + p);
            transpose8(r);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(panel + (int64_t)(p + i) * NR + j, r[i]);
        }
        for (; p < k; p++)
            for (int i = 0; i < 8; i++) panel[(int64_t)p * NR + j + i] = w0[i * ldw + p];
    }
    for (; j < jn; j++)
        for (int p = 0; p < k; p++) panel[(int64_t)p * NR + j] = w[j * ldw + p];
    if (jn < NR)
        for (int p = 0; p < k; p++)
            memset(panel + (int64_t)p * NR + jn, 0, (size_t)(NR - jn) * sizeof(float));
}

/* ---- microkernel ------------------------------------------------------------ */

typedef struct gemm_args {
    float *y;
    int64_t ldy;
    const float *x;
    int64_t ldx;
    const float *w;
    int64_t ldw;
    int64_t m;
    int n, k;
    const float *bias;
    int gelu;
    float *res;
    int64_t ldres;
    const int32_t *map;
} gemm_args;

/* Rows i0 .. i0+mr-1 of the output against one packed panel (columns j0 ..
 * j0+jn-1). */
static inline __attribute__((always_inline)) void tile(const gemm_args *a, int mr, int64_t i0,
                                                       const float *panel, int j0, int jn,
                                                       const char *pf, int64_t npf) {
    __m512 c0[MR], c1[MR];
    for (int i = 0; i < mr; i++) c0[i] = _mm512_setzero_ps(), c1[i] = _mm512_setzero_ps();
    /* rows by threes: base pointers xq (rows 3q) advance with k, row 3q + r
     * is xq[r * ldx] (addressing base + ldx*4*r, r = 0, 1, 2) */
    const int64_t ld = a->ldx;
    const float *xq[MR / 3];
    for (int q = 0; q < (mr + 2) / 3; q++) xq[q] = a->x + (i0 + 3 * q) * ld;
    const float *bp = panel;
    for (int p = a->k; p > 0;) {
        /* k in chunks of 16; before each, its share of the prefetches of
         * the next block of w (towards L2), spread evenly over the FMAs */
        const int chunk = p < 16 ? p : 16;
        for (int64_t share = (npf * chunk + p - 1) / p; share > 0; share--, npf--, pf += 64)
            _mm_prefetch(pf, _MM_HINT_T1);
        p -= chunk;
        for (int c = chunk; c > 0; c--, bp += NR) {
            const __m512 b0 = _mm512_load_ps(bp);
            const __m512 b1 = _mm512_load_ps(bp + 16);
            for (int i = 0; i < mr; i++) {
                const __m512 av = _mm512_set1_ps(xq[i / 3][(i % 3) * ld]);
                c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
                c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
            }
            for (int q = 0; q < (mr + 2) / 3; q++) xq[q]++;
        }
    }
    /* epilogue */
    const __mmask16 m0 = jn >= 16 ? 0xFFFF : (__mmask16)((1u << jn) - 1);
    const __mmask16 m1 = jn >= 32 ? 0xFFFF : jn <= 16 ? 0 : (__mmask16)((1u << (jn - 16)) - 1);
    if (a->bias) {
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, a->bias + j0);
        const __m512 b1 = _mm512_maskz_loadu_ps(m1, a->bias + j0 + 16);
        for (int i = 0; i < mr; i++) {
            c0[i] = _mm512_add_ps(c0[i], b0);
            c1[i] = _mm512_add_ps(c1[i], b1);
        }
    }
    if (a->gelu)
        for (int i = 0; i < mr; i++) {
            c0[i] = gelu16(c0[i]);
            if (m1) c1[i] = gelu16(c1[i]);
        }
    if (a->res) {
        for (int i = 0; i < mr; i++) {
            const int64_t row = a->map ? a->map[i0 + i] : i0 + i;
            if (row < 0) continue;
            float *d = a->res + row * a->ldres + j0;
            _mm512_mask_storeu_ps(d, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, d), c0[i]));
            if (m1)
                _mm512_mask_storeu_ps(d + 16, m1,
                                      _mm512_add_ps(_mm512_maskz_loadu_ps(m1, d + 16), c1[i]));
        }
    } else {
        for (int i = 0; i < mr; i++) {
            float *d = a->y + (i0 + i) * a->ldy + j0;
            _mm512_mask_storeu_ps(d, m0, c0[i]);
            if (m1) _mm512_mask_storeu_ps(d + 16, m1, c1[i]);
        }
    }
}

static void tile_any(const gemm_args *a, int mr, int64_t i0, const float *panel, int j0, int jn,
                     const char *pf, int64_t npf) {
    switch (mr) {
#define CASE(r) case r: tile(a, r, i0, panel, j0, jn, pf, npf); break;
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6)
        CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)
#undef CASE
    default: break;
    }
}

/* The packed block of w: one buffer per thread, grown on demand and freed
 * when the thread ends (OpenMP's pool threads keep theirs). */
typedef struct pack_buf {
    float *p;
    size_t cap;
} pack_buf;

static tss_t pack_key;
static once_flag pack_once = ONCE_FLAG_INIT;
static int pack_key_ok;

static void pack_buf_free(void *v) {
    pack_buf *b = v;
    if (b) free(b->p);
    free(b);
}

static void pack_key_init(void) { pack_key_ok = tss_create(&pack_key, pack_buf_free) == thrd_success; }

static float *pack_space(size_t floats) {
    call_once(&pack_once, pack_key_init);
    if (!pack_key_ok) return NULL;
    pack_buf *b = tss_get(pack_key);
    if (!b) {
        if (!(b = calloc(1, sizeof *b))) return NULL;
        if (tss_set(pack_key, b) != thrd_success) return free(b), NULL;
    }
    if (floats > b->cap) {
        free(b->p);
        b->p = aligned_alloc(64, (floats * sizeof(float) + 63) & ~(size_t)63);
        b->cap = b->p ? floats : 0;
    }
    return b->p;
}

/* Row tiles: m rows in mt tiles of MR or fewer rows, as even as possible
 * (49 rows: 10, 10, 10, 10, 9 rather than 12, 12, 12, 12, 1: a tile of few
 * rows runs at the latency of its FMA chains, not at their throughput). */
static inline int64_t tile_row(int64_t t, int64_t m, int64_t mt) {
    const int64_t base = m / mt, extra = m % mt;
    return t * base + (t < extra ? t : extra);
}

/* One thread's rectangle: row tiles [t0, t1) x panels [p0, p1), w packed
 * a block of panels at a time into the thread's own buffer. While a block
 * is multiplied, the rows of w of the thread's next block are prefetched
 * into L2, so that packing them does not wait for memory (the weights of a
 * network are read from DRAM once per forward). */
static int run_part(const gemm_args *a, int64_t mt, int64_t t0, int64_t t1, int p0, int p1,
                    int per) {
    const int k = a->k;
    float *buf = pack_space((size_t)per * k * NR);
    if (!buf) return -1;
    for (int jb = p0; jb < p1; jb += per) {
        const int np = p1 - jb < per ? p1 - jb : per;
        for (int p = 0; p < np; p++) {
            const int j0 = (jb + p) * NR;
            pack_panel(buf + (int64_t)p * k * NR, a->w + j0 * a->ldw, a->ldw,
                       a->n - j0 < NR ? a->n - j0 : NR, k);
        }
        /* the next block's rows of w: contiguous when ldw == k */
        const char *pf = NULL;
        int64_t lines = 0;
        if (jb + np < p1 && a->ldw == k) {
            const int64_t r0 = (int64_t)(jb + np) * NR;
            int64_t r1 = (int64_t)(jb + np + (p1 - jb - np < per ? p1 - jb - np : per)) * NR;
            if (r1 > a->n) r1 = a->n;
            pf = (const char *)(a->w + r0 * k);
            lines = ((r1 - r0) * k * (int64_t)sizeof(float) + 63) / 64;
        }
        const int64_t calls = (t1 - t0) * np;
        int64_t c = 0;
        for (int64_t t = t0; t < t1; t++) {
            const int64_t i0 = tile_row(t, a->m, mt);
            const int mr = (int)(tile_row(t + 1, a->m, mt) - i0);
            for (int p = 0; p < np; p++, c++) {
                const int j0 = (jb + p) * NR;
                const int jn = a->n - j0 < NR ? a->n - j0 : NR;
                const int64_t l0 = lines * c / calls, l1 = lines * (c + 1) / calls;
                const char *pp = pf ? pf + l0 * 64 : NULL;
                if (mr == MR) tile(a, MR, i0, buf + (int64_t)p * k * NR, j0, jn, pp, l1 - l0);
                else tile_any(a, mr, i0, buf + (int64_t)p * k * NR, j0, jn, pp, l1 - l0);
            }
        }
    }
    return 0;
}

int ra_gemm_avx512(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                   int64_t ldw, int64_t m, int n, int k, const float *bias, int gelu,
                   float *res, int64_t ldres, const int32_t *map, int nthreads) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0) return -1;   /* the caller's path handles it */
    const int npan = (n + NR - 1) / NR;
    int64_t per = BLOCK_FLOATS / ((int64_t)k * NR);
    if (per < 1) per = 1;
    if (per > npan) per = npan;
    const gemm_args a = {.y = y, .ldy = ldy, .x = x, .ldx = ldx, .w = w, .ldw = ldw, .m = m,
                         .n = n, .k = k, .bias = bias, .gelu = gelu, .res = res,
                         .ldres = ldres, .map = map};
    const int64_t mt = (m + MR - 1) / MR;
    int nt = nthreads < 1 ? 1 : nthreads;
    if (nt > mt * npan) nt = (int)(mt * npan);
    /* Split the panels or the row tiles between the threads, whichever
     * finishes first by a cost model per k: a full tile 12 cycles, packing
     * a panel about 10. Splitting rows makes every thread pack every panel;
     * no thread ever waits for another. */
    const int64_t pn = (npan + nt - 1) / nt, tm = (mt + nt - 1) / nt;
    const int split_rows = npan * (tm * 12 + 10) < pn * (mt * 12 + 10);
    int fail = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : fail)
#endif
    {
#ifdef _OPENMP
        const int id = omp_get_thread_num(), cnt = omp_get_num_threads();
#else
        const int id = 0, cnt = 1;
#endif
        if (split_rows)
            fail |= run_part(&a, mt, mt * id / cnt, mt * (id + 1) / cnt, 0, npan, (int)per);
        else
            fail |= run_part(&a, mt, 0, mt, (int)((int64_t)npan * id / cnt),
                             (int)((int64_t)npan * (id + 1) / cnt), (int)per);
    }
    return fail ? -1 : 0;
}

/* ---- the weight gradient: c += a^T . b ------------------------------------------
 * c (N, K) += a (M, N)^T . b (M, K), a Linear layer's dW += dY^T X, read row
 * by row from both operands: for each row r of a block, a tile of c (TN rows
 * n, 32 columns k) takes the outer product of a[r][n..n+TN) (broadcast) and
 * b[r][k..k+32) (two vectors). Rows go in blocks of TM, so that a block of a
 * and b stays in L2 while all the tiles of c walk it; each element of c is
 * one chain of FMAs over r = 0, 1, ..., M-1 in order, whatever the blocks
 * and threads. Threads own tiles of c: no reduction, no waiting. Returns
 * -1 (nothing done) when the scratch of the sums cannot be allocated. */
#define TN 12
#define TM 256

static inline __attribute__((always_inline)) void tn_tile(float *c, int64_t ldc,
                                                          const float *a, int64_t lda,
                                                          const float *b, int64_t ldb,
                                                          int64_t r0, int64_t r1, int nr,
                                                          __mmask16 m0, __mmask16 m1) {
    __m512 c0[TN], c1[TN];
    for (int i = 0; i < nr; i++) {
        c0[i] = _mm512_maskz_loadu_ps(m0, c + i * ldc);
        c1[i] = _mm512_maskz_loadu_ps(m1, c + i * ldc + 16);
    }
    for (int64_t r = r0; r < r1; r++) {
        const float *ar = a + r * lda, *br = b + r * ldb;
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, br), b1 = _mm512_maskz_loadu_ps(m1, br + 16);
        for (int i = 0; i < nr; i++) {
            const __m512 av = _mm512_set1_ps(ar[i]);
            c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
        }
    }
    for (int i = 0; i < nr; i++) {
        _mm512_mask_storeu_ps(c + i * ldc, m0, c0[i]);
        _mm512_mask_storeu_ps(c + i * ldc + 16, m1, c1[i]);
    }
}

static void tn_tile_any(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
                        int64_t ldb, int64_t r0, int64_t r1, int nr, int kn) {
    const __mmask16 m0 = kn >= 16 ? 0xFFFF : (__mmask16)((1u << kn) - 1);
    const __mmask16 m1 = kn >= 32 ? 0xFFFF : kn <= 16 ? 0 : (__mmask16)((1u << (kn - 16)) - 1);
    switch (nr) {   /* constant row counts: the accumulators stay in registers */
#define CASE(R) case R: tn_tile(c, ldc, a, lda, b, ldb, r0, r1, R, m0, m1); break;
        CASE(12) CASE(11) CASE(10) CASE(9) CASE(8) CASE(7) CASE(6) CASE(5) CASE(4)
        CASE(3) CASE(2) CASE(1)
#undef CASE
    default: break;
    }
}

int ra_gemm_tn_avx512(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
                      int64_t ldb, int64_t m, int n, int k, int nthreads) {
    if (m <= 0 || n <= 0 || k <= 0) return 0;
    /* the sums start from 0 in a scratch and are added to c at the end, as
     * c += (a^T b) promises (and the same sums whatever c held) */
    float *s = calloc((size_t)n * k, sizeof *s);
    if (!s) return -1;
    const int tn = (n + TN - 1) / TN, tk = (k + 31) / 32;
    const int64_t tiles = (int64_t)tn * tk;
    int nt = nthreads < 1 ? 1 : nthreads;
    if (nt > tiles) nt = (int)tiles;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
#ifdef _OPENMP
        const int id = omp_get_thread_num(), cnt = omp_get_num_threads();
#else
        const int id = 0, cnt = 1;
#endif
        const int64_t t0 = tiles * id / cnt, t1 = tiles * (id + 1) / cnt;
        for (int64_t r0 = 0; r0 < m; r0 += TM) {
            const int64_t r1 = m - r0 < TM ? m : r0 + TM;
            for (int64_t t = t0; t < t1; t++) {
                const int i0 = (int)(t / tk) * TN, j0 = (int)(t % tk) * 32;
                const int nr = n - i0 < TN ? n - i0 : TN, kn = k - j0 < 32 ? k - j0 : 32;
                tn_tile_any(s + (int64_t)i0 * k + j0, k, a + i0, lda, b + j0, ldb, r0, r1, nr,
                            kn);
            }
        }
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < k; j++) c[i * ldc + j] += s[(int64_t)i * k + j];
    free(s);
    return 0;
}

/* ---- LayerNorm of one row on 8 double lanes ---------------------------------
 * nn_avx2.c's row (statistics in double, two passes; the affine map in
 * double, multiply then add, as the scalar loop), twice as wide. */
static inline double hsum8(__m512d v) { return _mm512_reduce_add_pd(v); }

void ra_nn_layernorm_row_avx512(float *y, float *mean, float *rstd, const float *x,
                                const float *gamma, const float *beta, int c, float eps) {
    int j;
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    double tail = 0;
    for (j = 0; j + 16 <= c; j += 16) {
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm256_loadu_ps(x + j)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_loadu_ps(x + j + 8)));
    }
    for (; j < c; j++) tail += x[j];
    const double mu = (hsum8(_mm512_add_pd(a0, a1)) + tail) / c;
    const __m512d vmu = _mm512_set1_pd(mu);
    a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd(), tail = 0;
    for (j = 0; j + 16 <= c; j += 16) {
        const __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + j)), vmu);
        const __m512d d1 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + j + 8)), vmu);
        a0 = _mm512_fmadd_pd(d0, d0, a0);
        a1 = _mm512_fmadd_pd(d1, d1, a1);
    }
    for (; j < c; j++) {
        const double d = x[j] - mu;
        tail += d * d;
    }
    const double ss = hsum8(_mm512_add_pd(a0, a1)) + tail;
    const double rs = 1.0 / sqrt(ss / c + (double)eps);
    if (mean) *mean = (float)mu;
    if (rstd) *rstd = (float)rs;
    const __m512d vrs = _mm512_set1_pd(rs);
    for (j = 0; j + 8 <= c; j += 8) {
        __m512d v = _mm512_mul_pd(_mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + j)), vmu), vrs);
        if (gamma) v = _mm512_mul_pd(v, _mm512_cvtps_pd(_mm256_loadu_ps(gamma + j)));
        if (beta) v = _mm512_add_pd(v, _mm512_cvtps_pd(_mm256_loadu_ps(beta + j)));
        _mm256_storeu_ps(y + j, _mm512_cvtpd_ps(v));
    }
    for (; j < c; j++) {
        double v = (x[j] - mu) * rs;
        if (gamma) v *= gamma[j];
        if (beta) v += beta[j];
        y[j] = (float)v;
    }
}
