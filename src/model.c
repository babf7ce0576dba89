/* model.c - an attention layer from a safetensors model file (SPEC 3.1).
 *
 * The file's __metadata__ names the arch and its hyperparameters exactly as
 * the PyTorch constructor does; its tensors carry the state_dict() names.
 * Nothing in the file is trusted: each hyperparameter is parsed strictly,
 * each expected tensor must be there with the shape the configuration
 * implies, nothing unexpected may be there, and a saved
 * relative_position_index must equal the one computed here. Weights are
 * converted to F32 into one flat buffer with named pointers into it. */
#include "internal.h"

#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RA_MODEL_MAX_PARAMS 12

struct ra_model {
    ra_attn_config cfg;
    float *weights;        /* every parameter, in the order of spec_of() */
    int64_t total;         /* floats in weights */
    int nparams;
    ra_param_info params[RA_MODEL_MAX_PARAMS];
    size_t grad_field[RA_MODEL_MAX_PARAMS];   /* offsetof(ra_attn_grads, ...) */
    ra_attn_layer *attn;
};

/* ---- metadata values ---------------------------------------------------- */

/* A decimal integer in [lo, hi], the whole string. */
static ra_status parse_int(int *out, const char *key, const char *s, int lo, int hi) {
    const char *p = s;
    if (*p == '-' || *p == '+') p++;
    if (*p < '0' || *p > '9')
        return ra_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\" is not an integer", key, s);
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end || errno)
        return ra_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\" is not an integer", key, s);
    if (v < lo || v > hi)
        return ra_fail(RA_ERR_FORMAT, "metadata %s = %lld is outside %d..%d", key, v, lo, hi);
    *out = (int)v;
    return RA_OK;
}

/* "Wh,Ww" (spaces allowed after the comma), or one integer for a square. */
static ra_status parse_pair(int out[2], const char *key, const char *s, int lo, int hi) {
    const char *comma = strchr(s, ',');
    if (!comma) {
        ra_status st = parse_int(&out[0], key, s, lo, hi);
        out[1] = out[0];
        return st;
    }
    char first[32];
    size_t n = (size_t)(comma - s);
    if (n == 0 || n >= sizeof first || strchr(comma + 1, ','))
        return ra_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\" is not \"a,b\"", key, s);
    memcpy(first, s, n);
    first[n] = 0;
    const char *second = comma + 1;
    while (*second == ' ') second++;
    ra_status st = parse_int(&out[0], key, first, lo, hi);
    if (!st) st = parse_int(&out[1], key, second, lo, hi);
    if (st == RA_ERR_FORMAT && strstr(ra_last_error(), "not an integer"))
        /* name the whole value ("7," or ",7"), not the empty half of it */
        st = ra_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\" is not \"a,b\" of integers", key, s);
    return st;
}

static ra_status parse_bool(int *out, const char *key, const char *s) {
    if (strcmp(s, "true") == 0) *out = 1;
    else if (strcmp(s, "false") == 0) *out = 0;
    else return ra_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\" is not true or false", key, s);
    return RA_OK;
}

static ra_status parse_float(float *out, const char *key, const char *s) {
    errno = 0;
    char *end;
    float v = strtof(s, &end);
    if (end == s || *end || errno || !isfinite(v))
        return ra_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\" is not a finite number", key, s);
    *out = v;
    return RA_OK;
}

/* A required key: NULL value is an error naming it. */
static const char *need(const ra_st_file *f, const char *key, ra_status *st) {
    const char *v = ra_st_meta(f, key);
    if (!v && !*st)
        *st = ra_fail(RA_ERR_FORMAT, "metadata key \"%s\" is missing (arch %s)", key,
                      ra_st_meta(f, "arch"));
    return v;
}

#define RA_META_MAX 65536   /* dims, heads, windows, frames: generous bounds */

static ra_status config_from_meta(ra_attn_config *c, const ra_st_file *f) {
    const char *arch = ra_st_meta(f, "arch");
    if (!arch) return ra_fail(RA_ERR_FORMAT, "metadata has no \"arch\"");
    ra_arch a = ra_arch_from_name(arch);
    if (a == RA_ARCH_NONE) return ra_fail(RA_ERR_FORMAT, "unknown arch \"%.60s\"", arch);
    *c = ra_attn_config_default(a);
    ra_status st = RA_OK;
    const char *v;
    if ((v = need(f, "dim", &st))) st = parse_int(&c->dim, "dim", v, 1, RA_META_MAX);
    if (!st && (v = need(f, "num_heads", &st)))
        st = parse_int(&c->num_heads, "num_heads", v, 1, RA_META_MAX);
    if (!st && (v = ra_st_meta(f, "qkv_bias"))) st = parse_bool(&c->qkv_bias, "qkv_bias", v);
    if (!st && (v = ra_st_meta(f, "qk_scale"))) {
        c->has_qk_scale = 1;
        st = parse_float(&c->qk_scale, "qk_scale", v);
    }
    if (!st && (a == RA_ARCH_WINDOW_ATTENTION || a == RA_ARCH_WINDOW_ATTENTION_3D) &&
        (v = need(f, "window_size", &st)))
        st = parse_pair(c->window, "window_size", v, 1, 4096);
    if (!st && a == RA_ARCH_WINDOW_ATTENTION_3D) {
        if ((v = need(f, "num_frames_q", &st)))
            st = parse_int(&c->frames_q, "num_frames_q", v, 1, 4096);
        if (!st && (v = need(f, "num_frames_kv", &st)))
            st = parse_int(&c->frames_kv, "num_frames_kv", v, 1, 4096);
    }
    if (!st && a == RA_ARCH_SHAW_ATTENTION && (v = need(f, "max_relative_position", &st)))
        st = parse_int(&c->max_rel, "max_relative_position", v, 0, RA_META_MAX);
    return st;
}

/* ---- tensors ------------------------------------------------------------ */

/* What the configuration implies: name, shape, and where the F32 copy (and
 * later its gradient) goes: the same field of ra_attn_params and
 * ra_attn_grads, which list their pointers in the same order. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[2];
    size_t field;          /* offsetof(ra_attn_params, X) */
    size_t grad_field;     /* offsetof(ra_attn_grads, X)  */
    int optional;          /* shaw tables: either may be absent */
} tensor_spec;

static int spec_of(tensor_spec *s, const ra_attn_config *c, int64_t rows) {
    const int64_t C = c->dim, hd = c->dim / c->num_heads;
    int n = 0;
#define ADD(nm, nd, a, b, f, opt)                                                         \
    s[n++] = (tensor_spec){nm, nd, {a, b}, offsetof(ra_attn_params, f),                    \
                           offsetof(ra_attn_grads, f), opt}
    if (c->arch == RA_ARCH_WINDOW_ATTENTION_3D) {
        ADD("q.weight", 2, C, C, q_w, 0);
        if (c->qkv_bias) ADD("q.bias", 1, C, 0, q_b, 0);
        ADD("kv.weight", 2, 2 * C, C, kv_w, 0);
        if (c->qkv_bias) ADD("kv.bias", 1, 2 * C, 0, kv_b, 0);
    } else {
        ADD("qkv.weight", 2, 3 * C, C, qkv_w, 0);
        if (c->qkv_bias) ADD("qkv.bias", 1, 3 * C, 0, qkv_b, 0);
    }
    ADD("proj.weight", 2, C, C, proj_w, 0);
    ADD("proj.bias", 1, C, 0, proj_b, 0);
    if (c->arch == RA_ARCH_WINDOW_ATTENTION || c->arch == RA_ARCH_WINDOW_ATTENTION_3D)
        ADD("relative_position_bias_table", 2, rows, c->num_heads, table, 0);
    if (c->arch == RA_ARCH_SHAW_ATTENTION) {
        ADD("relative_keys", 2, 2 * (int64_t)c->max_rel + 1, hd, rel_k, 1);
        ADD("relative_values", 2, 2 * (int64_t)c->max_rel + 1, hd, rel_v, 1);
    }
#undef ADD
    return n;
}

static int is_float_dtype(ra_dtype d) {
    return d == RA_DTYPE_F32 || d == RA_DTYPE_F16 || d == RA_DTYPE_BF16 || d == RA_DTYPE_F64;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, ")");
}

static ra_status check_shape(const ra_st_tensor *t, int ndim, const int64_t *shape) {
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (ok) return RA_OK;
    char got[128], want[128];
    shape_str(got, sizeof got, t->ndim, t->shape);
    shape_str(want, sizeof want, ndim, shape);
    return ra_fail(RA_ERR_SHAPE, "tensor '%s' has shape %s, the configuration needs %s",
                   t->name, got, want);
}

/* A saved relative_position_index is a buffer, not a parameter: it must be
 * exactly what the configuration gives, or the file is inconsistent. */
static ra_status check_saved_index(const ra_st_tensor *t, const ra_attn_layer *l) {
    int64_t n1, n2;
    const int32_t *idx = ra_attn_layer_index(l, &n1, &n2, NULL);
    ra_status st = check_shape(t, 2, (int64_t[]){n1, n2});
    if (st) return st;
    if (is_float_dtype(t->dtype) || t->dtype == RA_DTYPE_BOOL)
        return ra_fail(RA_ERR_SHAPE, "relative_position_index must hold integers");
    int64_t *v = ra_alloc((size_t)t->numel, sizeof *v);
    if (!v) return ra_fail(RA_ERR_NOMEM, "relative_position_index: out of memory");
    st = ra_st_to_i64(v, t);
    for (int64_t e = 0; !st && e < t->numel; e++)
        if (v[e] != idx[e])
            st = ra_fail(RA_ERR_FORMAT, "relative_position_index differs from the computed "
                         "index at (%lld, %lld): %lld, expected %d", (long long)(e / n2),
                         (long long)(e % n2), (long long)v[e], idx[e]);
    ra_free(v);
    return st;
}

ra_status ra_model_from_file(ra_model **out, const ra_st_file *f) {
    if (!out || !f) return ra_fail(RA_ERR_ARG, "model: NULL argument");
    *out = NULL;
    ra_attn_config cfg;
    ra_status st = config_from_meta(&cfg, f);
    if (st) return st;

    /* validate the configuration (and learn the table size) before sizing
     * any tensor from it */
    int64_t rows = 0;
    if (cfg.arch == RA_ARCH_WINDOW_ATTENTION)
        st = ra_relpos_index_2d(NULL, cfg.window[0], cfg.window[1], &rows);
    else if (cfg.arch == RA_ARCH_WINDOW_ATTENTION_3D)
        st = ra_relpos_index_3d(NULL, cfg.frames_q, cfg.frames_kv, cfg.window[0],
                                cfg.window[1], &rows);
    if (st) {   /* say which metadata gave the index its size */
        char why[400];
        snprintf(why, sizeof why, "%s", ra_last_error());
        if (cfg.arch == RA_ARCH_WINDOW_ATTENTION)
            st = ra_fail(st, "metadata window_size = %d,%d: %s", cfg.window[0], cfg.window[1],
                         why);
        else
            st = ra_fail(st, "metadata num_frames_q = %d, num_frames_kv = %d, window_size = "
                         "%d,%d: %s", cfg.frames_q, cfg.frames_kv, cfg.window[0],
                         cfg.window[1], why);
    }
    if (!st && cfg.dim % cfg.num_heads)
        st = ra_fail(RA_ERR_ARG, "dim %d is not divisible by num_heads %d", cfg.dim,
                     cfg.num_heads);
    if (st) return st == RA_ERR_ARG ? RA_ERR_FORMAT : st;

    ra_model *m = calloc(1, sizeof *m);
    if (!m) return ra_fail(RA_ERR_NOMEM, "model: out of memory");
    m->cfg = cfg;
    ra_attn_params p = {0};
    tensor_spec spec[RA_MODEL_MAX_PARAMS];
    const int ns = spec_of(spec, &cfg, rows);

    /* every tensor of the file is expected, or the saved index */
    const ra_st_tensor *found[RA_MODEL_MAX_PARAMS] = {0}, *saved_index = NULL;
    for (int i = 0; i < ra_st_count(f) && !st; i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        int s = 0;
        while (s < ns && strcmp(spec[s].name, t->name) != 0) s++;
        if (s < ns) found[s] = t;
        else if (rows && strcmp(t->name, "relative_position_index") == 0) saved_index = t;
        else st = ra_fail(RA_ERR_FORMAT, "unexpected tensor '%.80s' for arch %s", t->name,
                          ra_arch_name(cfg.arch));
    }
    size_t total = 0;
    int shaw_tables = 0;
    for (int s = 0; s < ns && !st; s++) {
        const ra_st_tensor *t = found[s];
        if (!t) {
            if (!spec[s].optional)
                st = ra_fail(RA_ERR_FORMAT, "tensor '%s' is missing (arch %s)", spec[s].name,
                             ra_arch_name(cfg.arch));
            continue;
        }
        if (!is_float_dtype(t->dtype))
            st = ra_fail(RA_ERR_SHAPE, "tensor '%s' must be a float tensor", t->name);
        else
            st = check_shape(t, spec[s].ndim, spec[s].shape);
        total += (size_t)t->numel;
        shaw_tables += spec[s].optional;
    }
    if (!st && cfg.arch == RA_ARCH_SHAW_ATTENTION && shaw_tables == 0)
        st = ra_fail(RA_ERR_FORMAT, "shaw_attention needs relative_keys and/or relative_values");
    if (!st && !(m->weights = ra_alloc(total, sizeof(float))))
        st = ra_fail(RA_ERR_NOMEM, "model: out of memory for %zu weights", total);
    m->total = (int64_t)total;
    int64_t off = 0;
    for (int s = 0; s < ns && !st; s++) {
        const ra_st_tensor *t = found[s];
        if (!t) continue;
        st = ra_st_to_f32(m->weights + off, t);
        *(const float **)((char *)&p + spec[s].field) = m->weights + off;
        ra_param_info *pi = &m->params[m->nparams];
        *pi = (ra_param_info){.name = spec[s].name, .ndim = spec[s].ndim,
                              .offset = off, .numel = t->numel};
        memcpy(pi->shape, spec[s].shape, sizeof spec[s].shape);
        m->grad_field[m->nparams++] = spec[s].grad_field;
        off += t->numel;
    }
    if (!st) st = ra_attn_layer_create(&m->attn, &cfg, &p);
    if (!st && saved_index) st = check_saved_index(saved_index, m->attn);
    if (st) {
        ra_model_free(m);
        return st == RA_ERR_ARG ? RA_ERR_FORMAT : st;
    }
    *out = m;
    return RA_OK;
}

ra_status ra_model_load(ra_model **out, const char *path) {
    if (!out) return ra_fail(RA_ERR_ARG, "model: NULL argument");
    *out = NULL;
    ra_st_file *f;
    ra_status st = ra_st_open(&f, path);
    if (st) return st;
    st = ra_model_from_file(out, f);
    ra_st_close(f);
    return st;
}

void ra_model_free(ra_model *m) {
    if (!m) return;
    ra_attn_layer_free(m->attn);
    ra_free(m->weights);
    free(m);
}

ra_arch ra_model_arch(const ra_model *m) { return m ? m->cfg.arch : RA_ARCH_NONE; }

const ra_attn_layer *ra_model_attn(const ra_model *m) { return m ? m->attn : NULL; }

int ra_model_param_count(const ra_model *m) { return m ? m->nparams : 0; }

const ra_param_info *ra_model_param(const ra_model *m, int i) {
    return m && i >= 0 && i < m->nparams ? &m->params[i] : NULL;
}

int64_t ra_model_param_total(const ra_model *m) { return m ? m->total : 0; }

float *ra_model_weights(ra_model *m) { return m ? m->weights : NULL; }

void ra_model_attn_grads(const ra_model *m, float *flat, ra_attn_grads *g) {
    memset(g, 0, sizeof *g);
    for (int i = 0; m && flat && i < m->nparams; i++)
        *(float **)((char *)g + m->grad_field[i]) = flat + m->params[i].offset;
}
