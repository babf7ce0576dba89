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

/* Gradients from PyTorch autograd for the fixture's dy: every input and
 * parameter gradient, within 1e-4 relative. Run more than once to see that
 * they accumulate. tape: the gradients from ra_attn_layer_forward_train's
 * tape (its y checked too; the second round reuses the tape and reads it
 * twice, at 3 threads and at 1) instead of ra_attn_layer_backward's
 * recomputation. */
static void check_backward(const char *name, ra_model *m, const ra_st_file *in,
                           const ra_st_file *ex, const float *x, const float *kv,
                           const float *mask, int b_, int n1, int n2, int nw, int tape) {
    const ra_attn_layer *l = ra_model_attn(m);
    const int C = ra_attn_layer_config(l)->dim;
    const ra_st_tensor *tdy;
    float *dy = load_f32(in, "dy", &tdy);
    CHECK(dy != NULL, "%s: no dy", name);
    if (!dy) return;
    const int64_t total = ra_model_param_total(m);
    float *gflat = calloc((size_t)total, sizeof(float));
    float *dx = calloc((size_t)b_ * n1 * C, sizeof(float));
    float *dkv = calloc((size_t)b_ * n2 * C, sizeof(float));
    float *y = malloc(sizeof(float) * (size_t)b_ * n1 * C);
    ra_attn_grads g;
    ra_model_attn_grads(m, gflat, &g);
    ra_attn_tape *tp = NULL;
    char what[512];
    snprintf(what, sizeof what, "%s%s", name, tape ? " (tape)" : "");
    name = what;
    int rounds = 0;
    for (int round = 1; round <= 3; round += 2) {
        /* 1 thread, then 3: windows in uneven parts, the mask from a part's
         * first window on, the parts' gradients summed */
        ra_threads_set(round);
        ra_status st;
        if (tape) {
            st = ra_attn_layer_forward_train(l, &tp, y, NULL, x, kv, b_, n1, n2, mask, nw);
            CHECK(st == RA_OK, "%s: forward_train: %s", name, ra_last_error());
            const ra_st_tensor *ty;
            float *yw = load_f32(ex, "y", &ty);
            if (yw) CHECK_CLOSE(y, yw, ty->numel, 1e-5, 1e-6, "forward_train y");
            free(yw);
            for (int r = 0; r < (round == 3 ? 2 : 1) && !st; r++, rounds++) {
                if (r == 1) ra_threads_set(1);   /* the tape's parts, whatever the threads */
                st = ra_attn_layer_backward_tape(l, tp, dx, kv ? dkv : NULL, &g, dy);
                CHECK(st == RA_OK, "%s: backward_tape: %s", name, ra_last_error());
            }
        } else {
            st = ra_attn_layer_backward(l, dx, kv ? dkv : NULL, &g, y, dy, x, kv, b_, n1, n2,
                                        mask, nw);
            CHECK(st == RA_OK, "%s: backward: %s", name, ra_last_error());
            rounds++;
        }
    }
    ra_attn_tape_free(tp);
    ra_threads_set(0);
    /* the rounds accumulated: divide, then compare */
    const float inv = 1.0f / (float)rounds;
    for (int64_t e = 0; e < total; e++) gflat[e] *= inv;
    for (int64_t e = 0; e < (int64_t)b_ * n1 * C; e++) dx[e] *= inv;
    for (int64_t e = 0; e < (int64_t)b_ * n2 * C; e++) dkv[e] *= inv;
    char what2[1024];
    const char *xg = ra_st_find(ex, "grad.x") ? "grad.x" : "grad.q";
    const ra_st_tensor *t;
    float *want = load_f32(ex, xg, &t);
    CHECK(want && t->numel == (int64_t)b_ * n1 * C, "%s: %s missing", name, xg);
    snprintf(what2, sizeof what2, "%s %s", name, xg);
    if (want) CHECK_CLOSE(dx, want, t->numel, 1e-4, 1e-5, what2);
    free(want);
    if (kv) {
        want = load_f32(ex, "grad.kv", &t);
        CHECK(want != NULL, "%s: grad.kv missing", name);
        snprintf(what2, sizeof what2, "%s grad.kv", name);
        if (want) CHECK_CLOSE(dkv, want, t->numel, 1e-4, 1e-5, what2);
        free(want);
    }
    for (int i = 0; i < ra_model_param_count(m); i++) {
        const ra_param_info *p = ra_model_param(m, i);
        char gname[128];
        snprintf(gname, sizeof gname, "grad.%s", p->name);
        want = load_f32(ex, gname, &t);
        CHECK(want && t->numel == p->numel, "%s: %s missing or wrong size", name, gname);
        snprintf(what2, sizeof what2, "%s %s", name, gname);
        if (want && t->numel == p->numel) CHECK_CLOSE(gflat + p->offset, want, p->numel, 1e-4, 1e-5, what2);
        free(want);
    }
    free(dy), free(gflat), free(dx), free(dkv), free(y);
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
            for (int threads = 1; threads <= 3; threads++) {   /* 3: uneven parts */
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
        check_backward(name, m, in, ex, x, kv, mask, b_, n1, n2, nw, 0);
        check_backward(name, m, in, ex, x, kv, mask, b_, n1, n2, nw, 1);
        free(y), free(a);
    }
    free(x), free(kv), free(mask), free(yw), free(aw);
    ra_st_close(in), ra_st_close(ex);
    ra_model_free(m);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/fixtures";
    const int cases = check_cases(dir, "cases.txt", run_case);
    CHECK(cases >= 30, "only %d attention fixtures", cases);
    printf("%d attention cases\n", cases);
    return check_done();
}
