#define _POSIX_C_SOURCE 200809L
/* test_precision.c - the bf16 and int8 precisions as rounding points
 * (nn/precision.h; docs/reference.md section 6, "Precisions"): the
 * roundings bit by bit, the products of both precisions (bf16's for
 * inference and training: forward, dX, dW) against their formulas written
 * out again, ra_model_set_precision quantising exactly the Linear weights
 * (int8) or none (bf16), a network's forward in bf16 / int8 and its bf16
 * training gradient against float32 (the size of the difference), and the
 * refusals. PyTorch's twin of whole networks is tests/test_precision.sh. */
#include "check.h"
#if defined(__x86_64__) && !defined(RA_HAVE_X86_KERNELS)
#define RA_HAVE_X86_KERNELS 1   /* the library's x86 kernels are built there */
#endif
#include "attention/layer.h"
#include "kernels/gemm_kernels.h"
#include "kernels/nn_kernels.h"
#include "nn/precision.h"
#include "nn/nn.h"
#include "relattn.h"

#include <math.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t ubits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void roundings(void) {
    /* bfloat16: nearest, ties to even, NaN kept, overflow to infinity */
    static const uint32_t in[][2] = {
        {0x3F800000u, 0x3F800000u},   /* 1 */
        {0x3F808000u, 0x3F800000u},   /* 1 + 2^-8: a tie, to even (down) */
        {0x3F818000u, 0x3F820000u},   /* 1 + 3 * 2^-8: a tie, to even (up) */
        {0x3F808001u, 0x3F810000u},   /* just above the tie */
        {0x3F807FFFu, 0x3F800000u},   /* just below */
        {0x7F7FFFFFu, 0x7F800000u},   /* the largest float: infinity */
        {0xFF7FFFFFu, 0xFF800000u},
        {0x00008000u, 0x00000000u},   /* subnormal tie to even (zero) */
        {0x00018000u, 0x00020000u},
        {0x80000000u, 0x80000000u},   /* -0 */
    };
    for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
        const uint32_t got = ubits(rai_round_bf16(bits(in[i][0])));
        CHECK(got == in[i][1], "bf16(%08x) = %08x, want %08x", in[i][0], got, in[i][1]);
    }
    CHECK(isnan(rai_round_bf16(NAN)), "NaN");
    CHECK(ubits(rai_round_bf16(INFINITY)) == 0x7F800000u, "inf");

    /* int8 per row: scale max|x| / 127, round half even, clamp */
    float w[2][5] = {{127.0f, -63.5f, 0.5f, 1.5f, -2.5f}, {0, 0, 0, 0, 0}};
    rai_precision_weights(&w[0][0], 2, 5, RA_PRECISION_INT8);
    const float want[5] = {127.0f, -64.0f, 0.0f, 2.0f, -2.0f};   /* scale 1: halves to even */
    for (int j = 0; j < 5; j++) CHECK(w[0][j] == want[j], "int8[%d] = %g, want %g", j, w[0][j], want[j]);
    for (int j = 0; j < 5; j++) CHECK(w[1][j] == 0.0f, "a row of zeros stays");
    float v[3] = {0.3f, -1.27f, 0.01f};   /* scale 0.01: 30, -127, 1 */
    rai_precision_weights(v, 1, 3, RA_PRECISION_INT8);
    const float s = 1.27f / 127.0f;
    CHECK(v[0] == 30.0f * s && v[1] == -127.0f * s && v[2] == 1.0f * s,
          "int8 row: %.9g %.9g %.9g", v[0], v[1], v[2]);
}

static void naive_bf16(float *y, const float *x, const float *w, const float *b, int m, int n, int k);

/* A Linear in precision bf16 without packed weights (packed at the call)
 * is the bf16 product's formula where the kernel set has it, else the
 * float32 Linear of the input and the weights rounded (the reference
 * path), bit for bit; it differs from the float32 one and leaves x and w
 * alone. */
static void linear(void) {
    enum { M = 37, N = 29, K = 300 };
    static float x[M * K], x0[M * K], xr[M * K], w[N * K], w0[N * K], wr[N * K], b[N], y1[M * N],
        y2[M * N], y0[M * N];
    uint64_t s = 12345;
    for (int i = 0; i < M * K; i++) x[i] = (float)((s = s * 6364136223846793005ull + 1) >> 40) / 16777216.0f - 0.5f;
    for (int i = 0; i < N * K; i++) w[i] = (float)((s = s * 6364136223846793005ull + 1) >> 40) / 16777216.0f - 0.5f;
    for (int i = 0; i < N; i++) b[i] = 0.01f * (float)i;
    memcpy(xr, x, sizeof x), memcpy(x0, x, sizeof x), memcpy(wr, w, sizeof w), memcpy(w0, w, sizeof w);
    rai_precision_weights(xr, M, K, RA_PRECISION_BF16);
    rai_precision_weights(wr, N, K, RA_PRECISION_BF16);
    ra_linear_forward(y0, x, w, b, M, N, K);
    const int fast = rai_bf16_micro() >= 0;
    if (fast) naive_bf16(y2, x, w, b, M, N, K);
    else ra_linear_forward(y2, xr, wr, b, M, N, K);
    const ra_precision was = rai_precision_set(RA_PRECISION_BF16);
    ra_linear_forward(y1, x, w, b, M, N, K);
    rai_precision_set(was);
    CHECK(memcmp(y1, y2, sizeof y1) == 0, "bf16: the Linear differs from the %s",
          fast ? "formula" : "product of the rounded values");
    CHECK(memcmp(y1, y0, sizeof y1) != 0, "bf16: nothing was rounded");
    CHECK(memcmp(x, x0, sizeof x) == 0 && memcmp(w, w0, sizeof w) == 0, "x and w are left alone");
    CHECK(!rai_precision_failed(), "no failure recorded");
}

/* ---- precision int8: the integer product (kernels/gemm_kernels.h) --------- */

/* The formats of gemm_i8.c written out again, one value at a time in
 * double where that is exact, int64 sums: the oracle of both micro-kernels. */
static float half_even(double v) {   /* v to the nearest integer, ties to even */
    double f = floor(v), d = v - f;
    if (d > 0.5 || (d == 0.5 && fmod(f, 2.0) != 0.0)) f += 1.0;
    return (float)f;
}
static void naive_i8(float *y, const float *x, const float *w, const float *b, int m, int n, int k) {
    for (int i = 0; i < m; i++) {
        const float *xr = x + (int64_t)i * k;
        float lo = 0, hi = 0;
        int finite = 1;
        for (int l = 0; l < k; l++) finite &= isfinite(xr[l]) != 0, lo = fminf(lo, xr[l]), hi = fmaxf(hi, xr[l]);
        const float s = (hi - lo) / 127.0f, r = 1.0f / s;   /* r: the reciprocal in float32 */
        const int ok = finite && isfinite(s) && s > 0 && isfinite(r);
        const float z = ok ? fminf(fmaxf(half_even((double)(-lo / s)), 0), 127) : 0;
        for (int j = 0; j < n; j++) {
            const float *wr = w + (int64_t)j * k;
            float amax = 0;
            int wfinite = 1;
            for (int l = 0; l < k; l++) wfinite &= isfinite(wr[l]) != 0, amax = fmaxf(amax, fabsf(wr[l]));
            const float t = amax / 127.0f;
            int64_t acc = 0;
            for (int l = 0; l < k && ok && wfinite && t > 0; l++) {
                const float q = fminf(fmaxf(half_even((double)(xr[l] * r)) + z, 0), 127);
                const float v = fminf(fmaxf(half_even((double)(wr[l] / t)), -127), 127);
                acc += (int64_t)(q - z) * (int64_t)v;
            }
            const float d = (ok || (finite && s == 0) ? s : NAN) * (wfinite ? t : NAN);
            const float o = (float)(int32_t)acc * d;
            y[(int64_t)i * n + j] = b ? o + b[j] : o;
        }
    }
}

static float lcg(uint64_t *s) {
    return (float)((*s = *s * 6364136223846793005ull + 1) >> 40) / 16777216.0f - 0.5f;
}

/* rai_gemm_i8 on every micro-kernel and thread count against naive_i8, bit
 * for bit, with edge tiles, K not a multiple of 4, one-signed rows, a row of
 * zeros, a NaN, an infinite weight; the Linear of precision int8 is it. */
static void int8_product(void) {
    enum { M = 37, N = 29, K = 301 };
    static float x[M * K], w[N * K], b[N], want[M * N], got[M * N];
    uint64_t s = 777;
    for (int i = 0; i < M * K; i++) x[i] = lcg(&s) * (1 + i % 7);
    for (int i = 0; i < N * K; i++) w[i] = lcg(&s);
    for (int i = 0; i < N; i++) b[i] = 0.01f * (float)i;
    for (int l = 0; l < K; l++) x[3 * K + l] = fabsf(x[3 * K + l]) + 0.25f;   /* all positive */
    for (int l = 0; l < K; l++) x[4 * K + l] = -fabsf(x[4 * K + l]);         /* all negative */
    memset(x + 5 * K, 0, K * sizeof *x);                                     /* zeros */
    x[6 * K + 17] = NAN;
    w[7 * K + 3] = INFINITY;
    int kernels = 0;
    const ra_kernel_id best = ra_kernel_current();
    for (int ks = 0; ks < RA_KERNEL_COUNT; ks++) {
        if (!ra_kernel_supported((ra_kernel_id)ks)) continue;
        CHECK(ra_kernel_select((ra_kernel_id)ks) == RA_OK, "select %d", ks);
        const int isa = rai_nn_kernel_active()->gemm_i8_micro;
        for (int nt = 1; nt <= 2; nt++)
            for (int withb = 0; withb < 2; withb++) {
                const float *bb = withb ? b : NULL;
                naive_i8(want, x, w, bb, M, N, K);
                memset(got, 0x55, sizeof got);
                for (int once = 0; once < 2; once++) {   /* w packed at the call, or before */
                    rai_i8_weights pw;
                    CHECK(!once || rai_i8_weights_pack(&pw, w, N, K, isa, nt) == 0, "pack");
                    memset(got, 0x55, sizeof got);
                    CHECK(rai_gemm_i8(got, x, once ? NULL : w, bb, M, N, K, once ? &pw : NULL, NULL,
                                      NULL, NULL, isa, nt) == 0, "product");
                    if (once) rai_i8_weights_free(&pw);
                    int bad = 0;
                    for (int i = 0; i < M * N; i++)
                        bad += memcmp(&got[i], &want[i], sizeof *got) != 0 && !(isnan(got[i]) && isnan(want[i]));
                    CHECK(bad == 0, "kernel %s, %d threads, bias %d, packed once %d: %d of %d outputs "
                          "differ from the formula", ra_kernel_name((ra_kernel_id)ks), nt, withb, once,
                          bad, M * N);
                }
            }
        kernels++;
    }
    CHECK(isnan(want[6 * N + 2]) && isnan(want[2 * N + 7]) && !isnan(want[2 * N + 6]),
          "a NaN input's row and an infinite weight's column are NaN, the rest is not");
    CHECK(want[5 * N + 4] == b[4], "a row of zeros gives the bias");
    /* the integer product's error: about a 127th of a row's range */
    double num = 0, den = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            if (i == 6 || j == 7) continue;
            double e = b[j];
            for (int l = 0; l < K; l++) e += (double)x[i * K + l] * w[j * K + l];
            num += (want[i * N + j] - e) * (want[i * N + j] - e), den += e * e;
        }
    CHECK(sqrt(num / den) > 1e-3 && sqrt(num / den) < 2e-2, "relative error %.3g", sqrt(num / den));
    ra_kernel_select(best);
    /* the Linear in precision int8 is this product */
    const ra_precision was = rai_precision_set(RA_PRECISION_INT8);
    ra_linear_forward(got, x, w, b, M, N, K);
    rai_precision_set(was);
    naive_i8(want, x, w, b, M, N, K);
    int bad = 0;
    for (int i = 0; i < M * N; i++) bad += memcmp(&got[i], &want[i], sizeof *got) != 0 && !isnan(want[i]);
    CHECK(bad == 0, "the int8 Linear: %d outputs differ", bad);
    CHECK(!rai_precision_failed(), "no failure recorded");
    /* its epilogues: GELU, and the sum added into rows of a residual
     * stream through a row map (-1: skipped), as the float32 layers do */
    static float y0[M * N], res[(M + 3) * N], want_res[(M + 3) * N];
    static int32_t map[M];
    for (int i = 0; i < M; i++) map[i] = i % 5 == 2 ? -1 : (i * 7) % (M + 3);
    for (int i = 0; i < (M + 3) * N; i++) res[i] = want_res[i] = lcg(&s);
    rai_precision_set(RA_PRECISION_INT8);
    rai_linear_fused(got, x, w, b, M, N, K, 1, NULL, NULL);
    rai_linear_fused(y0, x, w, b, M, N, K, 0, res, map);
    rai_precision_set(was);
    ra_gelu_forward(want, want, M * N);   /* want: naive_i8 with the bias, above */
    bad = 0;
    for (int i = 0; i < M * N; i++) bad += memcmp(&got[i], &want[i], sizeof *got) != 0 && !isnan(want[i]);
    CHECK(bad == 0, "int8 with GELU: %d outputs differ", bad);
    naive_i8(want, x, w, b, M, N, K);
    for (int i = 0; i < M; i++)
        for (int j = 0; map[i] >= 0 && j < N; j++) want_res[map[i] * N + j] += want[i * N + j];
    bad = 0;
    for (int i = 0; i < (M + 3) * N; i++)
        bad += memcmp(&res[i], &want_res[i], sizeof *res) != 0 && !isnan(want_res[i]);
    CHECK(bad == 0, "int8 added into a residual stream through a row map: %d values differ", bad);
    /* a table of packed weights finds each by its address, and only it */
    const float *ws[3] = {w + 2 * K, w, w + 9 * K};
    const int64_t ns[3] = {5, 2, 20}, ks[3] = {K, K, K};
    rai_packed *t = rai_packed_make(ws, ns, ks, 3, RA_PRECISION_INT8);
    CHECK(t != NULL, "packed table");
    CHECK(rai_packed_find(w, 2, K) == NULL, "no table set: nothing found");
    const rai_packed *before = rai_packed_set(t);
    for (int i = 0; i < 3; i++) {
        const rai_i8_weights *f = rai_packed_find(ws[i], (int)ns[i], K);
        CHECK(f && f->n == ns[i] && f->k == K, "weight %d found", i);
    }
    CHECK(!rai_packed_find(w + K, 2, K) && !rai_packed_find(w, 3, K) && !rai_packed_find(w, 2, K - 1),
          "another address or size: not found");
    rai_packed_set(before);
    rai_packed_free(t);
    printf("int8 product: %d kernel sets, bit for bit against the formula\n", kernels);
    /* K past the exact integer sums: refused, y untouched */
    CHECK(rai_gemm_i8(got, x, w, b, 1, 1, RA_GEMM_I8_KMAX + 1, NULL, NULL, NULL, NULL, RA_GEMM_REF, 1) == -1, "K bound");
}

/* ---- precision bf16: the bfloat16 dot products (kernels/gemm_bf16.c) ------ */

/* VDPBF16PS's arithmetic written out again: values rounded to bfloat16,
 * per output one chain over the pairs, the odd term first, each term one
 * rounding (fmaf: the product is exact), subnormals read and written as
 * zero; then + bias. The oracle of both micro-kernels. */
static float daz(float v) { return fabsf(v) < 0x1p-126f ? copysignf(0.0f, v) : v; }
/* The chain of one output over len values a[l as] and b[l bs] (an odd
 * len's pad of zeros). */
static float chain(const float *a, int64_t as, const float *b, int64_t bs, int len) {
    float acc = 0.0f;
    for (int l = 0; l < len; l += 2) {
        const float a1 = l + 1 < len ? rai_round_bf16(a[(l + 1) * as]) : 0.0f;
        const float b1 = l + 1 < len ? rai_round_bf16(b[(l + 1) * bs]) : 0.0f;
        acc = daz(fmaf(daz(a1), daz(b1), daz(acc)));
        acc = daz(fmaf(daz(rai_round_bf16(a[l * as])), daz(rai_round_bf16(b[l * bs])), daz(acc)));
    }
    return acc;
}
static void naive_bf16(float *y, const float *x, const float *w, const float *b, int m, int n, int k) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            const float acc = chain(x + (int64_t)i * k, 1, w + (int64_t)j * k, 1, k);
            y[(int64_t)i * n + j] = b ? acc + b[j] : acc;
        }
}

static int differ(const float *a, const float *b, long n) {
    int bad = 0;
    for (long i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof *a) != 0 && !(isnan(a[i]) && isnan(b[i]));
    return bad;
}

/* Where the kernel set has no bf16 product (avx2 here), a model's table
 * holds its weights rounded once, and the Linear is the float32 product of
 * the rounded input and those: the reference path without rounding the
 * weights at every call. */
static void bf16_reference_table(void) {
    enum { M = 23, N = 19, K = 41 };
    static float x[M * K], w[N * K], b[N], wr[N * K], xr[M * K], want[M * N], got[M * N];
    uint64_t s = 31;
    for (int i = 0; i < M * K; i++) x[i] = xr[i] = lcg(&s);
    for (int i = 0; i < N * K; i++) w[i] = wr[i] = lcg(&s);
    for (int i = 0; i < N; i++) b[i] = 0.1f * lcg(&s);
    rai_precision_weights(xr, M, K, RA_PRECISION_BF16);
    rai_precision_weights(wr, N, K, RA_PRECISION_BF16);
    CHECK(memcmp(w, wr, sizeof w) != 0, "the weights are not bfloat16 values already");
    if (!ra_kernel_supported(RA_KERNEL_AVX2)) return;
    const ra_kernel_id best = ra_kernel_current();
    ra_kernel_select(RA_KERNEL_AVX2);
    const float *ws[1] = {w};
    const int64_t ns[1] = {N}, ks[1] = {K};
    rai_packed *t = rai_packed_make(ws, ns, ks, 1, RA_PRECISION_BF16);
    const float *r = t ? (rai_packed_set(t), rai_packed_find_rounded(w, N, K)) : NULL;
    CHECK(r && memcmp(r, wr, sizeof wr) == 0 && !rai_packed_find_bf16(w, N, K),
          "the table of the avx2 set holds the rounded weights, no pairs");
    ra_linear_forward(want, xr, wr, b, M, N, K);
    const ra_precision was = rai_precision_set(RA_PRECISION_BF16);
    ra_linear_forward(got, x, w, b, M, N, K);
    rai_precision_set(was);
    CHECK(differ(got, want, M * N) == 0, "the reference path with the table differs");
    rai_packed_set(NULL);
    rai_packed_free(t);
    ra_kernel_select(best);
}

/* rai_gemm_bf16 on every micro-kernel the CPU runs and 1 and 2 threads
 * against naive_bf16, bit for bit (edge tiles, odd K, a NaN, an infinite
 * weight, a row of zeros, subnormal inputs); the Linear of precision bf16
 * with packed weights is it, GELU and residual epilogues included; it
 * agrees with the reference path (rounded values, float32 product) to
 * float32 rounding. */
static void bf16_product(void) {
    enum { M = 53, N = 45, K = 301 };
    static float x[M * K], w[N * K], b[N], want[M * N], got[M * N], ref[M * N], y0[M * N];
    uint64_t s = 4242;
    for (int i = 0; i < M * K; i++) x[i] = lcg(&s) * (1 + i % 7);
    for (int i = 0; i < N * K; i++) w[i] = lcg(&s);
    for (int i = 0; i < N; i++) b[i] = 0.01f * (float)i;
    memset(x + 5 * K, 0, K * sizeof *x);                                     /* zeros */
    for (int l = 0; l < K; l++) x[8 * K + l] *= 0x1p-126f;                   /* subnormal */
    x[6 * K + 17] = NAN;
    w[7 * K + 3] = INFINITY;
    rai_precision_weights(w, N, K, RA_PRECISION_BF16);   /* as a model in bf16 holds them */
    int isas[2] = {RA_GEMM_BF16_REF, -1}, nisa = 1;
    if (rai_bf16_micro() >= 0) isas[nisa++] = rai_bf16_micro();
    rai_bf16_weights pw;
    CHECK(rai_bf16_weights_pack(&pw, w, N, K, RA_GEMM_BF16_REF, 2) == 0, "pack");
    if (nisa > 1) {   /* packed with the vector rounding: the same panels */
        rai_bf16_weights pv;
        CHECK(rai_bf16_weights_pack(&pv, w, N, K, isas[1], 2) == 0 &&
                  memcmp(pv.bp, pw.bp, (size_t)(N + RA_GEMM_BF16_NR - 1) / RA_GEMM_BF16_NR *
                                           RA_GEMM_BF16_NR * ((K + 1) / 2 * 2) * sizeof *pw.bp) == 0,
              "the weights packed by micro-kernel %d's rounding differ", isas[1]);
        rai_bf16_weights_free(&pv);
    }
    for (int withb = 0; withb < 2; withb++) {
        naive_bf16(want, x, w, withb ? b : NULL, M, N, K);
        for (int ii = 0; ii < nisa; ii++)
            for (int nt = 1; nt <= 2; nt++) {
                memset(got, 0x55, sizeof got);
                CHECK(rai_gemm_bf16(got, x, withb ? b : NULL, M, N, K, &pw, NULL, NULL, NULL, isas[ii], nt) == 0,
                      "product");
                const int bad = differ(got, want, M * N);
                CHECK(bad == 0, "bf16 micro-kernel %d, %d threads, bias %d: %d of %d outputs differ from "
                      "the formula", isas[ii], nt, withb, bad, M * N);
            }
    }
    /* few rows (tasks by groups of panels, some threads without work):
     * the same bits (want: with bias) */
    for (int ii = 0; ii < nisa; ii++)
        for (int rows = 1; rows <= 36; rows += 7) {
            memset(got, 0x55, sizeof got);
            CHECK(rai_gemm_bf16(got, x, b, rows, N, K, &pw, NULL, NULL, NULL, isas[ii], 2) == 0 &&
                      differ(got, want, rows * N) == 0,
                  "bf16 micro-kernel %d, 2 threads, %d rows: differs from the formula", isas[ii], rows);
        }
    CHECK(isnan(want[6 * N + 2]) && !isfinite(want[2 * N + 7]) && isfinite(want[2 * N + 6]),
          "a NaN input's row is NaN, an infinite weight's column not finite, the rest finite");
    CHECK(want[5 * N + 4] == b[4] && want[8 * N + 4] == b[4], "a row of zeros, or of subnormals, gives the bias");
    /* bfloat16's error: about 2^-9 of each term, averaging out */
    double num = 0, den = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            if (i == 6 || j == 7 || i == 8) continue;
            double e = b[j];
            for (int l = 0; l < K; l++) e += (double)x[i * K + l] * w[j * K + l];
            num += (want[i * N + j] - e) * (want[i * N + j] - e), den += e * e;
        }
    CHECK(sqrt(num / den) > 1e-4 && sqrt(num / den) < 1e-2, "bf16 relative error %.3g", sqrt(num / den));
    /* the Linear in precision bf16, its weights packed in a table: this
     * product, where the kernel set has it; else the reference path */
    const float *ws[1] = {w};
    const int64_t ns[1] = {N}, ks[1] = {K};
    rai_packed *t = rai_packed_make(ws, ns, ks, 1, RA_PRECISION_BF16);
    CHECK(t && !rai_packed_find(w, N, K), "a bf16 table holds no int8 weights");
    const rai_packed *before = rai_packed_set(t);
    const int fast = rai_bf16_micro() >= 0;   /* else the table holds the rounded values */
    CHECK(fast ? rai_packed_find_bf16(w, N, K) && !rai_packed_find_bf16(w, N, K - 1)
               : rai_packed_find_rounded(w, N, K) && !rai_packed_find_rounded(w, N, K - 1),
          "found by address and size");
    static float xr[M * K];   /* the reference path: the rounded values' float32 product */
    memcpy(xr, x, sizeof x);
    rai_precision_weights(xr, M, K, RA_PRECISION_BF16);
    ra_linear_forward(ref, xr, w, b, M, N, K);
    const ra_precision was = rai_precision_set(RA_PRECISION_BF16);
    ra_linear_forward(got, x, w, b, M, N, K);
    CHECK(differ(got, fast ? want : ref, M * N) == 0, "the bf16 Linear is the %s",
          fast ? "bf16 product" : "reference path");
    rai_packed_set(NULL);
    ra_linear_forward(got, x, w, b, M, N, K);   /* no table: w packed at the call */
    rai_packed_set(t);
    CHECK(differ(got, fast ? want : ref, M * N) == 0, "the bf16 Linear without a table differs");
    /* the two paths: the same values summed in another order (but for the
     * subnormal row, which the bf16 product reads as zeros) */
    int far = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            if (i == 6 || j == 7 || i == 8) continue;
            double mag = fabs(b[j]);
            for (int l = 0; l < K; l++) mag += fabs((double)rai_round_bf16(x[i * K + l]) * rai_round_bf16(w[j * K + l]));
            far += fabs((double)ref[i * N + j] - want[i * N + j]) > 2.0 * K * 0x1p-24 * mag;
        }
    CHECK(far == 0, "the reference path and the bf16 product differ by more than float32 rounding in %d outputs", far);
    /* the epilogues: GELU, and the sum added into rows of a residual stream
     * through a row map (-1: skipped) */
    static float res[(M + 3) * N], want_res[(M + 3) * N];
    static int32_t map[M];
    for (int i = 0; i < M; i++) map[i] = i % 5 == 2 ? -1 : (i * 7) % (M + 3);
    for (int i = 0; i < (M + 3) * N; i++) res[i] = want_res[i] = lcg(&s);
    rai_linear_fused(got, x, w, b, M, N, K, 1, NULL, NULL);
    rai_linear_fused(y0, x, w, b, M, N, K, 0, res, map);
    rai_precision_set(was);
    rai_packed_set(before);
    memcpy(y0, fast ? want : ref, sizeof y0);
    ra_gelu_forward(y0, y0, M * N);
    CHECK(differ(got, y0, M * N) == 0, "bf16 with GELU differs");
    const float *plain = fast ? want : ref;
    for (int i = 0; i < M; i++)
        for (int j = 0; map[i] >= 0 && j < N; j++) want_res[map[i] * N + j] += plain[i * N + j];
    CHECK(differ(res, want_res, (M + 3) * N) == 0, "bf16 added into a residual stream through a row map differs");
    CHECK(!rai_precision_failed(), "no failure recorded");
    rai_packed_free(t);
    rai_bf16_weights_free(&pw);
    CHECK(rai_gemm_bf16(got, x, b, M, N, K - 1, &pw, NULL, NULL, NULL, RA_GEMM_BF16_REF, 1) == -1,
          "weights of another size refused");
    printf("bf16 product: %d micro-kernels bit for bit against the formula; the Linear runs the %s\n",
           nisa, fast ? "VDPBF16PS product" : "reference path");
    bf16_reference_table();
}

/* The MLP of precisions bf16 and int8 a block of rows at a time
 * (rai_mlp_fused), on every kernel set: the bits of its LayerNorm and two
 * Linear layers one after the other, into y or added into a residual
 * stream (int8: also the stream it reads, as a block's MLP does), on an
 * odd hidden size and rows past a block, 1 to 3 threads. */
static void mlp_blocks(ra_precision prec) {
    enum { M = 101, C = 40, H = 75 };
    static float x[M * C], w1[H * C], b1[H], w2[C * H], b2[C], hid[M * H], g[C], be[C];
    static float want[M * C], wantn[M * C], got[M * C], res[M * C], want_res[M * C], xn[M * C];
    uint64_t s = 99;
    for (int i = 0; i < M * C; i++) x[i] = lcg(&s) * 3;
    for (int i = 0; i < H * C; i++) w1[i] = lcg(&s), w2[i] = lcg(&s);
    for (int i = 0; i < H; i++) b1[i] = 0.1f * lcg(&s);
    for (int i = 0; i < C; i++) b2[i] = 0.1f * lcg(&s), g[i] = 1 + lcg(&s), be[i] = lcg(&s);
    const rai_ln ln = {g, be, 1e-5f};
    const char *name = prec == RA_PRECISION_INT8 ? "int8" : "bf16";
    const float *ws[2] = {w1, w2};
    const int64_t ns[2] = {H, C}, ks[2] = {C, H};
    rai_packed *t = rai_packed_make(ws, ns, ks, 2, prec);
    CHECK(t != NULL, "packed table");
    const rai_packed *before = rai_packed_set(t);
    const ra_precision was = rai_precision_set(prec);
    const ra_kernel_id best = ra_kernel_current();
    int sets = 0;
    for (int kset = 0; kset < RA_KERNEL_COUNT; kset++) {
        if (!ra_kernel_supported((ra_kernel_id)kset)) continue;
        CHECK(ra_kernel_select((ra_kernel_id)kset) == RA_OK, "select %d", kset);
        const char *kn = ra_kernel_name((ra_kernel_id)kset);
        rai_linear_fused(hid, x, w1, b1, M, H, C, 1, NULL, NULL);
        rai_linear_fused(want, hid, w2, b2, M, C, H, 0, NULL, NULL);
        rai_layernorm_rows(xn, x, NULL, M, C, g, be, ln.eps);
        rai_linear_fused(hid, xn, w1, b1, M, H, C, 1, NULL, NULL);
        rai_linear_fused(wantn, hid, w2, b2, M, C, H, 0, NULL, NULL);
        CHECK(differ(want, wantn, M * C) > M * C / 2, "the LayerNorm changes the outputs");
        memset(hid, 0, sizeof hid);
        rai_mlp_fused(got, x, NULL, w1, b1, w2, b2, M, C, H, hid, NULL);
        CHECK(differ(got, want, M * C) == 0, "the %s MLP differs from its two layers (%s)", name, kn);
        rai_mlp_fused(got, x, &ln, w1, b1, w2, b2, M, C, H, hid, NULL);
        CHECK(differ(got, wantn, M * C) == 0, "the %s MLP of a LayerNorm differs (%s)", name, kn);
        for (int i = 0; i < M * C; i++) res[i] = want_res[i] = lcg(&s);
        for (int i = 0; i < M * C; i++) want_res[i] += want[i];
        rai_mlp_fused(got, x, NULL, w1, b1, w2, b2, M, C, H, hid, res);
        CHECK(differ(res, want_res, M * C) == 0, "the %s MLP added into a residual stream differs (%s)",
              name, kn);
        memcpy(got, x, sizeof got);
        rai_mlp_fused(got, got, NULL, w1, b1, w2, b2, M, C, H, hid, NULL);
        CHECK(differ(got, want, M * C) == 0, "the %s MLP in place differs (%s)", name, kn);
        /* x += MLP(LayerNorm(x)), reading the stream it adds into */
        memcpy(res, x, sizeof res);
        for (int i = 0; i < M * C; i++) want_res[i] = x[i] + wantn[i];
        rai_mlp_fused(got, res, &ln, w1, b1, w2, b2, M, C, H, hid, res);
        CHECK(differ(res, want_res, M * C) == 0, "the %s MLP of the stream's LayerNorm added into it "
              "differs (%s)", name, kn);
        /* any rows, 1 to 3 threads: the same bits */
        const int threads = ra_threads_get();
        for (int nt = 1; nt <= 3; nt++)
            for (int rows = 5; rows <= M; rows += 24) {
                ra_threads_set(nt);
                memset(got, 0x55, sizeof got);
                rai_mlp_fused(got, x, &ln, w1, b1, w2, b2, rows, C, H, hid, NULL);
                CHECK(differ(got, wantn, rows * C) == 0, "the %s MLP on %d rows, %d threads, differs "
                      "(%s)", name, rows, nt, kn);
            }
        ra_threads_set(threads);
        sets++;
    }
    ra_kernel_select(best);
    double e = 0;
    for (int i = 0; i < M * C; i++) e += fabs(want[i]);
    CHECK(e > 1.0, "the MLP computes something");
    CHECK(!rai_precision_failed(), "no failure recorded");
    rai_precision_set(was);
    rai_packed_set(before);
    rai_packed_free(t);
    printf("%s MLP: %d kernel sets, the bits of its layers\n", name, sets);
}

/* The same bits, NaN for NaN (a NaN's payload is free). */
static int same(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)); }

/* Every int8 micro-kernel the CPU runs against the scalar one (the
 * oracle), bit for bit, through rai_gemm_i8: sizes on and off the edges of
 * the 6 x 16 tiles and the VNNI kernel's 12 x 32 blocks (K = 1, K not a
 * multiple of 4, M past a task of 48 rows), a row of zeros, rows with a
 * NaN and an infinity, a column of infinite and one of zero weights; each
 * with and without bias, with GELU, and added into a residual stream
 * through a row map with skipped (negative) rows. */
static void int8_kernels(void) {
    static const int sizes[][3] = {{1, 1, 1},     {5, 15, 7},    {6, 16, 4},   {12, 32, 96},
                                   {13, 33, 1},   {37, 77, 301}, {103, 64, 96}, {49, 100, 5},
                                   {60, 128, 33}, {24, 48, 768}};
    int isas[2], nisa = 0;
    if (ra_kernel_supported(RA_KERNEL_AVX2)) isas[nisa++] = RA_GEMM_AVX2;
    if (rai_cpu_has_vnni()) isas[nisa++] = RA_GEMM_AVX512_VNNI;
    uint64_t s = 4242;
    for (size_t c = 0; c < sizeof sizes / sizeof *sizes; c++) {
        const int m = sizes[c][0], n = sizes[c][1], k = sizes[c][2], rows = m + 3;
        float *x = malloc(sizeof *x * (size_t)m * k), *w = malloc(sizeof *w * (size_t)n * k);
        float *b = malloc(sizeof *b * (size_t)n), *want = malloc(sizeof *want * (size_t)rows * n);
        float *got = malloc(sizeof *got * (size_t)rows * n), *res0 = malloc(sizeof *res0 * (size_t)rows * n);
        int32_t *map = malloc(sizeof *map * (size_t)m);
        for (int i = 0; i < m * k; i++) x[i] = lcg(&s) * (float)(1 + i % 5);
        for (int i = 0; i < n * k; i++) w[i] = lcg(&s);
        for (int j = 0; j < n; j++) b[j] = lcg(&s);
        for (int i = 0; i < rows * n; i++) res0[i] = lcg(&s);
        for (int i = 0; i < m; i++) map[i] = i % 4 == 1 ? -1 : (i * 5 + 2) % rows;
        if (m > 3) {
            memset(x + 1 * k, 0, sizeof *x * (size_t)k);   /* zeros */
            x[2 * k + k / 2] = NAN;
            x[3 * k] = -INFINITY;
        }
        if (n > 5) {
            w[(int64_t)4 * k + k - 1] = INFINITY;
            memset(w + (int64_t)5 * k, 0, sizeof *w * (size_t)k);
        }
        for (int v = 0; v < 5; v++) {   /* plain, bias, GELU + bias, res + map, res + bias */
            const float *bias = v == 1 || v == 2 || v == 4 ? b : NULL;
            void (*gelu)(float *, const float *, int64_t) = v == 2 ? rai_nn_gelu_ref : NULL;
            const int useres = v >= 3;
            const int32_t *rmap = v == 3 ? map : NULL;
            const int64_t outn = (int64_t)(useres ? rows : m) * n;
            memcpy(want, res0, sizeof *want * (size_t)rows * n);
            CHECK(rai_gemm_i8(want, x, w, bias, m, n, k, NULL, gelu, useres ? want : NULL, rmap,
                              RA_GEMM_REF, 1) == 0, "oracle");
            for (int a = 0; a < nisa; a++)
                for (int nt = 1; nt <= 2; nt++)
                    for (int once = 0; once < 2; once++) {
                        rai_i8_weights pw;
                        CHECK(!once || rai_i8_weights_pack(&pw, w, n, k, isas[a], nt) == 0, "pack");
                        memcpy(got, res0, sizeof *got * (size_t)rows * n);
                        CHECK(rai_gemm_i8(got, x, once ? NULL : w, bias, m, n, k, once ? &pw : NULL,
                                          gelu, useres ? got : NULL, rmap, isas[a], nt) == 0,
                              "product");
                        if (once) rai_i8_weights_free(&pw);
                        int bad = 0;
                        for (int64_t i = 0; i < outn; i++) bad += !same(got[i], want[i]);
                        CHECK(bad == 0, "int8 micro-kernel %d, %d x %d x %d, case %d, %d threads, "
                              "packed once %d: %d of %lld outputs differ from the scalar kernel's",
                              isas[a], m, n, k, v, nt, once, bad, (long long)outn);
                    }
        }
        free(x), free(w), free(b), free(want), free(got), free(res0), free(map);
    }
    printf("int8 micro-kernels: ref%s%s, bit for bit\n", nisa > 0 ? ", avx2" : "",
           nisa > 1 ? ", avx512_vnni" : "");
}

/* The vector input quantisers against the scalar one, bit for bit (the
 * bytes, the zero point, the scale's bits or NaN): lengths around the
 * vector widths, one-signed rows, zeros and -0, halves of the step (ties
 * to even, exact and near), a NaN or an infinity at the start, in the
 * middle or in the tail. */
static void int8_quantisers(void) {
    typedef void (*qrow)(uint8_t *, int32_t *, float *, const float *, int);
    qrow fns[2];
    const char *names[2];
    int nf = 0;
#ifdef RA_HAVE_X86_KERNELS
    if (ra_kernel_supported(RA_KERNEL_AVX2)) fns[nf] = rai_i8_quantize_row_avx2, names[nf++] = "avx2";
    if (rai_cpu_has_vnni()) fns[nf] = rai_i8_quantize_row_avx512, names[nf++] = "avx512";
#endif
    static const int ks[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129, 192, 768, 769};
    enum { KMAX = 769 };
    static float x[KMAX];
    static uint8_t want[KMAX], got[KMAX + 1];   /* got[k]: a byte past the row */
    uint64_t s = 99;
    int rows = 0;
    for (size_t c = 0; c < sizeof ks / sizeof *ks; c++)
        for (int kind = 0; kind < 12; kind++) {
            const int k = ks[c];
            for (int l = 0; l < k; l++) x[l] = lcg(&s) * 3.0f;
            if (kind == 1) for (int l = 0; l < k; l++) x[l] = fabsf(x[l]) + 0.5f;
            if (kind == 2) for (int l = 0; l < k; l++) x[l] = -fabsf(x[l]);
            if (kind == 3) for (int l = 0; l < k; l++) x[l] = l % 2 ? -0.0f : 0.0f;
            if (kind == 4)   /* range 127 from -63.5: scale 1, values on halves */
                for (int l = 0; l < k; l++) x[l] = l == 0 ? -63.5f : l == 1 ? 63.5f : (float)(l % 50) - 24.5f;
            if (kind == 5) x[0] = NAN;
            if (kind == 6) x[k / 2] = INFINITY;
            if (kind == 7) x[k - 1] = -INFINITY;
            if (kind == 8) x[k - 1] = NAN, x[0] = -0.0f;
            if (kind == 10) x[17 % k] = -INFINITY;   /* the second of four vectors */
            if (kind == 11) x[(k - 1) / 2 % 64 + (k - 1) / 128 * 64] = NAN;
            if (kind == 9) {   /* near halves of an inexact step: x times the reciprocal, not x / s */
                const float step = (0.27f - -1.0f) / 127.0f;
                for (int l = 0; l < k; l++) x[l] = ((float)(l % 127) - 99.5f) * step;
                x[0] = -1.0f, x[k - 1] = k > 1 ? 0.27f : x[0];
            }
            int32_t zw, zg;
            float sw, sg;
            rai_i8_quantize_row(want, &zw, &sw, x, k);
            for (int f = 0; f < nf; f++) {
                memset(got, 0xAA, sizeof got);
                fns[f](got, &zg, &sg, x, k);
                CHECK(memcmp(got, want, (size_t)k) == 0 && zg == zw && same(sg, sw) && got[k] == 0xAA,
                      "quantiser %s, k %d, row kind %d: other bytes, zero point (%d, %d) or scale "
                      "(%a, %a), or wrote past k", names[f], k, kind, zg, zw, sg, sw);
            }
            rows++;
        }
    printf("int8 input quantisers: %d vector ones against the scalar on %d rows\n", nf, rows);
}

/* Network fixture NAME of dir: its model's path into model (512 bytes),
 * its input file open in *in and tensor x in *t, x read (malloc'd; NULL,
 * with a failed check, where the file or tensor cannot be read). */
static float *fixture(const char *dir, const char *name, char *model, ra_st_file **in,
                      const ra_st_tensor **t) {
    char input[512];
    snprintf(model, 512, "%s/%s.model.safetensors", dir, name);
    snprintf(input, sizeof input, "%s/%s.input.safetensors", dir, name);
    *in = NULL, *t = NULL;
    CHECK(ra_st_open(in, input) == RA_OK, "%s", ra_last_error());
    *t = *in ? ra_st_find(*in, "x") : NULL;
    float *x = *t ? malloc((size_t)(*t)->numel * sizeof *x) : NULL;
    CHECK(x && ra_st_read_f32(x, *in, *t) == RA_OK, "%s: x", name);
    return x;
}

/* The model file opened in precision p (NULL, with a failed check, where
 * it cannot be). */
static ra_model *open_in(const char *model, ra_precision p, const char *name) {
    ra_model *m = NULL;
    ra_load_options o;
    memset(&o, 0, sizeof o);
    o.precision = p;
    CHECK(ra_model_open(&m, model, &o) == RA_OK, "%s: %s", name, ra_last_error());
    return m;
}

/* A network's forward in int8 on the avx512 set with and without VNNI
 * (rai_cpu_hide_vnni: its int8 product on VPDPBUSD, then on AVX2): the
 * same bits. */
static void int8_vnni_network(const char *dir, const char *name) {
    if (!rai_cpu_has_vnni() || !ra_kernel_supported(RA_KERNEL_AVX512)) return;
    const ra_kernel_id was = ra_kernel_current();
    ra_kernel_select(RA_KERNEL_AVX512);
    char model[512];
    ra_st_file *in;
    const ra_st_tensor *t;
    float *x = fixture(dir, name, model, &in, &t), *y[2] = {NULL, NULL};
    ra_model *m = open_in(model, RA_PRECISION_INT8, name);
    int nd = 0;
    int64_t ys[4], n = 1;
    for (int hide = 0; m && x && hide < 2; hide++) {
        rai_cpu_hide_vnni(hide);
        CHECK(rai_nn_kernel_active()->gemm_i8_micro == (hide ? RA_GEMM_AVX2 : RA_GEMM_AVX512_VNNI),
              "the avx512 set's int8 micro-kernel");
        CHECK(ra_model_forward(m, &y[hide], &nd, ys, x, t->ndim, t->shape) == RA_OK, "%s: %s",
              name, ra_last_error());
    }
    rai_cpu_hide_vnni(0);
    for (int d = 0; d < nd; d++) n *= ys[d];
    CHECK(y[0] && y[1] && memcmp(y[0], y[1], sizeof *y[0] * (size_t)n) == 0,
          "%s in int8: VPDPBUSD and AVX2 give other logits", name);
    if (y[0] && y[1]) printf("%s in int8: the same logits on VPDPBUSD and AVX2\n", name);
    free(y[0]), free(y[1]), free(x);
    ra_model_free(m);
    ra_st_close(in);
    ra_kernel_select(was);
}

/* The vector rounding and pair packing of the bf16 products against the
 * scalar ones, bit for bit: random values, and in every lane the values
 * where VCVTNE(2)PS2BF16 (which takes subnormals as zero) and the tie
 * rule could part: subnormals (those that round up to the smallest
 * normal too), ties, the largest float, infinities, quiet and signalling
 * NaNs, zeros; tails of 1 to 15 columns, r1 NULL, with and without sums. */
static void bf16_vector_roundings(void) {
#ifdef RA_HAVE_X86_KERNELS
    if (rai_bf16_micro() < 0) return;
    enum { N = 77, ROWS = 6 };
    static const uint32_t special[] = {
        0x00000001u, 0x007FFFFFu, 0x007F8000u, 0x007F7FFFu, 0x80400000u, 0x807FFFFFu,
        0x00008000u, 0x00018000u, 0x3F808000u, 0x3F818000u, 0x7F7FFFFFu, 0xFF7FFFFFu,
        0x7F800000u, 0xFF800000u, 0x7FC00001u, 0x7F800001u, 0xFFA12345u, 0x00800000u,
        0x80000000u, 0x00000000u, 0x3F807FFFu, 0x3F808001u};
    const int ns = (int)(sizeof special / sizeof *special);
    static float x[ROWS * N];
    static uint16_t want[2 * N + 2], got[2 * N + 2], wr[ROWS * (N + 1)], gr[ROWS * (N + 1)];
    uint64_t s = 99;
    int cases = 0;
    for (int round = 0; round < 64; round++) {
        for (int i = 0; i < ROWS * N; i++) {
            uint64_t r = (s = s * 6364136223846793005ull + 1442695040888963407ull) >> 33;
            x[i] = r % 5 == 0 ? bits(special[(r >> 8) % (uint64_t)ns])
                 : r % 5 == 1 ? bits((uint32_t)(r >> 3) & 0x80FFFFFFu)   /* tiny */
                              : lcg(&s) * (float)(1 + r % 13);
        }
        if (round == 0)   /* one lane of one vector subnormal, the rest normal */
            for (int i = 0; i < ROWS * N; i++) x[i] = i == 20 ? bits(0x007F9000u) : 1.5f;
        for (int n = 1; n <= N; n += (n < 20 ? 1 : 19))
            for (int mode = 0; mode < 3; mode++) {
                double sw[N], sg[N];
                for (int j = 0; j < n; j++) sw[j] = sg[j] = 0.5 * j;
                const float *r1 = mode == 1 ? NULL : x + N;
                memset(want, 0xAB, sizeof want), memset(got, 0xAB, sizeof got);
                rai_bf16_pack_pairs(want, x, r1, n, mode == 2 ? sw : NULL);
                rai_bf16_pack_pairs_avx512(got, x, r1, n, mode == 2 ? sg : NULL);
                CHECK(memcmp(want, got, sizeof want) == 0, "round %d, n %d, mode %d: the pairs differ",
                      round, n, mode);
                int sums_differ = 0;   /* the same bits, or both NaN (a NaN's sign and
                                          payload follow the order of the additions) */
                for (int j = 0; mode == 2 && j < n; j++)
                    sums_differ += memcmp(&sw[j], &sg[j], sizeof sw[j]) != 0 &&
                                   !(isnan(sw[j]) && isnan(sg[j]));
                CHECK(!sums_differ, "round %d, n %d: %d of the pairs' sums differ", round, n,
                      sums_differ);
                cases++;
            }
        for (int k = 1; k <= N; k += (k < 20 ? 1 : 19)) {
            memset(wr, 0xCD, sizeof wr), memset(gr, 0xCD, sizeof gr);
            rai_bf16_round_rows(wr, N + 1, x, N, ROWS, k);
            rai_bf16_round_rows_avx512(gr, N + 1, x, N, ROWS, k);
            CHECK(memcmp(wr, gr, sizeof wr) == 0, "round %d, k %d: the rounded rows differ", round, k);
            cases++;
        }
    }
    printf("bf16 vector rounding and pairs: %d cases bit for bit against the scalar\n", cases);
#endif
}

/* The products of bf16 training on every micro-kernel the CPU runs, at 1
 * and 2 threads, against the formula bit for bit (edge tiles, odd sizes,
 * a NaN, zeros): fc1's forward keeping GELU' (weights packed at the
 * call), dX = dY W (times GELU', or added), dW += dY^T X over blocks of
 * 512 rows (with db or without). */
static void bf16_training_products(void) {
    enum { M = 1101, N = 45, K = 37 };
    static float dy[M * N], w[N * K], x[M * K], gd[M * K], b[K], d0[M * K], c0[N * K];
    static float want[M * K], want2[M * K], wantc[N * K], got[M * K], got2[M * K], gotc[N * K];
    uint64_t s = 777;
    for (int i = 0; i < M * N; i++) dy[i] = lcg(&s) * (1 + i % 5);
    for (int i = 0; i < N * K; i++) w[i] = lcg(&s), c0[i] = lcg(&s);
    for (int i = 0; i < M * K; i++) x[i] = lcg(&s), gd[i] = lcg(&s), d0[i] = lcg(&s);
    for (int i = 0; i < K; i++) b[i] = 0.1f * lcg(&s);
    memset(dy + 9 * N, 0, N * sizeof *dy);
    dy[600 * N + 3] = NAN;
    const rai_nn_kernel *kn = rai_nn_kernel_active();
    int isas[2] = {RA_GEMM_BF16_REF, -1}, nisa = 1;
    if (rai_bf16_micro() >= 0) isas[nisa++] = rai_bf16_micro();
    for (int ii = 0; ii < nisa; ii++)
        for (int nt = 1; nt <= 2; nt++) {
            const int isa = isas[ii];
            /* the forward of fc1: g = GELU(x w^T + b) (x (M, K) against w
             * read as (K, N): its first K rows) */
            naive_bf16(want, x, w, b, M, K, K);
            kn->gelu(want, want, (int64_t)M * K);
            const rai_bf16_epilogue fc1 = {.gelu = kn->gelu};
            CHECK(rai_gemm_bf16_ext(got, x, w, 0, b, M, K, K, NULL, &fc1, isa, nt) == 0, "fc1");
            CHECK(differ(got, want, M * K) == 0,
                  "micro-kernel %d, %d threads: GELU differs from the formula", isa, nt);
            /* dX = dY W, times gd; and added into d0 */
            for (int i = 0; i < M; i++)
                for (int j = 0; j < K; j++) {
                    const float v = chain(dy + (int64_t)i * N, 1, w + j, K, N);
                    want[i * K + j] = v * gd[i * K + j], want2[i * K + j] = d0[i * K + j] + v;
                }
            const rai_bf16_epilogue mul = {.gm = gd}, add = {.res = got2};
            memcpy(got2, d0, sizeof d0);
            CHECK(rai_gemm_bf16_ext(got, dy, w, 1, NULL, M, K, N, NULL, &mul, isa, nt) == 0 &&
                      rai_gemm_bf16_ext(got2, dy, w, 1, NULL, M, K, N, NULL, &add, isa, nt) == 0, "dX");
            CHECK(differ(got, want, M * K) == 0, "micro-kernel %d, %d threads: dX times GELU' differs", isa, nt);
            CHECK(differ(got2, want2, M * K) == 0, "micro-kernel %d, %d threads: dX added differs", isa, nt);
            /* dW += dY^T X, blocks of 512 rows in order */
            memcpy(wantc, c0, sizeof c0), memcpy(gotc, c0, sizeof c0);
            for (int i0 = 0; i0 < M; i0 += 512)
                for (int r = 0; r < N; r++)
                    for (int j = 0; j < K; j++)
                        wantc[r * K + j] += chain(dy + (int64_t)i0 * N + r, N, x + (int64_t)i0 * K + j, K,
                                                  M - i0 < 512 ? M - i0 : 512);
            /* and db += dY's column sums as they are, in double, rows in order */
            float db[N], wantdb[N];
            for (int r = 0; r < N; r++) {
                double acc = 0;
                for (int i = 0; i < M; i++) acc += dy[(int64_t)i * N + r];
                db[r] = 0.25f * (float)r, wantdb[r] = (float)((double)db[r] + acc);
            }
            CHECK(rai_gemm_bf16_tn(gotc, nt == 2 ? db : NULL, dy, x, M, N, K, isa, nt) == 0, "dW");
            CHECK(differ(gotc, wantc, N * K) == 0, "micro-kernel %d, %d threads: dW differs", isa, nt);
            CHECK(nt == 1 || differ(db, wantdb, N) == 0, "micro-kernel %d: db differs", isa);
        }
    CHECK(isnan(wantc[3 * K]) && !isnan(wantc[4 * K]), "a NaN of dY reaches its column of dW only");
    CHECK(rai_gemm_bf16_ext(got, dy, NULL, 1, NULL, M, K, N, NULL, NULL, RA_GEMM_BF16_REF, 1) == -1,
          "no weights refused");
    printf("bf16 training products: %d micro-kernels bit for bit against the formula\n", nisa);
}

static double rel_l2(const float *a, const float *b, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    return sqrt(num / (den > 0 ? den : 1));
}

/* A network fixture on a batch of 8 (its input and scaled copies) in
 * each precision on 1 to 3 threads: the blocks' attention in chunks of
 * windows (rai_attn_layer_forward_chunks) gives the bits of the whole
 * calls, and the chunks were taken (the first stage's 8 x 4 windows: 4
 * chunks per thread and more). side > 0: random images of side x side
 * instead (40: a Swin's 10 x 10 tokens padded to 12 x 12, windows with
 * padding tokens). */
static void chunked_blocks(const char *dir, const char *name, int side) {
    char model[512];
    ra_st_file *in;
    const ra_st_tensor *t;
    float *x0 = fixture(dir, name, model, &in, &t);
    if (!in) return;
    int64_t shape[8];
    for (int d = 0; t && d < t->ndim; d++) shape[d] = t->shape[d];
    if (side > 0 && t) shape[2] = shape[3] = side;
    const int64_t B = 8, per = t ? t->numel / t->shape[0] : 0;
    const int64_t per_x = t ? (side > 0 ? shape[1] * side * side : per) : 0;
    float *x = x0 ? malloc((size_t)(B * per_x) * sizeof *x) : NULL;
    uint64_t seed = 31;
    for (int64_t i = 0; x && i < B * per_x; i++)
        x[i] = side > 0 ? 2.0f * lcg(&seed) : x0[i % per] * (1.0f + 0.125f * (float)(i / per));
    shape[0] = B;
    const int threads = ra_threads_get();
    int compared = 0;
    for (int p = 0; p < 3 && x; p++) {
        ra_model *m = open_in(model, (ra_precision)p, name);
        for (int nt = 1; m && nt <= 3; nt++) {
            ra_threads_set(nt);
            float *y[2] = {NULL, NULL};
            int nd[2];
            int64_t ys[2][4];
            for (int whole = 0; whole < 2; whole++) {
                const int was = rai_attn_chunk_tokens_set(whole ? 0 : 288);
                CHECK(ra_model_forward(m, &y[whole], &nd[whole], ys[whole], x, t->ndim, shape) == RA_OK,
                      "%s: %s", name, ra_last_error());
                rai_attn_chunk_tokens_set(was);
            }
            if (y[0] && y[1]) {
                int64_t n = 1;
                for (int d = 0; d < nd[0]; d++) n *= ys[0][d];
                CHECK(differ(y[0], y[1], (long)n) == 0, "%s, %s, %d threads: the chunks' outputs are "
                      "not the whole calls' bits", name, ra_precision_name((ra_precision)p), nt);
                compared++;
            }
            free(y[0]), free(y[1]);
        }
        ra_model_free(m);
    }
    ra_threads_set(threads);
    free(x0), free(x);
    ra_st_close(in);
    CHECK(compared == 9, "%s: %d of 9 comparisons", name, compared);
    printf("%s%s: attention in chunks of windows = whole calls, 3 precisions x 1-3 threads\n", name,
           side > 0 ? " (padded windows)" : "");
}

/* A network fixture in each precision: only its Linear weights change,
 * its logits move by about the precision's step and no more. */
static void network(const char *dir, const char *name, double lo_bf16, double hi_bf16,
                    double lo_int8, double hi_int8) {
    char model[512];
    ra_st_file *in;
    const ra_st_tensor *t;
    float *x = fixture(dir, name, model, &in, &t);
    if (!in) return;
    float *y[3] = {NULL, NULL, NULL};
    int64_t n = 0;
    for (int p = 0; p < 3 && x; p++) {
        ra_model *m = open_in(model, (ra_precision)p, name);
        if (!m) continue;
        CHECK(ra_model_precision(m) == (ra_precision)p, "precision %d", p);
        if (p) {   /* int8: the Linear weights quantised, nothing else; bf16: nothing */
            ra_model *ref = NULL;
            CHECK(ra_model_load(&ref, model) == RA_OK, "%s", ra_last_error());
            for (int i = 0; ref && i < ra_model_param_count(m); i++) {
                const ra_param_info *a = ra_model_param(m, i), *r = ra_model_param(ref, i);
                if (a->offset < 0) continue;
                float *wa = ra_model_weights(m) + a->offset, *wr = ra_model_weights(ref) + r->offset;
                const int lin = a->ndim == 2 && (strstr(a->name, "qkv.weight") || strstr(a->name, "proj.weight") ||
                                                 strstr(a->name, "fc1.weight") || strstr(a->name, "fc2.weight") ||
                                                 strstr(a->name, "reduction.weight") || !strcmp(a->name, "head.weight"))
                                && !strstr(a->name, "patch_embed");
                if (lin && p == RA_PRECISION_INT8) rai_precision_weights(wr, r->shape[0], r->shape[1], (ra_precision)p);
                CHECK(memcmp(wa, wr, (size_t)a->numel * sizeof *wa) == 0, "%s %s: %s %s", name,
                      ra_precision_name((ra_precision)p), a->name, lin ? "not rounded as it should" : "changed");
            }
            ra_model_free(ref);
            CHECK(ra_model_set_precision(m, RA_PRECISION_FP32) == RA_ERR_ARG, "back to fp32 refused");
        }
        int nd;
        int64_t ys[4];
        CHECK(ra_model_forward(m, &y[p], &nd, ys, x, t->ndim, t->shape) == RA_OK, "%s: %s", name, ra_last_error());
        n = 1;
        for (int d = 0; d < nd; d++) n *= ys[d];
        if (p == RA_PRECISION_INT8) {   /* training is float32 or bf16 */
            float *yt = NULL;
            CHECK(ra_model_forward_train(m, &yt, &nd, ys, x, t->ndim, t->shape, NULL) == RA_ERR_ARG,
                  "training in %s refused", ra_precision_name((ra_precision)p));
            free(yt);
        }
        ra_model_free(m);
    }
    if (y[0] && y[1] && y[2]) {
        const double e1 = rel_l2(y[1], y[0], (long)n), e2 = rel_l2(y[2], y[0], (long)n);
        CHECK(e1 >= lo_bf16 && e1 <= hi_bf16, "%s: bf16 moves the logits by %.3g of their norm, "
              "expected %.3g .. %.3g", name, e1, lo_bf16, hi_bf16);
        CHECK(e2 >= lo_int8 && e2 <= hi_int8, "%s: int8 moves the logits by %.3g of their norm, "
              "expected %.3g .. %.3g", name, e2, lo_int8, hi_int8);
        printf("%s: relative L2 change of the logits: bf16 %.3g, int8 %.3g\n", name, e1, e2);
    }
    for (int p = 0; p < 3; p++) free(y[p]);
    free(x);
    ra_st_close(in);
}

/* ra_model_save as int8: a quarter of the bytes, read back as what
 * precision int8 holds (bit for bit); its scales are required. */
/* A training step of a network fixture in bf16 against fp32: its
 * gradient (every parameter and x) moves from fp32's by the precision's
 * step (relative L2 lo .. hi, not 0), on the bf16 product and on the
 * reference path (the avx2 kernel set), and the float32 weights stay
 * as they are (the master weights of a training run). */
static void bf16_training(const char *dir, const char *name, double lo, double hi) {
    char model[512];
    ra_st_file *in;
    const ra_st_tensor *t;
    float *x = fixture(dir, name, model, &in, &t);
    const ra_kernel_id kernel = ra_kernel_current();
    float *grad[3] = {NULL, NULL, NULL}, *dx[3] = {NULL, NULL, NULL};
    int64_t total = 0;
    for (int run = 0; run < 3 && x; run++) {   /* fp32, bf16, bf16 on the reference path */
        /* the reference path apart from the product only where the product runs */
        if (run == 2 && (rai_bf16_micro() < 0 || ra_kernel_select(RA_KERNEL_AVX2) != RA_OK)) break;
        ra_model *m = NULL, *ref = NULL;
        CHECK(ra_model_load(&m, model) == RA_OK && ra_model_load(&ref, model) == RA_OK, "%s", ra_last_error());
        if (!m || !ref) break;
        if (run) CHECK(ra_model_set_precision(m, RA_PRECISION_BF16) == RA_OK, "%s", ra_last_error());
        total = ra_model_param_total(m);
        grad[run] = calloc((size_t)total + 1, sizeof **grad);
        dx[run] = calloc((size_t)t->numel, sizeof **dx);
        float *y = NULL;
        int nd;
        int64_t ys[4];
        CHECK(ra_model_forward_train(m, &y, &nd, ys, x, t->ndim, t->shape, NULL) == RA_OK, "%s: %s",
              name, ra_last_error());
        int64_t ny = 1;
        for (int d = 0; y && d < nd; d++) ny *= ys[d];
        float *dy = y ? malloc((size_t)ny * sizeof *dy) : NULL;
        uint64_t s = 99;
        for (int64_t i = 0; dy && i < ny; i++) dy[i] = lcg(&s);
        CHECK(dy && ra_model_backward(m, grad[run], dx[run], dy) == RA_OK, "%s: %s", name, ra_last_error());
        CHECK(memcmp(ra_model_weights(m), ra_model_weights(ref), (size_t)total * sizeof(float)) == 0,
              "%s: the float32 weights are left alone", name);
        free(y), free(dy);
        ra_model_free(m), ra_model_free(ref);
    }
    ra_kernel_select(kernel);
    for (int run = 1; run < 3 && grad[0] && grad[run]; run++) {
        const double eg = rel_l2(grad[run], grad[0], (long)total), ex = rel_l2(dx[run], dx[0], (long)t->numel);
        CHECK(eg >= lo && eg <= hi && ex >= lo && ex <= hi, "%s %s: the bf16 gradient is %.3g (x: %.3g) "
              "of fp32's away, expected %.3g .. %.3g", name, run == 1 ? "bf16 product" : "reference path",
              eg, ex, lo, hi);
        printf("%s: bf16 training gradient (%s) relative L2 from fp32: parameters %.3g, x %.3g\n", name,
               run == 1 ? "bf16 product" : "reference path", eg, ex);
    }
    if (grad[1] && grad[2]) {   /* the two ways: the same values summed in other orders */
        const double e = rel_l2(grad[2], grad[1], (long)total);
        CHECK(e > 0 && e < 1e-3, "%s: the bf16 product and the reference path are %.3g apart", name, e);
        printf("%s: bf16 product and reference path %.3g apart\n", name, e);
    }
    for (int run = 0; run < 3; run++) free(grad[run]), free(dx[run]);
    free(x);
    ra_st_close(in);
}

static void int8_file(const char *dir) {
    char model[512], out[64] = "/tmp/relattn_int8.XXXXXX", f32[96], i8[96];
    snprintf(model, sizeof model, "%s/vit_net_token.model.safetensors", dir);
    if (!mkdtemp(out)) return;
    snprintf(f32, sizeof f32, "%s/f32.safetensors", out);
    snprintf(i8, sizeof i8, "%s/i8.safetensors", out);
    ra_model *m = NULL, *q = NULL, *back = NULL;
    CHECK(ra_model_load(&m, model) == RA_OK, "%s", ra_last_error());
    CHECK(m && ra_model_save(m, f32, RA_DTYPE_F32) == RA_OK, "%s", ra_last_error());
    CHECK(m && ra_model_save(m, i8, RA_DTYPE_I8) == RA_OK, "%s", ra_last_error());
    CHECK(ra_model_load(&back, i8) == RA_OK, "%s", ra_last_error());
    CHECK(ra_model_load(&q, model) == RA_OK && ra_model_set_precision(q, RA_PRECISION_INT8) == RA_OK, "int8");
    if (back && q) {
        CHECK(ra_model_param_total(back) == ra_model_param_total(q), "same parameters");
        CHECK(memcmp(ra_model_weights(back), ra_model_weights(q),
                     (size_t)ra_model_param_total(q) * sizeof(float)) == 0,
              "the int8 file reads back as precision int8 holds the weights");
    }
    /* the Linear weights as int8 with a scale a row, the rest float32 */
    ra_st_file *f = NULL;
    CHECK(ra_st_open(&f, i8) == RA_OK, "%s", ra_last_error());
    int n8 = 0;
    for (int i = 0; f && m && i < ra_model_param_count(m); i++) {
        const ra_param_info *p = ra_model_param(m, i);
        const ra_st_tensor *t = ra_st_find(f, p->file_name);
        char sn[300];
        snprintf(sn, sizeof sn, "%s%s", RA_SCALE_PREFIX, p->file_name);
        const ra_st_tensor *sc = ra_st_find(f, sn);
        const int lin = t && t->dtype == RA_DTYPE_I8;
        n8 += lin;
        CHECK(t && (lin ? sc && sc->dtype == RA_DTYPE_F32 && sc->numel == p->shape[0]
                        : t->dtype == RA_DTYPE_F32 && !sc), "%s", p->name);
    }
    CHECK(n8 == 2 * 4 + 1, "%d int8 tensors (2 blocks of qkv, proj, fc1, fc2; the head)", n8);
    /* the int8 weights without their scales: refused by name */
    ra_st_writer *w = ra_st_writer_new();
    for (int i = 0; f && w && i < ra_st_count(f); i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        if (strcmp(t->name, RA_SCALE_PREFIX "blocks.0.attn.qkv.weight"))
            ra_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    for (int i = 0; f && w && i < ra_st_meta_count(f); i++)
        ra_st_writer_meta(w, ra_st_meta_key(f, i), ra_st_meta(f, ra_st_meta_key(f, i)));
    ra_input_forget(i8);   /* read above; replaced on purpose */
    CHECK(w && ra_st_writer_save(w, i8) == RA_OK, "rewrite");
    ra_model *bad = NULL;
    CHECK(ra_model_load(&bad, i8) == RA_ERR_SHAPE && strstr(ra_last_error(), "scales"),
          "missing scales: %s", ra_last_error());
    ra_model_free(bad);
    ra_st_writer_free(w);
    ra_st_close(f);
    ra_model_free(m), ra_model_free(q), ra_model_free(back);
    remove(f32), remove(i8), remove(out);
}

static void refusals(const char *dir) {
    char model[512];
    snprintf(model, sizeof model, "%s/swin_7x7.model.safetensors", dir);
    ra_model *m = NULL;
    CHECK(ra_model_load(&m, model) == RA_OK, "%s", ra_last_error());
    CHECK(m && ra_model_set_precision(m, RA_PRECISION_BF16) == RA_ERR_ARG &&
              strstr(ra_last_error(), "networks"), "an attention layer refuses: %s", ra_last_error());
    ra_model_free(m);
    CHECK(ra_precision_parse("bf16") == RA_PRECISION_BF16 && ra_precision_parse("int8") == RA_PRECISION_INT8 &&
          ra_precision_parse("fp32") == RA_PRECISION_FP32 && ra_precision_parse("fp16") == -1 &&
          ra_precision_parse(NULL) == -1, "names");
}

/* ra_precision_native against the CPU's own flags, under every kernel set
 * it runs: bf16 and int8 are native only with the AVX-512 set on a CPU
 * with AVX512_BF16 / AVX512_VNNI (and BW, VL); fp32 always; an unknown
 * precision never. */
static void native_precisions(void) {
    const ra_kernel_id was = ra_kernel_current();
    int bf16_cpu = 0, vnni_cpu = 0;
#if defined(__x86_64__) || defined(__i386__)
    const int bwvl = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    bf16_cpu = bwvl && __builtin_cpu_supports("avx512bf16");
    vnni_cpu = bwvl && __builtin_cpu_supports("avx512vnni");
#endif
    for (int id = 0; id < RA_KERNEL_COUNT; id++) {
        if (!ra_kernel_supported((ra_kernel_id)id)) continue;
        ra_kernel_select((ra_kernel_id)id);
        const int avx512 = id == RA_KERNEL_AVX512;
        CHECK(ra_precision_native(RA_PRECISION_FP32) == 1, "%s: fp32 not native", ra_kernel_name(id));
        CHECK(ra_precision_native(RA_PRECISION_BF16) == (avx512 && bf16_cpu),
              "%s: bf16 native %d, the CPU's flags say %d", ra_kernel_name(id),
              ra_precision_native(RA_PRECISION_BF16), avx512 && bf16_cpu);
        CHECK(ra_precision_native(RA_PRECISION_INT8) == (avx512 && vnni_cpu),
              "%s: int8 native %d, the CPU's flags say %d", ra_kernel_name(id),
              ra_precision_native(RA_PRECISION_INT8), avx512 && vnni_cpu);
        CHECK(ra_precision_native((ra_precision)7) == 0, "an unknown precision is native");
    }
    ra_kernel_select(was);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/fixtures";
    roundings();
    native_precisions();
    linear();
    int8_product();
    bf16_product();
    mlp_blocks(RA_PRECISION_BF16);
    mlp_blocks(RA_PRECISION_INT8);
    int8_kernels();
    int8_quantisers();
    bf16_vector_roundings();
    bf16_training_products();
    /* bf16 steps are 2^-9 of a value, int8's 1/254 of a row's largest:
     * the logits move by 1e-4 .. 3e-2 of their norm in these small nets */
    network(dir, "net_swin_official", 1e-4, 3e-2, 5e-4, 1e-1);
    network(dir, "vit_net_token", 1e-4, 3e-2, 5e-4, 1e-1);
    network(dir, "v2_net_official", 1e-4, 3e-2, 5e-4, 1e-1);
    network(dir, "net_swin_tv", 1e-4, 3e-2, 5e-4, 1e-1);
    chunked_blocks(dir, "net_swin_official", 0);
    chunked_blocks(dir, "vit_net_token", 0);
    chunked_blocks(dir, "v2_net_official", 0);
    chunked_blocks(dir, "net_swin_tv", 0);
    chunked_blocks(dir, "net_swin_official", 40);
    chunked_blocks(dir, "net_swin_tv", 40);
    int8_vnni_network(dir, "net_swin_official");
    int8_vnni_network(dir, "vit_net_token");
    /* the gradient's error grows from the head down (net_swin_official:
     * 0.2 % at head.bias's neighbours, 8 % at the patch embedding) */
    bf16_training(dir, "net_swin_official", 1e-3, 0.15);
    bf16_training(dir, "vit_net_token", 1e-4, 3e-2);
    int8_file(dir);
    refusals(dir);
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}
