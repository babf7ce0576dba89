/* swin3d.c - the 3-D window block (arch swin_block_3d): forward and training.
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
#include "models/model.h"
#include "base/arena.h"
#include "nn/nn.h"
#include "pos/window.h"
#include "attention/layer.h"

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
    struct s3tape *tape;     /* the training pass (NULL until one runs) */
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
static ra_status check_index(const ra_st_file *f, const ra_st_tensor *t, const s3d *s) {
    if (!(t->ndim == 2 && t->shape[0] == s->n1 && t->shape[1] == s->n2))
        return ra_fail(RA_ERR_SHAPE, "tensor '%.80s' must have shape (%lld, %lld)", t->name,
                       (long long)s->n1, (long long)s->n2);
    if (is_float(t->dtype) || t->dtype == RA_DTYPE_BOOL)
        return ra_fail(RA_ERR_SHAPE, "tensor '%.80s' must hold integers", t->name);
    int64_t *v = ra_alloc((size_t)t->numel, sizeof *v);
    if (!v) return ra_fail(RA_ERR_NOMEM, "relative_position_index: out of memory");
    ra_status st = ra_st_read_i64(v, f, t);
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
    if (!st && t) st = check_index(f, t, s);
    return st;
}

static void tape_free(struct s3tape *t);

static void s3_destroy(void *impl) {
    s3d *s = impl;
    ra_free(s->idx);
    tape_free(s->tape);
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

/* Sizes of the tensors of one pass, overflow-checked. */
typedef struct sizes {
    int64_t M1, M2;          /* query / key-value tokens of the maps (B * D * H * W) */
    int64_t nx, nkx;         /* floats of x and kv (M * C) */
    int64_t bw, rows1, rows2;   /* windows of the batch, their query / key-value rows */
    int64_t nwin1, nwin2;    /* floats of the windows (rows * C) */
    int64_t nmask, t2, nm2;  /* the mask (nW, N1, N2), a cross block's spatial mask */
    int64_t nhid;            /* M1 * hidden */
} sizes;

static ra_status sizes_of(const s3d *s, const plan *pp, int B, int H, int W, sizes *z) {
    const int C = s->dim;
    const plan p = *pp;
    const int dq = p.gq.d, dkv = p.gkv.d;
    memset(z, 0, sizeof *z);
    if (p.nw < 1 || p.n1 < 1 || p.n2 < 1)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: clip %dx%dx%d with window %dx%dx%d",
                       dq, H, W, s->win[0], s->win[1], s->win[2]);
    int64_t nproj;
    int ok = ra_mul_i64(&z->M1, (int64_t)B * dq, (int64_t)H * W) &&
             ra_mul_i64(&z->M2, (int64_t)B * dkv, (int64_t)H * W) &&
             ra_mul_i64(&z->nx, z->M1, C) && ra_mul_i64(&z->nkx, s->cross ? z->M2 : 0, C) &&
             ra_mul_i64(&z->bw, B, p.nw) && z->bw <= INT_MAX &&
             ra_mul_i64(&z->rows1, z->bw, p.n1) && ra_mul_i64(&z->rows2, z->bw, p.n2) &&
             ra_mul_i64(&z->nwin1, z->rows1, C) &&
             ra_mul_i64(&z->nwin2, s->cross ? z->rows2 : 0, C) &&
             ra_mul_i64(&z->nmask, p.shifted ? p.nw * p.n1 : 0, p.n2) &&
             ra_mul_i64(&nproj, z->rows1 + z->rows2, 3 * (int64_t)C) &&
             ra_mul_i64(&z->nhid, z->M1, s->hidden);
    if (ok && s->cross && p.shifted) {
        z->t2 = (int64_t)p.gq.wh * p.gq.ww;
        ok = ra_mul_i64(&z->nm2, p.nw * z->t2, z->t2);
    }
    if (!ok || z->nx > S3_MAX_FLOATS || z->nkx > S3_MAX_FLOATS || z->nwin1 > S3_MAX_FLOATS ||
        z->nwin2 > S3_MAX_FLOATS || z->nmask > S3_MAX_FLOATS || z->nm2 > S3_MAX_FLOATS ||
        nproj > S3_MAX_FLOATS)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: %d clips of %dx%dx%dx%d are too large", B,
                       dq, H, W, C);
    return RA_OK;
}

/* The attention mask (nW, N1, N2) of a shifted plan into mask; a cross
 * block builds its spatial mask in m2 (nW, T, T) first. */
static ra_status build_mask(const s3d *s, const plan *p, int H, int W, float *mask, float *m2,
                            int64_t t2) {
    if (!mask) return RA_OK;
    if (!s->cross) return ra_window_mask(mask, &p->gq);
    const ra_window_geom g2 = {.d = 1, .h = H, .w = W, .wd = 1, .wh = p->gq.wh, .ww = p->gq.ww,
                               .sh = p->gq.sh, .sw = p->gq.sw};
    ra_status st = ra_window_mask(m2, &g2);
    if (!st) expand_mask(mask, m2, p->nw, t2, s->fq, s->fkv);
    return st;
}

/* y (B, Dq, H, W, C) from x (B, Dq, H, W, C) and, for a cross block,
 * kv (B, D2, H, W, C). Dq = d (self) or D1 (cross). y may alias x. */
static ra_status s3_run(const s3d *s, float *y, const float *x, const float *kv, int B, int d,
                        int H, int W) {
    const int C = s->dim, hidden = s->hidden;
    const plan p = plan_of(s, d, H, W);
    sizes z;
    ra_status st = sizes_of(s, &p, B, H, W, &z);
    if (st) return st;
    const int64_t M1 = z.M1, M2 = z.M2, nx = z.nx, nkx = z.nkx, bw = z.bw, rows1 = z.rows1,
                  rows2 = z.rows2, nwin1 = z.nwin1, nwin2 = z.nwin2, nmask = z.nmask,
                  t2 = z.t2, nm2 = z.nm2;

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
    st = ra_attention_check(&ad);   /* mask added below: same sizes */
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
    if (!st) st = build_mask(s, &p, H, W, mask, m2, t2);
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
            /* GELU in fc1's product, y += fc2 in fc2's */
            ra_linear_epi(hid, tr, s->f1w, s->f1b, r, hidden, C, 1, NULL, NULL);
            ra_linear_epi(tr, hid, s->f2w, s->f2b, r, C, hidden, 0, y + r0 * C, NULL);
        }
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

/* Where the batched call meets tensors from a file: every axis of x and kv
 * against the model (channels = dim, a cross block's D1 and D2 frames), and
 * the element counts bounded, so that ra_swin_block_3d_forward reads and
 * writes only what the tensors hold. */
ra_status ra_swin_block_3d_check(const ra_model *m, int x_ndim, const int64_t *x_shape,
                                 int kv_ndim, const int64_t *kv_shape) {
    if (!m || m->ops != &ra_swin_block_3d_ops || !x_shape || (kv_ndim && !kv_shape))
        return ra_fail(RA_ERR_ARG, "ra_swin_block_3d_check: not a swin_block_3d model");
    const s3d *s = m->impl;
    if (x_ndim != 5)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d takes x (B, D, H, W, C), got %d dimensions",
                       x_ndim);
    for (int i = 0; i < 5; i++)
        if (x_shape[i] < 1 || x_shape[i] > S3_MAX_SIZE)
            return ra_fail(RA_ERR_SHAPE, "swin_block_3d: x has size %lld on axis %d, outside "
                           "1..%d", (long long)x_shape[i], i, S3_MAX_SIZE);
    if (x_shape[4] != s->dim)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: x has %lld channels, dim is %d",
                       (long long)x_shape[4], s->dim);
    int64_t n = x_shape[0];
    for (int i = 1; i < 5; i++)
        if (!ra_mul_i64(&n, n, x_shape[i]) || n > S3_MAX_FLOATS)
            return ra_fail(RA_ERR_SHAPE, "swin_block_3d: x holds more than %lld values",
                           (long long)S3_MAX_FLOATS);
    if (!s->cross && kv_ndim)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: a self-attention block takes no kv");
    if (s->cross) {
        const int64_t want[5] = {x_shape[0], s->fkv, x_shape[2], x_shape[3], s->dim};
        int ok = kv_ndim == 5;
        for (int i = 0; ok && i < 5; i++) ok = kv_shape[i] == want[i];
        if (!ok)
            return ra_fail(RA_ERR_SHAPE, "swin_block_3d: the cross block takes kv (B, D2, H, W, "
                           "C) = (%lld, %d, %lld, %lld, %d)", (long long)want[0], s->fkv,
                           (long long)want[2], (long long)want[3], s->dim);
    }
    return check_dims(s, (int)x_shape[0], (int)x_shape[1], (int)x_shape[2], (int)x_shape[3]);
}

/* The clip of ra_model_forward / ra_model_forward_train: x (D, H, W, C),
 * a cross block's holding the D1 query frames, then the D2 key/value
 * frames. Writes the query frames dq, the map and ny = dq * H * W * C. */
static ra_status clip_of(const s3d *s, int x_ndim, const int64_t *x_shape, int *dq, int *h,
                         int *w, int64_t *ny) {
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
    *dq = s->cross ? s->fq : (int)D, *h = (int)H, *w = (int)W;
    if (!ra_mul_i64(ny, (int64_t)*dq * H, W * C) || *ny > S3_MAX_FLOATS)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: input too large");
    return check_dims(s, 1, *dq, *h, *w);
}

/* ra_model_forward: one clip x (D, H, W, C); a cross block's x holds the
 * D1 query frames, then the D2 key/value frames. */
static ra_status s3_forward(const ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                            const float *x, int x_ndim, const int64_t *x_shape) {
    const s3d *s = m->impl;
    int dq = 0, H = 0, W = 0;
    int64_t ny = 0;
    ra_status st = clip_of(s, x_ndim, x_shape, &dq, &H, &W, &ny);
    if (st) return st;
    float *out = ra_alloc((size_t)ny, sizeof *out);
    if (!out) return ra_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory");
    const float *kv = s->cross ? x + ny : NULL;
    if ((st = s3_run(s, out, x, kv, 1, dq, H, W))) {
        ra_free(out);
        return st;
    }
    *y = out;
    *y_ndim = 4;
    y_shape[0] = dq, y_shape[1] = H, y_shape[2] = W, y_shape[3] = s->dim;
    return RA_OK;
}

/* ---- training ------------------------------------------------------------
 * llm.c style: the training forward runs the block as s3_run does, but
 * keeps every activation the backward reads in the tape (one buffer, kept
 * between steps and grown only when a larger clip comes), and the backward
 * walks the forward in reverse through the layers' backward calls:
 *
 *   forward                                   backward (reverse order)
 *   t = norm1(x) -> partition -> w1           dx   += LN1' (partition' (dw1))
 *   (cross) norm_kv(kv) -> partition -> w2    dkv  += LNkv' (partition' (dw2))
 *   q, k, v = Linear(w1), Linear(w1 | w2)     dw1, dw2, dWq, dWkv += Linear'
 *   o = attention(q, k, v; table, mask)       dq, dk, dv, dtable  += attention'
 *   x1 = x + reverse(proj(o))                 dx += dx1; do, dWp += Linear' (reverse' (dx1))
 *   h = fc1(norm2(x1)), y = x1 + fc2(gelu(h)) dx1 = dy + LN2' (fc1' (gelu' (fc2' (dy))))
 *
 * The attention backward recomputes the probabilities from q and k (see
 * ra_attention_backward); q, k, v and o themselves are kept. The
 * parameters' gradients sit at the parameters' offsets in the flat
 * gradient (a pointer w into m->weights has its gradient at grad + (w -
 * m->weights)), so Video Swin's fused attn.qkv and RSTT's attn.q / attn.kv
 * are the same code, and q and kv run as one GEMM whenever the forward does. */
typedef struct s3tape {
    int valid;                   /* a training forward has filled it */
    int B, d, H, W;
    plan p;
    sizes z;
    int fused;                   /* q and kv projected as one (rows1, 3C) GEMM */
    ra_attn_desc ad;             /* idx and mask point into the tape */
    size_t wbytes;               /* the forward attention's workspace */
    float *buf;                  /* the activations, cap floats */
    size_t cap;
    int32_t *idx;                /* the clamped window's index, idx_cap entries */
    size_t idx_cap;
    float *gbuf;                 /* the backward's scratch, gcap floats */
    size_t gcap;
    /* into buf */
    float *x, *kv;               /* (M1, C), (M2, C) the block's inputs */
    float *mean1, *rstd1, *meank, *rstdk, *mean2, *rstd2;   /* (M1) or (M2) */
    float *w1, *w2;              /* (rows1, C), (rows2, C) normalised windows */
    float *q, *kvp;              /* (rows1, C or 3C), (rows2, 2C) projections */
    float *o;                    /* (rows1, C) attention output, before proj */
    float *mask, *m2;            /* (nW, N1, N2), (nW, T, T) */
    float *x1, *t2;              /* (M1, C) x after attention, norm2(x1) */
    float *gd, *hact;            /* (M1, hidden) GELU' of fc1's output, its GELU */
    float *tmp;                  /* max(nx, nkx, nwin1) */
    void *work;
} s3tape;

static void tape_free(s3tape *t) {
    if (!t) return;
    ra_free(t->buf);
    ra_free(t->idx);
    ra_free(t->gbuf);
    free(t);
}

/* A buffer of at least n elements of sz bytes, kept between calls. */
static int grow(void **buf, size_t *cap, size_t n, size_t sz) {
    if (*buf && *cap >= n) return 1;
    ra_free(*buf);
    *cap = 0;
    if (!(*buf = ra_alloc(n ? n : 1, sz))) return 0;
    *cap = n;
    return 1;
}

static size_t max3(size_t a, size_t b, size_t c) {
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

/* The training forward of B clips: y (B, Dq, H, W, C) (not x) from x and,
 * for a cross block, kv, as s3_run, filling the tape. */
static ra_status s3_train_run(s3d *s, float *y, const float *x, const float *kv, int B, int d,
                              int H, int W) {
    const int C = s->dim, hidden = s->hidden;
    if (!s->tape && !(s->tape = calloc(1, sizeof *s->tape)))
        return ra_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory for the tape");
    s3tape *t = s->tape;
    t->valid = 0;
    const plan p = plan_of(s, d, H, W);
    sizes z;
    ra_status st = sizes_of(s, &p, B, H, W, &z);
    if (st) return st;
    if (z.nhid > S3_MAX_FLOATS)
        return ra_fail(RA_ERR_SHAPE, "swin_block_3d: %d clips of %dx%dx%d are too large to "
                       "train on", B, p.gq.d, H, W);
    t->B = B, t->d = d, t->H = H, t->W = W, t->p = p, t->z = z;

    const int32_t *idx = s->idx;
    if (p.n1 != s->n1 || p.n2 != s->n2) {
        if (!grow((void **)&t->idx, &t->idx_cap, (size_t)(p.n1 * p.n2), sizeof *t->idx))
            return ra_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory");
        idx = run_index(s, &p, t->idx);
    }
    t->ad = (ra_attn_desc){.b_ = (int)z.bw, .nh = s->heads, .n1 = (int)p.n1, .n2 = (int)p.n2,
                           .hd = C / s->heads, .scale = s->scale, .table = s->table, .idx = idx,
                           .table_rows = s->rows};
    if ((st = ra_attention_check(&t->ad))) return st;
    t->wbytes = ra_attention_workspace_size(&t->ad, ra_threads_get());
    t->fused = !s->cross && s->kvw == s->qw + (int64_t)C * C && (!s->qb || s->kvb == s->qb + C);

    const size_t nx = (size_t)z.nx, nkx = (size_t)z.nkx, M1 = (size_t)z.M1, M2 = (size_t)z.M2,
                 nw1 = (size_t)z.nwin1, nw2 = (size_t)z.nwin2, nh = (size_t)z.nhid;
    const size_t sz[] = {nx, nkx, M1, M1, M2, M2, M1, M1, nw1, nw2,
                         (size_t)z.rows1 * (t->fused ? 3 : 1) * C,
                         t->fused ? 0 : (size_t)z.rows2 * 2 * C, nw1, (size_t)z.nmask,
                         (size_t)z.nm2, nx, nx, nh, nh, max3(nx, nkx, nw1),
                         (t->wbytes + 3) / 4};
    enum { NBUF = sizeof sz / sizeof sz[0] };
    size_t off[NBUF], total = 0;
    for (int i = 0; i < NBUF; i++) off[i] = total, total += up16(sz[i]);
    if (!grow((void **)&t->buf, &t->cap, total, sizeof(float)))
        return ra_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory for a tape of %zu floats",
                       total);
    float *const b = t->buf;
    t->x = b + off[0], t->kv = b + off[1], t->mean1 = b + off[2], t->rstd1 = b + off[3];
    t->meank = b + off[4], t->rstdk = b + off[5], t->mean2 = b + off[6], t->rstd2 = b + off[7];
    t->w1 = b + off[8], t->w2 = b + off[9], t->q = b + off[10], t->kvp = b + off[11];
    t->o = b + off[12], t->mask = p.shifted ? b + off[13] : NULL, t->m2 = b + off[14];
    t->x1 = b + off[15], t->t2 = b + off[16], t->gd = b + off[17], t->hact = b + off[18];
    t->tmp = b + off[19], t->work = b + off[20];

    /* attention: norm1 (and norm_kv) into windows, projections, core, proj */
    memcpy(t->x, x, nx * sizeof *x);
    if (s->cross) memcpy(t->kv, kv, nkx * sizeof *kv);
    ra_layernorm_forward(t->tmp, t->mean1, t->rstd1, x, s->n1w, s->n1b, z.M1, C, S3_EPS);
    st = ra_window_partition(t->w1, t->tmp, B, C, &p.gq);
    if (!st && s->cross) {
        ra_layernorm_forward(t->tmp, t->meank, t->rstdk, kv, s->nkw, s->nkb, z.M2, C, S3_EPS);
        st = ra_window_partition(t->w2, t->tmp, B, C, &p.gkv);
    }
    if (!st) st = build_mask(s, &p, H, W, t->mask, t->m2, z.t2);
    if (st) return st;
    t->ad.mask = t->mask, t->ad.nw = t->mask ? (int)p.nw : 0;
    const float *q = t->q, *k, *v;
    int ldq, ldkv;
    if (t->fused) {
        ra_linear_forward(t->q, t->w1, s->qw, s->qb, z.rows1, 3 * C, C);
        k = t->q + C, v = t->q + 2 * C, ldq = ldkv = 3 * C;
    } else {
        ra_linear_forward(t->q, t->w1, s->qw, s->qb, z.rows1, C, C);
        ra_linear_forward(t->kvp, s->cross ? t->w2 : t->w1, s->kvw, s->kvb, z.rows2, 2 * C, C);
        k = t->kvp, v = t->kvp + C, ldq = C, ldkv = 2 * C;
    }
    st = ra_attention_forward(t->o, C, NULL, q, ldq, k, ldkv, v, ldkv, &t->ad, t->work,
                              t->wbytes);
    if (st) return st;
    ra_linear_forward(t->tmp, t->o, s->pw, s->pb, z.rows1, C, C);
    if ((st = ra_window_reverse(t->x1, t->tmp, B, C, &p.gq))) return st;
    ra_add(t->x1, t->x1, x, z.nx);

    /* MLP */
    ra_layernorm_forward(t->t2, t->mean2, t->rstd2, t->x1, s->n2w, s->n2b, z.M1, C, S3_EPS);
    ra_linear_gelu_keep(t->gd, t->hact, t->t2, s->f1w, s->f1b, z.M1, hidden, C);
    ra_linear_forward(y, t->hact, s->f2w, s->f2b, z.M1, C, hidden);
    ra_add(y, y, t->x1, z.nx);
    t->valid = 1;
    return RA_OK;
}

static ra_status s3_forward_train(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                  const float *x, int x_ndim, const int64_t *x_shape,
                                  ra_rng *rng) {
    (void)rng;   /* no dropout or stochastic depth in this block */
    s3d *s = m->impl;
    if (s->tape) s->tape->valid = 0;
    int dq = 0, H = 0, W = 0;
    int64_t ny = 0;
    ra_status st = clip_of(s, x_ndim, x_shape, &dq, &H, &W, &ny);
    if (st) return st;
    float *out = ra_alloc((size_t)ny, sizeof *out);
    if (!out) return ra_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory");
    if ((st = s3_train_run(s, out, x, s->cross ? x + ny : NULL, 1, dq, H, W))) {
        ra_free(out);
        return st;
    }
    *y = out;
    *y_ndim = 4;
    y_shape[0] = dq, y_shape[1] = H, y_shape[2] = W, y_shape[3] = s->dim;
    return RA_OK;
}

/* The gradient of the parameter at w (a pointer into m->weights). */
static float *grad_of(const ra_model *m, float *grad, const float *w) {
    return w ? grad + (w - m->weights) : NULL;
}

/* dx (B, Dq, H, W, C) and, for a cross block, dkv (B, D2, H, W, C), either
 * NULL, and grad (the flat parameter gradient), all ACCUMULATED, from
 * dy (B, Dq, H, W, C) and the tape. The tape is only read: a second call
 * gives the same gradients again. */
static ra_status s3_train_back(const ra_model *m, float *grad, float *dx, float *dkv,
                               const float *dy) {
    const s3d *s = m->impl;
    s3tape *t = s->tape;
    const int C = s->dim, hidden = s->hidden, B = t->B;
    const sizes z = t->z;
    const plan p = t->p;
    const size_t nx = (size_t)z.nx, nkx = (size_t)z.nkx, nw1 = (size_t)z.nwin1,
                 nw2 = (size_t)z.nwin2, nh = (size_t)z.nhid,
                 nq = (size_t)z.rows1 * (t->fused ? 3 : 1) * C,
                 nkv = t->fused ? 0 : (size_t)z.rows2 * 2 * C;
    /* dres (M1, C); dt (max(nx, nkx)); dh (M1, hidden); dwa, dwb
     * (rows1, C); dq; dkv; dw2 (rows2, C); the attention backward's
     * workspace (sized now: the threads may have changed since the forward) */
    const size_t wbytes = ra_attention_backward_workspace_size(&t->ad, ra_threads_get());
    const size_t sz[] = {nx, nx > nkx ? nx : nkx, nh, nw1, nw1, nq, nkv, nw2,
                         (wbytes + 3) / 4};
    enum { NBUF = sizeof sz / sizeof sz[0] };
    size_t off[NBUF], total = 0;
    for (int i = 0; i < NBUF; i++) off[i] = total, total += up16(sz[i]);
    if (!grow((void **)&t->gbuf, &t->gcap, total, sizeof(float)))
        return ra_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory for the backward (%zu "
                       "floats)", total);
    float *const b = t->gbuf;
    float *dres = b + off[0], *dt = b + off[1], *dh = b + off[2], *dwa = b + off[3],
          *dwb = b + off[4], *dqb = b + off[5], *dkvb = b + off[6], *dw2 = b + off[7];
    void *work = b + off[8];
    memset(b, 0, off[8] * sizeof *b);

    /* y = x1 + fc2(gelu(fc1(norm2(x1)))) */
    memcpy(dres, dy, nx * sizeof *dres);
    ra_linear_backward_ex(dh, grad_of(m, grad, s->f2w), grad_of(m, grad, s->f2b), dy, t->hact,
                          s->f2w, z.M1, C, hidden, 1, t->gd);   /* dh = (dy f2w) GELU' */
    ra_linear_backward(dt, grad_of(m, grad, s->f1w), grad_of(m, grad, s->f1b), dh, t->t2,
                       s->f1w, z.M1, hidden, C);
    ra_layernorm_backward(dres, grad_of(m, grad, s->n2w), grad_of(m, grad, s->n2b), dt, t->x1,
                          t->mean2, t->rstd2, s->n2w, z.M1, C);

    /* x1 = x + crop(reverse(proj(o))) */
    if (dx) ra_add(dx, dx, dres, z.nx);
    ra_status st = ra_window_reverse_backward(dwa, dres, B, C, &p.gq);
    if (st) return st;
    ra_linear_backward(dwb, grad_of(m, grad, s->pw), grad_of(m, grad, s->pb), dwa, t->o, s->pw,
                       z.rows1, C, C);

    /* o = attention(q, k, v), then the projections (dwa: d norm1 windows) */
    const float *k, *v;
    float *dk, *dv;
    int ldq, ldkv;
    if (t->fused) {
        k = t->q + C, v = t->q + 2 * C, dk = dqb + C, dv = dqb + 2 * C, ldq = ldkv = 3 * C;
    } else {
        k = t->kvp, v = t->kvp + C, dk = dkvb, dv = dkvb + C, ldq = C, ldkv = 2 * C;
    }
    st = ra_attention_backward(dqb, ldq, dk, ldkv, dv, ldkv, grad_of(m, grad, s->table), NULL,
                               NULL, dwb, C, t->q, ldq, k, ldkv, v, ldkv, &t->ad, work, wbytes);
    if (st) return st;
    memset(dwa, 0, nw1 * sizeof *dwa);
    if (t->fused) {   /* q, k, v rows follow each other in weights, biases and grad */
        ra_linear_backward(dwa, grad_of(m, grad, s->qw), grad_of(m, grad, s->qb), dqb, t->w1,
                           s->qw, z.rows1, 3 * C, C);
    } else {
        ra_linear_backward(dwa, grad_of(m, grad, s->qw), grad_of(m, grad, s->qb), dqb, t->w1,
                           s->qw, z.rows1, C, C);
        ra_linear_backward(s->cross ? dw2 : dwa, grad_of(m, grad, s->kvw),
                           grad_of(m, grad, s->kvb), dkvb, s->cross ? t->w2 : t->w1, s->kvw,
                           z.rows2, 2 * C, C);
    }

    /* w1 = partition(norm1(x)), w2 = partition(norm_kv(kv)) */
    memset(dt, 0, nx * sizeof *dt);
    if ((st = ra_window_partition_backward(dt, dwa, B, C, &p.gq))) return st;
    ra_layernorm_backward(dx, grad_of(m, grad, s->n1w), grad_of(m, grad, s->n1b), dt, t->x,
                          t->mean1, t->rstd1, s->n1w, z.M1, C);
    if (s->cross) {
        memset(dt, 0, nkx * sizeof *dt);
        if ((st = ra_window_partition_backward(dt, dw2, B, C, &p.gkv))) return st;
        ra_layernorm_backward(dkv, grad_of(m, grad, s->nkw), grad_of(m, grad, s->nkb), dt,
                              t->kv, t->meank, t->rstdk, s->nkw, z.M2, C);
    }
    return RA_OK;
}

/* ra_model_backward: dx is the clip's shape, a cross block's query frames
 * then its key/value frames (one clip: the two are consecutive). */
static ra_status s3_backward(ra_model *m, float *grad, float *dx, const float *dy) {
    const s3d *s = m->impl;
    if (!s->tape || !s->tape->valid)
        return ra_fail(RA_ERR_ARG, "swin_block_3d: backward without a training forward");
    return s3_train_back(m, grad, dx, dx && s->cross ? dx + s->tape->z.nx : NULL, dy);
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
    int64_t attn = ra_cadd(ra_cmul3(p.n1, C, C), ra_cmul3(p.n2, 2 * C, C));
    attn = ra_cadd(ra_cadd(attn, ra_cmul3(p.n1, p.n2, 2 * C)), ra_cmul3(p.n1, C, C));
    int64_t f = ra_cadd(ra_cmul(2 * C, L1), s->cross ? ra_cmul(C, L2) : 0);
    f = ra_cadd(f, ra_cmul(p.nw, attn));
    return ra_cadd(f, ra_cmul3(2 * L1, C, s->hidden));
}

const ra_arch_ops ra_swin_block_3d_ops = {
    .name = "swin_block_3d", .arch = RA_ARCH_SWIN_BLOCK_3D, .declare = s3_declare,
    .canonical = s3_canonical, .detect = s3_detect, .build = s3_build, .destroy = s3_destroy,
    .forward = s3_forward, .forward_train = s3_forward_train,
    .backward = s3_backward, .flops = s3_flops};
