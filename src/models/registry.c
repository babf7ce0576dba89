/* registry.c - every arch the library knows, by its metadata name: the
 * loader's entry points (ra_model_load, ra_model_from_file,
 * ra_model_create) find a file's arch here and hand it to the model object
 * (model.c). The one place that names every network. */
#include "models/model.h"

#include <string.h>

/* Every arch the loader knows (ra_model_arch_count / ra_model_arch_name). */
static const rai_arch_ops *const all[] = {
        &rai_attn_arch_ops[0], &rai_attn_arch_ops[1], &rai_attn_arch_ops[2], &rai_attn_arch_ops[3],
        &rai_attn_arch_ops[4], &rai_attn_arch_ops[5], &rai_attn_arch_ops[6], &rai_attn_arch_ops[7],
#ifdef RA_HAVE_NETWORKS
        &rai_swin_block_ops, &rai_swin_ops, &rai_vit_ops, &rai_swin_block_3d_ops,
        &rai_swinv2_ops,
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


ra_status ra_model_from_file(ra_model **out, const ra_st_file *f) {
    if (!out || !f) return rai_fail(RA_ERR_ARG, "model: NULL argument");
    *out = NULL;
    const char *arch = ra_st_meta(f, "arch");
    if (!arch) return rai_model_from_state_dict(out, f);   /* metadata inferred (source.c) */
    const rai_arch_ops *ops = arch_ops(arch);
    if (!ops) return rai_fail(RA_ERR_FORMAT, "unknown arch \"%.60s\"", arch);
    return rai_model_open_arch(out, ops, f);
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
