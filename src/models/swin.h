/* swin_internal.h - the Swin block and network objects, shared by swin.c
 * (loading, inference) and swin_train.c (training forward and backward).
 * Private to the library. */
#ifndef RA_SWIN_INTERNAL_H
#define RA_SWIN_INTERNAL_H

#include "models/model.h"
#include "layers/block.h"

#include <limits.h>

#define SWIN_EPS 1e-5f              /* nn.LayerNorm's default */
#define SWIN_MAX_STAGES 8
#define SWIN_MAX_DIM (1 << 16)      /* the attention layer's bound */
#define SWIN_MAX_SIZE (1 << 16)     /* resolution, image side */
#define SWIN_MAX_WINDOW_TOKENS 4096 /* its index is N^2 int32: 64 MB */
#define SWIN_MAX_HIDDEN (1 << 20)
#define SWIN_MLP_CHUNK ((int64_t)1 << 22)   /* floats of MLP hidden rows at once */

typedef enum { SCHEME_OFFICIAL, SCHEME_TIMM, SCHEME_TORCHVISION } swin_scheme;

typedef struct swin_blk {
    int dim, heads, hidden;
    int win[2], shift[2];   /* as the constructor set them (after any clamp) */
    int res[2];             /* the constructor's resolution (the saved mask's) */
    int tv;                 /* torchvision: the shift drops per axis at run time */
    int post;               /* SwinV2: x += norm1(attn(x)); x += norm2(mlp(x)) */
    ra_attn_config cfg;
    rai_block blk;           /* the weights, the attention layer, pre- or post-norm */
} swin_blk;

/* Hyperparameters shared by the blocks of a model. */
typedef struct swin_common {
    double mlp_ratio;
    int qkv_bias;
    int has_qk_scale;
    float qk_scale;
    /* metadata relative_position (an extension of relattn, for
     * ablations): "bias" (Swin's table, the default), "none" (plain
     * multi-head attention in the windows) or "shaw" (Shaw et al.'s
     * relative keys and values over the window's 2-D offsets, clipped at
     * max_relative_position, default window - 1) */
    enum { RELPOS_NONE, RELPOS_BIAS, RELPOS_SHAW } relpos;
    int shaw_k;   /* -1: window - 1 */
    int v2;       /* SwinV2 (arch swinv2): cosine attention with the continuous
                     position bias, post-norm blocks, patch merging's norm
                     after its reduction */
} swin_common;

/* The windows of a block on an H x W map at run time. */
static inline ra_window_spec rai_swin_block_windows(const swin_blk *b, int h, int w) {
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
static inline rai_block_layout rai_swin_block_layout(const rai_window_layout *w, int B, int H,
                                                     int W) {
    const int64_t nw = ra_window_count(&w->g), n = ra_window_tokens(&w->g);
    return (rai_block_layout){.m = (int64_t)B * H * W, .batch = B, .b_ = (int)(B * nw),
                             .n = (int)n, .map = w->map, .mask = w->mask,
                             .nw = w->mask ? (int)nw : 0};
}

struct swin_tape;   /* swin_train.c: what a training forward keeps */

typedef struct swin_block_model {
    swin_scheme scheme;
    swin_blk b;
    rai_arena_cache ws;   /* the forward's workspace, kept between calls */
    struct swin_tape *tape;   /* training forward -> backward */
} swin_block_model;

typedef struct swin_net {
    swin_scheme scheme;
    int img[2], patch, in_chans, num_classes, embed_dim, nstages;
    int patch_kernel;                  /* the embedding's kernel: patch, or overlapping */
    int depths[SWIN_MAX_STAGES], heads[SWIN_MAX_STAGES], window[2];
    int ape, patch_norm, features;
    int grid[2];                       /* img_size // patch_size */
    swin_common k;
    swin_blk *blocks;                  /* every block, stage by stage */
    int nblocks, first[SWIN_MAX_STAGES + 1];
    const float *pe_w, *pe_b, *pe_nw, *pe_nb, *ape_w;
    const float *ds_w[SWIN_MAX_STAGES], *ds_nw[SWIN_MAX_STAGES], *ds_nb[SWIN_MAX_STAGES];
    const float *norm_w, *norm_b, *head_w, *head_b;
    rai_arena_cache ws;                 /* the forward's workspace, kept between calls */
    struct swin_tape *tape;            /* training forward -> backward */
} swin_net;

/* The training tape, forward and backward (swin_train.c). */
void rai_swin_tape_free(struct swin_tape *t);
/* Check images x (B, C_in, H, W) for the network (train: the tape's larger
 * bound) and give their sizes. */
static inline ra_status rai_swin_net_input(const swin_net *n, int x_ndim, const int64_t *x_shape,
                                           int train, int64_t *B, int64_t *H, int64_t *W) {
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
ra_status rai_swin_block_forward_train(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                       const float *x, int x_ndim, const int64_t *x_shape,
                                       ra_rng *rng);
ra_status rai_swin_block_backward(ra_model *m, float *grad, float *dx, const float *dy);
ra_status rai_swin_net_forward_train(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                     const float *x, int x_ndim, const int64_t *x_shape,
                                     ra_rng *rng);
ra_status rai_swin_net_backward(ra_model *m, float *grad, float *dx, const float *dy);

#endif
