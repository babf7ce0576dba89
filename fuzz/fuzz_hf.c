/* fuzz_hf.c - libFuzzer harness: a safetensors file under transformers'
 * names through rai_hf_remap; every tensor of what it gives must read
 * (the joined qkv tensors from their three byte ranges). */
#include "models/hf.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ra_st_file *f = NULL, *g = NULL;
    const char *arch = NULL;
    if (ra_st_open_memory(&f, data, size) != RA_OK) return 0;
    if (rai_hf_remap(&g, f, &arch) != RA_OK) {   /* f is closed */
        if (g || arch) abort();
        return 0;
    }
    for (int i = 0; i < ra_st_count(g); i++) {
        const ra_st_tensor *t = ra_st_at(g, i);
        if (ra_st_find(g, t->name) != t) abort();
        if (t->numel > (1 << 20) || t->dtype == RA_DTYPE_BOOL) continue;
        const int is_float = t->dtype == RA_DTYPE_F32 || t->dtype == RA_DTYPE_F16 ||
                             t->dtype == RA_DTYPE_BF16 || t->dtype == RA_DTYPE_F64;
        void *v = malloc(8 * (size_t)(t->numel ? t->numel : 1));
        if (v && (is_float ? ra_st_read_f32(v, g, t) : ra_st_read_i64(v, g, t)) != RA_OK) abort();
        free(v);
    }
    ra_st_close(g);
    return 0;
}
