/* gemm.c - the portable matrix product of the Linear layers: a framework
 * (packing, blocking, threads) around a 6 x 16 micro-kernel, in the manner
 * of BLIS. The micro-kernel is the scalar one below (the oracle) or the
 * AVX2 + FMA one of gemm_avx2.c.
 *
 * Every element of c is one chain of multiply-adds over k in order, split
 * at the same fixed K blocks whatever the sizes, the partition or the
 * thread count: a row of c has the same bits wherever it sits in the batch
 * and however many threads share the product. That is what lets a batch
 * run in shards, on threads or on processes, and give the same numbers
 * (OpenBLAS, which blocks and threads by the sizes of each call, does not). */
#include "kernels/gemm_kernels.h"
#include "base/internal.h"
#include "base/arena.h"

#include <string.h>
#include <omp.h>

#define MR RA_GEMM_MR
#define NR RA_GEMM_NR
#define KC 256          /* K block: a 6 x 256 and a 256 x 16 panel fit in L1 */
#define MC (8 * MR)     /* rows of a task: its packed A block stays in L2 */
#define PGROUP 16       /* panels of a task at most: KC x 256 floats of B */

/* The scalar micro-kernel (gemm_kernels.h). */
void rai_gemm_micro_ref(int kc, const float *ap, const float *bp, float *c, int64_t ldc,
                        const float *bias, int accumulate) {
    float acc[MR][NR] = {{0}};
    for (int kk = 0; kk < kc; kk++, ap += MR, bp += NR)
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) acc[r][j] += ap[r] * bp[j];
    for (int r = 0; r < MR; r++, c += ldc)
        for (int j = 0; j < NR; j++)
            c[j] = accumulate ? c[j] + acc[r][j] : bias ? bias[j] + acc[r][j] : acc[r][j];
}

static int thread_index(void) { return omp_get_thread_num(); }

typedef void (*micro_fn)(int, const float *, const float *, float *, int64_t, const float *, int);

static micro_fn micro_of(int isa) {
#ifdef RA_HAVE_X86_KERNELS
    if (isa == RA_GEMM_AVX2) return rai_gemm_micro_avx2;
#endif
    (void)isa;
    return rai_gemm_micro_ref;
}

typedef struct {
    float *c;
    int64_t ldc;
    const float *a, *b;
    int64_t ars, acs, brs, bcs;
    int64_t m;
    int n, k;
    const float *bias;
    int accumulate;
    const float *bp;   /* b packed: [K block][N panel][kc][NR] */
    int npanels, pgroup;
    micro_fn micro;
} gemm_job;

/* Panel p of b's K block [k0, k0 + kc) (kc x NR), zeros past column n;
 * the loops run along whichever of b's strides is the shorter. */
static void pack_b(float *dst, const gemm_job *g, int p, int k0, int kc) {
    const int j0 = p * NR, nr = g->n - j0 < NR ? g->n - j0 : NR;
    const float *src = g->b + (int64_t)k0 * g->brs + (int64_t)j0 * g->bcs;
    if (nr < NR) memset(dst, 0, sizeof *dst * (size_t)kc * NR);
    if (g->brs <= g->bcs) {
        for (int j = 0; j < nr; j++) {
            const float *col = src + (int64_t)j * g->bcs;
            for (int kk = 0; kk < kc; kk++) dst[kk * NR + j] = col[kk * g->brs];
        }
    } else {
        for (int kk = 0; kk < kc; kk++) {
            const float *row = src + (int64_t)kk * g->brs;
            for (int j = 0; j < nr; j++) dst[kk * NR + j] = row[j * g->bcs];
        }
    }
}

/* a's rows [i0, i0 + mc) x K block [k0, k0 + kc) packed tile by tile (MR
 * rows), zeros past row m; the loops run along the shorter stride. */
static void pack_a(float *dst, const gemm_job *g, int64_t i0, int mc, int k0, int kc) {
    for (int t = 0; t < mc; t += MR, dst += (int64_t)kc * MR) {
        const int64_t r0 = i0 + t;
        const int mr = (int)(g->m - r0 < MR ? g->m - r0 : MR);
        const float *src = g->a + r0 * g->ars + (int64_t)k0 * g->acs;
        if (mr < MR) memset(dst, 0, sizeof *dst * (size_t)kc * MR);
        if (g->acs <= g->ars) {
            for (int r = 0; r < mr; r++) {
                const float *row = src + r * g->ars;
                for (int kk = 0; kk < kc; kk++) dst[kk * MR + r] = row[kk * g->acs];
            }
        } else {
            for (int kk = 0; kk < kc; kk++) {
                const float *col = src + (int64_t)kk * g->acs;
                for (int r = 0; r < mr; r++) dst[kk * MR + r] = col[r * g->ars];
            }
        }
    }
}

/* One task: rows [i0, i0 + mc) of c, panels [p0, p1), every K block in
 * order. ap: MC x KC floats of scratch. */
static void run_task(const gemm_job *g, int64_t i0, int mc, int p0, int p1, float *ap) {
    const int kblocks = (g->k + KC - 1) / KC;
    float t[MR * NR];
    for (int kb = 0; kb < kblocks; kb++) {
        const int k0 = kb * KC, kc = g->k - k0 < KC ? g->k - k0 : KC;
        pack_a(ap, g, i0, mc, k0, kc);
        const float *bk = g->bp + (int64_t)k0 * g->npanels * NR;
        const int store = kb == 0 && !g->accumulate;
        for (int p = p0; p < p1; p++) {
            const int j0 = p * NR, nr = g->n - j0 < NR ? g->n - j0 : NR;
            for (int r0 = 0; r0 < mc; r0 += MR) {
                const float *at = ap + (int64_t)r0 * kc, *bt = bk + (int64_t)p * kc * NR;
                const int mr = (int)(g->m - (i0 + r0) < MR ? g->m - (i0 + r0) : MR);
                float *ct = g->c + (i0 + r0) * g->ldc + j0;
                const float *bias = store && g->bias ? g->bias + j0 : NULL;
                if (mr == MR && nr == NR) {   /* a whole tile: straight into c */
                    g->micro(kc, at, bt, ct, g->ldc, bias, !store);
                    continue;
                }
                /* an edge tile: the same sums into t, then the part in c */
                g->micro(kc, at, bt, t, NR, NULL, 0);
                for (int r = 0; r < mr; r++) {
                    float *cr = ct + r * g->ldc;
                    const float *tr = t + r * NR;
                    if (bias)
                        for (int j = 0; j < nr; j++) cr[j] = bias[j] + tr[j];
                    else if (store)
                        for (int j = 0; j < nr; j++) cr[j] = tr[j];
                    else
                        for (int j = 0; j < nr; j++) cr[j] += tr[j];
                }
            }
        }
    }
}

int rai_gemm(float *c, int64_t ldc, const float *a, int64_t ars, int64_t acs, const float *b,
             int64_t brs, int64_t bcs, int64_t m, int n, int k, const float *bias,
             int accumulate, int isa, int nthreads) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0) {   /* an empty sum */
        for (int64_t i = 0; !accumulate && i < m; i++)
            for (int j = 0; j < n; j++) c[i * ldc + j] = bias ? bias[j] : 0.0f;
        return 0;
    }
    gemm_job g = {.c = c, .ldc = ldc, .a = a, .b = b, .ars = ars, .acs = acs, .brs = brs,
                  .bcs = bcs, .m = m, .n = n, .k = k, .bias = bias, .accumulate = accumulate,
                  .micro = micro_of(isa)};
    g.npanels = (n + NR - 1) / NR;
    const int kblocks = (k + KC - 1) / KC;
    /* tasks: groups of panels (their B blocks stay in L2 while a thread
     * takes row block after row block) x row blocks, enough for every
     * thread */
    const int64_t mblocks = (m + MC - 1) / MC;
    g.pgroup = g.npanels < PGROUP ? g.npanels : PGROUP;
    while (g.pgroup > 1 && mblocks * ((g.npanels + g.pgroup - 1) / g.pgroup) < 4 * (int64_t)nthreads)
        g.pgroup = (g.pgroup + 1) / 2;
    const int groups = (g.npanels + g.pgroup - 1) / g.pgroup;
    const int64_t tasks = mblocks * groups;
    const int nt = nthreads > 1 && tasks > 1 ? (tasks < nthreads ? (int)tasks : nthreads) : 1;
    /* b packed, then each thread's A block: the calling thread's buffer */
    const size_t bfloats = (size_t)g.npanels * NR * (size_t)k;
    float *bp = rai_thread_buffer(RAI_BUFFER_GEMM, sizeof *bp * (bfloats + (size_t)nt * MC * KC));
    if (!bp) return -1;
    float *scratch = bp + bfloats;
    g.bp = bp;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        /* b's panels, every K block of each */
#pragma omp for schedule(static)
        for (int p = 0; p < g.npanels; p++)
            for (int kb = 0; kb < kblocks; kb++) {
                const int k0 = kb * KC, kc = k - k0 < KC ? k - k0 : KC;
                pack_b(bp + (int64_t)k0 * g.npanels * NR + (int64_t)p * kc * NR, &g, p, k0, kc);
            }
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t i0 = (t % mblocks) * MC;
            const int p0 = (int)(t / mblocks) * g.pgroup;
            const int p1 = p0 + g.pgroup < g.npanels ? p0 + g.pgroup : g.npanels;
            const int mc = (int)(m - i0 < MC ? (m - i0 + MR - 1) / MR * MR : MC);
            run_task(&g, i0, mc, p0, p1, scratch + (size_t)thread_index() * MC * KC);
        }
    }
    return 0;
}

void rai_gemm_tile_put(float *t, int ldt, int mr, int nr,
                       void (*gelu)(float *, const float *, int64_t), float *y, int64_t ldy,
                       float *res, int64_t ldres, const int32_t *map, int64_t r0, int j0) {
    if (gelu) gelu(t, t, (int64_t)mr * ldt);   /* the whole tile in one call */
    for (int r = 0; r < mr; r++) {
        float *tr = t + r * ldt;
        if (!res) {
            memcpy(y + r * ldy, tr, sizeof *tr * (size_t)nr);
            continue;
        }
        float *o = rai_gemm_res_row(res, ldres, map, r0 + r, j0);
        for (int j = 0; o && j < nr; j++) o[j] = o[j] + tr[j];
    }
}
