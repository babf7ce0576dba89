/* test_vit_grad.c - the vit arch's backward pass against PyTorch autograd.
 *
 * Every case of vit_grads.txt (tools/make_vit_grad_fixtures.py) is loaded,
 * run through ra_model_forward_train and ra_model_backward with the dy of
 * the fixture, and y, dL/dx and the gradient of every parameter (by its name
 * in the file: timm or torchvision) compared with PyTorch's, each within
 * 1e-4 of that tensor's largest magnitude; the worst of each tensor is
 * printed, as llm.c's test_gpt2 does. Then, per case: a second training
 * step (with an inference forward in between) gives the same bits, a
 * second backward from the same tape too, and gradients accumulate. A
 * backward with no training forward, or after a refused one, is an error.
 * Finally central differences of L = sum(y * dy) (step 1e-2) on two small
 * fixture models and on a created model with drop_path_rate and LayerScale
 * (its training forward rerun with the same draws) check the largest and a
 * random entry of every parameter and of x.
 *
 *   test_vit_grad FIXTURES_DIR */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "relattn.h"

#include <stdint.h>
#include <string.h>

#define GRAD_TOL 1e-4

static const char *fixtures;
static int verbose = 1;

/* A float tensor of an open file (malloc'ed), its element count written;
 * NULL if absent. */
static float *get_f32(const ra_st_file *f, const char *name, int64_t *numel, int *ndim,
                      int64_t *shape) {
    const ra_st_tensor *t = ra_st_find(f, name);
    float *v = t ? malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v) : NULL;
    if (v && ra_st_to_f32(v, t) != RA_OK) {
        free(v);
        return NULL;
    }
    if (v) {
        *numel = t->numel;
        if (ndim) *ndim = t->ndim;
        for (int i = 0; shape && i < t->ndim; i++) shape[i] = t->shape[i];
    }
    return v;
}

/* max |a - b| / max |b| (max |b| of 0 counts as 1). */
static double scaled_err(const float *a, const float *b, int64_t n, double *scale) {
    double worst = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    *scale = s;
    return worst / (s > 0 ? s : 1.0);
}

static double worst_case;

/* One training step: forward_train, backward into zeroed grad and dx. */
static ra_status step(ra_model *m, float *grad, float *dx, int64_t nx, const float *x, int xd,
                      const int64_t *xs, const float *dy, int64_t ny, float **y) {
    int yd = 0;
    int64_t ys[4];
    memset(grad, 0, (size_t)ra_model_param_total(m) * sizeof *grad);
    memset(dx, 0, (size_t)nx * sizeof *dx);
    ra_status st = ra_model_forward_train(m, y, &yd, ys, x, xd, xs, NULL);
    if (st) return st;
    int64_t n = 1;
    for (int i = 0; i < yd; i++) n *= ys[i];
    if (n != ny) return RA_ERR_SHAPE;
    return ra_model_backward(m, grad, dx, dy);
}

static void run_case(const char *name) {
    char mp[512], gp[512];
    snprintf(mp, sizeof mp, "%s/%s.model.safetensors", fixtures, name);
    snprintf(gp, sizeof gp, "%s/%s.grad.safetensors", fixtures, name);
    ra_model *m = NULL;
    ra_st_file *gf = NULL;
    ra_status st = ra_model_load(&m, mp);
    CHECK(st == RA_OK, "%s: load: %s", name, ra_last_error());
    CHECK(ra_st_open(&gf, gp) == RA_OK, "%s: open %s", name, gp);
    if (!m || !gf) {
        ra_model_free(m);
        ra_st_close(gf);
        return;
    }
    CHECK(ra_model_trainable(m), "%s: vit is trainable", name);
    int xd = 0;
    int64_t xs[8], nx = 0, ny = 0, nyr = 0, ndx = 0;
    float *x = get_f32(gf, "x", &nx, &xd, xs);
    float *dy = get_f32(gf, "dy", &ny, NULL, NULL);
    float *yref = get_f32(gf, "y", &nyr, NULL, NULL);
    float *dxref = get_f32(gf, "grad.x", &ndx, NULL, NULL);
    const int64_t total = ra_model_param_total(m);
    float *grad = malloc((size_t)total * sizeof *grad);
    float *grad2 = malloc((size_t)total * sizeof *grad2);
    float *dx = malloc((size_t)nx * sizeof *dx), *dx2 = malloc((size_t)nx * sizeof *dx2);
    float *y = NULL, *y2 = NULL, *yi = NULL;
    CHECK(x && dy && yref && dxref && ny == nyr && ndx == nx, "%s: fixture tensors", name);
    if (!x || !dy || !yref || !dxref || ny != nyr || ndx != nx || !grad || !grad2 || !dx ||
        !dx2)
        goto out;

    /* a backward before any training forward is refused */
    st = ra_model_backward(m, grad, dx, dy);
    CHECK(st == RA_ERR_ARG, "%s: backward without forward_train gave %d", name, st);

    st = step(m, grad, dx, nx, x, xd, xs, dy, ny, &y);
    CHECK(st == RA_OK, "%s: training step: %s", name, ra_last_error());
    if (st) goto out;
    double scale, e = scaled_err(y, yref, ny, &scale), worst = e;
    CHECK(e <= GRAD_TOL, "%s: y error %.3g of scale %.3g", name, e, scale);
    if (verbose) printf("%s\n  %-44s %.2e (scale %.2e)\n", name, "y", e, scale);
    e = scaled_err(dx, dxref, nx, &scale);
    worst = e > worst ? e : worst;
    CHECK(e <= GRAD_TOL, "%s: grad.x error %.3g of scale %.3g", name, e, scale);
    if (verbose) printf("  %-44s %.2e (scale %.2e)\n", "grad.x", e, scale);
    for (int p = 0; p < ra_model_param_count(m); p++) {
        const ra_param_info *pi = ra_model_param(m, p);
        if (pi->offset < 0) continue;
        char key[300];
        snprintf(key, sizeof key, "grad.%s", pi->file_name);
        int64_t n = 0;
        float *ref = get_f32(gf, key, &n, NULL, NULL);
        CHECK(ref && n == pi->numel, "%s: %s missing or misshaped in the fixture", name, key);
        if (!ref || n != pi->numel) {
            free(ref);
            continue;
        }
        e = scaled_err(grad + pi->offset, ref, n, &scale);
        worst = e > worst ? e : worst;
        CHECK(e <= GRAD_TOL, "%s: %s error %.3g of scale %.3g", name, key, e, scale);
        if (verbose) printf("  %-44s %.2e (scale %.2e)\n", key, e, scale);
        free(ref);
    }
    printf("%s: worst gradient error %.2e of the tensor's scale\n", name, worst);
    if (worst > worst_case) worst_case = worst;

    /* the tape reused: a second step, with an inference forward between
     * the training forward and the backward, gives the same bits */
    {
        int yd = 0;
        int64_t ys[4];
        memset(grad2, 0, (size_t)total * sizeof *grad2);
        memset(dx2, 0, (size_t)nx * sizeof *dx2);
        st = ra_model_forward_train(m, &y2, &yd, ys, x, xd, xs, NULL);
        CHECK(st == RA_OK, "%s: second forward_train: %s", name, ra_last_error());
        CHECK(ra_model_forward(m, &yi, &yd, ys, x, xd, xs) == RA_OK, "%s: forward", name);
        if (yi) CHECK_CLOSE(yi, y, ny, 1e-5, 1e-5, "inference forward = training forward");
        st = st ? st : ra_model_backward(m, grad2, dx2, dy);
        CHECK(st == RA_OK, "%s: second backward: %s", name, ra_last_error());
        CHECK(y2 && memcmp(y, y2, (size_t)ny * sizeof *y) == 0, "%s: second y differs", name);
        CHECK(memcmp(grad, grad2, (size_t)total * sizeof *grad) == 0 &&
                  memcmp(dx, dx2, (size_t)nx * sizeof *dx) == 0,
              "%s: a second step gives other gradients", name);
        /* once more from the same tape: the gradients accumulate */
        st = ra_model_backward(m, grad2, dx2, dy);
        CHECK(st == RA_OK, "%s: third backward: %s", name, ra_last_error());
        double e2 = 0;
        for (int64_t i = 0; i < total; i++) {
            const double d = fabs(grad2[i] - 2.0 * grad[i]) / (1e-6 + fabs(2.0 * grad[i]));
            if (!(d <= e2)) e2 = d;
        }
        CHECK(e2 < 1e-5, "%s: backward twice is not twice the gradient (%.3g)", name, e2);
        /* dx NULL is allowed */
        CHECK(ra_model_backward(m, grad2, NULL, dy) == RA_OK, "%s: backward dx NULL: %s", name,
              ra_last_error());
    }

    /* a refused training forward leaves no tape to go back through */
    {
        int yd = 0;
        int64_t ys[4], bad[4] = {xs[0], xs[1] + 1, xs[2], xs[3]};
        float *yb = NULL;
        float *xb = calloc((size_t)(nx / xs[1] * (xs[1] + 1)), sizeof *xb);
        st = ra_model_forward_train(m, &yb, &yd, ys, xb, 4, bad, NULL);
        CHECK(st == RA_ERR_SHAPE, "%s: forward_train of a wrong shape gave %d", name, st);
        st = ra_model_backward(m, grad2, dx2, dy);
        CHECK(st == RA_ERR_ARG, "%s: backward after a refused forward gave %d", name, st);
        free(yb);
        free(xb);
    }
out:
    free(x), free(dy), free(yref), free(dxref), free(grad), free(grad2), free(dx), free(dx2);
    free(y), free(y2), free(yi);
    ra_st_close(gf);
    ra_model_free(m);
}

/* ---- finite differences --------------------------------------------------- */

/* With fd_rng, the loss is that of a training forward drawing from a copy
 * of it (the same drop-path draws every time). */
static const ra_rng *fd_rng;

/* L = sum(y * dy) of a forward, in double. */
static double loss_of(ra_model *m, const float *x, int xd, const int64_t *xs, const float *dy,
                      int64_t ny) {
    float *y = NULL;
    int yd = 0;
    int64_t ys[4];
    ra_rng r = fd_rng ? *fd_rng : (ra_rng){{0}};
    if ((fd_rng ? ra_model_forward_train(m, &y, &yd, ys, x, xd, xs, &r)
                : ra_model_forward(m, &y, &yd, ys, x, xd, xs)) != RA_OK)
        return NAN;
    double l = 0;
    for (int64_t i = 0; i < ny; i++) l += (double)y[i] * dy[i];
    free(y);
    return l;
}

static uint64_t lcg = 12345;
static int64_t rand_below(int64_t n) {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int64_t)((lcg >> 33) % (uint64_t)n);
}

/* Central difference of L along entry i of v (a weight or x), step h. */
static double central(ra_model *m, float *v, int64_t i, float h, const float *x, int xd,
                      const int64_t *xs, const float *dy, int64_t ny) {
    const float keep = v[i];
    v[i] = keep + h;
    const double lp = loss_of(m, x, xd, xs, dy, ny);
    v[i] = keep - h;
    const double lm = loss_of(m, x, xd, xs, dy, ny);
    v[i] = keep;
    return (lp - lm) / (2.0 * (double)h);
}

/* Entries checked in a tensor g (n) with scale s: its largest and one at
 * random. |fd - an| must be within 2e-3 * s + 2e-2 * |an|: rounding of L
 * in float32 over a step of 1e-2 is ~1e-5, truncation ~h^2 = 1e-4 of the
 * scale; a gradient off by a factor or a sign misses by far more. */
static void fd_tensor(ra_model *m, const char *case_name, const char *what, float *v,
                      const float *g, int64_t n, const float *x, int xd, const int64_t *xs,
                      const float *dy, int64_t ny, double *worst) {
    int64_t imax = 0;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(g[i]) > s) s = fabs(g[i]), imax = i;
    const int64_t pick[2] = {imax, rand_below(n)};
    for (int k = 0; k < 2; k++) {
        const int64_t i = pick[k];
        const double fd = central(m, v, i, 1e-2f, x, xd, xs, dy, ny);
        const double an = g[i], err = fabs(fd - an), tol = 2e-3 * s + 2e-2 * fabs(an) + 1e-6;
        if (err / tol > *worst) *worst = err / tol;
        CHECK(err <= tol, "%s: %s[%lld]: finite difference %.6g, backward %.6g (scale %.3g)",
              case_name, what, (long long)i, fd, an, s);
    }
}

static void fd_case(const char *name) {
    char mp[512], gp[512];
    snprintf(mp, sizeof mp, "%s/%s.model.safetensors", fixtures, name);
    snprintf(gp, sizeof gp, "%s/%s.grad.safetensors", fixtures, name);
    ra_model *m = NULL;
    ra_st_file *gf = NULL;
    CHECK(ra_model_load(&m, mp) == RA_OK && ra_st_open(&gf, gp) == RA_OK, "%s: fd load: %s",
          name, ra_last_error());
    if (!m || !gf) {
        ra_model_free(m);
        ra_st_close(gf);
        return;
    }
    int xd = 0;
    int64_t xs[8], nx = 0, ny = 0;
    float *x = get_f32(gf, "x", &nx, &xd, xs), *dy = get_f32(gf, "dy", &ny, NULL, NULL);
    const int64_t total = ra_model_param_total(m);
    float *grad = malloc((size_t)total * sizeof *grad), *dx = malloc((size_t)nx * sizeof *dx);
    float *y = NULL;
    ra_status st = x && dy && grad && dx ? step(m, grad, dx, nx, x, xd, xs, dy, ny, &y)
                                         : RA_ERR_NOMEM;
    CHECK(st == RA_OK, "%s: fd step: %s", name, ra_last_error());
    if (!st) {
        double worst = 0;
        float *w = ra_model_weights(m);
        for (int p = 0; p < ra_model_param_count(m); p++) {
            const ra_param_info *pi = ra_model_param(m, p);
            if (pi->offset >= 0)
                fd_tensor(m, name, pi->name, w + pi->offset, grad + pi->offset, pi->numel, x,
                          xd, xs, dy, ny, &worst);
        }
        fd_tensor(m, name, "x", x, dx, nx, x, xd, xs, dy, ny, &worst);
        printf("%s: finite differences, worst %.2f x tolerance\n", name, worst);
    }
    free(x), free(dy), free(grad), free(dx), free(y);
    ra_st_close(gf);
    ra_model_free(m);
}

/* Stochastic depth: a model made with drop_path_rate and LayerScale, its
 * weights made non-trivial; the training forward needs an rng, drops some
 * samples' branches, and its backward matches central differences of the
 * training forward with the same draws. */
static void drop_path_case(void) {
    const char *meta[] = {"arch", "vit", "img_size", "8", "patch_size", "4", "in_chans", "2",
                          "num_classes", "3", "embed_dim", "8", "depth", "3", "num_heads", "2",
                          "mlp_ratio", "2.0", "qkv_bias", "true", "init_values", "0.5",
                          "drop_path_rate", "0.6"};
    ra_model *m = NULL;
    CHECK(ra_model_create(&m, meta, 12, 11) == RA_OK, "drop_path create: %s", ra_last_error());
    if (!m) return;
    ra_rng rng;
    ra_rng_seed(&rng, 5);
    const int64_t total = ra_model_param_total(m), xs[4] = {4, 2, 8, 8}, nx = 4 * 2 * 64;
    const int64_t ny = 4 * 3;
    float *w = ra_model_weights(m), x[4 * 2 * 64], dy[12], dx[4 * 2 * 64];
    for (int64_t i = 0; i < total; i++) w[i] += (float)(ra_rng_uniform(&rng) - 0.5);
    for (int64_t i = 0; i < nx; i++) x[i] = (float)ra_rng_normal(&rng);
    for (int64_t i = 0; i < ny; i++) dy[i] = (float)ra_rng_normal(&rng);
    float *grad = calloc((size_t)total, sizeof *grad), *y = NULL, *yi = NULL;
    int yd = 0;
    int64_t ys[4];
    ra_status st = ra_model_forward_train(m, &y, &yd, ys, x, 4, xs, NULL);
    CHECK(st == RA_ERR_ARG, "drop_path without an rng gave %d", st);
    ra_rng draws;
    ra_rng_seed(&draws, 99);
    ra_rng r = draws;
    memset(dx, 0, sizeof dx);
    st = ra_model_forward_train(m, &y, &yd, ys, x, 4, xs, &r);
    if (!st) st = ra_model_backward(m, grad, dx, dy);
    CHECK(st == RA_OK, "drop_path step: %s", ra_last_error());
    CHECK(ra_model_forward(m, &yi, &yd, ys, x, 4, xs) == RA_OK, "drop_path inference");
    double diff = 0;
    for (int64_t i = 0; y && yi && i < ny; i++) diff += fabs(y[i] - yi[i]);
    CHECK(diff > 1e-3, "drop_path: the training forward dropped nothing (%g)", diff);
    if (!st) {
        double worst = 0;
        fd_rng = &draws;
        for (int p = 0; p < ra_model_param_count(m); p++) {
            const ra_param_info *pi = ra_model_param(m, p);
            fd_tensor(m, "drop_path", pi->name, w + pi->offset, grad + pi->offset, pi->numel, x,
                      4, xs, dy, ny, &worst);
        }
        fd_tensor(m, "drop_path", "x", x, dx, nx, x, 4, xs, dy, ny, &worst);
        fd_rng = NULL;
        printf("drop_path: finite differences, worst %.2f x tolerance\n", worst);
    }
    free(grad), free(y), free(yi);
    ra_model_free(m);
}

int main(int argc, char **argv) {
    fixtures = argc > 1 ? argv[1] : "tests/fixtures";
    if (argc > 2 && strcmp(argv[2], "-q") == 0) verbose = 0;
    char lp[512], line[256];
    snprintf(lp, sizeof lp, "%s/vit_grads.txt", fixtures);
    FILE *f = fopen(lp, "r");
    CHECK(f != NULL, "cannot open %s", lp);
    int cases = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        run_case(line);
        cases++;
    }
    if (f) fclose(f);
    CHECK(cases >= 6, "only %d cases", cases);
    printf("%d cases: worst gradient error %.2e of the tensor's scale (tolerance %.0e)\n", cases,
           worst_case, GRAD_TOL);

    fd_case("vit_grad_opts");
    fd_case("vit_grad_feat");
    drop_path_case();

    /* a model made from hyperparameters trains too */
    {
        const char *meta[] = {"arch", "vit", "img_size", "8", "patch_size", "4", "in_chans",
                              "1", "num_classes", "2", "embed_dim", "8", "depth", "1",
                              "num_heads", "2", "mlp_ratio", "2.0", "qkv_bias", "true"};
        ra_model *m = NULL;
        CHECK(ra_model_create(&m, meta, 10, 7) == RA_OK, "create: %s", ra_last_error());
        if (m) {
            float x[64], dy[2] = {1.0f, -1.0f}, *y = NULL;
            float *grad = calloc((size_t)ra_model_param_total(m), sizeof *grad);
            for (int i = 0; i < 64; i++) x[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
            const int64_t xs[4] = {1, 1, 8, 8};
            int yd = 0;
            int64_t ys[4];
            CHECK(ra_model_backward(m, grad, NULL, dy) == RA_ERR_ARG, "created: no tape yet");
            CHECK(ra_model_forward_train(m, &y, &yd, ys, x, 4, xs, NULL) == RA_OK &&
                      ra_model_backward(m, grad, NULL, dy) == RA_OK,
                  "created model step: %s", ra_last_error());
            double s = 0;
            for (int64_t i = 0; grad && i < ra_model_param_total(m); i++) s += fabs(grad[i]);
            CHECK(s > 0 && isfinite(s), "created model: gradient sum %g", s);
            free(y);
            free(grad);
            ra_model_free(m);
        }
    }
    return check_done();
}
