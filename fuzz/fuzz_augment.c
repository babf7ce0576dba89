/* fuzz_augment.c - libFuzzer harness: RandAugment's policy string (an
 * argument of relattn train, untrusted) through ra_randaugment_parse, and
 * what it accepts applied to a small image drawn from the input, with
 * ra_augment_op on fuzzed operations and arguments. The input: a policy
 * string up to the first NUL, then bytes for the image's size, the seed,
 * one op, its argument and filter. Invariants: a refused policy leaves a
 * reason; an accepted one applies (or refuses with RA_ERR_ARG) without a
 * memory error, in place, the image's size unchanged. */
#include "relattn.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t n = nul ? (size_t)(nul - data) : size;
    if (n > 4096) return 0;
    char *spec = malloc(n + 1);
    if (!spec) return 0;
    memcpy(spec, data, n), spec[n] = 0;
    const uint8_t *rest = nul ? nul + 1 : data + size;
    const size_t nr = (size_t)(data + size - rest);
    uint8_t b[16] = {0};
    memcpy(b, rest, nr < sizeof b ? nr : sizeof b);
    const int w = 1 + b[0] % 40, h = 1 + b[1] % 40, c = b[2] & 1 ? 3 : 1;
    uint8_t *img = malloc((size_t)w * h * c), *scratch = malloc((size_t)w * h * c);
    uint8_t *out = malloc((size_t)w * h * c);
    if (!img || !scratch || !out) goto done;
    for (int i = 0; i < w * h * c; i++) img[i] = (uint8_t)(i * 31 + b[3]);
    ra_randaugment r;
    if (ra_randaugment_parse(&r, spec) != RA_OK) {
        if (!ra_last_error()[0]) abort();   /* a refusal says why */
    } else {
        ra_rng rng;
        ra_rng_seed(&rng, b[4] | (uint64_t)b[5] << 8);
        const ra_status st = ra_randaugment_apply(img, scratch, w, h, c, &r, &rng);
        if (st != RA_OK && st != RA_ERR_ARG) abort();
    }
    double arg;   /* any double, NaN and infinities included */
    memcpy(&arg, b + 6, sizeof arg);
    const uint8_t fill[3] = {b[14], b[15], 7};
    const ra_status st = ra_augment_op(out, img, w, h, c, (ra_aug_op)(b[3] % 16), arg,
                                       (ra_interp)(b[2] >> 1) % 6, fill);
    if (st != RA_OK && st != RA_ERR_ARG) abort();
done:
    free(spec), free(img), free(scratch), free(out);
    return 0;
}
