/* job.c - what forward and backward share: the INPUT file read as named
 * float32 tensors, one library run over them (ra_run_*, which checks them
 * against the model and names the outputs), and OUT written from it. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every tensor of the input file, float ones converted to F32 (data NULL
 * for the others: the run refuses them by name). */
static int read_inputs(ra_tensor **out, int *n, const ra_st_file *f) {
    const int count = ra_st_count(f);
    ra_tensor *t = *out = calloc((size_t)count + 1, sizeof *t);
    *n = count;
    if (!t) return fail(EX_DATAERR, "too large: out of memory");
    for (int i = 0; i < count; i++) {
        const ra_st_tensor *s = ra_st_at(f, i);
        t[i].name = s->name;
        t[i].ndim = s->ndim;
        memcpy(t[i].shape, s->shape, sizeof t[i].shape);
        if (s->dtype != RA_DTYPE_F32 && s->dtype != RA_DTYPE_F16 && s->dtype != RA_DTYPE_BF16 &&
            s->dtype != RA_DTYPE_F64)
            continue;
        if (!(t[i].data = malloc((size_t)s->numel * sizeof(float) + 1)))
            return fail(EX_DATAERR, "input tensor '%s' (%lld values) is too large: out of memory",
                        safe_text(s->name), (long long)s->numel);
        ra_status st = ra_st_read_f32(t[i].data, f, s);
        if (st) return lib_fail(st);
    }
    return EX_OK;
}

/* The runs being timed. */
static int run_once(void *r) {
    ra_status st = ra_run_exec(r);
    return st ? lib_fail(st) : EX_OK;
}

/* The arch written into OUT and named in messages: the enum's name, else
 * the model file's own "arch". */
static const char *arch_of(const ra_model *m) {
    const char *a = ra_arch_name(ra_model_arch(m));
    return a ? a : ra_model_meta(m, "arch") ? ra_model_meta(m, "arch") : "unknown";
}

static int job(const char *model, const char *input, const char *outp, ra_run_mode mode,
               const ra_features_options *fo, repeat *rep) {
    ra_model *m = NULL;
    ra_st_file *in = NULL;
    ra_tensor *t = NULL;
    ra_run *r = NULL;
    ra_st_writer *w = NULL;
    int n = 0, code;
    ra_status st = open_model(&m, model);
    if (st) return lib_fail(st);
    if (mode == RA_RUN_FORWARD_ATTN && !ra_model_attn(m)) {
        code = usage_error("--attn is for a single attention layer, not %s",
                           arch_of(m));
        goto done;
    }
    if ((st = ra_st_open(&in, input))) { code = lib_fail(st); goto done; }
    if ((code = read_inputs(&t, &n, in))) goto done;
    if ((code = output_ok(outp))) goto done;   /* MODEL's folder, before the work */
    st = fo ? ra_run_create_features(&r, m, fo, t, n) : ra_run_create(&r, m, mode, t, n);
    if (st) {   /* --features naming what the model has not is a usage error */
        code = lib_fail(st);
        if (fo && st == RA_ERR_ARG) code = EX_USAGE;
        goto done;
    }
    /* the flop count of the input x (q for window_attention_3d) */
    const ra_tensor *x = NULL;
    for (int i = 0; i < n && !x; i++)
        if (!strcmp(t[i].name, "x") || !strcmp(t[i].name, "q")) x = &t[i];
    const double macs = x ? run_macs(m, x->ndim, x->shape) : -1;
    if ((code = repeat_run(rep, run_once, r, (mode == RA_RUN_BACKWARD ? 6 : 2) * macs)))
        goto done;
    if (!(w = ra_st_writer_new())) { code = fail(EX_DATAERR, "too large: out of memory"); goto done; }
    for (int i = 0; !st && i < ra_run_output_count(r); i++) {
        const ra_tensor *o = ra_run_output(r, i);
        st = ra_st_writer_add_ref(w, o->name, RA_DTYPE_F32, o->ndim, o->shape, o->data);
    }
    if (!st) st = ra_st_writer_meta(w, "arch", arch_of(m));
    if (!st) st = ra_st_writer_save(w, outp);
    if (st) { code = lib_fail(st); goto done; }
    repeat_report(rep);
    code = EX_OK;
done:
    ra_st_writer_free(w);
    ra_run_free(r);
    for (int i = 0; t && i < n; i++) free(t[i].data);
    free(t);
    ra_st_close(in);
    ra_model_free(m);
    return code;
}

int job_run(const char *model, const char *input, const char *outp, ra_run_mode mode,
            repeat *rep) {
    return job(model, input, outp, mode, NULL, rep);
}

int job_run_features(const char *model, const char *input, const char *outp,
                     const ra_features_options *fo, repeat *rep) {
    return job(model, input, outp, RA_RUN_FEATURES, fo, rep);
}
