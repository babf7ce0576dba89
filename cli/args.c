/* args.c - what every subcommand shares: messages, exit codes, options. */
#define _XOPEN_SOURCE 700   /* sigaction, SA_RESETHAND, PATH_MAX */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cmd = "relattn";   /* main() names the subcommand */

/* ---- messages and exit codes -------------------------------------------- */

/* "CMD: message[suffix]" on stderr, the message escaped as a whole
 * (ra_escape_text): names from files and arguments cannot drive the
 * terminal, and nothing is cut short. */
static void message(const char *suffix, const char *fmt, va_list ap) {
    char small[1024], *raw = small, *esc = NULL;
    va_list ap2;
    va_copy(ap2, ap);
    const int len = vsnprintf(small, sizeof small, fmt, ap);
    if (len >= (int)sizeof small && (raw = malloc((size_t)len + 1)))
        vsnprintf(raw, (size_t)len + 1, fmt, ap2);
    else if (!raw) raw = small;
    va_end(ap2);
    char none[1];
    const size_t need = ra_escape_text(none, 1, raw);
    if ((esc = malloc(need + 1))) ra_escape_text(esc, need + 1, raw);
    fprintf(stderr, "%s: %s%s\n", cmd, esc ? esc : "(out of memory)", suffix);
    free(esc);
    if (raw != small) free(raw);
}

int fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    message("", fmt, ap);
    va_end(ap);
    return code;
}

int usage_error(const char *fmt, ...) {
    char suffix[96];
    snprintf(suffix, sizeof suffix, " (see '%s --help')", cmd);
    va_list ap;
    va_start(ap, fmt);
    message(suffix, fmt, ap);
    va_end(ap);
    return EX_USAGE;
}

/* Out of memory is bad data: what is allocated is sized by the files and
 * arguments (within the documented limits), so the input is too large for
 * this machine. */
int lib_fail(ra_status st) {
    int code = st == RA_ERR_IO ? EX_NOINPUT
             : st == RA_ERR_WRITE ? EX_CANTCREAT
             : (st == RA_ERR_ARG || st == RA_ERR_SHAPE || st == RA_ERR_FORMAT ||
                st == RA_ERR_NOMEM) ? EX_DATAERR
             : EX_SOFTWARE;
    const char *why = ra_last_error();
    return fail(code, "%s%s", st == RA_ERR_NOMEM ? "too large: " : "",
                *why ? why : ra_status_str(st));
}

int status_exit(ra_status st) {
    (void)st;
    return EX_DATAERR;
}

/* ---- outputs ------------------------------------------------------------ */

int output_not_input(const char *out, const char *const *inputs, int n) {
    struct stat so, si;
    if (stat(out, &so) != 0) return EX_OK;   /* nothing there yet (or the writer says why) */
    for (int i = 0; i < n; i++)
        if (inputs[i] && stat(inputs[i], &si) == 0 && si.st_dev == so.st_dev &&
            si.st_ino == so.st_ino)
            return fail(EX_CANTCREAT, "output '%s' is the input '%s': refusing to overwrite it",
                        out, inputs[i]);
    return output_ok(out);
}

int output_ok(const char *out) {
    const ra_status st = ra_output_check(out);
    return st ? lib_fail(st) : EX_OK;
}

/* The temporary file being written (the library's hook keeps it here), for
 * the signal handler: a flag that is lock-free and a buffer that is never
 * freed, so that the handler, in whatever thread, calls only unlink. */
static atomic_int temp_known;
static char temp_path[PATH_MAX + 32];

static void track_temp(const char *tmp) {
    atomic_store(&temp_known, 0);
    if (tmp && strlen(tmp) < sizeof temp_path) {
        strcpy(temp_path, tmp);
        atomic_store(&temp_known, 1);
    }
}

static void remove_temp_and_die(int sig) {
    if (atomic_load(&temp_known)) unlink(temp_path);
    raise(sig);   /* SA_RESETHAND: the default action, once this returns */
}

void cleanup_on_signals(void) {
    ra_set_tempfile_hook(track_temp);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = remove_temp_and_die;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        struct sigaction old;
        /* a signal ignored by the parent (nohup) stays ignored */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(sigs[i], &sa, NULL);
    }
    signal(SIGXFSZ, SIG_IGN);
}

/* ---- argument parsing --------------------------------------------------- */

int parse_int(int *out, const char *s, int lo, int hi) {
    if (!s || !*s || !(*s == '-' || (*s >= '0' && *s <= '9'))) return 0;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

const char *int_problem(const char *s, int lo, int hi) {
    static char why[64];
    long v;
    char *end;
    errno = 0;
    if (!s || !*s || !(*s == '-' || (*s >= '0' && *s <= '9')) ||
        ((void)(v = strtol(s, &end, 10)), *end) || (errno && errno != ERANGE))
        return "not an integer";
    snprintf(why, sizeof why, "out of range %d..%d", lo, hi);
    return why;
}

int parse_window(int w[2], const char *s) {
    char buf[64];
    if (!s || strlen(s) >= sizeof buf) return 0;
    strcpy(buf, s);
    char *sep = strpbrk(buf, "x,X");
    if (!sep) return parse_int(&w[0], buf, INT_MIN, INT_MAX) && (w[1] = w[0], 1);
    *sep = 0;
    return parse_int(&w[0], buf, INT_MIN, INT_MAX) && parse_int(&w[1], sep + 1, INT_MIN, INT_MAX);
}

/* "all", or integers, commas and minus signs only: the value of an option
 * whose value is optional (takes_value 2). */
static int list_like(const char *s) {
    if (!strcmp(s, "all")) return 1;
    if (!*s) return 0;
    for (; *s; s++)
        if (!strchr("0123456789,-", *s)) return 0;
    return 1;
}

int parse_args(int argc, char **argv, opt *opts, const char **pos, int maxpos,
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
            } else if (o->takes_value == 2 && !eq) {   /* a value only if it is a list */
                o->value = i + 1 < argc && list_like(argv[i + 1]) ? argv[++i] : "";
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

ra_load_options model_options;

int take_model_options(int *argc, char **argv) { return take_model_options_as(argc, argv, 1); }

int take_model_options_as(int *argc, char **argv, int precision) {
    enum { MAX_SETS = 64 };
    static const char *sets[MAX_SETS];
    int n = 0, k = 0, prec_given = 0;
    memset(&model_options, 0, sizeof model_options);
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i], *v = NULL;
        const int is_key = !strncmp(a, "--key", 5) && (!a[5] || a[5] == '=');
        const int is_set = !strncmp(a, "--set", 5) && (!a[5] || a[5] == '=');
        const int is_prec = precision && !strncmp(a, "--precision", 11) && (!a[11] || a[11] == '=');
        if (!is_key && !is_set && !is_prec) {
            argv[k++] = argv[i];
            continue;
        }
        const size_t len = is_prec ? 11 : 5;
        if (a[len] == '=') v = a + len + 1;
        else if (i + 1 < *argc) v = argv[++i];
        else return usage_error("option %.*s needs a value", (int)len, a), 0;
        if (is_prec) {
            const int p = ra_precision_parse(v);
            if (p < 0) return usage_error("--precision '%s': fp32, bf16 or int8", v), 0;
            if (prec_given++) return usage_error("option --precision given twice"), 0;
            model_options.precision = (ra_precision)p;
        } else if (is_key) {
            if (model_options.key) return usage_error("option --key given twice"), 0;
            model_options.key = v;
        } else {
            const char *eq = strchr(v, '=');
            if (!eq || eq == v) return usage_error("--set '%s': expected KEY=VALUE", v), 0;
            if (n == MAX_SETS) return usage_error("more than %d --set options", MAX_SETS), 0;
            sets[n++] = v;
        }
    }
    *argc = k;
    model_options.set = sets;
    model_options.nset = n;
    return 1;
}

ra_status open_model(ra_model **m, const char *path) {
    return ra_model_open(m, path, &model_options);
}

const char *get(const opt *opts, const char *name) {
    for (; opts->name; opts++)
        if (strcmp(opts->name, name) == 0) return opts->value;
    return NULL;
}

int threads_option(const opt *opts) {
    const char *t = get(opts, "--threads");
    int n;
    if (!t) return 1;
    if (!parse_int(&n, t, 1, 1024)) return usage_error("--threads '%s': need 1..1024", t), 0;
    ra_threads_set(n);
    return 1;
}

int model_input_args(int argc, char **argv, opt *opts, const char *help,
                     const char *pos[2], const char **outp) {
    int npos;
    if (!parse_args(argc, argv, opts, pos, 2, &npos)) return EX_USAGE;
    if (get(opts, "--help") || get(opts, "-h")) return fputs(help, stdout), EX_OK;
    *outp = get(opts, "-o") ? get(opts, "-o") : get(opts, "--output");
    if (npos != 2) return usage_error("needs MODEL and INPUT");
    if (!*outp || !**outp) return usage_error("needs -o OUT.safetensors");
    if (!threads_option(opts)) return EX_USAGE;
    if (output_not_input(*outp, pos, 2)) return EX_CANTCREAT;
    return -1;
}

/* ---- output ------------------------------------------------------------- */

const char *safe_text(const char *s) {
    static char *buf[8];
    static size_t cap[8];
    static int k;
    const int i = k++ % 8;
    char none[1];
    const size_t need = ra_escape_text(none, 1, s) + 1;
    if (need > cap[i]) {
        char *b = realloc(buf[i], need);
        if (!b) return "(out of memory)";
        buf[i] = b, cap[i] = need;
    }
    ra_escape_text(buf[i], cap[i], s);
    return buf[i];
}

static int meta_num(const ra_model *m, const char *a, const char *b, float def, float *out) {
    const char *v = ra_model_meta(m, a);
    if (!v) v = ra_model_meta(m, b);
    if (!v) return *out = def, 1;
    char *end;
    *out = strtof(v, &end);
    return end != v && !*end && isfinite(*out);
}

int model_norm(const ra_model *m, float *mean, float *std) {
    if (!meta_num(m, "train.mean", "mean", 0.2860f, mean) ||
        !meta_num(m, "train.std", "std", 0.3530f, std) || !(*std > 0)) {
        fail(EX_DATAERR, "the model's mean/std metadata must be one number each, std > 0");
        return 0;
    }
    return 1;
}

int parse_pairs(double *v, int max, const char *s) {
    int n = 0;
    char *end;
    while (s && *s && n < max) {
        const double a = strtod(s, &end);
        if (end == s) break;
        s = end;
        const double b = strtod(s, &end);
        if (end == s) break;
        s = end;
        v[2 * n] = a, v[2 * n + 1] = b, n++;
    }
    return n;
}
