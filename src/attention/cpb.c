/* cpb.c - SwinV2 attention around the core: the continuous position bias
 * (CPB) and the scaled cosine attention's normalisation, forward and
 * backward (see cpb.h). The layer (layer.c) calls these around its
 * projections and the core; the check of a saved coordinate table is the
 * loaders'. */
#include "attention/cpb.h"
#include "nn/precision.h"

#include <math.h>
#include <string.h>

#define NORM_EPS 1e-12f            /* F.normalize's default */
#define LOGIT_MAX 4.605170185988091 /* log(1 / 0.01) = log(100) */

ra_status rai_swinv2_coords(float *coords, int wh, int ww, const int pretrained[2]) {
    const int given = pretrained && pretrained[0] > 0 && pretrained[1] > 0;
    const int dh = given ? pretrained[0] - 1 : wh - 1, dw = given ? pretrained[1] - 1 : ww - 1;
    if (wh < 1 || ww < 1 || dh < 1 || dw < 1)
        return rai_fail(RA_ERR_ARG, "swinv2: window %dx%d%s: the position coordinates are "
                        "divided by %d and %d (window - 1); they must be >= 1", wh, ww,
                        given ? " with its pretrained window" : "", dh, dw);
    int64_t r = 0;
    for (int i = -(wh - 1); i <= wh - 1; i++)
        for (int j = -(ww - 1); j <= ww - 1; j++, r++) {
            /* float32 steps, as PyTorch computes the buffer */
            const float u[2] = {(float)i / (float)dh * 8.0f, (float)j / (float)dw * 8.0f};
            for (int a = 0; a < 2; a++) {
                const float s = u[a] > 0 ? 1.0f : u[a] < 0 ? -1.0f : 0.0f;
                coords[2 * r + a] = s * log2f(fabsf(u[a]) + 1.0f) / 3.0f;
            }
        }
    return RA_OK;
}

void rai_cpb_forward(float *table, float *hid, const float *coords, int64_t t, int nh,
                     const float *w1, const float *b1, const float *w2) {
    const ra_precision was = rai_precision_set(RA_PRECISION_FP32);   /* a position table */
    ra_linear_forward(hid, coords, w1, b1, t, RA_CPB_HIDDEN, 2);
    for (int64_t e = 0; e < t * RA_CPB_HIDDEN; e++) hid[e] = hid[e] > 0 ? hid[e] : 0.0f;
    ra_linear_forward(table, hid, w2, NULL, t, nh, RA_CPB_HIDDEN);
    rai_precision_set(was);
    for (int64_t e = 0; e < t * nh; e++) table[e] = 16.0f / (1.0f + expf(-table[e]));
}

void rai_cpb_backward(float *dw1, float *db1, float *dw2, float *dtable, const float *table,
                      float *hid, const float *coords, int64_t t, int nh, const float *w1,
                      const float *b1, const float *w2) {
    float *dhid = hid + t * RA_CPB_HIDDEN;
    const ra_precision was = rai_precision_set(RA_PRECISION_FP32);   /* as the forward */
    /* d(16 sigmoid(z)) = 16 s (1 - s) dz with s = table / 16 */
    for (int64_t e = 0; e < t * nh; e++) dtable[e] *= table[e] * (1.0f - table[e] / 16.0f);
    ra_linear_forward(hid, coords, w1, b1, t, RA_CPB_HIDDEN, 2);
    for (int64_t e = 0; e < t * RA_CPB_HIDDEN; e++) hid[e] = hid[e] > 0 ? hid[e] : 0.0f;
    memset(dhid, 0, (size_t)(t * RA_CPB_HIDDEN) * sizeof *dhid);
    ra_linear_backward(dhid, dw2, NULL, dtable, hid, w2, t, nh, RA_CPB_HIDDEN);
    for (int64_t e = 0; e < t * RA_CPB_HIDDEN; e++)
        if (!(hid[e] > 0)) dhid[e] = 0.0f;
    ra_linear_backward(NULL, dw1, db1, dhid, coords, w1, t, RA_CPB_HIDDEN, 2);
    rai_precision_set(was);
}

static float head_scale(const float *logit_scale, int h) {
    const double ls = logit_scale[h];
    return (float)exp(ls < LOGIT_MAX ? ls : LOGIT_MAX);
}

/* a . b of n floats in double, in four running sums (one chain of
 * dependent adds made these passes a fifth of a SwinV2 layer's time) */
static double dot_d(const float *a, const float *b, int n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int d = 0;
    for (; d + 4 <= n; d += 4) {
        s0 += (double)a[d] * b[d];
        s1 += (double)a[d + 1] * b[d + 1];
        s2 += (double)a[d + 2] * b[d + 2];
        s3 += (double)a[d + 3] * b[d + 3];
    }
    for (; d < n; d++) s0 += (double)a[d] * b[d];
    return (s0 + s1) + (s2 + s3);
}

/* |v| of n floats, accumulated in double */
static float norm_of(const float *v, int n) { return (float)sqrt(dot_d(v, v, n)); }

void rai_swinv2_qk_forward(float *qkv, int64_t rows, int c, int nh, const float *logit_scale,
                           const float *q_bias, const float *v_bias, float *yq, float *norms) {
    const int hd = c / nh;
#pragma omp parallel for schedule(static) num_threads(ra_threads_get()) if (rows * c > 65536)
    for (int64_t r = 0; r < rows; r++) {
        float *q = qkv + r * 3 * c, *k = q + c, *v = q + 2 * c, *y = yq + r * c;
        float *nr = norms + r * 2 * nh;
        for (int e = 0; q_bias && e < c; e++) q[e] += q_bias[e];
        for (int e = 0; v_bias && e < c; e++) v[e] += v_bias[e];
        for (int h = 0; h < nh; h++) {
            float *qh = q + h * hd, *kh = k + h * hd, *yh = y + h * hd;
            const float s = head_scale(logit_scale, h);
            const float nq = norm_of(qh, hd), nk = norm_of(kh, hd);
            /* reciprocals: a division per element costs as much as the
             * rest of the pass (the results differ from x / |x| in the last
             * bit at most) */
            const float iq = 1.0f / (nq > NORM_EPS ? nq : NORM_EPS);
            const float ik = 1.0f / (nk > NORM_EPS ? nk : NORM_EPS);
            nr[h] = nq, nr[nh + h] = nk;
            for (int d = 0; d < hd; d++) {
                yh[d] = qh[d] * iq;
                qh[d] = s * yh[d];
                kh[d] *= ik;
            }
        }
    }
}

/* dx of y = x / max(|x|, eps) from g = dL/dy, in place on g. */
static void normalize_backward(float *g, const float *y, float n, int hd) {
    if (!(n > NORM_EPS)) {   /* the clamp holds: y = x / eps */
        for (int d = 0; d < hd; d++) g[d] *= 1.0f / NORM_EPS;
        return;
    }
    const float in = 1.0f / n, fdot = (float)dot_d(y, g, hd);
    for (int d = 0; d < hd; d++) g[d] = (g[d] - y[d] * fdot) * in;
}

void rai_swinv2_qk_backward(float *dqkv, const float *qkv, const float *yq, const float *norms,
                            int64_t rows, int c, int nh, const float *logit_scale,
                            float *dlogit_scale, float *dq_bias, float *dv_bias) {
    const int hd = c / nh;
    /* d(s yq)/d logit_scale = s yq, from the core's dq (0 where the clamp
     * holds, as torch.clamp's gradient); summed in row order */
    for (int h0 = 0; dlogit_scale && h0 < nh; h0 += 64) {   /* 64 heads per pass over rows */
        const int hn = nh - h0 < 64 ? nh - h0 : 64;
        double dot[64] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const float *dq = dqkv + r * 3 * c + h0 * hd, *y = yq + r * c + h0 * hd;
            for (int j = 0; j < hn; j++) dot[j] += dot_d(dq + j * hd, y + j * hd, hd);
        }
        for (int j = 0; j < hn; j++)
            if (logit_scale[h0 + j] <= (float)LOGIT_MAX)
                dlogit_scale[h0 + j] += (float)(dot[j] * head_scale(logit_scale, h0 + j));
    }
    /* each row back through the scale and both normalisations */
#pragma omp parallel for schedule(static) num_threads(ra_threads_get()) if (rows * c > 65536)
    for (int64_t r = 0; r < rows; r++) {
        float *dq = dqkv + r * 3 * c, *dk = dq + c;
        const float *k = qkv + r * 3 * c + c, *y = yq + r * c, *nr = norms + r * 2 * nh;
        for (int h = 0; h < nh; h++) {
            const float s = head_scale(logit_scale, h);
            for (int d = 0; d < hd; d++) dq[h * hd + d] *= s;
            normalize_backward(dq + h * hd, y + h * hd, nr[h], hd);
            normalize_backward(dk + h * hd, k + h * hd, nr[nh + h], hd);
        }
    }
    /* the biases' gradients, in row order: deterministic for any thread count */
    for (int64_t r = 0; (dq_bias || dv_bias) && r < rows; r++) {
        const float *dq = dqkv + r * 3 * c;
        for (int e = 0; dq_bias && e < c; e++) dq_bias[e] += dq[e];
        for (int e = 0; dv_bias && e < c; e++) dv_bias[e] += dq[2 * c + e];
    }
}

/* A saved relative_coords_table must be the computed one (to float
 * rounding: log2 may differ in the last bit between libraries). */
ra_status rai_swinv2_check_coords(const ra_st_file *f, const ra_st_tensor *t,
                                  const ra_attn_config *c) {
    const int64_t th = 2 * (int64_t)c->window[0] - 1, tw = 2 * (int64_t)c->window[1] - 1;
    if (!(t->ndim == 4 && t->shape[0] == 1 && t->shape[1] == th && t->shape[2] == tw &&
          t->shape[3] == 2))
        return rai_fail(RA_ERR_SHAPE, "tensor '%.80s' must have shape (1, %lld, %lld, 2) for "
                        "window %dx%d", t->name, (long long)th, (long long)tw, c->window[0],
                        c->window[1]);
    if (!(t->dtype == RA_DTYPE_F32 || t->dtype == RA_DTYPE_F16 || t->dtype == RA_DTYPE_BF16 ||
          t->dtype == RA_DTYPE_F64))
        return rai_fail(RA_ERR_SHAPE, "tensor '%.80s' must be a float tensor", t->name);
    float *want = rai_alloc((size_t)t->numel, sizeof *want);
    float *got = rai_alloc((size_t)t->numel, sizeof *got);
    ra_status st = want && got ? RA_OK : rai_fail(RA_ERR_NOMEM, "swinv2: out of memory");
    if (!st) st = rai_swinv2_coords(want, c->window[0], c->window[1], c->pretrained_window);
    if (!st) st = ra_st_read_f32(got, f, t);
    for (int64_t e = 0; !st && e < t->numel; e++)
        if (!(fabsf(got[e] - want[e]) <= 1e-5f))
            st = rai_fail(RA_ERR_FORMAT, "tensor '%.80s' differs from the computed coordinates "
                          "at %lld: %g, expected %g", t->name, (long long)e, got[e], want[e]);
    rai_free(want);
    rai_free(got);
    return st;
}
