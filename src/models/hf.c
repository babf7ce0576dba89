/* hf.c - transformers' tensor names for Swin, SwinV2 and ViT mapped to
 * relattn's (models/hf.h). The rules are transformers' own conversion
 * scripts read backwards (convert_swin_timm_to_pytorch.py,
 * convert_swinv2_timm_to_pytorch.py, convert_vit_timm_to_pytorch.py: they
 * split timm's qkv rows into query, key and value and rename the rest),
 * with the buffers and heads of modeling_swin.py, modeling_swinv2.py and
 * modeling_vit.py, which those scripts leave out. docs/reference.md,
 * section 2 ("transformers") lists them.
 *
 * Two passes: every tensor is mapped (renamed, one third of a qkv tensor,
 * dropped) or refused, and the thirds are checked, before anything is
 * built; then the derived file gets the tensors, each qkv tensor made of
 * its thirds' byte ranges, nothing copied. */
#include "models/hf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_NAME 200           /* the longest new name: "layers.I.blocks.J.attn..." */
#define HF_MAX_INDEX 100000   /* a stage, block or layer number */

typedef enum { HF_SWIN, HF_SWINV2, HF_VIT } hf_arch;
static const char *const arch_names[] = {"swin", "swinv2", "vit"};

/* What one tensor becomes: kept under a new name, dropped, or the q, k or
 * v third (slot 0, 1, 2) of the tensor named name. */
enum { KEEP = -1, DROP = -2 };
typedef struct {
    const ra_st_tensor *t;
    int slot;
    char name[HF_NAME];
} hf_map;

/* A rule: transformers' suffix, relattn's, the slot, the archs it holds for. */
typedef struct {
    const char *hf, *to;
    int slot;
    unsigned archs;
} hf_rule;
#define SW (1u << HF_SWIN)
#define SW2 (1u << HF_SWINV2)
#define VT (1u << HF_VIT)
#define ALL (SW | SW2 | VT)

/* After encoder.layers.I.blocks.J. (Swin, SwinV2: SwinLayer / Swinv2Layer). */
static const hf_rule swin_block[] = {
    {"layernorm_before.weight", "norm1.weight", KEEP, SW | SW2},
    {"layernorm_before.bias", "norm1.bias", KEEP, SW | SW2},
    {"attention.self.relative_position_bias_table", "attn.relative_position_bias_table", KEEP, SW},
    {"attention.self.relative_position_index", "attn.relative_position_index", KEEP, SW | SW2},
    {"attention.self.relative_coords_table", "attn.relative_coords_table", KEEP, SW2},
    {"attention.self.logit_scale", "attn.logit_scale", KEEP, SW2},
    {"attention.self.continuous_position_bias_mlp.0.weight", "attn.cpb_mlp.0.weight", KEEP, SW2},
    {"attention.self.continuous_position_bias_mlp.0.bias", "attn.cpb_mlp.0.bias", KEEP, SW2},
    {"attention.self.continuous_position_bias_mlp.2.weight", "attn.cpb_mlp.2.weight", KEEP, SW2},
    {"attention.self.query.weight", "attn.qkv.weight", 0, SW | SW2},
    {"attention.self.key.weight", "attn.qkv.weight", 1, SW | SW2},
    {"attention.self.value.weight", "attn.qkv.weight", 2, SW | SW2},
    {"attention.self.query.bias", "attn.qkv.bias", 0, SW},
    {"attention.self.key.bias", "attn.qkv.bias", 1, SW},
    {"attention.self.value.bias", "attn.qkv.bias", 2, SW},
    /* official SwinV2: qkv without bias, then q_bias and v_bias (the key none) */
    {"attention.self.query.bias", "attn.q_bias", KEEP, SW2},
    {"attention.self.value.bias", "attn.v_bias", KEEP, SW2},
    {"attention.output.dense.weight", "attn.proj.weight", KEEP, SW | SW2},
    {"attention.output.dense.bias", "attn.proj.bias", KEEP, SW | SW2},
    {"layernorm_after.weight", "norm2.weight", KEEP, SW | SW2},
    {"layernorm_after.bias", "norm2.bias", KEEP, SW | SW2},
    {"intermediate.dense.weight", "mlp.fc1.weight", KEEP, SW | SW2},
    {"intermediate.dense.bias", "mlp.fc1.bias", KEEP, SW | SW2},
    {"output.dense.weight", "mlp.fc2.weight", KEEP, SW | SW2},
    {"output.dense.bias", "mlp.fc2.bias", KEEP, SW | SW2}};

/* After encoder.layers.I.downsample. (the end of stage I, as the official code). */
static const hf_rule swin_merge[] = {{"reduction.weight", "reduction.weight", KEEP, SW | SW2},
                                     {"norm.weight", "norm.weight", KEEP, SW | SW2},
                                     {"norm.bias", "norm.bias", KEEP, SW | SW2}};

/* After encoder.layer.I. (ViT: ViTLayer). */
static const hf_rule vit_block[] = {
    {"layernorm_before.weight", "norm1.weight", KEEP, VT},
    {"layernorm_before.bias", "norm1.bias", KEEP, VT},
    {"attention.attention.query.weight", "attn.qkv.weight", 0, VT},
    {"attention.attention.key.weight", "attn.qkv.weight", 1, VT},
    {"attention.attention.value.weight", "attn.qkv.weight", 2, VT},
    {"attention.attention.query.bias", "attn.qkv.bias", 0, VT},
    {"attention.attention.key.bias", "attn.qkv.bias", 1, VT},
    {"attention.attention.value.bias", "attn.qkv.bias", 2, VT},
    {"attention.output.dense.weight", "attn.proj.weight", KEEP, VT},
    {"attention.output.dense.bias", "attn.proj.bias", KEEP, VT},
    {"layernorm_after.weight", "norm2.weight", KEEP, VT},
    {"layernorm_after.bias", "norm2.bias", KEEP, VT},
    {"intermediate.dense.weight", "mlp.fc1.weight", KEEP, VT},
    {"intermediate.dense.bias", "mlp.fc1.bias", KEEP, VT},
    {"output.dense.weight", "mlp.fc2.weight", KEEP, VT},
    {"output.dense.bias", "mlp.fc2.bias", KEEP, VT}};

/* Everything outside the blocks, the prefix taken off. */
static const hf_rule top[] = {
    {"embeddings.patch_embeddings.projection.weight", "patch_embed.proj.weight", KEEP, ALL},
    {"embeddings.patch_embeddings.projection.bias", "patch_embed.proj.bias", KEEP, ALL},
    {"embeddings.norm.weight", "patch_embed.norm.weight", KEEP, SW | SW2},
    {"embeddings.norm.bias", "patch_embed.norm.bias", KEEP, SW | SW2},
    {"embeddings.position_embeddings", "absolute_pos_embed", KEEP, SW | SW2},
    {"embeddings.position_embeddings", "pos_embed", KEEP, VT},
    {"embeddings.cls_token", "cls_token", KEEP, VT},
    {"layernorm.weight", "norm.weight", KEEP, ALL},
    {"layernorm.bias", "norm.bias", KEEP, ALL},
    {"classifier.weight", "head.weight", KEEP, ALL},
    {"classifier.bias", "head.bias", KEEP, ALL},
    /* ViTModel's pooler, tanh(dense(token 0)): no classifier reads it
     * (ViTForImageClassification has none), and a model without head
     * returns token 0 after the final norm, the pooler's input */
    {"pooler.dense.weight", NULL, DROP, VT},
    {"pooler.dense.bias", NULL, DROP, VT}};

#define COUNT(a) (sizeof(a) / sizeof *(a))

static const char PATCH_EMBED[] = "embeddings.patch_embeddings.projection.weight";

static int starts(const char *s, const char *lit) { return strncmp(s, lit, strlen(lit)) == 0; }

static int take(const char **p, const char *lit) {
    if (!starts(*p, lit)) return 0;
    *p += strlen(lit);
    return 1;
}

/* "12." at *p (no sign, no leading zero, at most HF_MAX_INDEX), then past the dot. */
static int take_index(const char **p, int *out) {
    const char *s = *p;
    long v = 0;
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] != '.')) return 0;
    for (; *s >= '0' && *s <= '9'; s++)
        if ((v = v * 10 + (*s - '0')) > HF_MAX_INDEX) return 0;
    if (*s != '.') return 0;
    *out = (int)v;
    *p = s + 1;
    return 1;
}

static const hf_rule *find_rule(const hf_rule *r, size_t n, const char *s, hf_arch a) {
    for (size_t i = 0; i < n; i++)
        if ((r[i].archs & (1u << a)) && strcmp(r[i].hf, s) == 0) return &r[i];
    return NULL;
}

/* ---- which model -------------------------------------------------------- */

/* The prefix before the patch embedding ("swin.", "vit.", "" ...) into pfx;
 * *found = 0 when no name is transformers' patch embedding. */
static ra_status find_prefix(const ra_st_file *f, char *pfx, size_t n, int *found) {
    const size_t pe = strlen(PATCH_EMBED);
    *found = 0;
    for (int i = 0; i < ra_st_count(f); i++) {
        const char *nm = ra_st_at(f, i)->name;
        const size_t len = strlen(nm);
        if (len < pe || strcmp(nm + len - pe, PATCH_EMBED) || (len > pe && nm[len - pe - 1] != '.'))
            continue;
        if (len - pe >= n)
            return rai_fail(RA_ERR_FORMAT, "tensor '%.120s': a transformers patch embedding "
                            "under an unknown prefix", nm);
        if (*found && (strlen(pfx) != len - pe || strncmp(pfx, nm, len - pe)))
            return rai_fail(RA_ERR_FORMAT, "tensor '%.120s': a second transformers patch "
                            "embedding (the first under '%s')", nm, pfx);
        memcpy(pfx, nm, len - pe);
        pfx[len - pe] = 0;
        *found = 1;
    }
    return RA_OK;
}

/* The arch: from the prefix (the ...ForImageClassification models), else
 * (SwinModel, Swinv2Model, ViTModel) from what the names hold. */
static ra_status arch_of(const ra_st_file *f, const char *pfx, hf_arch *a) {
    if (!strcmp(pfx, "swin.")) return *a = HF_SWIN, RA_OK;
    if (!strcmp(pfx, "swinv2.")) return *a = HF_SWINV2, RA_OK;
    if (!strcmp(pfx, "vit.")) return *a = HF_VIT, RA_OK;
    if (*pfx)
        return rai_fail(RA_ERR_FORMAT, "tensor '%s%s': a transformers model under '%s', not "
                        "swin, swinv2 or vit (which relattn reads)", pfx, PATCH_EMBED, pfx);
    *a = HF_SWIN;
    for (int i = 0; i < ra_st_count(f); i++) {
        const char *nm = ra_st_at(f, i)->name;
        if (starts(nm, "encoder.layer.") || !strcmp(nm, "embeddings.cls_token")) return *a = HF_VIT, RA_OK;
        if (strstr(nm, ".continuous_position_bias_mlp.") || strstr(nm, ".self.logit_scale"))
            *a = HF_SWINV2;
    }
    return RA_OK;
}

/* ---- one tensor --------------------------------------------------------- */

static ra_status set_name(hf_map *m, const hf_rule *r, const char *fmt, int i, int j) {
    m->slot = r->slot;
    if (r->slot == DROP) return RA_OK;
    char sfx[HF_NAME];
    snprintf(sfx, sizeof sfx, fmt, i, j);
    if ((size_t)snprintf(m->name, sizeof m->name, "%s%s", sfx, r->to) >= sizeof m->name)
        return rai_fail(RA_ERR_INTERNAL, "hf: name too long");
    return RA_OK;
}

/* Inside the encoder: rule r for the rest of the name, and the new
 * name's block prefix; NULL if no rule. */
static const hf_rule *encoder_rule(hf_arch a, const char *body, const char **fmt, int *i, int *j) {
    const char *p = body;
    *j = 0;
    if (a == HF_VIT) {
        *fmt = "blocks.%d.";
        return take(&p, "encoder.layer.") && take_index(&p, i)
                   ? find_rule(vit_block, COUNT(vit_block), p, a) : NULL;
    }
    if (!take(&p, "encoder.layers.") || !take_index(&p, i)) return NULL;
    if (take(&p, "downsample.")) {
        *fmt = "layers.%d.downsample.";
        return find_rule(swin_merge, COUNT(swin_merge), p, a);
    }
    *fmt = "layers.%d.blocks.%d.";
    return take(&p, "blocks.") && take_index(&p, j) ? find_rule(swin_block, COUNT(swin_block), p, a)
                                                    : NULL;
}

/* Tensor t of a transformers model a under prefix pfx: into m, or refused. */
static ra_status map_one(hf_arch a, const char *pfx, const ra_st_tensor *t, hf_map *m) {
    const char *nm = t->name, *body = nm;
    const size_t pl = strlen(pfx);
    m->t = t;
    if (pl && !strncmp(nm, pfx, pl)) body = nm + pl;
    else if (pl && !starts(nm, "classifier.") && !starts(nm, "pooler.") && !starts(nm, "decoder."))
        return rai_fail(RA_ERR_FORMAT, "tensor '%.120s' is outside the '%s' of the other "
                        "transformers names", nm, pfx);
    if (starts(body, "decoder.") || !strcmp(body, "embeddings.mask_token"))
        return rai_fail(RA_ERR_FORMAT, "tensor '%.120s': a masked-image-modeling model "
                        "(%sForMaskedImageModeling), which relattn does not run", nm,
                        a == HF_VIT ? "ViT" : a == HF_SWIN ? "Swin" : "Swinv2");
    const size_t bl = strlen(body), kb = strlen(".attention.self.key.bias");
    if (a == HF_SWINV2 && bl > kb && !strcmp(body + bl - kb, ".attention.self.key.bias"))
        return rai_fail(RA_ERR_FORMAT, "tensor '%.120s': SwinV2's key has no bias (official "
                        "SwinV2 has q_bias and v_bias only)", nm);
    const char *fmt = "";
    int i = 0, j = 0;
    const char *hs = body;
    if (a == HF_SWIN && take(&hs, "hidden_states_norms.")) {   /* SwinBackbone's, as they are */
        const char *st = hs;
        if (take(&st, "stage") && take_index(&st, &i) && i >= 1 &&
            (!strcmp(st, "weight") || !strcmp(st, "bias"))) {
            m->slot = KEEP;
            snprintf(m->name, sizeof m->name, "%s", body);
            return RA_OK;
        }
        return rai_fail(RA_ERR_FORMAT, "tensor '%.120s': SwinBackbone's norm of a stage "
                        "relattn does not hand out (stage1 .. stageN; not the stem)", nm);
    }
    const hf_rule *r = encoder_rule(a, body, &fmt, &i, &j);
    if (!r) r = find_rule(top, COUNT(top), body, a), fmt = "", i = j = 0;
    if (!r)
        return rai_fail(RA_ERR_FORMAT, "tensor '%.120s' is not a transformers %s name relattn "
                        "knows (docs/reference.md, section 2)", nm,
                        a == HF_VIT ? "ViT" : a == HF_SWIN ? "Swin" : "Swinv2");
    return set_name(m, r, fmt, i, j);
}

/* ---- q, k and v --------------------------------------------------------- */

static int cmp_third(const void *x, const void *y) {
    const hf_map *a = *(const hf_map *const *)x, *b = *(const hf_map *const *)y;
    const int c = strcmp(a->name, b->name);
    return c ? c : a->slot - b->slot;
}

/* The name of slot `to` beside tensor name nm of slot `from` (query, key,
 * value swapped), for the message about a missing third. */
static void sibling(char *buf, size_t n, const char *nm, int from, int to) {
    static const char *const word[] = {".query.", ".key.", ".value."};
    const char *at = NULL;
    for (const char *p = strstr(nm, word[from]); p; p = strstr(p + 1, word[from])) at = p;
    if (!at) {
        snprintf(buf, n, "%s", nm);
        return;
    }
    snprintf(buf, n, "%.*s%s%s", (int)(at - nm), nm, word[to], at + strlen(word[from]));
}

static void shape_str(char *buf, size_t n, const ra_st_tensor *t) {
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < t->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (k < n) snprintf(buf + k, n - k, ")");
}

/* The group g[0..k) of one qkv tensor, sorted by slot: q, k and v, one
 * dtype, one shape (a matrix for a weight, a vector for a bias). */
static ra_status check_group(hf_map *const *g, int k) {
    static const char *const word[] = {"query", "key", "value"};
    int have[3] = {0, 0, 0};
    for (int i = 0; i < k; i++)
        if (have[g[i]->slot]++)
            return rai_fail(RA_ERR_FORMAT, "transformers tensor '%.120s': a second %s for %s",
                            g[i]->t->name, word[g[i]->slot], g[i]->name);
    for (int s = 0; s < 3; s++)
        if (!have[s]) {
            char miss[256];
            sibling(miss, sizeof miss, g[0]->t->name, g[0]->slot, s);
            return rai_fail(RA_ERR_FORMAT, "transformers tensor '%.120s' is missing (its %s "
                            "is there)", miss, word[g[0]->slot]);
        }
    const ra_st_tensor *q = g[0]->t;
    const size_t nl = strlen(g[0]->name);
    const int want = nl > 5 && !strcmp(g[0]->name + nl - 5, ".bias") ? 1 : 2;
    for (int s = 0; s < 3; s++) {
        const ra_st_tensor *t = g[s]->t;
        int same = t->dtype == q->dtype && t->ndim == q->ndim && t->ndim == want;
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == q->shape[d];
        if (!same) {
            char a[96], b[96];
            shape_str(a, sizeof a, q), shape_str(b, sizeof b, t);
            return rai_fail(RA_ERR_FORMAT, "transformers tensors '%.100s' %s %s and '%.100s' %s "
                            "%s cannot be joined into %s (one dtype, one %s shape)", q->name,
                            rai_st_dtype_name(q->dtype), a, t->name, rai_st_dtype_name(t->dtype),
                            b, g[0]->name, want == 1 ? "1-D" : "2-D");
        }
    }
    return RA_OK;
}

/* The thirds of m sorted into groups (*sorted, *ns of them), each checked. */
static ra_status group_thirds(hf_map *m, int n, hf_map ***sorted, int *ns) {
    int k = 0;
    for (int i = 0; i < n; i++) k += m[i].slot >= 0;
    *ns = k;
    *sorted = NULL;
    if (!k) return RA_OK;
    hf_map **g = malloc((size_t)k * sizeof *g);
    if (!g) return rai_fail(RA_ERR_NOMEM, "out of memory for %d tensors", k);
    k = 0;
    for (int i = 0; i < n; i++)
        if (m[i].slot >= 0) g[k++] = &m[i];
    qsort(g, (size_t)k, sizeof *g, cmp_third);
    ra_status st = RA_OK;
    for (int a = 0, b; a < k && !st; a = b) {
        for (b = a + 1; b < k && !strcmp(g[b]->name, g[a]->name); b++) {}
        st = check_group(g + a, b - a);
    }
    *sorted = g;
    return st;
}

/* Add the qkv tensor of group g (q, k, v): their parts in that order. */
static ra_status add_joined(ra_st_file *f, const ra_st_file *src, hf_map *const *g) {
    const rai_st_part *p[3];
    int np[3], total = 0;
    for (int s = 0; s < 3; s++) {
        np[s] = rai_st_parts(src, g[s]->t, &p[s]);
        if (np[s] < 1)
            return rai_fail(RA_ERR_INTERNAL, "hf: tensor %s has no parts", g[s]->t->name);
        total += np[s];
    }
    rai_st_part *all = malloc((size_t)total * sizeof *all);
    if (!all) return rai_fail(RA_ERR_NOMEM, "out of memory for %s", g[0]->name);
    for (int s = 0, at = 0; s < 3; at += np[s], s++)
        memcpy(all + at, p[s], (size_t)np[s] * sizeof *all);
    const ra_st_tensor *q = g[0]->t;
    int64_t shape[RA_ST_MAX_DIMS];
    for (int d = 0; d < q->ndim; d++) shape[d] = q->shape[d];
    ra_status st = rai_mul_i64(&shape[0], 3, q->shape[0])
                       ? rai_st_add(f, g[0]->name, q->dtype, q->ndim, shape, all, total)
                       : rai_fail(RA_ERR_FORMAT, "tensor %s is too large", q->name);
    free(all);
    return st;
}

/* ---- the file ------------------------------------------------------------ */

static ra_status build(ra_st_file *f, const ra_st_file *src, const hf_map *m, int n,
                       hf_map *const *g, int ng) {
    ra_status st = RA_OK;
    for (int i = 0; i < n && !st; i++)
        if (m[i].slot == KEEP) st = rai_st_add_from(f, src, m[i].t, m[i].name);
    for (int a = 0; a + 3 <= ng && !st; a += 3) st = add_joined(f, src, g + a);
    return st ? st : rai_st_finish(f);
}

ra_status rai_hf_remap(ra_st_file **out, ra_st_file *src, const char **arch) {
    if (!out || !arch || !src) {
        ra_st_close(src);
        if (out) *out = NULL;
        return rai_fail(RA_ERR_ARG, "rai_hf_remap: NULL argument");
    }
    *out = NULL, *arch = NULL;
    char pfx[64];
    int found = 0;
    hf_arch a = HF_SWIN;
    ra_status st = find_prefix(src, pfx, sizeof pfx, &found);
    if (!st && !found) {
        *out = src;
        return RA_OK;
    }
    if (!st) st = arch_of(src, pfx, &a);
    const int n = ra_st_count(src);
    hf_map *m = n ? calloc((size_t)n, sizeof *m) : NULL;
    hf_map **g = NULL;
    int ng = 0;
    if (!st && !m) st = rai_fail(RA_ERR_NOMEM, "out of memory for %d tensors", n);
    for (int i = 0; i < n && !st; i++) st = map_one(a, pfx, ra_st_at(src, i), &m[i]);
    if (!st) st = group_thirds(m, n, &g, &ng);
    ra_st_file *f = NULL;
    if (st) ra_st_close(src);
    else if (!(st = rai_st_derive(&f, src)))   /* f keeps src, or src is closed */
        st = build(f, src, m, n, g, ng);
    free(g);
    free(m);
    if (st) {
        ra_st_close(f);
        return st;
    }
    *out = f;
    *arch = arch_names[a];
    return RA_OK;
}
