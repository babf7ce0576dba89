/* threads.c - how many threads the kernels use.
 *
 * The OpenMP loops and kernels take ra_threads_get() threads; OpenBLAS
 * (its pthread build keeps its own pool) is told the same number, so that
 * the products that still go through it neither oversubscribe the cores
 * nor run on fewer threads than the rest. */
#include "base/internal.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static int requested;   /* 0: OpenMP's default */

void ra_threads_set(int n) {
    requested = n > 0 ? n : 0;
    openblas_set_num_threads(ra_threads_get());
}

/* Inside a parallel region (the trainer's shards, or a caller's own) the
 * kernels run on the calling thread alone. */
int ra_threads_get(void) {
    if (omp_in_parallel()) return 1;
    return requested > 0 ? requested : omp_get_max_threads();
}

static _Thread_local ra_precision precision, core_precision;
static _Thread_local int precision_failed;

ra_precision rai_precision_get(void) { return precision; }

ra_precision rai_precision_set(ra_precision p) {
    const ra_precision was = precision;
    precision = p;
    return was;
}

ra_precision rai_core_precision_get(void) { return core_precision; }

ra_precision rai_core_precision_set(ra_precision p) {
    const ra_precision was = core_precision;
    core_precision = p;
    return was;
}

void rai_precision_fail(void) { precision_failed = 1; }

int rai_precision_failed(void) {
    const int f = precision_failed;
    precision_failed = 0;
    return f;
}

/* Task s on the calling thread in the caller's precisions (prec[0] the
 * products', prec[1] the attention cores'); failures recorded in st[s],
 * why (the first reason) and *failed. */
static void run_task(ra_status (*fn)(void *, int), void *ctx, int s, const ra_precision prec[2],
                     ra_status *st, char *why, size_t nwhy, int *failed) {
    const ra_precision was = rai_precision_set(prec[0]);
    const ra_precision core_was = rai_core_precision_set(prec[1]);
    st[s] = fn(ctx, s);
    *failed |= rai_precision_failed();
    rai_precision_set(was);
    rai_core_precision_set(core_was);
    if (st[s]) {   /* the reason is this thread's: keep it */
        #pragma omp critical(rai_run_parts)
        if (!why[0]) snprintf(why, nwhy, "%s", ra_last_error());
    }
}

/* The first failure of n tasks, its reason raised on this thread. */
static ra_status tasks_status(int n, const ra_status *st, const char *why, int failed) {
    if (failed) precision_failed = 1;
    for (int s = 0; s < n; s++)
        if (st[s]) return rai_fail(st[s], "%s", why);
    return RA_OK;
}

ra_status rai_run_parts(int n, ra_status (*part)(void *ctx, int s), void *ctx) {
    if (n < 1 || n > RA_MAX_PARTS) return rai_fail(RA_ERR_INTERNAL, "%d parts", n);
    if (n == 1) return part(ctx, 0);
    ra_status st[RA_MAX_PARTS];
    char why[512] = "";
    const ra_precision prec[2] = {precision, core_precision};   /* as the caller */
    int failed = 0;
    #pragma omp parallel for num_threads(n) schedule(static, 1) reduction(| : failed)
    for (int s = 0; s < n; s++) run_task(part, ctx, s, prec, st, why, sizeof why, &failed);
    return tasks_status(n, st, why, failed);
}

ra_status rai_run_tasks(int n, int threads, ra_status (*task)(void *ctx, int s), void *ctx) {
    if (n < 1 || n > RA_MAX_TASKS) return rai_fail(RA_ERR_INTERNAL, "%d tasks", n);
    ra_status *st = calloc((size_t)n, sizeof *st);
    if (!st) return rai_fail(RA_ERR_NOMEM, "%d tasks: out of memory", n);
    char why[512] = "";
    const ra_precision prec[2] = {precision, core_precision};
    int failed = 0;
    #pragma omp parallel for num_threads(threads > 1 ? threads : 1) schedule(dynamic, 1) \
        reduction(| : failed)
    for (int s = 0; s < n; s++) run_task(task, ctx, s, prec, st, why, sizeof why, &failed);
    const ra_status r = tasks_status(n, st, why, failed);
    free(st);
    return r;
}
