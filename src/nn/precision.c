/* precision.c - reduced precision as rounding points (nn/precision.h). */
#include "nn/precision.h"

#include "base/arena.h"
#include "kernels/gemm_kernels.h"
#include "kernels/nn_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float rai_int8_row(int8_t *q, const float *x, int64_t n) {
    int32_t sum;
    float t;
    rai_i8_quantize_weights(q, &sum, &t, x, (int)n);
    return isnan(t) ? 0.0f : t;
}

/* The row as int8 holds it: v x t, the formats of kernels/gemm_i8.c (x
 * itself where the scale is 0 or NaN: zeros, or not finite). */
static void int8_row(float *x, int64_t n) {
    const float t = rai_i8_weight_scale(x, n);
    for (int64_t i = 0; t > 0.0f && i < n; i++) x[i] = (float)rai_i8_weight(x[i], t) * t;
}

const float *rai_precision_input(const float *x, int64_t m, int k, ra_precision p, int which) {
    if (p != RA_PRECISION_BF16 || m <= 0 || k <= 0) return x;
    size_t bytes;
    if (!rai_mul_size(&bytes, (size_t)m * (size_t)k, sizeof(float))) return rai_precision_fail(), NULL;
    float *out = rai_thread_buffer(which ? RAI_BUFFER_PRECISION_W : RAI_BUFFER_PRECISION, bytes);
    if (!out) return rai_precision_fail(), NULL;
    for (int64_t i = 0; i < m * k; i++) out[i] = rai_round_bf16(x[i]);
    return out;
}

void rai_precision_weights(float *w, int64_t n, int64_t k, ra_precision p) {
    if (p == RA_PRECISION_BF16)
        for (int64_t i = 0; i < n * k; i++) w[i] = rai_round_bf16(w[i]);
    else if (p == RA_PRECISION_INT8)
        for (int64_t r = 0; r < n; r++) int8_row(w + r * k, k);
}

/* One weight, packed for the table's precision, under the address of its
 * float32 copy. */
typedef struct {
    const float *key;
    rai_i8_weights i8;
    rai_bf16_weights bf16;
    float *rounded;   /* bf16's reference path: the weights rounded (n x k) */
    int n, k;
} packed_entry;

struct rai_packed {
    int count;
    packed_entry *e;   /* sorted by key */
};

static _Thread_local const rai_packed *thread_packed;

const rai_packed *rai_packed_set(const rai_packed *t) {
    const rai_packed *was = thread_packed;
    thread_packed = t;
    return was;
}

const rai_packed *rai_packed_get(void) { return thread_packed; }

static int cmp_key(const void *a, const void *b) {
    const uintptr_t x = (uintptr_t)((const packed_entry *)a)->key;
    const uintptr_t y = (uintptr_t)((const packed_entry *)b)->key;
    return (x > y) - (x < y);
}

void rai_packed_free(rai_packed *t) {
    if (!t) return;
    for (int i = 0; i < t->count; i++) {
        rai_i8_weights_free(&t->e[i].i8), rai_bf16_weights_free(&t->e[i].bf16);
        rai_free(t->e[i].rounded);
    }
    free(t->e), free(t);
}

rai_packed *rai_packed_make(const float *const *w, const int64_t *n, const int64_t *k, int count,
                            ra_precision p) {
    rai_packed *t = calloc(1, sizeof *t);
    if (!t || count < 0 || (p != RA_PRECISION_INT8 && p != RA_PRECISION_BF16)) return free(t), NULL;
    if (!(t->e = calloc((size_t)count + 1, sizeof *t->e))) return rai_packed_free(t), NULL;
    /* bf16: pairs for its product where the kernel set has it, else the
     * rounded values its reference path multiplies */
    const int pairs = p == RA_PRECISION_BF16 && rai_bf16_micro() >= 0;
    for (; t->count < count; t->count++) {
        packed_entry *e = &t->e[t->count];
        e->key = w[t->count];
        const int64_t ni = n[t->count], ki = k[t->count];
        if (ni < 1 || ni > INT32_MAX || ki < 1 || ki > rai_precision_max_inputs(p))
            return rai_packed_free(t), NULL;
        e->n = (int)ni, e->k = (int)ki;
        int fail;
        if (p == RA_PRECISION_INT8)
            fail = rai_i8_weights_pack(&e->i8, e->key, e->n, e->k,
                                       rai_nn_kernel_active()->gemm_i8_micro, ra_threads_get());
        else if (pairs)
            fail = rai_bf16_weights_pack(&e->bf16, e->key, e->n, e->k, rai_bf16_micro(),
                                         ra_threads_get());
        else if ((fail = !(e->rounded = rai_alloc((size_t)ni * (size_t)ki, sizeof(float)))) == 0)
            for (int64_t i = 0; i < ni * ki; i++) e->rounded[i] = rai_round_bf16(e->key[i]);
        if (fail) return rai_packed_free(t), NULL;
    }
    qsort(t->e, (size_t)count, sizeof *t->e, cmp_key);
    return t;
}

/* The calling thread's entry of w, or NULL. */
static const packed_entry *packed_find(const float *w) {
    const rai_packed *t = thread_packed;
    int lo = 0, hi = t ? t->count : 0;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if ((uintptr_t)t->e[mid].key < (uintptr_t)w) lo = mid + 1;
        else hi = mid;
    }
    return t && lo < t->count && t->e[lo].key == w ? &t->e[lo] : NULL;
}

const rai_i8_weights *rai_packed_find(const float *w, int n, int k) {
    const packed_entry *e = packed_find(w);
    return e && e->i8.bp && e->i8.n == n && e->i8.k == k ? &e->i8 : NULL;
}

const rai_bf16_weights *rai_packed_find_bf16(const float *w, int n, int k) {
    const packed_entry *e = packed_find(w);
    return e && e->bf16.bp && e->bf16.n == n && e->bf16.k == k ? &e->bf16 : NULL;
}

const float *rai_packed_find_rounded(const float *w, int n, int k) {
    const packed_entry *e = packed_find(w);
    return e && e->rounded && e->n == n && e->k == k ? e->rounded : NULL;
}

int64_t rai_precision_max_inputs(ra_precision p) {
    return p == RA_PRECISION_INT8 ? RA_GEMM_I8_KMAX : INT64_MAX;
}

const char *ra_precision_name(ra_precision p) {
    return p == RA_PRECISION_FP32 ? "fp32" : p == RA_PRECISION_BF16 ? "bf16"
         : p == RA_PRECISION_INT8 ? "int8" : NULL;
}

int ra_precision_native(ra_precision p) {
    switch (p) {
    case RA_PRECISION_FP32: return 1;
    case RA_PRECISION_BF16: return rai_bf16_micro() >= 0;
    case RA_PRECISION_INT8:
        return rai_nn_kernel_active()->gemm_i8_micro == RA_GEMM_AVX512_VNNI;
    }
    return 0;
}

int ra_precision_parse(const char *s) {
    for (int p = RA_PRECISION_FP32; s && p <= RA_PRECISION_INT8; p++)
        if (!strcmp(s, ra_precision_name((ra_precision)p))) return p;
    return -1;
}
