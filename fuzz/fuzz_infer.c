/* fuzz_infer.c - libFuzzer harness: the inference of the hyperparameters
 * from a state dict's names and shapes (src/models/infer.c), through the
 * path `relattn inspect` takes for a metadata-free file: ra_model_from_file
 * on a safetensors file without an arch (the wrappers dropped, the
 * transformers names mapped, the metadata inferred, then the model built).
 *
 * The input is not the file but a list of records the harness makes into
 * one, so that every input is a state dict under real names:
 *   tensor:  T (< 0xF0): the name, names[T % (NNAMES + 1)] with its %d
 *            filled from the next bytes (mod 32), or, for NNAMES, a length
 *            byte and that many bytes of a name of its own; a byte W (bits
 *            0-1 a wrapper prefix, 2-3 the dtype, 4-5 a suffix); a byte of
 *            dimensions (mod 7); each dimension as DIM below.
 *   key:     K (>= 0xF0): a metadata key, keys[K - 0xF0] (as --set gives
 *            one: inference never replaces it); a byte of form (one value,
 *            two, three, a boolean, a fraction); the values as DIM.
 *   DIM:     a byte b: b < 0xF0 is b; 0xF0..0xFE one of special[] (large
 *            and overflowing sizes); 0xFF the next 8 bytes, little-endian,
 *            below 2^63.
 * Shapes keep every value, 0 and 2^63 - 1 included; a tensor whose data
 * would pass the budget (or whose element count overflows) has a dimension
 * set to 0, so that it holds no byte and the file stays small. Data bytes
 * are the input's, cycled. fuzz/infer_seeds.py writes the seeds
 * (fuzz/corpus/infer/) from the fixtures' real state dicts. */
#include "relattn.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TENSORS 256
#define DATA_BUDGET (1 << 20)   /* bytes of tensor data in one file */

/* names: begin (fuzz/infer_seeds.py reads this list) */
static const char *const names[] = {
    /* official Swin / SwinV2, timm's Swin, SwinV2 */
    "patch_embed.proj.weight", "patch_embed.proj.bias", "patch_embed.norm.weight",
    "absolute_pos_embed", "layers.%d.blocks.%d.norm1.weight",
    "layers.%d.blocks.%d.attn.relative_position_bias_table",
    "layers.%d.blocks.%d.attn.relative_position_index", "layers.%d.blocks.%d.attn_mask",
    "layers.%d.blocks.%d.attn.qkv.weight", "layers.%d.blocks.%d.attn.qkv.bias",
    "layers.%d.blocks.%d.attn.q_bias", "layers.%d.blocks.%d.attn.v_bias",
    "layers.%d.blocks.%d.attn.logit_scale", "layers.%d.blocks.%d.attn.cpb_mlp.0.weight",
    "layers.%d.blocks.%d.attn.cpb_mlp.2.weight", "layers.%d.blocks.%d.attn.relative_coords_table",
    "layers.%d.blocks.%d.mlp.fc1.weight", "layers.%d.blocks.%d.mlp.fc2.weight",
    "layers.%d.downsample.reduction.weight", "layers.%d.downsample.norm.weight", "norm.weight",
    "head.weight", "head.fc.weight",
    /* torchvision's swin_t, swin_v2_t */
    "features.0.0.weight", "features.0.2.weight", "features.%d.%d.norm1.weight",
    "features.%d.%d.attn.relative_position_bias_table",
    "features.%d.%d.attn.relative_position_index", "features.%d.%d.attn.cpb_mlp.0.weight",
    "features.%d.%d.attn.cpb_mlp.2.weight", "features.%d.%d.attn.relative_coords_table",
    "features.%d.%d.attn.qkv.bias", "features.%d.%d.mlp.0.weight", "features.%d.reduction.weight",
    /* timm's ViT */
    "cls_token", "reg_token", "pos_embed", "blocks.%d.norm1.weight", "blocks.%d.attn.qkv.weight",
    "blocks.%d.attn.qkv.bias", "blocks.%d.attn.proj.bias", "blocks.%d.mlp.fc1.weight",
    "blocks.%d.ls1.gamma", "norm_pre.weight", "fc_norm.weight",
    /* torchvision's vit_b_16 */
    "conv_proj.weight", "class_token", "encoder.pos_embedding",
    "encoder.layers.encoder_layer_%d.ln_1.weight",
    "encoder.layers.encoder_layer_%d.self_attention.in_proj_weight",
    "encoder.layers.encoder_layer_%d.self_attention.in_proj_bias",
    "encoder.layers.encoder_layer_%d.mlp.0.weight",
    "encoder.layers.encoder_layer_%d.mlp.linear_1.weight", "encoder.ln.weight",
    "heads.head.weight",
    /* one block: swin_block, swin_block_3d */
    "norm1.weight", "attn.relative_position_bias_table", "attn.relative_position_index",
    "attn_mask", "attn.qkv.bias", "attn.q.weight", "attn.q.bias", "mlp.fc1.weight",
    "mlp.0.weight", "norm_kv.weight",
    /* transformers (mapped by hf.c) */
    "swin.embeddings.patch_embeddings.projection.weight", "swin.embeddings.position_embeddings",
    "swin.encoder.layers.%d.blocks.%d.layernorm_before.weight",
    "swin.encoder.layers.%d.blocks.%d.attention.self.relative_position_bias_table",
    "swin.encoder.layers.%d.blocks.%d.attention.self.query.weight",
    "swin.encoder.layers.%d.blocks.%d.attention.self.key.weight",
    "swin.encoder.layers.%d.blocks.%d.attention.self.value.weight",
    "swin.encoder.layers.%d.blocks.%d.intermediate.dense.weight",
    "swinv2.embeddings.patch_embeddings.projection.weight",
    "swinv2.encoder.layers.%d.blocks.%d.layernorm_before.weight",
    "swinv2.encoder.layers.%d.blocks.%d.attention.self.continuous_position_bias_mlp.2.weight",
    "swinv2.encoder.layers.%d.blocks.%d.attention.self.relative_coords_table",
    "swinv2.encoder.layers.%d.blocks.%d.attention.self.relative_position_index",
    "vit.embeddings.patch_embeddings.projection.weight", "vit.embeddings.cls_token",
    "vit.embeddings.position_embeddings", "vit.encoder.layer.%d.layernorm_before.weight",
    "vit.encoder.layer.%d.attention.attention.query.weight",
    "vit.encoder.layer.%d.attention.attention.key.weight",
    "vit.encoder.layer.%d.attention.attention.value.weight",
    "vit.encoder.layer.%d.intermediate.dense.weight", "classifier.weight",
    /* swin3d: torchvision's SwinTransformer3d (patch_embed.* above, 5 dims),
     * the official Video Swin checkpoints */
    "features.%d.%d.mlp.3.weight", "features.%d.norm.weight",
    "backbone.patch_embed.proj.weight", "backbone.patch_embed.norm.weight",
    "backbone.layers.%d.blocks.%d.norm1.weight",
    "backbone.layers.%d.blocks.%d.attn.relative_position_bias_table",
    "backbone.layers.%d.blocks.%d.attn.relative_position_index",
    "backbone.layers.%d.blocks.%d.mlp.fc1.weight",
    "backbone.layers.%d.downsample.reduction.weight", "cls_head.fc_cls.weight",
};
/* names: end */
#define NNAMES ((int)(sizeof names / sizeof *names))

/* keys: begin */
static const char *const keys[] = {
    "window_size", "img_size", "num_heads", "embed_dim", "depths", "mlp_ratio",
    "patch_size", "in_chans", "input_resolution", "shift_size", "num_classes", "depth",
    "pretrained_window_sizes", "reg_tokens", "num_frames_q", "num_frames_kv",
};
/* keys: end */

static const int64_t special[15] = {
    256, 384, 1024, 3136, 4096, 65536, 65537, (int64_t)1 << 20, INT32_MAX, (int64_t)1 << 32,
    INT64_C(3037000497) * INT64_C(3037000497), INT64_C(3037000499) * INT64_C(3037000499),
    (int64_t)1 << 62, INT64_MAX - 1, INT64_MAX};

static const char *const wrappers[] = {"", "", "module.", "_orig_mod."};
static const char *const suffixes[] = {"", "", ".bias", "_"};
static const char *const dtypes[] = {"F32", "F16", "BF16", "I64"};
static const int dsize[] = {4, 2, 2, 8};

typedef struct {
    const uint8_t *p, *end;
} reader;

static int byte(reader *r) { return r->p < r->end ? *r->p++ : -1; }

static int64_t dim(reader *r) {
    const int b = byte(r);
    if (b < 0) return 1;
    if (b < 0xF0) return b;
    if (b < 0xFF) return special[b - 0xF0];
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)(byte(r) & 0xFF) << (8 * i);
    return (int64_t)(v & (uint64_t)INT64_MAX);
}

/* A growing text, NULL once out of memory. */
typedef struct {
    char *s;
    size_t n, cap;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...) {
    if (!t->s) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int k = vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if ((size_t)k < t->cap - t->n) {
            t->n += (size_t)k;
            return;
        }
        char *s = realloc(t->s, 2 * t->cap + (size_t)k);
        if (!s) {
            free(t->s), t->s = NULL;
            return;
        }
        t->s = s, t->cap = 2 * t->cap + (size_t)k;
    }
}

/* The name of a tensor record into buf; 0 at the end of the input. */
static int name_of(reader *r, char *buf, size_t n, int t) {
    const int which = t % (NNAMES + 1);
    if (which == NNAMES) {   /* a name of its own: [A-Za-z0-9._-] */
        int len = byte(r) % 128, k = 0;
        for (int i = 0; i < len && r->p < r->end; i++) {
            const int c = byte(r);
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-')
                buf[k++] = (char)c;
        }
        buf[k] = 0;
        return k > 0;
    }
    const char *f = names[which], *d1 = strstr(f, "%d");
    const int nd = d1 ? (strstr(d1 + 2, "%d") ? 2 : 1) : 0;
    int a = nd > 0 ? byte(r) : 0, b = nd > 1 ? byte(r) : 0;
    if (a < 0 || b < 0) return 0;
    a %= 32, b %= 32;
    if (nd == 2) snprintf(buf, n, f, a, b);
    else if (nd == 1) snprintf(buf, n, f, a);
    else snprintf(buf, n, "%s", f);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, data + size};
    text h = {malloc(4096), 0, 4096}, meta = {malloc(256), 0, 256};
    static char seen[MAX_TENSORS][160];
    int nt = 0, nmeta = 0;
    int64_t bytes = 0;
    add(&h, "{");
    add(&meta, "\"__metadata__\":{");
    for (int t; nt < MAX_TENSORS && (t = byte(&r)) >= 0;) {
        if (t >= 0xF0) {   /* a metadata key */
            const char *key = keys[(t - 0xF0) % (int)(sizeof keys / sizeof *keys)];
            const int form = byte(&r) % 5;
            char v[96];
            const long long x = (long long)dim(&r);
            if (form == 0) snprintf(v, sizeof v, "%lld", x);
            else if (form == 1) snprintf(v, sizeof v, "%lld,%lld", x, (long long)dim(&r));
            else if (form == 2) {
                const long long y = (long long)dim(&r);
                snprintf(v, sizeof v, "%lld,%lld,%lld", x, y, (long long)dim(&r));
            } else if (form == 3) snprintf(v, sizeof v, "%s", x & 1 ? "true" : "false");
            else snprintf(v, sizeof v, "%.17g", (double)x / 8);
            char quoted[40];
            snprintf(quoted, sizeof quoted, "\"%s\"", key);
            if (meta.s && !strstr(meta.s, quoted))   /* a key once */
                add(&meta, "%s\"%s\":\"%s\"", nmeta++ ? "," : "", key, v);
            continue;
        }
        char name[160];
        if (!name_of(&r, name, sizeof name, t)) break;
        const int w = byte(&r), nd = byte(&r);
        if (w < 0 || nd < 0) break;
        char full[160];
        snprintf(full, sizeof full, "%s%s%s", wrappers[w & 3], name, suffixes[w >> 4 & 3]);
        const int dt = w >> 2 & 3, ndim = nd % 7;
        int64_t shape[8], numel = 1;
        for (int i = 0; i < ndim; i++) {
            shape[i] = dim(&r);
            int64_t m;
            if (__builtin_mul_overflow(numel, shape[i], &m)) shape[i] = 0, m = 0;
            numel = m;
        }
        int64_t nbytes = numel <= DATA_BUDGET ? numel * dsize[dt] : -1;
        if (nbytes < 0 || bytes + nbytes > DATA_BUDGET) {
            if (!ndim) continue;
            shape[ndim - 1] = 0, nbytes = 0;
        }
        int dup = 0;
        for (int i = 0; i < nt && !dup; i++) dup = !strcmp(seen[i], full);
        if (dup) continue;
        snprintf(seen[nt++], sizeof seen[0], "%s", full);
        add(&h, "\"%s\":{\"dtype\":\"%s\",\"shape\":[", full, dtypes[dt]);
        for (int i = 0; i < ndim; i++) add(&h, "%s%lld", i ? "," : "", (long long)shape[i]);
        add(&h, "],\"data_offsets\":[%lld,%lld]},", (long long)bytes, (long long)(bytes + nbytes));
        bytes += nbytes;
    }
    add(&meta, "}");
    add(&h, "%s}", meta.s ? meta.s : "");
    uint8_t *file = h.s ? malloc(8 + h.n + (size_t)bytes) : NULL;
    if (file) {
        for (int i = 0; i < 8; i++) file[i] = (uint8_t)((uint64_t)h.n >> (8 * i));
        memcpy(file + 8, h.s, h.n);
        for (int64_t i = 0; i < bytes; i++) file[8 + h.n + i] = size ? data[i % size] : 0;
        ra_st_file *f = NULL;
        if (ra_st_open_memory(&f, file, 8 + h.n + (size_t)bytes) == RA_OK) {
            ra_model *m = NULL;
            const ra_status st = ra_model_from_file(&m, f);
            if (getenv("FUZZ_INFER_VERBOSE"))   /* what a seed gives: FUZZ_INFER_VERBOSE=1 -runs=0 */
                fprintf(stderr, "%d tensors: %s\n", nt, st ? ra_last_error() : ra_model_meta(m, "arch"));
            if (st == RA_OK) {
                if (!m || !ra_model_meta(m, "arch")) abort();
                ra_model_flops(m, 65536, 65536);
                ra_model_free(m);
            } else {
                /* a value, with one line of reason */
                const char *e = ra_last_error();
                if (m || st == RA_ERR_INTERNAL || !e || !e[0] || strchr(e, '\n')) abort();
            }
            ra_st_close(f);
        }
    }
    free(file);
    free(h.s);
    free(meta.s);
    return 0;
}
