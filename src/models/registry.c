/* registry.c - every arch the library knows, by its metadata name: the
 * loader's entry points (ra_model_load, ra_model_from_file,
 * ra_model_create) find a file's arch here and hand it to the model object
 * (model.c). The one place that names every network. */
#include "models/model.h"

#include <string.h>

/* Every arch the loader knows (ra_model_arch_count / ra_model_arch_name). */
static const ra_arch_ops *const all[] = {
        &ra_attn_arch_ops[0], &ra_attn_arch_ops[1], &ra_attn_arch_ops[2], &ra_attn_arch_ops[3],
        &ra_attn_arch_ops[4], &ra_attn_arch_ops[5], &ra_attn_arch_ops[6], &ra_attn_arch_ops[7],
#ifdef RA_HAVE_NETWORKS
        &ra_swin_block_ops, &ra_swin_ops, &ra_vit_ops, &ra_swin_block_3d_ops,
        &ra_swinv2_ops,
#endif
        &ra_swinv2_attn_ops,
};

static const ra_arch_ops *arch_ops(const char *name) {
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0) return all[i];
    return NULL;
}

int ra_model_arch_count(void) { return (int)(sizeof all / sizeof all[0]); }

const char *ra_model_arch_name(int i) {
    return i >= 0 && i < ra_model_arch_count() ? all[i]->name : NULL;
}


ra_status ra_model_from_file(ra_model **out, const ra_st_file *f) {
    if (!out || !f) return ra_fail(RA_ERR_ARG, "model: NULL argument");
    *out = NULL;
    const char *arch = ra_st_meta(f, "arch");
    if (!arch) return ra_fail(RA_ERR_FORMAT, "metadata has no \"arch\"");
    const ra_arch_ops *ops = arch_ops(arch);
    if (!ops) return ra_fail(RA_ERR_FORMAT, "unknown arch \"%.60s\"", arch);
    return ra_model_open_arch(out, ops, f);
}

ra_status ra_model_load(ra_model **out, const char *path) {
    if (!out) return ra_fail(RA_ERR_ARG, "model: NULL argument");
    *out = NULL;
    ra_st_file *f;
    ra_status st = ra_st_open(&f, path);
    if (st) return st;
    st = ra_model_from_file(out, f);
    ra_st_close(f);
    return st;
}

ra_status ra_model_create(ra_model **out, const char *const *meta, int nmeta, uint64_t seed) {
    if (!out || (nmeta && !meta) || nmeta < 0)
        return ra_fail(RA_ERR_ARG, "model create: bad argument");
    /* the arch named last, as the metadata object keeps it; unknown or
     * absent, ra_model_create_arch refuses it after checking the rest */
    const char *arch = NULL;
    for (int i = 0; i < nmeta; i++)
        if (meta[2 * i] && strcmp(meta[2 * i], "arch") == 0) arch = meta[2 * i + 1];
    return ra_model_create_arch(out, arch_ops(arch), meta, nmeta, seed);
}
