/* cmd_plot.c - relattn plot: the pictures of a trained model (PNG, through
 * the library's src/io/plot.c):
 *   bias       every block's learned relative position bias, per head, as
 *              a (2Wh-1) x (2Ww-1) heat map over (dy, dx);
 *   attention  attention maps of chosen query tokens over an input image;
 *   curves     loss and test accuracy of training runs (their checkpoints'
 *              train.log.* metadata). */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char plot_help[] =
    "usage: relattn plot bias MODEL -o OUT.png [--per-table]\n"
    "       relattn plot attention MODEL -o OUT.png [--image FILE | --index I]\n"
    "                  [--data DIR] [--stage S] [--block J] [--query R,C]...\n"
    "       relattn plot curves CKPT.safetensors... -o OUT.png [--label NAME]...\n"
    "       relattn plot sample -o OUT.png [--index I] [--data DIR]\n"
    "\n"
    "bias       the relative position bias table of every block of a swin model (or\n"
    "           a swin_block / window_attention file): one row of heads per block,\n"
    "           cell (dy, dx) = the bias a query adds to a key dy rows above and dx\n"
    "           columns left of it; blue negative, red positive, one shared scale\n"
    "           (--per-table: one per block)\n"
    "attention  the attention of block J of stage S (default 0, 0; counted from 0)\n"
    "           over one image: test image I of DIR (default 0; Fashion-MNIST) or a\n"
    "           grey PNG/JPEG FILE of the model's size; --query R,C picks query\n"
    "           tokens of that stage's grid (default three along the diagonal)\n"
    "curves     training loss and test accuracy against the step, one series per\n"
    "           checkpoint of 'relattn train' (named by --label, else the file)\n"
    "sample     test image I of DIR as a grey PNG (for 'relattn classify')\n"
    MODEL_OPTIONS_HELP;

/* ---- bias ------------------------------------------------------------------ */

/* The window of a table of T rows: the metadata's window_size if it fits,
 * else the square one (a clamped window). */
static int window_of(const ra_model *m, int64_t t, int *wh, int *ww) {
    const char *v = ra_model_meta(m, "window_size");
    int a = 0, b = 0;
    if (v && sscanf(v, "%d,%d", &a, &b) < 2) b = a;
    if (a > 0 && b > 0 && (int64_t)(2 * a - 1) * (2 * b - 1) == t) return *wh = a, *ww = b, 1;
    const int s = (int)llround(sqrt((double)t));
    if ((int64_t)s * s == t && s % 2) return *wh = *ww = (s + 1) / 2, 1;
    return 0;
}

static int plot_bias(ra_model *m, const char *out, int per_table) {
    int n = 0, code = EX_OK;
    const int np = ra_model_param_count(m);
    ra_plot_table *tabs = calloc((size_t)np + 1, sizeof *tabs);
    char (*labels)[64] = calloc((size_t)np + 1, sizeof *labels);
    if (!tabs || !labels) { free(tabs), free(labels); return fail(EX_DATAERR, "too large: out of memory"); }
    const float *wts = ra_model_weights(m);
    for (int i = 0; i < np; i++) {
        const ra_param_info *p = ra_model_param(m, i);
        const char *suffix = "relative_position_bias_table";
        const size_t ln = strlen(p->name), ls = strlen(suffix);
        if (ln < ls || strcmp(p->name + ln - ls, suffix) || p->ndim != 2) continue;
        int wh, ww, s = -1, j = -1;
        if (!window_of(m, p->shape[0], &wh, &ww)) continue;   /* a 3-D table */
        if (sscanf(p->name, "layers.%d.blocks.%d.", &s, &j) == 2)
            snprintf(labels[n], sizeof labels[n], "stage %d block %d", s + 1, j);
        else
            snprintf(labels[n], sizeof labels[n], "%.60s", p->name);
        tabs[n] = (ra_plot_table){.table = wts + p->offset, .nh = (int)p->shape[1], .wh = wh,
                                  .ww = ww, .label = labels[n]};
        n++;
    }
    if (!n) code = fail(EX_DATAERR, "the model has no 2-D relative position bias table");
    else {
        char title[160];
        snprintf(title, sizeof title, "learned relative position bias (%s)",
                 ra_arch_name(ra_model_arch(m)));
        ra_status st = ra_plot_bias_tables(out, tabs, n, per_table ? RA_PLOT_SCALE_PER_TABLE
                                                                    : RA_PLOT_SCALE_SHARED, title);
        if (st) code = lib_fail(st);
    }
    free(tabs), free(labels);
    return code;
}

/* ---- attention -------------------------------------------------------------- */

static int plot_attention(ra_model *m, const char *out, const opt *o, const char **qs, int nqs) {
    if (ra_model_arch(m) != RA_ARCH_SWIN) return fail(EX_DATAERR, "attention maps need a swin model");
    const char *ic = ra_model_meta(m, "in_chans");
    if (!ic || strcmp(ic, "1")) return fail(EX_DATAERR, "attention maps: grey models (in_chans 1) only");
    int stage = 0, block = 0, index = 0, code = EX_OK;
    if (get(o, "--stage") && !parse_int(&stage, get(o, "--stage"), 0, 64))
        return usage_error("--stage '%s': need 0..64", get(o, "--stage"));
    if (get(o, "--block") && !parse_int(&block, get(o, "--block"), 0, 1024))
        return usage_error("--block '%s': need 0..1024", get(o, "--block"));
    if (get(o, "--index") && !parse_int(&index, get(o, "--index"), 0, 100000000))
        return usage_error("--index '%s': need an image number", get(o, "--index"));
    float mean, std;
    if (!model_norm(m, &mean, &std)) return EX_DATAERR;
    float *grey = NULL, *x = NULL, *maps = NULL;
    int h = 0, w = 0;
    ra_status st = RA_OK;
    ra_dataset d = {0};
    if (get(o, "--image")) {
        float *rgb = NULL;
        if ((st = ra_image_load(&rgb, &w, &h, get(o, "--image"), (int64_t)1 << 22))) return lib_fail(st);
        grey = malloc((size_t)w * h * sizeof *grey);
        for (int64_t i = 0; grey && i < (int64_t)w * h; i++)   /* ITU-R 601 luma, as PIL's "L" */
            grey[i] = rgb[3 * i] * 0.299f + rgb[3 * i + 1] * 0.587f + rgb[3 * i + 2] * 0.114f;
        free(rgb);
    } else {
        const char *dir = get(o, "--data") ? get(o, "--data") : "/usr/share/datasets/fashion-mnist";
        if ((st = ra_dataset_load_dir(&d, dir, "test"))) return lib_fail(st);
        if (index >= d.n) {
            ra_dataset_free(&d);
            return fail(EX_DATAERR, "--index %d: the test set has %lld images", index, (long long)d.n);
        }
        h = d.h, w = d.w;
        grey = malloc((size_t)w * h * sizeof *grey);
        for (int64_t i = 0; grey && i < (int64_t)w * h; i++)
            grey[i] = d.images[(int64_t)index * h * w + i] / 255.0f;
    }
    x = malloc((size_t)w * h * sizeof *x);
    if (!grey || !x) { code = fail(EX_DATAERR, "too large: out of memory"); goto done; }
    for (int64_t i = 0; i < (int64_t)w * h; i++) x[i] = (grey[i] - mean) / std;
    int gh, gw, nh;
    if ((st = ra_swin_attention_maps(m, NULL, &gh, &gw, &nh, x, h, w, stage, block, NULL, 0))) {
        code = lib_fail(st);
        goto done;
    }
    int q[2 * 16], nq = 0;
    for (int i = 0; i < nqs && nq < 16; i++, nq++)
        if (sscanf(qs[i], "%d,%d", &q[2 * nq], &q[2 * nq + 1]) != 2) {
            code = usage_error("--query '%s': need ROW,COL", qs[i]);
            goto done;
        }
    if (!nq)   /* three along the diagonal */
        for (; nq < 3; nq++) q[2 * nq] = gh * (nq + 1) / 4, q[2 * nq + 1] = gw * (nq + 1) / 4;
    if (!(maps = malloc((size_t)nq * nh * gh * gw * sizeof *maps))) {
        code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    st = ra_swin_attention_maps(m, maps, &gh, &gw, &nh, x, h, w, stage, block, q, nq);
    char title[160];
    snprintf(title, sizeof title, "attention of stage %d block %d (%dx%d tokens)", stage + 1, block,
             gh, gw);
    if (!st) st = ra_plot_attention(out, grey, h, w, 1, maps, nq, nh, gh, gw, q, title);
    if (st) code = lib_fail(st);
done:
    free(grey), free(x), free(maps);
    ra_dataset_free(&d);
    return code;
}

/* ---- a sample image of the data ------------------------------------------------ */

static int plot_sample(const opt *o, const char *out) {
    int index = 0;
    if (get(o, "--index") && !parse_int(&index, get(o, "--index"), 0, 100000000))
        return usage_error("--index '%s': need an image number", get(o, "--index"));
    const char *dir = get(o, "--data") ? get(o, "--data") : "/usr/share/datasets/fashion-mnist";
    ra_dataset d = {0};
    ra_status st = ra_dataset_load_dir(&d, dir, "test");
    if (st) return lib_fail(st);
    int code = EX_OK;
    uint8_t *rgb = NULL;
    if (index >= d.n) code = fail(EX_DATAERR, "--index %d: the test set has %lld images", index,
                                  (long long)d.n);
    else if (!(rgb = malloc((size_t)3 * d.h * d.w))) code = fail(EX_DATAERR, "too large: out of memory");
    else {
        for (int64_t i = 0; i < (int64_t)d.h * d.w; i++)
            rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = d.images[(int64_t)index * d.h * d.w + i];
        if ((st = ra_png_write(out, rgb, d.w, d.h))) code = lib_fail(st);
        else fprintf(stderr, "%s: test image %d, class %d\n", cmd, index, d.labels[index]);
    }
    free(rgb);
    ra_dataset_free(&d);
    return code;
}

/* ---- curves ----------------------------------------------------------------- */

/* A checkpoint's log as float series, x and y (malloc'ed): 0 if no memory. */
static int log_series(const char *s, float **x, float **y, int *n) {
    enum { MAX = 1 << 16 };
    double *v = malloc(2 * MAX * sizeof *v);
    *n = v ? parse_pairs(v, MAX, s) : 0;
    *x = malloc(((size_t)*n + 1) * sizeof **x), *y = malloc(((size_t)*n + 1) * sizeof **y);
    for (int i = 0; v && *x && *y && i < *n; i++) (*x)[i] = (float)v[2 * i], (*y)[i] = (float)v[2 * i + 1];
    free(v);
    return v && *x && *y;
}

static int plot_curves(const char **files, int nf, const char **labels, int nl, const char *out) {
    ra_plot_series *sr = calloc((size_t)2 * nf, sizeof *sr);
    float **bufs = calloc((size_t)4 * nf, sizeof *bufs);
    int ns = 0, code = EX_OK;
    if (!sr || !bufs) code = fail(EX_DATAERR, "too large: out of memory");
    for (int i = 0; i < nf && !code; i++) {
        ra_st_file *f = NULL;
        ra_status st = ra_st_open(&f, files[i]);
        if (st) { code = lib_fail(st); break; }
        const char *ls = ra_st_meta(f, "train.log.loss"), *as = ra_st_meta(f, "train.log.test_accuracy");
        if (!ls || !as) {
            ra_st_close(f);
            code = fail(EX_DATAERR, "%.200s has no training log (train.log.*): not a checkpoint of "
                        "relattn train", files[i]);
            break;
        }
        int n1, n2;
        const char *name = i < nl ? labels[i] : files[i];
        if (!log_series(ls, &bufs[4 * i], &bufs[4 * i + 1], &n1) ||
            !log_series(as, &bufs[4 * i + 2], &bufs[4 * i + 3], &n2))
            code = fail(EX_DATAERR, "too large: out of memory");
        ra_st_close(f);
        if (code) break;
        sr[ns++] = (ra_plot_series){.name = name, .x = bufs[4 * i], .y = bufs[4 * i + 1], .n = n1, .panel = 0};
        sr[ns++] = (ra_plot_series){.name = name, .x = bufs[4 * i + 2], .y = bufs[4 * i + 3], .n = n2, .panel = 1};
    }
    if (!code) {
        const char *titles[] = {"training loss", "test accuracy"};
        ra_status st = ra_plot_curves(out, sr, ns, titles, 2, "step", "relattn train");
        if (st) code = lib_fail(st);
    }
    for (int i = 0; bufs && i < 4 * nf; i++) free(bufs[i]);
    free(bufs), free(sr);
    return code;
}

/* ---- the command --------------------------------------------------------------- */

int cmd_plot(int argc, char **argv) {
    if (!take_model_options(&argc, argv)) return EX_USAGE;
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))
        return argc < 1 ? usage_error("expected bias, attention or curves")
                        : (fputs(plot_help, stdout), EX_OK);
    const char *what = argv[0];
    /* --query and --label repeat: gather them before the common parser */
    const char *qs[16], *labels[64], *rest[256];
    int nq = 0, nl = 0, nr = 0;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "--query") || !strcmp(argv[i], "--label")) && i + 1 < argc) {
            if (argv[i][2] == 'q' && nq < 16) qs[nq++] = argv[++i];
            else if (argv[i][2] == 'l' && nl < 64) labels[nl++] = argv[++i];
            else return usage_error("too many %s options", argv[i]);
        } else if (nr < 255) {
            rest[nr++] = argv[i];
        } else {
            return usage_error("too many arguments");
        }
    }
    opt o[] = {{"-o", 1, 0},     {"--output", 1, 0}, {"--per-table", 0, 0}, {"--image", 1, 0},
               {"--index", 1, 0}, {"--data", 1, 0},  {"--stage", 1, 0},     {"--block", 1, 0},
               {"--threads", 1, 0}, {"--help", 0, 0}, {"-h", 0, 0},        {0, 0, 0}};
    const char *pos[64];
    int npos = 0;
    if (!parse_args(nr, (char **)rest, o, pos, 64, &npos)) return EX_USAGE;
    if (get(o, "--help") || get(o, "-h")) return fputs(plot_help, stdout), EX_OK;
    if (!threads_option(o)) return EX_USAGE;
    const char *out = get(o, "-o") ? get(o, "-o") : get(o, "--output");
    if (!out) return usage_error("-o OUT.png is required");
    const char *in_files[65] = {get(o, "--image")};
    for (int i = 0; i < npos; i++) in_files[i + 1] = pos[i];
    if (output_not_input(out, in_files, npos + 1)) return EX_CANTCREAT;
    if (!strcmp(what, "curves")) {
        if (npos < 1) return usage_error("expected one or more checkpoints");
        return plot_curves(pos, npos, labels, nl, out);
    }
    if (!strcmp(what, "sample")) {
        if (npos) return usage_error("sample takes no model");
        return plot_sample(o, out);
    }
    if (strcmp(what, "bias") && strcmp(what, "attention"))
        return usage_error("unknown picture '%.40s' (bias, attention, curves or sample)", what);
    if (npos != 1) return usage_error("expected one MODEL");
    ra_model *m = NULL;
    ra_status st = open_model(&m, pos[0]);
    if (st) return lib_fail(st);
    const int code = !strcmp(what, "bias") ? plot_bias(m, out, get(o, "--per-table") != NULL)
                                           : plot_attention(m, out, o, qs, nq);
    ra_model_free(m);
    return code;
}
