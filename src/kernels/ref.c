/* ref.c - the scalar reference attention kernel: the oracle.
 *
 * Written for clarity, never optimised: every SIMD kernel is tested
 * against it. One query row at a time:
 *   s_j = scale * q·(k_j + rel_k[rel_ij]) + bias_ij + mask_ij
 *   p   = softmax(s)
 *   o   = sum_j p_j (v_j + rel_v[rel_ij])
 * The Shaw terms never form the (N1, N2, hd) tensor of a_ij: the key term is
 * q·rel_k^T, R numbers per row, gathered by rel; the value term sums p into
 * R buckets by rel and multiplies the buckets by rel_v.
 *
 * The bf16 core (t->bf16): scale * q (in float32), k, v and p rounded to
 * bfloat16 (nearest even) as they enter the products, as PyTorch's
 * autocast runs Swin's and ViT's q * scale @ k^T: the logit is
 * bf16(scale q)·bf16(k_j) + bias + mask, without a scale after. q·k_j and
 * p·v[:, d] are each one chain of VDPBF16PS steps over pairs of the sum's
 * index in order (bf16.h: the odd term first, one rounding per term,
 * subnormals flushed), the last pair padded with zeros; the Shaw terms
 * float32 sums of the rounded scale q and p with the float32 tables. The
 * oracle of attn_bf16_avx512.c's products, and the core of the ref kernel
 * set in bf16. */
#include "kernels.h"
#include "bf16.h"
#include "base/internal.h"

#include <math.h>
#include <string.h>

void rai_softmax_row(float *s, int n) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    if (mx == -INFINITY) {   /* fully masked row: no finite logit */
        memset(s, 0, (size_t)n * sizeof *s);
        return;
    }
    float sum = 0;
    for (int j = 0; j < n; j++) {
        s[j] = expf(s[j] - mx);
        sum += s[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < n; j++) s[j] *= inv;
}

/* Element e of a (n) as bfloat16 bits, 0 past the end (a pair's padding). */
static inline uint16_t bf16_at(const float *a, size_t stride, int e, int n) {
    return e < n ? rai_bf16_bits(a[(size_t)e * stride]) : 0;
}

/* sum_e a[e] b[e] over n elements (strides sa, sb) as VDPBF16PS chains it. */
static float bf16_dot(const float *a, size_t sa, const float *b, size_t sb, int n) {
    float acc = 0;
    for (int e = 0; e < n; e += 2) {
        acc = rai_bf16_dot_step(acc, bf16_at(a, sa, e + 1, n), bf16_at(b, sb, e + 1, n));
        acc = rai_bf16_dot_step(acc, bf16_at(a, sa, e, n), bf16_at(b, sb, e, n));
    }
    return acc;
}

/* Row i of the probabilities into s (N2): the logits with every term, then
 * the softmax; qr (R) receives q_i·rel_k^T when there is a key table.
 * sq (hd): scratch for the bf16 core's scale q. */
static void probabilities_row(float *s, float *qr, float *sq, const rai_attn_task *t, int i) {
    const int n2 = t->n2, hd = t->hd;
    const float *qi = t->q + (size_t)i * t->ldq;
    const int32_t *reli = t->rel ? rai_rel_row(t, i) : NULL;
    const int32_t *rel2i = t->rel2 ? rai_rel2_row(t, i) : NULL;
    if (t->bf16) {   /* scale q, rounded; its products carry the scale */
        for (int d = 0; d < hd; d++) sq[d] = rai_round_bf16(t->scale * qi[d]);
        qi = sq;
    }
    if (t->rel_k)
        for (int m = 0; m < t->r; m++) {
            float acc = 0;
            for (int d = 0; d < hd; d++) acc += qi[d] * t->rel_k[(size_t)m * hd + d];
            qr[m] = acc;
        }
    for (int j = 0; j < n2; j++) {
        const float *kj = t->k + (size_t)j * t->ldk;
        float acc = 0;
        if (t->bf16)
            acc = bf16_dot(qi, 1, kj, 1, hd);
        else
            for (int d = 0; d < hd; d++) acc += qi[d] * kj[d];
        if (t->rel_k) acc += qr[reli[j]];
        if (rel2i) acc += qr[rel2i[j]];
        float l = t->bf16 ? acc : t->scale * acc;
        if (t->bias) l += t->bias[(size_t)i * n2 + j];
        if (t->mask) l += t->mask[(size_t)i * n2 + j];
        if (t->rq && t->rq[i] != t->rk[j]) l += RAI_REGION_OFF;
        s[j] = l;
    }
    rai_softmax_row(s, n2);
}

static size_t ref_work_floats(int n1, int n2, int hd, int r) {
    (void)n1;
    /* logits row, q·rel_k, p buckets, the bf16 core's scale q */
    return (size_t)n2 + 2 * (size_t)r + (size_t)hd;
}

static void ref_forward(const rai_attn_task *t) {
    const int n2 = t->n2, hd = t->hd, r = t->r;
    float *s = t->work;          /* (N2) */
    float *qr = s + n2;          /* (R)  */
    float *pb = qr + r;          /* (R)  */
    float *sq = pb + r;          /* (hd) */
    for (int i = 0; i < t->n1; i++) {
        const int32_t *reli = t->rel ? rai_rel_row(t, i) : NULL;
        probabilities_row(s, qr, sq, t, i);
        if (t->attn) memcpy(t->attn + (size_t)i * n2, s, (size_t)n2 * sizeof *s);

        float *oi = t->out + (size_t)i * t->ldo;
        if (t->bf16) {
            for (int d = 0; d < hd; d++) oi[d] = bf16_dot(s, 1, t->v + d, (size_t)t->ldv, n2);
            for (int j = 0; j < n2; j++) s[j] = rai_round_bf16(s[j]);   /* for the buckets */
        } else {
            for (int d = 0; d < hd; d++) oi[d] = 0;
            for (int j = 0; j < n2; j++) {
                const float *vj = t->v + (size_t)j * t->ldv;
                for (int d = 0; d < hd; d++) oi[d] += s[j] * vj[d];
            }
        }
        if (t->rel_v) {
            for (int m = 0; m < r; m++) pb[m] = 0;
            for (int j = 0; j < n2; j++) pb[reli[j]] += s[j];
            for (int m = 0; m < r; m++)
                for (int d = 0; d < hd; d++) oi[d] += pb[m] * t->rel_v[(size_t)m * hd + d];
        }
    }
}

/* Backward of one (b, h), recomputing p row by row from q and k (nothing is
 * saved by the forward). With do_i the gradient of o_i:
 *   dp_ij = do_i·(v_j + rel_v[rel_ij])      dv_j += p_ij do_i
 *   ds_ij = p_ij (dp_ij - sum_j p_ij dp_ij)  (softmax backward)
 *   dbias_ij += ds_ij                         (scattered into the table later)
 *   dq_i += scale sum_j ds_ij (k_j + rel_k[rel_ij]),  dk_j += scale ds_ij q_i
 * and the Shaw tables through R buckets, as in the forward:
 *   drel_v[m] += (sum_{j: rel_ij = m} p_ij) do_i
 *   drel_k[m] += scale (sum_{j: rel_ij = m} ds_ij) q_i */
static size_t ref_backward_work_floats(int n1, int n2, int hd, int r) {
    (void)n1; (void)hd;
    return 2 * (size_t)n2 + 4 * (size_t)r;
}

static void ref_backward(const rai_attn_task *t) {
    const int n2 = t->n2, hd = t->hd, r = t->r;
    float *s = t->work;          /* (N2) logits, then p */
    float *dp = s + n2;          /* (N2) dp, then ds    */
    float *qr = dp + n2;         /* (R) q·rel_k         */
    float *dor = qr + r;         /* (R) do·rel_v        */
    float *pb = dor + r;         /* (R) p buckets       */
    float *dsb = pb + r;         /* (R) ds buckets      */
    for (int i = 0; i < t->n1; i++) {
        const float *qi = t->q + (size_t)i * t->ldq;
        const float *doi = t->dout + (size_t)i * t->lddo;
        float *dqi = t->dq + (size_t)i * t->lddq;
        const int32_t *reli = t->rel ? rai_rel_row(t, i) : NULL;
        probabilities_row(s, qr, NULL, t, i);   /* the forward's, recomputed (fp32) */

        /* dp, dv, and the value table */
        if (t->rel_v)
            for (int m = 0; m < r; m++) {
                float acc = 0;
                for (int d = 0; d < hd; d++) acc += doi[d] * t->rel_v[(size_t)m * hd + d];
                dor[m] = acc;
                pb[m] = 0;
            }
        float dot = 0;   /* sum_j p_j dp_j */
        for (int j = 0; j < n2; j++) {
            const float *vj = t->v + (size_t)j * t->ldv;
            float *dvj = t->dv + (size_t)j * t->lddv;
            float acc = 0;
            for (int d = 0; d < hd; d++) {
                acc += doi[d] * vj[d];
                dvj[d] += s[j] * doi[d];
            }
            if (t->rel_v) {
                acc += dor[reli[j]];
                pb[reli[j]] += s[j];
            }
            dp[j] = acc;
            dot += s[j] * acc;
        }
        if (t->drel_v)
            for (int m = 0; m < r; m++)
                for (int d = 0; d < hd; d++) t->drel_v[(size_t)m * hd + d] += pb[m] * doi[d];

        /* ds, then dq, dk, the bias and the key table */
        for (int j = 0; j < n2; j++) dp[j] = s[j] * (dp[j] - dot);
        if (t->dbias)
            for (int j = 0; j < n2; j++) t->dbias[(size_t)i * n2 + j] += dp[j];
        if (t->rel_k) {
            for (int m = 0; m < r; m++) dsb[m] = 0;
            for (int j = 0; j < n2; j++) dsb[reli[j]] += dp[j];
            if (t->rel2) {
                const int32_t *rel2i = rai_rel2_row(t, i);
                for (int j = 0; j < n2; j++) dsb[rel2i[j]] += dp[j];
            }
            for (int m = 0; m < r; m++)
                for (int d = 0; d < hd; d++) {
                    dqi[d] += t->scale * dsb[m] * t->rel_k[(size_t)m * hd + d];
                    if (t->drel_k) t->drel_k[(size_t)m * hd + d] += t->scale * dsb[m] * qi[d];
                }
        }
        for (int j = 0; j < n2; j++) {
            const float *kj = t->k + (size_t)j * t->ldk;
            float *dkj = t->dk + (size_t)j * t->lddk;
            const float g = t->scale * dp[j];
            for (int d = 0; d < hd; d++) {
                dqi[d] += g * kj[d];
                dkj[d] += g * qi[d];
            }
        }
    }
}

const rai_attn_kernel rai_kernel_ref = {"ref", ref_forward, ref_work_floats, ref_backward,
                                      ref_backward_work_floats, 0};
