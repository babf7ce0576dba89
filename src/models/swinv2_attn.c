/* swinv2_attn.c - the swinv2_window_attention arch: the official
 * WindowAttention of swin_transformer_v2.py. Hyperparameters dim, window_size, num_heads, qkv_bias (true), pretrained_window_size
 * ("0,0": not given); its state_dict names; the buffers
 * relative_coords_table (1, 2Wh-1, 2Ww-1, 2) and relative_position_index
 * (N, N), when the file has them, must be the computed ones. */
#include "models/model.h"
#include "attention/cpb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ra_status v2_declare(ra_model *m, const ra_st_file *f) {
    rai_attn_impl *a = calloc(1, sizeof *a);
    if (!a) return rai_fail(RA_ERR_NOMEM, "model: out of memory");
    m->impl = a;
    ra_attn_config *c = &a->cfg;
    *c = ra_attn_config_default(RA_ARCH_SWINV2_WINDOW_ATTENTION);
    ra_status st = rai_meta_int(f, "dim", &c->dim, 1, 1 << 16);
    if (!st) st = rai_meta_int(f, "num_heads", &c->num_heads, 1, 1 << 16);
    if (!st) st = rai_meta_pair(f, "window_size", c->window, 1, 64);
    if (!st) st = rai_meta_bool_opt(f, "qkv_bias", &c->qkv_bias);
    if (!st && ra_st_meta(f, "pretrained_window_size"))
        st = rai_meta_pair(f, "pretrained_window_size", c->pretrained_window, 0, 4096);
    if (st) return st;
    if (c->dim % c->num_heads || c->num_heads > c->dim)
        return rai_fail(RA_ERR_FORMAT, "dim %d is not divisible by num_heads %d", c->dim,
                        c->num_heads);
    const int given = c->pretrained_window[0] > 0 && c->pretrained_window[1] > 0;
    if ((given && (c->pretrained_window[0] < 2 || c->pretrained_window[1] < 2)) ||
        (!given && (c->window[0] < 2 || c->window[1] < 2)))
        return rai_fail(RA_ERR_FORMAT, "metadata window_size %d,%d / pretrained_window_size "
                        "%d,%d: the CPB coordinates are divided by (size - 1), which must be "
                        ">= 1", c->window[0], c->window[1], c->pretrained_window[0],
                        c->pretrained_window[1]);
    const int64_t C = c->dim, nh = c->num_heads;
#define DECL(nm, ...) \
    if (!st) st = rai_model_declare(m, nm, (int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), \
                                    (int64_t[]){__VA_ARGS__}, 0)
    DECL("logit_scale", nh, 1, 1);
    if (c->qkv_bias) {
        DECL("q_bias", C);
        DECL("v_bias", C);
    }
    DECL("cpb_mlp.0.weight", RA_CPB_HIDDEN, 2);
    DECL("cpb_mlp.0.bias", RA_CPB_HIDDEN);
    DECL("cpb_mlp.2.weight", nh, RA_CPB_HIDDEN);
    DECL("qkv.weight", 3 * C, C);
    DECL("proj.weight", C, C);
    DECL("proj.bias", C);
#undef DECL
    return st;
}

static rai_tensor_kind v2_canonical(const ra_model *m, const char *name, char *buf, size_t n) {
    (void)m;
    snprintf(buf, n, "%s", name);
    return strcmp(name, "relative_position_index") == 0 ||
                   strcmp(name, "relative_coords_table") == 0
               ? RA_TENSOR_BUFFER
               : RA_TENSOR_PARAM;
}

static ra_status v2_build(ra_model *m, const ra_st_file *f) {
    rai_attn_impl *a = m->impl;
    const ra_attn_params p = {
        .qkv_w = rai_model_get(m, "qkv.weight"), .proj_w = rai_model_get(m, "proj.weight"),
        .proj_b = rai_model_get(m, "proj.bias"), .logit_scale = rai_model_get(m, "logit_scale"),
        .cpb_w1 = rai_model_get(m, "cpb_mlp.0.weight"), .cpb_b1 = rai_model_get(m, "cpb_mlp.0.bias"),
        .cpb_w2 = rai_model_get(m, "cpb_mlp.2.weight"), .q_bias = rai_model_get(m, "q_bias"),
        .v_bias = rai_model_get(m, "v_bias")};
    ra_status st = ra_attn_layer_create(&a->layer, &a->cfg, &p);
    const ra_st_tensor *t;
    if (!st && (t = ra_st_find(f, "relative_position_index")))
        st = rai_model_check_index(f, t, a->layer);
    if (!st && (t = ra_st_find(f, "relative_coords_table")))
        st = rai_swinv2_check_coords(f, t, &a->cfg);
    return st;
}

static void v2_destroy(void *impl) {
    rai_attn_impl *a = impl;
    ra_attn_layer_free(a->layer);
    free(a);
}

/* WindowAttention.flops(N) of the official code, for one window: qkv,
 * q k^T, p v, proj (the CPB's MLP is per call, not per window). */
static int64_t v2_flops(const ra_model *m, int h, int w) {
    (void)h, (void)w;
    const rai_attn_impl *a = m->impl;
    const int64_t C = a->cfg.dim, N = (int64_t)a->cfg.window[0] * a->cfg.window[1];
    return rai_cadd(rai_cadd(rai_cmul3(N, C, 3 * C), rai_cmul3(N, N, 2 * C)), rai_cmul3(N, C, C));
}

const rai_arch_ops rai_swinv2_attn_ops = {
    .name = "swinv2_window_attention", .arch = RA_ARCH_SWINV2_WINDOW_ATTENTION, .attn_layer = 1,
    .declare = v2_declare, .canonical = v2_canonical, .build = v2_build,
    .destroy = v2_destroy, .flops = v2_flops};
