/* infer.h - hyperparameters from the weights (src/models/infer.c). */
#ifndef RA_MODELS_INFER_H
#define RA_MODELS_INFER_H

#include "io/tensorfile.h"
#include "models/config.h"

/* Complete f's metadata (f built, finished) for a state_dict without
 * relattn metadata: arch (given, else config.json's, else from the
 * names), then each hyperparameter from the weights, config.json (cfg),
 * the family's conventions, keeping every key already set. RA_ERR_FORMAT
 * naming the --set to pass when something stays unknown. */
ra_status rai_infer_meta(ra_st_file *f, const char *arch, const rai_config_item *cfg, int ncfg);

/* The evaluation transform of torchvision's builder that f's names and
 * inferred widths are (swin_t ... vit_h_14), as transform.* metadata with
 * its source; nothing for other files, or when f has transform.resize
 * (src/models/transform.c). */
ra_status rai_torchvision_transform(ra_st_file *f);

#endif
