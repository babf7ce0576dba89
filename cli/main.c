/* main.c - the relattn command (SPEC 3.2).
 *
 * Each subcommand parses its arguments, calls the library and turns a
 * failing status into one line on stderr and an exit code:
 *   0 ok, 64 usage, 65 bad data, 66 input missing, 73 cannot write, 70 bug.
 * Outputs are written atomically by the library's writer: on failure no
 * output file exists. */
#include "relattn.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EX_OK = 0, EX_USAGE = 64, EX_DATAERR = 65, EX_NOINPUT = 66, EX_SOFTWARE = 70,
       EX_CANTCREAT = 73 };

static const char *cmd = "relattn";   /* "relattn index", ... for messages */

static int fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see '%s --help')\n", cmd);
    va_end(ap);
    return EX_USAGE;
}

/* A failed library call: its reason, and the exit code of its status. */
static int lib_fail(ra_status st) {
    int code = st == RA_ERR_IO ? EX_NOINPUT
             : st == RA_ERR_WRITE ? EX_CANTCREAT
             : (st == RA_ERR_ARG || st == RA_ERR_SHAPE || st == RA_ERR_FORMAT) ? EX_DATAERR
             : EX_SOFTWARE;
    const char *why = ra_last_error();
    return fail(code, "%s", *why ? why : ra_status_str(st));
}

/* ---- argument parsing --------------------------------------------------- */

/* A whole decimal integer in [lo, hi]; 0 if malformed (a usage error). */
static int parse_int(int *out, const char *s, int lo, int hi) {
    if (!s || !*s || !(*s == '-' || (*s >= '0' && *s <= '9'))) return 0;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

/* "7", "7x7", "3x5" (also "3,5"). */
static int parse_window(int w[2], const char *s) {
    char buf[64];
    if (!s || strlen(s) >= sizeof buf) return 0;
    strcpy(buf, s);
    char *sep = strpbrk(buf, "x,X");
    if (!sep) return parse_int(&w[0], buf, INT_MIN, INT_MAX) && (w[1] = w[0], 1);
    *sep = 0;
    return parse_int(&w[0], buf, INT_MIN, INT_MAX) && parse_int(&w[1], sep + 1, INT_MIN, INT_MAX);
}

/* Options of a subcommand: "--name" with or without a value. Positional
 * arguments are gathered in order. "--name=value" is accepted too. */
typedef struct {
    const char *name;
    int takes_value;
    const char *value;   /* set when given (flags: "1") */
} opt;

static int parse_args(int argc, char **argv, opt *opts, const char **pos, int maxpos,
                      int *npos) {
    *npos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1] && strcmp(a, "-") != 0) {
            const char *eq = strchr(a, '=');
            size_t len = eq ? (size_t)(eq - a) : strlen(a);
            opt *o = NULL;
            for (opt *p = opts; p->name; p++)
                if (strlen(p->name) == len && strncmp(p->name, a, len) == 0) o = p;
            if (!o) return usage_error("unknown option '%s'", a), 0;
            if (o->value) return usage_error("option %s given twice", o->name), 0;
            if (!o->takes_value) {
                if (eq) return usage_error("option %s takes no value", o->name), 0;
                o->value = "1";
            } else if (eq) {
                o->value = eq + 1;
            } else {
                if (i + 1 >= argc) return usage_error("option %s needs a value", o->name), 0;
                o->value = argv[++i];
            }
        } else {
            if (*npos >= maxpos) return usage_error("unexpected argument '%s'", a), 0;
            pos[(*npos)++] = a;
        }
    }
    return 1;
}

static const char *get(const opt *opts, const char *name) {
    for (; opts->name; opts++)
        if (strcmp(opts->name, name) == 0) return opts->value;
    return NULL;
}

static int threads_option(const opt *opts) {
    const char *t = get(opts, "--threads");
    int n;
    if (!t) return 1;
    if (!parse_int(&n, t, 1, 1024)) return usage_error("--threads '%s': need 1..1024", t), 0;
    ra_threads_set(n);
    return 1;
}

/* ---- relattn index ------------------------------------------------------ */

static const char index_help[] =
    "usage: relattn index --window WHxWW [--frames D1 --kv-frames D2] [--json]\n"
    "       relattn index --length N --clip K [--json]\n"
    "\n"
    "Prints the relative position index, one row per query token, integers\n"
    "separated by single spaces; the table size goes to stderr.\n"
    "  --window WHxWW   Swin window (7x7, 3x5, or 7); its index has (WH*WW)^2 entries\n"
    "  --frames D1      with --kv-frames D2: RSTT 3-D index over D1 query frames and\n"
    "                   D2 key/value frames 0, s, 2s, ... with s = (D1+1)/D2\n"
    "  --length N       Shaw et al. clip index clip(j-i, -K, K) + K over N tokens\n"
    "  --clip K\n"
    "  --json           print {\"index\": [[...]], \"table_rows\": T} instead\n";

static int cmd_index(int argc, char **argv) {
    opt opts[] = {{"--window", 1, 0}, {"--frames", 1, 0}, {"--kv-frames", 1, 0},
                  {"--length", 1, 0}, {"--clip", 1, 0},  {"--json", 0, 0},
                  {"--help", 0, 0},   {"-h", 0, 0},      {0, 0, 0}};
    const char *pos[1];
    int npos;
    if (!parse_args(argc, argv, opts, pos, 0, &npos)) return EX_USAGE;
    if (get(opts, "--help") || get(opts, "-h")) return fputs(index_help, stdout), EX_OK;
    const char *win = get(opts, "--window"), *fr = get(opts, "--frames"),
               *kvf = get(opts, "--kv-frames"), *len = get(opts, "--length"),
               *clip = get(opts, "--clip");
    if (!!win == !!len) return usage_error("give either --window or --length");
    if (len && (fr || kvf)) return usage_error("--frames goes with --window, not --length");
    if (!!fr != !!kvf) return usage_error("--frames and --kv-frames go together");
    if (!!len != !!clip) return usage_error("--length and --clip go together");

    int w[2] = {0, 0}, d1 = 0, d2 = 0, n = 0, k = 0;
    if (win && !parse_window(w, win)) return usage_error("--window '%s': expected WHxWW", win);
    if (fr && !parse_int(&d1, fr, INT_MIN, INT_MAX)) return usage_error("--frames '%s': not an integer", fr);
    if (kvf && !parse_int(&d2, kvf, INT_MIN, INT_MAX)) return usage_error("--kv-frames '%s': not an integer", kvf);
    if (len && !parse_int(&n, len, INT_MIN, INT_MAX)) return usage_error("--length '%s': not an integer", len);
    if (clip && !parse_int(&k, clip, INT_MIN, INT_MAX)) return usage_error("--clip '%s': not an integer", clip);

    /* validate and size, then build */
    int64_t n1, n2, rows;
    ra_status st;
    if (len) {
        st = ra_relpos_index_clip(NULL, n, k);
        n1 = n2 = n;
        rows = 2 * (int64_t)k + 1;
    } else if (fr) {
        st = ra_relpos_index_3d(NULL, d1, d2, w[0], w[1], &rows);
        n1 = (int64_t)d1 * w[0] * w[1];
        n2 = (int64_t)d2 * w[0] * w[1];
    } else {
        st = ra_relpos_index_2d(NULL, w[0], w[1], &rows);
        n1 = n2 = (int64_t)w[0] * w[1];
    }
    if (st) return lib_fail(st);
    int32_t *idx = malloc((size_t)(n1 * n2) * sizeof *idx);
    if (!idx) return fail(EX_SOFTWARE, "out of memory for a %lld x %lld index",
                          (long long)n1, (long long)n2);
    st = len ? ra_relpos_index_clip(idx, n, k)
       : fr  ? ra_relpos_index_3d(idx, d1, d2, w[0], w[1], NULL)
             : ra_relpos_index_2d(idx, w[0], w[1], NULL);
    if (st) { free(idx); return lib_fail(st); }

    const int json = get(opts, "--json") != NULL;
    if (json) fputs("{\"index\": [", stdout);
    for (int64_t i = 0; i < n1; i++) {
        if (json) fputs(i ? ", [" : "[", stdout);
        for (int64_t j = 0; j < n2; j++)
            printf(j ? (json ? ", %d" : " %d") : "%d", idx[i * n2 + j]);
        fputs(json ? "]" : "\n", stdout);
    }
    if (json) printf("], \"table_rows\": %lld}\n", (long long)rows);
    free(idx);
    /* the table size only once stdout is known good: a failure is one line */
    if (fflush(stdout) || ferror(stdout)) return fail(EX_CANTCREAT, "cannot write to stdout");
    fprintf(stderr, "table_rows: %lld\n", (long long)rows);
    return EX_OK;
}

/* ---- relattn forward ---------------------------------------------------- */

static const char forward_help[] =
    "usage: relattn forward MODEL.safetensors INPUT.safetensors -o OUT.safetensors\n"
    "                       [--attn] [--threads N]\n"
    "\n"
    "Runs the attention layer of MODEL on INPUT and writes OUT.\n"
    "  INPUT   x (B_, N, C); for window_attention_3d q (B_, N1, C) and optionally\n"
    "          kv (B_, N2, C); optionally mask (nW, N1, N2) with B_ %% nW == 0.\n"
    "          A tensor dy (for 'backward') is allowed and ignored.\n"
    "  OUT     y (B_, N1, C), and with --attn the probabilities attn (B_, nH, N1, N2)\n"
    "  --threads N   threads to use (default: all cores)\n";

/* A float tensor of the input as F32: checks rank and the dims that are
 * fixed (-1 = any), converts, and says which it was on failure. */
static ra_status input_tensor(float **out, const ra_st_tensor **tt, const ra_st_file *f,
                              const char *name, int ndim, const int64_t *dims) {
    const ra_st_tensor *t = ra_st_find(f, name);
    *out = NULL;
    *tt = t;
    if (!t) return RA_OK;
    if (t->dtype != RA_DTYPE_F32 && t->dtype != RA_DTYPE_F16 && t->dtype != RA_DTYPE_BF16 &&
        t->dtype != RA_DTYPE_F64) {
        fail(EX_DATAERR, "input tensor '%s' is not a float tensor", name);
        return RA_ERR_SHAPE;
    }
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] >= 1 && t->shape[i] <= INT_MAX &&
                                              (dims[i] < 0 || t->shape[i] == dims[i]);
    if (!ok) {
        char want[128] = "(", got[256] = "(";
        for (int i = 0; i < ndim; i++) {
            char d[24];
            if (dims[i] < 0) snprintf(d, sizeof d, "%s*", i ? ", " : "");
            else snprintf(d, sizeof d, "%s%lld", i ? ", " : "", (long long)dims[i]);
            strcat(want, d);
        }
        for (int i = 0; i < t->ndim; i++) {
            char d[24];
            snprintf(d, sizeof d, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
            strcat(got, d);
        }
        fail(EX_DATAERR, "input tensor '%s' has shape %s), expected %s)", name, got, want);
        return RA_ERR_SHAPE;
    }
    *out = malloc((size_t)t->numel * sizeof(float) + 1);
    if (!*out) {
        fail(EX_SOFTWARE, "out of memory for input tensor '%s'", name);
        return RA_ERR_NOMEM;
    }
    ra_status st = ra_st_to_f32(*out, t);
    if (st) lib_fail(st);
    return st;
}

static int status_exit(ra_status st) {
    return st == RA_ERR_NOMEM ? EX_SOFTWARE : EX_DATAERR;
}

/* What forward and backward share: the model, and the input tensors checked
 * against it. */
typedef struct {
    ra_model *m;
    ra_st_file *in;
    const ra_attn_layer *l;
    const ra_attn_config *c;
    const char *xname;                 /* "x", or "q" for window_attention_3d */
    float *x, *kv, *mask, *dy;
    int b_, n1, n2, nw;
} job;

static void job_close(job *j) {
    free(j->x), free(j->kv), free(j->mask), free(j->dy);
    ra_st_close(j->in);
    ra_model_free(j->m);
}

/* 0 on success, else the exit code (the message is printed). */
static int job_open(job *j, ra_model *m, const char *input, int need_dy) {
    memset(j, 0, sizeof *j);
    j->m = m;   /* owned by the job from here */
    ra_status st = ra_st_open(&j->in, input);
    if (st) return lib_fail(st);
    j->l = ra_model_attn(j->m);
    j->c = ra_attn_layer_config(j->l);
    const int is3d = j->c->arch == RA_ARCH_WINDOW_ATTENTION_3D;
    j->xname = is3d && !ra_st_find(j->in, "x") ? "q" : "x";
    for (int i = 0; i < ra_st_count(j->in); i++) {
        const char *nm = ra_st_at(j->in, i)->name;
        if (strcmp(nm, j->xname) && strcmp(nm, "mask") && strcmp(nm, "dy") &&
            !(is3d && strcmp(nm, "kv") == 0))
            return fail(EX_DATAERR, "unexpected input tensor '%.80s' for %s", nm,
                        ra_arch_name(j->c->arch));
    }
    const ra_st_tensor *tx, *tkv, *tm, *tdy;
    const int C = j->c->dim;
    if ((st = input_tensor(&j->x, &tx, j->in, j->xname, 3, (int64_t[]){-1, -1, C})))
        return status_exit(st);
    if (!tx) return fail(EX_DATAERR, "input has no tensor '%s'", j->xname);
    j->b_ = (int)tx->shape[0], j->n1 = (int)tx->shape[1];
    if ((st = input_tensor(&j->kv, &tkv, j->in, "kv", 3, (int64_t[]){j->b_, -1, C})))
        return status_exit(st);
    j->n2 = tkv ? (int)tkv->shape[1] : j->n1;
    if ((st = input_tensor(&j->mask, &tm, j->in, "mask", 3, (int64_t[]){-1, j->n1, j->n2})))
        return status_exit(st);
    j->nw = tm ? (int)tm->shape[0] : 0;
    if (tm && j->b_ % j->nw)
        return fail(EX_DATAERR, "mask has %d windows, which does not divide B_ = %d", j->nw,
                    j->b_);
    if ((st = ra_attn_layer_check_tokens(j->l, j->n1, j->n2))) return lib_fail(st);
    if (need_dy) {
        if ((st = input_tensor(&j->dy, &tdy, j->in, "dy", 3, (int64_t[]){j->b_, j->n1, C})))
            return status_exit(st);
        if (!tdy) return fail(EX_DATAERR, "input has no tensor 'dy' (the gradient of y)");
    }
    return EX_OK;
}

/* Add a tensor to the writer unless an earlier step failed. */
static ra_status put(ra_st_writer *w, ra_status st, const char *name, const float *data,
                     int ndim, const int64_t *shape) {
    return st ? st : ra_st_writer_add(w, name, RA_DTYPE_F32, ndim, shape, data);
}

/* A 3-D window block over a batch of clips: x (B, D, H, W, C) and, for a
 * cross block, kv (B, D2, H, W, C); y (B, D, H, W, C). */
static int clips_forward(const ra_model *m, const ra_st_tensor *t,
                         const ra_st_tensor *tkv, const char *outp) {
    if (t->ndim != 5 || (tkv && (tkv->ndim != 5 || tkv->shape[0] != t->shape[0] ||
                                 tkv->shape[2] != t->shape[2] || tkv->shape[3] != t->shape[3] ||
                                 tkv->shape[4] != t->shape[4])))
        return fail(EX_DATAERR, "swin_block_3d takes x (B, D, H, W, C) and kv (B, D2, H, W, C)");
    for (int d = 0; d < 5; d++)
        if (t->shape[d] < 1 || t->shape[d] > INT_MAX || (tkv && (tkv->shape[d] < 1 || tkv->shape[d] > INT_MAX)))
            return fail(EX_DATAERR, "input tensors have an empty or huge dimension");
    float *x = malloc((size_t)t->numel * sizeof *x), *y = malloc((size_t)t->numel * sizeof *y);
    float *kv = tkv ? malloc((size_t)tkv->numel * sizeof *kv) : NULL;
    ra_st_writer *w = ra_st_writer_new();
    int code = EX_OK;
    ra_status st = RA_OK;
    if (!x || !y || (tkv && !kv) || !w) code = fail(EX_SOFTWARE, "out of memory");
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
    if (!(x = malloc((size_t)t->numel * sizeof *x))) { code = fail(EX_SOFTWARE, "out of memory"); goto done; }
    if ((st = ra_st_to_f32(x, t))) { code = lib_fail(st); goto done; }
    int yn;
    int64_t ys[4];
    if ((st = ra_model_forward(m, &y, &yn, ys, x, t->ndim, t->shape))) { code = lib_fail(st); goto done; }
    if (!(w = ra_st_writer_new())) { code = fail(EX_SOFTWARE, "out of memory"); goto done; }
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

/* MODEL INPUT -o OUT [--threads N] and the subcommand's flags: -1 to go on,
 * else the exit code (help printed, or a usage error). */
static int model_input_args(int argc, char **argv, opt *opts, const char *help,
                            const char *pos[2], const char **outp) {
    int npos;
    if (!parse_args(argc, argv, opts, pos, 2, &npos)) return EX_USAGE;
    if (get(opts, "--help") || get(opts, "-h")) return fputs(help, stdout), EX_OK;
    *outp = get(opts, "-o") ? get(opts, "-o") : get(opts, "--output");
    if (npos != 2) return usage_error("needs MODEL and INPUT");
    if (!*outp || !**outp) return usage_error("needs -o OUT.safetensors");
    if (!threads_option(opts)) return EX_USAGE;
    return -1;
}

static int cmd_forward(int argc, char **argv) {
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
    y = malloc((size_t)j.b_ * j.n1 * C * sizeof *y);
    if (want_attn) attn = malloc((size_t)j.b_ * nh * j.n1 * j.n2 * sizeof *attn);
    if (!y || (want_attn && !attn) || !(w = ra_st_writer_new())) {
        code = fail(EX_SOFTWARE, "out of memory");
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

/* ---- relattn backward --------------------------------------------------- */

static const char backward_help[] =
    "usage: relattn backward MODEL.safetensors INPUT.safetensors -o OUT.safetensors\n"
    "                        [--threads N]\n"
    "\n"
    "Runs the attention layer of MODEL on INPUT and back-propagates INPUT's dy.\n"
    "  INPUT   as for 'forward', plus dy (B_, N1, C), the gradient of y\n"
    "  OUT     y; the input gradients grad.x (window_attention_3d: grad.q, and\n"
    "          grad.kv when kv was given); grad.NAME for every parameter NAME of\n"
    "          the model file (grad.relative_position_bias_table, grad.qkv.weight, ...)\n";

static int cmd_backward(int argc, char **argv) {
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

/* ---- relattn show ------------------------------------------------------- */

static const char show_help[] =
    "usage: relattn show FILE.safetensors\n"
    "\n"
    "Lists a safetensors file: its metadata, then each tensor with dtype, shape\n"
    "and min / mean / max. A tensor named attn (B_, nH, N1, N2) is summarised\n"
    "per head: the mean of each row's largest probability, and the mean row\n"
    "entropy in nats (log N2 for uniform attention, 0 for one-hot).\n";

static void show_attn(const float *a, const ra_st_tensor *t) {
    const int64_t b_ = t->shape[0], nh = t->shape[1], n1 = t->shape[2], n2 = t->shape[3];
    printf("  attention map: %lld windows x %lld heads, %lld queries over %lld keys "
           "(uniform entropy %.3f)\n", (long long)b_, (long long)nh, (long long)n1,
           (long long)n2, log((double)n2));
    for (int64_t h = 0; h < nh; h++) {
        double peak = 0, ent = 0;
        for (int64_t b = 0; b < b_; b++)
            for (int64_t i = 0; i < n1; i++) {
                const float *row = a + ((b * nh + h) * n1 + i) * n2;
                double mx = 0, e = 0;
                for (int64_t j = 0; j < n2; j++) {
                    mx = row[j] > mx ? row[j] : mx;
                    if (row[j] > 0) e -= row[j] * log((double)row[j]);
                }
                peak += mx, ent += e;
            }
        printf("    head %lld: mean max probability %.3f, mean entropy %.3f\n",
               (long long)h, peak / (double)(b_ * n1), ent / (double)(b_ * n1));
    }
}

static int cmd_show(int argc, char **argv) {
    opt opts[] = {{"--help", 0, 0}, {"-h", 0, 0}, {0, 0, 0}};
    const char *pos[1];
    int npos;
    if (!parse_args(argc, argv, opts, pos, 1, &npos)) return EX_USAGE;
    if (get(opts, "--help") || get(opts, "-h")) return fputs(show_help, stdout), EX_OK;
    if (npos != 1) return usage_error("needs FILE");
    ra_st_file *f;
    ra_status st = ra_st_open(&f, pos[0]);
    if (st) return lib_fail(st);
    for (int i = 0; i < ra_st_meta_count(f); i++)
        printf("%s = %s\n", ra_st_meta_key(f, i), ra_st_meta(f, ra_st_meta_key(f, i)));
    int code = EX_OK;
    for (int i = 0; i < ra_st_count(f) && code == EX_OK; i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        static const char *dt[] = {"?", "F32", "F16", "BF16", "F64", "I64", "I32",
                                   "I16", "I8", "U8", "BOOL"};
        char shape[256] = "";
        for (int d = 0; d < t->ndim; d++) {
            char one[24];
            snprintf(one, sizeof one, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
            strcat(shape, one);
        }
        printf("%-32s %-4s (%s)", t->name, dt[t->dtype], shape);
        float *v = malloc((size_t)t->numel * sizeof *v + 1);
        if (!v) { code = fail(EX_SOFTWARE, "out of memory"); break; }
        const int is_float = ra_st_to_f32(v, t) == RA_OK;
        if (is_float && t->numel > 0) {
            double lo = v[0], hi = v[0], sum = 0;
            for (int64_t e = 0; e < t->numel; e++) {
                lo = v[e] < lo ? v[e] : lo, hi = v[e] > hi ? v[e] : hi;
                sum += v[e];
            }
            printf("  min %.4g  mean %.4g  max %.4g", lo, sum / (double)t->numel, hi);
        }
        putchar('\n');
        if (is_float && !strcmp(t->name, "attn") && t->ndim == 4 && t->numel > 0)
            show_attn(v, t);
        free(v);
    }
    ra_st_close(f);
    return code;
}

/* ---- relattn inspect ---------------------------------------------------- */

static const char inspect_help[] =
    "usage: relattn inspect MODEL.safetensors [--size HxW] [--json]\n"
    "\n"
    "Describes a model file: arch, the naming scheme its tensors were found in,\n"
    "hyperparameters (the metadata), parameters (count and shapes) and the\n"
    "multiply-adds of one forward as the Swin authors count them: for a network\n"
    "one image of --size (default img_size), for an attention layer one window\n"
    "(or one sequence of --size tokens, given as N or HxW).\n";

static int cmd_inspect(int argc, char **argv) {
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
    ra_status st = ra_model_load(&m, pos[0]);
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
    if (json) {
        printf("{\"arch\": \"%s\", \"scheme\": \"%s\", \"parameters\": %lld, \"flops\": %lld, "
               "\"metadata\": {", ra_arch_name(ra_model_arch(m)), ra_model_scheme(m),
               (long long)count, (long long)flops);
        for (int i = 0; i < ra_model_meta_count(m); i++) {
            const char *k = ra_model_meta_key(m, i);
            printf("%s\"", i ? ", " : "");
            for (const char *c = k; *c; c++) printf(*c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
            printf("\": \"");
            for (const char *c = ra_model_meta(m, k); *c; c++)
                if ((unsigned char)*c < 0x20) printf("\\u%04x", *c);
                else printf(*c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
            printf("\"");
        }
        printf("}, \"tensors\": [");
        for (int i = 0; i < ra_model_param_count(m); i++) {
            const ra_param_info *p = ra_model_param(m, i);
            printf("%s{\"name\": \"%s\", \"shape\": [", i ? ", " : "", p->name);
            for (int d = 0; d < p->ndim; d++) printf(d ? ", %lld" : "%lld", (long long)p->shape[d]);
            printf("]}");
        }
        printf("]}\n");
    } else {
        printf("arch:           %s\n", ra_arch_name(ra_model_arch(m)));
        printf("naming scheme:  %s\n", ra_model_scheme(m));
        for (int i = 0; i < ra_model_meta_count(m); i++) {
            const char *k = ra_model_meta_key(m, i), *v = ra_model_meta(m, k);
            if (strcmp(k, "arch") && strcmp(k, "labels"))
                printf("  %-20s %.200s\n", k, v);
        }
        printf("parameters:     %lld in %d tensors\n", (long long)count, ra_model_param_count(m));
        const ra_attn_layer *l = ra_model_attn(m);
        if (flops >= 0 && l && ra_attn_layer_index(l, NULL, NULL, NULL))
            printf("multiply-adds:  %.4g G (one window)\n", flops * 1e-9);
        else if (flops >= 0)
            printf("multiply-adds:  %.4g G (%s %dx%d)\n", flops * 1e-9,
                   l ? "one sequence of" : "one image", size[0], size[1]);
    }
    ra_model_free(m);
    return EX_OK;
}

/* ---- relattn classify --------------------------------------------------- */

static const char classify_help[] =
    "usage: relattn classify MODEL.safetensors IMAGE... [--top K] [--json]\n"
    "                        [--resize R] [--crop C] [--threads N]\n"
    "\n"
    "Classifies images (PNG, JPEG, BMP, GIF, ...) with a swin or vit model file.\n"
    "Each image goes through the ImageNet evaluation transform of timm and\n"
    "torchvision: resize the shorter side to R (default C / 0.875), centre crop\n"
    "C x C (default the model's img_size), scale to [0, 1], normalise with the\n"
    "metadata's \"mean\" and \"std\" (\"r,g,b\"; default ImageNet's). Prints the top K\n"
    "(default 5) classes with softmax probabilities, named by the metadata's\n"
    "\"labels\" (a JSON array of strings) when the file has them. Images over\n"
    "64 megapixels are refused before decoding.\n";

static int parse_triple(float out[3], const char *s) {
    return s && sscanf(s, "%f,%f,%f", &out[0], &out[1], &out[2]) == 3;
}

static void put_json_string(const char *s) {
    putchar('"');
    for (; *s; s++)
        if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else printf(*s == '"' || *s == '\\' ? "\\%c" : "%c", *s);
    putchar('"');
}

static int cmd_classify(int argc, char **argv) {
    opt opts[] = {{"--top", 1, 0},    {"--json", 0, 0},    {"--resize", 1, 0},
                  {"--crop", 1, 0},   {"--threads", 1, 0}, {"--help", 0, 0},
                  {"-h", 0, 0},       {0, 0, 0}};
    const char *pos[256];
    int npos, top = 5, crop = 0, resize = 0;
    if (!parse_args(argc, argv, opts, pos, 256, &npos)) return EX_USAGE;
    if (get(opts, "--help") || get(opts, "-h")) return fputs(classify_help, stdout), EX_OK;
    if (npos < 2) return usage_error("needs MODEL and at least one IMAGE");
    if (get(opts, "--top") && !parse_int(&top, get(opts, "--top"), 1, 100000))
        return usage_error("--top '%s': need a positive integer", get(opts, "--top"));
    if (get(opts, "--crop") && !parse_int(&crop, get(opts, "--crop"), 1, 8192))
        return usage_error("--crop '%s': need 1..8192", get(opts, "--crop"));
    if (get(opts, "--resize") && !parse_int(&resize, get(opts, "--resize"), 1, 8192))
        return usage_error("--resize '%s': need 1..8192", get(opts, "--resize"));
    if (!threads_option(opts)) return EX_USAGE;

    ra_model *m;
    ra_status st = ra_model_load(&m, pos[0]);
    if (st) return lib_fail(st);
    const ra_arch arch = ra_model_arch(m);
    int code = EX_OK, in_chans = 3;
    float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
    json_t *labels = NULL;
    float *rgb = NULL, *x = NULL, *y = NULL;
    if (arch != RA_ARCH_SWIN && arch != RA_ARCH_VIT) {
        code = fail(EX_DATAERR, "classify needs a swin or vit model, not %s", ra_arch_name(arch));
        goto done;
    }
    if (ra_model_meta(m, "in_chans") && atoi(ra_model_meta(m, "in_chans")) != 3) {
        code = fail(EX_DATAERR, "classify reads RGB images; the model takes %s channels",
                    ra_model_meta(m, "in_chans"));
        goto done;
    }
    if (!crop) crop = ra_model_meta(m, "img_size") ? atoi(ra_model_meta(m, "img_size")) : 224;
    if (crop < 1 || crop > 8192) { code = fail(EX_DATAERR, "model img_size is unusable"); goto done; }
    if (!resize) resize = (int)(crop / 0.875);
    if (resize < crop) resize = crop;
    if ((ra_model_meta(m, "mean") && !parse_triple(mean, ra_model_meta(m, "mean"))) ||
        (ra_model_meta(m, "std") && !parse_triple(stdv, ra_model_meta(m, "std"))) ||
        !(stdv[0] > 0 && stdv[1] > 0 && stdv[2] > 0)) {
        code = fail(EX_DATAERR, "metadata mean/std must be \"r,g,b\" with std > 0");
        goto done;
    }
    if (ra_model_meta(m, "labels")) {
        json_error_t jerr;
        labels = json_loads(ra_model_meta(m, "labels"), JSON_REJECT_DUPLICATES, &jerr);
        if (!json_is_array(labels)) {
            code = fail(EX_DATAERR, "metadata labels is not a JSON array of strings");
            goto done;
        }
    }
    if (!(x = malloc(sizeof *x * 3 * (size_t)crop * crop))) {
        code = fail(EX_SOFTWARE, "out of memory");
        goto done;
    }
    const int json = get(opts, "--json") != NULL;
    if (json) printf("[");
    for (int im = 1; im < npos && code == EX_OK; im++) {
        int w, h, yn;
        int64_t ys[4];
        if ((st = ra_image_load(&rgb, &w, &h, pos[im], (int64_t)64 << 20)) ||
            (st = ra_image_preprocess(x, rgb, w, h, resize, crop, mean, stdv)) ||
            (st = ra_model_forward(m, &y, &yn, ys, x, 4, (int64_t[]){1, in_chans, crop, crop}))) {
            code = lib_fail(st);
            break;
        }
        free(rgb), rgb = NULL;
        const int k = (int)ys[yn - 1];
        /* softmax, then the top entries by selection (k is small enough) */
        double mx = -INFINITY, sum = 0;
        for (int c = 0; c < k; c++) mx = y[c] > mx ? y[c] : mx;
        for (int c = 0; c < k; c++) sum += exp(y[c] - mx);
        if (json) printf("%s{\"image\": ", im > 1 ? ", " : ""), put_json_string(pos[im]), printf(", \"top\": [");
        else printf("%s\n", pos[im]);
        for (int r = 0; r < top && r < k; r++) {
            int best = -1;
            for (int c = 0; c < k; c++)
                if (!isnan(y[c]) && (best < 0 || y[c] > y[best])) best = c;
            if (best < 0) break;
            const double p = exp(y[best] - mx) / sum;
            json_t *lab = labels ? json_array_get(labels, (size_t)best) : NULL;
            const char *name = json_is_string(lab) ? json_string_value(lab) : NULL;
            if (json) {
                printf("%s{\"class\": %d, \"probability\": %.6f, \"label\": ", r ? ", " : "", best, p);
                if (name) put_json_string(name); else printf("null");
                printf("}");
            } else {
                printf("  %2d. %6.2f%%  class %d%s%s\n", r + 1, 100 * p, best, name ? "  " : "",
                       name ? name : "");
            }
            y[best] = NAN;   /* taken */
        }
        if (json) printf("]}");
        free(y), y = NULL;
    }
    if (json && code == EX_OK) printf("]\n");
done:
    json_decref(labels);
    free(rgb), free(x), free(y);
    ra_model_free(m);
    return code;
}

/* ---- relattn resize ----------------------------------------------------- */

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

static int cmd_resize(int argc, char **argv) {
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

/* ---- main --------------------------------------------------------------- */

static const char main_help[] =
    "usage: relattn COMMAND [ARGS]\n"
    "\n"
    "Transformer attention with relative position encodings (Shaw, Swin, RSTT, ViT).\n"
    "\n"
    "commands:\n"
    "  index     print a relative position index (Swin 2-D, RSTT 3-D, Shaw clip)\n"
    "  forward   run an attention layer from a safetensors model file\n"
    "  backward  its gradients: inputs and every parameter, tables included\n"
    "  show      list a safetensors file, with a summary of attention maps\n"
    "  inspect   describe a model file: arch, naming scheme, parameters, FLOPs\n"
    "  classify  classify images with a swin or vit model\n"
    "  resize    resample a model's bias tables for another window size\n"
    "\n"
    "'relattn COMMAND --help' describes each. Exit codes: 0 ok, 64 usage,\n"
    "65 bad data, 66 input missing, 73 output cannot be created, 70 internal.\n"
    "Environment: RELATTN_KERNEL=ref|avx2 forces an attention kernel.\n";

int main(int argc, char **argv) {
    static const struct { const char *name; int (*run)(int, char **); } cmds[] = {
        {"index", cmd_index}, {"forward", cmd_forward}, {"backward", cmd_backward},
        {"show", cmd_show}, {"inspect", cmd_inspect}, {"classify", cmd_classify},
        {"resize", cmd_resize}};
    if (argc < 2) return usage_error("no command given");
    int code = -1;
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help"))
        code = (fputs(main_help, stdout), EX_OK);
    else if (!strcmp(argv[1], "--version"))
        code = (printf("relattn %s (kernel %s)\n", RA_VERSION_STRING,
                       ra_kernel_name(ra_kernel_current())), EX_OK);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0] && code < 0; i++)
        if (!strcmp(argv[1], cmds[i].name)) {
            static char name[64];
            snprintf(name, sizeof name, "relattn %s", cmds[i].name);
            cmd = name;
            code = cmds[i].run(argc - 2, argv + 2);
        }
    if (code < 0) return usage_error("unknown command '%.60s'", argv[1]);
    /* what went to stdout (index, show, help) must have arrived: a full disk
     * is an error, not a success */
    if (code == EX_OK && (fflush(stdout) || ferror(stdout)))
        code = fail(EX_CANTCREAT, "cannot write to stdout");
    return code;
}
