/* fuzz_safetensors.c - libFuzzer harness: the safetensors reader on any
 * bytes (header, offsets, dtypes, metadata), then every accessor and the
 * float / integer conversions of what it accepted. */
#include "relattn.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ra_st_file *f = NULL;
    if (ra_st_open_memory(&f, data, size) != RA_OK) return 0;
    for (int i = 0; i < ra_st_meta_count(f); i++) {
        const char *k = ra_st_meta_key(f, i);
        if (!k || !ra_st_meta(f, k)) abort();
    }
    for (int i = 0; i < ra_st_count(f); i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        if (ra_st_find(f, t->name) != t) abort();
        if (t->numel > (1 << 20)) continue;   /* the conversions, on small tensors */
        if (t->dtype == RA_DTYPE_F32 || t->dtype == RA_DTYPE_F16 || t->dtype == RA_DTYPE_BF16 ||
            t->dtype == RA_DTYPE_F64) {
            float *v = malloc(sizeof *v * (size_t)(t->numel ? t->numel : 1));
            if (v && ra_st_to_f32(v, t) != RA_OK) abort();
            free(v);
        } else if (t->dtype != RA_DTYPE_BOOL) {
            int64_t *v = malloc(sizeof *v * (size_t)(t->numel ? t->numel : 1));
            if (v && ra_st_to_i64(v, t) != RA_OK) abort();
            free(v);
        }
    }
    ra_st_close(f);
    return 0;
}
