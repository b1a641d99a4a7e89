/* simd_avx512.c - the float32 SIMD maps at AVX-512 (16 lanes; F and DQ): the
 * vector layer for simd_math.h, and the loops over arrays. */
#include <immintrin.h>
#include <stdint.h>

#include "simd_fold8.h"

typedef __m512 V;
typedef __m512i VI;
typedef __mmask16 M;
#define V_SET1 _mm512_set1_ps
#define V_ZERO _mm512_setzero_ps
#define V_ADD _mm512_add_ps
#define V_SUB _mm512_sub_ps
#define V_MUL _mm512_mul_ps
#define V_DIV _mm512_div_ps
#define V_SQRT _mm512_sqrt_ps
#define V_MIN _mm512_min_ps
#define V_MAX _mm512_max_ps
#define V_FMADD _mm512_fmadd_ps
#define V_FMSUB _mm512_fmsub_ps
#define V_FNMADD _mm512_fnmadd_ps
#define V_AND _mm512_and_ps
#define V_OR _mm512_or_ps
#define V_ANDNOT _mm512_andnot_ps
#define V_ROUND(x) _mm512_roundscale_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_TOI _mm512_cvtps_epi32
#define V_FROMI _mm512_cvtepi32_ps
#define V_BITS _mm512_castps_si512
#define V_FROMBITS _mm512_castsi512_ps
#define VI_SET1 _mm512_set1_epi32
#define VI_ADD _mm512_add_epi32
#define VI_SUB _mm512_sub_epi32
#define VI_AND _mm512_and_si512
#define VI_OR _mm512_or_si512
#define VI_SRAI _mm512_srai_epi32
#define VI_SRLI _mm512_srli_epi32
#define VI_SLLI _mm512_slli_epi32
#define V_CMP _mm512_cmp_ps_mask
#define V_SELECT(m, t, f) _mm512_mask_blend_ps((m), (f), (t))
#define M_AND(a, b) ((M)((a) & (b)))
#define M_OR(a, b) ((M)((a) | (b)))
#define M_ALL(m) ((m) == (M)0xffff)
#define V_LDEXP _mm512_scalef_ps /* p 2^floor(n), rounded once */
/* an 8-entry table in both halves; the lookup by index bits 0-2 (permutexvar
   takes bits 0-3: either half) */
#define V_TAB8(t) _mm512_broadcast_f32x8(_mm256_loadu_ps(t))
#define V_LOOKUP8(tab, i) _mm512_permutexvar_ps((i), (tab))

/* the softmax rows' layer (simd_math.h) */
#define VW 16
#define V_LOADU _mm512_loadu_ps
#define V_STOREU _mm512_storeu_ps
static inline __mmask16 first_n(int64_t n) { return (__mmask16)((1u << n) - 1); }
#define V_LOAD_PART(p, n, fill) _mm512_mask_loadu_ps(_mm512_set1_ps(fill), first_n(n), (p))
#define V_STORE_PART(p, n, v) _mm512_mask_storeu_ps((p), first_n(n), (v))
#define V_KEEP(v, n) _mm512_maskz_mov_ps(first_n(n), (v))
typedef struct { __m512d a[2]; } ROW_ACC; /* partial j: a[j / 8] lane j % 8 */
static inline void row_acc_zero(ROW_ACC *c) { c->a[0] = c->a[1] = _mm512_setzero_pd(); }
static inline void row_acc(ROW_ACC *c, __m512 e, int64_t i) {
    (void)i;
    c->a[0] = _mm512_add_pd(c->a[0], _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    c->a[1] = _mm512_add_pd(c->a[1], _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
}
/* the partials folded in registers: j + 8, then + 4, + 2, + 1 */
static inline double row_acc_sum(const ROW_ACC *c) {
    __m512d s8 = _mm512_add_pd(c->a[0], c->a[1]);
    __m256d s4 = _mm256_add_pd(_mm512_castpd512_pd256(s8), _mm512_extractf64x4_pd(s8, 1));
    __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}
#define ROW_D(NAME, OPD)                                                             \
    static inline __m512 NAME(__m512 v, double s) {                                  \
        __m512d d = _mm512_set1_pd(s);                                               \
        __m256 lo = _mm512_cvtpd_ps(OPD(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), d)); \
        __m256 hi = _mm512_cvtpd_ps(OPD(_mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)), d)); \
        return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);                \
    }
ROW_D(V_MUL_D, _mm512_mul_pd)
/* softmax's gradient rows: the products a b, exact in double, added to the
   partials as row_acc adds its terms */
static inline void row_acc_prod(ROW_ACC *c, __m512 a, __m512 b, int64_t i) {
    (void)i;
    c->a[0] = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(a)),
                              _mm512_cvtps_pd(_mm512_castps512_ps256(b)), c->a[0]);
    c->a[1] = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1)),
                              _mm512_cvtps_pd(_mm512_extractf32x8_ps(b, 1)), c->a[1]);
}

/* the double layer of cols_softmax's partials (simd_math.h): VD holds half a
   V's lanes in double, VD_LO / VD_HI its low and high half, V_FROM_VD2 the
   two rounded back to float32 */
typedef __m512d VD;
#define VD_LO(v) _mm512_cvtps_pd(_mm512_castps512_ps256(v))
#define VD_HI(v) _mm512_cvtps_pd(_mm512_extractf32x8_ps((v), 1))
#define V_FROM_VD2(lo, hi) \
    _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1)
#define VD_ZERO _mm512_setzero_pd
#define VD_SET1 _mm512_set1_pd
#define VD_ADD _mm512_add_pd
#define VD_SUB _mm512_sub_pd
#define VD_MUL _mm512_mul_pd
#define VD_FMADD _mm512_fmadd_pd
#define VD_STOREU _mm512_storeu_pd

/* layer_norm rows' 16 partial sums (simd_math.h's ACC16): lanes j + 8,
   then + 4, + 2, + 1; the softmax rows' largest lane (simd_fold8.h) */
#define V_FOLD16(a) \
    fold8_ps(_mm256_add_ps(_mm512_castps512_ps256((a)[0]), _mm512_extractf32x8_ps((a)[0], 1)))
#define V_HMAX(v) max8_ps(_mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps((v), 1)))

/* simd_math.h's gathered gelu_erf / erf (DEF_GATHERED) by compress / expand */
#define GATHER_INIT() ((void)0)
#define M_BITS(m) ((unsigned)(m))
#define V_COMPRESS(t, v) _mm512_maskz_compress_ps((__mmask16)(t), (v))
#define V_EXPAND(old, t, v) _mm512_mask_expand_ps((old), (__mmask16)(t), (v))
#define LANE_COUNT(t) ((unsigned)__builtin_popcount(t))

#include "simd_math.h"

/* Contiguous x: blocks of four vectors whose |x| are all below the op's
   OP_FAST_BOUND (simd_math.h; the largest |x| from the bits, so that NaN
   counts as large) take v_OP_fast, without a check per vector (on Zen 4 a
   compare into a mask register takes an FMA pipe, the bottleneck); the others,
   the last vectors and strided x take v_OP.  The same bits either way. */
#define DEF_MAP(NAME, OP)                                                              \
    void NAME(int64_t n, const float *x, int64_t sx, float *y) {                       \
        int64_t i = 0;                                                                 \
        if (sx == 1) {                                                                 \
            /* (folded at compile time) */                                            \
            if (v_##OP == v_gelu_erf) i = gelu_erf_contig(n, x, y);                    \
            if (v_##OP == v_erf) i = erf_contig(n, x, y);                              \
            if (OP##_FAST_BOUND > 0) {                                                 \
                const __m512i mag = _mm512_set1_epi32(0x7fffffff);                     \
                const __m512 bound = _mm512_set1_ps((float)OP##_FAST_BOUND);           \
                for (; i + 64 <= n; i += 64) {                                         \
                    __m512 a[4];                                                       \
                    __m512i m = _mm512_setzero_si512();                                \
                    for (int u = 0; u < 4; u++) {                                      \
                        a[u] = _mm512_loadu_ps(x + i + 16 * u);                        \
                        m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_castps_si512(a[u]), mag)); \
                    }                                                                  \
                    if (_mm512_cmp_ps_mask(_mm512_castsi512_ps(m), bound, _CMP_LT_OQ) == 0xffff) \
                        for (int u = 0; u < 4; u++) _mm512_storeu_ps(y + i + 16 * u, v_##OP##_fast(a[u])); \
                    else                                                               \
                        for (int u = 0; u < 4; u++) _mm512_storeu_ps(y + i + 16 * u, v_##OP(a[u])); \
                }                                                                      \
            }                                                                          \
            for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, v_##OP(_mm512_loadu_ps(x + i))); \
            if (i < n) {                                                               \
                __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                        \
                _mm512_mask_storeu_ps(y + i, m, v_##OP(_mm512_maskz_loadu_ps(m, x + i))); \
            }                                                                          \
            return;                                                                    \
        }                                                                              \
        for (; i < n; i += 16) {                                                       \
            float buf[16] = {0};                                                       \
            int m = n - i < 16 ? (int)(n - i) : 16;                                    \
            for (int l = 0; l < m; l++) buf[l] = x[(i + l) * sx];                      \
            __mmask16 mk = (__mmask16)((1u << m) - 1);                                 \
            _mm512_mask_storeu_ps(y + i, mk, v_##OP(_mm512_loadu_ps(buf)));            \
        }                                                                              \
    }

/* one map per SIMD_MAPS entry (simd.h), the list every level shares */
#define MAP_AVX512(OP, OPU) DEF_MAP(ad_##OP##_f32_avx512, OP)
SIMD_MAPS(MAP_AVX512)

#define SIMD_ISA avx512
#define V_STREAM _mm512_stream_ps
#include "simd_entries.h"
