/* test_grad.c - the attention core's backward against central finite
 * differences of the same function evaluated in double precision.
 *
 * The loss is L = sum(out * dout) for a fixed random dout, so dL/dout = dout
 * and ra_attention_backward must give dL/dq, dk, dv, dtable, drel_k, drel_v.
 * The double-precision forward below is written directly from the formulas
 * of docs/reference.md, section 1.1 (Shaw's terms included)
 * (forming a_ij is fine here: it is the oracle, not the library). */
#include "check.h"
#include "relattn.h"

#include <stdint.h>
#include <string.h>

typedef struct {
    int b_, nh, n1, n2, hd, nw, r, t;
    int use_table, use_mask, use_rk, use_rv;
    float scale;
    /* parameters, float (what the library sees) and double (for FD) */
    float *q, *k, *v, *table, *mask, *rk, *rv, *dout;
    int32_t *idx, *rel;
} problem;

static uint64_t rng = 88172645463325252ull;
static double uni(void) {   /* xorshift64, uniform in (-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}
static float *rnd(size_t n, double s) {
    float *p = malloc(n * sizeof *p + 4);
    for (size_t i = 0; i < n; i++) p[i] = (float)(s * uni());
    return p;
}

/* L in double, reading the float parameters (one may be perturbed through
 * the pointer/offset/delta triple). */
static double loss(const problem *P, const float *which, size_t at, double delta) {
    const int C = P->nh * P->hd;
#define V(arr, i) ((double)(arr)[i] + ((arr) == which && (size_t)(i) == at ? delta : 0.0))
    double L = 0;
    double s[64], o[16];
    for (int b = 0; b < P->b_; b++)
        for (int h = 0; h < P->nh; h++)
            for (int i = 0; i < P->n1; i++) {
                double mx = -1e300;
                for (int j = 0; j < P->n2; j++) {
                    double acc = 0;
                    for (int d = 0; d < P->hd; d++) {
                        double kk = V(P->k, ((size_t)b * P->n2 + j) * C + h * P->hd + d);
                        if (P->use_rk) kk += V(P->rk, (size_t)P->rel[i * P->n2 + j] * P->hd + d);
                        acc += V(P->q, ((size_t)b * P->n1 + i) * C + h * P->hd + d) * kk;
                    }
                    double l = P->scale * acc;
                    if (P->use_table) l += V(P->table, (size_t)P->idx[i * P->n2 + j] * P->nh + h);
                    if (P->use_mask) l += P->mask[((size_t)(b % P->nw) * P->n1 + i) * P->n2 + j];
                    s[j] = l;
                    mx = l > mx ? l : mx;
                }
                double sum = 0;
                for (int j = 0; j < P->n2; j++) sum += (s[j] = exp(s[j] - mx));
                for (int d = 0; d < P->hd; d++) o[d] = 0;
                for (int j = 0; j < P->n2; j++)
                    for (int d = 0; d < P->hd; d++) {
                        double vv = V(P->v, ((size_t)b * P->n2 + j) * C + h * P->hd + d);
                        if (P->use_rv) vv += V(P->rv, (size_t)P->rel[i * P->n2 + j] * P->hd + d);
                        o[d] += s[j] / sum * vv;
                    }
                for (int d = 0; d < P->hd; d++)
                    L += o[d] * P->dout[((size_t)b * P->n1 + i) * C + h * P->hd + d];
            }
#undef V
    return L;
}

static void compare_fd(const problem *P, const float *param, const float *grad, size_t n,
                       const char *what) {
    const double h = 1e-3;
    double worst = 0;
    for (size_t e = 0; e < n; e++) {
        double fd = (loss(P, param, e, h) - loss(P, param, e, -h)) / (2 * h);
        double err = fabs(fd - grad[e]) / (1e-4 + 1e-3 * fabs(fd));
        worst = err > worst ? err : worst;
    }
    CHECK(worst <= 1.0, "%s: gradient off finite differences by %.3g x tolerance", what, worst);
}

static void run(int b_, int nh, int n1, int n2, int hd, int table, int mask, int rk, int rv,
                const char *kname) {
    problem P = {.b_ = b_, .nh = nh, .n1 = n1, .n2 = n2, .hd = hd, .nw = 2, .r = 3, .t = 7,
                 .use_table = table, .use_mask = mask, .use_rk = rk, .use_rv = rv,
                 .scale = 0.7f};
    const int C = nh * hd;
    P.q = rnd((size_t)b_ * n1 * C, 1), P.k = rnd((size_t)b_ * n2 * C, 1);
    P.v = rnd((size_t)b_ * n2 * C, 1), P.dout = rnd((size_t)b_ * n1 * C, 1);
    P.table = rnd((size_t)P.t * nh, 1), P.mask = rnd((size_t)P.nw * n1 * n2, 2);
    P.rk = rnd((size_t)P.r * hd, 1), P.rv = rnd((size_t)P.r * hd, 1);
    P.idx = malloc(sizeof(int32_t) * n1 * n2), P.rel = malloc(sizeof(int32_t) * n1 * n2);
    for (int e = 0; e < n1 * n2; e++) {
        P.idx[e] = (int32_t)((uni() + 1) * 0.5 * P.t) % P.t;
        P.rel[e] = (int32_t)((uni() + 1) * 0.5 * P.r) % P.r;
    }
    ra_attn_desc d = {.b_ = b_, .nh = nh, .n1 = n1, .n2 = n2, .hd = hd, .scale = P.scale,
                      .table = table ? P.table : NULL, .idx = table ? P.idx : NULL,
                      .table_rows = P.t, .mask = mask ? P.mask : NULL, .nw = P.nw,
                      .rel_k = rk ? P.rk : NULL, .rel_v = rv ? P.rv : NULL,
                      .rel = (rk || rv) ? P.rel : NULL, .r = P.r};
    float *dq = calloc((size_t)b_ * n1 * C, 4), *dk = calloc((size_t)b_ * n2 * C, 4);
    float *dv = calloc((size_t)b_ * n2 * C, 4), *dt = calloc((size_t)P.t * nh, 4);
    float *drk = calloc((size_t)P.r * hd, 4), *drv = calloc((size_t)P.r * hd, 4);
    size_t ws = ra_attention_backward_workspace_size(&d, ra_threads_get());
    void *work = malloc(ws);
    ra_status st = ra_attention_backward(dq, C, dk, C, dv, C, dt, drk, drv, P.dout, C, P.q, C,
                                         P.k, C, P.v, C, &d, work, ws);
    CHECK(st == RA_OK, "backward: %s", ra_last_error());
    char what[160];
#define CMP(param, grad, n, nm)                                                              \
    snprintf(what, sizeof what, "%s [%s] B_=%d nH=%d N1=%d N2=%d hd=%d t%d m%d k%d v%d", nm,  \
             kname, b_, nh, n1, n2, hd, table, mask, rk, rv);                                 \
    compare_fd(&P, param, grad, n, what)
    CMP(P.q, dq, (size_t)b_ * n1 * C, "dq");
    CMP(P.k, dk, (size_t)b_ * n2 * C, "dk");
    CMP(P.v, dv, (size_t)b_ * n2 * C, "dv");
    if (table) { CMP(P.table, dt, (size_t)P.t * nh, "dtable"); }
    if (rk) { CMP(P.rk, drk, (size_t)P.r * hd, "drel_k"); }
    if (rv) { CMP(P.rv, drv, (size_t)P.r * hd, "drel_v"); }
#undef CMP
    free(P.q), free(P.k), free(P.v), free(P.dout), free(P.table), free(P.mask), free(P.rk);
    free(P.rv), free(P.idx), free(P.rel), free(dq), free(dk), free(dv), free(dt), free(drk);
    free(drv), free(work);
}

int main(void) {
    for (int kid = 0; kid < RA_KERNEL_COUNT; kid++) {
        if (!ra_kernel_supported((ra_kernel_id)kid)) continue;
        ra_kernel_select((ra_kernel_id)kid);
        const char *kn = ra_kernel_name((ra_kernel_id)kid);
        for (int threads = 1; threads <= 2; threads++) {
            ra_threads_set(threads);
            for (int f = 0; f < 16; f++)   /* every combination of the four features */
                run(4, 2, 5, 6, 3, f & 1, (f >> 1) & 1, (f >> 2) & 1, (f >> 3) & 1, kn);
            run(2, 1, 1, 1, 1, 1, 1, 1, 1, kn);    /* one token */
            run(2, 3, 7, 7, 4, 1, 0, 1, 1, kn);    /* self-attention shape */
        }
    }
    return check_done();
}
