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
void rai_gemm_i8_micro_ref(int kg, const uint8_t *ap, int64_t lda, const int8_t *bp, float *c,
                           int64_t ldc, const rai_i8_tile *e) {
    int32_t acc[MR][NR] = {{0}};
    for (int g = 0; g < kg; g++, ap += 4, bp += 4 * NR)
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++)
                for (int l = 0; l < 4; l++) acc[r][j] += ap[r * lda + l] * bp[4 * j + l];
    for (int r = 0; r < MR; r++, c += ldc)
        for (int j = 0; j < NR; j++) {
            const float d = e->scale[r] * e->wscale[j];
            const float v = (float)(acc[r][j] - e->zero[r] * e->wsum[j]) * d;
            c[j] = e->bias ? v + e->bias[j] : v;
        }
}

typedef void (*micro_fn)(int, const uint8_t *, int64_t, const int8_t *, float *, int64_t,
                         const rai_i8_tile *);
typedef void (*block_fn)(int, const uint8_t *, int64_t, const int8_t *, int, int, float *, int64_t,
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
    const rai_row_source *src;   /* x's rows made on demand (the MLP's fc1), or NULL */
    void (*gelu)(float *, const float *, int64_t);
    int64_t m;
    int n, k, kg;             /* kg: groups of 4 along K (the last zero-padded) */
    int npanels;
    rai_i8_weights b;         /* w packed (here or before the call) */
    i8_kernels kn;
    int fused;                /* kn's block kernel applies gelu and res itself */
} i8_job;

/* A thread's block of rows, quantised: MB rows of 4 kg bytes (the last
 * group's pad zeroed), each row's zero point and scale. */
typedef struct {
    uint8_t *ap;
    int32_t zero[MB];
    float scale[MB];
} i8_rows;

/* Rows [i0, i0 + MB) of g's input quantised into r (rows past m: zeros,
 * scale 0): x is row i0 (row stride k), or, with g->src, NULL and the
 * rows are made into xs (MB x k floats) first. */
static void pack_rows(const i8_job *g, const float *x, int64_t i0, i8_rows *r, float *xs) {
    const int64_t lda = 4 * (int64_t)g->kg;
    const int valid = (int)(g->m - i0 < MB ? g->m - i0 : MB);
    if (!x) g->src->make(g->src->ctx, xs, i0, valid), x = xs;
    for (int t = 0; t < MB; t++) {
        uint8_t *q = r->ap + t * lda;
        if (t >= valid) {
            r->zero[t] = 0, r->scale[t] = 0.0f;
            memset(q, 0, (size_t)lda);
            continue;
        }
        g->kn.qrow(q, &r->zero[t], &r->scale[t], x + (int64_t)t * g->k, g->k);
        memset(q + g->k, 0, (size_t)(lda - g->k));
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

/* Rows [i0, i0 + MB), quantised in rows, against every column panel;
 * each group of cp column panels meets the block's row panels, rp at a
 * time, in turn (the columns stay in L1, the block in L2). The outputs go
 * to y (row i0's; row stride n) or are added into res through map. */
static void run_tiles(const i8_job *g, int64_t i0, const i8_rows *rows, float *y) {
    const i8_kernels *kn = &g->kn;
    const int64_t lda = 4 * (int64_t)g->kg;
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
            const uint8_t *at = rows->ap + q * MR * lda;
            float *yt = g->res ? NULL : y + (int64_t)q * MR * g->n + j0;   /* the tile's place */
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
            float *c = whole && yt ? yt : t;   /* whole: straight into y */
            const int64_t ldc = whole && yt ? g->n : tw;
            rai_gemm_tile_prefetch(yt, g->n, g->res, g->n, g->map, r0, mr, j0, nr, g->k);
            if (kn->block) kn->block(g->kg, at, lda, bt, rn, cp, c, ldc, &e);
            else kn->micro(g->kg, at, lda, bt, c, ldc, &e);
            if (!whole)
                rai_gemm_tile_put(t, tw, mr, nr, g->gelu, yt, g->n, g->res, g->n, g->map, r0, j0);
        }
    }
}

/* A thread's buffer: its block of rows quantised (i8_rows, then MB rows
 * of kp bytes), a row of scratch (packing w), and the floats of the rows made by a
 * row source (MB x kx) and of an MLP's hidden rows (MB x hidden). */
typedef struct {
    i8_rows *rows;
    uint8_t *row;
    float *xs, *hid;
} i8_space;

static size_t space_bytes(int64_t kp, int64_t kx, int64_t hidden) {
    const size_t q = (sizeof(i8_rows) + (size_t)(MB + 1) * (size_t)kp + 63) / 64 * 64;
    return q + (size_t)MB * (size_t)(kx + hidden) * sizeof(float) + 64;
}

static i8_space space_at(unsigned char *p, int64_t kp, int64_t kx) {
    i8_space s = {.rows = (i8_rows *)p};
    s.rows->ap = p + sizeof(i8_rows);
    s.row = s.rows->ap + (size_t)MB * (size_t)kp;
    s.xs = (float *)(p + (sizeof(i8_rows) + (size_t)(MB + 1) * (size_t)kp + 63) / 64 * 64);
    s.hid = s.xs + (size_t)MB * (size_t)kx;
    return s;
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
    /* one buffer: w packed (unless it is already), then each thread's space */
    const size_t per_thread = space_bytes(kp, 0, 0);
    const size_t wbytes = pw ? 0 : (packed_bytes(n, k) + 63) / 64 * 64;
    unsigned char *buf = rai_thread_buffer(RAI_BUFFER_GEMM, wbytes + (size_t)nt * per_thread);
    if (!buf) return -1;
    if (pw) g.b = *pw;
    else packed_place(&g.b, buf, n, k);
    unsigned char *threads = buf + wbytes;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const i8_space s = space_at(threads + (size_t)omp_get_thread_num() * per_thread, kp, 0);
        if (!pw) {
#pragma omp for schedule(static)
            for (int p = 0; p < g.npanels; p++)
                pack_cols(&g.b, w, p, g.kn.qweights, (int8_t *)s.row);
        }
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < tasks; t++) {
            pack_rows(&g, x + t * MB * k, t * MB, s.rows, s.xs);
            run_tiles(&g, t * MB, s.rows, res ? NULL : y + t * MB * n);
        }
    }
    return 0;
}

/* ---- the MLP: fc2(GELU(fc1(x))) a block of rows at a time ---------------- */

int rai_gemm_i8_mlp(float *y, const float *x, const rai_row_source *src,
                    const rai_i8_weights *w1, const float *b1, const rai_i8_weights *w2,
                    const float *b2, int64_t m, int c, int hidden,
                    void (*gelu)(float *, const float *, int64_t), float *res, int isa,
                    int nthreads) {
    if (m <= 0 || c <= 0) return 0;
    if (hidden <= 0 || !gelu || !w1 || !w2 || w1->n != hidden || w1->k != c || w2->n != c ||
        w2->k != hidden || hidden > RA_GEMM_I8_KMAX || c > RA_GEMM_I8_KMAX)
        return -1;
    const i8_kernels kn = kernels_of(isa);
    i8_job g1 = {.x = x, .src = src, .bias = b1, .gelu = gelu, .m = m, .n = hidden, .k = c,
                 .kg = (c + 3) / 4, .npanels = (hidden + NR - 1) / NR, .b = *w1, .kn = kn};
    i8_job g2 = {.bias = b2, .y = y, .res = res, .m = m, .n = c, .k = hidden,
                 .kg = (hidden + 3) / 4, .npanels = (c + NR - 1) / NR, .b = *w2, .kn = kn};
#ifdef RA_HAVE_X86_KERNELS
    g1.fused = isa == RA_GEMM_AVX512_VNNI && gelu == rai_gemm_gelu_avx512;
    g2.fused = isa == RA_GEMM_AVX512_VNNI;
#endif
    const int64_t kp = 4 * (int64_t)(g1.kg > g2.kg ? g1.kg : g2.kg), kx = src ? c : 0;
    const int64_t tasks = (m + MB - 1) / MB;
    const int nt = nthreads > 1 && tasks > 1 ? (tasks < nthreads ? (int)tasks : nthreads) : 1;
    const size_t per_thread = space_bytes(kp, kx, hidden);
    unsigned char *buf = rai_thread_buffer(RAI_BUFFER_GEMM, (size_t)nt * per_thread);
    if (!buf) return -1;
#pragma omp parallel for schedule(dynamic) num_threads(nt) if (nt > 1)
    for (int64_t t = 0; t < tasks; t++) {
        /* fc1 and GELU into the thread's hidden rows, fc2 from them: the
         * hidden activations never leave its cache */
        const i8_space s = space_at(buf + (size_t)omp_get_thread_num() * per_thread, kp, kx);
        pack_rows(&g1, src ? NULL : x + t * MB * c, t * MB, s.rows, s.xs);
        run_tiles(&g1, t * MB, s.rows, s.hid);
        pack_rows(&g2, s.hid, t * MB, s.rows, NULL);
        run_tiles(&g2, t * MB, s.rows, res ? NULL : y + t * MB * c);
    }
    return 0;
}
