/* cmd_classify.c - relattn classify: classify images with a swin or vit model. */
#include "cli.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char classify_help[] =
    "usage: relattn classify MODEL IMAGE... [--top K] [--json] [--resize R] [--crop C]\n"
    "                        [--interpolation F] [--crop-mode M] [--threads N]\n"
    "       relattn classify VIDEO_MODEL VIDEO... [--clips N] [--crops 1|3] [--clip-len T]\n"
    "                        [--frame-interval S] [--frame-rate F] [--top K] [--json] ...\n"
    "\n"
    "Classifies PNG and JPEG images with a swin, swinv2 or vit model. Each image\n"
    "goes through the evaluation transform of the model's family, as its own PIL\n"
    "pipeline computes it: timm's pretrained_cfg (img_size / crop_pct, interpolation,\n"
    "crop_mode), transformers' preprocessor_config.json, torchvision's weights'\n"
    "transform, else timm's defaults (resize the shorter side to C / 0.875, bilinear,\n"
    "centre crop C x C, ImageNet's mean and std); `relattn inspect MODEL` shows it and\n"
    "where it came from. Overrides: --resize R (the shorter side; with --crop-mode\n"
    "squash, R x R), --crop C (C x C; the resize follows as C / crop_pct unless given),\n"
    "--interpolation nearest|bilinear|bicubic|lanczos|box|hamming, --crop-mode\n"
    "center|squash|border (timm's). Prints the top K (default 5) classes with softmax probabilities,\n"
    "named by the metadata's \"labels\" when the file has them. Images over 64\n"
    "megapixels are refused before decoding. A model whose metadata tta is flip\n"
    "(relattn train's default) averages its outputs for the image and its mirror\n"
    "before the softmax; --set tta=none: one view.\n"
    "\n"
    "A video model (swin3d) classifies videos (files FFmpeg decodes: MP4, MKV, WebM,\n"
    "AVI, ...) and folders of PNG / JPEG frames (in name order): clips sampled as the\n"
    "official Video Swin test does (the default: --clips 4 of --clip-len 32 frames\n"
    "every --frame-interval 2, the shorter side to 224, --crops 3) or as torchvision's\n"
    "Kinetics evaluation (its swin3d weights, or --set video.sampler=torchvision: 12\n"
    "clips of 32 consecutive frames after resampling to --frame-rate 15, the shorter\n"
    "side to 256, one centre crop of 224); `relattn inspect` shows the metadata\n"
    "(video.*, num_frames, transform.*, mean, std); the softmax probabilities\n"
    "averaged over clips x crops; --resize R and --crop C as for images. Videos over\n"
    "4 GiB, 64 megapixels a frame, 1000000 frames or 4 hours are refused.\n"
    MODEL_OPTIONS_HELP;

/* The options over the family's transform: --crop C (C x C; the resize
 * follows as C / crop_pct unless --resize), --resize R (the shorter side,
 * or R x R when squashing), --interpolation, --crop-mode. */
static ra_status apply_overrides(ra_transform *t, const ra_model *m, int crop, int resize,
                                 const char *interp, const char *mode) {
    ra_status st;
    if (mode && t->resize != RA_RESIZE_NONE && (st = ra_transform_crop_mode(t, mode))) return st;
    if (crop) {
        if (t->crop == RA_CROP_NONE) t->crop = RA_CROP_CENTER_ROUND;
        t->crop_h = t->crop_w = crop;
        const char *cp = ra_model_meta(m, "crop_pct");
        const double pct = cp ? atof(cp) : t->grey ? 1.0 : 0.875;   /* ra_model_transform's */
        if (!resize && t->resize != RA_RESIZE_NONE && pct > 0) {
            t->resize_h = t->resize_w = (int)floor(crop / pct);
            if (t->resize == RA_RESIZE_COVER) t->resize = RA_RESIZE_SHORTER;   /* square now */
        }
    }
    if (resize) {
        if (t->resize == RA_RESIZE_NONE || t->resize == RA_RESIZE_COVER)
            t->resize = RA_RESIZE_SHORTER;
        t->resize_h = t->resize_w = resize;
    }
    if (interp) t->interp = (ra_interp)ra_interp_parse(interp);
    return ra_transform_check(t);
}

/* The metadata's labels (or none): 0 if they are not a JSON array. */
static int load_labels(json_t **labels, const ra_model *m) {
    *labels = NULL;
    if (!ra_model_meta(m, "labels")) return 1;
    json_error_t jerr;
    *labels = json_loads(ra_model_meta(m, "labels"), JSON_REJECT_DUPLICATES, &jerr);
    return json_is_array(*labels);
}

/* The top entries of p (k probabilities; NaN skipped; p is consumed) under
 * the input's name: lines, or one object of --json's array into jo. */
static void print_top(jw *jo, const char *key, const char *input, double *p, int k, int top,
                      const json_t *labels) {
    if (jo) {
        jw_object(jo);
        jw_key(jo, key);
        jw_string(jo, input);
        jw_key(jo, "top");
        jw_array(jo);
    } else {
        printf("%s\n", safe_text(input));
    }
    for (int r = 0; r < top && r < k; r++) {   /* by selection: k is small enough */
        int best = -1;
        for (int c = 0; c < k; c++)
            if (!isnan(p[c]) && (best < 0 || p[c] > p[best])) best = c;
        if (best < 0) break;
        json_t *lab = labels ? json_array_get(labels, (size_t)best) : NULL;
        const char *name = json_is_string(lab) ? json_string_value(lab) : NULL;
        if (jo) {
            jw_object(jo);
            jw_key(jo, "class");
            jw_int(jo, best);
            jw_key(jo, "probability");
            jw_real(jo, "%.6f", p[best]);
            jw_key(jo, "label");
            jw_string(jo, name);
            jw_end(jo, '}');
        } else {
            printf("  %2d. %6.2f%%  class %d%s%s\n", r + 1, 100 * p[best], best, name ? "  " : "",
                   name ? safe_text(name) : "");
        }
        p[best] = NAN;   /* taken */
    }
    if (jo) jw_end(jo, ']'), jw_end(jo, '}');
}

/* ---- videos ------------------------------------------------------------------------ */

/* Each video (or frame folder): its clips x crops views through the model
 * one at a time, their softmax probabilities averaged (video_probs). */
static int classify_videos(ra_model *m, const opt *opts, const char *const *videos, int n,
                           int top, int crop, int resize) {
    if (get(opts, "--interpolation") || get(opts, "--crop-mode"))
        return usage_error("--interpolation and --crop-mode are for images (a video's frames are "
                           "resized bilinearly, as torchvision's tensors)");
    ra_clip_spec cs;
    ra_video_transform vt;
    int code = video_options(&cs, &vt, NULL, m, opts, crop, resize);
    if (code) return code;
    json_t *labels = NULL;
    if (!load_labels(&labels, m)) {
        json_decref(labels);
        return fail(EX_DATAERR, "metadata labels is not a JSON array of strings");
    }
    const int json = get(opts, "--json") != NULL;
    jw jo = {0};
    if (json) jw_array(&jo);
    for (int i = 0; i < n && code == EX_OK; i++) {
        double *sum;
        int k;
        if ((code = video_probs(&sum, &k, m, videos[i], &cs, &vt, NULL))) break;
        print_top(json ? &jo : NULL, "video", videos[i], sum, k, top, labels);
        free(sum);
    }
    if (json && code == EX_OK) jw_end(&jo, ']'), jw_line(&jo);
    json_decref(labels);
    return code;
}

int cmd_classify(int argc, char **argv) {
    if (!take_model_options(&argc, argv)) return EX_USAGE;
    opt opts[] = {{"--top", 1, 0},           {"--json", 0, 0},      {"--resize", 1, 0},
                  {"--crop", 1, 0},          {"--threads", 1, 0},   {"--interpolation", 1, 0},
                  {"--crop-mode", 1, 0},     {"--clips", 1, 0},     {"--crops", 1, 0},
                  {"--clip-len", 1, 0},      {"--frame-interval", 1, 0},
                  {"--frame-rate", 1, 0},    {"--help", 0, 0},      {"-h", 0, 0},
                  {0, 0, 0}};
    const char *pos[256];
    int npos, top = 5, crop = 0, resize = 0;
    if (!parse_args(argc, argv, opts, pos, 256, &npos)) return EX_USAGE;
    if (get(opts, "--help") || get(opts, "-h")) return fputs(classify_help, stdout), EX_OK;
    if (npos < 2) return usage_error("needs MODEL and at least one IMAGE (or VIDEO)");
    if (get(opts, "--top") && !parse_int(&top, get(opts, "--top"), 1, 100000))
        return usage_error("--top '%s': need a positive integer", get(opts, "--top"));
    if (get(opts, "--crop") && !parse_int(&crop, get(opts, "--crop"), 1, 8192))
        return usage_error("--crop '%s': need 1..8192", get(opts, "--crop"));
    if (get(opts, "--resize") && !parse_int(&resize, get(opts, "--resize"), 1, 8192))
        return usage_error("--resize '%s': need 1..8192", get(opts, "--resize"));
    const char *interp = get(opts, "--interpolation"), *mode = get(opts, "--crop-mode");
    if (interp && ra_interp_parse(interp) < 0)
        return usage_error("--interpolation '%s': nearest, bilinear, bicubic, lanczos, box or "
                           "hamming", interp);
    if (mode && strcmp(mode, "center") && strcmp(mode, "squash") && strcmp(mode, "border"))
        return usage_error("--crop-mode '%s': center, squash or border", mode);
    if (!threads_option(opts)) return EX_USAGE;

    ra_model *m;
    ra_status st = open_model(&m, pos[0]);
    if (st) return lib_fail(st);
    const ra_arch arch = ra_model_arch(m);
    int code = EX_OK, in_chans = 3;
    json_t *labels = NULL;
    uint8_t *rgb = NULL;
    float *x = NULL, *y = NULL;
    double *p = NULL;
    if (ra_model_is_video(m)) {
        code = classify_videos(m, opts, pos + 1, npos - 1, top, crop, resize);
        goto done;
    }
    if (get(opts, "--clips") || get(opts, "--crops") || get(opts, "--clip-len") ||
        get(opts, "--frame-interval") || get(opts, "--frame-rate")) {
        code = usage_error("--clips, --crops, --clip-len, --frame-interval and --frame-rate are "
                           "for a video model, not %s", ra_arch_name(arch));
        goto done;
    }
    if (arch != RA_ARCH_SWIN && arch != RA_ARCH_VIT && arch != RA_ARCH_SWINV2) {
        code = fail(EX_DATAERR, "needs a swin, swinv2 or vit model, not %s", ra_arch_name(arch));
        goto done;
    }
    if (ra_model_meta(m, "in_chans")) in_chans = atoi(ra_model_meta(m, "in_chans"));
    if (in_chans != 3 && in_chans != 1) {
        code = fail(EX_DATAERR, "reads RGB or grey images; the model takes %s channels",
                    ra_model_meta(m, "in_chans"));
        goto done;
    }
    ra_transform tf;
    if ((st = ra_model_transform(&tf, NULL, m)) ||
        (st = apply_overrides(&tf, m, crop, resize, interp, mode))) {
        code = lib_fail(st);
        goto done;
    }
    if (!load_labels(&labels, m)) {
        code = fail(EX_DATAERR, "metadata labels is not a JSON array of strings");
        goto done;
    }
    const int json = get(opts, "--json") != NULL;
    jw jo = {0};
    if (json) jw_array(&jo);
    for (int im = 1; im < npos && code == EX_OK; im++) {
        int w, h, ow, oh, yn;
        int64_t ys[4];
        float *grown;
        if ((st = ra_image_load_u8(&rgb, &w, &h, pos[im], (int64_t)64 << 20)) ||
            (st = ra_transform_size(&tf, w, h, &ow, &oh))) {
            code = lib_fail(st);
            break;
        }
        if (!(grown = realloc(x, sizeof *x * in_chans * (size_t)ow * oh))) {
            code = fail(EX_DATAERR, "too large: out of memory");
            break;
        }
        x = grown;
        if ((st = ra_transform_apply(x, &tf, rgb, w, h)) ||   /* grey models: the luma */
            (st = ra_model_predict(m, &y, &yn, ys, x, 4, (int64_t[]){1, in_chans, oh, ow}))) {
            code = lib_fail(st);
            break;
        }
        free(rgb), rgb = NULL;
        const int k = (int)ys[yn - 1];
        if (!(p = realloc(p, sizeof *p * (size_t)k))) {
            code = fail(EX_DATAERR, "out of memory");
            break;
        }
        softmax_probs(p, y, k);
        print_top(json ? &jo : NULL, "image", pos[im], p, k, top, labels);
        free(y), y = NULL;
    }
    if (json && code == EX_OK) jw_end(&jo, ']'), jw_line(&jo);
done:
    json_decref(labels);
    free(rgb), free(x), free(y), free(p);
    ra_model_free(m);
    return code;
}
