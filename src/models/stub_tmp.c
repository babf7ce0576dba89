/* STUB: replaced by the torch and hf branches. */
#include "io/torch.h"
#include <stdlib.h>
ra_status rai_torch_open(ra_st_file **out, const char *path, const char *key, char *found, size_t n) {
    (void)path, (void)key, (void)found, (void)n; *out = NULL;
    return rai_fail(RA_ERR_FORMAT, "PyTorch checkpoints: not yet");
}
int rai_torch_sniff(const char *path) { (void)path; return 0; }
ra_status rai_torch_describe(const char *path, char **text) { (void)path; *text = NULL; return RA_ERR_FORMAT; }
