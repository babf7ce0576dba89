/* test_resume.c - a training run can be stopped and resumed exactly.
 *
 * A small training loop (a window attention layer trained with dropout on
 * its output, AdamW with the Swin no-decay rule, gradient clipping and the
 * cosine schedule) runs 8 steps straight; a second run stops after 3 steps,
 * saves everything it carries (weights, AdamW moments, the step, the random
 * generator) to a safetensors file, frees it all, loads the file and runs the
 * remaining 5 steps. The two final states must be identical to the bit. */
#include "check.h"
#include "relattn.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

enum { C = 8, NH = 2, WS = 3, N = WS * WS, B = 4, STEPS = 8, STOP = 3 };
#define NPARAM 5
static const char *names[NPARAM] = {"qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
                                    "relative_position_bias_table"};
static const int64_t sizes[NPARAM] = {3 * C * C, 3 * C, C * C, C, (2 * WS - 1) * (2 * WS - 1) * NH};

typedef struct {   /* everything a run carries from step to step */
    float *w[NPARAM], *m[NPARAM], *v[NPARAM];
    int64_t step;
    ra_rng rng;
} state;

static void state_new(state *s) {
    memset(s, 0, sizeof *s);
    ra_rng_seed(&s->rng, 1234);
    for (int p = 0; p < NPARAM; p++) {
        s->w[p] = malloc(sizeof(float) * sizes[p]);
        s->m[p] = calloc((size_t)sizes[p], sizeof(float));
        s->v[p] = calloc((size_t)sizes[p], sizeof(float));
        ra_rng_fill_normal(&s->rng, s->w[p], sizes[p], 0, 0.2f);
    }
}

static void state_free(state *s) {
    for (int p = 0; p < NPARAM; p++) free(s->w[p]), free(s->m[p]), free(s->v[p]);
}

/* one step: forward with dropout on y, loss = sum(y * target), backward,
 * clip, AdamW at the scheduled learning rate */
static void train_step(state *s, const float *x, const float *target) {
    ra_attn_config cfg = ra_attn_config_default(RA_ARCH_WINDOW_ATTENTION);
    cfg.dim = C, cfg.num_heads = NH, cfg.window[0] = cfg.window[1] = WS;
    ra_attn_params prm = {.qkv_w = s->w[0], .qkv_b = s->w[1], .proj_w = s->w[2],
                          .proj_b = s->w[3], .table = s->w[4]};
    ra_attn_layer *l;
    CHECK(ra_attn_layer_create(&l, &cfg, &prm) == RA_OK, "%s", ra_last_error());
    float y[B * N * C], yd[B * N * C], dy[B * N * C], dyd[B * N * C];
    uint8_t keep[B * N * C];
    ra_attn_layer_forward(l, y, NULL, x, NULL, B, N, N, NULL, 0);
    ra_dropout_forward(yd, keep, y, B * N * C, 0.25f, &s->rng);
    for (int i = 0; i < B * N * C; i++) dyd[i] = target[i], dy[i] = 0;
    ra_dropout_backward(dy, dyd, keep, B * N * C, 0.25f);
    float *g[NPARAM];
    for (int p = 0; p < NPARAM; p++) g[p] = calloc((size_t)sizes[p], sizeof(float));
    ra_attn_grads grads = {.qkv_w = g[0], .qkv_b = g[1], .proj_w = g[2], .proj_b = g[3],
                           .table = g[4]};
    ra_attn_layer_backward(l, NULL, NULL, &grads, NULL, dy, x, NULL, B, N, N, NULL, 0);
    ra_clip_grad_norm(g, sizes, NPARAM, 1.0f);
    const double lr = ra_lr_cosine(s->step, STEPS, 2, 1e-2, 1e-4, 1e-3, 1);   /* 0-based */
    s->step++;   /* AdamW counts from 1 */
    ra_adamw_config ac = {.lr = lr,
                          .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05};
    for (int p = 0; p < NPARAM; p++)
        ra_adamw_step(s->w[p], s->m[p], s->v[p], g[p], sizes[p], s->step, &ac,
                      !ra_param_no_decay(names[p]));
    for (int p = 0; p < NPARAM; p++) free(g[p]);
    ra_attn_layer_free(l);
}

static void save(const state *s, const char *path) {
    ra_st_writer *w = ra_st_writer_new();
    char key[96];
    for (int p = 0; p < NPARAM; p++) {
        ra_st_writer_add(w, names[p], RA_DTYPE_F32, 1, &sizes[p], s->w[p]);
        snprintf(key, sizeof key, "adamw.m.%s", names[p]);
        ra_st_writer_add(w, key, RA_DTYPE_F32, 1, &sizes[p], s->m[p]);
        snprintf(key, sizeof key, "adamw.v.%s", names[p]);
        ra_st_writer_add(w, key, RA_DTYPE_F32, 1, &sizes[p], s->v[p]);
    }
    ra_st_writer_add(w, "step", RA_DTYPE_I64, 1, (int64_t[]){1}, &s->step);
    ra_st_writer_add(w, "rng", RA_DTYPE_I64, 1, (int64_t[]){4}, s->rng.s);
    CHECK(ra_st_writer_save(w, path) == RA_OK, "save: %s", ra_last_error());
    ra_st_writer_free(w);
}

static void load(state *s, const char *path) {
    ra_st_file *f;
    CHECK(ra_st_open(&f, path) == RA_OK, "load: %s", ra_last_error());
    if (!f) return;
    char key[96];
    for (int p = 0; p < NPARAM; p++) {
        ra_st_to_f32(s->w[p], ra_st_find(f, names[p]));
        snprintf(key, sizeof key, "adamw.m.%s", names[p]);
        ra_st_to_f32(s->m[p], ra_st_find(f, key));
        snprintf(key, sizeof key, "adamw.v.%s", names[p]);
        ra_st_to_f32(s->v[p], ra_st_find(f, key));
    }
    int64_t rng[4];
    ra_st_to_i64(&s->step, ra_st_find(f, "step"));
    ra_st_to_i64(rng, ra_st_find(f, "rng"));
    memcpy(s->rng.s, rng, sizeof rng);
    ra_st_close(f);
}

int main(void) {
    float x[B * N * C], target[B * N * C];
    ra_rng data;
    ra_rng_seed(&data, 99);
    ra_rng_fill_normal(&data, x, B * N * C, 0, 1);
    ra_rng_fill_normal(&data, target, B * N * C, 0, 1);

    state straight, resumed;
    state_new(&straight);
    for (int t = 0; t < STEPS; t++) train_step(&straight, x, target);

    char path[128];
    snprintf(path, sizeof path, "/tmp/relattn_resume_%d.safetensors", (int)getpid());
    state_new(&resumed);
    for (int t = 0; t < STOP; t++) train_step(&resumed, x, target);
    save(&resumed, path);
    state_free(&resumed);
    state_new(&resumed);   /* fresh buffers, other values: only the file carries over */
    load(&resumed, path);
    remove(path);
    for (int t = STOP; t < STEPS; t++) train_step(&resumed, x, target);

    CHECK(resumed.step == straight.step, "step %lld vs %lld", (long long)resumed.step,
          (long long)straight.step);
    CHECK(memcmp(resumed.rng.s, straight.rng.s, sizeof straight.rng.s) == 0, "generator differs");
    for (int p = 0; p < NPARAM; p++) {
        CHECK(memcmp(resumed.w[p], straight.w[p], sizeof(float) * sizes[p]) == 0,
              "%s differs after resuming", names[p]);
        CHECK(memcmp(resumed.m[p], straight.m[p], sizeof(float) * sizes[p]) == 0 &&
              memcmp(resumed.v[p], straight.v[p], sizeof(float) * sizes[p]) == 0,
              "AdamW moments of %s differ after resuming", names[p]);
    }
    /* and training moved the weights (the check above is not vacuous) */
    state fresh;
    state_new(&fresh);
    CHECK(memcmp(fresh.w[4], straight.w[4], sizeof(float) * sizes[4]) != 0,
          "the bias table did not train");
    state_free(&fresh), state_free(&straight), state_free(&resumed);
    return check_done();
}
