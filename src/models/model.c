/* model.c - the model object: models from safetensors model files
 * (docs/reference.md, "Model files"), given their arch.
 *
 * The file's __metadata__ names the arch and its hyperparameters exactly as
 * the PyTorch constructor does; its tensors carry the state_dict() names.
 * Nothing in the file is trusted: each hyperparameter is parsed strictly,
 * each declared tensor must be there with the shape the configuration
 * implies, nothing unexpected may be there, and the buffers PyTorch saves
 * (relative_position_index) must equal what is computed here. Weights are
 * read (pread, never through a mapping) and converted to F32 into one flat
 * buffer with named pointers into it.
 * How an arch plugs in: models/model.h; which archs there are: registry.c. */
#include "models/model.h"
#include "base/arena.h"
#include "nn/precision.h"


#include <jansson.h>

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- declared parameters ------------------------------------------------ */

ra_status rai_model_declare(ra_model *m, const char *name, int ndim, const int64_t *shape,
                            int optional) {
    if (m->nparams == m->cap) {
        int cap = m->cap ? 2 * m->cap : 32;
        ra_param_info *p = realloc(m->params, (size_t)cap * sizeof *p);
        if (!p) return rai_fail(RA_ERR_NOMEM, "model: out of memory");
        m->params = p, m->cap = cap;
    }
    ra_param_info *pi = &m->params[m->nparams];
    *pi = (ra_param_info){.ndim = ndim, .offset = -1, .numel = 1, .optional = optional};
    for (int i = 0; i < ndim; i++) {
        pi->shape[i] = shape[i];
        if (shape[i] < 0 || !rai_mul_i64(&pi->numel, pi->numel, shape[i]))
            return rai_fail(RA_ERR_FORMAT, "parameter %s: shape overflows", name);
    }
    if (!(pi->name = rai_strdup(name))) return rai_fail(RA_ERR_NOMEM, "model: out of memory");
    m->nparams++;
    return RA_OK;
}

static int find_param(const ra_model *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].name, name) == 0) return i;
    return -1;
}

float *rai_model_grad(const ra_model *m, float *flat, const char *name) {
    int i = m && flat ? find_param(m, name) : -1;
    return i >= 0 && m->params[i].offset >= 0 ? flat + m->params[i].offset : NULL;
}

const float *rai_model_get(const ra_model *m, const char *name) {
    int i = m ? find_param(m, name) : -1;
    return i >= 0 && m->params[i].offset >= 0 ? m->weights + m->params[i].offset : NULL;
}

/* ---- the loader --------------------------------------------------------- */

int rai_dtype_is_float(ra_dtype d) {
    return d == RA_DTYPE_F32 || d == RA_DTYPE_F16 || d == RA_DTYPE_BF16 || d == RA_DTYPE_F64;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, ")");
}

ra_status rai_check_saved_index(const ra_st_file *f, const ra_st_tensor *t, const int32_t *idx,
                                int64_t n2) {
    if (rai_dtype_is_float(t->dtype) || t->dtype == RA_DTYPE_BOOL)
        return rai_fail(RA_ERR_SHAPE, "tensor '%.80s' must hold integers", t->name);
    int64_t *v = rai_alloc((size_t)t->numel, sizeof *v);
    if (!v) return rai_fail(RA_ERR_NOMEM, "relative_position_index: out of memory");
    ra_status st = ra_st_read_i64(v, f, t);
    for (int64_t e = 0; !st && e < t->numel; e++)
        if (v[e] != idx[e])
            st = rai_fail(RA_ERR_FORMAT, "tensor '%.80s' differs from the computed index at "
                          "(%lld, %lld): %lld, expected %d", t->name, (long long)(e / n2),
                          (long long)(e % n2), (long long)v[e], idx[e]);
    rai_free(v);
    return st;
}

ra_status rai_check_shape(const ra_st_tensor *t, int ndim, const int64_t *shape) {
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (ok) return RA_OK;
    char got[128], want[128];
    shape_str(got, sizeof got, t->ndim, t->shape);
    shape_str(want, sizeof want, ndim, shape);
    return rai_fail(RA_ERR_SHAPE, "tensor '%.80s' has shape %s, the configuration needs %s",
                    t->name, got, want);
}

/* Map every file tensor to a declared parameter (or a buffer); then, in
 * declaration order (so that a wrong configuration is reported at its first
 * parameter), check each and convert the weights. Optional parameters the
 * file lacks are dropped from the list. */
/* The scales (RA_SCALE_PREFIX NAME: F32 or another float type, one per
 * row) of int8 weight t of f, into scale (rows) unless NULL: RA_ERR_FORMAT
 * naming what is missing or wrong. */
static ra_status int8_scales(const ra_st_file *f, const ra_st_tensor *t, float *scale) {
    char name[320];
    snprintf(name, sizeof name, "%s%s", RA_SCALE_PREFIX, t->name);
    const ra_st_tensor *s = ra_st_find(f, name);
    if (!s)
        return rai_fail(RA_ERR_FORMAT, "int8 tensor '%.80s' has no scales ('%.100s')", t->name, name);
    if (!rai_dtype_is_float(s->dtype) || s->ndim != 1 || s->shape[0] != t->shape[0])
        return rai_fail(RA_ERR_FORMAT, "'%.100s' must be %lld float scales", name,
                        (long long)t->shape[0]);
    ra_status st = scale ? ra_st_read_f32(scale, f, s) : RA_OK;
    for (int64_t i = 0; !st && scale && i < s->numel; i++)
        if (!(scale[i] >= 0.0f) || !isfinite(scale[i]))
            st = rai_fail(RA_ERR_FORMAT, "'%.100s': scale %lld is %g", name, (long long)i, scale[i]);
    return st;
}

static int has_scales(const ra_st_file *f, const ra_st_tensor *t) {
    char name[320];
    snprintf(name, sizeof name, "%s%s", RA_SCALE_PREFIX, t->name);
    return ra_st_find(f, name) != NULL;
}

static int linear_name(const char *name, int ndim);   /* below: precisions */

/* Every RA_SCALE_PREFIX NAME of f must scale an int8 tensor NAME of f:
 * scales beside a float weight, or beside nothing, are refused rather
 * than ignored (the file is not what its writer meant). */
static ra_status orphan_scales(const ra_st_file *f) {
    const size_t k = strlen(RA_SCALE_PREFIX);
    for (int i = 0; i < ra_st_count(f); i++) {
        const char *name = ra_st_at(f, i)->name;
        if (strncmp(name, RA_SCALE_PREFIX, k)) continue;
        const ra_st_tensor *w = ra_st_find(f, name + k);
        if (!w)
            return rai_fail(RA_ERR_FORMAT, "'%.100s' scales no tensor (no '%.100s' in the file)",
                            name, name + k);
        if (w->dtype != RA_DTYPE_I8)
            return rai_fail(RA_ERR_FORMAT, "'%.100s' scales '%.100s', which is not int8 (I8): "
                            "scales belong to int8 weights only", name, name + k);
    }
    return RA_OK;
}

/* An int8 weight (rows, k) with its scales: w = q x scale, row by row. */
static ra_status int8_weight(float *w, const ra_st_file *f, const ra_st_tensor *t) {
    const int64_t rows = t->shape[0], k = t->shape[1];
    float *scale = malloc((size_t)rows * sizeof *scale + 1);
    int64_t *q = malloc((size_t)t->numel * sizeof *q + 1);
    ra_status st = scale && q ? int8_scales(f, t, scale)
                              : rai_fail(RA_ERR_NOMEM, "model: out of memory");
    if (!st) st = ra_st_read_i64(q, f, t);
    for (int64_t r = 0; !st && r < rows; r++)
        for (int64_t j = 0; j < k; j++) w[r * k + j] = (float)q[r * k + j] * scale[r];
    free(scale), free(q);
    return st;
}

static ra_status load_weights(ra_model *m, const ra_st_file *f) {
    const int nt = ra_st_count(f);
    const ra_st_tensor **found = calloc((size_t)m->nparams + 1, sizeof *found);
    if (!found) return rai_fail(RA_ERR_NOMEM, "model: out of memory");
    ra_status st = orphan_scales(f);
    for (int i = 0; i < nt && !st; i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        char buf[256];
        const char *canon = t->name;
        /* a checkpoint's optimiser state is not the model's (src/train/train.c) */
        if (strncmp(t->name, RA_TRAIN_STATE_PREFIX, strlen(RA_TRAIN_STATE_PREFIX)) == 0) continue;
        /* an int8 weight's scales are read with it (int8_weight) */
        if (strncmp(t->name, RA_SCALE_PREFIX, strlen(RA_SCALE_PREFIX)) == 0) continue;
        rai_tensor_kind kind = RA_TENSOR_PARAM;
        if (m->ops->canonical) {
            kind = m->ops->canonical(m, t->name, buf, sizeof buf);
            canon = buf;
        }
        if (kind == RA_TENSOR_BUFFER) continue;
        int p = kind == RA_TENSOR_PARAM ? find_param(m, canon) : -1;
        if (p < 0)
            st = rai_fail(RA_ERR_FORMAT, "unexpected tensor '%.80s' for arch %s%s%s%s", t->name,
                          m->ops->name, m->scheme[0] ? " (naming scheme " : "", m->scheme,
                          m->scheme[0] ? ")" : "");
        else if (found[p])
            st = rai_fail(RA_ERR_FORMAT, "tensors '%.80s' and '%.80s' are both parameter %s",
                          found[p]->name, t->name, canon);
        else
            found[p] = t;
    }
    for (int p = 0; p < m->nparams && !st; p++) {
        const ra_st_tensor *t = found[p];
        if (!t) {
            if (!m->params[p].optional)
                st = rai_fail(RA_ERR_FORMAT, "tensor '%s' is missing (arch %s%s%s)",
                              m->params[p].name, m->ops->name,
                              m->scheme[0] ? ", naming scheme " : "", m->scheme);
        } else if (t->dtype == RA_DTYPE_I8 && has_scales(f, t) &&
                   !linear_name(m->params[p].name, m->params[p].ndim)) {
            st = rai_fail(RA_ERR_FORMAT, "int8 tensor '%.80s' is not a Linear weight: only those "
                          "are read as int8 with scales (the others are float)", t->name);
        } else if (t->dtype == RA_DTYPE_I8 && has_scales(f, t)) {
            st = rai_check_shape(t, m->params[p].ndim, m->params[p].shape);
            if (!st) st = int8_scales(f, t, NULL);
        } else if (!rai_dtype_is_float(t->dtype)) {
            st = rai_fail(RA_ERR_SHAPE, "tensor '%.80s' must be a float tensor%s", t->name,
                          t->dtype == RA_DTYPE_I8 ? " (or int8 with " RA_SCALE_PREFIX "NAME scales)"
                                                  : "");
        } else {
            st = rai_check_shape(t, m->params[p].ndim, m->params[p].shape);
        }
    }
    if (st) {
        free(found);
        return st;
    }
    int64_t total = 0;
    int kept = 0;
    for (int p = 0; p < m->nparams; p++) {
        if (!found[p]) {   /* an optional parameter the file does not have */
            free((char *)m->params[p].name);
            continue;
        }
        m->params[p].offset = total;
        total += m->params[p].numel;
        if (!(m->params[p].file_name = rai_strdup(found[p]->name)))
            st = rai_fail(RA_ERR_NOMEM, "model: out of memory");
        found[kept] = found[p];
        m->params[kept++] = m->params[p];
    }
    m->nparams = kept;
    if (st) {
        free(found);
        return st;
    }
    if (!(m->weights = rai_alloc((size_t)total, sizeof(float)))) {
        free(found);
        return rai_fail(RA_ERR_NOMEM, "model: out of memory for %lld weights", (long long)total);
    }
    m->total = total;
    /* Read (pread) in parallel: most of the cost is the first touch of the
     * fresh buffer, a page fault per 4 KB, and it scales with threads. A
     * failure reports the first tensor that failed. */
    int bad = m->nparams;
    ra_status bad_st = RA_OK;
    char why[512] = "";
    #pragma omp parallel for schedule(dynamic, 1) num_threads(ra_threads_get()) \
        if (total >= (1 << 20))
    for (int p = 0; p < m->nparams; p++) {
        float *w = m->weights + m->params[p].offset;
        const ra_status s = found[p]->dtype == RA_DTYPE_I8 ? int8_weight(w, f, found[p])
                                                           : ra_st_read_f32(w, f, found[p]);
        if (s) {
            #pragma omp critical(ra_load_weights)
            if (p < bad) {
                bad = p, bad_st = s;
                snprintf(why, sizeof why, "%s", ra_last_error());
            }
        }
    }
    free(found);
    return bad < m->nparams ? rai_fail(bad_st, "%s", why) : RA_OK;
}


/* A classifier's labels (metadata "labels", from the file, --set or a
 * folder's id2label / label_names): a JSON array of names (strings, or
 * null for a class without one), one per class of the head. A list of
 * another length would name the wrong classes: refused, not guessed. */
static ra_status check_labels(const ra_model *m) {
    const char *text = ra_model_meta(m, "labels");
    const ra_arch a = m->ops->arch;
    if (!text || (a != RA_ARCH_SWIN && a != RA_ARCH_SWINV2 && a != RA_ARCH_VIT)) return RA_OK;
    json_error_t e;
    json_t *v = json_loads(text, JSON_REJECT_DUPLICATES, &e);
    ra_status st = RA_OK;
    if (!json_is_array(v)) {
        st = rai_fail(RA_ERR_FORMAT, "metadata labels is not a JSON array of class names%s%.80s",
                      v ? "" : ": ", v ? "" : e.text);
    } else {
        const char *nc = ra_model_meta(m, "num_classes");
        const long long classes = nc ? strtoll(nc, NULL, 10) : 0;
        for (size_t i = 0; !st && i < json_array_size(v); i++)
            if (!json_is_string(json_array_get(v, i)) && !json_is_null(json_array_get(v, i)))
                st = rai_fail(RA_ERR_FORMAT, "metadata labels: entry %zu is not a string (nor "
                              "null)", i);
        const char *from = ra_model_meta(m, RA_META_SOURCE "labels");
        if (!st && (long long)json_array_size(v) != classes)
            st = rai_fail(RA_ERR_FORMAT, "metadata labels%s%s%s names %zu classes, the head has "
                          "%lld%s", from ? " (from " : "", from ? from : "", from ? ")" : "",
                          json_array_size(v), classes,
                          classes ? "" : " (no head: its outputs are features, not classes)");
    }
    json_decref(v);
    return st;
}

ra_status rai_model_open_arch(ra_model **out, const rai_arch_ops *ops, const ra_st_file *f) {
    *out = NULL;
    ra_model *m = calloc(1, sizeof *m);
    if (!m) return rai_fail(RA_ERR_NOMEM, "model: out of memory");
    m->ops = ops;
    ra_status st = RA_OK;
    const int nmeta = ra_st_meta_count(f);
    if (!(m->meta = calloc((size_t)nmeta * 2 + 1, sizeof *m->meta)))
        st = rai_fail(RA_ERR_NOMEM, "model: out of memory");
    for (int i = 0; i < nmeta && !st; i++, m->nmeta++) {
        const char *key = ra_st_meta_key(f, i);
        m->meta[2 * i] = rai_strdup(key);
        m->meta[2 * i + 1] = rai_strdup(ra_st_meta(f, key));
        if (!m->meta[2 * i] || !m->meta[2 * i + 1]) st = rai_fail(RA_ERR_NOMEM, "model: out of memory");
    }
    if (!st) st = ops->declare(m, f);
    if (!st && ops->detect) st = ops->detect(m, f);
    if (!st) st = load_weights(m, f);
    if (!st) st = ops->build(m, f);
    if (!st) st = check_labels(m);
    if (st) {
        ra_model_free(m);
        /* a configuration the library refuses is bad data in a file */
        return st == RA_ERR_ARG ? RA_ERR_FORMAT : st;
    }
    *out = m;
    return RA_OK;
}

static void drop_replicas(ra_model *m) {
    for (int s = 0; s < m->nrep; s++) {
        ra_model_free(m->rep[s]);
        rai_free(m->rgrad[s]);
    }
    free(m->rep), free(m->rgrad);
    m->rep = NULL, m->rgrad = NULL, m->nrep = 0, m->shards = 1;
}

void ra_model_free(ra_model *m) {
    if (!m) return;
    drop_replicas(m);
    if (m->impl && m->ops->destroy) m->ops->destroy(m->impl);
    for (int i = 0; i < m->nparams; i++) {
        if (m->params[i].file_name != m->params[i].name) free((char *)m->params[i].file_name);
        free((char *)m->params[i].name);
    }
    free(m->params);
    for (int i = 0; i < 2 * m->nmeta; i++) free(m->meta[i]);
    free(m->meta);
    if (!m->borrowed) rai_free(m->weights);
    rai_packed_free(m->packed);
    free(m);
}

ra_arch ra_model_arch(const ra_model *m) { return m ? m->ops->arch : RA_ARCH_NONE; }

const char *ra_model_scheme(const ra_model *m) {
    return m && m->scheme[0] ? m->scheme : "official";
}

const char *ra_model_meta(const ra_model *m, const char *key) {
    for (int i = 0; m && key && i < m->nmeta; i++)
        if (strcmp(m->meta[2 * i], key) == 0) return m->meta[2 * i + 1];
    return NULL;
}

int ra_model_meta_count(const ra_model *m) { return m ? m->nmeta : 0; }

int64_t ra_model_flops(const ra_model *m, int h, int w) {
    return m && m->ops->flops && h > 0 && w > 0 ? m->ops->flops(m, h, w) : -1;
}

const char *ra_model_meta_key(const ra_model *m, int i) {
    return m && i >= 0 && i < m->nmeta ? m->meta[2 * i] : NULL;
}

int ra_model_param_count(const ra_model *m) { return m ? m->nparams : 0; }

const ra_param_info *ra_model_param(const ra_model *m, int i) {
    return m && i >= 0 && i < m->nparams ? &m->params[i] : NULL;
}

int64_t ra_model_param_total(const ra_model *m) { return m ? m->total : 0; }

float *ra_model_weights(ra_model *m) { return m ? m->weights : NULL; }

/* A batch of several images (or token maps) on several threads is cut into
 * one shard of consecutive samples per thread, each run through the whole
 * network with single-threaded kernels: the networks treat every sample on
 * its own (LayerNorm, no batch statistics) and relattn's kernels compute a
 * row the same way wherever it sits in the batch, so y has the very bits of
 * one pass over the batch (within rounding where OpenBLAS, which blocks and
 * threads by the batch, does the products), without a barrier in every
 * layer. One sample, or one thread, runs on the layers' own threads. */
typedef struct {
    const ra_model *m;
    ra_model *train[RA_MAX_PARTS];   /* training: the model of each shard */
    const float *x;
    int x_ndim, parts;
    const int64_t *x_shape;
    int64_t per_x;
    const uint64_t *draw;            /* training: the seed of the shards' generators, or NULL */
    const rai_feat *feat;            /* feature maps of the whole batch, or NULL */
    float *y[RA_MAX_PARTS];
    int nd[RA_MAX_PARTS];
    int64_t ys[RA_MAX_PARTS][4];
} forward_parts;

/* m's forward on this thread in m's precision. */
static ra_status forward_in_precision(const ra_model *m, const rai_feat *feat, float **y,
                                      int *y_ndim, int64_t y_shape[4], const float *x,
                                      int x_ndim, const int64_t *x_shape) {
    const ra_precision was = rai_precision_set(m->precision);
    const ra_precision core_was = rai_core_precision_set(
        m->precision == RA_PRECISION_BF16 ? RA_PRECISION_BF16 : RA_PRECISION_FP32);
    const rai_packed *packed_was = rai_packed_set(m->packed);
    rai_precision_failed();
    ra_status st = feat ? m->ops->forward_features(m, feat, y, y_ndim, y_shape, x, x_ndim, x_shape)
                        : m->ops->forward(m, y, y_ndim, y_shape, x, x_ndim, x_shape);
    if (rai_precision_failed() && !st) {
        rai_free(*y), *y = NULL;
        st = rai_fail(RA_ERR_NOMEM, "model forward: out of memory for a product in precision %s",
                     ra_precision_name(m->precision));
    }
    rai_precision_set(was);
    rai_core_precision_set(core_was);
    rai_packed_set(packed_was);
    return st;
}

static ra_status forward_part(void *ctx, int s) {
    forward_parts *c = ctx;
    const int64_t B = c->x_shape[0], b0 = B * s / c->parts, b1 = B * (s + 1) / c->parts;
    int64_t xs[8];
    memcpy(xs, c->x_shape, (size_t)c->x_ndim * sizeof *xs);
    xs[0] = b1 - b0;
    ra_model *r = c->train[s];   /* a replica reads m's weights (create_arch) */
    if (!r && c->feat) {   /* the shard's maps: its samples' slices of the batch's */
        rai_feat *f = malloc(sizeof *f);
        if (!f) return rai_fail(RA_ERR_NOMEM, "model forward: out of memory");
        *f = *c->feat;
        for (int i = 0; i < f->n; i++) {
            f->out[i] += b0 * f->per[i];
            if (f->pre[i]) f->pre[i] += b0 * f->per_prefix;
        }
        ra_status st = forward_in_precision(c->m, f, &c->y[s], &c->nd[s], c->ys[s],
                                            c->x + b0 * c->per_x, c->x_ndim, xs);
        free(f);
        return st;
    }
    if (!r)
        return forward_in_precision(c->m, NULL, &c->y[s], &c->nd[s], c->ys[s],
                                    c->x + b0 * c->per_x, c->x_ndim, xs);
    ra_rng rng;
    if (c->draw) ra_rng_seed(&rng, rai_mix64(*c->draw, (uint64_t)s));
    return r->ops->forward_train(r, &c->y[s], &c->nd[s], c->ys[s], c->x + b0 * c->per_x,
                                 c->x_ndim, xs, c->draw ? &rng : NULL);
}

/* Runs the parts of c (c->parts shards of x) and joins their outputs into
 * y; *per_y gets the floats of one sample of y. */
static ra_status forward_shards(forward_parts *c, float **y, int *y_ndim, int64_t y_shape[4],
                                int64_t *per_y_out) {
    const int64_t B = c->x_shape[0];
    const int S = c->parts;
    c->per_x = 1;
    for (int d = 1; d < c->x_ndim; d++) c->per_x *= c->x_shape[d];   /* bounded: x exists */
    ra_status st = rai_run_parts(S, forward_part, c);
    float *const *part = c->y;
    const int *nd = c->nd;
    int64_t(*ys)[4] = c->ys;
    int64_t per_y = 1;
    for (int d = 1; !st && d < nd[0]; d++) per_y *= ys[0][d];
    for (int s = 1; s < S && !st; s++)   /* the shards agree on a sample's shape */
        if (nd[s] != nd[0] || ys[s][0] != (B * (s + 1) / S - B * s / S) ||
            memcmp(ys[s] + 1, ys[0] + 1, (size_t)(nd[0] - 1) * sizeof(int64_t)))
            st = rai_fail(RA_ERR_INTERNAL, "model forward: shards of different shapes");
    if (!st && !(*y = rai_alloc((size_t)(B * per_y), sizeof **y)))
        st = rai_fail(RA_ERR_NOMEM, "model forward: out of memory for y");
    for (int s = 0; s < S && !st; s++)
        memcpy(*y + (B * s / S) * per_y, part[s], (size_t)(ys[s][0] * per_y) * sizeof **y);
    for (int s = 0; s < S; s++) rai_free(part[s]);
    if (st) return st;
    *y_ndim = nd[0];
    memcpy(y_shape, ys[0], sizeof ys[0]);
    y_shape[0] = B;
    *per_y_out = per_y;
    return RA_OK;
}

/* How many shards a batch of x takes: one per thread, at most one sample
 * each; 1 for archs that are not batched (swin_block_3d takes one clip,
 * frames first) or inside a parallel region. */
static int batch_shards(const ra_model *m, int x_ndim, const int64_t *x_shape) {
    int S = ra_threads_get();
    if (!m->ops->batched || x_ndim < 2 || x_ndim > 8 || x_shape[0] < 2 || S < 2) return 1;
    if (S > x_shape[0]) S = (int)x_shape[0];
    return S > RA_MAX_PARTS ? RA_MAX_PARTS : S;
}

ra_status ra_model_forward(const ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                           const float *x, int x_ndim, const int64_t *x_shape) {
    if (!m || !y || !y_ndim || !y_shape || !x || !x_shape)
        return rai_fail(RA_ERR_ARG, "model forward: NULL argument");
    *y = NULL;
    if (!m->ops->forward)
        return rai_fail(RA_ERR_ARG, "%s is an attention layer: use ra_attn_layer_forward",
                        m->ops->name);
    const int S = batch_shards(m, x_ndim, x_shape);
    if (S < 2) return forward_in_precision(m, NULL, y, y_ndim, y_shape, x, x_ndim, x_shape);
    forward_parts c = {.m = m, .x = x, .x_ndim = x_ndim, .parts = S, .x_shape = x_shape};
    int64_t per_y;
    return forward_shards(&c, y, y_ndim, y_shape, &per_y);
}

/* ---- feature maps --------------------------------------------------------- */

void rai_feat_write(float *out, ra_layout layout, const float *tok, int B, int64_t L, int C) {
    if (layout != RA_LAYOUT_NCHW) {
        memcpy(out, tok, (size_t)B * (size_t)L * (size_t)C * sizeof *out);
        return;
    }
    for (int b = 0; b < B; b++) {   /* (L, C) -> (C, L), in tiles of 16 tokens */
        const float *t = tok + (int64_t)b * L * C;
        float *o = out + (int64_t)b * L * C;
        for (int64_t p0 = 0; p0 < L; p0 += 16) {
            const int64_t p1 = p0 + 16 < L ? p0 + 16 : L;
            for (int c = 0; c < C; c++)
                for (int64_t p = p0; p < p1; p++) o[(int64_t)c * L + p] = t[p * C + c];
        }
    }
}

void rai_feat_shape(rai_feat *f, int i, int64_t B, int nsp, const int64_t *sp, int64_t C) {
    int64_t *d = f->shape[i], L = 1;
    for (int k = 0; k < nsp; k++) L *= sp[k];
    d[0] = B;
    if (f->layout == RA_LAYOUT_NLC) {
        f->ndim[i] = 3, d[1] = L, d[2] = C;
    } else {   /* the sides after B (NHWC) or after C (NCHW) */
        const int first = f->layout == RA_LAYOUT_NCHW;
        f->ndim[i] = 2 + nsp;
        d[first ? 1 : 1 + nsp] = C;
        for (int k = 0; k < nsp; k++) d[1 + first + k] = sp[k];
    }
    f->per[i] = L * C;
}

void rai_feat_stage_shapes(rai_feat *f, int64_t B, int nsp, const int64_t *sp, int64_t C) {
    int64_t g[3] = {0};
    for (int k = 0; k < nsp; k++) g[k] = sp[k];
    for (int s = 0, i = 0; i < f->n; s++) {
        if (f->at[i] == s) rai_feat_shape(f, i++, B, nsp, g, C);
        g[nsp - 2] = (g[nsp - 2] + 1) / 2, g[nsp - 1] = (g[nsp - 1] + 1) / 2, C *= 2;
    }
}

int rai_feat_find(const rai_feat *f, int at) {
    for (int i = 0; i < f->n; i++)
        if (f->at[i] == at) return i;
    return -1;
}

ra_status rai_feat_put(const rai_feat *f, int i, rai_arena *a, const float *tok, int B,
                       int64_t L, int C, const float *nw, const float *nb, float eps) {
    const int64_t rows = B * L;
    if (!nw) {
        rai_feat_write(f->out[i], f->layout, tok, B, L, C);
        return RA_OK;
    }
    if (f->layout != RA_LAYOUT_NCHW) {   /* the rows are the map's */
        ra_layernorm_forward(f->out[i], NULL, NULL, tok, nw, nb, rows, C, eps);
        return RA_OK;
    }
    const size_t mark = rai_arena_mark(a);
    float *t = rai_arena_floats(a, (size_t)(rows * C));
    if (!t) return rai_fail(RA_ERR_NOMEM, "features: out of memory for a normalised map");
    ra_layernorm_forward(t, NULL, NULL, tok, nw, nb, rows, C, eps);
    rai_feat_write(f->out[i], f->layout, t, B, L, C);
    rai_arena_reset(a, mark);
    return RA_OK;
}

ra_status rai_feat_indices(rai_feat *f, const ra_features_options *o, const int *def, int ndef,
                           int n, const char *what) {
    if (o && ((unsigned)o->layout > RA_LAYOUT_NLC || (unsigned)o->norm > RA_FEATURES_NORM_FINAL))
        return rai_fail(RA_ERR_ARG, "features: unknown layout %d or norm %d", (int)o->layout,
                        (int)o->norm);
    if ((o && o->all) || (!def && !(o && o->count))) {
        if (n > RA_MAX_FEATURES)
            return rai_fail(RA_ERR_ARG, "features: all %d %ss are more than %d maps", n, what,
                            RA_MAX_FEATURES);
        for (f->n = 0; f->n < n; f->n++) f->at[f->n] = f->n;
        return RA_OK;
    }
    const int count = o && o->count ? o->count : ndef;
    const int *idx = o && o->count ? o->index : def;
    if (count < 0 || count > RA_MAX_FEATURES)
        return rai_fail(RA_ERR_ARG, "features: %d indices (at most %d)", count, RA_MAX_FEATURES);
    int a[RA_MAX_FEATURES];
    for (int i = 0; i < count; i++) {
        a[i] = idx[i] < 0 ? n + idx[i] : idx[i];
        if (idx[i] < -n || a[i] < 0 || a[i] >= n)
            return rai_fail(RA_ERR_ARG, "features: no %s %d (the model has %d: 0..%d, or -%d..-1 "
                            "from the end)", what, idx[i], n, n - 1, n);
        for (int j = i; j > 0 && a[j - 1] > a[j]; j--) {   /* ascending: the forward's order */
            const int t = a[j];
            a[j] = a[j - 1], a[j - 1] = t;
        }
    }
    f->n = 0;
    for (int i = 0; i < count; i++)
        if (!f->n || f->at[f->n - 1] != a[i]) f->at[f->n++] = a[i];
    return RA_OK;
}

void ra_features_free(ra_tensor *maps, int nmaps) {
    for (int i = 0; maps && i < nmaps; i++) {
        free((void *)maps[i].name);
        rai_free(maps[i].data);
    }
    free(maps);
}

ra_status ra_model_features(const ra_model *m, ra_tensor **maps, int *nmaps, float **y,
                            int *y_ndim, int64_t y_shape[4], const float *x, int x_ndim,
                            const int64_t *x_shape, const ra_features_options *o) {
    if (!m || !maps || !nmaps || !x || !x_shape)
        return rai_fail(RA_ERR_ARG, "model features: NULL argument");
    *maps = NULL, *nmaps = 0;
    if (y) *y = NULL;
    if (!m->ops->features_plan || !m->ops->forward_features)
        return rai_fail(RA_ERR_ARG, "%s has no feature maps (swin, swinv2, swin3d and vit have)",
                        m->ops->name);
    rai_feat *f = calloc(1, sizeof *f);
    if (!f) return rai_fail(RA_ERR_NOMEM, "model features: out of memory");
    ra_status st = m->ops->features_plan(m, f, o, x_ndim, x_shape);
    const int nt = f->n * (f->per_prefix ? 2 : 1);
    ra_tensor *t = st ? NULL : calloc((size_t)nt + 1, sizeof *t);
    if (!st && !t) st = rai_fail(RA_ERR_NOMEM, "model features: out of memory");
    const int64_t B = x_shape[0];
    for (int i = 0, k = 0; !st && i < f->n; i++)
        for (int p = 0; p < (f->per_prefix ? 2 : 1) && !st; p++, k++) {
            ra_tensor *ti = &t[k];
            char name[48];
            snprintf(name, sizeof name, p ? "features.%d.prefix" : "features.%d", f->at[i]);
            const int64_t per = p ? f->per_prefix : f->per[i];
            ti->name = rai_strdup(name);
            ti->data = rai_alloc((size_t)B, (size_t)per * sizeof(float));
            if (!ti->name || !ti->data) {
                st = rai_fail(RA_ERR_NOMEM, "model features: out of memory for %s", name);
                break;
            }
            if (p) {
                ti->ndim = 3;
                ti->shape[0] = B, ti->shape[1] = f->prefix, ti->shape[2] = per / f->prefix;
                f->pre[i] = ti->data;
            } else {
                ti->ndim = f->ndim[i];
                memcpy(ti->shape, f->shape[i], (size_t)f->ndim[i] * sizeof *ti->shape);
                f->out[i] = ti->data;
            }
        }
    float *yy = NULL;
    int nd = 0;
    int64_t ys[4] = {0};
    if (!st) {
        const int S = batch_shards(m, x_ndim, x_shape);
        if (S < 2) {
            st = forward_in_precision(m, f, &yy, &nd, ys, x, x_ndim, x_shape);
        } else {
            forward_parts c = {.m = m, .x = x, .x_ndim = x_ndim, .parts = S, .x_shape = x_shape,
                               .feat = f};
            int64_t per_y;
            st = forward_shards(&c, &yy, &nd, ys, &per_y);
        }
    }
    free(f);
    if (st) {
        rai_free(yy);
        ra_features_free(t, nt);
        return st;
    }
    if (y) {
        *y = yy;
        if (y_ndim) *y_ndim = nd;
        if (y_shape) memcpy(y_shape, ys, sizeof ys);
    } else {
        rai_free(yy);
    }
    *maps = t, *nmaps = nt;
    return RA_OK;
}


ra_status rai_model_tta(const ra_model *m, int *flip) {
    const char *tta = ra_model_meta(m, "tta");
    *flip = tta && !strcmp(tta, "flip");
    if (tta && !*flip && strcmp(tta, "none"))
        return rai_fail(RA_ERR_FORMAT, "metadata tta = \"%.40s\": none or flip", tta);
    return RA_OK;
}

ra_status ra_model_predict(const ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                           const float *x, int x_ndim, const int64_t *x_shape) {
    if (!m || !y || !x || !x_shape) return rai_fail(RA_ERR_ARG, "model predict: NULL argument");
    int flip = 0;
    ra_status tst = rai_model_tta(m, &flip);
    if (tst) return tst;
    if (flip && x_ndim != 4)
        return rai_fail(RA_ERR_ARG, "model predict: tta = flip takes images (B, C, H, W)");
    ra_status st = ra_model_forward(m, y, y_ndim, y_shape, x, x_ndim, x_shape);
    if (st || !flip) return st;
    if (*y_ndim != 2) {   /* a block's (B, H, W, C): its last axis is channels */
        free(*y), *y = NULL;
        return rai_fail(RA_ERR_ARG, "model predict: tta = flip is for image classifiers, not %s",
                        m->ops->name);
    }
    /* the shape was accepted by the forward, so the product fits */
    const int64_t W = x_shape[3], rows = x_shape[0] * x_shape[1] * x_shape[2];
    float *xm = rai_alloc((size_t)(rows * W), sizeof *xm), *ym = NULL;
    if (!xm) {
        free(*y), *y = NULL;
        return rai_fail(RA_ERR_NOMEM, "model predict: out of memory");
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < W; j++) xm[r * W + j] = x[r * W + W - 1 - j];
    int nd;
    int64_t ms[4];
    st = ra_model_forward(m, &ym, &nd, ms, xm, x_ndim, x_shape);
    rai_free(xm);
    int64_t n = 1;
    for (int d = 0; !st && d < nd; d++) n *= ms[d];
    for (int64_t i = 0; !st && i < n; i++) (*y)[i] = 0.5f * ((*y)[i] + ym[i]);
    free(ym);
    if (st) free(*y), *y = NULL;
    return st;
}

const ra_attn_layer *ra_model_attn(const ra_model *m) {
    return m && m->ops->attn_layer
               ? ((const rai_attn_impl *)m->impl)->layer
               : NULL;
}

void ra_model_attn_grads(const ra_model *m, float *flat, ra_attn_grads *g) {
    static const struct { const char *name; size_t field; } map[] = {
        {"qkv.weight", offsetof(ra_attn_grads, qkv_w)}, {"qkv.bias", offsetof(ra_attn_grads, qkv_b)},
        {"q.weight", offsetof(ra_attn_grads, q_w)},     {"q.bias", offsetof(ra_attn_grads, q_b)},
        {"kv.weight", offsetof(ra_attn_grads, kv_w)},   {"kv.bias", offsetof(ra_attn_grads, kv_b)},
        {"proj.weight", offsetof(ra_attn_grads, proj_w)},
        {"proj.bias", offsetof(ra_attn_grads, proj_b)},
        {"relative_position_bias_table", offsetof(ra_attn_grads, table)},
        {"relative_keys", offsetof(ra_attn_grads, rel_k)},
        {"relative_values", offsetof(ra_attn_grads, rel_v)},
        {"k.weight", offsetof(ra_attn_grads, k_w)},     {"v.weight", offsetof(ra_attn_grads, v_w)},
        {"o.weight", offsetof(ra_attn_grads, proj_w)},
        {"relative_attention_bias.weight", offsetof(ra_attn_grads, table)},
        {"rel_pos_h", offsetof(ra_attn_grads, rel_h)},  {"rel_pos_w", offsetof(ra_attn_grads, rel_w)},
        {"logit_scale", offsetof(ra_attn_grads, logit_scale)},
        {"cpb_mlp.0.weight", offsetof(ra_attn_grads, cpb_w1)},
        {"cpb_mlp.0.bias", offsetof(ra_attn_grads, cpb_b1)},
        {"cpb_mlp.2.weight", offsetof(ra_attn_grads, cpb_w2)},
        {"q_bias", offsetof(ra_attn_grads, q_bias)}, {"v_bias", offsetof(ra_attn_grads, v_bias)}};
    memset(g, 0, sizeof *g);
    for (size_t i = 0; m && flat && i < sizeof map / sizeof map[0]; i++) {
        int p = find_param(m, map[i].name);
        if (p >= 0 && m->params[p].offset >= 0)
            *(float **)((char *)g + map[i].field) = flat + m->params[p].offset;
    }
}

/* ---- training ----------------------------------------------------------- */

int ra_model_trainable(const ra_model *m) { return m && m->ops->forward_train && m->ops->backward; }

int ra_param_layer(const ra_model *m, const char *name, int *count) {
    int n = 0;
    const int l = m && name && m->ops->layer_of ? m->ops->layer_of(m, name, &n) : -1;
    if (count) *count = l >= 0 ? n : 0;
    return l;
}

/* Training in shards: as ra_model_forward, one shard of the batch per
 * thread, each on a model with its own tape: m for the first, replicas
 * made from m's metadata and naming scheme (RA_META_NAMING; as
 * ra_model_create makes any model, and checked parameter by parameter
 * against m) for the others, built over m's own weights (create_arch). The backward runs
 * each shard on its model, the replicas into their own zeroed gradients,
 * added to the caller's in shard order: the result depends on the thread
 * count only. A model that cannot be replicated, or memory that runs
 * out, trains in one shard on the layers' own threads: slower, never
 * wrong. With an rng (drop path), one number u is drawn from it and shard s
 * draws from its own generator seeded with rai_mix64(u, s), one shard or
 * several: the draws, like the sums, depend on the shard count only. */
static ra_status create_arch(ra_model **out, const rai_arch_ops *ops, const char *const *meta,
                             int nmeta, uint64_t seed, ra_model *like);

static int make_replicas(ra_model *m, int want) {
    if (want - 1 <= m->nrep) return want;
    if (m->rep_failed) return m->nrep + 1;
    ra_model **rep = realloc(m->rep, (size_t)(want - 1) * sizeof *rep);
    float **rgrad = rep ? realloc(m->rgrad, (size_t)(want - 1) * sizeof *rgrad) : NULL;
    if (rep) m->rep = rep;
    if (rgrad) m->rgrad = rgrad;
    if (!rep || !rgrad) return m->nrep + 1;
    /* m's metadata and its naming scheme (RA_META_NAMING) */
    const char **meta = malloc(((size_t)m->nmeta + 1) * 2 * sizeof *meta);
    if (!meta) return m->nrep + 1;
    memcpy(meta, m->meta, (size_t)m->nmeta * 2 * sizeof *meta);
    meta[2 * m->nmeta] = RA_META_NAMING, meta[2 * m->nmeta + 1] = ra_model_scheme(m);
    while (m->nrep < want - 1) {
        ra_model *r = NULL;
        float *g = NULL;
        const int same = create_arch(&r, m->ops, meta, m->nmeta + 1, 0, m) == RA_OK;
        if (!same || !(g = rai_alloc((size_t)m->total + 1, sizeof *g))) {
            m->rep_failed = !same;   /* another model: never; out of memory: next time */
            ra_model_free(r);
            break;
        }
        m->rep[m->nrep] = r, m->rgrad[m->nrep] = g, m->nrep++;
    }
    free(meta);
    return m->nrep + 1;
}

/* The training calls compute m's products in m's precision (fp32 or
 * bf16; the shards' threads take it from rai_run_parts), never with a
 * packed table: begin returns the thread's precision before, end puts it
 * back and turns a product that ran out of memory into st. */
static ra_precision train_precision_begin(const ra_model *m) {
    rai_precision_failed();
    return rai_precision_set(m->precision);
}

static ra_status train_precision_end(const ra_model *m, ra_precision was, ra_status st,
                                     const char *what) {
    rai_precision_set(was);
    if (rai_precision_failed() && !st)
        st = rai_fail(RA_ERR_NOMEM, "%s: out of memory for a product in precision %s", what,
                      ra_precision_name(m->precision));
    return st;
}

ra_status ra_model_forward_train(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                 const float *x, int x_ndim, const int64_t *x_shape,
                                 ra_rng *rng) {
    if (!m || !y || !y_ndim || !y_shape || !x || !x_shape)
        return rai_fail(RA_ERR_ARG, "training forward: NULL argument");
    if (!ra_model_trainable(m))
        return rai_fail(RA_ERR_ARG, "%s has no training forward (attention layers: use "
                        "ra_attn_layer_backward)", m->ops->name);
    if (m->precision == RA_PRECISION_INT8)
        return rai_fail(RA_ERR_ARG, "training runs in fp32 or bf16; this model computes in %s",
                        ra_precision_name(m->precision));
    *y = NULL;
    /* the weights change from now on: bf16's products pack them at each
     * call, not once */
    rai_packed_free(m->packed), m->packed = NULL;
    const ra_precision was = train_precision_begin(m);
    m->shards = 1;
    int S = batch_shards(m, x_ndim, x_shape);
    if (S > 1) S = make_replicas(m, S);
    const uint64_t draw = rng ? ra_rng_u64(rng) : 0;
    ra_status st;
    if (S < 2) {
        ra_rng own;
        if (rng) ra_rng_seed(&own, rai_mix64(draw, 0));
        st = m->ops->forward_train(m, y, y_ndim, y_shape, x, x_ndim, x_shape, rng ? &own : NULL);
    } else {
        forward_parts c = {.m = m, .x = x, .x_ndim = x_ndim, .parts = S, .x_shape = x_shape,
                           .draw = rng ? &draw : NULL};
        for (int s = 0; s < S; s++) c.train[s] = s ? m->rep[s - 1] : m;
        int64_t per_y;
        st = forward_shards(&c, y, y_ndim, y_shape, &per_y);
        if (!st) m->shards = S, m->batch = x_shape[0], m->per_x = c.per_x, m->per_y = per_y;
    }
    st = train_precision_end(m, was, st, "training forward");
    if (st) rai_free(*y), *y = NULL;
    return st;
}

typedef struct {
    ra_model *m;
    float *grad, *dx;
    const float *dy;
} backward_parts;

static ra_status backward_part(void *ctx, int s) {
    backward_parts *c = ctx;
    ra_model *m = c->m, *r = s ? m->rep[s - 1] : m;
    const int64_t b0 = m->batch * s / m->shards;
    float *g = s ? m->rgrad[s - 1] : c->grad;
    if (s) memset(g, 0, (size_t)m->total * sizeof *g);
    return r->ops->backward(r, g, c->dx ? c->dx + b0 * m->per_x : NULL, c->dy + b0 * m->per_y);
}

ra_status ra_model_backward(ra_model *m, float *grad, float *dx, const float *dy) {
    if (!m || !grad || !dy) return rai_fail(RA_ERR_ARG, "model backward: NULL argument");
    if (!ra_model_trainable(m))
        return rai_fail(RA_ERR_ARG, "%s has no network backward (attention layers: use "
                        "ra_attn_layer_backward)", m->ops->name);
    const int S = m->shards;
    const ra_precision was = train_precision_begin(m);
    backward_parts c = {.m = m, .grad = grad, .dx = dx, .dy = dy};
    ra_status st = S < 2 ? m->ops->backward(m, grad, dx, dy) : rai_run_parts(S, backward_part, &c);
    st = train_precision_end(m, was, st, "model backward");
    if (st || S < 2) return st;
    const int64_t P = m->total;
    #pragma omp parallel for num_threads(S) schedule(static)
    for (int64_t i = 0; i < P; i++)
        for (int s = 1; s < S; s++) grad[i] += m->rgrad[s - 1][i];
    return RA_OK;
}

/* The initial value of a parameter from its name and shape, as the PyTorch
 * constructors of Swin, ViT and the seeds' modules leave it (a Conv2d's
 * bias is done by init_weights, which knows its weight's fan_in). */
static ra_status init_param(float *w, const ra_param_info *p, ra_rng *rng) {
    const char *nm = p->name;
    const size_t n = strlen(nm);
    if (p->ndim >= 4) {   /* Conv2d, Conv3d: kaiming_uniform_(a=sqrt(5)) = U(+-1/sqrt(fan_in)) */
        const float bound = 1.0f / sqrtf((float)(p->numel / (p->shape[0] > 0 ? p->shape[0] : 1)));
        ra_rng_fill_uniform(rng, w, p->numel, -bound, bound);
    } else if (strstr(nm, "norm") && n >= 7 && strcmp(nm + n - 7, ".weight") == 0) {
        for (int64_t i = 0; i < p->numel; i++) w[i] = 1.0f;
    } else if (n >= 5 && strcmp(nm + n - 5, ".bias") == 0) {
        memset(w, 0, (size_t)p->numel * sizeof *w);
    } else {
        return ra_rng_fill_trunc_normal(rng, w, p->numel, 0.0f, RA_INIT_STD, -2.0f, 2.0f);
    }
    return RA_OK;
}

static ra_status init_weights(ra_model *m, uint64_t seed) {
    ra_rng rng;
    ra_rng_seed(&rng, seed);
    int64_t conv_fan_in = 0;
    for (int i = 0; i < m->nparams; i++) {
        const ra_param_info *p = &m->params[i];
        float *w = m->weights + p->offset;
        if (p->ndim >= 4) conv_fan_in = p->numel / (p->shape[0] > 0 ? p->shape[0] : 1);
        ra_status st;
        if (strcmp(p->name, "patch_embed.proj.bias") == 0) {   /* follows its weight */
            if (conv_fan_in < 1) return rai_fail(RA_ERR_INTERNAL, "init: conv bias before weight");
            const float bound = 1.0f / sqrtf((float)conv_fan_in);
            ra_rng_fill_uniform(&rng, w, p->numel, -bound, bound);
            continue;
        }
        const size_t ln = strlen(p->name);
        if (ln >= 11 && strcmp(p->name + ln - 11, "logit_scale") == 0) {   /* SwinV2 */
            for (int64_t e = 0; e < p->numel; e++) w[e] = logf(10.0f);
            continue;
        }
        if (ln >= 6 &&
            (!strcmp(p->name + ln - 6, "q_bias") || !strcmp(p->name + ln - 6, "v_bias"))) {
            memset(w, 0, (size_t)p->numel * sizeof *w);
            continue;
        }
        if (ln >= 6 && strcmp(p->name + ln - 6, ".gamma") == 0) {   /* timm's LayerScale */
            const char *iv = ra_model_meta(m, "init_values");
            const float v = iv ? strtof(iv, NULL) : 1e-5f;
            for (int64_t e = 0; e < p->numel; e++) w[e] = v;
            continue;
        }
        if ((st = init_param(w, p, &rng))) return rai_fail(st, "init: %s", p->name);
    }
    return RA_OK;
}

/* rai_model_create_arch, or with like a replica of like: built over like's
 * own weights (borrowed, neither initialised nor freed), which its
 * parameters must lay out as like's do (else RA_ERR_FORMAT). */
static ra_status create_arch(ra_model **out, const rai_arch_ops *ops, const char *const *meta,
                             int nmeta, uint64_t seed, ra_model *like) {
    *out = NULL;
    /* a safetensors file with metadata only, so that the hyperparameters go
     * through exactly the checks of a loaded file */
    json_t *root = json_object(), *md = json_object();
    int bad = !root || !md || json_object_set_new(root, "__metadata__", md);
    if (bad) json_decref(md);
    for (int i = 0; i < nmeta && !bad; i++)
        bad = !meta[2 * i] || !meta[2 * i + 1] ||
              json_object_set_new(md, meta[2 * i], json_string(meta[2 * i + 1]));
    char *hdr = bad ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!hdr) return rai_fail(bad ? RA_ERR_ARG : RA_ERR_NOMEM, "model create: bad metadata");
    const size_t hl = strlen(hdr);
    unsigned char *buf = malloc(8 + hl);
    ra_status st = buf ? RA_OK : rai_fail(RA_ERR_NOMEM, "model create: out of memory");
    ra_st_file *f = NULL;
    if (!st) {
        for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
        memcpy(buf + 8, hdr, hl);
        st = ra_st_open_memory(&f, buf, 8 + hl);
    }
    free(buf);
    free(hdr);
    if (st) return st;
    ra_model *m = ops ? calloc(1, sizeof *m) : NULL;
    if (!ops) st = rai_fail(RA_ERR_FORMAT, "metadata has no known \"arch\"");
    else if (!m) st = rai_fail(RA_ERR_NOMEM, "model: out of memory");
    if (!st) {
        m->ops = ops;
        if (!(m->meta = calloc((size_t)nmeta * 2 + 1, sizeof *m->meta)))
            st = rai_fail(RA_ERR_NOMEM, "model: out of memory");
        for (int i = 0; i < nmeta && !st; i++, m->nmeta++) {
            m->meta[2 * i] = rai_strdup(meta[2 * i]);
            m->meta[2 * i + 1] = rai_strdup(meta[2 * i + 1]);
            if (!m->meta[2 * i] || !m->meta[2 * i + 1])
                st = rai_fail(RA_ERR_NOMEM, "model: out of memory");
        }
    }
    if (!st) st = ops->declare(m, f);
    if (!st && ops->detect) st = ops->detect(m, f);
    if (!st) {   /* every declared parameter, optional ones included, in order */
        int64_t total = 0;
        for (int p = 0; p < m->nparams; p++) {
            m->params[p].offset = total;
            m->params[p].file_name = m->params[p].name;
            total += m->params[p].numel;
        }
        m->total = total;
        int same = like && total == like->total && m->nparams == like->nparams;
        for (int p = 0; same && p < m->nparams; p++)
            same = m->params[p].offset == like->params[p].offset &&
                   !strcmp(m->params[p].name, like->params[p].name);
        if (like && !same)
            st = rai_fail(RA_ERR_FORMAT, "model: a replica's parameters differ from the model's");
        else if (like)
            m->weights = like->weights, m->borrowed = 1;
        else if (!(m->weights = rai_alloc((size_t)(total ? total : 1), sizeof(float))))
            st = rai_fail(RA_ERR_NOMEM, "model: out of memory for %lld weights", (long long)total);
    }
    if (!st && !like) st = init_weights(m, seed);
    if (!st) st = ops->build(m, f);
    ra_st_close(f);
    if (st) {
        ra_model_free(m);
        return st == RA_ERR_ARG ? RA_ERR_FORMAT : st;
    }
    *out = m;
    return RA_OK;
}

ra_status rai_model_create_arch(ra_model **out, const rai_arch_ops *ops, const char *const *meta,
                                int nmeta, uint64_t seed) {
    return create_arch(out, ops, meta, nmeta, seed, NULL);
}

/* ---- precision ---------------------------------------------------------- */

/* The parameters that are Linear weights: what a precision rounds. The
 * patch embedding (a convolution), the position tables, SwinV2's CPB MLP
 * (it makes a position table) and the norms stay float32. */
/* A Linear weight by its (canonical) parameter name: what a precision
 * rounds, what convert --dtype int8 stores as int8 and the only int8
 * tensors the loader reads. */
static int linear_name(const char *name, int ndim) {
    static const char *const ends[] = {"qkv.weight", "attn.proj.weight", "fc1.weight",
                                       "fc2.weight", "reduction.weight", "head.weight",
                                       "attn.q.weight", "attn.kv.weight",
                                       "mlp.0.weight", "mlp.3.weight"};   /* torchvision's MLP */
    const size_t n = strlen(name);
    if (ndim != 2) return 0;
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++) {
        const size_t k = strlen(ends[i]);
        if (n >= k && !strcmp(name + n - k, ends[i]) && (n == k || name[n - k - 1] == '.'))
            return 1;
    }
    return 0;
}

static int linear_weight(const ra_param_info *p) {
    return p->offset >= 0 && linear_name(p->name, p->ndim);
}

/* int8 and bf16: m's Linear weights packed once for the product of
 * precision p (nn/precision.h). */
static ra_status pack_linear_weights(ra_model *m, ra_precision p) {
    const float **w = malloc(((size_t)m->nparams + 1) * sizeof *w);
    int64_t *n = malloc(((size_t)m->nparams + 1) * sizeof *n);
    int64_t *k = malloc(((size_t)m->nparams + 1) * sizeof *k);
    int count = 0;
    for (int i = 0; w && n && k && i < m->nparams; i++)
        if (linear_weight(&m->params[i])) {
            w[count] = m->weights + m->params[i].offset;
            n[count] = m->params[i].shape[0], k[count++] = m->params[i].shape[1];
        }
    if (w && n && k) m->packed = rai_packed_make(w, n, k, count, p);
    free(w), free(n), free(k);
    return m->packed ? RA_OK : rai_fail(RA_ERR_NOMEM, "precision %s: out of memory packing "
                                        "the weights", ra_precision_name(p));
}

ra_status ra_model_set_precision(ra_model *m, ra_precision p) {
    if (!m) return rai_fail(RA_ERR_ARG, "model precision: NULL model");
    if (!ra_precision_name(p)) return rai_fail(RA_ERR_ARG, "model precision: unknown value %d", (int)p);
    if (p == m->precision) return RA_OK;
    if (m->precision != RA_PRECISION_FP32)
        return rai_fail(RA_ERR_ARG, "model precision: the model is in %s already: load it again",
                        ra_precision_name(m->precision));
    if (!m->ops->forward || m->ops->attn_layer)
        return rai_fail(RA_ERR_ARG, "precision %s is for networks (swin, swinv2, vit, swin_block, "
                        "swin_block_3d), not %s", ra_precision_name(p), m->ops->name);
    for (int i = 0; i < m->nparams; i++)
        if (linear_weight(&m->params[i]) && m->params[i].shape[1] > rai_precision_max_inputs(p))
            return rai_fail(RA_ERR_ARG, "precision %s: %s has %lld inputs, more than the %lld "
                            "whose integer sums stay exact", ra_precision_name(p),
                            m->params[i].name, (long long)m->params[i].shape[1],
                            (long long)rai_precision_max_inputs(p));
    /* int8 holds its weights as they are quantised; bf16 keeps them in
     * float32 (a training run's master weights) and rounds them as they
     * enter each product, as it rounds the inputs */
    for (int i = 0; p == RA_PRECISION_INT8 && i < m->nparams; i++)
        if (linear_weight(&m->params[i]))
            rai_precision_weights(m->weights + m->params[i].offset, m->params[i].shape[0],
                                  m->params[i].shape[1], p);
    m->precision = p;
    return p == RA_PRECISION_FP32 ? RA_OK : pack_linear_weights(m, p);
}

ra_precision ra_model_precision(const ra_model *m) { return m ? m->precision : RA_PRECISION_FP32; }

/* One parameter of m into w as dtype (I8: the Linear weights only). */
static ra_status save_param(ra_st_writer *w, const ra_model *m, const ra_param_info *p,
                            ra_dtype dtype) {
    const float *v = m->weights + p->offset;
    const int64_t *shape = p->shape;
    if (dtype != RA_DTYPE_I8 || !linear_weight(p))
        return ra_st_writer_add_f32_as(w, p->file_name, dtype == RA_DTYPE_I8 ? RA_DTYPE_F32 : dtype,
                                       p->ndim, shape, v);
    const int64_t rows = shape[0], k = shape[1];
    int8_t *q = calloc((size_t)(rows * k) + 1, 1);
    float *scale = malloc((size_t)rows * sizeof *scale + 1);
    ra_status st = q && scale ? RA_OK : rai_fail(RA_ERR_NOMEM, "model save: out of memory");
    for (int64_t r = 0; !st && r < rows; r++) scale[r] = rai_int8_row(q + r * k, v + r * k, k);
    char name[320];
    snprintf(name, sizeof name, "%s%s", RA_SCALE_PREFIX, p->file_name);
    if (!st) st = ra_st_writer_add(w, p->file_name, RA_DTYPE_I8, 2, shape, q);
    if (!st) st = ra_st_writer_add(w, name, RA_DTYPE_F32, 1, &rows, scale);
    free(q), free(scale);
    return st;
}

ra_status ra_model_save(const ra_model *m, const char *path, ra_dtype dtype) {
    if (!m || !path) return rai_fail(RA_ERR_ARG, "model save: NULL argument");
    if (dtype != RA_DTYPE_F32 && dtype != RA_DTYPE_F16 && dtype != RA_DTYPE_BF16 &&
        dtype != RA_DTYPE_I8)
        return rai_fail(RA_ERR_ARG, "model save: dtype must be F32, F16, BF16 or I8");
    ra_st_writer *w = ra_st_writer_new();
    ra_status st = w ? RA_OK : rai_fail(RA_ERR_NOMEM, "model save: out of memory");
    for (int i = 0; !st && i < m->nmeta; i++)
        if (strncmp(m->meta[2 * i], RA_META_SOURCE, strlen(RA_META_SOURCE)))
            st = ra_st_writer_meta(w, m->meta[2 * i], m->meta[2 * i + 1]);
    for (int i = 0; !st && i < m->nparams; i++) st = save_param(w, m, &m->params[i], dtype);
    if (!st) st = ra_st_writer_save(w, path);
    ra_st_writer_free(w);
    return st;
}

/* ---- a model derived from another (fine-tuning) -------------------------------------- */

/* n's side when it is a square (of an odd side, with odd), else 0. */
static int64_t square_side(int64_t n, int odd) {
    int64_t s = 0;
    return n > 0 && rai_isqrt_i64(&s, n) && s * s == n && (!odd || s % 2) ? s : 0;
}

/* dst (q's shape) from src (from's) when q is a relative position bias
 * table of another (square) window, resampled as the Swin authors do, or
 * position embeddings (1, prefix + g^2, C) of another square grid,
 * resampled as timm's resample_abs_pos_embed (the prefix tokens kept); both
 * bicubic, align_corners False (ra_bias_table_resize: (positions,
 * channels) grids). 1 if done. */
static int resample(float *dst, const ra_param_info *q, const float *src,
                    const ra_param_info *from, int timm_tables) {
    if (q->ndim == 4 && from->ndim == 4 && rai_ends_with(q->name, "patch_embed.proj.weight") &&
        from->shape[1] == 3 && q->shape[0] == from->shape[0] && q->shape[2] == from->shape[2] &&
        q->shape[3] == from->shape[3]) {
        /* another number of input channels, as timm's adapt_input_conv:
         * one takes the sum over RGB; N the RGB weights repeated, the first
         * N channels, times 3 / N */
        const int64_t O = q->shape[0], N = q->shape[1], JK = q->shape[2] * q->shape[3];
        for (int64_t o = 0; o < O; o++)
            for (int64_t c = 0; c < N; c++)
                for (int64_t j = 0; j < JK; j++) {
                    const float *w = src + (o * 3) * JK + j;
                    dst[(o * N + c) * JK + j] =
                        N == 1 ? w[0] + w[JK] + w[2 * JK]
                               : w[(c % 3) * JK] * (float)(3.0 / (double)N);
                }
        return 1;
    }
    if (q->ndim != from->ndim || q->shape[q->ndim - 1] != from->shape[from->ndim - 1]) return 0;
    const int64_t C = q->shape[q->ndim - 1];
    if (q->ndim == 2 && rai_ends_with(q->name, "relative_position_bias_table")) {
        const int64_t s1 = square_side(from->shape[0], 1), s2 = square_side(q->shape[0], 1);
        if (!s1 || !s2 || C > INT32_MAX) return 0;
        return (timm_tables ? ra_bias_table_resize_timm : ra_bias_table_resize)(
                   dst, src, (int)C, (int)s1, (int)s1, (int)s2, (int)s2) == RA_OK;
    }
    if (q->ndim == 3 && q->shape[0] == 1 && from->shape[0] == 1 &&
        rai_ends_with(q->name, "pos_embed")) {   /* (absolute_pos_embed too) */
        for (int64_t prefix = 0; prefix <= 16; prefix++) {   /* class and register tokens */
            const int64_t g1 = square_side(from->shape[1] - prefix, 0);
            const int64_t g2 = square_side(q->shape[1] - prefix, 0);
            if (!g1 || !g2 || g1 > INT32_MAX / 2 || g2 > INT32_MAX / 2) continue;
            memcpy(dst, src, sizeof(float) * (size_t)(prefix * C));
            return ra_bias_table_resize(dst + prefix * C, src + prefix * C, (int)C, (int)g1,
                                        (int)g1, (int)g2, (int)g2) == RA_OK;
        }
    }
    return 0;
}

int rai_meta_merge(const char **out, const char *const *base, int nbase, const char *const *set,
                   int nset, const char *skip) {
    int k = 0;
    for (int i = 0; i < nbase; i++) {
        int replaced = skip && !strcmp(base[2 * i], skip);
        for (int j = 0; j < nset && !replaced; j++)
            replaced = set[2 * j] && !strcmp(set[2 * j], base[2 * i]);
        if (!replaced) out[2 * k] = base[2 * i], out[2 * k + 1] = base[2 * i + 1], k++;
    }
    for (int j = 0; j < nset; j++)
        if (!set[2 * j] || !skip || strcmp(set[2 * j], skip))
            out[2 * k] = set[2 * j], out[2 * k + 1] = set[2 * j + 1], k++;
    return k;
}

/* 1 if set gives key a value other than m's metadata's. */
static int changes(const ra_model *m, const char *const *set, int nset, const char *key) {
    const char *was = ra_model_meta(m, key);
    for (int j = 0; j < nset; j++)
        if (set[2 * j] && !strcmp(set[2 * j], key) && (!was || !set[2 * j + 1] ||
                                                      strcmp(was, set[2 * j + 1])))
            return 1;
    return 0;
}

ra_status ra_model_derive(ra_model **out, const ra_model *m, const char *const *set, int nset,
                          uint64_t seed) {
    if (!out || !m || nset < 0 || (nset && !set))
        return rai_fail(RA_ERR_ARG, "model derive: bad argument");
    *out = NULL;
    /* m's metadata with the pairs of set in place of (or after) its own, and
     * its naming scheme (which is also what some architectures compute:
     * torchvision's Swin pads a window its official code shrinks), as the
     * replicas are made; the scheme is not kept as metadata (its names say
     * it in a saved file) */
    const int n = m->nmeta + nset + 2;
    const char **meta = malloc((size_t)n * 2 * sizeof *meta);
    if (!meta) return rai_fail(RA_ERR_NOMEM, "model derive: out of memory");
    int timm_tables = 0;
    for (int j = 0; j < nset; j++)
        if (set[2 * j] && !strcmp(set[2 * j], RA_DERIVE_TABLE_RESIZE)) {
            timm_tables = set[2 * j + 1] && !strcmp(set[2 * j + 1], "timm");
            if (!timm_tables && (!set[2 * j + 1] || strcmp(set[2 * j + 1], "swin"))) {
                free(meta);
                return rai_fail(RA_ERR_ARG, "model derive: %s \"%.20s\": swin or timm",
                                RA_DERIVE_TABLE_RESIZE, set[2 * j + 1] ? set[2 * j + 1] : "");
            }
        }
    int k = rai_meta_merge(meta, (const char *const *)m->meta, m->nmeta, set, nset,
                           RA_DERIVE_TABLE_RESIZE);
    /* at another window or size, the windows m was trained at (SwinV2) */
    char pws[96];
    if (m->ops->trained_windows && !changes(m, set, nset, "pretrained_window_sizes") &&
        (changes(m, set, nset, "window_size") || changes(m, set, nset, "img_size")) &&
        m->ops->trained_windows(m, pws, sizeof pws)) {
        int j = 0;
        while (j < k && strcmp(meta[2 * j], "pretrained_window_sizes")) j++;
        meta[2 * j] = "pretrained_window_sizes", meta[2 * j + 1] = pws, k += j == k;
    }
    meta[2 * k] = RA_META_NAMING, meta[2 * k + 1] = ra_model_scheme(m), k++;
    ra_model *r = NULL;
    ra_status st = rai_model_create_arch(&r, m->ops, meta, k, seed);
    free(meta);
    for (int i = 0; !st && i < r->nmeta; i++)
        if (!strcmp(r->meta[2 * i], RA_META_NAMING)) {
            free(r->meta[2 * i]), free(r->meta[2 * i + 1]);
            memmove(r->meta + 2 * i, r->meta + 2 * i + 2, sizeof *r->meta * 2 * (size_t)(r->nmeta - i - 1));
            r->nmeta--, i--;
        }
    /* every parameter of m where r has it at the same shape; a head of
     * another number of classes keeps r's initialisation */
    for (int p = 0; !st && p < r->nparams; p++) {
        ra_param_info *q = &r->params[p];
        const ra_param_info *from = NULL;
        for (int i = 0; i < m->nparams && !from; i++)
            if (!strcmp(m->params[i].name, q->name)) from = &m->params[i];
        if (from && from->file_name != from->name) {   /* m's names, so that a saved r reads
                                                          back as m's scheme */
            char *fn = rai_strdup(from->file_name);
            if (!fn) {
                st = rai_fail(RA_ERR_NOMEM, "model derive: out of memory");
                break;
            }
            r->params[p].file_name = fn;
        }
        if (from && from->numel == q->numel && from->ndim == q->ndim &&
            !memcmp(from->shape, q->shape, sizeof(int64_t) * (size_t)q->ndim)) {
            memcpy(r->weights + q->offset, m->weights + from->offset, sizeof(float) * (size_t)q->numel);
        } else if (from && resample(r->weights + q->offset, q, m->weights + from->offset, from,
                                    timm_tables)) {
            /* a bias table for another window, position embeddings for another grid */
        } else if (strncmp(q->name, "head.", 5)) {
            st = rai_fail(RA_ERR_ARG, "parameter %s %s the model it derives from: only a head "
                          "of another number of classes starts anew, and only square bias "
                          "tables and position-embedding grids are resampled", q->name,
                          from ? "has another shape than in" : "is not in");
        }
    }
    if (st) {
        ra_model_free(r);
        return st;
    }
    *out = r;
    return RA_OK;
}
