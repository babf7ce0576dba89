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
 * is its index (docs/reference.md, section 1.2, with query = key frames
 * 0..Wd-1). A clamped window has fewer tokens N; Video Swin then takes
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
 * shift, and the frames are fixed by the bias index (docs/reference.md,
 * section 1.2: query frames 0..D1-1, key/value frames 0, s, 2s, ... with
 * s = (D1+1) / D2; exactly D2 of them, else the file is refused). So x
 * must have D1 frames and kv D2. A spatial window clamped below window_size (RSTT fails there:
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
#include "models/swin3d.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

/* ---- metadata ----------------------------------------------------------- */

/* A window_size or shift_size value: 3 integers for a self block; for a
 * cross block 2, or 3 whose first is `frame` (D1, or 0 for the shift). */
static ra_status meta_triple(const ra_st_file *f, const char *key, int out[3], int cross,
                             int frame, int lo) {
    int v[3] = {0, 0, 0}, n = 0;
    ra_status st = rai_meta_list(f, key, v, 3, &n, lo, SWIN3D_MAX_WINDOW);
    if (st) return st;
    const char *val = ra_st_meta(f, key);
    if (!cross) {
        if (n != 3)
            return rai_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\": a self-attention "
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
    return rai_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\": a cross swin_block_3d takes "
                    "\"rows,columns\" (or \"%d,rows,columns\": %s)", key, val, frame,
                    frame ? "its windows hold all num_frames_q frames"
                         : "the frame axis is not shifted");
}

/* ---- loading ------------------------------------------------------------ */

static ra_status decl(ra_model *m, const char *name, int ndim, int64_t d0, int64_t d1) {
    const int64_t shape[2] = {d0, d1};
    return rai_model_declare(m, name, ndim, shape, 0);
}

/* The window's tokens, table rows, MLP width and scale of s, whose dim,
 * heads, frames, window, shift, mlp_ratio and qk_scale are set;
 * RA_ERR_FORMAT naming what is wrong. */
ra_status rai_swin3d_geometry(swin3d_block *s) {
    static const char *const axis[3] = {"frame", "row", "column"};
    for (int a = 0; a < 3; a++)
        if (s->shift[a] >= s->win[a])
            return rai_fail(RA_ERR_FORMAT, "metadata shift_size: the %s shift %d must be in "
                            "[0, window_size %d)", axis[a], s->shift[a], s->win[a]);
    if (s->heads > s->dim || s->dim % s->heads)
        return rai_fail(RA_ERR_FORMAT, "dim %d is not divisible by num_heads %d", s->dim,
                        s->heads);
    const int64_t n1 = (int64_t)s->fq * s->win[1] * s->win[2];
    const int64_t n2 = (int64_t)s->fkv * s->win[1] * s->win[2];
    if (n1 > SWIN3D_MAX_TOKENS || n2 > SWIN3D_MAX_TOKENS)
        return rai_fail(RA_ERR_FORMAT, "window %dx%dx%d (key/value frames %d) has more than %d "
                        "tokens", s->fq, s->win[1], s->win[2], s->fkv, SWIN3D_MAX_TOKENS);
    s->n1 = n1, s->n2 = n2;
    /* the bias index: validates D2 (exactly D2 strided key frames) */
    ra_status st = ra_relpos_index_3d(NULL, s->fq, s->fkv, s->win[1], s->win[2], &s->rows);
    if (st) {
        char why[300];
        snprintf(why, sizeof why, "%s", ra_last_error());
        if (s->cross)
            return rai_fail(RA_ERR_FORMAT, "metadata num_frames_q = %d, num_frames_kv = %d: %s",
                            s->fq, s->fkv, why);
        return rai_fail(RA_ERR_FORMAT, "metadata window_size: %s", why);
    }
    const double h = (double)s->dim * s->mlp_ratio;
    if (!(h >= 1.0 && h <= SWIN3D_MAX_HIDDEN))
        return rai_fail(RA_ERR_FORMAT, "mlp_ratio %g with dim %d gives an MLP width outside "
                        "1..%d", s->mlp_ratio, s->dim, SWIN3D_MAX_HIDDEN);
    s->hidden = (int)h;   /* int(dim * mlp_ratio) */
    const int hd = s->dim / s->heads;
    s->scale = s->has_qk_scale && s->qk_scale != 0.0f ? s->qk_scale : 1.0f / sqrtf((float)hd);
    return RA_OK;
}

static ra_status swin3d_declare(ra_model *m, const ra_st_file *f) {
    swin3d_block *s = calloc(1, sizeof *s);
    if (!s) return rai_fail(RA_ERR_NOMEM, "model: out of memory");
    m->impl = s;
    s->qkv_bias = 1;
    ra_status st = rai_meta_int(f, "dim", &s->dim, 1, SWIN3D_MAX_DIM);
    if (!st) st = rai_meta_int(f, "num_heads", &s->heads, 1, SWIN3D_MAX_DIM);
    if (!st) st = rai_meta_mlp_ratio(f, &s->mlp_ratio);
    if (!st) st = rai_meta_bool_opt(f, "qkv_bias", &s->qkv_bias);
    if (!st) st = rai_meta_float_opt(f, "qk_scale", &s->qk_scale, &s->has_qk_scale);
    if (st) return st;
    const int has_q = ra_st_meta(f, "num_frames_q") != NULL;
    const int has_kv = ra_st_meta(f, "num_frames_kv") != NULL;
    if (has_q != has_kv)
        return rai_fail(RA_ERR_FORMAT, "metadata has %s but not %s: a cross swin_block_3d needs "
                        "both, a self-attention block neither", has_q ? "num_frames_q" :
                        "num_frames_kv", has_q ? "num_frames_kv" : "num_frames_q");
    s->cross = has_q;
    if (s->cross) {
        st = rai_meta_int(f, "num_frames_q", &s->fq, 1, SWIN3D_MAX_WINDOW);
        if (!st) st = rai_meta_int(f, "num_frames_kv", &s->fkv, 1, SWIN3D_MAX_WINDOW);
        if (st) return st;
    }
    if ((st = meta_triple(f, "window_size", s->win, s->cross, s->fq, 1))) return st;
    if (ra_st_meta(f, "shift_size") &&
        (st = meta_triple(f, "shift_size", s->shift, s->cross, 0, 0)))
        return st;
    if (!s->cross) s->fq = s->fkv = s->win[0];
    if ((st = rai_swin3d_geometry(s))) return st;

    s->qkv_naming = ra_st_find(f, "attn.qkv.weight") || ra_st_find(f, "attn.qkv.bias");
    if (s->qkv_naming && s->cross)
        return rai_fail(RA_ERR_FORMAT, "tensor attn.qkv: Video Swin's fused qkv is for a "
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

static ra_status swin3d_detect(ra_model *m, const ra_st_file *f) {
    (void)f;
    snprintf(m->scheme, sizeof m->scheme, "%s",
             ((swin3d_block *)m->impl)->qkv_naming ? "video_swin" : "official");
    return RA_OK;
}

static rai_tensor_kind swin3d_canonical(const ra_model *m, const char *name, char *buf, size_t n) {
    (void)m;
    if ((size_t)snprintf(buf, n, "%s", name) >= n) return RA_TENSOR_UNKNOWN;
    return strcmp(name, "attn.relative_position_index") == 0 ? RA_TENSOR_BUFFER
                                                             : RA_TENSOR_PARAM;
}

ra_status rai_swin3d_check_index(const ra_st_file *f, const ra_st_tensor *t,
                                 const swin3d_block *s) {
    if (!(t->ndim == 2 && t->shape[0] == s->n1 && t->shape[1] == s->n2))
        return rai_fail(RA_ERR_SHAPE, "tensor '%.80s' must have shape (%lld, %lld)", t->name,
                        (long long)s->n1, (long long)s->n2);
    return rai_check_saved_index(f, t, s->idx, s->n2);
}

ra_status rai_swin3d_index(swin3d_block *s) {
    if (!(s->idx = rai_alloc((size_t)(s->n1 * s->n2), sizeof *s->idx)))
        return rai_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory for the index");
    return ra_relpos_index_3d(s->idx, s->fq, s->fkv, s->win[1], s->win[2], NULL);
}

static ra_status swin3d_build(ra_model *m, const ra_st_file *f) {
    swin3d_block *s = m->impl;
    const int64_t C = s->dim;
    s->n1w = rai_model_get(m, "norm1.weight"), s->n1b = rai_model_get(m, "norm1.bias");
    s->nkw = rai_model_get(m, "norm_kv.weight"), s->nkb = rai_model_get(m, "norm_kv.bias");
    s->n2w = rai_model_get(m, "norm2.weight"), s->n2b = rai_model_get(m, "norm2.bias");
    s->table = rai_model_get(m, "attn.relative_position_bias_table");
    if (s->qkv_naming) {   /* rows q, k, v: q = rows [0, C), kv = rows [C, 3C) */
        const float *w = rai_model_get(m, "attn.qkv.weight"), *b = rai_model_get(m, "attn.qkv.bias");
        s->qw = w, s->kvw = w ? w + C * C : NULL;
        s->qb = b, s->kvb = b ? b + C : NULL;
    } else {
        s->qw = rai_model_get(m, "attn.q.weight"), s->qb = rai_model_get(m, "attn.q.bias");
        s->kvw = rai_model_get(m, "attn.kv.weight"), s->kvb = rai_model_get(m, "attn.kv.bias");
    }
    s->pw = rai_model_get(m, "attn.proj.weight"), s->pb = rai_model_get(m, "attn.proj.bias");
    s->f1w = rai_model_get(m, "mlp.fc1.weight"), s->f1b = rai_model_get(m, "mlp.fc1.bias");
    s->f2w = rai_model_get(m, "mlp.fc2.weight"), s->f2b = rai_model_get(m, "mlp.fc2.bias");
    if (!s->n1w || !s->n1b || !s->n2w || !s->n2b || !s->table || !s->qw || !s->kvw ||
        !s->pw || !s->pb || !s->f1w || !s->f1b || !s->f2w || !s->f2b ||
        (s->cross && (!s->nkw || !s->nkb)) || (s->qkv_bias && (!s->qb || !s->kvb)))
        return rai_fail(RA_ERR_INTERNAL, "swin_block_3d: a parameter is missing");
    ra_status st = rai_swin3d_index(s);
    const ra_st_tensor *t = ra_st_find(f, "attn.relative_position_index");
    if (!st && t) st = rai_swin3d_check_index(f, t, s);
    return st;
}

static void tape_free(struct swin3d_tape *t);

static void swin3d_destroy(void *impl) {
    swin3d_block *s = impl;
    rai_free(s->idx);
    tape_free(s->tape);
    rai_arena_cache_free(&s->ws);
    free(s);
}

/* ---- the forward pass --------------------------------------------------- */


static swin3d_plan plan_of(const swin3d_block *s, int d, int h, int w) {
    swin3d_plan p;
    int win[3] = {s->win[0], s->win[1], s->win[2]}, sh[3] = {s->shift[0], s->shift[1], s->shift[2]};
    const int size[3] = {s->cross ? s->fq : d, h, w};
    for (int a = s->cross ? 1 : 0; a < 3; a++)   /* get_window_size, per axis */
        if (size[a] <= win[a]) win[a] = size[a], sh[a] = 0;
    p.gq = (ra_window_spec){.d = size[0], .h = h, .w = w, .wd = win[0], .wh = win[1],
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
static const int32_t *run_index(const swin3d_block *s, const swin3d_plan *p, int32_t *out) {
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

static ra_status sizes_of(const swin3d_block *s, const swin3d_plan *pp, int B, int H, int W, swin3d_sizes *z) {
    const int C = s->dim;
    const swin3d_plan p = *pp;
    const int dq = p.gq.d, dkv = p.gkv.d;
    memset(z, 0, sizeof *z);
    if (p.nw < 1 || p.n1 < 1 || p.n2 < 1)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d: clip %dx%dx%d with window %dx%dx%d",
                        dq, H, W, s->win[0], s->win[1], s->win[2]);
    int64_t nproj;
    int ok = rai_mul_i64(&z->M1, (int64_t)B * dq, (int64_t)H * W) &&
             rai_mul_i64(&z->M2, (int64_t)B * dkv, (int64_t)H * W) &&
             rai_mul_i64(&z->nx, z->M1, C) && rai_mul_i64(&z->nkx, s->cross ? z->M2 : 0, C) &&
             rai_mul_i64(&z->bw, B, p.nw) && z->bw <= INT_MAX &&
             rai_mul_i64(&z->rows1, z->bw, p.n1) && rai_mul_i64(&z->rows2, z->bw, p.n2) &&
             rai_mul_i64(&z->nwin1, z->rows1, C) &&
             rai_mul_i64(&z->nwin2, s->cross ? z->rows2 : 0, C) &&
             rai_mul_i64(&z->nlabels, p.shifted ? p.nw : 0, p.n1 + p.n2) &&
             rai_mul_i64(&nproj, z->rows1 + z->rows2, 3 * (int64_t)C) &&
             rai_mul_i64(&z->nhid, z->M1, s->hidden);
    if (ok && s->cross && p.shifted) {
        z->t2 = (int64_t)p.gq.wh * p.gq.ww;
        ok = rai_mul_i64(&z->nl2, p.nw, z->t2);
    }
    if (!ok || z->nx > SWIN3D_MAX_FLOATS || z->nkx > SWIN3D_MAX_FLOATS ||
        z->nwin1 > SWIN3D_MAX_FLOATS || z->nwin2 > SWIN3D_MAX_FLOATS ||
        z->nlabels > SWIN3D_MAX_FLOATS || z->nl2 > SWIN3D_MAX_FLOATS ||
        nproj > SWIN3D_MAX_FLOATS)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d: %d clips of %dx%dx%dx%d are too large", B,
                        dq, H, W, C);
    return RA_OK;
}

/* The attention mask of a shifted plan as region labels (nW, N1 + N2;
 * ra_attn_desc.regions): each window's query labels, then its key labels.
 * A cross block (RSTT's attn_mask_qkv, whose (query frame, key frame)
 * blocks are all the spatial mask) labels each frame's tokens with the
 * spatial window's labels (nW, T), built in l2 first. */
static ra_status build_labels(const swin3d_block *s, const swin3d_plan *p, int H, int W,
                              int32_t *labels, int32_t *l2, int64_t t2) {
    if (!labels) return RA_OK;
    const int64_t n1 = p->n1, n2 = p->n2, nl = n1 + n2;
    if (!s->cross) {   /* self-attention: the keys are the queries */
        ra_status st = ra_window_regions(l2, &p->gq);
        for (int64_t k = 0; !st && k < p->nw; k++) {
            memcpy(labels + k * nl, l2 + k * n1, (size_t)n1 * sizeof *labels);
            memcpy(labels + k * nl + n1, l2 + k * n1, (size_t)n1 * sizeof *labels);
        }
        return st;
    }
    const ra_window_spec g2 = {.d = 1, .h = H, .w = W, .wd = 1, .wh = p->gq.wh, .ww = p->gq.ww,
                               .sh = p->gq.sh, .sw = p->gq.sw};
    ra_status st = ra_window_regions(l2, &g2);
    for (int64_t k = 0; !st && k < p->nw; k++) {
        for (int a = 0; a < s->fq; a++)
            memcpy(labels + k * nl + a * t2, l2 + k * t2, (size_t)t2 * sizeof *labels);
        for (int e = 0; e < s->fkv; e++)
            memcpy(labels + k * nl + n1 + e * t2, l2 + k * t2, (size_t)t2 * sizeof *labels);
    }
    return st;
}

/* ---- the attention (block.h's rai_block_attn) ----------------------------
 * Not an ra_attn_layer: q and kv are the model's own projections (one
 * fused qkv product when their weights and biases follow each other, as
 * Video Swin's attn.qkv does), and the bias index is clipped to the run's
 * windows (run_index). The block lays the rows out and adds the residuals. */


/* Its workspaces: [q or qkv | kv | out | the core's] for the forward (what
 * the backward reads back), [dq or dqkv | dkv | dout | the core's] for the
 * backward. */
typedef struct attn_parts {
    float *q, *kv, *o;
    void *work;
    size_t wbytes;
} attn_parts;

static ra_attn_desc attn_desc(const window_attn_3d *r, const rai_block_layout *l) {
    const swin3d_block *s = r->s;
    return (ra_attn_desc){.b_ = l->b_, .nh = s->heads, .n1 = l->n, .n2 = rai_block_keys(l),
                          .hd = s->dim / s->heads, .scale = s->scale, .table = s->table,
                          .idx = r->idx, .table_rows = s->rows, .regions = l->regions,
                          .nw = l->regions ? l->nw : 0, .precision = rai_core_precision_get()};
}

/* Bytes of the parts (the core's wbytes last); laid out in base if given. */
static size_t attn_carve(const window_attn_3d *r, const rai_block_layout *l, size_t wbytes,
                         void *base, attn_parts *w) {
    const size_t C = (size_t)r->s->dim, rows1 = (size_t)l->b_ * l->n,
                 rows2 = (size_t)l->b_ * rai_block_keys(l);
    const size_t nq = up16(rows1 * (r->fused ? 3 : 1) * C),
                 nkv = r->fused ? 0 : up16(rows2 * 2 * C), no = up16(rows1 * C);
    if (base) {
        float *b = base;
        *w = (attn_parts){.q = b, .kv = b + nq, .o = b + nq + nkv, .work = b + nq + nkv + no,
                          .wbytes = wbytes};
    }
    return (nq + nkv + no + up16((wbytes + 3) / 4)) * sizeof(float);
}

static size_t attn_forward_ws_size(const void *ctx, const rai_block_layout *l) {
    const ra_attn_desc d = attn_desc(ctx, l);
    return attn_carve(ctx, l, ra_attention_workspace_size(&d, ra_threads_get()), NULL, NULL);
}

static size_t attn_backward_ws_size(const void *ctx, const rai_block_layout *l) {
    const ra_attn_desc d = attn_desc(ctx, l);
    return attn_carve(ctx, l, ra_attention_backward_workspace_size(&d, ra_threads_get()), NULL,
                      NULL);
}

static ra_status attn_forward(const void *ctx, float *y, float *probs, const float *x,
                              const float *kv, const rai_block_layout *l, void *ws, float *res,
                              const int32_t *map) {
    const window_attn_3d *r = ctx;
    const swin3d_block *s = r->s;
    const int C = s->dim;
    const int64_t rows1 = (int64_t)l->b_ * l->n, rows2 = (int64_t)l->b_ * rai_block_keys(l);
    const ra_attn_desc d = attn_desc(r, l);
    attn_parts w;
    attn_carve(r, l, ra_attention_workspace_size(&d, ra_threads_get()), ws, &w);
    const float *k, *v;
    int ldq, ldkv;
    if (r->fused) {
        ra_linear_forward(w.q, x, s->qw, s->qb, rows1, 3 * C, C);
        k = w.q + C, v = w.q + 2 * C, ldq = ldkv = 3 * C;
    } else {
        ra_linear_forward(w.q, x, s->qw, s->qb, rows1, C, C);
        ra_linear_forward(w.kv, kv ? kv : x, s->kvw, s->kvb, rows2, 2 * C, C);
        k = w.kv, v = w.kv + C, ldq = C, ldkv = 2 * C;
    }
    ra_status st = ra_attention_forward(w.o, C, probs, w.q, ldq, k, ldkv, v, ldkv, &d, w.work,
                                        w.wbytes);
    if (!st) rai_linear_fused(y, w.o, s->pw, s->pb, rows1, C, C, 0, res, map);
    return st;
}

/* The backward of attn_forward: dx overwritten, dkv and g ACCUMULATED. */
static ra_status attn_backward(const void *ctx, float *dx, float *dkv, const ra_attn_grads *g,
                               const float *dy, const float *x, const float *kv,
                               const rai_block_layout *l, const void *saved, void *ws) {
    const window_attn_3d *r = ctx;
    const swin3d_block *s = r->s;
    const int C = s->dim;
    const int64_t rows1 = (int64_t)l->b_ * l->n, rows2 = (int64_t)l->b_ * rai_block_keys(l);
    const ra_attn_desc d = attn_desc(r, l);
    attn_parts f, b;   /* the forward's (read back) and the gradients */
    attn_carve(r, l, 0, (void *)saved, &f);
    attn_carve(r, l, ra_attention_backward_workspace_size(&d, ra_threads_get()), ws, &b);
    memset(ws, 0, (size_t)((char *)b.work - (char *)ws));   /* dq, dkv, dout accumulate */

    /* y = proj(o) */
    ra_linear_backward(b.o, g->proj_w, g->proj_b, dy, f.o, s->pw, rows1, C, C);
    /* o = attention(q, k, v) */
    const float *k, *v;
    float *dk, *dv;
    int ldq, ldkv;
    if (r->fused) {
        k = f.q + C, v = f.q + 2 * C, dk = b.q + C, dv = b.q + 2 * C, ldq = ldkv = 3 * C;
    } else {
        k = f.kv, v = f.kv + C, dk = b.kv, dv = b.kv + C, ldq = C, ldkv = 2 * C;
    }
    ra_status st = ra_attention_backward(b.q, ldq, dk, ldkv, dv, ldkv, g->table, NULL, NULL,
                                         b.o, C, f.q, ldq, k, ldkv, v, ldkv, &d, b.work,
                                         b.wbytes);
    if (st) return st;
    /* the projections; q, k, v rows follow each other in weights, biases and
     * gradients when fused */
    memset(dx, 0, (size_t)(rows1 * C) * sizeof *dx);
    if (r->fused) {
        ra_linear_backward(dx, g->q_w, g->q_b, b.q, x, s->qw, rows1, 3 * C, C);
    } else {
        ra_linear_backward(dx, g->q_w, g->q_b, b.q, x, s->qw, rows1, C, C);
        ra_linear_backward(kv ? dkv : dx, g->kv_w, g->kv_b, b.kv, kv ? kv : x, s->kvw, rows2,
                           2 * C, C);
    }
    return RA_OK;
}

/* ---- one run: windows, index, mask, the block ---------------------------- */


static ra_status nomem(void) { return rai_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory"); }

ra_status rai_swin3d_run_begin(swin3d_run *r, const swin3d_block *s, const float *kv, int B, int d,
                           int H, int W, rai_arena *a) {
    memset(r, 0, sizeof *r);
    const swin3d_plan p = r->p = plan_of(s, d, H, W);
    ra_status st = sizes_of(s, &p, B, H, W, &r->z);
    if (st) return st;
    const swin3d_sizes z = r->z;
    if (z.rows1 > INT32_MAX || z.rows2 > INT32_MAX || z.M1 > INT32_MAX || z.M2 > INT32_MAX)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d: %d clips of %dx%dx%d are too large", B,
                        p.gq.d, H, W);
    const int32_t *idx = s->idx;
    if (p.n1 != s->n1 || p.n2 != s->n2) {
        int32_t *buf = rai_arena_bytes(a, (size_t)(p.n1 * p.n2) * sizeof *buf);
        if (!buf) return nomem();
        idx = run_index(s, &p, buf);
    }
    const int C = s->dim;
    r->attn = (window_attn_3d){
        .s = s, .idx = idx,
        .fused = !s->cross && s->kvw == s->qw + (int64_t)C * C && (!s->qb || s->kvb == s->qb + C)};
    r->l = (rai_block_layout){.m = z.M1, .batch = B, .b_ = (int)z.bw, .n = (int)p.n1,
                             .n2 = (int)p.n2};
    const ra_attn_desc ad = attn_desc(&r->attn, &r->l);   /* the mask added below: same sizes */
    if ((st = ra_attention_check(&ad))) return st;

    int32_t *map = rai_arena_bytes(a, (size_t)z.rows1 * sizeof *map);
    int32_t *kvmap = s->cross ? rai_arena_bytes(a, (size_t)z.rows2 * sizeof *kvmap) : NULL;
    int32_t *labels = p.shifted ? rai_arena_bytes(a, (size_t)z.nlabels * sizeof *labels) : NULL;
    const int64_t nl2 = s->cross ? z.nl2 : (int64_t)p.nw * p.n1;   /* ra_window_regions' */
    int32_t *l2 = p.shifted ? rai_arena_bytes(a, (size_t)nl2 * sizeof *l2) : NULL;
    if (!map || (s->cross && !kvmap) || (p.shifted && (!labels || !l2))) return nomem();
    st = rai_window_rowmap(map, B, &p.gq);
    if (!st && s->cross) st = rai_window_rowmap(kvmap, B, &p.gkv);
    if (!st) st = build_labels(s, &p, H, W, labels, l2, z.t2);
    if (st) return st;
    r->l.map = map, r->l.regions = labels, r->l.nw = labels ? (int)p.nw : 0;
    if (s->cross) r->l.kv = kv, r->l.mkv = z.M2, r->l.kvmap = kvmap;

    r->ops = (rai_block_attn){.ctx = &r->attn, .forward_ws_size = attn_forward_ws_size,
                             .forward = attn_forward, .backward_ws_size = attn_backward_ws_size,
                             .backward = attn_backward};
    r->blk = (rai_block){.dim = C, .hidden = s->hidden, .eps = SWIN3D_EPS,
                        .mlp_chunk = SWIN3D_MLP_CHUNK, .n1w = s->n1w, .n1b = s->n1b,
                        .n2w = s->n2w, .n2b = s->n2b, .fc1w = s->f1w, .fc1b = s->f1b,
                        .fc2w = s->f2w, .fc2b = s->f2b, .nkw = s->nkw, .nkb = s->nkb,
                        .drop_path = s->drop_path, .own = &r->ops};
    return RA_OK;
}

ra_status rai_swin3d_forward(const swin3d_block *s, float *y, const float *x, const float *kv,
                            int B, int d, int H, int W, rai_arena *a) {
    const size_t mark = rai_arena_mark(a);
    swin3d_run r;
    ra_status st = rai_swin3d_run_begin(&r, s, kv, B, d, H, W, a);
    if (!st) {
        if (y != x) memcpy(y, x, (size_t)r.z.nx * sizeof *y);
        st = rai_block_forward(&r.blk, y, NULL, &r.l, a);
    }
    rai_arena_reset(a, mark);
    return st;
}

/* rai_swin3d_forward with the block's own scratch. */
static ra_status run_clips(const swin3d_block *s, float *y, const float *x, const float *kv,
                           int B, int d, int H, int W) {
    rai_arena_cache *cache = (rai_arena_cache *)&s->ws;
    rai_arena local, *a = rai_arena_begin(cache, &local);
    const ra_status st = rai_swin3d_forward(s, y, x, kv, B, d, H, W, a);
    rai_arena_end(cache, a);
    return st;
}

static ra_status check_dims(const swin3d_block *s, int b, int d, int h, int w) {
    if (b < 1 || d < 1 || d > SWIN3D_MAX_SIZE || h < 1 || h > SWIN3D_MAX_SIZE || w < 1 ||
        w > SWIN3D_MAX_SIZE)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d: %d clips of %d frames of %dx%d: each size "
                        "must be in 1..%d", b, d, h, w, SWIN3D_MAX_SIZE);
    if (s->cross && d != s->fq)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d: the cross block has num_frames_q = %d query "
                        "frames, x has %d", s->fq, d);
    return RA_OK;
}

ra_status ra_swin_block_3d_forward(const ra_model *m, float *y, const float *x, const float *kv,
                                   int b, int d, int h, int w) {
    if (!m || m->ops != &rai_swin_block_3d_ops)
        return rai_fail(RA_ERR_ARG, "ra_swin_block_3d_forward: not a swin_block_3d model");
    const swin3d_block *s = m->impl;
    if (!y || !x) return rai_fail(RA_ERR_ARG, "ra_swin_block_3d_forward: NULL x or y");
    if (s->cross && !kv)
        return rai_fail(RA_ERR_ARG, "swin_block_3d: the cross block needs kv (B, %d, H, W, %d)",
                        s->fkv, s->dim);
    if (!s->cross && kv)
        return rai_fail(RA_ERR_ARG, "swin_block_3d: a self-attention block takes no kv");
    ra_status st = check_dims(s, b, d, h, w);
    return st ? st : run_clips(s, y, x, kv, b, d, h, w);
}

/* Where the batched call meets tensors from a file: every axis of x and kv
 * against the model (channels = dim, a cross block's D1 and D2 frames), and
 * the element counts bounded, so that ra_swin_block_3d_forward reads and
 * writes only what the tensors hold. */
ra_status ra_swin_block_3d_check(const ra_model *m, int x_ndim, const int64_t *x_shape,
                                 int kv_ndim, const int64_t *kv_shape) {
    if (!m || m->ops != &rai_swin_block_3d_ops || !x_shape || (kv_ndim && !kv_shape))
        return rai_fail(RA_ERR_ARG, "ra_swin_block_3d_check: not a swin_block_3d model");
    const swin3d_block *s = m->impl;
    if (x_ndim != 5)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d takes x (B, D, H, W, C), got %d dimensions",
                        x_ndim);
    for (int i = 0; i < 5; i++)
        if (x_shape[i] < 1 || x_shape[i] > SWIN3D_MAX_SIZE)
            return rai_fail(RA_ERR_SHAPE, "swin_block_3d: x has size %lld on axis %d, outside "
                            "1..%d", (long long)x_shape[i], i, SWIN3D_MAX_SIZE);
    if (x_shape[4] != s->dim)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d: x has %lld channels, dim is %d",
                        (long long)x_shape[4], s->dim);
    int64_t n = x_shape[0];
    for (int i = 1; i < 5; i++)
        if (!rai_mul_i64(&n, n, x_shape[i]) || n > SWIN3D_MAX_FLOATS)
            return rai_fail(RA_ERR_SHAPE, "swin_block_3d: x holds more than %lld values",
                            (long long)SWIN3D_MAX_FLOATS);
    if (!s->cross && kv_ndim)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d: a self-attention block takes no kv");
    if (s->cross) {
        const int64_t want[5] = {x_shape[0], s->fkv, x_shape[2], x_shape[3], s->dim};
        int ok = kv_ndim == 5;
        for (int i = 0; ok && i < 5; i++) ok = kv_shape[i] == want[i];
        if (!ok)
            return rai_fail(RA_ERR_SHAPE, "swin_block_3d: the cross block takes kv (B, D2, H, W, "
                            "C) = (%lld, %d, %lld, %lld, %d)", (long long)want[0], s->fkv,
                            (long long)want[2], (long long)want[3], s->dim);
    }
    return check_dims(s, (int)x_shape[0], (int)x_shape[1], (int)x_shape[2], (int)x_shape[3]);
}

/* The clip of ra_model_forward / ra_model_forward_train: x (D, H, W, C),
 * a cross block's holding the D1 query frames, then the D2 key/value
 * frames. Writes the query frames dq, the map and ny = dq * H * W * C. */
static ra_status clip_of(const swin3d_block *s, int x_ndim, const int64_t *x_shape, int *dq,
                         int *h, int *w, int64_t *ny) {
    if (x_ndim != 4)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d takes one clip x (D, H, W, C)%s, got %d "
                        "dimensions (a batch (B, D, H, W, C) goes through "
                        "ra_swin_block_3d_forward)", s->cross ? " with D = D1 + D2 frames" : "",
                        x_ndim);
    const int64_t D = x_shape[0], H = x_shape[1], W = x_shape[2], C = x_shape[3];
    if (C != s->dim)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d: x has %lld channels, dim is %d",
                        (long long)C, s->dim);
    if (s->cross && D != (int64_t)s->fq + s->fkv)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d: the cross block takes x (D1 + D2 = %d, H, "
                        "W, C), the %d query frames then the %d key/value frames; x has %lld",
                        s->fq + s->fkv, s->fq, s->fkv, (long long)D);
    if (D < 1 || D > SWIN3D_MAX_SIZE || H < 1 || H > SWIN3D_MAX_SIZE || W < 1 ||
        W > SWIN3D_MAX_SIZE)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d: a clip of %lldx%lldx%lld", (long long)D,
                        (long long)H, (long long)W);
    *dq = s->cross ? s->fq : (int)D, *h = (int)H, *w = (int)W;
    if (!rai_mul_i64(ny, (int64_t)*dq * H, W * C) || *ny > SWIN3D_MAX_FLOATS)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d: input too large");
    return check_dims(s, 1, *dq, *h, *w);
}

/* ra_model_forward: one clip x (D, H, W, C); a cross block's x holds the
 * D1 query frames, then the D2 key/value frames. */
static ra_status swin3d_forward(const ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                const float *x, int x_ndim, const int64_t *x_shape) {
    const swin3d_block *s = m->impl;
    int dq = 0, H = 0, W = 0;
    int64_t ny = 0;
    ra_status st = clip_of(s, x_ndim, x_shape, &dq, &H, &W, &ny);
    if (st) return st;
    float *out = rai_alloc((size_t)ny, sizeof *out);
    if (!out) return rai_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory");
    const float *kv = s->cross ? x + ny : NULL;
    if ((st = run_clips(s, out, x, kv, 1, dq, H, W))) {
        rai_free(out);
        return st;
    }
    *y = out;
    *y_ndim = 4;
    y_shape[0] = dq, y_shape[1] = H, y_shape[2] = W, y_shape[3] = s->dim;
    return RA_OK;
}

/* ---- training ------------------------------------------------------------
 * The block's training forward (block.c) keeps on a tape what its backward
 * reads, the attention's projections and output among them (its
 * workspace); the tape and the run's windows live in an arena owned by the
 * model, reused step after step. The clip is copied onto the tape: the
 * caller's x need not outlive the forward. */
typedef struct swin3d_tape {
    rai_arena_cache cache;
    rai_arena local, *a;      /* the arena in use since the last forward */
    swin3d_run r;
    rai_block_tape bt;
    int valid;               /* a training forward has filled it */
} swin3d_tape;

static void tape_free(swin3d_tape *t) {
    if (!t) return;
    if (t->a) rai_arena_end(&t->cache, t->a);
    rai_arena_cache_free(&t->cache);
    free(t);
}

/* The training forward of B clips: y (B, Dq, H, W, C) (not x) from x and,
 * for a cross block, kv, as run_clips, filling the tape. */
static ra_status train_clips(swin3d_block *s, float *y, const float *x, const float *kv, int B,
                             int d, int H, int W) {
    if (!s->tape && !(s->tape = calloc(1, sizeof *s->tape)))
        return rai_fail(RA_ERR_NOMEM, "swin_block_3d: out of memory for the tape");
    swin3d_tape *t = s->tape;
    t->valid = 0;
    if (t->a) rai_arena_end(&t->cache, t->a);
    t->a = rai_arena_begin(&t->cache, &t->local);
    swin3d_run *r = &t->r;
    ra_status st = rai_swin3d_run_begin(r, s, kv, B, d, H, W, t->a);
    if (st) return st;
    if (r->z.nhid > SWIN3D_MAX_FLOATS)
        return rai_fail(RA_ERR_SHAPE, "swin_block_3d: %d clips of %dx%dx%d are too large to "
                        "train on", B, r->p.gq.d, H, W);
    float *xc = rai_arena_floats(t->a, (size_t)r->z.nx);
    float *kvc = s->cross ? rai_arena_floats(t->a, (size_t)r->z.nkx) : NULL;
    float *base = rai_arena_floats(t->a, rai_block_tape_layout(&t->bt, &r->blk, &r->l, NULL));
    if (!xc || (s->cross && !kvc) || !base) return nomem();
    memcpy(xc, x, (size_t)r->z.nx * sizeof *xc);
    if (s->cross) memcpy(kvc, kv, (size_t)r->z.nkx * sizeof *kvc), r->l.kv = kvc;
    rai_block_tape_layout(&t->bt, &r->blk, &r->l, base);
    t->bt.x = xc;
    if ((st = rai_block_forward_train(&r->blk, &t->bt, y, 1, t->a, NULL))) return st;
    t->valid = 1;
    return RA_OK;
}

static ra_status swin3d_forward_train(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                      const float *x, int x_ndim, const int64_t *x_shape,
                                      ra_rng *rng) {
    (void)rng;   /* no dropout or stochastic depth in this block */
    swin3d_block *s = m->impl;
    if (s->tape) s->tape->valid = 0;
    int dq = 0, H = 0, W = 0;
    int64_t ny = 0;
    ra_status st = clip_of(s, x_ndim, x_shape, &dq, &H, &W, &ny);
    if (st) return st;
    float *out = rai_alloc((size_t)ny, sizeof *out);
    if (!out) return nomem();
    if ((st = train_clips(s, out, x, s->cross ? x + ny : NULL, 1, dq, H, W))) {
        rai_free(out);
        return st;
    }
    *y = out;
    *y_ndim = 4;
    y_shape[0] = dq, y_shape[1] = H, y_shape[2] = W, y_shape[3] = s->dim;
    return RA_OK;
}

/* ra_model_backward: dx (the clip's shape, a cross block's query frames
 * then its key/value frames) and grad ACCUMULATED, from dy and the tape,
 * which is only read: a second call gives the same gradients again. */
static ra_status swin3d_backward(ra_model *m, float *grad, float *dx, const float *dy) {
    const swin3d_block *s = m->impl;
    swin3d_tape *t = s->tape;
    if (!t || !t->valid)
        return rai_fail(RA_ERR_ARG, "swin_block_3d: backward without a training forward");
    const int64_t nx = t->r.z.nx;
#define G(w) rai_model_grad_at(m, grad, s->w)   /* Video Swin's qkv and RSTT's q / kv alike */
    const rai_block_grads g = {
        .n1w = G(n1w), .n1b = G(n1b), .n2w = G(n2w), .n2b = G(n2b), .nkw = G(nkw),
        .nkb = G(nkb), .fc1w = G(f1w), .fc1b = G(f1b), .fc2w = G(f2w), .fc2b = G(f2b),
        .attn = {.q_w = G(qw), .q_b = G(qb), .kv_w = G(kvw), .kv_b = G(kvb), .proj_w = G(pw),
                 .proj_b = G(pb), .table = G(table)},
        .kv = dx && s->cross ? dx + nx : NULL};
#undef G
    const size_t mark = rai_arena_mark(t->a);
    float *d = rai_arena_floats(t->a, (size_t)nx);
    if (!d) return nomem();
    memcpy(d, dy, (size_t)nx * sizeof *d);
    ra_status st = rai_block_backward(&t->r.blk, &t->bt, d, &g, t->a);
    if (!st && dx) ra_add(dx, dx, d, nx);
    rai_arena_reset(t->a, mark);
    return st;
}

int64_t rai_swin3d_flops(const swin3d_block *s, int d, int h, int w) {
    const swin3d_plan p = plan_of(s, d, h, w);
    const int64_t C = s->dim, L1 = (int64_t)p.gq.d * h * w, L2 = (int64_t)p.gkv.d * h * w;
    int64_t attn = rai_cadd(rai_cmul3(p.n1, C, C), rai_cmul3(p.n2, 2 * C, C));
    attn = rai_cadd(rai_cadd(attn, rai_cmul3(p.n1, p.n2, 2 * C)), rai_cmul3(p.n1, C, C));
    int64_t f = rai_cadd(rai_cmul(2 * C, L1), s->cross ? rai_cmul(C, L2) : 0);
    f = rai_cadd(f, rai_cmul(p.nw, attn));
    return rai_cadd(f, rai_cmul3(2 * L1, C, s->hidden));
}

/* A self block over Wd frames (one window of frames), a cross block over
 * its D1 and D2 frames, of h x w. */
static int64_t swin3d_flops(const ra_model *m, int h, int w) {
    const swin3d_block *s = m->impl;
    if (h > SWIN3D_MAX_SIZE || w > SWIN3D_MAX_SIZE) return -1;
    return rai_swin3d_flops(s, s->win[0], h, w);
}

const rai_arch_ops rai_swin_block_3d_ops = {
    .name = "swin_block_3d", .arch = RA_ARCH_SWIN_BLOCK_3D, .declare = swin3d_declare,
    .canonical = swin3d_canonical, .detect = swin3d_detect, .build = swin3d_build,
    .destroy = swin3d_destroy,
    .forward = swin3d_forward, .forward_train = swin3d_forward_train,
    .backward = swin3d_backward, .flops = swin3d_flops};
