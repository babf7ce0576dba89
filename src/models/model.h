/* model.h - how an architecture plugs into the model loader.
 *
 * Loading a model file is the same for every arch (src/models/model.c):
 *   1. ops->declare reads the hyperparameters from __metadata__ (with the
 *      ra_meta_* parsers below) and declares every parameter it needs with
 *      its canonical name (the official state_dict name, docs/reference.md section 2) and the
 *      shape the configuration implies;
 *   2. the loader maps each tensor of the file to a canonical name
 *      (ops->canonical, for the naming schemes of other code bases), checks
 *      dtype and shape, refuses what is missing or unexpected, and converts
 *      the weights into one flat F32 buffer in declaration order;
 *   3. ops->build binds pointers by name (rai_model_get), validates the
 *      buffers the file may carry (relative_position_index, attn_mask) and
 *      builds the runtime object kept in m->impl.
 * Each arch keeps its hyperparameters in its own impl. */
#ifndef RA_MODEL_INTERNAL_H
#define RA_MODEL_INTERNAL_H

#include "base/internal.h"

#include <string.h>

typedef struct rai_arch_ops rai_arch_ops;

/* The feature maps one forward hands out (ra_model_features): planned by
 * ops->features_plan for an input's shape, filled by ops->forward_features,
 * the same forward as ops->forward with a hand-out point after each stage
 * (Swin, Video Swin) or block (ViT). A 3-D network's maps have 5
 * dimensions, (B, T, H, W, C) / (B, C, T, H, W). */
enum { RAI_FEAT_NORM_NONE, RAI_FEAT_NORM_FINAL, RAI_FEAT_NORM_MODEL };
typedef struct rai_feat {
    int n;                              /* maps */
    int at[RA_MAX_FEATURES];            /* their stages or blocks, ascending */
    ra_layout layout;                   /* resolved: NHWC, NCHW or NLC */
    int norm;                           /* RAI_FEAT_NORM_* */
    int prefix;                         /* prefix tokens apart (vit): tokens a map has */
    int ndim[RA_MAX_FEATURES];          /* each map's shape, for the whole batch */
    int64_t shape[RA_MAX_FEATURES][5];
    int64_t per[RA_MAX_FEATURES];       /* floats of one sample's map */
    int64_t per_prefix;                 /* floats of one sample's prefix tokens (0: none) */
    float *out[RA_MAX_FEATURES];        /* where map i goes: (b, ...) for the batch run */
    float *pre[RA_MAX_FEATURES];        /* its prefix tokens (B, prefix, C), or NULL */
} rai_feat;

/* tok (B, L, C) token rows of a map into out in f's layout (NHWC and NLC
 * the rows as they are, NCHW transposed per sample): L is h*w of a 2-D
 * map, T*h*w of a 3-D one, whose channels-first layout is the same
 * transpose. */
void rai_feat_write(float *out, ra_layout layout, const float *tok, int B, int64_t L, int C);
/* Map i's shape in f's layout for B samples of nsp sides sp (h, w or
 * T, h, w) and C channels: (B, sp.., C), (B, C, sp..) or (B, L, C); and
 * its floats per sample. */
void rai_feat_shape(rai_feat *f, int i, int64_t B, int nsp, const int64_t *sp, int64_t C);
/* The shapes of the stage maps f wants of a hierarchical network (swin,
 * swinv2, swin3d): stage 0 of nsp sides sp and C channels, each patch
 * merging halving the last two sides (rounded up) and doubling C. */
void rai_feat_stage_shapes(rai_feat *f, int64_t B, int nsp, const int64_t *sp, int64_t C);
/* The map f wants of stage or block at (its index in f), or -1. */
int rai_feat_find(const rai_feat *f, int at);
/* tok (B, L, C) into map i of f, through the LayerNorm (nw, nb, eps) first
 * when nw is not NULL (its scratch from a, released). */
struct rai_arena;
ra_status rai_feat_put(const rai_feat *f, int i, struct rai_arena *a, const float *tok, int B,
                       int64_t L, int C, const float *nw, const float *nb, float eps);
/* The indices of o (count 0: def[0..ndef-1]; def NULL: all n) resolved against n stages or
 * blocks (negative from the end) into f->at, ascending and once each:
 * RA_ERR_ARG naming an index out of range, or for a layout or norm o's
 * enums do not have. what: "stage" or "block". */
ra_status rai_feat_indices(rai_feat *f, const ra_features_options *o, const int *def, int ndef,
                           int n, const char *what);

struct ra_model {
    const rai_arch_ops *ops;
    char scheme[32];          /* naming scheme of the file ("official", ...) */
    float *weights;           /* every parameter, in declaration order */
    int borrowed;             /* weights are another model's (a training replica's) */
    int64_t total;            /* floats in weights */
    ra_param_info *params;    /* declared parameters (names owned) */
    int nparams, cap;
    void *impl;               /* the arch's runtime object */
    char **meta;              /* the file's __metadata__: key, value, ... */
    int nmeta;
    /* training in shards (ra_model_forward_train of a batch on several
     * threads): replicas for shards 1.., made from meta (make_replicas), and their
     * gradients; the split of the last training forward (shards 1: none) */
    struct ra_model **rep;
    float **rgrad;
    int nrep, shards;
    int rep_failed;           /* a replica could not be made: not tried again */
    int64_t batch, per_x, per_y;
    ra_precision precision;   /* of the products (ra_model_set_precision) */
    struct rai_packed *packed; /* int8: the Linear weights packed once (nn/precision.h) */
};

/* What a file tensor is, for the loader. */
typedef enum {
    RA_TENSOR_PARAM,          /* a parameter: canonical name written */
    RA_TENSOR_BUFFER,         /* a buffer the arch validates in build() */
    RA_TENSOR_UNKNOWN         /* not of this arch: the file is refused */
} rai_tensor_kind;

struct rai_arch_ops {
    const char *name;         /* the "arch" metadata value */
    ra_arch arch;
    /* Networks whose x is a batch of samples along its first dimension,
     * each treated on its own: a batch may run in shards (src/models/model.c). */
    int batched;
    /* The model is one attention layer: impl is an rai_attn_impl. */
    int attn_layer;
    ra_status (*declare)(ra_model *m, const ra_st_file *f);
    /* Map a file tensor name to a canonical one (buf, n bytes). NULL means
     * names are canonical already and only declared names are parameters. */
    rai_tensor_kind (*canonical)(const ra_model *m, const char *name, char *buf, size_t n);
    /* Detect the naming scheme from the file's names (sets m->scheme);
     * NULL means "official". Runs before canonical(). */
    ra_status (*detect)(ra_model *m, const ra_st_file *f);
    ra_status (*build)(ra_model *m, const ra_st_file *f);
    void (*destroy)(void *impl);
    /* Network forward (swin_block, swin, vit): x of x_ndim dims, y
     * allocated with rai_alloc (free with rai_free), its shape written. NULL
     * for the attention layers, which the caller runs through their layer. */
    ra_status (*forward)(const ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                         const float *x, int x_ndim, const int64_t *x_shape);
    /* Training (NULL: not trainable). forward_train runs the forward as
     * forward does, keeping what backward needs in the impl (its tape);
     * backward accumulates into grad (the flat gradient, laid out like
     * m->weights; bind names with rai_model_grad) and dx (may be NULL). */
    ra_status (*forward_train)(ra_model *m, float **y, int *y_ndim, int64_t y_shape[4],
                               const float *x, int x_ndim, const int64_t *x_shape, ra_rng *rng);
    ra_status (*backward)(ra_model *m, float *grad, float *dx, const float *dy);
    /* Multiply-adds of one forward, counted as the Swin authors' flops()
     * methods do (see ra_model_flops); -1 if not known. */
    int64_t (*flops)(const ra_model *m, int h, int w);
    /* The layer of parameter name (canonical) for layer-wise learning-rate
     * decay (ra_param_layer), in [0, *count); NULL: the arch has none. */
    int (*layer_of)(const ra_model *m, const char *name, int *count);
    /* The windows m's stages were trained at, as the metadata value a model
     * derived from m at another window or size must keep
     * (pretrained_window_sizes: "w0,w1,.." into buf, n bytes); 0 when it
     * needs none. NULL: the arch has no such thing. */
    int (*trained_windows)(const ra_model *m, char *buf, size_t n);
    /* Feature maps (NULL: the arch has none): features_plan resolves o for
     * an input of that shape into f (indices, layout, norm, shapes);
     * forward_features is forward with f's maps written as it goes. */
    ra_status (*features_plan)(const ra_model *m, rai_feat *f, const ra_features_options *o,
                               int x_ndim, const int64_t *x_shape);
    ra_status (*forward_features)(const ra_model *m, const rai_feat *f, float **y, int *y_ndim,
                                  int64_t y_shape[4], const float *x, int x_ndim,
                                  const int64_t *x_shape);
};

/* The file the loader reads for a state_dict f without relattn metadata:
 * its names as the loader reads them and the metadata inferred
 * (src/models/source.c); f is left as it is and must outlive *out. */
ra_status rai_source_state_dict(ra_st_file **out, const ra_st_file *f);

/* Metadata of a source: the transformers naming scheme, which the names
 * no longer show once mapped (the loader sets ra_model_scheme from it). */
#define RAI_META_SCHEME RA_META_SOURCE "naming_scheme"

/* Load the model of file f, whose arch is ops (registry.c finds it). */
ra_status rai_model_open_arch(ra_model **out, const rai_arch_ops *ops, const ra_st_file *f);

/* How m predicts a class (metadata "tta"): *flip 1 for "flip", 0 for
 * "none" or no value; RA_ERR_FORMAT naming the value otherwise. What
 * ra_model_predict reads, and what a resumed run checks before its first
 * step. */
ra_status rai_model_tta(const ra_model *m, int *flip);
/* ra_model_create for the arch ops (NULL: the metadata names no known arch,
 * refused once the metadata itself has been checked). */
ra_status rai_model_create_arch(ra_model **out, const rai_arch_ops *ops, const char *const *meta,
                                int nmeta, uint64_t seed);

/* 1 for the floating-point dtypes. */
int rai_dtype_is_float(ra_dtype d);
/* RA_OK if file tensor t has the shape (ndim, shape), else RA_ERR_SHAPE
 * naming both. */
ra_status rai_check_shape(const ra_st_tensor *t, int ndim, const int64_t *shape);

/* A saved relative position index t (its shape checked by the caller)
 * must hold integers equal to idx, read as rows of n2: RA_ERR_SHAPE /
 * RA_ERR_FORMAT naming the first difference otherwise. */
ra_status rai_check_saved_index(const ra_st_file *f, const ra_st_tensor *t, const int32_t *idx,
                                int64_t n2);

/* Declare a parameter (canonical name, copied). optional: may be absent
 * from the file (then it has no storage and rai_model_get gives NULL). */
ra_status rai_model_declare(ra_model *m, const char *name, int ndim, const int64_t *shape,
                            int optional);
/* The F32 values of a declared parameter, or NULL if absent/undeclared. */
const float *rai_model_get(const ra_model *m, const char *name);

/* The gradient of a declared parameter inside flat (laid out like the
 * weights), or NULL if absent/undeclared. */
float *rai_model_grad(const ra_model *m, float *flat, const char *name);

/* The gradient of the parameter at w (a pointer into m->weights; NULL:
 * absent) inside flat: each gradient sits at its parameter's offset, so a
 * network binds its gradients through the weights it bound at build time,
 * never by name. */
static inline float *rai_model_grad_at(const ra_model *m, float *flat, const float *w) {
    return w ? flat + (w - m->weights) : NULL;
}

/* A model made as a replica of another (the trainer's shards) carries its
 * original's naming scheme under this metadata key, since the scheme can
 * change the parameters (SwinV2 under torchvision's names: one qkv.bias)
 * and the computation (torchvision's Swin never clamps a window): made
 * from the metadata alone it would be another model. */
#define RA_META_NAMING "relattn.naming_scheme"

/* Metadata values, parsed strictly; failures are RA_ERR_FORMAT naming the
 * key. The _opt variants leave *out alone when the key is absent. */
ra_status rai_meta_int(const ra_st_file *f, const char *key, int *out, int lo, int hi);
ra_status rai_meta_int_opt(const ra_st_file *f, const char *key, int *out, int lo, int hi);
/* "7,7" or "7" (a square); out[0..1] */
ra_status rai_meta_pair(const ra_st_file *f, const char *key, int out[2], int lo, int hi);
/* "2,2,6,2": up to max integers, *n of them */
ra_status rai_meta_list(const ra_st_file *f, const char *key, int *out, int max, int *n,
                        int lo, int hi);
ra_status rai_meta_bool_opt(const ra_st_file *f, const char *key, int *out);
ra_status rai_meta_float_opt(const ra_st_file *f, const char *key, float *out, int *given);
ra_status rai_meta_double_opt(const ra_st_file *f, const char *key, double *out, int *given);
/* mlp_ratio: a positive number, 4.0 when absent (Python's float). */
ra_status rai_meta_mlp_ratio(const ra_st_file *f, double *out);

/* Metadata pairs (key, value, ...) into out: base's pairs whose key set
 * does not have, then set's, leaving out any pair whose key is skip (may
 * be NULL); out holds nbase + nset pairs. The number of pairs written. */
int rai_meta_merge(const char **out, const char *const *base, int nbase, const char *const *set,
                   int nset, const char *skip);

/* The released sizes of each family (presets.c): a builder's name, the
 * arch, whether torchvision has the builder (tv), the widths, the patch,
 * the input side and its weights' evaluation transform (Resize(resize),
 * CenterCrop(crop), interp). */
typedef struct {
    const char *name, *arch;
    int tv;
    int dim, depth;           /* embed_dim; a ViT's depth */
    const char *depths;       /* a Swin's blocks per stage (NULL: a ViT) */
    const char *heads;        /* per stage (Swin), or one number (ViT) */
    int window, patch;        /* a Swin's window; the patch size */
    int crop, resize;
    const char *interp;
    const struct rai_video_preset *video;   /* a video network's (swin3d), or NULL */
} rai_preset;
/* What a video network's preset adds: the 3-D window and patch, the
 * classes, the transform's mean and std, and the clip its weights were
 * evaluated on (frames, frames per second). */
typedef struct rai_video_preset {
    const char *window, *patch;
    int classes;
    const char *mean, *std;
    int frames, fps;
} rai_video_preset;
extern const rai_preset rai_presets[];
extern const int rai_npresets;

/* Arch tables, one per source file. */
#define RA_ATTN_ARCHS 8
extern const rai_arch_ops rai_attn_arch_ops[RA_ATTN_ARCHS];   /* the attention layers */
extern const rai_arch_ops rai_swinv2_attn_ops;     /* swinv2_window_attention (swinv2_attn.c) */
#ifdef RA_HAVE_NETWORKS
extern const rai_arch_ops rai_swin_block_ops, rai_swin_ops, rai_vit_ops;
extern const rai_arch_ops rai_swin_block_3d_ops;
extern const rai_arch_ops rai_swinv2_ops;          /* swinv2 (swin.c) */
extern const rai_arch_ops rai_swin3d_ops;          /* swin3d (swin3d_net.c) */
#endif

/* A saved relative_position_index (N1, N2) of an attention layer's file
 * must equal the layer's index (RA_ERR_SHAPE / RA_ERR_FORMAT otherwise). */
ra_status rai_model_check_index(const ra_st_file *f, const ra_st_tensor *t,
                                const ra_attn_layer *l);

/* The attention layer of an attention-arch model (its impl). */
typedef struct rai_attn_impl {
    ra_attn_config cfg;
    ra_attn_layer *layer;
} rai_attn_impl;

/* Tensor names, read left to right: rai_starts(s, lit) 1 if s begins with
 * lit; rai_take(&p, lit) also moves p past it; rai_take_index(&p, &i)
 * reads "12." (no sign, no leading zero, at most 10^6) into i and moves
 * past the dot. */
static inline int rai_starts(const char *s, const char *lit) {
    return strncmp(s, lit, strlen(lit)) == 0;
}
static inline int rai_take(const char **p, const char *lit) {
    if (!rai_starts(*p, lit)) return 0;
    *p += strlen(lit);
    return 1;
}
static inline int rai_take_index(const char **p, int *out) {
    const char *s = *p;
    long v = 0;
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9')) return 0;
    for (; *s >= '0' && *s <= '9'; s++)
        if ((v = v * 10 + (*s - '0')) > 1000000) return 0;
    if (*s != '.') return 0;
    *out = (int)v;
    *p = s + 1;
    return 1;
}

#endif
