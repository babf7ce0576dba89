/* status.c - status codes and the per-thread reason for the last failure. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[512];

const char *ra_status_str(ra_status s) {
    switch (s) {
    case RA_OK: return "ok";
    case RA_ERR_ARG: return "invalid argument";
    case RA_ERR_SHAPE: return "wrong shape";
    case RA_ERR_FORMAT: return "malformed file";
    case RA_ERR_IO: return "cannot read input";
    case RA_ERR_WRITE: return "cannot write output";
    case RA_ERR_NOMEM: return "out of memory";
    case RA_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *ra_last_error(void) { return last_error; }

ra_status ra_fail(ra_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    /* keep the reason on one line, whatever a file put into it */
    for (char *c = last_error; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    return s;
}

void *ra_alloc(size_t n, size_t sz) {
    size_t bytes;
    if (!ra_mul_size(&bytes, n, sz)) return NULL;
    bytes = (bytes + 63) & ~(size_t)63;
    if (bytes == 0) bytes = 64;
    return aligned_alloc(64, bytes);
}

void *ra_calloc(size_t n, size_t sz) {
    size_t bytes;
    if (!ra_mul_size(&bytes, n, sz)) return NULL;
    void *p = ra_alloc(n, sz);
    if (p) memset(p, 0, bytes);
    return p;
}

void ra_free(void *p) { free(p); }

char *ra_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}
