/* test_features.c - ra_model_features without PyTorch (tests/test_features.py
 * holds the maps to PyTorch's): what the maps must be whatever the weights,
 * on networks made by ra_model_create.
 *
 * 1. swin and swin3d without head (y: the mean of the final norm's tokens):
 *    every stage of a 3-image (3-clip) batch whose sides are no multiples
 *    of the patch or the window (padded windows and merging), each map of
 *    the unpadded shape; y the very bits of ra_model_forward's; NLC the bits
 *    of NHWC, NCHW its transpose (swin3d: (B, T, H, W, C) and
 *    (B, C, T, H, W)); the last stage through the final norm (timm's
 *    norm=True), pooled, is y; the maps on 1 thread and on 3 (shards) the
 *    same bits where the products are relattn's own; in bf16 and int8, y
 *    the forward's bits and the normalised last stage, pooled, y again; a
 *    features run (ra_run_create_features) gives the same names, shapes and
 *    bits; with a head, the head on the pooled normalised last stage is
 *    the forward's logits; refusals (RA_ERR_ARG): a stage the model has not, 65 indices,
 *    an unknown layout, prefix tokens; an input of the wrong channels or
 *    dimensions (RA_ERR_SHAPE).
 * 2. vit without head or pooling (global_pool "": y the final norm's
 *    tokens): block -1 through the final norm is y's patch tokens and its
 *    prefix tokens y's first rows; indices -1 and 2 of 3 blocks are one map;
 *    a block it has not; an attention layer has no maps.
 *
 *   test_features */
#include "check.h"
#include "relattn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float *random_images(int64_t n, uint64_t seed) {
    ra_rng r;
    ra_rng_seed(&r, seed);
    float *x = xmalloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(ra_rng_uniform(&r) * 2.0 - 1.0);
    return x;
}

static const ra_tensor *map_of(const ra_tensor *t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    return NULL;
}

static int64_t numel(const ra_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* The widest difference between map a, channels last (B, sides.., C), and
 * nc, channels first (B, C, sides..), read as a's positions; *differ 1
 * when one value is not a's bits. */
static double transposed_apart(const ra_tensor *a, const ra_tensor *nc, int *differ) {
    const int64_t B = a->shape[0], C = a->shape[a->ndim - 1], P = numel(a) / (B * C);
    double far = 0;
    for (int64_t i = 0; i < B * P * C; i++) {
        const int64_t b = i / (P * C), p = i / C % P, ch = i % C;
        const float t = nc->data[(b * C + ch) * P + p];
        far = fmax(far, fabs((double)t - a->data[i]));
        if (!(t == a->data[i])) *differ = 1;
    }
    return far;
}

/* The widest difference between the mean over the positions of map t,
 * channels last (B, sides.., C), and y (B, C). */
static double pooled_apart(const ra_tensor *t, const float *y) {
    const int64_t B = t->shape[0], C = t->shape[t->ndim - 1], P = numel(t) / (B * C);
    double worst = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t ch = 0; ch < C; ch++) {
            double sum = 0;
            for (int64_t p = 0; p < P; p++) sum += t->data[(b * P + p) * C + ch];
            worst = fmax(worst, fabs(sum / (double)P - y[b * C + ch]));
        }
    return worst;
}

/* The parameter of m named name, or NULL. */
static const float *param(ra_model *m, const char *name) {
    for (int i = 0; i < ra_model_param_count(m); i++) {
        const ra_param_info *p = ra_model_param(m, i);
        if (!strcmp(p->name, name) && p->offset >= 0) return ra_model_weights(m) + p->offset;
    }
    return NULL;
}

/* meta (a network without head) with a head of K classes: the last
 * stage's map through the final norm, pooled, then through head.weight
 * and head.bias, is the forward's logits. */
static void logits_from_last_stage(const char *const *meta, int nmeta, int x_ndim,
                                   const int64_t *xs, const float *x) {
    enum { K = 5 };
    const char *with[64];
    memcpy(with, meta, (size_t)(2 * nmeta) * sizeof *with);
    for (int k = 0; k < 2 * nmeta; k += 2)
        if (!strcmp(with[k], "num_classes")) with[k + 1] = "5";
    ra_model *m = NULL;
    float *y = NULL;
    ra_tensor *t = NULL;
    int nd = 0, nt = 0;
    int64_t ys[4];
    ra_features_options fin = {.count = 1, .index = {-1}, .norm = RA_FEATURES_NORM_FINAL};
    ra_status st = ra_model_create(&m, with, nmeta, 5);
    if (!st) st = ra_model_forward(m, &y, &nd, ys, x, x_ndim, xs);
    if (!st) st = ra_model_features(m, &t, &nt, NULL, NULL, NULL, x, x_ndim, xs, &fin);
    const float *hw = m ? param(m, "head.weight") : NULL, *hb = m ? param(m, "head.bias") : NULL;
    CHECK(st == RA_OK && nt == 1 && hw && hb && nd == 2 && ys[1] == K, "%s with a head: %s",
          meta[1], ra_last_error());
    if (!st && nt == 1 && hw && hb) {
        const int64_t B = t->shape[0], C = t->shape[t->ndim - 1], P = numel(t) / (B * C);
        double worst = 0, scale = 0;
        for (int64_t b = 0; b < B; b++)
            for (int k = 0; k < K; k++) {
                double z = hb[k];
                for (int64_t ch = 0; ch < C; ch++) {
                    double sum = 0;
                    for (int64_t p = 0; p < P; p++) sum += t->data[(b * P + p) * C + ch];
                    z += hw[k * C + ch] * sum / (double)P;
                }
                worst = fmax(worst, fabs(z - y[b * K + k]));
                scale = fmax(scale, fabs(z));
            }
        printf("%s: the head on the pooled last stage: %.3g from the logits (of %.3g)\n",
               meta[1], worst, scale);
        CHECK(scale > 0 && worst <= 1e-5 * scale, "%s: the head on the pooled last stage is "
              "%.3g from the logits", meta[1], worst);
    }
    ra_features_free(t, nt);
    free(y);
    ra_model_free(m);
}

/* A network without head (y: the mean of the final norm's tokens, (B, C)),
 * its stages' maps of x (x_ndim dims: images or clips) against what they
 * must be whatever the weights: want[s] the NHWC shape of stage s (x_ndim
 * dims), y the very bits of ra_model_forward's; NLC the bits of NHWC, NCHW
 * its transpose; the last stage through the final norm, pooled, is y; the
 * maps on 1 thread and on 3 (shards) the same bits where the products are
 * relattn's own; in bf16 and int8, y the forward's bits and the normalised
 * last stage, pooled, y again; a features run (ra_run) gives the same maps;
 * the same model with a head: its logits from the last stage; the
 * refusals. */
static void network(const char *const *meta, int nmeta, int x_ndim, const int64_t *xs,
                    int nst, const int64_t want[][5]) {
    const char *arch = meta[1];
    ra_model *m = NULL;
    ra_status st = ra_model_create(&m, meta, nmeta, 7);
    CHECK(st == RA_OK, "create %s: %s", arch, ra_last_error());
    if (st) return;
    int64_t nx = 1;
    for (int d = 0; d < x_ndim; d++) nx *= xs[d];
    const int64_t B = xs[0], C = want[nst - 1][x_ndim - 1];
    float *x = random_images(nx, 1);
    ra_tensor *a = NULL, *b = NULL, *c = NULL;
    int na = 0, nb = 0, nc = 0, nd = 0, nd2 = 0;
    float *y = NULL, *y2 = NULL;
    int64_t ys[4], ys2[4];
    ra_threads_set(1);
    st = ra_model_forward(m, &y, &nd, ys, x, x_ndim, xs);
    CHECK(st == RA_OK, "%s forward: %s", arch, ra_last_error());
    st = ra_model_features(m, &a, &na, &y2, &nd2, ys2, x, x_ndim, xs, NULL);
    CHECK(st == RA_OK && na == nst, "%s features: %s (%d maps)", arch, ra_last_error(), na);
    CHECK(y && y2 && nd == 2 && nd2 == 2 && ys2[1] == C &&
              !memcmp(y, y2, (size_t)(B * C) * sizeof *y),
          "%s: features' y is not forward's", arch);
    for (int s = 0; s < na && s < nst; s++)
        CHECK(a[s].ndim == x_ndim && !memcmp(a[s].shape, want[s], (size_t)x_ndim * sizeof *xs),
              "%s stage %d shape (%lld, %lld, %lld, %lld, ..)", arch, s, (long long)a[s].shape[0],
              (long long)a[s].shape[1], (long long)a[s].shape[2], (long long)a[s].shape[3]);
    /* the same maps as NLC and NCHW, on 3 threads */
    ra_features_options o = {.all = 1, .layout = RA_LAYOUT_NCHW};
    ra_threads_set(3);
    st = ra_model_features(m, &b, &nb, NULL, NULL, NULL, x, x_ndim, xs, &o);
    CHECK(st == RA_OK && nb == nst, "%s features nchw: %s", arch, ra_last_error());
    o.layout = RA_LAYOUT_NLC;
    st = ra_model_features(m, &c, &nc, NULL, NULL, NULL, x, x_ndim, xs, &o);
    CHECK(st == RA_OK && nc == nst, "%s features nlc: %s", arch, ra_last_error());
    ra_threads_set(1);
    for (int s = 0; s < na && s < nb && s < nc; s++) {
        const int k = x_ndim - 1;   /* channels first: C, then the sides */
        CHECK(b[s].ndim == x_ndim && b[s].shape[1] == a[s].shape[k] &&
                  !memcmp(b[s].shape + 2, a[s].shape + 1, (size_t)(k - 1) * sizeof *xs),
              "%s stage %d nchw shape", arch, s);
        CHECK(c[s].ndim == 3 && c[s].shape[2] == a[s].shape[k] && numel(&c[s]) == numel(&a[s]),
              "%s stage %d nlc shape", arch, s);
        if (b[s].ndim != x_ndim || numel(&b[s]) != numel(&a[s]) || numel(&c[s]) != numel(&a[s]))
            continue;
        int shard = 0;
        const double far = transposed_apart(&a[s], &b[s], &shard);
        if (check_own_products()) {
            CHECK(!shard, "%s stage %d: 3 threads' nchw is not 1 thread's nhwc transposed",
                  arch, s);
            CHECK(!memcmp(c[s].data, a[s].data, (size_t)numel(&a[s]) * sizeof(float)),
                  "%s stage %d: nlc on 3 threads differs from nhwc on 1", arch, s);
        } else {
            CHECK(far < 1e-4, "%s stage %d: nchw vs nhwc %.3g", arch, s, far);
        }
    }
    /* timm's norm=True: the last stage normalised, pooled, is y */
    ra_features_options fin = {.count = 1, .index = {-1}, .norm = RA_FEATURES_NORM_FINAL};
    ra_tensor *d = NULL;
    int ndd = 0;
    char last[32];
    snprintf(last, sizeof last, "features.%d", nst - 1);
    st = ra_model_features(m, &d, &ndd, NULL, NULL, NULL, x, x_ndim, xs, &fin);
    CHECK(st == RA_OK && ndd == 1 && d && !strcmp(d[0].name, last), "%s norm final: %s", arch,
          ra_last_error());
    if (!st && y && na == nst) {
        const double worst = pooled_apart(&d[0], y);
        CHECK(worst < 1e-5, "%s: the pooled normalised last stage differs from y by %.3g",
              arch, worst);
        /* and without the norm it is another map */
        double moved = 0;
        for (int64_t i = 0; i < numel(&d[0]); i++)
            moved = fmax(moved, fabs(d[0].data[i] - a[nst - 1].data[i]));
        CHECK(moved > 0.1, "%s: the final norm changed the last stage by %.3g only", arch,
              moved);
    }
    /* bf16 and int8: the maps come from the forward in the model's precision */
    for (int pr = RA_PRECISION_BF16; pr <= RA_PRECISION_INT8; pr++) {
        ra_model *q = NULL;
        float *yq = NULL, *yf = NULL;
        ra_tensor *g = NULL;
        int ng = 0, n1 = 0, n2 = 0;
        int64_t s1[4], s2[4];
        st = ra_model_create(&q, meta, nmeta, 7);
        if (!st) st = ra_model_set_precision(q, (ra_precision)pr);
        if (!st) st = ra_model_forward(q, &yq, &n1, s1, x, x_ndim, xs);
        if (!st) st = ra_model_features(q, &g, &ng, &yf, &n2, s2, x, x_ndim, xs, &fin);
        CHECK(st == RA_OK, "%s precision %d: %s", arch, pr, ra_last_error());
        if (!st && y) {
            CHECK(!memcmp(yq, yf, (size_t)(B * C) * sizeof *yq),
                  "%s precision %d: features' y is not the forward's", arch, pr);
            const double worst = pooled_apart(&g[0], yq);   /* y here too */
            double fp32 = 0;
            for (int64_t i = 0; i < B * C; i++) fp32 = fmax(fp32, fabs(yq[i] - y[i]));
            CHECK(worst < 1e-4, "%s precision %d: pooled last stage vs y %.3g", arch, pr, worst);
            CHECK(fp32 > 0, "%s precision %d computed as fp32", arch, pr);
        }
        ra_features_free(g, ng);
        free(yq), free(yf);
        ra_model_free(q);
    }
    /* a features run (ra_run, as the CLI and Python make it): the same maps */
    ra_run *r = NULL;
    ra_tensor inx = {.name = "x", .ndim = x_ndim, .data = x};
    memcpy(inx.shape, xs, (size_t)x_ndim * sizeof *xs);
    st = ra_run_create_features(&r, m, NULL, &inx, 1);
    if (!st) st = ra_run_exec(r);
    CHECK(st == RA_OK && ra_run_output_count(r) == 1 + nst, "%s features run: %s", arch,
          ra_last_error());
    for (int s = 0; !st && s < nst && s < na; s++) {
        const ra_tensor *t = ra_run_output(r, 1 + s);
        CHECK(t && !strcmp(t->name, a[s].name) && t->ndim == a[s].ndim &&
                  !memcmp(t->shape, a[s].shape, (size_t)t->ndim * sizeof *xs) &&
                  !memcmp(t->data, a[s].data, (size_t)numel(t) * sizeof(float)),
              "%s features run: output %d is not %s", arch, 1 + s, a[s].name);
    }
    ra_run_free(r);
    /* refusals */
    ra_tensor *e = NULL;
    int ne = 0;
    char why[32];
    snprintf(why, sizeof why, "no stage %d", nst);
    ra_features_options bad = {.count = 1, .index = {nst}};
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, x_ndim, xs, &bad) == RA_ERR_ARG &&
              strstr(ra_last_error(), why), "%s stage %d of %d: %s", arch, nst, nst,
          ra_last_error());
    bad.index[0] = -nst - 1;
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, x_ndim, xs, &bad) == RA_ERR_ARG,
          "%s stage -%d of %d", arch, nst + 1, nst);
    bad = (ra_features_options){.count = RA_MAX_FEATURES + 1};
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, x_ndim, xs, &bad) == RA_ERR_ARG,
          "%s: 65 indices", arch);
    bad = (ra_features_options){.layout = (ra_layout)9};
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, x_ndim, xs, &bad) == RA_ERR_ARG,
          "%s: layout 9", arch);
    bad = (ra_features_options){.prefix_tokens = 1};
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, x_ndim, xs, &bad) == RA_ERR_ARG,
          "%s: prefix tokens", arch);
    int64_t xg[5];
    memcpy(xg, xs, (size_t)x_ndim * sizeof *xs);
    xg[0] = 1, xg[1] = 1;
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, x_ndim, xg, NULL) == RA_ERR_SHAPE,
          "%s: one channel for three", arch);
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, x_ndim - 1, xs, NULL) ==
              RA_ERR_SHAPE, "%s: x of %d dims", arch, x_ndim - 1);
    CHECK(e == NULL && ne == 0, "%s: a refusal left maps", arch);
    logits_from_last_stage(meta, nmeta, x_ndim, xs, x);
    ra_features_free(a, na), ra_features_free(b, nb), ra_features_free(c, nc);
    ra_features_free(d, ndd);
    free(y), free(y2), free(x);
    ra_model_free(m);
}

/* swin: 3 images of 37 x 41 (padded windows and merging): stages of 10 x 11,
 * 5 x 6, 3 x 3 tokens. */
static void swin(void) {
    const char *meta[] = {"arch", "swin", "img_size", "40", "patch_size", "4", "in_chans", "3",
                          "num_classes", "0", "embed_dim", "8", "depths", "2,2,2",
                          "num_heads", "1,2,2", "window_size", "3"};
    const int64_t xs[4] = {3, 3, 37, 41};
    const int64_t want[3][5] = {{3, 10, 11, 8}, {3, 5, 6, 16}, {3, 3, 3, 32}};
    network(meta, (int)(sizeof meta / sizeof *meta / 2), 4, xs, 3, want);
}

/* swin3d (Video Swin): 3 clips of 5 x 19 x 23, patch 2 x 4 x 4: stages of
 * 3 x 5 x 6, 3 x 3 x 3, 3 x 2 x 2 tokens (T', H', W', unpadded); the window
 * 2 x 3 x 3 pads T' and H' (and is clamped on the last stage). */
static void swin3d(void) {
    const char *meta[] = {"arch", "swin3d", "patch_size", "2,4,4", "in_chans", "3",
                          "num_classes", "0", "embed_dim", "8", "depths", "2,1,2",
                          "num_heads", "1,2,2", "window_size", "2,3,3"};
    const int64_t xs[5] = {3, 3, 5, 19, 23};
    const int64_t want[3][5] = {{3, 3, 5, 6, 8}, {3, 3, 3, 3, 16}, {3, 3, 2, 2, 32}};
    network(meta, (int)(sizeof meta / sizeof *meta / 2), 5, xs, 3, want);
}

static void vit(void) {
    const char *meta[] = {"arch", "vit", "img_size", "24", "patch_size", "8", "in_chans", "3",
                          "num_classes", "0", "embed_dim", "16", "depth", "3",
                          "num_heads", "2", "mlp_ratio", "4", "qkv_bias", "true",
                          "global_pool", "", "reg_tokens", "1"};
    ra_model *m = NULL;
    ra_status st = ra_model_create(&m, meta, (int)(sizeof meta / sizeof *meta / 2), 9);
    CHECK(st == RA_OK, "create vit: %s", ra_last_error());
    if (st) return;
    const int64_t xs[4] = {2, 3, 24, 24};
    float *x = random_images(2 * 3 * 24 * 24, 2);
    float *y = NULL;
    int nd = 0, n = 0;
    int64_t ys[4];
    ra_tensor *f = NULL;
    ra_features_options o = {.count = 2, .index = {-1, 2}, .norm = RA_FEATURES_NORM_FINAL,
                             .layout = RA_LAYOUT_NLC, .prefix_tokens = 1};
    st = ra_model_features(m, &f, &n, &y, &nd, ys, x, 4, xs, &o);
    CHECK(st == RA_OK && n == 2, "vit features: %s (%d tensors)", ra_last_error(), n);
    const ra_tensor *p = map_of(f, n, "features.2"), *q = map_of(f, n, "features.2.prefix");
    CHECK(p && q && nd == 3 && ys[1] == 11 && ys[2] == 16, "vit: y (2, 11, 16) and features.2");
    if (p && q && !st) {
        CHECK(p->ndim == 3 && p->shape[0] == 2 && p->shape[1] == 9 && p->shape[2] == 16,
              "features.2 is (2, 9, 16)");
        CHECK(q->ndim == 3 && q->shape[0] == 2 && q->shape[1] == 2 && q->shape[2] == 16,
              "features.2.prefix is (2, 2, 16)");
        double worst = 0;
        for (int b = 0; b < 2; b++)
            for (int t = 0; t < 11; t++)
                for (int ch = 0; ch < 16; ch++) {
                    const float got = t < 2 ? q->data[(b * 2 + t) * 16 + ch]
                                            : p->data[(b * 9 + t - 2) * 16 + ch];
                    worst = fmax(worst, fabs(got - y[(b * 11 + t) * 16 + ch]));
                }
        CHECK(worst < 1e-6, "the last block through the final norm differs from y by %.3g",
              worst);
    }
    ra_tensor *e = NULL;
    int ne = 0;
    ra_features_options bad = {.count = 1, .index = {3}};
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, 4, xs, &bad) == RA_ERR_ARG &&
              strstr(ra_last_error(), "no block 3"), "block 3 of 3: %s", ra_last_error());
    ra_features_free(f, n);
    free(y), free(x);
    ra_model_free(m);
    /* an attention layer has no maps */
    const char *lm[] = {"arch", "vit_attention", "dim", "8", "num_heads", "2"};
    st = ra_model_create(&m, lm, 3, 1);
    CHECK(st == RA_OK, "create vit_attention: %s", ra_last_error());
    const int64_t ls[3] = {1, 4, 8};
    float z[32] = {0};
    if (!st)
        CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, z, 3, ls, NULL) == RA_ERR_ARG,
              "an attention layer's features");
    ra_model_free(m);
}

int main(void) {
    swin();
    swin3d();
    vit();
    return check_done();
}
