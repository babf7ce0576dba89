/* cmd_forward.c - relattn forward: run an attention layer or a network on INPUT. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char forward_help[] =
    "usage: relattn forward MODEL.safetensors INPUT.safetensors -o OUT.safetensors\n"
    "                       [--attn] [--threads N] [--repeat R] [--json]\n"
    "\n"
    "Runs the attention layer or network of MODEL on INPUT and writes OUT.\n"
    "  INPUT   x (B_, N, C); for window_attention_3d q (B_, N1, C) and optionally\n"
    "          decomposed_attention also x (B, H, W, C) on any grid (y alike)\n"
    "          kv (B_, N2, C); optionally mask (nW, N1, N2) with B_ % nW == 0.\n"
    "          Networks: x (swin_block (B, H*W, C) or (B, H, W, C); swin, vit\n"
    "          images (B, C, H, W); swin_block_3d clips (B, D, H, W, C) and for a\n"
    "          cross block kv (B, D2, H, W, C)).\n"
    "          A tensor dy (for 'backward') is allowed and ignored.\n"
    "  OUT     y (B_, N1, C), and with --attn the probabilities attn (B_, nH, N1, N2)\n"
    "  --threads N   threads to use (default: all cores)\n"
    "  --repeat R    time the compute (not the files): one warm-up run, then R\n"
    "                runs (1..1000000); OUT is written from the last one, and the\n"
    "                median, the minimum and GFLOP/s go to stderr (2 flops per\n"
    "                multiply-add of the Swin authors' count, as 'inspect' gives)\n"
    "  --json        the timing as one JSON line on stdout instead:\n"
    "                {\"median_ms\": M, \"min_ms\": m, \"gflops\": G}, G null where\n"
    "                no count exists; --json alone means --repeat 1\n";

/* The runs of a 3-D window block over a batch of clips. */
typedef struct {
    const ra_model *m;
    float *y;
    const float *x, *kv;
    int b, d, h, w;
} clips_run;

static int clips_once(void *p) {
    const clips_run *c = p;
    ra_status st = ra_swin_block_3d_forward(c->m, c->y, c->x, c->kv, c->b, c->d, c->h, c->w);
    return st ? lib_fail(st) : EX_OK;
}

/* A 3-D window block over a batch of clips: x (B, D, H, W, C) and, for a
 * cross block, kv (B, D2, H, W, C); y (B, D, H, W, C). */
static int clips_forward(const ra_model *m, const ra_st_file *in, const ra_st_tensor *t,
                         const ra_st_tensor *tkv, const char *outp, repeat *rep) {
    ra_status st0 = ra_swin_block_3d_check(m, t->ndim, t->shape, tkv ? tkv->ndim : 0,
                                           tkv ? tkv->shape : NULL);
    if (st0) return lib_fail(st0);
    float *x = malloc((size_t)t->numel * sizeof *x), *y = malloc((size_t)t->numel * sizeof *y);
    float *kv = tkv ? malloc((size_t)tkv->numel * sizeof *kv) : NULL;
    clips_run c = {.m = m, .y = y, .x = x, .kv = kv, .b = (int)t->shape[0],
                   .d = (int)t->shape[1], .h = (int)t->shape[2], .w = (int)t->shape[3]};
    ra_st_writer *w = ra_st_writer_new();
    int code = EX_OK;
    ra_status st;
    if (!x || !y || (tkv && !kv) || !w) code = fail(EX_DATAERR, "too large: out of memory");
    else if ((st = ra_st_read_f32(x, in, t)) || (kv && (st = ra_st_read_f32(kv, in, tkv))))
        code = lib_fail(st);
    else if (!(code = repeat_run(rep, clips_once, &c, 2 * run_macs(m, 5, t->shape))))
        code = job_save(w, ra_st_writer_add(w, "y", RA_DTYPE_F32, 5, t->shape, y), m, outp, rep);
    ra_st_writer_free(w);
    free(x), free(y), free(kv);
    return code;
}

/* The runs of a network; each replaces y. */
typedef struct {
    const ra_model *m;
    const float *x;
    int ndim, yn;
    const int64_t *shape;
    float *y;
    int64_t ys[4];
} net_run;

static int net_once(void *p) {
    net_run *c = p;
    free(c->y);
    c->y = NULL;
    ra_status st = ra_model_forward(c->m, &c->y, &c->yn, c->ys, c->x, c->ndim, c->shape);
    return st ? lib_fail(st) : EX_OK;
}

/* A network (swin_block, swin, vit, swin_block_3d): INPUT holds x (and kv
 * for clips of a cross block); OUT gets y. */
static int network_forward(ra_model *m, const char *input, const char *outp, repeat *rep) {
    ra_st_file *in = NULL;
    ra_st_writer *w = NULL;
    float *x = NULL;
    net_run c = {.m = m};
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
        code = clips_forward(m, in, t, tkv, outp, rep);
        goto done;
    }
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 1 || t->shape[d] > INT_MAX) {
            code = fail(EX_DATAERR, "input tensor 'x' has an empty or huge dimension");
            goto done;
        }
    if (!(x = malloc((size_t)t->numel * sizeof *x)) || !(w = ra_st_writer_new())) {
        code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    if ((st = ra_st_read_f32(x, in, t))) { code = lib_fail(st); goto done; }
    c.x = x, c.ndim = t->ndim, c.shape = t->shape;
    if (!(code = repeat_run(rep, net_once, &c, 2 * run_macs(m, t->ndim, t->shape))))
        code = job_save(w, ra_st_writer_add(w, "y", RA_DTYPE_F32, c.yn, c.ys, c.y), m, outp, rep);
done:
    ra_st_writer_free(w);
    free(x), free(c.y);
    ra_st_close(in);
    ra_model_free(m);
    return code;
}

/* The runs of an attention layer. */
typedef struct {
    const job *j;
    float *y, *attn;
} layer_run;

static int layer_once(void *p) {
    const layer_run *c = p;
    const job *j = c->j;
    ra_status st = ra_attn_layer_forward_ex(j->l, c->y, c->attn, j->x, j->kv, j->b_, j->n1,
                                            j->n2, j->mask, j->nw, j->gridp);
    return st ? lib_fail(st) : EX_OK;
}

int cmd_forward(int argc, char **argv) {
    opt opts[] = {{"-o", 1, 0},        {"--output", 1, 0}, {"--attn", 0, 0},
                  {"--threads", 1, 0}, {"--repeat", 1, 0}, {"--json", 0, 0},
                  {"--help", 0, 0},    {"-h", 0, 0},       {0, 0, 0}};
    const char *pos[2], *outp;
    repeat rep;
    int code = model_input_args(argc, argv, opts, forward_help, pos, &outp);
    if (code >= 0) return code;
    if (!repeat_option(&rep, opts)) return EX_USAGE;

    ra_model *m;
    ra_status st0 = ra_model_load(&m, pos[0]);
    if (st0) return lib_fail(st0);
    if (!ra_model_attn(m)) {
        if (get(opts, "--attn")) {
            const char *arch = ra_arch_name(ra_model_arch(m));   /* a static string */
            ra_model_free(m);
            return usage_error("--attn is for a single attention layer, not %s", arch);
        }
        return network_forward(m, pos[1], outp, &rep);
    }
    job j;
    ra_st_writer *w = NULL;
    layer_run c = {.j = &j};
    code = job_open(&j, m, pos[1], 0);
    if (code) goto done;
    const int want_attn = get(opts, "--attn") != NULL, C = j.c->dim, nh = j.c->num_heads;
    if (want_attn && (code = attn_map_fits(&j))) goto done;
    c.y = malloc((size_t)j.b_ * j.n1 * C * sizeof *c.y);
    if (want_attn) c.attn = malloc((size_t)j.b_ * nh * j.n1 * j.n2 * sizeof *c.attn);
    if (!c.y || (want_attn && !c.attn) || !(w = ra_st_writer_new())) {
        code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    const int64_t xs[3] = {j.b_, j.n1, C};
    if ((code = repeat_run(&rep, layer_once, &c, 2 * run_macs(j.m, 3, xs)))) goto done;
    ra_status st = put(w, RA_OK, "y", c.y, j.x_ndim, j.x_shape);
    if (c.attn) st = put(w, st, "attn", c.attn, 4, (int64_t[]){j.b_, nh, j.n1, j.n2});
    code = job_save(w, st, j.m, outp, &rep);
done:
    ra_st_writer_free(w);
    free(c.y), free(c.attn);
    job_close(&j);
    return code;
}
