/* gemm_bf16.c - the products of precision bf16 on bfloat16 dot products
 * (gemm_kernels.h): a Linear's y = x . w^T + bias with its weights rounded
 * to bfloat16 and packed once (inference) or at the call (training: the
 * weights change every step; w read transposed for dX = dY W), its input
 * rounded as it is packed, float32 sums; and the weight gradient dW +=
 * dY^T X (with the bias gradient) over pairs of rows. A framework
 * (rounding, packing, threads, the epilogue's GELU, GELU' and residual
 * add) around a 12 x 32 micro-kernel: the scalar one below (the oracle) or
 * the VDPBF16PS one of gemm_bf16_avx512.c, which gives the same bits.
 *
 * The format, the arithmetic of VDPBF16PS (AVX512_BF16):
 *   x and w rounded to bfloat16, nearest even (rai_bf16_bits), K padded
 *   with zeros to whole pairs; each output one chain over the pairs in
 *   order, each pair (2q, 2q + 1) added as
 *     acc = acc + x[2q+1] w[2q+1];  acc = acc + x[2q] w[2q]
 *   each step one rounding (the product of two bfloat16 values is exact in
 *   float32), subnormal inputs, sums and results taken as zero (the
 *   instruction's DAZ and FTZ); then + bias.
 * The order of the sums differs from the float32 product's, so the bf16
 * reference path (rounded values through the float32 product, where the
 * CPU lacks AVX512_BF16) agrees with this one to float32 rounding, not bit
 * for bit. */
#include "kernels/gemm_kernels.h"
#include "kernels/bf16.h"
#include "base/internal.h"
#include "base/arena.h"

#include <math.h>
#include <string.h>
#include <omp.h>

#define MR RA_GEMM_BF16_MR
#define NR RA_GEMM_BF16_NR
#define MB (4 * MR)   /* rows of a task */
#define PGROUP 4      /* column panels of a task, at least */

void rai_bf16_round_rows(uint16_t *a, int64_t lda, const float *x, int64_t ldx, int rows, int k) {
    const int kp = (k + 1) / 2 * 2;
    for (int r = 0; r < rows; r++, a += lda, x += ldx) {
        for (int l = 0; l < k; l++) a[l] = rai_bf16_bits(x[l]);
        if (kp > k) a[k] = 0;
    }
}

void rai_gemm_bf16_micro_ref(int kp, const uint16_t *a, int64_t lda, int64_t aq, const uint16_t *bp,
                             float *c, int64_t ldc, const float *bias) {
    float acc[MR][NR] = {{0}};
    for (int q = 0; q < kp; q++, bp += 2 * NR)
        for (int r = 0; r < MR; r++) {
            const uint16_t *ar = a + r * lda + q * aq;
            for (int j = 0; j < NR; j++) {
                acc[r][j] = rai_bf16_dot_step(acc[r][j], ar[1], bp[2 * j + 1]);
                acc[r][j] = rai_bf16_dot_step(acc[r][j], ar[0], bp[2 * j]);
            }
        }
    for (int r = 0; r < MR; r++, c += ldc)
        for (int j = 0; j < NR; j++) c[j] = bias ? acc[r][j] + bias[j] : acc[r][j];
}

void rai_bf16_pack_pairs(uint16_t *dst, const float *r0, const float *r1, int n, double *sum) {
    for (int j = 0; j < n; j++) {
        dst[2 * j] = rai_bf16_bits(r0[j]), dst[2 * j + 1] = r1 ? rai_bf16_bits(r1[j]) : 0;
        if (sum) sum[j] = r1 ? sum[j] + r0[j] + r1[j] : sum[j] + r0[j];
    }
}

typedef void (*micro_fn)(int, const uint16_t *, int64_t, int64_t, const uint16_t *, float *,
                         int64_t, const float *);
typedef void (*round_fn)(uint16_t *, int64_t, const float *, int64_t, int, int);
typedef void (*pairs_fn)(uint16_t *, const float *, const float *, int, double *);
typedef void (*micro_res_fn)(int, const uint16_t *, int64_t, int64_t, const uint16_t *,
                             float *const *, const float *);
typedef void (*micro_mul_fn)(int, const uint16_t *, int64_t, int64_t, const uint16_t *, float *,
                             int64_t, const float *, const float *);

/* The micro-kernel, rounding and packing of pairs of an isa, and the
 * micro-kernels that add their whole tile into residual rows or multiply
 * it by gm (or NULL). */
typedef struct {
    micro_fn micro;
    round_fn round;
    pairs_fn pairs;
    micro_res_fn micro_res;
    micro_mul_fn micro_mul;
} bf16_kernels;

static bf16_kernels kernels_of(int isa) {
#ifdef RA_HAVE_X86_KERNELS
    if (isa == RA_GEMM_BF16_AVX512)
        return (bf16_kernels){rai_gemm_bf16_micro_avx512, rai_bf16_round_rows_avx512,
                              rai_bf16_pack_pairs_avx512, rai_gemm_bf16_micro_res_avx512,
                              rai_gemm_bf16_micro_mul_avx512};
#endif
    (void)isa;
    return (bf16_kernels){rai_gemm_bf16_micro_ref, rai_bf16_round_rows, rai_bf16_pack_pairs, NULL,
                          NULL};
}

/* Whole tile (MR x NR) from row r0, column j0 added into res (row stride
 * n) row map[r0 + r] (skipped if negative; map NULL: row r0 + r) by the
 * micro-kernel itself, if the isa has one that does: 1, else 0. */
static int tile_into_res(const bf16_kernels *kn, int kp, const uint16_t *a, int64_t lda,
                         const uint16_t *bp, const float *bias, float *res, const int32_t *map,
                         int64_t r0, int j0, int n) {
    if (!kn->micro_res) return 0;
    float *rows[MR];
    for (int r = 0; r < MR; r++) rows[r] = rai_gemm_res_row(res, n, map, r0 + r, j0);
    kn->micro_res(kp, a, lda, 2, bp, rows, bias);
    return 1;
}

/* ---- the weights, packed once ------------------------------------------ */

/* The bytes of w packed for n x k. */
static size_t packed_bytes(int n, int k) {
    return (size_t)((n + NR - 1) / NR) * NR * (size_t)((k + 1) / 2 * 2) * sizeof(uint16_t);
}

/* A panel [kp][width][2] of columns j < nr (zeros past nr and past kred),
 * element (l, j) of src at src[l * ls + j * js]: l the reduction, j the
 * column; js 1 (rows of columns: paired by the isa's pairs) or ls 1
 * (columns of rows: each rounded as a row, its pairs put in place). The
 * weights of a forward (w (N, K): ls 1, js K), of dX = dY W (w read
 * transposed: ls K, js 1) and X of dW (ls K, js 1) pack here. */
static void pack_panel(uint16_t *dst, int width, const float *src, int64_t ls, int64_t js,
                       int kred, int nr, const bf16_kernels *kn) {
    enum { CHUNK = 512 };   /* values of a row rounded at a time */
    const int kp = (kred + 1) / 2;
    if (js == 1) {
        for (int q = 0; q < kp; q++, dst += 2 * width, src += 2 * ls) {
            kn->pairs(dst, src, 2 * q + 1 < kred ? src + ls : NULL, nr, NULL);
            memset(dst + 2 * nr, 0, (size_t)(width - nr) * 2 * sizeof *dst);
        }
        return;
    }
    memset(dst, 0, (size_t)kp * 2 * width * sizeof *dst);
    uint16_t row[CHUNK];
    for (int j = 0; j < nr; j++)
        for (int l0 = 0; l0 < kred; l0 += CHUNK) {
            const int len = kred - l0 < CHUNK ? kred - l0 : CHUNK;
            kn->round(row, CHUNK, src + j * js + l0, 0, 1, len);
            uint16_t *d = dst + (int64_t)(l0 / 2) * 2 * width + 2 * j;
            for (int q = 0; q < (len + 1) / 2; q++, d += 2 * width) d[0] = row[2 * q], d[1] = row[2 * q + 1];
        }
}

/* Panel p of w (n, k; transposed if wt: the output's columns are w's) into
 * bp, panels of kp pairs. */
static void pack_weight_panel(uint16_t *bp, const float *w, int wt, int n, int k, int p,
                              const bf16_kernels *kn) {
    const int kp = (k + 1) / 2, j0 = p * NR, nr = n - j0 < NR ? n - j0 : NR;
    pack_panel(bp + (int64_t)p * kp * 2 * NR, NR, wt ? w + j0 : w + (int64_t)j0 * k, wt ? n : 1,
               wt ? 1 : k, k, nr, kn);
}

int rai_bf16_weights_pack(rai_bf16_weights *pw, const float *w, int n, int k, int isa,
                          int nthreads) {
    memset(pw, 0, sizeof *pw);
    if (n < 1 || k < 1) return -1;
    if (!(pw->bp = rai_alloc(packed_bytes(n, k), 1))) return -1;
    pw->n = n, pw->k = k;
    const int npanels = (n + NR - 1) / NR;
    const bf16_kernels kn = kernels_of(isa);
#pragma omp parallel for schedule(static) num_threads(nthreads > 1 ? nthreads : 1)
    for (int p = 0; p < npanels; p++) pack_weight_panel(pw->bp, w, 0, n, k, p, &kn);
    return 0;
}

void rai_bf16_weights_free(rai_bf16_weights *pw) {
    if (!pw) return;
    rai_free(pw->bp);
    memset(pw, 0, sizeof *pw);
}

/* ---- the product -------------------------------------------------------- */

typedef struct {
    const float *x, *bias;
    float *y;
    rai_bf16_epilogue e;
    int64_t m;
    int n, k, kp;          /* kp: pairs along K (the last zero-padded) */
    int npanels, group;    /* column panels, and per task */
    const uint16_t *bp;    /* the packed weights: [npanels][kp][NR][2] */
    bf16_kernels kn;
} bf16_job;

/* The epilogue of a tile t (mr x nr of the output, from row r0 and column
 * j0; row stride NR) but for what rai_gemm_tile_put does: the sums
 * multiplied by gm. */
static void tile_pre(const rai_bf16_epilogue *e, float *t, int mr, int nr, int64_t r0, int j0,
                     int n) {
    for (int r = 0; e->gm && r < mr; r++) {
        const int64_t at = (r0 + r) * n + j0;
        for (int j = 0; j < nr; j++) t[r * NR + j] *= e->gm[at + j];
    }
}

/* Rows [i0, i0 + MB) of x (m, k) rounded into a (row stride lda), the
 * rows past m zeros. */
static void round_block(const bf16_kernels *kn, uint16_t *a, int64_t lda, const float *x,
                        int64_t m, int64_t i0, int k) {
    const int rows = (int)(m - i0 < MB ? m - i0 : MB);
    kn->round(a, lda, x + i0 * k, k, rows, k);
    memset(a + rows * lda, 0, sizeof *a * (size_t)((MB - rows) * lda));
}

/* The bias of the NR columns from j0 of n, those past n read as 0 (pad). */
static const float *panel_bias(const float *bias, int j0, int n, float *pad) {
    if (!bias || n - j0 >= NR) return bias ? bias + j0 : NULL;
    memset(pad, 0, sizeof *pad * NR), memcpy(pad, bias + j0, sizeof *pad * (size_t)(n - j0));
    return pad;
}

/* One task: rows [i0, i0 + MB) against column panels [p0, p1). The rows
 * are rounded into a (rows past m: zeros); each row tile meets the panels
 * in turn (the tile in L1, the panels from L2). */
static void run_task(const bf16_job *g, int64_t i0, int p0, int p1, int64_t next, uint16_t *a) {
    const int64_t lda = 2 * (int64_t)g->kp;
    round_block(&g->kn, a, lda, g->x, g->m, i0, g->k);
    /* the rows of x of a later task of the thread (from row next; none if
     * negative), asked for towards L2 a share before each tile: the
     * rounding would otherwise wait for them (Swin's first stage reads
     * 10 MB of x) */
    const int nrows = next < 0 ? 0 : (int)(g->m - next < MB ? g->m - next : MB);
    const char *pf = (const char *)(g->x + (next < 0 ? 0 : next) * g->k);
    const int64_t lines = ((int64_t)nrows * g->k * (int64_t)sizeof(float) + 63) / 64;
    const int64_t calls = (int64_t)(MB / MR) * (p1 - p0);
    int64_t done = 0, c = 0;
    float t[MR * NR], pad[NR];
    for (int rt = 0; rt < MB / MR && i0 + rt * MR < g->m; rt++) {
        const int64_t r0 = i0 + (int64_t)rt * MR;
        const int mr = (int)(g->m - r0 < MR ? g->m - r0 : MR);
        for (int p = p0; p < p1; p++) {
            for (const int64_t upto = lines * ++c / calls; done < upto; done++)
                __builtin_prefetch(pf + done * 64, 0, 2);
            const int j0 = p * NR, nr = g->n - j0 < NR ? g->n - j0 : NR;
            const float *bias = panel_bias(g->bias, j0, g->n, pad);
            const uint16_t *bt = g->bp + (int64_t)p * g->kp * 2 * NR;
            const uint16_t *at = a + rt * MR * lda;
            rai_gemm_tile_prefetch(g->e.res ? NULL : g->y + r0 * g->n + j0, g->n, g->e.res, g->n,
                                   g->e.map, r0, mr, j0, nr, g->k);
            /* and the tile's lines of gm (read: GELU' remade by the
             * backward, from memory) */
            for (int r = 0; g->e.gm && r < mr; r++)
                for (int j = 0; j < nr; j += 16)
                    __builtin_prefetch(g->e.gm + (r0 + r) * g->n + j0 + j, 0, 3);
            if (mr == MR && nr == NR && !g->e.res && !g->e.gelu && !g->e.gm) {
                /* straight into y */
                g->kn.micro(g->kp, at, lda, 2, bt, g->y + r0 * g->n + j0, g->n, bias);
                continue;
            }
            if (mr == MR && nr == NR && g->e.res && !g->e.gelu && !g->e.gm &&
                tile_into_res(&g->kn, g->kp, at, lda, bt, bias, g->e.res, g->e.map, r0, j0, g->n))
                continue;
            if (mr == MR && nr == NR && g->e.gm && !g->e.res && !g->e.gelu &&
                g->kn.micro_mul) {   /* times gm (a GELU's backward) straight into y */
                g->kn.micro_mul(g->kp, at, lda, 2, bt, g->y + r0 * g->n + j0, g->n, bias,
                                g->e.gm + r0 * g->n + j0);
                continue;
            }
            g->kn.micro(g->kp, at, lda, 2, bt, t, NR, bias);
            tile_pre(&g->e, t, mr, nr, r0, j0, g->n);
            rai_gemm_tile_put(t, NR, mr, nr, g->e.gelu, g->y + r0 * g->n + j0,
                              g->n, g->e.res, g->n, g->e.map, r0, j0);
        }
    }
}

int rai_gemm_bf16(float *y, const float *x, const float *bias, int64_t m, int n, int k,
                  const rai_bf16_weights *pw, void (*gelu)(float *, const float *, int64_t),
                  float *res, const int32_t *map, int isa, int nthreads) {
    if (!pw) return m <= 0 || n <= 0 ? 0 : -1;
    const rai_bf16_epilogue e = {.gelu = gelu, .res = res, .map = map};
    return rai_gemm_bf16_ext(y, x, NULL, 0, bias, m, n, k, pw, &e, isa, nthreads);
}

int rai_gemm_bf16_ext(float *y, const float *x, const float *w, int wt, const float *bias,
                      int64_t m, int n, int k, const rai_bf16_weights *pw,
                      const rai_bf16_epilogue *e, int isa, int nthreads) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0 || (pw ? pw->n != n || pw->k != k : !w)) return -1;
    bf16_job g = {.x = x, .bias = bias, .y = y, .m = m, .n = n, .k = k, .kp = (k + 1) / 2,
                  .bp = pw ? pw->bp : NULL, .kn = kernels_of(isa)};
    if (e) g.e = *e;
    g.npanels = (n + NR - 1) / NR;
    /* tasks of MB rows by groups of panels: as many as keep every thread
     * busy to the end (four per thread), groups of PGROUP panels at least
     * (rounding the rows again per group costs 1 / (32 PGROUP) of it) */
    const int64_t blocks = (m + MB - 1) / MB;
    const int nt0 = nthreads > 1 ? nthreads : 1;
    int groups = 1;
    while (blocks * groups < 4 * nt0 && g.npanels / (groups * 2) >= PGROUP) groups *= 2;
    g.group = (g.npanels + groups - 1) / groups;
    const int64_t tasks = blocks * groups;
    const int nt = nt0 > 1 && tasks > 1 ? (tasks < nt0 ? (int)tasks : nt0) : 1;
    const size_t bytes = (size_t)MB * (size_t)(2 * g.kp) * sizeof(uint16_t);
    /* weights not packed before: packed now, into the calling thread's
     * buffer, by the team (they change at every step of a training run) */
    uint16_t *wbuf = pw ? NULL : rai_thread_buffer(RAI_BUFFER_BF16_W, packed_bytes(n, k));
    if (!pw && !wbuf) return -1;
    if (!pw) g.bp = wbuf;
    int missing = 0;   /* threads without their buffer: then nothing is done */
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        uint16_t *a = rai_thread_buffer(RAI_BUFFER_BF16, bytes);
        if (!a) {
#pragma omp atomic
            missing++;
        }
        if (wbuf) {
#pragma omp for schedule(static)
            for (int p = 0; p < g.npanels; p++) pack_weight_panel(wbuf, w, wt, n, k, p, &g.kn);
        }
#pragma omp barrier
        if (!missing) {
            /* each thread its consecutive tasks (the tasks are alike), so
             * that it knows its next one's rows */
            const int id = omp_get_thread_num(), cnt = omp_get_num_threads();
            const int64_t t1 = tasks * (id + 1) / cnt;
            for (int64_t t = tasks * id / cnt; t < t1; t++) {
                const int p0 = (int)(t % groups) * g.group;
                const int p1 = p0 + g.group < g.npanels ? p0 + g.group : g.npanels;
                /* the task after next: the next one's rows were asked for */
                const int64_t next =
                    t + 2 < t1 && (t + 2) / groups != t / groups ? (t + 2) / groups * MB : -1;
                if (p0 < p1) run_task(&g, t / groups * MB, p0, p1, next, a);
            }
        }
    }
    return missing ? -1 : 0;
}

/* ---- the weight gradient: c += a^T b, the sum over the rows ------------- */

#define TN_ROWS 512   /* rows of a and b per block: the chain of each sum is cut here */

/* The lines of n floats from p asked for towards L1 (the rows that the
 * packing below reads a few pairs later: x of a dW product was written
 * by the forward long before and comes from memory). */
static inline void prefetch_floats(const float *p, int64_t n) {
    for (int64_t l = 0; l < n; l += 16) __builtin_prefetch(p + l, 0, 3);
}

#define TN_AHEAD 4   /* pairs of rows prefetched ahead */

/* Block [i0, i0 + rows) of c += a^T b: a's rows by pairs into at
 * ([kp][wa][2], wa = n rounded up to MR: the micro-kernel reads a tile's
 * rows 2 apart and its pairs 2 wa apart), a's column sums into sum (if
 * given), b's rows by pairs into its panels of NR columns in bt. Each of
 * the nt threads packs a strip of a's columns (rows in order: each
 * column's sum one chain) and a share of b's pairs, reading rows
 * contiguously. */
static void tn_pack(uint16_t *at, int wa, double *sum, uint16_t *bt, const float *a,
                    const float *b, int64_t i0, int rows, int n, int k, const bf16_kernels *kn,
                    int nt) {
    const int kp = (rows + 1) / 2, npanels = (k + NR - 1) / NR;
    const int strip = ((n + nt - 1) / nt + 15) / 16 * 16;
#pragma omp for schedule(static) nowait
    for (int t = 0; t < 2 * nt; t++) {
        if (t < nt) {
            const int c0 = t * strip, cn = n - c0 < strip ? n - c0 : strip;
            for (int q = 0; cn > 0 && q < kp; q++) {
                const float *r0 = a + (i0 + 2 * q) * n + c0;
                if (q + TN_AHEAD < kp)
                    prefetch_floats(r0 + 2 * TN_AHEAD * n,
                                    2 * q + 2 * TN_AHEAD + 1 < rows ? n + cn : cn);
                kn->pairs(at + (int64_t)q * 2 * wa + 2 * c0, r0, 2 * q + 1 < rows ? r0 + n : NULL,
                          cn, sum ? sum + c0 : NULL);
            }
            if (t == nt - 1 && wa > n)   /* the rows of the last tile past n */
                for (int q = 0; q < kp; q++)
                    memset(at + (int64_t)q * 2 * wa + 2 * n, 0, (size_t)(wa - n) * 2 * sizeof *at);
            continue;
        }
        const int q1 = (int)((int64_t)kp * (t - nt + 1) / nt);
        for (int q = (int)((int64_t)kp * (t - nt) / nt); q < q1; q++) {
            const float *r0 = b + (i0 + 2 * q) * k;
            if (q + TN_AHEAD < q1)
                prefetch_floats(r0 + 2 * TN_AHEAD * k, 2 * q + 2 * TN_AHEAD + 1 < rows ? 2 * k : k);
            for (int p = 0; p < npanels; p++) {
                const int nr = k - p * NR < NR ? k - p * NR : NR;
                uint16_t *d = bt + ((int64_t)p * kp + q) * 2 * NR;
                kn->pairs(d, r0 + p * NR, 2 * q + 1 < rows ? r0 + k + p * NR : NULL, nr, NULL);
                memset(d + 2 * nr, 0, (size_t)(NR - nr) * 2 * sizeof *d);
            }
        }
    }
}

int rai_gemm_bf16_tn(float *c, float *db, const float *a, const float *b, int64_t m, int n, int k,
                     int isa, int nthreads) {
    if (m <= 0 || n <= 0 || k <= 0) return 0;
    const bf16_kernels kn = kernels_of(isa);
    const int ntiles = (n + MR - 1) / MR, npanels = (k + NR - 1) / NR, wa = ntiles * MR;
    const size_t abytes = (size_t)wa * TN_ROWS * sizeof(uint16_t);
    const size_t bbytes = (size_t)npanels * NR * TN_ROWS * sizeof(uint16_t);
    uint16_t *at = rai_thread_buffer(RAI_BUFFER_BF16_TN, abytes + bbytes + (size_t)n * sizeof(double));
    if (!at) return -1;
    uint16_t *bt = at + abytes / sizeof *at;
    double *sum = db ? (double *)(bt + bbytes / sizeof *bt) : NULL;
    if (sum) memset(sum, 0, (size_t)n * sizeof *sum);
    const int64_t ntasks = (int64_t)ntiles * npanels;
    const int nt = nthreads > 1 ? nthreads : 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    for (int64_t i0 = 0; i0 < m; i0 += TN_ROWS) {   /* the blocks in order: one chain per sum */
        const int rows = (int)(m - i0 < TN_ROWS ? m - i0 : TN_ROWS), kp = (rows + 1) / 2;
        tn_pack(at, wa, sum, bt, a, b, i0, rows, n, k, &kn, omp_get_num_threads());
#pragma omp barrier
#pragma omp for schedule(static)
        for (int64_t t = 0; t < ntasks; t++) {
            const int rt = (int)(t / npanels), p = (int)(t % npanels);
            const int r0 = rt * MR, j0 = p * NR;
            const int mr = n - r0 < MR ? n - r0 : MR, nr = k - j0 < NR ? k - j0 : NR;
            const uint16_t *bp = bt + (int64_t)p * kp * 2 * NR;
            if (mr == MR && nr == NR && kn.micro_res) {   /* added into c in registers */
                float *crow[MR];
                for (int r = 0; r < MR; r++) crow[r] = c + (int64_t)(r0 + r) * k + j0;
                kn.micro_res(kp, at + 2 * r0, 2, 2 * (int64_t)wa, bp, crow, NULL);
                continue;
            }
            float s[MR * NR];
            kn.micro(kp, at + 2 * r0, 2, 2 * (int64_t)wa, bp, s, NR, NULL);
            rai_gemm_tile_put(s, NR, mr, nr, NULL, NULL, 0, c, k, NULL, r0, j0);
        }
    }
    for (int j = 0; sum && j < n; j++) db[j] = (float)((double)db[j] + sum[j]);
    return 0;
}

/* ---- the MLP: fc2(GELU(fc1(x))) a block of rows at a time ---------------- */

typedef struct {
    const float *x, *b1, *b2;
    float *y, *res;
    void (*gelu)(float *, const float *, int64_t);
    int64_t m;
    int c, hidden;
    const rai_bf16_weights *w1, *w2;
    bf16_kernels kn;
} mlp_job;

/* Rows [i0, i0 + MB): x rounded into a, fc1 and GELU tile by tile into h
 * (bfloat16, as fc2's input rounding would make it), then fc2 from h into
 * y or added into res. The hidden activations never leave the thread's
 * cache. */
static void run_mlp_task(const mlp_job *g, int64_t i0, uint16_t *a, uint16_t *h) {
    const int kp1 = (g->c + 1) / 2, kp2 = (g->hidden + 1) / 2;
    const int64_t lda = 2 * (int64_t)kp1, ldh = 2 * (int64_t)kp2;
    round_block(&g->kn, a, lda, g->x, g->m, i0, g->c);
    float t[MR * NR], pad[NR];
    const int np1 = (g->hidden + NR - 1) / NR, np2 = (g->c + NR - 1) / NR;
    for (int rt = 0; rt < MB / MR && i0 + rt * MR < g->m; rt++)
        for (int p = 0; p < np1; p++) {
            const int j0 = p * NR, nr = g->hidden - j0 < NR ? g->hidden - j0 : NR;
            g->kn.micro(kp1, a + rt * MR * lda, lda, 2, g->w1->bp + (int64_t)p * kp1 * 2 * NR, t, NR,
                        panel_bias(g->b1, j0, g->hidden, pad));
            g->gelu(t, t, MR * NR);
            g->kn.round(h + rt * MR * ldh + j0, ldh, t, NR, MR, nr);
        }
    if (ldh > g->hidden)   /* an odd hidden: its pad column */
        for (int r = 0; r < MB; r++) h[r * ldh + g->hidden] = 0;
    for (int rt = 0; rt < MB / MR && i0 + rt * MR < g->m; rt++) {
        const int64_t r0 = i0 + (int64_t)rt * MR;
        const int mr = (int)(g->m - r0 < MR ? g->m - r0 : MR);
        for (int p = 0; p < np2; p++) {
            const int j0 = p * NR, nr = g->c - j0 < NR ? g->c - j0 : NR;
            const uint16_t *bt = g->w2->bp + (int64_t)p * kp2 * 2 * NR;
            const float *bias = panel_bias(g->b2, j0, g->c, pad);
            if (mr == MR && nr == NR && g->res &&
                tile_into_res(&g->kn, kp2, h + rt * MR * ldh, ldh, bt, bias, g->res, NULL, r0, j0,
                              g->c))
                continue;
            g->kn.micro(kp2, h + rt * MR * ldh, ldh, 2, bt, t, NR, bias);
            rai_gemm_tile_put(t, NR, mr, nr, NULL, g->y + r0 * g->c + j0, g->c, g->res, g->c,
                              NULL, r0, j0);
        }
    }
}

int rai_gemm_bf16_mlp(float *y, const float *x, const rai_bf16_weights *w1, const float *b1,
                      const rai_bf16_weights *w2, const float *b2, int64_t m, int c, int hidden,
                      void (*gelu)(float *, const float *, int64_t), float *res, int isa,
                      int nthreads) {
    if (m <= 0 || c <= 0) return 0;
    if (hidden <= 0 || !gelu || !w1 || !w2 || w1->n != hidden || w1->k != c || w2->n != c ||
        w2->k != hidden)
        return -1;
    const mlp_job g = {.x = x, .b1 = b1, .b2 = b2, .y = y, .res = res, .gelu = gelu, .m = m,
                       .c = c, .hidden = hidden, .w1 = w1, .w2 = w2, .kn = kernels_of(isa)};
    const int64_t tasks = (m + MB - 1) / MB;
    const int nt = nthreads > 1 && tasks > 1 ? (tasks < nthreads ? (int)tasks : nthreads) : 1;
    const size_t la = (size_t)MB * (size_t)((c + 1) / 2 * 2), lh = (size_t)MB * (size_t)((hidden + 1) / 2 * 2);
    int missing = 0;   /* threads without their buffer: then nothing is done */
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        uint16_t *a = rai_thread_buffer(RAI_BUFFER_BF16, (la + lh) * sizeof *a);
        if (!a) {
#pragma omp atomic
            missing++;
        }
#pragma omp barrier
        if (!missing) {
#pragma omp for schedule(dynamic)
            for (int64_t t = 0; t < tasks; t++) run_mlp_task(&g, t * MB, a, a + la);
        }
    }
    return missing ? -1 : 0;
}
