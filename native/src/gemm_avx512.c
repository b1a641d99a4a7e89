/* AVX-512F micro-kernels (this file is compiled with -mavx512f ... -mfma and
   only called after a run-time CPU check). 32 zmm registers hold a 12 x 2
   vector accumulator tile plus the B row and a broadcast A element. */
#include <immintrin.h>

#include "gemm.h"

/* B is loaded unaligned: it may be read in place from a row-major operand. */
#define UKR_F32(NAME, MR)                                                                  \
    GEMM_UKR_DEFINE(NAME, float, __m512, MR, GEMM_AVX512_F32_MR, 2, 16, _mm512_loadu_ps,    \
                    _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps, _mm512_fmadd_ps,     \
                    _mm512_add_ps, _mm512_setzero_ps)
#define UKR_F64(NAME, MR)                                                                  \
    GEMM_UKR_DEFINE(NAME, double, __m512d, MR, GEMM_AVX512_F64_MR, 2, 8, _mm512_loadu_pd,   \
                    _mm512_loadu_pd, _mm512_storeu_pd, _mm512_set1_pd, _mm512_fmadd_pd,     \
                    _mm512_add_pd, _mm512_setzero_pd)

UKR_F32(gemm_ukr_f32_avx512, GEMM_AVX512_F32_MR)
UKR_F64(gemm_ukr_f64_avx512, GEMM_AVX512_F64_MR)

/* Tail kernels: exactly r < MR rows, so the last rows of A cost no padded
   work and a row-major A's last rows are read in place too. */
#define TAILS(X, SFX)                                                                      \
    X(gemm_ukr1_##SFX, 1) X(gemm_ukr2_##SFX, 2) X(gemm_ukr3_##SFX, 3) X(gemm_ukr4_##SFX, 4) \
    X(gemm_ukr5_##SFX, 5) X(gemm_ukr6_##SFX, 6) X(gemm_ukr7_##SFX, 7) X(gemm_ukr8_##SFX, 8) \
    X(gemm_ukr9_##SFX, 9) X(gemm_ukr10_##SFX, 10) X(gemm_ukr11_##SFX, 11)
#define UKR_F32_STATIC(NAME, MR) static UKR_F32(NAME, MR)
#define UKR_F64_STATIC(NAME, MR) static UKR_F64(NAME, MR)
TAILS(UKR_F32_STATIC, f32_avx512)
TAILS(UKR_F64_STATIC, f64_avx512)

#define TAIL_PTR(NAME, MR) NAME,
const gemm_ukr_f32 gemm_tails_f32_avx512[GEMM_AVX512_F32_MR] = {NULL, TAILS(TAIL_PTR, f32_avx512)};
const gemm_ukr_f64 gemm_tails_f64_avx512[GEMM_AVX512_F64_MR] = {NULL, TAILS(TAIL_PTR, f64_avx512)};

GEMM_GEMV_DEFINE(f32_avx512, float)
GEMM_GEMV_DEFINE(f64_avx512, double)
