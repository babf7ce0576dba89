/* swin3d.c - the 3-D window block (arch swin_block_3d), inference.
 *
 * Two blocks share one arch; the metadata says which.
 *
 * Self block (no num_frames_q / num_frames_kv in the metadata): Video
 * Swin's SwinTransformerBlock3D (SwinTransformer/Video-Swin-Transformer,
 * mmaction/models/backbones/swin_transformer.py) in evaluation mode, over
 * x (B, D, H, W, C):
 *   window, shift = get_window_size((D, H, W), window_size, shift_size):
 *       per axis, if size <= window then window = size and shift = 0
 *   t = norm1(x) -> zero-pad the end of D, H and W to multiples of the
 *   window -> roll by (-Sd, -Sh, -Sw) -> partition into (Wd, Wh, Ww)
 *   windows -> attention (q = kv = the window's tokens, frames_q =
 *   frames_kv = Wd) with Video Swin's compute_mask on the padded map (only
 *   if some shift remains) -> reverse -> roll by +shift -> crop;
 *   x += t;  x += fc2(gelu(fc1(norm2(x))))           (exact erf GELU)
 * The bias table is the constructor's ((2Wd-1)(2Wh-1)(2Ww-1) rows) and so
 * is its index (SPEC 2.2 with query = key frames 0..Wd-1). A clamped
 * window has fewer tokens N; Video Swin then takes
 * relative_position_index[:N, :N] of the constructor's index, and so does
 * this code. That is the index of the clamped window when only the frame
 * axis (or no axis) shrank; when a spatial axis shrank below its window it
 * is Video Swin's truncation, reproduced for parity.
 *
 * Cross block (num_frames_q = D1 and num_frames_kv = D2 in the metadata):
 * RSTT's cross-attention (llmpass/RSTT models/layers.py, the attn2 half of
 * VSTSRDecoderTransformerBlock) followed by the MLP, over the query frames
 * x (B, D1, H, W, C) and the key/value frames kv (B, D2, H, W, C):
 *   window, shift = get_window_size((H, W), window_size, shift_size)
 *   q = norm1(x), k = norm_kv(kv) -> zero-pad H and W -> roll both by
 *   (-Sh, -Sw) -> partition: query windows (D1, Wh, Ww) hold every query
 *   frame, key/value windows (D2, Wh, Ww) every key/value frame ->
 *   window_attention_3d(q, kv) with RSTT's attn_mask_qkv (regions by
 *   (h, w), the same for every frame; only if some shift remains) ->
 *   reverse -> roll back -> crop;  x += t;  x += MLP(norm2(x))
 * The frame axis is never shifted, padded or clamped: RSTT has no frame
 * shift, and the frames are fixed by the bias index (SPEC 2.2: query
 * frames 0..D1-1, key/value frames 0, s, 2s, ... with s = (D1+1) / D2;
 * exactly D2 of them, else the file is refused). So x must have D1 frames
 * and kv D2. A spatial window clamped below window_size (RSTT fails there:
 * its index has the constructor's size) uses the sub-block of the
 * constructor's index at the clamped window's coordinates, i.e. the same
 * table rows for the same relative offsets.
 *
 * Metadata (Video Swin's / RSTT's constructor names):
 *   dim, num_heads                  required
 *   window_size   self "Wd,Wh,Ww"; cross "Wh,Ww" (or "D1,Wh,Ww")
 *   shift_size    self "Sd,Sh,Sw"; cross "Sh,Sw" (or "0,Sh,Sw");
 *                 optional, default 0; 0 <= shift < window per axis
 *   mlp_ratio (4), qkv_bias (true), qk_scale (absent: hd^-0.5)
 *   num_frames_q, num_frames_kv     both or neither: the cross block
 * Tensors:
 *   norm1.{weight,bias}, norm_kv.{weight,bias} (cross only, RSTT's name),
 *   attn.relative_position_bias_table (T, nH),
 *   attn.q.{weight,bias} (C, C), attn.kv.{weight,bias} (2C, C) (rows k,
 *   then v; RSTT's naming), or for a self block Video Swin's
 *   attn.qkv.{weight,bias} (3C, C) (rows q, k, v: split into q and kv;
 *   naming scheme "video_swin"), attn.proj.*, norm2.*, mlp.fc1.*, mlp.fc2.*
 *   (no biases on q / kv / qkv when qkv_bias is false);
 *   attn.relative_position_index, if present, must equal the computed one.
 * Eps 1e-5 (nn.LayerNorm's default) for every norm. */
#include "model_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S3_EPS 1e-5f
#define S3_MAX_DIM (1 << 16)          /* the attention layers' bound */
#define S3_MAX_SIZE (1 << 16)         /* frames and map sides */
#define S3_MAX_WINDOW 4096            /* a window extent */
#define S3_MAX_TOKENS 4096            /* tokens per window: index N1*N2 int32 <= 64 MB */
#define S3_MAX_HIDDEN (1 << 20)
#define S3_MLP_CHUNK ((int64_t)1 << 22)   /* floats of MLP hidden rows at once */
#define S3_MAX_FLOATS ((int64_t)1 << 40)

typedef struct s3d {
    int dim, heads, hidden;
    int cross;               /* RSTT cross block */
    int fq, fkv;             /* frames of the attention: Wd, Wd (self) or D1, D2 */
    int win[3], shift[3];    /* the constructor's (Wd or D1, Wh, Ww), (Sd or 0, Sh, Sw) */
    int qkv_naming;          /* Video Swin's attn.qkv.* */
    int qkv_bias, has_qk_scale;
    float qk_scale, scale;
    double mlp_ratio;
    int64_t n1, n2, rows;    /* the constructor's window tokens, table rows */
    int32_t *idx;            /* (n1, n2) the constructor's index */
    const float *n1w, *n1b, *nkw, *nkb, *n2w, *n2b, *table;
    const float *qw, *qb, *kvw, *kvb, *pw, *pb, *f1w, *f1b, *f2w, *f2b;
} s3d;

static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

/* ---- metadata ----------------------------------------------------------- */

/* A window_size or shift_size value: 3 integers for a self block; for a
 * cross block 2, or 3 whose first is `frame` (D1, or 0 for the shift). */
static ra_status meta_triple(const ra_st_file *f, const char *key, int out[3], int cross,
                             int frame, int lo) {
    int v[3] = {0, 0, 0}, n = 0;
    ra_status st = ra_meta_list(f, key, v, 3, &n, lo, S3_MAX_WINDOW);
    if (st) return st;
    const char *val = ra_st_meta(f, key);
    if (!cross) {
        if (n != 3)
            return ra_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\": a self-attention "
                           "swin_block_3d needs three values (frames, rows, columns)", key, val);
        memcpy(out, v, sizeof v);
        return RA_OK;
    }
    if (n == 2) {
        out[0] = frame, out[1] = v[0], out[2] = v[1];
        return RA_OK;
    }
    if (n == 3 && v[0] == frame) {
        memcpy(out, v, sizeof v);
        return RA_OK;
    }
    return ra_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\": a cross swin_block_3d takes "
                   "\"rows,columns\" (or \"%d,rows,columns\": %s)", key, val, frame,
                   frame ? "its windows hold all num_frames_q frames"
                         : "the frame axis is not shifted");
}

/* ---- loading ------------------------------------------------------------ */

static ra_status decl(ra_model *m, const char *name, int ndim, int64_t d0, int64_t d1) {
    const int64_t shape[2] = {d0, d1};
    return ra_model_declare(m, name, ndim, shape, 0);
}

static ra_status s3_declare(ra_model *m, const ra_st_file *f) {
    s3d *s = calloc(1, sizeof *s);
    if (!s) return ra_fail(RA_ERR_NOMEM, "model: out of memory");
    m->impl = s;
    s->qkv_bias = 1;
    ra_status st = ra_meta_int(f, "dim", &s->dim, 1, S3_MAX_DIM);
    if (!st) st = ra_meta_int(f, "num_heads", &s->heads, 1, S3_MAX_DIM);
    if (!st) st = ra_meta_mlp_ratio(f, &s->mlp_ratio);
    if (!st) st = ra_meta_bool_opt(f, "qkv_bias", &s->qkv_bias);
    if (!st) st = ra_meta_float_opt(f, "qk_scale", &s->qk_scale, &s->has_qk_scale);
    if (st) return st;
    const int has_q = ra_st_meta(f, "num_frames_q") != NULL;
    const int has_kv = ra_st_meta(f, "num_frames_kv") != NULL;
    if (has_q != has_kv)
        return ra_fail(RA_ERR_FORMAT, "metadata has %s but not %s: a cross swin_block_3d needs "
                       "both, a self-attention block neither", has_q ? "num_frames_q" :
                       "num_frames_kv", has_q ? "num_frames_kv" : "num_frames_q");
    s->cross = has_q;
    if (s->cross) {
        st = ra_meta_int(f, "num_frames_q", &s->fq, 1, S3_MAX_WINDOW);
        if (!st) st = ra_meta_int(f, "num_frames_kv", &s->fkv, 1, S3_MAX_WINDOW);
        if (st) return st;
    }
    if ((st = meta_triple(f, "window_size", s->win, s->cross, s->fq, 1))) return st;
    if (ra_st_meta(f, "shift_size") &&
        (st = meta_triple(f, "shift_size", s->shift, s->cross, 0, 0)))
        return st;
    if (!s->cross) s->fq = s->fkv = s->win[0];
    static const char *const axis[3] = {"frame", "row", "column"};
    for (int a = 0; a < 3; a++)
        if (s->shift[a] >= s->win[a])
            return ra_fail(RA_ERR_FORMAT, "metadata shift_size: the %s shift %d must be in "
                           "[0, window_size %d)", axis[a], s->shift[a], s->win[a]);
    if (s->heads > s->dim || s->dim % s->heads)
        return ra_fail(RA_ERR_FORMAT, "dim %d is not divisible by num_heads %d", s->dim,
                       s->heads);
    const int64_t n1 = (int64_t)s->fq * s->win[1] * s->win[2];
    const int64_t n2 = (int64_t)s->fkv * s->win[1] * s->win[2];
    if (n1 > S3_MAX_TOKENS || n2 > S3_MAX_TOKENS)
        return ra_fail(RA_ERR_FORMAT, "window %dx%dx%d (key/value frames %d) has more than %d "
                       "tokens", s->fq, s->win[1], s->win[2], s->fkv, S3_MAX_TOKENS);
    s->n1 = n1, s->n2 = n2;
    /* the bias index: validates D2 (exactly D2 strided key frames) */
    st = ra_relpos_index_3d(NULL, s->fq, s->fkv, s->win[1], s->win[2], &s->rows);
    if (st) {
        char why[300];
        snprintf(why, sizeof why, "%s", ra_last_error());
        if (s->cross)
            return ra_fail(RA_ERR_FORMAT, "metadata num_frames_q = %d, num_frames_kv = %d: %s",
                           s->fq, s->fkv, why);
        return ra_fail(RA_ERR_FORMAT, "metadata window_size: %s", why);
    }
    const double h = (double)s->dim * s->mlp_ratio;
    if (!(h >= 1.0 && h <= S3_MAX_HIDDEN))
        return ra_fail(RA_ERR_FORMAT, "mlp_ratio %g with dim %d gives an MLP width outside "
                       "1..%d", s->mlp_ratio, s->dim, S3_MAX_HIDDEN);
    s->hidden = (int)h;   /* int(dim * mlp_ratio) */
    const int hd = s->dim / s->heads;
    s->scale = s->has_qk_scale && s->qk_scale != 0.0f ? s->qk_scale : 1.0f / sqrtf((float)hd);

    s->qkv_naming = ra_st_find(f, "attn.qkv.weight") || ra_st_find(f, "attn.qkv.bias");
    if (s->qkv_naming && s->cross)
        return ra_fail(RA_ERR_FORMAT, "tensor attn.qkv: Video Swin's fused qkv is for a "
                       "self-attention block; a cross swin_block_3d has attn.q and attn.kv");

    const int64_t C = s->dim, H = s->hidden;
    st = decl(m, "norm1.weight", 1, C, 0);
    if (!st) st = decl(m, "norm1.bias", 1, C, 0);
    if (!st && s->cross) st = decl(m, "norm_kv.weight", 1, C, 0);
    if (!st && s->cross) st = decl(m, "norm_kv.bias", 1, C, 0);
    if (!st) st = decl(m, "attn.relative_position_bias_table", 2, s->rows, s->heads);
    if (s->qkv_naming) {
        if (!st) st = decl(m, "attn.qkv.weight", 2, 3 * C, C);
        if (!st && s->qkv_bias) st = decl(m, "attn.qkv.bias", 1, 3 * C, 0);
    } else {   /* weights, then biases: a self block can run q and kv as one GEMM */
        if (!st) st = decl(m, "attn.q.weight", 2, C, C);
        if (!st) st = decl(m, "attn.kv.weight", 2, 2 * C, C);
        if (!st && s->qkv_bias) st = decl(m, "attn.q.bias", 1, C, 0);
        if (!st && s->qkv_bias) st = decl(m, "attn.kv.bias", 1, 2 * C, 0);
    }
    if (!st) st = decl(m, "attn.proj.weight", 2, C, C);
    if (!st) st = decl(m, "attn.proj.bias", 1, C, 0);
    if (!st) st = decl(m, "norm2.weight", 1, C, 0);
    if (!st) st = decl(m, "norm2.bias", 1, C, 0);
    if (!st) st = decl(m, "mlp.fc1.weight", 2, H, C);
    if (!st) st = decl(m, "mlp.fc1.bias", 1, H, 0);
    if (!st) st = decl(m, "mlp.fc2.weight", 2, C, H);
    if (!st) st = decl(m, "mlp.fc2.bias", 1, C, 0);
    return st;
}

static ra_status s3_detect(ra_model *m, const ra_st_file *f) {
    (void)f;
    snprintf(m->scheme, sizeof m->scheme, "%s",
             ((s3d *)m->impl)->qkv_naming ? "video_swin" : "official");
    return RA_OK;
}

static ra_tensor_kind s3_canonical(const ra_model *m, const char *name, char *buf, size_t n) {
    (void)m;
    if ((size_t)snprintf(buf, n, "%s", name) >= n) return RA_TENSOR_UNKNOWN;
    return strcmp(name, "attn.relative_position_index") == 0 ? RA_TENSOR_BUFFER
                                                             : RA_TENSOR_PARAM;
}

static int is_float(ra_dtype d) {
    return d == RA_DTYPE_F32 || d == RA_DTYPE_F16 || d == RA_DTYPE_BF16 || d == RA_DTYPE_F64;
}

/* A saved attn.relative_position_index must be the constructor's index. */
static ra_status check_index(const ra_st_tensor *t, const s3d *s) {
    if (!(t->ndim == 2 && t->shape[0] == s->n1 && t->shape[1] == s->n2))
        return ra_fail(RA_ERR_SHAPE, "tensor '%.80s' must have shape (%lld, %lld)", t->name,
                       (long long)s->n1, (long long)s->n2);
    if (is_float(t->dtype) || t->dtype == RA_DTYPE_BOOL)
        return ra_fail(RA_ERR_SHAPE, "tensor '%.80s' must hold integers", t->name);
    int64_t *v = ra_alloc((size_t)t->numel, sizeof *v);
    if (!v) return ra_fail(RA_ERR_NOMEM, "relative_position_index: out of memory");
    ra_status st = ra_st_to_i64(v, t);
    for (int64_t e = 0; !st && e < t->numel; e++)
        if (v[e] != s->idx[e])
            st = ra_fail(RA_ERR_FORMAT, "tensor '%.80s' differs from the computed index at "
                         "(%lld, %lld): %lld, expected %d", t->name, (long long)(e / s->n2),
                         (long long)(e % s->n2), (long long)v[e], s->idx[e]);
    ra_free(v);
    return st;
}

static ra_status s3_build(ra_model *m, const ra_st_file *f) {
    s3d *s = m->impl;
    const int64_t C = s->dim;
    s->n1w = ra_model_get(m, "norm1.weight"), s->n1b = ra_model_get(m, "norm1.bias");
    s->nkw = ra_model_get(m, "norm_kv.weight"), s->nkb = ra_model_get(m, "norm_kv.bias");
    s->n2w = ra_model_get(m, "norm2.weight"), s->n2b = ra_model_get(m, "norm2.bias");
    s->table = ra_model_get(m, "attn.relative_position_bias_table");
    if (s->qkv_naming) {   /* rows q, k, v: q = rows [0, C), kv = rows [C, 3C) */
        const float *w = ra_model_get(m, "attn.qkv.weight"), *b = ra_model_get(m, "attn.qkv.bias");
        s->qw = w, s->kvw = w ? w + C * C : NULL;
        s->qb = b, s->kvb = b ? b + C : NULL;
    } else {
        s->qw = ra_model_get(m, "attn.q.weight"), s->qb = ra_model_get(m, "attn.q.bias");
        s->kvw = ra_model_get(m, "attn.kv.weight"), s->kvb = ra_model_get(m, "attn.kv.bias");
    }
    s->pw = ra_model_get(m, "attn.proj.weight"), s->pb = ra_model_get(m, "attn.proj.bias");
    s->f1w = ra_model_get(m, "mlp.fc1.weight"), s->f1b = ra_model_get(m, "mlp.fc1.bias");
    s->f2w = ra_model_get(m, "mlp.fc2.weight"), s->f2b = ra_model_get(m, "mlp.fc2.bias");
    if (!s->n1w || !s->n1b || !s->n2w || !s->n2b || !s->table || !s->qw || !s->kvw ||
        !s->pw || !s->pb || !s->f1w || !s->f1b || !s->f2w || !s->f2b ||
        (s->cross && (!s->nkw || !s->nkb)) || (s->qkv_bias && (!s->qb || !s->kvb)))
        return ra_fail(RA_ERR_INTERNAL, "swin_block_3d: a parameter is missing");
    if (!(s->idx = ra_alloc((size_t)(s->n1 * s->n2), sizeof *s->idx)))
        return ra_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory for the index");
    ra_status st = ra_relpos_index_3d(s->idx, s->fq, s->fkv, s->win[1], s->win[2], NULL);
    const ra_st_tensor *t = ra_st_find(f, "attn.relative_position_index");
    if (!st && t) st = check_index(t, s);
    return st;
}

static void s3_destroy(void *impl) {
    s3d *s = impl;
    ra_free(s->idx);
    free(s);
}

/* ---- the forward pass --------------------------------------------------- */

/* The run-time geometry: windows and shifts after the clamp. */
typedef struct plan {
    ra_window_geom gq, gkv;  /* query map and key/value map (the same for a self block) */
    int64_t nw, n1, n2;      /* windows per clip, tokens per query / key window */
    int shifted;
} plan;

static plan plan_of(const s3d *s, int d, int h, int w) {
    plan p;
    int win[3] = {s->win[0], s->win[1], s->win[2]}, sh[3] = {s->shift[0], s->shift[1], s->shift[2]};
    const int size[3] = {s->cross ? s->fq : d, h, w};
    for (int a = s->cross ? 1 : 0; a < 3; a++)   /* get_window_size, per axis */
        if (size[a] <= win[a]) win[a] = size[a], sh[a] = 0;
    p.gq = (ra_window_geom){.d = size[0], .h = h, .w = w, .wd = win[0], .wh = win[1],
                            .ww = win[2], .sd = sh[0], .sh = sh[1], .sw = sh[2]};
    p.gkv = p.gq;
    if (s->cross) p.gkv.d = p.gkv.wd = s->fkv;
    p.nw = ra_window_count(&p.gq);
    p.n1 = ra_window_tokens(&p.gq);
    p.n2 = ra_window_tokens(&p.gkv);
    p.shifted = sh[0] || sh[1] || sh[2];
    return p;
}

/* The bias index of the run-time window (n1, n2), into `out`; or NULL when
 * it is the constructor's index itself (no clamp). Self: Video Swin's
 * idx[:N, :N]. Cross: the constructor's index at the clamped window's
 * coordinates. */
static const int32_t *run_index(const s3d *s, const plan *p, int32_t *out) {
    if (p->n1 == s->n1 && p->n2 == s->n2) return s->idx;
    if (!s->cross) {
        for (int64_t i = 0; i < p->n1; i++)
            memcpy(out + i * p->n2, s->idx + i * s->n2, (size_t)p->n2 * sizeof *out);
        return out;
    }
    const int wh = p->gq.wh, ww = p->gq.ww, WH = s->win[1], WW = s->win[2];
    int32_t *o = out;
    for (int a = 0; a < s->fq; a++)
        for (int y = 0; y < wh; y++)
            for (int x = 0; x < ww; x++) {
                const int32_t *row = s->idx + (((int64_t)a * WH + y) * WW + x) * s->n2;
                for (int e = 0; e < s->fkv; e++)
                    for (int y2 = 0; y2 < wh; y2++)
                        for (int x2 = 0; x2 < ww; x2++)
                            *o++ = row[((int64_t)e * WH + y2) * WW + x2];
            }
    return out;
}

/* RSTT's attn_mask_qkv (nW, N1, N2) from the spatial mask m2 (nW, T, T),
 * T = Wh*Ww: the regions depend on (h, w) only, so every (query frame,
 * key frame) block is m2. */
static void expand_mask(float *mask, const float *m2, int64_t nw, int64_t t, int fq, int fkv) {
    const int64_t n1 = fq * t, n2 = fkv * t;
    for (int64_t k = 0; k < nw; k++)
        for (int a = 0; a < fq; a++)
            for (int64_t i = 0; i < t; i++) {
                float *row = mask + (k * n1 + a * t + i) * n2;
                for (int e = 0; e < fkv; e++)
                    memcpy(row + e * t, m2 + (k * t + i) * t, (size_t)t * sizeof *row);
            }
}

/* y (B, Dq, H, W, C) from x (B, Dq, H, W, C) and, for a cross block,
 * kv (B, D2, H, W, C). Dq = d (self) or D1 (cross). y may alias x. */
static ra_status s3_run(const s3d *s, float *y, const float *x, const float *kv, int B, int d,
                        int H, int W) {
    const int C = s->dim, hidden = s->hidden;
    const plan p = plan_of(s, d, H, W);
    const int dq = p.gq.d, dkv = p.gkv.d;
    if (p.nw < 1 || p.n1 < 1 || p.n2 < 1)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: clip %dx%dx%d with window %dx%dx%d",
                       dq, H, W, s->win[0], s->win[1], s->win[2]);
    int64_t M1, M2, nx, nkx, bw, rows1, rows2, nwin1, nwin2, nmask, t2 = 0, nm2 = 0, nproj;
    int ok = ra_mul_i64(&M1, (int64_t)B * dq, (int64_t)H * W) &&
             ra_mul_i64(&M2, (int64_t)B * dkv, (int64_t)H * W) && ra_mul_i64(&nx, M1, C) &&
             ra_mul_i64(&nkx, s->cross ? M2 : 0, C) && ra_mul_i64(&bw, B, p.nw) &&
             bw <= INT_MAX && ra_mul_i64(&rows1, bw, p.n1) && ra_mul_i64(&rows2, bw, p.n2) &&
             ra_mul_i64(&nwin1, rows1, C) && ra_mul_i64(&nwin2, s->cross ? rows2 : 0, C) &&
             ra_mul_i64(&nmask, p.shifted ? p.nw * p.n1 : 0, p.n2) &&
             ra_mul_i64(&nproj, rows1 + rows2, 3 * (int64_t)C);
    if (ok && s->cross && p.shifted) {
        t2 = (int64_t)p.gq.wh * p.gq.ww;
        ok = ra_mul_i64(&nm2, p.nw * t2, t2);
    }
    if (!ok || nx > S3_MAX_FLOATS || nkx > S3_MAX_FLOATS || nwin1 > S3_MAX_FLOATS ||
        nwin2 > S3_MAX_FLOATS || nmask > S3_MAX_FLOATS || nm2 > S3_MAX_FLOATS ||
        nproj > S3_MAX_FLOATS)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: %d clips of %dx%dx%dx%d are too large", B,
                       dq, H, W, C);

    const int32_t *idx = s->idx;
    int32_t *idx_buf = NULL;
    if (p.n1 != s->n1 || p.n2 != s->n2) {
        if (!(idx_buf = ra_alloc((size_t)(p.n1 * p.n2), sizeof *idx_buf)))
            return ra_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory");
        idx = run_index(s, &p, idx_buf);
    }
    ra_attn_desc ad = {.b_ = (int)bw, .nh = s->heads, .n1 = (int)p.n1, .n2 = (int)p.n2,
                       .hd = C / s->heads, .scale = s->scale, .table = s->table, .idx = idx,
                       .table_rows = s->rows};
    ra_status st = ra_attention_check(&ad);   /* mask added below: same sizes */
    if (st) {
        ra_free(idx_buf);
        return st;
    }
    const size_t wbytes = ra_attention_workspace_size(&ad, ra_threads_get());

    /* q and kv as one GEMM when their weights (and biases) follow each other */
    const int fused = !s->cross && s->kvw == s->qw + (int64_t)C * C &&
                      (!s->qb || s->kvb == s->qb + C);
    int64_t rows = S3_MLP_CHUNK / hidden;   /* MLP rows per pass */
    if (rows < 1) rows = 1;
    if (rows > M1) rows = M1;
    const size_t M = (size_t)(M1 > M2 ? M1 : M2);
    const size_t o_t = 0, o_tk = o_t + up16((size_t)nx), o_mean = o_tk + up16((size_t)nkx),
                 o_rstd = o_mean + up16(M), o_w1 = o_rstd + up16(M),
                 o_w2 = o_w1 + up16((size_t)nwin1), o_q = o_w2 + up16((size_t)nwin2),
                 o_kv = o_q + up16((size_t)(rows1 * (fused ? 3 : 1) * C)),
                 o_o = o_kv + up16((size_t)(fused ? 0 : rows2 * 2 * C)),
                 o_mask = o_o + up16((size_t)nwin1), o_m2 = o_mask + up16((size_t)nmask),
                 o_hid = o_m2 + up16((size_t)nm2),
                 o_work = o_hid + up16((size_t)(rows * hidden)),
                 total = o_work + up16((wbytes + 3) / 4);
    float *sc = ra_alloc(total, sizeof(float));
    if (!sc) {
        ra_free(idx_buf);
        return ra_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory for %zu floats", total);
    }
    float *t = sc + o_t, *tk = sc + o_tk, *mean = sc + o_mean, *rstd = sc + o_rstd,
          *w1 = sc + o_w1, *w2 = sc + o_w2, *qb = sc + o_q, *kvb = sc + o_kv, *ob = sc + o_o,
          *mask = p.shifted ? sc + o_mask : NULL, *m2 = sc + o_m2, *hid = sc + o_hid;
    void *work = sc + o_work;

    /* the normalised inputs first: then y may be x */
    if (s->cross) ra_layernorm_forward(tk, mean, rstd, kv, s->nkw, s->nkb, M2, C, S3_EPS);
    ra_layernorm_forward(t, mean, rstd, x, s->n1w, s->n1b, M1, C, S3_EPS);
    if (y != x) memcpy(y, x, (size_t)nx * sizeof *y);

    st = ra_window_partition(w1, t, B, C, &p.gq);
    if (!st && s->cross) st = ra_window_partition(w2, tk, B, C, &p.gkv);
    if (!st && mask && !s->cross) st = ra_window_mask(mask, &p.gq);
    if (!st && mask && s->cross) {
        const ra_window_geom g2 = {.d = 1, .h = H, .w = W, .wd = 1, .wh = p.gq.wh,
                                   .ww = p.gq.ww, .sh = p.gq.sh, .sw = p.gq.sw};
        st = ra_window_mask(m2, &g2);
        if (!st) expand_mask(mask, m2, p.nw, t2, s->fq, s->fkv);
    }
    if (!st) {
        const float *q, *k, *v;
        int ldq, ldkv;
        if (fused) {
            ra_linear_forward(qb, w1, s->qw, s->qb, rows1, 3 * C, C);
            q = qb, k = qb + C, v = qb + 2 * C, ldq = ldkv = 3 * C;
        } else {
            ra_linear_forward(qb, w1, s->qw, s->qb, rows1, C, C);
            ra_linear_forward(kvb, s->cross ? w2 : w1, s->kvw, s->kvb, rows2, 2 * C, C);
            q = qb, k = kvb, v = kvb + C, ldq = C, ldkv = 2 * C;
        }
        ad.mask = mask, ad.nw = mask ? (int)p.nw : 0;
        st = ra_attention_forward(ob, C, NULL, q, ldq, k, ldkv, v, ldkv, &ad, work, wbytes);
    }
    if (!st) {
        ra_linear_forward(w1, ob, s->pw, s->pb, rows1, C, C);   /* the windows' output */
        st = ra_window_reverse(t, w1, B, C, &p.gq);
    }
    if (!st) {
        ra_add(y, y, t, nx);
        ra_layernorm_forward(t, mean, rstd, y, s->n2w, s->n2b, M1, C, S3_EPS);
        for (int64_t r0 = 0; r0 < M1; r0 += rows) {
            const int64_t r = M1 - r0 < rows ? M1 - r0 : rows;
            float *tr = t + r0 * C;
            ra_linear_forward(hid, tr, s->f1w, s->f1b, r, hidden, C);
            ra_gelu_forward(hid, hid, r * hidden);
            ra_linear_forward(tr, hid, s->f2w, s->f2b, r, C, hidden);
        }
        ra_add(y, y, t, nx);
    }
    ra_free(sc);
    ra_free(idx_buf);
    return st;
}

static ra_status check_dims(const s3d *s, int b, int d, int h, int w) {
    if (b < 1 || d < 1 || d > S3_MAX_SIZE || h < 1 || h > S3_MAX_SIZE || w < 1 ||
        w > S3_MAX_SIZE)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: %d clips of %d frames of %dx%d: each size "
                       "must be in 1..%d", b, d, h, w, S3_MAX_SIZE);
    if (s->cross && d != s->fq)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: the cross block has num_frames_q = %d query "
                       "frames, x has %d", s->fq, d);
    return RA_OK;
}

ra_status ra_swin_block_3d_forward(const ra_model *m, float *y, const float *x, const float *kv,
                                   int b, int d, int h, int w) {
    if (!m || m->ops != &ra_swin_block_3d_ops)
        return ra_fail(RA_ERR_ARG, "ra_swin_block_3d_forward: not a swin_block_3d model");
    const s3d *s = m->impl;
    if (!y || !x) return ra_fail(RA_ERR_ARG, "ra_swin_block_3d_forward: NULL x or y");
    if (s->cross && !kv)
        return ra_fail(RA_ERR_ARG, "swin_block_3d: the cross block needs kv (B, %d, H, W, %d)",
                       s->fkv, s->dim);
    if (!s->cross && kv)
        return ra_fail(RA_ERR_ARG, "swin_block_3d: a self-attention block takes no kv");
    ra_status st = check_dims(s, b, d, h, w);
    return st ? st : s3_run(s, y, x, kv, b, d, h, w);
}

/* ra_model_forward: one clip x (D, H, W, C); a cross block's x holds the
 * D1 query frames, then the D2 key/value frames. */
static ra_status s3_forward(const ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                            const float *x, int x_ndim, const int64_t *x_shape) {
    const s3d *s = m->impl;
    if (x_ndim != 4)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d takes one clip x (D, H, W, C)%s, got %d "
                       "dimensions (a batch (B, D, H, W, C) goes through "
                       "ra_swin_block_3d_forward)", s->cross ? " with D = D1 + D2 frames" : "",
                       x_ndim);
    const int64_t D = x_shape[0], H = x_shape[1], W = x_shape[2], C = x_shape[3];
    if (C != s->dim)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: x has %lld channels, dim is %d",
                       (long long)C, s->dim);
    if (s->cross && D != (int64_t)s->fq + s->fkv)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: the cross block takes x (D1 + D2 = %d, H, "
                       "W, C), the %d query frames then the %d key/value frames; x has %lld",
                       s->fq + s->fkv, s->fq, s->fkv, (long long)D);
    if (D < 1 || D > S3_MAX_SIZE || H < 1 || H > S3_MAX_SIZE || W < 1 || W > S3_MAX_SIZE)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: a clip of %lldx%lldx%lld", (long long)D,
                       (long long)H, (long long)W);
    const int dq = s->cross ? s->fq : (int)D;
    int64_t ny;
    if (!ra_mul_i64(&ny, (int64_t)dq * H, W * C) || ny > S3_MAX_FLOATS)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: input too large");
    float *out = ra_alloc((size_t)ny, sizeof *out);
    if (!out) return ra_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory");
    const float *kv = s->cross ? x + ny : NULL;
    ra_status st = check_dims(s, 1, dq, (int)H, (int)W);
    if (!st) st = s3_run(s, out, x, kv, 1, dq, (int)H, (int)W);
    if (st) {
        ra_free(out);
        return st;
    }
    *y = out;
    *y_ndim = 4;
    y_shape[0] = dq, y_shape[1] = H, y_shape[2] = W, y_shape[3] = C;
    return RA_OK;
}

/* Multiply-adds of one clip of h x w frames, counted as Swin's
 * SwinTransformerBlock.flops() counts a block (norms, the windows'
 * attention with its projections, the MLP), with the windows of the padded
 * map: a self block over Wd frames (one window of frames), a cross block
 * over D1 query and D2 key/value frames (norm_kv included). */
static int64_t s3_flops(const ra_model *m, int h, int w) {
    const s3d *s = m->impl;
    if (h > S3_MAX_SIZE || w > S3_MAX_SIZE) return -1;
    const plan p = plan_of(s, s->win[0], h, w);
    const int64_t C = s->dim, L1 = (int64_t)p.gq.d * h * w, L2 = (int64_t)p.gkv.d * h * w;
    const int64_t attn = p.n1 * C * C + p.n2 * 2 * C * C + 2 * p.n1 * p.n2 * C + p.n1 * C * C;
    return 2 * C * L1 + (s->cross ? C * L2 : 0) + p.nw * attn + 2 * L1 * C * s->hidden;
}

const ra_arch_ops ra_swin_block_3d_ops = {
    .name = "swin_block_3d", .arch = RA_ARCH_SWIN_BLOCK_3D, .declare = s3_declare,
    .canonical = s3_canonical, .detect = s3_detect, .build = s3_build, .destroy = s3_destroy,
    .forward = s3_forward, .flops = s3_flops};
