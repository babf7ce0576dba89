/* attn_archs.c - the attention layers as models: vit_attention,
 * window_attention, window_attention_3d, shaw_attention, t5_attention,
 * alibi_attention, decomposed_attention, rope_attention (their
 * hyperparameters, tensors and the check of a saved relative index). */
#include "models/model.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RA_META_MAX 65536   /* dims, heads: generous bounds */

#define DECL(nm, opt, ...) \
    if (!st) st = rai_model_declare(m, nm, (int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), \
                                    (int64_t[]){__VA_ARGS__}, opt)

/* The relative position schemes (docs/arch-relpos.md): hyperparameters
 * and tensors; the layer (ra_attn_layer_create) checks the combination. */
static ra_status scheme_declare(ra_model *m, const ra_st_file *f, ra_attn_config *c) {
    const ra_arch arch = c->arch;
    ra_status st;
    if (arch == RA_ARCH_T5_ATTENTION) {
        int dkv = 0;
        st = rai_meta_int(f, "d_model", &c->dim, 1, RA_META_MAX);
        if (!st) st = rai_meta_int(f, "d_kv", &dkv, 1, RA_META_MAX);
        if (!st) st = rai_meta_int(f, "num_heads", &c->num_heads, 1, RA_META_MAX);
        if (!st) st = rai_meta_int_opt(f, "relative_attention_num_buckets", &c->num_buckets, 1,
                                       RA_META_MAX);
        if (!st) st = rai_meta_int_opt(f, "relative_attention_max_distance", &c->max_distance, 1,
                                       1 << 30);
        if (!st) st = rai_meta_bool_opt(f, "is_decoder", &c->causal);
        if (!st && (int64_t)dkv * c->num_heads > RA_META_MAX)
            st = rai_fail(RA_ERR_FORMAT, "num_heads %d x d_kv %d is too large", c->num_heads, dkv);
        if (!st && ra_t5_bucket(0, !c->causal, c->num_buckets, c->max_distance) < 0)
            st = rai_fail(RA_ERR_FORMAT, "metadata relative_attention_num_buckets = %d, "
                          "relative_attention_max_distance = %d: need at least %d buckets and "
                          "a max_distance above the exact buckets (%d)", c->num_buckets,
                          c->max_distance, c->causal ? 2 : 4,
                          (c->causal ? c->num_buckets : c->num_buckets / 2) / 2);
        if (st) return st;
        const int64_t C = c->dim, E = (int64_t)dkv * c->num_heads;
        c->inner_dim = (int)E;
        DECL("q.weight", 0, E, C);
        DECL("k.weight", 0, E, C);
        DECL("v.weight", 0, E, C);
        DECL("o.weight", 0, C, E);
        DECL("relative_attention_bias.weight", 1, c->num_buckets, c->num_heads);
        return st;
    }
    st = rai_meta_int(f, "dim", &c->dim, 1, RA_META_MAX);
    if (!st) st = rai_meta_int(f, "num_heads", &c->num_heads, 1, RA_META_MAX);
    if (!st) st = rai_meta_bool_opt(f, "qkv_bias", &c->qkv_bias);
    if (!st && arch == RA_ARCH_ALIBI_ATTENTION) st = rai_meta_bool_opt(f, "causal", &c->causal);
    if (!st && arch == RA_ARCH_DECOMPOSED_ATTENTION)
        st = rai_meta_pair(f, "input_size", c->grid, 1, 4096);
    if (!st && arch == RA_ARCH_ROPE_ATTENTION) {
        st = rai_meta_pair(f, "grid_size", c->grid, 1, 4096);
        if (!st) st = rai_meta_float_opt(f, "rope_theta", &c->rope_theta, NULL);
        if (!st) st = rai_meta_int_opt(f, "num_prefix_tokens", &c->num_prefix, 0, 1024);
        if (!st && !(c->rope_theta > 0.0f))
            st = rai_fail(RA_ERR_FORMAT, "metadata rope_theta = %g must be positive",
                          (double)c->rope_theta);
    }
    if (st) return st;
    if (c->dim % c->num_heads)
        return rai_fail(RA_ERR_FORMAT, "dim %d is not divisible by num_heads %d", c->dim,
                        c->num_heads);
    const int64_t C = c->dim, hd = c->dim / c->num_heads;
    if (arch == RA_ARCH_ROPE_ATTENTION && hd % 4)
        return rai_fail(RA_ERR_FORMAT, "rope_attention: head dim %lld (dim / num_heads) is not a "
                        "multiple of 4", (long long)hd);
    DECL("qkv.weight", 0, 3 * C, C);
    if (c->qkv_bias) DECL("qkv.bias", 0, 3 * C);
    DECL("proj.weight", 0, C, C);
    DECL("proj.bias", 0, C);
    if (arch == RA_ARCH_DECOMPOSED_ATTENTION) {
        DECL("rel_pos_h", 0, 2 * (int64_t)c->grid[0] - 1, hd);
        DECL("rel_pos_w", 0, 2 * (int64_t)c->grid[1] - 1, hd);
    }
    return st;
}

static ra_status attn_declare(ra_model *m, const ra_st_file *f) {
    rai_attn_impl *a = calloc(1, sizeof *a);
    if (!a) return rai_fail(RA_ERR_NOMEM, "model: out of memory");
    m->impl = a;
    ra_attn_config *c = &a->cfg;
    const ra_arch arch = m->ops->arch;
    *c = ra_attn_config_default(arch);
    if (arch == RA_ARCH_T5_ATTENTION || arch == RA_ARCH_ALIBI_ATTENTION ||
        arch == RA_ARCH_DECOMPOSED_ATTENTION || arch == RA_ARCH_ROPE_ATTENTION)
        return scheme_declare(m, f, c);
    ra_status st = rai_meta_int(f, "dim", &c->dim, 1, RA_META_MAX);
    if (!st) st = rai_meta_int(f, "num_heads", &c->num_heads, 1, RA_META_MAX);
    if (!st) st = rai_meta_bool_opt(f, "qkv_bias", &c->qkv_bias);
    if (!st) st = rai_meta_float_opt(f, "qk_scale", &c->qk_scale, &c->has_qk_scale);
    const int windowed = arch == RA_ARCH_WINDOW_ATTENTION || arch == RA_ARCH_WINDOW_ATTENTION_3D;
    if (!st && windowed) st = rai_meta_pair(f, "window_size", c->window, 1, 4096);
    if (!st && arch == RA_ARCH_WINDOW_ATTENTION_3D) {
        st = rai_meta_int(f, "num_frames_q", &c->frames_q, 1, 4096);
        if (!st) st = rai_meta_int(f, "num_frames_kv", &c->frames_kv, 1, 4096);
    }
    if (!st && arch == RA_ARCH_SHAW_ATTENTION)
        st = rai_meta_int(f, "max_relative_position", &c->max_rel, 0, RA_META_MAX);
    if (st) return st;

    /* validate the configuration (and learn the table size) before sizing
     * any tensor from it; say which metadata was at fault */
    int64_t rows = 0;
    if (arch == RA_ARCH_WINDOW_ATTENTION)
        st = ra_relpos_index_2d(NULL, c->window[0], c->window[1], &rows);
    else if (arch == RA_ARCH_WINDOW_ATTENTION_3D)
        st = ra_relpos_index_3d(NULL, c->frames_q, c->frames_kv, c->window[0], c->window[1],
                                &rows);
    if (st) {
        char why[400];
        snprintf(why, sizeof why, "%s", ra_last_error());
        if (arch == RA_ARCH_WINDOW_ATTENTION)
            return rai_fail(st, "metadata window_size = %d,%d: %s", c->window[0], c->window[1], why);
        return rai_fail(st, "metadata num_frames_q = %d, num_frames_kv = %d, window_size = "
                        "%d,%d: %s", c->frames_q, c->frames_kv, c->window[0], c->window[1], why);
    }
    if (c->dim % c->num_heads)
        return rai_fail(RA_ERR_FORMAT, "dim %d is not divisible by num_heads %d", c->dim,
                        c->num_heads);

    const int64_t C = c->dim, hd = c->dim / c->num_heads, R = 2 * (int64_t)c->max_rel + 1;
    if (arch == RA_ARCH_WINDOW_ATTENTION_3D) {
        DECL("q.weight", 0, C, C);
        if (c->qkv_bias) DECL("q.bias", 0, C);
        DECL("kv.weight", 0, 2 * C, C);
        if (c->qkv_bias) DECL("kv.bias", 0, 2 * C);
    } else {
        DECL("qkv.weight", 0, 3 * C, C);
        if (c->qkv_bias) DECL("qkv.bias", 0, 3 * C);
    }
    DECL("proj.weight", 0, C, C);
    DECL("proj.bias", 0, C);
    if (windowed) DECL("relative_position_bias_table", 0, rows, c->num_heads);
    if (arch == RA_ARCH_SHAW_ATTENTION) {
        DECL("relative_keys", 1, R, hd);
        DECL("relative_values", 1, R, hd);
    }
#undef DECL
    return st;
}

static rai_tensor_kind attn_canonical(const ra_model *m, const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s", name);
    const ra_arch a = m->ops->arch;
    if ((a == RA_ARCH_WINDOW_ATTENTION || a == RA_ARCH_WINDOW_ATTENTION_3D) &&
        strcmp(name, "relative_position_index") == 0)
        return RA_TENSOR_BUFFER;
    return RA_TENSOR_PARAM;
}

/* A saved relative_position_index is a buffer, not a parameter: it must be
 * exactly what the configuration gives, or the file is inconsistent. */
ra_status rai_model_check_index(const ra_st_file *f, const ra_st_tensor *t,
                                const ra_attn_layer *l) {
    int64_t n1, n2;
    const int32_t *idx = ra_attn_layer_index(l, &n1, &n2, NULL);
    ra_status st = rai_check_shape(t, 2, (int64_t[]){n1, n2});
    if (st) return st;
    return rai_check_saved_index(f, t, idx, n2);
}

static ra_status attn_build(ra_model *m, const ra_st_file *f) {
    rai_attn_impl *a = m->impl;
    ra_attn_params p = {
        .qkv_w = rai_model_get(m, "qkv.weight"), .qkv_b = rai_model_get(m, "qkv.bias"),
        .q_w = rai_model_get(m, "q.weight"), .q_b = rai_model_get(m, "q.bias"),
        .kv_w = rai_model_get(m, "kv.weight"), .kv_b = rai_model_get(m, "kv.bias"),
        .proj_w = rai_model_get(m, "proj.weight"), .proj_b = rai_model_get(m, "proj.bias"),
        .table = rai_model_get(m, "relative_position_bias_table"),
        .rel_k = rai_model_get(m, "relative_keys"), .rel_v = rai_model_get(m, "relative_values"),
        .k_w = rai_model_get(m, "k.weight"), .v_w = rai_model_get(m, "v.weight"),
        .rel_h = rai_model_get(m, "rel_pos_h"), .rel_w = rai_model_get(m, "rel_pos_w")};
    if (a->cfg.arch == RA_ARCH_T5_ATTENTION) {   /* T5's names for the output and bias */
        p.proj_w = rai_model_get(m, "o.weight");
        p.table = rai_model_get(m, "relative_attention_bias.weight");
    }
    if (a->cfg.arch == RA_ARCH_SHAW_ATTENTION && !p.rel_k && !p.rel_v)
        return rai_fail(RA_ERR_FORMAT, "shaw_attention needs relative_keys and/or relative_values");
    ra_status st = ra_attn_layer_create(&a->layer, &a->cfg, &p);
    const ra_st_tensor *saved = ra_st_find(f, "relative_position_index");
    if (!st && saved && ra_attn_layer_index(a->layer, NULL, NULL, NULL))
        st = rai_model_check_index(f, saved, a->layer);
    return st;
}

/* WindowAttention.flops(N) of the Swin code: qkv, q·k^T, p·v, proj, for one
 * window (or sequence) of N query tokens over N2 keys. */
static int64_t attn_flops(const ra_model *m, int h, int w) {
    const rai_attn_impl *a = m->impl;
    int64_t n1, n2;
    if (!ra_attn_layer_index(a->layer, &n1, &n2, NULL)) n1 = n2 = (int64_t)h * w;
    const int64_t C = a->cfg.dim, E = a->cfg.inner_dim ? a->cfg.inner_dim : C;
    int64_t f = rai_cadd(rai_cmul3(n1, E, C), rai_cmul3(n2, 2 * E, C));   /* q, and k, v */
    f = rai_cadd(f, rai_cmul3(n1, n2, 2 * E));   /* q·k^T and p·v over all heads */
    return rai_cadd(f, rai_cmul3(n1, E, C));      /* proj */
}

static void attn_destroy(void *impl) {
    rai_attn_impl *a = impl;
    ra_attn_layer_free(a->layer);
    free(a);
}

#define ATTN_OPS(nm, a) {.name = nm, .arch = a, .attn_layer = 1, .declare = attn_declare,    \
                         .canonical = attn_canonical, .build = attn_build,                 \
                         .destroy = attn_destroy, .flops = attn_flops}
const rai_arch_ops rai_attn_arch_ops[RA_ATTN_ARCHS] = {
    ATTN_OPS("vit_attention", RA_ARCH_VIT_ATTENTION),
    ATTN_OPS("window_attention", RA_ARCH_WINDOW_ATTENTION),
    ATTN_OPS("window_attention_3d", RA_ARCH_WINDOW_ATTENTION_3D),
    ATTN_OPS("shaw_attention", RA_ARCH_SHAW_ATTENTION),
    ATTN_OPS("t5_attention", RA_ARCH_T5_ATTENTION),
    ATTN_OPS("alibi_attention", RA_ARCH_ALIBI_ATTENTION),
    ATTN_OPS("decomposed_attention", RA_ARCH_DECOMPOSED_ATTENTION),
    ATTN_OPS("rope_attention", RA_ARCH_ROPE_ATTENTION),
};
