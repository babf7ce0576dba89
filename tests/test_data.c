/* test_data.c - IDX datasets (MNIST, Fashion-MNIST): exact round trips of
 * files written here (raw and gzip), a corpus of malformed files each
 * refused with the right status, the real Fashion-MNIST when installed
 * (Debian's dataset-fashion-mnist), batches (normalisation, random crop and
 * flip against a brute-force reference) and the shuffle. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "relattn.h"

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[512];
static char made[64][600];   /* files to remove at the end */
static int nmade;

static const char *tmp_path(const char *name) {
    static char p[8][600];
    static int k;
    char *s = p[k++ % 8];
    snprintf(s, 600, "%s/%s", tmpdir, name);
    return s;
}

static void remember(const char *path) {
    for (int i = 0; i < nmade; i++)
        if (!strcmp(made[i], path)) return;
    if (nmade < 64) snprintf(made[nmade++], sizeof made[0], "%s", path);
}

/* Write bytes to path, gzip-compressed if gz. */
static void write_bytes(const char *path, int gz, const void *buf, size_t len) {
    remember(path);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f || (len && gzwrite(f, buf, (unsigned)len) != (int)len) || gzclose(f) != Z_OK) {
            fprintf(stderr, "cannot write %s\n", path);
            exit(2);
        }
    } else {
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, "cannot write %s\n", path);
            exit(2);
        }
    }
}

static size_t read_bytes(const char *path, unsigned char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* An IDX file: magic 0x0000TTRR then rank big-endian dims then data. */
static size_t idx_bytes(unsigned char *out, uint32_t magic, int rank, const uint32_t *dims,
                        const uint8_t *data, size_t len) {
    size_t k = 0;
    for (int s = 24; s >= 0; s -= 8) out[k++] = (unsigned char)(magic >> s);
    for (int i = 0; i < rank; i++)
        for (int s = 24; s >= 0; s -= 8) out[k++] = (unsigned char)(dims[i] >> s);
    if (len) memcpy(out + k, data, len);
    return k + len;
}

static void write_idx(const char *path, int gz, uint32_t magic, int rank, const uint32_t *dims,
                      const uint8_t *data, size_t len) {
    static unsigned char buf[1 << 16];
    write_bytes(path, gz, buf, idx_bytes(buf, magic, rank, dims, data, len));
}

static int is_zeroed(const ra_dataset *d) {
    return d->n == 0 && d->h == 0 && d->w == 0 && d->classes == 0 && !d->images && !d->labels;
}

/* ---- round trips ------------------------------------------------------- */

enum { N = 5, H = 3, W = 4 };
static uint8_t px[N * H * W];
static const uint8_t lab[N] = {0, 3, 1, 9, 2};

static void round_trips(void) {
    for (int i = 0; i < N * H * W; i++) px[i] = (uint8_t)(i * 37 + 11);
    px[0] = 0, px[1] = 255;
    const uint32_t idims[3] = {N, H, W}, ldims[1] = {N};
    for (int gi = 0; gi < 2; gi++)
        for (int gl = 0; gl < 2; gl++) {
            const char *ip = tmp_path(gi ? "rt-images.gz" : "rt-images");
            const char *lp = tmp_path(gl ? "rt-labels.gz" : "rt-labels");
            write_idx(ip, gi, 0x803, 3, idims, px, sizeof px);
            write_idx(lp, gl, 0x801, 1, ldims, lab, N);
            ra_dataset d;
            ra_status s = ra_dataset_load(&d, ip, lp);
            CHECK(s == RA_OK, "round trip gz %d/%d: %s", gi, gl, ra_last_error());
            if (s != RA_OK) continue;
            CHECK(d.n == N && d.h == H && d.w == W, "shape %lld %d %d", (long long)d.n, d.h, d.w);
            CHECK(d.classes == 10, "classes %d", d.classes);
            CHECK(!memcmp(d.images, px, sizeof px), "pixels differ (gz %d)", gi);
            CHECK(!memcmp(d.labels, lab, N), "labels differ (gz %d)", gl);
            ra_dataset_free(&d);
            CHECK(is_zeroed(&d), "free does not zero");
        }
    ra_dataset_free(NULL);

    /* a label 255: 256 classes, the most a byte can name */
    {
        const uint8_t l255[N] = {0, 255, 1, 2, 3};
        write_idx(tmp_path("l255"), 0, 0x801, 1, ldims, l255, N);
        write_idx(tmp_path("rt-images"), 0, 0x803, 3, idims, px, sizeof px);
        ra_dataset d;
        CHECK(ra_dataset_load(&d, tmp_path("rt-images"), tmp_path("l255")) == RA_OK, "%s",
              ra_last_error());
        CHECK(d.classes == 256, "classes %d for label 255", d.classes);
        ra_dataset_free(&d);
    }

    /* the directory layout: raw images, gzip labels; no test split here */
    write_idx(tmp_path("train-images-idx3-ubyte"), 0, 0x803, 3, idims, px, sizeof px);
    write_idx(tmp_path("train-labels-idx1-ubyte.gz"), 1, 0x801, 1, ldims, lab, N);
    ra_dataset d;
    ra_status s = ra_dataset_load_dir(&d, tmpdir, "train");
    CHECK(s == RA_OK && d.n == N && !memcmp(d.images, px, sizeof px) &&
          !memcmp(d.labels, lab, N), "load_dir train: %s", ra_last_error());
    ra_dataset_free(&d);
    s = ra_dataset_load_dir(&d, tmpdir, "test");
    CHECK(s == RA_ERR_IO && strstr(ra_last_error(), "t10k-images-idx3-ubyte"),
          "missing test split: %d %s", s, ra_last_error());
    CHECK(is_zeroed(&d), "not zeroed after failure");
    CHECK(ra_dataset_load_dir(&d, tmpdir, "valid") == RA_ERR_ARG, "unknown split accepted");
    CHECK(ra_dataset_load_dir(&d, NULL, "train") == RA_ERR_ARG, "NULL dir");
    CHECK(ra_dataset_load(NULL, "a", "b") == RA_ERR_ARG, "NULL dataset");
}

/* ---- malformed files --------------------------------------------------- */

/* Load images file ip with labels lp; expect status want and a reason that
 * names the file `names` (NULL: no check). */
static void refused(const char *what, const char *ip, const char *lp, ra_status want,
                    const char *names) {
    ra_dataset d;
    memset(&d, 0x55, sizeof d);
    const ra_status s = ra_dataset_load(&d, ip, lp);
    CHECK(s == want, "%s: status %d (%s), expected %d: %s", what, s, ra_status_str(s), want,
          ra_last_error());
    if (want != RA_OK) CHECK(is_zeroed(&d), "%s: dataset not zeroed after failure", what);
    if (names) CHECK(strstr(ra_last_error(), names) != NULL, "%s: reason '%s' does not name %s",
                     what, ra_last_error(), names);
    if (s == RA_OK) ra_dataset_free(&d);
}

static void malformed(void) {
    static unsigned char buf[1 << 16], gzbuf[1 << 16];
    const uint32_t idims[3] = {N, H, W}, ldims[1] = {N};
    const char *good_i = tmp_path("good-images"), *good_l = tmp_path("good-labels");
    write_idx(good_i, 0, 0x803, 3, idims, px, sizeof px);
    write_idx(good_l, 0, 0x801, 1, ldims, lab, N);
    const char *bad = tmp_path("bad"), *badgz = tmp_path("bad.gz");

    /* magic, data type, rank */
    const struct { const char *what; uint32_t magic; } magics[] = {
        {"wrong magic 0x12345678", 0x12345678u}, {"magic with a high byte", 0x01000803u},
        {"signed bytes (0x09)", 0x903u}, {"int32 (0x0C)", 0xC03u}, {"float (0x0D)", 0xD03u},
        {"rank 2 images", 0x802u}, {"rank 4 images", 0x804u}, {"rank 1 as images", 0x801u},
    };
    for (size_t i = 0; i < sizeof magics / sizeof magics[0]; i++)
        for (int gz = 0; gz < 2; gz++) {
            write_idx(gz ? badgz : bad, gz, magics[i].magic, 3, idims, px, sizeof px);
            refused(magics[i].what, gz ? badgz : bad, good_l, RA_ERR_FORMAT, gz ? "bad.gz" : "bad");
        }
    write_idx(bad, 0, 0x803, 1, ldims, lab, N);   /* rank 3 magic, one dimension */
    refused("rank 3 as labels", good_i, bad, RA_ERR_FORMAT, "bad");
    write_idx(bad, 0, 0x802, 2, (const uint32_t[]){N, 1}, lab, N);
    refused("rank 2 labels", good_i, bad, RA_ERR_FORMAT, "bad");
    /* labels of 300 cannot be bytes: an int32 labels file is refused */
    {
        const uint8_t l32[4 * N] = {0, 0, 1, 44, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4};
        write_idx(bad, 0, 0xC01, 1, ldims, l32, sizeof l32);
        refused("int32 labels with 300", good_i, bad, RA_ERR_FORMAT, "bad");
    }

    /* dimensions: zero, above the limits, above the byte limit */
    const struct { const char *what; uint32_t d[3]; } dimss[] = {
        {"zero images", {0, H, W}}, {"zero rows", {N, 0, W}}, {"zero columns", {N, H, 0}},
        {"4097 rows", {N, 4097, W}}, {"4097 columns", {N, H, 4097}},
        {"1e8 + 1 images", {100000001u, 1, 1}}, {"2^32 - 1 images", {0xFFFFFFFFu, H, W}},
        {"2^32 - 1 columns", {N, H, 0xFFFFFFFFu}},
        {"78 GB claimed", {100000000u, 28, 28}}, {"5 GB claimed", {5000, 1024, 1024}},
    };
    for (size_t i = 0; i < sizeof dimss / sizeof dimss[0]; i++)
        for (int gz = 0; gz < 2; gz++) {
            write_idx(gz ? badgz : bad, gz, 0x803, 3, dimss[i].d, px, sizeof px);
            refused(dimss[i].what, gz ? badgz : bad, good_l, RA_ERR_FORMAT, "bad");
        }
    write_idx(bad, 0, 0x801, 1, (const uint32_t[]){0}, NULL, 0);
    refused("zero labels", good_i, bad, RA_ERR_FORMAT, "bad");
    /* a header claiming 750 MB over 10 bytes: refused as truncated, fast */
    {
        const clock_t t0 = clock();
        write_idx(badgz, 1, 0x803, 3, (const uint32_t[]){1000000, 28, 28}, px, 10);
        refused("750 MB claimed, 10 bytes held", badgz, good_l, RA_ERR_FORMAT, "truncated");
        const double sec = (double)(clock() - t0) / CLOCKS_PER_SEC;
        CHECK(sec < 0.5, "a lying header took %.2f s", sec);
    }

    /* data shorter / longer than the header says, raw and gzip */
    for (int gz = 0; gz < 2; gz++) {
        const char *p = gz ? badgz : bad;
        write_idx(p, gz, 0x803, 3, idims, px, sizeof px - 1);
        refused("one pixel short", p, good_l, RA_ERR_FORMAT, "truncated");
        write_idx(p, gz, 0x803, 3, idims, NULL, 0);
        refused("header only", p, good_l, RA_ERR_FORMAT, "truncated");
        size_t k = idx_bytes(buf, 0x803, 3, idims, px, sizeof px);
        buf[k] = 7;
        write_bytes(p, gz, buf, k + 1);
        refused("one byte too many", p, good_l, RA_ERR_FORMAT, "longer");
        write_bytes(p, gz, buf, 10);
        refused("half a header", p, good_l, RA_ERR_FORMAT, "too short");
        write_bytes(p, gz, buf, 0);
        refused("empty file", p, good_l, RA_ERR_FORMAT, "too short");
        write_idx(p, gz, 0x801, 1, ldims, lab, N - 1);
        refused("one label short", good_i, p, RA_ERR_FORMAT, "truncated");
        k = idx_bytes(buf, 0x801, 1, ldims, lab, N);
        memset(buf + k, 0, 100);
        write_bytes(p, gz, buf, k + 100);
        refused("100 labels too many", good_i, p, RA_ERR_FORMAT, "longer");
    }

    /* label count differing from the image count */
    write_idx(bad, 0, 0x801, 1, (const uint32_t[]){N - 1}, lab, N - 1);
    refused("4 labels for 5 images", good_i, bad, RA_ERR_FORMAT, "labels");
    write_idx(bad, 1, 0x801, 1, (const uint32_t[]){N + 1}, (const uint8_t[]){1, 2, 3, 4, 5, 6}, N + 1);
    refused("6 labels for 5 images", good_i, bad, RA_ERR_FORMAT, "images");

    /* broken gzip streams */
    write_idx(badgz, 1, 0x803, 3, idims, px, sizeof px);
    const size_t gzlen = read_bytes(badgz, gzbuf, sizeof gzbuf);
    CHECK(gzlen > 20 && gzbuf[0] == 0x1f && gzbuf[1] == 0x8b, "gzip file not written");
    refused("control: the gzip file is good", badgz, good_l, RA_OK, NULL);
    const size_t cuts[] = {2, 10, 12, gzlen / 2, gzlen - 8, gzlen - 4, gzlen - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_bytes(bad, 0, gzbuf, cuts[i]);
        char what[64];
        snprintf(what, sizeof what, "gzip cut at %zu of %zu bytes", cuts[i], gzlen);
        refused(what, bad, good_l, RA_ERR_FORMAT, "bad");
    }
    memcpy(buf, gzbuf, gzlen);
    buf[gzlen - 6] ^= 0x40;   /* CRC of the trailer */
    write_bytes(bad, 0, buf, gzlen);
    refused("gzip with a wrong CRC", bad, good_l, RA_ERR_FORMAT, "gzip");
    memcpy(buf, gzbuf, gzlen);
    buf[gzlen - 2] ^= 0x01;   /* length of the trailer */
    write_bytes(bad, 0, buf, gzlen);
    refused("gzip with a wrong length", bad, good_l, RA_ERR_FORMAT, "bad");
    {
        unsigned char g[200] = {0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 3};
        uint64_t x = 12345;
        for (int i = 10; i < 200; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            g[i] = (unsigned char)(x >> 56);
        }
        write_bytes(bad, 0, g, sizeof g);
        refused("gzip header then garbage", bad, good_l, RA_ERR_FORMAT, "bad");
        g[2] = 0x07;   /* not deflate */
        write_bytes(bad, 0, g, sizeof g);
        refused("gzip with an unknown method", bad, good_l, RA_ERR_FORMAT, "bad");
    }

    /* missing and unreadable */
    refused("missing images", tmp_path("nothing-here"), good_l, RA_ERR_IO, "nothing-here");
    refused("missing labels", good_i, tmp_path("nothing-here.gz"), RA_ERR_IO, "nothing-here.gz");
    refused("a directory", tmpdir, good_l, RA_ERR_IO, tmpdir);

    /* fuzz: random cuts and byte changes of good files never crash and end
     * in RA_OK (with a consistent result) or RA_ERR_FORMAT */
    ra_rng rng;
    ra_rng_seed(&rng, 7);
    int bad_status = 0, accepted = 0;
    for (int it = 0; it < 600; it++) {
        const int gz = it & 1, labels = (it >> 1) & 1;
        size_t k = labels ? idx_bytes(buf, 0x801, 1, ldims, lab, N)
                          : idx_bytes(buf, 0x803, 3, idims, px, sizeof px);
        if (gz) {
            write_bytes(badgz, 1, buf, k);
            k = read_bytes(badgz, buf, sizeof buf);
        }
        const int nflip = (int)(ra_rng_u64(&rng) % 4);
        for (int f = 0; f < nflip; f++) buf[ra_rng_u64(&rng) % k] ^= (unsigned char)(1 + ra_rng_u64(&rng) % 255);
        if (ra_rng_u64(&rng) % 3 == 0) k = ra_rng_u64(&rng) % (k + 1);
        write_bytes(bad, 0, buf, k);
        ra_dataset d;
        const ra_status s = labels ? ra_dataset_load(&d, good_i, bad) : ra_dataset_load(&d, bad, good_l);
        if (s == RA_OK) {
            accepted++;
            if (d.n != N || (int64_t)d.h * d.w * d.n < 1 || d.classes < 1 || d.classes > 256)
                bad_status++;
            for (int64_t i = 0; i < d.n; i++) bad_status += d.labels[i] >= d.classes;
            ra_dataset_free(&d);
        } else if (s != RA_ERR_FORMAT || !is_zeroed(&d)) {
            bad_status++;
            fprintf(stderr, "fuzz %d: %d %s\n", it, s, ra_last_error());
        }
    }
    CHECK(bad_status == 0, "fuzz: %d unexpected results", bad_status);
    CHECK(accepted > 0 && accepted < 600, "fuzz: %d of 600 accepted", accepted);
}

/* ---- batches ----------------------------------------------------------- */

/* What torchvision gives: pad with p zeros, crop at (i, j), mirror if f. */
static void reference(uint8_t *out, const uint8_t *img, int h, int w, int p, int i, int j, int f) {
    for (int y = 0; y < h; y++)
        for (int c = 0; c < w; c++) {
            const int cc = f ? w - 1 - c : c;
            const int sy = y + i - p, sx = cc + j - p;
            out[y * w + c] = sy >= 0 && sy < h && sx >= 0 && sx < w ? img[sy * w + sx] : 0;
        }
}

static float norm(uint8_t p, float mean, float std) { return ((float)p / 255.0f - mean) / std; }

/* Which (i, j, f) of the 2p+1 x 2p+1 x 2 makes batch image x from img;
 * -1 if none, -2 if several. */
static int which(const float *x, const uint8_t *img, int h, int w, int p, float mean, float std) {
    static uint8_t ref[64 * 64];
    int found = -1;
    for (int i = 0; i <= 2 * p; i++)
        for (int j = 0; j <= 2 * p; j++)
            for (int f = 0; f < 2; f++) {
                reference(ref, img, h, w, p, i, j, f);
                int same = 1;
                for (int k = 0; k < h * w && same; k++) same = x[k] == norm(ref[k], mean, std);
                if (same) found = found == -1 ? (i * (2 * p + 1) + j) * 2 + f : -2;
            }
    return found;
}

/* The documented draw below m. */
static uint64_t below(ra_rng *rng, uint64_t m) {
    for (;;) {
        const uint64_t r = ra_rng_u64(rng);
        if (r >= (0 - m) % m) return r % m;
    }
}

static void batches(void) {
    enum { BN = 7, BH = 6, BW = 5 };   /* h != w: catches a swapped axis */
    static uint8_t images[BN * BH * BW], labels[BN];
    ra_rng rng;
    ra_rng_seed(&rng, 1);
    for (int i = 0; i < BN * BH * BW; i++) images[i] = (uint8_t)(1 + ra_rng_u64(&rng) % 255);
    images[3] = 255;
    for (int i = 0; i < BN; i++) labels[i] = (uint8_t)(i * 3 % 10);
    const ra_dataset d = {BN, BH, BW, 10, images, labels, 1};
    const float mean = 0.2860f, std = 0.3530f;
    enum { B = 64 };
    static float x[B * BH * BW], x2[B * BH * BW];
    int32_t lb[B];
    int64_t idx[B];
    for (int k = 0; k < B; k++) idx[k] = (k * 5 + 2) % BN;

    /* no augmentation: the plain pixels, normalised exactly; no draws */
    ra_rng before = rng;
    CHECK(ra_dataset_batch(x, lb, &d, idx, B, mean, std, 0, 0, &rng) == RA_OK, "%s", ra_last_error());
    CHECK(!memcmp(&before, &rng, sizeof rng), "drew numbers without augmentation");
    int wrong = 0;
    for (int k = 0; k < B; k++) {
        wrong += lb[k] != labels[idx[k]];
        for (int q = 0; q < BH * BW; q++)
            wrong += x[k * BH * BW + q] != norm(images[idx[k] * BH * BW + q], mean, std);
    }
    CHECK(wrong == 0, "plain batch: %d values differ", wrong);
    CHECK(ra_dataset_batch(x2, lb, &d, idx, B, mean, std, 0, 0, NULL) == RA_OK &&
          !memcmp(x, x2, sizeof x), "plain batch with rng NULL");
    /* the normalisation of a few bytes, by hand (mean 0.5, std 0.5: 2p/255 - 1) */
    {
        const ra_dataset one = {1, 1, 3, 1, (uint8_t[]){0, 255, 51}, (uint8_t[]){0}, 1};
        float v[3];
        CHECK(ra_dataset_batch(v, lb, &one, (const int64_t[]){0}, 1, 0.5f, 0.5f, 0, 0, NULL) == RA_OK &&
              v[0] == -1.0f && v[1] == 1.0f && fabsf(v[2] - (-0.6f)) < 1e-6f,
              "normalised %g %g %g", v[0], v[1], v[2]);
    }

    /* crop and flip: each image one of the 50 versions, all of them seen,
     * roughly uniformly */
    const int p = 2;
    int count[50] = {0}, unmatched = 0, ambiguous = 0;
    for (int rep = 0; rep < 40; rep++) {
        CHECK(ra_dataset_batch(x, lb, &d, idx, B, mean, std, p, 1, &rng) == RA_OK, "%s", ra_last_error());
        for (int k = 0; k < B; k++) {
            const int c = which(x + k * BH * BW, images + idx[k] * BH * BW, BH, BW, p, mean, std);
            if (c >= 0) count[c]++;
            else if (c == -1) unmatched++;
            else ambiguous++;
        }
    }
    CHECK(unmatched == 0 && ambiguous == 0, "crop+flip: %d images match no version, %d several",
          unmatched, ambiguous);
    int cmin = 1 << 30, cmax = 0;
    for (int c = 0; c < 50; c++) cmin = count[c] < cmin ? count[c] : cmin, cmax = count[c] > cmax ? count[c] : cmax;
    /* 2560 draws over 50: 51.2 each, sd 7.1 */
    CHECK(cmin >= 20 && cmax <= 90, "crop+flip counts from %d to %d", cmin, cmax);

    /* the documented stream: i, j, then the mirror bit, per sample */
    {
        ra_rng mine = rng;
        ra_dataset_batch(x, lb, &d, idx, B, mean, std, p, 1, &rng);
        int off = 0;
        for (int k = 0; k < B; k++) {
            const int i = (int)below(&mine, 2 * p + 1), j = (int)below(&mine, 2 * p + 1);
            const int f = (int)(ra_rng_u64(&mine) >> 63);
            off += which(x + k * BH * BW, images + idx[k] * BH * BW, BH, BW, p, mean, std) !=
                   (i * (2 * p + 1) + j) * 2 + f;
        }
        CHECK(off == 0 && !memcmp(&mine, &rng, sizeof rng),
              "crop+flip: %d images not as the documented draws", off);
    }

    /* pad only: never mirrored, all 25 offsets; flip only: the top bit of
     * one ra_rng_u64 per sample, as documented */
    int mirrored = 0, offs[25] = {0};
    for (int rep = 0; rep < 20; rep++) {
        ra_dataset_batch(x, lb, &d, idx, B, mean, std, p, 0, &rng);
        for (int k = 0; k < B; k++) {
            const int c = which(x + k * BH * BW, images + idx[k] * BH * BW, BH, BW, p, mean, std);
            if (c < 0) unmatched++;
            else mirrored += c & 1, offs[c / 2]++;
        }
    }
    int seen = 0;
    for (int c = 0; c < 25; c++) seen += offs[c] > 0;
    CHECK(unmatched == 0 && mirrored == 0 && seen == 25, "pad only: %d unmatched, %d mirrored, %d offsets",
          unmatched, mirrored, seen);
    ra_rng mine = rng;
    ra_dataset_batch(x, lb, &d, idx, B, mean, std, 0, 1, &rng);
    int flips = 0, wrong_flip = 0;
    for (int k = 0; k < B; k++) {
        const int f = (int)(ra_rng_u64(&mine) >> 63);
        const int c = which(x + k * BH * BW, images + idx[k] * BH * BW, BH, BW, 0, mean, std);
        flips += f;
        wrong_flip += c != f;
    }
    CHECK(wrong_flip == 0 && flips > 10 && flips < B - 10, "flip only: %d wrong, %d flips", wrong_flip, flips);
    CHECK(!memcmp(&mine, &rng, sizeof rng), "flip only: draws differ from the documented order");

    /* padding wider than the image */
    ra_dataset_batch(x, lb, &d, idx, 8, mean, std, 7, 1, &rng);
    unmatched = 0;
    for (int k = 0; k < 8; k++)
        unmatched += which(x + k * BH * BW, images + idx[k] * BH * BW, BH, BW, 7, mean, std) == -1;
    CHECK(unmatched == 0, "pad 7: %d images match no version", unmatched);

    /* the same rng state, the same batch; another, another */
    ra_rng r1, r2, r3;
    ra_rng_seed(&r1, 99), ra_rng_seed(&r2, 99), ra_rng_seed(&r3, 100);
    ra_dataset_batch(x, lb, &d, idx, B, mean, std, 2, 1, &r1);
    ra_dataset_batch(x2, lb, &d, idx, B, mean, std, 2, 1, &r2);
    CHECK(!memcmp(x, x2, sizeof x), "same seed, different batches");
    ra_dataset_batch(x2, lb, &d, idx, B, mean, std, 2, 1, &r3);
    CHECK(memcmp(x, x2, sizeof x) != 0, "different seeds, same batch");

    /* refusals */
    CHECK(ra_dataset_batch(x, lb, &d, idx, 0, mean, std, 0, 0, NULL) == RA_ERR_ARG, "b = 0");
    CHECK(ra_dataset_batch(x, lb, &d, (const int64_t[]){0, BN}, 2, mean, std, 0, 0, NULL) == RA_ERR_ARG, "index n");
    CHECK(ra_dataset_batch(x, lb, &d, (const int64_t[]){-1}, 1, mean, std, 0, 0, NULL) == RA_ERR_ARG, "index -1");
    CHECK(ra_dataset_batch(x, lb, &d, idx, 1, mean, 0.0f, 0, 0, NULL) == RA_ERR_ARG, "std 0");
    CHECK(ra_dataset_batch(x, lb, &d, idx, 1, mean, NAN, 0, 0, NULL) == RA_ERR_ARG, "std NaN");
    CHECK(ra_dataset_batch(x, lb, &d, idx, 1, INFINITY, std, 0, 0, NULL) == RA_ERR_ARG, "mean inf");
    CHECK(ra_dataset_batch(x, lb, &d, idx, 1, mean, std, -1, 0, &rng) == RA_ERR_ARG, "pad -1");
    CHECK(ra_dataset_batch(x, lb, &d, idx, 1, mean, std, 2, 0, NULL) == RA_ERR_ARG, "crop, rng NULL");
    CHECK(ra_dataset_batch(x, lb, &d, idx, 1, mean, std, 0, 1, NULL) == RA_ERR_ARG, "flip, rng NULL");
    CHECK(ra_dataset_batch(x, lb, NULL, idx, 1, mean, std, 0, 0, NULL) == RA_ERR_ARG, "NULL dataset");
}

/* ---- shuffle ----------------------------------------------------------- */

static void shuffles(void) {
    enum { SN = 1000 };
    static int64_t a[SN], b[SN];
    static char seen[SN];
    ra_rng r1, r2;
    ra_rng_seed(&r1, 5), ra_rng_seed(&r2, 5);
    ra_shuffle(a, SN, &r1);
    ra_shuffle(b, SN, &r2);
    int ok = 1, fixed = 0;
    for (int i = 0; i < SN; i++) {
        if (a[i] < 0 || a[i] >= SN || seen[a[i]]) ok = 0;
        else seen[a[i]] = 1;
        fixed += a[i] == i;
    }
    CHECK(ok, "not a permutation");
    CHECK(fixed < 10, "%d fixed points: not shuffled", fixed);
    CHECK(!memcmp(a, b, sizeof a), "same seed, different permutations");
    ra_shuffle(b, SN, &r2);
    CHECK(memcmp(a, b, sizeof a) != 0, "the next epoch repeats the order");
    int64_t one = 42;
    ra_shuffle(&one, 1, &r1);
    CHECK(one == 0, "n = 1 gives %lld", (long long)one);
    ra_shuffle(NULL, 0, &r1);
    /* the documented algorithm, replayed */
    {
        ra_rng r4, r5;
        ra_rng_seed(&r4, 11), ra_rng_seed(&r5, 11);
        ra_shuffle(a, SN, &r4);
        for (int i = 0; i < SN; i++) b[i] = i;
        for (int i = SN - 1; i > 0; i--) {
            const int j = (int)below(&r5, (uint64_t)i + 1);
            const int64_t t = b[i];
            b[i] = b[j], b[j] = t;
        }
        CHECK(!memcmp(a, b, sizeof a) && !memcmp(&r4, &r5, sizeof r4), "shuffle: not the documented algorithm");
    }
    /* all 6 orders of 3, uniformly: 6000 draws, 1000 each, sd 29 */
    int cnt[6] = {0};
    for (int t = 0; t < 6000; t++) {
        int64_t p3[3];
        ra_shuffle(p3, 3, &r1);
        cnt[p3[0] * 2 + (p3[1] > p3[2])]++;
    }
    int lo = 1 << 30, hi = 0;
    for (int i = 0; i < 6; i++) lo = cnt[i] < lo ? cnt[i] : lo, hi = cnt[i] > hi ? cnt[i] : hi;
    CHECK(lo > 850 && hi < 1150, "orders of 3 counted from %d to %d", lo, hi);
}

/* ---- the real Fashion-MNIST ------------------------------------------- */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void fashion_mnist(const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        printf("note: %s absent (apt-get install dataset-fashion-mnist): real data not checked\n", dir);
        return;
    }
    const char *splits[2] = {"train", "test"};
    const int64_t want[2] = {60000, 10000};
    for (int s = 0; s < 2; s++) {
        ra_dataset d;
        const double t0 = now();
        const ra_status rs = ra_dataset_load_dir(&d, dir, splits[s]);
        const double t1 = now();
        CHECK(rs == RA_OK, "%s: %s", splits[s], ra_last_error());
        if (rs != RA_OK) continue;
        printf("fashion-mnist %s: %lld images %dx%d, %d classes, loaded in %.3f s\n", splits[s],
               (long long)d.n, d.h, d.w, d.classes, t1 - t0);
        CHECK(d.n == want[s] && d.h == 28 && d.w == 28 && d.classes == 10, "%s: %lld %dx%d %d",
              splits[s], (long long)d.n, d.h, d.w, d.classes);
        int64_t cnt[256] = {0};
        for (int64_t i = 0; i < d.n; i++) cnt[d.labels[i]]++;
        int even = 1;
        for (int c = 0; c < 10; c++) even &= cnt[c] == want[s] / 10;
        CHECK(even, "%s: class counts %lld %lld ... %lld", splits[s], (long long)cnt[0],
              (long long)cnt[1], (long long)cnt[9]);
        double sum = 0;
        for (int64_t i = 0; i < d.n * d.h * d.w; i++) sum += d.images[i];
        const double mean = sum / (double)(d.n * d.h * d.w) / 255.0;
        printf("fashion-mnist %s: mean pixel %.4f\n", splits[s], mean);
        if (s == 0) {
            CHECK(fabs(mean - 0.2860) <= 0.0005, "train mean %.5f, expected 0.2860", mean);
            /* a training step's batch: 128 images, crop 4 and flip */
            enum { B = 128 };
            static float x[B * 28 * 28];
            int32_t lb[B];
            int64_t *perm = malloc(sizeof(int64_t) * d.n);
            ra_rng rng;
            ra_rng_seed(&rng, 3);
            ra_shuffle(perm, d.n, &rng);
            const double t2 = now();
            int okb = 1;
            for (int k = 0; k + B <= d.n; k += B)
                okb &= ra_dataset_batch(x, lb, &d, perm + k, B, 0.2860f, 0.3530f, 4, 1, &rng) == RA_OK;
            const double t3 = now();
            CHECK(okb, "train batches: %s", ra_last_error());
            printf("fashion-mnist train: one epoch of batches (128, crop 4, flip) in %.3f s\n", t3 - t2);
            free(perm);
        }
        ra_dataset_free(&d);
    }
}

/* RGB batches: each channel is the grey batch of that channel's planes
 * with the same draws (one crop window and one mirror per image). */
static void rgb_batches(void) {
    enum { RN = 3, RH = 5, RW = 7 };
    static uint8_t rgb[RN * 3 * RH * RW], grey[3][RN * RH * RW], labels[RN] = {0, 1, 2};
    for (int i = 0; i < RN * 3 * RH * RW; i++) rgb[i] = (uint8_t)(i * 37 % 251);
    for (int n = 0; n < RN; n++)
        for (int c = 0; c < 3; c++)
            memcpy(grey[c] + n * RH * RW, rgb + (n * 3 + c) * RH * RW, RH * RW);
    const ra_dataset d = {RN, RH, RW, 3, rgb, labels, 3};
    float x[2 * 3 * RH * RW], g[2 * RH * RW];
    int32_t lb[2], lg[2];
    const int64_t idx[2] = {2, 0};
    for (int trial = 0; trial < 8; trial++) {
        ra_rng r1, r2;
        ra_rng_seed(&r1, (uint64_t)trial), ra_rng_seed(&r2, (uint64_t)trial);
        CHECK(ra_dataset_batch(x, lb, &d, idx, 2, 0.4f, 0.3f, 2, 1, &r1) == RA_OK, "rgb batch");
        for (int c = 0; c < 3; c++) {
            const ra_dataset dg = {RN, RH, RW, 3, grey[c], labels, 1};
            ra_rng_seed(&r2, (uint64_t)trial);
            CHECK(ra_dataset_batch(g, lg, &dg, idx, 2, 0.4f, 0.3f, 2, 1, &r2) == RA_OK, "grey batch");
            int same = lb[0] == 2 && lb[1] == 0;
            for (int k = 0; k < 2; k++)
                same &= !memcmp(x + (k * 3 + c) * RH * RW, g + k * RH * RW, sizeof(float) * RH * RW);
            CHECK(same, "trial %d: channel %d is not the grey batch of its planes", trial, c);
        }
    }
}

int main(int argc, char **argv) {
    rgb_batches();
    (void)argc, (void)argv;
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/relattn-data-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    round_trips();
    malformed();
    batches();
    shuffles();
    const char *fm = getenv("RELATTN_FASHION_MNIST");
    fashion_mnist(fm && *fm ? fm : "/usr/share/datasets/fashion-mnist");
    for (int i = 0; i < nmade; i++) unlink(made[i]);
    if (rmdir(tmpdir) != 0) fprintf(stderr, "note: %s not removed\n", tmpdir);
    return check_done();
}
