/* image.c - images in, model inputs out (for classification).
 *
 * Two formats, each by a maintained and fuzzed decoder: PNG (libspng,
 * any bit depth and colour type, alpha dropped) and JPEG (libjpeg-turbo,
 * greyscale and YCbCr; CMYK refused). Anything else is refused by its first
 * bytes, without a decoder. The size is read from the header and checked
 * against the caller's pixel limit BEFORE any pixel is decoded, so a small
 * file claiming a huge image costs nothing; a JPEG is also held to a number
 * of progressive scans (each is a pass over the whole image) and its
 * decoder's warnings about corrupt data are errors (a truncated file is
 * refused, not padded with grey).
 * Preprocessing is the usual ImageNet evaluation recipe (timm and
 * torchvision): resize so the shorter side is `resize`, centre crop
 * `crop` x `crop`, scale to [0, 1], normalise per channel. */
#define _POSIX_C_SOURCE 200809L   /* fileno */
#include "base/internal.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>   /* before jpeglib.h, which needs FILE */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>   /* JERR_OUT_OF_MEMORY */
#include <spng.h>

#define IMG_MAX_SIDE 65535          /* each side, whatever the pixel limit */
#define IMG_MAX_CHUNK (64u << 20)   /* a PNG chunk, and all ancillary chunks kept */
#define IMG_MAX_SCANS 256           /* progressive JPEG scans */
#define IMG_MAX_JPEG_MEMORY (1L << 30)

/* 8-bit RGB pixels (h, w, 3) -> floats in [0, 1]. */
static ra_status to_float(float **rgb, const unsigned char *px, int w, int h, const char *path) {
    float *out = rai_alloc((size_t)w * h * 3, sizeof *out);
    if (!out) return rai_fail(RA_ERR_NOMEM, "image '%s' (%dx%d): out of memory", path, w, h);
    for (size_t i = 0; i < (size_t)w * h * 3; i++) out[i] = px[i] / 255.0f;
    *rgb = out;
    return RA_OK;
}

static ra_status too_many_pixels(const char *path, int64_t w, int64_t h, int64_t max_pixels) {
    return rai_fail(RA_ERR_FORMAT, "image '%s' is %lldx%lld, above the limit of %lld pixels",
                    path, (long long)w, (long long)h, (long long)max_pixels);
}

/* ---- PNG (libspng) ---------------------------------------------------------- */

static ra_status load_png(uint8_t **rgb, int *w, int *h, FILE *f, const char *path,
                          int64_t max_pixels) {
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) return rai_fail(RA_ERR_NOMEM, "image '%s': out of memory", path);
    unsigned char *px = NULL;
    struct spng_ihdr ih;
    size_t n = 0;
    int e = spng_set_image_limits(ctx, IMG_MAX_SIDE, IMG_MAX_SIDE);
    if (!e) e = spng_set_chunk_limits(ctx, IMG_MAX_CHUNK, IMG_MAX_CHUNK);
    if (!e) e = spng_set_crc_action(ctx, SPNG_CRC_ERROR, SPNG_CRC_ERROR);
    if (!e) e = spng_set_png_file(ctx, f);
    if (!e) e = spng_get_ihdr(ctx, &ih);
    ra_status st = RA_OK;
    if (!e && (int64_t)ih.width * ih.height > max_pixels)
        st = too_many_pixels(path, ih.width, ih.height, max_pixels);
    if (!e && !st) e = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &n);
    if (!e && !st && !(px = malloc(n)))
        st = rai_fail(RA_ERR_NOMEM, "image '%s' (%ux%u): out of memory", path, ih.width, ih.height);
    if (!e && !st) e = spng_decode_image(ctx, px, n, SPNG_FMT_RGB8, 0);
    if (e && !st)
        st = rai_fail(e == SPNG_EMEM ? RA_ERR_NOMEM : RA_ERR_FORMAT, "image '%s': PNG: %s", path,
                      spng_strerror(e));
    if (!st) *rgb = px, px = NULL, *w = (int)ih.width, *h = (int)ih.height;
    free(px);
    spng_ctx_free(ctx);
    return st;
}

/* ---- JPEG (libjpeg-turbo) --------------------------------------------------- */

/* libjpeg reports errors through error_exit, which must not return (its
 * default calls exit()): it jumps back to load_jpeg with the message. */
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf back;
    char msg[JMSG_LENGTH_MAX];
    int nomem;
} jpeg_err;

static void jpeg_error_exit(j_common_ptr c) {
    jpeg_err *e = (jpeg_err *)c->err;
    c->err->format_message(c, e->msg);
    e->nomem = c->err->msg_code == JERR_OUT_OF_MEMORY;
    longjmp(e->back, 1);
}

/* Warnings (level -1) are corrupt data: an error. Trace messages: nothing. */
static void jpeg_emit(j_common_ptr c, int level) {
    if (level < 0) jpeg_error_exit(c);
}

static void jpeg_progress(j_common_ptr c) {
    if (c->is_decompressor && ((j_decompress_ptr)c)->input_scan_number > IMG_MAX_SCANS) {
        jpeg_err *e = (jpeg_err *)c->err;
        snprintf(e->msg, sizeof e->msg, "more than %d progressive scans", IMG_MAX_SCANS);
        e->nomem = 0;
        longjmp(e->back, 1);
    }
}

static ra_status load_jpeg(uint8_t **rgb, int *w, int *h, FILE *f, const char *path,
                           int64_t max_pixels) {
    struct jpeg_decompress_struct cinfo;
    struct jpeg_progress_mgr progress = {.progress_monitor = jpeg_progress};
    jpeg_err err;
    unsigned char *volatile px = NULL;
    volatile ra_status st = RA_OK;
    memset(&cinfo, 0, sizeof cinfo);
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = jpeg_error_exit;
    err.pub.emit_message = jpeg_emit;
    err.msg[0] = 0;
    err.nomem = 0;
    if (setjmp(err.back)) {
        if (!st)
            st = rai_fail(err.nomem ? RA_ERR_NOMEM : RA_ERR_FORMAT, "image '%s': JPEG: %s", path,
                          err.msg);
        jpeg_destroy_decompress(&cinfo);
        free(px);
        return st;
    }
    jpeg_create_decompress(&cinfo);
    cinfo.mem->max_memory_to_use = IMG_MAX_JPEG_MEMORY;
    cinfo.progress = &progress;
    jpeg_stdio_src(&cinfo, f);
    jpeg_read_header(&cinfo, TRUE);
    if ((int64_t)cinfo.image_width * cinfo.image_height > max_pixels) {
        st = too_many_pixels(path, cinfo.image_width, cinfo.image_height, max_pixels);
        longjmp(err.back, 1);
    }
    if (cinfo.jpeg_color_space != JCS_GRAYSCALE && cinfo.jpeg_color_space != JCS_YCbCr &&
        cinfo.jpeg_color_space != JCS_RGB) {
        st = rai_fail(RA_ERR_FORMAT, "image '%s': JPEG: only greyscale and colour (YCbCr, RGB) "
                      "images, not CMYK", path);
        longjmp(err.back, 1);
    }
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    const size_t stride = (size_t)cinfo.output_width * 3, bytes = stride * cinfo.output_height;
    if (cinfo.output_components != 3 || !(px = malloc(bytes ? bytes : 1))) {
        st = rai_fail(RA_ERR_NOMEM, "image '%s' (%ux%u): out of memory", path, cinfo.output_width,
                      cinfo.output_height);
        longjmp(err.back, 1);
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = px + stride * cinfo.output_scanline;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    const int iw = (int)cinfo.output_width, ih = (int)cinfo.output_height;
    jpeg_destroy_decompress(&cinfo);
    *rgb = px, *w = iw, *h = ih;
    return RA_OK;
}

ra_status ra_image_load_u8(uint8_t **rgb, int *w, int *h, const char *path, int64_t max_pixels) {
    if (!rgb || !w || !h || !path) return rai_fail(RA_ERR_ARG, "image: NULL argument");
    *rgb = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return rai_fail(RA_ERR_IO, "cannot open image '%s'", path);
    rai_note_read(fileno(f), path);
    unsigned char magic[8] = {0};
    const size_t got = fread(magic, 1, sizeof magic, f);
    rewind(f);
    ra_status st;
    if (got == 8 && memcmp(magic, "\x89PNG\r\n\x1a\n", 8) == 0)
        st = load_png(rgb, w, h, f, path, max_pixels);
    else if (got >= 3 && magic[0] == 0xff && magic[1] == 0xd8 && magic[2] == 0xff)
        st = load_jpeg(rgb, w, h, f, path, max_pixels);
    else
        st = rai_fail(RA_ERR_FORMAT, "image '%s': not a PNG or JPEG file", path);
    fclose(f);
    return st;
}

ra_status ra_image_load(float **rgb, int *w, int *h, const char *path, int64_t max_pixels) {
    if (!rgb) return rai_fail(RA_ERR_ARG, "image: NULL argument");
    *rgb = NULL;
    uint8_t *px = NULL;
    ra_status st = ra_image_load_u8(&px, w, h, path, max_pixels);
    if (!st) st = to_float(rgb, px, *w, *h, path);
    free(px);
    return st;
}

/* The float image back in 8 bits (what it was decoded from), then the
 * transform of torchvision's ImageNet evaluation (ra_transform_apply). */
ra_status ra_image_preprocess(float *out, const float *rgb, int w, int h, int resize, int crop,
                              const float mean[3], const float std[3]) {
    if (!out || !rgb || !mean || !std || w < 1 || h < 1 || resize < 1 || crop < 1 ||
        crop > resize || w > RA_IMAGE_MAX_SIDE || h > RA_IMAGE_MAX_SIDE)
        return rai_fail(RA_ERR_ARG, "image preprocess: image %dx%d, resize %d, crop %d", w, h,
                        resize, crop);
    ra_transform t = {.resize = RA_RESIZE_SHORTER, .resize_h = resize, .interp = RA_INTERP_BILINEAR,
                      .crop = RA_CROP_CENTER_ROUND, .crop_h = crop, .crop_w = crop,
                      .normalize = 1};
    for (int c = 0; c < 3; c++) t.mean[c] = mean[c], t.std[c] = std[c];
    ra_status st = ra_transform_check(&t);
    if (st) return st;
    const size_t n = (size_t)w * h * 3;
    uint8_t *px = malloc(n);
    if (!px) return rai_fail(RA_ERR_NOMEM, "image preprocess: out of memory");
    for (size_t i = 0; i < n; i++) {
        const float v = rgb[i] * 255.0f;
        px[i] = (uint8_t)(v > 0 ? (v < 255 ? lrintf(v) : 255) : 0);
    }
    st = ra_transform_apply(out, &t, px, w, h);
    free(px);
    return st;
}
