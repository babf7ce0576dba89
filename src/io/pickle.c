/* pickle.c - the restricted unpickler (pickle.h; docs/reference.md, section 2).
 *
 * A pickle is a program for a stack machine; this runs the part of it that
 * builds data (containers, numbers, strings, the memo) and interprets the
 * few calls a torch.save checkpoint makes from an allowlist, without ever
 * importing or calling anything. The machine: a value stack, a stack of
 * marks (positions in it, as Python keeps a stack of stacks) and the memo
 * (an array of values indexed as the stream says). Every count it keeps is
 * bounded (pickle.h), every length read is checked against the bytes that
 * remain, and nothing recurses. */
#include "io/pickle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The document: values, strings and arrays in blocks freed together        */
/* ------------------------------------------------------------------------ */

typedef struct pk_block {
    struct pk_block *next;
    size_t used, cap;
} pk_block;

#define PK_HDR ((sizeof(pk_block) + 15) & ~(size_t)15)   /* data starts 16-aligned */
#define PK_BLOCK ((size_t)1 << 16)

struct rai_pk_doc {
    pk_block *blocks;      /* the first one is the one being filled */
    const rai_pk_value *root;
    size_t nvalues;
};

static void *pk_alloc(rai_pk_doc *d, size_t n) {
    if (n > SIZE_MAX / 2) return NULL;
    n = (n + 15) & ~(size_t)15;
    pk_block *b = d->blocks;
    if (b && b->cap - b->used >= n) {
        void *p = (unsigned char *)b + PK_HDR + b->used;
        b->used += n;
        return p;
    }
    /* a large request gets a block of its own, linked behind the one being
     * filled, so that the rest of that one is not lost */
    const size_t cap = n > PK_BLOCK / 4 ? n : PK_BLOCK;
    pk_block *nb = malloc(PK_HDR + cap);
    if (!nb) return NULL;
    nb->cap = cap;
    nb->used = n;
    if (b && cap == n) {
        nb->next = b->next;
        b->next = nb;
    } else {
        nb->next = b;
        d->blocks = nb;
    }
    return (unsigned char *)nb + PK_HDR;
}

void rai_pk_free(rai_pk_doc *d) {
    if (!d) return;
    for (pk_block *b = d->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(d);
}

const rai_pk_value *rai_pk_root(const rai_pk_doc *d) { return d ? d->root : NULL; }
size_t rai_pk_count(const rai_pk_doc *d) { return d ? d->nvalues : 0; }

const char *rai_pk_kind_name(rai_pk_kind k) {
    static const char *const names[] = {
        [RAI_PK_NONE] = "None",     [RAI_PK_BOOL] = "bool",    [RAI_PK_INT] = "int",
        [RAI_PK_BIGINT] = "int",    [RAI_PK_FLOAT] = "float",  [RAI_PK_STR] = "str",
        [RAI_PK_BYTES] = "bytes",   [RAI_PK_TUPLE] = "tuple",  [RAI_PK_LIST] = "list",
        [RAI_PK_SET] = "set",       [RAI_PK_DICT] = "dict",    [RAI_PK_GLOBAL] = "global",
        [RAI_PK_OPAQUE] = "object", [RAI_PK_TENSOR] = "tensor", [RAI_PK_PERSID] = "persistent id",
    };
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

const rai_pk_value *rai_pk_dict_get(const rai_pk_value *d, const char *key) {
    if (!d || d->kind != RAI_PK_DICT || !key) return NULL;
    const size_t n = strlen(key);
    for (size_t i = d->u.dict.n; i-- > 0;) {
        const rai_pk_value *k = d->u.dict.v[i].key;
        if (k->kind == RAI_PK_STR && k->u.s.n == n && memcmp(k->u.s.p, key, n) == 0)
            return d->u.dict.v[i].value;
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* The allowlist                                                             */
/* ------------------------------------------------------------------------ */

static const struct pk_allowed {
    const char *name;
    rai_pk_gid id;
    ra_dtype dtype;
} pk_allowed[] = {
    {"collections.OrderedDict", RAI_PK_G_ORDERED_DICT, 0},
    {"torch._utils._rebuild_tensor", RAI_PK_G_REBUILD_V1, 0},
    {"torch._utils._rebuild_tensor_v2", RAI_PK_G_REBUILD_V2, 0},
    {"torch._utils._rebuild_tensor_v3", RAI_PK_G_REBUILD_V3, 0},
    {"torch._utils._rebuild_parameter", RAI_PK_G_REBUILD_PARAM, 0},
    {"torch._utils._rebuild_parameter_with_state", RAI_PK_G_REBUILD_PARAM_STATE, 0},
    {"torch._tensor._rebuild_from_type_v2", RAI_PK_G_REBUILD_FROM_TYPE, 0},
    {"torch.Tensor", RAI_PK_G_TENSOR_CLASS, 0},
    {"torch.nn.parameter.Parameter", RAI_PK_G_PARAMETER_CLASS, 0},
    /* the storage classes a tensor's persistent id names (torch.save's
     * pickle_storage_type()); those without a relattn dtype are refused
     * when a tensor of theirs is read, not here */
    {"torch.FloatStorage", RAI_PK_G_STORAGE, RA_DTYPE_F32},
    {"torch.HalfStorage", RAI_PK_G_STORAGE, RA_DTYPE_F16},
    {"torch.BFloat16Storage", RAI_PK_G_STORAGE, RA_DTYPE_BF16},
    {"torch.DoubleStorage", RAI_PK_G_STORAGE, RA_DTYPE_F64},
    {"torch.LongStorage", RAI_PK_G_STORAGE, RA_DTYPE_I64},
    {"torch.IntStorage", RAI_PK_G_STORAGE, RA_DTYPE_I32},
    {"torch.ShortStorage", RAI_PK_G_STORAGE, RA_DTYPE_I16},
    {"torch.CharStorage", RAI_PK_G_STORAGE, RA_DTYPE_I8},
    {"torch.ByteStorage", RAI_PK_G_STORAGE, RA_DTYPE_U8},
    {"torch.BoolStorage", RAI_PK_G_STORAGE, RA_DTYPE_BOOL},
    {"torch.UntypedStorage", RAI_PK_G_STORAGE, RA_DTYPE_U8},
    {"torch.ComplexHalfStorage", RAI_PK_G_STORAGE, RA_DTYPE_INVALID},
    {"torch.ComplexFloatStorage", RAI_PK_G_STORAGE, RA_DTYPE_INVALID},
    {"torch.ComplexDoubleStorage", RAI_PK_G_STORAGE, RA_DTYPE_INVALID},
    {"torch.QInt8Storage", RAI_PK_G_STORAGE, RA_DTYPE_INVALID},
    {"torch.QUInt8Storage", RAI_PK_G_STORAGE, RA_DTYPE_INVALID},
    {"torch.QInt32Storage", RAI_PK_G_STORAGE, RA_DTYPE_INVALID},
    {"torch.QUInt4x2Storage", RAI_PK_G_STORAGE, RA_DTYPE_INVALID},
    {"torch.QUInt2x4Storage", RAI_PK_G_STORAGE, RA_DTYPE_INVALID},
    /* dtypes (_rebuild_tensor_v3's argument, and plain values) */
    {"torch.float32", RAI_PK_G_DTYPE, RA_DTYPE_F32},
    {"torch.float16", RAI_PK_G_DTYPE, RA_DTYPE_F16},
    {"torch.bfloat16", RAI_PK_G_DTYPE, RA_DTYPE_BF16},
    {"torch.float64", RAI_PK_G_DTYPE, RA_DTYPE_F64},
    {"torch.int64", RAI_PK_G_DTYPE, RA_DTYPE_I64},
    {"torch.int32", RAI_PK_G_DTYPE, RA_DTYPE_I32},
    {"torch.int16", RAI_PK_G_DTYPE, RA_DTYPE_I16},
    {"torch.int8", RAI_PK_G_DTYPE, RA_DTYPE_I8},
    {"torch.uint8", RAI_PK_G_DTYPE, RA_DTYPE_U8},
    {"torch.bool", RAI_PK_G_DTYPE, RA_DTYPE_BOOL},
    {"torch.uint16", RAI_PK_G_DTYPE, RA_DTYPE_INVALID},
    {"torch.uint32", RAI_PK_G_DTYPE, RA_DTYPE_INVALID},
    {"torch.uint64", RAI_PK_G_DTYPE, RA_DTYPE_INVALID},
    {"torch.complex32", RAI_PK_G_DTYPE, RA_DTYPE_INVALID},
    {"torch.complex64", RAI_PK_G_DTYPE, RA_DTYPE_INVALID},
    {"torch.complex128", RAI_PK_G_DTYPE, RA_DTYPE_INVALID},
    {"torch.float8_e4m3fn", RAI_PK_G_DTYPE, RA_DTYPE_INVALID},
    {"torch.float8_e5m2", RAI_PK_G_DTYPE, RA_DTYPE_INVALID},
    {"torch.Size", RAI_PK_G_SIZE, 0},
    {"builtins.set", RAI_PK_G_SET, 0},
    {"builtins.frozenset", RAI_PK_G_SET, 0},
    {"_codecs.encode", RAI_PK_G_ENCODE, 0},
    {"builtins.bytes", RAI_PK_G_ENCODE, 0},   /* bytes(): protocol 2's empty bytes */
    /* data classes that checkpoints hold beside the weights: their objects
     * are opaque values, whatever their arguments and state */
    {"argparse.Namespace", RAI_PK_G_DATA, 0},
    {"numpy.core.multiarray.scalar", RAI_PK_G_DATA, 0},
    {"numpy._core.multiarray.scalar", RAI_PK_G_DATA, 0},
    {"numpy.core.multiarray._reconstruct", RAI_PK_G_DATA, 0},
    {"numpy._core.multiarray._reconstruct", RAI_PK_G_DATA, 0},
    {"numpy.ndarray", RAI_PK_G_DATA, 0},
    {"numpy.dtype", RAI_PK_G_DATA, 0},
    {"torch.torch_version.TorchVersion", RAI_PK_G_DATA, 0},
    {"torch.device", RAI_PK_G_DATA, 0},
    {"collections.Counter", RAI_PK_G_DATA, 0},
    {"builtins.complex", RAI_PK_G_DATA, 0},
    {"builtins.slice", RAI_PK_G_DATA, 0},
    {"builtins.bytearray", RAI_PK_G_DATA, 0},
    {"datetime.datetime", RAI_PK_G_DATA, 0},
    {"datetime.date", RAI_PK_G_DATA, 0},
    {"datetime.time", RAI_PK_G_DATA, 0},
    {"datetime.timedelta", RAI_PK_G_DATA, 0},
    {"pathlib.PosixPath", RAI_PK_G_DATA, 0},
    {"pathlib.WindowsPath", RAI_PK_G_DATA, 0},
    {"pathlib.PurePosixPath", RAI_PK_G_DATA, 0},
    {"pathlib.PureWindowsPath", RAI_PK_G_DATA, 0},
    {"yacs.config.CfgNode", RAI_PK_G_DATA, 0},
    {"pytorch_lightning.utilities.parsing.AttributeDict", RAI_PK_G_DATA, 0},
    {"lightning_fabric.utilities.data.AttributeDict", RAI_PK_G_DATA, 0},
    {"lightning.fabric.utilities.data.AttributeDict", RAI_PK_G_DATA, 0},
};

/* Modules renamed since the streams that name them were written (Python
 * 2's names, which protocol 2 keeps; torch.tensor became torch._tensor). */
static const char *pk_module(const char *m) {
    if (!strcmp(m, "__builtin__")) return "builtins";
    if (!strcmp(m, "copy_reg")) return "copyreg";
    if (!strcmp(m, "torch.tensor")) return "torch._tensor";
    return m;
}

/* ------------------------------------------------------------------------ */
/* The machine                                                               */
/* ------------------------------------------------------------------------ */

typedef struct pk {
    const unsigned char *buf, *p, *end;
    rai_pk_doc *d;
    rai_pk_value **stack;
    size_t n, cap;
    size_t marks[RAI_PK_MAX_DEPTH];   /* stack positions */
    int nmarks;
    rai_pk_value **memo;
    size_t memo_cap, memo_len;        /* slots allocated, slots set */
    rai_pk_value **dicts;             /* every dict made (their keys are checked at STOP) */
    size_t ndicts, dicts_cap;
    size_t at;                        /* offset of the opcode being run */
    int op;
} pk;

static const char *pk_opname(int op) {
    switch (op) {
    case '(': return "MARK";          case '.': return "STOP";
    case '0': return "POP";           case '1': return "POP_MARK";
    case '2': return "DUP";           case 'N': return "NONE";
    case 'J': return "BININT";        case 'K': return "BININT1";
    case 'M': return "BININT2";       case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";        case 'G': return "BINFLOAT";
    case 'X': return "BINUNICODE";    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";  case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING"; case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES"; case 0x8e: return "BINBYTES8";
    case 0x96: return "BYTEARRAY8";   case ')': return "EMPTY_TUPLE";
    case 't': return "TUPLE";         case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";       case 0x87: return "TUPLE3";
    case ']': return "EMPTY_LIST";    case 'a': return "APPEND";
    case 'e': return "APPENDS";       case 'l': return "LIST";
    case '}': return "EMPTY_DICT";    case 's': return "SETITEM";
    case 'u': return "SETITEMS";      case 'd': return "DICT";
    case 0x8f: return "EMPTY_SET";    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";   case 0x94: return "MEMOIZE";
    case 'h': return "BINGET";        case 'j': return "LONG_BINGET";
    case 'c': return "GLOBAL";        case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";        case 'b': return "BUILD";
    case 0x81: return "NEWOBJ";       case 0x92: return "NEWOBJ_EX";
    case 'Q': return "BINPERSID";     case 0x80: return "PROTO";
    case 0x95: return "FRAME";        case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 'I': return "INT";           case 'L': return "LONG";
    case 'S': return "STRING";        case 'V': return "UNICODE";
    case 'F': return "FLOAT";         case 'p': return "PUT";
    case 'g': return "GET";           case 'i': return "INST";
    case 'o': return "OBJ";           case 'P': return "PERSID";
    case 0x82: return "EXT1";         case 0x83: return "EXT2";
    case 0x84: return "EXT4";         case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    }
    return NULL;
}

/* A malformed stream: "byte N (OPCODE): why". */
static ra_status pk_bad(const pk *ps, const char *fmt, ...) RA_PRINTF(2, 3);
static ra_status pk_bad(const pk *ps, const char *fmt, ...) {
    char why[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    const char *name = pk_opname(ps->op);
    return rai_fail(RA_ERR_FORMAT, "pickle byte %zu (%s): %s", ps->at, name ? name : "?", why);
}

static ra_status pk_nomem(void) {
    return rai_fail(RA_ERR_NOMEM, "out of memory reading a pickle");
}

/* ---- reading the stream ---- */

static int pk_has(const pk *ps, uint64_t n) { return n <= (uint64_t)(ps->end - ps->p); }

static uint64_t pk_le(const unsigned char *p, int n) {
    uint64_t u = 0;
    for (int i = n - 1; i >= 0; i--) u = u << 8 | p[i];
    return u;
}

/* An unsigned little-endian field of n bytes. */
static ra_status pk_field(pk *ps, int n, uint64_t *out) {
    if (!pk_has(ps, (uint64_t)n)) return pk_bad(ps, "the stream ends inside the opcode");
    *out = pk_le(ps->p, n);
    ps->p += n;
    return RA_OK;
}

/* The n-byte two's complement integer u (n <= 8), without
 * implementation-defined conversions. */
static int64_t pk_signed(uint64_t u, int n) {
    if (n == 0) return 0;
    const uint64_t sign = (uint64_t)1 << (8 * n - 1);
    if (!(u & sign)) return (int64_t)u;
    if (n < 8) return -(int64_t)((sign << 1) - u);   /* u - 2^(8n), at most 2^55 away */
    return -(int64_t)(~u) - 1;
}

/* Strict UTF-8 but for surrogates, which Python's unpickler lets through
 * ("surrogatepass"). */
static int pk_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const unsigned c = s[i];
        size_t k;
        unsigned cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) k = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) k = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) k = 3, cp = c & 0x07;
        else return 0;
        if (n - i - 1 < k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
        i += k + 1;
    }
    return 1;
}

/* ---- values ---- */

static ra_status pk_new(pk *ps, rai_pk_kind kind, rai_pk_value **out) {
    if (ps->d->nvalues >= RAI_PK_MAX_VALUES)
        return pk_bad(ps, "more than %zu values (the limit)", RAI_PK_MAX_VALUES);
    if (kind == RAI_PK_DICT && ps->ndicts == ps->dicts_cap) {
        const size_t nc = ps->dicts_cap ? 2 * ps->dicts_cap : 16;
        rai_pk_value **dd = realloc(ps->dicts, nc * sizeof *dd);
        if (!dd) return pk_nomem();
        ps->dicts = dd, ps->dicts_cap = nc;
    }
    rai_pk_value *v = pk_alloc(ps->d, sizeof *v);
    if (!v) return pk_nomem();
    if (kind == RAI_PK_DICT) ps->dicts[ps->ndicts++] = v;
    memset(v, 0, sizeof *v);
    v->kind = kind;
    ps->d->nvalues++;
    *out = v;
    return RA_OK;
}

static ra_status pk_new_int(pk *ps, int64_t i, rai_pk_value **out) {
    ra_status s = pk_new(ps, RAI_PK_INT, out);
    if (!s) (*out)->u.i = i;
    return s;
}

/* A string or bytes value of the n bytes at p (copied, NUL-terminated). */
static ra_status pk_new_str(pk *ps, rai_pk_kind kind, const unsigned char *p, size_t n,
                            rai_pk_value **out) {
    if (n > RAI_PK_MAX_STR)
        return pk_bad(ps, "a string of %zu bytes (the limit is %zu)", n, RAI_PK_MAX_STR);
    if (kind == RAI_PK_STR && !pk_utf8(p, n)) return pk_bad(ps, "a string that is not UTF-8");
    char *c = pk_alloc(ps->d, n + 1);
    if (!c) return pk_nomem();
    if (n) memcpy(c, p, n);
    c[n] = 0;
    ra_status s = pk_new(ps, kind, out);
    if (!s) (*out)->u.s.p = c, (*out)->u.s.n = n;
    return s;
}

/* Parent's depth grows to cover child (limit: RAI_PK_MAX_DEPTH). */
static ra_status pk_nest(pk *ps, rai_pk_value *parent, const rai_pk_value *child) {
    if (child->depth + 1 > parent->depth) parent->depth = child->depth + 1;
    if (parent->depth > RAI_PK_MAX_DEPTH)
        return pk_bad(ps, "values nested deeper than %d (the limit)", RAI_PK_MAX_DEPTH);
    return RA_OK;
}

/* Room for one more element of size sz in an array *v of *cap (from the
 * document: the old array stays there, unused). */
static ra_status pk_grow(pk *ps, void **v, size_t n, size_t *cap, size_t sz) {
    if (n < *cap) return RA_OK;
    if (n >= RAI_PK_MAX_ITEMS)
        return pk_bad(ps, "a container of more than %zu items (the limit)", RAI_PK_MAX_ITEMS);
    const size_t nc = *cap ? 2 * *cap : 4;
    void *nv = pk_alloc(ps->d, nc * sz);
    if (!nv) return pk_nomem();
    if (n) memcpy(nv, *v, n * sz);
    *v = nv;
    *cap = nc;
    return RA_OK;
}

/* Append v to a tuple, list or set. */
static ra_status pk_seq_add(pk *ps, rai_pk_value *c, rai_pk_value *v) {
    ra_status s = pk_grow(ps, (void **)&c->u.seq.v, c->u.seq.n, &c->u.seq.cap, sizeof *c->u.seq.v);
    if (!s) s = pk_nest(ps, c, v);
    if (!s) c->u.seq.v[c->u.seq.n++] = v, c->tensors += v->kind == RAI_PK_TENSOR;
    return s;
}

static ra_status pk_dict_add(pk *ps, rai_pk_value *d, rai_pk_value *k, rai_pk_value *v) {
    if (k->kind == RAI_PK_LIST || k->kind == RAI_PK_DICT)
        return pk_bad(ps, "a dict key that is a %s (unhashable)", rai_pk_kind_name(k->kind));
    ra_status s = pk_grow(ps, (void **)&d->u.dict.v, d->u.dict.n, &d->u.dict.cap,
                          sizeof *d->u.dict.v);
    if (!s) s = pk_nest(ps, d, k);
    if (!s) s = pk_nest(ps, d, v);
    if (!s) d->u.dict.v[d->u.dict.n++] = (rai_pk_pair){k, v}, d->tensors += v->kind == RAI_PK_TENSOR;
    return s;
}

/* A new tuple, list or set of the n values at items. */
static ra_status pk_new_seq(pk *ps, rai_pk_kind kind, rai_pk_value *const *items, size_t n,
                            rai_pk_value **out) {
    ra_status s = pk_new(ps, kind, out);
    for (size_t i = 0; !s && i < n; i++) s = pk_seq_add(ps, *out, items[i]);
    return s;
}

/* ---- the stack and its marks ---- */

/* Where the values since the last mark begin. */
static size_t pk_frame(const pk *ps) { return ps->nmarks ? ps->marks[ps->nmarks - 1] : 0; }

static ra_status pk_push(pk *ps, rai_pk_value *v) {
    if (ps->n == ps->cap) {
        if (ps->cap >= RAI_PK_MAX_STACK)
            return pk_bad(ps, "more than %zu values on the stack (the limit)", RAI_PK_MAX_STACK);
        const size_t nc = 2 * ps->cap;
        rai_pk_value **st = realloc(ps->stack, nc * sizeof *st);
        if (!st) return pk_nomem();
        ps->stack = st;
        ps->cap = nc;
    }
    ps->stack[ps->n++] = v;
    return RA_OK;
}

static ra_status pk_pop(pk *ps, rai_pk_value **v) {
    if (ps->n <= pk_frame(ps)) return pk_bad(ps, "the stack is empty");
    *v = ps->stack[--ps->n];
    return RA_OK;
}

static ra_status pk_top(pk *ps, rai_pk_value **v) {
    if (ps->n <= pk_frame(ps)) return pk_bad(ps, "the stack is empty");
    *v = ps->stack[ps->n - 1];
    return RA_OK;
}

/* Pop the last mark: the values since it are stack[*start .. ps->n). */
static ra_status pk_pop_mark(pk *ps, size_t *start) {
    if (!ps->nmarks) return pk_bad(ps, "no mark to pop");
    *start = ps->marks[--ps->nmarks];
    return RA_OK;
}

/* After pk_pop_mark: the value below the marked ones (the container that
 * APPENDS, SETITEMS and ADDITEMS fill), which must lie in the frame. */
static ra_status pk_below(pk *ps, size_t start, rai_pk_value **v) {
    if (start <= pk_frame(ps)) return pk_bad(ps, "no container below the mark");
    *v = ps->stack[start - 1];
    return RA_OK;
}

/* ---- the memo ---- */

static ra_status pk_memo_put(pk *ps, uint64_t idx) {
    rai_pk_value *v = NULL;
    ra_status s = pk_top(ps, &v);
    if (s) return s;
    if (idx >= RAI_PK_MAX_MEMO)
        return pk_bad(ps, "memo index %llu (the limit is %zu)", (unsigned long long)idx,
                      RAI_PK_MAX_MEMO);
    if (idx >= ps->memo_cap) {
        size_t nc = ps->memo_cap ? ps->memo_cap : 64;
        while (nc <= idx) nc *= 2;
        rai_pk_value **m = realloc(ps->memo, nc * sizeof *m);
        if (!m) return pk_nomem();
        memset(m + ps->memo_cap, 0, (nc - ps->memo_cap) * sizeof *m);
        ps->memo = m;
        ps->memo_cap = nc;
    }
    if (!ps->memo[idx]) ps->memo_len++;
    ps->memo[idx] = v;
    return RA_OK;
}

static ra_status pk_memo_get(pk *ps, uint64_t idx) {
    if (idx >= ps->memo_cap || !ps->memo[idx])
        return pk_bad(ps, "memo index %llu was never set", (unsigned long long)idx);
    return pk_push(ps, ps->memo[idx]);
}

/* ------------------------------------------------------------------------ */
/* Globals and the calls interpreted                                         */
/* ------------------------------------------------------------------------ */

static ra_status pk_global(pk *ps, const char *module, const char *name) {
    char full[2 * RAI_PK_MAX_NAME + 2];
    snprintf(full, sizeof full, "%s.%s", pk_module(module), name);
    for (size_t i = 0; i < sizeof pk_allowed / sizeof pk_allowed[0]; i++) {
        if (strcmp(full, pk_allowed[i].name)) continue;
        rai_pk_value *v = NULL;
        ra_status s = pk_new(ps, RAI_PK_GLOBAL, &v);
        if (s) return s;
        v->u.g.name = pk_allowed[i].name;
        v->u.g.id = pk_allowed[i].id;
        v->u.g.dtype = pk_allowed[i].dtype;
        return pk_push(ps, v);
    }
    return rai_fail(RA_ERR_FORMAT,
                    "refusing to load global '%.200s' (only tensors, dicts, lists and plain "
                    "values are read)", full);
}

/* GLOBAL: "module\nname\n" */
static ra_status pk_line(pk *ps, char *out) {
    const size_t room = (size_t)(ps->end - ps->p);
    const size_t most = room < RAI_PK_MAX_NAME + 1 ? room : RAI_PK_MAX_NAME + 1;
    const unsigned char *nl = memchr(ps->p, '\n', most);
    if (!nl) return pk_bad(ps, "a name longer than %d bytes or not ended", RAI_PK_MAX_NAME);
    const size_t n = (size_t)(nl - ps->p);
    if (!pk_utf8(ps->p, n) || memchr(ps->p, 0, n)) return pk_bad(ps, "a name that is not UTF-8");
    memcpy(out, ps->p, n);
    out[n] = 0;
    ps->p = nl + 1;
    return RA_OK;
}

static ra_status pk_op_global(pk *ps) {
    char module[RAI_PK_MAX_NAME + 1], name[RAI_PK_MAX_NAME + 1];
    ra_status s = pk_line(ps, module);
    if (!s) s = pk_line(ps, name);
    return s ? s : pk_global(ps, module, name);
}

static ra_status pk_op_stack_global(pk *ps) {
    rai_pk_value *m = NULL, *n = NULL;
    ra_status s = pk_pop(ps, &n);
    if (!s) s = pk_pop(ps, &m);
    if (s) return s;
    if (m->kind != RAI_PK_STR || n->kind != RAI_PK_STR)
        return pk_bad(ps, "module and name are not strings");
    if (m->u.s.n > RAI_PK_MAX_NAME || n->u.s.n > RAI_PK_MAX_NAME ||
        strlen(m->u.s.p) != m->u.s.n || strlen(n->u.s.p) != n->u.s.n)
        return pk_bad(ps, "a name longer than %d bytes or holding a NUL", RAI_PK_MAX_NAME);
    return pk_global(ps, m->u.s.p, n->u.s.p);
}

static const rai_pk_value *pk_arg(const rai_pk_value *args, size_t i) {
    return i < args->u.seq.n ? args->u.seq.v[i] : NULL;
}

/* A tuple of non-negative integers (a size or a stride) into out. */
static int pk_dims(const rai_pk_value *v, int64_t *out, int *n) {
    if (!v || v->kind != RAI_PK_TUPLE || v->u.seq.n > RAI_PK_MAX_DIMS) return 0;
    for (size_t i = 0; i < v->u.seq.n; i++) {
        const rai_pk_value *x = v->u.seq.v[i];
        if (x->kind != RAI_PK_INT || x->u.i < 0) return 0;
        out[i] = x->u.i;
    }
    *n = (int)v->u.seq.n;
    return 1;
}

/* torch._utils._rebuild_tensor (v1: storage, storage_offset, size, stride),
 * _v2 (+ requires_grad, backward_hooks[, metadata]) and _v3 (+ dtype
 * [, metadata]). */
static ra_status pk_rebuild(pk *ps, const rai_pk_value *fn, const rai_pk_value *args,
                            rai_pk_value **out) {
    const size_t n = args->u.seq.n;
    const rai_pk_gid id = fn->u.g.id;
    const int ok_n = id == RAI_PK_G_REBUILD_V1 ? n == 4
                   : id == RAI_PK_G_REBUILD_V2 ? n == 6 || n == 7
                                               : n == 7 || n == 8;
    if (!ok_n) return pk_bad(ps, "%s with %zu arguments", fn->u.g.name, n);
    rai_pk_tensor *t = pk_alloc(ps->d, sizeof *t);
    if (!t) return pk_nomem();
    memset(t, 0, sizeof *t);
    const rai_pk_value *storage = pk_arg(args, 0), *off = pk_arg(args, 1);
    int nd_stride = -1;
    if (storage->kind != RAI_PK_PERSID)
        return pk_bad(ps, "%s: the storage is a %s, not a persistent id", fn->u.g.name,
                      rai_pk_kind_name(storage->kind));
    if (off->kind != RAI_PK_INT || off->u.i < 0)
        return pk_bad(ps, "%s: the storage offset is not an integer >= 0", fn->u.g.name);
    if (!pk_dims(pk_arg(args, 2), t->shape, &t->ndim) ||
        !pk_dims(pk_arg(args, 3), t->stride, &nd_stride) || nd_stride != t->ndim)
        return pk_bad(ps, "%s: size and stride are not two tuples of as many integers >= 0 "
                      "(at most %d)", fn->u.g.name, RAI_PK_MAX_DIMS);
    if (id == RAI_PK_G_REBUILD_V3) {
        const rai_pk_value *dt = pk_arg(args, 6);
        if (dt->kind != RAI_PK_GLOBAL || dt->u.g.id != RAI_PK_G_DTYPE)
            return pk_bad(ps, "%s: argument 7 is not a torch dtype", fn->u.g.name);
        t->dtype = dt;
    }
    t->storage = storage;
    t->offset = off->u.i;
    ra_status s = pk_new(ps, RAI_PK_TENSOR, out);
    if (!s) (*out)->u.t = t;
    return s;
}

/* _codecs.encode(str[, encoding]): protocol 2's way to write bytes (latin-1
 * of the code points); another encoding leaves an opaque value. bytes()
 * (empty bytes) comes here too. */
static ra_status pk_encode(pk *ps, const rai_pk_value *fn, const rai_pk_value *args,
                           rai_pk_value **out) {
    const rai_pk_value *str = pk_arg(args, 0), *enc = pk_arg(args, 1);
    if (!str) return pk_new_str(ps, RAI_PK_BYTES, (const unsigned char *)"", 0, out);
    if (!str || str->kind != RAI_PK_STR || args->u.seq.n > 2 || (enc && enc->kind != RAI_PK_STR))
        return pk_bad(ps, "_codecs.encode with unexpected arguments");
    const char *e = enc ? enc->u.s.p : "utf-8";
    if (!strcmp(e, "utf-8") || !strcmp(e, "utf8"))
        return pk_new_str(ps, RAI_PK_BYTES, (const unsigned char *)str->u.s.p, str->u.s.n, out);
    if (strcmp(e, "latin1") && strcmp(e, "latin-1")) {
        ra_status s = pk_new(ps, RAI_PK_OPAQUE, out);
        if (!s) (*out)->u.g = fn->u.g;
        return s;
    }
    unsigned char *b = pk_alloc(ps->d, str->u.s.n + 1);
    if (!b) return pk_nomem();
    size_t k = 0;
    const unsigned char *p = (const unsigned char *)str->u.s.p;
    for (size_t i = 0; i < str->u.s.n; k++) {   /* valid UTF-8: one code point a step */
        if (p[i] < 0x80) b[k] = p[i++];
        else if (p[i] <= 0xC3) b[k] = (unsigned char)((p[i] & 3) << 6 | (p[i + 1] & 0x3F)), i += 2;
        else return pk_bad(ps, "_codecs.encode: a character beyond latin-1");
    }
    return pk_new_str(ps, RAI_PK_BYTES, b, k, out);
}

static ra_status pk_call(pk *ps, const rai_pk_value *fn, const rai_pk_value *args,
                         rai_pk_value **out);

/* torch._tensor._rebuild_from_type_v2(func, new_type, args, state): func(*args)
 * when new_type is torch.Tensor or Parameter (a subclass is refused when
 * its global is). */
static ra_status pk_from_type(pk *ps, const rai_pk_value *args, rai_pk_value **out) {
    const rai_pk_value *fn = pk_arg(args, 0), *type = pk_arg(args, 1), *a = pk_arg(args, 2);
    if (args->u.seq.n != 4 || fn->kind != RAI_PK_GLOBAL || type->kind != RAI_PK_GLOBAL ||
        a->kind != RAI_PK_TUPLE)
        return pk_bad(ps, "_rebuild_from_type_v2 with unexpected arguments");
    if (type->u.g.id != RAI_PK_G_TENSOR_CLASS && type->u.g.id != RAI_PK_G_PARAMETER_CLASS)
        return pk_bad(ps, "_rebuild_from_type_v2 of a '%s'", type->u.g.name);
    switch (fn->u.g.id) {   /* one level: func is a rebuilder, not this again */
    case RAI_PK_G_REBUILD_V1: case RAI_PK_G_REBUILD_V2: case RAI_PK_G_REBUILD_V3:
    case RAI_PK_G_REBUILD_PARAM: case RAI_PK_G_REBUILD_PARAM_STATE:
        return pk_call(ps, fn, a, out);
    default:
        return pk_bad(ps, "_rebuild_from_type_v2 calling '%s'", fn->u.g.name);
    }
}

/* REDUCE fn(*args) (and NEWOBJ cls(*args)) for an allowed fn. */
static ra_status pk_call(pk *ps, const rai_pk_value *fn, const rai_pk_value *args,
                         rai_pk_value **out) {
    if (fn->kind != RAI_PK_GLOBAL) return pk_bad(ps, "calling a %s", rai_pk_kind_name(fn->kind));
    if (args->kind != RAI_PK_TUPLE) return pk_bad(ps, "arguments are not a tuple");
    const rai_pk_value *a0 = pk_arg(args, 0);
    const size_t n = args->u.seq.n;
    ra_status s;
    switch (fn->u.g.id) {
    case RAI_PK_G_ORDERED_DICT:
        if (n) return pk_bad(ps, "OrderedDict with arguments");
        return pk_new(ps, RAI_PK_DICT, out);
    case RAI_PK_G_REBUILD_V1: case RAI_PK_G_REBUILD_V2: case RAI_PK_G_REBUILD_V3:
        return pk_rebuild(ps, fn, args, out);
    case RAI_PK_G_REBUILD_PARAM: case RAI_PK_G_REBUILD_PARAM_STATE: case RAI_PK_G_PARAMETER_CLASS:
        /* (data, requires_grad, hooks[, state]): the data is the tensor */
        if (!a0 || a0->kind != RAI_PK_TENSOR || n > 4)
            return pk_bad(ps, "%s of a %s", fn->u.g.name, a0 ? rai_pk_kind_name(a0->kind) : "nothing");
        *out = (rai_pk_value *)a0;
        return RA_OK;
    case RAI_PK_G_REBUILD_FROM_TYPE:
        return pk_from_type(ps, args, out);
    case RAI_PK_G_SIZE:
        if (n != 1 || a0->kind != RAI_PK_TUPLE) return pk_bad(ps, "torch.Size of a non-tuple");
        *out = (rai_pk_value *)a0;
        return RA_OK;
    case RAI_PK_G_SET:
        if (n > 1 || (a0 && a0->kind != RAI_PK_LIST && a0->kind != RAI_PK_TUPLE &&
                      a0->kind != RAI_PK_SET))
            return pk_bad(ps, "%s with unexpected arguments", fn->u.g.name);
        return pk_new_seq(ps, RAI_PK_SET, a0 ? a0->u.seq.v : NULL, a0 ? a0->u.seq.n : 0, out);
    case RAI_PK_G_ENCODE:
        return pk_encode(ps, fn, args, out);
    case RAI_PK_G_DATA:
        s = pk_new(ps, RAI_PK_OPAQUE, out);
        if (!s) (*out)->u.g = fn->u.g;
        return s;
    default:   /* classes and dtypes that are only referred to */
        return pk_bad(ps, "calling '%s' is not supported", fn->u.g.name);
    }
}

static ra_status pk_op_reduce(pk *ps) {
    rai_pk_value *args = NULL, *fn = NULL, *res = NULL;
    ra_status s = pk_pop(ps, &args);
    if (!s) s = pk_pop(ps, &fn);
    if (!s) s = pk_call(ps, fn, args, &res);
    return s ? s : pk_push(ps, res);
}

/* NEWOBJ cls.__new__(cls, *args) / NEWOBJ_EX (+ kwargs): made like a call. */
static ra_status pk_op_newobj(pk *ps, int ex) {
    rai_pk_value *kw = NULL, *args = NULL, *cls = NULL, *res = NULL;
    ra_status s = ex ? pk_pop(ps, &kw) : RA_OK;
    if (!s) s = pk_pop(ps, &args);
    if (!s) s = pk_pop(ps, &cls);
    if (s) return s;
    if (kw && (kw->kind != RAI_PK_DICT || kw->u.dict.n))
        return pk_bad(ps, "keyword arguments");
    if (cls->kind == RAI_PK_GLOBAL && cls->u.g.id == RAI_PK_G_ORDERED_DICT &&
        args->kind == RAI_PK_TUPLE && args->u.seq.n == 0)
        s = pk_new(ps, RAI_PK_DICT, &res);
    else if (cls->kind == RAI_PK_GLOBAL && (cls->u.g.id == RAI_PK_G_DATA ||
                                            cls->u.g.id == RAI_PK_G_PARAMETER_CLASS))
        s = pk_call(ps, cls, args, &res);
    else
        return pk_bad(ps, "creating a '%s' is not supported",
                      cls->kind == RAI_PK_GLOBAL ? cls->u.g.name : rai_pk_kind_name(cls->kind));
    return s ? s : pk_push(ps, res);
}

/* BUILD obj.__setstate__(state): the state of an OrderedDict (its
 * _metadata), a tensor or an opaque object is not needed, and dropped. */
static ra_status pk_op_build(pk *ps) {
    rai_pk_value *state = NULL, *obj = NULL;
    ra_status s = pk_pop(ps, &state);
    if (!s) s = pk_top(ps, &obj);
    if (s) return s;
    if (obj->kind == RAI_PK_DICT || obj->kind == RAI_PK_TENSOR || obj->kind == RAI_PK_OPAQUE)
        return RA_OK;
    return pk_bad(ps, "setting the state of a %s", rai_pk_kind_name(obj->kind));
}

/* ------------------------------------------------------------------------ */
/* Opcodes                                                                   */
/* ------------------------------------------------------------------------ */

/* Integers and floats. */
static ra_status pk_op_number(pk *ps) {
    uint64_t u = 0, n = 0;
    int64_t i;
    rai_pk_value *v = NULL;
    ra_status s;
    switch (ps->op) {
    case 'J': s = pk_field(ps, 4, &u), i = pk_signed(u, 4); break;
    case 'K': s = pk_field(ps, 1, &u), i = (int64_t)u; break;
    case 'M': s = pk_field(ps, 2, &u), i = (int64_t)u; break;
    case 'G':   /* big-endian IEEE double */
        if (!pk_has(ps, 8)) return pk_bad(ps, "the stream ends inside the opcode");
        for (int k = 0; k < 8; k++) u = u << 8 | ps->p[k];
        ps->p += 8;
        s = pk_new(ps, RAI_PK_FLOAT, &v);
        if (!s) memcpy(&v->u.f, &u, sizeof u);
        return s ? s : pk_push(ps, v);
    default:   /* LONG1, LONG4: a length, then that many bytes of two's complement */
        s = pk_field(ps, ps->op == 0x8a ? 1 : 4, &n);
        if (s) return s;
        if (ps->op == 0x8b && n > INT32_MAX) return pk_bad(ps, "a negative length");
        if (!pk_has(ps, n))
            return pk_bad(ps, "a length of %llu past the end", (unsigned long long)n);
        u = n <= 8 ? pk_le(ps->p, (int)n) : 0;
        ps->p += n;
        if (n > 8) {   /* beyond int64: kept as "an integer", without its value */
            s = pk_new(ps, RAI_PK_BIGINT, &v);
            return s ? s : pk_push(ps, v);
        }
        i = pk_signed(u, (int)n);
    }
    if (!s) s = pk_new_int(ps, i, &v);
    return s ? s : pk_push(ps, v);
}

/* INT and LONG, the decimal text of protocols 0 and 1 (which writes its
 * bools so: "I01" True, "I00" False; LONG ends in 'L'). */
static ra_status pk_op_text_int(pk *ps) {
    const size_t room = (size_t)(ps->end - ps->p);
    const unsigned char *nl = memchr(ps->p, '\n', room < 64 ? room : 64), *q = ps->p;
    if (!nl) return pk_bad(ps, "a number longer than 63 characters or not ended");
    ps->p = nl + 1;
    rai_pk_value *v = NULL;
    ra_status s;
    if (ps->op == 'I' && nl - q == 2 && q[0] == '0' && (q[1] == '0' || q[1] == '1')) {
        s = pk_new(ps, RAI_PK_BOOL, &v);
        if (!s) v->u.i = q[1] == '1';
        return s ? s : pk_push(ps, v);
    }
    const int neg = q < nl && *q == '-';
    q += neg;
    if (ps->op == 'L' && nl > q && nl[-1] == 'L') nl--;
    uint64_t u = 0;
    int big = 0;
    if (q == nl) return pk_bad(ps, "not a number");
    for (; q < nl; q++) {
        if (*q < '0' || *q > '9') return pk_bad(ps, "not a number");
        big |= u > (UINT64_MAX - 9) / 10;
        u = 10 * u + (unsigned)(*q - '0');
    }
    if (big || u > (uint64_t)INT64_MAX + neg) {
        s = pk_new(ps, RAI_PK_BIGINT, &v);
        return s ? s : pk_push(ps, v);
    }
    s = pk_new_int(ps, neg && u ? -(int64_t)(u - 1) - 1 : (int64_t)u, &v);
    return s ? s : pk_push(ps, v);
}

/* Strings and bytes: a length field of w bytes, then the bytes. */
static ra_status pk_op_string(pk *ps) {
    int w;
    rai_pk_kind kind = RAI_PK_STR;
    switch (ps->op) {
    case 'X': w = 4; break;
    case 0x8c: w = 1; break;
    case 0x8d: w = 8; break;
    case 'T': w = 4; break;   /* BINSTRING, SHORT_BINSTRING: str (torch.load's utf-8) */
    case 'U': w = 1; break;
    case 'B': w = 4, kind = RAI_PK_BYTES; break;
    case 'C': w = 1, kind = RAI_PK_BYTES; break;
    default: w = 8, kind = RAI_PK_BYTES; break;   /* BINBYTES8, BYTEARRAY8 */
    }
    uint64_t n = 0;
    ra_status s = pk_field(ps, w, &n);
    if (s) return s;
    if (ps->op == 'T' && n > INT32_MAX) return pk_bad(ps, "a negative length");
    if (!pk_has(ps, n)) return pk_bad(ps, "a length of %llu past the end", (unsigned long long)n);
    rai_pk_value *v = NULL;
    s = pk_new_str(ps, kind, ps->p, (size_t)n, &v);
    ps->p += n;
    return s ? s : pk_push(ps, v);
}

/* TUPLE, LIST, DICT, FROZENSET: a new container of the values since the mark. */
static ra_status pk_op_from_mark(pk *ps) {
    size_t start = 0;
    ra_status s = pk_pop_mark(ps, &start);
    if (s) return s;
    rai_pk_value **items = ps->stack + start, *v;
    const size_t n = ps->n - start;
    if (ps->op == 'd') {
        if (n % 2) return pk_bad(ps, "an odd number of values");
        s = pk_new(ps, RAI_PK_DICT, &v);
        for (size_t i = 0; !s && i < n; i += 2) s = pk_dict_add(ps, v, items[i], items[i + 1]);
    } else {
        s = pk_new_seq(ps, ps->op == 't' ? RAI_PK_TUPLE : ps->op == 'l' ? RAI_PK_LIST : RAI_PK_SET,
                       items, n, &v);
    }
    ps->n = start;
    return s ? s : pk_push(ps, v);
}

/* TUPLE1..3: a tuple of the top k values. */
static ra_status pk_op_tuple_n(pk *ps, size_t k) {
    if (ps->n - pk_frame(ps) < k) return pk_bad(ps, "the stack holds fewer than %zu values", k);
    rai_pk_value *v = NULL;
    ra_status s = pk_new_seq(ps, RAI_PK_TUPLE, ps->stack + ps->n - k, k, &v);
    ps->n -= k;
    return s ? s : pk_push(ps, v);
}

/* APPEND, SETITEM: one item into the container below it. */
static ra_status pk_op_add_one(pk *ps) {
    rai_pk_value *k = NULL, *v = NULL, *c = NULL;
    ra_status s = pk_pop(ps, &v);
    if (!s && ps->op == 's') s = pk_pop(ps, &k);
    if (!s) s = pk_top(ps, &c);
    if (s) return s;
    if (c->kind == RAI_PK_OPAQUE) return RA_OK;   /* a list or dict subclass: not read */
    if (ps->op == 'a' && c->kind == RAI_PK_LIST) return pk_seq_add(ps, c, v);
    if (ps->op == 's' && c->kind == RAI_PK_DICT) return pk_dict_add(ps, c, k, v);
    return pk_bad(ps, "adding to a %s", rai_pk_kind_name(c->kind));
}

/* APPENDS, SETITEMS, ADDITEMS: the items since the mark into the container below it. */
static ra_status pk_op_add_many(pk *ps) {
    size_t start = 0;
    rai_pk_value *c = NULL;
    ra_status s = pk_pop_mark(ps, &start);
    if (!s) s = pk_below(ps, start, &c);
    if (s) return s;
    rai_pk_value **items = ps->stack + start;
    const size_t n = ps->n - start;
    const rai_pk_kind want = ps->op == 'e' ? RAI_PK_LIST : ps->op == 'u' ? RAI_PK_DICT : RAI_PK_SET;
    if (c->kind != want && c->kind != RAI_PK_OPAQUE)
        return pk_bad(ps, "adding to a %s", rai_pk_kind_name(c->kind));
    if (ps->op == 'u' && n % 2) return pk_bad(ps, "an odd number of values");
    for (size_t i = 0; !s && c->kind != RAI_PK_OPAQUE && i < n; i += ps->op == 'u' ? 2 : 1)
        s = ps->op == 'u' ? pk_dict_add(ps, c, items[i], items[i + 1]) : pk_seq_add(ps, c, items[i]);
    ps->n = start;
    return s;
}

static ra_status pk_op_empty(pk *ps) {
    rai_pk_value *v = NULL;
    const rai_pk_kind k = ps->op == ')' ? RAI_PK_TUPLE : ps->op == ']' ? RAI_PK_LIST
                        : ps->op == '}' ? RAI_PK_DICT : ps->op == 'N' ? RAI_PK_NONE
                        : ps->op == 0x8f ? RAI_PK_SET : RAI_PK_BOOL;
    ra_status s = pk_new(ps, k, &v);
    if (!s && k == RAI_PK_BOOL) v->u.i = ps->op == 0x88;   /* NEWTRUE */
    return s ? s : pk_push(ps, v);
}

static ra_status pk_op_memo(pk *ps) {
    uint64_t idx = ps->memo_len;   /* MEMOIZE: the next index */
    ra_status s = RA_OK;
    switch (ps->op) {
    case 'q': case 'h': s = pk_field(ps, 1, &idx); break;
    case 'r': case 'j': s = pk_field(ps, 4, &idx); break;
    }
    if (s) return s;
    return ps->op == 'h' || ps->op == 'j' ? pk_memo_get(ps, idx) : pk_memo_put(ps, idx);
}

/* Stack shuffling: MARK, POP, POP_MARK, DUP. */
static ra_status pk_op_stack(pk *ps) {
    rai_pk_value *v = NULL;
    size_t start = 0;
    ra_status s;
    switch (ps->op) {
    case '(':
        if (ps->nmarks == RAI_PK_MAX_DEPTH)
            return pk_bad(ps, "marks nested deeper than %d (the limit)", RAI_PK_MAX_DEPTH);
        ps->marks[ps->nmarks++] = ps->n;
        return RA_OK;
    case '0':   /* as Python: with nothing since the mark, the mark goes */
        if (ps->n > pk_frame(ps)) return pk_pop(ps, &v);
        return pk_pop_mark(ps, &start);
    case '1':
        s = pk_pop_mark(ps, &start);
        if (!s) ps->n = start;
        return s;
    default:   /* DUP */
        s = pk_top(ps, &v);
        return s ? s : pk_push(ps, v);
    }
}

static ra_status pk_op_persid(pk *ps) {
    rai_pk_value *pid = NULL, *v = NULL;
    ra_status s = pk_pop(ps, &pid);
    if (!s) s = pk_new(ps, RAI_PK_PERSID, &v);
    if (s) return s;
    v->u.pid = pid;
    if ((s = pk_nest(ps, v, pid))) return s;
    return pk_push(ps, v);
}

/* PROTO and FRAME (a hint for buffered reading: its length is checked). */
static ra_status pk_op_header(pk *ps) {
    uint64_t u = 0;
    ra_status s = pk_field(ps, ps->op == 0x80 ? 1 : 8, &u);
    if (s) return s;
    const unsigned long long v = u;
    if (ps->op == 0x80 && u > 5) return pk_bad(ps, "protocol %llu (at most 5 is read)", v);
    if (ps->op == 0x95 && !pk_has(ps, u)) return pk_bad(ps, "a frame of %llu bytes past the end", v);
    return RA_OK;
}

/* Run one opcode; *done at STOP. */
static ra_status pk_step(pk *ps, int *done) {
    ps->at = (size_t)(ps->p - ps->buf);
    ps->op = *ps->p++;
    switch (ps->op) {
    case 0x80: case 0x95: return pk_op_header(ps);
    case '.': {
        rai_pk_value *v = NULL;
        ra_status s = pk_pop(ps, &v);
        if (!s) ps->d->root = v, *done = 1;
        return s;
    }
    case '(': case '0': case '1': case '2': return pk_op_stack(ps);
    case 'N': case 0x88: case 0x89: case ')': case ']': case '}': case 0x8f: return pk_op_empty(ps);
    case 'J': case 'K': case 'M': case 'G': case 0x8a: case 0x8b: return pk_op_number(ps);
    case 'I': case 'L': return pk_op_text_int(ps);
    case 'X': case 0x8c: case 0x8d: case 'T': case 'U': case 'B': case 'C': case 0x8e: case 0x96:
        return pk_op_string(ps);
    case 't': case 'l': case 'd': case 0x91: return pk_op_from_mark(ps);
    case 0x85: case 0x86: case 0x87: return pk_op_tuple_n(ps, (size_t)(ps->op - 0x84));
    case 'a': case 's': return pk_op_add_one(ps);
    case 'e': case 'u': case 0x90: return pk_op_add_many(ps);
    case 'q': case 'r': case 0x94: case 'h': case 'j': return pk_op_memo(ps);
    case 'c': return pk_op_global(ps);
    case 0x93: return pk_op_stack_global(ps);
    case 'R': return pk_op_reduce(ps);
    case 0x81: case 0x92: return pk_op_newobj(ps, ps->op == 0x92);
    case 'b': return pk_op_build(ps);
    case 'Q': return pk_op_persid(ps);
    }
    if (pk_opname(ps->op))
        return pk_bad(ps, "this opcode is not supported (torch.save writes protocol 2, which "
                      "does not use it)");
    return pk_bad(ps, "unknown opcode 0x%02x", (unsigned)ps->op);
}

static int pk_cmp_key(const void *a, const void *b) {
    const rai_pk_value *x = *(const rai_pk_value *const *)a, *y = *(const rai_pk_value *const *)b;
    const int c = memcmp(x->u.s.p, y->u.s.p, x->u.s.n < y->u.s.n ? x->u.s.n : y->u.s.n);
    return c ? c : (x->u.s.n > y->u.s.n) - (x->u.s.n < y->u.s.n);
}

/* No dict holds a string key twice: a Python dict cannot, and the first
 * and the last of two would name different values (the keys are sorted,
 * dict by dict, in one array as large as the largest dict). */
static ra_status pk_check_keys(pk *ps) {
    size_t most = 0;
    for (size_t i = 0; i < ps->ndicts; i++)
        if (ps->dicts[i]->u.dict.n > most) most = ps->dicts[i]->u.dict.n;
    const rai_pk_value **k = malloc((most + 1) * sizeof *k);
    if (!k) return pk_nomem();
    ra_status s = RA_OK;
    for (size_t i = 0; !s && i < ps->ndicts; i++) {
        const rai_pk_value *d = ps->dicts[i];
        size_t n = 0;
        for (size_t j = 0; j < d->u.dict.n; j++)
            if (d->u.dict.v[j].key->kind == RAI_PK_STR) k[n++] = d->u.dict.v[j].key;
        qsort(k, n, sizeof *k, pk_cmp_key);
        for (size_t j = 1; !s && j < n; j++)
            if (!pk_cmp_key(&k[j - 1], &k[j]))
                s = rai_fail(RA_ERR_FORMAT, "a dict holds the key '%.200s' twice (no Python dict "
                             "does)", k[j]->u.s.p);
    }
    free(k);
    return s;
}

ra_status rai_pk_parse(rai_pk_doc **out, const void *buf, size_t len) {
    if (!out || (!buf && len)) return rai_fail(RA_ERR_ARG, "rai_pk_parse: NULL argument");
    *out = NULL;
    if (len > RAI_PK_MAX_INPUT)
        return rai_fail(RA_ERR_FORMAT, "a pickle of %zu bytes (the limit is %zu)", len,
                        RAI_PK_MAX_INPUT);
    pk ps = {.buf = buf, .p = buf, .end = (const unsigned char *)buf + len, .cap = 64};
    ps.d = calloc(1, sizeof *ps.d);
    ps.stack = malloc(ps.cap * sizeof *ps.stack);   /* never NULL: items are stack + i */
    if (!ps.d || !ps.stack) {
        free(ps.d), free(ps.stack);
        return pk_nomem();
    }
    ra_status s = RA_OK;
    int done = 0;
    while (!s && !done) {
        if (ps.p == ps.end) {
            ps.at = len, ps.op = '.';
            s = pk_bad(&ps, "the stream ends before STOP");
        } else {
            s = pk_step(&ps, &done);
        }
    }
    if (!s) s = pk_check_keys(&ps);
    free(ps.stack);
    free(ps.memo);
    free(ps.dicts);
    if (s) {
        rai_pk_free(ps.d);
        return s;
    }
    *out = ps.d;
    return RA_OK;
}
