/* test_mixup.c - the soft-target cross-entropy and timm's Mixup / CutMix
 * (relattn.h sections 9 and 16) against direct computations and their
 * distributions (tests/test_mixup.py compares both with PyTorch).
 *
 *   test_mixup
 *
 * 1. ra_cross_entropy_soft_forward against a double computation written
 *    here; the backward against central finite differences of it, and
 *    accumulating; both equal to ra_cross_entropy_forward / _backward for
 *    the smoothed one-hot targets; argument errors;
 * 2. ra_mixup_with (mixup, cutmix, lam = 1) against a direct computation;
 *    argument errors (nothing written);
 * 3. ra_mixup_apply's draws over many batches: lam's mean and variance
 *    against Beta(a, a) (mean 1/2, var 1 / (4 (2a + 1))) within 5 standard
 *    errors, for alphas on both sides of 1 (a uniform lam fails these); the
 *    share of cutmix against switch_prob and of mixed batches against
 *    prob; each cutmix box a rectangle whose area is (1 - lam) H W, boxes
 *    clipped at every edge; targets rows summing to 1; the same seed giving
 *    the same batch; argument errors (nothing drawn).
 */
#include "relattn.h"
#include "check.h"
#include "grad_check.h"

#include <float.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* 1. The soft-target cross-entropy                                        */
/* ---------------------------------------------------------------------- */

/* mean_b sum_k -t[b, k] * log_softmax(l[b])[k], in double */
static double soft_ce(const double *l, const float *t, int b, int k) {
    double total = 0;
    for (int i = 0; i < b; i++) {
        const double *r = l + (int64_t)i * k;
        double mx = r[0], se = 0;
        for (int j = 1; j < k; j++) mx = r[j] > mx ? r[j] : mx;
        for (int j = 0; j < k; j++) se += exp(r[j] - mx);
        for (int j = 0; j < k; j++) total += -(double)t[(int64_t)i * k + j] * (r[j] - mx - log(se));
    }
    return total / b;
}

static void test_soft_ce(void) {
    enum { B = 5, K = 7, N = B * K };
    ra_rng rng;
    ra_rng_seed(&rng, 11);
    float l[N], t[N], p[N], d[N], r[N], a[N];
    double ld[N], pd[N];
    ra_rng_fill_normal(&rng, l, N, 0.0f, 2.0f);
    ra_rng_fill_uniform(&rng, t, N, 0.0f, 0.5f);   /* rows need not sum to 1 */
    t[3] = 0.0f;
    for (int i = 0; i < N; i++) ld[i] = l[i];
    for (int i = 0; i < B; i++) {   /* softmax in double */
        double s = 0;
        for (int j = 0; j < K; j++) s += exp(ld[i * K + j]);
        for (int j = 0; j < K; j++) pd[i * K + j] = exp(ld[i * K + j]) / s;
    }

    float loss = -1;
    CHECK(ra_cross_entropy_soft_forward(&loss, p, l, t, B, K) == RA_OK, "%s", ra_last_error());
    const double ref = soft_ce(ld, t, B, K);
    double pe = 0;
    for (int i = 0; i < N; i++) pe = fmax(pe, fabs(p[i] - pd[i]));
    printf("soft cross-entropy: loss %.7g, double %.7g (rel %.2g), probs max diff %.2g\n", loss,
           ref, fabs(loss - ref) / ref, pe);
    CHECK(fabs(loss - ref) <= 1e-6 * ref, "loss %.9g vs %.9g", loss, ref);
    CHECK(pe <= 1e-7, "probs %.3g", pe);

    /* backward against central differences of the double loss (dloss 1) */
    memset(d, 0, sizeof d);
    CHECK(ra_cross_entropy_soft_backward(d, 1.0f, p, t, B, K) == RA_OK, "%s", ra_last_error());
    double fd[N], big = 0, worst = 0;
    const double hstep = 1e-5;
    for (int i = 0; i < N; i++) {
        const double keep = ld[i];
        ld[i] = keep + hstep;
        const double up = soft_ce(ld, t, B, K);
        ld[i] = keep - hstep;
        const double dn = soft_ce(ld, t, B, K);
        ld[i] = keep;
        fd[i] = (up - dn) / (2 * hstep);
        big = fmax(big, fabs(fd[i]));
    }
    for (int i = 0; i < N; i++)
        worst = fmax(worst, fabs(d[i] - fd[i]) / (1e-4 * fabs(fd[i]) + 1e-5 * big + 1e-12));
    printf("soft cross-entropy dlogits: finite differences, error %.2g x tolerance\n", worst);
    CHECK(worst <= 1.0, "finite differences %.3g x tolerance", worst);

    /* accumulates: R + 2 G (dloss 0.7) */
    float g[N];
    memset(g, 0, sizeof g);
    ra_cross_entropy_soft_backward(g, 0.7f, p, t, B, K);
    ra_rng_fill_uniform(&rng, r, N, -1.0f, 1.0f);
    memcpy(a, r, sizeof a);
    ra_cross_entropy_soft_backward(a, 0.7f, p, t, B, K);
    ra_cross_entropy_soft_backward(a, 0.7f, p, t, B, K);
    double acc = 0;
    for (int i = 0; i < N; i++) acc = fmax(acc, fabs(a[i] - (r[i] + 2.0 * g[i])));
    CHECK(acc <= 1e-6, "soft cross-entropy does not accumulate: %.3g", acc);

    /* the smoothed one-hot targets: the hard-label cross-entropy */
    const float eps = 0.1f;
    int32_t lab[B] = {0, 6, 3, 3, 1};
    float ts[N], p2[N], d2[N], loss2 = -1;
    for (int i = 0; i < B; i++)
        for (int j = 0; j < K; j++)
            ts[i * K + j] = j == lab[i] ? 1.0f - eps + eps / K : eps / K;
    CHECK(ra_cross_entropy_soft_forward(&loss, p, l, ts, B, K) == RA_OK, "%s", ra_last_error());
    CHECK(ra_cross_entropy_forward(&loss2, p2, l, lab, B, K, eps) == RA_OK, "%s", ra_last_error());
    memset(d, 0, sizeof d);
    memset(d2, 0, sizeof d2);
    ra_cross_entropy_soft_backward(d, 1.3f, p, ts, B, K);
    ra_cross_entropy_backward(d2, 1.3f, p2, lab, B, K, eps);
    const double ge = rel_err(d, d2, N);
    printf("soft vs label-smoothed cross-entropy: loss %.3g relative, grad %.3g\n",
           fabs(loss - loss2) / loss2, ge);
    CHECK(fabs(loss - loss2) <= 1e-6 * loss2, "loss %.9g vs %.9g", loss, loss2);
    CHECK(rel_err(p, p2, N) == 0.0, "probs differ");
    CHECK(ge <= 1e-6, "grad %.3g", ge);

    /* argument errors: RA_ERR_ARG, nothing written */
    const float keep = loss;
    CHECK(ra_cross_entropy_soft_forward(&loss, p, l, t, 0, K) == RA_ERR_ARG, "batch 0");
    CHECK(ra_cross_entropy_soft_forward(&loss, p, l, t, B, 0) == RA_ERR_ARG, "classes 0");
    CHECK(ra_cross_entropy_soft_forward(NULL, p, l, t, B, K) == RA_ERR_ARG, "NULL loss");
    CHECK(ra_cross_entropy_soft_forward(&loss, NULL, l, t, B, K) == RA_ERR_ARG, "NULL probs");
    CHECK(ra_cross_entropy_soft_forward(&loss, p, NULL, t, B, K) == RA_ERR_ARG, "NULL logits");
    CHECK(ra_cross_entropy_soft_forward(&loss, p, l, NULL, B, K) == RA_ERR_ARG, "NULL targets");
    const float bad[3] = {-1e-30f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        const float save = t[9];
        t[9] = bad[i];
        memcpy(a, p, sizeof a);
        CHECK(ra_cross_entropy_soft_forward(&loss, p, l, t, B, K) == RA_ERR_ARG, "target %g",
              bad[i]);
        CHECK(strstr(ra_last_error(), "target") != NULL, "reason: %s", ra_last_error());
        CHECK(memcmp(a, p, sizeof a) == 0, "probs written on error");
        memcpy(a, d, sizeof a);
        CHECK(ra_cross_entropy_soft_backward(d, 1.0f, p, t, B, K) == RA_ERR_ARG, "back %g", bad[i]);
        CHECK(memcmp(a, d, sizeof a) == 0, "dlogits written on error");
        t[9] = save;
    }
    CHECK(loss == keep, "loss written on error");
    CHECK(ra_cross_entropy_soft_backward(NULL, 1.0f, p, t, B, K) == RA_ERR_ARG, "NULL dlogits");
    CHECK(ra_cross_entropy_soft_backward(d, 1.0f, NULL, t, B, K) == RA_ERR_ARG, "NULL probs");
    CHECK(ra_cross_entropy_soft_backward(d, 1.0f, p, t, B, 0) == RA_ERR_ARG, "classes 0");
}

/* ---------------------------------------------------------------------- */
/* 2. ra_mixup_with                                                        */
/* ---------------------------------------------------------------------- */

/* The smoothed one-hot value of class j for label l. */
static float onehot_s(int j, int l, int k, float smoothing) {
    const double off = (double)smoothing / k;
    return j == l ? (float)(1.0 - smoothing + off) : (float)off;
}

static void test_mixup_with(void) {
    enum { B = 4, C = 3, H = 5, W = 7, K = 6, N = B * C * H * W };
    const int64_t img = (int64_t)C * H * W;
    ra_rng rng;
    ra_rng_seed(&rng, 5);
    float *x0 = xmalloc(sizeof(float) * N), *x = xmalloc(sizeof(float) * N);
    float t[B * K], keep[B * K];
    ra_rng_fill_normal(&rng, x0, N, 0.0f, 1.0f);
    const int32_t lab[B] = {2, 5, 0, 2};
    const float sm = 0.1f, lam = 0.3125f;

    /* mixup: x = x * lam + flip(x) * (1 - lam), float32 */
    memcpy(x, x0, sizeof(float) * N);
    CHECK(ra_mixup_with(x, t, lab, B, C, H, W, K, sm, lam, 0, 0, 0, 0, 0) == RA_OK, "%s",
          ra_last_error());
    double ex = 0, et = 0, rs = 0;
    for (int i = 0; i < B; i++) {
        for (int64_t o = 0; o < img; o++) {
            const float want = x0[i * img + o] * lam + x0[(B - 1 - i) * img + o] * (1.0f - lam);
            ex = fmax(ex, fabs(x[i * img + o] - want));
        }
        double s = 0;
        for (int j = 0; j < K; j++) {
            const double want = lam * (double)onehot_s(j, lab[i], K, sm) +
                                (1.0 - lam) * (double)onehot_s(j, lab[B - 1 - i], K, sm);
            et = fmax(et, fabs(t[i * K + j] - want));
            s += t[i * K + j];
        }
        rs = fmax(rs, fabs(s - 1.0));
    }
    printf("ra_mixup_with mixup: x max diff %.2g, targets %.2g, |row sum - 1| %.2g\n", ex, et, rs);
    CHECK(ex == 0.0, "mixup x differs by %.3g", ex);
    CHECK(et <= 1e-7, "mixup targets differ by %.3g", et);
    CHECK(rs <= 1e-6, "targets rows sum to 1 +- %.3g", rs);

    /* cutmix: rows [1, 4), columns [0, 7) from the reversed batch */
    const int y0 = 1, y1 = 4, xa = 0, xb = 7;
    const float lamc = (float)(1.0 - (double)(y1 - y0) * (xb - xa) / (H * W));
    memcpy(x, x0, sizeof(float) * N);
    CHECK(ra_mixup_with(x, t, lab, B, C, H, W, K, sm, lamc, 1, y0, y1, xa, xb) == RA_OK, "%s",
          ra_last_error());
    int wrong = 0;
    for (int i = 0; i < B; i++)
        for (int ch = 0; ch < C; ch++)
            for (int y = 0; y < H; y++)
                for (int xx = 0; xx < W; xx++) {
                    const int64_t o = ((int64_t)ch * H + y) * W + xx;
                    const int in = y >= y0 && y < y1 && xx >= xa && xx < xb;
                    wrong += x[i * img + o] != x0[(in ? B - 1 - i : i) * img + o];
                }
    CHECK(wrong == 0, "cutmix: %d pixels wrong", wrong);
    CHECK(t[1 * K + 0] > t[1 * K + 5] && t[1 * K + 5] > t[1 * K + 1] &&   /* lam 0.4 */
          fabs(t[1 * K + 5] - (lamc * onehot_s(5, 5, K, sm) + (1 - lamc) * onehot_s(5, 0, K, sm)))
          <= 1e-7, "cutmix targets");

    /* lam = 1 mixes nothing, even a NaN or an infinity (timm returns early) */
    memcpy(x, x0, sizeof(float) * N);
    x[3] = NAN, x[N - 4] = INFINITY;
    memcpy(x0, x, sizeof(float) * N);
    CHECK(ra_mixup_with(x, t, lab, B, C, H, W, K, sm, 1.0f, 0, 0, 0, 0, 0) == RA_OK, "%s",
          ra_last_error());
    CHECK(memcmp(x, x0, sizeof(float) * N) == 0, "lam 1 changed x");
    int tw = 0;
    for (int i = 0; i < B; i++)
        for (int j = 0; j < K; j++) tw += t[i * K + j] != onehot_s(j, lab[i], K, sm);
    CHECK(tw == 0, "lam 1: %d targets not the smoothed one-hot", tw);

    /* argument errors: RA_ERR_ARG, nothing written */
    memcpy(keep, t, sizeof keep);
    int32_t bl[B] = {2, 5, 6, 2};
    struct { const char *what; ra_status st; } cases[] = {
        {"odd batch", ra_mixup_with(x, t, lab, 3, C, H, W, K, sm, lam, 0, 0, 0, 0, 0)},
        {"batch 0", ra_mixup_with(x, t, lab, 0, C, H, W, K, sm, lam, 0, 0, 0, 0, 0)},
        {"channels 0", ra_mixup_with(x, t, lab, B, 0, H, W, K, sm, lam, 0, 0, 0, 0, 0)},
        {"width 0", ra_mixup_with(x, t, lab, B, C, H, 0, K, sm, lam, 0, 0, 0, 0, 0)},
        {"label K", ra_mixup_with(x, t, bl, B, C, H, W, K, sm, lam, 0, 0, 0, 0, 0)},
        {"lam 1.5", ra_mixup_with(x, t, lab, B, C, H, W, K, sm, 1.5f, 0, 0, 0, 0, 0)},
        {"lam NaN", ra_mixup_with(x, t, lab, B, C, H, W, K, sm, NAN, 0, 0, 0, 0, 0)},
        {"smoothing -0.1", ra_mixup_with(x, t, lab, B, C, H, W, K, -0.1f, lam, 0, 0, 0, 0, 0)},
        {"box y1 > H", ra_mixup_with(x, t, lab, B, C, H, W, K, sm, lam, 1, 0, H + 1, 0, 1)},
        {"box x0 > x1", ra_mixup_with(x, t, lab, B, C, H, W, K, sm, lam, 1, 0, 1, 3, 2)},
        {"box y0 < 0", ra_mixup_with(x, t, lab, B, C, H, W, K, sm, lam, 1, -1, 1, 0, 2)},
        {"NULL x", ra_mixup_with(NULL, t, lab, B, C, H, W, K, sm, lam, 0, 0, 0, 0, 0)},
        {"NULL targets", ra_mixup_with(x, NULL, lab, B, C, H, W, K, sm, lam, 0, 0, 0, 0, 0)},
        {"NULL labels", ra_mixup_with(x, t, NULL, B, C, H, W, K, sm, lam, 0, 0, 0, 0, 0)},
        {"size overflow", ra_mixup_with(x, t, lab, B, 1 << 30, 1 << 30, 1 << 30, K, sm, lam, 0,
                                        0, 0, 0, 0)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(cases[i].st == RA_ERR_ARG, "%s: status %d", cases[i].what, (int)cases[i].st);
    CHECK(memcmp(x, x0, sizeof(float) * N) == 0, "x written on error");
    CHECK(memcmp(keep, t, sizeof keep) == 0, "targets written on error");
    free(x0), free(x);
}

/* ---------------------------------------------------------------------- */
/* 3. ra_mixup_apply's draws                                               */
/* ---------------------------------------------------------------------- */

enum { DB = 2, DH = 13, DW = 11, DK = 3, DN = DB * DH * DW };

/* One batch of two images (0 then 1 everywhere) mixed; returns 1 for a
 * cutmix, 0 for a mixup, -1 when lam is 1; checks the batch against the
 * kind and lam, and counts the boxes touching each edge. want is the kind
 * expected (-1: either; then a batch of 0 and 1 only is a cutmix: a mixup
 * whose lam is within 2^-25 of 0 or 1 looks like one, too rare for the
 * alphas this is used with). */
static int draw_once(const ra_mixup *mx, ra_rng *rng, int want, float *lam, int edges[4],
                     int *bad) {
    float x[DN], t[DB * DK];
    const int32_t lab[DB] = {0, 2};
    for (int i = 0; i < DN; i++) x[i] = i < DH * DW ? 0.0f : 1.0f;
    if (ra_mixup_apply(x, t, lab, DB, 1, DH, DW, DK, mx, rng, lam) != RA_OK) {
        ++*bad;
        return -2;
    }
    const double l = *lam;
    for (int i = 0; i < DB; i++) {   /* targets: lam on own label, rows sum to 1 */
        const double s = (double)t[i * DK] + t[i * DK + 1] + t[i * DK + 2];
        const float own = t[i * DK + (i ? 2 : 0)], other = t[i * DK + (i ? 0 : 2)];
        const double off = mx->smoothing / DK, on = 1.0 - mx->smoothing + off;
        if (fabs(s - 1.0) > 1e-6 || fabs(own - (l * on + (1 - l) * off)) > 1e-6 ||
            fabs(other - ((1 - l) * on + l * off)) > 1e-6)
            ++*bad;
    }
    /* image 0 holds 0 where it kept itself and 1 where image 1 came in */
    int ones = 0, frac = 0, ylo = DH, yhi = -1, xlo = DW, xhi = -1;
    for (int y = 0; y < DH; y++)
        for (int xx = 0; xx < DW; xx++) {
            const float v = x[y * DW + xx];
            if (v == 1.0f) {
                ones++;
                ylo = y < ylo ? y : ylo, yhi = y > yhi ? y : yhi;
                xlo = xx < xlo ? xx : xlo, xhi = xx > xhi ? xx : xhi;
            } else if (v != 0.0f) {
                frac++;
            }
        }
    if (want == 0 || (want < 0 && frac)) {   /* mixup: image 0 is 1 - lam, image 1 lam */
        for (int i = 0; i < DN; i++)
            if (fabs(x[i] - (i < DH * DW ? 1.0 - l : l)) > 1e-6) {
                ++*bad;
                break;
            }
        return l == 1.0 ? -1 : 0;
    }
    /* cutmix: the ones are a rectangle of area (1 - lam) H W, image 1 its negative */
    if (frac || (ones && ones != (yhi - ylo + 1) * (xhi - xlo + 1)) ||
        fabs((double)ones - (1.0 - l) * DH * DW) > 1e-3)
        ++*bad;
    for (int i = 0; i < DH * DW; i++)
        if (x[DH * DW + i] != 1.0f - x[i]) {
            ++*bad;
            break;
        }
    if (ones) {
        edges[0] += ylo == 0, edges[1] += yhi == DH - 1;
        edges[2] += xlo == 0, edges[3] += xhi == DW - 1;
    }
    return l == 1.0 ? -1 : 1;
}

/* n batches: lam's mean and variance against Beta(a, a) within 5 standard
 * errors (var's from the fourth moment, excess kurtosis -6 / (2a + 3)). */
static void check_beta(const char *what, float a, int cutmix) {
    const ra_mixup mx = {cutmix ? 0.0f : a, cutmix ? a : 0.0f, 1.0f, 0.5f, 0.1f};
    ra_rng rng;
    ra_rng_seed(&rng, 1000 + (uint64_t)(a * 100));
    const int n = 40000;
    double s = 0, s2 = 0;
    int bad = 0, kinds[2] = {0, 0}, edges[4] = {0, 0, 0, 0};
    float lam;
    double *l = xmalloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) {
        const int kind = draw_once(&mx, &rng, cutmix, &lam, edges, &bad);
        if (kind >= 0) kinds[kind]++;
        l[i] = lam;
        s += lam;
    }
    const double mean = s / n;
    for (int i = 0; i < n; i++) s2 += (l[i] - mean) * (l[i] - mean);
    const double var = s2 / (n - 1), ev = 1.0 / (4.0 * (2.0 * a + 1.0));
    const double m4 = ev * ev * (3.0 - 6.0 / (2.0 * a + 3.0));
    const double se_mean = sqrt(ev / n), se_var = sqrt((m4 - ev * ev) / n);
    if (cutmix)
        printf("%s a = %g: corrected lam mean %.4f, var %.5f, %d bad\n", what, a, mean, var, bad);
    else
        printf("%s a = %g: lam mean %.4f (0.5 +- %.4f), var %.5f (%.5f +- %.5f; uniform %.5f), "
               "%d bad\n", what, a, mean, 5 * se_mean, var, ev, 5 * se_var, 1.0 / 12, bad);
    CHECK(bad == 0, "%s a = %g: %d batches wrong", what, a, bad);
    if (!cutmix) {   /* cutmix's lam is the corrected one, not Beta's */
        CHECK(fabs(mean - 0.5) <= 5 * se_mean, "%s a = %g: mean %.5f", what, a, mean);
        CHECK(fabs(var - ev) <= 5 * se_var, "%s a = %g: var %.5f vs %.5f", what, a, var, ev);
    } else {
        printf("  boxes at the top %d, bottom %d, left %d, right %d\n", edges[0], edges[1],
               edges[2], edges[3]);
        CHECK(edges[0] > n / 20 && edges[1] > n / 20 && edges[2] > n / 20 && edges[3] > n / 20,
              "boxes not clipped at every edge");
        /* corrected lam >= the drawn one (boxes clip); its mean is above 1/2 */
        CHECK(mean > 0.5, "cutmix lam mean %.4f", mean);
    }
    free(l);
}

static void test_mixup_apply(void) {
    check_beta("mixup", 0.8f, 0);
    check_beta("mixup", 0.2f, 0);
    check_beta("mixup", 1.0f, 0);
    check_beta("mixup", 4.0f, 0);
    check_beta("cutmix", 1.0f, 1);

    /* switch_prob and prob: shares within 5 standard errors */
    const ra_mixup mx = {0.8f, 1.0f, 0.6f, 0.3f, 0.1f};
    ra_rng rng;
    ra_rng_seed(&rng, 77);
    const int n = 20000;
    int bad = 0, kinds[3] = {0, 0, 0}, edges[4] = {0, 0, 0, 0};
    float lam;
    for (int i = 0; i < n; i++) {
        const int kind = draw_once(&mx, &rng, -1, &lam, edges, &bad);
        if (kind >= -1) kinds[kind + 1]++;
    }
    const double mixed = (double)(kinds[1] + kinds[2]) / n;
    const double cut = (double)kinds[2] / (kinds[1] + kinds[2]);
    const double se_p = sqrt(0.6 * 0.4 / n), se_s = sqrt(0.3 * 0.7 / (kinds[1] + kinds[2]));
    printf("prob 0.6: mixed %.4f (+- %.4f); switch_prob 0.3: cutmix %.4f (+- %.4f), %d bad\n",
           mixed, 5 * se_p, cut, 5 * se_s, bad);
    CHECK(bad == 0, "%d batches wrong", bad);
    CHECK(fabs(mixed - 0.6) <= 5 * se_p, "mixed share %.4f", mixed);
    CHECK(fabs(cut - 0.3) <= 5 * se_s, "cutmix share %.4f", cut);

    /* the same seed, the same batch */
    enum { B = 4, C = 2, H = 9, W = 6, K = 5, N = B * C * H * W };
    float x1[N], x2[N], t1[B * K], t2[B * K], l1, l2;
    const int32_t lab[B] = {1, 4, 0, 3};
    const ra_mixup rec = {0.8f, 1.0f, 1.0f, 0.5f, 0.1f};
    for (int s = 0; s < 8; s++) {
        ra_rng r1, r2;
        ra_rng_seed(&r1, (uint64_t)s), ra_rng_seed(&r2, 900);
        ra_rng_fill_normal(&r2, x1, N, 0.0f, 1.0f);
        memcpy(x2, x1, sizeof x1);
        r2 = r1;
        CHECK(ra_mixup_apply(x1, t1, lab, B, C, H, W, K, &rec, &r1, &l1) == RA_OK, "%s",
              ra_last_error());
        CHECK(ra_mixup_apply(x2, t2, lab, B, C, H, W, K, &rec, &r2, NULL) == RA_OK, "%s",
              ra_last_error());
        CHECK(memcmp(x1, x2, sizeof x1) == 0 && memcmp(t1, t2, sizeof t1) == 0 &&
              memcmp(&r1, &r2, sizeof r1) == 0, "seed %d: not reproducible", s);
        (void)l2;
    }

    /* argument errors: RA_ERR_ARG, nothing written, nothing drawn */
    ra_rng r0 = rng;
    memcpy(x2, x1, sizeof x1), memcpy(t2, t1, sizeof t1);
    const ra_mixup bads[] = {
        {-0.1f, 1.0f, 1.0f, 0.5f, 0.1f}, {NAN, 1.0f, 1.0f, 0.5f, 0.1f},
        {1e-5f, 1.0f, 1.0f, 0.5f, 0.1f}, {0.8f, 2e4f, 1.0f, 0.5f, 0.1f},
        {0.0f, 0.0f, 1.0f, 0.5f, 0.1f},  {0.8f, 1.0f, 1.5f, 0.5f, 0.1f},
        {0.8f, 1.0f, 1.0f, NAN, 0.1f},   {0.8f, 1.0f, 1.0f, 0.5f, 2.0f},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++)
        CHECK(ra_mixup_apply(x1, t1, lab, B, C, H, W, K, &bads[i], &rng, &l2) == RA_ERR_ARG,
              "bad field set %zu", i);
    CHECK(ra_mixup_apply(x1, t1, lab, B - 1, C, H, W, K, &rec, &rng, &l2) == RA_ERR_ARG, "odd");
    CHECK(strstr(ra_last_error(), "odd") != NULL, "reason: %s", ra_last_error());
    CHECK(ra_mixup_apply(x1, t1, lab, B, C, H, W, 4, &rec, &rng, &l2) == RA_ERR_ARG, "label 4");
    CHECK(ra_mixup_apply(x1, t1, lab, B, C, H, W, K, NULL, &rng, &l2) == RA_ERR_ARG, "NULL mx");
    CHECK(ra_mixup_apply(x1, t1, lab, B, C, H, W, K, &rec, NULL, &l2) == RA_ERR_ARG, "NULL rng");
    CHECK(memcmp(&r0, &rng, sizeof rng) == 0, "drew numbers on error");
    CHECK(memcmp(x1, x2, sizeof x1) == 0 && memcmp(t1, t2, sizeof t1) == 0,
          "wrote on error");
}

int main(void) {
    test_soft_ce();
    test_mixup_with();
    test_mixup_apply();
    return check_done();
}
