/* index.c - relative position indices (docs/reference.md, section 1.2).
 *
 * One general builder over A axes; the Swin 2-D, RSTT 3-D and Shaw 1-D
 * indices are thin configurations of it (Shaw's clip is the exception: it
 * clamps, so it has its own two lines). */
#include "base/internal.h"

#include <math.h>
#include <string.h>

/* Indices beyond this are refused: 2^28 int32 entries are 1 GiB, past any
 * window anyone uses (a 16-frame 32x32 3-D window is exactly this). */
#define RA_INDEX_MAX_ENTRIES ((int64_t)1 << 28)

ra_status ra_relpos_index(int32_t *idx, int64_t *n1_out, int64_t *n2_out,
                          int64_t *table_rows, const ra_relpos_axes *ax) {
    if (!ax || ax->naxes < 1 || ax->naxes > RA_MAX_AXES)
        return rai_fail(RA_ERR_ARG, "relative index: %d axes (1..%d allowed)",
                        ax ? ax->naxes : 0, RA_MAX_AXES);
    const int A = ax->naxes;
    int64_t n1 = 1, n2 = 1, rows = 1;
    int64_t stride[RA_MAX_AXES];
    for (int a = A - 1; a >= 0; a--) {
        int e = ax->extent[a];
        if (e < 1 || ax->qn[a] < 1 || ax->kn[a] < 1)
            return rai_fail(RA_ERR_ARG, "relative index: axis %d has extent %d, "
                            "%d query and %d key coordinates", a, e, ax->qn[a], ax->kn[a]);
        if (!ax->qcoord[a] || !ax->kcoord[a])
            return rai_fail(RA_ERR_ARG, "relative index: axis %d has no coordinates", a);
        for (int t = 0; t < ax->qn[a]; t++)
            if (ax->qcoord[a][t] < 0 || ax->qcoord[a][t] >= e)
                return rai_fail(RA_ERR_ARG, "relative index: query coordinate %d "
                                "outside [0, %d) on axis %d", ax->qcoord[a][t], e, a);
        for (int t = 0; t < ax->kn[a]; t++)
            if (ax->kcoord[a][t] < 0 || ax->kcoord[a][t] >= e)
                return rai_fail(RA_ERR_ARG, "relative index: key coordinate %d "
                                "outside [0, %d) on axis %d", ax->kcoord[a][t], e, a);
        stride[a] = rows;
        if (!rai_mul_i64(&rows, rows, 2 * (int64_t)e - 1) || !rai_mul_i64(&n1, n1, ax->qn[a]) ||
            !rai_mul_i64(&n2, n2, ax->kn[a]) || rows > INT32_MAX)
            return rai_fail(RA_ERR_ARG, "relative index: sizes overflow");
    }
    int64_t entries;
    if (!rai_mul_i64(&entries, n1, n2) || entries > RA_INDEX_MAX_ENTRIES)
        return rai_fail(RA_ERR_ARG, "relative index: %lld x %lld entries is too large",
                        (long long)n1, (long long)n2);
    if (n1_out) *n1_out = n1;
    if (n2_out) *n2_out = n2;
    if (table_rows) *table_rows = rows;
    if (!idx) return RA_OK;

    /* Walk query and key tokens with per-axis odometers: the index is a sum
     * of per-axis terms, so no division per entry. */
    int qi[RA_MAX_AXES] = {0};
    for (int64_t i = 0; i < n1; i++) {
        int ki[RA_MAX_AXES] = {0};
        int32_t *row = idx + i * n2;
        for (int64_t j = 0; j < n2; j++) {
            int64_t v = 0;
            for (int a = 0; a < A; a++)
                v += (int64_t)(ax->qcoord[a][qi[a]] - ax->kcoord[a][ki[a]] +
                               ax->extent[a] - 1) * stride[a];
            row[j] = (int32_t)v;
            for (int a = A - 1; a >= 0 && ++ki[a] == ax->kn[a]; a--) ki[a] = 0;
        }
        for (int a = A - 1; a >= 0 && ++qi[a] == ax->qn[a]; a--) qi[a] = 0;
    }
    return RA_OK;
}

/* 0, 1, ..., n-1 into c (n entries). */
static int *iota(int *c, int n) {
    for (int t = 0; t < n; t++) c[t] = t;
    return c;
}

#define RA_MAX_EXTENT 4096  /* window or frame extent; keeps the stacks small */

ra_status ra_relpos_index_2d(int32_t *idx, int wh, int ww, int64_t *table_rows) {
    if (wh < 1 || ww < 1 || wh > RA_MAX_EXTENT || ww > RA_MAX_EXTENT)
        return rai_fail(RA_ERR_ARG, "window %dx%d: each side must be in 1..%d",
                        wh, ww, RA_MAX_EXTENT);
    int ch[RA_MAX_EXTENT], cw[RA_MAX_EXTENT];
    ra_relpos_axes ax = {.naxes = 2, .extent = {wh, ww}, .qn = {wh, ww}, .kn = {wh, ww},
                         .qcoord = {iota(ch, wh), iota(cw, ww)},
                         .kcoord = {ch, cw}};
    return ra_relpos_index(idx, NULL, NULL, table_rows, &ax);
}

ra_status ra_relpos_index_3d(int32_t *idx, int d1, int d2, int wh, int ww,
                             int64_t *table_rows) {
    if (d1 < 1 || d2 < 1 || d1 > RA_MAX_EXTENT || d2 > RA_MAX_EXTENT)
        return rai_fail(RA_ERR_ARG, "frames %d (query) and %d (key/value) must be in 1..%d",
                        d1, d2, RA_MAX_EXTENT);
    if (wh < 1 || ww < 1 || wh > RA_MAX_EXTENT || ww > RA_MAX_EXTENT)
        return rai_fail(RA_ERR_ARG, "window %dx%d: each side must be in 1..%d",
                        wh, ww, RA_MAX_EXTENT);
    /* RSTT: torch.arange(0, D1, (D1 + 1) // D2) must give exactly D2 frames */
    int s = (d1 + 1) / d2;
    if (s < 1)
        return rai_fail(RA_ERR_ARG, "num_frames_kv %d > num_frames_q + 1 = %d: the "
                        "key/value frame stride (D1+1)/D2 is 0", d2, d1 + 1);
    int nkv = (d1 + s - 1) / s;
    if (nkv != d2)
        return rai_fail(RA_ERR_ARG, "num_frames_q %d, num_frames_kv %d: stride %d gives "
                        "%d key/value frames, not %d", d1, d2, s, nkv, d2);
    int cd[RA_MAX_EXTENT], ckd[RA_MAX_EXTENT], ch[RA_MAX_EXTENT], cw[RA_MAX_EXTENT];
    for (int t = 0; t < d2; t++) ckd[t] = t * s;
    ra_relpos_axes ax = {.naxes = 3, .extent = {d1, wh, ww}, .qn = {d1, wh, ww},
                         .kn = {d2, wh, ww},
                         .qcoord = {iota(cd, d1), iota(ch, wh), iota(cw, ww)},
                         .kcoord = {ckd, ch, cw}};
    return ra_relpos_index(idx, NULL, NULL, table_rows, &ax);
}

ra_status ra_relpos_index_clip(int32_t *rel, int n, int k) {
    if (n < 1) return rai_fail(RA_ERR_ARG, "clip index: length %d must be >= 1", n);
    if (k < 0 || k > INT32_MAX / 2 - 1)
        return rai_fail(RA_ERR_ARG, "clip index: clip %d must be in 0..%d", k, INT32_MAX / 2 - 1);
    if ((int64_t)n * n > RA_INDEX_MAX_ENTRIES)
        return rai_fail(RA_ERR_ARG, "clip index: length %d is too large", n);
    if (!rel) return RA_OK;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            int d = j - i;
            rel[(int64_t)i * n + j] = (d < -k ? -k : d > k ? k : d) + k;
        }
    return RA_OK;
}

/* ---- resizing a bias table ----------------------------------------------
 * The Swin authors fine-tune at a new window size by resampling each head's
 * (2Wh-1) x (2Ww-1) grid of biases bicubically:
 *   F.interpolate(table.T.view(1, nH, S1h, S1w), size=(S2h, S2w), mode='bicubic')
 * i.e. PyTorch's upsample_bicubic2d with align_corners=False: source
 * position (o + 0.5) * in/out - 0.5 (not clamped), Keys' cubic with
 * A = -0.75, taps clamped to the border. */
static float cubic_weight(float x, int tap) {   /* tap -1, 0, 1, 2 around floor */
    const float A = -0.75f;
    float d = fabsf(x - (float)tap);
    if (d <= 1) return ((A + 2) * d - (A + 3)) * d * d + 1;
    if (d < 2) return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A;
    return 0;
}

ra_status ra_bias_table_resize(float *dst, const float *src, int nh, int s1h, int s1w,
                               int s2h, int s2w) {
    if (!dst || !src || nh < 1 || s1h < 1 || s1w < 1 || s2h < 1 || s2w < 1 ||
        (int64_t)s1h * s1w > INT32_MAX / nh || (int64_t)s2h * s2w > INT32_MAX / nh)
        return rai_fail(RA_ERR_ARG, "bias table resize: %dx%d -> %dx%d grid of %d heads",
                        s1h, s1w, s2h, s2w, nh);
    const float sh = (float)s1h / s2h, sw = (float)s1w / s2w;
    for (int oy = 0; oy < s2h; oy++) {
        const float ry = (oy + 0.5f) * sh - 0.5f;
        const int iy = (int)floorf(ry);
        const float ty = ry - iy;
        for (int ox = 0; ox < s2w; ox++) {
            const float rx = (ox + 0.5f) * sw - 0.5f;
            const int ix = (int)floorf(rx);
            const float tx = rx - ix;
            for (int h = 0; h < nh; h++) {
                float acc = 0;
                for (int a = -1; a <= 2; a++) {
                    int yy = iy + a < 0 ? 0 : iy + a >= s1h ? s1h - 1 : iy + a;
                    float row = 0;
                    for (int b = -1; b <= 2; b++) {
                        int xx = ix + b < 0 ? 0 : ix + b >= s1w ? s1w - 1 : ix + b;
                        row += cubic_weight(tx, b) * src[((size_t)yy * s1w + xx) * nh + h];
                    }
                    acc += cubic_weight(ty, a) * row;
                }
                dst[((size_t)oy * s2w + ox) * nh + h] = acc;
            }
        }
    }
    return RA_OK;
}

/* ---- timm's resize of a bias table ------------------------------------------
 * timm's resize_rel_pos_bias_table (BEiT's fine-tuning resize, without
 * SciPy, timm's default): the source grid's offsets are spread out along a
 * geometric progression so that they reach the target's extent, and the
 * target's integer offsets are interpolated linearly between them
 * (timm.layers.interpolate.RegularGridInterpolator), in float32. */

/* The source offsets of one axis (src of them) for a target of dst: BEiT's
 * _calc, in double, then rounded to float32 as torch.tensor does. */
static void geometric_offsets(float *out, int src, int dst) {
    const int half = src / 2;
    double left = 1.01, right = 1.5, q = 1.01;
    while (right - left > 1e-6) {
        q = (left + right) / 2.0;
        const double gp = (1.0 - pow(q, half)) / (1.0 - q);   /* 1 + q + .. + q^(half-1) */
        if (gp > (double)(dst / 2)) right = q;
        else left = q;
    }
    double cur = 1;
    for (int i = 0; i < half; i++) {
        out[half + 1 + i] = (float)cur;
        out[half - 1 - i] = (float)-cur;
        cur += pow(q, i + 1);
    }
    out[half] = 0;
}

/* Where x falls among the n sorted offsets p: the left and right
 * neighbours and the distances to them, as the interpolator computes
 * them (torch.bucketize, clamped; 1 and 1 on an exact single point). */
static void bracket(const float *p, int n, float x, int *l, int *r, float *dl, float *dr) {
    int right = 0;
    while (right < n && p[right] < x) right++;   /* the first p[i] >= x */
    if (right >= n) right = n - 1;
    const int left = right - 1 < 0 ? 0 : right - 1;
    float a = x - p[left], b = p[right] - x;
    if (a < 0) a = 0;
    if (b < 0) b = 0;
    if (a == 0 && b == 0) a = b = 1;
    *l = left, *r = right, *dl = a, *dr = b;
}

ra_status ra_bias_table_resize_timm(float *dst, const float *src, int nh, int s1h, int s1w,
                                    int s2h, int s2w) {
    if (!dst || !src || nh < 1 || s1h < 1 || s1w < 1 || s2h < 1 || s2w < 1 ||
        s1h > 4096 || s1w > 4096 || s2h > 4096 || s2w > 4096 ||
        (int64_t)s1h * s1w > INT32_MAX / nh || (int64_t)s2h * s2w > INT32_MAX / nh)
        return rai_fail(RA_ERR_ARG, "bias table resize: %dx%d -> %dx%d grid of %d heads",
                        s1h, s1w, s2h, s2w, nh);
    if (s1h == s2h && s1w == s2w) {   /* timm leaves a table of the same size alone */
        memcpy(dst, src, sizeof(float) * (size_t)s1h * s1w * nh);
        return RA_OK;
    }
    float ph[4096], pw[4096];
    geometric_offsets(ph, s1h, s2h);
    geometric_offsets(pw, s1w, s2w);
    for (int oy = 0; oy < s2h; oy++) {
        int y0, y1, x0, x1;
        float dy0, dy1, dx0, dx1;
        bracket(ph, s1h, (float)(oy - s2h / 2), &y0, &y1, &dy0, &dy1);
        for (int ox = 0; ox < s2w; ox++) {
            bracket(pw, s1w, (float)(ox - s2w / 2), &x0, &x1, &dx0, &dx1);
            /* the corners in the interpolator's order: (left, left), (left,
             * right), (right, left), (right, right), each weighted by the
             * distances on the other side */
            const float w00 = dy1 * dx1, w01 = dy1 * dx0, w10 = dy0 * dx1, w11 = dy0 * dx0;
            const float den = (dy0 + dy1) * (dx0 + dx1);
            for (int h = 0; h < nh; h++) {
                float num = src[((size_t)y0 * s1w + x0) * nh + h] * w00;
                num += src[((size_t)y0 * s1w + x1) * nh + h] * w01;
                num += src[((size_t)y1 * s1w + x0) * nh + h] * w10;
                num += src[((size_t)y1 * s1w + x1) * nh + h] * w11;
                dst[((size_t)oy * s2w + ox) * nh + h] = num / den;
            }
        }
    }
    return RA_OK;
}
