/* stem.c - the patch embedding, forward and backward (stem.h). Inference
 * normalises in place; the training forward runs the same calls, keeping
 * the LayerNorm's input and statistics: the same bits. */
#include "layers/stem.h"

#include <string.h>

static ra_status nomem(void) { return rai_fail(RA_ERR_NOMEM, "patch embedding: out of memory"); }

ra_status rai_stem_grid(const rai_stem *s, int H, int W, int *hc, int *wc, int *gh, int *gw) {
    const int P = s->patch;
    int h = H, w = W;
    if (s->crop) {   /* Conv2d(stride P) drops the remainder */
        h = H / P * P, w = W / P * P;
        if (h < 1 || w < 1)
            return rai_fail(RA_ERR_SHAPE, "a %dx%d image is smaller than a %dx%d patch", H, W, P,
                            P);
    }
    ra_status st = ra_patch_grid(gh, gw, h, w, P, s->pad);
    if (!st) *hc = h, *wc = w;
    return st;
}

size_t rai_stem_tape_layout(rai_stem_tape *t, const rai_stem *s, int B, int H, int W,
                            float *base) {
    rai_stem_tape z = {.H = H, .W = W};
    if (rai_stem_grid(s, H, W, &z.hc, &z.wc, &z.gh, &z.gw)) return 0;
    const size_t rows = (size_t)B * (size_t)z.gh * (size_t)z.gw, E = (size_t)s->dim;
    const size_t kc = (size_t)s->in_chans * (size_t)s->kernel * (size_t)s->kernel;
    size_t off = 0;
    z.cols = rai_carve(base, &off, rows * kc);
    z.pre = s->nw ? rai_carve(base, &off, rows * E) : NULL;
    z.mean = s->nw ? rai_carve(base, &off, rows) : NULL;
    z.rstd = s->nw ? rai_carve(base, &off, rows) : NULL;
    if (base) *t = z;
    return off;
}

ra_status rai_stem_forward(const rai_stem *s, float *y, rai_stem_tape *t, const float *x, int B,
                           int H, int W, rai_arena *a) {
    const int Cin = s->in_chans, E = s->dim;
    int h, w, gh, gw;
    ra_status st = rai_stem_grid(s, H, W, &h, &w, &gh, &gw);
    if (st) return st;
    const int64_t L = (int64_t)gh * gw, rows = B * L;
    const int64_t kc = (int64_t)Cin * s->kernel * s->kernel;
    const size_t mark = rai_arena_mark(a);
    const float *src = x;
    if (h != H || w != W) {   /* the cropped image */
        float *crop = rai_arena_floats(a, (size_t)B * Cin * h * w);
        if (!crop) return nomem();
        for (int64_t r = 0; r < (int64_t)B * Cin * h; r++)
            memcpy(crop + r * w, x + ((r / h) * H + r % h) * (int64_t)W, (size_t)w * sizeof *crop);
        src = crop;
    }
    float *cols = t ? t->cols : rai_arena_floats(a, (size_t)(rows * kc));
    float *pre = t && s->nw ? t->pre : y;   /* the convolution's output: in place without a tape */
    if (!cols) st = nomem();
    else st = rai_patch_embed_forward_k(pre, cols, src, s->w, s->b, B, Cin, h, w, s->patch,
                                        s->kernel, E, s->pad);
    if (!st && s->nw)
        ra_layernorm_forward(y, t ? t->mean : NULL, t ? t->rstd : NULL, pre, s->nw, s->nb, rows, E,
                             s->eps);
    if (!st && s->pos)
        for (int b = 0; b < B; b++) ra_add(y + b * L * E, y + b * L * E, s->pos, L * E);
    rai_arena_reset(a, mark);
    return st;
}

ra_status rai_stem_backward(const rai_stem *s, float *dx, const rai_stem_grads *g,
                            const float *dy, const rai_stem_tape *t, float *work, int B,
                            rai_arena *a) {
    const int Cin = s->in_chans, E = s->dim, hc = t->hc, wc = t->wc;
    const int64_t L = (int64_t)t->gh * t->gw, rows = B * L;
    const size_t mark = rai_arena_mark(a);
    if (s->pos && g->pos)   /* the position embedding: summed over the samples */
        for (int b = 0; b < B; b++)
            for (int64_t i = 0; i < L * E; i++) g->pos[i] += dy[b * L * E + i];
    const float *dconv = dy;   /* the convolution's output gradient */
    if (s->nw) {
        float *dpre = rai_arena_floats(a, (size_t)(rows * E));
        if (!dpre) return nomem();
        rai_zero(dpre, rows * E);
        ra_layernorm_backward(dpre, g->nw, g->nb, dy, t->pre, t->mean, t->rstd, s->nw, rows, E);
        dconv = dpre;
    }
    const int cropped = hc != t->H || wc != t->W;
    float *dimg = dx;   /* of the cropped image */
    if (dx && cropped) {
        if (!(dimg = rai_arena_floats(a, (size_t)B * Cin * hc * wc)))
            return rai_arena_reset(a, mark), nomem();
        memset(dimg, 0, (size_t)B * Cin * hc * wc * sizeof *dimg);
    }
    ra_status st = rai_patch_embed_backward_k(dimg, g->w, g->b, work, dconv, t->cols, s->w, B, Cin,
                                              hc, wc, s->patch, s->kernel, E, s->pad);
    if (!st && dx && cropped)   /* the crop's backward: the kept pixels' gradients */
        for (int64_t r = 0; r < (int64_t)B * Cin * hc; r++)
            for (int i = 0; i < wc; i++)
                dx[((r / hc) * t->H + r % hc) * (int64_t)t->W + i] += dimg[r * wc + i];
    rai_arena_reset(a, mark);
    return st;
}
