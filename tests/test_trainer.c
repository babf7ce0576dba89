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
#include "models/model.h"   /* m->shards: the batch ran in shards */
#include "relattn.h"

#include <math.h>
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

static double max_abs(const float *v, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)v[i]));
    return m;
}

/* ra_model_forward_train + ra_model_backward of a batch x (xs[0] samples),
 * the layer the trainer's shards now live in: y, dx and the gradient at 1
 * thread against `threads` (uneven shards, replicas reused), before and
 * after the weights change (a replica must take the weights of the moment);
 * the batch must have run in shards. */
static void train_same_on(const char *what, ra_model *m, const float *x, int ndim,
                          const int64_t *xs, int threads) {
    int64_t nx = 1;
    for (int d = 0; d < ndim; d++) nx *= xs[d];
    const int64_t P = ra_model_param_total(m);
    float *g[2] = {calloc((size_t)P, sizeof(float)), calloc((size_t)P, sizeof(float))};
    float *dx[2] = {calloc((size_t)nx, sizeof(float)), calloc((size_t)nx, sizeof(float))};
    float *y[2] = {NULL, NULL}, *dy = NULL;
    int64_t ny = 0;
    for (int k = 0; k < 4; k++) {
        const int r = k & 1;
        if (k == 2) {   /* new weights for the second pair */
            float *w = ra_model_weights(m);
            for (int64_t i = 0; i < P; i++) w[i] *= 1.25f;
        }
        ra_threads_set(r ? threads + (k == 3) : 1);
        int nd = 0;
        int64_t ys[4];
        free(y[r]);
        y[r] = NULL;
        memset(g[r], 0, (size_t)P * sizeof(float));
        memset(dx[r], 0, (size_t)nx * sizeof(float));
        CHECK(ra_model_forward_train(m, &y[r], &nd, ys, x, ndim, xs, NULL) == RA_OK, "%s: %s",
              what, ra_last_error());
        if (!y[r]) break;
        if (!dy) {   /* dL/dy: a fixed pattern of y's size */
            ny = 1;
            for (int d = 0; d < nd; d++) ny *= ys[d];
            dy = malloc(sizeof *dy * (size_t)ny);
            for (int64_t i = 0; i < ny; i++) dy[i] = (float)((i * 7919) % 23 - 11) / 16.0f;
        }
        CHECK(!r || m->shards > 1, "%s, %d threads: the batch ran in one shard", what,
              threads + (k == 3));
        CHECK(ra_model_backward(m, g[r], dx[r], dy) == RA_OK, "%s: %s", what, ra_last_error());
        if (!r || !y[0] || !y[1]) continue;
        /* the sums' order differs (and OpenBLAS blocks by the shard's
         * rows): an element whose terms cancel (the key third of qkv.bias
         * has a true gradient of 0) keeps rounding noise of the size of
         * the largest terms, so each floor scales with them */
        char tag[160];
        snprintf(tag, sizeof tag, "%s, %d threads: y", what, threads + (k == 3));
        CHECK_CLOSE(y[1], y[0], (long)ny, 1e-6, fmax(1e-7, 1e-6 * max_abs(y[0], ny)), tag);
        snprintf(tag, sizeof tag, "%s, %d threads: dx", what, threads + (k == 3));
        CHECK_CLOSE(dx[1], dx[0], (long)nx, 1e-5, fmax(1e-7, 1e-6 * max_abs(dx[0], nx)), tag);
        snprintf(tag, sizeof tag, "%s, %d threads: gradient", what, threads + (k == 3));
        CHECK_CLOSE(g[1], g[0], (long)P, 1e-4, fmax(1e-6, 1e-6 * max_abs(g[0], P)), tag);
    }
    free(y[0]), free(y[1]), free(g[0]), free(g[1]), free(dx[0]), free(dx[1]), free(dy);
}

/* train_same_on a model made from meta, on a batch of b 28x28 images. */
static void train_same(const char *what, const char *const *meta, int nmeta, int b) {
    ra_model *m = NULL;
    CHECK(ra_model_create(&m, meta, nmeta, 5) == RA_OK, "create: %s", ra_last_error());
    if (!m) return;
    const int64_t xs[4] = {b, 1, 28, 28}, nx = (int64_t)b * 28 * 28;
    float *x = malloc(sizeof *x * nx);
    uint64_t s = 11;
    for (int64_t i = 0; i < nx; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int32_t)(s >> 32)) * (1.0f / 2147483648.0f);
    }
    train_same_on(what, m, x, 4, xs, 3);
    free(x);
    ra_model_free(m);
}

/* train_same_on a fixture's model and input x, at 2 (and 3) threads: a
 * replica is the model loaded, naming scheme included (torchvision's names
 * change SwinV2's parameters and Swin's windows). */
static void train_same_file(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.model.safetensors", dir, name);
    ra_model *m = NULL;
    ra_st_file *f = NULL;
    CHECK(ra_model_load(&m, path) == RA_OK, "%s: %s", name, ra_last_error());
    snprintf(path, sizeof path, "%s/%s.input.safetensors", dir, name);
    CHECK(ra_st_open(&f, path) == RA_OK, "%s: %s", name, ra_last_error());
    const ra_st_tensor *t = f ? ra_st_find(f, "x") : NULL;
    CHECK(t != NULL, "%s: no x", name);
    if (m && t && t->ndim >= 1 && t->ndim <= 8) {
        /* a batch of one sample gets a second (x / 2): shards need two */
        const int64_t n = t->numel, b = t->shape[0] == 1 ? 2 : t->shape[0];
        int64_t xs[8];
        memcpy(xs, t->shape, (size_t)t->ndim * sizeof *xs);
        xs[0] = b;
        float *x = malloc(sizeof *x * (size_t)(n * 2));
        CHECK(ra_st_read_f32(x, f, t) == RA_OK, "%s: %s", name, ra_last_error());
        for (int64_t i = 0; i < n; i++) x[n + i] = 0.5f * x[i];
        train_same_on(name, m, x, t->ndim, xs, 2);
        free(x);
    }
    ra_st_close(f);
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

/* The average of the weights (ema_decay): after each of 4 steps the
 * recurrence avg += (1 - d)(w - avg) from avg_0 = w_0, computed here, must
 * be the trainer's average to the bit (ra_trainer_use_average); the
 * weights being trained must be those of a run without it; a step while
 * the average is in is refused; a checkpoint holds the average as the
 * model's parameters and the trained weights as state, and resuming it
 * continues to the bits of the straight run. */
static void average(const char *const *meta, int nmeta, const ra_dataset *d) {
    ra_threads_set(2);
    ra_model *m = NULL, *p = NULL, *r = NULL;
    ra_trainer *t = NULL, *u = NULL, *v = NULL;
    ra_train_config cfg = ra_train_config_default();
    cfg.batch = 4, cfg.flip = 0, cfg.warmup_epochs = 0, cfg.ema_decay = 0.75;
    const double d0 = cfg.ema_decay;
    CHECK(ra_model_create(&m, meta, nmeta, 7) == RA_OK, "create: %s", ra_last_error());
    CHECK(ra_model_create(&p, meta, nmeta, 7) == RA_OK, "create: %s", ra_last_error());
    if (!m || !p) return;
    const int64_t n = ra_model_param_total(m);
    float *avg = malloc((size_t)n * sizeof *avg), *w = malloc((size_t)n * sizeof *w);
    float *avg2 = malloc((size_t)n * sizeof *avg2);   /* the average of step 2 */
    memcpy(avg, ra_model_weights(m), (size_t)n * sizeof *avg);
    CHECK(ra_trainer_create(&t, m, &cfg, d) == RA_OK, "trainer: %s", ra_last_error());
    ra_train_config plain = cfg;
    plain.ema_decay = 0;
    CHECK(ra_trainer_create(&u, p, &plain, d) == RA_OK, "trainer: %s", ra_last_error());
    ra_train_config bad = cfg;
    bad.ema_decay = 1.0;
    CHECK(ra_trainer_create(&v, p, &bad, d) == RA_ERR_ARG && !v, "decay 1 is refused");
    bad.ema_decay = 0.2;
    CHECK(ra_trainer_create(&v, p, &bad, d) == RA_ERR_ARG && !v, "decay 0.2 is refused");
    const char *path = "/tmp/relattn_test_trainer_avg.safetensors";
    for (int s = 0; t && u && s < 4; s++) {
        CHECK(ra_trainer_step(t, NULL, NULL) == RA_OK, "step %d: %s", s, ra_last_error());
        CHECK(ra_trainer_step(u, NULL, NULL) == RA_OK, "step %d: %s", s, ra_last_error());
        const float *wt = ra_model_weights(m);
        CHECK(memcmp(wt, ra_model_weights(p), (size_t)n * sizeof *wt) == 0,
              "step %d: the average changes the training", s);
        for (int64_t i = 0; i < n; i++) avg[i] += (float)(1.0 - d0) * (wt[i] - avg[i]);
        memcpy(w, wt, (size_t)n * sizeof *w);
        CHECK(ra_trainer_use_average(t, 1) == RA_OK, "use_average");
        CHECK(memcmp(ra_model_weights(m), avg, (size_t)n * sizeof *avg) == 0,
              "step %d: the model holds the average", s);
        CHECK(memcmp(ra_model_weights(m), w, (size_t)n * sizeof *w) != 0,
              "step %d: the average is not the weights", s);
        CHECK(ra_trainer_step(t, NULL, NULL) == RA_ERR_ARG, "a step with the average in is refused");
        if (s == 1) {
            CHECK(ra_trainer_save(t, path, NULL, 0) == RA_OK, "save: %s", ra_last_error());
            memcpy(avg2, avg, (size_t)n * sizeof *avg2);
        }
        CHECK(ra_trainer_use_average(t, 0) == RA_OK, "use_average back");
        CHECK(memcmp(ra_model_weights(m), w, (size_t)n * sizeof *w) == 0,
              "step %d: the weights are back", s);
    }
    /* the trainer's evaluation is ra_evaluate of its checkpoint as loaded,
     * and leaves the training weights in */
    if (t) {
        int64_t c0 = -1, c1 = -2, conf0[100], conf1[100];
        ra_model *now = NULL;
        CHECK(ra_trainer_evaluate(t, d, 5, &c0, conf0, 10) == RA_OK, "evaluate: %s",
              ra_last_error());
        CHECK(memcmp(ra_model_weights(m), w, (size_t)n * sizeof *w) == 0,
              "the weights are back after the evaluation");
        const char *p4 = "/tmp/relattn_test_trainer_eval.safetensors";
        CHECK(ra_trainer_save(t, p4, NULL, 0) == RA_OK && ra_model_load(&now, p4) == RA_OK,
              "save and load: %s", ra_last_error());
        remove(p4);
        if (now)
            CHECK(ra_evaluate(now, d, cfg.mean, cfg.std, 5, &c1, conf1, 10) == RA_OK && c0 == c1 &&
                  memcmp(conf0, conf1, sizeof conf0) == 0,
                  "the trainer's evaluation %lld, the checkpoint's %lld", (long long)c0,
                  (long long)c1);
        ra_model_free(now);
    }
    /* the checkpoint of step 2, resumed for 2 more steps */
    CHECK(ra_trainer_resume(&v, &r, path, d) == RA_OK, "resume: %s", ra_last_error());
    if (v) CHECK(ra_trainer_config(v)->ema_decay == d0, "the checkpoint keeps the decay");
    for (int s = 0; v && s < 2; s++)
        CHECK(ra_trainer_step(v, NULL, NULL) == RA_OK, "resumed step: %s", ra_last_error());
    if (v) {
        CHECK(memcmp(ra_model_weights(r), w, (size_t)n * sizeof *w) == 0,
              "resumed: the trained weights of the straight run");
        ra_trainer_use_average(v, 1);
        CHECK(memcmp(ra_model_weights(r), avg, (size_t)n * sizeof *avg) == 0,
              "resumed: the average of the straight run");
    }
    /* a bf16 run: evaluated as its float32 checkpoint loads, the
     * precision back for the next step (on so few images bf16 and fp32
     * classify alike: bf16_evaluation below tells them apart) */
    ra_model *b = NULL;
    ra_trainer *tb = NULL;
    CHECK(ra_model_create(&b, meta, nmeta, 7) == RA_OK &&
          ra_model_set_precision(b, RA_PRECISION_BF16) == RA_OK &&
          ra_trainer_create(&tb, b, &cfg, d) == RA_OK, "bf16 trainer: %s", ra_last_error());
    if (tb) {
        int64_t c0 = -1, c1 = -2;
        ra_model *now = NULL;
        const char *p4 = "/tmp/relattn_test_trainer_bf16.safetensors";
        CHECK(ra_trainer_step(tb, NULL, NULL) == RA_OK &&
              ra_trainer_evaluate(tb, d, 5, &c0, NULL, 10) == RA_OK &&
              ra_model_precision(b) == RA_PRECISION_BF16 && ra_trainer_step(tb, NULL, NULL) == RA_OK,
              "bf16: evaluate between steps: %s", ra_last_error());
        CHECK(ra_trainer_evaluate(tb, d, 5, &c0, NULL, 10) == RA_OK &&
              ra_trainer_save(tb, p4, NULL, 0) == RA_OK && ra_model_load(&now, p4) == RA_OK &&
              ra_model_precision(now) == RA_PRECISION_FP32 &&
              ra_evaluate(now, d, cfg.mean, cfg.std, 5, &c1, NULL, 10) == RA_OK && c0 == c1,
              "bf16: the trainer's evaluation %lld, the float32 checkpoint's %lld", (long long)c0,
              (long long)c1);
        ra_model_free(now);
        remove(p4);
    }
    ra_trainer_free(tb);
    ra_model_free(b);
    ra_model *saved = NULL;   /* the file's parameters: the average */
    CHECK(ra_model_load(&saved, path) == RA_OK, "load: %s", ra_last_error());
    CHECK(saved && ra_model_param_total(saved) == n &&
          memcmp(ra_model_weights(saved), avg2, (size_t)n * sizeof *avg2) == 0,
          "the checkpoint's parameters are the average");
    ra_model_free(saved);
    remove(path);
    free(avg), free(w), free(avg2);
    ra_trainer_free(t), ra_trainer_free(u), ra_trainer_free(v);
    ra_model_free(m), ra_model_free(p), ra_model_free(r);
}

/* A bf16 run's evaluation is its float32 checkpoint's, not its own in
 * bf16. Images labelled with the float32 model's own classes: the trainer
 * must count every one, where an evaluation in bf16 misses those bf16
 * classifies otherwise. The head's weights scaled down put the logits
 * near ties, so that there are such images (checked: without them this
 * could not fail). */
static void bf16_evaluation(const char *const *meta, int nmeta, const ra_dataset *d) {
    enum { NI = 2000 };
    ra_model *b = NULL, *f32 = NULL;
    ra_trainer *t = NULL;
    ra_train_config cfg = ra_train_config_default();
    cfg.batch = 4;
    const char *path = "/tmp/relattn_test_trainer_bf16.safetensors";
    CHECK(ra_model_create(&b, meta, nmeta, 7) == RA_OK, "create: %s", ra_last_error());
    float *hw = b ? (float *)rai_model_get(b, "head.weight") : NULL;
    for (int p = 0; hw && p < b->nparams; p++)
        if (!strcmp(b->params[p].name, "head.weight"))
            for (int64_t i = 0; i < b->params[p].numel; i++) hw[i] *= 0.01f;
    CHECK(hw && ra_model_set_precision(b, RA_PRECISION_BF16) == RA_OK &&
          ra_trainer_create(&t, b, &cfg, d) == RA_OK && ra_trainer_save(t, path, NULL, 0) == RA_OK &&
          ra_model_load(&f32, path) == RA_OK, "bf16 trainer and its checkpoint: %s",
          ra_last_error());
    ra_dataset e = {.n = NI, .h = d->h, .w = d->w, .classes = d->classes};
    e.images = malloc((size_t)NI * d->h * d->w), e.labels = malloc(NI);
    int32_t *p32 = malloc(NI * sizeof *p32), *p16 = malloc(NI * sizeof *p16);
    uint64_t s = 12345;
    for (int64_t i = 0; e.images && i < (int64_t)NI * d->h * d->w; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        e.images[i] = (uint8_t)(s >> 56);
    }
    int flips = 0;
    int64_t c = -1;
    if (t && f32 && e.images && e.labels && p32 && p16 &&
        ra_predict(f32, &e, cfg.mean, cfg.std, 50, p32) == RA_OK &&
        ra_predict(b, &e, cfg.mean, cfg.std, 50, p16) == RA_OK) {
        for (int i = 0; i < NI; i++) e.labels[i] = (uint8_t)p32[i], flips += p16[i] != p32[i];
        CHECK(flips > 0, "bf16 and float32 classify all %d images alike: the check below "
              "cannot tell them apart", NI);
        CHECK(ra_trainer_evaluate(t, &e, 50, &c, NULL, 10) == RA_OK && c == NI,
              "bf16: the trainer counts %lld of the float32 checkpoint's %d classes (bf16 "
              "differs on %d)", (long long)c, NI, flips);
        CHECK(ra_model_precision(b) == RA_PRECISION_BF16 && ra_trainer_step(t, NULL, NULL) == RA_OK,
              "bf16: training goes on after the evaluation: %s", ra_last_error());
    }
    free(e.images), free(e.labels), free(p32), free(p16);
    ra_trainer_free(t);
    ra_model_free(b), ra_model_free(f32);
    remove(path);
}

/* A copy of checkpoint src at dst with metadata key set to value (NULL:
 * left out) and tensor drop (NULL: none) left out. */
static int rewrite(const char *src, const char *dst, const char *key, const char *value,
                   const char *drop) {
    ra_st_file *f = NULL;
    if (ra_st_open(&f, src)) return -1;
    ra_st_writer *w = ra_st_writer_new();
    ra_status st = w ? RA_OK : RA_ERR_NOMEM;
    for (int i = 0; i < ra_st_meta_count(f) && !st; i++) {
        const char *k = ra_st_meta_key(f, i);
        if (strcmp(k, key) != 0) st = ra_st_writer_meta(w, k, ra_st_meta(f, k));
    }
    if (!st && value) st = ra_st_writer_meta(w, key, value);
    for (int i = 0; i < ra_st_count(f) && !st; i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        if (!drop || strcmp(t->name, drop) != 0)
            st = ra_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    ra_input_forget(dst);   /* an earlier case read it; this one means to replace it */
    if (!st) st = ra_st_writer_save(w, dst);
    ra_st_writer_free(w);
    ra_st_close(f);
    return st ? -1 : 0;
}

/* Checkpoints of a run with an average, spoiled: a decay out of range or
 * not a number, the trained weights' state missing: each refused with a
 * status, nothing made. An old checkpoint without the key resumes with no
 * average. */
static void average_hostile(const char *const *meta, int nmeta, const ra_dataset *d) {
    ra_model *m = NULL;
    ra_trainer *t = NULL;
    ra_train_config cfg = ra_train_config_default();
    cfg.batch = 4, cfg.flip = 0, cfg.ema_decay = 0.9;
    const char *good = "/tmp/relattn_test_trainer_good.safetensors";
    const char *bad = "/tmp/relattn_test_trainer_bad.safetensors";
    CHECK(ra_model_create(&m, meta, nmeta, 3) == RA_OK && ra_trainer_create(&t, m, &cfg, d) == RA_OK &&
          ra_trainer_step(t, NULL, NULL) == RA_OK && ra_trainer_save(t, good, NULL, 0) == RA_OK,
          "a checkpoint with an average: %s", ra_last_error());
    ra_trainer_free(t), ra_model_free(m);
    static const char *const decays[] = {"nan", "inf", "-0.9", "0.2", "1", "1e308", "0.9x", ""};
    for (size_t i = 0; i < sizeof decays / sizeof *decays; i++) {
        ra_trainer *r = NULL;
        ra_model *rm = NULL;
        CHECK(rewrite(good, bad, "train.ema_decay", decays[i], NULL) == 0, "rewrite");
        const ra_status st = ra_trainer_resume(&r, &rm, bad, d);
        CHECK((st == RA_ERR_ARG || st == RA_ERR_FORMAT) && !r && !rm,
              "train.ema_decay \"%s\": status %d", decays[i], (int)st);
        ra_trainer_free(r), ra_model_free(rm);
    }
    ra_trainer *r = NULL;
    ra_model *rm = NULL;
    CHECK(rewrite(good, bad, "train.ema_decay", "0.9", "__optim__.weights.head.weight") == 0, "rewrite");
    ra_status st = ra_trainer_resume(&r, &rm, bad, d);
    CHECK(st == RA_ERR_FORMAT && !r && !rm, "the trained weights' state missing: status %d", (int)st);
    ra_trainer_free(r), ra_model_free(rm), r = NULL, rm = NULL;
    /* before the average existed: no key, no state; resumes without one */
    CHECK(rewrite(good, bad, "train.ema_decay", NULL, NULL) == 0, "rewrite");
    st = ra_trainer_resume(&r, &rm, bad, d);
    CHECK(st == RA_OK && r && ra_trainer_config(r)->ema_decay == 0,
          "a checkpoint without train.ema_decay: %s", ra_last_error());
    ra_trainer_free(r), ra_model_free(rm);
    remove(good), remove(bad);
}

/* Test-time flips (ra_model_predict): with metadata tta = flip a model
 * predicts the mean of its outputs for the image and for the image mirrored
 * left to right, computed here from two plain forwards; without it (or
 * "none") it predicts its forward's very bits; any other value is refused. */
static void flip_prediction(const char *const *meta, int nmeta) {
    ra_threads_set(2);
    const char *with[64], *junk[64];
    for (int i = 0; i < 2 * nmeta; i++) with[i] = junk[i] = meta[i];
    with[2 * nmeta] = junk[2 * nmeta] = "tta";
    with[2 * nmeta + 1] = "flip", junk[2 * nmeta + 1] = "sideways";
    ra_model *plain = NULL, *flip = NULL, *bad = NULL;
    CHECK(ra_model_create(&plain, meta, nmeta, 3) == RA_OK, "create: %s", ra_last_error());
    CHECK(ra_model_create(&flip, with, nmeta + 1, 3) == RA_OK, "create: %s", ra_last_error());
    CHECK(ra_model_create(&bad, junk, nmeta + 1, 3) == RA_OK, "create: %s", ra_last_error());
    enum { B = 3, H = 28, W = 28 };
    static float x[B * H * W], xm[B * H * W];
    uint64_t s = 5;
    for (int i = 0; i < B * H * W; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int r = 0; r < B * H; r++)
        for (int j = 0; j < W; j++) xm[r * W + j] = x[r * W + W - 1 - j];
    const int64_t xs[4] = {B, 1, H, W};
    float *y0 = NULL, *y1 = NULL, *yp = NULL, *yf = NULL;
    int nd;
    int64_t ys[4];
    const int ok = plain && flip && bad &&
                   ra_model_forward(plain, &y0, &nd, ys, x, 4, xs) == RA_OK &&
                   ra_model_forward(plain, &y1, &nd, ys, xm, 4, xs) == RA_OK &&
                   ra_model_predict(plain, &yp, &nd, ys, x, 4, xs) == RA_OK &&
                   ra_model_predict(flip, &yf, &nd, ys, x, 4, xs) == RA_OK && nd == 2 &&
                   ys[0] == B && ys[1] == 10;
    CHECK(ok, "predict: %s", ra_last_error());
    if (ok) {
        int same = 1, mean = 1, moved = 0;
        for (int i = 0; i < B * 10; i++) {
            same &= yp[i] == y0[i];
            mean &= yf[i] == 0.5f * (y0[i] + y1[i]);
            moved += yf[i] != y0[i];
        }
        CHECK(same, "predict without tta: not the forward's bits");
        CHECK(mean, "predict with tta = flip: not the mean over the image and its mirror");
        CHECK(moved > 0, "the mirror gave the same outputs: the test cannot tell a mirror");
        float *z = NULL;
        CHECK(ra_model_predict(bad, &z, &nd, ys, x, 4, xs) == RA_ERR_FORMAT && !z,
              "tta = sideways: accepted");
        const int64_t x3[3] = {B, H, W};
        CHECK(ra_model_predict(flip, &z, &nd, ys, x, 3, x3) == RA_ERR_ARG && !z,
              "tta = flip of a (B, H, W) input: accepted");
    }
    free(y0), free(y1), free(yp), free(yf);
    ra_model_free(plain), ra_model_free(flip), ra_model_free(bad);
}

/* A block's input (B, H, W, C) is 4-D too, but its last axis is channels:
 * tta = flip is refused for a model that is not an image classifier. */
static void flip_block_refused(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/net_block_4d_10x6.model.safetensors", dir);
    const char *const set[] = {"tta=flip"};
    ra_load_options o = {.set = set, .nset = 1};
    ra_model *m = NULL;
    CHECK(ra_model_open(&m, path, &o) == RA_OK, "open %s: %s", path, ra_last_error());
    if (!m) return;
    enum { H = 8, W = 8, C = 16 };
    static float x[H * W * C];
    for (int i = 0; i < H * W * C; i++) x[i] = (float)(i % 7) - 3.0f;
    const int64_t xs[4] = {1, H, W, C};
    float *y = NULL;
    int nd;
    int64_t ys[4];
    CHECK(ra_model_forward(m, &y, &nd, ys, x, 4, xs) == RA_OK && nd == 4,
          "the block's forward: %s", ra_last_error());
    free(y), y = NULL;
    CHECK(ra_model_predict(m, &y, &nd, ys, x, 4, xs) == RA_ERR_ARG && !y,
          "tta = flip on a swin_block: accepted");
    ra_model_free(m);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/fixtures";
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
    train_same_file(dir, "net_swin_tv_crop");
    train_same_file(dir, "v2_net_tv_pad");
    train_same_file(dir, "v2_net_official");
    train_same_file(dir, "net_swin_timm");
    forward_same("swin, batch 5", swin, (int)(sizeof swin / sizeof *swin) / 2, 5);
    forward_same("vit, batch 5", vit, (int)(sizeof vit / sizeof *vit) / 2, 5);
    average(swin, (int)(sizeof swin / sizeof *swin) / 2, &d);
    average_hostile(swin, (int)(sizeof swin / sizeof *swin) / 2, &d);
    bf16_evaluation(swin, (int)(sizeof swin / sizeof *swin) / 2, &d);
    flip_prediction(swin, (int)(sizeof swin / sizeof *swin) / 2);
    flip_prediction(vit, (int)(sizeof vit / sizeof *vit) / 2);
    flip_block_refused(dir);
    free(d.images), free(d.labels);
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}
