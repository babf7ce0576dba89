/* hf.h - transformers' names (STUB until the hf branch lands). */
#ifndef RA_MODELS_HF_H
#define RA_MODELS_HF_H

#include "io/tensorfile.h"

ra_status rai_hf_remap(ra_st_file **out, ra_st_file *src, const char **arch);
const char *rai_imagenet1k_labels_json(void);

#endif
