/* swin_train.c - training forward and backward of the Swin block and
 * network (archs swin_block and swin), equal to PyTorch autograd.
 *
 * llm.c's shape: the training forward runs the same layers as the
 * inference path (swin.c) in the same order and keeps on a tape exactly what
 * the backward needs; the backward walks the tape in reverse, layer pair by
 * layer pair. The blocks are block.c's (their tapes keep the attention's
 * workspace: the backward reads q, k, v and the attention output from it
 * instead of recomputing them); each block's input and output are their
 * own (M, C) buffers, M = B*H*W token rows. The residual stream's gradient
 * flows through one (M, C) buffer updated in place. The tape lives in an
 * arena owned by the model, reused step after step (after the first step
 * nothing is allocated). */
#include "models/swin.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct swin_tape {
    rai_arena_cache cache;
    rai_arena local, *a;           /* the arena in use since the last forward */
    rai_window_layouts run;        /* window layouts (in the arena) */
    int live;                     /* a forward is on the tape */
    int B, Hin, Win;              /* the input: images (net) or maps (block) */
    int x_ndim;
    int64_t x_shape[4];
    /* the network */
    int h0, w0, hc, wc;           /* patch grid; image size after a crop */
    float *cols;                  /* (B, L0, Cin*P*P) gathered patches */
    float *pe_in, *pe_mean, *pe_rstd;   /* patch norm's input and statistics */
    rai_block_tape *blocks;        /* every block, in forward order */
    int nblocks;
    int sh[SWIN_MAX_STAGES], sw[SWIN_MAX_STAGES];   /* each stage's map */
    float *mg_cat[SWIN_MAX_STAGES], *mg_mean[SWIN_MAX_STAGES], *mg_rstd[SWIN_MAX_STAGES],
        *mg_norm[SWIN_MAX_STAGES];   /* patch merging: gather, stats, normalised */
    float *fin_in, *fin_mean, *fin_rstd, *fin_out, *pooled;   /* final norm, pooling */
    int hf, wf, cf;               /* the last stage's map and channels */
} swin_tape;

void rai_swin_tape_free(swin_tape *t) {
    if (!t) return;
    if (t->a) rai_arena_end(&t->cache, t->a);
    rai_arena_cache_free(&t->cache);
    free(t->blocks);
    free(t);
}

/* Start a tape: the previous one is dropped and its arena reused. */
static ra_status tape_begin(swin_tape **tp, int nblocks) {
    swin_tape *t = *tp;
    if (!t) {
        if (!(t = calloc(1, sizeof *t))) return rai_fail(RA_ERR_NOMEM, "swin: out of memory");
        *tp = t;
    }
    if (t->a) rai_arena_end(&t->cache, t->a);
    t->a = rai_arena_begin(&t->cache, &t->local);
    t->run = (rai_window_layouts){.a = t->a};
    t->live = 0;
    if (nblocks > t->nblocks) {
        rai_block_tape *nb = realloc(t->blocks, (size_t)nblocks * sizeof *nb);
        if (!nb) return rai_fail(RA_ERR_NOMEM, "swin: out of memory");
        t->blocks = nb, t->nblocks = nblocks;
    }
    return RA_OK;
}

static ra_status nomem(void) { return rai_fail(RA_ERR_NOMEM, "swin training: out of memory"); }

/* ---- one block ---------------------------------------------------------- */

/* y (B, H, W, C) from x (kept until the backward), filling the tape bt
 * (from run's arena). */
static ra_status block_forward_train(rai_block_tape *bt, const swin_blk *b, float *y, float *x,
                                     int B, int H, int W,
                                     rai_window_layouts *run) {
    const ra_window_spec g = rai_swin_block_windows(b, H, W);
    const int64_t nw = ra_window_count(&g), n = ra_window_tokens(&g);
    const int64_t M = (int64_t)B * H * W, bw = (int64_t)B * nw;
    if (bw > INT_MAX || bw * n > INT32_MAX || M > INT32_MAX)
        return rai_fail(RA_ERR_SHAPE, "swin block: %d maps of %dx%d are too large", B, H, W);
    const rai_window_layout *wl;
    ra_status st = rai_window_layout_get(run, &g, B, &wl);
    if (st) return st;
    const rai_block_layout l = rai_swin_block_layout(wl, B, H, W);
    float *base = rai_arena_floats(run->a, rai_block_tape_layout(bt, &b->blk, &l, NULL));
    if (!base) return nomem();
    rai_block_tape_layout(bt, &b->blk, &l, base);
    bt->x = x;
    return rai_block_forward_train(&b->blk, bt, y, 1, run->a, NULL);
}

/* The gradient pointers of a block's parameters (prefix pfx) in grad. */
static ra_status blk_grads_bind(rai_block_grads *g, const ra_model *m, float *grad, const char *pfx,
                                int dim) {
    char name[160];
#define G(field, sfx)                                                       \
    (snprintf(name, sizeof name, "%s%s", pfx, sfx), g->field = rai_model_grad(m, grad, name))
    memset(g, 0, sizeof *g);
    G(n1w, "norm1.weight"), G(n1b, "norm1.bias"), G(n2w, "norm2.weight"), G(n2b, "norm2.bias");
    G(fc1w, "mlp.fc1.weight"), G(fc1b, "mlp.fc1.bias");
    G(fc2w, "mlp.fc2.weight"), G(fc2b, "mlp.fc2.bias");
    G(attn.qkv_w, "attn.qkv.weight"), G(attn.qkv_b, "attn.qkv.bias");
    G(attn.proj_w, "attn.proj.weight"), G(attn.proj_b, "attn.proj.bias");
    G(attn.table, "attn.relative_position_bias_table");
    G(attn.rel_k, "attn.relative_keys"), G(attn.rel_v, "attn.relative_values");
    G(attn.logit_scale, "attn.logit_scale"), G(attn.cpb_w1, "attn.cpb_mlp.0.weight");
    G(attn.cpb_b1, "attn.cpb_mlp.0.bias"), G(attn.cpb_w2, "attn.cpb_mlp.2.weight");
    G(attn.q_bias, "attn.q_bias"), G(attn.v_bias, "attn.v_bias");
#undef G
    if (g->attn.logit_scale && g->attn.qkv_b) {   /* torchvision's qkv.bias (SwinV2) */
        g->attn.q_bias = g->attn.qkv_b, g->attn.v_bias = g->attn.qkv_b + 2 * (int64_t)dim;
        g->attn.qkv_b = NULL;
    }
    if (!g->n1w || !g->fc1w || !g->fc2w || !g->attn.qkv_w || !g->attn.proj_w)
        return rai_fail(RA_ERR_INTERNAL, "swin: block %s has no gradient slot", pfx);
    return RA_OK;
}

/* ---- swin_block --------------------------------------------------------- */

/* x (B, H*W, C) or (B, H, W, C), as one_forward takes it. */
static ra_status block_input(const swin_blk *b, const int64_t *xs, int nd, int *B, int *H, int *W) {
    int64_t h = b->res[0], w = b->res[1];
    if (nd == 4) h = xs[1], w = xs[2];
    if (!(nd == 3 || nd == 4) || (nd == 3 && xs[1] != h * w) || xs[nd - 1] != b->dim ||
        xs[0] < 1 || xs[0] > INT_MAX || h < 1 || h > SWIN_MAX_SIZE || w < 1 || w > SWIN_MAX_SIZE)
        return rai_fail(RA_ERR_SHAPE, "swin_block: x must be (B, %d, %d) or (B, H, W, %d)",
                        b->res[0] * b->res[1], b->dim, b->dim);
    int64_t nx;
    if (!rai_mul_i64(&nx, xs[0], h * w) || !rai_mul_i64(&nx, nx, b->dim) || nx > ((int64_t)1 << 40))
        return rai_fail(RA_ERR_SHAPE, "swin_block: input too large");
    *B = (int)xs[0], *H = (int)h, *W = (int)w;
    return RA_OK;
}

ra_status rai_swin_block_forward_train(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                       const float *x, int x_ndim, const int64_t *x_shape,
                                       ra_rng *rng) {
    (void)rng;
    swin_block_model *o = m->impl;
    int B = 0, H = 0, W = 0;
    ra_status st = block_input(&o->b, x_shape, x_ndim, &B, &H, &W);
    if (!st) st = tape_begin(&o->tape, 1);
    if (st) return st;
    swin_tape *t = o->tape;
    const size_t nx = (size_t)B * H * W * o->b.dim;
    float *out = rai_alloc(nx, sizeof *out);
    float *xin = rai_arena_floats(t->a, nx);   /* the caller's x may go: the tape keeps it */
    if (!out || !xin) return rai_free(out), nomem();
    memcpy(xin, x, nx * sizeof *xin);
    st = block_forward_train(&t->blocks[0], &o->b, out, xin, B, H, W, &t->run);
    if (st) {
        rai_free(out);
        return st;
    }
    t->B = B, t->Hin = H, t->Win = W, t->x_ndim = x_ndim, t->live = 1;
    for (int i = 0; i < x_ndim; i++) y_shape[i] = t->x_shape[i] = x_shape[i];
    *y_ndim = x_ndim;
    *y = out;
    return RA_OK;
}

static ra_status tape_check(const swin_tape *t) {
    return t && t->live ? RA_OK
                        : rai_fail(RA_ERR_ARG, "backward without a training forward before it");
}

ra_status rai_swin_block_backward(ra_model *m, float *grad, float *dx, const float *dy) {
    swin_block_model *o = m->impl;
    swin_tape *t = o->tape;
    ra_status st = tape_check(t);
    if (st) return st;
    rai_block_grads g;
    if ((st = blk_grads_bind(&g, m, grad, "", o->b.dim))) return st;
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

/* ---- swin --------------------------------------------------------------- */

ra_status rai_swin_net_forward_train(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                     const float *x, int x_ndim, const int64_t *x_shape,
                                     ra_rng *rng) {
    (void)rng;
    swin_net *n = m->impl;
    int64_t B = 0, H = 0, W = 0;
    ra_status st = rai_swin_net_input(n, x_ndim, x_shape, 1, &B, &H, &W);
    if (!st) st = tape_begin(&n->tape, n->nblocks);
    if (st) return st;
    swin_tape *t = n->tape;
    rai_arena *a = t->a;
    t->B = (int)B, t->Hin = (int)H, t->Win = (int)W;

    /* patch embedding: Conv2d as a GEMM over gathered patches, its norm, ape */
    const int P = n->patch, Cin = n->in_chans, E = n->embed_dim;
    const float *src = x;
    int hc = (int)H, wc = (int)W, pad = 1;
    if (n->scheme == SCHEME_TORCHVISION) {   /* Conv2d(stride P) drops the remainder */
        pad = 0, hc = (int)H / P * P, wc = (int)W / P * P;
        if (hc < 1 || wc < 1)
            return rai_fail(RA_ERR_SHAPE, "swin: a %lldx%lld image is smaller than a %dx%d patch",
                            (long long)H, (long long)W, P, P);
    }
    int gh, gw;
    if ((st = ra_patch_grid(&gh, &gw, hc, wc, P, pad))) return st;
    if (n->ape && (gh != n->grid[0] || gw != n->grid[1]))
        return rai_fail(RA_ERR_SHAPE, "swin: absolute_pos_embed is for a %dx%d patch grid, the "
                        "input gives %dx%d", n->grid[0], n->grid[1], gh, gw);
    t->h0 = gh, t->w0 = gw, t->hc = hc, t->wc = wc;
    const int64_t L = (int64_t)gh * gw, rows = B * L,
                  kc = (int64_t)Cin * n->patch_kernel * n->patch_kernel;
    if (hc != H || wc != W) {
        float *crop = rai_arena_floats(a, (size_t)(B * Cin * hc * wc));
        if (!crop) return nomem();
        for (int64_t r = 0; r < B * Cin * hc; r++)
            memcpy(crop + r * wc, x + ((r / hc) * H + r % hc) * W, (size_t)wc * sizeof *crop);
        src = crop;
    }
    float *tok = rai_arena_floats(a, (size_t)(rows * E));
    t->cols = rai_arena_floats(a, (size_t)(rows * kc));
    if (!tok || !t->cols) return nomem();
    st = rai_patch_embed_forward_k(tok, t->cols, src, n->pe_w, n->pe_b, (int)B, Cin, hc, wc, P,
                                   n->patch_kernel, E, pad);
    if (st) return st;
    if (n->patch_norm) {
        t->pe_in = rai_arena_floats(a, (size_t)(rows * E));
        t->pe_mean = rai_arena_floats(a, (size_t)rows), t->pe_rstd = rai_arena_floats(a, (size_t)rows);
        if (!t->pe_in || !t->pe_mean || !t->pe_rstd) return nomem();
        memcpy(t->pe_in, tok, (size_t)(rows * E) * sizeof *tok);
        ra_layernorm_forward(tok, t->pe_mean, t->pe_rstd, t->pe_in, n->pe_nw, n->pe_nb, rows, E,
                             SWIN_EPS);
    }
    if (n->ape)
        for (int64_t b = 0; b < B; b++) ra_add(tok + b * L * E, tok + b * L * E, n->ape_w, L * E);

    /* stages */
    int h = gh, w = gw, C = E;
    for (int s = 0; s < n->nstages && !st; s++) {
        t->sh[s] = h, t->sw[s] = w;
        for (int j = 0; j < n->depths[s] && !st; j++) {   /* each block's output its own */
            float *next = rai_arena_floats(a, (size_t)(B * h * w * C));
            if (!next) return nomem();
            st = block_forward_train(&t->blocks[n->first[s] + j], &n->blocks[n->first[s] + j],
                                     next, tok, (int)B, h, w, &t->run);
            tok = next;
        }
        t->run.count = 0;   /* the layouts stay in the arena for the backward */
        if (s < n->nstages - 1 && !st) {   /* patch merging */
            const int64_t r2 = B * ((h + 1) / 2) * ((w + 1) / 2);
            float *cat = t->mg_cat[s] = rai_arena_floats(a, (size_t)(r2 * 4 * C));
            float *nrm = t->mg_norm[s] = rai_arena_floats(a, (size_t)(r2 * 4 * C));
            t->mg_mean[s] = rai_arena_floats(a, (size_t)r2);
            t->mg_rstd[s] = rai_arena_floats(a, (size_t)r2);
            float *next = rai_arena_floats(a, (size_t)(r2 * 2 * C));
            if (!cat || !nrm || !t->mg_mean[s] || !t->mg_rstd[s] || !next) return nomem();
            st = ra_patch_merge_forward(cat, tok, (int)B, h, w, C);
            if (st) break;
            if (n->k.v2) {   /* reduction (into nrm), then norm */
                ra_linear_forward(nrm, cat, n->ds_w[s], NULL, r2, 2 * C, 4 * C);
                ra_layernorm_forward(next, t->mg_mean[s], t->mg_rstd[s], nrm, n->ds_nw[s],
                                     n->ds_nb[s], r2, 2 * C, SWIN_EPS);
            } else {
                ra_layernorm_forward(nrm, t->mg_mean[s], t->mg_rstd[s], cat, n->ds_nw[s],
                                     n->ds_nb[s], r2, 4 * C, SWIN_EPS);
                rai_linear_fused(next, nrm, n->ds_w[s], NULL, r2, 2 * C, 4 * C, 0, NULL, NULL);
            }
            tok = next;
            h = (h + 1) / 2, w = (w + 1) / 2, C *= 2;
        }
    }
    if (st) return st;

    /* final norm, mean over tokens, head */
    const int64_t Lf = (int64_t)h * w, rf = B * Lf;
    const int K = n->num_classes > 0 ? n->num_classes : C;
    t->hf = h, t->wf = w, t->cf = C;
    t->fin_in = tok;
    t->fin_out = rai_arena_floats(a, (size_t)(rf * C));
    t->fin_mean = rai_arena_floats(a, (size_t)rf), t->fin_rstd = rai_arena_floats(a, (size_t)rf);
    t->pooled = rai_arena_floats(a, (size_t)(B * C));
    float *out = rai_alloc((size_t)(B * K), sizeof *out);
    if (!t->fin_out || !t->fin_mean || !t->fin_rstd || !t->pooled || !out) {
        rai_free(out);
        return nomem();
    }
    ra_layernorm_forward(t->fin_out, t->fin_mean, t->fin_rstd, tok, n->norm_w, n->norm_b, rf, C,
                         SWIN_EPS);
    ra_mean_tokens_forward(t->pooled, t->fin_out, (int)B, Lf, C);
    if (n->num_classes > 0)
        ra_linear_forward(out, t->pooled, n->head_w, n->head_b, B, n->num_classes, C);
    else
        memcpy(out, t->pooled, (size_t)(B * C) * sizeof *out);
    t->live = 1;
    *y = out;
    *y_ndim = 2;
    y_shape[0] = B, y_shape[1] = K;
    return RA_OK;
}

ra_status rai_swin_net_backward(ra_model *m, float *grad, float *dx, const float *dy) {
    swin_net *n = m->impl;
    swin_tape *t = n->tape;
    ra_status st = tape_check(t);
    if (st) return st;
    rai_arena *a = t->a;
    const size_t mark = rai_arena_mark(a);
    const int B = t->B, C = t->cf;
    const int64_t Lf = (int64_t)t->hf * t->wf, rf = B * Lf;

    /* head, pooling, final norm */
    float *dpool = rai_arena_floats(a, (size_t)B * C);
    float *dfin = rai_arena_floats(a, (size_t)(rf * C));
    float *ds = rai_arena_floats(a, (size_t)(rf * C));   /* the stream's gradient */
    if (!dpool || !dfin || !ds) return rai_arena_reset(a, mark), nomem();
    rai_zero(dfin, (int64_t)(rf * C));
    rai_zero(ds, (int64_t)(rf * C));
    if (n->num_classes > 0) {
        memset(dpool, 0, (size_t)B * C * sizeof *dpool);
        ra_linear_backward(dpool, rai_model_grad(m, grad, "head.weight"),
                           rai_model_grad(m, grad, "head.bias"), dy, t->pooled, n->head_w, B,
                           n->num_classes, C);
    } else {
        memcpy(dpool, dy, (size_t)B * C * sizeof *dpool);
    }
    ra_mean_tokens_backward(dfin, dpool, B, Lf, C);
    ra_layernorm_backward(ds, rai_model_grad(m, grad, "norm.weight"),
                          rai_model_grad(m, grad, "norm.bias"), dfin, t->fin_in, t->fin_mean,
                          t->fin_rstd, n->norm_w, rf, C);

    /* stages, last to first */
    int c = C;
    for (int s = n->nstages - 1; s >= 0 && !st; s--) {
        const int h = t->sh[s], w = t->sw[s];
        char pfx[64];
        if (s < n->nstages - 1) {   /* patch merging's backward: ds is of its output */
            c /= 2;
            const int64_t r2 = (int64_t)B * ((h + 1) / 2) * ((w + 1) / 2), rs = (int64_t)B * h * w;
            float *dnrm = rai_arena_floats(a, (size_t)(r2 * 4 * c));
            float *dcat = rai_arena_floats(a, (size_t)(r2 * 4 * c));
            float *dprev = rai_arena_floats(a, (size_t)(rs * c));
            if (!dnrm || !dcat || !dprev) return rai_arena_reset(a, mark), nomem();
            rai_zero(dnrm, (int64_t)(r2 * 4 * c));
            rai_zero(dcat, (int64_t)(r2 * 4 * c));
            rai_zero(dprev, (int64_t)(rs * c));
            snprintf(pfx, sizeof pfx, "layers.%d.downsample.", s);
            char nw_[96], nb_[96], rw_[96];
            snprintf(rw_, sizeof rw_, "%sreduction.weight", pfx);
            snprintf(nw_, sizeof nw_, "%snorm.weight", pfx);
            snprintf(nb_, sizeof nb_, "%snorm.bias", pfx);
            if (n->k.v2) {   /* norm (its input in mg_norm), then the reduction */
                ra_layernorm_backward(dnrm, rai_model_grad(m, grad, nw_),
                                      rai_model_grad(m, grad, nb_), ds, t->mg_norm[s],
                                      t->mg_mean[s], t->mg_rstd[s], n->ds_nw[s], r2, 2 * c);
                ra_linear_backward(dcat, rai_model_grad(m, grad, rw_), NULL, dnrm, t->mg_cat[s],
                                   n->ds_w[s], r2, 2 * c, 4 * c);
            } else {
                ra_linear_backward(dnrm, rai_model_grad(m, grad, rw_), NULL, ds, t->mg_norm[s],
                                   n->ds_w[s], r2, 2 * c, 4 * c);
                ra_layernorm_backward(dcat, rai_model_grad(m, grad, nw_),
                                      rai_model_grad(m, grad, nb_), dnrm, t->mg_cat[s],
                                      t->mg_mean[s], t->mg_rstd[s], n->ds_nw[s], r2, 4 * c);
            }
            st = ra_patch_merge_backward(dprev, dcat, B, h, w, c);
            ds = dprev;
        }
        for (int j = n->depths[s] - 1; j >= 0 && !st; j--) {
            rai_block_grads g;
            snprintf(pfx, sizeof pfx, "layers.%d.blocks.%d.", s, j);
            st = blk_grads_bind(&g, m, grad, pfx, n->blocks[n->first[s] + j].dim);
            if (!st)
                st = rai_block_backward(&n->blocks[n->first[s] + j].blk,
                                        &t->blocks[n->first[s] + j], ds, &g, a);
        }
    }

    /* absolute position embedding, patch norm, patch embedding */
    const int E = n->embed_dim, P = n->patch, Cin = n->in_chans;
    const int64_t L = (int64_t)t->h0 * t->w0, rows = (int64_t)B * L;
    if (!st && n->ape) {
        float *gape = rai_model_grad(m, grad, "absolute_pos_embed");
        for (int b = 0; b < B; b++)
            for (int64_t i = 0; i < L * E; i++) gape[i] += ds[b * L * E + i];
    }
    float *dpe = ds;
    if (!st && n->patch_norm) {
        if (!(dpe = rai_arena_floats(a, (size_t)(rows * E)))) return rai_arena_reset(a, mark), nomem();
        rai_zero(dpe, (int64_t)(rows * E));
        ra_layernorm_backward(dpe, rai_model_grad(m, grad, "patch_embed.norm.weight"),
                              rai_model_grad(m, grad, "patch_embed.norm.bias"), ds, t->pe_in,
                              t->pe_mean, t->pe_rstd, n->pe_nw, rows, E);
    }
    if (!st) {
        const int cropped = t->hc != t->Hin || t->wc != t->Win;
        float *dimg = dx;
        if (dx && cropped) {
            if (!(dimg = rai_arena_floats(a, (size_t)B * Cin * t->hc * t->wc)))
                return rai_arena_reset(a, mark), nomem();
            memset(dimg, 0, (size_t)B * Cin * t->hc * t->wc * sizeof *dimg);
        }
        /* cols is not needed after this: it is the work buffer */
        st = rai_patch_embed_backward_k(dimg, rai_model_grad(m, grad, "patch_embed.proj.weight"),
                                        rai_model_grad(m, grad, "patch_embed.proj.bias"), t->cols,
                                        dpe, t->cols, n->pe_w, B, Cin, t->hc, t->wc, P,
                                        n->patch_kernel, E, n->scheme != SCHEME_TORCHVISION);
        if (!st && dx && cropped)
            for (int64_t r = 0; r < (int64_t)B * Cin * t->hc; r++)
                for (int i = 0; i < t->wc; i++)
                    dx[((r / t->hc) * t->Hin + r % t->hc) * (int64_t)t->Win + i] +=
                        dimg[r * t->wc + i];
        if (dx) t->live = 0;   /* cols was overwritten: one backward per forward */
    }
    rai_arena_reset(a, mark);
    return st;
}
