/* test_trainer.c - the training step split into data shards (src/train.c):
 * with T threads the batch runs as T shards on replicas of the model, and
 * the step must be the whole batch's step up to the order of the sums. The
 * loss and the gradient norm of one step, and the weights after it, are
 * compared between 1 thread (one shard: the layers' own code path) and 2,
 * 3 and 5 threads (even and uneven shards, more threads than images), for
 * a Swin and a ViT. A shard sliced wrongly, summed twice or left out moves
 * the loss or the norm by far more than rounding. */
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
    free(d.images), free(d.labels);
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}
