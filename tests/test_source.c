/* test_source.c - model sources without relattn metadata (ra_model_open,
 * ra_model_source; docs/reference.md section 2, "Model sources").
 *
 * Each network fixture (written by PyTorch with its hyperparameters) is
 * written again as a plain state_dict: the same tensors, no metadata, its
 * names behind a DataParallel prefix. Loaded through ra_model_open, the
 * hyperparameters the weights cannot show are refused one at a time,
 * each refusal naming the --set to pass; given those (from the fixture's
 * own metadata), the model must compute exactly what the fixture's model
 * does on the fixture's input (same bits), and the set of keys that had
 * to be given must be the expected one. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "relattn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];
static const char *fix = "tests/fixtures";

/* f's tensors, all of them, as a safetensors file without metadata at
 * path, each name behind prefix. */
static int write_plain(const ra_st_file *f, const char *path, const char *prefix) {
    ra_st_writer *w = ra_st_writer_new();
    ra_status st = w ? RA_OK : RA_ERR_NOMEM;
    for (int i = 0; !st && i < ra_st_count(f); i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        char name[300];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        st = ra_st_writer_add(w, name, t->dtype, t->ndim, t->shape, t->data);
    }
    if (!st) st = ra_st_writer_save(w, path);
    ra_st_writer_free(w);
    return st == RA_OK;
}

/* y of m's forward on the input file's tensors (malloc'ed, *n values). */
static float *forward(ra_model *m, const char *input, long *n) {
    ra_st_file *f = NULL;
    ra_run *r = NULL;
    float *out = NULL;
    ra_tensor t[8];
    int k = 0;
    memset(t, 0, sizeof t);
    if (ra_st_open(&f, input)) return NULL;
    for (int i = 0; i < ra_st_count(f) && k < 8; i++) {
        const ra_st_tensor *s = ra_st_at(f, i);
        if (strcmp(s->name, "x") && strcmp(s->name, "kv") && strcmp(s->name, "q")) continue;
        t[k].name = s->name, t[k].ndim = s->ndim;
        memcpy(t[k].shape, s->shape, sizeof t[k].shape);
        t[k].data = malloc((size_t)s->numel * sizeof(float) + 4);
        if (t[k].data) ra_st_read_f32(t[k].data, f, s);
        k++;
    }
    if (!ra_run_create(&r, m, RA_RUN_FORWARD, t, k) && !ra_run_exec(r)) {
        const ra_tensor *y = ra_run_find(r, "y");
        long count = 1;
        for (int d = 0; y && d < y->ndim; d++) count *= (long)y->shape[d];
        if (y && (out = malloc((size_t)count * sizeof *out + 4))) {
            memcpy(out, y->data, (size_t)count * sizeof *out);
            *n = count;
        }
    }
    ra_run_free(r);
    for (int i = 0; i < k; i++) free(t[i].data);
    ra_st_close(f);
    return out;
}

/* The key a refusal asks for ("pass --set KEY=VALUE"), or "". */
static void asked_key(char *key, size_t n, const char *msg) {
    const char *p = strstr(msg, "--set ");
    key[0] = 0;
    if (!p) return;
    p += 6;
    size_t k = strcspn(p, "=");
    if (k < n) memcpy(key, p, k), key[k] = 0;
}

static void one(const char *name, const char *expect_sets, const char *preset) {
    char model[512], input[512], plain[600];
    snprintf(model, sizeof model, "%s/%s.model.safetensors", fix, name);
    snprintf(input, sizeof input, "%s/%s.input.safetensors", fix, name);
    snprintf(plain, sizeof plain, "%s/%s.plain.safetensors", tmpdir, name);
    ra_st_file *f = NULL;
    ra_model *ref = NULL, *m = NULL;
    CHECK(ra_st_open(&f, model) == RA_OK, "%s: %s", name, ra_last_error());
    CHECK(ra_model_load(&ref, model) == RA_OK, "%s: %s", name, ra_last_error());
    if (!f || !ref) goto done;
    CHECK(write_plain(f, plain, "module."), "%s: cannot write the plain copy", name);

    /* refusals, each naming a key; answered from the fixture's metadata */
    const char *sets[16];
    char keys[16][64], buf[16][1100], given[1200] = "";
    int nset = 0;
    if (preset && *preset) {   /* a value nothing in the weights can show or miss */
        snprintf(buf[nset], sizeof buf[nset], "%s=%s", preset, ra_st_meta(f, preset));
        sets[nset] = buf[nset];
        nset++;
    }
    const int npreset = nset;
    ra_status st;
    for (;;) {
        ra_load_options o;
        memset(&o, 0, sizeof o);
        o.set = sets, o.nset = nset;
        st = ra_model_open(&m, plain, &o);
        if (st == RA_OK || nset == 16) break;
        asked_key(keys[nset], sizeof keys[nset], ra_last_error());
        const char *v = keys[nset][0] ? ra_st_meta(f, keys[nset]) : NULL;
        CHECK(st == RA_ERR_FORMAT && v, "%s: refused without naming a key the fixture has: %s",
              name, ra_last_error());
        if (!v) break;
        snprintf(buf[nset], sizeof buf[nset], "%s=%s", keys[nset], v);
        sets[nset] = buf[nset];
        snprintf(given + strlen(given), sizeof given - strlen(given), "%s%.60s",
                 nset > npreset ? "," : "", keys[nset]);
        nset++;
    }
    CHECK(st == RA_OK, "%s: %s", name, ra_last_error());
    CHECK(strcmp(given, expect_sets) == 0, "%s: needed --set for '%s', expected '%s'", name,
          given, expect_sets);
    if (!m) goto done;
    CHECK(ra_model_arch(m) == ra_model_arch(ref), "%s: arch %d vs %d", name,
          (int)ra_model_arch(m), (int)ra_model_arch(ref));
    CHECK(strcmp(ra_model_scheme(m), ra_model_scheme(ref)) == 0, "%s: scheme %s vs %s", name,
          ra_model_scheme(m), ra_model_scheme(ref));
    CHECK(ra_model_param_total(m) == ra_model_param_total(ref), "%s: %lld vs %lld parameters",
          name, (long long)ra_model_param_total(m), (long long)ra_model_param_total(ref));
    long n1 = 0, n2 = 0;
    float *y1 = forward(m, input, &n1), *y2 = forward(ref, input, &n2);
    CHECK(y1 && y2 && n1 == n2 && memcmp(y1, y2, (size_t)n1 * sizeof *y1) == 0,
          "%s: outputs differ from the fixture model's", name);
    free(y1), free(y2);
done:
    ra_model_free(m);
    ra_model_free(ref);
    ra_st_close(f);
    unlink(plain);
}

/* What ra_model_source reports for a plain torchvision-style file. */
static void sources(void) {
    char model[512], plain[600];
    snprintf(model, sizeof model, "%s/net_swin_tv.model.safetensors", fix);
    snprintf(plain, sizeof plain, "%s/tv.plain.safetensors", tmpdir);
    ra_st_file *f = NULL, *s = NULL;
    CHECK(ra_st_open(&f, model) == RA_OK, "%s", ra_last_error());
    if (!f) return;
    CHECK(write_plain(f, plain, "_orig_mod.module."), "cannot write");
    const char *sets[] = {"img_size=40", "labels=[\"a\"]"};
    ra_load_options o;
    memset(&o, 0, sizeof o);
    o.set = sets, o.nset = 2;
    CHECK(ra_model_source(&s, plain, &o) == RA_OK, "%s", ra_last_error());
    if (s) {
        const char *v = ra_st_meta(s, "relattn.source.embed_dim");
        CHECK(v && strstr(v, "features.0.0.weight"), "embed_dim from %s", v ? v : "(none)");
        v = ra_st_meta(s, "relattn.source.img_size");
        CHECK(v && !strcmp(v, "--set"), "img_size from %s", v ? v : "(none)");
        v = ra_st_meta(s, "relattn.source.prefix_dropped");
        CHECK(v && !strcmp(v, "_orig_mod.module."), "prefix %s", v ? v : "(none)");
        CHECK(ra_st_find(s, "features.0.0.weight") != NULL, "names not stripped");
        CHECK(!strcmp(ra_st_meta(s, "embed_dim"), ra_st_meta(f, "embed_dim")), "embed_dim %s",
              ra_st_meta(s, "embed_dim"));
        CHECK(!strcmp(ra_st_meta(s, "depths"), ra_st_meta(f, "depths")), "depths %s",
              ra_st_meta(s, "depths"));
        ra_st_close(s);
    }
    /* a bad --set and an arch nothing shows */
    const char *bad[] = {"=3"};
    o.set = bad, o.nset = 1;
    ra_model *m = NULL;
    CHECK(ra_model_open(&m, plain, &o) == RA_ERR_ARG && !m, "a --set without a key: %s",
          ra_last_error());
    ra_st_close(f);
    unlink(plain);
}

int main(int argc, char **argv) {
    if (argc > 1) fix = argv[1];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/relattn_source.XXXXXX");
    if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
    /* fixture, the keys the weights cannot show (in the order asked) */
    /* fixture, the keys the weights cannot show (in the order asked), a
     * key given first (a qk_scale other than the default leaves no trace) */
    static const char *const cases[][3] = {
        {"net_swin_official", "", ""},          /* a saved attn_mask gives img_size */
        {"net_swin_official_w7", "", ""},
        {"net_swin_ape_nohead", "", "qk_scale"}, /* absolute_pos_embed gives img_size */
        {"net_swin_timm", "img_size", ""},      /* timm saves no attn_mask */
        {"net_swin_tv", "", ""},                /* torchvision's 224 (it takes any size) */
        {"v2_net_official", "", ""},
        {"v2_net_tv_pad", "img_size", ""},      /* patch 2: no convention */
        {"vit_net_token", "num_heads", ""},
        {"vit_net_avg", "num_heads", ""},
        {"vit_net_tv", "num_heads", ""},
        {"vit_net_nobias", "num_heads", ""},
        {"net3d_self_shift_qkv", "shift_size", ""},
        {"net_block_w4", "input_resolution,shift_size", ""},
        {"net_block_tv_5x9_w7", "input_resolution,shift_size", ""},
        {"net_block_qkscale_nobias", "", "qk_scale"},     /* its saved attn_mask */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) one(cases[i][0], cases[i][1], cases[i][2]);
    sources();
    rmdir(tmpdir);
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}
