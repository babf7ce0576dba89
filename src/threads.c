/* threads.c - how many threads the kernels use.
 *
 * The OpenMP loops and kernels take ra_threads_get() threads; OpenBLAS
 * (its pthread build keeps its own pool) is told the same number, so that
 * the products that still go through it neither oversubscribe the cores
 * nor run on fewer threads than the rest. */
#include "relattn.h"

#include <cblas.h>
#include <omp.h>

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
