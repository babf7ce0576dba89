/* gemm_i8.c - the product of precision int8 (gemm_kernels.h): a Linear's
 * y = x . w^T + bias with its input quantised per row at run time and its
 * weights per output channel, integer sums, the scales applied once at the
 * end. A framework (quantising, packing, threads) around a 6 x 16
 * micro-kernel: the scalar one below (the oracle) or the AVX2 one of
 * gemm_i8_avx2.c, which gives the same bits.
 *
 * The formats, in the manner of PyTorch's dynamic quantised Linear on x86
 * (fbgemm, which quantises activations to 7 bits, reduce_range, so that
 * pairs of u8 x s8 products cannot saturate a 16-bit sum):
 *   input row x (K):  lo = min(0, min x), hi = max(0, max x),
 *                     s = (hi - lo) / 127, z = round(-lo / s) in [0, 127],
 *                     q = clamp(round(x / s) + z, 0, 127)      (u7)
 *   weight row w (K): t = max|w| / 127, v = clamp(round(w / t), -127, 127)
 *   y[i][j] = (float)(sum_k q[i][k] v[j][k] - z[i] sum_k v[j][k])
 *             * (s[i] * t[j]) + bias[j]
 * rounding half to even; the integer sums are exact (K <= 65536). A row of
 * zeros has scale 0; a row with an infinity or NaN gets scale NaN, so that
 * its outputs are NaN as float32's would be. */
#include "kernels/gemm_kernels.h"
#include "base/internal.h"
#include "base/arena.h"

#include <math.h>
#include <string.h>
#include <omp.h>

#define MR RA_GEMM_I8_MR
#define NR RA_GEMM_I8_NR
#define MB (8 * MR)     /* rows of a task */
#define PGROUP 8        /* column panels of a task: 128 x K bytes of b */

/* v / s to the nearest integer, ties to even, for |v / s| <= 2^22: adding
 * and taking away 1.5 x 2^23 rounds as nearbyintf does, without its call. */
static inline float nearest(float v, float s) {
    const float big = 0x1.8p23f;
    return (v / s + big) - big;
}

void rai_i8_quantize_row(uint8_t *q, int32_t *zero, float *scale, const float *x, int k) {
    float lo = 0.0f, hi = 0.0f;
    int finite = 1;
    for (int l = 0; l < k; l++) {
        finite &= isfinite(x[l]) != 0;
        lo = x[l] < lo ? x[l] : lo, hi = x[l] > hi ? x[l] : hi;
    }
    const float s = (hi - lo) / 127.0f;
    if (!finite || !isfinite(s) || s == 0.0f) {
        memset(q, 0, (size_t)(k > 0 ? k : 0));
        *zero = 0, *scale = finite && isfinite(s) ? 0.0f : NAN;
        return;
    }
    float z = nearest(-lo, s);
    z = z < 0.0f ? 0.0f : z > 127.0f ? 127.0f : z;
    for (int l = 0; l < k; l++) {
        const float v = nearest(x[l], s) + z;
        q[l] = (uint8_t)(v < 0.0f ? 0.0f : v > 127.0f ? 127.0f : v);
    }
    *zero = (int32_t)z, *scale = s;
}

void rai_i8_quantize_weights(int8_t *v, int32_t *sum, float *scale, const float *w, int k) {
    float amax = 0.0f;
    int finite = 1;
    for (int l = 0; l < k; l++) {
        finite &= isfinite(w[l]) != 0;
        amax = fabsf(w[l]) > amax ? fabsf(w[l]) : amax;
    }
    const float t = amax / 127.0f;
    int32_t acc = 0;
    if (!finite || t == 0.0f) {
        memset(v, 0, (size_t)(k > 0 ? k : 0));
    } else {
        for (int l = 0; l < k; l++) {
            const float r = nearest(w[l], t);
            v[l] = (int8_t)(r < -127.0f ? -127.0f : r > 127.0f ? 127.0f : r);
            acc += v[l];
        }
    }
    *sum = acc, *scale = finite ? t : NAN;
}

/* The scalar micro-kernel (gemm_kernels.h). */
void rai_gemm_i8_micro_ref(int kg, const uint8_t *ap, const int8_t *bp, float *c, int64_t ldc,
                           const rai_i8_tile *e) {
    int32_t acc[MR][NR] = {{0}};
    for (int g = 0; g < kg; g++, ap += 4 * MR, bp += 4 * NR)
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++)
                for (int l = 0; l < 4; l++) acc[r][j] += ap[4 * r + l] * bp[4 * j + l];
    for (int r = 0; r < MR; r++, c += ldc)
        for (int j = 0; j < NR; j++) {
            const float d = e->scale[r] * e->wscale[j];
            const float v = (float)(acc[r][j] - e->zero[r] * e->wsum[j]) * d;
            c[j] = e->bias ? v + e->bias[j] : v;
        }
}

typedef void (*micro_fn)(int, const uint8_t *, const int8_t *, float *, int64_t,
                         const rai_i8_tile *);
typedef void (*qrow_fn)(uint8_t *, int32_t *, float *, const float *, int);
typedef void (*qweights_fn)(int8_t *, int32_t *, float *, const float *, int);

/* The micro-kernel and quantisers of an isa. */
typedef struct {
    micro_fn micro;
    qrow_fn qrow;
    qweights_fn qweights;
} i8_kernels;

static i8_kernels kernels_of(int isa) {
#ifdef RA_HAVE_X86_KERNELS
    if (isa == RA_GEMM_AVX2)
        return (i8_kernels){rai_gemm_i8_micro_avx2, rai_i8_quantize_row_avx2,
                            rai_i8_quantize_weights_avx2};
#endif
    (void)isa;
    return (i8_kernels){rai_gemm_i8_micro_ref, rai_i8_quantize_row, rai_i8_quantize_weights};
}

typedef struct {
    const float *x, *w, *bias;
    float *y;
    int64_t m;
    int n, k, kg;             /* kg: groups of 4 along K (the last zero-padded) */
    int64_t mpanels;
    int npanels;
    uint8_t *ap;              /* [row panel][kg][MR][4] */
    int32_t *zero;            /* (mpanels * MR) */
    float *scale;
    int8_t *bp;               /* [column panel][kg][NR][4] */
    int32_t *wsum;            /* (npanels * NR) */
    float *wscale;
    i8_kernels kn;
} i8_job;

/* Row panel p of x, quantised row by row (rows past m: zeros, scale 0). */
static void pack_rows(const i8_job *g, int64_t p, uint8_t *row) {
    uint8_t *dst = g->ap + p * (int64_t)g->kg * 4 * MR;
    if (p * MR + MR > g->m) memset(dst, 0, (size_t)g->kg * 4 * MR);
    for (int r = 0; r < MR; r++) {
        const int64_t i = p * MR + r;
        if (i >= g->m) {
            g->zero[i] = 0, g->scale[i] = 0.0f;
            continue;
        }
        memset(row + g->k, 0, (size_t)(4 * g->kg - g->k));
        g->kn.qrow(row, &g->zero[i], &g->scale[i], g->x + i * g->k, g->k);
        for (int q = 0; q < g->kg; q++) memcpy(dst + q * 4 * MR + 4 * r, row + 4 * q, 4);
    }
}

/* Column panel p of w (rows of w), quantised (columns past n: zeros). */
static void pack_cols(const i8_job *g, int p, int8_t *row) {
    int8_t *dst = g->bp + (int64_t)p * g->kg * 4 * NR;
    if (p * NR + NR > g->n) memset(dst, 0, (size_t)g->kg * 4 * NR);
    for (int j = 0; j < NR; j++) {
        const int c = p * NR + j;
        if (c >= g->n) {
            g->wsum[c] = 0, g->wscale[c] = 0.0f;
            continue;
        }
        memset(row + g->k, 0, (size_t)(4 * g->kg - g->k));
        g->kn.qweights(row, &g->wsum[c], &g->wscale[c], g->w + (int64_t)c * g->k, g->k);
        for (int q = 0; q < g->kg; q++) memcpy(dst + q * 4 * NR + 4 * j, row + 4 * q, 4);
    }
}

/* One task: row panels [r0, r1) x column panels [p0, p1). */
static void run_task(const i8_job *g, int64_t r0, int64_t r1, int p0, int p1) {
    float t[MR * NR];
    for (int64_t rp = r0; rp < r1; rp++) {
        const int64_t i0 = rp * MR;
        const int mr = (int)(g->m - i0 < MR ? g->m - i0 : MR);
        const uint8_t *at = g->ap + rp * (int64_t)g->kg * 4 * MR;
        for (int p = p0; p < p1; p++) {
            const int j0 = p * NR, nr = g->n - j0 < NR ? g->n - j0 : NR;
            const rai_i8_tile e = {.zero = g->zero + i0, .scale = g->scale + i0,
                                   .wsum = g->wsum + j0, .wscale = g->wscale + j0,
                                   .bias = g->bias ? g->bias + j0 : NULL};
            const int8_t *bt = g->bp + (int64_t)p * g->kg * 4 * NR;
            float *ct = g->y + i0 * g->n + j0;
            if (mr == MR && nr == NR) {
                g->kn.micro(g->kg, at, bt, ct, g->n, &e);
                continue;
            }
            /* an edge tile: the whole tile into t (the bias of the
             * columns past n is read as 0: the padded tile's own) */
            float pad[NR] = {0};
            rai_i8_tile ep = e;
            if (e.bias) memcpy(pad, e.bias, sizeof *pad * (size_t)nr), ep.bias = pad;
            g->kn.micro(g->kg, at, bt, t, NR, &ep);
            for (int r = 0; r < mr; r++) memcpy(ct + r * g->n, t + r * NR, sizeof *t * (size_t)nr);
        }
    }
}

int rai_gemm_i8(float *y, const float *x, const float *w, const float *bias, int64_t m, int n,
                int k, int isa, int nthreads) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0 || k > RA_GEMM_I8_KMAX) return -1;
    i8_job g = {.x = x, .w = w, .bias = bias, .y = y, .m = m, .n = n, .k = k,
                .kg = (k + 3) / 4, .kn = kernels_of(isa)};
    g.mpanels = (m + MR - 1) / MR;
    g.npanels = (n + NR - 1) / NR;
    const int64_t mrows = g.mpanels * MR, ncols = (int64_t)g.npanels * NR, kp = 4 * (int64_t)g.kg;
    /* one buffer: a, b, their scales, and a row of scratch per thread */
    const int nt0 = nthreads > 1 ? nthreads : 1;
    const size_t bytes = (size_t)(mrows * kp + ncols * kp) + sizeof(float) * 2 * (size_t)(mrows + ncols) +
                         (size_t)nt0 * (size_t)kp + 64;   /* kp: a row padded to whole groups */
    unsigned char *buf = rai_thread_buffer(RAI_BUFFER_GEMM, bytes);
    if (!buf) return -1;
    g.zero = (int32_t *)buf, g.scale = (float *)(g.zero + mrows);
    g.wsum = (int32_t *)(g.scale + mrows), g.wscale = (float *)(g.wsum + ncols);
    g.ap = (uint8_t *)(g.wscale + ncols), g.bp = (int8_t *)(g.ap + mrows * kp);
    unsigned char *scratch = (unsigned char *)(g.bp + ncols * kp);
    /* tasks: groups of row panels x groups of column panels */
    const int64_t rblocks = (g.mpanels + MB / MR - 1) / (MB / MR);
    const int groups = (g.npanels + PGROUP - 1) / PGROUP;
    const int64_t tasks = rblocks * groups;
    const int nt = nthreads > 1 && tasks > 1 ? (tasks < nthreads ? (int)tasks : nthreads) : 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        unsigned char *row = scratch + (size_t)omp_get_thread_num() * (size_t)kp;
#pragma omp for schedule(static)
        for (int p = 0; p < g.npanels; p++) pack_cols(&g, p, (int8_t *)row);
#pragma omp for schedule(static)
        for (int64_t p = 0; p < g.mpanels; p++) pack_rows(&g, p, row);
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t rb = t % rblocks;
            const int p0 = (int)(t / rblocks) * PGROUP;
            const int p1 = p0 + PGROUP < g.npanels ? p0 + PGROUP : g.npanels;
            const int64_t r0 = rb * (MB / MR);
            const int64_t r1 = r0 + MB / MR < g.mpanels ? r0 + MB / MR : g.mpanels;
            run_task(&g, r0, r1, p0, p1);
        }
    }
    return 0;
}
