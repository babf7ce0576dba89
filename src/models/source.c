/* source.c - what a model path stands for, as the loader reads it
 * (docs/reference.md, section 2): a relattn model file as it is; a
 * PyTorch checkpoint or a plain safetensors state_dict, with the state
 * dict found inside, DataParallel / torch.compile prefixes dropped,
 * transformers' names mapped, and the metadata inferred (infer.c); a timm
 * or transformers model folder (config.json and the weights). Every case
 * ends as one ra_st_file, built without copying a tensor, which the loader
 * (registry.c) opens by its arch: this file never calls the loader. */
#define _POSIX_C_SOURCE 200809L

#include "io/torch.h"
#include "models/config.h"
#include "models/hf.h"
#include "models/infer.h"
#include "models/model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_dir(const char *path) {
    struct stat s;
    return stat(path, &s) == 0 && S_ISDIR(s.st_mode);
}

static int exists(const char *path) {
    struct stat s;
    return stat(path, &s) == 0;
}

/* dir/name into out (n bytes), one slash between them however dir ends:
 * the length it needs, as snprintf. */
static size_t folder_member(char *out, size_t n, const char *dir, const char *name) {
    const size_t k = strlen(dir);
    return (size_t)snprintf(out, n, "%s%s%s", dir, k && dir[k - 1] == '/' ? "" : "/", name);
}

/* A model folder's weights (n bytes of out): the first of the files
 * timm and transformers write. */
static ra_status folder_weights(const char *dir, char *out, size_t n) {
    static const char *const names[] = {"model.safetensors", "pytorch_model.bin", "model.pth",
                                        "pytorch_model.pth", "open_clip_pytorch_model.bin"};
    static const char *const shards[] = {"model.safetensors.index.json",
                                         "pytorch_model.bin.index.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        if (folder_member(out, n, dir, names[i]) >= n)
            return rai_fail(RA_ERR_ARG, "folder path too long");
        if (exists(out)) return RA_OK;
    }
    for (size_t i = 0; i < sizeof shards / sizeof *shards; i++) {
        folder_member(out, n, dir, shards[i]);
        if (exists(out))
            return rai_fail(RA_ERR_FORMAT, "'%.200s': weights in shards (%s) are not read; "
                            "join them into one file", dir, shards[i]);
    }
    return rai_fail(RA_ERR_IO, "'%.200s': no model.safetensors or pytorch_model.bin in the folder",
                    dir);
}

/* The tensors of a file: safetensors, or PyTorch's zip (the state dict
 * at key). */
static ra_status open_weights(ra_st_file **f, const char *path, const char *key, char *found,
                              size_t nfound) {
    found[0] = 0;
    if (rai_torch_sniff(path)) {   /* a zip (or a legacy checkpoint, refused there) */
        char *what = NULL;
        ra_status st = rai_torch_open(f, path, key, found, nfound, &what);
        /* what a checkpoint holds besides its nested state dict, for inspect */
        if (!st && found[0]) st = rai_st_set_meta(*f, RA_META_SOURCE "checkpoint", what);
        free(what);
        if (st) ra_st_close(*f), *f = NULL;
        return st;
    }
    if (key && *key)
        return rai_fail(RA_ERR_ARG, "--key %.60s: '%.200s' is not a PyTorch checkpoint (a "
                        "safetensors file holds one state_dict)", key, path);
    return ra_st_open(f, path);
}

/* The prefix every name has, among those wrappers add: "module."
 * (DataParallel, DistributedDataParallel), "_orig_mod." (torch.compile). */
static size_t wrapper_prefix(const ra_st_file *f) {
    static const char *const wrappers[] = {"module.", "_orig_mod."};
    size_t total = 0;
    for (int again = 1; again;) {
        again = 0;
        for (size_t w = 0; w < sizeof wrappers / sizeof *wrappers && ra_st_count(f); w++) {
            const size_t k = strlen(wrappers[w]);
            int all = 1;
            for (int i = 0; i < ra_st_count(f) && all; i++)
                all = strncmp(ra_st_at(f, i)->name + total, wrappers[w], k) == 0;
            if (all) total += k, again = 1;
        }
    }
    return total;
}

/* *f replaced by a file derived from it, every tensor named without its
 * first k bytes: the new file keeps *f when own, else *f must outlive it.
 * On failure *f is closed if own, and NULL. */
static ra_status derive_names(ra_st_file **f, int own, size_t k) {
    ra_st_file *src = *f, *d = NULL;
    ra_status st = own ? rai_st_derive(&d, src) : rai_st_view(&d, src);
    for (int i = 0; !st && i < ra_st_count(src); i++) {
        const ra_st_tensor *t = ra_st_at(src, i);
        st = rai_st_add_from(d, src, t, t->name + k);
    }
    if (!st) st = rai_st_finish(d);
    if (st) ra_st_close(d);
    *f = st ? NULL : d;
    return st;
}

/* *f without the wrapper prefix of its names (derive_names). */
static ra_status strip_wrappers(ra_st_file **f, int own) {
    const size_t k = wrapper_prefix(*f);
    char p[64];
    if (k) snprintf(p, sizeof p, "%.*s", (int)(k < 60 ? k : 60), ra_st_at(*f, 0)->name);
    ra_status st = derive_names(f, own, k);
    if (!st && k) st = rai_st_set_meta(*f, RA_META_SOURCE "prefix_dropped", p);
    if (st && *f) ra_st_close(*f), *f = NULL;
    return st;
}

/* "KEY=VALUE" options into f's metadata, replacing what is there. */
static ra_status apply_sets(ra_st_file *f, const ra_load_options *o) {
    for (int i = 0; o && i < o->nset; i++) {
        const char *s = o->set[i], *eq = s ? strchr(s, '=') : NULL;
        char key[64];
        if (!eq || eq == s || (size_t)(eq - s) >= sizeof key)
            return rai_fail(RA_ERR_ARG, "--set '%.60s': expected KEY=VALUE", s ? s : "");
        snprintf(key, sizeof key, "%.*s", (int)(eq - s), s);
        char src[96];
        snprintf(src, sizeof src, RA_META_SOURCE "%s", key);
        ra_status st = rai_st_set_meta(f, key, eq + 1);
        if (!st) st = rai_st_set_meta(f, src, "--set");
        if (st) return st;
    }
    return RA_OK;
}

/* A 1000-class head with no names: ImageNet-1k's, in torchvision's order; a
 * video model's (arch swin3d) 400-class head: Kinetics-400's. */
static ra_status imagenet_labels(ra_st_file *f) {
    const char *n = ra_st_meta(f, "num_classes"), *arch = ra_st_meta(f, "arch");
    if (ra_st_meta(f, "labels") || !n) return RA_OK;
    const int video = arch && !strcmp(arch, "swin3d");
    const char *labels = NULL, *why = NULL;
    if (!video && !strcmp(n, "1000"))
        labels = rai_imagenet1k_labels_json(),
        why = "convention: ImageNet-1k's classes (torchvision's list) for a 1000-class head";
    else if (video && !strcmp(n, "400"))
        labels = rai_kinetics400_labels_json(),
        why = "convention: Kinetics-400's classes (torchvision's list) for a video model's "
              "400-class head";
    if (!labels) return RA_OK;
    ra_status st = rai_st_set_meta(f, "labels", labels);
    if (!st) st = rai_st_set_meta(f, RA_META_SOURCE "labels", why);
    return st;
}

/* A folder's config.json, then transformers' preprocessor_config.json
 * (mean and std), as one list. */
static ra_status folder_config(const char *dir, rai_config_item **cfg, int *n) {
    static const char *const files[] = {"config.json", "preprocessor_config.json"};
    ra_status st = RA_OK;
    *cfg = NULL, *n = 0;
    for (size_t i = 0; i < sizeof files / sizeof *files && !st; i++) {
        char path[4096];
        rai_config_item *more = NULL, *all;
        int k = 0;
        if (folder_member(path, sizeof path, dir, files[i]) >= sizeof path || !exists(path))
            continue;
        if ((st = rai_config_read(path, &more, &k)) || !k) continue;
        if (!(all = realloc(*cfg, (size_t)(*n + k) * sizeof *all))) {
            rai_config_free(more, k);
            return rai_fail(RA_ERR_NOMEM, "out of memory reading %s", files[i]);
        }
        memcpy(all + *n, more, (size_t)k * sizeof *all);
        free(more);   /* the values moved to all */
        *cfg = all, *n += k;
    }
    return st;
}

/* The file the loader reads for a state_dict f (no relattn metadata): its
 * names as the loader reads them, then the metadata, from dir's
 * config.json if dir. f is kept by the result when own (and closed on
 * failure), else it must outlive the result. */
static ra_status state_dict_file(ra_st_file **out, ra_st_file *f, int own, const char *dir,
                                 const char *found, const ra_load_options *o) {
    *out = NULL;
    ra_status st = strip_wrappers(&f, own);
    if (st) return st;
    const char *hf_arch = NULL;
    ra_st_file *mapped = NULL;
    if ((st = rai_hf_remap(&mapped, f, &hf_arch))) return st;   /* f is kept or closed */
    f = mapped;
    rai_config_item *cfg = NULL;
    int ncfg = 0;
    if (dir) st = folder_config(dir, &cfg, &ncfg);
    if (!st && hf_arch) st = rai_st_set_meta(f, RAI_META_SCHEME, "transformers");
    if (!st && found && found[0]) st = rai_st_set_meta(f, RA_META_SOURCE "state_dict", found);
    if (!st) st = apply_sets(f, o);
    if (!st) st = rai_infer_meta(f, hf_arch, cfg, ncfg);
    if (!st) st = rai_torchvision_transform(f);
    if (!st) st = imagenet_labels(f);
    rai_config_free(cfg, ncfg);
    if (st) {
        ra_st_close(f);
        return st;
    }
    *out = f;
    return RA_OK;
}

ra_status rai_source_state_dict(ra_st_file **out, const ra_st_file *f) {
    return state_dict_file(out, (ra_st_file *)f, 0, NULL, NULL, NULL);   /* f not kept */
}

ra_status ra_model_source(ra_st_file **out, const char *path, const ra_load_options *o) {
    if (!out || !path) return rai_fail(RA_ERR_ARG, "ra_model_source: NULL argument");
    *out = NULL;
    char weights[4096], found[4096];
    const int dir = is_dir(path);
    ra_status st = dir ? folder_weights(path, weights, sizeof weights) : RA_OK;
    if (st) return st;
    ra_st_file *f = NULL;
    st = open_weights(&f, dir ? weights : path, o ? o->key : NULL, found, sizeof found);
    if (st) return st;
    if (ra_st_meta(f, "arch") && !dir) {   /* a relattn model file */
        if (!o || !o->nset) return *out = f, RA_OK;
        if (!(st = derive_names(&f, 1, 0)) && (st = apply_sets(f, o))) ra_st_close(f), f = NULL;
        *out = f;
        return st;
    }
    return state_dict_file(out, f, 1, dir ? path : NULL, found, o);
}
