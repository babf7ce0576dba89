/* test_trainer.c - the training step split into data shards (src/train.c):
 * with T threads the batch runs as T shards on replicas of the model, and
 * the step must be the whole batch's step up to the order of the sums. The
 * loss and the gradient norm of one step, and the weights after it, are
 * compared between 1 thread (one shard: the layers' own code path) and 2,
 * 3 and 5 threads (even and uneven shards, more threads than images), for
 * a Swin and a ViT. A shard sliced wrongly, summed twice or left out moves
 * the loss or the norm by far more than rounding. The inference forward's
 * shards (src/model.c) must give the very bits of one pass. */
#include "check.h"
#include "relattn.h"

#include <stdint.h>
#include <string.h>

typedef struct {
    float loss, norm;
    float *w;
    int64_t n;
} outcome;

static outcome one_step(const char *const *meta, int nmeta, const ra_dataset *d, int batch,
                        int threads) {
    outcome o = {0};
    ra_threads_set(threads);
    ra_model *m = NULL;
    CHECK(ra_model_create(&m, meta, nmeta, 7) == RA_OK, "create: %s", ra_last_error());
    if (!m) return o;
    ra_train_config cfg = ra_train_config_default();
    cfg.batch = batch, cfg.flip = 0, cfg.lr = 1e-4, cfg.warmup_epochs = 0;
    ra_trainer *t = NULL;
    CHECK(ra_trainer_create(&t, m, &cfg, d) == RA_OK, "trainer: %s", ra_last_error());
    if (t) CHECK(ra_trainer_step(t, &o.loss, &o.norm) == RA_OK, "step: %s", ra_last_error());
    o.n = ra_model_param_total(m);
    o.w = malloc((size_t)o.n * sizeof *o.w);
    if (o.w) memcpy(o.w, ra_model_weights(m), (size_t)o.n * sizeof *o.w);
    ra_trainer_free(t);
    ra_model_free(m);
    return o;
}

static void compare(const char *what, const char *const *meta, int nmeta, const ra_dataset *d,
                    int batch) {
    outcome ref = one_step(meta, nmeta, d, batch, 1);
    const int threads[] = {2, 3, 5};
    for (int k = 0; k < 3; k++) {
        outcome o = one_step(meta, nmeta, d, batch, threads[k]);
        CHECK(fabsf(o.loss - ref.loss) <= 1e-5f * ref.loss, "%s, %d threads: loss %.9g vs %.9g",
              what, threads[k], o.loss, ref.loss);
        CHECK(fabsf(o.norm - ref.norm) <= 1e-4f * ref.norm, "%s, %d threads: norm %.9g vs %.9g",
              what, threads[k], o.norm, ref.norm);
        CHECK(o.n == ref.n && o.n > 0, "%s: %lld weights vs %lld", what, (long long)o.n,
              (long long)ref.n);
        if (o.n == ref.n && o.w && ref.w)   /* lr 1e-4: a step moves a weight by <= ~1e-4 */
            CHECK_CLOSE(o.w, ref.w, (long)o.n, 1e-4, 2e-6, what);
        free(o.w);
    }
    free(ref.w);
}

/* ra_model_forward_train + ra_model_backward of a batch, the layer the
 * trainer's shards now live in: y, dx and the gradient at 1 thread against
 * 3 and 4 (uneven shards, replicas reused), before and after the weights
 * change (a replica must take the weights of the moment). */
static void train_same(const char *what, const char *const *meta, int nmeta, int b) {
    ra_model *m = NULL;
    CHECK(ra_model_create(&m, meta, nmeta, 5) == RA_OK, "create: %s", ra_last_error());
    if (!m) return;
    const int64_t xs[4] = {b, 1, 28, 28}, nx = (int64_t)b * 28 * 28, P = ra_model_param_total(m);
    float *x = malloc(sizeof *x * nx), *dy = malloc(sizeof *dy * b * 10);
    float *g[2] = {calloc((size_t)P, sizeof(float)), calloc((size_t)P, sizeof(float))};
    float *dx[2] = {calloc((size_t)nx, sizeof(float)), calloc((size_t)nx, sizeof(float))};
    float *y[2] = {NULL, NULL};
    uint64_t s = 11;
    for (int64_t i = 0; i < nx; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int32_t)(s >> 32)) * (1.0f / 2147483648.0f);
        if (i < b * 10) dy[i] = x[i] * 0.5f;
    }
    const int threads[] = {1, 3, 1, 4};
    for (int k = 0; k < 4; k++) {
        const int r = k & 1;
        if (k == 2) {   /* new weights for the second pair */
            float *w = ra_model_weights(m);
            for (int64_t i = 0; i < P; i++) w[i] *= 1.25f;
        }
        ra_threads_set(threads[k]);
        int nd = 0;
        int64_t ys[4];
        free(y[r]);
        y[r] = NULL;
        memset(g[r], 0, (size_t)P * sizeof(float));
        memset(dx[r], 0, (size_t)nx * sizeof(float));
        CHECK(ra_model_forward_train(m, &y[r], &nd, ys, x, 4, xs, NULL) == RA_OK, "%s: %s", what,
              ra_last_error());
        CHECK(nd == 2 && ys[0] == b && ys[1] == 10, "%s: y shape", what);
        CHECK(ra_model_backward(m, g[r], dx[r], dy) == RA_OK, "%s: %s", what, ra_last_error());
        if (!r || !y[0] || !y[1]) continue;
        char tag[96];
        snprintf(tag, sizeof tag, "%s, %d threads: y", what, threads[k]);
        CHECK_CLOSE(y[1], y[0], (long)b * 10, 1e-6, 1e-7, tag);
        snprintf(tag, sizeof tag, "%s, %d threads: dx", what, threads[k]);
        CHECK_CLOSE(dx[1], dx[0], (long)nx, 1e-5, 1e-7, tag);
        snprintf(tag, sizeof tag, "%s, %d threads: gradient", what, threads[k]);
        CHECK_CLOSE(g[1], g[0], (long)P, 1e-4, 1e-6, tag);
    }
    free(y[0]), free(y[1]), free(g[0]), free(g[1]), free(dx[0]), free(dx[1]), free(x), free(dy);
    ra_model_free(m);
}

/* ra_model_forward of a batch: one shard per thread from 2 threads on, and
 * the same numbers as one pass on one thread (each sample on its own): the
 * very bits on relattn's own products, within rounding where OpenBLAS
 * (RELATTN_GEMM=blas, or a CPU without AVX-512) blocks by the batch. */
static void forward_same(const char *what, const char *const *meta, int nmeta, int b) {
    const int bitwise = check_own_products();
    ra_model *m = NULL;
    CHECK(ra_model_create(&m, meta, nmeta, 5) == RA_OK, "create: %s", ra_last_error());
    if (!m) return;
    const int64_t xs[4] = {b, 1, 28, 28};
    float *x = malloc(sizeof *x * 2 * b * 28 * 28);   /* room for 2 channels */
    uint64_t s = 3;
    for (int i = 0; i < 2 * b * 28 * 28; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int32_t)(s >> 32)) * (1.0f / 2147483648.0f);
    }
    float *ref = NULL;
    int nd = 0;
    int64_t ys[4];
    ra_threads_set(1);
    CHECK(ra_model_forward(m, &ref, &nd, ys, x, 4, xs) == RA_OK, "%s", ra_last_error());
    const int threads[] = {2, 3, 8};
    for (int k = 0; k < 3 && ref; k++) {
        float *y = NULL;
        int nd2 = 0;
        int64_t ys2[4];
        ra_threads_set(threads[k]);
        CHECK(ra_model_forward(m, &y, &nd2, ys2, x, 4, xs) == RA_OK, "%s", ra_last_error());
        CHECK(y && nd2 == nd && ys2[0] == b && ys2[1] == ys[1], "%s, %d threads: shape", what,
              threads[k]);
        if (y && ys2[0] == b && ys2[1] == ys[1]) {
            if (bitwise)
                CHECK(memcmp(y, ref, sizeof *y * b * ys[1]) == 0,
                      "%s, %d threads: y differs from one thread's", what, threads[k]);
            else
                CHECK_CLOSE(y, ref, (long)(b * ys[1]), 1e-5, 1e-6, what);
        }
        free(y);
    }
    /* a bad input is refused with the shards' reason */
    const int64_t bad[4] = {b, 2, 28, 28};
    float *y = NULL;
    ra_threads_set(2);
    CHECK(ra_model_forward(m, &y, &nd, ys, x, 4, bad) != RA_OK && !y &&
              ra_last_error()[0] != 0,
          "%s: a batch of 2 channels: \"%s\"", what, ra_last_error());
    free(ref), free(x);
    ra_model_free(m);
}

int main(void) {
    const int h = 28, w = 28, n = 16;
    ra_dataset d = {.n = n, .h = h, .w = w, .classes = 10};
    d.images = malloc((size_t)n * h * w);
    d.labels = malloc((size_t)n);
    uint64_t s = 99;
    for (int64_t i = 0; i < (int64_t)n * h * w; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        d.images[i] = (uint8_t)(s >> 56);
    }
    for (int i = 0; i < n; i++) d.labels[i] = (uint8_t)(i * 3 % 10);
    const char *swin[] = {"arch", "swin", "img_size", "28,28", "patch_size", "4",
                          "in_chans", "1", "num_classes", "10", "embed_dim", "16",
                          "depths", "2,1", "num_heads", "2,2", "window_size", "7",
                          "mlp_ratio", "2.0", "qkv_bias", "true", "patch_norm", "true",
                          "ape", "false", "relative_position", "bias"};
    compare("swin, batch 10", swin, (int)(sizeof swin / sizeof *swin) / 2, &d, 10);
    compare("swin, batch 4", swin, (int)(sizeof swin / sizeof *swin) / 2, &d, 4);
    const char *vit[] = {"arch", "vit", "img_size", "28", "patch_size", "7", "in_chans", "1",
                         "num_classes", "10", "embed_dim", "16", "depth", "2", "num_heads", "2",
                         "mlp_ratio", "2.0", "qkv_bias", "true"};
    compare("vit, batch 10", vit, (int)(sizeof vit / sizeof *vit) / 2, &d, 10);
    train_same("swin, batch 5", swin, (int)(sizeof swin / sizeof *swin) / 2, 5);
    train_same("vit, batch 7", vit, (int)(sizeof vit / sizeof *vit) / 2, 7);
    forward_same("swin, batch 5", swin, (int)(sizeof swin / sizeof *swin) / 2, 5);
    forward_same("vit, batch 5", vit, (int)(sizeof vit / sizeof *vit) / 2, 5);
    free(d.images), free(d.labels);
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}
