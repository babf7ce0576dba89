/* merge.c - patch merging, forward and backward (merge.h). The training
 * forward runs the inference's products and norms, out of place where the
 * backward reads their inputs, so both give the same bits. */
#include "layers/merge.h"

static ra_status nomem(void) { return rai_fail(RA_ERR_NOMEM, "patch merging: out of memory"); }

ra_status rai_merge_forward(const rai_merge *g, float *y, rai_merge_tape *t, const float *x,
                            int B, int H, int W, int C, rai_arena *a) {
    const int64_t rows = (int64_t)B * ((H + 1) / 2) * ((W + 1) / 2);
    const int64_t cn = g->post ? 2 * C : 4 * C;   /* the norm's width */
    float *mean = t ? rai_arena_floats(a, (size_t)rows) : NULL;
    float *rstd = t ? rai_arena_floats(a, (size_t)rows) : NULL;
    const size_t mark = rai_arena_mark(a);
    float *cat = rai_arena_floats(a, (size_t)(rows * 4 * C));
    /* the norm's input (post) or output: kept when training, else in place */
    float *mid = t ? rai_arena_floats(a, (size_t)(rows * cn)) : g->post ? y : cat;
    ra_status st = cat && mid && (!t || (mean && rstd)) ? RA_OK : nomem();
    if (!st) st = ra_patch_merge_forward(cat, x, B, H, W, C);
    if (!st && g->post) {   /* reduction, then norm */
        ra_linear_forward(mid, cat, g->w, NULL, rows, 2 * C, 4 * C);
        ra_layernorm_forward(y, mean, rstd, mid, g->nw, g->nb, rows, 2 * C, g->eps);
    } else if (!st) {
        ra_layernorm_forward(mid, mean, rstd, cat, g->nw, g->nb, rows, 4 * C, g->eps);
        ra_linear_forward(y, mid, g->w, NULL, rows, 2 * C, 4 * C);
    }
    if (!t) rai_arena_reset(a, mark);
    if (!st && t) *t = (rai_merge_tape){.cat = cat, .mid = mid, .mean = mean, .rstd = rstd};
    return st;
}

ra_status rai_merge_backward(const rai_merge *g, float *dx, const rai_merge_grads *gr,
                             const float *dy, const rai_merge_tape *t, int B, int H, int W,
                             int C, rai_arena *a) {
    const int64_t rows = (int64_t)B * ((H + 1) / 2) * ((W + 1) / 2);
    const size_t mark = rai_arena_mark(a);
    float *dmid = rai_arena_floats(a, (size_t)(rows * 4 * C));
    float *dcat = rai_arena_floats(a, (size_t)(rows * 4 * C));
    if (!dmid || !dcat) return rai_arena_reset(a, mark), nomem();
    rai_zero(dmid, rows * 4 * C);
    rai_zero(dcat, rows * 4 * C);
    if (g->post) {   /* the norm (its input in mid), then the reduction */
        ra_layernorm_backward(dmid, gr->nw, gr->nb, dy, t->mid, t->mean, t->rstd, g->nw, rows,
                              2 * C);
        ra_linear_backward(dcat, gr->w, NULL, dmid, t->cat, g->w, rows, 2 * C, 4 * C);
    } else {
        ra_linear_backward(dmid, gr->w, NULL, dy, t->mid, g->w, rows, 2 * C, 4 * C);
        ra_layernorm_backward(dcat, gr->nw, gr->nb, dmid, t->cat, t->mean, t->rstd, g->nw, rows,
                              4 * C);
    }
    ra_status st = ra_patch_merge_backward(dx, dcat, B, H, W, C);
    rai_arena_reset(a, mark);
    return st;
}
