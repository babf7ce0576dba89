/* fuzz_image.c - libFuzzer harness: image decoding (PNG and JPEG, and the
 * refusal of everything else) with the pixel limit classify uses, then
 * the ImageNet transform of what decoded. ra_image_load reads a path: each
 * input goes through one temporary file. */
#include "relattn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!path[0]) snprintf(path, sizeof path, "/tmp/relattn_fuzz_image.%d", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    float *rgb = NULL;
    int w, h;
    /* a smaller limit than classify's 64 MP keeps each run fast */
    if (ra_image_load(&rgb, &w, &h, path, 1 << 20) == RA_OK) {
        static const float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.25f, 0.25f, 0.25f};
        float out[3 * 16 * 16];
        if (ra_image_preprocess(out, rgb, w, h, 18, 16, mean, std) != RA_OK) abort();
        free(rgb);
    }
    return 0;
}
