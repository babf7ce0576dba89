/* cmd_backward.c - relattn backward: the gradients of an attention layer
 * or of a whole network (SPEC 3.2), every parameter named as in the file. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char backward_help[] =
    "usage: relattn backward MODEL.safetensors INPUT.safetensors -o OUT.safetensors\n"
    "                        [--threads N] [--repeat R] [--json]\n"
    "\n"
    "Runs MODEL on INPUT and back-propagates INPUT's dy.\n"
    "  INPUT   as for 'forward', plus dy, the gradient of y (its shape)\n"
    "          networks: x (swin_block (B, H*W, C) or (B, H, W, C); swin, vit\n"
    "          images (B, C, H, W); swin_block_3d one clip (D, H, W, C), or the\n"
    "          query then key/value frames (D1 + D2, H, W, C) of a cross block)\n"
    "  OUT     y; the input gradients grad.x (window_attention_3d: grad.q, and\n"
    "          grad.kv when kv was given); grad.NAME for every parameter NAME of\n"
    "          the model file, under the file's own names\n"
    "          (grad.relative_position_bias_table, grad.qkv.weight, ...)\n"
    "  --threads N   threads to use (default: all cores)\n"
    "  --repeat R    time the compute (not the files): one warm-up run, then R\n"
    "                runs (1..1000000) of forward and backward; OUT is written\n"
    "                from the last one, and the median, the minimum and GFLOP/s\n"
    "                go to stderr (a run counted as 3 forwards: 6 flops per\n"
    "                multiply-add of the Swin authors' count)\n"
    "  --json        the timing as one JSON line on stdout instead:\n"
    "                {\"median_ms\": M, \"min_ms\": m, \"gflops\": G}, G null where\n"
    "                no count exists; --json alone means --repeat 1\n";

/* The runs of a network: each zeroes the gradients (they accumulate),
 * replaces y and checks dy against it the first time. */
typedef struct {
    ra_model *m;
    const ra_st_file *in;
    const ra_st_tensor *t, *td;
    const float *x;
    float *y, *dy, *dx, *grad;
    int yn;
    int64_t ys[4];
} net_run;

static int net_once(void *p) {
    net_run *c = p;
    memset(c->grad, 0, (size_t)ra_model_param_total(c->m) * sizeof *c->grad);
    memset(c->dx, 0, (size_t)c->t->numel * sizeof *c->dx);
    free(c->y);
    c->y = NULL;
    ra_status st = ra_model_forward_train(c->m, &c->y, &c->yn, c->ys, c->x, c->t->ndim,
                                          c->t->shape, NULL);
    if (st) return lib_fail(st);
    if (!c->dy) {
        int same = c->td->ndim == c->yn;
        for (int d = 0; same && d < c->yn; d++) same = c->td->shape[d] == c->ys[d];
        if (!same)
            return fail(EX_DATAERR, "dy must have the shape of y (%d dims, (%lld, %lld, ...))",
                        c->yn, (long long)c->ys[0], (long long)c->ys[1]);
        if (!(c->dy = malloc((size_t)c->td->numel * sizeof *c->dy)))
            return fail(EX_DATAERR, "too large: out of memory");
        if ((st = ra_st_read_f32(c->dy, c->in, c->td))) return lib_fail(st);
    }
    st = ra_model_backward(c->m, c->grad, c->dx, c->dy);
    return st ? lib_fail(st) : EX_OK;
}

/* A network: OUT gets y, grad.x and grad.NAME (NAME as in the file). */
static int network_backward(ra_model *m, const char *input, const char *outp, repeat *rep) {
    ra_st_file *in = NULL;
    ra_st_writer *w = NULL;
    float *x = NULL;
    net_run c = {.m = m};
    int code = EX_OK;
    ra_status st = ra_st_open(&in, input);
    if (st) { code = lib_fail(st); goto done; }
    const ra_st_tensor *t = c.t = ra_st_find(in, "x"), *td = c.td = ra_st_find(in, "dy");
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
    x = malloc((size_t)t->numel * sizeof *x);
    c.dx = malloc((size_t)t->numel * sizeof *c.dx);
    c.grad = malloc(((size_t)ra_model_param_total(m) + 1) * sizeof *c.grad);
    if (!x || !c.dx || !c.grad || !(w = ra_st_writer_new())) {
        code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    if ((st = ra_st_read_f32(x, in, t))) { code = lib_fail(st); goto done; }
    c.x = x, c.in = in;
    if ((code = repeat_run(rep, net_once, &c, 6 * run_macs(m, t->ndim, t->shape)))) goto done;
    st = put(w, RA_OK, "y", c.y, c.yn, c.ys);
    st = put(w, st, "grad.x", c.dx, t->ndim, t->shape);
    for (int i = 0; i < ra_model_param_count(m); i++) {
        const ra_param_info *p = ra_model_param(m, i);
        char name[320];
        snprintf(name, sizeof name, "grad.%s", p->file_name);
        st = put(w, st, name, c.grad + p->offset, p->ndim, p->shape);
    }
    code = job_save(w, st, m, outp, rep);
done:
    ra_st_writer_free(w);
    free(x), free(c.dy), free(c.y), free(c.dx), free(c.grad);
    ra_st_close(in);
    ra_model_free(m);
    return code;
}

/* The runs of an attention layer: each zeroes the gradients first. */
typedef struct {
    const job *j;
    float *y, *dx, *dkv, *grads;
    ra_attn_grads g;
} layer_run;

static int layer_once(void *p) {
    layer_run *c = p;
    const job *j = c->j;
    const size_t C = (size_t)j->c->dim;
    memset(c->grads, 0, (size_t)ra_model_param_total(j->m) * sizeof *c->grads);
    memset(c->dx, 0, (size_t)j->b_ * j->n1 * C * sizeof *c->dx);
    if (c->dkv) memset(c->dkv, 0, (size_t)j->b_ * j->n2 * C * sizeof *c->dkv);
    ra_status st = ra_attn_layer_backward_ex(j->l, c->dx, c->dkv, &c->g, c->y, j->dy, j->x,
                                             j->kv, j->b_, j->n1, j->n2, j->mask, j->nw,
                                             j->gridp);
    return st ? lib_fail(st) : EX_OK;
}

int cmd_backward(int argc, char **argv) {
    opt opts[] = {{"-o", 1, 0},       {"--output", 1, 0}, {"--threads", 1, 0},
                  {"--repeat", 1, 0}, {"--json", 0, 0},   {"--help", 0, 0},
                  {"-h", 0, 0},       {0, 0, 0}};
    const char *pos[2], *outp;
    repeat rep;
    int code = model_input_args(argc, argv, opts, backward_help, pos, &outp);
    if (code >= 0) return code;
    if (!repeat_option(&rep, opts)) return EX_USAGE;

    ra_model *m;
    ra_status st0 = ra_model_load(&m, pos[0]);
    if (st0) return lib_fail(st0);
    if (!ra_model_attn(m)) return network_backward(m, pos[1], outp, &rep);
    job j;
    ra_st_writer *w = NULL;
    layer_run c = {.j = &j};
    code = job_open(&j, m, pos[1], 1);
    if (code) goto done;
    const int C = j.c->dim;
    c.y = malloc((size_t)j.b_ * j.n1 * C * sizeof *c.y);
    c.dx = malloc((size_t)j.b_ * j.n1 * C * sizeof *c.dx);
    if (j.kv) c.dkv = malloc((size_t)j.b_ * j.n2 * C * sizeof *c.dkv);
    c.grads = malloc(((size_t)ra_model_param_total(j.m) + 1) * sizeof *c.grads);
    if (!c.y || !c.dx || (j.kv && !c.dkv) || !c.grads || !(w = ra_st_writer_new())) {
        code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    ra_model_attn_grads(j.m, c.grads, &c.g);
    const int64_t xs[3] = {j.b_, j.n1, C};
    if ((code = repeat_run(&rep, layer_once, &c, 6 * run_macs(j.m, 3, xs)))) goto done;
    char gx[16];
    snprintf(gx, sizeof gx, "grad.%s", j.xname);
    ra_status st = put(w, RA_OK, "y", c.y, j.x_ndim, j.x_shape);
    st = put(w, st, gx, c.dx, j.x_ndim, j.x_shape);
    if (c.dkv) st = put(w, st, "grad.kv", c.dkv, 3, (int64_t[]){j.b_, j.n2, C});
    for (int i = 0; i < ra_model_param_count(j.m); i++) {
        const ra_param_info *p = ra_model_param(j.m, i);
        char name[96];
        snprintf(name, sizeof name, "grad.%s", p->name);
        st = put(w, st, name, c.grads + p->offset, p->ndim, p->shape);
    }
    code = job_save(w, st, j.m, outp, &rep);
done:
    ra_st_writer_free(w);
    free(c.y), free(c.dx), free(c.dkv), free(c.grads);
    job_close(&j);
    return code;
}
