/* optim.c - training utilities: AdamW as torch.optim.AdamW, gradient-norm
 * clipping as torch.nn.utils.clip_grad_norm_, the weight-decay rule of Swin
 * and timm's cosine learning-rate schedule with warm-up. */
#include "base/internal.h"
#include "kernels/nn_kernels.h"

#include <math.h>
#include <string.h>

#define RA_PI 3.14159265358979323846
#define RA_OPT_PAR_MIN ((int64_t)1 << 15)

/* torch 1.13 _single_tensor_adamw, step by step in float32 with the scalar
 * factors computed in double and rounded to float as PyTorch's CPU kernels
 * do for a Python scalar:
 *   param.mul_(1 - lr * wd)
 *   exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
 *   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
 *   denom = (exp_avg_sq.sqrt() / sqrt(1 - beta2^t)).add_(eps)
 *   param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1^t))          */
ra_status ra_adamw_step(float *param,         /* (n) updated */
                        float *m,             /* (n) exp_avg, updated */
                        float *v,             /* (n) exp_avg_sq, updated */
                        const float *grad,    /* (n) */
                        int64_t n, int64_t step, const ra_adamw_config *cfg,
                        int decay) {
    if (!cfg || step < 1 || n < 0)
        return rai_fail(RA_ERR_ARG, "ra_adamw_step: step %lld, n %lld%s", (long long)step,
                        (long long)n, cfg ? "" : ", no configuration");
    const double lr = cfg->lr, b1 = cfg->beta1, b2 = cfg->beta2;
    if (!(b1 >= 0.0 && b1 < 1.0) || !(b2 >= 0.0 && b2 < 1.0) || !(cfg->eps >= 0.0) ||
        !(lr >= 0.0) || !(cfg->weight_decay >= 0.0))
        return rai_fail(RA_ERR_ARG, "ra_adamw_step: lr %g, betas (%g, %g), eps %g, "
                        "weight_decay %g", lr, b1, b2, cfg->eps, cfg->weight_decay);
    const double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
    const rai_adamw_factors a = {.keep = (float)(1.0 - lr * (decay ? cfg->weight_decay : 0.0)),
                                 .b1 = (float)b1, .a1 = (float)(1.0 - b1),
                                 .b2 = (float)b2, .a2 = (float)(1.0 - b2),
                                 .neg_step = (float)-(lr / bc1), .bc2_sqrt = (float)sqrt(bc2),
                                 .eps = (float)cfg->eps};
    /* the kernel set's element-wise step (the same bits in every set), in
     * blocks over the threads */
    void (*const step_fn)(float *, float *, float *, const float *, int64_t,
                          const rai_adamw_factors *) = rai_nn_kernel_active()->adamw;
    const int64_t blk = 4096, nblk = (n + blk - 1) / blk;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(ra_threads_get()) if (n >= RA_OPT_PAR_MIN)
#endif
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t i = b * blk, len = n - i < blk ? n - i : blk;
        step_fn(param + i, m + i, v + i, grad + i, len, &a);
    }
    return RA_OK;
}

int ra_param_no_decay(const char *name) {
    static const char *const parts[] = {
        "norm", "relative_position_bias_table", "absolute_pos_embed", "cls_token",
        "pos_embed", "relative_keys", "relative_values",
        "cpb_mlp", "logit_scale"};   /* SwinV2's skip keywords */
    if (!name) return 0;
    if (rai_ends_with(name, ".bias")) return 1;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (strstr(name, parts[i])) return 1;
    return 0;
}

/* torch 1.13 clip_grad_norm_ (norm_type 2): the norm of each gradient as a
 * float tensor, the norm of those norms, clip_coef = max_norm / (total +
 * 1e-6), clamped to at most 1 (a NaN stays NaN), every gradient multiplied
 * by it. Sums of squares here are in double. */
double rai_grad_sumsq(float *const *grads, const int64_t *sizes, int count) {
    double tot = 0.0;
    for (int t = 0; t < count; t++) {
        const float *g = grads[t];
        const int64_t n = sizes[t];
        if (!g || n <= 0) continue;
        double ss = 0.0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) reduction(+ : ss) num_threads(ra_threads_get()) if (n >= RA_OPT_PAR_MIN)
#endif
        for (int64_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
        const double nt = (float)sqrt(ss);   /* the per-tensor norm is a float */
        tot += nt * nt;
    }
    return tot;
}

void rai_ema_update(float *avg, const float *w, int64_t n, double decay) {
    const float a = (float)(1.0 - decay);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(ra_threads_get()) if (n >= RA_OPT_PAR_MIN)
#endif
    for (int64_t i = 0; i < n; i++) avg[i] += a * (w[i] - avg[i]);
}

void rai_grad_clip(float *const *grads, const int64_t *sizes, int count, float total,
                   float max_norm) {
    float coef = max_norm / (total + 1e-6f);
    if (coef > 1.0f) coef = 1.0f;   /* torch.clamp(max=1): NaN passes */
    if (coef == 1.0f) return;        /* multiplying by 1 changes nothing */
    for (int t = 0; t < count; t++) {
        float *g = grads[t];
        const int64_t n = sizes[t];
        if (!g || n <= 0) continue;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(ra_threads_get()) if (n >= RA_OPT_PAR_MIN)
#endif
        for (int64_t i = 0; i < n; i++) g[i] *= coef;
    }
}

float ra_clip_grad_norm(float *const *grads,    /* count pointers to (sizes[i]) */
                        const int64_t *sizes,   /* (count) */
                        int count, float max_norm) {
    const float total = (float)sqrt(rai_grad_sumsq(grads, sizes, count));
    rai_grad_clip(grads, sizes, count, total, max_norm);
    return total;
}

/* timm CosineLRScheduler._get_lr with cycle_mul = cycle_decay = k_decay = 1,
 * cycle_limit = 1 and no noise, evaluated per update (t_in_epochs=False). */
double ra_lr_cosine(int64_t t, int64_t total, int64_t warmup, double base_lr,
                    double min_lr, double warmup_lr, int warmup_prefix) {
    if (warmup > 0 && t < warmup)
        return warmup_lr + (double)t * ((base_lr - warmup_lr) / (double)warmup);
    int64_t u = t, T = total;
    if (warmup_prefix && warmup > 0) {
        u -= warmup;
        T -= warmup;
    }
    if (T < 1 || u >= T || u < 0) return min_lr;
    return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + cos(RA_PI * (double)u / (double)T));
}
