/* merge.h - patch merging, forward and backward (private): Swin's
 * PatchMerging between two stages, x (B, H, W, C) -> y (B, H2*W2, 2C),
 * H2 = ceil(H/2), W2 = ceil(W/2):
 *   cat = the 2x2 neighbours, (B, H2*W2, 4C) (ra_patch_merge_forward)
 *   Swin:    y = reduction(norm(cat))     norm over 4C
 *   SwinV2:  y = norm(reduction(cat))     norm over 2C
 * reduction a Linear(4C, 2C) without bias. The network gives the weights
 * and a tape (training) or none (inference). */
#ifndef RA_MERGE_H
#define RA_MERGE_H

#include "base/arena.h"
#include "nn/nn.h"

typedef struct rai_merge {
    int post;                 /* SwinV2: the norm after the reduction */
    float eps;                /* the LayerNorm's */
    const float *w;           /* (2C, 4C) the reduction */
    const float *nw, *nb;     /* (4C), or (2C) post */
} rai_merge;

/* Gradient slots of its parameters (NULL: not wanted). */
typedef struct rai_merge_grads {
    float *w, *nw, *nb;
} rai_merge_grads;

/* What a training forward keeps for the backward (in the forward's arena). */
typedef struct rai_merge_tape {
    float *cat;               /* (r2, 4C) the gathered neighbours, r2 = B*H2*W2 */
    float *mid;               /* (r2, 4C) norm(cat), or post (r2, 2C) reduction(cat) */
    float *mean, *rstd;       /* (r2) the norm's statistics */
} rai_merge_tape;

/* y (B, H2*W2, 2C) from x (B, H, W, C). t NULL: inference, scratch from a
 * released before returning; else training, t filled with buffers of a
 * (left below its mark). */
ra_status rai_merge_forward(const rai_merge *g, float *y, rai_merge_tape *t, const float *x,
                            int B, int H, int W, int C, rai_arena *a);

/* dx (B, H, W, C) ACCUMULATED from dy (B, H2*W2, 2C) and the tape, the
 * parameter gradients ACCUMULATED into gr. Scratch from a. */
ra_status rai_merge_backward(const rai_merge *g, float *dx, const rai_merge_grads *gr,
                             const float *dy, const rai_merge_tape *t, int B, int H, int W,
                             int C, rai_arena *a);

#endif
