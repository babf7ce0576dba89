/* data.c - training data: MNIST-style IDX files in, normalised (and
 * optionally augmented) batches out.
 *
 * IDX (LeCun's format) is a 4-byte magic 0x0000TTRR (T data type, 0x08 for
 * unsigned bytes; R rank), R big-endian 32-bit dimensions, then the data.
 * Files come gzip-compressed or not; zlib's gzread reads both. Every file is
 * untrusted: a header may claim anything, so the buffer grows with the data
 * actually decompressed (doubling, capped at the header's size) and the
 * reading stops one byte past that size, which is how an over-long file is
 * caught without decompressing the rest of it. */
#define _POSIX_C_SOURCE 200809L   /* open, close */
#include "base/internal.h"

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_U8 0x08

/* ---- reading ------------------------------------------------------------ */

/* Classify a short gzread: an I/O error, a corrupt gzip stream, or a plain
 * end of data (0). */
static ra_status gz_failure(gzFile f, const char *path, const char *what) {
    int err = Z_OK;
    const char *msg = gzerror(f, &err);
    if (err == Z_ERRNO) return rai_fail(RA_ERR_IO, "cannot read '%s'", path);
    if (err != Z_OK)
        return rai_fail(RA_ERR_FORMAT, "'%s': corrupt gzip stream while reading %s (%s)",
                        path, what, msg ? msg : "?");
    return RA_OK;
}

/* Read exactly len bytes (< INT_MAX); *got receives what was read. */
static ra_status gz_read_all(gzFile f, const char *path, const char *what, void *buf,
                             size_t len, size_t *got) {
    *got = 0;
    while (*got < len) {
        size_t want = len - *got;
        if (want > (1u << 30)) want = 1u << 30;
        const int r = gzread(f, (char *)buf + *got, (unsigned)want);
        if (r < 0) {
            const ra_status s = gz_failure(f, path, what);
            return s != RA_OK ? s : rai_fail(RA_ERR_FORMAT, "'%s': cannot decode %s", path, what);
        }
        if (r == 0) return gz_failure(f, path, what);
        *got += (size_t)r;
    }
    return RA_OK;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* One IDX file of unsigned bytes with the given rank: dims[rank] and the
 * data, malloc'ed in *data. Dimension limits: dims[0] (the count) <=
 * RA_DATASET_MAX_COUNT, the others <= RA_DATASET_MAX_SIDE, the total <=
 * RA_DATASET_MAX_BYTES. */
static ra_status idx_read(uint8_t **data, int64_t dims[3], const char *path, int rank,
                          const char *kind) {
    *data = NULL;
    /* opened here, then handed to zlib: the file read is the one noted */
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    gzFile f = fd >= 0 ? gzdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return rai_fail(RA_ERR_IO, "cannot open %s file '%s'", kind, path);
    }
    rai_note_read(fd, path);
    gzbuffer(f, 1 << 18);
    ra_status s;
    unsigned char head[16];
    size_t got;
    uint8_t *buf = NULL;
    const size_t hlen = 4 + 4 * (size_t)rank;
    if ((s = gz_read_all(f, path, "the header", head, hlen, &got)) != RA_OK) goto done;
    if (got < hlen) {
        s = rai_fail(RA_ERR_FORMAT, "'%s': %zu bytes, too short for an IDX %s header", path,
                     got, kind);
        goto done;
    }
    if (head[0] != 0 || head[1] != 0) {
        s = rai_fail(RA_ERR_FORMAT, "'%s': not an IDX file (magic %02x%02x%02x%02x)", path,
                     head[0], head[1], head[2], head[3]);
        goto done;
    }
    if (head[2] != IDX_U8) {
        s = rai_fail(RA_ERR_FORMAT,
                     "'%s': IDX data type 0x%02x, expected unsigned bytes (0x08) for %s", path,
                     head[2], kind);
        goto done;
    }
    if (head[3] != rank) {
        s = rai_fail(RA_ERR_FORMAT, "'%s': IDX rank %d, expected %d for %s (magic 0x%08x)",
                     path, head[3], rank, kind, 0x800u | (unsigned)rank);
        goto done;
    }
    int64_t total = 1;
    for (int i = 0; i < rank; i++) {
        const uint32_t v = be32(head + 4 + 4 * i);
        const int64_t max = i == 0 ? RA_DATASET_MAX_COUNT : RA_DATASET_MAX_SIDE;
        if (v < 1 || v > max) {
            s = rai_fail(RA_ERR_FORMAT, "'%s': dimension %d is %u, outside [1, %lld]", path, i,
                         v, (long long)max);
            goto done;
        }
        dims[i] = v;
        total *= v;   /* <= 1e8 * 4096 * 4096: no overflow */
    }
    if (total > RA_DATASET_MAX_BYTES) {
        s = rai_fail(RA_ERR_FORMAT, "'%s': %lld bytes of data claimed, above the limit of %lld",
                     path, (long long)total, (long long)RA_DATASET_MAX_BYTES);
        goto done;
    }
    /* grow with the data actually there: a lying header costs little */
    size_t cap = 0, have = 0;
    const size_t need = (size_t)total;
    while (have < need) {
        if (have == cap) {
            size_t ncap = cap ? cap * 2 : (size_t)1 << 20;
            if (ncap > need) ncap = need;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                s = rai_fail(RA_ERR_NOMEM, "'%s': out of memory for %zu bytes", path, ncap);
                goto done;
            }
            buf = nb, cap = ncap;
        }
        if ((s = gz_read_all(f, path, "the data", buf + have, cap - have, &got)) != RA_OK)
            goto done;
        have += got;
        if (have < cap) {
            s = rai_fail(RA_ERR_FORMAT, "'%s': truncated: the header says %zu bytes of %s, "
                         "the file holds %zu", path, need, kind, have);
            goto done;
        }
    }
    /* one byte more must not exist; reaching the end also checks the gzip
     * trailer (CRC and length) */
    unsigned char extra;
    if ((s = gz_read_all(f, path, "the end of the data", &extra, 1, &got)) != RA_OK) goto done;
    if (got != 0) {
        s = rai_fail(RA_ERR_FORMAT, "'%s': longer than its header says (%zu bytes of %s)",
                     path, need, kind);
        goto done;
    }
    *data = buf;
    buf = NULL;
done:
    free(buf);
    gzclose(f);
    return s;
}

/* ---- datasets ----------------------------------------------------------- */

void ra_dataset_free(ra_dataset *d) {
    if (!d) return;
    free(d->images);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

ra_status ra_dataset_load(ra_dataset *d, const char *images_path, const char *labels_path) {
    if (!d) return rai_fail(RA_ERR_ARG, "dataset: NULL argument");
    memset(d, 0, sizeof *d);
    if (!images_path || !labels_path) return rai_fail(RA_ERR_ARG, "dataset: NULL path");
    int64_t idims[3], ldims[3];
    uint8_t *images, *labels;
    ra_status s = idx_read(&images, idims, images_path, 3, "images");
    if (s != RA_OK) return s;
    if ((s = idx_read(&labels, ldims, labels_path, 1, "labels")) != RA_OK) {
        free(images);
        return s;
    }
    if (ldims[0] != idims[0]) {
        free(images), free(labels);
        return rai_fail(RA_ERR_FORMAT, "'%s' has %lld labels but '%s' has %lld images",
                        labels_path, (long long)ldims[0], images_path, (long long)idims[0]);
    }
    int maxl = 0;
    for (int64_t i = 0; i < ldims[0]; i++) maxl = labels[i] > maxl ? labels[i] : maxl;
    d->n = idims[0];
    d->h = (int)idims[1];
    d->w = (int)idims[2];
    d->c = 1;
    d->classes = maxl + 1;   /* bytes: at most 256 */
    d->images = images;
    d->labels = labels;
    return RA_OK;
}

/* dir/name if it exists, else dir/name.gz if that exists; 0 if neither. */
static int find_file(char *out, size_t size, const char *dir, const char *name) {
    for (int gz = 0; gz < 2; gz++) {
        const int k = snprintf(out, size, "%s/%s%s", dir, name, gz ? ".gz" : "");
        if (k < 0 || (size_t)k >= size) return 0;
        FILE *f = fopen(out, "rb");
        if (f) {
            fclose(f);
            return 1;
        }
    }
    return 0;
}

ra_status ra_dataset_load_dir(ra_dataset *d, const char *dir, const char *split) {
    if (!d) return rai_fail(RA_ERR_ARG, "dataset: NULL argument");
    memset(d, 0, sizeof *d);
    if (!dir || !split) return rai_fail(RA_ERR_ARG, "dataset: NULL directory or split");
    const char *prefix;
    if (!strcmp(split, "train")) prefix = "train";
    else if (!strcmp(split, "test") || !strcmp(split, "t10k")) prefix = "t10k";
    else return rai_fail(RA_ERR_ARG, "dataset split '%s': expected train or test", split);
    char names[2][64], paths[2][4096];
    snprintf(names[0], sizeof names[0], "%s-images-idx3-ubyte", prefix);
    snprintf(names[1], sizeof names[1], "%s-labels-idx1-ubyte", prefix);
    for (int i = 0; i < 2; i++)
        if (!find_file(paths[i], sizeof paths[i], dir, names[i]))
            return rai_fail(RA_ERR_IO, "no %s or %s.gz in '%s'", names[i], names[i], dir);
    return ra_dataset_load(d, paths[0], paths[1]);
}

/* ---- batches ------------------------------------------------------------ */

void ra_shuffle(int64_t *perm, int64_t n, ra_rng *rng) {
    if (!perm || n <= 0) return;
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        const int64_t j = (int64_t)ra_rng_below(rng, (uint64_t)i + 1);
        const int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

ra_status ra_dataset_batch(float *x, int32_t *labels, const ra_dataset *d,
                           const int64_t *idx, int b, float mean, float std,
                           int pad, int flip, ra_rng *rng) {
    if (!x || !labels || !d || !idx || !d->images || !d->labels)
        return rai_fail(RA_ERR_ARG, "batch: NULL argument");
    if (b < 1) return rai_fail(RA_ERR_ARG, "batch: size %d < 1", b);
    if (pad < 0 || pad > RA_DATASET_MAX_SIDE)
        return rai_fail(RA_ERR_ARG, "batch: padding %d outside [0, %d]", pad, RA_DATASET_MAX_SIDE);
    if (!isfinite(mean) || !isfinite(std) || !(std > 0.0f))
        return rai_fail(RA_ERR_ARG, "batch: mean %g, std %g", mean, std);
    if ((pad > 0 || flip) && !rng) return rai_fail(RA_ERR_ARG, "batch: augmentation without rng");
    for (int k = 0; k < b; k++)
        if (idx[k] < 0 || idx[k] >= d->n)
            return rai_fail(RA_ERR_ARG, "batch: index %lld outside [0, %lld)",
                            (long long)idx[k], (long long)d->n);
    /* every output value is one of 256: ToTensor's p / 255 then Normalize,
     * in float32 */
    float lut[256];
    for (int p = 0; p < 256; p++) lut[p] = ((float)p / 255.0f - mean) / std;
    const float zero = lut[0];
    const int h = d->h, w = d->w, C = d->c > 1 ? d->c : 1;
    const size_t plane = (size_t)h * w;
    for (int k = 0; k < b; k++) {
        labels[k] = d->labels[idx[k]];
        /* output (y, c) reads input (y + oy, c + ox), or (y + oy, w-1-c + ox)
         * when mirrored; outside the image it is a padding zero */
        int oy = 0, ox = 0, mirror = 0;
        if (pad > 0) {
            oy = (int)ra_rng_below(rng, 2 * (uint64_t)pad + 1) - pad;
            ox = (int)ra_rng_below(rng, 2 * (uint64_t)pad + 1) - pad;
        }
        if (flip) mirror = (int)(ra_rng_u64(rng) >> 63);
        for (int ch = 0; ch < C; ch++) {   /* every channel the same window */
            const uint8_t *img = d->images + ((size_t)idx[k] * C + ch) * plane;
            float *out = x + ((size_t)k * C + ch) * plane;
            for (int y = 0; y < h; y++) {
                float *o = out + (size_t)y * w;
                const int sy = y + oy;
                if (sy < 0 || sy >= h) {
                    for (int c = 0; c < w; c++) o[c] = zero;
                    continue;
                }
                const uint8_t *row = img + (size_t)sy * w;
                /* source column s = c + ox (plain) must be in [0, w):
                 * c in [max(0, -ox), min(w, w - ox)); mirrored, s = w-1-c + ox
                 * gives the same range of c mirrored: [max(0, ox), min(w, w + ox)) */
                const int lo = mirror ? (ox > 0 ? ox : 0) : (ox < 0 ? -ox : 0);
                const int hi = mirror ? (ox < 0 ? w + ox : w) : (ox > 0 ? w - ox : w);
                int c = 0;
                for (; c < lo && c < w; c++) o[c] = zero;
                if (mirror)
                    for (; c < hi; c++) o[c] = lut[row[w - 1 - c + ox]];
                else
                    for (; c < hi; c++) o[c] = lut[row[c + ox]];
                for (; c < w; c++) o[c] = zero;
            }
        }
    }
    return RA_OK;
}
