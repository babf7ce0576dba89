/* test_attention.c - every attention fixture written by the PyTorch twin
 * (tools/make_fixtures.py), through the model loader and the layer, under
 * every kernel this CPU supports: y and the probabilities must match
 * PyTorch float32 within 1e-5 relative (+1e-6 absolute near zero). */
#include "check.h"
#include "relattn.h"

#include <stdint.h>
#include <string.h>

static float *load_f32(const ra_st_file *f, const char *name, const ra_st_tensor **out) {
    const ra_st_tensor *t = ra_st_find(f, name);
    if (out) *out = t;
    if (!t) return NULL;
    float *p = malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
    if (ra_st_to_f32(p, t) != RA_OK) { free(p); return NULL; }
    return p;
}

static int open_case(ra_st_file **f, const char *dir, const char *name, const char *part) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%s.safetensors", dir, name, part);
    ra_status st = ra_st_open(f, path);
    CHECK(st == RA_OK, "%s: %s", path, ra_last_error());
    return st == RA_OK;
}

static void run_case(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.model.safetensors", dir, name);
    ra_model *m = NULL;
    ra_status st = ra_model_load(&m, path);
    CHECK(st == RA_OK, "%s: %s", name, ra_last_error());
    ra_st_file *in = NULL, *ex = NULL;
    if (st || !open_case(&in, dir, name, "input") || !open_case(&ex, dir, name, "expected")) {
        ra_model_free(m), ra_st_close(in), ra_st_close(ex);
        return;
    }
    const ra_attn_layer *l = ra_model_attn(m);
    const ra_attn_config *c = ra_attn_layer_config(l);
    const ra_st_tensor *tx, *tkv, *tm, *ty, *ta;
    const char *xname = ra_st_find(in, "x") ? "x" : "q";
    float *x = load_f32(in, xname, &tx), *kv = load_f32(in, "kv", &tkv),
          *mask = load_f32(in, "mask", &tm), *yw = load_f32(ex, "y", &ty),
          *aw = load_f32(ex, "attn", &ta);
    CHECK(x && yw && aw, "%s: fixture lacks x/q, y or attn", name);
    if (x && yw && aw) {
        int b_ = (int)tx->shape[0], n1 = (int)tx->shape[1];
        int n2 = tkv ? (int)tkv->shape[1] : n1, nw = tm ? (int)tm->shape[0] : 0;
        float *y = malloc(sizeof(float) * ty->numel), *a = malloc(sizeof(float) * ta->numel);
        CHECK(ta->numel == (int64_t)b_ * c->num_heads * n1 * n2, "%s: attn size", name);
        for (int k = 0; k < RA_KERNEL_COUNT; k++) {
            if (!ra_kernel_supported((ra_kernel_id)k)) continue;
            ra_kernel_select((ra_kernel_id)k);
            for (int threads = 1; threads <= 2; threads++) {
                ra_threads_set(threads);
                memset(y, 0xff, sizeof(float) * ty->numel);   /* NaN: unwritten shows */
                st = ra_attn_layer_forward(l, y, a, x, kv, b_, n1, n2, mask, nw);
                CHECK(st == RA_OK, "%s: forward: %s", name, ra_last_error());
                char what[300];
                snprintf(what, sizeof what, "%s y (kernel %s, %d threads)", name,
                         ra_kernel_name((ra_kernel_id)k), threads);
                CHECK_CLOSE(y, yw, ty->numel, 1e-5, 1e-6, what);
                snprintf(what, sizeof what, "%s attn (kernel %s, %d threads)", name,
                         ra_kernel_name((ra_kernel_id)k), threads);
                CHECK_CLOSE(a, aw, ta->numel, 1e-5, 1e-6, what);
                /* without the probabilities requested, y is the same */
                st = ra_attn_layer_forward(l, y, NULL, x, kv, b_, n1, n2, mask, nw);
                CHECK(st == RA_OK, "%s: forward without attn", name);
                CHECK_CLOSE(y, yw, ty->numel, 1e-5, 1e-6, what);
            }
        }
        ra_threads_set(0);
        free(y), free(a);
    }
    free(x), free(kv), free(mask), free(yw), free(aw);
    ra_st_close(in), ra_st_close(ex);
    ra_model_free(m);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/fixtures";
    char path[1024], name[256];
    snprintf(path, sizeof path, "%s/cases.txt", dir);
    FILE *list = fopen(path, "r");
    CHECK(list != NULL, "cannot open %s", path);
    int cases = 0;
    while (list && fscanf(list, "%255s", name) == 1) {
        run_case(dir, name);
        cases++;
    }
    if (list) fclose(list);
    CHECK(cases >= 30, "only %d attention fixtures", cases);
    printf("%d attention cases\n", cases);
    return check_done();
}
