/* AVX2 + FMA micro-kernels (this file is compiled with -mavx2 -mfma and only
   called after a run-time CPU check). */
#include <immintrin.h>

#include "gemm.h"

GEMM_UKR_DEFINE(gemm_ukr_f32_avx2, float, __m256, GEMM_AVX2_F32_MR, 2, 8, _mm256_load_ps,
                _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps, _mm256_fmadd_ps,
                _mm256_add_ps, _mm256_setzero_ps)

GEMM_UKR_DEFINE(gemm_ukr_f64_avx2, double, __m256d, GEMM_AVX2_F64_MR, 2, 4, _mm256_load_pd,
                _mm256_loadu_pd, _mm256_storeu_pd, _mm256_set1_pd, _mm256_fmadd_pd,
                _mm256_add_pd, _mm256_setzero_pd)
