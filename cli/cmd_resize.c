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
    ra_model *m;   /* validates the whole file first */
    ra_status st = ra_model_load(&m, pos[0]);
    if (st) return lib_fail(st);
    const ra_arch arch = ra_model_arch(m);
    char ws[64] = "";   /* a copy: the model's metadata goes with it */
    if (ra_model_meta(m, "window_size")) snprintf(ws, sizeof ws, "%s", ra_model_meta(m, "window_size"));
    int ok = (arch == RA_ARCH_WINDOW_ATTENTION || arch == RA_ARCH_SWIN_BLOCK || arch == RA_ARCH_SWIN) &&
             ws[0] && parse_window(from, ws);
    ra_model_free(m);
    if (!ok) return fail(EX_DATAERR, "resize works on window_attention, swin_block and swin "
                         "files with a window_size");
    ra_st_file *f = NULL;
    ra_st_writer *w = ra_st_writer_new();
    float *src = NULL, *dst = NULL;
    int code = EX_OK;
    if (!w) return fail(EX_SOFTWARE, "out of memory");
    if ((st = ra_st_open(&f, pos[0]))) { code = lib_fail(st); goto done; }
    const int s1h = 2 * from[0] - 1, s1w = 2 * from[1] - 1, s2h = 2 * to[0] - 1, s2w = 2 * to[1] - 1;
    for (int i = 0; i < ra_st_count(f) && !st; i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        if (ends_with(t->name, "relative_position_index") || ends_with(t->name, "attn_mask"))
            continue;
        if (!ends_with(t->name, "relative_position_bias_table")) {
            st = ra_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
            continue;
        }
        /* the loader checked its shape: ((2Wh-1)(2Ww-1), nH), a float dtype */
        const int nh = (int)t->shape[1];
        free(src), free(dst);
        src = malloc(sizeof *src * (size_t)t->numel);
        dst = malloc(sizeof *dst * (size_t)s2h * s2w * nh);
        if (!src || !dst) { code = fail(EX_SOFTWARE, "out of memory"); goto done; }
        st = ra_st_to_f32(src, t);
        if (!st) st = ra_bias_table_resize(dst, src, nh, s1h, s1w, s2h, s2w);
        if (!st) st = ra_st_writer_add(w, t->name, RA_DTYPE_F32, 2,
                                       (int64_t[]){(int64_t)s2h * s2w, nh}, dst);
    }
    char wbuf[32];
    if (to[0] == to[1] && !strchr(ws, ',')) snprintf(wbuf, sizeof wbuf, "%d", to[0]);
    else snprintf(wbuf, sizeof wbuf, "%d,%d", to[0], to[1]);
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
    return code;
}
