/* test_nn_kernels.c - every entry of the layers' kernel table
 * (src/kernels/nn_kernels.h) the CPU supports, against the reference
 * entry, which is the oracle:
 *
 *   test_nn_kernels [FIXTURES_DIR]   (the directory is not used)
 *
 * 1. the dispatch: the entry in use is the one of ra_kernel_current()
 *    (RELATTN_KERNEL when it names a supported set), and follows
 *    ra_kernel_select; the reference has no fused products;
 * 2. GELU, GELU' and the GELU backward within a few ulp of erf's and
 *    exp's errors; LayerNorm rows within 1e-6 relative, four rows at once
 *    with the bits of one row; the LayerNorm backward of a block of rows
 *    against the reference's dx and column sums;
 * 3. where a set has fused products: the forward against a double
 *    product within the bound of a float sum of K terms, w transposed
 *    (wt) with the same bits, and the weight gradient likewise.
 */
#include "relattn.h"
#include "check.h"
#include "nn/nn.h"
#include "kernels/nn_kernels.h"

#include <stdint.h>
#include <string.h>

static float *fnew(int64_t n) {
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!p) exit(2);
    return p;
}

static double *dnew(int64_t n) {
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!p) exit(2);
    return p;
}

/* uniform in [lo, hi), a fixed stream per seed */
static void fill(float *p, int64_t n, uint64_t seed, float lo, float hi) {
    ra_rng r;
    ra_rng_seed(&r, seed);
    ra_rng_fill_uniform(&r, p, n, lo, hi);
}

static void test_dispatch(void) {
    const char *env = getenv("RELATTN_KERNEL");
    const ra_kernel_id first = ra_kernel_current();
    const rai_nn_kernel *kn = rai_nn_kernel_active();
    CHECK(strcmp(kn->name, ra_kernel_name(first)) == 0, "at start: nn set %s, kernel %s",
          kn->name, ra_kernel_name(first));
    if (env && *env)
        for (int id = 0; id < RA_KERNEL_COUNT; id++)
            if (strcmp(env, ra_kernel_name((ra_kernel_id)id)) == 0 &&
                ra_kernel_supported((ra_kernel_id)id))
                CHECK(strcmp(kn->name, env) == 0, "RELATTN_KERNEL=%s: nn set %s", env, kn->name);
    for (int id = 0; id < RA_KERNEL_COUNT; id++) {
        if (!ra_kernel_supported((ra_kernel_id)id)) continue;
        CHECK(ra_kernel_select((ra_kernel_id)id) == RA_OK, "select %d", id);
        kn = rai_nn_kernel_active();
        CHECK(strcmp(kn->name, ra_kernel_name((ra_kernel_id)id)) == 0, "selected %s: nn set %s",
              ra_kernel_name((ra_kernel_id)id), kn->name);
        CHECK(kn->gelu && kn->gelu_backward && kn->gelu_deriv && kn->layernorm_row,
              "%s: an element-wise kernel missing", kn->name);
        CHECK(!kn->gemm == !kn->gemm_tn, "%s: fused forward and weight gradient go together",
              kn->name);
        CHECK(rai_nn_simd() == (id != RA_KERNEL_REF), "%s: rai_nn_simd", kn->name);
    }
    kn = &rai_nn_kernel_ref;
    CHECK(kn->gemm_micro == RA_GEMM_REF && kn->gemm_i8_micro == RA_GEMM_REF && !kn->gemm && !kn->gemm_tn && !kn->layernorm_rows4 &&
              !kn->layernorm_backward_rows,
          "the reference set is the scalar one");
    ra_kernel_select(first);
}

/* GELU, GELU' and dx += dy GELU' of set kn against the reference: erf's
 * and exp's errors (a few ulp), scaled by |x| and |dy|. */
static void test_gelu(const rai_nn_kernel *kn) {
    const int64_t n = 20011;   /* not a multiple of any vector width */
    float *x = fnew(n), *dy = fnew(n), *a = fnew(n), *b = fnew(n), *d0 = fnew(n), *d1 = fnew(n);
    fill(x, n, 1, -9.0f, 9.0f), fill(dy, n, 2, -3.0f, 3.0f), fill(d0, n, 3, -1.0f, 1.0f);
    memcpy(d1, d0, sizeof(float) * (size_t)n);
    rai_nn_gelu_ref(b, x, n);
    kn->gelu(a, x, n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += !(fabs((double)a[i] - b[i]) <=
                 1e-6 * fabs((double)b[i]) + ldexp(fabs((double)x[i]), -22) + 1e-38);
    CHECK(bad == 0, "%s gelu: %lld values beyond tolerance", kn->name, (long long)bad);
    rai_nn_gelu_deriv_ref(b, x, n);
    kn->gelu_deriv(a, x, n);
    bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += !(fabs((double)a[i] - b[i]) <=
                 1e-6 * fabs((double)b[i]) + ldexp(1.0 + fabs((double)x[i]), -21));
    CHECK(bad == 0, "%s gelu deriv: %lld values beyond tolerance", kn->name, (long long)bad);
    rai_nn_gelu_backward_ref(d0, dy, x, n);
    kn->gelu_backward(d1, dy, x, n);
    bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += !(fabs((double)d1[i] - d0[i]) <=
                 1e-6 * fabs((double)d0[i]) +
                     fabs((double)dy[i]) * ldexp(1.0 + fabs((double)x[i]), -21) + 1e-38);
    CHECK(bad == 0, "%s gelu backward: %lld values beyond tolerance", kn->name, (long long)bad);
    free(x), free(dy), free(a), free(b), free(d0), free(d1);
}

/* LayerNorm rows of set kn against the reference (only the order of the
 * double sums differs); four rows at once with the bits of one. */
static void test_layernorm(const rai_nn_kernel *kn) {
    const int cs[] = {1, 7, 8, 33, 96, 100, 384};
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const int c = cs[ci], rows = 8;
        const int64_t rc = (int64_t)rows * c;
        float *x = fnew(rc), *g = fnew(c), *be = fnew(c), *y0 = fnew(rc), *y1 = fnew(rc);
        float *y4 = fnew(rc), m0[8], r0[8], m1[8], r1[8], m4[8], r4[8];
        fill(x, rc, 10 + ci, -40.0f, 60.0f), fill(g, c, 11, 0.5f, 1.5f), fill(be, c, 12, -1, 1);
        for (int affine = 0; affine < 2; affine++) {
            const float *gm = affine ? g : NULL, *bt = affine ? be : NULL;
            for (int i = 0; i < rows; i++) {
                rai_nn_layernorm_row_ref(y0 + i * c, m0 + i, r0 + i, x + i * c, gm, bt, c, 1e-5f);
                kn->layernorm_row(y1 + i * c, m1 + i, r1 + i, x + i * c, gm, bt, c, 1e-5f);
                CHECK(fabsf(m1[i] - m0[i]) <= 1e-6f * fabsf(m0[i]) + 1e-6f &&
                          fabsf(r1[i] - r0[i]) <= 1e-6f * r0[i],
                      "%s layernorm statistics, C = %d", kn->name, c);
            }
            char what[96];
            snprintf(what, sizeof what, "%s layernorm row vs ref, C = %d", kn->name, c);
            CHECK_CLOSE(y1, y0, (long)rc, 1e-6, 1e-7, what);
            if (!kn->layernorm_rows4) continue;
            for (int i = 0; i < rows; i += 4) {
                float *yp[4], *mp[4], *rp[4];
                const float *xp[4];
                for (int r = 0; r < 4; r++) {
                    yp[r] = y4 + (int64_t)(i + r) * c, xp[r] = x + (int64_t)(i + r) * c;
                    mp[r] = i ? NULL : m4 + r, rp[r] = i ? NULL : r4 + r;
                }
                kn->layernorm_rows4(yp, mp, rp, xp, gm, bt, c, 1e-5f);
            }
            CHECK(memcmp(y4, y1, sizeof(float) * (size_t)rc) == 0 &&
                      memcmp(m4, m1, 4 * sizeof(float)) == 0 &&
                      memcmp(r4, r1, 4 * sizeof(float)) == 0,
                  "%s layernorm four rows differ from one row, C = %d", kn->name, c);
        }
        free(x), free(g), free(be), free(y0), free(y1), free(y4);
    }
}

/* The float32 LayerNorm of int8's inference: set kn's row bit for bit
 * against the reference's (C on both sides of every multiple of 16, with
 * and without gamma and beta, a row of zeros, a NaN), and within float32
 * rounding of the double LayerNorm. */
static void test_layernorm_f32(const rai_nn_kernel *kn) {
    CHECK(kn->layernorm_row_f32 != NULL, "%s: no float32 LayerNorm", kn->name);
    if (!kn->layernorm_row_f32) return;
    const int cs[] = {1, 5, 15, 16, 17, 31, 32, 33, 96, 100, 384, 769};
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const int c = cs[ci], rows = 4;
        const int64_t rc = (int64_t)rows * c;
        float *x = fnew(rc), *g = fnew(c), *be = fnew(c), *y0 = fnew(rc), *y1 = fnew(rc), *yd = fnew(rc);
        fill(x, rc, 20 + ci, -40.0f, 60.0f), fill(g, c, 21, 0.5f, 1.5f), fill(be, c, 22, -1, 1);
        memset(x + c, 0, sizeof(float) * (size_t)c);   /* row 1: zeros */
        x[3 * c + c / 2] = NAN;                         /* row 3: a NaN */
        for (int affine = 0; affine < 2; affine++) {
            const float *gm = affine ? g : NULL, *bt = affine ? be : NULL;
            for (int i = 0; i < rows; i++) {
                rai_nn_layernorm_row_f32_ref(y0 + i * c, x + i * c, gm, bt, c, 1e-5f);
                kn->layernorm_row_f32(y1 + i * c, x + i * c, gm, bt, c, 1e-5f);
                rai_nn_layernorm_row_ref(yd + i * c, NULL, NULL, x + i * c, gm, bt, c, 1e-5f);
            }
            int64_t bad = 0, far = 0;
            for (int64_t i = 0; i < rc; i++) {
                bad += memcmp(&y0[i], &y1[i], sizeof *y0) != 0 && !(isnan(y0[i]) && isnan(y1[i]));
                if (i / c != 3) far += !(fabs((double)y0[i] - yd[i]) <= 2e-6 * (1.0 + fabs((double)yd[i])));
            }
            CHECK(bad == 0, "%s float32 layernorm, C = %d, affine %d: %lld values not the "
                  "reference's bits", kn->name, c, affine, (long long)bad);
            CHECK(far == 0, "%s float32 layernorm, C = %d: %lld values beyond float32 rounding of "
                  "the double one", kn->name, c, (long long)far);
            for (int j = 0; j < c; j++)
                CHECK(isnan(y0[3 * c + j]) && y0[c + j] == (bt ? bt[j] : 0.0f),
                      "a NaN row gives NaN, a row of zeros beta, C = %d", c);
        }
        free(x), free(g), free(be), free(y0), free(y1), free(yd);
    }
}

/* The LayerNorm backward of a block of rows against the reference's dx
 * rows and column strips: dx within an ulp or so, the column sums (double)
 * within the rounding of a sum of the rows. */
static void test_layernorm_backward(const rai_nn_kernel *kn) {
    if (!kn->layernorm_backward_rows) return;
    const int cs[] = {1, 7, 48, 100};
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const int c = cs[ci], rows = 37;
        const int64_t rc = (int64_t)rows * c;
        float *x = fnew(rc), *dy = fnew(rc), *g = fnew(c), *y = fnew(rc);
        float *mean = fnew(rows), *rstd = fnew(rows), *d0 = fnew(rc), *d1 = fnew(rc);
        double *ag = dnew(c), *ab = dnew(c), *pg = dnew(c), *pb = dnew(c), *mag = dnew(c);
        fill(x, rc, 20 + ci, -2.0f, 3.0f), fill(dy, rc, 21, -1, 1), fill(g, c, 22, 0.5f, 1.5f);
        fill(d0, rc, 23, -1, 1);
        memcpy(d1, d0, sizeof(float) * (size_t)rc);
        for (int i = 0; i < rows; i++)
            rai_nn_layernorm_row_ref(y + i * c, mean + i, rstd + i, x + i * c, g, NULL, c, 1e-5f);
        rai_nn_layernorm_backward_dx_ref(d0, dy, x, mean, rstd, g, rows, c);
        rai_nn_layernorm_backward_sums_ref(ag, ab, dy, x, mean, rstd, rows, c, 0, c);
        kn->layernorm_backward_rows(d1, pg, pb, dy, x, mean, rstd, g, rows, c);
        int64_t bad = 0;
        for (int64_t i = 0; i < rc; i++) {
            const double gi = fabs((double)dy[i] * g[i % c]);
            bad += !(fabs((double)d1[i] - d0[i]) <=
                     ldexp(fabs((double)d0[i]), -22) + 1e-6 * rstd[i / c] * (gi + 1e-3) + 1e-30);
        }
        CHECK(bad == 0, "%s layernorm backward dx, C = %d: %lld values", kn->name, c,
              (long long)bad);
        for (int64_t i = 0; i < rc; i++) mag[i % c] += fabs((double)dy[i]) * (8.0 + fabs(x[i]));
        bad = 0;
        for (int j = 0; j < c; j++)
            bad += !(fabs(pg[j] - ag[j]) <= 1e-13 * mag[j] * 8.0 &&
                     fabs(pb[j] - ab[j]) <= 1e-13 * mag[j]);
        CHECK(bad == 0, "%s layernorm backward sums, C = %d: %lld columns", kn->name, c,
              (long long)bad);
        /* dx NULL: the sums alone, the same bits */
        double *qg = dnew(c), *qb = dnew(c);
        kn->layernorm_backward_rows(NULL, qg, qb, dy, x, mean, rstd, g, rows, c);
        CHECK(memcmp(qg, pg, sizeof(double) * (size_t)c) == 0 &&
                  memcmp(qb, pb, sizeof(double) * (size_t)c) == 0,
              "%s layernorm backward sums without dx differ, C = %d", kn->name, c);
        free(qg), free(qb);
        free(x), free(dy), free(g), free(y), free(mean), free(rstd), free(d0), free(d1);
        free(ag), free(ab), free(pg), free(pb), free(mag);
    }
}

/* The fused products of set kn: y = x w^T + b against a double product
 * within (K + 2) eps sum |x w| + |b|; w given transposed, the same bits;
 * dw += dy^T x and db += column sums, within the bound of an M-term sum. */
static void test_products(const rai_nn_kernel *kn) {
    if (!kn->gemm) return;
    const int ms[] = {1, 13, 97}, ns[] = {1, 17, 48, 100}, ks[] = {1, 33, 96};
    for (size_t mi = 0; mi < 3; mi++)
        for (size_t ni = 0; ni < 4; ni++)
            for (size_t ki = 0; ki < 3; ki++) {
                const int m = ms[mi], n = ns[ni], k = ks[ki];
                float *x = fnew((int64_t)m * k), *w = fnew((int64_t)n * k), *b = fnew(n);
                float *wt = fnew((int64_t)k * n), *y = fnew((int64_t)m * n);
                float *y2 = fnew((int64_t)m * n), *dw = fnew((int64_t)n * k), *db = fnew(n);
                fill(x, (int64_t)m * k, 30 + mi, -1, 1), fill(w, (int64_t)n * k, 31 + ni, -1, 1);
                fill(b, n, 32 + ki, -1, 1);
                for (int j = 0; j < n; j++)
                    for (int l = 0; l < k; l++) wt[(int64_t)l * n + j] = w[(int64_t)j * k + l];
                CHECK(kn->gemm(y, n, x, k, w, k, 0, m, n, k, b, 0, NULL, NULL, 0, NULL,
                               2) == 0, "%s gemm %dx%dx%d", kn->name, m, n, k);
                CHECK(kn->gemm(y2, n, x, k, wt, n, 1, m, n, k, b, 0, NULL, NULL, 0, NULL,
                               1) == 0, "%s gemm wt %dx%dx%d", kn->name, m, n, k);
                CHECK(memcmp(y, y2, sizeof(float) * (size_t)m * n) == 0,
                      "%s gemm %dx%dx%d: w transposed changes the bits", kn->name, m, n, k);
                int64_t bad = 0;
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double acc = b[j], mag = fabs((double)b[j]);
                        for (int l = 0; l < k; l++) {
                            const double t = (double)x[(int64_t)i * k + l] * w[(int64_t)j * k + l];
                            acc += t, mag += fabs(t);
                        }
                        bad += !(fabs(y[(int64_t)i * n + j] - acc) <= (k + 2) * ldexp(mag, -24));
                    }
                CHECK(bad == 0, "%s gemm %dx%dx%d: %lld values beyond the bound", kn->name, m, n,
                      k, (long long)bad);
                /* dw (N, K) += dy^T (N, M) x (M, K), with y as dy; db += sums of dy */
                CHECK(kn->gemm_tn(dw, k, y, n, x, k, m, n, k, db, 2) == 0, "%s gemm_tn %dx%dx%d",
                      kn->name, m, n, k);
                bad = 0;
                for (int j = 0; j < n; j++) {
                    for (int l = 0; l < k; l++) {
                        double acc = 0, mag = 0;
                        for (int i = 0; i < m; i++) {
                            const double t = (double)y[(int64_t)i * n + j] * x[(int64_t)i * k + l];
                            acc += t, mag += fabs(t);
                        }
                        bad += !(fabs(dw[(int64_t)j * k + l] - acc) <= (m + 2) * ldexp(mag, -24));
                    }
                    double s = 0, mag = 0;
                    for (int i = 0; i < m; i++)
                        s += y[(int64_t)i * n + j], mag += fabs(y[(int64_t)i * n + j]);
                    bad += !(fabs(db[j] - s) <= ldexp(mag, -23));
                }
                CHECK(bad == 0, "%s gemm_tn %dx%dx%d: %lld values beyond the bound", kn->name, m,
                      n, k, (long long)bad);
                free(x), free(w), free(b), free(wt), free(y), free(y2), free(dw), free(db);
            }
}

/* The AdamW step against the reference's bits: sizes with tails, zeros,
 * a NaN and an infinite gradient, weight decay on and off. */
static void test_adamw(const rai_nn_kernel *kn) {
    enum { N = 1000 };
    float *p = fnew(N), *m = fnew(N), *v = fnew(N), *g = fnew(N);
    float *p2 = fnew(N), *m2 = fnew(N), *v2 = fnew(N);
    int bad = 0;
    for (int decay = 0; decay < 2; decay++)
        for (int n = 1; n <= N; n += n < 40 ? 1 : 97) {
            fill(p, n, 11 + n, -1, 1), fill(m, n, 12 + n, -0.01f, 0.01f);
            fill(v, n, 13 + n, 0, 1e-4f), fill(g, n, 14 + n, -0.1f, 0.1f);
            g[0] = 0, m[0] = 0, v[0] = 0;
            if (n > 17) g[17] = NAN;
            if (n > 30) g[30] = INFINITY, v[29] = 1e-30f;
            memcpy(p2, p, n * sizeof *p), memcpy(m2, m, n * sizeof *m), memcpy(v2, v, n * sizeof *v);
            const rai_adamw_factors a = {.keep = decay ? 1 - 2e-3f * 0.05f : 1, .b1 = 0.9f,
                                         .a1 = 0.1f, .b2 = 0.999f, .a2 = 1e-3f,
                                         .neg_step = -2e-3f / 0.271f, .bc2_sqrt = 0.0447f,
                                         .eps = 1e-8f};
            rai_nn_adamw_ref(p, m, v, g, n, &a);
            kn->adamw(p2, m2, v2, g, n, &a);
            bad += memcmp(p, p2, n * sizeof *p) != 0 || memcmp(m, m2, n * sizeof *m) != 0 ||
                   memcmp(v, v2, n * sizeof *v) != 0;
        }
    CHECK(bad == 0, "%s adamw: %d sizes differ from the reference's bits", kn->name, bad);
    free(p), free(m), free(v), free(g), free(p2), free(m2), free(v2);
}

int main(void) {
    test_dispatch();
    for (int id = 0; id < RA_KERNEL_COUNT; id++) {
        if (!ra_kernel_supported((ra_kernel_id)id)) continue;
        CHECK(ra_kernel_select((ra_kernel_id)id) == RA_OK, "select %d", id);
        const rai_nn_kernel *kn = rai_nn_kernel_active();
        printf("kernel set %s: element-wise, LayerNorm%s%s\n", kn->name,
               kn->layernorm_backward_rows ? ", LayerNorm backward" : "",
               kn->gemm ? ", fused products" : "");
        test_gelu(kn);
        test_layernorm(kn);
        test_layernorm_f32(kn);
        test_layernorm_backward(kn);
        test_products(kn);
        test_adamw(kn);
    }
    return check_done();
}
