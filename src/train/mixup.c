/* mixup.c - timm's Mixup / CutMix in batch mode (relattn.h section 16):
 * one lambda per batch, image i mixed with image B-1-i, soft targets with
 * label smoothing for ra_cross_entropy_soft_forward.
 *
 * The arithmetic is timm's (timm/data/mixup.py) in float32 where timm's
 * tensors are float32: lam a double, rounded to a float where it meets a
 * tensor, (1 - lam) computed in double and then rounded, each product and
 * sum rounded (no contraction, -ffp-contract=off). The box arithmetic is
 * rand_bbox's, in integers, and the corrected lam cutmix_bbox_and_lam's.
 * Only the draws differ (NumPy's generator there, ra_rng here). */
#include "base/internal.h"

#include <math.h>

/* ---- checks ------------------------------------------------------------- */

static ra_status mix_check(const char *fn, const float *x, const float *targets,
                           const int32_t *labels, int b, int c, int h, int w, int k,
                           float smoothing) {
    if (!x || !targets || !labels) return rai_fail(RA_ERR_ARG, "%s: a NULL argument", fn);
    if (b < 1 || c < 1 || h < 1 || w < 1 || k < 1)
        return rai_fail(RA_ERR_ARG, "%s: batch %d, channels %d, %d x %d, classes %d", fn, b, c,
                        h, w, k);
    if (b % 2)
        return rai_fail(RA_ERR_ARG, "%s: batch %d is odd (mixup pairs image i with image "
                        "B-1-i; timm asks for an even batch)", fn, b);
    int64_t n;
    if (!rai_mul_i64(&n, (int64_t)b * c, (int64_t)h * w) || !rai_mul_i64(&n, n, sizeof(float)) ||
        !rai_mul_i64(&n, (int64_t)b * k, sizeof(float)))
        return rai_fail(RA_ERR_ARG, "%s: batch %d x %d x %d x %d is too large", fn, b, c, h, w);
    if (!(smoothing >= 0.0f && smoothing <= 1.0f))
        return rai_fail(RA_ERR_ARG, "%s: label smoothing %g not in [0, 1]", fn, smoothing);
    for (int i = 0; i < b; i++)
        if (labels[i] < 0 || labels[i] >= k)
            return rai_fail(RA_ERR_ARG, "%s: label %d of sample %d not in [0, %d)", fn,
                            (int)labels[i], i, k);
    return RA_OK;
}

static int alpha_ok(float a) { return a == 0.0f || (a >= 1e-3f && a <= 1e4f); }
static int unit_ok(float p) { return p >= 0.0f && p <= 1.0f; }

ra_status rai_mixup_check(const ra_mixup *mx, const char *fn) {
    if (!alpha_ok(mx->mixup_alpha) || !alpha_ok(mx->cutmix_alpha))
        return rai_fail(RA_ERR_ARG, "%s: mixup_alpha %g, cutmix_alpha %g: each 0 (off) or in "
                        "[1e-3, 1e4]", fn, mx->mixup_alpha, mx->cutmix_alpha);
    if (mx->mixup_alpha == 0.0f && mx->cutmix_alpha == 0.0f)
        return rai_fail(RA_ERR_ARG, "%s: mixup_alpha and cutmix_alpha both 0 (nothing to mix)",
                        fn);
    if (!unit_ok(mx->prob) || !unit_ok(mx->switch_prob))
        return rai_fail(RA_ERR_ARG, "%s: prob %g, switch_prob %g: each in [0, 1]", fn, mx->prob,
                        mx->switch_prob);
    return RA_OK;
}

/* ---- the mixing --------------------------------------------------------- */

/* Mix x and write the targets with lam (a double, as timm's); checked. */
static void mix(float *x,                 /* (B, C, H, W) in place */
                float *targets,           /* (B, K) */
                const int32_t *labels,    /* (B) */
                int b, int c, int h, int w, int k, float smoothing, double lam,
                int cutmix, int y0, int y1, int x0, int x1) {
    const float lf = (float)lam, mf = (float)(1.0 - lam);
    /* mixup_target: one_hot(off, on) * lam + one_hot(flip) * (1 - lam) */
    const double offd = (double)smoothing / k;
    const float off = (float)offd, on = (float)(1.0 - (double)smoothing + offd);
    for (int i = 0; i < b; i++) {
        const int32_t li = labels[i], lj = labels[b - 1 - i];
        float *t = targets + (int64_t)i * k;
        for (int j = 0; j < k; j++) {
            const float a = (j == li ? on : off) * lf, e = (j == lj ? on : off) * mf;
            t[j] = a + e;
        }
    }
    const int64_t plane = (int64_t)h * w, img = plane * c;
    if (cutmix) {   /* x[:, :, y0:y1, x0:x1] = x.flip(0)[:, :, y0:y1, x0:x1] */
        for (int i = 0; i < b / 2; i++)
            for (int ch = 0; ch < c; ch++) {
                float *p = x + i * img + ch * plane, *q = x + (int64_t)(b - 1 - i) * img + ch * plane;
                for (int y = y0; y < y1; y++)
                    for (int xx = x0; xx < x1; xx++) {
                        const int64_t o = (int64_t)y * w + xx;
                        const float s = p[o];
                        p[o] = q[o];
                        q[o] = s;
                    }
            }
    } else if (lam != 1.0) {   /* x = x * lam + flip(x) * (1 - lam) */
        for (int i = 0; i < b / 2; i++) {
            float *p = x + i * img, *q = x + (int64_t)(b - 1 - i) * img;
            for (int64_t o = 0; o < img; o++) {
                const float u = p[o], v = q[o];
                const float fu = v * mf, fv = u * mf;   /* the flipped batch's share */
                p[o] = u * lf + fu;
                q[o] = v * lf + fv;
            }
        }
    }
}

ra_status ra_mixup_with(float *x, float *targets, const int32_t *labels, int b, int c, int h,
                        int w, int k, float smoothing, float lam, int cutmix, int y0, int y1,
                        int x0, int x1) {
    ra_status st = mix_check("ra_mixup_with", x, targets, labels, b, c, h, w, k, smoothing);
    if (st != RA_OK) return st;
    if (!(lam >= 0.0f && lam <= 1.0f))
        return rai_fail(RA_ERR_ARG, "ra_mixup_with: lam %g not in [0, 1]", lam);
    if (cutmix && !(0 <= y0 && y0 <= y1 && y1 <= h && 0 <= x0 && x0 <= x1 && x1 <= w))
        return rai_fail(RA_ERR_ARG, "ra_mixup_with: box rows [%d, %d), columns [%d, %d) not "
                        "inside %d x %d", y0, y1, x0, x1, h, w);
    mix(x, targets, labels, b, c, h, w, k, smoothing, lam, cutmix, y0, y1, x0, x1);
    return RA_OK;
}

/* ---- the draws ---------------------------------------------------------- */

/* log of a Gamma(a, 1) draw, a >= 1e-3: Marsaglia and Tsang (2000), "A
 * simple method for generating gamma variables", with the boost
 * Gamma(a) = Gamma(a + 1) U^(1/a) for a < 1 (in logarithms: U^(1/a) of a
 * small a underflows). The draws are those relattn.h lists. */
static double log_gamma_draw(ra_rng *rng, double a) {
    const double aa = a < 1.0 ? a + 1.0 : a;
    const double d = aa - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    double lg;
    for (;;) {
        double z, v;
        do {
            z = ra_rng_normal(rng);
            v = 1.0 + c * z;
        } while (v <= 0.0);
        v = v * v * v;
        const double u = ra_rng_uniform(rng);
        if (u < 1.0 - 0.0331 * (z * z) * (z * z) ||
            log(u) < 0.5 * z * z + d * (1.0 - v + log(v))) {
            lg = log(d) + log(v);
            break;
        }
    }
    if (a < 1.0) lg += log(1.0 - ra_rng_uniform(rng)) / a;   /* U in (0, 1] */
    return lg;
}

/* Beta(a, a) = X / (X + Y), X then Y ~ Gamma(a): 1 / (1 + Y / X) from the
 * logarithms, in [0, 1]. */
static double beta_draw(ra_rng *rng, double a) {
    const double lx = log_gamma_draw(rng, a), ly = log_gamma_draw(rng, a);
    const double r = 1.0 / (1.0 + exp(ly - lx));
    return r == r ? r : 0.5;   /* both logarithms -inf: cannot happen for a >= 1e-3 */
}

/* np.clip(v, 0, n) */
static int64_t clamp64(int64_t v, int64_t n) { return v < 0 ? 0 : v > n ? n : v; }

ra_status ra_mixup_apply(float *x, float *targets, const int32_t *labels, int b, int c, int h,
                         int w, int k, const ra_mixup *mx, ra_rng *rng, float *lam_out) {
    static const char fn[] = "ra_mixup_apply";
    if (!mx || !rng) return rai_fail(RA_ERR_ARG, "%s: a NULL argument", fn);
    ra_status st = mix_check(fn, x, targets, labels, b, c, h, w, k, mx->smoothing);
    if (st == RA_OK) st = rai_mixup_check(mx, fn);
    if (st != RA_OK) return st;

    /* Mixup._params_per_batch */
    double lam = 1.0;
    int cutmix = 0;
    if (ra_rng_uniform(rng) < mx->prob) {
        if (mx->mixup_alpha > 0.0f && mx->cutmix_alpha > 0.0f)
            cutmix = ra_rng_uniform(rng) < mx->switch_prob;
        else
            cutmix = mx->cutmix_alpha > 0.0f;
        lam = beta_draw(rng, cutmix ? mx->cutmix_alpha : mx->mixup_alpha);
    }
    /* Mixup._mix_batch: lam == 1 mixes nothing (and draws no box) */
    int y0 = 0, y1 = 0, x0 = 0, x1 = 0;
    if (lam == 1.0) {
        cutmix = 0;
    } else if (cutmix) {   /* cutmix_bbox_and_lam: rand_bbox, then the corrected lam */
        const double ratio = sqrt(1.0 - lam);
        const int64_t cut_h = (int64_t)((double)h * ratio), cut_w = (int64_t)((double)w * ratio);
        const int64_t cy = (int64_t)ra_rng_below(rng, (uint64_t)h);
        const int64_t cx = (int64_t)ra_rng_below(rng, (uint64_t)w);
        y0 = (int)clamp64(cy - cut_h / 2, h);
        y1 = (int)clamp64(cy + cut_h / 2, h);
        x0 = (int)clamp64(cx - cut_w / 2, w);
        x1 = (int)clamp64(cx + cut_w / 2, w);
        lam = 1.0 - (double)((int64_t)(y1 - y0) * (x1 - x0)) / (double)((int64_t)h * w);
    }
    mix(x, targets, labels, b, c, h, w, k, mx->smoothing, lam, cutmix, y0, y1, x0, x1);
    if (lam_out) *lam_out = (float)lam;
    return RA_OK;
}
