/* bench.c - relattn_bench: throughput of relattn's attention layers and
 * networks at several thread counts in one run, as GFLOP/s and as a share of
 * this machine's peak measured in the same run (bench/peak.c): the FMA
 * peak, and for the networks' int8 rows the int8 peak.
 * bench/run.sh runs it beside its PyTorch twin (bench/bench_torch.py) and
 * bench/summary.py sets the two side by side (bench/README.md).
 *
 *   relattn_bench [--threads 1,2] [--reps R] [--what all|layers|nets|video3d]
 *                 [--models DIR] [--batches 1,8] [--kernels all|default]
 *                 [--rows TEXT] [--precisions fp32,bf16,int8] [--clip T,S]
 *                 [--results FILE]
 *
 * --threads: every row runs at each of these thread counts (default 1 and
 *   every core); the tables show each count's GFLOP/s, its share of the peak
 *   measured at that count at the start, and the last count over the first
 *   (2T/1T). The peak is measured again at the end (measure_peaks).
 * Layer rows (shapes[] below): the attention core alone (q·k^T, softmax,
 *   p·v with the row's relative terms) and the whole layer (qkv and proj
 *   projections too), forward and backward (input and every parameter
 *   gradient, the bias or Shaw tables included), under every kernel the CPU
 *   supports (--kernels default: only the one the library picks). The
 *   backward (bwd) reads the tape of a training forward
 *   (ra_attn_layer_forward_train), as PyTorch's reads its graph; fwd+bwd
 *   times the two together (a training step of the layer); bwd recompute
 *   is ra_attn_layer_backward, which recomputes what it needs from x.
 * Networks: torchvision swin_t and vit_b_16 at 224x224 (swin_v2_t at 256x256), read from DIR (or
 *   $RELATTN_BENCH_MODELS) as tools/export.py writes them; the inference
 *   forward of a batch of random images, and for swin_t a training step:
 *   ra_model_forward_train + ra_model_backward of a random dL/dy (relattn's
 *   swin has no stochastic depth; the twin turns torchvision's off).
 *   "all" is the layer rows and these.
 * --what video3d: the video network swin3d_t (torchvision >= 0.15's, as
 *   tools/export.py --torchvision swin3d_t writes it) alone, the inference
 *   forward of one clip of --clip T,S (default 32,224: 1 x 3 x 32 x 224 x
 *   224; the row "swin3d_t B=1 32x224x224"), its flops counted at T frames
 *   (the model loaded with num_frames = T); --batches does not apply.
 * --rows TEXT keeps the rows whose name contains TEXT.
 * --precisions: the networks' inference forward in each of these
 *   (ra_model_set_precision; default all three), the model loaded again
 *   for each (a model goes from fp32 to one other precision only), and
 *   the training step in fp32 and bf16 (int8 does not train); the layer
 *   rows are fp32. A reduced precision's row
 *   is the fp32 row's name and the precision ("swin_t B=8 int8").
 * Timing: one warm-up call at each thread count, then R rounds of one call
 *   at each count in turn, the median of each count's R (time_medians).
 * Flops, 2 per multiply-add: core forward 4·B_·nH·N²·hd, plus 2·B_·nH·N·R·hd
 *   for each Shaw table (R = 2k+1 rows: the terms as products with the
 *   tables, not with N² gathered vectors); the layer adds 8·B_·N·C² (qkv 3C
 *   and proj C outputs); a network twice the Swin authors' multiply-add
 *   count (ra_model_flops). A backward counts twice its forward's flops (a
 *   recomputed forward is not counted), forward + backward three times.
 *   A network in bf16 or int8 counts the same flops as in fp32.
 * Peaks, one per precision at each thread count (measure_peaks): fp32
 *   the FMA peak, bf16 the VDPBF16PS peak where relattn's bf16 runs on it
 *   (else the FMA peak: float32 kernels on rounded values), int8 the int8
 *   peak (i8_peak, 2 ops per multiply-add); a row's share of peak is over
 *   its own precision's peak.
 * Memory (shaw rows): the peak resident memory one layer forward adds to the
 *   process, with and without the Shaw tables, at N/2 and N tokens; the
 *   difference is what the relative terms cost (peak_extra_bytes).
 * --results FILE appends one tab-separated line per measurement for
 * bench/summary.py:
 *   info    relattn KEY VALUE
 *   peak    THREADS GFLOP/S ISA PRECISION
 *   time    relattn ROW MEASURE KERNEL THREADS SETTING SECONDS FLOPS IMAGES
 *   memory  relattn ROW N BYTES_WITH_TABLES BYTES_WITHOUT
 * (a peak line without PRECISION, in files of before, is fp32's). */
#define _POSIX_C_SOURCE 200809L
#include "relattn.h"
#include "peak.h"
#include "timing.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__linux__) && defined(__GLIBC__)
#include <malloc.h>
#define HAVE_PEAK_RSS 1
#endif

#define MAX_THREAD_COUNTS 4
#define MAX_REPS 64
#define NPRECISIONS 3   /* ra_precision: fp32, bf16, int8 */

/* ---- timing: the one helper every row goes through ------------------------ */

typedef void (*bench_fn)(void *ctx);

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Seconds of one call of fn at each of the nthreads thread counts in
 * threads[] (sec[i]): one warm-up call at each, then reps rounds, each
 * timing one call at every count in turn; the median of each count's
 * reps. Interleaved, a count's calls and another's see the same state of
 * a shared machine, so the ratios between counts (2T/1T) do not take the
 * drift of the minutes between two separate series. prep, if given, runs
 * untimed before each call at its count (the training forward whose tape
 * the backward reads: the tape is made for a thread count). */
static void time_medians(bench_fn fn, bench_fn prep, void *ctx, int reps, const int *threads,
                         int nthreads, double *sec) {
    double t[MAX_THREAD_COUNTS][MAX_REPS];
    for (int i = 0; i < nthreads; i++) {
        ra_threads_set(threads[i]);
        if (prep) prep(ctx);
        fn(ctx);
    }
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < nthreads; i++) {
            ra_threads_set(threads[i]);
            if (prep) prep(ctx);
            const double t0 = bench_now();
            fn(ctx);
            t[i][r] = bench_now() - t0;
        }
    for (int i = 0; i < nthreads; i++) sec[i] = median(t[i], reps);
}

/* Bytes the peak resident memory of the process rises by during one call
 * of fn, or -1 where it cannot be told (Linux with glibc only): freed heap
 * pages are handed back first, then /proc/self/clear_refs resets the peak
 * (VmHWM) to the current size (VmRSS). */
static double peak_extra_bytes(bench_fn fn, void *ctx) {
#ifdef HAVE_PEAK_RSS
    malloc_trim(0);
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return -1;
    const int ok = fputs("5", f) >= 0;
    if (fclose(f) || !ok) return -1;
    const long long rss = bench_status_kb("VmRSS");
    fn(ctx);
    const long long hwm = bench_status_kb("VmHWM");
    return rss < 0 || hwm < 0 ? -1 : 1024.0 * (double)(hwm - rss);
#else
    (void)fn, (void)ctx;
    return -1;
#endif
}

static void must(ra_status st, const char *what) {
    if (st == RA_OK) return;
    fprintf(stderr, "relattn_bench: %s: %s\n", what, ra_last_error());
    exit(70);
}

static float *rnd(size_t n, float scale, ra_rng *rng) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) must(RA_ERR_NOMEM, "allocation");
    ra_rng_fill_uniform(rng, p, (int64_t)n, -scale, scale);
    return p;
}

static float *zeros(size_t n) {
    float *p = calloc(n ? n : 1, sizeof *p);
    if (!p) must(RA_ERR_NOMEM, "allocation");
    return p;
}

/* ---- the run: thread counts, peaks, results file --------------------------- */

typedef struct {
    int threads[MAX_THREAD_COUNTS], nthreads;   /* thread counts, in order */
    double peak[NPRECISIONS][MAX_THREAD_COUNTS];   /* G/s of each precision at each */
    ra_precision precisions[NPRECISIONS];          /* the networks', in order */
    int nprecisions;
    int reps;
    FILE *results;                              /* --results, or NULL */
} run;

static void emit_time(const run *R, const char *row, const char *measure, const char *kernel,
                      int threads, double seconds, double flops, int images) {
    if (R->results)
        fprintf(R->results, "time\trelattn\t%s\t%s\t%s\t%d\tkernel %s\t%.6g\t%.6g\t%d\n", row,
                measure, kernel, threads, kernel, seconds, flops, images);
}

/* "2T/1T": the last thread count over the first */
static const char *scaling_label(const run *R) {
    static char label[32];
    snprintf(label, sizeof label, "%dT/%dT", R->threads[R->nthreads - 1], R->threads[0]);
    return label;
}

/* ---- layer rows ----------------------------------------------------------- */

typedef struct {
    const char *name;   /* the row's name, shared with bench_torch.py */
    ra_arch arch;
    int b_, n, c, nh;
    int window;         /* window_attention: window side (N = window²) */
    int shifted;        /* the shifted-window mask of a map of 8x8 windows
                           shifted by window / 2 (Swin-T stage 1: 56x56, 7x7
                           windows, shift 3), 64 windows (B_ % 64 == 0) */
    int k;              /* shaw_attention: clip distance, tables of 2k+1 rows */
    int grid;           /* rope_attention: a grid x grid patch map and a class
                           token (N = 1 + grid²): RoPE-Axial on ViT-B/16 */
} shape;

static const shape shapes[] = {
    /* the rows: Swin-T stage 1 at batch 8, Shaw over 512 tokens,
     * ViT-B/16 at batch 8 */
    {"window_attention 512x49x96 nH3 shifted", RA_ARCH_WINDOW_ATTENTION, 512, 49, 96, 3, 7, 1, 0, 0},
    {"shaw_attention 4x512x512 nH8 k16", RA_ARCH_SHAW_ATTENTION, 4, 512, 512, 8, 0, 0, 16, 0},
    {"vit_attention 8x197x768 nH12", RA_ARCH_VIT_ATTENTION, 8, 197, 768, 12, 0, 0, 0, 0},
    /* Swin-T stage 1 at batch 1, stage 3 at batch 4 (2x2 windows each),
     * ViT-B/16 at batch 4 */
    {"window_attention 64x49x96 nH3 shifted", RA_ARCH_WINDOW_ATTENTION, 64, 49, 96, 3, 7, 1, 0, 0},
    {"window_attention 16x49x384 nH12", RA_ARCH_WINDOW_ATTENTION, 16, 49, 384, 12, 7, 0, 0, 0},
    {"vit_attention 4x197x768 nH12", RA_ARCH_VIT_ATTENTION, 4, 197, 768, 12, 0, 0, 0, 0},
    /* 2-D axial RoPE (rope-vit's RoPE-Axial) on ViT-B/16's shapes: the
     * vit_attention rows plus the rotation of q and k (and of dq, dk) */
    {"rope_attention 8x197x768 nH12", RA_ARCH_ROPE_ATTENTION, 8, 197, 768, 12, 0, 0, 0, 14},
    {"rope_attention 4x197x768 nH12", RA_ARCH_ROPE_ATTENTION, 4, 197, 768, 12, 0, 0, 0, 14},
    /* SwinV2-T stage 1 at batch 8 (256x256 images: a 64x64 map of 8x8
     * windows, shift 4): cosine attention, the CPB bias table per call */
    {"swinv2_window_attn 512x64x96 nH3 shifted", RA_ARCH_SWINV2_WINDOW_ATTENTION, 512, 64,
     96, 3, 8, 1, 0, 0},
};

enum { CORE_FWD, CORE_BWD, FWD, BWD, FWD_BWD, BWD_RECOMPUTE, NMEASURES };
static const char *const measure_names[NMEASURES] = {"core fwd", "core bwd", "fwd", "bwd",
                                                     "fwd+bwd", "bwd recompute"};

/* A layer and the core under it, with every buffer its calls need. */
typedef struct {
    const shape *s;
    int n;                       /* tokens: the shape's, or N/2 for the memory probe */
    ra_attn_layer *layer;
    ra_attn_tape *tape;          /* of the training forward (run_train_fwd) */
    ra_attn_desc d;              /* the core's description */
    float *qkv_w, *qkv_b, *proj_w, *proj_b, *table, *rel_k, *rel_v;   /* parameters */
    float *v2[6];                /* swinv2: logit_scale, cpb_mlp 0.w, 0.b, 2.w, q_bias, v_bias */
    ra_attn_grads g;
    float *x, *y, *dx, *dy;      /* (B_, N, C) */
    float *qkv, *dqkv;           /* (B_, N, 3C): the core's q, k, v and gradients */
    float *out;                  /* (B_, N, C): the core's output */
    float *mask;                 /* (nW, N, N) or NULL */
    int32_t *idx, *rel;          /* bias index (N, N), Shaw clip index (N, N) */
    void *work;
    size_t ws;
} layer_case;

/* Forward flops of the core and of the layer (see the top of the file). */
static void layer_flops(const shape *s, int n, double *core, double *layer) {
    const double hd = s->c / s->nh, tokens = (double)s->b_ * n;
    *core = 4.0 * tokens * s->nh * n * hd;
    if (s->k) *core += 2 * 2.0 * tokens * s->nh * (2 * s->k + 1) * hd;
    *layer = *core + 8.0 * tokens * s->c * s->c;
}

/* tables: 0 leaves a Shaw layer without its tables (plain attention). */
static void case_init(layer_case *lc, const shape *s, int n, int tables, int max_threads) {
    memset(lc, 0, sizeof *lc);
    lc->s = s, lc->n = n;
    ra_rng rng;
    ra_rng_seed(&rng, 7);
    const int C = s->c, hd = C / s->nh;
    const size_t rows = (size_t)s->b_ * n, nn = (size_t)n * n;
    ra_attn_config cfg = ra_attn_config_default(s->arch);
    cfg.dim = C, cfg.num_heads = s->nh, cfg.max_rel = s->k;
    cfg.window[0] = cfg.window[1] = s->window;
    cfg.grid[0] = cfg.grid[1] = s->grid;

    lc->qkv_w = rnd((size_t)3 * C * C, 0.05f, &rng);
    lc->qkv_b = cfg.qkv_bias ? rnd((size_t)3 * C, 0.05f, &rng) : NULL;
    lc->proj_w = rnd((size_t)C * C, 0.05f, &rng), lc->proj_b = rnd(C, 0.05f, &rng);
    lc->d = (ra_attn_desc){.b_ = s->b_, .nh = s->nh, .n1 = n, .n2 = n, .hd = hd,
                           .scale = 1.0f / sqrtf((float)hd)};
    if (s->window) {
        int64_t trows;
        must(ra_relpos_index_2d(NULL, s->window, s->window, &trows), "index");
        lc->idx = malloc(nn * sizeof *lc->idx);
        must(ra_relpos_index_2d(lc->idx, s->window, s->window, NULL), "index");
        lc->table = rnd((size_t)trows * s->nh, 0.5f, &rng);
        lc->d.table = lc->table, lc->d.idx = lc->idx, lc->d.table_rows = trows;
    }
    if (s->k && tables) {
        const int r = 2 * s->k + 1;
        lc->rel = malloc(nn * sizeof *lc->rel);
        must(ra_relpos_index_clip(lc->rel, n, s->k), "clip index");
        lc->rel_k = rnd((size_t)r * hd, 0.5f, &rng), lc->rel_v = rnd((size_t)r * hd, 0.5f, &rng);
        lc->d.rel_k = lc->rel_k, lc->d.rel_v = lc->rel_v, lc->d.rel = lc->rel, lc->d.r = r;
    }
    if (s->shifted) {
        const int w = s->window;
        const ra_window_spec g = {1, 8 * w, 8 * w, 1, w, w, 0, w / 2, w / 2};
        lc->d.nw = (int)ra_window_count(&g);
        lc->mask = malloc((size_t)lc->d.nw * nn * sizeof *lc->mask);
        must(ra_window_mask(lc->mask, &g), "mask");
        lc->d.mask = lc->mask;
    }
    ra_attn_params p = {.qkv_w = lc->qkv_w, .qkv_b = lc->qkv_b, .proj_w = lc->proj_w,
                        .proj_b = lc->proj_b, .table = lc->table, .rel_k = lc->rel_k,
                        .rel_v = lc->rel_v};
    const int v2 = s->arch == RA_ARCH_SWINV2_WINDOW_ATTENTION;
    const size_t v2n[6] = {(size_t)s->nh, 1024, 512, (size_t)s->nh * 512, (size_t)C, (size_t)C};
    for (int i = 0; v2 && i < 6; i++) lc->v2[i] = rnd(v2n[i], i ? 0.05f : 0.5f, &rng);
    if (v2) {   /* no qkv bias of its own, no table (the CPB computes it) */
        for (int h = 0; h < s->nh; h++) lc->v2[0][h] += 2.3f;   /* logit scales near log 10 */
        p.qkv_b = NULL, p.table = NULL;
        p.logit_scale = lc->v2[0], p.cpb_w1 = lc->v2[1], p.cpb_b1 = lc->v2[2];
        p.cpb_w2 = lc->v2[3], p.q_bias = lc->v2[4], p.v_bias = lc->v2[5];
    }
    must(ra_attn_layer_create(&lc->layer, &cfg, &p), "layer");
    lc->g = (ra_attn_grads){.qkv_w = zeros((size_t)3 * C * C),
                            .qkv_b = lc->qkv_b ? zeros((size_t)3 * C) : NULL,
                            .proj_w = zeros((size_t)C * C), .proj_b = zeros(C),
                            .table = lc->table ? zeros((size_t)lc->d.table_rows * s->nh) : NULL,
                            .rel_k = lc->rel_k ? zeros((size_t)lc->d.r * hd) : NULL,
                            .rel_v = lc->rel_v ? zeros((size_t)lc->d.r * hd) : NULL};
    if (v2) {
        lc->g.qkv_b = NULL;
        lc->g.logit_scale = zeros(v2n[0]), lc->g.cpb_w1 = zeros(v2n[1]);
        lc->g.cpb_b1 = zeros(v2n[2]), lc->g.cpb_w2 = zeros(v2n[3]);
        lc->g.q_bias = zeros(v2n[4]), lc->g.v_bias = zeros(v2n[5]);
    }
    lc->x = rnd(rows * C, 1, &rng), lc->dy = rnd(rows * C, 1, &rng);
    lc->y = zeros(rows * C), lc->dx = zeros(rows * C), lc->out = zeros(rows * C);
    lc->qkv = rnd(rows * 3 * C, 1, &rng), lc->dqkv = zeros(rows * 3 * C);
    lc->ws = ra_attention_workspace_size(&lc->d, max_threads);
    if (ra_attention_backward_workspace_size(&lc->d, max_threads) > lc->ws)
        lc->ws = ra_attention_backward_workspace_size(&lc->d, max_threads);
    if (!(lc->work = malloc(lc->ws))) must(RA_ERR_NOMEM, "workspace");
}

static void case_free(layer_case *lc) {
    ra_attn_layer_free(lc->layer);
    ra_attn_tape_free(lc->tape);
    float *f[] = {lc->qkv_w, lc->qkv_b, lc->proj_w, lc->proj_b, lc->table, lc->rel_k,
                  lc->rel_v, lc->g.qkv_w, lc->g.qkv_b, lc->g.proj_w, lc->g.proj_b, lc->g.table,
                  lc->g.rel_k, lc->g.rel_v, lc->x, lc->y, lc->dx, lc->dy, lc->qkv, lc->dqkv,
                  lc->out, lc->mask};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) free(f[i]);
    float *f2[] = {lc->g.logit_scale, lc->g.cpb_w1, lc->g.cpb_b1, lc->g.cpb_w2, lc->g.q_bias,
                   lc->g.v_bias};
    for (int i = 0; i < 6; i++) free(lc->v2[i]), free(f2[i]);
    free(lc->idx), free(lc->rel), free(lc->work);
}

static void run_core_fwd(void *p) {
    layer_case *c = p;
    const int C = c->s->c;
    must(ra_attention_forward(c->out, C, NULL, c->qkv, 3 * C, c->qkv + C, 3 * C, c->qkv + 2 * C,
                              3 * C, &c->d, c->work, c->ws), "core forward");
}

static void run_core_bwd(void *p) {
    layer_case *c = p;
    const int C = c->s->c;
    must(ra_attention_backward(c->dqkv, 3 * C, c->dqkv + C, 3 * C, c->dqkv + 2 * C, 3 * C,
                               c->g.table, c->g.rel_k, c->g.rel_v, c->dy, C, c->qkv, 3 * C,
                               c->qkv + C, 3 * C, c->qkv + 2 * C, 3 * C, &c->d, c->work, c->ws),
         "core backward");
}

static void run_fwd(void *p) {
    layer_case *c = p;
    must(ra_attn_layer_forward(c->layer, c->y, NULL, c->x, NULL, c->s->b_, c->n, c->n, c->mask,
                               c->d.nw), "layer forward");
}

/* The backward a training step runs: from the tape of a training forward
 * (as PyTorch's from its graph), nothing recomputed. */
static void run_train_fwd(void *p) {
    layer_case *c = p;
    must(ra_attn_layer_forward_train(c->layer, &c->tape, c->y, NULL, c->x, NULL, c->s->b_, c->n,
                                     c->n, c->mask, c->d.nw), "layer training forward");
}

static void run_bwd(void *p) {
    layer_case *c = p;
    must(ra_attn_layer_backward_tape(c->layer, c->tape, c->dx, NULL, &c->g, c->dy),
         "layer backward");
}

static void run_fwd_bwd(void *p) {
    run_train_fwd(p);
    run_bwd(p);
}

/* The backward without a tape: projections and core output recomputed from x. */
static void run_bwd_recompute(void *p) {
    layer_case *c = p;
    must(ra_attn_layer_backward(c->layer, c->dx, NULL, &c->g, NULL, c->dy, c->x, NULL, c->s->b_,
                                c->n, c->n, c->mask, c->d.nw), "layer backward");
}

/* The peak memory one layer forward adds, with and without the Shaw
 * tables, at N/2 and N tokens (a warm-up call first, so that only the
 * call's own scratch counts). */
static void layer_memory(const run *R, const shape *s) {
    ra_threads_set(R->threads[R->nthreads - 1]);
    printf("%-40s memory one forward adds (MiB): ", s->name);
    for (int n = s->n / 2; n <= s->n; n *= 2) {
        double bytes[2];
        for (int tables = 1; tables >= 0; tables--) {
            layer_case lc;
            case_init(&lc, s, n, tables, R->threads[R->nthreads - 1]);
            run_fwd(&lc);
            bytes[tables] = peak_extra_bytes(run_fwd, &lc);
            case_free(&lc);
        }
        if (bytes[0] < 0 || bytes[1] < 0) {
            printf("not measurable here (needs Linux and glibc)");
            break;
        }
        printf("N=%d %.2f with tables, %.2f without; ", n, bytes[1] / 1048576,
               bytes[0] / 1048576);
        if (R->results)
            fprintf(R->results, "memory\trelattn\t%s\t%d\t%.0f\t%.0f\n", s->name, n, bytes[1],
                    bytes[0]);
    }
    printf("\n");
}

static void print_layer_header(void) {
    printf("%-40s %-6s %-9s", "layer (GFLOP/s)", "kernel", "threads");
    for (int m = 0; m < NMEASURES; m++) printf(" %9s", measure_names[m]);
    printf("\n");
}

/* Every measure of a shape under the current kernel at every thread count. */
static void bench_layer(const run *R, const shape *s) {
    const char *kernel = ra_kernel_name(ra_kernel_current());
    static const bench_fn fns[NMEASURES] = {run_core_fwd, run_core_bwd, run_fwd,
                                            run_bwd,      run_fwd_bwd,  run_bwd_recompute};
    double core, layer;
    layer_flops(s, s->n, &core, &layer);
    const double flops[NMEASURES] = {core, 2 * core, layer, 2 * layer, 3 * layer, 2 * layer};
    double gf[MAX_THREAD_COUNTS][NMEASURES];
    layer_case lc;
    case_init(&lc, s, s->n, 1, R->threads[R->nthreads - 1]);
    double t[MAX_THREAD_COUNTS][NMEASURES];
    for (int m = 0; m < NMEASURES; m++) {
        double sec[MAX_THREAD_COUNTS];
        time_medians(fns[m], fns[m] == run_bwd ? run_train_fwd : NULL, &lc, R->reps, R->threads,
                     R->nthreads, sec);
        for (int i = 0; i < R->nthreads; i++) t[i][m] = sec[i];
    }
    for (int i = 0; i < R->nthreads; i++) {
        printf("%-40s %-6s %-9d", i ? "" : s->name, i ? "" : kernel, R->threads[i]);
        for (int m = 0; m < NMEASURES; m++) {
            gf[i][m] = flops[m] / t[i][m] * 1e-9;
            printf(" %9.2f", gf[i][m]);
            emit_time(R, s->name, measure_names[m], kernel, R->threads[i], t[i][m], flops[m], 0);
        }
        printf("\n");
    }
    case_free(&lc);
    const int last = R->nthreads - 1;
    const double *fp32_peak = R->peak[RA_PRECISION_FP32];
    char label[32];
    snprintf(label, sizeof label, "%dT %% peak", R->threads[last]);
    printf("%-40s %-6s %-9s", "", "", label);
    for (int m = 0; m < NMEASURES; m++)
        printf(" %8.1f%%", fp32_peak[last] > 0 ? 100 * gf[last][m] / fp32_peak[last] : 0.0);
    printf("\n");
    if (last > 0) {
        printf("%-40s %-6s %-9s", "", "", scaling_label(R));
        for (int m = 0; m < NMEASURES; m++) printf(" %8.2fx", gf[last][m] / gf[0][m]);
        printf("\n");
    }
}

/* ---- networks ------------------------------------------------------------- */

static const struct {
    const char *name;   /* DIR/NAME.safetensors */
    int train;          /* also time a training step (forward + backward) */
    int size;           /* image side (a video network: --clip's) */
    int video;          /* clips (B, 3, T, S, S) of --clip's T x S x S (--what video3d) */
} nets[] = {{"swin_t", 1, 224, 0}, {"vit_b_16", 0, 224, 0}, {"swin_v2_t", 1, 256, 0},
            {"swin3d_t", 0, 224, 1}};

typedef struct {
    ra_model *m;
    int nx;                 /* 4 (images) or 5 (clips) */
    int64_t xs[5];
    float *x, *dy, *grad;   /* images (B, 3, S, S) or clips (B, 3, T, S, S), dL/dy (B,
                               classes), gradient */
} net_case;

static void run_net_fwd(void *p) {
    net_case *c = p;
    float *y = NULL;
    int nd;
    int64_t ys[4];
    must(ra_model_forward(c->m, &y, &nd, ys, c->x, c->nx, c->xs), "network forward");
    free(y);
}

static void run_net_step(void *p) {
    net_case *c = p;
    float *y = NULL;
    int nd;
    int64_t ys[4];
    memset(c->grad, 0, (size_t)ra_model_param_total(c->m) * sizeof *c->grad);
    must(ra_model_forward_train(c->m, &y, &nd, ys, c->x, c->nx, c->xs, NULL),
         "training forward");
    must(ra_model_backward(c->m, c->grad, NULL, c->dy), "backward");
    free(y);
}

static void print_net_header(const run *R) {
    printf("%-40s %-9s %-8s %-6s %-8s %10s %10s %10s %10s %8s\n", "network", "precision",
           "measure", "kernel", "threads", "images/s", "ms", "GFLOP/s", "of peak",
           R->nthreads > 1 ? scaling_label(R) : "");
}

/* The network in precision p at every batch size: the inference forward
 * of batches of random size x size images (frames > 0: clips of frames x
 * size x size, a video network's), and for fp32 and bf16 (train) a
 * training step. The model is loaded for each precision: it goes from
 * fp32 to one other precision only. A video network is loaded with
 * num_frames = frames, the clip ra_model_flops counts. */
static void bench_net_precision(const run *R, const char *path, const char *name, int train,
                                int size, int frames, const int *batches, int nb,
                                ra_precision p) {
    const char *pname = ra_precision_name(p);
    net_case c = {.nx = frames ? 5 : 4};
    char set_frames[32];
    snprintf(set_frames, sizeof set_frames, "num_frames=%d", frames);
    const char *const set[] = {set_frames};
    const ra_load_options lo = {.set = set, .nset = frames ? 1 : 0};
    if (ra_model_open(&c.m, path, &lo)) {
        printf("%-40s %-9s skipped: %s\n", name, pname, ra_last_error());
        return;
    }
    if (ra_model_set_precision(c.m, p)) {
        printf("%-40s %-9s skipped: %s\n", name, pname, ra_last_error());
        ra_model_free(c.m);
        return;
    }
    const char *kernel = ra_kernel_name(ra_kernel_current());
    const double fwd_flops = 2.0 * (double)ra_model_flops(c.m, size, size);
    const double *peak = R->peak[p];
    train = train && p != RA_PRECISION_INT8 && ra_model_trainable(c.m);
    for (int i = 0; i < nb; i++) {
        const int b = batches[i];
        char row[96], shown[80];   /* the results' row name; the table's (no precision) */
        if (frames) snprintf(shown, sizeof shown, "%s B=%d %dx%dx%d", name, b, frames, size, size);
        else snprintf(shown, sizeof shown, "%s B=%d", name, b);
        snprintf(row, sizeof row, "%s%s%s", shown, p == RA_PRECISION_FP32 ? "" : " ",
                 p == RA_PRECISION_FP32 ? "" : pname);
        ra_rng rng;
        ra_rng_seed(&rng, 11);
        c.xs[0] = b, c.xs[1] = 3, c.xs[2] = c.xs[3] = c.xs[4] = size;
        if (frames) c.xs[2] = frames;
        c.x = rnd((size_t)b * 3 * (frames ? frames : 1) * size * size, 2, &rng);
        float *y = NULL;
        int nd;
        int64_t ys[4];
        must(ra_model_forward(c.m, &y, &nd, ys, c.x, c.nx, c.xs), "network forward");
        free(y);
        c.dy = rnd((size_t)(ys[0] * ys[1]), 1, &rng);
        c.grad = train ? zeros((size_t)ra_model_param_total(c.m)) : NULL;
        for (int step = 0; step <= train; step++) {
            const double flops = (step ? 3 : 1) * fwd_flops * b;
            double first = 0, sec[MAX_THREAD_COUNTS];
            time_medians(step ? run_net_step : run_net_fwd, NULL, &c, R->reps, R->threads,
                         R->nthreads, sec);
            for (int t = 0; t < R->nthreads; t++) {
                const double s = sec[t];
                const double gf = flops / s * 1e-9;
                if (t == 0) first = gf;
                printf("%-40s %-9s %-8s %-6s %-8d %10.2f %10.1f %10.2f %9.1f%%", t ? "" : shown,
                       t ? "" : pname, t ? "" : (step ? "fwd+bwd" : "fwd"), t ? "" : kernel,
                       R->threads[t], b / s, 1e3 * s, gf, peak[t] > 0 ? 100 * gf / peak[t] : 0.0);
                if (t) printf(" %7.2fx", gf / first);
                printf("\n");
                emit_time(R, row, step ? "fwd+bwd" : "fwd", kernel, R->threads[t], s, flops, b);
            }
        }
        free(c.x), free(c.dy), free(c.grad);
    }
    ra_model_free(c.m);
}

static void bench_net(const run *R, const char *dir, const char *name, int train, int size,
                      int frames, const int *batches, int nb) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    for (int i = 0; i < R->nprecisions; i++)
        bench_net_precision(R, path, name, train, size, frames, batches, nb, R->precisions[i]);
}

/* ---- main ----------------------------------------------------------------- */

/* "1,8" -> {1, 8}; returns the count (at most max), 0 if malformed. */
static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    for (const char *p = s; *p;) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096 || n == max) return 0;
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 0;
    }
    return n;
}

static void cpu_model(char *buf, size_t n) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    snprintf(buf, n, "unknown CPU");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && colon) {
            snprintf(buf, n, "%s", colon + 2);
            buf[strcspn(buf, "\n")] = 0;
            break;
        }
    }
    if (f) fclose(f);
}

/* The peaks at each thread count, at the start and again at the end of
 * the run: R->peak keeps the higher (a peak measured while other work had
 * the cores is too low), and the results file gets it, a line per
 * precision (summary.py reads the last line of each). The tables use the
 * start's. fp32: the FMA peak; bf16: the VDPBF16PS peak where relattn's
 * bf16 runs on it (the avx512 kernel set on a CPU with AVX512_BF16), else
 * the FMA peak (its products are then float32 products of rounded values);
 * int8: the int8 peak, measured only if a network runs in int8. */
static void measure_peaks(run *R, const char *when) {
    int int8 = 0, bf16 = 0;
    for (int j = 0; j < R->nprecisions; j++) int8 |= R->precisions[j] == RA_PRECISION_INT8;
    /* relattn's bf16 runs on VDPBF16PS with the avx512 kernel set where
     * the CPU has it (bf16_peak > 0), else on the float32 kernels */
    for (int j = 0; j < R->nprecisions; j++)
        bf16 |= R->precisions[j] == RA_PRECISION_BF16 && ra_kernel_current() == RA_KERNEL_AVX512;
    for (int i = 0; i < R->nthreads; i++) {
        const char *isa[NPRECISIONS];
        double g[NPRECISIONS];
        g[RA_PRECISION_FP32] = g[RA_PRECISION_BF16] = fma_peak(R->threads[i], &isa[0]);
        isa[RA_PRECISION_BF16] = isa[RA_PRECISION_FP32];
        const double bf = bf16 ? bf16_peak(R->threads[i], &isa[RA_PRECISION_BF16]) : 0;
        if (bf > 0) g[RA_PRECISION_BF16] = bf;
        else isa[RA_PRECISION_BF16] = isa[RA_PRECISION_FP32];
        printf("FMA peak (%s, measured at the %s) at %d threads: %.1f GFLOP/s (fp32%s)\n",
               isa[0], when, R->threads[i], g[0], bf > 0 ? "" : ", bf16");
        if (bf > 0)
            printf("bf16 peak (%s, measured at the %s) at %d threads: %.1f GFLOP/s (bf16)\n",
                   isa[RA_PRECISION_BF16], when, R->threads[i], bf);
        if (int8) {
            g[RA_PRECISION_INT8] = i8_peak(R->threads[i], &isa[RA_PRECISION_INT8]);
            printf("int8 peak (%s, measured at the %s) at %d threads: %.1f GOP/s (int8)\n",
                   isa[RA_PRECISION_INT8], when, R->threads[i], g[RA_PRECISION_INT8]);
        }
        for (int p = 0; p < NPRECISIONS; p++) {
            if (p == RA_PRECISION_INT8 && !int8) continue;
            if (g[p] > R->peak[p][i]) R->peak[p][i] = g[p];
            if (R->results)
                fprintf(R->results, "peak\t%d\t%.6g\t%s\t%s\n", R->threads[i], R->peak[p][i],
                        isa[p], ra_precision_name((ra_precision)p));
        }
    }
}

/* "fp32,int8" -> R->precisions; 0 if malformed or repeated. */
static int parse_precisions(run *R, const char *s) {
    R->nprecisions = 0;
    for (const char *p = s; *p;) {
        const size_t n = strcspn(p, ",");
        char name[16];
        if (n >= sizeof name) return 0;
        memcpy(name, p, n), name[n] = 0;
        const int v = ra_precision_parse(name);
        if (v < 0 || R->nprecisions == NPRECISIONS) return 0;
        for (int i = 0; i < R->nprecisions; i++)
            if (R->precisions[i] == (ra_precision)v) return 0;
        R->precisions[R->nprecisions++] = (ra_precision)v;
        p += n + (p[n] == ',');
    }
    return R->nprecisions;
}

static void info(const run *R, const char *key, const char *value) {
    if (R->results) fprintf(R->results, "info\trelattn\t%s\t%s\n", key, value);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);   /* rows show as they are done, through a pipe too */
    run R = {.reps = 9, .nprecisions = NPRECISIONS,
             .precisions = {RA_PRECISION_FP32, RA_PRECISION_BF16, RA_PRECISION_INT8}};
    int batches[8] = {1, 8}, nb = 2, all_kernels = 1, clip[2] = {32, 224};
    const char *what = "all", *models = getenv("RELATTN_BENCH_MODELS"), *rows = "";
    const char *threads = NULL, *results = NULL;
    for (int i = 1; i < argc; i += 2) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!v) ok = 0;
        else if (!strcmp(o, "--threads")) threads = v;
        else if (!strcmp(o, "--reps")) R.reps = atoi(v);
        else if (!strcmp(o, "--what")) what = v;
        else if (!strcmp(o, "--models")) models = v;
        else if (!strcmp(o, "--rows")) rows = v;
        else if (!strcmp(o, "--results")) results = v;
        else if (!strcmp(o, "--batches")) ok = (nb = parse_list(v, batches, 8)) > 0;
        else if (!strcmp(o, "--clip")) ok = parse_list(v, clip, 2) == 2;
        else if (!strcmp(o, "--precisions")) ok = parse_precisions(&R, v) > 0;
        else if (!strcmp(o, "--kernels"))
            ok = !strcmp(v, "all") || !strcmp(v, "default"), all_kernels = !strcmp(v, "all");
        else ok = 0;
        if (!ok) {
            fprintf(stderr, "relattn_bench: bad option %s (see the top of bench/bench.c)\n", o);
            return 64;
        }
    }
    const int video = !strcmp(what, "video3d");
    const int do_nets = strcmp(what, "layers") != 0;
    const int do_layers = !strcmp(what, "all") || !strcmp(what, "layers");
    if (!video && !do_layers && strcmp(what, "nets"))
        return fprintf(stderr, "relattn_bench: --what all|layers|nets|video3d\n"), 64;
    if (threads) {
        if (!(R.nthreads = parse_list(threads, R.threads, MAX_THREAD_COUNTS)))
            return fprintf(stderr, "relattn_bench: --threads 1,2 (up to %d counts)\n",
                           MAX_THREAD_COUNTS), 64;
    } else {   /* 1 and every core */
        R.threads[R.nthreads++] = 1;
        if (ra_threads_get() > 1) R.threads[R.nthreads++] = ra_threads_get();
    }
    if (R.reps < 1) R.reps = 1;
    if (R.reps > MAX_REPS) R.reps = MAX_REPS;
    if (results && !(R.results = fopen(results, "a")))
        return fprintf(stderr, "relattn_bench: cannot write %s\n", results), 73;

    char cpu[256], text[512];
    cpu_model(cpu, sizeof cpu);
    const ra_kernel_id chosen = ra_kernel_current();
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf("relattn bench: threads");
    for (int i = 0; i < R.nthreads; i++) printf("%s%d", i ? "," : " ", R.threads[i]);
    printf("; median of %d runs; kernel %s; networks in", R.reps, ra_kernel_name(chosen));
    for (int i = 0; i < R.nprecisions; i++)
        printf("%s%s", i ? "," : " ", ra_precision_name(R.precisions[i]));
    printf("\n");
    printf("CPU: %s, %d cores\n", cpu, ra_threads_get());
    printf("BLAS: %s, kernel set %s (OPENBLAS_CORETYPE %s)\n", openblas_get_config(),
           openblas_get_corename(), coretype ? coretype : "unset");
    info(&R, "cpu", cpu);
    snprintf(text, sizeof text, "%d", ra_threads_get());
    info(&R, "cores", text);
    info(&R, "blas", openblas_get_config());
    info(&R, "blas_core", openblas_get_corename());
    info(&R, "kernel", ra_kernel_name(chosen));
    snprintf(text, sizeof text, "%d", R.reps);
    info(&R, "reps", text);
    measure_peaks(&R, "start");
    FILE *la = fopen("/proc/loadavg", "r");   /* other work on the cores skews everything */
    if (la && fgets(text, sizeof text, la)) {
        text[strcspn(text, "\n")] = 0;
        printf("load average: %s\n", text);
        info(&R, "load", text);
    }
    if (la) fclose(la);
    printf("\n");

    if (do_nets) {
        print_net_header(&R);
        if (!models) printf("(no --models DIR or RELATTN_BENCH_MODELS: networks skipped)\n");
        const int one[1] = {1};   /* a video network: one clip, the 1 x 3 x T x S x S */
        for (size_t i = 0; models && i < sizeof nets / sizeof *nets; i++)
            if (strstr(nets[i].name, rows) && nets[i].video == video)
                bench_net(&R, models, nets[i].name, nets[i].train, video ? clip[1] : nets[i].size,
                          video ? clip[0] : 0, video ? one : batches, video ? 1 : nb);
        printf("\n");
    }
    if (do_layers) {
        print_layer_header();
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            if (!strstr(shapes[s].name, rows)) continue;
            for (int k = 0; k < RA_KERNEL_COUNT; k++) {
                if (!ra_kernel_supported((ra_kernel_id)k) || (!all_kernels && k != (int)chosen))
                    continue;
                ra_kernel_select((ra_kernel_id)k);
                bench_layer(&R, &shapes[s]);
            }
            ra_kernel_select(chosen);
            if (shapes[s].k) layer_memory(&R, &shapes[s]);
        }
    }
    printf("\n");
    measure_peaks(&R, "end");
    if (R.results) fclose(R.results);
    return 0;
}
