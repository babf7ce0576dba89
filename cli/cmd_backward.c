/* cmd_backward.c - relattn backward: the gradients of an attention layer
 * or of a whole network (SPEC 3.2), every parameter named as in the file. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char backward_help[] =
    "usage: relattn backward MODEL.safetensors INPUT.safetensors -o OUT.safetensors\n"
    "                        [--threads N]\n"
    "\n"
    "Runs MODEL on INPUT and back-propagates INPUT's dy.\n"
    "  INPUT   as for 'forward', plus dy, the gradient of y (its shape)\n"
    "          networks: x (swin_block (B, H*W, C) or (B, H, W, C); swin, vit\n"
    "          images (B, C, H, W); swin_block_3d one clip (D, H, W, C), or the\n"
    "          query then key/value frames (D1 + D2, H, W, C) of a cross block)\n"
    "  OUT     y; the input gradients grad.x (window_attention_3d: grad.q, and\n"
    "          grad.kv when kv was given); grad.NAME for every parameter NAME of\n"
    "          the model file, under the file's own names\n"
    "          (grad.relative_position_bias_table, grad.qkv.weight, ...)\n";

/* A network: OUT gets y, grad.x and grad.NAME (NAME as in the file). */
static int network_backward(ra_model *m, const char *input, const char *outp) {
    ra_st_file *in = NULL;
    ra_st_writer *w = NULL;
    float *x = NULL, *dy = NULL, *y = NULL, *dx = NULL, *grad = NULL;
    int code = EX_OK, yn = 0;
    int64_t ys[4] = {0};
    ra_status st = ra_st_open(&in, input);
    if (st) { code = lib_fail(st); goto done; }
    const ra_st_tensor *t = ra_st_find(in, "x"), *td = ra_st_find(in, "dy");
    for (int i = 0; i < ra_st_count(in); i++)
        if (strcmp(ra_st_at(in, i)->name, "x") && strcmp(ra_st_at(in, i)->name, "dy")) {
            code = fail(EX_DATAERR, "unexpected input tensor '%.80s' for %s", ra_st_at(in, i)->name,
                        ra_arch_name(ra_model_arch(m)));
            goto done;
        }
    if (!t || !td) { code = fail(EX_DATAERR, "input needs tensors 'x' and 'dy'"); goto done; }
    if (t->ndim < 2 || t->ndim > 4) {
        code = fail(EX_DATAERR, "input tensor 'x' has %d dims (2 to 4)", t->ndim);
        goto done;
    }
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 1 || t->shape[d] > INT_MAX) {
            code = fail(EX_DATAERR, "input tensor 'x' has an empty or huge dimension");
            goto done;
        }
    const int64_t total = ra_model_param_total(m);
    x = malloc((size_t)t->numel * sizeof *x);
    dx = calloc((size_t)t->numel, sizeof *dx);
    grad = calloc((size_t)total + 1, sizeof *grad);
    if (!x || !dx || !grad) { code = fail(EX_DATAERR, "too large: out of memory"); goto done; }
    if ((st = ra_st_to_f32(x, t))) { code = lib_fail(st); goto done; }
    if ((st = ra_model_forward_train(m, &y, &yn, ys, x, t->ndim, t->shape, NULL))) {
        code = lib_fail(st);
        goto done;
    }
    int same = td->ndim == yn;
    for (int d = 0; same && d < yn; d++) same = td->shape[d] == ys[d];
    if (!same) {
        code = fail(EX_DATAERR, "dy must have the shape of y (%d dims, (%lld, %lld, ...))", yn,
                    (long long)ys[0], (long long)ys[1]);
        goto done;
    }
    if (!(dy = malloc((size_t)td->numel * sizeof *dy))) { code = fail(EX_DATAERR, "too large: out of memory"); goto done; }
    if ((st = ra_st_to_f32(dy, td)) || (st = ra_model_backward(m, grad, dx, dy))) {
        code = lib_fail(st);
        goto done;
    }
    if (!(w = ra_st_writer_new())) { code = fail(EX_DATAERR, "too large: out of memory"); goto done; }
    st = put(w, RA_OK, "y", y, yn, ys);
    st = put(w, st, "grad.x", dx, t->ndim, t->shape);
    for (int i = 0; i < ra_model_param_count(m); i++) {
        const ra_param_info *p = ra_model_param(m, i);
        char name[320];
        snprintf(name, sizeof name, "grad.%s", p->file_name);
        st = put(w, st, name, grad + p->offset, p->ndim, p->shape);
    }
    if (!st) st = ra_st_writer_meta(w, "arch", ra_arch_name(ra_model_arch(m)));
    if (!st) st = ra_st_writer_save(w, outp);
    if (st) code = lib_fail(st);
done:
    ra_st_writer_free(w);
    free(x), free(dy), free(y), free(dx), free(grad);
    ra_st_close(in);
    ra_model_free(m);
    return code;
}

int cmd_backward(int argc, char **argv) {
    opt opts[] = {{"-o", 1, 0}, {"--output", 1, 0}, {"--threads", 1, 0},
                  {"--help", 0, 0}, {"-h", 0, 0}, {0, 0, 0}};
    const char *pos[2], *outp;
    int code = model_input_args(argc, argv, opts, backward_help, pos, &outp);
    if (code >= 0) return code;

    ra_model *m;
    ra_status st0 = ra_model_load(&m, pos[0]);
    if (st0) return lib_fail(st0);
    if (!ra_model_attn(m)) return network_backward(m, pos[1], outp);
    job j;
    ra_st_writer *w = NULL;
    float *y = NULL, *dx = NULL, *dkv = NULL, *grads = NULL;
    code = job_open(&j, m, pos[1], 1);
    if (code) goto done;
    const int C = j.c->dim;
    const int64_t total = ra_model_param_total(j.m);
    y = malloc((size_t)j.b_ * j.n1 * C * sizeof *y);
    dx = calloc((size_t)j.b_ * j.n1 * C, sizeof *dx);
    if (j.kv) dkv = calloc((size_t)j.b_ * j.n2 * C, sizeof *dkv);
    grads = calloc((size_t)total + 1, sizeof *grads);
    if (!y || !dx || (j.kv && !dkv) || !grads || !(w = ra_st_writer_new())) {
        code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    ra_attn_grads g;
    ra_model_attn_grads(j.m, grads, &g);
    ra_status st = ra_attn_layer_backward(j.l, dx, dkv, &g, y, j.dy, j.x, j.kv, j.b_, j.n1,
                                          j.n2, j.mask, j.nw);
    char gx[16];
    snprintf(gx, sizeof gx, "grad.%s", j.xname);
    st = put(w, st, "y", y, 3, (int64_t[]){j.b_, j.n1, C});
    st = put(w, st, gx, dx, 3, (int64_t[]){j.b_, j.n1, C});
    if (dkv) st = put(w, st, "grad.kv", dkv, 3, (int64_t[]){j.b_, j.n2, C});
    for (int i = 0; i < ra_model_param_count(j.m); i++) {
        const ra_param_info *p = ra_model_param(j.m, i);
        char name[96];
        snprintf(name, sizeof name, "grad.%s", p->name);
        st = put(w, st, name, grads + p->offset, p->ndim, p->shape);
    }
    if (!st) st = ra_st_writer_meta(w, "arch", ra_arch_name(j.c->arch));
    if (!st) st = ra_st_writer_save(w, outp);
    if (st) code = lib_fail(st);
done:
    ra_st_writer_free(w);
    free(y), free(dx), free(dkv), free(grads);
    job_close(&j);
    return code;
}
