/* transform.c - the evaluation transform of an image, as the families'
 * own pipelines compute it (docs/reference.md, "Image transforms").
 *
 * timm, torchvision and transformers all resize 8-bit PIL images, so PIL's
 * Image.resize is the reference of every filter here, to the last unit:
 *   - nearest: each output pixel takes the source pixel under its centre,
 *     the position stepped by repeated addition of the scale in double, as
 *     PIL's ImagingScaleAffine does;
 *   - box, bilinear, hamming, bicubic (a = -0.5), lanczos (3 lobes): two
 *     separable passes, horizontal first, over only the rows the vertical
 *     pass uses; each output pixel a weighted sum of its footprint, the
 *     filter widened by the scale when shrinking (antialiasing), the
 *     weights normalised in double, then fixed point with 22 fraction bits
 *     (rounded half away from zero), the sum started at one half and
 *     clamped to 0..255 after the shift (PIL's Resample.c).
 * Then a centre crop (torchvision: the offset rounded half to even;
 * transformers: floored; a crop larger than the image pads with zeros),
 * the rescale to floats (x / 255 in float32 as torchvision's ToTensor, or
 * x * factor in double as transformers' rescale) and the normalisation
 * (v - mean) / std in float32; for a grey model, PIL's "L" luma of the
 * three planes (which commutes with the resize and with a normalisation
 * that is the same for the three channels). */
#include "base/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846   /* M_PI, which C11 does not define */
#define FRAC_BITS 22   /* 32 bits - 8 for the value - 2 for overshoot */

/* ---- the filters (PIL's, term for term) -------------------------------------- */

static double f_box(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }

static double f_bilinear(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

static double f_hamming(double x) {
    x = fabs(x);
    if (x == 0.0) return 1.0;
    if (x >= 1.0) return 0.0;
    x *= PI;
    return sin(x) / x * (0.54f + 0.46f * cos(x));   /* PIL's float constants */
}

static double f_bicubic(double x) {
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static double sinc(double x) {
    if (x == 0.0) return 1.0;
    x *= PI;
    return sin(x) / x;
}

static double f_lanczos(double x) { return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3) : 0.0; }

typedef struct {
    double (*f)(double);
    double support;
} filter;

static const filter *filter_of(ra_interp i) {
    static const filter box = {f_box, 0.5}, bilinear = {f_bilinear, 1.0},
                        hamming = {f_hamming, 1.0}, bicubic = {f_bicubic, 2.0},
                        lanczos = {f_lanczos, 3.0};
    switch (i) {
    case RA_INTERP_BOX: return &box;
    case RA_INTERP_BILINEAR: return &bilinear;
    case RA_INTERP_HAMMING: return &hamming;
    case RA_INTERP_BICUBIC: return &bicubic;
    case RA_INTERP_LANCZOS: return &lanczos;
    default: return NULL;
    }
}

static const char *const interp_names[] = {"nearest", "lanczos", "bilinear", "bicubic", "box",
                                           "hamming"};

const char *ra_interp_name(ra_interp i) {
    return (unsigned)i < sizeof interp_names / sizeof *interp_names ? interp_names[i] : NULL;
}

int ra_interp_parse(const char *s) {
    for (int i = 0; s && i < (int)(sizeof interp_names / sizeof *interp_names); i++)
        if (!strcmp(s, interp_names[i])) return i;
    if (s && !strcmp(s, "antialias")) return RA_INTERP_LANCZOS;   /* PIL's old name */
    return -1;
}

/* ---- resampling along one axis ------------------------------------------------- */

/* For each of out positions: the first source index, how many, and their
 * fixed-point weights (k[o * ksize ..]). */
typedef struct {
    int ksize;
    int *first, *count;
    int32_t *k;
} taps;

static void taps_free(taps *t) {
    free(t->first), free(t->count), free(t->k);
    *t = (taps){0};
}

static ra_status taps_make(taps *t, int in, int out, const filter *fl) {
    *t = (taps){0};
    const double scale = (double)(float)in / out;   /* PIL: (in1 - in0) in float, then double */
    const double fscale = scale < 1.0 ? 1.0 : scale;
    const double support = fl->support * fscale;
    t->ksize = (int)ceil(support) * 2 + 1;
    double *w = malloc(sizeof *w * (size_t)t->ksize);
    t->first = malloc(sizeof *t->first * (size_t)out);
    t->count = malloc(sizeof *t->count * (size_t)out);
    t->k = calloc((size_t)out * (size_t)t->ksize, sizeof *t->k);
    if (!w || !t->first || !t->count || !t->k) {
        free(w), taps_free(t);
        return rai_fail(RA_ERR_NOMEM, "image resize: out of memory");
    }
    const double inv = 1.0 / fscale;
    for (int o = 0; o < out; o++) {
        const double center = (o + 0.5) * scale;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        const int n = hi - lo;
        double sum = 0;
        for (int i = 0; i < n; i++) sum += w[i] = fl->f((i + lo - center + 0.5) * inv);
        int32_t *k = t->k + (size_t)o * t->ksize;
        for (int i = 0; i < n; i++) {
            const double v = (sum != 0.0 ? w[i] / sum : w[i]) * (1 << FRAC_BITS);
            k[i] = (int32_t)(v < 0 ? v - 0.5 : v + 0.5);
        }
        t->first[o] = lo, t->count[o] = n;
    }
    free(w);
    return RA_OK;
}

static inline uint8_t clip8(int32_t acc) {
    if (acc < 0) return 0;
    acc >>= FRAC_BITS;
    return (uint8_t)(acc > 255 ? 255 : acc);
}

/* The horizontal pass of one row: out (ow, c) from row (w, c). The same
 * integer sums in any order (they are exact), so the channels of RGB are
 * kept apart in three accumulators. */
static void horizontal(uint8_t *o, const uint8_t *row, int ow, size_t c, const taps *th) {
    for (int x = 0; x < ow; x++) {
        const int32_t *k = th->k + (size_t)x * th->ksize;
        const uint8_t *p = row + (size_t)th->first[x] * c;
        for (size_t b = 0; b < c; b++) {
            int32_t acc = 1 << (FRAC_BITS - 1);
            for (int i = 0; i < th->count[x]; i++) acc += p[(size_t)i * c + b] * k[i];
            o[(size_t)x * c + b] = clip8(acc);
        }
    }
}

static void horizontal3(uint8_t *o, const uint8_t *row, int ow, const taps *th) {
    for (int x = 0; x < ow; x++) {
        const int32_t *k = th->k + (size_t)x * th->ksize;
        const uint8_t *p = row + (size_t)th->first[x] * 3;
        int32_t a0 = 1 << (FRAC_BITS - 1), a1 = a0, a2 = a0;
        for (int i = 0; i < th->count[x]; i++, p += 3) {
            const int32_t ki = k[i];
            a0 += p[0] * ki, a1 += p[1] * ki, a2 += p[2] * ki;
        }
        o[3 * x] = clip8(a0), o[3 * x + 1] = clip8(a1), o[3 * x + 2] = clip8(a2);
    }
}

/* ---- the public calls ---------------------------------------------------------- */

/* PIL's nearest: positions stepped by repeated addition, as ImagingScaleAffine. */
static void resize_nearest(uint8_t *out, int ow, int oh, const uint8_t *in, size_t stride, int w,
                           int h, int c, int *xs) {
    const double ax = (double)(float)w / ow, ay = (double)(float)h / oh;
    double xo = ax * 0.5, yo = ay * 0.5;
    for (int x = 0; x < ow; x++, xo += ax) xs[x] = xo < 0 ? 0 : (int)xo < w ? (int)xo : w - 1;
    for (int y = 0; y < oh; y++, yo += ay) {
        const int yi = yo < 0 ? 0 : (int)yo < h ? (int)yo : h - 1;
        const uint8_t *row = in + (size_t)yi * stride;
        uint8_t *o = out + (size_t)y * ow * c;
        for (int x = 0; x < ow; x++)
            for (int k = 0; k < c; k++) o[(size_t)x * c + k] = row[(size_t)xs[x] * c + k];
    }
}

ra_status ra_image_resize_u8(uint8_t *out, int ow, int oh, const uint8_t *in, int w, int h,
                             int channels, ra_interp interp) {
    return rai_image_resize_region(out, ow, oh, in, (size_t)w * (channels > 0 ? channels : 0), w,
                                   h, channels, interp);
}

ra_status rai_image_resize_region(uint8_t *out, int ow, int oh, const uint8_t *in, size_t stride,
                                  int w, int h, int channels, ra_interp interp) {
    if (!out || !in || w < 1 || h < 1 || ow < 1 || oh < 1 || channels < 1 || channels > 4)
        return rai_fail(RA_ERR_ARG, "image resize: %dx%d (%d channels) to %dx%d", w, h, channels,
                        ow, oh);
    if (w > RA_IMAGE_MAX_SIDE || h > RA_IMAGE_MAX_SIDE || ow > RA_IMAGE_MAX_SIDE ||
        oh > RA_IMAGE_MAX_SIDE)
        return rai_fail(RA_ERR_ARG, "image resize: a side above %d", RA_IMAGE_MAX_SIDE);
    const size_t c = (size_t)channels;
    if (stride < (size_t)w * c) return rai_fail(RA_ERR_ARG, "image resize: rows of %zu bytes", stride);
    if (ow == w && oh == h) {   /* PIL copies */
        for (int y = 0; y < h; y++) memcpy(out + (size_t)y * w * c, in + y * stride, (size_t)w * c);
        return RA_OK;
    }
    if (interp == RA_INTERP_NEAREST) {
        int *xs = malloc(sizeof *xs * (size_t)ow);
        if (!xs) return rai_fail(RA_ERR_NOMEM, "image resize: out of memory");
        resize_nearest(out, ow, oh, in, stride, w, h, channels, xs);
        free(xs);
        return RA_OK;
    }
    const filter *fl = filter_of(interp);
    if (!fl) return rai_fail(RA_ERR_ARG, "image resize: unknown interpolation %d", (int)interp);
    taps tv, th = {0};
    ra_status st = taps_make(&tv, h, oh, fl);
    if (st) return st;
    /* the rows the vertical pass reads, resampled horizontally first */
    const int y0 = tv.first[0], y1 = tv.first[oh - 1] + tv.count[oh - 1];
    const uint8_t *src = in + (size_t)y0 * stride;
    size_t sstride = stride;   /* of src's rows */
    int sw = w;
    uint8_t *tmp = NULL;
    if (ow != w) {
        st = taps_make(&th, w, ow, fl);
        if (!st && !(tmp = malloc((size_t)(y1 - y0) * ow * c)))
            st = rai_fail(RA_ERR_NOMEM, "image resize: out of memory");
        for (int y = 0; !st && y < y1 - y0; y++) {
            const uint8_t *row = src + (size_t)y * stride;
            uint8_t *o = tmp + (size_t)y * ow * c;
            if (c == 3) horizontal3(o, row, ow, &th);
            else horizontal(o, row, ow, c, &th);
        }
        src = tmp, sw = ow, sstride = (size_t)ow * c;
    }
    int32_t *acc = !st && oh != h ? malloc(sizeof *acc * (size_t)sw * c) : NULL;
    if (!st && oh != h && !acc) st = rai_fail(RA_ERR_NOMEM, "image resize: out of memory");
    if (!st && oh != h) {   /* row by row of the source: sums over whole rows (vectorised) */
        const size_t n = (size_t)sw * c;
        for (int y = 0; y < oh; y++) {
            const int32_t *k = tv.k + (size_t)y * tv.ksize;
            const uint8_t *p = src + (size_t)(tv.first[y] - y0) * sstride;
            for (size_t x = 0; x < n; x++) acc[x] = 1 << (FRAC_BITS - 1);
            for (int i = 0; i < tv.count[y]; i++) {
                const uint8_t *r = p + (size_t)i * sstride;
                const int32_t ki = k[i];
                for (size_t x = 0; x < n; x++) acc[x] += r[x] * ki;
            }
            uint8_t *o = out + (size_t)y * n;
            for (size_t x = 0; x < n; x++) o[x] = clip8(acc[x]);
        }
    } else if (!st) {
        for (int y = 0; y < oh; y++)   /* (oh = h: the rows the horizontal pass made) */
            memcpy(out + (size_t)y * ow * c, src + (size_t)y * sstride, (size_t)ow * c);
    }
    free(tmp), free(acc);
    taps_free(&tv), taps_free(&th);
    return st;
}

/* The size of the resize step for an image w x h. */
static void resized(const ra_transform *t, int w, int h, int *rw, int *rh) {
    *rw = w, *rh = h;
    if (t->resize == RA_RESIZE_SHORTER) {   /* int(s * long / short), as torchvision */
        const int s = t->resize_h;
        if (w <= h) *rw = s, *rh = (int)((double)((int64_t)s * h) / w);
        else *rh = s, *rw = (int)((double)((int64_t)s * w) / h);
        if (*rw < 1) *rw = 1;
        if (*rh < 1) *rh = 1;
    } else if (t->resize == RA_RESIZE_EXACT) {
        *rw = t->resize_w, *rh = t->resize_h;
    } else if (t->resize == RA_RESIZE_FIT || t->resize == RA_RESIZE_COVER) {
        /* timm's ResizeKeepRatio (longest 1 or 0): one ratio for both sides,
         * the larger (fit) or the smaller (cover) of the two, each side
         * round(side / ratio) half to even, in double as Python */
        const double rh_ = (double)h / t->resize_h, rw_ = (double)w / t->resize_w;
        const double ratio = (t->resize == RA_RESIZE_FIT) == (rh_ > rw_) ? rh_ : rw_;
        *rh = (int)nearbyint(h / ratio), *rw = (int)nearbyint(w / ratio);
        if (*rw < 1) *rw = 1;
        if (*rh < 1) *rh = 1;
    }
}

ra_status ra_transform_check(const ra_transform *t) {
    if (!t) return rai_fail(RA_ERR_ARG, "transform: NULL");
    if ((unsigned)t->resize > RA_RESIZE_COVER || (unsigned)t->crop > RA_CROP_CENTER_FLOOR ||
        !ra_interp_name(t->interp))
        return rai_fail(RA_ERR_ARG, "transform: unknown resize, crop or interpolation");
    if (t->resize != RA_RESIZE_NONE &&
        (t->resize_h < 1 || t->resize_h > RA_IMAGE_MAX_SIDE ||
         (t->resize != RA_RESIZE_SHORTER && (t->resize_w < 1 || t->resize_w > RA_IMAGE_MAX_SIDE))))
        return rai_fail(RA_ERR_ARG, "transform: resize %dx%d is outside 1..%d", t->resize_h,
                        t->resize_w, RA_IMAGE_MAX_SIDE);
    if (t->crop != RA_CROP_NONE && (t->crop_h < 1 || t->crop_w < 1 ||
                                    t->crop_h > RA_IMAGE_MAX_SIDE || t->crop_w > RA_IMAGE_MAX_SIDE))
        return rai_fail(RA_ERR_ARG, "transform: crop %dx%d is outside 1..%d", t->crop_h,
                        t->crop_w, RA_IMAGE_MAX_SIDE);
    if (!(t->rescale >= 0) || !isfinite(t->rescale))
        return rai_fail(RA_ERR_ARG, "transform: rescale must be a finite number >= 0");
    for (int i = 0; t->normalize && i < 3; i++)
        if (!isfinite(t->mean[i]) || !(t->std[i] > 0) || !isfinite(t->std[i]))
            return rai_fail(RA_ERR_ARG, "transform: mean must be finite and std > 0");
    return RA_OK;
}

ra_status ra_transform_size(const ra_transform *t, int w, int h, int *ow, int *oh) {
    ra_status st = ra_transform_check(t);
    if (st) return st;
    if (!ow || !oh || w < 1 || h < 1)
        return rai_fail(RA_ERR_ARG, "transform: image %dx%d", w, h);
    resized(t, w, h, ow, oh);
    if (t->crop != RA_CROP_NONE) *ow = t->crop_w, *oh = t->crop_h;
    return RA_OK;
}

/* Where a crop of c starts in a side of n: negative where it pads. */
static int crop_start(int n, int c, ra_crop_mode mode) {
    if (c > n) return -((c - n) / 2);
    const int d = n - c;
    if (mode == RA_CROP_CENTER_FLOOR || d % 2 == 0) return d / 2;
    return (d / 2) % 2 == 0 ? d / 2 : d / 2 + 1;   /* k + 0.5 rounded half to even */
}

ra_status rai_transform_bytes(uint8_t *out, const ra_transform *t, const uint8_t *rgb, int w,
                             int h) {
    int ow, oh, rw, rh;
    if (!out || !rgb) return rai_fail(RA_ERR_ARG, "transform: NULL argument");
    ra_status st = ra_transform_size(t, w, h, &ow, &oh);
    if (st) return st;
    resized(t, w, h, &rw, &rh);
    uint8_t *r = NULL;
    const uint8_t *img = rgb;
    if (rw != w || rh != h) {
        if (!(r = malloc((size_t)rw * rh * 3)))
            return rai_fail(RA_ERR_NOMEM, "transform: out of memory for %dx%d", rw, rh);
        if ((st = ra_image_resize_u8(r, rw, rh, rgb, w, h, 3, t->interp))) {
            free(r);
            return st;
        }
        img = r;
    }
    const int x0 = t->crop != RA_CROP_NONE ? crop_start(rw, ow, t->crop) : 0;
    const int y0 = t->crop != RA_CROP_NONE ? crop_start(rh, oh, t->crop) : 0;
    for (int y = 0; y < oh; y++) {
        const int sy = y + y0;
        for (int x = 0; x < ow; x++) {
            const int sx = x + x0;
            uint8_t *o = out + ((size_t)y * ow + x) * 3;
            if (sy >= 0 && sy < rh && sx >= 0 && sx < rw)
                memcpy(o, img + ((size_t)sy * rw + sx) * 3, 3);
            else
                o[0] = t->fill[0], o[1] = t->fill[1], o[2] = t->fill[2];   /* padding */
        }
    }
    free(r);
    return RA_OK;
}

/* Each byte value's float is a function of the value alone: a table. */
void rai_byte_table(float lut[3][256], double rescale, int normalize, const float mean[3],
                    const float std[3]) {
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) {
            float f = rescale > 0 ? (float)(v * rescale) : (float)v / 255.0f;
            if (normalize) f = (f - mean[c]) / std[c];
            lut[c][v] = f;
        }
}

void rai_byte_planes(float *out, const uint8_t *hwc, size_t n, const float lut[3][256]) {
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < 3; c++) out[c * n + i] = lut[c][hwc[i * 3 + c]];
}

void rai_byte_luma(float *out, const uint8_t *hwc, size_t n, const float lut[3][256]) {
    for (size_t i = 0; i < n; i++)
        out[i] = 0.299f * lut[0][hwc[i * 3]] + 0.587f * lut[1][hwc[i * 3 + 1]] +
                 0.114f * lut[2][hwc[i * 3 + 2]];
}

void rai_mean_bytes(uint8_t out[3], const float mean[3]) {
    for (int k = 0; k < 3; k++) {
        const double f = nearbyint(255.0 * (double)mean[k]);
        out[k] = (uint8_t)(f < 0 ? 0 : f > 255 ? 255 : f);
    }
}

ra_status ra_transform_apply(float *out, const ra_transform *t, const uint8_t *rgb, int w, int h) {
    int ow, oh;
    if (!out || !rgb) return rai_fail(RA_ERR_ARG, "transform: NULL argument");
    ra_status st = ra_transform_size(t, w, h, &ow, &oh);
    if (st) return st;
    const size_t plane = (size_t)ow * oh;
    uint8_t *px = malloc(plane * 3);
    if (!px) return rai_fail(RA_ERR_NOMEM, "transform: out of memory for %dx%d", ow, oh);
    if ((st = rai_transform_bytes(px, t, rgb, w, h))) {
        free(px);
        return st;
    }
    float lut[3][256];
    rai_byte_table(lut, t->rescale, t->normalize, t->mean, t->std);
    (t->grey ? rai_byte_luma : rai_byte_planes)(out, px, plane, lut);
    free(px);
    return RA_OK;
}

ra_status ra_transform_crop_mode(ra_transform *t, const char *mode) {
    if (!t || !mode) return rai_fail(RA_ERR_ARG, "crop mode: NULL argument");
    if (t->resize == RA_RESIZE_NONE)
        return rai_fail(RA_ERR_ARG, "crop mode %s: the transform does not resize", mode);
    const int sh = t->resize_h, sw = t->resize == RA_RESIZE_SHORTER ? t->resize_h : t->resize_w;
    memset(t->fill, 0, sizeof t->fill);
    t->resize_h = sh, t->resize_w = sw;
    if (!strcmp(mode, "center") && sh == sw) {   /* torchvision's Resize(int) */
        t->resize = RA_RESIZE_SHORTER;
    } else if (!strcmp(mode, "center")) {
        /* ResizeKeepRatio(scale_size), with its default interpolation,
         * bilinear, whatever the config says (timm 0.9 on) */
        t->resize = RA_RESIZE_COVER, t->interp = RA_INTERP_BILINEAR;
    } else if (!strcmp(mode, "squash")) {
        t->resize = RA_RESIZE_EXACT;
    } else if (!strcmp(mode, "border")) {
        t->resize = RA_RESIZE_FIT;   /* + CenterCropOrPad, padded with the mean's bytes */
        rai_mean_bytes(t->fill, t->mean);
    } else {
        return rai_fail(RA_ERR_ARG, "crop mode '%s': center, squash or border", mode);
    }
    return RA_OK;
}

int ra_transform_describe(char *buf, size_t n, const ra_transform *t) {
    if (!buf || !n || !t) return -1;
    char rs[96], cr[96], sc[48], nm[160] = "";
    if (t->resize == RA_RESIZE_SHORTER)
        snprintf(rs, sizeof rs, "resize shorter side %d %s", t->resize_h, ra_interp_name(t->interp));
    else if (t->resize == RA_RESIZE_FIT || t->resize == RA_RESIZE_COVER)
        snprintf(rs, sizeof rs, "resize to %s %dx%d keeping the aspect ratio %s",
                 t->resize == RA_RESIZE_FIT ? "fit in" : "cover", t->resize_h, t->resize_w,
                 ra_interp_name(t->interp));
    else if (t->resize == RA_RESIZE_EXACT)
        snprintf(rs, sizeof rs, "resize to %dx%d %s", t->resize_h, t->resize_w,
                 ra_interp_name(t->interp));
    else snprintf(rs, sizeof rs, "no resize");
    if (t->crop == RA_CROP_NONE) snprintf(cr, sizeof cr, "no crop");
    else snprintf(cr, sizeof cr, "centre crop %dx%d (offset %s%s)", t->crop_h, t->crop_w,
                  t->crop == RA_CROP_CENTER_ROUND ? "rounded" : "floored",
                  t->fill[0] || t->fill[1] || t->fill[2] ? ", padded with the mean's bytes" : "");
    if (t->rescale > 0) snprintf(sc, sizeof sc, "x %.17g", t->rescale);
    else snprintf(sc, sizeof sc, "/ 255");
    if (t->normalize)
        snprintf(nm, sizeof nm, ", normalise mean %.9g,%.9g,%.9g std %.9g,%.9g,%.9g", t->mean[0],
                 t->mean[1], t->mean[2], t->std[0], t->std[1], t->std[2]);
    return snprintf(buf, n, "%s, %s, %s%s", rs, cr, sc, nm);
}

/* ---- video frames: torch's bilinear interpolate on tensors ---------------------- */

/* One axis of torch's upsample_bilinear2d (align_corners=False, sizes given,
 * no scale factor), as its CPU kernel computes it: the scale in/out in
 * float32, the source position scale * (o + 0.5) - 0.5 in double, clamped
 * at 0, the lower neighbour its truncation, the upper one the next (or
 * itself at the edge), lambda1 = float(position - lower), lambda0 = 1 -
 * lambda1 in float32; an axis of the same size is copied (lambda 1, 0). */
typedef struct {
    int i0, i1;
    float l0, l1;
} lin_tap;

static void lin_taps(lin_tap *t, int in, int out) {
    const float scale = (float)in / (float)out;
    for (int o = 0; o < out; o++) {
        if (in == out) {
            t[o] = (lin_tap){o, o, 1.0f, 0.0f};
            continue;
        }
        /* scale (float) * (o + 0.5) - 0.5 in double, kept in double for
         * lambda1 (what torch 1.13's weights are, read back from it) */
        double src = (double)scale * ((double)o + 0.5) - 0.5;
        if (src < 0) src = 0;
        const int i0 = (int)src;
        float l1 = (float)(src - (double)i0);
        l1 = l1 < 0 ? 0 : l1 > 1 ? 1 : l1;
        t[o] = (lin_tap){i0, i0 + (i0 < in - 1), 1.0f - l1, l1};
    }
}

ra_status ra_resize_bilinear_tensor_u8(uint8_t *out, int ow, int oh, const uint8_t *in, int w,
                                       int h, int channels) {
    if (!out || !in || w < 1 || h < 1 || ow < 1 || oh < 1 || channels < 1 || channels > 4 ||
        w > RA_IMAGE_MAX_SIDE || h > RA_IMAGE_MAX_SIDE || ow > RA_IMAGE_MAX_SIDE ||
        oh > RA_IMAGE_MAX_SIDE)
        return rai_fail(RA_ERR_ARG, "bilinear resize: %dx%d (%d channels) to %dx%d", w, h,
                        channels, ow, oh);
    lin_tap *tx = malloc(sizeof *tx * (size_t)ow), *ty = malloc(sizeof *ty * (size_t)oh);
    if (!tx || !ty) {
        free(tx), free(ty);
        return rai_fail(RA_ERR_NOMEM, "bilinear resize: out of memory");
    }
    lin_taps(tx, w, ow), lin_taps(ty, h, oh);
    const size_t c = (size_t)channels;
    for (int y = 0; y < oh; y++) {
        const uint8_t *r0 = in + (size_t)ty[y].i0 * w * c, *r1 = in + (size_t)ty[y].i1 * w * c;
        const float wy0 = ty[y].l0, wy1 = ty[y].l1;
        uint8_t *o = out + (size_t)y * ow * c;
        for (int x = 0; x < ow; x++) {
            const size_t a = (size_t)tx[x].i0 * c, b = (size_t)tx[x].i1 * c;
            const float wx0 = tx[x].l0, wx1 = tx[x].l1;
            for (size_t k = 0; k < c; k++) {
                /* the kernel's order: each row's pair, then the rows, in
                 * float32, each "a * w0 + b * w1" one fused multiply-add
                 * over a rounded product (as the AVX2 build of torch 1.13
                 * contracts it) */
                const float top = fmaf((float)r0[a + k], wx0, (float)r0[b + k] * wx1);
                const float bot = fmaf((float)r1[a + k], wx0, (float)r1[b + k] * wx1);
                const float v = fmaf(top, wy0, bot * wy1);
                /* torchvision: round (half to even), then the cast; clamped, as
                 * a sum of weights that is not exactly 1 may pass 255 */
                const float rv = nearbyintf(v);
                o[(size_t)x * c + k] = (uint8_t)(rv < 0 ? 0 : rv > 255 ? 255 : rv);
            }
        }
    }
    free(tx), free(ty);
    return RA_OK;
}

/* The size of a frame after the video transform's resize. */
static void video_resized(const ra_video_transform *t, int w, int h, int *rw, int *rh) {
    *rw = w, *rh = h;
    if (t->frame.resize != RA_RESIZE_SHORTER) return;
    const int s = t->frame.resize_h, shortest = w <= h ? w : h, longest = w <= h ? h : w;
    int l;
    if (t->size_round)   /* mmcv: int(long * float(S / short) + 0.5), in double */
        l = (int)((double)longest * ((double)s / shortest) + 0.5);
    else                 /* torchvision: int(S * long / short) */
        l = (int)((double)((int64_t)s * longest) / shortest);
    if (l < 1) l = 1;
    if (w <= h) *rw = s, *rh = l;
    else *rh = s, *rw = l;
    if (t->size_round && w == h) *rw = *rh = s;
}

static ra_status video_check(const ra_video_transform *t, int w, int h, int *ow, int *oh) {
    if (!t) return rai_fail(RA_ERR_ARG, "video transform: NULL");
    ra_status st = ra_transform_size(&t->frame, w, h, ow, oh);
    if (st) return st;
    if (t->frame.interp != RA_INTERP_BILINEAR || (t->crops != 1 && t->crops != 3) ||
        (t->frame.resize != RA_RESIZE_SHORTER && t->frame.resize != RA_RESIZE_NONE) || t->frame.grey)
        return rai_fail(RA_ERR_ARG, "video transform: a shorter-side bilinear resize (or none), "
                        "RGB, 1 or 3 crops");
    if (t->crops == 3 && (t->frame.crop == RA_CROP_NONE || t->frame.crop_h != t->frame.crop_w))
        return rai_fail(RA_ERR_ARG, "video transform: three crops are square crops");
    return RA_OK;
}

ra_status ra_video_frame_bytes(uint8_t *out, const ra_video_transform *t, const uint8_t *rgb,
                               int w, int h) {
    int ow, oh, rw, rh;
    if (!out || !rgb) return rai_fail(RA_ERR_ARG, "video transform: NULL argument");
    ra_status st = video_check(t, w, h, &ow, &oh);
    if (st) return st;
    video_resized(t, w, h, &rw, &rh);
    uint8_t *r = NULL;
    const uint8_t *img = rgb;
    if (rw != w || rh != h) {
        if (!(r = malloc((size_t)rw * rh * 3)))
            return rai_fail(RA_ERR_NOMEM, "video transform: out of memory for %dx%d", rw, rh);
        if ((st = ra_resize_bilinear_tensor_u8(r, rw, rh, rgb, w, h, 3))) {
            free(r);
            return st;
        }
        img = r;
    }
    const int ncrop = t->crops;
    for (int k = 0; k < ncrop; k++) {
        int x0 = 0, y0 = 0;
        if (t->frame.crop != RA_CROP_NONE && ncrop == 1) {
            x0 = crop_start(rw, ow, t->frame.crop), y0 = crop_start(rh, oh, t->frame.crop);
        } else if (t->frame.crop != RA_CROP_NONE) {
            /* mmaction's ThreeCrop: the crop spans the shorter side; along the
             * longer one, step = (long - crop) // 2 and the offsets 0, 2 step,
             * step (first, last, middle) */
            if (rh < oh || rw < ow) {
                free(r);
                return rai_fail(RA_ERR_ARG, "video transform: three crops of %dx%d from %dx%d",
                                ow, oh, rw, rh);
            }
            const int along_w = oh == rh ? 1 : 0;
            if (!along_w && ow != rw) {
                free(r);
                return rai_fail(RA_ERR_ARG, "video transform: three crops of %dx%d need a side "
                                "of %dx%d", ow, oh, rw, rh);
            }
            const int step = along_w ? (rw - ow) / 2 : (rh - oh) / 2;
            const int off = k == 0 ? 0 : k == 1 ? 2 * step : step;
            if (along_w) x0 = off;
            else y0 = off;
        }
        uint8_t *o = out + (size_t)k * ow * oh * 3;
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++) {
                const int sy = y + y0, sx = x + x0;
                uint8_t *p = o + ((size_t)y * ow + x) * 3;
                if (sy >= 0 && sy < rh && sx >= 0 && sx < rw)
                    memcpy(p, img + ((size_t)sy * rw + sx) * 3, 3);
                else
                    p[0] = t->frame.fill[0], p[1] = t->frame.fill[1], p[2] = t->frame.fill[2];
            }
    }
    free(r);
    return RA_OK;
}
