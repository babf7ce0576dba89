/* video_views.c - a video model's views of one video (clips x crops) and
 * their softmax probabilities averaged: what classify prints for a video
 * and what eval scores it by (docs/reference.md, "Videos"). */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void softmax_probs(double *p, const float *y, int k) {
    double mx = -INFINITY, sum = 0;
    for (int c = 0; c < k; c++) mx = y[c] > mx ? y[c] : mx;
    for (int c = 0; c < k; c++) sum += p[c] = exp(y[c] - mx);
    for (int c = 0; c < k; c++) p[c] /= sum;
}

int video_options(ra_clip_spec *cs, ra_video_transform *vt, const char **source, const ra_model *m,
                  const opt *opts, int crop, int resize) {
    ra_status st = ra_model_video_transform(cs, vt, source, m);
    if (st) return lib_fail(st);
    int crops = vt->crops;
    if (get(opts, "--clips") && !parse_int(&cs->clips, get(opts, "--clips"), 1, 1024))
        return usage_error("--clips '%s': need 1..1024", get(opts, "--clips"));
    if (get(opts, "--clip-len") && !parse_int(&cs->clip_len, get(opts, "--clip-len"), 1, 4096))
        return usage_error("--clip-len '%s': need 1..4096", get(opts, "--clip-len"));
    if (get(opts, "--frame-interval") &&
        !parse_int(&cs->frame_interval, get(opts, "--frame-interval"), 1, 4096))
        return usage_error("--frame-interval '%s': need 1..4096", get(opts, "--frame-interval"));
    if (get(opts, "--crops") && (!parse_int(&crops, get(opts, "--crops"), 1, 3) || crops == 2))
        return usage_error("--crops '%s': need 1 or 3", get(opts, "--crops"));
    if (get(opts, "--frame-rate")) {
        char *end;
        const char *v = get(opts, "--frame-rate");
        cs->frame_rate = strtod(v, &end);
        if (end == v || *end || !(cs->frame_rate >= 0 && cs->frame_rate <= 1000))
            return usage_error("--frame-rate '%s': need 0..1000 (0: the video's own)", v);
    }
    if (cs->sampler == RA_CLIPS_TORCHVISION && cs->frame_interval != 1)
        return usage_error("--frame-interval: torchvision's clips are consecutive frames (its "
                           "--frame-rate resamples)");
    vt->crops = crops;   /* one: the recipe's centre crop (mmaction's CenterCrop: floored) */
    if (crop) vt->frame.crop_h = vt->frame.crop_w = crop;
    if (resize) vt->frame.resize_h = vt->frame.resize_w = resize;
    return EX_OK;
}

int video_probs(double **probs, int *k, ra_model *m, const char *path, const ra_clip_spec *cs,
                const ra_video_transform *vt, int *bad) {
    *probs = NULL, *k = 0;
    if (bad) *bad = 0;
    ra_video *v = NULL;
    float *x = NULL, *y = NULL;
    double *p = NULL, *sum = NULL;
    int64_t shape[5];
    ra_status st = ra_video_open(&v, path, NULL);
    if (!st) st = ra_video_clips(&x, shape, v, cs, vt);
    ra_video_free(v);
    if (st) {   /* the video itself: left out with bad, as an image that does not decode */
        if (bad && (st == RA_ERR_FORMAT || st == RA_ERR_IO)) return *bad = 1, EX_OK;
        return lib_fail(st);
    }
    const size_t view = (size_t)shape[1] * shape[2] * shape[3] * shape[4];
    int code = EX_OK, n = 0;
    for (int64_t w = 0; w < shape[0] && code == EX_OK; w++) {
        int yn;
        int64_t ys[4];
        const int64_t one[5] = {1, shape[1], shape[2], shape[3], shape[4]};
        if ((st = ra_model_predict(m, &y, &yn, ys, x + (size_t)w * view, 5, one))) {
            code = lib_fail(st);
            break;
        }
        if (w == 0) {
            n = (int)ys[yn - 1];
            p = malloc(sizeof *p * (size_t)n), sum = calloc((size_t)n, sizeof *sum);
            if (!p || !sum) code = fail(EX_DATAERR, "too large: out of memory");
        }
        if (code == EX_OK && (int)ys[yn - 1] != n)
            code = fail(EX_SOFTWARE, "the views of '%s' gave %lld and %d outputs", safe_text(path),
                        (long long)ys[yn - 1], n);
        if (code == EX_OK) {
            softmax_probs(p, y, n);
            for (int c = 0; c < n; c++) sum[c] += p[c] / (double)shape[0];
        }
        free(y), y = NULL;
    }
    free(x), free(y), free(p);
    if (code) {
        free(sum);
        return code;
    }
    *probs = sum, *k = n;
    return EX_OK;
}
