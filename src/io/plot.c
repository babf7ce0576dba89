/* plot.c - pictures of training as PNG files: heat maps of relative
 * position bias tables, attention maps over an image, loss and accuracy
 * curves.
 *
 * Everything is drawn into an RGB8 canvas in memory (rectangles, 2 px
 * lines, a 5x7 bitmap font of our own), encoded by libspng into a buffer,
 * then written atomically (temporary file in the same directory, fsync,
 * rename), so a failed call leaves nothing at the path. Sizes are computed
 * first and checked against RA_PNG_MAX_* before the canvas is allocated. */
#define _POSIX_C_SOURCE 200809L

#include "base/internal.h"

#include <errno.h>
#include <math.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* PNG files                                                                */
/* ------------------------------------------------------------------------ */

static ra_status check_size(int64_t w, int64_t h) {
    if (w < 1 || h < 1 || w > RA_PNG_MAX_SIDE || h > RA_PNG_MAX_SIDE ||
        w * h > RA_PNG_MAX_PIXELS)
        return rai_fail(RA_ERR_ARG, "picture of %lld x %lld pixels (limits: %d per side, %d in all)",
                        (long long)w, (long long)h, RA_PNG_MAX_SIDE, RA_PNG_MAX_PIXELS);
    return RA_OK;
}

ra_status ra_png_write(const char *path, const uint8_t *rgb, int w, int h) {
    if (!path || !path[0] || !rgb) return rai_fail(RA_ERR_ARG, "png: NULL or empty argument");
    ra_status s = check_size(w, h);
    if (s != RA_OK) return s;
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    if (!ctx) return rai_fail(RA_ERR_NOMEM, "png '%s': out of memory", path);
    struct spng_ihdr ihdr = {.width = (uint32_t)w, .height = (uint32_t)h, .bit_depth = 8,
                             .color_type = SPNG_COLOR_TYPE_TRUECOLOR};
    size_t len = (size_t)w * (size_t)h * 3, png_len = 0;
    void *png = NULL;
    int e = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
    if (!e) e = spng_set_ihdr(ctx, &ihdr);
    if (!e) e = spng_encode_image(ctx, rgb, len, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    if (!e) png = spng_get_png_buffer(ctx, &png_len, &e);
    spng_ctx_free(ctx);
    if (e || !png) {
        free(png);
        return rai_fail(e == SPNG_EMEM ? RA_ERR_NOMEM : RA_ERR_INTERNAL, "png '%s': %s", path,
                        spng_strerror(e));
    }
    s = rai_write_file_atomic(path, (const void *const[]){png}, (const size_t[]){png_len}, 1);
    free(png);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Canvas, lines and text                                                   */
/* ------------------------------------------------------------------------ */

typedef struct rgb8 { uint8_t r, g, b; } rgb8;

static const rgb8 WHITE = {255, 255, 255}, INK = {34, 34, 34}, AXIS = {0, 0, 0},
                  GRID = {226, 226, 226}, SUBTLE = {110, 110, 110}, CYAN = {0, 255, 255},
                  MISSING = {150, 150, 150};

typedef struct canvas {
    int w, h;
    uint8_t *px;   /* (h, w, 3) */
} canvas;

typedef struct rect { int x0, y0, x1, y1; } rect;   /* [x0, x1) x [y0, y1) */

static ra_status cv_new(canvas *c, int64_t w, int64_t h) {
    c->px = NULL;
    ra_status s = check_size(w, h);
    if (s != RA_OK) return s;
    c->w = (int)w, c->h = (int)h;
    c->px = malloc((size_t)w * (size_t)h * 3);
    if (!c->px) return rai_fail(RA_ERR_NOMEM, "picture of %lld x %lld: out of memory",
                                (long long)w, (long long)h);
    memset(c->px, 255, (size_t)w * (size_t)h * 3);
    return RA_OK;
}

static ra_status cv_save(canvas *c, const char *path) {
    ra_status s = ra_png_write(path, c->px, c->w, c->h);
    free(c->px);
    c->px = NULL;
    return s;
}

static inline void cv_put(canvas *c, int x, int y, rgb8 col) {
    if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
    uint8_t *p = c->px + ((size_t)y * c->w + x) * 3;
    p[0] = col.r, p[1] = col.g, p[2] = col.b;
}

static void cv_fill(canvas *c, int x, int y, int w, int h, rgb8 col) {
    for (int j = y; j < y + h; j++)
        for (int i = x; i < x + w; i++) cv_put(c, i, j, col);
}

/* A 1 px outline just inside [x, x+w) x [y, y+h). */
static void cv_box(canvas *c, int x, int y, int w, int h, rgb8 col) {
    cv_fill(c, x, y, w, 1, col);
    cv_fill(c, x, y + h - 1, w, 1, col);
    cv_fill(c, x, y, 1, h, col);
    cv_fill(c, x + w - 1, y, 1, h, col);
}

/* A line of 2 x 2 px dots (Bresenham), clipped to r. */
static void cv_line2(canvas *c, int x0, int y0, int x1, int y1, rgb8 col, rect r) {
    int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    for (;;) {
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < 2; i++) {
                int x = x0 + i, y = y0 + j;
                if (x >= r.x0 && x < r.x1 && y >= r.y0 && y < r.y1) cv_put(c, x, y, col);
            }
        if (x0 == x1 && y0 == y1) break;
        int e2 = 2 * err;
        if (e2 >= dy) { err += dy; x0 += sx; }
        if (e2 <= dx) { err += dx; y0 += sy; }
    }
}

/* The font: printable ASCII, 5 x 7, one string of 7 rows of 5 per glyph
 * ('#' ink), drawn on a 6 x 9 cell; the letters with a descender (g p q y)
 * are drawn two rows lower, into the two rows under the baseline. */
#define GLYPH_W 5
#define GLYPH_H 7
#define ADV 6
#define LINE 9
static const char *const font[95] = {
    [' ' - 32] = "....." "....." "....." "....." "....." "....." ".....",
    ['!' - 32] = "..#.." "..#.." "..#.." "..#.." "..#.." "....." "..#..",
    ['"' - 32] = ".#.#." ".#.#." "....." "....." "....." "....." ".....",
    ['#' - 32] = ".#.#." ".#.#." "#####" ".#.#." "#####" ".#.#." ".#.#.",
    ['$' - 32] = "..#.." ".####" "#.#.." ".###." "..#.#" "####." "..#..",
    ['%' - 32] = "##..." "##..#" "...#." "..#.." ".#..." "#..##" "...##",
    ['&' - 32] = ".##.." "#..#." "#.#.." ".#..." "#.#.#" "#..#." ".##.#",
    ['\'' - 32] = "..#.." "..#.." "....." "....." "....." "....." ".....",
    ['(' - 32] = "...#." "..#.." ".#..." ".#..." ".#..." "..#.." "...#.",
    [')' - 32] = ".#..." "..#.." "...#." "...#." "...#." "..#.." ".#...",
    ['*' - 32] = "....." "..#.." "#.#.#" ".###." "#.#.#" "..#.." ".....",
    ['+' - 32] = "....." "..#.." "..#.." "#####" "..#.." "..#.." ".....",
    [',' - 32] = "....." "....." "....." "....." ".##.." "..#.." ".#...",
    ['-' - 32] = "....." "....." "....." "#####" "....." "....." ".....",
    ['.' - 32] = "....." "....." "....." "....." "....." ".##.." ".##..",
    ['/' - 32] = "....#" "....#" "...#." "..#.." ".#..." "#...." "#....",
    ['0' - 32] = ".###." "#...#" "#..##" "#.#.#" "##..#" "#...#" ".###.",
    ['1' - 32] = "..#.." ".##.." "..#.." "..#.." "..#.." "..#.." ".###.",
    ['2' - 32] = ".###." "#...#" "....#" "...#." "..#.." ".#..." "#####",
    ['3' - 32] = "#####" "...#." "..#.." "...#." "....#" "#...#" ".###.",
    ['4' - 32] = "...#." "..##." ".#.#." "#..#." "#####" "...#." "...#.",
    ['5' - 32] = "#####" "#...." "####." "....#" "....#" "#...#" ".###.",
    ['6' - 32] = "..##." ".#..." "#...." "####." "#...#" "#...#" ".###.",
    ['7' - 32] = "#####" "....#" "...#." "..#.." ".#..." ".#..." ".#...",
    ['8' - 32] = ".###." "#...#" "#...#" ".###." "#...#" "#...#" ".###.",
    ['9' - 32] = ".###." "#...#" "#...#" ".####" "....#" "...#." ".##..",
    [':' - 32] = "....." ".##.." ".##.." "....." ".##.." ".##.." ".....",
    [';' - 32] = "....." ".##.." ".##.." "....." ".##.." "..#.." ".#...",
    ['<' - 32] = "...#." "..#.." ".#..." "#...." ".#..." "..#.." "...#.",
    ['=' - 32] = "....." "....." "#####" "....." "#####" "....." ".....",
    ['>' - 32] = ".#..." "..#.." "...#." "....#" "...#." "..#.." ".#...",
    ['?' - 32] = ".###." "#...#" "....#" "...#." "..#.." "....." "..#..",
    ['@' - 32] = ".###." "#...#" "....#" ".##.#" "#.#.#" "#.#.#" ".###.",
    ['A' - 32] = ".###." "#...#" "#...#" "#####" "#...#" "#...#" "#...#",
    ['B' - 32] = "####." "#...#" "#...#" "####." "#...#" "#...#" "####.",
    ['C' - 32] = ".###." "#...#" "#...." "#...." "#...." "#...#" ".###.",
    ['D' - 32] = "###.." "#..#." "#...#" "#...#" "#...#" "#..#." "###..",
    ['E' - 32] = "#####" "#...." "#...." "####." "#...." "#...." "#####",
    ['F' - 32] = "#####" "#...." "#...." "####." "#...." "#...." "#....",
    ['G' - 32] = ".###." "#...#" "#...." "#.###" "#...#" "#...#" ".####",
    ['H' - 32] = "#...#" "#...#" "#...#" "#####" "#...#" "#...#" "#...#",
    ['I' - 32] = ".###." "..#.." "..#.." "..#.." "..#.." "..#.." ".###.",
    ['J' - 32] = "..###" "...#." "...#." "...#." "...#." "#..#." ".##..",
    ['K' - 32] = "#...#" "#..#." "#.#.." "##..." "#.#.." "#..#." "#...#",
    ['L' - 32] = "#...." "#...." "#...." "#...." "#...." "#...." "#####",
    ['M' - 32] = "#...#" "##.##" "#.#.#" "#.#.#" "#...#" "#...#" "#...#",
    ['N' - 32] = "#...#" "#...#" "##..#" "#.#.#" "#..##" "#...#" "#...#",
    ['O' - 32] = ".###." "#...#" "#...#" "#...#" "#...#" "#...#" ".###.",
    ['P' - 32] = "####." "#...#" "#...#" "####." "#...." "#...." "#....",
    ['Q' - 32] = ".###." "#...#" "#...#" "#...#" "#.#.#" "#..#." ".##.#",
    ['R' - 32] = "####." "#...#" "#...#" "####." "#.#.." "#..#." "#...#",
    ['S' - 32] = ".####" "#...." "#...." ".###." "....#" "....#" "####.",
    ['T' - 32] = "#####" "..#.." "..#.." "..#.." "..#.." "..#.." "..#..",
    ['U' - 32] = "#...#" "#...#" "#...#" "#...#" "#...#" "#...#" ".###.",
    ['V' - 32] = "#...#" "#...#" "#...#" "#...#" "#...#" ".#.#." "..#..",
    ['W' - 32] = "#...#" "#...#" "#...#" "#.#.#" "#.#.#" "#.#.#" ".#.#.",
    ['X' - 32] = "#...#" "#...#" ".#.#." "..#.." ".#.#." "#...#" "#...#",
    ['Y' - 32] = "#...#" "#...#" ".#.#." "..#.." "..#.." "..#.." "..#..",
    ['Z' - 32] = "#####" "....#" "...#." "..#.." ".#..." "#...." "#####",
    ['[' - 32] = ".###." ".#..." ".#..." ".#..." ".#..." ".#..." ".###.",
    ['\\' - 32] = "#...." "#...." ".#..." "..#.." "...#." "....#" "....#",
    [']' - 32] = ".###." "...#." "...#." "...#." "...#." "...#." ".###.",
    ['^' - 32] = "..#.." ".#.#." "#...#" "....." "....." "....." ".....",
    ['_' - 32] = "....." "....." "....." "....." "....." "....." "#####",
    ['`' - 32] = ".#..." "..#.." "....." "....." "....." "....." ".....",
    ['a' - 32] = "....." "....." ".###." "....#" ".####" "#...#" ".####",
    ['b' - 32] = "#...." "#...." "#.##." "##..#" "#...#" "#...#" "####.",
    ['c' - 32] = "....." "....." ".###." "#...." "#...." "#...#" ".###.",
    ['d' - 32] = "....#" "....#" ".##.#" "#..##" "#...#" "#...#" ".####",
    ['e' - 32] = "....." "....." ".###." "#...#" "#####" "#...." ".###.",
    ['f' - 32] = "..##." ".#..#" ".#..." "###.." ".#..." ".#..." ".#...",
    ['g' - 32] = ".####" "#...#" "#...#" "#...#" ".####" "....#" ".###.",
    ['h' - 32] = "#...." "#...." "#.##." "##..#" "#...#" "#...#" "#...#",
    ['i' - 32] = "..#.." "....." ".##.." "..#.." "..#.." "..#.." ".###.",
    ['j' - 32] = "...#." "....." "..##." "...#." "...#." "#..#." ".##..",
    ['k' - 32] = "#...." "#...." "#..#." "#.#.." "##..." "#.#.." "#..#.",
    ['l' - 32] = ".##.." "..#.." "..#.." "..#.." "..#.." "..#.." ".###.",
    ['m' - 32] = "....." "....." "##.#." "#.#.#" "#.#.#" "#...#" "#...#",
    ['n' - 32] = "....." "....." "#.##." "##..#" "#...#" "#...#" "#...#",
    ['o' - 32] = "....." "....." ".###." "#...#" "#...#" "#...#" ".###.",
    ['p' - 32] = "####." "#...#" "#...#" "#...#" "####." "#...." "#....",
    ['q' - 32] = ".####" "#...#" "#...#" "#...#" ".####" "....#" "....#",
    ['r' - 32] = "....." "....." "#.##." "##..#" "#...." "#...." "#....",
    ['s' - 32] = "....." "....." ".###." "#...." ".###." "....#" "####.",
    ['t' - 32] = ".#..." ".#..." "###.." ".#..." ".#..." ".#..#" "..##.",
    ['u' - 32] = "....." "....." "#...#" "#...#" "#...#" "#..##" ".##.#",
    ['v' - 32] = "....." "....." "#...#" "#...#" "#...#" ".#.#." "..#..",
    ['w' - 32] = "....." "....." "#...#" "#...#" "#.#.#" "#.#.#" ".#.#.",
    ['x' - 32] = "....." "....." "#...#" ".#.#." "..#.." ".#.#." "#...#",
    ['y' - 32] = "#...#" "#...#" "#...#" "#...#" ".####" "....#" ".###.",
    ['z' - 32] = "....." "....." "#####" "...#." "..#.." ".#..." "#####",
    ['{' - 32] = "...#." "..#.." "..#.." ".#..." "..#.." "..#.." "...#.",
    ['|' - 32] = "..#.." "..#.." "..#.." "..#.." "..#.." "..#.." "..#..",
    ['}' - 32] = ".#..." "..#.." "..#.." "...#." "..#.." "..#.." ".#...",
    ['~' - 32] = "....." "....." ".#..." "#.#.#" "...#." "....." ".....",
};

static int text_w(const char *s, int scale) {
    size_t n = s ? strlen(s) : 0;
    return n ? (int)(n * ADV - 1) * scale : 0;
}

/* s with its top-left corner at (x, y), each font pixel scale x scale. */
static void cv_text(canvas *c, int x, int y, const char *s, int scale, rgb8 col) {
    if (!s) return;
    for (; *s; s++, x += ADV * scale) {
        unsigned char ch = (unsigned char)*s;
        const char *g = ch >= 32 && ch < 127 ? font[ch - 32] : font['?' - 32];
        int down = ch && strchr("gpqy", ch) ? 2 : 0;
        for (int j = 0; j < GLYPH_H; j++)
            for (int i = 0; i < GLYPH_W; i++)
                if (g[j * GLYPH_W + i] == '#')
                    cv_fill(c, x + i * scale, y + (j + down) * scale, scale, scale, col);
    }
}

/* ------------------------------------------------------------------------ */
/* Colour maps and numbers                                                  */
/* ------------------------------------------------------------------------ */

static rgb8 ramp(const uint8_t (*a)[3], int n, double t) {
    if (!(t >= 0)) t = 0;
    if (t > 1) t = 1;
    double p = t * (n - 1);
    int i = (int)p;
    if (i >= n - 1) return (rgb8){a[n - 1][0], a[n - 1][1], a[n - 1][2]};
    double f = p - i;
    rgb8 r;
    r.r = (uint8_t)lround(a[i][0] + f * (a[i + 1][0] - a[i][0]));
    r.g = (uint8_t)lround(a[i][1] + f * (a[i + 1][1] - a[i][1]));
    r.b = (uint8_t)lround(a[i][2] + f * (a[i + 1][2] - a[i][2]));
    return r;
}

/* Blue - white - red (ColorBrewer RdBu, reversed); t in [-1, 1], t = 0 is
 * exactly the middle anchor. */
static const uint8_t diverging[11][3] = {
    {5, 48, 97},    {33, 102, 172}, {67, 147, 195}, {146, 197, 222}, {209, 229, 240},
    {247, 247, 247}, {253, 219, 199}, {244, 165, 130}, {214, 96, 77}, {178, 24, 43},
    {103, 0, 31}};
static rgb8 cmap_diverging(double t) {
    if (isnan(t)) return MISSING;
    return ramp(diverging, 11, (t + 1) / 2);
}

/* Inferno-like: black - purple - red - orange - pale yellow; t in [0, 1]. */
static const uint8_t sequential[8][3] = {
    {0, 0, 4},     {40, 11, 84},   {101, 21, 110}, {159, 42, 99},
    {212, 72, 66}, {245, 125, 21}, {250, 193, 39}, {252, 255, 164}};
static rgb8 cmap_sequential(double t) { return ramp(sequential, 8, t); }

/* Ten distinct colours for curves (matplotlib's tab10). */
static const rgb8 palette[10] = {
    {31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},  {148, 103, 189},
    {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207}};

/* Ticks at multiples of 1, 2 or 5 x 10^k, about n intervals over [lo, hi];
 * lo and hi are widened to ticks. */
static void nice_range(double *lo, double *hi, double *step, int n) {
    if (!(*hi > *lo)) {
        double d = fabs(*lo) * 0.1;
        if (!(d > 0)) d = 1;
        *lo -= d, *hi += d;
    }
    double raw = (*hi - *lo) / n, p = pow(10, floor(log10(raw))), f = raw / p;
    *step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
    *lo = floor(*lo / *step + 1e-9) * *step;
    *hi = ceil(*hi / *step - 1e-9) * *step;
}

/* v as a tick label: as many decimals as the step needs. */
static void fmt_tick(char *buf, size_t n, double v, double step) {
    if (fabs(v) < step * 1e-6) v = 0;
    if (fabs(v) >= 1e7 || step < 1e-5) {
        snprintf(buf, n, "%.2g", v);
        return;
    }
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    snprintf(buf, n, "%.*f", dec, v);
}

/* 3 significant digits, no exponent unless needed ("0.0123", "-1.5"). */
static void fmt_value(char *buf, size_t n, double v) { snprintf(buf, n, "%.3g", v); }

/* ------------------------------------------------------------------------ */
/* Relative position bias tables                                            */
/* ------------------------------------------------------------------------ */

#define MARGIN 16
#define HEADS_PER_LINE 12

/* A vertical colour bar at (x, y), h px tall, from +vmax (top) to -vmax,
 * with five labelled ticks. Returns the width used. */
static int colour_bar(canvas *c, int x, int y, int h, double vmax, int draw) {
    const int bw = 14;
    int tw = 0;
    char buf[32];
    for (int k = 0; k <= 4; k++) {
        double v = vmax * (1 - k / 2.0);
        fmt_value(buf, sizeof buf, v);
        if (text_w(buf, 1) > tw) tw = text_w(buf, 1);
        if (!draw) continue;
        int ty = y + (int)lround((h - 1) * k / 4.0);
        cv_fill(c, x + bw, ty, 4, 1, AXIS);
        cv_text(c, x + bw + 6, ty - GLYPH_H / 2, buf, 1, INK);
    }
    if (draw) {
        for (int j = 0; j < h; j++)
            cv_fill(c, x, y + j, bw, 1, cmap_diverging(1 - 2.0 * j / (h - 1)));
        cv_box(c, x - 1, y - 1, bw + 2, h + 2, AXIS);
    }
    return bw + 6 + tw;
}

static int table_lines(const ra_plot_table *t) { return (t->nh + HEADS_PER_LINE - 1) / HEADS_PER_LINE; }

/* Draw (or only measure, c == NULL) the whole picture; returns its size. */
static void bias_draw(canvas *c, const ra_plot_table *tables, int nt, ra_plot_scale scale,
                      const char *title, const double *vmax, int *W, int *H) {
    int smax = 1, maxcols = 1;
    for (int t = 0; t < nt; t++) {
        int sh = 2 * tables[t].wh - 1, sw = 2 * tables[t].ww - 1;
        if (sh > smax) smax = sh;
        if (sw > smax) smax = sw;
        int cols = tables[t].nh < HEADS_PER_LINE ? tables[t].nh : HEADS_PER_LINE;
        if (cols > maxcols) maxcols = cols;
    }
    int cell = 190 / smax;
    cell = cell < 4 ? 4 : cell > 16 ? 16 : cell;
    /* Columns are as wide as the widest panel (or "head 23"). */
    int colw = text_w("head 00", 1), gutter = 0;
    char buf[64];
    for (int t = 0; t < nt; t++) {
        int pw = (2 * tables[t].ww - 1) * cell;
        if (pw > colw) colw = pw;
        snprintf(buf, sizeof buf, "%d", -(tables[t].wh - 1));
        if (text_w(buf, 1) + 8 > gutter) gutter = text_w(buf, 1) + 8;
    }
    gutter += text_w("dy", 1) + 4;
    int stride = colw + 14;
    int x0 = MARGIN + gutter, y = MARGIN, right = x0 + maxcols * stride - 14;
    if (title) {
        if (c) cv_text(c, MARGIN, y, title, 2, INK);
        if (MARGIN + text_w(title, 2) > right) right = MARGIN + text_w(title, 2);
        y += 2 * LINE + 8;
    }
    int bar_x = x0 + maxcols * stride + 6, bar_min = scale == RA_PLOT_SCALE_SHARED ? 0 : 64;
    int bottom = y;
    for (int t = 0; t < nt; t++) {
        const ra_plot_table *tb = &tables[t];
        int sh = 2 * tb->wh - 1, sw = 2 * tb->ww - 1, ph = sh * cell, pw = sw * cell;
        if (tb->label) {
            if (c) cv_text(c, MARGIN, y, tb->label, 2, INK);
            if (MARGIN + text_w(tb->label, 2) > right) right = MARGIN + text_w(tb->label, 2);
            y += 2 * LINE + 2;
        }
        double vm = vmax[scale == RA_PLOT_SCALE_SHARED ? 0 : t];
        for (int l = 0; l < table_lines(tb); l++) {
            int h0 = l * HEADS_PER_LINE, h1 = h0 + HEADS_PER_LINE < tb->nh ? h0 + HEADS_PER_LINE : tb->nh;
            int py = y + LINE + 2;
            for (int hd = h0; hd < h1; hd++) {
                int px = x0 + (hd - h0) * stride;
                if (!c) continue;
                snprintf(buf, sizeof buf, "head %d", hd);
                cv_text(c, px, y, buf, 1, INK);
                for (int i = 0; i < sh; i++)
                    for (int j = 0; j < sw; j++) {
                        double v = tb->table[((int64_t)i * sw + j) * tb->nh + hd];
                        rgb8 col = isfinite(v) ? cmap_diverging(v / vm) : MISSING;
                        cv_fill(c, px + j * cell, py + i * cell, cell, cell, col);
                    }
                /* ticks at dx = 0 above and dy = 0 on the left */
                int cx = px + (tb->ww - 1) * cell, cy = py + (tb->wh - 1) * cell;
                cv_fill(c, cx, py - 3, cell, 2, SUBTLE);
                cv_fill(c, px - 3, cy, 2, cell, SUBTLE);
            }
            if (c && l == 0) {
                /* dy labels left of the first panel, dx labels under it */
                int lo = -(tb->wh - 1), hi = tb->wh - 1;
                for (int k = 0; k < 3; k++) {
                    int d = k == 0 ? lo : k == 1 ? 0 : hi;
                    if (k != 1 && d == 0) continue;
                    snprintf(buf, sizeof buf, "%d", d);
                    int ty = py + (d - lo) * cell + cell / 2 - GLYPH_H / 2;
                    cv_text(c, x0 - 5 - text_w(buf, 1), ty, buf, 1, INK);
                }
                cv_text(c, MARGIN, py + ph / 2 - GLYPH_H / 2, "dy", 1, SUBTLE);
                lo = -(tb->ww - 1), hi = tb->ww - 1;
                for (int k = 0; k < 3; k++) {
                    int d = k == 0 ? lo : k == 1 ? 0 : hi;
                    if (k != 1 && d == 0) continue;
                    snprintf(buf, sizeof buf, "%d", d);
                    int tx = x0 + (d - lo) * cell + cell / 2 - text_w(buf, 1) / 2;
                    cv_text(c, tx, py + ph + 5, buf, 1, INK);
                }
                cv_text(c, x0 + pw + 6, py + ph + 5, "dx", 1, SUBTLE);
            }
            int ph_line = ph;
            if (l == 0 && scale != RA_PLOT_SCALE_SHARED) {
                /* right after this table's panels */
                int bx = x0 + (h1 - h0) * stride + 6;
                if (ph_line < bar_min) ph_line = bar_min;
                int bw = colour_bar(c, bx, py, ph_line, vm, c != NULL);
                if (bx + bw > right) right = bx + bw;
            }
            if (l == 0 && scale == RA_PLOT_SCALE_SHARED && t == 0) {
                int bh = ph < 120 ? 120 : ph > 320 ? 320 : ph;
                int bw = colour_bar(c, bar_x, py, bh, vm, c != NULL);
                if (bar_x + bw > right) right = bar_x + bw;
                if (py + bh + 8 > bottom) bottom = py + bh + 8;
            }
            y = py + ph_line + (l == 0 ? 6 + LINE : 4) + (l == table_lines(tb) - 1 ? 14 : 8);
        }
        if (y > bottom) bottom = y;
    }
    *W = right + MARGIN;
    *H = bottom + MARGIN - 8;
}

ra_status ra_plot_bias_tables(const char *path, const ra_plot_table *tables, int ntables,
                              ra_plot_scale scale, const char *title) {
    if (!path || !path[0] || !tables || ntables < 1 || ntables > 4096)
        return rai_fail(RA_ERR_ARG, "plot bias: NULL path or tables, or %d tables", ntables);
    if (scale != RA_PLOT_SCALE_SHARED && scale != RA_PLOT_SCALE_PER_TABLE)
        return rai_fail(RA_ERR_ARG, "plot bias: unknown scale %d", (int)scale);
    for (int t = 0; t < ntables; t++) {
        const ra_plot_table *tb = &tables[t];
        if (!tb->table || tb->nh < 1 || tb->nh > 1024 || tb->wh < 1 || tb->ww < 1 ||
            tb->wh > 256 || tb->ww > 256)
            return rai_fail(RA_ERR_ARG, "plot bias: table %d: NULL or %d heads, window %dx%d",
                            t, tb->nh, tb->wh, tb->ww);
    }
    double *vmax = malloc(sizeof(double) * (size_t)ntables);
    if (!vmax) return rai_fail(RA_ERR_NOMEM, "plot bias: out of memory");
    for (int t = 0; t < ntables; t++) {
        const ra_plot_table *tb = &tables[t];
        int64_t n = (int64_t)(2 * tb->wh - 1) * (2 * tb->ww - 1) * tb->nh;
        double m = 0;
        for (int64_t i = 0; i < n; i++)
            if (isfinite(tb->table[i]) && fabs(tb->table[i]) > m) m = fabs(tb->table[i]);
        vmax[t] = m;
    }
    if (scale == RA_PLOT_SCALE_SHARED)
        for (int t = 1; t < ntables; t++)
            if (vmax[t] > vmax[0]) vmax[0] = vmax[t];
    for (int t = 0; t < ntables; t++)
        if (!(vmax[t] > 0)) vmax[t] = 1;   /* an all-zero table is all white */
    int W, H;
    bias_draw(NULL, tables, ntables, scale, title, vmax, &W, &H);
    canvas c;
    ra_status s = cv_new(&c, W, H);
    if (s == RA_OK) {
        bias_draw(&c, tables, ntables, scale, title, vmax, &W, &H);
        s = cv_save(&c, path);
    }
    free(vmax);
    return s;
}

ra_status ra_plot_bias_table(const char *path, const float *table, int nh, int wh, int ww,
                             const char *title) {
    ra_plot_table t = {table, nh, wh, ww, NULL};
    return ra_plot_bias_tables(path, &t, 1, RA_PLOT_SCALE_SHARED, title);
}

/* ------------------------------------------------------------------------ */
/* Attention maps                                                           */
/* ------------------------------------------------------------------------ */

static double clamp01(double v) { return v > 0 ? (v < 1 ? v : 1) : 0; }   /* NaN -> 0 */

ra_status ra_plot_attention(const char *path, const float *image, int h, int w, int channels,
                            const float *maps, int nq, int nh, int gh, int gw,
                            const int *queries, const char *title) {
    if (!path || !path[0] || !image || !maps || !queries)
        return rai_fail(RA_ERR_ARG, "plot attention: NULL argument");
    if (h < 1 || w < 1 || h > 8192 || w > 8192 || (channels != 1 && channels != 3) || nq < 1 ||
        nh < 1 || nq > 1024 || nh > 1024 || gh < 1 || gw < 1 || gh > 8192 || gw > 8192)
        return rai_fail(RA_ERR_ARG,
                        "plot attention: image %dx%dx%d, %d queries, %d heads, grid %dx%d", h, w,
                        channels, nq, nh, gh, gw);
    for (int q = 0; q < nq; q++)
        if (queries[2 * q] < 0 || queries[2 * q] >= gh || queries[2 * q + 1] < 0 ||
            queries[2 * q + 1] >= gw)
            return rai_fail(RA_ERR_ARG, "plot attention: query %d at (%d, %d) outside the %dx%d grid",
                            q, queries[2 * q], queries[2 * q + 1], gh, gw);
    /* Panel size: integer upscaling to about 170 px, at most 8x; large
     * images shrink to 512 px on their longer side. */
    int big = h > w ? h : w, pw, ph;
    if (big <= 170) {
        int s = 170 / big;
        s = s < 1 ? 1 : s > 8 ? 8 : s;
        pw = w * s, ph = h * s;
    } else if (big <= 512) {
        pw = w, ph = h;
    } else {
        pw = (int)((int64_t)w * 512 / big), ph = (int)((int64_t)h * 512 / big);
        if (pw < 1) pw = 1;
        if (ph < 1) ph = 1;
    }
    int colw = pw, gap = 14;
    if (text_w("head 00  max 0.000", 1) > colw) colw = text_w("head 00  max 0.000", 1);
    int top = MARGIN + (title ? 2 * LINE + 8 : 0), rowh = LINE + 2 + ph + 12;
    int64_t W = 2 * MARGIN + (int64_t)(nh + 1) * (colw + gap) - gap;
    int64_t H = top + (int64_t)nq * rowh + MARGIN - 12;
    if (title && 2 * MARGIN + text_w(title, 2) > W) W = 2 * MARGIN + text_w(title, 2);
    canvas c;
    ra_status s = cv_new(&c, W, H);
    if (s != RA_OK) return s;
    if (title) cv_text(&c, MARGIN, MARGIN, title, 2, INK);
    /* the grey image once, at panel resolution */
    float *grey = malloc(sizeof(float) * (size_t)pw * ph);
    if (!grey) {
        free(c.px);
        return rai_fail(RA_ERR_NOMEM, "plot attention: out of memory");
    }
    for (int y = 0; y < ph; y++)
        for (int x = 0; x < pw; x++) {
            const float *p = image + ((size_t)((int64_t)y * h / ph) * w + (int64_t)x * w / pw) * channels;
            grey[(size_t)y * pw + x] = (float)(channels == 1 ? clamp01(p[0])
                                         : clamp01(0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]));
        }
    char buf[64];
    for (int q = 0; q < nq; q++) {
        int y0 = top + q * rowh, py = y0 + LINE + 2;
        int qr = queries[2 * q], qc = queries[2 * q + 1];
        /* the query's grid cell in panel pixels */
        int cx0 = (int)((int64_t)qc * w / gw * pw / w), cx1 = (int)((int64_t)(qc + 1) * w / gw * pw / w);
        int cy0 = (int)((int64_t)qr * h / gh * ph / h), cy1 = (int)((int64_t)(qr + 1) * h / gh * ph / h);
        if (cx1 <= cx0) cx1 = cx0 + 1;
        if (cy1 <= cy0) cy1 = cy0 + 1;
        for (int col = 0; col <= nh; col++) {
            int px = MARGIN + col * (colw + gap);
            const float *m = col ? maps + ((size_t)q * nh + (col - 1)) * gh * gw : NULL;
            double mx = 0;
            if (m)
                for (int i = 0; i < gh * gw; i++)
                    if (m[i] > mx) mx = m[i];   /* NaN never counts */
            if (col == 0) snprintf(buf, sizeof buf, "query (%d, %d)", qr, qc);
            else snprintf(buf, sizeof buf, "head %d  max %.3f", col - 1, mx);
            cv_text(&c, px, y0, buf, 1, INK);
            for (int y = 0; y < ph; y++)
                for (int x = 0; x < pw; x++) {
                    int iy = (int)((int64_t)y * h / ph), ix = (int)((int64_t)x * w / pw);
                    rgb8 o;
                    if (col == 0) {
                        const float *p = image + ((size_t)iy * w + ix) * channels;
                        int ch = channels == 3;
                        o.r = (uint8_t)lround(255 * clamp01(p[0]));
                        o.g = (uint8_t)lround(255 * clamp01(p[ch]));
                        o.b = (uint8_t)lround(255 * clamp01(p[2 * ch]));
                    } else {
                        double v = m[(size_t)((int64_t)iy * gh / h) * gw + (int64_t)ix * gw / w];
                        double a = mx > 0 ? clamp01(v / mx) : 0;
                        rgb8 hc = cmap_sequential(a);
                        double g = 0.45 * 255 * grey[(size_t)y * pw + x];
                        o.r = (uint8_t)lround(g * (1 - a) + hc.r * a);
                        o.g = (uint8_t)lround(g * (1 - a) + hc.g * a);
                        o.b = (uint8_t)lround(g * (1 - a) + hc.b * a);
                    }
                    cv_put(&c, px + x, py + y, o);
                }
            /* the query cell, outlined 2 px outside */
            cv_box(&c, px + cx0 - 2, py + cy0 - 2, cx1 - cx0 + 4, cy1 - cy0 + 4, CYAN);
            cv_box(&c, px + cx0 - 1, py + cy0 - 1, cx1 - cx0 + 2, cy1 - cy0 + 2, CYAN);
        }
    }
    free(grey);
    return cv_save(&c, path);
}

/* ------------------------------------------------------------------------ */
/* Curves                                                                   */
/* ------------------------------------------------------------------------ */

#define PLOT_W 400
#define PLOT_H 260

static double series_x(const ra_plot_series *s, int i) { return s->x ? s->x[i] : i; }

ra_status ra_plot_curves(const char *path, const ra_plot_series *series, int nseries,
                         const char *const *panel_titles, int npanels, const char *xlabel,
                         const char *title) {
    if (!path || !path[0] || !series || nseries < 1 || nseries > 64 || npanels < 1 || npanels > 4)
        return rai_fail(RA_ERR_ARG, "plot curves: NULL argument, %d series, %d panels", nseries,
                        npanels);
    for (int k = 0; k < nseries; k++)
        if (!series[k].y || series[k].n < 0 || series[k].panel < 0 || series[k].panel >= npanels)
            return rai_fail(RA_ERR_ARG, "plot curves: series %d: NULL y, %d points or panel %d", k,
                            series[k].n, series[k].panel);
    /* Colours by name: "train" is one colour in every panel. */
    int colour[64], ncol = 0;
    for (int k = 0; k < nseries; k++) {
        colour[k] = -1;
        for (int j = 0; j < k && series[k].name; j++)
            if (series[j].name && !strcmp(series[j].name, series[k].name)) colour[k] = colour[j];
        if (colour[k] < 0) colour[k] = ncol++ % 10;
    }
    double xlo[4], xhi[4], xst[4], ylo[4], yhi[4], yst[4];
    int lw[4];   /* width of the y tick labels */
    char buf[64];
    for (int p = 0; p < npanels; p++) {
        xlo[p] = ylo[p] = INFINITY, xhi[p] = yhi[p] = -INFINITY;
        for (int k = 0; k < nseries; k++) {
            if (series[k].panel != p) continue;
            for (int i = 0; i < series[k].n; i++) {
                double x = series_x(&series[k], i), y = series[k].y[i];
                if (!isfinite(x) || !isfinite(y)) continue;
                if (x < xlo[p]) xlo[p] = x;
                if (x > xhi[p]) xhi[p] = x;
                if (y < ylo[p]) ylo[p] = y;
                if (y > yhi[p]) yhi[p] = y;
            }
        }
        if (!(xlo[p] <= xhi[p])) xlo[p] = 0, xhi[p] = 1;
        if (!(ylo[p] <= yhi[p])) ylo[p] = 0, yhi[p] = 1;
        nice_range(&xlo[p], &xhi[p], &xst[p], 5);
        nice_range(&ylo[p], &yhi[p], &yst[p], 5);
        lw[p] = 0;
        for (double v = ylo[p]; v <= yhi[p] + yst[p] * 1e-6; v += yst[p]) {
            fmt_tick(buf, sizeof buf, v, yst[p]);
            if (text_w(buf, 1) > lw[p]) lw[p] = text_w(buf, 1);
        }
    }
    int top = MARGIN + (title ? 2 * LINE + 10 : 0) + (panel_titles ? 2 * LINE + 6 : 0);
    int fx[4], x = MARGIN;
    for (int p = 0; p < npanels; p++) {
        fx[p] = x + lw[p] + 10;
        x = fx[p] + PLOT_W + 36;
    }
    int64_t W = x - 36 + MARGIN, H = top + PLOT_H + 10 + LINE + (xlabel ? LINE + 8 : 0) + MARGIN;
    if (title && 2 * MARGIN + text_w(title, 2) > W) W = 2 * MARGIN + text_w(title, 2);
    canvas c;
    ra_status s = cv_new(&c, W, H);
    if (s != RA_OK) return s;
    if (title) cv_text(&c, MARGIN, MARGIN, title, 2, INK);
    for (int p = 0; p < npanels; p++) {
        int X0 = fx[p], Y0 = top, X1 = X0 + PLOT_W, Y1 = Y0 + PLOT_H;   /* frame */
        rect in = {X0 + 1, Y0 + 1, X1 - 1, Y1 - 1};
#define PX(v) (X0 + (int)lround(((v) - xlo[p]) / (xhi[p] - xlo[p]) * (PLOT_W - 1)))
#define PY(v) (Y1 - 1 - (int)lround(((v) - ylo[p]) / (yhi[p] - ylo[p]) * (PLOT_H - 1)))
        if (panel_titles && panel_titles[p]) cv_text(&c, X0, Y0 - 2 * LINE - 4, panel_titles[p], 2, INK);
        for (double v = xlo[p]; v <= xhi[p] + xst[p] * 1e-6; v += xst[p]) {
            int tx = PX(v);
            cv_fill(&c, tx, Y0, 1, PLOT_H, GRID);
            cv_fill(&c, tx, Y1, 1, 4, AXIS);
            fmt_tick(buf, sizeof buf, v, xst[p]);
            cv_text(&c, tx - text_w(buf, 1) / 2, Y1 + 7, buf, 1, INK);
        }
        for (double v = ylo[p]; v <= yhi[p] + yst[p] * 1e-6; v += yst[p]) {
            int ty = PY(v);
            cv_fill(&c, X0, ty, PLOT_W, 1, GRID);
            cv_fill(&c, X0 - 4, ty, 4, 1, AXIS);
            fmt_tick(buf, sizeof buf, v, yst[p]);
            cv_text(&c, X0 - 7 - text_w(buf, 1), ty - GLYPH_H / 2, buf, 1, INK);
        }
        cv_box(&c, X0, Y0, PLOT_W, PLOT_H, AXIS);
        if (xlabel) cv_text(&c, X0 + PLOT_W / 2 - text_w(xlabel, 1) / 2, Y1 + 9 + LINE, xlabel, 1, SUBTLE);
        for (int k = 0; k < nseries; k++) {
            if (series[k].panel != p) continue;
            int have = 0, lx = 0, ly = 0;
            for (int i = 0; i < series[k].n; i++) {
                double xv = series_x(&series[k], i), yv = series[k].y[i];
                if (!isfinite(xv) || !isfinite(yv)) { have = 0; continue; }
                int cx = PX(xv), cy = PY(yv);
                cv_line2(&c, have ? lx : cx, have ? ly : cy, cx, cy, palette[colour[k]], in);
                /* a series of few points (evaluations per epoch) gets a
                 * marker at each, so that a single point shows */
                if (series[k].n <= 40 && cx - 2 >= X0 && cx + 3 <= X1 && cy - 2 >= Y0 && cy + 3 <= Y1)
                    cv_fill(&c, cx - 2, cy - 2, 5, 5, palette[colour[k]]);
                have = 1, lx = cx, ly = cy;
            }
        }
        /* the legend, in the corner with the fewest points under it */
        int nent = 0, entw = 0;
        for (int k = 0; k < nseries; k++)
            if (series[k].panel == p && series[k].name) {
                nent++;
                if (text_w(series[k].name, 1) > entw) entw = text_w(series[k].name, 1);
            }
        if (!nent) continue;
        int bw = 8 + 18 + 6 + entw + 8, bh = 6 + nent * (LINE + 3) + 3, best = -1;
        int64_t fewest = INT64_MAX;
        for (int corner = 0; corner < 4; corner++) {
            int bx = corner & 1 ? X1 - 8 - bw : X0 + 8, by = corner & 2 ? Y1 - 8 - bh : Y0 + 8;
            int64_t n = 0;
            for (int k = 0; k < nseries; k++) {
                if (series[k].panel != p) continue;
                for (int i = 0; i < series[k].n; i++) {
                    double xv = series_x(&series[k], i), yv = series[k].y[i];
                    if (!isfinite(xv) || !isfinite(yv)) continue;
                    int cx = PX(xv), cy = PY(yv);
                    n += cx >= bx - 4 && cx < bx + bw + 4 && cy >= by - 4 && cy < by + bh + 4;
                }
            }
            /* prefer the top right, then top left, on ties */
            static const int order_penalty[4] = {1, 0, 3, 2};
            if (n * 4 + order_penalty[corner] < fewest) fewest = n * 4 + order_penalty[corner], best = corner;
        }
        int bx = best & 1 ? X1 - 8 - bw : X0 + 8, by = best & 2 ? Y1 - 8 - bh : Y0 + 8, e = 0;
        cv_fill(&c, bx, by, bw, bh, WHITE);
        cv_box(&c, bx, by, bw, bh, (rgb8){190, 190, 190});
        for (int k = 0; k < nseries; k++) {
            if (series[k].panel != p || !series[k].name) continue;
            int ey = by + 6 + e * (LINE + 3);
            cv_fill(&c, bx + 8, ey + 3, 18, 2, palette[colour[k]]);
            cv_text(&c, bx + 8 + 18 + 6, ey, series[k].name, 1, INK);
            e++;
        }
#undef PX
#undef PY
    }
    return cv_save(&c, path);
}
