/* precision.c - reduced precision as rounding points (nn/precision.h). */
#include "nn/precision.h"

#include "base/arena.h"
#include "kernels/gemm_kernels.h"
#include "kernels/nn_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float rai_round_bf16(float v) {
    const uint32_t u = (uint32_t)rai_bf16_bits(v) << 16;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* A row's symmetric int8 scale, max|x| / 127; 0 for a row of zeros or
 * with an infinity or NaN (kept as it is, to propagate). */
static float row_scale(const float *x, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float s = amax / 127.0f;
    return s > 0.0f && isfinite(s) ? s : 0.0f;
}

/* x / s to the nearest integer, ties to even, in [-127, 127]. |x / s| is
 * at most 127 (s is a row's max / 127), where adding and taking away
 * 1.5 x 2^23 rounds as nearbyintf does (to nearest even, the sum's ulp
 * being 1) without its call; the result has no -0. */
static inline float quantum(float x, float s) {
    const float big = 0x1.8p23f;
    const float v = (x / s + big) - big;
    return v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
}

float rai_int8_row(int8_t *q, const float *x, int64_t n) {
    const float s = row_scale(x, n);
    for (int64_t i = 0; s > 0.0f && i < n; i++) q[i] = (int8_t)quantum(x[i], s);
    return s;
}

/* The row as int8 sees it: q x s (x itself where the scale is 0). */
static void int8_row(float *out, const float *x, int64_t n) {
    const float s = row_scale(x, n);
    if (s == 0.0f) {
        if (out != x) memcpy(out, x, (size_t)n * sizeof *out);
        return;
    }
    for (int64_t i = 0; i < n; i++) out[i] = quantum(x[i], s) * s;
}

const float *rai_precision_input(const float *x, int64_t m, int k, ra_precision p) {
    if (p != RA_PRECISION_BF16 || m <= 0 || k <= 0) return x;
    size_t bytes;
    if (!rai_mul_size(&bytes, (size_t)m * (size_t)k, sizeof(float))) return rai_precision_fail(), NULL;
    float *out = rai_thread_buffer(RAI_BUFFER_PRECISION, bytes);
    if (!out) return rai_precision_fail(), NULL;
    for (int64_t i = 0; i < m * k; i++) out[i] = rai_round_bf16(x[i]);
    return out;
}

void rai_precision_weights(float *w, int64_t n, int64_t k, ra_precision p) {
    if (p == RA_PRECISION_BF16)
        for (int64_t i = 0; i < n * k; i++) w[i] = rai_round_bf16(w[i]);
    else if (p == RA_PRECISION_INT8)
        for (int64_t r = 0; r < n; r++) int8_row(w + r * k, w + r * k, k);
}

struct rai_packed {
    int count;
    const float **key;           /* sorted addresses */
    rai_i8_weights *packed;      /* in the order of key */
};

static _Thread_local const rai_packed *thread_packed;

const rai_packed *rai_packed_set(const rai_packed *t) {
    const rai_packed *was = thread_packed;
    thread_packed = t;
    return was;
}

static int cmp_key(const void *a, const void *b) {
    const uintptr_t x = (uintptr_t) * (const float *const *)a, y = (uintptr_t) * (const float *const *)b;
    return (x > y) - (x < y);
}

void rai_packed_free(rai_packed *t) {
    if (!t) return;
    for (int i = 0; i < t->count; i++) rai_i8_weights_free(&t->packed[i]);
    free(t->key), free(t->packed), free(t);
}

rai_packed *rai_packed_make(const float *const *w, const int64_t *n, const int64_t *k, int count) {
    rai_packed *t = calloc(1, sizeof *t);
    if (!t || count < 0) return free(t), NULL;
    t->key = malloc(((size_t)count + 1) * sizeof *t->key);
    t->packed = calloc((size_t)count + 1, sizeof *t->packed);
    if (!t->key || !t->packed) return rai_packed_free(t), NULL;
    for (int i = 0; i < count; i++) t->key[i] = w[i];
    qsort(t->key, (size_t)count, sizeof *t->key, cmp_key);
    for (int i = 0; i < count; i++) {
        int j = 0;   /* the weight whose address is key[i] */
        while (w[j] != t->key[i]) j++;
        if (n[j] < 1 || n[j] > INT32_MAX || k[j] > RA_GEMM_I8_KMAX ||
            rai_i8_weights_pack(&t->packed[i], w[j], (int)n[j], (int)k[j],
                                rai_nn_kernel_active()->gemm_micro, ra_threads_get()) != 0)
            return t->count = i, rai_packed_free(t), NULL;
    }
    t->count = count;
    return t;
}

const rai_i8_weights *rai_packed_find(const float *w, int n, int k) {
    const rai_packed *t = thread_packed;
    int lo = 0, hi = t ? t->count : 0;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if ((uintptr_t)t->key[mid] < (uintptr_t)w) lo = mid + 1;
        else hi = mid;
    }
    if (lo >= (t ? t->count : 0) || t->key[lo] != w) return NULL;
    const rai_i8_weights *p = &t->packed[lo];
    return p->n == n && p->k == k ? p : NULL;
}

int64_t rai_precision_max_inputs(ra_precision p) {
    return p == RA_PRECISION_INT8 ? RA_GEMM_I8_KMAX : INT64_MAX;
}

const char *ra_precision_name(ra_precision p) {
    return p == RA_PRECISION_FP32 ? "fp32" : p == RA_PRECISION_BF16 ? "bf16"
         : p == RA_PRECISION_INT8 ? "int8" : NULL;
}

int ra_precision_parse(const char *s) {
    for (int p = RA_PRECISION_FP32; s && p <= RA_PRECISION_INT8; p++)
        if (!strcmp(s, ra_precision_name((ra_precision)p))) return p;
    return -1;
}
