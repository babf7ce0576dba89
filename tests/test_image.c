/* test_image.c - image decoding and the ImageNet evaluation transform
 * against torchvision's (tools/make_image_fixtures.py), the RandAugment
 * operations' argument checks, and the refusals. */
#include "check.h"
#include "relattn.h"

#include <spng.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* The bytes of a file, for the malformed variants below. */
static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n ? *n : 1);
    if (b && fread(b, 1, *n, f) != *n) free(b), b = NULL;
    fclose(f);
    return b;
}

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) fwrite(b, 1, n, f), fclose(f);
}

/* Files stb_image crashed or hung on, formats no longer decoded, truncated
 * and lying files: refused (RA_ERR_FORMAT) at once, never a crash. */
static void malformed(const char *dir) {
    char tmp[64], path[1024];
    snprintf(tmp, sizeof tmp, "/tmp/relattn_image_%d", (int)getpid());
    float *rgb = NULL;
    int w, h;
    /* a 16-bit PGM (stb 2.27: a segfault) and a truncated Radiance HDR (an
     * endless loop) are not PNG or JPEG */
    const char pgm[] = "P5\n4 4\n65535\n\x01\x02\x03";
    spit(tmp, pgm, sizeof pgm - 1);
    CHECK(ra_image_load(&rgb, &w, &h, tmp, 1 << 24) == RA_ERR_FORMAT &&
          strstr(ra_last_error(), "not a PNG or JPEG"), "16-bit PGM: %s", ra_last_error());
    const char hdr[] = "#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 8 +X 8\n\x02\x02\x00";
    spit(tmp, hdr, sizeof hdr - 1);
    CHECK(ra_image_load(&rgb, &w, &h, tmp, 1 << 24) == RA_ERR_FORMAT, "truncated HDR");
    const char bmp[] = "BM\x46\0\0\0\0\0\0\0\x36\0\0\0";
    spit(tmp, bmp, sizeof bmp - 1);
    CHECK(ra_image_load(&rgb, &w, &h, tmp, 1 << 24) == RA_ERR_FORMAT, "BMP");
    /* truncated PNG and JPEG, at several lengths */
    const char *files[] = {"img_wide.png", "img_tall.jpg"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[k]);
        size_t n = 0;
        unsigned char *b = slurp(path, &n);
        CHECK(b && n > 200, "%s", path);
        if (!b) continue;
        const size_t cuts[] = {3, 8, 30, 100, n / 2, n - 20};
        for (int c = 0; c < 6; c++) {
            spit(tmp, b, cuts[c]);
            rgb = NULL;
            const ra_status st = ra_image_load(&rgb, &w, &h, tmp, 1 << 24);
            CHECK(st == RA_ERR_FORMAT && !rgb, "%s cut at %zu: %d %s", files[k], cuts[c], st,
                  ra_last_error());
            free(rgb);
        }
        /* a header that claims 65000 x 65000 pixels: refused before decoding */
        if (k == 0) {   /* IHDR width and height at bytes 16..23 (the CRC no longer fits) */
            memcpy(b + 16, "\0\0\xfd\xe8\0\0\xfd\xe8", 8);
        } else {        /* the SOF marker's height and width */
            for (size_t i = 2; i + 9 < n; i++)
                if (b[i] == 0xff && (b[i + 1] == 0xc0 || b[i + 1] == 0xc2)) {
                    memcpy(b + i + 5, "\xfd\xe8\xfd\xe8", 4);
                    break;
                }
        }
        spit(tmp, b, n);
        CHECK(ra_image_load(&rgb, &w, &h, tmp, 1 << 24) == RA_ERR_FORMAT, "%s claiming 65000^2",
              files[k]);
        free(b);
    }
    /* a 16-bit RGBA PNG: decoded (alpha dropped, 16 bits to 8) */
    spng_ctx *e = spng_ctx_new(SPNG_CTX_ENCODER);
    struct spng_ihdr ih = {.width = 2, .height = 1, .bit_depth = 16,
                           .color_type = SPNG_COLOR_TYPE_TRUECOLOR_ALPHA};
    const uint16_t px[8] = {0, 65535, 32896, 65535, 65535, 0, 257, 0};
    FILE *f = fopen(tmp, "wb");
    int ok = f && !spng_set_png_file(e, f) && !spng_set_ihdr(e, &ih) &&
             !spng_encode_image(e, px, sizeof px, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    spng_ctx_free(e);
    if (f) fclose(f);
    CHECK(ok, "encode a 16-bit PNG");
    CHECK(ra_image_load(&rgb, &w, &h, tmp, 1 << 24) == RA_OK && w == 2 && h == 1,
          "16-bit PNG: %s", ra_last_error());
    if (rgb) {
        const float want[6] = {0, 1, 128 / 255.0f, 1, 0, 1 / 255.0f};
        CHECK_CLOSE(rgb, want, 6, 0, 1e-6, "16-bit PNG pixels");
        free(rgb);
    }
    remove(tmp);
}

static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};

/* atol, mean: PIL resamples in 8 bits (two roundings of up to 0.5/255, over
 * std 0.225: 0.02 at most, 0.006 on average); JPEGs are decoded by
 * libjpeg-turbo as PIL does, so they are held to the same. A wrong filter,
 * crop offset or channel order is off by 0.05 on average or more. */
static void fixture(const char *dir, const char *name, double atol, double mean_tol) {
    char path[1024];
    snprintf(path, sizeof path, "%s/img_%s.expected.safetensors", dir, name);
    ra_st_file *f;
    CHECK(ra_st_open(&f, path) == RA_OK, "%s: %s", path, ra_last_error());
    if (!f) return;
    const ra_st_tensor *t = ra_st_find(f, "x");
    float *want = malloc(sizeof(float) * 3 * 224 * 224), *got = malloc(sizeof(float) * 3 * 224 * 224);
    CHECK(t && t->numel == 3 * 224 * 224 && ra_st_to_f32(want, t) == RA_OK, "%s: no x", name);
    snprintf(path, sizeof path, "%s/%s", dir, ra_st_meta(f, "file"));
    float *rgb;
    int w, h;
    ra_status st = ra_image_load(&rgb, &w, &h, path, 1 << 24);
    CHECK(st == RA_OK, "%s: %s", path, ra_last_error());
    if (st == RA_OK) {
        CHECK(ra_image_preprocess(got, rgb, w, h, 256, 224, mean, stdv) == RA_OK, "preprocess");
            CHECK_CLOSE(got, want, 3 * 224 * 224, 0, atol, name);
        double mean_err = 0;
        for (int i = 0; i < 3 * 224 * 224; i++) mean_err += fabs(got[i] - want[i]);
        mean_err /= 3 * 224 * 224;
        CHECK(mean_err < mean_tol, "%s: mean error %.4f", name, mean_err);
        free(rgb);
    }
    free(want), free(got);
    ra_st_close(f);
}

/* What holds for every filter whatever the reference: a flat image stays
 * flat (the weights sum to one in fixed point), nearest picks the pixel
 * under each centre, and bad sizes and transforms are refused. The values
 * against PIL: tests/test_transform.py. (Also the sanitizers' run of the
 * resampler.) */
static void resize_properties(void) {
    static uint8_t in[37 * 23 * 3], out[101 * 23 * 3];   /* the largest output below */
    for (int f = 0; f <= 5; f++) {
        const int sizes[][2] = {{5, 3}, {37, 23}, {101, 7}, {1, 1}, {36, 22}};
        for (int v = 0; v < 256; v += 85) {
            memset(in, v, sizeof in);
            for (int s = 0; s < 5; s++) {
                const int ow = sizes[s][0], oh = sizes[s][1];
                CHECK(ra_image_resize_u8(out, ow, oh, in, 37, 23, 3, (ra_interp)f) == RA_OK, "%s",
                      ra_last_error());
                int flat = 1;
                for (int i = 0; i < ow * oh * 3; i++) flat &= out[i] == v;
                CHECK(flat, "%s: a flat %d image to %dx%d is not flat", ra_interp_name(f), v, ow, oh);
            }
        }
    }
    for (int i = 0; i < 12 * 3; i++) in[i] = (uint8_t)i;   /* 12 x 1: nearest of 4 x 1 */
    CHECK(ra_image_resize_u8(out, 4, 1, in, 12, 1, 3, RA_INTERP_NEAREST) == RA_OK &&
          out[0] == 3 && out[3] == 12 && out[6] == 21 && out[9] == 30, "nearest picks centres");
    CHECK(ra_image_resize_u8(out, 0, 1, in, 12, 1, 3, RA_INTERP_BILINEAR) == RA_ERR_ARG &&
          ra_image_resize_u8(out, 4, 1, in, 12, 1, 3, (ra_interp)9) == RA_ERR_ARG &&
          ra_image_resize_u8(out, 70000, 1, in, 12, 1, 3, RA_INTERP_BILINEAR) == RA_ERR_ARG,
          "bad sizes and filters refused");
    ra_transform t = {.resize = RA_RESIZE_SHORTER, .resize_h = 0, .interp = RA_INTERP_BICUBIC};
    CHECK(ra_transform_check(&t) == RA_ERR_ARG, "resize 0 refused");
    t.resize_h = 8, t.crop = RA_CROP_CENTER_ROUND, t.crop_h = 5, t.crop_w = 5, t.normalize = 1;
    t.mean[0] = t.mean[1] = t.mean[2] = 0, t.std[0] = t.std[1] = 1, t.std[2] = 0;
    CHECK(ra_transform_check(&t) == RA_ERR_ARG, "std 0 refused");
    t.std[2] = 1;
    int ow, oh;
    CHECK(ra_transform_size(&t, 37, 23, &ow, &oh) == RA_OK && ow == 5 && oh == 5, "crop size");
    /* a crop larger than the image pads with zeros around it */
    float big[3 * 9 * 9];
    memset(in, 200, sizeof in);
    t.resize = RA_RESIZE_NONE, t.crop_h = t.crop_w = 9, t.normalize = 0;
    CHECK(ra_transform_apply(big, &t, in, 5, 3) == RA_OK && big[0] == 0 &&
          big[3 * 9 + 2] == 200 / 255.0f && big[9 * 9 - 1] == 0, "padding");
}

/* ra_augment_op and the RandAugment policy: the refusals, every op on
 * 1 x 1 to 5 x 4 images and with extreme arguments (under the sanitizers:
 * no overflow, no read outside), a few identities (tests/test_augment.py
 * compares the bytes with PIL's). */
static void augment_checks(void) {
    uint8_t src[5 * 4 * 3], dst[5 * 4 * 3], back[5 * 4 * 3];
    const uint8_t fill[3] = {124, 116, 104};
    for (int i = 0; i < (int)sizeof src; i++) src[i] = (uint8_t)(i * 37 + 11);
    CHECK(ra_augment_op(dst, src, 5, 4, 2, RA_AUG_INVERT, 0, RA_INTERP_BICUBIC, fill) == RA_ERR_ARG,
          "c = 2 accepted");
    CHECK(ra_augment_op(dst, src, 0, 4, 3, RA_AUG_INVERT, 0, RA_INTERP_BICUBIC, fill) == RA_ERR_ARG,
          "w = 0 accepted");
    CHECK(ra_augment_op(NULL, src, 5, 4, 3, RA_AUG_INVERT, 0, RA_INTERP_BICUBIC, fill) ==
          RA_ERR_ARG, "NULL dst accepted");
    CHECK(ra_augment_op(dst, src, 5, 4, 3, (ra_aug_op)15, 0, RA_INTERP_BICUBIC, fill) == RA_ERR_ARG,
          "op 15 accepted");
    CHECK(ra_augment_op(dst, src, 5, 4, 3, RA_AUG_COLOR, NAN, RA_INTERP_BICUBIC, fill) ==
          RA_ERR_ARG, "NaN accepted");
    CHECK(ra_augment_op(dst, src, 5, 4, 3, RA_AUG_ROTATE, INFINITY, RA_INTERP_BICUBIC, fill) ==
          RA_ERR_ARG && strstr(ra_last_error(), "Rotate"), "inf accepted: %s", ra_last_error());
    CHECK(ra_augment_op(dst, src, 5, 4, 3, RA_AUG_SHEAR_X, 0.1, RA_INTERP_LANCZOS, fill) ==
              RA_ERR_ARG && strstr(ra_last_error(), "lanczos"),
          "lanczos accepted: %s", ra_last_error());
    CHECK(ra_augment_op(dst, src, 5, 4, 3, RA_AUG_TRANSLATE_X, 1, RA_INTERP_NEAREST, NULL) ==
          RA_ERR_ARG, "no fill accepted");
    CHECK(ra_augment_op(dst, src, 5, 4, 3, RA_AUG_POSTERIZE, 2.5, RA_INTERP_NEAREST, NULL) ==
          RA_ERR_ARG, "Posterize 2.5 accepted");
    CHECK(ra_augment_op(dst, src, 5, 4, 3, RA_AUG_INVERT, 0, (ra_interp)99, NULL) == RA_OK,
          "Invert needs no interpolation nor fill");
    CHECK(ra_aug_op_name(RA_AUG_TRANSLATE_Y) && !strcmp(ra_aug_op_name(RA_AUG_TRANSLATE_Y),
          "TranslateYRel") && !ra_aug_op_name((ra_aug_op)-1), "ra_aug_op_name");
    const double args[] = {0, 1, -1, 0.5, 7, 1e300, -1e300, 1e-300, 3e38, 5e38, 90, 180, 270};
    const ra_interp interps[] = {RA_INTERP_NEAREST, RA_INTERP_BILINEAR, RA_INTERP_BICUBIC};
    int ok = 1;
    for (int c = 1; c <= 3; c += 2)
        for (int w = 1; w <= 5; w++)
            for (int h = 1; h <= 4; h++)
                for (int op = 0; op < 15; op++)
                    for (int a = 0; a < (int)(sizeof args / sizeof *args); a++)
                        for (int k = 0; k < 3; k++) {
                            const double arg = op == RA_AUG_POSTERIZE ? floor(args[a]) : args[a];
                            ok &= ra_augment_op(dst, src, w, h, c, (ra_aug_op)op, arg, interps[k],
                                                fill) == RA_OK;
                        }
    CHECK(ok, "an op failed on a small image or an extreme argument");
    /* identities: Invert twice, Rotate 360, a translation out of the image */
    ra_augment_op(dst, src, 5, 4, 3, RA_AUG_INVERT, 0, RA_INTERP_NEAREST, NULL);
    ra_augment_op(back, dst, 5, 4, 3, RA_AUG_INVERT, 0, RA_INTERP_NEAREST, NULL);
    CHECK(!memcmp(back, src, sizeof src), "Invert twice");
    ra_augment_op(dst, src, 5, 4, 3, RA_AUG_ROTATE, -720, RA_INTERP_BILINEAR, fill);
    CHECK(!memcmp(dst, src, sizeof src), "Rotate -720");
    ra_augment_op(dst, src, 5, 4, 3, RA_AUG_TRANSLATE_Y, 4, RA_INTERP_BICUBIC, fill);
    ok = 1;
    for (int i = 0; i < 5 * 4 * 3; i++) ok &= dst[i] == fill[i % 3];
    CHECK(ok, "a translation by the height leaves the fill");
    /* the policy */
    ra_randaugment r;
    CHECK(ra_randaugment_parse(&r, "rand-m9-mstd0.5-inc1") == RA_OK && r.layers == 2 &&
          r.magnitude == 9 && r.magnitude_std == 0.5 && r.increasing == 1 && r.prob == 0.5,
          "parse: %s", ra_last_error());
    CHECK(ra_randaugment_parse(&r, "rand-m9-q3") == RA_ERR_ARG && strstr(ra_last_error(), "q3"),
          "an unknown section: %s", ra_last_error());
    CHECK(ra_randaugment_parse(NULL, "rand") == RA_ERR_ARG && ra_randaugment_parse(&r, NULL) ==
          RA_ERR_ARG, "NULL accepted");
    ra_rng rng;
    ra_rng_seed(&rng, 3);
    ra_randaugment_parse(&r, "rand-m9-mstd0.5-inc1");
    CHECK(ra_randaugment_apply(back, NULL, 5, 4, 3, &r, &rng) == RA_ERR_ARG, "NULL scratch");
    CHECK(ra_randaugment_apply(back, dst, 5, 4, 4, &r, &rng) == RA_ERR_ARG, "c = 4");
    r.layers = RA_AUG_MAX_LAYERS + 1;
    CHECK(ra_randaugment_apply(back, dst, 5, 4, 3, &r, &rng) == RA_ERR_ARG, "too many layers");
    r.layers = 2, r.magnitude = INFINITY;
    CHECK(ra_randaugment_apply(back, dst, 5, 4, 3, &r, &rng) == RA_ERR_ARG, "infinite magnitude");
    r.magnitude = 9, r.prob = 0;   /* p = 0: nothing applies */
    memcpy(back, src, sizeof src);
    CHECK(ra_randaugment_apply(back, dst, 5, 4, 3, &r, &rng) == RA_OK &&
          !memcmp(back, src, sizeof src), "p = 0 changed the image");
    r.prob = 1, r.layers = RA_AUG_MAX_LAYERS, r.magnitude_std = INFINITY;
    ok = 1;
    for (int i = 0; i < 200; i++) ok &= ra_randaugment_apply(back, dst, 5, 4, 3, &r, &rng) == RA_OK;
    CHECK(ok, "64 layers, 200 times");
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/fixtures";
    resize_properties();
    augment_checks();
    fixture(dir, "wide", 0.02, 0.008);   /* PNG */
    fixture(dir, "tall", 0.02, 0.008);   /* JPEG */
    malformed(dir);
    char path[1024];
    float *rgb;
    int w, h;
    /* the size limit is checked from the header, before decoding */
    snprintf(path, sizeof path, "%s/img_wide.png", dir);
    CHECK(ra_image_load(&rgb, &w, &h, path, 1000) == RA_ERR_FORMAT && strstr(ra_last_error(), "limit"),
          "oversized image accepted: %s", ra_last_error());
    CHECK(ra_image_load(&rgb, &w, &h, "/nonexistent.png", 1 << 24) == RA_ERR_IO, "missing file");
    snprintf(path, sizeof path, "%s/cases.txt", dir);   /* not an image */
    CHECK(ra_image_load(&rgb, &w, &h, path, 1 << 24) == RA_ERR_FORMAT, "text file accepted");
    float out[3 * 4 * 4], px[3 * 2 * 2] = {0};
    CHECK(ra_image_preprocess(out, px, 2, 2, 4, 5, mean, stdv) == RA_ERR_ARG, "crop > resize");
    CHECK(ra_image_preprocess(out, px, 0, 2, 4, 4, mean, stdv) == RA_ERR_ARG, "empty image");
    return check_done();
}
