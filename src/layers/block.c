/* block.c - one transformer block, forward and backward (block.h).
 *
 * Each network's fixtures pin the bits of its block, so the block keeps
 * the calls each way of running it has always made: inference fuses the
 * residual adds into the attention's projection and fc2 (through the row
 * map, scattering the windows back), the attention branch runs in chunks
 * of windows where a call has enough of them (each chunk one thread's,
 * with the whole call's bits), the MLP on chunks of rows. The
 * training forward keeps the block's input, the residual between the
 * branches and fc1's output, not the LayerNorms' outputs nor GELU and
 * GELU': the backward remakes those from what is kept, with the same calls
 * and so the same bits (remake_*), one block at a time in its scratch, and
 * multiplies by GELU' inside fc2's product. A tape that keeps the
 * attention's workspace reads the projections back and writes the
 * branches' input gradients; one without recomputes them
 * (ra_attn_layer_backward) and accumulates into zeroed buffers. */
#include "layers/block.h"

#include <string.h>

static ra_status nomem(void) { return rai_fail(RA_ERR_NOMEM, "block: out of memory"); }

/* Below this many elements a loop runs on one thread (as nn.c). */
#define PAR_MIN ((int64_t)1 << 15)
static int par_threads(int64_t work) { return work >= PAR_MIN ? ra_threads_get() : 1; }

/* A LayerScale or drop-path between a branch's output and its residual add:
 * the output is then kept on the tape. */
static int branch_kept(const rai_block *b) { return b->ls1 || b->ls2 || b->drop_path > 0; }

/* ---- LayerScale and drop-path ---------------------------------------------- */

/* x (rows, C) += gamma (C) * a (rows, C), or x += a without gamma. */
static void residual(float *x, const float *a, const float *gamma, int64_t rows, int c) {
    if (!gamma) {
        ra_add(x, x, a, rows * c);
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int k = 0; k < c; k++) x[r * c + k] += a[r * c + k] * gamma[k];
}

/* dst (rows, C) = src (rows, C) * gamma (C): LayerScale's input gradient. */
static void scale_cols(float *dst, const float *src, const float *gamma, int64_t rows, int c) {
#pragma omp parallel for schedule(static) num_threads(par_threads(rows * c))
    for (int64_t r = 0; r < rows; r++)
        for (int k = 0; k < c; k++) dst[r * c + k] = src[r * c + k] * gamma[k];
}

/* out (C) += sum over rows of a (rows, C) * b (rows, C), in double:
 * LayerScale's gamma gradient. Blocks of 16 columns per task. */
static void colsum_prod_add(float *out, const float *a, const float *b, int64_t rows, int c) {
    const int chunks = (c + 15) / 16;
#pragma omp parallel for schedule(static) num_threads(par_threads(rows * c)) if (chunks > 1)
    for (int t = 0; t < chunks; t++) {
        const int j0 = t * 16, jn = c - j0 < 16 ? c - j0 : 16;
        double acc[16] = {0};
        for (int64_t r = 0; r < rows; r++)
            for (int j = 0; j < jn; j++) acc[j] += (double)a[r * c + j0 + j] * b[r * c + j0 + j];
        for (int j = 0; j < jn; j++) out[j0 + j] = (float)((double)out[j0 + j] + acc[j]);
    }
}

/* x += drop_path(gamma * a): a residual branch with LayerScale (gamma (C),
 * or NULL) and drop-path (p > 0: one draw per sample into keep (B)). a
 * (rows, C) is x's rows (map NULL: x is (rows, C)) or a window layout's,
 * sample by sample, added to x's rows map[r] (x (M, C)); tmp (rows, C) is
 * scratch. */
static ra_status branch_add(float *x, float *tmp, const float *a, const float *gamma,
                            uint8_t *keep, float p, int B, int64_t rows, int c,
                            const int32_t *map, ra_rng *rng) {
    if (!(p > 0) && !map) {
        residual(x, a, gamma, rows, c);
        return RA_OK;
    }
    const float *src = a;
    if (gamma) {
        scale_cols(tmp, a, gamma, rows, c);
        src = tmp;
    }
    ra_status st = RA_OK;
    if (p > 0) {
        st = ra_droppath_forward(tmp, keep, src, B, rows / B * c, p, rng);
        src = tmp;
    }
    if (!st && map) rai_rows_scatter_add(x, src, map, rows, c);
    else if (!st) ra_add(x, x, src, rows * c);
    return st;
}

/* The gradient of the branch output a (rows, C) from the residual stream's
 * dR (rows, C, laid out as a), through drop-path and LayerScale (dgamma
 * (C) ACCUMULATED): dR itself, or dA (rows, C) holding it. */
static const float *branch_backward(float *dA, const float *dR, const float *a,
                                    const float *gamma, float *dgamma, const uint8_t *keep,
                                    float p, int B, int64_t rows, int c) {
    const float *g = dR;
    if (p > 0) {
        rai_zero(dA, (int64_t)(rows * c));
        ra_droppath_backward(dA, dR, keep, B, rows / B * c, p);
        g = dA;
    }
    if (!gamma) return g;
    if (dgamma) colsum_prod_add(dgamma, g, a, rows, c);
    scale_cols(dA, g, gamma, rows, c);
    return dA;
}

/* ---- the attention: an ra_attn_layer or the network's own ------------------ */

static size_t attn_forward_ws_size(const rai_block *b, const rai_block_layout *l) {
    if (b->own) return b->own->forward_ws_size(b->own->ctx, l);
    return rai_attn_layer_forward_ws_size(b->attn, l->b_, l->n, rai_block_keys(l));
}

/* y (b_*n, C) = attn(x, kv), or res rows map[r] += it (y scratch). */
static ra_status attn_forward(const rai_block *b, float *y, float *probs, const float *x,
                              const float *kv, const rai_block_layout *l, void *ws, size_t wsz,
                              float *res, const int32_t *map) {
    if (b->own) return b->own->forward(b->own->ctx, y, probs, x, kv, l, ws, res, map);
    return rai_attn_layer_forward_ws(b->attn, y, probs, x, kv, l->b_, l->n, rai_block_keys(l),
                                     l->mask, l->nw, ws, wsz, res, map);
}

static size_t attn_backward_ws_size(const rai_block *b, const rai_block_layout *l) {
    if (b->own) return b->own->backward_ws_size(b->own->ctx, l);
    return rai_attn_layer_backward_ws_size(b->attn, l->b_, l->n, rai_block_keys(l), 1);
}

/* dx (b_*n, C) overwritten, dkv (b_*n2, C) accumulated, from dy and the
 * forward's saved workspace. */
static ra_status attn_backward(const rai_block *b, float *dx, float *dkv, const ra_attn_grads *g,
                               const float *dy, const float *x, const float *kv,
                               const rai_block_layout *l, const void *saved, void *ws,
                               size_t wsz) {
    if (b->own) return b->own->backward(b->own->ctx, dx, dkv, g, dy, x, kv, l, saved, ws);
    return rai_attn_layer_backward_ws(b->attn, dx, dkv, g, dy, x, kv, l->b_, l->n,
                                      rai_block_keys(l), l->mask, l->nw, saved, ws, wsz, 1);
}

static ra_status no_cross(void) {
    return rai_fail(RA_ERR_INTERNAL, "block: cross-attention in a post-norm block");
}

/* ---- inference ------------------------------------------------------------- */

ra_status rai_block_forward(const rai_block *b, float *x, float *attn, const rai_block_layout *l,
                            rai_arena *a) {
    const int C = b->dim, hidden = b->hidden;
    const int64_t M = l->m, rows = (int64_t)l->b_ * l->n;
    /* MLP rows per pass: bounded hidden activations */
    int64_t chunk = b->mlp_chunk ? b->mlp_chunk / hidden : M;
    if (chunk < 1) chunk = 1;
    if (chunk > M) chunk = M;

    if (b->post && l->kv) return no_cross();
    /* a branch without LayerScale or keys of its own: in chunks of
     * windows where there are enough of them */
    const int g = l->kv || b->ls1 || b->own || attn
                      ? 0
                      : rai_attn_layer_chunk_windows(b->attn, l->b_, l->n, ra_threads_get());
    const int64_t rkv = l->kv ? (int64_t)l->b_ * rai_block_keys(l) : 0;
    const size_t mark = rai_arena_mark(a);
    const size_t wsz = g ? 0 : attn_forward_ws_size(b, l);   /* the whole call's scratch */
    float *win = g ? NULL : rai_arena_floats(a, (size_t)(rows * C));
    float *wkv = l->kv ? rai_arena_floats(a, (size_t)(rkv * C)) : NULL;
    float *aw = g ? NULL : rai_arena_floats(a, (size_t)(rows * C));
    void *ws = g ? NULL : rai_arena_bytes(a, wsz);
    if (!g && (!win || (l->kv && !wkv) || !aw || !ws)) return rai_arena_reset(a, mark), nomem();
    ra_status st;
    if (g > 0) {
        const rai_ln n1 = {b->n1w, b->n1b, b->eps};
        st = rai_attn_layer_forward_chunks(b->attn, x, x, l->map, &n1, b->post, l->b_, l->n,
                                           l->mask, l->nw, g, ra_threads_get());
    } else if (b->post) {   /* x += norm1(attn(x)) */
        rai_rows_gather(win, x, l->map, rows, C);
        st = attn_forward(b, aw, attn, win, NULL, l, ws, wsz, NULL, NULL);
        if (!st) {
            rai_layernorm_rows(aw, aw, NULL, rows, C, b->n1w, b->n1b, b->eps);
            rai_rows_scatter_add(x, aw, l->map, rows, C);
        }
    } else {         /* x += ls1 * attn(norm1(x)); the add fused into proj without ls1 */
        rai_layernorm_rows(win, x, l->map, rows, C, b->n1w, b->n1b, b->eps);
        if (l->kv) rai_layernorm_rows(wkv, l->kv, l->kvmap, rkv, C, b->nkw, b->nkb, b->eps);
        st = attn_forward(b, aw, attn, win, wkv, l, ws, wsz, b->ls1 ? NULL : x, l->map);
        if (!st && b->ls1) residual(x, aw, b->ls1, M, C);
    }
    rai_arena_reset(a, mark);
    if (st) return st;   /* the MLP's scratch reuses the attention's */
    float *t = rai_arena_floats(a, (size_t)(chunk * C));
    float *hid = rai_arena_floats(a, (size_t)(chunk * hidden));
    if (!t || !hid) return rai_arena_reset(a, mark), nomem();
    for (int64_t r0 = 0; r0 < M; r0 += chunk) {
        const int64_t r = M - r0 < chunk ? M - r0 : chunk;
        float *xr = x + r0 * C;
        if (b->post) {   /* x += norm2(fc2(gelu(fc1(x)))) */
            rai_mlp_fused(t, xr, NULL, b->fc1w, b->fc1b, b->fc2w, b->fc2b, r, C, hidden, hid,
                          NULL);
            rai_layernorm_rows(t, t, NULL, r, C, b->n2w, b->n2b, b->eps);
            ra_add(xr, xr, t, r * C);
            continue;
        }
        /* x += ls2 * fc2(gelu(fc1(norm2(x)))): GELU in fc1's product, the add in fc2's */
        const rai_ln n2 = {b->n2w, b->n2b, b->eps};
        rai_mlp_fused(t, xr, &n2, b->fc1w, b->fc1b, b->fc2w, b->fc2b, r, C, hidden, hid,
                      b->ls2 ? NULL : xr);
        if (b->ls2) residual(xr, t, b->ls2, r, C);
    }
    rai_arena_reset(a, mark);
    return RA_OK;
}

/* ---- training -------------------------------------------------------------- */

size_t rai_block_tape_layout(rai_block_tape *t, const rai_block *b, const rai_block_layout *l,
                             float *base) {
    const size_t C = (size_t)b->dim, M = (size_t)l->m, hid = (size_t)b->hidden;
    const size_t rows = (size_t)l->b_ * (size_t)l->n, r1 = b->post ? rows : M;
    const size_t mkv = l->kv ? (size_t)l->mkv : 0;
    const size_t rkv = l->kv ? (size_t)l->b_ * rai_block_keys(l) : 0;
    const int kept = b->post || branch_kept(b);
    const size_t kb = b->drop_path > 0 ? ((size_t)l->batch + 3) / 4 : 0;
    rai_block_tape z = {.l = *l};
    size_t off = 0;
    z.keep1 = kb ? (uint8_t *)rai_carve(base, &off, kb) : NULL;
    z.keep2 = kb ? (uint8_t *)rai_carve(base, &off, kb) : NULL;
    z.mean1 = rai_carve(base, &off, r1);
    z.rstd1 = rai_carve(base, &off, r1);
    z.meankv = mkv ? rai_carve(base, &off, mkv) : NULL;
    z.rstdkv = mkv ? rai_carve(base, &off, mkv) : NULL;
    z.wkv = rkv ? rai_carve(base, &off, rkv * C) : NULL;
    z.a = kept ? rai_carve(base, &off, rows * C) : NULL;
    z.xm = rai_carve(base, &off, M * C);
    z.mean2 = rai_carve(base, &off, M);
    z.rstd2 = rai_carve(base, &off, M);
    z.h = rai_carve(base, &off, M * hid);
    z.mo = kept ? rai_carve(base, &off, M * C) : NULL;
    if (base) *t = z;
    return off;
}

/* The attention's input as the training forward made it, from the tape
 * (scratch from a): norm1(x) (pre-norm; statistics recomputed into
 * scratch, the call's bits) laid out for the attention, or x's rows. */
static const float *remake_win(const rai_block *b, const rai_block_tape *t, rai_arena *a) {
    const rai_block_layout *l = &t->l;
    const int C = b->dim;
    const int64_t M = l->m, rows = (int64_t)l->b_ * l->n;
    if (b->post && !l->map) return t->x;
    float *win = rai_arena_floats(a, (size_t)(rows * C));
    if (!win) return NULL;
    if (b->post) return rai_rows_gather(win, t->x, l->map, rows, C), win;
    float *h1 = l->map ? rai_arena_floats(a, (size_t)(M * C)) : win;
    float *st = rai_arena_floats(a, (size_t)(2 * M));
    if (!h1 || !st) return NULL;
    ra_layernorm_forward(h1, st, st + M, t->x, b->n1w, b->n1b, M, C, b->eps);
    if (l->map) rai_rows_gather(win, h1, l->map, rows, C);
    return win;
}

/* A pre-norm block's fc1 input as the training forward made it: norm2(xm)
 * (a post-norm block's is xm itself). */
static const float *remake_h2(const rai_block *b, const rai_block_tape *t, rai_arena *a) {
    const int C = b->dim;
    const int64_t M = t->l.m;
    float *h2 = rai_arena_floats(a, (size_t)(M * C)), *st = rai_arena_floats(a, (size_t)(2 * M));
    if (!h2 || !st) return NULL;
    ra_layernorm_forward(h2, st, st + M, t->xm, b->n2w, b->n2b, M, C, b->eps);
    return h2;
}

/* The MLP's middle of a training forward: h = fc1(in) onto the tape, g =
 * GELU(h) into g (M, hidden). */
static void mlp_in(const rai_block *b, rai_block_tape *t, float *g, const float *in) {
    const int64_t M = t->l.m;
    ra_linear_forward(t->h, in, b->fc1w, b->fc1b, M, b->hidden, b->dim);
    rai_gelu_keep(g, NULL, t->h, M * b->hidden);
}

/* The rest of rai_block_forward_train for a post-norm block. */
static ra_status post_forward_train(const rai_block *b, rai_block_tape *t, float *y, void *ws,
                                    size_t wsz, rai_arena *a, ra_rng *rng) {
    const rai_block_layout *l = &t->l;
    const int C = b->dim, hidden = b->hidden;
    const int64_t M = l->m, rows = (int64_t)l->b_ * l->n;
    float *tmp = rai_arena_floats(a, (size_t)((rows > M ? rows : M) * C));
    float *g = rai_arena_floats(a, (size_t)(M * hidden));
    const float *win = tmp && g ? remake_win(b, t, a) : NULL;
    if (!win) return nomem();
    /* xm = x + norm1(attn(x)) */
    ra_status st = attn_forward(b, t->a, NULL, win, NULL, l, ws, wsz, NULL, NULL);
    if (st) return st;
    ra_layernorm_forward(tmp, t->mean1, t->rstd1, t->a, b->n1w, b->n1b, rows, C, b->eps);
    const float p = b->drop_path;   /* drop-path on both branches: a draw per sample */
    if (p > 0) st = ra_droppath_forward(tmp, t->keep1, tmp, l->batch, rows / l->batch * C, p, rng);
    if (st) return st;
    memcpy(t->xm, t->x, (size_t)(M * C) * sizeof *y);
    rai_rows_scatter_add(t->xm, tmp, l->map, rows, C);
    /* y = xm + norm2(fc2(gelu(fc1(xm)))) */
    mlp_in(b, t, g, t->xm);
    ra_linear_forward(t->mo, g, b->fc2w, b->fc2b, M, C, hidden);
    ra_layernorm_forward(tmp, t->mean2, t->rstd2, t->mo, b->n2w, b->n2b, M, C, b->eps);
    if (p > 0) st = ra_droppath_forward(tmp, t->keep2, tmp, l->batch, M / l->batch * C, p, rng);
    if (!st) ra_add(y, t->xm, tmp, M * C);
    return st;
}

ra_status rai_block_forward_train(const rai_block *b, rai_block_tape *t, float *y, int keep_attn,
                                  rai_arena *a, ra_rng *rng) {
    const rai_block_layout *l = &t->l;
    const int C = b->dim, hidden = b->hidden;
    const int64_t M = l->m, rows = (int64_t)l->b_ * l->n;
    const int kept = branch_kept(b);
    if ((kept && l->map && !keep_attn) || (!l->map && rows != M))
        return rai_fail(RA_ERR_INTERNAL, "block: LayerScale or drop-path on a window layout "
                        "without the attention's workspace kept");
    if (b->post && l->kv) return no_cross();
    const size_t wsz = attn_forward_ws_size(b, l);
    void *ws = t->aws = keep_attn ? rai_arena_bytes(a, wsz) : NULL;
    const size_t mark = rai_arena_mark(a);
    if (!keep_attn) ws = rai_arena_bytes(a, wsz);
    if (!ws) return nomem();
    if (b->post) {
        ra_status st = post_forward_train(b, t, y, ws, wsz, a, rng);
        rai_arena_reset(a, mark);
        return st;
    }

    /* xm = x + ls1 * attn(norm1(x)), norm1's output laid out for the attention */
    float *win = rai_arena_floats(a, (size_t)(rows * C));
    float *h1 = l->map ? rai_arena_floats(a, (size_t)(M * C)) : win;
    float *tmp = rai_arena_floats(a, (size_t)((rows > M ? rows : M) * C));
    if (!win || !h1 || !tmp) return rai_arena_reset(a, mark), nomem();
    ra_layernorm_forward(h1, t->mean1, t->rstd1, t->x, b->n1w, b->n1b, M, C, b->eps);
    if (l->map) rai_rows_gather(win, h1, l->map, rows, C);
    if (l->kv) {   /* norm_kv's output laid out likewise */
        float *hk = l->kvmap ? rai_arena_floats(a, (size_t)(l->mkv * C)) : t->wkv;
        if (!hk) return rai_arena_reset(a, mark), nomem();
        ra_layernorm_forward(hk, t->meankv, t->rstdkv, l->kv, b->nkw, b->nkb, l->mkv, C, b->eps);
        if (l->kvmap) rai_rows_gather(t->wkv, hk, l->kvmap, (int64_t)l->b_ * rai_block_keys(l), C);
    }
    memcpy(t->xm, t->x, (size_t)(M * C) * sizeof *y);
    ra_status st = attn_forward(b, kept ? t->a : tmp, NULL, win, t->wkv, l, ws, wsz,
                                kept ? NULL : t->xm, l->map);
    if (!st && kept)
        st = branch_add(t->xm, tmp, t->a, b->ls1, t->keep1, b->drop_path, l->batch, rows, C,
                        l->map, rng);
    if (st) return rai_arena_reset(a, mark), st;

    /* y = xm + ls2 * fc2(gelu(fc1(norm2(xm)))), in the attention's scratch */
    rai_arena_reset(a, mark);
    float *h2 = rai_arena_floats(a, (size_t)(M * C)), *g = rai_arena_floats(a, (size_t)(M * hidden));
    tmp = rai_arena_floats(a, (size_t)(M * C));
    if (!h2 || !g || !tmp) return rai_arena_reset(a, mark), nomem();
    ra_layernorm_forward(h2, t->mean2, t->rstd2, t->xm, b->n2w, b->n2b, M, C, b->eps);
    mlp_in(b, t, g, h2);
    memcpy(y, t->xm, (size_t)(M * C) * sizeof *y);
    rai_linear_fused(kept ? t->mo : tmp, g, b->fc2w, b->fc2b, M, C, hidden, 0,
                     kept ? NULL : y, NULL);
    if (kept)
        st = branch_add(y, tmp, t->mo, b->ls2, t->keep2, b->drop_path, l->batch, M, C, NULL,
                        rng);
    rai_arena_reset(a, mark);
    return st;
}

/* rai_block_backward of a post-norm block. */
static ra_status post_backward(const rai_block *b, const rai_block_tape *t, float *dx,
                               const rai_block_grads *g, rai_arena *a) {
    const rai_block_layout *l = &t->l;
    const int C = b->dim, hidden = b->hidden;
    const int64_t m = l->m, rows = (int64_t)l->b_ * l->n;
    const size_t mark = rai_arena_mark(a);
    const float p = b->drop_path;
    /* MLP branch: dx += fc1^T(GELU'(fc2^T(norm2'(drop_path'(dx))))) */
    float *dh = rai_arena_floats(a, (size_t)(m * hidden));
    float *dt = rai_arena_floats(a, (size_t)((rows > m ? rows : m) * C));
    float *dd = p > 0 ? rai_arena_floats(a, (size_t)((rows > m ? rows : m) * C)) : NULL;
    float *gl = rai_arena_floats(a, (size_t)(m * hidden)), *gd = rai_arena_floats(a, (size_t)(m * hidden));
    if (!dh || !dt || (p > 0 && !dd) || !gl || !gd) return rai_arena_reset(a, mark), nomem();
    rai_gelu_keep(gl, gd, t->h, m * hidden);
    rai_zero(dt, (int64_t)(m * C));
    const float *dmo = branch_backward(dd, dx, NULL, NULL, NULL, t->keep2, p, l->batch, m, C);
    ra_layernorm_backward(dt, g->n2w, g->n2b, dmo, t->mo, t->mean2, t->rstd2, b->n2w, m, C);
    rai_linear_backward_fused(dh, g->fc2w, g->fc2b, dt, gl, b->fc2w, m, C, hidden, 1, gd);
    rai_linear_backward_fused(dx, g->fc1w, g->fc1b, dh, t->xm, b->fc1w, m, hidden, C, 0, NULL);
    rai_arena_reset(a, mark);
    /* attention branch: dx += reverse(attn'(norm1'(drop_path'(partition(dx))))) */
    float *dln = rai_arena_floats(a, (size_t)(rows * C));
    float *daw = rai_arena_floats(a, (size_t)(rows * C));
    float *dwin = rai_arena_floats(a, (size_t)(rows * C));
    dd = p > 0 ? rai_arena_floats(a, (size_t)(rows * C)) : NULL;
    const size_t wsz = attn_backward_ws_size(b, l);
    void *ws = rai_arena_bytes(a, wsz);
    const float *win = remake_win(b, t, a);
    if (!dln || !daw || !dwin || !ws || !t->aws || (p > 0 && !dd) || !win)
        return rai_arena_reset(a, mark), nomem();
    rai_rows_gather(dln, dx, l->map, rows, C);
    rai_zero(daw, (int64_t)(rows * C));
    const float *da = branch_backward(dd, dln, NULL, NULL, NULL, t->keep1, p, l->batch, rows, C);
    ra_layernorm_backward(daw, g->n1w, g->n1b, da, t->a, t->mean1, t->rstd1, b->n1w, rows, C);
    ra_status st = attn_backward(b, dwin, NULL, &g->attn, daw, win, NULL, l, t->aws, ws, wsz);
    if (!st) rai_rows_scatter_add(dx, dwin, l->map, rows, C);
    rai_arena_reset(a, mark);
    return st;
}

ra_status rai_block_backward(const rai_block *b, const rai_block_tape *t, float *dx,
                             const rai_block_grads *g, rai_arena *a) {
    if (b->post) return post_backward(b, t, dx, g, a);
    const rai_block_layout *l = &t->l;
    const int C = b->dim, hidden = b->hidden;
    const int64_t m = l->m, rows = (int64_t)l->b_ * l->n;
    const int kept = branch_kept(b);
    const size_t mark = rai_arena_mark(a);

    /* MLP branch: dx += norm2'(fc1'(GELU'(fc2'(ls2'(dx))))) */
    float *dh = rai_arena_floats(a, (size_t)(m * hidden));
    float *dt = rai_arena_floats(a, (size_t)(m * C));
    float *dA = kept ? rai_arena_floats(a, (size_t)(m * C)) : NULL;
    const size_t mlp = rai_arena_mark(a);   /* GELU, GELU' and fc1's input, remade */
    float *gl = rai_arena_floats(a, (size_t)(m * hidden)), *gd = rai_arena_floats(a, (size_t)(m * hidden));
    const float *h2 = gl && gd ? remake_h2(b, t, a) : NULL;
    if (!dh || !dt || (kept && !dA) || !h2) return rai_arena_reset(a, mark), nomem();
    rai_gelu_keep(gl, gd, t->h, m * hidden);
    const float *dM = kept ? branch_backward(dA, dx, t->mo, b->ls2, g->ls2, t->keep2,
                                             b->drop_path, l->batch, m, C)
                           : dx;
    /* dh = (dM . fc2w) GELU'(h): fc2's and GELU's backward in one product */
    rai_linear_backward_fused(dh, g->fc2w, g->fc2b, dM, gl, b->fc2w, m, C, hidden, 1, gd);
    if (t->aws) {
        rai_linear_backward_fused(dt, g->fc1w, g->fc1b, dh, h2, b->fc1w, m, hidden, C, 1, NULL);
    } else {
        rai_zero(dt, (int64_t)(m * C));
        ra_linear_backward(dt, g->fc1w, g->fc1b, dh, h2, b->fc1w, m, hidden, C);
    }
    ra_layernorm_backward(dx, g->n2w, g->n2b, dt, t->xm, t->mean2, t->rstd2, b->n2w, m, C);
    rai_arena_reset(a, mlp);

    /* attention branch: dx is now the gradient of xm (through LayerScale and
     * drop-path here on x's rows, below on a window layout's) */
    const float *dAt = kept && !l->map ? branch_backward(dA, dx, t->a, b->ls1, g->ls1, t->keep1,
                                                         b->drop_path, l->batch, m, C)
                                       : dx;
    ra_status st;
    if (t->aws) {   /* the forward's projections read back; dt = reverse(attn'(partition)) */
        rai_arena_reset(a, mark);
        const int64_t rkv = l->kv ? (int64_t)l->b_ * rai_block_keys(l) : 0;
        float *daw = l->map ? rai_arena_floats(a, (size_t)(rows * C)) : NULL;
        float *dAw = kept && l->map ? rai_arena_floats(a, (size_t)(rows * C)) : NULL;
        float *dwin = rai_arena_floats(a, (size_t)(rows * C));
        float *dwkv = l->kv ? rai_arena_floats(a, (size_t)(rkv * C)) : NULL;
        const int64_t mt = l->kv && l->mkv > m ? l->mkv : m;
        dt = rai_arena_floats(a, (size_t)(mt * C));
        const size_t wsz = attn_backward_ws_size(b, l);
        void *ws = rai_arena_bytes(a, wsz);
        const float *win = remake_win(b, t, a);
        if ((l->map && !daw) || (kept && l->map && !dAw) || !dwin || (l->kv && !dwkv) || !dt ||
            !ws || !win)
            return rai_arena_reset(a, mark), nomem();
        const float *dy = dAt;   /* the attention's output gradient */
        if (l->map) {
            rai_rows_gather(daw, dAt, l->map, rows, C);
            dy = !kept ? daw : branch_backward(dAw, daw, t->a, b->ls1, g->ls1, t->keep1,
                                               b->drop_path, l->batch, rows, C);
        }
        if (dwkv) rai_zero(dwkv, rkv * C);
        st = attn_backward(b, dwin, dwkv, &g->attn, dy, win, t->wkv, l, t->aws, ws, wsz);
        if (!st && l->kv) {   /* kv's branch: g->kv += norm_kv'(reverse(dwkv)) */
            rai_zero(dt, l->mkv * C);
            rai_rows_scatter_add(dt, dwkv, l->kvmap, rkv, C);
            ra_layernorm_backward(g->kv, g->nkw, g->nkb, dt, l->kv, t->meankv, t->rstdkv,
                                  b->nkw, l->mkv, C);
        }
        if (!st) {
            rai_zero(dt, (int64_t)(m * C));
            rai_rows_scatter_add(dt, dwin, l->map, rows, C);
        }
    } else if (b->own || l->kv) {
        st = rai_fail(RA_ERR_INTERNAL, "block: a backward without the attention's workspace");
    } else {        /* recomputed */
        const float *win = remake_win(b, t, a);
        if (!win) return rai_arena_reset(a, mark), nomem();
        rai_zero(dt, (int64_t)(m * C));
        st = ra_attn_layer_backward(b->attn, dt, NULL, &g->attn, NULL, dAt, win, NULL, l->b_,
                                    l->n, l->n, l->mask, l->nw);
    }
    if (!st)
        ra_layernorm_backward(dx, g->n1w, g->n1b, dt, t->x, t->mean1, t->rstd1, b->n1w, m, C);
    rai_arena_reset(a, mark);
    return st;
}

/* ---- gradient slots -------------------------------------------------------- */

void rai_block_grads_at(rai_block_grads *g, const rai_block *b, const ra_attn_params *p,
                        const float *weights, float *grad) {
#define AT(w) ((w) ? grad + ((w) - weights) : NULL)
    *g = (rai_block_grads){
        .n1w = AT(b->n1w), .n1b = AT(b->n1b), .n2w = AT(b->n2w), .n2b = AT(b->n2b),
        .fc1w = AT(b->fc1w), .fc1b = AT(b->fc1b), .fc2w = AT(b->fc2w), .fc2b = AT(b->fc2b),
        .ls1 = AT(b->ls1), .ls2 = AT(b->ls2), .nkw = AT(b->nkw), .nkb = AT(b->nkb),
        .attn = {.qkv_w = AT(p->qkv_w), .qkv_b = AT(p->qkv_b), .q_w = AT(p->q_w),
                 .q_b = AT(p->q_b), .kv_w = AT(p->kv_w), .kv_b = AT(p->kv_b),
                 .proj_w = AT(p->proj_w), .proj_b = AT(p->proj_b), .table = AT(p->table),
                 .rel_k = AT(p->rel_k), .rel_v = AT(p->rel_v),
                 .logit_scale = AT(p->logit_scale), .cpb_w1 = AT(p->cpb_w1),
                 .cpb_b1 = AT(p->cpb_b1), .cpb_w2 = AT(p->cpb_w2), .q_bias = AT(p->q_bias),
                 .v_bias = AT(p->v_bias), .k_w = AT(p->k_w), .v_w = AT(p->v_w),
                 .rel_h = AT(p->rel_h), .rel_w = AT(p->rel_w)}};
#undef AT
}

/* ---- window layouts -------------------------------------------------------- */

static int window_spec_eq(const ra_window_spec *p, const ra_window_spec *q) {
    return p->d == q->d && p->h == q->h && p->w == q->w && p->wd == q->wd && p->wh == q->wh &&
           p->ww == q->ww && p->sd == q->sd && p->sh == q->sh && p->sw == q->sw;
}

ra_status rai_window_layout_get(rai_window_layouts *c, const ra_window_spec *g, int B,
                                const rai_window_layout **out) {
    for (int i = 0; i < c->count; i++)
        if (c->item[i].b == B && window_spec_eq(&c->item[i].g, g)) return *out = &c->item[i], RA_OK;
    rai_window_layout *e =
        &c->item[c->count < RA_WINDOW_LAYOUTS ? c->count++ : RA_WINDOW_LAYOUTS - 1];
    const int64_t nw = ra_window_count(g), n = ra_window_tokens(g);
    const int shifted = g->sd || g->sh || g->sw;
    memset(e, 0, sizeof *e);
    e->map = rai_arena_bytes(c->a, (size_t)((int64_t)B * nw * n) * sizeof(int32_t));
    if (shifted) e->mask = rai_arena_floats(c->a, (size_t)(nw * n * n));
    if (!e->map || (shifted && !e->mask)) return c->count--, nomem();
    ra_status st = rai_window_rowmap(e->map, B, g);
    if (!st && e->mask) st = ra_window_mask(e->mask, g);
    if (st) return c->count--, st;
    e->g = *g, e->b = B;
    *out = e;
    return RA_OK;
}
