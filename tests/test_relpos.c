/* test_relpos.c - the relative position schemes (T5 buckets, ALiBi,
 * decomposed, RoPE; docs/arch-relpos.md) against their PyTorch twin
 * (tools/relpos_twin.py): y, the probabilities and every gradient of every
 * fixture under every kernel this CPU supports and on 1 and 3 threads; T5's
 * buckets and ALiBi's slopes exactly; finite differences on small random
 * layers; bad configurations and inputs refused with a reason.
 * Arguments: FIXTURES [RELATTN_CLI]. */
#define _POSIX_C_SOURCE 200809L   /* mkdtemp */
#include "check.h"
#include "grad_check.h"   /* tensor(): a fixture tensor as F32 */
#include "relattn.h"

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static double max_abs(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]);
        if (!(e <= m)) m = isnan(e) ? INFINITY : e;
    }
    return m;
}

/* One run of forward and backward: y, attn, dx and the flat gradient. */
typedef struct {
    float *y, *a, *dx, *g;
} run_out;

static ra_status run_once(run_out *o, ra_model *m, const float *x, const float *dy, int b,
                          int n, const int *grid, int64_t ny, int64_t na) {
    const ra_attn_layer *l = ra_model_attn(m);
    memset(o->y, 0xff, sizeof(float) * (size_t)ny);   /* NaN: unwritten shows */
    ra_status st = ra_attn_layer_forward_grid(l, o->y, o->a, x, NULL, b, n, n, NULL, 0, grid);
    if (st) return st;
    memset(o->g, 0, sizeof(float) * (size_t)ra_model_param_total(m));
    memset(o->dx, 0, sizeof(float) * (size_t)ny);
    ra_attn_grads g;
    ra_model_attn_grads(m, o->g, &g);
    (void)na;
    return ra_attn_layer_backward_grid(l, o->dx, NULL, &g, NULL, dy, x, NULL, b, n, n, NULL, 0,
                                     grid);
}

static void run_case(const char *dir, const char *name) {
    char path[1024];
    ra_model *m = NULL;
    ra_st_file *in = NULL, *ex = NULL;
    snprintf(path, sizeof path, "%s/%s.model.safetensors", dir, name);
    ra_status st = ra_model_load(&m, path);
    CHECK(st == RA_OK, "%s: %s", name, ra_last_error());
    snprintf(path, sizeof path, "%s/%s.input.safetensors", dir, name);
    if (!st) st = ra_st_open(&in, path);
    snprintf(path, sizeof path, "%s/%s.expected.safetensors", dir, name);
    if (!st) st = ra_st_open(&ex, path);
    CHECK(st == RA_OK, "%s: fixtures: %s", name, ra_last_error());
    if (st) goto done;
    const ra_attn_config *c = ra_attn_layer_config(ra_model_attn(m));
    const ra_st_tensor *tx, *ta;
    float *x = tensor(in, "x", &tx), *dy = tensor(in, "dy", NULL);
    float *yw = tensor(ex, "y", NULL), *aw = tensor(ex, "attn", &ta);
    float *dxw = tensor(ex, "grad.x", NULL);
    CHECK(x && dy && yw && dxw, "%s: fixture lacks x, dy, y or grad.x", name);
    if (!x || !dy || !yw || !dxw) {
        free(x), free(dy), free(yw), free(aw), free(dxw);
        goto done;
    }
    /* (B, N, C), or (B, H, W, C) on a grid for decomposed_attention */
    const int b = (int)tx->shape[0];
    int grid[2] = {0, 0}, n = (int)tx->shape[1];
    if (tx->ndim == 4) grid[0] = n, grid[1] = (int)tx->shape[2], n = grid[0] * grid[1];
    const int64_t ny = tx->numel, na = (int64_t)b * c->num_heads * n * n;
    const int64_t total = ra_model_param_total(m);
    run_out o = {malloc(sizeof(float) * ny), malloc(sizeof(float) * na),
                 malloc(sizeof(float) * ny), malloc(sizeof(float) * total)};
    run_out first = {malloc(sizeof(float) * ny), malloc(sizeof(float) * na),
                     malloc(sizeof(float) * ny), malloc(sizeof(float) * total)};
    double wy = 0, wa = 0, wg = 0, agree = 0;
    int runs = 0;
    for (int k = 0; k < RA_KERNEL_COUNT; k++) {
        if (!ra_kernel_supported((ra_kernel_id)k)) continue;
        ra_kernel_select((ra_kernel_id)k);
        for (int threads = 1; threads <= 3; threads += 2) {   /* 3: uneven parts */
            ra_threads_set(threads);
            st = run_once(&o, m, x, dy, b, n, tx->ndim == 4 ? grid : NULL, ny, na);
            CHECK(st == RA_OK, "%s: %s", name, ra_last_error());
            if (st) continue;
            char what[512];
            snprintf(what, sizeof what, "%s (kernel %s, %d threads)", name,
                     ra_kernel_name((ra_kernel_id)k), threads);
            CHECK_CLOSE(o.y, yw, ny, 1e-5, 1e-6, what);
            if (aw) CHECK(ta->numel == na, "%s: attn size", name);
            if (aw && ta->numel == na) CHECK_CLOSE(o.a, aw, na, 1e-5, 1e-6, what);
            CHECK_CLOSE(o.dx, dxw, ny, 1e-4, 1e-5, what);
            wy = fmax(wy, max_abs(o.y, yw, ny));
            if (aw && ta->numel == na) wa = fmax(wa, max_abs(o.a, aw, na));
            wg = fmax(wg, max_abs(o.dx, dxw, ny));
            for (int i = 0; i < ra_model_param_count(m); i++) {
                const ra_param_info *p = ra_model_param(m, i);
                char gname[160];
                snprintf(gname, sizeof gname, "grad.%s", p->name);
                const ra_st_tensor *tg;
                float *want = tensor(ex, gname, &tg);
                CHECK(want && tg->numel == p->numel, "%s: %s missing", name, gname);
                if (want && tg->numel == p->numel) {
                    snprintf(what, sizeof what, "%s %s (kernel %s, %d threads)", name, gname,
                             ra_kernel_name((ra_kernel_id)k), threads);
                    CHECK_CLOSE(o.g + p->offset, want, p->numel, 1e-4, 1e-5, what);
                    wg = fmax(wg, max_abs(o.g + p->offset, want, p->numel));
                }
                free(want);
            }
            /* every kernel and thread count agrees with the first run */
            if (runs++ == 0) {
                memcpy(first.y, o.y, sizeof(float) * ny), memcpy(first.dx, o.dx, sizeof(float) * ny);
                memcpy(first.g, o.g, sizeof(float) * total);
            } else {
                agree = fmax(agree, max_abs(o.y, first.y, ny));
                agree = fmax(agree, max_abs(o.dx, first.dx, ny));
                agree = fmax(agree, max_abs(o.g, first.g, total));
            }
        }
    }
    ra_threads_set(0);
    ra_kernel_select(RA_KERNEL_REF);
    CHECK(agree < 2e-5, "%s: kernels / threads differ by %.3g", name, agree);
    printf("  %-18s max |diff| vs torch: y %.2e  attn %.2e  grads %.2e; kernels/threads "
           "agree within %.2e\n", name, wy, wa, wg, agree);
    free(o.y), free(o.a), free(o.dx), free(o.g);
    free(first.y), free(first.a), free(first.dx), free(first.g);
    free(x), free(dy), free(yw), free(aw), free(dxw);
done:
    ra_st_close(in), ra_st_close(ex);
    ra_model_free(m);
}

/* T5 buckets and ALiBi slopes, exactly as the twin computes them. */
static void check_tables(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/relpos_tables.safetensors", dir);
    ra_st_file *f = NULL;
    ra_status st = ra_st_open(&f, path);
    CHECK(st == RA_OK, "%s: %s", path, ra_last_error());
    if (st) return;
    int nb_cfg = 0, nslopes = 0;
    for (int i = 0; i < ra_st_count(f); i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        int nb, md, n;
        char kind[8];
        if (sscanf(t->name, "bucket.%d.%d.%7s", &nb, &md, kind) == 3) {
            int64_t *v = malloc(sizeof *v * (size_t)t->numel);
            ra_st_to_i64(v, t);
            int bad = 0;
            for (int64_t e = 0; e < t->numel; e++) {
                const int rel = (int)e - 140;
                const int got = ra_t5_bucket(rel, strcmp(kind, "bi") == 0, nb, md);
                if (got != v[e] && bad++ < 3)
                    fprintf(stderr, "  %s: j - i = %d: bucket %d, torch %lld\n", t->name, rel,
                            got, (long long)v[e]);
            }
            CHECK(bad == 0, "%s: %d buckets differ", t->name, bad);
            free(v);
            nb_cfg++;
        } else if (sscanf(t->name, "slopes.%d", &n) == 1) {
            float *v = tensor(f, t->name, NULL);
            for (int h = 0; h < n; h++)
                CHECK(ra_alibi_slope(h, n) == v[h], "slope %d of %d: %.9g, torch %.9g", h, n,
                      (double)ra_alibi_slope(h, n), (double)v[h]);
            free(v);
            nslopes++;
        }
    }
    CHECK(nb_cfg >= 30 && nslopes == 32, "tables: %d bucket configurations, %d slope sets",
          nb_cfg, nslopes);
    /* the configurations HF cannot run are refused */
    CHECK(ra_t5_bucket(0, 1, 2, 128) == -1, "2 buckets bidirectionally");
    CHECK(ra_t5_bucket(0, 1, 0, 128) == -1, "0 buckets");
    CHECK(ra_t5_bucket(0, 0, 32, 16) == -1, "max_distance at the exact range");
    CHECK(ra_t5_bucket(INT32_MIN, 1, 32, 128) == -1, "INT32_MIN");
    ra_st_close(f);
}

static ra_model *make(const char *const *meta, int n, uint64_t seed) {
    ra_model *m = NULL;
    ra_status st = ra_model_create(&m, meta, n, seed);
    CHECK(st == RA_OK, "create %s: %s", meta[1], ra_last_error());
    return m;
}

/* Central differences of L = sum(y * dy) in double against the backward,
 * on entries of x and of every parameter. */
static void check_fd(const char *const *meta, int nmeta, int b, int h, int w, int use_grid,
                     int prefix) {
    ra_model *m = make(meta, nmeta, 7);
    if (!m) return;
    const ra_attn_layer *l = ra_model_attn(m);
    const int C = ra_attn_layer_config(l)->dim, n = prefix + h * w;
    const int grid[2] = {h, w};
    const int *gp = use_grid ? grid : NULL;
    const int64_t nx = (int64_t)b * n * C, total = ra_model_param_total(m);
    float *x = malloc(sizeof(float) * nx), *dy = malloc(sizeof(float) * nx);
    float *y = malloc(sizeof(float) * nx), *dx = calloc((size_t)nx, sizeof(float));
    float *g = calloc((size_t)total, sizeof(float)), *wts = ra_model_weights(m);
    ra_rng rng;
    ra_rng_seed(&rng, 11);
    ra_rng_fill_normal(&rng, x, nx, 0, 1);
    ra_rng_fill_normal(&rng, dy, nx, 0, 1);
    for (int64_t e = 0; e < total; e++) wts[e] *= 10.0f;   /* 0.02 std: make every term count */
    ra_attn_grads ag;
    ra_model_attn_grads(m, g, &ag);
    ra_threads_set(1);
    ra_status st = ra_attn_layer_backward_grid(l, dx, NULL, &ag, NULL, dy, x, NULL, b, n, n,
                                             NULL, 0, gp);
    CHECK(st == RA_OK, "fd %s: %s", meta[1], ra_last_error());
    double worst = 0;
    for (int which = 0; !st && which <= ra_model_param_count(m); which++) {
        float *v = which == 0 ? x : wts + ra_model_param(m, which - 1)->offset;
        const float *gv = which == 0 ? dx : g + ra_model_param(m, which - 1)->offset;
        const int64_t cnt = which == 0 ? nx : ra_model_param(m, which - 1)->numel;
        for (int s = 0; s < 12; s++) {
            const int64_t e = (int64_t)(ra_rng_u64(&rng) % (uint64_t)cnt);
            const float keep = v[e], eps = 1e-2f;
            double lp = 0, lm = 0;
            v[e] = keep + eps;
            ra_attn_layer_forward_grid(l, y, NULL, x, NULL, b, n, n, NULL, 0, gp);
            for (int64_t i = 0; i < nx; i++) lp += (double)y[i] * dy[i];
            v[e] = keep - eps;
            ra_attn_layer_forward_grid(l, y, NULL, x, NULL, b, n, n, NULL, 0, gp);
            for (int64_t i = 0; i < nx; i++) lm += (double)y[i] * dy[i];
            v[e] = keep;
            const double fd = (lp - lm) / (2.0 * eps);
            const double err = fabs(fd - gv[e]) / (1e-3 + 1e-3 * fabs(fd));
            if (err > worst) worst = err;
            CHECK(err <= 1.0, "fd %s %s[%lld]: backward %.6g, differences %.6g", meta[1],
                  which ? ra_model_param(m, which - 1)->name : "x", (long long)e, (double)gv[e],
                  fd);
        }
    }
    ra_threads_set(0);
    printf("  finite differences %-22s worst %.3f x tolerance\n", meta[1], worst);
    free(x), free(dy), free(y), free(dx), free(g);
    ra_model_free(m);
}

static void finite_differences(void) {
    const char *t5[] = {"arch", "t5_attention", "d_model", "8", "d_kv", "4", "num_heads", "2",
                        "relative_attention_num_buckets", "6",
                        "relative_attention_max_distance", "5", "is_decoder", "true"};
    check_fd(t5, 7, 2, 1, 9, 0, 0);
    const char *al[] = {"arch", "alibi_attention", "dim", "12", "num_heads", "3", "causal",
                        "true"};
    check_fd(al, 4, 2, 1, 6, 0, 0);
    const char *dc[] = {"arch", "decomposed_attention", "dim", "8", "num_heads", "2",
                        "input_size", "2,3"};
    check_fd(dc, 4, 1, 3, 4, 1, 0);   /* resampled from 2x3 to 3x4 */
    const char *rp[] = {"arch", "rope_attention", "dim", "16", "num_heads", "2", "grid_size",
                        "2,3"};
    check_fd(rp, 4, 2, 2, 3, 0, 1);
}

/* causal with a caller's mask: the same as the caller's mask plus -inf
 * on the future without causal (the two models share their weights: the
 * same seed, the same parameters in the same order), forward and backward,
 * on 1 and 3 threads (parts of the batch start at other windows). */
static void causal_with_mask(void) {
    const char *mc[] = {"arch", "alibi_attention", "dim", "12", "num_heads", "3", "causal",
                        "true"};
    const char *mn[] = {"arch", "alibi_attention", "dim", "12", "num_heads", "3"};
    ra_model *a = make(mc, 4, 5), *b = make(mn, 3, 5);
    enum { B = 4, N = 6, C = 12, NW = 2 };
    float x[B * N * C], dy[B * N * C], mask[NW * N * N], both[NW * N * N];
    float ya[B * N * C], yb[B * N * C], dxa[B * N * C], dxb[B * N * C];
    ra_rng rng;
    ra_rng_seed(&rng, 3);
    ra_rng_fill_normal(&rng, x, B * N * C, 0, 1);
    ra_rng_fill_normal(&rng, dy, B * N * C, 0, 1);
    ra_rng_fill_normal(&rng, mask, NW * N * N, 0, 2);
    for (int e = 0; e < NW * N * N; e++) both[e] = mask[e] + ((e % N) > (e / N) % N ? -INFINITY : 0);
    for (int threads = 1; a && b && threads <= 3; threads += 2) {
        ra_threads_set(threads);
        memset(dxa, 0, sizeof dxa), memset(dxb, 0, sizeof dxb);
        ra_status s1 = ra_attn_layer_backward(ra_model_attn(a), dxa, NULL, NULL, ya, dy, x, NULL,
                                              B, N, N, mask, NW);
        ra_status s2 = ra_attn_layer_backward(ra_model_attn(b), dxb, NULL, NULL, yb, dy, x, NULL,
                                              B, N, N, both, NW);
        CHECK(s1 == RA_OK && s2 == RA_OK, "causal with a mask: %s", ra_last_error());
        CHECK(max_abs(ya, yb, B * N * C) < 1e-6 && max_abs(dxa, dxb, B * N * C) < 1e-5,
              "causal with a mask (%d threads): y %.3g, dx %.3g apart", threads,
              max_abs(ya, yb, B * N * C), max_abs(dxa, dxb, B * N * C));
    }
    ra_threads_set(0);
    ra_model_free(a), ra_model_free(b);
}

/* Bad configurations and calls: a status and a reason, never a crash. */
static void refuse(const char *const *meta, int n, const char *why) {
    ra_model *m = NULL;
    ra_status st = ra_model_create(&m, meta, n, 1);
    CHECK(st == RA_ERR_FORMAT && m == NULL && ra_last_error()[0], "%s: status %d (%s)", why, st,
          ra_last_error());
    ra_model_free(m);
}

static void bad_inputs(void) {
    static const struct {
        const char *why;
        const char *meta[12];   /* key, value, ...; NULL after the last */
    } refusals[] = {
        {"t5 buckets 0", {"arch", "t5_attention", "d_model", "8", "d_kv", "4", "num_heads", "2",
                          "relative_attention_num_buckets", "0"}},
        {"t5 3 buckets bidirectional", {"arch", "t5_attention", "d_model", "8", "d_kv", "4",
                                        "num_heads", "2", "relative_attention_num_buckets", "3"}},
        {"t5 max_distance within the exact buckets",
         {"arch", "t5_attention", "d_model", "8", "d_kv", "4", "num_heads", "2",
          "relative_attention_max_distance", "8"}},
        {"t5 without d_kv", {"arch", "t5_attention", "d_model", "8", "num_heads", "2"}},
        {"t5 is_decoder not a boolean", {"arch", "t5_attention", "d_model", "8", "d_kv", "4",
                                         "num_heads", "2", "is_decoder", "maybe"}},
        {"rope head dim 6", {"arch", "rope_attention", "dim", "12", "num_heads", "2",
                             "grid_size", "2,2"}},
        {"rope grid 0", {"arch", "rope_attention", "dim", "16", "num_heads", "2", "grid_size",
                         "0,2"}},
        {"rope theta -1", {"arch", "rope_attention", "dim", "16", "num_heads", "2", "grid_size",
                           "2,2", "rope_theta", "-1"}},
        {"rope grid 4096x4096 (a table of 2^30 angles)",
         {"arch", "rope_attention", "dim", "64", "num_heads", "1", "grid_size", "4096,4096"}},
        {"rope prefix -1", {"arch", "rope_attention", "dim", "16", "num_heads", "2", "grid_size",
                            "2,2", "num_prefix_tokens", "-1"}},
        {"decomposed without input_size", {"arch", "decomposed_attention", "dim", "16",
                                           "num_heads", "2"}},
        {"alibi dim not divisible", {"arch", "alibi_attention", "dim", "10", "num_heads", "3"}},
    };
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        int n = 0;
        while (n < 12 && refusals[i].meta[n]) n++;
        refuse(refusals[i].meta, n / 2, refusals[i].why);
    }

    /* token counts that do not fit the grid */
    const char *rp[] = {"arch", "rope_attention", "dim", "16", "num_heads", "2", "grid_size",
                        "2,3"};
    ra_model *m = make(rp, 4, 1);
    float x[2 * 8 * 16] = {0}, y[2 * 8 * 16];
    if (m) {
        ra_status st = ra_attn_layer_forward(ra_model_attn(m), y, NULL, x, NULL, 2, 8, 8, NULL, 0);
        CHECK(st == RA_ERR_SHAPE && strstr(ra_last_error(), "grid_size"), "rope N 8 on 2x3+1: %s",
              ra_last_error());
    }
    ra_model_free(m);
    const char *dc[] = {"arch", "decomposed_attention", "dim", "16", "num_heads", "2",
                        "input_size", "2,3"};
    m = make(dc, 4, 1);
    if (m) {
        const ra_attn_layer *l = ra_model_attn(m);
        ra_status st = ra_attn_layer_forward(l, y, NULL, x, NULL, 2, 8, 8, NULL, 0);
        CHECK(st == RA_ERR_SHAPE, "decomposed N 8 on 2x3: %s", ra_last_error());
        st = ra_attn_layer_forward_grid(l, y, NULL, x, NULL, 2, 8, 8, NULL, 0, (int[]){3, 3});
        CHECK(st == RA_ERR_SHAPE, "decomposed N 8 on a 3x3 grid: %s", ra_last_error());
        st = ra_attn_layer_forward_grid(l, y, NULL, x, NULL, 2, 8, 8, NULL, 0, (int[]){0, 8});
        CHECK(st == RA_ERR_SHAPE, "decomposed grid 0x8: %s", ra_last_error());
        st = ra_attn_layer_forward_grid(l, y, NULL, x, NULL, 2, 8, 8, NULL, 0, (int[]){2, 4});
        CHECK(st == RA_OK, "decomposed on a 2x4 grid: %s", ra_last_error());
    }
    ra_model_free(m);
    /* the core's second key index: in range, and with a key table only */
    {
        static const float tab[3 * 4], q[2 * 4];
        static const int32_t good[4] = {0, 1, 2, 0}, bad[4] = {0, 3, 1, 1};
        ra_attn_desc d = {.b_ = 1, .nh = 1, .n1 = 2, .n2 = 2, .hd = 4, .scale = 1.0f,
                          .rel_k = tab, .rel = good, .r = 3, .rel2 = bad};
        CHECK(ra_attention_check(&d) == RA_ERR_ARG && strstr(ra_last_error(), "rel2"),
              "rel2 out of range: %s", ra_last_error());
        d.rel2 = good;
        CHECK(ra_attention_check(&d) == RA_OK, "rel2 in range: %s", ra_last_error());
        d.rel_v = tab;
        CHECK(ra_attention_check(&d) == RA_ERR_ARG, "rel2 with a value table");
        (void)q;
    }
    /* the layer refuses what the loader would (a library caller) */
    ra_attn_config cfg = ra_attn_config_default(RA_ARCH_T5_ATTENTION);
    cfg.dim = 8, cfg.num_heads = 2, cfg.inner_dim = 8, cfg.num_buckets = 1;
    static const float w[64];
    ra_attn_params p = {.q_w = w, .k_w = w, .v_w = w, .proj_w = w};
    ra_attn_layer *l = NULL;
    CHECK(ra_attn_layer_create(&l, &cfg, &p) == RA_ERR_ARG && !l, "t5 layer with 1 bucket");
    cfg.num_buckets = 32, p.v_w = NULL;
    CHECK(ra_attn_layer_create(&l, &cfg, &p) == RA_ERR_ARG && !l, "t5 layer without v");
    cfg = ra_attn_config_default(RA_ARCH_DECOMPOSED_ATTENTION);
    cfg.dim = 8, cfg.num_heads = 2, cfg.grid[0] = cfg.grid[1] = 2;
    p = (ra_attn_params){.qkv_w = w, .qkv_b = w, .proj_w = w, .proj_b = w, .rel_h = w};
    CHECK(ra_attn_layer_create(&l, &cfg, &p) == RA_ERR_ARG && !l, "decomposed without rel_w");
}

/* Through the command line: exit 65 with one line, no output file. */
static void cli_checks(const char *cli, const char *dir) {
    char tmpl[] = "/tmp/relpos_test.XXXXXX";
    const char *td = mkdtemp(tmpl);
    CHECK(td != NULL, "mkdtemp");
    if (!td) return;
    char cmd[4096], out[600];
    snprintf(out, sizeof out, "%s/out.safetensors", td);
    /* the model of one case on the input of another (C differs) */
    snprintf(cmd, sizeof cmd, "%s forward %s/dec_same.model.safetensors "
             "%s/rope_p0.input.safetensors -o %s 2>/dev/null", cli, dir, dir, out);
    int rc = system(cmd);
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 65, "wrong input: exit %d", WEXITSTATUS(rc));
    CHECK(access(out, F_OK) != 0, "no output after a failure");
    /* rope on tokens that do not fit its grid */
    snprintf(cmd, sizeof cmd, "%s backward %s/rope_p1.model.safetensors "
             "%s/alibi_h8.input.safetensors -o %s 2>/dev/null", cli, dir, dir, out);
    rc = system(cmd);
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 65, "rope N mismatch: exit %d", WEXITSTATUS(rc));
    /* a good run of the decomposed layer on a resized (B, H, W, C) input */
    snprintf(cmd, sizeof cmd, "%s backward %s/dec_up.model.safetensors "
             "%s/dec_up.input.safetensors -o %s --threads 2", cli, dir, dir, out);
    rc = system(cmd);
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "dec_up backward: exit %d", WEXITSTATUS(rc));
    ra_st_file *f = NULL;
    if (ra_st_open(&f, out) == RA_OK) {
        const ra_st_tensor *y = ra_st_find(f, "y"), *gx = ra_st_find(f, "grad.x");
        CHECK(y && y->ndim == 4 && gx && gx->ndim == 4 && ra_st_find(f, "grad.rel_pos_h") &&
              ra_st_find(f, "grad.rel_pos_w"), "dec_up outputs");
        ra_st_close(f);
    } else {
        CHECK(0, "dec_up: no output");
    }
    unlink(out);
    rmdir(td);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/fixtures";
    const int cases = check_cases(dir, "relpos_cases.txt", run_case);
    CHECK(cases >= 16, "only %d relpos fixtures", cases);
    check_tables(dir);
    finite_differences();
    causal_with_mask();
    bad_inputs();
    if (argc > 2) cli_checks(argv[2], dir);
    return check_done();
}
