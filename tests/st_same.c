/* st_same.c - exit 0 if two safetensors files hold the same tensors (names,
 * dtypes, shapes and bytes), whatever their metadata; used by
 * tests/test_train.sh to compare the weights of two training runs.
 *
 *   st_same A.safetensors B.safetensors [PREFIX_TO_IGNORE [TOL]]
 *
 * With TOL, F32 tensors of the same shape may differ by at most TOL
 * (absolute) element by element, and the largest difference is printed
 * (data-parallel runs whose gradient sums reassociate: tests/test_mpi.sh). */
#include "relattn.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 3) return fprintf(stderr, "usage: st_same A B [IGNORE_PREFIX]\n"), 2;
    ra_st_file *a = NULL, *b = NULL;
    if (ra_st_open(&a, argv[1]) || ra_st_open(&b, argv[2]))
        return fprintf(stderr, "st_same: %s\n", ra_last_error()), 2;
    const char *skip = argc > 3 && argv[3][0] ? argv[3] : NULL;
    const double tol = argc > 4 ? atof(argv[4]) : -1;
    double worst = 0;
    int differ = 0, compared = 0;
    for (int i = 0; i < ra_st_count(a); i++) {
        const ra_st_tensor *ta = ra_st_at(a, i);
        if (skip && strncmp(ta->name, skip, strlen(skip)) == 0) continue;
        const ra_st_tensor *tb = ra_st_find(b, ta->name);
        int same = tb && ta->dtype == tb->dtype && ta->ndim == tb->ndim && ta->nbytes == tb->nbytes;
        for (int d = 0; same && d < ta->ndim; d++) same = ta->shape[d] == tb->shape[d];
        if (same && tol >= 0 && ta->dtype == RA_DTYPE_F32) {
            const float *x = (const float *)ta->data, *y = (const float *)tb->data;
            for (int64_t e = 0; e < ta->numel; e++) {
                const double dd = fabs((double)x[e] - (double)y[e]);
                if (!(dd <= tol)) same = 0;   /* NaN too */
                if (dd > worst) worst = dd;
            }
        } else if (same) {
            same = memcmp(ta->data, tb->data, ta->nbytes) == 0;
        }
        if (!same) {
            if (differ < 5) fprintf(stderr, "st_same: tensor %s differs\n", ta->name);
            differ++;
        }
        compared++;
    }
    int nb = 0;
    for (int i = 0; i < ra_st_count(b); i++)
        nb += !(skip && strncmp(ra_st_at(b, i)->name, skip, strlen(skip)) == 0);
    if (nb != compared) fprintf(stderr, "st_same: %d tensors against %d\n", compared, nb), differ++;
    printf("%d tensors compared, %d differ", compared, differ);
    if (tol >= 0) printf(" (largest difference %.3g, tolerance %.3g)", worst, tol);
    printf("\n");
    ra_st_close(a);
    ra_st_close(b);
    return differ ? 1 : 0;
}
