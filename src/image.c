/* image.c - images in, model inputs out (for classification).
 *
 * Decoding is stb_image's (Debian's libstb): PNG, JPEG, BMP, GIF, ... The
 * size is read from the header and checked against a limit BEFORE any pixel
 * is decoded, so a small file claiming a huge image costs nothing.
 * Preprocessing is the usual ImageNet evaluation recipe (timm and
 * torchvision): resize so the shorter side is `resize`, centre crop
 * `crop` x `crop`, scale to [0, 1], normalise per channel. */
#include "internal.h"

#include <math.h>
#include <stb_image.h>
#include <stdlib.h>
#include <string.h>

ra_status ra_image_load(float **rgb, int *w, int *h, const char *path, int64_t max_pixels) {
    if (!rgb || !w || !h || !path) return ra_fail(RA_ERR_ARG, "image: NULL argument");
    *rgb = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ra_fail(RA_ERR_IO, "cannot open image '%s'", path);
    int iw, ih, comp;
    if (!stbi_info_from_file(f, &iw, &ih, &comp)) {
        fclose(f);
        return ra_fail(RA_ERR_FORMAT, "image '%s': %s", path, stbi_failure_reason());
    }
    if (iw < 1 || ih < 1 || (int64_t)iw * ih > max_pixels) {
        fclose(f);
        return ra_fail(RA_ERR_FORMAT, "image '%s' is %dx%d, above the limit of %lld pixels",
                       path, iw, ih, (long long)max_pixels);
    }
    unsigned char *px = stbi_load_from_file(f, &iw, &ih, &comp, 3);
    fclose(f);
    if (!px) return ra_fail(RA_ERR_FORMAT, "image '%s': %s", path, stbi_failure_reason());
    float *out = ra_alloc((size_t)iw * ih * 3, sizeof *out);
    if (!out) {
        stbi_image_free(px);
        return ra_fail(RA_ERR_NOMEM, "image '%s': out of memory", path);
    }
    for (size_t i = 0; i < (size_t)iw * ih * 3; i++) out[i] = px[i] / 255.0f;
    stbi_image_free(px);
    *rgb = out, *w = iw, *h = ih;
    return RA_OK;
}

/* Resampling weights along one axis, as PIL's bilinear filter does: a
 * triangle of support 1, widened by the scale when shrinking (so that
 * downscaling averages instead of aliasing). Output pixel o covers source
 * positions [lo, lo + n) with weights w (normalised). */
typedef struct { int lo, n; float *w; } taps;

static taps *make_taps(int in, int out, double offset, double scale, int *maxn) {
    const double support = scale > 1 ? scale : 1;
    *maxn = (int)ceil(support) * 2 + 1;
    taps *t = malloc(sizeof *t * (size_t)out);
    float *w = malloc(sizeof *w * (size_t)out * (size_t)*maxn);
    if (!t || !w) return free(t), free(w), NULL;
    for (int o = 0; o < out; o++) {
        double center = (o + offset + 0.5) * scale;
        int lo = (int)floor(center - support + 0.5), hi = (int)floor(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        t[o].lo = lo, t[o].n = hi - lo, t[o].w = w + (size_t)o * *maxn;
        double sum = 0;
        for (int i = 0; i < t[o].n; i++) {
            double x = fabs((lo + i + 0.5 - center) / support);
            t[o].w[i] = (float)(x < 1 ? 1 - x : 0);
            sum += t[o].w[i];
        }
        for (int i = 0; i < t[o].n; i++) t[o].w[i] = sum > 0 ? (float)(t[o].w[i] / sum) : 0;
    }
    return t;
}

static void free_taps(taps *t) {
    if (t) free(t[0].w);
    free(t);
}

ra_status ra_image_preprocess(float *out, const float *rgb, int w, int h, int resize, int crop,
                              const float mean[3], const float std[3]) {
    if (!out || !rgb || w < 1 || h < 1 || resize < 1 || crop < 1 || crop > resize)
        return ra_fail(RA_ERR_ARG, "image preprocess: image %dx%d, resize %d, crop %d", w, h,
                       resize, crop);
    for (int c = 0; c < 3; c++)
        if (!(std[c] > 0)) return ra_fail(RA_ERR_ARG, "image preprocess: std must be > 0");
    /* shorter side -> resize, keeping the aspect ratio */
    int rw, rh;
    if (w <= h) rw = resize, rh = (int)((int64_t)resize * h / w);
    else rh = resize, rw = (int)((int64_t)resize * w / h);
    if (rh < crop) rh = crop;
    if (rw < crop) rw = crop;
    /* only the crop window of the resized image is computed */
    /* torchvision CenterCrop: int(round((size - crop) / 2)), half to even */
    const int x0 = (int)rint((rw - crop) / 2.0), y0 = (int)rint((rh - crop) / 2.0);
    int nx, ny;
    taps *tx = make_taps(w, crop, x0, (double)w / rw, &nx);
    taps *ty = make_taps(h, crop, y0, (double)h / rh, &ny);
    float *rows = malloc(sizeof *rows * (size_t)h * crop * 3);   /* horizontal pass */
    if (!tx || !ty || !rows) {
        free_taps(tx), free_taps(ty), free(rows);
        return ra_fail(RA_ERR_NOMEM, "image preprocess: out of memory");
    }
    for (int y = 0; y < h; y++)
        for (int o = 0; o < crop; o++)
            for (int c = 0; c < 3; c++) {
                float acc = 0;
                for (int i = 0; i < tx[o].n; i++)
                    acc += tx[o].w[i] * rgb[((size_t)y * w + tx[o].lo + i) * 3 + c];
                rows[((size_t)y * crop + o) * 3 + c] = acc;
            }
    for (int o = 0; o < crop; o++)
        for (int x = 0; x < crop; x++)
            for (int c = 0; c < 3; c++) {
                float acc = 0;
                for (int i = 0; i < ty[o].n; i++)
                    acc += ty[o].w[i] * rows[((size_t)(ty[o].lo + i) * crop + x) * 3 + c];
                out[((size_t)c * crop + o) * crop + x] = (acc - mean[c]) / std[c];
            }
    free_taps(tx), free_taps(ty), free(rows);
    return RA_OK;
}
