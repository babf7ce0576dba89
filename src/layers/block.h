/* block.h - one transformer block, forward and backward (private): the
 * pre-norm block (Swin, ViT)
 *   x += ls1 * attn(norm1(x));  x += ls2 * fc2(gelu(fc1(norm2(x))))
 * or the post-norm block (SwinV2)
 *   x += norm1(attn(x));        x += norm2(fc2(gelu(fc1(x))))
 * with the attention run on a row layout of x (a window partition: rows
 * gathered through an int32 map, the output scattered back through it) or
 * on x's rows as they are. A pre-norm block may attend across to a second
 * input kv (cross-attention: keys and values from norm_kv(kv), laid out
 * through kv's own row map). The attention is an ra_attn_layer or one of
 * the network's own (rai_block_attn). Networks give the weights, the layout
 * and a tape (training) or none (inference); the stem, the row maps,
 * merging and the head are theirs. llm.c's shape: the training forward
 * keeps on the tape exactly what the backward reads. */
#ifndef RA_BLOCK_H
#define RA_BLOCK_H

#include "base/arena.h"
#include "nn/nn.h"
#include "pos/window.h"
#include "attention/layer.h"

typedef struct rai_block_layout rai_block_layout;

/* An attention of the network's own in place of an ra_attn_layer (the 3-D
 * window block's: q and kv projections, or one fused qkv product, around
 * the core with an index clipped to the run's windows), called as the
 * layer's workspace calls are (attention/layer.h), on the sequences of l:
 * x (b_*n, C), kv (b_*n2, C) or NULL (self-attention).
 *   forward: y (b_*n, C), or with res, res rows map[r] += the output row r
 *     (y is then scratch); attn (b_, nH, n, n2) the probabilities, if given.
 *     ws: forward_ws_size bytes, kept untouched until the backward.
 *   backward: dx (b_*n, C) overwritten, dkv (b_*n2, C) ACCUMULATED,
 *     parameter gradients ACCUMULATED into g, from dy (b_*n, C) and saved
 *     (the forward's ws); ws: backward_ws_size bytes. */
typedef struct rai_block_attn {
    const void *ctx;
    size_t (*forward_ws_size)(const void *ctx, const rai_block_layout *l);
    ra_status (*forward)(const void *ctx, float *y, float *attn, const float *x, const float *kv,
                         const rai_block_layout *l, void *ws, float *res, const int32_t *map);
    size_t (*backward_ws_size)(const void *ctx, const rai_block_layout *l);
    ra_status (*backward)(const void *ctx, float *dx, float *dkv, const ra_attn_grads *g,
                          const float *dy, const float *x, const float *kv,
                          const rai_block_layout *l, const void *saved, void *ws);
} rai_block_attn;

/* One block's weights and options. */
typedef struct rai_block {
    int dim, hidden;
    int post;                 /* post-norm (SwinV2) */
    float eps;                /* the LayerNorms' */
    float drop_path;          /* stochastic depth of both branches (training) */
    int64_t mlp_chunk;        /* inference: floats of MLP hidden rows per pass, 0 all rows */
    const float *n1w, *n1b, *n2w, *n2b, *fc1w, *fc1b, *fc2w, *fc2b;
    const float *ls1, *ls2;   /* LayerScale gammas (C) or NULL */
    const float *nkw, *nkb;   /* norm_kv, the LayerNorm of a cross-attention's kv input */
    ra_attn_layer *attn;
    const rai_block_attn *own; /* the network's own attention (attn is then NULL) */
} rai_block;

/* How the block's token rows meet the attention. */
struct rai_block_layout {
    int64_t m;                /* token rows of x */
    int batch;                /* samples: m = batch * tokens (drop-path draws per sample) */
    int b_, n;                /* sequences (windows) of the attention and their tokens */
    const int32_t *map;       /* (b_*n) the row of x each sequence row reads, -1 padding;
                                 NULL: x's rows in order (m = b_*n) */
    const float *mask;        /* (nw, n, n2) or NULL */
    const int32_t *regions;   /* or the mask as labels (nw, n + n2; ra_attn_desc.regions),
                                 for an attention of the network's own (rai_block_attn) */
    int nw;
    /* cross-attention (pre-norm only); kv NULL: self-attention */
    const float *kv;          /* (mkv, C) the key/value input (the caller's; only read) */
    int64_t mkv;
    int n2;                   /* key tokens of a sequence (0: n) */
    const int32_t *kvmap;     /* (b_*n2) the row of kv each key row reads, -1 padding;
                                 NULL: kv's rows in order (mkv = b_*n2) */
};

/* Key tokens of a sequence of l. */
static inline int rai_block_keys(const rai_block_layout *l) { return l->n2 ? l->n2 : l->n; }

/* Gradient slots of a block's parameters (NULL: not wanted). */
typedef struct rai_block_grads {
    float *n1w, *n1b, *n2w, *n2b, *fc1w, *fc1b, *fc2w, *fc2b, *ls1, *ls2, *nkw, *nkb;
    ra_attn_grads attn;
    float *kv;                /* (mkv, C) the gradient of the kv input, ACCUMULATED */
} rai_block_grads;

/* The gradient slots of a block whose weights are b's and p's (its
 * attention's), every one a pointer into weights, a network's flat buffer:
 * grad is laid out like weights, so each slot sits at its weight's offset
 * (NULL for an absent weight). g->kv is left NULL. */
void rai_block_grads_at(rai_block_grads *g, const rai_block *b, const ra_attn_params *p,
                        const float *weights, float *grad);

/* What a training forward keeps for the backward. x is the caller's: the
 * block's input (M, C), left untouched until the backward. */
typedef struct rai_block_tape {
    rai_block_layout l;
    float *x;                 /* (M, C) the input (the caller's; only read) */
    float *mean1, *rstd1;     /* norm1's statistics: (M) pre-norm, (b_*n) post-norm */
    /* the attention's input (b_*n, C), norm1(x) laid out in windows (post-norm:
     * x's rows), and fc1's input norm2(xm) (post-norm: xm) are remade by the
     * backward from x, xm and the statistics, as GELU and GELU' are from h */
    float *meankv, *rstdkv;   /* (mkv) norm_kv's statistics */
    float *wkv;               /* (b_*n2, C) the attention's kv input */
    float *a;                 /* (b_*n, C) the attention's output, kept where a step sits
                                 between it and the residual (LayerScale, drop-path,
                                 post-norm's norm1) */
    float *xm;                /* (M, C) x after the attention's residual */
    float *mean2, *rstd2;     /* (M) */
    float *h;                 /* (M, hidden) fc1's output, GELU's input */
    float *mo;                /* (M, C) fc2's output, kept as a is */
    uint8_t *keep1, *keep2;   /* (batch) drop-path draws */
    void *aws;                /* the attention forward's workspace (its projections and
                                 output, read by the backward), or NULL: recomputed */
} rai_block_tape;

/* Lay out a tape's buffers in base (NULL: only count; t is then not
 * written); returns the floats it needs, in 64-byte steps. The input x and
 * the attention's workspace are not among them. */
size_t rai_block_tape_layout(rai_block_tape *t, const rai_block *b, const rai_block_layout *l,
                             float *base);

/* Inference, in place on x (M, C). attn (b_, nH, n, n): the attention's
 * probabilities, if given. Scratch from a (released before returning). */
ra_status rai_block_forward(const rai_block *b, float *x, float *attn, const rai_block_layout *l,
                            rai_arena *a);

/* Training: y (M, C) from t->x, filling t (laid out by
 * rai_block_tape_layout). keep_attn: the attention's workspace is taken
 * from a and kept (t->aws, below the arena's mark on return); else it is
 * scratch and the backward recomputes the projections. rng: drop-path. */
ra_status rai_block_forward_train(const rai_block *b, rai_block_tape *t, float *y, int keep_attn,
                                  rai_arena *a, ra_rng *rng);

/* dx (M, C): the gradient of the block's output in, of its input out (in
 * place); parameter gradients (and kv's) ACCUMULATED into g. Scratch from
 * a. */
ra_status rai_block_backward(const rai_block *b, const rai_block_tape *t, float *dx,
                             const rai_block_grads *g, rai_arena *a);

/* ---- window layouts --------------------------------------------------------
 * The row maps and shifted-window masks of one forward, built on first use
 * from an arena and shared by the blocks of the same layout. */
#define RA_WINDOW_LAYOUTS 4

typedef struct rai_window_layout {
    ra_window_spec g;
    int b;
    int32_t *map;             /* (B*nW*N) */
    float *mask;              /* (nW, N, N), NULL without shift */
} rai_window_layout;

typedef struct rai_window_layouts {
    rai_arena *a;
    rai_window_layout item[RA_WINDOW_LAYOUTS];
    int count;
} rai_window_layouts;

/* The layout of g for B maps (from c's arena, which must not be reset past
 * it while it is used). */
ra_status rai_window_layout_get(rai_window_layouts *c, const ra_window_spec *g, int B,
                                const rai_window_layout **out);

#endif
