/* fuzz_idx.c - libFuzzer harness: the IDX dataset reader (MNIST and
 * Fashion-MNIST files, raw or gzip). An input holds both files: a 2-byte
 * big-endian length, the images file, then the labels file; each goes
 * through a temporary file, as ra_dataset_load reads paths. */
#include "relattn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char images[64], labels[64];

static int spit(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    const int ok = fwrite(b, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    if (!images[0]) {
        snprintf(images, sizeof images, "/tmp/relattn_fuzz_idx.%d.images", (int)getpid());
        snprintf(labels, sizeof labels, "/tmp/relattn_fuzz_idx.%d.labels", (int)getpid());
    }
    size_t n = (size_t)data[0] << 8 | data[1];
    if (n > size - 2) n = size - 2;
    if (!spit(images, data + 2, n) || !spit(labels, data + 2 + n, size - 2 - n)) return 0;
    ra_dataset d;
    if (ra_dataset_load(&d, images, labels) == RA_OK) {
        if (d.n < 1 || d.h < 1 || d.w < 1 || d.classes < 1 || d.classes > 256) abort();
        ra_dataset_free(&d);
    }
    return 0;
}
