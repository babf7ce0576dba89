/* infer.c - the metadata of a state_dict that carries none: the arch and
 * its hyperparameters read off the tensors' names and shapes, then what
 * the weights cannot tell from config.json, then from the family's
 * conventions, else a refusal naming the --set KEY=VALUE to pass
 * (docs/reference.md, "Hyperparameters from the weights").
 *
 * Every value goes into the file's metadata under the constructor's name,
 * with where it came from under "relattn.source.KEY" (what `relattn
 * inspect` shows). A key already present (from --set) is never replaced:
 * the first source wins, in the order --set, weights, config.json,
 * convention. */
#include "models/infer.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STAGES 8
#define MAX_BLOCKS 4096

typedef struct infer {
    ra_st_file *f;
    const rai_config_item *cfg;
    int ncfg;
} infer;

static const ra_st_tensor *find(const infer *c, const char *fmt, ...) RA_PRINTF(2, 3);
static const ra_st_tensor *find(const infer *c, const char *fmt, ...) {
    char name[200];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return k > 0 && (size_t)k < sizeof name ? ra_st_find(c->f, name) : NULL;
}

/* key = value unless key is set already; from says where it came from. */
static ra_status put(infer *c, const char *key, const char *value, const char *from) {
    if (ra_st_meta(c->f, key)) return RA_OK;
    char src[80];
    snprintf(src, sizeof src, RA_META_SOURCE "%s", key);
    ra_status st = rai_st_set_meta(c->f, key, value);
    return st ? st : rai_st_set_meta(c->f, src, from);
}

static ra_status putf(infer *c, const char *key, const char *from, const char *fmt, ...)
        RA_PRINTF(4, 5);
static ra_status putf(infer *c, const char *key, const char *from, const char *fmt, ...) {
    char v[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    return put(c, key, v, from);
}

/* "from NAME" for a tensor's shape. */
static const char *from_t(char *buf, size_t n, const ra_st_tensor *t) {
    snprintf(buf, n, "weights: %.150s", t->name);
    return buf;
}

static ra_status put_bool(infer *c, const char *key, int on, const char *why) {
    return put(c, key, on ? "true" : "false", why);
}

/* What config.json gives for every key still unset. */
static ra_status put_config(infer *c) {
    ra_status st = RA_OK;
    for (int i = 0; i < c->ncfg && !st; i++)
        st = put(c, c->cfg[i].key, c->cfg[i].value, c->cfg[i].from);
    return st;
}

/* A refusal for a key nothing gave. */
static ra_status need(const infer *c, const char *key, const char *why) {
    if (ra_st_meta(c->f, key)) return RA_OK;
    return rai_fail(RA_ERR_FORMAT, "%s: cannot tell %s from the weights (%s); pass --set %s=VALUE",
                    ra_st_meta(c->f, "arch"), key, why, key);
}

/* Shapes are any int64 >= 0 a file gives (up to 2^63 - 1, or 0): what is
 * computed from them goes through the checked helpers of base/internal.h,
 * and a dimension that becomes a size (channels, heads, patch, window,
 * hidden width) must be at least 1 (refused naming the tensor). */

/* n = s*s, s odd (a table of (2W-1)^2 rows): W (at most 2^31), else 0. */
static int64_t window_of_rows(int64_t n) {
    int64_t s;
    return n > 0 && rai_isqrt_i64(&s, n) && s * s == n && s % 2 ? s / 2 + 1 : 0;
}

/* s with s*s = n, s < 2^20; else 0. */
static int64_t isqrt_exact(int64_t n) {
    int64_t s;
    return n > 0 && rai_isqrt_i64(&s, n) && s * s == n && s < (1 << 20) ? s : 0;
}

/* Refused unless dimension i of t is at least 1: it is what (a size). */
static ra_status positive(const infer *c, const ra_st_tensor *t, int i, const char *what) {
    if (t->shape[i] >= 1) return RA_OK;
    char shp[160];
    size_t k = (size_t)snprintf(shp, sizeof shp, "(");
    for (int d = 0; d < t->ndim && k < sizeof shp; d++)
        k += (size_t)snprintf(shp + k, sizeof shp - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (k < sizeof shp) snprintf(shp + k, sizeof shp - k, ")");
    return rai_fail(RA_ERR_FORMAT, "%s: tensor '%.150s' has shape %s: %s %lld, not a size >= 1",
                    ra_st_meta(c->f, "arch"), t->name, shp, what, (long long)t->shape[i]);
}

/* p = a * b (an image side, a map side) from tensor t, or a refusal. */
static ra_status side(const infer *c, int64_t *p, int64_t a, int64_t b, const ra_st_tensor *t) {
    if (rai_mul_i64(p, a, b)) return RA_OK;
    return rai_fail(RA_ERR_FORMAT, "%s: the size %lld x %lld that tensor '%.150s' implies "
                    "overflows", ra_st_meta(c->f, "arch"), (long long)a, (long long)b, t->name);
}

/* The value of a key given as text (--set, config.json) as an integer, 0
 * when it is none (the builder names what is wrong with it). */
static long long meta_ll(const infer *c, const char *key) {
    const char *v = ra_st_meta(c->f, key);
    char *end;
    const long long x = v ? strtoll(v, &end, 10) : 0;
    return v && end != v ? x : 0;
}

/* A mlp_ratio that gives back hidden as int(dim * ratio) (dim >= 1). */
static ra_status put_ratio(infer *c, int64_t hidden, int64_t dim, const ra_st_tensor *t) {
    char from[200];
    ra_status st = positive(c, t, 0, "the MLP's hidden width");
    if (st) return st;
    from_t(from, sizeof from, t);
    if (hidden % dim == 0) return putf(c, "mlp_ratio", from, "%lld", (long long)(hidden / dim));
    return putf(c, "mlp_ratio", from, "%.17g", (double)hidden / (double)dim);
}

/* ---- swin and swinv2 ---------------------------------------------------- */

typedef struct swin_names {
    int tv;   /* torchvision's features.* */
} swin_names;

static const ra_st_tensor *blk(const infer *c, const swin_names *s, int stage, int j,
                               const char *sfx) {
    return s->tv ? find(c, "features.%d.%d.%s", 2 * stage + 1, j, sfx)
                 : find(c, "layers.%d.blocks.%d.%s", stage, j, sfx);
}

/* SwinV2's pretrained window of a stage from its saved
 * relative_coords_table: the largest entry is log2(8 (W-1)/(P-1) + 1) / 3
 * (with P - 1 = W - 1 when pretrained_window_size is 0). */
static int pretrained_window(const ra_st_file *f, const ra_st_tensor *t, int64_t w) {
    if (!t || t->ndim != 4 || w < 2 || w > 4096 || t->numel > (1 << 22)) return 0;
    float *v = malloc((size_t)t->numel * sizeof *v);
    if (!v || ra_st_read_f32(v, f, t)) {
        free(v);
        return 0;
    }
    float mx = 0;
    for (int64_t i = 0; i < t->numel; i++) mx = fmaxf(mx, v[i]);
    free(v);
    const double x = exp2(3.0 * mx) - 1.0;   /* 8 (W-1)/(P-1) */
    if (!(x > 0) || 8.0 * (double)(w - 1) / x > 4096) return 0;
    const long p = lround(8.0 * (double)(w - 1) / x) + 1;
    return p == w || p < 2 || p > 4096 ? 0 : (int)p;
}

static ra_status infer_swin(infer *c, int v2) {
    swin_names s = {0};
    const ra_st_tensor *pe = find(c, "patch_embed.proj.weight");
    if (!pe && (pe = find(c, "features.0.0.weight"))) s.tv = 1;
    if (!pe || pe->ndim != 4 || pe->shape[2] != pe->shape[3])
        return rai_fail(RA_ERR_FORMAT, "swin: no square patch embedding (patch_embed.proj.weight "
                        "or features.0.0.weight of 4 dims)");
    char from[200], list[160], heads[160];
    const int64_t C = pe->shape[0];
    from_t(from, sizeof from, pe);
    ra_status st = positive(c, pe, 0, "embed_dim");
    if (!st) st = positive(c, pe, 1, "in_chans");
    if (!st) st = positive(c, pe, 2, "patch_size");
    if (!st) st = putf(c, "embed_dim", from, "%lld", (long long)C);
    if (!st) st = putf(c, "in_chans", from, "%lld", (long long)pe->shape[1]);
    if (!st) st = putf(c, "patch_size", from, "%lld", (long long)pe->shape[2]);
    if (!st) st = put_bool(c, "patch_norm", find(c, s.tv ? "features.0.2.weight" : "patch_embed.norm.weight") != NULL,
                           "weights: patch embedding norm present or not");

    /* stages: blocks, heads, the window of stage 0 */
    int depths[MAX_STAGES], nst = 0, pws[MAX_STAGES] = {0}, any_pws = 0;
    int64_t win = 0;
    size_t kl = 0, kh = 0;
    const char *table_sfx = v2 ? "attn.cpb_mlp.2.weight" : "attn.relative_position_bias_table";
    for (; nst < MAX_STAGES && !st; nst++) {
        int d = 0;
        while (d < MAX_BLOCKS && blk(c, &s, nst, d, "norm1.weight")) d++;
        if (!d) break;
        const ra_st_tensor *t = blk(c, &s, nst, 0, table_sfx);
        if (!t || t->ndim != 2)
            return rai_fail(RA_ERR_FORMAT, "swin: stage %d has no %s of 2 dims", nst, table_sfx);
        const int64_t nh = v2 ? t->shape[0] : t->shape[1];
        if ((st = positive(c, t, v2 ? 0 : 1, "num_heads"))) return st;
        depths[nst] = d;
        kl += (size_t)snprintf(list + kl, sizeof list - kl, "%s%d", nst ? "," : "", d);
        kh += (size_t)snprintf(heads + kh, sizeof heads - kh, "%s%lld", nst ? "," : "", (long long)nh);
        if (kl >= sizeof list || kh >= sizeof heads)
            return rai_fail(RA_ERR_FORMAT, "swin: too many stages");
        int64_t w = 0;
        if (!v2) {
            w = window_of_rows(t->shape[0]);
            if (!w)
                return rai_fail(RA_ERR_FORMAT, "swin: %s has %lld rows, not (2W-1)^2", t->name,
                                (long long)t->shape[0]);
        } else {
            const ra_st_tensor *ct = blk(c, &s, nst, 0, "attn.relative_coords_table");
            const ra_st_tensor *ix = blk(c, &s, nst, 0, "attn.relative_position_index");
            if (ct && ct->ndim == 4 && ct->shape[1] == ct->shape[2] && ct->shape[1] % 2)
                w = ct->shape[1] / 2 + 1;
            else if (ix && ix->ndim == 2) w = isqrt_exact(ix->shape[0]);
            else if (ix && ix->ndim == 1) w = isqrt_exact(isqrt_exact(ix->shape[0]));
            if (w && !s.tv && (pws[nst] = pretrained_window(c->f, ct, w))) any_pws = 1;
        }
        if (nst == 0) win = w;
    }
    if (st) return st;
    if (!nst) return rai_fail(RA_ERR_FORMAT, "swin: no blocks (layers.0.blocks.0.norm1.weight)");
    if (!st) st = put(c, "depths", list, "weights: blocks per stage");
    if (!st) st = put(c, "num_heads", heads, v2 ? "weights: attn.cpb_mlp.2.weight rows" :
                                                  "weights: relative_position_bias_table columns");
    if (!st && win) st = putf(c, "window_size", "weights: stage 0's position table", "%lld", (long long)win);
    if (!st && any_pws) {
        char p[80];
        size_t k = 0;
        for (int i = 0; i < nst; i++) k += (size_t)snprintf(p + k, sizeof p - k, "%s%d", i ? "," : "", pws[i]);
        if (k < sizeof p) st = put(c, "pretrained_window_sizes", p, "weights: relative_coords_table values");
    }
    const ra_st_tensor *fc1 = blk(c, &s, 0, 0, s.tv ? "mlp.0.weight" : "mlp.fc1.weight");
    if (!st && fc1 && fc1->ndim == 2) st = put_ratio(c, fc1->shape[0], C, fc1);
    const char *qb = v2 && !s.tv ? "attn.q_bias" : "attn.qkv.bias";
    if (!st) st = put_bool(c, "qkv_bias", blk(c, &s, 0, 0, qb) != NULL, "weights: qkv bias present or not");
    const ra_st_tensor *ape = find(c, "absolute_pos_embed");
    if (!st) st = put_bool(c, "ape", ape != NULL, "weights: absolute_pos_embed present or not");
    const ra_st_tensor *head = find(c, "head.weight");
    if (!head) head = find(c, "head.fc.weight");
    if (!st) st = head && head->ndim == 2
                      ? putf(c, "num_classes", from_t(from, sizeof from, head), "%lld", (long long)head->shape[0])
                      : put(c, "num_classes", "0", "weights: no head");

    /* the image size: the absolute position table, a saved shift mask */
    const int64_t P = pe->shape[2];
    int64_t px = 0, map = 0;
    if (!st && ape && ape->ndim == 3 && isqrt_exact(ape->shape[1]) &&
        !(st = side(c, &px, isqrt_exact(ape->shape[1]), P, ape)))
        st = putf(c, "img_size", from_t(from, sizeof from, ape), "%lld", (long long)px);
    const ra_st_tensor *mask = nst && depths[0] > 1 ? blk(c, &s, 0, 1, "attn_mask") : NULL;
    if (!st && mask && mask->ndim == 3 && win && isqrt_exact(mask->shape[0]) &&
        !(st = side(c, &map, isqrt_exact(mask->shape[0]), win, mask)) &&
        !(st = side(c, &px, map, P, mask)))
        st = putf(c, "img_size", from_t(from, sizeof from, mask), "%lld", (long long)px);
    if (!st) st = put_config(c);
    /* conventions: the releases' image size for their window */
    if (!st && !ra_st_meta(c->f, "img_size") && (win || ra_st_meta(c->f, "window_size"))) {
        const long long w = win ? win : meta_ll(c, "window_size");
        int img = 0;
        if (s.tv) img = v2 ? 256 : 224;
        else if (!v2) img = w == 7 ? 224 : w == 12 ? 384 : 0;
        else img = w == 8 || w == 16 ? 256 : w == 12 ? 192 : w == 24 ? 384 : 0;
        if (img && P == 4)
            st = putf(c, "img_size", s.tv ? "convention: torchvision's swin_t/swin_v2_t size"
                                          : "convention: the released models' size for this window",
                      "%d", img);
    }
    if (!st) st = need(c, "window_size", "no saved relative_coords_table or relative_position_index");
    if (!st) st = need(c, "img_size", "no absolute_pos_embed or attn_mask, no config.json");
    return st;
}

/* ---- vit ---------------------------------------------------------------- */

/* timm's name, or torchvision's for the same tensor. */
static const ra_st_tensor *vt(const infer *c, int tv, const char *timm, const char *torchvision) {
    return find(c, "%s", tv ? torchvision : timm);
}

static ra_status infer_vit(infer *c) {
    int tv = 0;
    const ra_st_tensor *pe = find(c, "patch_embed.proj.weight");
    if (!pe && (pe = find(c, "conv_proj.weight"))) tv = 1;
    if (!pe || pe->ndim != 4 || pe->shape[2] != pe->shape[3])
        return rai_fail(RA_ERR_FORMAT, "vit: no square patch embedding (patch_embed.proj.weight "
                        "or conv_proj.weight of 4 dims)");
    char from[200];
    const int64_t C = pe->shape[0], P = pe->shape[2];
    from_t(from, sizeof from, pe);
    ra_status st = positive(c, pe, 0, "embed_dim");
    if (!st) st = positive(c, pe, 1, "in_chans");
    if (!st) st = positive(c, pe, 2, "patch_size");
    if (!st) st = putf(c, "embed_dim", from, "%lld", (long long)C);
    if (!st) st = putf(c, "in_chans", from, "%lld", (long long)pe->shape[1]);
    if (!st) st = putf(c, "patch_size", from, "%lld", (long long)P);
    int depth = 0;
    while (depth < MAX_BLOCKS && (tv ? find(c, "encoder.layers.encoder_layer_%d.ln_1.weight", depth)
                                     : find(c, "blocks.%d.norm1.weight", depth)))
        depth++;
    if (!st) st = putf(c, "depth", "weights: blocks", "%d", depth);
    const char *b0 = tv ? "encoder.layers.encoder_layer_0." : "blocks.0.";
    const ra_st_tensor *fc1 = find(c, "%s%s", b0, tv ? "mlp.0.weight" : "mlp.fc1.weight");
    if (!fc1 && tv) fc1 = find(c, "%smlp.linear_1.weight", b0);
    if (!st && fc1 && fc1->ndim == 2) st = put_ratio(c, fc1->shape[0], C, fc1);
    if (!st) st = put_bool(c, "qkv_bias",
                           find(c, "%s%s", b0, tv ? "self_attention.in_proj_bias" : "attn.qkv.bias") != NULL,
                           "weights: qkv bias present or not");
    if (!st && !tv)
        st = put_bool(c, "proj_bias", find(c, "blocks.0.attn.proj.bias") != NULL || !depth,
                      "weights: attn.proj.bias present or not");
    const ra_st_tensor *cls = vt(c, tv, "cls_token", "class_token");
    const ra_st_tensor *reg = tv ? NULL : find(c, "reg_token");
    const int64_t nreg = reg && reg->ndim == 3 ? reg->shape[1] : 0;
    if (!st) st = put_bool(c, "class_token", cls != NULL, "weights: cls_token present or not");
    if (!st && nreg) st = putf(c, "reg_tokens", from_t(from, sizeof from, reg), "%lld", (long long)nreg);
    if (!st && !tv) st = put_bool(c, "pre_norm", find(c, "norm_pre.weight") != NULL, "weights: norm_pre present or not");
    const int fcn = !tv && find(c, "fc_norm.weight") != NULL;
    /* timm's final_norm: a norm after the blocks, or on the pooled features */
    if (!st) st = put_bool(c, "final_norm", vt(c, tv, "norm.weight", "encoder.ln.weight") || fcn,
                           "weights: norm or fc_norm present or not");
    if (!st && !tv) st = put_bool(c, "fc_norm", fcn, "weights: fc_norm present or not");
    if (!st && (fcn || !cls)) st = put(c, "global_pool", "avg", fcn ? "weights: fc_norm present" : "weights: no class token");
    if (!st && find(c, "blocks.0.ls1.gamma")) st = put(c, "init_values", "1", "weights: ls1.gamma present (its value is a weight)");
    const ra_st_tensor *head = vt(c, tv, "head.weight", "heads.head.weight");
    if (!st) st = head && head->ndim == 2
                      ? putf(c, "num_classes", from_t(from, sizeof from, head), "%lld", (long long)head->shape[0])
                      : put(c, "num_classes", "0", "weights: no head");
    /* the image size from the position table: a square grid after the prefix tokens */
    const ra_st_tensor *pos = vt(c, tv, "pos_embed", "encoder.pos_embedding");
    if (!pos && !st) st = put(c, "pos_embed", "none", "weights: no pos_embed");
    if (!st && pos && pos->ndim == 3) {
        int64_t prefix;
        const int64_t L = pos->shape[1];
        if (!rai_add_i64(&prefix, cls ? 1 : 0, nreg)) prefix = INT64_MAX;   /* no grid, then */
        int64_t g = L > prefix ? isqrt_exact(L - prefix) : 0, px = 0;
        if (g && !(st = side(c, &px, g, P, pos)))
            st = putf(c, "img_size", from_t(from, sizeof from, pos), "%lld", (long long)px);
        else if (!g && (g = isqrt_exact(L)) != 0 && prefix && !(st = side(c, &px, g, P, pos))) {
            st = put_bool(c, "no_embed_class", 1, "weights: pos_embed has no prefix rows");
            if (!st) st = putf(c, "img_size", from_t(from, sizeof from, pos), "%lld", (long long)px);
        }
    }
    if (!st) st = put_config(c);
    /* the head count: the widths of the released models (timm, torchvision) */
    static const int widths[][2] = {{192, 3}, {384, 6}, {512, 8}, {768, 12}, {1024, 16}, {1280, 16}};
    for (size_t i = 0; !st && i < sizeof widths / sizeof *widths; i++)
        if (C == widths[i][0])
            st = putf(c, "num_heads", "convention: the released ViTs of this width", "%d", widths[i][1]);
    if (!st) st = need(c, "num_heads", "the weights do not show how qkv splits into heads");
    if (!st) st = need(c, "img_size", "no position table, no config.json");
    return st;
}

/* ---- swin_block (one Swin block, official or torchvision names) ----------- */

/* What a block (2-D or 3-D) shows of itself: dim (norm1), num_heads (the
 * bias table's columns), mlp_ratio, qkv_bias; *tb its table. */
static ra_status block_common(infer *c, const char *arch, const ra_st_tensor **tb) {
    const ra_st_tensor *n1 = find(c, "norm1.weight");
    *tb = find(c, "attn.relative_position_bias_table");
    if (!n1 || n1->ndim != 1 || !*tb || (*tb)->ndim != 2)
        return rai_fail(RA_ERR_FORMAT, "%s: no norm1.weight or attn.relative_position_bias_table", arch);
    char from[200];
    const int64_t C = n1->shape[0];
    ra_status st = positive(c, n1, 0, "dim");
    if (!st) st = positive(c, *tb, 1, "num_heads");
    if (!st) st = putf(c, "dim", from_t(from, sizeof from, n1), "%lld", (long long)C);
    if (!st) st = putf(c, "num_heads", from_t(from, sizeof from, *tb), "%lld", (long long)(*tb)->shape[1]);
    const ra_st_tensor *fc1 = find(c, "mlp.fc1.weight");
    if (!fc1) fc1 = find(c, "mlp.0.weight");   /* torchvision's */
    if (!st && fc1 && fc1->ndim == 2) st = put_ratio(c, fc1->shape[0], C, fc1);
    if (!st) st = put_bool(c, "qkv_bias", find(c, "attn.qkv.bias") || find(c, "attn.q.bias"),
                           "weights: q/qkv bias present or not");
    return st;
}

static ra_status infer_block(infer *c) {
    const ra_st_tensor *tb;
    char from[200];
    ra_status st = block_common(c, "swin_block", &tb);
    const int64_t w = st ? 0 : window_of_rows(tb->shape[0]);
    if (!st && w) st = putf(c, "window_size", from_t(from, sizeof from, tb), "%lld", (long long)w);
    /* the official block saves its shift mask (nW, N, N) when it shifts:
     * nW windows of a square map the windows tile (as the official code
     * requires), shifted by half a window (as every Swin does) */
    const ra_st_tensor *mask = find(c, "attn_mask");
    int64_t r = 0;
    if (!st && mask && mask->ndim == 3 && w && isqrt_exact(mask->shape[0]) &&
        !(st = side(c, &r, isqrt_exact(mask->shape[0]), w, mask))) {
        st = putf(c, "input_resolution", "weights: attn_mask's windows (a square map they tile)",
                  "%lld", (long long)r);
        if (!st) st = putf(c, "shift_size", "convention: window_size // 2 where a mask is saved",
                           "%lld", (long long)(w / 2));
    }
    if (!st) st = put_config(c);
    if (!st) st = need(c, "input_resolution", "no saved attn_mask");
    if (!st) st = need(c, "shift_size", "no saved attn_mask");
    if (!st) st = need(c, "window_size", "the table is not (2W-1)^2 rows");
    return st;
}

/* The window (Wd, W, W) of a block whose index is (N, N) and table T rows:
 * N = Wd W^2, T = (2Wd-1)(2W-1)^2, when exactly one Wd fits; 0 else. */
static int window_3d(int64_t N, int64_t T, int *wd, int64_t *w) {
    int found = 0;
    for (int d = 1; d <= N && d < 4096; d++) {   /* (2d-1) (2s-1)^2 < 2^13 2^42: no overflow */
        const int64_t s = N % d ? 0 : isqrt_exact(N / d);
        if (s && (2 * d - 1) * (2 * s - 1) * (2 * s - 1) == T) found++, *wd = d, *w = s;
    }
    return found == 1;
}

/* ---- swin_block_3d (Video Swin / RSTT blocks) ----------------------------- */

static ra_status infer_block_3d(infer *c) {
    const ra_st_tensor *tb;
    ra_status st = block_common(c, "swin_block_3d", &tb);
    if (st) return st;
    const int cross = find(c, "norm_kv.weight") != NULL;
    /* self-attention: the window (Wd, W, W) whose table and index match */
    const ra_st_tensor *ix = find(c, "attn.relative_position_index");
    if (!st && !cross && ix && ix->ndim == 2 && ix->shape[0] == ix->shape[1]) {
        int wd = 0;
        int64_t w = 0;
        if (window_3d(ix->shape[0], tb->shape[0], &wd, &w))
            st = putf(c, "window_size", "weights: index and table sizes", "%d,%lld,%lld", wd,
                      (long long)w, (long long)w);
    }
    if (!st) st = put_config(c);
    if (!st) st = need(c, "window_size", "the table's size has several factorisations");
    if (!st) st = need(c, "shift_size", "a block does not record its shift");
    if (!st && cross) st = need(c, "num_frames_q", "a cross-attention block");
    if (!st && cross) st = need(c, "num_frames_kv", "a cross-attention block");
    return st;
}

/* ---- swin3d (torchvision's SwinTransformer3d, official Video Swin names) -- */

static ra_status infer_swin3d(infer *c) {
    const char *bb = find(c, "backbone.patch_embed.proj.weight") ? "backbone." : "";
    const int tv = find(c, "features.0.0.norm1.weight") != NULL;
    const ra_st_tensor *pe = find(c, "%spatch_embed.proj.weight", bb);
    if (!pe || pe->ndim != 5)
        return rai_fail(RA_ERR_FORMAT, "swin3d: no Conv3d patch embedding "
                        "(patch_embed.proj.weight of 5 dims)");
    char from[200], list[160], heads[160];
    const int64_t C = pe->shape[0];
    from_t(from, sizeof from, pe);
    ra_status st = positive(c, pe, 0, "embed_dim");
    for (int i = 1; i < 5 && !st; i++) st = positive(c, pe, i, i == 1 ? "in_chans" : "patch_size");
    if (!st) st = putf(c, "embed_dim", from, "%lld", (long long)C);
    if (!st) st = putf(c, "in_chans", from, "%lld", (long long)pe->shape[1]);
    if (!st) st = putf(c, "patch_size", from, "%lld,%lld,%lld", (long long)pe->shape[2],
                       (long long)pe->shape[3], (long long)pe->shape[4]);
    if (!st) st = put_bool(c, "patch_norm", find(c, "%spatch_embed.norm.weight", bb) != NULL,
                           "weights: patch embedding norm present or not");
    int nst = 0, wd = 0;
    int64_t w = 0;
    size_t kl = 0, kh = 0;
    for (; nst < MAX_STAGES && !st; nst++) {
        int d = 0;
        while (d < MAX_BLOCKS && (tv ? find(c, "features.%d.%d.norm1.weight", 2 * nst, d)
                                     : find(c, "%slayers.%d.blocks.%d.norm1.weight", bb, nst, d)))
            d++;
        if (!d) break;
        const ra_st_tensor *t = tv ? find(c, "features.%d.0.attn.relative_position_bias_table", 2 * nst)
                                   : find(c, "%slayers.%d.blocks.0.attn.relative_position_bias_table", bb, nst);
        if (!t || t->ndim != 2)
            return rai_fail(RA_ERR_FORMAT, "swin3d: stage %d has no relative_position_bias_table "
                            "of 2 dims", nst);
        if ((st = positive(c, t, 1, "num_heads"))) return st;
        kl += (size_t)snprintf(list + kl, sizeof list - kl, "%s%d", nst ? "," : "", d);
        kh += (size_t)snprintf(heads + kh, sizeof heads - kh, "%s%lld", nst ? "," : "",
                               (long long)t->shape[1]);
        if (kl >= sizeof list || kh >= sizeof heads)
            return rai_fail(RA_ERR_FORMAT, "swin3d: too many stages");
        const ra_st_tensor *ix = tv ? find(c, "features.%d.0.attn.relative_position_index", 2 * nst)
                                    : find(c, "%slayers.%d.blocks.0.attn.relative_position_index", bb, nst);
        if (nst == 0 && ix && ix->ndim == 2 && ix->shape[0] == ix->shape[1] &&
            window_3d(ix->shape[0], t->shape[0], &wd, &w))
            st = putf(c, "window_size", "weights: index and table sizes", "%d,%lld,%lld", wd,
                      (long long)w, (long long)w);
    }
    if (st) return st;
    if (!nst) return rai_fail(RA_ERR_FORMAT, "swin3d: no blocks (features.0.0.norm1.weight)");
    st = put(c, "depths", list, "weights: blocks per stage");
    if (!st) st = put(c, "num_heads", heads, "weights: relative_position_bias_table columns");
    const ra_st_tensor *fc1 = tv ? find(c, "features.0.0.mlp.0.weight")
                                 : find(c, "%slayers.0.blocks.0.mlp.fc1.weight", bb);
    if (!st && fc1 && fc1->ndim == 2) st = put_ratio(c, fc1->shape[0], C, fc1);
    const ra_st_tensor *head = find(c, "%s", tv ? "head.weight" : "cls_head.fc_cls.weight");
    if (!st) st = head && head->ndim == 2
                      ? putf(c, "num_classes", from_t(from, sizeof from, head), "%lld",
                             (long long)head->shape[0])
                      : put(c, "num_classes", "0", "weights: no head");
    if (!st) st = put_config(c);
    if (!st) st = need(c, "window_size", "no saved relative_position_index, or one the table's "
                       "size does not single out");
    return st;
}

/* ---- the arch ------------------------------------------------------------ */

static const char *arch_of_names(const infer *c) {
    const ra_st_tensor *pe = find(c, "patch_embed.proj.weight");
    if (!pe) pe = find(c, "backbone.patch_embed.proj.weight");
    if (pe && pe->ndim == 5) return "swin3d";
    if (find(c, "layers.0.blocks.0.attn.cpb_mlp.0.weight") || find(c, "features.1.0.attn.cpb_mlp.0.weight"))
        return "swinv2";
    if (find(c, "layers.0.blocks.0.attn.relative_position_bias_table") ||
        find(c, "features.1.0.attn.relative_position_bias_table"))
        return "swin";
    if ((find(c, "patch_embed.proj.weight") && find(c, "blocks.0.attn.qkv.weight")) ||
        find(c, "encoder.layers.encoder_layer_0.self_attention.in_proj_weight"))
        return "vit";
    const ra_st_tensor *tb = find(c, "attn.relative_position_bias_table");
    if (tb && find(c, "norm1.weight") && (find(c, "attn.q.weight") || !window_of_rows(tb->shape[0])))
        return "swin_block_3d";
    if (tb && find(c, "norm1.weight")) return "swin_block";
    return NULL;
}

ra_status rai_infer_meta(ra_st_file *f, const char *arch, const rai_config_item *cfg, int ncfg) {
    infer c = {f, cfg, ncfg};
    const char *given = ra_st_meta(f, "arch");
    for (int i = 0; !given && !arch && i < ncfg; i++)
        if (!strcmp(cfg[i].key, "arch")) arch = cfg[i].value;
    const char *from = given ? NULL : arch ? "config.json or the names' scheme" : "weights: tensor names";
    if (!given && !arch) arch = arch_of_names(&c);
    if (!given && !arch)
        return rai_fail(RA_ERR_FORMAT, "no relattn metadata, and the tensor names are none of "
                        "swin, swinv2, vit, swin_block_3d, swin3d (pass --set arch=NAME and the "
                        "hyperparameters, docs/reference.md section 2)");
    ra_status st = given ? RA_OK : put(&c, "arch", arch, from);
    if (st) return st;
    const char *a = ra_st_meta(f, "arch");
    if (!strcmp(a, "swin") || !strcmp(a, "swinv2")) st = infer_swin(&c, !strcmp(a, "swinv2"));
    else if (!strcmp(a, "vit")) st = infer_vit(&c);
    else if (!strcmp(a, "swin_block_3d")) st = infer_block_3d(&c);
    else if (!strcmp(a, "swin3d")) st = infer_swin3d(&c);
    else if (!strcmp(a, "swin_block")) st = infer_block(&c);
    else st = put_config(&c);   /* other archs: --set and config.json alone */
    return st;
}
