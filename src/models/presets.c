/* presets.c - the released sizes of every family, by their builders' names
 * (torchvision's swin_t .. vit_l_32, timm's vit_tiny / vit_small as
 * vit_ti_16 / vit_s_16): the hyperparameters a model is made from
 * (ra_model_create_preset, relattn train --arch) and the evaluation
 * transform of the builder's weights (torchvision 0.14's
 * models/swin_transformer.py and models/vision_transformer.py; timm's
 * pretrained_cfg: crop_pct 0.9, bicubic; torchvision >= 0.15's
 * models/video/swin_transformer.py for swin3d_*), which the loader of a
 * torchvision state dict records (rai_torchvision_transform). */
#include "models/model.h"

#include <stdio.h>
#include <string.h>

/* torchvision >= 0.15's models/video/swin_transformer.py: the Kinetics-400
 * weights' VideoClassification(crop_size=(224, 224), resize_size=(256,),
 * mean=(0.4850, 0.4560, 0.4060), std=(0.2290, 0.2240, 0.2250)) (ImageNet's
 * mean and std, not VideoClassification's Kinetics defaults), bilinear;
 * the accuracies estimated on clips of 32 frames at 15 fps. */
static const rai_video_preset kinetics = {"8,7,7", "2,4,4", 400, "0.485,0.456,0.406",
                                          "0.229,0.224,0.225", 32, 15};

/* swin, swinv2: depths and heads per stage, window; vit: depth, heads,
 * patch; swin3d: depths, heads, the rest in video. */
const rai_preset rai_presets[] = {
    {"swin_t", "swin", 1, 96, 0, "2,2,6,2", "3,6,12,24", 7, 4, 224, 232, "bicubic", NULL},
    {"swin_s", "swin", 1, 96, 0, "2,2,18,2", "3,6,12,24", 7, 4, 224, 246, "bicubic", NULL},
    {"swin_b", "swin", 1, 128, 0, "2,2,18,2", "4,8,16,32", 7, 4, 224, 238, "bicubic", NULL},
    {"swin_v2_t", "swinv2", 1, 96, 0, "2,2,6,2", "3,6,12,24", 8, 4, 256, 260, "bicubic", NULL},
    {"swin_v2_s", "swinv2", 1, 96, 0, "2,2,18,2", "3,6,12,24", 8, 4, 256, 260, "bicubic", NULL},
    {"swin_v2_b", "swinv2", 1, 128, 0, "2,2,18,2", "4,8,16,32", 8, 4, 256, 272, "bicubic", NULL},
    {"vit_ti_16", "vit", 0, 192, 12, NULL, "3", 0, 16, 224, 248, "bicubic", NULL},
    {"vit_s_16", "vit", 0, 384, 12, NULL, "6", 0, 16, 224, 248, "bicubic", NULL},
    {"vit_b_16", "vit", 1, 768, 12, NULL, "12", 0, 16, 224, 256, "bilinear", NULL},
    {"vit_b_32", "vit", 1, 768, 12, NULL, "12", 0, 32, 224, 256, "bilinear", NULL},
    {"vit_l_16", "vit", 1, 1024, 24, NULL, "16", 0, 16, 224, 242, "bilinear", NULL},
    {"vit_l_32", "vit", 1, 1024, 24, NULL, "16", 0, 32, 224, 256, "bilinear", NULL},
    {"vit_h_14", "vit", 1, 1280, 32, NULL, "16", 0, 14, 518, 518, "bicubic", NULL},
    {"swin3d_t", "swin3d", 1, 96, 0, "2,2,6,2", "3,6,12,24", 0, 0, 224, 256, "bilinear", &kinetics},
    {"swin3d_s", "swin3d", 1, 96, 0, "2,2,18,2", "3,6,12,24", 0, 0, 224, 256, "bilinear", &kinetics},
    {"swin3d_b", "swin3d", 1, 128, 0, "2,2,18,2", "4,8,16,32", 0, 0, 224, 256, "bilinear", &kinetics},
};
const int rai_npresets = (int)(sizeof rai_presets / sizeof rai_presets[0]);

const char *ra_model_preset_name(int i) {
    return i >= 0 && i < rai_npresets ? rai_presets[i].name : NULL;
}

/* A video network's preset (swin3d): side, the crop asked for. */
static ra_status create_video(ra_model **out, const rai_preset *p, int side,
                              const char *const *set, int nset, uint64_t seed) {
    char dim[16], classes[16], frames[16], fps[16], img[16], resize[32], crop[32];
    snprintf(dim, sizeof dim, "%d", p->dim);
    const rai_video_preset *v = p->video;
    snprintf(classes, sizeof classes, "%d", v->classes);
    snprintf(frames, sizeof frames, "%d", v->frames);
    snprintf(fps, sizeof fps, "%d", v->fps);
    snprintf(img, sizeof img, "%d", side);
    snprintf(resize, sizeof resize, "shorter %d", (int)((int64_t)side * p->resize / p->crop));
    snprintf(crop, sizeof crop, "%dx%d", side, side);
    const char *base[] = {
        "arch", p->arch, "patch_size", v->patch, "in_chans", "3", "num_classes", classes,
        "embed_dim", dim, "depths", p->depths, "num_heads", p->heads, "window_size", v->window,
        "mlp_ratio", "4.0", "patch_norm", "true", "img_size", img, "num_frames", frames,
        "transform.resize", resize, "transform.crop", crop, "transform.interpolation", p->interp,
        "mean", v->mean, "std", v->std, "transform.frame_rate", fps};
    enum { NBASE = sizeof base / sizeof *base / 2, MAXKV = 64 };
    if (nset > MAXKV - NBASE)
        return rai_fail(RA_ERR_ARG, "model preset: %d settings are too many", nset);
    const char *meta[2 * MAXKV];
    const int n = rai_meta_merge(meta, base, NBASE, set, nset, NULL);
    return ra_model_create(out, meta, n, seed);
}

ra_status ra_model_create_preset(ra_model **out, const char *name, const char *const *set,
                                 int nset, uint64_t seed) {
    if (!out || !name || nset < 0 || (nset && !set))
        return rai_fail(RA_ERR_ARG, "model preset: bad argument");
    *out = NULL;
    const rai_preset *p = NULL;
    for (int i = 0; i < rai_npresets && !p; i++)
        if (!strcmp(rai_presets[i].name, name)) p = &rai_presets[i];
    if (!p)
        return rai_fail(RA_ERR_ARG, "no preset \"%.40s\" (ra_model_preset_name lists them)", name);
    const int vit = !strcmp(p->arch, "vit");
    /* another (square) input size: the transform scaled with it */
    int side = p->crop, h = 0, w = 0, k = 0;
    for (int j = 0; j < nset; j++)
        if (set[2 * j] && set[2 * j + 1] && !strcmp(set[2 * j], "img_size") &&
            sscanf(set[2 * j + 1], "%d%n", &h, &k) == 1 && h > 0 && h <= RA_IMAGE_MAX_SIDE &&
            (!set[2 * j + 1][k] || (sscanf(set[2 * j + 1] + k, ",%d", &w) == 1 && w == h)))
            side = h;
    char dim[16], depth[16], window[16], patch[16], img[32], resize[32], crop[32];
    if (p->video) return create_video(out, p, side, set, nset, seed);
    snprintf(dim, sizeof dim, "%d", p->dim);
    snprintf(depth, sizeof depth, "%d", p->depth);
    snprintf(window, sizeof window, "%d", p->window);
    snprintf(patch, sizeof patch, "%d", p->patch);
    snprintf(img, sizeof img, "%d", p->crop);
    snprintf(resize, sizeof resize, "shorter %d", (int)((int64_t)side * p->resize / p->crop));
    snprintf(crop, sizeof crop, "%dx%d", side, side);
    const char *base[] = {
        "arch", p->arch, "img_size", img, "patch_size", patch, "in_chans", "3",
        "num_classes", "1000", "embed_dim", dim, "num_heads", p->heads, "mlp_ratio", "4.0",
        "qkv_bias", "true", "transform.resize", resize, "transform.crop", crop,
        "transform.interpolation", p->interp, "depth", depth,   /* a ViT's */
        "depths", p->depths, "window_size", window, "patch_norm", "true", "ape", "false"};
    /* the first 13 pairs make a ViT; a Swin takes all of them but depth */
    enum { NVIT = 13, NBASE = sizeof base / sizeof *base / 2, MAXKV = 64 };
    if (nset > MAXKV - NBASE)
        return rai_fail(RA_ERR_ARG, "model preset: %d settings are too many", nset);
    const char *meta[2 * MAXKV];
    const int n = rai_meta_merge(meta, base, vit ? NVIT : NBASE, set, nset, vit ? NULL : "depth");
    return ra_model_create(out, meta, n, seed);
}
