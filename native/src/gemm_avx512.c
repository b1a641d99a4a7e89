/* AVX-512F micro-kernels (this file is compiled with -mavx512f ... -mfma and
   only called after a run-time CPU check). 32 zmm registers hold a 12 x 2
   vector accumulator tile plus the B row and a broadcast A element; the
   half-width kernels hold 12 x 1. */
#include <immintrin.h>
#include <string.h>

#include "gemm.h"

/* the first n lanes (0 < n < 16, or < 8) of a row of C */
#define MLOAD_PS(p, n) _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1), (p))
#define MSTORE_PS(p, v, n) _mm512_mask_storeu_ps((p), (__mmask16)((1u << (n)) - 1), (v))
#define MLOAD_PD(p, n) _mm512_maskz_loadu_pd((__mmask8)((1u << (n)) - 1), (p))
#define MSTORE_PD(p, v, n) _mm512_mask_storeu_pd((p), (__mmask8)((1u << (n)) - 1), (v))

/* two consecutive elements at p broadcast to every pair of lanes (a 64-bit,
   or 128-bit, broadcast load) */
static inline __m512 BCAST2_PS(const float *p)
{
    double d;
    memcpy(&d, p, sizeof d);
    return _mm512_castpd_ps(_mm512_set1_pd(d));
}
static inline __m512d BCAST2_PD(const double *p)
{
    return _mm512_broadcast_f64x2(_mm_loadu_pd(p));
}

/* The kernels, main and row tails, full and half width: gemm_ukr_avx512.h once per dtype. */
#define T float
#define V __m512
#define VL 16
#define SFX f32_avx512
#define UKR_FN gemm_ukr_f32
#define PMR GEMM_AVX512_F32_MR
#define LOADU _mm512_loadu_ps
#define STOREU _mm512_storeu_ps
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
#define ADD _mm512_add_ps
#define ZERO _mm512_setzero_ps
#define MLOAD MLOAD_PS
#define MSTORE MSTORE_PS
#define ITYPE int32_t
#define PERMX _mm512_permutexvar_ps
#define PERMX2 _mm512_permutex2var_ps
#define BCAST2 BCAST2_PS
#include "gemm_ukr_avx512.h"

#define T double
#define V __m512d
#define VL 8
#define SFX f64_avx512
#define UKR_FN gemm_ukr_f64
#define PMR GEMM_AVX512_F64_MR
#define LOADU _mm512_loadu_pd
#define STOREU _mm512_storeu_pd
#define SET1 _mm512_set1_pd
#define FMA _mm512_fmadd_pd
#define ADD _mm512_add_pd
#define ZERO _mm512_setzero_pd
#define MLOAD MLOAD_PD
#define MSTORE MSTORE_PD
#define ITYPE int64_t
#define PERMX _mm512_permutexvar_pd
#define PERMX2 _mm512_permutex2var_pd
#define BCAST2 BCAST2_PD
#include "gemm_ukr_avx512.h"

#define T float
#define GEMV_SFX f32_avx512
#include "gemm_gemv.h"
#define T double
#define GEMV_SFX f64_avx512
#include "gemm_gemv.h"
