/* folder.c - image-folder datasets: DIR/<class>/... as torchvision's
 * ImageFolder lists them (docs/reference.md, "Image folders").
 *
 * The classes are DIR's subdirectories (symbolic links to directories
 * included), sorted by name (bytes, which is Unicode code point order for
 * UTF-8, Python's sort); each class's files are found by walking its
 * directory (links followed), sorted by (directory path, file name) as
 * sorted(os.walk(...)) then sorted(fnames) give them, and kept when their
 * name ends, in any case, with one of ImageFolder's image extensions. The
 * class index is the rank of the name.
 *
 * Everything in the folder is untrusted: a walk never enters a directory
 * it is already inside (a symbolic link loop is walked once), stops at
 * RA_FOLDER_MAX_DEPTH levels, and the counts and lengths are bounded
 * (RA_FOLDER_MAX_FILES, RA_FOLDER_MAX_CLASSES, PATH_MAX); hidden entries
 * are listed as ImageFolder lists them; a class with no image is refused
 * by name, as ImageFolder refuses it.
 *
 * A video folder (ra_video_folder_scan) has the same classes; each class's
 * videos are its own entries, not walked: the files named as videos
 * (video_name) and the subfolders (folders of frames), sorted by name. */
#define _POSIX_C_SOURCE 200809L
#include "base/internal.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define RA_FOLDER_MAX_DEPTH 32

typedef struct {
    char **v;
    int64_t n, cap;
} names;

static ra_status push(names *l, const char *s) {
    if (l->n == RA_FOLDER_MAX_FILES)
        return rai_fail(RA_ERR_FORMAT, "more than %d files in the image folder",
                        RA_FOLDER_MAX_FILES);
    if (l->n == l->cap) {
        const int64_t cap = l->cap ? 2 * l->cap : 64;
        char **v = realloc(l->v, sizeof *v * (size_t)cap);
        if (!v) return rai_fail(RA_ERR_NOMEM, "image folder: out of memory");
        l->v = v, l->cap = cap;
    }
    if (!(l->v[l->n] = malloc(strlen(s) + 1))) return rai_fail(RA_ERR_NOMEM, "image folder: out of memory");
    strcpy(l->v[l->n++], s);
    return RA_OK;
}

static void names_free(names *l) {
    for (int64_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    *l = (names){0};
}

static int by_bytes(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ImageFolder's IMG_EXTENSIONS, matched without case. */
static int image_name(const char *s) {
    static const char *const ext[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif",
                                      ".tiff", ".webp"};
    const size_t n = strlen(s);
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
        const size_t k = strlen(ext[i]);
        if (n >= k && !strcasecmp(s + n - k, ext[i])) return 1;
    }
    return 0;
}

/* The containers relattn's FFmpeg build reads (docs/reference.md, "Videos"),
 * by their usual extensions, matched without case. */
static int video_name(const char *s) {
    static const char *const ext[] = {".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".mpg",
                                      ".mpeg", ".ts", ".ivf", ".flv", ".nut", ".ogv", ".ogg",
                                      ".gif", ".y4m", ".mjpeg", ".h264", ".264", ".hevc"};
    const size_t n = strlen(s);
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
        const size_t k = strlen(ext[i]);
        if (n >= k && !strcasecmp(s + n - k, ext[i])) return 1;
    }
    return 0;
}

/* The videos of a class folder into out, in no order: its video files and
 * its subfolders (frames), not hidden, not walked further. */
static ra_status list_videos(names *out, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return rai_fail(RA_ERR_IO, "cannot read '%s': %s", dir, strerror(errno));
    ra_status s = RA_OK;
    char path[PATH_MAX];
    for (struct dirent *e; !s && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) {
            s = rai_fail(RA_ERR_FORMAT, "a path in '%.200s' is longer than %d bytes", dir, PATH_MAX);
            break;
        }
        struct stat es;
        if ((stat(path, &es) == 0 && S_ISDIR(es.st_mode)) || video_name(e->d_name))
            s = push(out, path);
    }
    closedir(d);
    return s;
}

typedef struct {
    dev_t dev[RA_FOLDER_MAX_DEPTH + 2];
    ino_t ino[RA_FOLDER_MAX_DEPTH + 2];
} walk_path;

/* The image files of dir and below into out, in no order: the caller
 * sorts them as sorted(os.walk) gives them (by_dir_then_name). */
static ra_status walk(names *out, const char *dir, int depth, walk_path *wp) {
    struct stat st;
    if (stat(dir, &st) != 0) return rai_fail(RA_ERR_IO, "cannot read '%s': %s", dir, strerror(errno));
    for (int i = 0; i < depth; i++)
        if (wp->dev[i] == st.st_dev && wp->ino[i] == st.st_ino) return RA_OK;   /* a loop */
    if (depth > RA_FOLDER_MAX_DEPTH + 1)
        return rai_fail(RA_ERR_FORMAT, "'%s': folders nested more than %d deep", dir,
                        RA_FOLDER_MAX_DEPTH);
    wp->dev[depth] = st.st_dev, wp->ino[depth] = st.st_ino;
    DIR *d = opendir(dir);
    if (!d) return rai_fail(RA_ERR_IO, "cannot read '%s': %s", dir, strerror(errno));
    ra_status s = RA_OK;
    char path[PATH_MAX];
    names sub = {0};
    for (struct dirent *e; !s && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) {
            s = rai_fail(RA_ERR_FORMAT, "a path in '%.200s' is longer than %d bytes", dir, PATH_MAX);
            break;
        }
        struct stat es;
        /* a dangling link is a file to os.walk: listed, and refused when read */
        if (stat(path, &es) == 0 && S_ISDIR(es.st_mode)) s = push(&sub, path);
        else if (image_name(e->d_name)) s = push(out, path);
    }
    closedir(d);
    for (int64_t i = 0; !s && i < sub.n; i++) s = walk(out, sub.v[i], depth + 1, wp);
    names_free(&sub);
    return s;
}

/* os.walk's roots sorted, then names: compare the directory parts, then
 * the names. */
static int by_dir_then_name(const void *a, const void *b) {
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    const char *sx = strrchr(x, '/'), *sy = strrchr(y, '/');
    const size_t dx = (size_t)(sx - x), dy = (size_t)(sy - y);
    const int c = strncmp(x, y, dx < dy ? dx : dy);
    if (c) return c;
    if (dx != dy) return dx < dy ? -1 : 1;
    return strcmp(sx + 1, sy + 1);
}

void ra_image_folder_free(ra_image_folder *f) {
    if (!f) return;
    for (int64_t i = 0; f->paths && i < f->n; i++) free(f->paths[i]);
    for (int i = 0; f->class_names && i < f->classes; i++) free(f->class_names[i]);
    free(f->paths), free(f->labels), free(f->class_names);
    *f = (ra_image_folder){0};
}

/* The classes of dir and their images (video 0) or videos (video 1). */
static ra_status scan(ra_image_folder *f, const char *dir, int video) {
    if (!f || !dir) return rai_fail(RA_ERR_ARG, "image folder: NULL argument");
    *f = (ra_image_folder){0};
    DIR *d = opendir(dir);
    if (!d) return rai_fail(RA_ERR_IO, "cannot read the image folder '%s': %s", dir, strerror(errno));
    names cls = {0};
    ra_status s = RA_OK;
    char path[PATH_MAX];
    for (struct dirent *e; !s && (e = readdir(d));) {
        struct stat es;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path)
            s = rai_fail(RA_ERR_FORMAT, "a path in '%.200s' is longer than %d bytes", dir, PATH_MAX);
        else if (stat(path, &es) == 0 && S_ISDIR(es.st_mode)) s = push(&cls, e->d_name);
    }
    closedir(d);
    if (!s && cls.n == 0)
        s = rai_fail(RA_ERR_FORMAT, "'%s' has no class folders (DIR/<class>/<image>)", dir);
    if (!s && cls.n > RA_FOLDER_MAX_CLASSES)
        s = rai_fail(RA_ERR_FORMAT, "'%s' has %lld class folders, more than %d", dir,
                     (long long)cls.n, RA_FOLDER_MAX_CLASSES);
    if (s) {
        names_free(&cls);
        return s;
    }
    qsort(cls.v, (size_t)cls.n, sizeof *cls.v, by_bytes);
    names files = {0};
    int32_t *labels = NULL;
    walk_path wp;   /* DIR itself is on every walk's path: no link leads back into it */
    struct stat ds;
    if (stat(dir, &ds) != 0) s = rai_fail(RA_ERR_IO, "cannot read '%s': %s", dir, strerror(errno));
    if (!s) wp.dev[0] = ds.st_dev, wp.ino[0] = ds.st_ino;
    for (int64_t c = 0; !s && c < cls.n; c++) {
        const int64_t before = files.n;
        snprintf(path, sizeof path, "%s/%s", dir, cls.v[c]);
        s = video ? list_videos(&files, path) : walk(&files, path, 1, &wp);
        if (s) break;
        if (files.n == before) {
            s = rai_fail(RA_ERR_FORMAT, video ? "class folder '%s' holds no video (.mp4, .mkv, "
                         ".webm, .avi, ... or a folder of frames)"
                         : "class folder '%s' holds no image (.png, .jpg, .jpeg, ...)", path);
            break;
        }
        qsort(files.v + before, (size_t)(files.n - before), sizeof *files.v,
              video ? by_bytes : by_dir_then_name);
        int32_t *l = realloc(labels, sizeof *l * (size_t)files.n);
        if (!l) {
            s = rai_fail(RA_ERR_NOMEM, "image folder: out of memory");
            break;
        }
        labels = l;
        for (int64_t i = before; i < files.n; i++) labels[i] = (int32_t)c;
    }
    if (s) {
        names_free(&cls), names_free(&files), free(labels);
        return s;
    }
    *f = (ra_image_folder){files.n, (int)cls.n, files.v, labels, cls.v};
    return RA_OK;
}

ra_status ra_image_folder_scan(ra_image_folder *f, const char *dir) { return scan(f, dir, 0); }
ra_status ra_video_folder_scan(ra_image_folder *f, const char *dir) { return scan(f, dir, 1); }

/* ---- batches of images ------------------------------------------------------------ */

typedef struct {
    float *x;
    const ra_image_folder *f;
    const int64_t *idx;
    const ra_transform *t;
    int channels, ow, oh;
    uint8_t *bad;
    int64_t max_pixels;
} batch_job;

/* Image s of the batch into its slot: decoded and transformed; a failure
 * names the file (or, with bad, marks it and leaves zeros). */
static ra_status batch_one(void *ctx, int s) {
    const batch_job *j = ctx;
    const int64_t i = j->idx[s];
    const size_t size = (size_t)j->channels * j->ow * j->oh;
    float *x = j->x + (size_t)s * size;
    uint8_t *px = NULL;
    int w, h, ow, oh;
    ra_status st = ra_image_load_u8(&px, &w, &h, j->f->paths[i], j->max_pixels);
    if (!st) st = ra_transform_size(j->t, w, h, &ow, &oh);
    if (!st && (ow != j->ow || oh != j->oh))
        st = rai_fail(RA_ERR_ARG, "image '%s' transforms to %dx%d, not %dx%d: the transform needs "
                      "a crop or a fixed size to batch", j->f->paths[i], ow, oh, j->ow, j->oh);
    if (!st) st = ra_transform_apply(x, j->t, px, w, h);
    free(px);
    if (st && j->bad && st != RA_ERR_NOMEM && st != RA_ERR_ARG) {
        j->bad[s] = 1;
        memset(x, 0, sizeof *x * size);
        return RA_OK;
    }
    if (j->bad) j->bad[s] = 0;
    return st;
}

ra_status ra_image_folder_batch(float *x, const ra_image_folder *f, const int64_t *idx, int b,
                                const ra_transform *t, int ow, int oh, uint8_t *bad) {
    if (!x || !f || !idx || !t || b < 1 || ow < 1 || oh < 1)
        return rai_fail(RA_ERR_ARG, "image folder batch: bad argument");
    for (int s = 0; s < b; s++)
        if (idx[s] < 0 || idx[s] >= f->n)
            return rai_fail(RA_ERR_ARG, "image folder batch: index %lld outside 0..%lld",
                            (long long)idx[s], (long long)f->n - 1);
    batch_job j = {x, f, idx, t, t->grey ? 1 : 3, ow, oh, bad, (int64_t)64 << 20};
    return rai_run_tasks(b, ra_threads_get(), batch_one, &j);
}

/* ---- a dataset of a folder's images, at one size ------------------------------------ */

typedef struct {
    const ra_image_folder *f;
    const int64_t *idx;
    int64_t n;
    int size, tasks;
    ra_transform t;
    uint8_t *px;      /* (n, 3, size, size) */
    uint8_t *state;   /* (n): 0 colour, 1 grey, 2 bad */
    int skip_bad;
} folder_load;

static ra_status load_part(void *ctx, int part) {
    folder_load *j = ctx;
    const int64_t i0 = j->n * part / j->tasks, i1 = j->n * (part + 1) / j->tasks;
    const size_t plane = (size_t)j->size * j->size;
    uint8_t *hwc = malloc(plane * 3);
    if (!hwc) return rai_fail(RA_ERR_NOMEM, "image folder: out of memory");
    ra_status st = RA_OK;
    for (int64_t i = i0; i < i1 && !st; i++) {
        const char *path = j->f->paths[j->idx ? j->idx[i] : i];
        uint8_t *rgb = NULL;
        int w, h;
        st = ra_image_load_u8(&rgb, &w, &h, path, (int64_t)64 << 20);
        if (!st) st = rai_transform_bytes(hwc, &j->t, rgb, w, h);
        free(rgb);
        if (st && j->skip_bad && st != RA_ERR_NOMEM) {
            j->state[i] = 2, st = RA_OK;
            continue;
        }
        int grey = 1;
        uint8_t *o = j->px + (size_t)i * 3 * plane;
        for (size_t p = 0; !st && p < plane; p++) {
            o[p] = hwc[3 * p], o[plane + p] = hwc[3 * p + 1], o[2 * plane + p] = hwc[3 * p + 2];
            grey &= hwc[3 * p] == hwc[3 * p + 1] && hwc[3 * p] == hwc[3 * p + 2];
        }
        j->state[i] = (uint8_t)grey;
    }
    free(hwc);
    return st;
}

ra_status ra_dataset_from_folder(ra_dataset *d, const ra_image_folder *f, const int64_t *idx,
                                 int64_t n, int size, int skip_bad, int64_t *skipped) {
    if (!d || !f || n < 0 || (!idx && n > f->n)) return rai_fail(RA_ERR_ARG, "dataset from folder: bad argument");
    *d = (ra_dataset){0};
    if (skipped) *skipped = 0;
    if (size < 1 || size > RA_DATASET_MAX_SIDE)
        return rai_fail(RA_ERR_ARG, "dataset from folder: image size %d outside 1..%d", size,
                        RA_DATASET_MAX_SIDE);
    if (f->classes > 256)
        return rai_fail(RA_ERR_FORMAT, "the folder has %d classes; training takes at most 256",
                        f->classes);
    if (n < 1) return rai_fail(RA_ERR_FORMAT, "no images to load");
    for (int64_t i = 0; idx && i < n; i++)
        if (idx[i] < 0 || idx[i] >= f->n) return rai_fail(RA_ERR_ARG, "dataset from folder: index");
    if ((double)n * 3 * size * size > (double)RA_DATASET_MAX_BYTES)
        return rai_fail(RA_ERR_FORMAT, "%lld images of %dx%d are more than %lld bytes", (long long)n,
                        size, size, (long long)RA_DATASET_MAX_BYTES);
    folder_load j = {f, idx, n, size, (int)(n < 1024 ? n : 1024),
                     {.resize = RA_RESIZE_SHORTER, .resize_h = size, .interp = RA_INTERP_BILINEAR,
                      .crop = RA_CROP_CENTER_ROUND, .crop_h = size, .crop_w = size},
                     NULL, NULL, skip_bad};
    const size_t plane = (size_t)size * size;
    j.px = malloc((size_t)n * 3 * plane);
    j.state = calloc((size_t)n, 1);
    uint8_t *labels = malloc((size_t)n);
    ra_status st = j.px && j.state && labels ? RA_OK : rai_fail(RA_ERR_NOMEM, "image folder: out of memory");
    if (!st) st = rai_run_tasks(j.tasks, ra_threads_get(), load_part, &j);
    int64_t k = 0;
    int grey = 1;
    for (int64_t i = 0; !st && i < n; i++) grey &= j.state[i] != 0;
    const int C = grey ? 1 : 3;
    for (int64_t i = 0; !st && i < n; i++) {   /* the good ones, in order, C planes each */
        if (j.state[i] == 2) continue;
        memmove(j.px + (size_t)k * C * plane, j.px + (size_t)i * 3 * plane, C * plane);
        labels[k++] = (uint8_t)f->labels[idx ? idx[i] : i];
    }
    if (!st && k == 0) st = rai_fail(RA_ERR_FORMAT, "none of the %lld images could be read", (long long)n);
    free(j.state);
    if (st) {
        free(j.px), free(labels);
        return st;
    }
    uint8_t *px = realloc(j.px, (size_t)k * C * plane);
    *d = (ra_dataset){k, size, size, f->classes, px ? px : j.px, labels, C};
    if (skipped) *skipped = n - k;
    return RA_OK;
}
