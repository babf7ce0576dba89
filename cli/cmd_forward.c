/* cmd_forward.c - relattn forward: run an attention layer or a network on INPUT. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char forward_help[] =
    "usage: relattn forward MODEL INPUT.safetensors -o OUT.safetensors\n"
    "                       [--attn] [--threads N] [--repeat R] [--json]\n"
    "                       [--features [LIST] [--layout L] [--norm N] [--prefix-tokens]]\n"
    "\n"
    "Runs the attention layer or network of MODEL on INPUT and writes OUT.\n"
    "  INPUT   x (B_, N, C); for window_attention_3d q (B_, N1, C) and optionally\n"
    "          kv (B_, N2, C); optionally mask (nW, N1, N2) with B_ % nW == 0.\n"
    "          Networks: x (swin_block (B, H*W, C) or (B, H, W, C); swin, vit\n"
    "          images (B, C, H, W); swin3d clips (B, C, T, H, W); swin_block_3d\n"
    "          clips (B, D, H, W, C) and for a cross block kv (B, D2, H, W, C)).\n"
    "          A tensor dy (for 'backward') is allowed and ignored.\n"
    "  OUT     y (B_, N1, C), and with --attn the probabilities attn (B_, nH, N1, N2)\n"
    "  --features [LIST]  swin, swinv2, swin3d, vit: also the feature maps\n"
    "                features.I of the stages (swin, swin3d) or blocks (vit) of\n"
    "                LIST, comma-separated indices from 0 (negative: from the\n"
    "                end) or 'all'; without LIST every stage of a swin or swin3d\n"
    "                (a transformers SwinBackbone: its out_indices), the last 3\n"
    "                blocks of a vit\n"
    "  --layout L    nhwc (B, H, W, C), nchw (B, C, H, W) or nlc (B, H*W, C);\n"
    "                swin3d's: (B, T, H, W, C), (B, C, T, H, W), (B, T*H*W, C);\n"
    "                default nhwc for swin and swin3d (a SwinBackbone: nchw),\n"
    "                nchw for vit\n"
    "  --norm N      default (a SwinBackbone's own norms, else none), none, or\n"
    "                final (timm's norm=True: the final norm on a swin's or\n"
    "                swin3d's last stage, on every vit block)\n"
    "  --prefix-tokens  vit: also features.I.prefix, the class and register\n"
    "                tokens (B, prefix, C)\n"
    "  --threads N   threads to use (default: all cores)\n"
    "  --repeat R    time the compute (not the files): one warm-up run, then R\n"
    "                runs (1..1000000); OUT is written from the last one, and the\n"
    "                median, the minimum and GFLOP/s go to stderr (2 flops per\n"
    "                multiply-add of the Swin authors' count, as 'inspect' gives)\n"
    "  --json        the timing as one JSON line on stdout instead:\n"
    "                {\"median_ms\": M, \"min_ms\": m, \"gflops\": G}, G null where\n"
    "                no count exists; --json alone means --repeat 1\n"
    MODEL_OPTIONS_HELP;

/* --features LIST, --layout, --norm, --prefix-tokens into fo: 1, or 0 after
 * a usage error. */
static int features_options(ra_features_options *fo, const opt *opts) {
    memset(fo, 0, sizeof *fo);
    const char *list = get(opts, "--features"), *layout = get(opts, "--layout");
    const char *norm = get(opts, "--norm");
    if (!list) {
        if (layout || norm || get(opts, "--prefix-tokens"))
            return usage_error("--layout, --norm and --prefix-tokens go with --features"), 0;
        return 1;
    }
    if (!strcmp(list, "all")) {
        fo->all = 1;
    } else if (*list) {
        for (const char *p = list;;) {
            char item[16];
            const size_t len = strcspn(p, ",");
            if (fo->count == RA_MAX_FEATURES)
                return usage_error("--features: at most %d indices", RA_MAX_FEATURES), 0;
            if (len >= sizeof item)
                return usage_error("--features '%s': need indices such as 0,1,-1",
                                   safe_text(list)), 0;
            memcpy(item, p, len);
            item[len] = 0;
            if (!parse_int(&fo->index[fo->count++], item, -4096, 4095))
                return usage_error("--features '%s': '%s' is %s", safe_text(list),
                                   safe_text(item), int_problem(item, -4096, 4095)), 0;
            if (!p[len]) break;
            p += len + 1;
        }
    }
    if (layout) {
        if (!strcmp(layout, "nhwc")) fo->layout = RA_LAYOUT_NHWC;
        else if (!strcmp(layout, "nchw")) fo->layout = RA_LAYOUT_NCHW;
        else if (!strcmp(layout, "nlc")) fo->layout = RA_LAYOUT_NLC;
        else return usage_error("--layout '%s': nhwc, nchw or nlc", safe_text(layout)), 0;
    }
    if (norm) {
        if (!strcmp(norm, "default")) fo->norm = RA_FEATURES_NORM_DEFAULT;
        else if (!strcmp(norm, "none")) fo->norm = RA_FEATURES_NORM_NONE;
        else if (!strcmp(norm, "final")) fo->norm = RA_FEATURES_NORM_FINAL;
        else return usage_error("--norm '%s': default, none or final", safe_text(norm)), 0;
    }
    fo->prefix_tokens = get(opts, "--prefix-tokens") != NULL;
    return 1;
}

int cmd_forward(int argc, char **argv) {
    if (!take_model_options(&argc, argv)) return EX_USAGE;
    opt opts[] = {{"-o", 1, 0},        {"--output", 1, 0},    {"--attn", 0, 0},
                  {"--threads", 1, 0}, {"--repeat", 1, 0},    {"--json", 0, 0},
                  {"--features", 2, 0}, {"--layout", 1, 0},   {"--norm", 1, 0},
                  {"--prefix-tokens", 0, 0}, {"--help", 0, 0}, {"-h", 0, 0},
                  {0, 0, 0}};
    const char *pos[2], *outp;
    repeat rep;
    ra_features_options fo;
    int code = model_input_args(argc, argv, opts, forward_help, pos, &outp);
    if (code >= 0) return code;
    if (!repeat_option(&rep, opts) || !features_options(&fo, opts)) return EX_USAGE;
    if (get(opts, "--features") && get(opts, "--attn"))
        return usage_error("--attn is for attention layers, --features for networks");
    if (get(opts, "--features")) return job_run_features(pos[0], pos[1], outp, &fo, &rep);
    return job_run(pos[0], pos[1], outp,
                   get(opts, "--attn") ? RA_RUN_FORWARD_ATTN : RA_RUN_FORWARD, &rep);
}
