/* head.h - the pooled head, forward and backward (private): the tokens x
 * (B, N, C) of the last block to the outputs y (outer, K):
 *   [norm] -> pool -> [fc_norm] -> [Linear (K, C)]
 * norm a LayerNorm over the tokens (the final norm), pool one of timm's
 * global pools (Swin's: the mean of every token), fc_norm a LayerNorm of
 * the pooled features (timm's fc_norm), the classifier absent for a model
 * without a head (y the features). outer is B, or B*N without pooling. The
 * network gives the weights and a tape (training) or none (inference). */
#ifndef RA_HEAD_H
#define RA_HEAD_H

#include "base/arena.h"
#include "nn/nn.h"

enum { RAI_POOL_NONE, RAI_POOL_TOKEN, RAI_POOL_AVG, RAI_POOL_MAX, RAI_POOL_AVGMAX };

typedef struct rai_head {
    int dim;                  /* C */
    float eps;                /* the LayerNorms' */
    const float *nw, *nb;     /* (C) the norm over the tokens, or NULL */
    int pool;                 /* RAI_POOL_*: none, the first token, mean, amax, their mean */
    int skip;                 /* leading tokens (class, registers) mean and amax leave out */
    const float *fw, *fb;     /* (C) fc_norm, or NULL */
    const float *w, *b;       /* (classes, C), (classes) the classifier; w NULL: none */
    int classes;
} rai_head;

/* Gradient slots of its parameters (NULL: not wanted). */
typedef struct rai_head_grads {
    float *nw, *nb, *fw, *fb, *w, *b;
} rai_head_grads;

/* What a training forward keeps for the backward. */
typedef struct rai_head_tape {
    const float *x;           /* (B*N, C) the input (the caller's; only read) */
    float *mean, *rstd;       /* (B*N) the norm's statistics */
    float *xo;                /* (B*N, C) the final tokens (x itself without a norm) */
    float *pooled;            /* (outer, C) */
    float *pmean, *prstd;     /* (outer) fc_norm's statistics */
    float *pn;                /* (outer, C) the classifier's input (pooled without fc_norm) */
} rai_head_tape;

/* Rows of the output: B, or B*N without pooling. */
static inline int64_t rai_head_rows(const rai_head *h, int B, int64_t N) {
    return h->pool == RAI_POOL_NONE ? (int64_t)B * N : B;
}

/* Lay out a tape's buffers in base (NULL: only count; t is then not
 * written), x the input it will be given; returns the floats it needs, in
 * 64-byte steps. */
size_t rai_head_tape_layout(rai_head_tape *t, const rai_head *h, int B, int64_t N,
                            const float *x, float *base);

/* y (outer, classes, or C without a classifier) from x (B, N, C). t NULL:
 * inference, x normalised in place (overwritten), scratch from a released
 * before returning; else training, t laid out by rai_head_tape_layout
 * with x. */
ra_status rai_head_forward(const rai_head *h, float *y, rai_head_tape *t, float *x, int B,
                           int64_t N, rai_arena *a);

/* dx (B, N, C) OVERWRITTEN with the gradient of the head's input, from dy
 * (outer, K) and the tape; parameter gradients ACCUMULATED into g.
 * Scratch from a. */
ra_status rai_head_backward(const rai_head *h, float *dx, const rai_head_grads *g,
                            const float *dy, const rai_head_tape *t, int B, int64_t N,
                            rai_arena *a);

#endif
