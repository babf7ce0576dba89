/* presets.c - the released sizes of every family, by their builders' names
 * (torchvision's swin_t .. vit_l_32, timm's vit_tiny / vit_small as
 * vit_ti_16 / vit_s_16): the hyperparameters a model is made from
 * (ra_model_create_preset, relattn train --arch) and the evaluation
 * transform of the builder's weights (torchvision 0.14's
 * models/swin_transformer.py and models/vision_transformer.py; timm's
 * pretrained_cfg: crop_pct 0.9, bicubic), which the loader of a
 * torchvision state dict records (rai_torchvision_transform). */
#include "models/model.h"

#include <stdio.h>
#include <string.h>

/* swin, swinv2: depths and heads per stage, window; vit: depth, heads,
 * patch. */
const rai_preset rai_presets[] = {
    {"swin_t", "swin", 1, 96, 0, "2,2,6,2", "3,6,12,24", 7, 4, 224, 232, "bicubic"},
    {"swin_s", "swin", 1, 96, 0, "2,2,18,2", "3,6,12,24", 7, 4, 224, 246, "bicubic"},
    {"swin_b", "swin", 1, 128, 0, "2,2,18,2", "4,8,16,32", 7, 4, 224, 238, "bicubic"},
    {"swin_v2_t", "swinv2", 1, 96, 0, "2,2,6,2", "3,6,12,24", 8, 4, 256, 260, "bicubic"},
    {"swin_v2_s", "swinv2", 1, 96, 0, "2,2,18,2", "3,6,12,24", 8, 4, 256, 260, "bicubic"},
    {"swin_v2_b", "swinv2", 1, 128, 0, "2,2,18,2", "4,8,16,32", 8, 4, 256, 272, "bicubic"},
    {"vit_ti_16", "vit", 0, 192, 12, NULL, "3", 0, 16, 224, 248, "bicubic"},
    {"vit_s_16", "vit", 0, 384, 12, NULL, "6", 0, 16, 224, 248, "bicubic"},
    {"vit_b_16", "vit", 1, 768, 12, NULL, "12", 0, 16, 224, 256, "bilinear"},
    {"vit_b_32", "vit", 1, 768, 12, NULL, "12", 0, 32, 224, 256, "bilinear"},
    {"vit_l_16", "vit", 1, 1024, 24, NULL, "16", 0, 16, 224, 242, "bilinear"},
    {"vit_l_32", "vit", 1, 1024, 24, NULL, "16", 0, 32, 224, 256, "bilinear"},
    {"vit_h_14", "vit", 1, 1280, 32, NULL, "16", 0, 14, 518, 518, "bicubic"},
};
const int rai_npresets = (int)(sizeof rai_presets / sizeof rai_presets[0]);

const char *ra_model_preset_name(int i) {
    return i >= 0 && i < rai_npresets ? rai_presets[i].name : NULL;
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
