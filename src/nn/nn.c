/* nn.c - the neural-network layers around attention, forward and backward:
 * Linear, LayerNorm, GELU, residual add, token mean, softmax cross-entropy,
 * dropout and drop-path, patch embedding and patch merging. Every backward
 * function accumulates (+=) into its gradients.
 *
 * This is the framework (threads, blocks of rows and elements, row maps,
 * OpenBLAS as the fallback of the products); the per-ISA kernels are those
 * of the kernel set chosen now (src/kernels/nn_kernels.h, dispatch.c). */
#include "base/internal.h"
#include "nn/nn.h"
#include "nn/precision.h"
#include "kernels/nn_kernels.h"
#include "kernels/gemm_kernels.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

/* ------------------------------------------------------------------------ */
/* Column sums: the reductions over rows of the backward passes               */
/* ------------------------------------------------------------------------ */

/* Below this many elements a loop runs on one thread: starting a team costs
 * more than it saves. */
#define RA_NN_PAR_MIN ((int64_t)1 << 15)
/* Columns per task of a column reduction: one cache line of floats, summed
 * in doubles on the stack, so reductions need no workspace and give the same
 * bits whatever the number of threads. */
#define RA_NN_COLS 16
/* Elements per task of the element-wise loops. */
#define RA_NN_BLOCK ((int64_t)1 << 13)

/* The threads of a loop: ra_threads_get(), one below RA_NN_PAR_MIN
 * elements. */
static int nn_threads(int64_t work) {
    return work >= RA_NN_PAR_MIN ? ra_threads_get() : 1;
}

/* y = fn(x) over n elements in blocks of RA_NN_BLOCK, the blocks in
 * parallel (element-wise kernels: the same bits for any thread count). */
static void run_blocks(void (*fn)(float *, const float *, int64_t), float *y, const float *x,
                       int64_t n) {
    const int64_t blocks = (n + RA_NN_BLOCK - 1) / RA_NN_BLOCK;
#pragma omp parallel for schedule(static) num_threads(nn_threads(n))
    for (int64_t t = 0; t < blocks; t++) {
        const int64_t i0 = t * RA_NN_BLOCK;
        fn(y + i0, x + i0, n - i0 < RA_NN_BLOCK ? n - i0 : RA_NN_BLOCK);
    }
}

int rai_nn_simd(void) { return rai_nn_kernel_active() != &rai_nn_kernel_ref; }

/* out (N) += sum over rows of a (M, N), in double. */
static void colsum_add(float *out, const float *a, int64_t m, int n) {
    const int chunks = (n + RA_NN_COLS - 1) / RA_NN_COLS;
#pragma omp parallel for schedule(static) num_threads(nn_threads(m * n)) if (chunks > 1)
    for (int t = 0; t < chunks; t++) {
        const int j0 = t * RA_NN_COLS, jn = n - j0 < RA_NN_COLS ? n - j0 : RA_NN_COLS;
        double acc[RA_NN_COLS] = {0};
        for (int64_t i = 0; i < m; i++) {
            const float *r = a + i * n + j0;
            for (int j = 0; j < jn; j++) acc[j] += r[j];
        }
        for (int j = 0; j < jn; j++) out[j0 + j] = (float)((double)out[j0 + j] + acc[j]);
    }
}

/* ------------------------------------------------------------------------ */
/* Linear                                                                    */
/* ------------------------------------------------------------------------ */

/* RELATTN_GEMM=blas asks for OpenBLAS's products everywhere (for
 * comparisons); read once. */
static int gemm_blas(void) {
    static _Atomic int env = -1;
    int e = env;
    if (e < 0) {
        const char *v = getenv("RELATTN_GEMM");
        env = e = v && strcmp(v, "blas") == 0;
    }
    return e;
}

/* The layers' kernels of the set chosen now (src/kernels/dispatch.c), a
 * copy without the fused products when OpenBLAS is asked for. */
static rai_nn_kernel nn_kernels(void) {
    rai_nn_kernel kn = *rai_nn_kernel_active();
    if (gemm_blas()) kn.gemm = NULL, kn.gemm_tn = NULL;
    return kn;
}

/* Threads of a product: one below about a million multiply-adds. */
static int gemm_threads(int64_t m, int n, int k) {
    return (double)m * n * k >= (double)(1 << 20) ? ra_threads_get() : 1;
}

/* c = bias + a . b or c += a . b (strides as rai_gemm) on the portable
 * product (src/kernels/gemm.c) with the kernel set's micro-kernel; -1 when
 * OpenBLAS is asked for or memory runs out (nothing done). */
static int gemm_portable(float *c, int64_t ldc, const float *a, int64_t ars, int64_t acs,
                         const float *b, int64_t brs, int64_t bcs, int64_t m, int n, int k,
                         const float *bias, int accumulate) {
    if (gemm_blas()) return -1;
    return rai_gemm(c, ldc, a, ars, acs, b, brs, bcs, m, n, k, bias, accumulate,
                    rai_nn_kernel_active()->gemm_micro, gemm_threads(m, n, k));
}

/* y (M, N) = x (M, K) . w (N, K)^T + b where the kernel set has no fused
 * product (or it declined): the portable product, else OpenBLAS. */
static void linear_unfused(float *y, const float *x, const float *w, const float *b, int64_t m,
                           int n, int k) {
    if (gemm_portable(y, n, x, k, 1, w, 1, k, m, n, k, b, 0) == 0) return;
    if (b)
        for (int64_t i = 0; i < m; i++) memcpy(y + i * n, b, (size_t)n * sizeof *y);
    else if (k <= 0)
        memset(y, 0, (size_t)m * n * sizeof *y);
    if (k <= 0) return;   /* BLAS rejects a leading dimension of 0 */
    /* row-major y (M, N) += x (M, K) . w (N, K)^T; BLAS takes int sizes, and
     * the callers bound M*N and M*K, so split M only if it is huge. */
    const int64_t chunk = INT32_MAX / 2;
    for (int64_t i0 = 0; i0 < m; i0 += chunk) {
        int mm = (int)(m - i0 < chunk ? m - i0 : chunk);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mm, n, k, 1.0f,
                    x + i0 * k, k, w, k, b ? 1.0f : 0.0f, y + i0 * n, n);
    }
}

/* The micro-kernel of the bf16 product (gemm_bf16.c) when the calling
 * thread's precision is bf16 and the kernel set has it (and K >= 1), else
 * -1 (the reference path, or another precision). */
static int bf16_product(int k) {
    return rai_precision_get() == RA_PRECISION_BF16 && k > 0 ? rai_bf16_micro() : -1;
}

void rai_linear_fused(float *y, const float *x, const float *w, const float *b, int64_t m, int n,
                      int k, int gelu, float *res, const int32_t *map) {
    if (m <= 0 || n <= 0) return;
    const ra_precision p = rai_precision_get();
    if (p == RA_PRECISION_INT8) {   /* integer sums (gemm_i8.c); failure fails the forward */
        const rai_nn_kernel *kn = rai_nn_kernel_active();
        if (rai_gemm_i8(y, x, w, b, m, n, k, rai_packed_find(w, n, k), gelu ? kn->gelu : NULL,
                        res, map, kn->gemm_i8_micro, gemm_threads(m, n, k)) != 0)
            rai_precision_fail();
        return;
    }
    /* bf16 on bfloat16 dot products (gemm_bf16.c), where the kernel set
     * has them: w packed once by the model (inference), else at the call */
    const int bf16 = bf16_product(k);
    if (bf16 >= 0) {
        const rai_bf16_epilogue e = {.gelu = gelu ? rai_nn_kernel_active()->gelu : NULL,
                                     .res = res, .map = map};
        if (rai_gemm_bf16_ext(y, x, w, 0, b, m, n, k, rai_packed_find_bf16(w, n, k), &e, bf16,
                              gemm_threads(m, n, k)) != 0)
            rai_precision_fail();
        return;
    }
    /* the reference path of bf16: the input and the weights rounded (the
     * weights once by the model, for inference; float32: themselves);
     * without memory the product is skipped and the forward fails */
    const float *wr = p == RA_PRECISION_BF16 ? rai_packed_find_rounded(w, n, k) : NULL;
    if (!(x = rai_precision_input(x, m, k, p, 0)) ||
        !(w = wr ? wr : rai_precision_input(w, n, k, p, 1)))
        return;
    const rai_nn_kernel kn = nn_kernels();
    if (k > 0 && kn.gemm &&
        kn.gemm(y, n, x, k, w, k, 0, m, n, k, b, gelu, NULL, res, n, map,
                gemm_threads(m, n, k)) == 0)
        return;
    linear_unfused(y, x, w, b, m, n, k);
    if (gelu) ra_gelu_forward(y, y, m * n);
    if (res) rai_rows_scatter_add(res, y, map, m, n);
}

void ra_linear_forward(float *y,        /* (M, N) */
                       const float *x,  /* (M, K) */
                       const float *w,  /* (N, K) */
                       const float *b,  /* (N) or NULL */
                       int64_t m, int n, int k) {
    rai_linear_fused(y, x, w, b, m, n, k, 0, NULL, NULL);
}

/* y[i] = GELU'(x[i]) (y may be x): the backward's expression, by the
 * kernel set. */
static void gelu_deriv_rows(float *y, const float *x, int64_t n) {
    if (n <= 0) return;
    run_blocks(rai_nn_kernel_active()->gelu_deriv, y, x, n);
}

/* y[i] *= x[i] */
static void mul_into(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = y[i] * x[i];
}

void rai_linear_backward_fused(float *dx,        /* (M, K) or NULL */
                               float *dw,        /* (N, K) or NULL */
                               float *db,        /* (N) or NULL */
                               const float *dy,  /* (M, N) */
                               const float *x,   /* (M, K), for dw */
                               const float *w,   /* (N, K), for dx */
                               int64_t m, int n, int k, int set,
                               const float *gd) {   /* (M, K) or NULL */
    if (m <= 0 || n <= 0) return;
    if (gd) set = 1;
    const ra_precision p = rai_precision_get();
    const int bf16 = bf16_product(k);
    if (bf16 >= 0) {
        /* dx = or += dy . w (w read transposed as it is packed), times gd;
         * dw += dy^T x and db from dy as it is (in double: colsum_add's
         * bits) in one pass over dy */
        const int nt = gemm_threads(m, n, k);
        const rai_bf16_epilogue e = {.gm = gd, .res = set ? NULL : dx};
        if ((dx && rai_gemm_bf16_ext(dx, dy, w, 1, NULL, m, k, n, NULL, &e, bf16, nt) != 0) ||
            (dw && rai_gemm_bf16_tn(dw, db, dy, x, m, n, k, bf16, nt) != 0))
            rai_precision_fail();
        else if (db && !dw)
            colsum_add(db, dy, m, n);
        return;
    }
    if (p == RA_PRECISION_BF16 && k > 0) {
        /* the reference path of bf16: the float32 products of dy, w and x
         * rounded (dy and w for dx, then dy and x for dw) */
        const float *dyr = rai_precision_input(dy, m, n, p, 0);
        const float *wr = dyr && dx ? rai_precision_input(w, n, k, p, 1) : NULL;
        const ra_precision was = rai_precision_set(RA_PRECISION_FP32);
        if (wr) rai_linear_backward_fused(dx, NULL, NULL, dyr, NULL, wr, m, n, k, set, gd);
        const float *xr = dyr && dw ? rai_precision_input(x, m, k, p, 1) : NULL;
        if (xr) rai_linear_backward_fused(NULL, dw, NULL, dyr, xr, NULL, m, n, k, set, NULL);
        rai_precision_set(was);
        if (db) colsum_add(db, dy, m, n);
        return;
    }
    const rai_nn_kernel kn = nn_kernels();
    if (k > 0 && kn.gemm) {
        /* dx = or += dy . w on the forward's product, reading w as it is
         * (transposed); dw += dy^T x and db += column sums of dy in one
         * pass over dy */
        if (!dx || kn.gemm(dx, k, dy, n, w, k, 1, m, k, n, NULL, 0, gd,
                           set ? NULL : dx, k, NULL, gemm_threads(m, n, k)) == 0) {
            if (dw && kn.gemm_tn &&
                kn.gemm_tn(dw, k, dy, n, x, k, m, n, k, db, gemm_threads(m, n, k)) == 0)
                return;
            if (dw)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, (int)m, 1.0f, dy, n, x,
                            k, 1.0f, dw, k);
            if (db) colsum_add(db, dy, m, n);
            return;
        }
    }
    /* the portable product, or OpenBLAS when it is asked for (or memory
     * for the packed panels runs out) */
    const int64_t chunk = INT32_MAX / 2;
    if (dx && k > 0 && gemm_portable(dx, k, dy, n, 1, w, k, 1, m, k, n, NULL, !set) != 0) {
        if (set) memset(dx, 0, (size_t)m * k * sizeof *dx);
        for (int64_t i0 = 0; i0 < m; i0 += chunk) {   /* dx (M, K) += dy (M, N) . w (N, K) */
            int mm = (int)(m - i0 < chunk ? m - i0 : chunk);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mm, k, n, 1.0f,
                        dy + i0 * n, n, w, k, 1.0f, dx + i0 * k, k);
        }
    }
    for (int64_t i0 = 0; dw && k > 0 && i0 < m; i0 += chunk) {
        /* dw (N, K) += dy^T (N, M) . x (M, K), the sum over M in fixed chunks */
        int mm = (int)(m - i0 < chunk ? m - i0 : chunk);
        if (gemm_portable(dw, k, dy + i0 * n, 1, n, x + i0 * k, k, 1, n, k, mm, NULL, 1) != 0)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, mm, 1.0f,
                        dy + i0 * n, n, x + i0 * k, k, 1.0f, dw, k);
    }
    if (db) colsum_add(db, dy, m, n);   /* db (N) += sum_rows dy, in double */
    if (dx && gd) run_blocks(mul_into, dx, gd, m * k);
}

/* ACCUMULATES into dx, dw, db (each may be NULL). */
void ra_linear_backward(float *dx,        /* (M, K) or NULL */
                        float *dw,        /* (N, K) or NULL */
                        float *db,        /* (N) or NULL */
                        const float *dy,  /* (M, N) */
                        const float *x,   /* (M, K), for dw */
                        const float *w,   /* (N, K), for dx */
                        int64_t m, int n, int k) {
    rai_linear_backward_fused(dx, dw, db, dy, x, w, m, n, k, 0, NULL);
}

void rai_gelu_keep(float *g, float *gd, const float *h, int64_t n) {
    if (n <= 0) return;
    const rai_nn_kernel *kn = rai_nn_kernel_active();
    if (!gd || !kn->gelu_keep) {
        if (gd) gelu_deriv_rows(gd, h, n);   /* before g: h may be g */
        ra_gelu_forward(g, h, n);
        return;
    }
    const int64_t blocks = (n + RA_NN_BLOCK - 1) / RA_NN_BLOCK;
#pragma omp parallel for schedule(static) num_threads(nn_threads(n))
    for (int64_t t = 0; t < blocks; t++) {
        const int64_t i0 = t * RA_NN_BLOCK;
        kn->gelu_keep(g + i0, gd + i0, h + i0, n - i0 < RA_NN_BLOCK ? n - i0 : RA_NN_BLOCK);
    }
}

/* ------------------------------------------------------------------------ */
/* LayerNorm                                                                 */
/* ------------------------------------------------------------------------ */

typedef void (*ln_row_fn)(float *, float *, float *, const float *, const float *,
                          const float *, int, float);
typedef void (*ln_rows4_fn)(float *const[4], float *const[4], float *const[4],
                            const float *const[4], const float *, const float *, int, float);
typedef void (*ln_f32_fn)(float *, const float *, const float *, const float *, int, float);

/* The float32 row of the calling thread's precision where it has one
 * (the inference of bf16 and int8: their products round the rows to 8
 * bits of mantissa or quantise them to 7 bits, the statistics in double
 * buy nothing there), else NULL. Training keeps double (its LayerNorm
 * saves the statistics and never comes here). */
static ln_f32_fn ln_f32(const rai_nn_kernel *kn) {
    return rai_precision_get() != RA_PRECISION_FP32 ? kn->layernorm_row_f32 : NULL;
}

/* Asks for x row src[r] (c floats; none where negative): rows through a
 * map (a window's tokens, from all over the stream) come from memory one
 * at a time, unseen by the hardware's prefetcher. */
static inline void ask_row(const float *x, const int32_t *src, int64_t r, int c) {
    for (int j = 0; src[r] >= 0 && j < c; j += 16) __builtin_prefetch(x + src[r] * c + j, 0, 3);
}

/* Rows i0 .. i1-1 of a LayerNorm: y row i - i0 from x row src[i] (src
 * NULL: row i; a negative src[i]: zeros), mean and rstd (if given) at i;
 * every row through f32 where given (no mean or rstd then), else four rows
 * at a time through four where given and none of them is a zero row. */
static void ln_block(float *y, float *mean, float *rstd, const float *x, const int32_t *src,
                     int64_t i0, int64_t i1, int c, const float *gamma, const float *beta,
                     float eps, ln_row_fn row, ln_rows4_fn four, ln_f32_fn f32) {
    for (int64_t i = i0; i < i1;) {
        float *yr[4], *mr[4], *rr[4];
        const float *xr[4];
        int n = 1;   /* rows of this step */
        if (!f32 && four && i + 4 <= i1) {
            n = 4;
            for (int r = 0; r < 4; r++) {
                const int64_t s = src ? src[i + r] : i + r;
                if (s < 0) n = 1;
                xr[r] = x + (s < 0 ? 0 : s) * c, yr[r] = y + (i - i0 + r) * c;
                mr[r] = mean ? mean + i + r : NULL, rr[r] = rstd ? rstd + i + r : NULL;
            }
        }
        for (int64_t r = i + 4; src && r < i + 4 + n && r < i1; r++)   /* as many, 4 ahead */
            ask_row(x, src, r, c);
        const int64_t s = src ? src[i] : i;
        if (n == 4)
            four(yr, mr, rr, xr, gamma, beta, c, eps);
        else if (s < 0)
            memset(y + (i - i0) * c, 0, (size_t)c * sizeof *y);
        else if (f32)
            f32(y + (i - i0) * c, x + s * c, gamma, beta, c, eps);
        else
            row(y + (i - i0) * c, mean ? mean + i : NULL, rstd ? rstd + i : NULL, x + s * c,
                gamma, beta, c, eps);
        i += n;
    }
}

/* ln_block over m rows, split between the threads in blocks of 64 rows */
static void ln_all(float *y, float *mean, float *rstd, const float *x, const int32_t *src,
                   int64_t m, int c, const float *gamma, const float *beta, float eps) {
    if (m <= 0 || c <= 0) return;
    const rai_nn_kernel *kn = rai_nn_kernel_active();
    const ln_row_fn row = kn->layernorm_row;
    const ln_rows4_fn four = kn->layernorm_rows4;
    const ln_f32_fn f32 = mean || rstd ? NULL : ln_f32(kn);
    const int64_t nb = (m + 63) / 64;
#pragma omp parallel for schedule(static) num_threads(nn_threads(m * c))
    for (int64_t b = 0; b < nb; b++)
        ln_block(y + 64 * b * c, mean, rstd, x, src, 64 * b, 64 * b + 64 < m ? 64 * b + 64 : m, c,
                 gamma, beta, eps, row, four, f32);
}

void ra_layernorm_forward(float *y,            /* (M, C), may be x */
                          float *mean,         /* (M) saved */
                          float *rstd,         /* (M) saved */
                          const float *x,      /* (M, C) */
                          const float *gamma,  /* (C) or NULL */
                          const float *beta,   /* (C) or NULL */
                          int64_t m, int c, float eps) {
    ln_all(y, mean, rstd, x, NULL, m, c, gamma, beta, eps);
}

void rai_layernorm_rows(float *y, const float *x, const int32_t *src, int64_t m, int c,
                        const float *gamma, const float *beta, float eps) {
    ln_all(y, NULL, NULL, x, src, m, c, gamma, beta, eps);
}

/* A LayerNorm as the row source of a product (gemm_kernels.h): rows made
 * by ln_block, with the bits of rai_layernorm_rows. */
typedef struct {
    const float *x;
    const int32_t *src;
    const rai_ln *ln;
    int c;
    ln_row_fn row;
    ln_rows4_fn four;
    ln_f32_fn f32;
} ln_source;

static void ln_make(const void *ctx, float *dst, int64_t i0, int n) {
    const ln_source *s = ctx;
    ln_block(dst, NULL, NULL, s->x, s->src, i0, i0 + n, s->c, s->ln->gamma, s->ln->beta,
             s->ln->eps, s->row, s->four, s->f32);
}

void rai_mlp_fused(float *y, const float *x, const rai_ln *ln, const float *w1, const float *b1,
                   const float *w2, const float *b2, int64_t m, int c, int hidden, float *hid,
                   float *res) {
    if (m <= 0 || c <= 0) return;
    const rai_nn_kernel *kn = rai_nn_kernel_active();
    const rai_i8_weights *q1 = rai_precision_get() == RA_PRECISION_INT8
                                   ? rai_packed_find(w1, hidden, c) : NULL;
    const rai_i8_weights *q2 = q1 ? rai_packed_find(w2, c, hidden) : NULL;
    if (q2) {   /* int8: the LayerNorm, both layers a block of rows at a time (gemm_i8.c) */
        const ln_source ls = {.x = x, .ln = ln, .c = c, .row = kn->layernorm_row,
                              .four = kn->layernorm_rows4, .f32 = ln_f32(kn)};
        const rai_row_source src = {ln_make, &ls};
        if (rai_gemm_i8_mlp(y, x, ln ? &src : NULL, q1, b1, q2, b2, m, c, hidden, kn->gelu, res,
                            kn->gemm_i8_micro, gemm_threads(m, hidden, c)) != 0)
            rai_precision_fail();
        return;
    }
    if (ln) {   /* the LayerNorm into y first */
        rai_layernorm_rows(y, x, NULL, m, c, ln->gamma, ln->beta, ln->eps);
        x = y;
    }
    const int bf16 = bf16_product(c);
    const rai_bf16_weights *p1 = bf16 >= 0 ? rai_packed_find_bf16(w1, hidden, c) : NULL;
    const rai_bf16_weights *p2 = p1 ? rai_packed_find_bf16(w2, c, hidden) : NULL;
    if (p2) {   /* both layers a block of rows at a time (gemm_bf16.c) */
        if (rai_gemm_bf16_mlp(y, x, p1, b1, p2, b2, m, c, hidden, kn->gelu, res, bf16,
                              gemm_threads(m, hidden, c)) != 0)
            rai_precision_fail();
        return;
    }
    rai_linear_fused(hid, x, w1, b1, m, hidden, c, 1, NULL, NULL);
    rai_linear_fused(y, hid, w2, b2, m, c, hidden, 0, res, NULL);
}

void rai_rows_gather(float *y, const float *x, const int32_t *map, int64_t rows, int c) {
    if (rows <= 0 || c <= 0) return;
    if (!map) {
        memcpy(y, x, (size_t)(rows * c) * sizeof *y);
        return;
    }
#pragma omp parallel for schedule(static) num_threads(nn_threads(rows * c))
    for (int64_t r = 0; r < rows; r++) {
        if (map[r] >= 0) memcpy(y + r * c, x + (int64_t)map[r] * c, (size_t)c * sizeof *y);
        else memset(y + r * c, 0, (size_t)c * sizeof *y);
    }
}

void rai_rows_scatter_add(float *x, const float *a, const int32_t *dst, int64_t m, int c) {
    if (m <= 0 || c <= 0) return;
#pragma omp parallel for schedule(static) num_threads(nn_threads(m * c))
    for (int64_t i = 0; i < m; i++) {
        const int64_t r = dst ? dst[i] : i;
        if (r < 0) continue;
        float *xr = x + r * c;
        const float *ar = a + i * c;
        for (int j = 0; j < c; j++) xr[j] = xr[j] + ar[j];
    }
}

/* Rows per block of a kernel set's LayerNorm backward: each block's column
 * sums (dgamma, dbeta) go to its own slot, added in block order, so the
 * result does not depend on the threads. */
#define LN_ROWS 256

/* A buffer kept per thread between calls (freed with the thread): the
 * scratch of the column reductions, so that no call allocates once it has
 * grown. */
static tss_t scratch_key;
static once_flag scratch_once = ONCE_FLAG_INIT;
static _Atomic int scratch_ok;   /* atomic: what call_once publishes, as TSan sees it */
typedef struct scratch_buf { void *p; size_t cap; } scratch_buf;
static void scratch_free(void *v) {
    scratch_buf *b = v;
    if (b) free(b->p);
    free(b);
}
static void scratch_init(void) { scratch_ok = tss_create(&scratch_key, scratch_free) == thrd_success; }
static void *nn_scratch(size_t bytes) {
    call_once(&scratch_once, scratch_init);
    if (!scratch_ok) return NULL;
    scratch_buf *b = tss_get(scratch_key);
    if (!b) {
        if (!(b = calloc(1, sizeof *b))) return NULL;
        if (tss_set(scratch_key, b) != thrd_success) return free(b), NULL;
    }
    if (bytes > b->cap) {
        free(b->p);
        b->p = malloc(bytes);
        b->cap = b->p ? bytes : 0;
    }
    return b->p;
}

/* ACCUMULATES into dx, dgamma, dbeta (each may be NULL). */
void ra_layernorm_backward(float *dx,            /* (M, C) or NULL */
                           float *dgamma,        /* (C) or NULL */
                           float *dbeta,         /* (C) or NULL */
                           const float *dy,      /* (M, C) */
                           const float *x,       /* (M, C) forward input */
                           const float *mean,    /* (M) saved */
                           const float *rstd,    /* (M) saved */
                           const float *gamma,   /* (C) or NULL */
                           int64_t m, int c) {
    if (m <= 0 || c <= 0) return;
    const rai_nn_kernel *kn = rai_nn_kernel_active();
    if (kn->layernorm_backward_rows) {
        const int64_t nb = (m + LN_ROWS - 1) / LN_ROWS;
        const int sums = dgamma || dbeta;
        double *part = sums ? nn_scratch((size_t)nb * 2 * c * sizeof(double)) : NULL;
        if (!sums || part) {
#pragma omp parallel for schedule(static) num_threads(nn_threads(m * c))
            for (int64_t t = 0; t < nb; t++) {
                const int64_t i0 = t * LN_ROWS, rows = m - i0 < LN_ROWS ? m - i0 : LN_ROWS;
                double *pg = part ? part + t * 2 * c : NULL;
                if (pg) memset(pg, 0, 2 * (size_t)c * sizeof *pg);
                kn->layernorm_backward_rows(dx ? dx + i0 * c : NULL, pg, pg ? pg + c : NULL,
                                            dy + i0 * c, x + i0 * c, mean + i0, rstd + i0,
                                            gamma, rows, c);
            }
            if (sums) {
#pragma omp parallel for schedule(static) num_threads(nn_threads(m * c / 8)) if (c >= 64)
                for (int j = 0; j < c; j++) {
                    double ag = 0, ab = 0;
                    for (int64_t t = 0; t < nb; t++) {
                        ag += part[t * 2 * c + j];
                        ab += part[t * 2 * c + c + j];
                    }
                    if (dgamma) dgamma[j] = (float)((double)dgamma[j] + ag);
                    if (dbeta) dbeta[j] = (float)((double)dbeta[j] + ab);
                }
            }
            return;
        }
    }
    /* the reference: dx by blocks of rows, the sums by strips of columns
     * over all rows (no scratch) */
    if (dx) {
        const int64_t nb = (m + 63) / 64;
#pragma omp parallel for schedule(static) num_threads(nn_threads(m * c))
        for (int64_t t = 0; t < nb; t++) {
            const int64_t i0 = 64 * t, rows = m - i0 < 64 ? m - i0 : 64;
            rai_nn_layernorm_backward_dx_ref(dx + i0 * c, dy + i0 * c, x + i0 * c, mean + i0,
                                             rstd + i0, gamma, rows, c);
        }
    }
    if (!dgamma && !dbeta) return;
    const int chunks = (c + RA_NN_COLS - 1) / RA_NN_COLS;
#pragma omp parallel for schedule(static) num_threads(nn_threads(m * c)) if (chunks > 1)
    for (int t = 0; t < chunks; t++) {
        const int j0 = t * RA_NN_COLS, jn = c - j0 < RA_NN_COLS ? c - j0 : RA_NN_COLS;
        double ag[RA_NN_COLS] = {0}, ab[RA_NN_COLS] = {0};
        rai_nn_layernorm_backward_sums_ref(ag, ab, dy, x, mean, rstd, m, c, j0, jn);
        for (int j = 0; j < jn; j++) {
            if (dgamma) dgamma[j0 + j] = (float)((double)dgamma[j0 + j] + ag[j]);
            if (dbeta) dbeta[j0 + j] = (float)((double)dbeta[j0 + j] + ab[j]);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* GELU, residual add, mean over tokens                                      */
/* ------------------------------------------------------------------------ */

void ra_gelu_forward(float *y,        /* (n), may be x */
                     const float *x,  /* (n) */
                     int64_t n) {
    if (n <= 0) return;
    run_blocks(rai_nn_kernel_active()->gelu, y, x, n);
}

/* ACCUMULATES into dx. */
void ra_gelu_backward(float *dx,        /* (n), may be dy */
                      const float *dy,  /* (n) */
                      const float *x,   /* (n) forward input */
                      int64_t n) {
    if (n <= 0) return;
    void (*fn)(float *, const float *, const float *, int64_t) =
        rai_nn_kernel_active()->gelu_backward;
    const int64_t blocks = (n + RA_NN_BLOCK - 1) / RA_NN_BLOCK;
#pragma omp parallel for schedule(static) num_threads(nn_threads(n))
    for (int64_t t = 0; t < blocks; t++) {
        const int64_t i0 = t * RA_NN_BLOCK;
        fn(dx + i0, dy + i0, x + i0, n - i0 < RA_NN_BLOCK ? n - i0 : RA_NN_BLOCK);
    }
}

void rai_zero(float *p, int64_t n) {
    const int64_t blocks = (n + RA_NN_BLOCK - 1) / RA_NN_BLOCK;
#pragma omp parallel for schedule(static) num_threads(nn_threads(n)) if (blocks > 1)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t i = b * RA_NN_BLOCK, len = n - i < RA_NN_BLOCK ? n - i : RA_NN_BLOCK;
        memset(p + i, 0, (size_t)len * sizeof *p);
    }
}

void ra_add(float *y,        /* (n), may be a or b */
            const float *a,  /* (n) */
            const float *b,  /* (n) */
            int64_t n) {
#pragma omp parallel for schedule(static) num_threads(nn_threads(n))
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void ra_mean_tokens_forward(float *y,        /* (B, C) */
                            const float *x,  /* (B, N, C) */
                            int b, int64_t n, int c) {
    if (b <= 0 || n <= 0 || c <= 0) return;
    for (int s = 0; s < b; s++) {
        const float *xs = x + (int64_t)s * n * c;
        float *ys = y + (int64_t)s * c;
        for (int j = 0; j < c; j++) ys[j] = 0.0f;
        colsum_add(ys, xs, n, c);
        for (int j = 0; j < c; j++) ys[j] = (float)((double)ys[j] / (double)n);
    }
}

/* ACCUMULATES into dx. */
void ra_mean_tokens_backward(float *dx,        /* (B, N, C) */
                             const float *dy,  /* (B, C) */
                             int b, int64_t n, int c) {
    if (b <= 0 || n <= 0 || c <= 0) return;
    const float fn = (float)n;
#pragma omp parallel for schedule(static) num_threads(nn_threads((int64_t)b * n * c))
    for (int64_t r = 0; r < (int64_t)b * n; r++) {
        const float *g = dy + (r / n) * c;
        float *d = dx + r * c;
        for (int j = 0; j < c; j++) d[j] += g[j] / fn;
    }
}

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy with label smoothing                                */
/* ------------------------------------------------------------------------ */

static ra_status ce_check(const char *fn, const int32_t *targets, int b, int k,
                          float smoothing) {
    if (b < 1 || k < 1) return rai_fail(RA_ERR_ARG, "%s: batch %d, classes %d", fn, b, k);
    if (!(smoothing >= 0.0f && smoothing <= 1.0f))
        return rai_fail(RA_ERR_ARG, "%s: label smoothing %g not in [0, 1]", fn, smoothing);
    for (int i = 0; i < b; i++)
        if (targets[i] < 0 || targets[i] >= k)
            return rai_fail(RA_ERR_ARG, "%s: target %d of sample %d not in [0, %d)", fn,
                            (int)targets[i], i, k);
    return RA_OK;
}

ra_status ra_cross_entropy_forward(float *loss,             /* (1) */
                                   float *probs,            /* (B, K) saved */
                                   const float *logits,     /* (B, K) */
                                   const int32_t *targets,  /* (B) */
                                   int b, int k, float smoothing) {
    ra_status st = ce_check("ra_cross_entropy_forward", targets, b, k, smoothing);
    if (st != RA_OK) return st;
    const double eps = smoothing;
    double total = 0;
    for (int i = 0; i < b; i++) {
        const float *l = logits + (int64_t)i * k;
        float *p = probs + (int64_t)i * k;
        double mx = l[0], se = 0, sl = 0;
        for (int j = 1; j < k; j++)
            if (l[j] > mx) mx = l[j];
        for (int j = 0; j < k; j++) {
            se += exp(l[j] - mx);
            sl += l[j];
        }
        const double lse = mx + log(se);
        for (int j = 0; j < k; j++) p[j] = (float)exp(l[j] - lse);
        const double nll = lse - l[targets[i]];      /* -logp[target] */
        const double smooth = (double)k * lse - sl;  /* sum_k -logp[k] */
        total += (1.0 - eps) * nll + eps / k * smooth;
    }
    *loss = (float)(total / b);
    return RA_OK;
}

/* ACCUMULATES into dlogits. */
ra_status ra_cross_entropy_backward(float *dlogits,          /* (B, K) */
                                    float dloss,
                                    const float *probs,      /* (B, K) saved */
                                    const int32_t *targets,  /* (B) */
                                    int b, int k, float smoothing) {
    ra_status st = ce_check("ra_cross_entropy_backward", targets, b, k, smoothing);
    if (st != RA_OK) return st;
    const double eps = smoothing, g = (double)dloss / b, off = eps / k;
    for (int i = 0; i < b; i++) {
        const float *p = probs + (int64_t)i * k;
        float *d = dlogits + (int64_t)i * k;
        for (int j = 0; j < k; j++) {
            const double t = (j == targets[i] ? 1.0 - eps : 0.0) + off;
            d[j] = (float)((double)d[j] + g * ((double)p[j] - t));
        }
    }
    return RA_OK;
}

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy against soft targets                                */
/* ------------------------------------------------------------------------ */

/* timm's SoftTargetCrossEntropy: the targets of Mixup / CutMix. */
static ra_status soft_ce_check(const char *fn, const void *out, const float *probs,
                               const float *targets, int b, int k) {
    if (b < 1 || k < 1) return rai_fail(RA_ERR_ARG, "%s: batch %d, classes %d", fn, b, k);
    if (!out || !probs || !targets) return rai_fail(RA_ERR_ARG, "%s: a NULL argument", fn);
    for (int64_t i = 0; i < (int64_t)b * k; i++)
        if (!(targets[i] >= 0.0f && targets[i] <= FLT_MAX))
            return rai_fail(RA_ERR_ARG, "%s: target %g of sample %lld, class %lld is not a "
                            "finite number >= 0", fn, (double)targets[i],
                            (long long)(i / k), (long long)(i % k));
    return RA_OK;
}

ra_status ra_cross_entropy_soft_forward(float *loss,            /* (1) */
                                        float *probs,           /* (B, K) saved */
                                        const float *logits,    /* (B, K) */
                                        const float *targets,   /* (B, K) */
                                        int b, int k) {
    ra_status st = soft_ce_check("ra_cross_entropy_soft_forward", loss, probs, targets, b, k);
    if (st != RA_OK) return st;
    if (!logits) return rai_fail(RA_ERR_ARG, "ra_cross_entropy_soft_forward: logits NULL");
    double total = 0;
    for (int i = 0; i < b; i++) {
        const float *l = logits + (int64_t)i * k, *t = targets + (int64_t)i * k;
        float *p = probs + (int64_t)i * k;
        double mx = l[0], se = 0, row = 0;
        for (int j = 1; j < k; j++)
            if (l[j] > mx) mx = l[j];
        for (int j = 0; j < k; j++) se += exp(l[j] - mx);
        const double lse = mx + log(se);
        for (int j = 0; j < k; j++) {
            p[j] = (float)exp(l[j] - lse);
            row += (double)t[j] * (lse - l[j]);   /* t * -logp */
        }
        total += row;
    }
    *loss = (float)(total / b);
    return RA_OK;
}

/* ACCUMULATES into dlogits. */
ra_status ra_cross_entropy_soft_backward(float *dlogits,         /* (B, K) */
                                         float dloss,
                                         const float *probs,     /* (B, K) saved */
                                         const float *targets,   /* (B, K) */
                                         int b, int k) {
    ra_status st = soft_ce_check("ra_cross_entropy_soft_backward", dlogits, probs, targets, b, k);
    if (st != RA_OK) return st;
    const double g = (double)dloss / b;
    for (int i = 0; i < b; i++) {
        const float *p = probs + (int64_t)i * k, *t = targets + (int64_t)i * k;
        float *d = dlogits + (int64_t)i * k;
        double ts = 0;
        for (int j = 0; j < k; j++) ts += t[j];
        for (int j = 0; j < k; j++)
            d[j] = (float)((double)d[j] + g * ((double)p[j] * ts - (double)t[j]));
    }
    return RA_OK;
}

/* ------------------------------------------------------------------------ */
/* Dropout and DropPath                                                      */
/* ------------------------------------------------------------------------ */

/* PyTorch and timm multiply by a float mask divided by (1 - p), i.e. by the
 * float 1 / (1 - p); a dropped element is x * 0 (NaN stays NaN). The draws
 * are sequential so a seed gives the same masks whatever the threads. */
static float keep_scale(float p) {
    return p >= 1.0f ? 0.0f : 1.0f / (float)(1.0 - (double)p);
}

ra_status ra_dropout_forward(float *y,          /* (n), may be x */
                             uint8_t *keep,     /* (n) saved, 0 or 1 */
                             const float *x,    /* (n) */
                             int64_t n, float p, ra_rng *rng) {
    if (!(p >= 0.0f && p <= 1.0f))
        return rai_fail(RA_ERR_ARG, "ra_dropout_forward: p = %g not in [0, 1]", p);
    if (n < 0) return rai_fail(RA_ERR_ARG, "ra_dropout_forward: n = %lld", (long long)n);
    const float scale = keep_scale(p);
    if (p == 0.0f || p == 1.0f) {   /* no draws, as PyTorch */
        for (int64_t i = 0; i < n; i++) {
            keep[i] = p == 0.0f;
            y[i] = p == 0.0f ? x[i] : x[i] * 0.0f;
        }
        return RA_OK;
    }
    const double q = 1.0 - (double)p;
    for (int64_t i = 0; i < n; i++) {
        const int k = ra_rng_uniform(rng) < q;
        keep[i] = (uint8_t)k;
        y[i] = x[i] * (k ? scale : 0.0f);
    }
    return RA_OK;
}

/* ACCUMULATES into dx. */
void ra_dropout_backward(float *dx,            /* (n), may be dy */
                         const float *dy,      /* (n) */
                         const uint8_t *keep,  /* (n) saved */
                         int64_t n, float p) {
    const float scale = keep_scale(p);
#pragma omp parallel for schedule(static) num_threads(nn_threads(n))
    for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * (keep[i] ? scale : 0.0f);
}

ra_status ra_droppath_forward(float *y,          /* (B, n), may be x */
                              uint8_t *keep,     /* (B) saved, 0 or 1 */
                              const float *x,    /* (B, n) */
                              int b, int64_t n, float p, ra_rng *rng) {
    if (!(p >= 0.0f && p <= 1.0f))
        return rai_fail(RA_ERR_ARG, "ra_droppath_forward: p = %g not in [0, 1]", p);
    if (b < 0 || n < 0)
        return rai_fail(RA_ERR_ARG, "ra_droppath_forward: B = %d, n = %lld", b, (long long)n);
    const float scale = keep_scale(p);
    const double q = 1.0 - (double)p;
    for (int s = 0; s < b; s++) {
        const int k = p == 0.0f ? 1 : p == 1.0f ? 0 : ra_rng_uniform(rng) < q;
        keep[s] = (uint8_t)k;
        const float f = p == 0.0f ? 1.0f : k ? scale : 0.0f;
        const float *xs = x + (int64_t)s * n;
        float *ys = y + (int64_t)s * n;
        for (int64_t i = 0; i < n; i++) ys[i] = xs[i] * f;
    }
    return RA_OK;
}

/* ACCUMULATES into dx. */
void ra_droppath_backward(float *dx,            /* (B, n), may be dy */
                          const float *dy,      /* (B, n) */
                          const uint8_t *keep,  /* (B) saved */
                          int b, int64_t n, float p) {
    const float scale = p == 0.0f ? 1.0f : keep_scale(p);
#pragma omp parallel for schedule(static) num_threads(nn_threads((int64_t)b * n))
    for (int s = 0; s < b; s++) {
        const float f = keep[s] ? scale : 0.0f;
        const float *gs = dy + (int64_t)s * n;
        float *ds = dx + (int64_t)s * n;
        for (int64_t i = 0; i < n; i++) ds[i] += gs[i] * f;
    }
}

/* ------------------------------------------------------------------------ */
/* Patch embedding: im2col + Linear                                          */
/* ------------------------------------------------------------------------ */

ra_status ra_patch_grid(int *gh, int *gw, int h, int w, int p, int pad) {
    if (h < 1 || w < 1 || p < 1)
        return rai_fail(RA_ERR_ARG, "patch grid: image %dx%d, patch %d", h, w, p);
    if (!pad && (h % p || w % p))
        return rai_fail(RA_ERR_SHAPE, "patch grid: image %dx%d is not a multiple of the "
                        "patch size %d", h, w, p);
    const int64_t a = ((int64_t)h + p - 1) / p, c = ((int64_t)w + p - 1) / p;
    if (a * c > INT32_MAX)
        return rai_fail(RA_ERR_ARG, "patch grid: %lldx%lld patches", (long long)a, (long long)c);
    if (gh) *gh = (int)a;
    if (gw) *gw = (int)c;
    return RA_OK;
}

/* Sizes of a patch embedding: grid, tokens per image, columns per token.
 * The kernel kp is p (patches) or larger by an even amount (each patch's
 * kp x kp neighbourhood, centred: an overlapping embedding). */
static ra_status patch_plan(const char *fn, int b, int cin, int h, int w, int p, int kp, int e,
                            int pad, int *gh, int *gw, int *kcols) {
    ra_status st = ra_patch_grid(gh, gw, h, w, p, pad);
    if (st != RA_OK) return st;
    int64_t k = 0, rows = 0, tmp = 0;
    if (b < 1 || cin < 1 || e < 1)
        return rai_fail(RA_ERR_ARG, "%s: B = %d, Cin = %d, E = %d", fn, b, cin, e);
    if (kp < p || kp > RAI_PATCH_KERNEL_MAX || (kp - p) % 2)
        return rai_fail(RA_ERR_ARG, "%s: kernel %d for patch %d (need patch + 2j, at most %d)",
                        fn, kp, p, RAI_PATCH_KERNEL_MAX);
    if (!rai_mul_i64(&k, (int64_t)cin, (int64_t)kp * kp) || k > INT32_MAX ||
        !rai_mul_i64(&rows, (int64_t)b, (int64_t)*gh * *gw) ||
        !rai_mul_i64(&tmp, rows, k) || !rai_mul_i64(&tmp, rows, e) ||
        !rai_mul_i64(&tmp, (int64_t)b * cin, (int64_t)h * w) || tmp > INT64_MAX / 8)
        return rai_fail(RA_ERR_ARG, "%s: sizes too large", fn);
    *kcols = (int)k;
    return RA_OK;
}

ra_status ra_patch_embed_forward(float *y, float *cols, const float *x, const float *weight,
                                 const float *bias, int b, int cin, int h, int w, int p, int e,
                                 int pad) {
    return rai_patch_embed_forward_k(y, cols, x, weight, bias, b, cin, h, w, p, p, e, pad);
}

ra_status rai_patch_embed_forward_k(float *y,             /* (B, L, E) */
                                    float *cols,          /* (B, L, Cin*K*K) saved */
                                    const float *x,       /* (B, Cin, H, W) */
                                    const float *weight,  /* (E, Cin, K, K) */
                                    const float *bias,    /* (E) or NULL */
                                    int b, int cin, int h, int w, int p, int kp, int e,
                                    int pad) {
    int gh = 0, gw = 0, kc = 0;
    ra_status st = patch_plan("patch embedding", b, cin, h, w, p, kp, e, pad, &gh, &gw, &kc);
    if (st != RA_OK) return st;
    const int64_t L = (int64_t)gh * gw, rows = (int64_t)b * L;
    const int o = (kp - p) / 2;   /* the neighbourhood starts o pixels before its patch */
#pragma omp parallel for schedule(static) num_threads(nn_threads(rows * kc))
    for (int64_t r = 0; r < rows; r++) {   /* token r: image r / L, patch r % L */
        const int64_t s = r / L;
        const int py = (int)(r % L / gw), px = (int)(r % L % gw);
        float *dst = cols + r * kc;
        for (int ci = 0; ci < cin; ci++)
            for (int ky = 0; ky < kp; ky++) {
                const int yy = py * p - o + ky;
                const float *src = yy >= 0 && yy < h ? x + ((s * cin + ci) * h + yy) * (int64_t)w
                                                     : NULL;
                for (int kx = 0; kx < kp; kx++) {
                    const int xx = px * p - o + kx;
                    *dst++ = src && xx >= 0 && xx < w ? src[xx] : 0.0f;
                }
            }
    }
    /* a convolution: float32 whatever the thread's precision (nn/precision.h) */
    const ra_precision was = rai_precision_set(RA_PRECISION_FP32);
    ra_linear_forward(y, cols, weight, bias, rows, e, kc);
    rai_precision_set(was);
    return RA_OK;
}

ra_status ra_patch_embed_backward(float *dx, float *dweight, float *dbias, float *work,
                                  const float *dy, const float *cols, const float *weight, int b,
                                  int cin, int h, int w, int p, int e, int pad) {
    return rai_patch_embed_backward_k(dx, dweight, dbias, work, dy, cols, weight, b, cin, h, w,
                                      p, p, e, pad);
}

/* ACCUMULATES into dx, dweight, dbias (each may be NULL). */
ra_status rai_patch_embed_backward_k(float *dx,            /* (B, Cin, H, W) or NULL */
                                     float *dweight,       /* (E, Cin, K, K) or NULL */
                                     float *dbias,         /* (E) or NULL */
                                     float *work,          /* (B, L, Cin*K*K), may be cols */
                                     const float *dy,      /* (B, L, E) */
                                     const float *cols,    /* (B, L, Cin*K*K) saved */
                                     const float *weight,  /* (E, Cin, K, K) */
                                     int b, int cin, int h, int w, int p, int kp, int e,
                                     int pad) {
    int gh = 0, gw = 0, kc = 0;
    ra_status st = patch_plan("patch embedding backward", b, cin, h, w, p, kp, e, pad, &gh, &gw,
                              &kc);
    if (st != RA_OK) return st;
    if (dx && !work)
        return rai_fail(RA_ERR_ARG, "patch embedding backward: dx needs a workspace");
    const int64_t L = (int64_t)gh * gw, rows = (int64_t)b * L;
    /* float32 as the forward; weight and bias first: work may be cols */
    const ra_precision was = rai_precision_set(RA_PRECISION_FP32);
    ra_linear_backward(NULL, dweight, dbias, dy, cols, weight, rows, e, kc);
    /* dcols (rows, kc) = dy (rows, E) . weight (E, kc), written over work:
     * a Linear layer's input gradient */
    if (dx) rai_linear_backward_fused(work, NULL, NULL, dy, NULL, weight, rows, e, kc, 1, NULL);
    rai_precision_set(was);
    if (!dx) return RA_OK;
    /* col2im: each pixel sums the values of the neighbourhoods that hold it
     * (one when they do not overlap), in patch order; those of the padding
     * are dropped. Patches overlap only within an image: a thread per
     * image, or per row of patches when they do not overlap. */
    const int o = (kp - p) / 2;
    const int64_t units = kp == p ? (int64_t)b * gh : b;
#pragma omp parallel for schedule(static) num_threads(nn_threads(rows * kc))
    for (int64_t t = 0; t < units; t++) {
        const int64_t s = kp == p ? t / gh : t;
        const int py0 = kp == p ? (int)(t % gh) : 0, py1 = kp == p ? py0 + 1 : gh;
        for (int py = py0; py < py1; py++)
            for (int px = 0; px < gw; px++) {
                const float *src = work + (s * L + (int64_t)py * gw + px) * kc;
                for (int ci = 0; ci < cin; ci++)
                    for (int ky = 0; ky < kp; ky++, src += kp) {
                        const int yy = py * p - o + ky;
                        if (yy < 0 || yy >= h) continue;
                        float *d = dx + ((s * cin + ci) * h + yy) * (int64_t)w;
                        for (int kx = 0; kx < kp; kx++) {
                            const int xx = px * p - o + kx;
                            if (xx >= 0 && xx < w) d[xx] += src[kx];
                        }
                    }
            }
    }
    return RA_OK;
}

/* ------------------------------------------------------------------------ */
/* Patch merging gather (Swin)                                               */
/* ------------------------------------------------------------------------ */

static ra_status merge_check(const char *fn, int b, int h, int w, int c) {
    int64_t n = 0;
    if (b < 1 || h < 1 || w < 1 || c < 1)
        return rai_fail(RA_ERR_ARG, "%s: B = %d, H = %d, W = %d, C = %d", fn, b, h, w, c);
    if (!rai_mul_i64(&n, (int64_t)b * (h + 1), (int64_t)(w + 1) * c) || n > INT64_MAX / 8)
        return rai_fail(RA_ERR_ARG, "%s: sizes too large", fn);
    return RA_OK;
}

/* Source pixel of quarter q of a merged token: q = 0..3 -> (dy, dx) offsets
 * (0,0), (1,0), (0,1), (1,1), the official x0, x1, x2, x3. */
#define MERGE_DY(q) ((q) & 1)
#define MERGE_DX(q) ((q) >> 1)

ra_status ra_patch_merge_forward(float *y,        /* (B, H2*W2, 4C) */
                                 const float *x,  /* (B, H, W, C) */
                                 int b, int h, int w, int c) {
    ra_status st = merge_check("ra_patch_merge_forward", b, h, w, c);
    if (st != RA_OK) return st;
    const int h2 = (h + 1) / 2, w2 = (w + 1) / 2;
    const int64_t rows = (int64_t)b * h2;
#pragma omp parallel for schedule(static) num_threads(nn_threads(rows * w2 * 4 * c))
    for (int64_t r = 0; r < rows; r++) {
        const int64_t s = r / h2;
        const int i = (int)(r % h2);
        for (int j = 0; j < w2; j++) {
            float *dst = y + (r * w2 + j) * 4 * (int64_t)c;
            for (int q = 0; q < 4; q++, dst += c) {
                const int yy = 2 * i + MERGE_DY(q), xx = 2 * j + MERGE_DX(q);
                if (yy < h && xx < w)
                    memcpy(dst, x + ((s * h + yy) * w + xx) * (int64_t)c, (size_t)c * sizeof *dst);
                else
                    memset(dst, 0, (size_t)c * sizeof *dst);
            }
        }
    }
    return RA_OK;
}

/* ACCUMULATES into dx. */
ra_status ra_patch_merge_backward(float *dx,        /* (B, H, W, C) */
                                  const float *dy,  /* (B, H2*W2, 4C) */
                                  int b, int h, int w, int c) {
    ra_status st = merge_check("ra_patch_merge_backward", b, h, w, c);
    if (st != RA_OK) return st;
    const int h2 = (h + 1) / 2, w2 = (w + 1) / 2;
    const int64_t rows = (int64_t)b * h2;
#pragma omp parallel for schedule(static) num_threads(nn_threads(rows * w2 * 4 * c))
    for (int64_t r = 0; r < rows; r++) {   /* each pixel has one source: no races */
        const int64_t s = r / h2;
        const int i = (int)(r % h2);
        for (int j = 0; j < w2; j++) {
            const float *src = dy + (r * w2 + j) * 4 * (int64_t)c;
            for (int q = 0; q < 4; q++, src += c) {
                const int yy = 2 * i + MERGE_DY(q), xx = 2 * j + MERGE_DX(q);
                if (yy >= h || xx >= w) continue;
                float *d = dx + ((s * h + yy) * w + xx) * (int64_t)c;
                for (int k = 0; k < c; k++) d[k] += src[k];
            }
        }
    }
    return RA_OK;
}
