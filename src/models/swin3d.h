/* swin3d.h - the 3-D window block of swin3d.c, shared with the Video Swin
 * network (swin3d_net.c): its geometry, index, and one run over B clips
 * (private). A block is a swin3d_block whose dimensions, window, shift
 * and weight pointers its owner sets; rai_swin3d_geometry and
 * rai_swin3d_index complete it. */
#ifndef RA_MODELS_SWIN3D_H
#define RA_MODELS_SWIN3D_H

#include "models/model.h"
#include "base/arena.h"
#include "nn/nn.h"
#include "pos/window.h"
#include "attention/layer.h"
#include "layers/block.h"

#define SWIN3D_EPS 1e-5f
#define SWIN3D_MAX_DIM (1 << 16)          /* the attention layers' bound */
#define SWIN3D_MAX_SIZE (1 << 16)         /* frames and map sides */
#define SWIN3D_MAX_WINDOW 4096            /* a window extent */
#define SWIN3D_MAX_TOKENS 4096            /* tokens per window: index N1*N2 int32 <= 64 MB */
#define SWIN3D_MAX_HIDDEN (1 << 20)
#define SWIN3D_MLP_CHUNK ((int64_t)1 << 22)   /* floats of MLP hidden rows at once */
#define SWIN3D_MAX_FLOATS ((int64_t)1 << 40)

typedef struct swin3d_block {
    int dim, heads, hidden;
    int cross;               /* RSTT cross block */
    int fq, fkv;             /* frames of the attention: Wd, Wd (self) or D1, D2 */
    int win[3], shift[3];    /* the constructor's (Wd or D1, Wh, Ww), (Sd or 0, Sh, Sw) */
    int qkv_naming;          /* Video Swin's attn.qkv.* */
    int qkv_bias, has_qk_scale;
    float qk_scale, scale;
    double mlp_ratio;
    float drop_path;         /* stochastic depth of both branches (training; the network's) */
    int64_t n1, n2, rows;    /* the constructor's window tokens, table rows */
    int32_t *idx;            /* (n1, n2) the constructor's index */
    const float *n1w, *n1b, *nkw, *nkb, *n2w, *n2b, *table;
    const float *qw, *qb, *kvw, *kvb, *pw, *pb, *f1w, *f1b, *f2w, *f2b;
    struct swin3d_tape *tape;   /* the training pass (NULL until one runs) */
    rai_arena_cache ws;       /* the inference scratch, kept between calls */
} swin3d_block;

/* The run-time geometry: windows and shifts after the clamp. */
typedef struct swin3d_plan {
    ra_window_spec gq, gkv;  /* query map and key/value map (the same for a self block) */
    int64_t nw, n1, n2;      /* windows per clip, tokens per query / key window */
    int shifted;
} swin3d_plan;

/* Sizes of the tensors of one pass, overflow-checked. */
typedef struct swin3d_sizes {
    int64_t M1, M2;          /* query / key-value tokens of the maps (B * D * H * W) */
    int64_t nx, nkx;         /* floats of x and kv (M * C) */
    int64_t bw, rows1, rows2;   /* windows of the batch, their query / key-value rows */
    int64_t nwin1, nwin2;    /* floats of the windows (rows * C) */
    int64_t nlabels, t2, nl2; /* the mask's labels (nW, N1 + N2), a cross block's spatial
                                labels (nW, T) */
    int64_t nhid;            /* M1 * hidden */
} swin3d_sizes;

/* One run's attention: the model's weights and the run's index. */
typedef struct window_attn_3d {
    const swin3d_block *s;
    const int32_t *idx;      /* (n, n2) */
    int fused;               /* q and kv projected as one (rows, 3C) product */
} window_attn_3d;

/* What the block needs for B clips of d x H x W (d = D1 for a cross block),
 * its buffers from an arena. Holds pointers into itself: it does not move. */
typedef struct swin3d_run {
    swin3d_plan p;
    swin3d_sizes z;
    window_attn_3d attn;
    rai_block_attn ops;
    rai_block blk;
    rai_block_layout l;
} swin3d_run;

/* The window's tokens (n1, n2), table rows, MLP width (int(dim *
 * mlp_ratio)) and scale of s, whose dim, heads, fq, fkv, win, shift,
 * mlp_ratio and qk_scale are set; RA_ERR_FORMAT naming what is wrong. */
ra_status rai_swin3d_geometry(swin3d_block *s);
/* s->idx (n1, n2), the constructor's index (free with rai_free). */
ra_status rai_swin3d_index(swin3d_block *s);
/* A saved relative_position_index t must be s's (n1, n2) index. */
ra_status rai_swin3d_check_index(const ra_st_file *f, const ra_st_tensor *t,
                                 const swin3d_block *s);
/* The run of s over B clips of d x H x W (kv: a cross block's key/value
 * input (B, D2, H, W, C)): windows, index, mask and the block, buffers
 * from a. r holds pointers into itself: it must not move. */
ra_status rai_swin3d_run_begin(swin3d_run *r, const swin3d_block *s, const float *kv, int B,
                               int d, int H, int W, rai_arena *a);
/* Inference: y (B, Dq, H, W, C) from x (B, Dq, H, W, C) (and kv), y may
 * alias x; scratch from a, released before returning. */
ra_status rai_swin3d_forward(const swin3d_block *s, float *y, const float *x, const float *kv,
                             int B, int d, int H, int W, rai_arena *a);
/* Multiply-adds of s over one clip of d frames of h x w, counted as Swin's
 * SwinTransformerBlock.flops() counts a block (norms, the windows'
 * attention with its projections, the MLP), with the windows of the padded
 * map (a cross block over its D1 query and D2 key/value frames, norm_kv
 * included). */
int64_t rai_swin3d_flops(const swin3d_block *s, int d, int h, int w);

#endif
