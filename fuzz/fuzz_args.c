/* fuzz_args.c - libFuzzer harness: the command line's argument parsing
 * (cli/args.c: options with and without values, an optional list value,
 * "--name=value",
 * positionals, integers, window sizes, the escaping of messages). An input
 * is the arguments, separated by NUL bytes. */
#include "cli.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1), *argv[64];
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    int argc = 0;
    for (char *p = buf; argc < 64 && p <= buf + size; p += strlen(p) + 1) argv[argc++] = p;
    opt opts[] = {{"-o", 1, 0},      {"--window", 1, 0}, {"--attn", 0, 0}, {"--threads", 1, 0},
                  {"--length", 1, 0}, {"--help", 0, 0},  {"--features", 2, 0}, {0, 0, 0}};
    const char *pos[4];
    int npos, n, w[2];
    if (parse_args(argc, argv, opts, pos, 4, &npos)) {
        const char *v = get(opts, "--window");
        if (v && parse_window(w, v) != 1 && parse_window(w, v) != 0) abort();
        if ((v = get(opts, "--length")) && !parse_int(&n, v, 1, 1 << 20)) int_problem(v, 1, 1 << 20);
    }
    double pairs[8];
    parse_pairs(pairs, 4, buf);
    free(buf);
    return 0;
}
