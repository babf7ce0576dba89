/* infer.h - inference paths of the networks (private): a reusable
 * workspace, row-gathering LayerNorm and row-scattering residual adds (the
 * window partition / reverse fused into the layers around attention), the
 * attention layer on a caller's workspace. Shared by swin.c and vit.c. */
#ifndef RA_INFER_H
#define RA_INFER_H

#include "internal.h"

#include <stdatomic.h>

/* ---- workspace ------------------------------------------------------------
 * An arena: allocations are carved from one block, 64-byte aligned, and
 * released stack-wise (ra_arena_mark / ra_arena_reset). A request that does
 * not fit is served by its own allocation, which takes its place on the
 * stack and is freed when the stack unwinds past it; the deepest the stack
 * went is remembered, so the next run gets one block of the right size:
 * after the first forward of a given shape nothing is allocated, and the
 * pages are already mapped (first-touch page faults of fresh large
 * allocations cost as much as the element-wise layers). The first run
 * itself holds no more memory at once than that depth. */
typedef struct ra_arena {
    char *base;
    size_t cap;           /* bytes of the block */
    size_t used;          /* depth of the stack, in the block or in spills */
    size_t peak;          /* the deepest it went */
    void *spill;          /* allocations that did not fit, the newest first */
} ra_arena;

/* A model's cached arenas: up to RA_ARENA_SLOTS forwards at a time (threads
 * sharing the model) each keep one between calls; one more gets a private
 * arena (plain allocations). */
#define RA_ARENA_SLOTS 8
typedef struct ra_arena_cache {
    atomic_int busy[RA_ARENA_SLOTS];
    ra_arena arena[RA_ARENA_SLOTS];
} ra_arena_cache;

/* Take a free arena of the cache (or a fresh one if all are taken). */
ra_arena *ra_arena_begin(ra_arena_cache *c, ra_arena *local);
/* Free the spills; give the cache's arena back, grown to the peak. */
void ra_arena_end(ra_arena_cache *c, ra_arena *a);
void ra_arena_cache_free(ra_arena_cache *c);
/* n floats (64-byte aligned), NULL if out of memory. */
float *ra_arena_floats(ra_arena *a, size_t n);
void *ra_arena_bytes(ra_arena *a, size_t bytes);
static inline size_t ra_arena_mark(const ra_arena *a) { return a->used; }
/* Release what was allocated since mark (spills are freed). */
void ra_arena_reset(ra_arena *a, size_t mark);

/* ---- element-wise layers (nn.c) ------------------------------------------- */

/* 1 when the vectorised layers are in use (AVX2 + FMA CPU and kernel not
 * forced to ref). */
int ra_nn_simd(void);

/* y row r = LayerNorm(x row src[r]) (src NULL: row r), a row of zeros where
 * src[r] < 0; rows in parallel. No statistics are saved (inference). */
void ra_layernorm_rows(float *y, const float *x, const int32_t *src, int64_t rows, int c,
                       const float *gamma, const float *beta, float eps);

/* y row r = x row map[r], or zeros where map[r] < 0. */
void ra_rows_gather(float *y, const float *x, const int32_t *map, int64_t rows, int c);
/* x row dst[r] += a row r for dst[r] >= 0 (distinct rows: no races). */
void ra_rows_scatter_add(float *x, const float *a, const int32_t *dst, int64_t rows, int c);

/* A Linear layer with its neighbours fused: r = x (M, K) . w (N, K)^T + b
 * (b may be NULL), then r = GELU(r) if gelu; then either y = r or, with
 * res, res row map[i] += r row i (map NULL: row i; negative: skipped;
 * rows of N floats). y (M, N) is always given: the fallback path (OpenBLAS
 * and the separate loops, with the same results) works in it. */
void ra_linear_epi(float *y, const float *x, const float *w, const float *b, int64_t m, int n,
                   int k, int gelu, float *res, const int32_t *map);

/* ra_linear_backward with dx overwritten instead of accumulated if set,
 * and, with gd (M, K), dx = (dy . w) * gd (set implied): with the gd of
 * ra_linear_gelu_keep, the GELU before the layer back-propagated in the
 * same product. */
void ra_linear_backward_ex(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *w, int64_t m, int n, int k, int set, const float *gd);
/* g (M, N) = GELU(h) and gd = GELU'(h), h = x . w^T + b, in one pass on
 * the AVX-512 path (the training forward of an MLP's first layer keeps
 * what its backward multiplies by, rather than h: the backward then needs
 * no erf and no exp). */
void ra_linear_gelu_keep(float *gd, float *g, const float *x, const float *w, const float *b,
                         int64_t m, int n, int k);

/* ---- windows (window.c) ----------------------------------------------------
 * map (B*nW*N) = for each window token of ra_window_partition's output, the
 * row of x (B, D, H, W) it copies, or -1 for padding. Rows of x must fit in
 * int32 (RA_ERR_ARG otherwise). */
ra_status ra_window_rowmap(int32_t *map, int b, const ra_window_geom *g);

/* ---- attention layer on a caller's workspace (attn_layer.c) ---------------- */

/* Bytes of workspace ra_attn_layer_forward_ws needs; 0 if the sizes are
 * invalid (the forward then reports why). */
size_t ra_attn_layer_forward_ws_size(const ra_attn_layer *l, int b_, int n1, int n2);
/* ra_attn_layer_forward with its scratch taken from work (ws bytes); with
 * res, the output is added into res rows through map as ra_linear_epi does
 * (y is then scratch). */
ra_status ra_attn_layer_forward_ws(const ra_attn_layer *l, float *y, float *attn,
                                   const float *x, const float *kv, int b_, int n1, int n2,
                                   const float *mask, int nw, void *work, size_t ws,
                                   float *res, const int32_t *map);

/* Bytes of workspace ra_attn_layer_backward_ws needs (saved: with the
 * forward's workspace given); 0 if the sizes are invalid. */
size_t ra_attn_layer_backward_ws_size(const ra_attn_layer *l, int b_, int n1, int n2,
                                      int saved);
/* ra_attn_layer_backward (y not rewritten) with its scratch taken from work
 * (ws bytes); dx_set: dx (B_, N1, C) is overwritten instead of accumulated
 * (dkv still accumulates). saved: the workspace of the ra_attn_layer_forward_ws call
 * that ran this forward, untouched since, whose projections and attention
 * output are then read instead of recomputed; or NULL (recomputed). */
ra_status ra_attn_layer_backward_ws(const ra_attn_layer *l, float *dx, float *dkv,
                                    const ra_attn_grads *g, const float *dy, const float *x,
                                    const float *kv, int b_, int n1, int n2, const float *mask,
                                    int nw, const void *saved, void *work, size_t ws,
                                    int dx_set);

#endif
