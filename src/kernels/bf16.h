/* bf16.h - the arithmetic of VDPBF16PS (AVX512_BF16) in scalar C, for the
 * oracles of the bf16 products (gemm_bf16.c's micro-kernel, ref.c's bf16
 * attention core): each pair (2q, 2q + 1) of a dot product's chain is
 * added as
 *     acc = acc + a[2q+1] b[2q+1];  acc = acc + a[2q] b[2q]
 * each step one rounding (the product of two bfloat16 values is exact in
 * float32), subnormal inputs, sums and results taken as zero (the
 * instruction's DAZ and FTZ). */
#ifndef RA_KERNELS_BF16_H
#define RA_KERNELS_BF16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* x as VDPBF16PS reads it: a subnormal is 0 (its sign kept). */
static inline float rai_bf16_daz(float x) {
    return fabsf(x) < 0x1p-126f ? copysignf(0.0f, x) : x;
}

/* The float32 value of bfloat16 bits. */
static inline float rai_bf16_value(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One step of the chain: acc + a b rounded once, subnormals flushed. */
static inline float rai_bf16_dot_step(float acc, uint16_t a, uint16_t b) {
    return rai_bf16_daz(
        fmaf(rai_bf16_daz(rai_bf16_value(a)), rai_bf16_daz(rai_bf16_value(b)), rai_bf16_daz(acc)));
}

#endif
