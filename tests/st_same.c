/* st_same.c - exit 0 if two safetensors files hold the same tensors (names,
 * dtypes, shapes and bytes), whatever their metadata; used by
 * tests/test_train.sh to compare the weights of two training runs.
 *
 *   st_same A.safetensors B.safetensors [PREFIX_TO_IGNORE] */
#include "relattn.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 3) return fprintf(stderr, "usage: st_same A B [IGNORE_PREFIX]\n"), 2;
    ra_st_file *a = NULL, *b = NULL;
    if (ra_st_open(&a, argv[1]) || ra_st_open(&b, argv[2]))
        return fprintf(stderr, "st_same: %s\n", ra_last_error()), 2;
    const char *skip = argc > 3 ? argv[3] : NULL;
    int differ = 0, compared = 0;
    for (int i = 0; i < ra_st_count(a); i++) {
        const ra_st_tensor *ta = ra_st_at(a, i);
        if (skip && strncmp(ta->name, skip, strlen(skip)) == 0) continue;
        const ra_st_tensor *tb = ra_st_find(b, ta->name);
        int same = tb && ta->dtype == tb->dtype && ta->ndim == tb->ndim && ta->nbytes == tb->nbytes;
        for (int d = 0; same && d < ta->ndim; d++) same = ta->shape[d] == tb->shape[d];
        if (same) same = memcmp(ta->data, tb->data, ta->nbytes) == 0;
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
    printf("%d tensors compared, %d differ\n", compared, differ);
    ra_st_close(a);
    ra_st_close(b);
    return differ ? 1 : 0;
}
