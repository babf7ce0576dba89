/* registry.c - every arch the library knows, by its metadata name: the
 * loader's entry points (ra_model_open, ra_model_load, ra_model_from_file,
 * ra_model_create) find a file's arch here and hand it to the model object
 * (model.c). The one place that names every network. What a path stands
 * for (a checkpoint, a state_dict, a folder) is source.c's, called from
 * here and calling nothing here. */
#include "models/model.h"

#include <stdio.h>
#include <string.h>

/* Every arch the loader knows (ra_model_arch_count / ra_model_arch_name). */
static const rai_arch_ops *const all[] = {
        &rai_attn_arch_ops[0], &rai_attn_arch_ops[1], &rai_attn_arch_ops[2], &rai_attn_arch_ops[3],
        &rai_attn_arch_ops[4], &rai_attn_arch_ops[5], &rai_attn_arch_ops[6], &rai_attn_arch_ops[7],
#ifdef RA_HAVE_NETWORKS
        &rai_swin_block_ops, &rai_swin_ops, &rai_vit_ops, &rai_swin_block_3d_ops,
        &rai_swinv2_ops, &rai_swin3d_ops,
#endif
        &rai_swinv2_attn_ops,
};

static const rai_arch_ops *arch_ops(const char *name) {
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0) return all[i];
    return NULL;
}

int ra_model_arch_count(void) { return (int)(sizeof all / sizeof all[0]); }

const char *ra_model_arch_name(int i) {
    return i >= 0 && i < ra_model_arch_count() ? all[i]->name : NULL;
}


/* The model of f, whose metadata names its arch. */
static ra_status open_by_arch(ra_model **out, const ra_st_file *f) {
    const char *arch = ra_st_meta(f, "arch");
    const rai_arch_ops *ops = arch_ops(arch);
    if (!ops) return rai_fail(RA_ERR_FORMAT, "unknown arch \"%.60s\"", arch ? arch : "");
    ra_status st = rai_model_open_arch(out, ops, f);
    const char *scheme = ra_st_meta(f, RAI_META_SCHEME);   /* one the names no longer show */
    if (!st && scheme) snprintf((*out)->scheme, sizeof (*out)->scheme, "%s", scheme);
    return st;
}

ra_status ra_model_from_file(ra_model **out, const ra_st_file *f) {
    if (!out || !f) return rai_fail(RA_ERR_ARG, "model: NULL argument");
    *out = NULL;
    if (ra_st_meta(f, "arch")) return open_by_arch(out, f);
    ra_st_file *g;   /* a state_dict: the metadata inferred (source.c) */
    ra_status st = rai_source_state_dict(&g, f);
    if (st) return st;
    st = open_by_arch(out, g);
    ra_st_close(g);
    return st;
}

ra_status ra_model_open(ra_model **out, const char *path, const ra_load_options *o) {
    if (!out) return rai_fail(RA_ERR_ARG, "model: NULL argument");
    *out = NULL;
    ra_st_file *f;
    ra_status st = ra_model_source(&f, path, o);
    if (st) return st;
    st = ra_model_from_file(out, f);
    ra_st_close(f);
    if (!st && o && o->precision != RA_PRECISION_FP32 &&
        (st = ra_model_set_precision(*out, o->precision))) {
        ra_model_free(*out);
        *out = NULL;
    }
    return st;
}

ra_status ra_model_load(ra_model **out, const char *path) {
    return ra_model_open(out, path, NULL);
}

ra_status ra_model_create(ra_model **out, const char *const *meta, int nmeta, uint64_t seed) {
    if (!out || (nmeta && !meta) || nmeta < 0)
        return rai_fail(RA_ERR_ARG, "model create: bad argument");
    /* the arch named last, as the metadata object keeps it; unknown or
     * absent, rai_model_create_arch refuses it after checking the rest */
    const char *arch = NULL;
    for (int i = 0; i < nmeta; i++)
        if (meta[2 * i] && strcmp(meta[2 * i], "arch") == 0) arch = meta[2 * i + 1];
    return rai_model_create_arch(out, arch_ops(arch), meta, nmeta, seed);
}
