/* layer.h - the attention layer on a caller's workspace
 * (src/attention/layer.c), for the networks' forwards and backwards;
 * private to the library. */
#ifndef RA_ATTN_LAYER_H
#define RA_ATTN_LAYER_H

#include "base/internal.h"

/* Bytes of workspace rai_attn_layer_forward_ws needs; 0 if the sizes are
 * invalid (the forward then reports why). */
size_t rai_attn_layer_forward_ws_size(const ra_attn_layer *l, int b_, int n1, int n2);
/* ra_attn_layer_forward with its scratch taken from work (ws bytes); with
 * res, the output is added into res rows through map as rai_linear_fused does
 * (y is then scratch). */
ra_status rai_attn_layer_forward_ws(const ra_attn_layer *l, float *y, float *attn,
                                    const float *x, const float *kv, int b_, int n1, int n2,
                                    const float *mask, int nw, void *work, size_t ws,
                                    float *res, const int32_t *map);

/* Inference of a block's attention branch in chunks of g windows, each
 * chunk on one thread (of threads) from its rows to its outputs: res rows
 * map[r] += proj(attn(LayerNorm(x rows map[r]))) for the B_ windows of n
 * tokens, or with post LayerNorm(proj(attn(x rows map[r]))) (map NULL:
 * row r; negative: a padding token, zeros in and skipped out); x may be
 * res (a chunk reads its rows before it
 * adds into them, and no two chunks share a row). A chunk's projections,
 * core and output stay in its thread's cache; every number is the whole
 * call's (rai_attn_layer_forward_ws with the LayerNorm before it). */
struct rai_ln;
ra_status rai_attn_layer_forward_chunks(const ra_attn_layer *l, float *res, const float *x,
                                        const int32_t *map, const struct rai_ln *ln, int post,
                                        int b_, int n, const float *mask, int nw, int g,
                                        int threads);
/* The windows per chunk for B_ windows of n tokens on that many threads:
 * about 288 tokens, at least 4 chunks per thread; 0 when there
 * are too few windows (the whole call then), or for a layer with keys of
 * its own (cross-attention). */
int rai_attn_layer_chunk_windows(const ra_attn_layer *l, int b_, int n, int threads);
/* The tokens a chunk aims at (CHUNK_TOKENS; 0: no chunks, every call
 * whole), for the tests that compare the two; returns the one before. */
int rai_attn_chunk_tokens_set(int tokens);

/* Bytes of workspace rai_attn_layer_backward_ws needs (saved: with the
 * forward's workspace given); 0 if the sizes are invalid. */
size_t rai_attn_layer_backward_ws_size(const ra_attn_layer *l, int b_, int n1, int n2,
                                       int saved);
/* ra_attn_layer_backward (y not rewritten) with its scratch taken from work
 * (ws bytes); dx_set: dx (B_, N1, C) is overwritten instead of accumulated
 * (dkv still accumulates). saved: the workspace of the rai_attn_layer_forward_ws call
 * that ran this forward, untouched since, whose projections and attention
 * output are then read instead of recomputed; or NULL (recomputed). */
ra_status rai_attn_layer_backward_ws(const ra_attn_layer *l, float *dx, float *dkv,
                                     const ra_attn_grads *g, const float *dy, const float *x,
                                     const float *kv, int b_, int n1, int n2, const float *mask,
                                     int nw, const void *saved, void *work, size_t ws,
                                     int dx_set);

#endif
