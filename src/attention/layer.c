/* layer.c - the attention modules: projections around the core.
 *
 *   vit_attention, window_attention, shaw_attention, and the schemes
 *   alibi_attention, decomposed_attention, rope_attention:
 *       qkv = x Wqkv^T + b  ->  core(q, k, v)  ->  y = out Wproj^T + b
 *   window_attention_3d:
 *       q = x Wq^T + b,  kv = kv_in Wkv^T + b  ->  core  ->  proj
 *   t5_attention:
 *       q, k, v = x Wq^T, x Wk^T, x Wv^T (width E)  ->  core  ->  y = out Wo^T
 * The core reads q, k and v in place from the projection's output through
 * row strides: no permute, no copy. The relative position schemes hook in
 * through src/attention/schemes.c: position terms of the core's description per
 * call (ra_pos_*), and RoPE's rotation between projection and core.
 * swinv2_window_attention (src/attention/cpb.c) normalises q and k after the
 * projection and gives the core its continuous position bias table. */
#include "attention/internal.h"
#include "attention/layer.h"
#include "base/arena.h"
#include "nn/nn.h"
#include "nn/precision.h"
#include "attention/cpb.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Far above any real model; keeps every size product inside int64 and the
 * BLAS int arguments. */
#define RA_MAX_DIM (1 << 16)

ra_attn_config ra_attn_config_default(ra_arch arch) {
    ra_attn_config c = {.arch = arch, .qkv_bias = arch != RA_ARCH_VIT_ATTENTION &&
                                                  arch != RA_ARCH_T5_ATTENTION};
    if (arch == RA_ARCH_SHAW_ATTENTION) c.has_rel_k = c.has_rel_v = 1;
    if (arch == RA_ARCH_T5_ATTENTION) c.num_buckets = 32, c.max_distance = 128;
    if (arch == RA_ARCH_ROPE_ATTENTION) c.rope_theta = 100.0f, c.num_prefix = 1;
    return c;
}

/* The attention layers (the others are networks built from them). */
static int is_layer_arch(ra_arch a) {
    return (a >= RA_ARCH_VIT_ATTENTION && a <= RA_ARCH_SHAW_ATTENTION) ||
           a == RA_ARCH_SWINV2_WINDOW_ATTENTION || a == RA_ARCH_T5_ATTENTION || a == RA_ARCH_ALIBI_ATTENTION ||
           a == RA_ARCH_DECOMPOSED_ATTENTION || a == RA_ARCH_ROPE_ATTENTION;
}

static int is_window_arch(ra_arch a) {
    return a == RA_ARCH_WINDOW_ATTENTION || a == RA_ARCH_WINDOW_ATTENTION_3D ||
           a == RA_ARCH_SWINV2_WINDOW_ATTENTION;
}

/* The width of q, k and v: inner_dim for t5 (0: dim), else dim. */
static int inner_width(const ra_attn_config *c) {
    return c->arch == RA_ARCH_T5_ATTENTION && c->inner_dim ? c->inner_dim : c->dim;
}

static ra_status check_config(const ra_attn_config *c) {
    if (!is_layer_arch(c->arch))
        return rai_fail(RA_ERR_ARG, "arch %d is not an attention layer", c->arch);
    const int E = inner_width(c);
    if (c->dim < 1 || c->dim > RA_MAX_DIM || E < 1 || E > RA_MAX_DIM || c->num_heads < 1 ||
        c->num_heads > E)
        return rai_fail(RA_ERR_ARG, "dim %d and num_heads %d: need 1 <= num_heads <= dim <= %d",
                        E, c->num_heads, RA_MAX_DIM);
    if (E % c->num_heads)
        return rai_fail(RA_ERR_ARG, "dim %d is not divisible by num_heads %d",
                        E, c->num_heads);
    if (c->has_qk_scale && !isfinite(c->qk_scale))
        return rai_fail(RA_ERR_ARG, "qk_scale is not finite");
    if (c->arch == RA_ARCH_SHAW_ATTENTION && (c->max_rel < 0 || c->max_rel > (1 << 20)))
        return rai_fail(RA_ERR_ARG, "max_relative_position %d must be in 0..%d", c->max_rel,
                        1 << 20);
    return RA_OK;
}

static ra_status check_params(const ra_attn_config *c, const ra_attn_params *p) {
    const char *missing = NULL;
    if (c->arch == RA_ARCH_T5_ATTENTION) missing = NULL;   /* rai_scheme_create checks */
    else if (!p->proj_w || !p->proj_b) missing = "proj";
    else if (c->arch == RA_ARCH_WINDOW_ATTENTION_3D) {
        if (!p->q_w || !p->kv_w || (c->qkv_bias && (!p->q_b || !p->kv_b))) missing = "q / kv";
    } else if (c->arch == RA_ARCH_SWINV2_WINDOW_ATTENTION) {
        if (!p->qkv_w) missing = "qkv";
        else if (c->qkv_bias && (!p->q_bias || !p->v_bias)) missing = "q_bias / v_bias";
        else if (!p->logit_scale) missing = "logit_scale";
        else if (!p->cpb_w1 || !p->cpb_b1 || !p->cpb_w2) missing = "cpb_mlp";
        return missing ? rai_fail(RA_ERR_ARG, "attention layer: parameter %s missing", missing)
                       : RA_OK;
    } else if (!p->qkv_w || (c->qkv_bias && !p->qkv_b)) missing = "qkv";
    if (!missing && is_window_arch(c->arch) && !p->table) missing = "relative_position_bias_table";
    return missing ? rai_fail(RA_ERR_ARG, "attention layer: parameter %s missing", missing) : RA_OK;
}

ra_status ra_attn_layer_create(ra_attn_layer **out, const ra_attn_config *cfg,
                               const ra_attn_params *params) {
    if (!out || !cfg || !params) return rai_fail(RA_ERR_ARG, "attention layer: NULL argument");
    *out = NULL;
    ra_status st = check_config(cfg);
    if (!st) st = check_params(cfg, params);
    if (st) return st;

    ra_attn_layer *l = calloc(1, sizeof *l);
    if (l && !(l->cache = calloc(1, sizeof *l->cache))) free(l), l = NULL;
    if (!l) return rai_fail(RA_ERR_NOMEM, "attention layer: out of memory");
    l->cfg = *cfg;
    l->p = *params;
    l->inner = inner_width(cfg);
    l->hd = l->inner / cfg->num_heads;
    l->scale = (cfg->has_qk_scale && cfg->qk_scale != 0.0f) ? cfg->qk_scale
                                                           : 1.0f / sqrtf((float)l->hd);
    if (cfg->arch == RA_ARCH_SHAW_ATTENTION) {
        l->cfg.has_rel_k = params->rel_k != NULL;
        l->cfg.has_rel_v = params->rel_v != NULL;
    }
    if ((st = rai_scheme_create(l))) {
        ra_attn_layer_free(l);
        return st;
    }
    if (cfg->arch == RA_ARCH_SHAW_ATTENTION && cfg->shaw_window[0] > 0 &&
        cfg->shaw_window[1] > 0) {   /* 2-D Shaw over a window's tokens */
        const int wh = cfg->shaw_window[0], ww = cfg->shaw_window[1], k = cfg->max_rel;
        const int64_t n = (int64_t)wh * ww;
        if (n > 4096 || k > 1023) {
            ra_attn_layer_free(l);
            return rai_fail(RA_ERR_ARG, "shaw window %dx%d or clip %d too large", wh, ww, k);
        }
        if (!(l->rel2 = rai_alloc((size_t)(n * n), sizeof *l->rel2))) {
            ra_attn_layer_free(l);
            return rai_fail(RA_ERR_NOMEM, "attention layer: out of memory");
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                int dy = (int)(j / ww - i / ww), dx = (int)(j % ww - i % ww);
                dy = dy < -k ? -k : dy > k ? k : dy;
                dx = dx < -k ? -k : dx > k ? k : dx;
                l->rel2[i * n + j] = (dy + k) * (2 * k + 1) + dx + k;
            }
        l->n1 = l->n2 = (int)n;
    }
    if (is_window_arch(cfg->arch)) {
        const int wh = cfg->window[0], ww = cfg->window[1];
        const int d1 = cfg->arch == RA_ARCH_WINDOW_ATTENTION_3D ? cfg->frames_q : 1;
        const int d2 = cfg->arch == RA_ARCH_WINDOW_ATTENTION_3D ? cfg->frames_kv : 1;
        /* validate and size first, then fill */
        const int is2d = cfg->arch != RA_ARCH_WINDOW_ATTENTION_3D;
        st = d1 == 1 && d2 == 1 && is2d
                 ? ra_relpos_index_2d(NULL, wh, ww, &l->table_rows)
                 : ra_relpos_index_3d(NULL, d1, d2, wh, ww, &l->table_rows);
        if (st) { ra_attn_layer_free(l); return st; }
        int64_t n1 = (int64_t)d1 * wh * ww, n2 = (int64_t)d2 * wh * ww;
        l->idx = rai_alloc((size_t)(n1 * n2), sizeof *l->idx);
        if (!l->idx) {
            ra_attn_layer_free(l);
            return rai_fail(RA_ERR_NOMEM, "attention layer: index too large");
        }
        st = is2d ? ra_relpos_index_2d(l->idx, wh, ww, NULL)
                  : ra_relpos_index_3d(l->idx, d1, d2, wh, ww, NULL);
        if (!st && cfg->arch == RA_ARCH_SWINV2_WINDOW_ATTENTION) {
            if (!(l->coords = rai_alloc((size_t)l->table_rows * 2, sizeof *l->coords)))
                st = rai_fail(RA_ERR_NOMEM, "attention layer: out of memory");
            else
                st = rai_swinv2_coords(l->coords, wh, ww, cfg->pretrained_window);
        }
        if (st) { ra_attn_layer_free(l); return st; }
        l->n1 = (int)n1;
        l->n2 = (int)n2;
    }
    *out = l;
    return RA_OK;
}

void ra_attn_layer_free(ra_attn_layer *l) {
    if (!l) return;
    rai_free(l->idx);
    rai_free(l->rel2);
    rai_free(l->coords);
    rai_scheme_free(l);
    rai_arena_cache_free(l->cache);
    free(l->cache);
    free(l);
}

const ra_attn_config *ra_attn_layer_config(const ra_attn_layer *l) { return l ? &l->cfg : NULL; }

const int32_t *ra_attn_layer_index(const ra_attn_layer *l, int64_t *n1, int64_t *n2,
                                   int64_t *table_rows) {
    if (!l || !l->idx) return NULL;
    if (n1) *n1 = l->n1;
    if (n2) *n2 = l->n2;
    if (table_rows) *table_rows = l->table_rows;
    return l->idx;
}

/* The tokens of a call on a grid (NULL: the layer's own). */
static ra_status check_tokens(const ra_attn_layer *l, int n1, int n2, const int grid[2]) {
    if (!l) return rai_fail(RA_ERR_ARG, "attention layer: NULL argument");
    if (n1 < 1 || n2 < 1) return rai_fail(RA_ERR_SHAPE, "token counts %d, %d must be >= 1", n1, n2);
    ra_status st = rai_scheme_check_tokens(l, n1, n2, grid);
    if (st) return st;
    if (l->n1 && (n1 != l->n1 || n2 != l->n2)) {
        if (l->cfg.arch != RA_ARCH_WINDOW_ATTENTION_3D)
            return rai_fail(RA_ERR_SHAPE, "window %dx%d needs N = %d tokens, got %d",
                            l->cfg.window[0], l->cfg.window[1], l->n1, n1);
        return rai_fail(RA_ERR_SHAPE, "frames %d/%d with window %dx%d need N1 = %d query and "
                        "N2 = %d key/value tokens, got %d and %d", l->cfg.frames_q,
                        l->cfg.frames_kv, l->cfg.window[0], l->cfg.window[1], l->n1, l->n2,
                        n1, n2);
    }
    if (!l->n1 && n1 != n2)
        return rai_fail(RA_ERR_SHAPE, "%s is self-attention: N1 %d != N2 %d",
                        ra_arch_name(l->cfg.arch), n1, n2);
    if (l->cfg.arch == RA_ARCH_SHAW_ATTENTION && !l->rel2 && (l->p.rel_k || l->p.rel_v) &&
        n1 > RA_MAX_SHAW_TOKENS)
        return rai_fail(RA_ERR_SHAPE, "too large: shaw_attention takes at most %d tokens (its "
                        "(N, N) clip index is built per call), got %d", RA_MAX_SHAW_TOKENS, n1);
    return RA_OK;
}

ra_status ra_attn_layer_check_tokens(const ra_attn_layer *l, int n1, int n2) {
    return check_tokens(l, n1, n2, NULL);
}

/* ---- forward and backward share one pass -------------------------------
 * pass_begin validates, projects and runs the core forward into obuf (the
 * attention output before proj); the forward then applies proj, the
 * backward goes back through proj, the core and the projections. The
 * position terms of a call (rai_pos_call) are built once by the caller of
 * the parts, or by the pass itself (pc NULL). */
typedef struct {
    ra_attn_desc d;
    rai_pos_call own;         /* the position terms, when the caller gave none */
    const rai_pos_call *pc;
    float *scratch;          /* one block for everything below */
    float *qbuf, *kvbuf;     /* projections: (rows1, 3E), or (rows1, C) + (rows2, 2C) */
    float *obuf;             /* (rows1, E) */
    float *dqbuf, *dkvbuf, *dobuf;   /* backward: gradients of the three above */
    float *yq, *norms, *tab;         /* swinv2, kept with the above: the normalised q
                                        (rows1, C), |q| and |k| (rows1, 2 nH), the
                                        CPB table (T, nH) */
    float *dtab;                     /* swinv2 backward: the table's gradient */
    const float *tab_given;          /* swinv2: the table, computed once by the caller,
                                        who then takes the table's gradient (g->table)
                                        back through the CPB; NULL: done here */
    float *drel;             /* backward: the decomposed table's gradient (R, hd) */
    void *work;
    size_t wbytes;
    const float *q, *k, *v;
    int ldq, ldkv;
    int64_t rows1, rows2;
    size_t nq, nkv, no, ndrel, nfloats;   /* floats of the scratch parts, of all of it */
    size_t nx, ndx;                /* swinv2: floats of yq..tab, of dtab */
    int own_scratch, own_pc;
    rai_arena_cache *cache;   /* own_scratch: the scratch is carved from arena, */
    rai_arena *arena, local;  /* the layer's cached one or local             */
} pass;

static void pass_end(pass *ps) {
    if (ps->own_scratch) rai_arena_end(ps->cache, ps->arena);
    if (ps->own_pc) rai_pos_end(&ps->own);
    ps->own_scratch = ps->own_pc = 0;
}

static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Validate, describe the core and size the scratch (ps->nfloats). */
static ra_status pass_prepare(pass *ps, const ra_attn_layer *l, const float *x,
                              const float *kv, int b_, int n1, int n2, const float *mask,
                              int nw, int w0, int backward, const int grid[2],
                              const rai_pos_call *pc) {
    /* w0: -1 for a whole batch (B_ a multiple of nW), else the first window
     * of a part of one */
    memset(ps, 0, sizeof *ps);
    if (!l || !x) return rai_fail(RA_ERR_ARG, "attention layer: NULL argument");
    if (kv && l->cfg.arch != RA_ARCH_WINDOW_ATTENTION_3D)
        return rai_fail(RA_ERR_ARG, "%s takes no separate key/value input",
                        ra_arch_name(l->cfg.arch));
    if (b_ < 1) return rai_fail(RA_ERR_SHAPE, "batch B_ = %d must be >= 1", b_);
    if (mask && w0 < 0 && (nw < 1 || b_ % nw != 0))
        return rai_fail(RA_ERR_SHAPE, "attention: mask has %d windows, which does not "
                        "divide B_=%d", nw, b_);
    ra_status st = check_tokens(l, n1, n2, grid);
    if (st) return st;
    const int C = l->cfg.dim, E = l->inner, is3d = l->cfg.arch == RA_ARCH_WINDOW_ATTENTION_3D;
    ps->rows1 = (int64_t)b_ * n1, ps->rows2 = (int64_t)b_ * n2;
    int64_t big;
    if (!rai_mul_i64(&big, ps->rows1 > ps->rows2 ? ps->rows1 : ps->rows2,
                     3 * (int64_t)(C > E ? C : E)) ||
        big > ((int64_t)1 << 40))
        return rai_fail(RA_ERR_SHAPE, "input of %d x %d tokens is too large", b_, n1);
    if (!pc) {
        if ((st = rai_pos_begin(&ps->own, l, n1, n2, grid, mask, nw))) return st;
        ps->own_pc = 1;
        pc = &ps->own;
    }
    ps->pc = pc;
    ps->tab_given = pc->cpb;

    ra_attn_desc *d = &ps->d;
    *d = (ra_attn_desc){.b_ = b_, .nh = l->cfg.num_heads, .n1 = n1, .n2 = n2, .hd = l->hd,
                        .scale = l->scale, .w0 = w0 > 0 ? w0 : 0};
    if (l->idx) d->table = l->p.table, d->idx = l->idx, d->table_rows = l->table_rows;
    if (l->coords)   /* cosine attention; the table is computed in pass_run (until
                        then the check sees that there is one) */
        d->scale = 1.0f, d->table = l->coords;
    rai_pos_desc(pc, mask, nw, d);
    if (!backward) d->precision = rai_core_precision_get();
    if ((st = ra_attention_check(d))) return pass_end(ps), st;

    const int nt = ra_threads_get();
    ps->wbytes = ra_attention_workspace_size(d, nt);
    if (backward && ra_attention_backward_workspace_size(d, nt) > ps->wbytes)
        ps->wbytes = ra_attention_backward_workspace_size(d, nt);
    ps->nq = up16((size_t)ps->rows1 * (is3d ? C : 3 * E));
    ps->nkv = is3d ? up16((size_t)ps->rows2 * 2 * C) : 0;
    ps->no = up16((size_t)ps->rows1 * E);
    ps->ndrel = backward ? up16(rai_pos_drel_floats(pc, l)) : 0;
    if (l->coords) {
        const size_t tn = (size_t)l->table_rows * l->cfg.num_heads;
        const size_t hid = 2 * (size_t)l->table_rows * RA_CPB_HIDDEN * sizeof(float);
        ps->nx = up16((size_t)ps->rows1 * C) + up16((size_t)ps->rows1 * 2 * d->nh) + up16(tn);
        ps->ndx = up16(tn);
        if (ps->wbytes < hid) ps->wbytes = hid;   /* the CPB's scratch, outside the core */
    }
    const size_t nact = ps->nq + ps->nkv + ps->no;
    ps->nfloats = nact + ps->nx + (backward ? nact + ps->ndx + ps->ndrel : 0) +
                  up16((ps->wbytes + 3) / 4);
    return RA_OK;
}

/* q, k, v inside the projections' buffers (or their gradients inside the
 * gradients' buffers, laid out alike); their row stride is ps->ldq / ldkv:
 *   fused qkv (rows1, 3E): q, k, v at columns 0, E, 2E
 *   t5: three (rows1, E) blocks one after the other
 *   3-D: q (rows1, C), kv (rows2, 2C) with k, v at columns 0, C */
static void pass_views(pass *ps, const ra_attn_layer *l, float *qb, float *kvb, float **q,
                       float **k, float **v) {
    const int C = l->cfg.dim, E = l->inner;
    if (l->cfg.arch == RA_ARCH_WINDOW_ATTENTION_3D) {
        *q = qb, *k = kvb, *v = kvb + C;
        ps->ldq = C, ps->ldkv = 2 * C;
    } else if (l->cfg.arch == RA_ARCH_T5_ATTENTION) {
        const size_t blk = (size_t)ps->rows1 * E;
        *q = qb, *k = qb + blk, *v = qb + 2 * blk;
        ps->ldq = ps->ldkv = E;
    } else {
        *q = qb, *k = qb + E, *v = qb + 2 * E;
        ps->ldq = ps->ldkv = 3 * E;
    }
}

/* Point the parts of the scratch: what the forward keeps from save (qkv or
 * q, kv, out, the swinv2 extras), the backward's gradients from back (NULL:
 * forward only), the work area after the last; then q, k, v (pass_views). */
static void pass_layout(pass *ps, const ra_attn_layer *l, float *save, float *back) {
    const int C = l->cfg.dim;
    ps->qbuf = save, ps->kvbuf = ps->qbuf + ps->nq, ps->obuf = ps->kvbuf + ps->nkv;
    float *next = ps->obuf + ps->no;
    if (l->coords) {
        ps->yq = next;
        ps->norms = ps->yq + up16((size_t)ps->rows1 * C);
        ps->tab = ps->norms + up16((size_t)ps->rows1 * 2 * l->cfg.num_heads);
        ps->d.table = ps->tab;
        next += ps->nx;
    }
    if (back) {   /* backward_run zeroes what accumulates */
        ps->dqbuf = back, ps->dkvbuf = ps->dqbuf + ps->nq, ps->dobuf = ps->dkvbuf + ps->nkv;
        ps->dtab = ps->dobuf + ps->no;
        ps->drel = ps->ndrel ? ps->dtab + ps->ndx : NULL;
        next = ps->dtab + ps->ndx + ps->ndrel;
    }
    ps->work = next;
    float *q, *k, *v;
    pass_views(ps, l, ps->qbuf, ps->kvbuf, &q, &k, &v);
    ps->q = q, ps->k = k, ps->v = v;
}

/* Lay the scratch out (scratch: ps->nfloats floats), then project and run
 * the core forward. */
static ra_status pass_run(pass *ps, const ra_attn_layer *l, float *attn, const float *x,
                          const float *kv, int backward) {
    const int C = l->cfg.dim, E = l->inner;
    pass_layout(ps, l, ps->scratch,
                backward ? ps->scratch + ps->nq + ps->nkv + ps->no + ps->nx : NULL);
    float *q = (float *)ps->q, *k = (float *)ps->k, *v = (float *)ps->v;   /* in qbuf, kvbuf */
    switch (l->cfg.arch) {
    case RA_ARCH_WINDOW_ATTENTION_3D:
        ra_linear_forward(q, x, l->p.q_w, l->p.q_b, ps->rows1, C, C);
        ra_linear_forward(k, kv ? kv : x, l->p.kv_w, l->p.kv_b, ps->rows2, 2 * C, C);
        break;
    case RA_ARCH_T5_ATTENTION:
        ra_linear_forward(q, x, l->p.q_w, NULL, ps->rows1, E, C);
        ra_linear_forward(k, x, l->p.k_w, NULL, ps->rows1, E, C);
        ra_linear_forward(v, x, l->p.v_w, NULL, ps->rows1, E, C);
        break;
    default:
        ra_linear_forward(q, x, l->p.qkv_w, l->p.qkv_b, ps->rows1, 3 * E, C);
    }
    if (l->coords) {   /* swinv2: biases, cosine normalisation, the CPB table */
        rai_swinv2_qk_forward(ps->qbuf, ps->rows1, C, l->cfg.num_heads, l->p.logit_scale,
                              l->p.q_bias, l->p.v_bias, ps->yq, ps->norms);
        if (ps->tab_given)
            memcpy(ps->tab, ps->tab_given,
                   (size_t)l->table_rows * l->cfg.num_heads * sizeof *ps->tab);
        else
            rai_cpb_forward(ps->tab, ps->work, l->coords, l->table_rows, l->cfg.num_heads,
                            l->p.cpb_w1, l->p.cpb_b1, l->p.cpb_w2);
    }
    rai_rope_rotate(l, q, k, ps->ldq, ps->d.b_, ps->d.n1, 0);
    return ra_attention_forward(ps->obuf, E, attn, ps->q, ps->ldq, ps->k, ps->ldkv, ps->v,
                                ps->ldkv, &ps->d, ps->work, ps->wbytes);
}

/* n floats of the pass's own scratch, from the layer's cached arena: after
 * the first call of a size, the scratch (tens of MB for a batch of
 * windows) is neither allocated nor faulted in again (a fresh mapping per
 * call cost the small window layers a large share of their time).
 * pass_end gives it back. */
static float *pass_scratch(pass *ps, const ra_attn_layer *l, size_t n) {
    ps->cache = l->cache;
    ps->arena = rai_arena_begin(ps->cache, &ps->local);
    ps->own_scratch = 1;
    return rai_arena_floats(ps->arena, n);
}

/* scratch: ps->nfloats floats of the caller's (a tape's part), or NULL for
 * the pass's own. */
static ra_status pass_begin(pass *ps, const ra_attn_layer *l, float *attn, const float *x,
                            const float *kv, int b_, int n1, int n2, const float *mask,
                            int nw, int w0, int backward, const int grid[2],
                            const rai_pos_call *pc, float *scratch) {
    ra_status st = pass_prepare(ps, l, x, kv, b_, n1, n2, mask, nw, w0, backward, grid, pc);
    if (st) return st;
    if (!(ps->scratch = scratch ? scratch : pass_scratch(ps, l, ps->nfloats)))
        return pass_end(ps), rai_fail(RA_ERR_NOMEM, "attention layer: out of memory");
    if ((st = pass_run(ps, l, attn, x, kv, backward))) pass_end(ps);
    return st;
}

/* One call of a layer over B_ windows, shared out in parts (rai_run_parts). */
typedef struct {
    const ra_attn_layer *l;
    float *y, *attn, *dx, *dkv;
    const float *x, *kv, *dy, *mask;
    int b_, n1, n2, nw, parts;
    const int *grid;
    rai_pos_call pc;                  /* the call's position terms, for every part */
    ra_attn_grads g[RA_MAX_PARTS];   /* backward: each part's gradients */
    const struct ra_attn_tape *tape; /* training: the parts' saved forwards */
} layer_call;

/* The tape of a training forward: the call's arguments and each part's
 * forward scratch, [q or qkv][kv][out][swinv2's], which its backward reads
 * instead of recomputing (pass_layout). */
struct ra_attn_tape {
    const ra_attn_layer *l;
    const float *x, *kv, *mask;
    int b_, n1, n2, nw, parts;
    size_t at[RA_MAX_PARTS + 1];     /* part s: floats [at[s], at[s + 1]) of saved */
    float *saved;
    size_t cap;                      /* floats of saved */
    int ready;                       /* a forward completed into it */
};

/* swinv2: *out = [table (T, nH) | its gradient (T, nH), zeroed | the CPB's
 * scratch (2 T 512)], the table computed from the parameters. */
static ra_status cpb_begin(const ra_attn_layer *l, float **out) {
    const size_t tn = up16((size_t)l->table_rows * l->cfg.num_heads);
    float *b = rai_alloc(2 * tn + 2 * (size_t)l->table_rows * RA_CPB_HIDDEN, sizeof *b);
    if (!b) return rai_fail(RA_ERR_NOMEM, "attention layer: out of memory");
    rai_cpb_forward(b, b + 2 * tn, l->coords, l->table_rows, l->cfg.num_heads, l->p.cpb_w1,
                    l->p.cpb_b1, l->p.cpb_w2);
    memset(b + tn, 0, tn * sizeof *b);
    *out = b;
    return RA_OK;
}

/* Validate the whole call once and build its position terms (swinv2: its
 * CPB table, once for all parts). */
static ra_status call_begin(layer_call *c, int backward) {
    pass ps;
    ra_status st = pass_prepare(&ps, c->l, c->x, c->kv, c->b_, c->n1, c->n2, c->mask, c->nw,
                                -1, backward, c->grid, NULL);
    if (st) return st;
    c->pc = ps.own;   /* the terms move to the call */
    ps.own_pc = 0;
    pass_end(&ps);
    if (c->l->coords && (st = cpb_begin(c->l, &c->pc.cpb))) return rai_pos_end(&c->pc), st;
    int S = ra_threads_get();
    if (S > c->b_) S = c->b_;
    c->parts = S < 1 ? 1 : S > RA_MAX_PARTS ? RA_MAX_PARTS : S;
    return RA_OK;
}

static void part_windows(const layer_call *c, int s, int *b0, int *nb) {
    *b0 = (int)((int64_t)c->b_ * s / c->parts);
    *nb = (int)((int64_t)c->b_ * (s + 1) / c->parts) - *b0;
}

/* Windows [b0, b0 + nb) of a batch: x, kv, y, attn at their rows. */
static ra_status forward_one(void *ctx, int s) {
    const layer_call *c = ctx;
    const ra_attn_layer *l = c->l;
    int b0, nb;
    part_windows(c, s, &b0, &nb);
    const int C = l->cfg.dim, n1 = c->n1, n2 = c->n2;
    float *attn = c->attn ? c->attn + (size_t)b0 * l->cfg.num_heads * n1 * n2 : NULL;
    pass ps;
    ra_status st = pass_begin(&ps, l, attn, c->x + (size_t)b0 * n1 * C,
                              c->kv ? c->kv + (size_t)b0 * n2 * C : NULL, nb, n1, n2, c->mask,
                              c->nw, b0, 0, c->grid, &c->pc,
                              c->tape ? c->tape->saved + c->tape->at[s] : NULL);
    if (st) return st;
    ra_linear_forward(c->y + (size_t)b0 * n1 * C, ps.obuf, l->p.proj_w, l->p.proj_b, ps.rows1,
                      C, l->inner);
    pass_end(&ps);
    return RA_OK;
}

/* With several threads and windows, each thread takes a part of the
 * windows through the whole layer (projection, core, output projection)
 * with single-threaded kernels: no barrier between the three, each part's
 * rows stay in its core's cache, and every number is what one pass gives
 * (relattn's own products compute a row the same way wherever it sits;
 * OpenBLAS's may differ in the last bits). */
ra_status ra_attn_layer_forward_grid(const ra_attn_layer *l, float *y, float *attn,
                                   const float *x, const float *kv, int b_, int n1, int n2,
                                   const float *mask, int nw, const int grid[2]) {
    if (!y) return rai_fail(RA_ERR_ARG, "attention forward: NULL output");
    layer_call c = {.l = l, .y = y, .attn = attn, .x = x, .kv = kv, .mask = mask, .b_ = b_,
                    .n1 = n1, .n2 = n2, .nw = nw, .grid = grid};
    ra_status st = call_begin(&c, 0);
    if (!st) st = rai_run_parts(c.parts, forward_one, &c);
    rai_pos_end(&c.pc);
    return st;
}

ra_status ra_attn_layer_forward(const ra_attn_layer *l, float *y, float *attn,
                                const float *x, const float *kv, int b_, int n1, int n2,
                                const float *mask, int nw) {
    return ra_attn_layer_forward_grid(l, y, attn, x, kv, b_, n1, n2, mask, nw, NULL);
}

size_t rai_attn_layer_forward_ws_size(const ra_attn_layer *l, int b_, int n1, int n2) {
    static const float one;
    pass ps;
    if (pass_prepare(&ps, l, &one, NULL, b_, n1, n2, NULL, 0, -1, 0, NULL, NULL)) return 0;
    pass_end(&ps);
    return ps.nfloats * sizeof(float);
}

ra_status rai_attn_layer_forward_ws(const ra_attn_layer *l, float *y, float *attn,
                                    const float *x, const float *kv, int b_, int n1, int n2,
                                    const float *mask, int nw, void *work, size_t ws,
                                    float *res, const int32_t *map) {
    if (!y || !work) return rai_fail(RA_ERR_ARG, "attention forward: NULL output or workspace");
    pass ps;
    ra_status st = pass_prepare(&ps, l, x, kv, b_, n1, n2, mask, nw, -1, 0, NULL, NULL);
    if (st) return st;
    if (ws / sizeof(float) < ps.nfloats) {
        pass_end(&ps);
        return rai_fail(RA_ERR_ARG, "attention forward: workspace of %zu bytes, %zu needed", ws,
                        ps.nfloats * sizeof(float));
    }
    ps.scratch = work;
    if ((st = pass_run(&ps, l, attn, x, kv, 0))) return pass_end(&ps), st;
    rai_linear_fused(y, ps.obuf, l->p.proj_w, l->p.proj_b, ps.rows1, l->cfg.dim, l->inner, 0,
                     res, map);
    pass_end(&ps);
    return RA_OK;
}

/* ---- a block's attention branch in chunks of windows ------------------- */

/* Tokens of a chunk, about: its projections, core and output stay in the
 * thread's L2 (Swin-T's first stage: 294 x 96 floats in, 3 x 96 out of
 * the projection, 96 of the core: 0.6 MB), and its rows fill six tasks
 * of the int8 product (48 rows). */
#define CHUNK_TOKENS 288
#define CHUNKS_PER_THREAD 4   /* at least, to share the windows out evenly */

static _Atomic int chunk_tokens = CHUNK_TOKENS;

int rai_attn_chunk_tokens_set(int tokens) { return atomic_exchange(&chunk_tokens, tokens); }

int rai_attn_layer_chunk_windows(const ra_attn_layer *l, int b_, int n, int threads) {
    const int tokens = chunk_tokens;
    if (!l || l->cfg.arch == RA_ARCH_WINDOW_ATTENTION_3D || b_ < 1 || n < 1 || tokens < 1) return 0;
    int g = (tokens + n / 2) / n;
    const int most = b_ / (CHUNKS_PER_THREAD * (threads > 1 ? threads : 1));
    if (g < 1) g = 1;
    return g < most ? g : most;
}

typedef struct {
    layer_call c;
    float *res;
    const int32_t *map;
    const rai_ln *ln;
    int g, post;
    const rai_packed *packed;   /* the caller's packed weights, for every thread */
} chunk_call;

/* Chunk s: windows [s g, s g + g) from the LayerNorm of their rows to
 * their outputs added into res (post: from their rows to the LayerNorm
 * of their outputs), on the calling thread. */
static ra_status chunk_one(void *ctx, int s) {
    const chunk_call *k = ctx;
    const layer_call *c = &k->c;
    const ra_attn_layer *l = c->l;
    const int C = l->cfg.dim, n = c->n1, b0 = s * k->g;
    const int nb = c->b_ - b0 < k->g ? c->b_ - b0 : k->g;
    const int64_t rows = (int64_t)nb * n, r0 = (int64_t)b0 * n;
    /* rows through the map, or the chunk's own rows */
    const float *x = k->map ? c->x : c->x + r0 * C;
    float *res = k->map ? k->res : k->res + r0 * C;
    const int32_t *map = k->map ? k->map + r0 : NULL;
    const rai_packed *was = rai_packed_set(k->packed);
    pass ps;
    ra_status st = pass_prepare(&ps, l, x, NULL, nb, n, n, c->mask, c->nw, b0, 0, NULL, &c->pc);
    float *scratch = st ? NULL : pass_scratch(&ps, l, ps.nfloats + up16((size_t)rows * C));
    if (!st && !scratch) st = rai_fail(RA_ERR_NOMEM, "attention layer: out of memory");
    if (!st) {
        float *win = scratch + ps.nfloats;
        ps.scratch = scratch;
        if (k->post) rai_rows_gather(win, x, map, rows, C);
        else rai_layernorm_rows(win, x, map, rows, C, k->ln->gamma, k->ln->beta, k->ln->eps);
        st = pass_run(&ps, l, NULL, win, NULL, 0);
        if (!st && k->post) {   /* proj into win, its LayerNorm, then the add */
            rai_linear_fused(win, ps.obuf, l->p.proj_w, l->p.proj_b, rows, C, l->inner, 0, NULL,
                             NULL);
            rai_layernorm_rows(win, win, NULL, rows, C, k->ln->gamma, k->ln->beta, k->ln->eps);
            rai_rows_scatter_add(res, win, map, rows, C);
        } else if (!st) {   /* win is proj's scratch */
            rai_linear_fused(win, ps.obuf, l->p.proj_w, l->p.proj_b, rows, C, l->inner, 0, res,
                             map);
        }
    }
    pass_end(&ps);
    rai_packed_set(was);
    return st;
}

ra_status rai_attn_layer_forward_chunks(const ra_attn_layer *l, float *res, const float *x,
                                        const int32_t *map, const rai_ln *ln, int post, int b_,
                                        int n, const float *mask, int nw, int g, int threads) {
    if (!res || !x || !ln || g < 1) return rai_fail(RA_ERR_ARG, "attention chunks: bad arguments");
    chunk_call k = {.c = {.l = l, .x = x, .mask = mask, .b_ = b_, .n1 = n, .n2 = n, .nw = nw},
                    .res = res, .map = map, .ln = ln, .g = g, .post = post,
                    .packed = rai_packed_get()};
    ra_status st = call_begin(&k.c, 0);
    if (st) return st;
    st = rai_run_tasks((b_ + g - 1) / g, threads, chunk_one, &k);
    rai_pos_end(&k.c.pc);
    return st;
}

/* The backward from pass_begin / pass_run on: proj, core, projections. */
/* dx_set: dx is overwritten, not accumulated (dkv always accumulates). The
 * gradient of the core's output is overwritten by proj's backward, those
 * of q, k, v by the core. */
static ra_status backward_run(pass *ps, const ra_attn_layer *l, float *dx, float *dkv,
                              const ra_attn_grads *g, float *y, const float *dy, const float *x,
                              const float *kv, int dx_set) {
    const int C = l->cfg.dim, E = l->inner;
    const ra_arch a = l->cfg.arch;
    if (y) ra_linear_forward(y, ps->obuf, l->p.proj_w, l->p.proj_b, ps->rows1, C, E);

    if (ps->drel) memset(ps->drel, 0, ps->ndrel * sizeof(float));
    rai_linear_backward_fused(ps->dobuf, g->proj_w, g->proj_b, dy, ps->obuf, l->p.proj_w, ps->rows1,
                              C, E, 1, NULL);
    float *dq, *dk, *dv;
    pass_views(ps, l, ps->dqbuf, ps->dkvbuf, &dq, &dk, &dv);
    /* alibi's table is computed, not a parameter; decomposed's combined
     * table goes back to rel_pos_h / rel_pos_w below; swinv2's CPB table
     * back through the CPB (here, or by the caller who computed it) */
    float *dtable = a == RA_ARCH_ALIBI_ATTENTION ? NULL : g->table;
    const size_t tn = (size_t)l->table_rows * l->cfg.num_heads;
    if (l->coords && !ps->tab_given) memset(dtable = ps->dtab, 0, tn * sizeof *dtable);
    /* dq, dk, dv (all of dqbuf and dkvbuf) are set by the core */
    ra_status st = rai_attention_backward_set(dq, ps->ldq, dk, ps->ldkv, dv, ps->ldkv, dtable,
                                              ps->drel ? ps->drel : g->rel_k, g->rel_v, ps->dobuf,
                                              E, ps->q, ps->ldq, ps->k, ps->ldkv, ps->v, ps->ldkv,
                                              &ps->d, ps->work, ps->wbytes, 1);
    if (st || (st = rai_pos_backward(ps->pc, l, ps->drel, g->rel_h, g->rel_w))) return st;
    if (l->coords) {   /* swinv2: back through the normalisation and the CPB */
        rai_swinv2_qk_backward(ps->dqbuf, ps->qbuf, ps->yq, ps->norms, ps->rows1, C,
                               l->cfg.num_heads, l->p.logit_scale, g->logit_scale, g->q_bias,
                               g->v_bias);
        if (!ps->tab_given && (g->cpb_w1 || g->cpb_b1 || g->cpb_w2))
            rai_cpb_backward(g->cpb_w1, g->cpb_b1, g->cpb_w2, ps->dtab, ps->tab, ps->work,
                             l->coords, l->table_rows, l->cfg.num_heads, l->p.cpb_w1,
                             l->p.cpb_b1, l->p.cpb_w2);
    }
    rai_rope_rotate(l, dq, dk, ps->ldq, ps->d.b_, ps->d.n1, 1);
    switch (a) {
    case RA_ARCH_WINDOW_ATTENTION_3D:
        rai_linear_backward_fused(dx, g->q_w, g->q_b, dq, x, l->p.q_w, ps->rows1, C, C, dx_set, NULL);
        ra_linear_backward(kv ? dkv : dx, g->kv_w, g->kv_b, dk, kv ? kv : x, l->p.kv_w,
                           ps->rows2, 2 * C, C);
        break;
    case RA_ARCH_T5_ATTENTION:
        rai_linear_backward_fused(dx, g->q_w, NULL, dq, x, l->p.q_w, ps->rows1, E, C, dx_set, NULL);
        ra_linear_backward(dx, g->k_w, NULL, dk, x, l->p.k_w, ps->rows1, E, C);
        ra_linear_backward(dx, g->v_w, NULL, dv, x, l->p.v_w, ps->rows1, E, C);
        break;
    default:   /* swinv2: q_bias and v_bias took their gradients above */
        rai_linear_backward_fused(dx, g->qkv_w, l->coords ? NULL : g->qkv_b, dq, x, l->p.qkv_w,
                                  ps->rows1, 3 * E, C, dx_set, NULL);
    }
    return RA_OK;
}

/* Windows [b0, b0 + nb) of a batch through the backward, into the part's g. */
static ra_status backward_one(void *ctx, int s) {
    const layer_call *c = ctx;
    const ra_attn_layer *l = c->l;
    int b0, nb;
    part_windows(c, s, &b0, &nb);
    const int C = l->cfg.dim;
    const size_t r1 = (size_t)b0 * c->n1 * C, r2 = (size_t)b0 * c->n2 * C;
    const float *x = c->x + r1, *kv = c->kv ? c->kv + r2 : NULL;
    pass ps;
    ra_status st;
    if (c->tape) {   /* the part's forward from the tape; scratch for the rest */
        if ((st = pass_prepare(&ps, l, x, kv, nb, c->n1, c->n2, c->mask, c->nw, b0, 1, c->grid,
                               &c->pc)))
            return st;
        float *back = pass_scratch(&ps, l, ps.nfloats - (ps.nq + ps.nkv + ps.no + ps.nx));
        if (!back) return pass_end(&ps), rai_fail(RA_ERR_NOMEM, "attention backward: out of memory");
        pass_layout(&ps, l, c->tape->saved + c->tape->at[s], back);
    } else if ((st = pass_begin(&ps, l, NULL, x, kv, nb, c->n1, c->n2, c->mask, c->nw, b0, 1,
                                c->grid, &c->pc, NULL))) {
        return st;
    }
    st = backward_run(&ps, l, c->dx ? c->dx + r1 : NULL, c->dkv ? c->dkv + r2 : NULL, &c->g[s],
                      c->y ? c->y + r1 : NULL, c->dy + r1, x, kv, 0);
    pass_end(&ps);
    return st;
}

/* The parameter gradients of g, and the floats of each. */
enum { NGRADS = 21 };
static void grad_slots(ra_attn_grads *g, float **slot[NGRADS]) {
    float **p[NGRADS] = {&g->qkv_w,  &g->qkv_b,       &g->q_w,    &g->q_b,    &g->kv_w,
                         &g->kv_b,   &g->proj_w,      &g->proj_b, &g->table,  &g->rel_k,
                         &g->rel_v,  &g->logit_scale, &g->cpb_w1, &g->cpb_b1, &g->cpb_w2,
                         &g->q_bias, &g->v_bias,      &g->k_w,    &g->v_w,    &g->rel_h,
                         &g->rel_w};
    memcpy(slot, p, sizeof p);
}

static void grad_sizes(const ra_attn_layer *l, size_t n[NGRADS]) {
    const size_t C = (size_t)l->cfg.dim, E = (size_t)l->inner, hd = (size_t)l->hd;
    const size_t r = 2 * (size_t)l->cfg.max_rel + 1, rk = (l->rel2 ? r * r : r) * hd;
    const size_t nh = (size_t)l->cfg.num_heads;
    const size_t s[NGRADS] = {3 * E * C, 3 * E, E * C, C, 2 * C * C, 2 * C, C * E, C,
                              (size_t)l->table_rows * nh, rk, rk, nh, 2 * RA_CPB_HIDDEN,
                              RA_CPB_HIDDEN, nh * RA_CPB_HIDDEN, C, C, E * C, E * C,
                              (2 * (size_t)l->cfg.grid[0] - 1) * hd,
                              (2 * (size_t)l->cfg.grid[1] - 1) * hd};
    memcpy(n, s, sizeof s);
}

static ra_status backward_parts(layer_call *cp, const ra_attn_grads *g);

/* With several threads and windows, the windows are shared out as in the
 * forward; each part accumulates the parameters' gradients into its own
 * zeroed buffers (the first part into the caller's), added to the
 * caller's in part order at the end: deterministic for a thread count. */
ra_status ra_attn_layer_backward_grid(const ra_attn_layer *l, float *dx, float *dkv,
                                    const ra_attn_grads *g, float *y, const float *dy,
                                    const float *x, const float *kv, int b_, int n1, int n2,
                                    const float *mask, int nw, const int grid[2]) {
    static const ra_attn_grads none;
    if (!dy) return rai_fail(RA_ERR_ARG, "attention backward: NULL dy");
    if (!g) g = &none;
    layer_call c = {.l = l, .y = y, .dx = dx, .dkv = dkv, .x = x, .kv = kv, .dy = dy,
                    .mask = mask, .b_ = b_, .n1 = n1, .n2 = n2, .nw = nw, .grid = grid};
    ra_status st = call_begin(&c, 1);
    if (!st) st = backward_parts(&c, g);
    rai_pos_end(&c.pc);
    return st;
}

/* The parts of a backward call (c from call_begin) and their gradients. */
static ra_status backward_parts(layer_call *cp, const ra_attn_grads *g) {
    layer_call c = *cp;   /* the parts' gradients live in the copy */
    const ra_attn_layer *l = c.l;
    ra_status st;
    int S = c.parts;
    size_t n[NGRADS], per = 0;
    ra_attn_grads ug = *g;
    /* swinv2: the parts sum the CPB table's gradient, which goes back
     * through the CPB once at the end */
    const size_t tn = up16((size_t)l->table_rows * l->cfg.num_heads);
    if (c.pc.cpb) ug.table = c.pc.cpb + tn;
    float **user[NGRADS];
    grad_sizes(l, n);
    grad_slots(&ug, user);
    for (int f = 0; f < NGRADS; f++) per += *user[f] ? n[f] : 0;
    float *priv = S > 1 && per ? rai_calloc((size_t)(S - 1) * per, sizeof(float)) : NULL;
    if (S > 1 && per && !priv) {
        if (c.tape) return rai_fail(RA_ERR_NOMEM, "attention backward: out of memory");
        c.parts = S = 1;   /* no room for the parts' sums: one pass */
    }
    for (int s = 0; s < S; s++) {
        c.g[s] = ug;
        if (s == 0) continue;
        float **dst[NGRADS];
        grad_slots(&c.g[s], dst);
        size_t at = (size_t)(s - 1) * per;
        for (int f = 0; f < NGRADS; f++)
            if (*user[f]) *dst[f] = priv + at, at += n[f];
    }
    st = rai_run_parts(S, backward_one, &c);
    for (size_t f = 0, at = 0; !st && f < NGRADS; f++) {
        if (!*user[f]) continue;
        float *d = *user[f];
        for (int s = 1; s < S; s++) {
            const float *src = priv + (size_t)(s - 1) * per + at;
            for (size_t i = 0; i < n[f]; i++) d[i] += src[i];
        }
        at += n[f];
    }
    if (!st && c.pc.cpb && (g->cpb_w1 || g->cpb_b1 || g->cpb_w2))
        rai_cpb_backward(g->cpb_w1, g->cpb_b1, g->cpb_w2, c.pc.cpb + tn, c.pc.cpb, c.pc.cpb + 2 * tn,
                         l->coords, l->table_rows, l->cfg.num_heads, l->p.cpb_w1, l->p.cpb_b1,
                         l->p.cpb_w2);
    rai_free(priv);
    return st;
}

ra_status ra_attn_layer_backward(const ra_attn_layer *l, float *dx, float *dkv,
                                 const ra_attn_grads *g, float *y, const float *dy,
                                 const float *x, const float *kv, int b_, int n1, int n2,
                                 const float *mask, int nw) {
    return ra_attn_layer_backward_grid(l, dx, dkv, g, y, dy, x, kv, b_, n1, n2, mask, nw, NULL);
}

/* The backward on a caller's workspace, with the forward's projections and
 * core output read from the forward's workspace (saved) instead of being
 * recomputed: there the forward laid out [q or qkv][kv][out] (pass_run). */
size_t rai_attn_layer_backward_ws_size(const ra_attn_layer *l, int b_, int n1, int n2,
                                       int saved) {
    pass ps;
    static const float one;
    if (pass_prepare(&ps, l, &one, NULL, b_, n1, n2, NULL, 0, -1, 1, NULL, NULL)) return 0;
    const size_t nsave = ps.nq + ps.nkv + ps.no + ps.nx;
    pass_end(&ps);
    return (ps.nfloats - (saved ? nsave : 0)) * sizeof(float);
}

ra_status rai_attn_layer_backward_ws(const ra_attn_layer *l, float *dx, float *dkv,
                                     const ra_attn_grads *g, const float *dy, const float *x,
                                     const float *kv, int b_, int n1, int n2, const float *mask,
                                     int nw, const void *saved, void *work, size_t ws,
                                     int dx_set) {
    static const ra_attn_grads none;
    if (!dy || !work) return rai_fail(RA_ERR_ARG, "attention backward: NULL dy or workspace");
    if (!g) g = &none;
    pass ps;
    ra_status st = pass_prepare(&ps, l, x, kv, b_, n1, n2, mask, nw, -1, 1, NULL, NULL);
    if (st) return st;
    const size_t nsave = ps.nq + ps.nkv + ps.no + ps.nx;
    const size_t need = ps.nfloats - (saved ? nsave : 0);
    if (ws / sizeof(float) < need) {
        pass_end(&ps);
        return rai_fail(RA_ERR_ARG, "attention backward: workspace of %zu bytes, %zu needed", ws,
                        need * sizeof(float));
    }
    if (!saved) {
        ps.scratch = work;
        if ((st = pass_run(&ps, l, NULL, x, kv, 1))) return pass_end(&ps), st;
    } else {   /* pass_run's layout without its products */
        pass_layout(&ps, l, (float *)saved, work);
    }
    st = backward_run(&ps, l, dx, dkv, g, NULL, dy, x, kv, dx_set);
    pass_end(&ps);
    return st;
}

/* ---- training: a forward that keeps what its backward reads ---------------
 * The forward runs in parts as ra_attn_layer_forward does, each part's
 * scratch a slice of the tape; the backward runs the same parts, each
 * reading its slice instead of recomputing the projections and the core's
 * output (as the networks' training passes read theirs). A tape passed
 * back in is reused when it is large enough: a training loop allocates it
 * once. */
void ra_attn_tape_free(ra_attn_tape *t) {
    if (!t) return;
    rai_free(t->saved);
    free(t);
}

ra_status ra_attn_layer_forward_train(const ra_attn_layer *l, ra_attn_tape **tape, float *y,
                                      float *attn, const float *x, const float *kv, int b_,
                                      int n1, int n2, const float *mask, int nw) {
    if (!l || !tape || !y) return rai_fail(RA_ERR_ARG, "attention forward: NULL layer, tape or y");
    layer_call c = {.l = l, .y = y, .attn = attn, .x = x, .kv = kv, .mask = mask, .b_ = b_,
                    .n1 = n1, .n2 = n2, .nw = nw};
    ra_status st = call_begin(&c, 0);
    if (st) return st;
    size_t at[RA_MAX_PARTS + 1] = {0};
    const int C = l->cfg.dim;
    for (int s = 0; s < c.parts && !st; s++) {
        int b0, nb;
        part_windows(&c, s, &b0, &nb);
        pass ps;
        st = pass_prepare(&ps, l, x + (size_t)b0 * n1 * C, kv ? kv + (size_t)b0 * n2 * C : NULL,
                          nb, n1, n2, mask, nw, b0, 0, NULL, &c.pc);
        if (!st) at[s + 1] = at[s] + up16(ps.nfloats), pass_end(&ps);
    }
    ra_attn_tape *t = *tape;
    if (!st && !t && !(t = calloc(1, sizeof *t)))
        st = rai_fail(RA_ERR_NOMEM, "attention forward: out of memory");
    if (!st) {
        *tape = t;
        t->ready = 0;
        if (t->cap < at[c.parts]) {
            rai_free(t->saved);
            t->cap = (t->saved = rai_alloc(at[c.parts], sizeof(float))) ? at[c.parts] : 0;
        }
        if (!t->saved) st = rai_fail(RA_ERR_NOMEM, "attention forward: out of memory for the tape");
    }
    if (!st) {
        t->l = l, t->x = x, t->kv = kv, t->mask = mask;
        t->b_ = b_, t->n1 = n1, t->n2 = n2, t->nw = nw, t->parts = c.parts;
        memcpy(t->at, at, sizeof at);
        c.tape = t;
        st = rai_run_parts(c.parts, forward_one, &c);
        t->ready = st == RA_OK;
    }
    rai_pos_end(&c.pc);
    return st;
}

ra_status ra_attn_layer_backward_tape(const ra_attn_layer *l, const ra_attn_tape *t,
                                      float *dx, float *dkv, const ra_attn_grads *g,
                                      const float *dy) {
    static const ra_attn_grads none;
    if (!l || !t || !t->ready || t->l != l)
        return rai_fail(RA_ERR_ARG, "attention backward: no tape of a forward of this layer");
    if (!dy) return rai_fail(RA_ERR_ARG, "attention backward: NULL dy");
    layer_call c = {.l = l, .dx = dx, .dkv = dkv, .x = t->x, .kv = t->kv, .dy = dy,
                    .mask = t->mask, .b_ = t->b_, .n1 = t->n1, .n2 = t->n2, .nw = t->nw};
    ra_status st = call_begin(&c, 1);
    if (!st) {
        c.parts = t->parts;   /* the forward's parts, whatever the threads now */
        c.tape = t;
        st = backward_parts(&c, g ? g : &none);
    }
    rai_pos_end(&c.pc);
    return st;
}
