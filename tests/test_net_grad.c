/* test_net_grad.c - the network backward against PyTorch autograd.
 *
 * For every case of grads.txt (tools/make_grad_fixtures.py: Swin blocks and
 * networks with shifted windows, padding, the window clamp, odd patch
 * merging, ape, qk_scale, in the official, timm and torchvision naming) the
 * model is loaded, ra_model_forward_train runs the fixture's x and
 * ra_model_backward its dy; y, grad.x and the gradient of every parameter,
 * named as in the file, must equal autograd's within 1e-4 of each tensor's
 * largest magnitude (docs/reference.md, section 6). The worst error of each case is printed.
 * Then: a second step gives the same gradients (the tape is reused), the
 * training forward's y equals the inference forward's, a backward without a
 * training forward is refused, and a central finite difference of
 * L = sum(y * dy) in a few parameters agrees with the analytic gradient.
 *
 * With "swinv2": the SwinV2 networks of swinv2_grads.txt
 * (tools/swinv2_twin.py: the official twin and torchvision's v2 blocks),
 * the finite differences in logit_scale and the CPB's weights.
 *
 * Both: stochastic depth (metadata drop_path_rate) on a created network,
 * by finite differences of a training forward whose draws are the same at
 * every call; refused without a random generator, and outside [0, 1].
 *
 *   test_net_grad FIXTURES_DIR [swinv2] */
#include "check.h"
#include "relattn.h"
#include "grad_check.h"
#include "net_grad_check.h"

#include <stdint.h>
#include <string.h>

static const char *fixtures;
static double worst_all;
static char worst_name[420];

static void compare(const char *cs, const char *what, const float *a, const float *e, int64_t n,
                    double *worst, char *wname) {
    const double r = rel_err(a, e, n);
    CHECK(r <= 1e-4, "%s: %s: max error %.3g of its scale", cs, what, r);
    if (r > *worst) *worst = r, snprintf(wname, 200, "%s", what);
}

static void run_case(const char *name) {
    char p[512];
    case_io c = {0};
    snprintf(p, sizeof p, "%s/%s.model.safetensors", fixtures, name);
    ra_status s = ra_model_load(&c.m, p);
    CHECK(s == RA_OK, "%s: load: %s", name, ra_last_error());
    if (s) return;
    ra_st_file *in = NULL, *gf = NULL;
    snprintf(p, sizeof p, "%s/%s.input.safetensors", fixtures, name);
    s = ra_st_open(&in, p);
    snprintf(p, sizeof p, "%s/%s.grad.safetensors", fixtures, name);
    if (!s) s = ra_st_open(&gf, p);
    CHECK(s == RA_OK, "%s: fixtures: %s", name, ra_last_error());
    const ra_st_tensor *tdy = NULL, *tgx = NULL;
    c.x = in ? tensor(in, "x", &c.tx) : NULL;
    c.dy = gf ? tensor(gf, "dy", &tdy) : NULL;
    float *ey = gf ? tensor(gf, "y", NULL) : NULL, *egx = gf ? tensor(gf, "grad.x", &tgx) : NULL;
    CHECK(c.x && c.dy && ey && egx, "%s: fixture tensors missing", name);
    if (!c.x || !c.dy || !ey || !egx) goto out;
    c.ny = tdy->numel;

    /* a backward before any training forward is refused */
    float *g0 = calloc((size_t)ra_model_param_total(c.m) + 1, sizeof *g0);
    CHECK(ra_model_backward(c.m, g0, NULL, c.dy) == RA_ERR_ARG, "%s: backward without forward",
          name);
    free(g0);

    float *y, *grad, *dx;
    s = step(&c, &y, &grad, &dx);
    CHECK(s == RA_OK, "%s: step: %s", name, ra_last_error());
    if (!s) {
        double worst = 0;
        char wname[200] = "";
        compare(name, "y", y, ey, c.ny, &worst, wname);
        compare(name, "grad.x", dx, egx, c.tx->numel, &worst, wname);
        const int seen = grads_vs_fixture(c.m, grad, gf, &worst, wname, sizeof wname);
        CHECK(seen >= 0, "%s: %s missing or misshapen in the fixture", name, wname);
        CHECK(worst <= 1e-4, "%s: %s: max error %.3g of its scale", name, wname, worst);
        CHECK(seen == ra_model_param_count(c.m) && seen > 5, "%s: %d gradients compared", name,
              seen);
        printf("  %-28s %-11s %3d tensors, worst %.2e of scale (%s)\n", name,
               ra_model_scheme(c.m), seen + 2, worst, wname);
        if (worst > worst_all) worst_all = worst, snprintf(worst_name, sizeof worst_name,
                                                           "%s %s", name, wname);

        /* the inference forward gives the training forward's y */
        float *yi = NULL;
        int nd;
        int64_t sh[4];
        s = ra_model_forward(c.m, &yi, &nd, sh, c.x, c.tx->ndim, c.tx->shape);
        CHECK(s == RA_OK && rel_err(yi, y, c.ny) <= 1e-5, "%s: inference y differs", name);
        free(yi);

        /* a second step on the reused tape: the same gradients */
        float *y2, *grad2, *dx2;
        s = step(&c, &y2, &grad2, &dx2);
        CHECK(s == RA_OK, "%s: second step: %s", name, ra_last_error());
        if (!s) {
            CHECK(memcmp(grad, grad2, (size_t)ra_model_param_total(c.m) * sizeof *grad) == 0,
                  "%s: second step's parameter gradients differ", name);
            CHECK(memcmp(dx, dx2, (size_t)c.tx->numel * sizeof *dx) == 0,
                  "%s: second step's grad.x differs", name);
        }
        free(y2), free(grad2), free(dx2);
    }
    free(y), free(grad), free(dx);
out:
    free(c.x), free(c.dy), free(ey), free(egx);
    ra_st_close(in);
    ra_st_close(gf);
    ra_model_free(c.m);
}

static void finite_differences(const char *name, const char *const *want, int nwant) {
    char p[512];
    ra_model *m = NULL;
    snprintf(p, sizeof p, "%s/%s.model.safetensors", fixtures, name);
    CHECK(ra_model_load(&m, p) == RA_OK, "fd: load %s", ra_last_error());
    ra_st_file *in = NULL;
    snprintf(p, sizeof p, "%s/%s.input.safetensors", fixtures, name);
    ra_st_open(&in, p);
    const ra_st_tensor *tx = NULL;
    float *x = in ? tensor(in, "x", &tx) : NULL;
    if (m && x) fd_check(m, x, tx, want, nwant, NULL);
    free(x);
    ra_st_close(in);
    ra_model_free(m);
}

/* The ablation variants of relattn train (metadata relative_position none
 * and shaw, a model made by ra_model_create) by finite differences: the
 * 2-D Shaw tables' gradients included. */
static void created_variants(void) {
    static const char *const kinds[] = {"shaw", "none"};
    for (int v = 0; v < 2; v++) {
        const char *meta[] = {"arch", "swin", "img_size", "12", "patch_size", "2", "in_chans", "1",
                              "num_classes", "4", "embed_dim", "8", "depths", "2,1",
                              "num_heads", "2,2", "window_size", "3", "relative_position", kinds[v],
                              "max_relative_position", "1"};
        ra_model *m = NULL;
        ra_status s = ra_model_create(&m, meta, v == 0 ? 11 : 10, 7);
        CHECK(s == RA_OK, "create %s: %s", kinds[v], ra_last_error());
        if (s) continue;
        /* weights far larger than the 0.02 initialisation, so that every
         * term (Shaw's tables above all) matters in the loss */
        float *w = ra_model_weights(m);
        ra_rng r;
        ra_rng_seed(&r, 11);
        for (int i = 0; i < ra_model_param_count(m); i++) {
            const ra_param_info *pi = ra_model_param(m, i);
            if (pi->ndim >= 2) ra_rng_fill_normal(&r, w + pi->offset, pi->numel, 0, 0.4f);
        }
        float x[2 * 12 * 12];
        ra_rng_fill_normal(&r, x, 2 * 12 * 12, 0, 1);
        const ra_st_tensor tx = {.name = "x", .dtype = RA_DTYPE_F32, .ndim = 4,
                                 .shape = {2, 1, 12, 12}, .numel = 2 * 12 * 12};
        static const char *const shaw[] = {"layers.0.blocks.1.attn.relative_keys",
                                           "layers.0.blocks.1.attn.relative_values",
                                           "layers.0.blocks.0.attn.relative_keys",
                                           "layers.1.blocks.0.attn.qkv.weight"};
        static const char *const none[] = {"layers.0.blocks.1.attn.qkv.weight",
                                           "layers.0.blocks.0.attn.proj.weight"};
        if (v == 0) fd_check(m, x, &tx, shaw, 4, NULL);
        else fd_check(m, x, &tx, none, 2, NULL);
        ra_model_free(m);
    }
}

/* Stochastic depth (net_grad_check.h) on a created swin or swinv2 of three
 * blocks (rates 0, 0.3, 0.6), 6 images of 2 x 12 x 12. */
static void drop_path_case(const char *arch) {
    const int v2 = !strcmp(arch, "swinv2");
    const char *meta[] = {"arch", arch, "img_size", "12", "patch_size", "2", "in_chans", "2",
                          "num_classes", "3", "embed_dim", "8", "depths", "2,1",
                          "num_heads", "2,2", "window_size", "3", "drop_path_rate", "0.6"};
    static const char *const want[] = {
        "layers.0.blocks.1.attn.qkv.weight", "layers.0.blocks.1.mlp.fc1.weight",
        "layers.1.blocks.0.norm1.weight", "layers.1.blocks.0.mlp.fc2.bias",
        "layers.0.downsample.reduction.weight", "patch_embed.proj.weight"};
    static const char *const want_v2[] = {
        "layers.0.blocks.1.attn.logit_scale", "layers.0.blocks.1.mlp.fc1.weight",
        "layers.1.blocks.0.norm1.weight", "layers.1.blocks.0.norm2.bias",
        "layers.0.downsample.reduction.weight", "patch_embed.proj.weight"};
    static const char *const ends[] = {"attn.proj.weight", "attn.proj.bias", "mlp.fc2.weight",
                                       "mlp.fc2.bias"};
    static const char *const ends_v2[] = {"norm1.weight", "norm1.bias", "norm2.weight",
                                          "norm2.bias"};
    const drop_path_spec sp = {.name = arch, .meta = meta, .nmeta = 10, .rate_at = 19,
                               .depths_at = 13, .x_ndim = 4, .x_shape = {6, 2, 12, 12},
                               .want = v2 ? want_v2 : want, .nwant = 6, .depths1 = "1,1",
                               .last = "layers.1.blocks.0.", .ends = v2 ? ends_v2 : ends};
    drop_path_check(&sp);
}

/* ra_model_create: PyTorch's initial values by parameter, and the seed. */
static void create_init(void) {
    const char *meta[] = {"arch", "swin", "img_size", "28", "patch_size", "2", "in_chans", "1",
                          "num_classes", "10", "embed_dim", "48", "depths", "2,2",
                          "num_heads", "3,6", "window_size", "7"};
    ra_model *a = NULL, *b = NULL, *c = NULL;
    CHECK(ra_model_create(&a, meta, 9, 1) == RA_OK, "create: %s", ra_last_error());
    CHECK(ra_model_create(&b, meta, 9, 1) == RA_OK, "create: %s", ra_last_error());
    CHECK(ra_model_create(&c, meta, 9, 2) == RA_OK, "create: %s", ra_last_error());
    if (!a || !b || !c) goto out;
    const int64_t n = ra_model_param_total(a);
    CHECK(n == 303580, "default model: %lld parameters (the PyTorch twin has 303580)", (long long)n);
    CHECK(!memcmp(ra_model_weights(a), ra_model_weights(b), (size_t)n * 4), "same seed, same weights");
    CHECK(memcmp(ra_model_weights(a), ra_model_weights(c), (size_t)n * 4), "another seed, other weights");
    for (int i = 0; i < ra_model_param_count(a); i++) {
        const ra_param_info *p = ra_model_param(a, i);
        const float *w = ra_model_weights(a) + p->offset;
        double s1 = 0, s2 = 0, mx = 0;
        for (int64_t e = 0; e < p->numel; e++) {
            s1 += w[e], s2 += (double)w[e] * w[e];
            if (fabs(w[e]) > mx) mx = fabs(w[e]);
        }
        const double mean = s1 / p->numel, sd = sqrt(s2 / p->numel - mean * mean);
        const size_t ln = strlen(p->name);
        if (!strcmp(p->name, "patch_embed.proj.weight") || !strcmp(p->name, "patch_embed.proj.bias"))
            CHECK(mx <= 0.5 && mx > 0.4 && sd > 0.2, "%s: U(+-1/sqrt(4)): max %g sd %g", p->name, mx, sd);
        else if (strstr(p->name, "norm") && !strcmp(p->name + ln - 7, ".weight"))
            CHECK(mean == 1 && sd == 0, "%s: ones", p->name);
        else if (!strcmp(p->name + ln - 5, ".bias"))
            CHECK(mx == 0, "%s: zeros", p->name);
        else if (p->numel >= 1000)
            CHECK(fabs(sd - 0.02) < 0.002 && fabs(mean) < 0.002, "%s: N(0, 0.02^2): mean %g sd %g",
                  p->name, mean, sd);
    }
out:
    ra_model_free(a), ra_model_free(b), ra_model_free(c);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_net_grad FIXTURES_DIR\n");
        return 2;
    }
    fixtures = argv[1];
    const int v2 = argc > 2 && !strcmp(argv[2], "swinv2");
    char list[512], line[256];
    snprintf(list, sizeof list, "%s/%s", fixtures, v2 ? "swinv2_grads.txt" : "grads.txt");
    FILE *f = fopen(list, "r");
    CHECK(f != NULL, "cannot open %s", list);
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0]) run_case(line), n++;
    }
    if (f) fclose(f);
    CHECK(n >= (v2 ? 3 : 10), "only %d gradient cases", n);
    printf("%d gradient cases; worst %.2e of scale (%s)\n", n, worst_all, worst_name);
    if (v2) {
        static const char *const want[] = {
            "layers.0.blocks.1.attn.logit_scale", "layers.0.blocks.1.attn.cpb_mlp.0.weight",
            "layers.0.blocks.0.attn.cpb_mlp.0.bias", "layers.1.blocks.0.attn.cpb_mlp.2.weight",
            "layers.0.blocks.0.attn.q_bias", "layers.0.downsample.norm.weight"};
        finite_differences("v2_net_official", want, 6);
        drop_path_case("swinv2");
        return check_done();
    }
    static const char *const want[] = {
        "layers.0.blocks.1.attn.relative_position_bias_table", "layers.0.blocks.0.attn.qkv.weight",
        "layers.1.blocks.0.norm2.bias", "layers.0.downsample.reduction.weight",
        "patch_embed.proj.weight", "head.bias"};
    finite_differences("net_swin_official", want, 6);
    created_variants();
    drop_path_case("swin");
    create_init();
    return check_done();
}
