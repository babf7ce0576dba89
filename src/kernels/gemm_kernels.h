/* gemm_kernels.h - the matrix products of the Linear layers (private):
 * the portable framework of gemm.c with its micro-kernels, and the fused
 * products of gemm_avx512.c; the layers' kernel table (nn_kernels.h)
 * chooses. */
#ifndef RA_GEMM_KERNELS_H
#define RA_GEMM_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- the portable product (gemm.c) ---------------------------------------- */

#define RA_GEMM_MR 6    /* rows of the micro-kernel's tile */
#define RA_GEMM_NR 16   /* columns */
/* The micro-kernel: of rai_gemm, REF or AVX2; of rai_gemm_i8, any (it
 * runs AVX512_VNNI's only on a CPU that has it). */
enum { RA_GEMM_REF, RA_GEMM_AVX2, RA_GEMM_AVX512_VNNI };

/* c (M, N; row stride ldc) = bias + a . b, or += a . b if accumulate, where
 * element (i, l) of a (M, K) is a[i*ars + l*acs] and (l, j) of b (K, N) is
 * b[l*brs + j*bcs] (so any transpose is a choice of strides); bias (N) may
 * be NULL. Each element is one ordered chain over K (in fixed blocks): the
 * same bits for any M, partition or nthreads (OpenMP threads). isa picks
 * the micro-kernel. Returns 0, or -1 (c untouched) without memory. */
int rai_gemm(float *c, int64_t ldc, const float *a, int64_t ars, int64_t acs, const float *b,
             int64_t brs, int64_t bcs, int64_t m, int n, int k, const float *bias,
             int accumulate, int isa, int nthreads);
/* One MR x NR tile of c (row stride ldc): c = bias + s (bias NULL: c = s),
 * or c += s if accumulate, for s = ap (kc x MR) . bp (kc x NR), the panels
 * packed by gemm.c, each element of s one chain of multiply-adds from 0:
 * the scalar oracle, and its AVX2 + FMA twin. */
void rai_gemm_micro_ref(int kc, const float *ap, const float *bp, float *c, int64_t ldc,
                        const float *bias, int accumulate);
#ifdef RA_HAVE_X86_KERNELS
void rai_gemm_micro_avx2(int kc, const float *ap, const float *bp, float *c, int64_t ldc,
                         const float *bias, int accumulate);
#endif

/* ---- the product of precision int8 (gemm_i8.c) ---------------------------- */

#define RA_GEMM_I8_MR 6       /* rows of the micro-kernel's tile */
#define RA_GEMM_I8_NR 16      /* columns */
#define RA_GEMM_I8_KMAX 65536 /* inputs at most: the integer sums stay exact */

/* w (N, K) quantised and packed once, as rai_gemm_i8 packs it at every
 * call (pw given: w is not read): column panels [npanels][kg][NR][4], each
 * row's sum and scale. */
typedef struct rai_i8_weights {
    int n, k;
    int8_t *bp;
    int32_t *wsum;
    float *wscale;
} rai_i8_weights;
/* Returns 0, or -1 (*pw zeroed) for K outside 1..RA_GEMM_I8_KMAX, N < 1 or
 * no memory. */
int rai_i8_weights_pack(rai_i8_weights *pw, const float *w, int n, int k, int isa, int nthreads);
void rai_i8_weights_free(rai_i8_weights *pw);
/* y (M, N) = epilogue(x (M, K) . w (N, K)^T + bias (N, or NULL)) as
 * precision int8 computes it (the formats in gemm_i8.c): x quantised per
 * row (u7 with a zero point), w per row (symmetric s8), integer sums, then
 * the scales; the epilogue applies gelu (an element-wise kernel, or NULL)
 * tile by tile, then stores into y or, with res, adds into res row map[i]
 * (skipped if negative; map NULL: row i; row stride N), y unused. The same
 * bits for any M, nthreads or micro-kernel (isa: RA_GEMM_REF, RA_GEMM_AVX2
 * or RA_GEMM_AVX512_VNNI), and with w packed at the call or once before (pw, of
 * rai_i8_weights_pack; NULL: at the call). Returns 0, or -1 (nothing done)
 * for K outside 1..RA_GEMM_I8_KMAX, pw of other sizes, or without memory. */
int rai_gemm_i8(float *y, const float *x, const float *w, const float *bias, int64_t m, int n,
                int k, const rai_i8_weights *pw,
                void (*gelu)(float *, const float *, int64_t), float *res, const int32_t *map,
                int isa, int nthreads);
/* The input rows of a product made on demand, instead of read from x:
 * make(ctx, dst, i0, n) writes rows [i0, i0 + n) into dst (row stride K).
 * A LayerNorm fused into the MLP that reads it (nn.c). */
typedef struct {
    void (*make)(const void *ctx, float *dst, int64_t i0, int n);
    const void *ctx;
} rai_row_source;
/* An MLP in precision int8, y (M, C) = fc2(GELU(fc1(x (M, C), or the rows
 * of src))) with fc1 (hidden, C) and fc2 (C, hidden) packed in w1, w2,
 * biases b1, b2 (or NULL), gelu the element-wise kernel; or, with res,
 * res (M, C) += it (res may be x: each block of rows is read before it is
 * added into). The bits of rai_gemm_i8 with gelu into a buffer, then
 * rai_gemm_i8 of it; each block of rows keeps its hidden activations in
 * the thread's cache. Returns 0, or -1 (nothing done) for weights of
 * other sizes or without memory. */
int rai_gemm_i8_mlp(float *y, const float *x, const rai_row_source *src,
                    const rai_i8_weights *w1, const float *b1, const rai_i8_weights *w2,
                    const float *b2, int64_t m, int c, int hidden,
                    void (*gelu)(float *, const float *, int64_t), float *res, int isa,
                    int nthreads);
/* The int8 formats value by value (gemm_i8.c's header gives them whole),
 * for the scalar quantisers and the vector ones' tails alike. */
#define RA_I8_BIG 0x1.8p23f   /* adding and taking away 1.5 x 2^23 rounds to nearest even */
/* v / s to the nearest integer, ties to even (|v / s| <= 2^22). */
static inline float rai_i8_nearest(float v, float s) { return (v / s + RA_I8_BIG) - RA_I8_BIG; }
/* An input row's scale, zero point and the scale's reciprocal (float32)
 * from its extremes lo <= 0 <= hi (NaN if it has an infinity or NaN): 1 to
 * quantise, 0 for a row of scale 0 (zeros, or so small that the
 * reciprocal overflows: |x| < 3.7e-37) or NaN (not finite), q then all 0
 * and z 0. */
static inline int rai_i8_input_params(float lo, float hi, int finite, float *scale, float *zero,
                                      float *inv) {
    const float s = (hi - lo) / 127.0f;
    *zero = 0.0f, *inv = s != 0.0f ? 1.0f / s : INFINITY;
    if (!finite || !isfinite(s) || !isfinite(*inv)) {
        *scale = finite && isfinite(s) ? 0.0f : NAN;
        return 0;
    }
    const float z = rai_i8_nearest(-lo, s);
    *zero = z < 0.0f ? 0.0f : z > 127.0f ? 127.0f : z, *scale = s;
    return 1;
}
/* The vector quantisers' row from its extremes as their lanes found them
 * (lo, hi; finite 0 if a lane saw an infinity or NaN): the scalar's
 * scale, zero point and reciprocal (as rai_i8_input_params), 1 to
 * quantise; 0 for a row the scalar leaves all zeros, q (k) then zeroed
 * and *zero 0. */
static inline int rai_i8_row_start(float lo, float hi, int finite, uint8_t *q, int k,
                                   int32_t *zero, float *scale, float *z, float *inv) {
    if (!finite) lo = hi = NAN;   /* the extremes of a row with a NaN are not the scalar's */
    lo = lo == 0.0f ? 0.0f : lo, hi = hi == 0.0f ? 0.0f : hi;   /* +0 as the scalar keeps */
    if (rai_i8_input_params(lo, hi, finite, scale, z, inv)) return 1;
    memset(q, 0, (size_t)(k > 0 ? k : 0));
    *zero = 0;
    return 0;
}
/* One input value as u7: x times the scale's reciprocal (one rounding),
 * to the nearest integer, plus the zero point, clamped. */
static inline uint8_t rai_i8_input(float x, float inv, float z) {
    const float v = ((x * inv + RA_I8_BIG) - RA_I8_BIG) + z;
    return (uint8_t)(v < 0.0f ? 0.0f : v > 127.0f ? 127.0f : v);
}
/* One weight as s8 at scale t (> 0). */
static inline int8_t rai_i8_weight(float w, float t) {
    const float r = rai_i8_nearest(w, t);
    return (int8_t)(r < -127.0f ? -127.0f : r > 127.0f ? 127.0f : r);
}
/* One input row as u7: q (k), its zero point and scale (gemm_i8.c). */
void rai_i8_quantize_row(uint8_t *q, int32_t *zero, float *scale, const float *x, int k);
/* A weight row's scale, max|w| / 127 (0 for zeros; NaN with an infinity
 * or NaN). */
float rai_i8_weight_scale(const float *w, int64_t k);
/* One weight row as s8: v (k), the sum of v and the scale (as above; v all
 * 0 where it is 0 or NaN). */
void rai_i8_quantize_weights(int8_t *v, int32_t *sum, float *scale, const float *w, int k);
/* The 4 bytes of a group of a packed panel as one int32 (what the vector
 * micro-kernels broadcast). */
static inline int32_t rai_i8_group(const void *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
/* What a tile's epilogue needs: per row the input's zero point and scale,
 * per column the weights' sum and scale, and the bias (NULL: none). The
 * VNNI block kernel alone also takes, for whole blocks, the rest of the
 * products' epilogue in registers (rai_gemm_tile_put's, the same bits):
 * gelu (GELU of gelu_avx512.h, rai_gemm_gelu_avx512's) and res, per row
 * of the block the residual row to add into at the block's first column
 * (NULL: skipped) instead of storing into c; the other kernels get 0 and
 * NULL. */
typedef struct {
    const int32_t *zero;
    const float *scale;
    const int32_t *wsum;
    const float *wscale;
    const float *bias;
    int gelu;
    float *const *res;
} rai_i8_tile;
/* One MR x NR tile of c (row stride ldc) over kg groups of 4 inputs: a
 * MR rows of 4 kg u7 (row stride lda: the quantised rows as they are),
 * b a packed column panel [kg][NR][4] s8; c = (float)(sum
 * - zero x wsum) x (scale x wscale) + bias: the scalar oracle and its
 * AVX2 twin (vpmaddubsw, vpmaddwd), the same bits; the VNNI kernel below
 * takes blocks of these tiles. */
void rai_gemm_i8_micro_ref(int kg, const uint8_t *ap, int64_t lda, const int8_t *bp, float *c,
                           int64_t ldc, const rai_i8_tile *e);
#ifdef RA_HAVE_X86_KERNELS
void rai_gemm_i8_micro_avx2(int kg, const uint8_t *ap, int64_t lda, const int8_t *bp, float *c,
                            int64_t ldc, const rai_i8_tile *e);
/* The quantisers on 8 lanes: the bits of the scalar ones. */
void rai_i8_quantize_row_avx2(uint8_t *q, int32_t *zero, float *scale, const float *x, int k);
void rai_i8_quantize_weights_avx2(int8_t *v, int32_t *sum, float *scale, const float *w, int k);
/* rp x cp tiles at once (rp <= RA_GEMM_I8_VNNI_RP panels of MR rows, the
 * i-th from row i MR; cp <= RA_GEMM_I8_VNNI_CP column panels, the j-th at
 * bp + j x 4 NR kg), c and e covering rp MR rows by cp NR columns: each
 * tile with the bits of rai_gemm_i8_micro_ref, on VPDPBUSD (AVX512_VNNI,
 * with AVX-512F, BW and VL: only on a CPU that has them). */
#define RA_GEMM_I8_VNNI_RP 2
#define RA_GEMM_I8_VNNI_CP 2
void rai_gemm_i8_block_avx512_vnni(int kg, const uint8_t *ap, int64_t lda, const int8_t *bp,
                                   int rp, int cp, float *c, int64_t ldc, const rai_i8_tile *e);
/* The input quantiser on 16 lanes, beside that kernel: the bits of the
 * scalar one. */
void rai_i8_quantize_row_avx512(uint8_t *q, int32_t *zero, float *scale, const float *x, int k);
#endif

/* Where output row r of a product goes in the residual stream res (row
 * stride ldres) at column j0: row map[r] (NULL: none, when negative; map
 * NULL: row r). The window reverse of a Swin block, fused into its proj. */
static inline float *rai_gemm_res_row(float *res, int64_t ldres, const int32_t *map, int64_t r,
                                      int j0) {
    const int64_t dst = map ? map[r] : r;
    return dst < 0 ? NULL : res + dst * ldres + j0;
}
/* The mr x nr part of a tile t (row stride ldt) of the output rows from
 * r0, columns from j0: GELU'd first if gelu (over the whole tile, t in
 * place), then copied to y (the tile's first element; row stride ldy) or,
 * with res, added into res row map[r0 + r] (skipped if negative; map NULL:
 * row r0 + r; row stride ldres) at column j0. The epilogue of the products
 * of reduced precision (gemm.c). */
void rai_gemm_tile_put(float *t, int ldt, int mr, int nr,
                       void (*gelu)(float *, const float *, int64_t), float *y, int64_t ldy,
                       float *res, int64_t ldres, const int32_t *map, int64_t r0, int j0);

/* The lines of that part of the output (y's rows from the tile's first
 * element, row stride ldy, or res's rows from r0 through map) of a product
 * over k inputs, asked for with intent to
 * write: for short K a tile's sums are done before a line would come from
 * memory (Swin's first stage writes 30-40 MB, its residual stream through
 * the window row map). For K above 512 the wait is a small share and the
 * lines would leave L1 before the epilogue: nothing is asked. */
static inline void rai_gemm_tile_prefetch(const float *y, int64_t ldy, const float *res,
                                          int64_t ldres, const int32_t *map, int64_t r0, int mr,
                                          int j0, int nr, int k) {
    for (int r = 0; k <= 512 && r < mr; r++) {
        const int64_t row = res && map ? map[r0 + r] : r0 + r;
        const float *o = row < 0 ? NULL : res ? res + row * ldres + j0 : y + r * ldy;
        for (int j = 0; o && j < nr; j += 16) __builtin_prefetch(o + j, 1, 3);
    }
}

/* ---- the product of precision bf16 (gemm_bf16.c) -------------------------- */

#define RA_GEMM_BF16_MR 12   /* rows of the micro-kernel's tile */
#define RA_GEMM_BF16_NR 32   /* columns */
enum { RA_GEMM_BF16_REF, RA_GEMM_BF16_AVX512 };   /* the micro-kernel */

/* w (N, K) rounded to bfloat16 and packed once: column panels
 * [npanels][kp][NR][2] (kp = K / 2 rounded up; zeros past N and K). */
typedef struct rai_bf16_weights {
    int n, k;
    uint16_t *bp;
} rai_bf16_weights;
/* Rounded by the isa's rounding (the same bits for every isa). Returns 0,
 * or -1 (*pw zeroed) for N or K < 1 or no memory. */
int rai_bf16_weights_pack(rai_bf16_weights *pw, const float *w, int n, int k, int isa,
                          int nthreads);
void rai_bf16_weights_free(rai_bf16_weights *pw);
/* y (M, N) = epilogue(x (M, K) . w (N, K)^T + bias (N, or NULL)) as
 * precision bf16 computes it (the format in gemm_bf16.c), w packed in pw;
 * the epilogue of rai_gemm_tile_put (res: row stride N). The same bits
 * for any M, nthreads or micro-kernel (isa: RA_GEMM_BF16_*). Returns 0,
 * or -1 (nothing done) for K < 1, pw of other sizes or without memory. */
int rai_gemm_bf16(float *y, const float *x, const float *bias, int64_t m, int n, int k,
                  const rai_bf16_weights *pw, void (*gelu)(float *, const float *, int64_t),
                  float *res, const int32_t *map, int isa, int nthreads);
/* An MLP in precision bf16, y (M, C) = fc2(GELU(fc1(x (M, C)))) with fc1
 * (hidden, C) and fc2 (C, hidden) packed in w1, w2, biases b1, b2 (or
 * NULL), gelu the element-wise kernel; or, with res, res (M, C) += it.
 * The bits of rai_gemm_bf16 with gelu into a buffer, then rai_gemm_bf16 of
 * it: each block of rows keeps its hidden activations in the thread's
 * cache, rounded to bfloat16 once. Returns 0, or -1 (nothing done) for
 * weights of other sizes or without memory. */
int rai_gemm_bf16_mlp(float *y, const float *x, const rai_bf16_weights *w1, const float *b1,
                      const rai_bf16_weights *w2, const float *b2, int64_t m, int c, int hidden,
                      void (*gelu)(float *, const float *, int64_t), float *res, int isa,
                      int nthreads);
/* What a bf16 product does with a tile of sums (+ bias), in this order:
 * gm (M, N), if given, multiplies them (a GELU's backward fused into the
 * product before it); then rai_gemm_tile_put's gelu, and res and map (row
 * stride N). */
typedef struct rai_bf16_epilogue {
    void (*gelu)(float *, const float *, int64_t);
    const float *gm;
    float *res;
    const int32_t *map;
} rai_bf16_epilogue;
/* rai_gemm_bf16 with more: w packed once (pw) or, pw NULL, at the call
 * from w (N, K), or if wt from w (K, N) read transposed (dX = dY W of a
 * backward: no transposed copy), into a buffer of the calling thread
 * (rounded as rai_bf16_weights_pack rounds: the same bits); the epilogue
 * e (NULL: none). */
int rai_gemm_bf16_ext(float *y, const float *x, const float *w, int wt, const float *bias,
                      int64_t m, int n, int k, const rai_bf16_weights *pw,
                      const rai_bf16_epilogue *e, int isa, int nthreads);
/* c (N, K) += a (M, N)^T . b (M, K) in the format of the bf16 product, the
 * weight gradient of a Linear: a and b rounded to bfloat16, the sum over
 * the M rows in blocks of 512 in order, each block's a chain over its
 * pairs of rows from 0 (as the micro-kernel makes it) added into c; and db
 * (N), if given, += the column sums of a as they are (in double, rows in
 * order: the bias gradient, as nn.c sums it). The same bits for any
 * nthreads or micro-kernel. Returns 0, or -1 (nothing done) without
 * memory. */
int rai_gemm_bf16_tn(float *c, float *db, const float *a, const float *b, int64_t m, int n, int k,
                     int isa, int nthreads);
/* rows x k values of x (row stride ldx) rounded to bfloat16 into a (row
 * stride lda >= k rounded up to even; the pad of an odd k set to 0). */
void rai_bf16_round_rows(uint16_t *a, int64_t lda, const float *x, int64_t ldx, int rows, int k);
/* dst[2j] = r0[j], dst[2j + 1] = r1[j] (0 if r1 is NULL) rounded to
 * bfloat16, j < n: a pair of rows as a packed panel holds it; sum (n
 * doubles), if given, += r0 then += r1 (the rows' values as they are). */
void rai_bf16_pack_pairs(uint16_t *dst, const float *r0, const float *r1, int n, double *sum);
/* One MR x NR tile of c (row stride ldc) = bias (NULL: 0) + a . b over kp
 * pairs: a, MR rows of bfloat16, pair q of row r at a[r lda + q aq] (rows:
 * aq 2; a packed panel [kp][MR][2]: lda 2, aq 2 MR), b a packed panel
 * [kp][NR][2]; the scalar oracle and its VDPBF16PS twin (the same bits). */
void rai_gemm_bf16_micro_ref(int kp, const uint16_t *a, int64_t lda, int64_t aq, const uint16_t *bp,
                             float *c, int64_t ldc, const float *bias);
#ifdef RA_HAVE_X86_KERNELS
void rai_gemm_bf16_micro_avx512(int kp, const uint16_t *a, int64_t lda, int64_t aq,
                                const uint16_t *bp, float *c, int64_t ldc, const float *bias);
/* The same tile added into the residual rows res[r] (NR floats from each;
 * rows with NULL skipped) instead of stored: rai_gemm_tile_put's add, in
 * registers (the same bits). */
void rai_gemm_bf16_micro_res_avx512(int kp, const uint16_t *a, int64_t lda, int64_t aq,
                                    const uint16_t *bp, float *const *res, const float *bias);
/* The tile (+ bias) times gm (row stride ldc, as c) into c: the
 * epilogue's gm multiply in registers (the same bits). */
void rai_gemm_bf16_micro_mul_avx512(int kp, const uint16_t *a, int64_t lda, int64_t aq,
                                    const uint16_t *bp, float *c, int64_t ldc, const float *bias,
                                    const float *gm);
/* rai_bf16_pack_pairs on 16 lanes (the same bits). */
void rai_bf16_pack_pairs_avx512(uint16_t *dst, const float *r0, const float *r1, int n, double *sum);
/* rai_bf16_round_rows on 16 lanes (the same bits). */
void rai_bf16_round_rows_avx512(uint16_t *a, int64_t lda, const float *x, int64_t ldx, int rows,
                                int k);
/* 1 if the CPU runs rai_gemm_bf16_micro_avx512 and the rounding above
 * (AVX512_BF16, BW, VL). */
int rai_gemm_bf16_avx512_supported(void);
#endif

/* ---- the fused products on AVX-512 (gemm_avx512.c) ------------------------ */

#ifdef RA_HAVE_X86_KERNELS
/* y (M, N; row stride ldy) = epilogue(x (M, K; ldx) . w (N, K; ldw)^T):
 * + bias (N) if given, then GELU if gelu, then either stored into y or,
 * with res, added into res row map[i] (skipped if negative; map NULL: row
 * i; row stride ldres), y unused. nthreads OpenMP threads. Returns 0, or
 * -1 (nothing done) for K < 1 or no memory for the packed panels. */
int rai_gemm_avx512(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                    int64_t ldw, int64_t m, int n, int k, const float *bias, int gelu,
                    float *res, int64_t ldres, const int32_t *map, int nthreads);
/* rai_gemm_avx512 with more: w given transposed if wt ((K, N; ldw), as a
 * backward's dX = dY W takes it: no transposed copy); gm (ldy), if given,
 * multiplies the sums by gm (a GELU's backward fused into the product
 * before it). */
int rai_gemm_avx512_ext(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                        int64_t ldw, int wt, int64_t m, int n, int k, const float *bias, int gelu,
                        const float *gm, float *res, int64_t ldres, const int32_t *map,
                        int nthreads);
/* c (N, K; ldc) += a (M, N; lda)^T . b (M, K; ldb), the weight gradient of
 * a Linear layer, and db (N) += the column sums of a (in double, rows in
 * order: nn.c's colsum_add) if db is not NULL; each element of c one
 * ordered chain over the M rows from 0, the same bits for any nthreads.
 * Returns 0, or -1 (nothing done) without memory for the per-thread
 * scratch (kept between calls: nothing is allocated once it has grown). */
int rai_gemm_tn_avx512(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
                       int64_t ldb, int64_t m, int n, int k, float *db, int nthreads);
/* y = GELU(x) on 16 lanes, as the epilogue computes it (y may be x). */
void rai_gemm_gelu_avx512(float *y, const float *x, int64_t n);
/* y = GELU(x) and d = GELU'(x) on 16 lanes from one erf (y may be x): the
 * bits of rai_gemm_gelu_avx512 and of the backward's GELU'. */
void rai_gemm_gelu_keep_avx512(float *y, float *d, const float *x, int64_t n);
/* dx += dy * GELU'(x) on 16 lanes (dx may be dy). */
void rai_gemm_gelu_backward_avx512(float *dx, const float *dy, const float *x, int64_t n);
/* rai_nn_layernorm_row_avx2 (nn_kernels.h) on 8 double lanes. */
void rai_nn_layernorm_row_avx512(float *y, float *mean, float *rstd, const float *x,
                                 const float *gamma, const float *beta, int c, float eps);
/* The same for four rows at once (each its own y, mean, rstd, x; mean and
 * rstd may be NULL), each with the bits of the one-row kernel. */
void rai_nn_layernorm_rows4_avx512(float *const y[4], float *const mean[4], float *const rstd[4],
                                   const float *const x[4], const float *gamma, const float *beta,
                                   int c, float eps);
/* rai_nn_layernorm_row_f32_ref (nn_kernels.h) on 16 lanes: the same bits. */
void rai_nn_layernorm_row_f32_avx512(float *y, const float *x, const float *gamma,
                                     const float *beta, int c, float eps);
/* LayerNorm backward of rows [0, rows) (the reference of nn_ref.c on 8 double
 * lanes): dx += (may be NULL), and the column sums of dy xhat and dy
 * ADDED to pg and pb (c doubles each; either may be NULL), rows in order. */
void rai_nn_layernorm_backward_rows_avx512(float *dx, double *pg, double *pb, const float *dy,
                                           const float *x, const float *mean, const float *rstd,
                                           const float *gamma, int64_t rows, int c);
#endif

#endif
