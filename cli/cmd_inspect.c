/* cmd_inspect.c - relattn inspect: describe a model file. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char inspect_help[] =
    "usage: relattn inspect MODEL [--size HxW] [--json]\n"
    "\n"
    "Describes a model file: arch, the naming scheme its tensors were found in,\n"
    "hyperparameters (the metadata), parameters (count and shapes) and the\n"
    "multiply-adds of one forward as the Swin authors count them: for a network\n"
    "one image of --size (default img_size; swin3d: one clip of num_frames frames,\n"
    "32 without it), for an attention layer one window (or one sequence of\n"
    "--size tokens, given as N or HxW).\n"
    MODEL_OPTIONS_HELP;

int cmd_inspect(int argc, char **argv) {
    if (!take_model_options(&argc, argv)) return EX_USAGE;
    opt opts[] = {{"--size", 1, 0}, {"--json", 0, 0}, {"--help", 0, 0}, {"-h", 0, 0}, {0, 0, 0}};
    const char *pos[1];
    int npos;
    if (!parse_args(argc, argv, opts, pos, 1, &npos)) return EX_USAGE;
    if (get(opts, "--help") || get(opts, "-h")) return fputs(inspect_help, stdout), EX_OK;
    if (npos != 1) return usage_error("needs MODEL");
    int size[2] = {0, 0};
    const char *sz = get(opts, "--size");
    if (sz && (!parse_window(size, sz) || size[0] < 1 || size[1] < 1 || size[0] > 1 << 16 ||
               size[1] > 1 << 16))
        return usage_error("--size '%s': expected HxW", sz);
    ra_model *m;
    ra_status st = open_model(&m, pos[0]);
    if (st) return lib_fail(st);
    if (!sz) {   /* networks: img_size; sequences: their own length is unknown */
        const char *img = ra_model_meta(m, "img_size");
        size[0] = size[1] = img ? atoi(img) : 1;
        if (sz == NULL && !img && ra_model_attn(m) == NULL) size[0] = size[1] = 0;
    } else if (!strpbrk(sz, "x,X") && ra_model_attn(m)) {
        size[1] = 1;   /* "--size N": N tokens */
    }
    int64_t count = 0;
    for (int i = 0; i < ra_model_param_count(m); i++) count += ra_model_param(m, i)->numel;
    const int64_t flops = ra_model_flops(m, size[0], size[1]);
    const int json = get(opts, "--json") != NULL;
    /* the image transform classify applies (networks), and its source */
    const ra_arch a = ra_model_arch(m);
    ra_transform tf;
    const char *tsrc = NULL;
    char tline[512] = "";
    if ((a == RA_ARCH_SWIN || a == RA_ARCH_SWINV2 || a == RA_ARCH_VIT || a == RA_ARCH_SWIN3D) &&
        ra_model_transform(&tf, &tsrc, m) == RA_OK)
        ra_transform_describe(tline, sizeof tline, &tf);
    if (json) {
        /* every string from the file through jansson (json.c); a count too
         * large for int64 (or none) is null */
        jw jo = {0};
        jw_object(&jo);
        jw_key(&jo, "arch");
        jw_string(&jo, ra_arch_name(ra_model_arch(m)));
        jw_key(&jo, "scheme");
        jw_string(&jo, ra_model_scheme(m));
        jw_key(&jo, "precision");
        jw_string(&jo, ra_precision_name(ra_model_precision(m)));
        jw_key(&jo, "parameters");
        jw_int(&jo, (long long)count);
        jw_key(&jo, "flops");
        if (flops >= 0) jw_int(&jo, (long long)flops);
        else jw_null(&jo);
        jw_key(&jo, "transform");
        jw_string(&jo, *tline ? tline : NULL);
        jw_key(&jo, "transform_source");
        jw_string(&jo, *tline ? tsrc : NULL);
        jw_key(&jo, "metadata");
        jw_object(&jo);
        for (int i = 0; i < ra_model_meta_count(m); i++) {
            const char *k = ra_model_meta_key(m, i);
            jw_key(&jo, k);
            jw_string(&jo, ra_model_meta(m, k));
        }
        jw_end(&jo, '}');
        jw_key(&jo, "tensors");
        jw_array(&jo);
        for (int i = 0; i < ra_model_param_count(m); i++) {
            const ra_param_info *p = ra_model_param(m, i);
            jw_object(&jo);
            jw_key(&jo, "name");
            jw_string(&jo, p->name);
            jw_key(&jo, "shape");
            jw_array(&jo);
            for (int d = 0; d < p->ndim; d++) jw_int(&jo, (long long)p->shape[d]);
            jw_end(&jo, ']');
            jw_end(&jo, '}');
        }
        jw_end(&jo, ']');
        jw_end(&jo, '}');
        jw_line(&jo);
    } else {
        printf("arch:           %s\n", ra_arch_name(ra_model_arch(m)));
        printf("naming scheme:  %s\n", ra_model_scheme(m));
        printf("precision:      %s\n", ra_precision_name(ra_model_precision(m)));
        const char *arch_src = ra_model_meta(m, RA_META_SOURCE "arch");
        const char *ckpt = ra_model_meta(m, RA_META_SOURCE "checkpoint");
        const char *sd = ra_model_meta(m, RA_META_SOURCE "state_dict");
        const char *pfx = ra_model_meta(m, RA_META_SOURCE "prefix_dropped");
        if (arch_src) printf("arch from:      %s\n", safe_text(arch_src));
        if (ckpt) {   /* one line per entry of the checkpoint's top-level dict */
            printf("checkpoint:\n");
            for (const char *p = ckpt; *p;) {
                const size_t k = strcspn(p, "\n");
                char line[512];
                snprintf(line, sizeof line, "%.*s", (int)(k < 511 ? k : 511), p);
                printf("  %s\n", safe_text(line));
                p += k + (p[k] == '\n');
            }
        }
        if (sd) printf("state dict:     %s\n", *sd ? safe_text(sd) : "(the root)");
        if (pfx) printf("prefix dropped: %s\n", safe_text(pfx));
        if (*tline) printf("image transform: %s (%s)\n", tline, safe_text(tsrc));
        for (int i = 0; i < ra_model_meta_count(m); i++) {
            const char *k = ra_model_meta_key(m, i), *v = ra_model_meta(m, k);
            char sk[128];
            snprintf(sk, sizeof sk, RA_META_SOURCE "%s", k);
            const char *from = ra_model_meta(m, sk);
            if (!strncmp(k, RA_META_SOURCE, strlen(RA_META_SOURCE))) continue;   /* shown above or beside */
            if (!strcmp(k, "arch")) continue;
            if (!strcmp(k, "labels")) v = "[...]";
            if (from) printf("  %-20s %-16.200s (%s)\n", safe_text(k), safe_text(v), safe_text(from));
            else printf("  %-20s %.200s\n", safe_text(k), safe_text(v));
        }
        printf("parameters:     %lld in %d tensors\n", (long long)count, ra_model_param_count(m));
        const ra_attn_layer *l = ra_model_attn(m);
        if (flops >= 0 && l && ra_attn_layer_index(l, NULL, NULL, NULL))
            printf("multiply-adds:  %.4g G (one window)\n", flops * 1e-9);
        else if (flops >= 0 && a == RA_ARCH_SWIN3D)   /* frames: num_frames, else 32 */
            printf("multiply-adds:  %.4g G (one clip of %s frames of %dx%d)\n", flops * 1e-9,
                   ra_model_meta(m, "num_frames") ? ra_model_meta(m, "num_frames") : "32",
                   size[0], size[1]);
        else if (flops >= 0)
            printf("multiply-adds:  %.4g G (%s %dx%d)\n", flops * 1e-9,
                   l ? "one sequence of" : "one image", size[0], size[1]);
        else if (sz)
            printf("multiply-adds:  too many to count (more than 2^63) or unknown\n");
    }
    ra_model_free(m);
    return EX_OK;
}
