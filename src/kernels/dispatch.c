/* dispatch.c - choose the kernel set once, from the CPU: the attention
 * kernel (kernels.h) and the layers' kernels (nn_kernels.h) together.
 *
 * The best set the CPU supports is chosen at first use; the environment
 * variable RELATTN_KERNEL (ref, avx2, avx512) or ra_kernel_select() can
 * force another, which is how the tests run every variant. */
#include "kernels.h"
#include "nn_kernels.h"
#include "base/internal.h"

#include <stdlib.h>
#include <string.h>

static const rai_attn_kernel *table[RA_KERNEL_COUNT] = {
    [RA_KERNEL_REF] = &rai_kernel_ref,
#ifdef RA_HAVE_X86_KERNELS
    [RA_KERNEL_AVX2] = &rai_kernel_avx2,
    [RA_KERNEL_AVX512] = &rai_kernel_avx512,
#endif
};

#ifdef RA_HAVE_X86_KERNELS
/* The layers on AVX-512F: the fused products and LayerNorm of
 * gemm_avx512.c; GELU element-wise as the products' epilogue computes it
 * on 16 lanes, GELU' on the 8 lanes of nn_avx2.c (the same bits); the portable
 * product, where a fused one declines (no memory), on AVX2; precision
 * int8's product on VPDPBUSD where the CPU has AVX512_VNNI, else on AVX2's
 * micro-kernel (the same bits: the set is the same either way). */
#define AVX512_LAYERS                                                                     \
    .name = "avx512", .gelu = rai_gemm_gelu_avx512, .gelu_backward = rai_gemm_gelu_backward_avx512, \
    .gelu_deriv = rai_nn_gelu_deriv_avx2, .layernorm_row = rai_nn_layernorm_row_avx512,     \
    .layernorm_rows4 = rai_nn_layernorm_rows4_avx512,                                       \
    .layernorm_row_f32 = rai_nn_layernorm_row_f32_avx512,                                   \
    .layernorm_backward_rows = rai_nn_layernorm_backward_rows_avx512,                       \
    .adamw = rai_nn_adamw_avx512,                                                           \
    .gemm_micro = RA_GEMM_AVX2, .gemm = rai_gemm_avx512_ext, .gemm_tn = rai_gemm_tn_avx512,  \
    .gelu_keep = rai_gemm_gelu_keep_avx512
const rai_nn_kernel rai_nn_kernel_avx512 = {AVX512_LAYERS, .gemm_i8_micro = RA_GEMM_AVX2};
static const rai_nn_kernel nn_avx512_vnni = {AVX512_LAYERS,
                                             .gemm_i8_micro = RA_GEMM_AVX512_VNNI};
#undef AVX512_LAYERS
#endif

/* The layers' entry of each set, NULL where the attention table has none
 * (avx512: without VNNI; rai_nn_kernel_active picks the one with). */
static const rai_nn_kernel *nn_table[RA_KERNEL_COUNT] = {
    [RA_KERNEL_REF] = &rai_nn_kernel_ref,
#ifdef RA_HAVE_X86_KERNELS
    [RA_KERNEL_AVX2] = &rai_nn_kernel_avx2,
    [RA_KERNEL_AVX512] = &rai_nn_kernel_avx512,
#endif
};

static const char *names[RA_KERNEL_COUNT] = {"ref", "avx2", "avx512"};

/* -1 until chosen; a plain int read and written under a once-style guard
 * is enough: every thread computes the same answer. */
static _Atomic int current = -1;

int ra_kernel_supported(ra_kernel_id id) {
    if ((int)id < 0 || id >= RA_KERNEL_COUNT || !table[id]) return 0;
#if defined(RA_HAVE_X86_KERNELS) && defined(__GNUC__)
    if (id == RA_KERNEL_AVX2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (id == RA_KERNEL_AVX512)   /* avx512.c is built with -mavx512f only */
        return __builtin_cpu_supports("avx512f") != 0;   /* the bit, not 1 */
#endif
    return id == RA_KERNEL_REF;
}

const char *ra_kernel_name(ra_kernel_id id) {
    return ((int)id >= 0 && id < RA_KERNEL_COUNT) ? names[id] : "unknown";
}

ra_status ra_kernel_select(ra_kernel_id id) {
    if (!ra_kernel_supported(id))
        return rai_fail(RA_ERR_ARG, "kernel '%s' is not supported on this CPU or build",
                        ra_kernel_name(id));
    current = (int)id;
    return RA_OK;
}

static int choose(void) {
    const char *env = getenv("RELATTN_KERNEL");
    if (env && *env)
        for (int i = 0; i < RA_KERNEL_COUNT; i++)
            if (strcmp(env, names[i]) == 0 && ra_kernel_supported((ra_kernel_id)i)) return i;
    for (int i = RA_KERNEL_COUNT - 1; i > 0; i--)
        if (ra_kernel_supported((ra_kernel_id)i)) return i;
    return RA_KERNEL_REF;
}

ra_kernel_id ra_kernel_current(void) {
    int c = current;
    if (c < 0) current = c = choose();
    return (ra_kernel_id)c;
}

const rai_attn_kernel *rai_kernel_active(void) { return table[ra_kernel_current()]; }

const rai_attn_kernel *rai_kernel_bf16(void) {
    if (ra_kernel_current() == RA_KERNEL_REF) return &rai_kernel_ref;
#ifdef RA_HAVE_X86_KERNELS
    if (rai_bf16_micro() == RA_GEMM_BF16_AVX512) return &rai_kernel_avx512_bf16;
#endif
    return NULL;
}

static _Atomic int vnni_hidden;

int rai_cpu_hide_vnni(int hide) {
    const int was = vnni_hidden;
    vnni_hidden = hide != 0;
    return was;
}

int rai_cpu_has_vnni(void) {
#if defined(RA_HAVE_X86_KERNELS) && defined(__GNUC__)
    return !vnni_hidden && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

const rai_nn_kernel *rai_nn_kernel_active(void) {
    const ra_kernel_id id = ra_kernel_current();
#ifdef RA_HAVE_X86_KERNELS
    if (id == RA_KERNEL_AVX512 && rai_cpu_has_vnni()) return &nn_avx512_vnni;
#endif
    return nn_table[id];
}

int rai_bf16_micro(void) {
#ifdef RA_HAVE_X86_KERNELS
    static _Atomic int cpu = -1;   /* the CPU's answer, asked once */
    int c = cpu;
    if (c < 0) cpu = c = rai_gemm_bf16_avx512_supported();
    if (c && ra_kernel_current() == RA_KERNEL_AVX512) return RA_GEMM_BF16_AVX512;
#endif
    return -1;
}
