/* test_features.c - ra_model_features without PyTorch (tests/test_features.py
 * holds the maps to PyTorch's): what the maps must be whatever the weights,
 * on networks made by ra_model_create.
 *
 * 1. swin without head (y: the mean of the final norm's tokens): every stage
 *    of a 3-image batch of 37 x 41 (padded windows and merging), y the very
 *    bits of ra_model_forward's; NLC the bits of NHWC, NCHW its transpose;
 *    the last stage through the final norm (timm's norm=True), pooled, is y;
 *    the maps on 1 thread and on 3 (shards) the same bits where the products
 *    are relattn's own; in bf16 and int8, y the forward's bits and the
 *    normalised last stage, pooled, y again.
 * 2. vit without head or pooling (global_pool "": y the final norm's
 *    tokens): block -1 through the final norm is y's patch tokens and its
 *    prefix tokens y's first rows; indices -1 and 2 of 3 blocks are one map.
 * 3. Refusals (RA_ERR_ARG): a stage or block the model has not, 65 indices,
 *    prefix tokens of a Swin, an attention layer; an image of the wrong
 *    channels (RA_ERR_SHAPE).
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

static void swin(void) {
    const char *meta[] = {"arch", "swin", "img_size", "40", "patch_size", "4", "in_chans", "3",
                          "num_classes", "0", "embed_dim", "8", "depths", "2,2,2",
                          "num_heads", "1,2,2", "window_size", "3"};
    ra_model *m = NULL;
    ra_status st = ra_model_create(&m, meta, (int)(sizeof meta / sizeof *meta / 2), 7);
    CHECK(st == RA_OK, "create swin: %s", ra_last_error());
    if (st) return;
    const int64_t xs[4] = {3, 3, 37, 41};
    float *x = random_images(3 * 3 * 37 * 41, 1);
    ra_tensor *a = NULL, *b = NULL, *c = NULL;
    int na = 0, nb = 0, nc = 0, nd = 0, nd2 = 0;
    float *y = NULL, *y2 = NULL;
    int64_t ys[4], ys2[4];
    ra_threads_set(1);
    st = ra_model_forward(m, &y, &nd, ys, x, 4, xs);
    CHECK(st == RA_OK, "forward: %s", ra_last_error());
    st = ra_model_features(m, &a, &na, &y2, &nd2, ys2, x, 4, xs, NULL);
    CHECK(st == RA_OK && na == 3, "features: %s (%d maps)", ra_last_error(), na);
    CHECK(y && y2 && nd == 2 && nd2 == 2 && ys2[1] == 32 && !memcmp(y, y2, 3 * 32 * sizeof *y),
          "features' y is not forward's");
    /* the stages' maps: 10 x 11, 5 x 6, 3 x 3 tokens, NHWC */
    const int64_t want[3][4] = {{3, 10, 11, 8}, {3, 5, 6, 16}, {3, 3, 3, 32}};
    for (int s = 0; s < na && s < 3; s++)
        CHECK(a[s].ndim == 4 && !memcmp(a[s].shape, want[s], sizeof want[s]),
              "stage %d shape (%lld, %lld, %lld, %lld)", s, (long long)a[s].shape[0],
              (long long)a[s].shape[1], (long long)a[s].shape[2], (long long)a[s].shape[3]);
    /* the same maps as NLC and NCHW, on 3 threads */
    ra_features_options o = {.all = 1, .layout = RA_LAYOUT_NCHW};
    ra_threads_set(3);
    st = ra_model_features(m, &b, &nb, NULL, NULL, NULL, x, 4, xs, &o);
    CHECK(st == RA_OK && nb == 3, "features nchw: %s", ra_last_error());
    o.layout = RA_LAYOUT_NLC;
    st = ra_model_features(m, &c, &nc, NULL, NULL, NULL, x, 4, xs, &o);
    CHECK(st == RA_OK && nc == 3, "features nlc: %s", ra_last_error());
    ra_threads_set(1);
    for (int s = 0; s < na && s < nb && s < nc; s++) {
        const int64_t B = a[s].shape[0], H = a[s].shape[1], W = a[s].shape[2], C = a[s].shape[3];
        double far = 0, shard = 0;
        for (int64_t i = 0; i < B * H * W * C; i++) {
            const int64_t bb = i / (H * W * C), p = i / C % (H * W), ch = i % C;
            const float t = b[s].data[(bb * C + ch) * H * W + p];
            far = fmax(far, fabs((double)t - a[s].data[i]));
            if (!(t == a[s].data[i])) shard = 1;
        }
        CHECK(c[s].ndim == 3 && c[s].shape[1] == H * W && numel(&c[s]) == numel(&a[s]),
              "stage %d nlc shape", s);
        if (check_own_products()) {
            CHECK(!shard, "stage %d: 3 threads' nchw is not 1 thread's nhwc transposed", s);
            CHECK(!memcmp(c[s].data, a[s].data, (size_t)numel(&a[s]) * sizeof(float)),
                  "stage %d: nlc on 3 threads differs from nhwc on 1", s);
        } else {
            CHECK(far < 1e-4, "stage %d: nchw vs nhwc %.3g", s, far);
        }
    }
    /* timm's norm=True: the last stage normalised, pooled, is y */
    ra_features_options fin = {.count = 1, .index = {-1}, .norm = RA_FEATURES_NORM_FINAL};
    ra_tensor *d = NULL;
    int ndd = 0;
    st = ra_model_features(m, &d, &ndd, NULL, NULL, NULL, x, 4, xs, &fin);
    CHECK(st == RA_OK && ndd == 1 && d && !strcmp(d[0].name, "features.2"),
          "norm final: %s", ra_last_error());
    if (!st && y) {
        double worst = 0;
        for (int bb = 0; bb < 3; bb++)
            for (int ch = 0; ch < 32; ch++) {
                double sum = 0;
                for (int p = 0; p < 9; p++) sum += d[0].data[(bb * 9 + p) * 32 + ch];
                worst = fmax(worst, fabs(sum / 9 - y[bb * 32 + ch]));
            }
        CHECK(worst < 1e-5, "the pooled normalised last stage differs from y by %.3g", worst);
        /* and without the norm it is another map */
        double moved = 0;
        for (int64_t i = 0; i < numel(&d[0]); i++)
            moved = fmax(moved, fabs(d[0].data[i] - a[2].data[i]));
        CHECK(moved > 0.1, "the final norm changed the last stage by %.3g only", moved);
    }
    /* bf16 and int8: the maps come from the forward in the model's precision */
    for (int pr = RA_PRECISION_BF16; pr <= RA_PRECISION_INT8; pr++) {
        ra_model *q = NULL;
        float *yq = NULL, *yf = NULL;
        ra_tensor *g = NULL;
        int ng = 0, n1 = 0, n2 = 0;
        int64_t s1[4], s2[4];
        ra_features_options last = {.count = 1, .index = {-1}, .norm = RA_FEATURES_NORM_FINAL};
        st = ra_model_create(&q, meta, (int)(sizeof meta / sizeof *meta / 2), 7);
        if (!st) st = ra_model_set_precision(q, (ra_precision)pr);
        if (!st) st = ra_model_forward(q, &yq, &n1, s1, x, 4, xs);
        if (!st) st = ra_model_features(q, &g, &ng, &yf, &n2, s2, x, 4, xs, &last);
        CHECK(st == RA_OK, "precision %d: %s", pr, ra_last_error());
        if (!st) {
            CHECK(!memcmp(yq, yf, 3 * 32 * sizeof *yq), "precision %d: features' y is not the "
                  "forward's", pr);
            double worst = 0, fp32 = 0;   /* the pooled normalised stage is y here too */
            for (int bb = 0; bb < 3; bb++)
                for (int ch = 0; ch < 32; ch++) {
                    double sum = 0;
                    for (int p = 0; p < 9; p++) sum += g[0].data[(bb * 9 + p) * 32 + ch];
                    worst = fmax(worst, fabs(sum / 9 - yq[bb * 32 + ch]));
                    fp32 = fmax(fp32, fabs(yq[bb * 32 + ch] - y[bb * 32 + ch]));
                }
            CHECK(worst < 1e-4, "precision %d: pooled last stage vs y %.3g", pr, worst);
            CHECK(fp32 > 0, "precision %d computed as fp32", pr);
        }
        ra_features_free(g, ng);
        free(yq), free(yf);
        ra_model_free(q);
    }
    /* refusals */
    ra_tensor *e = NULL;
    int ne = 0;
    ra_features_options bad = {.count = 1, .index = {3}};
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, 4, xs, &bad) == RA_ERR_ARG &&
              strstr(ra_last_error(), "no stage 3"), "stage 3 of 3: %s", ra_last_error());
    bad.index[0] = -4;
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, 4, xs, &bad) == RA_ERR_ARG,
          "stage -4 of 3");
    bad = (ra_features_options){.count = RA_MAX_FEATURES + 1};
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, 4, xs, &bad) == RA_ERR_ARG,
          "65 indices");
    bad = (ra_features_options){.layout = (ra_layout)9};
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, 4, xs, &bad) == RA_ERR_ARG,
          "layout 9");
    bad = (ra_features_options){.prefix_tokens = 1};
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, 4, xs, &bad) == RA_ERR_ARG,
          "a swin's prefix tokens");
    const int64_t xg[4] = {1, 1, 37, 41};
    CHECK(ra_model_features(m, &e, &ne, NULL, NULL, NULL, x, 4, xg, NULL) == RA_ERR_SHAPE,
          "one channel for three");
    CHECK(e == NULL && ne == 0, "a refusal left maps");
    ra_features_free(a, na), ra_features_free(b, nb), ra_features_free(c, nc);
    ra_features_free(d, ndd);
    free(y), free(y2), free(x);
    ra_model_free(m);
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
    vit();
    return check_done();
}
