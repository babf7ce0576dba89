/* bench_video.c - relattn_bench_video: what feeds a video network and
 * what the network holds, beside relattn_bench's clips/s of swin3d_t
 * (bench/run.sh --what video3d; bench/README.md).
 *
 *   relattn_bench_video decode VIDEO MODEL [--clip-len T] [--interval S]
 *                       [--reps R] [--threads N] [--results FILE]
 *   relattn_bench_video rss MODEL [--precision fp32|bf16|int8] [--clip T,S]
 *                       [--threads N] [--results FILE]
 *
 * decode: the classify path up to the network's input, through the public
 *   API: ra_video_open (FFmpeg reads the file's packets, counting the
 *   frames, and decodes the first) and ra_video_clips (the stream decoded
 *   up to the clip's last frame, the clip's frames converted to RGB and
 *   transformed) of one clip of T
 *   frames (default 32) at an interval of S (default 2): the official
 *   test's sampler (mmaction's SampleFrames, test mode) with one clip and
 *   one crop, and MODEL's frame transform (ra_model_video_transform: for
 *   torchvision's swin3d_t the shorter side to 256, bilinear, the centre
 *   224 x 224, normalised). One untimed call, then the median of R
 *   (default 5) of each: open, clips, and the two together, as seconds,
 *   frames/s and clips/s. FFmpeg decodes on one thread; the transform
 *   runs on N (default every core), as classify runs it.
 * rss: the memory of an inference in a process of its own: MODEL opened
 *   with num_frames = T, set to the precision, one clip (1, 3, T, S, S)
 *   (--clip, default 32,224) of random values through two forwards. It
 *   reports the resident memory once the model is ready (loaded,
 *   converted, the clip allocated), the peak during the forwards (the
 *   peak VmHWM reset through /proc/self/clear_refs after loading, as
 *   bench.c's peak_extra_bytes does), and the process's peak over its
 *   life (getrusage's ru_maxrss: loading included). bench_torch.py
 *   --rss measures PyTorch's the same way.
 *
 * --results FILE appends tab-separated lines for bench/summary.py:
 *   decode  relattn VIDEO MEASURE THREADS SECONDS FRAMES CLIPS
 *   rss     relattn ROW SETTING READY_KB FORWARD_PEAK_KB PROCESS_PEAK_KB
 * (VIDEO: "FILE: WxH CODEC, N frames at F fps, T frames at interval S"; ROW as
 * relattn_bench's: "swin3d_t B=1 32x224x224" and the precision after it
 * but fp32's.) */
#define _POSIX_C_SOURCE 200809L
#include "relattn.h"
#include "timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define MAX_REPS 64

static void must(ra_status st, const char *what) {
    if (st == RA_OK) return;
    fprintf(stderr, "relattn_bench_video: %s: %s\n", what, ra_last_error());
    exit(70);
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* The peak resident memory (VmHWM) set back to the current (VmRSS). */
static int reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    const int ok = fputs("5", f) >= 0;
    return !fclose(f) && ok;
}

/* "32,224" -> a, b; 0 if malformed. */
static int parse_pair(const char *s, int *a, int *b) {
    char *end;
    const long x = strtol(s, &end, 10);
    if (end == s || *end != ',') return 0;
    const char *p = end + 1;
    const long y = strtol(p, &end, 10);
    if (end == p || *end || x < 1 || y < 1 || x > 4096 || y > 4096) return 0;
    *a = (int)x, *b = (int)y;
    return 1;
}

/* ---- decode: ra_video_open + ra_video_clips --------------------------------- */

static int bench_decode(const char *video, const char *model, int clip_len, int interval,
                        int reps, FILE *results) {
    ra_model *m = NULL;
    ra_clip_spec cs;
    ra_video_transform vt;
    const char *source;
    must(ra_model_open(&m, model, NULL), model);
    must(ra_model_video_transform(&cs, &vt, &source, m), "the model's video transform");
    ra_model_free(m);
    /* one clip of clip_len frames at the interval, one crop: the official
     * test's sampler with one view */
    cs.sampler = RA_CLIPS_MMACTION, cs.clips = 1, cs.clip_len = clip_len;
    cs.frame_interval = interval, cs.frame_rate = 0;
    vt.crops = 1;

    double t_open[MAX_REPS], t_clip[MAX_REPS], t_all[MAX_REPS];
    int64_t shape[5] = {0}, frames = 0;
    int w = 0, h = 0;
    double fps = 0;
    char codec[32] = "";
    for (int r = -1; r < reps; r++) {   /* r = -1: the untimed call */
        ra_video *v = NULL;
        float *x = NULL;
        const double t0 = bench_now();
        must(ra_video_open(&v, video, NULL), video);
        const double t1 = bench_now();
        must(ra_video_clips(&x, shape, v, &cs, &vt), "clips");
        const double t2 = bench_now();
        const ra_video_info *in = ra_video_get_info(v);
        frames = in->frames, w = in->width, h = in->height, fps = in->fps;
        snprintf(codec, sizeof codec, "%s", in->codec);
        free(x);
        ra_video_free(v);
        if (r >= 0) t_open[r] = t1 - t0, t_clip[r] = t2 - t1, t_all[r] = t2 - t0;
    }
    const double so = median(t_open, reps), sc = median(t_clip, reps), sa = median(t_all, reps);
    const char *base = strrchr(video, '/');
    char desc[512];
    snprintf(desc, sizeof desc, "%s: %dx%d %s, %lld frames at %.4g fps, %d frames at interval %d",
             base ? base + 1 : video, w, h, codec, (long long)frames, fps, clip_len, interval);
    printf("video: %s; the model's frame transform (its clips' source: %s): shorter side %d, "
           "crop %dx%d; x (%lld, %lld, %lld, %lld, %lld); %d threads; median of %d\n", desc,
           source, vt.frame.resize_h,
           vt.frame.crop_h, vt.frame.crop_w, (long long)shape[0], (long long)shape[1],
           (long long)shape[2], (long long)shape[3], (long long)shape[4], ra_threads_get(), reps);
    printf("%-34s %10s %12s %10s\n", "decode", "ms", "frames/s", "clips/s");
    printf("%-34s %10.1f %12.1f %10s   (every frame of the stream, counted)\n",
           "ra_video_open", 1e3 * so, frames / so, "-");
    printf("%-34s %10.1f %12.1f %10s   (the clip's frames: decode, RGB, transform)\n",
           "ra_video_clips", 1e3 * sc, clip_len / sc, "-");
    printf("%-34s %10.1f %12.1f %10.2f   (the classify path of one clip)\n",
           "ra_video_open + ra_video_clips", 1e3 * sa, clip_len / sa, 1 / sa);
    if (results) {
        const char *names[3] = {"open", "clips", "open+clips"};
        const double s[3] = {so, sc, sa};
        const long long fr[3] = {(long long)frames, clip_len, clip_len};
        for (int i = 0; i < 3; i++)
            fprintf(results, "decode\trelattn\t%s\t%s\t%d\t%.6g\t%lld\t%d\n", desc, names[i],
                    ra_threads_get(), s[i], fr[i], i ? 1 : 0);
    }
    return 0;
}

/* ---- rss: the memory of an inference ----------------------------------------- */

static int bench_rss(const char *model, ra_precision p, int frames, int size, FILE *results) {
    char set_frames[32];
    snprintf(set_frames, sizeof set_frames, "num_frames=%d", frames);
    const char *const set[] = {set_frames};
    const ra_load_options lo = {.set = set, .nset = 1};
    ra_model *m = NULL;
    const double t0 = bench_now();
    must(ra_model_open(&m, model, &lo), model);
    must(ra_model_set_precision(m, p), ra_precision_name(p));
    const int64_t xs[5] = {1, 3, frames, size, size};
    const size_t n = (size_t)3 * frames * size * size;
    float *x = malloc(n * sizeof *x);
    if (!x) must(RA_ERR_NOMEM, "the clip");
    ra_rng rng;
    ra_rng_seed(&rng, 11);
    ra_rng_fill_uniform(&rng, x, (int64_t)n, -2, 2);
    const double t1 = bench_now();
    const long long ready = bench_status_kb("VmRSS");
    const int reset = reset_peak();
    double sec[2];
    for (int i = 0; i < 2; i++) {
        float *y = NULL;
        int nd;
        int64_t ys[4];
        const double a = bench_now();
        must(ra_model_forward(m, &y, &nd, ys, x, 5, xs), "forward");
        sec[i] = bench_now() - a;
        free(y);
    }
    const long long peak = reset ? bench_status_kb("VmHWM") : -1;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    char row[96];
    snprintf(row, sizeof row, "swin3d_t B=1 %dx%dx%d%s%s", frames, size, size,
             p == RA_PRECISION_FP32 ? "" : " ", p == RA_PRECISION_FP32 ? "" : ra_precision_name(p));
    char setting[96];
    snprintf(setting, sizeof setting, "relattn %s, kernel %s, %d threads", ra_precision_name(p),
             ra_kernel_name(ra_kernel_current()), ra_threads_get());
    printf("%-32s %-40s ready %8.1f MiB, forward peak %8.1f MiB, process peak %8.1f MiB "
           "(loaded in %.1f s; forwards %.2f s, %.2f s)\n", row, setting, ready / 1024.0,
           peak / 1024.0, ru.ru_maxrss / 1024.0, t1 - t0, sec[0], sec[1]);
    if (results)
        fprintf(results, "rss\trelattn\t%s\t%s\t%lld\t%lld\t%ld\n", row, setting, ready, peak,
                ru.ru_maxrss);
    free(x);
    ra_model_free(m);
    return 0;
}

/* ---- main --------------------------------------------------------------------- */

static int usage(void) {
    fputs("usage: relattn_bench_video decode VIDEO MODEL [--clip-len T] [--interval S] "
          "[--reps R] [--threads N] [--results FILE]\n"
          "       relattn_bench_video rss MODEL [--precision P] [--clip T,S] [--threads N] "
          "[--results FILE]\n", stderr);
    return 64;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3) return usage();
    const int decode = !strcmp(argv[1], "decode");
    if (!decode && strcmp(argv[1], "rss")) return usage();
    const int npos = decode ? 2 : 1;
    if (argc < 2 + npos) return usage();
    const char *video = decode ? argv[2] : NULL, *model = argv[1 + npos], *results = NULL;
    int clip_len = 32, interval = 2, reps = 5, frames = 32, size = 224, threads = 0;
    int prec = RA_PRECISION_FP32;
    for (int i = 2 + npos; i < argc; i += 2) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!v) ok = 0;
        else if (!strcmp(o, "--clip-len")) ok = (clip_len = atoi(v)) >= 1 && clip_len <= 4096;
        else if (!strcmp(o, "--interval")) ok = (interval = atoi(v)) >= 1 && interval <= 4096;
        else if (!strcmp(o, "--reps")) ok = (reps = atoi(v)) >= 1 && reps <= MAX_REPS;
        else if (!strcmp(o, "--threads")) ok = (threads = atoi(v)) >= 1;
        else if (!strcmp(o, "--clip")) ok = parse_pair(v, &frames, &size);
        else if (!strcmp(o, "--precision")) ok = (prec = ra_precision_parse(v)) >= 0;
        else if (!strcmp(o, "--results")) results = v;
        else ok = 0;
        if (!ok) {
            fprintf(stderr, "relattn_bench_video: bad option %s\n", o);
            return usage();
        }
    }
    if (threads) ra_threads_set(threads);
    FILE *rf = NULL;
    if (results && !(rf = fopen(results, "a")))
        return fprintf(stderr, "relattn_bench_video: cannot write %s\n", results), 73;
    const int code = decode ? bench_decode(video, model, clip_len, interval, reps, rf)
                            : bench_rss(model, (ra_precision)prec, frames, size, rf);
    if (rf) fclose(rf);
    return code;
}
