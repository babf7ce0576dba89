/* test_config.c - config.json as metadata (src/models/config.c) and
 * ImageNet-1k's class names.
 *
 * 1. The committed examples (tests/configs, NAME.json, in the forms transformers'
 *    save_pretrained and timm's save_config_for_hf write): the items, in
 *    order, are those of NAME.expected ("key<TAB>value" lines; IMAGENET1K
 *    for ImageNet-1k's names).
 * 2. Hostile files (tests/configs/bad.txt: file, then the message it must
 *    give): RA_ERR_FORMAT, one line, no items. In memory: a NUL byte, deep
 *    nesting, a file over the size limit, not a regular file, missing.
 * 3. A 1000-entry id2label written out of order comes back in class order.
 * 4. rai_imagenet1k_labels_json(): 1000 distinct names, the data file's;
 *    rai_kinetics400_labels_json(): 400, KINETICS_FILE's.
 *
 *   test_config CONFIG_DIR DATA_FILE [KINETICS_FILE] */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "models/config.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *dir;

static void expect_items(const char *name) {
    char p[512], line[1 << 16];
    rai_config_item *it = NULL;
    int n = 0;
    snprintf(p, sizeof p, "%s/%s.json", dir, name);
    const ra_status st = rai_config_read(p, &it, &n);
    CHECK(st == RA_OK, "%s: %s", name, ra_last_error());
    snprintf(p, sizeof p, "%s/%s.expected", dir, name);
    FILE *f = fopen(p, "r");
    CHECK(f != NULL, "open %s", p);
    int k = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *tab = strchr(line, '\t');
        if (!tab) continue;
        *tab = 0;
        const char *want = strcmp(tab + 1, "IMAGENET1K") ? tab + 1 : rai_imagenet1k_labels_json();
        CHECK(k < n && !strcmp(it[k].key, line) && !strcmp(it[k].value, want) && it[k].from[0],
              "%s: item %d is %s = %.80s (from %s), expected %s = %.80s", name, k,
              k < n ? it[k].key : "(none)", k < n ? it[k].value : "", k < n ? it[k].from : "",
              line, want);
        k++;
    }
    CHECK(k == n, "%s: %d items, expected %d", name, n, k);
    if (f) fclose(f);
    rai_config_free(it, n);
}

/* A refusal: RA_ERR_FORMAT (or st), one line holding needle, no items. */
static void expect_refusal(ra_status got, rai_config_item *it, int n, ra_status want,
                           const char *what, const char *needle) {
    const char *e = ra_last_error();
    CHECK(got == want && it == NULL && n == 0 && strstr(e, needle) && !strchr(e, '\n'),
          "%s: status %d, \"%s\" (wanted %d, \"%s\")", what, got, e, want, needle);
    rai_config_free(it, n);
}

/* call (using &it, &n) must be refused. */
#define REFUSED(call, want, what, needle)                       \
    do {                                                        \
        rai_config_item *it = NULL;                             \
        int n = 0;                                              \
        const ra_status got_ = (call);                          \
        expect_refusal(got_, it, n, want, what, needle);        \
    } while (0)

static void bad_files(void) {
    char p[1400], line[1024];
    snprintf(p, sizeof p, "%s/bad.txt", dir);
    FILE *f = fopen(p, "r");
    CHECK(f != NULL, "open %s", p);
    int count = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *tab = strchr(line, '\t');
        if (!tab) continue;
        *tab = 0;
        snprintf(p, sizeof p, "%s/%s", dir, line);
        REFUSED(rai_config_read(p, &it, &n), RA_ERR_FORMAT, line, tab + 1);
        count++;
    }
    CHECK(count >= 20, "bad.txt: %d cases", count);
    if (f) fclose(f);
}

static void hostile_memory(void) {
    static const char nul[] = "{\"model_type\": \"vit\"\0}";
    REFUSED(rai_config_parse(nul, sizeof nul - 1, &it, &n), RA_ERR_FORMAT, "NUL",
                   "NUL byte");
    REFUSED(rai_config_parse("", 0, &it, &n), RA_ERR_FORMAT, "empty",
                   "config.json line");
    /* 100000 levels: refused before jansson recurses into them */
    const size_t depth = 100000;
    char *deep = malloc(2 * depth + 64);
    size_t k = (size_t)sprintf(deep, "{\"model_type\": \"vit\", \"x\": ");
    for (size_t i = 0; i < depth; i++) deep[k++] = '[';
    for (size_t i = 0; i < depth; i++) deep[k++] = ']';
    deep[k++] = '}';
    REFUSED(rai_config_parse(deep, k, &it, &n), RA_ERR_FORMAT, "deep",
                   "nests deeper than 32 levels");
    /* brackets inside strings are not nesting */
    k = (size_t)sprintf(deep, "{\"model_type\": \"vit\", \"x\": \"");
    for (size_t i = 0; i < 100; i++) deep[k++] = '[';
    k += (size_t)sprintf(deep + k, "\\\" [\"}");
    rai_config_item *items = NULL;
    int count = 0;
    CHECK(rai_config_parse(deep, k, &items, &count) == RA_OK && count > 0,
          "brackets in a string: %s", ra_last_error());
    rai_config_free(items, count);
    free(deep);
    /* over the size limit, in memory and as a (sparse) file */
    char *big = calloc(RAI_CONFIG_MAX_BYTES + 1, 1);
    memset(big, ' ', RAI_CONFIG_MAX_BYTES + 1);
    REFUSED(rai_config_parse(big, RAI_CONFIG_MAX_BYTES + 1, &it, &n),
                   RA_ERR_FORMAT, "16 MB + 1", "bytes, more than");
    free(big);
    char tmp[] = "/tmp/relattn_cfg_XXXXXX";
    const int fd = mkstemp(tmp);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)RAI_CONFIG_MAX_BYTES + 1) == 0, "sparse file");
    close(fd);
    REFUSED(rai_config_read(tmp, &it, &n), RA_ERR_FORMAT, "big file",
                   "more than a config.json may have");
    unlink(tmp);
    REFUSED(rai_config_read(dir, &it, &n), RA_ERR_FORMAT, "a directory",
                   "is not a regular file");
    REFUSED(rai_config_read("/dev/null", &it, &n), RA_ERR_FORMAT, "/dev/null",
                   "is not a regular file");
    REFUSED(rai_config_read("/nonexistent/config.json", &it, &n), RA_ERR_IO,
                   "missing", "/nonexistent/config.json");
}

/* id2label with ImageNet-1k's names under keys written in a scrambled
 * order: labels come back in class order. */
static void id2label_out_of_order(void) {
    json_error_t e;
    json_t *names = json_loads(rai_imagenet1k_labels_json(), 0, &e);
    json_t *root = json_pack("{s:s, s:[s]}", "model_type", "vit", "architectures",
                             "ViTForImageClassification");
    json_t *id2label = json_object();
    for (int i = 0; i < 1000; i++) {
        const int c = (i * 617 + 11) % 1000;   /* 617 is prime to 1000: a permutation */
        char key[8];
        snprintf(key, sizeof key, "%d", c);
        json_object_set(id2label, key, json_array_get(names, (size_t)c));
    }
    json_object_set_new(root, "id2label", id2label);
    char *text = json_dumps(root, JSON_INDENT(2));
    CHECK(text && strstr(text, "\"11\"") < strstr(text, "\"0\""), "keys not scrambled");
    rai_config_item *it = NULL;
    int n = 0;
    ra_status st = rai_config_parse(text, strlen(text), &it, &n);
    const char *labels = NULL, *ncls = NULL;
    for (int i = 0; !st && i < n; i++) {
        if (!strcmp(it[i].key, "labels")) labels = it[i].value;
        if (!strcmp(it[i].key, "num_classes")) ncls = it[i].value;
    }
    json_t *got = labels ? json_loads(labels, 0, &e) : NULL;
    CHECK(st == RA_OK && ncls && !strcmp(ncls, "1000") && got && json_equal(got, names),
          "1000 labels out of order: %s", st ? ra_last_error() : "not in class order");
    json_decref(got);
    rai_config_free(it, n);
    free(text);
    json_decref(root);
    json_decref(names);
}

static void builtin_names(const char *data, const char *json, size_t count, const char *first,
                          const char *last) {
    json_error_t e;
    json_t *a = json_loads(json, JSON_REJECT_DUPLICATES, &e);
    CHECK(json_is_array(a) && json_array_size(a) == count, "%s: not %zu names", data, count);
    FILE *f = fopen(data, "r");
    CHECK(f != NULL, "open %s", data);
    char line[512];
    size_t k = 0;
    int same = 1;
    json_t *seen = json_object();
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = 0;
        const char *s = json_string_value(json_array_get(a, k));
        same &= s && !strcmp(s, line) && !json_object_get(seen, line);
        json_object_set_new(seen, line, json_true());
        k++;
    }
    CHECK(same && k == count, "%zu names, the built-in list differs from %s", k, data);
    CHECK(!strcmp(json_string_value(json_array_get(a, 0)), first) &&
              !strcmp(json_string_value(json_array_get(a, count - 1)), last),
          "%s: the first and last classes", data);
    if (f) fclose(f);
    json_decref(seen);
    json_decref(a);
}

static void good_files(void) {
    char p[512], name[256];
    snprintf(p, sizeof p, "%s/good.txt", dir);
    FILE *f = fopen(p, "r");
    CHECK(f != NULL, "open %s", p);
    int count = 0;
    while (f && fscanf(f, "%255s", name) == 1) expect_items(name), count++;
    CHECK(count >= 10, "good.txt: %d cases", count);
    if (f) fclose(f);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_config CONFIG_DIR DATA_FILE\n");
        return 2;
    }
    dir = argv[1];
    good_files();
    bad_files();
    hostile_memory();
    id2label_out_of_order();
    builtin_names(argv[2], rai_imagenet1k_labels_json(), 1000, "tench", "toilet tissue");
    if (argc > 3)
        builtin_names(argv[3], rai_kinetics400_labels_json(), 400, "abseiling", "zumba");
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}
