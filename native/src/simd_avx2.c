/* simd_avx2.c - the float32 SIMD maps at AVX2/FMA (8 lanes): the vector
 * layer for simd_math.h, and the loops over arrays. */
#include <immintrin.h>
#include <string.h>

typedef __m256 V;
typedef __m256i VI;
typedef __m256 M;
#define V_SET1 _mm256_set1_ps
#define V_ZERO _mm256_setzero_ps
#define V_ADD _mm256_add_ps
#define V_SUB _mm256_sub_ps
#define V_MUL _mm256_mul_ps
#define V_DIV _mm256_div_ps
#define V_MIN _mm256_min_ps
#define V_MAX _mm256_max_ps
#define V_FMADD _mm256_fmadd_ps
#define V_FMSUB _mm256_fmsub_ps
#define V_FNMADD _mm256_fnmadd_ps
#define V_AND _mm256_and_ps
#define V_OR _mm256_or_ps
#define V_ANDNOT _mm256_andnot_ps
#define V_ROUND(x) _mm256_round_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_TOI _mm256_cvtps_epi32
#define V_FROMI _mm256_cvtepi32_ps
#define V_BITS _mm256_castps_si256
#define V_FROMBITS _mm256_castsi256_ps
#define VI_SET1 _mm256_set1_epi32
#define VI_ADD _mm256_add_epi32
#define VI_SUB _mm256_sub_epi32
#define VI_AND _mm256_and_si256
#define VI_OR _mm256_or_si256
#define VI_SRAI _mm256_srai_epi32
#define VI_SRLI _mm256_srli_epi32
#define VI_SLLI _mm256_slli_epi32
#define V_CMP _mm256_cmp_ps
#define V_SELECT(m, t, f) _mm256_blendv_ps((f), (t), (m))
#define M_AND _mm256_and_ps
#define M_ALL(m) (_mm256_movemask_ps(m) == 0xff)

#include "simd_math.h"

#define DEF_MAP(NAME, F)                                                            \
    void NAME(int64_t n, const float *x, int64_t sx, float *y) {                    \
        int64_t i = 0;                                                              \
        if (sx == 1) {                                                              \
            for (; i + 16 <= n; i += 16) {                                          \
                __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);  \
                _mm256_storeu_ps(y + i, F(a));                                      \
                _mm256_storeu_ps(y + i + 8, F(b));                                  \
            }                                                                       \
        }                                                                           \
        /* strided input and the tail: 8 at a time through a buffer */            \
        while (i < n) {                                                             \
            float buf[8] = {0};                                                     \
            int m = n - i < 8 ? (int)(n - i) : 8;                                   \
            for (int l = 0; l < m; l++) buf[l] = x[(i + l) * sx];                   \
            _mm256_storeu_ps(buf, F(_mm256_loadu_ps(buf)));                         \
            memcpy(y + i, buf, (size_t)m * sizeof(float));                          \
            i += m;                                                                 \
        }                                                                           \
    }

/* one map per SIMD_MAPS entry (simd.h), the list every level shares */
#define MAP_AVX2(OP, OPU) DEF_MAP(ad_##OP##_f32_avx2, v_##OP)
SIMD_MAPS(MAP_AVX2)
