/* kernels.h - the attention kernel interface (private).
 *
 * The framework (src/attention/core.c) validates, gathers the bias once per call
 * and splits the work into tasks, one per (window b, head h); a kernel does
 * one task: logits, softmax, probabilities times values, for all N1 query
 * rows of that (b, h). Kernels never allocate: each task gets a private
 * workspace of work_floats() floats. */
#ifndef RA_KERNELS_H
#define RA_KERNELS_H

#include "relattn.h"

#include <stddef.h>

typedef struct rai_attn_task {
    int n1, n2, hd;
    float scale;
    const float *q; int ldq;     /* (N1, hd) rows of q for this (b, h)     */
    const float *k; int ldk;     /* (N2, hd)                                */
    const float *v; int ldv;     /* (N2, hd)                                */
    float *out; int ldo;         /* (N1, hd)                                */
    float *attn;                 /* (N1, N2) probabilities, or NULL         */
    const float *bias;           /* (N1, N2) bias of head h, or NULL        */
    const float *mask;           /* (N1, N2) mask of window b % nW, or NULL */
    const int32_t *rq, *rk;      /* (N1), (N2) region labels of window b % nW,
                                    or NULL: -100 where rq[i] != rk[j] */
    const float *rel_k;          /* (R, hd) Shaw key table, or NULL         */
    const float *rel_v;          /* (R, hd) Shaw value table, or NULL       */
    const int32_t *rel;          /* (N1, N2) in 0..R-1 when a table is used: */
    int64_t rel_ld;              /* row i at rel + i * rel_ld (may be < 0) */
    int r;
    const int32_t *rel2;         /* (N1, N2) a second key index into rel_k
                                    (rows as rel's), or NULL */
    float *work;                 /* work_floats() floats, 64-byte aligned   */
    const float *next_k, *next_v;/* the next task's k and v (same strides)
                                    to prefetch while this one runs, or NULL
                                    (a hint: kernels may ignore it); the
                                    backward's also q and dout: */
    const float *next_q, *next_do;
    /* backward only: gradients, all accumulated (+=) */
    const float *dout; int lddo; /* (N1, hd) gradient of out               */
    float *dq; int lddq;         /* (N1, hd)                                */
    float *dk; int lddk;         /* (N2, hd)                                */
    float *dv; int lddv;         /* (N2, hd)                                */
    float *dbias;                /* (N1, N2) this thread's, for head h, or NULL */
    float *drel_k, *drel_v;      /* (R, hd) this thread's, or NULL          */
    int set;                     /* dq, dk, dv get 0 + the sums instead of
                                    += (only for a kernel with sets_grads) */
    int bf16;                    /* forward of the bf16 core: q, k, v and p
                                    rounded to bfloat16 as they enter the
                                    products. The ref and avx512_bf16
                                    kernels round q, k, v themselves; the
                                    float32 kernels get them rounded by the
                                    framework and round p (core.c) */
} rai_attn_task;

typedef struct rai_attn_kernel {
    const char *name;
    void (*forward)(const rai_attn_task *t);
    size_t (*work_floats)(int n1, int n2, int hd, int r);
    /* NULL: the framework uses the reference kernel's backward */
    void (*backward)(const rai_attn_task *t);
    size_t (*backward_work_floats)(int n1, int n2, int hd, int r);
    /* 1: the backward honours task.set (else the framework zeros dq, dk,
     * dv before it adds) */
    int sets_grads;
} rai_attn_kernel;

extern const rai_attn_kernel rai_kernel_ref;
#ifdef RA_HAVE_X86_KERNELS
extern const rai_attn_kernel rai_kernel_avx2;
extern const rai_attn_kernel rai_kernel_avx512;
/* The bf16 core on VDPBF16PS (attn_bf16_avx512.c): forward only, no Shaw
 * tables; run only where rai_kernel_bf16 returns it. */
extern const rai_attn_kernel rai_kernel_avx512_bf16;
#endif

/* Row i of the task's Shaw index (N2 entries), and of its second key index. */
static inline const int32_t *rai_rel_row(const rai_attn_task *t, int i) {
    return t->rel + (ptrdiff_t)i * t->rel_ld;
}
static inline const int32_t *rai_rel2_row(const rai_attn_task *t, int i) {
    return t->rel2 + (ptrdiff_t)i * t->rel_ld;
}

/* The shifted-window mask's value between two regions (ra_window_mask). */
#define RAI_REGION_OFF (-100.0f)

/* The kernel chosen now (never NULL). */
const rai_attn_kernel *rai_kernel_active(void);
/* The kernel of the bf16 core's forward for the kernel set chosen now: one
 * that rounds q, k and v itself (ref: the oracle; avx512 where the CPU has
 * AVX512_BF16: avx512_bf16), or NULL: the set's float32 kernel on values
 * the framework rounds. */
const rai_attn_kernel *rai_kernel_bf16(void);

/* Softmax of one row in place with the row maximum subtracted; a row whose
 * logits are all -inf becomes all zeros (not NaN). Shared by kernels whose
 * exp is scalar. */
void rai_softmax_row(float *s, int n);

#endif
