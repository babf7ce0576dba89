/* hf.h - Hugging Face transformers' tensor names for Swin, SwinV2 and ViT,
 * mapped to the names relattn's loader reads (src/models/hf.c; the rules in
 * docs/reference.md, section 2, "transformers"). */
#ifndef RA_MODELS_HF_H
#define RA_MODELS_HF_H

#include "io/tensorfile.h"

/* If src's tensor names are transformers' (SwinForImageClassification /
 * SwinModel, Swinv2ForImageClassification / Swinv2Model,
 * ViTForImageClassification / ViTModel: with or without the "swin." /
 * "swinv2." / "vit." prefix), *out is a file derived from src
 * (rai_st_derive: src is kept and closed with it) whose tensors carry the
 * names relattn's loader reads: the official Swin / SwinV2 names, timm's
 * ViT names. query, key and value become one qkv tensor (their byte ranges
 * in the order q, k, v: nothing is copied); *arch is "swin", "swinv2" or
 * "vit"; the metadata is src's. A ViTModel's pooler.dense is dropped.
 *
 * Otherwise *out = src and *arch = NULL.
 *
 * A transformers file that cannot be mapped (a tensor without a rule, a
 * missing query, key or value, shapes that disagree, a masked-image-
 * modeling head, another transformers model) is RA_ERR_FORMAT with one
 * line naming the tensor. src always passes to the call: on failure it is
 * closed and *out is NULL. */
ra_status rai_hf_remap(ra_st_file **out, ra_st_file *src, const char **arch);

#endif
