/* swin3d_net.c - the Video Swin classification network (arch swin3d,
 * docs/reference.md section 2): torchvision's SwinTransformer3d
 * (torchvision >= 0.15, models/video/swin_transformer.py) in evaluation
 * mode, over clips x (B, C_in, T, H, W):
 *   patch_embed  zero-pad T, H, W at their end to multiples of the patch
 *                (Pt, Ph, Pw); Conv3d(C_in, E, kernel = stride = patch) as
 *                a GEMM over the gathered patches; to (B, T', H', W', E);
 *                LayerNorm (patch_norm)
 *   stages       blocks of swin3d.c's 3-D window block (window (Wd, Wh,
 *                Ww), shift half the window on odd blocks; per axis, where
 *                the input is not larger than the window, the window is the
 *                input's size and the shift 0; the bias through the sliced
 *                index [:N, :N]; exact GELU), PatchMerging between stages
 *                on each frame (merge.c over B*T' maps: x0..x3, odd sides
 *                padded, LayerNorm(4C), Linear(4C, 2C) without bias)
 *   head         LayerNorm, mean over T', H', W', Linear (head.c)
 * One forward (net_run) serves inference and training: with a tape it
 * keeps what the backward reads; with a features plan (inference) it hands
 * out each stage's map (ra_model_features). LayerNorm eps 1e-5 everywhere.
 *
 * Naming schemes (the canonical names are torchvision's):
 *   torchvision  patch_embed.proj / .norm, features.{2i}.{j}.{norm1,
 *                attn.relative_position_bias_table, attn.qkv, attn.proj,
 *                norm2, mlp.0, mlp.3}, features.{2i+1}.{reduction, norm},
 *                norm, head; buffers features.{2i}.{j}.attn.
 *                relative_position_index (N, N)
 *   video_swin   the official Video Swin / mmaction checkpoints:
 *                backbone.patch_embed.*, backbone.layers.{i}.blocks.{j}.*
 *                with mlp.fc1 / mlp.fc2, backbone.layers.{i}.downsample.*,
 *                backbone.norm.*, cls_head.fc_cls.* (the backbone. prefix
 *                may be absent), mapped as torchvision's port of the
 *                weights maps them. A saved index must equal the computed
 *                one. */
#include "models/swin3d.h"
#include "layers/head.h"
#include "layers/merge.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S3_MAX_STAGES 8
#define S3_MAX_PATCH 64
#define S3_MAX_CHANS 4096

enum { S3_TORCHVISION, S3_VIDEO_SWIN };
static const char *const scheme_names[] = {"torchvision", "video_swin"};

/* What a block keeps for the backward: its run (windows, index, mask; it
 * holds pointers into itself and never moves) and the block's tape. */
typedef struct s3_btape {
    swin3d_run r;
    rai_block_tape bt;
} s3_btape;

typedef struct s3_tape {
    rai_arena_cache cache;
    rai_arena local, *a;      /* the arena of the last training forward */
    s3_btape *blocks;         /* (nblocks) */
    int live;
    int B, T, H, W;           /* the clips */
    int gt, gh, gw;           /* the patch grid */
    float *cols;              /* (B*L0, Cin*Pt*Ph*Pw) the gathered patches */
    float *pre, *mean, *rstd; /* the patch norm's input (B*L0, E) and statistics */
    int sh[S3_MAX_STAGES], sw[S3_MAX_STAGES];   /* each stage's map */
    rai_merge_tape merge[S3_MAX_STAGES];
    rai_head_tape head;
    int hf, wf, cf;           /* the last stage's map and channels */
} s3_tape;

typedef struct s3_net {
    int in_chans, patch[3], embed, nstages, depths[S3_MAX_STAGES], heads[S3_MAX_STAGES];
    int win[3], num_classes, features, nblocks, patch_norm, scheme, frames;
    double mlp_ratio, drop_path_rate;   /* stochastic depth: rate * i / (blocks - 1), block i */
    int first[S3_MAX_STAGES + 1];
    swin3d_block *blocks;
    const float *pw, *pb, *pnw, *pnb;   /* Conv3d (E, Cin, Pt, Ph, Pw), (E); the norm */
    rai_merge merge[S3_MAX_STAGES];
    rai_head head;
    s3_tape *tape;
    rai_arena_cache ws;       /* the inference scratch */
} s3_net;

static ra_status nomem(void) { return rai_fail(RA_ERR_NOMEM, "swin3d: out of memory"); }

static const swin3d_block *net_block(const s3_net *n, int s, int j) {
    if (s < 0 || s >= n->nstages || j < 0 || j >= n->depths[s]) return NULL;
    return &n->blocks[n->first[s] + j];
}

/* ---- metadata and names ------------------------------------------------- */

/* "a,b,c": three integers in lo..hi. */
static ra_status meta3(const ra_st_file *f, const char *key, int out[3], int lo, int hi) {
    int n = 0;
    ra_status st = rai_meta_list(f, key, out, 3, &n, lo, hi);
    if (!st && n != 3)
        st = rai_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\": swin3d takes three values "
                      "(frames, rows, columns)", key, ra_st_meta(f, key));
    return st;
}

static ra_status decl(ra_model *m, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                      int64_t d3, int64_t d4) {
    const int64_t shape[5] = {d0, d1, d2, d3, d4};
    return rai_model_declare(m, name, ndim, shape, 0);
}

/* A block's parameters, in torchvision's state_dict order. */
static ra_status blk_declare(ra_model *m, int s, int j, const swin3d_block *b) {
    static const char *const sfx[] = {"norm1.weight", "norm1.bias",
                                      "attn.relative_position_bias_table", "attn.qkv.weight",
                                      "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
                                      "norm2.weight", "norm2.bias", "mlp.0.weight",
                                      "mlp.0.bias", "mlp.3.weight", "mlp.3.bias"};
    const int64_t C = b->dim, H = b->hidden;
    const int64_t shapes[13][3] = {{1, C}, {1, C}, {2, b->rows, b->heads}, {2, 3 * C, C},
                                   {1, 3 * C}, {2, C, C}, {1, C}, {1, C}, {1, C}, {2, H, C},
                                   {1, H}, {2, C, H}, {1, C}};
    ra_status st = RA_OK;
    for (int i = 0; i < 13 && !st; i++) {
        char name[96];
        snprintf(name, sizeof name, "features.%d.%d.%s", 2 * s, j, sfx[i]);
        st = decl(m, name, (int)shapes[i][0], shapes[i][1], shapes[i][2], 0, 0, 0);
    }
    return st;
}

static ra_status net_declare(ra_model *m, const ra_st_file *f) {
    s3_net *n = calloc(1, sizeof *n);
    if (!n) return nomem();
    m->impl = n;
    int nh = 0;
    n->in_chans = 3, n->num_classes = 400, n->patch_norm = 1, n->frames = 32;
    ra_status st = meta3(f, "patch_size", n->patch, 1, S3_MAX_PATCH);
    if (!st) st = rai_meta_int_opt(f, "in_chans", &n->in_chans, 1, S3_MAX_CHANS);
    if (!st) st = rai_meta_int_opt(f, "num_classes", &n->num_classes, 0, SWIN3D_MAX_HIDDEN);
    if (!st) st = rai_meta_int(f, "embed_dim", &n->embed, 1, SWIN3D_MAX_DIM);
    if (!st) st = rai_meta_list(f, "depths", n->depths, S3_MAX_STAGES, &n->nstages, 0, 1024);
    if (!st) st = rai_meta_list(f, "num_heads", n->heads, S3_MAX_STAGES, &nh, 1, SWIN3D_MAX_DIM);
    if (!st && nh != n->nstages)
        st = rai_fail(RA_ERR_FORMAT, "metadata depths has %d stages but num_heads has %d",
                      n->nstages, nh);
    if (!st) st = meta3(f, "window_size", n->win, 1, SWIN3D_MAX_WINDOW);
    if (!st) st = rai_meta_mlp_ratio(f, &n->mlp_ratio);
    if (!st) st = rai_meta_bool_opt(f, "patch_norm", &n->patch_norm);
    if (!st) st = rai_meta_int_opt(f, "num_frames", &n->frames, 1, SWIN3D_MAX_SIZE);
    if (!st) st = rai_meta_double_opt(f, "drop_path_rate", &n->drop_path_rate, NULL);
    if (!st && !(n->drop_path_rate >= 0.0 && n->drop_path_rate <= 1.0))
        st = rai_fail(RA_ERR_FORMAT, "metadata drop_path_rate = %g is not in [0, 1]",
                      n->drop_path_rate);
    if (st) return st;
    if ((int64_t)n->embed << (n->nstages - 1) > SWIN3D_MAX_DIM)
        return rai_fail(RA_ERR_FORMAT, "embed_dim %d over %d stages exceeds %d channels",
                        n->embed, n->nstages, SWIN3D_MAX_DIM);
    if ((int64_t)n->in_chans * n->patch[0] * n->patch[1] * n->patch[2] > (1 << 22))
        return rai_fail(RA_ERR_FORMAT, "in_chans %d with patch_size %d,%d,%d: patches too large",
                        n->in_chans, n->patch[0], n->patch[1], n->patch[2]);
    n->features = n->embed << (n->nstages - 1);
    for (int s = 0; s < n->nstages; s++) n->first[s + 1] = n->first[s] + n->depths[s];
    n->nblocks = n->first[n->nstages];
    if (n->nblocks && !(n->blocks = calloc((size_t)n->nblocks, sizeof *n->blocks))) return nomem();
    /* the scheme: the replica's, else from the names */
    const char *given = ra_st_meta(f, RA_META_NAMING);
    n->scheme = given && !strcmp(given, scheme_names[S3_VIDEO_SWIN]) ? S3_VIDEO_SWIN
                                                                      : S3_TORCHVISION;
    for (int i = 0; !given && i < ra_st_count(f); i++) {
        const char *nm = ra_st_at(f, i)->name;
        if (rai_starts(nm, "backbone.") || rai_starts(nm, "layers.") ||
            rai_starts(nm, "cls_head."))
            n->scheme = S3_VIDEO_SWIN;
    }

    /* blocks: dimensions, window, shift, and the bias index's sizes */
    for (int s = 0; s < n->nstages && !st; s++)
        for (int j = 0; j < n->depths[s] && !st; j++) {
            swin3d_block *b = &n->blocks[n->first[s] + j];
            b->dim = n->embed << s, b->heads = n->heads[s], b->mlp_ratio = n->mlp_ratio;
            b->qkv_bias = 1, b->qkv_naming = 1;
            for (int a = 0; a < 3; a++) b->win[a] = n->win[a], b->shift[a] = j % 2 ? n->win[a] / 2 : 0;
            b->fq = b->fkv = n->win[0];
            /* torchvision's stochastic_depth_prob * id / (blocks - 1); the official
             * linspace(0, drop_path_rate, sum(depths)): the same rates */
            const int id = n->first[s] + j;
            b->drop_path = n->nblocks > 1 ? (float)(n->drop_path_rate * id / (n->nblocks - 1)) : 0;
            if ((st = rai_swin3d_geometry(b))) {
                char why[300];
                snprintf(why, sizeof why, "%s", ra_last_error());
                return rai_fail(st, "stage %d block %d: %s", s, j, why);
            }
        }

    /* parameters, in torchvision's state_dict order */
    const int64_t E = n->embed;
    st = decl(m, "patch_embed.proj.weight", 5, E, n->in_chans, n->patch[0], n->patch[1],
              n->patch[2]);
    if (!st) st = decl(m, "patch_embed.proj.bias", 1, E, 0, 0, 0, 0);
    if (!st && n->patch_norm) st = decl(m, "patch_embed.norm.weight", 1, E, 0, 0, 0, 0);
    if (!st && n->patch_norm) st = decl(m, "patch_embed.norm.bias", 1, E, 0, 0, 0, 0);
    for (int s = 0; s < n->nstages && !st; s++) {
        for (int j = 0; j < n->depths[s] && !st; j++) st = blk_declare(m, s, j, net_block(n, s, j));
        if (s < n->nstages - 1 && !st) {
            const int64_t C = (int64_t)n->embed << s;
            char name[64];
            snprintf(name, sizeof name, "features.%d.reduction.weight", 2 * s + 1);
            st = decl(m, name, 2, 2 * C, 4 * C, 0, 0, 0);
            snprintf(name, sizeof name, "features.%d.norm.weight", 2 * s + 1);
            if (!st) st = decl(m, name, 1, 4 * C, 0, 0, 0, 0);
            snprintf(name, sizeof name, "features.%d.norm.bias", 2 * s + 1);
            if (!st) st = decl(m, name, 1, 4 * C, 0, 0, 0, 0);
        }
    }
    if (!st) st = decl(m, "norm.weight", 1, n->features, 0, 0, 0, 0);
    if (!st) st = decl(m, "norm.bias", 1, n->features, 0, 0, 0, 0);
    if (!st && n->num_classes > 0) {
        st = decl(m, "head.weight", 2, n->num_classes, n->features, 0, 0, 0);
        if (!st) st = decl(m, "head.bias", 1, n->num_classes, 0, 0, 0, 0);
    }
    return st;
}

static ra_status net_detect(ra_model *m, const ra_st_file *f) {
    (void)f;
    snprintf(m->scheme, sizeof m->scheme, "%s", scheme_names[((s3_net *)m->impl)->scheme]);
    return RA_OK;
}

/* A block tensor's suffix p of block (s, j), in canonical form into buf. */
static rai_tensor_kind blk_name(const s3_net *n, int s, int j, const char *p, char *buf,
                                size_t len) {
    if (!net_block(n, s, j)) return RA_TENSOR_UNKNOWN;
    const char *mlp = NULL;
    if (n->scheme == S3_VIDEO_SWIN) {
        if (rai_starts(p, "mlp.0.") || rai_starts(p, "mlp.3.")) return RA_TENSOR_UNKNOWN;
        if (rai_take(&p, "mlp.fc1.")) mlp = "mlp.0.";
        else if (rai_take(&p, "mlp.fc2.")) mlp = "mlp.3.";
    }
    if ((size_t)snprintf(buf, len, "features.%d.%d.%s%s", 2 * s, j, mlp ? mlp : "", p) >= len)
        return RA_TENSOR_UNKNOWN;
    return strcmp(p, "attn.relative_position_index") ? RA_TENSOR_PARAM : RA_TENSOR_BUFFER;
}

static rai_tensor_kind net_canonical(const ra_model *m, const char *name, char *buf, size_t len) {
    const s3_net *n = m->impl;
    const char *p = name;
    int s, j;
    if (n->scheme == S3_TORCHVISION) {
        if (rai_take(&p, "features.") && rai_take_index(&p, &s) && s % 2 == 0 &&
            rai_take_index(&p, &j))
            return blk_name(n, s / 2, j, p, buf, len);
        p = name;
    } else {
        rai_take(&p, "backbone.");
        if (rai_starts(p, "features.") || rai_starts(p, "head.")) return RA_TENSOR_UNKNOWN;
        if (rai_take(&p, "cls_head.fc_cls.")) {
            snprintf(buf, len, "head.%s", p);
            return RA_TENSOR_PARAM;
        }
        if (rai_take(&p, "layers.")) {
            if (!rai_take_index(&p, &s)) return RA_TENSOR_UNKNOWN;
            if (rai_take(&p, "blocks.") && rai_take_index(&p, &j))
                return blk_name(n, s, j, p, buf, len);
            if (!rai_take(&p, "downsample.") || s < 0 || s >= n->nstages - 1)
                return RA_TENSOR_UNKNOWN;
            snprintf(buf, len, "features.%d.%s", 2 * s + 1, p);
            return RA_TENSOR_PARAM;
        }
    }
    if ((size_t)snprintf(buf, len, "%s", p) >= len) return RA_TENSOR_UNKNOWN;
    return RA_TENSOR_PARAM;
}

static const float *get(const ra_model *m, const char *fmt, int a, int b, const char *sfx) {
    char name[128];
    snprintf(name, sizeof name, fmt, a, b, sfx);
    return rai_model_get(m, name);
}

static ra_status net_build(ra_model *m, const ra_st_file *f) {
    s3_net *n = m->impl;
    n->pw = rai_model_get(m, "patch_embed.proj.weight");
    n->pb = rai_model_get(m, "patch_embed.proj.bias");
    n->pnw = rai_model_get(m, "patch_embed.norm.weight");
    n->pnb = rai_model_get(m, "patch_embed.norm.bias");
    n->head = (rai_head){.dim = n->features, .eps = SWIN3D_EPS,
                         .nw = rai_model_get(m, "norm.weight"),
                         .nb = rai_model_get(m, "norm.bias"), .pool = RAI_POOL_AVG,
                         .w = rai_model_get(m, "head.weight"), .b = rai_model_get(m, "head.bias"),
                         .classes = n->num_classes};
    ra_status st = RA_OK;
    for (int s = 0; s < n->nstages && !st; s++) {
        for (int j = 0; j < n->depths[s] && !st; j++) {
            swin3d_block *b = &n->blocks[n->first[s] + j];
            const char *fmt = "features.%d.%d.%s";
            const int k = 2 * s, C = b->dim;
            b->n1w = get(m, fmt, k, j, "norm1.weight"), b->n1b = get(m, fmt, k, j, "norm1.bias");
            b->n2w = get(m, fmt, k, j, "norm2.weight"), b->n2b = get(m, fmt, k, j, "norm2.bias");
            b->table = get(m, fmt, k, j, "attn.relative_position_bias_table");
            b->qw = get(m, fmt, k, j, "attn.qkv.weight"), b->qb = get(m, fmt, k, j, "attn.qkv.bias");
            b->kvw = b->qw ? b->qw + (int64_t)C * C : NULL, b->kvb = b->qb ? b->qb + C : NULL;
            b->pw = get(m, fmt, k, j, "attn.proj.weight"), b->pb = get(m, fmt, k, j, "attn.proj.bias");
            b->f1w = get(m, fmt, k, j, "mlp.0.weight"), b->f1b = get(m, fmt, k, j, "mlp.0.bias");
            b->f2w = get(m, fmt, k, j, "mlp.3.weight"), b->f2b = get(m, fmt, k, j, "mlp.3.bias");
            if (!b->n1w || !b->n1b || !b->n2w || !b->n2b || !b->table || !b->qw || !b->qb ||
                !b->pw || !b->pb || !b->f1w || !b->f1b || !b->f2w || !b->f2b)
                return rai_fail(RA_ERR_INTERNAL, "swin3d: block %d.%d is missing a parameter", s, j);
            st = rai_swin3d_index(b);
        }
        if (s < n->nstages - 1) {
            char name[64];
            n->merge[s] = (rai_merge){.eps = SWIN3D_EPS};
            snprintf(name, sizeof name, "features.%d.reduction.weight", 2 * s + 1);
            n->merge[s].w = rai_model_get(m, name);
            snprintf(name, sizeof name, "features.%d.norm.weight", 2 * s + 1);
            n->merge[s].nw = rai_model_get(m, name);
            snprintf(name, sizeof name, "features.%d.norm.bias", 2 * s + 1);
            n->merge[s].nb = rai_model_get(m, name);
        }
    }
    /* the buffers the file carries: each block's index, as computed */
    for (int i = 0; !st && i < ra_st_count(f); i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        char canon[256];
        if (net_canonical(m, t->name, canon, sizeof canon) != RA_TENSOR_BUFFER) continue;
        const char *p = canon;
        int k = -1, j = -1;
        if (!rai_take(&p, "features.") || !rai_take_index(&p, &k) || !rai_take_index(&p, &j) ||
            !net_block(n, k / 2, j))
            return rai_fail(RA_ERR_INTERNAL, "swin3d: buffer %s", canon);
        st = rai_swin3d_check_index(f, t, net_block(n, k / 2, j));
    }
    return st;
}

static void tape_free(s3_tape *t) {
    if (!t) return;
    if (t->a) rai_arena_end(&t->cache, t->a);
    rai_arena_cache_free(&t->cache);
    free(t->blocks);
    free(t);
}

static void net_destroy(void *impl) {
    s3_net *n = impl;
    for (int i = 0; n->blocks && i < n->nblocks; i++) {
        rai_free(n->blocks[i].idx);
        rai_arena_cache_free(&n->blocks[i].ws);
    }
    free(n->blocks);
    rai_arena_cache_free(&n->ws);
    tape_free(n->tape);
    free(n);
}

/* ---- the forward: inference, or training with a tape -------------------- */

/* Clips x (B, C_in, T, H, W) checked for the network (train: the tape's
 * larger bound); their sizes into d. */
static ra_status net_input(const s3_net *n, int x_ndim, const int64_t *x_shape, int train,
                           int d[4]) {
    if (x_ndim != 5 || x_shape[1] != n->in_chans)
        return rai_fail(RA_ERR_SHAPE, "swin3d takes clips x (B, %d, T, H, W)", n->in_chans);
    if (x_shape[0] < 1 || x_shape[0] > INT_MAX)
        return rai_fail(RA_ERR_SHAPE, "swin3d: a batch of %lld clips", (long long)x_shape[0]);
    for (int i = 2; i < 5; i++)
        if (x_shape[i] < 1 || x_shape[i] > SWIN3D_MAX_SIZE)
            return rai_fail(RA_ERR_SHAPE, "swin3d: clips of %lldx%lldx%lld (T, H, W): each "
                            "must be in 1..%d", (long long)x_shape[2], (long long)x_shape[3],
                            (long long)x_shape[4], SWIN3D_MAX_SIZE);
    /* every activation is at most about (B, patches, max(Cin*P, k*features)),
     * and the training tape keeps a few of them per block */
    int64_t big = x_shape[0];
    for (int i = 0; i < 3; i++)
        if (!rai_mul_i64(&big, big, x_shape[2 + i] / n->patch[i] + 1)) big = INT64_MAX;
    const int64_t wide = (int64_t)n->in_chans * n->patch[0] * n->patch[1] * n->patch[2] +
                         (train ? 8 : 4) * (int64_t)n->features;
    if (!rai_mul_i64(&big, big, wide) || big > ((int64_t)1 << (train ? 38 : 40)))
        return rai_fail(RA_ERR_SHAPE, "swin3d: input too large%s", train ? " to train on" : "");
    for (int i = 0; i < 4; i++) d[i] = (int)x_shape[i == 0 ? 0 : i + 1];
    return RA_OK;
}

/* The patches of x (B, Cin, T, H, W) as rows (B*gt*gh*gw, Cin*Pt*Ph*Pw), in
 * the order of Conv3d's weight; zeros past the end (the padding). */
static void embed_cols(float *cols, const float *x, const s3_net *n, int B, int T, int H, int W,
                       int gt, int gh, int gw) {
    const int Cin = n->in_chans, pt = n->patch[0], ph = n->patch[1], pw = n->patch[2];
    const int64_t rows = (int64_t)B * gt * gh * gw, K = (int64_t)Cin * pt * ph * pw;
    #pragma omp parallel for schedule(static) num_threads(ra_threads_get()) if (rows * K > (1 << 18))
    for (int64_t r = 0; r < rows; r++) {
        const int64_t b = r / ((int64_t)gt * gh * gw);
        const int ot = (int)(r / ((int64_t)gh * gw) % gt), oh = (int)(r / gw % gh),
                  ow = (int)(r % gw);
        float *dst = cols + r * K;
        for (int c = 0; c < Cin; c++)
            for (int kt = 0; kt < pt; kt++)
                for (int kh = 0; kh < ph; kh++) {
                    const int t = ot * pt + kt, h = oh * ph + kh;
                    const float *src = t < T && h < H
                                           ? x + (((b * Cin + c) * T + t) * H + h) * (int64_t)W
                                           : NULL;
                    for (int kw = 0; kw < pw; kw++) {
                        const int w = ow * pw + kw;
                        *dst++ = src && w < W ? src[w] : 0.0f;
                    }
                }
    }
}

/* x (B, Cin, T, H, W) -> tokens (B, gt, gh, gw, E), from the arena. */
static ra_status net_embed(const s3_net *n, s3_tape *t, rai_arena *a, float **out, int g[3],
                           const float *x, const int d[4]) {
    const int B = d[0];
    for (int i = 0; i < 3; i++) g[i] = (d[1 + i] + n->patch[i] - 1) / n->patch[i];
    const int64_t rows = (int64_t)B * g[0] * g[1] * g[2], E = n->embed;
    const int64_t K = (int64_t)n->in_chans * n->patch[0] * n->patch[1] * n->patch[2];
    float *y = rai_arena_floats(a, (size_t)(rows * E));
    const size_t mark = rai_arena_mark(a);   /* inference keeps y only */
    float *cols = rai_arena_floats(a, (size_t)(rows * K));
    float *pre = t && n->pnw ? rai_arena_floats(a, (size_t)(rows * E)) : y;
    float *mean = t && n->pnw ? rai_arena_floats(a, (size_t)rows) : NULL;
    float *rstd = t && n->pnw ? rai_arena_floats(a, (size_t)rows) : NULL;
    if (!y || !cols || !pre || (t && n->pnw && (!mean || !rstd))) return nomem();
    embed_cols(cols, x, n, B, d[1], d[2], d[3], g[0], g[1], g[2]);
    /* a convolution: float32 whatever the precision (nn/precision.h) */
    const ra_precision was = rai_precision_set(RA_PRECISION_FP32);
    ra_linear_forward(pre, cols, n->pw, n->pb, rows, (int)E, (int)K);
    rai_precision_set(was);
    if (n->pnw) ra_layernorm_forward(y, mean, rstd, pre, n->pnw, n->pnb, rows, (int)E, SWIN3D_EPS);
    if (t) {
        t->cols = cols, t->pre = n->pnw ? pre : NULL, t->mean = mean, t->rstd = rstd;
        t->gt = g[0], t->gh = g[1], t->gw = g[2];
    } else {
        rai_arena_reset(a, mark);
    }
    *out = y;
    return RA_OK;
}

/* Block i on *x (B, T, H, W, C): inference in place; training into a
 * buffer of its own (*x then that one), the input kept for the backward. */
static ra_status net_block_run(const s3_net *n, s3_tape *t, ra_rng *rng, int i, float **x,
                               int B, int T, int H, int W, rai_arena *a) {
    const swin3d_block *b = &n->blocks[i];
    if (!t) return rai_swin3d_forward(b, *x, *x, NULL, B, T, H, W, a);
    s3_btape *bt = &t->blocks[i];
    ra_status st = rai_swin3d_run_begin(&bt->r, b, NULL, B, T, H, W, a);
    if (st) return st;
    if (bt->r.z.nhid > SWIN3D_MAX_FLOATS)
        return rai_fail(RA_ERR_SHAPE, "swin3d: %d clips of %dx%dx%d are too large to train on",
                        B, T, H, W);
    float *base = rai_arena_floats(a, rai_block_tape_layout(&bt->bt, &bt->r.blk, &bt->r.l, NULL));
    float *y = rai_arena_floats(a, (size_t)bt->r.z.nx);
    if (!base || !y) return nomem();
    rai_block_tape_layout(&bt->bt, &bt->r.blk, &bt->r.l, base);
    bt->bt.x = *x;
    if ((st = rai_block_forward_train(&bt->r.blk, &bt->bt, y, 1, a, rng))) return st;
    *x = y;
    return RA_OK;
}

/* Stage s's output tok (B, T*h*w, C), its unpadded map (each block crops
 * what it padded), into the map f wants of it (if any); timm's norm=True
 * (the official Video Swin backbone's output): the final norm on the last
 * stage only. */
static ra_status net_feature(const s3_net *n, const rai_feat *f, int s, rai_arena *a,
                             const float *tok, int B, int T, int h, int w, int C) {
    const int i = rai_feat_find(f, s);
    if (i < 0) return RA_OK;
    const int last = f->norm == RAI_FEAT_NORM_FINAL && s == n->nstages - 1;
    return rai_feat_put(f, i, a, tok, B, (int64_t)T * h * w, C, last ? n->head.nw : NULL,
                        last ? n->head.nb : NULL, SWIN3D_EPS);
}

/* The network: x (B, Cin, T, H, W) -> y (B, num_classes) logits (the pooled
 * features without a head). t NULL: inference; else training (t begun),
 * with rng for the drop-path (a draw per clip and branch, block after block).
 * f (inference only; NULL: none): the feature maps handed out after each
 * stage's blocks, before the next patch merging. */
static ra_status net_run(s3_net *n, s3_tape *t, ra_rng *rng, const rai_feat *f, float **y,
                         int *y_ndim, int64_t y_shape[4], const float *x, int x_ndim,
                         const int64_t *x_shape) {
    int d[4] = {0}, g[3] = {0};
    ra_status st = net_input(n, x_ndim, x_shape, t != NULL, d);
    if (st) return st;
    const int B = d[0];
    rai_arena local, *a = t ? t->a : rai_arena_begin(&n->ws, &local);
    float *tok = NULL, *out = NULL;
    st = net_embed(n, t, a, &tok, g, x, d);
    int T = g[0], h = g[1], w = g[2], C = n->embed;
    for (int s = 0; s < n->nstages && !st; s++) {
        if (t) t->sh[s] = h, t->sw[s] = w;
        for (int i = n->first[s]; i < n->first[s + 1] && !st; i++)
            st = net_block_run(n, t, rng, i, &tok, B, T, h, w, a);
        if (f && !st) st = net_feature(n, f, s, a, tok, B, T, h, w, C);
        if (s < n->nstages - 1 && !st) {   /* per frame: B*T maps */
            float *m = rai_arena_floats(a, (size_t)B * T * ((h + 1) / 2) * ((w + 1) / 2) * 2 * C);
            st = m ? rai_merge_forward(&n->merge[s], m, t ? &t->merge[s] : NULL, tok, B * T, h,
                                       w, C, a)
                   : nomem();
            tok = m, h = (h + 1) / 2, w = (w + 1) / 2, C *= 2;
        }
    }
    const int64_t L = (int64_t)T * h * w;
    const int K = n->num_classes > 0 ? n->num_classes : C;
    if (!st && t) {
        t->hf = h, t->wf = w, t->cf = C;
        float *base = rai_arena_floats(a, rai_head_tape_layout(NULL, &n->head, B, L, tok, NULL));
        if (base) rai_head_tape_layout(&t->head, &n->head, B, L, tok, base);
        else st = nomem();
    }
    if (!st && !(out = rai_alloc((size_t)B * K, sizeof *out))) st = nomem();
    if (!st) st = rai_head_forward(&n->head, out, t ? &t->head : NULL, tok, B, L, a);
    if (!t) rai_arena_end(&n->ws, a);
    if (st) {
        rai_free(out);
        return st;
    }
    if (t) t->B = B, t->T = d[1], t->H = d[2], t->W = d[3], t->live = 1;
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

/* Every stage's map by default, channels last (B, T', H', W', C) as
 * torchvision's stages give them; T', H', W' the patch grid (the clip padded
 * to the patch), H' and W' then halved, rounded up, by each merging. */
static ra_status net_features_plan(const ra_model *m, rai_feat *f, const ra_features_options *o,
                                   int x_ndim, const int64_t *x_shape) {
    const s3_net *n = m->impl;
    int d[4] = {0};
    ra_status st = net_input(n, x_ndim, x_shape, 0, d);
    if (st) return st;
    if ((st = rai_feat_indices(f, o, NULL, 0, n->nstages, "stage"))) return st;
    if (o && o->prefix_tokens)
        return rai_fail(RA_ERR_ARG, "%s has no prefix tokens", m->ops->name);
    f->norm = o && o->norm == RA_FEATURES_NORM_FINAL ? RAI_FEAT_NORM_FINAL : RAI_FEAT_NORM_NONE;
    f->layout = o && o->layout ? o->layout : RA_LAYOUT_NHWC;
    int64_t g[3];
    for (int k = 0; k < 3; k++) g[k] = (d[1 + k] + n->patch[k] - 1) / n->patch[k];
    rai_feat_stage_shapes(f, d[0], 3, g, n->embed);
    return RA_OK;
}

static ra_status net_forward_train(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                   const float *x, int x_ndim, const int64_t *x_shape,
                                   ra_rng *rng) {
    s3_net *n = m->impl;
    if (n->drop_path_rate > 0 && n->nblocks > 1 && !rng)
        return rai_fail(RA_ERR_ARG, "swin3d: drop_path_rate %g needs a random generator for the "
                        "training forward", n->drop_path_rate);
    s3_tape *t = n->tape;
    if (!t) {
        if (!(t = n->tape = calloc(1, sizeof *t))) return nomem();
        if (n->nblocks && !(t->blocks = calloc((size_t)n->nblocks, sizeof *t->blocks)))
            return nomem();
    }
    if (t->a) rai_arena_end(&t->cache, t->a);
    t->a = rai_arena_begin(&t->cache, &t->local);
    t->live = 0;
    return net_run(n, t, rng, NULL, y, y_ndim, y_shape, x, x_ndim, x_shape);
}

/* ---- the backward --------------------------------------------------------- */

/* The patch embedding's backward: dx (B, Cin, T, H, W) ACCUMULATED (NULL:
 * not wanted) and the gradients, from dtok (rows, E). */
static ra_status embed_backward(const ra_model *m, const s3_net *n, const s3_tape *t, float *grad,
                                float *dx, const float *dtok, rai_arena *a) {
    const int64_t rows = (int64_t)t->B * t->gt * t->gh * t->gw, E = n->embed;
    const int Cin = n->in_chans, pt = n->patch[0], ph = n->patch[1], pw = n->patch[2];
    const int64_t K = (int64_t)Cin * pt * ph * pw;
    const float *dconv = dtok;
    if (n->pnw) {
        float *dpre = rai_arena_floats(a, (size_t)(rows * E));
        if (!dpre) return nomem();
        rai_zero(dpre, rows * E);
        ra_layernorm_backward(dpre, rai_model_grad_at(m, grad, n->pnw),
                              rai_model_grad_at(m, grad, n->pnb), dtok, t->pre, t->mean, t->rstd,
                              n->pnw, rows, (int)E);
        dconv = dpre;
    }
    float *dcols = dx ? rai_arena_floats(a, (size_t)(rows * K)) : NULL;
    if (dx && !dcols) return nomem();
    if (dcols) rai_zero(dcols, rows * K);
    const ra_precision was = rai_precision_set(RA_PRECISION_FP32);   /* as the forward */
    ra_linear_backward(dcols, rai_model_grad_at(m, grad, n->pw), rai_model_grad_at(m, grad, n->pb),
                       dconv, t->cols, n->pw, rows, (int)E, (int)K);
    rai_precision_set(was);
    if (!dx) return RA_OK;
    const int T = t->T, H = t->H, W = t->W, gt = t->gt, gh = t->gh, gw = t->gw;
    for (int64_t r = 0; r < rows; r++) {   /* each pixel is in one patch, or the padding */
        const int64_t b = r / ((int64_t)gt * gh * gw);
        const int ot = (int)(r / ((int64_t)gh * gw) % gt), oh = (int)(r / gw % gh),
                  ow = (int)(r % gw);
        const float *src = dcols + r * K;
        for (int c = 0; c < Cin; c++)
            for (int kt = 0; kt < pt; kt++)
                for (int kh = 0; kh < ph; kh++, src += pw) {
                    const int tt = ot * pt + kt, hh = oh * ph + kh;
                    if (tt >= T || hh >= H) continue;
                    float *o = dx + (((b * Cin + c) * T + tt) * H + hh) * (int64_t)W;
                    for (int kw = 0; kw < pw; kw++)
                        if (ow * pw + kw < W) o[ow * pw + kw] += src[kw];
                }
    }
    return RA_OK;
}

/* grad and dx ACCUMULATED from dy (B, K) and the tape (which is only read). */
static ra_status net_backward(ra_model *m, float *grad, float *dx, const float *dy) {
    const s3_net *n = m->impl;
    const s3_tape *t = n->tape;
    if (!t || !t->live) return rai_fail(RA_ERR_ARG, "swin3d: backward without a training forward");
    rai_arena *a = t->a;
    const size_t mark = rai_arena_mark(a);
    const int B = t->B, T = t->gt;
    int h = t->hf, w = t->wf, C = t->cf;
#define G(p) rai_model_grad_at(m, grad, (p))
    const rai_head_grads hg = {.nw = G(n->head.nw), .nb = G(n->head.nb), .w = G(n->head.w),
                               .b = G(n->head.b)};
    float *d = rai_arena_floats(a, (size_t)B * T * h * w * C);
    ra_status st = d ? rai_head_backward(&n->head, d, &hg, dy, &t->head, B, (int64_t)T * h * w, a)
                     : nomem();
    for (int s = n->nstages - 1; s >= 0 && !st; s--) {
        if (s < n->nstages - 1) {   /* the merge after stage s: back to its input */
            const int hi = t->sh[s], wi = t->sw[s], Ci = C / 2;
            float *di = rai_arena_floats(a, (size_t)B * T * hi * wi * Ci);
            if (!di) {
                st = nomem();
                break;
            }
            rai_zero(di, (int64_t)B * T * hi * wi * Ci);
            const rai_merge_grads mg = {.w = G(n->merge[s].w), .nw = G(n->merge[s].nw),
                                        .nb = G(n->merge[s].nb)};
            st = rai_merge_backward(&n->merge[s], di, &mg, d, &t->merge[s], B * T, hi, wi, Ci, a);
            d = di, h = hi, w = wi, C = Ci;
        }
        for (int i = n->first[s + 1] - 1; i >= n->first[s] && !st; i--) {
            const swin3d_block *b = &n->blocks[i];
            const rai_block_grads g = {
                .n1w = G(b->n1w), .n1b = G(b->n1b), .n2w = G(b->n2w), .n2b = G(b->n2b),
                .fc1w = G(b->f1w), .fc1b = G(b->f1b), .fc2w = G(b->f2w), .fc2b = G(b->f2b),
                .attn = {.q_w = G(b->qw), .q_b = G(b->qb), .kv_w = G(b->kvw), .kv_b = G(b->kvb),
                         .proj_w = G(b->pw), .proj_b = G(b->pb), .table = G(b->table)}};
            st = rai_block_backward(&t->blocks[i].r.blk, &t->blocks[i].bt, d, &g, a);
        }
    }
#undef G
    if (!st) st = embed_backward(m, n, t, grad, dx, d, a);
    rai_arena_reset(a, mark);
    return st;
}

/* ---- counts ----------------------------------------------------------------- */

/* Multiply-adds of one clip of num_frames (metadata, 32 by default: the
 * clip torchvision's weights were evaluated on) frames of h x w: the patch
 * embedding and its norm, every block as swin3d.c counts one (norms, the
 * windows' attention with its projections, the MLP), the merges, the final
 * norm and the head. */
static int64_t net_flops(const ra_model *m, int h, int w) {
    const s3_net *n = m->impl;
    if (h > SWIN3D_MAX_SIZE || w > SWIN3D_MAX_SIZE) return -1;
    const int T = (n->frames + n->patch[0] - 1) / n->patch[0];
    int gh = (h + n->patch[1] - 1) / n->patch[1], gw = (w + n->patch[2] - 1) / n->patch[2];
    const int64_t K = (int64_t)n->in_chans * n->patch[0] * n->patch[1] * n->patch[2];
    const int64_t L0 = (int64_t)T * gh * gw;
    int64_t f = rai_cadd(rai_cmul3(L0, n->embed, K), n->pnw ? rai_cmul(L0, n->embed) : 0);
    int64_t C = n->embed;
    for (int s = 0; s < n->nstages; s++) {
        for (int i = n->first[s]; i < n->first[s + 1]; i++)
            f = rai_cadd(f, rai_swin3d_flops(&n->blocks[i], T, gh, gw));
        if (s < n->nstages - 1) {
            const int64_t half = (int64_t)T * ((gh + 1) / 2) * ((gw + 1) / 2);
            f = rai_cadd(f, rai_cadd(rai_cmul(half, 4 * C), rai_cmul3(half, 4 * C, 2 * C)));
            gh = (gh + 1) / 2, gw = (gw + 1) / 2, C *= 2;
        }
    }
    f = rai_cadd(f, rai_cmul((int64_t)T * gh * gw, n->features));
    return rai_cadd(f, (int64_t)n->features * n->num_classes);
}

/* The Swin authors' get_swin_layer in torchvision's names: patch_embed.* is
 * layer 0, block j of stage i layer depths[0] + .. + depths[i-1] + j + 1,
 * the merge after stage i that of the stage's last block, the rest (norm,
 * head) L + 1. */
static int net_layer_of(const ra_model *m, const char *name, int *count) {
    const s3_net *n = m->impl;
    *count = n->nblocks + 2;
    const char *p = name;
    int k = 0, j = 0;
    if (rai_starts(name, "patch_embed.")) return 0;
    if (rai_take(&p, "features.") && rai_take_index(&p, &k) && k >= 0 && k < 2 * n->nstages) {
        if (k % 2) return n->first[k / 2 + 1];
        if (rai_take_index(&p, &j) && net_block(n, k / 2, j)) return n->first[k / 2] + j + 1;
    }
    return n->nblocks + 1;
}

const rai_arch_ops rai_swin3d_ops = {
    .name = "swin3d", .arch = RA_ARCH_SWIN3D, .batched = 1, .declare = net_declare,
    .canonical = net_canonical, .detect = net_detect, .build = net_build,
    .destroy = net_destroy, .forward = net_forward, .forward_train = net_forward_train,
    .backward = net_backward, .flops = net_flops, .layer_of = net_layer_of,
    .features_plan = net_features_plan, .forward_features = net_forward_features};

/* ---- a 2-D Swin inflated (the official Video Swin's inflate_weights) ------ */

/* m's parameter of canonical name fmt (NULL: absent). */
static const ra_param_info *param2d(const ra_model *m, const char *fmt, int a, int b) {
    char name[128];
    snprintf(name, sizeof name, fmt, a, b);
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name) && m->params[i].offset >= 0) return &m->params[i];
    return NULL;
}

/* The 2-D name of a swin3d parameter (torchvision's canonical names) in the
 * official names of m: features.(2i).j.X -> layers.i.blocks.j.X (mlp.0,
 * mlp.3 -> mlp.fc1, mlp.fc2), features.(2i+1).X -> layers.i.downsample.X. */
static const ra_param_info *source_of(const ra_model *m, const char *name) {
    const char *p = name;
    int k, j;
    char buf[160];
    if (!rai_take(&p, "features.") || !rai_take_index(&p, &k)) return param2d(m, name, 0, 0);
    if (k % 2) {
        snprintf(buf, sizeof buf, "layers.%d.downsample.%s", k / 2, p);
    } else {
        if (!rai_take_index(&p, &j)) return NULL;
        const char *mlp = rai_take(&p, "mlp.0.") ? "mlp.fc1." : rai_take(&p, "mlp.3.") ? "mlp.fc2." : "";
        snprintf(buf, sizeof buf, "layers.%d.blocks.%d.%s%s", k / 2, j, mlp, p);
    }
    return param2d(m, buf, 0, 0);
}

ra_status ra_model_inflate_swin3d(ra_model **out, const ra_model *m, int pt, int wd, int wh,
                                  int ww) {
    if (!out) return rai_fail(RA_ERR_ARG, "inflate: NULL argument");
    *out = NULL;
    if (!m || m->ops->arch != RA_ARCH_SWIN)
        return rai_fail(RA_ERR_ARG, "inflate: a 2-D Swin (arch swin) is inflated, not %s",
                        m ? m->ops->name : "NULL");
    const ra_param_info *pe = param2d(m, "patch_embed.proj.weight", 0, 0),
                        *t0 = param2d(m, "layers.0.blocks.0.attn.relative_position_bias_table", 0, 0),
                        *f1 = param2d(m, "layers.0.blocks.0.mlp.fc1.weight", 0, 0),
                        *qb = param2d(m, "layers.0.blocks.0.attn.qkv.bias", 0, 0),
                        *head = param2d(m, "head.weight", 0, 0);
    if (param2d(m, "absolute_pos_embed", 0, 0))
        return rai_fail(RA_ERR_ARG, "inflate: the model has an absolute position embedding, "
                        "which Video Swin has not");
    if (!pe || pe->ndim != 4 || pe->shape[2] != pe->shape[3] || !t0 || !f1 || !qb)
        return rai_fail(RA_ERR_ARG, "inflate: the model is not a Swin with a square patch "
                        "embedding, bias tables and qkv biases");
    const char *given = ra_model_meta(m, "patch_size");
    if (given && atoi(given) != (int)pe->shape[2])
        return rai_fail(RA_ERR_ARG, "inflate: an overlapping patch embedding (patch_kernel)");
    int64_t w2 = 1;
    while ((2 * w2 - 1) * (2 * w2 - 1) < t0->shape[0]) w2++;
    if ((2 * w2 - 1) * (2 * w2 - 1) != t0->shape[0])
        return rai_fail(RA_ERR_ARG, "inflate: a bias table of %lld rows", (long long)t0->shape[0]);
    if (!wh) wh = (int)w2;
    if (!ww) ww = (int)w2;
    if (pt < 1 || pt > S3_MAX_PATCH || wd < 1 || wd > SWIN3D_MAX_WINDOW || wh < 1 ||
        wh > SWIN3D_MAX_WINDOW || ww < 1 || ww > SWIN3D_MAX_WINDOW)
        return rai_fail(RA_ERR_ARG, "inflate: patch frames %d, window %dx%dx%d", pt, wd, wh, ww);
    /* the 3-D model's metadata, from the 2-D model's shapes */
    char depths[128] = "", heads[128] = "", v[8][64];
    size_t kd = 0, kh = 0;
    int s = 0;
    for (; s < S3_MAX_STAGES && param2d(m, "layers.%d.blocks.0.norm1.weight", s, 0); s++) {
        int d = 0;
        while (param2d(m, "layers.%d.blocks.%d.norm1.weight", s, d)) d++;
        const ra_param_info *t = param2d(m, "layers.%d.blocks.0.attn.relative_position_bias_table", s, 0);
        if (!t || t->shape[0] != t0->shape[0])
            return rai_fail(RA_ERR_ARG, "inflate: stage %d has another window than stage 0", s);
        kd += (size_t)snprintf(depths + kd, sizeof depths - kd, "%s%d", s ? "," : "", d);
        kh += (size_t)snprintf(heads + kh, sizeof heads - kh, "%s%lld", s ? "," : "",
                               (long long)t->shape[1]);
        if (kd >= sizeof depths || kh >= sizeof heads)
            return rai_fail(RA_ERR_ARG, "inflate: too many blocks");
    }
    snprintf(v[0], sizeof v[0], "%d,%lld,%lld", pt, (long long)pe->shape[2], (long long)pe->shape[3]);
    snprintf(v[1], sizeof v[1], "%lld", (long long)pe->shape[1]);
    snprintf(v[2], sizeof v[2], "%lld", head ? (long long)head->shape[0] : 0LL);
    snprintf(v[3], sizeof v[3], "%lld", (long long)pe->shape[0]);
    snprintf(v[4], sizeof v[4], "%d,%d,%d", wd, wh, ww);
    snprintf(v[5], sizeof v[5], "%.17g", (double)f1->shape[0] / (double)pe->shape[0]);
    const char *meta[] = {"arch", "swin3d", "patch_size", v[0], "in_chans", v[1],
                          "num_classes", v[2], "embed_dim", v[3], "depths", depths,
                          "num_heads", heads, "window_size", v[4], "mlp_ratio", v[5],
                          "patch_norm", param2d(m, "patch_embed.norm.weight", 0, 0) ? "true" : "false"};
    ra_model *r = NULL;
    ra_status st = ra_model_create(&r, meta, (int)(sizeof meta / sizeof *meta / 2), 0);
    if (st) return st;
    /* every parameter from its 2-D one */
    const int64_t T = (2 * (int64_t)wh - 1) * (2 * ww - 1);
    for (int i = 0; i < r->nparams && !st; i++) {
        const ra_param_info *q = &r->params[i], *src = source_of(m, q->name);
        float *dst = r->weights + q->offset;
        if (!src) {
            st = rai_fail(RA_ERR_ARG, "inflate: the 2-D model has no parameter for %s", q->name);
            break;
        }
        const float *w = m->weights + src->offset;
        const size_t ln = strlen(q->name);
        if (!strcmp(q->name, "patch_embed.proj.weight")) {   /* (E, C, P, P) -> (E, C, pt, P, P) / pt */
            const int64_t pp = q->shape[3] * q->shape[4];
            for (int64_t ec = 0; ec < q->shape[0] * q->shape[1]; ec++)
                for (int t = 0; t < pt; t++)
                    for (int64_t k = 0; k < pp; k++)
                        dst[(ec * pt + t) * pp + k] = w[ec * pp + k] / (float)pt;
        } else if (ln > 28 && !strcmp(q->name + ln - 28, "relative_position_bias_table")) {
            const int nh = (int)q->shape[1], s1 = 2 * (int)w2 - 1;
            if (src->shape[1] != nh) {
                st = rai_fail(RA_ERR_ARG, "inflate: %s: heads differ", q->name);
                break;
            }
            if (s1 != 2 * wh - 1 || s1 != 2 * ww - 1)   /* resized as relattn resize does */
                st = ra_bias_table_resize(dst, w, nh, s1, s1, 2 * wh - 1, 2 * ww - 1);
            else
                memcpy(dst, w, (size_t)(T * nh) * sizeof *dst);
            for (int f = 1; !st && f < 2 * wd - 1; f++)   /* one copy per frame offset */
                memcpy(dst + f * T * nh, dst, (size_t)(T * nh) * sizeof *dst);
        } else if (src->numel == q->numel) {
            memcpy(dst, w, (size_t)q->numel * sizeof *dst);
        } else {
            st = rai_fail(RA_ERR_ARG, "inflate: %s has %lld values, the 2-D %s %lld", q->name,
                          (long long)q->numel, src->name, (long long)src->numel);
        }
    }
    if (st) {
        ra_model_free(r);
        return st;
    }
    *out = r;
    return RA_OK;
}
