/* cmd_convert.c - relattn convert: any model source -> a relattn model file. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char convert_help[] =
    "usage: relattn convert MODEL -o OUT.safetensors [--dtype f32|f16|bf16|int8]\n"
    "                       [--key PATH] [--set KEY=VALUE]...\n"
    "\n"
    "Writes MODEL as a relattn model file: its tensors under the names the loader\n"
    "read them by (transformers' q, k and v joined into qkv), its metadata with\n"
    "every inferred hyperparameter, so that loading OUT needs no inference, no\n"
    "config.json and one read per tensor. MODEL is loaded first: what does not\n"
    "load is not written. Buffers relattn computes (relative_position_index,\n"
    "relative_coords_table, attn_mask) and a checkpoint's optimizer state are\n"
    "left out. --dtype: the parameters' type in OUT (default f32; f16 and bf16\n"
    "round to nearest even, halving the file; int8 stores the Linear weights as\n"
    "symmetric int8 per output channel with their scales, a quarter of it: what\n"
    "--precision int8 computes with).\n"
    "  --inflate swin3d  write a Video Swin (arch swin3d) inflated from a 2-D Swin\n"
    "                    as the official Video Swin's inflate_weights does: the\n"
    "                    patch embedding repeated over the patch's frames and\n"
    "                    divided by their number, each bias table resized\n"
    "                    bicubically to the window (as resize) and repeated\n"
    "                    2 Wd - 1 times\n"
    "  --patch-frames N  with --inflate: the patch's frames (default 2)\n"
    "  --window3d D,H,W  with --inflate: the window (default 8 and the 2-D window)\n"
    MODEL_OPTIONS_HELP;

int cmd_convert(int argc, char **argv) {
    if (!take_model_options(&argc, argv)) return EX_USAGE;
    if (model_options.precision != RA_PRECISION_FP32)
        return usage_error("--precision is how a model computes, not what convert writes: "
                           "--dtype f16|bf16|int8 chooses the file's type");
    opt opts[] = {{"-o", 1, 0},           {"--output", 1, 0},      {"--dtype", 1, 0},
                  {"--inflate", 1, 0},     {"--patch-frames", 1, 0}, {"--window3d", 1, 0},
                  {"--help", 0, 0},        {"-h", 0, 0},            {0, 0, 0}};
    const char *pos[1];
    int npos;
    if (!parse_args(argc, argv, opts, pos, 1, &npos)) return EX_USAGE;
    if (get(opts, "--help") || get(opts, "-h")) return fputs(convert_help, stdout), EX_OK;
    const char *outp = get(opts, "-o") ? get(opts, "-o") : get(opts, "--output");
    if (npos != 1) return usage_error("needs MODEL");
    if (!outp) return usage_error("needs -o OUT.safetensors");
    if (get(opts, "-o") && get(opts, "--output")) return usage_error("-o given twice");
    const char *d = get(opts, "--dtype");
    ra_dtype dtype = RA_DTYPE_F32;
    if (d && !strcmp(d, "f16")) dtype = RA_DTYPE_F16;
    else if (d && !strcmp(d, "bf16")) dtype = RA_DTYPE_BF16;
    else if (d && !strcmp(d, "int8")) dtype = RA_DTYPE_I8;
    else if (d && strcmp(d, "f32")) return usage_error("--dtype '%s': f32, f16, bf16 or int8", d);
    const char *inf = get(opts, "--inflate");
    int pt = 2, win[3] = {8, 0, 0};
    if (inf && strcmp(inf, "swin3d")) return usage_error("--inflate '%s': swin3d", inf);
    if (!inf && (get(opts, "--patch-frames") || get(opts, "--window3d")))
        return usage_error("--patch-frames and --window3d are for --inflate swin3d");
    const char *pf = get(opts, "--patch-frames"), *w3 = get(opts, "--window3d");
    char *end;
    if (pf && (!((pt = (int)strtol(pf, &end, 10)) >= 1 && pt <= 64) || *end))
        return usage_error("--patch-frames '%s': 1..64", pf);
    if (w3 && (sscanf(w3, "%d,%d,%d%c", &win[0], &win[1], &win[2], (char[1]){0}) != 3 ||
               win[0] < 1 || win[1] < 1 || win[2] < 1 || win[0] > 4096 || win[1] > 4096 ||
               win[2] > 4096))
        return usage_error("--window3d '%s': D,H,W in 1..4096", w3);
    int code = output_not_input(outp, pos, 1);
    if (code) return code;
    cleanup_on_signals();
    ra_model *m = NULL;   /* what does not load is not written */
    ra_status st = open_model(&m, pos[0]);
    if (!st && inf) {   /* the 2-D model replaced by its inflation */
        ra_model *v = NULL;
        st = ra_model_inflate_swin3d(&v, m, pt, win[0], win[1], win[2]);
        ra_model_free(m);
        m = v;
        if (st == RA_ERR_ARG) st = RA_ERR_FORMAT;   /* the file is not one to inflate: 65 */
    }
    if (!st) st = ra_model_save(m, outp, dtype);
    ra_model_free(m);
    return st ? lib_fail(st) : EX_OK;
}
