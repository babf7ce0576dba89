/* core.c - the attention core: one framework for every variant.
 *
 * Checks a description, gathers the relative position bias from its table
 * once per call (never per window), then runs one kernel task per
 * (window, head) across threads. The arithmetic lives in src/kernels/. */
#include "base/internal.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stddef.h>
#include <omp.h>
#include <string.h>

ra_status ra_attention_check(const ra_attn_desc *d) {
    if (!d) return rai_fail(RA_ERR_ARG, "attention: no description");
    if (d->b_ < 1 || d->nh < 1 || d->n1 < 1 || d->n2 < 1 || d->hd < 1)
        return rai_fail(RA_ERR_ARG, "attention: sizes B_=%d nH=%d N1=%d N2=%d hd=%d "
                        "must all be >= 1", d->b_, d->nh, d->n1, d->n2, d->hd);
    int64_t c, nn, total;
    if (!rai_mul_i64(&c, d->nh, d->hd) || c > INT32_MAX ||
        !rai_mul_i64(&nn, d->n1, d->n2) || !rai_mul_i64(&total, nn, (int64_t)d->b_ * d->nh))
        return rai_fail(RA_ERR_ARG, "attention: sizes overflow");
    if (!isfinite(d->scale))
        return rai_fail(RA_ERR_ARG, "attention: scale is not finite");
    if ((d->table == NULL) != (d->idx == NULL))
        return rai_fail(RA_ERR_ARG, "attention: a bias needs both a table and an index");
    if (d->table) {
        if (d->table_rows < 1)
            return rai_fail(RA_ERR_ARG, "attention: bias table has %lld rows",
                            (long long)d->table_rows);
        for (int64_t e = 0; e < nn; e++)
            if (d->idx[e] < 0 || d->idx[e] >= d->table_rows)
                return rai_fail(RA_ERR_ARG, "attention: index entry %lld is %d, outside "
                                "the table's %lld rows", (long long)e, d->idx[e],
                                (long long)d->table_rows);
    }
    if ((d->mask || d->regions) && (d->nw < 1 || d->w0 < 0))
        return rai_fail(RA_ERR_SHAPE, "attention: a mask of %d windows from window %d",
                        d->nw, d->w0);
    if (d->rel_k || d->rel_v) {
        if (!d->rel || d->r < 1)
            return rai_fail(RA_ERR_ARG, "attention: Shaw tables need rel and R >= 1");
        const int64_t ld = d->rel_ld ? d->rel_ld : d->n2;
        for (int i = 0; i < d->n1; i++)
            for (int j = 0; j < d->n2; j++) {
                const int32_t v = d->rel[(ptrdiff_t)i * ld + j];
                const int32_t v2 = d->rel2 ? d->rel2[(ptrdiff_t)i * ld + j] : 0;
                if (v < 0 || v >= d->r || v2 < 0 || v2 >= d->r)
                    return rai_fail(RA_ERR_ARG, "attention: rel%s entry (%d, %d) is %d, outside "
                                    "0..%d", v < 0 || v >= d->r ? "" : "2", i, j,
                                    v < 0 || v >= d->r ? v : v2, d->r - 1);
            }
    }
    if (d->precision != RA_PRECISION_FP32 && d->precision != RA_PRECISION_BF16)
        return rai_fail(RA_ERR_ARG, "attention: precision %d is neither fp32 (0) nor bf16 (1)",
                        d->precision);
    if (d->rel2 && (!d->rel_k || d->rel_v))
        return rai_fail(RA_ERR_ARG, "attention: a second index needs a key table and no value "
                        "table");
    return RA_OK;
}

/* Workspace: the gathered bias (nH, N1, N2), then one kernel slice per
 * thread, each rounded to 64 bytes so threads never share a cache line. */
static size_t bias_floats(const ra_attn_desc *d) {
    return d->table ? (size_t)d->nh * d->n1 * d->n2 : 0;
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* The forward's kernel for d; *round_qkv: 1 when the framework rounds q,
 * k and v to bfloat16 for it (the bf16 core on a float32 kernel, which
 * rounds p itself): where the kernel set has no kernel of its own for the
 * bf16 core, and for the Shaw tables, which only ref's handles. */
static const rai_attn_kernel *forward_kernel(const ra_attn_desc *d, int *round_qkv) {
    *round_qkv = 0;
    if (d->precision != RA_PRECISION_BF16) return rai_kernel_active();
    const rai_attn_kernel *k = rai_kernel_bf16();
    if (k && (k == &rai_kernel_ref || !(d->rel_k || d->rel_v))) return k;
    *round_qkv = 1;
    return rai_kernel_active();
}

/* A task's rows of q (N1, hd), then k and v (N2, hd), rounded, when the
 * framework rounds them: after the kernel's scratch in the slice. */
static size_t rounded_floats(const ra_attn_desc *d) {
    return round16((size_t)d->n1 * d->hd) + 2 * round16((size_t)d->n2 * d->hd);
}

static size_t slice_floats(const ra_attn_desc *d) {
    int round_qkv;
    const rai_attn_kernel *k = forward_kernel(d, &round_qkv);
    return round16(k->work_floats(d->n1, d->n2, d->hd, (d->rel_k || d->rel_v) ? d->r : 0)) +
           (round_qkv ? rounded_floats(d) : 0);
}

/* dst (n, hd), packed = s * src (n rows, stride ld) rounded to bfloat16. */
static void round_rows(float *dst, const float *src, int ld, int n, int hd, float s) {
    for (int i = 0; i < n; i++)
        for (int e = 0; e < hd; e++)
            dst[(size_t)i * hd + e] = rai_round_bf16(s * src[(size_t)i * ld + e]);
}

/* Where the rows of a task (sample task / nh, head task % nh) begin in a
 * (B_ * n, ld) tensor: its q, k, v, out and their gradients (n = N1 or N2). */
static inline size_t task_off(int ld, int n, int task, const ra_attn_desc *d) {
    return (size_t)(task / d->nh) * n * ld + (size_t)(task % d->nh) * d->hd;
}

/* The n-th task of the forward, as task = b * nH + h: n itself, or by
 * head (n = h * B_ + b). */
static inline int task_at(const ra_attn_desc *d, int n, int by_head) {
    return by_head ? n % d->b_ * d->nh + n / d->b_ : n;
}

/* Window b's region labels (N1 queries, then N2 keys), or NULL. */
static inline const int32_t *region_row(const ra_attn_desc *d, int b) {
    return d->regions ? d->regions + (size_t)((d->w0 + b) % d->nw) * (d->n1 + d->n2) : NULL;
}

/* bias (nH, N1, N2): bias[h, e] = table[idx[e], h], once for all windows,
 * on nt threads (Video Swin's last stage: 24 heads of 392 x 392) */
static void gather_bias(float *bias, const ra_attn_desc *d, int nt) {
    const size_t nn = (size_t)d->n1 * d->n2;
    if (!d->table) return;
    #pragma omp parallel for num_threads(nt) schedule(static) if (nn * d->nh >= 65536)
    for (int h = 0; h < d->nh; h++)
        for (size_t e = 0; e < nn; e++) bias[h * nn + e] = d->table[(size_t)d->idx[e] * d->nh + h];
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
        return rai_fail(RA_ERR_ARG, "attention: missing buffer");
    if (ldo < C || ldq < C || ldk < C || ldv < C)
        return rai_fail(RA_ERR_ARG, "attention: row strides (%d, %d, %d, %d) below C=%d",
                        ldo, ldq, ldk, ldv, C);
    int nt = ra_threads_get();
    const int ntasks = d->b_ * d->nh;
    if (nt > ntasks) nt = ntasks;
    if (work_size < ra_attention_workspace_size(d, nt))
        return rai_fail(RA_ERR_ARG, "attention: workspace of %zu bytes, %zu needed",
                        work_size, ra_attention_workspace_size(d, nt));

    int round_qkv;
    const rai_attn_kernel *kern = forward_kernel(d, &round_qkv);
    const size_t nn = (size_t)d->n1 * d->n2;
    float *bias = work;
    float *slices = bias + round16(bias_floats(d));
    const size_t slice = slice_floats(d);
    const size_t rounded_at = slice - (round_qkv ? rounded_floats(d) : 0);

    gather_bias(bias, d, nt);

    /* The order of the tasks: window by window, each window's heads in
     * turn (its rows of q, k, v are read together); but where the heads'
     * gathered biases together outgrow an L2 (Video Swin's 392-token
     * windows: 0.6 MB a head), head by head, so that a thread's
     * consecutive tasks read the same bias: 5-6 % of swin3d_t's forward
     * on a Zen 5, in fp32 and bf16 alike. */
    const int by_head = d->table && bias_floats(d) * sizeof(float) > ((size_t)1 << 20);
    #pragma omp parallel for num_threads(nt) schedule(static)
    for (int n = 0; n < ntasks; n++) {
        const int task = task_at(d, n, by_head);
        const int b = task / d->nh, h = task % d->nh;
        rai_attn_task t = {
            .n1 = d->n1, .n2 = d->n2, .hd = d->hd, .scale = d->scale,
            .q = q + task_off(ldq, d->n1, task, d), .ldq = ldq,
            .k = k + task_off(ldk, d->n2, task, d), .ldk = ldk,
            .v = v + task_off(ldv, d->n2, task, d), .ldv = ldv,
            .out = out + task_off(ldo, d->n1, task, d), .ldo = ldo,
            .attn = attn ? attn + (size_t)task * nn : NULL,
            .bias = d->table ? bias + h * nn : NULL,
            .mask = d->mask ? d->mask + (size_t)((d->w0 + b) % d->nw) * nn : NULL,
            .rq = region_row(d, b), .rk = d->regions ? region_row(d, b) + d->n1 : NULL,
            .rel_k = d->rel_k, .rel_v = d->rel_v, .rel = d->rel, .r = d->r,
            .rel_ld = d->rel_ld ? d->rel_ld : d->n2, .rel2 = d->rel2,
            .work = slices + (size_t)omp_get_thread_num() * slice,
            .bf16 = d->precision == RA_PRECISION_BF16,
        };
        if (n + 1 < ntasks) {   /* likely this thread's next (static schedule) */
            const int next = task_at(d, n + 1, by_head);
            t.next_q = q + task_off(ldq, d->n1, next, d);
            t.next_k = k + task_off(ldk, d->n2, next, d);
            t.next_v = v + task_off(ldv, d->n2, next, d);
        }
        if (round_qkv) {
            float *qr = t.work + rounded_at, *kr = qr + round16((size_t)d->n1 * d->hd);
            float *vr = kr + round16((size_t)d->n2 * d->hd);
            round_rows(qr, t.q, ldq, d->n1, d->hd, d->scale);   /* bf16(scale q): ref.c */
            round_rows(kr, t.k, ldk, d->n2, d->hd, 1.0f);
            round_rows(vr, t.v, ldv, d->n2, d->hd, 1.0f);
            t.q = qr, t.k = kr, t.v = vr, t.ldq = t.ldk = t.ldv = d->hd, t.scale = 1.0f;
        }
        kern->forward(&t);
    }
    return RA_OK;
}

/* ---- backward ------------------------------------------------------------
 * Workspace: the gathered bias, then per thread the kernel's scratch and its
 * private accumulators for the shared parameters (the bias gradient per
 * head, the Shaw tables). Threads never write the same gradient: dq, dk and
 * dv of a task are its own (window, head) columns, and the shared ones are
 * reduced once at the end, so the hot loop has no atomics. */
static const rai_attn_kernel *backward_kernel(void) {
    const rai_attn_kernel *k = rai_kernel_active();
    return k->backward ? k : &rai_kernel_ref;
}

typedef struct {
    size_t scratch, dbias, drel, total;   /* floats, each rounded to 16 */
} bslice;

static bslice backward_slice(const ra_attn_desc *d, int want_dtable, int want_drel) {
    const int r = (d->rel_k || d->rel_v) ? d->r : 0;
    bslice s;
    s.scratch = round16(backward_kernel()->backward_work_floats(d->n1, d->n2, d->hd, r));
    s.dbias = want_dtable && d->table ? round16(bias_floats(d)) : 0;
    s.drel = want_drel ? round16((size_t)r * d->hd) : 0;
    s.total = s.scratch + s.dbias + 2 * s.drel;
    return s;
}

size_t ra_attention_backward_workspace_size(const ra_attn_desc *d, int nthreads) {
    if (!d || nthreads < 1) return 0;
    return (round16(bias_floats(d)) + (size_t)nthreads * backward_slice(d, 1, 1).total) *
           sizeof(float);
}

ra_status ra_attention_backward(float *dq, int lddq, float *dk, int lddk, float *dv, int lddv,
                                float *dtable, float *drel_k, float *drel_v,
                                const float *dout, int lddo,
                                const float *q, int ldq, const float *k, int ldk,
                                const float *v, int ldv, const ra_attn_desc *d,
                                void *work, size_t work_size) {
    return rai_attention_backward_set(dq, lddq, dk, lddk, dv, lddv, dtable, drel_k, drel_v, dout,
                                      lddo, q, ldq, k, ldk, v, ldv, d, work, work_size, 0);
}

/* set: each task zeros its slices of dq, dk, dv before its kernel adds into
 * them (the tasks' slices tile the three: every (window, head) owns its
 * rows of its head's columns), in parallel and just before use, instead of
 * the caller zeroing tens of MB on one thread. */
ra_status rai_attention_backward_set(float *dq, int lddq, float *dk, int lddk, float *dv,
                                     int lddv, float *dtable, float *drel_k, float *drel_v,
                                     const float *dout, int lddo, const float *q, int ldq,
                                     const float *k, int ldk, const float *v, int ldv,
                                     const ra_attn_desc *d, void *work, size_t work_size,
                                     int set) {
    ra_status st = ra_attention_check(d);
    if (st) return st;
    if (d->precision != RA_PRECISION_FP32)
        return rai_fail(RA_ERR_ARG, "attention backward: the bf16 core is for inference; "
                        "its backward is fp32's (precision 0)");
    const int C = d->nh * d->hd;
    if (!dq || !dk || !dv || !dout || !q || !k || !v || !work)
        return rai_fail(RA_ERR_ARG, "attention backward: missing buffer");
    if (lddq < C || lddk < C || lddv < C || lddo < C || ldq < C || ldk < C || ldv < C)
        return rai_fail(RA_ERR_ARG, "attention backward: a row stride is below C=%d", C);
    int nt = ra_threads_get();
    const int ntasks = d->b_ * d->nh;
    if (nt > ntasks) nt = ntasks;
    if (work_size < ra_attention_backward_workspace_size(d, nt))
        return rai_fail(RA_ERR_ARG, "attention backward: workspace of %zu bytes, %zu needed",
                        work_size, ra_attention_backward_workspace_size(d, nt));
    if (!d->table) dtable = NULL;
    if (!d->rel_k) drel_k = NULL;
    if (!d->rel_v) drel_v = NULL;

    const rai_attn_kernel *kern = backward_kernel();
    const size_t nn = (size_t)d->n1 * d->n2, hdr = (size_t)d->r * d->hd;
    const bslice sl = backward_slice(d, dtable != NULL, drel_k || drel_v);
    float *bias = work;
    float *slices = bias + round16(bias_floats(d));
    gather_bias(bias, d, nt);
    for (int t = 0; t < nt; t++)   /* the private accumulators start at zero */
        memset(slices + t * sl.total + sl.scratch, 0,
               (sl.dbias + 2 * sl.drel) * sizeof(float));

    #pragma omp parallel for num_threads(nt) schedule(static)
    for (int task = 0; task < ntasks; task++) {
        const int b = task / d->nh, h = task % d->nh;
        float *mine = slices + (size_t)omp_get_thread_num() * sl.total;
        float *acc = mine + sl.scratch;
        rai_attn_task t = {
            .n1 = d->n1, .n2 = d->n2, .hd = d->hd, .scale = d->scale,
            .q = q + task_off(ldq, d->n1, task, d), .ldq = ldq,
            .k = k + task_off(ldk, d->n2, task, d), .ldk = ldk,
            .v = v + task_off(ldv, d->n2, task, d), .ldv = ldv,
            .bias = d->table ? bias + h * nn : NULL,
            .mask = d->mask ? d->mask + (size_t)((d->w0 + b) % d->nw) * nn : NULL,
            .rq = region_row(d, b), .rk = d->regions ? region_row(d, b) + d->n1 : NULL,
            .rel_k = d->rel_k, .rel_v = d->rel_v, .rel = d->rel, .r = d->r,
            .rel_ld = d->rel_ld ? d->rel_ld : d->n2, .rel2 = d->rel2,
            .work = mine,
            .dout = dout + task_off(lddo, d->n1, task, d), .lddo = lddo,
            .dq = dq + task_off(lddq, d->n1, task, d), .lddq = lddq,
            .dk = dk + task_off(lddk, d->n2, task, d), .lddk = lddk,
            .dv = dv + task_off(lddv, d->n2, task, d), .lddv = lddv,
            .dbias = dtable ? acc + h * nn : NULL,
            .drel_k = drel_k ? acc + sl.dbias : NULL,
            .drel_v = drel_v ? acc + sl.dbias + sl.drel : NULL,
        };
        if (task + 1 < ntasks) {   /* likely this thread's next (static schedule) */
            t.next_q = q + task_off(ldq, d->n1, task + 1, d);
            t.next_k = k + task_off(ldk, d->n2, task + 1, d);
            t.next_v = v + task_off(ldv, d->n2, task + 1, d);
            t.next_do = dout + task_off(lddo, d->n1, task + 1, d);
        }
        if (set && kern->sets_grads) {
            t.set = 1;   /* the kernel stores 0 + its sums: no zeroing pass */
        } else if (set) {
            for (int i = 0; i < d->n1; i++)
                memset(t.dq + (size_t)i * lddq, 0, (size_t)d->hd * sizeof(float));
            for (int j = 0; j < d->n2; j++) {
                memset(t.dk + (size_t)j * lddk, 0, (size_t)d->hd * sizeof(float));
                memset(t.dv + (size_t)j * lddv, 0, (size_t)d->hd * sizeof(float));
            }
        }
        kern->backward(&t);
    }

    /* reduce the threads' accumulators once; the bias gradient goes back
     * through the index: dtable[idx[i,j], h] += dbias[h, i, j] */
    for (int t = 0; t < nt; t++) {
        const float *acc = slices + t * sl.total + sl.scratch;
        if (dtable)
            for (int h = 0; h < d->nh; h++)
                for (size_t e = 0; e < nn; e++)
                    dtable[(size_t)d->idx[e] * d->nh + h] += acc[h * nn + e];
        for (size_t e = 0; drel_k && e < hdr; e++) drel_k[e] += acc[sl.dbias + e];
        for (size_t e = 0; drel_v && e < hdr; e++) drel_v[e] += acc[sl.dbias + sl.drel + e];
    }
    return RA_OK;
}
