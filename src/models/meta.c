/* meta.c - the hyperparameters of a model file's __metadata__, parsed
 * strictly (ra_meta_*; models/model.h): a failure is RA_ERR_FORMAT naming
 * the key. */
#include "models/model.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A decimal integer in [lo, hi], the whole string. */
static ra_status parse_int(int *out, const char *key, const char *s, int lo, int hi) {
    const char *p = s;
    if (*p == '-' || *p == '+') p++;
    if (*p < '0' || *p > '9')
        return rai_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\" is not an integer", key, s);
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end || errno)
        return rai_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\" is not an integer", key, s);
    if (v < lo || v > hi)
        return rai_fail(RA_ERR_FORMAT, "metadata %s = %lld is outside %d..%d", key, v, lo, hi);
    *out = (int)v;
    return RA_OK;
}

static const char *need(const ra_st_file *f, const char *key, ra_status *st) {
    const char *v = ra_st_meta(f, key);
    if (!v)
        *st = rai_fail(RA_ERR_FORMAT, "metadata key \"%s\" is missing (arch %s)", key,
                      ra_st_meta(f, "arch"));
    return v;
}

ra_status rai_meta_int(const ra_st_file *f, const char *key, int *out, int lo, int hi) {
    ra_status st = RA_OK;
    const char *v = need(f, key, &st);
    return v ? parse_int(out, key, v, lo, hi) : st;
}

ra_status rai_meta_int_opt(const ra_st_file *f, const char *key, int *out, int lo, int hi) {
    const char *v = ra_st_meta(f, key);
    return v ? parse_int(out, key, v, lo, hi) : RA_OK;
}

ra_status rai_meta_list(const ra_st_file *f, const char *key, int *out, int max, int *n,
                        int lo, int hi) {
    ra_status st = RA_OK;
    const char *v = need(f, key, &st);
    if (!v) return st;
    char buf[256];
    size_t len = strlen(v);
    if (len >= sizeof buf)
        return rai_fail(RA_ERR_FORMAT, "metadata %s is too long", key);
    memcpy(buf, v, len + 1);
    char *p = buf;
    *n = 0;
    for (;;) {
        if (*n) while (*p == ' ') p++;   /* "3, 5": a space after a comma */
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        if (*n >= max)
            return rai_fail(RA_ERR_FORMAT, "metadata %s = \"%.60s\" has more than %d values",
                            key, v, max);
        if ((st = parse_int(&out[(*n)++], key, p, lo, hi))) {
            if (strstr(ra_last_error(), "not an integer"))   /* "7,": name the whole value */
                st = rai_fail(st, "metadata %s = \"%.60s\" is not a list of integers", key, v);
            return st;
        }
        if (!comma) break;
        p = comma + 1;
    }
    return RA_OK;
}

ra_status rai_meta_pair(const ra_st_file *f, const char *key, int out[2], int lo, int hi) {
    int n = 0;
    ra_status st = rai_meta_list(f, key, out, 2, &n, lo, hi);
    if (!st && n == 1) out[1] = out[0];   /* an int window is a square */
    return st;
}

ra_status rai_meta_bool_opt(const ra_st_file *f, const char *key, int *out) {
    const char *v = ra_st_meta(f, key);
    if (!v) return RA_OK;
    if (strcmp(v, "true") == 0) *out = 1;
    else if (strcmp(v, "false") == 0) *out = 0;
    else return rai_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\" is not true or false", key, v);
    return RA_OK;
}

ra_status rai_meta_double_opt(const ra_st_file *f, const char *key, double *out, int *given) {
    const char *v = ra_st_meta(f, key);
    if (!v) return RA_OK;
    errno = 0;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x))
        return rai_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\" is not a finite number", key, v);
    *out = x;
    if (given) *given = 1;
    return RA_OK;
}

ra_status rai_meta_mlp_ratio(const ra_st_file *f, double *out) {
    *out = 4.0;   /* the default of every Swin / ViT constructor */
    ra_status st = rai_meta_double_opt(f, "mlp_ratio", out, NULL);
    if (!st && !(*out > 0))
        st = rai_fail(RA_ERR_FORMAT, "metadata mlp_ratio = \"%.40s\" is not a positive number",
                      ra_st_meta(f, "mlp_ratio"));
    return st;
}

ra_status rai_meta_float_opt(const ra_st_file *f, const char *key, float *out, int *given) {
    const char *v = ra_st_meta(f, key);
    if (!v) return RA_OK;
    errno = 0;
    char *end;
    float x = strtof(v, &end);
    if (end == v || *end || errno || !isfinite(x))
        return rai_fail(RA_ERR_FORMAT, "metadata %s = \"%.40s\" is not a finite number", key, v);
    *out = x;
    if (given) *given = 1;
    return RA_OK;
}

