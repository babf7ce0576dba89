/* test_window.c - window partition, reverse and mask (docs/reference.md,
 * section 1.3).
 *
 *   test_window FIXTURES_DIR
 *
 * 1. a brute-force oracle written the way PyTorch does it (materialise the
 *    padded map, roll it, cut it into windows; mask labels by Python-style
 *    slice assignment) against the one-pass library code, bit for bit;
 * 2. reverse(partition(x)) == x;
 * 3. the PyTorch fixtures listed in FIXTURES_DIR/windows.txt (names with
 *    their win_ prefix, written by tools/make_fixtures.py);
 * 4. values worked out by hand, the clamp, sizes and argument errors.
 */
#include "relattn.h"
#include "check.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Helpers                                                                 */
/* ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rng_next(void) {   /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

static int rng_int(int lo, int hi) {   /* inclusive */
    return lo + (int)(rng_next() % (uint32_t)(hi - lo + 1));
}

static ra_window_spec geom(int d, int h, int w, int wd, int wh, int ww,
                           int sd, int sh, int sw) {
    ra_window_spec g = {d, h, w, wd, wh, ww, sd, sh, sw};
    return g;
}

static void geom_str(char *buf, size_t n, const ra_window_spec *g, int b, int c) {
    snprintf(buf, n, "b=%d c=%d map %dx%dx%d win %dx%dx%d shift %d,%d,%d", b, c,
             g->d, g->h, g->w, g->wd, g->wh, g->ww, g->sd, g->sh, g->sw);
}

static int pad_up(int s, int w) { return (s + w - 1) / w * w; }

/* ---------------------------------------------------------------------- */
/* The oracle: the PyTorch steps, one by one                               */
/* ---------------------------------------------------------------------- */

/* windows (B*nW, N, C) from x (B, D, H, W, C); frompad (B*nW*N) set to 1
 * where the token is padding. */
static void oracle_partition(float *windows, unsigned char *frompad,
                             const float *x, int b, int c,
                             const ra_window_spec *g) {
    int D = g->d, H = g->h, W = g->w;
    int Dp = pad_up(D, g->wd), Hp = pad_up(H, g->wh), Wp = pad_up(W, g->ww);
    size_t plane = (size_t)Dp * Hp * Wp;
    float *padded = xmalloc(sizeof(float) * b * plane * c);
    float *rolled = xmalloc(sizeof(float) * b * plane * c);
    unsigned char *ispad = xmalloc((size_t)b * plane);
    unsigned char *rpad = xmalloc((size_t)b * plane);

    /* F.pad at the end of each axis */
    for (int bi = 0; bi < b; bi++)
        for (int i = 0; i < Dp; i++)
            for (int j = 0; j < Hp; j++)
                for (int k = 0; k < Wp; k++) {
                    size_t pi = (((size_t)bi * Dp + i) * Hp + j) * Wp + k;
                    int in = i < D && j < H && k < W;
                    ispad[pi] = !in;
                    for (int ch = 0; ch < c; ch++)
                        padded[pi * c + ch] =
                            in ? x[((((size_t)bi * D + i) * H + j) * W + k) * c + ch] : 0.0f;
                }
    /* torch.roll(shifts=(-sd, -sh, -sw)) */
    for (int bi = 0; bi < b; bi++)
        for (int i = 0; i < Dp; i++)
            for (int j = 0; j < Hp; j++)
                for (int k = 0; k < Wp; k++) {
                    size_t ri = (((size_t)bi * Dp + i) * Hp + j) * Wp + k;
                    size_t pi = (((size_t)bi * Dp + (i + g->sd) % Dp) * Hp +
                                 (j + g->sh) % Hp) * Wp + (k + g->sw) % Wp;
                    rpad[ri] = ispad[pi];
                    for (int ch = 0; ch < c; ch++) rolled[ri * c + ch] = padded[pi * c + ch];
                }
    /* view (B, Dp/wd, wd, Hp/wh, wh, Wp/ww, ww, C), permute to
     * (B, Dp/wd, Hp/wh, Wp/ww, wd, wh, ww, C) */
    int nd = Dp / g->wd, nh = Hp / g->wh, nww = Wp / g->ww;
    size_t o = 0;
    for (int bi = 0; bi < b; bi++)
        for (int a = 0; a < nd; a++)
            for (int e = 0; e < nh; e++)
                for (int f = 0; f < nww; f++)
                    for (int td = 0; td < g->wd; td++)
                        for (int th = 0; th < g->wh; th++)
                            for (int tw = 0; tw < g->ww; tw++, o++) {
                                size_t ri = (((size_t)bi * Dp + a * g->wd + td) * Hp +
                                             e * g->wh + th) * Wp + f * g->ww + tw;
                                if (frompad) frompad[o] = rpad[ri];
                                for (int ch = 0; ch < c; ch++)
                                    windows[o * c + ch] = rolled[ri * c + ch];
                            }
    free(padded);
    free(rolled);
    free(ispad);
    free(rpad);
}

/* Python's slice(start, stop) on a length-P axis, start/stop possibly
 * negative; has_start / has_stop false for None. */
static void py_slice(int *lo, int *hi, int has_start, int start, int has_stop,
                     int stop, int P) {
    int a = has_start ? (start < 0 ? start + P : start) : 0;
    int z = has_stop ? (stop < 0 ? stop + P : stop) : P;
    if (a < 0) a = 0;
    if (z < 0) z = 0;
    if (a > P) a = P;
    if (z > P) z = P;
    *lo = a;
    *hi = z < a ? a : z;
}

/* The three slices of compute_mask / the Swin block on one axis:
 * slice(-w), slice(-w, -s), slice(-s, None). Note -0 == 0 in Python. */
static void axis_slices(int lo[3], int hi[3], int w, int s, int P) {
    py_slice(&lo[0], &hi[0], 0, 0, 1, -w, P);
    py_slice(&lo[1], &hi[1], 1, -w, 1, -s, P);
    py_slice(&lo[2], &hi[2], 1, -s, 0, 0, P);
}

/* mask (nW, N, N) exactly as Video Swin's compute_mask builds it. */
static void oracle_mask(float *mask, const ra_window_spec *g) {
    int Dp = pad_up(g->d, g->wd), Hp = pad_up(g->h, g->wh), Wp = pad_up(g->w, g->ww);
    float *img = xmalloc(sizeof(float) * (size_t)Dp * Hp * Wp);
    memset(img, 0, sizeof(float) * (size_t)Dp * Hp * Wp);
    int dl[3], dh[3], hl[3], hh[3], wl[3], wh[3];
    axis_slices(dl, dh, g->wd, g->sd, Dp);
    axis_slices(hl, hh, g->wh, g->sh, Hp);
    axis_slices(wl, wh, g->ww, g->sw, Wp);
    int cnt = 0;
    for (int a = 0; a < 3; a++)
        for (int e = 0; e < 3; e++)
            for (int f = 0; f < 3; f++, cnt++)
                for (int i = dl[a]; i < dh[a]; i++)
                    for (int j = hl[e]; j < hh[e]; j++)
                        for (int k = wl[f]; k < wh[f]; k++)
                            img[((size_t)i * Hp + j) * Wp + k] = (float)cnt;
    /* window_partition of the labels, no roll */
    ra_window_spec g0 = geom(Dp, Hp, Wp, g->wd, g->wh, g->ww, 0, 0, 0);
    size_t nw = (size_t)(Dp / g->wd) * (Hp / g->wh) * (Wp / g->ww);
    size_t n = (size_t)g->wd * g->wh * g->ww;
    float *mw = xmalloc(sizeof(float) * nw * n);
    oracle_partition(mw, NULL, img, 1, 1, &g0);
    for (size_t k = 0; k < nw; k++)
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++)
                mask[(k * n + i) * n + j] = mw[k * n + j] - mw[k * n + i] != 0.0f ? -100.0f : 0.0f;
    free(img);
    free(mw);
}

/* ---------------------------------------------------------------------- */
/* 1, 2. Random geometries against the oracle; round trip                  */
/* ---------------------------------------------------------------------- */

/* Compare one geometry; returns 1 if everything matched. */
static int check_geometry(const ra_window_spec *g, int b, int c) {
    char desc[160];
    geom_str(desc, sizeof desc, g, b, c);
    int64_t nw = ra_window_count(g), n = ra_window_tokens(g);
    int Dp, Hp, Wp;
    ra_window_padded(g, &Dp, &Hp, &Wp);
    int64_t enw = (int64_t)(Dp / g->wd) * (Hp / g->wh) * (Wp / g->ww);
    CHECK(nw == enw && n == (int64_t)g->wd * g->wh * g->ww && Dp == pad_up(g->d, g->wd) &&
          Hp == pad_up(g->h, g->wh) && Wp == pad_up(g->w, g->ww),
          "%s: count %lld tokens %lld padded %dx%dx%d", desc, (long long)nw,
          (long long)n, Dp, Hp, Wp);
    if (nw != enw) return 0;

    size_t nx = (size_t)b * g->d * g->h * g->w * c;
    size_t nwin = (size_t)b * nw * n * c;
    float *x = xmalloc(sizeof(float) * nx);
    float *x2 = xmalloc(sizeof(float) * nx);
    float *win = xmalloc(sizeof(float) * nwin);
    float *ref = xmalloc(sizeof(float) * nwin);
    unsigned char *frompad = xmalloc((size_t)b * nw * n);
    /* nonzero values, so a padding zero in the wrong place shows */
    for (size_t i = 0; i < nx; i++) x[i] = 1.0f + (float)(rng_next() % 100000) / 7.0f;

    oracle_partition(ref, frompad, x, b, c, g);
    memset(win, 0xff, sizeof(float) * nwin);   /* NaNs: every float must be written */
    ra_status st = ra_window_partition(win, x, b, c, g);
    int ok = st == RA_OK && memcmp(win, ref, sizeof(float) * nwin) == 0;
    CHECK(st == RA_OK, "%s: partition: %s (%s)", desc, ra_status_str(st), ra_last_error());
    CHECK(ok, "%s: partition differs from the oracle", desc);

    /* round trip */
    memset(x2, 0xff, sizeof(float) * nx);
    st = ra_window_reverse(x2, win, b, c, g);
    int ok2 = st == RA_OK && memcmp(x2, x, sizeof(float) * nx) == 0;
    CHECK(ok2, "%s: reverse(partition(x)) != x (%s)", desc, ra_status_str(st));

    /* tokens from padding are dropped, whatever they hold */
    for (size_t t = 0; t < (size_t)b * nw * n; t++)
        if (frompad[t])
            for (int ch = 0; ch < c; ch++) ref[t * c + ch] = -12345.0f;
    memset(x2, 0xff, sizeof(float) * nx);
    st = ra_window_reverse(x2, ref, b, c, g);
    int ok3 = st == RA_OK && memcmp(x2, x, sizeof(float) * nx) == 0;
    CHECK(ok3, "%s: reverse keeps padding tokens", desc);

    /* mask */
    size_t nm = (size_t)nw * n * n;
    float *m = xmalloc(sizeof(float) * nm);
    float *mref = xmalloc(sizeof(float) * nm);
    oracle_mask(mref, g);
    memset(m, 0xff, sizeof(float) * nm);
    st = ra_window_mask(m, g);
    int ok4 = st == RA_OK && memcmp(m, mref, sizeof(float) * nm) == 0;
    CHECK(ok4, "%s: mask differs from the oracle (%s)", desc, ra_status_str(st));

    free(x);
    free(x2);
    free(win);
    free(ref);
    free(frompad);
    free(m);
    free(mref);
    return ok && ok2 && ok3 && ok4;
}

static void test_random(void) {
    int bad = 0, total = 0;
    for (int it = 0; it < 400; it++) {
        int three = it % 2;
        int wh = rng_int(1, 5);
        int ww = it % 4 < 2 ? wh : rng_int(1, 5);   /* half square */
        int wd = three ? rng_int(1, 4) : 1;
        ra_window_spec g = geom(three ? rng_int(1, 7) : 1, rng_int(1, 11), rng_int(1, 11),
                                wd, wh, ww, rng_int(0, wd - 1), rng_int(0, wh - 1),
                                rng_int(0, ww - 1));
        /* a quarter with the clamp applied, as a block would run them */
        if (it % 8 >= 6) ra_window_clamp(&g);
        total++;
        bad += !check_geometry(&g, rng_int(1, 3), rng_int(1, 5));
    }
    /* every axis padded and shifted at once, 2-D and 3-D */
    ra_window_spec a = geom(5, 7, 9, 2, 3, 4, 1, 2, 3);
    ra_window_spec a2 = geom(1, 7, 9, 1, 4, 4, 0, 2, 3);
    total += 2;
    bad += !check_geometry(&a, 2, 3);
    bad += !check_geometry(&a2, 2, 3);
    /* large enough to take the threaded path */
    ra_window_spec big = geom(8, 28, 30, 2, 7, 7, 1, 3, 3);
    ra_window_spec big2 = geom(1, 57, 61, 1, 8, 8, 0, 4, 4);
    total += 2;
    bad += !check_geometry(&big, 2, 32);
    bad += !check_geometry(&big2, 1, 48);
    printf("random geometries: %d of %d match the oracle\n", total - bad, total);
}

/* The backward ops are the adjoints: <part(x), w> == <x, part^T(w)> and
 * <rev(w), x> == <w, rev^T(x)> (in double), and they accumulate. */
static void test_backward(void) {
    int bad = 0, total = 0;
    for (int it = 0; it < 200; it++) {
        int three = it % 2, wh = rng_int(1, 5), ww = it % 4 < 2 ? wh : rng_int(1, 5);
        int wd = three ? rng_int(1, 3) : 1, b = rng_int(1, 2), c = rng_int(1, 4);
        ra_window_spec g = geom(three ? rng_int(1, 6) : 1, rng_int(1, 10), rng_int(1, 10),
                                wd, wh, ww, rng_int(0, wd - 1), rng_int(0, wh - 1),
                                rng_int(0, ww - 1));
        size_t nx = (size_t)b * g.d * g.h * g.w * c;
        size_t nw = (size_t)(b * ra_window_count(&g) * ra_window_tokens(&g) * c);
        float *x = xmalloc(nx * 4), *w = xmalloc(nw * 4), *px = xmalloc(nw * 4);
        float *rw = xmalloc(nx * 4), *dx = xmalloc(nx * 4), *dw = xmalloc(nw * 4);
        for (size_t i = 0; i < nx; i++) x[i] = (float)rng_int(-50, 50) / 8, dx[i] = 1;
        for (size_t i = 0; i < nw; i++) w[i] = (float)rng_int(-50, 50) / 8, dw[i] = 1;
        ra_window_partition(px, x, b, c, &g);
        ra_window_reverse(rw, w, b, c, &g);
        /* dx = 1 + 2 part^T(w) after two calls; dw = 1 + 2 rev^T(x) */
        for (int k = 0; k < 2; k++) {
            bad += ra_window_partition_backward(dx, w, b, c, &g) != RA_OK;
            bad += ra_window_reverse_backward(dw, x, b, c, &g) != RA_OK;
        }
        double l1 = 0, r1 = 0, l2 = 0, r2 = 0;
        for (size_t i = 0; i < nw; i++) l1 += (double)px[i] * w[i], r2 += (double)w[i] * (dw[i] - 1) / 2;
        for (size_t i = 0; i < nx; i++) r1 += (double)x[i] * (dx[i] - 1) / 2, l2 += (double)rw[i] * x[i];
        total++;
        if (fabs(l1 - r1) > 1e-9 * (1 + fabs(l1)) || fabs(l2 - r2) > 1e-9 * (1 + fabs(l2))) {
            char gs[160];
            geom_str(gs, sizeof gs, &g, b, c);
            CHECK(0, "window backward is not the adjoint for %s: %g vs %g, %g vs %g", gs, l1, r1,
                  l2, r2);
            bad++;
        }
        free(x), free(w), free(px), free(rw), free(dx), free(dw);
    }
    CHECK(bad == 0, "%d of %d window backward geometries failed", bad, total);
}

/* ---------------------------------------------------------------------- */
/* 3. PyTorch fixtures                                                      */
/* ---------------------------------------------------------------------- */

static int meta_int(const ra_st_file *f, const char *key, int *out) {
    const char *v = ra_st_meta(f, key);
    if (!v || !*v) return 0;
    char *end;
    long r = strtol(v, &end, 10);
    if (*end || r < INT_MIN || r > INT_MAX) return 0;
    *out = (int)r;
    return 1;
}

/* The tensor name as F32 of exactly the given shape, or NULL. */
static float *load_tensor(const ra_st_file *f, const char *name, int ndim,
                          const int64_t *shape, const char *what) {
    const ra_st_tensor *t = ra_st_find(f, name);
    CHECK(t != NULL, "%s: no tensor '%s'", what, name);
    if (!t) return NULL;
    int same = t->ndim == ndim && t->dtype == RA_DTYPE_F32;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    CHECK(same, "%s: tensor '%s' is not F32 of the expected shape (ndim %d)", what,
          name, t->ndim);
    if (!same) return NULL;
    float *p = xmalloc(sizeof(float) * (size_t)t->numel);
    ra_status st = ra_st_to_f32(p, t);
    CHECK(st == RA_OK, "%s: reading '%s': %s", what, name, ra_last_error());
    if (st != RA_OK) {
        free(p);
        return NULL;
    }
    return p;
}

static void test_fixture(const char *dir, const char *name) {
    char path[4096], what[4200];
    /* windows.txt lists names with their win_ prefix; accept either form */
    const char *prefix = strncmp(name, "win_", 4) == 0 ? "" : "win_";
    snprintf(path, sizeof path, "%s/%s%s.safetensors", dir, prefix, name);
    snprintf(what, sizeof what, "fixture %s", name);
    ra_st_file *f = NULL;
    ra_status st = ra_st_open(&f, path);
    CHECK(st == RA_OK, "%s: cannot open %s: %s", what, path, ra_last_error());
    if (st != RA_OK) return;

    static const char *const keys[11] = {"b", "c", "d", "h", "w", "wd", "wh", "ww",
                                         "sd", "sh", "sw"};
    int v[11], okm = 1;
    for (int i = 0; i < 11; i++) {
        int got = meta_int(f, keys[i], &v[i]);
        CHECK(got, "%s: metadata '%s' missing or not an integer", what, keys[i]);
        okm &= got;
    }
    if (!okm) {
        ra_st_close(f);
        return;
    }
    int b = v[0], c = v[1];
    ra_window_spec g = geom(v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]);
    int64_t nw = ra_window_count(&g), n = ra_window_tokens(&g);
    CHECK(nw > 0 && n > 0 && b > 0 && c > 0, "%s: invalid geometry", what);
    if (!(nw > 0 && n > 0 && b > 0 && c > 0)) {
        ra_st_close(f);
        return;
    }
    const int64_t xs[5] = {b, g.d, g.h, g.w, c};
    const int64_t ws[3] = {b * nw, n, c};
    const int64_t ms[3] = {nw, n, n};
    float *x = load_tensor(f, "x", 5, xs, what);
    float *wref = load_tensor(f, "windows", 3, ws, what);
    float *mref = load_tensor(f, "mask", 3, ms, what);
    if (x && wref) {
        size_t nwin = (size_t)(b * nw * n * c), nx = (size_t)b * g.d * g.h * g.w * c;
        float *win = xmalloc(sizeof(float) * nwin);
        float *x2 = xmalloc(sizeof(float) * nx);
        st = ra_window_partition(win, x, b, c, &g);
        CHECK(st == RA_OK && memcmp(win, wref, sizeof(float) * nwin) == 0,
              "%s: partition differs from PyTorch", what);
        memset(x2, 0xff, sizeof(float) * nx);
        st = ra_window_reverse(x2, wref, b, c, &g);
        CHECK(st == RA_OK && memcmp(x2, x, sizeof(float) * nx) == 0,
              "%s: reverse of PyTorch's windows differs from x", what);
        free(win);
        free(x2);
    }
    if (mref) {
        size_t nm = (size_t)(nw * n * n);
        float *m = xmalloc(sizeof(float) * nm);
        int only = 1;
        for (size_t i = 0; i < nm; i++) only &= mref[i] == 0.0f || mref[i] == -100.0f;
        CHECK(only, "%s: PyTorch mask holds values other than 0 and -100", what);
        st = ra_window_mask(m, &g);
        CHECK(st == RA_OK && memcmp(m, mref, sizeof(float) * nm) == 0,
              "%s: mask differs from PyTorch", what);
        /* the same mask as labels (ra_attn_desc.regions): -100 where two differ */
        int32_t *lab = xmalloc(sizeof(int32_t) * (size_t)(nw * n));
        st = ra_window_regions(lab, &g);
        int same = st == RA_OK;
        for (int64_t k = 0; same && k < nw; k++)
            for (int64_t i = 0; same && i < n; i++)
                for (int64_t j = 0; same && j < n; j++)
                    same = mref[(k * n + i) * n + j] ==
                           (lab[k * n + i] == lab[k * n + j] ? 0.0f : -100.0f);
        CHECK(same, "%s: labels do not give PyTorch's mask", what);
        free(lab);
        free(m);
    }
    free(x);
    free(wref);
    free(mref);
    ra_st_close(f);
}

static void test_fixtures(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/windows.txt", dir);
    FILE *list = fopen(path, "r");
    CHECK(list != NULL, "cannot open %s (fixtures are committed: run tools/make_fixtures.py)",
          path);
    if (!list) return;
    char line[512];
    int count = 0;
    while (fgets(line, sizeof line, list)) {
        size_t len = strcspn(line, "\r\n");
        line[len] = 0;
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (!*s || *s == '#') continue;
        for (char *e = s + strlen(s); e > s && (e[-1] == ' ' || e[-1] == '\t');) *--e = 0;
        test_fixture(dir, s);
        count++;
    }
    fclose(list);
    CHECK(count > 0, "%s lists no fixtures", path);
    printf("fixtures: %d window fixtures read\n", count);
}

/* ---------------------------------------------------------------------- */
/* 4. Known values, clamp, sizes, errors                                   */
/* ---------------------------------------------------------------------- */

static int count_zeros(const float *m, size_t n) {
    int z = 0;
    for (size_t i = 0; i < n; i++) z += m[i] == 0.0f;
    return z;
}

static void test_known_mask(void) {
    /* 8 x 8, ws 4, shift 2: per axis regions [0,4) [4,6) [6,8); windows
     * 0 (top left) one region, 1 (top right) and 2 two, 3 (bottom right)
     * four regions of 2 x 2 tokens. */
    ra_window_spec g = geom(1, 8, 8, 1, 4, 4, 0, 2, 2);
    CHECK(ra_window_count(&g) == 4 && ra_window_tokens(&g) == 16, "8x8 ws4 sizes");
    float m[4 * 16 * 16];
    ra_status st = ra_window_mask(m, &g);
    CHECK(st == RA_OK, "mask 8x8: %s", ra_last_error());
    const float *w0 = m, *w1 = m + 256, *w2 = m + 512, *w3 = m + 768;
    CHECK(count_zeros(w0, 256) == 256, "window 0 is all zeros");
    CHECK(count_zeros(w1, 256) == 128, "window 1: two regions of 8 tokens");
    CHECK(count_zeros(w2, 256) == 128, "window 2: two regions of 8 tokens");
    CHECK(count_zeros(w3, 256) == 64, "window 3: four regions of 4 tokens");
    /* window 1 = rows 0-3, columns 4-7: columns 4,5 vs 6,7 */
    CHECK(w1[0 * 16 + 1] == 0.0f && w1[0 * 16 + 2] == -100.0f && w1[2 * 16 + 3] == 0.0f &&
          w1[1 * 16 + 13] == 0.0f && w1[3 * 16 + 12] == -100.0f, "window 1 entries");
    /* window 2 = rows 4-7, columns 0-3: rows 4,5 vs 6,7 */
    CHECK(w2[0 * 16 + 7] == 0.0f && w2[0 * 16 + 8] == -100.0f && w2[15 * 16 + 8] == 0.0f,
          "window 2 entries");
    /* window 3: token (r, c) in region (r >= 2, c >= 2) */
    CHECK(w3[0 * 16 + 5] == 0.0f && w3[0 * 16 + 3] == -100.0f && w3[0 * 16 + 15] == -100.0f &&
          w3[10 * 16 + 15] == 0.0f && w3[3 * 16 + 6] == 0.0f && w3[12 * 16 + 3] == -100.0f,
          "window 3 entries");
    int sym = 1, diag = 1;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 16; i++) {
            diag &= m[(k * 16 + i) * 16 + i] == 0.0f;
            for (int j = 0; j < 16; j++)
                sym &= m[(k * 16 + i) * 16 + j] == m[(k * 16 + j) * 16 + i];
        }
    CHECK(sym && diag, "mask symmetric with a zero diagonal");

    /* zero shift: all zeros, 2-D and 3-D, with padding */
    ra_window_spec z2 = geom(1, 9, 7, 1, 4, 3, 0, 0, 0);
    ra_window_spec z3 = geom(5, 6, 7, 2, 3, 4, 0, 0, 0);
    for (int t = 0; t < 2; t++) {
        const ra_window_spec *gz = t ? &z3 : &z2;
        size_t nm = (size_t)(ra_window_count(gz) * ra_window_tokens(gz) * ra_window_tokens(gz));
        float *mz = xmalloc(sizeof(float) * nm);
        memset(mz, 0xff, sizeof(float) * nm);
        st = ra_window_mask(mz, gz);
        CHECK(st == RA_OK && count_zeros(mz, nm) == (int)nm, "zero-shift mask %dD all zeros",
              t ? 3 : 2);
        free(mz);
    }

    /* 3-D, only the frame axis shifted: windows on the last frame block
     * split into frames [P-w, P-s) and [P-s, P). d 4, wd 2, sd 1; h = w = 2. */
    ra_window_spec f = geom(4, 2, 2, 2, 2, 2, 1, 0, 0);
    float mf[2 * 8 * 8];
    st = ra_window_mask(mf, &f);
    CHECK(st == RA_OK && count_zeros(mf, 64) == 64 && count_zeros(mf + 64, 64) == 32 &&
          mf[64 + 0 * 8 + 3] == 0.0f && mf[64 + 0 * 8 + 4] == -100.0f,
          "frame-only shift mask");
}

static void test_known_partition(void) {
    /* 1 x 3 x 3 map of values 1..9, window 2, shift 1: padded to 4 x 4,
     * rolled by -1: rolled[i][j] = padded[(i+1)%4][(j+1)%4]. */
    float x[9], win[16], back[9];
    for (int i = 0; i < 9; i++) x[i] = (float)(i + 1);
    ra_window_spec g = geom(1, 3, 3, 1, 2, 2, 0, 1, 1);
    ra_status st = ra_window_partition(win, x, 1, 1, &g);
    /* rolled map rows: [5 6 0 4] [8 9 0 7] [0 0 0 0] [2 3 0 1] */
    const float want[16] = {5, 6, 8, 9, 0, 4, 0, 7, 0, 0, 2, 3, 0, 0, 0, 1};
    CHECK(st == RA_OK && memcmp(win, want, sizeof want) == 0,
          "3x3 ws2 shift1 partition by hand");
    st = ra_window_reverse(back, win, 1, 1, &g);
    CHECK(st == RA_OK && memcmp(back, x, sizeof x) == 0, "3x3 ws2 shift1 reverse");
}

static int geom_eq(const ra_window_spec *a, int d, int h, int w, int wd, int wh, int ww,
                   int sd, int sh, int sw) {
    return a->d == d && a->h == h && a->w == w && a->wd == wd && a->wh == wh &&
           a->ww == ww && a->sd == sd && a->sh == sh && a->sw == sw;
}

static void test_clamp(void) {
    ra_window_spec g = geom(1, 7, 7, 1, 7, 7, 0, 3, 3);
    ra_window_clamp(&g);
    CHECK(geom_eq(&g, 1, 7, 7, 1, 7, 7, 0, 0, 0), "7x7 ws7: ws 7, shift 0");
    g = geom(1, 5, 9, 1, 7, 7, 0, 3, 3);
    ra_window_clamp(&g);
    CHECK(geom_eq(&g, 1, 5, 9, 1, 5, 5, 0, 0, 0), "5x9 ws7 (Swin rule): ws 5, shift 0");
    g = geom(1, 14, 14, 1, 7, 7, 0, 3, 3);
    ra_window_clamp(&g);
    CHECK(geom_eq(&g, 1, 14, 14, 1, 7, 7, 0, 3, 3), "14x14 ws7 unchanged");
    g = geom(1, 8, 8, 1, 7, 7, 0, 3, 3);
    ra_window_clamp(&g);
    CHECK(geom_eq(&g, 1, 8, 8, 1, 7, 7, 0, 3, 3), "8x8 ws7 unchanged");
    /* non-square: per axis */
    g = geom(1, 5, 20, 1, 7, 4, 0, 3, 2);
    ra_window_clamp(&g);
    CHECK(geom_eq(&g, 1, 5, 20, 1, 5, 4, 0, 0, 2), "5x20 win 7x4: per axis");
    g = geom(1, 3, 2, 1, 4, 6, 0, 1, 5);
    ra_window_clamp(&g);
    CHECK(geom_eq(&g, 1, 3, 2, 1, 3, 2, 0, 0, 0), "3x2 win 4x6: both axes");
    /* frame axis on its own */
    g = geom(4, 56, 56, 8, 7, 7, 4, 3, 3);
    ra_window_clamp(&g);
    CHECK(geom_eq(&g, 4, 56, 56, 4, 7, 7, 0, 3, 3), "4 frames, wd 8: wd 4 shift 0");
    g = geom(8, 56, 56, 8, 7, 7, 4, 3, 3);
    ra_window_clamp(&g);
    CHECK(geom_eq(&g, 8, 56, 56, 8, 7, 7, 0, 3, 3), "8 frames, wd 8: wd 8 shift 0");
    g = geom(16, 4, 4, 8, 7, 7, 4, 3, 3);
    ra_window_clamp(&g);
    CHECK(geom_eq(&g, 16, 4, 4, 8, 4, 4, 4, 0, 0), "16 frames kept, spatial clamped");
    g = geom(1, 9, 9, 1, 4, 4, 0, 2, 2);
    ra_window_clamp(&g);
    CHECK(geom_eq(&g, 1, 9, 9, 1, 4, 4, 0, 2, 2), "2-D 9x9 ws4 unchanged");
    ra_window_clamp(NULL);
    CHECK(1, "clamp(NULL) is harmless");
}

static void test_sizes(void) {
    ra_window_spec g = geom(3, 10, 13, 2, 4, 4, 1, 2, 3);
    int dp = -1, hp = -1, wp = -1;
    ra_window_padded(&g, &dp, &hp, &wp);
    CHECK(dp == 4 && hp == 12 && wp == 16, "padded %d %d %d", dp, hp, wp);
    CHECK(ra_window_count(&g) == 2 * 3 * 4, "count %lld", (long long)ra_window_count(&g));
    CHECK(ra_window_tokens(&g) == 32, "tokens %lld", (long long)ra_window_tokens(&g));
    g = geom(1, 56, 56, 1, 7, 7, 0, 3, 3);
    ra_window_padded(&g, &dp, &hp, &wp);
    CHECK(dp == 1 && hp == 56 && wp == 56 && ra_window_count(&g) == 64 &&
          ra_window_tokens(&g) == 49, "Swin-T stage 1 sizes");
    ra_window_padded(&g, NULL, NULL, &wp);
    CHECK(wp == 56, "padded accepts NULL outputs");
    /* invalid geometry: zeros */
    g = geom(1, 0, 8, 1, 4, 4, 0, 0, 0);
    ra_window_padded(&g, &dp, &hp, &wp);
    CHECK(dp == 0 && hp == 0 && wp == 0 && ra_window_count(&g) == 0 &&
          ra_window_tokens(&g) == 0, "invalid geometry gives zero sizes");
    CHECK(ra_window_count(NULL) == 0 && ra_window_tokens(NULL) == 0, "NULL geometry");
}

#define CHECK_ARG(call, what)                                                  \
    do {                                                                       \
        ra_status s_ = (call);                                                 \
        CHECK(s_ == RA_ERR_ARG && ra_last_error()[0] != 0 &&                   \
              strchr(ra_last_error(), '\n') == NULL,                           \
              "%s: got %s", (what), ra_status_str(s_));                        \
    } while (0)

static void test_errors(void) {
    float x[64], w[64], m[64];
    int32_t lab[64];
    memset(x, 0, sizeof x);
    const ra_window_spec ok = geom(1, 4, 4, 1, 2, 2, 0, 1, 1);
    CHECK(ra_window_partition(w, x, 1, 2, &ok) == RA_OK, "valid call");
    CHECK(ra_window_mask(m, &ok) == RA_OK, "valid mask");

    struct { ra_window_spec g; const char *what; } bad[] = {
        {geom(0, 4, 4, 1, 2, 2, 0, 0, 0), "d = 0"},
        {geom(1, 0, 4, 1, 2, 2, 0, 0, 0), "h = 0"},
        {geom(1, 4, -3, 1, 2, 2, 0, 0, 0), "w < 0"},
        {geom(1, 4, 4, 0, 2, 2, 0, 0, 0), "wd = 0"},
        {geom(1, 4, 4, 1, 0, 2, 0, 0, 0), "wh = 0"},
        {geom(1, 4, 4, 1, 2, -1, 0, 0, 0), "ww < 0"},
        {geom(1, 4, 4, 1, 2, 2, 1, 0, 0), "sd = wd"},
        {geom(1, 4, 4, 1, 2, 2, 0, 2, 0), "sh = wh"},
        {geom(1, 4, 4, 1, 2, 2, 0, 0, 5), "sw > ww"},
        {geom(1, 4, 4, 1, 2, 2, 0, -1, 0), "sh < 0"},
        {geom(1, 4, 4, 1, 2, 2, -1, 0, 0), "sd < 0"},
        {geom(1, INT_MAX, 4, 1, 2, 2, 0, 0, 0), "padded size past INT_MAX"},
        {geom(INT_MAX / 2, INT_MAX / 2, INT_MAX / 2, 1, 1, 1, 0, 0, 0), "window count overflow"},
        {geom(1, 1, 1, 1 << 21, 1 << 21, 1 << 21, 0, 0, 0), "token count overflow"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char what[128];
        snprintf(what, sizeof what, "partition, %s", bad[i].what);
        CHECK_ARG(ra_window_partition(w, x, 1, 1, &bad[i].g), what);
        snprintf(what, sizeof what, "reverse, %s", bad[i].what);
        CHECK_ARG(ra_window_reverse(x, w, 1, 1, &bad[i].g), what);
        snprintf(what, sizeof what, "mask, %s", bad[i].what);
        CHECK_ARG(ra_window_mask(m, &bad[i].g), what);
        snprintf(what, sizeof what, "regions, %s", bad[i].what);
        CHECK_ARG(ra_window_regions(lab, &bad[i].g), what);
        CHECK(ra_window_count(&bad[i].g) == 0, "count of %s is 0", bad[i].what);
    }
    CHECK_ARG(ra_window_partition(w, x, 1, 1, NULL), "partition, NULL geometry");
    CHECK_ARG(ra_window_reverse(x, w, 1, 1, NULL), "reverse, NULL geometry");
    CHECK_ARG(ra_window_mask(m, NULL), "mask, NULL geometry");
    CHECK_ARG(ra_window_partition(NULL, x, 1, 1, &ok), "partition, NULL windows");
    CHECK_ARG(ra_window_partition(w, NULL, 1, 1, &ok), "partition, NULL x");
    CHECK_ARG(ra_window_reverse(NULL, w, 1, 1, &ok), "reverse, NULL x");
    CHECK_ARG(ra_window_reverse(x, NULL, 1, 1, &ok), "reverse, NULL windows");
    CHECK_ARG(ra_window_mask(NULL, &ok), "mask, NULL mask");
    CHECK_ARG(ra_window_regions(NULL, &ok), "regions, NULL regions");
    CHECK_ARG(ra_window_regions(lab, NULL), "regions, NULL geometry");
    CHECK_ARG(ra_window_partition(w, x, 0, 1, &ok), "partition, b = 0");
    CHECK_ARG(ra_window_partition(w, x, 1, 0, &ok), "partition, c = 0");
    CHECK_ARG(ra_window_reverse(x, w, -1, 1, &ok), "reverse, b < 0");
    CHECK_ARG(ra_window_reverse(x, w, 1, -2, &ok), "reverse, c < 0");
    /* sizes valid one by one, too large together */
    const ra_window_spec large = geom(1 << 10, 1 << 10, 1 << 10, 1, 1, 1, 0, 0, 0);
    CHECK_ARG(ra_window_partition(w, x, INT_MAX, INT_MAX, &large), "partition, total overflow");
    CHECK_ARG(ra_window_reverse(x, w, INT_MAX, INT_MAX, &large), "reverse, total overflow");
    const ra_window_spec bigmask = geom(1 << 12, 1 << 12, 1 << 12, 1 << 10, 1 << 10, 1 << 10,
                                        0, 0, 0);
    CHECK_ARG(ra_window_mask(m, &bigmask), "mask, N*N*nW overflow");
    /* the size queries report no status, so they keep the last reason */
    ra_window_mask(m, &bad[0].g);
    char before[512];
    snprintf(before, sizeof before, "%s", ra_last_error());
    int dp, hp, wp;
    ra_window_padded(&bad[1].g, &dp, &hp, &wp);
    (void)ra_window_count(&bad[2].g);
    (void)ra_window_tokens(NULL);
    CHECK(strcmp(before, ra_last_error()) == 0, "size queries replaced the last error");
    /* a failure leaves the output untouched: nothing was written */
    float sentinel[4] = {7, 7, 7, 7};
    const ra_window_spec badshift = geom(1, 2, 2, 1, 2, 2, 0, 2, 0);
    ra_window_mask(sentinel, &badshift);
    CHECK(sentinel[0] == 7 && sentinel[3] == 7, "failed call writes nothing");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    test_known_partition();
    test_known_mask();
    test_clamp();
    test_sizes();
    test_errors();
    test_random();
    test_backward();
    test_fixtures(argv[1]);
    return check_done();
}
