/* internal.h - the attention layer's object, shared by its pass
 * (src/attention/layer.c) and the relative position schemes' hooks into it
 * (src/attention/schemes.c: T5 buckets, ALiBi, decomposed, RoPE). */
#ifndef RA_ATTN_INTERNAL_H
#define RA_ATTN_INTERNAL_H

#include "base/internal.h"

struct ra_attn_layer {
    ra_attn_config cfg;
    ra_attn_params p;
    int hd;
    int inner;             /* E = nH * hd, the width of q, k, v (C but for t5) */
    float scale;
    int n1, n2;            /* tokens fixed by the window or grid (0: any) */
    int32_t *idx;          /* (N1, N2) bias index, window archs   */
    int32_t *rel2;         /* (N, N) 2-D Shaw index (shaw_window)  */
    int64_t table_rows;
    float *slopes;         /* (nH) alibi slopes                    */
    float *rope;           /* (H*W, hd/2, 2) rope cos, sin         */
    float *coords;         /* swinv2: (T, 2) CPB input (attention/cpb.h)  */
    struct rai_arena_cache *cache;   /* the scratch of the calls, kept between
                                       them (layer.c's pass_begin) */
};

/* The position terms of one call (one set for all the parts of a batch):
 * what is added to the core's description, built from the layer and the
 * call's sizes by rai_pos_begin, freed by rai_pos_end. */
typedef struct rai_pos_call {
    int32_t *idx;             /* (N1, N2) bias index: t5 buckets, alibi |i-j| */
    const float *table;       /* (T, nH) t5's learned or alibi's computed */
    float *own_table;
    int64_t table_rows;
    float *mask;              /* (nW, N1, N2) causal (with the caller's mask) */
    int nw;
    int32_t *rel;             /* Shaw-style index: shaw clip (by j - i) or the
                                 decomposed (N, N) index of Rh's rows */
    int32_t *rel2;            /* decomposed: (N, N) index of Rw's rows */
    int own_rel;              /* rel was allocated here (not the layer's) */
    int64_t rel_ld, rel_off;  /* row stride; the core's rel is rel + rel_off */
    const float *rel_k, *rel_v;
    float *own_rel_k;         /* decomposed: Rh' / scale then Rw' / scale */
    int r;
    int gh, gw;               /* decomposed: the call's grid */
    float *cpb;               /* swinv2: [table (T, nH) | its gradient | the
                                 CPB's scratch] of the call (layer.c) */
} rai_pos_call;

/* Scheme part of ra_attn_layer_create: checks the scheme's configuration
 * and params, builds what is fixed (slopes, rope angles, token counts). */
ra_status rai_scheme_create(ra_attn_layer *l);
void rai_scheme_free(ra_attn_layer *l);
/* The scheme's token rule (RA_OK for archs without one). grid may be NULL. */
ra_status rai_scheme_check_tokens(const ra_attn_layer *l, int n1, int n2, const int grid[2]);

/* Build the call's position terms (mask, nw: the caller's, may be NULL). */
ra_status rai_pos_begin(rai_pos_call *pc, const ra_attn_layer *l, int n1, int n2,
                        const int grid[2], const float *mask, int nw);
void rai_pos_end(rai_pos_call *pc);
/* Copy the terms into a core description (bias, mask, Shaw tables). */
void rai_pos_desc(const rai_pos_call *pc, const float *mask, int nw, ra_attn_desc *d);
/* Floats of the call's own table gradient (decomposed: R * hd), 0 if none. */
size_t rai_pos_drel_floats(const rai_pos_call *pc, const ra_attn_layer *l);
/* The decomposed tables' gradients from the combined table's (R, hd):
 * ACCUMULATED into drel_h (2H-1, hd), drel_w (2W-1, hd) (either may be
 * NULL), through the resampling. RA_ERR_NOMEM if its scratch fails. */
ra_status rai_pos_backward(const rai_pos_call *pc, const ra_attn_layer *l, const float *drel,
                     float *drel_h, float *drel_w);

/* RoPE on the patch tokens of q and k (B_, N, ld) at columns h*hd + d, in
 * place; inverse: the transposed rotation (for dq, dk). No-op for other archs. */
void rai_rope_rotate(const ra_attn_layer *l, float *q, float *k, int ld, int b_, int n,
                     int inverse);

#endif
