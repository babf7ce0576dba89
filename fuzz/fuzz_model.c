/* fuzz_model.c - libFuzzer harness: a model file (metadata parser,
 * hyperparameters, tensor names and shapes of every arch) through
 * ra_model_from_file, then, for what loads, one forward on small shapes:
 * an attention layer on one window (or a sequence of 5 tokens), a network
 * on the smallest input its metadata describes. Sizes are bounded so that
 * every input runs in milliseconds. */
#include "relattn.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VALUES (1 << 16)   /* floats of an input */

static int meta_int(const ra_model *m, const char *key, int def) {
    const char *v = ra_model_meta(m, key);
    return v ? atoi(v) : def;
}

static void attention(const ra_model *m) {
    const ra_attn_layer *l = ra_model_attn(m);
    const ra_attn_config *c = ra_attn_layer_config(l);
    int64_t n1 = 5, n2 = 5;
    ra_attn_layer_index(l, &n1, &n2, NULL);
    if (c->arch == RA_ARCH_ROPE_ATTENTION)   /* the tokens its grid fixes */
        n1 = n2 = c->num_prefix + (int64_t)c->grid[0] * c->grid[1];
    if (c->arch == RA_ARCH_DECOMPOSED_ATTENTION)
        n1 = n2 = (int64_t)c->grid[0] * c->grid[1];
    const int64_t nh = c->num_heads, C = c->dim;
    if (n1 * C > MAX_VALUES || n2 * C > MAX_VALUES || nh * n1 * n2 > MAX_VALUES) return;
    if (ra_attn_layer_check_tokens(l, (int)n1, (int)n2) != RA_OK) return;
    float *x = calloc((size_t)(n1 * C), sizeof *x), *kv = calloc((size_t)(n2 * C), sizeof *kv);
    float *y = malloc(sizeof *y * (size_t)(n1 * C)), *p = malloc(sizeof *p * (size_t)(nh * n1 * n2));
    if (x && kv && y && p) {
        for (int64_t i = 0; i < n1 * C; i++) x[i] = (float)(i % 7) - 3;
        const int cross = c->arch == RA_ARCH_WINDOW_ATTENTION_3D && n1 != n2;
        ra_attn_layer_forward(l, y, p, x, cross ? kv : NULL, 1, (int)n1, (int)n2, NULL, 0);
    }
    free(x), free(kv), free(y), free(p);
}

static void network(const ra_model *m) {
    int64_t shape[4];
    int nd = 4;
    switch (ra_model_arch(m)) {
    case RA_ARCH_SWIN:
    case RA_ARCH_VIT: {
        const int img = meta_int(m, "img_size", 0), ch = meta_int(m, "in_chans", 3);
        shape[0] = 1, shape[1] = ch, shape[2] = shape[3] = img;
        break;
    }
    case RA_ARCH_SWIN_BLOCK: {
        const char *r = ra_model_meta(m, "input_resolution");
        const int h = r ? atoi(r) : 0, w = r && strchr(r, ',') ? atoi(strchr(r, ',') + 1) : h;
        nd = 3, shape[0] = 1, shape[1] = (int64_t)h * w, shape[2] = meta_int(m, "dim", 0);
        break;
    }
    case RA_ARCH_SWIN_BLOCK_3D: {
        const int fq = meta_int(m, "num_frames_q", 0), fkv = meta_int(m, "num_frames_kv", 0);
        shape[0] = fq ? fq + fkv : 2, shape[1] = 3, shape[2] = 4, shape[3] = meta_int(m, "dim", 0);
        break;
    }
    default:
        return;
    }
    int64_t n = 1;
    for (int i = 0; i < nd; i++) {
        if (shape[i] < 1 || shape[i] > MAX_VALUES) return;
        n *= shape[i];
        if (n > MAX_VALUES) return;
    }
    float *x = calloc((size_t)n, sizeof *x), *y = NULL;
    int yn;
    int64_t ys[4];
    if (x && ra_model_forward(m, &y, &yn, ys, x, nd, shape) == RA_OK) free(y);
    free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ra_st_file *f = NULL;
    if (ra_st_open_memory(&f, data, size) != RA_OK) return 0;
    ra_model *m = NULL;
    if (ra_model_from_file(&m, f) == RA_OK) {
        if (ra_model_param_total(m) <= (1 << 22)) {
            if (ra_model_attn(m)) attention(m);
            else network(m);
        }
        ra_model_flops(m, 65536, 65536);
        ra_model_free(m);
    }
    ra_st_close(f);
    return 0;
}
