/* threads.c - how many threads the kernels use. */
#include "relattn.h"

#include <omp.h>

static int requested;   /* 0: OpenMP's default */

void ra_threads_set(int n) { requested = n > 0 ? n : 0; }

int ra_threads_get(void) { return requested > 0 ? requested : omp_get_max_threads(); }
