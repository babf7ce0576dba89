/* ref.c - the scalar reference attention kernel: the oracle.
 *
 * Written for clarity, never optimised: every SIMD kernel is tested
 * against it. One query row at a time:
 *   s_j = scale * q·(k_j + rel_k[rel_ij]) + bias_ij + mask_ij
 *   p   = softmax(s)
 *   o   = sum_j p_j (v_j + rel_v[rel_ij])
 * The Shaw terms never form the (N1, N2, hd) tensor of a_ij: the key term is
 * q·rel_k^T, R numbers per row, gathered by rel; the value term sums p into
 * R buckets by rel and multiplies the buckets by rel_v. */
#include "kernels.h"

#include <math.h>
#include <string.h>

void ra_softmax_row(float *s, int n) {
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

static size_t ref_work_floats(int n1, int n2, int hd, int r) {
    (void)n1; (void)hd;
    return (size_t)n2 + 2 * (size_t)r;   /* logits row, q·rel_k, p buckets */
}

static void ref_forward(const ra_attn_task *t) {
    const int n2 = t->n2, hd = t->hd, r = t->r;
    float *s = t->work;          /* (N2) */
    float *qr = s + n2;          /* (R)  */
    float *pb = qr + r;          /* (R)  */
    for (int i = 0; i < t->n1; i++) {
        const float *qi = t->q + (size_t)i * t->ldq;
        const int32_t *reli = t->rel ? t->rel + (size_t)i * n2 : NULL;
        if (t->rel_k)
            for (int m = 0; m < r; m++) {
                float acc = 0;
                for (int d = 0; d < hd; d++) acc += qi[d] * t->rel_k[(size_t)m * hd + d];
                qr[m] = acc;
            }
        for (int j = 0; j < n2; j++) {
            const float *kj = t->k + (size_t)j * t->ldk;
            float acc = 0;
            for (int d = 0; d < hd; d++) acc += qi[d] * kj[d];
            if (t->rel_k) acc += qr[reli[j]];
            float l = t->scale * acc;
            if (t->bias) l += t->bias[(size_t)i * n2 + j];
            if (t->mask) l += t->mask[(size_t)i * n2 + j];
            s[j] = l;
        }
        ra_softmax_row(s, n2);
        if (t->attn) memcpy(t->attn + (size_t)i * n2, s, (size_t)n2 * sizeof *s);

        float *oi = t->out + (size_t)i * t->ldo;
        for (int d = 0; d < hd; d++) oi[d] = 0;
        for (int j = 0; j < n2; j++) {
            const float *vj = t->v + (size_t)j * t->ldv;
            for (int d = 0; d < hd; d++) oi[d] += s[j] * vj[d];
        }
        if (t->rel_v) {
            for (int m = 0; m < r; m++) pb[m] = 0;
            for (int j = 0; j < n2; j++) pb[reli[j]] += s[j];
            for (int m = 0; m < r; m++)
                for (int d = 0; d < hd; d++) oi[d] += pb[m] * t->rel_v[(size_t)m * hd + d];
        }
    }
}

const ra_attn_kernel ra_kernel_ref = {"ref", ref_forward, ref_work_floats};
