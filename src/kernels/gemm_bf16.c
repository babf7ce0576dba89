/* gemm_bf16.c - the product of precision bf16 on bfloat16 dot products
 * (gemm_kernels.h): a Linear's y = x . w^T + bias with its weights held as
 * bfloat16, packed once, and its input rounded to bfloat16 as it is packed,
 * float32 sums. A framework (rounding, packing, threads, the epilogue's
 * GELU and residual add) around a 12 x 32 micro-kernel: the scalar one
 * below (the oracle) or the VDPBF16PS one of gemm_bf16_avx512.c, which
 * gives the same bits.
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

/* x as VDPBF16PS reads it: a subnormal is 0 (its sign kept). */
static inline float daz(float x) { return fabsf(x) < 0x1p-126f ? copysignf(0.0f, x) : x; }

static inline float bf16_value(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One step of the chain: acc + a b rounded once, subnormals flushed. */
static inline float dot_step(float acc, uint16_t a, uint16_t b) {
    return daz(fmaf(daz(bf16_value(a)), daz(bf16_value(b)), daz(acc)));
}

void rai_gemm_bf16_micro_ref(int kp, const uint16_t *a, int64_t lda, const uint16_t *bp, float *c,
                             int64_t ldc, const float *bias) {
    float acc[MR][NR] = {{0}};
    for (int q = 0; q < kp; q++, bp += 2 * NR)
        for (int r = 0; r < MR; r++) {
            const uint16_t *ar = a + r * lda + 2 * q;
            for (int j = 0; j < NR; j++) {
                acc[r][j] = dot_step(acc[r][j], ar[1], bp[2 * j + 1]);
                acc[r][j] = dot_step(acc[r][j], ar[0], bp[2 * j]);
            }
        }
    for (int r = 0; r < MR; r++, c += ldc)
        for (int j = 0; j < NR; j++) c[j] = bias ? acc[r][j] + bias[j] : acc[r][j];
}

typedef void (*micro_fn)(int, const uint16_t *, int64_t, const uint16_t *, float *, int64_t,
                         const float *);
typedef void (*round_fn)(uint16_t *, int64_t, const float *, int64_t, int, int);

/* The micro-kernel and rounding of an isa. */
typedef struct {
    micro_fn micro;
    round_fn round;
} bf16_kernels;

static bf16_kernels kernels_of(int isa) {
#ifdef RA_HAVE_X86_KERNELS
    if (isa == RA_GEMM_BF16_AVX512)
        return (bf16_kernels){rai_gemm_bf16_micro_avx512, rai_bf16_round_rows_avx512};
#endif
    (void)isa;
    return (bf16_kernels){rai_gemm_bf16_micro_ref, rai_bf16_round_rows};
}

/* ---- the weights, packed once ------------------------------------------ */

/* The bytes of w packed for n x k. */
static size_t packed_bytes(int n, int k) {
    return (size_t)((n + NR - 1) / NR) * NR * (size_t)((k + 1) / 2 * 2) * sizeof(uint16_t);
}

/* Column panel p of w (n, k) into pw: [kp][NR][2], zeros past n and k. */
static void pack_panel(const rai_bf16_weights *pw, const float *w, int p) {
    const int n = pw->n, k = pw->k, kp = (k + 1) / 2;
    uint16_t *dst = pw->bp + (int64_t)p * kp * 2 * NR;
    memset(dst, 0, (size_t)kp * 2 * NR * sizeof *dst);
    for (int j = 0; j < NR && p * NR + j < n; j++) {
        const float *row = w + (int64_t)(p * NR + j) * k;
        for (int l = 0; l < k; l++) dst[(l / 2) * 2 * NR + 2 * j + l % 2] = rai_bf16_bits(row[l]);
    }
}

int rai_bf16_weights_pack(rai_bf16_weights *pw, const float *w, int n, int k, int nthreads) {
    memset(pw, 0, sizeof *pw);
    if (n < 1 || k < 1) return -1;
    if (!(pw->bp = rai_alloc(packed_bytes(n, k), 1))) return -1;
    pw->n = n, pw->k = k;
    const int npanels = (n + NR - 1) / NR;
#pragma omp parallel for schedule(static) num_threads(nthreads > 1 ? nthreads : 1)
    for (int p = 0; p < npanels; p++) pack_panel(pw, w, p);
    return 0;
}

void rai_bf16_weights_free(rai_bf16_weights *pw) {
    if (!pw) return;
    rai_free(pw->bp);
    memset(pw, 0, sizeof *pw);
}

/* ---- the product -------------------------------------------------------- */

typedef struct {
    rai_gemm_io io;
    int kp;                /* pairs along K (the last zero-padded) */
    int npanels, group;    /* column panels, and per task */
    const rai_bf16_weights *b;
    bf16_kernels kn;
} bf16_job;

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
    const int rows = (int)(g->io.m - i0 < MB ? g->io.m - i0 : MB);
    g->kn.round(a, lda, g->io.x + i0 * g->io.k, g->io.k, rows, g->io.k);
    memset(a + rows * lda, 0, sizeof *a * (size_t)((MB - rows) * lda));
    /* the rows of x of a later task of the thread (from row next; none if
     * negative), asked for towards L2 a share before each tile: the
     * rounding would otherwise wait for them (Swin's first stage reads
     * 10 MB of x) */
    const int nrows = next < 0 ? 0 : (int)(g->io.m - next < MB ? g->io.m - next : MB);
    const char *pf = (const char *)(g->io.x + (next < 0 ? 0 : next) * g->io.k);
    const int64_t lines = ((int64_t)nrows * g->io.k * (int64_t)sizeof(float) + 63) / 64;
    const int64_t calls = (int64_t)(MB / MR) * (p1 - p0);
    int64_t done = 0, c = 0;
    float t[MR * NR], pad[NR];
    for (int rt = 0; rt < MB / MR && i0 + rt * MR < g->io.m; rt++) {
        const int64_t r0 = i0 + (int64_t)rt * MR;
        const int mr = (int)(g->io.m - r0 < MR ? g->io.m - r0 : MR);
        for (int p = p0; p < p1; p++) {
            for (const int64_t upto = lines * ++c / calls; done < upto; done++)
                __builtin_prefetch(pf + done * 64, 0, 2);
            const int j0 = p * NR, nr = g->io.n - j0 < NR ? g->io.n - j0 : NR;
            const float *bias = panel_bias(g->io.bias, j0, g->io.n, pad);
            const uint16_t *bt = g->b->bp + (int64_t)p * g->kp * 2 * NR;
            const uint16_t *at = a + rt * MR * lda;
            const rai_gemm_io *o = &g->io;
            if (o->k <= RA_GEMM_PREFETCH_KMAX)
                rai_gemm_tile_prefetch(o->y, o->n, o->res, o->n, o->map, r0, mr, j0, nr);
            if (mr == MR && nr == NR && !o->res && !o->gelu) {   /* straight into y */
                g->kn.micro(g->kp, at, lda, bt, o->y + r0 * o->n + j0, o->n, bias);
                continue;
            }
            g->kn.micro(g->kp, at, lda, bt, t, NR, bias);
            rai_gemm_tile_put(t, NR, mr, nr, o->gelu, o->y + r0 * o->n + j0, o->n, o->res, o->n,
                              o->map, r0, j0);
        }
    }
}

int rai_gemm_bf16(float *y, const float *x, const float *bias, int64_t m, int n, int k,
                  const rai_bf16_weights *pw, void (*gelu)(float *, const float *, int64_t),
                  float *res, const int32_t *map, int isa, int nthreads) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0 || !pw || pw->n != n || pw->k != k) return -1;
    bf16_job g = {.io = {.x = x, .bias = bias, .y = y, .res = res, .map = map, .gelu = gelu,
                         .m = m, .n = n, .k = k},
                  .kp = (k + 1) / 2, .b = pw, .kn = kernels_of(isa)};
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
    int missing = 0;   /* threads without their buffer: then nothing is done */
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        uint16_t *a = rai_thread_buffer(RAI_BUFFER_BF16, bytes);
        if (!a) {
#pragma omp atomic
            missing++;
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
    const int rows = (int)(g->m - i0 < MB ? g->m - i0 : MB);
    g->kn.round(a, lda, g->x + i0 * g->c, g->c, rows, g->c);
    memset(a + rows * lda, 0, sizeof *a * (size_t)((MB - rows) * lda));
    float t[MR * NR], pad[NR];
    const int np1 = (g->hidden + NR - 1) / NR, np2 = (g->c + NR - 1) / NR;
    for (int rt = 0; rt < MB / MR && i0 + rt * MR < g->m; rt++)
        for (int p = 0; p < np1; p++) {
            const int j0 = p * NR, nr = g->hidden - j0 < NR ? g->hidden - j0 : NR;
            g->kn.micro(kp1, a + rt * MR * lda, lda, g->w1->bp + (int64_t)p * kp1 * 2 * NR, t, NR,
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
            g->kn.micro(kp2, h + rt * MR * ldh, ldh, g->w2->bp + (int64_t)p * kp2 * 2 * NR, t, NR,
                        panel_bias(g->b2, j0, g->c, pad));
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
