/* net_grad_check.h - what the network gradient tests share (test_net_grad.c,
 * test_swin3d_net.c): one training step, the loss sum(y * dy), central
 * differences of it in chosen parameters, and the stochastic-depth checks
 * of a created network. Include after check.h and grad_check.h. */
#ifndef RA_NET_GRAD_CHECK_H
#define RA_NET_GRAD_CHECK_H

#include <string.h>

typedef struct {
    ra_model *m;
    float *x, *dy;
    const ra_st_tensor *tx;
    int64_t ny;
    const ra_rng *rng;   /* drop-path: each training forward draws from a copy */
} case_io;

/* One training step: y (allocated), the flat gradient and dx (allocated). */
static inline ra_status step(case_io *c, float **y, float **grad, float **dx) {
    int nd;
    int64_t sh[4];
    *grad = calloc((size_t)ra_model_param_total(c->m) + 1, sizeof **grad);
    *dx = calloc((size_t)c->tx->numel, sizeof **dx);
    *y = NULL;
    ra_rng r = c->rng ? *c->rng : (ra_rng){{0}};
    ra_status s = ra_model_forward_train(c->m, y, &nd, sh, c->x, c->tx->ndim, c->tx->shape,
                                         c->rng ? &r : NULL);
    if (!s) s = ra_model_backward(c->m, *grad, *dx, c->dy);
    return s;
}

/* L = sum(y * dy) in double; with c->rng, of a training forward drawing
 * from a copy of it (the same drop-path draws at every call) */
static inline double loss_of(case_io *c) {
    float *y = NULL;
    int nd;
    int64_t sh[4];
    ra_rng r = c->rng ? *c->rng : (ra_rng){{0}};
    if (c->rng ? ra_model_forward_train(c->m, &y, &nd, sh, c->x, c->tx->ndim, c->tx->shape, &r)
               : ra_model_forward(c->m, &y, &nd, sh, c->x, c->tx->ndim, c->tx->shape))
        return NAN;
    double l = 0;
    for (int64_t i = 0; i < c->ny; i++) l += (double)y[i] * c->dy[i];
    free(y);
    return l;
}

/* Central differences in float32 against the analytic gradient, for the
 * largest-gradient entries of the parameters named in want (the bias table
 * or Shaw's tables, a qkv weight, a norm, the patch embedding, ...) of a
 * small network m on input x; rng: the training forward's draws (NULL:
 * none, the loss then of the inference forward). */
static inline void fd_check(ra_model *m, float *x, const ra_st_tensor *tx, const char *const *want,
                     int nwant, const ra_rng *rng) {
    case_io c = {.m = m, .x = x, .tx = tx, .rng = rng};
    float *y = NULL, *grad = NULL, *dx = NULL;
    int nd;
    int64_t sh[4];
    if (c.x && !ra_model_forward(c.m, &y, &nd, sh, c.x, c.tx->ndim, c.tx->shape)) {
        c.ny = sh[0] * sh[1];
        c.dy = malloc((size_t)c.ny * sizeof *c.dy);
        ra_rng r;
        ra_rng_seed(&r, 5);
        ra_rng_fill_normal(&r, c.dy, c.ny, 0, 1);
        free(y);
        CHECK(step(&c, &y, &grad, &dx) == RA_OK, "fd: step: %s", ra_last_error());
        float *w = ra_model_weights(c.m);
        int tested = 0;
        for (int i = 0; i < ra_model_param_count(c.m); i++) {
            const ra_param_info *pi = ra_model_param(c.m, i);
            int hit = 0;
            for (int k = 0; k < nwant; k++) hit |= !strcmp(pi->name, want[k]);
            if (!hit) continue;
            int64_t at = 0;   /* the entry with the largest gradient */
            for (int64_t e = 1; e < pi->numel; e++)
                if (fabsf(grad[pi->offset + e]) > fabsf(grad[pi->offset + at])) at = e;
            float *v = w + pi->offset + at;
            const float keep = *v, hstep = 1e-2f;
            *v = keep + hstep;
            const double lp = loss_of(&c);
            *v = keep - hstep;
            const double lm = loss_of(&c);
            *v = keep;
            const double fd = (lp - lm) / (2.0 * hstep), an = grad[pi->offset + at];
            CHECK(fabs(fd - an) <= 2e-2 * fabs(an) + 1e-3, "fd %s[%lld]: numeric %.6g, analytic %.6g",
                  pi->name, (long long)at, fd, an);
            printf("  finite difference %-52s %.5g vs %.5g\n", pi->name, fd, an);
            tested++;
        }
        CHECK(tested == nwant, "fd: %d parameters tested of %d", tested, nwant);
    }
    free(y), free(grad), free(dx), free(c.dy);
}

/* A created network with stochastic depth, as drop_path_check sees it:
 * meta (nmeta pairs, its values at rate_at and depths_at rewritten: the
 * rate must be 0.6 with at least three blocks), x of x_ndim axes; want: the
 * parameters of the finite differences (nwant); depths1 two blocks in all,
 * whose second one's parameters start with last, and ends (4) the
 * parameters that end its branches. */
typedef struct {
    const char *name;
    const char **meta;
    int nmeta, rate_at, depths_at;
    int x_ndim;
    int64_t x_shape[5];
    const char *const *want;
    int nwant;
    const char *depths1, *last;
    const char *const *ends;
} drop_path_spec;

/* Stochastic depth (metadata drop_path_rate): block i of all drops with
 * rate * i / (blocks - 1), each sample on its own. The backward against
 * finite differences of the training forward with the same draws; the
 * draws change y; no generator, or a rate outside [0, 1], is refused. At
 * rate 1 over two blocks the first never drops, the last always (its rate
 * is the whole rate), whatever the draws: the training forward is the
 * inference of the model whose last block adds nothing (the weights that
 * end its branches zeroed), and that block's parameters get no gradient. */
static inline void drop_path_check(const drop_path_spec *sp) {
    const char *arch = sp->name, **meta = sp->meta;
    ra_model *m = NULL;
    ra_status s = ra_model_create(&m, meta, sp->nmeta, 7);
    CHECK(s == RA_OK, "%s drop_path create: %s", arch, ra_last_error());
    if (s) return;
    float *w = ra_model_weights(m);
    ra_rng r;
    ra_rng_seed(&r, 13);
    for (int i = 0; i < ra_model_param_count(m); i++) {   /* every term of the loss matters */
        const ra_param_info *pi = ra_model_param(m, i);
        if (pi->ndim >= 2) ra_rng_fill_normal(&r, w + pi->offset, pi->numel, 0, 0.3f);
    }
    ra_st_tensor tx = {.name = "x", .dtype = RA_DTYPE_F32, .ndim = sp->x_ndim, .numel = 1};
    for (int a = 0; a < sp->x_ndim; a++) tx.shape[a] = sp->x_shape[a], tx.numel *= sp->x_shape[a];
    float *x = malloc((size_t)tx.numel * sizeof *x);
    ra_rng_fill_normal(&r, x, tx.numel, 0, 1);
    float *y = NULL, *yi = NULL, *y2 = NULL;
    int nd;
    int64_t sh[4];
    CHECK(ra_model_forward_train(m, &y, &nd, sh, x, sp->x_ndim, tx.shape, NULL) == RA_ERR_ARG,
          "%s: drop_path without a random generator: %s", arch, ra_last_error());
    ra_rng draws, d1, d2;
    ra_rng_seed(&draws, 99);
    d1 = d2 = draws;
    s = ra_model_forward_train(m, &y, &nd, sh, x, sp->x_ndim, tx.shape, &d1);
    if (!s) s = ra_model_forward_train(m, &y2, &nd, sh, x, sp->x_ndim, tx.shape, &d2);
    if (!s) s = ra_model_forward(m, &yi, &nd, sh, x, sp->x_ndim, tx.shape);
    CHECK(s == RA_OK, "%s drop_path forwards: %s", arch, ra_last_error());
    if (!s) {
        double diff = 0;
        for (int64_t i = 0; i < sh[0] * sh[1]; i++) diff += fabs(y[i] - yi[i]);
        CHECK(diff > 1e-3, "%s: the training forward dropped nothing (%g)", arch, diff);
        CHECK(!memcmp(y, y2, (size_t)(sh[0] * sh[1]) * sizeof *y),
              "%s: the same draws gave another y", arch);
    }
    printf("%s with drop_path_rate %s:\n", arch, meta[sp->rate_at]);
    fd_check(m, x, &tx, sp->want, sp->nwant, &draws);
    free(y), free(y2), free(yi);
    y = yi = NULL;
    ra_model_free(m);

    const char *rate = meta[sp->rate_at], *depths = meta[sp->depths_at];
    meta[sp->rate_at] = "1.5";   /* outside [0, 1] */
    CHECK(ra_model_create(&m, meta, sp->nmeta, 7) == RA_ERR_FORMAT &&
              strstr(ra_last_error(), "drop_path_rate"),
          "%s: drop_path_rate 1.5 accepted or not named: %s", arch, ra_last_error());

    meta[sp->depths_at] = sp->depths1, meta[sp->rate_at] = "1";
    s = ra_model_create(&m, meta, sp->nmeta, 7);
    meta[sp->depths_at] = depths, meta[sp->rate_at] = rate;
    CHECK(s == RA_OK, "%s rate 1: %s", arch, ra_last_error());
    if (s) {
        free(x);
        return;
    }
    w = ra_model_weights(m);
    for (int i = 0; i < ra_model_param_count(m); i++) {
        const ra_param_info *pi = ra_model_param(m, i);
        if (pi->ndim >= 2) ra_rng_fill_normal(&r, w + pi->offset, pi->numel, 0, 0.3f);
    }
    const int64_t ny = sh[0] * sh[1];
    float *dy = malloc((size_t)ny * sizeof *dy),
          *grad = calloc((size_t)ra_model_param_total(m), sizeof *grad);
    ra_rng_fill_normal(&r, dy, ny, 0, 1);
    d1 = draws;
    s = ra_model_forward_train(m, &y, &nd, sh, x, sp->x_ndim, tx.shape, &d1);
    if (!s) s = ra_model_backward(m, grad, NULL, dy);
    CHECK(s == RA_OK, "%s rate 1 step: %s", arch, ra_last_error());
    const char *last = sp->last;
    int zeroed = 0;
    for (int i = 0; !s && i < ra_model_param_count(m); i++) {
        const ra_param_info *pi = ra_model_param(m, i);
        if (strncmp(pi->name, last, strlen(last))) continue;
        double g = 0;
        for (int64_t e = 0; e < pi->numel; e++) g += fabs(grad[pi->offset + e]);
        CHECK(g == 0, "%s rate 1: %s has gradient %g", arch, pi->name, g);
        for (int k = 0; k < 4; k++)
            if (!strcmp(pi->name + strlen(last), sp->ends[k]))
                memset(w + pi->offset, 0, (size_t)pi->numel * sizeof *w), zeroed++;
    }
    if (!s) s = ra_model_forward(m, &yi, &nd, sh, x, sp->x_ndim, tx.shape);
    CHECK(s == RA_OK && zeroed == 4 && rel_err(y, yi, sh[0] * sh[1]) <= 1e-5,
          "%s rate 1: the training forward is not the model without its last block (%d zeroed, "
          "%.3g)", arch, zeroed, s ? -1.0 : rel_err(y, yi, sh[0] * sh[1]));
    free(y), free(yi), free(grad), free(dy), free(x);
    ra_model_free(m);
}

#endif
