/* test_swin3d.c - the 3-D window block (arch swin_block_3d) against PyTorch:
 * every case of nets3d.txt (tools/make_swin3d_fixtures.py: Video Swin self
 * blocks with and without shift, padding on every axis, clamped windows,
 * RSTT cross blocks D1=7/D2=4 and D1=3/D2=2) loads with ra_model_load,
 * detects its naming scheme, and gives PyTorch's y within rtol 1e-4 /
 * atol 1e-5 through ra_swin_block_3d_forward (batched, on one thread and
 * in place) and through ra_model_forward (one clip at a time, a cross
 * block's frames concatenated). Then variants of the fixture models,
 * written with the library's writer, must be refused with the right status
 * and a one-line reason naming the problem, and so must inputs that do not
 * fit.
 *
 *   test_swin3d FIXTURES_DIR */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "relattn.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

static const char *fixtures;
static char tmpdir[] = "/tmp/relattn_test_swin3d.XXXXXX";
static int nfiles;
static double worst_rel;
static char worst_case[256];

static void path_of(char *buf, size_t n, const char *name, const char *kind) {
    snprintf(buf, n, "%s/%s.%s.safetensors", fixtures, name, kind);
}

/* A tensor of a file as floats (malloc), or NULL. */
static float *tensor_f32(const ra_st_file *f, const char *name, const ra_st_tensor **out) {
    const ra_st_tensor *t = ra_st_find(f, name);
    if (out) *out = t;
    if (!t) return NULL;
    float *v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
    if (v && ra_st_to_f32(v, t) != RA_OK) {
        free(v);
        v = NULL;
    }
    return v;
}

static int contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && (hay[i] | 32) == (needle[i] | 32)) i++;
        if (i == n) return 1;
    }
    return n == 0;
}

static ra_model *load_case(const char *name) {
    char p[512];
    ra_model *m = NULL;
    path_of(p, sizeof p, name, "model");
    ra_status s = ra_model_load(&m, p);
    CHECK(s == RA_OK, "%s: load: %s", name, ra_last_error());
    return s == RA_OK ? m : NULL;
}

/* The inputs of a case: x (B, D, H, W, C) and, for a cross block, kv. */
typedef struct inputs {
    ra_st_file *f;
    float *x, *kv;
    int b, d, h, w, c, d2;
} inputs;

static int read_inputs(const char *name, inputs *in) {
    char p[512];
    memset(in, 0, sizeof *in);
    path_of(p, sizeof p, name, "input");
    if (ra_st_open(&in->f, p) != RA_OK) {
        CHECK(0, "%s: input: %s", name, ra_last_error());
        return 0;
    }
    const ra_st_tensor *tx, *tkv;
    in->x = tensor_f32(in->f, "x", &tx);
    in->kv = tensor_f32(in->f, "kv", &tkv);
    CHECK(in->x && tx->ndim == 5, "%s: input has no 5-D x", name);
    if (!in->x || tx->ndim != 5) return 0;
    in->b = (int)tx->shape[0], in->d = (int)tx->shape[1], in->h = (int)tx->shape[2];
    in->w = (int)tx->shape[3], in->c = (int)tx->shape[4];
    in->d2 = in->kv ? (int)tkv->shape[1] : 0;
    return 1;
}

static void free_inputs(inputs *in) {
    free(in->x);
    free(in->kv);
    ra_st_close(in->f);
}

static void report(const char *name, const char *how, const float *y, const float *e, long n) {
    double dmax = 0, emax = 0;
    for (long i = 0; i < n; i++) {
        const double d = fabs((double)y[i] - e[i]);
        if (d > dmax) dmax = d;
        if (fabs(e[i]) > emax) emax = fabs(e[i]);
    }
    const double rel = emax > 0 ? dmax / emax : dmax;
    printf("  %-26s %-14s max |y - torch| %.2e (%.2e of max |y|)\n", name, how, dmax, rel);
    if (rel > worst_rel) {
        worst_rel = rel;
        snprintf(worst_case, sizeof worst_case, "%.200s (%.40s)", name, how);
    }
}

/* ---- the fixture cases ---------------------------------------------------- */

static void run_case(const char *name) {
    ra_model *m = load_case(name);
    if (!m) return;
    char p[512];
    ra_st_file *ex = NULL;
    inputs in;
    path_of(p, sizeof p, name, "expected");
    ra_status s = ra_st_open(&ex, p);
    CHECK(s == RA_OK, "%s: expected: %s", name, ra_last_error());
    if (s || !read_inputs(name, &in)) {
        ra_st_close(ex);
        if (!s) free_inputs(&in);
        ra_model_free(m);
        return;
    }
    CHECK(ra_model_arch(m) == RA_ARCH_SWIN_BLOCK_3D, "%s: arch %d", name, (int)ra_model_arch(m));
    CHECK(ra_model_attn(m) == NULL, "%s: a block has no single attention layer", name);
    const char *scheme = ra_st_meta(ex, "scheme");
    CHECK(scheme && strcmp(ra_model_scheme(m), scheme) == 0, "%s: scheme %s, expected %s", name,
          ra_model_scheme(m), scheme ? scheme : "?");
    CHECK(ra_model_flops(m, in.h, in.w) > 0, "%s: no multiply-adds", name);

    const ra_st_tensor *te;
    float *e = tensor_f32(ex, "y", &te);
    const long ny = (long)in.b * in.d * in.h * in.w * in.c;
    CHECK(e && te->numel == ny, "%s: expected y has %lld values, not %ld", name,
          e ? (long long)te->numel : -1LL, ny);
    float *y = malloc((size_t)ny * sizeof *y);
    if (e && te->numel == ny && y) {
        /* batched, all threads */
        s = ra_swin_block_3d_forward(m, y, in.x, in.kv, in.b, in.d, in.h, in.w);
        CHECK(s == RA_OK, "%s: forward: %s", name, ra_last_error());
        if (!s) {
            CHECK_CLOSE(y, e, ny, 1e-4, 1e-5, name);
            report(name, "batch", y, e, ny);
        }
        /* one thread */
        const int nt = ra_threads_get();
        ra_threads_set(1);
        memset(y, 0, (size_t)ny * sizeof *y);
        s = ra_swin_block_3d_forward(m, y, in.x, in.kv, in.b, in.d, in.h, in.w);
        ra_threads_set(nt);
        CHECK(s == RA_OK, "%s: forward on one thread: %s", name, ra_last_error());
        if (!s) CHECK_CLOSE(y, e, ny, 1e-4, 1e-5, "one thread");
        /* in place: y is x */
        memcpy(y, in.x, (size_t)ny * sizeof *y);
        s = ra_swin_block_3d_forward(m, y, y, in.kv, in.b, in.d, in.h, in.w);
        CHECK(s == RA_OK, "%s: forward in place: %s", name, ra_last_error());
        if (!s) CHECK_CLOSE(y, e, ny, 1e-4, 1e-5, "in place");

        /* ra_model_forward, one clip at a time (frames concatenated) */
        const long clip = ny / in.b, kclip = (long)in.d2 * in.h * in.w * in.c;
        float *xc = malloc((size_t)(clip + kclip) * sizeof *xc);
        for (int b = 0; xc && b < in.b; b++) {
            memcpy(xc, in.x + b * clip, (size_t)clip * sizeof *xc);
            if (in.kv) memcpy(xc + clip, in.kv + b * kclip, (size_t)kclip * sizeof *xc);
            const int64_t shape[4] = {in.d + in.d2, in.h, in.w, in.c};
            float *yc = NULL;
            int nd = 0;
            int64_t ys[4] = {0};
            s = ra_model_forward(m, &yc, &nd, ys, xc, 4, shape);
            CHECK(s == RA_OK, "%s: ra_model_forward of clip %d: %s", name, b, ra_last_error());
            if (!s) {
                CHECK(nd == 4 && ys[0] == in.d && ys[1] == in.h && ys[2] == in.w &&
                      ys[3] == in.c, "%s: clip output (%lld, %lld, %lld, %lld), %d dims", name,
                      (long long)ys[0], (long long)ys[1], (long long)ys[2], (long long)ys[3], nd);
                CHECK_CLOSE(yc, e + b * clip, clip, 1e-4, 1e-5, "ra_model_forward clip");
                if (b == 0) report(name, "one clip", yc, e, clip);
            }
            free(yc);
        }
        free(xc);
    }
    free(y);
    free(e);
    free_inputs(&in);
    ra_st_close(ex);
    ra_model_free(m);
}

/* ---- variants of a model file --------------------------------------------- */

typedef struct edit {
    const char *drop;        /* leave this tensor out */
    const char *add;         /* add a tensor (F32 zeros, shape add_shape) */
    int add_ndim;
    int64_t add_shape[4];
    const char *grow;        /* write this tensor with axis 0 one longer */
    const char *poke;        /* set element poke_at of this tensor (F32 or I64) */
    int64_t poke_at;
    double poke_val;
    const char *as_float;    /* write this (integer) tensor as F32 */
    const char *key, *val;   /* set (val NULL: remove) a metadata key */
    const char *key2, *val2;
} edit;

static size_t elem_size(ra_dtype d) {
    switch (d) {
    case RA_DTYPE_F64: case RA_DTYPE_I64: return 8;
    case RA_DTYPE_F32: case RA_DTYPE_I32: return 4;
    case RA_DTYPE_F16: case RA_DTYPE_BF16: case RA_DTYPE_I16: return 2;
    default: return 1;
    }
}

static int write_variant(const char *name, const edit *e, char *out, size_t n) {
    char src[512];
    path_of(src, sizeof src, name, "model");
    snprintf(out, n, "%s/v%03d.safetensors", tmpdir, nfiles++);
    ra_st_file *f = NULL;
    ra_status s = ra_st_open(&f, src);
    ra_st_writer *w = s ? NULL : ra_st_writer_new();
    if (!s && !w) s = RA_ERR_NOMEM;
    for (int i = 0; !s && i < ra_st_count(f); i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        if (e->drop && strcmp(t->name, e->drop) == 0) continue;
        int64_t shape[RA_ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        size_t bytes = t->nbytes;
        if (e->grow && strcmp(t->name, e->grow) == 0) {
            bytes += t->shape[0] ? t->nbytes / (size_t)t->shape[0] : 0;
            shape[0]++;
        }
        unsigned char *d = calloc(bytes + 8, 1);
        if (!d) { s = RA_ERR_NOMEM; break; }
        memcpy(d, t->data, t->nbytes);
        if (e->poke && strcmp(t->name, e->poke) == 0 && e->poke_at < t->numel) {
            if (t->dtype == RA_DTYPE_F32) {
                float v = (float)e->poke_val;
                memcpy(d + e->poke_at * 4, &v, 4);
            } else if (t->dtype == RA_DTYPE_I64) {
                int64_t v = (int64_t)e->poke_val;
                memcpy(d + e->poke_at * 8, &v, 8);
            }
        }
        if (e->as_float && strcmp(t->name, e->as_float) == 0 && t->dtype == RA_DTYPE_I64) {
            float *v = calloc((size_t)t->numel + 1, sizeof *v);
            for (int64_t k = 0; v && k < t->numel; k++) {
                int64_t q;
                memcpy(&q, d + k * 8, 8);
                v[k] = (float)q;
            }
            s = v ? ra_st_writer_add(w, t->name, RA_DTYPE_F32, t->ndim, shape, v) : RA_ERR_NOMEM;
            free(v);
        } else {
            s = ra_st_writer_add(w, t->name, t->dtype, t->ndim, shape, d);
        }
        free(d);
    }
    if (!s && e->add) {
        size_t cnt = 1;
        for (int i = 0; i < e->add_ndim; i++) cnt *= (size_t)e->add_shape[i];
        void *z = calloc(cnt * elem_size(RA_DTYPE_F32) + 8, 1);
        s = z ? ra_st_writer_add(w, e->add, RA_DTYPE_F32, e->add_ndim, e->add_shape, z)
              : RA_ERR_NOMEM;
        free(z);
    }
    for (int i = 0; !s && i < ra_st_meta_count(f); i++) {
        const char *k = ra_st_meta_key(f, i);
        if ((e->key && strcmp(k, e->key) == 0) || (e->key2 && strcmp(k, e->key2) == 0)) continue;
        s = ra_st_writer_meta(w, k, ra_st_meta(f, k));
    }
    if (!s && e->key && e->val) s = ra_st_writer_meta(w, e->key, e->val);
    if (!s && e->key2 && e->val2) s = ra_st_writer_meta(w, e->key2, e->val2);
    if (!s) s = ra_st_writer_save(w, out);
    ra_st_writer_free(w);
    ra_st_close(f);
    CHECK(s == RA_OK, "writing a variant of %s: %d", name, (int)s);
    return s == RA_OK;
}

/* Load a variant both ways; expect `want` and, on failure, a one-line reason
 * containing `needle`. Returns the model (on success) or NULL. */
static ra_model *expect(const char *name, const edit *e, ra_status want, const char *needle,
                        const char *what) {
    char path[512];
    if (!write_variant(name, e, path, sizeof path)) return NULL;
    ra_model *m = (ra_model *)&m;
    ra_status s = ra_model_load(&m, path);
    char err[600];
    snprintf(err, sizeof err, "%s", ra_last_error());
    CHECK(s == want, "%s: status %d (%s), expected %d", what, (int)s, err, (int)want);
    if (s != RA_OK) {
        CHECK(m == NULL, "%s: *out not reset on failure", what);
        CHECK(err[0] && !strchr(err, '\n'), "%s: reason is not one line: '%s'", what, err);
        CHECK(contains_ci(err, needle), "%s: reason '%s' does not name '%s'", what, err, needle);
        m = NULL;
    }
    ra_st_file *f = NULL;
    if (ra_st_open(&f, path) == RA_OK) {
        ra_model *m2 = NULL;
        ra_status s2 = ra_model_from_file(&m2, f);
        CHECK(s2 == s, "%s: ra_model_from_file gives %d, ra_model_load %d", what, (int)s2, (int)s);
        ra_model_free(m2);
        ra_st_close(f);
    }
    unlink(path);
    return s == RA_OK ? m : NULL;
}

static void refusals(void) {
    /* S: self, q/kv, index, no shift_size key; Q: self, Video Swin's qkv,
     * index; X: cross D1=7 D2=4, index; X2: cross in the "D1,Wh,Ww" form */
    const char *S = "net3d_self_w233", *Q = "net3d_self_shift_qkv", *X = "net3d_cross_d7d4",
               *X2 = "net3d_cross_d3d2";
    ra_model *m;

    /* missing tensors; buffers may be absent */
    expect(S, &(edit){.drop = "attn.kv.weight"}, RA_ERR_FORMAT, "attn.kv.weight", "missing kv");
    expect(X, &(edit){.drop = "norm_kv.bias"}, RA_ERR_FORMAT, "norm_kv.bias", "missing norm_kv");
    expect(Q, &(edit){.drop = "attn.qkv.bias"}, RA_ERR_FORMAT, "attn.qkv.bias", "missing qkv bias");
    expect(S, &(edit){.drop = "mlp.fc2.weight"}, RA_ERR_FORMAT, "mlp.fc2.weight", "missing fc2");
    m = expect(Q, &(edit){.drop = "attn.relative_position_index"}, RA_OK, "", "no index buffer");
    ra_model_free(m);

    /* unexpected tensors */
    expect(S, &(edit){.add = "attn.qkv.weight", .add_ndim = 2, .add_shape = {48, 16}},
           RA_ERR_FORMAT, "unexpected tensor", "both namings");
    expect(S, &(edit){.add = "norm_kv.weight", .add_ndim = 1, .add_shape = {16}},
           RA_ERR_FORMAT, "norm_kv.weight", "norm_kv in a self block");
    expect(Q, &(edit){.add = "attn_mask", .add_ndim = 3, .add_shape = {8, 18, 18}},
           RA_ERR_FORMAT, "attn_mask", "an attn_mask");
    expect(X, &(edit){.add = "attn.qkv.weight", .add_ndim = 2, .add_shape = {48, 16}},
           RA_ERR_FORMAT, "attn.qkv", "fused qkv in a cross block");
    expect(S, &(edit){.add = "attn.relative_position_index.x", .add_ndim = 1,
                      .add_shape = {3}},
           RA_ERR_FORMAT, "attn.relative_position_index.x", "a name that only starts right");

    /* wrong shapes and buffers */
    expect(X, &(edit){.grow = "attn.relative_position_bias_table"}, RA_ERR_SHAPE,
           "attn.relative_position_bias_table", "table shape");
    expect(Q, &(edit){.grow = "attn.qkv.weight"}, RA_ERR_SHAPE, "attn.qkv.weight", "qkv shape");
    expect(X, &(edit){.grow = "norm_kv.weight"}, RA_ERR_SHAPE, "norm_kv.weight", "norm_kv shape");
    expect(Q, &(edit){.grow = "attn.relative_position_index"}, RA_ERR_SHAPE,
           "relative_position_index", "index shape");
    expect(X, &(edit){.poke = "attn.relative_position_index", .poke_at = 17, .poke_val = 0},
           RA_ERR_FORMAT, "relative_position_index", "cross: mismatched index");
    expect(Q, &(edit){.poke = "attn.relative_position_index", .poke_at = 5, .poke_val = 3},
           RA_ERR_FORMAT, "relative_position_index", "self: mismatched index");
    expect(S, &(edit){.as_float = "attn.relative_position_index"}, RA_ERR_SHAPE,
           "integers", "index stored as floats");

    /* metadata */
    expect(S, &(edit){.key = "window_size", .val = "3,3"}, RA_ERR_FORMAT, "window_size",
           "self block with a 2-D window");
    expect(S, &(edit){.key = "window_size", .val = "2,3,3,3"}, RA_ERR_FORMAT, "window_size",
           "four window values");
    expect(S, &(edit){.key = "window_size", .val = NULL}, RA_ERR_FORMAT, "window_size",
           "no window_size");
    expect(S, &(edit){.key = "window_size", .val = "64,64,64"}, RA_ERR_FORMAT, "tokens",
           "window with too many tokens");
    expect(Q, &(edit){.key = "shift_size", .val = "2,1,1"}, RA_ERR_FORMAT, "shift_size",
           "frame shift >= window");
    expect(Q, &(edit){.key = "shift_size", .val = "1,1"}, RA_ERR_FORMAT, "shift_size",
           "self block with a 2-D shift");
    expect(Q, &(edit){.key = "shift_size", .val = "0,0,-1"}, RA_ERR_FORMAT, "shift_size",
           "negative shift");
    expect(X, &(edit){.key = "shift_size", .val = "1,1,1"}, RA_ERR_FORMAT, "shift_size",
           "cross block with a frame shift");
    expect(X, &(edit){.key = "window_size", .val = "4,2,2"}, RA_ERR_FORMAT, "window_size",
           "cross window that does not hold all query frames");
    m = expect(X2, &(edit){.key = "window_size", .val = "3,3", .key2 = "shift_size",
                           .val2 = "1,1"}, RA_OK, "", "cross: \"Wh,Ww\" form of the same");
    ra_model_free(m);
    expect(X, &(edit){.key = "num_frames_kv", .val = NULL}, RA_ERR_FORMAT, "num_frames_kv",
           "num_frames_q without num_frames_kv");
    expect(X, &(edit){.key = "num_frames_kv", .val = "3"}, RA_ERR_FORMAT, "num_frames_kv",
           "D2 that is not the strided frame count");
    expect(X, &(edit){.key = "num_frames_q", .val = "0"}, RA_ERR_FORMAT, "num_frames_q",
           "zero query frames");
    expect(S, &(edit){.key = "num_heads", .val = "3"}, RA_ERR_FORMAT, "num_heads",
           "heads do not divide dim");
    expect(S, &(edit){.key = "dim", .val = "0"}, RA_ERR_FORMAT, "dim", "zero dim");
    expect(S, &(edit){.key = "mlp_ratio", .val = "-1"}, RA_ERR_FORMAT, "mlp_ratio",
           "negative mlp_ratio");
    expect(S, &(edit){.key = "mlp_ratio", .val = "2"}, RA_ERR_SHAPE, "mlp.fc1.weight",
           "mlp_ratio does not fit the tensors");
    expect(S, &(edit){.key = "qkv_bias", .val = "false"}, RA_ERR_FORMAT, "bias",
           "qkv_bias false but the file has biases");
    expect(S, &(edit){.key = "qk_scale", .val = "abc"}, RA_ERR_FORMAT, "qk_scale", "qk_scale");
    expect(S, &(edit){.key = "arch", .val = "swin_block"}, RA_ERR_FORMAT, "input_resolution",
           "a 3-D block file called swin_block");
    /* Video Swin's default qkv_bias (true) and qk_scale (absent) */
    m = expect(Q, &(edit){.key = "qkv_bias", .val = NULL}, RA_OK, "", "qkv_bias absent");
    ra_model_free(m);
}

/* ---- inputs that do not fit ------------------------------------------------ */

static void expect_call(ra_status s, ra_status want, const char *needle, const char *what) {
    const char *err = ra_last_error();
    CHECK(s == want, "%s: status %d (%s), expected %d", what, (int)s, err, (int)want);
    if (s != RA_OK) {
        CHECK(err[0] && !strchr(err, '\n'), "%s: reason is not one line: '%s'", what, err);
        CHECK(contains_ci(err, needle), "%s: reason '%s' does not name '%s'", what, err, needle);
    }
}

static void bad_inputs(void) {
    ra_model *self = load_case("net3d_self_w233"), *cross = load_case("net3d_cross_d7d4");
    ra_model *blk = load_case("net_block_w4");   /* a 2-D swin_block */
    if (!self || !cross || !blk) goto done;
    const int C = 16;
    float *buf = calloc((size_t)2 * 11 * 6 * 6 * C, sizeof *buf);
    float *out = calloc((size_t)2 * 11 * 6 * 6 * C, sizeof *out);
    if (!buf || !out) goto done2;

    expect_call(ra_swin_block_3d_forward(NULL, out, buf, NULL, 1, 2, 6, 6), RA_ERR_ARG,
                "swin_block_3d", "NULL model");
    expect_call(ra_swin_block_3d_forward(blk, out, buf, NULL, 1, 2, 8, 8), RA_ERR_ARG,
                "swin_block_3d", "a swin_block model");
    expect_call(ra_swin_block_3d_forward(self, NULL, buf, NULL, 1, 2, 6, 6), RA_ERR_ARG, "NULL",
                "NULL y");
    expect_call(ra_swin_block_3d_forward(self, out, buf, buf, 1, 2, 6, 6), RA_ERR_ARG, "kv",
                "kv for a self block");
    expect_call(ra_swin_block_3d_forward(cross, out, buf, NULL, 1, 7, 4, 4), RA_ERR_ARG, "kv",
                "cross block without kv");
    expect_call(ra_swin_block_3d_forward(cross, out, buf, buf, 1, 6, 4, 4), RA_ERR_SHAPE,
                "num_frames_q", "cross block with 6 query frames");
    expect_call(ra_swin_block_3d_forward(self, out, buf, NULL, 0, 2, 6, 6), RA_ERR_SHAPE, "clips",
                "no clips");
    expect_call(ra_swin_block_3d_forward(self, out, buf, NULL, 1, 2, 0, 6), RA_ERR_SHAPE, "clips",
                "zero rows");
    expect_call(ra_swin_block_3d_forward(self, out, buf, NULL, 1, 1 << 17, 1, 1), RA_ERR_SHAPE,
                "clips", "too many frames");

    float *y = NULL;
    int nd = 0;
    int64_t ys[4];
    expect_call(ra_model_forward(self, &y, &nd, ys, buf, 5, (int64_t[]){1, 2, 6, 6, C}),
                RA_ERR_SHAPE, "ra_swin_block_3d_forward", "5-D x through ra_model_forward");
    expect_call(ra_model_forward(self, &y, &nd, ys, buf, 3, (int64_t[]){2, 36, C}),
                RA_ERR_SHAPE, "(D, H, W, C)", "3-D x");
    expect_call(ra_model_forward(self, &y, &nd, ys, buf, 4, (int64_t[]){2, 6, 6, C + 1}),
                RA_ERR_SHAPE, "channels", "wrong channels");
    expect_call(ra_model_forward(cross, &y, &nd, ys, buf, 4, (int64_t[]){7, 4, 4, C}),
                RA_ERR_SHAPE, "D1 + D2", "cross clip without its key/value frames");
    expect_call(ra_model_forward(self, &y, &nd, ys, buf, 4, (int64_t[]){0, 6, 6, C}),
                RA_ERR_SHAPE, "clip", "empty clip");
    CHECK(y == NULL, "y set on failure");

    /* a clip of another size than any fixture: odd sizes, one frame */
    expect_call(ra_model_forward(self, &y, &nd, ys, buf, 4, (int64_t[]){1, 5, 11, C}), RA_OK, "",
                "a 1x5x11 clip");
    if (y) {
        int finite = nd == 4 && ys[0] == 1 && ys[1] == 5 && ys[2] == 11;
        for (long i = 0; finite && i < 5 * 11 * C; i++) finite = isfinite(y[i]);
        CHECK(finite, "1x5x11 clip: output shape or values");
    }
    free(y);
done2:
    free(buf);
    free(out);
done:
    ra_model_free(self);
    ra_model_free(cross);
    ra_model_free(blk);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_swin3d FIXTURES_DIR\n");
        return 2;
    }
    fixtures = argv[1];
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    CHECK(ra_arch_from_name("swin_block_3d") == RA_ARCH_SWIN_BLOCK_3D, "arch name lookup");
    CHECK(ra_arch_name(RA_ARCH_SWIN_BLOCK_3D) &&
          strcmp(ra_arch_name(RA_ARCH_SWIN_BLOCK_3D), "swin_block_3d") == 0, "arch name");
    int last = RA_ARCH_SWIN_BLOCK_3D;   /* every arch after it has a name that round-trips */
    while (ra_arch_name((ra_arch)(last + 1)) && last < 1000) {
        last++;
        CHECK(ra_arch_from_name(ra_arch_name((ra_arch)last)) == (ra_arch)last, "arch %d", last);
    }
    CHECK(last < 1000 && ra_arch_name((ra_arch)(last + 1)) == NULL, "no arch past the last");

    char p[512];
    snprintf(p, sizeof p, "%s/nets3d.txt", fixtures);
    FILE *f = fopen(p, "r");
    CHECK(f != NULL, "cannot open %s", p);
    int ncases = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        run_case(line);
        ncases++;
    }
    if (f) fclose(f);
    CHECK(ncases >= 9, "only %d cases in nets3d.txt", ncases);
    printf("  worst: %.2e of max |y| (%s)\n", worst_rel, worst_case);

    refusals();
    bad_inputs();
    rmdir(tmpdir);
    return check_done();
}
