/* fuzz_pickle.c - libFuzzer harness: the restricted unpickler
 * (src/io/pickle.c) on any bytes, then a walk over what it accepted: every
 * value reached through the containers once (the memo shares values, and
 * a stream can make a container hold itself), each string NUL-terminated,
 * each tensor's storage a persistent id. */
#include "io/pickle.h"

#include <stdint.h>
#include <stdlib.h>

static size_t seen;

/* Visit v and below, depth-first, each value once, to a bounded depth
 * (values are built at most RAI_PK_MAX_DEPTH deep, but a memoized
 * container filled after it was nested makes its parents deeper). */
static void walk(const rai_pk_value *v, int depth) {
    if (depth > 4 * RAI_PK_MAX_DEPTH || v->mark) return;
    ((rai_pk_value *)v)->mark = 1;
    seen++;
    switch (v->kind) {
    case RAI_PK_TUPLE: case RAI_PK_LIST: case RAI_PK_SET:
        for (size_t i = 0; i < v->u.seq.n; i++) walk(v->u.seq.v[i], depth + 1);
        break;
    case RAI_PK_DICT:
        for (size_t i = 0; i < v->u.dict.n; i++) {
            walk(v->u.dict.v[i].key, depth + 1);
            walk(v->u.dict.v[i].value, depth + 1);
        }
        break;
    case RAI_PK_STR: case RAI_PK_BYTES:
        if (v->u.s.p[v->u.s.n] != 0) abort();
        break;
    case RAI_PK_TENSOR:
        if (v->u.t->storage->kind != RAI_PK_PERSID || v->u.t->ndim > RAI_PK_MAX_DIMS) abort();
        walk(v->u.t->storage, depth + 1);
        break;
    case RAI_PK_PERSID:
        walk(v->u.pid, depth + 1);
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rai_pk_doc *d = NULL;
    if (rai_pk_parse(&d, data, size) != RA_OK) return 0;
    seen = 0;
    (void)rai_pk_dict_get(rai_pk_root(d), "state_dict");
    walk(rai_pk_root(d), 0);
    if (seen > rai_pk_count(d)) abort();
    rai_pk_free(d);
    return 0;
}
