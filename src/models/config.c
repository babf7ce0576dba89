/* config.c - a model folder's config.json as relattn metadata
 * (models/config.h; the rules in docs/reference.md, section 2,
 * "config.json").
 *
 * Two writers of config.json are read:
 *   transformers  "model_type" swin, swinv2 or vit: the fields of SwinConfig,
 *                 Swinv2Config and ViTConfig (configuration_*.py), a field
 *                 left out taking the config class's default; classes from
 *                 "architectures" and "id2label".
 *   timm          "architecture" (a model name, perhaps with a ".tag"),
 *                 "num_classes", "model_args" (the constructor's keyword
 *                 arguments, which relattn's metadata names follow),
 *                 "pretrained_cfg" (input_size, mean, std), "label_names"
 *                 (timm's _hub.py save_config_for_hf / _parse_model_cfg).
 * The more specific source of a key wins: timm's model_args, then the
 * pretrained_cfg, then what the name says, then the widths of timm's
 * named sizes.
 *
 * The file is untrusted: at most RAI_CONFIG_MAX_BYTES, nested at most
 * CFG_MAX_NEST deep (checked before jansson recurses), parsed strictly
 * (duplicate keys, NaN, trailing bytes, NUL refused), and every value used
 * checked for its type and range: a failure is one line naming the key. */
#define _POSIX_C_SOURCE 200809L
#include "models/config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CFG_MAX_NEST 32
#define CFG_MAX_SIZE 65536        /* an image side, patch, window, width (swin.c's bounds) */
#define CFG_MAX_CLASSES (1 << 24)
#define CFG_MAX_STAGES 8
#define CFG_MAX_LABEL 4096        /* bytes of one class name */
#define CFG_MAX_NAME 128          /* bytes of a model_type, architecture, tag, act */

typedef struct {
    rai_config_item *v;
    int n, cap;
} cfg_out;

/* ---- the items ----------------------------------------------------------- */

void rai_config_free(rai_config_item *items, int n) {
    for (int i = 0; items && i < n; i++) free(items[i].value);
    free(items);
}

static int has(const cfg_out *o, const char *key) {
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->v[i].key, key)) return 1;
    return 0;
}

/* Add key = value from `from`, unless a more specific source gave the key
 * already. */
static ra_status put(cfg_out *o, const char *key, const char *value, const char *from) {
    if (has(o, key)) return RA_OK;
    if (o->n == o->cap) {
        const int cap = o->cap ? 2 * o->cap : 16;
        rai_config_item *v = realloc(o->v, (size_t)cap * sizeof *v);
        if (!v) return rai_fail(RA_ERR_NOMEM, "out of memory for config.json");
        o->v = v, o->cap = cap;
    }
    rai_config_item *it = &o->v[o->n];
    memset(it, 0, sizeof *it);
    snprintf(it->key, sizeof it->key, "%s", key);
    snprintf(it->from, sizeof it->from, "%s", from);
    if (!(it->value = rai_strdup(value))) return rai_fail(RA_ERR_NOMEM, "out of memory for config.json");
    o->n++;
    return RA_OK;
}

/* ---- values ---------------------------------------------------------------- */

/* The shortest decimal that reads back as x. */
static void fmt_double(char *buf, size_t n, double x) {
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, x);
        if (strtod(buf, NULL) == x) return;
    }
}

static ra_status bad(const char *where, const char *what) {
    return rai_fail(RA_ERR_FORMAT, "config.json %s %s", where, what);
}

static ra_status as_int(const json_t *v, const char *where, double lo, double hi, long long *out) {
    *out = 0;
    if (!json_is_integer(v)) return bad(where, "must be an integer");
    const long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return rai_fail(RA_ERR_FORMAT, "config.json %s = %lld is outside %.0f..%.0f", where, x, lo,
                        hi);
    *out = x;
    return RA_OK;
}

static ra_status as_num(const json_t *v, const char *where, double lo, double hi, double *out) {
    *out = 0;
    if (!json_is_number(v)) return bad(where, "must be a number");
    const double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return rai_fail(RA_ERR_FORMAT, "config.json %s = %g is outside %g..%g", where, x, lo, hi);
    *out = x;
    return RA_OK;
}

static ra_status as_str(const json_t *v, const char *where, size_t max, const char **out) {
    *out = "";
    if (!json_is_string(v)) return bad(where, "must be a string");
    if (json_string_length(v) > max)
        return rai_fail(RA_ERR_FORMAT, "config.json %s is longer than %zu bytes", where, max);
    *out = json_string_value(v);
    return RA_OK;
}

/* An array of 1..max integers in [lo, hi] as "a,b,c" into buf. */
static ra_status as_list(const json_t *v, const char *where, size_t max, double lo, double hi,
                         char *buf, size_t n) {
    if (!json_is_array(v) || json_array_size(v) < 1 || json_array_size(v) > max)
        return rai_fail(RA_ERR_FORMAT, "config.json %s must be a list of 1 to %zu integers",
                        where, max);
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        long long x;
        ra_status st = as_int(json_array_get(v, i), where, lo, hi, &x);
        if (st) return st;
        k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%lld", i ? "," : "", x);
    }
    return k < n ? RA_OK : bad(where, "is too long");
}

/* ---- fields -------------------------------------------------------------- */

typedef enum { T_INT, T_SIZE, T_LIST, T_NUM, T_BOOL, T_STR } cfg_type;

/* A field of the JSON, the metadata key it gives, its type and range. */
typedef struct {
    const char *json, *key;
    cfg_type type;
    double lo, hi;
} cfg_field;

/* v (field f, at `where`) as a metadata value in buf. */
static ra_status format_field(const cfg_field *f, const json_t *v, const char *where, char *buf,
                              size_t n) {
    long long x;
    double d;
    const char *s;
    ra_status st = RA_OK;
    switch (f->type) {
    case T_INT:
        if (!(st = as_int(v, where, f->lo, f->hi, &x))) snprintf(buf, n, "%lld", x);
        return st;
    case T_SIZE:   /* an int, or [h, w] (transformers and timm take both) */
        if (json_is_array(v) && json_array_size(v) != 2) return bad(where, "must be an integer or two");
        return json_is_array(v) ? as_list(v, where, 2, f->lo, f->hi, buf, n)
                                : format_field(&(cfg_field){f->json, f->key, T_INT, f->lo, f->hi},
                                               v, where, buf, n);
    case T_LIST:
        return as_list(v, where, CFG_MAX_STAGES, f->lo, f->hi, buf, n);
    case T_NUM:
        if (!(st = as_num(v, where, f->lo, f->hi, &d))) fmt_double(buf, n, d);
        return st;
    case T_BOOL:
        if (!json_is_boolean(v)) return bad(where, "must be true or false");
        snprintf(buf, n, "%s", json_is_true(v) ? "true" : "false");
        return RA_OK;
    case T_STR:
        if (!(st = as_str(v, where, CFG_MAX_NAME, &s))) snprintf(buf, n, "%s", s);
        return st;
    }
    return rai_fail(RA_ERR_INTERNAL, "config: field type");
}

/* Field f of obj (its name prefixed by `in` in messages), if present and
 * not null (Python's None: the constructor's default), as an item. */
static ra_status put_field(cfg_out *o, const json_t *obj, const char *in, const cfg_field *f) {
    const json_t *v = json_object_get(obj, f->json);
    if (!v || json_is_null(v)) return RA_OK;
    char where[96], from[112], buf[256];
    snprintf(where, sizeof where, "%s%s", in, f->json);
    snprintf(from, sizeof from, "config.json %s", where);
    ra_status st = format_field(f, v, where, buf, sizeof buf);
    return st ? st : put(o, f->key, buf, from);
}

/* The field of root, else the config class's default (defaults: a JSON
 * object of them). */
static ra_status put_field_or_default(cfg_out *o, const json_t *root, const json_t *defaults,
                                      const char *cls, const cfg_field *f) {
    if (json_object_get(root, f->json)) return put_field(o, root, "", f);
    char from[48];
    snprintf(from, sizeof from, "%s default %s", cls, f->json);
    const json_t *v = json_object_get(defaults, f->json);
    char buf[256];
    ra_status st = v ? format_field(f, v, from, buf, sizeof buf) : RA_OK;
    return st || !v ? st : put(o, f->key, buf, from);
}

/* ---- classes --------------------------------------------------------------- */

/* Class names as the "labels" metadata (a JSON array, null where a class
 * has no name), from `from`. */
static ra_status put_labels(cfg_out *o, json_t *arr, const char *from) {
    char *s = json_dumps(arr, JSON_COMPACT);
    if (!s) return rai_fail(RA_ERR_NOMEM, "out of memory for the class names");
    ra_status st = put(o, "labels", s, from);
    free(s);
    return st;
}

/* A decimal class index key ("17": no sign, no leading zero) below n. */
static int class_index(const char *k, long long n, long long *out) {
    long long v = 0;
    if (!*k || (k[0] == '0' && k[1])) return 0;
    for (; *k; k++) {
        if (*k < '0' || *k > '9' || (v = v * 10 + (*k - '0')) >= n) return 0;
    }
    *out = v;
    return 1;
}

/* An object {"index": "name"} as an array of n entries (null where no
 * name); every index below n, none twice; names are strings. */
static ra_status names_from_object(const json_t *obj, long long n, const char *where, json_t **out) {
    json_t *arr = json_array();
    ra_status st = arr ? RA_OK : rai_fail(RA_ERR_NOMEM, "out of memory for the class names");
    for (long long i = 0; i < n && !st; i++)
        if (json_array_append_new(arr, json_null())) st = rai_fail(RA_ERR_NOMEM, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        long long i;
        const char *name;
        if (st) break;
        if (!class_index(key, n, &i))
            st = rai_fail(RA_ERR_FORMAT, "config.json %s key \"%.20s\" is not a class index "
                          "below %lld", where, key, n);
        else if (!(st = as_str(v, where, CFG_MAX_LABEL, &name)) &&
                 !json_is_null(json_array_get(arr, (size_t)i)))
            st = rai_fail(RA_ERR_FORMAT, "config.json %s names class %lld twice", where, i);
        else if (!st && json_array_set(arr, (size_t)i, v))
            st = rai_fail(RA_ERR_NOMEM, "out of memory");
    }
    if (st) json_decref(arr);
    else *out = arr;
    return st;
}

/* transformers: num_classes from "architectures" (a classifier or none),
 * labels from id2label, every index 0..n-1 named once. */
static ra_status hf_classes(cfg_out *o, const json_t *root) {
    const json_t *archs = json_object_get(root, "architectures");
    if (!archs) return RA_OK;   /* whether there is a classifier the weights tell */
    if (!json_is_array(archs) || json_array_size(archs) > 16)
        return bad("architectures", "must be a list of at most 16 class names");
    int classifier = 0;
    for (size_t i = 0; i < json_array_size(archs); i++) {
        const char *s;
        ra_status st = as_str(json_array_get(archs, i), "architectures", CFG_MAX_NAME, &s);
        if (st) return st;
        const size_t len = strlen(s), k = strlen("ForImageClassification");
        classifier |= len > k && !strcmp(s + len - k, "ForImageClassification");
    }
    if (!classifier) return put(o, "num_classes", "0", "config.json architectures");
    const json_t *id2label = json_object_get(root, "id2label");
    long long n = 2;   /* transformers' num_labels without id2label */
    ra_status st = RA_OK;
    if (json_object_get(root, "num_labels"))
        st = as_int(json_object_get(root, "num_labels"), "num_labels", 1, CFG_MAX_CLASSES, &n);
    if (!st && id2label && (!json_is_object(id2label) || json_object_size(id2label) < 1 ||
                            json_object_size(id2label) > CFG_MAX_CLASSES))
        st = bad("id2label", "must be an object of 1 to 16777216 class names");
    if (!st && id2label && json_object_get(root, "num_labels") &&
        n != (long long)json_object_size(id2label))
        st = rai_fail(RA_ERR_FORMAT, "config.json num_labels = %lld but id2label names %zu "
                      "classes", n, json_object_size(id2label));
    if (st) return st;
    if (id2label) n = (long long)json_object_size(id2label);
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", n);
    st = put(o, "num_classes", buf,
             id2label                                ? "config.json id2label"
             : json_object_get(root, "num_labels") ? "config.json num_labels"
                                                   : "transformers default num_labels");
    json_t *arr = NULL;
    if (!st && id2label && !(st = names_from_object(id2label, n, "id2label", &arr))) {
        st = put_labels(o, arr, "config.json id2label");
        json_decref(arr);
    }
    return st;
}

/* ---- transformers ------------------------------------------------------------ */

static const cfg_field hf_swin_fields[] = {
    {"image_size", "img_size", T_SIZE, 1, CFG_MAX_SIZE},
    {"patch_size", "patch_size", T_SIZE, 1, 4096},
    {"num_channels", "in_chans", T_INT, 1, 4096},
    {"embed_dim", "embed_dim", T_INT, 1, CFG_MAX_SIZE},
    {"depths", "depths", T_LIST, 0, 1024},
    {"num_heads", "num_heads", T_LIST, 1, CFG_MAX_SIZE},
    {"window_size", "window_size", T_SIZE, 1, CFG_MAX_SIZE},
    {"mlp_ratio", "mlp_ratio", T_NUM, 1e-6, 1e6},
    {"qkv_bias", "qkv_bias", T_BOOL, 0, 0},
    {"use_absolute_embeddings", "ape", T_BOOL, 0, 0},
    {"pretrained_window_sizes", "pretrained_window_sizes", T_LIST, 0, 4096}};   /* swinv2 */
#define HF_SWIN_V1_FIELDS 10

static const cfg_field hf_vit_fields[] = {
    {"image_size", "img_size", T_SIZE, 1, CFG_MAX_SIZE},
    {"patch_size", "patch_size", T_SIZE, 1, 4096},
    {"num_channels", "in_chans", T_INT, 1, 4096},
    {"hidden_size", "embed_dim", T_INT, 1, CFG_MAX_SIZE},
    {"num_hidden_layers", "depth", T_INT, 0, 4096},
    {"num_attention_heads", "num_heads", T_INT, 1, CFG_MAX_SIZE},
    {"qkv_bias", "qkv_bias", T_BOOL, 0, 0}};

/* SwinConfig's, Swinv2Config's and ViTConfig's defaults for what a file
 * leaves out. */
static const char hf_swin_defaults[] =
    "{\"image_size\": 224, \"patch_size\": 4, \"num_channels\": 3, \"embed_dim\": 96, "
    "\"depths\": [2, 2, 6, 2], \"num_heads\": [3, 6, 12, 24], \"window_size\": 7, "
    "\"mlp_ratio\": 4.0, \"qkv_bias\": true, \"use_absolute_embeddings\": false, "
    "\"pretrained_window_sizes\": [0, 0, 0, 0], \"hidden_act\": \"gelu\", "
    "\"layer_norm_eps\": 1e-5}";
static const char hf_vit_defaults[] =
    "{\"image_size\": 224, \"patch_size\": 16, \"num_channels\": 3, \"hidden_size\": 768, "
    "\"num_hidden_layers\": 12, \"num_attention_heads\": 12, \"intermediate_size\": 3072, "
    "\"qkv_bias\": true, \"hidden_act\": \"gelu\", \"layer_norm_eps\": 1e-12}";

/* root's key, else the default's. */
static const json_t *field_of(const json_t *root, const json_t *defaults, const char *key) {
    const json_t *v = json_object_get(root, key);
    return v ? v : json_object_get(defaults, key);
}

/* What relattn cannot vary: the activation (exact GELU) and, for Swin, the
 * LayerNorm eps (1e-5; ViT's is 1e-6 in relattn whatever the config says,
 * transformers' default being 1e-12: docs/reference.md). */
static ra_status hf_fixed(const json_t *root, const json_t *defaults, int vit, double *eps_out) {
    const char *act;
    double eps;
    ra_status st = as_str(field_of(root, defaults, "hidden_act"), "hidden_act", CFG_MAX_NAME, &act);
    if (!st && strcmp(act, "gelu"))
        st = rai_fail(RA_ERR_FORMAT, "config.json hidden_act = \"%.40s\": relattn computes the "
                      "exact GELU (\"gelu\") only", act);
    if (!st) st = as_num(field_of(root, defaults, "layer_norm_eps"), "layer_norm_eps", 0, 1, &eps);
    if (!st && !vit && fabs(eps - 1e-5) > 1e-11)
        st = rai_fail(RA_ERR_FORMAT, "config.json layer_norm_eps = %g: relattn's Swin "
                      "LayerNorms use 1e-05", eps);
    if (!st && vit && !(eps > 0 && eps <= 1e-2))
        st = rai_fail(RA_ERR_FORMAT, "config.json layer_norm_eps = %g is not in (0, 0.01]", eps);
    if (!st && vit && eps_out) *eps_out = eps;
    return st;
}

/* The stage lists of a Swin config agree in length. */
static ra_status hf_swin_stages(const json_t *root, const json_t *defaults, int v2) {
    const size_t nd = json_array_size(field_of(root, defaults, "depths"));
    const size_t nh = json_array_size(field_of(root, defaults, "num_heads"));
    const size_t np = json_array_size(field_of(root, defaults, "pretrained_window_sizes"));
    if (nh != nd)
        return rai_fail(RA_ERR_FORMAT, "config.json depths has %zu stages but num_heads %zu",
                        nd, nh);
    if (v2 && np != nd)
        return rai_fail(RA_ERR_FORMAT, "config.json depths has %zu stages but "
                        "pretrained_window_sizes %zu", nd, np);
    return RA_OK;
}

/* mlp_ratio = intermediate_size / hidden_size, written so that vit.c's
 * int(dim * mlp_ratio) gives intermediate_size back. */
static ra_status hf_vit_ratio(cfg_out *o, const json_t *root, const json_t *defaults) {
    long long dim, hidden;
    ra_status st = as_int(field_of(root, defaults, "hidden_size"), "hidden_size", 1,
                          CFG_MAX_SIZE, &dim);
    if (!st) st = as_int(field_of(root, defaults, "intermediate_size"), "intermediate_size", 1,
                         (double)CFG_MAX_SIZE * 64, &hidden);
    if (st) return st;
    double r = (double)hidden / (double)dim;
    char buf[40];
    for (int tries = 0; tries < 4; tries++, r = nextafter(r, INFINITY)) {
        fmt_double(buf, sizeof buf, r);
        if ((long long)((double)dim * strtod(buf, NULL)) == hidden) break;
    }
    if ((long long)((double)dim * strtod(buf, NULL)) != hidden)
        return rai_fail(RA_ERR_FORMAT, "config.json intermediate_size %lld: no mlp_ratio gives it "
                        "for hidden_size %lld", hidden, dim);
    return put(o, "mlp_ratio", buf, "config.json intermediate_size");
}

/* transformers' SwinBackbone / Swinv2Backbone: the stages it hands out,
 * out_indices (or out_features named after stage_names "stem", "stage1",
 * ...; neither: transformers' default, the last stage), as the metadata
 * out_indices (1 the first stage; the stem, 0, is not read). Other
 * architectures keep whatever out_features their config carries unread. */
static ra_status hf_backbone(cfg_out *o, const json_t *root, const json_t *defaults) {
    const json_t *archs = json_object_get(root, "architectures");
    int backbone = 0;
    for (size_t i = 0; json_is_array(archs) && i < json_array_size(archs); i++) {
        const char *s = json_string_value(json_array_get(archs, i));
        const size_t len = s ? strlen(s) : 0, k = strlen("Backbone");
        backbone |= len > k && !strcmp(s + len - k, "Backbone");
    }
    if (!backbone) return RA_OK;
    const long long nst = (long long)json_array_size(field_of(root, defaults, "depths"));
    const json_t *idx = json_object_get(root, "out_indices");
    const json_t *feat = json_object_get(root, "out_features");
    const char *from = "config.json out_indices";
    if (idx && json_is_null(idx)) idx = NULL;
    if (feat && json_is_null(feat)) feat = NULL;
    const json_t *list = idx ? idx : feat;
    if (!idx) from = feat ? "config.json out_features" : "transformers default out_features";
    if (list && (!json_is_array(list) || json_array_size(list) < 1 ||
                 json_array_size(list) > (size_t)nst))
        return bad(idx ? "out_indices" : "out_features", "must be a list of 1 to depths' stages");
    char buf[160];
    size_t len = 0;
    for (size_t i = 0; i < (list ? json_array_size(list) : 1); i++) {
        long long k = nst;   /* transformers' default: the last stage */
        ra_status st = RA_OK;
        if (idx) {
            st = as_int(json_array_get(idx, i), "out_indices", 0, (double)nst, &k);
        } else if (feat) {
            const char *name;
            st = as_str(json_array_get(feat, i), "out_features", CFG_MAX_NAME, &name);
            char *end = NULL;
            if (!st && !strcmp(name, "stem")) k = 0;
            else if (!st && (strncmp(name, "stage", 5) || (k = strtoll(name + 5, &end, 10)) < 1 ||
                             k > nst || *end))
                st = rai_fail(RA_ERR_FORMAT, "config.json out_features \"%.40s\" is not a stage "
                              "(stem, stage1 .. stage%lld)", name, nst);
        }
        if (st) return st;
        if (k == 0)
            return rai_fail(RA_ERR_FORMAT, "%s names the stem (0, the patch embedding's output): "
                            "relattn hands out stages only", from);
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%lld", i ? "," : "", k);
        if (len >= sizeof buf) return bad("out_indices", "is too long");
    }
    return put(o, "out_indices", buf, from);
}

static ra_status from_transformers(cfg_out *o, const json_t *root) {
    const char *mt;
    ra_status st = as_str(json_object_get(root, "model_type"), "model_type", CFG_MAX_NAME, &mt);
    if (st) return st;
    const int vit = !strcmp(mt, "vit"), v2 = !strcmp(mt, "swinv2");
    if (!vit && !v2 && strcmp(mt, "swin"))
        return rai_fail(RA_ERR_FORMAT, "config.json model_type \"%.40s\" is not one relattn "
                        "reads (swin, swinv2, vit)", mt);
    json_error_t e;
    json_t *defaults = json_loads(vit ? hf_vit_defaults : hf_swin_defaults, 0, &e);
    if (!defaults) return rai_fail(RA_ERR_NOMEM, "out of memory for config.json");
    const char *cls = vit ? "ViTConfig" : v2 ? "Swinv2Config" : "SwinConfig";
    st = put(o, "arch", vit ? "vit" : mt, "config.json model_type");
    double eps = 0;
    if (!st) st = hf_fixed(root, defaults, vit, &eps);
    if (!st && vit) {   /* transformers' ViT: 1e-12 where timm has 1e-6 */
        char buf[40];
        fmt_double(buf, sizeof buf, eps);
        st = put(o, "layer_norm_eps", buf, json_object_get(root, "layer_norm_eps")
                                               ? "config.json layer_norm_eps"
                                               : "ViTConfig default layer_norm_eps");
    }
    const cfg_field *fl = vit ? hf_vit_fields : hf_swin_fields;
    const size_t nf = vit ? sizeof hf_vit_fields / sizeof *fl
                          : v2 ? sizeof hf_swin_fields / sizeof *fl : HF_SWIN_V1_FIELDS;
    for (size_t i = 0; i < nf && !st; i++) st = put_field_or_default(o, root, defaults, cls, &fl[i]);
    if (!st && !vit) st = hf_swin_stages(root, defaults, v2);   /* (their types checked above) */
    if (!st && vit) st = hf_vit_ratio(o, root, defaults);
    if (!st) st = hf_classes(o, root);
    if (!st && !vit) st = hf_backbone(o, root, defaults);
    json_decref(defaults);
    return st;
}

/* ---- timm ------------------------------------------------------------------ */

/* Constructor arguments relattn's archs read under the same names. */
static const cfg_field timm_swin_args[] = {
    {"img_size", "img_size", T_SIZE, 1, CFG_MAX_SIZE},
    {"patch_size", "patch_size", T_SIZE, 1, 4096},
    {"in_chans", "in_chans", T_INT, 1, 4096},
    {"embed_dim", "embed_dim", T_INT, 1, CFG_MAX_SIZE},
    {"depths", "depths", T_LIST, 0, 1024},
    {"num_heads", "num_heads", T_LIST, 1, CFG_MAX_SIZE},
    {"window_size", "window_size", T_SIZE, 1, CFG_MAX_SIZE},
    {"mlp_ratio", "mlp_ratio", T_NUM, 1e-6, 1e6},
    {"qkv_bias", "qkv_bias", T_BOOL, 0, 0},
    {"pretrained_window_sizes", "pretrained_window_sizes", T_LIST, 0, 4096}};   /* swinv2 */
static const cfg_field timm_vit_args[] = {
    {"img_size", "img_size", T_SIZE, 1, CFG_MAX_SIZE},
    {"patch_size", "patch_size", T_SIZE, 1, 4096},
    {"in_chans", "in_chans", T_INT, 1, 4096},
    {"embed_dim", "embed_dim", T_INT, 1, CFG_MAX_SIZE},
    {"depth", "depth", T_INT, 0, 4096},
    {"num_heads", "num_heads", T_INT, 1, CFG_MAX_SIZE},
    {"mlp_ratio", "mlp_ratio", T_NUM, 1e-6, 1e6},
    {"qkv_bias", "qkv_bias", T_BOOL, 0, 0},
    {"qk_norm", "qk_norm", T_BOOL, 0, 0},
    {"init_values", "init_values", T_NUM, -1e6, 1e6},
    {"class_token", "class_token", T_BOOL, 0, 0},
    {"reg_tokens", "reg_tokens", T_INT, 0, CFG_MAX_SIZE},
    {"no_embed_class", "no_embed_class", T_BOOL, 0, 0},
    {"pos_embed", "pos_embed", T_STR, 0, 0},
    {"pre_norm", "pre_norm", T_BOOL, 0, 0},
    {"final_norm", "final_norm", T_BOOL, 0, 0},
    {"fc_norm", "fc_norm", T_BOOL, 0, 0},
    {"global_pool", "global_pool", T_STR, 0, 0},
    {"pool_include_prefix", "pool_include_prefix", T_BOOL, 0, 0},
    {"proj_bias", "proj_bias", T_BOOL, 0, 0},
    {"dynamic_img_size", "dynamic_img_size", T_BOOL, 0, 0},
    {"dynamic_img_pad", "dynamic_img_pad", T_BOOL, 0, 0}};

/* "12" -> 12 (1..CFG_MAX_SIZE, digits only), else 0. */
static int small_num(const char *s, size_t len) {
    long v = 0;
    if (!len || len > 5) return 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
    }
    return v >= 1 && v <= CFG_MAX_SIZE ? (int)v : 0;
}

/* "N" -> *a = 0, *b = N; "AtoN" -> *a = A, *b = N; else 0. */
static int num_or_to(const char *s, int *a, int *b) {
    const char *to = strstr(s, "to");
    *a = to ? small_num(s, (size_t)(to - s)) : 0;
    *b = to ? small_num(to + 2, strlen(to + 2)) : small_num(s, strlen(s));
    return *b && (!to || *a);
}

enum { ARCH_SWIN, ARCH_SWINV2, ARCH_VIT };

/* The widths timm gives a named size: Swin and SwinV2 (swin_transformer.py,
 * swin_transformer_v2.py: the official widths, patch 4), the plain ViTs
 * (vision_transformer.py, vit_{size}_patch{P}_{img}: mlp_ratio 4, qkv_bias). */
static ra_status timm_widths(cfg_out *o, int arch, const char *size, int plain, int pwin) {
    static const struct { const char *size, *embed_dim, *depths, *heads; } swin[] = {
        {"tiny", "96", "2,2,6,2", "3,6,12,24"},
        {"small", "96", "2,2,18,2", "3,6,12,24"},
        {"base", "128", "2,2,18,2", "4,8,16,32"},
        {"large", "192", "2,2,18,2", "6,12,24,48"}};
    static const struct { const char *size, *embed_dim, *depth, *heads; } vit[] = {
        {"tiny", "192", "12", "3"},    {"small", "384", "12", "6"}, {"base", "768", "12", "12"},
        {"large", "1024", "24", "16"}, {"huge", "1280", "32", "16"}};
    char from[48];
    snprintf(from, sizeof from, "timm's %.12s size (architecture)", size);
    ra_status st = RA_OK;
    for (size_t i = 0; arch != ARCH_VIT && i < sizeof swin / sizeof *swin; i++) {
        if (strcmp(size, swin[i].size)) continue;
        st = put(o, "embed_dim", swin[i].embed_dim, from);
        if (!st) st = put(o, "depths", swin[i].depths, from);
        if (!st) st = put(o, "num_heads", swin[i].heads, from);
        if (!st && arch == ARCH_SWINV2) st = put(o, "patch_size", "4", from);
        /* swinv2_*_window12to*: fine-tuned from window 12, whose last stage
         * (a 6x6 map at 192) had window 6 */
        if (!st && arch == ARCH_SWINV2 && pwin == 12)
            st = put(o, "pretrained_window_sizes", "12,12,12,6", from);
    }
    for (size_t i = 0; arch == ARCH_VIT && plain && i < sizeof vit / sizeof *vit; i++) {
        if (strcmp(size, vit[i].size)) continue;
        st = put(o, "embed_dim", vit[i].embed_dim, from);
        if (!st) st = put(o, "depth", vit[i].depth, from);
        if (!st) st = put(o, "num_heads", vit[i].heads, from);
        if (!st) st = put(o, "mlp_ratio", "4", from);
        if (!st) st = put(o, "qkv_bias", "true", from);
    }
    return st;
}

/* What a timm model name (tag removed) says, part by part after the
 * family and size: patchP, windowW or windowAtoW (SwinV2 fine-tuned from
 * window A), an image side N or AtoN; then the widths of its size. Other
 * parts (clip, reg4, gap, in22k, ...) make a ViT a variant, whose widths
 * are left to its weights. */
static ra_status timm_name(cfg_out *o, const char *name, int arch) {
    char part[8][CFG_MAX_NAME + 1];
    int n = 0;
    for (const char *p = name; n < 8; n++) {
        const size_t len = strcspn(p, "_");
        snprintf(part[n], sizeof part[n], "%.*s", (int)len, p);
        if (!p[len]) {
            n++;
            break;
        }
        p += len + 1;
    }
    const char *from = "config.json architecture";
    char buf[16];
    int pwin = 0, variant = n >= 8, a, b;
    ra_status st = RA_OK;
    for (int i = 2; i < n && !st; i++) {
        const char *t = part[i];
        if (!strncmp(t, "patch", 5) && (b = small_num(t + 5, strlen(t + 5)))) {
            snprintf(buf, sizeof buf, "%d", b);
            st = put(o, "patch_size", buf, from);
        } else if (arch != ARCH_VIT && !strncmp(t, "window", 6) && num_or_to(t + 6, &a, &b)) {
            snprintf(buf, sizeof buf, "%d", b);
            st = put(o, "window_size", buf, from);
            pwin = a;
        } else if (num_or_to(t, &a, &b)) {
            snprintf(buf, sizeof buf, "%d", b);
            st = put(o, "img_size", buf, from);
        } else {
            variant = 1;
        }
    }
    return st ? st : timm_widths(o, arch, n > 1 ? part[1] : "", !variant && n == 4, pwin);
}

/* pretrained_cfg's input_size [C, H, W]: in_chans and img_size. */
static ra_status timm_input(cfg_out *o, const json_t *pcfg) {
    const json_t *v = json_object_get(pcfg, "input_size");
    if (!v) return RA_OK;
    const char *w = "pretrained_cfg.input_size";
    if (!json_is_array(v) || json_array_size(v) != 3) return bad(w, "must be [C, H, W]");
    long long c = 0, h = 0, wd = 0;
    ra_status st = as_int(json_array_get(v, 0), w, 1, 4096, &c);
    if (!st) st = as_int(json_array_get(v, 1), w, 1, CFG_MAX_SIZE, &h);
    if (!st) st = as_int(json_array_get(v, 2), w, 1, CFG_MAX_SIZE, &wd);
    if (st) return st;
    char buf[40], from[48];
    snprintf(from, sizeof from, "config.json %s", w);
    snprintf(buf, sizeof buf, "%lld", c);
    st = put(o, "in_chans", buf, from);
    if (h == wd) snprintf(buf, sizeof buf, "%lld", h);
    else snprintf(buf, sizeof buf, "%lld,%lld", h, wd);
    return st ? st : put(o, "img_size", buf, from);
}

/* A mean or std (1 or 3 numbers; std > 0) as "r,g,b": obj's src (named
 * where, in file) as metadata key. */
static ra_status norm_values(cfg_out *o, const json_t *obj, const char *src, const char *key,
                             const char *file, const char *where) {
    const json_t *v = json_object_get(obj, src);
    if (!v) return RA_OK;
    char buf[96];
    if (!json_is_array(v) || (json_array_size(v) != 1 && json_array_size(v) != 3))
        return bad(where, "must be a list of 1 or 3 numbers");
    const int is_std = !strcmp(key, "std");
    size_t k = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        double x;
        ra_status st = as_num(json_array_get(v, i), where, is_std ? 1e-12 : -1e6, 1e6, &x);
        if (st) return st;
        if (i) buf[k++] = ',';
        fmt_double(buf + k, sizeof buf - k, x);
        k += strlen(buf + k);
    }
    char from[64];
    snprintf(from, sizeof from, "%s %s", file, where);
    return put(o, key, buf, from);
}

/* pretrained_cfg's mean and std. */
static ra_status timm_norm(cfg_out *o, const json_t *pcfg, const char *key) {
    char where[48];
    snprintf(where, sizeof where, "pretrained_cfg.%s", key);
    return norm_values(o, pcfg, key, key, "config.json", where);
}

/* pretrained_cfg's crop_pct: classify resizes to img_size / crop_pct
 * before its centre crop, as timm's evaluation transform. */
static ra_status timm_crop(cfg_out *o, const json_t *pcfg) {
    const json_t *v = json_object_get(pcfg, "crop_pct");
    double x;
    char buf[40];
    if (!v || json_is_null(v)) return RA_OK;
    ra_status st = as_num(v, "pretrained_cfg.crop_pct", 0.05, 1.0, &x);
    if (st) return st;
    fmt_double(buf, sizeof buf, x);
    return put(o, "crop_pct", buf, "config.json pretrained_cfg.crop_pct");
}

/* pretrained_cfg's interpolation and crop_mode (timm's evaluation
 * transform; the resize follows from img_size and crop_pct:
 * src/models/transform.c). */
static ra_status timm_transform(cfg_out *o, const json_t *pcfg) {
    static const char *const keys[][2] = {{"interpolation", "transform.interpolation"},
                                          {"crop_mode", "transform.crop_mode"}};
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(pcfg, keys[i][0]);
        char where[48], from[64];
        const char *s;
        if (!v || json_is_null(v)) continue;
        snprintf(where, sizeof where, "pretrained_cfg.%s", keys[i][0]);
        ra_status st = as_str(v, where, 16, &s);
        if (st) return st;
        if (i == 0 && ra_interp_parse(s) < 0)
            return bad(where, "must be nearest, bilinear, bicubic, lanczos, box or hamming");
        if (i == 1 && strcmp(s, "center") && strcmp(s, "squash") && strcmp(s, "border"))
            return bad(where, "must be center, squash or border");
        snprintf(from, sizeof from, "config.json %s", where);
        if ((st = put(o, keys[i][1], s, from))) return st;
    }
    return RA_OK;
}

/* A boolean field of an image processor (def when absent). */
static ra_status pp_bool(const json_t *root, const char *key, int def, int *out) {
    const json_t *v = json_object_get(root, key);
    *out = def;
    if (!v || json_is_null(v)) return RA_OK;
    if (!json_is_boolean(v)) return bad(key, "must be true or false");
    *out = json_is_true(v);
    return RA_OK;
}

/* An image processor's size or crop_size: an int (square), {height, width}
 * or {shortest_edge} (shorter allowed) as "HxW" or "shorter N". */
static ra_status pp_size(const json_t *v, const char *key, int shorter, char *buf, size_t n) {
    long long h = 0, w = 0;
    ra_status st = RA_OK;
    char where[64];
    if (json_is_integer(v)) {
        if ((st = as_int(v, key, 1, CFG_MAX_SIZE, &h))) return st;
        snprintf(buf, n, "%lldx%lld", h, h);
        return RA_OK;
    }
    if (!json_is_object(v)) return bad(key, "must be an integer or an object");
    const json_t *se = json_object_get(v, "shortest_edge");
    if (se && shorter) {
        if (json_object_get(v, "longest_edge"))
            return bad(key, "with longest_edge is not supported (give height and width)");
        snprintf(where, sizeof where, "%s.shortest_edge", key);
        if ((st = as_int(se, where, 1, CFG_MAX_SIZE, &h))) return st;
        snprintf(buf, n, "shorter %lld", h);
        return RA_OK;
    }
    snprintf(where, sizeof where, "%s.height", key);
    if ((st = as_int(json_object_get(v, "height"), where, 1, CFG_MAX_SIZE, &h))) return st;
    snprintf(where, sizeof where, "%s.width", key);
    if ((st = as_int(json_object_get(v, "width"), where, 1, CFG_MAX_SIZE, &w))) return st;
    snprintf(buf, n, "%lldx%lld", h, w);
    return RA_OK;
}

/* A resize or crop step of an image processor as transform key: "none"
 * when its flag is false, ViTImageProcessor's 224x224 when the size is
 * left out, else the size read (pp_size). */
static ra_status pp_step(cfg_out *o, const json_t *root, int on, const char *flag,
                         const char *field, int shorter, const char *key) {
    const json_t *v = json_object_get(root, field);
    char buf[64], from[96];
    if (!on) {
        snprintf(from, sizeof from, "preprocessor_config.json %s", flag);
        return put(o, key, "none", from);
    }
    if (!v || json_is_null(v)) {
        snprintf(from, sizeof from, "preprocessor_config.json (%s: the default)", field);
        return put(o, key, "224x224", from);
    }
    snprintf(from, sizeof from, "preprocessor_config.json %s", field);
    const ra_status st = pp_size(v, field, shorter, buf, sizeof buf);
    return st ? st : put(o, key, buf, from);
}

/* transformers' preprocessor_config.json (an image processor's settings,
 * ViTImageProcessor's defaults where a field is left out): the resize
 * (do_resize, size, resample), the centre crop (do_center_crop,
 * crop_size; the offset floored), the rescale (do_rescale,
 * rescale_factor) and the normalisation (do_normalize, image_mean,
 * image_std), as transform.* keys, mean and std. */
static ra_status from_preprocessor(cfg_out *o, const json_t *root) {
    const char *from = "preprocessor_config.json";
    int resize, crop, rescale, normalize;
    char buf[64];
    ra_status st = pp_bool(root, "do_resize", 1, &resize);
    if (!st) st = pp_bool(root, "do_center_crop", 0, &crop);
    if (!st) st = pp_bool(root, "do_rescale", 1, &rescale);
    if (!st) st = pp_bool(root, "do_normalize", 1, &normalize);
    const json_t *v;
    if (!st) st = pp_step(o, root, resize, "do_resize", "size", 1, "transform.resize");
    long long r = RA_INTERP_BILINEAR;
    if (!st && (v = json_object_get(root, "resample")) && !json_is_null(v))
        st = as_int(v, "resample", 0, 5, &r);
    if (!st) st = put(o, "transform.interpolation", ra_interp_name((ra_interp)r), from);
    if (!st) st = pp_step(o, root, crop, "do_center_crop", "crop_size", 0, "transform.crop");
    if (!st) st = put(o, "transform.crop_rounding", "floor", from);
    double f = 1.0 / 255;
    if (!st && rescale && (v = json_object_get(root, "rescale_factor")) && !json_is_null(v))
        st = as_num(v, "rescale_factor", 1e-12, 1e12, &f);
    if (!st) fmt_double(buf, sizeof buf, rescale ? f : 1.0);
    if (!st) st = put(o, "transform.rescale", buf, from);
    if (!st) st = put(o, "transform.normalize", normalize ? "true" : "false", from);
    if (!st) st = norm_values(o, root, "image_mean", "mean", from, "image_mean");
    if (!st) st = norm_values(o, root, "image_std", "std", from, "image_std");
    /* ViTImageProcessor's defaults (IMAGENET_STANDARD_MEAN and _STD) */
    if (!st && normalize) st = put(o, "mean", "0.5,0.5,0.5", "preprocessor_config.json (the default)");
    if (!st && normalize) st = put(o, "std", "0.5,0.5,0.5", "preprocessor_config.json (the default)");
    return st;
}

/* timm's label_names (a list, or {"index": name} where classes have gaps)
 * as labels, num_classes of them when num_classes is known (ncls >= 0). */
static ra_status timm_labels(cfg_out *o, const json_t *v, const char *where, long long ncls) {
    char from[48];
    snprintf(from, sizeof from, "config.json %s", where);
    json_t *arr = NULL;
    ra_status st = RA_OK;
    if (json_is_array(v)) {
        const size_t n = json_array_size(v);
        if (n < 1 || n > CFG_MAX_CLASSES || (ncls >= 0 && (long long)n != ncls))
            return rai_fail(RA_ERR_FORMAT, "config.json %s has %zu names for %lld classes",
                            where, n, ncls);
        for (size_t i = 0; i < n && !st; i++) {
            const char *s;
            st = as_str(json_array_get(v, i), where, CFG_MAX_LABEL, &s);
        }
        return st ? st : put_labels(o, (json_t *)v, from);
    }
    if (!json_is_object(v)) return bad(where, "must be a list or an object of class names");
    if (ncls < 1)
        return rai_fail(RA_ERR_FORMAT, "config.json %s: an object of names needs num_classes",
                        where);
    st = names_from_object(v, ncls, where, &arr);
    if (!st) st = put_labels(o, arr, from);
    json_decref(arr);
    return st;
}

/* The family of a timm model name: swin_, swinv2_, vit_ (not timm's other
 * models of those prefixes: swin_s3_ is AutoFormerV2, swinv2_cr_ Swin V2 CR). */
static int timm_family(const char *name) {
    if (!strncmp(name, "swinv2_cr_", 10) || !strncmp(name, "swin_s3_", 8)) return -1;
    if (!strncmp(name, "swinv2_", 7)) return ARCH_SWINV2;
    if (!strncmp(name, "swin_", 5)) return ARCH_SWIN;
    if (!strncmp(name, "vit_", 4)) return ARCH_VIT;
    return -1;
}

/* The class count: the root's num_classes, else pretrained_cfg's; -1. */
static ra_status timm_classes(cfg_out *o, const json_t *root, const json_t *pcfg, long long *n) {
    const json_t *v = json_object_get(root, "num_classes");
    const char *w = "num_classes";
    if (!v) v = json_object_get(pcfg, "num_classes"), w = "pretrained_cfg.num_classes";
    *n = -1;
    if (!v) return RA_OK;
    ra_status st = as_int(v, w, 0, CFG_MAX_CLASSES, n);
    char buf[32], from[48];
    snprintf(buf, sizeof buf, "%lld", *n);
    snprintf(from, sizeof from, "config.json %s", w);
    return st ? st : put(o, "num_classes", buf, from);
}

/* labels: label_names (the root's, pretrained_cfg's, or a legacy file's
 * labels); else ImageNet-1k's names for 1000 classes of a tag that says
 * in1k (timm's ImageNet-1k class order, torchvision's and transformers'). */
static ra_status timm_label_names(cfg_out *o, const json_t *root, const json_t *pcfg,
                                  long long ncls, const char *tag) {
    static const char *const keys[][2] = {{"label_names", "label_names"},
                                          {"label_names", "pretrained_cfg.label_names"},
                                          {"labels", "labels"}};
    for (int i = 0; i < 3; i++) {
        const json_t *v = json_object_get(i == 1 ? pcfg : root, keys[i][0]);
        if (v && !json_is_null(v)) return timm_labels(o, v, keys[i][1], ncls);
    }
    if (ncls == 1000 && strstr(tag, "in1k"))
        return put(o, "labels", rai_imagenet1k_labels_json(), "ImageNet-1k names (tag in1k)");
    return RA_OK;
}

static ra_status from_timm(cfg_out *o, const json_t *root) {
    const char *name, *tag = "";
    ra_status st = as_str(json_object_get(root, "architecture"), "architecture", CFG_MAX_NAME, &name);
    if (st) return st;
    char base[CFG_MAX_NAME + 1];
    snprintf(base, sizeof base, "%.*s", (int)strcspn(name, "."), name);
    const int arch = timm_family(base);
    if (arch < 0)
        return rai_fail(RA_ERR_FORMAT, "config.json architecture \"%.60s\" is not a timm model "
                        "relattn reads (swin_*, swinv2_*, vit_*; not swin_s3_*, swinv2_cr_*)", name);
    /* the current form, or the legacy one whose root is the pretrained_cfg */
    const json_t *pcfg = json_object_get(root, "pretrained_cfg");
    if (!pcfg) pcfg = root;
    else if (!json_is_object(pcfg)) return bad("pretrained_cfg", "must be an object");
    const json_t *args = json_object_get(root, "model_args");
    if (args && !json_is_object(args)) return bad("model_args", "must be an object");
    if (strchr(name, '.')) tag = strchr(name, '.') + 1;
    else if (json_object_get(pcfg, "tag") &&
             (st = as_str(json_object_get(pcfg, "tag"), "pretrained_cfg.tag", CFG_MAX_NAME, &tag)))
        return st;
    static const char *const arch_names[] = {"swin", "swinv2", "vit"};
    st = put(o, "arch", arch_names[arch], "config.json architecture");
    long long ncls = -1;
    if (!st) st = timm_classes(o, root, pcfg, &ncls);
    const cfg_field *fl = arch == ARCH_VIT ? timm_vit_args : timm_swin_args;
    const size_t nf = arch == ARCH_VIT ? sizeof timm_vit_args / sizeof *fl
                      : arch == ARCH_SWINV2 ? sizeof timm_swin_args / sizeof *fl
                                            : sizeof timm_swin_args / sizeof *fl - 1;
    for (size_t i = 0; args && i < nf && !st; i++) st = put_field(o, args, "model_args.", &fl[i]);
    if (!st && arch == ARCH_VIT)
        st = put_field(o, root, "", &(cfg_field){"global_pool", "global_pool", T_STR, 0, 0});
    if (!st) st = timm_input(o, pcfg);
    if (!st) st = timm_name(o, base, arch);
    if (!st) st = timm_norm(o, pcfg, "mean");
    if (!st) st = timm_norm(o, pcfg, "std");
    if (!st) st = timm_crop(o, pcfg);
    if (!st) st = timm_transform(o, pcfg);
    if (!st) st = timm_label_names(o, root, pcfg, ncls, tag);
    return st;
}

/* ---- the file --------------------------------------------------------------- */

/* Nesting deeper than CFG_MAX_NEST refused before jansson (which
 * recurses) sees it. */
static ra_status check_nesting(const char *s, size_t n) {
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if ((c == '{' || c == '[') && ++depth > CFG_MAX_NEST) {
            return rai_fail(RA_ERR_FORMAT, "config.json nests deeper than %d levels", CFG_MAX_NEST);
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return RA_OK;
}

ra_status rai_config_parse(const char *text, size_t len, rai_config_item **items, int *n) {
    if (!items || !n || (!text && len)) return rai_fail(RA_ERR_ARG, "rai_config_parse: NULL argument");
    *items = NULL, *n = 0;
    if (len > RAI_CONFIG_MAX_BYTES)
        return rai_fail(RA_ERR_FORMAT, "config.json has %zu bytes, more than %zu", len,
                        RAI_CONFIG_MAX_BYTES);
    if (len && memchr(text, 0, len)) return rai_fail(RA_ERR_FORMAT, "config.json holds a NUL byte");
    ra_status st = check_nesting(text, len);
    if (st) return st;
    json_error_t e;
    json_t *root = json_loadb(text ? text : "", len, JSON_REJECT_DUPLICATES, &e);
    if (!root)
        return rai_fail(RA_ERR_FORMAT, "config.json line %d, column %d: %.80s", e.line, e.column,
                        e.text);
    cfg_out o = {0};
    if (!json_is_object(root)) st = rai_fail(RA_ERR_FORMAT, "config.json is not a JSON object");
    else if (json_object_get(root, "model_type")) st = from_transformers(&o, root);
    else if (json_object_get(root, "architecture")) st = from_timm(&o, root);
    else if (json_object_get(root, "image_mean") || json_object_get(root, "image_processor_type") ||
             json_object_get(root, "feature_extractor_type"))
        st = from_preprocessor(&o, root);
    else st = rai_fail(RA_ERR_FORMAT, "config.json has neither model_type (transformers) nor "
                       "architecture (timm)");
    json_decref(root);
    if (st) {
        rai_config_free(o.v, o.n);
        return st;
    }
    *items = o.v, *n = o.n;
    return RA_OK;
}

/* The parser names its file config.json (the role, whatever the file's
 * name); a folder's other file, preprocessor_config.json, is named as it
 * is, in the failure and in where each value came from. */
#define PREPROCESSOR "preprocessor_config.json"

static const char *file_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static ra_status name_failure(ra_status st, const char *path) {
    static const char cfg[] = "config.json";
    const char *why = ra_last_error(), *name = file_name(path);
    if (strcmp(name, PREPROCESSOR) || strncmp(why, cfg, sizeof cfg - 1)) return st;
    char *rest = rai_strdup(why + sizeof cfg - 1);
    if (!rest) return st;
    st = rai_fail(st, "%s%s", name, rest);
    free(rest);
    return st;
}

static ra_status name_items(rai_config_item *items, int n, const char *path) {
    static const char cfg[] = "config.json";
    const char *name = file_name(path);
    if (strcmp(name, PREPROCESSOR)) return RA_OK;
    for (int i = 0; i < n; i++)
        if (!strncmp(items[i].from, cfg, sizeof cfg - 1)) {
            char from[sizeof items[i].from];
            snprintf(from, sizeof from, "%s%s", name, items[i].from + sizeof cfg - 1);
            memcpy(items[i].from, from, sizeof from);
        }
    return RA_OK;
}

ra_status rai_config_read(const char *path, rai_config_item **items, int *n) {
    if (!items || !n || !path) return rai_fail(RA_ERR_ARG, "rai_config_read: NULL argument");
    *items = NULL, *n = 0;
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);   /* a FIFO must not block */
    if (fd < 0) return rai_fail(RA_ERR_IO, "%.200s: %s", path, strerror(errno));
    struct stat s;
    char *buf = NULL;
    size_t got = 0;
    ra_status st = RA_OK;
    if (fstat(fd, &s)) st = rai_fail(RA_ERR_IO, "%.200s: %s", path, strerror(errno));
    else if (!S_ISREG(s.st_mode)) st = rai_fail(RA_ERR_FORMAT, "%.200s is not a regular file", path);
    else if ((uint64_t)s.st_size > RAI_CONFIG_MAX_BYTES)
        st = rai_fail(RA_ERR_FORMAT, "%.200s has %lld bytes, more than a config.json may have "
                      "(%zu)", path, (long long)s.st_size, RAI_CONFIG_MAX_BYTES);
    else if (!(buf = malloc((size_t)s.st_size + 1)))
        st = rai_fail(RA_ERR_NOMEM, "out of memory for %.200s", path);
    while (!st && got < (size_t)s.st_size) {   /* a file cut short reads as what is left */
        const ssize_t k = read(fd, buf + got, (size_t)s.st_size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) st = rai_fail(RA_ERR_IO, "%.200s: %s", path, strerror(errno));
        if (k <= 0) break;
        got += (size_t)k;
    }
    if (!st) rai_note_read(fd, path);   /* an output may not replace it */
    close(fd);
    if (!st && (st = rai_config_parse(buf, got, items, n))) st = name_failure(st, path);
    free(buf);
    return st ? st : name_items(*items, *n, path);
}
