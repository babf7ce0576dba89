/* torch.c - PyTorch checkpoints read as tensor files (torch.h;
 * docs/reference.md, section 2, "PyTorch checkpoints").
 *
 * The file is mapped once (a buffer is copied once) and read as a zip
 * archive by minizip over that memory, so the offset it reports for an
 * entry's data is an offset in the file: each stored storage is a byte
 * range of the mapping. The archive's records are checked (byte order,
 * format version, CRC of the small ones), data.pkl is read by the
 * restricted unpickler (io/pickle.h), the state dict is chosen, and each of
 * its tensors is checked against its storage (dtype from the storage class,
 * the view's extent inside the storage) and added as one byte range, or,
 * when its strides are not row-major, gathered into memory the file keeps. */
#define _POSIX_C_SOURCE 200809L

#include "io/torch.h"

#include "io/pickle.h"
#include "io/tensorfile.h"

#include <minizip/unzip.h>
#include <zlib.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAMEF "'%.200s'"

/* ------------------------------------------------------------------------ */
/* The archive                                                               */
/* ------------------------------------------------------------------------ */

typedef struct tz_entry {
    char *name;            /* the whole name in the archive */
    uint64_t off, size;    /* the data's offset in the file (stored entries) and size */
    uint32_t crc;
    int method;            /* 0: stored */
    int encrypted;
    const char *used_as;   /* the storage class a tensor read it as (NULL: none yet) */
    int64_t used_numel;
} tz_entry;

typedef struct tz_archive {
    const unsigned char *base;   /* the whole file */
    size_t len;
    int fd;                      /* the file (the parts read through it), -1 in memory */
    tz_entry *e;                 /* sorted by name */
    size_t n;
    char prefix[RAI_TORCH_MAX_NAME + 2];   /* the first entry's directory, with '/' */
    rai_pk_doc *doc;
    unsigned mark;               /* the last walk's mark (rai_pk_value.mark) */
    int64_t gathered;            /* bytes of strided views gathered so far */
} tz_archive;

static void tz_archive_free(tz_archive *a) {
    for (size_t i = 0; i < a->n; i++) free(a->e[i].name);
    free(a->e);
    rai_pk_free(a->doc);
}

/* What the first bytes say: 1 a zip archive, 2 the legacy format (a pickle
 * of torch's magic number, or before that a tar archive), 0 neither. */
static int tz_kind(const unsigned char *p, size_t n) {
    static const unsigned char magic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                          0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
    if (n >= 4 && (!memcmp(p, "PK\3\4", 4) || !memcmp(p, "PK\5\6", 4))) return 1;
    if (n >= 2 + sizeof magic && p[0] == 0x80 && !memcmp(p + 2, magic, sizeof magic)) return 2;
    if (n >= 262 && !memcmp(p + 257, "ustar", 5)) return 2;
    return 0;
}

/* ---- minizip over memory ---- */

typedef struct tz_mem {
    const unsigned char *p;
    uint64_t len, pos;
} tz_mem;

static voidpf ZCALLBACK tz_io_open(voidpf opaque, const void *name, int mode) { return opaque; }
static uLong ZCALLBACK tz_io_read(voidpf opaque, voidpf stream, void *buf, uLong n) {
    tz_mem *m = stream;
    const uint64_t k = m->pos >= m->len ? 0 : m->len - m->pos < n ? m->len - m->pos : n;
    if (k) memcpy(buf, m->p + m->pos, (size_t)k);
    m->pos += k;
    return (uLong)k;
}
static uLong ZCALLBACK tz_io_write(voidpf opaque, voidpf stream, const void *buf, uLong n) {
    return 0;
}
static ZPOS64_T ZCALLBACK tz_io_tell(voidpf opaque, voidpf stream) {
    return ((tz_mem *)stream)->pos;
}
static long ZCALLBACK tz_io_seek(voidpf opaque, voidpf stream, ZPOS64_T off, int origin) {
    tz_mem *m = stream;
    const uint64_t from = origin == ZLIB_FILEFUNC_SEEK_SET ? 0
                        : origin == ZLIB_FILEFUNC_SEEK_CUR ? m->pos : m->len;
    if (off > m->len || from > m->len - off) return -1;
    m->pos = from + off;
    return 0;
}
static int ZCALLBACK tz_io_close(voidpf opaque, voidpf stream) { return 0; }
static int ZCALLBACK tz_io_error(voidpf opaque, voidpf stream) { return 0; }

static int tz_cmp_entry(const void *a, const void *b) {
    return strcmp(((const tz_entry *)a)->name, ((const tz_entry *)b)->name);
}

static uint64_t tz_le(const unsigned char *p, int n) {
    uint64_t u = 0;
    for (int i = n - 1; i >= 0; i--) u = u << 8 | p[i];
    return u;
}

#define TZ_MAX32 0xFFFFFFFFu

/* The zip64 extra field of central directory record c (a block of id 1
 * holding, in this order, those of the uncompressed size, compressed size
 * and local header offset whose 32-bit field is 0xFFFFFFFF). */
static ra_status tz_zip64_fields(const tz_archive *a, const unsigned char *c, uint64_t *usize,
                                 uint64_t *csize, uint64_t *local) {
    const size_t n = (size_t)tz_le(c + 28, 2), m = (size_t)tz_le(c + 30, 2);
    const size_t at = (size_t)(c - a->base) + 46 + n;
    if (at > a->len || a->len - at < m)
        return rai_fail(RA_ERR_FORMAT, "the zip central directory is damaged");
    const unsigned char *x = a->base + at, *end = x + m;
    while (end - x >= 4) {
        const size_t id = (size_t)tz_le(x, 2), k = (size_t)tz_le(x + 2, 2);
        const unsigned char *f = x + 4;
        if ((size_t)(end - f) < k) break;
        x = f + k;
        if (id != 1) continue;
        uint64_t *want[3] = {*usize == TZ_MAX32 ? usize : NULL, *csize == TZ_MAX32 ? csize : NULL,
                             *local == TZ_MAX32 ? local : NULL};
        for (int i = 0; i < 3; i++) {
            if (!want[i]) continue;
            if (f + 8 > x) return rai_fail(RA_ERR_FORMAT, "a zip64 extra field is too short");
            *want[i] = tz_le(f, 8);
            f += 8;
        }
        return RA_OK;
    }
    return rai_fail(RA_ERR_FORMAT, "a zip entry without the zip64 extra field its sizes need");
}

/* The offset of the data of the stored entry whose local header is at
 * local: past the header, its name and its extra field. */
static ra_status tz_local_data(const tz_archive *a, uint64_t local, uint64_t *off) {
    if (local > a->len || a->len - local < 30 || tz_le(a->base + local, 4) != 0x04034b50)
        return rai_fail(RA_ERR_FORMAT, "a zip local header is damaged");
    *off = local + 30 + tz_le(a->base + local + 26, 2) + tz_le(a->base + local + 28, 2);
    return RA_OK;
}

/* The current entry of uf into e: its name, and for a stored entry the
 * offset of its data in the file. minizip finds the data from the local
 * header (unzGetCurrentFileZStreamPos64); for a zip64 entry (past 4 GB)
 * it is found here from the central record, whose zip64 extra field
 * Debian's minizip 1.1 ignores (it compares the 32-bit fields with
 * (unsigned long)-1, which is 2^64 - 1 on 64-bit Linux). */
static ra_status tz_entry_read(tz_archive *a, unzFile uf, tz_entry *e) {
    unz_file_info64 fi;
    char name[RAI_TORCH_MAX_NAME + 1];
    if (unzGetCurrentFileInfo64(uf, &fi, name, sizeof name, NULL, 0, NULL, 0) != UNZ_OK)
        return rai_fail(RA_ERR_FORMAT, "the zip central directory is damaged");
    if (fi.size_filename > RAI_TORCH_MAX_NAME || strlen(name) != fi.size_filename)
        return rai_fail(RA_ERR_FORMAT, "a zip entry name longer than %d bytes or holding a NUL",
                        RAI_TORCH_MAX_NAME);
    if (!(e->name = rai_strdup(name))) return rai_fail(RA_ERR_NOMEM, "out of memory");
    const uint64_t cd = (uint64_t)unzGetOffset64(uf);   /* the entry's central record */
    if (cd > a->len || a->len - cd < 46 || tz_le(a->base + cd, 4) != 0x02014b50)
        return rai_fail(RA_ERR_FORMAT, "the zip central directory is damaged");
    const unsigned char *c = a->base + cd;
    uint64_t csize = tz_le(c + 20, 4), usize = tz_le(c + 24, 4), local = tz_le(c + 42, 4);
    const int zip64 = csize == TZ_MAX32 || usize == TZ_MAX32 || local == TZ_MAX32;
    ra_status s = zip64 ? tz_zip64_fields(a, c, &usize, &csize, &local) : RA_OK;
    if (s) return s;
    e->size = usize;
    e->crc = (uint32_t)fi.crc;
    e->method = (int)fi.compression_method;
    e->encrypted = (int)(fi.flag & 1);
    if (e->method != 0 || e->encrypted) return RA_OK;   /* refused if it is read */
    if (csize != usize)
        return rai_fail(RA_ERR_FORMAT, "zip entry " NAMEF ": stored, but %llu bytes for %llu",
                        name, (unsigned long long)csize, (unsigned long long)usize);
    if (zip64) {
        s = tz_local_data(a, local, &e->off);
    } else {
        int method, level;
        if (unzOpenCurrentFile2(uf, &method, &level, 1) != UNZ_OK)
            return rai_fail(RA_ERR_FORMAT, "zip entry " NAMEF ": its local header is damaged", name);
        e->off = (uint64_t)unzGetCurrentFileZStreamPos64(uf);
        unzCloseCurrentFile(uf);
    }
    if (!s && (e->off > a->len || e->size > a->len - e->off))
        return rai_fail(RA_ERR_FORMAT, "zip entry " NAMEF ": its data runs past the end of the file",
                        name);
    return s;
}

/* Every entry of the archive into a->e, sorted; a->prefix from the first. */
static ra_status tz_index(tz_archive *a, unzFile uf) {
    size_t cap = 0;
    ra_status s = RA_OK;
    int r;
    for (r = unzGoToFirstFile(uf); r == UNZ_OK && !s; r = unzGoToNextFile(uf)) {
        if (a->n == RAI_TORCH_MAX_ENTRIES)
            return rai_fail(RA_ERR_FORMAT, "more than %d zip entries (the limit)",
                            RAI_TORCH_MAX_ENTRIES);
        if (a->n == cap) {
            cap = cap ? 2 * cap : 64;
            tz_entry *e = realloc(a->e, cap * sizeof *e);
            if (!e) return rai_fail(RA_ERR_NOMEM, "out of memory");
            a->e = e;
        }
        memset(&a->e[a->n], 0, sizeof *a->e);
        s = tz_entry_read(a, uf, &a->e[a->n]);
        a->n++;
    }
    if (s) return s;
    if (r != UNZ_END_OF_LIST_OF_FILE || !a->n)
        return rai_fail(RA_ERR_FORMAT, a->n ? "the zip central directory is damaged"
                                            : "the zip archive is empty");
    const char *slash = strchr(a->e[0].name, '/');   /* torch's rule: the first entry's directory */
    if (!slash)
        return rai_fail(RA_ERR_FORMAT, "zip entry " NAMEF " is not in a directory (not written by "
                        "torch.save)", a->e[0].name);
    memcpy(a->prefix, a->e[0].name, (size_t)(slash - a->e[0].name) + 1);
    a->prefix[slash - a->e[0].name + 1] = 0;
    qsort(a->e, a->n, sizeof *a->e, tz_cmp_entry);
    for (size_t i = 1; i < a->n; i++)
        if (!strcmp(a->e[i - 1].name, a->e[i].name))
            return rai_fail(RA_ERR_FORMAT, "zip entry " NAMEF " appears twice", a->e[i].name);
    return RA_OK;
}

/* The end of central directory record ends the file (after its comment):
 * minizip finds the central directory through the zip64 records alone,
 * which would let a file cut short by a few bytes through. */
static int tz_has_end(const tz_archive *a) {
    const size_t lo = a->len > 22 + 65535 ? a->len - 22 - 65535 : 0;
    for (size_t i = a->len >= 22 ? a->len - 22 + 1 : 0; i-- > lo;)
        if (!memcmp(a->base + i, "PK\5\6", 4))
            return i + 22 + tz_le(a->base + i + 20, 2) == a->len;
    return 0;
}

static ra_status tz_open_zip(tz_archive *a) {
    if (!tz_has_end(a))
        return rai_fail(RA_ERR_FORMAT, "not a readable zip archive (its end of central directory "
                        "record does not end the file: a truncated file?)");
    tz_mem m = {a->base, a->len, 0};
    zlib_filefunc64_def io = {tz_io_open, tz_io_read, tz_io_write, tz_io_tell,
                              tz_io_seek, tz_io_close, tz_io_error, &m};
    unzFile uf = unzOpen2_64("", &io);
    if (!uf) return rai_fail(RA_ERR_FORMAT, "not a readable zip archive (its end of central "
                             "directory is missing or damaged: a truncated file?)");
    ra_status s = tz_index(a, uf);
    unzClose(uf);
    return s;
}

/* ---- records: entries under the archive's directory ---- */

/* The entry prefix + rec, or NULL. */
static tz_entry *tz_find(tz_archive *a, const char *rec) {
    char name[2 * RAI_TORCH_MAX_NAME + 4];
    snprintf(name, sizeof name, "%s%.*s", a->prefix, RAI_TORCH_MAX_NAME, rec);
    tz_entry key = {.name = name};
    return a->n ? bsearch(&key, a->e, a->n, sizeof *a->e, tz_cmp_entry) : NULL;
}

/* An entry whose bytes are read in place: stored and not encrypted. */
static ra_status tz_readable(const tz_entry *e) {
    if (e->encrypted) return rai_fail(RA_ERR_FORMAT, "zip entry " NAMEF " is encrypted", e->name);
    if (e->method)
        return rai_fail(RA_ERR_FORMAT, "zip entry " NAMEF " is compressed (method %d); torch.save "
                        "writes stored entries: load the file in PyTorch and torch.save it again",
                        e->name, e->method);
    return RA_OK;
}

/* A small record's bytes (*p, *n), its CRC checked; *p NULL if absent. */
static ra_status tz_record(tz_archive *a, const char *rec, const unsigned char **p, size_t *n) {
    const tz_entry *e = tz_find(a, rec);
    *p = NULL, *n = 0;
    if (!e) return RA_OK;
    ra_status s = tz_readable(e);
    if (s) return s;
    *p = a->base + e->off, *n = (size_t)e->size;
    uLong crc = crc32(0, NULL, 0);
    for (size_t i = 0; i < *n; i += 1u << 30)
        crc = crc32(crc, *p + i, (uInt)(*n - i < (1u << 30) ? *n - i : 1u << 30));
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION   /* the fuzzer's mutations keep no CRC */
    if (crc != e->crc)
        return rai_fail(RA_ERR_FORMAT, "zip entry " NAMEF ": CRC mismatch (the file is damaged)",
                        e->name);
#endif
    return RA_OK;
}

/* Whether record bytes (p, n) are text t, a trailing newline allowed. */
static int tz_is(const unsigned char *p, size_t n, const char *t) {
    const size_t k = strlen(t);
    return (n == k || (n == k + 1 && p[k] == '\n')) && !memcmp(p, t, k);
}

/* The records beside data.pkl: version, byteorder, .format_version. */
static ra_status tz_check_records(tz_archive *a) {
    const unsigned char *p;
    size_t n;
    ra_status s = tz_record(a, ".data/version", &p, &n);
    if (!s && !p) s = tz_record(a, "version", &p, &n);
    if (s) return s;
    if (!p) return rai_fail(RA_ERR_FORMAT, "no version record (%sversion): not written by torch.save",
                            a->prefix);
    unsigned v = 0;
    size_t i = 0;
    for (; i < n && i < 4 && p[i] >= '0' && p[i] <= '9'; i++) v = 10 * v + (unsigned)(p[i] - '0');
    if (i == 0 || (i < n && !(i + 1 == n && p[i] == '\n')) || v < 1 || v > RAI_TORCH_MAX_VERSION)
        return rai_fail(RA_ERR_FORMAT, "archive format version '%.*s' (1 to %d are read)",
                        (int)(n < 20 ? n : 20), (const char *)p, RAI_TORCH_MAX_VERSION);
    if ((s = tz_record(a, "byteorder", &p, &n))) return s;
    if (p && tz_is(p, n, "big"))
        return rai_fail(RA_ERR_FORMAT, "a big-endian checkpoint (byteorder 'big'): relattn reads "
                        "little-endian data; load it in PyTorch on a little-endian machine and "
                        "torch.save it again");
    if (p && !tz_is(p, n, "little"))
        return rai_fail(RA_ERR_FORMAT, "byteorder record '%.*s' (\"little\" is read)",
                        (int)(n < 20 ? n : 20), (const char *)p);
    if ((s = tz_record(a, ".format_version", &p, &n))) return s;
    if (p && !tz_is(p, n, "1"))
        return rai_fail(RA_ERR_FORMAT, "serialization format version '%.*s' (1 is read)",
                        (int)(n < 20 ? n : 20), (const char *)p);
    return RA_OK;
}

/* The archive of a->base: checked, its data.pkl read into a->doc. */
static ra_status tz_load(tz_archive *a) {
    const int kind = tz_kind(a->base, a->len);
    if (kind == 2)
        return rai_fail(RA_ERR_FORMAT, "a checkpoint in PyTorch's legacy format (before 1.6), which "
                        "relattn does not read: re-save it under PyTorch >= 1.6 with "
                        "torch.save(torch.load(\"old.pth\"), \"new.pth\")");
    if (kind == 0)
        return rai_fail(RA_ERR_FORMAT, "not a PyTorch checkpoint (torch.save writes a zip archive)");
    ra_status s = tz_open_zip(a);
    if (!s && (tz_find(a, "constants.pkl") || tz_find(a, "code/")))
        return rai_fail(RA_ERR_FORMAT, "a TorchScript archive (torch.jit.save), not a torch.save "
                        "checkpoint: load it in PyTorch and torch.save its state_dict()");
    if (!s) s = tz_check_records(a);
    const unsigned char *p;
    size_t n;
    if (!s) s = tz_record(a, "data.pkl", &p, &n);
    if (!s && !p)
        return rai_fail(RA_ERR_FORMAT, "no %sdata.pkl: not a checkpoint written by torch.save",
                        a->prefix);
    if (!s && (s = rai_pk_parse(&a->doc, p, n))) {
        char why[1024];
        snprintf(why, sizeof why, "%s", ra_last_error());
        return rai_fail(s, "%sdata.pkl: %s", a->prefix, why);
    }
    return s;
}

/* ------------------------------------------------------------------------ */
/* Values, as a person reads them                                            */
/* ------------------------------------------------------------------------ */

/* The storage class named by tensor t's persistent id, or NULL when the id
 * is not ('storage', class, key, location, size). */
static const rai_pk_value *tz_pid_field(const rai_pk_tensor *t, int i) {
    const rai_pk_value *pid = t->storage->u.pid;
    if (pid->kind != RAI_PK_TUPLE || pid->u.seq.n != 5) return NULL;
    const rai_pk_value *tag = pid->u.seq.v[0], *v = pid->u.seq.v[i];
    if ((tag->kind != RAI_PK_STR && tag->kind != RAI_PK_BYTES) || strcmp(tag->u.s.p, "storage"))
        return NULL;
    const rai_pk_kind want[5] = {RAI_PK_STR, RAI_PK_GLOBAL, RAI_PK_STR, RAI_PK_STR, RAI_PK_INT};
    if (v->kind != want[i] && !(i == 0 && v->kind == RAI_PK_BYTES)) return NULL;
    if (i == 1 && v->u.g.id != RAI_PK_G_STORAGE) return NULL;
    if (i == 4 && v->u.i < 0) return NULL;
    return v;
}

/* The tensor's dtype, and the name of what gives it (a storage class, or
 * _rebuild_tensor_v3's dtype); RA_DTYPE_INVALID with *what NULL for a
 * malformed persistent id. */
static ra_dtype tz_tensor_dtype(const rai_pk_tensor *t, const char **what) {
    const rai_pk_value *cls = tz_pid_field(t, 1), *src = t->dtype ? t->dtype : cls;
    *what = cls ? src->u.g.name : NULL;
    return cls ? src->u.g.dtype : RA_DTYPE_INVALID;
}

static void tz_fmt_dims(char *b, size_t cap, const int64_t *d, int n) {
    size_t k = (size_t)snprintf(b, cap, "[");
    for (int i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(b + k, cap - k, i ? ", %lld" : "%lld", (long long)d[i]);
    if (k < cap) snprintf(b + k, cap - k, "]");
}

/* Text s (n bytes, may hold NULs) quoted, cut at 60 bytes, escaped. */
static void tz_fmt_str(char *b, size_t cap, const char *s, size_t n) {
    char raw[80];
    const size_t k = n < 60 ? n : 60;
    memcpy(raw, s, k);
    raw[k] = 0;
    char esc[300];
    ra_escape_text(esc, sizeof esc, raw);
    snprintf(b, cap, "'%.250s'%s", esc, n > k || strlen(raw) < k ? "..." : "");
}

static size_t tz_count_tensors(const rai_pk_value *v) { return v->tensors; }

/* One value in a few words: "int 300", "dict of 173 tensors", "tensor F32 [3, 4]". */
static void tz_summary(char *b, size_t cap, const rai_pk_value *v) {
    char x[300];
    const char *what;
    switch (v->kind) {
    case RAI_PK_NONE: snprintf(b, cap, "None"); return;
    case RAI_PK_BOOL: snprintf(b, cap, "bool %s", v->u.i ? "True" : "False"); return;
    case RAI_PK_INT: snprintf(b, cap, "int %lld", (long long)v->u.i); return;
    case RAI_PK_BIGINT: snprintf(b, cap, "int (beyond 64 bits)"); return;
    case RAI_PK_FLOAT: snprintf(b, cap, "float %.9g", v->u.f); return;
    case RAI_PK_STR: tz_fmt_str(x, sizeof x, v->u.s.p, v->u.s.n); snprintf(b, cap, "str %s", x); return;
    case RAI_PK_BYTES: snprintf(b, cap, "bytes (%zu)", v->u.s.n); return;
    case RAI_PK_GLOBAL: snprintf(b, cap, "%s", v->u.g.name); return;
    case RAI_PK_OPAQUE: snprintf(b, cap, "%s (not read)", v->u.g.name); return;
    case RAI_PK_PERSID: snprintf(b, cap, "storage"); return;
    case RAI_PK_TENSOR: {
        const ra_dtype d = tz_tensor_dtype(v->u.t, &what);
        tz_fmt_dims(x, sizeof x, v->u.t->shape, v->u.t->ndim);
        if (d) snprintf(b, cap, "tensor %s %s", rai_st_dtype_name(d), x);
        else snprintf(b, cap, "tensor of %s %s", what ? what : "a malformed storage id", x);
        return;
    }
    default: break;
    }
    const size_t n = v->kind == RAI_PK_DICT ? v->u.dict.n : v->u.seq.n, t = tz_count_tensors(v);
    if (v->kind == RAI_PK_DICT && t == n && n)
        snprintf(b, cap, "dict of %zu tensor%s", n, n == 1 ? "" : "s");
    else
        snprintf(b, cap, "%s of %zu%s%s", rai_pk_kind_name(v->kind), n,
                 v->kind == RAI_PK_DICT ? " entries" : "", t ? ", some tensors" : "");
}

/* ------------------------------------------------------------------------ */
/* Where the state dict is                                                   */
/* ------------------------------------------------------------------------ */

static int tz_is_container(const rai_pk_value *v) {
    return v->kind == RAI_PK_DICT || v->kind == RAI_PK_LIST || v->kind == RAI_PK_TUPLE ||
           v->kind == RAI_PK_SET;
}

/* A state dict: a dict with a tensor among its values and no container
 * of tensors (that would be a checkpoint holding several things); other
 * values (numbers, strings, opaque objects) are skipped when it is read. */
static int tz_is_state_dict(const rai_pk_value *v) {
    if (!v || v->kind != RAI_PK_DICT) return 0;
    size_t tensors = 0;
    for (size_t i = 0; i < v->u.dict.n; i++) {
        const rai_pk_value *x = v->u.dict.v[i].value;
        if (x->kind == RAI_PK_TENSOR) tensors++;
        else if (tz_is_container(x) && tz_count_tensors(x)) return 0;
    }
    return tensors > 0;
}

typedef struct tz_search {
    unsigned mark;
    int count;                      /* state dicts found */
    int nomem;                      /* a path could not grow */
    const rai_pk_value *first;
    char *first_path;               /* malloc'ed */
    char list[600];                 /* the first few paths, for the message */
    char *path;                     /* the walk's path, malloc'ed, cap bytes */
    size_t cap;
} tz_search;

/* Append "/comp" (or comp at the root) to s->path (len bytes long): 0 if
 * it cannot grow. Keys are as long as the pickle's strings may be, so the
 * path grows with them: a deep key is found however long the keys above. */
static int tz_path_push(tz_search *s, size_t len, const char *comp) {
    const size_t k = strlen(comp), need = len + (len ? 1 : 0) + k + 1;
    if (need > s->cap) {
        const size_t cap = need > 2 * s->cap ? need : 2 * s->cap;
        char *p = realloc(s->path, cap);
        if (!p) return s->nomem = 1, 0;
        s->path = p, s->cap = cap;
    }
    if (len) s->path[len++] = '/';
    memcpy(s->path + len, comp, k + 1);
    return 1;
}

/* Every state dict in the tree at most RAI_TORCH_SEARCH_DEPTH keys deep,
 * each container looked into once (the tree may share and loop). */
static void tz_walk(tz_search *s, const rai_pk_value *v, int depth) {
    if (depth > RAI_TORCH_SEARCH_DEPTH || !tz_is_container(v) || v->mark == s->mark) return;
    ((rai_pk_value *)v)->mark = s->mark;   /* the walk's own field */
    const char *path = s->path ? s->path : "";
    if (tz_is_state_dict(v)) {
        if (s->count++ == 0) {
            s->first = v;
            if (!(s->first_path = rai_strdup(path))) s->nomem = 1;
        }
        const size_t k = strlen(s->list);
        if (s->count <= 8)
            snprintf(s->list + k, sizeof s->list - k, "%s'%.100s'", k ? ", " : "", path);
        return;
    }
    const size_t len = strlen(path);
    const size_t n = v->kind == RAI_PK_DICT ? v->u.dict.n : v->u.seq.n;
    for (size_t i = 0; i < n && !s->nomem; i++) {
        char idx[24];
        const rai_pk_value *child = v, *key = NULL;
        if (v->kind == RAI_PK_DICT) key = v->u.dict.v[i].key, child = v->u.dict.v[i].value;
        else if (v->kind != RAI_PK_SET) snprintf(idx, sizeof idx, "%zu", i), child = v->u.seq.v[i];
        if (child == v || (key && (key->kind != RAI_PK_STR || strlen(key->u.s.p) != key->u.s.n)))
            continue;
        if (tz_path_push(s, len, key ? key->u.s.p : idx)) tz_walk(s, child, depth + 1);
        if (s->path) s->path[len] = 0;
    }
}

/* src into found (n bytes), cut on a character boundary if longer: the
 * path is a description (inspect's "state dict"), and stays UTF-8. */
static void tz_found(char *found, size_t n, const char *src) {
    size_t k = strlen(src);
    if (k >= n) {
        k = n - 1;
        while (k > 0 && ((unsigned char)src[k] & 0xc0) == 0x80) k--;
    }
    memcpy(found, src, k);
    found[k] = 0;
}

/* The keys the automatic choice tries, in order, below the root. */
static const char *const tz_keys[] = {"state_dict", "model", "model_state", "model_state_dict",
                                      "module", "net", "network", "params", "weights"};

/* The state dict the automatic choice takes (*found its path), or the
 * reason there is none. */
static ra_status tz_auto(tz_archive *a, const rai_pk_value **sd, char *found, size_t n) {
    const rai_pk_value *root = rai_pk_root(a->doc);
    if (tz_is_state_dict(root)) {
        snprintf(found, n, "%s", "");
        *sd = root;
        return RA_OK;
    }
    for (size_t i = 0; i < sizeof tz_keys / sizeof tz_keys[0]; i++)
        if (tz_is_state_dict(rai_pk_dict_get(root, tz_keys[i]))) {
            snprintf(found, n, "%s", tz_keys[i]);
            *sd = rai_pk_dict_get(root, tz_keys[i]);
            return RA_OK;
        }
    tz_search s = {.mark = ++a->mark};
    tz_walk(&s, root, 0);
    free(s.path);
    if (s.nomem) {
        free(s.first_path);
        return rai_fail(RA_ERR_NOMEM, "out of memory looking for the state dict");
    }
    if (s.count == 1) {
        tz_found(found, n, s.first_path);
        free(s.first_path);
        *sd = s.first;
        return RA_OK;
    }
    free(s.first_path);
    char what[300];
    tz_summary(what, sizeof what, root);
    if (!s.count)
        return rai_fail(RA_ERR_FORMAT, "no state dict (a dict of tensors) in the checkpoint, whose "
                        "root is a %s", what);
    return rai_fail(RA_ERR_FORMAT, "%d state dicts in the checkpoint (%s%s): pass --key PATH to "
                    "choose one", s.count, s.list, s.count > 8 ? ", ..." : "");
}

/* The value at path below v (components separated by '/' or '.'; a key
 * that holds either character matches whole; a list's items by number). */
static const rai_pk_value *tz_resolve(const rai_pk_value *v, const char *path) {
    while (v && *path) {
        const rai_pk_value *next = NULL;
        size_t used = 0;
        if (v->kind == RAI_PK_DICT) {
            for (size_t i = 0; i < v->u.dict.n; i++) {   /* the longest key that fits (the last given) */
                const rai_pk_value *k = v->u.dict.v[i].key;
                if (k->kind != RAI_PK_STR) continue;
                const size_t kn = k->u.s.n;
                if (kn < used || strncmp(path, k->u.s.p, kn) || strlen(k->u.s.p) != kn ||
                    (path[kn] && path[kn] != '/' && path[kn] != '.'))
                    continue;
                next = v->u.dict.v[i].value, used = kn;
            }
        } else if (v->kind == RAI_PK_LIST || v->kind == RAI_PK_TUPLE) {
            size_t i = 0;
            while (path[used] >= '0' && path[used] <= '9' && used < 12)
                i = 10 * i + (size_t)(path[used++] - '0');
            if (used && (!path[used] || path[used] == '/' || path[used] == '.') && i < v->u.seq.n)
                next = v->u.seq.v[i];
        }
        if (!next) return NULL;
        v = next;
        path += used + (path[used] != 0);
    }
    return v;
}

/* The state dict at key (or found automatically), its path into found. */
static ra_status tz_select(tz_archive *a, const char *key, const rai_pk_value **sd, char *found,
                           size_t n) {
    char none[1];
    if (!found || !n) found = none, n = sizeof none;
    found[0] = 0;
    if (!key) return tz_auto(a, sd, found, n);
    const rai_pk_value *v = tz_resolve(rai_pk_root(a->doc), key);
    char what[300];
    if (!v) {
        const rai_pk_value *root = rai_pk_root(a->doc);
        char keys[400] = "";
        for (size_t i = 0; root->kind == RAI_PK_DICT && i < root->u.dict.n && i < 12; i++) {
            const rai_pk_value *k = root->u.dict.v[i].key;
            const size_t l = strlen(keys);
            if (k->kind == RAI_PK_STR)
                snprintf(keys + l, sizeof keys - l, "%s'%.40s'", l ? ", " : "", k->u.s.p);
        }
        return rai_fail(RA_ERR_FORMAT, "no entry " NAMEF " in the checkpoint%s%s%s", key,
                        keys[0] ? " (its keys: " : "", keys, keys[0] ? ")" : "");
    }
    if (v->kind != RAI_PK_DICT || !tz_count_tensors(v)) {
        tz_summary(what, sizeof what, v);
        return rai_fail(RA_ERR_FORMAT, "entry " NAMEF " holds %s, not a dict of tensors", key, what);
    }
    tz_found(found, n, key);
    *sd = v;
    return RA_OK;
}

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

/* The storage of tensor name: its entry, checked against the persistent
 * id's class and size (and against the other tensors that use it). */
static ra_status tz_storage(tz_archive *a, const char *name, const rai_pk_tensor *t, tz_entry **out,
                            int64_t *bytes) {
    const rai_pk_value *cls = tz_pid_field(t, 1), *key = tz_pid_field(t, 2),
                       *numel = tz_pid_field(t, 4);
    *bytes = -1;
    if (!cls || !key || !numel || !tz_pid_field(t, 0) || !tz_pid_field(t, 3))
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": its storage's persistent id is not "
                        "('storage', class, key, location, size)", name);
    if (!cls->u.g.dtype)
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": its storage is a %s, a dtype relattn does "
                        "not read (F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL)", name,
                        cls->u.g.name);
    char rec[RAI_TORCH_MAX_NAME + 8];
    snprintf(rec, sizeof rec, "data/%.*s", RAI_TORCH_MAX_NAME, key->u.s.p);
    tz_entry *e = strlen(key->u.s.p) == key->u.s.n ? tz_find(a, rec) : NULL;
    if (!e)
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": its storage %s%.200s is missing", name,
                        a->prefix, rec);
    ra_status s = tz_readable(e);
    if (s) return s;
    /* an untyped storage (_rebuild_tensor_v3) counts bytes */
    const unsigned es = rai_st_dtype_size(cls->u.g.dtype);
    if (!rai_mul_i64(bytes, numel->u.i, (int64_t)es)) *bytes = INT64_MAX;
    if ((uint64_t)*bytes != e->size)
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": storage " NAMEF " holds %llu bytes, its "
                        "%lld elements of %s need %lld", name, e->name, (unsigned long long)e->size,
                        (long long)numel->u.i, cls->u.g.name, (long long)*bytes);
    if (e->used_as && (e->used_as != cls->u.g.name || e->used_numel != numel->u.i))
        return rai_fail(RA_ERR_FORMAT, "storage " NAMEF " is used as %s of %lld and as %s of %lld",
                        e->name, e->used_as, (long long)e->used_numel, cls->u.g.name,
                        (long long)numel->u.i);
    e->used_as = cls->u.g.name;
    e->used_numel = numel->u.i;
    *out = e;
    return RA_OK;
}

/* Elements of shape d (n dims), or -1 on overflow. */
static int64_t tz_numel(const int64_t *d, int n) {
    int64_t k = 1;
    for (int i = 0; i < n; i++)
        if (!rai_mul_i64(&k, k, d[i])) return -1;
    return k;
}

/* The view's last element (offset + sum (shape - 1) * stride) fits in a
 * storage of cap elements; a view of no element needs offset <= cap. */
static int tz_view_fits(const rai_pk_tensor *t, int64_t numel, int64_t cap) {
    int64_t last = t->offset, step;
    if (numel == 0) return t->offset <= cap;
    for (int i = 0; i < t->ndim; i++)
        if (!rai_mul_i64(&step, t->shape[i] - 1, t->stride[i]) ||
            !rai_add_i64(&last, last, step))
            return 0;
    return last < cap;
}

static int tz_row_major(const rai_pk_tensor *t) {
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != want) return 0;
        want *= t->shape[i];   /* at most the element count, checked */
    }
    return 1;
}

/* The strided view's elements (es bytes each) from src (the view's first
 * element) into dst, in row-major order: rows of the last dimension, the
 * others counted like an odometer. */
static void tz_gather(unsigned char *dst, const unsigned char *src, const rai_pk_tensor *t, size_t es) {
    const int nd = t->ndim;
    const int64_t inner = t->shape[nd - 1], istride = t->stride[nd - 1];
    int64_t idx[RA_ST_MAX_DIMS] = {0};
    for (;;) {
        int64_t at = 0;
        for (int i = 0; i < nd - 1; i++) at += idx[i] * t->stride[i];
        if (istride == 1) {
            memcpy(dst, src + (size_t)at * es, (size_t)inner * es);
            dst += (size_t)inner * es;
        } else {
            for (int64_t j = 0; j < inner; j++, dst += es)
                memcpy(dst, src + (size_t)(at + j * istride) * es, es);
        }
        int i = nd - 2;
        while (i >= 0 && ++idx[i] == t->shape[i]) idx[i--] = 0;
        if (i < 0) return;
    }
}

/* Tensor name of t into f: one byte range of the file, or a gathered copy. */
static ra_status tz_add_tensor(tz_archive *a, ra_st_file *f, const char *name, const rai_pk_tensor *t) {
    const char *what;
    const ra_dtype d = tz_tensor_dtype(t, &what);
    tz_entry *e = NULL;
    int64_t bytes;
    ra_status s = tz_storage(a, name, t, &e, &bytes);
    if (s) return s;
    if (!d)   /* _rebuild_tensor_v3's dtype */
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": %s is a dtype relattn does not read "
                        "(F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL)", name, what);
    if (t->ndim > RA_ST_MAX_DIMS)
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": %d dimensions (at most %d)", name,
                        t->ndim, RA_ST_MAX_DIMS);
    const size_t es = rai_st_dtype_size(d);
    const int64_t numel = tz_numel(t->shape, t->ndim), cap = bytes / (int64_t)es;
    char shp[200], str[200];
    tz_fmt_dims(shp, sizeof shp, t->shape, t->ndim);
    tz_fmt_dims(str, sizeof str, t->stride, t->ndim);
    if (numel < 0)
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": its shape %s has more elements than int64 "
                        "holds", name, shp);
    if (!tz_view_fits(t, numel, cap))
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": its view (offset %lld, shape %s, stride %s) "
                        "runs past its storage " NAMEF " of %lld elements of %s", name,
                        (long long)t->offset, shp, str, e->name, (long long)cap, rai_st_dtype_name(d));
    int64_t nbytes;   /* <= the storage's bytes if row-major, else what is gathered */
    if (!rai_mul_i64(&nbytes, numel, (int64_t)es)) nbytes = INT64_MAX;
    const unsigned char *first = a->base + e->off + (numel ? (size_t)t->offset * es : 0);
    if (numel == 0 || tz_row_major(t)) {
        rai_st_part part = {first, (size_t)nbytes, a->fd, (int64_t)(first - a->base)};
        return rai_st_add(f, name, d, t->ndim, t->shape, &part, 1);
    }
    const int64_t limit = 2 * (int64_t)a->len + RAI_TORCH_GATHER_SLACK;
    if (nbytes > limit - a->gathered || (uint64_t)nbytes > SIZE_MAX)
        return rai_fail(RA_ERR_FORMAT, "tensor " NAMEF ": gathering its strided view (shape %s, "
                        "stride %s) would take the memory of strided views past %lld bytes (twice "
                        "the file's size and 64 MiB)", name, shp, str, (long long)limit);
    unsigned char *buf = malloc((size_t)nbytes);
    if (!buf) return rai_fail(RA_ERR_NOMEM, "out of memory gathering tensor " NAMEF, name);
    tz_gather(buf, first, t, es);
    a->gathered += nbytes;
    if ((s = rai_st_keep(f, free, buf))) return s;
    rai_st_part part = {buf, (size_t)nbytes, -1, 0};
    return rai_st_add(f, name, d, t->ndim, t->shape, &part, 1);
}

/* Every tensor of state dict sd into f, named by its key. */
static ra_status tz_build(tz_archive *a, const rai_pk_value *sd, ra_st_file *f) {
    ra_status s = RA_OK;
    for (size_t i = 0; !s && i < sd->u.dict.n; i++) {
        const rai_pk_value *k = sd->u.dict.v[i].key, *v = sd->u.dict.v[i].value;
        if (v->kind != RAI_PK_TENSOR) continue;
        if (k->kind != RAI_PK_STR || strlen(k->u.s.p) != k->u.s.n || !k->u.s.n) {
            char what[300];
            tz_summary(what, sizeof what, k);
            return rai_fail(RA_ERR_FORMAT, "a tensor under a key that is not a name: %s", what);
        }
        s = tz_add_tensor(a, f, k->u.s.p, v->u.t);
    }
    return s ? s : rai_st_finish(f);
}

/* ------------------------------------------------------------------------ */
/* Opening                                                                   */
/* ------------------------------------------------------------------------ */

/* What a file keeps: the mapping and the descriptor, or the copy. */
typedef struct tz_hold {
    void *map;
    size_t len;
    int fd;
} tz_hold;

static void tz_hold_drop(void *ctx) {
    tz_hold *h = ctx;
    if (h->fd >= 0) rai_unmap_file(&(rai_mapping){h->map, h->len, h->fd});
    else free(h->map);
    free(h);
}

/* The tensor file of the archive held by h (which the file then keeps). */
static ra_status tz_describe_loaded(tz_archive *a, char **text);   /* below: Describing */

static ra_status tz_open_held(ra_st_file **out, tz_hold *h, const char *key, char *found, size_t n,
                              char **what) {
    if (found && n) found[0] = 0;
    ra_st_file *f = NULL;
    ra_status s = rai_st_new(&f);
    if (s) {
        tz_hold_drop(h);
        return s;
    }
    if ((s = rai_st_keep(f, tz_hold_drop, h))) {
        ra_st_close(f);
        return s;
    }
    tz_archive a = {.base = h->map, .len = h->len, .fd = h->fd};
    const rai_pk_value *sd = NULL;
    s = tz_load(&a);
    if (!s) s = tz_select(&a, key, &sd, found, n);
    if (!s) s = tz_build(&a, sd, f);
    if (!s && what) s = tz_describe_loaded(&a, what);   /* from the same parse */
    tz_archive_free(&a);
    if (s) ra_st_close(f);
    else *out = f;
    return s;
}

/* The file at path mapped into a new hold. */
static ra_status tz_map(const char *path, tz_hold **out) {
    rai_mapping mp;
    ra_status s = rai_map_file(path, &mp);
    if (s) return s;
    tz_hold *h = mp.len ? malloc(sizeof *h) : NULL;
    if (!h) {
        const size_t len = mp.len;
        rai_unmap_file(&mp);
        return len ? rai_fail(RA_ERR_NOMEM, "'%s': out of memory", path)
                      : rai_fail(RA_ERR_FORMAT, "'%s': the file is empty", path);
    }
    *h = (tz_hold){mp.p, mp.len, mp.fd};
    *out = h;
    return RA_OK;
}

static ra_status tz_copy(const void *buf, size_t len, tz_hold **out) {
    tz_hold *h = malloc(sizeof *h);
    void *c = malloc(len ? len : 1);
    if (!h || !c) {
        free(h), free(c);
        return rai_fail(RA_ERR_NOMEM, "out of memory copying a %zu-byte buffer", len);
    }
    if (len) memcpy(c, buf, len);
    *h = (tz_hold){c, len, -1};
    *out = h;
    return RA_OK;
}

/* The reason of the failure s again, after "'path': ". */
static ra_status tz_prefix(ra_status s, const char *path) {
    char why[2048];
    snprintf(why, sizeof why, "%s", ra_last_error());
    return rai_fail(s, "'%s': %s", path, why);
}

ra_status rai_torch_open(ra_st_file **out, const char *path, const char *key, char *found, size_t n,
                         char **what) {
    if (!out || !path) return rai_fail(RA_ERR_ARG, "rai_torch_open: NULL argument");
    *out = NULL;
    if (what) *what = NULL;
    tz_hold *h = NULL;
    ra_status s = tz_map(path, &h);
    if (!s && (s = tz_open_held(out, h, key, found, n, what))) return tz_prefix(s, path);
    return s;
}

ra_status rai_torch_open_memory(ra_st_file **out, const void *buf, size_t len, const char *key,
                                char *found, size_t n) {
    if (!out || (!buf && len)) return rai_fail(RA_ERR_ARG, "rai_torch_open_memory: NULL argument");
    *out = NULL;
    tz_hold *h = NULL;
    ra_status s = tz_copy(buf, len, &h);
    return s ? s : tz_open_held(out, h, key, found, n, NULL);
}

int rai_torch_sniff(const char *path) {
    unsigned char b[512];
    /* only a regular file is read: a FIFO must neither block the open nor
     * lose the bytes its reader is owed */
    const int fd = path ? open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) : -1;
    struct stat st;
    ssize_t n = -1;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = pread(fd, b, sizeof b, 0);
    if (fd >= 0) close(fd);
    return n > 0 ? tz_kind(b, (size_t)n) : 0;
}

/* ------------------------------------------------------------------------ */
/* Describing                                                                */
/* ------------------------------------------------------------------------ */

typedef struct tz_text {
    char *p;
    size_t n, cap;
    int failed;
} tz_text;

static void tz_line(tz_text *t, const char *a, const char *b) {
    const size_t k = strlen(a) + strlen(b) + 3;
    if (t->failed) return;
    if (t->n + k >= t->cap) {
        const size_t cap = 2 * (t->cap + k);
        char *p = realloc(t->p, cap);
        if (!p) {
            t->failed = 1;
            return;
        }
        t->p = p, t->cap = cap;
    }
    t->n += (size_t)snprintf(t->p + t->n, t->cap - t->n, "%s%s\n", a, b);
}

/* What loaded archive a holds (tz_load), one line an entry of its root,
 * then the state dict the automatic choice takes. */
static ra_status tz_describe_loaded(tz_archive *a, char **text) {
    tz_text t = {0};
    const rai_pk_value *root = rai_pk_root(a->doc), *sd;
    char what[400], key[300], found[RAI_TORCH_MAX_NAME];
    for (size_t i = 0; root && root->kind == RAI_PK_DICT && i < root->u.dict.n; i++) {
        const rai_pk_value *k = root->u.dict.v[i].key;
        if (k->kind == RAI_PK_STR) ra_escape_text(key, sizeof key - 2, k->u.s.p);
        else tz_summary(key, sizeof key - 2, k);
        strcat(key, ": ");
        tz_summary(what, sizeof what, root->u.dict.v[i].value);
        tz_line(&t, key, what);
    }
    if (root && root->kind != RAI_PK_DICT) {
        tz_summary(what, sizeof what, root);
        tz_line(&t, "(root): ", what);
    }
    if (root && !tz_auto(a, &sd, found, sizeof found)) {
        const size_t k = tz_count_tensors(sd);
        snprintf(what, sizeof what, "%s%.300s (%zu tensor%s)", found[0] ? "" : "(root)", found, k,
                 k == 1 ? "" : "s");
        tz_line(&t, "selected: ", what);
    } else if (root) {
        tz_line(&t, "selected: nothing: ", ra_last_error());
    }
    if (t.failed || !t.p) {
        free(t.p);
        return rai_fail(RA_ERR_NOMEM, "out of memory describing a checkpoint");
    }
    *text = t.p;
    return RA_OK;
}

static ra_status tz_describe(tz_hold *h, char **text) {
    tz_archive a = {.base = h->map, .len = h->len, .fd = -1};
    ra_status s = tz_load(&a);
    if (!s) s = tz_describe_loaded(&a, text);
    tz_archive_free(&a);
    tz_hold_drop(h);
    return s;
}

ra_status rai_torch_describe(const char *path, char **text) {
    if (!path || !text) return rai_fail(RA_ERR_ARG, "rai_torch_describe: NULL argument");
    *text = NULL;
    tz_hold *h = NULL;
    ra_status s = tz_map(path, &h);
    if (!s && (s = tz_describe(h, text))) return tz_prefix(s, path);
    return s;
}

ra_status rai_torch_describe_memory(const void *buf, size_t len, char **text) {
    if (!text || (!buf && len)) return rai_fail(RA_ERR_ARG, "rai_torch_describe_memory: NULL argument");
    *text = NULL;
    tz_hold *h = NULL;
    ra_status s = tz_copy(buf, len, &h);
    return s ? s : tz_describe(h, text);
}
