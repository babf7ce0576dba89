/* head.c - the pooled head, forward and backward (head.h). Inference
 * normalises in place; the training forward runs the same calls out of
 * place, keeping the statistics: the same bits. */
#include "layers/head.h"

#include <math.h>
#include <string.h>

static ra_status nomem(void) { return rai_fail(RA_ERR_NOMEM, "head: out of memory"); }

/* ---- pooling ---------------------------------------------------------------- */

/* pooled (outer, C) from the final tokens x (B, N, C). */
static void pool_forward(const rai_head *h, float *pooled, const float *x, int B, int64_t N) {
    const int C = h->dim;
    const int64_t skip = h->skip, n_pool = N - skip;
    if (h->pool == RAI_POOL_NONE) {
        memcpy(pooled, x, (size_t)(B * N * C) * sizeof(float));
    } else if (h->pool == RAI_POOL_TOKEN) {
        for (int b = 0; b < B; b++)
            memcpy(pooled + (int64_t)b * C, x + (int64_t)b * N * C, (size_t)C * sizeof(float));
    } else {
        for (int b = 0; b < B; b++) {
            const float *xb = x + ((int64_t)b * N + skip) * C;
            float *pb = pooled + (int64_t)b * C;
            if (h->pool != RAI_POOL_MAX) ra_mean_tokens_forward(pb, xb, 1, n_pool, C);
            if (h->pool == RAI_POOL_AVG) continue;
            for (int k = 0; k < C; k++) {
                float mx = xb[k];
                for (int64_t t = 1; t < n_pool; t++) {
                    const float e = xb[t * C + k];
                    if (e > mx || isnan(e)) mx = e;   /* amax propagates NaN */
                    if (isnan(mx)) break;
                }
                pb[k] = h->pool == RAI_POOL_MAX ? mx : 0.5f * (mx + pb[k]);
            }
        }
    }
}

/* dx (B, N, C) += the gradient of the pooling from dq (outer, C), with the
 * final tokens x (B, N, C) for max pooling: amax's gradient is split evenly
 * between the tokens equal to the maximum, as PyTorch's amax backward;
 * avgmax's 0.5 * (amax + mean) gives each half of dq. half (B, C) is
 * scratch. */
static void pool_backward(const rai_head *h, float *dx, const float *dq, const float *x,
                          float *half, int B, int64_t N) {
    const int C = h->dim;
    const int64_t skip = h->skip, n_pool = N - skip;
    if (h->pool == RAI_POOL_NONE) {
        ra_add(dx, dx, dq, B * N * C);
        return;
    }
    if (h->pool == RAI_POOL_TOKEN) {
        for (int b = 0; b < B; b++) {
            float *d = dx + (int64_t)b * N * C;
            for (int k = 0; k < C; k++) d[k] += dq[(int64_t)b * C + k];
        }
        return;
    }
    const float *g = dq;
    if (h->pool == RAI_POOL_AVGMAX) {
        for (int64_t i = 0; i < (int64_t)B * C; i++) half[i] = 0.5f * dq[i];
        g = half;
    }
    for (int b = 0; b < B; b++) {
        float *db = dx + ((int64_t)b * N + skip) * C;
        const float *xb = x + ((int64_t)b * N + skip) * C, *gb = g + (int64_t)b * C;
        if (h->pool != RAI_POOL_MAX) ra_mean_tokens_backward(db, gb, 1, n_pool, C);
        if (h->pool == RAI_POOL_AVG) continue;
        for (int k = 0; k < C; k++) {
            float mx = xb[k];
            for (int64_t t = 1; t < n_pool; t++)
                if (xb[t * C + k] > mx) mx = xb[t * C + k];
            int64_t count = 0;
            for (int64_t t = 0; t < n_pool; t++) count += xb[t * C + k] == mx;
            if (!count) continue;   /* NaN: nothing equals it */
            const float share = gb[k] / (float)count;
            for (int64_t t = 0; t < n_pool; t++)
                if (xb[t * C + k] == mx) db[t * C + k] += share;
        }
    }
}

/* ---- the head --------------------------------------------------------------- */

size_t rai_head_tape_layout(rai_head_tape *t, const rai_head *h, int B, int64_t N,
                            const float *x, float *base) {
    const size_t C = (size_t)h->dim, rows = (size_t)B * (size_t)N;
    const size_t outer = (size_t)rai_head_rows(h, B, N);
    rai_head_tape z = {.x = x};
    size_t off = 0;
    z.mean = h->nw ? rai_carve(base, &off, rows) : NULL;
    z.rstd = h->nw ? rai_carve(base, &off, rows) : NULL;
    z.xo = h->nw ? rai_carve(base, &off, rows * C) : (float *)x;
    z.pooled = rai_carve(base, &off, outer * C);
    z.pmean = h->fw ? rai_carve(base, &off, outer) : NULL;
    z.prstd = h->fw ? rai_carve(base, &off, outer) : NULL;
    z.pn = h->fw ? rai_carve(base, &off, outer * C) : z.pooled;
    if (base) *t = z;
    return off;
}

ra_status rai_head_forward(const rai_head *h, float *y, rai_head_tape *t, float *x, int B,
                           int64_t N, rai_arena *a) {
    const int C = h->dim;
    const int64_t rows = (int64_t)B * N, outer = rai_head_rows(h, B, N);
    const size_t mark = rai_arena_mark(a);
    /* in place without a tape, the tape's buffers with one */
    float *xo = t ? t->xo : x;
    float *pooled = t ? t->pooled : rai_arena_floats(a, (size_t)(outer * C));
    if (!pooled) return nomem();
    float *pn = t ? t->pn : pooled;
    if (h->nw)
        ra_layernorm_forward(xo, t ? t->mean : NULL, t ? t->rstd : NULL, x, h->nw, h->nb, rows, C,
                             h->eps);
    pool_forward(h, pooled, xo, B, N);
    if (h->fw)
        ra_layernorm_forward(pn, t ? t->pmean : NULL, t ? t->prstd : NULL, pooled, h->fw, h->fb,
                             outer, C, h->eps);
    if (h->w)
        ra_linear_forward(y, pn, h->w, h->b, outer, h->classes, C);
    else   /* no classifier: the features */
        memcpy(y, pn, (size_t)(outer * C) * sizeof *y);
    rai_arena_reset(a, mark);
    return RA_OK;
}

ra_status rai_head_backward(const rai_head *h, float *dx, const rai_head_grads *g,
                            const float *dy, const rai_head_tape *t, int B, int64_t N,
                            rai_arena *a) {
    const int C = h->dim;
    const int64_t rows = (int64_t)B * N, outer = rai_head_rows(h, B, N);
    const size_t mark = rai_arena_mark(a);
    float *dp = h->w ? rai_arena_floats(a, (size_t)(outer * C)) : NULL;
    float *dq = h->fw ? rai_arena_floats(a, (size_t)(outer * C)) : NULL;
    float *half = rai_arena_floats(a, (size_t)B * C);
    float *dt = h->nw ? rai_arena_floats(a, (size_t)(rows * C)) : NULL;
    if ((h->w && !dp) || (h->fw && !dq) || !half || (h->nw && !dt))
        return rai_arena_reset(a, mark), nomem();
    /* classifier, fc_norm: the gradient of the pooled features */
    const float *d = dy;
    if (h->w) {
        rai_zero(dp, outer * C);
        ra_linear_backward(dp, g->w, g->b, dy, t->pn, h->w, outer, h->classes, C);
        d = dp;
    }
    if (h->fw) {
        rai_zero(dq, outer * C);
        ra_layernorm_backward(dq, g->fw, g->fb, d, t->pooled, t->pmean, t->prstd, h->fw, outer, C);
        d = dq;
    }
    /* pooling, the norm over the tokens */
    float *dxo = h->nw ? dt : dx;
    rai_zero(dxo, rows * C);
    pool_backward(h, dxo, d, t->xo, half, B, N);
    if (h->nw) {
        rai_zero(dx, rows * C);
        ra_layernorm_backward(dx, g->nw, g->nb, dt, t->x, t->mean, t->rstd, h->nw, rows, C);
    }
    rai_arena_reset(a, mark);
    return RA_OK;
}
