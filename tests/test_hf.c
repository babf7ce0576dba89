/* test_hf.c - transformers' tensor names (src/models/hf.c).
 *
 * 1. PyTorch fixtures (official Swin, official SwinV2, timm ViT) written
 *    out under transformers' names, as its conversion scripts name them
 *    (qkv's rows cut into query, key and value: rows [0, C), [C, 2C),
 *    [2C, 3C)), read back through rai_hf_remap and loaded: the same output
 *    bits as the original file, PyTorch's y within rtol 1e-4 / atol 1e-5.
 * 2. Small files built in memory: the new names and shapes, the joined qkv
 *    read back as q's rows, then k's, then v's, exactly; SwinV2's q_bias /
 *    v_bias; a ViTModel's pooler dropped; files that are not transformers'
 *    passed through.
 * 3. Refusals, each naming the tensor: a missing third, shapes or dtypes
 *    that disagree, an unknown name, SwinV2's key bias, masked image
 *    modeling, another transformers model, a name outside the prefix.
 *
 *   test_hf FIXTURE_DIR
 *   test_hf FIXTURE_DIR --seeds DIR   (only write the transformers files of
 *                                      1. into DIR: fuzz/corpus/hf) */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "models/hf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/relattn_hf_XXXXXX";

/* ---- official / timm names -> transformers' ------------------------------ */

/* suffix rules: (ours, transformers') */
static const char *const swin_block_rules[][2] = {
    {"norm1.", "layernorm_before."},
    {"norm2.", "layernorm_after."},
    {"attn.relative_position_bias_table", "attention.self.relative_position_bias_table"},
    {"attn.relative_position_index", "attention.self.relative_position_index"},
    {"attn.relative_coords_table", "attention.self.relative_coords_table"},
    {"attn.logit_scale", "attention.self.logit_scale"},
    {"attn.cpb_mlp.", "attention.self.continuous_position_bias_mlp."},
    {"attn.q_bias", "attention.self.query.bias"},
    {"attn.v_bias", "attention.self.value.bias"},
    {"attn.proj.", "attention.output.dense."},
    {"mlp.fc1.", "intermediate.dense."},
    {"mlp.fc2.", "output.dense."}};
static const char *const vit_block_rules[][2] = {
    {"norm1.", "layernorm_before."},   {"norm2.", "layernorm_after."},
    {"attn.proj.", "attention.output.dense."}, {"mlp.fc1.", "intermediate.dense."},
    {"mlp.fc2.", "output.dense."}};

/* The transformers name of an official Swin / timm ViT tensor name into
 * out; 0 for a buffer transformers does not save (attn_mask); 2 for qkv
 * (out is then the stem, e.g. "swin.encoder.layers.0.blocks.0.attention.self."
 * and *bias says which). */
static int hf_name(char *out, size_t n, const char *name, int vit, const char *pfx, int *bias) {
    int i, j, k;
    char rest[200];
    if (!vit && sscanf(name, "layers.%d.blocks.%d.%199s", &i, &j, rest) == 3) {
        if (!strcmp(rest, "attn_mask")) return 0;
        if (!strncmp(rest, "attn.qkv.", 9)) {
            *bias = !strcmp(rest + 9, "bias");
            snprintf(out, n, "%sencoder.layers.%d.blocks.%d.attention.self.", pfx, i, j);
            return 2;
        }
        for (k = 0; k < (int)(sizeof swin_block_rules / sizeof *swin_block_rules); k++) {
            const size_t l = strlen(swin_block_rules[k][0]);
            if (!strncmp(rest, swin_block_rules[k][0], l)) {
                snprintf(out, n, "%sencoder.layers.%d.blocks.%d.%s%s", pfx, i, j,
                         swin_block_rules[k][1], rest + l);
                return 1;
            }
        }
        return -1;
    }
    if (!vit && sscanf(name, "layers.%d.downsample.%199s", &i, rest) == 2)
        return snprintf(out, n, "%sencoder.layers.%d.downsample.%s", pfx, i, rest), 1;
    if (vit && sscanf(name, "blocks.%d.%199s", &i, rest) == 2) {
        if (!strncmp(rest, "attn.qkv.", 9)) {
            *bias = !strcmp(rest + 9, "bias");
            snprintf(out, n, "%sencoder.layer.%d.attention.attention.", pfx, i);
            return 2;
        }
        for (k = 0; k < (int)(sizeof vit_block_rules / sizeof *vit_block_rules); k++) {
            const size_t l = strlen(vit_block_rules[k][0]);
            if (!strncmp(rest, vit_block_rules[k][0], l)) {
                snprintf(out, n, "%sencoder.layer.%d.%s%s", pfx, i, vit_block_rules[k][1], rest + l);
                return 1;
            }
        }
        return -1;
    }
    static const char *const top[][2] = {
        {"patch_embed.proj.", "embeddings.patch_embeddings.projection."},
        {"patch_embed.norm.", "embeddings.norm."},
        {"absolute_pos_embed", "embeddings.position_embeddings"},
        {"cls_token", "embeddings.cls_token"},
        {"pos_embed", "embeddings.position_embeddings"},
        {"norm.", "layernorm."}};
    for (k = 0; k < 6; k++) {
        const size_t l = strlen(top[k][0]);
        if (!strncmp(name, top[k][0], l))
            return snprintf(out, n, "%s%s%s", pfx, top[k][1], name + l), 1;
    }
    if (!strncmp(name, "head.", 5)) return snprintf(out, n, "classifier.%s", name + 5), 1;
    return -1;
}

/* Write the model fixture at path under transformers' names (prefix pfx)
 * to out: every tensor as F32 or I64 copies, qkv cut in three. */
static int write_hf(const char *path, const char *out, int vit, const char *pfx) {
    ra_st_file *f = NULL;
    ra_st_writer *w = ra_st_writer_new();
    int ok = w && ra_st_open(&f, path) == RA_OK;
    for (int m = 0; ok && m < ra_st_meta_count(f); m++)
        ok = ra_st_writer_meta(w, ra_st_meta_key(f, m), ra_st_meta(f, ra_st_meta_key(f, m))) == RA_OK;
    for (int i = 0; ok && i < ra_st_count(f); i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        char nm[256];
        int bias = 0;
        const int kind = hf_name(nm, sizeof nm, t->name, vit, pfx, &bias);
        CHECK(kind >= 0, "%s: no transformers name for %s", path, t->name);
        if (kind <= 0) continue;
        const int is_int = t->dtype == RA_DTYPE_I64;
        void *buf = malloc((size_t)t->numel * 8 + 8);
        ok = buf && (is_int ? ra_st_read_i64(buf, f, t) : ra_st_read_f32(buf, f, t)) == RA_OK;
        if (ok && kind == 1)
            ok = ra_st_writer_add(w, nm, is_int ? RA_DTYPE_I64 : RA_DTYPE_F32, t->ndim, t->shape,
                                  buf) == RA_OK;
        for (int s = 0; ok && kind == 2 && s < 3; s++) {   /* the conversion scripts' cut */
            static const char *const word[] = {"query", "key", "value"};
            const int64_t rows = t->shape[0] / 3, cols = t->ndim == 2 ? t->shape[1] : 1;
            const int64_t shape[2] = {rows, cols};
            char full[300];
            snprintf(full, sizeof full, "%s%s.%s", nm, word[s], bias ? "bias" : "weight");
            ok = ra_st_writer_add(w, full, RA_DTYPE_F32, t->ndim, shape,
                                  (float *)buf + s * rows * cols) == RA_OK;
        }
        free(buf);
    }
    ok = ok && ra_st_writer_save(w, out) == RA_OK;
    ra_st_writer_free(w);
    ra_st_close(f);
    return ok;
}

/* y of model m on the fixture's x (malloc'ed), or NULL. */
static float *run(const ra_model *m, const char *dir, const char *name, int64_t *ny) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s.input.safetensors", dir, name);
    ra_st_file *in = NULL;
    float *x = NULL, *y = NULL;
    int yn = 0;
    int64_t ys[4] = {0};
    if (ra_st_open(&in, p) == RA_OK) {
        const ra_st_tensor *tx = ra_st_find(in, "x");
        x = tx ? malloc(sizeof *x * (size_t)tx->numel) : NULL;
        if (x && ra_st_read_f32(x, in, tx) == RA_OK &&
            ra_model_forward(m, &y, &yn, ys, x, tx->ndim, tx->shape) != RA_OK)
            y = NULL;
    }
    *ny = y ? ys[0] * ys[1] : 0;
    free(x);
    ra_st_close(in);
    return y;
}

/* PyTorch's y of fixture name (in .expected or .grad), or NULL. */
static float *expected(const char *dir, const char *name, int64_t n) {
    char p[512];
    ra_st_file *f = NULL;
    float *y = malloc(sizeof *y * (size_t)(n ? n : 1));
    snprintf(p, sizeof p, "%s/%s.expected.safetensors", dir, name);
    if (access(p, R_OK)) snprintf(p, sizeof p, "%s/%s.grad.safetensors", dir, name);
    const ra_st_tensor *t = ra_st_open(&f, p) == RA_OK ? ra_st_find(f, "y") : NULL;
    if (!t || t->numel != n || ra_st_read_f32(y, f, t) != RA_OK) free(y), y = NULL;
    ra_st_close(f);
    return y;
}

static void round_trip(const char *dir, const char *name, int vit, const char *pfx,
                       const char *want_arch) {
    char src[512], out[512];
    snprintf(src, sizeof src, "%s/%s.model.safetensors", dir, name);
    snprintf(out, sizeof out, "%s/%s_hf.safetensors", tmpdir, name);
    CHECK(write_hf(src, out, vit, pfx), "%s: write under transformers' names: %s", name,
          ra_last_error());
    ra_st_file *f = NULL, *g = NULL;
    const char *arch = NULL;
    ra_model *m0 = NULL, *m1 = NULL;
    ra_status st = ra_st_open(&f, out);
    if (!st) st = rai_hf_remap(&g, f, &arch);
    CHECK(st == RA_OK && arch && !strcmp(arch, want_arch), "%s: remap: %s (arch %s)", name,
          ra_last_error(), arch ? arch : "NULL");
    if (st) return;
    CHECK(ra_st_find(g, vit ? "blocks.0.attn.qkv.weight" : "layers.0.blocks.0.attn.qkv.weight"),
          "%s: no joined qkv", name);
    st = ra_model_from_file(&m1, g);
    CHECK(st == RA_OK, "%s: load the remapped file: %s", name, ra_last_error());
    CHECK(ra_model_load(&m0, src) == RA_OK, "%s: load the fixture: %s", name, ra_last_error());
    int64_t n0 = 0, n1 = 0;
    float *y0 = m0 ? run(m0, dir, name, &n0) : NULL, *y1 = m1 ? run(m1, dir, name, &n1) : NULL;
    float *yt = y1 ? expected(dir, name, n1) : NULL;
    CHECK(y0 && y1 && n0 == n1 && !memcmp(y0, y1, sizeof *y0 * (size_t)n0),
          "%s: the transformers file's output differs from the fixture's", name);
    CHECK(yt && check_err(y1, yt, (long)n1, 1e-4, 1e-5) <= 1, "%s: y differs from PyTorch's", name);
    free(y0), free(y1), free(yt);
    ra_model_free(m0), ra_model_free(m1);
    ra_st_close(g);
}

/* ---- small files in memory ------------------------------------------------ */

/* Tensors a test builds: each gets its own values (base + index) so that
 * the joined qkv can be read back against them. */
typedef struct {
    ra_st_file *f;
    float *mem[256];
    int n;
} builder;

static void add(builder *b, const char *name, ra_dtype dt, int ndim, int64_t d0, int64_t d1,
                float base) {
    const int64_t shape[2] = {d0, d1};
    const int64_t numel = ndim == 1 ? d0 : d0 * d1;
    const unsigned sz = rai_st_dtype_size(dt);
    float *p = calloc((size_t)numel, 4);
    for (int64_t i = 0; i < numel; i++) p[i] = base + (float)i;
    b->mem[b->n++] = p;
    const rai_st_part part = {(const unsigned char *)p, (size_t)numel * sz, -1, 0};
    CHECK(rai_st_add(b->f, name, dt, ndim, shape, &part, 1) == RA_OK, "add %s: %s", name,
          ra_last_error());
}

static void free_mem(void *ctx) {
    builder *b = ctx;
    for (int i = 0; i < b->n; i++) free(b->mem[i]);
    free(b);
}

static builder *new_file(void) {
    builder *b = calloc(1, sizeof *b);
    CHECK(rai_st_new(&b->f) == RA_OK, "rai_st_new");
    return b;
}

/* Finish b's file (it owns b's memory from here on) and remap it. */
static ra_status remap(builder *b, ra_st_file **out, const char **arch) {
    ra_st_file *f = b->f;
    CHECK(rai_st_keep(f, free_mem, b) == RA_OK, "keep");
    CHECK(rai_st_finish(f) == RA_OK, "finish: %s", ra_last_error());
    return rai_hf_remap(out, f, arch);
}

static void check_shape(const ra_st_file *f, const char *name, int ndim, int64_t d0, int64_t d1) {
    const ra_st_tensor *t = ra_st_find(f, name);
    CHECK(t && t->ndim == ndim && t->shape[0] == d0 && (ndim < 2 || t->shape[1] == d1),
          "%s: missing or misshapen", name);
}

/* The joined tensor name holds q's, k's, v's values: base q/k/v + index. */
static void check_joined(const ra_st_file *f, const char *name, int64_t rows, int64_t cols,
                         const float base[3]) {
    const ra_st_tensor *t = ra_st_find(f, name);
    CHECK(t && t->shape[0] == 3 * rows && t->data == NULL, "%s: not joined from three parts", name);
    if (!t) return;
    float *y = malloc(sizeof *y * (size_t)t->numel);
    CHECK(ra_st_read_f32(y, f, t) == RA_OK, "read %s", name);
    int exact = 1;
    for (int s = 0; s < 3; s++)
        for (int64_t i = 0; i < rows * cols; i++) exact &= y[s * rows * cols + i] == base[s] + (float)i;
    CHECK(exact, "%s: not q's rows, then k's, then v's", name);
    free(y);
}

/* A SwinForImageClassification: 2 stages of one block, C = 4, 1 head,
 * window 2 (T = 9), 3 classes. */
static builder *swin_file(const char *p, int v2) {
    builder *b = new_file();
    char nm[200];
#define T(s) (snprintf(nm, sizeof nm, "%s%s", p, s), nm)
    add(b, T("embeddings.patch_embeddings.projection.weight"), RA_DTYPE_F32, 2, 4, 12, 0);
    add(b, T("embeddings.patch_embeddings.projection.bias"), RA_DTYPE_F32, 1, 4, 0, 0);
    add(b, T("embeddings.norm.weight"), RA_DTYPE_F32, 1, 4, 0, 0);
    add(b, T("embeddings.norm.bias"), RA_DTYPE_F32, 1, 4, 0, 0);
    for (int s = 0; s < 2; s++) {
        const int64_t C = 4 << s;
        char blk[120];
        snprintf(blk, sizeof blk, "%sencoder.layers.%d.blocks.0.", p, s);
#define B(x) (snprintf(nm, sizeof nm, "%s%s", blk, x), nm)
        add(b, B("layernorm_before.weight"), RA_DTYPE_F32, 1, C, 0, 0);
        add(b, B("layernorm_before.bias"), RA_DTYPE_F32, 1, C, 0, 0);
        if (!v2) add(b, B("attention.self.relative_position_bias_table"), RA_DTYPE_F32, 2, 9, 1, 0);
        if (v2) {
            add(b, B("attention.self.logit_scale"), RA_DTYPE_F32, 1, 1, 0, 0);
            add(b, B("attention.self.continuous_position_bias_mlp.0.weight"), RA_DTYPE_F32, 2, 512, 2, 0);
            add(b, B("attention.self.continuous_position_bias_mlp.0.bias"), RA_DTYPE_F32, 1, 512, 0, 0);
            add(b, B("attention.self.continuous_position_bias_mlp.2.weight"), RA_DTYPE_F32, 2, 1, 512, 0);
        }
        add(b, B("attention.self.query.weight"), RA_DTYPE_F32, 2, C, C, 1000);
        add(b, B("attention.self.key.weight"), RA_DTYPE_F32, 2, C, C, 2000);
        add(b, B("attention.self.value.weight"), RA_DTYPE_F32, 2, C, C, 3000);
        add(b, B("attention.self.query.bias"), RA_DTYPE_F32, 1, C, 0, 4000);
        if (!v2) add(b, B("attention.self.key.bias"), RA_DTYPE_F32, 1, C, 0, 5000);
        add(b, B("attention.self.value.bias"), RA_DTYPE_F32, 1, C, 0, 6000);
        add(b, B("attention.output.dense.weight"), RA_DTYPE_F32, 2, C, C, 0);
        add(b, B("attention.output.dense.bias"), RA_DTYPE_F32, 1, C, 0, 0);
        add(b, B("layernorm_after.weight"), RA_DTYPE_F32, 1, C, 0, 0);
        add(b, B("layernorm_after.bias"), RA_DTYPE_F32, 1, C, 0, 0);
        add(b, B("intermediate.dense.weight"), RA_DTYPE_F32, 2, 4 * C, C, 0);
        add(b, B("intermediate.dense.bias"), RA_DTYPE_F32, 1, 4 * C, 0, 0);
        add(b, B("output.dense.weight"), RA_DTYPE_F32, 2, C, 4 * C, 0);
        add(b, B("output.dense.bias"), RA_DTYPE_F32, 1, C, 0, 0);
#undef B
    }
    add(b, T("encoder.layers.0.downsample.reduction.weight"), RA_DTYPE_F32, 2, 8, 16, 0);
    add(b, T("encoder.layers.0.downsample.norm.weight"), RA_DTYPE_F32, 1, v2 ? 8 : 16, 0, 0);
    add(b, T("encoder.layers.0.downsample.norm.bias"), RA_DTYPE_F32, 1, v2 ? 8 : 16, 0, 0);
    add(b, T("layernorm.weight"), RA_DTYPE_F32, 1, 8, 0, 0);
    add(b, T("layernorm.bias"), RA_DTYPE_F32, 1, 8, 0, 0);
#undef T
    if (*p) {
        add(b, "classifier.weight", RA_DTYPE_F32, 2, 3, 8, 0);
        add(b, "classifier.bias", RA_DTYPE_F32, 1, 3, 0, 0);
    }
    return b;
}

static void test_swin_names(void) {
    const char *arch = NULL;
    ra_st_file *g = NULL;
    ra_status st = remap(swin_file("swin.", 0), &g, &arch);
    CHECK(st == RA_OK && !strcmp(arch, "swin"), "swin: %s", ra_last_error());
    if (st) return;
    CHECK(ra_st_count(g) == 4 + 2 * 13 + 3 + 2 + 2, "swin: %d tensors", ra_st_count(g));
    check_shape(g, "patch_embed.proj.weight", 2, 4, 12);
    check_shape(g, "patch_embed.norm.bias", 1, 4, 0);
    check_shape(g, "layers.1.blocks.0.attn.relative_position_bias_table", 2, 9, 1);
    check_shape(g, "layers.1.blocks.0.attn.proj.weight", 2, 8, 8);
    check_shape(g, "layers.1.blocks.0.mlp.fc1.weight", 2, 32, 8);
    check_shape(g, "layers.1.blocks.0.mlp.fc2.bias", 1, 8, 0);
    check_shape(g, "layers.0.blocks.0.norm2.weight", 1, 4, 0);
    check_shape(g, "layers.0.downsample.reduction.weight", 2, 8, 16);
    check_shape(g, "layers.0.downsample.norm.weight", 1, 16, 0);
    check_shape(g, "norm.weight", 1, 8, 0);
    check_shape(g, "head.weight", 2, 3, 8);
    check_joined(g, "layers.0.blocks.0.attn.qkv.weight", 4, 4, (const float[]){1000, 2000, 3000});
    check_joined(g, "layers.1.blocks.0.attn.qkv.weight", 8, 8, (const float[]){1000, 2000, 3000});
    check_joined(g, "layers.1.blocks.0.attn.qkv.bias", 8, 1, (const float[]){4000, 5000, 6000});
    for (int i = 0; i < ra_st_count(g); i++)
        CHECK(!strstr(ra_st_at(g, i)->name, "attention") && !strstr(ra_st_at(g, i)->name, "swin."),
              "swin: %s left", ra_st_at(g, i)->name);
    ra_st_close(g);
}

static void test_swinv2_names(void) {
    const char *arch = NULL;
    ra_st_file *g = NULL;
    ra_status st = remap(swin_file("", 1), &g, &arch);   /* Swinv2Model: no prefix, no head */
    CHECK(st == RA_OK && !strcmp(arch, "swinv2"), "swinv2: %s", ra_last_error());
    if (st) return;
    CHECK(ra_st_count(g) == 4 + 2 * 17 + 3 + 2, "swinv2: %d tensors", ra_st_count(g));
    check_shape(g, "layers.0.blocks.0.attn.q_bias", 1, 4, 0);
    check_shape(g, "layers.1.blocks.0.attn.v_bias", 1, 8, 0);
    check_shape(g, "layers.1.blocks.0.attn.logit_scale", 1, 1, 0);
    check_shape(g, "layers.1.blocks.0.attn.cpb_mlp.0.weight", 2, 512, 2);
    check_shape(g, "layers.1.blocks.0.attn.cpb_mlp.0.bias", 1, 512, 0);
    check_shape(g, "layers.1.blocks.0.attn.cpb_mlp.2.weight", 2, 1, 512);
    check_shape(g, "layers.0.downsample.norm.weight", 1, 8, 0);
    CHECK(!ra_st_find(g, "layers.0.blocks.0.attn.qkv.bias") && !ra_st_find(g, "head.weight"),
          "swinv2: a qkv bias or a head");
    check_joined(g, "layers.1.blocks.0.attn.qkv.weight", 8, 8, (const float[]){1000, 2000, 3000});
    const ra_st_tensor *qb = ra_st_find(g, "layers.1.blocks.0.attn.q_bias");
    float v[8] = {0};
    CHECK(qb && ra_st_read_f32(v, g, qb) == RA_OK && v[0] == 4000 && v[7] == 4007,
          "swinv2: q_bias is not query.bias");
    ra_st_close(g);
}

/* A ViTModel (prefix "") or ViTForImageClassification ("vit."): 2 layers,
 * C = 4, 5 patches of 2x2x3. */
static builder *vit_file(const char *p, int pooler, int qkv_bias) {
    builder *b = new_file();
    char nm[200];
#define T(s) (snprintf(nm, sizeof nm, "%s%s", p, s), nm)
    add(b, T("embeddings.cls_token"), RA_DTYPE_F32, 2, 1, 4, 0);
    add(b, T("embeddings.position_embeddings"), RA_DTYPE_F32, 2, 5, 4, 0);
    add(b, T("embeddings.patch_embeddings.projection.weight"), RA_DTYPE_F32, 2, 4, 12, 0);
    add(b, T("embeddings.patch_embeddings.projection.bias"), RA_DTYPE_F32, 1, 4, 0, 0);
    for (int i = 0; i < 2; i++) {
        char blk[120];
        snprintf(blk, sizeof blk, "%sencoder.layer.%d.", p, i);
#define B(x) (snprintf(nm, sizeof nm, "%s%s", blk, x), nm)
        add(b, B("layernorm_before.weight"), RA_DTYPE_F32, 1, 4, 0, 0);
        add(b, B("layernorm_before.bias"), RA_DTYPE_F32, 1, 4, 0, 0);
        add(b, B("attention.attention.query.weight"), RA_DTYPE_F32, 2, 4, 4, 100 * i + 1000);
        add(b, B("attention.attention.key.weight"), RA_DTYPE_F32, 2, 4, 4, 100 * i + 2000);
        add(b, B("attention.attention.value.weight"), RA_DTYPE_F32, 2, 4, 4, 100 * i + 3000);
        if (qkv_bias) {
            add(b, B("attention.attention.query.bias"), RA_DTYPE_F32, 1, 4, 0, 4000);
            add(b, B("attention.attention.key.bias"), RA_DTYPE_F32, 1, 4, 0, 5000);
            add(b, B("attention.attention.value.bias"), RA_DTYPE_F32, 1, 4, 0, 6000);
        }
        add(b, B("attention.output.dense.weight"), RA_DTYPE_F32, 2, 4, 4, 0);
        add(b, B("attention.output.dense.bias"), RA_DTYPE_F32, 1, 4, 0, 0);
        add(b, B("layernorm_after.weight"), RA_DTYPE_F32, 1, 4, 0, 0);
        add(b, B("layernorm_after.bias"), RA_DTYPE_F32, 1, 4, 0, 0);
        add(b, B("intermediate.dense.weight"), RA_DTYPE_F32, 2, 16, 4, 0);
        add(b, B("intermediate.dense.bias"), RA_DTYPE_F32, 1, 16, 0, 0);
        add(b, B("output.dense.weight"), RA_DTYPE_F32, 2, 4, 16, 0);
        add(b, B("output.dense.bias"), RA_DTYPE_F32, 1, 4, 0, 0);
#undef B
    }
    add(b, T("layernorm.weight"), RA_DTYPE_F32, 1, 4, 0, 0);
    add(b, T("layernorm.bias"), RA_DTYPE_F32, 1, 4, 0, 0);
#undef T
    if (pooler) {
        add(b, "pooler.dense.weight", RA_DTYPE_F32, 2, 4, 4, 0);
        add(b, "pooler.dense.bias", RA_DTYPE_F32, 1, 4, 0, 0);
    }
    if (*p) {
        add(b, "classifier.weight", RA_DTYPE_F32, 2, 7, 4, 0);
        add(b, "classifier.bias", RA_DTYPE_F32, 1, 7, 0, 0);
    }
    return b;
}

static void test_vit_names(void) {
    const char *arch = NULL;
    ra_st_file *g = NULL;
    ra_status st = remap(vit_file("", 1, 1), &g, &arch);   /* ViTModel with its pooler */
    CHECK(st == RA_OK && !strcmp(arch, "vit"), "vit: %s", ra_last_error());
    if (st) return;
    CHECK(ra_st_count(g) == 4 + 2 * 12 + 2, "vit: %d tensors (the pooler kept?)", ra_st_count(g));
    check_shape(g, "cls_token", 2, 1, 4);
    check_shape(g, "pos_embed", 2, 5, 4);
    check_shape(g, "patch_embed.proj.bias", 1, 4, 0);
    check_shape(g, "blocks.1.norm1.weight", 1, 4, 0);
    check_shape(g, "blocks.1.attn.proj.weight", 2, 4, 4);
    check_shape(g, "blocks.1.mlp.fc1.weight", 2, 16, 4);
    check_shape(g, "blocks.0.mlp.fc2.weight", 2, 4, 16);
    check_shape(g, "norm.bias", 1, 4, 0);
    check_joined(g, "blocks.1.attn.qkv.weight", 4, 4, (const float[]){1100, 2100, 3100});
    check_joined(g, "blocks.0.attn.qkv.bias", 4, 1, (const float[]){4000, 5000, 6000});
    CHECK(!ra_st_find(g, "pooler.dense.weight") && !ra_st_find(g, "head.weight"), "vit: pooler");
    ra_st_close(g);

    st = remap(vit_file("vit.", 0, 0), &g, &arch);   /* ViTForImageClassification, no qkv bias */
    CHECK(st == RA_OK && !strcmp(arch, "vit"), "vit.: %s", ra_last_error());
    if (st) return;
    CHECK(ra_st_count(g) == 4 + 2 * 11 + 2 + 2 && !ra_st_find(g, "blocks.0.attn.qkv.bias"),
          "vit.: %d tensors", ra_st_count(g));
    check_shape(g, "head.weight", 2, 7, 4);
    check_joined(g, "blocks.0.attn.qkv.weight", 4, 4, (const float[]){1000, 2000, 3000});
    ra_st_close(g);
}

/* A file that is not transformers' passes through untouched. */
static void test_not_hf(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/net_swin_timm.model.safetensors", dir);
    ra_st_file *f = NULL, *g = NULL;
    const char *arch = "x";
    CHECK(ra_st_open(&f, p) == RA_OK, "open %s", p);
    CHECK(rai_hf_remap(&g, f, &arch) == RA_OK && g == f && arch == NULL, "timm file changed");
    ra_st_close(g);
}

/* ---- refusals ----------------------------------------------------------------- */

static void refused(builder *b, const char *what, const char *needle) {
    ra_st_file *g = (ra_st_file *)1;
    const char *arch = "x";
    const ra_status st = remap(b, &g, &arch);
    CHECK(st == RA_ERR_FORMAT && g == NULL && arch == NULL && strstr(ra_last_error(), needle),
          "%s: status %d, \"%s\" (wanted %s)", what, st, ra_last_error(), needle);
    ra_st_close(st ? NULL : g);
}

static void test_refusals(void) {
    /* a copy of a ViT file without one key (the copy keeps the original) */
    builder *b = vit_file("vit.", 0, 1), *c = new_file();
    CHECK(rai_st_keep(b->f, free_mem, b) == RA_OK, "keep");
    ra_st_file *orig = b->f;
    for (int i = 0; i < ra_st_count(orig); i++) {
        const ra_st_tensor *t = ra_st_at(orig, i);
        const rai_st_part *pt;
        if (!strcmp(t->name, "vit.encoder.layer.1.attention.attention.key.weight")) continue;
        CHECK(rai_st_parts(orig, t, &pt) == 1, "parts");
        CHECK(rai_st_add(c->f, t->name, t->dtype, t->ndim, t->shape, pt, 1) == RA_OK, "copy");
    }
    CHECK(rai_st_keep_file(c->f, orig) == RA_OK, "keep");
    refused(c, "missing key", "vit.encoder.layer.1.attention.attention.key.weight' is missing");

    b = vit_file("vit.", 0, 0);
    add(b, "vit.encoder.layer.2.attention.attention.query.weight", RA_DTYPE_F32, 2, 4, 4, 0);
    add(b, "vit.encoder.layer.2.attention.attention.key.weight", RA_DTYPE_F32, 2, 4, 3, 0);
    add(b, "vit.encoder.layer.2.attention.attention.value.weight", RA_DTYPE_F32, 2, 4, 4, 0);
    refused(b, "q/k shapes", "'vit.encoder.layer.2.attention.attention.key.weight' F32 (4, 3)");

    b = vit_file("vit.", 0, 0);
    add(b, "vit.encoder.layer.2.attention.attention.query.weight", RA_DTYPE_F32, 2, 4, 4, 0);
    add(b, "vit.encoder.layer.2.attention.attention.key.weight", RA_DTYPE_F16, 2, 4, 4, 0);
    add(b, "vit.encoder.layer.2.attention.attention.value.weight", RA_DTYPE_F32, 2, 4, 4, 0);
    refused(b, "q/k dtypes", "key.weight' F16 (4, 4) cannot be joined");

    b = vit_file("vit.", 0, 0);
    add(b, "vit.encoder.layer.2.attention.attention.query.bias", RA_DTYPE_F32, 2, 4, 1, 0);
    add(b, "vit.encoder.layer.2.attention.attention.key.bias", RA_DTYPE_F32, 2, 4, 1, 0);
    add(b, "vit.encoder.layer.2.attention.attention.value.bias", RA_DTYPE_F32, 2, 4, 1, 0);
    refused(b, "2-D biases", "1-D shape");

    b = swin_file("swin.", 0);
    add(b, "swin.encoder.layers.0.blocks.0.attention.self.rotary", RA_DTYPE_F32, 1, 4, 0, 0);
    refused(b, "unknown name", "'swin.encoder.layers.0.blocks.0.attention.self.rotary' is not a "
            "transformers Swin name");

    b = swin_file("swin.", 0);
    add(b, "swin.encoder.layers.0.blocks.0.attention.self.logit_scale", RA_DTYPE_F32, 1, 1, 0, 0);
    refused(b, "v2 name in a v1 file", "logit_scale' is not a transformers Swin name");

    b = swin_file("swinv2.", 1);
    add(b, "swinv2.encoder.layers.1.blocks.0.attention.self.key.bias", RA_DTYPE_F32, 1, 8, 0, 0);
    refused(b, "swinv2 key bias", "SwinV2's key has no bias");

    b = swin_file("swin.", 0);
    add(b, "decoder.0.weight", RA_DTYPE_F32, 2, 48, 8, 0);
    refused(b, "masked image modeling", "'decoder.0.weight': a masked-image-modeling model "
            "(SwinForMaskedImageModeling)");

    b = vit_file("vit.", 0, 1);
    add(b, "vit.embeddings.mask_token", RA_DTYPE_F32, 2, 1, 4, 0);
    refused(b, "mask token", "'vit.embeddings.mask_token': a masked-image-modeling model");

    b = new_file();
    add(b, "beit.embeddings.patch_embeddings.projection.weight", RA_DTYPE_F32, 2, 4, 12, 0);
    refused(b, "another model", "a transformers model under 'beit.'");

    b = swin_file("swin.", 0);
    add(b, "encoder.layers.0.blocks.0.layernorm_before.weight", RA_DTYPE_F32, 1, 4, 0, 0);
    refused(b, "outside the prefix", "'encoder.layers.0.blocks.0.layernorm_before.weight' is "
            "outside the 'swin.'");

    b = swin_file("swin.", 0);
    add(b, "embeddings.patch_embeddings.projection.weight", RA_DTYPE_F32, 2, 4, 12, 0);
    refused(b, "two patch embeddings", "a second transformers patch embedding");

    b = swin_file("swin.", 0);
    add(b, "swin.encoder.layers.01.blocks.0.layernorm_before.weight", RA_DTYPE_F32, 1, 4, 0, 0);
    refused(b, "a leading zero", "layers.01.blocks.0.layernorm_before.weight' is not");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_hf FIXTURE_DIR\n");
        return 2;
    }
    if (argc == 4 && !strcmp(argv[2], "--seeds")) {
        static const struct { const char *name, *pfx; int vit; } seeds[] = {
            {"net_swin_official", "swin.", 0}, {"net_swin_official_w7", "", 0},
            {"v2_net_official", "swinv2.", 0}, {"vit_net_token", "vit.", 1}};
        for (int i = 0; i < 4; i++) {
            char src[512], out[512];
            snprintf(src, sizeof src, "%s/%s.model.safetensors", argv[1], seeds[i].name);
            snprintf(out, sizeof out, "%s/%s_hf.safetensors", argv[3], seeds[i].name);
            CHECK(write_hf(src, out, seeds[i].vit, seeds[i].pfx), "write %s", out);
        }
        printf("%d passed, %d failed\n", check_passed, check_failed);
        return check_failed ? 1 : 0;
    }
    CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp");
    round_trip(argv[1], "net_swin_official", 0, "swin.", "swin");
    round_trip(argv[1], "net_swin_official_w7", 0, "", "swin");   /* SwinModel names + classifier */
    round_trip(argv[1], "net_swin_ape_nohead", 0, "", "swin");   /* SwinModel: ape, no head */
    round_trip(argv[1], "v2_net_official", 0, "swinv2.", "swinv2");
    round_trip(argv[1], "vit_net_token", 1, "vit.", "vit");
    test_swin_names();
    test_swinv2_names();
    test_vit_names();
    test_not_hf(argv[1]);
    test_refusals();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    CHECK(system(cmd) == 0, "rm %s", tmpdir);
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}
