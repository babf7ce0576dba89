/* grad_check.h - what the gradient tests share: a fixture tensor as F32
 * and the error of a result relative to the largest magnitude of the
 * expected values (the 1e-4 for gradients of docs/reference.md, section 6, is of that
 * scale). */
#ifndef RA_GRAD_CHECK_H
#define RA_GRAD_CHECK_H

#include "relattn.h"

#include <math.h>
#include <stdio.h>
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

/* The parameter gradients grad (flat, laid out like m's weights) against
 * the fixture gf's grad.NAME (NAME as in m's file): the worst rel_err into
 * *worst (kept if larger) with its name into wname (n bytes); returns how
 * many were compared, or -1 if one is missing or misshapen (its name then
 * in wname). */
static inline int grads_vs_fixture(const ra_model *m, const float *grad, const ra_st_file *gf,
                                   double *worst, char *wname, size_t n) {
    int seen = 0;
    for (int i = 0; i < ra_model_param_count(m); i++) {
        const ra_param_info *pi = ra_model_param(m, i);
        char gn[160];
        snprintf(gn, sizeof gn, "grad.%s", pi->file_name);
        const ra_st_tensor *te;
        float *e = tensor(gf, gn, &te);
        if (!e || te->numel != pi->numel) {
            free(e);
            snprintf(wname, n, "%s", gn);
            return -1;
        }
        const double r = rel_err(grad + pi->offset, e, pi->numel);
        if (!(r <= *worst)) *worst = r, snprintf(wname, n, "%s", gn);
        free(e);
        seen++;
    }
    return seen;
}

#endif
