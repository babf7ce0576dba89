/* cmd_index.c - relattn index: the relative position index of a window or a clip. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

static const char index_help[] =
    "usage: relattn index --window WHxWW [--frames D1 --kv-frames D2] [--json]\n"
    "       relattn index --length N --clip K [--json]\n"
    "\n"
    "Prints the relative position index, one row per query token, integers\n"
    "separated by single spaces; the table size goes to stderr.\n"
    "  --window WHxWW   Swin window (7x7, 3x5, or 7); its index has (WH*WW)^2 entries\n"
    "  --frames D1      with --kv-frames D2: RSTT 3-D index over D1 query frames and\n"
    "                   D2 key/value frames 0, s, 2s, ... with s = (D1+1)/D2\n"
    "  --length N       Shaw et al. clip index clip(j-i, -K, K) + K over N tokens\n"
    "  --clip K\n"
    "  --json           print {\"index\": [[...]], \"table_rows\": T} instead\n";

int cmd_index(int argc, char **argv) {
    opt opts[] = {{"--window", 1, 0}, {"--frames", 1, 0}, {"--kv-frames", 1, 0},
                  {"--length", 1, 0}, {"--clip", 1, 0},  {"--json", 0, 0},
                  {"--help", 0, 0},   {"-h", 0, 0},      {0, 0, 0}};
    const char *pos[1];
    int npos;
    if (!parse_args(argc, argv, opts, pos, 0, &npos)) return EX_USAGE;
    if (get(opts, "--help") || get(opts, "-h")) return fputs(index_help, stdout), EX_OK;
    const char *win = get(opts, "--window"), *fr = get(opts, "--frames"),
               *kvf = get(opts, "--kv-frames"), *len = get(opts, "--length"),
               *clip = get(opts, "--clip");
    if (!!win == !!len) return usage_error("give either --window or --length");
    if (len && (fr || kvf)) return usage_error("--frames goes with --window, not --length");
    if (!!fr != !!kvf) return usage_error("--frames and --kv-frames go together");
    if (!!len != !!clip) return usage_error("--length and --clip go together");

    int w[2] = {0, 0}, d1 = 0, d2 = 0, n = 0, k = 0;
    if (win && !parse_window(w, win)) return usage_error("--window '%s': expected WHxWW", win);
    if (fr && !parse_int(&d1, fr, INT_MIN, INT_MAX)) return usage_error("--frames '%s': %s", fr, int_problem(fr, INT_MIN, INT_MAX));
    if (kvf && !parse_int(&d2, kvf, INT_MIN, INT_MAX)) return usage_error("--kv-frames '%s': %s", kvf, int_problem(kvf, INT_MIN, INT_MAX));
    if (len && !parse_int(&n, len, INT_MIN, INT_MAX)) return usage_error("--length '%s': %s", len, int_problem(len, INT_MIN, INT_MAX));
    if (clip && !parse_int(&k, clip, INT_MIN, INT_MAX)) return usage_error("--clip '%s': %s", clip, int_problem(clip, INT_MIN, INT_MAX));

    /* validate and size, then build */
    int64_t n1, n2, rows;
    ra_status st;
    if (len) {
        st = ra_relpos_index_clip(NULL, n, k);
        n1 = n2 = n;
        rows = 2 * (int64_t)k + 1;
    } else if (fr) {
        st = ra_relpos_index_3d(NULL, d1, d2, w[0], w[1], &rows);
        n1 = (int64_t)d1 * w[0] * w[1];
        n2 = (int64_t)d2 * w[0] * w[1];
    } else {
        st = ra_relpos_index_2d(NULL, w[0], w[1], &rows);
        n1 = n2 = (int64_t)w[0] * w[1];
    }
    if (st) return lib_fail(st);
    int32_t *idx = malloc((size_t)(n1 * n2) * sizeof *idx);
    if (!idx) return fail(EX_DATAERR, "too large: out of memory for a %lld x %lld index",
                          (long long)n1, (long long)n2);
    st = len ? ra_relpos_index_clip(idx, n, k)
       : fr  ? ra_relpos_index_3d(idx, d1, d2, w[0], w[1], NULL)
             : ra_relpos_index_2d(idx, w[0], w[1], NULL);
    if (st) { free(idx); return lib_fail(st); }

    if (get(opts, "--json")) {
        jw jo = {0};
        jw_object(&jo);
        jw_key(&jo, "index");
        jw_array(&jo);
        for (int64_t i = 0; i < n1; i++) {
            jw_array(&jo);
            for (int64_t j = 0; j < n2; j++) jw_int(&jo, idx[i * n2 + j]);
            jw_end(&jo, ']');
        }
        jw_end(&jo, ']');
        jw_key(&jo, "table_rows");
        jw_int(&jo, (long long)rows);
        jw_end(&jo, '}');
        jw_line(&jo);
    } else {
        for (int64_t i = 0; i < n1; i++) {
            for (int64_t j = 0; j < n2; j++) printf(j ? " %d" : "%d", idx[i * n2 + j]);
            putchar('\n');
        }
    }
    free(idx);
    /* the table size only once stdout is known good: a failure is one line */
    if (fflush(stdout) || ferror(stdout)) return fail(EX_CANTCREAT, "cannot write to stdout");
    fprintf(stderr, "table_rows: %lld\n", (long long)rows);
    return EX_OK;
}
