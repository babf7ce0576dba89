/* cmd_convert.c - relattn convert: any model source -> a relattn model file. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char convert_help[] =
    "usage: relattn convert MODEL -o OUT.safetensors [--dtype f32|f16|bf16]\n"
    "                       [--key PATH] [--set KEY=VALUE]...\n"
    "\n"
    "Writes MODEL as a relattn model file: its tensors under the names the loader\n"
    "read them by (transformers' q, k and v joined into qkv), its metadata with\n"
    "every inferred hyperparameter, so that loading OUT needs no inference, no\n"
    "config.json and one read per tensor. MODEL is loaded first: what does not\n"
    "load is not written. Buffers relattn computes (relative_position_index,\n"
    "relative_coords_table, attn_mask) and a checkpoint's optimizer state are\n"
    "left out. --dtype: the floating-point tensors' type in OUT (default f32;\n"
    "f16 and bf16 round to nearest even, halving the file).\n"
    MODEL_OPTIONS_HELP;

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Tensors OUT leaves out: buffers the loader computes, optimizer state. */
static int left_out(const char *name) {
    return ends_with(name, "relative_position_index") || ends_with(name, "relative_coords_table") ||
           ends_with(name, "attn_mask") || !strncmp(name, "__optim__.", 10);
}

/* Metadata OUT leaves out: where the loader found each value. */
static int meta_left_out(const char *key) { return !strncmp(key, "relattn.source.", 15); }

static ra_status add_tensor(ra_st_writer *w, const ra_st_file *f, const ra_st_tensor *t,
                            ra_dtype dtype) {
    const int is_float = t->dtype == RA_DTYPE_F32 || t->dtype == RA_DTYPE_F16 ||
                         t->dtype == RA_DTYPE_BF16 || t->dtype == RA_DTYPE_F64;
    void *buf = malloc((size_t)(t->numel ? t->numel : 1) * (is_float ? 4 : 8));
    if (!buf) return RA_ERR_NOMEM;
    ra_status st = is_float ? ra_st_read_f32(buf, f, t) : ra_st_read_i64(buf, f, t);
    if (!st)
        st = is_float ? ra_st_writer_add_f32_as(w, t->name, dtype, t->ndim, t->shape, buf)
                      : ra_st_writer_add(w, t->name, RA_DTYPE_I64, t->ndim, t->shape, buf);
    free(buf);
    return st;
}

static ra_status convert(const char *in, const char *outp, ra_dtype dtype) {
    ra_st_file *f = NULL;
    ra_model *m = NULL;
    ra_status st = ra_model_source(&f, in, &model_options);
    if (!st) st = ra_model_from_file(&m, f);   /* what does not load is not written */
    ra_model_free(m);
    ra_st_writer *w = st ? NULL : ra_st_writer_new();
    if (!st && !w) st = RA_ERR_NOMEM;
    for (int i = 0; !st && i < ra_st_meta_count(f); i++) {
        const char *k = ra_st_meta_key(f, i);
        if (!meta_left_out(k)) st = ra_st_writer_meta(w, k, ra_st_meta(f, k));
    }
    for (int i = 0; !st && i < ra_st_count(f); i++)
        if (!left_out(ra_st_at(f, i)->name)) st = add_tensor(w, f, ra_st_at(f, i), dtype);
    if (!st) st = ra_st_writer_save(w, outp);
    ra_st_writer_free(w);
    ra_st_close(f);
    return st;
}

int cmd_convert(int argc, char **argv) {
    if (!take_model_options(&argc, argv)) return EX_USAGE;
    if (model_options.precision != RA_PRECISION_FP32)
        return usage_error("--precision is how a model computes, not what convert writes: "
                           "--dtype f16|bf16 chooses the file's type");
    opt opts[] = {{"-o", 1, 0}, {"--output", 1, 0}, {"--dtype", 1, 0}, {"--help", 0, 0},
                  {"-h", 0, 0}, {0, 0, 0}};
    const char *pos[1];
    int npos;
    if (!parse_args(argc, argv, opts, pos, 1, &npos)) return EX_USAGE;
    if (get(opts, "--help") || get(opts, "-h")) return fputs(convert_help, stdout), EX_OK;
    const char *outp = get(opts, "-o") ? get(opts, "-o") : get(opts, "--output");
    if (npos != 1) return usage_error("needs MODEL");
    if (!outp) return usage_error("needs -o OUT.safetensors");
    if (get(opts, "-o") && get(opts, "--output")) return usage_error("-o given twice");
    const char *d = get(opts, "--dtype");
    ra_dtype dtype = RA_DTYPE_F32;
    if (d && !strcmp(d, "f16")) dtype = RA_DTYPE_F16;
    else if (d && !strcmp(d, "bf16")) dtype = RA_DTYPE_BF16;
    else if (d && strcmp(d, "f32")) return usage_error("--dtype '%s': f32, f16 or bf16", d);
    int code = output_not_input(outp, pos, 1);
    if (code) return code;
    cleanup_on_signals();
    ra_status st = convert(pos[0], outp, dtype);
    return st ? lib_fail(st) : EX_OK;
}
