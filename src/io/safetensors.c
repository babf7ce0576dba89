/* safetensors.c - reading and writing safetensors files (docs/reference.md, section 2).
 *
 * Layout: u64 little-endian header length N | N bytes of JSON | data.
 * A file is validated completely when it is opened, so a tensor handed out
 * by ra_st_at / ra_st_find always lies inside the mapping and its byte count
 * matches its dtype and shape; later code needs no further checks.
 * Tensors are read either through the mapping (ra_st_to_*: t->data) or
 * from the file itself (ra_st_read_*: pread, which a file cut short after
 * the open cannot turn into a SIGBUS); both share the element conversions. */
#define _DEFAULT_SOURCE   /* madvise */
#define _POSIX_C_SOURCE 200809L

#include "io/tensorfile.h"

#include <jansson.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation's bound: a larger header is an attack. */
#define ST_MAX_HEADER 100000000ull

static const struct { const char *name; unsigned size; } st_dtypes[] = {
    [RA_DTYPE_INVALID] = {"INVALID", 0},
    [RA_DTYPE_F32] = {"F32", 4},  [RA_DTYPE_F16] = {"F16", 2},
    [RA_DTYPE_BF16] = {"BF16", 2}, [RA_DTYPE_F64] = {"F64", 8},
    [RA_DTYPE_I64] = {"I64", 8},  [RA_DTYPE_I32] = {"I32", 4},
    [RA_DTYPE_I16] = {"I16", 2},  [RA_DTYPE_I8] = {"I8", 1},
    [RA_DTYPE_U8] = {"U8", 1},    [RA_DTYPE_BOOL] = {"BOOL", 1},
};
#define ST_NDTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

static unsigned st_dtype_size(ra_dtype d) {
    return (d > RA_DTYPE_INVALID && (int)d < ST_NDTYPES) ? st_dtypes[d].size : 0;
}
static const char *st_dtype_name(ra_dtype d) {
    return st_dtype_size(d) ? st_dtypes[d].name : "INVALID";
}

static ra_dtype st_dtype_parse(const char *s) {
    for (int d = 1; d < ST_NDTYPES; d++)
        if (strcmp(s, st_dtypes[d].name) == 0) return (ra_dtype)d;
    return RA_DTYPE_INVALID;
}

/* Little-endian decoding from bytes: correct on any host and at any
 * alignment (tensor data in a file has no alignment guarantee). */
static uint16_t st_u16(const unsigned char *p) {
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}
static uint32_t st_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}
static uint64_t st_u64(const unsigned char *p) {
    return (uint64_t)st_u32(p) | (uint64_t)st_u32(p + 4) << 32;
}

/* Two's complement reinterpretation without implementation-defined
 * unsigned -> signed conversions. */
static int64_t st_sext(uint64_t u, int bits) {
    if (bits < 64) {
        uint64_t sign = (uint64_t)1 << (bits - 1);
        u &= (sign << 1) - 1;
        return (u & sign) ? (int64_t)(u - sign) - (int64_t)sign : (int64_t)u;
    }
    return u <= INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

/* Strict UTF-8 (no overlongs, surrogates or code points > U+10FFFF), the
 * rule jansson applies, so the writer rejects a bad name in add() rather
 * than failing obscurely in save(). */
static int st_utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p++, n, cp;
        if (c < 0x80) continue;
        if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
        else return 0;
        for (unsigned i = 0; i < n; i++, p++) {
            if ((*p & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (*p & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
            return 0;
    }
    return 1;
}

static void st_fmt_shape(char *buf, size_t cap, const int64_t *shape, int nd) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < nd && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, i ? ", %lld" : "%lld",
                              (long long)shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* ------------------------------------------------------------------------ */
/* Reader                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct st_entry {
    ra_st_tensor t;
    uint64_t begin, end;   /* data_offsets, relative to the data section */
    size_t order;          /* position in the header: a stable tie-break */
    rai_st_part one;       /* the bytes, when they are one range */
    rai_st_part *parts;    /* else nparts ranges (owned) */
    int nparts;
    char *name;            /* the name, when the entry owns it */
} st_entry;

static const rai_st_part *st_entry_parts(const st_entry *e) {
    return e->nparts > 1 ? e->parts : &e->one;
}

typedef struct st_keep {
    void (*drop)(void *);
    void *ctx;
} st_keep;

struct ra_st_file {
    unsigned char *base;   /* the whole file: a mapping or a heap copy */
    size_t len;
    int mapped;
    int fd;                /* the open file (ra_st_read_*), -1 for a heap copy */
    json_t *root;          /* owns every name and metadata string */
    json_t *meta;          /* __metadata__, or NULL */
    st_entry *e;           /* (n) sorted by offset */
    const ra_st_tensor **by_name;   /* (n) sorted by name, for bsearch */
    int n;
    const char **meta_keys;         /* (nmeta) header order */
    int nmeta;
    int cap;               /* entries allocated (built files) */
    int built;             /* made by rai_st_new: entries own names and parts */
    st_keep *keep;         /* what the parts point into (built files) */
    int nkeep;
};

/* Names are quoted with a bound so one hostile name cannot push the
 * actual reason out of the (512-byte) error line. */
#define NAMEF "'%.100s'"

static int st_int_at(json_t *v, int64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
    *out = (int64_t)json_integer_value(v);
    return 1;
}

static ra_status st_parse_entry(st_entry *e, const char *name, json_t *v) {
    if (!name[0]) return rai_fail(RA_ERR_FORMAT, "tensor with an empty name");
    if (!json_is_object(v))
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": entry is not an object", name);
    json_t *jd = NULL, *js = NULL, *jo = NULL, *x;
    const char *k;
    json_object_foreach(v, k, x) {
        if (strcmp(k, "dtype") == 0) jd = x;
        else if (strcmp(k, "shape") == 0) js = x;
        else if (strcmp(k, "data_offsets") == 0) jo = x;
        else return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": unknown key '%.60s'", name, k);
    }
    if (!jd || !js || !jo)
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": missing \"%s\"", name,
                        !jd ? "dtype" : !js ? "shape" : "data_offsets");

    ra_st_tensor *t = &e->t;
    t->name = name;
    if (!json_is_string(jd))
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": dtype is not a string", name);
    t->dtype = st_dtype_parse(json_string_value(jd));
    if (t->dtype == RA_DTYPE_INVALID)
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": unknown dtype '%.40s'", name,
                        json_string_value(jd));

    if (!json_is_array(js))
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": shape is not an array", name);
    if (json_array_size(js) > RA_ST_MAX_DIMS)
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": shape has %zu dims, at most %d supported",
                        name, json_array_size(js), RA_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(js);
    t->numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (!st_int_at(json_array_get(js, (size_t)i), &t->shape[i]))
            return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": shape[%d] is not a non-negative integer",
                            name, i);
        /* Like the reference, an overflowing prefix is an error even if a
         * later dimension is 0. */
        if (!rai_mul_i64(&t->numel, t->numel, t->shape[i]))
            return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": element count overflows at shape[%d]",
                            name, i);
    }

    int64_t b, en;
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !st_int_at(json_array_get(jo, 0), &b) || !st_int_at(json_array_get(jo, 1), &en))
        return rai_fail(RA_ERR_FORMAT,
                        "tensor " NAMEF ": data_offsets is not [begin, end] of non-negative integers", name);
    if (b > en)
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": data_offsets [%lld, %lld] are reversed",
                        name, (long long)b, (long long)en);
    int64_t nbytes;
    char shp[200];
    st_fmt_shape(shp, sizeof shp, t->shape, t->ndim);
    if (!rai_mul_i64(&nbytes, t->numel, (int64_t)st_dtype_size(t->dtype)))
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": byte count of shape %s of %s overflows",
                        name, shp, st_dtype_name(t->dtype));
    if (nbytes != en - b)
        return rai_fail(RA_ERR_FORMAT,
                        "tensor " NAMEF ": data_offsets [%lld, %lld] hold %lld bytes, shape %s of %s needs %lld",
                        name, (long long)b, (long long)en, (long long)(en - b), shp,
                        st_dtype_name(t->dtype), (long long)nbytes);
    e->begin = (uint64_t)b;
    e->end = (uint64_t)en;
    return RA_OK;
}

static ra_status st_parse_meta(ra_st_file *f, json_t *m) {
    if (!json_is_object(m)) return rai_fail(RA_ERR_FORMAT, "__metadata__ is not an object");
    f->meta_keys = malloc((json_object_size(m) + 1) * sizeof *f->meta_keys);
    if (!f->meta_keys) return rai_fail(RA_ERR_NOMEM, "out of memory reading __metadata__");
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (!json_is_string(v))
            return rai_fail(RA_ERR_FORMAT, "__metadata__ value of '%.100s' is not a string", k);
        f->meta_keys[f->nmeta++] = k;
    }
    f->meta = m;
    return RA_OK;
}

static int st_cmp_offset(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int st_cmp_name(const void *a, const void *b) {
    return strcmp((*(const ra_st_tensor *const *)a)->name,
                  (*(const ra_st_tensor *const *)b)->name);
}

/* Validate f->base (f->len bytes) and build the tensor tables. */
static ra_status st_parse(ra_st_file *f) {
    if (f->len < 8)
        return rai_fail(RA_ERR_FORMAT, "file is %zu bytes, too short for the 8-byte header length",
                        f->len);
    uint64_t n = st_u64(f->base);
    if (n > ST_MAX_HEADER)
        return rai_fail(RA_ERR_FORMAT, "header length %llu exceeds the limit of %llu bytes",
                        (unsigned long long)n, ST_MAX_HEADER);
    if (n > f->len - 8)
        return rai_fail(RA_ERR_FORMAT, "header length %llu runs past the end of the %zu-byte file",
                        (unsigned long long)n, f->len);
    const char *hdr = (const char *)f->base + 8;
    /* The reference insists on '{' first; jansson would skip whitespace. */
    if (n == 0 || hdr[0] != '{')
        return rai_fail(RA_ERR_FORMAT, "header does not start with '{'");
    json_error_t jerr;
    f->root = json_loadb(hdr, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!f->root)
        return rai_fail(RA_ERR_FORMAT, "header is not valid JSON: %s (line %d, column %d)",
                        jerr.text, jerr.line, jerr.column);
    if (!json_is_object(f->root)) return rai_fail(RA_ERR_FORMAT, "header is not a JSON object");
    size_t count = json_object_size(f->root);
    if (count > INT_MAX) return rai_fail(RA_ERR_FORMAT, "header holds %zu tensors", count);
    f->e = calloc(count + 1, sizeof *f->e);
    f->by_name = malloc((count + 1) * sizeof *f->by_name);
    if (!f->e || !f->by_name) return rai_fail(RA_ERR_NOMEM, "out of memory for %zu tensors", count);

    const char *key;
    json_t *val;
    ra_status s;
    json_object_foreach(f->root, key, val) {
        if (strcmp(key, "__metadata__") == 0) s = st_parse_meta(f, val);
        else {
            f->e[f->n].order = (size_t)f->n;
            s = st_parse_entry(&f->e[f->n++], key, val);
        }
        if (s != RA_OK) return s;
    }

    /* The data must be tiled exactly: sorted by offset, each tensor starts
     * where the previous one ended and the last one ends the file. */
    const unsigned char *data = f->base + 8 + n;
    size_t data_len = f->len - 8 - (size_t)n;
    qsort(f->e, (size_t)f->n, sizeof *f->e, st_cmp_offset);
    uint64_t pos = 0;
    for (int i = 0; i < f->n; i++) {
        st_entry *e = &f->e[i];
        if (e->end > data_len)
            return rai_fail(RA_ERR_FORMAT,
                            "tensor " NAMEF ": data_offsets [%llu, %llu] run past the %zu-byte data section",
                            e->t.name, (unsigned long long)e->begin, (unsigned long long)e->end, data_len);
        if (e->begin != pos)
            return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": data starts at byte %llu, expected %llu (%s)",
                            e->t.name, (unsigned long long)e->begin, (unsigned long long)pos,
                            e->begin < pos ? "overlap" : "gap");
        pos = e->end;
        e->t.data = data + e->begin;
        e->t.nbytes = (size_t)(e->end - e->begin);
        e->one = (rai_st_part){e->t.data, e->t.nbytes, f->fd,
                               (int64_t)((const unsigned char *)e->t.data - f->base)};
        e->nparts = 1;
    }
    if (pos != data_len)
        return rai_fail(RA_ERR_FORMAT, "tensors cover %llu bytes of the %zu-byte data section",
                        (unsigned long long)pos, data_len);
    for (int i = 0; i < f->n; i++) f->by_name[i] = &f->e[i].t;
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, st_cmp_name);
    return RA_OK;
}

ra_status ra_st_open(ra_st_file **out, const char *path) {
    if (!out || !path) return rai_fail(RA_ERR_ARG, "ra_st_open: NULL argument");
    *out = NULL;
    rai_mapping mp;
    ra_status s = rai_map_file(path, &mp);
    if (s) return s;
    if (mp.len < 8) {   /* a short file is malformed */
        const size_t len = mp.len;
        rai_unmap_file(&mp);
        return rai_fail(RA_ERR_FORMAT, "'%s': file is %zu bytes, too short for the 8-byte header "
                        "length", path, len);
    }
    /* The header is parsed in the mapping; ra_st_read_* read tensors
     * through fd instead, touching no mapped page. */
    ra_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        rai_unmap_file(&mp);
        return rai_fail(RA_ERR_NOMEM, "out of memory opening '%s'", path);
    }
    f->base = mp.p;
    f->len = mp.len;
    f->mapped = 1;
    f->fd = mp.fd;
    s = st_parse(f);
    if (s != RA_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", ra_last_error());
        ra_st_close(f);
        return rai_fail(s, "'%s': %s", path, why);
    }
    *out = f;
    return RA_OK;
}

ra_status ra_st_open_memory(ra_st_file **out, const void *buf, size_t len) {
    if (!out || (!buf && len)) return rai_fail(RA_ERR_ARG, "ra_st_open_memory: NULL argument");
    *out = NULL;
    ra_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->base = malloc(len ? len : 1))) {
        free(f);
        return rai_fail(RA_ERR_NOMEM, "out of memory copying a %zu-byte buffer", len);
    }
    f->fd = -1;
    if (len) memcpy(f->base, buf, len);
    f->len = len;
    ra_status s = st_parse(f);
    if (s != RA_OK) {
        ra_st_close(f);
        return s;
    }
    *out = f;
    return RA_OK;
}

void ra_st_close(ra_st_file *f) {
    if (!f) return;
    json_decref(f->root);
    for (int i = 0; f->built && i < f->n; i++) {
        free(f->e[i].name);
        free(f->e[i].parts);
    }
    for (int i = f->nkeep - 1; i >= 0; i--) f->keep[i].drop(f->keep[i].ctx);
    free(f->keep);
    free(f->e);
    free(f->by_name);
    free(f->meta_keys);
    if (f->mapped) munmap(f->base, f->len);
    else free(f->base);
    if (f->fd >= 0) close(f->fd);
    free(f);
}

/* ------------------------------------------------------------------------ */
/* Files built in memory (io/tensorfile.h)                                   */
/* ------------------------------------------------------------------------ */

const char *rai_st_dtype_name(ra_dtype d) { return st_dtype_name(d); }
unsigned rai_st_dtype_size(ra_dtype d) { return st_dtype_size(d); }

ra_status rai_st_new(ra_st_file **out) {
    if (!out) return rai_fail(RA_ERR_ARG, "rai_st_new: NULL argument");
    ra_st_file *f = calloc(1, sizeof *f);
    if (f) {
        f->fd = -1;
        f->built = 1;
        f->root = json_object();
        f->meta = json_object();
        if (f->root && f->meta && json_object_set(f->root, "__metadata__", f->meta) == 0) {
            json_decref(f->meta);   /* root holds it */
            *out = f;
            return RA_OK;
        }
        json_decref(f->meta);
        f->meta = NULL;
        ra_st_close(f);
    }
    *out = NULL;
    return rai_fail(RA_ERR_NOMEM, "out of memory for a tensor file");
}

ra_status rai_st_add(ra_st_file *f, const char *name, ra_dtype dtype, int ndim,
                     const int64_t *shape, const rai_st_part *parts, int nparts) {
    if (!f || !f->built || !name || ndim < 0 || ndim > RA_ST_MAX_DIMS || (ndim && !shape) ||
        nparts < 1 || !parts || !st_dtype_size(dtype))
        return rai_fail(RA_ERR_ARG, "rai_st_add: bad argument");
    int64_t numel = 1, nbytes;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || !rai_mul_i64(&numel, numel, shape[i]))
            return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": bad shape", name);
    if (!rai_mul_i64(&nbytes, numel, (int64_t)st_dtype_size(dtype)))
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": byte count overflows", name);
    uint64_t have = 0;
    for (int i = 0; i < nparts; i++) {
        if ((!parts[i].p && parts[i].nbytes) || (parts[i].fd >= 0 && parts[i].off < 0))
            return rai_fail(RA_ERR_ARG, "rai_st_add: bad part");
        have += parts[i].nbytes;
    }
    if (have != (uint64_t)nbytes)
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": %llu bytes given, its shape needs %lld",
                        name, (unsigned long long)have, (long long)nbytes);
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 64;
        st_entry *e = cap > 0 ? realloc(f->e, (size_t)cap * sizeof *e) : NULL;
        if (!e) return rai_fail(RA_ERR_NOMEM, "out of memory for %d tensors", cap);
        f->e = e, f->cap = cap;
    }
    st_entry *e = &f->e[f->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    if (nparts > 1) e->parts = malloc((size_t)nparts * sizeof *parts);
    if (!e->name || (nparts > 1 && !e->parts)) {
        free(e->name), free(e->parts);
        return rai_fail(RA_ERR_NOMEM, "out of memory for tensor " NAMEF, name);
    }
    if (nparts > 1) memcpy(e->parts, parts, (size_t)nparts * sizeof *parts);
    else e->one = parts[0];
    e->nparts = nparts;
    e->order = (size_t)f->n;
    ra_st_tensor *t = &e->t;
    t->name = e->name;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    t->nbytes = (size_t)nbytes;
    t->data = nparts == 1 ? parts[0].p : NULL;
    f->n++;
    return RA_OK;
}

static const st_entry *st_entry_of(const ra_st_file *f, const ra_st_tensor *t) {
    if (!f || !t || !f->n) return NULL;
    const uintptr_t a = (uintptr_t)f->e, b = (uintptr_t)(f->e + f->n), p = (uintptr_t)t;
    if (p < a || p >= b || (p - a) % sizeof *f->e != offsetof(st_entry, t)) return NULL;
    return (const st_entry *)(p - offsetof(st_entry, t));
}

int rai_st_parts(const ra_st_file *f, const ra_st_tensor *t, const rai_st_part **parts) {
    const st_entry *e = st_entry_of(f, t);
    *parts = e ? st_entry_parts(e) : NULL;
    return e ? e->nparts : 0;
}

ra_status rai_st_keep(ra_st_file *f, void (*drop)(void *), void *ctx) {
    if (!f || !drop) return rai_fail(RA_ERR_ARG, "rai_st_keep: NULL argument");
    st_keep *k = realloc(f->keep, (size_t)(f->nkeep + 1) * sizeof *k);
    if (!k) {
        drop(ctx);
        return rai_fail(RA_ERR_NOMEM, "out of memory");
    }
    f->keep = k;
    f->keep[f->nkeep++] = (st_keep){drop, ctx};
    return RA_OK;
}

static void st_close_void(void *f) { ra_st_close(f); }

ra_status rai_st_keep_file(ra_st_file *f, ra_st_file *src) {
    return rai_st_keep(f, st_close_void, src);
}

/* meta_keys again from f->meta, in its (insertion) order. */
static ra_status st_meta_keys(ra_st_file *f) {
    const char **k = realloc(f->meta_keys, (json_object_size(f->meta) + 1) * sizeof *k);
    if (!k) return rai_fail(RA_ERR_NOMEM, "out of memory for metadata");
    f->meta_keys = k;
    f->nmeta = 0;
    const char *key;
    json_t *v;
    json_object_foreach(f->meta, key, v) f->meta_keys[f->nmeta++] = key;
    return RA_OK;
}

ra_status rai_st_set_meta(ra_st_file *f, const char *key, const char *value) {
    if (!f || !f->built || !key) return rai_fail(RA_ERR_ARG, "rai_st_set_meta: bad argument");
    if (!value) {
        json_object_del(f->meta, key);
        return st_meta_keys(f);
    }
    json_t *v = json_string(value);
    if (!v) return rai_fail(RA_ERR_FORMAT, "metadata '%.60s': value is not UTF-8", key);
    if (json_object_set_new(f->meta, key, v))
        return rai_fail(RA_ERR_FORMAT, "metadata key '%.60s' is not UTF-8", key);
    return st_meta_keys(f);
}

ra_status rai_st_finish(ra_st_file *f) {
    if (!f || !f->built) return rai_fail(RA_ERR_ARG, "rai_st_finish: bad argument");
    free(f->by_name);
    f->by_name = malloc(((size_t)f->n + 1) * sizeof *f->by_name);
    if (!f->by_name) return rai_fail(RA_ERR_NOMEM, "out of memory for %d tensors", f->n);
    for (int i = 0; i < f->n; i++) f->by_name[i] = &f->e[i].t;
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, st_cmp_name);
    for (int i = 1; i < f->n; i++)
        if (!strcmp(f->by_name[i - 1]->name, f->by_name[i]->name))
            return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF " appears twice", f->by_name[i]->name);
    return st_meta_keys(f);
}

/* A new file with src's metadata; src kept by it when keep. */
static ra_status st_derive(ra_st_file **out, ra_st_file *src, int keep) {
    if (!out || !src) {
        if (keep) ra_st_close(src);
        return rai_fail(RA_ERR_ARG, "rai_st_derive: NULL argument");
    }
    ra_status st = rai_st_new(out);
    if (st) {
        if (keep) ra_st_close(src);
        return st;
    }
    if (keep) st = rai_st_keep_file(*out, src);
    for (int i = 0; !st && i < src->nmeta; i++)
        st = rai_st_set_meta(*out, src->meta_keys[i], ra_st_meta(src, src->meta_keys[i]));
    if (st) {
        ra_st_close(*out);
        *out = NULL;
    }
    return st;
}

ra_status rai_st_derive(ra_st_file **out, ra_st_file *src) { return st_derive(out, src, 1); }

ra_status rai_st_view(ra_st_file **out, const ra_st_file *src) {
    return st_derive(out, (ra_st_file *)src, 0);   /* not kept: never closed here */
}

ra_status rai_st_add_from(ra_st_file *f, const ra_st_file *src, const ra_st_tensor *t,
                          const char *name) {
    const rai_st_part *parts;
    int n = rai_st_parts(src, t, &parts);
    if (!n) return rai_fail(RA_ERR_ARG, "rai_st_add_from: tensor not in the file");
    return rai_st_add(f, name ? name : t->name, t->dtype, t->ndim, t->shape, parts, n);
}

int ra_st_count(const ra_st_file *f) { return f ? f->n : 0; }

const ra_st_tensor *ra_st_at(const ra_st_file *f, int i) {
    return (f && i >= 0 && i < f->n) ? &f->e[i].t : NULL;
}

static int st_cmp_key(const void *key, const void *elem) {
    return strcmp(key, (*(const ra_st_tensor *const *)elem)->name);
}

const ra_st_tensor *ra_st_find(const ra_st_file *f, const char *name) {
    if (!f || !name || f->n == 0) return NULL;
    const ra_st_tensor *const *t =
        bsearch(name, f->by_name, (size_t)f->n, sizeof *f->by_name, st_cmp_key);
    return t ? *t : NULL;
}

const char *ra_st_meta(const ra_st_file *f, const char *key) {
    if (!f || !f->meta || !key) return NULL;
    return json_string_value(json_object_get(f->meta, key));
}

int ra_st_meta_count(const ra_st_file *f) { return f ? f->nmeta : 0; }

const char *ra_st_meta_key(const ra_st_file *f, int i) {
    return (f && i >= 0 && i < f->nmeta) ? f->meta_keys[i] : NULL;
}

/* ------------------------------------------------------------------------ */
/* Conversions                                                               */
/* ------------------------------------------------------------------------ */

static float st_bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* IEEE binary16 -> binary32, exact for every value (NaN payloads kept). */
static float st_half(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0x1F) return st_bits_f32(sign | 0x7F800000u | man << 13);
    if (exp != 0) return st_bits_f32(sign | (exp + 112) << 23 | man << 13);
    float v = (float)man * 0x1p-24f;   /* zero or subnormal: man * 2^-24 */
    return sign ? -v : v;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ST_LITTLE_HOST 1   /* F32 and I64 bytes are the host's values */
#else
#define ST_LITTLE_HOST 0
#endif

/* Element conversions: dst (n) from n little-endian elements at p. When
 * the bytes are the host's values already (F32 into floats, I64 into
 * int64 on a little-endian host), p may be dst itself. */
typedef void st_conv(void *dst, const unsigned char *p, ra_dtype d, size_t n);

static void st_conv_f32(void *out, const unsigned char *p, ra_dtype d, size_t n) {
    float *dst = out;
    switch (d) {
    case RA_DTYPE_F32:
        if (!ST_LITTLE_HOST) {
            for (size_t i = 0; i < n; i++) dst[i] = st_bits_f32(st_u32(p + 4 * i));
        } else if (n && out != (const void *)p) {
            memcpy(dst, p, n * 4);
        }
        break;
    case RA_DTYPE_F16:
        for (size_t i = 0; i < n; i++) dst[i] = st_half(st_u16(p + 2 * i));
        break;
    case RA_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = st_bits_f32((uint32_t)st_u16(p + 2 * i) << 16);
        break;
    default:   /* F64 */
        for (size_t i = 0; i < n; i++) {
            uint64_t u = st_u64(p + 8 * i);
            double x;
            memcpy(&x, &u, sizeof x);
            dst[i] = (float)x;   /* IEEE (Annex F): round to nearest, inf past the range */
        }
    }
}

static void st_conv_i64(void *out, const unsigned char *p, ra_dtype d, size_t n) {
    int64_t *dst = out;
    switch (d) {
    case RA_DTYPE_I64:
        if (!ST_LITTLE_HOST || out != (const void *)p)
            for (size_t i = 0; i < n; i++) dst[i] = st_sext(st_u64(p + 8 * i), 64);
        break;
    case RA_DTYPE_I32: for (size_t i = 0; i < n; i++) dst[i] = st_sext(st_u32(p + 4 * i), 32); break;
    case RA_DTYPE_I16: for (size_t i = 0; i < n; i++) dst[i] = st_sext(st_u16(p + 2 * i), 16); break;
    case RA_DTYPE_I8:  for (size_t i = 0; i < n; i++) dst[i] = st_sext(p[i], 8); break;
    case RA_DTYPE_U8:  for (size_t i = 0; i < n; i++) dst[i] = p[i]; break;
    default:           for (size_t i = 0; i < n; i++) dst[i] = p[i] != 0; break;   /* BOOL */
    }
}

static int st_is_float(ra_dtype d) {
    return d == RA_DTYPE_F32 || d == RA_DTYPE_F16 || d == RA_DTYPE_BF16 || d == RA_DTYPE_F64;
}
static int st_is_int(ra_dtype d) {
    return d == RA_DTYPE_I64 || d == RA_DTYPE_I32 || d == RA_DTYPE_I16 || d == RA_DTYPE_I8 ||
           d == RA_DTYPE_U8 || d == RA_DTYPE_BOOL;
}

/* The checks both kinds share: a NULL argument, the wrong kind of dtype. */
static ra_status st_check(const void *dst, const ra_st_tensor *t, int want_float,
                          const char *fn) {
    if (!dst || !t) return rai_fail(RA_ERR_ARG, "%s: NULL argument", fn);
    if (want_float ? st_is_float(t->dtype) : st_is_int(t->dtype)) return RA_OK;
    return rai_fail(RA_ERR_SHAPE, "tensor " NAMEF ": dtype %s is not %s type",
                    t->name ? t->name : "", st_dtype_name(t->dtype),
                    want_float ? "a float" : "an integer");
}

ra_status ra_st_to_f32(float *dst, const ra_st_tensor *t) {
    ra_status s = st_check(dst, t, 1, "ra_st_to_f32");
    if (!s && !t->data && t->nbytes)
        s = rai_fail(RA_ERR_ARG, "%s: tensor " NAMEF " is not in memory in one piece (read it "
                     "with ra_st_read_*)", "ra_st_to_f32", t->name ? t->name : "");
    if (!s) st_conv_f32(dst, t->data, t->dtype, (size_t)t->numel);
    return s;
}

ra_status ra_st_to_i64(int64_t *dst, const ra_st_tensor *t) {
    ra_status s = st_check(dst, t, 0, "ra_st_to_i64");
    if (!s && !t->data && t->nbytes)
        s = rai_fail(RA_ERR_ARG, "%s: tensor " NAMEF " is not in memory in one piece (read it "
                     "with ra_st_read_*)", "ra_st_to_i64", t->name ? t->name : "");
    if (!s) st_conv_i64(dst, t->data, t->dtype, (size_t)t->numel);
    return s;
}

/* Read n bytes at offset off of fd into p: 0, -1 if the file ends first
 * (it shrank after it was opened), else an errno. */
static int st_pread_all(int fd, void *p, size_t n, off_t off) {
    unsigned char *q = p;
    while (n) {
        ssize_t k = pread(fd, q, n, off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return k < 0 ? errno : -1;
        q += k, n -= (size_t)k, off += k;
    }
    return 0;
}

/* ra_st_read_f32 (want_float) and ra_st_read_i64: t's elements from f's
 * file into dst, straight in when the bytes are dst's values already, else
 * in slices through a buffer, each converted as it arrives. A file opened
 * from memory is converted from there. */
static ra_status st_read(void *dst, const ra_st_file *f, const ra_st_tensor *t, int want_float,
                         const char *fn) {
    ra_status s = f ? st_check(dst, t, want_float, fn)
                    : rai_fail(RA_ERR_ARG, "%s: NULL argument", fn);
    if (s) return s;
    const st_entry *e = st_entry_of(f, t);
    if (!e) return rai_fail(RA_ERR_ARG, "tensor " NAMEF " is not in this file", t->name ? t->name : "");
    st_conv *conv = want_float ? st_conv_f32 : st_conv_i64;
    const size_t out_size = want_float ? sizeof(float) : sizeof(int64_t);
    const size_t size = st_dtype_size(t->dtype);
    const int as_is = ST_LITTLE_HOST && t->dtype == (want_float ? RA_DTYPE_F32 : RA_DTYPE_I64);
#ifdef MADV_POPULATE_WRITE
    if (f->fd >= 0 || f->built) {   /* map dst's whole pages in one call rather than a fault
         * each (a model's weights go to a fresh buffer; it fails harmlessly
         * before Linux 5.14) */
        const uintptr_t pg = 4096, d0 = ((uintptr_t)dst + pg - 1) & ~(pg - 1);
        const uintptr_t d1 = ((uintptr_t)dst + (size_t)t->numel * out_size) & ~(pg - 1);
        if (d1 > d0) madvise((void *)d0, d1 - d0, MADV_POPULATE_WRITE);
    }
#endif
    const rai_st_part *parts = st_entry_parts(e);
    unsigned char *out = dst;
    for (int q = 0; q < e->nparts; q++) {
        const rai_st_part *pt = &parts[q];
        const size_t n = pt->nbytes / size;
        if (pt->fd < 0) {
            conv(out, pt->p, t->dtype, n);
            out += n * out_size;
            continue;
        }
        enum { SLICE = 4096 };
        unsigned char buf[SLICE * 8];
        off_t off = (off_t)pt->off;
        for (size_t i = 0; i < n;) {
            const size_t k = as_is ? n : n - i < SLICE ? n - i : SLICE;
            unsigned char *to = as_is ? out : buf;
            const int err = st_pread_all(pt->fd, to, k * size, off);
            if (err)
                return rai_fail(err < 0 ? RA_ERR_FORMAT : RA_ERR_IO, "tensor " NAMEF ": %s",
                                t->name ? t->name : "",
                                err < 0 ? "the file ended early (it changed after it was opened)"
                                       : strerror(err));
            conv(out, to, t->dtype, k);
            i += k, off += (off_t)(k * size), out += k * out_size;
        }
    }
    return RA_OK;
}

ra_status ra_st_read_f32(float *dst, const ra_st_file *f, const ra_st_tensor *t) {
    return st_read(dst, f, t, 1, "ra_st_read_f32");
}

ra_status ra_st_read_i64(int64_t *dst, const ra_st_file *f, const ra_st_tensor *t) {
    return st_read(dst, f, t, 0, "ra_st_read_i64");
}

/* ------------------------------------------------------------------------ */
/* Writer                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct st_wtensor {
    char *name;
    ra_dtype dtype;
    int ndim;
    int64_t shape[RA_ST_MAX_DIMS];
    size_t nbytes;
    unsigned char *data;
    int borrowed;   /* data is the caller's (ra_st_writer_add_ref), not freed here */
} st_wtensor;

struct ra_st_writer {
    st_wtensor *t;
    int n, cap;
    int64_t total;   /* bytes of data so far: offsets must fit the JSON ints */
    json_t *meta;    /* key -> string, replaced on a duplicate key */
};

ra_st_writer *ra_st_writer_new(void) {
    ra_st_writer *w = calloc(1, sizeof *w);
    if (w && !(w->meta = json_object())) {
        free(w);
        w = NULL;
    }
    return w;
}

void ra_st_writer_free(ra_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        free(w->t[i].name);
        if (!w->t[i].borrowed) free(w->t[i].data);
    }
    free(w->t);
    json_decref(w->meta);
    free(w);
}

static ra_status writer_add(ra_st_writer *w, const char *name, ra_dtype dtype, int ndim,
                            const int64_t *shape, const void *data, int copy) {
    if (!w || !name) return rai_fail(RA_ERR_ARG, "ra_st_writer_add: NULL argument");
    if (!name[0]) return rai_fail(RA_ERR_ARG, "tensor name is empty");
    if (strcmp(name, "__metadata__") == 0)
        return rai_fail(RA_ERR_ARG, "tensor name '__metadata__' is reserved");
    if (!st_utf8_valid(name)) return rai_fail(RA_ERR_ARG, "tensor name is not valid UTF-8");
    unsigned size = st_dtype_size(dtype);
    if (!size) return rai_fail(RA_ERR_ARG, "tensor " NAMEF ": invalid dtype %d", name, (int)dtype);
    if (ndim < 0 || ndim > RA_ST_MAX_DIMS || (ndim > 0 && !shape))
        return rai_fail(RA_ERR_ARG, "tensor " NAMEF ": %d dims (0..%d with a shape)", name, ndim,
                        RA_ST_MAX_DIMS);
    int64_t numel = 1, nbytes, total;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return rai_fail(RA_ERR_ARG, "tensor " NAMEF ": shape[%d] = %lld < 0", name, i,
                            (long long)shape[i]);
        if (!rai_mul_i64(&numel, numel, shape[i]))
            return rai_fail(RA_ERR_NOMEM, "tensor " NAMEF ": element count overflows", name);
    }
    if (!rai_mul_i64(&nbytes, numel, (int64_t)size) || !rai_add_i64(&total, w->total, nbytes) ||
        (uint64_t)nbytes > SIZE_MAX)
        return rai_fail(RA_ERR_NOMEM, "tensor " NAMEF ": byte count overflows", name);
    if (nbytes && !data) return rai_fail(RA_ERR_ARG, "tensor " NAMEF ": NULL data", name);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return rai_fail(RA_ERR_ARG, "duplicate tensor name " NAMEF, name);

    if (w->n == w->cap) {
        int cap = w->cap > INT_MAX / 2 ? -1 : w->cap ? 2 * w->cap : 16;
        st_wtensor *t = cap > 0 ? realloc(w->t, (size_t)cap * sizeof *t) : NULL;
        if (!t) return rai_fail(RA_ERR_NOMEM, "out of memory adding tensor " NAMEF, name);
        w->t = t;
        w->cap = cap;
    }
    st_wtensor *t = &w->t[w->n];
    size_t len = strlen(name) + 1;
    t->name = malloc(len);
    t->borrowed = !copy && nbytes;
    t->data = t->borrowed ? (unsigned char *)(uintptr_t)data : malloc(nbytes ? (size_t)nbytes : 1);
    if (!t->name || !t->data) {
        free(t->name);
        if (!t->borrowed) free(t->data);
        return rai_fail(RA_ERR_NOMEM, "out of memory copying tensor " NAMEF, name);
    }
    memcpy(t->name, name, len);
    if (nbytes && !t->borrowed) memcpy(t->data, data, (size_t)nbytes);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->nbytes = (size_t)nbytes;
    w->total = total;
    w->n++;
    return RA_OK;
}

ra_status ra_st_writer_add(ra_st_writer *w, const char *name, ra_dtype dtype,
                           int ndim, const int64_t *shape, const void *data) {
    return writer_add(w, name, dtype, ndim, shape, data, 1);
}

ra_status ra_st_writer_add_ref(ra_st_writer *w, const char *name, ra_dtype dtype,
                               int ndim, const int64_t *shape, const void *data) {
    return writer_add(w, name, dtype, ndim, shape, data, 0);
}

/* binary32 -> binary16, round to nearest even, overflow to infinity,
 * subnormals rounded as well. */
static uint16_t st_to_f16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint16_t sign = (uint16_t)(u >> 16 & 0x8000u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00u;                 /* NaN */
    if (a >= 0x477FF000u) return sign | 0x7C00u;               /* rounds past 65504 */
    if (a >= 0x38800000u) {                                      /* normal in binary16 */
        const uint32_t r = a - 0x38000000u;                      /* exponent rebased */
        return sign | (uint16_t)((r + 0xFFFu + (r >> 13 & 1u)) >> 13);
    }
    /* subnormal or zero: the value in units of 2^-24, rounded to even */
    const uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u;
    if (e < 102) return sign;                                    /* below half of 2^-24 */
    const int shift = (int)(126 - e);                            /* 14 .. 24 */
    const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    return sign | (uint16_t)(q + (rem > half || (rem == half && (q & 1u))));
}

ra_status ra_st_writer_add_f32_as(ra_st_writer *w, const char *name, ra_dtype dtype, int ndim,
                                  const int64_t *shape, const float *data) {
    if (dtype == RA_DTYPE_F32) return writer_add(w, name, dtype, ndim, shape, data, 1);
    if (dtype != RA_DTYPE_F16 && dtype != RA_DTYPE_BF16)
        return rai_fail(RA_ERR_ARG, "ra_st_writer_add_f32_as: dtype %s is not F32, F16 or BF16",
                        st_dtype_name(dtype));
    int64_t n = 1;
    for (int i = 0; shape && i < ndim && i < RA_ST_MAX_DIMS; i++)
        if (shape[i] < 0 || !rai_mul_i64(&n, n, shape[i]))
            return rai_fail(RA_ERR_ARG, "ra_st_writer_add_f32_as: bad shape");
    if (!w || !name || !shape || (n && !data) || ndim < 0 || ndim > RA_ST_MAX_DIMS)
        return rai_fail(RA_ERR_ARG, "ra_st_writer_add_f32_as: bad argument");
    unsigned char *b = malloc((size_t)n * 2 + 1);
    if (!b) return rai_fail(RA_ERR_NOMEM, "out of memory converting " NAMEF, name);
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = dtype == RA_DTYPE_BF16 ? rai_bf16_bits(data[i]) : st_to_f16(data[i]);
        b[2 * i] = (unsigned char)(h & 0xFF), b[2 * i + 1] = (unsigned char)(h >> 8);
    }
    ra_status st = writer_add(w, name, dtype, ndim, shape, b, 1);
    free(b);
    return st;
}

ra_status ra_st_writer_meta(ra_st_writer *w, const char *key, const char *value) {
    if (!w || !key || !value) return rai_fail(RA_ERR_ARG, "ra_st_writer_meta: NULL argument");
    if (!st_utf8_valid(key) || !st_utf8_valid(value))
        return rai_fail(RA_ERR_ARG, "metadata '%.100s': not valid UTF-8", key);
    if (json_object_set_new(w->meta, key, json_string(value)) != 0)
        return rai_fail(RA_ERR_NOMEM, "out of memory storing metadata '%.100s'", key);
    return RA_OK;
}

static int st_cmp_wname(const void *a, const void *b) {
    return strcmp((*(const st_wtensor *const *)a)->name, (*(const st_wtensor *const *)b)->name);
}

/* The file's first part: length prefix, JSON, space padding to 8 bytes
 * (as the reference writer pads, which keeps the data 8-byte aligned). */
static ra_status st_build_header(ra_st_writer *w, const st_wtensor **sorted,
                                 unsigned char **out, size_t *out_len) {
    json_t *root = json_object();
    int ok = root != NULL;
    if (ok && json_object_size(w->meta)) ok = json_object_set(root, "__metadata__", w->meta) == 0;
    int64_t off = 0;
    for (int i = 0; ok && i < w->n; i++) {
        const st_wtensor *t = sorted[i];
        json_t *shape = json_array();
        for (int d = 0; shape && d < t->ndim; d++)
            if (json_array_append_new(shape, json_integer(t->shape[d])) != 0) {
                json_decref(shape);
                shape = NULL;
            }
        json_t *ent = shape ? json_pack("{s:s, s:o, s:[I, I]}", "dtype", st_dtype_name(t->dtype),
                                        "shape", shape, "data_offsets", (json_int_t)off,
                                        (json_int_t)(off + (int64_t)t->nbytes))
                            : NULL;
        ok = ent && json_object_set_new(root, t->name, ent) == 0;
        off += (int64_t)t->nbytes;
    }
    char *js = ok ? json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    if (!js) return rai_fail(RA_ERR_NOMEM, "out of memory building the header");
    size_t hlen = strlen(js), padded = (hlen + 7) & ~(size_t)7;
    if (padded > ST_MAX_HEADER) {
        free(js);
        return rai_fail(RA_ERR_ARG, "header of %zu bytes exceeds the limit of %llu", padded,
                        ST_MAX_HEADER);
    }
    unsigned char *buf = malloc(8 + padded);
    if (!buf) {
        free(js);
        return rai_fail(RA_ERR_NOMEM, "out of memory building the header");
    }
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, js, hlen);
    memset(buf + 8 + hlen, ' ', padded - hlen);
    free(js);
    *out = buf;
    *out_len = 8 + padded;
    return RA_OK;
}

ra_status ra_st_writer_save(ra_st_writer *w, const char *path) {
    if (!w || !path || !path[0]) return rai_fail(RA_ERR_ARG, "ra_st_writer_save: NULL or empty path");
    /* the header, then the tensors sorted by name: the file's parts */
    const st_wtensor **sorted = malloc(((size_t)w->n + 1) * sizeof *sorted);
    const void **parts = malloc(((size_t)w->n + 1) * sizeof *parts);
    size_t *sizes = malloc(((size_t)w->n + 1) * sizeof *sizes);
    unsigned char *hdr = NULL;
    size_t hlen = 0;
    ra_status s = sorted && parts && sizes ? RA_OK
                                           : rai_fail(RA_ERR_NOMEM, "out of memory saving '%s'", path);
    if (!s) {
        for (int i = 0; i < w->n; i++) sorted[i] = &w->t[i];
        qsort(sorted, (size_t)w->n, sizeof *sorted, st_cmp_wname);
        s = st_build_header(w, sorted, &hdr, &hlen);
    }
    if (!s) {
        parts[0] = hdr, sizes[0] = hlen;
        for (int i = 0; i < w->n; i++) parts[i + 1] = sorted[i]->data, sizes[i + 1] = sorted[i]->nbytes;
        s = rai_write_file_atomic(path, (const void *const *)parts, sizes, w->n + 1);
    }
    free(hdr);
    free(sorted);
    free(parts);
    free(sizes);
    return s;
}
