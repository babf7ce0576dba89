/* gemm_i8.c - the product of precision int8 (gemm_kernels.h): a Linear's
 * y = x . w^T + bias with its input quantised per row at run time and its
 * weights per output channel, integer sums, the scales applied once at the
 * end. A framework (quantising, packing, threads) around a 6 x 16
 * micro-kernel: the scalar one below (the oracle), the AVX2 one of
 * gemm_i8_avx2.c, or the VPDPBUSD one of gemm_i8_avx512.c, which takes
 * blocks of 2 x 2 tiles at once; all give the same bits.
 *
 * The formats, in the manner of PyTorch's dynamic quantised Linear on x86
 * (fbgemm, which quantises activations to 7 bits, reduce_range, so that
 * pairs of u8 x s8 products cannot saturate a 16-bit sum):
 *   input row x (K):  lo = min(0, min x), hi = max(0, max x),
 *                     s = (hi - lo) / 127, z = round(-lo / s) in [0, 127],
 *                     q = clamp(round(x r) + z, 0, 127)        (u7)
 *                     with r = 1 / s in float32 (fbgemm's quantiser too
 *                     multiplies by the reciprocal: no divide per value)
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

void rai_i8_quantize_row(uint8_t *q, int32_t *zero, float *scale, const float *x, int k) {
    float lo = 0.0f, hi = 0.0f, z, inv;
    int finite = 1;
    for (int l = 0; l < k; l++) {
        finite &= isfinite(x[l]) != 0;
        lo = x[l] < lo ? x[l] : lo, hi = x[l] > hi ? x[l] : hi;
    }
    if (!rai_i8_input_params(lo, hi, finite, scale, &z, &inv)) {
        memset(q, 0, (size_t)(k > 0 ? k : 0));
        *zero = 0;
        return;
    }
    for (int l = 0; l < k; l++) q[l] = rai_i8_input(x[l], inv, z);
    *zero = (int32_t)z;
}

float rai_i8_weight_scale(const float *w, int64_t k) {
    float amax = 0.0f;
    int finite = 1;
    for (int64_t l = 0; l < k; l++) {
        finite &= isfinite(w[l]) != 0;
        amax = fabsf(w[l]) > amax ? fabsf(w[l]) : amax;
    }
    return finite ? amax / 127.0f : NAN;
}

void rai_i8_quantize_weights(int8_t *v, int32_t *sum, float *scale, const float *w, int k) {
    const float t = rai_i8_weight_scale(w, k);
    const int finite = !isnan(t);
    int32_t acc = 0;
    if (!finite || t == 0.0f) memset(v, 0, (size_t)(k > 0 ? k : 0));
    for (int l = 0; finite && t != 0.0f && l < k; l++) acc += v[l] = rai_i8_weight(w[l], t);
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
typedef void (*block_fn)(int, const uint8_t *, const int8_t *, int, int, float *, int64_t,
                         const rai_i8_tile *);
typedef void (*qrow_fn)(uint8_t *, int32_t *, float *, const float *, int);
typedef void (*qweights_fn)(int8_t *, int32_t *, float *, const float *, int);

/* The micro-kernel and quantisers of an isa: a 6 x 16 micro-kernel, or
 * one that takes blocks of up to rp x cp tiles at once. */
typedef struct {
    micro_fn micro;
    block_fn block;
    int rp, cp;
    qrow_fn qrow;
    qweights_fn qweights;
} i8_kernels;

#define RPMAX 2   /* the largest block of any kernel: the tile buffer's size */
#define CPMAX 2
#ifdef RA_HAVE_X86_KERNELS
_Static_assert(RA_GEMM_I8_VNNI_RP <= RPMAX && RA_GEMM_I8_VNNI_CP <= CPMAX, "a block fits t");
#endif

static i8_kernels kernels_of(int isa) {
#ifdef RA_HAVE_X86_KERNELS
    if (isa == RA_GEMM_AVX512_VNNI)
        return (i8_kernels){NULL, rai_gemm_i8_block_avx512_vnni, RA_GEMM_I8_VNNI_RP,
                            RA_GEMM_I8_VNNI_CP, rai_i8_quantize_row_avx512,
                            rai_i8_quantize_weights_avx2};
    if (isa == RA_GEMM_AVX2)
        return (i8_kernels){rai_gemm_i8_micro_avx2, NULL, 1, 1, rai_i8_quantize_row_avx2,
                            rai_i8_quantize_weights_avx2};
#endif
    (void)isa;
    return (i8_kernels){rai_gemm_i8_micro_ref, NULL, 1, 1, rai_i8_quantize_row,
                        rai_i8_quantize_weights};
}

typedef struct {
    const float *x, *bias;
    float *y, *res;
    const int32_t *map;
    void (*gelu)(float *, const float *, int64_t);
    int64_t m;
    int n, k, kg;             /* kg: groups of 4 along K (the last zero-padded) */
    int npanels;
    rai_i8_weights b;         /* w packed (here or before the call) */
    i8_kernels kn;
    int fused;                /* kn's block kernel applies gelu and res itself */
} i8_job;

/* A thread's block of rows, quantised: MB / MR panels [kg][MR][4], and
 * each row's zero point and scale. */
typedef struct {
    uint8_t *ap;
    int32_t zero[MB];
    float scale[MB];
} i8_rows;

/* Rows [i0, i0 + MB) of x quantised into r (rows past m: zeros, scale 0). */
static void pack_rows(const i8_job *g, int64_t i0, i8_rows *r, uint8_t *row) {
    const int64_t panel = (int64_t)g->kg * 4 * MR;
    memset(row + g->k, 0, (size_t)(4 * g->kg - g->k));
    for (int t = 0; t < MB; t++) {
        const int64_t i = i0 + t;
        uint8_t *dst = r->ap + (t / MR) * panel + 4 * (t % MR);
        if (i >= g->m) {
            r->zero[t] = 0, r->scale[t] = 0.0f;
            for (int q = 0; q < g->kg; q++) memset(dst + q * 4 * MR, 0, 4);
            continue;
        }
        g->kn.qrow(row, &r->zero[t], &r->scale[t], g->x + i * g->k, g->k);
        for (int q = 0; q < g->kg; q++) memcpy(dst + q * 4 * MR, row + 4 * q, 4);
    }
}

/* Column panel p of w (rows of w) into pw, quantised by q (columns past
 * n: zeros). row: k rounded up to groups of scratch. */
static void pack_cols(const rai_i8_weights *pw, const float *w, int p, qweights_fn q, int8_t *row) {
    const int n = pw->n, k = pw->k, kg = (k + 3) / 4;
    int8_t *dst = pw->bp + (int64_t)p * kg * 4 * NR;
    memset(row + k, 0, (size_t)(4 * kg - k));
    if (p * NR + NR > n) memset(dst, 0, (size_t)kg * 4 * NR);
    for (int j = 0; j < NR; j++) {
        const int c = p * NR + j;
        if (c >= n) {
            pw->wsum[c] = 0, pw->wscale[c] = 0.0f;
            continue;
        }
        q(row, &pw->wsum[c], &pw->wscale[c], w + (int64_t)c * k, k);
        for (int g = 0; g < kg; g++) memcpy(dst + g * 4 * NR + 4 * j, row + 4 * g, 4);
    }
}

/* The bytes of w packed for n x k: panels, then sums and scales. */
static size_t packed_bytes(int n, int k) {
    const size_t ncols = (size_t)((n + NR - 1) / NR) * NR;
    return ncols * (size_t)(4 * ((k + 3) / 4)) + 2 * sizeof(float) * ncols;
}

/* pw's pointers into buf (packed_bytes(n, k) bytes, 4-aligned). */
static void packed_place(rai_i8_weights *pw, void *buf, int n, int k) {
    const int64_t ncols = (int64_t)((n + NR - 1) / NR) * NR;
    pw->n = n, pw->k = k;
    pw->wsum = buf, pw->wscale = (float *)(pw->wsum + ncols);
    pw->bp = (int8_t *)(pw->wscale + ncols);
}

int rai_i8_weights_pack(rai_i8_weights *pw, const float *w, int n, int k, int isa, int nthreads) {
    memset(pw, 0, sizeof *pw);
    if (n < 1 || k < 1 || k > RA_GEMM_I8_KMAX) return -1;
    void *buf = rai_alloc(packed_bytes(n, k), 1);
    int8_t *rows = rai_alloc((size_t)(nthreads > 1 ? nthreads : 1) * (size_t)(k + 4), 1);
    if (!buf || !rows) return rai_free(buf), rai_free(rows), -1;
    packed_place(pw, buf, n, k);
    const qweights_fn q = kernels_of(isa).qweights;
    const int npanels = (n + NR - 1) / NR;
#pragma omp parallel for schedule(static) num_threads(nthreads > 1 ? nthreads : 1)
    for (int p = 0; p < npanels; p++)
        pack_cols(pw, w, p, q, rows + (size_t)omp_get_thread_num() * (size_t)(k + 4));
    rai_free(rows);
    return 0;
}

void rai_i8_weights_free(rai_i8_weights *pw) {
    if (!pw) return;
    rai_free(pw->wsum);   /* the start of the buffer */
    memset(pw, 0, sizeof *pw);
}

/* One task: rows [i0, i0 + MB) against every column panel; each group of
 * cp column panels meets the block's row panels, rp at a time, in turn
 * (the columns stay in L1, the block in L2). */
static void run_task(const i8_job *g, int64_t i0, i8_rows *rows, uint8_t *row) {
    pack_rows(g, i0, rows, row);
    const i8_kernels *kn = &g->kn;
    const int64_t panel = (int64_t)g->kg * 4 * MR;
    float t[RPMAX * MR * CPMAX * NR], pad[CPMAX * NR];
    for (int p = 0; p < g->npanels; p += kn->cp) {
        const int cp = g->npanels - p < kn->cp ? g->npanels - p : kn->cp;
        const int j0 = p * NR, tw = cp * NR, nr = g->n - j0 < tw ? g->n - j0 : tw;
        const float *bias = g->bias ? g->bias + j0 : NULL;
        if (bias && nr < tw) {   /* the bias of the columns past n read as 0 */
            memset(pad, 0, sizeof pad), memcpy(pad, bias, sizeof *pad * (size_t)nr), bias = pad;
        }
        const int8_t *bt = g->b.bp + (int64_t)p * g->kg * 4 * NR;
        for (int q = 0; q < MB / MR; q += kn->rp) {   /* row panels q .. q + rn - 1 */
            const int64_t r0 = i0 + (int64_t)q * MR;
            if (r0 >= g->m) break;
            const int64_t left = g->m - r0 < (MB / MR - q) * MR ? g->m - r0 : (MB / MR - q) * MR;
            const int rn = (int)((left + MR - 1) / MR < kn->rp ? (left + MR - 1) / MR : kn->rp);
            const int mr = (int)(left < rn * MR ? left : rn * MR);
            rai_i8_tile e = {.zero = rows->zero + q * MR, .scale = rows->scale + q * MR,
                             .wsum = g->b.wsum + j0, .wscale = g->b.wscale + j0, .bias = bias};
            const uint8_t *at = rows->ap + q * panel;
            /* whole blocks straight into y, or into res with GELU where
             * the kernel has the epilogue */
            const int full = mr == rn * MR && nr == tw;
            const int whole = full && ((!g->res && !g->gelu) || g->fused);
            float *res_rows[RPMAX * MR];
            if (whole && g->res) {
                for (int r = 0; r < mr; r++)
                    res_rows[r] = rai_gemm_res_row(g->res, g->n, g->map, r0 + r, j0);
                e.res = res_rows;
            }
            e.gelu = whole && g->gelu;
            float *c = whole ? g->y + r0 * g->n + j0 : t;   /* whole: straight into y */
            const int64_t ldc = whole ? g->n : tw;
            rai_gemm_tile_prefetch(g->y, g->n, g->res, g->n, g->map, r0, mr, j0, nr, g->k);
            if (kn->block) kn->block(g->kg, at, bt, rn, cp, c, ldc, &e);
            else kn->micro(g->kg, at, bt, c, ldc, &e);
            if (!whole)
                rai_gemm_tile_put(t, tw, mr, nr, g->gelu, g->y + r0 * g->n + j0, g->n, g->res,
                                  g->n, g->map, r0, j0);
        }
    }
}

int rai_gemm_i8(float *y, const float *x, const float *w, const float *bias, int64_t m, int n,
                int k, const rai_i8_weights *pw, void (*gelu)(float *, const float *, int64_t),
                float *res, const int32_t *map, int isa, int nthreads) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0 || k > RA_GEMM_I8_KMAX || (pw && (pw->n != n || pw->k != k))) return -1;
    i8_job g = {.x = x, .bias = bias, .y = y, .res = res, .map = map, .gelu = gelu,
                .m = m, .n = n, .k = k, .kg = (k + 3) / 4, .kn = kernels_of(isa)};
    g.npanels = (n + NR - 1) / NR;
#ifdef RA_HAVE_X86_KERNELS
    /* the VNNI kernel's GELU is rai_gemm_gelu_avx512's: fused for it only */
    g.fused = isa == RA_GEMM_AVX512_VNNI && (!gelu || gelu == rai_gemm_gelu_avx512);
#endif
    const int64_t kp = 4 * (int64_t)g.kg;
    const int64_t tasks = (m + MB - 1) / MB;
    const int nt = nthreads > 1 && tasks > 1 ? (tasks < nthreads ? (int)tasks : nthreads) : 1;
    /* one buffer: w packed (unless it is already), then per thread a block
     * of rows, its scales and a row of scratch (kp: a row padded to whole
     * groups) */
    const size_t per_thread = (sizeof(i8_rows) + (size_t)(MB + 1) * (size_t)kp + 127) / 64 * 64;
    const size_t wbytes = pw ? 0 : (packed_bytes(n, k) + 63) / 64 * 64;
    unsigned char *buf = rai_thread_buffer(RAI_BUFFER_GEMM, wbytes + (size_t)nt * per_thread);
    if (!buf) return -1;
    if (pw) g.b = *pw;
    else packed_place(&g.b, buf, n, k);
    unsigned char *threads = buf + wbytes;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        unsigned char *mine = threads + (size_t)omp_get_thread_num() * per_thread;
        i8_rows *rows = (i8_rows *)mine;
        rows->ap = mine + sizeof *rows;
        uint8_t *row = rows->ap + (size_t)MB * (size_t)kp;
        if (!pw) {
#pragma omp for schedule(static)
            for (int p = 0; p < g.npanels; p++) pack_cols(&g.b, w, p, g.kn.qweights, (int8_t *)row);
        }
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < tasks; t++) run_task(&g, t * MB, rows, row);
    }
    return 0;
}
