/* AVX-512F micro-kernels (this file is compiled with -mavx512f ... -mfma and
   only called after a run-time CPU check). 32 zmm registers hold a 12 x 2
   vector accumulator tile plus the B row and a broadcast A element; the
   half-width kernels hold 12 x 1. */
#include <immintrin.h>

#include "gemm.h"

/* the first n lanes (0 < n < 16, or < 8) of a row of C */
#define MLOAD_PS(p, n) _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1), (p))
#define MSTORE_PS(p, v, n) _mm512_mask_storeu_ps((p), (__mmask16)((1u << (n)) - 1), (v))
#define MLOAD_PD(p, n) _mm512_maskz_loadu_pd((__mmask8)((1u << (n)) - 1), (p))
#define MSTORE_PD(p, v, n) _mm512_mask_storeu_pd((p), (__mmask8)((1u << (n)) - 1), (v))

/* B is loaded unaligned: it may be read in place from a row-major operand. */
#define UKR_F32(NAME, MR, NV)                                                              \
    GEMM_UKR_DEFINE(NAME, float, __m512, MR, GEMM_AVX512_F32_MR, NV, 16, _mm512_loadu_ps,   \
                    _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps, _mm512_fmadd_ps,     \
                    _mm512_add_ps, _mm512_setzero_ps, MLOAD_PS, MSTORE_PS)
#define UKR_F64(NAME, MR, NV)                                                              \
    GEMM_UKR_DEFINE(NAME, double, __m512d, MR, GEMM_AVX512_F64_MR, NV, 8, _mm512_loadu_pd,  \
                    _mm512_loadu_pd, _mm512_storeu_pd, _mm512_set1_pd, _mm512_fmadd_pd,     \
                    _mm512_add_pd, _mm512_setzero_pd, MLOAD_PD, MSTORE_PD)

UKR_F32(gemm_ukr_f32_avx512, GEMM_AVX512_F32_MR, 2)
UKR_F64(gemm_ukr_f64_avx512, GEMM_AVX512_F64_MR, 2)
UKR_F32(gemm_ukrh_f32_avx512, GEMM_AVX512_F32_MR, 1)
UKR_F64(gemm_ukrh_f64_avx512, GEMM_AVX512_F64_MR, 1)

/* Tail kernels: exactly r < MR rows, so the last rows of A cost no padded
   work and a row-major A's last rows are read in place too. */
#define TAILS(X, SFX, NV)                                                                  \
    X(gemm_ukr1_##SFX, 1, NV) X(gemm_ukr2_##SFX, 2, NV) X(gemm_ukr3_##SFX, 3, NV)           \
    X(gemm_ukr4_##SFX, 4, NV) X(gemm_ukr5_##SFX, 5, NV) X(gemm_ukr6_##SFX, 6, NV)           \
    X(gemm_ukr7_##SFX, 7, NV) X(gemm_ukr8_##SFX, 8, NV) X(gemm_ukr9_##SFX, 9, NV)           \
    X(gemm_ukr10_##SFX, 10, NV) X(gemm_ukr11_##SFX, 11, NV)
#define UKR_F32_STATIC(NAME, MR, NV) static UKR_F32(NAME, MR, NV)
#define UKR_F64_STATIC(NAME, MR, NV) static UKR_F64(NAME, MR, NV)
TAILS(UKR_F32_STATIC, f32_avx512, 2)
TAILS(UKR_F64_STATIC, f64_avx512, 2)
TAILS(UKR_F32_STATIC, f32h_avx512, 1)
TAILS(UKR_F64_STATIC, f64h_avx512, 1)

#define TAIL_PTR(NAME, MR, NV) NAME,
const gemm_ukr_f32 gemm_tails_f32_avx512[GEMM_AVX512_F32_MR] = {
    NULL, TAILS(TAIL_PTR, f32_avx512, 2)};
const gemm_ukr_f64 gemm_tails_f64_avx512[GEMM_AVX512_F64_MR] = {
    NULL, TAILS(TAIL_PTR, f64_avx512, 2)};
const gemm_ukr_f32 gemm_tails_half_f32_avx512[GEMM_AVX512_F32_MR] = {
    NULL, TAILS(TAIL_PTR, f32h_avx512, 1)};
const gemm_ukr_f64 gemm_tails_half_f64_avx512[GEMM_AVX512_F64_MR] = {
    NULL, TAILS(TAIL_PTR, f64h_avx512, 1)};

#define T float
#define GEMV_SFX f32_avx512
#include "gemm_gemv.h"
#define T double
#define GEMV_SFX f64_avx512
#include "gemm_gemv.h"
