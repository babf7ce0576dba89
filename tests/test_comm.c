/* test_comm.c - data-parallel training through ra_train_comm (src/train.c),
 * without MPI: S "processes" are S threads of this program, each with its
 * own model and trainer, and the collectives are sums and copies between
 * their buffers behind a barrier (the sum in rank order, so every process
 * gets the same bits, as MPI's sums do).
 *
 * One process of T threads cuts a batch into T shards and adds their
 * gradients in shard order; S processes of one thread cut it into the same
 * S slices and add them in rank order. For a batch that splits evenly the
 * two runs must end with the very same weights, with and without ZeRO-1
 * (the optimiser state sharded), and their checkpoints must hold the same
 * moments. A checkpoint written by 2 processes resumes on 1 and on 3. */
#define _DEFAULT_SOURCE   /* pthread barriers, mkdtemp */
#include "check.h"
#include "relattn.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_RANKS 4

typedef struct {
    pthread_barrier_t bar;
    int size;
    float *buf[MAX_RANKS];
} world;

typedef struct {
    world *w;
    int rank;
} rank_ctx;

/* Floats [o, o + n) of every process's buffer summed in rank order into
 * this process's: the sum behind both collectives below. */
static ra_status sum_range(rank_ctx *c, float *b, int64_t o, int64_t n) {
    world *w = c->w;
    float *sum = malloc((size_t)(n ? n : 1) * sizeof *sum);
    w->buf[c->rank] = b;
    pthread_barrier_wait(&w->bar);
    for (int64_t i = 0; sum && i < n; i++) {
        float s = w->buf[0][o + i];
        for (int r = 1; r < w->size; r++) s += w->buf[r][o + i];
        sum[i] = s;
    }
    pthread_barrier_wait(&w->bar);
    if (sum) memcpy(b + o, sum, (size_t)n * sizeof *b);
    pthread_barrier_wait(&w->bar);
    const ra_status st = sum ? RA_OK : RA_ERR_NOMEM;
    free(sum);
    return st;
}

static ra_status allreduce(float *b, int64_t n, void *ctx) { return sum_range(ctx, b, 0, n); }

static ra_status reduce_scatter(float *b, const int64_t *off, const int64_t *cnt, void *ctx) {
    const rank_ctx *c = ctx;
    return sum_range(ctx, b, off[c->rank], cnt[c->rank]);
}

static ra_status allgather(float *b, const int64_t *off, const int64_t *cnt, void *ctx) {
    rank_ctx *c = ctx;
    world *w = c->w;
    w->buf[c->rank] = b;
    pthread_barrier_wait(&w->bar);
    for (int r = 0; r < w->size; r++)
        if (r != c->rank) memcpy(b + off[r], w->buf[r] + off[r], (size_t)cnt[r] * sizeof *b);
    pthread_barrier_wait(&w->bar);
    return RA_OK;
}

static const char *meta[] = {"arch", "swin", "img_size", "28,28", "patch_size", "4",
                             "in_chans", "1", "num_classes", "10", "embed_dim", "16",
                             "depths", "2,1", "num_heads", "2,2", "window_size", "7",
                             "mlp_ratio", "2.0", "qkv_bias", "true", "patch_norm", "true",
                             "ape", "false", "relative_position", "bias"};
#define NMETA ((int)(sizeof meta / sizeof *meta) / 2)

static ra_dataset data;

typedef struct {
    world *w;
    int rank, zero, steps;
    const char *resume, *save;   /* checkpoint to start from / to write at the end */
    float *weights;              /* out: the weights after the steps (malloc) */
    float *avg;                  /* out: their average (ema_decay; malloc) */
    int64_t n, opt_floats;
    float loss;
    ra_status st;
    char why[256];
} job;

/* A run of `steps` steps as process rank of w (w NULL: one process). */
static void *run(void *p) {
    job *j = p;
    rank_ctx rc = {.w = j->w, .rank = j->rank};
    ra_model *m = NULL;
    ra_trainer *t = NULL;
    ra_train_config cfg = ra_train_config_default();
    cfg.batch = 8, cfg.flip = 1, cfg.lr = 1e-3, cfg.warmup_epochs = 0, cfg.ema_decay = 0.75;
    ra_status st = j->resume ? ra_trainer_resume(&t, &m, j->resume, &data)
                             : ra_model_create(&m, meta, NMETA, 3);
    if (!st && !j->resume) st = ra_trainer_create(&t, m, &cfg, &data);
    if (!st && j->w) {
        ra_train_comm c = {.rank = j->rank, .size = j->w->size, .ctx = &rc,
                           .allreduce_sum = allreduce, .reduce_scatter_sum = reduce_scatter,
                           .allgather = allgather};
        st = ra_trainer_set_comm(t, &c, j->zero);
    }
    for (int s = 0; s < j->steps && !st; s++) st = ra_trainer_step(t, &j->loss, NULL);
    if (!st && j->save) st = ra_trainer_save(t, j->save, NULL, 0);
    if (!st) {
        j->n = ra_model_param_total(m);
        j->opt_floats = ra_trainer_optimizer_floats(t);
        j->weights = malloc((size_t)j->n * sizeof(float));
        if (j->weights) memcpy(j->weights, ra_model_weights(m), (size_t)j->n * sizeof(float));
        j->avg = malloc((size_t)j->n * sizeof(float));
        st = ra_trainer_use_average(t, 1);
        if (j->avg) memcpy(j->avg, ra_model_weights(m), (size_t)j->n * sizeof(float));
        if (!st) st = ra_trainer_use_average(t, 0);
    }
    j->st = st;
    if (st) snprintf(j->why, sizeof j->why, "%s", ra_last_error());
    ra_trainer_free(t);
    ra_model_free(m);
    return NULL;
}

/* size processes of one thread each; the first process's job is returned
 * (every process must have the same weights: checked here). */
static job processes(int size, int zero, int steps, const char *resume, const char *save) {
    world w = {.size = size};
    pthread_barrier_init(&w.bar, NULL, (unsigned)size);
    job j[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    ra_threads_set(1);
    for (int r = 0; r < size; r++) {
        j[r] = (job){.w = &w, .rank = r, .zero = zero, .steps = steps, .resume = resume,
                     .save = save};
        pthread_create(&th[r], NULL, run, &j[r]);
    }
    for (int r = 0; r < size; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&w.bar);
    for (int r = 0; r < size; r++) {
        CHECK(j[r].st == RA_OK, "%d processes, rank %d: %s", size, r, j[r].why);
        if (r && j[r].weights && j[0].weights)
            CHECK(memcmp(j[r].weights, j[0].weights, (size_t)j[0].n * sizeof(float)) == 0,
                  "%d processes%s: rank %d's weights differ from rank 0's", size,
                  zero ? " (ZeRO-1)" : "", r);
        if (r && j[r].avg && j[0].avg)
            CHECK(memcmp(j[r].avg, j[0].avg, (size_t)j[0].n * sizeof(float)) == 0,
                  "%d processes%s: rank %d's average differs from rank 0's", size,
                  zero ? " (ZeRO-1)" : "", r);
        if (r) free(j[r].weights), free(j[r].avg);
    }
    return j[0];
}

static job threads(int nt, int steps, const char *resume, const char *save) {
    job j = {.steps = steps, .resume = resume, .save = save};
    ra_threads_set(nt);
    run(&j);
    CHECK(j.st == RA_OK, "%d threads: %s", nt, j.why);
    return j;
}

static void same(const job *a, const job *b, const char *what) {
    CHECK(a->weights && b->weights && a->n == b->n, "%s: weights", what);
    if (a->weights && b->weights && a->n == b->n)
        CHECK(memcmp(a->weights, b->weights, (size_t)a->n * sizeof(float)) == 0,
              "%s: the weights differ", what);
    CHECK(a->avg && b->avg, "%s: averages", what);
    if (a->avg && b->avg && a->n == b->n)
        CHECK(memcmp(a->avg, b->avg, (size_t)a->n * sizeof(float)) == 0,
              "%s: the averages of the weights differ", what);
}

/* The moments of two checkpoints, tensor by tensor. */
static void same_state(const char *pa, const char *pb, const char *what) {
    ra_st_file *fa = NULL, *fb = NULL;
    CHECK(ra_st_open(&fa, pa) == RA_OK && ra_st_open(&fb, pb) == RA_OK, "%s: open: %s", what,
          ra_last_error());
    int compared = 0;
    for (int i = 0; fa && fb && i < ra_st_count(fa); i++) {
        const ra_st_tensor *ta = ra_st_at(fa, i), *tb = ra_st_find(fb, ta->name);
        CHECK(tb && tb->numel == ta->numel, "%s: %s missing", what, ta->name);
        if (!tb || tb->numel != ta->numel) continue;
        float *va = malloc((size_t)ta->numel * sizeof *va), *vb = malloc((size_t)ta->numel * sizeof *vb);
        if (va && vb && !ra_st_read_f32(va, fa, ta) && !ra_st_read_f32(vb, fb, tb)) {
            CHECK(memcmp(va, vb, (size_t)ta->numel * sizeof *va) == 0, "%s: %s differs", what,
                  ta->name);
            compared += strncmp(ta->name, RA_TRAIN_STATE_PREFIX, strlen(RA_TRAIN_STATE_PREFIX)) == 0;
        }
        free(va), free(vb);
    }
    CHECK(compared > 0, "%s: no optimiser state compared", what);
    ra_st_close(fa), ra_st_close(fb);
}

int main(void) {
    const int n = 32;
    data = (ra_dataset){.n = n, .h = 28, .w = 28, .classes = 10};
    data.images = malloc((size_t)n * 28 * 28);
    data.labels = malloc((size_t)n);
    uint64_t s = 5;
    for (int64_t i = 0; i < (int64_t)n * 28 * 28; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        data.images[i] = (uint8_t)(s >> 56);
    }
    for (int i = 0; i < n; i++) data.labels[i] = (uint8_t)(i * 7 % 10);
    char dir[] = "/tmp/relattn-comm-XXXXXX", pa[64], pb[64], pc[64];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(pa, sizeof pa, "%s/a.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/b.safetensors", dir);
    snprintf(pc, sizeof pc, "%s/c.safetensors", dir);

    /* 2 processes x 1 thread = 1 process x 2 threads, 4 processes = 4 threads */
    job t2 = threads(2, 3, NULL, pa), p2 = processes(2, 0, 3, NULL, NULL);
    same(&t2, &p2, "2 processes vs 2 threads");
    job z2 = processes(2, 1, 3, NULL, pb);
    same(&t2, &z2, "2 processes with ZeRO-1 vs 2 threads");
    CHECK(z2.opt_floats < t2.opt_floats && z2.opt_floats > 0,
          "ZeRO-1 keeps %lld floats of optimiser state on rank 0, not fewer than %lld",
          (long long)z2.opt_floats, (long long)t2.opt_floats);
    same_state(pa, pb, "checkpoint of 2 threads vs 2 processes with ZeRO-1");
    job t4 = threads(4, 2, NULL, NULL), z4 = processes(4, 1, 2, NULL, NULL);
    same(&t4, &z4, "4 processes with ZeRO-1 vs 4 threads");

    /* a run of 2 processes continues on 1 process and on 3 (ZeRO) */
    job r1 = threads(2, 2, pb, NULL), r3 = processes(2, 1, 2, pb, pc);
    same(&r1, &r3, "resumed on 2 threads vs on 2 processes with ZeRO-1");
    job r5 = processes(3, 1, 2, pb, NULL), r6 = threads(3, 2, pb, NULL);
    CHECK(r5.weights && r6.weights && r5.n == r6.n, "resumed on 3");
    if (r5.weights && r6.weights && r5.n == r6.n)   /* 8 images in 3 slices: sums reassociate */
        CHECK_CLOSE(r5.weights, r6.weights, (long)r5.n, 1e-5, 1e-7,
                    "resumed on 3 processes vs 3 threads");

    /* what a comm may not be */
    ra_model *m = NULL;
    ra_trainer *t = NULL;
    ra_threads_set(1);
    CHECK(ra_model_create(&m, meta, NMETA, 1) == RA_OK, "%s", ra_last_error());
    ra_train_config cfg = ra_train_config_default();
    cfg.batch = 8;
    if (m) CHECK(ra_trainer_create(&t, m, &cfg, &data) == RA_OK, "%s", ra_last_error());
    if (t) {
        ra_train_comm bad = {.rank = 2, .size = 2, .allreduce_sum = allreduce};
        CHECK(ra_trainer_set_comm(t, &bad, 0) == RA_ERR_ARG, "rank 2 of 2 accepted");
        bad = (ra_train_comm){.rank = 0, .size = 9, .allreduce_sum = allreduce};
        CHECK(ra_trainer_set_comm(t, &bad, 0) == RA_ERR_ARG, "9 processes for 8 images");
        bad = (ra_train_comm){.rank = 0, .size = 2, .allreduce_sum = allreduce};
        CHECK(ra_trainer_set_comm(t, &bad, 1) == RA_ERR_ARG, "ZeRO without its collectives");
        CHECK(ra_trainer_set_comm(t, NULL, 0) == RA_ERR_ARG, "NULL comm");
    }
    ra_trainer_free(t);
    ra_model_free(m);

    free(t2.weights), free(p2.weights), free(z2.weights), free(t4.weights), free(z4.weights);
    free(r1.weights), free(r3.weights), free(r5.weights), free(r6.weights);
    free(t2.avg), free(p2.avg), free(z2.avg), free(t4.avg), free(z4.avg);
    free(r1.avg), free(r3.avg), free(r5.avg), free(r6.avg);
    unlink(pa), unlink(pb), unlink(pc), rmdir(dir);
    free(data.images), free(data.labels);
    return check_done();
}
