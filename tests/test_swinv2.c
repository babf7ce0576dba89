/* test_swinv2.c - the swinv2_window_attention layer against its PyTorch twin
 * (tools/swinv2_twin.py), on every kernel; finite differences of the
 * SwinV2-only parameters; bad files and inputs; a created swinv2 network.
 *
 * For each case of swinv2_layers.txt (shifted-window mask, a pretrained
 * window, no qkv bias, a non-square window, one head above the logit
 * clamp) y, grad.x and the gradient of every parameter must equal
 * autograd's within 1e-4 of each tensor's largest magnitude on each kernel
 * the CPU has (ref, avx2, avx512), and the kernels must agree with the
 * reference within 1e-5. The networks' gradients are test_net_grad's
 * (argument "swinv2").
 *
 *   test_swinv2 FIXTURES_DIR */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "relattn.h"
#include "grad_check.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

static const char *fixtures;
static char tmpdir[64];

/* One layer case: the model, its inputs, one run's outputs. */
typedef struct {
    ra_model *m;
    const ra_attn_layer *l;
    float *x, *dy, *mask;
    int b_, n, c, nw;
    float *y, *dx, *grad;   /* outputs of run() */
} layer_case;

static ra_status run(layer_case *k) {
    const size_t nx = (size_t)k->b_ * k->n * k->c;
    free(k->y), free(k->dx), free(k->grad);
    k->y = calloc(nx, sizeof *k->y);
    k->dx = calloc(nx, sizeof *k->dx);
    k->grad = calloc((size_t)ra_model_param_total(k->m) + 1, sizeof *k->grad);
    if (!k->y || !k->dx || !k->grad) return RA_ERR_NOMEM;
    ra_attn_grads g;
    ra_model_attn_grads(k->m, k->grad, &g);
    ra_status s = ra_attn_layer_forward(k->l, k->y, NULL, k->x, NULL, k->b_, k->n, k->n, k->mask,
                                        k->nw);
    float *y2 = calloc(nx, sizeof *y2);
    if (!s) s = ra_attn_layer_backward(k->l, k->dx, NULL, &g, y2, k->dy, k->x, NULL, k->b_, k->n,
                                       k->n, k->mask, k->nw);
    if (!s) CHECK(rel_err(y2, k->y, (int64_t)nx) <= 1e-6, "backward's y is the forward's");
    free(y2);
    return s;
}

/* L = sum(y * dy) in double */
static double loss(layer_case *k) {
    const size_t nx = (size_t)k->b_ * k->n * k->c;
    float *y = calloc(nx, sizeof *y);
    double l = NAN;
    if (y && !ra_attn_layer_forward(k->l, y, NULL, k->x, NULL, k->b_, k->n, k->n, k->mask, k->nw)) {
        l = 0;
        for (size_t i = 0; i < nx; i++) l += (double)y[i] * k->dy[i];
    }
    free(y);
    return l;
}

/* Central differences of L in the entry of parameter name with the largest
 * gradient (or entry at, if >= 0), against k->grad. */
static void fd(layer_case *k, const char *name, int64_t at) {
    float *w = ra_model_weights(k->m);
    for (int i = 0; i < ra_model_param_count(k->m); i++) {
        const ra_param_info *pi = ra_model_param(k->m, i);
        if (strcmp(pi->name, name)) continue;
        if (at < 0) {
            at = 0;
            for (int64_t e = 1; e < pi->numel; e++)
                if (fabsf(k->grad[pi->offset + e]) > fabsf(k->grad[pi->offset + at])) at = e;
        }
        float *v = w + pi->offset + at;
        const float keep = *v, h = 1e-2f;
        *v = keep + h;
        const double lp = loss(k);
        *v = keep - h;
        const double lm = loss(k);
        *v = keep;
        const double num = (lp - lm) / (2.0 * h), an = k->grad[pi->offset + at];
        CHECK(fabs(num - an) <= 2e-2 * fabs(an) + 2e-3, "fd %s[%lld]: numeric %.6g, analytic %.6g",
              name, (long long)at, num, an);
        printf("  finite difference %-22s[%3lld] %11.5g vs %11.5g\n", name, (long long)at, num, an);
        return;
    }
    CHECK(0, "fd: no parameter %s", name);
}

static void layer_case_free(layer_case *k) {
    free(k->x), free(k->dy), free(k->mask), free(k->y), free(k->dx), free(k->grad);
    ra_model_free(k->m);
}

static void run_layer(const char *name, double *worst_all) {
    char p[512];
    layer_case k = {0};
    snprintf(p, sizeof p, "%s/%s.model.safetensors", fixtures, name);
    ra_status s = ra_model_load(&k.m, p);
    CHECK(s == RA_OK, "%s: load: %s", name, ra_last_error());
    if (s) return;
    CHECK(ra_model_arch(k.m) == RA_ARCH_SWINV2_WINDOW_ATTENTION, "%s: arch", name);
    k.l = ra_model_attn(k.m);
    CHECK(k.l != NULL, "%s: an attention layer", name);
    ra_st_file *in = NULL, *gf = NULL;
    snprintf(p, sizeof p, "%s/%s.input.safetensors", fixtures, name);
    if (ra_st_open(&in, p)) in = NULL;
    snprintf(p, sizeof p, "%s/%s.grad.safetensors", fixtures, name);
    if (ra_st_open(&gf, p)) gf = NULL;
    const ra_st_tensor *tx = NULL, *tm = NULL;
    k.x = in ? tensor(in, "x", &tx) : NULL;
    k.dy = in ? tensor(in, "dy", NULL) : NULL;
    k.mask = in ? tensor(in, "mask", &tm) : NULL;
    float *ey = gf ? tensor(gf, "y", NULL) : NULL, *egx = gf ? tensor(gf, "grad.x", NULL) : NULL;
    CHECK(k.l && k.x && k.dy && ey && egx, "%s: fixture tensors missing", name);
    if (!k.l || !k.x || !k.dy || !ey || !egx) goto out;
    k.b_ = (int)tx->shape[0], k.n = (int)tx->shape[1], k.c = (int)tx->shape[2];
    k.nw = tm ? (int)tm->shape[0] : 0;
    const int64_t nx = (int64_t)k.b_ * k.n * k.c, np = ra_model_param_total(k.m);

    float *ref_y = NULL, *ref_dx = NULL, *ref_g = NULL;
    for (int id = 0; id < RA_KERNEL_COUNT; id++) {
        if (!ra_kernel_supported((ra_kernel_id)id)) continue;
        ra_kernel_select((ra_kernel_id)id);
        s = run(&k);
        CHECK(s == RA_OK, "%s %s: %s", name, ra_kernel_name((ra_kernel_id)id), ra_last_error());
        if (s) continue;
        double worst = rel_err(k.y, ey, nx);
        char wname[200] = "y";
        if (rel_err(k.dx, egx, nx) > worst)
            worst = rel_err(k.dx, egx, nx), snprintf(wname, sizeof wname, "grad.x");
        const int seen = grads_vs_fixture(k.m, k.grad, gf, &worst, wname, sizeof wname);
        CHECK(seen >= 0, "%s: %s missing in the fixture", name, wname);
        CHECK(seen >= 7, "%s: %d gradients", name, seen);
        CHECK(worst <= 1e-4, "%s %s: %s differs from PyTorch by %.3g of its scale", name,
              ra_kernel_name((ra_kernel_id)id), wname, worst);
        printf("  %-22s %-7s %2d tensors, worst %.2e of scale (%s)\n", name,
               ra_kernel_name((ra_kernel_id)id), seen + 2, worst, wname);
        if (worst > *worst_all) *worst_all = worst;
        if (!ref_y) {   /* the first kernel is the reference: the oracle */
            ref_y = k.y, ref_dx = k.dx, ref_g = k.grad;
            k.y = k.dx = k.grad = NULL;
        } else {
            const double a = fmax(rel_err(k.y, ref_y, nx), fmax(rel_err(k.dx, ref_dx, nx),
                                                                 rel_err(k.grad, ref_g, np)));
            CHECK(a <= 1e-5, "%s: %s differs from ref by %.3g", name,
                  ra_kernel_name((ra_kernel_id)id), a);
            printf("  %-22s %-7s agrees with ref within %.2e\n", name,
                   ra_kernel_name((ra_kernel_id)id), a);
        }
    }
    /* one part or several (the CPB table computed once per call, its
     * gradient summed over the parts): the same numbers */
    const int threads = ra_threads_get();
    ra_threads_set(1);
    if (!run(&k)) {
        float *y1 = k.y, *dx1 = k.dx, *g1 = k.grad;
        k.y = k.dx = k.grad = NULL;
        ra_threads_set(3);
        if (!run(&k)) {
            const double a = fmax(rel_err(k.y, y1, nx), fmax(rel_err(k.dx, dx1, nx),
                                                             rel_err(k.grad, g1, np)));
            CHECK(a <= 1e-6, "%s: 1 and 3 threads differ by %.3g", name, a);
        }
        free(y1), free(dx1), free(g1);
    }
    ra_threads_set(threads);
    ra_kernel_select(RA_KERNEL_REF);
    free(ref_y), free(ref_dx), free(ref_g);

    /* finite differences of the SwinV2-only parameters (on the reference
     * kernel, with the analytic gradient of that kernel) */
    if (!run(&k)) {
        fd(&k, "logit_scale", 0);
        fd(&k, "cpb_mlp.0.weight", -1);
        fd(&k, "cpb_mlp.0.bias", -1);
        fd(&k, "cpb_mlp.2.weight", -1);
        for (int i = 0; i < ra_model_param_count(k.m); i++)
            if (!strcmp(ra_model_param(k.m, i)->name, "q_bias")) fd(&k, "q_bias", -1);
        const ra_param_info *ls = ra_model_param(k.m, 0);   /* logit_scale, declared first */
        const float *lw = ra_model_weights(k.m) + ls->offset;
        if (lw[ls->numel - 1] > 4.61f) {   /* above the clamp: no gradient, none numerically */
            CHECK(k.grad[ls->offset + ls->numel - 1] == 0.0f, "%s: clamped head's gradient",
                  name);
            fd(&k, "logit_scale", ls->numel - 1);
        }
    }
    ra_kernel_select(ra_kernel_supported(RA_KERNEL_AVX512) ? RA_KERNEL_AVX512
                     : ra_kernel_supported(RA_KERNEL_AVX2) ? RA_KERNEL_AVX2 : RA_KERNEL_REF);

    /* bad calls: wrong token count, a mask that does not divide B_ */
    CHECK(ra_attn_layer_forward(k.l, k.y, NULL, k.x, NULL, 1, k.n - 1, k.n - 1, NULL, 0) ==
              RA_ERR_SHAPE, "%s: N - 1 tokens refused", name);
    if (k.mask && k.b_ > 1)
        CHECK(ra_attn_layer_forward(k.l, k.y, NULL, k.x, NULL, k.b_ - 1, k.n, k.n, k.mask,
                                    k.nw) != RA_OK, "%s: mask of %d windows for B_ %d", name,
              k.nw, k.b_ - 1);
out:
    free(ey), free(egx);
    ra_st_close(in);
    ra_st_close(gf);
    layer_case_free(&k);
}

/* ---- bad files ------------------------------------------------------------ */

/* The fixture src rewritten: tensor drop left out, tensor bad (if found)
 * replaced by nbad floats of value v with shape bshape, metadata key set to
 * val (NULL: unchanged); loaded; the status returned. */
static ra_status load_variant(const char *src, const char *drop, const char *bad, int bnd,
                              const int64_t *bshape, float v, const char *key, const char *val) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s.model.safetensors", fixtures, src);
    ra_st_file *f = NULL;
    if (ra_st_open(&f, p)) return RA_ERR_INTERNAL;
    ra_st_writer *w = ra_st_writer_new();
    for (int i = 0; w && i < ra_st_count(f); i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        if (drop && !strcmp(t->name, drop)) continue;
        if (bad && !strcmp(t->name, bad)) {
            int64_t n = 1;
            for (int d = 0; d < bnd; d++) n *= bshape[d];
            float *b = malloc((size_t)n * sizeof *b);
            for (int64_t e = 0; b && e < n; e++) b[e] = e == n / 2 ? v : 0.0f;
            if (t->dtype == RA_DTYPE_I64) {   /* an index stays an integer tensor */
                int64_t *bi = malloc((size_t)n * sizeof *bi);
                for (int64_t e = 0; bi && e < n; e++) bi[e] = (int64_t)b[e];
                if (bi) ra_st_writer_add(w, t->name, RA_DTYPE_I64, bnd, bshape, bi);
                free(bi);
            } else if (b) {
                ra_st_writer_add(w, t->name, RA_DTYPE_F32, bnd, bshape, b);
            }
            free(b);
            continue;
        }
        float *d = tensor(f, t->name, NULL);
        if (t->dtype == RA_DTYPE_I64) {
            int64_t *di = malloc((size_t)t->numel * sizeof *di);
            if (di && !ra_st_read_i64(di, f, t))
                ra_st_writer_add(w, t->name, RA_DTYPE_I64, t->ndim, t->shape, di);
            free(di);
        } else if (d) {
            ra_st_writer_add(w, t->name, RA_DTYPE_F32, t->ndim, t->shape, d);
        }
        free(d);
    }
    for (int i = 0; w && i < ra_st_meta_count(f); i++) {
        const char *k = ra_st_meta_key(f, i);
        ra_st_writer_meta(w, k, key && !strcmp(k, key) ? val : ra_st_meta(f, k));
    }
    if (w && key && !ra_st_meta(f, key) && val) ra_st_writer_meta(w, key, val);
    ra_st_close(f);
    snprintf(p, sizeof p, "%s/variant.safetensors", tmpdir);
    ra_status s = w ? ra_st_writer_save(w, p) : RA_ERR_NOMEM;
    ra_st_writer_free(w);
    if (s) return RA_ERR_INTERNAL;
    ra_model *m = NULL;
    s = ra_model_load(&m, p);
    ra_model_free(m);
    unlink(p);
    return s;
}

static void bad_files(void) {
    const char *c = "v2_attn_w4";   /* dim 16, 2 heads, window 4x4 */
    CHECK(load_variant(c, NULL, NULL, 0, NULL, 0, NULL, NULL) == RA_OK, "unchanged: %s",
          ra_last_error());
    CHECK(load_variant(c, "logit_scale", NULL, 0, NULL, 0, NULL, NULL) == RA_ERR_FORMAT,
          "logit_scale missing");
    CHECK(load_variant(c, "cpb_mlp.2.weight", NULL, 0, NULL, 0, NULL, NULL) == RA_ERR_FORMAT,
          "cpb_mlp.2.weight missing");
    CHECK(load_variant(c, NULL, "logit_scale", 1, (int64_t[]){2}, 1, NULL, NULL) == RA_ERR_SHAPE,
          "logit_scale (nH) instead of (nH, 1, 1)");
    CHECK(load_variant(c, NULL, "cpb_mlp.0.weight", 2, (int64_t[]){256, 2}, 1, NULL, NULL) ==
              RA_ERR_SHAPE, "cpb_mlp with 256 hidden units");
    CHECK(load_variant(c, NULL, "relative_coords_table", 4, (int64_t[]){1, 7, 7, 2}, 0.5f, NULL,
                       NULL) == RA_ERR_FORMAT, "relative_coords_table altered");
    CHECK(load_variant(c, NULL, "relative_coords_table", 4, (int64_t[]){1, 5, 5, 2}, 0, NULL,
                       NULL) == RA_ERR_SHAPE, "relative_coords_table of another window");
    CHECK(load_variant(c, NULL, "relative_position_index", 2, (int64_t[]){16, 16}, 3, NULL,
                       NULL) == RA_ERR_FORMAT, "relative_position_index altered");
    CHECK(load_variant(c, NULL, NULL, 0, NULL, 0, "pretrained_window_size", "1,1") ==
              RA_ERR_FORMAT, "pretrained window 1 (a division by 0)");
    CHECK(load_variant(c, NULL, NULL, 0, NULL, 0, "pretrained_window_size", "7") == RA_ERR_FORMAT,
          "pretrained window given: the saved coordinates differ");
    CHECK(load_variant(c, NULL, NULL, 0, NULL, 0, "num_heads", "3") == RA_ERR_FORMAT,
          "16 not divisible by 3 heads");
    CHECK(load_variant(c, NULL, NULL, 0, NULL, 0, "qkv_bias", "false") == RA_ERR_FORMAT,
          "q_bias present without qkv_bias");
    CHECK(load_variant(c, NULL, NULL, 0, NULL, 0, "window_size", "1") == RA_ERR_FORMAT,
          "window 1 (a division by 0)");
    CHECK(load_variant(c, NULL, NULL, 0, NULL, 0, "window_size", "x") == RA_ERR_FORMAT,
          "window not an integer");
    CHECK(load_variant("v2_net_official", NULL, NULL, 0, NULL, 0, "pretrained_window_sizes",
                       "4") == RA_ERR_FORMAT, "one pretrained window for two stages");
    CHECK(load_variant("v2_net_official", NULL, NULL, 0, NULL, 0, "qk_scale", "0.5") ==
              RA_ERR_FORMAT, "swinv2 with qk_scale");
    CHECK(load_variant("v2_net_official", "layers.1.blocks.0.attn.cpb_mlp.0.bias", NULL, 0,
                       NULL, 0, NULL, NULL) == RA_ERR_FORMAT, "a block's cpb bias missing");
    CHECK(load_variant("v2_net_tv_pad", NULL, "features.2.norm.weight", 1, (int64_t[]){32}, 1,
                       NULL, NULL) == RA_ERR_SHAPE, "V1 merging norm (4C) in a V2 file");
}

/* ---- a created network --------------------------------------------------- */

static void created(void) {
    const char *meta[] = {"arch", "swinv2", "img_size", "16", "patch_size", "2", "in_chans", "1",
                          "num_classes", "4", "embed_dim", "8", "depths", "2,2",
                          "num_heads", "2,4", "window_size", "4"};
    ra_model *m = NULL;
    ra_status s = ra_model_create(&m, meta, 9, 3);
    CHECK(s == RA_OK, "create swinv2: %s", ra_last_error());
    if (s) return;
    for (int i = 0; i < ra_model_param_count(m); i++) {   /* the official initial values */
        const ra_param_info *p = ra_model_param(m, i);
        const float *w = ra_model_weights(m) + p->offset;
        const size_t ln = strlen(p->name);
        if (ln > 11 && !strcmp(p->name + ln - 11, "logit_scale"))
            CHECK(fabsf(w[0] - logf(10.0f)) < 1e-6f, "%s = log(10)", p->name);
        if (ln > 6 && (!strcmp(p->name + ln - 6, "q_bias") || !strcmp(p->name + ln - 6, "v_bias")))
            CHECK(w[0] == 0.0f && w[p->numel - 1] == 0.0f, "%s = 0", p->name);
    }
    float x[2 * 16 * 16];
    ra_rng r;
    ra_rng_seed(&r, 1);
    ra_rng_fill_normal(&r, x, 2 * 16 * 16, 0, 1);
    const int64_t xs[4] = {2, 1, 16, 16};
    float *y = NULL, *grad = calloc((size_t)ra_model_param_total(m), sizeof *grad);
    int nd;
    int64_t ys[4];
    s = ra_model_forward_train(m, &y, &nd, ys, x, 4, xs, NULL);
    CHECK(s == RA_OK && nd == 2 && ys[0] == 2 && ys[1] == 4, "created: training forward");
    float dy[8] = {1, -1, 0.5f, 0, 0, 2, -1, 1};
    if (!s) s = ra_model_backward(m, grad, NULL, dy);
    CHECK(s == RA_OK, "created: backward: %s", ra_last_error());
    double sum = 0;
    for (int64_t i = 0; grad && i < ra_model_param_total(m); i++) sum += fabs(grad[i]);
    CHECK(isfinite(sum) && sum > 0, "created: finite, nonzero gradients (%g)", sum);
    free(y), free(grad);
    ra_model_free(m);
    /* a window clamped to 1 divides by 0 in the coordinates: refused */
    const char *one[] = {"arch", "swinv2", "img_size", "2", "patch_size", "1", "in_chans", "1",
                         "num_classes", "2", "embed_dim", "4", "depths", "1,1",
                         "num_heads", "1,1", "window_size", "4"};
    CHECK(ra_model_create(&m, one, 9, 1) == RA_ERR_FORMAT, "window clamped to 1 refused");
    ra_model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_swinv2 FIXTURES_DIR\n");
        return 2;
    }
    fixtures = argv[1];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_swinv2.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    CHECK(ra_arch_from_name("swinv2_window_attention") == RA_ARCH_SWINV2_WINDOW_ATTENTION &&
              ra_arch_from_name("swinv2") == RA_ARCH_SWINV2, "arch names");
    char list[512], line[256];
    snprintf(list, sizeof list, "%s/swinv2_layers.txt", fixtures);
    FILE *f = fopen(list, "r");
    CHECK(f != NULL, "cannot open %s", list);
    int n = 0;
    double worst = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0]) run_layer(line, &worst), n++;
    }
    if (f) fclose(f);
    CHECK(n >= 3, "only %d layer cases", n);
    printf("%d layer cases; worst %.2e of scale\n", n, worst);
    bad_files();
    created();
    rmdir(tmpdir);
    return check_done();
}
