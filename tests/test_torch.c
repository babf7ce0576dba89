/* test_torch.c - PyTorch checkpoints (src/io/torch.c) and the restricted
 * unpickler under them (src/io/pickle.c), without PyTorch: checkpoints that
 * torch.save wrote (tools/make_torch_fixtures.py) read exactly as the
 * safetensors files the same script wrote, tensors of the file read in
 * place; hand-made refusals, each with its reason; the values of one object
 * pickled with protocols 1 to 5; opcodes one by one; every prefix and byte
 * flip of a checkpoint refused or read without a crash.
 *   test_torch FIXTURES */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "relattn.h"

#include "io/pickle.h"
#include "io/tensorfile.h"
#include "io/torch.h"

#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static const char *fx;   /* the fixtures directory */

static unsigned char *slurp(const char *name, size_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", fx, name);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return NULL;
    unsigned char *b = malloc(1 << 20);
    *n = fread(b, 1, 1 << 20, f);
    fclose(f);
    return b;
}

/* The bytes of tensor t of f, its parts concatenated (malloc'ed). */
static unsigned char *tensor_bytes(const ra_st_file *f, const ra_st_tensor *t) {
    const rai_st_part *parts;
    const int n = rai_st_parts(f, t, &parts);
    unsigned char *b = malloc(t->nbytes + 1), *q = b;
    for (int i = 0; i < n; i++) {
        if (parts[i].nbytes) memcpy(q, parts[i].p, parts[i].nbytes);
        q += parts[i].nbytes;
    }
    CHECK((size_t)(q - b) == t->nbytes, "%s: parts hold %zu bytes of %zu", t->name,
          (size_t)(q - b), t->nbytes);
    return b;
}

/* Tensors gathered from a strided view; every other one must be a byte
 * range of the checkpoint file itself. */
static int gathered(const char *name) {
    static const char *const g[] = {"transposed", "column", "step", "expanded", "permuted"};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        if (!strcmp(name, g[i])) return 1;
    return 0;
}

/* got must hold exp's tensors exactly: names, dtypes, shapes, bytes; read
 * through ra_st_read_* too. pth: the file got was read from (NULL: memory). */
static void compare(const char *what, const ra_st_file *got, const ra_st_file *exp, const char *pth) {
    CHECK(ra_st_count(got) == ra_st_count(exp), "%s: %d tensors, expected %d", what,
          ra_st_count(got), ra_st_count(exp));
    int fd = pth ? open(pth, O_RDONLY) : -1;
    for (int i = 0; i < ra_st_count(exp); i++) {
        const ra_st_tensor *e = ra_st_at(exp, i), *g = ra_st_find(got, e->name);
        CHECK(g != NULL, "%s: no tensor '%s'", what, e->name);
        if (!g) continue;
        CHECK(g->dtype == e->dtype && g->ndim == e->ndim && g->numel == e->numel &&
              !memcmp(g->shape, e->shape, sizeof(int64_t) * (size_t)e->ndim),
              "%s: '%s' is %s of %d dims, expected %s of %d", what, e->name,
              rai_st_dtype_name(g->dtype), g->ndim, rai_st_dtype_name(e->dtype), e->ndim);
        if (g->nbytes != e->nbytes) continue;
        unsigned char *b = tensor_bytes(got, g);
        CHECK(!memcmp(b, e->data, e->nbytes), "%s: '%s' differs", what, e->name);
        free(b);
        const rai_st_part *parts;
        const int np = rai_st_parts(got, g, &parts);
        CHECK(np == 1, "%s: '%s' has %d parts", what, e->name, np);
        if (pth && np == 1) {   /* in place (the file's own bytes at that offset), or gathered */
            CHECK((parts[0].fd >= 0) == !gathered(e->name), "%s: '%s': part fd %d", what,
                  e->name, parts[0].fd);
            unsigned char *c = malloc(e->nbytes + 1);
            if (parts[0].fd >= 0 && e->nbytes)
                CHECK(pread(fd, c, e->nbytes, (off_t)parts[0].off) == (ssize_t)e->nbytes &&
                      !memcmp(c, e->data, e->nbytes), "%s: '%s' at offset %lld", what, e->name,
                      (long long)parts[0].off);
            free(c);
        }
        const int fl = e->dtype == RA_DTYPE_F32 || e->dtype == RA_DTYPE_F16 ||
                       e->dtype == RA_DTYPE_BF16 || e->dtype == RA_DTYPE_F64;
        const size_t k = (size_t)(e->numel ? e->numel : 1);
        void *x = malloc(8 * k), *y = malloc(8 * k);
        ra_status s1 = fl ? ra_st_read_f32(x, got, g) : ra_st_read_i64(x, got, g);
        ra_status s2 = fl ? ra_st_read_f32(y, exp, e) : ra_st_read_i64(y, exp, e);
        CHECK(!s1 && !s2 && !memcmp(x, y, (fl ? 4 : 8) * (size_t)e->numel),
              "%s: '%s' read back differs (%s)", what, e->name, ra_last_error());
        free(x), free(y);
    }
    if (fd >= 0) close(fd);
}

static void test_cases(void) {
    char path[1024], line[1024];
    snprintf(path, sizeof path, "%s/pt_cases.txt", fx);
    FILE *list = fopen(path, "r");
    CHECK(list != NULL, "cannot open %s", path);
    int n = 0;
    while (list && fgets(line, sizeof line, list)) {
        char file[256], key[256], want[256], expf[256], found[256] = "?";
        if (sscanf(line, "%255[^\t]\t%255[^\t]\t%255[^\t]\t%255[^\t\n]", file, key, want, expf) != 4)
            continue;
        const char *k = strcmp(key, "-") ? key : NULL, *w = strcmp(want, "-") ? want : "";
        char pth[1024], ep[1024], what[600];
        snprintf(pth, sizeof pth, "%s/%s", fx, file);
        snprintf(ep, sizeof ep, "%s/%s", fx, expf);
        snprintf(what, sizeof what, "%s (key %s)", file, key);
        ra_st_file *exp = NULL, *got = NULL, *mem = NULL;
        CHECK(ra_st_open(&exp, ep) == RA_OK, "%s: %s", ep, ra_last_error());
        ra_status s = rai_torch_open(&got, pth, k, found, sizeof found, NULL);
        CHECK(s == RA_OK, "%s: %s", what, ra_last_error());
        if (!s) CHECK(!strcmp(found, w), "%s: found '%s', expected '%s'", what, found, w);
        if (!s && exp) compare(what, got, exp, pth);
        size_t len = 0;
        unsigned char *bytes = slurp(file, &len);
        s = rai_torch_open_memory(&mem, bytes, len, k, NULL, 0);
        free(bytes);   /* the file keeps its own copy */
        CHECK(s == RA_OK, "%s in memory: %s", what, ra_last_error());
        if (!s && exp) compare(what, mem, exp, NULL);
        ra_st_close(exp), ra_st_close(got), ra_st_close(mem);
        n++;
    }
    if (list) fclose(list);
    CHECK(n >= 17, "only %d cases", n);
}

static void test_refusals(void) {
    char path[1024], line[1024];
    snprintf(path, sizeof path, "%s/pt_refusals.txt", fx);
    FILE *list = fopen(path, "r");
    CHECK(list != NULL, "cannot open %s", path);
    int n = 0;
    while (list && fgets(line, sizeof line, list)) {
        char file[256], key[256], text[512];
        if (sscanf(line, "%255[^\t]\t%255[^\t]\t%511[^\n]", file, key, text) != 3) continue;
        const char *k = strcmp(key, "-") ? key : NULL;
        char pth[1024];
        snprintf(pth, sizeof pth, "%s/%s", fx, file);
        ra_st_file *f = NULL;
        ra_status s = rai_torch_open(&f, pth, k, NULL, 0, NULL);
        CHECK(s == RA_ERR_FORMAT && !f && strstr(ra_last_error(), text) &&
              strstr(ra_last_error(), file),
              "%s (key %s): status %d, reason '%s', expected one with '%s'", file, key, (int)s,
              ra_last_error(), text);
        size_t len = 0;
        unsigned char *bytes = slurp(file, &len);
        s = rai_torch_open_memory(&f, bytes, len, k, NULL, 0);
        free(bytes);
        CHECK(s == RA_ERR_FORMAT && strstr(ra_last_error(), text),
              "%s in memory: status %d, reason '%s'", file, (int)s, ra_last_error());
        n++;
    }
    if (list) fclose(list);
    CHECK(n >= 31, "only %d refusals", n);
}

/* ---- the unpickler ---- */

static const rai_pk_value *item(const rai_pk_value *v, size_t i) {
    return v && (v->kind == RAI_PK_LIST || v->kind == RAI_PK_TUPLE || v->kind == RAI_PK_SET) &&
                   i < v->u.seq.n ? v->u.seq.v[i] : NULL;
}

static int is_int(const rai_pk_value *v, int64_t i) { return v && v->kind == RAI_PK_INT && v->u.i == i; }
static int is_str(const rai_pk_value *v, const char *s) {
    return v && v->kind == RAI_PK_STR && v->u.s.n == strlen(s) && !memcmp(v->u.s.p, s, v->u.s.n);
}

/* tools/make_torch_fixtures.py's values(), with each protocol. */
static void test_values(void) {
    static const int64_t ints[] = {0, 1, -1, 255, 256, 65535, 65536, -2147483648LL, 2147483647,
                                   2147483648LL, INT64_MAX, INT64_MIN};
    for (int p = 1; p <= 5; p++) {
        char name[64];
        snprintf(name, sizeof name, "pt_values_p%d.pkl", p);
        size_t len = 0;
        unsigned char *b = slurp(name, &len);
        rai_pk_doc *d = NULL;
        ra_status s = rai_pk_parse(&d, b, len);
        CHECK(s == RA_OK, "%s: %s", name, ra_last_error());
        const rai_pk_value *r = rai_pk_root(d), *v;
        CHECK(r && r->kind == RAI_PK_DICT && r->u.dict.n == 16, "%s: root", name);
        v = rai_pk_dict_get(r, "ints");
        CHECK(v && v->kind == RAI_PK_LIST && v->u.seq.n == 12, "%s: ints", name);
        for (size_t i = 0; i < 12; i++)
            CHECK(is_int(item(v, i), ints[i]), "%s: ints[%zu]", name, i);
        v = rai_pk_dict_get(r, "big");
        CHECK(v && v->kind == RAI_PK_BIGINT, "%s: 2**70", name);
        v = rai_pk_dict_get(r, "floats");
        CHECK(item(v, 3) && item(v, 0)->u.f == 0.1 && item(v, 1)->u.f == -2.5 &&
              isinf(item(v, 2)->u.f) && item(v, 3)->u.f == 1e-310, "%s: floats", name);
        CHECK(is_str(rai_pk_dict_get(r, "str"), "h\xc3\xa9llo \xe2\x9c\x93"), "%s: str", name);
        CHECK(is_str(rai_pk_dict_get(r, "empty"), ""), "%s: empty str", name);
        v = rai_pk_dict_get(r, "bytes");
        CHECK(v && v->kind == RAI_PK_BYTES && v->u.s.n == 3 && !memcmp(v->u.s.p, "\0\1\xff", 3),
              "%s: bytes (%s)", name, v ? rai_pk_kind_name(v->kind) : "absent");
        v = rai_pk_dict_get(r, "tuple");
        CHECK(v && v->kind == RAI_PK_TUPLE && is_int(item(v, 0), 1) && is_int(item(item(v, 1), 1), 3) &&
              item(v, 2)->kind == RAI_PK_TUPLE && !item(v, 2)->u.seq.n, "%s: tuple", name);
        v = rai_pk_dict_get(r, "none");
        CHECK(v && v->kind == RAI_PK_NONE, "%s: None", name);
        v = rai_pk_dict_get(r, "bools");
        CHECK(item(v, 1) && item(v, 0)->kind == RAI_PK_BOOL && item(v, 0)->u.i == 1 &&
              item(v, 1)->u.i == 0, "%s: bools", name);
        CHECK(is_int(item(rai_pk_dict_get(r, "set"), 0), 1), "%s: set", name);
        CHECK(is_int(item(rai_pk_dict_get(r, "frozenset"), 0), 2), "%s: frozenset", name);
        CHECK(is_int(rai_pk_dict_get(rai_pk_dict_get(r, "od"), "a"), 1), "%s: OrderedDict", name);
        CHECK(is_int(item(item(rai_pk_dict_get(rai_pk_dict_get(r, "nested"), "k"), 0), 0), 1),
              "%s: nested", name);
        v = rai_pk_dict_get(r, "shared");   /* one list, memoized, twice */
        CHECK(item(v, 1) && item(v, 0) == item(v, 1) && is_int(item(item(v, 0), 0), 7),
              "%s: shared", name);
        const rai_pk_pair *last = &r->u.dict.v[15], *int_key = &r->u.dict.v[14];
        CHECK(is_int(int_key->key, 5) && is_str(int_key->value, "an int key"), "%s: int key", name);
        CHECK(last->key->kind == RAI_PK_TUPLE && is_int(item(last->key, 1), 2), "%s: tuple key", name);
        /* every prefix is refused (no STOP), none crashes */
        for (size_t k = 0; k < len; k++) {
            rai_pk_doc *t = NULL;
            CHECK(rai_pk_parse(&t, b, k) == RA_ERR_FORMAT && !t, "%s: prefix of %zu bytes", name, k);
        }
        rai_pk_free(d);
        free(b);
    }
}

/* Parse n bytes of p: the root, or NULL (the reason in ra_last_error). */
static rai_pk_doc *doc;
static const rai_pk_value *parse(const char *p, size_t n) {
    rai_pk_free(doc);
    doc = NULL;
    return rai_pk_parse(&doc, p, n) == RA_OK ? rai_pk_root(doc) : NULL;
}
#define PARSE(lit) parse(lit, sizeof lit - 1)
#define REFUSED(lit, text)                                                      \
    CHECK(!PARSE(lit) && strstr(ra_last_error(), text), "%s: '%s', expected '%s'", #lit, \
          ra_last_error(), text)

#define STORAGE "((X\x07\0\0\0storagectorch\nFloatStorage\nX\x01\0\0\0" "0X\x03\0\0\0cpuK\x06tQ"

static void test_opcodes(void) {
    const rai_pk_value *v;
    /* stack shuffling: DUP, POP, POP_MARK; LIST and DICT from a mark */
    v = PARSE("\x80\x02K\x01\x32\x86(K\x05K\x06\x31" "0(K\x07l.");
    CHECK(v && v->kind == RAI_PK_LIST && is_int(item(v, 0), 7), "POP_MARK, POP, LIST: %s", ra_last_error());
    v = PARSE("(t.");   /* a container from a mark before anything was pushed (found by fuzz_pickle) */
    CHECK(v && v->kind == RAI_PK_TUPLE && v->u.seq.n == 0, "empty TUPLE first: %s", ra_last_error());
    v = PARSE("\x80\x02K\x01\x32\x86.");
    CHECK(is_int(item(v, 0), 1) && item(v, 0) == item(v, 1), "DUP: %s", ra_last_error());
    v = PARSE("(X\x01\0\0\0aK\x02" "d.");
    CHECK(is_int(rai_pk_dict_get(v, "a"), 2), "DICT: %s", ra_last_error());
    /* the wide and rare forms of numbers and strings */
    v = PARSE("(\x8b\x03\0\0\0\xff\xff\x7f\x8a\x00\x8a\x01\x80J\xfe\xff\xff\xfft.");
    CHECK(is_int(item(v, 0), 0x7fffff) && is_int(item(v, 1), 0) && is_int(item(v, 2), -128) &&
          is_int(item(v, 3), -2), "LONG4, LONG1, BININT: %s", ra_last_error());
    v = PARSE("\x8d\x02\0\0\0\0\0\0\0hi\x8e\x01\0\0\0\0\0\0\0zU\x02ok\x87.");
    CHECK(is_str(item(v, 0), "hi") && item(v, 1)->kind == RAI_PK_BYTES && is_str(item(v, 2), "ok"),
          "BINUNICODE8, BINBYTES8, SHORT_BINSTRING: %s", ra_last_error());
    v = PARSE("\x95\x05\0\0\0\0\0\0\0\x96\x00\0\0\0\0\0\0\0.");
    CHECK(v && v->kind == RAI_PK_BYTES && v->u.s.n == 0, "FRAME, BYTEARRAY8: %s", ra_last_error());
    v = PARSE("\x80\x02X\x03\0\0\0\xc3\xa9\x41X\x06\0\0\0latin1\x86q\0c_codecs\nencode\nh\0R.");
    CHECK(v && v->kind == RAI_PK_BYTES && v->u.s.n == 2 && !memcmp(v->u.s.p, "\xe9\x41", 2),
          "_codecs.encode latin1: %s", ra_last_error());
    /* data classes: opaque, their state dropped */
    v = PARSE("\x80\x02" "cargparse\nNamespace\n)\x81}X\x01\0\0\0aK\x01sb.");
    CHECK(v && v->kind == RAI_PK_OPAQUE && !strcmp(v->u.g.name, "argparse.Namespace"),
          "NEWOBJ, BUILD: %s", ra_last_error());
    v = PARSE("\x80\x04\x8c\x08" "argparse\x8c\tNamespace\x93)}\x92.");
    CHECK(v && v->kind == RAI_PK_OPAQUE, "STACK_GLOBAL, NEWOBJ_EX: %s", ra_last_error());
    v = PARSE("ctorch\nSize\nK\x02K\x03\x86\x85R.");
    CHECK(v && v->kind == RAI_PK_TUPLE && is_int(item(v, 1), 3), "torch.Size: %s", ra_last_error());
    /* tensors: v2 inside _rebuild_from_type_v2 (a Parameter), v3 with its dtype */
    REFUSED("ctorch.nn\nParameter\n.", "refusing to load global 'torch.nn.Parameter'");
    v = PARSE("\x80\x02" "ctorch._tensor\n_rebuild_from_type_v2\n("
              "ctorch._utils\n_rebuild_tensor_v2\nctorch.nn.parameter\nParameter\n"
              STORAGE "K\x01K\x02K\x03\x86K\x03K\x01\x86\x89}t}tR.");
    CHECK(v && v->kind == RAI_PK_TENSOR && v->u.t->offset == 1 && v->u.t->ndim == 2 &&
          v->u.t->shape[1] == 3 && v->u.t->stride[0] == 3, "_rebuild_from_type_v2: %s", ra_last_error());
    v = PARSE("\x80\x02" "ctorch._utils\n_rebuild_tensor_v3\n"
              STORAGE "K\0K\x02\x85K\x01\x85\x89}ctorch\nbfloat16\ntR.");
    CHECK(v && v->kind == RAI_PK_TENSOR && v->u.t->dtype && v->u.t->dtype->u.g.dtype == RA_DTYPE_BF16,
          "_rebuild_tensor_v3: %s", ra_last_error());

    /* refusals */
    REFUSED("cbuiltins\neval\n.", "refusing to load global 'builtins.eval'");
    REFUSED("c__builtin__\neval\n.", "refusing to load global 'builtins.eval'");
    REFUSED("ctorch._utils\n_rebuild_qtensor\n.", "'torch._utils._rebuild_qtensor'");
    REFUSED("\x80\x06N.", "protocol 6");
    REFUSED("N\xff.", "unknown opcode 0xff");
    v = PARSE("(I01\nI00\nI-7\nL-9223372036854775808L\nI99999999999999999999\nt.");
    CHECK(item(v, 4) && item(v, 0)->kind == RAI_PK_BOOL && item(v, 0)->u.i == 1 &&
          item(v, 1)->kind == RAI_PK_BOOL && !item(v, 1)->u.i && is_int(item(v, 2), -7) &&
          is_int(item(v, 3), INT64_MIN) && item(v, 4)->kind == RAI_PK_BIGINT,
          "INT, LONG (protocol 1): %s", ra_last_error());
    REFUSED("I1x\n.", "(INT): not a number");
    REFUSED("p0\n.", "(PUT): this opcode is not supported");
    REFUSED("\x97.", "(NEXT_BUFFER): this opcode is not supported");
    REFUSED("R.", "(REDUCE): the stack is empty");
    REFUSED("J\x01\x02", "(BININT): the stream ends inside the opcode");
    REFUSED("X\x05\0\0\0abc.", "(BINUNICODE): a length of 5 past the end");
    REFUSED("X\x01\0\0\0\xff.", "not UTF-8");
    REFUSED("N", "the stream ends before STOP");
    REFUSED("", "the stream ends before STOP");
    REFUSED("]Nb.", "(BUILD): setting the state of a list");
    REFUSED(")Na.", "(APPEND): adding to a tuple");
    REFUSED("}]Ns.", "unhashable");
    /* a key twice (found by fuzz_torch: the first value was chosen, the last named) */
    REFUSED("(X\x01\0\0\0aK\x01X\x01\0\0\0aK\x02" "d.", "a dict holds the key 'a' twice");
    REFUSED("ctorch\nFloatStorage\n)R.", "calling 'torch.FloatStorage' is not supported");
    REFUSED("ctorch\nfloat32\n)\x81.", "creating a 'torch.float32' is not supported");
    REFUSED("h\x00.", "memo index 0 was never set");
    REFUSED("Nr\xff\xff\xff\xff.", "memo index 4294967295");
    REFUSED("K\x01K\x02\x93.", "module and name are not strings");
    REFUSED("((e.", "no container below the mark");
    REFUSED("ctorch._utils\n_rebuild_tensor_v2\n(NK\0)))\x89}tR.", "not a persistent id");
    REFUSED("ctorch._utils\n_rebuild_tensor_v2\n" STORAGE "K\0K\x02\x85)\x89}tR.",
            "size and stride");
    REFUSED("ctorch._utils\n_rebuild_tensor_v2\n" STORAGE "J\xff\xff\xff\xffK\x02\x85K\x01\x85\x89}tR.",
            "storage offset");
    REFUSED("ctorch._tensor\n_rebuild_from_type_v2\n(cargparse\nNamespace\nctorch\nTensor\n)}tR.",
            "_rebuild_from_type_v2 calling 'argparse.Namespace'");
    REFUSED("ccollections\nOrderedDict\n(K\x01tR.", "OrderedDict with arguments");
    REFUSED("(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
            "(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
            "(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
            "(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
            "N.", "marks nested deeper than 256");
    /* the stack limit: a million and one Nones */
    const size_t many = RAI_PK_MAX_STACK + 2;
    char *nones = malloc(many);
    memset(nones, 'N', many - 1);
    nones[many - 1] = '.';
    CHECK(!parse(nones, many) && strstr(ra_last_error(), "values on the stack (the limit)"),
          "stack limit: %s", ra_last_error());
    free(nones);
    rai_pk_free(doc);
    doc = NULL;
}

/* ---- the archive ---- */

/* Every prefix of a checkpoint is refused, and every byte flip is refused
 * or read (a flip in a storage changes a value, not the structure). */
static void test_damage(void) {
    size_t len = 0;
    unsigned char *b = slurp("pt_basic.pth", &len);
    int refused = 0, read = 0;
    for (size_t k = 0; b && k < len; k++) {
        ra_st_file *f = NULL;
        ra_status s = rai_torch_open_memory(&f, b, k, NULL, NULL, 0);
        CHECK(s == RA_ERR_FORMAT && !f, "a prefix of %zu bytes: status %d", k, (int)s);
        ra_st_close(f);
    }
    for (size_t k = 0; b && k < len; k++) {
        ra_st_file *f = NULL;
        b[k] ^= 0x20;
        ra_status s = rai_torch_open_memory(&f, b, len, NULL, NULL, 0);
        b[k] ^= 0x20;
        CHECK(s == RA_OK || s == RA_ERR_FORMAT, "byte %zu flipped: status %d", k, (int)s);
        refused += s != RA_OK, read += s == RA_OK;
        ra_st_close(f);
    }
    CHECK(refused > 0 && read > 0, "flips: %d refused, %d read", refused, read);
    free(b);
}

static void test_sniff_describe(void) {
    char p[1024];
    snprintf(p, sizeof p, "%s/pt_basic.pth", fx);
    CHECK(rai_torch_sniff(p) == 1, "sniff zip");
    snprintf(p, sizeof p, "%s/pt_bad_legacy.pth", fx);
    CHECK(rai_torch_sniff(p) == 2, "sniff legacy");
    snprintf(p, sizeof p, "%s/pt_basic.expected.safetensors", fx);
    CHECK(rai_torch_sniff(p) == 0, "sniff safetensors");
    CHECK(rai_torch_sniff("/nonexistent/x.pth") == 0, "sniff missing");
    ra_st_file *f = NULL;
    CHECK(rai_torch_open(&f, "/nonexistent/x.pth", NULL, NULL, 0, NULL) == RA_ERR_IO, "open missing");

    char *text = NULL;
    snprintf(p, sizeof p, "%s/pt_nested.pth", fx);
    ra_status s = rai_torch_describe(p, &text);
    CHECK(s == RA_OK && text, "describe: %s", ra_last_error());
    static const char *const want[] = {
        "model: dict of 9 tensors\n", "epoch: int 3\n", "args: argparse.Namespace (not read)\n",
        "optimizer: dict of 2 entries\n", "metric: numpy.core.multiarray.scalar (not read)\n",
        "best: float 0.75\n", "version: torch.torch_version.TorchVersion (not read)\n",
        "names: list of 2\n", "selected: model (9 tensors)\n"};
    for (size_t i = 0; text && i < sizeof want / sizeof want[0]; i++)
        CHECK(strstr(text, want[i]), "describe: no line '%s' in:\n%s", want[i], text);
    free(text);
    snprintf(p, sizeof p, "%s/pt_two.pth", fx);
    CHECK(rai_torch_describe(p, &text) == RA_OK && text &&
          strstr(text, "student: dict of 1 tensor\n") &&
          strstr(text, "selected: nothing: 2 state dicts"), "describe two: %s",
          text ? text : ra_last_error());
    free(text);
    snprintf(p, sizeof p, "%s/pt_bad_root_tensor.pth", fx);
    CHECK(rai_torch_describe(p, &text) == RA_OK && text && strstr(text, "(root): tensor F32 [2]\n"),
          "describe a tensor: %s", text ? text : ra_last_error());
    free(text);
    snprintf(p, sizeof p, "%s/pt_bad_global.pth", fx);
    CHECK(rai_torch_describe(p, &text) == RA_ERR_FORMAT && !text &&
          strstr(ra_last_error(), "'os.system'"), "describe refuses: %s", ra_last_error());
}

int main(int argc, char **argv) {
    fx = argc > 1 ? argv[1] : "tests/fixtures";
    test_cases();
    test_refusals();
    test_values();
    test_opcodes();
    test_damage();
    test_sniff_describe();
    return check_done();
}
