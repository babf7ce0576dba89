/* train_data.c - what relattn train learns from: IDX files (Fashion-MNIST's
 * layout), or an image folder (docs/reference.md, relattn train). */
#include "cli.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}

int is_image_folder(const char *dir, const char *split) {
    char p[4096];
    struct stat s;
    for (int gz = 0; gz < 2; gz++) {
        snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte%s", dir, split, gz ? ".gz" : "");
        if (stat(p, &s) == 0) return 0;
    }
    return is_dir(dir);   /* a missing DIR is left to the IDX reader (66) */
}

/* The class names of f as a JSON array (relattn metadata "labels"). */
static char *labels_of(const ra_image_folder *f) {
    json_t *a = json_array();
    for (int c = 0; a && c < f->classes; c++) json_array_append_new(a, json_text(f->class_names[c]));
    char *s = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return s;
}

static int same_classes(const ra_image_folder *a, const ra_image_folder *b) {
    if (a->classes != b->classes) return 0;
    for (int c = 0; c < a->classes; c++)
        if (strcmp(a->class_names[c], b->class_names[c])) return 0;
    return 1;
}

/* Mean and standard deviation of every byte of d, over 255, for the
 * normalisation (computed in double; as one number for all channels). */
static void byte_stats(const ra_dataset *d, float *mean, float *std) {
    double s = 0, s2 = 0;
    const size_t n = (size_t)d->n * (d->c > 1 ? d->c : 1) * d->h * d->w;
    for (size_t i = 0; i < n; i++) s += d->images[i], s2 += (double)d->images[i] * d->images[i];
    const double m = s / n / 255, v = s2 / n / (255.0 * 255) - m * m;
    *mean = (float)m, *std = (float)sqrt(v > 1e-12 ? v : 1e-12);
}

void train_data_free(train_set *ts) {
    ra_dataset_free(&ts->train), ra_dataset_free(&ts->test);
    ra_image_folder_free(&ts->tf), ra_image_folder_free(&ts->vf);
    free(ts->idx), free(ts->labels);
    memset(ts, 0, sizeof *ts);
}

int train_data(train_set *ts, const char *dir, int size, double val_split, uint64_t seed,
               int skip_bad, int stream, int video) {
    ra_status st;
    memset(ts, 0, sizeof *ts);
    if (!is_image_folder(dir, "train")) {
        if (val_split > 0) return usage_error("--val-split is for image folders");
        if (stream)
            return usage_error("the augmentations of --augment timm and rrc+flip are for image "
                               "folders (IDX files are decoded once)");
        if ((st = ra_dataset_load_dir(&ts->train, dir, "train")) ||
            (st = ra_dataset_load_dir(&ts->test, dir, "test"))) {
            ra_dataset_free(&ts->train);
            return lib_fail(st);
        }
        return EX_OK;
    }
    ts->folder = 1;
    char tdir[4096], vdir[4096];
    snprintf(tdir, sizeof tdir, "%s/train", dir);
    snprintf(vdir, sizeof vdir, "%s/val", dir);
    const int split = !is_dir(tdir);
    if (split && !(val_split > 0))
        return fail(EX_DATAERR, "'%s' has no train/ and val/ folders: give --val-split F to "
                    "hold out a share of DIR/<class>/ for evaluation", dir);
    if (!split && val_split > 0) return usage_error("--val-split: '%s' has train/ and val/", dir);
    ra_image_folder tf = {0}, vf = {0};
    int64_t *idx = NULL, skipped = 0, sk2 = 0;
    int code = EX_OK;
    ra_status (*scan)(ra_image_folder *, const char *) =
        video ? ra_video_folder_scan : ra_image_folder_scan;
    if (video && !stream) return usage_error("videos are decoded for every batch (loaders)");
    if ((st = scan(&tf, split ? dir : tdir)) || (!split && (st = scan(&vf, vdir)))) {
        code = lib_fail(st);
        goto done;
    }
    if (!split && !same_classes(&tf, &vf)) {
        code = fail(EX_DATAERR, "'%s' and '%s' have different classes", tdir, vdir);
        goto done;
    }
    if (split) {   /* a permutation by the seed: its first share is held out, each part in order */
        const int64_t n = tf.n, nv = (int64_t)llround(val_split * (double)n);
        if (nv < 1 || nv >= n) {
            code = fail(EX_DATAERR, "--val-split %g of %lld %s leaves none on one side",
                        val_split, (long long)n, video ? "videos" : "images");
            goto done;
        }
        int64_t *perm = malloc(sizeof *perm * (size_t)n);
        uint8_t *held = calloc((size_t)n, 1);
        if (!(idx = malloc(sizeof *idx * (size_t)n)) || !perm || !held) {
            free(perm), free(held);
            code = fail(EX_DATAERR, "too large: out of memory");
            goto done;
        }
        ra_rng rng;
        ra_rng_seed(&rng, seed ^ 0x76616c2d73706c69u);   /* "val-spli" */
        ra_shuffle(perm, n, &rng);
        for (int64_t i = 0; i < nv; i++) held[perm[i]] = 1;
        int64_t a = 0, b = n - nv;
        for (int64_t i = 0; i < n; i++) idx[held[i] ? b++ : a++] = i;   /* train, then val */
        free(perm), free(held);
        if (stream) {
        } else if ((st = ra_dataset_from_folder(&ts->train, &tf, idx, n - nv, size, skip_bad, &skipped)) ||
            (st = ra_dataset_from_folder(&ts->test, &tf, idx + (n - nv), nv, size, skip_bad, &sk2))) {
            code = lib_fail(st);
            goto done;
        }
    }
    if (stream) {   /* the loaders decode them; the parts' sizes and classes for the model */
        ts->train = (ra_dataset){split ? tf.n - llround(val_split * (double)tf.n) : tf.n, size,
                                 size, tf.classes, NULL, NULL, 3};
        ts->test = (ra_dataset){split ? tf.n - ts->train.n : vf.n, size, size, tf.classes,
                                NULL, NULL, 3};
        ts->tidx = idx, ts->vidx = idx ? idx + ts->train.n : NULL, ts->idx = idx, idx = NULL;
        ts->tf = tf, ts->vf = split ? (ra_image_folder){0} : vf;
        tf = vf = (ra_image_folder){0};
        ts->stream = 1;
        if (!(ts->labels = labels_of(&ts->tf))) code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    if (split) {
    } else if ((st = ra_dataset_from_folder(&ts->train, &tf, NULL, tf.n, size, skip_bad, &skipped)) ||
               (st = ra_dataset_from_folder(&ts->test, &vf, NULL, vf.n, size, skip_bad, &sk2))) {
        code = lib_fail(st);
        goto done;
    }
    if (ts->train.c != ts->test.c) {   /* grey in one part, colour in the other: colour */
        code = fail(EX_DATAERR, "the training images are %s, the evaluation images %s: make "
                    "both grey or both colour", ts->train.c == 1 ? "grey" : "colour",
                    ts->test.c == 1 ? "grey" : "colour");
        goto done;
    }
    ts->skipped = skipped + sk2;
    if (!(ts->labels = labels_of(&tf))) code = fail(EX_DATAERR, "too large: out of memory");
    byte_stats(&ts->train, &ts->mean, &ts->std);
done:
    if (code) train_data_free(ts);
    free(idx);
    ra_image_folder_free(&tf), ra_image_folder_free(&vf);
    return code;
}
