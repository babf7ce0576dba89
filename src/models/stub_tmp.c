/* STUB: replaced by the torch and hf branches. */
#include "io/torch.h"
#include "models/config.h"
#include "models/hf.h"
#include <stdlib.h>
ra_status rai_torch_open(ra_st_file **out, const char *path, const char *key, char *found, size_t n) {
    (void)path, (void)key, (void)found, (void)n; *out = NULL;
    return rai_fail(RA_ERR_FORMAT, "PyTorch checkpoints: not yet");
}
int rai_torch_sniff(const char *path) { (void)path; return 0; }
ra_status rai_torch_describe(const char *path, char **text) { (void)path; *text = NULL; return RA_ERR_FORMAT; }
ra_status rai_config_read(const char *path, rai_config_item **items, int *n) { (void)path; *items = NULL; *n = 0; return RA_OK; }
void rai_config_free(rai_config_item *items, int n) { (void)items, (void)n; }
ra_status rai_hf_remap(ra_st_file **out, ra_st_file *src, const char **arch) { *out = src; *arch = NULL; return RA_OK; }
const char *rai_imagenet1k_labels_json(void) { return NULL; }
