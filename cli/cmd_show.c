/* cmd_show.c - relattn show: list a safetensors file. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char show_help[] =
    "usage: relattn show FILE.safetensors\n"
    "\n"
    "Lists a safetensors file: its metadata, then each tensor with dtype, shape\n"
    "and min / mean / max. A tensor named attn (B_, nH, N1, N2) is summarised\n"
    "per head: the mean of each row's largest probability, and the mean row\n"
    "entropy in nats (log N2 for uniform attention, 0 for one-hot).\n";

static void show_attn(const float *a, const ra_st_tensor *t) {
    const int64_t b_ = t->shape[0], nh = t->shape[1], n1 = t->shape[2], n2 = t->shape[3];
    printf("  attention map: %lld windows x %lld heads, %lld queries over %lld keys "
           "(uniform entropy %.3f)\n", (long long)b_, (long long)nh, (long long)n1,
           (long long)n2, log((double)n2));
    for (int64_t h = 0; h < nh; h++) {
        double peak = 0, ent = 0;
        for (int64_t b = 0; b < b_; b++)
            for (int64_t i = 0; i < n1; i++) {
                const float *row = a + ((b * nh + h) * n1 + i) * n2;
                double mx = 0, e = 0;
                for (int64_t j = 0; j < n2; j++) {
                    mx = row[j] > mx ? row[j] : mx;
                    if (row[j] > 0) e -= row[j] * log((double)row[j]);
                }
                peak += mx, ent += e;
            }
        printf("    head %lld: mean max probability %.3f, mean entropy %.3f\n",
               (long long)h, peak / (double)(b_ * n1), ent / (double)(b_ * n1));
    }
}

int cmd_show(int argc, char **argv) {
    opt opts[] = {{"--help", 0, 0}, {"-h", 0, 0}, {0, 0, 0}};
    const char *pos[1];
    int npos;
    if (!parse_args(argc, argv, opts, pos, 1, &npos)) return EX_USAGE;
    if (get(opts, "--help") || get(opts, "-h")) return fputs(show_help, stdout), EX_OK;
    if (npos != 1) return usage_error("needs FILE");
    ra_st_file *f;
    ra_status st = ra_st_open(&f, pos[0]);
    if (st) return lib_fail(st);
    for (int i = 0; i < ra_st_meta_count(f); i++)
        printf("%s = %s\n", safe_text(ra_st_meta_key(f, i)),
               safe_text(ra_st_meta(f, ra_st_meta_key(f, i))));
    int code = EX_OK;
    for (int i = 0; i < ra_st_count(f) && code == EX_OK; i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        static const char *dt[] = {"?", "F32", "F16", "BF16", "F64", "I64", "I32",
                                   "I16", "I8", "U8", "BOOL"};
        char shape[256] = "";
        for (int d = 0; d < t->ndim; d++) {
            char one[24];
            snprintf(one, sizeof one, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
            strcat(shape, one);
        }
        printf("%-32s %-4s (%s)", safe_text(t->name), dt[t->dtype], shape);
        float *v = malloc((size_t)t->numel * sizeof *v + 1);
        if (!v) { code = fail(EX_DATAERR, "too large: out of memory"); break; }
        const int is_float = ra_st_to_f32(v, t) == RA_OK;
        if (is_float && t->numel > 0) {
            double lo = v[0], hi = v[0], sum = 0;
            for (int64_t e = 0; e < t->numel; e++) {
                lo = v[e] < lo ? v[e] : lo, hi = v[e] > hi ? v[e] : hi;
                sum += v[e];
            }
            printf("  min %.4g  mean %.4g  max %.4g", lo, sum / (double)t->numel, hi);
        }
        putchar('\n');
        if (is_float && !strcmp(t->name, "attn") && t->ndim == 4 && t->numel > 0)
            show_attn(v, t);
        free(v);
    }
    ra_st_close(f);
    return code;
}
