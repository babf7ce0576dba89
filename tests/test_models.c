/* test_models.c - whole models against PyTorch: every case of nets.txt
 * (tools/make_model_fixtures.py: Swin blocks and networks in the official,
 * timm and torchvision naming) loads with ra_model_load, detects its naming
 * scheme, and ra_model_forward gives PyTorch's y within rtol 1e-4 /
 * atol 1e-5. Then variants of the fixture models, written with the
 * library's writer, must be refused with the right status and a one-line
 * reason naming the problem: missing, unexpected and misshapen tensors,
 * inconsistent metadata, saved buffers that differ from the computed ones,
 * inputs of the wrong shape.
 *
 *   test_models FIXTURES_DIR */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "relattn.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static const char *fixtures;
static char tmpdir[] = "/tmp/relattn_test_models.XXXXXX";
static int nfiles;
static double worst_rel;   /* over all cases: max |y - e| / max |e| */
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

/* Run a loaded model on the input of case `name` into *y (malloc'ed by the
 * library). */
static ra_status run_model(const ra_model *m, const char *name, float **y, int *ndim,
                           int64_t shape[4]) {
    char p[512];
    path_of(p, sizeof p, name, "input");
    ra_st_file *in = NULL;
    ra_status s = ra_st_open(&in, p);
    CHECK(s == RA_OK, "%s: input: %s", name, ra_last_error());
    if (s) return s;
    const ra_st_tensor *tx;
    float *x = tensor_f32(in, "x", &tx);
    CHECK(x != NULL, "%s: input has no float x", name);
    s = x ? ra_model_forward(m, y, ndim, shape, x, tx->ndim, tx->shape) : RA_ERR_ARG;
    free(x);
    ra_st_close(in);
    return s;
}

/* ---- the fixture cases ---------------------------------------------------- */

static void run_case(const char *name) {
    char p[512];
    ra_model *m = NULL;
    path_of(p, sizeof p, name, "model");
    ra_status s = ra_model_load(&m, p);
    CHECK(s == RA_OK, "%s: load: %s", name, ra_last_error());
    if (s) return;
    ra_st_file *ex = NULL;
    path_of(p, sizeof p, name, "expected");
    s = ra_st_open(&ex, p);
    CHECK(s == RA_OK, "%s: expected: %s", name, ra_last_error());
    if (s) {
        ra_model_free(m);
        return;
    }
    const char *scheme = ra_st_meta(ex, "scheme");
    CHECK(scheme && strcmp(ra_model_scheme(m), scheme) == 0, "%s: scheme %s, expected %s", name,
          ra_model_scheme(m), scheme ? scheme : "?");
    CHECK(ra_model_attn(m) == NULL, "%s: a network has no single attention layer", name);
    const ra_arch a = ra_model_arch(m);
    CHECK(a == RA_ARCH_SWIN || a == RA_ARCH_SWIN_BLOCK, "%s: arch %d", name, (int)a);

    const ra_st_tensor *te;
    float *e = tensor_f32(ex, "y", &te);
    float *y = NULL;
    int nd = 0;
    int64_t shape[4] = {0};
    s = run_model(m, name, &y, &nd, shape);
    CHECK(s == RA_OK, "%s: forward: %s", name, ra_last_error());
    if (!s && e) {
        int same = nd == te->ndim;
        for (int i = 0; same && i < nd; i++) same = shape[i] == te->shape[i];
        CHECK(same, "%s: output has %d dims (%lld, %lld, ...), expected %d", name, nd,
              (long long)shape[0], (long long)shape[1], te->ndim);
        if (same) {
            CHECK_CLOSE(y, e, (long)te->numel, 1e-4, 1e-5, name);
            double dmax = 0, emax = 0;
            for (int64_t i = 0; i < te->numel; i++) {
                double d = fabs((double)y[i] - e[i]);
                if (d > dmax) dmax = d;
                if (fabs(e[i]) > emax) emax = fabs(e[i]);
            }
            const double rel = emax > 0 ? dmax / emax : dmax;
            printf("  %-28s %-11s max |y - torch| %.2e (%.2e of max |y|)\n", name,
                   ra_model_scheme(m), dmax, rel);
            if (rel > worst_rel) {
                worst_rel = rel;
                snprintf(worst_case, sizeof worst_case, "%s", name);
            }
        }
        /* one thread gives the same numbers (within the same tolerance) */
        float *y1 = NULL;
        int nd1;
        int64_t sh1[4];
        const int nt = ra_threads_get();
        ra_threads_set(1);
        s = run_model(m, name, &y1, &nd1, sh1);
        ra_threads_set(nt);
        CHECK(s == RA_OK, "%s: forward on one thread: %s", name, ra_last_error());
        if (!s && same) CHECK_CLOSE(y1, e, (long)te->numel, 1e-4, 1e-5, "one thread");
        free(y1);
    }
    free(y);
    free(e);
    ra_st_close(ex);
    ra_model_free(m);
}

/* ---- variants of a model file --------------------------------------------- */

typedef struct edit {
    const char *drop;        /* leave this tensor out */
    const char *add;         /* add a tensor (F32 zeros, shape add_shape) */
    int add_ndim;
    int64_t add_shape[4];
    ra_dtype add_dtype;      /* 0: F32 */
    const char *grow;        /* write this tensor with axis 0 one longer */
    const char *poke;        /* set element poke_at of this tensor (F32 or I64) */
    int64_t poke_at;
    double poke_val;
    const char *key, *val;   /* set (val NULL: remove) a metadata key */
    const char *key2, *val2;
    int timm_to_official;    /* rename timm's names to the official ones */
} edit;

static void rename_official(char *out, size_t n, const char *name) {
    int s, used = 0;
    if (sscanf(name, "layers.%d.downsample.%n", &s, &used) == 1 && used > 0)
        snprintf(out, n, "layers.%d.downsample.%s", s - 1, name + used);
    else if (strncmp(name, "head.fc.", 8) == 0)
        snprintf(out, n, "head.%s", name + 8);
    else
        snprintf(out, n, "%s", name);
}

static size_t elem_size(ra_dtype d) {
    switch (d) {
    case RA_DTYPE_F64: case RA_DTYPE_I64: return 8;
    case RA_DTYPE_F32: case RA_DTYPE_I32: return 4;
    case RA_DTYPE_F16: case RA_DTYPE_BF16: case RA_DTYPE_I16: return 2;
    default: return 1;
    }
}

/* Write case `name`'s model with edit e applied; the path goes into out. */
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
        char nm[256];
        if (e->timm_to_official) rename_official(nm, sizeof nm, t->name);
        else snprintf(nm, sizeof nm, "%s", t->name);
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
        s = ra_st_writer_add(w, nm, t->dtype, t->ndim, shape, d);
        free(d);
    }
    if (!s && e->add) {
        const ra_dtype dt = e->add_dtype ? e->add_dtype : RA_DTYPE_F32;
        size_t cnt = 1;
        for (int i = 0; i < e->add_ndim; i++) cnt *= (size_t)e->add_shape[i];
        void *z = calloc(cnt * elem_size(dt) + 8, 1);
        s = z ? ra_st_writer_add(w, e->add, dt, e->add_ndim, e->add_shape, z) : RA_ERR_NOMEM;
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
    /* the in-memory route agrees */
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
    const char *O = "net_swin_official", *T = "net_swin_timm", *V = "net_swin_tv",
               *BS = "net_block_w4_shift", *BT = "net_block_tv_5x9_w7";
    ra_model *m;

    /* missing tensors */
    expect(O, &(edit){.drop = "layers.0.blocks.1.mlp.fc2.bias"}, RA_ERR_FORMAT,
           "layers.0.blocks.1.mlp.fc2.bias", "missing block tensor");
    expect(O, &(edit){.drop = "layers.0.downsample.reduction.weight"}, RA_ERR_FORMAT,
           "layers.0.downsample.reduction.weight", "missing patch merging");
    expect(O, &(edit){.drop = "head.weight"}, RA_ERR_FORMAT, "head.weight", "missing head");
    expect(T, &(edit){.drop = "head.fc.bias"}, RA_ERR_FORMAT, "head.bias", "timm: missing head");
    expect(V, &(edit){.drop = "features.1.1.mlp.3.weight"}, RA_ERR_FORMAT,
           "layers.0.blocks.1.mlp.fc2.weight", "torchvision: missing mlp.3");
    expect(BS, &(edit){.drop = "attn.relative_position_bias_table"}, RA_ERR_FORMAT,
           "attn.relative_position_bias_table", "block: missing table");
    /* a buffer may be absent */
    m = expect(BS, &(edit){.drop = "attn_mask"}, RA_OK, "", "block without its attn_mask");
    ra_model_free(m);
    m = expect(O, &(edit){.drop = "layers.1.blocks.1.attn.relative_position_index"}, RA_OK, "",
               "network without one index");
    ra_model_free(m);

    /* unexpected tensors */
    expect(O, &(edit){.add = "layers.0.blocks.0.attn.extra", .add_ndim = 1, .add_shape = {3}},
           RA_ERR_FORMAT, "layers.0.blocks.0.attn.extra", "unexpected tensor");
    expect(O, &(edit){.add = "layers.0.blocks.2.norm1.weight", .add_ndim = 1, .add_shape = {16}},
           RA_ERR_FORMAT, "layers.0.blocks.2.norm1.weight", "a block too many");
    expect(O, &(edit){.add = "layers.2.blocks.0.attn.relative_position_index", .add_ndim = 2,
                      .add_shape = {16, 16}, .add_dtype = RA_DTYPE_I64},
           RA_ERR_FORMAT, "layers.2.blocks.0", "buffer of a stage that does not exist");
    expect(O, &(edit){.add = "layers.0.blocks.0.attn_mask", .add_ndim = 3,
                      .add_shape = {4, 16, 16}},
           RA_ERR_FORMAT, "layers.0.blocks.0.attn_mask", "attn_mask of a block without shift");
    expect(O, &(edit){.add = "layers.1.downsample.norm.weight", .add_ndim = 1,
                      .add_shape = {128}},
           RA_ERR_FORMAT, "layers.1.downsample", "patch merging after the last stage");
    expect(O, &(edit){.add = "head.fc.weight", .add_ndim = 2, .add_shape = {10, 32}},
           RA_ERR_FORMAT, "head.fc.weight", "timm head in an official file");
    expect(T, &(edit){.add = "layers.0.downsample.norm.weight", .add_ndim = 1,
                      .add_shape = {32}},
           RA_ERR_FORMAT, "layers.0.downsample.norm.weight", "timm: downsample of stage 0");
    expect(V, &(edit){.add = "layers.0.blocks.0.norm1.weight", .add_ndim = 1, .add_shape = {8}},
           RA_ERR_FORMAT, "layers.0.blocks.0.norm1.weight", "official name in torchvision file");
    expect(V, &(edit){.add = "features.1.0.mlp.fc1.weight", .add_ndim = 2, .add_shape = {32, 8}},
           RA_ERR_FORMAT, "features.1.0.mlp.fc1.weight", "torchvision: mlp.fc1");
    expect(BT, &(edit){.add = "attn_mask", .add_ndim = 3, .add_shape = {2, 49, 49}},
           RA_ERR_FORMAT, "attn_mask", "torchvision block: attn_mask");
    expect(BS, &(edit){.add = "mlp.fc3.weight", .add_ndim = 2, .add_shape = {4, 4}},
           RA_ERR_FORMAT, "mlp.fc3.weight", "block: unexpected tensor");
    expect(O, &(edit){.add = "layers.01.blocks.0.norm1.weight", .add_ndim = 1,
                      .add_shape = {16}},
           RA_ERR_FORMAT, "layers.01", "index with a leading zero");

    expect(O, &(edit){.add = "module.head.weight", .add_ndim = 2, .add_shape = {10, 32}},
           RA_ERR_FORMAT, "module.head.weight", "a prefixed name");
    expect(V, &(edit){.add = "features.9.0.norm1.weight", .add_ndim = 1, .add_shape = {8}},
           RA_ERR_FORMAT, "features.9.0.norm1.weight", "torchvision: a stage too many");
    expect(V, &(edit){.add = "features.0.1.weight", .add_ndim = 1, .add_shape = {8}},
           RA_ERR_FORMAT, "features.0.1.weight", "torchvision: the Permute has no weights");

    /* wrong shapes and dtypes */
    expect(O, &(edit){.grow = "layers.1.blocks.0.attn.relative_position_bias_table"},
           RA_ERR_SHAPE, "layers.1.blocks.0.attn.relative_position_bias_table", "table shape");
    expect(V, &(edit){.grow = "features.3.0.attn.relative_position_bias_table"}, RA_ERR_SHAPE,
           "features.3.0.attn.relative_position_bias_table", "torchvision table shape");
    expect(O, &(edit){.grow = "patch_embed.proj.weight"}, RA_ERR_SHAPE,
           "patch_embed.proj.weight", "conv shape");
    expect(BS, &(edit){.grow = "attn_mask"}, RA_ERR_SHAPE, "attn_mask", "attn_mask shape");
    expect(BS, &(edit){.grow = "attn.relative_position_index"}, RA_ERR_SHAPE,
           "relative_position_index", "index shape");
    expect(O, &(edit){.key = "embed_dim", .val = "24"}, RA_ERR_SHAPE, "patch_embed.proj.weight",
           "embed_dim does not fit the tensors");

    /* saved buffers that differ from the computed ones */
    expect(BS, &(edit){.poke = "attn_mask", .poke_at = 20, .poke_val = -100.0}, RA_ERR_FORMAT,
           "attn_mask", "mismatched attn_mask");
    expect(BS, &(edit){.poke = "attn_mask", .poke_at = 3 * 256 + 17, .poke_val = 0.5},
           RA_ERR_FORMAT, "attn_mask", "attn_mask with another value");
    expect(BS, &(edit){.poke = "attn.relative_position_index", .poke_at = 5, .poke_val = 3},
           RA_ERR_FORMAT, "relative_position_index", "mismatched index");
    expect(O, &(edit){.poke = "layers.0.blocks.1.attn_mask", .poke_at = 0, .poke_val = -100.0},
           RA_ERR_FORMAT, "layers.0.blocks.1.attn_mask", "network: mismatched attn_mask");
    expect(V, &(edit){.poke = "features.1.0.attn.relative_position_index", .poke_at = 7,
                      .poke_val = 0},
           RA_ERR_FORMAT, "relative_position_index", "torchvision: mismatched index");

    /* metadata */
    expect(O, &(edit){.key = "depths", .val = "2,2,2"}, RA_ERR_FORMAT, "num_heads",
           "depths and num_heads of different lengths");
    expect(O, &(edit){.key = "depths", .val = "2,x"}, RA_ERR_FORMAT, "depths", "depths not ints");
    expect(O, &(edit){.key = "depths", .val = ""}, RA_ERR_FORMAT, "depths", "empty depths");
    expect(O, &(edit){.key = "depths", .val = "2,-1"}, RA_ERR_FORMAT, "depths",
           "negative depth");
    expect(O, &(edit){.key = "num_heads", .val = "1,3"}, RA_ERR_FORMAT, "num_heads",
           "heads do not divide the stage's dim");
    expect(O, &(edit){.key = "num_heads", .val = "1,0"}, RA_ERR_FORMAT, "num_heads",
           "zero heads");
    expect(O, &(edit){.key = "depths", .val = "1,1,1,1,1,1,1,1,1",
                      .key2 = "num_heads", .val2 = "1,1,1,1,1,1,1,1,1"},
           RA_ERR_FORMAT, "depths", "too many stages");
    expect(O, &(edit){.key = "depths", .val = NULL}, RA_ERR_FORMAT, "depths", "no depths");
    expect(O, &(edit){.key = "mlp_ratio", .val = "-4"}, RA_ERR_FORMAT, "mlp_ratio",
           "negative mlp_ratio");
    expect(O, &(edit){.key = "patch_size", .val = "4,2"}, RA_ERR_FORMAT, "patch_size",
           "non-square patch");
    expect(O, &(edit){.key = "img_size", .val = "4"}, RA_ERR_FORMAT, "stage 1",
           "img_size leaves no map for stage 1");
    expect(BS, &(edit){.key = "shift_size", .val = "4"}, RA_ERR_FORMAT, "shift_size",
           "shift_size >= window");
    expect(BS, &(edit){.key = "shift_size", .val = NULL}, RA_ERR_FORMAT, "shift_size",
           "no shift_size");
    expect(BS, &(edit){.key = "window_size", .val = "100", .key2 = "input_resolution",
                       .val2 = "200,200"},
           RA_ERR_FORMAT, "window", "window with too many tokens");
    expect(BS, &(edit){.key = "qkv_bias", .val = "false"}, RA_ERR_FORMAT, "attn.qkv.bias",
           "qkv_bias false but the file has the bias");
    expect(BS, &(edit){.key = "input_resolution", .val = "8,x"}, RA_ERR_FORMAT,
           "input_resolution", "bad input_resolution");
    expect("net_swin_official_w7", &(edit){.key = "arch", .val = "swin_block"}, RA_ERR_FORMAT,
           "dim", "a network file called swin_block");
    expect(O, &(edit){.drop = NULL, .key = "patch_norm", .val = "false"}, RA_ERR_FORMAT,
           "patch_embed.norm", "patch_norm false, the file has the norm");
    expect(O, &(edit){.key = "ape", .val = "true"}, RA_ERR_FORMAT, "absolute_pos_embed",
           "ape true without the embedding");

    /* timm's names mapped back to the official ones: the same model */
    m = expect(T, &(edit){.timm_to_official = 1}, RA_OK, "", "timm file renamed to official");
    if (m) {
        CHECK(strcmp(ra_model_scheme(m), "official") == 0, "renamed timm: scheme %s",
              ra_model_scheme(m));
        ra_model *mt = NULL;
        char p[512];
        path_of(p, sizeof p, T, "model");
        CHECK(ra_model_load(&mt, p) == RA_OK, "timm: %s", ra_last_error());
        float *y1 = NULL, *y2 = NULL;
        int n1, n2;
        int64_t s1[4], s2[4];
        if (mt && run_model(m, T, &y1, &n1, s1) == RA_OK && run_model(mt, T, &y2, &n2, s2) == RA_OK)
            CHECK(n1 == 2 && n2 == 2 && s1[1] == s2[1] &&
                      memcmp(y1, y2, (size_t)(s1[0] * s1[1]) * sizeof *y1) == 0,
                  "timm and official names give different logits");
        /* canonical names in the parameter list */
        int found = 0;
        for (int i = 0; mt && i < ra_model_param_count(mt); i++)
            found += strcmp(ra_model_param(mt, i)->name, "layers.1.downsample.norm.weight") == 0;
        CHECK(found == 1, "timm: parameters are listed by their official names");
        free(y1), free(y2);
        ra_model_free(mt);
        ra_model_free(m);
    }
}

/* Multiply-adds as the official flops() methods count them (values from
 * microsoft/Swin-Transformer's SwinTransformer(img_size=56, patch_size=4,
 * embed_dim=12, depths=[2, 2], num_heads=[2, 3], window_size=7,
 * num_classes=10).flops() and SwinTransformerBlock(16, (8, 8), 2, 4, 2)
 * .flops(); Swin-T at 224 gives 4494405120 the same way). */
static void flops(void) {
    static const struct { const char *name; int h, w; int64_t want; } c[] = {
        {"net_swin_official_w7", 56, 56, 2235816},
        {"net_block_w4_shift", 8, 8, 231424},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char p[512];
        ra_model *m = NULL;
        path_of(p, sizeof p, c[i].name, "model");
        if (ra_model_load(&m, p) != RA_OK) continue;
        const int64_t f = ra_model_flops(m, c[i].h, c[i].w);
        CHECK(f == c[i].want, "%s: %lld multiply-adds, the official flops() gives %lld",
              c[i].name, (long long)f, (long long)c[i].want);
        ra_model_free(m);
    }
}

/* Inputs of the wrong shape: RA_ERR_SHAPE, nothing allocated. */
static void bad_inputs(void) {
    char p[512];
    ra_model *net = NULL, *blk = NULL, *ape = NULL, *tv = NULL;
    path_of(p, sizeof p, "net_swin_official", "model");
    CHECK(ra_model_load(&net, p) == RA_OK, "%s", ra_last_error());
    path_of(p, sizeof p, "net_block_w4", "model");
    CHECK(ra_model_load(&blk, p) == RA_OK, "%s", ra_last_error());
    path_of(p, sizeof p, "net_swin_ape_nohead", "model");
    CHECK(ra_model_load(&ape, p) == RA_OK, "%s", ra_last_error());
    path_of(p, sizeof p, "net_swin_tv", "model");
    CHECK(ra_model_load(&tv, p) == RA_OK, "%s", ra_last_error());
    if (!net || !blk || !ape || !tv) goto done;
    static float x[2 * 3 * 40 * 40];
    float *y = (float *)&y;
    int nd;
    int64_t sh[4];
    struct { const ra_model *m; int nd; int64_t shape[4]; const char *what; } cases[] = {
        {net, 4, {2, 4, 32, 32}, "4 input channels for 3"},
        {net, 3, {2, 3, 32}, "3-D image"},
        {net, 4, {0, 3, 32, 32}, "batch 0"},
        {net, 4, {1, 3, 0, 32}, "height 0"},
        {net, 4, {1, 3, 32, (int64_t)1 << 40}, "huge width"},
        {blk, 3, {2, 63, 16}, "block: L != H*W"},
        {blk, 3, {2, 64, 8}, "block: channels"},
        {blk, 2, {64, 16}, "block: 2-D"},
        {blk, 4, {1, 0, 4, 16}, "block: empty map"},
        {ape, 4, {1, 3, 40, 40}, "ape: another image size"},
        {tv, 4, {1, 3, 3, 40}, "torchvision: image smaller than a patch"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        y = (float *)&y;
        ra_status s = ra_model_forward(cases[i].m, &y, &nd, sh, x, cases[i].nd, cases[i].shape);
        CHECK(s == RA_ERR_SHAPE, "%s: status %d (%s)", cases[i].what, (int)s, ra_last_error());
        CHECK(y == NULL, "%s: *y not reset", cases[i].what);
    }
    /* other sizes are fine where nothing depends on img_size */
    {
        const int64_t s1[4] = {1, 3, 40, 24};
        y = NULL;
        ra_status s = ra_model_forward(net, &y, &nd, sh, x, 4, s1);
        CHECK(s == RA_OK && nd == 2 && sh[0] == 1 && sh[1] == 10, "net on 40x24: %s",
              ra_last_error());
        free(y);
        const int64_t s2[4] = {2, 3, 5, 16};
        y = NULL;
        s = ra_model_forward(blk, &y, &nd, sh, x, 4, s2);
        CHECK(s == RA_OK && nd == 4 && sh[1] == 3 && sh[2] == 5, "block on 3x5: %s",
              ra_last_error());
        free(y);
    }
done:
    ra_model_free(net);
    ra_model_free(blk);
    ra_model_free(ape);
    ra_model_free(tv);
}

/* ---- the workspace a model keeps between forwards -------------------------
 * Runs reuse it (grown on demand): the same input gives the same bits after
 * a larger and a smaller input, and two threads running one model at once
 * (one of them on a workspace of its own) both get those bits. */

typedef struct {
    const ra_model *m;
    const float *x;
    const int64_t *shape;
    const float *want;
    int64_t n;
    int bad;
} par_run;

static void *par_body(void *arg) {
    par_run *r = arg;
    for (int i = 0; i < 4; i++) {
        float *y = NULL;
        int nd;
        int64_t sh[4];
        if (ra_model_forward(r->m, &y, &nd, sh, r->x, 4, r->shape) != RA_OK ||
            memcmp(y, r->want, (size_t)r->n * sizeof *y))
            r->bad++;
        free(y);
    }
    return NULL;
}

static void workspace_reuse(void) {
    printf("workspace reuse\n");
    char p[512];
    ra_model *m = NULL;
    path_of(p, sizeof p, "net_swin_tv", "model");
    ra_status s = ra_model_load(&m, p);
    CHECK(s == RA_OK, "load: %s", ra_last_error());
    ra_st_file *in = NULL;
    path_of(p, sizeof p, "net_swin_tv", "input");
    if (!s) s = ra_st_open(&in, p);
    CHECK(s == RA_OK, "input: %s", ra_last_error());
    if (s) {
        ra_model_free(m);
        return;
    }
    const ra_st_tensor *tx;
    float *x = tensor_f32(in, "x", &tx);
    const int64_t n1 = tx->numel, b = tx->shape[0];
    const int64_t sh1[4] = {tx->shape[0], tx->shape[1], tx->shape[2], tx->shape[3]};
    const int64_t sh2[4] = {2 * b, tx->shape[1], tx->shape[2], tx->shape[3]};
    const int64_t sh3[4] = {1, tx->shape[1], tx->shape[2], tx->shape[3]};
    float *x2 = malloc((size_t)(2 * n1) * sizeof *x2);
    memcpy(x2, x, (size_t)n1 * sizeof *x), memcpy(x2 + n1, x, (size_t)n1 * sizeof *x);
    float *ya = NULL, *yb = NULL, *yc = NULL, *yd = NULL;
    int nd;
    int64_t sa[4], sb[4], sc[4], sd[4];
    CHECK(ra_model_forward(m, &ya, &nd, sa, x, 4, sh1) == RA_OK, "first: %s", ra_last_error());
    CHECK(ra_model_forward(m, &yb, &nd, sb, x2, 4, sh2) == RA_OK, "larger: %s", ra_last_error());
    CHECK(ra_model_forward(m, &yc, &nd, sc, x, 4, sh3) == RA_OK, "smaller: %s", ra_last_error());
    CHECK(ra_model_forward(m, &yd, &nd, sd, x, 4, sh1) == RA_OK, "again: %s", ra_last_error());
    const int64_t ny = sa[0] * sa[1];
    if (ya && yb && yc && yd) {
        CHECK(!memcmp(ya, yd, (size_t)ny * sizeof *ya), "a rerun changes the output");
        if (check_own_products())   /* a batch runs in shards on several threads */
            CHECK(!memcmp(ya, yb, (size_t)ny * sizeof *ya) &&
                      !memcmp(ya, yb + ny, (size_t)ny * sizeof *ya),
                  "a batch of two copies differs from one");
        else
            CHECK(check_err(ya, yb, (long)ny, 1e-5, 1e-6) <= 1 &&
                      check_err(ya, yb + ny, (long)ny, 1e-5, 1e-6) <= 1,
                  "a batch of two copies differs from one");
        CHECK(!memcmp(ya, yc, (size_t)(ny / b) * sizeof *ya), "image 0 alone differs");
        par_run r[2];
        pthread_t th[2];
        for (int i = 0; i < 2; i++) {
            r[i] = (par_run){.m = m, .x = x, .shape = sh1, .want = ya, .n = ny};
            CHECK(pthread_create(&th[i], NULL, par_body, &r[i]) == 0, "pthread_create");
        }
        for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
        CHECK(r[0].bad == 0 && r[1].bad == 0, "concurrent forwards differ (%d, %d)", r[0].bad,
              r[1].bad);
    }
    free(ya), free(yb), free(yc), free(yd), free(x), free(x2);
    ra_st_close(in);
    ra_model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_models FIXTURES_DIR\n");
        return 2;
    }
    fixtures = argv[1];
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    char list[512];
    snprintf(list, sizeof list, "%s/nets.txt", fixtures);
    FILE *f = fopen(list, "r");
    CHECK(f != NULL, "cannot open %s", list);
    int ncases = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        run_case(line);
        ncases++;
    }
    if (f) fclose(f);
    CHECK(ncases >= 10, "only %d cases in nets.txt", ncases);
    printf("%d model cases; worst max|y - torch| / max|y| = %.2e (%s)\n", ncases, worst_rel,
           worst_case);
    refusals();
    bad_inputs();
    flops();
    workspace_reuse();
    rmdir(tmpdir);
    return check_done();
}
