/* config.h - a model folder's config.json (transformers' or timm's) read
 * as relattn metadata (src/models/config.c; the rules in docs/reference.md,
 * section 2, "config.json"), and ImageNet-1k's class names. */
#ifndef RA_MODELS_CONFIG_H
#define RA_MODELS_CONFIG_H

#include "base/internal.h"

/* One metadata suggestion: key, its value (a string as the model file's
 * __metadata__ holds it: "224", "2,2,6,2", "true", a JSON array of class
 * names for "labels") and where it came from ("config.json image_size"). */
typedef struct rai_config_item {
    char key[48];
    char *value;
    char from[48];
} rai_config_item;

/* The largest config.json read (ImageNet-22k's 21841 labels, twice, fit). */
#define RAI_CONFIG_MAX_BYTES ((size_t)16 << 20)

/* Read the config.json at path (a regular file of at most
 * RAI_CONFIG_MAX_BYTES) into *items (*n of them, only keys the arch reads:
 * "arch" first). The file is untrusted: every value it gives is type- and
 * range-checked; RA_ERR_FORMAT with one line naming the key otherwise, or
 * for a model_type / architecture relattn does not read; RA_ERR_IO if it
 * cannot be read. On failure *items = NULL, *n = 0. Free with
 * rai_config_free. */
ra_status rai_config_read(const char *path, rai_config_item **items, int *n);

/* The same from len bytes of text in memory (NUL bytes refused). */
ra_status rai_config_parse(const char *text, size_t len, rai_config_item **items, int *n);

void rai_config_free(rai_config_item *items, int n);

/* ImageNet-1k's 1000 class names in class order, as a JSON array (the
 * "labels" metadata), from data/imagenet1k_classes.txt (torchvision's
 * _IMAGENET_CATEGORIES), built in by CMake. */
const char *rai_imagenet1k_labels_json(void);
/* Kinetics-400's 400 names, the same way (data/kinetics400_classes.txt,
 * torchvision's _KINETICS400_CATEGORIES): a video model's 400-class head. */
const char *rai_kinetics400_labels_json(void);

#endif
