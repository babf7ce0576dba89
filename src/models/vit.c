/* vit.c - the vit arch: timm's VisionTransformer (docs/reference.md, section 2), inference and
 * training (forward_train / backward: see "training" below).
 *
 *   x (B, Cin, H, W) --patch_embed (Conv2d k = s = P)--> (B, L, C)
 *   prepend [cls_token, reg_token...], add pos_embed (1, prefix + L, C)
 *   [norm_pre]
 *   depth x  x = x + ls1 * attn(norm1(x));  x = x + ls2 * mlp(norm2(x))
 *            attn = the vit_attention layer (qkv Linear(C, 3C), proj),
 *            mlp  = fc1 -> exact GELU -> fc2, LayerNorm eps 1e-6
 *   norm -> pool ("token": x[:, 0]; "avg": mean of the patch tokens ...)
 *   -> [fc_norm] -> head Linear(C, num_classes)  -> y (B, num_classes)
 *
 * Hyperparameters are timm's constructor arguments. The nine keys of
 * docs/reference.md, section 2 (img_size, patch_size, in_chans,
 * num_classes, embed_dim, depth, num_heads, mlp_ratio, qkv_bias) are
 * required; these timm options are
 * read with timm's defaults when absent: global_pool ("token"; also "avg",
 * "max", "avgmax" and "" = no pooling, y (B, N, num_classes)), class_token
 * (true), reg_tokens (0), no_embed_class (false), pos_embed ("learn" or
 * "none"), pre_norm (false), final_norm (true), fc_norm (absent = None:
 * true for the avg/max pools), pool_include_prefix (false), init_values
 * (absent = no LayerScale), proj_bias (true), dynamic_img_size (false),
 * dynamic_img_pad (false). qk_norm, scale_attn_norm, scale_mlp_norm and
 * the "map"/"prr" pools are refused; other layer types too.
 *
 * Image size. timm's PatchEmbed asserts that the input is img_size unless
 * the model was built with dynamic_img_size=True; so does this arch
 * (RA_ERR_SHAPE naming both sizes). With dynamic_img_size the position
 * embedding is resampled as timm's resample_abs_pos_embed does: the patch
 * part, as a (gh0, gw0) grid, through torch.nn.functional.interpolate(mode=
 * "bicubic", antialias=True) (PyTorch's separable antialiased kernel,
 * Keys a = -0.5, width first), prefix rows kept; and, like timm, not at
 * all when the new grid is square with as many tokens as the old one.
 * The input must be a multiple of the patch size (RA_ERR_SHAPE), unless
 * dynamic_img_pad zero-pads it at the bottom/right as timm does.
 *
 * Naming schemes (ops->detect): "timm" (canonical) and "torchvision"
 * (torchvision.models.VisionTransformer: conv_proj, class_token,
 * encoder.pos_embedding, encoder.layers.encoder_layer_i.{ln_1,
 * self_attention.in_proj_weight/in_proj_bias/out_proj, ln_2, mlp.0, mlp.3},
 * encoder.ln, heads.head). torchvision computes the same function
 * (pre-norm blocks, LayerNorm eps 1e-6, exact GELU, class token first,
 * position embedding added after the concatenation, head on token 0);
 * its nn.MultiheadAttention scales q before q.k, the same up to rounding.
 * Its representation_size (heads.pre_logits) and conv stems are refused as
 * unexpected tensors. */
#include "models/model.h"
#include "layers/block.h"
#include "layers/head.h"
#include "layers/stem.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VIT_EPS 1e-6f   /* timm's and torchvision's; layer_norm_eps changes it */
#define VIT_MAX_DIM 65536
#define VIT_MAX_CLASSES (1 << 24)
#define VIT_MAX_DEPTH 4096
/* Elements of any one activation buffer: as the attention layer's bound. */
#define VIT_MAX_ELEMS ((int64_t)1 << 40)


/* The training forward's tape, one flat buffer grown as needed and kept
 * between steps (llm.c's activations). */
typedef struct {
    float *buf;
    size_t cap;            /* floats in buf */
    int valid;             /* a training forward filled it */
    int dims[5];           /* B, H, W, gh, gw of that forward */
    rai_block_tape *blk;    /* (depth) */
    rai_stem_tape stem;    /* the patch embedding: its patch columns */
    float *x0;             /* (rows, C) tokens, norm_pre's input (pre_norm only) */
    float *pre_mean, *pre_rstd;
    float *xf;             /* (rows, C) the last block's output: the head's input */
    rai_head_tape head;    /* final norm, pooling, fc_norm, head */
} vit_tape;

typedef struct {
    int img[2], patch, in_chans, num_classes, dim, depth, heads, hidden;
    int qkv_bias, proj_bias, class_token, reg_tokens, no_embed_class, has_pos;
    int pre_norm, final_norm, use_fc_norm, pool, pool_prefix, layer_scale;
    int dyn_size, dyn_pad;
    double drop_path_rate;   /* timm's: linspace(0, rate, depth) over the blocks */
    int grid[2];   /* the patch grid of img_size: the grid of pos_embed */
    int prefix;    /* class + register tokens */
    const float *cls, *reg, *pos, *pre_w, *pre_b;
    rai_stem stem;         /* the patch embedding (stem.c) */
    rai_head head;         /* final norm, pooling, fc_norm, head (head.c) */
    float *zeros;  /* (C): the proj bias the attention layer needs when proj_bias is false */
    rai_block *blocks;
    ra_attn_params *attn_w;   /* (depth) each block's attention weights, as the file has
                                 them (their gradients sit at their offsets) */
    rai_arena_cache ws;   /* the forward's workspace, kept between calls */
    vit_tape tape;       /* the training forward's activations */
    float eps;             /* the LayerNorms' epsilon (layer_norm_eps) */
} vit_impl;

/* ---- metadata ----------------------------------------------------------- */

/* A finite double (Python's float(str) of the value); given == NULL means
 * the key is required. */
static ra_status meta_double(const ra_st_file *f, const char *key, double *out, int *given) {
    if (given) *given = 0;
    else if (!ra_st_meta(f, key))
        return rai_fail(RA_ERR_FORMAT, "metadata key \"%s\" is missing (arch vit)", key);
    return rai_meta_double_opt(f, key, out, given);
}

static ra_status meta_pool(const ra_st_file *f, int *pool) {
    const char *v = ra_st_meta(f, "global_pool");
    if (!v || strcmp(v, "token") == 0) *pool = RAI_POOL_TOKEN;
    else if (strcmp(v, "avg") == 0) *pool = RAI_POOL_AVG;
    else if (strcmp(v, "max") == 0) *pool = RAI_POOL_MAX;
    else if (strcmp(v, "avgmax") == 0) *pool = RAI_POOL_AVGMAX;
    else if (strcmp(v, "") == 0) *pool = RAI_POOL_NONE;
    else
        return rai_fail(RA_ERR_FORMAT, "metadata global_pool = \"%.40s\" is not supported "
                        "(token, avg, max, avgmax or \"\")", v);
    return RA_OK;
}

/* Options this arch does not compute: refused rather than ignored. */
static ra_status meta_unsupported(const ra_st_file *f) {
    static const char *const flags[] = {"qk_norm", "scale_attn_norm", "scale_mlp_norm"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        int on = 0;
        ra_status st = rai_meta_bool_opt(f, flags[i], &on);
        if (st) return st;
        if (on) return rai_fail(RA_ERR_FORMAT, "metadata %s = true is not supported by vit",
                                flags[i]);
    }
    static const struct { const char *key, *ok1, *ok2; } layers[] = {
        {"norm_layer", "layernorm", "LayerNorm"}, {"act_layer", "gelu", "GELU"},
        {"attn_layer", "attn", "Attention"},      {"embed_norm_layer", "", ""},
        {"block_fn", "Block", "Block"},           {"mlp_layer", "Mlp", "Mlp"},
        {"embed_layer", "PatchEmbed", "PatchEmbed"}};
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        const char *v = ra_st_meta(f, layers[i].key);
        if (v && *v && strcmp(v, layers[i].ok1) && strcmp(v, layers[i].ok2))
            return rai_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\" is not supported by vit",
                            layers[i].key, v);
    }
    return RA_OK;
}

/* ---- declaration -------------------------------------------------------- */

static ra_status decl(ra_model *m, const char *name, int ndim, int64_t d0, int64_t d1,
                      int64_t d2, int64_t d3) {
    const int64_t shape[4] = {d0, d1, d2, d3};
    return rai_model_declare(m, name, ndim, shape, 0);
}

static ra_status vit_declare(ra_model *m, const ra_st_file *f) {
    vit_impl *v = calloc(1, sizeof *v);
    if (!v) return rai_fail(RA_ERR_NOMEM, "vit: out of memory");
    m->impl = v;
    int patch[2] = {0, 0};
    double ratio = 0, init_values = 0;
    int has_init = 0, has_dpr = 0, fc_norm = -1;
    const char *pe;
    v->class_token = v->final_norm = v->proj_bias = v->has_pos = 1;

    ra_status st = rai_meta_pair(f, "img_size", v->img, 1, VIT_MAX_DIM);
    if (!st) st = rai_meta_pair(f, "patch_size", patch, 1, VIT_MAX_DIM);
    if (!st) st = rai_meta_int(f, "in_chans", &v->in_chans, 1, VIT_MAX_DIM);
    if (!st) st = rai_meta_int(f, "num_classes", &v->num_classes, 0, VIT_MAX_CLASSES);
    if (!st) st = rai_meta_int(f, "embed_dim", &v->dim, 1, VIT_MAX_DIM);
    if (!st) st = rai_meta_int(f, "depth", &v->depth, 0, VIT_MAX_DEPTH);
    if (!st) st = rai_meta_int(f, "num_heads", &v->heads, 1, VIT_MAX_DIM);
    if (!st) st = meta_double(f, "mlp_ratio", &ratio, NULL);
    if (!st && !ra_st_meta(f, "qkv_bias"))
        st = rai_fail(RA_ERR_FORMAT, "metadata key \"qkv_bias\" is missing (arch vit)");
    if (!st) st = rai_meta_bool_opt(f, "qkv_bias", &v->qkv_bias);
    /* timm options, with timm's defaults */
    if (!st) st = meta_pool(f, &v->pool);
    if (!st) st = rai_meta_bool_opt(f, "class_token", &v->class_token);
    if (!st) st = rai_meta_int_opt(f, "reg_tokens", &v->reg_tokens, 0, VIT_MAX_DIM);
    if (!st) st = rai_meta_bool_opt(f, "no_embed_class", &v->no_embed_class);
    if (!st) st = rai_meta_bool_opt(f, "pre_norm", &v->pre_norm);
    if (!st) st = rai_meta_bool_opt(f, "final_norm", &v->final_norm);
    if (!st) st = rai_meta_bool_opt(f, "fc_norm", &fc_norm);
    if (!st) st = rai_meta_bool_opt(f, "pool_include_prefix", &v->pool_prefix);
    if (!st) st = rai_meta_bool_opt(f, "proj_bias", &v->proj_bias);
    if (!st) st = rai_meta_bool_opt(f, "dynamic_img_size", &v->dyn_size);
    if (!st) st = rai_meta_bool_opt(f, "dynamic_img_pad", &v->dyn_pad);
    if (!st) st = meta_double(f, "init_values", &init_values, &has_init);
    if (!st) st = meta_double(f, "drop_path_rate", &v->drop_path_rate, &has_dpr);
    if (!st && !(v->drop_path_rate >= 0.0 && v->drop_path_rate <= 1.0))
        st = rai_fail(RA_ERR_FORMAT, "metadata drop_path_rate = %g is not in [0, 1]",
                      v->drop_path_rate);
    int has_eps = 0;
    v->eps = VIT_EPS;
    if (!st) st = rai_meta_float_opt(f, "layer_norm_eps", &v->eps, &has_eps);
    if (!st && !(v->eps > 0 && v->eps <= 1e-2f))
        st = rai_fail(RA_ERR_FORMAT, "metadata layer_norm_eps = %g is not in (0, 0.01]", v->eps);
    if (!st) st = meta_unsupported(f);
    if (st) return st;
    if ((pe = ra_st_meta(f, "pos_embed")) != NULL) {
        if (strcmp(pe, "learn") == 0) v->has_pos = 1;
        else if (strcmp(pe, "none") == 0 || strcmp(pe, "") == 0) v->has_pos = 0;
        else return rai_fail(RA_ERR_FORMAT, "metadata pos_embed = \"%.40s\" is not learn or none", pe);
    }

    /* the configuration, checked as timm's constructor asserts it */
    if (patch[0] != patch[1])
        return rai_fail(RA_ERR_FORMAT, "metadata patch_size = %d,%d: only square patches are "
                        "supported", patch[0], patch[1]);
    v->patch = patch[0];
    if (v->dim % v->heads)
        return rai_fail(RA_ERR_FORMAT, "embed_dim %d is not divisible by num_heads %d", v->dim,
                        v->heads);
    if (!(ratio > 0) || ratio * v->dim >= VIT_MAX_DIM * 64.0)
        return rai_fail(RA_ERR_FORMAT, "metadata mlp_ratio = %g is out of range", ratio);
    v->hidden = (int)(v->dim * ratio);   /* int(dim * mlp_ratio), as timm's Block */
    if (v->hidden == 0) v->hidden = v->dim;   /* Mlp: hidden_features or in_features */
    if (!v->class_token && v->pool == RAI_POOL_TOKEN)
        return rai_fail(RA_ERR_FORMAT, "global_pool \"token\" needs class_token (timm asserts it)");
    v->use_fc_norm = fc_norm >= 0 ? fc_norm
                                  : v->pool == RAI_POOL_AVG || v->pool == RAI_POOL_MAX ||
                                        v->pool == RAI_POOL_AVGMAX;
    v->layer_scale = has_init && init_values != 0.0;   /* LayerScale if init_values */
    v->prefix = v->class_token + v->reg_tokens;
    ra_status g = ra_patch_grid(&v->grid[0], &v->grid[1], v->img[0], v->img[1], v->patch,
                                v->dyn_pad);
    if (g)
        return rai_fail(RA_ERR_FORMAT, "metadata img_size = %d,%d with patch_size %d: %s",
                        v->img[0], v->img[1], v->patch,
                        g == RA_ERR_SHAPE ? "not a multiple of the patch size" : "too many patches");
    const int64_t C = v->dim, L = (int64_t)v->grid[0] * v->grid[1], P = v->patch;
    const int64_t embed_len = L + (v->no_embed_class ? 0 : v->prefix);

    /* parameters, in timm's state_dict() order */
    if (v->class_token) st = decl(m, "cls_token", 3, 1, 1, C, 0);
    if (!st && v->reg_tokens) st = decl(m, "reg_token", 3, 1, v->reg_tokens, C, 0);
    if (!st && v->has_pos) st = decl(m, "pos_embed", 3, 1, embed_len, C, 0);
    if (!st) st = decl(m, "patch_embed.proj.weight", 4, C, v->in_chans, P, P);
    if (!st && !v->pre_norm) st = decl(m, "patch_embed.proj.bias", 1, C, 0, 0, 0);
    if (!st && v->pre_norm) st = decl(m, "norm_pre.weight", 1, C, 0, 0, 0);
    if (!st && v->pre_norm) st = decl(m, "norm_pre.bias", 1, C, 0, 0, 0);
    for (int i = 0; i < v->depth && !st; i++) {
        char nm[96];
#define BLK(suffix, nd, a, b)                                          \
        if (!st) {                                                     \
            snprintf(nm, sizeof nm, "blocks.%d.%s", i, suffix);        \
            st = decl(m, nm, nd, a, b, 0, 0);                          \
        }
        BLK("norm1.weight", 1, C, 0);
        BLK("norm1.bias", 1, C, 0);
        BLK("attn.qkv.weight", 2, 3 * C, C);
        if (v->qkv_bias) BLK("attn.qkv.bias", 1, 3 * C, 0);
        BLK("attn.proj.weight", 2, C, C);
        if (v->proj_bias) BLK("attn.proj.bias", 1, C, 0);
        if (v->layer_scale) BLK("ls1.gamma", 1, C, 0);
        BLK("norm2.weight", 1, C, 0);
        BLK("norm2.bias", 1, C, 0);
        BLK("mlp.fc1.weight", 2, v->hidden, C);
        if (v->proj_bias) BLK("mlp.fc1.bias", 1, v->hidden, 0);
        BLK("mlp.fc2.weight", 2, C, v->hidden);
        if (v->proj_bias) BLK("mlp.fc2.bias", 1, C, 0);
        if (v->layer_scale) BLK("ls2.gamma", 1, C, 0);
#undef BLK
    }
    if (!st && v->final_norm && !v->use_fc_norm) st = decl(m, "norm.weight", 1, C, 0, 0, 0);
    if (!st && v->final_norm && !v->use_fc_norm) st = decl(m, "norm.bias", 1, C, 0, 0, 0);
    if (!st && v->final_norm && v->use_fc_norm) st = decl(m, "fc_norm.weight", 1, C, 0, 0, 0);
    if (!st && v->final_norm && v->use_fc_norm) st = decl(m, "fc_norm.bias", 1, C, 0, 0, 0);
    if (!st && v->num_classes) st = decl(m, "head.weight", 2, v->num_classes, C, 0, 0);
    if (!st && v->num_classes) st = decl(m, "head.bias", 1, v->num_classes, 0, 0, 0);
    return st;
}

/* ---- naming schemes ----------------------------------------------------- */

/* torchvision name <-> timm name. Top level, then the suffixes inside
 * encoder.layers.encoder_layer_i. <-> blocks.i.; mlp.linear_1/linear_2 are
 * the names of torchvision's MLPBlock before version 2 (it renames them on
 * load), accepted in that direction only. */
static const char *const tv_top[][2] = {
    {"conv_proj.weight", "patch_embed.proj.weight"}, {"conv_proj.bias", "patch_embed.proj.bias"},
    {"class_token", "cls_token"},                    {"encoder.pos_embedding", "pos_embed"},
    {"encoder.ln.weight", "norm.weight"},            {"encoder.ln.bias", "norm.bias"},
    {"heads.head.weight", "head.weight"},            {"heads.head.bias", "head.bias"}};
static const char *const tv_block[][2] = {
    {"ln_1.weight", "norm1.weight"},
    {"ln_1.bias", "norm1.bias"},
    {"self_attention.in_proj_weight", "attn.qkv.weight"},
    {"self_attention.in_proj_bias", "attn.qkv.bias"},
    {"self_attention.out_proj.weight", "attn.proj.weight"},
    {"self_attention.out_proj.bias", "attn.proj.bias"},
    {"ln_2.weight", "norm2.weight"},
    {"ln_2.bias", "norm2.bias"},
    {"mlp.0.weight", "mlp.fc1.weight"},
    {"mlp.0.bias", "mlp.fc1.bias"},
    {"mlp.3.weight", "mlp.fc2.weight"},
    {"mlp.3.bias", "mlp.fc2.bias"},
    {"mlp.linear_1.weight", "mlp.fc1.weight"},
    {"mlp.linear_1.bias", "mlp.fc1.bias"},
    {"mlp.linear_2.weight", "mlp.fc2.weight"},
    {"mlp.linear_2.bias", "mlp.fc2.bias"}};
#define NTOP (sizeof tv_top / sizeof tv_top[0])
#define NBLOCK (sizeof tv_block / sizeof tv_block[0])
#define NBLOCK_CANON 12   /* the first 12 are the current names */

/* "<prefix><i>.<rest>" with i a decimal block number without leading
 * zeros: *i and the rest, or 0. */
static int split_block(const char *name, const char *prefix, int *i, const char **rest) {
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0) return 0;
    const char *p = name + n;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '.')) return 0;
    long v = 0;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (*p++ - '0');
        if (v > VIT_MAX_DEPTH) return 0;
    }
    if (*p != '.') return 0;
    *i = (int)v;
    *rest = p + 1;
    return 1;
}

/* A torchvision name as its timm name in buf; 0 if it has none. */
static int tv_to_timm(const char *name, char *buf, size_t n) {
    for (size_t k = 0; k < NTOP; k++)
        if (strcmp(name, tv_top[k][0]) == 0) return snprintf(buf, n, "%s", tv_top[k][1]), 1;
    int i;
    const char *rest;
    if (split_block(name, "encoder.layers.encoder_layer_", &i, &rest))
        for (size_t k = 0; k < NBLOCK; k++)
            if (strcmp(rest, tv_block[k][0]) == 0)
                return snprintf(buf, n, "blocks.%d.%s", i, tv_block[k][1]), 1;
    return 0;
}

/* A timm name as its torchvision name (current spelling, alt: the legacy
 * one or ""); 0 if torchvision has no such parameter. */
static int timm_to_tv(const char *name, char *buf, size_t n, char *alt, size_t nalt) {
    alt[0] = 0;
    for (size_t k = 0; k < NTOP; k++)
        if (strcmp(name, tv_top[k][1]) == 0) return snprintf(buf, n, "%s", tv_top[k][0]), 1;
    int i;
    const char *rest;
    if (split_block(name, "blocks.", &i, &rest))
        for (size_t k = 0; k < NBLOCK_CANON; k++)
            if (strcmp(rest, tv_block[k][1]) == 0) {
                snprintf(buf, n, "encoder.layers.encoder_layer_%d.%s", i, tv_block[k][0]);
                for (size_t j = NBLOCK_CANON; j < NBLOCK; j++)
                    if (strcmp(rest, tv_block[j][1]) == 0)
                        snprintf(alt, nalt, "encoder.layers.encoder_layer_%d.%s", i,
                                 tv_block[j][0]);
                return 1;
            }
    return 0;
}

static int is_declared(const ra_model *m, const char *name) {
    for (int p = 0; p < m->nparams; p++)
        if (strcmp(m->params[p].name, name) == 0) return 1;
    return 0;
}

/* The scheme whose names cover more of the file's tensors; a file whose
 * tensors match neither is refused at its first tensor. For torchvision the
 * missing tensors are named here by their torchvision names (the loader
 * would give the timm ones); unexpected ones come first, as in the loader. */
static ra_status vit_detect(ra_model *m, const ra_st_file *f) {
    const int nt = ra_st_count(f);
    int ntimm = 0, ntv = 0;
    char buf[256], alt[256];
    for (int i = 0; i < nt; i++) {
        const char *name = ra_st_at(f, i)->name;
        ntimm += is_declared(m, name);
        ntv += tv_to_timm(name, buf, sizeof buf) && is_declared(m, buf);
    }
    if (nt > 0 && ntimm == 0 && ntv == 0)
        return rai_fail(RA_ERR_FORMAT, "unexpected tensor '%.80s' for arch vit: the file's "
                        "names match neither the timm nor the torchvision naming of the "
                        "configuration", ra_st_at(f, 0)->name);
    snprintf(m->scheme, sizeof m->scheme, "%s", ntv > ntimm ? "torchvision" : "timm");
    if (ntv <= ntimm) return RA_OK;
    for (int i = 0; i < nt; i++) {
        const char *name = ra_st_at(f, i)->name;
        if (!strncmp(name, RA_TRAIN_STATE_PREFIX, strlen(RA_TRAIN_STATE_PREFIX)))
            continue;   /* a checkpoint's optimiser state: the loader skips it */
        if (!tv_to_timm(name, buf, sizeof buf) || !is_declared(m, buf))
            return rai_fail(RA_ERR_FORMAT, "unexpected tensor '%.80s' for arch vit (naming "
                            "scheme torchvision)", name);
    }
    for (int p = 0; p < m->nparams; p++) {
        const char *canon = m->params[p].name;
        if (!timm_to_tv(canon, buf, sizeof buf, alt, sizeof alt))
            return rai_fail(RA_ERR_FORMAT, "tensor '%s' is missing (arch vit, naming scheme "
                            "torchvision, which has no such parameter: check the metadata)",
                            canon);
        if (!ra_st_find(f, buf) && !(alt[0] && ra_st_find(f, alt)))
            return rai_fail(RA_ERR_FORMAT, "tensor '%s' is missing (arch vit, naming scheme "
                            "torchvision; timm name %s)", buf, canon);
    }
    return RA_OK;
}

static rai_tensor_kind vit_canonical(const ra_model *m, const char *name, char *buf, size_t n) {
    if (strcmp(m->scheme, "torchvision") == 0)
        return tv_to_timm(name, buf, n) ? RA_TENSOR_PARAM : RA_TENSOR_UNKNOWN;
    snprintf(buf, n, "%s", name);
    return RA_TENSOR_PARAM;
}

/* ---- build -------------------------------------------------------------- */

static void vit_destroy(void *impl) {
    vit_impl *v = impl;
    if (!v) return;
    for (int i = 0; v->blocks && i < v->depth; i++) ra_attn_layer_free(v->blocks[i].attn);
    free(v->blocks);
    free(v->attn_w);
    rai_free(v->zeros);
    rai_arena_cache_free(&v->ws);
    rai_free(v->tape.buf);
    free(v->tape.blk);
    free(v);
}

static const float *blk_get(const ra_model *m, int i, const char *suffix) {
    char nm[96];
    snprintf(nm, sizeof nm, "blocks.%d.%s", i, suffix);
    return rai_model_get(m, nm);
}

static ra_status vit_build(ra_model *m, const ra_st_file *f) {
    (void)f;
    vit_impl *v = m->impl;
    v->cls = rai_model_get(m, "cls_token");
    v->reg = rai_model_get(m, "reg_token");
    v->pos = rai_model_get(m, "pos_embed");
    v->stem = (rai_stem){.in_chans = v->in_chans, .patch = v->patch, .kernel = v->patch,
                         .dim = v->dim, .pad = v->dyn_pad,
                         .w = rai_model_get(m, "patch_embed.proj.weight"),
                         .b = rai_model_get(m, "patch_embed.proj.bias")};
    v->pre_w = rai_model_get(m, "norm_pre.weight");
    v->pre_b = rai_model_get(m, "norm_pre.bias");
    v->head = (rai_head){.dim = v->dim, .eps = v->eps, .nw = rai_model_get(m, "norm.weight"),
                         .nb = rai_model_get(m, "norm.bias"), .pool = v->pool,
                         .skip = v->pool_prefix ? 0 : v->prefix,
                         .fw = rai_model_get(m, "fc_norm.weight"),
                         .fb = rai_model_get(m, "fc_norm.bias"),
                         .w = rai_model_get(m, "head.weight"), .b = rai_model_get(m, "head.bias"),
                         .classes = v->num_classes};
    if (!v->proj_bias && !(v->zeros = rai_calloc((size_t)v->dim, sizeof(float))))
        return rai_fail(RA_ERR_NOMEM, "vit: out of memory");
    if (v->depth && (!(v->blocks = calloc((size_t)v->depth, sizeof *v->blocks)) ||
                     !(v->attn_w = calloc((size_t)v->depth, sizeof *v->attn_w))))
        return rai_fail(RA_ERR_NOMEM, "vit: out of memory");
    ra_attn_config cfg = ra_attn_config_default(RA_ARCH_VIT_ATTENTION);
    cfg.dim = v->dim;
    cfg.num_heads = v->heads;
    cfg.qkv_bias = v->qkv_bias;
    for (int i = 0; i < v->depth; i++) {
        rai_block *b = &v->blocks[i];
        *b = (rai_block){.dim = v->dim, .hidden = v->hidden, .eps = v->eps};
        b->n1w = blk_get(m, i, "norm1.weight");
        b->n1b = blk_get(m, i, "norm1.bias");
        b->ls1 = blk_get(m, i, "ls1.gamma");
        b->n2w = blk_get(m, i, "norm2.weight");
        b->n2b = blk_get(m, i, "norm2.bias");
        b->ls2 = blk_get(m, i, "ls2.gamma");
        b->fc1w = blk_get(m, i, "mlp.fc1.weight");
        b->fc1b = blk_get(m, i, "mlp.fc1.bias");
        b->fc2w = blk_get(m, i, "mlp.fc2.weight");
        b->fc2b = blk_get(m, i, "mlp.fc2.bias");
        /* torch.linspace(0, rate, depth) in float32, as timm's dpr */
        b->drop_path = v->depth > 1 ? (float)(v->drop_path_rate * i / (v->depth - 1)) : 0.0f;
        ra_attn_params *p = &v->attn_w[i];
        *p = (ra_attn_params){.qkv_w = blk_get(m, i, "attn.qkv.weight"),
                              .qkv_b = blk_get(m, i, "attn.qkv.bias"),
                              .proj_w = blk_get(m, i, "attn.proj.weight"),
                              .proj_b = blk_get(m, i, "attn.proj.bias")};
        ra_attn_params layer = *p;   /* without proj_bias, the zeros it adds */
        if (!layer.proj_b) layer.proj_b = v->zeros;
        ra_status st = ra_attn_layer_create(&b->attn, &cfg, &layer);
        if (st) return st;
    }
    return RA_OK;
}

/* ---- position embedding resampling -------------------------------------- */

/* PyTorch's antialiased cubic filter (Keys, a = -0.5), in double on the
 * float argument as PyTorch's aa_filter. */
static float aa_cubic(float xf) {
    const double a = -0.5;
    double x = xf < 0 ? -(double)xf : xf;
    if (x < 1.0) return (float)(((a + 2.0) * x - (a + 3.0)) * x * x + 1);
    if (x < 2.0) return (float)((((x - 5) * x + 8) * x - 4) * a);
    return 0.0f;
}

/* One axis of interpolate(mode="bicubic", antialias=True, align_corners=
 * False) from in to out samples: for output i, taps xmin[i] .. xmin[i] +
 * xsize[i] - 1 with weights w[i * taps + j], computed in float as PyTorch's
 * _compute_weights_aa. */
typedef struct {
    int taps;
    int64_t *xmin, *xsize;
    float *w;
} aa_axis;

static void aa_axis_free(aa_axis *a) {
    free(a->xmin);
    free(a->xsize);
    free(a->w);
}

static ra_status aa_axis_make(aa_axis *a, int in, int out) {
    memset(a, 0, sizeof *a);
    const float scale = (float)in / (float)out;
    const float support = scale >= 1.0f ? 2.0f * scale : 2.0f;   /* interp_size 4 / 2 */
    a->taps = (int)ceilf(support) * 2 + 1;
    a->xmin = calloc((size_t)out, sizeof *a->xmin);
    a->xsize = calloc((size_t)out, sizeof *a->xsize);
    a->w = calloc((size_t)out * (size_t)a->taps, sizeof *a->w);
    if (!a->xmin || !a->xsize || !a->w) {
        aa_axis_free(a);
        return rai_fail(RA_ERR_NOMEM, "vit: out of memory resampling pos_embed");
    }
    const float invscale = scale >= 1.0f ? (float)(1.0 / scale) : 1.0f;
    for (int i = 0; i < out; i++) {
        const float center = (float)(scale * (i + 0.5));
        int64_t xmin = (int64_t)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int64_t xmax = (int64_t)(center + support + 0.5);
        if (xmax > in) xmax = in;
        int64_t xsize = xmax - xmin;
        if (xsize > a->taps) xsize = a->taps;
        if (xsize < 0) xsize = 0;
        float *w = a->w + (size_t)i * a->taps, total = 0.0f;
        for (int64_t j = 0; j < xsize; j++) {
            w[j] = aa_cubic((float)(((float)(j + xmin) - center + 0.5) * invscale));
            total += w[j];
        }
        for (int64_t j = 0; j < xsize && total != 0.0f; j++) w[j] /= total;
        a->xmin[i] = xmin;
        a->xsize[i] = xsize;
    }
    return RA_OK;
}

/* dst (n_out, C) rows with stride `step` rows between taps:
 * dst[i] = sum_j w[i, j] * src[(xmin[i] + j) * step], accumulated in float
 * in tap order. */
static void aa_apply(float *dst, const float *src, const aa_axis *a, int out, int64_t step,
                     int c) {
    for (int i = 0; i < out; i++) {
        const float *w = a->w + (size_t)i * a->taps;
        float *d = dst + (int64_t)i * c;
        const float *s0 = src + a->xmin[i] * step * c;
        for (int k = 0; k < c; k++) d[k] = a->xsize[i] > 0 ? s0[k] * w[0] : 0.0f;
        for (int64_t j = 1; j < a->xsize[i]; j++) {
            const float *s = s0 + j * step * c;
            for (int k = 0; k < c; k++) d[k] += s[k] * w[j];
        }
    }
}

/* out (nh * nw, C) = the (h0, w0, C) grid src resampled: width first, then
 * height, an axis whose size does not change is copied (as PyTorch). */
static ra_status resample_grid(float *out, const float *src, int h0, int w0, int nh, int nw,
                               int c) {
    aa_axis ah, aw;
    float *tmp = rai_alloc((size_t)h0 * (size_t)nw, (size_t)c * sizeof(float));
    if (!tmp) return rai_fail(RA_ERR_NOMEM, "vit: out of memory resampling pos_embed");
    ra_status st = aa_axis_make(&aw, w0, nw);
    if (st) return rai_free(tmp), st;
    if ((st = aa_axis_make(&ah, h0, nh))) return aa_axis_free(&aw), rai_free(tmp), st;
    if (nw == w0) memcpy(tmp, src, (size_t)h0 * nw * c * sizeof(float));
    else
        for (int y = 0; y < h0; y++)
            aa_apply(tmp + (int64_t)y * nw * c, src + (int64_t)y * w0 * c, &aw, nw, 1, c);
    if (nh == h0) memcpy(out, tmp, (size_t)nh * nw * c * sizeof(float));
    else
        for (int x = 0; x < nw; x++) {   /* column x: rows strided by nw */
            for (int i = 0; i < nh; i++) {
                const float *w = ah.w + (size_t)i * ah.taps;
                float *d = out + ((int64_t)i * nw + x) * c;
                const float *s0 = tmp + (ah.xmin[i] * nw + x) * c;
                for (int k = 0; k < c; k++) d[k] = ah.xsize[i] > 0 ? s0[k] * w[0] : 0.0f;
                for (int64_t j = 1; j < ah.xsize[i]; j++) {
                    const float *s = s0 + j * nw * c;
                    for (int k = 0; k < c; k++) d[k] += s[k] * w[j];
                }
            }
        }
    aa_axis_free(&aw);
    aa_axis_free(&ah);
    rai_free(tmp);
    return RA_OK;
}

/* The adjoint of resample_grid, ACCUMULATED: dsrc (h0 * w0, C) += R^T
 * dout (nh * nw, C), height first then width (the forward's steps in
 * reverse), as PyTorch's _upsample_bicubic2d_aa_backward. */
static ra_status resample_grid_backward(float *dsrc, const float *dout, int h0, int w0, int nh,
                                        int nw, int c) {
    aa_axis ah, aw;
    float *dtmp = rai_calloc((size_t)h0 * (size_t)nw, (size_t)c * sizeof(float));
    if (!dtmp) return rai_fail(RA_ERR_NOMEM, "vit: out of memory for the pos_embed gradient");
    ra_status st = aa_axis_make(&aw, w0, nw);
    if (st) return rai_free(dtmp), st;
    if ((st = aa_axis_make(&ah, h0, nh))) return aa_axis_free(&aw), rai_free(dtmp), st;
    if (nh == h0) memcpy(dtmp, dout, (size_t)nh * nw * c * sizeof(float));
    else
        for (int i = 0; i < nh; i++) {
            const float *w = ah.w + (size_t)i * ah.taps;
            for (int64_t j = 0; j < ah.xsize[i]; j++) {
                const float *g = dout + (int64_t)i * nw * c;
                float *d = dtmp + (ah.xmin[i] + j) * nw * c;
                for (int64_t k = 0; k < (int64_t)nw * c; k++) d[k] += w[j] * g[k];
            }
        }
    if (nw == w0) ra_add(dsrc, dsrc, dtmp, (int64_t)h0 * w0 * c);
    else
        for (int y = 0; y < h0; y++)
            for (int i = 0; i < nw; i++) {
                const float *w = aw.w + (size_t)i * aw.taps;
                const float *g = dtmp + ((int64_t)y * nw + i) * c;
                for (int64_t j = 0; j < aw.xsize[i]; j++) {
                    float *d = dsrc + ((int64_t)y * w0 + aw.xmin[i] + j) * c;
                    for (int k = 0; k < c; k++) d[k] += w[j] * g[k];
                }
            }
    aa_axis_free(&aw);
    aa_axis_free(&ah);
    rai_free(dtmp);
    return RA_OK;
}

/* ---- forward ------------------------------------------------------------ */

static int elems_ok(int64_t *out, int64_t a, int64_t b) {
    return rai_mul_i64(out, a, b) && *out <= VIT_MAX_ELEMS;
}

/* The sizes of one input, checked as timm checks them. */
typedef struct {
    int B, H, W, gh, gw, K_out;
    int64_t L, N, K, rows, outer;   /* outer: rows of the head */
} vit_dims;

static ra_status vit_dims_of(const vit_impl *v, vit_dims *d, int x_ndim, const int64_t *x_shape) {
    const int C = v->dim;
    if (x_ndim != 4)
        return rai_fail(RA_ERR_SHAPE, "vit takes images x (B, %d, H, W), got %d dimensions",
                        v->in_chans, x_ndim);
    if (x_shape[0] < 1 || x_shape[0] > INT32_MAX || x_shape[1] != v->in_chans ||
        x_shape[2] < 1 || x_shape[2] > INT32_MAX || x_shape[3] < 1 || x_shape[3] > INT32_MAX)
        return rai_fail(RA_ERR_SHAPE, "vit takes images x (B, %d, H, W), got (%lld, %lld, %lld, "
                        "%lld)", v->in_chans, (long long)x_shape[0], (long long)x_shape[1],
                        (long long)x_shape[2], (long long)x_shape[3]);
    const int B = (int)x_shape[0], H = (int)x_shape[2], W = (int)x_shape[3], P = v->patch;
    if (!v->dyn_pad && (H % P || W % P))
        return rai_fail(RA_ERR_SHAPE, "vit: image %dx%d is not a multiple of the patch size %d",
                        H, W, P);
    if (!v->dyn_size && (H != v->img[0] || W != v->img[1]))
        return rai_fail(RA_ERR_SHAPE, "vit: image %dx%d differs from img_size %dx%d (the model "
                        "has dynamic_img_size false, so timm refuses it too)", H, W, v->img[0],
                        v->img[1]);
    int gh, gw;
    ra_status st = ra_patch_grid(&gh, &gw, H, W, P, v->dyn_pad);
    if (st) return st == RA_ERR_ARG ? rai_fail(RA_ERR_SHAPE, "vit: %s", ra_last_error()) : st;
    const int64_t L = (int64_t)gh * gw, N = L + v->prefix;
    const int64_t K = (int64_t)v->in_chans * P * P;
    const int K_out = v->num_classes ? v->num_classes : C;
    /* every buffer below has at most VIT_MAX_ELEMS elements (the qkv
     * projection, rows x 3C, is the attention layer's own bound) */
    int64_t rows = 0, tmp = 0;
    if (N > INT32_MAX || !elems_ok(&rows, B, N) || !elems_ok(&tmp, rows, 3 * (int64_t)C) ||
        !elems_ok(&tmp, rows, C) || !elems_ok(&tmp, rows, v->hidden) ||
        !elems_ok(&tmp, (int64_t)B * L, K) || !elems_ok(&tmp, rows, K_out) ||
        !elems_ok(&tmp, L + v->prefix, C) ||
        !elems_ok(&tmp, (int64_t)B * v->in_chans, (int64_t)H * W))
        return rai_fail(RA_ERR_SHAPE, "vit: input (%d, %d, %d, %d) is too large", B,
                        v->in_chans, H, W);
    *d = (vit_dims){.B = B, .H = H, .W = W, .gh = gh, .gw = gw, .K_out = K_out, .L = L,
                    .N = N, .K = K, .rows = rows,
                    .outer = v->pool == RAI_POOL_NONE ? rows : B};
    return RA_OK;
}

/* 1 if a gh x gw grid needs pos_embed resampled (dynamic_img_size): the
 * grid differs, except timm's shortcut for a square grid with the same
 * number of tokens. */
static int pos_resampled(const vit_impl *v, int gh, int gw) {
    const int64_t L = (int64_t)gh * gw, L0 = (int64_t)v->grid[0] * v->grid[1];
    return v->pos && !(gh == v->grid[0] && gw == v->grid[1]) && !(L == L0 && gh == gw);
}

/* The position embedding for a gh x gw grid: v->pos, or resampled into
 * floats of the arena. */
static ra_status pos_for(const vit_impl *v, rai_arena *ar, int gh, int gw, const float **pos) {
    *pos = v->pos;
    if (!pos_resampled(v, gh, gw)) return RA_OK;
    const int C = v->dim, pos_prefix = v->no_embed_class ? 0 : v->prefix;
    float *rs = rai_arena_floats(ar, (size_t)(pos_prefix + (int64_t)gh * gw) * C);
    if (!rs) return rai_fail(RA_ERR_NOMEM, "vit: out of memory resampling pos_embed");
    memcpy(rs, v->pos, (size_t)pos_prefix * C * sizeof(float));
    ra_status st = resample_grid(rs + (int64_t)pos_prefix * C, v->pos + (int64_t)pos_prefix * C,
                                 v->grid[0], v->grid[1], gh, gw, C);
    if (!st) *pos = rs;
    return st;
}

/* X (B, N, C) = [cls, reg..., patches (B, L, C)] + pos_embed. */
static void make_tokens(const vit_impl *v, float *X, const float *patches, const float *pos,
                        int B, int64_t L, int64_t N) {
    const int C = v->dim;
    for (int b = 0; b < B; b++) {
        float *xb = X + (int64_t)b * N * C;
        if (v->class_token) memcpy(xb, v->cls, (size_t)C * sizeof(float));
        if (v->reg_tokens)
            memcpy(xb + (int64_t)v->class_token * C, v->reg,
                   (size_t)v->reg_tokens * C * sizeof(float));
        memcpy(xb + (int64_t)v->prefix * C, patches + (int64_t)b * L * C,
               (size_t)(L * C) * sizeof(float));
        if (pos) {
            float *dst = v->no_embed_class ? xb + (int64_t)v->prefix * C : xb;
            ra_add(dst, dst, pos, (v->no_embed_class ? L : N) * C);
        }
    }
}

static void set_y_shape(const vit_impl *v, const vit_dims *d, int *y_ndim, int64_t y_shape[4]) {
    if (v->pool == RAI_POOL_NONE) {
        *y_ndim = 3;
        y_shape[0] = d->B, y_shape[1] = d->N, y_shape[2] = d->K_out;
    } else {
        *y_ndim = 2;
        y_shape[0] = d->B, y_shape[1] = d->K_out;
    }
}

/* ---- the forward: inference, or training with a tape ----------------------
 * One forward serves both: without a tape it runs in place in scratch of
 * the model's arena (the blocks fuse their residual adds); with one it
 * keeps its activations on the tape (v->tape), and the backward walks them
 * in reverse through the layer pairs of relattn.h section 5 and
 * ra_attn_layer_backward (which recomputes q, k, v and the probabilities
 * from the saved norm1 output). Everything dynamic_img_size /
 * dynamic_img_pad allow is differentiated, the pos_embed resampling
 * included (its adjoint). Stochastic depth (metadata drop_path_rate,
 * timm's linspace(0, rate, depth) over the blocks, both branches of a
 * block) draws one keep per sample and branch from rng; timm's other
 * dropouts (drop_rate, attn_drop_rate, ...) are not applied. */

/* Lay the tape out in base (NULL: count); returns the floats it needs. */
static size_t tape_layout(vit_impl *v, float *base, const vit_dims *d) {
    vit_tape *t = &v->tape;
    const size_t C = (size_t)v->dim, rows = (size_t)d->rows;
    size_t off = 0;
    off += rai_stem_tape_layout(&t->stem, &v->stem, d->B, d->H, d->W, base ? base + off : NULL);
    t->x0 = v->pre_norm ? rai_carve(base, &off, rows * C) : NULL;
    t->pre_mean = v->pre_norm ? rai_carve(base, &off, rows) : NULL;
    t->pre_rstd = v->pre_norm ? rai_carve(base, &off, rows) : NULL;
    const rai_block_layout l = {.m = d->rows, .batch = d->B, .b_ = d->B, .n = (int)d->N};
    for (int i = 0; i < v->depth; i++) {   /* each block's input, then its tape */
        float *x = rai_carve(base, &off, rows * C);
        rai_block_tape b;
        off += rai_block_tape_layout(&b, &v->blocks[i], &l, base ? base + off : NULL);
        if (base) t->blk[i] = b, t->blk[i].x = x;
    }
    float *xf = rai_carve(base, &off, rows * C);
    off += rai_head_tape_layout(&t->head, &v->head, d->B, d->N, xf, base ? base + off : NULL);
    if (base) t->xf = xf;
    return off;
}

/* Below this many elements a loop runs on one thread (as nn.c). */
#define VIT_PAR_MIN ((int64_t)1 << 15)
static int par_threads(int64_t work) { return work >= VIT_PAR_MIN ? ra_threads_get() : 1; }

/* Block i's output X (B, N, C) into the map f wants of it (if any): the
 * patch tokens in f's layout, the prefix tokens apart; with timm's
 * norm=True through the final norm first (a model without one: as they
 * are, as timm's Identity). */
static ra_status vit_feature(const vit_impl *v, const rai_feat *f, int blk, rai_arena *ar,
                             const float *X, const vit_dims *d) {
    const int i = rai_feat_find(f, blk);
    if (i < 0) return RA_OK;
    const int C = v->dim;
    const size_t mark = rai_arena_mark(ar);
    if (f->norm == RAI_FEAT_NORM_FINAL && v->head.nw) {
        float *t = rai_arena_floats(ar, (size_t)(d->rows * C));
        if (!t) return rai_fail(RA_ERR_NOMEM, "vit: out of memory for a feature map");
        ra_layernorm_forward(t, NULL, NULL, X, v->head.nw, v->head.nb, d->rows, C, v->eps);
        X = t;
    }
    for (int b = 0; b < d->B; b++) {
        const float *xb = X + (int64_t)b * d->N * C;
        if (f->pre[i])
            memcpy(f->pre[i] + (int64_t)b * v->prefix * C, xb,
                   (size_t)v->prefix * C * sizeof(float));
        rai_feat_write(f->out[i] + b * f->per[i], f->layout, xb + (int64_t)v->prefix * C, 1,
                       d->L, C);
    }
    rai_arena_reset(ar, mark);
    return RA_OK;
}

/* The forward: y (outer, K_out) from images x (B, Cin, H, W) of the sizes
 * d. t NULL: inference; else training, t laid out for d (tape_layout), rng
 * for the drop-path. f (inference only; NULL: none): the feature maps
 * handed out after the blocks they name. */
static ra_status vit_run(vit_impl *v, vit_tape *t, ra_rng *rng, const rai_feat *f, float **y,
                         int *y_ndim, int64_t y_shape[4], const vit_dims *d, const float *x) {
    const int C = v->dim, B = d->B;
    const int64_t rows = d->rows, outer = d->outer;

    /* scratch, from the model's arena: the patch tokens A (rows, C), pos_embed
     * for this grid, the blocks' own; inference's activations too */
    rai_arena local;
    rai_arena *ar = rai_arena_begin(&v->ws, &local);
    float *X = t ? (v->depth ? t->blk[0].x : t->xf) : rai_arena_floats(ar, (size_t)(rows * C));
    float *A = rai_arena_floats(ar, (size_t)(rows * C));
    float *out = rai_alloc((size_t)outer, (size_t)d->K_out * sizeof(float));
    const float *pos = NULL;
    ra_status st = RA_OK;
    if (!X || !A || !out) {
        st = rai_fail(RA_ERR_NOMEM, "vit: out of memory for a batch of %d images of %dx%d", B,
                      d->H, d->W);
        goto done;
    }
    /* where each step writes: in place without a tape, its own buffers with */
    float *x0 = t && v->pre_norm ? t->x0 : X;   /* the tokens, norm_pre's input */
    float *xf = t ? t->xf : X;                  /* the last block's output, the head's input */
    if ((st = pos_for(v, ar, d->gh, d->gw, &pos))) goto done;

    /* tokens: [cls, reg..., patches] + pos_embed, then norm_pre */
    if ((st = rai_stem_forward(&v->stem, A, t ? &t->stem : NULL, x, B, d->H, d->W, ar))) goto done;
    make_tokens(v, x0, A, pos, B, d->L, d->N);
    if (v->pre_norm)
        ra_layernorm_forward(X, t ? t->pre_mean : NULL, t ? t->pre_rstd : NULL, x0, v->pre_w,
                             v->pre_b, rows, C, v->eps);

    /* the blocks; training: the attention recomputed in the backward */
    const rai_block_layout l = {.m = rows, .batch = B, .b_ = B, .n = (int)d->N};
    for (int i = 0; i < v->depth && !st; i++) {
        st = t ? rai_block_forward_train(&v->blocks[i], &t->blk[i],
                                         i + 1 < v->depth ? t->blk[i + 1].x : xf, 0, ar, rng)
               : rai_block_forward(&v->blocks[i], X, NULL, &l, ar);
        if (f && !t && !st) st = vit_feature(v, f, i, ar, X, d);
    }
    if (st) goto done;

    /* final norm, pooling, fc_norm, head (head.c) */
    if ((st = rai_head_forward(&v->head, out, t ? &t->head : NULL, xf, B, d->N, ar))) goto done;

    *y = out;
    out = NULL;
    set_y_shape(v, d, y_ndim, y_shape);
done:
    rai_arena_end(&v->ws, ar);
    rai_free(out);
    return st;
}

static ra_status vit_forward(const ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                             const float *x, int x_ndim, const int64_t *x_shape) {
    vit_impl *v = m->impl;
    vit_dims d = {0};
    ra_status st = vit_dims_of(v, &d, x_ndim, x_shape);
    return st ? st : vit_run(v, NULL, NULL, NULL, y, y_ndim, y_shape, &d, x);
}

static ra_status vit_forward_features(const ra_model *m, const rai_feat *f, float **y,
                                      int *y_ndim, int64_t y_shape[4], const float *x,
                                      int x_ndim, const int64_t *x_shape) {
    vit_impl *v = m->impl;
    vit_dims d = {0};
    ra_status st = vit_dims_of(v, &d, x_ndim, x_shape);
    return st ? st : vit_run(v, NULL, NULL, f, y, y_ndim, y_shape, &d, x);
}

/* timm's forward_intermediates: by default the last 3 blocks (its
 * features_only's out_indices), NCHW over the patch grid, prefix tokens
 * left out (or apart). */
static ra_status vit_features_plan(const ra_model *m, rai_feat *f, const ra_features_options *o,
                                   int x_ndim, const int64_t *x_shape) {
    const vit_impl *v = m->impl;
    vit_dims d = {0};
    ra_status st = vit_dims_of(v, &d, x_ndim, x_shape);
    if (st) return st;
    if (v->depth < 1) return rai_fail(RA_ERR_ARG, "vit: a model without blocks has no features");
    const int last3[3] = {-3, -2, -1};
    const int nd = v->depth < 3 ? v->depth : 3;
    if ((st = rai_feat_indices(f, o, last3 + 3 - nd, nd, v->depth, "block"))) return st;
    f->norm = o && o->norm == RA_FEATURES_NORM_FINAL ? RAI_FEAT_NORM_FINAL : RAI_FEAT_NORM_NONE;
    f->layout = o && o->layout ? o->layout : RA_LAYOUT_NCHW;
    const int C = v->dim;
    if (o && o->prefix_tokens) {
        if (!v->prefix) return rai_fail(RA_ERR_ARG, "vit: the model has no prefix tokens");
        f->prefix = v->prefix;
        f->per_prefix = (int64_t)v->prefix * C;
    }
    for (int i = 0; i < f->n; i++) rai_feat_shape(f, i, d.B, 2, (const int64_t[]){d.gh, d.gw}, C);
    return RA_OK;
}

static ra_status vit_forward_train(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                   const float *x, int x_ndim, const int64_t *x_shape,
                                   ra_rng *rng) {
    vit_impl *v = m->impl;
    vit_tape *t = &v->tape;
    t->valid = 0;
    if (v->drop_path_rate > 0 && v->depth > 1 && !rng)
        return rai_fail(RA_ERR_ARG, "vit: drop_path_rate %g needs a random generator for the "
                        "training forward", v->drop_path_rate);
    vit_dims d = {0};
    ra_status st = vit_dims_of(v, &d, x_ndim, x_shape);
    if (st) return st;

    /* the tape: grown to this input's size, then kept */
    const size_t need = tape_layout(v, NULL, &d);
    if (need > t->cap) {
        rai_free(t->buf);
        t->cap = 0;
        if (!(t->buf = rai_alloc(need, sizeof(float))))
            return rai_fail(RA_ERR_NOMEM, "vit: out of memory for the training activations of "
                            "%d images of %dx%d (%zu floats)", d.B, d.H, d.W, need);
        t->cap = need;
    }
    if (v->depth && !t->blk && !(t->blk = calloc((size_t)v->depth, sizeof *t->blk)))
        return rai_fail(RA_ERR_NOMEM, "vit: out of memory");
    tape_layout(v, t->buf, &d);
    if ((st = vit_run(v, t, rng, NULL, y, y_ndim, y_shape, &d, x))) return st;
    t->dims[0] = d.B, t->dims[1] = d.H, t->dims[2] = d.W, t->dims[3] = d.gh, t->dims[4] = d.gw;
    t->valid = 1;
    return RA_OK;
}

/* out (n, C) += sum over b < B of x[b * stride + r * C + k], in double: the
 * gradient of a parameter broadcast over the batch (cls_token, reg_token,
 * pos_embed). */
static void batch_sum_add(float *out, const float *x, int B, int64_t stride, int64_t n, int c) {
    const int64_t e = n * c;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(par_threads(e * B))
#endif
    for (int64_t i = 0; i < e; i++) {
        double s = 0;
        for (int b = 0; b < B; b++) s += x[b * stride + i];
        out[i] = (float)((double)out[i] + s);
    }
}

#define G(w) rai_model_grad_at(m, grad, w)   /* w's gradient: at its offset */

static ra_status vit_backward(ra_model *m, float *grad, float *dx, const float *dy) {
    vit_impl *v = m->impl;
    const vit_tape *t = &v->tape;
    if (!t->valid)
        return rai_fail(RA_ERR_ARG, "vit backward: no training forward to back-propagate "
                        "(call ra_model_forward_train first)");
    const int C = v->dim;
    vit_dims d = {0};
    const int64_t x_shape[4] = {t->dims[0], v->in_chans, t->dims[1], t->dims[2]};
    ra_status st = vit_dims_of(v, &d, 4, x_shape);
    if (st) return st;
    const int B = d.B;
    const int64_t rows = d.rows, L = d.L;
    const int resampled = pos_resampled(v, d.gh, d.gw);
    const int pos_prefix = v->no_embed_class ? 0 : v->prefix;
    const size_t rc = (size_t)(rows * C);

    /* scratch: gradients of the final tokens dX (norm_pre's) and of the
     * residual stream dR (rows, C); of the patch tokens (B*L, C) and, for
     * dx, the patch columns; pos_embed on this grid; the blocks' own */
    rai_arena local;
    rai_arena *ar = rai_arena_begin(&v->ws, &local);
    float *dX = rai_arena_floats(ar, rc);
    float *dR = rai_arena_floats(ar, rc);
    float *dpatch = rai_arena_floats(ar, (size_t)(B * L * C));
    float *work = dx ? rai_arena_floats(ar, (size_t)(B * L * d.K)) : NULL;
    float *dpos = resampled ? rai_arena_floats(ar, (size_t)((pos_prefix + L) * C)) : NULL;
    if (!dX || !dR || !dpatch || (dx && !work) || (resampled && !dpos)) {
        st = rai_fail(RA_ERR_NOMEM, "vit backward: out of memory for a batch of %d images of "
                      "%dx%d", B, d.H, d.W);
        goto done;
    }

    /* head, fc_norm, pooling, final norm (head.c) */
    const rai_head *hd = &v->head;
    const rai_head_grads gh = {.nw = G(hd->nw), .nb = G(hd->nb), .fw = G(hd->fw),
                               .fb = G(hd->fb), .w = G(hd->w), .b = G(hd->b)};
    if ((st = rai_head_backward(hd, dR, &gh, dy, &t->head, B, d.N, ar))) goto done;

    /* the blocks, last first; dR is the gradient of the residual stream */
    for (int i = v->depth - 1; i >= 0; i--) {
        rai_block_grads g;
        rai_block_grads_at(&g, &v->blocks[i], &v->attn_w[i], m->weights, grad);
        if ((st = rai_block_backward(&v->blocks[i], &t->blk[i], dR, &g, ar))) goto done;
    }

    /* norm_pre, then the tokens [cls, reg..., patches] + pos_embed */
    const float *dT = dR;
    if (v->pre_norm) {
        memset(dX, 0, rc * sizeof(float));
        ra_layernorm_backward(dX, G(v->pre_w), G(v->pre_b), dR, t->x0, t->pre_mean,
                              t->pre_rstd, v->pre_w, rows, C);
        dT = dX;
    }
    const int64_t stride = d.N * C;
    if (v->class_token) batch_sum_add(G(v->cls), dT, B, stride, 1, C);
    if (v->reg_tokens)
        batch_sum_add(G(v->reg), dT + (int64_t)v->class_token * C, B, stride, v->reg_tokens,
                      C);
    if (v->pos) {
        float *gpos = G(v->pos);
        float *dst = resampled ? dpos : gpos;
        if (resampled) memset(dpos, 0, (size_t)((pos_prefix + L) * C) * sizeof(float));
        if (v->no_embed_class) batch_sum_add(dst, dT + (int64_t)v->prefix * C, B, stride, L, C);
        else batch_sum_add(dst, dT, B, stride, d.N, C);
        if (resampled) {
            ra_add(gpos, gpos, dpos, (int64_t)pos_prefix * C);
            st = resample_grid_backward(gpos + (int64_t)pos_prefix * C,
                                        dpos + (int64_t)pos_prefix * C, v->grid[0], v->grid[1],
                                        d.gh, d.gw, C);
            if (st) goto done;
        }
    }
    for (int b = 0; b < B; b++)
        memcpy(dpatch + (int64_t)b * L * C, dT + ((int64_t)b * d.N + v->prefix) * C,
               (size_t)(L * C) * sizeof(float));
    const rai_stem_grads gs = {.w = G(v->stem.w), .b = G(v->stem.b)};
    st = rai_stem_backward(&v->stem, dx, &gs, dpatch, &t->stem, work, B, ar);
done:
    rai_arena_end(&v->ws, ar);
    return st;
}

#undef G

/* Multiply-adds of one image, counted like the Swin authors' flops():
 * patch embedding, per block qkv + q·k^T + p·v + proj + MLP, the head. */
static int64_t vit_flops(const ra_model *m, int h, int w) {
    const vit_impl *v = m->impl;
    const int64_t C = v->dim, P = v->patch;
    const int64_t np = (int64_t)((h + P - 1) / P) * ((w + P - 1) / P), n = np + v->prefix;
    int64_t blk = rai_cadd(rai_cmul3(n, C, 3 * C), rai_cmul3(n, n, 2 * C));
    blk = rai_cadd(rai_cadd(blk, rai_cmul3(n, C, C)), rai_cmul3(2 * n, C, v->hidden));
    const int64_t f = rai_cadd(rai_cmul3(np, C, v->in_chans * P * P), rai_cmul(v->depth, blk));
    return rai_cadd(f, C * v->num_classes);
}

/* BEiT's get_vit_layer (the Swin authors' fine-tuning of ViTs too): with
 * L blocks, cls_token, pos_embed and patch_embed.* are layer 0, blocks.i.*
 * layer i + 1, everything else (the norms, the head, register tokens)
 * layer L + 1. */
static int vit_layer_of(const ra_model *m, const char *name, int *count) {
    const vit_impl *v = m->impl;
    *count = v->depth + 2;
    int i = 0, len = 0;
    if (!strcmp(name, "cls_token") || !strcmp(name, "pos_embed") ||
        !strncmp(name, "patch_embed.", 12))
        return 0;
    if (sscanf(name, "blocks.%d.%n", &i, &len) == 1 && len > 0 && i >= 0 && i < v->depth)
        return i + 1;
    return v->depth + 1;
}

const rai_arch_ops rai_vit_ops = {.flops = vit_flops, .name = "vit", .layer_of = vit_layer_of,
                                .arch = RA_ARCH_VIT,
                                .batched = 1,
                                .declare = vit_declare,
                                .canonical = vit_canonical,
                                .detect = vit_detect,
                                .build = vit_build,
                                .destroy = vit_destroy,
                                .forward = vit_forward,
                                .forward_train = vit_forward_train,
                                .backward = vit_backward,
                                .features_plan = vit_features_plan,
                                .forward_features = vit_forward_features};
