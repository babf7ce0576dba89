/* fuzz_torch.c - libFuzzer harness: PyTorch checkpoints (src/io/torch.c)
 * from any bytes: the zip container (minizip over memory), the records,
 * the pickle, the state dict's choice and every tensor checked against
 * its storage; then each accepted tensor read through the tensor file's
 * conversions, and the description of the checkpoint. */
#include "io/torch.h"

#include "relattn.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void read_all(const ra_st_file *f) {
    for (int i = 0; i < ra_st_count(f); i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        if (ra_st_find(f, t->name) != t) abort();
        if (t->numel > (1 << 20)) continue;   /* the conversions, on small tensors */
        const int fl = t->dtype == RA_DTYPE_F32 || t->dtype == RA_DTYPE_F16 ||
                       t->dtype == RA_DTYPE_BF16 || t->dtype == RA_DTYPE_F64;
        void *v = malloc(8 * (size_t)(t->numel ? t->numel : 1));
        if (v && (fl ? ra_st_read_f32(v, f, t) : ra_st_read_i64(v, f, t)) != RA_OK) abort();
        free(v);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ra_st_file *f = NULL;
    char found[256];
    if (rai_torch_open_memory(&f, data, size, NULL, found, sizeof found) == RA_OK) {
        read_all(f);
        ra_st_close(f);
        /* the same state dict again, by the path found */
        if (rai_torch_open_memory(&f, data, size, found, NULL, 0) != RA_OK) abort();
        ra_st_close(f);
    }
    char *text = NULL;
    if (rai_torch_describe_memory(data, size, &text) == RA_OK && (!text || !strchr(text, '\n')))
        abort();
    free(text);
    return 0;
}
