/* schemes.c - the relative position schemes on the attention core.
 *
 * Each scheme is a small hook into the one pass of src/attention/layer.c
 * (projection -> core -> proj); none has its own attention loop, so the
 * optimised kernels and their backward serve them all:
 *   t5_attention          buckets of j - i (Hugging Face's T5Attention):
 *                         the core's bias table + index, the index built
 *                         per call (N1, N2); no 1/sqrt(d) scaling
 *   alibi_attention       -m_h |i - j| as a computed (N, nH) table indexed
 *                         by |i - j|; causal: a -inf mask on the future
 *   decomposed_attention  q·Rh[qh-kh+H-1] + q·Rw[qw-kw+W-1]: a Shaw key
 *                         table of Rh's and Rw's rows stacked, divided by
 *                         the scale the core multiplies by, read through
 *                         two indexes (the core's rel and rel2)
 *   rope_attention        rotation of q and k after the projection, the
 *                         transposed rotation of dq and dk in the backward
 * and the Shaw clip index of shaw_attention, also per call.
 * Semantics, conventions and numerics: docs/arch-relpos.md. */
#include "attention/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The arch names of the metadata, by ra_arch. */
static const char *arch_names[] = {
    [RA_ARCH_VIT_ATTENTION] = "vit_attention",
    [RA_ARCH_WINDOW_ATTENTION] = "window_attention",
    [RA_ARCH_WINDOW_ATTENTION_3D] = "window_attention_3d",
    [RA_ARCH_SHAW_ATTENTION] = "shaw_attention",
    [RA_ARCH_SWIN_BLOCK] = "swin_block",
    [RA_ARCH_SWIN] = "swin",
    [RA_ARCH_VIT] = "vit",
    [RA_ARCH_SWIN_BLOCK_3D] = "swin_block_3d",
    [RA_ARCH_SWINV2_WINDOW_ATTENTION] = "swinv2_window_attention",
    [RA_ARCH_SWINV2] = "swinv2",
    [RA_ARCH_T5_ATTENTION] = "t5_attention",
    [RA_ARCH_ALIBI_ATTENTION] = "alibi_attention",
    [RA_ARCH_DECOMPOSED_ATTENTION] = "decomposed_attention",
    [RA_ARCH_ROPE_ATTENTION] = "rope_attention",
    [RA_ARCH_SWIN3D] = "swin3d",
};
#define NARCH ((int)(sizeof arch_names / sizeof arch_names[0]))

const char *ra_arch_name(ra_arch a) {
    return (a > RA_ARCH_NONE && (int)a < NARCH) ? arch_names[a] : NULL;
}

ra_arch ra_arch_from_name(const char *name) {
    for (int a = RA_ARCH_VIT_ATTENTION; name && a < NARCH; a++)
        if (arch_names[a] && strcmp(name, arch_names[a]) == 0) return (ra_arch)a;
    return RA_ARCH_NONE;
}

/* ---- T5 buckets and ALiBi slopes ---------------------------------------- */

int ra_t5_bucket(int rel, int bidirectional, int num_buckets, int max_distance) {
    int nb = num_buckets, base = 0, n;
    if (rel == INT32_MIN) return -1;
    if (bidirectional) {
        nb /= 2;
        if (rel > 0) base = nb;
        n = rel < 0 ? -rel : rel;
    } else {
        n = rel < 0 ? -rel : 0;   /* keys after the query share bucket 0 */
    }
    const int exact = nb / 2;
    if (exact < 1 || max_distance <= exact) return -1;
    if (n < exact) return base + n;
    /* float32 as PyTorch: log(n / exact) / log(max_distance / exact) * (nb - exact),
     * truncated; rel = max_distance gives exactly nb, clamped to nb - 1 */
    const float v = logf((float)n / (float)exact) / (float)log((double)max_distance / exact) *
                    (float)(nb - exact);
    const int b = v < (float)nb ? exact + (int)v : nb;
    return base + (b < nb - 1 ? b : nb - 1);
}

/* The authors' get_slopes in double, rounded to float32 once. */
static double pow2_slope(int i, int n) {
    const double start = pow(2.0, -pow(2.0, -(log2((double)n) - 3)));
    return start * pow(start, i);
}

float ra_alibi_slope(int h, int nh) {
    if (nh < 1 || h < 0 || h >= nh) return 0.0f;
    int p = 1;
    while (p <= nh / 2) p *= 2;   /* the largest power of two <= nh */
    if (h < p) return (float)pow2_slope(h, p);
    return (float)pow2_slope(2 * (h - p), 2 * p);   /* every other one of 2p's */
}

/* ---- per layer ---------------------------------------------------------- */

static int scheme_arch(ra_arch a) {
    return a == RA_ARCH_T5_ATTENTION || a == RA_ARCH_ALIBI_ATTENTION ||
           a == RA_ARCH_DECOMPOSED_ATTENTION || a == RA_ARCH_ROPE_ATTENTION;
}

#define RA_MAX_GRID 4096

ra_status rai_scheme_create(ra_attn_layer *l) {
    const ra_attn_config *c = &l->cfg;
    const ra_attn_params *p = &l->p;
    const ra_arch a = c->arch;
    if (!scheme_arch(a)) return RA_OK;
    const char *name = ra_arch_name(a);
    if (a == RA_ARCH_T5_ATTENTION) {
        if (!p->q_w || !p->k_w || !p->v_w || !p->proj_w)
            return rai_fail(RA_ERR_ARG, "t5_attention: q, k, v and o weights are needed");
        if (ra_t5_bucket(0, !c->causal, c->num_buckets, c->max_distance) < 0)
            return rai_fail(RA_ERR_ARG, "t5_attention: relative_attention_num_buckets %d with "
                            "relative_attention_max_distance %d: need at least %d buckets and "
                            "a max_distance above the %d exact buckets", c->num_buckets,
                            c->max_distance, c->causal ? 2 : 4,
                            (c->causal ? c->num_buckets : c->num_buckets / 2) / 2);
        l->table_rows = c->num_buckets;
        l->scale = 1.0f;   /* T5 folds the scaling into its initialisation */
        return RA_OK;
    }
    if ((a == RA_ARCH_DECOMPOSED_ATTENTION || a == RA_ARCH_ROPE_ATTENTION) &&
        (c->grid[0] < 1 || c->grid[1] < 1 || c->grid[0] > RA_MAX_GRID ||
         c->grid[1] > RA_MAX_GRID))
        return rai_fail(RA_ERR_ARG, "%s: %s %d,%d must be in 1..%d", name,
                        a == RA_ARCH_ROPE_ATTENTION ? "grid_size" : "input_size", c->grid[0],
                        c->grid[1], RA_MAX_GRID);
    if (a == RA_ARCH_ALIBI_ATTENTION) {
        if (!(l->slopes = rai_alloc((size_t)c->num_heads, sizeof *l->slopes)))
            return rai_fail(RA_ERR_NOMEM, "alibi_attention: out of memory");
        for (int h = 0; h < c->num_heads; h++) l->slopes[h] = ra_alibi_slope(h, c->num_heads);
    } else if (a == RA_ARCH_DECOMPOSED_ATTENTION) {
        if (!p->rel_h || !p->rel_w)
            return rai_fail(RA_ERR_ARG, "decomposed_attention: rel_pos_h and rel_pos_w are needed");
    } else {   /* rope */
        const int hd = l->hd, W = c->grid[1];
        const int64_t hw = (int64_t)c->grid[0] * W;
        if (hd % 4)
            return rai_fail(RA_ERR_ARG, "rope_attention: head dim %d is not a multiple of 4 "
                            "(x and y take a quarter of the dims each as complex pairs)", hd);
        if (!(c->rope_theta > 0.0f) || !isfinite(c->rope_theta))
            return rai_fail(RA_ERR_ARG, "rope_attention: rope_theta must be a positive number");
        if (c->num_prefix < 0 || c->num_prefix > 1024 || hw + c->num_prefix > INT32_MAX / 2)
            return rai_fail(RA_ERR_ARG, "rope_attention: num_prefix_tokens %d must be in 0..1024",
                            c->num_prefix);
        if (hw * hd > ((int64_t)1 << 27))   /* the angles' table: 512 MiB at most */
            return rai_fail(RA_ERR_ARG, "rope_attention: grid_size %d,%d with head dim %d is too "
                            "large", c->grid[0], W, hd);
        const int q = hd / 4;
        if (!(l->rope = rai_alloc((size_t)hw * (size_t)hd, sizeof *l->rope)))
            return rai_fail(RA_ERR_NOMEM, "rope_attention: out of memory");
        /* float32 as the authors' compute_axial_cis: 1 / theta^(4i/hd), angle
         * = position * frequency, x (column) on pairs 0..hd/4-1, y (row) on
         * the next hd/4 */
        for (int64_t t = 0; t < hw; t++) {
            const float tx = (float)(t % W), ty = (float)(t / W);
            float *cs = l->rope + t * hd;
            for (int i = 0; i < 2 * q; i++) {
                const int f = i < q ? i : i - q;
                const float freq = 1.0f / powf(c->rope_theta, (float)(4 * f) / (float)hd);
                const float ang = (i < q ? tx : ty) * freq;
                cs[2 * i] = cosf(ang), cs[2 * i + 1] = sinf(ang);
            }
        }
    }
    return RA_OK;
}

void rai_scheme_free(ra_attn_layer *l) {
    rai_free(l->slopes);
    rai_free(l->rope);
}

ra_status rai_scheme_check_tokens(const ra_attn_layer *l, int n1, int n2, const int grid[2]) {
    const ra_attn_config *c = &l->cfg;
    switch (c->arch) {
    case RA_ARCH_ROPE_ATTENTION: {
        const int64_t n = (int64_t)c->num_prefix + (int64_t)c->grid[0] * c->grid[1];
        if (n1 != n || n2 != n)
            return rai_fail(RA_ERR_SHAPE, "rope_attention with grid_size %d,%d and %d prefix "
                            "tokens needs N = %lld tokens, got %d", c->grid[0], c->grid[1],
                            c->num_prefix, (long long)n, n1);
        return RA_OK;
    }
    case RA_ARCH_DECOMPOSED_ATTENTION: {
        const int *g = grid ? grid : c->grid;
        if (g[0] < 1 || g[1] < 1 || g[0] > RA_MAX_GRID || g[1] > RA_MAX_GRID)
            return rai_fail(RA_ERR_SHAPE, "decomposed_attention: grid %d,%d must be in 1..%d",
                            g[0], g[1], RA_MAX_GRID);
        const int64_t n = (int64_t)g[0] * g[1];
        if (n1 != n || n2 != n)
            return rai_fail(RA_ERR_SHAPE, "decomposed_attention on a %dx%d grid needs N = %lld "
                            "tokens, got %d%s", g[0], g[1], (long long)n, n1,
                            grid ? "" : " (pass x as (B, H, W, C) for another grid)");
        if (n > RA_MAX_SHAW_TOKENS)
            return rai_fail(RA_ERR_SHAPE, "too large: decomposed_attention takes at most %d "
                            "tokens (its (N, N) index is built per call), got %lld",
                            RA_MAX_SHAW_TOKENS, (long long)n);
        return RA_OK;
    }
    case RA_ARCH_T5_ATTENTION:
    case RA_ARCH_ALIBI_ATTENTION:
        if (n1 > RA_MAX_SHAW_TOKENS || n2 > RA_MAX_SHAW_TOKENS)
            return rai_fail(RA_ERR_SHAPE, "too large: %s takes at most %d tokens (its (N, N) "
                            "bias index is built per call), got %d", ra_arch_name(c->arch),
                            RA_MAX_SHAW_TOKENS, n1);
        return RA_OK;
    default:
        return RA_OK;
    }
}

/* ---- per call ----------------------------------------------------------- */

/* rows of dst (out, hd) from src (in, hd), F.interpolate(mode="linear",
 * align_corners=False) along the rows, in float32 as PyTorch: source
 * x = in/out * (o + 0.5) - 0.5 (0 below 0), weights 1 - l and l */
typedef struct { int i0, i1; float w0, w1; } lerp;

static lerp lerp_at(int o, int in, int out) {
    const float sc = (float)in / (float)out;
    float x = sc * ((float)o + 0.5f) - 0.5f;
    if (x < 0.0f) x = 0.0f;
    int i0 = (int)x;
    if (i0 > in - 1) i0 = in - 1;
    float lam = x - (float)i0;
    lam = lam < 0.0f ? 0.0f : lam > 1.0f ? 1.0f : lam;
    return (lerp){i0, i0 < in - 1 ? i0 + 1 : i0, 1.0f - lam, lam};
}

static void resample_rows(float *dst, const float *src, int in, int out, int hd) {
    for (int o = 0; o < out; o++) {
        const lerp w = in == out ? (lerp){o, o, 1.0f, 0.0f} : lerp_at(o, in, out);
        for (int d = 0; d < hd; d++)
            dst[(size_t)o * hd + d] = in == out ? src[(size_t)o * hd + d]
                                                : src[(size_t)w.i0 * hd + d] * w.w0 +
                                                      src[(size_t)w.i1 * hd + d] * w.w1;
    }
}

/* The backward of resample_rows, ACCUMULATED into dsrc (in, hd). */
static void resample_rows_backward(float *dsrc, const float *ddst, int in, int out, int hd) {
    for (int o = 0; o < out; o++) {
        const lerp w = in == out ? (lerp){o, o, 1.0f, 0.0f} : lerp_at(o, in, out);
        for (int d = 0; d < hd; d++) {
            const float g = ddst[(size_t)o * hd + d];
            if (in == out) { dsrc[(size_t)o * hd + d] += g; continue; }
            dsrc[(size_t)w.i0 * hd + d] += w.w0 * g;
            dsrc[(size_t)w.i1 * hd + d] += w.w1 * g;
        }
    }
}

static ra_status pos_nomem(rai_pos_call *pc, const ra_attn_layer *l) {
    rai_pos_end(pc);
    return rai_fail(RA_ERR_NOMEM, "%s: out of memory for the position terms",
                    ra_arch_name(l->cfg.arch));
}

/* The decomposed terms: the table (2H-1 + 2W-1, hd) of Rh's rows then
 * Rw's (resampled to the call's grid, divided by the scale), and two (N, N)
 * indexes: qh - kh + H - 1 into Rh's rows, 2H - 1 + qw - kw + W - 1 into
 * Rw's. The core adds both terms to the logits from one q·tableᵀ product
 * of 2(H + W) - 2 numbers per query. */
static ra_status decomposed_begin(rai_pos_call *pc, const ra_attn_layer *l, const int grid[2]) {
    const int H = grid ? grid[0] : l->cfg.grid[0], W = grid ? grid[1] : l->cfg.grid[1];
    const int H0 = l->cfg.grid[0], W0 = l->cfg.grid[1], hd = l->hd;
    const int rh = 2 * H - 1, rw = 2 * W - 1;
    const int64_t n = (int64_t)H * W;
    pc->gh = H, pc->gw = W;
    pc->r = rh + rw;
    pc->own_rel_k = rai_alloc((size_t)pc->r * hd, sizeof *pc->own_rel_k);
    pc->rel = rai_alloc((size_t)(n * n), sizeof *pc->rel);
    pc->own_rel = 1;
    pc->rel2 = rai_alloc((size_t)(n * n), sizeof *pc->rel2);
    if (!pc->own_rel_k || !pc->rel || !pc->rel2) return pos_nomem(pc, l);
    float *th = pc->own_rel_k, *tw = th + (size_t)rh * hd;
    resample_rows(th, l->p.rel_h, 2 * H0 - 1, rh, hd);
    resample_rows(tw, l->p.rel_w, 2 * W0 - 1, rw, hd);
    for (size_t e = 0; e < (size_t)pc->r * hd; e++) th[e] /= l->scale;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            pc->rel[i * n + j] = (int32_t)(i / W - j / W + H - 1);
            pc->rel2[i * n + j] = (int32_t)(rh + i % W - j % W + W - 1);
        }
    pc->rel_k = pc->own_rel_k;
    pc->rel_ld = 0;
    return RA_OK;
}

ra_status rai_pos_begin(rai_pos_call *pc, const ra_attn_layer *l, int n1, int n2,
                        const int grid[2], const float *mask, int nw) {
    memset(pc, 0, sizeof *pc);
    const ra_attn_config *c = &l->cfg;
    const ra_arch a = c->arch;
    const size_t nn = (size_t)n1 * (size_t)n2;
    if (a == RA_ARCH_SHAW_ATTENTION && (l->p.rel_k || l->p.rel_v)) {
        const int k = c->max_rel;
        pc->rel_k = l->p.rel_k, pc->rel_v = l->p.rel_v;
        if (l->rel2) {   /* 2-D over a window: the layer's (N, N) index */
            pc->rel = l->rel2, pc->r = (2 * k + 1) * (2 * k + 1);
            return RA_OK;
        }
        /* clip(j - i) + k depends on j - i alone: N1 + N2 - 1 numbers, never
         * an (N1, N2) index (memory linear in the sequence); rel points at
         * j - i = 0 and rows step back one (rel_ld -1) */
        if (!(pc->rel = rai_alloc((size_t)n1 + n2 - 1, sizeof *pc->rel))) return pos_nomem(pc, l);
        pc->own_rel = 1;
        for (int e = 0; e < n1 + n2 - 1; e++) {
            const int dist = e - (n1 - 1);
            pc->rel[e] = (dist < -k ? -k : dist > k ? k : dist) + k;
        }
        pc->rel_ld = -1, pc->rel_off = n1 - 1, pc->r = 2 * k + 1;
        return RA_OK;
    }
    if (a == RA_ARCH_DECOMPOSED_ATTENTION) return decomposed_begin(pc, l, grid);
    if ((a == RA_ARCH_T5_ATTENTION && l->p.table) || a == RA_ARCH_ALIBI_ATTENTION) {
        /* both depend on j - i: a row of 2N - 1 entries, then the (N1, N2) index */
        const int nd = n1 + n2 - 1, nh = c->num_heads;
        int32_t *g = rai_alloc((size_t)nd, sizeof *g);
        pc->idx = rai_alloc(nn, sizeof *pc->idx);
        if (a == RA_ARCH_ALIBI_ATTENTION) {
            pc->table_rows = n1 > n2 ? n1 : n2;   /* |i - j| < max(N1, N2) */
            pc->table = pc->own_table = rai_alloc((size_t)pc->table_rows * nh, sizeof(float));
        }
        if (!g || !pc->idx || (a == RA_ARCH_ALIBI_ATTENTION && !pc->own_table)) {
            rai_free(g);
            return pos_nomem(pc, l);
        }
        for (int e = 0; e < nd; e++) {
            const int rel = e - (n1 - 1);   /* j - i */
            g[e] = a == RA_ARCH_ALIBI_ATTENTION
                       ? (rel < 0 ? -rel : rel)
                       : ra_t5_bucket(rel, !c->causal, c->num_buckets, c->max_distance);
        }
        for (int i = 0; i < n1; i++)
            memcpy(pc->idx + (size_t)i * n2, g + (n1 - 1 - i), (size_t)n2 * sizeof *g);
        rai_free(g);
        if (a == RA_ARCH_T5_ATTENTION) {
            pc->table = l->p.table, pc->table_rows = c->num_buckets;
        } else {
            for (int64_t d = 0; d < pc->table_rows; d++)
                for (int h = 0; h < nh; h++)
                    pc->own_table[d * nh + h] = -(l->slopes[h] * (float)d);
        }
    }
    if (c->causal && (a == RA_ARCH_T5_ATTENTION || a == RA_ARCH_ALIBI_ATTENTION)) {
        /* keys after the query at -inf (p = 0 exactly in every kernel),
         * added to the caller's mask when there is one */
        pc->nw = mask ? nw : 1;
        if (!(pc->mask = rai_alloc((size_t)pc->nw * nn, sizeof *pc->mask))) return pos_nomem(pc, l);
        for (int w = 0; w < pc->nw; w++)
            for (int i = 0; i < n1; i++)
                for (int j = 0; j < n2; j++) {
                    const size_t e = (size_t)w * nn + (size_t)i * n2 + j;
                    pc->mask[e] = (mask ? mask[e] : 0.0f) + (j > i ? -INFINITY : 0.0f);
                }
    }
    return RA_OK;
}

void rai_pos_end(rai_pos_call *pc) {
    if (!pc) return;
    rai_free(pc->idx);
    rai_free(pc->own_table);
    rai_free(pc->mask);
    rai_free(pc->rel2);
    rai_free(pc->cpb);
    if (pc->own_rel) rai_free(pc->rel);   /* else the layer's 2-D Shaw index */
    rai_free(pc->own_rel_k);
    memset(pc, 0, sizeof *pc);
}

void rai_pos_desc(const rai_pos_call *pc, const float *mask, int nw, ra_attn_desc *d) {
    if (pc->idx) d->table = pc->table, d->idx = pc->idx, d->table_rows = pc->table_rows;
    d->mask = pc->mask ? pc->mask : mask;
    d->nw = pc->mask ? pc->nw : nw;
    if (pc->rel) {
        d->rel = pc->rel + pc->rel_off;
        d->rel_ld = pc->rel_ld, d->r = pc->r;
        d->rel_k = pc->rel_k, d->rel_v = pc->rel_v, d->rel2 = pc->rel2;
    }
}

size_t rai_pos_drel_floats(const rai_pos_call *pc, const ra_attn_layer *l) {
    return pc->own_rel_k ? (size_t)pc->r * l->hd : 0;
}

ra_status rai_pos_backward(const rai_pos_call *pc, const ra_attn_layer *l, const float *drel,
                           float *drel_h, float *drel_w) {
    if (!pc->own_rel_k || (!drel_h && !drel_w)) return RA_OK;
    const int hd = l->hd, rh = 2 * pc->gh - 1, rw = 2 * pc->gw - 1;
    const int h0 = 2 * l->cfg.grid[0] - 1, w0 = 2 * l->cfg.grid[1] - 1;
    float *th = rai_alloc((size_t)(rh + rw) * hd, sizeof *th);
    if (!th) return rai_fail(RA_ERR_NOMEM, "decomposed_attention backward: out of memory");
    float *tw = th + (size_t)rh * hd;
    for (size_t e = 0; e < (size_t)(rh + rw) * hd; e++) th[e] = drel[e] / l->scale;
    if (drel_h) resample_rows_backward(drel_h, th, h0, rh, hd);
    if (drel_w) resample_rows_backward(drel_w, tw, w0, rw, hd);
    rai_free(th);
    return RA_OK;
}

/* ---- RoPE ----------------------------------------------------------------- */

void rai_rope_rotate(const ra_attn_layer *l, float *q, float *k, int ld, int b_, int n,
                     int inverse) {
    if (l->cfg.arch != RA_ARCH_ROPE_ATTENTION) return;
    const int hd = l->hd, nh = l->cfg.num_heads, P = l->cfg.num_prefix, half = hd / 2;
    const float sgn = inverse ? -1.0f : 1.0f;
    for (int b = 0; b < b_; b++)
        for (int t = P; t < n; t++) {
            const float *cs = l->rope + (size_t)(t - P) * hd;
            for (int which = 0; which < 2; which++) {
                float *row = (which ? k : q) + ((size_t)b * n + t) * ld;
                for (int h = 0; h < nh; h++) {
                    float *x = row + (size_t)h * hd;
                    for (int i = 0; i < half; i++) {
                        /* (x0 + i x1)(cos + i sin); inverse: times the conjugate */
                        const float c = cs[2 * i], s = sgn * cs[2 * i + 1];
                        const float x0 = x[2 * i], x1 = x[2 * i + 1];
                        x[2 * i] = x0 * c - x1 * s;
                        x[2 * i + 1] = x0 * s + x1 * c;
                    }
                }
            }
        }
}
