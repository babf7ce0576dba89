/* cmd_backward.c - relattn backward: the gradients of an attention layer
 * or of a whole network (docs/reference.md, section 4), every parameter named as in the file. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char backward_help[] =
    "usage: relattn backward MODEL INPUT.safetensors -o OUT.safetensors\n"
    "                        [--threads N] [--repeat R] [--json]\n"
    "\n"
    "Runs MODEL on INPUT and back-propagates INPUT's dy.\n"
    "  INPUT   as for 'forward', plus dy, the gradient of y (its shape)\n"
    "          networks: x (swin_block (B, H*W, C) or (B, H, W, C); swin, vit\n"
    "          images (B, C, H, W); swin_block_3d one clip (D, H, W, C), or the\n"
    "          query then key/value frames (D1 + D2, H, W, C) of a cross block)\n"
    "  OUT     y; the input gradients grad.x (window_attention_3d: grad.q, and\n"
    "          grad.kv when kv was given); grad.NAME for every parameter NAME of\n"
    "          the model file, under the file's own names\n"
    "          (grad.relative_position_bias_table, grad.qkv.weight, ...)\n"
    "  --threads N   threads to use (default: all cores)\n"
    "  --repeat R    time the compute (not the files): one warm-up run, then R\n"
    "                runs (1..1000000) of forward and backward; OUT is written\n"
    "                from the last one, and the median, the minimum and GFLOP/s\n"
    "                go to stderr (a run counted as 3 forwards: 6 flops per\n"
    "                multiply-add of the Swin authors' count)\n"
    "  --json        the timing as one JSON line on stdout instead:\n"
    "                {\"median_ms\": M, \"min_ms\": m, \"gflops\": G}, G null where\n"
    "                no count exists; --json alone means --repeat 1\n"
    MODEL_OPTIONS_HELP;

int cmd_backward(int argc, char **argv) {
    if (!take_model_options(&argc, argv)) return EX_USAGE;
    opt opts[] = {{"-o", 1, 0},       {"--output", 1, 0}, {"--threads", 1, 0},
                  {"--repeat", 1, 0}, {"--json", 0, 0},   {"--help", 0, 0},
                  {"-h", 0, 0},       {0, 0, 0}};
    const char *pos[2], *outp;
    repeat rep;
    int code = model_input_args(argc, argv, opts, backward_help, pos, &outp);
    if (code >= 0) return code;
    if (!repeat_option(&rep, opts)) return EX_USAGE;

    return job_run(pos[0], pos[1], outp, RA_RUN_BACKWARD, &rep);
}
