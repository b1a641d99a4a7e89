/* AVX-512F micro-kernels (this file is compiled with -mavx512f ... -mfma and
   only called after a run-time CPU check). 32 zmm registers hold a 12 x 2
   vector accumulator tile plus the B row and a broadcast A element. */
#include <immintrin.h>

#include "gemm.h"

GEMM_UKR_DEFINE(gemm_ukr_f32_avx512, float, __m512, GEMM_AVX512_F32_MR, 2, 16, _mm512_load_ps,
                _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps, _mm512_fmadd_ps,
                _mm512_add_ps, _mm512_setzero_ps)

GEMM_UKR_DEFINE(gemm_ukr_f64_avx512, double, __m512d, GEMM_AVX512_F64_MR, 2, 8, _mm512_load_pd,
                _mm512_loadu_pd, _mm512_storeu_pd, _mm512_set1_pd, _mm512_fmadd_pd,
                _mm512_add_pd, _mm512_setzero_pd)

GEMM_GEMV_DEFINE(f32_avx512, float)
GEMM_GEMV_DEFINE(f64_avx512, double)
