/* cmd_forward.c - relattn forward: run an attention layer or a network on INPUT. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char forward_help[] =
    "usage: relattn forward MODEL.safetensors INPUT.safetensors -o OUT.safetensors\n"
    "                       [--attn] [--threads N]\n"
    "\n"
    "Runs the attention layer of MODEL on INPUT and writes OUT.\n"
    "  INPUT   x (B_, N, C); for window_attention_3d q (B_, N1, C) and optionally\n"
    "          kv (B_, N2, C); optionally mask (nW, N1, N2) with B_ % nW == 0.\n"
    "          A tensor dy (for 'backward') is allowed and ignored.\n"
    "  OUT     y (B_, N1, C), and with --attn the probabilities attn (B_, nH, N1, N2)\n"
    "  --threads N   threads to use (default: all cores)\n";

/* A 3-D window block over a batch of clips: x (B, D, H, W, C) and, for a
 * cross block, kv (B, D2, H, W, C); y (B, D, H, W, C). */
static int clips_forward(const ra_model *m, const ra_st_tensor *t,
                         const ra_st_tensor *tkv, const char *outp) {
    ra_status st0 = ra_swin_block_3d_check(m, t->ndim, t->shape, tkv ? tkv->ndim : 0,
                                           tkv ? tkv->shape : NULL);
    if (st0) return lib_fail(st0);
    float *x = malloc((size_t)t->numel * sizeof *x), *y = malloc((size_t)t->numel * sizeof *y);
    float *kv = tkv ? malloc((size_t)tkv->numel * sizeof *kv) : NULL;
    ra_st_writer *w = ra_st_writer_new();
    int code = EX_OK;
    ra_status st = RA_OK;
    if (!x || !y || (tkv && !kv) || !w) code = fail(EX_DATAERR, "too large: out of memory");
    if (!code) st = ra_st_to_f32(x, t);
    if (!code && !st && kv) st = ra_st_to_f32(kv, tkv);
    if (!code && !st)
        st = ra_swin_block_3d_forward(m, y, x, kv, (int)t->shape[0], (int)t->shape[1],
                                      (int)t->shape[2], (int)t->shape[3]);
    if (!code && !st) st = ra_st_writer_add(w, "y", RA_DTYPE_F32, 5, t->shape, y);
    if (!code && !st) st = ra_st_writer_meta(w, "arch", ra_arch_name(ra_model_arch(m)));
    if (!code && !st) st = ra_st_writer_save(w, outp);
    if (!code && st) code = lib_fail(st);
    ra_st_writer_free(w);
    free(x), free(y), free(kv);
    return code;
}

/* A network (swin_block, swin, vit): INPUT holds x only; OUT gets y. */
static int network_forward(ra_model *m, const char *input, const char *outp) {
    ra_st_file *in = NULL;
    ra_st_writer *w = NULL;
    float *x = NULL, *y = NULL;
    int code = EX_OK;
    ra_status st = ra_st_open(&in, input);
    if (st) { code = lib_fail(st); goto done; }
    const ra_st_tensor *t = ra_st_find(in, "x"), *tkv = ra_st_find(in, "kv");
    const int is3d = ra_model_arch(m) == RA_ARCH_SWIN_BLOCK_3D;
    for (int i = 0; i < ra_st_count(in); i++)
        if (strcmp(ra_st_at(in, i)->name, "x") && strcmp(ra_st_at(in, i)->name, "dy") &&
            !(is3d && strcmp(ra_st_at(in, i)->name, "kv") == 0)) {
            code = fail(EX_DATAERR, "unexpected input tensor '%.80s' for %s", ra_st_at(in, i)->name,
                        ra_arch_name(ra_model_arch(m)));
            goto done;
        }
    if (!t) { code = fail(EX_DATAERR, "input has no tensor 'x'"); goto done; }
    if (t->ndim < 2 || t->ndim > (is3d ? 5 : 4)) {
        code = fail(EX_DATAERR, "input tensor 'x' has %d dims", t->ndim);
        goto done;
    }
    if (is3d && (t->ndim == 5 || tkv)) {   /* clips (B, D, H, W, C), kv frames apart */
        code = clips_forward(m, t, tkv, outp);
        goto done;
    }
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 1 || t->shape[d] > INT_MAX) {
            code = fail(EX_DATAERR, "input tensor 'x' has an empty or huge dimension");
            goto done;
        }
    if (!(x = malloc((size_t)t->numel * sizeof *x))) { code = fail(EX_DATAERR, "too large: out of memory"); goto done; }
    if ((st = ra_st_to_f32(x, t))) { code = lib_fail(st); goto done; }
    int yn;
    int64_t ys[4];
    if ((st = ra_model_forward(m, &y, &yn, ys, x, t->ndim, t->shape))) { code = lib_fail(st); goto done; }
    if (!(w = ra_st_writer_new())) { code = fail(EX_DATAERR, "too large: out of memory"); goto done; }
    st = ra_st_writer_add(w, "y", RA_DTYPE_F32, yn, ys, y);
    if (!st) st = ra_st_writer_meta(w, "arch", ra_arch_name(ra_model_arch(m)));
    if (!st) st = ra_st_writer_save(w, outp);
    if (st) code = lib_fail(st);
done:
    ra_st_writer_free(w);
    free(x), free(y);
    ra_st_close(in);
    ra_model_free(m);
    return code;
}

int cmd_forward(int argc, char **argv) {
    opt opts[] = {{"-o", 1, 0},      {"--output", 1, 0}, {"--attn", 0, 0},
                  {"--threads", 1, 0}, {"--help", 0, 0}, {"-h", 0, 0}, {0, 0, 0}};
    const char *pos[2], *outp;
    int code = model_input_args(argc, argv, opts, forward_help, pos, &outp);
    if (code >= 0) return code;

    ra_model *m;
    ra_status st0 = ra_model_load(&m, pos[0]);
    if (st0) return lib_fail(st0);
    if (!ra_model_attn(m)) {
        if (get(opts, "--attn")) {
            const char *arch = ra_arch_name(ra_model_arch(m));   /* a static string */
            ra_model_free(m);
            return usage_error("--attn is for a single attention layer, not %s", arch);
        }
        return network_forward(m, pos[1], outp);
    }
    job j;
    ra_st_writer *w = NULL;
    float *y = NULL, *attn = NULL;
    code = job_open(&j, m, pos[1], 0);
    if (code) goto done;
    const int want_attn = get(opts, "--attn") != NULL, C = j.c->dim, nh = j.c->num_heads;
    if (want_attn && (code = attn_map_fits(&j))) goto done;
    y = malloc((size_t)j.b_ * j.n1 * C * sizeof *y);
    if (want_attn) attn = malloc((size_t)j.b_ * nh * j.n1 * j.n2 * sizeof *attn);
    if (!y || (want_attn && !attn) || !(w = ra_st_writer_new())) {
        code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    ra_status st = ra_attn_layer_forward(j.l, y, attn, j.x, j.kv, j.b_, j.n1, j.n2, j.mask,
                                         j.nw);
    st = put(w, st, "y", y, 3, (int64_t[]){j.b_, j.n1, C});
    if (attn) st = put(w, st, "attn", attn, 4, (int64_t[]){j.b_, nh, j.n1, j.n2});
    if (!st) st = ra_st_writer_meta(w, "arch", ra_arch_name(j.c->arch));
    if (!st) st = ra_st_writer_save(w, outp);
    if (st) code = lib_fail(st);
done:
    ra_st_writer_free(w);
    free(y), free(attn);
    job_close(&j);
    return code;
}
