/* simd.h - run-time dispatched vector kernels for elementwise float32 math
 * (simd_avx2.c is compiled with -mavx2 -mfma; callers check the CPU first). */
#ifndef AD_SIMD_H
#define AD_SIMD_H

#include <stdint.h>

/* y[i] = f(x[i * sx]) for i < n, y contiguous.  Results depend only on the
   input value, never on the element's position, length or stride (tails go
   through the same vector code), so any split of a loop gives the same bits. */
void ad_exp_f32_avx2(int64_t n, const float *x, int64_t sx, float *y);
void ad_tanh_f32_avx2(int64_t n, const float *x, int64_t sx, float *y);
/* simd_avx512.c (AVX-512F): the same results, 16 lanes */
void ad_exp_f32_avx512(int64_t n, const float *x, int64_t sx, float *y);
void ad_tanh_f32_avx512(int64_t n, const float *x, int64_t sx, float *y);

#endif
