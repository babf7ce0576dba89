/*
 * relattn.h - transformer attention with relative position encodings.
 *
 * The one public header of the relattn library; it is the specification of
 * the API. Everything is float32, row-major, and documented with shapes in
 * one vocabulary:
 *
 *   B_  windows (or sequences) in a batch      nH  heads
 *   N1  query tokens     N2  key/value tokens   C   channels, hd = C / nH
 *   T   rows of a relative position bias table  R   rows of a Shaw table (2k+1)
 *   nW  windows per image (masks are broadcast as mask[b % nW])
 *
 * The data flows: index -> windows -> attention core -> attention layers ->
 * files -> command line, and this header follows the same order.
 *
 * Conventions
 *   - Every call that can fail returns an ra_status (RA_OK == 0, errors < 0).
 *     The library never exits or aborts on bad input. After a failure,
 *     ra_last_error() gives a one-line reason (per thread).
 *   - Outputs come first in argument lists, then inputs, then dimensions.
 *   - Free functions accept NULL and then do nothing.
 *   - Kernels never allocate: the attention core takes its workspace from
 *     the caller, who asks for its size first. Layer-level calls allocate
 *     what they need and report RA_ERR_NOMEM when they cannot.
 */
#ifndef RELATTN_H
#define RELATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RA_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

typedef enum ra_status {
    RA_OK = 0,
    RA_ERR_ARG = -1,      /* invalid argument or configuration            */
    RA_ERR_SHAPE = -2,    /* tensor of the wrong shape or dtype            */
    RA_ERR_FORMAT = -3,   /* malformed file                                */
    RA_ERR_IO = -4,       /* input missing or unreadable                   */
    RA_ERR_WRITE = -5,    /* output cannot be created or written           */
    RA_ERR_NOMEM = -6,    /* allocation failed or size overflow            */
    RA_ERR_INTERNAL = -7  /* a bug in relattn                              */
} ra_status;

/* Short fixed text for a status ("invalid argument", ...). Never NULL. */
const char *ra_status_str(ra_status s);

/* The reason for the last failure in this thread, one line, no newline.
 * Empty string if none. Valid until the next failing call in this thread. */
const char *ra_last_error(void);

/* ------------------------------------------------------------------------ */
/* Threads                                                                   */
/* ------------------------------------------------------------------------ */

/* Number of threads the kernels use (OpenMP). n <= 0 restores the default
 * (all cores, or OMP_NUM_THREADS). Process-wide. */
void ra_threads_set(int n);
int ra_threads_get(void);

/* ------------------------------------------------------------------------ */
/* 1. Relative position index (SPEC 2.2)                                    */
/* ------------------------------------------------------------------------ */

#define RA_MAX_AXES 4

/* The general N-D builder. Tokens are numbered row-major over their
 * coordinates. Query token i has coordinates cq (axis a: qcoord[a][...]),
 * key token j has ck; with query extents E_a:
 *
 *   idx[i,j] = sum_a (cq_a - ck_a + E_a - 1) * S_a,
 *   S_{A-1} = 1,  S_a = S_{a+1} * (2 E_{a+1} - 1).
 *
 * qn[a] / kn[a] are the number of query / key coordinates on axis a,
 * qcoord[a] / kcoord[a] their values; every coordinate must lie in
 * [0, E_a) with E_a = extent[a]. idx has shape (N1, N2) with
 * N1 = prod qn, N2 = prod kn. *table_rows = prod (2 E_a - 1).
 * Pass idx = NULL to only validate and learn the sizes. */
typedef struct ra_relpos_axes {
    int naxes;                       /* 1..RA_MAX_AXES */
    int extent[RA_MAX_AXES];         /* E_a >= 1 */
    int qn[RA_MAX_AXES];
    int kn[RA_MAX_AXES];
    const int *qcoord[RA_MAX_AXES];  /* (qn[a]) */
    const int *kcoord[RA_MAX_AXES];  /* (kn[a]) */
} ra_relpos_axes;

ra_status ra_relpos_index(int32_t *idx,           /* (N1, N2) or NULL */
                          int64_t *n1, int64_t *n2, int64_t *table_rows,
                          const ra_relpos_axes *axes);

/* Swin 2-D window (Wh, Ww): idx (Wh*Ww, Wh*Ww), T = (2Wh-1)(2Ww-1). */
ra_status ra_relpos_index_2d(int32_t *idx, int wh, int ww, int64_t *table_rows);

/* RSTT 3-D: query frames 0..d1-1, key/value frames 0, s, 2s, ... below d1
 * with s = (d1+1)/d2; there must be exactly d2 of them (RA_ERR_ARG if not).
 * idx (d1*Wh*Ww, d2*Wh*Ww), T = (2 d1-1)(2Wh-1)(2Ww-1). */
ra_status ra_relpos_index_3d(int32_t *idx, int d1, int d2, int wh, int ww,
                             int64_t *table_rows);

/* Shaw 1-D: rel[i,j] = clip(j - i, -k, k) + k, in 0..2k. rel (n, n). */
ra_status ra_relpos_index_clip(int32_t *rel, int n, int k);

/* ------------------------------------------------------------------------ */
/* 2. Windows (SPEC 2.4)                                                    */
/* ------------------------------------------------------------------------ */

/* A window geometry over a D x H x W map (D = 1 for images).
 * Window (wd, wh, ww), shift (sd, sh, sw). */
typedef struct ra_window_geom {
    int d, h, w;      /* map size (before padding) */
    int wd, wh, ww;   /* window size */
    int sd, sh, sw;   /* cyclic shift, 0 <= s < window */
} ra_window_geom;

/* The Swin clamp. A square window (Wh == Ww) follows the official block on
 * the two spatial axes together: if min(H, W) <= ws then ws = min(H, W) and
 * the shift is 0. A non-square window, and the frame axis, follow Video
 * Swin per axis: if size_a <= window_a then window_a = size_a, shift_a = 0. */
void ra_window_clamp(ra_window_geom *g);

/* Padded size: each axis rounded up to a multiple of its window (0s for an
 * invalid geometry). */
void ra_window_padded(const ra_window_geom *g, int *dp, int *hp, int *wp);

/* Windows per map after padding, and tokens per window; 0 for an invalid
 * geometry (these return no status and leave ra_last_error() alone). */
int64_t ra_window_count(const ra_window_geom *g);
int64_t ra_window_tokens(const ra_window_geom *g);

/* Partition with padding and cyclic shift in one pass:
 *   x (B, D, H, W, C) -> windows (B * nW, Wd*Wh*Ww, C)
 * The map is zero-padded at the end of each axis to a multiple of the
 * window, rolled by (-sd, -sh, -sw), then cut into windows ordered by batch,
 * then window depth, row, column; tokens row-major inside the window. */
ra_status ra_window_partition(float *windows, const float *x, int b, int c,
                              const ra_window_geom *g);

/* The inverse: windows (B * nW, Wd*Wh*Ww, C) -> x (B, D, H, W, C):
 * reverse, roll by (+sd, +sh, +sw), crop the padding. */
ra_status ra_window_reverse(float *x, const float *windows, int b, int c,
                            const ra_window_geom *g);

/* The shifted-window attention mask (nW, N, N) over the padded map, with
 * 0.0 where two tokens come from the same region and -100.0 otherwise.
 * Regions per axis: [0, P-w), [P-w, P-s), [P-s, P) for padded size P
 * (a single region on an axis whose shift is 0). */
ra_status ra_window_mask(float *mask, const ra_window_geom *g);

/* ------------------------------------------------------------------------ */
/* 3. The attention core (SPEC 2.1, 2.3)                                    */
/* ------------------------------------------------------------------------ */

/* One description serves every variant: self- or cross-attention, optional
 * bias (table + index), optional additive mask, optional Shaw tables.
 *
 *   logits[b,h,i,j] = scale * q[b,h,i]·(k[b,h,j] + rel_k[rel[i,j]])
 *                     + table[idx[i,j], h] + mask[b % nW, i, j]
 *   p = softmax_j(logits)
 *   out[b,i,h*hd+d] = sum_j p[b,h,i,j] * (v[b,h,j,d] + rel_v[rel[i,j],d])
 *
 * q, k, v are read in their natural "token-major" layout with a row stride,
 * so the output of a fused qkv projection is used in place:
 *   q[b,h,i,d] = q[(b*N1 + i)*ldq + h*hd + d]     (k, v likewise with N2)
 *
 * A row whose logits are all -inf (possible only with a user mask) gives
 * p = 0 and out = 0 for that row (never NaN). */
typedef struct ra_attn_desc {
    int b_, nh, n1, n2, hd;
    float scale;
    /* optional relative position bias: table (T, nH), idx (N1, N2) */
    const float *table;
    const int32_t *idx;
    int64_t table_rows;
    /* optional additive mask (nW, N1, N2); requires B_ % nW == 0 */
    const float *mask;
    int nw;
    /* optional Shaw tables (R, hd), shared by heads, rel (N1, N2) in 0..R-1 */
    const float *rel_k;
    const float *rel_v;
    const int32_t *rel;
    int r;
} ra_attn_desc;

/* Check a description (sizes, index ranges) before running it. */
ra_status ra_attention_check(const ra_attn_desc *d);

/* Bytes of workspace ra_attention_forward needs with nthreads threads. */
size_t ra_attention_workspace_size(const ra_attn_desc *d, int nthreads);

/* out (B_, N1, ldo) written at columns h*hd + d (C = nH*hd columns);
 * attn (B_, nH, N1, N2) probabilities, or NULL. q (B_, N1, ldq),
 * k, v (B_, N2, ldk / ldv). work: ra_attention_workspace_size() bytes,
 * 64-byte aligned is best. */
ra_status ra_attention_forward(float *out, int ldo, float *attn,
                               const float *q, int ldq,
                               const float *k, int ldk,
                               const float *v, int ldv,
                               const ra_attn_desc *d,
                               void *work, size_t work_size);

/* Kernels: the scalar reference kernel is the oracle; optimised kernels are
 * chosen at run time from what the CPU supports. The environment variable
 * RELATTN_KERNEL=ref|avx2|avx512 forces a choice (if supported). */
typedef enum ra_kernel_id { RA_KERNEL_REF = 0, RA_KERNEL_AVX2 = 1,
                            RA_KERNEL_AVX512 = 2, RA_KERNEL_COUNT } ra_kernel_id;
ra_status ra_kernel_select(ra_kernel_id id);   /* RA_ERR_ARG if unsupported */
ra_kernel_id ra_kernel_current(void);
int ra_kernel_supported(ra_kernel_id id);
const char *ra_kernel_name(ra_kernel_id id);

/* ------------------------------------------------------------------------ */
/* 4. Attention layers: the seed modules with their projections              */
/* ------------------------------------------------------------------------ */

typedef enum ra_arch {
    RA_ARCH_NONE = 0,
    RA_ARCH_VIT_ATTENTION,       /* ViT Attention (seed 002)             */
    RA_ARCH_WINDOW_ATTENTION,    /* Swin WindowAttention (seeds 001, 002)*/
    RA_ARCH_WINDOW_ATTENTION_3D, /* RSTT WindowAttention3D (seed 000)    */
    RA_ARCH_SHAW_ATTENTION       /* Shaw et al. 2018 (seeds 000, 003)    */
} ra_arch;

/* Name as in the model file's "arch" metadata, or NULL. */
const char *ra_arch_name(ra_arch a);
ra_arch ra_arch_from_name(const char *name);

/* Hyperparameters, named as the PyTorch constructor arguments. */
typedef struct ra_attn_config {
    ra_arch arch;
    int dim;               /* C */
    int num_heads;         /* nH; dim % num_heads == 0 */
    int window[2];         /* (Wh, Ww): window archs */
    int frames_q;          /* D1: window_attention_3d */
    int frames_kv;         /* D2: window_attention_3d */
    int max_rel;           /* k: shaw_attention */
    int qkv_bias;          /* bias on qkv (or q and kv) */
    int has_qk_scale;      /* qk_scale given */
    float qk_scale;        /* scale = qk_scale if given (and non-zero, as
                              PyTorch's `qk_scale or hd**-0.5`), else hd^-0.5 */
    int has_rel_k, has_rel_v;  /* shaw: which tables exist; set by the layer
                                  from the params (a NULL table is absent) */
} ra_attn_config;

/* Default configuration of an arch (qkv_bias false for ViT, true else). */
ra_attn_config ra_attn_config_default(ra_arch arch);

/* Parameter tensors, borrowed (the layer never frees them). Shapes:
 *   qkv_w (3C, C), qkv_b (3C)       vit / window / shaw
 *   q_w (C, C), q_b (C), kv_w (2C, C), kv_b (2C)   window_attention_3d
 *   proj_w (C, C), proj_b (C)
 *   table (T, nH)                     window archs
 *   rel_k, rel_v (2k+1, hd)           shaw (either may be NULL)
 * Biases are NULL when qkv_bias is false. */
typedef struct ra_attn_params {
    const float *qkv_w, *qkv_b;
    const float *q_w, *q_b, *kv_w, *kv_b;
    const float *proj_w, *proj_b;
    const float *table;
    const float *rel_k, *rel_v;
} ra_attn_params;

typedef struct ra_attn_layer ra_attn_layer;   /* opaque */

/* Validate a configuration and build a layer (computing its index). */
ra_status ra_attn_layer_create(ra_attn_layer **out, const ra_attn_config *cfg,
                               const ra_attn_params *params);
void ra_attn_layer_free(ra_attn_layer *l);
const ra_attn_config *ra_attn_layer_config(const ra_attn_layer *l);

/* The bias index of a window layer, (N1, N2), and its table rows; NULL for
 * the other archs (Shaw's clip index depends on the sequence length and is
 * built per call). */
const int32_t *ra_attn_layer_index(const ra_attn_layer *l, int64_t *n1,
                                   int64_t *n2, int64_t *table_rows);

/* Token counts the layer accepts: window archs fix N1 (and N2); others take
 * any n >= 1 (N1 == N2). Returns RA_ERR_SHAPE with a reason if not. */
ra_status ra_attn_layer_check_tokens(const ra_attn_layer *l, int n1, int n2);

/* Forward pass.
 *   y    (B_, N1, C)           output
 *   attn (B_, nH, N1, N2)      probabilities, or NULL
 *   x    (B_, N1, C)           input (queries, and keys/values if kv NULL)
 *   kv   (B_, N2, C)           window_attention_3d only: key/value input,
 *                              or NULL for self-attention (N2 = N1... then
 *                              D2 must equal D1's frame count rule)
 *   mask (nW, N1, N2)          or NULL; B_ % nW == 0
 * Allocates its scratch; RA_ERR_NOMEM if it cannot. */
ra_status ra_attn_layer_forward(const ra_attn_layer *l,
                                float *y, float *attn,
                                const float *x, const float *kv,
                                int b_, int n1, int n2,
                                const float *mask, int nw);

/* ------------------------------------------------------------------------ */
/* 5. Layers used by the modules                                            */
/* ------------------------------------------------------------------------ */

/* y (M, N) = x (M, K) @ w (N, K)^T + b (N) (b may be NULL), like
 * torch.nn.Linear. Uses BLAS for large shapes. */
void ra_linear_forward(float *y, const float *x, const float *w,
                       const float *b, int64_t m, int n, int k);

/* ------------------------------------------------------------------------ */
/* 6. safetensors files (SPEC 3.1)                                          */
/* ------------------------------------------------------------------------ */

typedef enum ra_dtype {
    RA_DTYPE_INVALID = 0,
    RA_DTYPE_F32, RA_DTYPE_F16, RA_DTYPE_BF16, RA_DTYPE_F64,
    RA_DTYPE_I64, RA_DTYPE_I32, RA_DTYPE_I16, RA_DTYPE_I8, RA_DTYPE_U8,
    RA_DTYPE_BOOL
} ra_dtype;

#define RA_ST_MAX_DIMS 8

typedef struct ra_st_tensor {
    const char *name;
    ra_dtype dtype;
    int ndim;
    int64_t shape[RA_ST_MAX_DIMS];
    int64_t numel;
    const void *data;     /* raw bytes inside the file (little-endian) */
    size_t nbytes;
} ra_st_tensor;

typedef struct ra_st_file ra_st_file;   /* opaque: a validated, mapped file */

/* Open, map and validate a file completely (see SPEC 3.1): header length
 * bound (100 MB), JSON header parsed strictly, every tensor with a known
 * dtype, shape entries >= 0, offsets [begin, end] inside the data, byte
 * count = dtype size x element count (overflow-checked), tensors sorted by
 * offset with no overlap and no gap covering the whole data section, no
 * duplicate names, __metadata__ a string -> string object.
 * RA_ERR_IO if the file cannot be opened/read, RA_ERR_FORMAT otherwise. */
ra_status ra_st_open(ra_st_file **out, const char *path);
/* The same for a buffer in memory (copied). */
ra_status ra_st_open_memory(ra_st_file **out, const void *buf, size_t len);
void ra_st_close(ra_st_file *f);

int ra_st_count(const ra_st_file *f);
const ra_st_tensor *ra_st_at(const ra_st_file *f, int i);   /* in file order */
const ra_st_tensor *ra_st_find(const ra_st_file *f, const char *name);
/* Metadata value for key, or NULL. */
const char *ra_st_meta(const ra_st_file *f, const char *key);
int ra_st_meta_count(const ra_st_file *f);
const char *ra_st_meta_key(const ra_st_file *f, int i);

/* Convert a floating tensor (F32, F16, BF16, F64) into dst (numel floats).
 * RA_ERR_SHAPE for other dtypes. */
ra_status ra_st_to_f32(float *dst, const ra_st_tensor *t);
/* Convert an integer tensor (I64, I32, I16, I8, U8) into dst (numel int64). */
ra_status ra_st_to_i64(int64_t *dst, const ra_st_tensor *t);

/* A writer: collect tensors (the data is copied) and metadata, then write
 * atomically (PATH.tmp.XXXXXX in the same directory, fsync, rename). On
 * failure nothing exists at path. Tensors are written sorted by name. */
typedef struct ra_st_writer ra_st_writer;
ra_st_writer *ra_st_writer_new(void);          /* NULL if out of memory */
void ra_st_writer_free(ra_st_writer *w);
ra_status ra_st_writer_add(ra_st_writer *w, const char *name, ra_dtype dtype,
                           int ndim, const int64_t *shape, const void *data);
ra_status ra_st_writer_meta(ra_st_writer *w, const char *key,
                            const char *value);
ra_status ra_st_writer_save(ra_st_writer *w, const char *path);

/* ------------------------------------------------------------------------ */
/* 7. Models: a layer from a safetensors model file                         */
/* ------------------------------------------------------------------------ */

typedef struct ra_model ra_model;   /* opaque */

/* Read a model file: __metadata__ "arch" and hyperparameters (SPEC 3.1),
 * every tensor checked against the configuration (names, shapes, float
 * dtype; relative_position_index if present must equal the computed
 * index; no unexpected tensors). Weights are converted to F32. */
ra_status ra_model_load(ra_model **out, const char *path);
ra_status ra_model_from_file(ra_model **out, const ra_st_file *f);
void ra_model_free(ra_model *m);
ra_arch ra_model_arch(const ra_model *m);
const ra_attn_layer *ra_model_attn(const ra_model *m);

#ifdef __cplusplus
}
#endif
#endif /* RELATTN_H */
