/* swin.h - the Swin block and network objects and the training tape,
 * shared by swin.c (loading; the forward, which fills the tape when
 * training) and swin_train.c (the backward, which reads it). Private to
 * the library. */
#ifndef RA_SWIN_INTERNAL_H
#define RA_SWIN_INTERNAL_H

#include "models/model.h"
#include "layers/block.h"
#include "layers/head.h"
#include "layers/merge.h"
#include "layers/stem.h"

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
    ra_attn_params attn_w;   /* the attention's weights (their gradients sit at their
                                offsets in the flat gradient) */
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
    int always_partition;   /* transformers' SwinBackbone: no clamp of the window
                               to a smaller map (the shift kept too) */
    int v2;       /* SwinV2 (arch swinv2): cosine attention with the continuous
                     position bias, post-norm blocks, patch merging's norm
                     after its reduction */
} swin_common;

/* What a training forward keeps for the backward: written by the forward
 * (swin.c), read by the backward (swin_train.c). It lives in an arena owned
 * by the model, reused step after step (after the first step nothing is
 * allocated). */
typedef struct swin_tape {
    rai_arena_cache cache;
    rai_arena local, *a;          /* the arena in use since the last forward */
    int live;                     /* a forward is on the tape */
    int B, Hin, Win;              /* the input: images (net) or maps (block) */
    /* the network */
    rai_stem_tape stem;           /* the patch embedding */
    rai_block_tape *blocks;       /* every block, in forward order */
    int nblocks;
    int sh[SWIN_MAX_STAGES], sw[SWIN_MAX_STAGES];   /* each stage's map */
    rai_merge_tape merge[SWIN_MAX_STAGES];   /* patch merging after stage s */
    rai_head_tape head;           /* final norm, mean over the tokens, head */
    int hf, wf, cf;               /* the last stage's map and channels */
} swin_tape;

typedef struct swin_block_model {
    swin_scheme scheme;
    swin_blk b;
    rai_arena_cache ws;   /* the inference forward's workspace, kept between calls */
    swin_tape *tape;      /* training forward -> backward */
} swin_block_model;

typedef struct swin_net {
    swin_scheme scheme;
    int img[2], patch, in_chans, num_classes, embed_dim, nstages;
    int patch_kernel;                  /* the embedding's kernel: patch, or overlapping */
    int depths[SWIN_MAX_STAGES], heads[SWIN_MAX_STAGES], window[2];
    int ape, patch_norm, features;
    /* stochastic depth (training): block i of all the stages drops its
     * branches with rate * i / (blocks - 1) (torchvision's, timm's linspace) */
    double drop_path_rate;
    int grid[2];                       /* img_size // patch_size */
    swin_common k;
    swin_blk *blocks;                  /* every block, stage by stage */
    int nblocks, first[SWIN_MAX_STAGES + 1];
    rai_stem stem;                     /* patch embedding, its norm, absolute_pos_embed */
    rai_merge merge[SWIN_MAX_STAGES];  /* patch merging after stage s (layers.s.downsample) */
    rai_head head;                     /* final norm, mean over the tokens, head */
    /* a transformers SwinBackbone (metadata out_indices): the stages it
     * hands out and their norms (hidden_states_norms); nout 0 otherwise */
    int out[SWIN_MAX_STAGES], nout;
    const float *out_nw[SWIN_MAX_STAGES], *out_nb[SWIN_MAX_STAGES];
    rai_arena_cache ws;                /* the inference forward's workspace, kept between calls */
    swin_tape *tape;                   /* training forward -> backward */
} swin_net;

/* The backward of the last training forward (swin_train.c): ra_model_backward's
 * contract (model.h). */
ra_status rai_swin_block_backward(ra_model *m, float *grad, float *dx, const float *dy);
ra_status rai_swin_net_backward(ra_model *m, float *grad, float *dx, const float *dy);

#endif
