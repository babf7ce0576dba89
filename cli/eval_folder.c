/* eval_folder.c - relattn eval MODEL --data DIR on an image folder: top-1,
 * top-5, the accuracy of each class and the confusion matrix, each image
 * through the model's evaluation transform (docs/reference.md, relattn
 * eval). */
#include "cli.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* DIR/val when DIR has one (DIR/train + DIR/val), else DIR itself. */
static void folder_split(char *out, size_t n, const char *dir) {
    struct stat s;
    snprintf(out, n, "%s/val", dir);
    if (stat(out, &s) != 0 || !S_ISDIR(s.st_mode)) snprintf(out, n, "%s", dir);
}

/* The head's class of each folder class: by name where the model's labels
 * name every folder class, else by rank when the counts agree. */
static int class_map(int *map, const ra_image_folder *f, const ra_model *m, int K, int *by_name) {
    const char *lj = ra_model_meta(m, "labels");
    json_t *labels = lj ? json_loads(lj, 0, NULL) : NULL;
    int named = json_is_array(labels) && (int)json_array_size(labels) == K;
    for (int c = 0; named && c < f->classes; c++) {
        map[c] = -1;
        for (int k = 0; k < K && map[c] < 0; k++) {
            const json_t *v = json_array_get(labels, (size_t)k);
            if (json_is_string(v) && !strcmp(json_string_value(v), f->class_names[c])) map[c] = k;
        }
        named = map[c] >= 0;
    }
    json_decref(labels);
    *by_name = named;
    if (named) return EX_OK;
    if (f->classes != K)
        return fail(EX_DATAERR, "the folder has %d classes, the model's head %d, and its labels "
                    "do not name them all (e.g. '%s')", f->classes, K, f->class_names[0]);
    for (int c = 0; c < K; c++) map[c] = c;
    return EX_OK;
}

/* The scores of a folder: top-1, top-5, each class's and the confusion
 * matrix (rows: the folder's classes, columns: the head's). */
typedef struct {
    int K, by_name;
    const ra_image_folder *f;
    int *map;                          /* (classes) the head's class of each */
    int64_t *per, *conf;               /* (classes, 2) images, correct; (classes, K) */
    int64_t correct, top5, skipped;
} tally;

static int tally_start(tally *t, const ra_image_folder *f, const ra_model *m) {
    const char *kc = ra_model_meta(m, "num_classes");
    *t = (tally){.K = kc ? atoi(kc) : 0, .f = f};
    if (t->K < 1)
        return fail(EX_DATAERR, "the model has no class count (num_classes): not a classifier");
    t->map = malloc(sizeof *t->map * (size_t)f->classes);
    t->per = calloc((size_t)f->classes * 2, sizeof *t->per);
    t->conf = calloc((size_t)f->classes * t->K, sizeof *t->conf);
    if (!t->map || !t->per || !t->conf) return fail(EX_DATAERR, "too large: out of memory");
    return class_map(t->map, f, m, t->K, &t->by_name);
}

static void tally_free(tally *t) { free(t->map), free(t->per), free(t->conf); }

/* Item i of the folder scored by r (K; the highest first, ties to the
 * lower class, as classify ranks them). */
static void tally_add(tally *t, int64_t i, const double *r) {
    const int K = t->K, c = t->f->labels[i], want = t->map[c];
    int best = 0, above = 0;
    for (int k = 1; k < K; k++) best = r[k] > r[best] ? k : best;
    for (int k = 0; k < K; k++) above += r[k] > r[want] || (r[k] == r[want] && k < want);
    t->correct += best == want, t->top5 += above < 5;
    t->per[2 * c]++, t->per[2 * c + 1] += best == want;
    t->conf[(size_t)c * K + best]++;
}

/* The report of what was scored: lines, or --json's object. */
static int tally_report(const tally *t, const char *dir, const char *what, int json,
                        const char *desc, const char *tsrc) {
    const ra_image_folder *f = t->f;
    const int K = t->K;
    const int64_t n = f->n - t->skipped, correct = t->correct, top5 = t->top5;
    if (t->skipped)
        fprintf(stderr, "%s: skipped %lld %s that did not decode\n", cmd, (long long)t->skipped,
                what);
    if (n == 0) return fail(EX_DATAERR, "no %s of '%s' could be read", what, safe_text(dir));
    if (json) {
        json_t *o = json_object(), *cls = json_array(), *pc = json_array(), *cf = json_array();
        for (int c = 0; c < f->classes; c++) {
            json_t *row = json_array();
            json_array_append_new(cls, json_text(f->class_names[c]));
            json_array_append_new(pc, t->per[2 * c] ? json_real((double)t->per[2 * c + 1] /
                                                                t->per[2 * c])
                                                    : json_null());
            for (int k = 0; k < K; k++)
                json_array_append_new(row, json_integer(t->conf[(size_t)c * K + k]));
            json_array_append_new(cf, row);
        }
        json_object_set_new(o, "top1", json_real((double)correct / n));
        json_object_set_new(o, "top5", json_real((double)top5 / n));
        json_object_set_new(o, "correct", json_integer(correct));
        json_object_set_new(o, "images", json_integer(n));
        json_object_set_new(o, "skipped", json_integer(t->skipped));
        json_object_set_new(o, "classes", cls);
        json_object_set_new(o, "class_to_head", json_string(t->by_name ? "labels" : "rank"));
        json_object_set_new(o, "per_class_top1", pc);
        json_object_set_new(o, "confusion", cf);
        json_object_set_new(o, "transform", json_text(desc));
        json_object_set_new(o, "transform_source", json_text(tsrc));
        jw w = {0};   /* every string through the one writer (json.c) */
        jw_value(&w, o);
        jw_line(&w);
        json_decref(o);
        return EX_OK;
    }
    printf("%s: %lld %s of %d classes; %s (%s)\n", safe_text(dir), (long long)n, what, f->classes,
           desc, safe_text(tsrc));
    printf("top-1 accuracy %.4f (%lld/%lld), top-5 accuracy %.4f (%lld/%lld)\n",
           (double)correct / n, (long long)correct, (long long)n, (double)top5 / n,
           (long long)top5, (long long)n);
    printf("per class (top-1):\n");
    for (int c = 0; c < f->classes; c++)
        printf("  %-24s %6lld %s  %.4f\n", safe_text(f->class_names[c]), (long long)t->per[2 * c],
               what, t->per[2 * c] ? (double)t->per[2 * c + 1] / t->per[2 * c] : 0.0);
    if (K <= 32) {
        printf("confusion matrix (rows: the folder's classes, columns: predicted)\n     ");
        for (int k = 0; k < K; k++) printf(" %5d", k);
        printf("\n");
        for (int c = 0; c < f->classes; c++) {
            printf("%5d", c);
            for (int k = 0; k < K; k++) printf(" %5lld", (long long)t->conf[(size_t)c * K + k]);
            printf("\n");
        }
    }
    return EX_OK;
}

int eval_folder(ra_model *m, const char *data, int json, int skip_bad, int batch) {
    char dir[4096], desc[512];
    ra_image_folder f;
    ra_transform t;
    const char *tsrc;
    folder_split(dir, sizeof dir, data);
    ra_status st = ra_image_folder_scan(&f, dir);
    if (st) return lib_fail(st);
    tally ty;
    int ow, oh, code = tally_start(&ty, &f, m);
    const int K = ty.K;
    int64_t *idx = NULL;
    float *x = NULL, *y = NULL;
    double *r = NULL;
    uint8_t *bad = NULL;
    if (code) goto done;
    if ((st = ra_model_transform(&t, &tsrc, m))) {
        code = lib_fail(st);
        goto done;
    }
    ra_transform_describe(desc, sizeof desc, &t);
    const int C = t.grey ? 1 : 3;
    if (t.crop != RA_CROP_NONE || t.resize == RA_RESIZE_EXACT) {   /* one size for any image */
        ra_transform_size(&t, 1, 1, &ow, &oh);
    } else {
        code = fail(EX_DATAERR, "the model's transform (%s) gives images of varying sizes; "
                    "batches need a crop or a fixed resize (--set transform.crop=HxW)", desc);
        goto done;
    }
    if (!(idx = malloc(sizeof *idx * (size_t)batch)) || !(bad = malloc((size_t)batch)) ||
        !(r = malloc(sizeof *r * (size_t)K)) ||
        !(x = malloc(sizeof *x * (size_t)batch * C * ow * oh))) {
        code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    for (int64_t i0 = 0; i0 < f.n && !code; i0 += batch) {
        const int b = (int)(f.n - i0 < batch ? f.n - i0 : batch);
        int yn;
        int64_t ys[4];
        for (int s = 0; s < b; s++) idx[s] = i0 + s;
        if ((st = ra_image_folder_batch(x, &f, idx, b, &t, ow, oh, skip_bad ? bad : NULL)) ||
            (st = ra_model_predict(m, &y, &yn, ys, x, 4, (int64_t[]){b, C, oh, ow}))) {
            code = lib_fail(st);
            break;
        }
        if (ys[yn - 1] != K) {
            code = fail(EX_DATAERR, "the model gives %lld outputs, its num_classes says %d",
                        (long long)ys[yn - 1], K);
            break;
        }
        for (int s = 0; s < b; s++) {
            if (skip_bad && bad[s]) {
                ty.skipped++;
                continue;
            }
            for (int k = 0; k < K; k++) r[k] = y[(size_t)s * K + k];
            tally_add(&ty, i0 + s, r);
        }
        free(y), y = NULL;
    }
    if (!code) code = tally_report(&ty, dir, "images", json, desc, tsrc);
done:
    free(idx), free(bad), free(x), free(y), free(r);
    tally_free(&ty);
    ra_image_folder_free(&f);
    return code;
}

int eval_video_folder(ra_model *m, const char *data, int json, int skip_bad,
                      const ra_clip_spec *cs, const ra_video_transform *vt, const char *tsrc) {
    char dir[4096], desc[640], frame[512];
    ra_image_folder f;
    folder_split(dir, sizeof dir, data);
    ra_status st = ra_video_folder_scan(&f, dir);
    if (st) return lib_fail(st);
    tally ty;
    int code = tally_start(&ty, &f, m);
    ra_transform_describe(frame, sizeof frame, &vt->frame);
    snprintf(desc, sizeof desc, "%s clips: %d of %d frames every %d%s; %d crop%s, %s",
             cs->sampler == RA_CLIPS_TORCHVISION ? "torchvision" : "mmaction", cs->clips,
             cs->clip_len, cs->frame_interval, cs->frame_rate > 0 ? " (resampled)" : "",
             vt->crops, vt->crops > 1 ? "s" : "", frame);
    for (int64_t i = 0; i < f.n && !code; i++) {
        double *p = NULL;
        int k, bad = 0;
        if ((code = video_probs(&p, &k, m, f.paths[i], cs, vt, skip_bad ? &bad : NULL))) break;
        if (bad) {
            ty.skipped++;
            continue;
        }
        if (k != ty.K)
            code = fail(EX_DATAERR, "the model gives %d outputs, its num_classes says %d", k, ty.K);
        else tally_add(&ty, i, p);
        free(p);
    }
    if (!code) code = tally_report(&ty, dir, "videos", json, desc, tsrc);
    tally_free(&ty);
    ra_image_folder_free(&f);
    return code;
}
