/* test_loader.c - ra_loader's worker pool (the pixels against PIL are in
 * test_loader.py): the same bits at 0, 1 and 4 workers and any queue depth,
 * after restarts at other steps, in evaluation order; freeing while the
 * workers are busy; a file that does not decode, with and without
 * skip_bad; the argument checks. Run under ASan and ThreadSanitizer
 * (scripts/tsan.sh) as well. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "relattn.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

enum { NIMG = 14, S = 16, B = 4, STEPS = 8 };
static char dir[512], paths[NIMG + 4][700];
static int npaths;

/* class c, image i: a gradient with a tint, 23 + i x 31 - i */
static void write_images(void) {
    for (int c = 0; c < 2; c++) {
        char d[600];
        snprintf(d, sizeof d, "%s/class%d", dir, c);
        mkdir(d, 0700);
        snprintf(paths[npaths++], sizeof paths[0], "%s", d);
        for (int i = 0; i < NIMG / 2; i++) {
            const int w = 23 + i, h = 31 - i;
            uint8_t *px = malloc((size_t)w * h * 3);
            for (int k = 0; k < w * h; k++)
                for (int ch = 0; ch < 3; ch++)
                    px[k * 3 + ch] = (uint8_t)((k * (7 + ch) + 50 * c + 13 * i) % 256);
            char p[700];
            snprintf(p, sizeof p, "%s/%02d.png", d, i);
            CHECK(ra_png_write(p, px, w, h) == RA_OK, "write %s", p);
            snprintf(paths[npaths++], sizeof paths[0], "%s", p);
            free(px);
        }
    }
}

static ra_loader_config config(int workers, int depth) {
    ra_loader_config c = ra_loader_config_default();
    c.size = S, c.batch = B, c.seed = 42, c.workers = workers, c.depth = depth, c.reprob = 0.5;
    c.randaugment = ra_randaugment_parse(&c.ra, "rand-m9-mstd0.5-inc1") == RA_OK;
    CHECK(c.randaugment, "parse: %s", ra_last_error());
    return c;
}

static float want[STEPS][B * 3 * S * S];
static int32_t want_lab[STEPS][B];

static void same_bits(void) {
    ra_image_folder f;
    CHECK(ra_image_folder_scan(&f, dir) == RA_OK, "scan: %s", ra_last_error());
    static const int setups[][2] = {{0, 1}, {1, 1}, {4, 2}, {2, 5}};
    static const int order[][STEPS] = {{0, 1, 2, 3, 4, 5, 6, 7}, {5, 6, 7, 0, 1, 2, 3, 4},
                                       {3, 4, 0, 1, 2, 7, 5, 6}, {7, 6, 5, 4, 3, 2, 1, 0}};
    float x[B * 3 * S * S];
    int32_t lab[B];
    for (int k = 0; k < 4; k++) {
        const ra_loader_config c = config(setups[k][0], setups[k][1]);
        ra_loader *l = NULL;
        CHECK(ra_loader_create(&l, &f, NULL, f.n, &c) == RA_OK, "create: %s", ra_last_error());
        if (!l) continue;
        CHECK(ra_loader_batches(l) == NIMG / B, "%lld batches an epoch", (long long)ra_loader_batches(l));
        for (int j = 0; j < STEPS; j++) {
            const int s = order[k][j];
            int b = 0;
            CHECK(ra_loader_batch(l, s, x, lab, NULL, &b) == RA_OK && b == B, "batch %d: %s", s,
                  ra_last_error());
            if (k == 0) {
                memcpy(want[s], x, sizeof x), memcpy(want_lab[s], lab, sizeof lab);
                continue;
            }
            CHECK(!memcmp(want[s], x, sizeof x) && !memcmp(want_lab[s], lab, sizeof lab),
                  "%d workers, depth %d: batch %d differs from the one without workers",
                  setups[k][0], setups[k][1], s);
        }
        ra_loader_free(l);
    }
    /* epochs 0 and 1 (steps 0..2, 3..5) each hold 12 distinct images of 14 */
    int epoch_ok = 1;
    for (int e = 0; e < 2; e++)
        for (int a = 0; a < 3 * B; a++)
            for (int b = a + 1; b < 3 * B; b++)
                epoch_ok &= memcmp(want[3 * e + a / B] + a % B * 3 * S * S,
                                   want[3 * e + b / B] + b % B * 3 * S * S,
                                   sizeof(float) * 3 * S * S) != 0;
    CHECK(epoch_ok, "an epoch repeats an image");
    /* freeing at once, and with batches in flight */
    for (int k = 0; k < 3; k++) {
        const ra_loader_config c = config(3, 4);
        ra_loader *l = NULL;
        CHECK(ra_loader_create(&l, &f, NULL, f.n, &c) == RA_OK, "create");
        if (k && l) CHECK(ra_loader_batch(l, k * 11, x, lab, NULL, NULL) == RA_OK, "batch");
        ra_loader_free(l);
    }
    ra_image_folder_free(&f);
}

/* The evaluation (train 0), and training without a random crop, flip or
 * shuffle (train 1: the folder's order), each image through the
 * transform alone; a grey transform gives one plane in both. */
static void evaluation(int train, int grey) {
    ra_image_folder f;
    CHECK(ra_image_folder_scan(&f, dir) == RA_OK, "scan");
    ra_loader_config c = ra_loader_config_default();
    c.train = train, c.size = S, c.batch = 5, c.workers = 2;
    c.random_crop = 0, c.hflip = 0, c.shuffle = 0;
    c.eval = (ra_transform){.resize = RA_RESIZE_EXACT, .resize_h = S, .resize_w = S,
                            .interp = RA_INTERP_BILINEAR, .normalize = 1, .grey = grey,
                            .mean = {0.5f, 0.5f, 0.5f}, .std = {0.25f, 0.25f, 0.25f}};
    memcpy(c.mean, c.eval.mean, sizeof c.mean), memcpy(c.std, c.eval.std, sizeof c.std);
    ra_loader *l = NULL;
    CHECK(ra_loader_create(&l, &f, NULL, f.n, &c) == RA_OK, "create: %s", ra_last_error());
    if (!l) return ra_image_folder_free(&f);
    const int C = grey ? 1 : 3, nb = train ? 2 : 3;
    CHECK(ra_loader_batches(l) == nb, "14 images in batches of 5: %d", nb);
    float x[5 * 3 * S * S], one[3 * S * S];
    int32_t lab[5];
    uint8_t bad[5];
    for (int s = 0; s < nb; s++) {
        int b = 0;
        CHECK(ra_loader_batch(l, s, x, lab, bad, &b) == RA_OK, "batch %d", s);
        CHECK(b == (s == 2 ? 4 : 5), "batch %d holds %d", s, b);
        for (int i = 0; i < b; i++) {   /* image 5s + i through the transform alone */
            uint8_t *rgb = NULL;
            int w, h;
            const int64_t k = 5 * s + i;
            CHECK(ra_image_load_u8(&rgb, &w, &h, f.paths[k], 1 << 20) == RA_OK &&
                      ra_transform_apply(one, &c.eval, rgb, w, h) == RA_OK,
                  "transform");
            CHECK(!memcmp(one, x + i * C * S * S, sizeof(float) * C * S * S) &&
                      lab[i] == f.labels[k] && !bad[i],
                  "%s image %lld (grey %d) differs from its transform or is out of order",
                  train ? "training" : "evaluation", (long long)k, grey);
            free(rgb);
        }
    }
    if (!train)
        CHECK(ra_loader_batch(l, 3, x, lab, bad, NULL) == RA_ERR_ARG, "a batch past the end");
    ra_loader_free(l);
    ra_image_folder_free(&f);
}

static void bad_files(void) {
    char p[700];
    snprintf(p, sizeof p, "%s/class1/zz-broken.png", dir);
    FILE *fp = fopen(p, "wb");
    fputs("\x89PNG\r\n\x1a\n not a png", fp);
    fclose(fp);
    snprintf(paths[npaths++], sizeof paths[0], "%s", p);
    ra_image_folder f;
    CHECK(ra_image_folder_scan(&f, dir) == RA_OK && f.n == NIMG + 1, "scan");
    ra_loader_config c = config(2, 2);
    c.batch = NIMG + 1;   /* every image in the first batch */
    float *x = malloc(sizeof *x * (NIMG + 1) * 3 * S * S);
    int32_t lab[NIMG + 1];
    ra_loader *l = NULL;
    CHECK(ra_loader_create(&l, &f, NULL, f.n, &c) == RA_OK, "create");
    const ra_status st = l ? ra_loader_batch(l, 0, x, lab, NULL, NULL) : RA_OK;
    CHECK(st == RA_ERR_FORMAT && strstr(ra_last_error(), "zz-broken.png"),
          "a broken image fails its batch naming it: %d %s", st, ra_last_error());
    ra_loader_free(l);
    c.skip_bad = 1;
    CHECK(ra_loader_create(&l, &f, NULL, f.n, &c) == RA_OK, "create");
    CHECK(l && ra_loader_batch(l, 0, x, lab, NULL, NULL) == RA_OK && ra_loader_skipped(l) == 1,
          "skip_bad: %s, %lld skipped", ra_last_error(), (long long)ra_loader_skipped(l));
    ra_loader_free(l);
    /* the argument checks */
    ra_loader_config e = config(2, 2);
    e.batch = NIMG + 2;
    CHECK(ra_loader_create(&l, &f, NULL, f.n, &e) == RA_ERR_ARG && !l, "more batch than images");
    e = config(2, 2), e.scale[0] = 0;
    CHECK(ra_loader_create(&l, &f, NULL, f.n, &e) == RA_ERR_ARG, "scale 0");
    e = config(2, 2), e.workers = 100000;
    CHECK(ra_loader_create(&l, &f, NULL, f.n, &e) == RA_ERR_ARG, "100000 workers");
    e = config(2, 2), e.std[1] = 0;
    CHECK(ra_loader_create(&l, &f, NULL, f.n, &e) == RA_ERR_ARG, "std 0");
    e = config(2, 2), e.train = 0;   /* no evaluation transform */
    CHECK(ra_loader_create(&l, &f, NULL, f.n, &e) == RA_ERR_ARG, "eval without a transform");
    const int64_t idx[2] = {0, 99};
    e = config(0, 1), e.batch = 2;
    CHECK(ra_loader_create(&l, &f, idx, 2, &e) == RA_ERR_ARG, "an index past the folder");
    free(x);
    ra_image_folder_free(&f);
}

int main(void) {
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/relattn-loader-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) return perror("mkdtemp"), 2;
    write_images();
    same_bits();
    for (int train = 0; train < 2; train++)
        for (int grey = 0; grey < 2; grey++) evaluation(train, grey);
    bad_files();
    /* python/relattn/_lib.py's LoaderConfig mirrors the struct (ctypes; the
     * default is returned by value): test_loader.py checks its size against
     * the same number. A change of the struct changes both. */
    CHECK(sizeof(ra_loader_config) == 392, "sizeof(ra_loader_config) is %zu: update 392 here, "
          "in tests/test_loader.py and python/relattn/_lib.py's LoaderConfig",
          sizeof(ra_loader_config));
    for (int i = npaths - 1; i >= 0; i--) remove(paths[i]);
    rmdir(dir);
    return check_done();
}
