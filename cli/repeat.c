/* repeat.c - --repeat R and --json of forward and backward (docs/reference.md,
 * section 4): one
 * warm-up run, then R timed runs of the compute alone (files are read
 * before and written after), and one report of their times. */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Enough for a median of tiny layers; the times are one double each. */
#define REPEAT_MAX 1000000

int repeat_option(repeat *r, const opt *opts) {
    memset(r, 0, sizeof *r);
    const char *v = get(opts, "--repeat");
    r->json = get(opts, "--json") != NULL;
    if (v && !parse_int(&r->runs, v, 1, REPEAT_MAX))
        return usage_error("--repeat '%.40s': need a whole number of runs in 1..%d", v,
                           REPEAT_MAX), 0;
    if (!v && r->json) r->runs = 1;   /* --json alone: --repeat 1 */
    return 1;
}

/* Multiply-adds of one forward, as ra_model_flops counts them, for an input
 * x of that shape (the layouts of 'forward --help'): the count of one
 * window, sequence, image or clip times their number; -1 where the model
 * has no count for this input. */
double run_macs(const ra_model *m, int ndim, const int64_t *shape) {
    double n = -1;   /* windows, sequences, images or clips */
    int64_t f = -1;
    const ra_arch arch = ra_model_arch(m);
    if (ra_model_attn(m) && ndim == 3) {   /* (B_, N1, C): one window or sequence */
        n = (double)shape[0];
        f = shape[1] <= INT32_MAX ? ra_model_flops(m, (int)shape[1], 1) : -1;
    } else if (arch == RA_ARCH_SWIN_BLOCK && (ndim == 3 || ndim == 4)) {
        int res[2] = {(int)shape[1], (int)shape[2]};   /* (B, H, W, C) */
        if (ndim == 3) {   /* (B, H*W, C) at input_resolution "H,W" (or "H") */
            const char *v = ra_model_meta(m, "input_resolution");
            const int k = v ? sscanf(v, "%d ,%d", &res[0], &res[1]) : 0;
            if (k < 1) return -1;
            if (k == 1) res[1] = res[0];
        }
        n = (double)shape[0];
        f = ra_model_flops(m, res[0], res[1]);
    } else if ((arch == RA_ARCH_SWIN || arch == RA_ARCH_VIT || arch == RA_ARCH_SWINV2) &&
               ndim == 4) {
        n = (double)shape[0];   /* (B, C_in, H, W) */
        f = shape[2] <= INT32_MAX && shape[3] <= INT32_MAX
                ? ra_model_flops(m, (int)shape[2], (int)shape[3]) : -1;
    } else if (arch == RA_ARCH_SWIN_BLOCK_3D && (ndim == 4 || ndim == 5)) {
        /* one clip (D, H, W, C) or clips (B, D, H, W, C); the count is of a
         * clip of the window's frames for a self block (a cross block's
         * frames are fixed), so D must be a multiple of them */
        const int64_t *c = shape + (ndim - 4);
        n = ndim == 5 ? (double)shape[0] : 1;
        if (!ra_model_meta(m, "num_frames_q")) {
            const char *ws = ra_model_meta(m, "window_size");
            const long wd = ws ? strtol(ws, NULL, 10) : 0;
            if (wd < 1 || c[0] % wd) return -1;
            n *= (double)(c[0] / wd);
        }
        f = c[1] <= INT32_MAX && c[2] <= INT32_MAX ? ra_model_flops(m, (int)c[1], (int)c[2]) : -1;
    }
    return f < 0 || n < 0 ? -1 : n * (double)f;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int repeat_run(repeat *r, run_fn run, void *ctx, double flops) {
    r->flops = flops;
    if (!r->runs) return run(ctx);
    double *t = malloc((size_t)r->runs * sizeof *t);
    if (!t) return fail(EX_DATAERR, "too large: out of memory for %d timings", r->runs);
    int code = run(ctx);   /* the warm-up: first-touch pages, workspaces, thread pools */
    for (int i = 0; i < r->runs && !code; i++) {
        const double t0 = now_ms();
        code = run(ctx);
        t[i] = now_ms() - t0;
    }
    if (!code) {
        qsort(t, (size_t)r->runs, sizeof *t, cmp_double);
        const int h = r->runs / 2;
        r->median_ms = r->runs % 2 ? t[h] : 0.5 * (t[h - 1] + t[h]);
        r->min_ms = t[0];
    }
    free(t);
    return code;
}

void repeat_report(const repeat *r) {
    if (!r->runs) return;
    const int known = r->flops >= 0 && r->median_ms > 0;
    const double gflops = known ? r->flops / (r->median_ms * 1e6) : 0;
    if (r->json) {
        jw jo = {0};
        jw_object(&jo);
        jw_key(&jo, "median_ms");
        jw_real(&jo, "%.6g", r->median_ms);
        jw_key(&jo, "min_ms");
        jw_real(&jo, "%.6g", r->min_ms);
        jw_key(&jo, "gflops");
        if (known) jw_real(&jo, "%.6g", gflops);
        else jw_null(&jo);
        jw_end(&jo, '}');
        jw_line(&jo);
    } else {
        fprintf(stderr, "%s: %d run%s after a warm-up: median %.3f ms, min %.3f ms, ", cmd,
                r->runs, r->runs > 1 ? "s" : "", r->median_ms, r->min_ms);
        if (known) fprintf(stderr, "%.2f GFLOP/s\n", gflops);
        else fprintf(stderr, "no flop count\n");
    }
}
