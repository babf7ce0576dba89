/* window.c - window partition / reverse with padding and cyclic shift, and
 * the shifted-window attention mask (docs/reference.md, section 1.3).
 *
 * The PyTorch code pads, rolls, reshapes and permutes, materialising the
 * padded and rolled map on the way. Here every window token is mapped back
 * to its source coordinate instead, so each call is one pass over its
 * output: per axis, window token t of window k sits at padded-and-rolled
 * position p = k*win + t, which holds padded[(p + s) % P]; source positions
 * at or beyond the map size are padding (zeros).
 *
 * Axes are handled as arrays indexed 0 = frames (D), 1 = rows (H),
 * 2 = columns (W); a 2-D image is the case D = Wd = 1, Sd = 0.
 */
#include "base/internal.h"
#include "pos/window.h"

#include <limits.h>
#include <string.h>

/* Below this many floats moved, starting threads costs more than the copy. */
#define RA_WINDOW_PAR_MIN ((int64_t)1 << 16)

/* Mask labels are small integers stored in float: exact. */
#define RA_MASK_OFF (-100.0f)

/* A validated geometry, everything the loops need, in 64-bit. */
typedef struct ra_wplan {
    int64_t size[3];   /* map size per axis (unpadded) */
    int64_t win[3];    /* window per axis */
    int64_t shift[3];  /* cyclic shift per axis */
    int64_t pad[3];    /* padded size per axis, a multiple of win */
    int64_t nwin[3];   /* windows per axis, pad / win */
    int64_t nw;        /* windows per map */
    int64_t n;         /* tokens per window */
} ra_wplan;

/* Largest element count whose byte size still fits a pointer difference. */
#define RA_MAX_FLOATS ((int64_t)(PTRDIFF_MAX / (ptrdiff_t)sizeof(float)))

static const char *const ra_axis_name[3] = {"frame", "row", "column"};

/* Fill p from g, or say why g is unusable. fn names the caller; NULL keeps
 * quiet, for the size queries, which return no status and so must not
 * replace the reason of an earlier failure. */
#define RA_PLAN_FAIL(...) (fn ? rai_fail(RA_ERR_ARG, __VA_ARGS__) : RA_ERR_ARG)

static ra_status ra_window_plan(ra_wplan *p, const ra_window_spec *g,
                                const char *fn) {
    if (!g) return RA_PLAN_FAIL("%s: no geometry", fn);
    const int size[3] = {g->d, g->h, g->w};
    const int win[3] = {g->wd, g->wh, g->ww};
    const int shift[3] = {g->sd, g->sh, g->sw};
    p->nw = 1;
    p->n = 1;
    for (int a = 0; a < 3; a++) {
        if (size[a] < 1 || win[a] < 1)
            return RA_PLAN_FAIL("%s: %s axis has size %d and window %d "
                                "(both must be >= 1)", fn, ra_axis_name[a], size[a], win[a]);
        if (shift[a] < 0 || shift[a] >= win[a])
            return RA_PLAN_FAIL("%s: %s shift %d outside [0, %d)", fn,
                                ra_axis_name[a], shift[a], win[a]);
        p->size[a] = size[a];
        p->win[a] = win[a];
        p->shift[a] = shift[a];
        p->nwin[a] = (p->size[a] + p->win[a] - 1) / p->win[a];
        p->pad[a] = p->nwin[a] * p->win[a];
        /* the padded size is reported through int (ra_window_padded) */
        if (p->pad[a] > INT_MAX)
            return RA_PLAN_FAIL("%s: %s axis padded to %lld exceeds INT_MAX",
                                fn, ra_axis_name[a], (long long)p->pad[a]);
        if (!rai_mul_i64(&p->nw, p->nw, p->nwin[a]) || !rai_mul_i64(&p->n, p->n, p->win[a]))
            return RA_PLAN_FAIL("%s: window count overflows", fn);
    }
    return RA_OK;
}

/* Check b and c, and that both tensors of a partition fit in memory
 * arithmetic: windows (B*nW, N, C) is never smaller than x (B, D, H, W, C). */
static ra_status ra_window_plan_bc(const ra_wplan *p, int b, int c,
                                   const char *fn, int64_t *total) {
    if (b < 1 || c < 1)
        return rai_fail(RA_ERR_ARG, "%s: batch %d and channels %d must be >= 1",
                        fn, b, c);
    int64_t t;
    if (!rai_mul_i64(&t, p->nw, p->n) || !rai_mul_i64(&t, t, b) ||
        !rai_mul_i64(&t, t, c) || t > RA_MAX_FLOATS)
        return rai_fail(RA_ERR_ARG, "%s: %d x %lld windows x %lld tokens x %d "
                        "channels overflows", fn, b, (long long)p->nw,
                        (long long)p->n, c);
    *total = t;
    return RA_OK;
}

/* Clamping follows two reference implementations, which disagree:
 *  - Swin (SwinTransformerBlock): one square window for both spatial axes;
 *    if min(H, W) <= ws then ws = min(H, W) and the shift is 0, on both
 *    axes together (so a 5 x 9 map with ws 7 gets 5 x 5 windows, W padded).
 *  - Video Swin (get_window_size): per axis, if size <= window then
 *    window = size and that axis's shift is 0.
 * The Swin rule is used for the spatial pair when the window is square
 * (that is the case the Swin code can express); a non-square window, and
 * the frame axis always, follow the Video Swin rule. For a 2-D image
 * (D = Wd = 1) the frame rule leaves Wd = 1, Sd = 0. */
void ra_window_clamp(ra_window_spec *g) {
    if (!g) return;
    if (g->d <= g->wd) {
        g->wd = g->d;
        g->sd = 0;
    }
    if (g->wh == g->ww) {
        int m = g->h < g->w ? g->h : g->w;
        if (m <= g->wh) {
            g->wh = g->ww = m;
            g->sh = g->sw = 0;
        }
    } else {
        if (g->h <= g->wh) {
            g->wh = g->h;
            g->sh = 0;
        }
        if (g->w <= g->ww) {
            g->ww = g->w;
            g->sw = 0;
        }
    }
}

/* An invalid geometry gives zeros here and in count / tokens, so that a
 * caller sizing buffers from them cannot overrun; the status-returning
 * calls then report why. */
void ra_window_padded(const ra_window_spec *g, int *dp, int *hp, int *wp) {
    ra_wplan p = {0};
    int ok = ra_window_plan(&p, g, NULL) == RA_OK;
    if (dp) *dp = ok ? (int)p.pad[0] : 0;
    if (hp) *hp = ok ? (int)p.pad[1] : 0;
    if (wp) *wp = ok ? (int)p.pad[2] : 0;
}

int64_t ra_window_count(const ra_window_spec *g) {
    ra_wplan p = {0};
    return ra_window_plan(&p, g, NULL) == RA_OK ? p.nw : 0;
}

int64_t ra_window_tokens(const ra_window_spec *g) {
    ra_wplan p = {0};
    return ra_window_plan(&p, g, NULL) == RA_OK ? p.n : 0;
}

/* Padded-map coordinate that rolled position pos (0 <= pos < P) reads. */
static inline int64_t ra_unroll(int64_t pos, int64_t s, int64_t P) {
    int64_t q = pos + s;
    return q >= P ? q - P : q;
}

/* One window row of ww tokens along the column axis starts at rolled
 * column x0 and so reads padded columns x0 .. P-1, then wraps to 0 ..:
 * at most two contiguous runs, each split into a part inside the map
 * (columns < w, copied) and a part in the padding. */
typedef struct ra_run { int64_t src, len, valid; } ra_run;

static int ra_row_runs(ra_run run[2], int64_t x0, int64_t ww, int64_t P,
                       int64_t w) {
    int64_t first = P - x0 < ww ? P - x0 : ww;
    int nrun = 0;
    run[nrun].src = x0;
    run[nrun].len = first;
    nrun++;
    if (first < ww) {
        run[nrun].src = 0;
        run[nrun].len = ww - first;
        nrun++;
    }
    for (int r = 0; r < nrun; r++) {
        int64_t v = w - run[r].src;
        run[r].valid = v < 0 ? 0 : v > run[r].len ? run[r].len : v;
    }
    return nrun;
}

/* Split window number k (within one map) into per-axis window indices. */
static inline void ra_window_coords(const ra_wplan *p, int64_t k, int64_t kw[3]) {
    kw[2] = k % p->nwin[2];
    k /= p->nwin[2];
    kw[1] = k % p->nwin[1];
    kw[0] = k / p->nwin[1];
}

/* Partition and reverse are one walk over window rows: each window token
 * corresponds to exactly one position of the padded, rolled map (a
 * bijection), so every window writes its own part of either side and the
 * loop parallelises without races. The direction and whether it copies or
 * accumulates is the mode; the backward of each op is the other's walk
 * with +=, since the adjoint of a permutation is its inverse (padding
 * tokens are dropped one way and zero the other). */
typedef enum {
    WALK_PARTITION,      /* windows  = part(x), padding zero   */
    WALK_REVERSE,        /* x        = rev(windows)            */
    WALK_PARTITION_BACK, /* dx      += rev(dwindows)           */
    WALK_REVERSE_BACK    /* dwindows += part(dx), padding kept */
} walk_mode;

static void add_floats(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] += src[i];
}

static ra_status window_walk(float *windows,   /* (B*nW, N, C) */
                             float *x,         /* (B, D, H, W, C) */
                             int b, int c, const ra_window_spec *g, walk_mode mode,
                             const char *fn) {
    ra_wplan p = {0};
    int64_t total = 0;
    ra_status st = ra_window_plan(&p, g, fn);
    if (st != RA_OK) return st;
    if ((st = ra_window_plan_bc(&p, b, c, fn, &total)) != RA_OK) return st;
    if (!windows || !x) return rai_fail(RA_ERR_ARG, "%s: NULL tensor", fn);

    const int64_t C = c, nall = (int64_t)b * p.nw;
    const int64_t map = p.size[0] * p.size[1] * p.size[2] * C;  /* floats per map */
    const int64_t ww = p.win[2];
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(ra_threads_get()) if (total >= RA_WINDOW_PAR_MIN)
#endif
    for (int64_t k = 0; k < nall; k++) {
        int64_t kw[3];
        ra_window_coords(&p, k % p.nw, kw);
        float *xb = x + (k / p.nw) * map;
        float *win = windows + k * p.n * C;
        ra_run run[2];
        int nrun = ra_row_runs(run, ra_unroll(kw[2] * ww, p.shift[2], p.pad[2]),
                               ww, p.pad[2], p.size[2]);
        for (int64_t td = 0; td < p.win[0]; td++) {
            int64_t sd = ra_unroll(kw[0] * p.win[0] + td, p.shift[0], p.pad[0]);
            for (int64_t th = 0; th < p.win[1]; th++, win += ww * C) {
                int64_t sh = ra_unroll(kw[1] * p.win[1] + th, p.shift[1], p.pad[1]);
                if (sd >= p.size[0] || sh >= p.size[1]) {   /* a row of padding */
                    if (mode == WALK_PARTITION) memset(win, 0, (size_t)(ww * C) * sizeof(float));
                    continue;
                }
                float *row = xb + (sd * p.size[1] + sh) * p.size[2] * C;
                float *o = win;
                for (int r = 0; r < nrun; r++) {
                    float *m = row + run[r].src * C;
                    const int64_t nv = run[r].valid * C;
                    switch (mode) {
                    case WALK_PARTITION:
                        memcpy(o, m, (size_t)nv * sizeof(float));
                        memset(o + nv, 0, (size_t)((run[r].len - run[r].valid) * C) * sizeof(float));
                        break;
                    case WALK_REVERSE: memcpy(m, o, (size_t)nv * sizeof(float)); break;
                    case WALK_PARTITION_BACK: add_floats(m, o, nv); break;
                    case WALK_REVERSE_BACK: add_floats(o, m, nv); break;
                    }
                    o += run[r].len * C;
                }
            }
        }
    }
    return RA_OK;
}

ra_status ra_window_partition(float *windows, const float *x, int b, int c,
                              const ra_window_spec *g) {
    /* x is only read in this mode */
    return window_walk(windows, (float *)x, b, c, g, WALK_PARTITION, "ra_window_partition");
}

ra_status ra_window_reverse(float *x, const float *windows, int b, int c,
                            const ra_window_spec *g) {
    return window_walk((float *)windows, x, b, c, g, WALK_REVERSE, "ra_window_reverse");
}

ra_status ra_window_partition_backward(float *dx, const float *dwindows, int b, int c,
                                       const ra_window_spec *g) {
    return window_walk((float *)dwindows, dx, b, c, g, WALK_PARTITION_BACK,
                       "ra_window_partition_backward");
}

ra_status ra_window_reverse_backward(float *dwindows, const float *dx, int b, int c,
                                     const ra_window_spec *g) {
    return window_walk(dwindows, (float *)dx, b, c, g, WALK_REVERSE_BACK,
                       "ra_window_reverse_backward");
}

/* Region of padded position pos on one axis. The official code labels
 * slices [0, P-w), [P-w, P-s), [P-s, P) of the padded map and partitions
 * the labels WITHOUT a roll: the regions are defined on the layout that is
 * already shifted. With s = 0 its slices are [0, P-w), [P-w, 0) (empty) and
 * [0, P) (everything, assigned last), i.e. one region. */
static inline int ra_region(int64_t pos, int64_t P, int64_t w, int64_t s) {
    if (s == 0 || pos < P - w) return 0;
    return pos < P - s ? 1 : 2;
}

/* The region labels of window k's N tokens, as floats (f) or ints (r). */
static void window_labels(const ra_wplan *p, int64_t k, float *f, int32_t *r) {
    int64_t kw[3];
    ra_window_coords(p, k, kw);
    int64_t t = 0;
    for (int64_t td = 0; td < p->win[0]; td++) {
        const int rd = ra_region(kw[0] * p->win[0] + td, p->pad[0], p->win[0], p->shift[0]);
        for (int64_t th = 0; th < p->win[1]; th++) {
            const int rh = ra_region(kw[1] * p->win[1] + th, p->pad[1], p->win[1], p->shift[1]);
            for (int64_t tw = 0; tw < p->win[2]; tw++, t++) {
                const int rw = ra_region(kw[2] * p->win[2] + tw, p->pad[2], p->win[2], p->shift[2]);
                if (f) f[t] = (float)(rd * 9 + rh * 3 + rw);
                else r[t] = rd * 9 + rh * 3 + rw;
            }
        }
    }
}

ra_status ra_window_regions(int32_t *regions,   /* (nW, N) */
                            const ra_window_spec *g) {
    ra_wplan p = {0};
    ra_status st = ra_window_plan(&p, g, "ra_window_regions");
    if (st != RA_OK) return st;
    int64_t total = 0;
    if (!rai_mul_i64(&total, p.n, p.nw) || total > RA_MAX_FLOATS)
        return rai_fail(RA_ERR_ARG, "ra_window_regions: %lld windows of %lld overflows",
                        (long long)p.nw, (long long)p.n);
    if (!regions) return rai_fail(RA_ERR_ARG, "ra_window_regions: NULL regions");
    for (int64_t k = 0; k < p.nw; k++) window_labels(&p, k, NULL, regions + k * p.n);
    return RA_OK;
}

ra_status ra_window_mask(float *mask,   /* (nW, N, N) */
                         const ra_window_spec *g) {
    ra_wplan p = {0};
    ra_status st = ra_window_plan(&p, g, "ra_window_mask");
    if (st != RA_OK) return st;
    int64_t total = 0;
    if (!rai_mul_i64(&total, p.n, p.n) || !rai_mul_i64(&total, total, p.nw) ||
        total > RA_MAX_FLOATS)
        return rai_fail(RA_ERR_ARG, "ra_window_mask: %lld windows of %lld x %lld "
                        "overflows", (long long)p.nw, (long long)p.n, (long long)p.n);
    if (!mask) return rai_fail(RA_ERR_ARG, "ra_window_mask: NULL mask");

    const int64_t N = p.n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(ra_threads_get()) if (total >= RA_WINDOW_PAR_MIN)
#endif
    for (int64_t k = 0; k < p.nw; k++) {
        float *m = mask + k * N * N;
        /* Row 0 of the window's block holds the token labels until last,
         * so no scratch is needed. */
        window_labels(&p, k, m, NULL);
        for (int64_t i = N - 1; i >= 0; i--) {
            const float li = m[i];
            float *row = m + i * N;
            for (int64_t j = 0; j < N; j++)
                row[j] = m[j] == li ? 0.0f : RA_MASK_OFF;
        }
    }
    return RA_OK;
}

/* Where each window token of a partition comes from (pos/window.h): the walk of
 * window_walk, writing source rows instead of copying them. */
ra_status rai_window_rowmap(int32_t *map, int b, const ra_window_spec *g) {
    ra_wplan p = {0};
    int64_t total = 0, rows = 0;
    ra_status st = ra_window_plan(&p, g, "rai_window_rowmap");
    if (st != RA_OK) return st;
    if ((st = ra_window_plan_bc(&p, b, 1, "rai_window_rowmap", &total)) != RA_OK) return st;
    if (!map) return rai_fail(RA_ERR_ARG, "rai_window_rowmap: NULL map");
    const int64_t per = p.size[0] * p.size[1] * p.size[2];
    if (!rai_mul_i64(&rows, per, b) || rows > INT32_MAX)
        return rai_fail(RA_ERR_ARG, "rai_window_rowmap: %d maps of %lld tokens", b,
                        (long long)per);
    const int64_t nall = (int64_t)b * p.nw;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(ra_threads_get()) if (total >= RA_WINDOW_PAR_MIN)
#endif
    for (int64_t k = 0; k < nall; k++) {
        int64_t kw[3];
        ra_window_coords(&p, k % p.nw, kw);
        const int64_t base = (k / p.nw) * per;
        int32_t *m = map + k * p.n;
        for (int64_t td = 0; td < p.win[0]; td++) {
            const int64_t sd = ra_unroll(kw[0] * p.win[0] + td, p.shift[0], p.pad[0]);
            for (int64_t th = 0; th < p.win[1]; th++) {
                const int64_t sh = ra_unroll(kw[1] * p.win[1] + th, p.shift[1], p.pad[1]);
                for (int64_t tw = 0; tw < p.win[2]; tw++) {
                    const int64_t sw = ra_unroll(kw[2] * p.win[2] + tw, p.shift[2], p.pad[2]);
                    *m++ = sd < p.size[0] && sh < p.size[1] && sw < p.size[2]
                               ? (int32_t)(base + (sd * p.size[1] + sh) * p.size[2] + sw)
                               : -1;
                }
            }
        }
    }
    return RA_OK;
}
