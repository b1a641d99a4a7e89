/* simd_avx512.c - AVX-512F float32 exp, tanh and the logistic family (16 lanes): the same
 * algorithm and operation order as simd_avx2.c, so both give the same bits. */
#include <immintrin.h>
#include <math.h>

#include "simd.h"

static inline __m512 exp16_reduced(__m512 xc, __m512 *n) { /* as exp8_reduced */
    *n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    return _mm512_add_ps(p, _mm512_set1_ps(1.0f));
}

static inline __m512 pow2i16(__m512i e) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127)), 23));
}

static inline __m512 exp16(__m512 x) {
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    __m512 n, p = exp16_reduced(xc, &n);
    __m512i ni = _mm512_cvtps_epi32(n);
    __m512i n1 = _mm512_srai_epi32(ni, 1), n2 = _mm512_sub_epi32(ni, n1);
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, pow2i16(n1)), pow2i16(n2));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

static inline __m512 exp16_mid(__m512 x) { /* as exp8_mid: -40 <= x <= 0 */
    __m512 n, p = exp16_reduced(x, &n);
    return _mm512_mul_ps(p, pow2i16(_mm512_cvtps_epi32(n)));
}

static inline __m512 tanh16(__m512 x) {
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512i xs = _mm512_and_si512(_mm512_castps_si512(x), sign);
    __m512 ax = _mm512_castsi512_ps(_mm512_andnot_si512(sign, _mm512_castps_si512(x)));
    __m512 z = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(-5.70498872745E-3f);
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954E-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531E-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036E-1f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422E-1f));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
    small = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(small), xs));
    __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
    __m512 y = small;
    if (is_small != 0xffff) {
        __m512 t = exp16_mid(
            _mm512_mul_ps(_mm512_min_ps(ax, _mm512_set1_ps(20.0f)), _mm512_set1_ps(-2.0f)));
        __m512 large = _mm512_div_ps(_mm512_sub_ps(one, t), _mm512_add_ps(one, t));
        large = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(large), xs));
        y = _mm512_mask_blend_ps(is_small, large, small);
    }
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

static inline __m512 log16_core(__m512 xs, __m512 e) { /* as log8_core in simd_avx2.c */
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512i bits = _mm512_castps_si512(xs);
    e = _mm512_add_ps(e, _mm512_cvtepi32_ps(
        _mm512_sub_epi32(_mm512_srli_epi32(bits, 23), _mm512_set1_epi32(126))));
    __m512 m = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_and_si512(bits, _mm512_set1_epi32(0x007fffff)), _mm512_set1_epi32(0x3f000000)));
    __mmask16 lo = _mm512_cmp_ps_mask(m, _mm512_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
    e = _mm512_mask_sub_ps(e, lo, e, one);
    __m512 f = _mm512_sub_ps(_mm512_mask_add_ps(m, lo, m, m), one);
    __m512 z = _mm512_mul_ps(f, f);
    __m512 p;
    SIMD_LOGF_POLY(p, f, _mm512_fmadd_ps, _mm512_set1_ps);
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, z), f);
    y = _mm512_fmadd_ps(e, _mm512_set1_ps(-2.12194440e-4f), y);
    y = _mm512_fnmadd_ps(z, _mm512_set1_ps(0.5f), y);
    return _mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), _mm512_add_ps(f, y));
}

static inline __m512 log16(__m512 x) { /* as log8 in simd_avx2.c */
    const __m512 fmin = _mm512_set1_ps(1.17549435e-38f), inf = _mm512_set1_ps(INFINITY);
    __mmask16 normal = _mm512_cmp_ps_mask(x, fmin, _CMP_GE_OQ) &
                       _mm512_cmp_ps_mask(x, inf, _CMP_LT_OQ);
    if (normal == 0xffff) return log16_core(x, _mm512_setzero_ps());
    __mmask16 tiny = _mm512_cmp_ps_mask(x, fmin, _CMP_LT_OQ);
    __m512 xs = _mm512_mask_mul_ps(x, tiny, x, _mm512_set1_ps(8388608.0f));
    __m512 r = log16_core(xs, _mm512_maskz_mov_ps(tiny, _mm512_set1_ps(-23.0f)));
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, inf, _CMP_EQ_OQ), r, x);
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ), r,
                             _mm512_set1_ps(-INFINITY));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NGE_UQ), r,
                                _mm512_set1_ps(NAN));
}

static inline __m512 logistic_div16(__m512 num, __m512 w) { /* num / (1 + e^w) */
    return _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(w)));
}

static inline __m512 neg_abs16(__m512 x) {
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}

/* as sigmoid_num8 in simd_avx2.c */
static inline __m512 sigmoid_num16(__m512 x, __m512 for_pos, __m512 for_neg, __m512 e) {
    __m512 num = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ),
                                      for_neg, for_pos);
    return _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

static inline __m512 sigmoid16(__m512 x) {
    __m512 e = exp16(neg_abs16(x));
    return sigmoid_num16(x, _mm512_set1_ps(1.0f), e, e);
}

static inline __m512 silu16(__m512 x) {
    __m512 e = exp16(neg_abs16(x));
    return sigmoid_num16(x, x, _mm512_mul_ps(x, e), e);
}

static inline __m512 gelu16(__m512 x) { /* -2u = x (-2c - 2ck x^2) */
    __m512 w = _mm512_fmadd_ps(_mm512_mul_ps(x, x), _mm512_set1_ps(GELU_M2CK_F),
                               _mm512_set1_ps(GELU_M2C_F));
    return logistic_div16(x, _mm512_mul_ps(w, x));
}

#define DEF_MAP(NAME, F)                                                               \
    void NAME(int64_t n, const float *x, int64_t sx, float *y) {                       \
        int64_t i = 0;                                                                 \
        if (sx == 1) {                                                                 \
            for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, F(_mm512_loadu_ps(x + i))); \
            if (i < n) {                                                               \
                __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                        \
                _mm512_mask_storeu_ps(y + i, m, F(_mm512_maskz_loadu_ps(m, x + i)));   \
            }                                                                          \
            return;                                                                    \
        }                                                                              \
        for (; i < n; i += 16) {                                                       \
            float buf[16] = {0};                                                       \
            int m = n - i < 16 ? (int)(n - i) : 16;                                    \
            for (int l = 0; l < m; l++) buf[l] = x[(i + l) * sx];                      \
            __mmask16 mk = (__mmask16)((1u << m) - 1);                                 \
            _mm512_mask_storeu_ps(y + i, mk, F(_mm512_loadu_ps(buf)));                 \
        }                                                                              \
    }

DEF_MAP(ad_exp_f32_avx512, exp16)
DEF_MAP(ad_tanh_f32_avx512, tanh16)
DEF_MAP(ad_sigmoid_f32_avx512, sigmoid16)
DEF_MAP(ad_silu_f32_avx512, silu16)
DEF_MAP(ad_gelu_f32_avx512, gelu16)
DEF_MAP(ad_log_f32_avx512, log16)
