/* cmd_resize.c - relattn resize: resample a model's bias tables for another window. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char resize_help[] =
    "usage: relattn resize MODEL.safetensors --window WHxWW -o OUT.safetensors\n"
    "\n"
    "Writes MODEL for another window size, as the Swin authors do to fine-tune at\n"
    "a new resolution: every relative_position_bias_table is resampled bicubically\n"
    "over its (2Wh-1) x (2Ww-1) grid per head, the buffers that depend on the\n"
    "window (relative_position_index, attn_mask) are dropped (relattn recomputes\n"
    "them) and the metadata's window_size is updated. Other tensors are copied\n"
    "as they are. For window_attention, swin_block and swin files.\n";

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The window (h, w) of a bias table of `rows` rows, (2h-1)(2w-1) = rows, in
 * a block whose constructor asked for `win`: that window, or the one the
 * loader clamped it to (a square window to a square, otherwise each axis to
 * at most its own). 0 unless exactly one window fits. */
static int table_window(int64_t rows, const int win[2], int out[2]) {
    if ((int64_t)(2 * win[0] - 1) * (2 * win[1] - 1) == rows)
        return out[0] = win[0], out[1] = win[1], 1;
    int found = 0;
    for (int a = 1; a <= win[0]; a++) {
        if (rows % (2 * a - 1)) continue;
        const int64_t q = rows / (2 * a - 1);
        if (q % 2 == 0 || (q + 1) / 2 > win[1]) continue;
        const int b = (int)((q + 1) / 2);
        if (win[0] == win[1] && a != b) continue;
        if (found++) return 0;
        out[0] = a, out[1] = b;
    }
    return found == 1;
}

/* The parameter of m loaded from (or, by_file 0, canonically named) name. */
static const ra_param_info *param_named(const ra_model *m, const char *name, int by_file) {
    for (int i = 0; i < ra_model_param_count(m); i++) {
        const ra_param_info *p = ra_model_param(m, i);
        if (strcmp(by_file ? p->file_name : p->name, name) == 0) return p;
    }
    return NULL;
}

int cmd_resize(int argc, char **argv) {
    opt opts[] = {{"--window", 1, 0}, {"-o", 1, 0}, {"--output", 1, 0}, {"--help", 0, 0},
                  {"-h", 0, 0}, {0, 0, 0}};
    const char *pos[1];
    int npos, to[2], from[2];
    if (!parse_args(argc, argv, opts, pos, 1, &npos)) return EX_USAGE;
    if (get(opts, "--help") || get(opts, "-h")) return fputs(resize_help, stdout), EX_OK;
    const char *outp = get(opts, "-o") ? get(opts, "-o") : get(opts, "--output");
    if (npos != 1) return usage_error("needs MODEL");
    if (!outp || !*outp) return usage_error("needs -o OUT.safetensors");
    if (!get(opts, "--window") || !parse_window(to, get(opts, "--window")))
        return usage_error("needs --window WHxWW");
    if (to[0] < 1 || to[1] < 1 || to[0] > 4096 || to[1] > 4096)
        return fail(EX_DATAERR, "--window %dx%d: each side must be in 1..4096", to[0], to[1]);
    if (output_not_input(outp, pos, 1)) return EX_CANTCREAT;
    ra_model *m = NULL, *nm = NULL;   /* validates the whole file first */
    ra_status st = ra_model_load(&m, pos[0]);
    if (st) return lib_fail(st);
    const ra_arch arch = ra_model_arch(m);
    const char *ws = ra_model_meta(m, "window_size");
    if (!((arch == RA_ARCH_WINDOW_ATTENTION || arch == RA_ARCH_SWIN_BLOCK || arch == RA_ARCH_SWIN) &&
          ws && parse_window(from, ws))) {
        ra_model_free(m);
        return fail(EX_DATAERR, "works on window_attention, swin_block and swin "
                    "files with a window_size");
    }
    char wbuf[32];
    if (to[0] == to[1] && !strchr(ws, ',')) snprintf(wbuf, sizeof wbuf, "%d", to[0]);
    else snprintf(wbuf, sizeof wbuf, "%d,%d", to[0], to[1]);
    /* the model of the new window, made from the metadata alone, so that its
     * tables have the shapes the loader will ask for, and a window the loader
     * refuses is refused here */
    const int nmeta = ra_model_meta_count(m);
    const char **meta = calloc((size_t)nmeta * 2 + 1, sizeof *meta);
    if (!meta) return ra_model_free(m), fail(EX_DATAERR, "too large: out of memory");
    for (int i = 0; i < nmeta; i++) {
        const char *k = ra_model_meta_key(m, i);
        meta[2 * i] = k, meta[2 * i + 1] = strcmp(k, "window_size") ? ra_model_meta(m, k) : wbuf;
    }
    st = ra_model_create(&nm, meta, nmeta, 0);
    free(meta);
    if (st) {
        ra_model_free(m);
        return fail(EX_DATAERR, "--window %dx%d does not fit the model: %s", to[0], to[1],
                    ra_last_error());
    }
    /* torchvision's blocks keep the window whatever the map (no clamp) */
    const int clamps = strcmp(ra_model_scheme(m), "torchvision") != 0;
    ra_st_file *f = NULL;
    ra_st_writer *w = ra_st_writer_new();
    float *src = NULL, *dst = NULL;
    int code = EX_OK;
    if (!w) { code = fail(EX_DATAERR, "too large: out of memory"); goto done; }
    if ((st = ra_st_open(&f, pos[0]))) { code = lib_fail(st); goto done; }
    for (int i = 0; i < ra_st_count(f) && !st; i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        if (ends_with(t->name, "relative_position_index") || ends_with(t->name, "attn_mask"))
            continue;
        if (!ends_with(t->name, "relative_position_bias_table")) {
            st = ra_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
            continue;
        }
        /* the sizes from the tables themselves: the loader checked this one's
         * shape, ((2h-1)(2w-1), nH) for the window the block really has */
        const ra_param_info *p = param_named(m, t->name, 1);
        const ra_param_info *q = p ? param_named(nm, p->name, 0) : NULL;
        int s1[2], s2[2] = {to[0], to[1]};
        if (!p || !q || t->ndim != 2 || q->ndim != 2 || q->shape[1] != t->shape[1] ||
            !table_window(t->shape[0], from, s1) ||
            (clamps && !table_window(q->shape[0], to, s2))) {
            code = fail(EX_DATAERR, "cannot tell the window of table '%s' (%lld rows)",
                        t->name, (long long)t->shape[0]);
            goto done;
        }
        const int nh = (int)t->shape[1];
        const int s1h = 2 * s1[0] - 1, s1w = 2 * s1[1] - 1, s2h = 2 * s2[0] - 1, s2w = 2 * s2[1] - 1;
        free(src), free(dst);
        src = malloc(sizeof *src * (size_t)t->numel);
        dst = malloc(sizeof *dst * (size_t)s2h * s2w * nh);
        if (!src || !dst) { code = fail(EX_DATAERR, "too large: out of memory"); goto done; }
        st = ra_st_to_f32(src, t);
        if (!st) st = ra_bias_table_resize(dst, src, nh, s1h, s1w, s2h, s2w);
        if (!st) st = ra_st_writer_add(w, t->name, RA_DTYPE_F32, 2,
                                       (int64_t[]){(int64_t)s2h * s2w, nh}, dst);
    }
    for (int i = 0; i < ra_st_meta_count(f) && !st; i++) {
        const char *k = ra_st_meta_key(f, i);
        st = ra_st_writer_meta(w, k, strcmp(k, "window_size") ? ra_st_meta(f, k) : wbuf);
    }
    if (!st) st = ra_st_writer_save(w, outp);
    if (st) code = lib_fail(st);
done:
    free(src), free(dst);
    ra_st_writer_free(w);
    ra_st_close(f);
    ra_model_free(nm);
    ra_model_free(m);
    return code;
}
