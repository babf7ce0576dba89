/* test_image.c - image decoding and the ImageNet evaluation transform
 * against torchvision's (tools/make_image_fixtures.py), and the refusals. */
#include "check.h"
#include "relattn.h"

#include <string.h>

static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};

/* atol, mean: PIL resamples in 8 bits (two roundings of up to 0.5/255, over
 * std 0.225: 0.02 at most, 0.006 on average); a JPEG also decodes slightly
 * differently in stb_image and libjpeg (a few levels near edges). A wrong
 * filter, crop offset or channel order is off by 0.05 on average or more. */
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

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/fixtures";
    fixture(dir, "wide", 0.02, 0.008);   /* PNG */
    fixture(dir, "tall", 0.08, 0.010);   /* JPEG */
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
