/* config.h - a model folder's config.json as metadata (STUB until the hf branch lands). */
#ifndef RA_MODELS_CONFIG_H
#define RA_MODELS_CONFIG_H

#include "base/internal.h"

typedef struct rai_config_item { char key[48]; char *value; char from[48]; } rai_config_item;
ra_status rai_config_read(const char *path, rai_config_item **items, int *n);
void rai_config_free(rai_config_item *items, int n);

#endif
