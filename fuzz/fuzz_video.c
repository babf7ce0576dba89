/* fuzz_video.c - libFuzzer harness: a video through src/io/video.c and
 * src/io/clips.c (FFmpeg's demuxers and decoders behind our I/O and
 * limits, the RGB conversion, the clip sampling and the frame transform),
 * with small limits so that each run is quick. ra_video_open reads a path:
 * each input goes through one temporary file. Seeded with fuzz/corpus/video
 * (tiny files made by the ffmpeg command: H.264 in MP4, VP9 in WebM, MJPEG
 * in AVI, MPEG-4, Y4M, GIF). */
#include "relattn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!path[0]) snprintf(path, sizeof path, "/tmp/relattn_fuzz_video.%d", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    const ra_video_limits lim = {.max_bytes = 1 << 20, .max_pixels = 1 << 18, .max_frames = 256,
                                 .max_seconds = 600};
    ra_video *v = NULL;
    if (ra_video_open(&v, path, &lim) != RA_OK) return 0;
    const ra_video_info *in = ra_video_get_info(v);
    if (!in || in->frames < 1 || in->width < 1 || in->height < 1) abort();
    /* two clips of four frames, both samplers (the first byte chooses), three
     * crops of 12 from the shorter side at 16 */
    const ra_clip_spec s = {.sampler = size && data[0] & 1 ? RA_CLIPS_TORCHVISION : RA_CLIPS_MMACTION,
                            .clips = 2, .clip_len = 4, .frame_interval = size && data[0] & 1 ? 1 : 2,
                            .frame_rate = 15};
    ra_video_transform t = {.size_round = 1, .crops = 3};
    t.frame.resize = RA_RESIZE_SHORTER, t.frame.resize_h = t.frame.resize_w = 16;
    t.frame.interp = RA_INTERP_BILINEAR;
    t.frame.crop = RA_CROP_CENTER_FLOOR, t.frame.crop_h = t.frame.crop_w = 12;
    t.frame.normalize = 1;
    for (int c = 0; c < 3; c++) t.frame.mean[c] = 0.5f, t.frame.std[c] = 0.25f;
    float *x = NULL;
    int64_t shape[5];
    if (ra_video_clips(&x, shape, v, &s, &t) == RA_OK) {
        if (shape[0] != 6 || shape[2] != 4 || shape[3] != 12 || shape[4] != 12) abort();
        free(x);
    }
    ra_video_free(v);
    return 0;
}
