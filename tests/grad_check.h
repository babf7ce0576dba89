/* grad_check.h - what the gradient tests share: a fixture tensor as F32
 * and the error of a result relative to the largest magnitude of the
 * expected values (SPEC 2.6's 1e-4 for gradients is of that scale). */
#ifndef RA_GRAD_CHECK_H
#define RA_GRAD_CHECK_H

#include "relattn.h"

#include <math.h>
#include <stdlib.h>

/* The tensor name of f converted to F32 (malloc'ed), NULL if absent or
 * unreadable; *out its header (may be NULL). */
static inline float *tensor(const ra_st_file *f, const char *name, const ra_st_tensor **out) {
    const ra_st_tensor *t = ra_st_find(f, name);
    if (out) *out = t;
    if (!t) return NULL;
    float *v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
    if (v && ra_st_to_f32(v, t)) free(v), v = NULL;
    return v;
}

/* max |a - e| / max |e|; NaN anywhere counts as infinite */
static inline double rel_err(const float *a, const float *e, int64_t n) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - e[i]);
        if (!(x <= d)) d = isnan(x) ? INFINITY : x;
        if (fabs(e[i]) > m) m = fabs(e[i]);
    }
    return m > 0 ? d / m : d;
}

#endif
