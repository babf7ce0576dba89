/* swin_train.c - the backward of the Swin block and network (archs
 * swin_block, swin and swinv2), equal to PyTorch autograd.
 *
 * llm.c's shape: the one forward (swin.c) keeps on a tape exactly what the
 * backward needs when it trains; the backward walks the tape in reverse,
 * layer pair by layer pair, and reads it only. The blocks are block.c's
 * (their tapes keep the attention's workspace: the backward reads q, k, v
 * and the attention output from it instead of recomputing them). The
 * residual stream's gradient flows through one (M, C) buffer updated in
 * place. Every parameter's gradient is found at its weight's offset in the
 * flat gradient (rai_model_grad_at, rai_block_grads_at), from the pointers
 * bound when the model was built. */
#include "models/swin.h"

#include <string.h>

static ra_status nomem(void) { return rai_fail(RA_ERR_NOMEM, "swin training: out of memory"); }

static ra_status tape_check(const swin_tape *t) {
    return t && t->live ? RA_OK
                        : rai_fail(RA_ERR_ARG, "backward without a training forward before it");
}

/* The gradient slots of block b's parameters in grad. */
static void blk_grads(rai_block_grads *g, const ra_model *m, float *grad, const swin_blk *b) {
    rai_block_grads_at(g, &b->blk, &b->attn_w, m->weights, grad);
}

/* ---- swin_block --------------------------------------------------------- */

ra_status rai_swin_block_backward(ra_model *m, float *grad, float *dx, const float *dy) {
    swin_block_model *o = m->impl;
    swin_tape *t = o->tape;
    ra_status st = tape_check(t);
    if (st) return st;
    rai_block_grads g;
    blk_grads(&g, m, grad, &o->b);
    const int64_t nx = (int64_t)t->B * t->Hin * t->Win * o->b.dim;
    const size_t mark = rai_arena_mark(t->a);
    float *d = rai_arena_floats(t->a, (size_t)nx);
    if (!d) return nomem();
    memcpy(d, dy, (size_t)nx * sizeof *d);
    st = rai_block_backward(&o->b.blk, &t->blocks[0], d, &g, t->a);
    if (!st && dx)
        for (int64_t i = 0; i < nx; i++) dx[i] += d[i];
    rai_arena_reset(t->a, mark);
    return st;
}

/* ---- swin, swinv2 -------------------------------------------------------- */

#define G(w) rai_model_grad_at(m, grad, w)

ra_status rai_swin_net_backward(ra_model *m, float *grad, float *dx, const float *dy) {
    swin_net *n = m->impl;
    swin_tape *t = n->tape;
    ra_status st = tape_check(t);
    if (st) return st;
    rai_arena *a = t->a;
    const size_t mark = rai_arena_mark(a);
    const int B = t->B, C = t->cf;
    const int64_t Lf = (int64_t)t->hf * t->wf, rf = B * Lf;

    /* head, pooling, final norm (head.c): ds the stream's gradient */
    float *ds = rai_arena_floats(a, (size_t)(rf * C));
    if (!ds) return rai_arena_reset(a, mark), nomem();
    const rai_head *hd = &n->head;
    const rai_head_grads gh = {.nw = G(hd->nw), .nb = G(hd->nb), .w = G(hd->w), .b = G(hd->b)};
    st = rai_head_backward(hd, ds, &gh, dy, &t->head, B, Lf, a);

    /* stages, last to first */
    int c = C;
    for (int s = n->nstages - 1; s >= 0 && !st; s--) {
        const int h = t->sh[s], w = t->sw[s];
        if (s < n->nstages - 1) {   /* patch merging's backward: ds is of its output */
            c /= 2;
            const rai_merge *g = &n->merge[s];
            const rai_merge_grads gm = {.w = G(g->w), .nw = G(g->nw), .nb = G(g->nb)};
            float *dprev = rai_arena_floats(a, (size_t)B * h * w * c);
            if (!dprev) return rai_arena_reset(a, mark), nomem();
            rai_zero(dprev, (int64_t)B * h * w * c);
            st = rai_merge_backward(g, dprev, &gm, ds, &t->merge[s], B, h, w, c, a);
            ds = dprev;
        }
        for (int j = n->depths[s] - 1; j >= 0 && !st; j--) {
            rai_block_grads g;
            blk_grads(&g, m, grad, &n->blocks[n->first[s] + j]);
            st = rai_block_backward(&n->blocks[n->first[s] + j].blk, &t->blocks[n->first[s] + j],
                                    ds, &g, a);
        }
    }

    /* absolute position embedding, patch norm, patch embedding (stem.c); cols
     * is not needed after this: it is the work buffer */
    const rai_stem *sm = &n->stem;
    const rai_stem_grads gs = {.w = G(sm->w), .b = G(sm->b), .nw = G(sm->nw), .nb = G(sm->nb),
                               .pos = G(sm->pos)};
    if (!st) {
        st = rai_stem_backward(sm, dx, &gs, ds, &t->stem, t->stem.cols, B, a);
        if (dx) t->live = 0;   /* cols was overwritten: one backward per forward */
    }
    rai_arena_reset(a, mark);
    return st;
}

#undef G
