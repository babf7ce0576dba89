/* cmd_backward.c - relattn backward: the gradients of an attention layer. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

static const char backward_help[] =
    "usage: relattn backward MODEL.safetensors INPUT.safetensors -o OUT.safetensors\n"
    "                        [--threads N]\n"
    "\n"
    "Runs the attention layer of MODEL on INPUT and back-propagates INPUT's dy.\n"
    "  INPUT   as for 'forward', plus dy (B_, N1, C), the gradient of y\n"
    "  OUT     y; the input gradients grad.x (window_attention_3d: grad.q, and\n"
    "          grad.kv when kv was given); grad.NAME for every parameter NAME of\n"
    "          the model file (grad.relative_position_bias_table, grad.qkv.weight, ...)\n";

int cmd_backward(int argc, char **argv) {
    opt opts[] = {{"-o", 1, 0}, {"--output", 1, 0}, {"--threads", 1, 0},
                  {"--help", 0, 0}, {"-h", 0, 0}, {0, 0, 0}};
    const char *pos[2], *outp;
    int code = model_input_args(argc, argv, opts, backward_help, pos, &outp);
    if (code >= 0) return code;

    ra_model *m;
    ra_status st0 = ra_model_load(&m, pos[0]);
    if (st0) return lib_fail(st0);
    if (!ra_model_attn(m)) {
        const char *arch = ra_arch_name(ra_model_arch(m));   /* a static string */
        ra_model_free(m);
        return fail(EX_DATAERR, "backward of whole networks is not implemented yet (arch %s)",
                    arch);
    }
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
        code = fail(EX_SOFTWARE, "out of memory");
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
