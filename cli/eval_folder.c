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

int eval_folder(ra_model *m, const char *data, int json, int skip_bad, int batch) {
    char dir[4096], desc[512];
    ra_image_folder f;
    ra_transform t;
    const char *tsrc;
    folder_split(dir, sizeof dir, data);
    ra_status st = ra_image_folder_scan(&f, dir);
    if (st) return lib_fail(st);
    const char *kc = ra_model_meta(m, "num_classes");
    const int K = kc ? atoi(kc) : 0;
    int ow, oh, code = EX_OK, by_name = 0;
    int *map = malloc(sizeof *map * (size_t)f.classes);
    int64_t *conf = NULL, *idx = NULL, correct = 0, top5 = 0, skipped = 0;
    int64_t *per = calloc((size_t)f.classes * 2, sizeof *per);   /* images, correct */
    float *x = NULL, *y = NULL;
    uint8_t *bad = NULL;
    if (K < 1) {
        code = fail(EX_DATAERR, "the model has no class count (num_classes): not a classifier");
        goto done;
    }
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
    if (!map || !per || !(conf = calloc((size_t)f.classes * K, sizeof *conf)) ||
        !(idx = malloc(sizeof *idx * (size_t)batch)) || !(bad = malloc((size_t)batch)) ||
        !(x = malloc(sizeof *x * (size_t)batch * C * ow * oh))) {
        code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    if ((code = class_map(map, &f, m, K, &by_name))) goto done;
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
                skipped++;
                continue;
            }
            const float *r = y + (size_t)s * K;
            const int c = f.labels[i0 + s], want = map[c];
            int best = 0, above = 0;
            for (int k = 1; k < K; k++) best = r[k] > r[best] ? k : best;
            for (int k = 0; k < K; k++) above += r[k] > r[want] || (r[k] == r[want] && k < want);
            correct += best == want, top5 += above < 5;
            per[2 * c]++, per[2 * c + 1] += best == want;
            conf[(size_t)c * K + best]++;
        }
        free(y), y = NULL;
    }
    if (code) goto done;
    const int64_t n = f.n - skipped;
    if (skipped) fprintf(stderr, "%s: skipped %lld images that did not decode\n", cmd, (long long)skipped);
    if (n == 0) {
        code = fail(EX_DATAERR, "no image of '%s' could be read", dir);
        goto done;
    }
    if (json) {
        json_t *o = json_object(), *cls = json_array(), *pc = json_array(), *cf = json_array();
        for (int c = 0; c < f.classes; c++) {
            json_t *row = json_array();
            json_array_append_new(cls, json_text(f.class_names[c]));
            json_array_append_new(pc, per[2 * c] ? json_real((double)per[2 * c + 1] / per[2 * c])
                                                  : json_null());
            for (int k = 0; k < K; k++) json_array_append_new(row, json_integer(conf[(size_t)c * K + k]));
            json_array_append_new(cf, row);
        }
        json_object_set_new(o, "top1", json_real((double)correct / n));
        json_object_set_new(o, "top5", json_real((double)top5 / n));
        json_object_set_new(o, "correct", json_integer(correct));
        json_object_set_new(o, "images", json_integer(n));
        json_object_set_new(o, "skipped", json_integer(skipped));
        json_object_set_new(o, "classes", cls);
        json_object_set_new(o, "class_to_head", json_string(by_name ? "labels" : "rank"));
        json_object_set_new(o, "per_class_top1", pc);
        json_object_set_new(o, "confusion", cf);
        json_object_set_new(o, "transform", json_text(desc));
        json_object_set_new(o, "transform_source", json_text(tsrc));
        jw w = {0};   /* every string through the one writer (json.c) */
        jw_value(&w, o);
        jw_line(&w);
        json_decref(o);
    } else {
        printf("%s: %lld images of %d classes; %s (%s)\n", safe_text(dir), (long long)n, f.classes,
               desc, safe_text(tsrc));
        printf("top-1 accuracy %.4f (%lld/%lld), top-5 accuracy %.4f (%lld/%lld)\n",
               (double)correct / n, (long long)correct, (long long)n, (double)top5 / n,
               (long long)top5, (long long)n);
        printf("per class (top-1):\n");
        for (int c = 0; c < f.classes; c++)
            printf("  %-24s %6lld images  %.4f\n", safe_text(f.class_names[c]),
                   (long long)per[2 * c], per[2 * c] ? (double)per[2 * c + 1] / per[2 * c] : 0.0);
        if (K <= 32) {
            printf("confusion matrix (rows: the folder's classes, columns: predicted)\n     ");
            for (int k = 0; k < K; k++) printf(" %5d", k);
            printf("\n");
            for (int c = 0; c < f.classes; c++) {
                printf("%5d", c);
                for (int k = 0; k < K; k++) printf(" %5lld", (long long)conf[(size_t)c * K + k]);
                printf("\n");
            }
        }
    }
done:
    free(map), free(per), free(conf), free(idx), free(bad), free(x), free(y);
    ra_image_folder_free(&f);
    return code;
}
