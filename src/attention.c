/* attention.c - the attention core: one framework for every variant.
 *
 * Checks a description, gathers the relative position bias from its table
 * once per call (never per window), then runs one kernel task per
 * (window, head) across threads. The arithmetic lives in src/kernels/. */
#include "internal.h"
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <string.h>

ra_status ra_attention_check(const ra_attn_desc *d) {
    if (!d) return ra_fail(RA_ERR_ARG, "attention: no description");
    if (d->b_ < 1 || d->nh < 1 || d->n1 < 1 || d->n2 < 1 || d->hd < 1)
        return ra_fail(RA_ERR_ARG, "attention: sizes B_=%d nH=%d N1=%d N2=%d hd=%d "
                       "must all be >= 1", d->b_, d->nh, d->n1, d->n2, d->hd);
    int64_t c, nn, total;
    if (!ra_mul_i64(&c, d->nh, d->hd) || c > INT32_MAX ||
        !ra_mul_i64(&nn, d->n1, d->n2) || !ra_mul_i64(&total, nn, (int64_t)d->b_ * d->nh))
        return ra_fail(RA_ERR_ARG, "attention: sizes overflow");
    if (!isfinite(d->scale))
        return ra_fail(RA_ERR_ARG, "attention: scale is not finite");
    if ((d->table == NULL) != (d->idx == NULL))
        return ra_fail(RA_ERR_ARG, "attention: a bias needs both a table and an index");
    if (d->table) {
        if (d->table_rows < 1)
            return ra_fail(RA_ERR_ARG, "attention: bias table has %lld rows",
                           (long long)d->table_rows);
        for (int64_t e = 0; e < nn; e++)
            if (d->idx[e] < 0 || d->idx[e] >= d->table_rows)
                return ra_fail(RA_ERR_ARG, "attention: index entry %lld is %d, outside "
                               "the table's %lld rows", (long long)e, d->idx[e],
                               (long long)d->table_rows);
    }
    if (d->mask && (d->nw < 1 || d->b_ % d->nw != 0))
        return ra_fail(RA_ERR_SHAPE, "attention: mask has %d windows, which does not "
                       "divide B_=%d", d->nw, d->b_);
    if (d->rel_k || d->rel_v) {
        if (!d->rel || d->r < 1)
            return ra_fail(RA_ERR_ARG, "attention: Shaw tables need rel and R >= 1");
        for (int64_t e = 0; e < nn; e++)
            if (d->rel[e] < 0 || d->rel[e] >= d->r)
                return ra_fail(RA_ERR_ARG, "attention: rel entry %lld is %d, outside "
                               "0..%d", (long long)e, d->rel[e], d->r - 1);
    }
    return RA_OK;
}

/* Workspace: the gathered bias (nH, N1, N2), then one kernel slice per
 * thread, each rounded to 64 bytes so threads never share a cache line. */
static size_t bias_floats(const ra_attn_desc *d) {
    return d->table ? (size_t)d->nh * d->n1 * d->n2 : 0;
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

static size_t slice_floats(const ra_attn_desc *d) {
    return round16(ra_kernel_active()->work_floats(d->n1, d->n2, d->hd,
                                                   (d->rel_k || d->rel_v) ? d->r : 0));
}

size_t ra_attention_workspace_size(const ra_attn_desc *d, int nthreads) {
    if (!d || nthreads < 1) return 0;
    return (round16(bias_floats(d)) + (size_t)nthreads * slice_floats(d)) * sizeof(float);
}

ra_status ra_attention_forward(float *out, int ldo, float *attn,
                               const float *q, int ldq, const float *k, int ldk,
                               const float *v, int ldv, const ra_attn_desc *d,
                               void *work, size_t work_size) {
    ra_status st = ra_attention_check(d);
    if (st) return st;
    const int C = d->nh * d->hd;
    if (!out || !q || !k || !v || !work)
        return ra_fail(RA_ERR_ARG, "attention: missing buffer");
    if (ldo < C || ldq < C || ldk < C || ldv < C)
        return ra_fail(RA_ERR_ARG, "attention: row strides (%d, %d, %d, %d) below C=%d",
                       ldo, ldq, ldk, ldv, C);
    int nt = ra_threads_get();
    const int ntasks = d->b_ * d->nh;
    if (nt > ntasks) nt = ntasks;
    if (work_size < ra_attention_workspace_size(d, nt))
        return ra_fail(RA_ERR_ARG, "attention: workspace of %zu bytes, %zu needed",
                       work_size, ra_attention_workspace_size(d, nt));

    const ra_attn_kernel *kern = ra_kernel_active();
    const size_t nn = (size_t)d->n1 * d->n2;
    float *bias = work;
    float *slices = bias + round16(bias_floats(d));
    const size_t slice = slice_floats(d);

    if (d->table) {  /* bias[h, e] = table[idx[e], h], once for all windows */
        for (int h = 0; h < d->nh; h++)
            for (size_t e = 0; e < nn; e++)
                bias[h * nn + e] = d->table[(size_t)d->idx[e] * d->nh + h];
    }

    #pragma omp parallel for num_threads(nt) schedule(static)
    for (int task = 0; task < ntasks; task++) {
        const int b = task / d->nh, h = task % d->nh;
        const size_t off = (size_t)h * d->hd;
        ra_attn_task t = {
            .n1 = d->n1, .n2 = d->n2, .hd = d->hd, .scale = d->scale,
            .q = q + (size_t)b * d->n1 * ldq + off, .ldq = ldq,
            .k = k + (size_t)b * d->n2 * ldk + off, .ldk = ldk,
            .v = v + (size_t)b * d->n2 * ldv + off, .ldv = ldv,
            .out = out + (size_t)b * d->n1 * ldo + off, .ldo = ldo,
            .attn = attn ? attn + (size_t)task * nn : NULL,
            .bias = d->table ? bias + h * nn : NULL,
            .mask = d->mask ? d->mask + (size_t)(b % d->nw) * nn : NULL,
            .rel_k = d->rel_k, .rel_v = d->rel_v, .rel = d->rel, .r = d->r,
            .work = slices + (size_t)omp_get_thread_num() * slice,
        };
        kern->forward(&t);
    }
    return RA_OK;
}
