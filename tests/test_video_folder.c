/* test_video_folder.c - helpers of tests/test_video_folder.sh (eval and
 * train of a video model on a folder of videos):
 *   test_video_folder model OUT SEED   writes a small swin3d (2 classes, frames
 *                                      to 32 x 32, 2 clips of 4 frames, one
 *                                      crop) made from SEED
 *   test_video_folder train-clips      ra_clip_indices_train's frames and draws */
#include "check.h"

#include <relattn.h>

#include <stdint.h>
#include <stdlib.h>

static void run_model(const char *out, uint64_t seed) {
    const char *meta[] = {"arch", "swin3d", "patch_size", "2,4,4", "in_chans", "3",
                          "num_classes", "2", "embed_dim", "16", "depths", "1,1",
                          "num_heads", "2,4", "window_size", "2,4,4",
                          "transform.resize", "shorter 32", "transform.crop", "32x32",
                          "video.clips", "2", "num_frames", "4", "video.frame_interval", "2",
                          "video.crops", "1"};
    ra_model *m = NULL;
    ra_status st = ra_model_create(&m, meta, (int)(sizeof meta / sizeof *meta / 2), seed);
    CHECK(st == RA_OK, "create: %s", ra_last_error());
    if (!st)
        CHECK((st = ra_model_save(m, out, RA_DTYPE_F32)) == RA_OK, "save: %s", ra_last_error());
    ra_model_free(m);
}

/* ra_clip_indices_train: the first frame uniform in 0..n-L (each value
 * drawn), the frames S apart; a video shorter than L starts at 0 and loops. */
static void run_train_clips(void) {
    const int T = 4, S = 3;   /* L = 12 */
    int64_t idx[4], seen[8] = {0};
    ra_rng rng;
    ra_rng_seed(&rng, 5);
    for (int r = 0; r < 4000; r++) {
        CHECK(ra_clip_indices_train(idx, T, S, 19, &rng) == RA_OK, "%s", ra_last_error());
        CHECK(idx[0] >= 0 && idx[0] <= 19 - 12, "first frame %lld", (long long)idx[0]);
        for (int k = 1; k < T; k++) CHECK(idx[k] == idx[0] + k * S, "frame %d", k);
        if (idx[0] >= 0 && idx[0] < 8) seen[idx[0]]++;
    }
    for (int f = 0; f < 8; f++)   /* 4000 / 8 = 500 each, expected */
        CHECK(seen[f] > 400 && seen[f] < 600, "first frame %d drawn %lld times", f,
              (long long)seen[f]);
    CHECK(ra_clip_indices_train(idx, T, S, 5, &rng) == RA_OK, "%s", ra_last_error());
    CHECK(idx[0] == 0 && idx[1] == 3 && idx[2] == 1 && idx[3] == 4,
          "a short video: %lld %lld %lld %lld",
          (long long)idx[0], (long long)idx[1], (long long)idx[2], (long long)idx[3]);
    CHECK(ra_clip_indices_train(idx, T, S, 12, &rng) == RA_OK && idx[0] == 0 && idx[3] == 9,
          "a video of exactly L frames");
    CHECK(ra_clip_indices_train(idx, 0, S, 12, &rng) == RA_ERR_ARG, "clip_len 0 refused");
    CHECK(ra_clip_indices_train(idx, T, S, 0, &rng) == RA_ERR_ARG, "no frames refused");
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "model")) run_model(argv[2], strtoull(argv[3], NULL, 10));
    else if (argc >= 2 && !strcmp(argv[1], "train-clips")) run_train_clips();
    else return fprintf(stderr, "usage: test_video_folder model OUT SEED | train-clips\n"), 2;
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}
