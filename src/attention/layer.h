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
