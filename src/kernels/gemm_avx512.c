/* gemm_avx512.c - the Linear layers' products on AVX-512 CPUs, forward
 * and backward: y (M, N) = x (M, K) . w (N, K)^T, with the bias, GELU and
 * residual add applied to each output tile while it is still in registers
 * (the forward, and dX = dY . W of the backward), and the weight gradient
 * dW += dY^T X with the bias gradient in the same pass (rai_gemm_tn_avx512).
 * Compiled with -mavx512f -mfma; src/nn/nn.c calls it only when the CPU has
 * AVX-512F (OpenBLAS, whose kernels the environment may pin to AVX2, stays
 * the fallback).
 *
 * Blocking: w is packed per call, NR = 32 or 48 of its rows at a time
 * (whichever wastes fewer lanes on N's edge: 48 for the N = 48 and 144 of
 * a small Swin, where 32 wasted a quarter of the FMAs), into k-major panels
 * (each k: NR consecutive outputs), a block of panels of about 256 KB at a
 * time per thread, while the next block's rows of w are prefetched into L2
 * (or, when w fits in one block, the next row tile's rows of x). x is not
 * packed: the microkernel broadcasts x[i][k] from its rows directly. A tile
 * is up to MR = 12 rows by 32 columns or 8 rows by 48 columns, 24
 * accumulators over the whole of K (no K blocking: the epilogue sees
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
 *   gm      r = r * gm[i][j] (that backward: dX of fc2 times GELU')
 *   res     res[row'][j] = res[row'][j] + r instead of storing r into y,
 *           row' = map[i] (skipped when negative) or i: the window reverse
 *           and the residual add of a Swin block fused into its proj. */
#include "gemm_kernels.h"
#include "nn_kernels.h"     /* the float32 LayerNorm's fold */
#include "gelu_avx512.h"   /* GELU on 16 lanes (nn_avx2.c's erf8, widened) */
#include "base/arena.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MR 12

#define BLOCK_FLOATS ((int64_t)1 << 16)   /* packed w per block: 256 KB */

void rai_gemm_gelu_backward_avx512(float *dx, const float *dy, const float *x, int64_t n) {
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

static void gelu_tile(float *y, int64_t ld, int mr, int nv, const __mmask16 *mv);

void rai_gemm_gelu_keep_avx512(float *y, float *d, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i), e = erf_of16(v);
        _mm512_mask_storeu_ps(d + i, m, gelu_grad_erf16(v, e));
        _mm512_mask_storeu_ps(y + i, m, gelu_erf16(v, e));
    }
}

/* In blocks of up to MR x 48 values through gelu_tile (erf's exponential
 * branch only on the lanes that take it), the rest 16 lanes at a time:
 * each lane sees gelu16's operations either way. */
void rai_gemm_gelu_avx512(float *y, const float *x, int64_t n) {
    static const __mmask16 all[3] = {0xFFFF, 0xFFFF, 0xFFFF};
    enum { BLOCK = MR * 48 };
    int64_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        if (y != x) memcpy(y + i, x + i, BLOCK * sizeof *y);
        gelu_tile(y + i, 48, MR, 3, all);
    }
    const int rows = (int)((n - i) / 48);   /* fewer than MR rows of 48 (a 12 x 32 tile: 8) */
    if (rows > 0) {
        if (y != x) memcpy(y + i, x + i, (size_t)rows * 48 * sizeof *y);
        gelu_tile(y + i, 48, rows, 3, all);
        i += (int64_t)rows * 48;
    }
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* GELU of a tile of mr rows (ld apart) of nv vectors (lanes mv[v]) in
 * place. erf's polynomial branch runs on every lane and its
 * exponential branch only on the lanes that take it (|v| > 1.3), gathered
 * into full vectors (vcompressps, register form: the store form is
 * microcoded on Zen 4) and put back (vexpandps). Each lane sees erf16's
 * operations, so the bits are the same; what it saves grows with the share
 * of lanes that skip the branch (bench/results/2026-11-23_amd-epyc-zen4.md). */
static void gelu_tile(float *y, int64_t ld, int mr, int nv, const __mmask16 *mv) {
    float small[MR * 3][16] __attribute__((aligned(64)));
    float big[MR * 3 * 16 + 16] __attribute__((aligned(64)));
    __mmask16 bm[MR * 3];
    const __m512 rs2 = _mm512_set1_ps(0.70710678118654752440f);
    int nb = 0, t = 0;
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv && mv[v]; v++, t++) {
            const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mv[v], y + i * ld + 16 * v), rs2);
            const __m512 ax = abs16(x);
            bm[t] = erf_big_lanes(ax);
            _mm512_store_ps(small[t], erf_small16(x));
            _mm512_storeu_ps(big + nb, _mm512_maskz_compress_ps(bm[t], ax));
            nb += __builtin_popcount(bm[t]);
        }
    _mm512_storeu_ps(big + nb, _mm512_setzero_ps());   /* the last vector's tail */
    for (int j = 0; j < nb; j += 16) _mm512_store_ps(big + j, erf_big_abs16(_mm512_load_ps(big + j)));
    int pos = 0;
    t = 0;
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv && mv[v]; v++, t++) {
            float *d = y + i * ld + 16 * v;
            const __m512 r = _mm512_maskz_loadu_ps(mv[v], d);
            const __m512 x = _mm512_mul_ps(r, rs2);
            const __m512 b = _mm512_maskz_expand_ps(bm[t], _mm512_loadu_ps(big + pos));
            pos += __builtin_popcount(bm[t]);
            _mm512_mask_storeu_ps(d, mv[v],
                                  gelu_erf16(r, erf_join16(x, _mm512_load_ps(small[t]), b, bm[t])));
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

static void pack_panel(float *panel, const float *w, int64_t ldw, int jn, int k, int nr) {
    int j = 0;
    for (; j + 8 <= jn; j += 8) {
        const float *w0 = w + j * ldw;
        int p = 0;
        for (; p + 8 <= k; p += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(w0 + i * ldw + p);
            transpose8(r);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(panel + (int64_t)(p + i) * nr + j, r[i]);
        }
        for (; p < k; p++)
            for (int i = 0; i < 8; i++) panel[(int64_t)p * nr + j + i] = w0[i * ldw + p];
    }
    for (; j < jn; j++)
        for (int p = 0; p < k; p++) panel[(int64_t)p * nr + j] = w[j * ldw + p];
    if (jn < nr)
        for (int p = 0; p < k; p++)
            memset(panel + (int64_t)p * nr + jn, 0, (size_t)(nr - jn) * sizeof(float));
}

/* panel (K, nr) from w given transposed, (K, N; ldw): panel[k][jj] =
 * w[k][jj] for the jn <= nr columns given, zeros beyond. */
static inline __mmask16 lane_mask(int left) {
    return left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}

static void pack_panel_t(float *panel, const float *w, int64_t ldw, int jn, int k, int nr) {
    const int nv = nr / 16;
    for (int p = 0; p < k; p++) {
        const float *r = w + p * ldw;
        for (int v = 0; v < nv; v++)
            _mm512_store_ps(panel + (int64_t)p * nr + 16 * v,
                            _mm512_maskz_loadu_ps(lane_mask(jn - 16 * v), r + 16 * v));
    }
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
    int wt;              /* w given transposed, (K, N; ldw) */
    const float *gm;     /* multiply the sums by gm (ldy) */
    int nv, nr, mr;      /* panels of nv vectors (nr = 16 nv columns), tiles of
                            up to mr rows */
} gemm_args;

/* Rows i0 .. i0+mr-1 of the output against one packed panel of NV vectors
 * (columns j0 .. j0+jn-1, jn <= 16 NV). */
static inline __attribute__((always_inline)) void tile(const gemm_args *a, const int NV, int mr,
                                                       int64_t i0, const float *panel, int j0,
                                                       int jn, const char *pf, int64_t npf) {
    __m512 c[3][MR];
#pragma GCC unroll 3
    for (int v = 0; v < NV; v++)
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) c[v][i] = _mm512_setzero_ps();
    /* rows by threes: base pointers xq (rows 3q) advance with k, row 3q + r
     * is xq[r * ldx] (addressing base + ldx*4*r, r = 0, 1, 2) */
    const int64_t ld = a->ldx;
    const float *xq[MR / 3];
    for (int q = 0; q < (mr + 2) / 3; q++) xq[q] = a->x + (i0 + 3 * q) * ld;
    /* the tile's output lines, asked for with intent to write while the
     * sums form, a share before each chunk of k: stored into lines not in
     * cache (an output of tens of MB), a tile waited for each of them at
     * the epilogue (for K = 96 a large share of the time), and asked for
     * all at once the requests queued. For long K (above 512) the lines
     * would leave L1 before the epilogue and the stall is a smaller share:
     * not asked for there. */
    const float *outp[MR];
    const int olines = a->k <= 512 ? mr * NV : 0, nchunk = (a->k + 15) / 16;
    for (int i = 0; i < (olines ? mr : 0); i++) {
        const int64_t row = a->res ? (a->map ? a->map[i0 + i] : i0 + i) : i0 + i;
        outp[i] = row < 0 ? NULL
                  : a->res ? a->res + row * a->ldres + j0 : a->y + row * a->ldy + j0;
    }
    /* likewise the lines of gm the epilogue reads (written by a forward
     * long before: in memory, and waited for at the epilogue otherwise) */
    const int glines = a->gm ? mr * NV : 0;
    int oi = 0, gi = 0, ci = 0;
    const float *bp = panel;
    for (int p = a->k; p > 0;) {
        /* k in chunks of 16; before each, its share of the prefetches of
         * the next block of w or of the next rows of x (towards L2),
         * spread evenly over the FMAs */
        const int chunk = p < 16 ? p : 16;
        for (const int o1 = olines * ++ci / nchunk; oi < o1; oi++)
            if (outp[oi / NV]) __builtin_prefetch(outp[oi / NV] + 16 * (oi % NV), 1, 3);
        for (const int g1 = glines * ci / nchunk; gi < g1; gi++)
            __builtin_prefetch(a->gm + (i0 + gi / NV) * a->ldy + j0 + 16 * (gi % NV), 0, 3);
        if (npf > 0)
            for (int64_t share = (npf * chunk + p - 1) / p; share > 0; share--, npf--, pf += 64)
                _mm_prefetch(pf, _MM_HINT_T1);
        p -= chunk;
        for (int cc = chunk; cc > 0; cc--, bp += 16 * NV) {
            __m512 bv[3];
#pragma GCC unroll 3
            for (int v = 0; v < NV; v++) bv[v] = _mm512_load_ps(bp + 16 * v);
#pragma GCC unroll 12
            for (int i = 0; i < mr; i++) {
                const __m512 av = _mm512_set1_ps(xq[i / 3][(i % 3) * ld]);
#pragma GCC unroll 3
                for (int v = 0; v < NV; v++) c[v][i] = _mm512_fmadd_ps(av, bv[v], c[v][i]);
            }
            for (int q = 0; q < (mr + 2) / 3; q++) xq[q]++;
        }
    }
    /* epilogue */
    __mmask16 mv[3];
#pragma GCC unroll 3
    for (int v = 0; v < NV; v++) mv[v] = lane_mask(jn - 16 * v);
    if (a->bias)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++) {
            const __m512 bb = _mm512_maskz_loadu_ps(mv[v], a->bias + j0 + 16 * v);
            for (int i = 0; i < mr; i++) c[v][i] = _mm512_add_ps(c[v][i], bb);
        }
    if (a->gelu && !a->res && !a->gm) {
        /* GELU from the stored tile, while it is in L1: on the accumulators
         * (24 registers live) the long chains of erf and exp spilled and
         * did not overlap */
        for (int i = 0; i < mr; i++) {
            float *d = a->y + (i0 + i) * a->ldy + j0;
#pragma GCC unroll 3
            for (int v = 0; v < NV; v++)
                if (mv[v]) _mm512_mask_storeu_ps(d + 16 * v, mv[v], c[v][i]);
        }
        gelu_tile(a->y + i0 * a->ldy + j0, a->ldy, mr, NV, mv);
        return;
    }
    if (a->gelu)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++)
            if (mv[v])
                for (int i = 0; i < mr; i++) c[v][i] = gelu16(c[v][i]);
    if (a->gm)
        for (int i = 0; i < mr; i++) {
            const float *h = a->gm + (i0 + i) * a->ldy + j0;
#pragma GCC unroll 3
            for (int v = 0; v < NV; v++)
                if (mv[v])
                    c[v][i] = _mm512_mul_ps(c[v][i], _mm512_maskz_loadu_ps(mv[v], h + 16 * v));
        }
    if (a->res) {
        for (int i = 0; i < mr; i++) {
            const int64_t row = a->map ? a->map[i0 + i] : i0 + i;
            if (row < 0) continue;
            float *d = a->res + row * a->ldres + j0;
#pragma GCC unroll 3
            for (int v = 0; v < NV; v++)
                if (mv[v])
                    _mm512_mask_storeu_ps(d + 16 * v, mv[v],
                                          _mm512_add_ps(_mm512_maskz_loadu_ps(mv[v], d + 16 * v),
                                                        c[v][i]));
        }
    } else {
        for (int i = 0; i < mr; i++) {
            float *d = a->y + (i0 + i) * a->ldy + j0;
#pragma GCC unroll 3
            for (int v = 0; v < NV; v++)
                if (mv[v]) _mm512_mask_storeu_ps(d + 16 * v, mv[v], c[v][i]);
        }
    }
}

/* A tile of NV = 2 (up to 12 rows) or NV = 3 vectors (up to 8 rows). */
static void tile_any(const gemm_args *a, int nv, int mr, int64_t i0, const float *panel, int j0,
                     int jn, const char *pf, int64_t npf) {
    if (nv == 3) {
        switch (mr) {
#define CASE(r) case r: tile(a, 3, r, i0, panel, j0, jn, pf, npf); break;
            CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
#undef CASE
        default: break;
        }
        return;
    }
    switch (mr) {
#define CASE(r) case r: tile(a, 2, r, i0, panel, j0, jn, pf, npf); break;
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6)
        CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)
#undef CASE
    default: break;
    }
}

/* The packed block of w: the calling thread's buffer (base/arena.h). */
static float *pack_space(size_t floats) {
    return rai_thread_buffer(RAI_BUFFER_GEMM512_PACK, floats * sizeof(float));
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
    const int NRv = a->nr;
    float *buf = pack_space((size_t)per * k * NRv);
    if (!buf) return -1;
    for (int jb = p0; jb < p1; jb += per) {
        const int np = p1 - jb < per ? p1 - jb : per;
        for (int p = 0; p < np; p++) {
            const int j0 = (jb + p) * NRv;
            if (a->wt)
                pack_panel_t(buf + (int64_t)p * k * NRv, a->w + j0, a->ldw,
                             a->n - j0 < NRv ? a->n - j0 : NRv, k, NRv);
            else
                pack_panel(buf + (int64_t)p * k * NRv, a->w + j0 * a->ldw, a->ldw,
                           a->n - j0 < NRv ? a->n - j0 : NRv, k, NRv);
        }
        /* the next block's rows of w: contiguous when ldw == k */
        const char *pf = NULL;
        int64_t lines = 0;
        if (jb + np < p1 && a->ldw == k && !a->wt) {
            const int64_t r0 = (int64_t)(jb + np) * NRv;
            int64_t r1 = (int64_t)(jb + np + (p1 - jb - np < per ? p1 - jb - np : per)) * NRv;
            if (r1 > a->n) r1 = a->n;
            pf = (const char *)(a->w + r0 * k);
            lines = ((r1 - r0) * k * (int64_t)sizeof(float) + 63) / 64;
        }
        const int64_t calls = (t1 - t0) * np;
        int64_t c = 0;
        int64_t i0 = tile_row(t0, a->m, mt);
        for (int64_t t = t0; t < t1; t++) {
            const int64_t i1 = tile_row(t + 1, a->m, mt);
            const int mr = (int)(i1 - i0);
            /* without a next block of w: the next row tile's rows of x
             * (contiguous), a share before each panel's call */
            const char *px = NULL;
            int64_t xl = 0;
            if (!pf && t + 1 < t1) {
                const int64_t i2 = tile_row(t + 2, a->m, mt);
                px = (const char *)(a->x + i1 * a->ldx);
                xl = (((i2 - i1 - 1) * a->ldx + k) * (int64_t)sizeof(float) + 63) / 64;
            }
            for (int p = 0; p < np; p++, c++) {
                const int j0 = (jb + p) * NRv;
                const int jn = a->n - j0 < NRv ? a->n - j0 : NRv;
                const int64_t l0 = pf ? lines * c / calls : xl * p / np;
                const int64_t l1 = pf ? lines * (c + 1) / calls : xl * (p + 1) / np;
                const char *pp = pf ? pf + l0 * 64 : px ? px + l0 * 64 : NULL;
                const float *pan = buf + (int64_t)p * k * NRv;
                if (a->nv == 2 && mr == 12) tile(a, 2, 12, i0, pan, j0, jn, pp, l1 - l0);
                else if (a->nv == 3 && mr == 8) tile(a, 3, 8, i0, pan, j0, jn, pp, l1 - l0);
                else tile_any(a, a->nv, mr, i0, pan, j0, jn, pp, l1 - l0);
            }
            i0 = i1;
        }
    }
    return 0;
}

int rai_gemm_avx512(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                    int64_t ldw, int64_t m, int n, int k, const float *bias, int gelu,
                    float *res, int64_t ldres, const int32_t *map, int nthreads) {
    return rai_gemm_avx512_ext(y, ldy, x, ldx, w, ldw, 0, m, n, k, bias, gelu, NULL, res, ldres,
                               map, nthreads);
}

int rai_gemm_avx512_ext(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                        int64_t ldw, int wt, int64_t m, int n, int k, const float *bias, int gelu,
                        const float *gm, float *res, int64_t ldres, const int32_t *map,
                        int nthreads) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0) return -1;   /* the caller's path handles it */
    /* panels of 32 or 48 columns, whichever wastes fewer lanes (48 on a
     * tie: 11 loads per 24 FMAs instead of 14); every output is the same
     * chain of FMAs over k either way */
    const int nv = ((n + 47) / 48 * 48 <= (n + 31) / 32 * 32) ? 3 : 2;
    const int NRv = 16 * nv, MRv = nv == 3 ? 8 : 12;
    const int npan = (n + NRv - 1) / NRv;
    int64_t per = BLOCK_FLOATS / ((int64_t)k * NRv);
    if (per < 1) per = 1;
    if (per > npan) per = npan;
    const gemm_args a = {.y = y, .ldy = ldy, .x = x, .ldx = ldx, .w = w, .ldw = ldw, .m = m,
                         .n = n, .k = k, .bias = bias, .gelu = gelu, .res = res,
                         .ldres = ldres, .map = map, .wt = wt,
                         .gm = gm, .nv = nv, .nr = NRv, .mr = MRv};
    const int64_t mt = (m + MRv - 1) / MRv;
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

/* ---- the weight gradient: c += a^T . b, db += column sums of a ------------
 * c (N, K) += a (M, N)^T . b (M, K), a Linear layer's dW += dY^T X, read row
 * by row from both operands: for each row r of a block, a tile of c (NRT
 * rows n by TV vectors of 16 columns k) takes the outer product of
 * a[r][n..n+NRT) (broadcast) and b[r][k..k+16 TV) (TV vectors): TV = 3,
 * NRT = 8 (24 accumulators, 11 loads per 24 FMAs) unless another shape
 * wastes fewer lanes on the edges of K and N. Rows go in blocks of TM: the
 * block's b columns of a tile stay in L1 while the row tiles of c walk them,
 * and the tile's sums go back to a per-thread scratch between blocks. Each
 * element of c is one chain of FMAs over r = 0, 1, ..., M-1 in order,
 * starting from 0, added to c at the end: the same bits whatever the blocks
 * and threads. db (N) += the column sums of a, in double over the rows in
 * order (nn.c's colsum_add, the same bits), from each block while it is in
 * cache. Threads own ranges of c's rows (and of db): no reduction, no
 * waiting. Scratch: per-thread buffers kept between calls (no allocation
 * once they have grown). */
#define TM 128

typedef struct tn_args {
    float *c;
    int64_t ldc;
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
    int64_t m;
    int n, k;
    float *db;
    int kv, nrt;               /* tile shape: TV vectors of columns, NRT rows */
    int ti, tj;                /* tiles along n and k */
} tn_args;

/* acc += sum over rows r of a[r][i] * b[r][16 v ..] (tn_micro's loop);
 * mv NULL: every vector whole, else loaded through mv[v]. */
static inline __attribute__((always_inline)) void tn_rows(__m512 acc[24], const float *restrict a,
                                                          int64_t lda, const float *restrict b,
                                                          int64_t ldb, int64_t rows, const int TR,
                                                          const int TV, const __mmask16 *mv) {
    for (int64_t r = 0; r < rows; r++, a += lda, b += ldb) {
        __m512 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < TV; v++)
            bv[v] = mv ? _mm512_maskz_loadu_ps(mv[v], b + 16 * v) : _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 24
        for (int i = 0; i < TR; i++) {
            const __m512 av = _mm512_set1_ps(a[i]);
#pragma GCC unroll 4
            for (int v = 0; v < TV; v++) acc[i * TV + v] = _mm512_fmadd_ps(av, bv[v], acc[i * TV + v]);
        }
    }
}

/* rows r0..r1-1 into the tile sums s ([TR][16 TV], aligned): s = (first ?
 * 0 : s) + sum_r a[r][i] b[r][j..]; nr <= TR rows valid, cols <= 16 TV
 * columns (the vectors' lanes beyond them masked: never read). */
static inline __attribute__((always_inline)) void tn_micro(float *restrict s,
                                                           const float *restrict a, int64_t lda,
                                                           const float *restrict b, int64_t ldb,
                                                           int64_t rows, const int TR,
                                                           const int TV, int cols,
                                                           int first) {
    __m512 acc[24];
    __mmask16 mv[4];
#pragma GCC unroll 4
    for (int v = 0; v < TV; v++) {
        const int lv = cols - 16 * v;
        mv[v] = lv >= 16 ? 0xFFFF : lv <= 0 ? 0 : (__mmask16)((1u << lv) - 1);
    }
    if (first)
#pragma GCC unroll 24
        for (int i = 0; i < TR * TV; i++) acc[i] = _mm512_setzero_ps();
    else
#pragma GCC unroll 24
        for (int i = 0; i < TR * TV; i++) acc[i] = _mm512_load_ps(s + 16 * i);
    /* full tiles load b whole: masked loads made GCC move the masks into
     * mask registers at every row, on the port of one of the FMA units */
    if (cols >= 16 * TV)
        tn_rows(acc, a, lda, b, ldb, rows, TR, TV, NULL);
    else
        tn_rows(acc, a, lda, b, ldb, rows, TR, TV, mv);
#pragma GCC unroll 24
    for (int i = 0; i < TR * TV; i++) _mm512_store_ps(s + 16 * i, acc[i]);
}

typedef void (*tn_fn)(float *, const float *, int64_t, const float *, int64_t, int64_t, int,
                      int);
#define TN_FN(R, V)                                                                      \
    static void tn_##R##_##V(float *s, const float *a, int64_t lda, const float *b,     \
                             int64_t ldb, int64_t rows, int cols, int first) {           \
        tn_micro(s, a, lda, b, ldb, rows, R, V, cols, first);                           \
    }
TN_FN(1, 3) TN_FN(2, 3) TN_FN(3, 3) TN_FN(4, 3) TN_FN(5, 3) TN_FN(6, 3) TN_FN(7, 3) TN_FN(8, 3)
TN_FN(1, 2) TN_FN(2, 2) TN_FN(3, 2) TN_FN(4, 2) TN_FN(5, 2) TN_FN(6, 2) TN_FN(7, 2) TN_FN(8, 2)
TN_FN(9, 2) TN_FN(10, 2) TN_FN(11, 2) TN_FN(12, 2)
TN_FN(1, 1) TN_FN(2, 1) TN_FN(3, 1) TN_FN(4, 1) TN_FN(5, 1) TN_FN(6, 1) TN_FN(7, 1) TN_FN(8, 1)
TN_FN(9, 1) TN_FN(10, 1) TN_FN(11, 1) TN_FN(12, 1) TN_FN(13, 1) TN_FN(14, 1) TN_FN(15, 1)
TN_FN(16, 1) TN_FN(17, 1) TN_FN(18, 1) TN_FN(19, 1) TN_FN(20, 1) TN_FN(21, 1) TN_FN(22, 1)
TN_FN(23, 1) TN_FN(24, 1)
#undef TN_FN
static const tn_fn tn_v3[8] = {tn_1_3, tn_2_3, tn_3_3, tn_4_3, tn_5_3, tn_6_3, tn_7_3, tn_8_3};
static const tn_fn tn_v2[12] = {tn_1_2, tn_2_2, tn_3_2, tn_4_2, tn_5_2,  tn_6_2,
                                tn_7_2, tn_8_2, tn_9_2, tn_10_2, tn_11_2, tn_12_2};
static const tn_fn tn_v1[24] = {tn_1_1,  tn_2_1,  tn_3_1,  tn_4_1,  tn_5_1,  tn_6_1,
                                tn_7_1,  tn_8_1,  tn_9_1,  tn_10_1, tn_11_1, tn_12_1,
                                tn_13_1, tn_14_1, tn_15_1, tn_16_1, tn_17_1, tn_18_1,
                                tn_19_1, tn_20_1, tn_21_1, tn_22_1, tn_23_1, tn_24_1};

/* The per-thread scratch of the tile sums (aligned) and of db's double
 * sums: the calling thread's buffer (base/arena.h). */
static void *tn_space(size_t bytes) { return rai_thread_buffer(RAI_BUFFER_GEMM512_TN, bytes); }

/* db's sums over rows r0..r1 of columns [j0, j1) of a, into dsum (double,
 * one per column): 64 columns at a time in registers, rows in order. */
static void tn_colsum(double *dsum, const float *a, int64_t lda, int64_t r0, int64_t r1, int j0,
                      int j1) {
    for (int j = j0; j < j1; j += 64) {
        const int w = j1 - j < 64 ? j1 - j : 64, nv = (w + 7) / 8;
        __m512d acc[8];
        for (int v = 0; v < nv; v++) acc[v] = _mm512_loadu_pd(dsum + (j - j0) + 8 * v);
        const __mmask8 ml = (__mmask8)((1u << (w - 8 * (nv - 1))) - 1);
        for (int64_t r = r0; r < r1; r++) {
            const float *ar = a + r * lda + j;
            for (int v = 0; v < nv; v++) {
                const __m256 x =
                    v == nv - 1 ? _mm512_castps512_ps256(_mm512_maskz_loadu_ps(ml, ar + 8 * v))
                                : _mm256_loadu_ps(ar + 8 * v);
                acc[v] = _mm512_add_pd(acc[v], _mm512_cvtps_pd(x));
            }
        }
        for (int v = 0; v < nv; v++) {
            if (v == nv - 1) _mm512_mask_storeu_pd(dsum + (j - j0) + 8 * v, ml, acc[v]);
            else _mm512_storeu_pd(dsum + (j - j0) + 8 * v, acc[v]);
        }
    }
}

/* Bytes of one thread's scratch for row tiles [t0, t1). */
static size_t tn_bytes(const tn_args *g, int t0, int t1) {
    const int j0c = t0 * g->nrt, j1c = t1 * g->nrt < g->n ? t1 * g->nrt : g->n;
    return (size_t)(t1 - t0) * g->tj * g->nrt * g->kv * 16 * sizeof(float) +
           (g->db ? (size_t)(j1c - j0c + 8) * sizeof(double) : 0);
}

/* One thread: row tiles [t0, t1) of c (all of its column tiles), db's
 * columns of those rows; sums: tn_bytes of scratch. */
static void tn_part(const tn_args *g, int t0, int t1, float *sums) {
    if (t0 >= t1) return;
    const int TR = g->nrt, TV = g->kv, tj = g->tj, ts = TR * TV * 16;
    const int j0c = t0 * TR, j1c = t1 * TR < g->n ? t1 * TR : g->n;   /* db's columns */
    const size_t tiles = (size_t)(t1 - t0) * tj;
    double *dsum = (double *)(sums + tiles * ts);
    if (g->db) memset(dsum, 0, (size_t)(j1c - j0c) * sizeof *dsum);
    const tn_fn *tab = TV == 3 ? tn_v3 : TV == 2 ? tn_v2 : tn_v1;
    const int last = g->k - (tj - 1) * 16 * TV;            /* columns of the last tile */
    /* the bytes of a row of a and of b this thread reads */
    const int64_t abytes = (int64_t)(j1c - j0c) * (int64_t)sizeof(float);
    const int64_t bbytes = (int64_t)g->k * (int64_t)sizeof(float);
    const int64_t calls = (int64_t)tj * (t1 - t0);
    /* short rows (a few lines each) the hardware prefetcher follows alone */
    const int pref = abytes + bbytes > 512;
    for (int64_t r0 = 0; r0 < g->m; r0 += TM) {
        const int64_t rows = g->m - r0 < TM ? g->m - r0 : TM;
        /* the next block's rows, prefetched a share before each call: the
         * hardware prefetcher does not follow a's strided slices in time */
        const int64_t nx = !pref ? 0 : g->m - r0 - rows < TM ? g->m - r0 - rows : TM;
        int64_t c = 0;
        for (int j = 0; j < tj; j++) {
            const int cols = j == tj - 1 ? last : 16 * TV;
            const float *bb = g->b + r0 * g->ldb + j * 16 * TV;
            for (int t = t0; t < t1; t++, c++) {
                for (int64_t r = r0 + rows + nx * c / calls; r < r0 + rows + nx * (c + 1) / calls;
                     r++) {
                    const char *pa = (const char *)(g->a + r * g->lda + j0c);
                    const char *pb = (const char *)(g->b + r * g->ldb);
                    for (int64_t o = 0; o < abytes + 63; o += 64)
                        _mm_prefetch(pa + (o < abytes ? o : abytes - 1), _MM_HINT_T0);
                    for (int64_t o = 0; o < bbytes + 63; o += 64)
                        _mm_prefetch(pb + (o < bbytes ? o : bbytes - 1), _MM_HINT_T0);
                }
                const int i0 = t * TR, nr = g->n - i0 < TR ? g->n - i0 : TR;
                tab[nr - 1](sums + ((size_t)(t - t0) * tj + j) * ts, g->a + r0 * g->lda + i0,
                            g->lda, bb, g->ldb, rows, cols, r0 == 0);
            }
        }
        if (g->db) tn_colsum(dsum, g->a, g->lda, r0, r0 + rows, j0c, j1c);
    }
    /* c += the sums; db += its sums */
    for (int t = t0; t < t1; t++) {
        const int i0 = t * TR, nr = g->n - i0 < TR ? g->n - i0 : TR;
        for (int j = 0; j < tj; j++) {
            const float *sv = sums + ((size_t)(t - t0) * tj + j) * ts;
            const int c0 = j * 16 * TV, cols = g->k - c0 < 16 * TV ? g->k - c0 : 16 * TV;
            for (int i = 0; i < nr; i++) {
                float *cr = g->c + (int64_t)(i0 + i) * g->ldc + c0;
                for (int v = 0; v * 16 < cols; v++) {
                    const int lv = cols - 16 * v;
                    const __mmask16 ml = lv >= 16 ? 0xFFFF : (__mmask16)((1u << lv) - 1);
                    const __m512 x = _mm512_maskz_loadu_ps(ml, cr + 16 * v);
                    _mm512_mask_storeu_ps(cr + 16 * v, ml,
                                          _mm512_add_ps(x, _mm512_load_ps(sv + (i * TV + v) * 16)));
                }
            }
        }
    }
    if (g->db)
        for (int j = j0c; j < j1c; j++) g->db[j] = (float)((double)g->db[j] + dsum[j - j0c]);
}

int rai_gemm_tn_avx512(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
                       int64_t ldb, int64_t m, int n, int k, float *db, int nthreads) {
    if (m <= 0 || n <= 0 || k <= 0) return 0;
    /* the tile shape wasting the fewest lanes on the edges; ties to wider */
    static const int kvs[3] = {3, 2, 1}, nrs[3] = {8, 12, 24};
    int best = 0;
    double eff = -1;
    for (int s = 0; s < 3; s++) {
        const int64_t w = 16 * kvs[s], kp = (k + w - 1) / w * w;
        const int64_t np = ((int64_t)n + nrs[s] - 1) / nrs[s] * nrs[s];
        const double e = (double)n * k / ((double)np * kp) * (s == 2 ? 0.9 : 1.0);
        if (e > eff + 1e-9) eff = e, best = s;
    }
    tn_args g = {.c = c, .ldc = ldc, .a = a, .lda = lda, .b = b, .ldb = ldb, .m = m, .n = n,
                 .k = k, .db = db, .kv = kvs[best], .nrt = nrs[best]};
    g.ti = (n + g.nrt - 1) / g.nrt, g.tj = (k + 16 * g.kv - 1) / (16 * g.kv);
    int nt = nthreads < 1 ? 1 : nthreads;
    if (nt > g.ti) nt = g.ti;
    int fail = 0;   /* any thread without scratch: nobody starts */
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1) shared(fail)
#endif
    {
#ifdef _OPENMP
        const int id = omp_get_thread_num(), cnt = omp_get_num_threads();
#else
        const int id = 0, cnt = 1;
#endif
        const int t0 = (int)((int64_t)g.ti * id / cnt), t1 = (int)((int64_t)g.ti * (id + 1) / cnt);
        float *sums = tn_space(tn_bytes(&g, t0, t1));
        if (!sums) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
            fail = 1;
        }
#ifdef _OPENMP
#pragma omp barrier
#endif
        int stop;
#ifdef _OPENMP
#pragma omp atomic read
#endif
        stop = fail;
        if (!stop) tn_part(&g, t0, t1, sums);
    }
    return fail ? -1 : 0;
}

/* ---- LayerNorm of one row on 8 double lanes ---------------------------------
 * nn_avx2.c's row (statistics in double, two passes; the affine map in
 * double, multiply then add, as the scalar loop), twice as wide. */
static inline double hsum8(__m512d v) { return _mm512_reduce_add_pd(v); }

/* LayerNorm of R rows at once, each row the same operations in the same
 * order whatever R (so the same bits): the mean and the sum of squared
 * deviations in double over two 8-lane accumulators (even and odd groups of
 * 16 floats) plus a scalar tail, then y = (x - mu) rstd gamma + beta in
 * double. Four rows at a time, gamma and beta are converted once per four
 * rows (where a row's time went: the rows' overlap alone gained nothing),
 * and the rows' chains of dependent sums, divides and square roots
 * overlap. */
static inline __attribute__((always_inline)) void ln_rows(
    const int R, float *const y[], float *const mean[], float *const rstd[],
    const float *const x[], const float *gamma, const float *beta, int c, float eps) {
    int j;
    __m512d a0[4], a1[4], vmu[4], vrs[4];
    double tail[4];
    for (int r = 0; r < R; r++) a0[r] = a1[r] = _mm512_setzero_pd(), tail[r] = 0;
    for (j = 0; j + 16 <= c; j += 16)
        for (int r = 0; r < R; r++) {
            a0[r] = _mm512_add_pd(a0[r], _mm512_cvtps_pd(_mm256_loadu_ps(x[r] + j)));
            a1[r] = _mm512_add_pd(a1[r], _mm512_cvtps_pd(_mm256_loadu_ps(x[r] + j + 8)));
        }
    for (int r = 0; r < R; r++) {
        for (int t = j; t < c; t++) tail[r] += x[r][t];
        vmu[r] = _mm512_set1_pd((hsum8(_mm512_add_pd(a0[r], a1[r])) + tail[r]) / c);
        a0[r] = a1[r] = _mm512_setzero_pd(), tail[r] = 0;
    }
    for (j = 0; j + 16 <= c; j += 16)
        for (int r = 0; r < R; r++) {
            const __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x[r] + j)), vmu[r]);
            const __m512d d1 =
                _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x[r] + j + 8)), vmu[r]);
            a0[r] = _mm512_fmadd_pd(d0, d0, a0[r]);
            a1[r] = _mm512_fmadd_pd(d1, d1, a1[r]);
        }
    for (int r = 0; r < R; r++) {
        const double mu = _mm512_cvtsd_f64(vmu[r]);
        for (int t = j; t < c; t++) {
            const double d = x[r][t] - mu;
            tail[r] += d * d;
        }
        const double ss = hsum8(_mm512_add_pd(a0[r], a1[r])) + tail[r];
        const double rs = 1.0 / sqrt(ss / c + (double)eps);
        if (mean[r]) *mean[r] = (float)mu;
        if (rstd[r]) *rstd[r] = (float)rs;
        vrs[r] = _mm512_set1_pd(rs);
    }
    for (j = 0; j + 8 <= c; j += 8) {
        /* gamma and beta once for the R rows */
        const __m512d g = gamma ? _mm512_cvtps_pd(_mm256_loadu_ps(gamma + j)) : _mm512_setzero_pd();
        const __m512d b = beta ? _mm512_cvtps_pd(_mm256_loadu_ps(beta + j)) : _mm512_setzero_pd();
        for (int r = 0; r < R; r++) {
            __m512d v = _mm512_mul_pd(
                _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x[r] + j)), vmu[r]), vrs[r]);
            if (gamma) v = _mm512_mul_pd(v, g);
            if (beta) v = _mm512_add_pd(v, b);
            _mm256_storeu_ps(y[r] + j, _mm512_cvtpd_ps(v));
        }
    }
    for (int r = 0; r < R; r++) {
        const double mu = _mm512_cvtsd_f64(vmu[r]), rs = _mm512_cvtsd_f64(vrs[r]);
        for (int t = j; t < c; t++) {
            double v = (x[r][t] - mu) * rs;
            if (gamma) v *= gamma[t];
            if (beta) v += beta[t];
            y[r][t] = (float)v;
        }
    }
}

void rai_nn_layernorm_row_avx512(float *y, float *mean, float *rstd, const float *x,
                                 const float *gamma, const float *beta, int c, float eps) {
    ln_rows(1, &y, &mean, &rstd, &x, gamma, beta, c, eps);
}

void rai_nn_layernorm_rows4_avx512(float *const y[4], float *const mean[4], float *const rstd[4],
                                   const float *const x[4], const float *gamma, const float *beta,
                                   int c, float eps) {
    ln_rows(4, y, mean, rstd, x, gamma, beta, c, eps);
}

/* rai_nn_layernorm_row_f32_ref on 16 lanes (the lanes are its lanes), the
 * last partial block's lanes in scalars; the same bits. */
void rai_nn_layernorm_row_f32_avx512(float *y, const float *x, const float *gamma,
                                     const float *beta, int c, float eps) {
    float s[16], q[16];
    __m512 a = _mm512_setzero_ps();
    int j = 0;
    for (; j + 16 <= c; j += 16) a = _mm512_add_ps(a, _mm512_loadu_ps(x + j));
    _mm512_storeu_ps(s, a);
    for (int t = j; t < c; t++) s[t - j] += x[t];
    const float mu = rai_ln_f32_fold(s) / (float)c;
    const __m512 vm = _mm512_set1_ps(mu);
    a = _mm512_setzero_ps();
    for (j = 0; j + 16 <= c; j += 16) {
        const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + j), vm);
        a = _mm512_fmadd_ps(d, d, a);
    }
    _mm512_storeu_ps(q, a);
    for (int t = j; t < c; t++) {
        const float d = x[t] - mu;
        q[t - j] = fmaf(d, d, q[t - j]);
    }
    const float rs = 1.0f / sqrtf(rai_ln_f32_fold(q) / (float)c + eps);
    const __m512 vr = _mm512_set1_ps(rs);
    for (j = 0; j < c; j += 16) {
        const __mmask16 m = c - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (c - j)) - 1);
        __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), vm), vr);
        if (gamma) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, gamma + j));
        if (beta) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, beta + j));
        _mm512_mask_storeu_ps(y + j, m, v);
    }
}

/* ---- LayerNorm backward of a block of rows on 8 double lanes ---------------
 * nn.c's scalar backward, per row: g = dy gamma, xhat = (x - mu) rstd, the
 * row means of g and g xhat, dx += rstd (g - mean(g) - xhat mean(g xhat)),
 * all in double with separate multiplies and adds as the scalar loop (only
 * the order of the two row sums differs); and the block's column sums
 * pg += dy xhat, pb += dy, rows in order (the caller adds the blocks'
 * sums in block order). */
#define LN_AHEAD 4   /* rows of the LayerNorm backward prefetched ahead */

void rai_nn_layernorm_backward_rows_avx512(float *dx, double *pg, double *pb, const float *dy,
                                           const float *x, const float *mean, const float *rstd,
                                           const float *gamma, int64_t rows, int c) {
    const int nv = (c + 7) / 8;
    const __mmask8 ml = (__mmask8)((1u << (c - 8 * (nv - 1))) - 1);
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * c, *gr = dy + i * c;
        /* x was saved by the forward long before and comes from memory:
         * its rows (and dy's, dx's) are asked for LN_AHEAD rows ahead */
        if (i + LN_AHEAD < rows)
            for (int l = 0; l < c; l += 16) {
                __builtin_prefetch(xr + LN_AHEAD * c + l, 0, 3);
                __builtin_prefetch(gr + LN_AHEAD * c + l, 0, 3);
                if (dx) __builtin_prefetch(dx + (i + LN_AHEAD) * c + l, 1, 3);
            }
        const __m512d mu = _mm512_set1_pd((double)mean[i]), rs = _mm512_set1_pd((double)rstd[i]);
        __m512d sg = _mm512_setzero_pd(), sgx = _mm512_setzero_pd();
        for (int v = 0; v < nv; v++) {
            const __mmask8 m = v == nv - 1 ? ml : 0xFF;
            const __m512d xv = _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(m, xr + 8 * v)));
            const __m512d gv = _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(m, gr + 8 * v)));
            const __m512d xh = _mm512_mul_pd(_mm512_sub_pd(xv, mu), rs);
            const __m512d g = gamma ? _mm512_mul_pd(gv, _mm512_cvtps_pd(_mm512_castps512_ps256(
                                                            _mm512_maskz_loadu_ps(m, gamma + 8 * v))))
                                    : gv;
            sg = _mm512_add_pd(sg, g);
            sgx = _mm512_add_pd(sgx, _mm512_mul_pd(g, xh));   /* masked lanes: 0 */
            /* the column sums carry from row to row through memory: whole
             * vectors go unmasked, which the store forwards to the next
             * row's load */
            if (pg) {
                double *p = pg + 8 * v;
                const __m512d a = _mm512_mul_pd(gv, xh);
                if (m == 0xFF) _mm512_storeu_pd(p, _mm512_add_pd(_mm512_loadu_pd(p), a));
                else _mm512_mask_storeu_pd(p, m, _mm512_add_pd(_mm512_maskz_loadu_pd(m, p), a));
            }
            if (pb) {
                double *p = pb + 8 * v;
                if (m == 0xFF) _mm512_storeu_pd(p, _mm512_add_pd(_mm512_loadu_pd(p), gv));
                else _mm512_mask_storeu_pd(p, m, _mm512_add_pd(_mm512_maskz_loadu_pd(m, p), gv));
            }
        }
        if (!dx) continue;
        const __m512d mg = _mm512_set1_pd(_mm512_reduce_add_pd(sg) / c);
        const __m512d mgx = _mm512_set1_pd(_mm512_reduce_add_pd(sgx) / c);
        float *dr = dx + i * c;
        for (int v = 0; v < nv; v++) {
            const __mmask8 m = v == nv - 1 ? ml : 0xFF;
            const __mmask16 m16 = m;
            const __m512d xv = _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(m16, xr + 8 * v)));
            const __m512d gv = _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(m16, gr + 8 * v)));
            const __m512d xh = _mm512_mul_pd(_mm512_sub_pd(xv, mu), rs);
            const __m512d g = gamma ? _mm512_mul_pd(gv, _mm512_cvtps_pd(_mm512_castps512_ps256(
                                                            _mm512_maskz_loadu_ps(m16, gamma + 8 * v))))
                                    : gv;
            const __m512d t = _mm512_mul_pd(rs, _mm512_sub_pd(_mm512_sub_pd(g, mg),
                                                               _mm512_mul_pd(xh, mgx)));
            /* dx in 8-float halves: loaded and stored as ymm when whole. A
             * masked zmm store of 8 lanes still claims 64 bytes, and the
             * next half's load, overlapping it, waited for the store to
             * leave the buffer */
            if (m == 0xFF) {
                const __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(dr + 8 * v));
                _mm256_storeu_ps(dr + 8 * v, _mm512_cvtpd_ps(_mm512_add_pd(d, t)));
            } else {
                const __m512d d = _mm512_cvtps_pd(
                    _mm512_castps512_ps256(_mm512_maskz_loadu_ps(m16, dr + 8 * v)));
                const __m256 r = _mm512_cvtpd_ps(_mm512_add_pd(d, t));
                _mm512_mask_storeu_ps(dr + 8 * v, m16, _mm512_castps256_ps512(r));
            }
        }
    }
}

/* ---- AdamW: rai_nn_adamw_ref on 16 lanes (IEEE's sqrt and division: the
 * same bits) -------------------------------------------------------------- */

void rai_nn_adamw_avx512(float *param, float *m, float *v, const float *grad, int64_t n,
                         const rai_adamw_factors *a) {
    const __m512 keep = _mm512_set1_ps(a->keep), b1 = _mm512_set1_ps(a->b1);
    const __m512 a1 = _mm512_set1_ps(a->a1), b2 = _mm512_set1_ps(a->b2);
    const __m512 a2 = _mm512_set1_ps(a->a2), ns = _mm512_set1_ps(a->neg_step);
    const __m512 bc = _mm512_set1_ps(a->bc2_sqrt), eps = _mm512_set1_ps(a->eps);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 g = _mm512_maskz_loadu_ps(k, grad + i);
        const __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, param + i), keep);
        const __m512 mi = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, m + i), b1),
                                        _mm512_mul_ps(a1, g));
        const __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, v + i), b2),
                                        _mm512_mul_ps(_mm512_mul_ps(a2, g), g));
        const __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc), eps);
        _mm512_mask_storeu_ps(m + i, k, mi);
        _mm512_mask_storeu_ps(v + i, k, vi);
        _mm512_mask_storeu_ps(param + i, k, _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(ns, mi), den)));
    }
}
