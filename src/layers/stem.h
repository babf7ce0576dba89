/* stem.h - the patch embedding, forward and backward (private): images x
 * (B, Cin, H, W) to patch tokens y (B, gh*gw, E):
 *   [crop] -> Conv2d(Cin, E, kernel K, stride P) -> [LayerNorm] -> [+ pos]
 * the convolution a GEMM over the gathered K x K neighbourhoods (K = P, or
 * relattn's overlapping kernel); crop: torchvision's stride-P convolution,
 * which drops the remainder of a side, else the image zero-padded to a
 * multiple of P (pad) or required to be one; the LayerNorm Swin's
 * patch_norm; pos an absolute position embedding added to every sample
 * (Swin's ape). A network's own tokens (ViT's class token, its position
 * embedding over them) are the network's. */
#ifndef RA_STEM_H
#define RA_STEM_H

#include "base/arena.h"
#include "nn/nn.h"

typedef struct rai_stem {
    int in_chans, patch, kernel, dim;   /* Cin, P, K, E */
    int pad;                  /* zero-pad a side that is not a multiple of P */
    int crop;                 /* drop it instead (pad is then 0) */
    const float *w, *b;       /* (E, Cin, K, K), (E) or NULL: the convolution */
    const float *nw, *nb;     /* (E) the LayerNorm, or NULL */
    float eps;                /* its epsilon */
    const float *pos;         /* (gh*gw, E) the position embedding, or NULL */
} rai_stem;

/* Gradient slots of its parameters (NULL: not wanted). */
typedef struct rai_stem_grads {
    float *w, *b, *nw, *nb, *pos;
} rai_stem_grads;

/* What a training forward keeps for the backward. */
typedef struct rai_stem_tape {
    int H, W, hc, wc, gh, gw; /* the image, its size after a crop, the patch grid */
    float *cols;              /* (B*L, Cin*K*K) the gathered neighbourhoods, L = gh*gw */
    float *pre;               /* (B*L, E) the LayerNorm's input */
    float *mean, *rstd;       /* (B*L) its statistics */
} rai_stem_tape;

/* The size of an H x W image after the crop and its patch grid;
 * RA_ERR_SHAPE for an image smaller than a patch (crop), the errors of
 * ra_patch_grid otherwise. */
ra_status rai_stem_grid(const rai_stem *s, int H, int W, int *hc, int *wc, int *gh, int *gw);

/* Lay out a tape's buffers for B images of H x W in base (NULL: only
 * count; t is then not written); returns the floats it needs, in 64-byte
 * steps (0 for a size rai_stem_grid refuses). */
size_t rai_stem_tape_layout(rai_stem_tape *t, const rai_stem *s, int B, int H, int W,
                            float *base);

/* y (B, gh*gw, E) from x (B, Cin, H, W). t NULL: inference, scratch from
 * a released before returning; else training, t laid out by
 * rai_stem_tape_layout for this input. */
ra_status rai_stem_forward(const rai_stem *s, float *y, rai_stem_tape *t, const float *x, int B,
                           int H, int W, rai_arena *a);

/* dx (B, Cin, H, W) ACCUMULATED (NULL: not wanted) and the parameter
 * gradients ACCUMULATED into g, from dy (B, L, E) and the tape. work (B*L,
 * Cin*K*K) is the convolution's scratch for dx: t->cols itself will do,
 * the tape then serving no other backward. Scratch from a. */
ra_status rai_stem_backward(const rai_stem *s, float *dx, const rai_stem_grads *g,
                            const float *dy, const rai_stem_tape *t, float *work, int B,
                            rai_arena *a);

#endif
