/* main.c - the relattn command (docs/reference.md, section 4): finds the subcommand in the table
 * and runs it. Each subcommand lives in its own file, cmd_NAME.c; what they
 * share (exit codes, messages, options, the INPUT file) is in cli.h. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One line a command: its name, its function (cli.h) and its line of help. */
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"index", cmd_index, "print a relative position index (Swin 2-D, RSTT 3-D, Shaw clip)"},
    {"forward", cmd_forward, "run an attention layer from a safetensors model file"},
    {"backward", cmd_backward, "its gradients: inputs and every parameter, tables included"},
    {"show", cmd_show, "list a safetensors file, with a summary of attention maps"},
    {"inspect", cmd_inspect, "describe a model file: arch, naming scheme, parameters, FLOPs"},
    {"classify", cmd_classify, "classify images with a swin or vit model"},
    {"resize", cmd_resize, "resample a model's bias tables for another window size"},
    {"convert", cmd_convert, "write any model (checkpoint, state_dict, folder) as a relattn model file"},
    {"train", cmd_train, "train a Swin with relative position bias on Fashion-MNIST"},
    {"eval", cmd_eval, "test accuracy and confusion matrix of a trained checkpoint"},
    {"plot", cmd_plot, "pictures: learned bias tables, attention maps, training curves"},
};
enum { NCOMMANDS = sizeof commands / sizeof commands[0] };

static void print_help(void) {
    fputs("usage: relattn COMMAND [ARGS]\n"
          "\n"
          "Transformer attention with relative position encodings (Shaw, Swin, RSTT, ViT).\n"
          "\n"
          "commands:\n", stdout);
    for (int i = 0; i < NCOMMANDS; i++)
        printf("  %-8s  %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "'relattn COMMAND --help' describes each. Exit codes: 0 ok, 64 usage,\n"
          "65 bad data, 66 input missing, 73 output cannot be created, 70 internal.\n"
          "'relattn --version': version, kernels, BLAS; '--list-archs', '--list-commands'.\n"
          "Environment: RELATTN_KERNEL=ref|avx2|avx512 forces a kernel set.\n", stdout);
}

/* The version, the kernel set in use and those this CPU runs, the BLAS. */
static void print_version(void) {
    printf("relattn %s\nkernel: %s (supported:", ra_version(), ra_kernel_name(ra_kernel_current()));
    for (int i = 0; i < RA_KERNEL_COUNT; i++)
        if (ra_kernel_supported((ra_kernel_id)i)) printf(" %s", ra_kernel_name((ra_kernel_id)i));
    printf(")\nblas: %s\n", ra_blas_info());
}

/* RELATTN_KERNEL, if set, must name a kernel set this CPU runs: the library
 * would fall back to the best one silently, and a benchmark or a test that
 * asked for one must not measure another. */
static int kernel_env_ok(void) {
    const char *env = getenv("RELATTN_KERNEL");
    if (!env || !*env) return 1;
    for (int i = 0; i < RA_KERNEL_COUNT; i++)
        if (strcmp(env, ra_kernel_name((ra_kernel_id)i)) == 0) {
            if (ra_kernel_supported((ra_kernel_id)i)) return 1;
            fail(EX_USAGE, "RELATTN_KERNEL=%s: this CPU does not support it", env);
            return 0;
        }
    fail(EX_USAGE, "RELATTN_KERNEL='%s': unknown (ref, avx2 or avx512)", env);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage_error("no command given");
    if (!kernel_env_ok()) return EX_USAGE;
    cleanup_on_signals();
    int code = -1;
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help"))
        code = (print_help(), EX_OK);
    else if (!strcmp(argv[1], "--version"))
        code = (print_version(), EX_OK);
    else if (!strcmp(argv[1], "--list-archs"))   /* what docs/ must describe (tests) */
        for (int i = code = 0; i < ra_model_arch_count(); i++) puts(ra_model_arch_name(i));
    else if (!strcmp(argv[1], "--list-commands"))
        for (int i = code = 0; i < NCOMMANDS; i++) puts(commands[i].name);
    for (int i = 0; i < NCOMMANDS && code < 0; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            static char name[64];
            snprintf(name, sizeof name, "relattn %s", commands[i].name);
            cmd = name;
            code = commands[i].run(argc - 2, argv + 2);
        }
    if (code < 0) return usage_error("unknown command '%.60s'", argv[1]);
    /* what went to stdout (index, show, help) must have arrived: a full disk
     * is an error, not a success */
    if (code == EX_OK && (fflush(stdout) || ferror(stdout)))
        code = fail(EX_CANTCREAT, "cannot write to stdout");
    return code;
}
