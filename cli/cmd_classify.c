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

int cmd_classify(int argc, char **argv) {
    if (!take_model_options(&argc, argv)) return EX_USAGE;
    opt opts[] = {{"--top", 1, 0},           {"--json", 0, 0},      {"--resize", 1, 0},
                  {"--crop", 1, 0},          {"--threads", 1, 0},   {"--interpolation", 1, 0},
                  {"--crop-mode", 1, 0},     {"--help", 0, 0},      {"-h", 0, 0},
                  {0, 0, 0}};
    const char *pos[256];
    int npos, top = 5, crop = 0, resize = 0;
    if (!parse_args(argc, argv, opts, pos, 256, &npos)) return EX_USAGE;
    if (get(opts, "--help") || get(opts, "-h")) return fputs(classify_help, stdout), EX_OK;
    if (npos < 2) return usage_error("needs MODEL and at least one IMAGE");
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
    if (ra_model_meta(m, "labels")) {
        json_error_t jerr;
        labels = json_loads(ra_model_meta(m, "labels"), JSON_REJECT_DUPLICATES, &jerr);
        if (!json_is_array(labels)) {
            code = fail(EX_DATAERR, "metadata labels is not a JSON array of strings");
            goto done;
        }
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
        /* softmax, then the top entries by selection (k is small enough) */
        double mx = -INFINITY, sum = 0;
        for (int c = 0; c < k; c++) mx = y[c] > mx ? y[c] : mx;
        for (int c = 0; c < k; c++) sum += exp(y[c] - mx);
        if (json) {
            jw_object(&jo);
            jw_key(&jo, "image");
            jw_string(&jo, pos[im]);
            jw_key(&jo, "top");
            jw_array(&jo);
        } else {
            printf("%s\n", safe_text(pos[im]));
        }
        for (int r = 0; r < top && r < k; r++) {
            int best = -1;
            for (int c = 0; c < k; c++)
                if (!isnan(y[c]) && (best < 0 || y[c] > y[best])) best = c;
            if (best < 0) break;
            const double p = exp(y[best] - mx) / sum;
            json_t *lab = labels ? json_array_get(labels, (size_t)best) : NULL;
            const char *name = json_is_string(lab) ? json_string_value(lab) : NULL;
            if (json) {
                jw_object(&jo);
                jw_key(&jo, "class");
                jw_int(&jo, best);
                jw_key(&jo, "probability");
                jw_real(&jo, "%.6f", p);
                jw_key(&jo, "label");
                jw_string(&jo, name);
                jw_end(&jo, '}');
            } else {
                printf("  %2d. %6.2f%%  class %d%s%s\n", r + 1, 100 * p, best, name ? "  " : "",
                       name ? safe_text(name) : "");
            }
            y[best] = NAN;   /* taken */
        }
        if (json) jw_end(&jo, ']'), jw_end(&jo, '}');
        free(y), y = NULL;
    }
    if (json && code == EX_OK) jw_end(&jo, ']'), jw_line(&jo);
done:
    json_decref(labels);
    free(rgb), free(x), free(y);
    ra_model_free(m);
    return code;
}
