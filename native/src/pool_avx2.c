/* pool_avx2.c - the 2x2 stride-2 max pool of one plane (nn.c's pool_2x2, with
 * its NaN and tie rules and bits) in AVX2 vectors, float32 and float64.
 * Compiled with -mavx2 (tools/build.py); called only after a CPU check, at
 * the AVX2 and the AVX-512 level alike.
 *
 * A vector of W windows (one output each) reads 2W elements of each input
 * row: two loads, split into the windows' left and right elements (EVEN /
 * ODD; the windows come out in the order PERM restores), and the inverse
 * (LO / HI) for the gradient's stores.  A row's last ow mod W windows run
 * as a whole vector where its extra lanes stay inside the call's rows, and
 * first: the elements they write are written again by the stores that
 * follow (the row's other vectors, the next rows), except an odd width's
 * last column, which the caller zeroes (nn_dtype.h pool_planes).  Else they
 * run last, with masked loads and stores (a masked store costs about as much
 * as a row of 7 windows on Zen 4). */
#include <immintrin.h>
#include <stdbool.h>

#include "nnops.h"

/* ---- the layer, per dtype -------------------------------------------------------- */
/* float32: 8 windows a vector, in the order 0 1 4 5 | 2 3 6 7 (PERM swaps
   the middle 64-bit pairs, and is its own inverse) */
#define F32_V __m256
#define F32_W 8
#define F32_LOAD(p, k) _mm256_maskload_ps((p), (k))
#define F32_LOADU _mm256_loadu_ps
#define F32_STOREU _mm256_storeu_ps
#define F32_STORE(p, k, v) _mm256_maskstore_ps((p), (k), (v))
#define F32_MASK(n) _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n)), \
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define F32_EVEN(a, b) _mm256_shuffle_ps((a), (b), 0x88)
#define F32_ODD(a, b) _mm256_shuffle_ps((a), (b), 0xdd)
#define F32_LO _mm256_unpacklo_ps
#define F32_HI _mm256_unpackhi_ps
#define F32_PERM(v) _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xd8))
#define F32_CMP _mm256_cmp_ps
#define F32_BLEND(f, t, m) _mm256_blendv_ps((f), (t), (m))
#define F32_AND _mm256_and_ps
#define F32_ANDNOT _mm256_andnot_ps
#define F32_OR _mm256_or_ps
#define F32_MAX _mm256_max_ps
#define F32_ADD _mm256_add_ps
#define F32_ZERO _mm256_setzero_ps
#define F32_NONE(k) _mm256_testz_ps((k), (k))

/* float64: 4 windows a vector, in the order 0 2 | 1 3 */
#define F64_V __m256d
#define F64_W 4
#define F64_LOAD(p, k) _mm256_maskload_pd((p), (k))
#define F64_LOADU _mm256_loadu_pd
#define F64_STOREU _mm256_storeu_pd
#define F64_STORE(p, k, v) _mm256_maskstore_pd((p), (k), (v))
#define F64_MASK(n) _mm256_cmpgt_epi64(_mm256_set1_epi64x((n)), _mm256_setr_epi64x(0, 1, 2, 3))
#define F64_EVEN _mm256_unpacklo_pd
#define F64_ODD _mm256_unpackhi_pd
#define F64_LO _mm256_unpacklo_pd
#define F64_HI _mm256_unpackhi_pd
#define F64_PERM(v) _mm256_permute4x64_pd((v), 0xd8)
#define F64_CMP _mm256_cmp_pd
#define F64_BLEND(f, t, m) _mm256_blendv_pd((f), (t), (m))
#define F64_AND _mm256_and_pd
#define F64_ANDNOT _mm256_andnot_pd
#define F64_OR _mm256_or_pd
#define F64_MAX _mm256_max_pd
#define F64_ADD _mm256_add_pd
#define F64_ZERO _mm256_setzero_pd
#define F64_NONE(k) _mm256_testz_pd((k), (k))

/* ---- the plane, written once --------------------------------------------------- */
/* nn.c's window rule, lane by lane: m = a, then b, c, d each taken when greater
   or NaN, a again when NaN (so a tie keeps the first, a NaN wins: a's, else
   the last one); the flags h0..h2 mark the first element equal to m or NaN
   (the argmax), `taken` their union (h3 is its complement).  Without a NaN
   in the vector, plain max and equality give the same.  n: the windows left
   in the row; from W on, whole vectors (the masks fold away). */
#define LOADM(P, p, k) (full ? P##_LOADU(p) : P##_LOAD((p), (k)))
#define STOREM(P, p, k, v) (full ? P##_STOREU((p), (v)) : P##_STORE((p), (k), (v)))
#define DEF_POOL2X2(T, P, SUF)                                                             \
    static inline P##_V P##_take(P##_V m, P##_V v) {                                        \
        P##_V more = P##_OR(P##_CMP(v, m, _CMP_GT_OQ), P##_CMP(v, v, _CMP_UNORD_Q));        \
        return P##_BLEND(m, v, more);                                                       \
    }                                                                                       \
    static inline P##_V P##_hit(P##_V v, P##_V m) {                                         \
        return P##_OR(P##_CMP(v, m, _CMP_EQ_OQ), P##_CMP(v, v, _CMP_UNORD_Q));             \
    }                                                                                       \
    /* windows j .. j + min(n, W) - 1 of output row i */                                   \
    static inline __attribute__((always_inline)) void P##_windows(                          \
        int kind, int64_t w, int64_t ow, int64_t i, int64_t j, int64_t n, const T *x,       \
        const T *gy, T *y) {                                                                \
        const int64_t W = P##_W;                                                            \
        const int full = n >= W;                                                            \
        const __m256i k0 = P##_MASK(2 * n), k1 = P##_MASK(2 * n - W), kg = P##_MASK(n);    \
        const T *r0 = x + 2 * i * w + 2 * j, *r1 = r0 + w;                                 \
        P##_V u0 = LOADM(P, r0, k0), u1 = LOADM(P, r0 + W, k1);                             \
        P##_V v0 = LOADM(P, r1, k0), v1 = LOADM(P, r1 + W, k1);                             \
        P##_V a = P##_EVEN(u0, u1), b = P##_ODD(u0, u1);                                    \
        P##_V c = P##_EVEN(v0, v1), d = P##_ODD(v0, v1);                                    \
        P##_V m, h0, h1, h2, taken;                                                         \
        P##_V nan = P##_OR(P##_CMP(a, b, _CMP_UNORD_Q), P##_CMP(c, d, _CMP_UNORD_Q));       \
        if (P##_NONE(nan)) { /* max's second operand on a tie: the first is kept */         \
            m = P##_MAX(d, P##_MAX(c, P##_MAX(b, a)));                                      \
            if (kind == POOL_FWD) goto store;                                               \
            h0 = P##_CMP(a, m, _CMP_EQ_OQ);                                                 \
            h1 = P##_ANDNOT(h0, P##_CMP(b, m, _CMP_EQ_OQ));                                 \
            taken = P##_OR(h0, h1);                                                         \
            h2 = P##_ANDNOT(taken, P##_CMP(c, m, _CMP_EQ_OQ));                              \
        } else {                                                                            \
            m = P##_take(P##_take(P##_take(a, b), c), d);                                   \
            m = P##_BLEND(m, a, P##_CMP(a, a, _CMP_UNORD_Q));                               \
            if (kind == POOL_FWD) goto store;                                               \
            h0 = P##_hit(a, m), h1 = P##_ANDNOT(h0, P##_hit(b, m));                         \
            taken = P##_OR(h0, h1), h2 = P##_ANDNOT(taken, P##_hit(c, m));                  \
        }                                                                                   \
        taken = P##_OR(taken, h2);                                                          \
        if (kind == POOL_BWD) {                                                             \
            /* + 0: a -0 gradient arrives as +0, as the other windows' sums give */        \
            P##_V g = P##_ADD(P##_PERM(LOADM(P, gy + i * ow + j, kg)), P##_ZERO());          \
            P##_V ga = P##_AND(h0, g), gb = P##_AND(h1, g);                                 \
            P##_V gc = P##_AND(h2, g), gd = P##_ANDNOT(taken, g);                           \
            T *y0 = y + 2 * i * w + 2 * j, *y1 = y0 + w;                                    \
            STOREM(P, y0, k0, P##_LO(ga, gb));                                              \
            STOREM(P, y0 + W, k1, P##_HI(ga, gb));                                          \
            STOREM(P, y1, k0, P##_LO(gc, gd));                                              \
            STOREM(P, y1 + W, k1, P##_HI(gc, gd));                                          \
            return;                                                                         \
        }                                                                                   \
        const T *t0 = gy + 2 * i * w + 2 * j, *t1 = t0 + w;                                 \
        P##_V s0 = LOADM(P, t0, k0), s1 = LOADM(P, t0 + W, k1);                             \
        P##_V q0 = LOADM(P, t1, k0), q1 = LOADM(P, t1 + W, k1);                             \
        P##_V v = P##_BLEND(P##_ODD(q0, q1), P##_EVEN(q0, q1), h2);                         \
        v = P##_BLEND(v, P##_ODD(s0, s1), h1);                                              \
        v = P##_BLEND(v, P##_EVEN(s0, s1), h0);                                             \
        STOREM(P, y + i * ow + j, kg, P##_PERM(v));                                         \
        return;                                                                             \
    store:                                                                                  \
        STOREM(P, y + i * ow + j, kg, P##_PERM(m));                                         \
    }                                                                                       \
    void ad_pool2x2_avx2_##SUF(int kind, int64_t w, int64_t oh, int64_t ow, const T *x,     \
                               const T *gy, T *y) {                                         \
        const int64_t W = P##_W, jt = ow - ow % W;                                          \
        for (int64_t i = 0; i < oh; i++) {                                                  \
            /* the last ow % W windows: see the top of the file */                         \
            bool room = jt < ow && (2 * i + 1) * w + 2 * jt + 2 * W <= 2 * oh * w &&        \
                        i * ow + jt + W <= oh * ow;                                         \
            if (room) P##_windows(kind, w, ow, i, jt, W, x, gy, y);                         \
            for (int64_t j = 0; j < jt; j += W) P##_windows(kind, w, ow, i, j, W, x, gy, y);  \
            if (jt < ow && !room) P##_windows(kind, w, ow, i, jt, ow - jt, x, gy, y);       \
        }                                                                                   \
    }
DEF_POOL2X2(float, F32, f32)
DEF_POOL2X2(double, F64, f64)
