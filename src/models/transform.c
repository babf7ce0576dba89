/* transform.c - the evaluation transform of a model's family, from its
 * metadata (docs/reference.md, "Image transforms").
 *
 * Where each family records it, and what the source readers store:
 *   timm          config.json pretrained_cfg: input_size (img_size),
 *                 crop_pct, interpolation, crop_mode, mean, std (config.c);
 *                 the resize is computed here as timm's
 *                 transforms_imagenet_eval does: floor(img_size / crop_pct).
 *   transformers  preprocessor_config.json: do_resize + size, resample,
 *                 do_center_crop + crop_size, do_rescale + rescale_factor,
 *                 do_normalize, image_mean, image_std (config.c), as
 *                 transform.* keys.
 *   torchvision   nothing in the file: the weights' own transform of the
 *                 builder the names and widths are (rai_torchvision_transform,
 *                 from torchvision 0.14's models/swin_transformer.py and
 *                 models/vision_transformer.py), as transform.* keys.
 * Anything else: timm's and torchvision's defaults (crop_pct 0.875,
 * bilinear, ImageNet's mean and std); a grey (one channel) model takes the
 * luma (ra_transform.grey), and without a
 * crop_pct is not resized beyond its img_size. */
#include "models/infer.h"
#include "models/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "N", "HxW" or "H,W" into h, w (1..RA_IMAGE_MAX_SIDE); 0 if malformed. */
static int parse_size(const char *s, int *h, int *w) {
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s) return 0;
    if (*end == 'x' || *end == ',') {
        const char *t = end + 1;
        b = strtol(t, &end, 10);
        if (end == t) return 0;
    }
    if (*end || a < 1 || b < 1 || a > RA_IMAGE_MAX_SIDE || b > RA_IMAGE_MAX_SIDE) return 0;
    *h = (int)a, *w = (int)b;
    return 1;
}

/* "r,g,b" or one number (a grey model's) into v[3]. */
static int parse_triple(float v[3], const char *s) {
    char *end;
    for (int i = 0; i < 3; i++) {
        v[i] = strtof(s, &end);
        if (end == s || !isfinite(v[i])) return 0;
        if (i == 0 && !*end) return v[1] = v[2] = v[0], 1;
        if (i < 2 && *end != ',') return 0;
        s = end + (i < 2);
    }
    return !*end;
}

static ra_status bad(const char *key, const char *v, const char *want) {
    char esc[160];
    ra_escape_text(esc, sizeof esc, v);
    return rai_fail(RA_ERR_FORMAT, "metadata %s '%s': %s", key, esc, want);
}

ra_status ra_model_transform(struct ra_transform *t, const char **source, const ra_model *m) {
    if (!t || !m) return rai_fail(RA_ERR_ARG, "ra_model_transform: NULL argument");
    static const float in_mean[3] = {0.485f, 0.456f, 0.406f}, in_std[3] = {0.229f, 0.224f, 0.225f};
    *t = (ra_transform){.interp = RA_INTERP_BILINEAR, .crop = RA_CROP_CENTER_ROUND, .normalize = 1};
    memcpy(t->mean, in_mean, sizeof in_mean), memcpy(t->std, in_std, sizeof in_std);
    const char *v, *src = NULL;
    int h = 224, w = 224;
    const char *crop_mode = NULL;
    if ((v = ra_model_meta(m, "img_size")) && !parse_size(v, &h, &w))
        return bad("img_size", v, "a size, N or H,W");
    t->crop_h = h, t->crop_w = w;
    t->grey = (v = ra_model_meta(m, "in_chans")) && !strcmp(v, "1");
    if ((v = ra_model_meta(m, "transform.interpolation"))) {
        const int i = ra_interp_parse(v);
        if (i < 0) return bad("transform.interpolation", v, "nearest, bilinear, bicubic, lanczos, "
                              "box or hamming");
        t->interp = (ra_interp)i;
    }
    if ((v = ra_model_meta(m, "transform.crop")) && strcmp(v, "none")) {
        if (!parse_size(v, &t->crop_h, &t->crop_w)) return bad("transform.crop", v, "HxW or none");
    } else if (v) {
        t->crop = RA_CROP_NONE;
    }
    if ((v = ra_model_meta(m, "transform.crop_rounding"))) {
        if (!strcmp(v, "floor")) t->crop = t->crop ? RA_CROP_CENTER_FLOOR : RA_CROP_NONE;
        else if (strcmp(v, "round")) return bad("transform.crop_rounding", v, "round or floor");
    }
    if ((v = ra_model_meta(m, "transform.resize"))) {   /* transformers', torchvision's */
        src = ra_model_meta(m, RA_META_SOURCE "transform.resize");
        if (!src) src = "metadata transform.resize";
        if (!strcmp(v, "none")) {
            t->resize = RA_RESIZE_NONE;
        } else if (!strncmp(v, "shorter ", 8)) {
            int s2;
            t->resize = RA_RESIZE_SHORTER;
            if (!parse_size(v + 8, &t->resize_h, &s2) || s2 != t->resize_h)
                return bad("transform.resize", v, "shorter N, HxW or none");
        } else if (!strncmp(v, "fit ", 4) || !strncmp(v, "cover ", 6)) {
            t->resize = v[0] == 'f' ? RA_RESIZE_FIT : RA_RESIZE_COVER;
            if (!parse_size(v + (v[0] == 'f' ? 4 : 6), &t->resize_h, &t->resize_w))
                return bad("transform.resize", v, "shorter N, fit HxW, cover HxW, HxW or none");
        } else if (parse_size(v, &t->resize_h, &t->resize_w)) {
            t->resize = RA_RESIZE_EXACT;
        } else {
            return bad("transform.resize", v, "shorter N, fit HxW, cover HxW, HxW or none");
        }
    } else {   /* timm's: img_size / crop_pct, by crop_mode */
        double pct = 0.875;
        const char *cp = ra_model_meta(m, "crop_pct"), *mode = ra_model_meta(m, "transform.crop_mode");
        char *end;
        if (cp && !((pct = strtod(cp, &end)) >= 0.05 && pct <= 1.0 && !*end))
            return bad("crop_pct", cp, "a number in [0.05, 1]");
        src = cp ? ra_model_meta(m, RA_META_SOURCE "crop_pct") : NULL;
        if (!cp && t->grey) pct = 1.0;   /* grey, MNIST-like: no margin */
        const int sh = (int)floor(t->crop_h / pct), sw = (int)floor(t->crop_w / pct);
        t->resize = RA_RESIZE_EXACT, t->resize_h = sh, t->resize_w = sw;
        crop_mode = mode ? mode : "center";   /* once the mean is read */
        if (!src && mode) src = ra_model_meta(m, RA_META_SOURCE "transform.crop_mode");
    }
    if ((v = ra_model_meta(m, "transform.rescale"))) {
        char *end;
        if (!((t->rescale = strtod(v, &end)) > 0) || *end || !isfinite(t->rescale))
            return bad("transform.rescale", v, "a number > 0");
    }
    if ((v = ra_model_meta(m, "transform.normalize"))) {
        if (strcmp(v, "true") && strcmp(v, "false")) return bad("transform.normalize", v, "true or false");
        t->normalize = !strcmp(v, "true");
    }
    if ((v = ra_model_meta(m, "mean")) && !parse_triple(t->mean, v))
        return bad("mean", v, "r,g,b or one number");
    if ((v = ra_model_meta(m, "std")) && !parse_triple(t->std, v))
        return bad("std", v, "r,g,b or one number, > 0");
    if (crop_mode && ra_transform_crop_mode(t, crop_mode))
        return bad("transform.crop_mode", crop_mode, "center, squash or border");
    if (source)
        *source = src ? src : ra_model_meta(m, "crop_pct") ? "metadata crop_pct"
                        : "default: timm's and torchvision's (crop_pct 0.875, bilinear)";
    ra_status st = ra_transform_check(t);
    return st ? rai_fail(RA_ERR_FORMAT, "the model's image transform: %s", ra_last_error()) : RA_OK;
}

/* ---- torchvision's builders ---------------------------------------------------- */

static int meta_is(const ra_st_file *f, const char *key, const char *want) {
    const char *v = ra_st_meta(f, key);
    return v && !strcmp(v, want);
}

static int meta_int(const ra_st_file *f, const char *key) {
    const char *v = ra_st_meta(f, key);
    return v ? atoi(v) : -1;
}

/* A torchvision swin3d_* state dict (f's inferred metadata as builder b's):
 * its weights' transform, mean and std, and their evaluation clip. */
static ra_status video_transform(ra_st_file *f, const rai_preset *b) {
    char from[96], resize[32], crop[32], frames[16], fps[16];
    snprintf(from, sizeof from, "convention: torchvision's %s weights' transform", b->name);
    snprintf(resize, sizeof resize, "shorter %d", b->resize);
    snprintf(crop, sizeof crop, "%dx%d", b->crop, b->crop);
    snprintf(frames, sizeof frames, "%d", b->video->frames);
    snprintf(fps, sizeof fps, "%d", b->video->fps);
    const char *kv[] = {"transform.resize", resize, "transform.crop", crop,
                        "transform.interpolation", b->interp, "mean", b->video->mean, "std", b->video->std,
                        "num_frames", frames, "transform.frame_rate", fps};
    ra_status st = RA_OK;
    for (size_t k = 0; k < sizeof kv / sizeof *kv && !st; k += 2) {
        char src[64];
        if (ra_st_meta(f, kv[k])) continue;
        snprintf(src, sizeof src, RA_META_SOURCE "%s", kv[k]);
        st = rai_st_set_meta(f, kv[k], kv[k + 1]);
        if (!st) st = rai_st_set_meta(f, src, from);
    }
    return st;
}

ra_status rai_torchvision_transform(ra_st_file *f) {
    const int swin = ra_st_find(f, "features.0.0.weight") != NULL,
              vit = ra_st_find(f, "conv_proj.weight") != NULL,
              video = ra_st_find(f, "features.0.0.norm1.weight") != NULL &&
                      meta_is(f, "arch", "swin3d");
    if ((!swin && !vit && !video) || ra_st_meta(f, "transform.resize")) return RA_OK;
    for (int i = 0; video && i < rai_npresets; i++) {
        const rai_preset *b = &rai_presets[i];
        if (b->video && meta_is(f, "arch", b->arch) && meta_int(f, "embed_dim") == b->dim &&
            meta_is(f, "depths", b->depths) && meta_is(f, "num_heads", b->heads) &&
            meta_is(f, "patch_size", b->video->patch) &&
            meta_is(f, "window_size", b->video->window))
            return video_transform(f, b);
    }
    if (video) return RA_OK;
    /* each builder's weights (DEFAULT = IMAGENET1K_V1, except vit_h_14's,
     * whose only weights are SWAG's), by arch and widths (presets.c) */
    for (int i = 0; i < rai_npresets; i++) {
        const rai_preset *b = &rai_presets[i];
        if (!b->tv || b->video || !meta_is(f, "arch", b->arch) || meta_int(f, "embed_dim") != b->dim ||
            (b->depths && !meta_is(f, "depths", b->depths)) ||
            (b->depth && meta_int(f, "depth") != b->depth) ||
            (b->patch && meta_int(f, "patch_size") != b->patch) ||
            meta_int(f, "img_size") != b->crop)
            continue;
        char from[96], v[32];
        snprintf(from, sizeof from, "convention: torchvision's %s weights' transform", b->name);
        static const char *const keys[] = {"transform.resize", "transform.interpolation",
                                           "transform.crop"};
        for (int k = 0; k < 3; k++) {
            char src[64];
            if (k == 0) snprintf(v, sizeof v, "shorter %d", b->resize);
            else if (k == 1) snprintf(v, sizeof v, "%s", b->interp);
            else snprintf(v, sizeof v, "%dx%d", b->crop, b->crop);
            snprintf(src, sizeof src, RA_META_SOURCE "%s", keys[k]);
            ra_status st = rai_st_set_meta(f, keys[k], v);
            if (!st) st = rai_st_set_meta(f, src, from);
            if (st) return st;
        }
        return RA_OK;
    }
    return RA_OK;
}

/* ---- video models ------------------------------------------------------------------ */

int ra_model_is_video(const ra_model *m) {
    const char *a = m ? ra_arch_name(ra_model_arch(m)) : NULL;
    return a && !strcmp(a, "swin3d");
}

/* A whole number in lo..hi from metadata key (absent: *v unchanged). */
static ra_status meta_range(int *v, const ra_model *m, const char *key, int lo, int hi) {
    const char *s = ra_model_meta(m, key);
    if (!s) return RA_OK;
    char *end;
    const long x = strtol(s, &end, 10);
    if (end == s || *end || x < lo || x > hi) {
        char want[64];
        snprintf(want, sizeof want, "a whole number in %d..%d", lo, hi);
        return bad(key, s, want);
    }
    *v = (int)x;
    return RA_OK;
}

ra_status ra_model_video_transform(ra_clip_spec *s, ra_video_transform *t, const char **source,
                                   const ra_model *m) {
    if (!s || !t || !m) return rai_fail(RA_ERR_ARG, "ra_model_video_transform: NULL argument");
    /* the sampler: video.sampler, else torchvision's where the file has its
     * weights' frame rate (transform.frame_rate, as torchvision's swin3d_*
     * record it), else the official test's */
    const char *v = ra_model_meta(m, "video.sampler");
    const int tv = v ? !strcmp(v, "torchvision") : ra_model_meta(m, "transform.frame_rate") != NULL;
    if (v && !tv && strcmp(v, "mmaction")) return bad("video.sampler", v, "mmaction or torchvision");
    static const float in_mean[3] = {0.485f, 0.456f, 0.406f}, in_std[3] = {0.229f, 0.224f, 0.225f},
                       mm_mean[3] = {123.675f, 116.28f, 103.53f}, mm_std[3] = {58.395f, 57.12f, 57.375f};
    /* the recipe's defaults */
    *s = (ra_clip_spec){.sampler = tv ? RA_CLIPS_TORCHVISION : RA_CLIPS_MMACTION,
                        .clips = tv ? 12 : 4, .clip_len = 32, .frame_interval = tv ? 1 : 2,
                        .frame_rate = tv ? 15 : 0};
    *t = (ra_video_transform){.size_round = !tv, .crops = tv ? 1 : 3};
    ra_transform *f = &t->frame;
    f->resize = RA_RESIZE_SHORTER, f->resize_h = f->resize_w = tv ? 256 : 224;
    f->interp = RA_INTERP_BILINEAR;
    f->crop = tv ? RA_CROP_CENTER_ROUND : RA_CROP_CENTER_FLOOR, f->crop_h = f->crop_w = 224;
    f->normalize = 1, f->rescale = tv ? 0 : 1;
    memcpy(f->mean, tv ? in_mean : mm_mean, sizeof f->mean);
    memcpy(f->std, tv ? in_std : mm_std, sizeof f->std);
    /* the file's */
    ra_status st;
    if ((st = meta_range(&s->clips, m, "video.clips", 1, 1024)) ||
        (st = meta_range(&s->clip_len, m, "num_frames", 1, 4096)) ||   /* the weights' clip */
        (st = meta_range(&s->clip_len, m, "video.clip_len", 1, 4096)) ||
        (st = meta_range(&s->frame_interval, m, "video.frame_interval", 1, 4096)) ||
        (st = meta_range(&t->crops, m, "video.crops", 1, 3)))
        return st;
    if (t->crops == 2) return bad("video.crops", "2", "1 or 3");
    if ((v = ra_model_meta(m, "transform.frame_rate"))) {
        char *end;
        if (!((s->frame_rate = strtod(v, &end)) >= 0) || *end || !isfinite(s->frame_rate) ||
            s->frame_rate > 1000)
            return bad("transform.frame_rate", v, "a rate in 0..1000 (0: the video's own)");
    }
    if ((v = ra_model_meta(m, "transform.resize"))) {
        int h, w;
        if (strncmp(v, "shorter ", 8) || !parse_size(v + 8, &h, &w) || h != w)
            return bad("transform.resize", v, "shorter N (a video's frames)");
        f->resize_h = f->resize_w = h;
    }
    if ((v = ra_model_meta(m, "transform.crop")) && !parse_size(v, &f->crop_h, &f->crop_w))
        return bad("transform.crop", v, "HxW");
    if (ra_model_meta(m, "mean") || ra_model_meta(m, "std")) {   /* on x / 255 */
        f->rescale = 0;
        memcpy(f->mean, in_mean, sizeof f->mean), memcpy(f->std, in_std, sizeof f->std);
    }
    if ((v = ra_model_meta(m, "mean")) && !parse_triple(f->mean, v))
        return bad("mean", v, "r,g,b or one number");
    if ((v = ra_model_meta(m, "std")) && !parse_triple(f->std, v))
        return bad("std", v, "r,g,b or one number, > 0");
    if (source)
        *source = tv ? "torchvision's Kinetics evaluation (VideoClips + UniformClipSampler)"
                     : "the official Video Swin test (SampleFrames, test mode)";
    if ((st = ra_transform_check(f)) || (t->crops == 3 && f->crop_h != f->crop_w))
        return rai_fail(RA_ERR_FORMAT, "the model's video transform: %s",
                        st ? ra_last_error() : "three crops must be square");
    return RA_OK;
}
