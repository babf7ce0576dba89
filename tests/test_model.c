/* test_model.c - the model loader from outside: every fixture model loads;
 * then variants of valid models (metadata changed, tensors dropped, added,
 * reshaped, retyped), written with the library's own writer, must each be
 * refused with the right status and a one-line reason naming the problem,
 * or accepted when the file is odd but valid. Every variant is read twice:
 * ra_model_load(path) and ra_st_open + ra_model_from_file must agree.
 *
 *   test_model FIXTURES_DIR */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "relattn.h"

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a model file as editable parts ------------------------------------- */

#define MAX_T 16
#define MAX_M 16

typedef struct {
    char name[64];
    ra_dtype dtype;
    int ndim;
    int64_t shape[RA_ST_MAX_DIMS];
    size_t nbytes;
    unsigned char *data;
} part;

typedef struct {
    int nt, nm;
    part t[MAX_T];
    char key[MAX_M][48];
    char *val[MAX_M];   /* heap: values may be long */
} parts;

static const char *fixtures;
static char tmpdir[] = "/tmp/relattn_test_model.XXXXXX";
static int nfiles, nrefused, naccepted;

static void parts_free(parts *p) {
    for (int i = 0; i < p->nt; i++) free(p->t[i].data);
    for (int i = 0; i < p->nm; i++) free(p->val[i]);
    p->nt = p->nm = 0;
}

static char *dupstr(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* Remove (value NULL) or set a metadata key. */
static void set_meta(parts *p, const char *key, const char *value) {
    for (int i = 0; i < p->nm; i++)
        if (strcmp(p->key[i], key) == 0) {
            free(p->val[i]);
            if (value) {
                p->val[i] = dupstr(value);
            } else {
                p->nm--;
                memmove(p->key[i], p->key[p->nm], sizeof p->key[i]);
                p->val[i] = p->val[p->nm];
            }
            return;
        }
    if (value && p->nm < MAX_M) {
        snprintf(p->key[p->nm], sizeof p->key[0], "%s", key);
        p->val[p->nm++] = dupstr(value);
    }
}

static part *find(parts *p, const char *name) {
    for (int i = 0; i < p->nt; i++)
        if (strcmp(p->t[i].name, name) == 0) return &p->t[i];
    return NULL;
}

static void drop(parts *p, const char *name) {
    part *t = find(p, name);
    if (!t) return;
    free(t->data);
    *t = p->t[--p->nt];
}

static size_t dtype_size(ra_dtype d) {
    switch (d) {
    case RA_DTYPE_F64: case RA_DTYPE_I64: return 8;
    case RA_DTYPE_F32: case RA_DTYPE_I32: return 4;
    case RA_DTYPE_F16: case RA_DTYPE_BF16: case RA_DTYPE_I16: return 2;
    default: return 1;
    }
}

/* Add or replace a tensor; data NULL fills it with a small ramp of the
 * dtype (any bytes are fine for shape tests). */
static void put(parts *p, const char *name, ra_dtype dtype, int ndim, const int64_t *shape,
                const void *data) {
    part *t = find(p, name);
    if (!t) {
        if (p->nt == MAX_T) return;
        t = &p->t[p->nt++];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", name);
    }
    free(t->data);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->nbytes = n * dtype_size(dtype);
    t->data = calloc(t->nbytes + 1, 1);
    if (data) memcpy(t->data, data, t->nbytes);
    else
        for (size_t i = 0; i < t->nbytes; i++) t->data[i] = (unsigned char)(i % 7);
}

/* The same tensor with one more (or fewer) element on axis `axis`. */
static void reshape_by(parts *p, const char *name, int axis, int delta) {
    part *t = find(p, name);
    if (!t) return;
    int64_t s[RA_ST_MAX_DIMS];
    memcpy(s, t->shape, sizeof s);
    s[axis] += delta;
    put(p, name, t->dtype, t->ndim, s, NULL);
}

static int parts_load(parts *p, const char *path) {
    memset(p, 0, sizeof *p);
    ra_st_file *f = NULL;
    if (ra_st_open(&f, path) != RA_OK) return 0;
    for (int i = 0; i < ra_st_count(f) && i < MAX_T; i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        put(p, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    for (int i = 0; i < ra_st_meta_count(f); i++)
        set_meta(p, ra_st_meta_key(f, i), ra_st_meta(f, ra_st_meta_key(f, i)));
    ra_st_close(f);
    return 1;
}

static void parts_copy(parts *d, const parts *s) {
    memset(d, 0, sizeof *d);
    for (int i = 0; i < s->nt; i++)
        put(d, s->t[i].name, s->t[i].dtype, s->t[i].ndim, s->t[i].shape, s->t[i].data);
    for (int i = 0; i < s->nm; i++) set_meta(d, s->key[i], s->val[i]);
}

/* Write with the library's writer; the path goes into `path`. */
static int parts_save(const parts *p, char *path, size_t cap) {
    snprintf(path, cap, "%s/v%03d.safetensors", tmpdir, nfiles++);
    ra_st_writer *w = ra_st_writer_new();
    ra_status s = w ? RA_OK : RA_ERR_NOMEM;
    for (int i = 0; !s && i < p->nt; i++)
        s = ra_st_writer_add(w, p->t[i].name, p->t[i].dtype, p->t[i].ndim, p->t[i].shape,
                             p->t[i].data);
    for (int i = 0; !s && i < p->nm; i++) s = ra_st_writer_meta(w, p->key[i], p->val[i]);
    if (!s) s = ra_st_writer_save(w, path);
    ra_st_writer_free(w);
    CHECK(s == RA_OK, "writing %s: %s", path, ra_last_error());
    return s == RA_OK;
}

/* ---- the two ways in -------------------------------------------------- */

static int one_line(const char *e) {
    return e[0] != '\0' && !strchr(e, '\n') && !strchr(e, '\r');
}

static int contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && (hay[i] | 32) == (needle[i] | 32)) i++;
        if (i == n) return 1;
    }
    return n == 0;
}

/* Load p both ways; expect status `want` and, on failure, a one-line reason
 * containing `needle`. Returns the model loaded by path (or NULL). */
static ra_model *expect_parts(const parts *p, ra_status want, const char *needle,
                              const char *what) {
    char path[256];
    if (!parts_save(p, path, sizeof path)) return NULL;
    if (want == RA_OK) naccepted++;
    else nrefused++;

    ra_model *m = (ra_model *)&m;   /* must be reset to NULL on failure */
    ra_status s = ra_model_load(&m, path);
    char err1[600];
    snprintf(err1, sizeof err1, "%s", ra_last_error());
    CHECK(s == want, "%s: ra_model_load gives %d (%s), expected %d", what, (int)s, err1,
          (int)want);
    if (s != RA_OK) {
        CHECK(m == NULL, "%s: *out not NULL after a failure", what);
        CHECK(one_line(err1), "%s: reason '%s' is not one non-empty line", what, err1);
        CHECK(!needle || contains_ci(err1, needle), "%s: reason '%s' does not name '%s'", what,
              err1, needle);
        m = NULL;
    } else {
        CHECK(m != NULL && ra_model_attn(m) != NULL, "%s: no model", what);
    }

    /* the same file through ra_st_open + ra_model_from_file */
    ra_st_file *f = NULL;
    ra_status so = ra_st_open(&f, path);
    CHECK(so == RA_OK, "%s: ra_st_open: %s", what, ra_last_error());
    if (so == RA_OK) {
        ra_model *m2 = NULL;
        ra_status s2 = ra_model_from_file(&m2, f);
        CHECK(s2 == s, "%s: ra_model_from_file gives %d, ra_model_load %d", what, (int)s2,
              (int)s);
        if (s2 != RA_OK) {
            CHECK(m2 == NULL, "%s: *out not NULL after a failure (from_file)", what);
            CHECK(strcmp(ra_last_error(), err1) == 0, "%s: reasons differ: '%s' vs '%s'", what,
                  ra_last_error(), err1);
        }
        ra_model_free(m2);
        ra_st_close(f);
    }
    return m;
}

static void expect(const parts *p, ra_status want, const char *needle, const char *what) {
    ra_model *m = expect_parts(p, want, needle, what);
    ra_model_free(m);
}

/* ---- the fixture models ---------------------------------------------- */

static int load_base(parts *p, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.model.safetensors", fixtures, name);
    int ok = parts_load(p, path);
    CHECK(ok, "cannot read fixture %s: %s", path, ra_last_error());
    return ok;
}

/* Every model of a list file (cases.txt, nets.txt) loads, both ways, with
 * the arch its metadata names; attention layers also with their dim and
 * heads. Returns the number of models, -1 if the list is missing. */
static int load_list(const char *list, int attention) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", fixtures, list);
    FILE *fp = fopen(path, "r");
    if (!fp) return -1;
    char line[256];
    int n = 0;
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\r\n \t")] = 0;
        if (!line[0] || line[0] == '#') continue;
        snprintf(path, sizeof path, "%s/%s.model.safetensors", fixtures, line);
        ra_model *m = NULL;
        ra_status s = ra_model_load(&m, path);
        CHECK(s == RA_OK && m, "fixture %s: %s", line, ra_last_error());
        ra_st_file *f = NULL;
        if (s == RA_OK && ra_st_open(&f, path) == RA_OK) {
            const char *arch = ra_st_meta(f, "arch");
            CHECK(arch && ra_model_arch(m) == ra_arch_from_name(arch) &&
                      strcmp(ra_arch_name(ra_model_arch(m)), arch) == 0,
                  "fixture %s: arch %s", line, arch ? arch : "(none)");
            if (attention) {
                const ra_attn_config *c = ra_attn_layer_config(ra_model_attn(m));
                CHECK(c && c->dim == atoi(ra_st_meta(f, "dim")) &&
                          c->num_heads == atoi(ra_st_meta(f, "num_heads")),
                      "fixture %s: dim / num_heads", line);
            }
            /* the same through from_file */
            ra_model *m2 = NULL;
            CHECK(ra_model_from_file(&m2, f) == RA_OK && m2, "fixture %s from_file: %s", line,
                  ra_last_error());
            ra_model_free(m2);
        }
        ra_st_close(f);
        ra_model_free(m);
        n++;
    }
    fclose(fp);
    return n;
}

static void test_fixtures(void) {
    int n = load_list("cases.txt", 1);
    CHECK(n >= 30, "cases.txt: %d attention fixture cases", n);
    n = load_list("nets.txt", 0);   /* whole networks, where the fixtures have them */
    if (n >= 0) printf("%d network fixtures loaded\n", n);
}

/* ---- metadata ------------------------------------------------------------ */

typedef struct {
    const char *base;  /* fixture */
    const char *key;
    const char *value; /* NULL: remove */
    ra_status want;
    const char *needle;
} meta_case;

static void test_metadata(void) {
    static const meta_case cases[] = {
        {"swin_7x7", "arch", NULL, RA_ERR_FORMAT, "arch"},
        {"swin_7x7", "arch", "swin_transformer_v9", RA_ERR_FORMAT, "swin_transformer_v9"},
        {"swin_7x7", "arch", "", RA_ERR_FORMAT, "arch"},
        {"swin_7x7", "arch", "Window_Attention", RA_ERR_FORMAT, "arch"},
        {"swin_7x7", "dim", NULL, RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "num_heads", NULL, RA_ERR_FORMAT, "num_heads"},
        {"swin_7x7", "window_size", NULL, RA_ERR_FORMAT, "window_size"},
        {"w3d_d7d4", "window_size", NULL, RA_ERR_FORMAT, "window_size"},
        {"w3d_d7d4", "num_frames_q", NULL, RA_ERR_FORMAT, "num_frames_q"},
        {"w3d_d7d4", "num_frames_kv", NULL, RA_ERR_FORMAT, "num_frames_kv"},
        {"shaw_both_k2", "max_relative_position", NULL, RA_ERR_FORMAT, "max_relative_position"},
        {"vit_n17_h4", "dim", NULL, RA_ERR_FORMAT, "dim"},
        {"vit_n17_h4", "num_heads", NULL, RA_ERR_FORMAT, "num_heads"},
        /* dim 24 with 3 heads -> 5 heads */
        {"swin_7x7", "num_heads", "5", RA_ERR_FORMAT, "divisible"},
        {"swin_7x7", "num_heads", "48", RA_ERR_FORMAT, "num_heads"},
        {"vit_n17_h4", "num_heads", "3", RA_ERR_FORMAT, "divisible"},
        {"swin_7x7", "dim", "abc", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "12x", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "-4", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "0", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "-0", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "99999999999", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "99999999999999999999999999", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "2147483648", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", " 24", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "24 ", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "24\n", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "0x18", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "2.4e1", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "24.0", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "+", RA_ERR_FORMAT, "dim"},
        {"swin_7x7", "dim", "\xd9\xa2\xd9\xa4", RA_ERR_FORMAT, "dim"},   /* Arabic-Indic 24 */
        {"swin_7x7", "num_heads", "0", RA_ERR_FORMAT, "num_heads"},
        {"swin_7x7", "num_heads", "-3", RA_ERR_FORMAT, "num_heads"},
        {"swin_7x7", "qkv_bias", "yes", RA_ERR_FORMAT, "qkv_bias"},
        {"swin_7x7", "qkv_bias", "True", RA_ERR_FORMAT, "qkv_bias"},
        {"swin_7x7", "qkv_bias", "1", RA_ERR_FORMAT, "qkv_bias"},
        {"swin_7x7", "qkv_bias", "", RA_ERR_FORMAT, "qkv_bias"},
        {"swin_7x7", "qk_scale", "nan", RA_ERR_FORMAT, "qk_scale"},
        {"swin_7x7", "qk_scale", "inf", RA_ERR_FORMAT, "qk_scale"},
        {"swin_7x7", "qk_scale", "-inf", RA_ERR_FORMAT, "qk_scale"},
        {"swin_7x7", "qk_scale", "x", RA_ERR_FORMAT, "qk_scale"},
        {"swin_7x7", "qk_scale", "", RA_ERR_FORMAT, "qk_scale"},
        {"swin_7x7", "qk_scale", "1e40", RA_ERR_FORMAT, "qk_scale"},
        {"swin_7x7", "qk_scale", "0.5 ", RA_ERR_FORMAT, "qk_scale"},
        {"vit_qkscale", "qk_scale", "nan", RA_ERR_FORMAT, "qk_scale"},
        {"w3d_d7d4", "qk_scale", "inf", RA_ERR_FORMAT, "qk_scale"},
        {"swin_7x7", "window_size", "7,", RA_ERR_FORMAT, "window_size = \"7,\""},
        {"swin_7x7", "window_size", ",7", RA_ERR_FORMAT, "window_size = \",7\""},
        {"swin_7x7", "window_size", "0,7", RA_ERR_FORMAT, "window_size"},
        {"swin_7x7", "window_size", "7,0", RA_ERR_FORMAT, "window_size"},
        {"swin_7x7", "window_size", "7,7,7", RA_ERR_FORMAT, "window_size"},
        {"swin_7x7", "window_size", "", RA_ERR_FORMAT, "window_size"},
        {"swin_7x7", "window_size", "7x7", RA_ERR_FORMAT, "window_size"},
        {"swin_7x7", "window_size", "(7, 7)", RA_ERR_FORMAT, "window_size"},
        {"swin_7x7", "window_size", "-7,-7", RA_ERR_FORMAT, "window_size"},
        {"swin_7x7", "window_size", "7 ,7", RA_ERR_FORMAT, "window_size"},
        {"swin_7x7", "window_size", "100000,100000", RA_ERR_FORMAT, "window_size"},
        {"swin_7x7", "window_size", "4096,4096", RA_ERR_FORMAT, "window"},
        {"swin_7x7", "window_size", "123456789012345678901234567890123,7", RA_ERR_FORMAT,
         "window_size"},
        /* D1 = 7, D2 = 5: stride 1 gives 7 frames; D1 = 2, D2 = 5: stride 0 */
        {"w3d_d7d4", "num_frames_kv", "5", RA_ERR_FORMAT, "num_frames"},
        {"w3d_d7d4", "num_frames_q", "2", RA_ERR_FORMAT, "num_frames"},
        {"w3d_d7d4", "num_frames_kv", "0", RA_ERR_FORMAT, "num_frames_kv"},
        {"w3d_d7d4", "num_frames_q", "x", RA_ERR_FORMAT, "num_frames_q"},
        {"w3d_d7d4", "num_frames_q", "99999", RA_ERR_FORMAT, "num_frames_q"},
        {"shaw_both_k2", "max_relative_position", "-1", RA_ERR_FORMAT, "max_relative_position"},
        {"shaw_both_k2", "max_relative_position", "two", RA_ERR_FORMAT, "max_relative_position"},
        {"shaw_both_k2", "max_relative_position", "2147483647", RA_ERR_FORMAT,
         "max_relative_position"},
        /* the overlapping patch embedding: kernel = patch + an even number */
        {"net_swin_overlap", "patch_kernel", "5", RA_ERR_FORMAT, "patch_kernel"},
        {"net_swin_overlap", "patch_kernel", "2", RA_ERR_FORMAT, "patch_kernel"},
        {"net_swin_overlap", "patch_kernel", "66", RA_ERR_FORMAT, "patch_kernel"},
        {"net_swin_overlap", "patch_kernel", "x", RA_ERR_FORMAT, "patch_kernel"},
        {"net_swin_overlap", "patch_kernel", "6", RA_ERR_FORMAT, "patch_embed.proj.weight"},
        {"net_swin_overlap", "patch_kernel", NULL, RA_ERR_FORMAT, "patch_embed.proj.weight"},
        /* parseable, but the tensors no longer fit the configuration */
        {"swin_7x7", "dim", "48", RA_ERR_SHAPE, "qkv.weight"},
        {"swin_7x7", "window_size", "6,7", RA_ERR_SHAPE, "relative_position_bias_table"},
        {"swin_7x7", "num_heads", "4", RA_ERR_SHAPE, "relative_position_bias_table"},
        {"shaw_both_k2", "max_relative_position", "3", RA_ERR_SHAPE, "relative_"},
        {"w3d_d7d4", "num_frames_q", "8", RA_ERR_SHAPE, "relative_position_bias_table"},
        /* qkv_bias false, but qkv.bias is there: an unexpected tensor */
        {"swin_7x7", "qkv_bias", "false", RA_ERR_FORMAT, "qkv.bias"},
        {"vit_n17_h2_bias", "qkv_bias", "false", RA_ERR_FORMAT, "qkv.bias"},
        {"w3d_d7d4", "qkv_bias", "false", RA_ERR_FORMAT, ".bias"},
        /* qkv_bias true, no bias tensor */
        {"vit_n17_h4", "qkv_bias", "true", RA_ERR_FORMAT, "qkv.bias"},
        {"swin_3x3_nobias", "qkv_bias", "true", RA_ERR_FORMAT, "qkv.bias"},
        {"vit_n17_h2_bias", "qkv_bias", NULL, RA_ERR_FORMAT, "qkv.bias"},   /* default false */
        {"swin_3x3_nobias", "qkv_bias", NULL, RA_ERR_FORMAT, "qkv.bias"},   /* default true */
        /* a model from one arch under another arch's name */
        {"swin_7x7", "arch", "vit_attention", RA_ERR_FORMAT, "relative_"},
        {"vit_n17_h4", "arch", "window_attention", RA_ERR_FORMAT, "window_size"},
        {"swin_7x7", "arch", "window_attention_3d", RA_ERR_FORMAT, "num_frames_q"},
        {"vit_n17_h2_bias", "arch", "shaw_attention", RA_ERR_FORMAT, "max_relative_position"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const meta_case *c = &cases[i];
        parts p;
        if (!load_base(&p, c->base)) continue;
        set_meta(&p, c->key, c->value);
        char what[160];
        snprintf(what, sizeof what, "%s with %s = %s%.40s%s", c->base, c->key,
                 c->value ? "\"" : "", c->value ? c->value : "(absent)", c->value ? "\"" : "");
        expect(&p, c->want, c->needle, what);
        parts_free(&p);
    }

    /* a hostile value: long, and with a newline, never a second line */
    parts p;
    if (load_base(&p, "swin_7x7")) {
        char big[3000];
        memset(big, '9', sizeof big - 1);
        big[sizeof big - 1] = 0;
        set_meta(&p, "dim", big);
        expect(&p, RA_ERR_FORMAT, "dim", "dim of 2999 digits");
        set_meta(&p, "dim", "24");
        set_meta(&p, "arch", "bad\narch\r\n");
        expect(&p, RA_ERR_FORMAT, "arch", "arch with newlines");
        parts_free(&p);
    }
    /* both frame counts: D1 = 2 with D2 = 5 (stride 0), D1 = 7 with D2 = 5 */
    if (load_base(&p, "w3d_d7d4")) {
        set_meta(&p, "num_frames_q", "2");
        set_meta(&p, "num_frames_kv", "5");
        expect(&p, RA_ERR_FORMAT, "num_frames", "num_frames_q 2, num_frames_kv 5");
        set_meta(&p, "num_frames_q", "7");
        expect(&p, RA_ERR_FORMAT, "num_frames", "num_frames_q 7, num_frames_kv 5");
        set_meta(&p, "num_frames_q", "4096");
        set_meta(&p, "num_frames_kv", "4096");
        set_meta(&p, "window_size", "4096,4096");
        expect(&p, RA_ERR_FORMAT, "window", "frames 4096 with window 4096x4096");
        parts_free(&p);
    }
}

/* ---- tensors ----------------------------------------------------------- */

static void test_tensors(void) {
    parts base, p;
    char what[200];

    /* swin: the table, the index, the projections */
    if (load_base(&base, "swin_7x7")) {
        parts_copy(&p, &base);
        drop(&p, "proj.bias");
        expect(&p, RA_ERR_FORMAT, "proj.bias", "swin without proj.bias");
        parts_free(&p);

        parts_copy(&p, &base);
        drop(&p, "relative_position_bias_table");
        expect(&p, RA_ERR_FORMAT, "relative_position_bias_table", "swin without a table");
        parts_free(&p);

        parts_copy(&p, &base);
        put(&p, "extra.weight", RA_DTYPE_F32, 1, (int64_t[]){4}, NULL);
        expect(&p, RA_ERR_FORMAT, "extra.weight", "swin with an extra tensor");
        parts_free(&p);

        parts_copy(&p, &base);
        put(&p, "attn.qkv.weight", RA_DTYPE_F32, 2, (int64_t[]){72, 24}, NULL);
        expect(&p, RA_ERR_FORMAT, "attn.qkv.weight", "swin with a prefixed duplicate");
        parts_free(&p);

        parts_copy(&p, &base);
        put(&p, "qkv.weight", RA_DTYPE_F32, 2, (int64_t[]){72, 23}, NULL);
        expect(&p, RA_ERR_SHAPE, "qkv.weight", "qkv.weight (72, 23)");
        parts_free(&p);

        parts_copy(&p, &base);
        put(&p, "qkv.weight", RA_DTYPE_F32, 2, (int64_t[]){24, 72}, NULL);
        expect(&p, RA_ERR_SHAPE, "qkv.weight", "qkv.weight transposed");
        parts_free(&p);

        parts_copy(&p, &base);
        put(&p, "qkv.weight", RA_DTYPE_F32, 1, (int64_t[]){72 * 24}, NULL);
        expect(&p, RA_ERR_SHAPE, "qkv.weight", "qkv.weight flattened");
        parts_free(&p);

        parts_copy(&p, &base);
        put(&p, "qkv.weight", RA_DTYPE_F32, 3, (int64_t[]){1, 72, 24}, NULL);
        expect(&p, RA_ERR_SHAPE, "qkv.weight", "qkv.weight (1, 72, 24)");
        parts_free(&p);

        parts_copy(&p, &base);
        put(&p, "qkv.weight", RA_DTYPE_F32, 2, (int64_t[]){0, 24}, NULL);
        expect(&p, RA_ERR_SHAPE, "qkv.weight", "qkv.weight (0, 24)");
        parts_free(&p);

        parts_copy(&p, &base);
        put(&p, "proj.bias", RA_DTYPE_F32, 0, NULL, NULL);
        expect(&p, RA_ERR_SHAPE, "proj.bias", "proj.bias a scalar");
        parts_free(&p);

        parts_copy(&p, &base);
        put(&p, "relative_position_bias_table", RA_DTYPE_F32, 2, (int64_t[]){168, 3}, NULL);
        expect(&p, RA_ERR_SHAPE, "relative_position_bias_table", "table (168, 3)");
        parts_free(&p);

        parts_copy(&p, &base);
        put(&p, "relative_position_bias_table", RA_DTYPE_F32, 2, (int64_t[]){3, 169}, NULL);
        expect(&p, RA_ERR_SHAPE, "relative_position_bias_table", "table transposed");
        parts_free(&p);

        static const ra_dtype bad_dtypes[] = {RA_DTYPE_I64, RA_DTYPE_I32, RA_DTYPE_I16,
                                              RA_DTYPE_I8, RA_DTYPE_U8, RA_DTYPE_BOOL};
        for (size_t d = 0; d < sizeof bad_dtypes / sizeof bad_dtypes[0]; d++) {
            parts_copy(&p, &base);
            put(&p, "proj.weight", bad_dtypes[d], 2, (int64_t[]){24, 24}, NULL);
            snprintf(what, sizeof what, "proj.weight of integer dtype %d", (int)bad_dtypes[d]);
            expect(&p, RA_ERR_SHAPE, "proj.weight", what);
            parts_free(&p);
        }
        parts_copy(&p, &base);
        put(&p, "relative_position_bias_table", RA_DTYPE_I64, 2, (int64_t[]){169, 3}, NULL);
        expect(&p, RA_ERR_SHAPE, "relative_position_bias_table", "table of I64");
        parts_free(&p);

        /* the saved index: one entry off, wrong shape, wrong dtype */
        part *ix = find(&base, "relative_position_index");
        CHECK(ix && ix->dtype == RA_DTYPE_I64 && ix->nbytes == 49 * 49 * 8,
              "swin_7x7 has an I64 (49, 49) index");
        if (ix && ix->nbytes == 49 * 49 * 8) {
            int64_t idx[49 * 49];
            memcpy(idx, ix->data, sizeof idx);
            const int64_t pos[] = {0, 1, 49 * 49 / 2, 49 * 49 - 1};
            for (size_t k = 0; k < sizeof pos / sizeof pos[0]; k++) {
                parts_copy(&p, &base);
                int64_t v[49 * 49];
                memcpy(v, idx, sizeof v);
                v[pos[k]] += k % 2 ? -1 : 1;
                put(&p, "relative_position_index", RA_DTYPE_I64, 2, (int64_t[]){49, 49}, v);
                snprintf(what, sizeof what, "index differs at entry %lld", (long long)pos[k]);
                expect(&p, RA_ERR_FORMAT, "relative_position_index", what);
                parts_free(&p);
            }
            /* huge and negative values, not just off by one */
            parts_copy(&p, &base);
            int64_t v[49 * 49];
            memcpy(v, idx, sizeof v);
            v[7] = INT64_MIN;
            put(&p, "relative_position_index", RA_DTYPE_I64, 2, (int64_t[]){49, 49}, v);
            expect(&p, RA_ERR_FORMAT, "relative_position_index", "index with INT64_MIN");
            parts_free(&p);
            v[7] = idx[7] + ((int64_t)1 << 32);   /* equal in the low 32 bits */
            parts_copy(&p, &base);
            put(&p, "relative_position_index", RA_DTYPE_I64, 2, (int64_t[]){49, 49}, v);
            expect(&p, RA_ERR_FORMAT, "relative_position_index", "index off by 2^32");
            parts_free(&p);

            parts_copy(&p, &base);
            put(&p, "relative_position_index", RA_DTYPE_I64, 2, (int64_t[]){49, 48}, NULL);
            expect(&p, RA_ERR_SHAPE, "relative_position_index", "index (49, 48)");
            parts_free(&p);

            parts_copy(&p, &base);
            put(&p, "relative_position_index", RA_DTYPE_I64, 1, (int64_t[]){49 * 49}, idx);
            expect(&p, RA_ERR_SHAPE, "relative_position_index", "index flattened");
            parts_free(&p);

            float fidx[49 * 49];
            for (int k = 0; k < 49 * 49; k++) fidx[k] = (float)idx[k];
            parts_copy(&p, &base);
            put(&p, "relative_position_index", RA_DTYPE_F32, 2, (int64_t[]){49, 49}, fidx);
            expect(&p, RA_ERR_SHAPE, "relative_position_index", "index as F32");
            parts_free(&p);

            unsigned char bidx[49 * 49];
            for (int k = 0; k < 49 * 49; k++) bidx[k] = idx[k] != 0;
            parts_copy(&p, &base);
            put(&p, "relative_position_index", RA_DTYPE_BOOL, 2, (int64_t[]){49, 49}, bidx);
            expect(&p, RA_ERR_SHAPE, "relative_position_index", "index as BOOL");
            parts_free(&p);

            /* accepted: the same values as I32 or I16, or no index at all */
            int32_t i32[49 * 49];
            int16_t i16[49 * 49];
            for (int k = 0; k < 49 * 49; k++) i32[k] = (int32_t)idx[k], i16[k] = (int16_t)idx[k];
            parts_copy(&p, &base);
            put(&p, "relative_position_index", RA_DTYPE_I32, 2, (int64_t[]){49, 49}, i32);
            expect(&p, RA_OK, NULL, "index as I32");
            parts_free(&p);
            parts_copy(&p, &base);
            put(&p, "relative_position_index", RA_DTYPE_I16, 2, (int64_t[]){49, 49}, i16);
            expect(&p, RA_OK, NULL, "index as I16");
            parts_free(&p);
            parts_copy(&p, &base);
            drop(&p, "relative_position_index");
            expect(&p, RA_OK, NULL, "swin without the saved index");
            parts_free(&p);
        }
        parts_free(&base);
    }

    /* vit: no index, no table allowed */
    if (load_base(&base, "vit_n17_h4")) {
        parts_copy(&p, &base);
        put(&p, "relative_position_index", RA_DTYPE_I64, 2, (int64_t[]){17, 17}, NULL);
        expect(&p, RA_ERR_FORMAT, "relative_position_index", "vit with an index");
        parts_free(&p);
        parts_copy(&p, &base);
        put(&p, "relative_position_bias_table", RA_DTYPE_F32, 2, (int64_t[]){9, 4}, NULL);
        expect(&p, RA_ERR_FORMAT, "relative_position_bias_table", "vit with a table");
        parts_free(&p);
        parts_copy(&p, &base);
        put(&p, "qkv.bias", RA_DTYPE_F32, 1, (int64_t[]){96}, NULL);
        expect(&p, RA_ERR_FORMAT, "qkv.bias", "vit qkv_bias false with qkv.bias");
        parts_free(&p);
        parts_copy(&p, &base);
        drop(&p, "qkv.weight");
        expect(&p, RA_ERR_FORMAT, "qkv.weight", "vit without qkv.weight");
        parts_free(&p);
        parts_free(&base);
    }

    /* window_attention_3d: q / kv */
    if (load_base(&base, "w3d_d7d4")) {
        parts_copy(&p, &base);
        drop(&p, "kv.bias");
        expect(&p, RA_ERR_FORMAT, "kv.bias", "3d without kv.bias");
        parts_free(&p);
        parts_copy(&p, &base);
        reshape_by(&p, "kv.weight", 0, -16);
        expect(&p, RA_ERR_SHAPE, "kv.weight", "3d kv.weight (16, 16)");
        parts_free(&p);
        parts_copy(&p, &base);
        put(&p, "qkv.weight", RA_DTYPE_F32, 2, (int64_t[]){48, 16}, NULL);
        expect(&p, RA_ERR_FORMAT, "qkv.weight", "3d with a fused qkv.weight");
        parts_free(&p);
        parts_copy(&p, &base);
        /* the 2-D table of a 2x2 window (9 rows) instead of 13 x 3 x 3 */
        put(&p, "relative_position_bias_table", RA_DTYPE_F32, 2, (int64_t[]){9, 2}, NULL);
        expect(&p, RA_ERR_SHAPE, "relative_position_bias_table", "3d with a 2-D table");
        parts_free(&p);
        if (find(&base, "relative_position_index")) {
            parts_copy(&p, &base);
            part *ix = find(&p, "relative_position_index");
            int64_t v;
            memcpy(&v, ix->data + 8 * 5, 8);
            v ^= 1;
            memcpy(ix->data + 8 * 5, &v, 8);
            expect(&p, RA_ERR_FORMAT, "relative_position_index", "3d index differs");
            parts_free(&p);
            parts_copy(&p, &base);
            reshape_by(&p, "relative_position_index", 1, 12);   /* (28, 28): a self index */
            expect(&p, RA_ERR_SHAPE, "relative_position_index", "3d index (28, 28)");
            parts_free(&p);
        }
        parts_free(&base);
    }

    /* shaw: the two tables */
    if (load_base(&base, "shaw_both_k2")) {
        parts_copy(&p, &base);
        drop(&p, "relative_keys");
        drop(&p, "relative_values");
        expect(&p, RA_ERR_FORMAT, "relative_keys", "shaw with neither table");
        parts_free(&p);
        parts_copy(&p, &base);
        reshape_by(&p, "relative_keys", 0, 1);
        expect(&p, RA_ERR_SHAPE, "relative_keys", "relative_keys (6, 8)");
        parts_free(&p);
        parts_copy(&p, &base);
        reshape_by(&p, "relative_keys", 1, 8);
        expect(&p, RA_ERR_SHAPE, "relative_keys", "relative_keys (5, 16): dim, not hd");
        parts_free(&p);
        parts_copy(&p, &base);
        reshape_by(&p, "relative_values", 0, -1);
        expect(&p, RA_ERR_SHAPE, "relative_values", "relative_values (4, 8)");
        parts_free(&p);
        parts_copy(&p, &base);
        put(&p, "relative_keys", RA_DTYPE_I32, 2, (int64_t[]){5, 8}, NULL);
        expect(&p, RA_ERR_SHAPE, "relative_keys", "relative_keys of I32");
        parts_free(&p);
        parts_copy(&p, &base);
        put(&p, "relative_position_index", RA_DTYPE_I64, 2, (int64_t[]){7, 7}, NULL);
        expect(&p, RA_ERR_FORMAT, "relative_position_index", "shaw with an index");
        parts_free(&p);
        parts_copy(&p, &base);
        put(&p, "relative_position_bias_table", RA_DTYPE_F32, 2, (int64_t[]){5, 2}, NULL);
        expect(&p, RA_ERR_FORMAT, "relative_position_bias_table", "shaw with a table");
        parts_free(&p);
        /* accepted: either table alone */
        parts_copy(&p, &base);
        drop(&p, "relative_values");
        ra_model *m = expect_parts(&p, RA_OK, NULL, "shaw with keys only");
        const ra_attn_config *c = m ? ra_attn_layer_config(ra_model_attn(m)) : NULL;
        CHECK(c && c->has_rel_k && !c->has_rel_v, "shaw keys only: has_rel_k/v");
        ra_model_free(m);
        parts_free(&p);
        parts_free(&base);
    }
}

/* Every tensor of every kind of model dropped, and grown by one on each
 * axis: the loader names it, whatever it is. */
static void test_each_tensor(void) {
    static const char *bases[] = {"swin_7x7", "w3d_d5d3_mask", "shaw_both_k2",
                                  "vit_n17_h2_bias", "swin_3x3_w_bf16"};
    char what[200];
    for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++) {
        parts base;
        if (!load_base(&base, bases[b])) continue;
        for (int i = 0; i < base.nt; i++) {
            const char *nm = base.t[i].name;
            const int optional = strcmp(nm, "relative_position_index") == 0 ||
                                 strcmp(nm, "relative_keys") == 0 ||
                                 strcmp(nm, "relative_values") == 0;
            parts p;
            parts_copy(&p, &base);
            drop(&p, nm);
            snprintf(what, sizeof what, "%s without %s", bases[b], nm);
            expect(&p, optional ? RA_OK : RA_ERR_FORMAT, optional ? NULL : nm, what);
            parts_free(&p);
            for (int a = 0; a < base.t[i].ndim; a++) {
                parts_copy(&p, &base);
                reshape_by(&p, nm, a, 1);
                snprintf(what, sizeof what, "%s with %s grown on axis %d", bases[b], nm, a);
                expect(&p, RA_ERR_SHAPE, nm, what);
                parts_free(&p);
            }
            /* a rank too many */
            parts_copy(&p, &base);
            part *t = find(&p, nm);
            int64_t s[RA_ST_MAX_DIMS] = {1};
            memcpy(s + 1, t->shape, (size_t)t->ndim * sizeof *s);
            put(&p, nm, t->dtype, t->ndim + 1, s, NULL);
            snprintf(what, sizeof what, "%s with %s of rank %d", bases[b], nm, t->ndim);
            expect(&p, RA_ERR_SHAPE, nm, what);
            parts_free(&p);
        }
        /* each metadata key removed */
        for (int k = 0; k < base.nm; k++) {
            const char *key = base.key[k];
            parts p;
            parts_copy(&p, &base);
            set_meta(&p, key, NULL);
            ra_status want = RA_ERR_FORMAT;
            if (strcmp(key, "qk_scale") == 0) want = RA_OK;
            if (strcmp(key, "qkv_bias") == 0) {
                const int dflt = strcmp(bases[b], "vit_n17_h2_bias") != 0;
                want = (strcmp(base.val[k], "true") == 0) == dflt ? RA_OK : RA_ERR_FORMAT;
            }
            snprintf(what, sizeof what, "%s without metadata %s", bases[b], key);
            expect(&p, want, want ? (strcmp(key, "qkv_bias") ? key : "qkv.bias") : NULL,
                        what);
            parts_free(&p);
        }
        parts_free(&base);
    }
}

/* ---- accepted but odd ------------------------------------------------- */

static void test_accepted(void) {
    parts p;
    ra_model *m;
    const ra_attn_config *c;

    if (load_base(&p, "swin_7x7")) {
        set_meta(&p, "window_size", "7");   /* a square window as one integer */
        m = expect_parts(&p, RA_OK, NULL, "window_size \"7\"");
        c = m ? ra_attn_layer_config(ra_model_attn(m)) : NULL;
        CHECK(c && c->window[0] == 7 && c->window[1] == 7, "window_size \"7\" is 7x7");
        ra_model_free(m);

        set_meta(&p, "window_size", "7, 7");
        m = expect_parts(&p, RA_OK, NULL, "window_size \"7, 7\"");
        ra_model_free(m);

        set_meta(&p, "window_size", "7,7");
        set_meta(&p, "qkv_bias", NULL);       /* default true for Swin */
        m = expect_parts(&p, RA_OK, NULL, "qkv_bias absent (swin)");
        c = m ? ra_attn_layer_config(ra_model_attn(m)) : NULL;
        CHECK(c && c->qkv_bias == 1, "swin: qkv_bias defaults to true");
        ra_model_free(m);

        set_meta(&p, "qk_scale", "0");        /* PyTorch: `qk_scale or hd**-0.5` */
        m = expect_parts(&p, RA_OK, NULL, "qk_scale \"0\"");
        ra_model_free(m);
        set_meta(&p, "qk_scale", "1e-3");
        m = expect_parts(&p, RA_OK, NULL, "qk_scale \"1e-3\"");
        c = m ? ra_attn_layer_config(ra_model_attn(m)) : NULL;
        CHECK(c && c->has_qk_scale && fabsf(c->qk_scale - 1e-3f) < 1e-9f, "qk_scale 1e-3");
        ra_model_free(m);
        set_meta(&p, "qk_scale", NULL);

        set_meta(&p, "comment", "exported by a test; unknown keys are ignored");
        set_meta(&p, "format", "pt");
        m = expect_parts(&p, RA_OK, NULL, "extra metadata keys");
        ra_model_free(m);
        parts_free(&p);
    }
    if (load_base(&p, "swin_3x5")) {
        set_meta(&p, "window_size", "3, 5");
        m = expect_parts(&p, RA_OK, NULL, "window_size \"3, 5\"");
        c = m ? ra_attn_layer_config(ra_model_attn(m)) : NULL;
        CHECK(c && c->window[0] == 3 && c->window[1] == 5, "window_size \"3, 5\" is 3x5");
        ra_model_free(m);
        set_meta(&p, "window_size", "5,3");   /* same token count, other table */
        expect(&p, RA_ERR_FORMAT, "relative_position_index", "3x5 model as 5x3");
        drop(&p, "relative_position_index");
        m = expect_parts(&p, RA_OK, NULL, "3x5 model as 5x3 without an index (same sizes)");
        ra_model_free(m);
        parts_free(&p);
    }
    if (load_base(&p, "vit_h1_default")) {
        CHECK(find(&p, "qkv.bias") == NULL && find(&p, "qkv.weight") != NULL,
              "vit_h1_default has no qkv.bias");
        m = expect_parts(&p, RA_OK, NULL, "qkv_bias absent (vit)");
        c = m ? ra_attn_layer_config(ra_model_attn(m)) : NULL;
        CHECK(c && c->qkv_bias == 0, "vit: qkv_bias defaults to false");
        ra_model_free(m);
        parts_free(&p);
    }
    if (load_base(&p, "shaw_both_k2")) {
        set_meta(&p, "qk_scale", "0.25");   /* parsed for every arch */
        m = expect_parts(&p, RA_OK, NULL, "shaw with qk_scale");
        c = m ? ra_attn_layer_config(ra_model_attn(m)) : NULL;
        CHECK(c && c->has_qk_scale && c->qk_scale == 0.25f, "shaw: qk_scale 0.25");
        ra_model_free(m);
        set_meta(&p, "qk_scale", "nonsense");
        expect(&p, RA_ERR_FORMAT, "qk_scale", "shaw with qk_scale \"nonsense\"");
        parts_free(&p);
    }
}

/* ---- files that are not there ----------------------------------------- */

static void test_io(void) {
    char path[300];
    ra_model *m = (ra_model *)&m;
    snprintf(path, sizeof path, "%s/no_such_model.safetensors", tmpdir);
    ra_status s = ra_model_load(&m, path);
    CHECK(s == RA_ERR_IO && m == NULL, "missing file: status %d", (int)s);
    CHECK(one_line(ra_last_error()) && strstr(ra_last_error(), "no_such_model"),
          "missing file: reason '%s'", ra_last_error());

    m = (ra_model *)&m;
    s = ra_model_load(&m, tmpdir);
    CHECK(s == RA_ERR_IO && m == NULL, "a directory: status %d", (int)s);
    CHECK(one_line(ra_last_error()), "a directory: reason '%s'", ra_last_error());

    /* a valid safetensors file that is not a model */
    snprintf(path, sizeof path, "%s/cases.txt", fixtures);
    s = ra_model_load(&m, path);
    CHECK(s == RA_ERR_FORMAT && m == NULL, "a text file: status %d", (int)s);

    snprintf(path, sizeof path, "%s/swin_7x7.input.safetensors", fixtures);
    s = ra_model_load(&m, path);
    CHECK(s == RA_ERR_FORMAT && m == NULL && strstr(ra_last_error(), "arch"),
          "an input file as a model: status %d, '%s'", (int)s, ra_last_error());

    /* the network archs: their metadata is checked before any tensor */
    static const char *nets[] = {"swin_block", "swin", "vit"};
    for (size_t i = 0; i < sizeof nets / sizeof nets[0]; i++) {
        parts p;
        memset(&p, 0, sizeof p);
        set_meta(&p, "arch", nets[i]);
        char what[80];
        snprintf(what, sizeof what, "arch %s and nothing else", nets[i]);
        expect(&p, RA_ERR_FORMAT, "metadata", what);
        set_meta(&p, "dim", "-3");
        set_meta(&p, "img_size", "abc");
        snprintf(what, sizeof what, "arch %s with garbage metadata", nets[i]);
        expect(&p, RA_ERR_FORMAT, "metadata", what);
        parts_free(&p);
    }

    parts empty;
    memset(&empty, 0, sizeof empty);
    expect(&empty, RA_ERR_FORMAT, "arch", "an empty file (no tensors, no metadata)");
    set_meta(&empty, "arch", "vit_attention");
    set_meta(&empty, "dim", "8");
    set_meta(&empty, "num_heads", "2");
    expect(&empty, RA_ERR_FORMAT, "missing", "vit metadata without tensors");
    parts_free(&empty);

    /* NULL arguments and NULL handles */
    CHECK(ra_model_load(NULL, path) == RA_ERR_ARG, "ra_model_load(NULL)");
    CHECK(ra_model_from_file(&m, NULL) == RA_ERR_ARG && m == NULL, "from_file(NULL file)");
    CHECK(ra_model_arch(NULL) == RA_ARCH_NONE && ra_model_attn(NULL) == NULL, "NULL model");
    ra_model_free(NULL);
}

/* ---- main --------------------------------------------------------------- */

static void cleanup(void) {
    char path[300];
    for (int i = 0; i < nfiles; i++) {
        snprintf(path, sizeof path, "%s/v%03d.safetensors", tmpdir, i);
        unlink(path);
    }
    if (rmdir(tmpdir) != 0) fprintf(stderr, "note: %s not removed\n", tmpdir);
}

int main(int argc, char **argv) {
    fixtures = argc > 1 ? argv[1] : "tests/fixtures";
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_fixtures();
    test_metadata();
    test_tensors();
    test_each_tensor();
    test_accepted();
    test_io();
    printf("%d model files written and read: %d must be refused, %d accepted\n", nfiles,
           nrefused, naccepted);
    cleanup();
    return check_done();
}
