/* torch.h - PyTorch checkpoints (STUB until the torch branch lands). */
#ifndef RA_IO_TORCH_H
#define RA_IO_TORCH_H

#include "io/tensorfile.h"

ra_status rai_torch_open(ra_st_file **out, const char *path, const char *key, char *found, size_t n);
int rai_torch_sniff(const char *path);
ra_status rai_torch_describe(const char *path, char **text);

#endif
