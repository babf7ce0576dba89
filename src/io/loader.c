/* loader.c - batches of an image folder decoded by a pool of worker threads
 * (relattn.h, ra_loader; docs/reference.md, "Training augmentations").
 *
 * The queue is a ring of `depth` slots, each one batch: its step, the
 * images it holds (the indices are fixed when the slot is scheduled, by
 * the caller's thread, which alone draws the epochs' orders), its output
 * buffers and two counters, samples claimed and samples done. A worker
 * takes the next unclaimed sample of the earliest scheduled slot, decodes
 * and transforms it without the lock, and counts it done; the caller waits
 * for its slot to be complete, copies it out and schedules the slot again
 * for the step after the last one queued. A step other than the next
 * restarts the queue: no more samples are claimed, those in flight are
 * waited for, and the slots are scheduled from the new step.
 *
 * Every sample is a function of (seed, step, slot in the batch) and the
 * file: which worker decodes it, and when, changes nothing. */
#define _POSIX_C_SOURCE 200809L
#include "base/internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOADER_MAX_WORKERS 256
#define LOADER_MAX_DEPTH 64

typedef struct {
    int64_t step;        /* -1: free */
    int b;               /* images in this batch */
    int claimed, done;   /* samples taken by a worker, finished */
    int64_t *idx;        /* (B) the images (indices into f) */
    float *x;            /* (B, 3, S, S) */
    int32_t *labels;
    uint8_t *bad;
    int64_t *skips;      /* (B) images skipped for each sample */
    int stop;            /* restarting: claim nothing more */
    ra_status st;        /* the first failure among its samples */
    int fail_at;         /* its sample (the lowest failing one is reported) */
    char why[512];
} slot;

struct ra_loader {
    ra_loader_config c;
    const ra_image_folder *f;
    const int64_t *idx;   /* borrowed, or NULL: 0..n-1 */
    int64_t n, nb;        /* images, batches per epoch */
    int64_t *perm;        /* the epoch's order (training) */
    int64_t perm_epoch;
    int64_t skipped;
    float lut[3][256];    /* training: ToTensor + Normalize of each byte (mean, std) */
    int nslots;
    slot *slots;
    int64_t next_step;    /* the step the next free slot is scheduled for */
    pthread_mutex_t lock;
    pthread_cond_t work, ready;
    pthread_t *threads;
    int nthreads, quit, have_lock;
};

/* The planes of a sample: one for a grey model (the transform eval's grey,
 * in both modes), else three. */
static int planes_of(const ra_loader_config *c) { return c->eval.grey ? 1 : 3; }

/* The floats of a sample: (C, S, S), or a video's (3, T, S, S). */
static size_t sample_floats(const ra_loader_config *c) {
    return (size_t)planes_of(c) * (c->clip_len > 0 ? c->clip_len : 1) * c->size * c->size;
}

ra_loader_config ra_loader_config_default(void) {
    ra_loader_config c = {.train = 1, .size = 224, .batch = 64, .scale = {0.08, 1.0},
                          .ratio = {3.0 / 4.0, 4.0 / 3.0}, .interp = RA_INTERP_BICUBIC,
                          .hflip = 0.5, .random_crop = 1, .shuffle = 1,
                          .mean = {0.485f, 0.456f, 0.406f},
                          .std = {0.229f, 0.224f, 0.225f}, .workers = 2, .depth = 2,
                          .max_pixels = (int64_t)64 << 20};
    return c;
}

static int64_t image_of(const ra_loader *l, int64_t i) { return l->idx ? l->idx[i] : i; }

/* ---- one sample ----------------------------------------------------------------- */

/* timm's RandomResizedCropAndInterpolation.get_params. */
void ra_random_resized_crop(int w, int h, const double scale[2], const double ratio[2],
                            ra_rng *rng, int box[4]) {
    int *x0 = &box[0], *y0 = &box[1], *cw = &box[2], *ch = &box[3];
    const double area = (double)w * h, lr0 = log(ratio[0]), lr1 = log(ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        const double target = area * (scale[0] + (scale[1] - scale[0]) * ra_rng_uniform(rng));
        const double aspect = exp(lr0 + (lr1 - lr0) * ra_rng_uniform(rng));
        const double tw = nearbyint(sqrt(target * aspect)), th = nearbyint(sqrt(target / aspect));
        if (tw >= 1 && th >= 1 && tw <= w && th <= h) {
            *cw = (int)tw, *ch = (int)th;
            *y0 = (int)ra_rng_below(rng, (uint64_t)(h - *ch) + 1);
            *x0 = (int)ra_rng_below(rng, (uint64_t)(w - *cw) + 1);
            return;
        }
    }
    const double in_ratio = (double)w / h;   /* the fallback: a centre crop */
    if (in_ratio < ratio[0]) *cw = w, *ch = (int)nearbyint(w / ratio[0]);
    else if (in_ratio > ratio[1]) *ch = h, *cw = (int)nearbyint(h * ratio[1]);
    else *cw = w, *ch = h;
    if (*cw < 1) *cw = 1;
    if (*ch < 1) *ch = 1;
    if (*cw > w) *cw = w;
    if (*ch > h) *ch = h;
    *y0 = (h - *ch) / 2, *x0 = (w - *cw) / 2;
}

/* timm's RandomErasing (mode "pixel", one box). */
int ra_random_erasing(float *x, int c, int H, int W, double p, ra_rng *rng, int box[4]) {
    if (!(ra_rng_uniform(rng) < p)) return 0;
    const double area = (double)H * W, la0 = log(0.3), la1 = log(1 / 0.3);
    for (int attempt = 0; attempt < 10; attempt++) {
        const double target = area * (0.02 + (1.0 / 3 - 0.02) * ra_rng_uniform(rng));
        const double aspect = exp(la0 + (la1 - la0) * ra_rng_uniform(rng));
        const int h = (int)nearbyint(sqrt(target * aspect)), w = (int)nearbyint(sqrt(target / aspect));
        if (w < W && h < H) {
            const int top = (int)ra_rng_below(rng, (uint64_t)(H - h) + 1);
            const int left = (int)ra_rng_below(rng, (uint64_t)(W - w) + 1);
            for (int ch = 0; ch < c; ch++)
                for (int y = top; y < top + h; y++)
                    for (int xx = left; xx < left + w; xx++)
                        x[((size_t)ch * H + y) * W + xx] = (float)ra_rng_normal(rng);
            if (box) box[0] = left, box[1] = top, box[2] = w, box[3] = h;
            return 1;
        }
    }
    return 0;
}

/* The training transform of one decoded image rgb (h, w, 3) into x (C, S, S). */
static ra_status train_sample(const ra_loader *l, float *x, const uint8_t *rgb, int w, int h,
                              ra_rng *rng) {
    const ra_loader_config *c = &l->c;
    const int S = c->size;
    uint8_t *px = malloc((size_t)S * S * 3 * 2);
    ra_status st = px ? RA_OK : rai_fail(RA_ERR_NOMEM, "loader: out of memory");
    if (!st && c->random_crop) {   /* the crop resized where it lies */
        int box[4];
        ra_random_resized_crop(w, h, c->scale, c->ratio, rng, box);
        st = rai_image_resize_region(px, S, S, rgb + ((size_t)box[1] * w + box[0]) * 3,
                                     (size_t)w * 3, box[2], box[3], 3, c->interp);
    } else if (!st) {
        st = rai_transform_bytes(px, &c->eval, rgb, w, h);
    }
    if (!st && c->hflip > 0 && ra_rng_uniform(rng) < c->hflip)
        for (int y = 0; y < S; y++)
            for (int a = 0, b = S - 1; a < b; a++, b--)
                for (int k = 0; k < 3; k++) {
                    uint8_t *p = px + ((size_t)y * S + a) * 3 + k, *q = px + ((size_t)y * S + b) * 3 + k;
                    const uint8_t v = *p;
                    *p = *q, *q = v;
                }
    if (!st && c->randaugment)
        st = ra_randaugment_apply(px, px + (size_t)S * S * 3, S, S, 3, &c->ra, rng);
    if (!st) (c->eval.grey ? rai_byte_luma : rai_byte_planes)(x, px, (size_t)S * S, l->lut);
    free(px);
    if (!st && c->reprob > 0) ra_random_erasing(x, planes_of(c), S, S, c->reprob, rng, NULL);
    return st;
}

/* ---- one video sample ------------------------------------------------------------ */

/* The frames of a training clip as they are decoded: each distinct frame
 * (its shorter side resized, or through the evaluation transform) kept once. */
typedef struct {
    const ra_loader_config *c;
    const int64_t *want;   /* (n) the clip's distinct frames, ascending */
    int n;
    uint8_t **px;          /* (n) each frame's bytes (h, w, 3) */
    int w, h;              /* their size (every frame's) */
} clip_frames;

static ra_status keep_frame(void *ctx, int64_t index, const uint8_t *rgb, int w, int h) {
    clip_frames *cf = ctx;
    const ra_loader_config *c = cf->c;
    int k = 0;
    while (k < cf->n && cf->want[k] != index) k++;
    if (k == cf->n) return RA_OK;
    int ow, oh;
    ra_transform shorter = {.resize = RA_RESIZE_SHORTER, .resize_h = c->short_side,
                            .resize_w = c->short_side, .interp = RA_INTERP_BILINEAR};
    ra_status st = ra_transform_size(c->random_crop ? &shorter : &c->video_eval.frame, w, h, &ow,
                                     &oh);
    if (st) return st;
    if (cf->px[k] || (cf->w && (ow != cf->w || oh != cf->h)))
        return rai_fail(RA_ERR_FORMAT, "a clip's frames change size");
    cf->w = ow, cf->h = oh;
    if (!(cf->px[k] = malloc((size_t)ow * oh * 3)))
        return rai_fail(RA_ERR_NOMEM, "loader: out of memory");
    if (c->random_crop)   /* torchvision's / mmcv's resize of the frame, bilinear */
        return ra_resize_bilinear_tensor_u8(cf->px[k], ow, oh, rgb, w, h, 3);
    ra_video_transform one = c->video_eval;
    one.crops = 1;
    return ra_video_frame_bytes(cf->px[k], &one, rgb, w, h);
}

static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A training clip of the video at path into x (3, T, S, S). */
static ra_status train_clip(const ra_loader *l, float *x, const char *path, ra_rng *rng) {
    const ra_loader_config *c = &l->c;
    const int T = c->clip_len, S = c->size;
    const size_t plane = (size_t)S * S;
    ra_video *v = NULL;
    int64_t *idx = malloc(sizeof *idx * (size_t)T * 2);
    uint8_t **px = calloc((size_t)T, sizeof *px), *crop = malloc(plane * 3 * (size_t)T);
    ra_video_limits lim;
    ra_video_limits_default(&lim);
    lim.max_pixels = c->max_pixels;
    ra_status st = idx && px && crop ? RA_OK : rai_fail(RA_ERR_NOMEM, "loader: out of memory");
    if (!st) st = ra_video_open(&v, path, &lim);
    if (!st)
        st = ra_clip_indices_train(idx, T, c->frame_interval, ra_video_get_info(v)->frames, rng);
    clip_frames cf = {c, idx + T, 0, px, 0, 0};
    if (!st) {   /* the distinct frames, ascending */
        memcpy(idx + T, idx, sizeof *idx * (size_t)T);
        qsort(idx + T, (size_t)T, sizeof *idx, cmp_i64);
        for (int k = 0; k < T; k++)
            if (!cf.n || idx[T + k] != idx[T + cf.n - 1]) idx[T + cf.n++] = idx[T + k];
        st = ra_video_decode(v, idx + T, cf.n, keep_frame, &cf);
    }
    for (int k = 0; !st && k < cf.n; k++)
        if (!px[k]) st = rai_fail(RA_ERR_FORMAT, "video '%s': frame %lld was not decoded", path,
                                  (long long)idx[T + k]);
    int box[4] = {0, 0, cf.w, cf.h};
    if (!st && c->random_crop) ra_random_resized_crop(cf.w, cf.h, c->scale, c->ratio, rng, box);
    const int flip = !st && c->hflip > 0 && ra_rng_uniform(rng) < c->hflip;
    for (int t = 0; !st && t < T; t++) {
        int k = 0;
        while (idx[T + k] != idx[t]) k++;
        uint8_t *o = crop + (size_t)t * plane * 3;
        if (c->random_crop)
            st = rai_image_resize_region(o, S, S, px[k] + ((size_t)box[1] * cf.w + box[0]) * 3,
                                         (size_t)cf.w * 3, box[2], box[3], 3, c->interp);
        else if (cf.w != S || cf.h != S)
            st = rai_fail(RA_ERR_ARG, "loader: the video transform gives %dx%d frames, not %dx%d",
                          cf.w, cf.h, S, S);
        else memcpy(o, px[k], plane * 3);
        if (st) break;
        for (size_t p = 0; p < plane; p++) {   /* x (3, T, S, S) */
            const size_t q = flip ? p - p % S + (S - 1 - p % S) : p;
            for (int ch = 0; ch < 3; ch++)
                x[((size_t)ch * T + t) * plane + q] = l->lut[ch][o[3 * p + ch]];
        }
    }
    for (int k = 0; px && k < T; k++) free(px[k]);
    free(px), free(idx), free(crop);
    ra_video_free(v);
    return st;
}

/* The evaluation clip of the video at path into x (3, T, S, S). */
static ra_status eval_clip(const ra_loader *l, float *x, const char *path) {
    const ra_loader_config *c = &l->c;
    const ra_clip_spec cs = {RA_CLIPS_MMACTION, 1, c->clip_len, c->frame_interval, 0};
    ra_video_transform one = c->video_eval;
    one.crops = 1;
    ra_video_limits lim;
    ra_video_limits_default(&lim);
    lim.max_pixels = c->max_pixels;
    ra_video *v = NULL;
    float *y = NULL;
    int64_t shape[5];
    ra_status st = ra_video_open(&v, path, &lim);
    if (!st) st = ra_video_clips(&y, shape, v, &cs, &one);
    ra_video_free(v);
    if (!st && (shape[3] != c->size || shape[4] != c->size))
        st = rai_fail(RA_ERR_ARG, "loader: the video transform gives %lldx%lld frames, not %dx%d",
                      (long long)shape[4], (long long)shape[3], c->size, c->size);
    if (!st) memcpy(x, y, sizeof *x * sample_floats(c));
    rai_free(y);
    return st;
}

/* Sample s of batch `step` (image i of the folder) into its place in x. */
static ra_status one_sample(const ra_loader *l, int64_t step, int s, int64_t i, float *x) {
    const ra_loader_config *c = &l->c;
    if (c->clip_len > 0 && !c->train) return eval_clip(l, x, l->f->paths[i]);
    if (c->clip_len > 0) {
        ra_rng rng;
        ra_rng_seed(&rng, rai_mix64(rai_mix64(c->seed ^ 0x6c6f61646572ull, (uint64_t)step),
                                    (uint64_t)s));   /* "loader" */
        return train_clip(l, x, l->f->paths[i], &rng);
    }
    uint8_t *rgb = NULL;
    int w, h;
    ra_status st = ra_image_load_u8(&rgb, &w, &h, l->f->paths[i], c->max_pixels);
    if (!st && c->train) {
        ra_rng rng;
        ra_rng_seed(&rng, rai_mix64(rai_mix64(c->seed ^ 0x6c6f61646572ull, (uint64_t)step),
                                    (uint64_t)s));   /* "loader" */
        st = train_sample(l, x, rgb, w, h, &rng);
    } else if (!st) {
        st = ra_transform_apply(x, &c->eval, rgb, w, h);
    }
    free(rgb);
    return st;
}

/* Fill sample s of slot q (position q->idx[s] of the loader's list). With
 * skip_bad, a training image that fails is replaced by the ones after it
 * in the folder's order (the same class, as a rule), an evaluation image is
 * marked bad; *skips counts the failures. */
static ra_status fill(const ra_loader *l, slot *q, int s, int64_t *skips) {
    const size_t size = sample_floats(&l->c);
    float *x = q->x + s * size;
    for (int64_t k = 0; k < l->n; k++) {
        const int64_t img = image_of(l, (q->idx[s] + k) % l->n);
        const ra_status st = one_sample(l, q->step, s, img, x);
        q->labels[s] = l->f->labels[img];
        if (q->bad) q->bad[s] = 0;
        if (!st || !l->c.skip_bad || st == RA_ERR_NOMEM || st == RA_ERR_ARG) return st;
        (*skips)++;
        if (!l->c.train) {
            memset(x, 0, size * sizeof *x);
            if (q->bad) q->bad[s] = 1;
            return RA_OK;
        }
    }
    return rai_fail(RA_ERR_FORMAT, "none of the %lld images could be read", (long long)l->n);
}

/* ---- the queue ------------------------------------------------------------------- */

/* Slot q to hold batch `step` (the caller's thread; no worker is in it). */
static void schedule(ra_loader *l, slot *q, int64_t step) {
    const int B = l->c.batch;
    q->stop = 0, q->claimed = q->done = 0, q->st = RA_OK, q->why[0] = 0;
    memset(q->skips, 0, sizeof *q->skips * (size_t)B);
    if (!l->c.train) {
        if (step >= l->nb) {   /* past the end: nothing to do */
            q->step = -1, q->b = 0;
            return;
        }
        q->step = step;
        q->b = (int)(l->n - step * B < B ? l->n - step * B : B);
        for (int s = 0; s < q->b; s++) q->idx[s] = step * B + s;
        return;
    }
    const int64_t epoch = step / l->nb, pos = step % l->nb;
    if (l->perm_epoch != epoch) {
        ra_rng r;
        ra_rng_seed(&r, rai_mix64(l->c.seed ^ 0x7065726d7574ull, (uint64_t)epoch));   /* "permut" */
        if (l->c.shuffle) ra_shuffle(l->perm, l->n, &r);
        else for (int64_t i = 0; i < l->n; i++) l->perm[i] = i;
        l->perm_epoch = epoch;
    }
    q->step = step, q->b = B;
    for (int s = 0; s < B; s++) q->idx[s] = l->perm[pos * B + s];
}

/* The earliest scheduled slot with a sample left to claim. */
static slot *next_work(ra_loader *l) {
    slot *best = NULL;
    for (int k = 0; k < l->nslots; k++) {
        slot *q = &l->slots[k];
        if (q->step >= 0 && !q->stop && q->claimed < q->b && (!best || q->step < best->step))
            best = q;
    }
    return best;
}

/* What a sample's failure leaves in its slot: the lowest failing sample's. */
static void record(slot *q, int s, ra_status st, const char *why) {
    if (st && (q->st == RA_OK || s < q->fail_at)) {
        q->st = st, q->fail_at = s;
        snprintf(q->why, sizeof q->why, "%s", why);
    }
}

static void *worker(void *arg) {
    ra_loader *l = arg;
    pthread_mutex_lock(&l->lock);
    for (;;) {
        slot *q = NULL;
        while (!l->quit && !(q = next_work(l))) pthread_cond_wait(&l->work, &l->lock);
        if (l->quit) break;
        const int s = q->claimed++;
        pthread_mutex_unlock(&l->lock);
        const ra_status st = fill(l, q, s, &q->skips[s]);
        pthread_mutex_lock(&l->lock);
        record(q, s, st, st ? ra_last_error() : "");
        q->done++;
        pthread_cond_broadcast(&l->ready);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

typedef struct {
    const ra_loader *l;
    slot *q;
} sync_job;

static ra_status sync_sample(void *ctx, int s) {
    const sync_job *j = ctx;
    return fill(j->l, j->q, s, &j->q->skips[s]);
}

ra_status ra_loader_batch(ra_loader *l, int64_t step, float *x, int32_t *labels, uint8_t *bad,
                          int *b) {
    if (!l || !x || !labels || step < 0)
        return rai_fail(RA_ERR_ARG, "loader batch: bad argument");
    if (!l->c.train && step >= l->nb)
        return rai_fail(RA_ERR_ARG, "loader batch %lld: the evaluation has %lld", (long long)step,
                        (long long)l->nb);
    slot *q = NULL;
    ra_status st = RA_OK;
    if (!l->nthreads) {   /* no pool: this batch, now, on the caller's threads */
        q = &l->slots[0];
        schedule(l, q, step);
        sync_job j = {l, q};
        st = rai_run_tasks(q->b, ra_threads_get(), sync_sample, &j);
        if (st) snprintf(q->why, sizeof q->why, "%s", ra_last_error());
        q->st = st;
    } else {
        pthread_mutex_lock(&l->lock);
        for (int k = 0; k < l->nslots && !q; k++)
            if (l->slots[k].step == step && !l->slots[k].stop) q = &l->slots[k];
        if (!q) {   /* restart the queue at step */
            for (int k = 0; k < l->nslots; k++) l->slots[k].stop = 1;
            for (int k = 0; k < l->nslots; k++)
                while (l->slots[k].done < l->slots[k].claimed) pthread_cond_wait(&l->ready, &l->lock);
            for (int k = 0; k < l->nslots; k++) schedule(l, &l->slots[k], step + k);
            l->next_step = step + l->nslots;
            q = &l->slots[0];
            pthread_cond_broadcast(&l->work);
        }
        while (q->done < q->b) pthread_cond_wait(&l->ready, &l->lock);
        pthread_mutex_unlock(&l->lock);   /* q is complete: no worker claims from it */
        st = q->st;
    }
    const size_t size = sample_floats(&l->c);
    memcpy(x, q->x, (size_t)q->b * size * sizeof *x);
    memcpy(labels, q->labels, (size_t)q->b * sizeof *labels);
    if (bad) memcpy(bad, q->bad, (size_t)q->b);
    for (int s = 0; s < q->b; s++) l->skipped += q->skips[s];
    if (b) *b = q->b;
    char why[sizeof q->why];
    snprintf(why, sizeof why, "%s", q->why);
    if (l->nthreads) {   /* the slot takes the step after the last one queued */
        pthread_mutex_lock(&l->lock);
        schedule(l, q, l->next_step++);
        pthread_cond_broadcast(&l->work);
        pthread_mutex_unlock(&l->lock);
    }
    return st ? rai_fail(st, "%s", why) : RA_OK;
}

/* ---- construction ------------------------------------------------------------------ */

static ra_status check_config(const ra_loader_config *c, int64_t n) {
    if (c->size < 1 || c->size > RA_DATASET_MAX_SIDE)
        return rai_fail(RA_ERR_ARG, "loader: image size %d outside 1..%d", c->size,
                        RA_DATASET_MAX_SIDE);
    if (c->batch < 1 || c->batch > 65536)
        return rai_fail(RA_ERR_ARG, "loader: batch %d outside 1..65536", c->batch);
    if (c->train && n < c->batch)
        return rai_fail(RA_ERR_ARG, "%lld training images are fewer than one batch of %d",
                        (long long)n, c->batch);
    if (c->workers < 0 || c->workers > LOADER_MAX_WORKERS || c->depth < 1 ||
        c->depth > LOADER_MAX_DEPTH)
        return rai_fail(RA_ERR_ARG, "loader: %d workers (0..%d), depth %d (1..%d)", c->workers,
                        LOADER_MAX_WORKERS, c->depth, LOADER_MAX_DEPTH);
    if (c->max_pixels < 1) return rai_fail(RA_ERR_ARG, "loader: max_pixels < 1");
    if (c->clip_len < 0 || c->clip_len > 4096)
        return rai_fail(RA_ERR_ARG, "loader: clips of %d frames (0: images)", c->clip_len);
    if (c->clip_len > 0) {   /* videos */
        ra_status st = ra_transform_check(&c->video_eval.frame);
        if (st) return st;
        int ow, oh;
        ra_transform_size(&c->video_eval.frame, 1, 1, &ow, &oh);
        if (c->video_eval.frame.crop == RA_CROP_NONE || ow != c->size || oh != c->size)
            return rai_fail(RA_ERR_ARG, "loader: the video transform must crop %dx%d frames",
                            c->size, c->size);
        if (c->frame_interval < 1 || c->frame_interval > 4096 ||
            (c->train && c->random_crop && (c->short_side < 1 || c->short_side > 65535)))
            return rai_fail(RA_ERR_ARG, "loader: frame interval %d (1..4096), shorter side %d",
                            c->frame_interval, c->short_side);
        if (c->randaugment || c->reprob > 0 || c->eval.grey)
            return rai_fail(RA_ERR_ARG, "loader: RandAugment, random erasing and grey models are "
                            "for images, not videos");
        if (!c->train) return RA_OK;
    }
    if (c->clip_len == 0 && (!c->train || !c->random_crop)) {
        ra_status st = ra_transform_check(&c->eval);
        if (st) return st;
        const int fixed = c->eval.crop != RA_CROP_NONE ? c->eval.crop_h == c->size &&
                                                             c->eval.crop_w == c->size
                          : c->eval.resize == RA_RESIZE_EXACT && c->eval.resize_h == c->size &&
                                c->eval.resize_w == c->size;
        if (!fixed)
            return rai_fail(RA_ERR_ARG, "loader: the evaluation transform must give %dx%d "
                            "images", c->size, c->size);
        if (!c->train) return RA_OK;
    }
    if (!(c->scale[0] > 0 && c->scale[0] <= c->scale[1] && c->scale[1] <= 1))
        return rai_fail(RA_ERR_ARG, "loader: crop scale %g..%g is not within (0, 1]", c->scale[0],
                        c->scale[1]);
    if (!(c->ratio[0] > 0 && c->ratio[0] <= c->ratio[1] && c->ratio[1] < 1e6))
        return rai_fail(RA_ERR_ARG, "loader: crop ratio %g..%g", c->ratio[0], c->ratio[1]);
    if (!ra_interp_name(c->interp))
        return rai_fail(RA_ERR_ARG, "loader: interpolation %d", (int)c->interp);
    if (!(c->hflip >= 0 && c->hflip <= 1) || !(c->reprob >= 0 && c->reprob <= 1))
        return rai_fail(RA_ERR_ARG, "loader: flip %g and erasing %g must be in [0, 1]", c->hflip,
                        c->reprob);
    for (int k = 0; k < 3; k++)
        if (!isfinite(c->mean[k]) || !(c->std[k] > 0) || !isfinite(c->std[k]))
            return rai_fail(RA_ERR_ARG, "loader: mean %g, std %g", (double)c->mean[k],
                            (double)c->std[k]);
    return RA_OK;
}

void ra_loader_free(ra_loader *l) {
    if (!l) return;
    if (l->nthreads) {
        pthread_mutex_lock(&l->lock);
        l->quit = 1;
        pthread_cond_broadcast(&l->work);
        pthread_mutex_unlock(&l->lock);
        for (int k = 0; k < l->nthreads; k++) pthread_join(l->threads[k], NULL);
    }
    if (l->have_lock) {
        pthread_mutex_destroy(&l->lock);
        pthread_cond_destroy(&l->work), pthread_cond_destroy(&l->ready);
    }
    for (int k = 0; l->slots && k < l->nslots; k++) {
        slot *q = &l->slots[k];
        free(q->idx), rai_free(q->x), free(q->labels), free(q->bad), free(q->skips);
    }
    free(l->slots), free(l->threads), free(l->perm);
    free(l);
}

ra_status ra_loader_create(ra_loader **out, const ra_image_folder *f, const int64_t *idx,
                           int64_t n, const ra_loader_config *cfg) {
    if (!out || !f || !cfg) return rai_fail(RA_ERR_ARG, "loader: NULL argument");
    *out = NULL;
    if (n < 1 || (!idx && n > f->n)) return rai_fail(RA_ERR_ARG, "loader: %lld images", (long long)n);
    for (int64_t i = 0; idx && i < n; i++)
        if (idx[i] < 0 || idx[i] >= f->n) return rai_fail(RA_ERR_ARG, "loader: index %lld", (long long)idx[i]);
    ra_status st = check_config(cfg, n);
    if (st) return st;
    ra_loader *l = calloc(1, sizeof *l);
    if (!l) return rai_fail(RA_ERR_NOMEM, "loader: out of memory");
    l->c = *cfg, l->f = f, l->idx = idx, l->n = n, l->perm_epoch = -1;
    const ra_transform *vf = &cfg->video_eval.frame;   /* a video's frames: its table */
    if (cfg->clip_len > 0) rai_byte_table(l->lut, vf->rescale, vf->normalize, vf->mean, vf->std);
    else rai_byte_table(l->lut, 0, 1, cfg->mean, cfg->std);
    if (cfg->randaugment) {   /* timm: the crop's filter, the mean as the fill */
        l->c.ra.interp = cfg->interp;
        rai_mean_bytes(l->c.ra.fill, cfg->mean);
    }
    const int B = cfg->batch;
    l->nb = cfg->train ? n / B : (n + B - 1) / B;
    l->nslots = cfg->workers ? cfg->depth : 1;
    l->slots = calloc((size_t)l->nslots, sizeof *l->slots);
    l->perm = cfg->train ? malloc(sizeof *l->perm * (size_t)n) : NULL;
    st = l->slots && (l->perm || !cfg->train) ? RA_OK : rai_fail(RA_ERR_NOMEM, "loader: out of memory");
    const size_t size = sample_floats(cfg);
    for (int k = 0; !st && k < l->nslots; k++) {
        slot *q = &l->slots[k];
        q->step = -1;
        q->idx = malloc(sizeof *q->idx * B);
        q->x = rai_alloc(size * B, sizeof *q->x);
        q->labels = malloc(sizeof *q->labels * B);
        q->bad = calloc((size_t)B, 1);
        q->skips = calloc((size_t)B, sizeof *q->skips);
        if (!q->idx || !q->x || !q->labels || !q->bad || !q->skips)
            st = rai_fail(RA_ERR_NOMEM, "loader: out of memory for %d batches of %d images of "
                          "%dx%d", l->nslots, B, cfg->size, cfg->size);
    }
    if (!st && cfg->workers) {
        pthread_mutex_init(&l->lock, NULL);
        pthread_cond_init(&l->work, NULL), pthread_cond_init(&l->ready, NULL);
        l->have_lock = 1;
        if (!(l->threads = malloc(sizeof *l->threads * (size_t)cfg->workers)))
            st = rai_fail(RA_ERR_NOMEM, "loader: out of memory");
        for (int k = 0; !st && k < cfg->workers; k++) {
            if (pthread_create(&l->threads[k], NULL, worker, l))
                st = rai_fail(RA_ERR_NOMEM, "loader: cannot start worker thread %d", k + 1);
            else l->nthreads++;
        }
    }
    if (st) {
        ra_loader_free(l);
        return st;
    }
    *out = l;
    return RA_OK;
}

int64_t ra_loader_images(const ra_loader *l) { return l ? l->n : 0; }
int64_t ra_loader_batches(const ra_loader *l) { return l ? l->nb : 0; }
int ra_loader_classes(const ra_loader *l) { return l ? l->f->classes : 0; }
int64_t ra_loader_skipped(const ra_loader *l) { return l ? l->skipped : 0; }
const ra_loader_config *ra_loader_config_of(const ra_loader *l) { return l ? &l->c : NULL; }
