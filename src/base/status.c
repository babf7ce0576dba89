/* status.c - status codes and the per-thread reason for the last failure. */
#include "base/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAST_ERROR_MAX 8192
static _Thread_local char last_error[LAST_ERROR_MAX];

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

/* The length of a valid UTF-8 sequence at p that is not a C1 control, else 0. */
static size_t utf8_len(const unsigned char *p) {
    if (p[0] < 0xc2 || p[0] > 0xf4) return 0;
    const size_t n = p[0] < 0xe0 ? 2 : p[0] < 0xf0 ? 3 : 4;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0) return 0;              /* C1 */
    if (n == 3 && p[0] == 0xe0 && p[1] < 0xa0) return 0;              /* overlong */
    if (n == 3 && p[0] == 0xed && p[1] >= 0xa0) return 0;             /* surrogate */
    if (n == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))) return 0;
    return n;
}

size_t ra_escape_text(char *dst, size_t cap, const char *src) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)(src ? src : "");
    size_t n = 0;
    while (*p) {
        size_t k = *p >= 0x20 && *p < 0x7f ? 1 : utf8_len(p);
        if (k) {   /* kept as it is, whole or not at all */
            if (n + k < cap) memcpy(dst + n, p, k);
            else if (n < cap) cap = n + 1;   /* no half sequence after a cut */
            n += k, p += k;
        } else {
            const char e[4] = {'\\', 'x', hex[*p >> 4], hex[*p & 15]};
            if (n + 4 < cap) memcpy(dst + n, e, 4);
            else if (n < cap) cap = n + 1;
            n += 4, p++;
        }
    }
    if (cap) dst[n < cap ? n : cap - 1] = 0;
    return n;
}

ra_status rai_fail(ra_status s, const char *fmt, ...) {
    /* the whole message first (on the heap if long), then escaped: every
     * byte a file or an argument put into it is safe on a terminal */
    char small[1024], *raw = small;
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    const int len = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (len >= (int)sizeof small && (raw = malloc((size_t)len + 1)))
        vsnprintf(raw, (size_t)len + 1, fmt, ap2);
    else if (!raw) raw = small;   /* out of memory: the first KB */
    va_end(ap2);
    const size_t need = ra_escape_text(last_error, sizeof last_error, raw);
    if (need >= sizeof last_error) {
        /* too long: keep the start and the end (the reason), lose the middle */
        char *esc = malloc(need + 1);
        if (esc) {
            ra_escape_text(esc, need + 1, raw);
            const size_t head = LAST_ERROR_MAX / 4, tail = LAST_ERROR_MAX - head - 8;
            size_t t = need - tail;
            while (t < need && ((unsigned char)esc[t] & 0xc0) == 0x80) t++;   /* whole UTF-8 */
            size_t h = head;
            while (h > 0 && ((unsigned char)esc[h] & 0xc0) == 0x80) h--;
            memcpy(last_error, esc, h);
            memcpy(last_error + h, " ... ", 5);
            memcpy(last_error + h + 5, esc + t, need - t + 1);
            free(esc);
        }
    }
    if (raw != small) free(raw);
    return s;
}

void *rai_alloc(size_t n, size_t sz) {
    size_t bytes;
    if (!rai_mul_size(&bytes, n, sz)) return NULL;
    bytes = (bytes + 63) & ~(size_t)63;
    if (bytes == 0) bytes = 64;
    return aligned_alloc(64, bytes);
}

void *rai_calloc(size_t n, size_t sz) {
    size_t bytes;
    if (!rai_mul_size(&bytes, n, sz)) return NULL;
    void *p = rai_alloc(n, sz);
    if (p) memset(p, 0, bytes);
    return p;
}

void rai_free(void *p) { free(p); }

char *rai_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}
