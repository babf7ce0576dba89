/* run.c - a model run over named tensors (ra_run_*): the one way from "this
 * model, these inputs" to the outputs named as the command line writes them
 * (y, attn, grad.x, grad.NAME). The command line (forward, backward) and the
 * Python package both go through it, so the checks of the inputs against a
 * model, their messages and the names of the outputs exist once.
 *
 * Three kinds of model meet here: an attention layer (x or q, kv, mask, dy
 * against ra_attn_layer_*), a network (x and dy against ra_model_forward /
 * ra_model_forward_train / ra_model_backward), and the clips of a
 * swin_block_3d ((B, D, H, W, C) with kv apart, ra_swin_block_3d_forward).
 * A features run of a network gives y and its feature maps (features.I,
 * ra_model_features), planned against the model when the run is made. */
#include "models/model.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RUN_LAYER, RUN_NET, RUN_CLIPS };
#define RUN_MAX_OUT 4   /* y, attn or the input gradients, before grad.NAME */

struct ra_run {
    ra_model *m;
    ra_run_mode mode;
    int kind;
    const ra_tensor *x, *kv, *mask, *dy;   /* borrowed from the caller */
    /* an attention layer */
    const ra_attn_layer *l;
    int b_, n1, n2, nw, c;
    int grid[2];                 /* decomposed_attention on an x (B, H, W, C) */
    const int *gridp;            /* grid, or NULL (the layer's own)           */
    ra_attn_grads g;
    /* what the run owns */
    float *y, *attn, *dx, *dkv, *grad;
    int y_ndim;
    int64_t y_shape[RA_ST_MAX_DIMS];
    int dy_checked;
    ra_features_options fo;   /* RA_RUN_FEATURES: the maps wanted */
    ra_tensor *maps;   /* and those of the last exec */
    int nmaps;
    ra_tensor *out;    /* the outputs, valid after ra_run_exec */
    char **names;      /* grad.NAME of every parameter */
    int nout, nparams, done;
    int nmaps_max;     /* RA_RUN_FEATURES: the maps an exec gives */
};

/* ---- the inputs ---------------------------------------------------------- */

/* The model's arch for messages: its enum's name, else its metadata's. */
static const char *arch_of(const ra_model *m) {
    const char *a = ra_arch_name(ra_model_arch(m));
    if (!a) a = ra_model_meta(m, "arch");
    return a ? a : "this model";
}

static const ra_tensor *find(const ra_tensor *in, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (in[i].name && strcmp(in[i].name, name) == 0) return &in[i];
    return NULL;
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *dims) {
    size_t len = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && len < cap; i++)
        len += dims[i] < 0 ? (size_t)snprintf(buf + len, cap - len, "%s*", i ? ", " : "")
                           : (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "",
                                              (long long)dims[i]);
    if (len < cap) snprintf(buf + len, cap - len, ")");
}

/* A float tensor of ndim dims, each in 1..INT_MAX and equal to dims[i]
 * where dims[i] >= 0 (NULL dims: any). */
static ra_status check_tensor(const ra_tensor *t, int ndim, const int64_t *dims) {
    if (!t->data) return rai_fail(RA_ERR_SHAPE, "input tensor '%.80s' is not a float tensor", t->name);
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] >= 1 && t->shape[i] <= INT_MAX && (!dims || dims[i] < 0 ||
                                                           t->shape[i] == dims[i]);
    if (ok) return RA_OK;
    char want[160], got[200];
    int64_t any[RA_ST_MAX_DIMS];
    for (int i = 0; i < ndim && i < RA_ST_MAX_DIMS; i++) any[i] = dims ? dims[i] : -1;
    shape_text(want, sizeof want, ndim, any);
    shape_text(got, sizeof got, t->ndim < 0 || t->ndim > RA_ST_MAX_DIMS ? 0 : t->ndim, t->shape);
    return rai_fail(RA_ERR_SHAPE, "input tensor '%.80s' has shape %s, expected %s", t->name, got,
                    want);
}

/* Every input must be one of the names allowed (a NULL-ended list). */
static ra_status only(const ra_tensor *in, int n, const char *const *allowed, const char *arch) {
    for (int i = 0; i < n; i++) {
        int ok = 0;
        for (int a = 0; allowed[a] && !ok; a++) ok = in[i].name && !strcmp(in[i].name, allowed[a]);
        if (!ok)
            return rai_fail(RA_ERR_SHAPE, "unexpected input tensor '%.80s' for %s",
                            in[i].name ? in[i].name : "(null)", arch);
    }
    return RA_OK;
}

/* ---- creating a run ------------------------------------------------------ */

static ra_status grad_names(ra_run *r, int file_names) {
    const int n = ra_model_param_count(r->m);
    if (!(r->names = calloc((size_t)n + 1, sizeof *r->names)))
        return rai_fail(RA_ERR_NOMEM, "out of memory");
    r->nparams = n;
    for (int i = 0; i < n; i++) {
        const ra_param_info *p = ra_model_param(r->m, i);
        const char *nm = file_names ? p->file_name : p->name;
        if (!(r->names[i] = malloc(strlen(nm) + 6)))
            return rai_fail(RA_ERR_NOMEM, "out of memory");
        sprintf(r->names[i], "grad.%s", nm);
    }
    return RA_OK;
}

static ra_status create_layer(ra_run *r, const ra_tensor *in, int n) {
    const ra_attn_config *c = ra_attn_layer_config(r->l);
    const char *arch = arch_of(r->m);
    const int is3d = c->arch == RA_ARCH_WINDOW_ATTENTION_3D;
    const char *xname = is3d && !find(in, n, "x") ? "q" : "x";
    ra_status st = only(in, n, (const char *const[]){xname, "mask", "dy", is3d ? "kv" : NULL,
                                                     NULL}, arch);
    if (st) return st;
    r->c = c->dim;
    if (!(r->x = find(in, n, xname))) return rai_fail(RA_ERR_SHAPE, "input has no tensor '%s'", xname);
    /* decomposed_attention takes x as (B, H, W, C), its grid, or (B, N, C) */
    const int xd = c->arch == RA_ARCH_DECOMPOSED_ATTENTION && r->x->ndim == 4 ? 4 : 3;
    if ((st = check_tensor(r->x, xd, xd == 4 ? (int64_t[]){-1, -1, -1, r->c}
                                            : (int64_t[]){-1, -1, r->c})))
        return st;
    r->b_ = (int)r->x->shape[0], r->n1 = (int)r->x->shape[1];
    if (xd == 4) {
        if (r->x->shape[1] * r->x->shape[2] > INT_MAX)
            return rai_fail(RA_ERR_SHAPE, "input tensor '%s' has too many tokens", xname);
        r->grid[0] = (int)r->x->shape[1], r->grid[1] = (int)r->x->shape[2];
        r->n1 = r->grid[0] * r->grid[1];
        r->gridp = r->grid;
    }
    if ((r->kv = find(in, n, "kv")) && (st = check_tensor(r->kv, 3, (int64_t[]){r->b_, -1, r->c})))
        return st;
    r->n2 = r->kv ? (int)r->kv->shape[1] : r->n1;
    if ((r->mask = find(in, n, "mask")) &&
        (st = check_tensor(r->mask, 3, (int64_t[]){-1, r->n1, r->n2})))
        return st;
    r->nw = r->mask ? (int)r->mask->shape[0] : 0;
    if (r->mask && r->b_ % r->nw)
        return rai_fail(RA_ERR_SHAPE, "mask has %d windows, which does not divide B_ = %d", r->nw,
                        r->b_);
    if (!r->gridp && (st = ra_attn_layer_check_tokens(r->l, r->n1, r->n2))) return st;
    const size_t rows1 = (size_t)r->b_ * r->n1, rows2 = (size_t)r->b_ * r->n2;
    if (r->mode == RA_RUN_BACKWARD) {
        if (!(r->dy = find(in, n, "dy")))
            return rai_fail(RA_ERR_SHAPE, "input has no tensor 'dy' (the gradient of y)");
        if ((st = check_tensor(r->dy, xd, xd == 4 ? r->x->shape
                                                  : (int64_t[]){r->b_, r->n1, r->c})))
            return st;
        r->dx = malloc(rows1 * r->c * sizeof(float) + 1);
        r->dkv = r->kv ? malloc(rows2 * r->c * sizeof(float) + 1) : NULL;
        r->grad = malloc(((size_t)ra_model_param_total(r->m) + 1) * sizeof(float));
        if (!r->dx || (r->kv && !r->dkv) || !r->grad) return rai_fail(RA_ERR_NOMEM, "out of memory");
        ra_model_attn_grads(r->m, r->grad, &r->g);
        if ((st = grad_names(r, 0))) return st;
    }
    if (r->mode == RA_RUN_FORWARD_ATTN) {
        int64_t a = r->b_;
        if (!rai_mul_i64(&a, a, c->num_heads) || !rai_mul_i64(&a, a, r->n1) ||
            !rai_mul_i64(&a, a, r->n2) || a > RA_MAX_ATTN_MAP)
            return rai_fail(RA_ERR_NOMEM, "attention map of %d x %d x %d x %d floats exceeds the "
                            "limit of %lld", r->b_, c->num_heads, r->n1, r->n2,
                            (long long)RA_MAX_ATTN_MAP);
        if (!(r->attn = malloc((size_t)a * sizeof(float))))
            return rai_fail(RA_ERR_NOMEM, "out of memory");
    }
    if (!(r->y = malloc(rows1 * r->c * sizeof(float) + 1)))
        return rai_fail(RA_ERR_NOMEM, "out of memory");
    r->y_ndim = xd;   /* y, like x: (B_, N1, C) or (B, H, W, C) */
    memcpy(r->y_shape, r->x->shape, (size_t)xd * sizeof *r->y_shape);
    return RA_OK;
}

static ra_status no_maps(const char *arch) {
    return rai_fail(RA_ERR_ARG, "%s has no feature maps (swin, swinv2, swin3d and vit have)", arch);
}

static ra_status create_network(ra_run *r, const ra_tensor *in, int n) {
    const char *arch = arch_of(r->m);
    const int is3d = ra_model_arch(r->m) == RA_ARCH_SWIN_BLOCK_3D;
    const int bwd = r->mode == RA_RUN_BACKWARD;
    ra_status st = only(in, n, (const char *const[]){"x", "dy", is3d && !bwd ? "kv" : NULL, NULL},
                        arch);
    if (st) return st;
    if (r->mode == RA_RUN_FORWARD_ATTN)
        return rai_fail(RA_ERR_ARG, "the attention map is for a single attention layer, not %s",
                        arch);
    if (r->mode == RA_RUN_FEATURES && is3d)
        return no_maps(arch);
    r->x = find(in, n, "x");
    r->kv = find(in, n, "kv");
    r->dy = find(in, n, "dy");
    if (bwd && (!r->x || !r->dy)) return rai_fail(RA_ERR_SHAPE, "input needs tensors 'x' and 'dy'");
    if (!r->x) return rai_fail(RA_ERR_SHAPE, "input has no tensor 'x'");
    const int video = ra_model_arch(r->m) == RA_ARCH_SWIN3D;   /* clips (B, C, T, H, W) */
    const int maxd = (is3d && !bwd) || video ? 5 : 4;
    if (r->x->ndim < 2 || r->x->ndim > maxd)
        return rai_fail(RA_ERR_SHAPE, bwd ? "input tensor 'x' has %d dims (2 to %d)"
                                         : "input tensor 'x' has %d dims", r->x->ndim, maxd);
    if (is3d && !bwd && (r->x->ndim == 5 || r->kv)) {   /* clips, kv frames apart */
        r->kind = RUN_CLIPS;
        if ((st = ra_swin_block_3d_check(r->m, r->x->ndim, r->x->shape, r->kv ? r->kv->ndim : 0,
                                         r->kv ? r->kv->shape : NULL)))
            return st;
        if ((st = check_tensor(r->x, 5, NULL)) || (r->kv && (st = check_tensor(r->kv, 5, NULL))))
            return st;
        int64_t numel = 1;
        for (int d = 0; d < 5; d++) numel *= r->x->shape[d];
        if (!(r->y = malloc((size_t)numel * sizeof(float))))
            return rai_fail(RA_ERR_NOMEM, "out of memory");
        r->y_ndim = 5;
        memcpy(r->y_shape, r->x->shape, 5 * sizeof *r->y_shape);
        return RA_OK;
    }
    for (int d = 0; d < r->x->ndim; d++)
        if (r->x->shape[d] < 1 || r->x->shape[d] > INT_MAX)
            return rai_fail(RA_ERR_SHAPE, "input tensor 'x' has an empty or huge dimension");
    if ((st = check_tensor(r->x, r->x->ndim, NULL))) return st;
    if (r->mode == RA_RUN_FEATURES) {   /* the indices and x against the model, now */
        rai_feat *f = calloc(1, sizeof *f);
        if (!f) return rai_fail(RA_ERR_NOMEM, "out of memory");
        const rai_arch_ops *ops = r->m->ops;
        st = ops->features_plan
                 ? ops->features_plan(r->m, f, &r->fo, r->x->ndim, r->x->shape)
                 : no_maps(arch);
        r->nmaps_max = f->n * (f->per_prefix ? 2 : 1);
        free(f);
        if (st) return st;
    }
    if (bwd) {
        if (!r->dy->data) return check_tensor(r->dy, r->dy->ndim, NULL);
        int64_t numel = 1;
        for (int d = 0; d < r->x->ndim; d++) numel *= r->x->shape[d];
        r->dx = malloc((size_t)numel * sizeof(float));
        r->grad = malloc(((size_t)ra_model_param_total(r->m) + 1) * sizeof(float));
        if (!r->dx || !r->grad) return rai_fail(RA_ERR_NOMEM, "out of memory");
        if ((st = grad_names(r, 1))) return st;
    }
    return RA_OK;
}

static ra_status run_create(ra_run **out, ra_model *m, ra_run_mode mode,
                            const ra_features_options *fo, const ra_tensor *inputs, int ninputs) {
    if (!out) return rai_fail(RA_ERR_ARG, "run: NULL argument");
    *out = NULL;
    if (!m || ninputs < 0 || (ninputs > 0 && !inputs))
        return rai_fail(RA_ERR_ARG, "run: NULL argument");
    if (mode != RA_RUN_FORWARD && mode != RA_RUN_FORWARD_ATTN && mode != RA_RUN_BACKWARD &&
        mode != RA_RUN_FEATURES)
        return rai_fail(RA_ERR_ARG, "run: unknown mode %d", (int)mode);
    if (mode == RA_RUN_BACKWARD && !ra_model_attn(m) && !ra_model_trainable(m))
        return rai_fail(RA_ERR_ARG, "%s has no backward", arch_of(m));
    if (mode == RA_RUN_FEATURES && ra_model_attn(m))
        return no_maps(arch_of(m));
    ra_run *r = calloc(1, sizeof *r);
    if (!r) return rai_fail(RA_ERR_NOMEM, "out of memory");
    r->m = m, r->mode = mode;
    if (fo) r->fo = *fo;
    r->l = ra_model_attn(m);
    r->kind = r->l ? RUN_LAYER : RUN_NET;
    ra_status st = r->l ? create_layer(r, inputs, ninputs) : create_network(r, inputs, ninputs);
    if (!st && !(r->out = calloc((size_t)RUN_MAX_OUT + r->nparams + r->nmaps_max,
                                 sizeof *r->out)))
        st = rai_fail(RA_ERR_NOMEM, "out of memory");
    if (st) {
        ra_run_free(r);
        return st;
    }
    *out = r;
    return RA_OK;
}

ra_status ra_run_create(ra_run **out, ra_model *m, ra_run_mode mode, const ra_tensor *inputs,
                        int ninputs) {
    return run_create(out, m, mode, NULL, inputs, ninputs);
}

ra_status ra_run_create_features(ra_run **out, ra_model *m, const ra_features_options *o,
                                 const ra_tensor *inputs, int ninputs) {
    return run_create(out, m, RA_RUN_FEATURES, o, inputs, ninputs);
}

void ra_run_free(ra_run *r) {
    if (!r) return;
    ra_features_free(r->maps, r->nmaps);
    free(r->y), free(r->attn), free(r->dx), free(r->dkv), free(r->grad);
    for (int i = 0; r->names && i < r->nparams; i++) free(r->names[i]);
    free(r->names);
    free(r->out);
    free(r);
}

/* ---- running it ---------------------------------------------------------- */

static void add_out(ra_run *r, const char *name, float *data, int ndim, const int64_t *shape) {
    ra_tensor *t = &r->out[r->nout++];
    t->name = name, t->data = data, t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
}

static ra_status exec_layer(ra_run *r) {
    const float *kv = r->kv ? r->kv->data : NULL, *mask = r->mask ? r->mask->data : NULL;
    if (r->mode != RA_RUN_BACKWARD)
        return ra_attn_layer_forward_grid(r->l, r->y, r->attn, r->x->data, kv, r->b_, r->n1,
                                        r->n2, mask, r->nw, r->gridp);
    memset(r->grad, 0, (size_t)ra_model_param_total(r->m) * sizeof *r->grad);
    memset(r->dx, 0, (size_t)r->b_ * r->n1 * r->c * sizeof *r->dx);
    if (r->dkv) memset(r->dkv, 0, (size_t)r->b_ * r->n2 * r->c * sizeof *r->dkv);
    return ra_attn_layer_backward_grid(r->l, r->dx, r->dkv, &r->g, r->y, r->dy->data, r->x->data,
                                     kv, r->b_, r->n1, r->n2, mask, r->nw, r->gridp);
}

static ra_status exec_network(ra_run *r) {
    if (r->kind == RUN_CLIPS)
        return ra_swin_block_3d_forward(r->m, r->y, r->x->data, r->kv ? r->kv->data : NULL,
                                        (int)r->x->shape[0], (int)r->x->shape[1],
                                        (int)r->x->shape[2], (int)r->x->shape[3]);
    free(r->y);
    r->y = NULL;
    int64_t ys[4];
    ra_status st;
    if (r->mode == RA_RUN_FEATURES) {
        ra_features_free(r->maps, r->nmaps);
        r->maps = NULL, r->nmaps = 0;
        st = ra_model_features(r->m, &r->maps, &r->nmaps, &r->y, &r->y_ndim, ys, r->x->data,
                               r->x->ndim, r->x->shape, &r->fo);
        memcpy(r->y_shape, ys, sizeof ys);
        return st;
    }
    if (r->mode != RA_RUN_BACKWARD) {
        st = ra_model_forward(r->m, &r->y, &r->y_ndim, ys, r->x->data, r->x->ndim, r->x->shape);
        memcpy(r->y_shape, ys, sizeof ys);
        return st;
    }
    int64_t numel = 1;
    for (int d = 0; d < r->x->ndim; d++) numel *= r->x->shape[d];
    memset(r->grad, 0, (size_t)ra_model_param_total(r->m) * sizeof *r->grad);
    memset(r->dx, 0, (size_t)numel * sizeof *r->dx);
    if ((st = ra_model_forward_train(r->m, &r->y, &r->y_ndim, ys, r->x->data, r->x->ndim,
                                     r->x->shape, NULL)))
        return st;
    memcpy(r->y_shape, ys, sizeof ys);
    if (!r->dy_checked) {
        int same = r->dy->ndim == r->y_ndim;
        for (int d = 0; same && d < r->y_ndim; d++) same = r->dy->shape[d] == ys[d];
        if (!same)
            return rai_fail(RA_ERR_SHAPE, "dy must have the shape of y (%d dims, (%lld, %lld, ...))",
                            r->y_ndim, (long long)ys[0], (long long)ys[1]);
        r->dy_checked = 1;
    }
    return ra_model_backward(r->m, r->grad, r->dx, r->dy->data);
}

ra_status ra_run_exec(ra_run *r) {
    if (!r) return rai_fail(RA_ERR_ARG, "run: NULL argument");
    r->nout = 0;
    r->done = 0;
    ra_status st = r->kind == RUN_LAYER ? exec_layer(r) : exec_network(r);
    if (st) return st;
    add_out(r, "y", r->y, r->y_ndim, r->y_shape);
    if (r->attn) {
        const int nh = ra_attn_layer_config(r->l)->num_heads;
        add_out(r, "attn", r->attn, 4, (int64_t[]){r->b_, nh, r->n1, r->n2});
    }
    for (int i = 0; i < r->nmaps && r->nout < RUN_MAX_OUT + r->nmaps_max; i++)
        add_out(r, r->maps[i].name, r->maps[i].data, r->maps[i].ndim, r->maps[i].shape);
    if (r->mode == RA_RUN_BACKWARD) {
        add_out(r, r->kind == RUN_LAYER && !strcmp(r->x->name, "q") ? "grad.q" : "grad.x", r->dx,
                r->x->ndim, r->x->shape);
        if (r->dkv) add_out(r, "grad.kv", r->dkv, 3, r->kv->shape);
        for (int i = 0; i < r->nparams; i++) {
            const ra_param_info *p = ra_model_param(r->m, i);
            if (p->offset >= 0) add_out(r, r->names[i], r->grad + p->offset, p->ndim, p->shape);
        }
    }
    r->done = 1;
    return RA_OK;
}

int ra_run_output_count(const ra_run *r) { return r && r->done ? r->nout : 0; }

const ra_tensor *ra_run_output(const ra_run *r, int i) {
    return r && r->done && i >= 0 && i < r->nout ? &r->out[i] : NULL;
}

const ra_tensor *ra_run_find(const ra_run *r, const char *name) {
    return r && r->done && name ? find(r->out, r->nout, name) : NULL;
}
