/* swin.c - the Swin Transformer block and classification network (docs/reference.md, section 2:
 * archs swin_block, swin and swinv2): loading, and the one forward, which
 * keeps a tape for the backward (swin_train.c) only when training.
 *
 * A block (official SwinTransformerBlock, pre-norm):
 *   t = norm1(x) -> zero-pad bottom/right to a multiple of the window ->
 *   roll by -shift -> partition -> window attention with the shifted-window
 *   mask (built on the padded map) -> reverse -> roll by +shift -> crop;
 *   x += t;  x += fc2(gelu(fc1(norm2(x))))
 * The network: patch embedding (Conv2d kernel = stride = patch, as a GEMM),
 * LayerNorm, optional absolute position embedding, stages of blocks
 * alternating shift 0 and window // 2 with patch merging (x0..x3 gather,
 * LayerNorm(4C), Linear(4C, 2C) without bias) between them, final
 * LayerNorm, mean over the tokens, head.
 *
 * Window and shift. A block's window and shift are fixed when the model is
 * built, as the PyTorch constructor fixes them, and so are the shapes of
 * the bias tables:
 *   official / timm  the official clamp on the constructor's resolution
 *                    (input_resolution; for the network img_size // patch
 *                    // 2^i): if min(H, W) <= window then window = min(H, W)
 *                    and shift = 0 (ra_window_clamp).
 *   SwinBackbone     (transformers', metadata out_indices; not SwinV2's) no
 *                    clamp and no shift dropped: its encoder runs with
 *                    always_partition, a map smaller than the window padded
 *                    to one window under the shifted mask.
 *   torchvision      no clamp: the window is window_size everywhere; at run
 *                    time the shift is set to 0 on an axis whose padded size
 *                    is not larger than the window (its
 *                    shifted_window_attention).
 * (timm's current block differs from the official one only where a map is
 * not a multiple of the window: it rolls before padding and clamps each axis
 * on its own. Its pretrained models never meet that case; timm-named files
 * run with the official semantics.)
 * The resolution at run time comes from the input: a map of another size is
 * zero-padded to a multiple of the block's window with the mask built on the
 * padded map (as the Swin detection backbone does), so with the
 * constructor's resolution this is exactly the official model.
 *
 * Naming schemes (detected from the file's names, mapped to the official
 * names, which are the canonical parameter names here):
 *   official     patch_embed.proj/norm, absolute_pos_embed,
 *                layers.i.blocks.j.{norm1, attn.relative_position_bias_table,
 *                attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2},
 *                layers.i.downsample.{reduction, norm}, norm, head
 *   timm         the same blocks, but patch merging at the start of the next
 *                stage (layers.{i+1}.downsample) and head.fc
 *   torchvision  features.0.0 (conv), features.0.2 (norm),
 *                features.{2i+1}.j blocks with mlp.0 / mlp.3,
 *                features.{2i+2} patch merging, norm, head; its
 *                relative_position_index is flattened; Conv2d without
 *                padding (an image that is not a multiple of the patch is
 *                cropped, as a stride-P convolution does)
 * Buffers are never trusted: a saved relative_position_index must equal the
 * computed index, a saved attn_mask the computed mask (of the constructor's
 * resolution); a buffer of a block that does not exist (or an attn_mask of
 * a block without shift) is an unexpected tensor. */
#include "models/swin.h"
#include "attention/cpb.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const scheme_names[] = {"official", "timm", "torchvision"};

/* ---- one block ---------------------------------------------------------- */

/* int(dim * mlp_ratio) as Python computes it (double product, truncated). */
static ra_status hidden_of(int dim, double ratio, int *hidden) {
    const double h = (double)dim * ratio;
    if (!(h >= 1.0 && h <= SWIN_MAX_HIDDEN))
        return rai_fail(RA_ERR_FORMAT, "mlp_ratio %g with dim %d gives an MLP width outside "
                        "1..%d", ratio, dim, SWIN_MAX_HIDDEN);
    *hidden = (int)h;
    return RA_OK;
}

/* Fix a block's window and shift from its constructor's arguments. */
static ra_status blk_setup(swin_blk *b, int dim, int heads, const int res[2], const int win[2],
                           const int shift[2], int tv, const swin_common *k,
                           const int pretrained[2]) {
    memset(b, 0, sizeof *b);
    b->dim = dim, b->heads = heads, b->tv = tv, b->post = k->v2;
    b->res[0] = res[0], b->res[1] = res[1];
    if (heads < 1 || heads > dim || dim % heads)
        return rai_fail(RA_ERR_FORMAT, "dim %d is not divisible by num_heads %d", dim, heads);
    ra_status st = hidden_of(dim, k->mlp_ratio, &b->hidden);
    if (st) return st;
    b->blk = (rai_block){.dim = dim, .hidden = b->hidden, .post = b->post, .eps = SWIN_EPS,
                        .mlp_chunk = SWIN_MLP_CHUNK};
    ra_window_spec g = {.d = 1, .h = res[0], .w = res[1], .wd = 1, .wh = win[0], .ww = win[1],
                        .sh = shift[0], .sw = shift[1]};
    if (!tv && !k->always_partition) ra_window_clamp(&g);
    if (g.wh < 1 || g.ww < 1)
        return rai_fail(RA_ERR_FORMAT, "window %dx%d on a %dx%d map", g.wh, g.ww, res[0], res[1]);
    if (g.sh < 0 || g.sh >= g.wh || g.sw < 0 || g.sw >= g.ww)
        return rai_fail(RA_ERR_FORMAT, "shift_size %d,%d must be in [0, window_size %d,%d)",
                        g.sh, g.sw, g.wh, g.ww);
    if ((int64_t)g.wh * g.ww > SWIN_MAX_WINDOW_TOKENS)
        return rai_fail(RA_ERR_FORMAT, "window %dx%d has more than %d tokens", g.wh, g.ww,
                        SWIN_MAX_WINDOW_TOKENS);
    b->win[0] = g.wh, b->win[1] = g.ww, b->shift[0] = g.sh, b->shift[1] = g.sw;
    /* without a bias table the windows run plain multi-head attention, or
     * Shaw's attention over the window's tokens */
    b->cfg = ra_attn_config_default(k->relpos == RELPOS_BIAS   ? RA_ARCH_WINDOW_ATTENTION
                                    : k->relpos == RELPOS_SHAW ? RA_ARCH_SHAW_ATTENTION
                                                               : RA_ARCH_VIT_ATTENTION);
    if (k->relpos == RELPOS_SHAW) {
        b->cfg.shaw_window[0] = g.wh, b->cfg.shaw_window[1] = g.ww;
        b->cfg.max_rel = k->shaw_k >= 0 ? k->shaw_k : (g.wh > g.ww ? g.wh : g.ww) - 1;
    }
    b->cfg.dim = dim, b->cfg.num_heads = heads;
    b->cfg.window[0] = g.wh, b->cfg.window[1] = g.ww;
    b->cfg.qkv_bias = k->qkv_bias;
    b->cfg.has_qk_scale = k->has_qk_scale, b->cfg.qk_scale = k->qk_scale;
    if (k->v2) {   /* SwinV2's attention, its coordinates from the (clamped) window */
        b->cfg.arch = RA_ARCH_SWINV2_WINDOW_ATTENTION;
        b->cfg.pretrained_window[0] = pretrained ? pretrained[0] : 0;
        b->cfg.pretrained_window[1] = pretrained ? pretrained[1] : 0;
    }
    return RA_OK;
}

/* Declare a parameter named prefix + suffix. */
static ra_status decl(ra_model *m, const char *pfx, const char *sfx, int ndim, int64_t d0,
                      int64_t d1, int64_t d2, int64_t d3) {
    char name[160];
    if ((size_t)snprintf(name, sizeof name, "%s%s", pfx, sfx) >= sizeof name)
        return rai_fail(RA_ERR_INTERNAL, "swin: parameter name too long");
    const int64_t shape[4] = {d0, d1, d2, d3};
    return rai_model_declare(m, name, ndim, shape, 0);
}

/* A block's parameters, in the official state_dict order. */
static ra_status blk_declare(ra_model *m, const char *pfx, const swin_blk *b) {
    const int64_t C = b->dim, T = (2 * (int64_t)b->win[0] - 1) * (2 * (int64_t)b->win[1] - 1);
    ra_status st = decl(m, pfx, "norm1.weight", 1, C, 0, 0, 0);
    if (!st) st = decl(m, pfx, "norm1.bias", 1, C, 0, 0, 0);
    if (!st && b->cfg.arch == RA_ARCH_WINDOW_ATTENTION)
        st = decl(m, pfx, "attn.relative_position_bias_table", 2, T, b->heads, 0, 0);
    const int v2 = b->cfg.arch == RA_ARCH_SWINV2_WINDOW_ATTENTION;
    if (!st && v2) st = decl(m, pfx, "attn.logit_scale", 3, b->heads, 1, 1, 0);
    if (!st && v2 && b->cfg.qkv_bias && !b->tv) {   /* torchvision: one qkv.bias */
        st = decl(m, pfx, "attn.q_bias", 1, C, 0, 0, 0);
        if (!st) st = decl(m, pfx, "attn.v_bias", 1, C, 0, 0, 0);
    }
    if (!st && v2) st = decl(m, pfx, "attn.cpb_mlp.0.weight", 2, RA_CPB_HIDDEN, 2, 0, 0);
    if (!st && v2) st = decl(m, pfx, "attn.cpb_mlp.0.bias", 1, RA_CPB_HIDDEN, 0, 0, 0);
    if (!st && v2) st = decl(m, pfx, "attn.cpb_mlp.2.weight", 2, b->heads, RA_CPB_HIDDEN, 0, 0);
    if (b->cfg.arch == RA_ARCH_SHAW_ATTENTION) {   /* ((2k+1)^2, hd), shared by the heads */
        const int64_t R = (2 * (int64_t)b->cfg.max_rel + 1) * (2 * b->cfg.max_rel + 1);
        if (!st) st = decl(m, pfx, "attn.relative_keys", 2, R, C / b->heads, 0, 0);
        if (!st) st = decl(m, pfx, "attn.relative_values", 2, R, C / b->heads, 0, 0);
    }
    if (!st) st = decl(m, pfx, "attn.qkv.weight", 2, 3 * C, C, 0, 0);
    if (!st && b->cfg.qkv_bias && (!v2 || b->tv))
        st = decl(m, pfx, "attn.qkv.bias", 1, 3 * C, 0, 0, 0);
    if (!st) st = decl(m, pfx, "attn.proj.weight", 2, C, C, 0, 0);
    if (!st) st = decl(m, pfx, "attn.proj.bias", 1, C, 0, 0, 0);
    if (!st) st = decl(m, pfx, "norm2.weight", 1, C, 0, 0, 0);
    if (!st) st = decl(m, pfx, "norm2.bias", 1, C, 0, 0, 0);
    if (!st) st = decl(m, pfx, "mlp.fc1.weight", 2, b->hidden, C, 0, 0);
    if (!st) st = decl(m, pfx, "mlp.fc1.bias", 1, b->hidden, 0, 0, 0);
    if (!st) st = decl(m, pfx, "mlp.fc2.weight", 2, C, b->hidden, 0, 0);
    if (!st) st = decl(m, pfx, "mlp.fc2.bias", 1, C, 0, 0, 0);
    return st;
}

static const float *get(const ra_model *m, const char *pfx, const char *sfx) {
    char name[160];
    snprintf(name, sizeof name, "%s%s", pfx, sfx);
    return rai_model_get(m, name);
}

/* Bind a block's weights and build its attention layer. */
static ra_status blk_bind(const ra_model *m, const char *pfx, swin_blk *b) {
    rai_block *k = &b->blk;
    k->n1w = get(m, pfx, "norm1.weight"), k->n1b = get(m, pfx, "norm1.bias");
    k->n2w = get(m, pfx, "norm2.weight"), k->n2b = get(m, pfx, "norm2.bias");
    k->fc1w = get(m, pfx, "mlp.fc1.weight"), k->fc1b = get(m, pfx, "mlp.fc1.bias");
    k->fc2w = get(m, pfx, "mlp.fc2.weight"), k->fc2b = get(m, pfx, "mlp.fc2.bias");
    if (!k->n1w || !k->n1b || !k->n2w || !k->n2b || !k->fc1w || !k->fc1b || !k->fc2w ||
        !k->fc2b)
        return rai_fail(RA_ERR_INTERNAL, "swin: block %s is missing a parameter", pfx);
    ra_attn_params p = {
        .qkv_w = get(m, pfx, "attn.qkv.weight"), .qkv_b = get(m, pfx, "attn.qkv.bias"),
        .proj_w = get(m, pfx, "attn.proj.weight"), .proj_b = get(m, pfx, "attn.proj.bias"),
        .table = get(m, pfx, "attn.relative_position_bias_table"),
        .rel_k = get(m, pfx, "attn.relative_keys"), .rel_v = get(m, pfx, "attn.relative_values"),
        .logit_scale = get(m, pfx, "attn.logit_scale"),
        .cpb_w1 = get(m, pfx, "attn.cpb_mlp.0.weight"),
        .cpb_b1 = get(m, pfx, "attn.cpb_mlp.0.bias"),
        .cpb_w2 = get(m, pfx, "attn.cpb_mlp.2.weight"),
        .q_bias = get(m, pfx, "attn.q_bias"), .v_bias = get(m, pfx, "attn.v_bias")};
    if (b->post && p.qkv_b) {   /* torchvision's qkv.bias: its key third is never used */
        p.q_bias = p.qkv_b, p.v_bias = p.qkv_b + 2 * b->dim;
        p.qkv_b = NULL;
    }
    b->attn_w = p;
    return ra_attn_layer_create(&k->attn, &b->cfg, &p);
}

/* The windows of a block on an H x W map at run time. */
static ra_window_spec blk_windows(const swin_blk *b, int h, int w) {
    ra_window_spec g = {.d = 1, .h = h, .w = w, .wd = 1, .wh = b->win[0], .ww = b->win[1],
                        .sh = b->shift[0], .sw = b->shift[1]};
    if (b->tv) {   /* torchvision: no shift along an axis that is one window */
        int hp = 0, wp = 0;
        ra_window_padded(&g, NULL, &hp, &wp);
        if (g.wh >= hp) g.sh = 0;
        if (g.ww >= wp) g.sw = 0;
    }
    return g;
}

/* The block's layout over B maps of H x W: rows gathered through the
 * window map. */
static rai_block_layout blk_layout(const rai_window_layout *w, int B, int H, int W) {
    const int64_t nw = ra_window_count(&w->g), n = ra_window_tokens(&w->g);
    return (rai_block_layout){.m = (int64_t)B * H * W, .batch = B, .b_ = (int)(B * nw),
                             .n = (int)n, .map = w->map, .mask = w->mask,
                             .nw = w->mask ? (int)nw : 0};
}

static ra_status nomem(void) { return rai_fail(RA_ERR_NOMEM, "swin: out of memory"); }

/* ---- the training tape ------------------------------------------------- */

static void tape_free(swin_tape *t) {
    if (!t) return;
    if (t->a) rai_arena_end(&t->cache, t->a);
    rai_arena_cache_free(&t->cache);
    free(t->blocks);
    free(t);
}

/* Start a tape of nblocks blocks: the previous one is dropped and its
 * arena reused. */
static ra_status tape_begin(swin_tape **tp, int nblocks) {
    swin_tape *t = *tp;
    if (!t) {
        if (!(t = calloc(1, sizeof *t))) return nomem();
        *tp = t;
    }
    if (t->a) rai_arena_end(&t->cache, t->a);
    t->a = rai_arena_begin(&t->cache, &t->local);
    t->live = 0;
    if (nblocks > t->nblocks) {
        rai_block_tape *nb = realloc(t->blocks, (size_t)nblocks * sizeof *nb);
        if (!nb) return nomem();
        t->blocks = nb, t->nblocks = nblocks;
    }
    return RA_OK;
}

/* One block on B maps of H x W: x (B, H, W, C) -> y (B, H, W, C).
 * Inference (bt NULL): in place, y is x; attn (B*nW, nH, N, N) its
 * probabilities, if given. Training: y a buffer of its own, x kept until
 * the backward, the block's tape bt laid out in run's arena; rng draws the
 * drop-path. */
static ra_status blk_forward(const swin_blk *b, float *y, float *attn, rai_block_tape *bt,
                             float *x, int B, int H, int W, rai_window_layouts *run, ra_rng *rng) {
    const int C = b->dim;
    const ra_window_spec g = blk_windows(b, H, W);
    const int64_t nw = ra_window_count(&g), n = ra_window_tokens(&g);
    if (B < 1 || nw < 1 || n < 1)
        return rai_fail(RA_ERR_SHAPE, "swin block: batch %d of %dx%d maps with window %dx%d",
                        B, H, W, b->win[0], b->win[1]);
    const int shifted = g.sh || g.sw;
    int64_t M = 0, nx = 0, nwin = 0, nmask = 0, bw = 0;
    if (!rai_mul_i64(&M, (int64_t)B * H, W) || !rai_mul_i64(&nx, M, C) ||
        !rai_mul_i64(&bw, B, nw) || bw > INT_MAX || !rai_mul_i64(&nwin, bw * n, C) ||
        !rai_mul_i64(&nmask, nw * n, shifted ? n : 0) || nwin > ((int64_t)1 << 40) ||
        nmask > ((int64_t)1 << 40) || bw * n > INT32_MAX || M > INT32_MAX)
        return rai_fail(RA_ERR_SHAPE, "swin block: %d maps of %dx%dx%d are too large", B, H, W, C);
    const rai_window_layout *wl = NULL;
    ra_status st = rai_window_layout_get(run, &g, B, &wl);
    if (st) return st;
    const rai_block_layout l = blk_layout(wl, B, H, W);
    if (!bt) return rai_block_forward(&b->blk, x, attn, &l, run->a);
    float *base = rai_arena_floats(run->a, rai_block_tape_layout(bt, &b->blk, &l, NULL));
    if (!base) return nomem();
    rai_block_tape_layout(bt, &b->blk, &l, base);
    bt->x = x;
    return rai_block_forward_train(&b->blk, bt, y, 1, run->a, rng);
}

/* Multiply-adds of a block on an H x W map, as SwinTransformerBlock.flops()
 * counts them (norm1, the windows' attention, the MLP, norm2), with the
 * windows of the padded map. */
static int64_t blk_flops(const swin_blk *b, int h, int w) {
    const ra_window_spec g = blk_windows(b, h, w);
    const int64_t C = b->dim, N = ra_window_tokens(&g), L = (int64_t)h * w;
    int64_t attn = rai_cadd(rai_cmul3(N, C, 3 * C), rai_cmul3(N, N, 2 * C));   /* WindowAttention */
    attn = rai_cadd(attn, rai_cmul3(N, C, C));
    const int64_t f = rai_cadd(rai_cmul(2 * C, L), rai_cmul(ra_window_count(&g), attn));
    return rai_cadd(f, rai_cmul3(2 * L, C, b->hidden));
}

/* ---- tensor names ------------------------------------------------------- */

/* A block tensor's suffix in a scheme -> the canonical suffix (written into
 * out) or a buffer. b is the block (NULL if it does not exist). */
static rai_tensor_kind blk_suffix(swin_scheme sc, const swin_blk *b, const char *s, char *out,
                                  size_t n) {
    if (!b) return RA_TENSOR_UNKNOWN;
    if (strcmp(s, "attn.relative_position_index") == 0 ||
        (b->post && strcmp(s, "attn.relative_coords_table") == 0)) {
        if (b->cfg.arch != RA_ARCH_WINDOW_ATTENTION && !b->post) return RA_TENSOR_UNKNOWN;
        snprintf(out, n, "%s", s);
        return RA_TENSOR_BUFFER;
    }
    if (strcmp(s, "attn_mask") == 0) {
        if (sc == SCHEME_TORCHVISION || !(b->shift[0] || b->shift[1])) return RA_TENSOR_UNKNOWN;
        snprintf(out, n, "%s", s);
        return RA_TENSOR_BUFFER;
    }
    if (sc == SCHEME_TORCHVISION) {   /* MLP(dim, [hidden, dim]): Linear, GELU, Dropout, Linear */
        if (rai_starts(s, "mlp.fc")) return RA_TENSOR_UNKNOWN;
        const char *r = s;
        if (rai_take(&r, "mlp.0.")) return snprintf(out, n, "mlp.fc1.%s", r), RA_TENSOR_PARAM;
        if (rai_take(&r, "mlp.3.")) return snprintf(out, n, "mlp.fc2.%s", r), RA_TENSOR_PARAM;
    }
    snprintf(out, n, "%s", s);
    return RA_TENSOR_PARAM;
}

/* ---- metadata ----------------------------------------------------------- */

static ra_status meta_common(const ra_st_file *f, swin_common *k) {
    memset(k, 0, sizeof *k);
    k->qkv_bias = 1;
    ra_status st = rai_meta_mlp_ratio(f, &k->mlp_ratio);
    if (!st) st = rai_meta_bool_opt(f, "qkv_bias", &k->qkv_bias);
    if (!st) st = rai_meta_float_opt(f, "qk_scale", &k->qk_scale, &k->has_qk_scale);
    k->relpos = RELPOS_BIAS, k->shaw_k = -1;
    const char *rp = ra_st_meta(f, "relative_position");
    if (!st && rp) {
        if (!strcmp(rp, "none")) k->relpos = RELPOS_NONE;
        else if (!strcmp(rp, "shaw")) k->relpos = RELPOS_SHAW;
        else if (strcmp(rp, "bias"))
            st = rai_fail(RA_ERR_FORMAT, "metadata relative_position = \"%.40s\": need bias, "
                          "none or shaw", rp);
    }
    if (!st && k->relpos == RELPOS_SHAW)
        st = rai_meta_int_opt(f, "max_relative_position", &k->shaw_k, 0, 1023);
    k->v2 = strcmp(ra_st_meta(f, "arch"), "swinv2") == 0;
    if (!st && k->v2 && (k->has_qk_scale || k->relpos != RELPOS_BIAS))
        st = rai_fail(RA_ERR_FORMAT, "swinv2 takes neither qk_scale nor relative_position");
    return st;
}

/* ---- buffers ------------------------------------------------------------ */

/* A saved relative_position_index must be the computed one ((N, N), or
 * (N*N) flattened in torchvision). */
static ra_status check_index(const ra_st_file *f, const ra_st_tensor *t, const swin_blk *b) {
    int64_t n1 = 0, n2 = 0;
    const int32_t *idx = ra_attn_layer_index(b->blk.attn, &n1, &n2, NULL);
    if (!idx) return rai_fail(RA_ERR_INTERNAL, "swin: block without an index");
    const int ok = b->tv ? t->ndim == 1 && t->shape[0] == n1 * n2
                         : t->ndim == 2 && t->shape[0] == n1 && t->shape[1] == n2;
    if (!ok) {
        char want[64];
        if (b->tv) snprintf(want, sizeof want, "(%lld)", (long long)(n1 * n2));
        else snprintf(want, sizeof want, "(%lld, %lld)", (long long)n1, (long long)n2);
        return rai_fail(RA_ERR_SHAPE, "tensor '%.80s' must have shape %s for window %dx%d",
                        t->name, want, b->win[0], b->win[1]);
    }
    return rai_check_saved_index(f, t, idx, n2);
}

/* A saved attn_mask must be the shifted-window mask of the constructor's
 * resolution (padded to the window). */
static ra_status check_mask(const ra_st_file *f, const ra_st_tensor *t, const swin_blk *b) {
    const ra_window_spec g = blk_windows(b, b->res[0], b->res[1]);
    const int64_t nw = ra_window_count(&g), n = ra_window_tokens(&g);
    if (!(t->ndim == 3 && t->shape[0] == nw && t->shape[1] == n && t->shape[2] == n))
        return rai_fail(RA_ERR_SHAPE, "tensor '%.80s' must have shape (%lld, %lld, %lld): the "
                        "mask of a %dx%d map with window %dx%d", t->name, (long long)nw,
                        (long long)n, (long long)n, b->res[0], b->res[1], b->win[0], b->win[1]);
    if (!rai_dtype_is_float(t->dtype)) return rai_fail(RA_ERR_SHAPE, "tensor '%.80s' must be a float tensor",
                                            t->name);
    float *want = rai_alloc((size_t)t->numel, sizeof *want);
    float *got = rai_alloc((size_t)t->numel, sizeof *got);
    ra_status st = want && got ? RA_OK : rai_fail(RA_ERR_NOMEM, "attn_mask: out of memory");
    if (!st) st = ra_window_mask(want, &g);
    if (!st) st = ra_st_read_f32(got, f, t);
    for (int64_t e = 0; !st && e < t->numel; e++)
        if (!(got[e] == want[e]))
            st = rai_fail(RA_ERR_FORMAT, "tensor '%.80s' differs from the shifted-window mask at "
                          "(%lld, %lld, %lld): %g, expected %g", t->name, (long long)(e / (n * n)),
                          (long long)(e / n % n), (long long)(e % n), got[e], want[e]);
    rai_free(want);
    rai_free(got);
    return st;
}

/* A buffer of a block (suffix sfx) against the computed one. */
static ra_status check_buffer(const ra_st_file *f, const ra_st_tensor *t, const char *sfx,
                              const swin_blk *b) {
    if (strcmp(sfx, "attn_mask") == 0) return check_mask(f, t, b);
    if (strcmp(sfx, "attn.relative_coords_table") == 0)
        return rai_swinv2_check_coords(f, t, &b->cfg);
    return check_index(f, t, b);
}

/* ====================================================================== */
/* swin_block                                                               */
/* ====================================================================== */


/* The scheme a replica was given (RA_META_NAMING), or -1. */
static int replica_scheme(const ra_st_file *f) {
    const char *s = ra_st_meta(f, RA_META_NAMING);
    for (int i = 0; s && i < (int)(sizeof scheme_names / sizeof *scheme_names); i++)
        if (!strcmp(s, scheme_names[i])) return i;
    return -1;
}

static swin_scheme block_scheme(const ra_st_file *f) {
    const int given = replica_scheme(f);
    if (given >= 0) return (swin_scheme)given;
    for (int i = 0; i < ra_st_count(f); i++) {
        const char *nm = ra_st_at(f, i)->name;
        if (rai_starts(nm, "mlp.0.") || rai_starts(nm, "mlp.3.")) return SCHEME_TORCHVISION;
    }
    return SCHEME_OFFICIAL;
}

static ra_status block_model_declare(ra_model *m, const ra_st_file *f) {
    swin_block_model *o = calloc(1, sizeof *o);
    if (!o) return rai_fail(RA_ERR_NOMEM, "model: out of memory");
    m->impl = o;
    o->scheme = block_scheme(f);
    swin_common k;
    int dim = 0, heads = 0, res[2] = {0, 0}, win[2] = {0, 0}, shift[2] = {0, 0};
    ra_status st = rai_meta_int(f, "dim", &dim, 1, SWIN_MAX_DIM);
    if (!st) st = rai_meta_pair(f, "input_resolution", res, 1, SWIN_MAX_SIZE);
    if (!st) st = rai_meta_int(f, "num_heads", &heads, 1, SWIN_MAX_DIM);
    if (!st) st = rai_meta_pair(f, "window_size", win, 1, SWIN_MAX_SIZE);
    if (!st) st = rai_meta_pair(f, "shift_size", shift, 0, SWIN_MAX_SIZE);
    if (!st) st = meta_common(f, &k);
    if (!st) st = blk_setup(&o->b, dim, heads, res, win, shift, o->scheme == SCHEME_TORCHVISION, &k,
                            NULL);
    if (!st) st = blk_declare(m, "", &o->b);
    return st;
}

static ra_status block_model_detect(ra_model *m, const ra_st_file *f) {
    (void)f;
    snprintf(m->scheme, sizeof m->scheme, "%s", scheme_names[((swin_block_model *)m->impl)->scheme]);
    return RA_OK;
}

static rai_tensor_kind block_model_canonical(const ra_model *m, const char *name, char *buf, size_t n) {
    const swin_block_model *o = m->impl;
    return blk_suffix(o->scheme, &o->b, name, buf, n);
}

static ra_status block_model_build(ra_model *m, const ra_st_file *f) {
    swin_block_model *o = m->impl;
    ra_status st = blk_bind(m, "", &o->b);
    for (int i = 0; !st && i < ra_st_count(f); i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        char canon[256];
        if (block_model_canonical(m, t->name, canon, sizeof canon) != RA_TENSOR_BUFFER) continue;
        st = check_buffer(f, t, canon, &o->b);
    }
    return st;
}

static void block_model_destroy(void *impl) {
    swin_block_model *o = impl;
    ra_attn_layer_free(o->b.blk.attn);
    rai_arena_cache_free(&o->ws);
    tape_free(o->tape);
    free(o);
}

/* swin_block's forward: x (B, H*W, C) or (B, H, W, C) -> y of x's shape.
 * t NULL: inference; else training, filling the tape t (begun), with rng
 * for the drop-path. */
static ra_status block_model_run(swin_block_model *o, swin_tape *t, ra_rng *rng, float **y,
                                 int *y_ndim, int64_t y_shape[4], const float *x, int x_ndim,
                                 const int64_t *x_shape) {
    const swin_blk *b = &o->b;
    int64_t B, H, W, C;
    if (x_ndim == 3) {
        B = x_shape[0], C = x_shape[2];
        H = b->res[0], W = b->res[1];
        if (x_shape[1] != H * W)
            return rai_fail(RA_ERR_SHAPE, "swin_block: x (B, L, C) needs L = %lld for "
                            "input_resolution %lldx%lld, got %lld (pass (B, H, W, C) for "
                            "another size)", (long long)(H * W), (long long)H, (long long)W,
                            (long long)x_shape[1]);
    } else if (x_ndim == 4) {
        B = x_shape[0], H = x_shape[1], W = x_shape[2], C = x_shape[3];
    } else {
        return rai_fail(RA_ERR_SHAPE, "swin_block takes x (B, H*W, C) or (B, H, W, C), got %d "
                        "dimensions", x_ndim);
    }
    if (C != b->dim)
        return rai_fail(RA_ERR_SHAPE, "swin_block: x has %lld channels, dim is %d", (long long)C,
                        b->dim);
    if (B < 1 || B > INT_MAX || H < 1 || H > SWIN_MAX_SIZE || W < 1 || W > SWIN_MAX_SIZE)
        return rai_fail(RA_ERR_SHAPE, "swin_block: batch %lld of %lldx%lld maps", (long long)B,
                        (long long)H, (long long)W);
    int64_t nx;
    if (!rai_mul_i64(&nx, B, H * W) || !rai_mul_i64(&nx, nx, C) || nx > ((int64_t)1 << 40))
        return rai_fail(RA_ERR_SHAPE, "swin_block: input too large");
    float *out = rai_alloc((size_t)nx, sizeof *out);
    if (!out) return nomem();
    rai_arena local;
    rai_window_layouts run = {.a = t ? t->a : rai_arena_begin(&o->ws, &local)};
    /* inference: in place on the output; training: the tape keeps x (the
     * caller's may go) */
    float *in = t ? rai_arena_floats(t->a, (size_t)nx) : out;
    ra_status st = in ? RA_OK : nomem();
    if (!st) {
        memcpy(in, x, (size_t)nx * sizeof *in);
        st = blk_forward(b, out, NULL, t ? &t->blocks[0] : NULL, in, (int)B, (int)H, (int)W,
                         &run, rng);
    }
    if (!t) rai_arena_end(&o->ws, run.a);
    if (st) {
        rai_free(out);
        return st;
    }
    if (t) t->B = (int)B, t->Hin = (int)H, t->Win = (int)W, t->live = 1;
    *y = out;
    *y_ndim = x_ndim;
    for (int i = 0; i < x_ndim; i++) y_shape[i] = x_shape[i];
    return RA_OK;
}

static ra_status block_model_forward(const ra_model *m, float **y, int *y_ndim,
                                     int64_t y_shape[4], const float *x, int x_ndim,
                                     const int64_t *x_shape) {
    return block_model_run(m->impl, NULL, NULL, y, y_ndim, y_shape, x, x_ndim, x_shape);
}

static ra_status block_model_forward_train(ra_model *m, float **y, int *y_ndim,
                                           int64_t y_shape[4], const float *x, int x_ndim,
                                           const int64_t *x_shape, ra_rng *rng) {
    swin_block_model *o = m->impl;
    ra_status st = tape_begin(&o->tape, 1);
    if (st) return st;
    return block_model_run(o, o->tape, rng, y, y_ndim, y_shape, x, x_ndim, x_shape);
}

static int64_t block_model_flops(const ra_model *m, int h, int w) {
    return h <= SWIN_MAX_SIZE && w <= SWIN_MAX_SIZE ? blk_flops(&((const swin_block_model *)m->impl)->b, h, w)
                                                    : -1;
}

const rai_arch_ops rai_swin_block_ops = {
    .name = "swin_block", .arch = RA_ARCH_SWIN_BLOCK, .batched = 1, .declare = block_model_declare,
    .canonical = block_model_canonical, .detect = block_model_detect, .build = block_model_build,
    .destroy = block_model_destroy, .forward = block_model_forward,
    .forward_train = block_model_forward_train, .backward = rai_swin_block_backward,
    .flops = block_model_flops};

/* ====================================================================== */
/* swin                                                                     */
/* ====================================================================== */


/* The scheme from the names: torchvision's features.*; else official or
 * timm by the names only one of them has (head.* or head.fc.*; patch merging
 * of stage 0 or of the last stage), the majority winning and official on a
 * tie: a mixed file is then refused at the first tensor that does not fit. */
static swin_scheme net_scheme(const ra_st_file *f, int nstages) {
    const int given = replica_scheme(f);
    if (given >= 0) return (swin_scheme)given;
    int official = 0, timm = 0;
    for (int i = 0; i < ra_st_count(f); i++) {
        const char *nm = ra_st_at(f, i)->name, *p = nm;
        int s;
        if (rai_starts(nm, "features.")) return SCHEME_TORCHVISION;
        if (rai_starts(nm, "head.fc.")) timm++;
        else if (rai_starts(nm, "head.")) official++;
        else if (rai_take(&p, "layers.") && rai_take_index(&p, &s) && rai_starts(p, "downsample.")) {
            official += s == 0 && nstages > 1;
            timm += s == nstages - 1 && s > 0;
        }
    }
    return timm > official ? SCHEME_TIMM : SCHEME_OFFICIAL;
}

static const swin_blk *net_block(const swin_net *n, int stage, int j) {
    if (stage < 0 || stage >= n->nstages || j < 0 || j >= n->depths[stage]) return NULL;
    return &n->blocks[n->first[stage] + j];
}

static ra_status net_declare(ra_model *m, const ra_st_file *f) {
    swin_net *n = calloc(1, sizeof *n);
    if (!n) return rai_fail(RA_ERR_NOMEM, "model: out of memory");
    m->impl = n;
    int nh = 0;
    n->ape = 0, n->patch_norm = 1;
    int patch[2] = {0, 0};
    ra_status st = rai_meta_pair(f, "img_size", n->img, 1, SWIN_MAX_SIZE);
    if (!st) st = rai_meta_pair(f, "patch_size", patch, 1, 4096);
    if (!st && patch[0] != patch[1])
        st = rai_fail(RA_ERR_FORMAT, "metadata patch_size %d,%d: only square patches", patch[0],
                      patch[1]);
    n->patch = n->patch_kernel = patch[0];
    if (!st && ra_st_meta(f, "patch_kernel")) {   /* relattn's overlapping embedding */
        st = rai_meta_int(f, "patch_kernel", &n->patch_kernel, 1, RAI_PATCH_KERNEL_MAX);
        if (!st && (n->patch_kernel < n->patch || (n->patch_kernel - n->patch) % 2))
            st = rai_fail(RA_ERR_FORMAT, "metadata patch_kernel %d: need patch_size %d plus an "
                          "even number", n->patch_kernel, n->patch);
    }
    if (!st) st = rai_meta_int(f, "in_chans", &n->in_chans, 1, 4096);
    if (!st) st = rai_meta_int(f, "num_classes", &n->num_classes, 0, SWIN_MAX_HIDDEN);
    if (!st) st = rai_meta_int(f, "embed_dim", &n->embed_dim, 1, SWIN_MAX_DIM);
    if (!st) st = rai_meta_list(f, "depths", n->depths, SWIN_MAX_STAGES, &n->nstages, 0, 1024);
    if (!st) st = rai_meta_list(f, "num_heads", n->heads, SWIN_MAX_STAGES, &nh, 1, SWIN_MAX_DIM);
    if (!st && nh != n->nstages)
        st = rai_fail(RA_ERR_FORMAT, "metadata depths has %d stages but num_heads has %d",
                      n->nstages, nh);
    if (!st) st = rai_meta_pair(f, "window_size", n->window, 1, SWIN_MAX_SIZE);
    if (!st) st = rai_meta_bool_opt(f, "ape", &n->ape);
    if (!st) st = rai_meta_bool_opt(f, "patch_norm", &n->patch_norm);
    if (!st) st = meta_common(f, &n->k);
    if (!st) st = rai_meta_double_opt(f, "drop_path_rate", &n->drop_path_rate, NULL);
    if (!st && !(n->drop_path_rate >= 0.0 && n->drop_path_rate <= 1.0))
        st = rai_fail(RA_ERR_FORMAT, "metadata drop_path_rate = %g is not in [0, 1]",
                      n->drop_path_rate);
    int pws[SWIN_MAX_STAGES] = {0}, npws = 0;
    if (!st && n->k.v2 && ra_st_meta(f, "pretrained_window_sizes")) {
        st = rai_meta_list(f, "pretrained_window_sizes", pws, SWIN_MAX_STAGES, &npws, 0, 4096);
        if (!st && npws != n->nstages)
            st = rai_fail(RA_ERR_FORMAT, "metadata pretrained_window_sizes has %d values for %d "
                          "stages", npws, n->nstages);
    }
    /* a transformers SwinBackbone / Swinv2Backbone: out_indices counts the
     * stages from 1 (0 is its stem); no final norm, no head */
    int outs[SWIN_MAX_STAGES];
    if (!st && ra_st_meta(f, "out_indices")) {
        st = rai_meta_list(f, "out_indices", outs, SWIN_MAX_STAGES, &n->nout, 1, SWIN_MAX_STAGES);
        for (int i = 0; !st && i < n->nout; i++)
            if (outs[i] > n->nstages)
                st = rai_fail(RA_ERR_FORMAT, "metadata out_indices: no stage %d (1..%d)", outs[i],
                              n->nstages);
        if (!st && n->num_classes)
            st = rai_fail(RA_ERR_FORMAT, "metadata out_indices (a transformers backbone) with "
                          "num_classes %d: a backbone has no head", n->num_classes);
        for (int i = 0; i < n->nout; i++) n->out[i] = outs[i] - 1;
    }
    if (st) return st;
    /* SwinBackbone runs its encoder with always_partition: the windows and
     * shifts as built for window_size, never clamped to a smaller map */
    n->k.always_partition = n->nout > 0 && !n->k.v2;
    n->scheme = net_scheme(f, n->nstages);
    const int tv = n->scheme == SCHEME_TORCHVISION;
    n->grid[0] = n->img[0] / n->patch, n->grid[1] = n->img[1] / n->patch;
    if (n->ape && (n->grid[0] < 1 || n->grid[1] < 1))
        return rai_fail(RA_ERR_FORMAT, "img_size %dx%d is smaller than patch_size %d", n->img[0],
                        n->img[1], n->patch);
    if ((int64_t)n->embed_dim << (n->nstages - 1) > SWIN_MAX_DIM)
        return rai_fail(RA_ERR_FORMAT, "embed_dim %d over %d stages exceeds %d channels",
                        n->embed_dim, n->nstages, SWIN_MAX_DIM);
    n->features = n->embed_dim << (n->nstages - 1);
    for (int s = 0; s < n->nstages; s++) n->first[s + 1] = n->first[s] + n->depths[s];
    n->nblocks = n->first[n->nstages];
    if (n->nblocks && !(n->blocks = calloc((size_t)n->nblocks, sizeof *n->blocks)))
        return rai_fail(RA_ERR_NOMEM, "model: out of memory");

    /* blocks: each stage's constructor resolution, window and shift */
    for (int s = 0; s < n->nstages && !st; s++) {
        const int dim = n->embed_dim << s;
        const int res[2] = {n->grid[0] >> s, n->grid[1] >> s};
        if (n->heads[s] > dim || dim % n->heads[s])
            return rai_fail(RA_ERR_FORMAT, "stage %d: dim %d is not divisible by num_heads %d", s,
                            dim, n->heads[s]);
        if (!tv && !n->k.always_partition && n->depths[s] && (res[0] < 1 || res[1] < 1))
            return rai_fail(RA_ERR_FORMAT, "img_size %dx%d with patch_size %d leaves no feature "
                            "map at stage %d", n->img[0], n->img[1], n->patch, s);
        for (int j = 0; j < n->depths[s] && !st; j++) {
            const int shift[2] = {j % 2 ? n->window[0] / 2 : 0, j % 2 ? n->window[1] / 2 : 0};
            st = blk_setup(&n->blocks[n->first[s] + j], dim, n->heads[s], res, n->window, shift,
                           tv, &n->k, (const int[2]){pws[s], pws[s]});
            if (st) {
                char why[300];
                snprintf(why, sizeof why, "%s", ra_last_error());
                return rai_fail(st, "layers.%d.blocks.%d: %s", s, j, why);
            }
        }
    }
    for (int i = 1; i < n->nblocks; i++)   /* block 0 never drops */
        n->blocks[i].blk.drop_path = (float)(n->drop_path_rate * i / (n->nblocks - 1));

    /* parameters, in the official state_dict order */
    const int64_t E = n->embed_dim, P = n->patch_kernel;
    if (n->ape) st = decl(m, "", "absolute_pos_embed", 3, 1, (int64_t)n->grid[0] * n->grid[1], E, 0);
    if (!st) st = decl(m, "", "patch_embed.proj.weight", 4, E, n->in_chans, P, P);
    if (!st) st = decl(m, "", "patch_embed.proj.bias", 1, E, 0, 0, 0);
    if (!st && n->patch_norm) st = decl(m, "", "patch_embed.norm.weight", 1, E, 0, 0, 0);
    if (!st && n->patch_norm) st = decl(m, "", "patch_embed.norm.bias", 1, E, 0, 0, 0);
    for (int s = 0; s < n->nstages && !st; s++) {
        char pfx[64];
        for (int j = 0; j < n->depths[s] && !st; j++) {
            snprintf(pfx, sizeof pfx, "layers.%d.blocks.%d.", s, j);
            st = blk_declare(m, pfx, &n->blocks[n->first[s] + j]);
        }
        if (s < n->nstages - 1 && !st) {
            const int64_t C = (int64_t)n->embed_dim << s;
            snprintf(pfx, sizeof pfx, "layers.%d.downsample.", s);
            const int64_t cn = n->k.v2 ? 2 * C : 4 * C;   /* V2: the norm after the reduction */
            st = decl(m, pfx, "reduction.weight", 2, 2 * C, 4 * C, 0, 0);
            if (!st) st = decl(m, pfx, "norm.weight", 1, cn, 0, 0, 0);
            if (!st) st = decl(m, pfx, "norm.bias", 1, cn, 0, 0, 0);
        }
    }
    if (!st && !n->nout) st = decl(m, "", "norm.weight", 1, n->features, 0, 0, 0);
    if (!st && !n->nout) st = decl(m, "", "norm.bias", 1, n->features, 0, 0, 0);
    for (int i = 0; !st && !n->k.v2 && i < n->nout; i++) {   /* SwinBackbone's own norms */
        char pfx[64];
        snprintf(pfx, sizeof pfx, "hidden_states_norms.stage%d.", n->out[i] + 1);
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= n->out[j] == n->out[i];
        if (!dup) {
            st = decl(m, pfx, "weight", 1, (int64_t)n->embed_dim << n->out[i], 0, 0, 0);
            if (!st) st = decl(m, pfx, "bias", 1, (int64_t)n->embed_dim << n->out[i], 0, 0, 0);
        }
    }
    if (!st && n->num_classes > 0) {
        st = decl(m, "", "head.weight", 2, n->num_classes, n->features, 0, 0);
        if (!st) st = decl(m, "", "head.bias", 1, n->num_classes, 0, 0, 0);
    }
    return st;
}

static ra_status net_detect(ra_model *m, const ra_st_file *f) {
    (void)f;
    snprintf(m->scheme, sizeof m->scheme, "%s", scheme_names[((swin_net *)m->impl)->scheme]);
    return RA_OK;
}

/* "layers.S.blocks.J.SUFFIX" (canonical names) -> the block's suffix. */
static rai_tensor_kind net_block_name(const swin_net *n, int s, const char *p, char *buf,
                                      size_t len) {
    int j;
    char sfx[200];
    if (!rai_take(&p, "blocks.") || !rai_take_index(&p, &j)) return RA_TENSOR_UNKNOWN;
    rai_tensor_kind k = blk_suffix(n->scheme, net_block(n, s, j), p, sfx, sizeof sfx);
    if (k != RA_TENSOR_UNKNOWN &&
        (size_t)snprintf(buf, len, "layers.%d.blocks.%d.%s", s, j, sfx) >= len)
        return RA_TENSOR_UNKNOWN;
    return k;
}

static rai_tensor_kind net_canonical(const ra_model *m, const char *name, char *buf, size_t len) {
    const swin_net *n = m->impl;
    const char *p = name;
    int s;
    switch (n->scheme) {
    case SCHEME_OFFICIAL:
        if (rai_take(&p, "layers.") && rai_take_index(&p, &s) && rai_starts(p, "blocks."))
            return net_block_name(n, s, p, buf, len);
        break;
    case SCHEME_TIMM:
        if (rai_take(&p, "layers.") && rai_take_index(&p, &s)) {
            if (rai_starts(p, "blocks.")) return net_block_name(n, s, p, buf, len);
            if (rai_take(&p, "downsample.")) {   /* the start of stage s = the end of stage s-1 */
                if (s < 1) return RA_TENSOR_UNKNOWN;
                snprintf(buf, len, "layers.%d.downsample.%s", s - 1, p);
                return RA_TENSOR_PARAM;
            }
            return RA_TENSOR_UNKNOWN;
        }
        p = name;
        if (rai_take(&p, "head.fc.")) return snprintf(buf, len, "head.%s", p), RA_TENSOR_PARAM;
        if (rai_starts(name, "head.")) return RA_TENSOR_UNKNOWN;
        break;
    case SCHEME_TORCHVISION: {
        int k, j;
        if (rai_take(&p, "norm.") || rai_take(&p, "head.")) break;
        if (!rai_take(&p, "features.") || !rai_take_index(&p, &k)) return RA_TENSOR_UNKNOWN;
        if (k == 0) {   /* Sequential(Conv2d, Permute, LayerNorm) */
            if (rai_take(&p, "0.")) return snprintf(buf, len, "patch_embed.proj.%s", p), RA_TENSOR_PARAM;
            if (rai_take(&p, "2.")) return snprintf(buf, len, "patch_embed.norm.%s", p), RA_TENSOR_PARAM;
            return RA_TENSOR_UNKNOWN;
        }
        if (k % 2) {   /* a stage: Sequential of blocks */
            char sfx[200];
            if (!rai_take_index(&p, &j)) return RA_TENSOR_UNKNOWN;
            rai_tensor_kind kind = blk_suffix(n->scheme, net_block(n, (k - 1) / 2, j), p, sfx,
                                              sizeof sfx);
            if (kind != RA_TENSOR_UNKNOWN &&
                (size_t)snprintf(buf, len, "layers.%d.blocks.%d.%s", (k - 1) / 2, j, sfx) >= len)
                return RA_TENSOR_UNKNOWN;
            return kind;
        }
        snprintf(buf, len, "layers.%d.downsample.%s", (k - 2) / 2, p);   /* PatchMerging */
        return RA_TENSOR_PARAM;
    }
    }
    if ((size_t)snprintf(buf, len, "%s", name) >= len) return RA_TENSOR_UNKNOWN;
    return RA_TENSOR_PARAM;
}

static ra_status net_build(ra_model *m, const ra_st_file *f) {
    swin_net *n = m->impl;
    ra_status st = RA_OK;
    const int tv = n->scheme == SCHEME_TORCHVISION;   /* Conv2d(stride P) crops */
    n->stem = (rai_stem){.in_chans = n->in_chans, .patch = n->patch, .kernel = n->patch_kernel,
                         .dim = n->embed_dim, .pad = !tv, .crop = tv,
                         .w = rai_model_get(m, "patch_embed.proj.weight"),
                         .b = rai_model_get(m, "patch_embed.proj.bias"),
                         .nw = rai_model_get(m, "patch_embed.norm.weight"),
                         .nb = rai_model_get(m, "patch_embed.norm.bias"), .eps = SWIN_EPS,
                         .pos = rai_model_get(m, "absolute_pos_embed")};
    n->head = (rai_head){.dim = n->features, .eps = SWIN_EPS, .nw = rai_model_get(m, "norm.weight"),
                         .nb = rai_model_get(m, "norm.bias"), .pool = RAI_POOL_AVG,
                         .w = rai_model_get(m, "head.weight"), .b = rai_model_get(m, "head.bias"),
                         .classes = n->num_classes};
    for (int s = 0; s < n->nstages && !st; s++) {
        char pfx[64];
        snprintf(pfx, sizeof pfx, "hidden_states_norms.stage%d.", s + 1);
        n->out_nw[s] = get(m, pfx, "weight"), n->out_nb[s] = get(m, pfx, "bias");
        for (int j = 0; j < n->depths[s] && !st; j++) {
            snprintf(pfx, sizeof pfx, "layers.%d.blocks.%d.", s, j);
            st = blk_bind(m, pfx, &n->blocks[n->first[s] + j]);
        }
        if (s < n->nstages - 1) {
            snprintf(pfx, sizeof pfx, "layers.%d.downsample.", s);
            n->merge[s] = (rai_merge){.post = n->k.v2, .eps = SWIN_EPS,
                                      .w = get(m, pfx, "reduction.weight"),
                                      .nw = get(m, pfx, "norm.weight"),
                                      .nb = get(m, pfx, "norm.bias")};
        }
    }
    /* the buffers the file carries */
    for (int i = 0; !st && i < ra_st_count(f); i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        char canon[256];
        if (net_canonical(m, t->name, canon, sizeof canon) != RA_TENSOR_BUFFER) continue;
        const char *p = canon;
        int s = -1, j = -1;
        if (!rai_take(&p, "layers.") || !rai_take_index(&p, &s) || !rai_take(&p, "blocks.") ||
            !rai_take_index(&p, &j) || !net_block(n, s, j))
            return rai_fail(RA_ERR_INTERNAL, "swin: buffer %s", canon);
        st = check_buffer(f, t, p, net_block(n, s, j));
    }
    return st;
}

static void net_destroy(void *impl) {
    swin_net *n = impl;
    for (int i = 0; n->blocks && i < n->nblocks; i++) ra_attn_layer_free(n->blocks[i].blk.attn);
    free(n->blocks);
    rai_arena_cache_free(&n->ws);
    tape_free(n->tape);
    free(n);
}

/* ---- the network's forward: inference, or training with a tape ------------
 * Each step below runs as inference when the tape t is NULL (in place
 * where it can, its scratch released) and keeps what the backward reads
 * when it is not (nothing released: the arena is the tape's). */

/* Check images x (B, C_in, H, W) for the network (train: the tape's larger
 * bound) and give their sizes. */
static ra_status net_input(const swin_net *n, int x_ndim, const int64_t *x_shape, int train,
                            int64_t *B, int64_t *H, int64_t *W) {
    if (x_ndim != 4 || x_shape[1] != n->in_chans)
        return rai_fail(RA_ERR_SHAPE, "swin takes images x (B, %d, H, W)", n->in_chans);
    const int64_t b = x_shape[0], h = x_shape[2], w = x_shape[3];
    if (b < 1 || b > INT_MAX || h < 1 || h > SWIN_MAX_SIZE || w < 1 || w > SWIN_MAX_SIZE)
        return rai_fail(RA_ERR_SHAPE, "swin: batch %lld of %lldx%lld images", (long long)b,
                        (long long)h, (long long)w);
    /* every activation is at most about (B, H*W/P^2 rounded up, max(E*kc)),
     * and the training tape keeps a few of them per block */
    int64_t big;
    const int64_t per = (h + n->patch) * (w + n->patch) / ((int64_t)n->patch * n->patch) + 1;
    const int64_t wide = (int64_t)n->in_chans * n->patch_kernel * n->patch_kernel +
                         (train ? 8 : 4) * (int64_t)n->features;
    if (!rai_mul_i64(&big, b, per) || !rai_mul_i64(&big, big, wide) ||
        big > ((int64_t)1 << (train ? 38 : 40)))
        return rai_fail(RA_ERR_SHAPE, "swin: input too large%s", train ? " to train on" : "");
    *B = b, *H = h, *W = w;
    return RA_OK;
}

/* x (B, Cin, H, W) -> tokens (B, gh*gw, E) after the patch embedding, its
 * norm and the absolute position embedding (stem.c); *out from the arena. */
static ra_status net_embed(const swin_net *n, swin_tape *t, rai_arena *a, float **out, int *gh,
                           int *gw, const float *x, int B, int H, int W) {
    int hc, wc;
    ra_status st = rai_stem_grid(&n->stem, H, W, &hc, &wc, gh, gw);
    if (st) return rai_fail(st, "swin: %s", ra_last_error());
    if (n->ape && (*gh != n->grid[0] || *gw != n->grid[1]))
        return rai_fail(RA_ERR_SHAPE, "swin: absolute_pos_embed is for a %dx%d patch grid "
                        "(img_size %dx%d), the input gives %dx%d", n->grid[0], n->grid[1],
                        n->img[0], n->img[1], *gh, *gw);
    float *y = rai_arena_floats(a, (size_t)B * *gh * *gw * n->embed_dim);
    if (!y) return nomem();
    if (t) {   /* the stem's tape */
        const size_t need = rai_stem_tape_layout(NULL, &n->stem, B, H, W, NULL);
        float *base = rai_arena_floats(a, need);
        if (!base) return nomem();
        rai_stem_tape_layout(&t->stem, &n->stem, B, H, W, base);
    }
    if ((st = rai_stem_forward(&n->stem, y, t ? &t->stem : NULL, x, B, H, W, a))) return st;
    *out = y;
    return RA_OK;
}

/* Blocks i0..i1-1 of the network on *x (B, H, W, C): inference in place;
 * training each block's output a buffer of its own, *x then the last. */
static ra_status net_blocks(const swin_net *n, swin_tape *t, int i0, int i1, float **x, int B,
                            int H, int W, rai_window_layouts *run, ra_rng *rng) {
    ra_status st = RA_OK;
    for (int i = i0; i < i1 && !st; i++) {
        const swin_blk *b = &n->blocks[i];
        float *y = t ? rai_arena_floats(run->a, (size_t)B * H * W * b->dim) : *x;
        if (!y) return nomem();
        st = blk_forward(b, y, NULL, t ? &t->blocks[i] : NULL, *x, B, H, W, run, rng);
        *x = y;
    }
    return st;
}

/* Patch merging after stage s (merge.c): *x (B, H, W, C) replaced by
 * (B, ceil(H/2) * ceil(W/2), 2C), a buffer of the arena. */
static ra_status net_merge(const swin_net *n, swin_tape *t, int s, rai_arena *a, float **x,
                           int B, int H, int W, int C) {
    float *y = rai_arena_floats(a, (size_t)B * ((H + 1) / 2) * ((W + 1) / 2) * 2 * C);
    if (!y) return nomem();
    ra_status st = rai_merge_forward(&n->merge[s], y, t ? &t->merge[s] : NULL, *x, B, H, W, C, a);
    if (!st) *x = y;
    return st;
}

/* Stage s's output tok (B, h*w, C) into the map f wants of it (if any),
 * normalised as f says: timm's norm=True the final norm on the last stage
 * only; a transformers SwinBackbone its hidden_states_norms of the stage. */
static ra_status net_feature(const swin_net *n, const rai_feat *f, int s, rai_arena *a,
                             const float *tok, int B, int h, int w, int C) {
    const int i = rai_feat_find(f, s);
    if (i < 0) return RA_OK;
    const float *nw = NULL, *nb = NULL;
    if (f->norm == RAI_FEAT_NORM_FINAL && s == n->nstages - 1) nw = n->head.nw, nb = n->head.nb;
    if (f->norm == RAI_FEAT_NORM_MODEL) nw = n->out_nw[s], nb = n->out_nb[s];
    return rai_feat_put(f, i, a, tok, B, (int64_t)h * w, C, nw, nb, SWIN_EPS);
}

/* The network's forward: x (B, Cin, H, W) images -> y (B, num_classes)
 * logits (or the pooled features without a head). t NULL: inference;
 * else training, filling the tape t (begun), with rng for the drop-path.
 * f (inference only; NULL: none): the feature maps handed out after each
 * stage's blocks, before the next patch merging. */
static ra_status net_run(swin_net *n, swin_tape *t, ra_rng *rng, const rai_feat *f, float **y,
                         int *y_ndim, int64_t y_shape[4], const float *x, int x_ndim,
                         const int64_t *x_shape) {
    int64_t B = 0, H = 0, W = 0;
    ra_status st = net_input(n, x_ndim, x_shape, t != NULL, &B, &H, &W);
    if (st) return st;
    rai_arena local;
    rai_window_layouts run = {.a = t ? t->a : rai_arena_begin(&n->ws, &local)};
    float *tok = NULL, *out = NULL;
    int h = 0, w = 0, C = n->embed_dim;
    st = net_embed(n, t, run.a, &tok, &h, &w, x, (int)B, (int)H, (int)W);
    for (int s = 0; s < n->nstages && !st; s++) {
        const size_t mark = rai_arena_mark(run.a);   /* the stage's window layouts */
        run.count = 0;
        if (t) t->sh[s] = h, t->sw[s] = w;
        st = net_blocks(n, t, n->first[s], n->first[s + 1], &tok, (int)B, h, w, &run, rng);
        if (!t) rai_arena_reset(run.a, mark);   /* training: kept for the backward */
        if (f && !st) st = net_feature(n, f, s, run.a, tok, (int)B, h, w, C);
        run.count = 0;
        if (s < n->nstages - 1 && !st) {
            st = net_merge(n, t, s, run.a, &tok, (int)B, h, w, C);
            h = (h + 1) / 2, w = (w + 1) / 2, C *= 2;
        }
    }
    /* final norm, mean over the tokens, head (head.c) */
    const int64_t L = (int64_t)h * w;
    const int K = n->num_classes > 0 ? n->num_classes : C;
    if (!st && t) {
        t->hf = h, t->wf = w, t->cf = C;
        const size_t need = rai_head_tape_layout(NULL, &n->head, (int)B, L, tok, NULL);
        float *base = rai_arena_floats(run.a, need);
        if (base) rai_head_tape_layout(&t->head, &n->head, (int)B, L, tok, base);
        else st = nomem();
    }
    if (!st && !(out = rai_alloc((size_t)(B * K), sizeof *out))) st = nomem();
    if (!st) st = rai_head_forward(&n->head, out, t ? &t->head : NULL, tok, (int)B, L, run.a);
    if (!t) rai_arena_end(&n->ws, run.a);
    if (st) {
        rai_free(out);
        return st;
    }
    if (t) t->B = (int)B, t->Hin = (int)H, t->Win = (int)W, t->live = 1;
    *y = out;
    *y_ndim = 2;
    y_shape[0] = B, y_shape[1] = K;
    return RA_OK;
}

static ra_status net_forward(const ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                             const float *x, int x_ndim, const int64_t *x_shape) {
    return net_run(m->impl, NULL, NULL, NULL, y, y_ndim, y_shape, x, x_ndim, x_shape);
}

static ra_status net_forward_features(const ra_model *m, const rai_feat *f, float **y,
                                      int *y_ndim, int64_t y_shape[4], const float *x,
                                      int x_ndim, const int64_t *x_shape) {
    return net_run(m->impl, NULL, NULL, f, y, y_ndim, y_shape, x, x_ndim, x_shape);
}

/* Every stage's map by default (a transformers SwinBackbone or
 * Swinv2Backbone: its out_indices, and SwinBackbone's norms), NHWC as
 * torchvision's stages give them (the backbones: NCHW, their feature_maps). */
static ra_status net_features_plan(const ra_model *m, rai_feat *f, const ra_features_options *o,
                                   int x_ndim, const int64_t *x_shape) {
    const swin_net *n = m->impl;
    int64_t B = 0, H = 0, W = 0;
    ra_status st = net_input(n, x_ndim, x_shape, 0, &B, &H, &W);
    if (st) return st;
    int hc, wc, h, w;
    if ((st = rai_stem_grid(&n->stem, (int)H, (int)W, &hc, &wc, &h, &w)))
        return rai_fail(st, "swin: %s", ra_last_error());
    const int bb = n->nout > 0;
    if ((st = rai_feat_indices(f, o, bb ? n->out : NULL, n->nout, n->nstages, "stage")))
        return st;
    if (o && o->prefix_tokens)
        return rai_fail(RA_ERR_ARG, "%s has no prefix tokens", m->ops->name);
    const ra_features_norm norm = o ? o->norm : RA_FEATURES_NORM_DEFAULT;
    f->norm = norm == RA_FEATURES_NORM_FINAL ? RAI_FEAT_NORM_FINAL
            : norm == RA_FEATURES_NORM_DEFAULT && bb && !n->k.v2 ? RAI_FEAT_NORM_MODEL
                                                                   : RAI_FEAT_NORM_NONE;
    if (f->norm == RAI_FEAT_NORM_FINAL && !n->head.nw)
        return rai_fail(RA_ERR_ARG, "%s: the model has no final norm", m->ops->name);
    for (int i = 0; f->norm == RAI_FEAT_NORM_MODEL && i < f->n; i++)
        if (!n->out_nw[f->at[i]])
            return rai_fail(RA_ERR_ARG, "%s: stage %d has no norm of its own (hidden_states_norms: "
                            "the backbone's out_indices)", m->ops->name, f->at[i]);
    f->layout = o && o->layout ? o->layout : bb ? RA_LAYOUT_NCHW : RA_LAYOUT_NHWC;
    rai_feat_stage_shapes(f, B, 2, (const int64_t[]){h, w}, n->embed_dim);
    return RA_OK;
}

static ra_status net_forward_train(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                   const float *x, int x_ndim, const int64_t *x_shape,
                                   ra_rng *rng) {
    swin_net *n = m->impl;
    if (n->drop_path_rate > 0 && n->nblocks > 1 && !rng)
        return rai_fail(RA_ERR_ARG, "%s: drop_path_rate %g needs a random generator for the "
                        "training forward", m->ops->name, n->drop_path_rate);
    ra_status st = tape_begin(&n->tape, n->nblocks);
    if (st) return st;
    return net_run(n, n->tape, rng, NULL, y, y_ndim, y_shape, x, x_ndim, x_shape);
}

/* The attention probabilities of block (stage, block) over one image, as
 * maps over the stage's token grid (relattn.h). The network runs as its
 * forward does up to that block, which also returns its attention
 * probabilities; the row map (pad, roll, partition) sends them back to
 * grid positions. */
ra_status ra_swin_attention_maps(const ra_model *m, float *maps, int *gh, int *gw, int *nh,
                                 const float *x, int h_img, int w_img, int stage, int block,
                                 const int *queries, int nq) {
    if (!m || !gh || !gw || !nh || !x || ra_model_arch(m) != RA_ARCH_SWIN)
        return rai_fail(RA_ERR_ARG, "attention maps: a swin model and an image are needed");
    const swin_net *n = m->impl;
    if (stage < 0 || stage >= n->nstages || block < 0 || block >= n->depths[stage])
        return rai_fail(RA_ERR_ARG, "attention maps: no block %d in stage %d (depths %d stages)",
                        block, stage, n->nstages);
    if (h_img < 1 || h_img > SWIN_MAX_SIZE || w_img < 1 || w_img > SWIN_MAX_SIZE)
        return rai_fail(RA_ERR_SHAPE, "attention maps: a %dx%d image", h_img, w_img);
    const swin_blk *b = &n->blocks[n->first[stage] + block];
    rai_arena local;
    rai_window_layouts run = {.a = rai_arena_begin((rai_arena_cache *)&n->ws, &local)};
    float *t = NULL;
    int h = 0, w = 0, C = n->embed_dim;
    ra_status st = net_embed(n, NULL, run.a, &t, &h, &w, x, 1, h_img, w_img);
    for (int s = 0; s < stage && !st; s++) {
        const size_t mark = rai_arena_mark(run.a);
        run.count = 0;
        st = net_blocks(n, NULL, n->first[s], n->first[s + 1], &t, 1, h, w, &run, NULL);
        rai_arena_reset(run.a, mark);
        run.count = 0;
        if (!st) {
            st = net_merge(n, NULL, s, run.a, &t, 1, h, w, C);
            h = (h + 1) / 2, w = (w + 1) / 2, C *= 2;
        }
    }
    if (!st)
        st = net_blocks(n, NULL, n->first[stage], n->first[stage] + block, &t, 1, h, w, &run,
                        NULL);
    *gh = h, *gw = w, *nh = b->heads;
    for (int q = 0; !st && maps && q < nq; q++)
        if (queries[2 * q] < 0 || queries[2 * q] >= h || queries[2 * q + 1] < 0 ||
            queries[2 * q + 1] >= w)
            st = rai_fail(RA_ERR_ARG, "attention maps: query (%d, %d) outside the %dx%d grid of "
                          "stage %d", queries[2 * q], queries[2 * q + 1], h, w, stage);
    if (st || !maps) {
        rai_arena_end((rai_arena_cache *)&n->ws, run.a);
        return st;
    }
    /* the block itself, its probabilities kept; then the window map sends
     * them back to grid positions */
    const ra_window_spec g = blk_windows(b, h, w);
    const int64_t nw = ra_window_count(&g), N = ra_window_tokens(&g), H = b->heads;
    const rai_window_layout *wl = NULL;
    float *attn = rai_arena_floats(run.a, (size_t)(nw * H * N * N));
    st = attn ? blk_forward(b, t, attn, NULL, t, 1, h, w, &run, NULL)
              : rai_fail(RA_ERR_NOMEM, "attention maps: out of memory");
    if (!st) st = rai_window_layout_get(&run, &g, 1, &wl);
    memset(maps, 0, (size_t)nq * H * h * w * sizeof *maps);
    for (int q = 0; !st && q < nq; q++) {
        const int32_t tok = queries[2 * q] * w + queries[2 * q + 1];
        int64_t r = 0;   /* the query's row in the window layout */
        while (r < nw * N && wl->map[r] != tok) r++;
        if (r == nw * N) { st = rai_fail(RA_ERR_INTERNAL, "attention maps: token not found"); break; }
        const int64_t win_i = r / N, i = r % N;
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t j = 0; j < N; j++) {
                const int32_t key = wl->map[win_i * N + j];
                if (key >= 0)
                    maps[((int64_t)q * H + hh) * h * w + key] =
                        attn[((win_i * H + hh) * N + i) * N + j];
            }
    }
    rai_arena_end((rai_arena_cache *)&n->ws, run.a);
    return st;
}

/* Multiply-adds of one h x w image, as SwinTransformer.flops() counts them:
 * patch embedding (and its norm), the blocks and patch merging of every
 * stage at the resolution the image gives, the final norm as the official
 * code counts it (features * patches / 2^stages), the head. */
static int64_t net_flops(const ra_model *m, int h, int w) {
    const swin_net *n = m->impl;
    const int64_t K = n->patch_kernel, E = n->embed_dim;
    if (h > SWIN_MAX_SIZE || w > SWIN_MAX_SIZE) return -1;
    int gh = n->scheme == SCHEME_TORCHVISION ? h / n->patch : (h + n->patch - 1) / n->patch;
    int gw = n->scheme == SCHEME_TORCHVISION ? w / n->patch : (w + n->patch - 1) / n->patch;
    if (gh < 1 || gw < 1) return -1;
    const int64_t L0 = (int64_t)gh * gw;
    int64_t f = rai_cadd(rai_cmul3(L0, E, n->in_chans * K * K), n->patch_norm ? L0 * E : 0);
    int64_t C = E;
    for (int s = 0; s < n->nstages; s++) {
        for (int j = 0; j < n->depths[s]; j++)
            f = rai_cadd(f, blk_flops(&n->blocks[n->first[s] + j], gh, gw));
        if (s < n->nstages - 1) {   /* PatchMerging.flops() */
            const int64_t half = (int64_t)((gh + 1) / 2) * ((gw + 1) / 2);
            f = rai_cadd(f, rai_cadd(rai_cmul((int64_t)gh * gw, C), rai_cmul3(half, 4 * C, 2 * C)));
            gh = (gh + 1) / 2, gw = (gw + 1) / 2, C *= 2;
        }
    }
    const int64_t norm = rai_cmul(n->features, L0);
    f = rai_cadd(f, norm < 0 ? -1 : norm >> n->nstages);
    return rai_cadd(f, (int64_t)n->features * n->num_classes);
}

/* The Swin authors' get_swin_layer (their fine-tuning's optimizer): with
 * L blocks in all, patch_embed.* is layer 0, block j of stage i layer
 * depths[0] + .. + depths[i-1] + j + 1, stage i's patch merging that of
 * the stage's last block, everything else (norm, head, and
 * absolute_pos_embed, which the function does not name) layer L + 1. */
static int net_layer_of(const ra_model *m, const char *name, int *count) {
    const swin_net *n = m->impl;
    int L = 0, before[SWIN_MAX_STAGES + 1] = {0};
    for (int i = 0; i < n->nstages; i++) L += n->depths[i], before[i + 1] = L;
    *count = L + 2;
    int i = 0, j = 0, len = 0;
    if (!strncmp(name, "patch_embed.", 12)) return 0;
    if (sscanf(name, "layers.%d.blocks.%d.%n", &i, &j, &len) == 2 && len > 0 && i >= 0 &&
        i < n->nstages && j >= 0 && j < n->depths[i])
        return before[i] + j + 1;
    if (sscanf(name, "layers.%d.downsample.%n", &i, &len) == 1 && len > 0 && i >= 0 &&
        i < n->nstages)
        return before[i + 1];
    return L + 1;
}

/* SwinV2 (official names) keeps the windows it was trained at: each
 * stage's window as its blocks were built (after the official clamp to a
 * smaller map), unless the model has pretrained windows already.
 * torchvision's SwinV2 has none. */
static int net_trained_windows(const ra_model *m, char *buf, size_t n) {
    const swin_net *net = m->impl;
    if (!net->k.v2 || net->scheme == SCHEME_TORCHVISION) return 0;
    size_t len = 0;
    for (int s = 0; s < net->nstages && len < n; s++) {
        const swin_blk *b = &net->blocks[net->first[s]];
        if (net->first[s + 1] == net->first[s] || b->cfg.pretrained_window[0] > 0) return 0;
        len += (size_t)snprintf(buf + len, n - len, "%s%d", s ? "," : "", b->win[0]);
    }
    return len < n;
}

const rai_arch_ops rai_swin_ops = {
    .name = "swin", .arch = RA_ARCH_SWIN, .batched = 1, .declare = net_declare,
    .canonical = net_canonical,
    .detect = net_detect, .build = net_build, .destroy = net_destroy, .forward = net_forward,
    .forward_train = net_forward_train, .backward = rai_swin_net_backward,
    .flops = net_flops, .layer_of = net_layer_of, .trained_windows = net_trained_windows,
    .features_plan = net_features_plan, .forward_features = net_forward_features};

/* SwinV2 (swin_transformer_v2.py, torchvision's swin_v2_*): the network
 * above with the V2 variations its blocks and merging layers carry (v2 in
 * swin_common, from the arch name). */
const rai_arch_ops rai_swinv2_ops = {
    .name = "swinv2", .arch = RA_ARCH_SWINV2, .batched = 1, .declare = net_declare,
    .canonical = net_canonical,
    .detect = net_detect, .build = net_build, .destroy = net_destroy, .forward = net_forward,
    .forward_train = net_forward_train, .backward = rai_swin_net_backward,
    .flops = net_flops, .layer_of = net_layer_of, .trained_windows = net_trained_windows,
    .features_plan = net_features_plan, .forward_features = net_forward_features};
