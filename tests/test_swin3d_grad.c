/* test_swin3d_grad.c - the training pass of the 3-D window block (arch
 * swin_block_3d) against PyTorch autograd and against finite differences.
 *
 * Every case of grads3d.txt (tools/swin3d_twin.py --grad-fixtures: Video
 * Swin self blocks with and without shift, padding, frame / row clamps and
 * a spatial window clamped below its size, RSTT cross blocks D1=3 / D2=2
 * with and without a clamp; both naming schemes) holds the model file and
 * x (D, H, W, C), dy, PyTorch's y, grad.x and grad.NAME for every
 * parameter (NAME as in the model file), from sum(y * dy) in float32. For
 * each kernel the CPU supports, ra_model_forward_train must give y and
 * ra_model_backward every gradient within 1e-4 of the tensor's max |value|
 * (the worst of each tensor is printed); a second backward into fresh
 * buffers gives the same bits, and one into the same buffers doubles them
 * (gradients accumulate). Then central finite differences of
 * L = sum(y * dy) through ra_model_forward, on the entries of largest
 * gradient and on pseudo-random ones of every parameter and of x, for the
 * smallest self and cross case, and a backward without a training forward
 * is refused.
 *
 *   test_swin3d_grad FIXTURES_DIR */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "relattn.h"

#include <stdint.h>
#include <string.h>

#define GRAD_RTOL 1e-4   /* of the tensor's max |value| */

static const char *fixtures;
static double worst_all;
static char worst_what[300];

/* A tensor of a file as floats (malloc), or NULL. */
static float *tensor_f32(const ra_st_file *f, const char *name, int64_t *numel) {
    const ra_st_tensor *t = ra_st_find(f, name);
    if (!t) return NULL;
    float *v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
    if (v && ra_st_to_f32(v, t) != RA_OK) {
        free(v);
        return NULL;
    }
    if (numel) *numel = t->numel;
    return v;
}

/* max |a - e| / max |e| */
static double rel_err(const float *a, const float *e, int64_t n, double *emax_out) {
    double dmax = 0, emax = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - e[i]);
        if (!(d <= dmax)) dmax = isnan(d) ? INFINITY : d;
        if (fabs(e[i]) > emax) emax = fabs(e[i]);
    }
    if (emax_out) *emax_out = emax;
    return emax > 0 ? dmax / emax : dmax;
}

typedef struct gcase {
    char name[128];
    ra_model *m;
    ra_st_file *f;
    float *x, *dy, *y, *gx;
    int64_t shape[4], nx, ny;
} gcase;

static int open_case(gcase *c, const char *name) {
    char p[600];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(p, sizeof p, "%s/%s.model.safetensors", fixtures, name);
    ra_status st = ra_model_load(&c->m, p);
    CHECK(st == RA_OK, "%s: load: %s", name, ra_last_error());
    if (st) return 0;
    snprintf(p, sizeof p, "%s/%s.grad.safetensors", fixtures, name);
    st = ra_st_open(&c->f, p);
    CHECK(st == RA_OK, "%s: %s", name, ra_last_error());
    if (st) return 0;
    const ra_st_tensor *tx = ra_st_find(c->f, "x");
    CHECK(tx && tx->ndim == 4, "%s: no 4-D x", name);
    if (!tx || tx->ndim != 4) return 0;
    memcpy(c->shape, tx->shape, sizeof c->shape);
    int64_t ndy = 0, ngx = 0;
    c->x = tensor_f32(c->f, "x", &c->nx);
    c->dy = tensor_f32(c->f, "dy", &ndy);
    c->y = tensor_f32(c->f, "y", &c->ny);
    c->gx = tensor_f32(c->f, "grad.x", &ngx);
    CHECK(c->x && c->dy && c->y && c->gx && ndy == c->ny && ngx == c->nx,
          "%s: x, dy, y, grad.x", name);
    return c->x && c->dy && c->y && c->gx && ndy == c->ny && ngx == c->nx;
}

static void close_case(gcase *c) {
    ra_model_free(c->m);
    ra_st_close(c->f);
    free(c->x), free(c->dy), free(c->y), free(c->gx);
}

/* One training forward and backward; grad (total) and dx (nx) zeroed here. */
static int train_step(gcase *c, float *grad, float *dx, float **y) {
    int ynd = 0;
    int64_t ysh[4];
    ra_status st = ra_model_forward_train(c->m, y, &ynd, ysh, c->x, 4, c->shape, NULL);
    CHECK(st == RA_OK, "%s: forward_train: %s", c->name, ra_last_error());
    if (st) return 0;
    CHECK(ynd == 4 && ysh[0] * ysh[1] * ysh[2] * ysh[3] == c->ny, "%s: y shape", c->name);
    memset(grad, 0, (size_t)ra_model_param_total(c->m) * sizeof *grad);
    memset(dx, 0, (size_t)c->nx * sizeof *dx);
    st = ra_model_backward(c->m, grad, dx, c->dy);
    CHECK(st == RA_OK, "%s: backward: %s", c->name, ra_last_error());
    return st == RA_OK;
}

static void note(const char *cname, const char *kname, const char *what, double e) {
    if (e > worst_all) {
        worst_all = e;
        snprintf(worst_what, sizeof worst_what, "%.100s %.20s %.100s", cname, kname, what);
    }
}

/* Every gradient of the case against PyTorch with the current kernel. */
static void compare_case(gcase *c, int verbose) {
    const char *kname = ra_kernel_name(ra_kernel_current());
    const int64_t total = ra_model_param_total(c->m);
    float *grad = malloc((size_t)total * sizeof *grad), *dx = malloc((size_t)c->nx * sizeof *dx);
    float *grad2 = malloc((size_t)total * sizeof *grad2),
          *dx2 = malloc((size_t)c->nx * sizeof *dx2), *y = NULL;
    if (!grad || !dx || !grad2 || !dx2) {
        CHECK(0, "out of memory");
        goto done;
    }
    if (!train_step(c, grad, dx, &y)) goto done;
    double e = rel_err(y, c->y, c->ny, NULL), case_worst = e;
    CHECK(e <= GRAD_RTOL, "%s (%s): y off by %.3g of max |y|", c->name, kname, e);
    note(c->name, kname, "y", e);
    /* the inference forward gives the same y */
    float *yi = NULL;
    int ynd;
    int64_t ysh[4];
    if (ra_model_forward(c->m, &yi, &ynd, ysh, c->x, 4, c->shape) == RA_OK) {
        CHECK(rel_err(yi, y, c->ny, NULL) <= 1e-6, "%s: forward and forward_train differ",
              c->name);
        free(yi);
    } else {
        CHECK(0, "%s: forward: %s", c->name, ra_last_error());
    }
    e = rel_err(dx, c->gx, c->nx, NULL);
    if (verbose) printf("  %-26s %-7s %-36s %.2e\n", c->name, kname, "grad.x", e);
    CHECK(e <= GRAD_RTOL, "%s (%s): grad.x off by %.3g of its max", c->name, kname, e);
    note(c->name, kname, "grad.x", e);
    if (e > case_worst) case_worst = e;
    for (int i = 0; i < ra_model_param_count(c->m); i++) {
        const ra_param_info *pi = ra_model_param(c->m, i);
        if (pi->offset < 0) continue;
        char nm[300];
        snprintf(nm, sizeof nm, "grad.%s", pi->file_name);
        int64_t n = 0;
        float *ref = tensor_f32(c->f, nm, &n);
        CHECK(ref && n == pi->numel, "%s: %s missing or of %lld values", c->name, nm,
              (long long)n);
        if (!ref || n != pi->numel) {
            free(ref);
            continue;
        }
        double emax;
        e = rel_err(grad + pi->offset, ref, n, &emax);
        if (verbose) printf("  %-26s %-7s %-36s %.2e (max |g| %.2g)\n", c->name, kname, nm, e,
                            emax);
        CHECK(e <= GRAD_RTOL, "%s (%s): %s off by %.3g of its max", c->name, kname, nm, e);
        CHECK(emax > 0, "%s: %s is zero: the fixture does not test it", c->name, nm);
        note(c->name, kname, nm, e);
        if (e > case_worst) case_worst = e;
        free(ref);
    }
    printf("  %-26s %-7s worst %.2e\n", c->name, kname, case_worst);

    /* the tape is only read: again into fresh buffers gives the same bits,
     * and into the same buffers twice the gradient */
    memset(grad2, 0, (size_t)total * sizeof *grad2);
    memset(dx2, 0, (size_t)c->nx * sizeof *dx2);
    ra_status st = ra_model_backward(c->m, grad2, dx2, c->dy);
    CHECK(st == RA_OK && memcmp(grad, grad2, (size_t)total * sizeof *grad) == 0 &&
          memcmp(dx, dx2, (size_t)c->nx * sizeof *dx) == 0,
          "%s (%s): a second backward gives other gradients", c->name, kname);
    st = ra_model_backward(c->m, grad2, NULL, c->dy);
    double dbl = 0;
    for (int i = 0; i < ra_model_param_count(c->m); i++) {
        const ra_param_info *pi = ra_model_param(c->m, i);
        if (pi->offset < 0) continue;
        for (int64_t j = 0; j < pi->numel; j++) grad[pi->offset + j] *= 2;
        e = rel_err(grad2 + pi->offset, grad + pi->offset, pi->numel, NULL);
        if (e > dbl) dbl = e;
    }
    CHECK(st == RA_OK && dbl <= 1e-6, "%s: a backward does not accumulate (%.3g)", c->name,
          dbl);
done:
    free(grad), free(dx), free(grad2), free(dx2), free(y);
}

/* ---- finite differences --------------------------------------------------- */

static int fd_loss(gcase *c, const float *x, double *loss) {
    float *y = NULL;
    int ynd;
    int64_t ysh[4];
    if (ra_model_forward(c->m, &y, &ynd, ysh, x, 4, c->shape) != RA_OK) return 0;
    double l = 0;
    for (int64_t i = 0; i < c->ny; i++) l += (double)y[i] * c->dy[i];
    free(y);
    *loss = l;
    return 1;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Compare (fd, an) of one entry: fails when the analytic gradient is wrong
 * by more than float32 noise of the central difference. */
static double fd_err(double fd, double an, double scale) {
    return fabs(fd - an) / (5e-4 * scale + 2e-3 * fabs(an) + 2e-4);
}

/* Central differences with step 1e-2 on some entries of every parameter
 * and of x. */
static void fd_case(gcase *c) {
    const int64_t total = ra_model_param_total(c->m);
    float *grad = malloc((size_t)total * sizeof *grad), *dx = malloc((size_t)c->nx * sizeof *dx);
    float *xp = malloc((size_t)c->nx * sizeof *xp), *y = NULL;
    float *w = ra_model_weights(c->m);
    uint64_t seed = 12345;
    int n = 0;
    double worst = 0;
    if (!grad || !dx || !xp || !train_step(c, grad, dx, &y)) goto done;
    const double h = 1e-2;
    for (int i = 0; i < ra_model_param_count(c->m); i++) {
        const ra_param_info *pi = ra_model_param(c->m, i);
        if (pi->offset < 0) continue;
        const float *g = grad + pi->offset;
        int64_t arg = 0;
        double scale = 0;
        for (int64_t j = 0; j < pi->numel; j++)
            if (fabs(g[j]) > scale) scale = fabs(g[j]), arg = j;
        const int64_t pick[3] = {arg, (int64_t)(lcg(&seed) % (uint64_t)pi->numel),
                                 (int64_t)(lcg(&seed) % (uint64_t)pi->numel)};
        for (int k = 0; k < 3; k++) {
            float *p = w + pi->offset + pick[k];
            const float keep = *p;
            double lp = 0, lm = 0;
            *p = keep + (float)h;
            int ok = fd_loss(c, c->x, &lp);
            *p = keep - (float)h;
            ok = ok && fd_loss(c, c->x, &lm);
            *p = keep;
            const double hh = ((double)(keep + (float)h) - (double)(keep - (float)h)) / 2;
            const double fd = (lp - lm) / (2 * hh), e = fd_err(fd, g[pick[k]], scale);
            CHECK(ok && e <= 1.0, "%s: d/d %s[%lld]: finite difference %.6g, backward %.6g",
                  c->name, pi->name, (long long)pick[k], fd, g[pick[k]]);
            if (e > worst) worst = e;
            n++;
        }
    }
    /* input entries: the largest gradient, then some spread over x (a cross
     * block's key/value frames are its last D2 frames) */
    double scale = 0;
    int64_t arg = 0;
    for (int64_t j = 0; j < c->nx; j++)
        if (fabs(dx[j]) > scale) scale = fabs(dx[j]), arg = j;
    memcpy(xp, c->x, (size_t)c->nx * sizeof *xp);
    for (int k = 0; k < 8; k++) {
        const int64_t j = k == 0 ? arg : k == 1 ? c->nx - 1
                                              : (int64_t)(lcg(&seed) % (uint64_t)c->nx);
        const float keep = xp[j];
        double lp = 0, lm = 0;
        xp[j] = keep + (float)h;
        int ok = fd_loss(c, xp, &lp);
        xp[j] = keep - (float)h;
        ok = ok && fd_loss(c, xp, &lm);
        xp[j] = keep;
        const double hh = ((double)(keep + (float)h) - (double)(keep - (float)h)) / 2;
        const double fd = (lp - lm) / (2 * hh), e = fd_err(fd, dx[j], scale);
        CHECK(ok && e <= 1.0, "%s: d/d x[%lld]: finite difference %.6g, backward %.6g",
              c->name, (long long)j, fd, dx[j]);
        if (e > worst) worst = e;
        n++;
    }
    printf("  %-26s finite differences: %d entries, worst %.2f of the tolerance\n", c->name, n,
           worst);
done:
    free(grad), free(dx), free(xp), free(y);
}

/* ---- misuse ---------------------------------------------------------------- */

static void misuse(gcase *c) {
    /* a fresh model has no tape */
    char p[600];
    ra_model *m = NULL;
    snprintf(p, sizeof p, "%s/%s.model.safetensors", fixtures, c->name);
    if (ra_model_load(&m, p) != RA_OK) {
        CHECK(0, "reload: %s", ra_last_error());
        return;
    }
    CHECK(ra_model_trainable(m), "%s: not trainable", c->name);
    float *grad = calloc((size_t)ra_model_param_total(m), sizeof *grad);
    ra_status st = ra_model_backward(m, grad, NULL, c->dy);
    CHECK(st == RA_ERR_ARG && strstr(ra_last_error(), "training forward"),
          "backward without a training forward: %d %s", st, ra_last_error());
    /* a failed training forward (wrong channels) leaves no tape either */
    float *y = NULL;
    int ynd;
    int64_t ysh[4], bad[4] = {c->shape[0], c->shape[1], c->shape[2], c->shape[3] + 1};
    st = ra_model_forward_train(m, &y, &ynd, ysh, c->x, 4, c->shape, NULL);
    CHECK(st == RA_OK, "forward_train: %s", ra_last_error());
    free(y);
    y = NULL;
    st = ra_model_forward_train(m, &y, &ynd, ysh, c->x, 4, bad, NULL);
    CHECK(st == RA_ERR_SHAPE && !y, "forward_train with wrong channels: %d", st);
    st = ra_model_backward(m, grad, NULL, c->dy);
    CHECK(st == RA_ERR_ARG, "backward after a failed training forward: %d", st);
    ra_model_free(m);
    free(grad);

    /* the tape grown by a larger clip (other windows, padding, shift) and
     * then reused for the fixture's clip gives the fixture's gradient */
    int64_t big[4] = {c->shape[0] + (ra_model_meta(c->m, "num_frames_q") ? 0 : 1), c->shape[1] + 3, c->shape[2] + 2, c->shape[3]};
    const int64_t nb = big[0] * big[1] * big[2] * big[3];
    float *xb = malloc((size_t)nb * sizeof *xb), *dyb = malloc((size_t)nb * sizeof *dyb);
    float *g1 = malloc((size_t)ra_model_param_total(c->m) * sizeof *g1),
          *dx = malloc((size_t)c->nx * sizeof *dx);
    if (!xb || !dyb || !g1 || !dx) goto done;
    for (int64_t i = 0; i < nb; i++) xb[i] = sinf(0.37f * (float)i), dyb[i] = cosf(0.11f * (float)i);
    y = NULL;
    st = ra_model_forward_train(c->m, &y, &ynd, ysh, xb, 4, big, NULL);
    CHECK(st == RA_OK && ysh[1] == big[1] && ysh[2] == big[2],
          "forward_train of a larger clip: %s", ra_last_error());
    memset(g1, 0, (size_t)ra_model_param_total(c->m) * sizeof *g1);
    if (st == RA_OK) st = ra_model_backward(c->m, g1, NULL, dyb);
    CHECK(st == RA_OK, "backward of a larger clip: %s", ra_last_error());
    free(y);
    y = NULL;
    if (train_step(c, g1, dx, &y)) {
        const double e = rel_err(dx, c->gx, c->nx, NULL);
        CHECK(e <= GRAD_RTOL, "%s: grad.x after a larger clip off by %.3g", c->name, e);
    }
    free(y);
    y = NULL;
    /* more threads in the backward than in the training forward */
    ra_threads_set(1);
    st = ra_model_forward_train(c->m, &y, &ynd, ysh, c->x, 4, c->shape, NULL);
    ra_threads_set(4);
    memset(dx, 0, (size_t)c->nx * sizeof *dx);
    if (st == RA_OK) st = ra_model_backward(c->m, g1, dx, c->dy);
    ra_threads_set(0);
    CHECK(st == RA_OK && rel_err(dx, c->gx, c->nx, NULL) <= GRAD_RTOL,
          "%s: backward on 4 threads after a forward on 1: %s", c->name, ra_last_error());
done:
    free(xb), free(dyb), free(g1), free(dx), free(y);
}

int main(int argc, char **argv) {
    fixtures = argc > 1 ? argv[1] : "tests/fixtures";
    char p[600];
    snprintf(p, sizeof p, "%s/grads3d.txt", fixtures);
    FILE *lf = fopen(p, "r");
    CHECK(lf != NULL, "cannot open %s", p);
    if (!lf) return check_done();
    char names[32][128];
    int ncase = 0;
    while (ncase < 32 && fgets(names[ncase], sizeof names[ncase], lf)) {
        names[ncase][strcspn(names[ncase], "\r\n")] = 0;
        if (names[ncase][0]) ncase++;
    }
    fclose(lf);
    CHECK(ncase >= 4, "only %d cases", ncase);

    const ra_kernel_id k0 = ra_kernel_current();
    printf("gradients against PyTorch autograd (max |c - torch| / max |torch| per tensor):\n");
    for (int i = 0; i < ncase; i++) {
        gcase c;
        if (open_case(&c, names[i])) {
            for (int k = 0; k < RA_KERNEL_COUNT; k++) {
                if (!ra_kernel_supported((ra_kernel_id)k)) continue;
                ra_kernel_select((ra_kernel_id)k);
                compare_case(&c, k == (int)k0);
            }
            ra_kernel_select(k0);
        }
        close_case(&c);
    }
    printf("worst: %.2e (%s)\n", worst_all, worst_what);

    /* finite differences on the smallest self and cross cases */
    const char *fd_cases[] = {"grad3d_self_clamp", "grad3d_cross_clamp"};
    for (int i = 0; i < 2; i++) {
        gcase c;
        if (open_case(&c, fd_cases[i])) {
            fd_case(&c);
            misuse(&c);
        }
        close_case(&c);
    }
    return check_done();
}
