/* simd_fold8.h - an 8-lane float32 vector folded to one value, shared by
 * simd_avx2.c and simd_avx512.c (the AVX-512 level folds its 16 lanes to 8
 * first): fold8_ps the sum, lanes j + 4, then + 2, + 1 (the layer_norm rows'
 * fixed order, simd_math.h's ACC16); max8_ps the largest lane (the softmax
 * rows' maximum; no lane is NaN).  Included after <immintrin.h>. */
#ifndef AD_SIMD_FOLD8_H
#define AD_SIMD_FOLD8_H

static inline float fold8_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float max8_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

#endif
