/* cmd_eval.c - relattn eval: the test accuracy of a trained classifier and
 * its confusion matrix, with the evaluation relattn train runs (the same
 * call, ra_evaluate, on the same images: the number train reported). */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char eval_help[] =
    "usage: relattn eval MODEL [--data DIR] [--json] [--threads N]\n"
    "\n"
    "Classifies the test images of DIR (IDX files; default: Debian's\n"
    "dataset-fashion-mnist) with MODEL (a checkpoint of 'relattn train', or any\n"
    "swin/vit model file with in_chans 1 and the images' size), normalised with\n"
    "the model's metadata mean/std (train.mean / train.std of a checkpoint).\n"
    "Prints the accuracy and the confusion matrix (rows: true class, columns:\n"
    "predicted); --json prints one JSON object with test_accuracy, correct,\n"
    "images, classes, labels and confusion.\n"
    MODEL_OPTIONS_HELP;

int cmd_eval(int argc, char **argv) {
    if (!take_model_options(&argc, argv)) return EX_USAGE;
    opt o[] = {{"--data", 1, 0}, {"--json", 0, 0}, {"--threads", 1, 0},
               {"--help", 0, 0}, {"-h", 0, 0},     {0, 0, 0}};
    const char *pos[1];
    int npos = 0;
    if (!parse_args(argc, argv, o, pos, 1, &npos)) return EX_USAGE;
    if (get(o, "--help") || get(o, "-h")) return fputs(eval_help, stdout), EX_OK;
    if (npos != 1) return usage_error("expected MODEL");
    if (!threads_option(o)) return EX_USAGE;
    const char *dir = get(o, "--data") ? get(o, "--data") : "/usr/share/datasets/fashion-mnist";
    ra_model *m = NULL;
    ra_status st = open_model(&m, pos[0]);
    if (st) return lib_fail(st);
    ra_dataset test = {0};
    int64_t *conf = NULL;
    int code = EX_OK;
    float mean, std;
    const char *kc = ra_model_meta(m, "num_classes");
    const int K = kc ? atoi(kc) : 0;
    if (!model_norm(m, &mean, &std)) {
        code = EX_DATAERR;
        goto done;
    }
    if ((st = ra_dataset_load_dir(&test, dir, "test"))) {
        code = lib_fail(st);
        goto done;
    }
    if (K < test.classes || K > 4096) {
        code = fail(EX_DATAERR, "the model has %d classes, the data %d", K, test.classes);
        goto done;
    }
    if (!(conf = calloc((size_t)K * K, sizeof *conf))) {
        code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    int64_t correct = 0;
    if ((st = ra_evaluate(m, &test, mean, std, 500, &correct, conf, K))) {
        code = lib_fail(st);
        goto done;
    }
    const double acc = (double)correct / (double)test.n;
    if (get(o, "--json")) {
        printf("{\"test_accuracy\": %.4f, \"correct\": %lld, \"images\": %lld, \"classes\": %d, "
               "\"labels\": %s, \"confusion\": [", acc, (long long)correct, (long long)test.n, K,
               ra_model_meta(m, "labels") ? ra_model_meta(m, "labels") : "null");
        for (int i = 0; i < K; i++) {
            printf("%s[", i ? ", " : "");
            for (int j = 0; j < K; j++) printf("%s%lld", j ? ", " : "", (long long)conf[i * K + j]);
            printf("]");
        }
        printf("]}\n");
    } else {
        printf("test accuracy %.4f (%lld/%lld)\n", acc, (long long)correct, (long long)test.n);
        printf("confusion matrix (rows: true class, columns: predicted)\n     ");
        for (int j = 0; j < K; j++) printf(" %5d", j);
        printf("\n");
        for (int i = 0; i < K; i++) {
            printf("%5d", i);
            for (int j = 0; j < K; j++) printf(" %5lld", (long long)conf[i * K + j]);
            printf("\n");
        }
    }
done:
    free(conf);
    ra_dataset_free(&test);
    ra_model_free(m);
    return code;
}
