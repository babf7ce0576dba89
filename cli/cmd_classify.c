/* cmd_classify.c - relattn classify: classify images with a swin or vit model. */
#include "cli.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char classify_help[] =
    "usage: relattn classify MODEL IMAGE... [--top K] [--json]\n"
    "                        [--resize R] [--crop C] [--threads N]\n"
    "\n"
    "Classifies PNG and JPEG images with a swin or vit model file.\n"
    "Each image goes through the ImageNet evaluation transform of timm and\n"
    "torchvision: resize the shorter side to R (default C / crop_pct, the metadata's\n"
    "crop_pct or 0.875), centre crop\n"
    "C x C (default the model's img_size), scale to [0, 1], normalise with the\n"
    "metadata's \"mean\" and \"std\" (\"r,g,b\"; default ImageNet's). Prints the top K\n"
    "(default 5) classes with softmax probabilities, named by the metadata's\n"
    "\"labels\" (a JSON array of strings) when the file has them. Images over\n"
    "64 megapixels are refused before decoding. A model whose metadata tta is\n"
    "flip (relattn train's default) averages its outputs for the image and its\n"
    "mirror before the softmax; --set tta=none: one view.\n"
    MODEL_OPTIONS_HELP;

/* "r,g,b", or one number for all three (a grey model's). */
static int parse_triple(float out[3], const char *s) {
    char tail;
    if (!s) return 0;
    if (sscanf(s, "%f,%f,%f %c", &out[0], &out[1], &out[2], &tail) == 3) return 1;
    if (sscanf(s, "%f %c", &out[0], &tail) != 1) return 0;
    out[1] = out[2] = out[0];
    return 1;
}

/* A grey model's input from the three normalised planes x (3, C, C): the
 * luma of ITU-R 601 (PIL's "L" conversion), which commutes with the resize
 * and with a normalisation that is the same for the three channels (a grey
 * model's mean/std is one number): plane 0 = .299 R + .587 G + .114 B. */
static ra_status to_grey(float *x, int crop) {
    const int64_t n = (int64_t)crop * crop;
    for (int64_t i = 0; i < n; i++) x[i] = 0.299f * x[i] + 0.587f * x[n + i] + 0.114f * x[2 * n + i];
    return RA_OK;
}

int cmd_classify(int argc, char **argv) {
    if (!take_model_options(&argc, argv)) return EX_USAGE;
    opt opts[] = {{"--top", 1, 0},    {"--json", 0, 0},    {"--resize", 1, 0},
                  {"--crop", 1, 0},   {"--threads", 1, 0}, {"--help", 0, 0},
                  {"-h", 0, 0},       {0, 0, 0}};
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
    if (!threads_option(opts)) return EX_USAGE;

    ra_model *m;
    ra_status st = open_model(&m, pos[0]);
    if (st) return lib_fail(st);
    const ra_arch arch = ra_model_arch(m);
    int code = EX_OK, in_chans = 3;
    float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
    json_t *labels = NULL;
    float *rgb = NULL, *x = NULL, *y = NULL;
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
    if (!crop) crop = ra_model_meta(m, "img_size") ? atoi(ra_model_meta(m, "img_size")) : 224;
    if (crop < 1 || crop > 8192) { code = fail(EX_DATAERR, "model img_size is unusable"); goto done; }
    double crop_pct = 0.875;   /* timm's and torchvision's default; the metadata's crop_pct */
    const char *cp = ra_model_meta(m, "crop_pct");
    if (cp && !(sscanf(cp, "%lf", &crop_pct) == 1 && crop_pct >= 0.05 && crop_pct <= 1.0)) {
        code = fail(EX_DATAERR, "model crop_pct '%s' is not in [0.05, 1]", safe_text(cp));
        goto done;
    }
    if (!resize) resize = in_chans == 1 ? crop : (int)(crop / crop_pct);   /* grey: MNIST-like */
    if (resize < crop) resize = crop;
    if ((ra_model_meta(m, "mean") && !parse_triple(mean, ra_model_meta(m, "mean"))) ||
        (ra_model_meta(m, "std") && !parse_triple(stdv, ra_model_meta(m, "std"))) ||
        !(stdv[0] > 0 && stdv[1] > 0 && stdv[2] > 0)) {
        code = fail(EX_DATAERR, "metadata mean/std must be \"r,g,b\" (or one number for a grey "
                    "model) with std > 0");
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
    if (!(x = malloc(sizeof *x * 3 * (size_t)crop * crop))) {
        code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    const int json = get(opts, "--json") != NULL;
    jw jo = {0};
    if (json) jw_array(&jo);
    for (int im = 1; im < npos && code == EX_OK; im++) {
        int w, h, yn;
        int64_t ys[4];
        if ((st = ra_image_load(&rgb, &w, &h, pos[im], (int64_t)64 << 20)) ||
            (st = ra_image_preprocess(x, rgb, w, h, resize, crop, mean, stdv)) ||
            (in_chans == 1 && (st = to_grey(x, crop))) ||
            (st = ra_model_predict(m, &y, &yn, ys, x, 4, (int64_t[]){1, in_chans, crop, crop}))) {
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
