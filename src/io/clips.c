/* clips.c - a video's clips: which frames (the samplers of torchvision's
 * and of the official Video Swin test, index for index), and the model's
 * input made of them (docs/reference.md, "Videos").
 *
 * mmaction (the SampleFrames of Video-Swin-Transformer's mmaction, test
 * mode): L = clip_len * frame_interval, avg = (n - L + 1) / clips (double);
 * if n > L - 1 clip c starts at int(c * avg + avg / 2), else every clip at
 * 0; frame k of clip c is start + k * frame_interval, taken modulo n
 * (out_of_bound_opt 'loop': a short video repeats).
 *
 * torchvision (VideoClips + UniformClipSampler): the video first resampled
 * to frame_rate: step = fps / frame_rate; an integer step keeps frames 0,
 * step, 2 step, ... (a slice: ceil(n / step) of them), another keeps
 * floor(j * step) in float32 for j < floor(n * frame_rate / fps); then
 * every window of clip_len consecutive kept frames is a clip (len - T + 1
 * of them; none: torchvision skips the video), and the sampler takes
 * floor(linspace(0, count - 1, clips)) of them, torch's float32 linspace
 * (start + step i for the first half, end - step (N - 1 - i) for the
 * second). */
#include "base/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CLIPS 1024
#define MAX_CLIP_LEN 4096

/* torch.linspace(0, end, n) in float32, floored (n <= 16: its scalar loop). */
static int64_t linspace_floor(int64_t end, int n, int i) {
    if (n == 1) return 0;
    const float fend = (float)end, step = (fend - 0.0f) / (float)(n - 1);
    const float v = i < n / 2 ? 0.0f + step * (float)i : fend - step * (float)(n - i - 1);
    return (int64_t)floorf(v);
}

ra_status ra_clip_indices(int64_t *idx, const ra_clip_spec *s, int64_t n, double fps) {
    if (!idx || !s) return rai_fail(RA_ERR_ARG, "clip indices: NULL argument");
    if (s->clips < 1 || s->clips > MAX_CLIPS || s->clip_len < 1 || s->clip_len > MAX_CLIP_LEN ||
        s->frame_interval < 1 || s->frame_interval > MAX_CLIP_LEN || n < 1 ||
        !(s->frame_rate >= 0) || !isfinite(s->frame_rate) || !(fps >= 0) || !isfinite(fps))
        return rai_fail(RA_ERR_ARG, "clip sampling: %d clips of %d frames at an interval of %d, "
                        "from %lld frames", s->clips, s->clip_len, s->frame_interval, (long long)n);
    const int T = s->clip_len;
    if (s->sampler == RA_CLIPS_MMACTION) {
        const int64_t L = (int64_t)T * s->frame_interval;
        const double avg = (double)(n - L + 1) / (double)s->clips;
        for (int c = 0; c < s->clips; c++) {
            const int64_t start = n > L - 1 ? (int64_t)((double)c * avg + avg / 2.0) : 0;
            for (int k = 0; k < T; k++)
                idx[(size_t)c * T + k] = (start + (int64_t)k * s->frame_interval) % n;
        }
        return RA_OK;
    }
    if (s->sampler != RA_CLIPS_TORCHVISION)
        return rai_fail(RA_ERR_ARG, "clip sampling: unknown sampler %d", (int)s->sampler);
    if (s->frame_interval != 1)
        return rai_fail(RA_ERR_ARG, "clip sampling: torchvision's clips are consecutive frames "
                        "(frame interval 1; its frame rate resamples)");
    /* the resampled stream: kept[j] */
    const double rate = s->frame_rate > 0 && fps > 0 ? s->frame_rate : fps;
    const double step = rate > 0 ? fps / rate : 1.0;
    int64_t kept;
    int integer = step == floor(step);
    if (integer) kept = (n + (int64_t)step - 1) / (int64_t)step;
    else kept = (int64_t)floor((double)n * (rate / fps));
    const int64_t count = kept - T + 1;
    if (count < 1)
        return rai_fail(RA_ERR_FORMAT, "the video has %lld frames%s, fewer than a clip of %d "
                        "(torchvision's sampler skips it)", (long long)kept,
                        rate != fps ? " after resampling" : "", T);
    const float fstep = (float)step;
    for (int c = 0; c < s->clips; c++) {
        const int64_t first = linspace_floor(count - 1, s->clips, c);
        for (int k = 0; k < T; k++) {
            const int64_t j = first + k;
            int64_t f = integer ? j * (int64_t)step : (int64_t)floorf((float)j * fstep);
            idx[(size_t)c * T + k] = f < n ? f : n - 1;
        }
    }
    return RA_OK;
}

/* The training clip of Video-Swin-Transformer's mmaction SampleFrames
 * (num_clips 1, test_mode False): L = clip_len * frame_interval; the
 * offset uniform in 0..n-L (its randint(n - L + 1)) when n >= L, else 0;
 * frames offset + k * frame_interval modulo n (out_of_bound_opt 'loop'). */
ra_status ra_clip_indices_train(int64_t *idx, int clip_len, int frame_interval, int64_t n,
                                ra_rng *rng) {
    if (!idx || !rng || clip_len < 1 || clip_len > MAX_CLIP_LEN || frame_interval < 1 ||
        frame_interval > MAX_CLIP_LEN || n < 1)
        return rai_fail(RA_ERR_ARG, "training clip: %d frames at an interval of %d, from %lld "
                        "frames", clip_len, frame_interval, (long long)n);
    const int64_t L = (int64_t)clip_len * frame_interval;
    const int64_t start = n >= L ? (int64_t)ra_rng_below(rng, (uint64_t)(n - L) + 1) : 0;
    for (int k = 0; k < clip_len; k++) idx[k] = (start + (int64_t)k * frame_interval) % n;
    return RA_OK;
}

/* ---- the model's input ------------------------------------------------------------ */

typedef struct {
    const ra_video_transform *t;
    const int64_t *idx;    /* (clips, T) */
    int clips, T, crops, ow, oh;
    float *x;              /* (crops * clips, 3, T, oh, ow) */
    uint8_t *bytes;        /* (crops, oh, ow, 3) */
    float lut[3][256];
} clip_ctx;

static ra_status put_frame(void *ctx, int64_t index, const uint8_t *rgb, int w, int h) {
    clip_ctx *c = ctx;
    ra_status st = ra_video_frame_bytes(c->bytes, c->t, rgb, w, h);
    if (st) return st;
    const size_t plane = (size_t)c->ow * c->oh, thw = plane * c->T;
    float *tmp = malloc(sizeof *tmp * plane * 3);
    if (!tmp) return rai_fail(RA_ERR_NOMEM, "video clips: out of memory");
    for (int k = 0; k < c->crops; k++) {
        rai_byte_planes(tmp, c->bytes + (size_t)k * plane * 3, plane, c->lut);   /* (3, oh, ow) */
        for (int cl = 0; cl < c->clips; cl++)
            for (int f = 0; f < c->T; f++) {
                if (c->idx[(size_t)cl * c->T + f] != index) continue;
                float *view = c->x + ((size_t)k * c->clips + cl) * 3 * thw;
                for (int ch = 0; ch < 3; ch++)
                    memcpy(view + ch * thw + (size_t)f * plane, tmp + ch * plane,
                           sizeof *tmp * plane);
            }
    }
    free(tmp);
    return RA_OK;
}

ra_status ra_video_clips(float **x, int64_t shape[5], ra_video *v, const ra_clip_spec *s,
                         const ra_video_transform *t) {
    if (!x || !shape || !v || !s || !t) return rai_fail(RA_ERR_ARG, "video clips: NULL argument");
    *x = NULL;
    const ra_video_info *in = ra_video_get_info(v);
    clip_ctx c = {.t = t, .clips = s->clips, .T = s->clip_len, .crops = t->crops};
    ra_status st = ra_transform_size(&t->frame, in->width, in->height, &c.ow, &c.oh);
    if (st) return st;
    if (t->crops != 1 && t->crops != 3)
        return rai_fail(RA_ERR_ARG, "video transform: 1 or 3 crops, not %d", t->crops);
    size_t nidx, plane, total;
    if (s->clips < 1 || s->clips > MAX_CLIPS || s->clip_len < 1 || s->clip_len > MAX_CLIP_LEN)
        return rai_fail(RA_ERR_ARG, "video clips: %d clips of %d frames", s->clips, s->clip_len);
    nidx = (size_t)s->clips * s->clip_len;
    if (!rai_mul_size(&plane, (size_t)c.ow, (size_t)c.oh) ||
        !rai_mul_size(&total, plane, 3 * nidx) || !rai_mul_size(&total, total, (size_t)t->crops) ||
        total > ((size_t)1 << 40))
        return rai_fail(RA_ERR_NOMEM, "video clips: %d x %d views of %d frames of %dx%d: too large",
                        t->crops, s->clips, s->clip_len, c.ow, c.oh);
    int64_t *idx = malloc(sizeof *idx * nidx);
    if (!idx) return rai_fail(RA_ERR_NOMEM, "video clips: out of memory");
    if ((st = ra_clip_indices(idx, s, in->frames, in->fps))) {
        free(idx);
        return st;
    }
    c.idx = idx;
    c.x = rai_alloc(total, sizeof *c.x);
    c.bytes = malloc(plane * 3 * (size_t)t->crops);
    if (!c.x || !c.bytes) st = rai_fail(RA_ERR_NOMEM, "video clips: out of memory");
    rai_byte_table(c.lut, t->frame.rescale, t->frame.normalize, t->frame.mean, t->frame.std);
    if (!st) st = ra_video_decode(v, idx, (int64_t)nidx, put_frame, &c);
    free(idx), free(c.bytes);
    if (st) {
        free(c.x);
        return st;
    }
    *x = c.x;
    shape[0] = (int64_t)t->crops * s->clips, shape[1] = 3, shape[2] = s->clip_len;
    shape[3] = c.oh, shape[4] = c.ow;
    return RA_OK;
}
