/* augment.c - timm's RandAugment (timm/data/auto_augment.py), each operation
 * giving Pillow 9.4's bytes (docs/reference.md, "Training augmentations").
 *
 * Every operation is what PIL computes, step for step:
 *   - AutoContrast, Equalize, Invert, Posterize, Solarize, SolarizeAdd: a
 *     lookup table per channel (ImageOps, from each channel's histogram
 *     where it needs one), its values rounded and clamped to 0..255 as
 *     Image.point takes them;
 *   - Color, Contrast, Brightness, Sharpness: ImageEnhance's
 *     Image.blend(degenerate, image, factor) with the factor in float32,
 *     in + factor * (image - in) in float32 truncated (Blend.c), clamped
 *     when the factor is outside [0, 1]; the degenerate image computed per
 *     pixel: the integer "L" luma (Convert.c, (19595 R + 38470 G + 7471 B
 *     + 2^15) >> 16), the grey of that luma's mean, black, or the SMOOTH
 *     3x3 filter in float32 (Filter.c; the border pixels kept);
 *   - Rotate, ShearX/Y, TranslateX/Y: Image.transform AFFINE (Geometry.c)
 *     over an image filled with the fill colour: nearest by PIL's three
 *     engines (a pure scale stepped in double, else 16.16 fixed point when
 *     the corners fit, else stepped in double), bilinear and bicubic
 *     (a = -1) in double at each pixel centre, truncated; Rotate builds
 *     Image.rotate's matrix (cos and sin rounded to 15 decimals, about the
 *     centre w/2, h/2) and takes its shortcuts for 0, 90, 180 and 270.
 * The expressions keep PIL's order of operations; the build compiles with
 * -ffp-contract=off, so no multiply-add is fused where PIL rounds twice. */
#include "base/internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846   /* M_PI, which C11 does not define */
#define NOPS 15

static const char *const op_names[NOPS] = {
    "AutoContrast", "Equalize", "Invert",     "Rotate",   "Posterize",
    "Solarize",     "SolarizeAdd", "Color",   "Contrast", "Brightness",
    "Sharpness",    "ShearX",   "ShearY",     "TranslateXRel", "TranslateYRel"};

const char *ra_aug_op_name(ra_aug_op op) {
    return (unsigned)op < NOPS ? op_names[op] : NULL;
}

/* ---- lookup tables (ImageOps) --------------------------------------------------- */

/* PIL's Image.point of an 8-bit image: lut (c, 256) per channel. */
static void apply_lut(uint8_t *dst, const uint8_t *src, int64_t px, int c, const uint8_t *lut) {
    for (int64_t i = 0; i < px; i++)
        for (int k = 0; k < c; k++) dst[i * c + k] = lut[k * 256 + src[i * c + k]];
}

/* Image.point's conversion of a table entry: round half to even, then
 * clamped to 0..255 (_imaging.c's getlist for bytes). */
static uint8_t lut_value(double v) {
    v = nearbyint(v);
    return v <= 0 ? 0 : v >= 255 ? 255 : (uint8_t)v;
}

static void histogram(int64_t *hist, const uint8_t *src, int64_t px, int c) {
    memset(hist, 0, sizeof *hist * 256 * (size_t)c);
    for (int64_t i = 0; i < px; i++)
        for (int k = 0; k < c; k++) hist[k * 256 + src[i * c + k]]++;
}

/* ImageOps.autocontrast(cutoff=0): the darkest value present to 0, the
 * lightest to 255, int(i * scale + offset) in double, per channel. */
static void lut_autocontrast(uint8_t *lut, const int64_t *hist, int c) {
    for (int k = 0; k < c; k++) {
        const int64_t *hh = hist + k * 256;
        uint8_t *l = lut + k * 256;
        int lo = 0, hi = 255;
        while (lo < 255 && !hh[lo]) lo++;
        while (hi > 0 && !hh[hi]) hi--;
        if (hi <= lo) {
            for (int i = 0; i < 256; i++) l[i] = (uint8_t)i;
            continue;
        }
        const double scale = 255.0 / (hi - lo), offset = -lo * scale;
        for (int i = 0; i < 256; i++) {
            const int v = (int)(i * scale + offset);   /* Python's int(): toward zero */
            l[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

/* ImageOps.equalize: step = (pixels - the count of the last value present)
 * // 255; entry i = (step // 2 + the count below i) // step; identity
 * when at most one value is present or step is 0. */
static void lut_equalize(uint8_t *lut, const int64_t *hist, int c) {
    for (int k = 0; k < c; k++) {
        const int64_t *hh = hist + k * 256;
        uint8_t *l = lut + k * 256;
        int64_t total = 0, last = 0;
        int present = 0;
        for (int i = 0; i < 256; i++)
            if (hh[i]) total += hh[i], last = hh[i], present++;
        const int64_t step = (total - last) / 255;
        if (present <= 1 || !step) {
            for (int i = 0; i < 256; i++) l[i] = (uint8_t)i;
            continue;
        }
        int64_t n = step / 2;
        for (int i = 0; i < 256; i++) {
            const int64_t v = n / step;
            l[i] = (uint8_t)(v > 255 ? 255 : v);
            n += hh[i];
        }
    }
}

/* ---- blends (ImageEnhance, Blend.c) --------------------------------------------- */

/* A double as C's (float) cast on x86 gives it, without the undefined
 * behaviour of a value beyond FLT_MAX (it becomes an infinity). */
static float to_float(double v) {
    if (v > FLT_MAX) return INFINITY;
    if (v < -FLT_MAX) return -INFINITY;
    return (float)v;
}

/* Blend.c's pixel: in1 + alpha * (in2 - in1) in float32, truncated; with
 * alpha outside [0, 1] clamped first (a NaN, from an infinite alpha times
 * 0, gives what x86's conversion gives: 0). */
static inline uint8_t blend1(int in1, int in2, float alpha, int extrapolate) {
    const float t = (float)in1 + alpha * (float)(in2 - in1);
    if (!extrapolate) return (uint8_t)t;
    if (t <= 0.0f) return 0;
    if (t >= 255.0f) return 255;
    return t == t ? (uint8_t)t : 0;
}

/* PIL's "L" of an RGB pixel (Convert.c's rgb2l). */
static inline int luma(const uint8_t *p) {
    return (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16;
}

/* The SMOOTH filter's value at an inner pixel, channel k (Filter.c's
 * ImagingFilter3x3: kernel 1 1 1 / 1 5 1 / 1 1 1 divided by 13 in float32,
 * the rows below, at and above summed in that order from 0.5, clip8). */
static inline uint8_t smooth1(const uint8_t *p, int64_t row, int c) {
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    const uint8_t *b = p + row, *a = p - row;
    float ss = 0.5f;
    ss += (float)b[-c] * k1 + (float)b[0] * k1 + (float)b[c] * k1;
    ss += (float)p[-c] * k1 + (float)p[0] * k5 + (float)p[c] * k1;
    ss += (float)a[-c] * k1 + (float)a[0] * k1 + (float)a[c] * k1;
    if (ss <= 0.0f) return 0;
    if (ss >= 255.0f) return 255;
    return (uint8_t)ss;
}

static void enhance(uint8_t *dst, const uint8_t *src, int w, int h, int c, ra_aug_op op,
                    double factor) {
    const int64_t px = (int64_t)w * h, n = px * c;
    const float alpha = to_float(factor);
    if (alpha == 0.0f && op == RA_AUG_BRIGHTNESS) {   /* Image.blend's shortcuts */
        memset(dst, 0, (size_t)n);
        return;
    }
    if (alpha == 1.0f || (op == RA_AUG_COLOR && c == 1)) {   /* "L" of "L" is itself */
        memcpy(dst, src, (size_t)n);
        return;
    }
    const int ex = !(alpha >= 0.0f && alpha <= 1.0f);
    switch (op) {
    case RA_AUG_COLOR:
        for (int64_t i = 0; i < px; i++) {
            const int g = luma(src + i * 3);
            for (int k = 0; k < 3; k++)
                dst[i * 3 + k] = alpha == 0.0f ? (uint8_t)g : blend1(g, src[i * 3 + k], alpha, ex);
        }
        break;
    case RA_AUG_CONTRAST: {
        int64_t sum = 0;   /* ImageStat's mean of the "L" image, int(mean + 0.5) */
        for (int64_t i = 0; i < px; i++) sum += c == 3 ? luma(src + i * 3) : src[i];
        const int mean = (int)((double)sum / (double)px + 0.5);
        for (int64_t i = 0; i < n; i++)
            dst[i] = alpha == 0.0f ? (uint8_t)mean : blend1(mean, src[i], alpha, ex);
        break;
    }
    case RA_AUG_BRIGHTNESS:
        for (int64_t i = 0; i < n; i++) dst[i] = blend1(0, src[i], alpha, ex);
        break;
    default: {   /* RA_AUG_SHARPNESS; an image under 3 x 3 is not filtered */
        const int64_t row = (int64_t)w * c;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                const int64_t i = (y * (int64_t)w + x) * c;
                const int inner = w >= 3 && h >= 3 && x > 0 && x < w - 1 && y > 0 && y < h - 1;
                for (int k = 0; k < c; k++) {
                    const int d = inner ? smooth1(src + i + k, row, c) : src[i + k];
                    dst[i + k] = alpha == 0.0f ? (uint8_t)d : blend1(d, src[i + k], alpha, ex);
                }
            }
    }
    }
}

/* ---- affine transforms (Geometry.c) --------------------------------------------- */

/* COORD and FLOOR of Geometry.c, with a value no int holds (or a NaN) as
 * -1: outside the image either way, as x86's conversion (INT_MIN) is. */
static inline int coord(double v) { return v < 0.0 || !(v < 2147483647.0) ? -1 : (int)v; }

/* FIX of affine_fixed: floor(v * 65536 + 0.5) as an int32, INT32_MIN when
 * it does not fit (x86's conversion). */
static inline int32_t fix16(double v) {
    const double f = floor(v * 65536.0 + 0.5);
    return f >= -2147483648.0 && f < 2147483648.0 ? (int32_t)f : INT32_MIN;
}

static inline void put(uint8_t *dst, const uint8_t *src, int c) {
    for (int k = 0; k < c; k++) dst[k] = src[k];
}

/* Nearest, the matrix a pure scale (a[1] = a[3] = 0): ImagingScaleAffine,
 * the source columns tabulated once by stepping in double. */
static ra_status affine_scale(uint8_t *dst, const uint8_t *src, int w, int h, int c,
                              const double *a) {
    int *xin = calloc((size_t)w, sizeof *xin);
    if (!xin) return rai_fail(RA_ERR_NOMEM, "augment: %d column indices", w);
    double xo = a[2] + a[0] * 0.5, yo = a[5] + a[4] * 0.5;
    int xmin = w, xmax = 0;
    for (int x = 0; x < w; x++) {
        const int xi = coord(xo);
        if (xi >= 0 && xi < w) {
            xmax = x + 1;
            if (x < xmin) xmin = x;
            xin[x] = xi;
        }
        xo += a[0];
    }
    for (int y = 0; y < h; y++) {
        const int yi = coord(yo);
        if (yi >= 0 && yi < h)
            for (int x = xmin; x < xmax; x++)
                put(dst + ((int64_t)y * w + x) * c, src + ((int64_t)yi * w + xin[x]) * c, c);
        yo += a[4];
    }
    free(xin);
    return RA_OK;
}

static inline int fits_fixed(const double *a, int x, int y) {
    return fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 && fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

/* Nearest otherwise: 16.16 fixed point when the four corners fit
 * (affine_fixed; the sums wrap as PIL's int32 ones do), else stepped in
 * double. */
static void affine_nearest(uint8_t *dst, const uint8_t *src, int w, int h, int c,
                           const double *a) {
    if (fits_fixed(a, 0, 0) && fits_fixed(a, w, h) && fits_fixed(a, 0, h) && fits_fixed(a, w, 0)) {
        const uint32_t a0 = (uint32_t)fix16(a[0]), a1 = (uint32_t)fix16(a[1]);
        const uint32_t a3 = (uint32_t)fix16(a[3]), a4 = (uint32_t)fix16(a[4]);
        uint32_t a2 = (uint32_t)fix16(a[2] + a[0] * 0.5 + a[1] * 0.5);
        uint32_t a5 = (uint32_t)fix16(a[5] + a[3] * 0.5 + a[4] * 0.5);
        for (int y = 0; y < h; y++) {
            uint32_t xx = a2, yy = a5;
            for (int x = 0; x < w; x++) {
                const int32_t xi = (int32_t)xx >> 16, yi = (int32_t)yy >> 16;
                if (xi >= 0 && xi < w && yi >= 0 && yi < h)
                    put(dst + ((int64_t)y * w + x) * c, src + ((int64_t)yi * w + xi) * c, c);
                xx += a0, yy += a3;
            }
            a2 += a1, a5 += a4;
        }
        return;
    }
    double xo = a[2] + a[1] * 0.5 + a[0] * 0.5, yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
    for (int y = 0; y < h; y++) {
        double xx = xo, yy = yo;
        for (int x = 0; x < w; x++) {
            const int xi = coord(xx);
            if (xi >= 0 && xi < w) {
                const int yi = coord(yy);
                if (yi >= 0 && yi < h)
                    put(dst + ((int64_t)y * w + x) * c, src + ((int64_t)yi * w + xi) * c, c);
            }
            xx += a[0], yy += a[3];
        }
        xo += a[1], yo += a[4];
    }
}

static inline int clampi(int v, int n) { return v < 0 ? 0 : v < n ? v : n - 1; }

/* Geometry.c's BICUBIC: the cubic convolution with a = -1, in its order. */
static inline double cubic(double v1, double v2, double v3, double v4, double d) {
    const double p1 = v2, p2 = -v1 + v3, p3 = 2 * (v1 - v2) + v3 - v4, p4 = -v1 + v2 - v3 + v4;
    return p1 + d * (p2 + d * (p3 + d * p4));
}

/* Bilinear and bicubic: ImagingGenericTransform at each pixel centre
 * (x + 0.5, y + 0.5); a source point outside [0, w) x [0, h) keeps the
 * fill; rows and columns past the edges clamped. */
static void affine_filter(uint8_t *dst, const uint8_t *src, int w, int h, int c, const double *a,
                          int bicubic) {
    const int64_t row = (int64_t)w * c;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const double xin0 = x + 0.5, yin0 = y + 0.5;
            double xin = a[0] * xin0 + a[1] * yin0 + a[2];
            double yin = a[3] * xin0 + a[4] * yin0 + a[5];
            if (!(xin >= 0.0 && xin < w && yin >= 0.0 && yin < h)) continue;
            xin -= 0.5, yin -= 0.5;
            const int xf = (int)floor(xin), yf = (int)floor(yin);
            const double dx = xin - xf, dy = yin - yf;
            uint8_t *out = dst + ((int64_t)y * w + x) * c;
            if (!bicubic) {
                const int x0 = clampi(xf, w) * c, x1 = clampi(xf + 1, w) * c;
                const uint8_t *r0 = src + clampi(yf, h) * row, *r1 = src + clampi(yf + 1, h) * row;
                for (int k = 0; k < c; k++) {
                    const double v1 = r0[x0 + k] + (double)(r0[x1 + k] - r0[x0 + k]) * dx;
                    const double v2 = r1[x0 + k] + (double)(r1[x1 + k] - r1[x0 + k]) * dx;
                    const double v = v1 + (v2 - v1) * dy;
                    out[k] = (uint8_t)v;
                }
                continue;
            }
            int xs[4];
            const uint8_t *rows[4];
            for (int j = 0; j < 4; j++) {
                xs[j] = clampi(xf - 1 + j, w) * c;
                rows[j] = src + clampi(yf - 1 + j, h) * row;
            }
            for (int k = 0; k < c; k++) {
                double v[4];
                for (int j = 0; j < 4; j++) {
                    const uint8_t *r = rows[j] + k;
                    v[j] = cubic(r[xs[0]], r[xs[1]], r[xs[2]], r[xs[3]], dx);
                }
                const double s = cubic(v[0], v[1], v[2], v[3], dy);
                out[k] = s <= 0.0 ? 0 : s >= 255.0 ? 255 : (uint8_t)s;
            }
        }
}

/* Image.transform(size, AFFINE, a, resample, fillcolor=fill): the output
 * filled, then each pixel the source can give. */
static ra_status affine(uint8_t *dst, const uint8_t *src, int w, int h, int c, const double *a,
                        ra_interp interp, const uint8_t *fill) {
    const int64_t px = (int64_t)w * h;
    for (int64_t i = 0; i < px; i++) put(dst + i * c, fill, c);
    if (interp != RA_INTERP_NEAREST) {
        affine_filter(dst, src, w, h, c, a, interp == RA_INTERP_BICUBIC);
        return RA_OK;
    }
    if (a[1] == 0 && a[3] == 0) return affine_scale(dst, src, w, h, c, a);
    affine_nearest(dst, src, w, h, c, a);
    return RA_OK;
}

/* Python's round(v, 15): the nearest double to v's correctly rounded 15
 * decimals (glibc's printf is exact). */
static double round15(double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.15f", v);
    return strtod(buf, NULL);
}

/* Image.rotate(degrees, resample, fillcolor=fill), expand=0. */
static ra_status rotate(uint8_t *dst, const uint8_t *src, int w, int h, int c, double degrees,
                        ra_interp interp, const uint8_t *fill) {
    double angle = fmod(degrees, 360.0);   /* Python's angle % 360.0 */
    if (angle != 0.0) {
        if (angle < 0) angle += 360.0;
    } else {
        angle = 0.0;
    }
    const int64_t px = (int64_t)w * h;
    if (angle == 0.0) {
        memcpy(dst, src, (size_t)(px * c));
        return RA_OK;
    }
    if (angle == 180.0 || ((angle == 90.0 || angle == 270.0) && w == h)) {   /* transposes */
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int sy, sx;
                if (angle == 180.0) sy = h - 1 - y, sx = w - 1 - x;
                else if (angle == 90.0) sy = x, sx = w - 1 - y;
                else sy = h - 1 - x, sx = y;
                put(dst + ((int64_t)y * w + x) * c, src + ((int64_t)sy * w + sx) * c, c);
            }
        return RA_OK;
    }
    const double r = -(angle * (PI / 180.0));   /* -math.radians(angle) */
    double m[6] = {round15(cos(r)), round15(sin(r)), 0.0, round15(-sin(r)), round15(cos(r)), 0.0};
    const double cx = w / 2.0, cy = h / 2.0;
    const double tx = m[0] * -cx + m[1] * -cy + m[2], ty = m[3] * -cx + m[4] * -cy + m[5];
    m[2] = tx + cx;
    m[5] = ty + cy;
    return affine(dst, src, w, h, c, m, interp, fill);
}

/* ---- one operation --------------------------------------------------------------- */

static int geometric(ra_aug_op op) {
    return op == RA_AUG_ROTATE || op == RA_AUG_SHEAR_X || op == RA_AUG_SHEAR_Y ||
           op == RA_AUG_TRANSLATE_X || op == RA_AUG_TRANSLATE_Y;
}

ra_status ra_augment_op(uint8_t *dst, const uint8_t *src, int w, int h, int c, ra_aug_op op,
                        double arg, ra_interp interp, const uint8_t *fill) {
    if (!dst || !src) return rai_fail(RA_ERR_ARG, "augment: NULL image");
    if (w < 1 || h < 1 || w > RA_IMAGE_MAX_SIDE || h > RA_IMAGE_MAX_SIDE)
        return rai_fail(RA_ERR_ARG, "augment: image %d x %d (sides 1..%d)", w, h,
                        RA_IMAGE_MAX_SIDE);
    if (c != 1 && c != 3) return rai_fail(RA_ERR_ARG, "augment: %d channels (1 or 3)", c);
    if ((unsigned)op >= NOPS) return rai_fail(RA_ERR_ARG, "augment: no operation %d", (int)op);
    if (!isfinite(arg))
        return rai_fail(RA_ERR_ARG, "augment: %s's argument is not finite", op_names[op]);
    if (geometric(op)) {
        if (interp != RA_INTERP_NEAREST && interp != RA_INTERP_BILINEAR &&
            interp != RA_INTERP_BICUBIC)
            return rai_fail(RA_ERR_ARG, "augment: %s takes nearest, bilinear or bicubic, not %s",
                            op_names[op], ra_interp_name(interp) ? ra_interp_name(interp) : "?");
        if (!fill) return rai_fail(RA_ERR_ARG, "augment: %s without a fill colour", op_names[op]);
    }
    if (op == RA_AUG_POSTERIZE && arg != floor(arg))
        return rai_fail(RA_ERR_ARG, "augment: Posterize keeps a whole number of bits, not %g", arg);
    const int64_t px = (int64_t)w * h;
    uint8_t lut[3 * 256];
    int64_t hist[3 * 256];
    switch (op) {
    case RA_AUG_AUTOCONTRAST:
    case RA_AUG_EQUALIZE:
        histogram(hist, src, px, c);
        (op == RA_AUG_EQUALIZE ? lut_equalize : lut_autocontrast)(lut, hist, c);
        apply_lut(dst, src, px, c, lut);
        return RA_OK;
    case RA_AUG_INVERT:
    case RA_AUG_POSTERIZE:
    case RA_AUG_SOLARIZE:
    case RA_AUG_SOLARIZE_ADD:
        for (int i = 0; i < 256; i++) {
            double v;
            if (op == RA_AUG_INVERT) v = 255 - i;
            else if (op == RA_AUG_POSTERIZE)   /* i & ~(2^(8 - bits) - 1); 8 bits and more copy */
                v = arg >= 8 ? i : arg <= 0 ? 0 : i & ~((1 << (8 - (int)arg)) - 1);
            else if (op == RA_AUG_SOLARIZE) v = i < arg ? i : 255 - i;
            else v = i < 128 ? fmin(255.0, i + arg) : i;   /* timm's solarize_add, thresh 128 */
            lut[i] = lut[256 + i] = lut[512 + i] = lut_value(v);
        }
        apply_lut(dst, src, px, c, lut);
        return RA_OK;
    case RA_AUG_COLOR:
    case RA_AUG_CONTRAST:
    case RA_AUG_BRIGHTNESS:
    case RA_AUG_SHARPNESS:
        enhance(dst, src, w, h, c, op, arg);
        return RA_OK;
    case RA_AUG_ROTATE: return rotate(dst, src, w, h, c, arg, interp, fill);
    default: {
        double a[6] = {1, 0, 0, 0, 1, 0};
        if (op == RA_AUG_SHEAR_X) a[1] = arg;
        else if (op == RA_AUG_SHEAR_Y) a[3] = arg;
        else if (op == RA_AUG_TRANSLATE_X) a[2] = arg;
        else a[5] = arg;
        return affine(dst, src, w, h, c, a, interp, fill);
    }
    }
}

/* ---- the policy ------------------------------------------------------------------- */

static int digit(char ch) { return ch >= '0' && ch <= '9'; }

/* Python's int() of a section's value: decimal digits, at most 9 of them. */
static int parse_int(int *v, const char *s, size_t n) {
    if (n < 1 || n > 9) return 0;
    int r = 0;
    for (size_t i = 0; i < n; i++) {
        if (!digit(s[i])) return 0;
        r = r * 10 + (s[i] - '0');
    }
    *v = r;
    return 1;
}

/* Python's float() of a value that starts with a digit: a decimal number
 * with an optional exponent (strtod's hexadecimal form refused). */
static int parse_double(double *v, const char *s, size_t n) {
    char buf[64];
    if (n < 1 || n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    if (strpbrk(buf, "xXpP")) return 0;
    char *end;
    *v = strtod(buf, &end);
    return *end == 0 && !isnan(*v);
}

ra_status ra_randaugment_parse(ra_randaugment *r, const char *spec) {
    if (!r || !spec) return rai_fail(RA_ERR_ARG, "randaugment: NULL argument");
    ra_randaugment p = {.layers = 2, .magnitude = 10, .magnitude_std = 0, .magnitude_max = 10,
                        .prob = 0.5, .increasing = 0, .translate_pct = 0.45,
                        .interp = RA_INTERP_BICUBIC, .fill = {128, 128, 128}};
    int have_mstd = 0, have_mmax = 0;
    if (strncmp(spec, "rand", 4) || (spec[4] && spec[4] != '-'))
        return rai_fail(RA_ERR_ARG, "randaugment: '%s' does not start with 'rand-'", spec);
    for (const char *s = spec[4] ? spec + 5 : spec + 4; *s;) {
        const char *e = strchr(s, '-');
        const size_t n = e ? (size_t)(e - s) : strlen(s);
        size_t k = 0;   /* the key: up to the first digit */
        while (k < n && !digit(s[k])) k++;
        const char *val = s + k;
        const size_t vn = n - k;
        int iv;
        if (n && s[0] == 't')
            return rai_fail(RA_ERR_ARG, "randaugment: '%.*s': timm's other transform sets are not "
                            "supported", (int)n, s);
        if (k == n) {
            /* timm skips a section without a number */
        } else if (k == 4 && !strncmp(s, "mstd", 4)) {
            double v;
            if (!parse_double(&v, val, vn) || v < 0)
                return rai_fail(RA_ERR_ARG, "randaugment: bad mstd '%.*s'", (int)n, s);
            if (!have_mstd) p.magnitude_std = v > 100 ? INFINITY : v;   /* > 100: uniform */
            have_mstd = 1;
        } else if (k == 4 && !strncmp(s, "mmax", 4)) {
            if (!parse_int(&iv, val, vn))
                return rai_fail(RA_ERR_ARG, "randaugment: bad mmax '%.*s'", (int)n, s);
            if (!have_mmax) p.magnitude_max = iv ? iv : 10;   /* timm: mmax or 10 */
            have_mmax = 1;
        } else if (k == 3 && !strncmp(s, "inc", 3)) {
            p.increasing = 1;   /* timm tests bool(the string): inc0 too */
        } else if (k == 1 && s[0] == 'm') {
            if (!parse_int(&iv, val, vn))
                return rai_fail(RA_ERR_ARG, "randaugment: bad magnitude '%.*s'", (int)n, s);
            p.magnitude = iv;
        } else if (k == 1 && s[0] == 'n') {
            if (!parse_int(&iv, val, vn) || iv > RA_AUG_MAX_LAYERS)
                return rai_fail(RA_ERR_ARG, "randaugment: bad layer count '%.*s' (0..%d)", (int)n,
                                s, RA_AUG_MAX_LAYERS);
            p.layers = iv;
        } else if (k == 1 && s[0] == 'p') {
            double v;
            if (!parse_double(&v, val, vn))
                return rai_fail(RA_ERR_ARG, "randaugment: bad probability '%.*s'", (int)n, s);
            p.prob = v;
        } else {
            return rai_fail(RA_ERR_ARG, "randaugment: unknown section '%.*s' (m, n, p, mstd, "
                            "mmax, inc)", (int)n, s);
        }
        s += n;
        if (*s == '-') s++;
    }
    *r = p;
    return RA_OK;
}

static ra_status check_policy(const ra_randaugment *r) {
    if (r->layers < 0 || r->layers > RA_AUG_MAX_LAYERS)
        return rai_fail(RA_ERR_ARG, "randaugment: %d layers (0..%d)", r->layers, RA_AUG_MAX_LAYERS);
    if (!isfinite(r->magnitude) || isnan(r->magnitude_std) || r->magnitude_std == -INFINITY ||
        !(r->magnitude_max >= 0 && r->magnitude_max <= 1e6) || !isfinite(r->prob) ||
        !isfinite(r->translate_pct))
        return rai_fail(RA_ERR_ARG, "randaugment: magnitude %g, mstd %g, mmax %g, p %g, "
                        "translate_pct %g", r->magnitude, r->magnitude_std, r->magnitude_max,
                        r->prob, r->translate_pct);
    if (r->interp != RA_INTERP_NEAREST && r->interp != RA_INTERP_BILINEAR &&
        r->interp != RA_INTERP_BICUBIC)
        return rai_fail(RA_ERR_ARG, "randaugment: interpolation %d (nearest, bilinear, bicubic)",
                        (int)r->interp);
    return RA_OK;
}

/* Uniform in [0, range) without modulo bias, as ra_dataset_batch draws. */
static uint64_t rng_below(ra_rng *rng, uint64_t range) {
    const uint64_t threshold = (0 - range) % range;
    for (;;) {
        const uint64_t v = ra_rng_u64(rng);
        if (v >= threshold) return v % range;
    }
}

/* timm's _randomly_negate: -v if random() > 0.5. */
static double negate(double v, ra_rng *rng) { return ra_rng_uniform(rng) > 0.5 ? -v : v; }

/* The level functions of timm's LEVEL_TO_ARG, the *Increasing ones with inc. */
static double level_to_arg(ra_aug_op op, double m, const ra_randaugment *r, int w, int h,
                           ra_rng *rng) {
    const double l = m / 10.0;
    switch (op) {
    case RA_AUG_ROTATE: return negate(l * 30.0, rng);
    case RA_AUG_POSTERIZE: return r->increasing ? 4 - (int)(l * 4) : (int)(l * 4);
    case RA_AUG_SOLARIZE: {
        const int t = (int)fmin(256.0, (double)(int64_t)(l * 256));
        return r->increasing ? 256 - t : t;
    }
    case RA_AUG_SOLARIZE_ADD: return fmin(128.0, (double)(int64_t)(l * 110));
    case RA_AUG_COLOR:
    case RA_AUG_CONTRAST:
    case RA_AUG_BRIGHTNESS:
    case RA_AUG_SHARPNESS:
        if (!r->increasing) return l * 1.8 + 0.1;
        return fmax(0.1, 1.0 + negate(l * 0.9, rng));
    case RA_AUG_SHEAR_X:
    case RA_AUG_SHEAR_Y: return negate(l * 0.3, rng);
    case RA_AUG_TRANSLATE_X: return negate(l * r->translate_pct, rng) * w;
    case RA_AUG_TRANSLATE_Y: return negate(l * r->translate_pct, rng) * h;
    default: return 0;   /* AutoContrast, Equalize, Invert */
    }
}

ra_status ra_randaugment_draw(ra_aug_step *steps, int w, int h, const ra_randaugment *r,
                              ra_rng *rng) {
    if (!steps || !r || !rng) return rai_fail(RA_ERR_ARG, "randaugment: NULL argument");
    if (w < 1 || h < 1) return rai_fail(RA_ERR_ARG, "randaugment: image %d x %d", w, h);
    ra_status st = check_policy(r);
    if (st) return st;
    for (int i = 0; i < r->layers; i++)   /* the ops first, as timm's np.random.choice */
        steps[i] = (ra_aug_step){.op = (ra_aug_op)rng_below(rng, NOPS)};
    const double upper = r->magnitude_max ? r->magnitude_max : 10.0;
    for (int i = 0; i < r->layers; i++) {
        ra_aug_step *s = &steps[i];
        if (r->prob < 1.0 && ra_rng_uniform(rng) > r->prob) continue;
        double m = r->magnitude;
        if (r->magnitude_std > 0)
            m = isinf(r->magnitude_std) ? m * ra_rng_uniform(rng)
                                        : m + r->magnitude_std * ra_rng_normal(rng);
        m = fmax(0.0, fmin(m, upper));
        s->applied = 1;
        s->magnitude = m;
        s->arg = level_to_arg(s->op, m, r, w, h, rng);
    }
    return RA_OK;
}

ra_status ra_randaugment_apply(uint8_t *img, uint8_t *scratch, int w, int h, int c,
                               const ra_randaugment *r, ra_rng *rng) {
    if (!img || !scratch) return rai_fail(RA_ERR_ARG, "randaugment: NULL image");
    if (c != 1 && c != 3) return rai_fail(RA_ERR_ARG, "randaugment: %d channels (1 or 3)", c);
    ra_aug_step steps[RA_AUG_MAX_LAYERS];
    ra_status st = ra_randaugment_draw(steps, w, h, r, rng);
    if (st) return st;
    uint8_t *cur = img, *other = scratch;
    for (int i = 0; i < r->layers; i++) {
        if (!steps[i].applied) continue;
        st = ra_augment_op(other, cur, w, h, c, steps[i].op, steps[i].arg, r->interp, r->fill);
        if (st) return st;
        uint8_t *t = cur;
        cur = other, other = t;
    }
    if (cur != img) memcpy(img, cur, (size_t)w * h * c);
    return RA_OK;
}
