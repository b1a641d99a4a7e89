/* simd_avx2.c - the float32 SIMD maps at AVX2/FMA (8 lanes): the vector
 * layer for simd_math.h, and the loops over arrays. */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "simd_fold8.h"

typedef __m256 V;
typedef __m256i VI;
typedef __m256 M;
#define V_SET1 _mm256_set1_ps
#define V_ZERO _mm256_setzero_ps
#define V_ADD _mm256_add_ps
#define V_SUB _mm256_sub_ps
#define V_MUL _mm256_mul_ps
#define V_DIV _mm256_div_ps
#define V_SQRT _mm256_sqrt_ps
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
#define M_OR _mm256_or_ps
#define M_ALL(m) (_mm256_movemask_ps(m) == 0xff)
/* p 2^n (simd_math.h: 1/16 <= |p| < 4, n integer-valued).  When every lane
   has |n| <= 120 the product is normal and exact: n is added to p's exponent
   field.  Otherwise p 2^(n/2) (exact) times 2^(n - n/2), the one rounding:
   scalef's result, without AVX-512. */
static inline __m256 pow2_bits(__m256i e) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}
static inline __m256 ldexp_avx2(__m256 p, __m256 n) {
    __m256i ni = _mm256_cvtps_epi32(n); /* NaN: INT_MIN, out of range */
    __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(ni, _mm256_set1_epi32(120)),
                                  _mm256_cmpgt_epi32(_mm256_set1_epi32(-120), ni));
    if (_mm256_testz_si256(out, out))
        return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(ni, 23)));
    __m256i n1 = _mm256_srai_epi32(ni, 1);
    return _mm256_mul_ps(_mm256_mul_ps(p, pow2_bits(n1)), pow2_bits(_mm256_sub_epi32(ni, n1)));
}
#define V_LDEXP ldexp_avx2
#define V_TAB8 _mm256_loadu_ps /* an 8-entry table, looked up by index bits 0-2 */
#define V_LOOKUP8(tab, i) _mm256_permutevar8x32_ps((tab), (i))

/* the softmax rows' layer (simd_math.h) */
#define VW 8
#define V_LOADU _mm256_loadu_ps
#define V_STOREU _mm256_storeu_ps
static inline __m256 first_n(int64_t n) { /* lanes < n all ones */
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)n),
                                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}
static inline __m256 load_part(const float *p, int64_t n, float fill) {
    return _mm256_blendv_ps(_mm256_set1_ps(fill),
                            _mm256_maskload_ps(p, _mm256_castps_si256(first_n(n))), first_n(n));
}
#define V_LOAD_PART load_part
#define V_STORE_PART(p, n, v) _mm256_maskstore_ps((p), _mm256_castps_si256(first_n(n)), (v))
#define V_KEEP(v, n) _mm256_and_ps((v), first_n(n))
typedef struct { __m256d a[4]; } ROW_ACC; /* partial j: a[j / 4] lane j % 4 */
static inline void row_acc_zero(ROW_ACC *c) {
    c->a[0] = c->a[1] = c->a[2] = c->a[3] = _mm256_setzero_pd();
}
static inline void row_acc(ROW_ACC *c, __m256 e, int64_t i) {
    int k = (i & 8) ? 2 : 0; /* elements 8..15 of a step of 16 */
    c->a[k] = _mm256_add_pd(c->a[k], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    c->a[k + 1] = _mm256_add_pd(c->a[k + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
}
/* the partials folded in registers: j + 8, then + 4, + 2, + 1 */
static inline double row_acc_sum(const ROW_ACC *c) {
    __m256d s4 = _mm256_add_pd(_mm256_add_pd(c->a[0], c->a[2]), _mm256_add_pd(c->a[1], c->a[3]));
    __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}
#define ROW_D(NAME, OPD)                                                             \
    static inline __m256 NAME(__m256 v, double s) {                                  \
        __m256d d = _mm256_set1_pd(s);                                               \
        __m128 lo = _mm256_cvtpd_ps(OPD(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), d)); \
        __m128 hi = _mm256_cvtpd_ps(OPD(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), d)); \
        return _mm256_set_m128(hi, lo);                                              \
    }
ROW_D(V_MUL_D, _mm256_mul_pd)
/* softmax's gradient rows: the products a b, exact in double, added to the
   partials as row_acc adds its terms */
static inline void row_acc_prod(ROW_ACC *c, __m256 a, __m256 b, int64_t i) {
    int k = (i & 8) ? 2 : 0;
    c->a[k] = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(a)),
                              _mm256_cvtps_pd(_mm256_castps256_ps128(b)), c->a[k]);
    c->a[k + 1] = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)),
                                  _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)), c->a[k + 1]);
}

/* the double layer of cols_softmax's partials (simd_math.h): VD holds half a
   V's lanes in double, VD_LO / VD_HI its low and high half, V_FROM_VD2 the
   two rounded back to float32 */
typedef __m256d VD;
#define VD_LO(v) _mm256_cvtps_pd(_mm256_castps256_ps128(v))
#define VD_HI(v) _mm256_cvtps_pd(_mm256_extractf128_ps((v), 1))
#define V_FROM_VD2(lo, hi) _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo))
#define VD_ZERO _mm256_setzero_pd
#define VD_SET1 _mm256_set1_pd
#define VD_ADD _mm256_add_pd
#define VD_SUB _mm256_sub_pd
#define VD_MUL _mm256_mul_pd
#define VD_FMADD _mm256_fmadd_pd
#define VD_STOREU _mm256_storeu_pd

/* layer_norm rows' 16 partial sums (simd_math.h's ACC16): lanes j + 8,
   then + 4, + 2, + 1; the softmax rows' largest lane (simd_fold8.h) */
#define V_FOLD16(a) fold8_ps(_mm256_add_ps((a)[0], (a)[1]))
#define V_HMAX max8_ps

/* simd_math.h's gathered gelu_erf / erf (DEF_GATHERED): AVX2 has no compress
   / expand, so a lane permutation from a table does it.  lane_pick[t] for an
   8-lane mask t: 3 bits a lane, the lanes set in t in order (the compress:
   set lanes first), the count in bits 24-31; lane_rank[t]: for each lane set
   in t its rank among them (the expand). */
static uint32_t lane_pick[256], lane_rank[256];
static pthread_once_t lane_tables_once = PTHREAD_ONCE_INIT;

static void lane_tables_init(void) {
    for (uint32_t t = 0; t < 256; t++) {
        uint32_t pick = 0, rank = 0, k = 0;
        for (uint32_t j = 0; j < 8; j++)
            if (t >> j & 1) {
                pick |= j << (3 * k);
                rank |= k << (3 * j);
                k++;
            }
        lane_pick[t] = pick | k << 24;
        lane_rank[t] = rank;
    }
}

static inline __m256i lane_indices(uint32_t packed) {
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)packed),
                                              _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21)),
                            _mm256_set1_epi32(7));
}

static inline __m256 lanes_set(uint32_t t) { /* all ones in the lanes set in t */
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_castsi256_ps(
        _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)t), bit), bit));
}
#define GATHER_INIT() pthread_once(&lane_tables_once, lane_tables_init)
#define M_BITS(m) ((unsigned)_mm256_movemask_ps(m))
#define V_COMPRESS(t, v) _mm256_permutevar8x32_ps((v), lane_indices(lane_pick[t]))
#define V_EXPAND(old, t, v) \
    _mm256_blendv_ps((old), _mm256_permutevar8x32_ps((v), lane_indices(lane_rank[t])), lanes_set(t))
#define LANE_COUNT(t) (lane_pick[t] >> 24)

#include "simd_math.h"

#define DEF_MAP(NAME, F)                                                            \
    void NAME(int64_t n, const float *x, int64_t sx, float *y) {                    \
        int64_t i = 0;                                                              \
        if (sx == 1) {                                                              \
            /* (folded at compile time) */                                         \
            if (F == v_gelu_erf) i = gelu_erf_contig(n, x, y);                      \
            if (F == v_erf) i = erf_contig(n, x, y);                                \
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

#define SIMD_ISA avx2
#define V_STREAM _mm256_stream_ps
#include "simd_entries.h"
