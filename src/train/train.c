/* train.c - the training loop of an image classifier (relattn.h section 10):
 * batches, loss, backward, clipping, AdamW on the schedule, checkpoints,
 * evaluation. The network's forward and backward are the model's
 * (ra_model_forward_train / ra_model_backward); this file only drives them.
 *
 * One step:
 *   x, labels = batch(permutation(seed, epoch)[...], augmentation(seed, t))
 *   logits = forward_train(x);  loss = cross_entropy(logits, labels)
 *   grad = 0;  backward(dloss/dlogits)
 *   clip(grad);  AdamW(weights, grad) at lr(t);  t += 1
 * Everything random is drawn from (seed, epoch) or (seed, t), never from a
 * generator carried from step to step: resuming at t needs nothing but t.
 *
 * With T threads the model cuts the batch into T shards of consecutive
 * images, one thread each, on replicas with their own tapes (src/models/model.c,
 * ra_model_forward_train): threads never wait for each other inside the
 * network, where the layers' own threading meets a barrier in every
 * product. The result depends on T (the order of the gradient sums), never
 * on timing: the same seed and threads give the same run. */
#include "models/model.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ra_trainer {
    ra_model *m;
    const ra_dataset *data;         /* the images, in memory; or */
    ra_loader *loader;              /* decoded and augmented by a loader */
    int64_t n;                      /* training images */
    int dc, dh, dw;                 /* their channels, rows, columns */
    int dt;                         /* a video loader's frames a clip (x (B, C, T, H, W)); 0 */
    float *targets;                 /* (B, K) mixup / cutmix's soft targets, or NULL */
    ra_train_config cfg;
    int64_t step, spe, total, warmup;
    int classes;
    float *grad, *mom1, *mom2;      /* (P) each, laid out like the weights */
    float **gptr;                   /* per parameter: its gradient, for clipping */
    int64_t *gsize;
    int *decay;                     /* per parameter: takes weight decay */
    int *frozen;                    /* per parameter: not trained (freeze: all but the head) */
    double *lr_scale;               /* per parameter: layer decay's factor of the lr (1 without) */
    float *x, *dlogits, *probs;     /* (B, C, H, W), (B, K), (B, K) */
    int32_t *labels;                /* (B) */
    int64_t *perm;                  /* (n) this epoch's order */
    int64_t perm_epoch;             /* the epoch perm was drawn for, -1 none */
    ra_train_comm comm;             /* the processes of a data-parallel run */
    int zero;                       /* ZeRO-1: moments of the own run only */
    int p0, p1;                     /* parameter tensors this process updates */
    int64_t moff;                   /* the float offset mom1 / mom2 start at */
    int64_t *zoff, *zcnt;           /* ZeRO-1: every process's run of floats */
    float *avg;                     /* (P) the average of the weights, or NULL */
    int avg_in;                     /* the model holds avg, t->avg the weights */
};

ra_train_config ra_train_config_default(void) {
    return (ra_train_config){.batch = 64, .epochs = 20, .lr = 2e-3, .min_lr = 1e-5,
                             .warmup_lr = 1e-6, .warmup_epochs = 0.5, .weight_decay = 0.05,
                             .label_smoothing = 0.1f, .clip_grad = 5.0f, .crop_pad = 0,
                             .flip = 1, .mean = 0.2860f, .std = 0.3530f, .seed = 0,
                             .mix_prob = 1.0f, .switch_prob = 0.5f, .shuffle = 1, .accum = 1};
}

/* The mixing of a configuration: on when either alpha is; as ra_mixup
 * (label smoothing in its targets). */
static int mixing(const ra_train_config *c) { return c->mixup_alpha > 0 || c->cutmix_alpha > 0; }
static ra_mixup mixup_of(const ra_train_config *c) {
    return (ra_mixup){c->mixup_alpha, c->cutmix_alpha, c->mix_prob, c->switch_prob,
                      c->label_smoothing};
}

static ra_status check_config(const ra_train_config *c) {
    if (c->batch < 1 || c->batch > 65536 || c->epochs < 1 || c->epochs > 100000)
        return rai_fail(RA_ERR_ARG, "batch %d and epochs %d must be in 1..65536 and 1..100000",
                        c->batch, c->epochs);
    if (!(c->lr > 0 && c->lr < 10) || !(c->min_lr >= 0 && c->min_lr <= c->lr) ||
        !(c->warmup_lr >= 0 && c->warmup_lr <= c->lr) ||
        !(c->warmup_epochs >= 0 && c->warmup_epochs <= c->epochs))
        return rai_fail(RA_ERR_ARG, "learning rates: lr %g (0..10), min_lr %g and warmup_lr %g "
                        "(0..lr), warm-up %g epochs (0..epochs)", c->lr, c->min_lr, c->warmup_lr,
                        c->warmup_epochs);
    const ra_mixup mx = mixup_of(c);
    ra_status st;
    if (mixing(c) && (st = rai_mixup_check(&mx, "trainer"))) return st;
    if (c->accum < 1 || c->accum > c->batch || c->batch % c->accum)
        return rai_fail(RA_ERR_ARG, "accumulation %d: the batch (%d) must be a multiple of it",
                        c->accum, c->batch);
    if (!(c->layer_decay >= 0 && c->layer_decay <= 1))
        return rai_fail(RA_ERR_ARG, "layer decay %g: 0 (off) or in (0, 1]", c->layer_decay);
    if (c->sched != 0 && c->sched != 1)
        return rai_fail(RA_ERR_ARG, "schedule %d: 0 (cosine) or 1 (constant)", c->sched);
    if (mixing(c) && c->batch % 2)
        return rai_fail(RA_ERR_ARG, "mixup and cutmix pair image i with image B-1-i: the batch "
                        "(%d) must be even", c->batch);
    if (c->ema_decay != 0 && !(c->ema_decay >= 0.5 && c->ema_decay < 1))
        return rai_fail(RA_ERR_ARG, "EMA decay %g: 0 (off) or in [0.5, 1)", c->ema_decay);
    if (!(c->weight_decay >= 0 && c->weight_decay < 1) ||
        !(c->label_smoothing >= 0 && c->label_smoothing < 1) || !(c->clip_grad >= 0) ||
        c->crop_pad < 0 || c->crop_pad > 64 || !(c->std > 0) || !isfinite(c->mean))
        return rai_fail(RA_ERR_ARG, "weight decay %g, label smoothing %g (0..1), clip %g, "
                        "crop padding %d (0..64), std %g (> 0)", c->weight_decay,
                        (double)c->label_smoothing, (double)c->clip_grad, c->crop_pad,
                        (double)c->std);
    return RA_OK;
}

void ra_trainer_free(ra_trainer *t) {
    if (!t) return;
    rai_free(t->grad), rai_free(t->mom1), rai_free(t->mom2);
    free(t->gptr), free(t->gsize), free(t->decay), free(t->frozen), free(t->lr_scale);
    rai_free(t->x), rai_free(t->dlogits), rai_free(t->probs);
    free(t->labels), free(t->perm), rai_free(t->targets);
    free(t->zoff), free(t->zcnt);
    rai_free(t->avg);
    free(t);
}

/* The number of classes a classifier model predicts (its head), or 0. */
static int model_classes(const ra_model *m) {
    const char *k = ra_model_meta(m, "num_classes");
    return k ? atoi(k) : 0;
}

/* The channels of data's images (1 for a dataset that does not say). */
static int data_channels(const ra_dataset *d) { return d->c > 1 ? d->c : 1; }


/* A trainer on data (in memory) or loader (n images of C x H x W in K
 * classes). */
static ra_status create(ra_trainer **out, ra_model *m, const ra_train_config *cfg,
                        const ra_dataset *data, ra_loader *loader) {
    *out = NULL;
    ra_status st = check_config(cfg);
    if (st) return st;
    if (!ra_model_trainable(m))
        return rai_fail(RA_ERR_ARG, "arch %s cannot be trained here", m->ops->name);
    const ra_loader_config *lc = loader ? ra_loader_config_of(loader) : NULL;
    if (lc && (!lc->train || lc->batch != cfg->batch))
        return rai_fail(RA_ERR_ARG, "trainer: the loader must be a training loader of batch %d",
                        cfg->batch);
    const int64_t n = data ? data->n : ra_loader_images(loader);
    const int dc = data ? data_channels(data) : lc->eval.grey ? 1 : 3;
    const int dh = data ? data->h : lc->size;
    const int dw = data ? data->w : lc->size;
    const int classes = data ? data->classes : ra_loader_classes(loader);
    const int dt = lc && lc->clip_len > 0 ? lc->clip_len : 0;
    if (dt && !ra_model_is_video(m))
        return rai_fail(RA_ERR_ARG, "the loader gives video clips: the model (%s) takes images",
                        m->ops->name);
    if (!dt && ra_model_is_video(m))
        return rai_fail(RA_ERR_ARG, "a video model (%s) trains on a video loader", m->ops->name);
    if (dt && mixing(cfg))
        return rai_fail(RA_ERR_ARG, "mixup and cutmix are for images, not video clips");
    const int k = model_classes(m);
    if (k < classes)
        return rai_fail(RA_ERR_ARG, "the model has %d classes, the data %d", k, classes);
    if (n < cfg->batch)
        return rai_fail(RA_ERR_ARG, "%lld training images are fewer than one batch of %d",
                        (long long)n, cfg->batch);
    int nlayers = 0;
    if (cfg->layer_decay > 0 && cfg->layer_decay < 1 && m->nparams &&
        ra_param_layer(m, m->params[0].name, &nlayers) < 0)
        return rai_fail(RA_ERR_ARG, "arch %s has no layers for a layer-wise learning-rate decay",
                        m->ops->name);
    const char *ic = ra_model_meta(m, "in_chans");
    if (!ic || atoi(ic) != dc)
        return rai_fail(RA_ERR_ARG, "the data are %s images: the model needs in_chans %d",
                        dc == 1 ? "grey" : "RGB", dc);
    ra_trainer *t = calloc(1, sizeof *t);
    if (!t) return rai_fail(RA_ERR_NOMEM, "trainer: out of memory");
    t->m = m, t->data = data, t->loader = loader, t->cfg = *cfg, t->classes = k;
    t->n = n, t->dc = dc, t->dh = dh, t->dw = dw, t->dt = dt, t->perm_epoch = -1;
    t->comm = (ra_train_comm){.rank = 0, .size = 1};
    t->p1 = m->nparams;
    t->spe = n / cfg->batch;
    t->total = t->spe * cfg->epochs;
    t->warmup = (int64_t)llround(cfg->warmup_epochs * (double)t->spe);
    const int64_t P = m->total, B = cfg->batch, px = (int64_t)dc * (dt ? dt : 1) * dh * dw;
    t->grad = rai_calloc((size_t)P + 1, sizeof(float));
    t->mom1 = rai_calloc((size_t)P + 1, sizeof(float));
    t->mom2 = rai_calloc((size_t)P + 1, sizeof(float));
    t->gptr = calloc((size_t)m->nparams + 1, sizeof *t->gptr);
    t->gsize = calloc((size_t)m->nparams + 1, sizeof *t->gsize);
    t->decay = calloc((size_t)m->nparams + 1, sizeof *t->decay);
    t->frozen = calloc((size_t)m->nparams + 1, sizeof *t->frozen);
    t->lr_scale = calloc((size_t)m->nparams + 1, sizeof *t->lr_scale);
    t->x = rai_alloc((size_t)(B * px), sizeof(float));
    t->dlogits = rai_alloc((size_t)(B * k), sizeof(float));
    t->probs = rai_alloc((size_t)(B * k), sizeof(float));
    t->labels = malloc((size_t)B * sizeof *t->labels);
    t->perm = data ? malloc((size_t)n * sizeof *t->perm) : NULL;
    t->avg = cfg->ema_decay > 0 ? rai_alloc((size_t)P + 1, sizeof(float)) : NULL;
    t->targets = mixing(cfg) ? rai_alloc((size_t)(B * k), sizeof(float)) : NULL;
    if (!t->grad || !t->mom1 || !t->mom2 || !t->gptr || !t->gsize || !t->decay || !t->frozen ||
        !t->lr_scale || !t->x ||
        !t->dlogits || !t->probs || !t->labels || (data && !t->perm) ||
        (cfg->ema_decay > 0 && !t->avg) || (mixing(cfg) && !t->targets)) {
        ra_trainer_free(t);
        return rai_fail(RA_ERR_NOMEM, "trainer: out of memory");
    }
    for (int i = 0; i < m->nparams; i++) {
        const ra_param_info *p = &m->params[i];
        t->gptr[i] = t->grad + p->offset;
        t->gsize[i] = p->numel;
        t->decay[i] = p->ndim > 1 && !ra_param_no_decay(p->name);
        /* a frozen parameter's gradient counts for nothing (gsize 0: not in
         * the norm, not clipped) and AdamW skips it */
        t->frozen[i] = cfg->freeze && strncmp(p->name, "head.", 5) != 0;
        if (t->frozen[i]) t->gsize[i] = 0;
        /* layer decay: the Swin authors' scales, layer_decay ** (count - 1 - layer) */
        const int layer = nlayers ? ra_param_layer(m, p->name, NULL) : 0;
        t->lr_scale[i] = nlayers ? pow(cfg->layer_decay, nlayers - 1 - layer) : 1.0;
    }
    if (t->avg) memcpy(t->avg, m->weights, (size_t)P * sizeof(float));   /* avg_0 = w_0 */
    *out = t;
    return RA_OK;
}

ra_status ra_trainer_create(ra_trainer **out, ra_model *m, const ra_train_config *cfg,
                            const ra_dataset *data) {
    if (!out || !m || !cfg || !data) return rai_fail(RA_ERR_ARG, "trainer: NULL argument");
    return create(out, m, cfg, data, NULL);
}

ra_status ra_trainer_create_loader(ra_trainer **out, ra_model *m, const ra_train_config *cfg,
                                   ra_loader *loader) {
    if (!out || !m || !cfg || !loader) return rai_fail(RA_ERR_ARG, "trainer: NULL argument");
    return create(out, m, cfg, NULL, loader);
}

int64_t ra_trainer_step_count(const ra_trainer *t) { return t ? t->step : 0; }
int64_t ra_trainer_steps_per_epoch(const ra_trainer *t) { return t ? t->spe : 0; }
int64_t ra_trainer_total_steps(const ra_trainer *t) { return t ? t->total : 0; }
const ra_train_config *ra_trainer_config(const ra_trainer *t) { return t ? &t->cfg : NULL; }

ra_status ra_trainer_use_average(ra_trainer *t, int on) {
    if (!t) return rai_fail(RA_ERR_ARG, "trainer: NULL argument");
    if (!t->avg || !on == !t->avg_in) return RA_OK;
    float *w = t->m->weights, *a = t->avg;
    for (int64_t i = 0; i < t->m->total; i++) {
        const float v = w[i];
        w[i] = a[i], a[i] = v;
    }
    t->avg_in = on != 0;
    return RA_OK;
}

/* The weights being trained and their average, wherever each is now. */
static const float *trained_weights(const ra_trainer *t) {
    return t->avg_in ? t->avg : t->m->weights;
}
static const float *averaged_weights(const ra_trainer *t) {
    return t->avg_in ? t->m->weights : t->avg;
}

double ra_trainer_lr(const ra_trainer *t) {
    if (t->cfg.sched == 1) return t->cfg.lr;
    return ra_lr_cosine(t->step, t->total, t->warmup, t->cfg.lr, t->cfg.min_lr,
                        t->cfg.warmup_lr, 1);
}

/* The batch of step t into t->x, t->labels (and t->targets when mixing). */
static ra_status make_batch(ra_trainer *t) {
    ra_status st;
    if (t->loader) {
        st = ra_loader_batch(t->loader, t->step, t->x, t->labels, NULL, NULL);
    } else {
        const int64_t epoch = t->step / t->spe, pos = t->step % t->spe;
        if (t->perm_epoch != epoch) {
            ra_rng r;
            ra_rng_seed(&r, rai_mix64(t->cfg.seed, (uint64_t)epoch));
            if (t->cfg.shuffle) ra_shuffle(t->perm, t->n, &r);
            else for (int64_t i = 0; i < t->n; i++) t->perm[i] = i;
            t->perm_epoch = epoch;
        }
        ra_rng r;
        ra_rng_seed(&r, rai_mix64(t->cfg.seed ^ 0xA5A5A5A5A5A5A5A5ull, (uint64_t)t->step));
        st = ra_dataset_batch(t->x, t->labels, t->data, t->perm + pos * t->cfg.batch,
                              t->cfg.batch, t->cfg.mean, t->cfg.std, t->cfg.crop_pad,
                              t->cfg.flip, &r);
    }
    if (st || !t->targets) return st;
    const ra_mixup mx = mixup_of(&t->cfg);
    ra_rng r;
    ra_rng_seed(&r, rai_mix64(t->cfg.seed ^ 0x6d69787570ull, (uint64_t)t->step));   /* "mixup" */
    return ra_mixup_apply(t->x, t->targets, t->labels, t->cfg.batch, t->dc, t->dh, t->dw,
                          t->classes, &mx, &r, NULL);
}

/* Forward, loss and backward of images [i0, i1) of the batch (a
 * micro-batch of this process's slice) ADDED to t->grad, drop path drawn
 * from rng: *loss gets the images' share of the batch's mean loss, so that
 * the shares add up to it. */
static ra_status micro_step(ra_trainer *t, int i0, int i1, ra_rng *rng, float *loss) {
    ra_model *m = t->m;
    const int B = t->cfg.batch, K = t->classes, nb = i1 - i0;
    const int64_t px = (int64_t)t->dc * (t->dt ? t->dt : 1) * t->dh * t->dw;
    float *logits = NULL, *probs = t->probs + (size_t)i0 * K, *dl = t->dlogits + (size_t)i0 * K;
    const float *soft = t->targets ? t->targets + (size_t)i0 * K : NULL;
    int nd;
    int64_t ys[4];
    const int64_t xs[5] = {nb, t->dc, t->dt, t->dh, t->dw}, xi[4] = {nb, t->dc, t->dh, t->dw};
    ra_status st = ra_model_forward_train(m, &logits, &nd, ys, t->x + i0 * px, t->dt ? 5 : 4,
                                          t->dt ? xs : xi, rng);
    if (st) return st;
    float mean = 0;
    if (nd != 2 || ys[1] != K) st = rai_fail(RA_ERR_INTERNAL, "trainer: logits of %lld classes",
                                             (long long)ys[1]);
    if (!st && soft) st = ra_cross_entropy_soft_forward(&mean, probs, logits, soft, nb, K);
    else if (!st) st = ra_cross_entropy_forward(&mean, probs, logits, t->labels + i0, nb, K,
                                                t->cfg.label_smoothing);
    rai_free(logits);
    if (st) return st;
    const float share = (float)nb / (float)B;   /* 1 for the whole batch, exactly */
    *loss = mean * share;
    /* the slice's mean has dloss nb / B: dlogits = (p - target) / B */
    memset(dl, 0, (size_t)nb * K * sizeof *dl);
    st = soft ? ra_cross_entropy_soft_backward(dl, share, probs, soft, nb, K)
              : ra_cross_entropy_backward(dl, share, probs, t->labels + i0, nb, K,
                                          t->cfg.label_smoothing);
    return st ? st : ra_model_backward(m, t->grad, NULL, dl);
}

/* This process's slice [i0, i1) of the batch into t->grad (zeroed here),
 * in accum micro-batches; *loss its share of the batch's mean loss. */
static ra_status batch_step(ra_trainer *t, int i0, int i1, float *loss) {
    memset(t->grad, 0, (size_t)t->m->total * sizeof *t->grad);
    ra_rng rng;   /* drop path's: from (seed, step, process) */
    ra_rng_seed(&rng, rai_mix64(rai_mix64(t->cfg.seed ^ 0x64726f7070617468ull, (uint64_t)t->step),
                                (uint64_t)t->comm.rank));   /* "droppath" */
    const int A = t->cfg.accum > 1 ? t->cfg.accum : 1, n = i1 - i0;
    *loss = 0;
    ra_status st = RA_OK;
    for (int a = 0; a < A && !st; a++) {
        const int j0 = i0 + (int)((int64_t)n * a / A), j1 = i0 + (int)((int64_t)n * (a + 1) / A);
        float part = 0;
        if (j1 > j0 && !(st = micro_step(t, j0, j1, &rng, &part))) *loss += part;
    }
    return st;
}

/* A collective's failure, with what was being summed or gathered. */
static ra_status collective(ra_status st, const char *what) {
    return st ? rai_fail(st, "trainer: %s across the processes failed (%s)", what,
                         ra_status_str(st))
              : RA_OK;
}

/* The sums over the processes: the loss into *loss and the squared norm of
 * the whole gradient into *sumsq; with ZeRO-1 only the own run's gradient
 * is summed (the rest of t->grad is stale afterwards). */
static ra_status reduce(ra_trainer *t, float *loss, double *sumsq) {
    const ra_train_comm *c = &t->comm;
    const int64_t P = t->m->total;
    ra_status st = RA_OK;
    if (!t->zero) {
        if (c->size > 1) {
            t->grad[P] = *loss;   /* one message: the gradient and the loss */
            st = collective(c->allreduce_sum(t->grad, P + 1, c->ctx), "the gradient sum");
            *loss = t->grad[P];
        }
        *sumsq = rai_grad_sumsq(t->gptr, t->gsize, t->m->nparams);
        return st;
    }
    st = collective(c->reduce_scatter_sum(t->grad, t->zoff, t->zcnt, c->ctx),
                    "the gradient sum");
    float two[2] = {*loss, (float)rai_grad_sumsq(t->gptr + t->p0, t->gsize + t->p0,
                                                 t->p1 - t->p0)};
    if (!st) st = collective(c->allreduce_sum(two, 2, c->ctx), "the loss and norm sum");
    *loss = two[0], *sumsq = two[1];
    return st;
}

ra_status ra_trainer_step(ra_trainer *t, float *loss_out, float *norm_out) {
    if (!t) return rai_fail(RA_ERR_ARG, "trainer: NULL argument");
    if (t->avg_in)
        return rai_fail(RA_ERR_ARG, "trainer: the model holds the average of the weights "
                        "(ra_trainer_use_average(t, 0) first)");
    ra_model *m = t->m;
    ra_status st = make_batch(t);
    if (st) return st;
    const int64_t B = t->cfg.batch, r = t->comm.rank, n = t->comm.size;
    float loss = 0;
    double sumsq = 0;
    if ((st = batch_step(t, (int)(B * r / n), (int)(B * (r + 1) / n), &loss)) ||
        (st = reduce(t, &loss, &sumsq)))
        return st;
    if (!isfinite(loss))
        return rai_fail(RA_ERR_ARG, "the loss is not finite at step %lld (learning rate %g too "
                        "high?)", (long long)t->step, ra_trainer_lr(t));
    /* the norm is taken either way (an infinite bound clips nothing); a NaN
     * or inf anywhere in the gradient makes it non-finite */
    const float norm = (float)sqrt(sumsq);
    rai_grad_clip(t->gptr + t->p0, t->gsize + t->p0, t->p1 - t->p0, norm,
                  t->cfg.clip_grad > 0 ? t->cfg.clip_grad : INFINITY);
    if (!isfinite(norm))
        return rai_fail(RA_ERR_ARG, "the gradient is not finite at step %lld (learning rate %g "
                        "too high?)", (long long)t->step, ra_trainer_lr(t));
    const ra_adamw_config ac = {.lr = ra_trainer_lr(t), .beta1 = 0.9, .beta2 = 0.999,
                                .eps = 1e-8, .weight_decay = t->cfg.weight_decay};
    t->step++;   /* AdamW counts its steps from 1 */
    for (int i = t->p0; i < t->p1 && !st; i++) {
        if (t->frozen[i]) continue;   /* --freeze: the weights stay, the moments 0 */
        const ra_param_info *p = &m->params[i];
        const int64_t mo = p->offset - t->moff;
        ra_adamw_config ai = ac;
        ai.lr = ac.lr * t->lr_scale[i];   /* layer decay's group */
        st = ra_adamw_step(m->weights + p->offset, t->mom1 + mo, t->mom2 + mo,
                           t->grad + p->offset, p->numel, t->step, &ai, t->decay[i]);
    }
    if (!st && t->zero)
        st = collective(t->comm.allgather(m->weights, t->zoff, t->zcnt, t->comm.ctx),
                        "gathering the weights");
    if (!st && t->avg)   /* every process averages all of them: the same bits */
        rai_ema_update(t->avg, m->weights, m->total, t->cfg.ema_decay);
    if (loss_out) *loss_out = loss;
    if (norm_out) *norm_out = norm;
    return st;
}

/* ---- several processes ------------------------------------------------------ */

ra_status ra_trainer_set_comm(ra_trainer *t, const ra_train_comm *c, int shard_optimizer) {
    if (!t || !c) return rai_fail(RA_ERR_ARG, "trainer comm: NULL argument");
    if (c->size < 1 || c->rank < 0 || c->rank >= c->size)
        return rai_fail(RA_ERR_ARG, "trainer comm: rank %d of %d processes", c->rank, c->size);
    if (c->size > t->cfg.batch)
        return rai_fail(RA_ERR_ARG, "a batch of %d images cannot be shared by %d processes",
                        t->cfg.batch, c->size);
    if (c->size > 1 && !c->allreduce_sum)
        return rai_fail(RA_ERR_ARG, "trainer comm: no allreduce_sum");
    if (shard_optimizer && (!c->allreduce_sum || !c->reduce_scatter_sum || !c->allgather))
        return rai_fail(RA_ERR_ARG, "trainer comm: ZeRO-1 needs allreduce_sum, "
                        "reduce_scatter_sum and allgather");
    if (t->zero) return rai_fail(RA_ERR_ARG, "trainer comm: the optimizer is sharded already");
    const ra_model *m = t->m;
    const int S = c->size, np = m->nparams;
    if (!shard_optimizer) {
        t->comm = *c;
        return RA_OK;
    }
    /* runs of whole tensors: process r's starts at the first tensor at or
     * after r/S of the floats */
    int64_t *off = malloc(((size_t)S + 1) * sizeof *off), *cnt = malloc((size_t)S * sizeof *cnt);
    int *first = malloc(((size_t)S + 1) * sizeof *first);
    if (!off || !cnt || !first) {
        free(off), free(cnt), free(first);
        return rai_fail(RA_ERR_NOMEM, "trainer comm: out of memory");
    }
    for (int r = 0, i = 0; r <= S; r++) {
        const int64_t at = m->total * r / S;
        while (i < np && m->params[i].offset < at) i++;
        first[r] = r == S ? np : i;
        off[r] = first[r] < np ? m->params[first[r]].offset : m->total;
    }
    for (int r = 0; r < S; r++) cnt[r] = off[r + 1] - off[r];
    const int me = c->rank;
    float *m1 = rai_alloc((size_t)cnt[me] + 1, sizeof *m1);
    float *m2 = rai_alloc((size_t)cnt[me] + 1, sizeof *m2);
    if (!m1 || !m2) {
        rai_free(m1), rai_free(m2), free(off), free(cnt), free(first);
        return rai_fail(RA_ERR_NOMEM, "trainer comm: out of memory");
    }
    memcpy(m1, t->mom1 + off[me], (size_t)cnt[me] * sizeof *m1);   /* a resumed run's */
    memcpy(m2, t->mom2 + off[me], (size_t)cnt[me] * sizeof *m2);
    rai_free(t->mom1), rai_free(t->mom2);
    t->mom1 = m1, t->mom2 = m2, t->moff = off[me];
    t->p0 = first[me], t->p1 = first[me + 1];
    t->zoff = off, t->zcnt = cnt, t->zero = 1, t->comm = *c;
    free(first);
    return RA_OK;
}

int64_t ra_trainer_optimizer_floats(const ra_trainer *t) {
    if (!t) return 0;
    return 2 * (t->zero ? t->zcnt[t->comm.rank] : t->m->total);
}

/* ---- checkpoints ----------------------------------------------------------- */

/* kind: 0 int, 1 double, 2 float, 3 u64; optional: may be absent from a
 * checkpoint (written before the field existed), then the default */
typedef struct { const char *key; int kind; size_t off; int optional; } cfg_field;
static const cfg_field cfg_fields[] = {
    {"train.batch", 0, offsetof(ra_train_config, batch), 0},
    {"train.epochs", 0, offsetof(ra_train_config, epochs), 0},
    {"train.lr", 1, offsetof(ra_train_config, lr), 0},
    {"train.min_lr", 1, offsetof(ra_train_config, min_lr), 0},
    {"train.warmup_lr", 1, offsetof(ra_train_config, warmup_lr), 0},
    {"train.warmup_epochs", 1, offsetof(ra_train_config, warmup_epochs), 0},
    {"train.weight_decay", 1, offsetof(ra_train_config, weight_decay), 0},
    {"train.label_smoothing", 2, offsetof(ra_train_config, label_smoothing), 0},
    {"train.clip_grad", 2, offsetof(ra_train_config, clip_grad), 0},
    {"train.crop_pad", 0, offsetof(ra_train_config, crop_pad), 0},
    {"train.flip", 0, offsetof(ra_train_config, flip), 0},
    {"train.mean", 2, offsetof(ra_train_config, mean), 0},
    {"train.std", 2, offsetof(ra_train_config, std), 0},
    {"train.seed", 3, offsetof(ra_train_config, seed), 0},
    {"train.ema_decay", 1, offsetof(ra_train_config, ema_decay), 1},
    {"train.mixup", 2, offsetof(ra_train_config, mixup_alpha), 1},
    {"train.cutmix", 2, offsetof(ra_train_config, cutmix_alpha), 1},
    {"train.mix_prob", 2, offsetof(ra_train_config, mix_prob), 1},
    {"train.switch_prob", 2, offsetof(ra_train_config, switch_prob), 1},
    {"train.shuffle", 0, offsetof(ra_train_config, shuffle), 1},
    {"train.sched", 0, offsetof(ra_train_config, sched), 1},
    {"train.freeze", 0, offsetof(ra_train_config, freeze), 1},
    {"train.accum", 0, offsetof(ra_train_config, accum), 1},
    {"train.layer_decay", 1, offsetof(ra_train_config, layer_decay), 1},
};
#define NFIELDS ((int)(sizeof cfg_fields / sizeof cfg_fields[0]))

/* Values are written with 17 significant digits: read back bit-exact. */
static void field_str(char *buf, size_t n, const ra_train_config *c, const cfg_field *f) {
    const char *p = (const char *)c + f->off;
    switch (f->kind) {
    case 0: snprintf(buf, n, "%d", *(const int *)p); break;
    case 1: snprintf(buf, n, "%.17g", *(const double *)p); break;
    case 2: snprintf(buf, n, "%.9g", (double)*(const float *)p); break;
    default: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    }
}

static ra_status field_parse(ra_train_config *c, const cfg_field *f, const char *v) {
    char *end = NULL;
    char *p = (char *)c + f->off;
    if (!v && f->optional) return RA_OK;
    if (!v || !*v) return rai_fail(RA_ERR_FORMAT, "checkpoint: metadata %s missing", f->key);
    switch (f->kind) {
    case 0: { long x = strtol(v, &end, 10); *(int *)p = (int)x; if (x < -1000000 || x > 1000000) end = NULL; break; }
    case 1: *(double *)p = strtod(v, &end); break;
    case 2: *(float *)p = strtof(v, &end); break;
    default: *(uint64_t *)p = strtoull(v, &end, 10); break;
    }
    if (!end || *end) return rai_fail(RA_ERR_FORMAT, "checkpoint: metadata %s = \"%.40s\"", f->key, v);
    return RA_OK;
}

/* ZeRO-1: the whole moments, every process's run gathered, into full[2]
 * (P floats each, allocated here). A collective: every process calls it
 * (a process that fails here must end the run, as every failure in a
 * data-parallel run must: the others would wait for it). */
static ra_status gather_moments(const ra_trainer *t, float *full[2]) {
    const int64_t P = t->m->total, own = t->zcnt[t->comm.rank];
    full[0] = rai_alloc((size_t)P + 1, sizeof(float));
    full[1] = rai_alloc((size_t)P + 1, sizeof(float));
    if (!full[0] || !full[1]) return rai_fail(RA_ERR_NOMEM, "trainer save: out of memory");
    ra_status st = RA_OK;
    for (int k = 0; k < 2 && !st; k++) {
        memcpy(full[k] + t->moff, k ? t->mom2 : t->mom1, (size_t)own * sizeof(float));
        st = collective(t->comm.allgather(full[k], t->zoff, t->zcnt, t->comm.ctx),
                        "gathering the optimiser state");
    }
    return st;
}

ra_status ra_trainer_save(const ra_trainer *t, const char *path, const char *const *extra,
                          int nextra) {
    if (!t || !path || (nextra && !extra)) return rai_fail(RA_ERR_ARG, "trainer save: bad argument");
    const ra_model *m = t->m;
    float *full[2] = {NULL, NULL};
    ra_status st = t->zero ? gather_moments(t, full) : RA_OK;
    const float *mom1 = t->zero ? full[0] : t->mom1, *mom2 = t->zero ? full[1] : t->mom2;
    ra_st_writer *w = st || t->comm.rank != 0 ? NULL : ra_st_writer_new();
    if (st || t->comm.rank != 0 || !w) {   /* process 0 alone writes */
        rai_free(full[0]), rai_free(full[1]);
        return st || t->comm.rank != 0 ? st : rai_fail(RA_ERR_NOMEM, "trainer save: out of memory");
    }
    char name[320], val[64];
    for (int i = 0; i < m->nmeta && !st; i++) {
        const char *k = m->meta[2 * i];
        int ours = strncmp(k, "train.", 6) == 0;
        for (int e = 0; e < nextra && !ours; e++) ours = strcmp(k, extra[2 * e]) == 0;
        if (!ours) st = ra_st_writer_meta(w, k, m->meta[2 * i + 1]);
    }
    for (int i = 0; i < NFIELDS && !st; i++) {
        field_str(val, sizeof val, &t->cfg, &cfg_fields[i]);
        st = ra_st_writer_meta(w, cfg_fields[i].key, val);
    }
    snprintf(val, sizeof val, "%lld", (long long)t->step);
    if (!st) st = ra_st_writer_meta(w, "train.step", val);
    snprintf(val, sizeof val, "%lld", (long long)t->n);   /* the schedule depends on it */
    if (!st) st = ra_st_writer_meta(w, "train.images", val);
    if (!st && m->precision != RA_PRECISION_FP32)   /* the products' arithmetic (float32 file) */
        st = ra_st_writer_meta(w, "train.precision", ra_precision_name(m->precision));
    for (int e = 0; e < nextra && !st; e++) st = ra_st_writer_meta(w, extra[2 * e], extra[2 * e + 1]);
    const float *model = t->avg ? averaged_weights(t) : m->weights, *trained = trained_weights(t);
    for (int i = 0; i < m->nparams && !st; i++) {
        const ra_param_info *p = &m->params[i];
        /* under the names of the model's scheme (as ra_model_save), the
         * optimiser's state under relattn's own; written from where they
         * are, not copied (copies were three times the weights: 1 GB for
         * vit_b_16) */
        st = ra_st_writer_add_ref(w, p->file_name, RA_DTYPE_F32, p->ndim, p->shape, model + p->offset);
        snprintf(name, sizeof name, "%sweights.%s", RA_TRAIN_STATE_PREFIX, p->name);
        if (!st && t->avg)
            st = ra_st_writer_add_ref(w, name, RA_DTYPE_F32, p->ndim, p->shape, trained + p->offset);
        snprintf(name, sizeof name, "%sexp_avg.%s", RA_TRAIN_STATE_PREFIX, p->name);
        if (!st) st = ra_st_writer_add_ref(w, name, RA_DTYPE_F32, p->ndim, p->shape, mom1 + p->offset);
        snprintf(name, sizeof name, "%sexp_avg_sq.%s", RA_TRAIN_STATE_PREFIX, p->name);
        if (!st) st = ra_st_writer_add_ref(w, name, RA_DTYPE_F32, p->ndim, p->shape, mom2 + p->offset);
    }
    if (!st) st = ra_st_writer_save(w, path);
    ra_st_writer_free(w);
    rai_free(full[0]), rai_free(full[1]);
    return st;
}

/* The configuration of a checkpoint f (what ra_trainer_save wrote). */
static ra_status config_of(ra_train_config *c, const ra_st_file *f) {
    *c = ra_train_config_default();
    ra_status st = RA_OK;
    for (int i = 0; i < NFIELDS && !st; i++)
        st = field_parse(c, &cfg_fields[i], ra_st_meta(f, cfg_fields[i].key));
    return st;
}

ra_status ra_train_config_load(ra_train_config *c, const char *path) {
    if (!c || !path) return rai_fail(RA_ERR_ARG, "train config load: NULL argument");
    *c = ra_train_config_default();   /* (also on failure) */
    ra_st_file *f = NULL;
    ra_status st = ra_st_open(&f, path);
    if (!st) st = config_of(c, f);
    ra_st_close(f);
    return st;
}

static ra_status resume(ra_trainer **out, ra_model **mout, const char *path,
                        const ra_dataset *data, ra_loader *loader) {
    *out = NULL, *mout = NULL;
    ra_st_file *f = NULL;
    ra_status st = ra_st_open(&f, path);
    if (st) return st;
    ra_model *m = NULL;
    ra_trainer *t = NULL;
    ra_train_config c;
    st = config_of(&c, f);
    const char *sv = ra_st_meta(f, "train.step");
    char *end = NULL;
    const long long step = sv ? strtoll(sv, &end, 10) : -1;
    if (!st && (!sv || !end || *end || step < 0))
        st = rai_fail(RA_ERR_FORMAT, "checkpoint: metadata train.step missing or invalid");
    if (!st) st = ra_model_from_file(&m, f);
    int flip;   /* how its evaluations predict: refused now, not after the steps */
    if (!st && (st = rai_model_tta(m, &flip)))
        st = rai_fail(st, "checkpoint: %s", ra_last_error());
    const char *pv = ra_st_meta(f, "train.precision");
    const int prec = pv ? ra_precision_parse(pv) : RA_PRECISION_FP32;
    if (!st && prec != RA_PRECISION_FP32 && prec != RA_PRECISION_BF16)
        st = rai_fail(RA_ERR_FORMAT, "checkpoint: train.precision '%s' is not fp32 or bf16", pv);
    if (!st && prec != RA_PRECISION_FP32) st = ra_model_set_precision(m, (ra_precision)prec);
    if (!st) st = create(&t, m, &c, data, loader);
    const char *nv = ra_st_meta(f, "train.images");
    if (!st && nv && strtoll(nv, NULL, 10) != t->n)
        st = rai_fail(RA_ERR_ARG, "checkpoint: the run trained on %s images, the data has %lld "
                      "(resume with the same --data)", nv, (long long)t->n);
    if (!st && step > t->total)
        st = rai_fail(RA_ERR_FORMAT, "checkpoint: step %lld is past the run's %lld steps", step,
                      (long long)t->total);
    char name[320];
    for (int i = 0; !st && i < m->nparams; i++) {
        const ra_param_info *p = &m->params[i];
        /* the model read the file's parameters: with an average they are
         * the average (t->avg took them), and the weights being trained
         * are state too */
        static const char *const state[3] = {"exp_avg", "exp_avg_sq", "weights"};
        float *const into[3] = {t->mom1, t->mom2, m->weights};
        for (int which = 0; which < (t->avg ? 3 : 2) && !st; which++) {
            snprintf(name, sizeof name, "%s%s.%s", RA_TRAIN_STATE_PREFIX, state[which], p->name);
            const ra_st_tensor *ts = ra_st_find(f, name);
            if (!ts || ts->numel != p->numel)
                st = rai_fail(RA_ERR_FORMAT, "checkpoint: optimiser state %s missing or of the "
                              "wrong size", name);
            else
                st = ra_st_read_f32(into[which] + p->offset, f, ts);
        }
    }
    ra_st_close(f);
    if (st) {
        ra_trainer_free(t);
        ra_model_free(m);
        return st;
    }
    t->step = step;
    *out = t, *mout = m;
    return RA_OK;
}

ra_status ra_trainer_resume(ra_trainer **out, ra_model **mout, const char *path,
                            const ra_dataset *data) {
    if (!out || !mout || !path || !data) return rai_fail(RA_ERR_ARG, "trainer resume: NULL argument");
    return resume(out, mout, path, data, NULL);
}

ra_status ra_trainer_resume_loader(ra_trainer **out, ra_model **mout, const char *path,
                                   ra_loader *loader) {
    if (!out || !mout || !path || !loader)
        return rai_fail(RA_ERR_ARG, "trainer resume: NULL argument");
    return resume(out, mout, path, NULL, loader);
}

/* ---- evaluation ------------------------------------------------------------ */

/* Batches [b0, b1) of the evaluation on one thread: *correct and confusion
 * (its own, k x k) counted, each image's class into pred (d->n; or NULL);
 * x, idx, lab hold one batch. */
static ra_status eval_batches(const ra_model *m, const ra_dataset *d, float mean, float std,
                              int batch, int64_t b0, int64_t b1, int64_t *correct,
                              int64_t *confusion, int k, int32_t *pred) {
    const int64_t px = (int64_t)data_channels(d) * d->h * d->w;
    float *x = rai_alloc((size_t)(batch * px), sizeof *x);
    int64_t *idx = malloc((size_t)batch * sizeof *idx);
    int32_t *lab = malloc((size_t)batch * sizeof *lab);
    ra_status st = x && idx && lab ? RA_OK : rai_fail(RA_ERR_NOMEM, "evaluate: out of memory");
    for (int64_t bi = b0; bi < b1 && !st; bi++) {
        const int64_t i0 = bi * batch;
        const int b = (int)(d->n - i0 < batch ? d->n - i0 : batch);
        for (int i = 0; i < b; i++) idx[i] = i0 + i;
        st = ra_dataset_batch(x, lab, d, idx, b, mean, std, 0, 0, NULL);
        float *y = NULL;
        int nd;
        int64_t ys[4];
        const int64_t xs[4] = {b, data_channels(d), d->h, d->w};
        if (!st) st = ra_model_predict(m, &y, &nd, ys, x, 4, xs);
        if (!st && (nd != 2 || ys[1] < d->classes))
            st = rai_fail(RA_ERR_ARG, "evaluate: the model gives %lld outputs for %d classes",
                          (long long)ys[1], d->classes);
        for (int i = 0; i < b && !st; i++) {
            const float *r = y + (int64_t)i * ys[1];
            int best = 0;
            for (int j = 1; j < ys[1]; j++)
                if (r[j] > r[best]) best = j;   /* the first of equal maxima, as argmax */
            *correct += best == lab[i];
            if (confusion && best < k) confusion[(int64_t)lab[i] * k + best]++;
            if (pred) pred[i0 + i] = best;
        }
        free(y);
    }
    rai_free(x), free(idx), free(lab);
    return st;
}

typedef struct {
    const ra_model *m;
    const ra_dataset *d;
    float mean, std;
    int batch, k, parts;
    int64_t nb, cnt[RA_MAX_PARTS];
    int64_t *confusion;   /* one k x k per part */
    int32_t *pred;
} eval_parts;

static ra_status eval_part(void *ctx, int s) {
    eval_parts *c = ctx;
    return eval_batches(c->m, c->d, c->mean, c->std, c->batch, c->nb * s / c->parts,
                        c->nb * (s + 1) / c->parts, &c->cnt[s],
                        c->confusion ? c->confusion + (size_t)s * c->k * c->k : NULL, c->k,
                        c->pred);
}

/* The batches are shared out among the threads, as the training step's
 * shards: each runs whole forwards with single-threaded kernels. Counting
 * is exact, so the result is the same whatever the threads. */
static ra_status evaluate(const ra_model *m, const ra_dataset *d, float mean, float std, int batch,
                         int64_t *correct, int64_t *confusion, int k, int32_t *pred) {
    if (!m || !d || !correct || batch < 1 || !(std > 0) || (confusion && k < d->classes))
        return rai_fail(RA_ERR_ARG, "evaluate: bad argument");
    *correct = 0;
    if (confusion) memset(confusion, 0, (size_t)k * k * sizeof *confusion);
    const int64_t nb = (d->n + batch - 1) / batch;
    int T = ra_threads_get();
    if (T > nb) T = (int)(nb > 0 ? nb : 1);
    if (T > RA_MAX_PARTS) T = RA_MAX_PARTS;
    int64_t *conf = confusion && T > 1 ? calloc((size_t)T * k * k, sizeof *conf) : NULL;
    if (confusion && T > 1 && !conf) T = 1;   /* no room for the threads' counts */
    eval_parts c = {.m = m, .d = d, .mean = mean, .std = std, .batch = batch, .k = k,
                    .parts = T, .nb = nb, .confusion = T > 1 ? conf : confusion, .pred = pred};
    ra_status st = rai_run_parts(T, eval_part, &c);
    for (int s = 0; s < T && !st; s++) {
        *correct += c.cnt[s];
        for (int64_t e = 0; conf && e < (int64_t)k * k; e++) confusion[e] += conf[(size_t)s * k * k + e];
    }
    free(conf);
    return st;
}

ra_status ra_evaluate(const ra_model *m, const ra_dataset *d, float mean, float std, int batch,
                      int64_t *correct, int64_t *confusion, int k) {
    return evaluate(m, d, mean, std, batch, correct, confusion, k, NULL);
}

ra_status ra_trainer_evaluate(ra_trainer *t, const ra_dataset *d, int batch, int64_t *correct,
                              int64_t *confusion, int k) {
    if (!t) return rai_fail(RA_ERR_ARG, "trainer evaluate: NULL argument");
    /* the checkpoint's model: the average if any, in float32 (a bf16 run's
     * checkpoint is float32, and eval loads it so) */
    ra_model *m = t->m;
    const ra_precision was = m->precision;
    ra_status st = ra_trainer_use_average(t, 1);
    m->precision = RA_PRECISION_FP32;
    if (!st) st = evaluate(m, d, t->cfg.mean, t->cfg.std, batch, correct, confusion, k, NULL);
    m->precision = was;
    const ra_status back = ra_trainer_use_average(t, 0);
    return st ? st : back;
}

/* The evaluation of m on an evaluation loader's batches, in order: each
 * batch predicted by the model on all its threads while the loader's
 * workers decode the next ones. Images marked bad (skip_bad) are not
 * counted: *seen gets those that were. */
static ra_status evaluate_loader(const ra_model *m, ra_loader *l, int64_t *correct,
                                 int64_t *confusion, int k, int64_t *seen) {
    const ra_loader_config *lc = ra_loader_config_of(l);
    if (lc->train) return rai_fail(RA_ERR_ARG, "evaluate: the loader is a training loader");
    const int B = lc->batch, S = lc->size, T = lc->clip_len;
    const int C = lc->eval.grey ? 1 : 3;
    float *x = rai_alloc((size_t)B * C * (T > 0 ? T : 1) * S * S, sizeof *x);
    int32_t *lab = malloc((size_t)B * sizeof *lab);
    uint8_t *bad = malloc((size_t)B);
    ra_status st = x && lab && bad ? RA_OK : rai_fail(RA_ERR_NOMEM, "evaluate: out of memory");
    *correct = *seen = 0;
    if (confusion) memset(confusion, 0, (size_t)k * k * sizeof *confusion);
    for (int64_t bi = 0; bi < ra_loader_batches(l) && !st; bi++) {
        int b = 0, nd;
        float *y = NULL;
        int64_t ys[4];
        st = ra_loader_batch(l, bi, x, lab, bad, &b);
        const int64_t xs5[5] = {b, C, T, S, S}, xs4[4] = {b, C, S, S};
        if (!st) st = ra_model_predict(m, &y, &nd, ys, x, T > 0 ? 5 : 4, T > 0 ? xs5 : xs4);
        if (!st && (nd != 2 || ys[1] < ra_loader_classes(l)))
            st = rai_fail(RA_ERR_ARG, "evaluate: the model gives %lld outputs for %d classes",
                          (long long)ys[1], ra_loader_classes(l));
        for (int i = 0; i < b && !st; i++) {
            if (bad[i]) continue;
            const float *r = y + (int64_t)i * ys[1];
            int best = 0;
            for (int j = 1; j < ys[1]; j++)
                if (r[j] > r[best]) best = j;   /* the first of equal maxima, as argmax */
            *correct += best == lab[i], (*seen)++;
            if (confusion && best < k) confusion[(int64_t)lab[i] * k + best]++;
        }
        free(y);
    }
    rai_free(x), free(lab), free(bad);
    return st;
}

ra_status ra_trainer_evaluate_loader(ra_trainer *t, ra_loader *l, int64_t *correct,
                                     int64_t *confusion, int k, int64_t *seen) {
    if (!t || !l || !correct || !seen || (confusion && k < ra_loader_classes(l)))
        return rai_fail(RA_ERR_ARG, "trainer evaluate: bad argument");
    ra_model *m = t->m;   /* the checkpoint's model, as ra_trainer_evaluate */
    const ra_precision was = m->precision;
    ra_status st = ra_trainer_use_average(t, 1);
    m->precision = RA_PRECISION_FP32;
    if (!st) st = evaluate_loader(m, l, correct, confusion, k, seen);
    m->precision = was;
    const ra_status back = ra_trainer_use_average(t, 0);
    return st ? st : back;
}

ra_status ra_predict(const ra_model *m, const ra_dataset *d, float mean, float std, int batch,
                     int32_t *pred) {
    if (!pred) return rai_fail(RA_ERR_ARG, "predict: bad argument");
    int64_t correct;
    return evaluate(m, d, mean, std, batch, &correct, NULL, 0, pred);
}
