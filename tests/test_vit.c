/* test_vit.c - the vit arch (timm's VisionTransformer) against PyTorch.
 *
 * Every case of vit_nets.txt (tools/make_vit_fixtures.py: the timm twin of
 * tools/vit_twin.py and torchvision's own VisionTransformer) is loaded, its
 * naming scheme checked, run, and its output compared with PyTorch's within
 * rtol 1e-4 / atol 1e-5. Then variants of the fixture files, written with
 * the library's writer, must be refused with the right status and a reason
 * naming the problem: missing, unexpected and misshaped tensors in both
 * naming schemes, bad metadata, and images the model cannot take.
 *
 *   test_vit FIXTURES_DIR */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "relattn.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

static const char *fixtures;
static char tmpdir[] = "/tmp/relattn_test_vit.XXXXXX";

static void path_of(char *buf, size_t n, const char *name, const char *suffix) {
    snprintf(buf, n, "%s/%s.%s.safetensors", fixtures, name, suffix);
}

/* A float tensor of a file, converted (malloc'ed), its shape written. */
static float *read_f32(const char *path, const char *name, int *ndim, int64_t *shape) {
    ra_st_file *f = NULL;
    if (ra_st_open(&f, path) != RA_OK) return NULL;
    const ra_st_tensor *t = ra_st_find(f, name);
    float *v = t ? malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v) : NULL;
    if (v && ra_st_to_f32(v, t) != RA_OK) {
        free(v);
        v = NULL;
    }
    if (v) {
        *ndim = t->ndim;
        for (int i = 0; i < t->ndim; i++) shape[i] = t->shape[i];
    }
    ra_st_close(f);
    return v;
}

/* ---- the fixtures --------------------------------------------------------- */

static double worst_abs, worst_rel;

static void run_case(const char *name) {
    char mp[512], ip[512], ep[512];
    path_of(mp, sizeof mp, name, "model");
    path_of(ip, sizeof ip, name, "input");
    path_of(ep, sizeof ep, name, "expected");
    ra_model *m = NULL;
    ra_status st = ra_model_load(&m, mp);
    CHECK(st == RA_OK, "%s: load: %s", name, ra_last_error());
    if (st) return;
    CHECK(ra_model_arch(m) == RA_ARCH_VIT, "%s: arch %d", name, ra_model_arch(m));
    CHECK(ra_model_attn(m) == NULL, "%s: a network has no single attention layer", name);

    ra_st_file *ef = NULL;
    if (ra_st_open(&ef, ep) == RA_OK) {
        const char *want = ra_st_meta(ef, "scheme");
        CHECK(want && strcmp(ra_model_scheme(m), want) == 0, "%s: scheme %s, expected %s", name,
              ra_model_scheme(m), want ? want : "?");
        ra_st_close(ef);
    }

    /* the same model through ra_st_open + ra_model_from_file */
    ra_st_file *mf = NULL;
    ra_model *m2 = NULL;
    CHECK(ra_st_open(&mf, mp) == RA_OK && ra_model_from_file(&m2, mf) == RA_OK,
          "%s: from_file: %s", name, ra_last_error());
    CHECK(m2 && ra_model_param_total(m2) == ra_model_param_total(m), "%s: param totals", name);
    ra_model_free(m2);
    ra_st_close(mf);

    int xd = 0, yd = 0;
    int64_t xs[8], ys[8];
    float *x = read_f32(ip, "x", &xd, xs);
    float *want = read_f32(ep, "y", &yd, ys);
    CHECK(x && want, "%s: cannot read the input or expected file", name);
    float *y = NULL;
    int nd = 0;
    int64_t shp[4] = {0};
    if (x && want) {
        st = ra_model_forward(m, &y, &nd, shp, x, xd, xs);
        CHECK(st == RA_OK, "%s: forward: %s", name, ra_last_error());
    }
    if (y) {
        int same = nd == yd;
        long n = 1;
        for (int i = 0; same && i < nd; i++) same = shp[i] == ys[i], n *= (long)ys[i];
        CHECK(same, "%s: output has %d dims (%lld, %lld, ...), expected %d", name, nd,
              (long long)shp[0], (long long)shp[1], yd);
        if (same) {
            CHECK_CLOSE(y, want, n, 1e-4, 1e-5, name);
            double ea = 0, er = 0, scale = 0;
            for (long i = 0; i < n; i++) {
                double d = fabs((double)y[i] - want[i]);
                if (d > ea) ea = d;
                if (fabs(want[i]) > scale) scale = fabs(want[i]);
            }
            er = scale > 0 ? ea / scale : ea;
            printf("  %-20s y (%lld, %lld%s) max |err| %.3g, relative to max |y| %.3g\n", name,
                   (long long)shp[0], (long long)shp[1], nd == 3 ? ", ..." : "", ea, er);
            if (ea > worst_abs) worst_abs = ea;
            if (er > worst_rel) worst_rel = er;
        }
    }
    /* the output is deterministic: a second run gives the same bits */
    if (y) {
        float *y2 = NULL;
        int nd2;
        int64_t shp2[4];
        long n = 1;
        for (int i = 0; i < nd; i++) n *= (long)shp[i];
        st = ra_model_forward(m, &y2, &nd2, shp2, x, xd, xs);
        CHECK(st == RA_OK && y2 && memcmp(y, y2, (size_t)n * sizeof *y) == 0,
              "%s: a second forward differs", name);
        free(y2);
    }
    free(y);
    free(x);
    free(want);
    ra_model_free(m);
}

/* ---- variants of a model file --------------------------------------------- */

#define MAX_EDITS 4

typedef struct {
    const char *drop;                 /* tensor left out */
    const char *rename_from, *rename_to;
    const char *add;                  /* extra F32 tensor of shape (3) */
    const char *reshape;              /* tensor written with one row less in dim 1 */
    const char *prefix;               /* every tensor name prefixed */
    const char *mkey[MAX_EDITS];      /* metadata edits: key = value, NULL value drops */
    const char *mval[MAX_EDITS];
} edits;

/* Write src (a fixture model) with edits to a temporary path. */
static int write_variant(const char *src, const edits *e, char *out, size_t n) {
    static int counter;
    snprintf(out, n, "%s/v%d.safetensors", tmpdir, counter++);
    ra_st_file *f = NULL;
    if (ra_st_open(&f, src) != RA_OK) return 0;
    ra_st_writer *w = ra_st_writer_new();
    int ok = w != NULL;
    for (int i = 0; ok && i < ra_st_count(f); i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        if (e->drop && strcmp(t->name, e->drop) == 0) continue;
        char name[256];
        snprintf(name, sizeof name, "%s%s", e->prefix ? e->prefix : "",
                 e->rename_from && strcmp(t->name, e->rename_from) == 0 ? e->rename_to : t->name);
        int64_t shape[RA_ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        if (e->reshape && strcmp(t->name, e->reshape) == 0 && t->ndim >= 2 && shape[1] > 1)
            shape[1]--;   /* a prefix of the data: still a valid file */
        ok = ra_st_writer_add(w, name, t->dtype, t->ndim, shape, t->data) == RA_OK;
    }
    if (ok && e->add) {
        const float three[3] = {1, 2, 3};
        ok = ra_st_writer_add(w, e->add, RA_DTYPE_F32, 1, (int64_t[]){3}, three) == RA_OK;
    }
    for (int i = 0; ok && i < ra_st_meta_count(f); i++) {
        const char *k = ra_st_meta_key(f, i), *v = ra_st_meta(f, k);
        for (int j = 0; j < MAX_EDITS; j++)
            if (e->mkey[j] && strcmp(e->mkey[j], k) == 0) v = e->mval[j];
        if (v) ok = ra_st_writer_meta(w, k, v) == RA_OK;
    }
    for (int j = 0; ok && j < MAX_EDITS; j++)   /* keys the file lacks */
        if (e->mkey[j] && e->mval[j] && !ra_st_meta(f, e->mkey[j]))
            ok = ra_st_writer_meta(w, e->mkey[j], e->mval[j]) == RA_OK;
    if (ok) ok = ra_st_writer_save(w, out) == RA_OK;
    ra_st_writer_free(w);
    ra_st_close(f);
    return ok;
}

/* The variant must be refused with status want and a reason containing
 * needle. */
static void refused(const char *base, const edits *e, ra_status want, const char *needle,
                    const char *what) {
    char src[512], path[512];
    path_of(src, sizeof src, base, "model");
    if (!write_variant(src, e, path, sizeof path)) {
        CHECK(0, "%s: cannot write the variant", what);
        return;
    }
    ra_model *m = NULL;
    ra_status st = ra_model_load(&m, path);
    const char *why = ra_last_error();
    CHECK(st == want, "%s: status %d (%s), expected %d", what, st, why, want);
    CHECK(m == NULL, "%s: a model was returned", what);
    CHECK(!needle || strstr(why, needle), "%s: reason \"%s\" does not name %s", what, why,
          needle);
    ra_model_free(m);
    unlink(path);
}

/* The variant loads and gives the fixture's output. */
static void accepted(const char *base, const edits *e, const char *what) {
    char src[512], path[512], ip[512], ep[512];
    path_of(src, sizeof src, base, "model");
    path_of(ip, sizeof ip, base, "input");
    path_of(ep, sizeof ep, base, "expected");
    if (!write_variant(src, e, path, sizeof path)) {
        CHECK(0, "%s: cannot write the variant", what);
        return;
    }
    ra_model *m = NULL;
    ra_status st = ra_model_load(&m, path);
    CHECK(st == RA_OK, "%s: %s", what, ra_last_error());
    int xd = 0, yd = 0;
    int64_t xs[8], ys[8], shp[4];
    float *x = read_f32(ip, "x", &xd, xs), *want = read_f32(ep, "y", &yd, ys), *y = NULL;
    int nd = 0;
    if (m && x && want && ra_model_forward(m, &y, &nd, shp, x, xd, xs) == RA_OK)
        CHECK_CLOSE(y, want, (long)(ys[0] * ys[1]), 1e-4, 1e-5, what);
    else
        CHECK(0, "%s: forward failed: %s", what, ra_last_error());
    free(x), free(want), free(y);
    ra_model_free(m);
    unlink(path);
}

static void test_refusals(void) {
    /* timm names */
    refused("vit_net_token", &(edits){.drop = "blocks.1.mlp.fc2.bias"}, RA_ERR_FORMAT,
            "blocks.1.mlp.fc2.bias", "missing tensor");
    refused("vit_net_token", &(edits){.drop = "cls_token"}, RA_ERR_FORMAT, "cls_token",
            "missing class token");
    refused("vit_net_token", &(edits){.add = "blocks.0.attn.bogus"}, RA_ERR_FORMAT,
            "blocks.0.attn.bogus", "unexpected tensor");
    refused("vit_net_token", &(edits){.add = "blocks.2.norm1.weight"}, RA_ERR_FORMAT,
            "blocks.2.norm1.weight", "a block beyond depth");
    refused("vit_net_token", &(edits){.reshape = "pos_embed"}, RA_ERR_SHAPE, "pos_embed",
            "wrong pos_embed shape");
    refused("vit_net_token", &(edits){.reshape = "blocks.0.attn.qkv.weight"}, RA_ERR_SHAPE,
            "blocks.0.attn.qkv.weight", "wrong qkv shape");
    refused("vit_net_token", &(edits){.prefix = "model."}, RA_ERR_FORMAT, "model.",
            "names of no scheme");
    refused("vit_net_avg", &(edits){.rename_from = "fc_norm.weight", .rename_to = "norm.weight"},
            RA_ERR_FORMAT, "norm.weight", "norm where avg pooling has fc_norm");
    /* metadata */
    refused("vit_net_token", &(edits){.mkey = {"qkv_bias"}, .mval = {NULL}}, RA_ERR_FORMAT,
            "qkv_bias", "missing qkv_bias");
    refused("vit_net_token", &(edits){.mkey = {"qkv_bias"}, .mval = {"false"}}, RA_ERR_FORMAT,
            "blocks.0.attn.qkv.bias", "qkv_bias false with the biases");
    refused("vit_net_nobias", &(edits){.mkey = {"qkv_bias"}, .mval = {"true"}}, RA_ERR_FORMAT,
            "blocks.0.attn.qkv.bias", "qkv_bias true without the biases");
    refused("vit_net_token", &(edits){.mkey = {"num_heads"}, .mval = {"5"}}, RA_ERR_FORMAT,
            "num_heads", "embed_dim not divisible by num_heads");
    refused("vit_net_token", &(edits){.mkey = {"img_size"}, .mval = {"30"}}, RA_ERR_FORMAT,
            "img_size", "img_size not a multiple of the patch");
    refused("vit_net_token", &(edits){.mkey = {"patch_size"}, .mval = {"8,4"}}, RA_ERR_FORMAT,
            "patch_size", "non-square patch");
    refused("vit_net_token", &(edits){.mkey = {"mlp_ratio"}, .mval = {"four"}}, RA_ERR_FORMAT,
            "mlp_ratio", "mlp_ratio not a number");
    refused("vit_net_token", &(edits){.mkey = {"qk_norm"}, .mval = {"true"}}, RA_ERR_FORMAT,
            "qk_norm", "qk_norm");
    refused("vit_net_token", &(edits){.mkey = {"global_pool"}, .mval = {"map"}}, RA_ERR_FORMAT,
            "global_pool", "attention pooling");
    refused("vit_net_token", &(edits){.mkey = {"class_token", "global_pool"},
                                      .mval = {"false", "token"}},
            RA_ERR_FORMAT, "class_token", "token pooling without a class token");
    refused("vit_net_token", &(edits){.mkey = {"depth"}, .mval = {"3"}}, RA_ERR_FORMAT,
            "blocks.2.norm1.weight", "depth larger than the file");

    /* torchvision names */
    refused("vit_net_tv", &(edits){.drop = "encoder.layers.encoder_layer_1.mlp.3.weight"},
            RA_ERR_FORMAT, "encoder.layers.encoder_layer_1.mlp.3.weight",
            "torchvision: missing tensor");
    refused("vit_net_tv", &(edits){.add = "heads.pre_logits.weight"}, RA_ERR_FORMAT,
            "heads.pre_logits.weight", "torchvision: representation_size");
    refused("vit_net_tv", &(edits){.rename_from = "encoder.layers.encoder_layer_0.ln_1.weight",
                                   .rename_to = "blocks.0.norm1.weight"},
            RA_ERR_FORMAT, "blocks.0.norm1.weight", "torchvision: a timm name among them");
    refused("vit_net_tv", &(edits){.rename_from = "encoder.layers.encoder_layer_1.ln_2.bias",
                                   .rename_to = "encoder.layers.encoder_layer_01.ln_2.bias"},
            RA_ERR_FORMAT, "encoder_layer_01", "torchvision: a block number with a zero");
    refused("vit_net_tv", &(edits){.reshape = "encoder.pos_embedding"}, RA_ERR_SHAPE,
            "encoder.pos_embedding", "torchvision: wrong pos_embedding shape");
    refused("vit_net_tv", &(edits){.mkey = {"qkv_bias"}, .mval = {"false"}}, RA_ERR_FORMAT,
            "in_proj_bias", "torchvision: qkv_bias false");
    /* torchvision's MLPBlock before version 2: linear_1 / linear_2 */
    accepted("vit_net_tv", &(edits){.rename_from = "encoder.layers.encoder_layer_0.mlp.0.weight",
                                    .rename_to = "encoder.layers.encoder_layer_0.mlp.linear_1.weight"},
             "torchvision: legacy MLPBlock names");
    refused("vit_net_tv", &(edits){.rename_from = "encoder.layers.encoder_layer_0.mlp.3.bias",
                                   .rename_to = "encoder.layers.encoder_layer_0.mlp.linear_2.bias",
                                   .add = "encoder.layers.encoder_layer_0.mlp.3.bias"},
            RA_ERR_FORMAT, "mlp.3.bias", "torchvision: both spellings of one tensor");
    /* odd but valid: metadata keys in another order, an unknown key */
    accepted("vit_net_token", &(edits){.mkey = {"drop_path_rate"}, .mval = {"0.1"}},
             "a training-only option");
}

/* Images the model cannot take: RA_ERR_SHAPE with a reason. */
static void forward_refused(const char *base, int b, int c, int h, int w, int ndim,
                            const char *needle, const char *what) {
    char mp[512];
    path_of(mp, sizeof mp, base, "model");
    ra_model *m = NULL;
    if (ra_model_load(&m, mp) != RA_OK) {
        CHECK(0, "%s: %s", what, ra_last_error());
        return;
    }
    int64_t shape[4] = {b, c, h, w};
    float *x = calloc((size_t)b * c * h * w + 1, sizeof *x);
    float *y = (float *)1;
    int nd = 0;
    int64_t ys[4];
    ra_status st = ra_model_forward(m, &y, &nd, ys, x, ndim, shape);
    CHECK(st == RA_ERR_SHAPE, "%s: status %d (%s)", what, st, ra_last_error());
    CHECK(y == NULL, "%s: output not reset", what);
    CHECK(!needle || strstr(ra_last_error(), needle), "%s: reason \"%s\" lacks %s", what,
          ra_last_error(), needle);
    free(x);
    ra_model_free(m);
}

static void test_inputs(void) {
    forward_refused("vit_net_token", 1, 3, 36, 36, 4, "patch size 8", "36x36, patch 8");
    forward_refused("vit_net_token", 1, 3, 40, 40, 4, "img_size", "40x40 without dynamic_img_size");
    forward_refused("vit_net_token", 1, 3, 32, 24, 4, "img_size", "32x24 without dynamic_img_size");
    forward_refused("vit_net_token", 1, 4, 32, 32, 4, "(1, 4, 32, 32)", "4 channels");
    forward_refused("vit_net_token", 1, 3, 32, 32, 3, "dimensions", "3-D input");
    forward_refused("vit_net_token", 0, 3, 32, 32, 4, NULL, "empty batch");
    forward_refused("vit_net_dyn_up", 1, 3, 36, 40, 4, "patch size 8", "dynamic, 36x40");
    forward_refused("vit_net_tv", 1, 3, 64, 64, 4, "img_size", "torchvision at 64x64");
    /* NULL arguments */
    char mp[512];
    path_of(mp, sizeof mp, "vit_net_token", "model");
    ra_model *m = NULL;
    if (ra_model_load(&m, mp) == RA_OK) {
        float *y;
        int nd;
        int64_t ys[4], xs[4] = {1, 3, 32, 32};
        CHECK(ra_model_forward(m, &y, &nd, ys, NULL, 4, xs) == RA_ERR_ARG, "NULL x");
        CHECK(ra_model_forward(m, NULL, &nd, ys, (float *)xs, 4, xs) == RA_ERR_ARG, "NULL y");
        /* names of the parameters: timm's, in state_dict order */
        CHECK(strcmp(ra_model_param(m, 0)->name, "cls_token") == 0, "first parameter %s",
              ra_model_param(m, 0)->name);
        CHECK(strcmp(ra_model_param(m, ra_model_param_count(m) - 1)->name, "head.bias") == 0,
              "last parameter");
    }
    ra_model_free(m);
    /* a torchvision file's parameters carry the canonical (timm) names */
    path_of(mp, sizeof mp, "vit_net_tv", "model");
    m = NULL;
    if (ra_model_load(&m, mp) == RA_OK) {
        int found = 0;
        for (int i = 0; i < ra_model_param_count(m); i++)
            found += strcmp(ra_model_param(m, i)->name, "blocks.1.attn.qkv.weight") == 0;
        CHECK(found == 1, "torchvision in_proj_weight as blocks.1.attn.qkv.weight");
    }
    ra_model_free(m);
}

int main(int argc, char **argv) {
    fixtures = argc > 1 ? argv[1] : "tests/fixtures";
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    char list[512];
    snprintf(list, sizeof list, "%s/vit_nets.txt", fixtures);
    FILE *f = fopen(list, "r");
    CHECK(f != NULL, "cannot open %s", list);
    int ncases = 0;
    char name[128];
    while (f && fscanf(f, "%127s", name) == 1) {
        run_case(name);
        ncases++;
    }
    if (f) fclose(f);
    CHECK(ncases >= 8, "only %d cases", ncases);
    printf("%d cases: worst max |err| %.3g, worst relative %.3g\n", ncases, worst_abs, worst_rel);
    test_refusals();
    test_inputs();
    rmdir(tmpdir);
    return check_done();
}
