/* cmd_forward.c - relattn forward: run an attention layer or a network on INPUT. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char forward_help[] =
    "usage: relattn forward MODEL INPUT.safetensors -o OUT.safetensors\n"
    "                       [--attn] [--threads N] [--repeat R] [--json]\n"
    "\n"
    "Runs the attention layer or network of MODEL on INPUT and writes OUT.\n"
    "  INPUT   x (B_, N, C); for window_attention_3d q (B_, N1, C) and optionally\n"
    "          kv (B_, N2, C); optionally mask (nW, N1, N2) with B_ % nW == 0.\n"
    "          Networks: x (swin_block (B, H*W, C) or (B, H, W, C); swin, vit\n"
    "          images (B, C, H, W); swin_block_3d clips (B, D, H, W, C) and for a\n"
    "          cross block kv (B, D2, H, W, C)).\n"
    "          A tensor dy (for 'backward') is allowed and ignored.\n"
    "  OUT     y (B_, N1, C), and with --attn the probabilities attn (B_, nH, N1, N2)\n"
    "  --threads N   threads to use (default: all cores)\n"
    "  --repeat R    time the compute (not the files): one warm-up run, then R\n"
    "                runs (1..1000000); OUT is written from the last one, and the\n"
    "                median, the minimum and GFLOP/s go to stderr (2 flops per\n"
    "                multiply-add of the Swin authors' count, as 'inspect' gives)\n"
    "  --json        the timing as one JSON line on stdout instead:\n"
    "                {\"median_ms\": M, \"min_ms\": m, \"gflops\": G}, G null where\n"
    "                no count exists; --json alone means --repeat 1\n"
    MODEL_OPTIONS_HELP;

int cmd_forward(int argc, char **argv) {
    if (!take_model_options(&argc, argv)) return EX_USAGE;
    opt opts[] = {{"-o", 1, 0},        {"--output", 1, 0}, {"--attn", 0, 0},
                  {"--threads", 1, 0}, {"--repeat", 1, 0}, {"--json", 0, 0},
                  {"--help", 0, 0},    {"-h", 0, 0},       {0, 0, 0}};
    const char *pos[2], *outp;
    repeat rep;
    int code = model_input_args(argc, argv, opts, forward_help, pos, &outp);
    if (code >= 0) return code;
    if (!repeat_option(&rep, opts)) return EX_USAGE;

    return job_run(pos[0], pos[1], outp,
                   get(opts, "--attn") ? RA_RUN_FORWARD_ATTN : RA_RUN_FORWARD, &rep);
}
