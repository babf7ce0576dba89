/*
 * relattn.h - transformer attention with relative position encodings.
 *
 * The one public header of the relattn library; it is the specification of
 * the API, and docs/reference.md the specification of what it computes and
 * of the files it reads. Everything is float32, row-major, and documented
 * with shapes in one vocabulary:
 *
 *   B_  windows (or sequences) in a batch      nH  heads
 *   N1  query tokens     N2  key/value tokens   C   channels, hd = C / nH
 *   T   rows of a relative position bias table  R   rows of a Shaw table (2k+1)
 *   nW  windows per image (masks are broadcast as mask[b % nW])
 *
 * Example: run a model file on the tensors of an input file (what
 * `relattn forward MODEL INPUT -o OUT` does) and print the output.
 *
 *   #include <relattn.h>
 *   #include <stdio.h>
 *   #include <stdlib.h>
 *
 *   int main(int argc, char **argv) {
 *       if (argc != 3) return 2;               // MODEL.safetensors INPUT.safetensors
 *       ra_model *m = NULL;
 *       ra_st_file *f = NULL;
 *       ra_run *run = NULL;
 *       ra_tensor in[8];                       // x, mask, ... by name
 *       int n = 0;
 *       ra_status st = ra_model_load(&m, argv[1]);
 *       if (!st) st = ra_st_open(&f, argv[2]);
 *       for (int i = 0; !st && i < ra_st_count(f) && n < 8; i++) {
 *           const ra_st_tensor *t = ra_st_at(f, i);
 *           ra_tensor *x = &in[n++];
 *           *x = (ra_tensor){.name = t->name, .ndim = t->ndim,
 *                            .data = malloc(t->numel * sizeof(float))};
 *           for (int a = 0; a < t->ndim; a++) x->shape[a] = t->shape[a];
 *           st = x->data ? ra_st_read_f32(x->data, f, t) : RA_ERR_NOMEM;
 *       }
 *       if (!st) st = ra_run_create(&run, m, RA_RUN_FORWARD, in, n);
 *       if (!st) st = ra_run_exec(run);
 *       if (!st) {
 *           const ra_tensor *y = ra_run_find(run, "y");
 *           printf("%s: y (", ra_arch_name(ra_model_arch(m)));
 *           for (int a = 0; a < y->ndim; a++)
 *               printf("%s%lld", a ? ", " : "", (long long)y->shape[a]);
 *           printf("), y[0] = %.6f\n", y->data[0]);
 *       } else {
 *           fprintf(stderr, "%s: %s\n", ra_status_str(st), ra_last_error());
 *       }
 *       ra_run_free(run);                      // every free takes NULL
 *       for (int i = 0; i < n; i++) free(in[i].data);
 *       ra_st_close(f);
 *       ra_model_free(m);
 *       return st ? 1 : 0;
 *   }
 *
 *   $ cc example.c $(pkg-config --cflags --libs relattn) -o example
 *   $ ./example examples/swin_window_7x7.safetensors examples/swin_windows_input.safetensors
 *   window_attention: y (8, 49, 96), y[0] = 0.035176
 *
 * The input file's tensors are named and shaped as docs/reference.md,
 * section 3 says; the run checks them against the model. examples/c/ holds
 * a longer program (a layer made from hyperparameters, a shifted-window
 * mask, the attention map).
 *
 * Contents: the sections follow the data, from positions to files, and
 * each object's section gives its constructors, then its destructor, then
 * its methods (the names put the object first: ra_model_load, ra_model_free,
 * ra_model_forward).
 *    1. Status and errors          ra_status, ra_last_error
 *    2. The library                version, threads, kernels, temporary files
 *    3. Relative positions         ra_relpos_index_*, ra_bias_table_resize,
 *                                  ra_t5_bucket, ra_alibi_slope
 *    4. Windows                    ra_window_*
 *    5. The attention core         ra_attention_*
 *    6. Architectures              ra_arch
 *    7. The attention layer        ra_attn_layer_*, ra_attn_tape
 *    8. Random numbers             ra_rng_*
 *    9. The layers of the networks ra_linear_*, ra_layernorm_*, ra_gelu_*, ...
 *   10. Optimisation               ra_adamw_step, ra_clip_grad_norm, ra_lr_cosine
 *   11. safetensors files          ra_st_file (ra_st_*), ra_st_writer
 *   12. Models                     ra_model_*
 *   13. Runs                       ra_run_*: any model on named tensors
 *   14. Images and videos          ra_image_*, ra_video_*, ra_clip_*
 *   15. Datasets                   ra_dataset_*
 *   16. Training                   ra_trainer_*, ra_evaluate
 *   17. Pictures                   ra_png_write, ra_plot_*
 *
 * Conventions
 *   - Every call that can fail returns an ra_status (RA_OK == 0, errors < 0).
 *     The library never exits or aborts on bad input. After a failure,
 *     ra_last_error() gives a one-line reason (per thread).
 *   - Outputs come first in argument lists, then inputs, then dimensions.
 *   - Free functions accept NULL and then do nothing.
 *   - Backward calls ACCUMULATE (+=) into their gradients, and say so.
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

/* ======================================================================== */
/* 1. Status and errors: ra_status                                           */
/* ======================================================================== */

/* Every call that can fail returns one of these; the command line maps
 * them to its exit codes (docs/reference.md, section 5). */
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

/* The reason for the last failure in this thread, one line, no newline,
 * safe to print on a terminal (ra_escape_text), never cut short of its
 * end: a reason longer than 8 KB loses the middle, where the names are.
 * Empty string if none. Valid until the next failing call in this thread. */
const char *ra_last_error(void);

/* Text from a file or an argument made safe for a terminal: every byte of
 * an ASCII control character (newline and tab included, and DEL), of a
 * C1 control (U+0080..U+009F) and of invalid UTF-8 becomes \xHH; valid
 * UTF-8 is kept. Applying it twice changes nothing. Writes at most cap
 * bytes (NUL included, cap >= 1) and returns the length the whole escaped
 * text needs, like snprintf. */
size_t ra_escape_text(char *dst, size_t cap, const char *src);

/* ======================================================================== */
/* 2. The library: version, threads, kernels, temporary files                */
/* ======================================================================== */

/* Process-wide settings (ra_threads_set, ra_kernel_select,
 * ra_set_tempfile_hook) are read without a lock: set them once at start,
 * before other threads call the library. Every other call is safe
 * concurrently on shared models. */

/* The version of this header; ra_version() gives the library's. */
#define RA_VERSION_STRING "0.1.0"

/* The library's version ("0.1.0", as RA_VERSION_STRING of the header it was
 * built with) and the BLAS it runs on: OpenBLAS's configuration and core
 * ("OpenBLAS 0.3.21 DYNAMIC_ARCH ... (core Haswell)") when available. */
const char *ra_version(void);
const char *ra_blas_info(void);

/* Number of threads the kernels use (OpenMP). n <= 0 restores the default
 * (all cores, or OMP_NUM_THREADS). Process-wide. */
void ra_threads_set(int n);
int ra_threads_get(void);

/* Kernels: the scalar reference kernel is the oracle; optimised kernels are
 * chosen at run time from what the CPU supports. The environment variable
 * RELATTN_KERNEL=ref|avx2|avx512 forces a choice (if supported). */
typedef enum ra_kernel_id { RA_KERNEL_REF = 0, RA_KERNEL_AVX2 = 1,
                            RA_KERNEL_AVX512 = 2, RA_KERNEL_COUNT } ra_kernel_id;
ra_status ra_kernel_select(ra_kernel_id id);   /* RA_ERR_ARG if unsupported */
ra_kernel_id ra_kernel_current(void);
int ra_kernel_supported(ra_kernel_id id);
const char *ra_kernel_name(ra_kernel_id id);

/* Every output (safetensors, PNG) is written to a temporary file in its
 * directory and renamed. A program that may be ended by a signal while an
 * output is written can remove the temporary file: hook(tmp) is called once the temporary file
 * exists, hook(NULL) once it is renamed or removed. Set it once at start,
 * before any thread writes (it is read without a lock); NULL (the default)
 * for none. The hook runs in the writing thread and must not write files. */
typedef void (*ra_tempfile_hook)(const char *tmp_path);
void ra_set_tempfile_hook(ra_tempfile_hook hook);

/* No output replaces a file the process read. Every regular file the
 * library opens to read (a model file, a checkpoint, each file of a model
 * folder, a symlink's target, an input, an image, a dataset file, a
 * config.json) is remembered by device and inode for the life of the
 * process; every writer (ra_st_writer_save, ra_model_save, ra_trainer_save,
 * ra_png_write) refuses with RA_ERR_WRITE, before a byte is written, to
 * replace one of them, whatever the path spells (a hard link, a symlink,
 * "..", another mount of the same file), naming both paths. Thread-safe. */
/* RA_OK if writing path would replace no file read (nothing there, or
 * another file), else RA_ERR_WRITE with the reason: a program checks its
 * outputs this way once its inputs are read, before the work. */
ra_status ra_output_check(const char *path);
/* Remember path as read (a file the caller read itself): RA_ERR_IO if it
 * cannot be opened; a non-regular file is not remembered. */
ra_status ra_input_note(const char *path);
/* Forget path (NULL: every file), so that it may be replaced: for a
 * program that means to rewrite what it read, as `relattn train --resume
 * CKPT` rewrites CKPT with later states of the same run. A path that was
 * not remembered, or cannot be opened, changes nothing. */
void ra_input_forget(const char *path);

/* ======================================================================== */
/* 3. Relative positions: ra_relpos_index_*, tables, buckets, slopes         */
/* ======================================================================== */

/* Each scheme turns the relative position of a query and a key into a term
 * of the logits: a row of a learned bias table picked by an index (Swin,
 * RSTT), a row of Shaw's tables picked by the clip index, T5's buckets, or
 * a fixed function (ALiBi's slopes). docs/reference.md, section 1.2,
 * defines the indices; docs/arch-relpos.md the later schemes. */

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

/* Resample a relative position bias table to another window, as the Swin
 * authors do when fine-tuning at a new resolution: each head's grid of
 * (2Wh-1) x (2Ww-1) biases is interpolated bicubically (PyTorch's
 * F.interpolate(mode='bicubic', align_corners=False)).
 *   dst (s2h*s2w, nH)  <-  src (s1h*s1w, nH);  s = 2W - 1 per axis. */
ra_status ra_bias_table_resize(float *dst, const float *src, int nh, int s1h, int s1w,
                               int s2h, int s2w);
/* The same resize as timm's resize_rel_pos_bias_table (BEiT's, timm's
 * default without SciPy): the source offsets of each axis spread along a
 * geometric progression 1, 1 + q, 1 + q + q^2, .. (q found by bisection in
 * [1.01, 1.5] so that they reach the target's extent), the target's
 * integer offsets interpolated linearly between them (timm's
 * RegularGridInterpolator), in float32; a table of the same size is
 * copied. Sides up to 4096; the target's odd (2W - 1). */
ra_status ra_bias_table_resize_timm(float *dst, const float *src, int nh, int s1h, int s1w,
                                    int s2h, int s2w);

/* T5's relative position bucket of key j for query i (Hugging Face's
 * T5Attention._relative_position_bucket of j - i, float32 logarithm,
 * truncated): bidirectional (is_decoder false) or one-sided. -1 for an
 * invalid configuration (buckets < 2, or < 4 bidirectionally; max_distance
 * not above the exact range buckets / 4, or / 2 one-sided). */
int ra_t5_bucket(int rel, int bidirectional, int num_buckets, int max_distance);

/* ALiBi's slope of head h of nh (Press et al., the authors' get_slopes):
 * 2^(-8(h+1)/n) for n a power of two; otherwise those of the largest power
 * of two below n, then every other slope of twice that. */
float ra_alibi_slope(int h, int nh);

/* ======================================================================== */
/* 4. Windows: ra_window_*                                                   */
/* ======================================================================== */

/* Swin's windows (docs/reference.md, section 1.3): the map is padded,
 * shifted and cut into windows that attend within themselves, then put back.
 * Partition and reverse are permutations plus zero padding, so their
 * backward calls are each other's walk. */

/* The windows of a D x H x W map (D = 1 for images): window (wd, wh, ww),
 * shift (sd, sh, sw). */
typedef struct ra_window_spec {
    int d, h, w;      /* map size (before padding) */
    int wd, wh, ww;   /* window size */
    int sd, sh, sw;   /* cyclic shift, 0 <= s < window */
} ra_window_spec;

/* The Swin clamp. A square window (Wh == Ww) follows the official block on
 * the two spatial axes together: if min(H, W) <= ws then ws = min(H, W) and
 * the shift is 0. A non-square window, and the frame axis, follow Video
 * Swin per axis: if size_a <= window_a then window_a = size_a, shift_a = 0. */
void ra_window_clamp(ra_window_spec *g);

/* Padded size: each axis rounded up to a multiple of its window (0s for an
 * invalid geometry). */
void ra_window_padded(const ra_window_spec *g, int *dp, int *hp, int *wp);

/* Windows per map after padding, and tokens per window; 0 for an invalid
 * geometry (these return no status and leave ra_last_error() alone). */
int64_t ra_window_count(const ra_window_spec *g);
int64_t ra_window_tokens(const ra_window_spec *g);

/* Partition with padding and cyclic shift in one pass:
 *   x (B, D, H, W, C) -> windows (B * nW, Wd*Wh*Ww, C)
 * The map is zero-padded at the end of each axis to a multiple of the
 * window, rolled by (-sd, -sh, -sw), then cut into windows ordered by batch,
 * then window depth, row, column; tokens row-major inside the window. */
ra_status ra_window_partition(float *windows, const float *x, int b, int c,
                              const ra_window_spec *g);

/* The inverse: windows (B * nW, Wd*Wh*Ww, C) -> x (B, D, H, W, C):
 * reverse, roll by (+sd, +sh, +sw), crop the padding. */
ra_status ra_window_reverse(float *x, const float *windows, int b, int c,
                            const ra_window_spec *g);

/* Backward of the two ops above (padding, shift and cut included); both
 * ACCUMULATE (+=): dx (B, D, H, W, C) += the gradient through partition
 * of dwindows (B * nW, N, C); dwindows += the gradient through reverse of
 * dx. (Each is the other op's walk: the ops are permutations plus zero
 * padding.) */
ra_status ra_window_partition_backward(float *dx, const float *dwindows, int b, int c,
                                       const ra_window_spec *g);
ra_status ra_window_reverse_backward(float *dwindows, const float *dx, int b, int c,
                                     const ra_window_spec *g);

/* The shifted-window attention mask (nW, N, N) over the padded map, with
 * 0.0 where two tokens come from the same region and -100.0 otherwise.
 * Regions per axis: [0, P-w), [P-w, P-s), [P-s, P) for padded size P
 * (a single region on an axis whose shift is 0). */
ra_status ra_window_mask(float *mask, const ra_window_spec *g);

/* The same mask as labels (nW, N): the region of each token of each
 * window (ra_window_mask's m[i, j] is 0 where labels i and j are equal,
 * -100 elsewhere), N floats' worth instead of N x N: what
 * ra_attn_desc.regions takes. */
ra_status ra_window_regions(int32_t *regions, const ra_window_spec *g);

/* ======================================================================== */
/* 5. The attention core: ra_attention_*                                     */
/* ======================================================================== */

/* One description serves every variant (docs/reference.md, section 1.1):
 * self- or cross-attention, optional bias (table + index), optional
 * additive mask, optional Shaw tables.
 *
 *   logits[b,h,i,j] = scale * q[b,h,i]·(k[b,h,j] + rel_k[rel[i,j]]
 *                                       (+ rel_k[rel2[i,j]] with a second index))
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
    /* optional additive mask (nW, N1, N2): window b takes mask[(w0 + b) % nW]
     * (w0 = 0 for a whole batch, whose B_ the layers require to be a multiple
     * of nW; w0 > 0 for a part of a batch that starts at its window w0) */
    const float *mask;
    int nw, w0;
    /* optional Shaw tables (R, hd), shared by heads, rel (N1, N2) in 0..R-1,
     * row i at rel + i * rel_ld (rel_ld 0 means N2). An index whose entries
     * depend on j - i alone takes N1 + N2 - 1 numbers g (g[j - i + N1 - 1]):
     * rel = g + N1 - 1, rel_ld = -1 */
    const float *rel_k;
    const float *rel_v;
    const int32_t *rel;
    int64_t rel_ld;
    int r;
    /* optional second index into rel_k, for the key term only (rel_v must
     * be NULL), rows as rel's: the logits also get scale * q·rel_k[rel2[i,j]].
     * Decomposed relative positions stack Rh and Rw in one table, rel picks
     * the row of Rh, rel2 that of Rw: R = (2H-1) + (2W-1) rows */
    const int32_t *rel2;
    /* the arithmetic of the core's two products (ra_precision, section 12):
     * RA_PRECISION_FP32 (0, the default) or RA_PRECISION_BF16: q, k, v and
     * the probabilities p rounded to bfloat16 (nearest even) as they enter
     * q·k^T and p·v, float32 sums (VDPBF16PS where the CPU has AVX512_BF16),
     * softmax, scale, bias, mask and the Shaw tables float32; forward only
     * (ra_attention_backward refuses it). The attention layers ask for it
     * in the inference of a model in precision bf16. */
    int precision;
    /* optional shifted-window mask as region labels (ra_window_regions):
     * (nW, N1 + N2), window w's N1 query labels then its N2 key labels;
     * the logit of a query and a key with different labels gets -100
     * added (ra_window_mask's value, after mask if both are given);
     * window b takes (w0 + b) % nW's labels, as mask; nw counts them.
     * Video Swin's masks are 0.6 MB a window as floats, read at every
     * head; the labels are 3 KB. */
    const int32_t *regions;
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

/* Backward of ra_attention_forward. Every gradient ACCUMULATES (+=):
 *   dq (B_, N1, lddq), dk (B_, N2, lddk), dv (B_, N2, lddv) at columns
 *     h*hd + d (they may share one buffer, e.g. the gradient of a fused qkv)
 *   dtable (T, nH) the bias table's gradient, scattered through idx; NULL
 *     to skip (no gradient flows into a mask)
 *   drel_k, drel_v (R, hd) the Shaw tables' gradients, or NULL
 *   dout (B_, N1, lddo) the gradient of out.
 * Nothing is saved by the forward: the probabilities are recomputed from q
 * and k, row by row (one more q·k^T; saving them instead would cost
 * B_*nH*N1*N2 floats per layer, 59 MB for one Swin-T stage-1 block at batch
 * 32). Per-thread accumulators for the shared gradients are reduced once. */
size_t ra_attention_backward_workspace_size(const ra_attn_desc *d, int nthreads);
ra_status ra_attention_backward(float *dq, int lddq, float *dk, int lddk,
                                float *dv, int lddv,
                                float *dtable, float *drel_k, float *drel_v,
                                const float *dout, int lddo,
                                const float *q, int ldq,
                                const float *k, int ldk,
                                const float *v, int ldv,
                                const ra_attn_desc *d,
                                void *work, size_t work_size);

/* ======================================================================== */
/* 6. Architectures: ra_arch                                                 */
/* ======================================================================== */

/* What a model file holds (its "arch" metadata, docs/reference.md,
 * section 2): an attention layer with its projections, or a network. The
 * values are part of the ABI: new archs are added at the end. */
typedef enum ra_arch {
    RA_ARCH_NONE = 0,
    RA_ARCH_VIT_ATTENTION,       /* timm's ViT Attention                 */
    RA_ARCH_WINDOW_ATTENTION,    /* the official Swin WindowAttention    */
    RA_ARCH_WINDOW_ATTENTION_3D, /* RSTT's WindowAttention3D             */
    RA_ARCH_SHAW_ATTENTION,      /* Shaw et al. 2018, relative keys/values */
    RA_ARCH_SWIN_BLOCK,          /* SwinTransformerBlock                 */
    RA_ARCH_SWIN,                /* SwinTransformer (classification)     */
    RA_ARCH_VIT,                 /* timm VisionTransformer               */
    RA_ARCH_SWIN_BLOCK_3D,       /* Video Swin / RSTT 3-D window block   */
    RA_ARCH_SWINV2_WINDOW_ATTENTION, /* SwinV2 WindowAttention (cosine, CPB) */
    RA_ARCH_SWINV2,              /* SwinTransformerV2 (classification)   */
    /* the later relative position schemes (docs/arch-relpos.md) */
    RA_ARCH_T5_ATTENTION,        /* Hugging Face T5Attention, buckets    */
    RA_ARCH_ALIBI_ATTENTION,     /* ALiBi (Press et al.)                 */
    RA_ARCH_DECOMPOSED_ATTENTION,/* MViTv2 / ViTDet / SAM decomposed     */
    RA_ARCH_ROPE_ATTENTION,      /* RoPE-Axial (Heo et al. 2024)         */
    RA_ARCH_SWIN3D               /* SwinTransformer3d (Video Swin, classification) */
} ra_arch;

/* Name as in the model file's "arch" metadata, or NULL. */
const char *ra_arch_name(ra_arch a);
ra_arch ra_arch_from_name(const char *name);

/* ======================================================================== */
/* 7. The attention layer: ra_attn_layer                                     */
/* ======================================================================== */

/* An attention module as PyTorch code writes it: the projections around
 * the attention core and its relative position scheme. The layer borrows
 * its parameters (ra_attn_params) and owns its index and scratch; a model
 * file of an attention arch holds one (ra_model_attn). */

/* Hyperparameters, named as the PyTorch constructor arguments. */
typedef struct ra_attn_config {
    ra_arch arch;
    int dim;               /* C */
    int num_heads;         /* nH; dim % num_heads == 0 */
    int window[2];         /* (Wh, Ww): window archs */
    int frames_q;          /* D1: window_attention_3d */
    int frames_kv;         /* D2: window_attention_3d */
    int max_rel;           /* k: shaw_attention */
    int shaw_window[2];    /* shaw_attention over the tokens of a (Wh, Ww)
                              window, row-major, when both are > 0: 2-D
                              relative positions, clipped per axis,
                              rel = (clip(dy)+k)*(2k+1) + clip(dx)+k with
                              dy = yk - yq, dx = xk - xq, in (2k+1)^2
                              buckets (tables ((2k+1)^2, hd)); N = Wh*Ww */
    int qkv_bias;          /* bias on qkv (or q and kv) */
    int has_qk_scale;      /* qk_scale given */
    float qk_scale;        /* scale = qk_scale if given (and non-zero, as
                              PyTorch's `qk_scale or hd**-0.5`), else hd^-0.5 */
    int has_rel_k, has_rel_v;  /* shaw: which tables exist; set by the layer
                                  from the params (a NULL table is absent) */
    int pretrained_window[2];  /* swinv2: the coordinates of the continuous
                                  position bias are normalised by this - 1
                                  when both are > 0, else by window - 1 */
    /* the relative position schemes (docs/arch-relpos.md) */
    int inner_dim;         /* t5: num_heads * d_kv, the width of q, k, v and
                              the input of o (0: dim); hd = inner / nH */
    int num_buckets;       /* t5: relative_attention_num_buckets (32) */
    int max_distance;      /* t5: relative_attention_max_distance (128) */
    int causal;            /* t5 is_decoder, alibi causal: keys after the
                              query masked (t5: one-sided buckets too) */
    int grid[2];           /* (H, W): decomposed input_size, rope grid_size */
    float rope_theta;      /* rope: frequency base (100) */
    int num_prefix;        /* rope: num_prefix_tokens, not rotated (1) */
} ra_attn_config;

/* Default configuration of an arch (qkv_bias false for ViT, true else;
 * the defaults of docs/arch-relpos.md for the schemes). */
ra_attn_config ra_attn_config_default(ra_arch arch);

/* Parameter tensors, borrowed (the layer never frees them). Shapes:
 *   qkv_w (3C, C), qkv_b (3C)       vit / window / shaw
 *   q_w (C, C), q_b (C), kv_w (2C, C), kv_b (2C)   window_attention_3d
 *   proj_w (C, C), proj_b (C)
 *   table (T, nH)                     window archs
 *   rel_k, rel_v (2k+1, hd)           shaw (either may be NULL)
 *   t5: q_w, k_w, v_w (E, C), proj_w (C, E) (o.weight), no biases,
 *       table (buckets, nH) (relative_attention_bias.weight, may be NULL);
 *       E = inner_dim
 *   decomposed: rel_h (2H-1, hd), rel_w (2W-1, hd) (rel_pos_h, rel_pos_w)
 * Biases are NULL when qkv_bias is false. */
typedef struct ra_attn_params {
    const float *qkv_w, *qkv_b;
    const float *q_w, *q_b, *kv_w, *kv_b;
    const float *proj_w, *proj_b;
    const float *table;
    const float *rel_k, *rel_v;
    /* swinv2_window_attention (no qkv_b, no table: qkv_w (3C, C) without
     * bias; the key has no bias):
     *   logit_scale (nH), cpb_w1 (512, 2), cpb_b1 (512), cpb_w2 (nH, 512),
     *   q_bias (C), v_bias (C) (both NULL when qkv_bias is false) */
    const float *logit_scale, *cpb_w1, *cpb_b1, *cpb_w2, *q_bias, *v_bias;
    const float *k_w, *v_w;
    const float *rel_h, *rel_w;
} ra_attn_params;

/* Gradients of the parameters of an attention layer, laid out as
 * ra_attn_params; each ACCUMULATES (+=). A NULL pointer skips that
 * gradient (its parameter is then treated as frozen). */
typedef struct ra_attn_grads {
    float *qkv_w, *qkv_b;
    float *q_w, *q_b, *kv_w, *kv_b;
    float *proj_w, *proj_b;
    float *table;
    float *rel_k, *rel_v;
    float *logit_scale, *cpb_w1, *cpb_b1, *cpb_w2, *q_bias, *v_bias;   /* swinv2 */
    float *k_w, *v_w;
    float *rel_h, *rel_w;
} ra_attn_grads;

/* ---- constructor and destructor ----------------------------------------- */

typedef struct ra_attn_layer ra_attn_layer;   /* opaque */

/* Validate a configuration and build a layer (computing its index). */
ra_status ra_attn_layer_create(ra_attn_layer **out, const ra_attn_config *cfg,
                               const ra_attn_params *params);
void ra_attn_layer_free(ra_attn_layer *l);

/* ---- methods: description ----------------------------------------------- */

const ra_attn_config *ra_attn_layer_config(const ra_attn_layer *l);

/* The bias index of a window layer, (N1, N2), and its table rows; NULL for
 * the other archs (Shaw's clip index depends on the sequence length and is
 * built per call). */
const int32_t *ra_attn_layer_index(const ra_attn_layer *l, int64_t *n1,
                                   int64_t *n2, int64_t *table_rows);

/* Token counts the layer accepts: window archs fix N1 (and N2); rope N =
 * num_prefix + H*W of its grid_size, decomposed N = H*W of input_size (or
 * of the call's grid, ra_attn_layer_forward_grid); others take
 * any n >= 1 (N1 == N2), shaw_attention at most RA_MAX_SHAW_TOKENS (its
 * (N, N) clip index, 4 N^2 bytes, is built per call). Returns RA_ERR_SHAPE
 * with a reason if not. */
#define RA_MAX_SHAW_TOKENS 16384
ra_status ra_attn_layer_check_tokens(const ra_attn_layer *l, int n1, int n2);

/* ---- methods: forward and backward -------------------------------------- */

/* Forward pass.
 *   y    (B_, N1, C)           output
 *   attn (B_, nH, N1, N2)      probabilities, or NULL
 *   x    (B_, N1, C)           input (queries, and keys/values if kv NULL)
 *   kv   (B_, N2, C)           window_attention_3d only: key/value input,
 *                              or NULL for self-attention (N2 = N1... then
 *                              D2 must equal D1's frame count rule)
 *   mask (nW, N1, N2)          or NULL; B_ % nW == 0
 * Allocates its scratch (RA_ERR_NOMEM if it cannot) and keeps it for the
 * next call: the layer holds the scratch of its largest call, one block per
 * call running at once (up to 8; more get scratch of their own), until
 * ra_attn_layer_free. Calls on one layer from several threads are safe. */
ra_status ra_attn_layer_forward(const ra_attn_layer *l,
                                float *y, float *attn,
                                const float *x, const float *kv,
                                int b_, int n1, int n2,
                                const float *mask, int nw);

/* Backward pass of ra_attn_layer_forward, for the same inputs.
 *   dx   (B_, N1, C)   gradient of x, ACCUMULATED (+=); for
 *                      window_attention_3d with kv == NULL it also receives
 *                      the key/value path (x feeds both)
 *   dkv  (B_, N2, C)   gradient of kv (3-D with kv given), ACCUMULATED; or NULL
 *   g                  parameter gradients, ACCUMULATED
 *   y    (B_, N1, C)   the forward output, written again (or NULL)
 *   dy   (B_, N1, C)   gradient of y
 * The projections are recomputed (nothing is kept from the forward), so a
 * training step costs one forward and this call. */
ra_status ra_attn_layer_backward(const ra_attn_layer *l,
                                 float *dx, float *dkv, const ra_attn_grads *g,
                                 float *y, const float *dy,
                                 const float *x, const float *kv,
                                 int b_, int n1, int n2,
                                 const float *mask, int nw);

/* The two calls above on a token grid: grid (H, W) is the map of the
 * call's tokens, N1 = N2 = H * W, row-major. decomposed_attention resamples
 * its tables to a grid other than input_size (as SAM's get_rel_pos; the
 * gradient goes back through the resampling). grid NULL (what the calls
 * above pass) means the layer's own: input_size for decomposed_attention,
 * which then needs N = H*W of it; the other archs ignore a grid. */
ra_status ra_attn_layer_forward_grid(const ra_attn_layer *l, float *y, float *attn,
                                   const float *x, const float *kv, int b_, int n1, int n2,
                                   const float *mask, int nw, const int grid[2]);
ra_status ra_attn_layer_backward_grid(const ra_attn_layer *l, float *dx, float *dkv,
                                    const ra_attn_grads *g, float *y, const float *dy,
                                    const float *x, const float *kv, int b_, int n1, int n2,
                                    const float *mask, int nw, const int grid[2]);

/* ---- training: the tape (ra_attn_tape) ---------------------------------- */

/* A forward that keeps what its backward needs, so that the
 * backward recomputes nothing (ra_attn_layer_backward recomputes the
 * projections and the attention output from x: less memory, more time).
 * ra_attn_layer_forward_train runs ra_attn_layer_forward and records on
 * *tape the projections, the attention output and the call's arguments;
 * *tape NULL: a tape is allocated, otherwise the given one is reused (grown
 * when needed), so a training loop allocates it once. x, kv and mask are
 * kept by address: they must stay unchanged until the backward. The layer
 * uses its own token grid (decomposed_attention: input_size).
 * ra_attn_layer_backward_tape accumulates the gradients of that forward as
 * ra_attn_layer_backward does (dx, dkv and g +=); a tape may be read any
 * number of times. The tape belongs to the caller: ra_attn_tape_free. */
typedef struct ra_attn_tape ra_attn_tape;   /* opaque */
ra_status ra_attn_layer_forward_train(const ra_attn_layer *l, ra_attn_tape **tape,
                                      float *y, float *attn, const float *x,
                                      const float *kv, int b_, int n1, int n2,
                                      const float *mask, int nw);
ra_status ra_attn_layer_backward_tape(const ra_attn_layer *l, const ra_attn_tape *tape,
                                      float *dx, float *dkv, const ra_attn_grads *g,
                                      const float *dy);
void ra_attn_tape_free(ra_attn_tape *tape);

/* ======================================================================== */
/* 8. Random numbers: ra_rng                                                 */
/* ======================================================================== */

/* The seeded generator: xoshiro256** (Blackman and Vigna), its 256-bit
 * state filled from a 64-bit seed by splitmix64. Every random number of
 * relattn comes from one of these, so the same seed gives the same weights
 * and the same training run. It cannot reproduce PyTorch's
 * stream (PyTorch uses mt19937/Philox); tests check distributions instead.
 * A plain struct, so it can live on the stack or be copied to fork a
 * stream. Not thread-safe: one generator per thread. */
typedef struct ra_rng { uint64_t s[4]; } ra_rng;

void ra_rng_seed(ra_rng *rng, uint64_t seed);
uint64_t ra_rng_u64(ra_rng *rng);        /* 64 random bits */
double ra_rng_uniform(ra_rng *rng);      /* [0, 1), 53 bits */
/* Uniform in [0, range) without bias: ra_rng_u64() % range, drawn again
 * while the 64 bits are below 2^64 mod range (0 for range <= 1, nothing
 * drawn). */
uint64_t ra_rng_below(ra_rng *rng, uint64_t range);
double ra_rng_normal(ra_rng *rng);       /* N(0, 1), Box-Muller, 2 draws */

/* out (n) uniform in [lo, hi) / normal N(mean, std^2). */
void ra_rng_fill_uniform(ra_rng *rng, float *out, int64_t n, float lo, float hi);
void ra_rng_fill_normal(ra_rng *rng, float *out, int64_t n, float mean,
                        float std);

/* out (n) from N(mean, std^2) truncated to [a, b], by inverting the normal
 * CDF on [Phi((a - mean) / std), Phi((b - mean) / std)] as
 * torch.nn.init.trunc_normal_ and timm's trunc_normal_ do. a and b are
 * ABSOLUTE bounds, not multiples of std: timm's trunc_normal_(t, std=.02),
 * which Swin and ViT use for tables and Linear weights, has the defaults
 * a = -2, b = 2, i.e. 100 std, so it is in effect an untruncated N(0, .02^2)
 * (and so is RA_INIT_STD with -2, 2 here). RA_ERR_ARG if std < 0 or not
 * a < b. */
#define RA_INIT_STD 0.02f
ra_status ra_rng_fill_trunc_normal(ra_rng *rng, float *out, int64_t n,
                                   float mean, float std, float a, float b);

/* ======================================================================== */
/* 9. The layers of the networks: ra_linear_*, ra_layernorm_*, ...           */
/* ======================================================================== */

/* The layers of Swin and ViT around attention and their gradients (with the
 * generator of section 8 and the optimiser of section 10), all checked
 * against PyTorch float32 (tools/make_nn_fixtures.py, tests/test_nn.c).
 *
 * Each layer is a pair X_forward(out, saved..., in..., dims) /
 * X_backward(dinp..., dout, saved/in..., dims). Every backward call
 * ACCUMULATES (+=) into its gradient outputs, so that a tensor used twice
 * (a residual branch, a shared table) collects both contributions: zero the
 * gradients before the first call. These calls never allocate: what the
 * backward pass needs from the forward pass (row statistics, dropout masks,
 * gathered patches) lives in buffers the caller passes and keeps. Calls
 * that can meet bad sizes or values return an ra_status; the void ones do
 * nothing for empty sizes. Sums over rows or tokens are accumulated in
 * double. Unless said otherwise an output may not alias an input.
 *
 * The residual connection is ra_add (or a plain loop), its backward is the
 * identity: add dy into the gradients of both branches. The Swin patch
 * merging layer is ra_patch_merge_forward, then ra_layernorm_forward over
 * 4C, then ra_linear_forward (4C -> 2C) without a bias. */

/* y (M, N) = x (M, K) @ w (N, K)^T + b (N) (b may be NULL), like
 * torch.nn.Linear, on BLAS. */
void ra_linear_forward(float *y, const float *x, const float *w,
                       const float *b, int64_t m, int n, int k);

/* Gradients of ra_linear_forward, ACCUMULATED:
 *   dx (M, K) += dy (M, N) @ w (N, K)
 *   dw (N, K) += dy (M, N)^T @ x (M, K)
 *   db (N)    += sum over rows of dy
 * Any of dx, dw, db may be NULL (not wanted); x is needed only for dw,
 * w only for dx. */
void ra_linear_backward(float *dx, float *dw, float *db, const float *dy,
                        const float *x, const float *w,
                        int64_t m, int n, int k);

/* torch.nn.LayerNorm(C, eps) over the last axis of x (M, C):
 *   y = (x - mean) * rstd * gamma + beta,  rstd = 1 / sqrt(var + eps)
 * with the biased variance. Saves mean (M) and rstd (M) for the backward
 * pass. gamma, beta (C) may be NULL (1 and 0). eps: 1e-5 in Swin
 * (nn.LayerNorm's default), 1e-6 in timm's ViT. y may alias x. */
void ra_layernorm_forward(float *y, float *mean, float *rstd,
                          const float *x, const float *gamma,
                          const float *beta, int64_t m, int c, float eps);

/* Gradients of ra_layernorm_forward, ACCUMULATED, from the saved mean and
 * rstd (M) and the input x (M, C):
 *   dx (M, C) += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)),
 *                g = dy * gamma, xhat = (x - mean) * rstd
 *   dgamma (C) += sum_rows dy * xhat,  dbeta (C) += sum_rows dy
 * dx, dgamma, dbeta may be NULL; gamma NULL means 1. */
void ra_layernorm_backward(float *dx, float *dgamma, float *dbeta,
                           const float *dy, const float *x,
                           const float *mean, const float *rstd,
                           const float *gamma, int64_t m, int c);

/* GELU, the exact erf form (torch.nn.GELU() default, approximate='none'):
 *   y = x * 0.5 * (1 + erf(x / sqrt 2)),  y (n), x (n); y may alias x.
 * Backward, ACCUMULATED: dx (n) += dy * (Phi(x) + x * phi(x)), from x (n);
 * dx may alias dy. */
void ra_gelu_forward(float *y, const float *x, int64_t n);
void ra_gelu_backward(float *dx, const float *dy, const float *x, int64_t n);

/* y (n) = a (n) + b (n), the residual connection; y may alias a or b. */
void ra_add(float *y, const float *a, const float *b, int64_t n);

/* Mean over the tokens (Swin's avgpool, timm's global_pool='avg'):
 *   y (B, C) = mean_n x (B, N, C).
 * Backward, ACCUMULATED: dx (B, N, C) += dy (B, C) / N. */
void ra_mean_tokens_forward(float *y, const float *x, int b, int64_t n, int c);
void ra_mean_tokens_backward(float *dx, const float *dy, int b, int64_t n,
                             int c);

/* Softmax cross-entropy, torch.nn.CrossEntropyLoss(label_smoothing=eps)
 * with the mean over the batch, for logits (B, K) and targets (B) in
 * [0, K):
 *   loss = mean_b [ (1 - eps) * -logp[b, t_b] + eps / K * sum_k -logp[b, k] ]
 * Writes *loss and saves probs (B, K) = softmax(logits) for the backward
 * pass. No ignore_index: every target must be a class; a target outside
 * [0, K), eps outside [0, 1], B < 1 or K < 1 give RA_ERR_ARG (nothing
 * written). */
ra_status ra_cross_entropy_forward(float *loss, float *probs,
                                   const float *logits, const int32_t *targets,
                                   int b, int k, float smoothing);

/* Gradient of ra_cross_entropy_forward for a given dloss, ACCUMULATED:
 *   dlogits (B, K) += dloss / B * (probs - (1 - eps) * onehot(t) - eps / K)
 * from the saved probs (B, K). Same checks as the forward call. */
ra_status ra_cross_entropy_backward(float *dlogits, float dloss,
                                    const float *probs, const int32_t *targets,
                                    int b, int k, float smoothing);

/* Softmax cross-entropy against soft targets (timm's
 * SoftTargetCrossEntropy, the loss of Mixup / CutMix), for logits (B, K)
 * and targets (B, K):
 *   loss = mean_b sum_k -targets[b, k] * log_softmax(logits[b])[k]
 * Writes *loss and saves probs (B, K) = softmax(logits) for the backward
 * pass. A targets row need not sum to 1 (ra_mixup_apply's do). RA_ERR_ARG
 * (nothing written) for B < 1, K < 1, a NULL argument, a target negative
 * or not finite. */
ra_status ra_cross_entropy_soft_forward(float *loss, float *probs, const float *logits,
                                        const float *targets, int b, int k);

/* Gradient of ra_cross_entropy_soft_forward for a given dloss, ACCUMULATED:
 *   dlogits (B, K) += dloss / B * (probs * sum_k targets[b, k] - targets)
 * from the saved probs (B, K). Same checks as the forward call. With the
 * targets of label smoothing (1 - eps + eps / K on, eps / K off) both equal
 * ra_cross_entropy_forward / _backward. */
ra_status ra_cross_entropy_soft_backward(float *dlogits, float dloss, const float *probs,
                                         const float *targets, int b, int k);

/* Dropout (torch.nn.Dropout in training mode, inverted scaling): each
 * element is kept with probability 1 - p and scaled by 1 / (1 - p):
 *   y (n) = x (n) * keep (n) / (1 - p),  keep[i] in {0, 1} saved.
 * p == 0 copies x (and sets keep to 1) without drawing numbers; p == 1
 * zeroes y. y may alias x. RA_ERR_ARG if p is outside [0, 1].
 * Backward, ACCUMULATED: dx (n) += dy (n) * keep / (1 - p) (0 for p == 1).
 * Callers skip both in evaluation mode. */
ra_status ra_dropout_forward(float *y, uint8_t *keep, const float *x,
                             int64_t n, float p, ra_rng *rng);
void ra_dropout_backward(float *dx, const float *dy, const uint8_t *keep,
                         int64_t n, float p);

/* DropPath / stochastic depth, timm's drop_path(scale_by_keep=True): one
 * draw per sample, the whole sample kept or dropped:
 *   y (B, n) = x (B, n) * keep (B) / (1 - p)
 * with n the elements per sample (N*C for tokens). Same conventions and
 * checks as dropout. Backward, ACCUMULATED: dx (B, n) += dy * keep / (1-p). */
ra_status ra_droppath_forward(float *y, uint8_t *keep, const float *x, int b,
                              int64_t n, float p, ra_rng *rng);
void ra_droppath_backward(float *dx, const float *dy, const uint8_t *keep,
                          int b, int64_t n, float p);

/* The patch grid of an H x W image cut into P x P patches: gh = H / P,
 * gw = W / P when both divide. If they do not: with pad != 0 the image is
 * zero-padded at the bottom/right to a multiple of P, as the PatchEmbed of
 * the Swin detection/video backbones does (gh = ceil(H / P)); with pad == 0
 * (the classification models, which assert the size) it is RA_ERR_SHAPE.
 * RA_ERR_ARG for sizes < 1 or a grid too large. */
ra_status ra_patch_grid(int *gh, int *gw, int h, int w, int p, int pad);

/* Patch embedding, Conv2d(Cin, E, kernel_size=P, stride=P) followed by
 * flatten(2).transpose(1, 2), as Swin's and ViT's PatchEmbed:
 *   x (B, Cin, H, W) -> y (B, L, E), L = gh * gw tokens row-major,
 *   weight (E, Cin, P, P), bias (E) or NULL.
 * It gathers the patches into cols (B, L, Cin*P*P), column c*P*P + ky*P +
 * kx (zeros in the padding), then runs ra_linear_forward with the weight
 * seen as (E, Cin*P*P). Keep cols for the backward pass. Sizes and pad as
 * ra_patch_grid, whose status is returned. */
ra_status ra_patch_embed_forward(float *y, float *cols, const float *x,
                                 const float *weight, const float *bias,
                                 int b, int cin, int h, int w, int p, int e,
                                 int pad);

/* Gradients of ra_patch_embed_forward, ACCUMULATED: dweight (E, Cin, P, P)
 * and dbias (E) from dy (B, L, E) and the saved cols, then dx (B, Cin, H, W)
 * (the padding's gradient is dropped) through work (B, L, Cin*P*P), which
 * may be the cols buffer itself (it is overwritten only after dweight is
 * done). dx, dweight, dbias may be NULL; work is needed only for dx. */
ra_status ra_patch_embed_backward(float *dx, float *dweight, float *dbias,
                                  float *work, const float *dy,
                                  const float *cols, const float *weight,
                                  int b, int cin, int h, int w, int p, int e,
                                  int pad);

/* Swin's PatchMerging gather: x (B, H, W, C) -> y (B, H2 * W2, 4C),
 * H2 = ceil(H / 2), W2 = ceil(W / 2), odd sizes zero-padded at the
 * bottom/right (as the detection backbone; the classification model needs
 * even sizes). Channels of token (i, j), in the official order:
 *   [x(2i, 2j), x(2i+1, 2j), x(2i, 2j+1), x(2i+1, 2j+1)]
 * (x0 = x[0::2, 0::2], x1 = x[1::2, 0::2], x2 = x[0::2, 1::2],
 * x3 = x[1::2, 1::2]). RA_ERR_ARG for sizes < 1.
 * Backward, ACCUMULATED: dx (B, H, W, C) += the scatter of dy. */
ra_status ra_patch_merge_forward(float *y, const float *x, int b, int h, int w,
                                 int c);
ra_status ra_patch_merge_backward(float *dx, const float *dy, int b, int h,
                                  int w, int c);

/* ======================================================================== */
/* 10. Optimisation: ra_adamw_step, ra_clip_grad_norm, ra_lr_cosine          */
/* ======================================================================== */

/* AdamW, exactly torch.optim.AdamW (amsgrad off, maximize off) on one
 * parameter tensor; call it for every tensor with the same step:
 *   p *= 1 - lr * wd                              (decoupled weight decay)
 *   m = beta1 * m + (1 - beta1) * g
 *   v = beta2 * v + (1 - beta2) * g * g
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * in float32 with the scalar factors computed in double, as PyTorch does.
 * param, m, v, grad (n); m and v start at 0; step t >= 1 counts the
 * optimiser steps taken including this one. decay == 0 skips the weight
 * decay (the parameter groups of Swin's set_weight_decay, see
 * ra_param_no_decay). RA_ERR_ARG for t < 1 or n < 0. torch's defaults are
 * lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2; Swin trains
 * with weight_decay 0.05. */
typedef struct ra_adamw_config {
    double lr, beta1, beta2, eps, weight_decay;
} ra_adamw_config;

ra_status ra_adamw_step(float *param, float *m, float *v, const float *grad,
                        int64_t n, int64_t step, const ra_adamw_config *cfg,
                        int decay);

/* 1 if the parameter of this PyTorch state_dict name takes no weight decay
 * (Swin's convention): names ending in ".bias" or containing "norm",
 * "relative_position_bias_table", "absolute_pos_embed", "cls_token",
 * "pos_embed", "relative_keys", "relative_values", or SwinV2's "cpb_mlp" and
 * "logit_scale"; 0 otherwise (and for NULL). Swin also exempts every 1-D
 * tensor; in Swin and ViT those are all biases and norm weights, which the
 * names already cover (SwinV2's q_bias and v_bias are 1-D). */
int ra_param_no_decay(const char *name);

/* torch.nn.utils.clip_grad_norm_(params, max_norm) with the 2-norm over
 * several tensors: total = || (||g_0||, ||g_1||, ...) ||, then every
 * g_i (sizes[i]) is multiplied by min(1, max_norm / (total + 1e-6)).
 * Returns the total norm before clipping. As in PyTorch, a non-finite
 * total makes the factor 0 (inf) or NaN (NaN): check the returned norm
 * before stepping. NULL entries are skipped. */
float ra_clip_grad_norm(float *const *grads, const int64_t *sizes, int count,
                        float max_norm);

/* The learning rate of optimiser step t (0-based: the step about to be
 * taken) under timm's CosineLRScheduler(t_initial, lr_min=min_lr,
 * warmup_t=warmup, warmup_lr_init=warmup_lr, cycle_limit=1,
 * t_in_epochs=False), as Swin's build_scheduler sets it per step:
 *   t < warmup:  warmup_lr + t * (base_lr - warmup_lr) / warmup
 *   otherwise:   u = t - warmup and T = total - warmup if warmup_prefix
 *                (Swin's WARMUP_PREFIX, the default of its config),
 *                u = t and T = total if not (timm's default);
 *                u < T:  min_lr + 0.5 * (base_lr - min_lr) * (1 + cos(pi * u / T))
 *                u >= T: min_lr  (and min_lr if T < 1)
 * all in double. */
double ra_lr_cosine(int64_t t, int64_t total, int64_t warmup, double base_lr,
                    double min_lr, double warmup_lr, int warmup_prefix);

/* ======================================================================== */
/* 11. safetensors files: ra_st_file (reader), ra_st_writer                  */
/* ======================================================================== */

/* Weights, inputs and outputs are safetensors files (docs/reference.md,
 * section 2): an 8-byte little-endian header length, a JSON header, raw
 * little-endian row-major data. Every file is untrusted: the reader
 * validates all of it before anything is read through it. */

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

/* ---- ra_st_file: constructors and destructor ---------------------------- */

typedef struct ra_st_file ra_st_file;   /* opaque: a validated, mapped file */

/* Open, map and validate a file completely: header length
 * bound (100 MB), JSON header parsed strictly, every tensor with a known
 * dtype, shape entries >= 0, offsets [begin, end] inside the data, byte
 * count = dtype size x element count (overflow-checked), tensors sorted by
 * offset with no overlap and no gap covering the whole data section, no
 * duplicate names, __metadata__ a string -> string object. The file stays
 * open until ra_st_close, for ra_st_read_f32 / ra_st_read_i64.
 * RA_ERR_IO if the file cannot be opened/read, RA_ERR_FORMAT otherwise. */
ra_status ra_st_open(ra_st_file **out, const char *path);
/* The same for a buffer in memory (copied). */
ra_status ra_st_open_memory(ra_st_file **out, const void *buf, size_t len);
void ra_st_close(ra_st_file *f);

/* ---- ra_st_file: methods ------------------------------------------------ */

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

/* The same two for a tensor of f, read from the file (pread) instead of
 * through the mapping: the bytes travel once, straight into dst when they
 * are its values already (F32, I64 on a little-endian host), and a file
 * that shrinks after ra_st_open is an error (RA_ERR_FORMAT), never a
 * SIGBUS. The model loader reads every tensor this way. For a file opened
 * from memory they are ra_st_to_f32 / ra_st_to_i64. RA_ERR_ARG if t is not
 * one of f's tensors. */
ra_status ra_st_read_f32(float *dst, const ra_st_file *f, const ra_st_tensor *t);
ra_status ra_st_read_i64(int64_t *dst, const ra_st_file *f, const ra_st_tensor *t);

/* ---- ra_st_writer: constructor, destructor, methods --------------------- */

/* A writer: collect tensors (the data is copied) and metadata, then write
 * atomically (PATH.tmp.XXXXXX in the same directory, fsync, rename). On
 * failure nothing exists at path. Tensors are written sorted by name.
 *
 * What every output of the library (safetensors, PNG) may replace: a
 * regular file the caller may write (mode with a write bit), or nothing.
 * RA_ERR_WRITE, and nothing touched, for a symbolic link to anything but a
 * FIFO or terminal, a read-only file, a directory, a block device, a
 * socket, or a character device other than /dev/null, /dev/zero,
 * /dev/full or a terminal. Those character devices and FIFOs are written
 * through (a FIFO must have a reader): what a user asks for with
 * `-o /dev/null`, and where no partial file can be left anyway. The path
 * "-" is standard output (file descriptor 1), written as it comes, and
 * refused (RA_ERR_WRITE) when it is a terminal. */
typedef struct ra_st_writer ra_st_writer;
ra_st_writer *ra_st_writer_new(void);          /* NULL if out of memory */
void ra_st_writer_free(ra_st_writer *w);
ra_status ra_st_writer_add(ra_st_writer *w, const char *name, ra_dtype dtype,
                           int ndim, const int64_t *shape, const void *data);
/* The same without the copy: data must stay unchanged until the writer is
 * saved or freed (an output as large as the memory is not held twice). */
ra_status ra_st_writer_add_ref(ra_st_writer *w, const char *name, ra_dtype dtype,
                               int ndim, const int64_t *shape, const void *data);
ra_status ra_st_writer_meta(ra_st_writer *w, const char *key,
                            const char *value);
/* Add F32 values written as dtype (F32, F16 or BF16, rounded to nearest
 * even; F16 overflows to infinity as PyTorch's .half()). Copied. */
ra_status ra_st_writer_add_f32_as(ra_st_writer *w, const char *name, ra_dtype dtype, int ndim,
                                  const int64_t *shape, const float *data);
ra_status ra_st_writer_save(ra_st_writer *w, const char *path);

/* ======================================================================== */
/* 12. Models: ra_model                                                      */
/* ======================================================================== */

/* A model is what a model file describes (docs/reference.md, section 2):
 * an attention layer or a network, its configuration from the file's
 * __metadata__ and its weights in one flat F32 buffer. A loaded model is
 * only read by inference calls, which may run on it from several threads;
 * training calls (ra_model_forward_train, ra_model_backward) keep state
 * in it and take it non-const. */
typedef struct ra_model ra_model;   /* opaque */

/* ---- constructors and destructor ---------------------------------------- */

/* Read a model file: __metadata__ "arch" and hyperparameters
 * (docs/reference.md, section 2), every tensor checked against the
 * configuration (names, shapes, float dtype; relative_position_index if
 * present must equal the computed index; no unexpected tensors; int8 only
 * for a Linear weight with its scales, scales only beside int8; a swin,
 * swinv2 or vit's "labels" a JSON array of one name, or null, per class of
 * the head: RA_ERR_FORMAT otherwise). Weights are converted to F32. ra_model_from_file does the same from a file
 * already open; the model keeps nothing of f, which may be closed at once.
 * ra_model_load(out, path) is ra_model_open(out, path, NULL). */
ra_status ra_model_load(ra_model **out, const char *path);
ra_status ra_model_from_file(ra_model **out, const ra_st_file *f);

/* The arithmetic of a network's products (docs/reference.md, section 6):
 * float32 (the default, PyTorch's numbers), bfloat16 (weights and each
 * product's input rounded to bfloat16, float32 sums) or int8 (weights per
 * output channel, symmetric; inputs per row, 7 bits with a zero point;
 * exact integer sums, then the scales). */
typedef enum ra_precision {
    RA_PRECISION_FP32 = 0, RA_PRECISION_BF16, RA_PRECISION_INT8
} ra_precision;
/* "fp32", "bf16", "int8" (NULL for another value); parse: -1 if unknown. */
const char *ra_precision_name(ra_precision p);
int ra_precision_parse(const char *s);
/* 1 if this CPU, with the kernel set chosen now (ra_kernel_select), runs
 * p's products on instructions of their own: fp32 always; bf16 on
 * VDPBF16PS (AVX512_BF16, the AVX-512 set); int8 on VPDPBUSD (AVX512-VNNI,
 * the AVX-512 set). 0 where p falls back to the portable path (slower than
 * fp32 for bf16), and for an unknown p. `relattn train`'s default
 * precision is bf16 where this says 1 for it, else fp32. */
int ra_precision_native(ra_precision p);

/* How ra_model_open reads what it is given. Zero it, then set what you need. */
typedef struct ra_load_options {
    const char *key;          /* the state dict inside a PyTorch checkpoint: a path of
                                 dict keys ("model", "state_dict/ema"); NULL: found */
    const char *const *set;   /* nset "KEY=VALUE": metadata set over what the file
                                 has or what is inferred (--set) */
    int nset;
    ra_precision precision;   /* as ra_model_set_precision after loading */
    int reserved[7];          /* zero */
} ra_load_options;

/* Open any model path (docs/reference.md, section 2): a relattn model file,
 * a plain safetensors state_dict without metadata, a PyTorch checkpoint
 * (.pth, .bin, .pth.tar: torch.save's zip, read without executing
 * anything; the state dict found under "model", "state_dict", ... or at
 * o->key), or a timm / transformers model folder (config.json with
 * model.safetensors or pytorch_model.bin). Without relattn metadata the
 * arch and hyperparameters are read off the names and shapes, then
 * config.json, then the family's conventions; what stays unknown is
 * refused naming the KEY=VALUE to set. o may be NULL. */
ra_status ra_model_open(ra_model **out, const char *path, const ra_load_options *o);
/* The tensor file ra_model_open loads for path: the tensors under the
 * names the loader reads and the metadata, inferred values included, each
 * with its source under "relattn.source.KEY" (RA_META_SOURCE). Close with ra_st_close.
 * Tensors made of several pieces (transformers' q, k and v joined) have
 * data NULL: read them with ra_st_read_f32. */
ra_status ra_model_source(ra_st_file **out, const char *path, const ra_load_options *o);
#define RA_META_SOURCE "relattn.source."
void ra_model_free(ra_model *m);

/* Compute m's products in precision p from now on. bf16 keeps the float32
 * weights as they are and rounds them, as it rounds the inputs, where they
 * enter a product (packed once for inference where the CPU has
 * AVX512_BF16); it trains (ra_model_forward_train, ra_model_backward: the
 * products of the forward, dX and dW in bf16, float32 sums; the float32
 * weights stay the master copy that the optimiser updates; the first
 * training forward drops the packed copy, and products pack at each call
 * from then on). Weights changed by other means after this call are not
 * seen by an inference forward in bf16 or int8 (it reads the packed
 * copy). int8
 * quantises the Linear weights in place, once, and packs them for the
 * integer product (about a quarter more memory); inference only
 * (ra_model_forward_train refuses it). Networks only
 * (swin, swinv2, vit, swin_block, swin_block_3d, swin3d); RA_ERR_ARG for an
 * attention layer, or to go back to fp32 or on to another precision. */
ra_status ra_model_set_precision(ra_model *m, ra_precision p);
ra_precision ra_model_precision(const ra_model *m);

/* Write m as a relattn model file at path (atomically, as ra_st_writer):
 * its parameters under the names it was loaded by, its metadata (without
 * the loader's relattn.source.* keys), the parameters as dtype: F32, F16 or
 * BF16 (nearest even), or I8: the Linear weights (those a precision
 * rounds) as symmetric int8 per output channel, their scales (F32, one per
 * row) under RA_SCALE_PREFIX NAME, the other parameters F32 (a quarter of
 * the bytes). The loader reads an I8 weight with its scales back as q x
 * scale: what ra_model_set_precision(RA_PRECISION_INT8) holds. */
#define RA_SCALE_PREFIX "__scale__."
ra_status ra_model_save(const ra_model *m, const char *path, ra_dtype dtype);

/* A model made from hyperparameters alone: meta holds nmeta key/value pairs
 * (key, value, key, value, ...) as a model file's __metadata__
 * (docs/reference.md, section 2; "arch" included), and the weights are
 * initialised from seed (ra_rng) as the PyTorch constructors do: Linear
 * weights, bias tables, Shaw
 * tables and position embeddings truncated normal std 0.02 (timm's
 * trunc_normal_), Linear biases 0, LayerNorm weight 1 and bias 0, the patch
 * embedding's Conv2d PyTorch's default (uniform +-1/sqrt(fan_in), weight
 * and bias). Validated as a loaded file's metadata is. */
ra_status ra_model_create(ra_model **out, const char *const *meta, int nmeta, uint64_t seed);

/* A model of m's arch and naming with m's metadata, the nset pairs of set
 * (key, value, ...) in place of m's values for their keys (or added), and
 * m's parameters wherever the new model has them at the same shape: to
 * fine-tune m on other classes (set "num_classes" and "labels"), the head
 * then initialised from seed as ra_model_create does (timm's: truncated
 * normal, std 0.02; bias 0), or at another input size or window
 * ("img_size", "window_size"): a relative position bias table of another
 * square window resampled as the Swin authors do and position embeddings
 * (1, prefix + g x g, C) of another square grid as timm's
 * resample_abs_pos_embed (the class and register tokens kept), both
 * bicubic with align_corners False (ra_bias_table_resize; no antialiasing
 * when a grid shrinks, which timm's applies; RA_DERIVE_TABLE_RESIZE
 * "timm" resizes the tables as timm does). A SwinV2 in the official names
 * at another window or size records the windows m's stages had as
 * pretrained_window_sizes (unless m or set has them). RA_ERR_ARG for any
 * other parameter whose shape the settings change. m is not changed. */
ra_status ra_model_derive(ra_model **out, const ra_model *m, const char *const *set, int nset,
                          uint64_t seed);

/* A model of a released size made from its builder's name, initialised
 * from seed as ra_model_create does: torchvision's swin_t, swin_s, swin_b,
 * swin_v2_t, swin_v2_s, swin_v2_b, vit_b_16, vit_b_32, vit_l_16, vit_l_32,
 * vit_h_14, and timm's vit_tiny_patch16_224 / vit_small_patch16_224 as
 * vit_ti_16 / vit_s_16 (ra_model_preset_name(i) for i = 0, 1, ... lists
 * them, NULL past the last): 1000 classes, RGB, the builder's input size
 * and its weights' evaluation transform as transform.* metadata. The nset
 * pairs of set (num_classes, labels, img_size, drop_path_rate, ...) take
 * the place of the preset's values; a square img_size scales the
 * transform with it. RA_ERR_ARG for an unknown name. */
/* The key of a derive setting that is not metadata: how ra_model_derive
 * resizes bias tables, "swin" (ra_bias_table_resize, the default) or
 * "timm" (ra_bias_table_resize_timm). */
#define RA_DERIVE_TABLE_RESIZE "relattn.table_resize"

ra_status ra_model_create_preset(ra_model **out, const char *name, const char *const *set,
                                 int nset, uint64_t seed);
const char *ra_model_preset_name(int i);

/* A Video Swin network (arch swin3d) inflated from a 2-D Swin m (arch
 * swin, without an absolute position embedding), as the official Video
 * Swin's inflate_weights does: the patch embedding's Conv2d weight (E, C,
 * P, P) repeated over pt frames and divided by pt (patch (pt, P, P)); each
 * block's bias table resized bicubically to the window (wh, ww) when its
 * window differs (ra_bias_table_resize, as `relattn resize`), then
 * repeated 2 wd - 1 times (one copy per frame offset); every other
 * parameter as it is (the head included), the names torchvision's. wh or
 * ww 0: m's window. RA_ERR_ARG for another arch, a SwinV2, an absolute
 * position embedding, or sizes out of range; m is not changed. */
ra_status ra_model_inflate_swin3d(ra_model **out, const ra_model *m, int pt, int wd, int wh,
                                  int ww);

/* ---- the architectures the loader knows --------------------------------- */

/* The architectures the model loader knows, as the "arch" values of model
 * files: ra_model_arch_name(i) for 0 <= i < ra_model_arch_count(), NULL
 * outside. */
int ra_model_arch_count(void);
const char *ra_model_arch_name(int i);

/* ---- methods: description ----------------------------------------------- */

ra_arch ra_model_arch(const ra_model *m);
/* The attention layer of an attention-arch model; NULL for networks. */
const ra_attn_layer *ra_model_attn(const ra_model *m);
/* The model file's __metadata__ (hyperparameters, "labels", ...). */
const char *ra_model_meta(const ra_model *m, const char *key);
int ra_model_meta_count(const ra_model *m);
const char *ra_model_meta_key(const ra_model *m, int i);
/* The image transform the model's family evaluates with (section 14,
 * ra_transform), from its metadata: transform.*, img_size, crop_pct, mean,
 * std (docs/reference.md, "Image transforms"). *source (may be NULL) says
 * where it came from ("config.json pretrained_cfg.crop_pct",
 * "preprocessor_config.json size", "convention: torchvision's swin_t
 * weights' transform", or the default), valid while m lives.
 * RA_ERR_FORMAT, naming the key, if the metadata is unusable. */
struct ra_transform;
ra_status ra_model_transform(struct ra_transform *t, const char **source, const ra_model *m);
/* 1 if m classifies videos (its input x is (B, C, T, H, W): arch swin3d),
 * else 0: the one test the command line and the library ask. */
int ra_model_is_video(const ra_model *m);
/* The clips and the frames' transform a video model evaluates with
 * (section 14, ra_clip_spec and ra_video_transform): the metadata
 * video.sampler (mmaction or torchvision; without it torchvision where
 * the file has transform.frame_rate, as torchvision's swin3d_* weights
 * record it), video.clips, num_frames and video.clip_len (the clip),
 * video.frame_interval, transform.frame_rate, video.crops,
 * transform.resize ("shorter N"), transform.crop, mean, std where the file
 * has them; else the official Video Swin test's: 4 clips x 3 crops of 32 frames at an
 * interval of 2, the shorter side to 224 (mmcv's sizes), 224 x 224
 * crops, ImageNet's mean and std on the bytes (123.675, 116.28, 103.53;
 * 58.395, 57.12, 57.375); with video.sampler torchvision, torchvision's
 * Kinetics evaluation: 12 clips of 32 frames at 15 frames a second, the
 * shorter side to 256, one 224 x 224 centre crop, ImageNet's mean and std
 * on x / 255 (its swin3d weights'). RA_ERR_FORMAT naming the key if a
 * value is unusable. *source: where it came from (valid while m lives). */
struct ra_clip_spec;
struct ra_video_transform;
ra_status ra_model_video_transform(struct ra_clip_spec *s, struct ra_video_transform *t,
                                   const char **source, const ra_model *m);

/* Multiply-adds of one forward as the Swin authors count them (their
 * flops() methods): for a network, one h x w image; for an attention layer,
 * one window (window archs) or one sequence of h*w tokens. -1 if unknown. */
int64_t ra_model_flops(const ra_model *m, int h, int w);

/* The naming scheme the file's tensors were found in (docs/reference.md,
 * section 2): "official" (the authors' code's state_dict names, also
 * those of a model made by ra_model_create), "timm", "torchvision" or
 * "video_swin". */
const char *ra_model_scheme(const ra_model *m);

/* ---- methods: parameters ------------------------------------------------ */

/* The parameters, in a fixed order, as one flat F32 buffer of
 * ra_model_param_total() floats; each has its state_dict() name. Changing
 * the weights in place (training) changes the model. */
typedef struct ra_param_info {
    const char *name;        /* canonical name: the official code's */
    const char *file_name;   /* the name in the file it was loaded from (its
                                naming scheme); the canonical name for a
                                model made by ra_model_create */
    int ndim;
    int64_t shape[5];        /* ndim <= 5 (a Conv3d weight) */
    int64_t offset, numel;   /* floats, into the flat buffer; offset -1 when
                                an optional parameter is absent */
    int optional;
} ra_param_info;
int ra_model_param_count(const ra_model *m);
const ra_param_info *ra_model_param(const ra_model *m, int i);
int64_t ra_model_param_total(const ra_model *m);
float *ra_model_weights(ra_model *m);

/* Point g into flat (ra_model_param_total() floats, laid out like the
 * weights) so that ra_attn_layer_backward accumulates each parameter's
 * gradient at that parameter's offset. */
void ra_model_attn_grads(const ra_model *m, float *flat, ra_attn_grads *g);

/* ---- methods: inference ------------------------------------------------- */

/* Run a network model (swin_block, swin, vit, swin_block_3d, swinv2, swin3d):
 *   swin_block  x (B, H*W, C) or (B, H, W, C) -> y of the same shape
 *   swin_block_3d  one clip x (D, H, W, C): see ra_swin_block_3d_forward
 *   swin, vit, swinv2  x (B, C_in, H, W) images -> y (B, num_classes) logits
 *   swin3d  x (B, C_in, T, H, W) clips -> y (B, num_classes) logits
 * *y is allocated by the library (free with free()); its shape is written.
 * RA_ERR_ARG for an attention-layer model (use ra_attn_layer_forward). */
ra_status ra_model_forward(const ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                           const float *x, int x_ndim, const int64_t *x_shape);

/* The outputs a classifier predicts with (what ra_evaluate, ra_predict,
 * relattn eval and relattn classify use): ra_model_forward's, or, when the
 * model's metadata "tta" is "flip", the mean of ra_model_forward's for x
 * and for x mirrored left to right (its last axis): test-time averaging
 * over the horizontal flips a model trained with them has learned to treat
 * alike. tta absent or "none": ra_model_forward. Any other value:
 * RA_ERR_FORMAT; "flip" for an x that is not images (B, C, H, W) or a
 * model that is not an image classifier (outputs other than (B, K)):
 * RA_ERR_ARG. */
ra_status ra_model_predict(const ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                           const float *x, int x_ndim, const int64_t *x_shape);

/* ---- methods: training -------------------------------------------------- */

/* Training of networks (swin_block, swin, vit, swin_block_3d, swinv2;
 * ra_model_trainable says which). A training forward keeps in the model what its backward needs (one
 * training pass per model at a time; the next training forward replaces
 * it), and ra_model_backward back-propagates through it:
 *   grad (ra_model_param_total floats, laid out like the weights)
 *        += dL/dparameters, ACCUMULATED (zero it before a step);
 *   dx   (the shape of the forward's x) += dL/dx, or NULL (not wanted);
 *   dy   (the shape of the forward's y) the gradient of the output.
 * The forward's inputs and outputs are as ra_model_forward's (y allocated,
 * free with free()). The gradients equal PyTorch autograd's (within the
 * tolerances of docs/reference.md, section 6). The training forward of vit,
 * swin and swinv2 applies the model's stochastic depth (metadata
 * drop_path_rate, default 0: block i of L takes rate * i / (L - 1), one
 * draw per sample and residual branch) from rng; rng may be NULL when the
 * rate is 0. One number u = ra_rng_u64(rng) is drawn per call; shard s of
 * a batch (S shards, one per thread; S = 1 included) draws its masks, in
 * block order, from a generator seeded with mix64(u, s) (docs/reference.md,
 * section 1.4): the masks depend on rng and the shard count.
 * The 3-D block has no stochastic depth. RA_ERR_ARG for an
 * attention-layer model (their backward is ra_attn_layer_backward) or a
 * backward without a training forward. */
int ra_model_trainable(const ra_model *m);
/* The layer of parameter name (canonical) for layer-wise learning-rate
 * decay, in [0, *count): the Swin authors' get_swin_layer for swin and
 * swinv2 (patch_embed 0, block j of stage i depths[0..i-1] + j + 1, the
 * stage's patch merging that of its last block, the rest L + 1), BEiT's
 * get_vit_layer for vit (cls_token, pos_embed, patch_embed 0, blocks.i
 * i + 1, the rest L + 1), with L blocks and *count = L + 2. -1 (and
 * *count 0) for other archs. */
int ra_param_layer(const ra_model *m, const char *name, int *count);
ra_status ra_model_forward_train(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                                 const float *x, int x_ndim, const int64_t *x_shape,
                                 ra_rng *rng);
ra_status ra_model_backward(ra_model *m, float *grad, float *dx, const float *dy);

/* ---- methods of one arch: swin_block_3d, swin --------------------------- */

/* swin_block_3d: a pre-norm 3-D window block over video
 * tokens, Video Swin's SwinTransformerBlock3D (self-attention in
 * (Wd, Wh, Ww) windows) or, when the metadata has num_frames_q and
 * num_frames_kv, an RSTT-style cross block: its D1 query frames attend to
 * D2 key/value frames (normalised by their own norm_kv) in windows that
 * hold every frame (docs/reference.md, sections 2 and 3).
 *   self   x (B, D, H, W, C), kv NULL           -> y (B, D, H, W, C)
 *   cross  x (B, D1, H, W, C) with d == D1,
 *          kv (B, D2, H, W, C)                  -> y (B, D1, H, W, C)
 * y is the caller's and may alias x (not kv). ra_model_forward takes one
 * clip without the batch axis (its output shape has at most 4 axes):
 * x (D, H, W, C) -> y (D, H, W, C) for a self block, and for a cross block
 * x (D1 + D2, H, W, C), the query frames then the key/value frames
 * concatenated along D -> y (D1, H, W, C).
 * RA_ERR_ARG if m is not a swin_block_3d model or an argument is NULL,
 * RA_ERR_SHAPE for inputs that do not fit it. */
ra_status ra_swin_block_3d_forward(const ra_model *m, float *y, const float *x,
                                   const float *kv, int b, int d, int h, int w);
/* The shapes of x and kv (kv_ndim 0 and kv_shape NULL for none) checked
 * against a swin_block_3d model, as ra_swin_block_3d_forward needs them:
 * x (B, D, H, W, dim) with D = D1 for a cross block, kv (B, D2, H, W, dim)
 * for a cross block only, every size in range. Call it first whenever the
 * shapes come from outside (a file): ra_swin_block_3d_forward takes bare
 * pointers and trusts b, d, h, w. RA_ERR_SHAPE with the reason if not. */
ra_status ra_swin_block_3d_check(const ra_model *m, int x_ndim, const int64_t *x_shape,
                                 int kv_ndim, const int64_t *kv_shape);

/* The attention of one block of a swin network over one image x
 * (1, C_in, H, W), as maps over that stage's token grid (gh x gw tokens,
 * nh heads): maps (nq, nh, gh, gw) holds, for each query token
 * queries[q] = (row, column) of the grid, the probability its head gives
 * every token of its (shifted) window, 0 elsewhere. Call with maps NULL to
 * learn gh, gw and nh first. Stages and blocks count from 0. */
ra_status ra_swin_attention_maps(const ra_model *m, float *maps, int *gh, int *gw, int *nh,
                                 const float *x, int h, int w, int stage, int block,
                                 const int *queries, int nq);

/* ======================================================================== */
/* 13. Runs: any model on named tensors, ra_run                              */
/* ======================================================================== */

/* The largest attention map (B_ * nH * N1 * N2 floats, 4 GiB) the command
 * line writes (forward --attn). */
#define RA_MAX_ATTN_MAP ((int64_t)1 << 30)

/* What `relattn forward` and `relattn backward` do, and what the Python
 * package calls: a model, its inputs by name, and its outputs by name, for
 * every arch without code of its own.
 *
 * Inputs (named as in an INPUT file of the command line):
 *   attention layers  x (B_, N1, C), or q (B_, N1, C) and optionally
 *                     kv (B_, N2, C) for window_attention_3d; optionally
 *                     mask (nW, N1, N2) with B_ % nW == 0
 *   networks          x (see ra_model_forward; swin_block_3d also takes
 *                     clips x (B, D, H, W, C) and, for a cross block,
 *                     kv (B, D2, H, W, C) in forward)
 *   backward          also dy, the gradient of y (its shape)
 * An input whose data is NULL stands for a tensor that is not float32
 * values and is refused by name. A dy in a forward run is ignored.
 * Outputs, valid after a successful ra_run_exec until the next exec or
 * ra_run_free, owned by the run:
 *   forward           y; with RA_RUN_FORWARD_ATTN also attn (B_, nH, N1, N2)
 *                     (attention layers only, at most RA_MAX_ATTN_MAP floats)
 *   features          y, then features.I (and features.I.prefix) of
 *                     ra_model_features (swin, swinv2, swin3d, vit)
 *   backward          y, grad.x (grad.q, and grad.kv when kv was given), and
 *                     grad.NAME for every parameter (NAME: the canonical name
 *                     for attention layers, the file's own name for networks)
 * Failures: RA_ERR_SHAPE for inputs that do not fit the model (missing,
 * unexpected, wrong shape), RA_ERR_ARG for a mode the model has not,
 * RA_ERR_NOMEM, each with its reason in ra_last_error(). The tensors are
 * those of docs/reference.md, section 3. */
typedef struct ra_tensor {
    const char *name;
    int ndim;
    int64_t shape[RA_ST_MAX_DIMS];
    float *data;             /* (shape) row-major float32; inputs are only read */
} ra_tensor;

/* ---- feature maps: a network as a backbone ------------------------------ */

/* The intermediate outputs of a network's one forward (docs/reference.md,
 * section 3, "Feature maps"), for detection and segmentation heads:
 *   swin, swinv2  stage s's output: after its last block, before the next
 *                 patch merging (the last stage: before the final norm),
 *                 which is the output of torchvision's features[2s + 1],
 *                 of timm's layers.s (features_only, forward_intermediates)
 *                 and transformers' hidden_states_before_downsampling[s]
 *   swin3d        stage s's output as swin's (torchvision's features[2s]
 *                 of SwinTransformer3d), (B, T', H', W', C) channels last:
 *                 the unpadded patch grid, H' and W' halved (rounded up) by
 *                 each merging
 *   vit           block i's output (timm's forward_intermediates), the
 *                 prefix tokens (class, registers) apart
 * Indices count from 0 (stages, blocks); a negative one counts from the
 * end (-1 the last), as timm's. count 0 takes the model's default: every
 * stage of a Swin (those of out_indices for a transformers SwinBackbone),
 * the last 3 blocks of a ViT (timm's features_only). Maps come out in
 * ascending order, each index once.
 * A 3-D network's maps are (B, T, H, W, C) channels last and
 * (B, C, T, H, W) channels first: the layouts name where C goes. */
#define RA_MAX_FEATURES 64

typedef enum ra_layout {
    RA_LAYOUT_DEFAULT = 0,   /* swin, swin3d: NHWC (transformers backbone: NCHW); vit: NCHW */
    RA_LAYOUT_NHWC = 1,      /* channels last (B, H, W, C): torchvision's stages */
    RA_LAYOUT_NCHW = 2,      /* channels first (B, C, H, W): timm's forward_intermediates */
    RA_LAYOUT_NLC = 3        /* tokens (B, H*W, C): timm's output_fmt='NLC' */
} ra_layout;

typedef enum ra_features_norm {
    RA_FEATURES_NORM_DEFAULT = 0, /* the model's: a transformers SwinBackbone's
                                     hidden_states_norms, else none */
    RA_FEATURES_NORM_NONE = 1,    /* the maps as the blocks leave them */
    RA_FEATURES_NORM_FINAL = 2    /* timm's norm=True: the final norm on the
                                     last stage of a Swin (Video Swin too), on
                                     every block of a ViT (a ViT without that
                                     norm: none) */
} ra_features_norm;

typedef struct ra_features_options {
    int all;                      /* every stage or block (timm's indices=None) */
    int count;                    /* indices given; 0 (and all 0): the default maps */
    int index[RA_MAX_FEATURES];   /* stages (swin, swinv2, swin3d) or blocks (vit) */
    ra_layout layout;
    ra_features_norm norm;
    int prefix_tokens;            /* vit: also the prefix tokens of each map,
                                     (B, prefix, C) (return_prefix_tokens) */
} ra_features_options;

/* The feature maps of images x (B, C_in, H, W) for a swin, swinv2 or vit
 * model, of clips x (B, C_in, T, H, W) for a swin3d model, from the one
 * forward that also gives y (as ra_model_forward's;
 * y may be NULL: not wanted). o NULL: the defaults. *maps gets *nmaps
 * tensors named "features.I" (I the absolute stage or block) and, with
 * prefix_tokens, "features.I.prefix" after each; free them with
 * ra_features_free. The maps are those of a batch run in shards (threads)
 * or in one pass alike. RA_ERR_ARG for another arch or an index out of
 * range, RA_ERR_SHAPE for x. */
ra_status ra_model_features(const ra_model *m, ra_tensor **maps, int *nmaps, float **y,
                            int *y_ndim, int64_t y_shape[4], const float *x, int x_ndim,
                            const int64_t *x_shape, const ra_features_options *o);
void ra_features_free(ra_tensor *maps, int nmaps);

typedef enum ra_run_mode {
    RA_RUN_FORWARD = 0,      /* y */
    RA_RUN_FORWARD_ATTN = 1, /* y and attn */
    RA_RUN_BACKWARD = 2,     /* y and the gradients (gradients zeroed per exec) */
    RA_RUN_FEATURES = 3      /* y and the feature maps (ra_run_create_features) */
} ra_run_mode;

typedef struct ra_run ra_run;   /* opaque */

/* ---- constructor and destructor ----------------------------------------- */

/* Check the inputs against m and allocate the outputs. m and the inputs'
 * data are borrowed and must outlive the run (the names and shapes are read
 * here, the data at each exec). A backward run uses m's training state: one
 * backward run per model at a time. */
ra_status ra_run_create(ra_run **out, ra_model *m, ra_run_mode mode, const ra_tensor *inputs,
                        int ninputs);
/* A RA_RUN_FEATURES run (ra_run_create with that mode takes the default
 * options): y and the maps of ra_model_features, named as there. o is
 * copied; its indices are checked here against m (RA_ERR_ARG). */
ra_status ra_run_create_features(ra_run **out, ra_model *m, const ra_features_options *o,
                                 const ra_tensor *inputs, int ninputs);
void ra_run_free(ra_run *r);

/* ---- methods ------------------------------------------------------------ */

/* Compute; may be repeated (timing), each exec giving the same outputs. */
ra_status ra_run_exec(ra_run *r);
/* The outputs, by position or by name (NULL if there is none). */
int ra_run_output_count(const ra_run *r);
const ra_tensor *ra_run_output(const ra_run *r, int i);
const ra_tensor *ra_run_find(const ra_run *r, const char *name);   /* or NULL */

/* ======================================================================== */
/* 14. Images and videos: ra_image_*, ra_video_*                             */
/* ======================================================================== */

/* Decode an image file, PNG (libspng) or JPEG (libjpeg-turbo; greyscale or
 * colour, not CMYK), into rgb (H, W, 3) bytes, allocated (free with
 * free()): what PIL's Image.open(path).convert("RGB") holds (grey
 * replicated, alpha dropped, a palette expanded). Other formats are
 * refused by their first bytes. The header is read first: an image of
 * more than max_pixels pixels is refused (RA_ERR_FORMAT) before anything
 * is decoded; corrupt or truncated data is RA_ERR_FORMAT too. RA_ERR_IO if
 * unreadable. */
ra_status ra_image_load_u8(uint8_t **rgb, int *w, int *h, const char *path, int64_t max_pixels);
/* The same as floats in [0, 1] (byte / 255). */
ra_status ra_image_load(float **rgb, int *w, int *h, const char *path, int64_t max_pixels);

/* The most pixels on a side an image transform takes or makes. */
#define RA_IMAGE_MAX_SIDE 65535

/* Resampling filters, numbered as PIL's (transformers' "resample"). */
typedef enum ra_interp {
    RA_INTERP_NEAREST = 0, RA_INTERP_LANCZOS = 1, RA_INTERP_BILINEAR = 2,
    RA_INTERP_BICUBIC = 3, RA_INTERP_BOX = 4, RA_INTERP_HAMMING = 5
} ra_interp;
/* "nearest", "lanczos", "bilinear", "bicubic", "box", "hamming" (NULL if
 * unknown); parse gives the filter of a name, or -1. */
const char *ra_interp_name(ra_interp i);
int ra_interp_parse(const char *name);

/* PIL's Image.resize of 8-bit pixels (h, w, channels), to the last unit:
 * nearest, or the separable filters antialiased when shrinking, in PIL's
 * fixed point (docs/reference.md, "Image transforms"). out (oh, ow,
 * channels); 1 <= channels <= 4; sides 1..RA_IMAGE_MAX_SIDE. */
ra_status ra_image_resize_u8(uint8_t *out, int ow, int oh, const uint8_t *in, int w, int h,
                             int channels, ra_interp interp);

/* An evaluation transform: resize, centre crop, rescale, normalise, as the
 * families' pipelines do (timm's and torchvision's Resize + CenterCrop +
 * ToTensor + Normalize; transformers' image processors). */
typedef enum ra_resize_mode {
    RA_RESIZE_NONE = 0,
    RA_RESIZE_SHORTER = 1,   /* the shorter side to resize_h, the other int(s * long / short) */
    RA_RESIZE_EXACT = 2,     /* to resize_h x resize_w, the aspect ratio not kept ("squash") */
    RA_RESIZE_FIT = 3,       /* timm's ResizeKeepRatio(longest=1): the aspect ratio kept, inside
                                resize_h x resize_w (one ratio r = max(h / rh, w / rw), each side
                                round(side / r), half to even) */
    RA_RESIZE_COVER = 4      /* the same with longest=0 (r = min(...)): over it */
} ra_resize_mode;
typedef enum ra_crop_mode {
    RA_CROP_NONE = 0,
    RA_CROP_CENTER_ROUND = 1,   /* torchvision's CenterCrop: offset round((n - c) / 2), half to even */
    RA_CROP_CENTER_FLOOR = 2    /* transformers' center_crop: offset (n - c) // 2 */
} ra_crop_mode;               /* a crop larger than the image pads it with fill, centred
                                 (offset floor((c - n) / 2)), as timm's CenterCropOrPad */
typedef struct ra_transform {
    ra_resize_mode resize;
    int resize_h, resize_w;   /* SHORTER: resize_h is the side */
    ra_interp interp;
    ra_crop_mode crop;
    int crop_h, crop_w;
    double rescale;           /* 0: byte / 255 in float32 (ToTensor); else (float)(byte * rescale) */
    int normalize;            /* then (v - mean[c]) / std[c] in float32 */
    float mean[3], std[3];
    int grey;                 /* 1: one plane, PIL's "L" luma of the three normalised ones,
                                 0.299 R + 0.587 G + 0.114 B in float32 (a grey model's input) */
    uint8_t fill[3];          /* the padding's colour (timm's crop_mode border: round(255 mean)) */
} ra_transform;
/* RA_ERR_ARG (and why) if t cannot be applied. */
ra_status ra_transform_check(const ra_transform *t);
/* The output size (ow x oh) for an image w x h. */
ra_status ra_transform_size(const ra_transform *t, int w, int h, int *ow, int *oh);
/* out (3, oh, ow) floats from rgb (h, w, 3) bytes; (1, oh, ow) with t->grey. */
ra_status ra_transform_apply(float *out, const ra_transform *t, const uint8_t *rgb, int w, int h);
/* timm's crop_mode (transforms_imagenet_eval) on t, whose resize_h x
 * resize_w (resize_h for SHORTER) is the scale size floor(img_size /
 * crop_pct) and whose mean is set: "center" resizes the shorter side
 * (SHORTER) for a square size, else as timm's ResizeKeepRatio (COVER,
 * bilinear: timm's own default there, whatever its interpolation);
 * "squash" to the size (EXACT); "border" to fit in it (FIT) with the crop
 * padded by round(255 * mean) (timm's CenterCropOrPad). RA_ERR_ARG for
 * another mode or a transform without a resize. */
ra_status ra_transform_crop_mode(ra_transform *t, const char *mode);
/* One line: "resize shorter 232 bicubic, centre crop 224x224 (round), /255,
 * normalise mean ... std ..." into buf (snprintf's return). */
int ra_transform_describe(char *buf, size_t n, const ra_transform *t);

/* torchvision's ImageNet evaluation transform (ra_transform_apply with a
 * SHORTER resize bilinear and a rounded centre crop) of a float image in
 * [0, 1], taken back to bytes first: out (3, crop, crop), rgb (h, w, 3). */
ra_status ra_image_preprocess(float *out, const float *rgb, int w, int h, int resize, int crop,
                              const float mean[3], const float std[3]);

/* ---- videos: ra_video_* -------------------------------------------------- */

/* A video is a file FFmpeg's libraries decode (libavformat, libavcodec,
 * libswscale: MP4, MKV/WebM, AVI, ... in any codec the build decodes), or
 * a folder of PNG / JPEG frames (their names in byte order). Untrusted
 * input: these limits are checked before anything is allocated for what
 * they bound (docs/reference.md, section 7). */
typedef struct ra_video_limits {
    int64_t max_bytes;     /* the file's size (4 GiB) */
    int64_t max_pixels;    /* a frame's width x height (64 megapixels; also at most
                              RA_IMAGE_MAX_SIDE a side), declared and decoded */
    int64_t max_frames;    /* frames declared or decoded (1000000) */
    double max_seconds;    /* the declared duration and every frame's time (4 hours) */
} ra_video_limits;
void ra_video_limits_default(ra_video_limits *l);

typedef struct ra_video_info {
    int width, height;
    int64_t frames;        /* the stream's packets, a frame each (a folder: its image files) */
    double fps;            /* the stream's average frame rate (PyAV's average_rate),
                              else its r_frame_rate; 0 if unknown (a folder) */
    const char *codec;     /* FFmpeg's codec name ("h264", "vp9", "mjpeg"); "images" */
    const char *format;    /* FFmpeg's demuxer name; "folder" */
} ra_video_info;

typedef struct ra_video ra_video;
/* Open path (a regular file, or a directory of frames): the stream's
 * packets are read and counted, a frame each, and their times kept; only
 * the first frame is decoded (the frames' size), nothing is converted.
 * lim NULL: ra_video_limits_default. A corrupt or truncated container, an
 * unsupported codec, a first frame that does not decode, sizes over the
 * limits: RA_ERR_FORMAT with the reason (also when FFmpeg's libraries,
 * opened here the first time, are not installed); RA_ERR_IO if it cannot
 * be read. FFmpeg's own log is silenced (process-wide) the first time. */
ra_status ra_video_open(ra_video **v, const char *path, const ra_video_limits *lim);
void ra_video_free(ra_video *v);
const ra_video_info *ra_video_get_info(const ra_video *v);
/* (frames) each frame's presentation time in seconds (the packets'
 * presentation times, else their decoding times, x the stream's time base,
 * in increasing order; all NAN if a packet has none, and for a folder). */
const double *ra_video_times(const ra_video *v);
/* Called once per frame asked for, in frame order: rgb (h, w, 3), valid
 * during the call. A status other than RA_OK stops the decoding. */
typedef ra_status (*ra_video_frame_fn)(void *ctx, int64_t index, const uint8_t *rgb, int w, int h);
/* Decode the video from its start up to the last frame asked for and hand
 * the frames idx[0..n) (any order, repeats allowed; each handed once) to
 * fn as RGB24: libswscale with the ffmpeg command's defaults (bicubic
 * flags, the frame's colour matrix, BT.601 if unspecified, its range), the
 * bytes `ffmpeg -i V -pix_fmt rgb24 F%d.png` writes. RA_ERR_ARG for an
 * index outside 0..frames-1; RA_ERR_FORMAT for a frame that does not
 * decode, or a stream that ends before a frame asked for (fewer frames
 * than packets). */
ra_status ra_video_decode(ra_video *v, const int64_t *idx, int64_t n, ra_video_frame_fn fn,
                          void *ctx);

/* Clip sampling: which frames make each clip (docs/reference.md, "Videos"). */
typedef enum ra_clip_sampler {
    RA_CLIPS_MMACTION = 0,     /* the official Video Swin test: its mmaction's SampleFrames(clip_len,
                                  frame_interval, num_clips, test_mode=True), out of bounds looped */
    RA_CLIPS_TORCHVISION = 1   /* torchvision's Kinetics evaluation: VideoClips(clip_len, step 1,
                                  frame_rate) then UniformClipSampler(clips) */
} ra_clip_sampler;
typedef struct ra_clip_spec {
    ra_clip_sampler sampler;
    int clips;            /* clips a video, 1..1024 */
    int clip_len;         /* T, frames a clip, 1..4096 */
    int frame_interval;   /* mmaction: frames between two of a clip (1..4096); torchvision: 1 */
    double frame_rate;    /* torchvision: the video resampled to this rate first; 0: its own */
} ra_clip_spec;
/* idx (clips, clip_len): frame indices into 0..frames-1, for a video of
 * frames frames at fps (torchvision's resampling needs it; 0 if unknown:
 * no resampling). RA_ERR_FORMAT if torchvision's sampler has no clip
 * (fewer frames than clip_len after resampling: it skips such a video);
 * mmaction's loops over a short video (its out_of_bound_opt 'loop'). */
ra_status ra_clip_indices(int64_t *idx, const ra_clip_spec *s, int64_t frames, double fps);
/* idx (clip_len): the frames of one training clip, as the official Video
 * Swin training's SampleFrames(clip_len, frame_interval, num_clips=1):
 * L = clip_len * frame_interval; its first frame uniform in 0..frames-L
 * (one ra_rng_below draw) when frames >= L, else 0 (no draw); frame k at
 * first + k * frame_interval, modulo frames (a short video loops). */
ra_status ra_clip_indices_train(int64_t *idx, int clip_len, int frame_interval, int64_t frames,
                                ra_rng *rng);

/* The frames' transform: torchvision's VideoClassification (resize on
 * tensors, bilinear, no antialias, then centre crop, / 255, normalise) or
 * the official test's Resize(-1, S) + ThreeCrop / CenterCrop + Normalize. */
typedef struct ra_video_transform {
    ra_transform frame;   /* resize RA_RESIZE_SHORTER (resize_h) or NONE, crop (ROUND: torchvision's
                             offset; FLOOR: mmaction's), rescale, normalize, mean, std; interp must
                             be bilinear: the resize is torch's interpolate(mode='bilinear',
                             align_corners=False, antialias=False) on the bytes as floats,
                             rounded half to even back to bytes */
    int size_round;       /* the longer side: 0 int(S * long / short) (torchvision), 1
                             int(long * (S / short) + 0.5) (mmcv's rescale_size) */
    int crops;            /* 1: the centre crop; 3: mmaction's ThreeCrop along the longer side
                             (first, last, middle) */
} ra_video_transform;
/* torch's bilinear interpolate (above) of 8-bit pixels (h, w, c) to (oh, ow, c). */
ra_status ra_resize_bilinear_tensor_u8(uint8_t *out, int ow, int oh, const uint8_t *in, int w,
                                       int h, int channels);
/* The crops of one frame as bytes: out (crops, oh, ow, 3); ow x oh from
 * ra_transform_size(&t->frame, ...). */
ra_status ra_video_frame_bytes(uint8_t *out, const ra_video_transform *t, const uint8_t *rgb,
                               int w, int h);
/* The model's input for a video: x (views, 3, T, oh, ow) allocated (free()),
 * views = crops x clips, crop-major as mmaction's FormatShape (view = crop
 * * clips + clip); shape[5] its dimensions. Each frame is decoded once and
 * transformed once, whatever the number of clips using it. */
ra_status ra_video_clips(float **x, int64_t shape[5], ra_video *v, const ra_clip_spec *s,
                         const ra_video_transform *t);

/* ---- training augmentations: timm's RandAugment ------------------------- */

/* timm's RandAugment operations (timm/data/auto_augment.py), each on an
 * 8-bit image (h, w, c), c = 1 (PIL mode "L") or 3 ("RGB"), rows top to
 * bottom, giving Pillow 9.4's bytes for the same argument (docs/reference.md,
 * "Training augmentations: RandAugment"). */
typedef enum ra_aug_op {
    RA_AUG_AUTOCONTRAST, RA_AUG_EQUALIZE, RA_AUG_INVERT, RA_AUG_ROTATE, RA_AUG_POSTERIZE,
    RA_AUG_SOLARIZE, RA_AUG_SOLARIZE_ADD, RA_AUG_COLOR, RA_AUG_CONTRAST, RA_AUG_BRIGHTNESS,
    RA_AUG_SHARPNESS, RA_AUG_SHEAR_X, RA_AUG_SHEAR_Y, RA_AUG_TRANSLATE_X, RA_AUG_TRANSLATE_Y
} ra_aug_op;
/* timm's names: "AutoContrast", ..., "TranslateXRel" (NULL if unknown). */
const char *ra_aug_op_name(ra_aug_op op);
/* dst = op(src) with the op's PIL argument arg:
 *   AutoContrast, Equalize, Invert: ImageOps' (cutoff 0), arg ignored;
 *   Rotate: degrees, img.rotate(arg, resample, fillcolor=fill);
 *   Posterize: bits, a whole number (ImageOps.posterize; >= 8 copies, <= 0
 *     gives 0); Solarize: the threshold (ImageOps.solarize);
 *   SolarizeAdd: add (timm's solarize_add, threshold 128);
 *   Color, Contrast, Brightness, Sharpness: the factor,
 *     ImageEnhance.X(img).enhance(arg);
 *   ShearX / ShearY: the factor, img.transform(size, AFFINE,
 *     (1, arg, 0, 0, 1, 0) / (1, 0, 0, arg, 1, 0), resample, fillcolor);
 *   TranslateX / TranslateY: pixels, AFFINE (1, 0, arg, 0, 1, 0) /
 *     (1, 0, 0, 0, 1, arg).
 * interp (resample): RA_INTERP_NEAREST, BILINEAR or BICUBIC, and fill (c
 * bytes): the fill colour, for the geometric ops (ignored by the others,
 * fill may then be NULL). dst and src do not overlap. RA_ERR_ARG for sides
 * outside 1..RA_IMAGE_MAX_SIDE, c not 1 or 3, a NULL image, a non-finite
 * arg, a fractional Posterize, another interp; RA_ERR_NOMEM. */
ra_status ra_augment_op(uint8_t *dst, const uint8_t *src, int w, int h, int c, ra_aug_op op,
                        double arg, ra_interp interp, const uint8_t *fill);

/* A RandAugment policy as timm parses it from its string
 * ("rand-m9-mstd0.5-inc1"): layers (n, default 2), magnitude (m, 10),
 * magnitude_std (mstd, 0; > 100 in the string, or infinity: uniform in
 * [0, m]), magnitude_max (mmax, 10; 0 reads as 10), prob (p, 0.5),
 * increasing (inc: the *Increasing level functions), translate_pct (0.45,
 * timm's default hparam); interp and fill as the caller's transform (timm:
 * the training interpolation, fill = round(255 * mean); parse sets bicubic
 * and timm's (128, 128, 128)). */
#define RA_AUG_MAX_LAYERS 64
typedef struct ra_randaugment {
    int layers;
    double magnitude, magnitude_std, magnitude_max, prob;
    int increasing;
    double translate_pct;
    ra_interp interp;
    uint8_t fill[3];
} ra_randaugment;
/* r from spec, sections after "rand" split on '-', each a key and the
 * number after it: m, n (0..RA_AUG_MAX_LAYERS), mmax (whole numbers), p,
 * mstd (decimals); a repeated mstd or mmax keeps the first (timm's
 * setdefault), the others the last; inc with any value sets increasing (timm
 * tests the string); a section without a digit is skipped, as timm does.
 * RA_ERR_ARG naming what is wrong: another start, an unknown key, a bad
 * number, a transform set ("t...", not supported). */
ra_status ra_randaugment_parse(ra_randaugment *r, const char *spec);

/* One layer of a draw: the op, whether it applies, the magnitude drawn
 * (clipped to [0, magnitude_max]) and the op's argument for ra_augment_op
 * (TranslateX/Y in pixels: the level's fraction times w or h). */
typedef struct ra_aug_step {
    ra_aug_op op;
    int applied;
    double magnitude, arg;
} ra_aug_step;
/* The random part of ra_randaugment_apply, for an image w x h: steps
 * (r->layers). The draws from rng, in order (a draw below m as in
 * ra_dataset_batch, u one ra_rng_uniform):
 *   1. for each layer, its op: a draw below 15 (uniform, with replacement);
 *   2. for each layer in turn: if prob < 1, u, and the layer is skipped
 *      (nothing more drawn for it) when u > prob; the magnitude: m if
 *      mstd = 0, else m * u if mstd is infinite, else m + mstd *
 *      ra_rng_normal; clipped to [0, magnitude_max]; then, for Rotate,
 *      ShearX/Y, TranslateX/Y and (with increasing) Color, Contrast,
 *      Brightness, Sharpness, u, the level negated when u > 0.5.
 * The level functions are timm's (level l = magnitude / 10): Rotate 30 l
 * degrees; Posterize int(4 l) bits (increasing: 4 - int(4 l)); Solarize
 * min(256, int(256 l)) (increasing: 256 minus it); SolarizeAdd min(128,
 * int(110 l)); the enhancements 1.8 l + 0.1 (increasing: max(0.1, 1 +/- 0.9
 * l)); ShearX/Y 0.3 l; TranslateX/Y translate_pct l times w or h. */
ra_status ra_randaugment_draw(ra_aug_step *steps, int w, int h, const ra_randaugment *r,
                              ra_rng *rng);
/* img (h, w, c) = r's RandAugment of it, in place: ra_randaugment_draw,
 * then ra_augment_op for each applied layer in order, with r->interp and
 * r->fill. scratch: w * h * c bytes. */
ra_status ra_randaugment_apply(uint8_t *img, uint8_t *scratch, int w, int h, int c,
                               const ra_randaugment *r, ra_rng *rng);

/* ======================================================================== */
/* 15. Datasets: ra_dataset (MNIST and Fashion-MNIST IDX files)              */
/* ======================================================================== */

/* A labelled set of images, grey or RGB, all C x H x W bytes, held in memory. */
typedef struct ra_dataset {
    int64_t n;           /* images */
    int h, w;            /* rows, columns of each image */
    int classes;         /* max label + 1 (1..256) */
    uint8_t *images;     /* (n, c, h, w), 0 = black as stored in the file */
    uint8_t *labels;     /* (n), each < classes */
    int c;               /* channels: 1 (grey; 0 reads as 1) or 3 (RGB) */
} ra_dataset;

/* Limits on what a header may claim: checked before anything is allocated. */
#define RA_DATASET_MAX_SIDE 4096
#define RA_DATASET_MAX_COUNT 100000000
#define RA_DATASET_MAX_BYTES ((int64_t)1 << 32)   /* n * h * w */

/* ---- constructors and destructor (d is the caller's struct) ------------- */

/* Read an IDX images file (magic 0x00000803: unsigned bytes, rank 3,
 * n x h x w big-endian dimensions) and its IDX labels file (0x00000801:
 * unsigned bytes, rank 1, n), each gzip-compressed or not (told apart by
 * the gzip magic). Every header is validated: magic, data type, rank,
 * dimensions >= 1 and within the limits above, the data exactly as long as
 * the header says (a truncated or longer file is refused; the reading stops
 * one byte past the header's size, and memory grows only with the data
 * actually read, so neither a lying header nor a decompression bomb can
 * make it allocate much more than the file holds), the same count in both
 * files. On success d owns its buffers (release with ra_dataset_free); on
 * failure d is zeroed. RA_ERR_IO if a file is missing or unreadable,
 * RA_ERR_FORMAT if malformed (a corrupt gzip stream included), RA_ERR_NOMEM;
 * the reason names the file. */
ra_status ra_dataset_load(ra_dataset *d, const char *images_path, const char *labels_path);

/* The same from a directory laid out as the MNIST / Fashion-MNIST
 * distributions are: split "train" reads train-images-idx3-ubyte and
 * train-labels-idx1-ubyte, split "test" (or "t10k") the t10k- files; each
 * file is taken raw if present, else with the suffix .gz. RA_ERR_ARG for
 * another split, RA_ERR_IO if neither form of a file exists. Debian's
 * dataset-fashion-mnist puts them in /usr/share/datasets/fashion-mnist. */
ra_status ra_dataset_load_dir(ra_dataset *d, const char *dir, const char *split);

void ra_dataset_free(ra_dataset *d);   /* frees the buffers, zeroes d */

/* An image folder, DIR/<class>/.../<image>, listed as torchvision's
 * ImageFolder lists it: the classes DIR's subdirectories sorted by name,
 * each class's images (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp, in
 * any case) found by walking its folder, links followed, sorted by folder
 * then name; a class is its rank. A walk never re-enters a folder it is in
 * (a link loop is walked once) nor goes more than 32 deep. RA_ERR_FORMAT
 * for a folder without classes, a class without images (named), more than
 * the limits; RA_ERR_IO if DIR cannot be read. Only the names are read
 * here: the images are decoded by their user (PNG and JPEG). */
#define RA_FOLDER_MAX_FILES 10000000
#define RA_FOLDER_MAX_CLASSES 100000
typedef struct ra_image_folder {
    int64_t n;            /* images */
    int classes;
    char **paths;         /* (n) DIR/<class>/... */
    int32_t *labels;      /* (n) the class of each */
    char **class_names;   /* (classes), sorted */
} ra_image_folder;
ra_status ra_image_folder_scan(ra_image_folder *f, const char *dir);
/* A video folder, DIR/<class>/<video>: the classes as above; a class's
 * videos are its own entries, not hidden, not walked further: the files
 * named as videos (.mp4 .m4v .mov .mkv .webm .avi .mpg .mpeg .ts .ivf .flv
 * .nut .ogv .ogg .gif .y4m .mjpeg .h264 .264 .hevc, in any case) and the
 * subfolders (folders of frames, ra_video_open), sorted by name (bytes).
 * paths are the videos; the same refusals (a class without a video). */
ra_status ra_video_folder_scan(ra_image_folder *f, const char *dir);
void ra_image_folder_free(ra_image_folder *f);   /* zeroes f */
/* x (b, C, oh, ow), C = 1 with t->grey else 3: the images idx[0..b) of f,
 * decoded (at most 64 megapixels each) and transformed by t
 * (ra_transform_apply), each (oh, ow) after it. Decoded by ra_threads_get()
 * threads; the same bits at any thread count. A file that does not
 * decode fails the batch naming it (RA_ERR_FORMAT, RA_ERR_IO), unless bad
 * is given: then bad[s] = 1 and its slot is zeros (bad[s] = 0 for the
 * others). */
ra_status ra_image_folder_batch(float *x, const ra_image_folder *f, const int64_t *idx, int b,
                                const ra_transform *t, int ow, int oh, uint8_t *bad);
/* A dataset (ra_dataset) of the images idx[0..n) of f (idx NULL: the first
 * n), each decoded once and brought to size x size as torchvision's
 * Resize(size) + CenterCrop(size) of PIL images (bilinear, PIL's bytes):
 * 1 channel when every image is grey (R = G = B everywhere), else 3. At
 * most 256 classes (the labels are bytes) and RA_DATASET_MAX_BYTES of
 * pixels; decoded by ra_threads_get() threads, the same bytes at any count.
 * An image that does not decode fails it naming the file, unless
 * skip_bad: then it is left out and counted in *skipped. */
ra_status ra_dataset_from_folder(ra_dataset *d, const ra_image_folder *f, const int64_t *idx,
                                 int64_t n, int size, int skip_bad, int64_t *skipped);

/* A loader: the images idx[0..n) of an image folder decoded and
 * transformed into batches of (B, 3, S, S) floats by a pool of worker
 * threads that keep a bounded queue of batches ahead of the one asked for,
 * so that decoding overlaps the training step (docs/reference.md,
 * "Training augmentations").
 *
 * Training (train = 1): batch `step` of the schedule holds the images
 * perm[pos * B .. pos * B + B) of its epoch (epoch = step / E, pos =
 * step % E, E = n / B, the last partial batch dropped; perm drawn by
 * ra_shuffle from rai seed (seed, epoch)), each drawn through timm's
 * training transform (create_transform(is_training=True)) from its own
 * stream (seed, step, slot):
 *   RandomResizedCrop(S, scale, ratio, interp): ten tries of an area share
 *     u(scale) and an aspect exp(u(log ratio)), w = round(sqrt(a r)),
 *     h = round(sqrt(a / r)) (half to even), kept when it fits, at a
 *     uniform offset; else the centre crop of the whole image clamped to
 *     the ratios; that crop resized to S x S (PIL's bytes);
 *   a horizontal flip with probability hflip;
 *   RandAugment (ra_randaugment_apply) when randaugment;
 *   ToTensor + Normalize (mean, std per channel, float32);
 *   RandomErasing with probability reprob (mode "pixel": N(0, 1) values,
 *     one box of area share u(0.02, 1/3) and aspect exp(u(log 0.3,
 *     log 1/0.3)), ten tries).
 * The draws of a sample, in order: RandomResizedCrop's (per try: the area
 * share, the aspect, then the row and column offsets when it fits), the
 * flip (one ra_rng_uniform, when hflip > 0), RandAugment's, then
 * RandomErasing's (one uniform; per try the area, the aspect, the row and
 * column; then the normal values row by row, channel by channel). Nothing
 * depends on the workers: the same seed gives the same bits at any count.
 *
 * With random_crop 0 the transform eval (S x S) takes RandomResizedCrop's
 * place (its draws are not made); with shuffle 0 every epoch is in the
 * list's order (perm the identity).
 *
 * Evaluation (train = 0): batch `step` holds images step * B .. in order
 * (the last batch may be partial), each through the transform `eval`
 * (ra_transform_apply; it must give S x S). With eval.grey (a grey
 * model's transform) every sample of either mode is one plane, PIL's "L"
 * luma of the three normalised ones (ra_transform.grey); else three.
 *
 * An image that does not decode fails its batch naming the file (the
 * error comes back from ra_loader_batch), unless skip_bad: then training
 * takes the next image of the epoch's order in its place, and evaluation
 * marks it in bad (zeros in its slot); ra_loader_skipped counts them. */
typedef struct ra_loader_config {
    int train;                /* 1: the training transform, 0: eval */
    int random_crop;          /* training: RandomResizedCrop (1), or the transform eval (0)
                                 before the flip, RandAugment and erasing */
    int shuffle;              /* training: each epoch in an order drawn from the seed (1), or
                                 the folder's order (0) */
    int size;                 /* S: 224 */
    int batch;                /* B */
    uint64_t seed;
    double scale[2];          /* RandomResizedCrop's area share: 0.08, 1 */
    double ratio[2];          /* its aspect ratio (w / h): 3/4, 4/3 */
    ra_interp interp;         /* its filter: bicubic */
    double hflip;             /* 0.5 */
    int randaugment;          /* apply ra (timm's "rand-m9-mstd0.5-inc1") */
    ra_randaugment ra;        /* (its interp and fill are set by the loader, as timm
                                 sets them: interp, and round(255 * mean)) */
    double reprob;            /* RandomErasing: 0 (Swin's recipe: 0.25) */
    float mean[3], std[3];    /* ImageNet's: 0.485,0.456,0.406 / 0.229,0.224,0.225 */
    ra_transform eval;        /* train = 0 */
    int workers;              /* threads of the pool (0: decode on the calling
                                 thread's ra_threads_get() threads, no queue) */
    int depth;                /* batches decoded ahead: 2 */
    int skip_bad;
    int64_t max_pixels;       /* per image: 64 megapixels */
    /* Videos (a folder of ra_video_folder_scan) when clip_len > 0: a sample
     * is a clip x (3, T, S, S), T = clip_len. Training: the frames of
     * ra_clip_indices_train(clip_len, frame_interval) at a random first
     * frame; with random_crop, each frame's shorter side to short_side
     * (ra_resize_bilinear_tensor_u8, the longer int(short_side * long /
     * short)), then one RandomResizedCrop box for the whole clip (scale,
     * ratio, as for images), each frame's box resized to S x S with interp
     * (PIL's bytes); without, each frame through video_eval's frame
     * transform; the whole clip flipped with probability hflip; then the
     * table of video_eval.frame (rescale, normalise, its mean and std; mean
     * and std above are not used). RandAugment, erasing and grey are
     * refused. Evaluation: the centre clip (ra_clip_indices, mmaction,
     * one clip of clip_len at frame_interval) through video_eval (one crop,
     * S x S): ra_video_clips. The draws of a training sample: the first
     * frame, RandomResizedCrop's box, the flip. */
    int clip_len, frame_interval, short_side;
    ra_video_transform video_eval;
} ra_loader_config;
typedef struct ra_loader ra_loader;   /* opaque */

/* The two random geometric draws of the training transform, for tests and
 * other pipelines. RandomResizedCrop's box (x0, y0, width, height) in a
 * w x h image (timm's get_params, as described above; scale within (0, 1],
 * 0 < ratio[0] <= ratio[1]). RandomErasing of x (c, H, W) with probability
 * p: 1 and the box (x0, y0, width, height) if it erased one, else 0. */
void ra_random_resized_crop(int w, int h, const double scale[2], const double ratio[2],
                            ra_rng *rng, int box[4]);
int ra_random_erasing(float *x, int c, int H, int W, double p, ra_rng *rng, int box[4]);

/* The defaults above (train = 1, size 224, batch 64, workers 2). */
ra_loader_config ra_loader_config_default(void);
/* f and idx are borrowed (idx NULL: the first n images) and must outlive
 * the loader. RA_ERR_ARG for a configuration out of range, n < B in
 * training. */
ra_status ra_loader_create(ra_loader **out, const ra_image_folder *f, const int64_t *idx,
                           int64_t n, const ra_loader_config *cfg);
void ra_loader_free(ra_loader *l);   /* stops the workers */
/* x (b, C, S, S) (C: 1 with eval.grey, else 3), labels (b), bad (b; may be
 * NULL): batch `step`; *b its
 * images (B; the last of an evaluation fewer). Asking for the next step
 * keeps the queue full; any other step restarts it there. */
ra_status ra_loader_batch(ra_loader *l, int64_t step, float *x, int32_t *labels, uint8_t *bad,
                          int *b);
int64_t ra_loader_images(const ra_loader *l);    /* n */
int64_t ra_loader_batches(const ra_loader *l);   /* per epoch: n / B (train), ceil (eval) */
int ra_loader_classes(const ra_loader *l);       /* the folder's */
int64_t ra_loader_skipped(const ra_loader *l);   /* images that did not decode, so far */
const ra_loader_config *ra_loader_config_of(const ra_loader *l);

/* ---- methods ------------------------------------------------------------ */

/* Assemble a training batch of the samples idx[0..b):
 *   x (B, C, H, W) = (p / 255 - mean) / std for each pixel byte p, computed
 *     in float32 exactly as torchvision's ToTensor then Normalize;
 *   labels (B) the samples' labels.
 * Augmentation as torchvision's RandomCrop((H, W), padding=pad) then
 * RandomHorizontalFlip(0.5): with pad > 0 the image is padded with pad
 * zero pixels on every side (0 before normalisation) and an H x W window is
 * taken at row offset i and column offset j, each uniform in [0, 2*pad];
 * with flip != 0 the result is mirrored left-right with probability 1/2.
 * Per sample, in order, the numbers drawn from rng are: i then j (when
 * pad > 0), then one ra_rng_u64 whose top bit set means mirror (when
 * flip != 0). A draw below m (here and in ra_shuffle) is ra_rng_u64() % m,
 * drawn again while the 64 bits are below 2^64 mod m (so it is unbiased).
 * Nothing is drawn without augmentation (rng may then be NULL), so the
 * same rng state gives the same batch. RA_ERR_ARG for b < 1, an index
 * outside [0, n), pad outside [0, 4096], std not > 0, mean or std not
 * finite, a NULL argument. */
ra_status ra_dataset_batch(float *x, int32_t *labels, const ra_dataset *d,
                           const int64_t *idx, int b, float mean, float std,
                           int pad, int flip, ra_rng *rng);

/* perm (n) = a uniformly random permutation of 0..n-1 (an epoch's order):
 * Fisher-Yates: perm = 0..n-1, then for i = n-1 down to 1 swap perm[i]
 * with perm[j], j a draw below i + 1 (as in ra_dataset_batch). n <= 0
 * does nothing. */
void ra_shuffle(int64_t *perm, int64_t n, ra_rng *rng);

/* ======================================================================== */
/* 16. Training: ra_trainer                                                  */
/* ======================================================================== */

/* timm's Mixup / CutMix in batch mode (timm/data/mixup.py, Mixup with
 * mode='batch', correct_lam=True, no cutmix_minmax): one lambda for the
 * whole batch, image i mixed with image B-1-i (x.flip(0)), and the soft
 * targets for ra_cross_entropy_soft_forward. Field values are those of
 * Swin's and timm's ImageNet recipes. */
typedef struct ra_mixup {
    float mixup_alpha;    /* Beta(a, a) of mixup: 0.8; 0 off */
    float cutmix_alpha;   /* Beta(a, a) of cutmix: 1.0; 0 off */
    float prob;           /* the chance that a batch is mixed at all: 1.0 */
    float switch_prob;    /* the chance of cutmix rather than mixup when both
                             are on: 0.5 */
    float smoothing;      /* label smoothing of the targets: 0.1 */
} ra_mixup;

/* Mix the batch x (B, C, H, W) in place with its reverse and write the
 * targets (B, K) for labels (B) in [0, K):
 *   targets[i] = lam * onehot_s(labels[i]) + (1 - lam) * onehot_s(labels[B-1-i])
 * onehot_s = smoothing / K off, 1 - smoothing + smoothing / K on (float32,
 * each product rounded, as timm's mixup_target).
 *   mixup:  x = lam x + (1 - lam) flip(x), computed as timm: flip(x) * (1 -
 *           lam), then x * lam + that, float32, lam rounded to a float;
 *   cutmix: a box of side ratio r = sqrt(1 - lam) (double) at a uniform
 *           centre, timm's rand_bbox: cut_h = (int)(H r), cut_w = (int)(W r),
 *           cy below H, cx below W, y0 = clamp(cy - cut_h / 2, 0, H),
 *           y1 = clamp(cy + cut_h / 2, 0, H) (integer halves), x0, x1 alike;
 *           flip(x)'s pixels replace x's inside rows [y0, y1), columns
 *           [x0, x1) of every channel, and lam = 1 - (y1 - y0)(x1 - x0) / (H W).
 * The numbers drawn from rng, in order: a uniform u (the batch is mixed iff
 * u < prob; nothing more is drawn otherwise, lam = 1); when both alphas are
 * > 0, a uniform s (cutmix iff s < switch_prob); lam ~ Beta(a, a) of the
 * chosen kind (below); for cutmix with lam < 1, cy then cx (each a draw
 * below m as in ra_dataset_batch). A drawn lam of exactly 1 leaves x as it
 * is (timm returns early). Beta(a, a) = X / (X + Y), X then Y ~ Gamma(a)
 * by Marsaglia and Tsang (2000): for a >= 1 with d = a - 1/3,
 * c = 1 / sqrt(9 d), repeat {z = ra_rng_normal (2 uniforms), v = (1 + c z)^3
 * (z drawn again while v <= 0), u uniform} until u < 1 - 0.0331 z^4 or
 * log u < z^2 / 2 + d (1 - v + log v); the value is d v. For a < 1,
 * Gamma(a + 1) that way, then one uniform u: Gamma(a + 1) u^(1/a) (kept in
 * logarithms so it cannot underflow). Not timm's stream (NumPy's), the same
 * distribution. *lam_out gets the lam of the targets (1 when not mixed);
 * lam_out may be NULL. RA_ERR_ARG (nothing written, nothing drawn) for an
 * odd B (timm's rule), B, C, H, W or K < 1, a label outside [0, K), a NULL
 * argument (but lam_out), an alpha not 0 nor in [1e-3, 1e4], both alphas 0,
 * prob, switch_prob or smoothing outside [0, 1]. */
ra_status ra_mixup_apply(float *x, float *targets, const int32_t *labels, int b, int c, int h,
                         int w, int k, const ra_mixup *mx, ra_rng *rng, float *lam_out);

/* The deterministic part of ra_mixup_apply, for tests and for callers with
 * their own draws: mix x (B, C, H, W) and write targets (B, K) with the
 * given lam; cutmix != 0 pastes the box rows [y0, y1), columns [x0, x1)
 * (as timm's cutmix_bbox_and_lam returns it; lam already corrected by the
 * caller), cutmix == 0 mixes with lam (lam == 1 leaves x untouched, as
 * timm). Same checks as ra_mixup_apply, and lam in [0, 1], smoothing in
 * [0, 1], 0 <= y0 <= y1 <= H, 0 <= x0 <= x1 <= W for a cutmix. */
ra_status ra_mixup_with(float *x, float *targets, const int32_t *labels, int b, int c, int h,
                        int w, int k, float smoothing, float lam, int cutmix, int y0, int y1,
                        int x0, int x1);

/* An image classifier (docs/training.md) trained on an ra_dataset with the
 * recipe of Swin's own training code, scaled to a small machine: AdamW (the
 * Swin no-decay rule: biases, norms, bias tables, position embeddings and
 * every 1-D tensor take no weight decay), timm's per-step cosine schedule
 * with warm-up, label smoothing, gradient-norm clipping, torchvision's
 * RandomCrop(padding) and RandomHorizontalFlip.
 *
 * Determinism: step t (0-based) of a run trains on batch t mod E of epoch
 * t / E (E = steps per epoch = n / batch, the last partial batch dropped),
 * whose order is a permutation drawn from (seed, epoch), with augmentation
 * drawn from (seed, t). Nothing else is random, so a run is a function of
 * (model, data, configuration, thread count) and a checkpoint needs only
 * the weights, the AdamW moments and t to continue it exactly. */
typedef struct ra_train_config {
    int batch;               /* global batch: 64 */
    int epochs;              /* the schedule's length: 20 */
    double lr;               /* peak learning rate: 2e-3 */
    double min_lr;           /* the cosine's floor: 1e-5 */
    double warmup_lr;        /* the warm-up's start: 1e-6 */
    double warmup_epochs;    /* 0.5 */
    double weight_decay;     /* 0.05 */
    float label_smoothing;   /* 0.1 */
    float clip_grad;         /* max gradient 2-norm: 5; 0 = no clipping */
    int crop_pad;            /* RandomCrop padding: 0 (no crop; 2 is torchvision's
                                recipe, which learns more slowly in a
                                short run) */
    int flip;                /* RandomHorizontalFlip(0.5): 1 */
    float mean, std;         /* input normalisation: Fashion-MNIST's 0.2860, 0.3530 */
    uint64_t seed;           /* 0 */
    double ema_decay;        /* an exponential moving average of the weights,
                                avg += (1 - ema_decay) (w - avg) after every
                                step, evaluated and saved in their place:
                                0 (off), or in [0.5, 1) */
    float mixup_alpha;       /* ra_mixup of every batch (after the augmentation,
                                label_smoothing in its targets, the loss against
                                them): 0 (off; Swin's recipe: 0.8) */
    float cutmix_alpha;      /* 0 (off; Swin's recipe: 1.0) */
    float mix_prob;          /* 1 */
    float switch_prob;       /* 0.5 */
    int shuffle;             /* each epoch in an order drawn from (seed, epoch): 1; 0: the
                                data's order (batch b is images bB .. bB + B - 1) */
    int sched;               /* the learning rate: 0 timm's cosine with warm-up, 1 constant lr */
    int freeze;              /* 1: train the head alone (head.*; a linear probe), the rest
                                frozen (not in the gradient's norm, no AdamW step) */
    int accum;               /* gradient accumulation: each batch runs as accum
                                micro-batches of batch / accum images one after the
                                other (the same gradient, in less memory): 1 */
    double layer_decay;      /* layer-wise learning-rate decay (BEiT, the Swin
                                authors' fine-tuning): parameter of layer l of
                                L + 2 learns at lr * layer_decay^(L + 1 - l)
                                (ra_param_layer); 0 or 1: off */
} ra_train_config;

ra_train_config ra_train_config_default(void);

/* Tensor names of the optimiser state in a checkpoint, never a parameter's:
 * "__optim__.exp_avg.NAME", "__optim__.exp_avg_sq.NAME" (PyTorch's AdamW
 * state names), and "__optim__.weights.NAME" (the weights being trained,
 * when the parameters are their average: ema_decay). The model loader skips tensors with this prefix, so a
 * checkpoint is a model file like any other. */
#define RA_TRAIN_STATE_PREFIX "__optim__."

typedef struct ra_trainer ra_trainer;   /* opaque */

/* ---- constructors and destructor ---------------------------------------- */

/* A trainer of model m (trainable, a classifier taking (B, 1 or C, H, W)
 * images of the dataset's size) on data; both are borrowed and must outlive
 * it. RA_ERR_ARG for a configuration out of range or a dataset smaller than
 * one batch. */
ra_status ra_trainer_create(ra_trainer **out, ra_model *m, const ra_train_config *cfg,
                            const ra_dataset *data);
/* The same on the batches of a training loader (ra_loader, batch cfg->batch;
 * borrowed): RGB images of its size, its augmentation, its order. */
ra_status ra_trainer_create_loader(ra_trainer **out, ra_model *m, const ra_train_config *cfg,
                                   ra_loader *loader);

/* Continue from a checkpoint written by ra_trainer_save: *m is loaded from
 * it (in the precision it trained in: metadata train.precision), *out gets
 * its configuration, AdamW moments and step count, on data. Its recipe
 * metadata is checked before anything runs (RA_ERR_FORMAT for a tta other
 * than none or flip, as ra_model_predict would refuse it later). */
ra_status ra_trainer_resume(ra_trainer **out, ra_model **m, const char *path,
                            const ra_dataset *data);
ra_status ra_trainer_resume_loader(ra_trainer **out, ra_model **m, const char *path,
                                   ra_loader *loader);
/* The configuration a checkpoint of ra_trainer_save holds (before its
 * data are loaded: a loader draws by its seed, batch and shuffle). */
ra_status ra_train_config_load(ra_train_config *c, const char *path);

void ra_trainer_free(ra_trainer *t);

/* ---- methods ------------------------------------------------------------ */

/* One optimiser step on the next batch: *loss the batch's mean loss (with
 * label smoothing), *grad_norm the gradient's 2-norm before clipping
 * (either may be NULL). A non-finite loss or gradient (a learning rate too
 * high) is RA_ERR_ARG, with the weights left as they were before the step. */
ra_status ra_trainer_step(ra_trainer *t, float *loss, float *grad_norm);

int64_t ra_trainer_step_count(const ra_trainer *t);      /* steps done */
int64_t ra_trainer_steps_per_epoch(const ra_trainer *t);
int64_t ra_trainer_total_steps(const ra_trainer *t);     /* epochs * steps_per_epoch */
double ra_trainer_lr(const ra_trainer *t);               /* the next step's learning rate */
const ra_train_config *ra_trainer_config(const ra_trainer *t);

/* The average of the weights (ema_decay > 0) in the model instead of the
 * weights it trains (on = 1), or back (on = 0): the two are swapped in
 * place, nothing allocated. Evaluate or save the model between the two
 * calls; ra_trainer_step refuses to run while the average is in
 * (RA_ERR_ARG). Without an average it does nothing. */
ra_status ra_trainer_use_average(ra_trainer *t, int on);

/* Data parallelism over several processes (MPI ranks under mpirun, or any
 * transport that can sum buffers): the caller gives the collectives, the
 * library stays free of MPI. Each of `size` processes runs a trainer on the
 * same model, data and configuration; process `rank` takes images
 * [B*rank/size, B*(rank+1)/size) of every global batch of B (--batch stays
 * the global batch), and the gradients and the loss are summed over the
 * processes by one allreduce_sum per step, so every process makes the same
 * optimiser step. With size 1 nothing is sent.
 *
 * With shard_optimizer (ZeRO-1), each process keeps the AdamW moments of a
 * run of whole parameter tensors only (about 1/size of them, by size); a
 * step is then reduce_scatter_sum of the gradients (each process gets the
 * sum of its own run), one allreduce_sum of two floats (the loss and the
 * squared norm), AdamW on the own run and allgather of the weights.
 * Checkpoints are the same either way: ra_trainer_save gathers the moments,
 * so every process must call it; process 0 alone writes. Every collective
 * must give every process the same bits (MPI's built-in sums do). */
typedef struct ra_train_comm {
    int rank, size;
    void *ctx;
    /* n floats summed over the processes, in place */
    ra_status (*allreduce_sum)(float *buf, int64_t n, void *ctx);
    /* ZeRO-1 only (else NULL). Process r's part of buf is [off[r], off[r] +
     * count[r]); reduce_scatter_sum leaves in each process's own part the
     * sum of that part over the processes (the rest of buf undefined);
     * allgather copies every process's part to every process. */
    ra_status (*reduce_scatter_sum)(float *buf, const int64_t *off, const int64_t *count,
                                    void *ctx);
    ra_status (*allgather)(float *buf, const int64_t *off, const int64_t *count, void *ctx);
} ra_train_comm;

/* Attach comm (copied) to t; RA_ERR_ARG for a rank out of range, a batch
 * smaller than size, or ZeRO without its collectives. */
ra_status ra_trainer_set_comm(ra_trainer *t, const ra_train_comm *comm, int shard_optimizer);

/* Floats of AdamW state this process keeps (2 per parameter, or 2 per
 * parameter of its run with ZeRO-1). */
int64_t ra_trainer_optimizer_floats(const ra_trainer *t);

/* Write a checkpoint atomically: the model's metadata and parameters (a
 * model file, docs/reference.md, section 2, canonical names), the
 * configuration, the step count and the model's precision if not fp32
 * ("train.precision": bf16; the file stays float32) as metadata
 * "train.*", the AdamW moments under
 * RA_TRAIN_STATE_PREFIX, and nextra extra metadata pairs (key, value, ...)
 * such as a training log. With an average of the weights (ema_decay > 0)
 * the parameters are the average, what every other command then loads,
 * and the weights being trained are under RA_TRAIN_STATE_PREFIX
 * "weights.NAME". With a comm of several processes, every process
 * calls it and process 0 alone writes (see ra_train_comm). */
ra_status ra_trainer_save(const ra_trainer *t, const char *path, const char *const *extra,
                          int nextra);

/* ---- evaluation (of any classifier) ------------------------------------- */

/* What ra_evaluate gives on the model of the checkpoint ra_trainer_save
 * would write now: the average of the weights if the run keeps one, in
 * float32 whatever the training precision (the checkpoint is float32, and
 * relattn eval loads it so), normalised with the configuration's mean and
 * std: the count relattn eval reproduces. */
ra_status ra_trainer_evaluate(ra_trainer *t, const ra_dataset *data, int batch, int64_t *correct,
                              int64_t *confusion, int k);
/* The same on the batches of an evaluation loader (train = 0): images it
 * marked bad are left out, *seen those counted. */
ra_status ra_trainer_evaluate_loader(ra_trainer *t, ra_loader *l, int64_t *correct,
                                     int64_t *confusion, int k, int64_t *seen);

/* Classification accuracy of model m on data (no augmentation, normalised
 * with mean/std), in batches of `batch`: *correct of data->n; confusion
 * (K, K) counts [true][predicted] for K = the model's classes, or NULL.
 * Uses the inference forward as a classifier predicts (ra_model_predict:
 * with metadata tta = flip, the mean over each image and its mirror). */
ra_status ra_evaluate(const ra_model *m, const ra_dataset *data, float mean, float std,
                      int batch, int64_t *correct, int64_t *confusion, int k);
/* The class ra_evaluate gives each of data's images (the first of equal
 * maxima of its outputs), into pred (data->n). */
ra_status ra_predict(const ra_model *m, const ra_dataset *data, float mean, float std,
                     int batch, int32_t *pred);

/* ======================================================================== */
/* 17. Pictures: ra_png_write, ra_plot_* (PNG files)                         */
/* ======================================================================== */

/* Every picture is written as an 8-bit RGB PNG (libspng), atomically as
 * the safetensors writer: PATH.tmp.XXXXXX in the same directory, fsync,
 * rename; on failure nothing exists at path (RA_ERR_WRITE). Pictures are
 * labelled with relattn's own 5x7 bitmap font (printable ASCII; anything
 * else is drawn as '?'). A picture larger than the limits below is refused
 * (RA_ERR_ARG) before anything is allocated. NULL titles and labels are
 * simply left out. */
#define RA_PNG_MAX_SIDE 16384              /* pixels, width and height      */
#define RA_PNG_MAX_PIXELS (1 << 26)        /* 64 megapixels                 */

/* rgb (h, w, 3) bytes, row-major, top row first. */
ra_status ra_png_write(const char *path, const uint8_t *rgb, int w, int h);

/* Heat maps of learned relative position bias tables, Swin's layout: for
 * each head a (2Wh-1) x (2Ww-1) grid whose row is dy = yq - yk and whose
 * column is dx = xq - xk (top-left cell dy = dx = -(W-1)), the cell being
 *   table[((dy + Wh - 1) * (2Ww - 1) + (dx + Ww - 1)) * nH + h],
 * i.e. exactly the row of the table that ra_relpos_index_2d points to.
 * Cells are squares of 4..16 px (as large as fits ~190 px per head); small
 * ticks mark dy = 0 and dx = 0 and the first head of each row is labelled
 * with its dy / dx range. Colours are diverging, blue (negative) - white
 * (0) - red (positive), symmetric around 0; a colour bar gives the limits.
 *
 * Several tables make one picture (a whole model in one call): one row of
 * heads per table, labelled (e.g. "stage 1 block 0"), heads wrapped after
 * 12 per line. Tables may differ in window and head count. */
typedef struct ra_plot_table {
    const float *table;      /* (T, nH), T = (2Wh-1)(2Ww-1) */
    int nh, wh, ww;
    const char *label;       /* row label, or NULL */
} ra_plot_table;

typedef enum ra_plot_scale {
    RA_PLOT_SCALE_SHARED = 0,    /* one scale, max |value| over every table
                                    and head, one colour bar: colours compare
                                    across the whole picture */
    RA_PLOT_SCALE_PER_TABLE = 1  /* max |value| per table, a colour bar per
                                    row: for tables of very different size */
} ra_plot_scale;

ra_status ra_plot_bias_tables(const char *path, const ra_plot_table *tables, int ntables,
                              ra_plot_scale scale, const char *title);
/* One table: ra_plot_bias_tables with one unlabelled row. */
ra_status ra_plot_bias_table(const char *path, const float *table, /* (T, nH) */
                             int nh, int wh, int ww, const char *title);

/* Attention maps over an image: one row per query, the input image with
 * the query's cell outlined in cyan, then one panel per head with that
 * query's attention probabilities as a heat overlay (an inferno-like
 * sequential colour map, black - purple - orange - pale yellow) blended
 * over the darkened grey image. The overlay's opacity and colour are
 * p / max p of the panel (each panel is normalised to its own maximum,
 * printed under it), so that the pattern shows even when p is spread over
 * hundreds of tokens. Panels are the image scaled up (nearest) to about
 * 170 px (8x at most, 6x for 28 x 28) or down to 512 px at most.
 *   image   (h, w, channels) in [0, 1], channels 1 (grey) or 3 (RGB)
 *   maps    (nQ, nH, gh, gw) probabilities over a gh x gw token grid that
 *           covers the image (grid cell (i, j) covers image rows
 *           [i*h/gh, (i+1)*h/gh) and columns likewise), e.g. 7 x 7 for a
 *           28 x 28 image cut into 4 x 4 patches, or h x w per pixel
 *   queries (nQ, 2) the query tokens' (row, column) in the grid. */
ra_status ra_plot_attention(const char *path, const float *image, int h, int w, int channels,
                            const float *maps, int nq, int nh, int gh, int gw,
                            const int *queries, const char *title);

/* Curves of training: line plots (2 px) in panels side by side (e.g. loss
 * | accuracy), each with x and y axes, nice ticks with numbers, a light
 * grid and a legend in its emptiest corner. The axes span the data
 * widened to the nearest ticks. Series of the same name share a colour
 * across panels (ten distinct colours, then they repeat). Non-finite
 * values leave a gap in the line. */
typedef struct ra_plot_series {
    const char *name;        /* legend text (NULL: no legend entry) */
    const float *x;          /* (n) step or epoch; NULL for 0, 1, ..., n-1 */
    const float *y;          /* (n) */
    int n;
    int panel;               /* 0 .. npanels-1 */
} ra_plot_series;

/* panel_titles: npanels titles (e.g. {"loss", "accuracy"}), or NULL;
 * xlabel under every panel ("step", "epoch"), or NULL. 1 <= npanels <= 4. */
ra_status ra_plot_curves(const char *path, const ra_plot_series *series, int nseries,
                         const char *const *panel_titles, int npanels, const char *xlabel,
                         const char *title);

/* ======================================================================== */
/* Former names, kept for source compatibility                              */
/* ======================================================================== */
typedef ra_window_spec ra_window_geom;                          /* ra_window_spec */
#define ra_attn_layer_forward_ex ra_attn_layer_forward_grid     /* the same call */
#define ra_attn_layer_backward_ex ra_attn_layer_backward_grid   /* the same call */

#ifdef __cplusplus
}
#endif
#endif /* RELATTN_H */
