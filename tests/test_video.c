/* test_video.c - videos decoded by src/io/video.c against the ffmpeg
 * command's frames (tests/test_video.sh makes both), and refusals.
 *   test_video compare VIDEO DIR N   every frame against DIR/%06d.png (1-based, as
 *                                    ffmpeg writes them); N frames expected
 *   test_video refuse FILE           ra_video_open or the decoding fails with
 *                                    RA_ERR_FORMAT (or RA_ERR_IO), never a crash
 *   test_video subset VIDEO DIR      frames 3, 0, 3, last: each handed once, in order */
#include "check.h"

#include <relattn.h>

#include <stdint.h>

typedef struct {
    const char *dir;
    int64_t last, handed;
    int64_t max_diff, differing, seen[64];
} cmp_ctx;

static ra_status compare(void *p, int64_t i, const uint8_t *rgb, int w, int h) {
    cmp_ctx *c = p;
    CHECK(i > c->last, "frame %lld after %lld", (long long)i, (long long)c->last);
    c->last = i;
    if (c->handed < 64) c->seen[c->handed] = i;
    c->handed++;
    char path[1024];
    snprintf(path, sizeof path, "%s/%06lld.png", c->dir, (long long)i + 1);
    uint8_t *ref = NULL;
    int rw, rh;
    ra_status st = ra_image_load_u8(&ref, &rw, &rh, path, (int64_t)1 << 26);
    CHECK(st == RA_OK, "%s: %s", path, ra_last_error());
    if (st) return RA_OK;
    CHECK(rw == w && rh == h, "frame %lld: %dx%d, ffmpeg's %dx%d", (long long)i, w, h, rw, rh);
    if (rw == w && rh == h) {
        int64_t n = 0, mx = 0;
        for (size_t k = 0; k < (size_t)w * h * 3; k++) {
            const int d = abs((int)rgb[k] - (int)ref[k]);
            n += d != 0, mx = d > mx ? d : mx;
        }
        c->differing += n;
        c->max_diff = mx > c->max_diff ? mx : c->max_diff;
    }
    free(ref);
    return RA_OK;
}

static int run_compare(const char *video, const char *dir, int64_t expect) {
    ra_video *v;
    ra_status st = ra_video_open(&v, video, NULL);
    CHECK(st == RA_OK, "%s: %s", video, ra_last_error());
    if (st) return 1;
    const ra_video_info *in = ra_video_get_info(v);
    CHECK(in->frames == expect, "%s: %lld frames, ffmpeg wrote %lld", video,
          (long long)in->frames, (long long)expect);
    int64_t *all = xmalloc(sizeof *all * (size_t)in->frames);
    for (int64_t i = 0; i < in->frames; i++) all[i] = i;
    cmp_ctx c = {.dir = dir, .last = -1};
    st = ra_video_decode(v, all, in->frames, compare, &c);
    CHECK(st == RA_OK, "%s: %s", video, ra_last_error());
    CHECK(c.handed == in->frames, "%lld frames handed", (long long)c.handed);
    CHECK(c.max_diff == 0, "%s: %lld bytes differ from ffmpeg's PNGs, by at most %lld", video,
          (long long)c.differing, (long long)c.max_diff);
    const double *t = ra_video_times(v);
    for (int64_t i = 1; i < in->frames && in->fps > 0; i++)
        CHECK(t[i] > t[i - 1], "frame %lld at %g s, after %g s", (long long)i, t[i], t[i - 1]);
    printf("%s: %s in %s, %dx%d, %lld frames at %.3f fps: %lld bytes differ (max %lld)\n", video,
           in->codec, in->format, in->width, in->height, (long long)in->frames, in->fps,
           (long long)c.differing, (long long)c.max_diff);
    free(all);
    ra_video_free(v);
    return 0;
}

static int run_subset(const char *video, const char *dir) {
    ra_video *v;
    ra_status st = ra_video_open(&v, video, NULL);
    CHECK(st == RA_OK, "%s: %s", video, ra_last_error());
    if (st) return 1;
    const int64_t n = ra_video_get_info(v)->frames;
    const int64_t idx[4] = {3 % n, 0, 3 % n, n - 1};
    cmp_ctx c = {.dir = dir, .last = -1};
    st = ra_video_decode(v, idx, 4, compare, &c);
    CHECK(st == RA_OK, "%s", ra_last_error());
    const int64_t want = 1 + (3 % n != 0) + (n - 1 != 3 % n && n - 1 != 0);
    CHECK(c.handed == want, "%lld frames handed, not %lld", (long long)c.handed, (long long)want);
    CHECK(c.max_diff == 0, "subset: %lld bytes differ", (long long)c.differing);
    const int64_t bad = n;
    CHECK(ra_video_decode(v, &bad, 1, compare, &c) == RA_ERR_ARG, "frame %lld accepted",
          (long long)n);
    ra_video_free(v);
    return 0;
}

static ra_status count(void *p, int64_t i, const uint8_t *rgb, int w, int h) {
    ++*(int64_t *)p;
    return RA_OK;
}

static int run_refuse(const char *file) {
    ra_video *v = NULL;
    ra_status st = ra_video_open(&v, file, NULL);
    if (!st) {
        const ra_video_info *in = ra_video_get_info(v);
        int64_t *all = xmalloc(sizeof *all * (size_t)in->frames), seen = 0;
        for (int64_t i = 0; i < in->frames; i++) all[i] = i;
        st = ra_video_decode(v, all, in->frames, count, &seen);
        free(all);
        ra_video_free(v);
    }
    CHECK(st == RA_ERR_FORMAT || st == RA_ERR_IO, "%s: accepted (%d)", file, (int)st);
    const char *msg = ra_last_error();
    CHECK(msg && *msg && !strchr(msg, '\n'), "one line: '%s'", msg ? msg : "");
    printf("%s: refused: %s\n", file, msg);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 5 && !strcmp(argv[1], "compare")) run_compare(argv[2], argv[3], atoll(argv[4]));
    else if (argc >= 4 && !strcmp(argv[1], "subset")) run_subset(argv[2], argv[3]);
    else if (argc >= 3 && !strcmp(argv[1], "refuse")) run_refuse(argv[2]);
    else return fprintf(stderr, "usage: test_video compare|subset|refuse ...\n"), 2;
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}
