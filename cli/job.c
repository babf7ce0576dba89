/* job.c - the INPUT file that forward and backward share: its tensors,
 * checked against an attention layer, and the writer of their outputs. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A float tensor of the input as F32: checks rank and the dims that are
 * fixed (-1 = any), converts, and says which it was on failure. */
static ra_status input_tensor(float **out, const ra_st_tensor **tt, const ra_st_file *f,
                              const char *name, int ndim, const int64_t *dims) {
    const ra_st_tensor *t = ra_st_find(f, name);
    *out = NULL;
    *tt = t;
    if (!t) return RA_OK;
    if (t->dtype != RA_DTYPE_F32 && t->dtype != RA_DTYPE_F16 && t->dtype != RA_DTYPE_BF16 &&
        t->dtype != RA_DTYPE_F64) {
        fail(EX_DATAERR, "input tensor '%s' is not a float tensor", name);
        return RA_ERR_SHAPE;
    }
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] >= 1 && t->shape[i] <= INT_MAX &&
                                              (dims[i] < 0 || t->shape[i] == dims[i]);
    if (!ok) {
        char want[128] = "(", got[256] = "(";
        for (int i = 0; i < ndim; i++) {
            char d[24];
            if (dims[i] < 0) snprintf(d, sizeof d, "%s*", i ? ", " : "");
            else snprintf(d, sizeof d, "%s%lld", i ? ", " : "", (long long)dims[i]);
            strcat(want, d);
        }
        for (int i = 0; i < t->ndim; i++) {
            char d[24];
            snprintf(d, sizeof d, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
            strcat(got, d);
        }
        fail(EX_DATAERR, "input tensor '%s' has shape %s), expected %s)", name, got, want);
        return RA_ERR_SHAPE;
    }
    *out = malloc((size_t)t->numel * sizeof(float) + 1);
    if (!*out) {
        fail(EX_DATAERR, "input tensor '%s' (%lld values) is too large: out of memory", name,
             (long long)t->numel);
        return RA_ERR_NOMEM;
    }
    ra_status st = ra_st_read_f32(*out, f, t);
    if (st) lib_fail(st);
    return st;
}

void job_close(job *j) {
    free(j->x), free(j->kv), free(j->mask), free(j->dy);
    ra_st_close(j->in);
    ra_model_free(j->m);
}

int job_open(job *j, ra_model *m, const char *input, int need_dy) {
    memset(j, 0, sizeof *j);
    j->m = m;   /* owned by the job from here */
    ra_status st = ra_st_open(&j->in, input);
    if (st) return lib_fail(st);
    j->l = ra_model_attn(j->m);
    j->c = ra_attn_layer_config(j->l);
    const int is3d = j->c->arch == RA_ARCH_WINDOW_ATTENTION_3D;
    j->xname = is3d && !ra_st_find(j->in, "x") ? "q" : "x";
    for (int i = 0; i < ra_st_count(j->in); i++) {
        const char *nm = ra_st_at(j->in, i)->name;
        if (strcmp(nm, j->xname) && strcmp(nm, "mask") && strcmp(nm, "dy") &&
            !(is3d && strcmp(nm, "kv") == 0))
            return fail(EX_DATAERR, "unexpected input tensor '%.80s' for %s", nm,
                        ra_arch_name(j->c->arch));
    }
    const ra_st_tensor *tx, *tkv, *tm, *tdy;
    const int C = j->c->dim;
    /* decomposed_attention takes x as (B, H, W, C) (its grid) or (B, N, C) */
    const ra_st_tensor *t0 = ra_st_find(j->in, j->xname);
    j->x_ndim = j->c->arch == RA_ARCH_DECOMPOSED_ATTENTION && t0 && t0->ndim == 4 ? 4 : 3;
    if ((st = input_tensor(&j->x, &tx, j->in, j->xname, j->x_ndim,
                           j->x_ndim == 4 ? (int64_t[]){-1, -1, -1, C} : (int64_t[]){-1, -1, C})))
        return status_exit(st);
    if (!tx) return fail(EX_DATAERR, "input has no tensor '%s'", j->xname);
    memcpy(j->x_shape, tx->shape, (size_t)j->x_ndim * sizeof *j->x_shape);
    j->b_ = (int)tx->shape[0], j->n1 = (int)tx->shape[1];
    if (j->x_ndim == 4) {
        if (tx->shape[1] * tx->shape[2] > INT_MAX)
            return fail(EX_DATAERR, "input tensor '%s' has too many tokens", j->xname);
        j->grid[0] = (int)tx->shape[1], j->grid[1] = (int)tx->shape[2];
        j->n1 = j->grid[0] * j->grid[1];
        j->gridp = j->grid;
    }
    if ((st = input_tensor(&j->kv, &tkv, j->in, "kv", 3, (int64_t[]){j->b_, -1, C})))
        return status_exit(st);
    j->n2 = tkv ? (int)tkv->shape[1] : j->n1;
    if ((st = input_tensor(&j->mask, &tm, j->in, "mask", 3, (int64_t[]){-1, j->n1, j->n2})))
        return status_exit(st);
    j->nw = tm ? (int)tm->shape[0] : 0;
    if (tm && j->b_ % j->nw)
        return fail(EX_DATAERR, "mask has %d windows, which does not divide B_ = %d", j->nw,
                    j->b_);
    if (!j->gridp && (st = ra_attn_layer_check_tokens(j->l, j->n1, j->n2))) return lib_fail(st);
    if (need_dy) {
        if ((st = input_tensor(&j->dy, &tdy, j->in, "dy", j->x_ndim, j->x_shape)))
            return status_exit(st);
        if (!tdy) return fail(EX_DATAERR, "input has no tensor 'dy' (the gradient of y)");
    }
    return EX_OK;
}

int attn_map_fits(const job *j) {
    int64_t n = j->b_;
    if (__builtin_mul_overflow(n, j->c->num_heads, &n) || __builtin_mul_overflow(n, j->n1, &n) ||
        __builtin_mul_overflow(n, j->n2, &n) || n > RA_MAX_ATTN_MAP)
        return fail(EX_DATAERR, "too large: --attn map of %d x %d x %d x %d floats exceeds the "
                    "limit of %lld", j->b_, j->c->num_heads, j->n1, j->n2,
                    (long long)RA_MAX_ATTN_MAP);
    return EX_OK;
}

ra_status put(ra_st_writer *w, ra_status st, const char *name, const float *data,
              int ndim, const int64_t *shape) {
    return st ? st : ra_st_writer_add_ref(w, name, RA_DTYPE_F32, ndim, shape, data);
}

int job_save(ra_st_writer *w, ra_status st, const ra_model *m, const char *outp,
             const repeat *r) {
    if (!st) st = ra_st_writer_meta(w, "arch", ra_arch_name(ra_model_arch(m)));
    if (!st) st = ra_st_writer_save(w, outp);
    if (st) return lib_fail(st);
    repeat_report(r);
    return EX_OK;
}
