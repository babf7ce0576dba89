/* swin_internal.h - the Swin block and network objects, shared by swin.c
 * (loading, inference) and swin_train.c (training forward and backward).
 * Private to the library. */
#ifndef RA_SWIN_INTERNAL_H
#define RA_SWIN_INTERNAL_H

#include "models/model.h"
#include "base/arena.h"
#include "nn/nn.h"
#include "pos/window.h"
#include "attention/layer.h"

#define SWIN_EPS 1e-5f              /* nn.LayerNorm's default */
#define SWIN_MAX_STAGES 8
#define SWIN_MAX_DIM (1 << 16)      /* the attention layer's bound */
#define SWIN_MAX_SIZE (1 << 16)     /* resolution, image side */
#define SWIN_MAX_WINDOW_TOKENS 4096 /* its index is N^2 int32: 64 MB */
#define SWIN_MAX_HIDDEN (1 << 20)
#define SWIN_MLP_CHUNK ((int64_t)1 << 22)   /* floats of MLP hidden rows at once */
#define SWIN_MAX_GEOMS 4            /* window layouts kept per stage */

typedef enum { SCHEME_OFFICIAL, SCHEME_TIMM, SCHEME_TORCHVISION } swin_scheme;

typedef struct swin_blk {
    int dim, heads, hidden;
    int win[2], shift[2];   /* as the constructor set them (after any clamp) */
    int res[2];             /* the constructor's resolution (the saved mask's) */
    int tv;                 /* torchvision: the shift drops per axis at run time */
    int post;               /* SwinV2: x += norm1(attn(x)); x += norm2(mlp(x)) */
    ra_attn_config cfg;
    ra_attn_layer *attn;
    const float *n1w, *n1b, *n2w, *n2b, *fc1w, *fc1b, *fc2w, *fc2b;
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

/* A window layout of one forward: which token each window row reads (-1:
 * padding) and the shifted-window mask, shared by the blocks that have
 * this geometry (every other block of a stage). */
typedef struct swin_geo {
    ra_window_geom g;
    int b;
    int32_t *map;   /* (B*nW*N) */
    float *mask;    /* (nW, N, N), NULL without shift */
} swin_geo;

/* One forward's workspace and its window layouts. */
typedef struct swin_run {
    ra_arena *a;
    swin_geo geo[SWIN_MAX_GEOMS];
    int ngeo;
} swin_run;

/* The layout of g for B maps, computed on first use from r's arena. */
ra_status ra_swin_run_geo(swin_run *r, const ra_window_geom *g, int B, const swin_geo **out);
/* The geometry of a block on an H x W map at run time. */
ra_window_geom ra_swin_blk_geom(const swin_blk *b, int h, int w);

struct swin_tape;   /* swin_train.c: what a training forward keeps */

typedef struct swin_one {
    swin_scheme scheme;
    swin_blk b;
    ra_arena_cache ws;   /* the forward's workspace, kept between calls */
    struct swin_tape *tape;   /* training forward -> backward */
} swin_one;

typedef struct swin_net {
    swin_scheme scheme;
    int img[2], patch, in_chans, num_classes, embed_dim, nstages;
    int depths[SWIN_MAX_STAGES], heads[SWIN_MAX_STAGES], window[2];
    int ape, patch_norm, features;
    int grid[2];                       /* img_size // patch_size */
    swin_common k;
    swin_blk *blocks;                  /* every block, stage by stage */
    int nblocks, first[SWIN_MAX_STAGES + 1];
    const float *pe_w, *pe_b, *pe_nw, *pe_nb, *ape_w;
    const float *ds_w[SWIN_MAX_STAGES], *ds_nw[SWIN_MAX_STAGES], *ds_nb[SWIN_MAX_STAGES];
    const float *norm_w, *norm_b, *head_w, *head_b;
    ra_arena_cache ws;                 /* the forward's workspace, kept between calls */
    struct swin_tape *tape;            /* training forward -> backward */
} swin_net;

/* Patch embedding (+ norm, + absolute position embedding) and patch merging
 * of the inference path (swin.c). */
void ra_swin_tape_free(struct swin_tape *t);
/* y row r = x row map[r], or zeros where map[r] < 0 (swin_train.c). */
void ra_rows_gather(float *y, const float *x, const int32_t *map, int64_t rows, int c);
/* Check images x (B, C_in, H, W) for the network (train: the tape's larger
 * bound) and give their sizes. */
ra_status ra_swin_net_input(const swin_net *n, int x_ndim, const int64_t *x_shape, int train,
                            int64_t *B, int64_t *H, int64_t *W);
ra_status ra_swin_one_forward_train(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                    const float *x, int x_ndim, const int64_t *x_shape,
                                    ra_rng *rng);
ra_status ra_swin_one_backward(ra_model *m, float *grad, float *dx, const float *dy);
ra_status ra_swin_net_forward_train(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                    const float *x, int x_ndim, const int64_t *x_shape,
                                    ra_rng *rng);
ra_status ra_swin_net_backward(ra_model *m, float *grad, float *dx, const float *dy);

#endif
