/* test_kernels.c - every optimised attention kernel against the reference.
 *
 * Random configurations (sizes, strides, bias, mask, Shaw tables, attn,
 * threads) run through the public ra_attention_forward once with the
 * reference kernel and once with each other kernel this CPU supports; out
 * (including the untouched columns between rows) and attn must agree to
 * float rounding. A fully masked row must give zeros, never NaN.
 * The backward likewise: ra_attention_backward under each kernel against
 * the reference kernel on the same configurations, every gradient (dq, dk,
 * dv, dtable through idx, drel_k, drel_v) accumulated into non-zero
 * buffers, dq/dk/dv either separate or interleaved in one qkv-style buffer
 * (the columns between them must stay untouched), 1 and 2 threads.
 * argv[1] (the fixtures directory) is not used. */
#include "relattn.h"
#include "check.h"
#include "base/internal.h"   /* rai_attention_backward_set */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15u;

static uint32_t next(void) {   /* xorshift64*: reproducible everywhere */
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545F4914F6CDD1Du) >> 32);
}
static int irand(int lo, int hi) { return lo + (int)(next() % (uint32_t)(hi - lo + 1)); }
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(next() >> 8) / 16777216.0f; }

static float *fill(size_t n, float lo, float hi) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = frand(lo, hi);
    return p;
}

typedef struct cfg {
    int b_, nh, n1, n2, hd, nw, r;
    int bias, mask, rel_k, rel_v, attn, threads, masked_row;
    int ldq, ldk, ldv, ldo;
    float scale;
} cfg;

typedef struct inputs {
    float *q, *k, *v, *table, *mask, *rel_k, *rel_v;
    int32_t *idx, *rel;
    ra_attn_desc d;
} inputs;

static void make_inputs(inputs *in, const cfg *c) {
    memset(in, 0, sizeof *in);
    const size_t nn = (size_t)c->n1 * c->n2;
    /* one float past each allocation start, so rows are never aligned */
    in->q = fill((size_t)c->b_ * c->n1 * c->ldq + 1, -1, 1);
    in->k = fill((size_t)c->b_ * c->n2 * c->ldk + 1, -1, 1);
    in->v = fill((size_t)c->b_ * c->n2 * c->ldv + 1, -1, 1);
    ra_attn_desc *d = &in->d;
    *d = (ra_attn_desc){.b_ = c->b_, .nh = c->nh, .n1 = c->n1, .n2 = c->n2,
                        .hd = c->hd, .scale = c->scale};
    if (c->bias) {
        int rows = irand(1, 40);
        in->table = fill((size_t)rows * c->nh, -3, 3);
        in->idx = malloc(nn * sizeof *in->idx);
        for (size_t e = 0; e < nn; e++) in->idx[e] = irand(0, rows - 1);
        d->table = in->table; d->idx = in->idx; d->table_rows = rows;
    }
    if (c->mask) {   /* Swin-like 0 / -100, a few -inf, maybe a full -inf row */
        in->mask = malloc((size_t)c->nw * nn * sizeof *in->mask);
        for (size_t e = 0; e < (size_t)c->nw * nn; e++) {
            int u = irand(0, 99);
            in->mask[e] = u < 70 ? 0.0f : u < 95 ? -100.0f : -INFINITY;
        }
        /* Each row keeps one 0 (Swin's diagonal is never masked): a row
         * whose largest logit sits near -100 has only ~1e-5 relative
         * precision in float, in any kernel, and cannot be compared tightly. */
        for (int w = 0; w < c->nw; w++)
            for (int i = 0; i < c->n1; i++)
                in->mask[(size_t)w * nn + (size_t)i * c->n2 + irand(0, c->n2 - 1)] = 0.0f;
        if (c->masked_row) {
            int w = irand(0, c->nw - 1), i = irand(0, c->n1 - 1);
            for (int j = 0; j < c->n2; j++) in->mask[(size_t)w * nn + (size_t)i * c->n2 + j] = -INFINITY;
        }
        d->mask = in->mask; d->nw = c->nw;
    }
    if (c->rel_k || c->rel_v) {
        in->rel = malloc(nn * sizeof *in->rel);
        for (size_t e = 0; e < nn; e++) in->rel[e] = irand(0, c->r - 1);
        d->rel = in->rel; d->r = c->r;
        if (c->rel_k) d->rel_k = in->rel_k = fill((size_t)c->r * c->hd, -1, 1);
        if (c->rel_v) d->rel_v = in->rel_v = fill((size_t)c->r * c->hd, -1, 1);
    }
}

static void free_inputs(inputs *in) {
    free(in->q); free(in->k); free(in->v); free(in->table); free(in->mask);
    free(in->rel_k); free(in->rel_v); free(in->idx); free(in->rel);
}

/* out is pre-filled with a sentinel so columns a kernel must not touch
 * are compared too. Returns 0 on success. */
static int run(const cfg *c, const inputs *in, ra_kernel_id id, float *out, float *attn) {
    if (ra_kernel_select(id) != RA_OK) return -1;
    ra_threads_set(c->threads);
    size_t nout = (size_t)c->b_ * c->n1 * c->ldo + 1;
    for (size_t e = 0; e < nout; e++) out[e] = 12345.0f;
    size_t ws = ra_attention_workspace_size(&in->d, c->threads);
    void *work = aligned_alloc(64, (ws + 63) & ~(size_t)63);
    ra_status st = ra_attention_forward(out + 1, c->ldo, attn, in->q + 1, c->ldq, in->k + 1, c->ldk,
                                        in->v + 1, c->ldv, &in->d, work, ws);
    free(work);
    ra_threads_set(0);
    if (st != RA_OK) fprintf(stderr, "forward (%s): %s\n", ra_kernel_name(id), ra_last_error());
    return st;
}

static int any_nan(const float *p, size_t n) {
    for (size_t i = 0; i < n; i++) if (isnan(p[i])) return 1;
    return 0;
}

static void compare(const cfg *c) {
    inputs in;
    make_inputs(&in, c);
    const size_t nout = (size_t)c->b_ * c->n1 * c->ldo + 1;
    const size_t natt = (size_t)c->b_ * c->nh * c->n1 * c->n2;
    float *ref_out = malloc(nout * sizeof(float)), *out = malloc(nout * sizeof(float));
    float *ref_attn = c->attn ? malloc(natt * sizeof(float)) : NULL;
    float *attn = c->attn ? malloc(natt * sizeof(float)) : NULL;
    char what[256];
    snprintf(what, sizeof what, "B_=%d nH=%d N1=%d N2=%d hd=%d ld=(%d,%d,%d,%d) bias=%d "
             "mask=%d%s rel_k=%d rel_v=%d R=%d attn=%d threads=%d", c->b_, c->nh, c->n1,
             c->n2, c->hd, c->ldq, c->ldk, c->ldv, c->ldo, c->bias, c->mask,
             c->masked_row ? "(full row)" : "", c->rel_k, c->rel_v, c->r, c->attn, c->threads);

    CHECK(run(c, &in, RA_KERNEL_REF, ref_out, ref_attn) == RA_OK, "ref: %s", what);
    for (int id = RA_KERNEL_REF + 1; id < RA_KERNEL_COUNT; id++) {
        if (!ra_kernel_supported((ra_kernel_id)id)) continue;
        char name[300];
        snprintf(name, sizeof name, "%s %s", ra_kernel_name((ra_kernel_id)id), what);
        CHECK(run(c, &in, (ra_kernel_id)id, out, attn) == RA_OK, "%s", name);
        CHECK_CLOSE(out, ref_out, (long)nout, 1e-5, 1e-6, name);
        CHECK(!any_nan(out, nout), "NaN in out: %s", name);
        if (c->attn) {
            CHECK_CLOSE(attn, ref_attn, (long)natt, 1e-5, 1e-6, name);
            CHECK(!any_nan(attn, natt), "NaN in attn: %s", name);
        }
    }
    free(ref_out); free(out); free(ref_attn); free(attn);
    free_inputs(&in);
}

/* ---- the bf16 core ------------------------------------------------------- */

/* The bf16 core by its definition, in double: p_ref the softmax of the
 * logits of rounded scale q and k (Shaw's key term with rounded scale q and
 * the float32 table), out_ref (sentinels between rows, as run() leaves them) the sums
 * of rounded p times rounded v (and the float32 value table) where p is
 * the kernel's own attn: a kernel's p and its use of p are checked apart,
 * so that the rare p whose float32 bits round the other way in another
 * kernel (their exps differ in the last bit) cannot hide a wrong product. */
static void bf16_naive(const cfg *c, const inputs *in, const float *attn, float *p_ref,
                       float *out_ref) {
    const size_t nn = (size_t)c->n1 * c->n2;
    const size_t nout = (size_t)c->b_ * c->n1 * c->ldo + 1;
    for (size_t e = 0; e < nout; e++) out_ref[e] = 12345.0f;
    double *l = malloc((size_t)c->n2 * sizeof *l);
    for (int b = 0; b < c->b_; b++)
        for (int h = 0; h < c->nh; h++)
            for (int i = 0; i < c->n1; i++) {
                const float *q0 = in->q + 1 + (size_t)(b * c->n1 + i) * c->ldq + h * c->hd;
                float q[64];   /* scale q, as the bf16 core rounds it */
                for (int d = 0; d < c->hd; d++) q[d] = c->scale * q0[d];
                double mx = -INFINITY;
                for (int j = 0; j < c->n2; j++) {
                    const float *k = in->k + 1 + (size_t)(b * c->n2 + j) * c->ldk + h * c->hd;
                    double acc = 0;
                    for (int d = 0; d < c->hd; d++) {
                        acc += (double)rai_round_bf16(q[d]) * rai_round_bf16(k[d]);
                        if (c->rel_k)
                            acc += (double)rai_round_bf16(q[d]) * in->rel_k[(size_t)in->rel[(size_t)i * c->n2 + j] * c->hd + d];
                    }
                    double v = acc;   /* the scale is on q */
                    if (c->bias) v += in->table[(size_t)in->idx[(size_t)i * c->n2 + j] * c->nh + h];
                    if (c->mask) v += in->mask[(size_t)(b % c->nw) * nn + (size_t)i * c->n2 + j];
                    l[j] = v;
                    if (v > mx) mx = v;
                }
                double sum = 0;
                for (int j = 0; j < c->n2; j++) sum += l[j] = mx == -INFINITY ? 0 : exp(l[j] - mx);
                const size_t row = ((size_t)(b * c->nh + h) * c->n1 + i) * c->n2;
                for (int j = 0; j < c->n2; j++) p_ref[row + j] = mx == -INFINITY ? 0.0f : (float)(l[j] / sum);
                for (int d = 0; d < c->hd; d++) {
                    double acc = 0;
                    for (int j = 0; j < c->n2; j++) {
                        const float pj = rai_round_bf16(attn[row + j]);
                        acc += (double)pj * rai_round_bf16(in->v[1 + (size_t)(b * c->n2 + j) * c->ldv + h * c->hd + d]);
                        if (c->rel_v) acc += (double)pj * in->rel_v[(size_t)in->rel[(size_t)i * c->n2 + j] * c->hd + d];
                    }
                    out_ref[1 + (size_t)(b * c->n1 + i) * c->ldo + h * c->hd + d] = (float)acc;
                }
            }
    free(l);
}

/* The bf16 core (ra_attn_desc.precision) under every kernel set: its
 * probabilities and its output against the definition (bf16_naive), its
 * probabilities against the oracle's (ref), and, for the shapes that
 * matter (check_fp32), a result that is not float32's. Its backward is
 * refused. */
static void compare_bf16(const cfg *c0, int check_fp32) {
    cfg c = *c0;
    c.attn = 1;
    inputs in;
    make_inputs(&in, &c);
    in.d.precision = RA_PRECISION_BF16;
    const size_t nout = (size_t)c.b_ * c.n1 * c.ldo + 1;
    const size_t natt = (size_t)c.b_ * c.nh * c.n1 * c.n2;
    float *out = malloc(nout * sizeof(float)), *attn = malloc(natt * sizeof(float));
    float *out_ref = malloc(nout * sizeof(float)), *p_ref = malloc(natt * sizeof(float));
    float *oracle_attn = malloc(natt * sizeof(float));
    char what[256];
    snprintf(what, sizeof what, "bf16 B_=%d nH=%d N1=%d N2=%d hd=%d bias=%d mask=%d%s rel_k=%d "
             "rel_v=%d threads=%d", c.b_, c.nh, c.n1, c.n2, c.hd, c.bias, c.mask,
             c.masked_row ? "(full row)" : "", c.rel_k, c.rel_v, c.threads);
    for (int id = RA_KERNEL_REF; id < RA_KERNEL_COUNT; id++) {
        if (!ra_kernel_supported((ra_kernel_id)id)) continue;
        char name[300];
        snprintf(name, sizeof name, "%s %s", ra_kernel_name((ra_kernel_id)id), what);
        CHECK(run(&c, &in, (ra_kernel_id)id, out, attn) == RA_OK, "%s", name);
        bf16_naive(&c, &in, attn, p_ref, out_ref);
        CHECK_CLOSE(attn, p_ref, (long)natt, 2e-5, 2e-6, name);
        CHECK_CLOSE(out, out_ref, (long)nout, 1e-5, 1e-5, name);
        CHECK(!any_nan(out, nout) && !any_nan(attn, natt), "NaN: %s", name);
        if (id == RA_KERNEL_REF) memcpy(oracle_attn, attn, natt * sizeof *attn);
        else CHECK_CLOSE(attn, oracle_attn, (long)natt, 1e-5, 1e-6, name);
    }
    if (check_fp32) {   /* the rounding is there: float32's output differs */
        float *out32 = malloc(nout * sizeof(float));
        CHECK(run(&c, &in, RA_KERNEL_REF, out, NULL) == RA_OK, "%s", what);
        in.d.precision = RA_PRECISION_FP32;
        CHECK(run(&c, &in, RA_KERNEL_REF, out32, NULL) == RA_OK, "%s", what);
        double worst = 0;
        for (size_t e = 0; e < nout; e++) worst = fmax(worst, fabs((double)out[e] - out32[e]));
        CHECK(worst > 1e-4 && worst < 5e-2, "%s: bf16 moves out by %.3g from fp32's", what, worst);
        free(out32);
        /* no backward in bf16 */
        in.d.precision = RA_PRECISION_BF16;
        const size_t ws = ra_attention_backward_workspace_size(&in.d, 1);
        void *work = malloc(ws);
        float *g = calloc(nout, sizeof(float));
        CHECK(ra_attention_backward(g, c.ldo, g, c.ldo, g, c.ldo, NULL, NULL, NULL, in.q + 1,
                                    c.ldq, in.q + 1, c.ldq, in.k + 1, c.ldk, in.v + 1, c.ldv,
                                    &in.d, work, ws) == RA_ERR_ARG,
              "%s: backward refused", what);
        free(work), free(g);
        in.d.precision = 2;
        CHECK(ra_attention_check(&in.d) == RA_ERR_ARG, "precision 2 refused");
    }
    free(out), free(attn), free(out_ref), free(p_ref), free(oracle_attn);
    free_inputs(&in);
}

/* ---- backward ------------------------------------------------------------ */

/* Where the gradients live in one flat array: [dq/dk/dv region][dtable]
 * [drel_k][drel_v]. The region is either one qkv-style buffer (row stride
 * ld >= 3C, dq at column 0, dk at C, dv at 2C) or three separate buffers;
 * it starts one float in, so rows are never aligned. */
typedef struct glayout {
    int interleaved, lddq, lddk, lddv;
    size_t off_q, off_k, off_v, nregion;
    size_t off_table, off_rk, off_rv, total;
    int want_table, want_rk, want_rv;   /* 0: the gradient is passed as NULL */
} glayout;

static glayout make_layout(const cfg *c, int interleaved) {
    glayout g = {.interleaved = interleaved};
    const int C = c->nh * c->hd;
    const int rows = c->b_ * (c->n1 > c->n2 ? c->n1 : c->n2);
    if (interleaved) {
        g.lddq = g.lddk = g.lddv = 3 * C + irand(0, 5);
        g.off_q = 1, g.off_k = 1 + (size_t)C, g.off_v = 1 + 2 * (size_t)C;
        g.nregion = (size_t)rows * g.lddq + 1;
    } else {
        g.lddq = C + irand(0, 9), g.lddk = C + irand(0, 9), g.lddv = C + irand(0, 9);
        g.off_q = 1;
        g.off_k = g.off_q + (size_t)c->b_ * c->n1 * g.lddq;
        g.off_v = g.off_k + (size_t)c->b_ * c->n2 * g.lddk;
        g.nregion = g.off_v + (size_t)c->b_ * c->n2 * g.lddv;
    }
    g.want_table = c->bias && irand(0, 3) != 0;
    g.want_rk = c->rel_k && irand(0, 3) != 0;
    g.want_rv = c->rel_v && irand(0, 3) != 0;
    g.off_table = g.nregion;
    g.off_rk = g.off_table + (c->bias ? (size_t)40 * c->nh : 0);   /* table rows <= 40 */
    g.off_rv = g.off_rk + (size_t)c->r * c->hd;
    g.total = g.off_rv + (size_t)c->r * c->hd;
    return g;
}

/* grads = init, then += the backward under kernel id. */
static int run_backward(const cfg *c, const inputs *in, const glayout *g, ra_kernel_id id,
                        const float *dout, const float *init, float *grads) {
    if (ra_kernel_select(id) != RA_OK) return -1;
    ra_threads_set(c->threads);
    memcpy(grads, init, g->total * sizeof *grads);
    size_t ws = ra_attention_backward_workspace_size(&in->d, c->threads);
    void *work = aligned_alloc(64, (ws + 63) & ~(size_t)63);
    ra_status st = ra_attention_backward(
        grads + g->off_q, g->lddq, grads + g->off_k, g->lddk, grads + g->off_v, g->lddv,
        g->want_table ? grads + g->off_table : NULL, g->want_rk ? grads + g->off_rk : NULL,
        g->want_rv ? grads + g->off_rv : NULL, dout + 1, c->ldo, in->q + 1, c->ldq, in->k + 1,
        c->ldk, in->v + 1, c->ldv, &in->d, work, ws);
    free(work);
    ra_threads_set(0);
    if (st != RA_OK) fprintf(stderr, "backward (%s): %s\n", ra_kernel_name(id), ra_last_error());
    return st;
}

static void compare_backward(const cfg *c, int interleaved) {
    inputs in;
    make_inputs(&in, c);
    const glayout g = make_layout(c, interleaved);
    float *dout = fill((size_t)c->b_ * c->n1 * c->ldo + 1, -1, 1);
    float *init = fill(g.total, -1, 1);   /* the gradients accumulate into these */
    float *ref = malloc(g.total * sizeof *ref), *got = malloc(g.total * sizeof *got);
    char what[320];
    snprintf(what, sizeof what, "backward B_=%d nH=%d N1=%d N2=%d hd=%d ld=(%d,%d,%d,%d) "
             "dld=(%d,%d,%d)%s bias=%d%s mask=%d%s rel_k=%d%s rel_v=%d%s R=%d threads=%d",
             c->b_, c->nh, c->n1, c->n2, c->hd, c->ldq, c->ldk, c->ldv, c->ldo, g.lddq, g.lddk,
             g.lddv, interleaved ? " qkv" : "", c->bias, g.want_table ? "" : "(no grad)",
             c->mask, c->masked_row ? "(full row)" : "", c->rel_k, g.want_rk ? "" : "(no grad)",
             c->rel_v, g.want_rv ? "" : "(no grad)", c->r, c->threads);

    CHECK(run_backward(c, &in, &g, RA_KERNEL_REF, dout, init, ref) == RA_OK, "ref: %s", what);
    for (int id = RA_KERNEL_REF + 1; id < RA_KERNEL_COUNT; id++) {
        if (!ra_kernel_supported((ra_kernel_id)id)) continue;
        char name[400];
        snprintf(name, sizeof name, "%s %s", ra_kernel_name((ra_kernel_id)id), what);
        CHECK(run_backward(c, &in, &g, (ra_kernel_id)id, dout, init, got) == RA_OK, "%s", name);
        char part[440];
        /* the whole region: dq, dk, dv and the columns between them */
        snprintf(part, sizeof part, "dq/dk/dv: %s", name);
        CHECK_CLOSE(got, ref, (long)g.nregion, 1e-5, 1e-5, part);
        snprintf(part, sizeof part, "dtable: %s", name);
        CHECK_CLOSE(got + g.off_table, ref + g.off_table, (long)(g.off_rk - g.off_table), 1e-5,
                    1e-5, part);
        snprintf(part, sizeof part, "drel_k: %s", name);
        CHECK_CLOSE(got + g.off_rk, ref + g.off_rk, (long)(g.off_rv - g.off_rk), 1e-5, 1e-5, part);
        snprintf(part, sizeof part, "drel_v: %s", name);
        CHECK_CLOSE(got + g.off_rv, ref + g.off_rv, (long)(g.total - g.off_rv), 1e-5, 1e-5, part);
        CHECK(!any_nan(got, g.total), "NaN in gradients: %s", name);
    }
    free(dout); free(init); free(ref); free(got);
    free_inputs(&in);
}

/* The backward that sets dq, dk, dv (rai_attention_backward_set, what a
 * layer's backward calls) against the one that adds into zeros, each
 * kernel with itself: the same bits (-0 included), the columns between
 * dq, dk and dv and the other gradients as the accumulating call leaves
 * them. */
static void backward_set_bits(const cfg *c, int interleaved) {
    inputs in;
    make_inputs(&in, c);
    const glayout g = make_layout(c, interleaved);
    const int C = c->nh * c->hd;
    float *dout = fill((size_t)c->b_ * c->n1 * c->ldo + 1, -1, 1);
    float *init = fill(g.total, -1, 1);
    float *zeroed = malloc(g.total * sizeof *zeroed), *add = malloc(g.total * sizeof *add);
    float *set = malloc(g.total * sizeof *set);
    memcpy(zeroed, init, g.total * sizeof *zeroed);
    for (int i = 0; i < c->b_ * c->n1; i++)
        memset(zeroed + g.off_q + (size_t)i * g.lddq, 0, (size_t)C * sizeof *zeroed);
    for (int j = 0; j < c->b_ * c->n2; j++) {
        memset(zeroed + g.off_k + (size_t)j * g.lddk, 0, (size_t)C * sizeof *zeroed);
        memset(zeroed + g.off_v + (size_t)j * g.lddv, 0, (size_t)C * sizeof *zeroed);
    }
    for (int id = 0; id < RA_KERNEL_COUNT; id++) {
        if (!ra_kernel_supported((ra_kernel_id)id)) continue;
        CHECK(run_backward(c, &in, &g, (ra_kernel_id)id, dout, zeroed, add) == RA_OK, "add");
        ra_kernel_select((ra_kernel_id)id);
        ra_threads_set(c->threads);
        memcpy(set, init, g.total * sizeof *set);
        const size_t ws = ra_attention_backward_workspace_size(&in.d, c->threads);
        void *work = aligned_alloc(64, (ws + 63) & ~(size_t)63);
        CHECK(rai_attention_backward_set(
                  set + g.off_q, g.lddq, set + g.off_k, g.lddk, set + g.off_v, g.lddv,
                  g.want_table ? set + g.off_table : NULL, g.want_rk ? set + g.off_rk : NULL,
                  g.want_rv ? set + g.off_rv : NULL, dout + 1, c->ldo, in.q + 1, c->ldq, in.k + 1,
                  c->ldk, in.v + 1, c->ldv, &in.d, work, ws, 1) == RA_OK, "set");
        free(work);
        ra_threads_set(0);
        CHECK(memcmp(set, add, g.total * sizeof *set) == 0,
              "%s: the backward that sets (N1=%d N2=%d hd=%d threads=%d%s) differs from += into "
              "zeros", ra_kernel_name((ra_kernel_id)id), c->n1, c->n2, c->hd, c->threads,
              interleaved ? " qkv" : "");
    }
    free(dout), free(init), free(zeroed), free(add), free(set);
    free_inputs(&in);
}

/* A fully masked row has p = 0: it sends no gradient anywhere, so its dq
 * row keeps its initial value exactly, and nothing becomes NaN. */
static void fully_masked_row_backward(void) {
    cfg c = {.b_ = 2, .nh = 2, .n1 = 49, .n2 = 49, .hd = 32, .nw = 2, .r = 13,
             .bias = 1, .mask = 1, .rel_k = 1, .rel_v = 1, .threads = 2,
             .ldq = 64, .ldk = 64, .ldv = 64, .ldo = 64, .scale = 0.17677669f};
    inputs in;
    make_inputs(&in, &c);
    const int masked = 5;   /* row 5 of window 1 (b = 1) */
    const size_t nn = (size_t)c.n1 * c.n2;
    for (size_t e = 0; e < 2 * nn; e++) in.mask[e] = 0.0f;
    for (int j = 0; j < c.n2; j++) in.mask[nn + (size_t)masked * c.n2 + j] = -INFINITY;
    glayout g = make_layout(&c, 1);
    g.want_table = g.want_rk = g.want_rv = 1;
    float *dout = fill((size_t)c.b_ * c.n1 * c.ldo + 1, -1, 1);
    float *init = fill(g.total, -1, 1);
    float *got = malloc(g.total * sizeof *got);
    for (int id = 0; id < RA_KERNEL_COUNT; id++) {
        if (!ra_kernel_supported((ra_kernel_id)id)) continue;
        const char *name = ra_kernel_name((ra_kernel_id)id);
        CHECK(run_backward(&c, &in, &g, (ra_kernel_id)id, dout, init, got) == RA_OK, "%s", name);
        CHECK(!any_nan(got, g.total), "%s: NaN in gradients", name);
        const size_t row = g.off_q + (size_t)(1 * c.n1 + masked) * g.lddq;
        int same = 1, moved = 0;
        for (int d = 0; d < c.nh * c.hd; d++) same &= got[row + d] == init[row + d];
        for (int d = 0; d < c.nh * c.hd; d++)   /* an unmasked row does get a gradient */
            moved |= got[g.off_q + (size_t)masked * g.lddq + d] !=
                     init[g.off_q + (size_t)masked * g.lddq + d];
        CHECK(same, "%s: fully masked row received a dq gradient", name);
        CHECK(moved, "%s: unmasked row of window 0 received no dq gradient", name);
    }
    free(dout); free(init); free(got);
    free_inputs(&in);
}

/* ---- the mask as region labels ------------------------------------------- */

/* ra_attn_desc.regions against the float mask it stands for: random labels
 * (0..3) per window for the queries and the keys, their mask
 * (0 / -100) built here; forward (out, attn) and backward (every gradient),
 * in fp32 and the bf16 core, bit for bit under every kernel. A mask of
 * labels that all agree would change nothing: the test also checks that
 * the labels moved the output. */
static void regions_as_mask(const cfg *c0) {
    cfg c = *c0;
    c.mask = 1, c.masked_row = 0, c.attn = 1;
    if (!c.nw) c.nw = 1;
    inputs in;
    make_inputs(&in, &c);
    const size_t nn = (size_t)c.n1 * c.n2, nl = (size_t)c.n1 + c.n2;
    int32_t *labels = malloc((size_t)c.nw * nl * sizeof *labels);
    for (size_t e = 0; e < (size_t)c.nw * nl; e++) labels[e] = irand(0, 3);
    for (int w = 0; w < c.nw; w++)
        for (int i = 0; i < c.n1; i++)
            for (int j = 0; j < c.n2; j++)
                in.mask[(size_t)w * nn + (size_t)i * c.n2 + j] =
                    labels[w * nl + i] == labels[w * nl + c.n1 + j] ? 0.0f : -100.0f;
    const size_t nout = (size_t)c.b_ * c.n1 * c.ldo + 1;
    const size_t natt = (size_t)c.b_ * c.nh * nn;
    float *o1 = malloc(nout * sizeof(float)), *o2 = malloc(nout * sizeof(float));
    float *a1 = malloc(natt * sizeof(float)), *a2 = malloc(natt * sizeof(float));
    const glayout g = make_layout(&c, 0);
    float *dout = fill(nout, -1, 1), *init = fill(g.total, -1, 1);
    float *g1 = malloc(g.total * sizeof(float)), *g2 = malloc(g.total * sizeof(float));
    int moved = 0;
    for (int id = RA_KERNEL_REF; id < RA_KERNEL_COUNT; id++) {
        if (!ra_kernel_supported((ra_kernel_id)id)) continue;
        for (int p = 0; p < 2; p++) {
            char name[160];
            snprintf(name, sizeof name, "%s %s regions B_=%d nH=%d N1=%d N2=%d hd=%d nw=%d",
                     ra_kernel_name((ra_kernel_id)id), p ? "bf16" : "fp32", c.b_, c.nh, c.n1,
                     c.n2, c.hd, c.nw);
            in.d.precision = p;
            in.d.mask = in.mask, in.d.regions = NULL;
            CHECK(run(&c, &in, (ra_kernel_id)id, o1, a1) == RA_OK, "%s", name);
            in.d.mask = NULL, in.d.regions = labels;
            CHECK(run(&c, &in, (ra_kernel_id)id, o2, a2) == RA_OK, "%s", name);
            CHECK(memcmp(o1, o2, nout * sizeof *o1) == 0 && memcmp(a1, a2, natt * sizeof *a1) == 0,
                  "%s: forward differs from the float mask's", name);
            if (p) continue;   /* no backward in bf16 */
            in.d.mask = NULL, in.d.regions = NULL;
            CHECK(run(&c, &in, (ra_kernel_id)id, o1, NULL) == RA_OK, "%s", name);
            for (size_t e = 0; e < nout && !moved; e++) moved = o1[e] != o2[e];
            in.d.mask = in.mask;
            CHECK(run_backward(&c, &in, &g, (ra_kernel_id)id, dout, init, g1) == RA_OK, "%s", name);
            in.d.mask = NULL, in.d.regions = labels;
            CHECK(run_backward(&c, &in, &g, (ra_kernel_id)id, dout, init, g2) == RA_OK, "%s", name);
            CHECK(memcmp(g1, g2, g.total * sizeof *g1) == 0,
                  "%s: backward differs from the float mask's", name);
        }
    }
    CHECK(moved || c.n2 == 1, "the labels changed nothing (N1=%d N2=%d)", c.n1, c.n2);
    in.d.precision = 0, in.d.regions = labels, in.d.mask = NULL, in.d.nw = 0;
    CHECK(ra_attention_check(&in.d) == RA_ERR_SHAPE, "regions without nw refused");
    free(labels), free(o1), free(o2), free(a1), free(a2), free(dout), free(init), free(g1), free(g2);
    free_inputs(&in);
}

static int pick_n(void) {
    static const int special[] = {1, 49, 64, 2, 7, 8, 9, 16, 17};
    return irand(0, 2) == 0 ? special[irand(0, 8)] : irand(1, 70);
}

static cfg random_cfg(int seq) {
    static const int hds[] = {1, 3, 8, 16, 24, 32, 33, 64};
    cfg c = {0};
    c.b_ = irand(1, 3);
    c.nh = irand(1, 3);
    c.n1 = pick_n();
    c.n2 = irand(0, 2) == 0 ? c.n1 : pick_n();
    c.hd = hds[irand(0, 7)];
    c.scale = 1.0f / sqrtf((float)c.hd) * frand(0.5f, 2.0f);
    c.bias = irand(0, 1);
    c.mask = irand(0, 1);
    c.nw = c.mask ? (c.b_ == 2 ? irand(1, 2) : c.b_ == 3 ? 3 : 1) : 0;
    c.masked_row = c.mask && irand(0, 3) == 0;
    c.rel_k = irand(0, 1);
    c.rel_v = irand(0, 1);
    int n = c.n1 > c.n2 ? c.n1 : c.n2;
    c.r = (c.rel_k || c.rel_v) ? irand(1, 2 * n + 1) : 0;
    c.attn = irand(0, 1);
    c.threads = seq % 2 ? 2 : 1;
    int C = c.nh * c.hd;
    c.ldq = C + irand(0, 9);
    c.ldk = C + irand(0, 9);
    c.ldv = C + irand(0, 9);
    c.ldo = C + irand(0, 9);
    if (seq % 5 == 0) c.ldq = c.ldk = c.ldv = c.ldo = C;   /* packed, too */
    return c;
}

/* A row of the mask all -inf: that row of out and attn is exactly zero for
 * every kernel, everything else finite. */
static void fully_masked_row(void) {
    cfg c = {.b_ = 2, .nh = 2, .n1 = 49, .n2 = 49, .hd = 32, .nw = 2, .r = 13,
             .bias = 1, .mask = 1, .rel_k = 1, .rel_v = 1, .attn = 1, .threads = 2,
             .ldq = 64, .ldk = 64, .ldv = 64, .ldo = 64, .scale = 0.17677669f};
    inputs in;
    make_inputs(&in, &c);
    const int masked = 5;   /* row 5 of window 1 (b = 1) */
    const size_t nn = (size_t)c.n1 * c.n2;
    for (size_t e = 0; e < 2 * nn; e++) in.mask[e] = 0.0f;
    for (int j = 0; j < c.n2; j++) in.mask[nn + (size_t)masked * c.n2 + j] = -INFINITY;
    const size_t nout = (size_t)c.b_ * c.n1 * c.ldo + 1;
    const size_t natt = (size_t)c.b_ * c.nh * nn;
    float *out = malloc(nout * sizeof(float)), *attn = malloc(natt * sizeof(float));
    for (int id = 0; id < RA_KERNEL_COUNT; id++) {
        if (!ra_kernel_supported((ra_kernel_id)id)) continue;
        const char *name = ra_kernel_name((ra_kernel_id)id);
        CHECK(run(&c, &in, (ra_kernel_id)id, out, attn) == RA_OK, "%s", name);
        CHECK(!any_nan(out, nout) && !any_nan(attn, natt), "%s: NaN", name);
        int zero = 1, nonzero_elsewhere = 0;
        const float *orow = out + 1 + (size_t)(1 * c.n1 + masked) * c.ldo;
        for (int d = 0; d < c.nh * c.hd; d++) zero &= orow[d] == 0.0f;
        for (int h = 0; h < c.nh; h++) {
            const float *arow = attn + ((size_t)(1 * c.nh + h) * c.n1 + masked) * c.n2;
            for (int j = 0; j < c.n2; j++) zero &= arow[j] == 0.0f;
        }
        for (int d = 0; d < c.nh * c.hd; d++) nonzero_elsewhere |= out[1 + (size_t)masked * c.ldo + d] != 0.0f;
        CHECK(zero, "%s: fully masked row is not zero", name);
        CHECK(nonzero_elsewhere, "%s: unmasked row of window 0 is zero", name);
    }
    free(out); free(attn);
    free_inputs(&in);
}

int main(int argc, char **argv) {
    (void)argc; (void)argv;
    int others = 0;
    for (int id = RA_KERNEL_REF + 1; id < RA_KERNEL_COUNT; id++) {
        int ok = ra_kernel_supported((ra_kernel_id)id);
        CHECK(ok == (ra_kernel_select((ra_kernel_id)id) == RA_OK), "select %d", id);
        others += ok;
        printf("kernel %s: %s\n", ra_kernel_name((ra_kernel_id)id), ok ? "tested" : "not supported");
    }
    if (!others) printf("no optimised kernel on this CPU/build: only the reference runs\n");

    /* The shapes that matter: Swin-T window (49, 32) with bias and mask,
     * ViT-B (197, 64), Shaw self-attention. */
    cfg swin = {.b_ = 4, .nh = 3, .n1 = 49, .n2 = 49, .hd = 32, .nw = 2, .bias = 1, .mask = 1,
                .attn = 1, .threads = 2, .ldq = 288, .ldk = 288, .ldv = 288, .ldo = 96,
                .scale = 0.17677669f};
    compare(&swin);
    compare_bf16(&swin, 1);
    regions_as_mask(&swin);
    compare_backward(&swin, 1);
    compare_backward(&swin, 0);
    cfg vit = {.b_ = 2, .nh = 2, .n1 = 197, .n2 = 197, .hd = 64, .attn = 0, .threads = 1,
               .ldq = 384, .ldk = 384, .ldv = 384, .ldo = 128, .scale = 0.125f};
    compare(&vit);
    compare_bf16(&vit, 1);
    compare_backward(&vit, 1);
    cfg shaw = {.b_ = 2, .nh = 2, .n1 = 20, .n2 = 20, .hd = 24, .r = 9, .rel_k = 1, .rel_v = 1,
                .attn = 1, .threads = 2, .ldq = 51, .ldk = 49, .ldv = 53, .ldo = 48,
                .scale = 0.2041f};
    compare(&shaw);
    compare_bf16(&shaw, 0);
    compare_backward(&shaw, 0);
    shaw.threads = 1;
    compare_backward(&shaw, 1);

    /* long sequences: the backward takes the query rows in chunks (P and DS
     * of a chunk in L2), 5 of them here, the last ending in a partial
     * block; Shaw's tables, bias and mask on top */
    cfg longseq = {.b_ = 2, .nh = 1, .n1 = 530, .n2 = 300, .hd = 24, .r = 33, .rel_k = 1,
                   .rel_v = 1, .bias = 1, .mask = 1, .nw = 2, .threads = 2, .ldq = 27,
                   .ldk = 25, .ldv = 26, .ldo = 24, .scale = 0.2f};
    compare_backward(&longseq, 0);
    backward_set_bits(&swin, 1);
    backward_set_bits(&swin, 0);
    backward_set_bits(&longseq, 0);
    backward_set_bits(&shaw, 1);

    for (int s = 0; s < 400; s++) {
        cfg c = random_cfg(s);
        compare(&c);
        if (s % 2 == 0) compare_bf16(&c, 0);
        if (s % 4 == 1) regions_as_mask(&c);
        compare_backward(&c, s % 3 == 0);
        if (s % 8 == 0) backward_set_bits(&c, s % 3 == 0);
    }
    fully_masked_row();
    fully_masked_row_backward();
    return check_done();
}
