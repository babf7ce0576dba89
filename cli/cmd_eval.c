/* cmd_eval.c - relattn eval: the test accuracy of a trained classifier and
 * its confusion matrix, with the evaluation relattn train runs (the same
 * call, ra_evaluate, on the same images: the number train reported). */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char eval_help[] =
    "usage: relattn eval MODEL [--data DIR] [--json] [--threads N] [--compare P]\n"
    "                    [--batch B] [--skip-bad]\n"
    "       relattn eval VIDEO_MODEL --data DIR [--clips N] [--crops 1|3] [--clip-len T]\n"
    "                    [--frame-interval S] [--frame-rate F] [--json] [--skip-bad]\n"
    "\n"
    "Classifies the test images of DIR (IDX files; default: Debian's\n"
    "dataset-fashion-mnist) with MODEL (a checkpoint of 'relattn train', or any\n"
    "swin/vit model file with in_chans 1 and the images' size), normalised with\n"
    "the model's metadata mean/std (train.mean / train.std of a checkpoint).\n"
    "Prints the accuracy and the confusion matrix (rows: true class, columns:\n"
    "predicted); --json prints one JSON object with test_accuracy, correct,\n"
    "images, classes, labels and confusion. A model whose metadata tta is flip\n"
    "(relattn train's default) classifies by the mean of its outputs for each\n"
    "image and its mirror, as train evaluated it; --set tta=none: one view.\n"
    "DIR may also be an image folder, DIR/<class>/... or DIR/val/<class>/... (as\n"
    "torchvision's ImageFolder lists it): top-1, top-5, each class's accuracy and the\n"
    "confusion matrix, each image through the model's own transform (as classify).\n"
    "A video model (swin3d) reads a video folder, DIR/<class>/<video> (video files\n"
    "or folders of frames): each video classified as classify does (its clips x crops\n"
    "views, probabilities averaged) and scored as an image is.\n"
    "  --batch B        images per batch of a folder (32)\n"
    "  --skip-bad       count and leave out images (videos) that do not decode (else 65)\n"
    "  --clips N --crops 1|3 --clip-len T --frame-interval S --frame-rate F\n"
    "                   a video model's views, as for classify (default: its metadata)\n"
    "  --compare P      also classify the images with MODEL in precision P (fp32,\n"
    "                   bf16 or int8) and print the top-1 agreement of the two\n"
    "                   (the share of images given the same class) and P's\n"
    "                   accuracy; in --json, \"compare\": {\"precision\",\n"
    "                   \"test_accuracy\", \"agreement\", \"same\"}\n"
    MODEL_OPTIONS_HELP;

/* The classes of the test images by MODEL in precision p, into pred
 * (test->n); EX_OK or an exit code. */
static int predict_in(const char *path, ra_precision p, const ra_dataset *test, float mean,
                      float std, int32_t *pred) {
    const ra_precision was = model_options.precision;
    model_options.precision = p;
    ra_model *m = NULL;
    ra_status st = open_model(&m, path);
    model_options.precision = was;
    if (!st) st = ra_predict(m, test, mean, std, 500, pred);
    ra_model_free(m);
    return st ? lib_fail(st) : EX_OK;
}

int cmd_eval(int argc, char **argv) {
    if (!take_model_options(&argc, argv)) return EX_USAGE;
    opt o[] = {{"--data", 1, 0}, {"--json", 0, 0}, {"--threads", 1, 0}, {"--compare", 1, 0},
               {"--skip-bad", 0, 0}, {"--batch", 1, 0}, {"--clips", 1, 0}, {"--crops", 1, 0},
               {"--clip-len", 1, 0}, {"--frame-interval", 1, 0}, {"--frame-rate", 1, 0},
               {"--help", 0, 0}, {"-h", 0, 0}, {0, 0, 0}};
    const char *pos[1];
    int npos = 0;
    if (!parse_args(argc, argv, o, pos, 1, &npos)) return EX_USAGE;
    if (get(o, "--help") || get(o, "-h")) return fputs(eval_help, stdout), EX_OK;
    if (npos != 1) return usage_error("expected MODEL");
    if (!threads_option(o)) return EX_USAGE;
    const int other = get(o, "--compare") ? ra_precision_parse(get(o, "--compare")) : -1;
    if (get(o, "--compare") && other < 0)
        return usage_error("--compare '%s': fp32, bf16 or int8", get(o, "--compare"));
    const char *dir = get(o, "--data") ? get(o, "--data") : "/usr/share/datasets/fashion-mnist";
    int batch = 32;
    if (get(o, "--batch") && !parse_int(&batch, get(o, "--batch"), 1, 4096))
        return usage_error("--batch '%s': need 1..4096", get(o, "--batch"));
    ra_model *m = NULL;
    ra_status st = open_model(&m, pos[0]);
    if (st) return lib_fail(st);
    const int video = ra_model_is_video(m);
    if (!video && (get(o, "--clips") || get(o, "--crops") || get(o, "--clip-len") ||
                   get(o, "--frame-interval") || get(o, "--frame-rate"))) {
        ra_model_free(m);
        return usage_error("--clips, --crops, --clip-len, --frame-interval and --frame-rate are "
                           "for a video model");
    }
    if (video) {   /* DIR/<class>/<video>: each video as classify sees it */
        ra_clip_spec cs;
        ra_video_transform vt;
        const char *source;
        int code = other >= 0 ? usage_error("--compare is for IDX test sets")
                   : !get(o, "--data") ? usage_error("a video model needs --data DIR, a folder "
                                                     "of videos per class")
                                       : video_options(&cs, &vt, &source, m, o, 0, 0);
        if (!code)
            code = eval_video_folder(m, dir, get(o, "--json") != NULL,
                                     get(o, "--skip-bad") != NULL, &cs, &vt, source);
        ra_model_free(m);
        return code;
    }
    if (is_image_folder(dir, "t10k")) {   /* DIR/<class>/<image>, not IDX files */
        if (other >= 0) {
            ra_model_free(m);
            return usage_error("--compare is for IDX test sets");
        }
        const int code = eval_folder(m, dir, get(o, "--json") != NULL, get(o, "--skip-bad") != NULL,
                                     batch);
        ra_model_free(m);
        return code;
    }
    ra_dataset test = {0};
    int64_t *conf = NULL;
    int32_t *pred = NULL, *pred2 = NULL;
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
    int64_t same = 0, correct2 = 0;
    if (other >= 0) {   /* the same images in the other precision, side by side */
        if (!(pred = malloc((size_t)test.n * sizeof *pred)) ||
            !(pred2 = malloc((size_t)test.n * sizeof *pred2))) {
            code = fail(EX_DATAERR, "too large: out of memory");
            goto done;
        }
        if ((st = ra_predict(m, &test, mean, std, 500, pred))) {
            code = lib_fail(st);
            goto done;
        }
        if ((code = predict_in(pos[0], (ra_precision)other, &test, mean, std, pred2))) goto done;
        for (int64_t i = 0; i < test.n; i++) {
            same += pred[i] == pred2[i];
            correct2 += pred2[i] == test.labels[i];
        }
    }
    if (get(o, "--json")) {
        /* the labels as jansson reads and writes them: never the metadata's
         * text pasted (the model loader checked it is an array of names) */
        const char *text = ra_model_meta(m, "labels");
        json_t *labels = text ? json_loads(text, JSON_REJECT_DUPLICATES, NULL) : NULL;
        if (text && !json_is_array(labels)) {   /* (a macro: its argument twice) */
            json_decref(labels);
            code = fail(EX_DATAERR, "metadata labels is not a JSON array of strings");
            goto done;
        }
        jw jo = {0};
        jw_object(&jo);
        jw_key(&jo, "test_accuracy");
        jw_real(&jo, "%.4f", acc);
        jw_key(&jo, "correct");
        jw_int(&jo, (long long)correct);
        jw_key(&jo, "images");
        jw_int(&jo, (long long)test.n);
        jw_key(&jo, "classes");
        jw_int(&jo, K);
        jw_key(&jo, "labels");
        if (labels) jw_value(&jo, labels);
        else jw_null(&jo);
        json_decref(labels);
        jw_key(&jo, "confusion");
        jw_array(&jo);
        for (int i = 0; i < K; i++) {
            jw_array(&jo);
            for (int j = 0; j < K; j++) jw_int(&jo, (long long)conf[i * K + j]);
            jw_end(&jo, ']');
        }
        jw_end(&jo, ']');
        if (other >= 0) {
            jw_key(&jo, "compare");
            jw_object(&jo);
            jw_key(&jo, "precision");
            jw_string(&jo, ra_precision_name((ra_precision)other));
            jw_key(&jo, "test_accuracy");
            jw_real(&jo, "%.4f", (double)correct2 / (double)test.n);
            jw_key(&jo, "agreement");
            jw_real(&jo, "%.4f", (double)same / (double)test.n);
            jw_key(&jo, "same");
            jw_int(&jo, (long long)same);
            jw_end(&jo, '}');
        }
        jw_end(&jo, '}');
        jw_line(&jo);
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
        if (other >= 0)
            printf("%s: test accuracy %.4f (%lld/%lld), top-1 agreement with %s %.4f (%lld/%lld)\n",
                   ra_precision_name((ra_precision)other), (double)correct2 / (double)test.n,
                   (long long)correct2, (long long)test.n,
                   ra_precision_name(model_options.precision), (double)same / (double)test.n,
                   (long long)same, (long long)test.n);
    }
done:
    free(pred), free(pred2);
    free(conf);
    ra_dataset_free(&test);
    ra_model_free(m);
    return code;
}
