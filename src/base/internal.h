/* internal.h - shared by the library's sources; not installed. */
#ifndef RA_INTERNAL_H
#define RA_INTERNAL_H

#include "relattn.h"

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#if defined(__GNUC__)
#define RA_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RA_PRINTF(a, b)
#endif

/* Record the reason for a failure (thread-local) and return s, so that
 * error paths read:  return rai_fail(RA_ERR_ARG, "window %d < 1", w); */
ra_status rai_fail(ra_status s, const char *fmt, ...) RA_PRINTF(2, 3);

/* Work split into parts of samples (src/base/threads.c): part(ctx, s) for
 * s = 0 .. n-1 (1 <= n <= RA_MAX_PARTS), one thread each, the kernels
 * inside on one thread; the first failing part's status is returned, its
 * reason raised again on the calling thread. */
#define RA_MAX_PARTS 64
ra_status rai_run_parts(int n, ra_status (*part)(void *ctx, int s), void *ctx);
/* The same for n tasks (1 <= n <= RA_MAX_TASKS) taken in turn by up to
 * threads threads (dynamically: a thread takes the next task when it is
 * done with one). */
#define RA_MAX_TASKS (1 << 20)
ra_status rai_run_tasks(int n, int threads, ra_status (*task)(void *ctx, int s), void *ctx);

/* splitmix64 of a and b: the seed of a stream of random numbers named by
 * two numbers, (seed, epoch), (seed, step) (src/base/rng.c). */
uint64_t rai_mix64(uint64_t a, uint64_t b);

/* RA_ERR_ARG (fn names the caller) unless mx's alphas are 0 or in
 * [1e-3, 1e4], not both 0, and its probabilities in [0, 1]
 * (src/train/mixup.c: ra_mixup_apply's rule, which the trainer checks its
 * configuration by before a run). */
ra_status rai_mixup_check(const ra_mixup *mx, const char *fn);

/* The precision of the calling thread's Linear products (src/nn/precision.c
 * rounds by it; ra_model_forward sets it, rai_run_parts hands it to its
 * threads); set returns the one before. A rounding without memory marks
 * the thread (rai_precision_fail); rai_precision_failed says so once. */
ra_precision rai_precision_get(void);
ra_precision rai_precision_set(ra_precision p);
void rai_precision_fail(void);
int rai_precision_failed(void);
/* The precision of the calling thread's attention cores
 * (ra_attn_desc.precision): bf16 in the inference of a model in bf16
 * (ra_model_forward sets it, rai_run_parts hands it on), fp32 otherwise:
 * a training step's core stays float32, as its backward recomputes it. */
ra_precision rai_core_precision_get(void);
ra_precision rai_core_precision_set(ra_precision p);

/* ra_clip_grad_norm in two halves, for gradients spread over processes:
 * the sum of the squared per-tensor norms (each rounded to a float, as
 * PyTorch), and the scaling of the gradients by min(1, max_norm / (total +
 * 1e-6)) for the total norm of all of them. */
double rai_grad_sumsq(float *const *grads, const int64_t *sizes, int count);
void rai_grad_clip(float *const *grads, const int64_t *sizes, int count, float total,
                   float max_norm);
/* avg += (1 - decay) (w - avg), n floats, (1 - decay) rounded to a float
 * once: an exponential moving average of weights (the trainer's). */
void rai_ema_update(float *avg, const float *w, int64_t n, double decay);


/* Checked arithmetic, for every number that comes from a file (a shape,
 * an offset, a count) on its way to a size: each returns 1 and sets *r, or
 * returns 0 with *r untouched when the result does not fit. Used by the
 * readers (safetensors.c, torch.c, pickle.c), the inference from shapes
 * (infer.c) and the builders; nothing there multiplies such numbers
 * unchecked. */
static inline int rai_mul_size(size_t *r, size_t a, size_t b) {
    size_t v;
    if (__builtin_mul_overflow(a, b, &v)) return 0;
    *r = v;
    return 1;
}
static inline int rai_mul_i64(int64_t *r, int64_t a, int64_t b) {
    int64_t v;
    if (__builtin_mul_overflow(a, b, &v)) return 0;
    *r = v;
    return 1;
}
static inline int rai_add_i64(int64_t *r, int64_t a, int64_t b) {
    int64_t v;
    if (__builtin_add_overflow(a, b, &v)) return 0;
    *r = v;
    return 1;
}
static inline int rai_sq_i64(int64_t *r, int64_t a) { return rai_mul_i64(r, a, a); }
/* floor(sqrt(n)) for n >= 0 (0 for n < 0), exact to the last integer:
 * digit by digit in base 4, no floating point (a double rounds values near
 * 2^63). s*s <= n always fits. */
static inline int rai_isqrt_i64(int64_t *r, int64_t n) {
    if (n < 0) return 0;
    uint64_t x = (uint64_t)n, s = 0, bit = (uint64_t)1 << 62;
    while (bit > x) bit >>= 2;
    for (; bit; bit >>= 2) {
        if (x >= s + bit) x -= s + bit, s = (s >> 1) + bit;
        else s >>= 1;
    }
    *r = (int64_t)s;
    return 1;
}

/* Whether s ends with suffix (a tensor name's last part). */
static inline int rai_ends_with(const char *s, const char *suffix) {
    const size_t a = strlen(s), b = strlen(suffix);
    return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

/* Multiply-add counts (the flops() methods): -1 stands for a count too
 * large for int64 and stays -1 through every product and sum, so that a
 * large size reads as unknown instead of wrapping. Arguments are >= 0 or -1. */
static inline int64_t rai_cmul(int64_t a, int64_t b) {
    int64_t r;
    return a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) ? -1 : r;
}
static inline int64_t rai_cmul3(int64_t a, int64_t b, int64_t c) {
    return rai_cmul(rai_cmul(a, b), c);
}
static inline int64_t rai_cadd(int64_t a, int64_t b) {
    int64_t r;
    return a < 0 || b < 0 || __builtin_add_overflow(a, b, &r) ? -1 : r;
}

/* x as bfloat16 bits: rounded to nearest, ties to even (past the largest
 * finite value: infinity); a NaN stays a NaN, quiet. The one rounding of
 * the writer (F32 as BF16) and of the bf16 precision. */
static inline uint16_t rai_bf16_bits(float x) {
    uint32_t u;
    __builtin_memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(u >> 16 | 0x40);
    return (uint16_t)((u + 0x7FFFu + (u >> 16 & 1u)) >> 16);
}

/* x rounded to bfloat16 (rai_bf16_bits), as a float. */
static inline float rai_round_bf16(float x) {
    const uint32_t u = (uint32_t)rai_bf16_bits(x) << 16;
    __builtin_memcpy(&x, &u, sizeof x);
    return x;
}

/* Allocation of n elements of size sz, 64-byte aligned, NULL on overflow or
 * failure. Free with rai_free. */
void *rai_alloc(size_t n, size_t sz);
void *rai_calloc(size_t n, size_t sz);
void rai_free(void *p);

/* ra_attention_backward with set: dq, dk, dv are overwritten, not
 * accumulated (each task zeros its slices first; src/attention/core.c). */
ra_status rai_attention_backward_set(float *dq, int lddq, float *dk, int lddk, float *dv,
                                     int lddv, float *dtable, float *drel_k, float *drel_v,
                                     const float *dout, int lddo, const float *q, int ldq,
                                     const float *k, int ldk, const float *v, int ldv,
                                     const ra_attn_desc *d, void *work, size_t work_size,
                                     int set);

/* p[0 .. n) = 0, the threads of ra_threads_get() sharing a large buffer
 * (src/nn/nn.c): a gradient buffer of tens of MB zeroed by one thread left
 * the other idle. */
void rai_zero(float *p, int64_t n);

/* A file mapped whole for reading (src/base/fileio.c), and kept open for
 * pread: p is NULL for an empty file. */
typedef struct rai_mapping {
    unsigned char *p;
    size_t len;
    int fd;
} rai_mapping;
/* Open path (a FIFO never blocks the open) and map it: RA_ERR_IO naming
 * path when it cannot be opened, is not a regular file, is too large or
 * cannot be mapped. Untrusted files are read this way: a regular file only,
 * whatever it then holds. */
ra_status rai_map_file(const char *path, rai_mapping *out);
void rai_unmap_file(rai_mapping *m);

/* The files this process has read (src/base/fileio.c): every reader of
 * the library notes the regular file it opened, by device and inode
 * (through links, hard links and any spelling of the path alike), with
 * the path it was opened by for messages. rai_write_file_atomic, and so
 * every writer, refuses to replace one of them (ra_output_check). fd is
 * an open descriptor of the file; a non-regular file is not noted. */
void rai_note_read(int fd, const char *path);

/* ra_image_resize_u8 of the w x h region of an image whose rows are stride
 * bytes apart (in points at the region's first pixel): a crop resized
 * without copying it (src/io/transform.c). */
ra_status rai_image_resize_region(uint8_t *out, int ow, int oh, const uint8_t *in, size_t stride,
                                  int w, int h, int channels, ra_interp interp);
/* The resize and crop of ra_transform_apply, in bytes: out (oh, ow, 3) for
 * ra_transform_size's (ow, oh). */
ra_status rai_transform_bytes(uint8_t *out, const ra_transform *t, const uint8_t *rgb, int w,
                              int h);
/* ToTensor (rescale 0: byte / 255 in float32; else (float)(byte * rescale))
 * then, with normalize, (v - mean[c]) / std[c] in float32, as a table of
 * the 256 values of each channel; and planes (3, n) from hwc (n, 3) bytes
 * through it. The transforms and the loader's training samples share them. */
void rai_byte_table(float lut[3][256], double rescale, int normalize, const float mean[3],
                    const float std[3]);
void rai_byte_planes(float *out, const uint8_t *hwc, size_t n, const float lut[3][256]);
/* A grey model's one plane (n) from hwc (n, 3) bytes: PIL's "L" luma of the
 * three normalised planes, 0.299 R + 0.587 G + 0.114 B in float32. */
void rai_byte_luma(float *out, const uint8_t *hwc, size_t n, const float lut[3][256]);
/* timm's fill colour of a mean: round(255 * mean[c]), half to even, as
 * bytes (RandAugment's geometric ops, CenterCropOrPad's border). */
void rai_mean_bytes(uint8_t out[3], const float mean[3]);

/* Create path atomically from nparts byte ranges (src/base/fileio.c): a
 * temporary file in the same directory, fsync, rename; on failure
 * (RA_ERR_WRITE, RA_ERR_NOMEM) nothing exists at path. */
ra_status rai_write_file_atomic(const char *path, const void *const *parts, const size_t *sizes,
                                int nparts);

/* A malloc'ed copy of s (strdup is not C11), NULL if out of memory. */
char *rai_strdup(const char *s);

#endif
