/* pickle.h - a restricted unpickler (src/io/pickle.c): a Python pickle
 * stream, as torch.save writes it (protocol 2, or 3 to 5 when asked), read
 * into a tree of values. Nothing is imported or called: a GLOBAL names one
 * of an allowlist of functions and classes (every other one is refused), and
 * REDUCE / NEWOBJ / BUILD are interpreted for those alone: OrderedDict()
 * makes a dict, the torch._utils tensor rebuilders a tensor record, the data
 * classes checkpoints hold beside their weights (argparse.Namespace, numpy
 * scalars, ...) an opaque value that is never looked into.
 *
 * Every value lives in the document (rai_pk_doc) until rai_pk_free; a value
 * the stream refers to twice (its memo) is one value with two parents, so
 * walks over the tree must bound their depth (cycles are possible). */
#ifndef RA_IO_PICKLE_H
#define RA_IO_PICKLE_H

#include "base/internal.h"

/* Limits (docs/reference.md, sections 2 and 7). A stream past one is
 * refused with the limit named; lengths in the stream are also checked
 * against the bytes that remain. */
#define RAI_PK_MAX_INPUT ((size_t)1 << 30)   /* bytes of one stream */
#define RAI_PK_MAX_VALUES ((size_t)1 << 23)  /* values made from one stream */
#define RAI_PK_MAX_MEMO ((size_t)1 << 22)    /* memo indices 0 .. this - 1 */
#define RAI_PK_MAX_STACK ((size_t)1 << 20)   /* values on the stack at once */
#define RAI_PK_MAX_DEPTH 256                 /* nesting of values, and of marks */
#define RAI_PK_MAX_ITEMS ((size_t)1 << 24)   /* items of one container */
#define RAI_PK_MAX_STR ((size_t)1 << 28)     /* bytes of one string */
#define RAI_PK_MAX_NAME 256                  /* bytes of a global's module or name */
#define RAI_PK_MAX_DIMS 32                   /* dimensions of a tensor record */

typedef enum rai_pk_kind {
    RAI_PK_NONE,
    RAI_PK_BOOL,    /* u.i: 0 or 1 */
    RAI_PK_INT,     /* u.i */
    RAI_PK_BIGINT,  /* an integer beyond int64 (its value is not kept) */
    RAI_PK_FLOAT,   /* u.f */
    RAI_PK_STR,     /* u.s: valid UTF-8, NUL-terminated (may hold NULs) */
    RAI_PK_BYTES,   /* u.s */
    RAI_PK_TUPLE,   /* u.seq */
    RAI_PK_LIST,    /* u.seq */
    RAI_PK_SET,     /* u.seq (set and frozenset; duplicates are not merged) */
    RAI_PK_DICT,    /* u.dict: pairs in order; no string key twice (other keys may be) */
    RAI_PK_GLOBAL,  /* u.g: a reference to an allowed function or class */
    RAI_PK_OPAQUE,  /* u.g: an object of an allowed data class, not read */
    RAI_PK_TENSOR,  /* u.t: a tensor rebuilt by torch._utils */
    RAI_PK_PERSID,  /* u.pid: a persistent id (a torch storage) */
} rai_pk_kind;

/* What an allowed global is (u.g.id). */
typedef enum rai_pk_gid {
    RAI_PK_G_ORDERED_DICT = 1,   /* collections.OrderedDict */
    RAI_PK_G_REBUILD_V1,         /* torch._utils._rebuild_tensor */
    RAI_PK_G_REBUILD_V2,         /* torch._utils._rebuild_tensor_v2 */
    RAI_PK_G_REBUILD_V3,         /* torch._utils._rebuild_tensor_v3 */
    RAI_PK_G_REBUILD_PARAM,      /* torch._utils._rebuild_parameter */
    RAI_PK_G_REBUILD_PARAM_STATE,/* torch._utils._rebuild_parameter_with_state */
    RAI_PK_G_REBUILD_FROM_TYPE,  /* torch._tensor._rebuild_from_type_v2 */
    RAI_PK_G_TENSOR_CLASS,       /* torch.Tensor */
    RAI_PK_G_PARAMETER_CLASS,    /* torch.nn.parameter.Parameter */
    RAI_PK_G_STORAGE,            /* torch.FloatStorage, ...: u.g.dtype */
    RAI_PK_G_DTYPE,              /* torch.float32, ...: u.g.dtype */
    RAI_PK_G_SIZE,               /* torch.Size: a tuple */
    RAI_PK_G_SET,                /* builtins.set, builtins.frozenset */
    RAI_PK_G_ENCODE,             /* _codecs.encode: bytes from a str */
    RAI_PK_G_DATA,               /* a data class: its objects are opaque */
} rai_pk_gid;

typedef struct rai_pk_value rai_pk_value;

/* A tensor as torch._utils._rebuild_tensor* describe it: a view of
 * storage (a persistent id) of shape and stride (in elements) from offset
 * (in elements). */
typedef struct rai_pk_tensor {
    const rai_pk_value *storage;   /* RAI_PK_PERSID */
    int64_t offset;                /* >= 0 */
    int ndim;                      /* 0 .. RAI_PK_MAX_DIMS */
    int64_t shape[RAI_PK_MAX_DIMS];   /* >= 0 */
    int64_t stride[RAI_PK_MAX_DIMS];  /* >= 0 */
    const rai_pk_value *dtype;     /* _rebuild_tensor_v3's dtype (RAI_PK_G_DTYPE), else NULL */
} rai_pk_tensor;

typedef struct rai_pk_pair {
    rai_pk_value *key, *value;
} rai_pk_pair;

struct rai_pk_value {
    rai_pk_kind kind;
    int depth;          /* nesting below this value when it was built */
    unsigned mark;      /* 0 when parsed; for walks over the tree to tell the
                         * values they saw (a value may have several parents) */
    size_t tensors;     /* containers: how many of the items (a dict's values) are tensors */
    union {
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s;
        struct { rai_pk_value **v; size_t n, cap; } seq;
        struct { rai_pk_pair *v; size_t n, cap; } dict;
        struct {
            const char *name;    /* "module.name" (for opaque values: the class's) */
            rai_pk_gid id;
            ra_dtype dtype;      /* storage classes and dtypes: RA_DTYPE_INVALID if unread */
        } g;
        rai_pk_tensor *t;
        const rai_pk_value *pid;
    } u;
};

typedef struct rai_pk_doc rai_pk_doc;

/* Read the pickle stream buf (len bytes; up to its STOP opcode) into a
 * document. RA_ERR_FORMAT with the reason (a refused global, a limit, a
 * malformed stream: "byte N: ..."), RA_ERR_NOMEM. */
ra_status rai_pk_parse(rai_pk_doc **out, const void *buf, size_t len);
/* The value the stream ends with. */
const rai_pk_value *rai_pk_root(const rai_pk_doc *d);
/* How many values the stream made. */
size_t rai_pk_count(const rai_pk_doc *d);
void rai_pk_free(rai_pk_doc *d);

/* The value of the last pair of dict d whose key is the string key, or
 * NULL (also when d is not a dict). */
const rai_pk_value *rai_pk_dict_get(const rai_pk_value *d, const char *key);
/* "dict", "int", ... */
const char *rai_pk_kind_name(rai_pk_kind k);

#endif
