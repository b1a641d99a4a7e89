/* simd.h - run-time dispatched vector kernels for elementwise float32 math
 * (simd_avx2.c is compiled with -mavx2 -mfma; callers check the CPU first). */
#ifndef AD_SIMD_H
#define AD_SIMD_H

#include <stdint.h>

/* y[i] = f(x[i * sx]) for i < n, y contiguous.  Results depend only on the
   input value, never on the element's position, length or stride (tails go
   through the same vector code), so any split of a loop gives the same bits. */
#define SIMD_MAPS(X) \
    X(exp, EXP) X(tanh, TANH) X(sigmoid, SIGMOID) X(silu, SILU) X(gelu, GELU) X(log, LOG)
#define SIMD_DECLARE(OP, OPU)                                                            \
    void ad_##OP##_f32_avx2(int64_t n, const float *x, int64_t sx, float *y);           \
    void ad_##OP##_f32_avx512(int64_t n, const float *x, int64_t sx, float *y);
/* simd_avx512.c (AVX-512F) gives the same results as simd_avx2.c, 16 lanes */
SIMD_MAPS(SIMD_DECLARE)

/* Cephes logf's P(f) (log x = f - f^2/2 + f^3 P(f) + e ln 2), by Horner with
   FMA, for either vector width: the one order both ISA levels use. */
#define SIMD_LOGF_POLY(p, f, FMADD, SET1)                                              \
    do {                                                                               \
        p = SET1(7.0376836292E-2f);                                                    \
        p = FMADD(p, f, SET1(-1.1514610310E-1f));                                      \
        p = FMADD(p, f, SET1(1.1676998740E-1f));                                       \
        p = FMADD(p, f, SET1(-1.2420140846E-1f));                                      \
        p = FMADD(p, f, SET1(1.4249322787E-1f));                                       \
        p = FMADD(p, f, SET1(-1.6668057665E-1f));                                      \
        p = FMADD(p, f, SET1(2.0000714765E-1f));                                       \
        p = FMADD(p, f, SET1(-2.4999993993E-1f));                                      \
        p = FMADD(p, f, SET1(3.3333331174E-1f));                                       \
    } while (0)

/* gelu's -2 sqrt(2/pi) and -2 sqrt(2/pi) 0.044715 in float32 */
#define GELU_M2C_F (-1.5957691216057308f)
#define GELU_M2CK_F (-0.07135481627260025f)

#endif
