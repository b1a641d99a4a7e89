/* simd_avx2.c - AVX2/FMA float32 exp, tanh and the logistic family (8 lanes).
 *
 * exp: n = round(x log2 e), r = x - n ln2 (two-part ln2, FMA), e^r from the
 * Cephes degree-7 polynomial, times 2^n applied as two factors 2^(n/2) so
 * that denormal results and overflow to inf come out of one final rounding.
 * tanh: odd polynomial (Cephes) below 0.625, else (1 - t) / (1 + t) with
 * t = e^(-2|x|), sign restored.  NaN propagates; +-inf give 0 / inf and +-1.
 * sigmoid, silu (from e^-|x|) and the tanh-form gelu as
 * x / (1 + e^(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3): 0.5 x (1 + tanh u)
 * without its cancellation for negative x.  log: Cephes logf (below). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "simd.h"

/* e^r for the reduced argument: n = round(x log2 e), r = x - n ln2; returns
   e^r (the caller scales by 2^n). */
static inline __m256 exp8_reduced(__m256 xc, __m256 *n) {
    *n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    return _mm256_add_ps(p, _mm256_set1_ps(1.0f));
}

static inline __m256 pow2i8(__m256i e) { /* 2^e for a normal exponent e */
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

static inline __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-104.0f), hi = _mm256_set1_ps(89.0f);
    __m256 n, p = exp8_reduced(_mm256_min_ps(_mm256_max_ps(x, lo), hi), &n);
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, pow2i8(n1)), pow2i8(n2));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* e^x for -40 <= x <= 0 (normal results): one exact scaling by 2^n, no
   clamping or NaN handling; the same bits as exp8 on that range. */
static inline __m256 exp8_mid(__m256 x) {
    __m256 n, p = exp8_reduced(x, &n);
    return _mm256_mul_ps(p, pow2i8(_mm256_cvtps_epi32(n)));
}

static inline __m256 tanh8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    __m256 ax = _mm256_andnot_ps(sign, x);
    /* small: x + x z P(z), z = x^2 */
    __m256 z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-5.70498872745E-3f);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954E-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531E-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036E-1f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422E-1f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    small = _mm256_or_ps(small, _mm256_and_ps(x, sign)); /* tanh(-0) = -0 */
    /* large: (1 - t) / (1 + t), t = e^(-2|x|) with |x| capped at 20 (tanh is
       1.0f from 9.02 on; min() also turns a NaN into 20, restored below) */
    __m256 t = exp8_mid(
        _mm256_mul_ps(_mm256_min_ps(ax, _mm256_set1_ps(20.0f)), _mm256_set1_ps(-2.0f)));
    __m256 large = _mm256_div_ps(_mm256_sub_ps(one, t), _mm256_add_ps(one, t));
    large = _mm256_or_ps(large, _mm256_and_ps(x, sign));
    __m256 is_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ);
    __m256 y = _mm256_blendv_ps(large, small, is_small);
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

static inline __m256 log8_core(__m256 xs, __m256 e) { /* xs normal, positive, finite */
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256i bits = _mm256_castps_si256(xs);
    e = _mm256_add_ps(e, _mm256_cvtepi32_ps(
        _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126))));
    __m256 m = _mm256_castsi256_ps(_mm256_or_si256(
        _mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f000000)));
    __m256 lo = _mm256_cmp_ps(m, _mm256_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
    e = _mm256_sub_ps(e, _mm256_and_ps(lo, one));
    __m256 f = _mm256_sub_ps(_mm256_add_ps(m, _mm256_and_ps(lo, m)), one);
    __m256 z = _mm256_mul_ps(f, f);
    __m256 p;
    SIMD_LOGF_POLY(p, f, _mm256_fmadd_ps, _mm256_set1_ps);
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, z), f);
    y = _mm256_fmadd_ps(e, _mm256_set1_ps(-2.12194440e-4f), y);
    y = _mm256_fnmadd_ps(z, _mm256_set1_ps(0.5f), y);
    return _mm256_fmadd_ps(e, _mm256_set1_ps(0.693359375f), _mm256_add_ps(f, y));
}

/* log: x = 2^e m with m in [sqrt(1/2), sqrt(2)) from the bits (denormals
   scaled by 2^23 first), f = m - 1, log x = f - f^2/2 + f^3 P(f) + e ln 2
   (Cephes logf; ln 2 in two parts). 0 -> -inf, x < 0 and NaN -> NaN, inf -> inf. */
static inline __m256 log8(__m256 x) {
    const __m256 fmin = _mm256_set1_ps(1.17549435e-38f), inf = _mm256_set1_ps(INFINITY);
    __m256 normal = _mm256_and_ps(_mm256_cmp_ps(x, fmin, _CMP_GE_OQ),
                                  _mm256_cmp_ps(x, inf, _CMP_LT_OQ));
    if (_mm256_movemask_ps(normal) == 0xff) return log8_core(x, _mm256_setzero_ps());
    __m256 tiny = _mm256_cmp_ps(x, fmin, _CMP_LT_OQ);
    __m256 xs = _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(8388608.0f)), tiny);
    __m256 r = log8_core(xs, _mm256_and_ps(tiny, _mm256_set1_ps(-23.0f)));
    r = _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, inf, _CMP_EQ_OQ));
    r = _mm256_blendv_ps(r, _mm256_set1_ps(-INFINITY),
                         _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
    return _mm256_blendv_ps(r, _mm256_set1_ps(NAN),
                            _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NGE_UQ));
}

static inline __m256 logistic_div8(__m256 num, __m256 w) { /* num / (1 + e^w) */
    return _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(w)));
}

/* sigmoid and silu from e = e^-|x| (never overflows): 1 / (1 + e) and
   x / (1 + e) for x >= 0, e / (1 + e) and x e / (1 + e) below. */
static inline __m256 sigmoid_num8(__m256 x, __m256 for_pos, __m256 for_neg, __m256 e) {
    __m256 num = _mm256_blendv_ps(for_neg, for_pos,
                                  _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ));
    return _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline __m256 sigmoid8(__m256 x) {
    __m256 e = exp8(_mm256_or_ps(x, _mm256_set1_ps(-0.0f)));
    return sigmoid_num8(x, _mm256_set1_ps(1.0f), e, e);
}

static inline __m256 silu8(__m256 x) {
    __m256 e = exp8(_mm256_or_ps(x, _mm256_set1_ps(-0.0f)));
    return sigmoid_num8(x, x, _mm256_mul_ps(x, e), e);
}

static inline __m256 gelu8(__m256 x) { /* -2u = x (-2c - 2ck x^2) */
    __m256 w = _mm256_fmadd_ps(_mm256_mul_ps(x, x), _mm256_set1_ps(GELU_M2CK_F),
                               _mm256_set1_ps(GELU_M2C_F));
    return logistic_div8(x, _mm256_mul_ps(w, x));
}

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

DEF_MAP(ad_exp_f32_avx2, exp8)
DEF_MAP(ad_tanh_f32_avx2, tanh8)
DEF_MAP(ad_sigmoid_f32_avx2, sigmoid8)
DEF_MAP(ad_silu_f32_avx2, silu8)
DEF_MAP(ad_gelu_f32_avx2, gelu8)
DEF_MAP(ad_log_f32_avx2, log8)
