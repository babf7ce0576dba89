/* cmd_train.c - relattn train: a small Swin learns Fashion-MNIST
 * (docs/reference.md, section 4, relattn train; docs/training.md).
 *
 * The command builds the model from its options (or resumes a checkpoint),
 * runs the library's trainer (src/train/train.c) step by step, reports progress,
 * evaluates at every epoch's end, and writes checkpoints atomically: every
 * --ckpt-every steps, at every evaluation and at the end. A run interrupted
 * at any point (kill -9 included) continues with --resume from its last
 * checkpoint and ends with the weights of an uninterrupted run.
 *
 * Under mpirun each process takes its slice of every global batch and the
 * gradients are summed across processes once per step (src/train/train.c,
 * ra_train_comm; cli/procs.c holds the MPI side): process 0 alone prints
 * and writes, the evaluation is split across the processes and summed. */
#include "cli.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char train_help[] =
    "usage: relattn train [--out FILE] [--data DIR] [--json] [options]\n"
    "       relattn train --init MODEL --data DIR [--out FILE] [options]\n"
    "       relattn train --resume CKPT [--out FILE] [--max-steps N] [--time-budget S] ...\n"
    "\n"
    "Trains a Swin Transformer with learned relative position bias on\n"
    "Fashion-MNIST (IDX files; default: Debian's dataset-fashion-mnist in\n"
    "/usr/share/datasets/fashion-mnist) and writes a checkpoint that every other\n"
    "command loads as a swin model file.\n"
    "\n"
    "model:\n"
    "  --patch P           patch size (4: 7x7 tokens; 2: 14x14)\n"
    "  --patch-kernel K    the embedding's kernel: P (patches), or P + 2j for an\n"
    "                      overlapping embedding (each patch's KxK neighbourhood)\n"
    "  --embed-dim C       channels of stage 1 (64)\n"
    "  --depths D1,D2,..   blocks per stage (2,2)\n"
    "  --heads H1,H2,..    heads per stage (2,4)\n"
    "  --window W          window size (7); blocks alternate shift 0 and W/2\n"
    "  --pos KIND          position encoding: relbias (default; Swin's learned\n"
    "                      relative position bias), none, abs (absolute\n"
    "                      embedding), relbias+abs, shaw (Shaw et al.'s relative\n"
    "                      keys and values over the window's 2-D offsets)\n"
    "recipe:\n"
    "  --epochs E          length of the schedule (20: about 580 s on 2 cores in\n"
    "                      bf16, 730 s in fp32)\n"
    "  --batch B           global batch (64)\n"
    "  --lr LR             peak learning rate of AdamW (2e-3); linear warm-up from\n"
    "                      1e-6, cosine to 1e-5; weight decay 0.05 (--wd)\n"
    "  --warmup-epochs W   length of the linear warm-up (0.5)\n"
    "  --label-smoothing E (0.1)   --clip N  gradient-norm clipping (5; 0 off)\n"
    "  --augment KIND      flip (default: horizontal flip), crop+flip (and\n"
    "                      RandomCrop(28, padding 2)), crop, or none (--no-augment);\n"
    "                      for an image folder also timm (Swin's ImageNet recipe:\n"
    "                      RandomResizedCrop, flip, RandAugment rand-m9-mstd0.5-inc1,\n"
    "                      random erasing 0.25, mixup 0.8, cutmix 1.0) or rrc+flip\n"
    "                      (RandomResizedCrop and flip): the images are decoded for\n"
    "                      every batch by --workers threads, RGB, ImageNet's mean/std\n"
    "                      (a video folder: below)\n"
    "  --rand-augment SPEC timm's RandAugment string, or none\n"
    "  --reprob P          random erasing's probability (timm's RandomErasing)\n"
    "  --mixup A --cutmix A  Beta(A, A) mixing of every batch (0: off)\n"
    "  --interpolation F   RandomResizedCrop's and the evaluation's filter (bicubic)\n"
    "  --crop-pct F        the evaluation: Resize(S / F) + CenterCrop(S) (0.875)\n"
    "  --workers N         threads decoding ahead of the step (default: --threads)\n"
    "fine-tuning:\n"
    "  --init MODEL        start from any model source (a .pth, safetensors file, timm\n"
    "                      or Hugging Face folder; --key, --set) of arch swin, swinv2\n"
    "                      or vit (swin3d: a video folder), on an image folder through\n"
    "                      its own transform, with\n"
    "                      a head for the folder's classes (--num-classes K); at\n"
    "                      another --img-size or --window, bias tables resized\n"
    "                      bicubically (--table-resize swin) or as timm (timm)\n"
    "  --arch NAME         a released size from scratch on an image folder: swin_t,\n"
    "                      swin_s, swin_b, swin_v2_t, swin_v2_s, swin_v2_b, vit_ti_16,\n"
    "                      vit_s_16, vit_b_16, vit_b_32, vit_l_16, vit_l_32, vit_h_14;\n"
    "                      on a video folder swin3d_t, swin3d_s, swin3d_b\n"
    "  --in-chans N        N input channels (1: grey images); --init adapts the patch\n"
    "                      embedding as timm's adapt_input_conv\n"
    "  --drop-path R       stochastic depth, R * i / (L - 1) for block i of L (0)\n"
    "  --layer-decay D     layer l of L + 2 learns at lr * D^(L + 1 - l) (off)\n"
    "  --accum N           each batch as N micro-batches of B / N (less memory)\n"
    "  --no-shuffle        the data's order every epoch\n"
    "  --sched S           cosine (default: warm-up, then cosine) or constant (--lr)\n"
    "  --freeze            train the head alone (a linear probe)\n"
    "  --tta KIND          how the checkpoint predicts (metadata tta; eval, classify\n"
    "                      and the run's own evaluations): flip (the default when\n"
    "                      the run flips its images: the mean of the outputs for\n"
    "                      each image and its mirror) or none (one view)\n"
    "  --ema D             evaluate and save an exponential moving average of the\n"
    "                      weights, avg += (1 - D)(w - avg) after every step\n"
    "                      (0: off, the default; 0.999 averages about 1000 steps)\n"
    "  --seed S            (0) the same seed and --threads give the same run\n"
    "  --precision P       auto (the default: bf16 where the CPU has AVX512_BF16,\n"
    "                      else fp32), fp32, or bf16: the Linear products of the\n"
    "                      forward and backward on bfloat16 values, float32 sums;\n"
    "                      float32 weights, optimiser and checkpoint. fp32 gives\n"
    "                      the same run on every CPU, bf16 on every CPU with\n"
    "                      AVX512_BF16\n"
    "videos (--arch swin3d_t|swin3d_s|swin3d_b, or --init of a swin3d model):\n"
    "  --data DIR          a video folder, DIR/<class>/<video> (video files or folders\n"
    "                      of frames; DIR/train + DIR/val, or --val-split F): each\n"
    "                      sample one clip at a random first frame (the official\n"
    "                      Video Swin training's SampleFrames), the shorter side to\n"
    "                      the model's resize, RandomResizedCrop to its crop and a\n"
    "                      flip (--augment rrc+flip, the default; flip, none)\n"
    "  --clip-len T        frames a clip (the model's num_frames)\n"
    "  --frame-interval S  frames between two of a clip (2)\n"
    "run:\n"
    "  --max-steps N       stop after N steps in all (the schedule is unchanged)\n"
    "  --time-budget S     stop when S seconds of training have passed\n"
    "  --threads N         threads (default: all cores; under mpirun, the cores\n"
    "                      of the machine shared by the processes on it)\n"
    "  --out FILE          the checkpoint (default relattn-fmnist.safetensors)\n"
    "  --ckpt-every N      also write it every N steps (500)\n"
    "  --resume CKPT       continue a run from its checkpoint (its model and recipe)\n"
    "  --data DIR          IDX files (Fashion-MNIST's names), or an image folder:\n"
    "                      DIR/train/<class>/... and DIR/val/<class>/..., or\n"
    "                      DIR/<class>/... with --val-split F (a share held out by\n"
    "                      the seed); PNG or JPEG, grey or colour, any size\n"
    "  --img-size S        an image folder's images as Resize(S) + CenterCrop(S) (32)\n"
    "  --skip-bad          leave out images of a folder that do not decode (else 65)\n"
    "  --json              one JSON object per evaluation on stdout, the last with\n"
    "                      test_accuracy, train_seconds, images_per_second, epochs\n"
    "several processes (MPI): mpirun -np P relattn train ...\n"
    "  every process takes B/P images of each global batch of B; the gradients\n"
    "  are summed across processes each step, so P processes of T threads train\n"
    "  as one process of P*T threads would; --resume works for any P\n"
    "  --zero              ZeRO-1: each process keeps the AdamW state of about 1/P\n"
    "                      of the parameters (the checkpoint is the same)\n";

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
#define LOG_EVERY 50   /* steps per point of the loss curve */
#define MAX_LOG 4096

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The training log: curve points kept in the checkpoint ("train.log.*"),
 * "step value step value ..." so that a resumed run continues its curves. */
typedef struct {
    double loss[2 * MAX_LOG], acc[2 * MAX_LOG];
    int nloss, nacc;
    double train_seconds;   /* of all sessions of the run */
    int64_t images;         /* trained, of all sessions */
} train_log;

static void log_add(double *v, int *n, double step, double value) {
    if (*n >= MAX_LOG) {   /* keep every other point */
        for (int i = 0; i < MAX_LOG / 2; i++) v[2 * i] = v[4 * i], v[2 * i + 1] = v[4 * i + 1];
        *n = MAX_LOG / 2;
    }
    v[2 * *n] = step, v[2 * *n + 1] = value;
    (*n)++;
}

static char *log_str(const double *v, int n) {
    char *s = malloc((size_t)n * 48 + 1), *p = s;
    if (!s) return NULL;
    *p = 0;
    for (int i = 0; i < n; i++)
        p += sprintf(p, "%s%.0f %.6g", i ? " " : "", v[2 * i], v[2 * i + 1]);
    return s;
}

/* ---- a streamed image folder ------------------------------------------------ */

/* The images of a folder decoded for every batch by loaders (--augment timm
 * or rrc+flip): what a checkpoint records of it ("train.augment", ...), so
 * that --resume builds the same loaders. */
typedef struct {
    int on;
    int random_crop;    /* RandomResizedCrop, else the model's evaluation transform */
    double hflip;
    char augment[16];   /* timm, rrc+flip; with --init also flip, none */
    char ra[64];        /* RandAugment's spec, or none */
    double reprob, crop_pct;
    ra_interp interp;
    int workers;
} recipe;

/* What an --augment name (timm, rrc+flip, flip, none) makes of the loaders:
 * RandomResizedCrop (else the model's evaluation transform) and the flip. */
static void recipe_augment(recipe *r, const char *a) {
    r->on = 1;
    snprintf(r->augment, sizeof r->augment, "%s", a);
    r->random_crop = !strcmp(a, "timm") || !strcmp(a, "rrc+flip");
    r->hflip = strcmp(a, "none") ? 0.5 : 0;
}

/* The evaluation's shorter side: timm's int(math.floor(S / crop_pct)). */
static int eval_side(const recipe *r, int S) { return (int)floor(S / r->crop_pct); }

/* The recipe's metadata pairs into kv (5 pairs; the strings in buf). */
static int recipe_meta(const recipe *r, const char **kv, char buf[3][32]) {
    snprintf(buf[0], 32, "%.9g", r->reprob);
    snprintf(buf[1], 32, "%.9g", r->crop_pct);
    const char *v[] = {"train.augment", r->augment, "train.rand_augment", r->ra,
                       "train.reprob", buf[0], "train.interpolation", ra_interp_name(r->interp),
                       "train.crop_pct", buf[1]};
    memcpy(kv, v, sizeof v);
    return 5;
}

/* The recipe of a checkpoint (none when it has no train.augment). */
static int recipe_of_checkpoint(recipe *r, const ra_st_file *f) {
    const char *a = ra_st_meta(f, "train.augment");
    if (!a) return 1;
    const char *ra = ra_st_meta(f, "train.rand_augment"), *rp = ra_st_meta(f, "train.reprob");
    const char *ip = ra_st_meta(f, "train.interpolation"), *cp = ra_st_meta(f, "train.crop_pct");
    char *e1 = NULL, *e2 = NULL;
    recipe_augment(r, a);
    snprintf(r->ra, sizeof r->ra, "%s", ra ? ra : "none");
    r->reprob = rp ? strtod(rp, &e1) : 0;
    r->crop_pct = cp ? strtod(cp, &e2) : 0.875;
    const int interp = ip ? ra_interp_parse(ip) : RA_INTERP_BICUBIC;
    r->interp = (ra_interp)interp;
    return interp >= 0 && (!e1 || !*e1) && (!e2 || !*e2) && r->reprob >= 0 && r->reprob <= 1 &&
           r->crop_pct > 0 && r->crop_pct <= 1 && strlen(a) < sizeof r->augment;
}

static int loaders_of(ra_loader **tl, ra_loader **vl, int64_t **own, const train_set *ts,
                      ra_loader_config *lc, int eval_batch, const procs *pc);

/* The training and evaluation loaders of a streamed folder, at the size of
 * the evaluation transform tf (the model's: ra_model_transform), which
 * also gives the normalisation; *own the indices of this process's share
 * of the evaluation when the folder's are implicit (the loader borrows
 * them: the caller frees them after it). */
static int make_loaders(ra_loader **tl, ra_loader **vl, int64_t **own, const train_set *ts,
                        const recipe *r, const ra_train_config *c, const ra_transform *tf,
                        int skip_bad, const procs *pc) {
    ra_loader_config lc = ra_loader_config_default();
    const int S = tf->crop_h;
    if (tf->crop == RA_CROP_NONE || tf->crop_w != S)
        return fail(EX_DATAERR, "the model's image transform does not give square images "
                    "(%dx%d): it cannot be trained on a folder here", tf->crop_h, tf->crop_w);
    lc.size = S, lc.batch = c->batch, lc.seed = c->seed, lc.interp = r->interp;
    lc.reprob = r->reprob, lc.workers = r->workers, lc.skip_bad = skip_bad;
    lc.random_crop = r->random_crop, lc.hflip = r->hflip, lc.shuffle = c->shuffle;
    lc.eval = *tf;   /* (training without RandomResizedCrop) */
    memcpy(lc.mean, tf->mean, sizeof lc.mean), memcpy(lc.std, tf->std, sizeof lc.std);
    ra_status st = RA_OK;
    if (strcmp(r->ra, "none")) {
        lc.randaugment = 1;
        if ((st = ra_randaugment_parse(&lc.ra, r->ra))) return lib_fail(st);
    }
    return loaders_of(tl, vl, own, ts, &lc, 100, pc);
}

/* The same for a video folder, at the model's video transform (its
 * metadata: the clip's frames and interval, the shorter side, the crop,
 * the normalisation). */
static int make_video_loaders(ra_loader **tl, ra_loader **vl, int64_t **own, const train_set *ts,
                              const recipe *r, const ra_train_config *c, const ra_model *m,
                              int skip_bad, const procs *pc) {
    ra_clip_spec cs;
    ra_video_transform vt;
    ra_status st = ra_model_video_transform(&cs, &vt, NULL, m);
    if (st) return lib_fail(st);
    if (vt.frame.crop == RA_CROP_NONE || vt.frame.crop_h != vt.frame.crop_w)
        return fail(EX_DATAERR, "the model's video transform does not crop square frames "
                    "(%dx%d): it cannot be trained on a folder here", vt.frame.crop_h,
                    vt.frame.crop_w);
    ra_loader_config lc = ra_loader_config_default();
    lc.size = vt.frame.crop_h, lc.batch = c->batch, lc.seed = c->seed, lc.interp = r->interp;
    lc.workers = r->workers, lc.skip_bad = skip_bad, lc.shuffle = c->shuffle;
    lc.random_crop = r->random_crop, lc.hflip = r->hflip;
    lc.clip_len = cs.clip_len, lc.frame_interval = cs.frame_interval;
    lc.short_side = vt.frame.resize != RA_RESIZE_NONE ? vt.frame.resize_h : vt.frame.crop_h;
    lc.video_eval = vt, lc.video_eval.crops = 1;
    return loaders_of(tl, vl, own, ts, &lc, 4, pc);
}

/* The training loader of lc and the evaluation loader of this process's
 * share of the evaluation part, eval_batch samples a batch. */
static int loaders_of(ra_loader **tl, ra_loader **vl, int64_t **own, const train_set *ts,
                      ra_loader_config *lc, int eval_batch, const procs *pc) {
    ra_status st;
    if ((st = ra_loader_create(tl, &ts->tf, ts->tidx, ts->train.n, lc))) return lib_fail(st);
    lc->train = 0, lc->batch = eval_batch;
    const int64_t n = ts->test.n, first = n * pc->rank / pc->size;
    const int64_t part = n * (pc->rank + 1) / pc->size - first;
    const ra_image_folder *vf = ts->vf.n ? &ts->vf : &ts->tf;
    if (!ts->vidx && !(*own = malloc(sizeof **own * (size_t)(part > 0 ? part : 1))))
        return fail(EX_DATAERR, "too large: out of memory");
    for (int64_t i = 0; *own && i < part; i++) (*own)[i] = first + i;
    if (part < 1)
        return fail(EX_DATAERR, "%lld evaluation images for %d processes", (long long)n,
                    pc->size);
    st = ra_loader_create(vl, vf, ts->vidx ? ts->vidx + first : *own, part, lc);
    return st ? lib_fail(st) : EX_OK;
}

/* The model --init starts from, with a head for the data's classes (and
 * --img-size): ra_model_derive. */
/* The model of --init (derived from a model source) or --arch (a
 * released size made anew) for the folder's classes, with --num-classes,
 * --img-size, --window, --drop-path and --table-resize. */
static int init_model(ra_model **m, const char *init, const char *arch, const train_set *ts,
                      const opt *o, uint64_t seed, int size, double drop_path, int video) {
    char classes[16], img[32], dp[32];
    int k = ts->train.classes, window = 0, chans = 0;
    if (get(o, "--in-chans") && !parse_int(&chans, get(o, "--in-chans"), 1, 64))
        return usage_error("--in-chans '%s': need 1..64", get(o, "--in-chans"));
    if (get(o, "--num-classes") && (!parse_int(&k, get(o, "--num-classes"), 1, 1 << 20) ||
                                    k < ts->train.classes))
        return usage_error("--num-classes '%s': need at least the data's %d classes",
                           get(o, "--num-classes"), ts->train.classes);
    if (get(o, "--window") && !parse_int(&window, get(o, "--window"), 1, 64))
        return usage_error("--window '%s': need 1..64", get(o, "--window"));
    const char *tr = get(o, "--table-resize");
    if (tr && strcmp(tr, "swin") && strcmp(tr, "timm"))
        return usage_error("--table-resize '%s': swin (the authors' bicubic) or timm", tr);
    snprintf(classes, sizeof classes, "%d", k);
    snprintf(img, sizeof img, "%d,%d", size, size);
    snprintf(dp, sizeof dp, "%.12g", drop_path);
    const char *set[32] = {"num_classes", classes, "labels", ts->labels};
    int nset = 2;
    if (video) {   /* what the run evaluates: one centre clip, one crop (the training's clip) */
        static const char *const kv[] = {"video.sampler", "mmaction", "video.clips", "1",
                                         "video.crops", "1"};
        for (int i = 0; i < 3; i++)
            set[2 * nset] = kv[2 * i], set[2 * nset + 1] = kv[2 * i + 1], nset++;
        set[2 * nset] = "video.frame_interval";
        set[2 * nset + 1] = get(o, "--frame-interval") ? get(o, "--frame-interval") : "2";
        nset++;
        if (get(o, "--clip-len"))
            set[2 * nset] = "video.clip_len", set[2 * nset + 1] = get(o, "--clip-len"), nset++;
    }
    if (get(o, "--img-size")) set[2 * nset] = "img_size", set[2 * nset + 1] = img, nset++;
    if (window) set[2 * nset] = "window_size", set[2 * nset + 1] = get(o, "--window"), nset++;
    if (get(o, "--drop-path")) set[2 * nset] = "drop_path_rate", set[2 * nset + 1] = dp, nset++;
    if (tr) set[2 * nset] = RA_DERIVE_TABLE_RESIZE, set[2 * nset + 1] = tr, nset++;
    if (chans) set[2 * nset] = "in_chans", set[2 * nset + 1] = get(o, "--in-chans"), nset++;
    if (arch) {
        ra_status st = ra_model_create_preset(m, arch, set, nset, seed);
        return st ? lib_fail(st) : EX_OK;
    }
    ra_model *src = NULL;
    ra_status st = open_model(&src, init);
    if (st) return lib_fail(st);
    char crop[32], shorter[32];
    ra_clip_spec cs;
    ra_video_transform vt;
    if (video && get(o, "--img-size") && !(st = ra_model_video_transform(&cs, &vt, NULL, src))) {
        /* the frames' crop to S, their resize scaled with it (as the presets) */
        snprintf(crop, sizeof crop, "%dx%d", size, size);
        const int c0 = vt.frame.crop_h > 0 ? vt.frame.crop_h : size;
        snprintf(shorter, sizeof shorter, "shorter %d", (int)((double)vt.frame.resize_h * size / c0));
        set[2 * nset] = "transform.crop", set[2 * nset + 1] = crop, nset++;
        set[2 * nset] = "transform.resize", set[2 * nset + 1] = shorter, nset++;
    }
    if (!st) st = ra_model_derive(m, src, set, nset, seed);
    ra_model_free(src);
    return st ? lib_fail(st) : EX_OK;
}

/* Save a checkpoint with the log. */
static ra_status save(const ra_trainer *t, const char *path, const train_log *lg,
                      const recipe *rc) {
    char *ls = log_str(lg->loss, lg->nloss), *as = log_str(lg->acc, lg->nacc);
    char secs[32], imgs[32], rbuf[3][32];
    snprintf(secs, sizeof secs, "%.3f", lg->train_seconds);
    snprintf(imgs, sizeof imgs, "%lld", (long long)lg->images);
    const char *extra[18] = {"train.log.loss", ls ? ls : "", "train.log.test_accuracy",
                             as ? as : "", "train.seconds", secs, "train.images_seen", imgs};
    const int n = 4 + (rc->on ? recipe_meta(rc, extra + 8, rbuf) : 0);
    ra_status st = ra_trainer_save(t, path, extra, n);
    free(ls), free(as);
    return st;
}

/* ---- the model of the options --------------------------------------------- */

static int parse_list(char *out, size_t n, const char *s, int lo, int hi, int *count) {
    /* "2,2" -> validated copy; at most 8 entries */
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < lo || v > hi || k == 8) return 0;
        k++;
        p = end;
        if (*p == ',') p++;
        else if (*p) return 0;
    }
    if (k == 0 || strlen(s) >= n) return 0;
    snprintf(out, n, "%s", s);
    *count = k;
    return 1;
}

static const char fmnist_labels[] =
    "[\"T-shirt/top\", \"Trouser\", \"Pullover\", \"Dress\", \"Coat\", \"Sandal\", \"Shirt\", "
    "\"Sneaker\", \"Bag\", \"Ankle boot\"]";

static int build_model(ra_model **m, const opt *o, const train_set *ts, const char *data_dir,
                       const ra_train_config *c, const recipe *rc, double drop_path) {
    const ra_dataset *d = &ts->train;
    char depths[64] = "2,2", heads[64] = "2,4", img[32], classes[16], mean[32], std[32];
    int patch = 4, embed = 64, window = 7, nd = 2, nh = 2;
    if (get(o, "--patch") && !parse_int(&patch, get(o, "--patch"), 1, 64))
        return usage_error("--patch '%s': need 1..64", get(o, "--patch"));
    int pk = patch;
    if (get(o, "--patch-kernel") &&
        (!parse_int(&pk, get(o, "--patch-kernel"), patch, 64) || (pk - patch) % 2))
        return usage_error("--patch-kernel '%s': need %d + an even number, at most 64",
                           get(o, "--patch-kernel"), patch);
    if (get(o, "--embed-dim") && !parse_int(&embed, get(o, "--embed-dim"), 1, 4096))
        return usage_error("--embed-dim '%s': need 1..4096", get(o, "--embed-dim"));
    if (get(o, "--window") && !parse_int(&window, get(o, "--window"), 1, 64))
        return usage_error("--window '%s': need 1..64", get(o, "--window"));
    if (get(o, "--depths") && !parse_list(depths, sizeof depths, get(o, "--depths"), 0, 64, &nd))
        return usage_error("--depths '%s': need a list like 2,2", get(o, "--depths"));
    if (get(o, "--heads") && !parse_list(heads, sizeof heads, get(o, "--heads"), 1, 1024, &nh))
        return usage_error("--heads '%s': need a list like 3,6", get(o, "--heads"));
    if (nd != nh) return usage_error("--depths has %d stages, --heads %d", nd, nh);
    const char *pos = get(o, "--pos") ? get(o, "--pos") : "relbias";
    const int abs_pos = !strcmp(pos, "abs") || !strcmp(pos, "relbias+abs");
    const int rel = !strcmp(pos, "relbias") || !strcmp(pos, "relbias+abs");
    const int shaw = !strcmp(pos, "shaw");
    if (!abs_pos && !rel && !shaw && strcmp(pos, "none"))
        return usage_error("--pos '%s': need none, abs, relbias, relbias+abs or shaw", pos);
    char pstr[16], kstr[16], estr[16], wstr[16];
    snprintf(pstr, sizeof pstr, "%d", patch);
    snprintf(kstr, sizeof kstr, "%d", pk);
    snprintf(estr, sizeof estr, "%d", embed);
    snprintf(wstr, sizeof wstr, "%d", window);
    snprintf(img, sizeof img, "%d,%d", d->h, d->w);
    snprintf(classes, sizeof classes, "%d", d->classes);
    snprintf(mean, sizeof mean, "%.9g", (double)c->mean);
    snprintf(std, sizeof std, "%.9g", (double)c->std);
    if (rc->on) {   /* per channel: ImageNet's */
        snprintf(mean, sizeof mean, "0.485,0.456,0.406");
        snprintf(std, sizeof std, "0.229,0.224,0.225");
    }
    const int fashion = !ts->folder && strstr(data_dir, "fashion") != NULL && d->classes == 10;
    char chans[16], tr_resize[32], tr_crop[32];
    snprintf(chans, sizeof chans, "%d", d->c > 1 ? d->c : 1);
    snprintf(tr_resize, sizeof tr_resize, "shorter %d", rc->on ? eval_side(rc, d->h) : d->h);
    snprintf(tr_crop, sizeof tr_crop, "%dx%d", d->h, d->w);
    const char *meta[64] = {
        "arch", "swin", "img_size", img, "patch_size", pstr, "in_chans", chans,
        "num_classes", classes, "embed_dim", estr, "depths", depths, "num_heads", heads,
        "window_size", wstr, "mlp_ratio", "4.0", "qkv_bias", "true", "patch_norm", "true",
        "ape", abs_pos ? "true" : "false",
        "relative_position", rel ? "bias" : shaw ? "shaw" : "none",
        "mean", mean, "std", std};
    int nmeta = 0;   /* the pairs above, then the optional ones */
    while (meta[2 * nmeta]) nmeta++;
    if (pk != patch) meta[2 * nmeta] = "patch_kernel", meta[2 * nmeta + 1] = kstr, nmeta++;
    if (fashion) meta[2 * nmeta] = "labels", meta[2 * nmeta + 1] = fmnist_labels, nmeta++;
    char dp[32];
    snprintf(dp, sizeof dp, "%.12g", drop_path);
    if (get(o, "--drop-path")) meta[2 * nmeta] = "drop_path_rate", meta[2 * nmeta + 1] = dp, nmeta++;
    if (ts->folder) {   /* the classes by folder name, and the transform the data had */
        const char *kv[] = {"labels", ts->labels, "transform.resize", tr_resize,
                            "transform.crop", tr_crop, "transform.interpolation",
                            rc->on ? ra_interp_name(rc->interp) : "bilinear"};
        for (int i = 0; i < 4; i++)
            meta[2 * nmeta] = kv[2 * i], meta[2 * nmeta + 1] = kv[2 * i + 1], nmeta++;
    }
    /* test-time flips: what a run that flips its images has learned alike
     * (--tta was checked with the other options) */
    meta[2 * nmeta] = "tta";
    meta[2 * nmeta + 1] = get(o, "--tta") ? get(o, "--tta") : c->flip ? "flip" : "none";
    nmeta++;
    ra_status st = ra_model_create(m, meta, nmeta, c->seed);
    return st ? lib_fail(st) : 0;
}

/* ---- progress ------------------------------------------------------------- */

typedef struct {
    int tty, json;
    double last;   /* time of the last line or bar */
} progress;

static void fmt_time(char *b, size_t n, double s) {
    if (!(s >= 0) || s > 1e6) snprintf(b, n, "--:--");
    else if (s >= 3600) snprintf(b, n, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
    else snprintf(b, n, "%d:%02d", (int)s / 60, (int)s % 60);
}

static void show(progress *p, const ra_trainer *t, double loss, double ips, double left,
                 int force) {
    const double tn = now();
    if (!force && tn - p->last < (p->tty ? 0.25 : 10.0)) return;
    p->last = tn;
    const int64_t s = ra_trainer_step_count(t), spe = ra_trainer_steps_per_epoch(t);
    const int64_t total = ra_trainer_total_steps(t);
    const int epochs = ra_trainer_config(t)->epochs;
    char eta[16];
    fmt_time(eta, sizeof eta, left);
    if (p->tty) {
        char bar[21];
        const int fill = (int)(20.0 * (double)(s % spe) / (double)spe);
        for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
        bar[20] = 0;
        fprintf(stderr, "\repoch %lld/%d [%s] step %lld/%lld loss %.4f %.0f img/s ETA %s  ",
                (long long)(s / spe + (s % spe || !s ? 1 : 0)), epochs, bar, (long long)s,
                (long long)total, loss, ips, eta);
    } else {
        fprintf(stderr, "epoch %lld/%d step %lld/%lld loss %.4f lr %.3g %.0f img/s ETA %s\n",
                (long long)(s / spe + (s % spe ? 1 : 0)), epochs, (long long)s, (long long)total,
                loss, ra_trainer_lr(t), ips, eta);
    }
    fflush(stderr);
}

/* ---- the command ------------------------------------------------------------ */

static int train(const opt *o, const procs *pc);

int cmd_train(int argc, char **argv) {
    if (!take_model_options_as(&argc, argv, 0)) return EX_USAGE;   /* --init's --key, --set */
    opt o[] = {{"--out", 1, 0},        {"-o", 1, 0},           {"--data", 1, 0},
               {"--json", 0, 0},       {"--epochs", 1, 0},     {"--max-steps", 1, 0},
               {"--batch", 1, 0},      {"--lr", 1, 0},         {"--wd", 1, 0},
               {"--seed", 1, 0},       {"--threads", 1, 0},    {"--time-budget", 1, 0},
               {"--embed-dim", 1, 0},  {"--depths", 1, 0},     {"--heads", 1, 0},
               {"--window", 1, 0},     {"--patch", 1, 0},      {"--pos", 1, 0},
               {"--patch-kernel", 1, 0},
               {"--resume", 1, 0},     {"--ckpt-every", 1, 0}, {"--label-smoothing", 1, 0},
               {"--clip", 1, 0},       {"--no-augment", 0, 0}, {"--warmup-epochs", 1, 0},
               {"--augment", 1, 0},    {"--zero", 0, 0},       {"--precision", 1, 0},
               {"--ema", 1, 0},        {"--tta", 1, 0},        {"--img-size", 1, 0},
               {"--val-split", 1, 0},  {"--skip-bad", 0, 0},  {"--workers", 1, 0},
               {"--rand-augment", 1, 0}, {"--reprob", 1, 0},  {"--mixup", 1, 0},
               {"--cutmix", 1, 0},     {"--interpolation", 1, 0}, {"--crop-pct", 1, 0},
               {"--init", 1, 0},       {"--num-classes", 1, 0}, {"--no-shuffle", 0, 0},
               {"--sched", 1, 0},      {"--freeze", 0, 0},     {"--arch", 1, 0},
               {"--accum", 1, 0},      {"--layer-decay", 1, 0}, {"--drop-path", 1, 0},
               {"--table-resize", 1, 0}, {"--in-chans", 1, 0},
               {"--clip-len", 1, 0},   {"--frame-interval", 1, 0},
               {"--help", 0, 0},
               {"-h", 0, 0},           {0, 0, 0}};
    const char *pos[1];
    int npos = 0;
    if (!parse_args(argc, argv, o, pos, 0, &npos)) return EX_USAGE;
    if (get(o, "--help") || get(o, "-h")) return fputs(train_help, stdout), EX_OK;
    if (!threads_option(o)) return EX_USAGE;
    procs pc;
    int code = procs_start(&pc, &argc, &argv);
    if (code) return code;
    if ((code = train(o, &pc))) procs_abort(&pc, code);
    procs_end(&pc);
    return code;
}

/* The run of one process (of pc->size). */
static int train(const opt *o, const procs *pc) {
    const int lead = pc->rank == 0;   /* prints and writes */
    if (pc->size > 1 && !get(o, "--threads")) ra_threads_set(procs_default_threads(pc));
    const char *out = get(o, "--out") ? get(o, "--out") : get(o, "-o");
    if (!out) out = "relattn-fmnist.safetensors";
    const char *dir = get(o, "--data") ? get(o, "--data") : DEFAULT_DATA;
    const int zero = get(o, "--zero") != NULL;
    const char *resume = get(o, "--resume");
    const int json = get(o, "--json") != NULL;

    ra_train_config c = ra_train_config_default();
    int seed = 0, max_steps = 0, ckpt_every = 500;
    double budget = 0;
    char *end;
    if (get(o, "--epochs") && !parse_int(&c.epochs, get(o, "--epochs"), 1, 100000))
        return usage_error("--epochs '%s': need 1..100000", get(o, "--epochs"));
    if (get(o, "--batch") && !parse_int(&c.batch, get(o, "--batch"), 1, 65536))
        return usage_error("--batch '%s': need 1..65536", get(o, "--batch"));
    if (get(o, "--seed") && !parse_int(&seed, get(o, "--seed"), 0, 2147483647))
        return usage_error("--seed '%s': need 0..2147483647", get(o, "--seed"));
    c.seed = (uint64_t)seed;
    if (get(o, "--max-steps") && !parse_int(&max_steps, get(o, "--max-steps"), 1, 2147483647))
        return usage_error("--max-steps '%s': need a positive integer", get(o, "--max-steps"));
    if (get(o, "--ckpt-every") && !parse_int(&ckpt_every, get(o, "--ckpt-every"), 1, 2147483647))
        return usage_error("--ckpt-every '%s': need a positive integer", get(o, "--ckpt-every"));
    if (get(o, "--time-budget") &&
        (!((budget = strtod(get(o, "--time-budget"), &end)) > 0) || *end || budget > 1e7))
        return usage_error("--time-budget '%s': need seconds > 0", get(o, "--time-budget"));
    if (get(o, "--lr") && (!((c.lr = strtod(get(o, "--lr"), &end)) > 0) || *end || c.lr >= 10))
        return usage_error("--lr '%s': need a number in (0, 10)", get(o, "--lr"));
    if (get(o, "--wd") &&
        (!((c.weight_decay = strtod(get(o, "--wd"), &end)) >= 0) || *end || c.weight_decay >= 1))
        return usage_error("--wd '%s': need a number in [0, 1)", get(o, "--wd"));
    if (get(o, "--label-smoothing") &&
        (!((c.label_smoothing = strtof(get(o, "--label-smoothing"), &end)) >= 0) || *end ||
         c.label_smoothing >= 1))
        return usage_error("--label-smoothing '%s': need [0, 1)", get(o, "--label-smoothing"));
    if (get(o, "--clip") &&
        (!((c.clip_grad = strtof(get(o, "--clip"), &end)) >= 0) || *end))
        return usage_error("--clip '%s': need a number >= 0", get(o, "--clip"));
    if (get(o, "--ema") &&
        (!((c.ema_decay = strtod(get(o, "--ema"), &end)) >= 0) || *end ||
         (c.ema_decay != 0 && !(c.ema_decay >= 0.5 && c.ema_decay < 1))))
        return usage_error("--ema '%s': need 0 (off) or a decay in [0.5, 1)", get(o, "--ema"));
    if (get(o, "--warmup-epochs") &&
        (!((c.warmup_epochs = strtod(get(o, "--warmup-epochs"), &end)) >= 0) || *end ||
         c.warmup_epochs > 1000))
        return usage_error("--warmup-epochs '%s': need a number >= 0", get(o, "--warmup-epochs"));
    recipe rc = {.ra = "none", .crop_pct = 0.875, .interp = RA_INTERP_BICUBIC};
    const char *init = get(o, "--init");
    if (get(o, "--no-shuffle")) c.shuffle = 0;
    if (get(o, "--freeze")) c.freeze = 1;
    if (get(o, "--sched")) {
        if (!strcmp(get(o, "--sched"), "constant")) c.sched = 1;
        else if (strcmp(get(o, "--sched"), "cosine"))
            return usage_error("--sched '%s': cosine or constant", get(o, "--sched"));
    }
    const char *arch = get(o, "--arch");
    if (arch && init) return usage_error("--arch makes a model, --init starts from one: not both");
    if (arch) {   /* a name of the table, before any data is read */
        char names[256] = "";
        int i = 0, known = 0;
        for (const char *p; (p = ra_model_preset_name(i)); i++) {
            known |= !strcmp(p, arch);
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", p);
        }
        if (!known) return usage_error("--arch '%s': one of %s", arch, names);
    }
    /* a video model (swin3d) trains on a video folder */
    int video = arch && !strncmp(arch, "swin3d", 6);
    if (init) {
        ra_model *vm = NULL;
        video = !open_model(&vm, init) && ra_model_is_video(vm);
        ra_model_free(vm);
    }
    int clip_len = 0, frame_interval = 0;
    if (get(o, "--clip-len") && !parse_int(&clip_len, get(o, "--clip-len"), 1, 4096))
        return usage_error("--clip-len '%s': need 1..4096", get(o, "--clip-len"));
    if (get(o, "--frame-interval") &&
        !parse_int(&frame_interval, get(o, "--frame-interval"), 1, 4096))
        return usage_error("--frame-interval '%s': need 1..4096", get(o, "--frame-interval"));
    if ((clip_len || frame_interval) && !video)
        return usage_error("--clip-len and --frame-interval are for a video model (--arch "
                           "swin3d_t, --init of a swin3d model)");
    if (get(o, "--num-classes") && !init && !arch)
        return usage_error("--num-classes is for --init and --arch");
    if (get(o, "--table-resize") && !init) return usage_error("--table-resize is for --init");
    if (get(o, "--in-chans") && !init && !arch)
        return usage_error("--in-chans is for --init and --arch");
    if (get(o, "--accum") && !parse_int(&c.accum, get(o, "--accum"), 1, c.batch))
        return usage_error("--accum '%s': need 1..%d (the batch)", get(o, "--accum"), c.batch);
    if (c.batch % c.accum)
        return usage_error("--accum %d: the batch (%d) must be a multiple of it", c.accum, c.batch);
    if (get(o, "--layer-decay") &&
        (!((c.layer_decay = strtod(get(o, "--layer-decay"), &end)) > 0) || *end ||
         c.layer_decay > 1))
        return usage_error("--layer-decay '%s': need a factor in (0, 1]", get(o, "--layer-decay"));
    double drop_path = 0;
    if (get(o, "--drop-path") &&
        (!((drop_path = strtod(get(o, "--drop-path"), &end)) >= 0) || *end || drop_path > 1))
        return usage_error("--drop-path '%s': need a rate in [0, 1]", get(o, "--drop-path"));
    if ((model_options.key || model_options.nset) && !init)
        return usage_error("--key and --set are for --init's model");
    if (get(o, "--augment")) {
        const char *a = get(o, "--augment");
        if (!strcmp(a, "timm") || !strcmp(a, "rrc+flip")) {   /* the loader flips */
            recipe_augment(&rc, a);
            c.crop_pad = 0, c.flip = 0;
            if (!strcmp(a, "timm")) {
                snprintf(rc.ra, sizeof rc.ra, "rand-m9-mstd0.5-inc1");
                rc.reprob = 0.25, c.mixup_alpha = 0.8f, c.cutmix_alpha = 1.0f;
            }
        } else if (!strcmp(a, "none")) c.crop_pad = 0, c.flip = 0;
        else if (!strcmp(a, "flip")) c.crop_pad = 0, c.flip = 1;
        else if (!strcmp(a, "crop")) c.crop_pad = 2, c.flip = 0;
        else if (!strcmp(a, "crop+flip")) c.crop_pad = 2, c.flip = 1;
        else return usage_error("--augment '%s': need timm, rrc+flip, crop+flip, crop, flip "
                                "or none", a);
    }
    if (video && !get(o, "--augment")) {   /* the official Video Swin training's */
        recipe_augment(&rc, "rrc+flip");
        c.crop_pad = 0, c.flip = 0;
    }
    if (video && !get(o, "--interpolation")) rc.interp = RA_INTERP_BILINEAR;   /* mmcv's */
    if (get(o, "--mixup") &&
        (!((c.mixup_alpha = strtof(get(o, "--mixup"), &end)) >= 0) || *end || c.mixup_alpha > 1e4f ||
         (c.mixup_alpha > 0 && c.mixup_alpha < 1e-3f)))
        return usage_error("--mixup '%s': need 0 (off) or 0.001..10000", get(o, "--mixup"));
    if (get(o, "--cutmix") &&
        (!((c.cutmix_alpha = strtof(get(o, "--cutmix"), &end)) >= 0) || *end ||
         c.cutmix_alpha > 1e4f || (c.cutmix_alpha > 0 && c.cutmix_alpha < 1e-3f)))
        return usage_error("--cutmix '%s': need 0 (off) or 0.001..10000", get(o, "--cutmix"));
    if ((c.mixup_alpha > 0 || c.cutmix_alpha > 0) && c.batch % 2)
        return usage_error("--batch %d: mixup and cutmix pair image i with image B-1-i, the "
                           "batch must be even", c.batch);
    static const char *const streamed[] = {"--rand-augment", "--reprob", "--interpolation",
                                           "--crop-pct"};   /* (--init sets rc.on) */
    for (size_t i = 0; i < sizeof streamed / sizeof *streamed && !rc.on && !resume; i++)
        if (get(o, streamed[i]))
            return usage_error("%s is for --augment timm or rrc+flip (or --init)", streamed[i]);
    if (get(o, "--rand-augment")) {
        ra_randaugment probe;
        const char *v = get(o, "--rand-augment");
        if (strcmp(v, "none") && (strlen(v) >= sizeof rc.ra || ra_randaugment_parse(&probe, v)))
            return usage_error("--rand-augment '%s': %s", v,
                               strlen(v) >= sizeof rc.ra ? "too long" : ra_last_error());
        snprintf(rc.ra, sizeof rc.ra, "%s", v);
    }
    if (get(o, "--reprob") &&
        (!((rc.reprob = strtod(get(o, "--reprob"), &end)) >= 0) || *end || rc.reprob > 1))
        return usage_error("--reprob '%s': need a probability in [0, 1]", get(o, "--reprob"));
    if (get(o, "--crop-pct") &&
        (!((rc.crop_pct = strtod(get(o, "--crop-pct"), &end)) > 0) || *end || rc.crop_pct > 1))
        return usage_error("--crop-pct '%s': need a share in (0, 1]", get(o, "--crop-pct"));
    if (get(o, "--interpolation")) {
        const int f = ra_interp_parse(get(o, "--interpolation"));
        if (f < 0)
            return usage_error("--interpolation '%s': need nearest, bilinear, bicubic, box, "
                               "hamming or lanczos", get(o, "--interpolation"));
        rc.interp = (ra_interp)f;
    }
    rc.workers = ra_threads_get();
    if (get(o, "--workers") && !parse_int(&rc.workers, get(o, "--workers"), 0, 256))
        return usage_error("--workers '%s': need 0..256", get(o, "--workers"));
    if (get(o, "--no-augment")) c.crop_pad = 0, c.flip = 0;
    if (video && (strcmp(rc.ra, "none") || rc.reprob > 0 || c.mixup_alpha > 0 ||
                  c.cutmix_alpha > 0 || get(o, "--crop-pct") || get(o, "--tta")))
        return usage_error("a video's clips take --augment rrc+flip, flip or none: RandAugment, "
                           "random erasing, mixup, cutmix, --crop-pct and --tta are for images");
    if (video && get(o, "--no-augment")) recipe_augment(&rc, "none");
    if ((init || arch) && !rc.on) {   /* the model's images go through loaders: its transform */
        if (c.crop_pad) return usage_error("--augment crop is for IDX-like data; with %s: "
                                           "timm, rrc+flip, flip or none", init ? "--init" : "--arch");
        recipe_augment(&rc, c.flip ? "flip" : "none");
        c.flip = 0;
    }
    if (get(o, "--tta") && strcmp(get(o, "--tta"), "flip") && strcmp(get(o, "--tta"), "none"))
        return usage_error("--tta '%s': need flip or none", get(o, "--tta"));
    const char *pv = get(o, "--precision");
    enum { AUTO = -2 };   /* bf16 where the CPU runs it natively, else fp32 */
    int prec = pv && strcmp(pv, "auto") ? ra_precision_parse(pv) : AUTO;
    if (prec != AUTO && prec != RA_PRECISION_FP32 && prec != RA_PRECISION_BF16)
        return usage_error("--precision '%s': auto, fp32 or bf16 (int8 does not train)", pv);
    if (c.min_lr > c.lr) c.min_lr = c.lr;
    if (c.warmup_lr > c.lr) c.warmup_lr = c.lr;
    if (c.warmup_epochs > c.epochs) c.warmup_epochs = c.epochs;
    if (resume) {   /* the checkpoint holds the model and the recipe */
        static const char *const fixed[] = {"--epochs", "--batch", "--lr", "--wd", "--seed",
                                            "--embed-dim", "--depths", "--heads", "--window",
                                            "--patch", "--patch-kernel", "--pos",
                                            "--label-smoothing", "--clip", "--no-augment",
                                            "--warmup-epochs", "--augment", "--precision",
                                            "--ema", "--tta", "--rand-augment", "--reprob",
                                            "--mixup", "--cutmix", "--interpolation",
                                            "--crop-pct", "--init", "--num-classes",
                                            "--no-shuffle", "--sched", "--freeze", "--arch",
                                            "--accum", "--layer-decay", "--drop-path",
                                            "--table-resize", "--in-chans", "--clip-len",
                                            "--frame-interval"};
        for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
            if (get(o, fixed[i]))
                return usage_error("%s cannot change a resumed run (the checkpoint has it)",
                                   fixed[i]);
    }

    if (prec == AUTO && !resume) {   /* bf16 if every process's CPU runs it natively */
        int64_t native = ra_precision_native(RA_PRECISION_BF16);
        if (!procs_sum_i64(pc, &native, 1)) return fail(EX_SOFTWARE, "MPI_Allreduce failed");
        prec = native == pc->size ? RA_PRECISION_BF16 : RA_PRECISION_FP32;
    }

    /* IDX files, or an image folder at --img-size (a resumed run: its own) */
    int img_size = 32;
    double val_split = 0;
    if (get(o, "--img-size") && !parse_int(&img_size, get(o, "--img-size"), 1, 1024))
        return usage_error("--img-size '%s': need 1..1024", get(o, "--img-size"));
    if (get(o, "--val-split") &&
        (!((val_split = strtod(get(o, "--val-split"), &end)) > 0) || *end || val_split >= 1))
        return usage_error("--val-split '%s': need a share in (0, 1)", get(o, "--val-split"));
    if (resume && is_image_folder(dir, "train")) {
        if (get(o, "--img-size")) return usage_error("--img-size cannot change a resumed run");
        ra_st_file *ck = NULL;
        ra_status rs = ra_st_open(&ck, resume);
        const char *is = ck ? ra_st_meta(ck, "img_size") : NULL;
        if (is) img_size = atoi(is);
        video = ck && ra_st_meta(ck, "arch") && !strcmp(ra_st_meta(ck, "arch"), "swin3d");
        const int rok = ck ? recipe_of_checkpoint(&rc, ck) : 1;
        ra_st_close(ck);
        /* the loaders draw by the run's seed, batch and order */
        if (rs || (rs = ra_train_config_load(&c, resume))) return lib_fail(rs);
        if (!rok) return fail(EX_DATAERR, "'%s': its train.augment recipe is not valid", resume);
    }
    train_set ts;
    const int skip_bad = get(o, "--skip-bad") != NULL;
    if ((init || arch) && !is_image_folder(dir, "train"))
        return usage_error("%s trains on an image folder (--data DIR)", init ? "--init" : "--arch");
    int code = train_data(&ts, dir, img_size, val_split, c.seed, skip_bad, rc.on, video);
    if (code) return code;
    ra_loader *tl = NULL, *vl = NULL;
    int64_t *vown = NULL;
    ra_dataset train = ts.train, test = ts.test;
    if (ts.folder && !ts.stream && !resume) c.mean = ts.mean, c.std = ts.std;
    if (ts.skipped && lead)
        fprintf(stderr, "%s: skipped %lld images that did not decode\n", cmd, (long long)ts.skipped);
    ra_status st = RA_OK;
    ra_model *m = NULL;
    ra_trainer *t = NULL;
    ra_dataset part = test;   /* this process's slice of the test images */
    const int64_t first = test.n * pc->rank / pc->size;
    part.n = test.n * (pc->rank + 1) / pc->size - first;
    if (part.images) part.images += (size_t)first * (test.c > 1 ? test.c : 1) * test.h * test.w;
    if (part.labels) part.labels += first;
    train_log *lg = calloc(1, sizeof *lg);
    int64_t *confusion = NULL;
    if (!lg) {
        code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    /* the model: resumed, derived from --init's, or built from the options */
    ra_model *probe = NULL;   /* a resumed run's checkpoint, for its transform */
    if (resume && rc.on && (st = ra_model_load(&probe, resume))) {
        code = lib_fail(st);
        goto done;
    }
    if (!resume && (init || arch) &&
        (code = init_model(&m, init, arch, &ts, o, c.seed, img_size, drop_path, video)))
        goto done;
    if (!resume && !init && !arch && (code = build_model(&m, o, &ts, dir, &c, &rc, drop_path)))
        goto done;
    if (rc.on && video) {   /* the videos through loaders, at the model's video transform */
        code = make_video_loaders(&tl, &vl, &vown, &ts, &rc, &c, probe ? probe : m, skip_bad, pc);
        ra_model_free(probe);
        if (code) goto done;
    } else if (rc.on) {   /* the folder through loaders, at the model's transform */
        ra_transform tf;
        st = ra_model_transform(&tf, NULL, probe ? probe : m);
        ra_model_free(probe);
        if (st) {
            code = lib_fail(st);
            goto done;
        }
        ts.train.h = ts.train.w = ts.test.h = ts.test.w = tf.crop_h;
        if ((code = make_loaders(&tl, &vl, &vown, &ts, &rc, &c, &tf, skip_bad, pc))) goto done;
    }
    if (resume) {
        if ((st = tl ? ra_trainer_resume_loader(&t, &m, resume, tl)
                     : ra_trainer_resume(&t, &m, resume, &train))) {
            code = lib_fail(st);
            goto done;
        }
        lg->nloss = parse_pairs(lg->loss, MAX_LOG, ra_model_meta(m, "train.log.loss"));
        lg->nacc = parse_pairs(lg->acc, MAX_LOG, ra_model_meta(m, "train.log.test_accuracy"));
        if (ra_model_meta(m, "train.seconds")) lg->train_seconds = atof(ra_model_meta(m, "train.seconds"));
        if (ra_model_meta(m, "train.images_seen")) lg->images = atoll(ra_model_meta(m, "train.images_seen"));
        c = *ra_trainer_config(t);
    } else if ((st = ra_model_set_precision(m, (ra_precision)prec)) ||
               (st = tl ? ra_trainer_create_loader(&t, m, &c, tl)
                        : ra_trainer_create(&t, m, &c, &train))) {
        code = lib_fail(st);
        goto done;
    }
    if (pc->size > 1) {
        const ra_train_comm comm = procs_comm(pc);
        if ((st = ra_trainer_set_comm(t, &comm, zero))) {
            code = lib_fail(st);
            goto done;
        }
    } else if (zero) {
        fprintf(stderr, "%s: --zero shards the optimiser state across processes; one process "
                "keeps all of it\n", cmd);
    }
    /* the run's own checkpoint is the one input its output may replace (by a
     * later state of the same run); the dataset's files never are */
    if (resume) ra_input_forget(resume);
    if (lead && (code = output_ok(out))) goto done;
    const int K = train.classes;
    confusion = calloc((size_t)K * K, sizeof *confusion);
    if (!confusion) {
        code = fail(EX_DATAERR, "too large: out of memory");
        goto done;
    }
    const int64_t spe = ra_trainer_steps_per_epoch(t), total = ra_trainer_total_steps(t);
    const int64_t stop = max_steps > 0 && max_steps < total ? max_steps : total;
    progress pr = {.tty = lead && isatty(2), .json = json};
    if (lead && (!json || pr.tty)) {
        fprintf(stderr, "%s: %s, %lld parameters, %lld training %s, %lld steps of batch %d "
                "(%lld per epoch), %d threads", cmd, resume ? "resuming" : "training",
                (long long)ra_model_param_total(m), (long long)train.n,
                video ? "videos" : "images", (long long)total,
                c.batch, (long long)spe, ra_threads_get());
        if (ra_model_precision(m) != RA_PRECISION_FP32)
            fprintf(stderr, ", products in %s", ra_precision_name(ra_model_precision(m)));
        if (c.ema_decay > 0)
            fprintf(stderr, ", evaluating the weights' average (EMA %g)", c.ema_decay);
        if (pc->size > 1)
            fprintf(stderr, " in each of %d processes; optimiser state %.2f MiB per process%s",
                    pc->size, (double)ra_trainer_optimizer_floats(t) * 4 / (1 << 20),
                    zero ? " (ZeRO-1)" : "");
        fputc('\n', stderr);
    }

    double sess_seconds = 0, loss_sum = 0;
    int64_t sess_images = 0, loss_n = 0;
    double last_loss = NAN;
    int stopped_by_budget = 0;
    while (ra_trainer_step_count(t) < stop) {
        const double t0 = now();
        float loss;
        st = ra_trainer_step(t, &loss, NULL);
        const double dt = now() - t0;
        if (st) {
            if (pr.tty) fputc('\n', stderr);
            code = lib_fail(st);
            goto done;
        }
        sess_seconds += dt, sess_images += c.batch;
        lg->train_seconds += dt, lg->images += c.batch;
        loss_sum += loss, loss_n++;
        const int64_t s = ra_trainer_step_count(t);
        const double ips = sess_images / (sess_seconds > 0 ? sess_seconds : 1e-9);
        const double left = (double)(stop - s) * c.batch / (ips > 0 ? ips : 1);
        if (s % LOG_EVERY == 0 || s == stop) {
            last_loss = loss_sum / (double)loss_n;
            log_add(lg->loss, &lg->nloss, (double)s, last_loss);
            loss_sum = 0, loss_n = 0;
        }
        if (lead) show(&pr, t, isnan(last_loss) ? loss : last_loss, ips, left, 0);
        if (budget > 0)   /* every process stops at the same step */
            stopped_by_budget = procs_any(pc, sess_seconds >= budget);
        const int epoch_end = s % spe == 0, last = s == stop || stopped_by_budget;
        if (epoch_end || last) {
            int64_t correct = 0;
            if (pr.tty) fputc('\n', stderr);
            /* the checkpoint's model (the average of the weights, if any;
             * float32), as relattn eval will load it */
            int64_t seen = part.n;
            st = vl ? ra_trainer_evaluate_loader(t, vl, &correct, confusion, K, &seen)
                    : ra_trainer_evaluate(t, &part, 500, &correct, confusion, K);
            if (st) {
                code = lib_fail(st);
                goto done;
            }
            if (!procs_sum_i64(pc, &correct, 1) || !procs_sum_i64(pc, &seen, 1) ||
                !procs_sum_i64(pc, confusion, K * K)) {
                code = fail(EX_SOFTWARE, "MPI: summing the evaluation failed");
                goto done;
            }
            const double acc = (double)correct / (double)(seen > 0 ? seen : 1);
            log_add(lg->acc, &lg->nacc, (double)s, acc);
            if (!lead) {
            } else if (json) {
                jw jo = {0};
                jw_object(&jo);
                jw_key(&jo, "epoch");
                jw_real(&jo, "%.4f", (double)s / spe);
                jw_key(&jo, "step");
                jw_int(&jo, (long long)s);
                jw_key(&jo, "train_loss");
                jw_real(&jo, "%.6f", isnan(last_loss) ? loss : last_loss);
                jw_key(&jo, "test_accuracy");
                jw_real(&jo, "%.4f", acc);
                jw_key(&jo, "train_seconds");
                jw_real(&jo, "%.3f", lg->train_seconds);
                jw_key(&jo, "images_per_second");
                jw_real(&jo, "%.1f", lg->images / (lg->train_seconds > 0 ? lg->train_seconds : 1));
                if (last) {
                    jw_key(&jo, "epochs");
                    jw_real(&jo, "%.4f", (double)s / spe);
                    jw_key(&jo, "steps");
                    jw_int(&jo, (long long)s);
                    jw_key(&jo, "test_correct");
                    jw_int(&jo, (long long)correct);
                    jw_key(&jo, "test_images");
                    jw_int(&jo, (long long)seen);
                    jw_key(&jo, "threads");
                    jw_int(&jo, ra_threads_get());
                    jw_key(&jo, "processes");
                    jw_int(&jo, pc->size);
                    jw_key(&jo, "comm_seconds");
                    jw_real(&jo, "%.3f", procs_comm_seconds());
                    jw_key(&jo, "checkpoint");
                    jw_string(&jo, out);
                }
                jw_end(&jo, '}');
                jw_line(&jo);
                fflush(stdout);
            } else {
                fprintf(stderr, "%s: step %lld (epoch %.2f): test accuracy %.4f (%lld/%lld)\n", cmd,
                        (long long)s, (double)s / spe, acc, (long long)correct, (long long)seen);
            }
        }
        if (epoch_end || last || s % ckpt_every == 0) {
            if ((st = save(t, out, lg, &rc))) {
                code = lib_fail(st);
                goto done;
            }
        }
        if (last) break;
    }
    if (!lead) {
    } else if (ra_trainer_step_count(t) >= stop && !json)
        fprintf(stderr, "%s: %lld steps, %.1f s of training, %.0f images/s%s; checkpoint %s\n",
                cmd, (long long)ra_trainer_step_count(t), lg->train_seconds,
                lg->images / (lg->train_seconds > 0 ? lg->train_seconds : 1),
                stopped_by_budget ? " (time budget)" : "", safe_text(out));
    else if (stopped_by_budget && !json)
        fprintf(stderr, "%s: time budget reached at step %lld; checkpoint %s (--resume it)\n", cmd,
                (long long)ra_trainer_step_count(t), safe_text(out));
    if (lead && !json && pc->size > 1)
        fprintf(stderr, "%s: process 0 spent %.2f s of its %.1f s of steps in the sums across "
                "processes (%.1f %%)\n", cmd, procs_comm_seconds(), sess_seconds,
                100 * procs_comm_seconds() / (sess_seconds > 0 ? sess_seconds : 1));
done:
    free(confusion);
    free(lg);
    ra_trainer_free(t);
    ra_model_free(m);
    if (tl && lead && ra_loader_skipped(tl) + ra_loader_skipped(vl))
        fprintf(stderr, "%s: skipped %lld %s that did not decode\n", cmd,
                (long long)(ra_loader_skipped(tl) + ra_loader_skipped(vl)),
                video ? "videos" : "images");
    ra_loader_free(tl), ra_loader_free(vl), free(vown);
    train_data_free(&ts);
    return code;
}
