/* test_threads.c - library calls run concurrently on shared read-only
 * models: four threads run the same models (every attention arch and the
 * networks) at once, and each output must equal the one of a run alone.
 * Built and run under ThreadSanitizer by scripts/tsan.sh; a plain test
 * otherwise. Kernels run one thread per call (ra_threads_set(1)), so the
 * outputs are bit-for-bit reproducible and the threads are the callers'.
 *   test_threads FIXTURES_DIR */
#include "check.h"
#include "relattn.h"

#include <pthread.h>
#include <string.h>

#define NTHREADS 4
#define ROUNDS 3

typedef struct {
    ra_model *m;
    ra_st_file *in;
    float *x, *kv;       /* the input (kv: window_attention_3d) */
    int64_t shape[5];
    int ndim, b_, n1, n2;
    float *want;         /* y of a run alone */
    int64_t ny;
} job;

static job jobs[16];
static int njobs;

/* One forward: y allocated (networks) or into buf (attention layers). */
static ra_status run(const job *j, float **y) {
    const ra_attn_layer *l = ra_model_attn(j->m);
    if (j->ndim == 5) {   /* swin_block_3d clips (B, D, H, W, C) */
        *y = malloc(sizeof **y * (size_t)j->ny);
        return ra_swin_block_3d_forward(j->m, *y, j->x, j->kv, (int)j->shape[0],
                                        (int)j->shape[1], (int)j->shape[2], (int)j->shape[3]);
    }
    if (!l) {
        int yn;
        int64_t ys[4];
        return ra_model_forward(j->m, y, &yn, ys, j->x, j->ndim, j->shape);
    }
    const int64_t n = (int64_t)j->b_ * j->n1 * ra_attn_layer_config(l)->dim;
    *y = malloc(sizeof **y * (size_t)n);
    return ra_attn_layer_forward(l, *y, NULL, j->x, j->kv, j->b_, j->n1, j->n2, NULL, 0);
}

static void add(const char *dir, const char *name) {
    char path[1024];
    job *j = &jobs[njobs];
    memset(j, 0, sizeof *j);
    snprintf(path, sizeof path, "%s/%s.model.safetensors", dir, name);
    if (ra_model_load(&j->m, path)) { CHECK(0, "%s: %s", path, ra_last_error()); return; }
    snprintf(path, sizeof path, "%s/%s.input.safetensors", dir, name);
    if (ra_st_open(&j->in, path)) { CHECK(0, "%s: %s", path, ra_last_error()); return; }
    const ra_st_tensor *t = ra_st_find(j->in, "x"), *q = ra_st_find(j->in, "q"),
                       *kv = ra_st_find(j->in, "kv");
    if (!t) t = q;
    if (!t || t->ndim > 5) { CHECK(0, "%s: no usable x", name); return; }
    j->x = malloc(sizeof *j->x * (size_t)t->numel);
    ra_st_to_f32(j->x, t);
    j->ndim = t->ndim;
    memcpy(j->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    j->b_ = (int)t->shape[0], j->n1 = j->n2 = (int)t->shape[1];
    if (kv) {
        j->kv = malloc(sizeof *j->kv * (size_t)kv->numel);
        ra_st_to_f32(j->kv, kv);
        j->n2 = (int)kv->shape[1];
    }
    if (j->ndim == 5) {
        CHECK(ra_swin_block_3d_check(j->m, 5, j->shape, kv ? 5 : 0, kv ? kv->shape : NULL) ==
              RA_OK, "%s: %s", name, ra_last_error());
        j->ny = t->numel;
    }
    ra_status st = run(j, &j->want);
    CHECK(st == RA_OK, "%s alone: %s", name, ra_last_error());
    if (st) return;
    const ra_attn_layer *l = ra_model_attn(j->m);
    if (l) j->ny = (int64_t)j->b_ * j->n1 * ra_attn_layer_config(l)->dim;
    else if (j->ndim != 5) {   /* the output size from a second run's shape */
        int yn;
        int64_t ys[4];
        float *y;
        ra_model_forward(j->m, &y, &yn, ys, j->x, j->ndim, j->shape);
        j->ny = 1;
        for (int i = 0; i < yn; i++) j->ny *= ys[i];
        free(y);
    }
    njobs++;
}

static void *worker(void *arg) {
    long bad = 0;
    const int first = (int)(intptr_t)arg;
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < njobs; k++) {
            const job *j = &jobs[(first + k) % njobs];
            float *y = NULL;
            if (run(j, &y) != RA_OK || memcmp(y, j->want, sizeof *y * (size_t)j->ny)) bad++;
            free(y);
        }
    return (void *)bad;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/fixtures";
    ra_threads_set(1);
    const char *names[] = {"vit_n17_h4", "swin_7x7", "w3d_d7d4", "shaw_both_k2",
                           "net_swin_official", "net_block_pad_9x11", "net3d_cross_d3d2",
                           "net3d_self_clamp"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) add(dir, names[i]);
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    long bad = 0;
    for (int i = 0; i < NTHREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    CHECK(bad == 0, "%ld concurrent runs failed or differed from a run alone", bad);
    printf("%d models, %d threads x %d rounds each\n", njobs, NTHREADS, ROUNDS);
    for (int i = 0; i < njobs; i++) {
        ra_model_free(jobs[i].m);
        ra_st_close(jobs[i].in);
        free(jobs[i].x), free(jobs[i].kv), free(jobs[i].want);
    }
    return check_done();
}
