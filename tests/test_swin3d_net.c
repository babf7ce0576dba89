#define _POSIX_C_SOURCE 200809L
/* test_swin3d_net.c - the swin3d arch without PyTorch (its exactness against
 * the PyTorch twin is tests/test_swin3d_net.py):
 *   - the presets swin3d_t / _s / _b have torchvision's parameter counts
 *     (the weights' meta num_params: 28158070, 49816678, 88048984) and
 *     their weights' evaluation transform and clip as metadata;
 *   - a preset made at another crop scales its resize;
 *   - a small model: forward on clips whose sides are not multiples of the
 *     patch, the same logits one clip at a time as in a batch, saved and
 *     read back to the same bits; its backward's dx against central
 *     differences of the loss; the layers of layer-wise decay; FLOPs;
 *   - stochastic depth (metadata drop_path_rate), the checks the 2-D
 *     networks take (tests/net_grad_check.h): refused without a random
 *     generator and outside [0, 1]; the same draws give the same y, other
 *     than the inference's; six weights' gradients against central
 *     differences of training forwards with the same draws; at rate 1 the
 *     last block always drops: its parameters get no gradient and y is the
 *     inference of the model whose last block adds nothing;
 *   - refusals of inconsistent metadata and inputs (RA_ERR_FORMAT /
 *     RA_ERR_SHAPE, never a crash). */
#include "check.h"
#include "relattn.h"
#include "grad_check.h"
#include "net_grad_check.h"

#include <stdint.h>
#include <unistd.h>

static ra_model *small(const char *window, const char *depths, const char *heads) {
    const char *meta[] = {"arch", "swin3d", "patch_size", "2,4,4", "in_chans", "3",
                          "num_classes", "5", "embed_dim", "8", "depths", depths,
                          "num_heads", heads, "window_size", window};
    ra_model *m = NULL;
    const ra_status st = ra_model_create(&m, meta, 8, 7);
    CHECK(st == RA_OK, "create: %s", ra_last_error());
    return m;
}

static void presets(void) {
    static const struct {
        const char *name;
        int64_t params;
    } want[] = {{"swin3d_t", 28158070}, {"swin3d_s", 49816678}, {"swin3d_b", 88048984}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        ra_model *m = NULL;
        CHECK(ra_model_create_preset(&m, want[i].name, NULL, 0, 1) == RA_OK, "%s: %s",
              want[i].name, ra_last_error());
        if (!m) continue;
        CHECK(ra_model_param_total(m) == want[i].params, "%s: %lld parameters, torchvision's %lld",
              want[i].name, (long long)ra_model_param_total(m), (long long)want[i].params);
        static const char *const kv[] = {"arch", "swin3d", "window_size", "8,7,7",
                                         "patch_size", "2,4,4", "num_classes", "400",
                                         "transform.resize", "shorter 256",
                                         "transform.crop", "224x224",
                                         "transform.interpolation", "bilinear",
                                         "mean", "0.485,0.456,0.406",
                                         "std", "0.229,0.224,0.225", "num_frames", "32",
                                         "transform.frame_rate", "15"};
        for (size_t k = 0; k < sizeof kv / sizeof *kv; k += 2) {
            const char *v = ra_model_meta(m, kv[k]);
            CHECK(v && !strcmp(v, kv[k + 1]), "%s: metadata %s = %s, want %s", want[i].name,
                  kv[k], v ? v : "(none)", kv[k + 1]);
        }
        printf("%s: %lld parameters (torchvision's num_params)\n", want[i].name,
               (long long)ra_model_param_total(m));
        ra_model_free(m);
    }
    ra_model *m = NULL;
    const char *set[] = {"img_size", "112"};
    CHECK(ra_model_create_preset(&m, "swin3d_t", set, 1, 1) == RA_OK, "%s", ra_last_error());
    const char *r = m ? ra_model_meta(m, "transform.resize") : NULL;
    CHECK(r && !strcmp(r, "shorter 128"), "112 crop: resize %s", r ? r : "(none)");
    ra_model_free(m);
}

static float lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xFFFFFF) / (float)(1 << 24) * 2.0f - 1.0f;
}

/* The loss sum(y * dy) of m on x. */
static double loss(ra_model *m, const float *x, const int64_t *shape, const float *dy) {
    float *y = NULL;
    int nd;
    int64_t ys[4];
    if (ra_model_forward(m, &y, &nd, ys, x, 5, shape) != RA_OK) return NAN;
    double s = 0;
    for (int64_t i = 0; i < ys[0] * ys[1]; i++) s += (double)y[i] * dy[i];
    free(y);
    return s;
}

static void small_model(void) {
    ra_model *m = small("2,3,3", "2,2", "2,4");
    if (!m) return;
    const int64_t shape[5] = {2, 3, 5, 13, 10}, n = 2 * 3 * 5 * 13 * 10;
    float *x = xmalloc((size_t)n * sizeof *x), *dx = xmalloc((size_t)n * sizeof *dx);
    uint64_t s = 3;
    for (int64_t i = 0; i < n; i++) x[i] = lcg(&s);
    float *y = NULL, *y1 = NULL;
    int nd;
    int64_t ys[4];
    CHECK(ra_model_forward(m, &y, &nd, ys, x, 5, shape) == RA_OK, "%s", ra_last_error());
    CHECK(y && nd == 2 && ys[0] == 2 && ys[1] == 5, "y (%lld, %lld)", (long long)ys[0], (long long)ys[1]);
    /* clip 1 alone: the same logits as in the batch */
    const int64_t one[5] = {1, 3, 5, 13, 10};
    CHECK(ra_model_forward(m, &y1, &nd, ys, x + n / 2, 5, one) == RA_OK, "%s", ra_last_error());
    int same = y && y1;
    for (int k = 0; same && k < 5; k++) same = fabsf(y1[k] - y[5 + k]) <= 1e-5f * (1 + fabsf(y[5 + k]));
    CHECK(same, "a clip alone and in a batch give other logits");
    /* saved and read back: the same bits */
    char path[] = "/tmp/test_swin3d_net.XXXXXX";
    const int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    ra_model *r = NULL;
    CHECK(fd >= 0 && ra_model_save(m, path, RA_DTYPE_F32) == RA_OK && ra_model_load(&r, path) == RA_OK,
          "save / load: %s", ra_last_error());
    float *y2 = NULL;
    if (r) CHECK(ra_model_forward(r, &y2, &nd, ys, x, 5, shape) == RA_OK, "%s", ra_last_error());
    CHECK(y && y2 && !memcmp(y, y2, 10 * sizeof *y), "the saved model gives other logits");
    ra_model_free(r);
    unlink(path);
    /* dx against central differences of sum(y * dy) (in double: a few x) */
    float dy[10];
    for (int k = 0; k < 10; k++) dy[k] = lcg(&s);
    float *g = calloc((size_t)ra_model_param_total(m) + 1, sizeof *g), *yt = NULL;
    memset(dx, 0, (size_t)n * sizeof *dx);
    CHECK(ra_model_forward_train(m, &yt, &nd, ys, x, 5, shape, NULL) == RA_OK, "%s", ra_last_error());
    CHECK(ra_model_backward(m, g, dx, dy) == RA_OK, "%s", ra_last_error());
    double worst = 0;
    const int64_t probe[] = {0, 17, n / 3, n / 2 + 5, n - 1, 4 * 13 * 10 + 12 * 10 + 9};
    for (size_t k = 0; k < sizeof probe / sizeof *probe; k++) {
        const float keep = x[probe[k]], h = 1e-2f;
        x[probe[k]] = keep + h;
        const double lp = loss(m, x, shape, dy);
        x[probe[k]] = keep - h;
        const double lm = loss(m, x, shape, dy);
        x[probe[k]] = keep;
        const double cd = (lp - lm) / (2.0 * h), e = fabs(cd - dx[probe[k]]) / (1e-3 + fabs(cd));
        if (!(e <= worst)) worst = e;
    }
    CHECK(worst < 2e-2, "dx against central differences: %.3g", worst);
    printf("swin3d: dx against central differences, worst %.3g\n", worst);
    /* layer-wise decay: patch_embed 0, blocks 1.., the merge with its stage's last block */
    int count = 0;
    CHECK(ra_param_layer(m, "patch_embed.proj.weight", &count) == 0 && count == 6, "patch_embed");
    CHECK(ra_param_layer(m, "features.2.1.attn.qkv.weight", &count) == 4, "block 1.1");
    CHECK(ra_param_layer(m, "features.1.reduction.weight", &count) == 2, "the merge");
    CHECK(ra_param_layer(m, "head.weight", &count) == 5, "head");
    CHECK(ra_model_flops(m, 224, 224) > 0, "flops");
    free(x), free(dx), free(y), free(y1), free(y2), free(g), free(yt);
    /* inputs it refuses */
    float z[8] = {0};
    const int64_t bad4[4] = {1, 3, 4, 4}, bad_c[5] = {1, 2, 2, 4, 4};
    CHECK(ra_model_forward(m, &y, &nd, ys, z, 4, bad4) == RA_ERR_SHAPE, "4-D x");
    CHECK(ra_model_forward(m, &y, &nd, ys, z, 5, bad_c) == RA_ERR_SHAPE, "2 channels");
    ra_model_free(m);
}

/* Stochastic depth (net_grad_check.h) on a small swin3d of four blocks
 * (rates 0, 0.2, 0.4, 0.6), 4 clips of 3 x 4 x 12 x 12. */
static void drop_path(void) {
    const char *meta[] = {"arch", "swin3d", "patch_size", "2,4,4", "in_chans", "3",
                          "num_classes", "5", "embed_dim", "8", "depths", "2,2",
                          "num_heads", "2,4", "window_size", "2,3,3", "drop_path_rate", "0.6"};
    static const char *const want[] = {"features.0.1.attn.qkv.weight", "features.0.1.mlp.0.weight",
                                       "features.2.0.norm1.weight", "features.2.1.mlp.3.bias",
                                       "features.1.reduction.weight", "patch_embed.proj.weight"};
    static const char *const ends[] = {"attn.proj.weight", "attn.proj.bias", "mlp.3.weight",
                                       "mlp.3.bias"};
    const drop_path_spec sp = {.name = "swin3d", .meta = meta, .nmeta = 9, .rate_at = 17,
                               .depths_at = 11, .x_ndim = 5, .x_shape = {4, 3, 4, 12, 12},
                               .want = want, .nwant = 6, .depths1 = "1,1",
                               .last = "features.2.0.", .ends = ends};
    drop_path_check(&sp);
}

static void refusals(void) {
    static const char *const bad[][2] = {
        {"window_size", "7,7"}, {"patch_size", "4"}, {"num_heads", "2"},
        {"window_size", "2,0,3"}, {"embed_dim", "9"}, {"patch_size", "2,4,100"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *meta[] = {"arch", "swin3d", "patch_size", "2,4,4", "embed_dim", "8",
                              "depths", "2,2", "num_heads", "2,4", "window_size", "2,3,3",
                              bad[i][0], bad[i][1]};
        ra_model *m = NULL;
        const ra_status st = ra_model_create(&m, meta, 7, 1);
        CHECK(st == RA_ERR_FORMAT && !m, "%s = %s: status %d", bad[i][0], bad[i][1], (int)st);
        ra_model_free(m);
    }
}

int main(void) {
    presets();
    small_model();
    drop_path();
    refusals();
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}
