/* bench_train.c - images/s of the training step (ra_trainer_step) of the
 * default `relattn train` model (swin on 28x28 one-channel images: patch 4,
 * embed 64, depths 2,2, heads 2,4, window 7, batch 128; --patch,
 * --embed-dim, --depths, --heads for others) on random data, and
 * a checksum of the weights after the steps (the same for the same thread
 * count: the determinism check).
 *   relattn_bench_train [--threads T] [--steps N] [--warmup W] [--batch B]
 *                       [--reps R] [--patch P] [--embed-dim C] [--depths ..] [--heads ..]
 *                       [--precision fp32|bf16]
 * Prints each repetition's images/s, then the median. */
#include "relattn.h"
#include "peak.h"
#include "timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

int main(int argc, char **argv) {
    int threads = 1, steps = 10, warmup = 2, batch = 128, reps = 3;
    const char *patch = "4", *embed = "64", *depths = "2,2", *heads = "2,4", *prec = "fp32";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--patch")) patch = argv[i + 1];
        else if (!strcmp(argv[i], "--embed-dim")) embed = argv[i + 1];
        else if (!strcmp(argv[i], "--depths")) depths = argv[i + 1];
        else if (!strcmp(argv[i], "--heads")) heads = argv[i + 1];
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--precision")) prec = argv[i + 1];
        else return fprintf(stderr, "unknown option %s\n", argv[i]), 2;
    }
    if (reps < 1 || reps > 64) reps = 3;
    ra_threads_set(threads);
    const char *meta[] = {"arch", "swin", "img_size", "28,28", "patch_size", patch,
                          "in_chans", "1", "num_classes", "10", "embed_dim", embed,
                          "depths", depths, "num_heads", heads, "window_size", "7",
                          "mlp_ratio", "4.0", "qkv_bias", "true", "patch_norm", "true",
                          "ape", "false", "relative_position", "bias"};
    ra_model *m = NULL;
    ra_status st = ra_model_create(&m, meta, (int)(sizeof meta / sizeof *meta) / 2, 0);
    if (!st) st = ra_model_set_precision(m, (ra_precision)ra_precision_parse(prec));
    if (st) return fprintf(stderr, "model: %s\n", ra_last_error()), 1;
    ra_dataset d = {.n = (int64_t)batch * 4, .h = 28, .w = 28, .classes = 10};
    d.images = malloc((size_t)d.n * 28 * 28);
    d.labels = malloc((size_t)d.n);
    if (!d.images || !d.labels) return 1;
    uint64_t s = 12345;
    for (int64_t i = 0; i < d.n * 28 * 28; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        d.images[i] = (uint8_t)(s >> 56);
    }
    for (int64_t i = 0; i < d.n; i++) d.labels[i] = (uint8_t)(i * 7 % 10);
    ra_train_config cfg = ra_train_config_default();
    cfg.batch = batch;
    ra_trainer *t = NULL;
    if ((st = ra_trainer_create(&t, m, &cfg, &d)))
        return fprintf(stderr, "trainer: %s\n", ra_last_error()), 1;
    float loss = 0, gn = 0;
    for (int i = 0; i < warmup; i++)
        if ((st = ra_trainer_step(t, &loss, &gn)))
            return fprintf(stderr, "step: %s\n", ra_last_error()), 1;
    double ips[64], cps[64];
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    for (int r = 0; r < reps; r++) {
        const double t0 = bench_now(), c0 = bench_clock(CLOCK_PROCESS_CPUTIME_ID);
        for (int i = 0; i < steps; i++)
            if ((st = ra_trainer_step(t, &loss, &gn)))
                return fprintf(stderr, "step: %s\n", ra_last_error()), 1;
        ips[r] = (double)steps * batch / (bench_now() - t0);
        /* images per second of the process's CPU time, times the threads:
         * the wall's rate on an idle machine if no thread waits (the
         * figure a shared machine disturbs least) */
        cps[r] = (double)steps * batch * threads / (bench_clock(CLOCK_PROCESS_CPUTIME_ID) - c0);
        printf("rep %d: %.1f img/s, %.1f img/s of CPU time x threads (loss %.6f)\n", r, ips[r],
               cps[r], loss);
    }
    getrusage(RUSAGE_SELF, &ru1);
    printf("page faults per timed step: %.1f\n",
           (double)(ru1.ru_minflt - ru0.ru_minflt) / ((double)reps * steps));
    const float *w = ra_model_weights(m);
    double sum = 0, sabs = 0;
    for (int64_t i = 0; i < ra_model_param_total(m); i++) sum += w[i] * (double)(i % 7 + 1), sabs += w[i] < 0 ? -w[i] : w[i];
    qsort(ips, (size_t)reps, sizeof *ips, bench_cmp_double);
    qsort(cps, (size_t)reps, sizeof *cps, bench_cmp_double);
    /* a training step is counted as 3 forwards (the backward as 2), each
     * 2 flops per multiply-add of the Swin authors' count */
    const double flop_img = 6.0 * (double)ra_model_flops(m, 28, 28);
    const char *isa;
    const double peak = fma_peak(threads, &isa);
    printf("%s threads %d batch %d: median of CPU time x threads %.1f img/s\n", prec, threads,
           batch, cps[reps / 2]);
    printf("%s threads %d batch %d: median %.1f img/s = %.1f GFLOP/s (%.2f GFLOP per image), "
           "%.1f%% of the FMA peak (%s, measured: %.1f GFLOP/s); weights checksum %.17g %.17g\n",
           prec, threads, batch, ips[reps / 2], ips[reps / 2] * flop_img * 1e-9, flop_img * 1e-9,
           peak > 0 ? 100.0 * ips[reps / 2] * flop_img * 1e-9 / peak : 0.0, isa, peak, sum, sabs);
    ra_trainer_free(t);
    ra_model_free(m);
    free(d.images);
    free(d.labels);
    return 0;
}
