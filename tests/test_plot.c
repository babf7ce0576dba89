/* test_plot.c - the pictures: each is written into a temporary directory,
 * read back with libspng's decoder, and the pixels that must be right are
 * checked by finding them from what the picture shows (panels, frames,
 * colours), not from the drawing code's own layout numbers.
 *
 * `test_plot --samples DIR` writes sample pictures of every kind into DIR
 * to look at (a smooth synthetic bias table, a whole model's tables, a
 * synthetic attention map, training curves). */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "relattn.h"

#include <dirent.h>
#include <math.h>
#include <spng.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct img { int w, h; uint8_t *px; } img;
typedef struct rgb { int r, g, b; } rgb;
typedef struct box { int x0, y0, x1, y1, n; } box;   /* [x0, x1) x [y0, y1), n pixels */

static const rgb RED_END = {103, 0, 31}, BLUE_END = {5, 48, 97}, ZERO = {247, 247, 247},
                 HOT = {252, 255, 164}, CYAN = {0, 255, 255}, BLACK = {0, 0, 0},
                 WHITE = {255, 255, 255}, C0 = {31, 119, 180}, C1 = {255, 127, 14};

static int read_png(img *im, const char *path) {
    im->px = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    spng_ctx *ctx = spng_ctx_new(0);
    struct spng_ihdr ih;
    size_t len;
    int ok = ctx && !spng_set_png_file(ctx, f) && !spng_get_ihdr(ctx, &ih) &&
             ih.color_type == SPNG_COLOR_TYPE_TRUECOLOR && ih.bit_depth == 8 &&
             !spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &len) && (im->px = malloc(len)) &&
             !spng_decode_image(ctx, im->px, len, SPNG_FMT_RGB8, 0);
    if (ok) im->w = (int)ih.width, im->h = (int)ih.height;
    else free(im->px), im->px = NULL;
    spng_ctx_free(ctx);
    fclose(f);
    return ok;
}

static rgb at(const img *im, int x, int y) {
    if (x < 0 || y < 0 || x >= im->w || y >= im->h) return (rgb){-1, -1, -1};
    const uint8_t *p = im->px + ((size_t)y * im->w + x) * 3;
    return (rgb){p[0], p[1], p[2]};
}
static int eq(rgb a, rgb b) { return a.r == b.r && a.g == b.g && a.b == b.b; }
static int near(rgb a, rgb b, int tol) {
    return abs(a.r - b.r) <= tol && abs(a.g - b.g) <= tol && abs(a.b - b.b) <= tol;
}

/* Connected components (4-neighbours) of pixels of exactly colour c inside
 * the region r, as bounding boxes; returns how many (at most max). */
static int components(const img *im, rgb c, box r, box *out, int max) {
    int n = 0, w = im->w;
    uint8_t *seen = calloc((size_t)im->w * im->h, 1);
    int *stack = malloc(sizeof(int) * (size_t)im->w * im->h);
    for (int y = r.y0; y < r.y1; y++)
        for (int x = r.x0; x < r.x1; x++) {
            if (seen[y * w + x] || !eq(at(im, x, y), c)) continue;
            box b = {x, y, x + 1, y + 1, 0};
            int sp = 0;
            stack[sp++] = y * w + x;
            seen[y * w + x] = 1;
            while (sp) {
                int p = stack[--sp], px = p % w, py = p / w;
                b.n++;
                if (px < b.x0) b.x0 = px;
                if (px + 1 > b.x1) b.x1 = px + 1;
                if (py < b.y0) b.y0 = py;
                if (py + 1 > b.y1) b.y1 = py + 1;
                const int nb[4][2] = {{1, 0}, {-1, 0}, {0, 1}, {0, -1}};
                for (int k = 0; k < 4; k++) {
                    int qx = px + nb[k][0], qy = py + nb[k][1];
                    if (qx < r.x0 || qy < r.y0 || qx >= r.x1 || qy >= r.y1) continue;
                    if (seen[qy * w + qx] || !eq(at(im, qx, qy), c)) continue;
                    seen[qy * w + qx] = 1;
                    stack[sp++] = qy * w + qx;
                }
            }
            if (n < max) out[n] = b;
            n++;
        }
    free(seen);
    free(stack);
    return n;
}
static box whole(const img *im) { return (box){0, 0, im->w, im->h, 0}; }

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Entries in dir other than . and .. */
static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

/* ---- ra_png_write --------------------------------------------------------- */

static void test_png(const char *dir) {
    char path[512], bad[512];
    uint8_t px[5 * 7 * 3];
    for (int i = 0; i < 5 * 7 * 3; i++) px[i] = (uint8_t)(i * 37 + 11);
    snprintf(path, sizeof path, "%s/raw.png", dir);
    CHECK(ra_png_write(path, px, 7, 5) == RA_OK, "png: %s", ra_last_error());
    img im;
    CHECK(read_png(&im, path) && im.w == 7 && im.h == 5, "png: read back");
    if (im.px) CHECK(!memcmp(im.px, px, sizeof px), "png: pixels differ");
    free(im.px);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644, "png: mode %o", st.st_mode & 0777);

    /* sizes: checked before anything is allocated or created */
    snprintf(bad, sizeof bad, "%s/bad.png", dir);
    CHECK(ra_png_write(bad, px, 0, 5) == RA_ERR_ARG, "png: width 0");
    CHECK(ra_png_write(bad, px, 7, -1) == RA_ERR_ARG, "png: height -1");
    CHECK(ra_png_write(bad, px, RA_PNG_MAX_SIDE + 1, 1) == RA_ERR_ARG, "png: too wide");
    CHECK(ra_png_write(bad, px, RA_PNG_MAX_SIDE, RA_PNG_MAX_PIXELS / RA_PNG_MAX_SIDE + 1) == RA_ERR_ARG,
          "png: too many pixels");
    CHECK(ra_png_write(bad, NULL, 7, 5) == RA_ERR_ARG, "png: NULL pixels");
    CHECK(ra_png_write("", px, 7, 5) == RA_ERR_ARG, "png: empty path");
    CHECK(!exists(bad), "png: a refused picture left a file");

    /* a directory that does not exist, a path through a regular file */
    snprintf(bad, sizeof bad, "%s/missing/x.png", dir);
    CHECK(ra_png_write(bad, px, 7, 5) == RA_ERR_WRITE, "png: missing directory");
    CHECK(!exists(bad), "png: file left in a missing directory?");
    snprintf(bad, sizeof bad, "%s/raw.png/x.png", dir);
    CHECK(ra_png_write(bad, px, 7, 5) == RA_ERR_WRITE && strstr(ra_last_error(), "raw.png"),
          "png: path through a file: %s", ra_last_error());
    /* a read-only directory (root may write anyway: then not checked) */
    char ro[400];
    snprintf(ro, sizeof ro, "%s/ro", dir);
    mkdir(ro, 0500);
    if (geteuid() != 0) {
        snprintf(bad, sizeof bad, "%s/x.png", ro);
        CHECK(ra_png_write(bad, px, 7, 5) == RA_ERR_WRITE, "png: read-only directory");
        CHECK(dir_entries(ro) == 0, "png: something left in a read-only directory");
    }
    rmdir(ro);
    /* an existing picture is replaced whole */
    uint8_t px2[2 * 2 * 3] = {0};
    CHECK(ra_png_write(path, px2, 2, 2) == RA_OK, "png: replace");
    CHECK(read_png(&im, path) && im.w == 2 && im.h == 2, "png: replaced");
    free(im.px);
    /* no temporary file left behind by anything above */
    CHECK(dir_entries(dir) == 1, "png: %d entries in the directory, want 1", dir_entries(dir));
    unlink(path);
}

/* ---- bias tables ----------------------------------------------------------- */

/* The run of colour c through (x, y) along a row: [*x0, *x1). */
static void run_x(const img *im, int x, int y, rgb c, int *x0, int *x1) {
    *x0 = x, *x1 = x;
    while (eq(at(im, *x0 - 1, y), c)) --*x0;
    while (eq(at(im, *x1, y), c)) ++*x1;
}

/* One table of wh x ww = 3 x 4 (7 x 5 cells: a swapped row and column
 * cannot pass), three heads: +2 at head 1 (dy -1, dx 2), -2 at head 2
 * (dy 2, dx -3), zeros elsewhere. */
static void test_bias(const char *dir) {
    const int wh = 3, ww = 4, nh = 3, sh = 5, sw = 7;
    float table[5 * 7 * 3] = {0};
    table[((-1 + wh - 1) * sw + (2 + ww - 1)) * nh + 1] = 2.0f;
    table[((2 + wh - 1) * sw + (-3 + ww - 1)) * nh + 2] = -2.0f;
    char path[512];
    snprintf(path, sizeof path, "%s/bias.png", dir);
    CHECK(ra_plot_bias_table(path, table, nh, wh, ww, "bias 3x4") == RA_OK, "bias: %s", ra_last_error());
    img im;
    if (!read_png(&im, path)) {
        CHECK(0, "bias: cannot read %s", path);
        return;
    }
    box red[4], blue[4];
    int nred = components(&im, RED_END, whole(&im), red, 4);
    int nblue = components(&im, BLUE_END, whole(&im), blue, 4);
    /* the cell and the colour bar's top; the cell and the bar's bottom */
    CHECK(nred == 2, "bias: %d red components, want 2 (one cell, the bar's top)", nred);
    CHECK(nblue == 2, "bias: %d blue components, want 2", nblue);
    if (nred == 2 && nblue == 2) {
        /* the cell is left of the bar */
        box cell = red[0].x0 < red[1].x0 ? red[0] : red[1], bar = red[0].x0 < red[1].x0 ? red[1] : red[0];
        box bcell = blue[0].x0 < blue[1].x0 ? blue[0] : blue[1];
        int c = cell.x1 - cell.x0;
        CHECK(c >= 4 && cell.y1 - cell.y0 == c && cell.n == c * c, "bias: red cell %dx%d, %d px",
              c, cell.y1 - cell.y0, cell.n);
        /* its panel: the zero-coloured run through it, left and right */
        int l, r, dummy, t, b;
        run_x(&im, cell.x0 - 1, cell.y0 + c / 2, ZERO, &l, &dummy);
        run_x(&im, cell.x1, cell.y0 + c / 2, ZERO, &dummy, &r);
        t = cell.y0, b = cell.y1;
        while (eq(at(&im, cell.x0 + c / 2, t - 1), ZERO)) t--;
        while (eq(at(&im, cell.x0 + c / 2, b), ZERO)) b++;
        CHECK(r - l == sw * c, "bias: panel %d px wide, want %d columns of %d", r - l, sw, c);
        CHECK(b - t == sh * c, "bias: panel %d px tall, want %d rows of %d", b - t, sh, c);
        CHECK(cell.x0 - l == (2 + ww - 1) * c, "bias: red cell at column %d, want dx=2 -> %d",
              (cell.x0 - l) / c, 2 + ww - 1);
        CHECK(cell.y0 - t == (-1 + wh - 1) * c, "bias: red cell at row %d, want dy=-1 -> %d",
              (cell.y0 - t) / c, -1 + wh - 1);
        /* which head: panels along the row dy = -2 (all zero, no ticks) */
        int starts[8], np = 0;
        for (int x = 0; x < im.w;) {
            int a, e;
            if (!eq(at(&im, x, t + c / 2), ZERO)) { x++; continue; }
            run_x(&im, x, t + c / 2, ZERO, &a, &e);
            if (e - a == sw * c && np < 8) starts[np++] = a;
            x = e;
        }
        CHECK(np == 3, "bias: %d head panels, want 3", np);
        if (np == 3) {
            CHECK(l == starts[1], "bias: the red cell is not in head 1");
            CHECK(bcell.x0 == starts[2] + 0 * c && bcell.y0 == t + 4 * c && bcell.x1 - bcell.x0 == c,
                  "bias: blue cell at (%d, %d), want head 2, column 0, row 4", bcell.x0 - starts[2],
                  bcell.y0 - t);
        }
        /* the colour bar: red end at the top, blue at the bottom, white
         * in the middle, one column */
        int bx = bar.x0 + 3, y0 = bar.y0, y1 = bar.y1;
        while (!eq(at(&im, bx, y1), BLACK) && y1 < im.h) y1++;
        CHECK(bar.y0 > 0 && eq(at(&im, bx, bar.y0 - 1), BLACK), "bias: no frame above the bar");
        CHECK(eq(at(&im, bx, y1 - 1), BLUE_END), "bias: bar bottom is not the blue end");
        CHECK(near(at(&im, bx, (y0 + y1 - 1) / 2), ZERO, 12), "bias: bar middle is not white");
        /* the bar's blue end is the other blue component */
        box bb = blue[0].x0 < blue[1].x0 ? blue[1] : blue[0];
        CHECK(bb.x0 == bar.x0 && bb.y1 == y1, "bias: bar ends do not line up");
        /* every other pixel of the panels is the zero colour (or the cells) */
        int other = 0;
        for (int p = 0; p < np; p++)
            for (int y = t; y < b; y++)
                for (int x = starts[p]; x < starts[p] + sw * c; x++) {
                    rgb v = at(&im, x, y);
                    other += !eq(v, ZERO) && !eq(v, RED_END) && !eq(v, BLUE_END);
                }
        CHECK(other == 0, "bias: %d panel pixels of another colour", other);
    }
    free(im.px);
    unlink(path);

    /* several tables: per-table scales make both maxima the red end;
     * a shared scale makes the smaller one lighter */
    float t2[3 * 3 * 2] = {0};
    t2[(0 * 3 + 2) * 2 + 0] = 0.5f;   /* dy -1, dx 1, head 0 */
    ra_plot_table tabs[2] = {{table, nh, wh, ww, "stage 1 block 0"}, {t2, 2, 2, 2, "stage 2 block 1"}};
    snprintf(path, sizeof path, "%s/bias2.png", dir);
    CHECK(ra_plot_bias_tables(path, tabs, 2, RA_PLOT_SCALE_PER_TABLE, "model") == RA_OK, "bias2: %s",
          ra_last_error());
    if (read_png(&im, path)) {
        int n = components(&im, RED_END, whole(&im), red, 4);
        CHECK(n == 4, "bias2 per table: %d red components, want 2 cells + 2 bars", n);
        free(im.px);
    } else CHECK(0, "bias2: unreadable");
    CHECK(ra_plot_bias_tables(path, tabs, 2, RA_PLOT_SCALE_SHARED, NULL) == RA_OK, "bias2 shared: %s",
          ra_last_error());
    if (read_png(&im, path)) {
        int n = components(&im, RED_END, whole(&im), red, 4);
        CHECK(n == 2, "bias2 shared: %d red components, want 1 cell + 1 bar", n);
        free(im.px);
    } else CHECK(0, "bias2 shared: unreadable");
    unlink(path);

    /* refusals */
    CHECK(ra_plot_bias_table(path, table, 0, wh, ww, NULL) == RA_ERR_ARG, "bias: 0 heads");
    CHECK(ra_plot_bias_table(path, table, nh, 0, ww, NULL) == RA_ERR_ARG, "bias: window 0");
    CHECK(ra_plot_bias_table(path, NULL, nh, wh, ww, NULL) == RA_ERR_ARG, "bias: NULL table");
    CHECK(ra_plot_bias_tables(path, tabs, 0, RA_PLOT_SCALE_SHARED, NULL) == RA_ERR_ARG, "bias: 0 tables");
    CHECK(ra_plot_bias_tables(path, tabs, 2, (ra_plot_scale)7, NULL) == RA_ERR_ARG, "bias: scale 7");
    /* 1024 heads of 31 x 31 cells wrap into 86 lines: too tall a picture */
    float *huge = calloc(31 * 31 * 1024, sizeof *huge);
    CHECK(huge && ra_plot_bias_table(path, huge, 1024, 16, 16, NULL) == RA_ERR_ARG &&
          strstr(ra_last_error(), "limits"), "bias: picture too large: %s", ra_last_error());
    free(huge);
    char bad[512];
    snprintf(bad, sizeof bad, "%s/missing/b.png", dir);
    CHECK(ra_plot_bias_table(bad, table, nh, wh, ww, NULL) == RA_ERR_WRITE, "bias: missing directory");
    CHECK(!exists(path) && !exists(bad), "bias: file left after a refusal");
}

/* ---- attention -------------------------------------------------------------- */

/* A 28 x 28 grey image (0.5) on a 7 x 7 grid of 4 x 4 patches, two queries,
 * two heads. Query 0 (1, 5): head 1 peaks at (3, 2), half of it at (3, 3);
 * query 1 (6, 0): head 0 peaks at (0, 6). */
static void test_attention(const char *dir) {
    enum { H = 28, W = 28, G = 7, NQ = 2, NH = 2 };
    float image[H * W], maps[NQ * NH * G * G] = {0};
    for (int i = 0; i < H * W; i++) image[i] = 0.5f;
    maps[((0 * NH + 1) * G + 3) * G + 2] = 0.9f;
    maps[((0 * NH + 1) * G + 3) * G + 3] = 0.45f;
    maps[((1 * NH + 0) * G + 0) * G + 6] = 1.0f;
    int queries[NQ * 2] = {1, 5, 6, 0};
    char path[512];
    snprintf(path, sizeof path, "%s/attn.png", dir);
    CHECK(ra_plot_attention(path, image, H, W, 1, maps, NQ, NH, G, G, queries, "attention") == RA_OK,
          "attn: %s", ra_last_error());
    img im;
    if (!read_png(&im, path)) {
        CHECK(0, "attn: unreadable");
        return;
    }
    /* the input panels: the only pixels of grey 128 */
    box in[8], hot[4], cy[8];
    int n = components(&im, (rgb){128, 128, 128}, whole(&im), in, 8), big = 0;
    /* (a marker in a corner cuts the cell off the rest of its panel) */
    for (int k = 0; k < n && k < 8; k++)
        if (in[k].n > 1000) in[big++] = in[k];
    n = big;
    CHECK(n == 2, "attn: %d input panels, want 2", n);
    if (n == 2) {
        if (in[1].y0 < in[0].y0) { box t = in[0]; in[0] = in[1]; in[1] = t; }
        int pw = in[0].x1 - in[0].x0, s = pw / W;
        CHECK(pw == s * W && in[0].y1 - in[0].y0 == s * H && s >= 4 && s <= 8,
              "attn: input panel %dx%d, not an integer upscaling in 4..8", pw, in[0].y1 - in[0].y0);
        CHECK(in[1].x0 == in[0].x0 && in[1].y0 > in[0].y1, "attn: rows are not one per query");
        int cell = s * (W / G);
        /* query marker: cyan around cell (1, 5), 2 px outside it */
        box reg = {in[0].x0 - 3, in[0].y0 - 3, in[0].x1 + 3, in[0].y1 + 3, 0};
        int nc = components(&im, CYAN, reg, cy, 8);
        CHECK(nc == 1, "attn: %d cyan components in the first input panel", nc);
        if (nc == 1) {
            CHECK(cy[0].x0 == in[0].x0 + 5 * cell - 2 && cy[0].x1 == in[0].x0 + 6 * cell + 2 &&
                  cy[0].y0 == in[0].y0 + 1 * cell - 2 && cy[0].y1 == in[0].y0 + 2 * cell + 2,
                  "attn: marker at (%d, %d)-(%d, %d) of the panel, want the cell (1, 5)",
                  cy[0].x0 - in[0].x0, cy[0].y0 - in[0].y0, cy[0].x1 - in[0].x0, cy[0].y1 - in[0].y0);
            /* the inside of the marked cell is still the image */
            CHECK(eq(at(&im, in[0].x0 + 5 * cell + cell / 2, in[0].y0 + cell + cell / 2),
                     ((rgb){128, 128, 128})), "attn: the marker covers the cell");
        }
        /* hot cells: the colour map's top, exactly where the peaks are */
        int nh = components(&im, HOT, whole(&im), hot, 4);
        CHECK(nh == 2, "attn: %d hot components, want 2", nh);
        if (nh == 2) {
            if (hot[1].y0 < hot[0].y0) { box t = hot[0]; hot[0] = hot[1]; hot[1] = t; }
            for (int k = 0; k < 2; k++) {
                box h = hot[k];
                CHECK(h.x1 - h.x0 == cell && h.y1 - h.y0 == cell && h.n == cell * cell,
                      "attn: hot cell %d is %dx%d", k, h.x1 - h.x0, h.y1 - h.y0);
                /* its panel's top-left: walk out to the white background */
                int l = h.x0, t = h.y0;
                while (!eq(at(&im, l - 1, h.y0), WHITE)) l--;
                while (!eq(at(&im, h.x0, t - 1), WHITE)) t--;
                int wr = k == 0 ? 3 : 0, wc = k == 0 ? 2 : 6;
                CHECK(h.x0 - l == wc * cell && h.y0 - t == wr * cell,
                      "attn: hot cell %d at (%d, %d) px in its panel, want cell (%d, %d)", k,
                      h.x0 - l, h.y0 - t, wr, wc);
                CHECK(t == in[k].y0, "attn: hot cell %d not in query %d's row", k, k);
                /* head 1 is the third column, head 0 the second */
                int col = (l - in[0].x0) / (pw + 1);
                CHECK(k == 0 ? col >= 2 : col == 1, "attn: hot cell %d in column %d", k, col);
            }
            /* half the peak: orange-ish, between the dark base and HOT */
            rgb half = at(&im, hot[0].x1 + cell / 2, hot[0].y0 + cell / 2);
            CHECK(half.r > 100 && half.r < 252 && half.b < 120, "attn: half cell (%d,%d,%d)",
                  half.r, half.g, half.b);
            /* no attention: the darkened image */
            rgb base = at(&im, hot[0].x0 - cell / 2, hot[0].y0 - 2 * cell);
            CHECK(base.r == base.g && base.g == base.b && base.r > 30 && base.r < 100,
                  "attn: base (%d,%d,%d) is not the darkened grey", base.r, base.g, base.b);
        }
    }
    free(im.px);
    unlink(path);
    /* RGB image: the input panel keeps its colour */
    float rgbim[4 * 4 * 3];
    for (int i = 0; i < 16; i++) rgbim[3 * i] = 1, rgbim[3 * i + 1] = 0, rgbim[3 * i + 2] = 0;
    float m1[4 * 4] = {0};
    m1[0] = 1;
    int q1[2] = {3, 3};
    CHECK(ra_plot_attention(path, rgbim, 4, 4, 3, m1, 1, 1, 4, 4, q1, NULL) == RA_OK, "attn rgb: %s",
          ra_last_error());
    if (read_png(&im, path)) {
        /* the marked corner cell (3, 3) is cut off: two pieces of red,
         * together the 4 x 4 image upscaled 8x */
        n = components(&im, (rgb){255, 0, 0}, whole(&im), in, 4);
        CHECK(n == 2 && in[0].x0 == in[1].x0 - 24 && in[1].x1 - in[0].x0 == 32 &&
              in[1].y1 - in[0].y0 == 32 && in[1].n == 8 * 8, "attn rgb: %d red pieces", n);
        free(im.px);
    } else CHECK(0, "attn rgb: unreadable");
    unlink(path);
    /* refusals */
    int qbad[2] = {7, 0};
    CHECK(ra_plot_attention(path, image, H, W, 1, maps, 1, NH, G, G, qbad, NULL) == RA_ERR_ARG,
          "attn: query outside the grid");
    CHECK(ra_plot_attention(path, image, H, W, 2, maps, 1, NH, G, G, queries, NULL) == RA_ERR_ARG,
          "attn: 2 channels");
    CHECK(ra_plot_attention(path, image, 0, W, 1, maps, 1, NH, G, G, queries, NULL) == RA_ERR_ARG,
          "attn: height 0");
    CHECK(ra_plot_attention(path, image, H, W, 1, maps, 1, 0, G, G, queries, NULL) == RA_ERR_ARG,
          "attn: 0 heads");
    CHECK(ra_plot_attention(path, image, H, W, 1, NULL, 1, NH, G, G, queries, NULL) == RA_ERR_ARG,
          "attn: NULL maps");
    char bad[512];
    snprintf(bad, sizeof bad, "%s/missing/a.png", dir);
    CHECK(ra_plot_attention(bad, image, H, W, 1, maps, NQ, NH, G, G, queries, NULL) == RA_ERR_WRITE,
          "attn: missing directory");
    CHECK(!exists(path) && !exists(bad), "attn: file left after a refusal");
}

/* ---- curves ------------------------------------------------------------------ */

/* The frame of the left-most panel: black columns and rows whose black run
 * is long (ticks are 4 px). */
static int find_frame(const img *im, int *X0, int *Y0, int *X1, int *Y1) {
    *X0 = *X1 = *Y0 = *Y1 = -1;
    for (int x = 0; x < im->w; x++) {
        int run = 0, best = 0;
        for (int y = 0; y < im->h; y++) {
            run = eq(at(im, x, y), BLACK) ? run + 1 : 0;
            if (run > best) best = run;
        }
        if (best >= 100) {
            if (*X0 < 0) *X0 = x;
            else if (x > *X0 + 1) { *X1 = x; break; }
        }
    }
    if (*X1 < 0) return 0;
    for (int y = 0; y < im->h; y++) {
        int run = 0;
        for (int x = *X0; x <= *X1; x++) run += eq(at(im, x, y), BLACK);
        if (run == *X1 - *X0 + 1) {
            if (*Y0 < 0) *Y0 = y;
            else *Y1 = y;
        }
    }
    return *Y1 > *Y0;
}

static void test_curves(const char *dir) {
    float xs[11], up[11], down[11], flat[11];
    for (int i = 0; i <= 10; i++) xs[i] = (float)i, up[i] = i / 10.0f, down[i] = 1 - i / 10.0f, flat[i] = 0.5f;
    up[5] = NAN;   /* a gap between x = 4 and 6 */
    ra_plot_series s[3] = {{"train", xs, up, 11, 0}, {"train", xs, down, 11, 1}, {"val", xs, flat, 11, 1}};
    const char *titles[2] = {"loss", "accuracy"};
    char path[512];
    snprintf(path, sizeof path, "%s/curves.png", dir);
    CHECK(ra_plot_curves(path, s, 3, titles, 2, "epoch", "curves") == RA_OK, "curves: %s", ra_last_error());
    img im;
    if (!read_png(&im, path)) {
        CHECK(0, "curves: unreadable");
        return;
    }
    int X0, Y0, X1, Y1;
    CHECK(find_frame(&im, &X0, &Y0, &X1, &Y1), "curves: no frame found");
    if (X1 > X0 && Y1 > Y0) {
        /* the axes span exactly [0, 10] x [0, 1] (data widened to ticks) */
#define PX(v) (X0 + (int)lround((v) / 10.0 * (X1 - X0)))
#define PY(v) (Y1 - (int)lround((v) * (Y1 - Y0)))
        CHECK(eq(at(&im, PX(2), PY(0.2)), C0), "curves: (2, 0.2) is not on the first series");
        CHECK(eq(at(&im, PX(8), PY(0.8)), C0), "curves: (8, 0.8) is not on the first series");
        CHECK(!eq(at(&im, PX(2), PY(0.8)), C0), "curves: (2, 0.8) on the series: y flipped?");
        CHECK(!eq(at(&im, PX(8), PY(0.2)), C0), "curves: (8, 0.2) on the series: x flipped?");
        /* the gap at the NaN: nothing of the series near (4.5, 0.45) */
        int gap = 0, drawn = 0;
        for (int dy = -2; dy <= 2; dy++)
            for (int dx = -2; dx <= 2; dx++) {
                gap += eq(at(&im, PX(4.5) + dx, PY(0.45) + dy), C0);
                drawn += eq(at(&im, PX(2.5) + dx, PY(0.25) + dy), C0);
            }
        CHECK(gap == 0, "curves: the NaN point is bridged");
        CHECK(drawn > 0, "curves: the segment 2..3 is missing");
        /* the second panel: same frame size, to the right */
        int w = X1 - X0;
        int X0b = -1;
        for (int x = X1 + 20; x < im.w && X0b < 0; x++)
            if (eq(at(&im, x, (Y0 + Y1) / 2), BLACK) && eq(at(&im, x, Y0 + 5), BLACK) &&
                eq(at(&im, x, Y1 - 5), BLACK))
                X0b = x;
        CHECK(X0b > X1, "curves: no second panel");
        if (X0b > X1) {
#define PXB(v) (X0b + (int)lround((v) / 10.0 * w))
            CHECK(eq(at(&im, PXB(2), PY(0.8)), C0), "curves: 'train' in panel 2 is not the colour of 'train'");
            CHECK(eq(at(&im, PXB(8), PY(0.5)), C1), "curves: 'val' is not the second colour");
            CHECK(!eq(at(&im, PXB(2), PY(0.2)), C0), "curves: panel 2 flipped?");
        }
#undef PX
#undef PY
#undef PXB
    }
    free(im.px);
    unlink(path);
    /* one series only, no titles: still a picture */
    CHECK(ra_plot_curves(path, s, 1, NULL, 1, NULL, NULL) == RA_OK, "curves one: %s", ra_last_error());
    unlink(path);
    /* refusals */
    CHECK(ra_plot_curves(path, s, 3, titles, 0, NULL, NULL) == RA_ERR_ARG, "curves: 0 panels");
    CHECK(ra_plot_curves(path, s, 3, titles, 1, NULL, NULL) == RA_ERR_ARG, "curves: series in panel 1 of 1");
    CHECK(ra_plot_curves(path, s, 0, titles, 2, NULL, NULL) == RA_ERR_ARG, "curves: no series");
    ra_plot_series nul = {"x", NULL, NULL, 3, 0};
    CHECK(ra_plot_curves(path, &nul, 1, NULL, 1, NULL, NULL) == RA_ERR_ARG, "curves: NULL y");
    char bad[512];
    snprintf(bad, sizeof bad, "%s/missing/c.png", dir);
    CHECK(ra_plot_curves(bad, s, 3, titles, 2, NULL, NULL) == RA_ERR_WRITE, "curves: missing directory");
    CHECK(!exists(path) && !exists(bad), "curves: file left after a refusal");
}

/* ---- samples to look at -------------------------------------------------------- */

static float frand(unsigned *st) { *st = *st * 1103515245u + 12345u; return (*st >> 8) / 16777216.0f; }

static int samples(const char *dir) {
    char path[512];
    ra_status s;
    /* a smooth table, four heads of different slopes and shapes */
    enum { WS = 7, S = 2 * WS - 1 };
    float t[S * S * 4];
    for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++) {
            int dy = i - (WS - 1), dx = j - (WS - 1);
            float *r = t + (i * S + j) * 4;
            r[0] = -0.1f * abs(dy) - 0.1f * abs(dx);
            r[1] = -0.2f * abs(dy) + 0.05f * abs(dx);
            r[2] = 0.08f * dx;
            r[3] = 0.5f * expf(-(dy * dy + (dx - 2) * (dx - 2)) / 4.0f) - 0.3f;
        }
    snprintf(path, sizeof path, "%s/sample_bias.png", dir);
    s = ra_plot_bias_table(path, t, 4, WS, WS, "relative position bias, window 7x7");
    printf("%s: %s\n", path, s ? ra_last_error() : "ok");
    /* a Swin-T-like model: stages of 3, 6, 12, 24 heads, 2 blocks each */
    static float mt[8][S * S * 24];
    ra_plot_table tabs[8];
    unsigned st = 1;
    char labels[8][32];
    for (int k = 0; k < 8; k++) {
        int nh = 3 << (k / 2);
        for (int i = 0; i < S; i++)
            for (int j = 0; j < S; j++)
                for (int h = 0; h < nh; h++) {
                    int dy = i - (WS - 1), dx = j - (WS - 1);
                    float sl = 0.02f * (h % 5 + 1) * (k / 2 + 1);
                    mt[k][(i * S + j) * nh + h] = -sl * (abs(dy) + abs(dx)) + 0.1f * (frand(&st) - 0.5f);
                }
        snprintf(labels[k], sizeof labels[k], "stage %d block %d", k / 2 + 1, k % 2);
        tabs[k] = (ra_plot_table){mt[k], nh, WS, WS, labels[k]};
    }
    snprintf(path, sizeof path, "%s/sample_model_bias.png", dir);
    s = ra_plot_bias_tables(path, tabs, 8, RA_PLOT_SCALE_PER_TABLE, "swin-t bias tables (per-table scale)");
    printf("%s: %s\n", path, s ? ra_last_error() : "ok");
    snprintf(path, sizeof path, "%s/sample_model_bias_shared.png", dir);
    s = ra_plot_bias_tables(path, tabs, 4, RA_PLOT_SCALE_SHARED, "stages 1-2 (shared scale)");
    printf("%s: %s\n", path, s ? ra_last_error() : "ok");
    /* attention: a ring "digit" on 28x28, 7x7 patches, 3 queries, 4 heads */
    enum { H = 28, G = 7, NQ = 3, NH = 4 };
    float im[H * H], maps[NQ * NH * G * G];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < H; x++) {
            float r = sqrtf((y - 13.5f) * (y - 13.5f) / 1.4f + (x - 13.5f) * (x - 13.5f));
            im[y * H + x] = fmaxf(0, 1 - fabsf(r - 8) / 2.5f);
        }
    int q[NQ * 2] = {1, 3, 3, 3, 5, 1};
    for (int a = 0; a < NQ; a++)
        for (int h = 0; h < NH; h++) {
            float *m = maps + (a * NH + h) * G * G, sum = 0;
            for (int i = 0; i < G; i++)
                for (int j = 0; j < G; j++) {
                    int ci = h == 0 ? q[2 * a] : h == 1 ? 3 : h == 2 ? q[2 * a] : 6 - q[2 * a];
                    int cj = h == 0 ? q[2 * a + 1] : h == 1 ? 3 : 6 - q[2 * a + 1];
                    float w = h == 2 ? 1.0f / (1 + abs(i - ci)) : 1;
                    float d2 = (float)((i - ci) * (i - ci) + (j - cj) * (j - cj));
                    m[i * G + j] = h == 2 ? w * expf(-(float)abs(j - cj)) : expf(-d2 / (h + 1.0f));
                    sum += m[i * G + j];
                }
            for (int i = 0; i < G * G; i++) m[i] /= sum;
        }
    snprintf(path, sizeof path, "%s/sample_attention.png", dir);
    s = ra_plot_attention(path, im, H, H, 1, maps, NQ, NH, G, G, q, "attention, 7x7 patches of 4x4");
    printf("%s: %s\n", path, s ? ra_last_error() : "ok");
    /* curves: 30 epochs of loss and accuracy, train and val */
    enum { E = 30 };
    float ep[E], tl[E], vl[E], ta[E], va[E];
    for (int e = 0; e < E; e++) {
        ep[e] = (float)(e + 1);
        tl[e] = 2.3f * expf(-e / 6.0f) + 0.08f + 0.03f * (frand(&st) - 0.5f);
        vl[e] = 2.3f * expf(-e / 7.0f) + 0.15f + 0.004f * e + 0.05f * (frand(&st) - 0.5f);
        ta[e] = 0.99f - 0.88f * expf(-e / 5.0f) + 0.01f * (frand(&st) - 0.5f);
        va[e] = 0.975f - 0.87f * expf(-e / 5.5f) + 0.015f * (frand(&st) - 0.5f);
    }
    ra_plot_series ser[4] = {{"train", ep, tl, E, 0}, {"val", ep, vl, E, 0},
                             {"train", ep, ta, E, 1}, {"val", ep, va, E, 1}};
    const char *titles[2] = {"loss", "accuracy"};
    snprintf(path, sizeof path, "%s/sample_curves.png", dir);
    s = ra_plot_curves(path, ser, 4, titles, 2, "epoch", "vit on mnist, lr 1e-3");
    printf("%s: %s\n", path, s ? ra_last_error() : "ok");
    /* every glyph of the font, to read */
    char all[96];
    for (int c = 32; c < 127; c++) all[c - 32] = (char)c;
    all[95] = 0;
    float z[1] = {0};
    snprintf(path, sizeof path, "%s/sample_font.png", dir);
    ra_plot_table ft[2] = {{z, 1, 1, 1, all}, {z, 1, 1, 1, all + 48}};
    s = ra_plot_bias_tables(path, ft, 2, RA_PLOT_SCALE_SHARED, all);
    printf("%s: %s\n", path, s ? ra_last_error() : "ok");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[1], "--samples")) return samples(argv[2]);
    char dir[] = "/tmp/relattn_plot_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_png(dir);
    test_bias(dir);
    test_attention(dir);
    test_curves(dir);
    CHECK(dir_entries(dir) == 0, "%d files left in %s", dir_entries(dir), dir);
    rmdir(dir);
    return check_done();
}
